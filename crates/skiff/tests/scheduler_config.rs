//! End-to-end tests of `skiff server --scheduler-config` (profiles, plugin weights, disabled
//! plugins, HTTP extenders), the toleration-seconds flags and the logging flags, against the
//! real binary with simulated nodes and the real `kubectl`.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::Server;
use serde_json::{Value, json};

/// Writes `yaml` as a scheduler configuration in a temp dir kept alive by the returned guard.
fn config_file(yaml: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scheduler.yaml");
    std::fs::write(&path, yaml).unwrap();
    let p = path.display().to_string();
    (dir, p)
}

fn pod_yaml(name: &str, scheduler: &str, extra_spec: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  schedulerName: {scheduler}\n{extra_spec}  containers:\n  - name: c\n    image: busybox\n    resources:\n      requests:\n{resources}"
    )
}

fn node_of(server: &Server, pod: &str) -> Option<String> {
    let p = server.json(&["get", "pod", pod]);
    p["spec"]["nodeName"].as_str().map(str::to_string)
}

fn scheduled_on(server: &Server, pod: &str) -> String {
    server.eventually(60, &format!("pod {pod} to be scheduled"), || node_of(server, pod))
}

/// The messages of the events about `pod`.
fn events_of(server: &Server, pod: &str) -> Vec<String> {
    let field = format!("involvedObject.name={pod}");
    let list = server.json(&["get", "events", "--field-selector", &field]);
    list["items"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap_or_default().to_string()).collect()
}

#[test]
fn two_profiles_place_pods_by_their_own_plugins_and_weights_and_unknown_scheduler_names_wait() {
    let (_dir, path) = config_file(
        r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
parallelism: 4
percentageOfNodesToScore: 100
profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  plugins:
    score:
      disabled:
      - name: NodeResourcesBalancedAllocation
      enabled:
      - name: NodeResourcesFit
        weight: 10
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
- schedulerName: taint-blind
  plugins:
    filter:
      disabled:
      - name: TaintToleration
"#,
    );
    let server = Server::start_with(&["--simulated-nodes", "2", "--scheduler-config", &path]);
    server.eventually(60, "two simulated nodes", || {
        let n = server.json(&["get", "nodes"]);
        (n["items"].as_array().map_or(0, |a| a.len()) == 2).then_some(())
    });
    // sim-node-0 is half used; sim-node-1 is empty.
    let seed = pod_yaml("seed", "default-scheduler", "  nodeName: sim-node-0\n", "        cpu: \"8\"\n");
    server.ok_stdin(&["apply", "-f", "-"], &seed);
    server.eventually(60, "the seed pod to run", || {
        (server.json(&["get", "pod", "seed"])["status"]["phase"] == "Running").then_some(())
    });
    // LeastAllocated (the default profile) spreads to the empty node; MostAllocated (packer)
    // packs onto the used one.
    server.ok_stdin(&["apply", "-f", "-"], &pod_yaml("spread", "default-scheduler", "", "        cpu: 500m\n"));
    server.ok_stdin(&["apply", "-f", "-"], &pod_yaml("packed", "packer", "", "        cpu: 500m\n"));
    assert_eq!(scheduled_on(&server, "spread"), "sim-node-1");
    assert_eq!(scheduled_on(&server, "packed"), "sim-node-0");

    // A taint keeps default-scheduler's pods off sim-node-1; taint-blind has no TaintToleration
    // filter.
    server.ok(&["taint", "nodes", "sim-node-1", "dedicated=x:NoSchedule"]);
    let on_1 = "  nodeSelector:\n    kubernetes.io/hostname: sim-node-1\n";
    server.ok_stdin(&["apply", "-f", "-"], &pod_yaml("blind", "taint-blind", on_1, "        cpu: 100m\n"));
    server.ok_stdin(&["apply", "-f", "-"], &pod_yaml("careful", "default-scheduler", on_1, "        cpu: 100m\n"));
    server.ok_stdin(&["apply", "-f", "-"], &pod_yaml("orphan", "nobody", "", "        cpu: 100m\n"));
    assert_eq!(scheduled_on(&server, "blind"), "sim-node-1");
    let msg = server.eventually(60, "careful's FailedScheduling event", || {
        events_of(&server, "careful").into_iter().find(|m| m.contains("untolerated taint"))
    });
    assert!(msg.starts_with("0/2 nodes are available"), "{msg}");
    assert_eq!(node_of(&server, "careful"), None);
    // No profile answers to "nobody": the pod is left alone, with no condition and no event.
    let orphan = server.json(&["get", "pod", "orphan"]);
    assert!(orphan["spec"]["nodeName"].is_null(), "{orphan}");
    assert!(orphan["status"]["conditions"].is_null(), "{orphan}");
    assert!(events_of(&server, "orphan").is_empty());
}

