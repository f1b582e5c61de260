//! The DaemonSet controller (`pkg/controller/daemon/daemon_controller.go`): one daemon pod on
//! every node that should run it, placed by the scheduler through a `metadata.name` node
//! affinity term, rolled to new templates as the update strategy says.
//!
//! `sync_daemon_set`:
//! 1. Construct the history ([`update`]): the ControllerRevision of the current template
//!    (its hash labels the pods) and the old ones.
//! 2. If the expectations of earlier creates/deletes are satisfied, `manage`: per node
//!    ([`util::node_should_run_daemon_pod`]) create the missing pod, delete failed or surplus
//!    pods and pods on nodes that must not run them (an untolerated NoExecute taint; an
//!    untolerated NoSchedule taint keeps a running pod), and unscheduled pods for nodes that no
//!    longer exist; then the RollingUpdate step (OnDelete: nothing) and history cleanup.
//! 3. Write the status counts.
//!
//! Event handlers only enqueue keys and record observations for the expectations; node events
//! enqueue the DaemonSets whose placement they change.

pub mod update;
pub mod util;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use skiff_apimachinery::LabelSelector;
use tokio::time::Instant;

use crate::controller_ref_manager::{Claimant, claim};
use crate::controller_utils::{Expectations, SLOW_START_INITIAL_BATCH_SIZE, pod_from_template, slow_start_batch};
use crate::util::{
    Clock, controller_of, is_pod_available, is_pod_ready, labels_of, name_of, new_controller_ref, pod_phase,
    selector_of, selects_everything, system_clock, uid_of,
};
use skiff_runtime::api::{
    ApiClient, ApiClientExt, ApiError, DeleteOptions, NAMESPACE_TERMINATING_CAUSE, has_status_cause, is_not_found,
    resource_of,
};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult, Reconciler};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, EventRecorder, reasons};
use skiff_runtime::informer::{Informer, ResourceEventHandler, SharedInformerFactory, key_of};
use skiff_runtime::workqueue::WorkQueue;
use util::{
    CONTROLLER_REVISION_HASH_LABEL, allows_surge, by_creation_timestamp_and_phase, create_pod_template, is_pod_updated,
    node_should_run_daemon_pod, replace_daemon_set_pod_node_name_node_affinity, target_node_name, template_generation,
    template_of,
};

/// Most pods created or deleted by one sync (`BurstReplicas`).
pub const BURST_REPLICAS: usize = 250;
/// Event reason for a failed daemon pod that is deleted to be recreated.
pub const FAILED_DAEMON_POD_REASON: &str = "FailedDaemonPod";
/// First delay before a failed daemon pod on a node is replaced again (`failedPodsBackoff`).
const FAILED_PODS_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// Longest delay between replacements of failed daemon pods on one node.
const FAILED_PODS_BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

/// A 409 Conflict carrying `message`.
fn conflict(message: String) -> ApiError {
    ApiError::new(409, "Conflict", message)
}

/// The DaemonSet controller.
pub struct DaemonSetsController {
    api: Arc<dyn ApiClient>,
    daemonsets: Arc<Informer<DaemonSet>>,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    revisions: Arc<Informer<ControllerRevision>>,
    queue: Arc<WorkQueue<String>>,
    expectations: Arc<Expectations>,
    recorder: EventRecorder,
    clock: Clock,
    burst_replicas: usize,
    /// Per `<ds key>/<node>`: (current delay, when the last failed pod was deleted).
    failed_pods_backoff: Mutex<HashMap<String, (Duration, Instant)>>,
}

struct Handlers {
    daemonsets: Arc<Informer<DaemonSet>>,
    queue: Arc<WorkQueue<String>>,
    expectations: Arc<Expectations>,
}

impl Handlers {
    /// `resolveControllerRef`: the DaemonSet a controller reference points to, if it exists with
    /// that uid.
    fn resolve(&self, meta: &ObjectMeta) -> Option<Arc<DaemonSet>> {
        let cref = controller_of(meta)?;
        if cref.kind != "DaemonSet" {
            return None;
        }
        let ds = self.daemonsets.store().get_namespaced(meta.namespace.as_deref(), &cref.name)?;
        (uid_of(&ds.metadata) == cref.uid).then_some(ds)
    }

