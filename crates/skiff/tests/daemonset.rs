//! DaemonSets end to end with the real kubectl on simulated nodes: one pod per node placed by
//! the scheduler, a node joining later gets its pod, a NoSchedule taint keeps the running pod
//! while a NoExecute taint removes it, and a rolling update by `kubectl set image` completes
//! under `kubectl rollout status` and is reverted by `kubectl rollout undo`, with the
//! ControllerRevisions `kubectl rollout history` lists.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};

use common::Server;
use serde_json::Value;

fn json(server: &Server, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    serde_json::from_str(&server.ok(&args)).unwrap()
}

/// The DaemonSet's live pods (not being deleted): node name → image.
fn pods_by_node(server: &Server) -> BTreeMap<String, String> {
    json(server, &["get", "pods", "-l", "app=agent"])["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            (
                p["spec"]["nodeName"].as_str().unwrap_or_default().to_string(),
                p["spec"]["containers"][0]["image"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn status_field(server: &Server, field: &str) -> i64 {
    json(server, &["get", "ds", "agent"])["status"][field].as_i64().unwrap_or(0)
}

/// The revision numbers `kubectl rollout history ds/agent` lists.
fn history_revisions(server: &Server) -> Vec<String> {
    let history = server.ok(&["rollout", "history", "ds/agent"]);
    history
        .lines()
        .skip_while(|l| !l.starts_with("REVISION"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn rollout_status(server: &Server) {
    let out = server.kubectl(&["rollout", "status", "ds/agent", "--timeout=120s"]);
    assert!(
        out.status.success(),
        "rollout status failed: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("daemon set \"agent\" successfully rolled out"));
}

/// A `skiff agent --simulated-nodes 1 --node-name <prefix>` child, killed when dropped.
struct Agent(Child);

impl Agent {
    fn start(server: &Server, prefix: &str) -> Agent {
        let data_dir = server.dir.path().join(format!("agent-{prefix}"));
        let log = std::fs::File::create(server.dir.path().join(format!("agent-{prefix}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["agent", "--server", &format!("https://127.0.0.1:{}", server.port), "--node-name", prefix])
            .arg("--token-file")
            .arg(server.dir.path().join("data/token"))
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--simulated-nodes", "1"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting skiff agent");
        Agent(child)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const DAEMON_SET: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: 1}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: agent
        image: example.com/agent:1
"#;

#[test]
fn a_daemon_set_follows_nodes_taints_and_rolling_updates() {
    let server = Server::start_with(&["--simulated-nodes", "3"]);
    let nodes = ["sim-node-0", "sim-node-1", "sim-node-2"];
    server.eventually(60, "three Ready nodes", || {
        let out = server.ok(&[
            "get",
            "nodes",
            "-o",
            r#"jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status} {end}"#,
        ]);
        (out.split_whitespace().filter(|s| *s == "True").count() == 3).then_some(())
    });

    // One pod per node, through the scheduler.
    server.ok_stdin(&["apply", "-f", "-"], DAEMON_SET);
    rollout_status(&server);
    let placed = pods_by_node(&server);
    assert_eq!(placed.keys().map(String::as_str).collect::<Vec<_>>(), nodes, "{placed:?}");
    assert_eq!(status_field(&server, "desiredNumberScheduled"), 3);
    assert_eq!(status_field(&server, "numberReady"), 3);
    let annotation = server.ok(&[
        "get",
        "ds",
        "agent",
        "-o",
        r#"jsonpath={.metadata.annotations.deprecated\.daemonset\.template\.generation}"#,
    ]);
    assert_eq!(annotation, "1");

    // A node joining later gets its pod.
    let _late = Agent::start(&server, "late");
    server.eventually(60, "a Running pod on the late node", || {
        let phase = server.ok(&[
            "get",
            "pods",
            "-l",
            "app=agent",
            "--field-selector",
            "spec.nodeName=late-0",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ]);
        (phase == "Running").then_some(())
    });
    rollout_status(&server);
    assert_eq!(status_field(&server, "desiredNumberScheduled"), 4);

    // NoSchedule does not evict: the pod stays, counted as misscheduled.
    server.ok(&["taint", "nodes", "sim-node-0", "dedicated=x:NoSchedule"]);
    server.eventually(30, "the NoSchedule node to leave the desired count", || {
        (status_field(&server, "desiredNumberScheduled") == 3 && status_field(&server, "numberMisscheduled") == 1)
            .then_some(())
    });
    assert!(pods_by_node(&server).contains_key("sim-node-0"), "{:?}", pods_by_node(&server));

    // NoExecute without a toleration removes the pod.
    server.ok(&["taint", "nodes", "sim-node-1", "dedicated=x:NoExecute"]);
    server.eventually(60, "the pod on the NoExecute node to go", || {
        (!pods_by_node(&server).contains_key("sim-node-1")).then_some(())
    });
    assert!(pods_by_node(&server).contains_key("sim-node-0"));

    // A rolling update by `kubectl set image`, then back with `kubectl rollout undo`.
    server.ok(&["set", "image", "ds/agent", "agent=example.com/agent:2"]);
    rollout_status(&server);
    let updated = pods_by_node(&server);
    for node in ["sim-node-2", "late-0"] {
        assert_eq!(updated.get(node).map(String::as_str), Some("example.com/agent:2"), "{updated:?}");
    }
    assert_eq!(history_revisions(&server), ["1", "2"]);
    let hashes = server.ok(&[
        "get",
        "controllerrevisions",
        "-l",
        "app=agent",
        "-o",
        "jsonpath={range .items[*]}{.metadata.labels.controller-revision-hash} {end}",
    ]);
    assert_eq!(hashes.split_whitespace().count(), 2, "{hashes}");

    server.ok(&["rollout", "undo", "ds/agent"]);
    rollout_status(&server);
    let reverted = pods_by_node(&server);
    for node in ["sim-node-2", "late-0"] {
        assert_eq!(reverted.get(node).map(String::as_str), Some("example.com/agent:1"), "{reverted:?}");
    }
    assert_eq!(history_revisions(&server), ["2", "3"]);
    assert_eq!(
        server.ok(&[
            "get",
            "ds",
            "agent",
            "-o",
            r#"jsonpath={.metadata.annotations.deprecated\.daemonset\.template\.generation}"#
        ]),
        "3"
    );
}

#[test]
fn bad_daemon_sets_are_refused_with_field_causes() {
    let server = Server::start();
    let both_zero = DAEMON_SET.replace("{maxUnavailable: 1}", "{maxUnavailable: 0, maxSurge: 0}");
    let out = server.apply_stdin(&["apply", "-f", "-"], &both_zero);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"
        ),
        "{err}"
    );

    server.ok_stdin(&["apply", "-f", "-"], DAEMON_SET);
    let err = server.fails(&[
        "patch",
        "ds",
        "agent",
        "--type=merge",
        "-p",
        r#"{"spec":{"selector":{"matchLabels":{"app":"other"}}}}"#,
    ]);
    assert!(err.contains("spec.selector: Invalid value"), "{err}");
    assert!(err.contains("field is immutable"), "{err}");
}