/// What the test extender does with each call, recorded for the assertions.
#[derive(Default)]
struct Calls {
    filter: Vec<Value>,
    prioritize: Vec<Value>,
}

/// An HTTP extender on loopback: filter keeps every node but sim-node-0, prioritize gives
/// sim-node-2 the highest score.
fn start_extender(rt: &tokio::runtime::Runtime) -> (String, Arc<parking_lot::Mutex<Calls>>) {
    use axum::Json;
    use axum::routing::post;
    let calls = Arc::new(parking_lot::Mutex::new(Calls::default()));
    let (c1, c2) = (calls.clone(), calls.clone());
    let app = axum::Router::new()
        .route(
            "/ext/filter",
            post(move |Json(args): Json<Value>| {
                let calls = c1.clone();
                async move {
                    let names: Vec<String> =
                        args["NodeNames"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
                    calls.lock().filter.push(args);
                    let kept: Vec<&String> = names.iter().filter(|n| *n != "sim-node-0").collect();
                    let failed: serde_json::Map<String, Value> = names
                        .iter()
                        .filter(|n| *n == "sim-node-0")
                        .map(|n| (n.clone(), json!("the extender keeps pods off sim-node-0")))
                        .collect();
                    Json(json!({"NodeNames": kept, "FailedNodes": failed, "Error": ""}))
                }
            }),
        )
        .route(
            "/ext/prioritize",
            post(move |Json(args): Json<Value>| {
                let calls = c2.clone();
                async move {
                    let scores: Vec<Value> = args["NodeNames"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|n| json!({"Host": n, "Score": if n == "sim-node-2" { 10 } else { 0 }}))
                        .collect();
                    calls.lock().prioritize.push(args);
                    Json(Value::Array(scores))
                }
            }),
        );
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}/ext", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, app).await });
    (url, calls)
}

#[test]
fn an_extender_filters_out_nodes_and_its_priorities_change_the_choice() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, calls) = start_extender(&rt);
    let (_dir, path) = config_file(&format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders:\n- urlPrefix: {url}\n  filterVerb: filter\n  prioritizeVerb: prioritize\n  weight: 5\n  nodeCacheCapable: true\n  httpTimeout: 10s\n"
    ));
    let server = Server::start_with(&["--simulated-nodes", "3", "--scheduler-config", &path]);
    server.eventually(60, "three simulated nodes", || {
        let n = server.json(&["get", "nodes"]);
        (n["items"].as_array().map_or(0, |a| a.len()) == 3).then_some(())
    });
    for i in 0..3 {
        server.ok_stdin(
            &["apply", "-f", "-"],
            &pod_yaml(&format!("p{i}"), "default-scheduler", "", "        cpu: 100m\n"),
        );
    }
    // Without the extender the three pods would spread over the three nodes (LeastAllocated);
    // its weight-5 priority (5 × 10 × 10 = 500 points) outweighs the plugins.
    for i in 0..3 {
        assert_eq!(scheduled_on(&server, &format!("p{i}")), "sim-node-2");
    }
    let calls = calls.lock();
    assert!(!calls.filter.is_empty() && !calls.prioritize.is_empty());
    let first = &calls.filter[0];
    assert_eq!(first["Pod"]["metadata"]["name"], "p0");
    assert_eq!(first["NodeNames"].as_array().unwrap().len(), 3, "{first}");
    // Prioritize is asked only about the nodes the filter kept.
    let asked: Vec<&Value> = calls.prioritize[0]["NodeNames"].as_array().unwrap().iter().collect();
    assert!(!asked.iter().any(|n| *n == "sim-node-0"), "{asked:?}");
}

