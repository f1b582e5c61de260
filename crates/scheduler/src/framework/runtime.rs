//! The framework runtime (`framework/runtime/framework.go`): one [`Framework`] per profile holds
//! the enabled plugins of every extension point in order, with score weights, and runs them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::cycle_state::CycleState;
use super::interface::{
    Handle, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeToStatus, Plugin, PostFilterResult, PreFilterResult,
};
use super::metrics::{ExtensionPoint, ProfileMetrics};
use super::node_info::{NodeInfo, Snapshot};
use super::status::{Code, Status};
use super::types::{ClusterEvent, PodInfo, QueuedPodInfo};

/// Weighted scores per Score plugin, aligned with the scored nodes.
pub type PluginScores = Vec<(String, Vec<i64>)>;

/// Plugins of each extension point, in run order (score plugins with their weight).
#[derive(Clone, Default)]
pub struct PluginSets {
    /// PreEnqueue plugins.
    pub pre_enqueue: Vec<Arc<dyn Plugin>>,
    /// The QueueSort plugin (priority sort when none).
    pub queue_sort: Option<Arc<dyn Plugin>>,
    /// PreFilter plugins.
    pub pre_filter: Vec<Arc<dyn Plugin>>,
    /// Filter plugins.
    pub filter: Vec<Arc<dyn Plugin>>,
    /// PostFilter plugins.
    pub post_filter: Vec<Arc<dyn Plugin>>,
    /// PreScore plugins.
    pub pre_score: Vec<Arc<dyn Plugin>>,
    /// Score plugins and weights.
    pub score: Vec<(Arc<dyn Plugin>, i64)>,
    /// Reserve plugins.
    pub reserve: Vec<Arc<dyn Plugin>>,
    /// Permit plugins.
    pub permit: Vec<Arc<dyn Plugin>>,
    /// PreBind plugins.
    pub pre_bind: Vec<Arc<dyn Plugin>>,
    /// Bind plugins.
    pub bind: Vec<Arc<dyn Plugin>>,
    /// PostBind plugins.
    pub post_bind: Vec<Arc<dyn Plugin>>,
}

/// One scheduling profile: its name (`schedulerName`), plugins and settings.
pub struct Framework {
    profile_name: String,
    handle: Handle,
    plugins: PluginSets,
    events: HashMap<String, Vec<ClusterEvent>>,
    /// The profile's `percentageOfNodesToScore` (overrides the global one).
    pub percentage_of_nodes_to_score: Option<i32>,
    metrics: ProfileMetrics,
}

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framework").field("profile_name", &self.profile_name).finish()
    }
}

fn names(v: &[Arc<dyn Plugin>]) -> Vec<String> {
    v.iter().map(|p| p.name().to_string()).collect()
}

impl Framework {
    /// Builds a framework, checking that every plugin implements the points it is listed at.
    ///
    /// # Errors
    /// `plugin "X" does not extend Filter` and the like; no Bind plugin.
    pub fn new(profile_name: &str, handle: Handle, plugins: PluginSets) -> Result<Self, String> {
        let check = |point: &str, v: &[Arc<dyn Plugin>], ok: &dyn Fn(&dyn Plugin) -> bool| -> Result<(), String> {
            for p in v {
                if !ok(p.as_ref()) {
                    return Err(format!("plugin {:?} does not extend {point} plugin", p.name()));
                }
            }
            Ok(())
        };
        check("PreEnqueue", &plugins.pre_enqueue, &|p| p.as_pre_enqueue().is_some())?;
        check("QueueSort", plugins.queue_sort.as_slice(), &|p| p.as_queue_sort().is_some())?;
        check("PreFilter", &plugins.pre_filter, &|p| p.as_pre_filter().is_some())?;
        check("Filter", &plugins.filter, &|p| p.as_filter().is_some())?;
        check("PostFilter", &plugins.post_filter, &|p| p.as_post_filter().is_some())?;
        check("PreScore", &plugins.pre_score, &|p| p.as_pre_score().is_some())?;
        let score: Vec<_> = plugins.score.iter().map(|(p, _)| p.clone()).collect();
        check("Score", &score, &|p| p.as_score().is_some())?;
        check("Reserve", &plugins.reserve, &|p| p.as_reserve().is_some())?;
        check("Permit", &plugins.permit, &|p| p.as_permit().is_some())?;
        check("PreBind", &plugins.pre_bind, &|p| p.as_pre_bind().is_some())?;
        check("Bind", &plugins.bind, &|p| p.as_bind().is_some())?;
        check("PostBind", &plugins.post_bind, &|p| p.as_post_bind().is_some())?;
        if plugins.bind.is_empty() {
            return Err(format!("profile {profile_name:?}: at least one bind plugin is needed"));
        }
        let mut events = HashMap::new();
        let all = plugins
            .pre_enqueue
            .iter()
            .chain(&plugins.pre_filter)
            .chain(&plugins.filter)
            .chain(&plugins.reserve)
            .chain(&plugins.permit)
            .chain(&plugins.pre_bind);
        for p in all {
            events.insert(p.name().to_string(), p.events_to_register());
        }
        let metrics = handle.metrics.for_profile(profile_name);
        Ok(Self {
            profile_name: profile_name.to_string(),
            handle,
            plugins,
            events,
            percentage_of_nodes_to_score: None,
            metrics,
        })
    }

