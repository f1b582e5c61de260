//! The disruption controller (`pkg/controller/disruption/disruption.go`): keeps each
//! PodDisruptionBudget's status, which the `pods/eviction` subresource reads to allow or refuse
//! an eviction.
//!
//! `sync` of one budget:
//! 1. The budget's pods: pods of its namespace matching `spec.selector` (an empty selector
//!    matches every pod, an absent one none, as policy/v1 says).
//! 2. `expectedPods` and `desiredHealthy` ([`expected_pod_count`]): `minAvailable` as a number is
//!    the desired count over the pods found; `maxUnavailable`, or `minAvailable` as a
//!    percentage, is scaled (rounded up) against the sum of the scales of the pods' controllers,
//!    found through owner references as Kubernetes' finders do ([`finders`]).
//! 3. `disruptedPods`: the evictions the API server approved that the cache has not seen deleted
//!    yet; an entry older than [`DELETION_TIMEOUT`] is dropped (a `NotDeleted` event on the pod),
//!    and the budget is looked at again when the oldest live entry expires.
//! 4. `currentHealthy`: Ready pods neither being deleted nor freshly disrupted;
//!    `disruptionsAllowed = max(0, currentHealthy - desiredHealthy)` (0 while `expectedPods` is
//!    0); the `DisruptionAllowed` condition (`SufficientPods` / `InsufficientPods`).
//!
//! A sync that fails for any reason but a write conflict sets `disruptionsAllowed` to 0 with the
//! condition's reason `SyncFailed` (`failSafe`: evictions stop rather than break the budget)
//! and looks again after [`PDB_RESYNC`].
//!
//! A second loop, [`stale::StalePodDisruptionCleaner`], resets the `DisruptionTarget` condition
//! of pods an eviction marked but that were not deleted within two minutes.

mod finders;
pub mod stale;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use skiff_apimachinery::LabelSelector;

use crate::deployment::util::scaled_value_from_int_or_percent;
use crate::util::{Clock, add_seconds, controller_of, is_pod_ready, labels_of, name_of, selector_of, system_clock};
use skiff_runtime::api::{ApiClient, ApiClientExt, ApiError, DiscoveredResource, is_conflict};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, EventRecorder};
use skiff_runtime::informer::{Informer, ResourceEventHandler, SharedInformerFactory, key_of, split_key};
use skiff_runtime::workqueue::WorkQueue;

/// How long an eviction approved by the API server (an entry of `status.disruptedPods`) keeps
/// its pod out of `currentHealthy` while the pod is not seen deleted (`DeletionTimeout`).
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(2 * 60);
/// How often every budget is synced again even without events (the PDB informer's resync in
/// kube-controller-manager), which also picks up custom resources' scale changes.
pub const PDB_RESYNC: Duration = Duration::from_secs(30);
/// The status condition the controller keeps (`policy.DisruptionAllowedCondition`).
pub const DISRUPTION_ALLOWED_CONDITION: &str = "DisruptionAllowed";
/// Condition reason: the last sync failed, evictions are refused.
pub const SYNC_FAILED_REASON: &str = "SyncFailed";
/// Condition reason: at least one disruption is allowed.
pub const SUFFICIENT_PODS_REASON: &str = "SufficientPods";
/// Condition reason: no disruption is allowed.
pub const INSUFFICIENT_PODS_REASON: &str = "InsufficientPods";

/// The disruption controller.
pub struct DisruptionController {
    api: Arc<dyn ApiClient>,
    pdbs: Arc<Informer<PodDisruptionBudget>>,
    pods: Arc<Informer<Pod>>,
    replicasets: Arc<Informer<ReplicaSet>>,
    deployments: Arc<Informer<Deployment>>,
    statefulsets: Arc<Informer<StatefulSet>>,
    replication_controllers: Arc<Informer<ReplicationController>>,
    queue: Arc<WorkQueue<String>>,
    recorder: EventRecorder,
    clock: Clock,
    /// Discovery's resources, read on first need and again when a kind is not found in them
    /// (the REST mapper of the scale finder).
    discovery: Mutex<Option<Arc<Vec<DiscoveredResource>>>>,
}

/// `LabelSelectorAsSelector` of a budget's selector: `None` for an absent or invalid selector,
/// which matches no pod.
fn pdb_selector(pdb: &PodDisruptionBudget) -> Option<LabelSelector> {
    pdb.spec.as_ref()?.selector.as_ref().and_then(|s| selector_of(s).ok())
}

