//! The ReplicaSet controller (`pkg/controller/replicaset/replica_set.go`): keeps
//! `spec.replicas` active pods matching the selector, and reports their counts in the status.
//!
//! `sync_replica_set`:
//! 1. Claim pods: adopt matching orphans, release owned pods that no longer match
//!    ([`crate::controller_ref_manager`]).
//! 2. If the expectations of earlier creates/deletes are satisfied (the cache has caught up),
//!    `manage_replicas`: create the missing pods in slow-start batches (1, 2, 4, …, at most
//!    500 per sync) or delete the surplus, least valuable first
//!    ([`crate::controller_utils::pods_to_delete`]).
//! 3. Write the status (`replicas`, `fullyLabeledReplicas`, `readyReplicas`,
//!    `availableReplicas`, `observedGeneration`, and a `ReplicaFailure` condition while creates or
//!    deletes fail). If pods are ready but not yet available because of `minReadySeconds`,
//!    look again after `minReadySeconds`.
//!
//! Event handlers only enqueue keys and record observations for the expectations.
//!
//! The controller is parametrized by the kind it runs ([`ReplicaSetKind`]): ReplicaSets, and
//! ReplicationControllers, which it sees converted to ReplicaSets as Kubernetes' replication
//! manager does (`pkg/controller/replication/conversion.go`, here [`crate::replication`]).
//! Owner references, events, adoption checks and status writes use the real kind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use skiff_apimachinery::LabelSelector;

use crate::controller_ref_manager::{Claimant, claim};
use crate::controller_utils::{
    Expectations, SLOW_START_INITIAL_BATCH_SIZE, pod_from_template, pods_to_delete, slow_start_batch,
};
use crate::util::{
    Clock, controller_of, is_pod_active, is_pod_available, is_pod_ready, labels_of, name_of, new_controller_ref,
    selector_of, system_clock, time, uid_of,
};
use skiff_runtime::api::{
    ApiClient, ApiClientExt, ApiError, ApiObject, DeleteOptions, NAMESPACE_TERMINATING_CAUSE, has_status_cause,
    is_not_found, resource_of,
};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult, Reconciler};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, EventRecorder, reasons};
use skiff_runtime::informer::{
    Informer, OWNER_UID_INDEX, ResourceEventHandler, SharedInformerFactory, key_of, split_key,
};
use skiff_runtime::workqueue::WorkQueue;

/// Most pods created or deleted by one sync (`BurstReplicas`).
pub const BURST_REPLICAS: usize = 500;
/// The ReplicaSet condition reporting create/delete failures.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// A kind the ReplicaSet logic runs for: `ReplicaSet` itself, or a kind converted to and from
/// it (`ReplicationController`).
pub trait ReplicaSetKind: ApiObject + std::fmt::Debug {
    /// The object as a ReplicaSet (metadata, selector, replicas, minReadySeconds, template and
    /// status); a ReplicaSet is shared as is.
    fn to_replica_set(this: &Arc<Self>) -> Arc<ReplicaSet>;

    /// The object with `status` (a ReplicaSet's) in place of its own.
    fn with_status(&self, status: ReplicaSetStatus) -> Self;
}

impl ReplicaSetKind for ReplicaSet {
    fn to_replica_set(this: &Arc<Self>) -> Arc<ReplicaSet> {
        this.clone()
    }

    fn with_status(&self, status: ReplicaSetStatus) -> Self {
        let mut rs = self.clone();
        rs.status = Some(status);
        rs
    }
}

/// `metav1.NewControllerRef` to `rs` as an object of kind `W`.
fn controller_ref_as<W: ReplicaSetKind>(rs: &ReplicaSet) -> OwnerReference {
    OwnerReference {
        api_version: W::api_version(&()).to_string(),
        kind: W::kind(&()).to_string(),
        ..new_controller_ref(rs)
    }
}

/// A reference to `rs` as an object of kind `W`, for events.
fn reference_as<W: ReplicaSetKind>(rs: &ReplicaSet) -> ObjectReference {
    ObjectReference {
        api_version: Some(W::api_version(&()).to_string()),
        kind: Some(W::kind(&()).to_string()),
        ..skiff_runtime::util::object_reference(rs)
    }
}

/// The ReplicaSet controller, for ReplicaSets (`W` = [`ReplicaSet`]) or another
/// [`ReplicaSetKind`].
pub struct ReplicaSetController<W: ReplicaSetKind = ReplicaSet> {
    api: Arc<dyn ApiClient>,
    replicasets: Arc<Informer<W>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<WorkQueue<String>>,
    expectations: Arc<Expectations>,
    recorder: EventRecorder,
    clock: Clock,
    burst_replicas: usize,
}

