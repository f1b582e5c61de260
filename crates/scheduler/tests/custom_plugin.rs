//! Out-of-tree plugins registered through the factory registry: a Filter plugin enabled with
//! `multiPoint`, and a Permit plugin that holds pods until it allows them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use skiff_scheduler::SchedulerConfig;
use skiff_scheduler::api::RecordingApi;
use skiff_scheduler::cache::Cache;
use skiff_scheduler::config::build_frameworks;
use skiff_scheduler::framework::{
    CycleState, FilterPlugin, Handle, NodeInfo, PermitPlugin, Plugin, PodInfo, Status, WaitingPods,
};
use skiff_scheduler::queue::{FakeClock, QueueConfig, SchedulingQueue};
use skiff_scheduler::schedule_one::{Outcome, Scheduler, Shared};
use skiff_scheduler::testing::{make_node, make_pod};

/// Rejects nodes labelled `example.com/maintenance`.
struct Maintenance;

impl Plugin for Maintenance {
    fn name(&self) -> &str {
        "Maintenance"
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for Maintenance {
    fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
        if node.labels().contains_key("example.com/maintenance") {
            return Status::unresolvable("node(s) were in maintenance");
        }
        Status::success()
    }
}

/// Holds every pod at Permit (a gang-scheduling style gate).
struct Gate;

impl Plugin for Gate {
    fn name(&self) -> &str {
        "Gate"
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
}

impl PermitPlugin for Gate {
    fn permit(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> (Status, Duration) {
        (Status::wait(), Duration::from_secs(30))
    }
}

fn setup(yaml: &str, nodes: Vec<Node>) -> (Scheduler, Arc<SchedulingQueue>, Arc<RecordingApi>, Arc<WaitingPods>) {
    let mut cfg = SchedulerConfig::from_yaml(yaml).unwrap();
    cfg.registry.register("Maintenance", |_args, _handle| Ok(Arc::new(Maintenance))).unwrap();
    cfg.registry.register("Gate", |_args, _handle| Ok(Arc::new(Gate))).unwrap();
    let api = Arc::new(RecordingApi::default());
    let handle = Handle::new(api.clone());
    let fws = build_frameworks(&cfg, &handle).unwrap();
    let queue = Arc::new(SchedulingQueue::new(
        fws.clone(),
        handle.nominator.clone(),
        Arc::new(FakeClock::default()),
        QueueConfig::default(),
    ));
    let cache = Arc::new(Cache::new());
    for n in nodes {
        cache.add_node(n);
    }
    let waiting = handle.waiting_pods.clone();
    let shared = Shared { cache, queue: queue.clone(), handle };
    (Scheduler::new(shared, fws, 0, Some(1), tokio::runtime::Handle::current()), queue, api, waiting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_filter_plugin_enabled_by_multi_point_rejects_nodes() {
    let yaml = "profiles:\n- plugins:\n    multiPoint:\n      enabled: [{name: Maintenance}]\n";
    let nodes = vec![
        make_node("a").capacity(&[("pods", "10")]).label("example.com/maintenance", "").obj(),
        make_node("b").capacity(&[("pods", "10")]).obj(),
    ];
    let (mut sched, queue, _api, _) = setup(yaml, nodes);
    queue.add(make_pod("p").info());
    let Outcome::Scheduled { node, binding, .. } = sched.schedule_one(queue.try_pop().unwrap()) else { panic!() };
    assert_eq!(node, "b");
    binding.await.unwrap().unwrap();
    queue.add(make_pod("q").node_selector(&[("example.com/maintenance", "")]).info());
    let Outcome::Unschedulable { message, .. } = sched.schedule_one(queue.try_pop().unwrap()) else { panic!() };
    assert!(message.starts_with("0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were in maintenance."), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_plugin_holds_binding_until_it_allows_the_pod() {
    let yaml = "profiles:\n- plugins:\n    permit:\n      enabled: [{name: Gate}]\n";
    let (mut sched, queue, api, waiting) = setup(yaml, vec![make_node("a").capacity(&[("pods", "10")]).obj()]);
    queue.add(make_pod("p").info());
    let Outcome::Scheduled { binding, .. } = sched.schedule_one(queue.try_pop().unwrap()) else { panic!() };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let wp = loop {
        if let Some(wp) = waiting.get("uid-p") {
            break wp;
        }
        assert!(tokio::time::Instant::now() < deadline, "pod never waited at permit");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(api.binds().is_empty(), "bound before being allowed");
    wp.allow("Gate");
    binding.await.unwrap().unwrap();
    assert_eq!(api.binds(), vec![("default/p".to_string(), "a".to_string())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_waiting_pod_is_forgotten_and_requeued() {
    let yaml = "profiles:\n- plugins:\n    permit:\n      enabled: [{name: Gate}]\n";
    let (mut sched, queue, api, waiting) = setup(yaml, vec![make_node("a").capacity(&[("pods", "10")]).obj()]);
    queue.add(make_pod("p").info());
    let Outcome::Scheduled { binding, .. } = sched.schedule_one(queue.try_pop().unwrap()) else { panic!() };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while waiting.get("uid-p").is_none() {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    waiting.get("uid-p").unwrap().reject("Gate", "quorum not reached");
    let err = binding.await.unwrap().unwrap_err();
    assert!(err.contains("quorum not reached"), "{err}");
    assert!(api.binds().is_empty());
    // Forgetting the assumed pod is a move request, so the pod retries after its backoff.
    assert_eq!(queue.locate("default/p"), Some("backoff"));
}
