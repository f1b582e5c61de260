use k8s_openapi::api::apps::v1::{DeploymentSpec, ReplicaSetSpec, StatefulSetSpec};
use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus, ReplicationControllerSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as MetaSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::*;
use crate::util::{fixed_clock, new_controller_ref};
use skiff_runtime::api::{ApiResource, DiscoveredResource};
use skiff_runtime::fake::FakeApi;

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("ns".into()),
        uid: Some(format!("{name}-uid")),
        resource_version: Some("7".into()),
        generation: Some(1),
        ..Default::default()
    }
}

fn web() -> MetaSelector {
    MetaSelector { match_labels: Some([("app".to_string(), "web".to_string())].into()), ..Default::default() }
}

fn pdb(min_available: Option<IntOrString>, max_unavailable: Option<IntOrString>) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta("budget"),
        spec: Some(PodDisruptionBudgetSpec {
            min_available,
            max_unavailable,
            selector: Some(web()),
            ..Default::default()
        }),
        status: None,
    }
}

fn pod(name: &str, owner: Option<OwnerReference>, ready: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            labels: Some([("app".to_string(), "web".to_string())].into()),
            owner_references: owner.map(|o| vec![o]),
            ..meta(name)
        },
        spec: Some(PodSpec { node_name: Some("n1".into()), ..Default::default() }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn replica_set(name: &str, replicas: i32, owner: Option<OwnerReference>) -> ReplicaSet {
    ReplicaSet {
        metadata: ObjectMeta { owner_references: owner.map(|o| vec![o]), ..meta(name) },
        spec: Some(ReplicaSetSpec { replicas: Some(replicas), selector: web(), ..Default::default() }),
        status: None,
    }
}

fn int(n: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(n))
}

fn pct(s: &str) -> Option<IntOrString> {
    Some(IntOrString::String(s.into()))
}

struct Fixture {
    api: Arc<FakeApi>,
    factory: SharedInformerFactory,
    controller: Arc<DisruptionController>,
    recorder: EventRecorder,
}

impl Fixture {
    fn new() -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let recorder = EventRecorder::recording("controllermanager");
        let controller = DisruptionController::new(api.clone(), &factory, Arc::new(WorkQueue::new()), recorder.clone())
            .with_clock(fixed_clock(now()));
        Self { api, factory, controller, recorder }
    }

    fn seed<K>(&self, obj: &K)
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        self.api.seed(obj);
        self.factory.informer::<K>().handle_event(Event::Apply(obj.clone()));
    }

    /// Syncs the budget and returns the status it wrote (Null when it wrote none).
    async fn sync(&self) -> (ReconcileResult, Value) {
        self.api.clear_actions();
        let result = self.controller.sync("ns/budget").await;
        let status = self
            .api
            .mutations()
            .into_iter()
            .find(|a| a.verb == "update" && a.subresource.as_deref() == Some("status"))
            .and_then(|a| a.body)
            .map(|b| b["status"].clone())
            .unwrap_or(Value::Null);
        (result, status)
    }

    fn events(&self) -> Vec<String> {
        self.recorder.recorded().iter().map(|e| e.summary()).collect()
    }
}

fn counts(status: &Value) -> (i64, i64, i64, i64) {
    let n = |f: &str| status[f].as_i64().unwrap_or(0);
    (n("currentHealthy"), n("desiredHealthy"), n("expectedPods"), n("disruptionsAllowed"))
}

#[tokio::test]
async fn min_available_as_a_number_counts_the_matching_pods() {
    let f = Fixture::new();
    f.seed(&pdb(int(2), None));
    for (name, ready) in [("a", true), ("b", true), ("c", true), ("d", false)] {
        f.seed(&pod(name, None, ready));
    }
    let (result, status) = f.sync().await;
    assert!(result.is_ok());
    // Three healthy of four pods, two required: one disruption allowed.
    assert_eq!(counts(&status), (3, 2, 4, 1));
    assert_eq!(status["observedGeneration"], 1);
    let cond = &status["conditions"][0];
    assert_eq!(cond["type"], "DisruptionAllowed");
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "SufficientPods");
}

#[tokio::test]
async fn a_budget_with_no_room_is_insufficient_pods() {
    let f = Fixture::new();
    f.seed(&pdb(int(3), None));
    for name in ["a", "b", "c"] {
        f.seed(&pod(name, None, true));
    }
    let (_, status) = f.sync().await;
    assert_eq!(counts(&status), (3, 3, 3, 0));
    assert_eq!(status["conditions"][0]["status"], "False");
    assert_eq!(status["conditions"][0]["reason"], "InsufficientPods");
}

