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
