//! The StatefulSet controller against `FakeApi`: one sync from a seeded cache, then the
//! recorded writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetOrdinals,
    StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec, StatefulSetStatus, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as MetaSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use serde_json::Value;
use skiff_runtime::api::ApiClientExt;

use super::utils::{
    POD_INDEX_LABEL, STATEFUL_SET_POD_NAME_LABEL, STATEFUL_SET_REVISION_LABEL, new_revision, new_stateful_set_pod,
    set_pod_revision,
};
use super::*;
use crate::util::{add_seconds, fixed_clock};
use skiff_runtime::fake::FakeApi;

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn sts(replicas: i32) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            uid: Some("web-uid".into()),
            generation: Some(1),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some("web".into()),
            pod_management_policy: Some("OrderedReady".into()),
            revision_history_limit: Some(10),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateStatefulSetStrategy { partition: Some(0), max_unavailable: None }),
            }),
            selector: MetaSelector { match_labels: Some(labels(&[("app", "web")])), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels(&[("app", "web")])), ..Default::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "c".into(),
                        image: Some("nginx:1".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

fn spec_mut(set: &mut StatefulSet) -> &mut StatefulSetSpec {
    set.spec.as_mut().unwrap()
}

fn with_claims(mut set: StatefulSet, when_deleted: &str, when_scaled: &str) -> StatefulSet {
    let spec = spec_mut(&mut set);
    spec.volume_claim_templates = Some(vec![PersistentVolumeClaim {
        metadata: ObjectMeta { name: Some("data".into()), ..Default::default() },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            ..Default::default()
        }),
        status: None,
    }]);
    spec.persistent_volume_claim_retention_policy = Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
        when_deleted: Some(when_deleted.into()),
        when_scaled: Some(when_scaled.into()),
    });
    set
}

fn set_image(set: &mut StatefulSet, image: &str) {
    spec_mut(set).template.spec.as_mut().unwrap().containers[0].image = Some(image.into());
    set.metadata.generation = Some(set.metadata.generation.unwrap_or(1) + 1);
}

/// The revision of the set's current template, numbered `number`, as the API would hold it.
fn revision(set: &StatefulSet, number: i64) -> ControllerRevision {
    let mut r = new_revision(set, number, 0);
    r.metadata.uid = Some(format!("{}-uid", r.metadata.name.clone().unwrap()));
    r.metadata.creation_timestamp = Some(Time(add_seconds(now(), number - 1000)));
    r
}

fn revision_name(r: &ControllerRevision) -> String {
    r.metadata.name.clone().unwrap()
}

#[derive(Clone, Copy)]
enum State {
    Pending,
    NotReady,
    Ready(i64),
    Failed,
}

/// Pod `ordinal` of `set`, created from `revision`, in `state`.
fn pod(set: &StatefulSet, ordinal: i32, revision: &str, state: State) -> Pod {
    let mut p = new_stateful_set_pod(set, ordinal);
    set_pod_revision(&mut p, revision);
    p.metadata.uid = Some(format!("web-{ordinal}-uid"));
    p.metadata.resource_version = Some("5".into());
    let (phase, ready_since) = match state {
        State::Pending => ("Pending", None),
        State::NotReady => ("Running", None),
        State::Ready(since) => ("Running", Some(since)),
        State::Failed => ("Failed", None),
    };
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        conditions: ready_since.map(|s| {
            vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(Time(add_seconds(now(), -s))),
                ..Default::default()
            }]
        }),
        ..Default::default()
    });
    p
}

struct Fixture {
    api: Arc<FakeApi>,
    factory: SharedInformerFactory,
    controller: Arc<StatefulSetController>,
    recorder: EventRecorder,
}

