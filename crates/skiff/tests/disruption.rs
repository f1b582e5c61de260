//! Disruption end to end with the real kubectl on simulated nodes: `kubectl drain` refuses to
//! break a PodDisruptionBudget and succeeds once the budget allows it; a ReplicationController
//! keeps its replicas.

mod common;

use common::Server;

/// The Ready pods matching `selector`, with their nodes.
fn ready_pods(server: &Server, selector: &str) -> Vec<(String, String)> {
    let pods = server.json(&["get", "pods", "-l", selector]);
    pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
        .map(|p| {
            (p["metadata"]["name"].as_str().unwrap().to_string(), p["spec"]["nodeName"].as_str().unwrap().to_string())
        })
        .collect()
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: nginx:1.25
"#;

const BUDGET: &str = r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
spec:
  minAvailable: 2
  selector:
    matchLabels: {app: web}
"#;

#[test]
fn drain_refuses_to_break_a_budget_and_succeeds_once_the_budget_allows() {
    let server = Server::start_with(&["--simulated-nodes", "2"]);
    server.ok_stdin(&["apply", "-f", "-"], DEPLOYMENT);
    server.ok_stdin(&["apply", "-f", "-"], BUDGET);
    let pods = server.eventually(60, "two ready pods", || {
        let p = ready_pods(&server, "app=web");
        (p.len() == 2).then_some(p)
    });
    // The budget's status, kept by the disruption controller: 2 healthy, 2 wanted, none to spare.
    server.eventually(60, "the budget's status", || {
        let pdb = server.json(&["get", "pdb", "web"]);
        let s = &pdb["status"];
        (s["currentHealthy"] == 2 && s["desiredHealthy"] == 2 && s["expectedPods"] == 2 && s["disruptionsAllowed"] == 0)
            .then_some(())
    });
    let node = pods[0].1.clone();

    // Drain cordons the node, then retries the refused eviction until its timeout.
    let out = server.kubectl(&["drain", &node, "--ignore-daemonsets", "--timeout=12s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "drain broke the budget: {stderr}");
    assert!(stderr.contains("Cannot evict pod as it would violate the pod's disruption budget"), "{stderr}");
    assert_eq!(server.json(&["get", "node", &node])["spec"]["unschedulable"], true);
    assert_eq!(ready_pods(&server, "app=web").len(), 2, "no pod was evicted");

    // Relax the budget: one pod may go at a time; drain now empties the node.
    server.ok(&["patch", "pdb", "web", "--type=merge", "-p", r#"{"spec":{"minAvailable":1}}"#]);
    server.eventually(60, "the relaxed budget's status", || {
        let pdb = server.json(&["get", "pdb", "web"]);
        (pdb["status"]["disruptionsAllowed"] == 1
            && pdb["status"]["observedGeneration"] == pdb["metadata"]["generation"])
            .then_some(())
    });
    let out = server.ok(&["drain", &node, "--ignore-daemonsets", "--timeout=120s"]);
    assert!(out.contains(&format!("node/{node} drained")), "{out}");
    assert_eq!(server.json(&["get", "node", &node])["spec"]["unschedulable"], true);
    // The Deployment's pods are back to two, all on the other node.
    server.eventually(60, "two ready pods elsewhere", || {
        let p = ready_pods(&server, "app=web");
        (p.len() == 2 && p.iter().all(|(_, n)| *n != node)).then_some(())
    });
}

const RC: &str = r#"
apiVersion: v1
kind: ReplicationController
metadata:
  name: legacy
spec:
  replicas: 3
  selector: {app: legacy}
  template:
    metadata:
      labels: {app: legacy}
    spec:
      containers:
      - name: c
        image: nginx:1.25
"#;

#[test]
fn a_replication_controller_keeps_its_replicas() {
    let server = Server::start_with(&["--simulated-nodes", "2"]);
    server.ok_stdin(&["apply", "-f", "-"], RC);
    let pods = server.eventually(60, "three ready pods", || {
        let p = ready_pods(&server, "app=legacy");
        (p.len() == 3).then_some(p)
    });
    server.eventually(60, "the RC's status", || {
        let rc = server.json(&["get", "rc", "legacy"]);
        (rc["status"]["replicas"] == 3 && rc["status"]["readyReplicas"] == 3).then_some(())
    });
    // A deleted pod is replaced.
    server.ok(&["delete", "pod", &pods[0].0, "--wait=false"]);
    server.eventually(60, "a replacement pod", || {
        let p = ready_pods(&server, "app=legacy");
        (p.len() == 3 && p.iter().all(|(n, _)| *n != pods[0].0)).then_some(())
    });
    // Scaled through its scale subresource.
    server.ok(&["scale", "rc", "legacy", "--replicas=1"]);
    server.eventually(60, "one pod left", || (ready_pods(&server, "app=legacy").len() == 1).then_some(()));
}