struct Handlers {
    pdbs: Arc<Informer<PodDisruptionBudget>>,
    queue: Arc<WorkQueue<String>>,
    recorder: EventRecorder,
}

impl Handlers {
    /// `getPdbForPod`, enqueueing every matching budget (Kubernetes picks one arbitrarily and
    /// warns; the others then wait for their resync).
    fn enqueue_pdbs_of(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let labels = labels_of(&pod.metadata);
        let mut matching: Vec<_> = self
            .pdbs
            .store()
            .list_namespace(ns)
            .into_iter()
            .filter(|pdb| pdb_selector(pdb).is_some_and(|s| s.matches(&labels)))
            .collect();
        matching.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        if matching.len() > 1 {
            self.recorder.event_for(
                pod,
                EVENT_TYPE_WARNING,
                "MultiplePodDisruptionBudgets",
                &format!(
                    "Pod {:?}/{:?} matches multiple PodDisruptionBudgets.  Chose {:?} arbitrarily.",
                    ns,
                    name_of(&pod.metadata),
                    name_of(&matching[0].metadata)
                ),
            );
        }
        for pdb in matching {
            self.queue.add(key_of(pdb.as_ref()));
        }
    }

    /// A workload's scale changed: the budgets of its namespace may expect another count.
    fn enqueue_namespace(&self, ns: Option<&str>) {
        for pdb in self.pdbs.store().list_namespace(ns.unwrap_or_default()) {
            self.queue.add(key_of(pdb.as_ref()));
        }
    }
}

impl ResourceEventHandler<PodDisruptionBudget> for Handlers {
    fn on_add(&self, pdb: &Arc<PodDisruptionBudget>) {
        self.queue.add(key_of(pdb.as_ref()));
    }

    fn on_update(&self, _old: &Arc<PodDisruptionBudget>, cur: &Arc<PodDisruptionBudget>) {
        self.queue.add(key_of(cur.as_ref()));
    }

    fn on_delete(&self, pdb: &Arc<PodDisruptionBudget>) {
        self.queue.add(key_of(pdb.as_ref()));
    }
}

impl ResourceEventHandler<Pod> for Handlers {
    fn on_add(&self, pod: &Arc<Pod>) {
        self.enqueue_pdbs_of(pod);
    }

    fn on_update(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        self.enqueue_pdbs_of(cur);
        if old.metadata.labels != cur.metadata.labels {
            self.enqueue_pdbs_of(old);
        }
    }

    fn on_delete(&self, pod: &Arc<Pod>) {
        self.enqueue_pdbs_of(pod);
    }
}

/// Handlers of the scale-carrying workloads: a change of `spec.replicas` re-syncs the
/// namespace's budgets (their expected count may change).
macro_rules! scale_handler {
    ($kind:ty) => {
        impl ResourceEventHandler<$kind> for Handlers {
            fn on_add(&self, _obj: &Arc<$kind>) {}

            fn on_update(&self, old: &Arc<$kind>, cur: &Arc<$kind>) {
                let replicas = |o: &$kind| o.spec.as_ref().and_then(|s| s.replicas);
                if replicas(old) != replicas(cur) {
                    self.enqueue_namespace(cur.metadata.namespace.as_deref());
                }
            }

            fn on_delete(&self, obj: &Arc<$kind>) {
                self.enqueue_namespace(obj.metadata.namespace.as_deref());
            }
        }
    };
}
scale_handler!(ReplicaSet);
scale_handler!(Deployment);
scale_handler!(StatefulSet);
scale_handler!(ReplicationController);

