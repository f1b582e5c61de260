//! DefaultPreemption: when no node fits, find a node where evicting lower-priority pods makes
//! room, evict the fewest / least important victims, and nominate the pod to that node
//! (`defaultpreemption` + `framework/preemption`).
//!
//! Steps: eligibility (`preemptionPolicy`, terminating victims already on the nominated node) →
//! candidate nodes (those rejected with `Unschedulable`, not `UnschedulableAndUnresolvable`) →
//! per node, remove every lower-priority pod, check the pod fits, then reprieve victims from the
//! most important down while it still fits → pick the node (lowest highest-victim priority,
//! lowest priority sum, fewest victims, latest start) → delete victims (asynchronously) and
//! clear weaker nominations on that node.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Deserialize;
use skiff_apimachinery::selector::LabelSelector;

use crate::framework::{
    Code, CycleState, FitError, Framework, NodeInfo, NodeToStatus, Plugin, PodInfo, PodStatusUpdate, PostFilterPlugin,
    PostFilterResult, PreemptionPolicy, SchedulerEvent, Snapshot, Status,
};

use super::names;

/// Status for nodes where evicting pods cannot help.
pub const PREEMPTION_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Status for nodes without lower-priority pods.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// `DefaultPreemptionArgs`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultPreemptionArgs {
    /// Candidate nodes to dry-run, as a percentage of all nodes.
    #[serde(default = "default_pct")]
    pub min_candidate_nodes_percentage: i32,
    /// At least this many candidate nodes.
    #[serde(default = "default_abs")]
    pub min_candidate_nodes_absolute: i32,
}

fn default_pct() -> i32 {
    10
}
fn default_abs() -> i32 {
    100
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        Self { min_candidate_nodes_percentage: 10, min_candidate_nodes_absolute: 100 }
    }
}

/// A node and the pods to evict there.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Node name.
    pub node: String,
    /// Pods to evict.
    pub victims: Vec<Arc<PodInfo>>,
    /// Victims whose eviction violates a PodDisruptionBudget.
    pub num_pdb_violations: usize,
}

/// The DefaultPreemption plugin.
pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
}

/// Splits pods into those whose eviction would violate a PodDisruptionBudget and the others
/// (`filterPodsWithPDBViolation`): each matching PDB's `disruptionsAllowed` is spent pod by pod;
/// pods already listed in `disruptedPods` do not spend it.
pub fn split_by_pdb_violation(
    pods: Vec<Arc<PodInfo>>,
    pdbs: &[Arc<PodDisruptionBudget>],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = pdbs.iter().map(|p| p.status.as_ref().map_or(0, |s| s.disruptions_allowed)).collect();
    let selectors: Vec<Option<LabelSelector>> = pdbs
        .iter()
        .map(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| LabelSelector::from_metav1(s).ok())
                .filter(|s| !s.is_empty())
        })
        .collect();
    let (mut violating, mut ok) = (Vec::new(), Vec::new());
    for pod in pods {
        let mut violated = false;
        if !pod.labels().is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.metadata.namespace.as_deref() != Some(pod.namespace.as_str()) {
                    continue;
                }
                let Some(sel) = &selectors[i] else { continue };
                if !sel.matches(pod.labels()) {
                    continue;
                }
                if pdb
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(&pod.name))
                {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated { violating.push(pod) } else { ok.push(pod) }
    }
    (violating, ok)
}

/// Higher priority first, then the one that started earlier (`util.MoreImportantPod`).
fn more_important(a: &PodInfo, b: &PodInfo) -> std::cmp::Ordering {
    b.priority.cmp(&a.priority).then(a.start_time().cmp(&b.start_time()))
}

impl DefaultPreemption {
    /// Builds from args.
    pub fn new(args: DefaultPreemptionArgs) -> Self {
        Self { args }
    }

