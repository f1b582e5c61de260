use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
    PersistentVolumeSpec, PersistentVolumeStatus, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::runtime::watcher::Event;
use skiff_runtime::fake::FakeApi;

use super::*;

fn storage(q: &str) -> Option<BTreeMap<String, Quantity>> {
    Some(BTreeMap::from([("storage".to_string(), Quantity(q.into()))]))
}

fn volume(name: &str, size: &str, class: &str, phase: &str) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta { name: Some(name.into()), uid: Some(format!("{name}-uid")), ..Default::default() },
        spec: Some(PersistentVolumeSpec {
            capacity: storage(size),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some(class.into()).filter(|c: &String| !c.is_empty()),
            persistent_volume_reclaim_policy: Some("Retain".into()),
            volume_mode: Some("Filesystem".into()),
            ..Default::default()
        }),
        status: Some(PersistentVolumeStatus { phase: Some(phase.into()), ..Default::default() }),
    }
}

fn claim(name: &str, size: &str, class: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("{name}-uid")),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements { requests: storage(size), ..Default::default() }),
            storage_class_name: Some(class.into()),
            volume_mode: Some("Filesystem".into()),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus { phase: Some("Pending".into()), ..Default::default() }),
    }
}

fn bound_to(mut v: PersistentVolume, c: &PersistentVolumeClaim) -> PersistentVolume {
    v.spec.as_mut().unwrap().claim_ref = Some(ObjectReference {
        namespace: c.metadata.namespace.clone(),
        name: c.metadata.name.clone(),
        uid: c.metadata.uid.clone(),
        ..Default::default()
    });
    v
}

struct Env {
    api: Arc<FakeApi>,
    factory: SharedInformerFactory,
    controller: Arc<PersistentVolumeController>,
    recorder: EventRecorder,
}

impl Env {
    fn new() -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let recorder = EventRecorder::recording("persistentvolume-controller");
        let controller =
            PersistentVolumeController::new(api.clone(), &factory, Arc::new(WorkQueue::new()), recorder.clone());
        Self { api, factory, controller, recorder }
    }

    fn claim(&self, c: &PersistentVolumeClaim) {
        self.api.seed(c);
        self.factory.informer::<PersistentVolumeClaim>().handle_event(Event::Apply(c.clone()));
    }

    fn volume(&self, v: &PersistentVolume) {
        self.api.seed(v);
        self.factory.informer::<PersistentVolume>().handle_event(Event::Apply(v.clone()));
    }

    fn class(&self, name: &str, mode: &str) {
        let sc = StorageClass {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            provisioner: "skiff.io/local-path".into(),
            volume_binding_mode: Some(mode.into()),
            ..Default::default()
        };
        self.factory.informer::<StorageClass>().handle_event(Event::Apply(sc));
    }

    fn stored_volume(&self, name: &str) -> PersistentVolume {
        self.api.object_typed(None, name).unwrap()
    }

    fn stored_claim(&self, name: &str) -> PersistentVolumeClaim {
        self.api.object_typed(Some("ns"), name).unwrap()
    }

    fn events(&self) -> Vec<String> {
        self.recorder.recorded().iter().map(|e| e.summary()).collect()
    }
}

fn vphase(v: &PersistentVolume) -> &str {
    v.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn cphase(c: &PersistentVolumeClaim) -> &str {
    c.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn ann<'a>(meta: &'a ObjectMeta, k: &str) -> Option<&'a str> {
    meta.annotations.as_ref().and_then(|a| a.get(k)).map(String::as_str)
}

#[tokio::test]
async fn a_pending_claim_binds_the_smallest_available_volume_that_fits() {
    let env = Env::new();
    env.volume(&volume("small", "1Gi", "", "Available"));
    env.volume(&volume("big", "10Gi", "", "Available"));
    env.volume(&volume("fit", "5Gi", "", "Available"));
    env.claim(&claim("data", "2Gi", ""));
    env.controller.sync_claim("ns/data").await.unwrap();

    let v = env.stored_volume("fit");
    assert_eq!(vphase(&v), "Bound");
    assert_eq!(v.spec.as_ref().unwrap().claim_ref.as_ref().unwrap().uid.as_deref(), Some("data-uid"));
    assert_eq!(ann(&v.metadata, ANN_BOUND_BY_CONTROLLER), Some("yes"));
    let c = env.stored_claim("data");
    assert_eq!(cphase(&c), "Bound");
    assert_eq!(c.spec.as_ref().unwrap().volume_name.as_deref(), Some("fit"));
    assert_eq!(ann(&c.metadata, ANN_BIND_COMPLETED), Some("yes"));
    assert_eq!(ann(&c.metadata, ANN_BOUND_BY_CONTROLLER), Some("yes"));
    assert_eq!(c.status.as_ref().unwrap().capacity, storage("5Gi"));
    assert_eq!(vphase(&env.stored_volume("small")), "Available");
}