impl DisruptionController {
    /// Creates the controller on the factory's informers (budgets, pods, and the workloads
    /// whose scale the finders read) and registers its event handlers.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
    ) -> Arc<Self> {
        let pdbs = factory.informer::<PodDisruptionBudget>();
        let pods = factory.informer::<Pod>();
        let replicasets = factory.informer::<ReplicaSet>();
        let deployments = factory.informer::<Deployment>();
        let statefulsets = factory.informer::<StatefulSet>();
        let replication_controllers = factory.informer::<ReplicationController>();
        let handlers = Arc::new(Handlers { pdbs: pdbs.clone(), queue: queue.clone(), recorder: recorder.clone() });
        pdbs.add_event_handler(handlers.clone());
        pods.add_event_handler(handlers.clone());
        replicasets.add_event_handler(handlers.clone());
        deployments.add_event_handler(handlers.clone());
        statefulsets.add_event_handler(handlers.clone());
        replication_controllers.add_event_handler(handlers);
        Arc::new(Self {
            api,
            pdbs,
            pods,
            replicasets,
            deployments,
            statefulsets,
            replication_controllers,
            queue,
            recorder,
            clock: system_clock(),
            discovery: Mutex::new(None),
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

    /// `getPodsForPdb`: the cached pods of the budget's namespace its selector matches.
    fn pods_for(&self, pdb: &PodDisruptionBudget) -> Vec<Arc<Pod>> {
        let Some(selector) = pdb_selector(pdb) else { return Vec::new() };
        let mut pods: Vec<_> = self
            .pods
            .store()
            .list_namespace(pdb.metadata.namespace.as_deref().unwrap_or_default())
            .into_iter()
            .filter(|p| selector.matches(&labels_of(&p.metadata)))
            .collect();
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        pods
    }

    /// `sync` of one budget key.
    pub async fn sync(&self, key: &str) -> ReconcileResult {
        let Some(pdb) = self.pdbs.store().get(key) else { return Ok(Action::AwaitChange) };
        match self.try_sync(&pdb).await {
            Ok(action) => Ok(action),
            Err(e) if is_conflict(&e) => Err(e.into()),
            Err(e) => {
                tracing::warn!(pdb = key, error = %e.message, "failed to sync a PodDisruptionBudget");
                self.fail_safe(&pdb, &e.message).await?;
                Ok(Action::RequeueAfter(PDB_RESYNC))
            }
        }
    }

    async fn try_sync(&self, pdb: &PodDisruptionBudget) -> Result<Action, ApiError> {
        let pods = self.pods_for(pdb);
        if pods.is_empty() {
            self.recorder.event_for(pdb, EVENT_TYPE_NORMAL, "NoPods", "No matching pods found");
        }
        let counts = match self.expected_pod_count(pdb, &pods).await {
            Ok(c) => c,
            Err(e) => {
                self.recorder.event_for(
                    pdb,
                    EVENT_TYPE_WARNING,
                    "CalculateExpectedPodCountFailed",
                    &format!("Failed to calculate the number of expected pods: {}", e.message),
                );
                return Err(e);
            }
        };
        if !counts.unmanaged_pods.is_empty() {
            let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
            self.recorder.event_for(
                pdb,
                EVENT_TYPE_WARNING,
                "UnmanagedPods",
                &format!(
                    "Pods selected by this PodDisruptionBudget (selector: {selector:?}) were found to be unmanaged. \
                     As a result, the status of the PDB cannot be calculated correctly, which may result in undefined \
                     behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an \
                     integer value."
                ),
            );
        }
        let now = (self.clock)();
        let (disrupted, recheck) = self.build_disrupted_pod_map(&pods, pdb, now);
        let current_healthy = count_healthy_pods(&pods, &disrupted, now);
        self.update_pdb_status(pdb, current_healthy, counts.desired_healthy, counts.expected_count, disrupted, now)
            .await?;
        // Look again when the first disrupted pod's entry expires, and at the resync period.
        let resync = match recheck {
            Some(at) => Duration::from_secs((at.as_second() - now.as_second()).max(1) as u64).min(PDB_RESYNC),
            None => PDB_RESYNC,
        };
        Ok(Action::RequeueAfter(resync))
    }

    /// `getExpectedPodCount`.
    async fn expected_pod_count(&self, pdb: &PodDisruptionBudget, pods: &[Arc<Pod>]) -> Result<Counts, ApiError> {
        let spec = pdb.spec.clone().unwrap_or_default();
        let invalid = |e: String| ApiError::bad_request(e);
        if let Some(max_unavailable) = &spec.max_unavailable {
            let (expected, unmanaged) = self.expected_scale(pods).await?;
            let max = scaled_value_from_int_or_percent(max_unavailable, expected, true).map_err(invalid)?;
            return Ok(Counts {
                expected_count: expected,
                desired_healthy: (expected - max).max(0),
                unmanaged_pods: unmanaged,
            });
        }
        match &spec.min_available {
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n)) => {
                Ok(Counts { expected_count: pods.len() as i32, desired_healthy: *n, unmanaged_pods: Vec::new() })
            }
            Some(percent) => {
                let (expected, unmanaged) = self.expected_scale(pods).await?;
                let min = scaled_value_from_int_or_percent(percent, expected, true).map_err(invalid)?;
                Ok(Counts { expected_count: expected, desired_healthy: min, unmanaged_pods: unmanaged })
            }
            None => Ok(Counts { expected_count: 0, desired_healthy: 0, unmanaged_pods: Vec::new() }),
        }
    }

    /// `getExpectedScale`: the sum of the scales of the pods' controllers (each counted once),
    /// and the names of pods without a controller.
    ///
    /// # Errors
    /// A pod whose controller none of the finders knows ("found no controllers for pod"), or a
    /// finder's API error.
    async fn expected_scale(&self, pods: &[Arc<Pod>]) -> Result<(i32, Vec<String>), ApiError> {
        let mut scales: BTreeMap<String, i32> = BTreeMap::new();
        let mut unmanaged = Vec::new();
        for pod in pods {
            let Some(cref) = controller_of(&pod.metadata) else {
                unmanaged.push(name_of(&pod.metadata).to_string());
                continue;
            };
            if scales.contains_key(&cref.uid) {
                continue;
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            match self.find_controller(cref, ns).await? {
                Some((uid, scale)) => {
                    scales.insert(uid, scale);
                }
                None => {
                    return Err(ApiError::bad_request(format!(
                        "found no controllers for pod {:?}",
                        name_of(&pod.metadata)
                    )));
                }
            }
        }
        Ok((scales.values().sum(), unmanaged))
    }

    /// `buildDisruptedPodMap`: the entries of `status.disruptedPods` still pending (pod present,
    /// not being deleted, entry younger than [`DELETION_TIMEOUT`]), and when the oldest of them
    /// expires.
    fn build_disrupted_pod_map(
        &self,
        pods: &[Arc<Pod>],
        pdb: &PodDisruptionBudget,
        now: Timestamp,
    ) -> (BTreeMap<String, Time>, Option<Timestamp>) {
        let mut result = BTreeMap::new();
        let mut recheck: Option<Timestamp> = None;
        let Some(disrupted) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
            return (result, recheck);
        };
        for pod in pods {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(at) = disrupted.get(name_of(&pod.metadata)) else { continue };
            let expected_deletion = add_seconds(at.0, DELETION_TIMEOUT.as_secs() as i64);
            if expected_deletion < now {
                self.recorder.event_for(
                    pod.as_ref(),
                    EVENT_TYPE_WARNING,
                    "NotDeleted",
                    &format!(
                        "Pod was expected by PDB {}/{} to be deleted but it wasn't",
                        pdb.metadata.namespace.as_deref().unwrap_or_default(),
                        name_of(&pdb.metadata)
                    ),
                );
            } else {
                if recheck.is_none_or(|r| expected_deletion < r) {
                    recheck = Some(expected_deletion);
                }
                result.insert(name_of(&pod.metadata).to_string(), at.clone());
            }
        }
        (result, recheck)
    }

    /// `updatePdbStatus`: writes the new counts unless nothing changed.
    async fn update_pdb_status(
        &self,
        pdb: &PodDisruptionBudget,
        current_healthy: i32,
        desired_healthy: i32,
        expected_count: i32,
        disrupted_pods: BTreeMap<String, Time>,
        now: Timestamp,
    ) -> Result<(), ApiError> {
        // A budget that matches no pods yet stays at zero, so that its first pods are safe
        // before this controller has counted them.
        let mut disruptions_allowed = current_healthy - desired_healthy;
        if expected_count <= 0 || disruptions_allowed <= 0 {
            disruptions_allowed = 0;
        }
        let old = pdb.status.clone().unwrap_or_default();
        let generation = pdb.metadata.generation.unwrap_or(0);
        if old.current_healthy == current_healthy
            && old.desired_healthy == desired_healthy
            && old.expected_pods == expected_count
            && old.disruptions_allowed == disruptions_allowed
            && old.disrupted_pods.clone().unwrap_or_default() == disrupted_pods
            && old.observed_generation.unwrap_or(0) == generation
            && conditions_are_up_to_date(pdb)
        {
            return Ok(());
        }
        let mut status = PodDisruptionBudgetStatus {
            current_healthy,
            desired_healthy,
            expected_pods: expected_count,
            disruptions_allowed,
            disrupted_pods: Some(disrupted_pods),
            observed_generation: Some(generation),
            conditions: old.conditions,
        };
        update_disruption_allowed_condition(&mut status, now);
        let mut new = pdb.clone();
        new.status = Some(status);
        self.api.update_status_typed(&new).await.map(|_| ())
    }

    /// `failSafe`: after a failed sync, at least stop evictions: `disruptionsAllowed` 0 and the
    /// condition `False` with reason `SyncFailed` and the error as its message.
    async fn fail_safe(&self, pdb: &PodDisruptionBudget, message: &str) -> Result<(), ApiError> {
        let mut new = pdb.clone();
        let status = new.status.get_or_insert_with(Default::default);
        status.disruptions_allowed = 0;
        let observed = status.observed_generation;
        set_status_condition(
            status.conditions.get_or_insert_with(Vec::new),
            Condition {
                type_: DISRUPTION_ALLOWED_CONDITION.into(),
                status: "False".into(),
                reason: SYNC_FAILED_REASON.into(),
                message: message.to_string(),
                observed_generation: observed,
                last_transition_time: Time((self.clock)()),
            },
        );
        self.api.update_status_typed(&new).await.map(|_| ())
    }
}

