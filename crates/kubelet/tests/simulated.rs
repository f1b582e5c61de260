//! Simulated nodes against a real skiff API server (SQLite store, HTTPS, kube-rs client).

mod common;

use std::time::Duration;

use common::{eventually, start_api_server};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use skiff_kubelet::simulated::SIMULATED_PHASE_ANNOTATION;
use skiff_kubelet::{SimulatedNodes, SimulatedNodesConfig};

fn pod(name: &str, node: &str, phase: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: phase.map(|p| [(SIMULATED_PHASE_ANNOTATION.to_string(), p.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container { name: "c".into(), image: Some("nginx:1.25".into()), ..Default::default() }],
            ..Default::default()
        }),
        status: None,
    }
}

fn ready(node: &Node) -> Option<String> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_nodes_register_heartbeat_and_run_pods() {
    let api = start_api_server().await;
    let client = api.client.clone();
    let cfg = SimulatedNodesConfig { count: 20, heartbeat_interval: Duration::from_secs(1), ..Default::default() };
    let sim =
        SimulatedNodes::start(client.clone(), cfg).await.unwrap_or_else(|e| panic!("starting simulated nodes: {e}"));
    assert_eq!(sim.node_names().len(), 20);

    // Nodes are registered Ready with capacity and a pod CIDR.
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default().labels("skiff.io/simulated=true"))
        .await
        .unwrap_or_else(|e| panic!("list nodes: {e}"));
    assert_eq!(list.items.len(), 20);
    let n3 = nodes.get("sim-node-3").await.unwrap_or_else(|e| panic!("get node: {e}"));
    assert_eq!(ready(&n3).as_deref(), Some("True"));
    let status = n3.status.clone().unwrap_or_default();
    assert_eq!(status.capacity.unwrap_or_default().get("pods").map(|q| q.0.as_str()), Some("110"));
    assert_eq!(n3.spec.and_then(|s| s.pod_cidr).as_deref(), Some("10.128.3.0/24"));

    // Leases exist and are renewed.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let first = eventually(10, "lease of sim-node-3", || async {
        leases.get_opt("sim-node-3").await.ok().flatten().and_then(|l| l.spec?.renew_time)
    })
    .await;
    eventually(15, "lease renewal", || async {
        let t = leases.get("sim-node-3").await.ok()?.spec?.renew_time?;
        (t.0 > first.0).then_some(())
    })
    .await;
    assert_eq!(leases.list(&ListParams::default()).await.map(|l| l.items.len()).unwrap_or(0), 20);

    // A pod bound to a simulated node is reported Running and Ready with an IP from its CIDR.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("web", "sim-node-3", None))
        .await
        .unwrap_or_else(|e| panic!("create pod: {e}"));
    let status = eventually(15, "pod Running", || async {
        let p = pods.get("web").await.ok()?;
        let s = p.status?;
        (s.phase.as_deref() == Some("Running")).then_some(s)
    })
    .await;
    assert!(status.pod_ip.as_deref().is_some_and(|ip| ip.starts_with("10.128.3.")), "pod IP {:?}", status.pod_ip);
    assert_eq!(status.host_ip.as_deref(), Some("172.16.0.4"));
    let ready_cond = status.conditions.unwrap_or_default().into_iter().find(|c| c.type_ == "Ready").map(|c| c.status);
    assert_eq!(ready_cond.as_deref(), Some("True"));
    assert!(status.container_statuses.unwrap_or_default().iter().all(|c| c.ready));

    // The phase annotation completes pods (for Job tests).
    pods.create(&PostParams::default(), &pod("job", "sim-node-4", Some("Succeeded")))
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));
    eventually(15, "pod Succeeded", || async {
        (pods.get("job").await.ok()?.status?.phase.as_deref() == Some("Succeeded")).then_some(())
    })
    .await;

    // Pods on other nodes are left alone.
    pods.create(&PostParams::default(), &pod("elsewhere", "real-node", None))
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));

    // Graceful deletion is finished by the simulated node.
    pods.delete("web", &DeleteParams::default()).await.unwrap_or_else(|e| panic!("delete: {e}"));
    eventually(15, "pod object gone", || async { pods.get_opt("web").await.ok()?.is_none().then_some(()) }).await;
    let elsewhere = pods.get("elsewhere").await.unwrap_or_else(|e| panic!("get: {e}"));
    assert!(elsewhere.status.and_then(|s| s.phase).as_deref() != Some("Running"), "foreign pods are not touched");

    // A node marked Unknown (as the node lifecycle controller does) is set Ready again.
    let patch = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}});
    nodes
        .patch_status("sim-node-5", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patch: {e}"));
    eventually(15, "node Ready again", || async {
        (ready(&nodes.get("sim-node-5").await.ok()?).as_deref() == Some("True")).then_some(())
    })
    .await;

    drop(sim);
    api.server.shutdown(Duration::from_secs(1)).await;
}