impl Fixture {
    fn new() -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let recorder = EventRecorder::recording("statefulset-controller");
        let controller = StatefulSetController::with_clock(
            api.clone(),
            &factory,
            Arc::new(WorkQueue::new()),
            recorder.clone(),
            fixed_clock(now()),
        );
        Self { api, factory, controller, recorder }
    }

    fn seed<K: skiff_runtime::api::ApiObject + std::fmt::Debug>(&self, obj: &K) {
        self.api.seed(obj);
        self.factory.informer::<K>().handle_event(Event::Apply(obj.clone()));
    }

    /// Seeds the set already at its first revision with `ready` ready pods of it (ordinals 0…);
    /// returns the revision.
    fn seed_settled(&self, set: &mut StatefulSet, ready: i32) -> ControllerRevision {
        let r = revision(set, 1);
        self.seed(&r);
        let name = revision_name(&r);
        set.status = Some(StatefulSetStatus {
            replicas: ready,
            ready_replicas: Some(ready),
            current_replicas: Some(ready),
            updated_replicas: Some(ready),
            current_revision: Some(name.clone()),
            update_revision: Some(name.clone()),
            observed_generation: Some(1),
            ..Default::default()
        });
        for i in 0..ready {
            self.seed(&pod(set, i, &name, State::Ready(600)));
        }
        self.seed(set);
        r
    }

    async fn sync(&self) -> ReconcileResult {
        self.api.clear_actions();
        self.controller.sync_stateful_set("ns/web").await
    }

    fn created(&self, resource: &str) -> Vec<Value> {
        self.api
            .mutations()
            .into_iter()
            .filter(|a| a.verb == "create" && a.resource == resource)
            .filter_map(|a| a.body)
            .collect()
    }

    fn created_pod_names(&self) -> Vec<String> {
        self.created("pods").iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_string()).collect()
    }

    fn deleted_pods(&self) -> Vec<String> {
        self.api
            .mutations()
            .into_iter()
            .filter(|a| a.verb == "delete" && a.resource == "pods")
            .map(|a| a.name)
            .collect()
    }

    fn written_status(&self) -> Value {
        let update = self
            .api
            .mutations()
            .into_iter()
            .rfind(|a| a.verb == "update" && a.subresource.as_deref() == Some("status"))
            .expect("a status write");
        update.body.unwrap()["status"].clone()
    }

    fn events(&self) -> Vec<String> {
        self.recorder.recorded().iter().map(|e| e.summary()).collect()
    }
}

#[tokio::test]
async fn ordered_ready_creates_only_the_first_pod_with_its_stable_identity() {
    let f = Fixture::new();
    let set = sts(3);
    f.seed(&set);
    assert_eq!(f.sync().await.unwrap(), Action::AwaitChange);
    let revisions = f.created("controllerrevisions");
    assert_eq!(revisions.len(), 1);
    let rev = revisions[0]["metadata"]["name"].as_str().unwrap();
    assert_eq!(revisions[0]["revision"], 1);
    assert_eq!(revisions[0]["data"]["spec"]["template"]["$patch"], "replace");
    assert_eq!(revisions[0]["metadata"]["ownerReferences"][0]["uid"], "web-uid");
    assert_eq!(f.created_pod_names(), ["web-0"]);
    let p = &f.created("pods")[0];
    assert_eq!(p["spec"]["hostname"], "web-0");
    assert_eq!(p["spec"]["subdomain"], "web");
    assert_eq!(p["metadata"]["labels"][STATEFUL_SET_POD_NAME_LABEL], "web-0");
    assert_eq!(p["metadata"]["labels"][POD_INDEX_LABEL], "0");
    assert_eq!(p["metadata"]["labels"][STATEFUL_SET_REVISION_LABEL], rev);
    assert_eq!(p["metadata"]["labels"]["app"], "web");
    assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
    assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
    let status = f.written_status();
    assert_eq!(status["currentRevision"], rev);
    assert_eq!(status["updateRevision"], rev);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["collisionCount"], 0);
    assert_eq!(f.events(), ["Normal SuccessfulCreate create Pod web-0 in StatefulSet web successful"]);
}

#[tokio::test]
async fn ordered_ready_creates_the_next_pod_only_once_its_predecessor_is_ready() {
    let f = Fixture::new();
    let mut set = sts(3);
    let r = revision(&set, 1);
    f.seed(&r);
    set.status = Some(StatefulSetStatus {
        current_revision: Some(revision_name(&r)),
        update_revision: Some(revision_name(&r)),
        ..Default::default()
    });
    f.seed(&set);
    f.seed(&pod(&set, 0, &revision_name(&r), State::NotReady));
    f.sync().await.unwrap();
    assert!(f.created_pod_names().is_empty(), "{:?}", f.api.mutation_summaries());
    assert_eq!(f.written_status()["replicas"], 1);

    f.seed(&pod(&set, 0, &revision_name(&r), State::Ready(5)));
    f.sync().await.unwrap();
    assert_eq!(f.created_pod_names(), ["web-1"]);
}