struct Handlers<W> {
    replicasets: Arc<Informer<W>>,
    queue: Arc<WorkQueue<String>>,
    expectations: Arc<Expectations>,
}

impl<W: ReplicaSetKind> Handlers<W> {
    /// `resolveControllerRef`: the ReplicaSet a controller reference points to, if it exists
    /// with that uid.
    fn resolve(
        &self,
        namespace: Option<&str>,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Option<Arc<ReplicaSet>> {
        let cref = controller_of(meta)?;
        if cref.kind != W::kind(&()) {
            return None;
        }
        let rs = W::to_replica_set(&self.replicasets.store().get_namespaced(namespace, &cref.name)?);
        (uid_of(&rs.metadata) == cref.uid).then_some(rs)
    }

    /// `getPodReplicaSets`: ReplicaSets whose non-empty selector matches the pod's labels.
    fn matching_replicasets(&self, pod: &Pod) -> Vec<Arc<ReplicaSet>> {
        let labels = labels_of(&pod.metadata);
        if labels.is_empty() {
            return Vec::new();
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        self.replicasets
            .store()
            .list_namespace(ns)
            .iter()
            .map(W::to_replica_set)
            .filter(|rs| {
                rs.spec
                    .as_ref()
                    .and_then(|s| selector_of(&s.selector).ok())
                    .is_some_and(|sel| !sel.is_empty() && sel.matches(&labels))
            })
            .collect()
    }

    fn enqueue(&self, rs: &ReplicaSet) {
        self.queue.add(key_of(rs));
    }

    fn pod_deleted(&self, pod: &Pod) {
        if let Some(rs) = self.resolve(pod.metadata.namespace.as_deref(), &pod.metadata) {
            let key = key_of(rs.as_ref());
            self.expectations.deletion_observed(&key, &key_of(pod));
            self.queue.add(key);
        }
    }
}

impl<W: ReplicaSetKind> ResourceEventHandler<Pod> for Handlers<W> {
    fn on_add(&self, pod: &Arc<Pod>) {
        if pod.metadata.deletion_timestamp.is_some() {
            // A pod that shows up already being deleted (after a restart) is not a creation.
            self.pod_deleted(pod);
            return;
        }
        if controller_of(&pod.metadata).is_some() {
            if let Some(rs) = self.resolve(pod.metadata.namespace.as_deref(), &pod.metadata) {
                let key = key_of(rs.as_ref());
                self.expectations.creation_observed(&key);
                self.queue.add(key);
            }
            return;
        }
        // An orphan: let every matching ReplicaSet consider adopting it.
        for rs in self.matching_replicasets(pod) {
            self.enqueue(&rs);
        }
    }

    fn on_update(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            // Periodic resync: two different versions of a pod always differ in resourceVersion.
            return;
        }
        let label_changed = old.metadata.labels != cur.metadata.labels;
        if cur.metadata.deletion_timestamp.is_some() {
            // Graceful deletion started: the ReplicaSet may replace the pod now, without waiting
            // for the kubelet to remove it.
            self.pod_deleted(cur);
            if label_changed {
                self.pod_deleted(old);
            }
            return;
        }
        let cur_ref = controller_of(&cur.metadata);
        let old_ref = controller_of(&old.metadata);
        let ref_changed = cur_ref != old_ref;
        if ref_changed
            && old_ref.is_some()
            && let Some(rs) = self.resolve(old.metadata.namespace.as_deref(), &old.metadata)
        {
            self.enqueue(&rs);
        }
        if cur_ref.is_some() {
            if let Some(rs) = self.resolve(cur.metadata.namespace.as_deref(), &cur.metadata) {
                self.enqueue(&rs);
                let min_ready = rs.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0);
                if !is_pod_ready(old) && is_pod_ready(cur) && min_ready > 0 {
                    // Availability changes minReadySeconds after readiness without any event:
                    // look again then (plus a second against clock granularity).
                    self.queue.add_after(key_of(rs.as_ref()), Duration::from_secs(min_ready as u64 + 1));
                }
            }
            return;
        }
        if label_changed || ref_changed {
            for rs in self.matching_replicasets(cur) {
                self.enqueue(&rs);
            }
        }
    }

    fn on_delete(&self, pod: &Arc<Pod>) {
        self.pod_deleted(pod);
    }
}

