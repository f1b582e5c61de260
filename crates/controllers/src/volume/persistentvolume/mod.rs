//! The PersistentVolume controller (`pkg/controller/volume/persistentvolume`, its
//! `pv_controller.go` and `util.FindMatchingVolume`): binds Pending claims to Available
//! volumes and keeps both sides' phases, then reclaims a volume whose claim is gone.
//!
//! Keys are `claim:<namespace>/<name>` and `volume:<name>` on one queue (Kubernetes' two
//! queues). This slice binds in Immediate mode only: a claim of a WaitForFirstConsumer class
//! stays Pending (the scheduler will bind it), and no volume is provisioned — a claim of a
//! class with a provisioner is annotated for that provisioner and waits, as for an external
//! provisioner. Reclaim Delete deletes the PersistentVolume object (the data is the
//! provisioner's); Retain leaves it Released.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use skiff_apimachinery::quantity::value;

use crate::util::{being_deleted, labels_of, name_of, selector_of, uid_of};
use skiff_runtime::api::{ApiClient, ApiClientExt, DeleteOptions, is_not_found};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::events::EventRecorder;
use skiff_runtime::informer::{Informer, ResourceEventHandler, SharedInformerFactory, key_of, split_key};
use skiff_runtime::workqueue::WorkQueue;

#[cfg(test)]
mod tests;

/// Set on a claim once its binding is complete (`pvutil.AnnBindCompleted`).
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a claim or volume the controller bound, not the user (`AnnBoundByController`).
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The provisioner asked to make a claim's volume (`AnnStorageProvisioner`).
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// Its beta spelling, still set for older provisioners (`AnnBetaStorageProvisioner`).
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The node the scheduler chose for a delayed-binding claim (`AnnSelectedNode`).
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The PersistentVolume controller.
pub struct PersistentVolumeController {
    api: Arc<dyn ApiClient>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    volumes: Arc<Informer<PersistentVolume>>,
    classes: Arc<Informer<StorageClass>>,
    recorder: EventRecorder,
}

struct ClaimHandler {
    queue: Arc<WorkQueue<String>>,
}

impl ResourceEventHandler<PersistentVolumeClaim> for ClaimHandler {
    fn on_add(&self, c: &Arc<PersistentVolumeClaim>) {
        self.queue.add(format!("claim:{}", key_of(c.as_ref())));
    }
    fn on_update(&self, _old: &Arc<PersistentVolumeClaim>, cur: &Arc<PersistentVolumeClaim>) {
        self.on_add(cur);
    }
    fn on_delete(&self, c: &Arc<PersistentVolumeClaim>) {
        // The volume it was bound to is now Released.
        if let Some(v) = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty()) {
            self.queue.add(format!("volume:{v}"));
        }
    }
}

struct VolumeHandler {
    queue: Arc<WorkQueue<String>>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
}

impl ResourceEventHandler<PersistentVolume> for VolumeHandler {
    fn on_add(&self, v: &Arc<PersistentVolume>) {
        self.queue.add(format!("volume:{}", key_of(v.as_ref())));
        // Kubernetes finds a new volume's claim at its next periodic claim sync; skiff looks
        // at the claims it may serve now, so a claim made before its volume binds at once: the
        // claim a claimRef names (provisioned and pre-bound volumes), else the waiting claims
        // of the volume's class.
        match v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
            Some(r) => self.queue.add(format!(
                "claim:{}/{}",
                r.namespace.as_deref().unwrap_or_default(),
                r.name.as_deref().unwrap_or_default()
            )),
            None => {
                let class = volume_class(v);
                for c in self.claims.store().list() {
                    if !is_bind_completed(&c) && claim_class(&c) == class {
                        self.queue.add(format!("claim:{}", key_of(c.as_ref())));
                    }
                }
            }
        }
    }
    fn on_update(&self, _old: &Arc<PersistentVolume>, cur: &Arc<PersistentVolume>) {
        self.on_add(cur);
    }
    fn on_delete(&self, v: &Arc<PersistentVolume>) {
        if let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
            self.queue.add(format!(
                "claim:{}/{}",
                r.namespace.as_deref().unwrap_or_default(),
                r.name.as_deref().unwrap_or_default()
            ));
        }
    }
}

fn annotation<'a>(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str)
}

fn set_annotation(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str, v: &str) {
    meta.annotations.get_or_insert_with(BTreeMap::new).insert(key.to_string(), v.to_string());
}