    fn eligible(&self, pod: &PodInfo, snapshot: &Snapshot, statuses: &NodeToStatus) -> Result<(), &'static str> {
        if pod.preemption_policy == PreemptionPolicy::Never {
            return Err("not eligible due to preemptionPolicy=Never.");
        }
        let nominated = pod.nominated_node_name();
        if !nominated.is_empty() {
            if statuses.get(nominated).code() == Code::UnschedulableAndUnresolvable {
                return Ok(());
            }
            if let Some(ni) = snapshot.get(nominated)
                && ni.pods().iter().any(|p| p.terminating && p.priority < pod.priority)
            {
                return Err("not eligible due to a terminating pod on the nominated node.");
            }
        }
        Ok(())
    }

    /// Victims on one node and how many of them violate a PodDisruptionBudget, or why there are
    /// none (`SelectVictimsOnNode`). Victims are reprieved most important first, PDB-protected
    /// pods before the others.
    pub fn select_victims_on_node(
        fwk: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        pdbs: &[Arc<PodDisruptionBudget>],
    ) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
        let mut ni = node.clone();
        let mut st = state.clone();
        let mut potential: Vec<Arc<PodInfo>> =
            node.pods().iter().filter(|p| p.priority < pod.priority).cloned().collect();
        if potential.is_empty() {
            return Err(Status::unresolvable(NO_VICTIMS));
        }
        for v in &potential {
            ni.remove_pod(&v.uid);
            let s = fwk.run_pre_filter_extension_remove_pod(&mut st, pod, v, &ni);
            if !s.is_success() {
                return Err(s);
            }
        }
        let s = fwk.run_filter_plugins_with_nominated_pods(&st, pod, &ni);
        if !s.is_success() {
            return Err(s);
        }
        potential.sort_by(|a, b| more_important(a, b));
        let (violating, non_violating) = split_by_pdb_violation(potential, pdbs);
        let mut victims = Vec::new();
        let mut num_violations = 0;
        for (v, is_violating) in
            violating.into_iter().map(|v| (v, true)).chain(non_violating.into_iter().map(|v| (v, false)))
        {
            ni.add_pod(v.clone());
            let s = fwk.run_pre_filter_extension_add_pod(&mut st, pod, &v, &ni);
            if !s.is_success() {
                return Err(s);
            }
            if fwk.run_filter_plugins_with_nominated_pods(&st, pod, &ni).is_success() {
                continue; // reprieved
            }
            ni.remove_pod(&v.uid);
            let s = fwk.run_pre_filter_extension_remove_pod(&mut st, pod, &v, &ni);
            if !s.is_success() {
                return Err(s);
            }
            if is_violating {
                num_violations += 1;
            }
            victims.push(v);
        }
        Ok((victims, num_violations))
    }

    /// Picks the best candidate (`pickOneNodeForPreemption`): fewest PDB violations, then the
    /// lowest highest-victim priority, lowest priority sum, fewest victims, latest start.
    pub fn select_candidate(candidates: &[Candidate]) -> Option<&Candidate> {
        if let Some(c) = candidates.iter().find(|c| c.victims.is_empty()) {
            return Some(c);
        }
        let key = |c: &Candidate| {
            let highest = c.victims.iter().map(|v| v.priority).max().unwrap_or(i32::MIN);
            let sum: i64 = c.victims.iter().map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1).sum();
            let earliest_of_highest =
                c.victims.iter().filter(|v| v.priority == highest).map(|v| v.start_time()).min().unwrap_or(0);
            (c.num_pdb_violations, highest, sum, c.victims.len(), std::cmp::Reverse(earliest_of_highest))
        };
        candidates.iter().min_by_key(|c| key(c))
    }

    fn preempt(
        &self,
        fwk: &Framework,
        state: &CycleState,
        pod: &Arc<PodInfo>,
        snapshot: &Snapshot,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        if let Err(msg) = self.eligible(pod, snapshot, statuses) {
            return (None, Status::unschedulable(msg));
        }
        fwk.handle().metrics.inc_preemption_attempts();
        let mut node_statuses = NodeToStatus::default();
        let mut potential: Vec<&Arc<NodeInfo>> = Vec::new();
        for n in snapshot.nodes() {
            if statuses.get(n.name()).code() == Code::UnschedulableAndUnresolvable {
                node_statuses.set(n.name(), Status::unresolvable(PREEMPTION_NOT_HELPFUL));
            } else {
                potential.push(n);
            }
        }
        let mut candidates = Vec::new();
        if !potential.is_empty() {
            let n = potential.len();
            let wanted = ((n as i64 * i64::from(self.args.min_candidate_nodes_percentage) / 100)
                .max(i64::from(self.args.min_candidate_nodes_absolute)) as usize)
                .min(n)
                .max(1);
            let offset = rand::random_range(0..n);
            let pdbs = fwk.handle().listers.pod_disruption_budgets();
            for i in 0..n {
                let node = potential[(offset + i) % n];
                match Self::select_victims_on_node(fwk, state, pod, node, &pdbs) {
                    Ok((victims, num_pdb_violations)) => {
                        candidates.push(Candidate { node: node.name().to_string(), victims, num_pdb_violations });
                        if candidates.len() >= wanted {
                            break;
                        }
                    }
                    Err(s) if s.code() == Code::Error => return (None, s),
                    Err(s) => node_statuses.set(node.name(), s),
                }
            }
        }
        if candidates.is_empty() {
            let fit = FitError {
                num_all_nodes: snapshot.num_nodes(),
                diagnosis: crate::framework::Diagnosis { node_to_status: node_statuses, ..Default::default() },
            };
            return (Some(PostFilterResult { nominated_node_name: None }), Status::unschedulable(fit.message()));
        }
        let candidates = match Self::call_extenders(fwk, pod, candidates) {
            Ok(c) => c,
            Err(s) => return (None, s),
        };
        let Some(best) = Self::select_candidate(&candidates) else {
            return (None, Status::error("no candidate selected"));
        };
        fwk.handle().metrics.observe_preemption_victims(best.victims.len());
        self.prepare_candidate(fwk, best, pod);
        (Some(PostFilterResult { nominated_node_name: Some(best.node.clone()) }), Status::success())
    }

    /// Offers the candidates to the extenders that preempt (`callExtenders`): each may drop
    /// nodes or victims, and the next sees what the previous kept. A failing extender fails
    /// preemption unless ignorable; an answer naming a node without victims is an error
    /// (ignorable extenders' such nodes are dropped).
    ///
    /// # Errors
    /// The extender's error, as an Error status.
    fn call_extenders(
        fwk: &Framework,
        pod: &Arc<PodInfo>,
        candidates: Vec<Candidate>,
    ) -> Result<Vec<Candidate>, Status> {
        use crate::extender::NodeVictims;
        let h = fwk.handle();
        if h.extenders.is_empty() || candidates.is_empty() {
            return Ok(candidates);
        }
        let infos: HashMap<String, Arc<PodInfo>> =
            candidates.iter().flat_map(|c| c.victims.iter()).map(|v| (v.uid.clone(), v.clone())).collect();
        let mut victims: HashMap<String, NodeVictims> = candidates
            .iter()
            .map(|c| {
                let pods = c.victims.iter().map(|v| v.pod.clone()).collect();
                (c.node.clone(), NodeVictims { pods, num_pdb_violations: c.num_pdb_violations as i64 })
            })
            .collect();
        for ext in h.extenders.iter() {
            if !ext.supports_preemption() || !ext.is_interested(&pod.pod) {
                continue;
            }
            let answer = crate::extender::block_on(h.runtime.as_ref(), ext.process_preemption(&pod.pod, &victims));
            let mut kept = match answer {
                Ok(k) => k,
                Err(e) if ext.is_ignorable() => {
                    tracing::info!(extender = ext.name(), error = %e, "Skipped extender as it returned error and has ignorable flag set");
                    continue;
                }
                Err(e) => return Err(Status::error(e)),
            };
            let empty: Vec<String> = kept.iter().filter(|(_, v)| v.pods.is_empty()).map(|(n, _)| n.clone()).collect();
            for node in empty {
                if !ext.is_ignorable() {
                    return Err(Status::error(format!("expected at least one victim pod on node {node:?}")));
                }
                kept.remove(&node);
            }
            victims = kept;
            if victims.is_empty() {
                break;
            }
        }
        Ok(victims
            .into_iter()
            .map(|(node, v)| Candidate {
                node,
                victims: v
                    .pods
                    .iter()
                    .filter_map(|p| infos.get(p.metadata.uid.as_deref().unwrap_or_default()).cloned())
                    .collect(),
                num_pdb_violations: v.num_pdb_violations.max(0) as usize,
            })
            .collect())
    }

    /// Evicts the victims and clears weaker nominations on the node (`prepareCandidate`). API
    /// calls run in the background; the scheduling cycle does not wait for them.
    fn prepare_candidate(&self, fwk: &Framework, c: &Candidate, pod: &Arc<PodInfo>) {
        let h = fwk.handle();
        for v in &c.victims {
            if let Some(wp) = h.waiting_pods.get(&v.uid) {
                wp.reject(names::DEFAULT_PREEMPTION, "preempted");
                continue;
            }
            let api = h.api.clone();
            let victim = v.clone();
            let msg = format!("Preempted by pod {} on node {}", pod.uid, c.node);
            h.spawn(async move {
                if let Err(e) = api.delete_pod(&victim).await {
                    tracing::warn!(pod = %victim.key, error = %format!("{e:#}"), "deleting preemption victim failed");
                    return;
                }
                let ev = SchedulerEvent::for_pod(&victim, "Normal", "Preempted", "Preempting", msg);
                let _ = api.record_event(ev).await;
            });
        }
        for np in h.nominator.nominated_pods_for_node(&c.node) {
            if np.priority < pod.priority && np.uid != pod.uid {
                h.nominator.remove(&np.uid);
                let api = h.api.clone();
                h.spawn(async move {
                    let _ = api
                        .update_pod_status(&np, PodStatusUpdate { condition: None, nominated_node_name: Some(None) })
                        .await;
                });
            }
        }
    }
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &str {
        names::DEFAULT_PREEMPTION
    }
    crate::extension_points!(post_filter);
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        fwk: &Framework,
        state: &CycleState,
        pod: &Arc<PodInfo>,
        snapshot: &Snapshot,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let (r, s) = self.preempt(fwk, state, pod, snapshot, statuses);
        let msg = s.message();
        if msg.is_empty() {
            return (r, s);
        }
        (r, Status::new(s.code(), format!("preemption: {msg}")))
    }
}