    /// `getDaemonSetsForPod`: DaemonSets whose non-empty selector matches the labels.
    fn matching(&self, meta: &ObjectMeta) -> Vec<Arc<DaemonSet>> {
        let labels = labels_of(meta);
        if labels.is_empty() {
            return Vec::new();
        }
        self.daemonsets
            .store()
            .list_namespace(meta.namespace.as_deref().unwrap_or_default())
            .into_iter()
            .filter(|ds| {
                ds.spec
                    .as_ref()
                    .and_then(|s| selector_of(&s.selector).ok())
                    .is_some_and(|sel| !sel.is_empty() && sel.matches(&labels))
            })
            .collect()
    }

    fn enqueue(&self, ds: &DaemonSet) {
        self.queue.add(key_of(ds));
    }

    fn pod_deleted(&self, pod: &Pod) {
        if let Some(ds) = self.resolve(&pod.metadata) {
            let key = key_of(ds.as_ref());
            self.expectations.deletion_observed(&key, &key_of(pod));
            self.queue.add(key);
        }
    }

    /// Every DaemonSet whose placement on `node` is `changed(ds)`.
    fn enqueue_for_node(&self, changed: impl Fn(&DaemonSet) -> bool) {
        for ds in self.daemonsets.store().list() {
            if changed(ds.as_ref()) {
                self.enqueue(&ds);
            }
        }
    }
}

impl ResourceEventHandler<DaemonSet> for Handlers {
    fn on_add(&self, ds: &Arc<DaemonSet>) {
        self.enqueue(ds);
    }

    fn on_update(&self, old: &Arc<DaemonSet>, cur: &Arc<DaemonSet>) {
        if old.metadata.uid != cur.metadata.uid {
            self.expectations.delete_expectations(&key_of(old.as_ref()));
        }
        self.enqueue(cur);
    }

    fn on_delete(&self, ds: &Arc<DaemonSet>) {
        let key = key_of(ds.as_ref());
        self.expectations.delete_expectations(&key);
        self.queue.add(key);
    }
}

impl ResourceEventHandler<Pod> for Handlers {
    fn on_add(&self, pod: &Arc<Pod>) {
        if pod.metadata.deletion_timestamp.is_some() {
            // Seen for the first time already being deleted (after a restart): not a creation.
            self.pod_deleted(pod);
            return;
        }
        if controller_of(&pod.metadata).is_some() {
            if let Some(ds) = self.resolve(&pod.metadata) {
                let key = key_of(ds.as_ref());
                self.expectations.creation_observed(&key);
                self.queue.add(key);
            }
            return;
        }
        for ds in self.matching(&pod.metadata) {
            self.enqueue(&ds);
        }
    }

    fn on_update(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        if cur.metadata.deletion_timestamp.is_some() {
            self.pod_deleted(cur);
            return;
        }
        let (old_ref, cur_ref) = (controller_of(&old.metadata), controller_of(&cur.metadata));
        if old_ref != cur_ref
            && let Some(ds) = self.resolve(&old.metadata)
        {
            self.enqueue(&ds);
        }
        if cur_ref.is_some() {
            if let Some(ds) = self.resolve(&cur.metadata) {
                self.enqueue(&ds);
                let min_ready = ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0);
                if !is_pod_ready(old) && is_pod_ready(cur) && min_ready > 0 {
                    // Availability follows readiness by minReadySeconds without an event.
                    self.queue.add_after(key_of(ds.as_ref()), Duration::from_secs(min_ready as u64 + 1));
                }
            }
            return;
        }
        if old.metadata.labels != cur.metadata.labels || old_ref != cur_ref {
            for ds in self.matching(&cur.metadata) {
                self.enqueue(&ds);
            }
        }
    }

    fn on_delete(&self, pod: &Arc<Pod>) {
        self.pod_deleted(pod);
    }
}

/// Whether a node update can change any DaemonSet's placement (`shouldIgnoreNodeUpdate`'s
/// inverse): labels, spec (taints, unschedulable) or condition statuses changed.
fn node_placement_changed(old: &Node, cur: &Node) -> bool {
    let conditions = |n: &Node| -> Vec<(String, String)> {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|c| c.iter().map(|c| (c.type_.clone(), c.status.clone())).collect())
            .unwrap_or_default()
    };
    old.metadata.labels != cur.metadata.labels || old.spec != cur.spec || conditions(old) != conditions(cur)
}

