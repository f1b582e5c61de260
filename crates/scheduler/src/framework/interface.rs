//! The extension points (`framework/interface.go`): one trait per point, plus the [`Handle`]
//! plugins receive at construction (API access, listers, nominator, waiting pods, parallelizer).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ObjectReference, PodCondition, ReplicationController, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use parking_lot::Mutex;

use super::cycle_state::CycleState;
use super::node_info::{NodeInfo, Snapshot};
use super::parallelize::Parallelizer;
use super::runtime::Framework;
use super::status::{Code, Status};
use super::types::{ClusterEvent, PodInfo, QueuedPodInfo};

/// The highest score a Score plugin may return after normalization.
pub const MAX_NODE_SCORE: i64 = 100;
/// The lowest score.
pub const MIN_NODE_SCORE: i64 = 0;

/// Every plugin: a name and the cluster events that may make pods it rejected schedulable.
///
/// A plugin implements one or more extension-point traits and returns itself from the matching
/// `as_*` method, e.g. `fn as_filter(&self) -> Option<&dyn FilterPlugin> { Some(self) }` (or
/// [`extension_points!`](crate::extension_points)`(filter)`); the framework only calls points a
/// plugin opts into.
pub trait Plugin: Send + Sync + 'static {
    /// The plugin name used in configuration and in statuses.
    fn name(&self) -> &str;

    /// Events after which a pod this plugin rejected may fit (`EnqueueExtensions.EventsToRegister`).
    /// An empty list means "any event".
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        Vec::new()
    }

    /// This plugin as a PreEnqueue plugin.
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    /// This plugin as a QueueSort plugin.
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    /// This plugin as a PreFilter plugin.
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    /// This plugin as a Filter plugin.
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    /// This plugin as a PostFilter plugin.
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    /// This plugin as a PreScore plugin.
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    /// This plugin as a Score plugin.
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    /// This plugin as a Reserve plugin.
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    /// This plugin as a Permit plugin.
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    /// This plugin as a PreBind plugin.
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    /// This plugin as a Bind plugin.
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    /// This plugin as a PostBind plugin.
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
}

/// Implements [`Plugin`]'s `as_*` methods for the listed extension points, each returning
/// `Some(self)`; used inside `impl Plugin for P { ... }`, e.g.
/// `skiff_scheduler::extension_points!(pre_filter, filter, score);`.
///
/// Points (each needs the matching trait implemented): `pre_enqueue`, `queue_sort`,
/// `pre_filter`, `filter`, `post_filter`, `pre_score`, `score`, `reserve`, `permit`, `pre_bind`,
/// `bind`, `post_bind`.
#[macro_export]
macro_rules! extension_points {
    (@as $method:ident $point:ident) => {
        fn $method(&self) -> ::std::option::Option<&dyn $crate::framework::$point> {
            ::std::option::Option::Some(self)
        }
    };
    (@point pre_enqueue) => { $crate::extension_points!(@as as_pre_enqueue PreEnqueuePlugin); };
    (@point queue_sort) => { $crate::extension_points!(@as as_queue_sort QueueSortPlugin); };
    (@point pre_filter) => { $crate::extension_points!(@as as_pre_filter PreFilterPlugin); };
    (@point filter) => { $crate::extension_points!(@as as_filter FilterPlugin); };
    (@point post_filter) => { $crate::extension_points!(@as as_post_filter PostFilterPlugin); };
    (@point pre_score) => { $crate::extension_points!(@as as_pre_score PreScorePlugin); };
    (@point score) => { $crate::extension_points!(@as as_score ScorePlugin); };
    (@point reserve) => { $crate::extension_points!(@as as_reserve ReservePlugin); };
    (@point permit) => { $crate::extension_points!(@as as_permit PermitPlugin); };
    (@point pre_bind) => { $crate::extension_points!(@as as_pre_bind PreBindPlugin); };
    (@point bind) => { $crate::extension_points!(@as as_bind BindPlugin); };
    (@point post_bind) => { $crate::extension_points!(@as as_post_bind PostBindPlugin); };
    ($($point:ident),+ $(,)?) => { $( $crate::extension_points!(@point $point); )+ };
}