#[tokio::test]
async fn parallel_management_creates_every_missing_pod_at_once() {
    let f = Fixture::new();
    let mut set = sts(3);
    spec_mut(&mut set).pod_management_policy = Some("Parallel".into());
    f.seed(&set);
    f.sync().await.unwrap();
    let mut names = f.created_pod_names();
    names.sort();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
}

#[tokio::test]
async fn ordinals_start_numbers_the_pods_from_the_start_ordinal() {
    let f = Fixture::new();
    let mut set = sts(2);
    spec_mut(&mut set).pod_management_policy = Some("Parallel".into());
    spec_mut(&mut set).ordinals = Some(StatefulSetOrdinals { start: Some(5) });
    f.seed(&set);
    f.sync().await.unwrap();
    let mut names = f.created_pod_names();
    names.sort();
    assert_eq!(names, ["web-5", "web-6"]);
    assert!(f.created("pods").iter().any(|p| p["metadata"]["labels"][POD_INDEX_LABEL] == "5"));
}

#[tokio::test]
async fn each_pod_gets_its_claims_created_before_it_named_after_template_set_and_ordinal() {
    let f = Fixture::new();
    let set = with_claims(sts(1), "Retain", "Retain");
    f.seed(&set);
    f.sync().await.unwrap();
    let order: Vec<String> = f
        .api
        .mutation_summaries()
        .into_iter()
        .filter(|s| s.starts_with("create persistentvolumeclaims") || s.starts_with("create pods"))
        .collect();
    assert_eq!(order, ["create persistentvolumeclaims ns/data-web-0", "create pods ns/web-0"]);
    let claim = &f.created("persistentvolumeclaims")[0];
    assert_eq!(claim["metadata"]["labels"]["app"], "web");
    assert_eq!(claim["metadata"]["ownerReferences"], Value::Null);
    let volumes = &f.created("pods")[0]["spec"]["volumes"];
    assert_eq!(volumes[0]["name"], "data");
    assert_eq!(volumes[0]["persistentVolumeClaim"]["claimName"], "data-web-0");
    assert!(
        f.events().contains(
            &"Normal SuccessfulCreate create Claim data-web-0 Pod web-0 in StatefulSet web success".to_string()
        )
    );
}

#[tokio::test]
async fn an_existing_claim_is_reused_when_its_pod_is_recreated() {
    let f = Fixture::new();
    let set = with_claims(sts(1), "Retain", "Retain");
    f.seed(&set);
    let mut claim = super::utils::persistent_volume_claims(&set, 0).remove(0).1;
    claim.metadata.uid = Some("claim-uid".into());
    f.seed(&claim);
    f.sync().await.unwrap();
    assert!(f.created("persistentvolumeclaims").is_empty());
    assert_eq!(f.created_pod_names(), ["web-0"]);
}

#[tokio::test]
async fn scale_down_deletes_the_highest_ordinal_first_and_one_at_a_time() {
    let f = Fixture::new();
    let mut set = sts(3);
    f.seed_settled(&mut set, 3);
    spec_mut(&mut set).replicas = Some(1);
    f.seed(&set);
    f.sync().await.unwrap();
    assert_eq!(f.deleted_pods(), ["web-2"]);
    assert_eq!(f.events(), ["Normal SuccessfulDelete delete Pod web-2 in StatefulSet web successful"]);
}

#[tokio::test]
async fn parallel_scale_down_deletes_every_surplus_pod_at_once() {
    let f = Fixture::new();
    let mut set = sts(3);
    spec_mut(&mut set).pod_management_policy = Some("Parallel".into());
    f.seed_settled(&mut set, 3);
    spec_mut(&mut set).replicas = Some(0);
    f.seed(&set);
    f.sync().await.unwrap();
    let mut deleted = f.deleted_pods();
    deleted.sort();
    assert_eq!(deleted, ["web-0", "web-1", "web-2"]);
}

#[tokio::test]
async fn scale_down_leaves_retained_claims_alone() {
    let f = Fixture::new();
    let mut set = with_claims(sts(2), "Retain", "Retain");
    f.seed_settled(&mut set, 2);
    for (_, mut claim) in [0, 1].iter().flat_map(|o| super::utils::persistent_volume_claims(&set, *o)) {
        claim.metadata.uid = Some(format!("{}-uid", claim.metadata.name.clone().unwrap()));
        f.seed(&claim);
    }
    spec_mut(&mut set).replicas = Some(1);
    f.seed(&set);
    f.sync().await.unwrap();
    assert_eq!(f.deleted_pods(), ["web-1"]);
    assert!(
        f.api.mutations().iter().all(|a| a.resource != "persistentvolumeclaims"),
        "{:?}",
        f.api.mutation_summaries()
    );
}

