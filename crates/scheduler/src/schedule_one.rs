//! One scheduling attempt (`schedule_one.go`): the synchronous **scheduling cycle** (snapshot →
//! PreFilter → Filter in parallel over a rotating window of nodes → PostFilter on failure →
//! PreScore/Score/Normalize/weights → select host → assume → Reserve → Permit) followed by the
//! asynchronous **binding cycle** (WaitOnPermit → PreBind → Bind → PostBind), which runs as a
//! task so the next pod's scheduling cycle never waits on the network.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::cache::Cache;
use crate::framework::metrics::{AttemptResult, ExtensionPoint};
use crate::framework::{
    ClusterEvent, Code, CycleState, Diagnosis, FitError, Framework, Handle, NodeInfo, PodInfo, PodStatusUpdate,
    PostFilterResult, QueuedPodInfo, SchedulerEvent, Snapshot, Status,
};
use crate::queue::SchedulingQueue;

/// Below this many nodes all nodes are evaluated (`minFeasibleNodesToFind`).
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never goes below this (`minFeasibleNodesPercentageToFind`).
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;
/// Message when the cluster has no nodes (`ErrNoNodesAvailable`).
pub const ERR_NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";
/// Longest event message (`truncateMessage`).
const MAX_MESSAGE: usize = 1024;

/// How many feasible nodes to look for before scoring (`numFeasibleNodesToFind`): all nodes
/// below 100; otherwise `percentage` of them (adaptive `50 − nodes/125`, at least 5%), at least
/// 100.
pub fn num_feasible_nodes_to_find(percentage: i32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let mut pct = i64::from(percentage);
    if pct <= 0 {
        pct = 50 - num_all_nodes as i64 / 125;
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND {
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND;
        }
    }
    let n = (num_all_nodes as i64 * pct / 100) as usize;
    n.max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// The outcome of a scheduling cycle for one pod.
#[derive(Debug)]
pub enum Outcome {
    /// The pod is assumed on `node`; `binding` finishes when the binding cycle does (Ok when bound).
    Scheduled {
        /// The chosen node.
        node: String,
        /// Nodes evaluated by Filter.
        evaluated_nodes: usize,
        /// Nodes that passed Filter.
        feasible_nodes: usize,
        /// The binding cycle.
        binding: tokio::task::JoinHandle<Result<(), String>>,
    },
    /// No node fits; the message is what the FailedScheduling event says.
    Unschedulable {
        /// The aggregated message.
        message: String,
        /// The node the pod was nominated to by preemption.
        nominated_node: Option<String>,
    },
    /// An internal error; the pod is retried after backoff.
    Error(String),
    /// The pod was not attempted (deleted, already assumed, or no profile).
    Skipped,
}

/// The parts of the scheduler that both cycles use.
#[derive(Clone)]
pub struct Shared {
    /// The cache.
    pub cache: Arc<Cache>,
    /// The queue.
    pub queue: Arc<SchedulingQueue>,
    /// API, listers, nominator, parallelizer, runtime.
    pub handle: Handle,
}

fn truncate(msg: String) -> String {
    if msg.len() <= MAX_MESSAGE {
        return msg;
    }
    let mut end = MAX_MESSAGE - 3;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &msg[..end])
}