#[tokio::test]
async fn volumes_of_another_class_mode_or_label_are_not_bound() {
    let env = Env::new();
    env.volume(&volume("other-class", "5Gi", "fast", "Available"));
    let mut rwx = claim("data", "1Gi", "");
    rwx.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteMany".into()]);
    let mut v = volume("rwo", "5Gi", "", "Available");
    v.metadata.labels = Some(BTreeMap::from([("tier".to_string(), "gold".to_string())]));
    env.volume(&v);
    env.claim(&rwx);
    env.controller.sync_claim("ns/data").await.unwrap();
    assert_eq!(cphase(&env.stored_claim("data")), "Pending");

    let mut labelled = claim("data", "1Gi", "");
    labelled.spec.as_mut().unwrap().selector = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([("tier".to_string(), "silver".to_string())])),
        ..Default::default()
    });
    env.claim(&labelled);
    env.controller.sync_claim("ns/data").await.unwrap();
    assert!(env.api.mutation_summaries().is_empty());
    assert_eq!(
        env.events().last().map(String::as_str),
        Some("Normal FailedBinding no persistent volumes available for this claim and no storage class is set")
    );
}

#[tokio::test]
async fn a_claim_naming_a_volume_binds_it_and_a_volume_pre_bound_to_a_claim_is_taken_first() {
    let env = Env::new();
    env.volume(&volume("big", "10Gi", "", "Available"));
    let mut named = claim("named", "1Gi", "");
    named.spec.as_mut().unwrap().volume_name = Some("big".into());
    env.claim(&named);
    env.controller.sync_claim("ns/named").await.unwrap();
    assert_eq!(vphase(&env.stored_volume("big")), "Bound");
    let c = env.stored_claim("named");
    assert_eq!(cphase(&c), "Bound");
    // The user named the volume: the claim was not bound by the controller.
    assert_eq!(ann(&c.metadata, ANN_BOUND_BY_CONTROLLER), None);

    let env = Env::new();
    env.volume(&volume("fit", "1Gi", "", "Available"));
    let c = claim("data", "1Gi", "");
    let mut prebound = bound_to(volume("reserved", "8Gi", "", "Available"), &c);
    prebound.spec.as_mut().unwrap().claim_ref.as_mut().unwrap().uid = None;
    env.volume(&prebound);
    env.claim(&c);
    env.controller.sync_claim("ns/data").await.unwrap();
    assert_eq!(env.stored_claim("data").spec.unwrap().volume_name.as_deref(), Some("reserved"));
    assert_eq!(ann(&env.stored_volume("reserved").metadata, ANN_BOUND_BY_CONTROLLER), None);
}

#[tokio::test]
async fn a_named_volume_too_small_is_a_mismatch_and_the_claim_stays_pending() {
    let env = Env::new();
    env.volume(&volume("tiny", "1Mi", "", "Available"));
    let mut named = claim("named", "1Gi", "");
    named.spec.as_mut().unwrap().volume_name = Some("tiny".into());
    env.claim(&named);
    env.controller.sync_claim("ns/named").await.unwrap();
    assert!(env.api.mutation_summaries().is_empty());
    assert_eq!(
        env.events(),
        ["Warning VolumeMismatch Cannot bind to requested volume \"tiny\": requested PV is too small"]
    );
}

#[tokio::test]
async fn a_wait_for_first_consumer_claim_stays_pending_with_an_event() {
    let env = Env::new();
    env.class("local-path", "WaitForFirstConsumer");
    env.volume(&volume("v", "5Gi", "local-path", "Available"));
    env.claim(&claim("data", "1Gi", "local-path"));
    env.controller.sync_claim("ns/data").await.unwrap();
    assert!(env.api.mutation_summaries().is_empty());
    assert_eq!(env.events(), ["Normal WaitForFirstConsumer waiting for first consumer to be created before binding"]);
}

#[tokio::test]
async fn an_immediate_claim_of_a_provisioned_class_is_annotated_for_its_provisioner() {
    let env = Env::new();
    env.class("fast", "Immediate");
    env.claim(&claim("data", "1Gi", "fast"));
    env.controller.sync_claim("ns/data").await.unwrap();
    let c = env.stored_claim("data");
    assert_eq!(ann(&c.metadata, ANN_STORAGE_PROVISIONER), Some("skiff.io/local-path"));
    assert_eq!(cphase(&c), "Pending");
    assert!(env.events()[0].starts_with("Normal ExternalProvisioning Waiting for a volume to be created"));
}

#[tokio::test]
async fn a_bound_claim_whose_volume_is_gone_is_lost() {
    let env = Env::new();
    let mut c = claim("data", "1Gi", "");
    c.spec.as_mut().unwrap().volume_name = Some("gone".into());
    c.metadata.annotations = Some(BTreeMap::from([(ANN_BIND_COMPLETED.to_string(), "yes".to_string())]));
    env.claim(&c);
    env.controller.sync_claim("ns/data").await.unwrap();
    assert_eq!(cphase(&env.stored_claim("data")), "Lost");
    assert_eq!(
        env.events(),
        ["Warning ClaimLost Bound claim has lost its PersistentVolume. Data on the volume is lost!"]
    );
}