#[async_trait]
impl Reconciler for DisruptionController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        let (_, name) = split_key(key);
        tracing::trace!(pdb = name, "syncing PodDisruptionBudget");
        self.sync(key).await
    }
}

/// What `getExpectedPodCount` computes.
struct Counts {
    expected_count: i32,
    desired_healthy: i32,
    unmanaged_pods: Vec<String>,
}

/// `countHealthyPods`: Ready pods that are neither being deleted nor in `disrupted` with an
/// entry younger than [`DELETION_TIMEOUT`].
pub fn count_healthy_pods(pods: &[Arc<Pod>], disrupted: &BTreeMap<String, Time>, now: Timestamp) -> i32 {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            disrupted
                .get(name_of(&p.metadata))
                .is_none_or(|at| add_seconds(at.0, DELETION_TIMEOUT.as_secs() as i64) <= now)
        })
        .filter(|p| is_pod_ready(p))
        .count() as i32
}

/// `apimeta.SetStatusCondition`: adds or replaces the condition of that type; the transition
/// time changes only when the status does.
pub fn set_status_condition(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status != new.status {
                existing.status = new.status;
                existing.last_transition_time = new.last_transition_time;
            }
            existing.reason = new.reason;
            existing.message = new.message;
            existing.observed_generation = new.observed_generation;
        }
        None => conditions.push(new),
    }
}