impl<W: ReplicaSetKind> ResourceEventHandler<W> for Handlers<W> {
    fn on_add(&self, rs: &Arc<W>) {
        self.queue.add(key_of(rs.as_ref()));
    }

    fn on_update(&self, old: &Arc<W>, cur: &Arc<W>) {
        if old.meta().uid != cur.meta().uid {
            self.expectations.delete_expectations(&key_of(old.as_ref()));
        }
        // Sync on every update (including status-only ones and resyncs): a ReplicaSet whose
        // last creates failed is retried by the resync instead of stalling.
        self.queue.add(key_of(cur.as_ref()));
    }

    fn on_delete(&self, rs: &Arc<W>) {
        let key = key_of(rs.as_ref());
        self.expectations.delete_expectations(&key);
        self.queue.add(key);
    }
}

fn replicas_of(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn min_ready_seconds_of(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
}

impl<W: ReplicaSetKind> ReplicaSetController<W> {
    /// Creates the controller on the factory's informers of `W` and Pods and registers its
    /// event handlers.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
    ) -> Arc<Self> {
        let replicasets = factory.informer::<W>();
        let pods = factory.informer::<Pod>();
        let expectations = Arc::new(Expectations::new());
        let handlers = Arc::new(Handlers {
            replicasets: replicasets.clone(),
            queue: queue.clone(),
            expectations: expectations.clone(),
        });
        replicasets.add_event_handler(handlers.clone());
        pods.add_event_handler(handlers);
        Arc::new(Self {
            api,
            replicasets,
            pods,
            queue,
            expectations,
            recorder,
            clock: system_clock(),
            burst_replicas: BURST_REPLICAS,
        })
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self: Arc<Self>, clock: Clock) -> Arc<Self> {
        if let Some(me) = Arc::get_mut(&mut self) {
            me.clock = clock;
        }
        self
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// The expectations (tests).
    pub fn expectations(&self) -> &Arc<Expectations> {
        &self.expectations
    }

    /// Pods of the ReplicaSets that share this ReplicaSet's controller (its Deployment's other
    /// revisions), used to rank pods by how crowded their node is.
    fn indirectly_related_pods(&self, rs: &ReplicaSet) -> Vec<Arc<Pod>> {
        let Some(cref) = controller_of(&rs.metadata) else {
            return Vec::new();
        };
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for related in self.replicasets.store().by_index(OWNER_UID_INDEX, &cref.uid).iter().map(W::to_replica_set) {
            if controller_of(&related.metadata).is_none_or(|r| r.uid != cref.uid) {
                continue;
            }
            let Some(sel) = related.spec.as_ref().and_then(|s| selector_of(&s.selector).ok()) else { continue };
            let ns = related.metadata.namespace.as_deref().unwrap_or_default();
            for pod in self.pods.store().list_namespace(ns) {
                if sel.matches(&labels_of(&pod.metadata)) && seen.insert(uid_of(&pod.metadata).to_string()) {
                    out.push(pod);
                }
            }
        }
        out
    }

    async fn claim_pods(
        &self,
        rs: &ReplicaSet,
        selector: &LabelSelector,
        pods: Vec<Arc<Pod>>,
    ) -> Result<Vec<Arc<Pod>>, ApiError> {
        let claimant = Claimant {
            controller_ref: controller_ref_as::<W>(rs),
            namespace: rs.metadata.namespace.clone(),
            being_deleted: rs.metadata.deletion_timestamp.is_some(),
        };
        let api = self.api.clone();
        let (ns, name, uid) =
            (rs.metadata.namespace.clone(), name_of(&rs.metadata).to_string(), uid_of(&rs.metadata).to_string());
        let can_adopt = || async move {
            let fresh: W = api.get_typed(ns.as_deref(), &name).await?;
            let fresh = fresh.meta();
            if uid_of(fresh) != uid {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "original {} {}/{name} is gone: got uid {}, wanted {uid}",
                        W::kind(&()),
                        ns.as_deref().unwrap_or_default(),
                        uid_of(fresh)
                    ),
                ));
            }
            if fresh.deletion_timestamp.is_some() {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!("{}/{name} has just been deleted", ns.as_deref().unwrap_or_default()),
                ));
            }
            Ok(())
        };
        claim(
            self.api.as_ref(),
            &resource_of::<Pod>(),
            &claimant,
            pods,
            |p: &Arc<Pod>| &p.metadata,
            |p: &Arc<Pod>| selector.matches(&labels_of(&p.metadata)),
            can_adopt,
        )
        .await
    }

    async fn create_pod(&self, rs: &ReplicaSet) -> Result<(), ApiError> {
        let spec = rs.spec.as_ref().ok_or_else(|| ApiError::bad_request("replica set has no spec"))?;
        let template = spec.template.clone().unwrap_or_default();
        let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
        let pod = pod_from_template(&template, ns, name_of(&rs.metadata), controller_ref_as::<W>(rs));
        if pod.metadata.labels.as_ref().is_none_or(BTreeMap::is_empty) {
            return Err(ApiError::bad_request("unable to create pods, no labels"));
        }
        match self.api.create_typed(&pod).await {
            Ok(created) => {
                self.recorder.event(
                    &reference_as::<W>(rs),
                    EVENT_TYPE_NORMAL,
                    reasons::SUCCESSFUL_CREATE,
                    &format!("Created pod: {}", name_of(&created.metadata)),
                );
                Ok(())
            }
            Err(e) => {
                if has_status_cause(&e, NAMESPACE_TERMINATING_CAUSE) {
                    // Every create fails in a terminating namespace; nothing to report.
                    return Ok(());
                }
                self.recorder.event(
                    &reference_as::<W>(rs),
                    EVENT_TYPE_WARNING,
                    reasons::FAILED_CREATE,
                    &format!("Error creating: {}", e.message),
                );
                Err(e)
            }
        }
    }

    async fn delete_pod(&self, rs: &ReplicaSet, pod: &Pod) -> Result<(), ApiError> {
        let name = name_of(&pod.metadata);
        match self.api.delete_typed::<Pod>(pod.metadata.namespace.as_deref(), name, &DeleteOptions::default()).await {
            Ok(()) => {
                self.recorder.event(
                    &reference_as::<W>(rs),
                    EVENT_TYPE_NORMAL,
                    reasons::SUCCESSFUL_DELETE,
                    &format!("Deleted pod: {name}"),
                );
                Ok(())
            }
            Err(e) if is_not_found(&e) => Err(e),
            Err(e) => {
                self.recorder.event(
                    &reference_as::<W>(rs),
                    EVENT_TYPE_WARNING,
                    reasons::FAILED_DELETE,
                    &format!("Error deleting: {}", e.message),
                );
                Err(ApiError::new(e.code, &e.reason, format!("unable to delete pods: {}", e.message)))
            }
        }
    }

    /// `manageReplicas`: creates or deletes pods to reach `spec.replicas`.
    async fn manage_replicas(&self, filtered: &[Arc<Pod>], rs: &ReplicaSet) -> Result<(), ApiError> {
        let key = key_of(rs);
        let diff = filtered.len() as i64 - i64::from(replicas_of(rs));
        if diff < 0 {
            let n = ((-diff) as usize).min(self.burst_replicas);
            self.expectations.expect_creations(&key, n);
            tracing::debug!(replicaset = %key, need = replicas_of(rs), creating = n, "too few replicas");
            let (successes, err) = slow_start_batch(n, SLOW_START_INITIAL_BATCH_SIZE, || self.create_pod(rs)).await;
            // Creations never attempted (or failed) will never be observed.
            for _ in successes..n {
                self.expectations.creation_observed(&key);
            }
            return match err {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        if diff > 0 {
            let n = (diff as usize).min(self.burst_replicas);
            tracing::debug!(replicaset = %key, need = replicas_of(rs), deleting = n, "too many replicas");
            let related = self.indirectly_related_pods(rs);
            let candidates: Vec<Pod> = filtered.iter().map(|p| p.as_ref().clone()).collect();
            let victims = pods_to_delete(candidates, related.iter().map(Arc::as_ref), n, (self.clock)());
            self.expectations.expect_deletions(&key, victims.iter().map(key_of).collect());
            let results = futures::future::join_all(victims.iter().map(|p| self.delete_pod(rs, p))).await;
            let mut first_error = None;
            for (pod, r) in victims.iter().zip(results) {
                if let Err(e) = r {
                    // The informer will not observe a deletion that did not happen.
                    self.expectations.deletion_observed(&key, &key_of(pod));
                    if !is_not_found(&e) {
                        first_error.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
        }
        Ok(())
    }

    /// `syncReplicaSet` for one key.
    pub async fn sync_replica_set(&self, key: &str) -> ReconcileResult {
        let (ns, _) = split_key(key);
        let Some(stored) = self.replicasets.store().get(key) else {
            self.expectations.delete_expectations(key);
            return Ok(Action::AwaitChange);
        };
        let rs = W::to_replica_set(&stored);
        let rs_needs_sync = self.expectations.satisfied(key);
        let Some(spec) = rs.spec.as_ref() else {
            return Ok(Action::AwaitChange);
        };
        let selector = match selector_of(&spec.selector) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(replicaset = key, error = %e, "invalid selector");
                return Ok(Action::AwaitChange);
            }
        };
        // The claim candidates: active pods of the namespace that this ReplicaSet controls
        // (matching or not, so that those no longer matching are released) and orphans that
        // match (adoption). Pods controlled by others are ignored by the claim anyway. The
        // cache's entries are shared, not copied (a sync of a 1,000-pod ReplicaSet used to
        // copy every pod of the namespace).
        let rs_uid = uid_of(&rs.metadata);
        let active: Vec<Arc<Pod>> = self
            .pods
            .store()
            .list_namespace(ns.unwrap_or_default())
            .into_iter()
            .filter(|p| is_pod_active(p))
            .filter(|p| match controller_of(&p.metadata) {
                Some(cref) => cref.uid == rs_uid,
                None => selector.matches(&labels_of(&p.metadata)),
            })
            .collect();
        let filtered = self.claim_pods(&rs, &selector, active).await?;

        let manage_err = if rs_needs_sync && rs.metadata.deletion_timestamp.is_none() {
            self.manage_replicas(&filtered, &rs).await.err()
        } else {
            None
        };

        let new_status = calculate_status(&rs, &filtered, manage_err.as_ref(), (self.clock)());
        let updated = update_replica_set_status(self.api.as_ref(), &stored, new_status).await?;

        if let Some(e) = manage_err {
            return Err(ReconcileError::Api(e));
        }
        let status = updated.status.clone().unwrap_or_default();
        let replicas = replicas_of(&updated);
        let min_ready = min_ready_seconds_of(&updated);
        if min_ready > 0
            && status.ready_replicas.unwrap_or(0) == replicas
            && status.available_replicas.unwrap_or(0) != replicas
        {
            return Ok(Action::RequeueAfter(Duration::from_secs(min_ready as u64)));
        }
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl<W: ReplicaSetKind> Reconciler for ReplicaSetController<W> {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_replica_set(key).await
    }
}

/// `calculateStatus`: counts of the claimed active pods, and the `ReplicaFailure` condition.
pub fn calculate_status(
    rs: &ReplicaSet,
    filtered: &[impl std::borrow::Borrow<Pod>],
    manage_err: Option<&ApiError>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let mut status = rs.status.clone().unwrap_or_default();
    let template_labels = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let min_ready = min_ready_seconds_of(rs);
    let mut fully_labeled = 0;
    let mut ready = 0;
    let mut available = 0;
    for pod in filtered.iter().map(std::borrow::Borrow::<Pod>::borrow) {
        let labels = labels_of(&pod.metadata);
        if template_labels.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            fully_labeled += 1;
        }
        if is_pod_ready(pod) {
            ready += 1;
            if is_pod_available(pod, min_ready, now) {
                available += 1;
            }
        }
    }
    let has_failure = status.conditions.iter().flatten().any(|c| c.type_ == REPLICA_FAILURE);
    match manage_err {
        Some(e) if !has_failure => {
            let diff = filtered.len() as i64 - i64::from(replicas_of(rs));
            let reason = match diff.cmp(&0) {
                std::cmp::Ordering::Less => "FailedCreate",
                std::cmp::Ordering::Greater => "FailedDelete",
                std::cmp::Ordering::Equal => "",
            };
            status.conditions.get_or_insert_with(Vec::new).push(ReplicaSetCondition {
                type_: REPLICA_FAILURE.to_string(),
                status: "True".to_string(),
                reason: Some(reason.to_string()),
                message: Some(e.message.clone()),
                last_transition_time: Some(time(now)),
            });
        }
        None if has_failure => {
            if let Some(c) = status.conditions.as_mut() {
                c.retain(|c| c.type_ != REPLICA_FAILURE);
            }
        }
        _ => {}
    }
    status.replicas = filtered.len() as i32;
    status.fully_labeled_replicas = Some(fully_labeled);
    status.ready_replicas = Some(ready);
    status.available_replicas = Some(available);
    status
}

/// `updateReplicaSetStatus`: writes the status of `obj` (a ReplicaSet or another
/// [`ReplicaSetKind`]) unless nothing changed (and the generation was already observed); on
/// failure re-reads the object and tries once more. Returns the object as a ReplicaSet.
///
/// # Errors
/// The second failure (or the re-read's).
pub async fn update_replica_set_status<W: ReplicaSetKind>(
    api: &dyn ApiClient,
    obj: &Arc<W>,
    mut new_status: ReplicaSetStatus,
) -> Result<Arc<ReplicaSet>, ApiError> {
    let rs = W::to_replica_set(obj);
    let old = rs.status.clone().unwrap_or_default();
    let generation = rs.metadata.generation.unwrap_or(0);
    let n = |v: Option<i32>| v.unwrap_or(0);
    if old.replicas == new_status.replicas
        && n(old.fully_labeled_replicas) == n(new_status.fully_labeled_replicas)
        && n(old.ready_replicas) == n(new_status.ready_replicas)
        && n(old.available_replicas) == n(new_status.available_replicas)
        && old.observed_generation.unwrap_or(0) == generation
        && old.conditions.clone().unwrap_or_default() == new_status.conditions.clone().unwrap_or_default()
    {
        return Ok(rs.clone());
    }
    new_status.observed_generation = Some(generation);
    let mut current: W = obj.as_ref().clone();
    let mut attempt = 0;
    loop {
        current = current.with_status(new_status.clone());
        match api.update_status_typed(&current).await {
            Ok(updated) => return Ok(W::to_replica_set(&Arc::new(updated))),
            Err(e) if attempt >= 1 => return Err(e),
            Err(_) => {
                attempt += 1;
                let (ns, name) = (current.meta().namespace.clone(), current.meta().name.clone().unwrap_or_default());
                current = api.get_typed(ns.as_deref(), &name).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::ReplicaSetSpec;
    use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodStatus, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector as MetaSelector, ObjectMeta, OwnerReference, Time,
    };
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::util::{add_seconds, fixed_clock};
    use skiff_runtime::fake::FakeApi;

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn rs(name: &str, replicas: i32, min_ready: i32) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("{name}-uid")),
                resource_version: Some("10".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                min_ready_seconds: Some(min_ready),
                selector: MetaSelector { match_labels: Some(labels(&[("app", "web")])), ..Default::default() },
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels(&[("app", "web"), ("tier", "fe")])),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            image: Some("nginx".into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                }),
            }),
            status: None,
        }
    }

    #[derive(Clone, Copy)]
    enum State {
        Unscheduled,
        Pending,
        NotReady,
        Ready(i64),
    }

    fn pod(name: &str, owner: Option<&ReplicaSet>, pod_labels: &[(&str, &str)], state: State) -> Pod {
        let (node, phase, ready_since) = match state {
            State::Unscheduled => (None, "Pending", None),
            State::Pending => (Some("n1"), "Pending", None),
            State::NotReady => (Some("n1"), "Running", None),
            State::Ready(since) => (Some("n1"), "Running", Some(since)),
        };
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("{name}-uid")),
                resource_version: Some("5".into()),
                labels: Some(labels(pod_labels)),
                creation_timestamp: Some(Time(add_seconds(now(), -1000))),
                owner_references: owner.map(|rs| vec![new_controller_ref(rs)]),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: node.map(str::to_string), ..Default::default() }),
            status: Some(PodStatus {
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
            }),
        }
    }

    struct Fixture {
        api: Arc<FakeApi>,
        factory: SharedInformerFactory,
        controller: Arc<ReplicaSetController>,
        recorder: EventRecorder,
    }

    impl Fixture {
        fn new() -> Self {
            let api = Arc::new(FakeApi::new());
            let factory = SharedInformerFactory::for_tests();
            let recorder = EventRecorder::recording("replicaset-controller");
            let controller =
                ReplicaSetController::new(api.clone(), &factory, Arc::new(WorkQueue::new()), recorder.clone())
                    .with_clock(fixed_clock(now()));
            Self { api, factory, controller, recorder }
        }

        fn seed_rs(&self, rs: &ReplicaSet) {
            self.api.seed(rs);
            self.factory.informer::<ReplicaSet>().handle_event(Event::Apply(rs.clone()));
        }

        fn seed_pod(&self, pod: &Pod) {
            self.api.seed(pod);
            self.factory.informer::<Pod>().handle_event(Event::Apply(pod.clone()));
        }

        async fn sync(&self, key: &str) -> ReconcileResult {
            self.api.clear_actions();
            self.controller.sync_replica_set(key).await
        }

        fn events(&self) -> Vec<String> {
            self.recorder.recorded().iter().map(|e| e.summary()).collect()
        }
    }

    #[tokio::test]
    async fn missing_pods_are_created_in_slow_start_batches_and_expected() {
        let f = Fixture::new();
        let rs = rs("web-abc", 3, 0);
        f.seed_rs(&rs);
        assert_eq!(f.sync("ns/web-abc").await.unwrap(), Action::AwaitChange);
        let creates: Vec<_> = f.api.mutations().into_iter().filter(|a| a.verb == "create").collect();
        assert_eq!(creates.len(), 3);
        let body = creates[0].body.clone().unwrap();
        assert_eq!(body["metadata"]["generateName"], "web-abc-");
        assert_eq!(body["metadata"]["labels"]["tier"], "fe");
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "web-abc-uid");
        assert_eq!(body["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(body["metadata"]["ownerReferences"][0]["blockOwnerDeletion"], true);
        assert_eq!(f.api.mutation_summaries().last().unwrap(), "update replicasets/status ns/web-abc");
        assert_eq!(f.controller.expectations().outstanding("ns/web-abc"), Some((3, 0)));
        assert!(f.events().iter().all(|e| e.starts_with("Normal SuccessfulCreate Created pod: web-abc-")));

        // The cache has not caught up: a second sync must not create again.
        f.sync("ns/web-abc").await.unwrap();
        assert!(f.api.mutations().iter().all(|a| a.verb != "create"));
    }

    #[tokio::test]
    async fn observed_creations_satisfy_expectations() {
        let f = Fixture::new();
        let rs = rs("web-abc", 2, 0);
        f.seed_rs(&rs);
        f.sync("ns/web-abc").await.unwrap();
        for name in ["web-abc-1", "web-abc-2"] {
            f.seed_pod(&pod(name, Some(&rs), &[("app", "web"), ("tier", "fe")], State::Pending));
        }
        assert!(f.controller.expectations().satisfied("ns/web-abc"));
        f.sync("ns/web-abc").await.unwrap();
        assert!(f.api.mutations().iter().all(|a| a.verb != "create" && a.verb != "delete"));
    }

    #[tokio::test]
    async fn surplus_pods_are_deleted_least_valuable_first() {
        let f = Fixture::new();
        let rs = rs("web-abc", 2, 0);
        f.seed_rs(&rs);
        let l = [("app", "web"), ("tier", "fe")];
        for (name, state) in [
            ("ready-a", State::Ready(600)),
            ("not-ready", State::NotReady),
            ("unscheduled", State::Unscheduled),
            ("ready-b", State::Ready(600)),
            ("pending", State::Pending),
        ] {
            f.seed_pod(&pod(name, Some(&rs), &l, state));
        }
        f.sync("ns/web-abc").await.unwrap();
        let mut deleted: Vec<String> =
            f.api.mutations().iter().filter(|a| a.verb == "delete").map(|a| a.name.clone()).collect();
        deleted.sort();
        assert_eq!(deleted, ["not-ready", "pending", "unscheduled"]);
        assert_eq!(f.controller.expectations().outstanding("ns/web-abc"), Some((0, 3)));
        assert_eq!(f.events().iter().filter(|e| e.starts_with("Normal SuccessfulDelete Deleted pod: ")).count(), 3);
    }

    #[tokio::test]
    async fn orphans_are_adopted_and_non_matching_pods_released() {
        let f = Fixture::new();
        let rs = rs("web-abc", 2, 0);
        f.seed_rs(&rs);
        f.seed_pod(&pod("orphan", None, &[("app", "web")], State::Pending));
        f.seed_pod(&pod("relabeled", Some(&rs), &[("app", "other")], State::Pending));
        f.seed_pod(&pod("foreign", None, &[("app", "other")], State::Pending));
        let mut other = rs.clone();
        other.metadata.uid = Some("someone-else".into());
        f.seed_pod(&pod("owned-elsewhere", Some(&other), &[("app", "web")], State::Pending));
        f.sync("ns/web-abc").await.unwrap();
        let patches: Vec<_> = f.api.mutations().into_iter().filter(|a| a.verb == "patch").collect();
        assert_eq!(patches.len(), 2, "{:?}", f.api.mutation_summaries());
        let adopt = patches.iter().find(|a| a.name == "orphan").unwrap().body.clone().unwrap();
        assert_eq!(adopt["metadata"]["ownerReferences"][0]["uid"], "web-abc-uid");
        assert_eq!(adopt["metadata"]["resourceVersion"], "5");
        let release = patches.iter().find(|a| a.name == "relabeled").unwrap().body.clone().unwrap();
        assert_eq!(release["metadata"]["ownerReferences"], serde_json::Value::Null);
        // Adoption re-checked the ReplicaSet with a live GET first.
        assert!(f.api.actions().iter().any(|a| a.verb == "get" && a.resource == "replicasets"));
        // One adopted pod counts: one more pod is created.
        assert_eq!(f.api.mutations().iter().filter(|a| a.verb == "create").count(), 1);
    }

    #[tokio::test]
    async fn status_counts_ready_available_and_fully_labeled_and_requeues_for_min_ready() {
        let f = Fixture::new();
        let rs = rs("web-abc", 3, 30);
        f.seed_rs(&rs);
        let full = [("app", "web"), ("tier", "fe")];
        f.seed_pod(&pod("p1", Some(&rs), &full, State::Ready(60)));
        f.seed_pod(&pod("p2", Some(&rs), &full, State::Ready(10)));
        f.seed_pod(&pod("p3", Some(&rs), &[("app", "web")], State::Ready(100)));
        let action = f.sync("ns/web-abc").await.unwrap();
        let update = f.api.mutations().into_iter().find(|a| a.verb == "update").unwrap();
        let status = &update.body.unwrap()["status"];
        assert_eq!(status["replicas"], 3);
        assert_eq!(status["readyReplicas"], 3);
        assert_eq!(status["availableReplicas"], 2);
        assert_eq!(status["fullyLabeledReplicas"], 2);
        assert_eq!(status["observedGeneration"], 1);
        // All ready, one not yet available: look again after minReadySeconds.
        assert_eq!(action, Action::RequeueAfter(Duration::from_secs(30)));
    }

    #[tokio::test]
    async fn failed_creates_set_a_replica_failure_condition_and_return_the_error() {
        let f = Fixture::new();
        let rs = rs("web-abc", 3, 0);
        f.seed_rs(&rs);
        f.api.fail_next("create", "pods", ApiError::forbidden("", "pods", "", "exceeded quota"));
        let err = f.sync("ns/web-abc").await.unwrap_err();
        assert!(err.to_string().contains("exceeded quota"));
        // Slow start: the first batch of one failed, nothing else was tried.
        assert_eq!(f.api.mutations().iter().filter(|a| a.verb == "create").count(), 1);
        assert_eq!(f.controller.expectations().outstanding("ns/web-abc"), Some((0, 0)));
        let update = f.api.mutations().into_iter().find(|a| a.verb == "update").unwrap();
        let cond = &update.body.unwrap()["status"]["conditions"][0];
        assert_eq!(cond["type"], "ReplicaFailure");
        assert_eq!(cond["reason"], "FailedCreate");
        assert!(f.events()[0].starts_with("Warning FailedCreate Error creating: "));
    }

    #[tokio::test]
    async fn a_deleted_replicaset_forgets_its_expectations() {
        let f = Fixture::new();
        f.controller.expectations().expect_creations("ns/gone", 2);
        assert_eq!(f.sync("ns/gone").await.unwrap(), Action::AwaitChange);
        assert_eq!(f.controller.expectations().outstanding("ns/gone"), None);
        assert!(f.api.actions().is_empty());
    }

    #[test]
    fn pod_events_record_observations_and_enqueue_the_owner() {
        let f = Fixture::new();
        let rs = rs("web-abc", 1, 0);
        f.seed_rs(&rs);
        let q = f.controller.queue().clone();
        while !q.is_empty() {
            // Drain the add from seeding.
            let k = futures::executor::block_on(q.get()).unwrap();
            q.done(&k);
        }
        f.controller.expectations().expect_creations("ns/web-abc", 1);
        f.seed_pod(&pod("p1", Some(&rs), &[("app", "web")], State::Pending));
        assert!(f.controller.expectations().satisfied("ns/web-abc"));
        assert_eq!(q.len(), 1);
        let mut unrelated = pod("p2", None, &[("app", "nope")], State::Pending);
        unrelated.metadata.owner_references = Some(vec![OwnerReference {
            controller: Some(true),
            kind: "ReplicaSet".into(),
            name: "missing".into(),
            uid: "x".into(),
            ..Default::default()
        }]);
        f.seed_pod(&unrelated);
        assert_eq!(q.len(), 1);
    }
}