impl Shared {
    /// Requeues a pod after a failed attempt and reports it (`handleSchedulingFailure`): the
    /// queue gets it back (unschedulable pool or backoffQ), the nomination is recorded, and the
    /// FailedScheduling event and PodScheduled=False condition are written asynchronously.
    pub fn handle_failure(
        &self,
        mut q: QueuedPodInfo,
        code: Code,
        message: String,
        plugins: HashSet<String>,
        nominating: Option<PostFilterResult>,
        cycle: u64,
    ) {
        let pod = q.pod_info.clone();
        let rejected = matches!(code, Code::Unschedulable | Code::UnschedulableAndUnresolvable);
        q.unschedulable_plugins = if rejected { plugins } else { HashSet::new() };
        self.queue.add_unschedulable_if_not_present(q, cycle);
        let mut nominated_update = None;
        if let Some(r) = nominating {
            match r.nominated_node_name {
                Some(n) => {
                    self.handle.nominator.add(pod.clone(), &n);
                    if pod.nominated_node_name() != n {
                        nominated_update = Some(Some(n));
                    }
                }
                None => {
                    self.handle.nominator.remove(&pod.uid);
                    if !pod.nominated_node_name().is_empty() {
                        nominated_update = Some(None);
                    }
                }
            }
        }
        let reason = if rejected { "Unschedulable" } else { "SchedulerError" };
        let message = truncate(message);
        if rejected {
            tracing::debug!(pod = %pod.key, err = %message, "Unable to schedule pod; no fit; waiting");
        } else {
            tracing::debug!(pod = %pod.key, err = %message, "Error scheduling pod; retrying");
        }
        let current = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
        let unchanged = current.is_some_and(|c| {
            c.status == "False" && c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message.as_str())
        });
        let condition = (!unchanged).then(|| PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some(reason.into()),
            message: Some(message.clone()),
            last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        });
        let api = self.handle.api.clone();
        let event = SchedulerEvent::for_pod(&pod, "Warning", "FailedScheduling", "Scheduling", message);
        self.handle.spawn(async move {
            if let Err(e) = api.record_event(event).await {
                tracing::debug!(error = %format!("{e:#}"), "recording FailedScheduling event failed");
            }
            if condition.is_some() || nominated_update.is_some() {
                let update = PodStatusUpdate { condition, nominated_node_name: nominated_update };
                if let Err(e) = api.update_pod_status(&pod, update).await {
                    tracing::debug!(pod = %pod.key, error = %format!("{e:#}"), "updating pod status failed");
                }
            }
        });
    }
}

struct Failure {
    code: Code,
    message: String,
    plugins: HashSet<String>,
    nominating: Option<PostFilterResult>,
}

impl Failure {
    fn error(message: String) -> Self {
        Self { code: Code::Error, message, plugins: HashSet::new(), nominating: None }
    }
}

struct Chosen {
    host: String,
    evaluated: usize,
    feasible: usize,
}

/// The scheduler: profiles, cache, queue, and the per-cycle snapshot.
pub struct Scheduler {
    shared: Shared,
    profiles: HashMap<String, Arc<Framework>>,
    snapshot: Snapshot,
    next_start_node_index: usize,
    percentage_of_nodes_to_score: i32,
    rng: SmallRng,
    runtime: tokio::runtime::Handle,
}

impl Scheduler {
    /// A scheduler over `shared` for `profiles`; binding cycles run on `runtime`.
    pub fn new(
        shared: Shared,
        profiles: Vec<Arc<Framework>>,
        percentage_of_nodes_to_score: i32,
        seed: Option<u64>,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        Self {
            shared,
            profiles: profiles.iter().map(|f| (f.profile_name().to_string(), f.clone())).collect(),
            snapshot: Snapshot::default(),
            next_start_node_index: 0,
            percentage_of_nodes_to_score,
            rng: match seed {
                Some(s) => SmallRng::seed_from_u64(s),
                None => SmallRng::from_rng(&mut rand::rng()),
            },
            runtime,
        }
    }

    /// The shared parts.
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Pops pods and schedules them until the queue closes.
    pub fn run(&mut self) {
        while let Some(q) = self.shared.queue.pop() {
            self.schedule_one(q);
        }
    }