fn is_bind_completed(c: &PersistentVolumeClaim) -> bool {
    annotation(&c.metadata, ANN_BIND_COMPLETED).is_some()
}

/// `GetPersistentVolumeClaimClass`: `spec.storageClassName`, else the beta annotation.
pub fn claim_class(c: &PersistentVolumeClaim) -> &str {
    annotation(&c.metadata, "volume.beta.kubernetes.io/storage-class")
        .or(c.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()))
        .unwrap_or("")
}

/// `GetPersistentVolumeClass`: `spec.storageClassName`, else the beta annotation.
pub fn volume_class(v: &PersistentVolume) -> &str {
    annotation(&v.metadata, "volume.beta.kubernetes.io/storage-class")
        .or(v.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()))
        .unwrap_or("")
}

fn volume_phase(v: &PersistentVolume) -> &str {
    v.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// Bytes of `storage` in a capacity or request map (0 when missing or unparsable).
fn storage_bytes(m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>) -> i64 {
    m.and_then(|m| m.get("storage")).and_then(|q| value(q).ok()).unwrap_or(0)
}

fn requested_bytes(c: &PersistentVolumeClaim) -> i64 {
    storage_bytes(c.spec.as_ref().and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref()))
}

fn capacity_bytes(v: &PersistentVolume) -> i64 {
    storage_bytes(v.spec.as_ref().and_then(|s| s.capacity.as_ref()))
}

/// `IsVolumeBoundToClaim`: the volume's claimRef names the claim (and its uid, when set).
pub fn is_volume_bound_to_claim(v: &PersistentVolume, c: &PersistentVolumeClaim) -> bool {
    let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else { return false };
    r.name.as_deref() == c.metadata.name.as_deref()
        && r.namespace.as_deref() == c.metadata.namespace.as_deref()
        && r.uid.as_deref().is_none_or(|u| u.is_empty() || Some(u) == c.metadata.uid.as_deref())
}

fn volume_mode_of(m: Option<&String>) -> &str {
    m.map(String::as_str).unwrap_or("Filesystem")
}

/// Whether the volume offers every access mode the claim asks for (Kubernetes indexes
/// volumes by their modes and looks only at those offering a superset of the claim's).
fn offers_access_modes(v: &PersistentVolume, c: &PersistentVolumeClaim) -> bool {
    let offered = v.spec.as_ref().and_then(|s| s.access_modes.as_ref());
    c.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_ref())
        .into_iter()
        .flatten()
        .all(|m| offered.is_some_and(|o| o.contains(m)))
}

/// `checkVolumeSatisfyClaim`: why a volume the claim names cannot serve it, if it cannot.
pub fn volume_mismatch(v: &PersistentVolume, c: &PersistentVolumeClaim) -> Option<String> {
    if capacity_bytes(v) < requested_bytes(c) {
        return Some("requested PV is too small".into());
    }
    if volume_class(v) != claim_class(c) {
        return Some("storageClassName does not match".into());
    }
    if volume_mode_of(v.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
        != volume_mode_of(c.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
    {
        return Some("incompatible volumeMode".into());
    }
    if !offers_access_modes(v, c) {
        return Some("incompatible accessMode".into());
    }
    None
}

/// `FindMatchingVolume` without a node: a volume pre-bound to the claim, else the smallest
/// Available volume of the claim's class whose capacity, access modes, volume mode and labels
/// (the claim's selector) fit. With `delay_binding` only a pre-bound volume is taken.
pub fn find_matching_volume<'a>(
    c: &PersistentVolumeClaim,
    volumes: impl IntoIterator<Item = &'a PersistentVolume>,
    delay_binding: bool,
) -> Option<&'a PersistentVolume> {
    let requested = requested_bytes(c);
    let selector = match c.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        Some(sel) => match selector_of(sel) {
            Ok(s) => Some(s),
            Err(_) => return None,
        },
        None => None,
    };
    let claim_mode = volume_mode_of(c.spec.as_ref().and_then(|s| s.volume_mode.as_ref()));
    let mut smallest: Option<&PersistentVolume> = None;
    for v in volumes {
        if !offers_access_modes(v, c) {
            continue;
        }
        let capacity = capacity_bytes(v);
        if capacity < requested
            || volume_mode_of(v.spec.as_ref().and_then(|s| s.volume_mode.as_ref())) != claim_mode
            || being_deleted(&v.metadata)
        {
            continue;
        }
        if is_volume_bound_to_claim(v, c) {
            return Some(v);
        }
        if delay_binding
            || volume_phase(v) != "Available"
            || v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some()
            || selector.as_ref().is_some_and(|s| !s.matches(&labels_of(&v.metadata)))
            || volume_class(v) != claim_class(c)
        {
            continue;
        }
        if smallest.is_none_or(|s| capacity_bytes(s) > capacity) {
            smallest = Some(v);
        }
    }
    smallest
}