/// Implements [`PreFilterPlugin`]'s `PreFilterExtensions` (`has_extensions`, `add_pod`,
/// `remove_pod`) for a plugin whose PreFilter state of type `$state`, stored in the
/// [`CycleState`] under `$key`, has a method
/// `update_with_pod(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64)`:
/// `delta` is 1 when `other` is simulated onto `node` and -1 when simulated away. Without state
/// (PreFilter skipped) nothing is updated. Used inside `impl PreFilterPlugin for P { ... }`.
#[macro_export]
macro_rules! pre_filter_extensions {
    (@update $method:ident, $other:ident, $delta:literal, $state:ty, $key:expr) => {
        fn $method(
            &self,
            state: &mut $crate::framework::CycleState,
            pod: &$crate::framework::PodInfo,
            $other: &::std::sync::Arc<$crate::framework::PodInfo>,
            node: &$crate::framework::NodeInfo,
        ) -> $crate::framework::Status {
            if let ::std::option::Option::Some(s) = state.read_mut::<$state>($key) {
                s.update_with_pod(pod, $other, node, $delta);
            }
            $crate::framework::Status::success()
        }
    };
    ($state:ty, $key:expr) => {
        fn has_extensions(&self) -> bool {
            true
        }
        $crate::pre_filter_extensions!(@update add_pod, pod_to_add, 1, $state, $key);
        $crate::pre_filter_extensions!(@update remove_pod, pod_to_remove, -1, $state, $key);
    };
}

/// Decides whether a pod may enter activeQ at all (e.g. scheduling gates). A non-success status
/// parks the pod in the unschedulable pool until an update of the pod.
pub trait PreEnqueuePlugin: Plugin {
    /// Checks the pod before queueing.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// Orders activeQ. Exactly one per scheduler (all profiles share it).
pub trait QueueSortPlugin: Plugin {
    /// Whether `a` should be scheduled before `b`.
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}

/// Node names a PreFilter plugin restricts the search to (`framework.PreFilterResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    /// `None` means every node.
    pub node_names: Option<HashSet<String>>,
}

impl PreFilterResult {
    /// Intersects two results.
    pub fn merge(self, other: PreFilterResult) -> PreFilterResult {
        match (self.node_names, other.node_names) {
            (None, n) | (n, None) => PreFilterResult { node_names: n },
            (Some(a), Some(b)) => PreFilterResult { node_names: Some(a.intersection(&b).cloned().collect()) },
        }
    }
}

/// Runs once per attempt before filtering; may store state, narrow the node set, or reject the
/// pod outright. Returning [`Code::Skip`] disables the plugin's Filter for this attempt.
///
/// The `add_pod`/`remove_pod` extensions update the plugin's state when preemption or nominated
/// pods simulate adding/removing a pod on a node (`PreFilterExtensions`).
pub trait PreFilterPlugin: Plugin {
    /// Pre-computes per-attempt state.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status);

    /// Whether `add_pod`/`remove_pod` do anything (saves a state clone otherwise).
    fn has_extensions(&self) -> bool {
        false
    }

    /// `pod_to_add` is simulated on `node`.
    fn add_pod(&self, _state: &mut CycleState, _pod: &PodInfo, _pod_to_add: &Arc<PodInfo>, _node: &NodeInfo) -> Status {
        Status::success()
    }

    /// `pod_to_remove` is simulated away from `node`.
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _pod_to_remove: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }
}

/// Decides whether the pod can run on one node. Called concurrently for many nodes.
pub trait FilterPlugin: Plugin {
    /// Checks one node.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

/// What a PostFilter plugin achieved (`framework.PostFilterResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostFilterResult {
    /// The node the pod is nominated to (after preemption), if any.
    pub nominated_node_name: Option<String>,
}

/// Node → the status that rejected it, plus a status for nodes never evaluated
/// (`framework.NodeToStatus`).
#[derive(Clone, Debug)]
pub struct NodeToStatus {
    map: HashMap<String, Status>,
    absent: Status,
}

impl Default for NodeToStatus {
    fn default() -> Self {
        Self { map: HashMap::new(), absent: Status::with_reasons(Code::UnschedulableAndUnresolvable, Vec::new()) }
    }
}