    /// Schedules one popped pod (`scheduleOne`).
    pub fn schedule_one(&mut self, q: QueuedPodInfo) -> Outcome {
        let pod = q.pod_info.clone();
        let Some(fwk) = self.profiles.get(pod.scheduler_name()).cloned() else {
            tracing::error!(pod = %pod.key, scheduler = pod.scheduler_name(), "no profile for pod");
            self.shared.queue.done(&pod.key);
            return Outcome::Skipped;
        };
        if pod.terminating || self.shared.cache.pod_node(&pod.uid).is_some() {
            self.shared.queue.done(&pod.key);
            return Outcome::Skipped;
        }
        let cycle = self.shared.queue.scheduling_cycle();
        let start = Instant::now();
        let mut state = CycleState::new();
        let chosen = match self.scheduling_cycle(&fwk, &mut state, &pod) {
            Ok(c) => c,
            Err(f) => {
                let secs = start.elapsed().as_secs_f64();
                self.shared.handle.metrics.observe_attempt(fwk.profile_name(), AttemptResult::of_failure(f.code), secs);
                let outcome = match f.code {
                    Code::Error => Outcome::Error(f.message.clone()),
                    _ => Outcome::Unschedulable {
                        message: f.message.clone(),
                        nominated_node: f.nominating.as_ref().and_then(|r| r.nominated_node_name.clone()),
                    },
                };
                self.shared.handle_failure(q, f.code, f.message, f.plugins, f.nominating, cycle);
                return outcome;
            }
        };
        let host = chosen.host.clone();
        // Assume: the next cycle sees the pod on the node right away.
        if let Err(e) = self.shared.cache.assume_pod(pod.clone(), &host) {
            let secs = start.elapsed().as_secs_f64();
            self.shared.handle.metrics.observe_attempt(fwk.profile_name(), AttemptResult::Error, secs);
            self.shared.handle_failure(q, Code::Error, e.to_string(), HashSet::new(), None, cycle);
            return Outcome::Error(e.to_string());
        }
        // The pod now occupies its node for real; it no longer needs a nomination.
        self.shared.handle.nominator.remove(&pod.uid);
        let t = Instant::now();
        let s = fwk.run_reserve_plugins_reserve(&mut state, &pod, &host);
        fwk.observe_extension_point(ExtensionPoint::Reserve, s.code(), t);
        if !s.is_success() {
            return self.fail_after_assume(&fwk, &mut state, q, s, &host, cycle, start);
        }
        let t = Instant::now();
        let (s, timeout) = fwk.run_permit_plugins(&mut state, &pod, &host);
        fwk.observe_extension_point(ExtensionPoint::Permit, s.code(), t);
        if !s.is_success() && !s.is_wait() {
            return self.fail_after_assume(&fwk, &mut state, q, s, &host, cycle, start);
        }
        let wait = s.is_wait().then(|| (fwk.permit_plugin_names().into_iter().collect::<HashSet<_>>(), timeout));
        self.shared.queue.done(&pod.key);
        let shared = self.shared.clone();
        let binding = self.runtime.spawn(binding_cycle(shared, fwk, state, q, host.clone(), wait, cycle, start));
        Outcome::Scheduled { node: host, evaluated_nodes: chosen.evaluated, feasible_nodes: chosen.feasible, binding }
    }

    #[allow(clippy::too_many_arguments)]
    fn fail_after_assume(
        &mut self,
        fwk: &Framework,
        state: &mut CycleState,
        q: QueuedPodInfo,
        s: Status,
        host: &str,
        cycle: u64,
        start: Instant,
    ) -> Outcome {
        let pod = q.pod_info.clone();
        let t = Instant::now();
        fwk.run_reserve_plugins_unreserve(state, &pod, host);
        fwk.observe_extension_point(ExtensionPoint::Unreserve, Code::Success, t);
        let secs = start.elapsed().as_secs_f64();
        self.shared.handle.metrics.observe_attempt(fwk.profile_name(), AttemptResult::of_failure(s.code()), secs);
        if let Err(e) = self.shared.cache.forget_pod(&pod.uid) {
            tracing::error!(pod = %pod.key, error = %e, "forgetting assumed pod");
        }
        let plugins = if s.plugin().is_empty() { HashSet::new() } else { HashSet::from([s.plugin().to_string()]) };
        let msg = s.message();
        let outcome = if s.is_rejected() {
            Outcome::Unschedulable { message: msg.clone(), nominated_node: None }
        } else {
            Outcome::Error(msg.clone())
        };
        self.shared.handle_failure(q, s.code(), msg, plugins, None, cycle);
        outcome
    }