#[tokio::test]
async fn max_unavailable_is_scaled_against_the_deployment_through_its_replicaset() {
    let f = Fixture::new();
    let d = Deployment {
        metadata: meta("web"),
        spec: Some(DeploymentSpec { replicas: Some(4), selector: web(), ..Default::default() }),
        status: None,
    };
    f.seed(&d);
    let rs = replica_set("web-abc", 3, Some(new_controller_ref(&d)));
    f.seed(&rs);
    f.seed(&pdb(None, pct("50%")));
    for name in ["a", "b", "c"] {
        f.seed(&pod(name, Some(new_controller_ref(&rs)), true));
    }
    let (_, status) = f.sync().await;
    // The Deployment's 4 replicas are expected, not the ReplicaSet's 3: 50 % of 4 may be
    // unavailable, so 2 must be healthy; 3 are, one disruption allowed.
    assert_eq!(counts(&status), (3, 2, 4, 1));
}

#[tokio::test]
async fn min_available_as_a_percentage_rounds_up_over_the_controllers_scale() {
    let f = Fixture::new();
    let rs = replica_set("web-abc", 3, None);
    f.seed(&rs);
    let sts = StatefulSet {
        metadata: meta("db"),
        spec: Some(StatefulSetSpec { replicas: Some(2), selector: web(), ..Default::default() }),
        status: None,
    };
    f.seed(&sts);
    let rc = ReplicationController {
        metadata: meta("legacy"),
        spec: Some(ReplicationControllerSpec { replicas: Some(2), ..Default::default() }),
        status: None,
    };
    f.seed(&rc);
    f.seed(&pdb(pct("51%"), None));
    f.seed(&pod("r1", Some(new_controller_ref(&rs)), true));
    f.seed(&pod("r2", Some(new_controller_ref(&rs)), true));
    f.seed(&pod("s1", Some(new_controller_ref(&sts)), true));
    f.seed(&pod("l1", Some(new_controller_ref(&rc)), true));
    f.seed(&pod("l2", Some(new_controller_ref(&rc)), false));
    let (_, status) = f.sync().await;
    // 3 + 2 + 2 = 7 expected; 51 % of 7 is 3.57, rounded up to 4; 4 healthy.
    assert_eq!(counts(&status), (4, 4, 7, 0));
}

#[tokio::test]
async fn a_custom_resource_with_a_scale_subresource_is_found_through_discovery() {
    let f = Fixture::new();
    let widgets = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    f.api.set_discovery(vec![DiscoveredResource {
        resource: widgets.clone(),
        namespaced: true,
        verbs: vec!["get".into()],
    }]);
    f.api.seed_value(
        &widgets,
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w", "namespace": "ns", "uid": "w-uid"}, "spec": {"replicas": 5}}),
    );
    let owner = OwnerReference {
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        name: "w".into(),
        uid: "w-uid".into(),
        controller: Some(true),
        ..Default::default()
    };
    f.seed(&pdb(None, int(1)));
    for name in ["a", "b", "c", "d"] {
        f.seed(&pod(name, Some(owner.clone()), true));
    }
    let (_, status) = f.sync().await;
    assert_eq!(counts(&status), (4, 4, 5, 0));
    assert!(f.api.actions().iter().any(|a| a.subresource.as_deref() == Some("scale")));
}

#[tokio::test]
async fn a_pod_without_a_known_controller_fails_safe_with_sync_failed() {
    let f = Fixture::new();
    let mut budget = pdb(None, int(1));
    budget.status = Some(PodDisruptionBudgetStatus { disruptions_allowed: 2, ..Default::default() });
    f.seed(&budget);
    let gone = OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "gone".into(),
        uid: "gone-uid".into(),
        controller: Some(true),
        ..Default::default()
    };
    f.seed(&pod("a", Some(gone), true));
    // ReplicaSets are known to discovery (the scale finder's mapping), the named one is gone.
    f.api.set_discovery(vec![DiscoveredResource {
        resource: ApiResource::erase::<ReplicaSet>(&()),
        namespaced: true,
        verbs: vec!["get".into()],
    }]);
    let (result, status) = f.sync().await;
    assert_eq!(result.unwrap(), Action::RequeueAfter(PDB_RESYNC));
    assert_eq!(status["disruptionsAllowed"], 0);
    assert_eq!(status["conditions"][0]["reason"], "SyncFailed");
    assert!(status["conditions"][0]["message"].as_str().unwrap().contains("found no controllers for pod \"a\""));
    assert!(f.events().iter().any(|e| e.starts_with("Warning CalculateExpectedPodCountFailed")));
}