impl ResourceEventHandler<Node> for Handlers {
    fn on_add(&self, node: &Arc<Node>) {
        self.enqueue_for_node(|ds| node_should_run_daemon_pod(node, ds).0);
    }

    fn on_update(&self, old: &Arc<Node>, cur: &Arc<Node>) {
        if !node_placement_changed(old, cur) {
            return;
        }
        self.enqueue_for_node(|ds| node_should_run_daemon_pod(old, ds) != node_should_run_daemon_pod(cur, ds));
    }

    fn on_delete(&self, node: &Arc<Node>) {
        // The desired count drops, and unscheduled pods for the node must go.
        self.enqueue_for_node(|ds| node_should_run_daemon_pod(node, ds).1);
    }
}

impl ResourceEventHandler<ControllerRevision> for Handlers {
    fn on_add(&self, history: &Arc<ControllerRevision>) {
        match self.resolve(&history.metadata) {
            Some(ds) => self.enqueue(&ds),
            None if controller_of(&history.metadata).is_none() => {
                for ds in self.matching(&history.metadata) {
                    self.enqueue(&ds);
                }
            }
            None => {}
        }
    }

    fn on_update(&self, _old: &Arc<ControllerRevision>, cur: &Arc<ControllerRevision>) {
        <Self as ResourceEventHandler<ControllerRevision>>::on_add(self, cur);
    }

    fn on_delete(&self, history: &Arc<ControllerRevision>) {
        if let Some(ds) = self.resolve(&history.metadata) {
            self.enqueue(&ds);
        }
    }
}

/// The daemon pods of one DaemonSet by the node they are for.
type NodeToDaemonPods = BTreeMap<String, Vec<Arc<Pod>>>;