    fn scheduling_cycle(
        &mut self,
        fwk: &Arc<Framework>,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
    ) -> Result<Chosen, Failure> {
        self.shared.cache.update_snapshot(&mut self.snapshot);
        let num_all = self.snapshot.num_nodes();
        if num_all == 0 {
            return Err(Failure {
                code: Code::UnschedulableAndUnresolvable,
                message: ERR_NO_NODES_AVAILABLE.into(),
                plugins: HashSet::new(),
                nominating: None,
            });
        }
        let (feasible, diagnosis) = self.find_nodes_that_fit_pod(fwk, state, pod)?;
        let evaluated = feasible.len() + diagnosis.node_to_status.len();
        if feasible.is_empty() {
            let mut fit = FitError { num_all_nodes: num_all, diagnosis };
            let mut nominating = None;
            if fwk.has_post_filter_plugins() {
                let t = Instant::now();
                let (r, s) = fwk.run_post_filter_plugins(state, pod, &self.snapshot, &fit.diagnosis.node_to_status);
                fwk.observe_extension_point(ExtensionPoint::PostFilter, s.code(), t);
                if s.code() == Code::Error {
                    tracing::warn!(pod = %pod.key, status = %s, "PostFilter failed");
                }
                fit.diagnosis.post_filter_msg = s.message();
                nominating = r;
            }
            return Err(Failure {
                code: Code::Unschedulable,
                message: fit.message(),
                plugins: fit.diagnosis.unschedulable_plugins,
                nominating,
            });
        }
        if feasible.len() == 1 {
            return Ok(Chosen { host: feasible[0].name().to_string(), evaluated, feasible: 1 });
        }
        let totals = if fwk.has_score_plugins() {
            let t = Instant::now();
            let s = fwk.run_pre_score_plugins(state, pod, &feasible, &self.snapshot);
            fwk.observe_extension_point(ExtensionPoint::PreScore, s.code(), t);
            if !s.is_success() {
                return Err(Failure::error(s.message()));
            }
            let t = Instant::now();
            let scored = fwk.run_score_plugins(state, pod, &feasible);
            let code = scored.as_ref().map_or(Code::Error, |_| Code::Success);
            fwk.observe_extension_point(ExtensionPoint::Score, code, t);
            scored.map_err(|s| Failure::error(s.message()))?.0
        } else if self.shared.handle.extenders.is_empty() {
            vec![1; feasible.len()]
        } else {
            vec![0; feasible.len()]
        };
        let mut totals = totals;
        self.add_extender_scores(pod, &feasible, &mut totals);
        let host = self.select_host(&feasible, &totals);
        Ok(Chosen { host, evaluated, feasible: feasible.len() })
    }

    /// The highest total score; ties broken uniformly at random (`selectHost`).
    fn select_host(&mut self, nodes: &[Arc<NodeInfo>], totals: &[i64]) -> String {
        let mut best = 0;
        let mut ties = 1u32;
        for i in 1..totals.len() {
            if totals[i] > totals[best] {
                best = i;
                ties = 1;
            } else if totals[i] == totals[best] {
                ties += 1;
                if self.rng.random_range(0..ties) == 0 {
                    best = i;
                }
            }
        }
        nodes[best].name().to_string()
    }

