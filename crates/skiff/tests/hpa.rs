//! HorizontalPodAutoscalers end to end with the real kubectl on simulated nodes: `kubectl
//! autoscale`, `kubectl get hpa`'s columns, the same object read as autoscaling/v1 and v2,
//! Kubernetes' 422 causes, and the controller's conditions on the target it scales.

mod common;

use common::Server;

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: nginx
        resources: {requests: {cpu: 100m}}
"#;

#[test]
fn kubectl_autoscale_creates_an_hpa_served_as_v2_and_v1_that_the_controller_picks_up() {
    let server = Server::start_with(&["--simulated-nodes", "1", "--horizontal-pod-autoscaler-sync-period", "1s"]);
    server.ok_stdin(&["apply", "-f", "-"], DEPLOYMENT);
    let out = server.ok(&["autoscale", "deployment", "web", "--cpu-percent=50", "--min=1", "--max=5"]);
    assert!(out.contains("horizontalpodautoscaler.autoscaling/web autoscaled"), "{out}");

    let table = server.ok(&["get", "hpa"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["web", "Deployment/web", "cpu:"], "{table}");
    assert!(row[3].ends_with("/50%"), "{table}");
    assert_eq!(&row[4..6], ["1", "5"], "{table}");

    // v2 is the preferred version; v1 reads the same object with the CPU target in its field.
    let v2 = server.json(&["get", "hpa", "web"]);
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 50);
    let v1 = server.json(&["get", "horizontalpodautoscalers.v1.autoscaling", "web"]);
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(v1["spec"]["minReplicas"], 1);

    // The controller reads the Deployment's scale and, with no resource metrics to read yet
    // or an idle target, records why in its conditions.
    let hpa = server.eventually(30, "the controller's conditions", || {
        let hpa = server.json(&["get", "hpa", "web"]);
        let synced = hpa["status"]["conditions"].as_array().is_some_and(|c| c.len() >= 2);
        synced.then_some(hpa)
    });
    let able = hpa["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "AbleToScale").unwrap();
    assert_eq!(able["status"], "True", "{hpa}");
    assert_eq!(hpa["status"]["currentReplicas"], 1, "{hpa}");

    // An HPA written as v1 without a target gets v1's implied 80 %.
    server.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: implied, namespace: default}\n\
         spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}, maxReplicas: 3}\n",
    );
    let implied = server.json(&["get", "hpa", "implied"]);
    assert_eq!(implied["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 80);
}

#[test]
fn an_invalid_hpa_is_refused_with_kubernetes_causes() {
    let server = Server::start();
    let bad = server.apply_stdin(
        &["create", "-f", "-"],
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad, namespace: default}\n\
         spec:\n  scaleTargetRef: {kind: Deployment, name: web}\n  minReplicas: 4\n  maxReplicas: 2\n  metrics:\n\
         \x20 - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 0}}\n",
    );
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "{err}");
    assert!(
        err.contains("spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"),
        "{err}"
    );
    assert!(
        err.contains("spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0"),
        "{err}"
    );
}

const BUSY: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: busy
  namespace: default
spec:
  replicas: 1
  selector: {matchLabels: {app: busy}}
  template:
    metadata:
      labels: {app: busy}
      annotations: {skiff.io/simulated-cpu-usage: 90m}
    spec:
      containers:
      - name: app
        image: nginx
        resources: {requests: {cpu: 100m}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: busy
  namespace: default
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: busy}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 5
      policies: [{type: Percent, value: 100, periodSeconds: 15}]
"#;

fn spec_replicas(server: &Server) -> i64 {
    server.json(&["get", "deployment", "busy"])["spec"]["replicas"].as_i64().unwrap_or(0)
}

#[test]
fn an_hpa_scales_a_deployment_up_under_load_and_back_down_after_its_window() {
    let server = Server::start_with(&[
        "--simulated-nodes",
        "1",
        "--metric-resolution",
        "1s",
        "--horizontal-pod-autoscaler-sync-period",
        "1s",
    ]);
    server.ok_stdin(&["apply", "-f", "-"], BUSY);
    // 90 % of the request against a 50 % target: up to the maximum of 3.
    server.eventually(120, "the HPA to scale busy up to 3", || (spec_replicas(&server) == 3).then_some(()));
    let hpa = server.json(&["get", "hpa", "busy"]);
    let util = hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"].as_i64();
    assert!(util.is_some_and(|u| u > 50), "{hpa}");
    server.eventually(30, "the SuccessfulRescale event", || {
        let events =
            server.ok(&["get", "events", "--field-selector", "involvedObject.name=busy,reason=SuccessfulRescale"]);
        events.contains("cpu resource utilization (percentage of request) above target").then_some(())
    });

    // The load goes away: after the 5 s scale-down window, back to the minimum.
    server.ok(&["annotate", "pods", "-l", "app=busy", "skiff.io/simulated-cpu-usage=5m", "--overwrite"]);
    server.eventually(120, "the HPA to scale busy down to 1", || (spec_replicas(&server) == 1).then_some(()));
    let table = server.ok(&["get", "hpa", "busy"]);
    assert!(table.contains("Deployment/busy"), "{table}");
}
