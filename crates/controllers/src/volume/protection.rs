//! The PVC and PV protection controllers (`pkg/controller/volume/pvcprotection` and
//! `pvprotection`): StorageObjectInUseProtection admission gives every claim the
//! `kubernetes.io/pvc-protection` finalizer and every volume `kubernetes.io/pv-protection`;
//! these remove the finalizer from a claim being deleted once no scheduled, unfinished pod
//! uses it, and from a volume being deleted once it is not Bound.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::util::{being_deleted, name_of};
use skiff_runtime::api::{ApiClient, ApiClientExt, is_not_found};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::informer::{Informer, ResourceEventHandler, SharedInformerFactory, key_of, split_key};
use skiff_runtime::workqueue::WorkQueue;

pub use skiff_admission::plugins::storage_object_in_use_protection::{
    PV_PROTECTION_FINALIZER, PVC_PROTECTION_FINALIZER,
};

fn has_finalizer(meta: &ObjectMeta, f: &str) -> bool {
    meta.finalizers.as_ref().is_some_and(|fs| fs.iter().any(|x| x == f))
}

fn without_finalizer(meta: &mut ObjectMeta, f: &str) {
    if let Some(fs) = meta.finalizers.as_mut() {
        fs.retain(|x| x != f);
    }
}

/// The claims a pod's volumes name (`persistentVolumeClaim.claimName`, and the
/// `<pod>-<volume>` claim of each ephemeral volume).
pub fn claims_of(pod: &Pod) -> Vec<String> {
    let pod_name = name_of(&pod.metadata);
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => Some(c.claim_name.clone()),
            (None, Some(_)) => Some(format!("{pod_name}-{}", v.name)),
            _ => None,
        })
        .collect()
}

/// `podUsesPVC`: the pod is scheduled, has not finished, and names the claim.
pub fn pod_uses_claim(pod: &Pod, claim: &str) -> bool {
    let scheduled = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    scheduled && !finished && claims_of(pod).iter().any(|c| c == claim)
}

/// The PVC protection controller.
pub struct PvcProtectionController {
    api: Arc<dyn ApiClient>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    pods: Arc<Informer<Pod>>,
}

/// Enqueues objects being deleted that still carry `finalizer` (both controllers' informers).
struct DeletingWithFinalizer {
    queue: Arc<WorkQueue<String>>,
    finalizer: &'static str,
}

impl<K: kube::Resource> ResourceEventHandler<K> for DeletingWithFinalizer {
    fn on_add(&self, obj: &Arc<K>) {
        if being_deleted(obj.meta()) && has_finalizer(obj.meta(), self.finalizer) {
            self.queue.add(key_of(obj.as_ref()));
        }
    }
    fn on_update(&self, _old: &Arc<K>, cur: &Arc<K>) {
        self.on_add(cur);
    }
    fn on_delete(&self, _obj: &Arc<K>) {}
}

struct PodHandler {
    queue: Arc<WorkQueue<String>>,
}

impl PodHandler {
    fn enqueue_claims(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        for c in claims_of(pod) {
            self.queue.add(format!("{ns}/{c}"));
        }
    }
}

impl ResourceEventHandler<Pod> for PodHandler {
    // A pod that stops using a claim (finished or deleted) may free it.
    fn on_add(&self, _pod: &Arc<Pod>) {}
    fn on_update(&self, _old: &Arc<Pod>, cur: &Arc<Pod>) {
        if matches!(cur.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) {
            self.enqueue_claims(cur);
        }
    }
    fn on_delete(&self, pod: &Arc<Pod>) {
        self.enqueue_claims(pod);
    }
}

impl PvcProtectionController {
    /// Creates the controller on the factory's claim and pod informers.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        let claims = factory.informer::<PersistentVolumeClaim>();
        let pods = factory.informer::<Pod>();
        claims.add_event_handler(Arc::new(DeletingWithFinalizer {
            queue: queue.clone(),
            finalizer: PVC_PROTECTION_FINALIZER,
        }));
        pods.add_event_handler(Arc::new(PodHandler { queue }));
        Arc::new(Self { api, claims, pods })
    }

    /// `processPVC`: removes the finalizer of a claim being deleted that no pod uses.
    pub async fn process_claim(&self, key: &str) -> ReconcileResult {
        let Some(c) = self.claims.store().get(key) else { return Ok(Action::AwaitChange) };
        if !being_deleted(&c.metadata) || !has_finalizer(&c.metadata, PVC_PROTECTION_FINALIZER) {
            return Ok(Action::AwaitChange);
        }
        let (ns, name) = split_key(key);
        let cached_use =
            self.pods.store().list().iter().any(|p| p.metadata.namespace.as_deref() == ns && pod_uses_claim(p, name));
        if cached_use {
            return Ok(Action::AwaitChange);
        }
        // The pod cache may lag behind a pod just created: ask the API, as `askAPIServer`.
        let pods: Vec<Pod> = self.api.list_typed(ns, None).await?;
        if pods.iter().any(|p| pod_uses_claim(p, name)) {
            return Ok(Action::AwaitChange);
        }
        let mut c = (*c).clone();
        without_finalizer(&mut c.metadata, PVC_PROTECTION_FINALIZER);
        match self.api.update_typed(&c).await {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if is_not_found(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait]
impl Reconciler for PvcProtectionController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.process_claim(key).await
    }
}

