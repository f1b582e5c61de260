//! The DaemonSet controller against `FakeApi`: each test seeds the informers, runs one sync and
//! checks the recorded API calls.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet};
use k8s_openapi::api::core::v1::{Container, NodeSpec, PodCondition, PodSpec, PodStatus, PodTemplateSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as MetaSelector, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use serde_json::Value;

use super::update::get_patch;
use super::util::{TEMPLATE_GENERATION_ANNOTATION, TEMPLATE_GENERATION_LABEL};
use super::*;
use crate::deployment::util::compute_hash;
use crate::util::{add_seconds, fixed_clock};
use skiff_runtime::fake::{FakeApi, drain_queue};

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn strategy(max_unavailable: IntOrString, max_surge: IntOrString) -> DaemonSetUpdateStrategy {
    DaemonSetUpdateStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDaemonSet {
            max_unavailable: Some(max_unavailable),
            max_surge: Some(max_surge),
        }),
    }
}

fn ds(image: &str, template_generation: i64) -> DaemonSet {
    DaemonSet {
        metadata: ObjectMeta {
            name: Some("agent".into()),
            namespace: Some("ns".into()),
            uid: Some("agent-uid".into()),
            resource_version: Some("10".into()),
            generation: Some(template_generation),
            annotations: Some(labels(&[(TEMPLATE_GENERATION_ANNOTATION, &template_generation.to_string())])),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: MetaSelector { match_labels: Some(labels(&[("app", "agent")])), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels(&[("app", "agent")])), ..Default::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container { name: "a".into(), image: Some(image.into()), ..Default::default() }],
                    ..Default::default()
                }),
            },
            update_strategy: Some(strategy(IntOrString::Int(1), IntOrString::Int(0))),
            revision_history_limit: Some(10),
            min_ready_seconds: None,
        }),
        status: None,
    }
}

fn hash(ds: &DaemonSet) -> String {
    compute_hash(&template_of(ds), None)
}

fn revision(ds: &DaemonSet, number: i64) -> ControllerRevision {
    let h = hash(ds);
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("agent-{h}")),
            namespace: Some("ns".into()),
            uid: Some(format!("rev-{h}")),
            labels: Some(labels(&[("app", "agent"), (CONTROLLER_REVISION_HASH_LABEL, &h)])),
            owner_references: Some(vec![new_controller_ref(ds)]),
            ..Default::default()
        },
        data: Some(RawExtension(get_patch(ds))),
        revision: number,
    }
}

/// A node with labels and `(key, effect)` taints (shared with `util`'s tests).
pub(super) fn node(name: &str, node_labels: &[(&str, &str)], taints: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels(node_labels)),
            resource_version: Some("1".into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(
                taints
                    .iter()
                    .map(|(k, e)| Taint { key: k.to_string(), effect: e.to_string(), ..Default::default() })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: None,
    }
}

#[derive(Clone, Copy)]
enum State {
    NotReady,
    Ready,
    Failed,
}

/// A daemon pod of `owner` bound to `node_name`, made from the revision `hash`, created `age`
/// seconds ago.
fn pod(name: &str, owner: &DaemonSet, node_name: &str, hash: &str, state: State, age: i64) -> Pod {
    let (phase, ready) = match state {
        State::NotReady => ("Running", false),
        State::Ready => ("Running", true),
        State::Failed => ("Failed", false),
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("{name}-uid")),
            resource_version: Some("5".into()),
            labels: Some(labels(&[("app", "agent"), (CONTROLLER_REVISION_HASH_LABEL, hash)])),
            creation_timestamp: Some(Time(add_seconds(now(), -age))),
            owner_references: Some(vec![new_controller_ref(owner)]),
            ..Default::default()
        },
        spec: Some(PodSpec { node_name: Some(node_name.into()), ..Default::default() }),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            conditions: ready.then(|| {
                vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(add_seconds(now(), -100))),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
    }
}

struct Fixture {
    api: Arc<FakeApi>,
    factory: SharedInformerFactory,
    controller: Arc<DaemonSetsController>,
    recorder: EventRecorder,
}