    /// The profile name (`schedulerName`).
    pub fn profile_name(&self) -> &str {
        &self.profile_name
    }

    /// The handle shared with plugins.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// This profile's metric handles (`scheduler_framework_extension_point_duration_seconds`).
    pub fn metrics(&self) -> &ProfileMetrics {
        &self.metrics
    }

    /// Records how long `point` took since `start` and how it ended.
    pub fn observe_extension_point(&self, point: ExtensionPoint, code: Code, start: std::time::Instant) {
        self.metrics.observe_extension_point(point, code, start.elapsed().as_secs_f64());
    }

    /// Enabled plugin names per extension point, for logs and tests.
    pub fn list_plugins(&self) -> Vec<(&'static str, Vec<String>)> {
        let p = &self.plugins;
        vec![
            ("PreEnqueue", names(&p.pre_enqueue)),
            ("QueueSort", names(p.queue_sort.as_slice())),
            ("PreFilter", names(&p.pre_filter)),
            ("Filter", names(&p.filter)),
            ("PostFilter", names(&p.post_filter)),
            ("PreScore", names(&p.pre_score)),
            ("Score", p.score.iter().map(|(x, w)| format!("{}:{w}", x.name())).collect()),
            ("Reserve", names(&p.reserve)),
            ("Permit", names(&p.permit)),
            ("PreBind", names(&p.pre_bind)),
            ("Bind", names(&p.bind)),
            ("PostBind", names(&p.post_bind)),
        ]
    }

    /// Whether a pod rejected by `plugins` may become schedulable after `event`
    /// (`isPodWorthRequeuing`). Unknown plugins and plugins registering nothing say yes.
    pub fn is_worth_requeuing(&self, plugins: &HashSet<String>, event: &ClusterEvent) -> bool {
        if plugins.is_empty() || event.resource == super::types::EventResource::WildCard {
            return true;
        }
        plugins.iter().any(|name| match self.events.get(name) {
            None => true,
            Some(evs) if evs.is_empty() => true,
            Some(evs) => evs.iter().any(|e| e.matches(event)),
        })
    }

    /// PreEnqueue: the first non-success status, with its plugin.
    pub fn run_pre_enqueue_plugins(&self, pod: &PodInfo) -> Status {
        for p in &self.plugins.pre_enqueue {
            let Some(pe) = p.as_pre_enqueue() else { continue };
            let s = pe.pre_enqueue(pod);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// QueueSort: whether `a` goes before `b` (higher priority, then earlier timestamp, when no
    /// QueueSort plugin is configured).
    pub fn queue_sort_less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        if let Some(qs) = self.plugins.queue_sort.as_ref().and_then(|p| p.as_queue_sort()) {
            return qs.less(a, b);
        }
        let (pa, pb) = (a.pod_info.priority, b.pod_info.priority);
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }

    /// PreFilter: runs every plugin, intersecting node-name results. Returns the result, the
    /// status, and the plugins that rejected the pod (on success: the plugins that narrowed the
    /// node set).
    pub fn run_pre_filter_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status, HashSet<String>) {
        let mut result: Option<PreFilterResult> = None;
        let mut narrowing = Vec::new();
        for p in &self.plugins.pre_filter {
            let Some(pf) = p.as_pre_filter() else { continue };
            let (r, s) = pf.pre_filter(state, pod, snapshot);
            if s.is_skip() {
                state.skip_filter_plugins.insert(p.name().to_string());
                if let Some(i) = self.plugins.filter.iter().position(|f| f.name() == p.name()).filter(|i| *i < 64) {
                    state.skip_filter_mask |= 1 << i;
                }
                continue;
            }
            if !s.is_success() {
                let s = if s.is_rejected() {
                    s.with_plugin(p.name())
                } else {
                    Status::error(format!("running PreFilter plugin {:?}: {}", p.name(), s.message()))
                        .with_plugin(p.name())
                };
                return (None, s, HashSet::from([p.name().to_string()]));
            }
            if let Some(r) = r {
                if r.node_names.is_some() {
                    narrowing.push(p.name().to_string());
                }
                result = Some(match result {
                    None => r,
                    Some(prev) => prev.merge(r),
                });
                if result.as_ref().and_then(|r| r.node_names.as_ref()).is_some_and(|n| n.is_empty()) {
                    let msg = format!("node(s) didn't satisfy plugin(s) [{}] simultaneously", narrowing.join(" "));
                    return (None, Status::unresolvable(msg), narrowing.into_iter().collect());
                }
            }
        }
        (result, Status::success(), narrowing.into_iter().collect())
    }

