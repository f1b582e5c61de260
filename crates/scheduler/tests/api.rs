//! The scheduler against a real API server (in-process, on a real SQLite store in a temp dir):
//! pods are bound through `pods/binding`, unschedulable pods get the PodScheduled condition and
//! FailedScheduling events in Kubernetes' wording, and pending pods are scheduled once a node is
//! labelled or freed.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use skiff_apiserver::testing::TestApiServer;
use skiff_scheduler::testing::{make_node, make_pod};
use skiff_scheduler::{SchedulerConfig, run_scheduler};

async fn add_node(client: &kube::Client, node: Node) {
    let api: Api<Node> = Api::all(client.clone());
    let name = node.metadata.name.clone().unwrap();
    let status = serde_json::to_value(&node.status).unwrap();
    api.create(&PostParams::default(), &node).await.unwrap();
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status }))).await.unwrap();
}

async fn eventually<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn bound_node(pods: &Api<Pod>, name: &str) -> String {
    eventually(&format!("{name} to be bound"), async || {
        pods.get(name).await.ok()?.spec?.node_name.filter(|n| !n.is_empty())
    })
    .await
}

async fn unschedulable_message(client: &kube::Client, name: &str, want: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually(&format!("{name} to be reported unschedulable with {want:?}"), async || {
        let p = pods.get(name).await.ok()?;
        let c = p.status?.conditions?.into_iter().find(|c| c.type_ == "PodScheduled")?;
        (c.status == "False" && c.reason.as_deref() == Some("Unschedulable") && c.message.as_deref() == Some(want))
            .then_some(())
    })
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    eventually(&format!("FailedScheduling event for {name}"), async || {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.involved_object.name.as_deref() == Some(name)
                    && e.reason.as_deref() == Some("FailedScheduling")
                    && e.type_.as_deref() == Some("Warning")
                    && e.message.as_deref() == Some(want)
            })
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_binds_through_the_api_and_retries_when_nodes_change() {
    let h = TestApiServer::start().await;
    let cap = [("cpu", "2"), ("memory", "4Gi"), ("pods", "110")];
    add_node(&h.client, make_node("n1").capacity(&cap).obj()).await;
    add_node(&h.client, make_node("n2").capacity(&cap).obj()).await;
    let sched = tokio::spawn(run_scheduler(h.client.clone(), SchedulerConfig::default()));
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let create = async |p: Pod| {
        let mut p = p;
        p.metadata.uid = None;
        pods.create(&PostParams::default(), &p).await.unwrap();
    };

    // A plain pod is bound, with a Scheduled event.
    create(make_pod("small").req(&[("cpu", "100m")]).obj()).await;
    let small_node = bound_node(&pods, "small").await;
    let events: Api<Event> = Api::namespaced(h.client.clone(), "default");
    let want = format!("Successfully assigned default/small to {small_node}");
    eventually("Scheduled event", async || {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Scheduled") && e.message.as_deref() == Some(want.as_str()))
            .then_some(())
    })
    .await;

    // A pod selecting a label no node has stays pending with Kubernetes' message...
    create(make_pod("web").container_image("nginx").node_selector(&[("disk", "ssd")]).obj()).await;
    unschedulable_message(
        &h.client,
        "web",
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
    )
    .await;
    // ...until a node is labelled.
    let nodes: Api<Node> = Api::all(h.client.clone());
    nodes
        .patch("n2", &PatchParams::default(), &Patch::Merge(&json!({"metadata": {"labels": {"disk": "ssd"}}})))
        .await
        .unwrap();
    assert_eq!(bound_node(&pods, "web").await, "n2");

    // Fill both nodes, then a pod that fits nowhere waits until one is freed.
    create(make_pod("hog1").req(&[("cpu", "1800m")]).obj()).await;
    let hog1_node = bound_node(&pods, "hog1").await;
    create(make_pod("hog2").req(&[("cpu", "1800m")]).obj()).await;
    let hog2_node = bound_node(&pods, "hog2").await;
    assert_ne!(hog1_node, hog2_node);
    create(make_pod("late").req(&[("cpu", "1")]).obj()).await;
    unschedulable_message(
        &h.client,
        "late",
        "0/2 nodes are available: 2 Insufficient cpu. \
         preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
    )
    .await;
    pods.delete("hog1", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    assert_eq!(bound_node(&pods, "late").await, hog1_node);

    // The scheduler ran as the elected leader.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(h.client.clone(), "kube-system");
    let holder = leases.get("kube-scheduler").await.unwrap().spec.and_then(|s| s.holder_identity);
    assert!(holder.is_some_and(|h| !h.is_empty()));
    assert!(!sched.is_finished(), "scheduler stopped: {:?}", sched.await);
}