#[tokio::test]
async fn when_scaled_delete_makes_a_scaled_down_pod_own_its_claim_before_it_is_deleted() {
    let f = Fixture::new();
    let mut set = with_claims(sts(2), "Retain", "Delete");
    f.seed_settled(&mut set, 2);
    for o in [0, 1] {
        let (_, mut claim) = super::utils::persistent_volume_claims(&set, o).remove(0);
        claim.metadata.uid = Some(format!("claim-{o}-uid"));
        f.seed(&claim);
    }
    spec_mut(&mut set).replicas = Some(1);
    f.seed(&set);
    f.sync().await.unwrap();
    let summaries = f.api.mutation_summaries();
    let patch_at =
        summaries.iter().position(|s| s == "patch persistentvolumeclaims ns/data-web-1").expect("claim patched");
    let delete_at = summaries.iter().position(|s| s == "delete pods ns/web-1").expect("pod deleted");
    assert!(patch_at < delete_at, "{summaries:?}");
    let patch = f.api.mutations().into_iter().find(|a| a.name == "data-web-1").unwrap().body.unwrap();
    let refs = &patch["metadata"]["ownerReferences"];
    assert_eq!(refs.as_array().unwrap().len(), 1);
    assert_eq!(refs[0]["kind"], "Pod");
    assert_eq!(refs[0]["uid"], "web-1-uid");
    assert_eq!(refs[0]["controller"], true);
    // The claim of the pod that stays is not touched.
    assert!(summaries.iter().all(|s| !s.ends_with("data-web-0")), "{summaries:?}");
}