/// The PV protection controller.
pub struct PvProtectionController {
    api: Arc<dyn ApiClient>,
    volumes: Arc<Informer<PersistentVolume>>,
}

impl PvProtectionController {
    /// Creates the controller on the factory's volume informer.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        let volumes = factory.informer::<PersistentVolume>();
        volumes.add_event_handler(Arc::new(DeletingWithFinalizer { queue, finalizer: PV_PROTECTION_FINALIZER }));
        Arc::new(Self { api, volumes })
    }

    /// `processPV`: removes the finalizer of a volume being deleted that is not Bound
    /// (`isBeingUsed` reads only the phase the PersistentVolume controller keeps).
    pub async fn process_volume(&self, key: &str) -> ReconcileResult {
        let Some(v) = self.volumes.store().get(key) else { return Ok(Action::AwaitChange) };
        let bound = v.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        if !being_deleted(&v.metadata) || !has_finalizer(&v.metadata, PV_PROTECTION_FINALIZER) || bound {
            return Ok(Action::AwaitChange);
        }
        let mut v = (*v).clone();
        without_finalizer(&mut v.metadata, PV_PROTECTION_FINALIZER);
        match self.api.update_typed(&v).await {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if is_not_found(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait]
impl Reconciler for PvProtectionController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.process_volume(key).await
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimVolumeSource, PersistentVolumeStatus, PodSpec, PodStatus, Volume,
    };
    use kube::runtime::watcher::Event;
    use skiff_runtime::fake::FakeApi;

    use super::*;

    fn deleting(name: &str, ns: Option<&str>, finalizer: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            finalizers: Some(vec![finalizer.into()]),
            deletion_timestamp: Some(crate::util::time(
                k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap(),
            )),
            ..Default::default()
        }
    }

    fn pod(node: &str, phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta { name: Some("db".into()), namespace: Some("ns".into()), ..Default::default() },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                volumes: Some(vec![Volume {
                    name: "data".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: "data".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
        }
    }

    async fn process_claim(pods: &[Pod]) -> Vec<String> {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let c = PvcProtectionController::new(api.clone(), &factory, Arc::new(WorkQueue::new()));
        let claim = PersistentVolumeClaim {
            metadata: deleting("data", Some("ns"), PVC_PROTECTION_FINALIZER),
            ..Default::default()
        };
        api.seed(&claim);
        factory.informer::<PersistentVolumeClaim>().handle_event(Event::Apply(claim));
        for p in pods {
            api.seed(p);
        }
        c.process_claim("ns/data").await.unwrap();
        api.mutation_summaries()
    }

    #[tokio::test]
    async fn a_claim_a_running_pod_uses_keeps_its_finalizer() {
        assert!(process_claim(&[pod("n1", "Running")]).await.is_empty());
    }

    #[tokio::test]
    async fn a_claim_no_unfinished_scheduled_pod_uses_loses_its_finalizer() {
        for pods in [vec![], vec![pod("n1", "Succeeded")], vec![pod("", "Pending")]] {
            assert_eq!(process_claim(&pods).await, ["update persistentvolumeclaims ns/data"]);
        }
    }

    #[tokio::test]
    async fn a_volume_being_deleted_loses_its_finalizer_only_when_not_bound() {
        for (phase, want) in [("Bound", 0), ("Released", 1), ("Available", 1)] {
            let api = Arc::new(FakeApi::new());
            let factory = SharedInformerFactory::for_tests();
            let c = PvProtectionController::new(api.clone(), &factory, Arc::new(WorkQueue::new()));
            let v = PersistentVolume {
                metadata: deleting("pv1", None, PV_PROTECTION_FINALIZER),
                status: Some(PersistentVolumeStatus { phase: Some(phase.into()), ..Default::default() }),
                ..Default::default()
            };
            api.seed(&v);
            factory.informer::<PersistentVolume>().handle_event(Event::Apply(v));
            c.process_volume("pv1").await.unwrap();
            assert_eq!(api.mutation_summaries().len(), want, "{phase}");
        }
    }
}