#[test]
fn an_ignorable_extender_that_is_down_is_skipped_and_a_required_one_leaves_pods_pending_with_its_error() {
    // Ports nobody listens on.
    let down = |_: ()| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (ignorable, required) = (down(()), down(()));
    let (_dir, path) = config_file(&format!(
        r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: http://{ignorable}/ext
  filterVerb: filter
  ignorable: true
- urlPrefix: http://{required}/ext
  filterVerb: filter
  managedResources:
  - name: example.com/widget
    ignoredByScheduler: true
"#
    ));
    let server = Server::start_with(&["--simulated-nodes", "1", "--scheduler-config", &path]);
    server.ok_stdin(&["apply", "-f", "-"], &pod_yaml("plain", "default-scheduler", "", "        cpu: 100m\n"));
    assert_eq!(scheduled_on(&server, "plain"), "sim-node-0");
    server.ok_stdin(
        &["apply", "-f", "-"],
        &pod_yaml("widget", "default-scheduler", "", "        cpu: 100m\n        example.com/widget: \"1\"\n"),
    );
    let msg = server.eventually(60, "widget's FailedScheduling event", || {
        events_of(&server, "widget").into_iter().find(|m| m.contains(&format!("http://{required}/ext/filter")))
    });
    assert!(msg.starts_with(&format!("Post \"http://{required}/ext/filter\": dial tcp")), "{msg}");
    let pod = server.json(&["get", "pod", "widget"]);
    assert!(pod["spec"]["nodeName"].is_null(), "{pod}");
    let cond = &pod["status"]["conditions"][0];
    assert_eq!(
        (cond["type"].as_str(), cond["reason"].as_str()),
        (Some("PodScheduled"), Some("SchedulerError")),
        "{pod}"
    );
}

#[test]
fn an_invalid_scheduler_config_stops_the_server_naming_the_file_field_and_problem() {
    let cases = [
        ("parallelism: 0\n", "parallelism: Invalid value: 0: should be an integer value greater than zero"),
        (
            "profiles:\n- schedulerName: a\n  plugins:\n    score:\n      enabled: [{name: Nope}]\n",
            "plugin \"Nope\" does not exist",
        ),
        (
            "extenders:\n- urlPrefix: http://127.0.0.1:1\n  prioritizeVerb: p\n",
            "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it",
        ),
        ("profile: []\n", "unknown field"),
    ];
    for (yaml, want) in cases {
        let (dir, path) = config_file(yaml);
        let out = Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["server", "--disable-agent", "--bind-address", "127.0.0.1", "--https-listen-port"])
            .arg(common::free_port().to_string())
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--scheduler-config", &path])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "started with {yaml:?}: {stderr}");
        assert!(stderr.contains(&path) && stderr.contains(want), "{yaml:?}: {stderr}");
        // Refused before anything started: no kubeconfig, no store.
        assert!(!dir.path().join("data/kubeconfig.yaml").exists());
    }
}

#[test]
fn verbosity_two_logs_reconcile_decisions_as_json_and_toleration_seconds_flags_apply() {
    let server = Server::start_with(&[
        "--simulated-nodes",
        "1",
        "--v=2",
        "--logging-format=json",
        "--default-not-ready-toleration-seconds",
        "60",
        "--default-unreachable-toleration-seconds",
        "120",
    ]);
    server.ok(&["create", "deployment", "web", "--image=busybox", "--replicas=2"]);
    let decision = server.eventually(60, "a reconcile decision line", || {
        server
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["message"] == "too few replicas")
    });
    assert_eq!(decision["level"], "DEBUG", "{decision}");
    assert!(decision["target"].as_str().unwrap().starts_with("skiff_controllers"), "{decision}");
    assert!(decision["replicaset"].as_str().unwrap().starts_with("default/web-"), "{decision}");
    server.eventually(60, "the scheduler's bind decision", || {
        server
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["message"] == "Successfully bound pod to node")
    });
    // Level 2 is not level 4: the API server's per-request lines stay off.
    assert!(!server.log().lines().any(|l| l.contains("\"message\":\"HTTP\"")));

    let pods = server.json(&["get", "pods", "-l", "app=web"]);
    let tolerations = &pods["items"][0]["spec"]["tolerations"];
    let seconds = |key: &str| {
        tolerations.as_array().unwrap().iter().find(|t| t["key"] == key).map(|t| t["tolerationSeconds"].clone())
    };
    assert_eq!(seconds("node.kubernetes.io/not-ready"), Some(json!(60)), "{tolerations}");
    assert_eq!(seconds("node.kubernetes.io/unreachable"), Some(json!(120)), "{tolerations}");
}