impl Fixture {
    fn new() -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let recorder = EventRecorder::recording("daemonset-controller");
        let controller = DaemonSetsController::new(api.clone(), &factory, Arc::new(WorkQueue::new()), recorder.clone())
            .with_clock(fixed_clock(now()));
        Self { api, factory, controller, recorder }
    }

    fn seed_ds(&self, ds: &DaemonSet) {
        self.api.seed(ds);
        self.factory.informer::<DaemonSet>().handle_event(Event::Apply(ds.clone()));
    }

    fn seed_node(&self, node: &Node) {
        self.api.seed(node);
        self.factory.informer::<Node>().handle_event(Event::Apply(node.clone()));
    }

    fn seed_pod(&self, pod: &Pod) {
        self.api.seed(pod);
        self.factory.informer::<Pod>().handle_event(Event::Apply(pod.clone()));
    }

    fn seed_revision(&self, rev: &ControllerRevision) {
        self.api.seed(rev);
        self.factory.informer::<ControllerRevision>().handle_event(Event::Apply(rev.clone()));
    }

    /// A DaemonSet `new` (revision 2) updated from `old` (revision 1), on nodes n1…n`nodes`.
    fn seed_update(&self, old: &DaemonSet, new: &DaemonSet, nodes: usize) {
        self.seed_ds(new);
        self.seed_revision(&revision(old, 1));
        self.seed_revision(&revision(new, 2));
        for i in 1..=nodes {
            self.seed_node(&node(&format!("n{i}"), &[], &[]));
        }
    }

    async fn sync(&self) -> ReconcileResult {
        self.api.clear_actions();
        self.controller.sync_daemon_set("ns/agent").await
    }

    fn created_pods(&self) -> Vec<Value> {
        self.api
            .mutations()
            .into_iter()
            .filter(|a| a.verb == "create" && a.resource == "pods")
            .map(|a| a.body.unwrap())
            .collect()
    }

    fn deleted_pods(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .api
            .mutations()
            .into_iter()
            .filter(|a| a.verb == "delete" && a.resource == "pods")
            .map(|a| a.name)
            .collect();
        names.sort();
        names
    }

    fn status(&self) -> Value {
        let update = self
            .api
            .mutations()
            .into_iter()
            .rfind(|a| a.resource == "daemonsets" && a.subresource.as_deref() == Some("status"))
            .expect("a status update");
        update.body.unwrap()["status"].clone()
    }

    fn events(&self) -> Vec<String> {
        self.recorder.recorded().iter().map(|e| e.summary()).collect()
    }
}

/// The node a created pod's `metadata.name` node affinity sends it to.
fn affinity_node(pod: &Value) -> String {
    let term =
        &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    assert_eq!(term.as_array().map(Vec::len), Some(1), "{pod}");
    let field = &term[0]["matchFields"][0];
    assert_eq!(field["key"], "metadata.name");
    assert_eq!(field["operator"], "In");
    field["values"][0].as_str().unwrap().to_string()
}