#[tokio::test]
async fn when_deleted_delete_makes_the_set_own_its_claims() {
    let f = Fixture::new();
    let mut set = with_claims(sts(1), "Delete", "Retain");
    f.seed_settled(&mut set, 1);
    let (_, mut claim) = super::utils::persistent_volume_claims(&set, 0).remove(0);
    claim.metadata.uid = Some("claim-uid".into());
    f.seed(&claim);
    f.sync().await.unwrap();
    let patch = f.api.mutations().into_iter().find(|a| a.name == "data-web-0").expect("claim patched").body.unwrap();
    assert_eq!(patch["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
    assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "web-uid");
}

#[tokio::test]
async fn a_claim_still_owned_by_a_deleted_pod_blocks_the_new_pod() {
    let f = Fixture::new();
    let set = with_claims(sts(1), "Retain", "Delete");
    f.seed(&set);
    let (_, mut claim) = super::utils::persistent_volume_claims(&set, 0).remove(0);
    let mut old_pod = pod(&set, 0, "old", State::Ready(10));
    old_pod.metadata.uid = Some("old-pod-uid".into());
    claim.metadata.owner_references = Some(vec![new_controller_ref(&old_pod)]);
    f.seed(&claim);
    f.sync().await.unwrap();
    assert!(f.created_pod_names().is_empty(), "{:?}", f.api.mutation_summaries());
}

#[tokio::test]
async fn a_rolling_update_with_a_partition_replaces_only_ordinals_at_or_above_it() {
    let f = Fixture::new();
    let mut set = sts(3);
    let old = f.seed_settled(&mut set, 3);
    set_image(&mut set, "nginx:2");
    spec_mut(&mut set).update_strategy.as_mut().unwrap().rolling_update.as_mut().unwrap().partition = Some(2);
    f.seed(&set);
    f.sync().await.unwrap();
    let revisions = f.created("controllerrevisions");
    assert_eq!(revisions.len(), 1);
    assert_eq!(revisions[0]["revision"], 2);
    let new = revisions[0]["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(f.deleted_pods(), ["web-2"]);
    let status = f.written_status();
    assert_eq!(status["currentRevision"], revision_name(&old));
    assert_eq!(status["updateRevision"], new);

    // web-2 is recreated at the new revision; web-0 and web-1 are below the partition and stay.
    let new_rev: ControllerRevision = f.api.object_typed(Some("ns"), &new).unwrap();
    f.seed(&new_rev);
    f.factory.informer::<Pod>().handle_event(Event::Delete(pod(&set, 2, &revision_name(&old), State::Ready(600))));
    f.sync().await.unwrap();
    assert_eq!(f.created_pod_names(), ["web-2"]);
    assert_eq!(f.created("pods")[0]["metadata"]["labels"][STATEFUL_SET_REVISION_LABEL], new);
    assert_eq!(f.created("pods")[0]["spec"]["containers"][0]["image"], "nginx:2");

    f.seed(&pod(&set, 2, &new, State::Ready(5)));
    f.sync().await.unwrap();
    assert!(f.deleted_pods().is_empty(), "{:?}", f.api.mutation_summaries());
    let status = f.written_status();
    assert_eq!(status["updatedReplicas"], 1);
    assert_eq!(status["currentReplicas"], 2);
    assert_eq!(status["currentRevision"], revision_name(&old));
}

#[tokio::test]
async fn a_pod_missing_below_the_partition_is_recreated_at_the_current_revision() {
    let f = Fixture::new();
    let mut set = sts(3);
    let old = f.seed_settled(&mut set, 3);
    let old_set = set.clone();
    set_image(&mut set, "nginx:2");
    spec_mut(&mut set).update_strategy.as_mut().unwrap().rolling_update.as_mut().unwrap().partition = Some(2);
    f.seed(&set);
    // web-0 was deleted by hand.
    f.api.delete_typed::<Pod>(Some("ns"), "web-0", &Default::default()).await.unwrap();
    f.factory.informer::<Pod>().handle_event(Event::Delete(pod(&old_set, 0, &revision_name(&old), State::Ready(600))));
    f.sync().await.unwrap();
    assert_eq!(f.created_pod_names(), ["web-0"]);
    let p = &f.created("pods")[0];
    assert_eq!(p["metadata"]["labels"][STATEFUL_SET_REVISION_LABEL], revision_name(&old));
    assert_eq!(p["spec"]["containers"][0]["image"], "nginx:1");
}

#[tokio::test]
async fn max_unavailable_replaces_that_many_pods_at_once_highest_first() {
    let f = Fixture::new();
    let mut set = sts(3);
    f.seed_settled(&mut set, 3);
    set_image(&mut set, "nginx:2");
    spec_mut(&mut set).update_strategy.as_mut().unwrap().rolling_update.as_mut().unwrap().max_unavailable =
        Some(IntOrString::Int(2));
    f.seed(&set);
    f.sync().await.unwrap();
    assert_eq!(f.deleted_pods(), ["web-2", "web-1"]);
}

#[tokio::test]
async fn a_rolling_update_waits_while_a_replica_is_unavailable() {
    let f = Fixture::new();
    let mut set = sts(3);
    spec_mut(&mut set).pod_management_policy = Some("Parallel".into());
    let old = f.seed_settled(&mut set, 3);
    f.seed(&pod(&set, 0, &revision_name(&old), State::NotReady));
    set_image(&mut set, "nginx:2");
    f.seed(&set);
    f.sync().await.unwrap();
    assert!(f.deleted_pods().is_empty(), "{:?}", f.api.mutation_summaries());
}

#[tokio::test]
async fn on_delete_never_deletes_pods_for_an_update() {
    let f = Fixture::new();
    let mut set = sts(2);
    f.seed_settled(&mut set, 2);
    set_image(&mut set, "nginx:2");
    spec_mut(&mut set).update_strategy =
        Some(StatefulSetUpdateStrategy { type_: Some("OnDelete".into()), rolling_update: None });
    f.seed(&set);
    f.sync().await.unwrap();
    assert!(f.deleted_pods().is_empty());
    assert_eq!(f.written_status()["updatedReplicas"], 0);
}

#[tokio::test]
async fn a_finished_rolling_update_makes_the_update_revision_current() {
    let f = Fixture::new();
    let mut set = sts(2);
    let old = f.seed_settled(&mut set, 2);
    set_image(&mut set, "nginx:2");
    let new = revision(&set, 2);
    f.seed(&new);
    f.seed(&set);
    for i in 0..2 {
        f.seed(&pod(&set, i, &revision_name(&new), State::Ready(100)));
    }
    f.sync().await.unwrap();
    let status = f.written_status();
    assert_eq!(status["currentRevision"], revision_name(&new));
    assert_eq!(status["updateRevision"], revision_name(&new));
    assert_eq!(status["currentReplicas"], 2);
    assert_eq!(status["updatedReplicas"], 2);
    assert_eq!(status["observedGeneration"], 2);
    assert_ne!(revision_name(&old), revision_name(&new));
}

#[tokio::test]
async fn going_back_to_an_earlier_template_renumbers_its_revision_instead_of_creating_one() {
    let f = Fixture::new();
    let mut set = sts(1);
    let first = f.seed_settled(&mut set, 1);
    let mut second_set = set.clone();
    set_image(&mut second_set, "nginx:2");
    let second = revision(&second_set, 2);
    f.seed(&second);
    // The set's template is the first revision's again (`kubectl rollout undo`).
    f.seed(&set);
    f.sync().await.unwrap();
    assert!(f.created("controllerrevisions").is_empty());
    let update = f
        .api
        .mutations()
        .into_iter()
        .find(|a| a.verb == "update" && a.resource == "controllerrevisions")
        .expect("revision renumbered");
    assert_eq!(update.name, revision_name(&first));
    assert_eq!(update.body.unwrap()["revision"], 3);
}

#[tokio::test]
async fn revisions_beyond_the_history_limit_are_deleted_oldest_first() {
    let f = Fixture::new();
    let mut set = sts(1);
    spec_mut(&mut set).revision_history_limit = Some(1);
    let mut old_names = Vec::new();
    for (i, image) in ["a", "b", "c"].iter().enumerate() {
        let mut s = sts(1);
        set_image(&mut s, image);
        let r = revision(&s, i as i64 + 1);
        old_names.push(revision_name(&r));
        f.seed(&r);
    }
    f.seed_settled(&mut set, 1);
    f.sync().await.unwrap();
    let deleted: Vec<String> = f
        .api
        .mutations()
        .into_iter()
        .filter(|a| a.verb == "delete" && a.resource == "controllerrevisions")
        .map(|a| a.name)
        .collect();
    assert_eq!(deleted, old_names[..2]);
}

#[tokio::test]
async fn a_failed_pod_is_deleted_and_its_replacement_waits_for_it_to_be_gone() {
    let f = Fixture::new();
    let mut set = sts(1);
    let r = f.seed_settled(&mut set, 1);
    f.seed(&pod(&set, 0, &revision_name(&r), State::Failed));
    f.sync().await.unwrap();
    assert_eq!(f.deleted_pods(), ["web-0"]);
    assert!(f.created_pod_names().is_empty());
}

#[tokio::test]
async fn status_counts_ready_and_available_replicas_and_requeues_for_min_ready_seconds() {
    let f = Fixture::new();
    let mut set = sts(3);
    spec_mut(&mut set).min_ready_seconds = Some(30);
    spec_mut(&mut set).pod_management_policy = Some("Parallel".into());
    let r = f.seed_settled(&mut set, 3);
    f.seed(&pod(&set, 1, &revision_name(&r), State::Ready(10)));
    f.seed(&pod(&set, 2, &revision_name(&r), State::Pending));
    set.status.as_mut().unwrap().ready_replicas = Some(0);
    f.seed(&set);
    let action = f.sync().await.unwrap();
    let status = f.written_status();
    assert_eq!(status["replicas"], 3);
    assert_eq!(status["readyReplicas"], 2);
    assert_eq!(status["availableReplicas"], 1);
    assert_eq!(status["currentReplicas"], 3);
    assert_eq!(status["updatedReplicas"], 3);
    assert_eq!(action, Action::RequeueAfter(Duration::from_secs(30)));
}

#[tokio::test]
async fn orphans_named_after_the_set_are_adopted_and_other_matching_pods_ignored() {
    let f = Fixture::new();
    let mut set = sts(1);
    let r = f.seed_settled(&mut set, 0);
    f.seed(&set);
    let mut orphan = pod(&set, 0, &revision_name(&r), State::Ready(60));
    orphan.metadata.owner_references = None;
    f.seed(&orphan);
    let mut stranger = pod(&set, 0, &revision_name(&r), State::Ready(60));
    stranger.metadata.name = Some("other-0".into());
    stranger.metadata.owner_references = None;
    f.seed(&stranger);
    f.sync().await.unwrap();
    let patched: Vec<String> =
        f.api.mutations().into_iter().filter(|a| a.verb == "patch" && a.resource == "pods").map(|a| a.name).collect();
    assert_eq!(patched, ["web-0"]);
    assert!(f.created_pod_names().is_empty());
}

#[tokio::test]
async fn a_deleted_statefulset_is_not_synced() {
    let f = Fixture::new();
    assert_eq!(f.sync().await.unwrap(), Action::AwaitChange);
    assert!(f.api.actions().is_empty());
}