    /// Calls the PreFilter `add_pod` extensions (a pod is simulated on `node`).
    pub fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_add: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        for p in &self.plugins.pre_filter {
            let Some(pf) = p.as_pre_filter() else { continue };
            if !pf.has_extensions() || state.skip_filter_plugins.contains(p.name()) {
                continue;
            }
            let s = pf.add_pod(state, pod, pod_to_add, node);
            if !s.is_success() {
                return Status::error(format!("running AddPod on PreFilter plugin {:?}: {}", p.name(), s.message()));
            }
        }
        Status::success()
    }

    /// Calls the PreFilter `remove_pod` extensions (a pod is simulated away from `node`).
    pub fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        pod_to_remove: &Arc<PodInfo>,
        node: &NodeInfo,
    ) -> Status {
        for p in &self.plugins.pre_filter {
            let Some(pf) = p.as_pre_filter() else { continue };
            if !pf.has_extensions() || state.skip_filter_plugins.contains(p.name()) {
                continue;
            }
            let s = pf.remove_pod(state, pod, pod_to_remove, node);
            if !s.is_success() {
                return Status::error(format!("running RemovePod on PreFilter plugin {:?}: {}", p.name(), s.message()));
            }
        }
        Status::success()
    }

    /// Filter: the first plugin that does not succeed decides.
    pub fn run_filter_plugins(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for (i, p) in self.plugins.filter.iter().enumerate() {
            if state.skip_filter_mask & (1u64 << (i & 63)) != 0
                || (i >= 64 && !state.skip_filter_plugins.is_empty() && state.skip_filter_plugins.contains(p.name()))
            {
                continue;
            }
            let Some(f) = p.as_filter() else { continue };
            let s = f.filter(state, pod, node);
            if !s.is_success() {
                if !s.is_rejected() {
                    return Status::error(format!("running {:?} filter plugin: {}", p.name(), s.message()))
                        .with_plugin(p.name());
                }
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Filter with nominated pods (`RunFilterPluginsWithNominatedPods`): when pods of equal or
    /// higher priority are nominated to the node, the pod must fit both with them (so it does not
    /// take their room) and without them (so affinity to them is not assumed).
    pub fn run_filter_plugins_with_nominated_pods(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let nominated: Vec<Arc<PodInfo>> = if self.handle.nominator.is_empty() {
            Vec::new()
        } else {
            self.handle
                .nominator
                .nominated_pods_for_node(node.name())
                .into_iter()
                .filter(|p| p.uid != pod.uid && p.priority >= pod.priority)
                .collect()
        };
        if nominated.is_empty() {
            return self.run_filter_plugins(state, pod, node);
        }
        let mut node_copy = node.clone();
        let mut state_copy = state.clone();
        for np in &nominated {
            node_copy.add_pod(np.clone());
            let s = self.run_pre_filter_extension_add_pod(&mut state_copy, pod, np, &node_copy);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter_plugins(&state_copy, pod, &node_copy);
        if !s.is_success() {
            return s;
        }
        self.run_filter_plugins(state, pod, node)
    }

    /// PostFilter: the first plugin that succeeds (or errs, or says unresolvable) decides;
    /// otherwise the rejection reasons are combined.
    pub fn run_post_filter_plugins(
        &self,
        state: &CycleState,
        pod: &Arc<PodInfo>,
        snapshot: &Snapshot,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let mut result = None;
        let mut reasons = Vec::new();
        let mut rejector = String::new();
        for p in &self.plugins.post_filter {
            let Some(pf) = p.as_post_filter() else { continue };
            let (r, s) = pf.post_filter(self, state, pod, snapshot, statuses);
            if s.is_success() {
                return (r, s);
            }
            if s.code() == Code::UnschedulableAndUnresolvable {
                return (r, s.with_plugin(p.name()));
            }
            if !s.is_rejected() {
                return (None, s.with_plugin(p.name()));
            }
            if r.as_ref().is_some_and(|r| r.nominated_node_name.is_some()) {
                result = r;
            }
            reasons.extend(s.reasons().iter().cloned());
            if rejector.is_empty() {
                rejector = p.name().to_string();
            }
        }
        if self.plugins.post_filter.is_empty() {
            return (None, Status::with_reasons(Code::Unschedulable, Vec::new()));
        }
        (result, Status::with_reasons(Code::Unschedulable, reasons).with_plugin(&rejector))
    }

    /// Whether any PostFilter plugin is enabled.
    pub fn has_post_filter_plugins(&self) -> bool {
        !self.plugins.post_filter.is_empty()
    }

    /// Whether any Filter plugin is enabled.
    pub fn has_filter_plugins(&self) -> bool {
        !self.plugins.filter.is_empty()
    }

    /// Whether any Score plugin is enabled.
    pub fn has_score_plugins(&self) -> bool {
        !self.plugins.score.is_empty()
    }

    /// PreScore: a Skip disables that plugin's Score; anything else but success is an error.
    pub fn run_pre_score_plugins(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        for p in &self.plugins.pre_score {
            let Some(ps) = p.as_pre_score() else { continue };
            let s = ps.pre_score(state, pod, nodes, snapshot);
            if s.is_skip() {
                state.skip_score_plugins.insert(p.name().to_string());
                continue;
            }
            if !s.is_success() {
                return Status::error(format!("running PreScore plugin {:?}: {}", p.name(), s.message()))
                    .with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Score: every active plugin scores every node (nodes in parallel), then each plugin
    /// normalizes, then scores are weighted and summed per node. Returns the totals (aligned with
    /// `nodes`) and the per-plugin weighted scores.
    ///
    /// # Errors
    /// A plugin error, or a normalized score outside [0, 100].
    pub fn run_score_plugins(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<(Vec<i64>, PluginScores), Status> {
        let active: Vec<(&Arc<dyn Plugin>, i64)> = self
            .plugins
            .score
            .iter()
            .filter(|(p, _)| !state.skip_score_plugins.contains(p.name()))
            .map(|(p, w)| (p, *w))
            .collect();
        let mut totals = vec![0i64; nodes.len()];
        if active.is_empty() {
            return Ok((totals, Vec::new()));
        }
        // Scores of node i by every active plugin, in `out` (one slot per plugin).
        let score_node = |i: usize, out: &mut [i64]| -> Result<(), Status> {
            for ((p, _), slot) in active.iter().zip(out.iter_mut()) {
                *slot = match p.as_score() {
                    None => 0,
                    Some(sp) => sp
                        .score(state, pod, &nodes[i])
                        .map_err(|s| Status::error(format!("running Score plugin {:?}: {}", p.name(), s.message())))?,
                };
            }
            Ok(())
        };
        let mut matrix: Vec<Vec<i64>> = vec![Vec::with_capacity(nodes.len()); active.len()];
        // Up to INLINE plugins (the default profile has 7) the per-node scores live on the stack.
        const INLINE: usize = 8;
        if active.len() <= INLINE {
            let per_node = self.handle.parallelizer.map(nodes.len(), |i| {
                let mut v = [0i64; INLINE];
                score_node(i, &mut v[..active.len()]).map(|()| v)
            });
            for r in per_node {
                let v = r?;
                for (j, s) in v[..active.len()].iter().enumerate() {
                    matrix[j].push(*s);
                }
            }
        } else {
            let per_node = self.handle.parallelizer.map(nodes.len(), |i| {
                let mut v = vec![0i64; active.len()];
                score_node(i, &mut v).map(|()| v)
            });
            for r in per_node {
                for (j, s) in r?.into_iter().enumerate() {
                    matrix[j].push(s);
                }
            }
        }
        let mut breakdown = Vec::with_capacity(active.len());
        for ((p, w), scores) in active.iter().zip(matrix.iter_mut()) {
            if let Some(sp) = p.as_score() {
                let s = sp.normalize_score(state, pod, scores);
                if !s.is_success() {
                    return Err(Status::error(format!(
                        "running Normalize on Score plugin {:?}: {}",
                        p.name(),
                        s.message()
                    )));
                }
            }
            for (i, s) in scores.iter_mut().enumerate() {
                if *s < MIN_NODE_SCORE || *s > MAX_NODE_SCORE {
                    return Err(Status::error(format!(
                        "plugin {:?} returns an invalid score {}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                        p.name(),
                        *s
                    )));
                }
                *s *= w;
                totals[i] += *s;
            }
            breakdown.push((p.name().to_string(), scores.clone()));
        }
        Ok((totals, breakdown))
    }

    /// Reserve: stops at the first failure.
    pub fn run_reserve_plugins_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.plugins.reserve {
            let Some(r) = p.as_reserve() else { continue };
            let s = r.reserve(state, pod, node);
            if !s.is_success() {
                if s.is_rejected() {
                    return s.with_plugin(p.name());
                }
                return Status::error(format!("running Reserve plugin {:?}: {}", p.name(), s.message()))
                    .with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Unreserve: every Reserve plugin, in reverse order.
    pub fn run_reserve_plugins_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in self.plugins.reserve.iter().rev() {
            if let Some(r) = p.as_reserve() {
                r.unreserve(state, pod, node);
            }
        }
    }

    /// Permit: a rejection stops; Waits are collected and the pod is registered as waiting with
    /// the shortest timeout, returned alongside a Wait status.
    pub fn run_permit_plugins(&self, state: &mut CycleState, pod: &Arc<PodInfo>, node: &str) -> (Status, Duration) {
        let mut waiting = HashSet::new();
        let mut timeout = Duration::from_secs(15 * 60);
        for p in &self.plugins.permit {
            let Some(pp) = p.as_permit() else { continue };
            let (s, t) = pp.permit(state, pod, node);
            if s.is_wait() {
                waiting.insert(p.name().to_string());
                timeout = timeout.min(t);
                continue;
            }
            if !s.is_success() {
                if s.is_rejected() {
                    return (s.with_plugin(p.name()), Duration::ZERO);
                }
                return (
                    Status::error(format!("running Permit plugin {:?}: {}", p.name(), s.message()))
                        .with_plugin(p.name()),
                    Duration::ZERO,
                );
            }
        }
        if waiting.is_empty() {
            return (Status::success(), Duration::ZERO);
        }
        (Status::wait(), timeout)
    }

    /// Waits for a pod held at Permit: allowed, rejected, or timed out (then Unschedulable).
    pub async fn wait_on_permit(&self, pod: &Arc<PodInfo>, plugins: HashSet<String>, timeout: Duration) -> Status {
        let rx = self.handle.waiting_pods.add(pod.clone(), plugins);
        let s = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => Status::error("waiting pod dropped"),
            Err(_) => Status::unschedulable(format!("pod {:?} rejected while waiting on permit: timeout", pod.name)),
        };
        self.handle.waiting_pods.remove(&pod.uid);
        s
    }

    /// Names of the Permit plugins (for registering a waiting pod).
    pub fn permit_plugin_names(&self) -> Vec<String> {
        names(&self.plugins.permit)
    }

    /// PreBind: stops at the first failure.
    pub async fn run_pre_bind_plugins(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.plugins.pre_bind {
            let Some(pb) = p.as_pre_bind() else { continue };
            let s = pb.pre_bind(state, pod, node).await;
            if !s.is_success() {
                if s.is_rejected() {
                    return s.with_plugin(p.name());
                }
                return Status::error(format!("running PreBind plugin {:?}: {}", p.name(), s.message()))
                    .with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Bind: the first binder that does not Skip decides.
    pub async fn run_bind_plugins(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.plugins.bind {
            let Some(b) = p.as_bind() else { continue };
            let s = b.bind(state, pod, node).await;
            if s.is_skip() {
                continue;
            }
            if !s.is_success() {
                if s.is_rejected() {
                    return s.with_plugin(p.name());
                }
                return Status::error(format!("running Bind plugin {:?}: {}", p.name(), s.message()))
                    .with_plugin(p.name());
            }
            return s;
        }
        Status::skip()
    }

    /// PostBind: informational.
    pub fn run_post_bind_plugins(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        for p in &self.plugins.post_bind {
            if let Some(pb) = p.as_post_bind() {
                pb.post_bind(state, pod, node);
            }
        }
    }
}