#[tokio::test]
async fn each_eligible_node_gets_one_pod_placed_through_the_scheduler_by_node_name_affinity() {
    let f = Fixture::new();
    let mut d = ds("agent:1", 1);
    d.spec.as_mut().unwrap().template.spec.as_mut().unwrap().node_selector = Some(labels(&[("role", "edge")]));
    f.seed_ds(&d);
    f.seed_node(&node("n1", &[("role", "edge")], &[]));
    f.seed_node(&node("n2", &[("role", "edge")], &[]));
    f.seed_node(&node("n3", &[("role", "core")], &[]));
    assert_eq!(f.sync().await.unwrap(), Action::AwaitChange);

    let created = f.created_pods();
    let mut targets: Vec<String> = created.iter().map(affinity_node).collect();
    targets.sort();
    assert_eq!(targets, ["n1", "n2"]);
    let pod = &created[0];
    assert_eq!(pod["metadata"]["generateName"], "agent-");
    assert!(pod["spec"]["nodeName"].is_null(), "the scheduler binds the pod: {pod}");
    assert_eq!(pod["metadata"]["labels"][CONTROLLER_REVISION_HASH_LABEL], hash(&d));
    assert_eq!(pod["metadata"]["labels"][TEMPLATE_GENERATION_LABEL], "1");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
    let tolerations: Vec<&str> =
        pod["spec"]["tolerations"].as_array().unwrap().iter().map(|t| t["key"].as_str().unwrap()).collect();
    assert!(tolerations.contains(&"node.kubernetes.io/unschedulable"), "{tolerations:?}");
    assert!(tolerations.contains(&"node.kubernetes.io/not-ready"), "{tolerations:?}");
    assert_eq!(f.controller.expectations().outstanding("ns/agent"), Some((2, 0)));
    assert!(f.events().iter().all(|e| e.starts_with("Normal SuccessfulCreate Created pod: agent-")));

    // The first revision of the history, with the patch `kubectl rollout undo` applies.
    let rev = f
        .api
        .mutations()
        .into_iter()
        .find(|a| a.verb == "create" && a.resource == "controllerrevisions")
        .expect("a ControllerRevision")
        .body
        .unwrap();
    assert_eq!(rev["metadata"]["name"], format!("agent-{}", hash(&d)));
    assert_eq!(rev["revision"], 1);
    assert_eq!(rev["data"]["spec"]["template"]["$patch"], "replace");
    assert_eq!(rev["metadata"]["labels"][CONTROLLER_REVISION_HASH_LABEL], hash(&d));

    // The cache has not caught up: the next sync creates nothing.
    f.sync().await.unwrap();
    assert!(f.created_pods().is_empty());
}

#[tokio::test]
async fn status_counts_desired_current_ready_available_updated_and_misscheduled_nodes() {
    let f = Fixture::new();
    let d = ds("agent:1", 1);
    let h = hash(&d);
    f.seed_ds(&d);
    f.seed_revision(&revision(&d, 1));
    f.seed_node(&node("n1", &[], &[]));
    f.seed_node(&node("n2", &[], &[]));
    f.seed_node(&node("n3", &[], &[]));
    f.seed_node(&node("off", &[], &[("dedicated", "NoSchedule")]));
    f.seed_pod(&pod("p1", &d, "n1", &h, State::Ready, 50));
    f.seed_pod(&pod("p2", &d, "n2", &h, State::NotReady, 50));
    f.seed_pod(&pod("p4", &d, "off", &h, State::Ready, 50));
    f.sync().await.unwrap();
    // n3 gets its pod; the pod on the tainted node stays (NoSchedule does not evict).
    assert_eq!(f.created_pods().iter().map(affinity_node).collect::<Vec<_>>(), ["n3"]);
    assert!(f.deleted_pods().is_empty());
    let status = f.status();
    assert_eq!(status["desiredNumberScheduled"], 3);
    assert_eq!(status["currentNumberScheduled"], 2);
    assert_eq!(status["numberReady"], 1);
    assert_eq!(status["numberAvailable"], 1);
    assert_eq!(status["numberUnavailable"], 2);
    assert_eq!(status["updatedNumberScheduled"], 2);
    assert_eq!(status["numberMisscheduled"], 1);
    assert_eq!(status["observedGeneration"], 1);
}

#[tokio::test]
async fn a_no_execute_taint_without_toleration_deletes_the_pod_on_that_node() {
    let f = Fixture::new();
    let d = ds("agent:1", 1);
    let h = hash(&d);
    f.seed_ds(&d);
    f.seed_revision(&revision(&d, 1));
    f.seed_node(&node("n1", &[], &[("dedicated", "NoExecute")]));
    f.seed_node(&node("n2", &[], &[("node.kubernetes.io/unreachable", "NoExecute")]));
    f.seed_pod(&pod("p1", &d, "n1", &h, State::Ready, 50));
    f.seed_pod(&pod("p2", &d, "n2", &h, State::Ready, 50));
    f.sync().await.unwrap();
    // The unreachable taint is tolerated by every daemon pod.
    assert_eq!(f.deleted_pods(), ["p1"]);
    assert!(f.created_pods().is_empty());
    assert_eq!(f.controller.expectations().outstanding("ns/agent"), Some((0, 1)));
}

