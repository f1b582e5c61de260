use std::sync::atomic::{AtomicI64, Ordering};

use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, PodSpec, PodStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::watcher::Event;

use super::*;
use skiff_runtime::fake::FakeApi;

const T0: i64 = 1_700_000_000;

struct Fixture {
    api: Arc<FakeApi>,
    factory: SharedInformerFactory,
    gc: Arc<PodGcController>,
    now: Arc<AtomicI64>,
}

impl Fixture {
    fn new(threshold: i32) -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let now = Arc::new(AtomicI64::new(T0));
        let clock_now = now.clone();
        let gc = PodGcController::new(api.clone(), &factory, threshold)
            .with_clock(Arc::new(move || Timestamp::from_second(clock_now.load(Ordering::SeqCst)).unwrap()));
        Self { api, factory, gc, now }
    }

    fn advance(&self, secs: i64) {
        self.now.fetch_add(secs, Ordering::SeqCst);
    }

    fn seed_pod(&self, pod: Pod) {
        self.api.seed(&pod);
        self.factory.informer::<Pod>().handle_event(Event::Apply(pod));
    }

    fn seed_node(&self, node: Node) {
        self.api.seed(&node);
        self.factory.informer::<Node>().handle_event(Event::Apply(node));
    }

    async fn gc(&self) -> Vec<String> {
        self.api.clear_actions();
        self.gc.gc().await;
        self.api.mutation_summaries()
    }

    fn deleted(summaries: &[String]) -> Vec<String> {
        summaries.iter().filter_map(|s| s.strip_prefix("delete pods ns/")).map(str::to_string).collect()
    }
}

fn pod(name: &str, node: &str, phase: &str, created: i64) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
            ..Default::default()
        },
        spec: Some(PodSpec { node_name: (!node.is_empty()).then(|| node.to_string()), ..Default::default() }),
        status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
    }
}

fn node(name: &str, ready: bool, taints: &[&str]) -> Node {
    Node {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: Some(NodeSpec {
            taints: Some(
                taints
                    .iter()
                    .map(|k| Taint { key: k.to_string(), effect: "NoExecute".into(), ..Default::default() })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn terminated_pods_beyond_the_threshold_are_deleted_evicted_then_oldest_first() {
    let f = Fixture::new(2);
    f.seed_node(node("n1", true, &[]));
    f.seed_pod(pod("old", "n1", "Succeeded", T0 - 300));
    f.seed_pod(pod("older", "n1", "Failed", T0 - 400));
    f.seed_pod(pod("new", "n1", "Succeeded", T0 - 10));
    let mut evicted = pod("evicted", "n1", "Failed", T0 - 5);
    evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
    f.seed_pod(evicted);
    f.seed_pod(pod("running", "n1", "Running", T0 - 1000));
    let mut deleted = Fixture::deleted(&f.gc().await);
    deleted.sort();
    // Four terminated, two kept: the evicted pod goes first, then the oldest.
    assert_eq!(deleted, ["evicted", "older"]);
    // Already terminal: deleted without a status patch, and with grace period 0.
    let deletes: Vec<_> = f.api.mutations().into_iter().filter(|a| a.verb == "delete").collect();
    assert!(deletes.iter().all(|a| a.delete_options.as_ref().unwrap().grace_period_seconds == Some(0)));
    assert!(f.api.mutations().iter().all(|a| a.verb != "patch"));
}

#[tokio::test]
async fn a_threshold_of_zero_keeps_every_terminated_pod() {
    let f = Fixture::new(0);
    f.seed_node(node("n1", true, &[]));
    f.seed_pod(pod("done", "n1", "Succeeded", T0 - 300));
    assert!(f.gc().await.is_empty());
}

#[tokio::test]
async fn pods_of_a_deleted_node_are_failed_and_deleted_after_the_quarantine() {
    let f = Fixture::new(DEFAULT_TERMINATED_POD_GC_THRESHOLD);
    f.seed_node(node("n1", true, &[]));
    f.seed_pod(pod("kept", "n1", "Running", T0));
    f.seed_pod(pod("orphan", "gone", "Running", T0));
    // First seen missing: quarantined, nothing deleted, no GET yet.
    assert!(f.gc().await.is_empty());
    f.advance(39);
    assert!(f.gc().await.is_empty());
    assert!(f.api.actions().iter().all(|a| a.resource != "nodes"));
    f.advance(1);
    let summaries = f.gc().await;
    assert_eq!(summaries, ["patch pods/status ns/orphan", "delete pods ns/orphan"]);
    let patch = f.api.mutations()[0].body.clone().unwrap();
    assert_eq!(patch["status"]["phase"], "Failed");
    assert_eq!(patch["status"]["conditions"][0]["type"], "DisruptionTarget");
    assert_eq!(patch["status"]["conditions"][0]["reason"], "DeletionByPodGC");
    assert_eq!(patch["status"]["conditions"][0]["message"], "PodGC: node no longer exists");
}

#[tokio::test]
async fn a_node_that_exists_on_the_server_but_not_in_the_cache_keeps_its_pods() {
    let f = Fixture::new(DEFAULT_TERMINATED_POD_GC_THRESHOLD);
    // The node exists (a live GET finds it) though the cache has not seen it yet.
    f.api.seed(&node("late", true, &[]));
    f.seed_pod(pod("p", "late", "Running", T0));
    f.gc().await;
    f.advance(41);
    assert!(f.gc().await.is_empty());
    assert!(f.api.actions().iter().any(|a| a.verb == "get" && a.resource == "nodes"));
}

#[tokio::test]
async fn unscheduled_terminating_pods_are_force_deleted() {
    let f = Fixture::new(DEFAULT_TERMINATED_POD_GC_THRESHOLD);
    let mut p = pod("stuck", "", "Pending", T0);
    p.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(T0).unwrap()));
    f.seed_pod(p);
    f.seed_pod(pod("waiting", "", "Pending", T0));
    assert_eq!(f.gc().await, ["patch pods/status ns/stuck", "delete pods ns/stuck"]);
}

#[tokio::test]
async fn terminating_pods_of_an_out_of_service_node_are_deleted() {
    let f = Fixture::new(DEFAULT_TERMINATED_POD_GC_THRESHOLD);
    f.seed_node(node("down", false, &[TAINT_NODE_OUT_OF_SERVICE]));
    f.seed_node(node("flaky", false, &[]));
    for (name, node) in [("a", "down"), ("b", "flaky")] {
        let mut p = pod(name, node, "Running", T0);
        p.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(T0).unwrap()));
        f.seed_pod(p);
    }
    f.seed_pod(pod("c", "down", "Running", T0));
    assert_eq!(Fixture::deleted(&f.gc().await), ["a"]);
}