impl DaemonSetsController {
    /// Creates the controller on the factory's DaemonSet, Pod, Node and ControllerRevision
    /// informers and registers its event handlers.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
    ) -> Arc<Self> {
        let daemonsets = factory.informer::<DaemonSet>();
        let pods = factory.informer::<Pod>();
        let nodes = factory.informer::<Node>();
        let revisions = factory.informer::<ControllerRevision>();
        let expectations = Arc::new(Expectations::new());
        let handlers = Arc::new(Handlers {
            daemonsets: daemonsets.clone(),
            queue: queue.clone(),
            expectations: expectations.clone(),
        });
        daemonsets.add_event_handler(handlers.clone());
        pods.add_event_handler(handlers.clone());
        nodes.add_event_handler(handlers.clone());
        revisions.add_event_handler(handlers);
        Arc::new(Self {
            api,
            daemonsets,
            pods,
            nodes,
            revisions,
            queue,
            expectations,
            recorder,
            clock: system_clock(),
            burst_replicas: BURST_REPLICAS,
            failed_pods_backoff: Mutex::new(HashMap::new()),
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

    /// `getDaemonPods` + `getNodesToDaemonPods`: the pods the DaemonSet owns after adopting
    /// matching orphans and releasing owned pods that no longer match, by target node. Without
    /// `include_deleted_terminal`, finished pods being deleted are left out.
    async fn nodes_to_daemon_pods(
        &self,
        ds: &DaemonSet,
        include_deleted_terminal: bool,
    ) -> Result<NodeToDaemonPods, ApiError> {
        let spec = ds.spec.as_ref().ok_or_else(|| ApiError::bad_request("daemon set has no spec"))?;
        let selector: LabelSelector = selector_of(&spec.selector).map_err(ApiError::bad_request)?;
        let uid = uid_of(&ds.metadata);
        let candidates: Vec<Arc<Pod>> = self
            .pods
            .store()
            .list_namespace(ds.metadata.namespace.as_deref().unwrap_or_default())
            .into_iter()
            .filter(|p| match controller_of(&p.metadata) {
                Some(cref) => cref.uid == uid,
                None => selector.matches(&labels_of(&p.metadata)),
            })
            .collect();
        let claimant = Claimant {
            controller_ref: new_controller_ref(ds),
            namespace: ds.metadata.namespace.clone(),
            being_deleted: ds.metadata.deletion_timestamp.is_some(),
        };
        let claimed = claim(
            self.api.as_ref(),
            &resource_of::<Pod>(),
            &claimant,
            candidates,
            |p: &Arc<Pod>| &p.metadata,
            |p: &Arc<Pod>| selector.matches(&labels_of(&p.metadata)),
            || self.can_adopt(ds),
        )
        .await?;
        let mut out = NodeToDaemonPods::new();
        for pod in claimed {
            let terminal = matches!(pod_phase(&pod), "Succeeded" | "Failed");
            if !include_deleted_terminal && terminal && pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match target_node_name(&pod) {
                Ok(node) => out.entry(node).or_default().push(pod),
                Err(e) => tracing::warn!(daemonset = %key_of(ds), error = %e, "daemon pod without a target node"),
            }
        }
        Ok(out)
    }

    /// Whether deleting another failed pod on this node must wait; otherwise the backoff grows.
    fn failed_pod_backoff(&self, key: &str) -> Option<Duration> {
        let mut backoff = self.failed_pods_backoff.lock();
        let now = Instant::now();
        match backoff.get_mut(key) {
            Some((delay, since)) if now.duration_since(*since) < *delay => Some(*delay - now.duration_since(*since)),
            Some((delay, since)) => {
                *delay = (*delay * 2).min(FAILED_PODS_BACKOFF_MAX);
                *since = now;
                None
            }
            None => {
                backoff.insert(key.to_string(), (FAILED_PODS_BACKOFF_INITIAL, now));
                None
            }
        }
    }

    /// `podsShouldBeOnNode`: whether the node needs a daemon pod, and which of its pods to delete.
    fn pods_should_be_on_node(
        &self,
        node: &Node,
        node_to_pods: &NodeToDaemonPods,
        ds: &DaemonSet,
        hash: &str,
    ) -> (bool, Vec<String>) {
        let node_name = name_of(&node.metadata);
        let (should_run, should_continue_running) = node_should_run_daemon_pod(node, ds);
        let pods = node_to_pods.get(node_name);
        let mut to_delete = Vec::new();
        if should_run && pods.is_none() {
            return (true, to_delete);
        }
        let Some(pods) = pods else { return (false, to_delete) };
        if !should_continue_running {
            to_delete.extend(
                pods.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| name_of(&p.metadata).to_string()),
            );
            return (false, to_delete);
        }
        let mut running = Vec::new();
        for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
            match pod_phase(pod) {
                "Failed" => {
                    // Kubelets may reject a pod over and over: replacing it backs off per node.
                    let backoff_key = format!("{}/{node_name}", key_of(ds));
                    if let Some(delay) = self.failed_pod_backoff(&backoff_key) {
                        self.queue.add_after(key_of(ds), delay);
                        continue;
                    }
                    self.recorder.event_for(
                        ds,
                        EVENT_TYPE_WARNING,
                        FAILED_DAEMON_POD_REASON,
                        &format!(
                            "Found failed daemon pod {}/{} on node {node_name}, will try to kill it",
                            pod.metadata.namespace.as_deref().unwrap_or_default(),
                            name_of(&pod.metadata)
                        ),
                    );
                    to_delete.push(name_of(&pod.metadata).to_string());
                }
                "Succeeded" => to_delete.push(name_of(&pod.metadata).to_string()),
                _ => running.push(pod.clone()),
            }
        }
        if running.len() <= 1 {
            return (false, to_delete);
        }
        running.sort_by(|a, b| by_creation_timestamp_and_phase(a, b));
        if !allows_surge(ds) {
            // One pod per node: all but the oldest go.
            to_delete.extend(running[1..].iter().map(|p| name_of(&p.metadata).to_string()));
            return (false, to_delete);
        }
        // With surge, two pods may share a node while the newer one becomes available: keep the
        // oldest of the current revision and, while it is not yet available and the oldest old
        // one is ready, that one too.
        let (mut oldest_new, mut oldest_old): (Option<&Arc<Pod>>, Option<&Arc<Pod>>) = (None, None);
        for pod in &running {
            let current =
                labels_of(&pod.metadata).get(CONTROLLER_REVISION_HASH_LABEL).map(String::as_str) == Some(hash);
            let slot = if current { &mut oldest_new } else { &mut oldest_old };
            if slot.is_none() {
                *slot = Some(pod);
            } else {
                to_delete.push(name_of(&pod.metadata).to_string());
            }
        }
        if let (Some(new_pod), Some(old_pod)) = (oldest_new, oldest_old) {
            let min_ready = ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0);
            if !is_pod_ready(old_pod) || is_pod_available(new_pod, min_ready, (self.clock)()) {
                to_delete.push(name_of(&old_pod.metadata).to_string());
            }
        }
        (false, to_delete)
    }

    /// `manage`: creates the pods missing on nodes and deletes those that must go.
    async fn manage(&self, ds: &DaemonSet, nodes: &[Arc<Node>], hash: &str) -> Result<(), ApiError> {
        let node_to_pods = self.nodes_to_daemon_pods(ds, false).await?;
        let mut nodes_needing = Vec::new();
        let mut to_delete = Vec::new();
        for node in nodes {
            let (needs, delete) = self.pods_should_be_on_node(node, &node_to_pods, ds, hash);
            if needs {
                nodes_needing.push(name_of(&node.metadata).to_string());
            }
            to_delete.extend(delete);
        }
        // `getUnscheduledPodsWithoutNode`: a pod for a node that is gone is never scheduled, and
        // pod GC only removes bound pods.
        let existing: std::collections::HashSet<&str> = nodes.iter().map(|n| name_of(&n.metadata)).collect();
        for (node, pods) in &node_to_pods {
            if existing.contains(node.as_str()) {
                continue;
            }
            to_delete.extend(
                pods.iter()
                    .filter(|p| {
                        p.metadata.deletion_timestamp.is_none()
                            && p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty)
                    })
                    .map(|p| name_of(&p.metadata).to_string()),
            );
        }
        self.sync_nodes(ds, to_delete, nodes_needing, hash).await
    }

    async fn create_pod(
        &self,
        ds: &DaemonSet,
        template: &k8s_openapi::api::core::v1::PodTemplateSpec,
        node: &str,
    ) -> Result<(), ApiError> {
        let ns = ds.metadata.namespace.as_deref().unwrap_or_default();
        let mut pod = pod_from_template(template, ns, name_of(&ds.metadata), new_controller_ref(ds));
        if let Some(spec) = pod.spec.as_mut() {
            spec.affinity = Some(replace_daemon_set_pod_node_name_node_affinity(spec.affinity.take(), node));
        }
        tracing::debug!(daemonset = %format!("{ns}/{}", name_of(&ds.metadata)), node, "node needs a daemon pod; creating it");
        match self.api.create_typed(&pod).await {
            Ok(created) => {
                self.recorder.event_for(
                    ds,
                    EVENT_TYPE_NORMAL,
                    reasons::SUCCESSFUL_CREATE,
                    &format!("Created pod: {}", name_of(&created.metadata)),
                );
                Ok(())
            }
            // Every create fails in a terminating namespace; nothing to report.
            Err(e) if has_status_cause(&e, NAMESPACE_TERMINATING_CAUSE) => Ok(()),
            Err(e) => {
                self.recorder.event_for(
                    ds,
                    EVENT_TYPE_WARNING,
                    reasons::FAILED_CREATE,
                    &format!("Error creating: {}", e.message),
                );
                Err(e)
            }
        }
    }

    async fn delete_pod(&self, ds: &DaemonSet, name: &str) -> Result<(), ApiError> {
        let ns = ds.metadata.namespace.as_deref();
        tracing::debug!(daemonset = %format!("{}/{}", ns.unwrap_or_default(), name_of(&ds.metadata)), pod = name, "daemon pod not wanted on its node; deleting it");
        match self.api.delete_typed::<Pod>(ns, name, &DeleteOptions::default()).await {
            Ok(()) => {
                self.recorder.event_for(
                    ds,
                    EVENT_TYPE_NORMAL,
                    reasons::SUCCESSFUL_DELETE,
                    &format!("Deleted pod: {name}"),
                );
                Ok(())
            }
            Err(e) if is_not_found(&e) => Err(e),
            Err(e) => {
                self.recorder.event_for(
                    ds,
                    EVENT_TYPE_WARNING,
                    reasons::FAILED_DELETE,
                    &format!("Error deleting: {}", e.message),
                );
                Err(e)
            }
        }
    }

    /// `syncNodes`: deletes `to_delete` (pod names) and creates a pod for each node of
    /// `nodes_needing`, at most [`BURST_REPLICAS`] of each, creations in slow-start batches,
    /// all under expectations.
    async fn sync_nodes(
        &self,
        ds: &DaemonSet,
        mut to_delete: Vec<String>,
        mut nodes_needing: Vec<String>,
        hash: &str,
    ) -> Result<(), ApiError> {
        let key = key_of(ds);
        nodes_needing.truncate(self.burst_replicas);
        to_delete.sort();
        to_delete.dedup();
        to_delete.truncate(self.burst_replicas);
        let ns = ds.metadata.namespace.as_deref().unwrap_or_default();
        let delete_keys: Vec<String> = to_delete.iter().map(|n| format!("{ns}/{n}")).collect();
        self.expectations.expect(&key, nodes_needing.len(), delete_keys.clone());

        let template = create_pod_template(&template_of(ds), template_generation(ds), hash);
        let next = AtomicUsize::new(0);
        let (successes, create_err) = slow_start_batch(nodes_needing.len(), SLOW_START_INITIAL_BATCH_SIZE, || {
            let node = &nodes_needing[next.fetch_add(1, Ordering::Relaxed)];
            self.create_pod(ds, &template, node)
        })
        .await;
        // Creations that failed or were never tried will never be observed.
        for _ in successes..nodes_needing.len() {
            self.expectations.creation_observed(&key);
        }

        let results = futures::future::join_all(to_delete.iter().map(|n| self.delete_pod(ds, n))).await;
        let mut first_error = create_err;
        for (pod_key, r) in delete_keys.iter().zip(results) {
            if let Err(e) = r {
                self.expectations.deletion_observed(&key, pod_key);
                if !is_not_found(&e) {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `updateDaemonSetStatus`: counts the nodes that should run the pod, have it, have it ready,
    /// available and of the current revision, and those that have it but should not.
    async fn update_daemon_set_status(
        &self,
        ds: &DaemonSet,
        nodes: &[Arc<Node>],
        hash: &str,
        update_observed_generation: bool,
    ) -> Result<Action, ApiError> {
        let node_to_pods = self.nodes_to_daemon_pods(ds, false).await?;
        let now = (self.clock)();
        let min_ready = ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0);
        let generation = template_generation(ds);
        let mut status = ds.status.clone().unwrap_or_default();
        let (mut desired, mut current, mut misscheduled, mut ready, mut updated, mut available) = (0, 0, 0, 0, 0, 0);
        for node in nodes {
            let (should_run, _) = node_should_run_daemon_pod(node, ds);
            let pods = node_to_pods.get(name_of(&node.metadata)).filter(|p| !p.is_empty());
            if !should_run {
                if pods.is_some() {
                    misscheduled += 1;
                }
                continue;
            }
            desired += 1;
            let Some(pods) = pods else { continue };
            current += 1;
            let pod = pods.iter().min_by(|a, b| by_creation_timestamp_and_phase(a, b)).expect("pods is not empty");
            if is_pod_ready(pod) {
                ready += 1;
                if is_pod_available(pod, min_ready, now) {
                    available += 1;
                }
            }
            if is_pod_updated(pod, hash, generation) {
                updated += 1;
            }
        }
        let new_status = DaemonSetStatus {
            desired_number_scheduled: desired,
            current_number_scheduled: current,
            number_misscheduled: misscheduled,
            number_ready: ready,
            updated_number_scheduled: Some(updated),
            number_available: Some(available),
            number_unavailable: Some(desired - available),
            observed_generation: if update_observed_generation {
                ds.metadata.generation
            } else {
                status.observed_generation
            },
            collision_count: status.collision_count,
            conditions: status.conditions.clone(),
        };
        let n = |v: Option<i32>| v.unwrap_or(0);
        let unchanged = status.desired_number_scheduled == new_status.desired_number_scheduled
            && status.current_number_scheduled == new_status.current_number_scheduled
            && status.number_misscheduled == new_status.number_misscheduled
            && status.number_ready == new_status.number_ready
            && n(status.updated_number_scheduled) == updated
            && n(status.number_available) == available
            && n(status.number_unavailable) == desired - available
            && status.observed_generation.unwrap_or(0) >= ds.metadata.generation.unwrap_or(0);
        if !unchanged {
            status = new_status;
            let mut to_update = ds.clone();
            to_update.status = Some(status.clone());
            if let Err(first) = self.api.update_status_typed(&to_update).await {
                // `StatusUpdateRetries`: one more try on a fresh copy.
                tracing::debug!(daemonset = %key_of(ds), error = %first, "status update failed, retrying");
                let mut fresh: DaemonSet =
                    self.api.get_typed(ds.metadata.namespace.as_deref(), name_of(&ds.metadata)).await?;
                let collision_count = fresh.status.as_ref().and_then(|s| s.collision_count);
                status.collision_count = collision_count;
                if update_observed_generation {
                    status.observed_generation = fresh.metadata.generation;
                }
                fresh.status = Some(status);
                self.api.update_status_typed(&fresh).await?;
            }
        }
        if min_ready > 0 && ready != available {
            // Last line of defence against clock skew: look again after minReadySeconds.
            return Ok(Action::RequeueAfter(Duration::from_secs(min_ready as u64)));
        }
        Ok(Action::AwaitChange)
    }

    /// `updateDaemonSet`: manage, then the update strategy, then history cleanup.
    async fn update_daemon_set(
        &self,
        ds: &DaemonSet,
        nodes: &[Arc<Node>],
        hash: &str,
        key: &str,
        old: Vec<ControllerRevision>,
    ) -> Result<(), ApiError> {
        self.manage(ds, nodes, hash).await?;
        if self.expectations.satisfied(key) {
            let strategy = ds.spec.as_ref().and_then(|s| s.update_strategy.as_ref()).and_then(|s| s.type_.as_deref());
            if strategy.unwrap_or("RollingUpdate") == "RollingUpdate" {
                self.rolling_update(ds, hash).await?;
            }
        }
        self.cleanup_history(ds, old).await
    }

    /// `syncDaemonSet` for one key.
    pub async fn sync_daemon_set(&self, key: &str) -> ReconcileResult {
        let Some(ds) = self.daemonsets.store().get(key) else {
            self.expectations.delete_expectations(key);
            return Ok(Action::AwaitChange);
        };
        let Some(spec) = ds.spec.as_ref() else { return Ok(Action::AwaitChange) };
        if selects_everything(&spec.selector) {
            self.recorder.event_for(
                ds.as_ref(),
                EVENT_TYPE_WARNING,
                reasons::SELECTING_ALL,
                "This daemon set is selecting all pods. A non-empty selector is required.",
            );
            return Ok(Action::AwaitChange);
        }
        if let Err(e) = selector_of(&spec.selector) {
            tracing::warn!(daemonset = key, error = %e, "invalid selector");
            return Ok(Action::AwaitChange);
        }
        // Pods and history of a DaemonSet being deleted may already be gone or orphaned: its
        // status could not be computed reliably.
        if ds.metadata.deletion_timestamp.is_some() {
            return Ok(Action::AwaitChange);
        }
        let nodes = self.nodes.store().list();
        let (cur, old) = self.construct_history(&ds).await?;
        let hash = cur
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(CONTROLLER_REVISION_HASH_LABEL))
            .cloned()
            .unwrap_or_default();
        if !self.expectations.satisfied(key) {
            // Status only; the generation was not processed.
            return Ok(self.update_daemon_set_status(&ds, &nodes, &hash, false).await?);
        }
        let result = self.update_daemon_set(&ds, &nodes, &hash, key, old).await;
        let status = self.update_daemon_set_status(&ds, &nodes, &hash, true).await;
        match (result, status) {
            (Err(e), Err(status_err)) => {
                tracing::warn!(daemonset = key, error = %status_err, "status update failed");
                Err(ReconcileError::Api(e))
            }
            (Err(e), _) | (_, Err(e)) => Err(ReconcileError::Api(e)),
            (Ok(()), Ok(action)) => Ok(action),
        }
    }
}

#[async_trait]
impl Reconciler for DaemonSetsController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_daemon_set(key).await
    }
}