#[tokio::test]
async fn a_failed_daemon_pod_is_deleted_with_a_warning_and_surplus_pods_leave_the_oldest() {
    let f = Fixture::new();
    let d = ds("agent:1", 1);
    let h = hash(&d);
    f.seed_ds(&d);
    f.seed_revision(&revision(&d, 1));
    f.seed_node(&node("n1", &[], &[]));
    f.seed_node(&node("n2", &[], &[]));
    f.seed_pod(&pod("failed", &d, "n1", &h, State::Failed, 50));
    f.seed_pod(&pod("older", &d, "n2", &h, State::Ready, 50));
    f.seed_pod(&pod("newer", &d, "n2", &h, State::Ready, 10));
    f.sync().await.unwrap();
    assert_eq!(f.deleted_pods(), ["failed", "newer"]);
    assert!(
        f.events()
            .iter()
            .any(|e| e.starts_with("Warning FailedDaemonPod Found failed daemon pod ns/failed on node n1")),
        "{:?}",
        f.events()
    );
}

#[tokio::test]
async fn an_unscheduled_pod_for_a_node_that_is_gone_is_deleted() {
    let f = Fixture::new();
    let d = ds("agent:1", 1);
    let h = hash(&d);
    f.seed_ds(&d);
    f.seed_revision(&revision(&d, 1));
    f.seed_node(&node("n1", &[], &[]));
    f.seed_pod(&pod("p1", &d, "n1", &h, State::Ready, 50));
    let mut stranded = pod("stranded", &d, "", &h, State::NotReady, 50);
    let spec = stranded.spec.as_mut().unwrap();
    spec.node_name = None;
    spec.affinity = Some(replace_daemon_set_pod_node_name_node_affinity(None, "gone"));
    f.seed_pod(&stranded);
    f.sync().await.unwrap();
    assert_eq!(f.deleted_pods(), ["stranded"]);
    assert_eq!(f.status()["desiredNumberScheduled"], 1);
}

#[tokio::test]
async fn a_rolling_update_replaces_at_most_max_unavailable_old_pods_at_a_time() {
    let f = Fixture::new();
    let old = ds("agent:1", 1);
    let mut d = ds("agent:2", 2);
    d.spec.as_mut().unwrap().update_strategy = Some(strategy(IntOrString::String("50%".into()), IntOrString::Int(0)));
    f.seed_ds(&d);
    f.seed_revision(&revision(&old, 1));
    let old_hash = hash(&old);
    for i in 1..=4 {
        f.seed_node(&node(&format!("n{i}"), &[], &[]));
        f.seed_pod(&pod(&format!("p{i}"), &old, &format!("n{i}"), &old_hash, State::Ready, 50));
    }
    f.sync().await.unwrap();
    // 50 % of 4 nodes: two old pods go; the manage loop recreates them next.
    assert_eq!(f.deleted_pods().len(), 2, "{:?}", f.api.mutation_summaries());
    assert!(f.created_pods().is_empty());
    // The new template got revision 2.
    let rev = f
        .api
        .mutations()
        .into_iter()
        .find(|a| a.verb == "create" && a.resource == "controllerrevisions")
        .unwrap()
        .body
        .unwrap();
    assert_eq!(rev["revision"], 2);
    assert_eq!(f.status()["updatedNumberScheduled"], 0);
}