impl NodeToStatus {
    /// Records a node's status.
    pub fn set(&mut self, node: &str, status: Status) {
        self.map.insert(node.to_string(), status);
    }

    /// The status of a node (the absent status when not recorded).
    pub fn get(&self, node: &str) -> &Status {
        self.map.get(node).unwrap_or(&self.absent)
    }

    /// Sets the status reported for nodes that were not evaluated.
    pub fn set_absent_nodes_status(&mut self, s: Status) {
        self.absent = s;
    }

    /// The status of nodes not evaluated.
    pub fn absent_nodes_status(&self) -> &Status {
        &self.absent
    }

    /// Number of explicitly recorded nodes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Recorded nodes and statuses.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Status)> {
        self.map.iter()
    }
}

/// Runs when no node passed Filter, to make room (preemption). A success with a nominated node
/// makes the pod wait for that node; the pod still goes back to the queue.
pub trait PostFilterPlugin: Plugin {
    /// Tries to make the pod schedulable.
    fn post_filter(
        &self,
        fwk: &Framework,
        state: &CycleState,
        pod: &Arc<PodInfo>,
        snapshot: &Snapshot,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status);
}

/// Runs once before scoring with the feasible nodes. [`Code::Skip`] disables the plugin's Score.
pub trait PreScorePlugin: Plugin {
    /// Pre-computes scoring state.
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>], snapshot: &Snapshot) -> Status;
}

/// Ranks feasible nodes; scores are normalized to [0, 100] and multiplied by the plugin weight.
pub trait ScorePlugin: Plugin {
    /// Scores one node (called concurrently).
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Rescales all scores (aligned with the nodes) into [0, 100] (`ScoreExtensions`).
    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [i64]) -> Status {
        Status::success()
    }
}

/// Claims resources for the pod on the chosen node before binding; `unreserve` undoes it when a
/// later step fails. Unreserve runs in reverse order and must be idempotent.
pub trait ReservePlugin: Plugin {
    /// Reserves.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    /// Undoes `reserve`.
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// Approves, denies or delays (Wait with a timeout) binding.
pub trait PermitPlugin: Plugin {
    /// Decides; a Wait status comes with the maximum wait.
    fn permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}

/// Work before binding (e.g. volume provisioning); runs in the binding cycle.
#[async_trait]
pub trait PreBindPlugin: Plugin {
    /// Prepares binding.
    async fn pre_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// Binds the pod to the node; [`Code::Skip`] hands the pod to the next binder.
#[async_trait]
pub trait BindPlugin: Plugin {
    /// Binds.
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status;
}

/// Informational, after a successful bind.
pub trait PostBindPlugin: Plugin {
    /// Called after binding.
    fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str);
}

/// A change to a pod's status written by the scheduler.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodStatusUpdate {
    /// The PodScheduled condition to set.
    pub condition: Option<PodCondition>,
    /// `Some(Some(n))` sets `status.nominatedNodeName`, `Some(None)` clears it.
    pub nominated_node_name: Option<Option<String>>,
}

/// A core/v1 Event the scheduler reports.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerEvent {
    /// The object the event is about.
    pub regarding: ObjectReference,
    /// `Normal` or `Warning`.
    pub event_type: &'static str,
    /// E.g. `Scheduled`, `FailedScheduling`, `Preempted`.
    pub reason: &'static str,
    /// E.g. `Binding`, `Scheduling`, `Preempting`.
    pub action: &'static str,
    /// Human-readable message.
    pub message: String,
}

impl SchedulerEvent {
    /// An event about a pod.
    pub fn for_pod(
        pod: &PodInfo,
        event_type: &'static str,
        reason: &'static str,
        action: &'static str,
        message: String,
    ) -> Self {
        Self {
            regarding: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(pod.namespace.clone()),
                name: Some(pod.name.clone()),
                uid: pod.pod.metadata.uid.clone(),
                resource_version: pod.pod.metadata.resource_version.clone(),
                ..Default::default()
            },
            event_type,
            reason,
            action,
            message,
        }
    }
}

