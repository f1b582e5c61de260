//! StatefulSets end to end with the real kubectl on simulated nodes: ordered start, a rolling
//! update with a partition, scale down from the highest ordinal, `kubectl rollout
//! status/history/undo` and `kubectl scale`; claim templates creating one claim per pod that
//! outlives scale-down (simulated nodes run pods on unbound claims: the scheduler has no volume
//! binding yet).

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::Server;
use serde_json::Value;

/// Three nginx replicas under the headless Service `web`, OrderedReady; the pods need a node
/// labelled `stage=go`.
const WEB: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80, name: http}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {stage: go}
      containers: [{name: nginx, image: "nginx:1"}]
"#;

/// Two Parallel replicas, each with its own `data` claim mounted at /data.
const DB: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 2
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: db
        image: postgres
        volumeMounts: [{name: data, mountPath: /var/lib/postgresql/data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
"#;

fn pod_names(server: &Server, selector: &str) -> Vec<String> {
    let list = server.json(&["get", "pods", "-l", selector]);
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn ready_since(pod: &Value) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
}

#[test]
fn a_statefulset_starts_in_order_updates_above_its_partition_and_scales_down_from_the_top() {
    let server = Server::start_with(&["--simulated-nodes", "2"]);
    server.eventually(60, "two Ready nodes", || {
        let nodes = server.json(&["get", "nodes"]);
        let ready = nodes["items"]
            .as_array()?
            .iter()
            .filter(|n| {
                n["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
            })
            .count();
        (ready == 2).then_some(())
    });
    server.ok_stdin(&["apply", "-f", "-"], WEB);

    // web-0 cannot be scheduled: once the controller has seen it (status.replicas 1), it has
    // not created web-1.
    server.eventually(60, "web-0 observed", || {
        let sts = server.json(&["get", "sts", "web"]);
        (sts["status"]["replicas"] == 1).then_some(())
    });
    assert_eq!(pod_names(&server, "app=web"), ["web-0"]);
    let web0 = server.json(&["get", "pod", "web-0"]);
    assert_eq!(web0["spec"]["hostname"], "web-0");
    assert_eq!(web0["spec"]["subdomain"], "web");
    assert_eq!(web0["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"], "web-0");
    assert_eq!(web0["metadata"]["labels"]["apps.kubernetes.io/pod-index"], "0");

    // Once a node fits, the pods start one after another, each after its predecessor is Ready.
    server.ok(&["label", "nodes", "--all", "stage=go"]);
    server.ok(&["rollout", "status", "sts/web", "--timeout=90s"]);
    let pods: Vec<Value> = (0..3).map(|i| server.json(&["get", "pod", &format!("web-{i}")])).collect();
    for i in 1..3 {
        let created = pods[i]["metadata"]["creationTimestamp"].as_str().unwrap();
        let predecessor_ready = ready_since(&pods[i - 1]).expect("predecessor Ready");
        assert!(
            created >= predecessor_ready.as_str(),
            "web-{i} created {created} before web-{} was Ready at {predecessor_ready}",
            i - 1
        );
    }
    let sts = server.json(&["get", "sts", "web"]);
    let first_revision = sts["status"]["currentRevision"].as_str().unwrap().to_string();
    assert_eq!(sts["status"]["updateRevision"], first_revision);
    assert!(pods.iter().all(|p| p["metadata"]["labels"]["controller-revision-hash"] == first_revision));

    // A rolling update with partition 2 replaces web-2 only.
    server.ok(&["patch", "sts", "web", "-p", r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}}}}"#]);
    server.ok(&["set", "image", "sts/web", "nginx=nginx:2"]);
    let out = server.ok(&["rollout", "status", "sts/web", "--timeout=90s"]);
    assert!(out.contains("partitioned roll out complete: 1 new pods have been updated"), "{out}");
    let sts = server.json(&["get", "sts", "web"]);
    let update_revision = sts["status"]["updateRevision"].as_str().unwrap().to_string();
    assert_ne!(update_revision, first_revision);
    assert_eq!(sts["status"]["currentRevision"], first_revision);
    assert_eq!(sts["status"]["updatedReplicas"], 1);
    for (i, image, revision) in
        [(0, "nginx:1", &first_revision), (1, "nginx:1", &first_revision), (2, "nginx:2", &update_revision)]
    {
        let p = server.json(&["get", "pod", &format!("web-{i}")]);
        assert_eq!(p["spec"]["containers"][0]["image"], image, "web-{i}");
        assert_eq!(p["metadata"]["labels"]["controller-revision-hash"], revision.as_str(), "web-{i}");
    }
    let revision2 = server.ok(&["rollout", "history", "sts/web", "--revision=2"]);
    assert!(revision2.contains("nginx:2"), "{revision2}");
    let history = server.ok(&["rollout", "history", "sts/web"]);
    assert!(
        history.lines().any(|l| l.trim_start().starts_with('1'))
            && history.lines().any(|l| l.trim_start().starts_with('2')),
        "{history}"
    );

    // Undo goes back to the first template: web-2 is replaced again, at the first revision.
    server.ok(&["rollout", "undo", "sts/web"]);
    server.eventually(90, "every pod back at nginx:1 and Ready", || {
        let pods: Vec<Value> = (0..3).map(|i| server.json(&["get", "pod", &format!("web-{i}")])).collect();
        pods.iter().all(|p| p["spec"]["containers"][0]["image"] == "nginx:1" && ready_since(p).is_some()).then_some(())
    });
    server.ok(&["rollout", "status", "sts/web", "--timeout=90s"]);
    let sts = server.json(&["get", "sts", "web"]);
    assert_eq!(sts["status"]["currentRevision"], first_revision);
    assert_eq!(sts["status"]["updateRevision"], first_revision);

    // Scale down removes web-2, then web-1: a watch sees the deletions in that order.
    let mut watch = server
        .command(&["get", "pods", "-l", "app=web", "--watch", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // (event, pod) of each watch line after the header.
    let mut events: Vec<(String, String)> = Vec::new();
    let next_event = || {
        let line =
            rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("watch went quiet\n{}", server.log()));
        let mut words = line.split_whitespace();
        (words.next().unwrap_or_default().to_string(), words.next().unwrap_or_default().to_string())
    };
    // The initial list arrives as ADDED events: the watch is running before the scale.
    while events.iter().filter(|(e, _)| e == "ADDED").count() < 3 {
        events.push(next_event());
    }
    server.ok(&["scale", "sts", "web", "--replicas=1"]);
    while events.iter().filter(|(e, _)| e == "DELETED").count() < 2 {
        events.push(next_event());
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let deleted: Vec<&str> = events.iter().filter(|(e, _)| e == "DELETED").map(|(_, p)| p.as_str()).collect();
    assert_eq!(deleted, ["web-2", "web-1"], "{events:?}");
    server.ok(&["rollout", "status", "sts/web", "--timeout=60s"]);
    assert_eq!(pod_names(&server, "app=web"), ["web-0"]);
}

#[test]
fn claim_templates_give_each_pod_its_own_claim_which_outlives_scale_down() {
    let server = Server::start_with(&["--simulated-nodes", "1"]);
    server.ok_stdin(&["apply", "-f", "-"], DB);
    server.ok(&["rollout", "status", "sts/db", "--timeout=90s"]);
    let claims = server.json(&["get", "pvc", "-l", "app=db"]);
    let mut names: Vec<&str> =
        claims["items"].as_array().unwrap().iter().map(|c| c["metadata"]["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["data-db-0", "data-db-1"]);
    for i in 0..2 {
        let p = server.json(&["get", "pod", &format!("db-{i}")]);
        let volume = p["spec"]["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "data").cloned().unwrap();
        assert_eq!(volume["persistentVolumeClaim"]["claimName"], format!("data-db-{i}"));
    }
    let uid = |name: &str| server.json(&["get", "pvc", name])["metadata"]["uid"].as_str().unwrap().to_string();
    let claim1 = uid("data-db-1");

    server.ok(&["scale", "sts", "db", "--replicas=1"]);
    server.eventually(60, "db-1 gone", || (pod_names(&server, "app=db") == ["db-0"]).then_some(()));
    assert_eq!(uid("data-db-1"), claim1, "the claim of the scaled-down pod is kept");

    server.ok(&["scale", "sts", "db", "--replicas=2"]);
    server.ok(&["rollout", "status", "sts/db", "--timeout=90s"]);
    let p = server.json(&["get", "pod", "db-1"]);
    let volume = p["spec"]["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "data").cloned().unwrap();
    assert_eq!(volume["persistentVolumeClaim"]["claimName"], "data-db-1");
    assert_eq!(uid("data-db-1"), claim1, "the recreated pod reuses its claim");
}

#[test]
fn invalid_statefulsets_are_refused_with_kubernetes_messages() {
    let server = Server::start();
    let bad = DB
        .replace("mountPath: /var/lib/postgresql/data", "mountPath: /x}, {name: logs, mountPath: /logs")
        .replace("podManagementPolicy: Parallel", "podManagementPolicy: Random");
    let err = String::from_utf8_lossy(&server.apply_stdin(&["apply", "-f", "-"], &bad).stderr).into_owned();
    assert!(err.contains(r#"spec.template.spec.containers[0].volumeMounts[1].name: Not found: "logs""#), "{err}");
    assert!(
        err.contains(r#"spec.podManagementPolicy: Invalid value: "Random": must be 'OrderedReady' or 'Parallel'"#),
        "{err}"
    );
    assert!(!err.contains("volumeMounts[0]"), "{err}");

    server.ok_stdin(&["apply", "-f", "-"], DB);
    let err = server.fails(&["patch", "sts", "db", "-p", r#"{"spec":{"serviceName":"other"}}"#]);
    assert!(
        err.contains("spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"),
        "{err}"
    );
    server.ok(&[
        "patch",
        "sts",
        "db",
        "-p",
        r#"{"spec":{"minReadySeconds":5,"persistentVolumeClaimRetentionPolicy":{"whenScaled":"Delete"}}}"#,
    ]);
}