#[tokio::test]
async fn unavailable_new_pods_count_against_max_unavailable() {
    let f = Fixture::new();
    let old = ds("agent:1", 1);
    let d = ds("agent:2", 2);
    let (old_hash, new_hash) = (hash(&old), hash(&d));
    f.seed_update(&old, &d, 3);
    f.seed_pod(&pod("new1", &d, "n1", &new_hash, State::NotReady, 5));
    f.seed_pod(&pod("old2", &old, "n2", &old_hash, State::Ready, 50));
    f.seed_pod(&pod("old3", &old, "n3", &old_hash, State::Ready, 50));
    f.sync().await.unwrap();
    // maxUnavailable 1 is taken by the new pod that is not ready yet.
    assert!(f.deleted_pods().is_empty(), "{:?}", f.api.mutation_summaries());
    assert_eq!(f.status()["updatedNumberScheduled"], 1);
}

#[tokio::test]
async fn a_surge_update_starts_new_pods_beside_available_old_ones_up_to_max_surge() {
    let f = Fixture::new();
    let old = ds("agent:1", 1);
    let mut d = ds("agent:2", 2);
    d.spec.as_mut().unwrap().update_strategy = Some(strategy(IntOrString::Int(0), IntOrString::Int(2)));
    let (old_hash, new_hash) = (hash(&old), hash(&d));
    f.seed_update(&old, &d, 3);
    // n1 has surged and waits for its new pod; one more surge slot is free for n2 or n3.
    f.seed_pod(&pod("old1", &old, "n1", &old_hash, State::Ready, 50));
    f.seed_pod(&pod("new1", &d, "n1", &new_hash, State::NotReady, 20));
    f.seed_pod(&pod("old2", &old, "n2", &old_hash, State::Ready, 50));
    f.seed_pod(&pod("old3", &old, "n3", &old_hash, State::Ready, 50));
    f.sync().await.unwrap();
    assert!(f.deleted_pods().is_empty(), "{:?}", f.api.mutation_summaries());
    assert_eq!(f.created_pods().iter().map(affinity_node).collect::<Vec<_>>(), ["n2"]);
}

#[tokio::test]
async fn once_the_surged_pod_is_available_the_old_pod_on_its_node_is_deleted() {
    let f = Fixture::new();
    let old = ds("agent:1", 1);
    let mut d = ds("agent:2", 2);
    d.spec.as_mut().unwrap().update_strategy = Some(strategy(IntOrString::Int(0), IntOrString::Int(1)));
    f.seed_update(&old, &d, 1);
    f.seed_pod(&pod("old1", &old, "n1", &hash(&old), State::Ready, 50));
    f.seed_pod(&pod("new1", &d, "n1", &hash(&d), State::Ready, 20));
    f.sync().await.unwrap();
    assert_eq!(f.deleted_pods(), ["old1"]);
    assert!(f.created_pods().is_empty());
}

#[tokio::test]
async fn on_delete_leaves_old_pods_until_someone_deletes_them() {
    let f = Fixture::new();
    let old = ds("agent:1", 1);
    let mut d = ds("agent:2", 2);
    d.spec.as_mut().unwrap().update_strategy =
        Some(DaemonSetUpdateStrategy { type_: Some("OnDelete".into()), rolling_update: None });
    f.seed_update(&old, &d, 1);
    f.seed_pod(&pod("old1", &old, "n1", &hash(&old), State::Ready, 50));
    f.sync().await.unwrap();
    assert!(f.deleted_pods().is_empty());
    assert!(f.created_pods().is_empty());
    assert_eq!(f.status()["updatedNumberScheduled"], 0);
}

#[tokio::test]
async fn rolling_back_to_an_old_template_renumbers_its_revision_instead_of_making_a_new_one() {
    let f = Fixture::new();
    let first = ds("agent:1", 1);
    let second = ds("agent:2", 2);
    // Undo: the template is the first one again (template generation 3).
    let mut d = ds("agent:1", 3);
    d.metadata.generation = Some(3);
    f.seed_ds(&d);
    f.seed_revision(&revision(&first, 1));
    f.seed_revision(&revision(&second, 2));
    f.seed_node(&node("n1", &[], &[]));
    f.seed_pod(&pod("p1", &second, "n1", &hash(&second), State::Ready, 50));
    f.sync().await.unwrap();
    let updates: Vec<Value> = f
        .api
        .mutations()
        .into_iter()
        .filter(|a| a.resource == "controllerrevisions")
        .map(|a| {
            assert_eq!(a.verb, "update", "{:?}", f.api.mutation_summaries());
            a.body.unwrap()
        })
        .collect();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0]["metadata"]["name"], format!("agent-{}", hash(&first)));
    assert_eq!(updates[0]["revision"], 3);
}