/// The API writes the scheduler makes. Implemented over `kube::Client`
/// ([`crate::api::KubeApi`]), by a recorder for tests and a no-op for benchmarks.
#[async_trait]
pub trait ClusterApi: Send + Sync + 'static {
    /// `POST pods/{name}/binding`.
    ///
    /// # Errors
    /// Whatever the API answered (e.g. the pod is already bound, or gone).
    async fn bind(&self, pod: &PodInfo, node: &str) -> anyhow::Result<()>;
    /// Deletes a pod (a preemption victim).
    ///
    /// # Errors
    /// The API error.
    async fn delete_pod(&self, pod: &PodInfo) -> anyhow::Result<()>;
    /// Updates the pod's status (PodScheduled condition, nominated node).
    ///
    /// # Errors
    /// The API error.
    async fn update_pod_status(&self, pod: &PodInfo, update: PodStatusUpdate) -> anyhow::Result<()>;
    /// Records an Event.
    ///
    /// # Errors
    /// The API error.
    async fn record_event(&self, event: SchedulerEvent) -> anyhow::Result<()>;
}

/// Read access to cluster objects other than nodes and pods (informer caches).
/// Every method defaults to "nothing known".
pub trait ClusterListers: Send + Sync + 'static {
    /// Labels of a namespace.
    fn namespace_labels(&self, _namespace: &str) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    /// All namespaces with their labels.
    fn namespaces(&self) -> Vec<(String, BTreeMap<String, String>)> {
        Vec::new()
    }
    /// Services of a namespace.
    fn services(&self, _namespace: &str) -> Vec<Arc<Service>> {
        Vec::new()
    }
    /// ReplicationControllers of a namespace.
    fn replication_controllers(&self, _namespace: &str) -> Vec<Arc<ReplicationController>> {
        Vec::new()
    }
    /// ReplicaSets of a namespace.
    fn replica_sets(&self, _namespace: &str) -> Vec<Arc<ReplicaSet>> {
        Vec::new()
    }
    /// StatefulSets of a namespace.
    fn stateful_sets(&self, _namespace: &str) -> Vec<Arc<StatefulSet>> {
        Vec::new()
    }
    /// All PodDisruptionBudgets (preemption avoids violating them).
    fn pod_disruption_budgets(&self) -> Vec<Arc<PodDisruptionBudget>> {
        Vec::new()
    }
}

/// Listers that know nothing.
pub struct EmptyListers;
impl ClusterListers for EmptyListers {}

/// Pods nominated to nodes by preemption, waiting for the victims to go (`PodNominator`).
/// Filtering accounts for nominated pods of equal or higher priority so no one else takes the
/// room they were promised.
#[derive(Default)]
pub struct Nominator {
    inner: Mutex<NominatorInner>,
    count: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct NominatorInner {
    by_node: HashMap<String, Vec<Arc<PodInfo>>>,
    node_of: HashMap<String, String>,
}

impl Nominator {
    /// Nominates `pod` to `node` (replacing an earlier nomination).
    pub fn add(&self, pod: Arc<PodInfo>, node: &str) {
        let mut g = self.inner.lock();
        Self::remove_locked(&mut g, &pod.uid);
        if node.is_empty() {
            self.count.store(g.node_of.len(), std::sync::atomic::Ordering::Relaxed);
            return;
        }
        g.node_of.insert(pod.uid.clone(), node.to_string());
        g.by_node.entry(node.to_string()).or_default().push(pod);
        self.count.store(g.node_of.len(), std::sync::atomic::Ordering::Relaxed);
    }

    fn remove_locked(g: &mut NominatorInner, uid: &str) {
        if let Some(node) = g.node_of.remove(uid)
            && let Some(v) = g.by_node.get_mut(&node)
        {
            v.retain(|p| p.uid != uid);
            if v.is_empty() {
                g.by_node.remove(&node);
            }
        }
    }