#[tokio::test]
async fn unmanaged_pods_with_a_percentage_are_reported_but_not_fatal() {
    let f = Fixture::new();
    f.seed(&pdb(None, pct("10%")));
    f.seed(&pod("a", None, true));
    let (result, status) = f.sync().await;
    assert!(result.is_ok());
    assert_eq!(counts(&status), (1, 0, 0, 0));
    assert!(f.events().iter().any(|e| e.starts_with("Warning UnmanagedPods")));
}

#[tokio::test]
async fn freshly_disrupted_pods_are_not_healthy_until_their_entry_expires() {
    let f = Fixture::new();
    let mut budget = pdb(int(1), None);
    let fresh = Time(add_seconds(now(), -110));
    let stale = Time(add_seconds(now(), -121));
    budget.status = Some(PodDisruptionBudgetStatus {
        disrupted_pods: Some([("a".to_string(), fresh.clone()), ("b".to_string(), stale)].into()),
        ..Default::default()
    });
    f.seed(&budget);
    for name in ["a", "b", "c"] {
        f.seed(&pod(name, None, true));
    }
    let (result, status) = f.sync().await;
    // "a" was evicted 110 s ago and is not healthy; "b"'s entry is past the 2 minutes and dropped.
    assert_eq!(counts(&status), (2, 1, 3, 1));
    assert_eq!(status["disruptedPods"], json!({"a": serde_json::to_value(&fresh).unwrap()}));
    assert!(
        f.events()
            .iter()
            .any(|e| e == "Warning NotDeleted Pod was expected by PDB ns/budget to be deleted but it wasn't")
    );
    // Looked at again when "a"'s entry expires, 10 s from now.
    assert_eq!(result.unwrap(), Action::RequeueAfter(Duration::from_secs(10)));
}

#[tokio::test]
async fn pods_being_deleted_are_neither_healthy_nor_kept_as_disrupted() {
    let f = Fixture::new();
    let mut budget = pdb(int(1), None);
    budget.status = Some(PodDisruptionBudgetStatus {
        disrupted_pods: Some([("a".to_string(), Time(add_seconds(now(), -5)))].into()),
        ..Default::default()
    });
    f.seed(&budget);
    let mut going = pod("a", None, true);
    going.metadata.deletion_timestamp = Some(Time(now()));
    f.seed(&going);
    f.seed(&pod("b", None, true));
    let (_, status) = f.sync().await;
    assert_eq!(counts(&status), (1, 1, 2, 0));
    assert_eq!(status["disruptedPods"], json!({}));
}

#[tokio::test]
async fn an_unchanged_status_is_not_written_again() {
    let f = Fixture::new();
    f.seed(&pdb(int(1), None));
    f.seed(&pod("a", None, true));
    f.seed(&pod("b", None, true));
    let (_, status) = f.sync().await;
    let mut synced = pdb(int(1), None);
    synced.status = Some(serde_json::from_value(status).unwrap());
    f.seed(&synced);
    let (_, again) = f.sync().await;
    assert_eq!(again, Value::Null, "{:?}", f.api.mutation_summaries());
}

#[tokio::test]
async fn an_empty_selector_selects_every_pod_and_an_absent_one_none() {
    let f = Fixture::new();
    let mut all = pdb(int(1), None);
    all.spec.as_mut().unwrap().selector = Some(MetaSelector::default());
    f.seed(&all);
    f.seed(&pod("a", None, true));
    let (_, status) = f.sync().await;
    assert_eq!(counts(&status), (1, 1, 1, 0));

    let mut none = pdb(int(1), None);
    none.spec.as_mut().unwrap().selector = None;
    f.seed(&none);
    let (_, status) = f.sync().await;
    assert_eq!(counts(&status), (0, 1, 0, 0));
    assert!(f.events().iter().any(|e| e == "Normal NoPods No matching pods found"));
}

#[test]
fn pod_and_scale_changes_enqueue_the_budgets_that_cover_them() {
    let f = Fixture::new();
    f.seed(&pdb(int(1), None));
    let mut other = pdb(int(1), None);
    other.metadata.name = Some("other".into());
    other.spec.as_mut().unwrap().selector =
        Some(MetaSelector { match_labels: Some([("app".to_string(), "db".to_string())].into()), ..Default::default() });
    f.seed(&other);
    let q = f.controller.queue().clone();
    futures::executor::block_on(skiff_runtime::fake::drain_queue(&q));
    f.seed(&pod("a", None, true));
    assert_eq!(q.len(), 1);
    futures::executor::block_on(skiff_runtime::fake::drain_queue(&q));

    let rs = replica_set("web-abc", 3, None);
    f.seed(&rs);
    assert!(q.is_empty(), "adding a workload changes no budget's count");
    f.seed(&replica_set("web-abc", 4, None));
    assert_eq!(q.len(), 2, "a scale change re-syncs every budget of the namespace");
}