    fn find_nodes_that_fit_pod(
        &mut self,
        fwk: &Arc<Framework>,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
    ) -> Result<(Vec<Arc<NodeInfo>>, Diagnosis), Failure> {
        let mut diagnosis = Diagnosis::default();
        let t = Instant::now();
        let (pre_res, s, plugins) = fwk.run_pre_filter_plugins(state, pod, &self.snapshot);
        fwk.observe_extension_point(ExtensionPoint::PreFilter, s.code(), t);
        if !s.is_success() {
            if !s.is_rejected() {
                return Err(Failure::error(s.message()));
            }
            diagnosis.pre_filter_msg = s.message();
            diagnosis.node_to_status.set_absent_nodes_status(s);
            diagnosis.unschedulable_plugins = plugins;
            return Ok((Vec::new(), diagnosis));
        }
        // A pod nominated by an earlier preemption tries its nominated node first.
        let nnn = pod.nominated_node_name();
        if !nnn.is_empty()
            && let Some(n) = self.snapshot.get(nnn).cloned()
            && fwk.run_filter_plugins_with_nominated_pods(state, pod, &n).is_success()
        {
            let passed = self.find_nodes_that_pass_extenders(pod, vec![n], &mut diagnosis)?;
            if !passed.is_empty() {
                return Ok((passed, diagnosis));
            }
        }
        let narrowed: Option<Vec<Arc<NodeInfo>>> = match pre_res.and_then(|r| r.node_names) {
            Some(names) => {
                let mut sorted: Vec<&String> = plugins.iter().collect();
                sorted.sort();
                let list = sorted.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ");
                diagnosis.node_to_status.set_absent_nodes_status(Status::unresolvable(format!(
                    "node(s) didn't satisfy plugin(s) [{list}]"
                )));
                diagnosis.unschedulable_plugins.extend(plugins);
                Some(self.snapshot.nodes().iter().filter(|n| names.contains(n.name())).cloned().collect())
            }
            None => None,
        };
        let nodes = narrowed.as_deref().unwrap_or(self.snapshot.nodes());
        let pct = fwk.percentage_of_nodes_to_score.unwrap_or(self.percentage_of_nodes_to_score);
        let t = Instant::now();
        let filtered =
            find_nodes_that_pass_filters(fwk, state, pod, &mut diagnosis, nodes, self.next_start_node_index, pct);
        let code = match &filtered {
            Err(_) => Code::Error,
            Ok((f, _)) if f.is_empty() => Code::Unschedulable,
            Ok(_) => Code::Success,
        };
        fwk.observe_extension_point(ExtensionPoint::Filter, code, t);
        let (feasible, processed) = filtered?;
        if !nodes.is_empty() {
            self.next_start_node_index = (self.next_start_node_index + processed) % nodes.len();
        }
        let before = feasible.len();
        let feasible = self.find_nodes_that_pass_extenders(pod, feasible, &mut diagnosis)?;
        if feasible.len() != before {
            diagnosis.unschedulable_plugins.insert(EXTENDER_NAME.to_string());
        }
        Ok((feasible, diagnosis))
    }

    /// The extenders' filter calls on the nodes the plugins kept (`findNodesThatPassExtenders`):
    /// each interested extender narrows the list in turn; the nodes it rejects get its reasons in
    /// the diagnosis (unresolvable ones as UnschedulableAndUnresolvable, so preemption skips
    /// them). A failing extender fails the attempt unless it is ignorable.
    fn find_nodes_that_pass_extenders(
        &self,
        pod: &Arc<PodInfo>,
        mut feasible: Vec<Arc<NodeInfo>>,
        diagnosis: &mut Diagnosis,
    ) -> Result<Vec<Arc<NodeInfo>>, Failure> {
        let extenders = self.shared.handle.extenders.clone();
        for ext in extenders.iter() {
            if feasible.is_empty() {
                break;
            }
            if !ext.is_filter() || !ext.is_interested(&pod.pod) {
                continue;
            }
            let result = crate::extender::block_on(Some(&self.runtime), ext.filter(&pod.pod, &feasible));
            let result = match result {
                Ok(r) => r,
                Err(e) if ext.is_ignorable() => {
                    tracing::info!(extender = ext.name(), error = %e, pod = %pod.key, "Skipping extender as it returned error and has ignorable flag set");
                    continue;
                }
                Err(e) => return Err(Failure::error(e)),
            };
            for (node, msg) in &result.failed_and_unresolvable {
                let mut reasons: Vec<std::borrow::Cow<'static, str>> =
                    diagnosis.node_to_status.get(node).reasons().to_vec();
                reasons.push(msg.clone().into());
                diagnosis.node_to_status.set(node, Status::with_reasons(Code::UnschedulableAndUnresolvable, reasons));
            }
            for (node, msg) in &result.failed {
                if result.failed_and_unresolvable.contains_key(node) {
                    continue;
                }
                let current = diagnosis.node_to_status.get(node);
                let status = if current.is_success() || current.reasons().is_empty() {
                    Status::unschedulable(msg.clone())
                } else {
                    let mut reasons = current.reasons().to_vec();
                    reasons.push(msg.clone().into());
                    Status::with_reasons(current.code(), reasons)
                };
                diagnosis.node_to_status.set(node, status);
            }
            let kept: HashSet<&str> = result.feasible.iter().map(String::as_str).collect();
            feasible.retain(|n| kept.contains(n.name()));
        }
        Ok(feasible)
    }

