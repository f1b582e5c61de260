//! The node lifecycle controller against a real API server, with simulated nodes whose
//! heartbeats stop (their process "dies").

// The kubelet tests' helpers (the shared in-process API server with test logging, `eventually`).
#[path = "../../kubelet/tests/common/mod.rs"]
mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::{eventually, start_api_server};
use k8s_openapi::api::core::v1::{Container, Event, Node, Pod, PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use skiff_controllers::nodelifecycle::{NodeLifecycleConfig, TAINT_UNREACHABLE, run_node_lifecycle_controller};
use skiff_kubelet::{SimulatedNodes, SimulatedNodesConfig};

fn pod(name: &str, node: &str, toleration_seconds: Option<Option<i64>>) -> Pod {
    Pod {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container { name: "c".into(), image: Some("img:1".into()), ..Default::default() }],
            tolerations: toleration_seconds.map(|secs| {
                vec![Toleration {
                    key: Some(TAINT_UNREACHABLE.into()),
                    operator: Some("Exists".into()),
                    effect: Some("NoExecute".into()),
                    toleration_seconds: secs,
                    value: None,
                }]
            }),
            ..Default::default()
        }),
        status: None,
    }
}

fn ready(n: &Node) -> Option<String> {
    n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

fn has_taint(n: &Node, key: &str, effect: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key && t.effect == effect))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_nodes_become_unknown_get_tainted_and_lose_their_pods() {
    let api = start_api_server().await;
    let client = api.client.clone();
    let alive_cfg = SimulatedNodesConfig {
        count: 2,
        name_prefix: "alive-".into(),
        heartbeat_interval: Duration::from_secs(1),
        ..Default::default()
    };
    let doomed_cfg = SimulatedNodesConfig {
        count: 1,
        name_prefix: "doomed-".into(),
        heartbeat_interval: Duration::from_secs(1),
        pod_cidr_base: Ipv4Addr::new(10, 200, 0, 0),
        node_ip_base: Ipv4Addr::new(172, 20, 0, 0),
        ..Default::default()
    };
    let _alive = SimulatedNodes::start(client.clone(), alive_cfg).await.unwrap_or_else(|e| panic!("alive nodes: {e}"));
    let doomed =
        SimulatedNodes::start(client.clone(), doomed_cfg.clone()).await.unwrap_or_else(|e| panic!("doomed: {e}"));
    let nlc_cfg = NodeLifecycleConfig {
        node_monitor_period: Duration::from_millis(200),
        node_monitor_grace_period: Duration::from_secs(3),
        node_eviction_rate: 100.0,
        taint_manager_period: Duration::from_millis(200),
        ..Default::default()
    };
    let nlc = tokio::spawn(run_node_lifecycle_controller(client.clone(), nlc_cfg));

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for p in [
        // The 300 s toleration DefaultTolerationSeconds admission gives every pod (this API
        // server runs no admission, so the test sets it).
        pod("default-tolerations", "doomed-0", Some(Some(300))),
        pod("tolerates-0s", "doomed-0", Some(Some(0))),
        pod("tolerates-2s", "doomed-0", Some(Some(2))),
        pod("tolerates-forever", "doomed-0", Some(None)),
        pod("on-alive", "alive-0", None),
    ] {
        pods.create(&PostParams::default(), &p).await.unwrap_or_else(|e| panic!("create pod: {e}"));
    }
    eventually(15, "pods Running", || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items.iter().all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).then_some(())
    })
    .await;

    // The doomed node's process dies: no more heartbeats.
    drop(doomed);
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(20, "doomed-0 Ready=Unknown and tainted", || async {
        let n = nodes.get("doomed-0").await.ok()?;
        (ready(&n).as_deref() == Some("Unknown")
            && has_taint(&n, TAINT_UNREACHABLE, "NoSchedule")
            && has_taint(&n, TAINT_UNREACHABLE, "NoExecute"))
        .then_some(())
    })
    .await;
    let alive = nodes.get("alive-0").await.unwrap_or_else(|e| panic!("get: {e}"));
    assert_eq!(ready(&alive).as_deref(), Some("True"), "heartbeating nodes stay Ready");
    assert!(!has_taint(&alive, TAINT_UNREACHABLE, "NoExecute"));

    let deleting = |name: &'static str| {
        let pods = pods.clone();
        async move { pods.get(name).await.ok().filter(|p| p.metadata.deletion_timestamp.is_some()) }
    };
    let evicted = eventually(10, "pod with tolerationSeconds 0 evicted", || deleting("tolerates-0s")).await;
    let disruption = evicted
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget");
    assert_eq!(disruption.and_then(|c| c.reason).as_deref(), Some("DeletionByTaintManager"));
    eventually(15, "pod evicted after tolerationSeconds", || deleting("tolerates-2s")).await;
    let defaulted = pods.get("default-tolerations").await.unwrap_or_else(|e| panic!("get: {e}"));
    assert!(defaulted.metadata.deletion_timestamp.is_none(), "the default 300 s toleration still holds");
    let forever = pods.get("tolerates-forever").await.unwrap_or_else(|e| panic!("get: {e}"));
    assert!(forever.metadata.deletion_timestamp.is_none(), "a toleration without seconds tolerates forever");
    let forever_ready =
        forever.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "Ready");
    assert_eq!(forever_ready.map(|c| c.status).as_deref(), Some("False"), "pods on an unknown node are not Ready");
    let on_alive = pods.get("on-alive").await.unwrap_or_else(|e| panic!("get: {e}"));
    assert!(on_alive.metadata.deletion_timestamp.is_none(), "pods on healthy nodes stay");

    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    eventually(10, "NodeNotReady event", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.iter().any(|e| e.reason.as_deref() == Some("NodeNotReady")).then_some(())
    })
    .await;

    // The node comes back: Ready again, taints removed, terminating pods finished.
    let _back = SimulatedNodes::start(client.clone(), doomed_cfg).await.unwrap_or_else(|e| panic!("restart: {e}"));
    eventually(20, "doomed-0 Ready and untainted", || async {
        let n = nodes.get("doomed-0").await.ok()?;
        (ready(&n).as_deref() == Some("True") && !has_taint(&n, TAINT_UNREACHABLE, "NoExecute")).then_some(())
    })
    .await;
    eventually(15, "evicted pods finished", || async {
        (pods.get_opt("tolerates-0s").await.ok()?.is_none() && pods.get_opt("tolerates-2s").await.ok()?.is_none())
            .then_some(())
    })
    .await;

    nlc.abort();
    api.server.shutdown(Duration::from_secs(1)).await;
}
