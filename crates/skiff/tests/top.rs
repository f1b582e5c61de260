//! `kubectl top` against the in-process metrics-server on simulated nodes: usage derived from
//! requests, the `skiff.io/simulated-cpu-usage` annotation driving it, label selectors,
//! `--containers`, `-A`, a node without metrics shown as `<unknown>`, metrics.k8s.io's Tables
//! and 404s, and the `system:aggregated-metrics-reader` role.

mod common;

use common::Server;

/// The whitespace-separated columns of the line of `out` whose first column is `name`.
fn row(out: &str, name: &str) -> Option<Vec<String>> {
    out.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cols| cols.first().is_some_and(|c| c == name))
}

const WORKLOAD: &str = r#"
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
      annotations: {skiff.io/simulated-cpu-usage: 150m}
    spec:
      containers:
      - name: app
        image: nginx:1.27
        resources:
          requests: {cpu: 200m, memory: 64Mi}
---
apiVersion: v1
kind: Pod
metadata:
  name: batch
  labels: {app: batch}
spec:
  containers:
  - name: main
    image: busybox
    resources:
      requests: {cpu: 500m, memory: 256Mi}
  - name: helper
    image: busybox
    resources:
      requests: {cpu: 100m, memory: 32Mi}
---
apiVersion: v1
kind: Node
metadata:
  name: no-metrics
spec:
  unschedulable: true
"#;

#[test]
fn kubectl_top_shows_simulated_usage_and_unknown_for_a_node_without_metrics() {
    let server = Server::start_with(&["--simulated-nodes", "2", "--metric-resolution", "1s"]);
    server.ok_stdin(&["apply", "-f", "-"], WORKLOAD);

    // Pods: the annotation's 150m, memory half the request (32Mi).
    let web = server.eventually(60, "kubectl top pod -l app=web with two pods", || {
        let out = server.kubectl(&["top", "pod", "-l", "app=web", "--no-headers"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && text.lines().count() == 2).then_some(text)
    });
    for line in web.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cols[1..], ["150m", "32Mi"], "{web}");
    }

    // Without the annotation: half the requests, per container with --containers.
    let batch = server.eventually(30, "the batch pod's metrics", || {
        let out = server.kubectl(&["top", "pod", "batch", "--containers"]);
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    assert_eq!(row(&batch, "batch").map(|c| c[1..].to_vec()).unwrap_or_default().len(), 3, "{batch}");
    let lines: Vec<Vec<&str>> = batch.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert!(lines.contains(&vec!["batch", "main", "250m", "128Mi"]), "{batch}");
    assert!(lines.contains(&vec!["batch", "helper", "50m", "16Mi"]), "{batch}");

    // All namespaces: a NAMESPACE column first.
    let all = server.ok(&["top", "pod", "-A"]);
    assert!(all.starts_with("NAMESPACE"), "{all}");
    assert_eq!(row(&all, "default").map(|c| c.len()), Some(4), "{all}");

    // Nodes: the simulated ones have usage (the sum of their pods); the node nobody scrapes
    // shows <unknown>.
    let nodes = server.eventually(30, "kubectl top node", || {
        let out = server.ok(&["top", "node"]);
        (row(&out, "sim-node-0").is_some() && row(&out, "sim-node-1").is_some()).then_some(out)
    });
    let unknown = row(&nodes, "no-metrics").unwrap_or_else(|| panic!("no-metrics missing:\n{nodes}"));
    assert_eq!(&unknown[1..], ["<unknown>", "<unknown>", "<unknown>", "<unknown>"], "{nodes}");
    let total: u64 = ["sim-node-0", "sim-node-1"]
        .iter()
        .map(|n| row(&nodes, n).unwrap()[1].trim_end_matches('m').parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 150 + 150 + 250 + 50, "{nodes}");

    // The annotation drives load: a new value shows within a few scrapes.
    let pod = web.lines().next().unwrap().split_whitespace().next().unwrap().to_string();
    server.ok(&["annotate", "pod", &pod, "skiff.io/simulated-cpu-usage=700m", "--overwrite"]);
    server.eventually(30, "the new annotation's usage", || {
        let out = server.ok(&["top", "pod", &pod, "--no-headers"]);
        (row(&out, &pod)?[1] == "700m").then_some(())
    });

    // The API as the HorizontalPodAutoscaler reads it: a label-selected PodMetricsList.
    let list: serde_json::Value = serde_json::from_str(&server.ok(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb",
    ]))
    .unwrap();
    assert_eq!(list["kind"], "PodMetricsList");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2), "{list}");
    assert_eq!(list["items"][0]["metadata"]["labels"]["app"], "web", "{list}");
    assert!(list["items"][0]["window"].as_str().is_some_and(|w| w.ends_with('s')), "{list}");

    // Tables as metrics-server prints them.
    let table = server.ok(&["get", "nodes.metrics.k8s.io"]);
    let header: Vec<&str> = table.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "CPU", "MEMORY", "WINDOW"], "{table}");
    assert!(row(&table, "no-metrics").is_none(), "{table}");

    // No metrics: 404, and watch is not supported.
    let missing = server.fails(&["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes/no-metrics"]);
    assert!(missing.contains("NotFound") || missing.contains("not found"), "{missing}");
    let watch = server.fails(&["get", "--raw", "/apis/metrics.k8s.io/v1beta1/pods?watch=true"]);
    assert!(watch.contains("MethodNotAllowed") || watch.contains("405"), "{watch}");

    // RBAC: view (through system:aggregated-metrics-reader) may read metrics.
    server.ok(&["get", "clusterrole", "system:aggregated-metrics-reader"]);
    let before = server.kubectl(&["auth", "can-i", "list", "pods.metrics.k8s.io", "--as", "jane"]);
    assert_eq!(String::from_utf8_lossy(&before.stdout).trim(), "no");
    server.ok(&["create", "rolebinding", "jane-view", "--clusterrole=view", "--user=jane"]);
    server.eventually(10, "view to include metrics.k8s.io", || {
        let out = server.kubectl(&["auth", "can-i", "list", "pods.metrics.k8s.io", "--as", "jane"]);
        (String::from_utf8_lossy(&out.stdout).trim() == "yes").then_some(())
    });
    server.ok(&["top", "pod", "--as", "jane"]);
}