    /// Adds the extenders' prioritize scores to `totals` (`prioritizeNodes`): each interested
    /// extender is called concurrently; a score (0-10) counts `weight × 10` times, so an
    /// extender's range matches the plugins' 0-100. A failing prioritize call is ignored.
    fn add_extender_scores(&self, pod: &Arc<PodInfo>, nodes: &[Arc<NodeInfo>], totals: &mut [i64]) {
        let extenders: Vec<_> =
            self.shared.handle.extenders.iter().filter(|e| e.is_interested(&pod.pod)).cloned().collect();
        if extenders.is_empty() {
            return;
        }
        let calls = futures::future::join_all(extenders.iter().map(|e| e.prioritize(&pod.pod, nodes)));
        let results =
            crate::extender::block_on(Some(&self.runtime), async { Ok::<_, String>(calls.await) }).unwrap_or_default();
        let index: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name(), i)).collect();
        let scale = crate::framework::MAX_NODE_SCORE / crate::extender::MAX_EXTENDER_PRIORITY;
        for (ext, r) in extenders.iter().zip(results) {
            match r {
                Ok((list, weight)) => {
                    for hp in list {
                        if let Some(&i) = index.get(hp.host.as_str()) {
                            totals[i] += hp.score * weight * scale;
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(extender = ext.name(), error = %e, pod = %pod.key, "extender prioritize failed; ignored")
                }
            }
        }
    }
}

/// The plugin name the diagnosis records when extenders filtered nodes out
/// (`framework.ExtenderName`).
pub const EXTENDER_NAME: &str = "Extender";

/// Filters `nodes` in parallel, starting at `start` (mod len) and stopping once enough feasible
/// nodes are found. Returns the feasible nodes (in evaluation order) and how many nodes were
/// processed.
fn find_nodes_that_pass_filters(
    fwk: &Arc<Framework>,
    state: &CycleState,
    pod: &Arc<PodInfo>,
    diagnosis: &mut Diagnosis,
    nodes: &[Arc<NodeInfo>],
    start: usize,
    pct: i32,
) -> Result<(Vec<Arc<NodeInfo>>, usize), Failure> {
    {
        let n = nodes.len();
        if n == 0 {
            return Ok((Vec::new(), 0));
        }
        let want = num_feasible_nodes_to_find(pct, n);
        let start = start % n;
        if !fwk.has_filter_plugins() {
            let out: Vec<Arc<NodeInfo>> = (0..want).map(|i| nodes[(start + i) % n].clone()).collect();
            return Ok((out, want));
        }
        let found = AtomicUsize::new(0);
        let feasible: Mutex<Vec<(usize, Arc<NodeInfo>)>> = Mutex::new(Vec::with_capacity(want));
        let failed: Mutex<Vec<(usize, Status)>> = Mutex::new(Vec::new());
        fwk.handle().parallelizer.until_stopped(n, |i| {
            if found.load(Ordering::Relaxed) >= want {
                return false;
            }
            let node = &nodes[(start + i) % n];
            let s = fwk.run_filter_plugins_with_nominated_pods(state, pod, node);
            if s.is_success() {
                if found.fetch_add(1, Ordering::Relaxed) < want {
                    feasible.lock().push((i, node.clone()));
                } else {
                    found.fetch_sub(1, Ordering::Relaxed);
                    return false;
                }
            } else {
                failed.lock().push((i, s));
            }
            true
        });
        let mut feasible = feasible.into_inner();
        let failed = failed.into_inner();
        if let Some((_, s)) = failed.iter().find(|(_, s)| s.code() == Code::Error) {
            return Err(Failure::error(s.message()));
        }
        let processed = feasible.len() + failed.len();
        for (i, s) in failed {
            if !s.plugin().is_empty() {
                diagnosis.unschedulable_plugins.insert(s.plugin().to_string());
            }
            diagnosis.node_to_status.set(nodes[(start + i) % n].name(), s);
        }
        feasible.sort_by_key(|(i, _)| *i);
        Ok((feasible.into_iter().map(|(_, n)| n).collect(), processed))
    }
}