/// `UpdateDisruptionAllowedCondition` (component-helpers' `poddisruptionbudget`): `True` /
/// `SufficientPods` while a disruption is allowed, `False` / `InsufficientPods` otherwise.
pub fn update_disruption_allowed_condition(status: &mut PodDisruptionBudgetStatus, now: Timestamp) {
    let (value, reason) = if status.disruptions_allowed > 0 {
        ("True", SUFFICIENT_PODS_REASON)
    } else {
        ("False", INSUFFICIENT_PODS_REASON)
    };
    let observed = status.observed_generation;
    set_status_condition(
        status.conditions.get_or_insert_with(Vec::new),
        Condition {
            type_: DISRUPTION_ALLOWED_CONDITION.into(),
            status: value.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: observed,
            last_transition_time: Time(now),
        },
    );
}

/// `ConditionsAreUpToDate`: the condition exists and agrees with `disruptionsAllowed`, and the
/// generation was observed.
pub fn conditions_are_up_to_date(pdb: &PodDisruptionBudget) -> bool {
    let Some(status) = pdb.status.as_ref() else { return false };
    let Some(cond) = status.conditions.iter().flatten().find(|c| c.type_ == DISRUPTION_ALLOWED_CONDITION) else {
        return false;
    };
    if status.observed_generation.unwrap_or(0) != pdb.metadata.generation.unwrap_or(0) {
        return false;
    }
    if status.disruptions_allowed > 0 {
        cond.status == "True" && cond.reason == SUFFICIENT_PODS_REASON
    } else {
        cond.status == "False" && cond.reason == INSUFFICIENT_PODS_REASON
    }
}