    /// Removes a nomination.
    pub fn remove(&self, uid: &str) {
        let mut g = self.inner.lock();
        Self::remove_locked(&mut g, uid);
        self.count.store(g.node_of.len(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Pods nominated to `node`.
    pub fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        let g = self.inner.lock();
        if g.by_node.is_empty() {
            return Vec::new();
        }
        g.by_node.get(node).cloned().unwrap_or_default()
    }

    /// The node a pod is nominated to.
    pub fn nominated_node(&self, uid: &str) -> Option<String> {
        self.inner.lock().node_of.get(uid).cloned()
    }

    /// Whether any pod is nominated anywhere (fast path).
    pub fn is_empty(&self) -> bool {
        self.count.load(std::sync::atomic::Ordering::Relaxed) == 0
    }
}

/// A pod held by a Permit plugin ([`Code::Wait`]) (`framework.WaitingPod`).
pub struct WaitingPod {
    /// The pod.
    pub pod: Arc<PodInfo>,
    pending: Mutex<HashSet<String>>,
    tx: Mutex<Option<tokio::sync::oneshot::Sender<Status>>>,
}

impl WaitingPod {
    /// Allows the pod on behalf of `plugin`; once every waiting plugin allowed, binding proceeds.
    pub fn allow(&self, plugin: &str) {
        let mut p = self.pending.lock();
        p.remove(plugin);
        if p.is_empty()
            && let Some(tx) = self.tx.lock().take()
        {
            let _ = tx.send(Status::success());
        }
    }

    /// Rejects the pod: binding is abandoned and the pod requeued.
    pub fn reject(&self, plugin: &str, msg: &str) {
        if let Some(tx) = self.tx.lock().take() {
            let _ = tx.send(Status::unschedulable(msg.to_string()).with_plugin(plugin));
        }
    }
}

/// Pods currently held at Permit, by UID.
#[derive(Default)]
pub struct WaitingPods {
    map: Mutex<HashMap<String, Arc<WaitingPod>>>,
}

impl WaitingPods {
    /// Registers a waiting pod and returns the receiver its verdict arrives on.
    pub fn add(&self, pod: Arc<PodInfo>, plugins: HashSet<String>) -> tokio::sync::oneshot::Receiver<Status> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let wp = Arc::new(WaitingPod { pod: pod.clone(), pending: Mutex::new(plugins), tx: Mutex::new(Some(tx)) });
        self.map.lock().insert(pod.uid.clone(), wp);
        rx
    }

    /// The waiting pod with this UID.
    pub fn get(&self, uid: &str) -> Option<Arc<WaitingPod>> {
        self.map.lock().get(uid).cloned()
    }

    /// Forgets a waiting pod.
    pub fn remove(&self, uid: &str) {
        self.map.lock().remove(uid);
    }

    /// Every waiting pod.
    pub fn all(&self) -> Vec<Arc<WaitingPod>> {
        self.map.lock().values().cloned().collect()
    }
}

/// What plugins get at construction (`framework.Handle`).
#[derive(Clone)]
pub struct Handle {
    /// API writes.
    pub api: Arc<dyn ClusterApi>,
    /// Informer caches of other kinds.
    pub listers: Arc<dyn ClusterListers>,
    /// Nominated pods.
    pub nominator: Arc<Nominator>,
    /// Pods held at Permit.
    pub waiting_pods: Arc<WaitingPods>,
    /// Runs work across nodes in parallel.
    pub parallelizer: Parallelizer,
    /// Where asynchronous API calls run (a thread is used when absent).
    pub runtime: Option<tokio::runtime::Handle>,
    /// The scheduler's Prometheus metrics (unregistered, so unseen, unless the caller registered
    /// them).
    pub metrics: super::metrics::SchedulerMetrics,
    /// The configured HTTP extenders, in order (`Handle.Extenders`), for the scheduling cycle,
    /// DefaultPreemption and binding.
    pub extenders: Arc<Vec<Arc<crate::extender::HttpExtender>>>,
}

impl Handle {
    /// A handle with the given API and nothing else known; parallelism 1.
    pub fn new(api: Arc<dyn ClusterApi>) -> Self {
        Self {
            api,
            listers: Arc::new(EmptyListers),
            nominator: Arc::new(Nominator::default()),
            waiting_pods: Arc::new(WaitingPods::default()),
            parallelizer: Parallelizer::new(1),
            runtime: tokio::runtime::Handle::try_current().ok(),
            metrics: Default::default(),
            extenders: Arc::default(),
        }
    }

    /// Runs `fut` in the background (API calls that the scheduling cycle must not wait for).
    pub fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        match &self.runtime {
            Some(rt) => {
                rt.spawn(fut);
            }
            None => {
                std::thread::spawn(move || futures::executor::block_on(fut));
            }
        }
    }
}