/// Binds through the first interested binder extender (`extendersBinding`); None when no
/// extender binds the pod (the Bind plugins then do). An ignorable extender's failure passes
/// the pod on to the next one.
async fn extenders_binding(shared: &Shared, pod: &PodInfo, host: &str) -> Option<Result<(), String>> {
    for ext in shared.handle.extenders.iter() {
        if !ext.is_binder() || !ext.is_interested(&pod.pod) {
            continue;
        }
        match ext.bind(&pod.namespace, &pod.name, &pod.uid, host).await {
            Err(e) if ext.is_ignorable() => {
                tracing::info!(extender = ext.name(), error = %e, pod = %pod.key, "Skipping extender in bind as it returned error and has ignorable flag set");
            }
            r => return Some(r),
        }
    }
    None
}

/// The binding cycle of one assumed pod (`bindingCycle`): on failure the pod is unreserved,
/// forgotten by the cache (freeing its room, which may help parked pods) and requeued with
/// backoff.
#[allow(clippy::too_many_arguments)]
async fn binding_cycle(
    shared: Shared,
    fwk: Arc<Framework>,
    mut state: CycleState,
    q: QueuedPodInfo,
    host: String,
    wait: Option<(HashSet<String>, Duration)>,
    cycle: u64,
    attempt_start: Instant,
) -> Result<(), String> {
    let pod = q.pod_info.clone();
    let start = Instant::now();
    let mut s = Status::success();
    if let Some((plugins, timeout)) = wait {
        s = fwk.wait_on_permit(&pod, plugins, timeout).await;
    }
    if s.is_success() {
        let t = Instant::now();
        s = fwk.run_pre_bind_plugins(&state, &pod, &host).await;
        fwk.observe_extension_point(ExtensionPoint::PreBind, s.code(), t);
    }
    if s.is_success() {
        let t = Instant::now();
        s = match extenders_binding(&shared, &pod, &host).await {
            Some(Ok(())) => Status::success(),
            Some(Err(e)) => Status::error(e),
            None => fwk.run_bind_plugins(&state, &pod, &host).await,
        };
        if s.is_skip() {
            s = Status::error("no bind plugin handled the pod");
        }
        fwk.observe_extension_point(ExtensionPoint::Bind, s.code(), t);
    }
    let metrics = &shared.handle.metrics;
    if s.is_success() {
        shared.cache.finish_binding(&pod.uid);
        let t = Instant::now();
        fwk.run_post_bind_plugins(&state, &pod, &host);
        fwk.observe_extension_point(ExtensionPoint::PostBind, Code::Success, t);
        metrics.observe_attempt(fwk.profile_name(), AttemptResult::Scheduled, attempt_start.elapsed().as_secs_f64());
        if let Some(first) = q.initial_attempt_timestamp {
            let since = shared.queue.clock().now().saturating_duration_since(first);
            metrics.observe_pod_scheduled(q.attempts, since.as_secs_f64());
        }
        let msg = format!("Successfully assigned {}/{} to {}", pod.namespace, pod.name, host);
        let ev = SchedulerEvent::for_pod(&pod, "Normal", "Scheduled", "Binding", msg);
        if let Err(e) = shared.handle.api.record_event(ev).await {
            tracing::debug!(error = %format!("{e:#}"), "recording Scheduled event failed");
        }
        tracing::debug!(pod = %pod.key, node = %host, elapsed = ?start.elapsed(), "Successfully bound pod to node");
        return Ok(());
    }
    let t = Instant::now();
    fwk.run_reserve_plugins_unreserve(&mut state, &pod, &host);
    fwk.observe_extension_point(ExtensionPoint::Unreserve, Code::Success, t);
    metrics.observe_attempt(
        fwk.profile_name(),
        AttemptResult::of_failure(s.code()),
        attempt_start.elapsed().as_secs_f64(),
    );
    if let Err(e) = shared.cache.forget_pod(&pod.uid) {
        tracing::error!(pod = %pod.key, error = %e, "forgetting assumed pod");
    }
    shared.queue.move_all_to_active_or_backoff(ClusterEvent::ASSIGNED_POD_DELETE);
    let msg =
        if s.message().starts_with("running ") { s.message() } else { format!("Binding rejected: {}", s.message()) };
    let plugins = if s.plugin().is_empty() { HashSet::new() } else { HashSet::from([s.plugin().to_string()]) };
    shared.handle_failure(q, s.code(), msg.clone(), plugins, None, cycle);
    Err(msg)
}
