//! Resource metrics from a real node: the kubelet's `/stats/summary` and `/metrics/resource`
//! (through the API server's node proxy) for a pod on containerd, and `kubectl top` reading
//! them through the in-process metrics-server.
//!
//! Needs root plus containerd, runc, the CNI plugins and busybox-static
//! (`scripts/install-deps`); run it alone on the machine (`flock /tmp/skiff-node.lock`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Server;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn require_runtime() {
    let missing: Vec<&str> = ["/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/bin/busybox"]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    assert!(missing.is_empty(), "missing {missing:?}: run scripts/install-deps (as root)");
    let uid = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert_eq!(uid.ok().as_deref(), Some("0"), "the local node runs containers: run the tests as root");
}

const SPINNER: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: spin
  labels: {app: spin}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: spin
    image: skiff.local/busybox:1.35
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do :; done"]
    resources:
      requests: {cpu: 100m, memory: 16Mi}
"#;

#[test]
fn a_busy_container_on_containerd_shows_in_stats_metrics_and_kubectl_top() {
    require_runtime();
    let images = tempfile::tempdir().unwrap();
    let built = Command::new(repo_root().join("scripts/images/build.sh")).arg(images.path()).output().unwrap();
    assert!(built.status.success(), "building the offline images: {}", String::from_utf8_lossy(&built.stderr));
    let server = Server::start_with_agent(&["--metric-resolution", "2s"]);
    let import = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["images", "import", "--data-dir"])
        .arg(server.dir.path().join("data"))
        .arg(images.path().join("busybox.tar"))
        .output()
        .unwrap();
    assert!(import.status.success(), "skiff images import: {}", String::from_utf8_lossy(&import.stderr));
    server.ok_stdin(&["apply", "-f", "-"], SPINNER);
    server.ok(&["wait", "--for=condition=Ready", "pod/spin", "--timeout=180s"]);
    let node = server.ok(&["get", "pod", "spin", "-o", "jsonpath={.spec.nodeName}"]);

    // The Summary API: the node and the pod, with the container's CPU and memory.
    let summary: serde_json::Value =
        serde_json::from_str(&server.ok(&["get", "--raw", &format!("/api/v1/nodes/{node}/proxy/stats/summary")]))
            .expect("a JSON Summary");
    assert_eq!(summary["node"]["nodeName"], node.as_str(), "{summary}");
    assert!(summary["node"]["cpu"]["usageCoreNanoSeconds"].as_u64().is_some_and(|v| v > 0), "{summary}");
    assert!(summary["node"]["memory"]["workingSetBytes"].as_u64().is_some_and(|v| v > 0), "{summary}");
    let pod = summary["pods"]
        .as_array()
        .and_then(|pods| pods.iter().find(|p| p["podRef"]["name"] == "spin"))
        .unwrap_or_else(|| panic!("no spin pod in {summary}"));
    assert_eq!(pod["podRef"]["namespace"], "default");
    let container = &pod["containers"][0];
    assert_eq!(container["name"], "spin", "{pod}");
    assert!(container["cpu"]["usageCoreNanoSeconds"].as_u64().is_some_and(|v| v > 0), "{pod}");
    assert!(container["memory"]["workingSetBytes"].as_u64().is_some(), "{pod}");

    // The resource metrics, as metrics-server reads them.
    let metrics = server.ok(&["get", "--raw", &format!("/api/v1/nodes/{node}/proxy/metrics/resource")]);
    for prefix in [
        r#"container_cpu_usage_seconds_total{container="spin",namespace="default",pod="spin"} "#,
        r#"container_memory_working_set_bytes{container="spin",namespace="default",pod="spin"} "#,
        r#"pod_cpu_usage_seconds_total{namespace="default",pod="spin"} "#,
        "node_cpu_usage_seconds_total ",
        "node_memory_working_set_bytes ",
        "resource_scrape_error 0",
    ] {
        assert!(metrics.lines().any(|l| l.starts_with(prefix)), "no {prefix:?} in\n{metrics}");
    }

    // kubectl top: the spinning container uses most of a core.
    let top = server.eventually(60, "kubectl top pod spin", || {
        let out = server.kubectl(&["top", "pod", "spin", "--no-headers"]);
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    let cpu: u64 =
        top.split_whitespace().nth(1).and_then(|c| c.strip_suffix('m')).and_then(|c| c.parse().ok()).unwrap_or(0);
    assert!(cpu >= 200, "a busy loop should use well over 200m: {top}");
    let nodes = server.ok(&["top", "node", "--no-headers"]);
    let cols: Vec<&str> =
        nodes.lines().find(|l| l.starts_with(node.as_str())).unwrap_or("").split_whitespace().collect();
    assert!(cols.len() == 5 && cols[1] != "<unknown>", "{nodes}");
    server.ok(&["delete", "pod", "spin", "--wait=true"]);
}