#[tokio::test]
async fn a_volume_without_a_claim_becomes_available() {
    let env = Env::new();
    env.volume(&volume("v", "1Gi", "", "Pending"));
    env.controller.sync_volume("v").await.unwrap();
    assert_eq!(vphase(&env.stored_volume("v")), "Available");
}

#[tokio::test]
async fn a_retained_volume_whose_claim_is_deleted_is_released_and_kept() {
    let env = Env::new();
    let c = claim("data", "1Gi", "");
    env.volume(&bound_to(volume("v", "1Gi", "", "Bound"), &c));
    env.controller.sync_volume("v").await.unwrap();
    assert_eq!(vphase(&env.stored_volume("v")), "Released");
    assert_eq!(env.api.mutation_summaries(), ["update persistentvolumes/status v"]);
}

#[tokio::test]
async fn a_deleted_volume_whose_claim_is_deleted_is_removed() {
    let env = Env::new();
    let c = claim("data", "1Gi", "");
    let mut v = bound_to(volume("v", "1Gi", "", "Bound"), &c);
    v.spec.as_mut().unwrap().persistent_volume_reclaim_policy = Some("Delete".into());
    env.volume(&v);
    env.controller.sync_volume("v").await.unwrap();
    assert_eq!(env.api.mutation_summaries(), ["update persistentvolumes/status v", "delete persistentvolumes v"]);
}

#[tokio::test]
async fn a_volume_whose_claim_was_recreated_is_released() {
    let env = Env::new();
    let old = claim("data", "1Gi", "");
    env.volume(&bound_to(volume("v", "1Gi", "", "Bound"), &old));
    let mut recreated = claim("data", "1Gi", "");
    recreated.metadata.uid = Some("new-uid".into());
    env.claim(&recreated);
    env.controller.sync_volume("v").await.unwrap();
    assert_eq!(vphase(&env.stored_volume("v")), "Released");
}

#[tokio::test]
async fn a_volume_bound_to_a_live_claim_stays_bound() {
    let env = Env::new();
    let mut c = claim("data", "1Gi", "");
    c.spec.as_mut().unwrap().volume_name = Some("v".into());
    env.claim(&c);
    env.volume(&bound_to(volume("v", "1Gi", "", "Bound"), &c));
    env.controller.sync_volume("v").await.unwrap();
    assert!(env.api.mutation_summaries().is_empty());
}

#[tokio::test]
async fn a_new_volume_queues_the_waiting_claims_of_its_class_or_the_claim_it_names() {
    let api = Arc::new(FakeApi::new());
    let factory = SharedInformerFactory::for_tests();
    let queue = Arc::new(WorkQueue::new());
    let _c = PersistentVolumeController::new(api, &factory, queue.clone(), EventRecorder::recording("pv"));
    let claims = factory.informer::<PersistentVolumeClaim>();
    claims.handle_event(Event::Apply(claim("manual", "1Gi", "")));
    claims.handle_event(Event::Apply(claim("fast", "1Gi", "fast")));
    skiff_runtime::fake::drain_queue(&queue).await;

    let volumes = factory.informer::<PersistentVolume>();
    volumes.handle_event(Event::Apply(volume("v", "1Gi", "", "Available")));
    assert_eq!(skiff_runtime::fake::drain_queue(&queue).await, ["volume:v", "claim:ns/manual"]);
    let other = claim("other", "1Gi", "fast");
    volumes.handle_event(Event::Apply(bound_to(volume("w", "1Gi", "fast", "Available"), &other)));
    assert_eq!(skiff_runtime::fake::drain_queue(&queue).await, ["volume:w", "claim:ns/other"]);
}

fn default_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some("local-path".into()),
            annotations: Some(BTreeMap::from([(
                "storageclass.kubernetes.io/is-default-class".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        provisioner: "skiff.io/local-path".into(),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_claim_without_a_class_gets_a_default_class_made_after_it() {
    let env = Env::new();
    let mut c = claim("data", "1Gi", "");
    c.spec.as_mut().unwrap().storage_class_name = None;
    env.claim(&c);
    env.controller.sync_claim("ns/data").await.unwrap();
    assert!(env.api.mutation_summaries().is_empty(), "no default class yet");

    env.factory.informer::<StorageClass>().handle_event(Event::Apply(default_class()));
    env.controller.sync_claim("ns/data").await.unwrap();
    assert_eq!(env.stored_claim("data").spec.unwrap().storage_class_name.as_deref(), Some("local-path"));

    // A claim that asked for no class ("") keeps it.
    let env = Env::new();
    env.factory.informer::<StorageClass>().handle_event(Event::Apply(default_class()));
    env.claim(&claim("none", "1Gi", ""));
    env.controller.sync_claim("ns/none").await.unwrap();
    assert!(env.api.mutation_summaries().is_empty());
}