#[tokio::test]
async fn old_revisions_beyond_the_history_limit_go_unless_a_pod_still_uses_them() {
    let f = Fixture::new();
    let mut d = ds("agent:9", 9);
    d.spec.as_mut().unwrap().revision_history_limit = Some(1);
    f.seed_ds(&d);
    f.seed_revision(&revision(&d, 9));
    f.seed_node(&node("n1", &[], &[]));
    let olds: Vec<DaemonSet> = (1..=3).map(|i| ds(&format!("agent:{i}"), i)).collect();
    for (i, old) in olds.iter().enumerate() {
        f.seed_revision(&revision(old, i as i64 + 1));
    }
    // The oldest revision still runs on n1 (OnDelete-style leftovers).
    f.seed_pod(&pod("p1", &olds[0], "n1", &hash(&olds[0]), State::NotReady, 50));
    f.sync().await.unwrap();
    let mut deleted: Vec<String> = f
        .api
        .mutations()
        .into_iter()
        .filter(|a| a.verb == "delete" && a.resource == "controllerrevisions")
        .map(|a| a.name)
        .collect();
    deleted.sort();
    let mut want = vec![format!("agent-{}", hash(&olds[1])), format!("agent-{}", hash(&olds[2]))];
    want.sort();
    assert_eq!(deleted, want);
}

#[tokio::test]
async fn an_empty_selector_is_refused_with_a_warning_event() {
    let f = Fixture::new();
    let mut d = ds("agent:1", 1);
    d.spec.as_mut().unwrap().selector = MetaSelector::default();
    f.seed_ds(&d);
    f.seed_node(&node("n1", &[], &[]));
    f.sync().await.unwrap();
    assert!(f.api.mutations().is_empty());
    assert_eq!(
        f.events(),
        ["Warning SelectingAll This daemon set is selecting all pods. A non-empty selector is required."]
    );
}

#[tokio::test]
async fn node_events_enqueue_the_daemon_sets_whose_placement_they_change() {
    let f = Fixture::new();
    let mut d = ds("agent:1", 1);
    d.spec.as_mut().unwrap().template.spec.as_mut().unwrap().node_selector = Some(labels(&[("role", "edge")]));
    f.seed_ds(&d);
    let q = f.controller.queue().clone();
    drain_queue(&q).await;
    f.seed_node(&node("core", &[("role", "core")], &[]));
    assert!(q.is_empty());
    f.seed_node(&node("edge", &[("role", "edge")], &[]));
    assert_eq!(drain_queue(&q).await, ["ns/agent"]);
    // A NoExecute taint on the edge node changes its placement; a label nobody selects does not.
    let mut tainted = node("edge", &[("role", "edge")], &[("dedicated", "NoExecute")]);
    tainted.metadata.resource_version = Some("2".into());
    f.seed_node(&tainted);
    assert_eq!(drain_queue(&q).await, ["ns/agent"]);
    let mut relabeled = node("core", &[("role", "core"), ("zone", "a")], &[]);
    relabeled.metadata.resource_version = Some("2".into());
    f.seed_node(&relabeled);
    assert!(q.is_empty());
}

#[tokio::test]
async fn pod_events_record_observations_for_the_owning_daemon_set() {
    let f = Fixture::new();
    let d = ds("agent:1", 1);
    f.seed_ds(&d);
    let q = f.controller.queue().clone();
    drain_queue(&q).await;
    f.controller.expectations().expect("ns/agent", 1, Vec::new());
    f.seed_pod(&pod("p1", &d, "n1", "h", State::NotReady, 1));
    assert!(f.controller.expectations().satisfied("ns/agent"));
    assert_eq!(drain_queue(&q).await, ["ns/agent"]);
}