impl PersistentVolumeController {
    /// Creates the controller on the factory's claim, volume and StorageClass informers.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
    ) -> Arc<Self> {
        let claims = factory.informer::<PersistentVolumeClaim>();
        let volumes = factory.informer::<PersistentVolume>();
        let classes = factory.informer::<StorageClass>();
        claims.add_event_handler(Arc::new(ClaimHandler { queue: queue.clone() }));
        volumes.add_event_handler(Arc::new(VolumeHandler { queue, claims: claims.clone() }));
        Arc::new(Self { api, claims, volumes, classes, recorder })
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        if name.is_empty() { None } else { self.classes.store().get(name) }
    }

    /// `GetDefaultClass`: the newest class marked default (the first by name on a tie).
    fn default_class(&self) -> Option<Arc<StorageClass>> {
        let is_default = |c: &StorageClass| {
            ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
                .iter()
                .any(|k| annotation(&c.metadata, k) == Some("true"))
        };
        self.classes.store().list().into_iter().filter(|c| is_default(c)).max_by(|a, b| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a).cmp(&created(b)).then_with(|| b.metadata.name.cmp(&a.metadata.name))
        })
    }

    /// `IsDelayBindingMode`: the claim's class binds on first consumer and no node is chosen.
    fn delay_binding(&self, c: &PersistentVolumeClaim) -> bool {
        self.class(claim_class(c)).is_some_and(|cl| cl.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
            && annotation(&c.metadata, ANN_SELECTED_NODE).is_none()
    }

    async fn set_claim_phase(&self, c: &PersistentVolumeClaim, phase: &str) -> ReconcileResult {
        if claim_phase(c) == phase {
            return Ok(Action::AwaitChange);
        }
        let mut c = c.clone();
        c.status.get_or_insert_with(Default::default).phase = Some(phase.into());
        self.api.update_status_typed(&c).await?;
        Ok(Action::AwaitChange)
    }

    async fn set_volume_phase(
        &self,
        v: &PersistentVolume,
        phase: &str,
    ) -> Result<PersistentVolume, skiff_runtime::api::ApiError> {
        if volume_phase(v) == phase {
            return Ok(v.clone());
        }
        let mut v = v.clone();
        v.status.get_or_insert_with(Default::default).phase = Some(phase.into());
        self.api.update_status_typed(&v).await
    }

    /// `syncClaim` for one claim.
    pub async fn sync_claim(&self, key: &str) -> ReconcileResult {
        let Some(c) = self.claims.store().get(key) else { return Ok(Action::AwaitChange) };
        if is_bind_completed(&c) { self.sync_bound_claim(&c).await } else { self.sync_unbound_claim(&c).await }
    }

    async fn sync_unbound_claim(&self, c: &PersistentVolumeClaim) -> ReconcileResult {
        let wanted = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or("");
        if wanted.is_empty() {
            let delay = self.delay_binding(c);
            let volumes = self.volumes.store().list();
            if let Some(v) = find_matching_volume(c, volumes.iter().map(|v| v.as_ref()), delay) {
                let v = v.clone();
                return self.bind(&v, c).await;
            }
            // Retroactive default StorageClass assignment (GA in 1.28): a claim made before any
            // default class existed gets the default now, and is synced again.
            if c.spec.as_ref().and_then(|s| s.storage_class_name.as_ref()).is_none()
                && annotation(&c.metadata, "volume.beta.kubernetes.io/storage-class").is_none()
                && let Some(default) = self.default_class()
            {
                let mut fresh = c.clone();
                fresh.spec.get_or_insert_with(Default::default).storage_class_name = default.metadata.name.clone();
                self.api.update_typed(&fresh).await?;
                return Ok(Action::AwaitChange);
            }
            let class = claim_class(c);
            if delay {
                self.recorder.event_for(
                    c,
                    "Normal",
                    "WaitForFirstConsumer",
                    "waiting for first consumer to be created before binding",
                );
            } else if !class.is_empty() {
                return self.provision_claim(c, class).await;
            } else {
                self.recorder.event_for(
                    c,
                    "Normal",
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set",
                );
            }
            return self.set_claim_phase(c, "Pending").await;
        }
        // The user asked for one volume.
        let Some(v) = self.volumes.store().get(wanted) else {
            return self.set_claim_phase(c, "Pending").await;
        };
        let bound_elsewhere =
            v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some() && !is_volume_bound_to_claim(&v, c);
        if bound_elsewhere {
            self.recorder.event_for(c, "Warning", "FailedBinding", "volume is already bound to a different claim.");
            return self.set_claim_phase(c, "Pending").await;
        }
        if let Some(why) = volume_mismatch(&v, c) {
            self.recorder.event_for(
                c,
                "Warning",
                "VolumeMismatch",
                &format!("Cannot bind to requested volume {wanted:?}: {why}"),
            );
            return self.set_claim_phase(c, "Pending").await;
        }
        self.bind(&v, c).await
    }

    /// `provisionClaim` for a provisioner skiff does not run in-process: the claim is
    /// annotated with its provisioner and waits for it (or an administrator) to make a volume.
    async fn provision_claim(&self, c: &PersistentVolumeClaim, class: &str) -> ReconcileResult {
        let Some(cl) = self.class(class) else {
            self.recorder.event_for(
                c,
                "Warning",
                "ProvisioningFailed",
                &format!("storageclass.storage.k8s.io {class:?} not found"),
            );
            return self.set_claim_phase(c, "Pending").await;
        };
        let provisioner = cl.provisioner.as_str();
        if annotation(&c.metadata, ANN_STORAGE_PROVISIONER) != Some(provisioner) {
            let mut fresh = c.clone();
            set_annotation(&mut fresh.metadata, ANN_STORAGE_PROVISIONER, provisioner);
            set_annotation(&mut fresh.metadata, ANN_BETA_STORAGE_PROVISIONER, provisioner);
            self.api.update_typed(&fresh).await?;
        }
        self.recorder.event_for(
            c,
            "Normal",
            "ExternalProvisioning",
            &format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
            ),
        );
        Ok(Action::AwaitChange)
    }

    async fn sync_bound_claim(&self, c: &PersistentVolumeClaim) -> ReconcileResult {
        let name = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or("");
        if name.is_empty() {
            return self
                .claim_lost(
                    c,
                    "ClaimLost",
                    "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
                )
                .await;
        }
        let Some(v) = self.volumes.store().get(name) else {
            return self
                .claim_lost(c, "ClaimLost", "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
                .await;
        };
        match v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
            None => self.bind(&v, c).await,
            Some(_) if is_volume_bound_to_claim(&v, c) => self.bind(&v, c).await,
            Some(_) => {
                self.claim_lost(
                    c,
                    "ClaimMisbound",
                    "Two claims are bound to the same volume, this one is bound incorrectly",
                )
                .await
            }
        }
    }

    async fn claim_lost(&self, c: &PersistentVolumeClaim, reason: &str, message: &str) -> ReconcileResult {
        if claim_phase(c) != "Lost" {
            self.recorder.event_for(c, "Warning", reason, message);
        }
        self.set_claim_phase(c, "Lost").await
    }

    /// `bind`: the volume's claimRef and Bound phase, then the claim's volumeName, annotations
    /// and Bound status with the volume's access modes and capacity. Each write only if needed.
    async fn bind(&self, v: &PersistentVolume, c: &PersistentVolumeClaim) -> ReconcileResult {
        // bindVolumeToClaim.
        let mut v = v.clone();
        if !is_volume_bound_to_claim(&v, c)
            || v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).and_then(|r| r.uid.as_ref()).is_none()
        {
            let spec = v.spec.get_or_insert_with(Default::default);
            if spec.claim_ref.is_none() {
                set_annotation(&mut v.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
            }
            v.spec.get_or_insert_with(Default::default).claim_ref = Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: c.metadata.namespace.clone(),
                name: c.metadata.name.clone(),
                uid: c.metadata.uid.clone(),
                resource_version: c.metadata.resource_version.clone(),
                ..Default::default()
            });
            v = self.api.update_typed(&v).await?;
        }
        let v = self.set_volume_phase(&v, "Bound").await?;
        // bindClaimToVolume.
        let mut c = c.clone();
        let vname = name_of(&v.metadata).to_string();
        let named = c.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(vname.as_str());
        if !named || !is_bind_completed(&c) {
            if !named {
                set_annotation(&mut c.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
                c.spec.get_or_insert_with(Default::default).volume_name = Some(vname.clone());
            }
            set_annotation(&mut c.metadata, ANN_BIND_COMPLETED, "yes");
            c = self.api.update_typed(&c).await?;
        }
        let spec = v.spec.as_ref();
        let status = c.status.get_or_insert_with(Default::default);
        let (modes, capacity) = (spec.and_then(|s| s.access_modes.clone()), spec.and_then(|s| s.capacity.clone()));
        if status.phase.as_deref() != Some("Bound") || status.access_modes != modes || status.capacity != capacity {
            status.phase = Some("Bound".into());
            status.access_modes = modes;
            status.capacity = capacity;
            self.api.update_status_typed(&c).await?;
        }
        tracing::debug!(claim = %key_of(&c), volume = %vname, "claim bound");
        Ok(Action::AwaitChange)
    }

    /// `syncVolume` for one volume.
    pub async fn sync_volume(&self, name: &str) -> ReconcileResult {
        let Some(v) = self.volumes.store().get(name) else { return Ok(Action::AwaitChange) };
        let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
            self.set_volume_phase(&v, "Available").await?;
            return Ok(Action::AwaitChange);
        };
        let claim_key =
            format!("{}/{}", r.namespace.as_deref().unwrap_or_default(), r.name.as_deref().unwrap_or_default());
        let Some(uid) = r.uid.as_deref().filter(|u| !u.is_empty()) else {
            // Pre-bound by the user: Available until its claim binds.
            self.set_volume_phase(&v, "Available").await?;
            return Ok(Action::AwaitChange);
        };
        let claim = match self.claims.store().get(&claim_key) {
            Some(c) => Some(c),
            // The cache may lag behind a claim just created: ask the API before releasing.
            None => {
                let (ns, cname) = split_key(&claim_key);
                match self.api.get_typed::<PersistentVolumeClaim>(ns, cname).await {
                    Ok(c) => Some(Arc::new(c)),
                    Err(e) if is_not_found(&e) => None,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        match claim.filter(|c| uid_of(&c.metadata) == uid) {
            None => self.release(&v).await,
            Some(c) => {
                let vname = name_of(&v.metadata);
                match c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or("") {
                    n if n == vname => {
                        self.set_volume_phase(&v, "Bound").await?;
                    }
                    // The claim is being bound to this volume (by this controller).
                    "" => {}
                    // The claim went to another volume: a volume the controller bound is
                    // freed, one the user pre-bound waits.
                    _ if annotation(&v.metadata, ANN_BOUND_BY_CONTROLLER).is_some() => {
                        let mut free = (*v).clone();
                        if let Some(s) = free.spec.as_mut() {
                            s.claim_ref = None;
                        }
                        if let Some(a) = free.metadata.annotations.as_mut() {
                            a.remove(ANN_BOUND_BY_CONTROLLER);
                        }
                        let free = self.api.update_typed(&free).await?;
                        self.set_volume_phase(&free, "Available").await?;
                    }
                    _ => {}
                }
                Ok(Action::AwaitChange)
            }
        }
    }

    /// The volume's claim is gone: Released, then its reclaim policy (`reclaimVolume`).
    async fn release(&self, v: &PersistentVolume) -> ReconcileResult {
        let phase = volume_phase(v);
        if phase == "Failed" {
            return Ok(Action::AwaitChange);
        }
        let v = if phase == "Released" { v.clone() } else { self.set_volume_phase(v, "Released").await? };
        match v.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()).unwrap_or("Retain") {
            "Retain" => {}
            "Delete" if !being_deleted(&v.metadata) => {
                let options = DeleteOptions {
                    precondition_uid: v.metadata.uid.clone(),
                    precondition_resource_version: v.metadata.resource_version.clone(),
                    ..Default::default()
                };
                match self.api.delete_typed::<PersistentVolume>(None, name_of(&v.metadata), &options).await {
                    Ok(()) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            "Delete" => {}
            other => {
                self.recorder.event_for(
                    &v,
                    "Warning",
                    "VolumeUnknownReclaimPolicy",
                    &format!("Volume has unrecognized PersistentVolumeReclaimPolicy {other:?}"),
                );
                self.set_volume_phase(&v, "Failed").await?;
            }
        }
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl Reconciler for PersistentVolumeController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        match key.split_once(':') {
            Some(("claim", k)) => self.sync_claim(k).await,
            Some(("volume", k)) => self.sync_volume(k).await,
            _ => Ok(Action::AwaitChange),
        }
    }
}
