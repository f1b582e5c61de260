//! PodTopologySpread: `topologySpreadConstraints` — `DoNotSchedule` constraints filter nodes
//! where placing the pod would exceed `maxSkew`; `ScheduleAnyway` constraints score nodes in
//! less crowded domains higher. Pods without constraints get the cluster default constraints
//! (`System`: hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway) with a selector derived from
//! the Services/ReplicaSets/StatefulSets/ReplicationControllers selecting the pod.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use serde::Deserialize;
use skiff_apimachinery::selector::{LabelSelector, Operator, Requirement};

use crate::framework::{
    ActionType, ClusterEvent, CycleState, EventResource, FilterPlugin, Handle, MAX_NODE_SCORE, NodeInfo, Plugin,
    PodInfo, PreFilterPlugin, PreFilterResult, PreScorePlugin, RequiredNodeAffinity, ScorePlugin, Snapshot, Status,
    find_untolerated_taint,
};

use super::pod_count_memo::PodCountMemo;
use super::{add_to_count, names};

/// Reason: placing the pod would exceed maxSkew.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str = "node(s) didn't match pod topology spread constraints";
/// Reason: the node lacks a topology key.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

const PRE_FILTER_KEY: &str = "PreFilterPodTopologySpread";
const PRE_SCORE_KEY: &str = "PreScorePodTopologySpread";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// `PodTopologySpreadArgs`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTopologySpreadArgs {
    /// Constraints for pods that define none (used with `defaultingType: List`).
    #[serde(default)]
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// `System` (built-in defaults, the default) or `List` (`defaultConstraints`).
    pub defaulting_type: Option<String>,
}

/// The built-in defaults (`systemDefaultConstraints`).
pub fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    vec![
        TopologySpreadConstraint {
            max_skew: 3,
            topology_key: HOSTNAME.into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            ..Default::default()
        },
        TopologySpreadConstraint {
            max_skew: 5,
            topology_key: "topology.kubernetes.io/zone".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            ..Default::default()
        },
    ]
}

#[derive(Clone, Debug)]
struct Constraint {
    max_skew: i64,
    topology_key: String,
    selector: LabelSelector,
    min_domains: usize,
    honor_node_affinity: bool,
    honor_taints: bool,
}

impl Constraint {
    fn includes(&self, pod: &PodInfo, affinity: &RequiredNodeAffinity, node: &NodeInfo) -> bool {
        if self.honor_node_affinity && node.node().is_some_and(|n| !affinity.matches(n)) {
            return false;
        }
        if self.honor_taints
            && find_untolerated_taint(node.taints(), pod.tolerations(), |t| {
                t.effect == "NoSchedule" || t.effect == "NoExecute"
            })
            .is_some()
        {
            return false;
        }
        true
    }
}

fn count_matching(pods: &[Arc<PodInfo>], selector: &LabelSelector, ns: &str) -> i64 {
    if selector.is_nothing() {
        return 0;
    }
    pods.iter().filter(|p| !p.terminating && p.namespace == ns && selector.matches(p.labels())).count() as i64
}

/// The memo key of [`count_matching`] for `selector` in namespace `ns` (`Debug` is exact: values
/// are quoted, `nothing` is included).
fn count_key(selector: &LabelSelector, ns: &str) -> String {
    format!("{ns}\x00{selector:?}")
}

fn has_all_keys(labels: &BTreeMap<String, String>, cs: &[Constraint]) -> bool {
    cs.iter().all(|c| labels.contains_key(&c.topology_key))
}

/// The PodTopologySpread plugin.
pub struct PodTopologySpread {
    defaults: Vec<TopologySpreadConstraint>,
    system_defaulted: bool,
    handle: Handle,
    /// Per-node matching-pod counts, reused across cycles for nodes that did not change.
    memo: PodCountMemo,
}

#[derive(Clone, Default)]
struct PreFilterState {
    constraints: Vec<Constraint>,
    match_num: Vec<HashMap<String, i64>>,
    mins: Vec<i64>,
    node_affinity: RequiredNodeAffinity,
}

impl PreFilterState {
    fn recompute_min(&mut self, i: usize) {
        self.mins[i] = self.match_num[i].values().copied().min().unwrap_or(0);
    }

    fn min_match(&self, i: usize) -> i64 {
        if self.match_num[i].len() < self.constraints[i].min_domains { 0 } else { self.mins[i] }
    }

    /// Accounts for `other` on `node` (`delta` +1 add, -1 remove).
    fn update_with_pod(&mut self, incoming: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
        if other.namespace != incoming.namespace || !has_all_keys(node.labels(), &self.constraints) {
            return;
        }
        for i in 0..self.constraints.len() {
            let c = &self.constraints[i];
            if !c.includes(incoming, &self.node_affinity, node) || !c.selector.matches(other.labels()) {
                continue;
            }
            let Some(v) = node.labels().get(&c.topology_key) else { continue };
            add_to_count(&mut self.match_num[i], v, delta);
            self.recompute_min(i);
        }
    }
}

#[derive(Clone, Default)]
struct PreScoreState {
    constraints: Vec<Constraint>,
    ignored: HashSet<String>,
    counts: Vec<HashMap<String, i64>>,
    weights: Vec<f64>,
}

impl PodTopologySpread {
    /// Builds from args.
    ///
    /// # Errors
    /// `defaultConstraints` given with `defaultingType: System`, or an unknown defaulting type.
    pub fn new(args: PodTopologySpreadArgs, handle: Handle) -> Result<Self, String> {
        let (defaults, system_defaulted) = match args.defaulting_type.as_deref().unwrap_or("System") {
            "System" => {
                if !args.default_constraints.is_empty() {
                    return Err(
                        "PodTopologySpread: defaultConstraints must be empty when defaultingType is System".into()
                    );
                }
                (system_default_constraints(), true)
            }
            "List" => (args.default_constraints, false),
            other => return Err(format!("PodTopologySpread: unsupported defaultingType {other:?}")),
        };
        Ok(Self { defaults, system_defaulted, handle, memo: PodCountMemo::default() })
    }

    /// The selector of the pod's Services, ReplicationControllers, ReplicaSets and StatefulSets
    /// (`helper.DefaultSelector`); empty when none selects the pod.
    fn default_selector(&self, pod: &PodInfo) -> LabelSelector {
        let labels = pod.labels();
        let l = &self.handle.listers;
        let mut set: BTreeMap<String, String> = BTreeMap::new();
        let subset =
            |sel: &BTreeMap<String, String>| !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v));
        for svc in l.services(&pod.namespace) {
            if let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref())
                && subset(sel)
            {
                set.extend(sel.clone());
            }
        }
        for rc in l.replication_controllers(&pod.namespace) {
            if let Some(sel) = rc.spec.as_ref().and_then(|s| s.selector.as_ref())
                && subset(sel)
            {
                set.extend(sel.clone());
            }
        }
        let mut reqs: Vec<Requirement> = Vec::new();
        let rs_sels =
            l.replica_sets(&pod.namespace).into_iter().filter_map(|rs| rs.spec.as_ref().map(|s| s.selector.clone()));
        let ss_sels =
            l.stateful_sets(&pod.namespace).into_iter().filter_map(|ss| ss.spec.as_ref().map(|s| s.selector.clone()));
        for sel in rs_sels.chain(ss_sels) {
            if let Ok(s) = LabelSelector::from_metav1(&sel)
                && !s.is_empty()
                && s.matches(labels)
            {
                reqs.extend(s.requirements().iter().cloned());
            }
        }
        if let Ok(s) = LabelSelector::from_map(&set) {
            reqs.extend(s.requirements().iter().cloned());
        }
        LabelSelector::from_requirements(reqs)
    }

    fn constraints(&self, pod: &PodInfo, action: &str) -> Result<Vec<Constraint>, String> {
        let own = pod.pod.spec.as_ref().and_then(|s| s.topology_spread_constraints.as_deref()).unwrap_or(&[]);
        if !own.is_empty() {
            let mut out = Vec::new();
            for c in own.iter().filter(|c| c.when_unsatisfiable == action) {
                let mut selector = LabelSelector::from_metav1_opt(c.label_selector.as_ref())?;
                let keys = c.match_label_keys.as_deref().unwrap_or(&[]);
                if !keys.is_empty() && !selector.is_nothing() {
                    let mut reqs = selector.requirements().to_vec();
                    for k in keys {
                        if let Some(v) = pod.labels().get(k) {
                            reqs.push(Requirement::new(k, Operator::In, vec![v.clone()])?);
                        }
                    }
                    selector = LabelSelector::from_requirements(reqs);
                }
                out.push(Constraint {
                    max_skew: i64::from(c.max_skew),
                    topology_key: c.topology_key.clone(),
                    selector,
                    min_domains: c.min_domains.unwrap_or(1).max(1) as usize,
                    honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                    honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
                });
            }
            return Ok(out);
        }
        let defaults: Vec<&TopologySpreadConstraint> =
            self.defaults.iter().filter(|c| c.when_unsatisfiable == action).collect();
        if defaults.is_empty() {
            return Ok(Vec::new());
        }
        let selector = self.default_selector(pod);
        if selector.is_empty() {
            return Ok(Vec::new());
        }
        Ok(defaults
            .into_iter()
            .map(|c| Constraint {
                max_skew: i64::from(c.max_skew),
                topology_key: c.topology_key.clone(),
                selector: selector.clone(),
                min_domains: 1,
                honor_node_affinity: true,
                honor_taints: false,
            })
            .collect())
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &str {
        names::POD_TOPOLOGY_SPREAD
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::ADD.or(ActionType::DELETE).or(ActionType::UPDATE_POD_LABEL),
            ),
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD
                    .or(ActionType::DELETE)
                    .or(ActionType::UPDATE_NODE_LABEL)
                    .or(ActionType::UPDATE_NODE_TAINT),
            ),
            ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE_POD_LABEL),
        ]
    }
    crate::extension_points!(pre_filter, filter, pre_score, score);
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let constraints = match self.constraints(pod, "DoNotSchedule") {
            Ok(c) => c,
            Err(e) => return (None, Status::unresolvable(format!("invalid topology spread constraint: {e}"))),
        };
        if constraints.is_empty() {
            return (None, Status::skip());
        }
        let node_affinity = RequiredNodeAffinity::from_pod(&pod.pod);
        let mut match_num: Vec<HashMap<String, i64>> = vec![HashMap::new(); constraints.len()];
        let nodes = snapshot.nodes();
        for (i, c) in constraints.iter().enumerate() {
            let counts = &mut match_num[i];
            self.memo.with(&count_key(&c.selector, &pod.namespace), nodes.len(), |memo| {
                for (j, node) in nodes.iter().enumerate() {
                    let labels = node.labels();
                    if !has_all_keys(labels, &constraints) || !c.includes(pod, &node_affinity, node) {
                        continue;
                    }
                    let count = memo.get(j, node, |n| count_matching(n.pods(), &c.selector, &pod.namespace));
                    add_to_count(counts, &labels[&c.topology_key], count);
                }
            });
        }
        let n = constraints.len();
        let mut s = PreFilterState { constraints, match_num, mins: vec![0; n], node_affinity };
        for i in 0..n {
            s.recompute_min(i);
        }
        state.write(PRE_FILTER_KEY, s);
        (None, Status::success())
    }

    crate::pre_filter_extensions!(PreFilterState, PRE_FILTER_KEY);
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return Status::error("reading \"PreFilterPodTopologySpread\" from cycleState: not found");
        };
        let labels = node.labels();
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(v) = labels.get(&c.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let self_match = i64::from(c.selector.matches(pod.labels()));
            let match_num = s.match_num[i].get(v).copied().unwrap_or(0);
            let skew = match_num + self_match - s.min_match(i);
            if skew > c.max_skew {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>], snapshot: &Snapshot) -> Status {
        let own =
            pod.pod.spec.as_ref().and_then(|s| s.topology_spread_constraints.as_ref()).is_some_and(|c| !c.is_empty());
        let constraints = match self.constraints(pod, "ScheduleAnyway") {
            Ok(c) => c,
            Err(e) => return Status::error(format!("invalid topology spread constraint: {e}")),
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        let require_all = own || !self.system_defaulted;
        let n = constraints.len();
        let mut s = PreScoreState { counts: vec![HashMap::new(); n], weights: vec![0.0; n], ..Default::default() };
        let mut sizes = vec![0usize; n];
        for node in nodes {
            let labels = node.labels();
            if require_all && !has_all_keys(labels, &constraints) {
                s.ignored.insert(node.name().to_string());
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if c.topology_key == HOSTNAME {
                    continue;
                }
                if let Some(v) = labels.get(&c.topology_key)
                    && !s.counts[i].contains_key(v)
                {
                    s.counts[i].insert(v.clone(), 0);
                    sizes[i] += 1;
                }
            }
        }
        for (i, c) in constraints.iter().enumerate() {
            if c.topology_key == HOSTNAME {
                sizes[i] = nodes.len() - s.ignored.len();
            }
            s.weights[i] = ((sizes[i] + 2) as f64).ln();
        }
        let affinity = RequiredNodeAffinity::from_pod(&pod.pod);
        let all = snapshot.nodes();
        for (i, c) in constraints.iter().enumerate() {
            if c.topology_key == HOSTNAME {
                continue;
            }
            let counts = &mut s.counts[i];
            self.memo.with(&count_key(&c.selector, &pod.namespace), all.len(), |memo| {
                for (j, node) in all.iter().enumerate() {
                    let labels = node.labels();
                    if require_all && !has_all_keys(labels, &constraints) || !c.includes(pod, &affinity, node) {
                        continue;
                    }
                    let Some(x) = labels.get(&c.topology_key).and_then(|v| counts.get_mut(v)) else { continue };
                    *x += memo.get(j, node, |n| count_matching(n.pods(), &c.selector, &pod.namespace));
                }
            });
        }
        s.constraints = constraints;
        state.write(PRE_SCORE_KEY, s);
        Status::success()
    }
}

/// Marks nodes that do not take part in scoring until normalization.
const IGNORED: i64 = -1;

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else { return Ok(0) };
        if s.ignored.contains(node.name()) {
            return Ok(IGNORED);
        }
        let labels = node.labels();
        let mut score = 0f64;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(v) = labels.get(&c.topology_key) else { continue };
            let cnt = if c.topology_key == HOSTNAME {
                count_matching(node.pods(), &c.selector, &pod.namespace)
            } else {
                s.counts[i].get(v).copied().unwrap_or(0)
            };
            score += cnt as f64 * s.weights[i] + (c.max_skew - 1) as f64;
        }
        Ok(score.round() as i64)
    }

    fn normalize_score(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        if state.read::<PreScoreState>(PRE_SCORE_KEY).is_none() {
            return Status::success();
        }
        let live = scores.iter().copied().filter(|s| *s != IGNORED);
        let (min, max) = live.fold((i64::MAX, 0i64), |(lo, hi), s| (lo.min(s), hi.max(s)));
        for s in scores.iter_mut() {
            *s = if *s == IGNORED {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *s) / max
            };
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::{ClusterListers, Code};
    use crate::plugins::test_util::{filter_all, handle, score_all, snapshot};
    use crate::testing::{make_node, make_pod};
    use k8s_openapi::api::core::v1::{Node, Pod, Service, ServiceSpec};

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn plugin() -> PodTopologySpread {
        PodTopologySpread::new(Default::default(), handle()).unwrap()
    }

    fn nodes() -> Vec<Node> {
        vec![
            make_node("a1").zone("a").obj(),
            make_node("a2").zone("a").obj(),
            make_node("b1").zone("b").obj(),
            make_node("c1").zone("c").label("special", "x").obj(),
            make_node("nozone").obj(),
        ]
    }

    fn web(name: &str, node: &str) -> Pod {
        make_pod(name).label("app", "web").node(node).obj()
    }

    fn check(pod: Pod, existing: &[Pod], want: &[Option<(Code, &str)>]) {
        let snap = snapshot(nodes(), existing);
        let got: Vec<Option<(Code, String)>> = filter_all(&plugin(), &pod, &snap)
            .iter()
            .map(|s| if s.is_success() { None } else { Some((s.code(), s.message())) })
            .collect();
        let want: Vec<Option<(Code, String)>> = want.iter().map(|w| w.map(|(c, m)| (c, m.to_string()))).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn do_not_schedule_keeps_skew_within_max_skew() {
        let p =
            make_pod("new").label("app", "web").spread_constraint(1, ZONE, "DoNotSchedule", &[("app", "web")]).obj();
        let skew = Some((Code::Unschedulable, ERR_REASON_CONSTRAINTS_NOT_MATCH));
        let missing = Some((Code::UnschedulableAndUnresolvable, ERR_REASON_NODE_LABEL_NOT_MATCH));
        // a: 2, b: 1, c: 0 → only zone c keeps skew ≤ 1.
        check(p.clone(), &[web("w1", "a1"), web("w2", "a2"), web("w3", "b1")], &[skew, skew, skew, None, missing]);
        // a: 1, b: 1, c: 1 → anywhere with a zone.
        check(p.clone(), &[web("w1", "a1"), web("w2", "b1"), web("w3", "c1")], &[None, None, None, None, missing]);
        // Pods of another namespace or not matching do not count.
        let other = make_pod("o").namespace("x").label("app", "web").node("a1").obj();
        check(p, &[other, make_pod("db").label("app", "db").node("b1").obj()], &[None, None, None, None, missing]);
    }

    #[test]
    fn node_affinity_policy_honor_ignores_domains_the_pod_cannot_use() {
        // The pod only fits zone c nodes (nodeSelector); zones a and b do not count as domains,
        // so zone c's own count is the minimum.
        let p = make_pod("new")
            .label("app", "web")
            .node_selector(&[("special", "x")])
            .spread_constraint(1, ZONE, "DoNotSchedule", &[("app", "web")])
            .obj();
        check(
            p,
            &[web("w1", "c1")],
            &[None, None, None, None, Some((Code::UnschedulableAndUnresolvable, ERR_REASON_NODE_LABEL_NOT_MATCH))],
        );
    }

    #[test]
    fn schedule_anyway_prefers_less_crowded_domains() {
        let snap = snapshot(nodes(), &[web("w1", "a1"), web("w2", "a2"), web("w3", "b1")]);
        let p =
            make_pod("new").label("app", "web").spread_constraint(1, ZONE, "ScheduleAnyway", &[("app", "web")]).obj();
        let s = score_all(&plugin(), &p, &snap);
        assert!(s[3] > s[2] && s[2] > s[0], "{s:?}");
        assert_eq!(s[0], s[1]);
        assert_eq!(s[4], 0, "a node without the topology label is ignored");
    }

    #[test]
    fn counts_follow_pods_added_between_cycles_of_an_incremental_snapshot() {
        // Same plugin across cycles: unchanged nodes reuse their remembered counts, the node that
        // got a pod is recounted.
        let cache = crate::cache::Cache::new();
        for n in nodes() {
            cache.add_node(n);
        }
        for (name, node) in [("w1", "a1"), ("w2", "b1")] {
            cache.add_pod(Arc::new(PodInfo::new(web(name, node))));
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        let pts = plugin();
        let p =
            make_pod("new").label("app", "web").spread_constraint(1, ZONE, "DoNotSchedule", &[("app", "web")]).obj();
        let ok = |snap: &Snapshot| {
            let statuses = filter_all(&pts, &p, snap);
            let mut names: Vec<&str> =
                snap.nodes().iter().zip(&statuses).filter(|(_, s)| s.is_success()).map(|(n, _)| n.name()).collect();
            names.sort();
            names.join(",")
        };
        // a: 1, b: 1, c: 0 → only zone c.
        assert_eq!(ok(&snap), "c1");
        cache.add_pod(Arc::new(PodInfo::new(web("w3", "c1"))));
        cache.update_snapshot(&mut snap);
        // a: 1, b: 1, c: 1 → every zoned node.
        assert_eq!(ok(&snap), "a1,a2,b1,c1");
        cache.add_pod(Arc::new(PodInfo::new(web("w4", "a2"))));
        cache.update_snapshot(&mut snap);
        // a: 2, b: 1, c: 1 → zones b and c.
        assert_eq!(ok(&snap), "b1,c1");
    }

    struct OneService;
    impl ClusterListers for OneService {
        fn services(&self, _ns: &str) -> Vec<Arc<Service>> {
            vec![Arc::new(Service {
                spec: Some(ServiceSpec {
                    selector: Some([("app".to_string(), "web".to_string())].into()),
                    ..Default::default()
                }),
                ..Default::default()
            })]
        }
    }

    #[test]
    fn system_default_constraints_spread_pods_of_a_service() {
        let mut h = handle();
        h.listers = Arc::new(OneService);
        let pts = PodTopologySpread::new(Default::default(), h).unwrap();
        let snap = snapshot(nodes(), &[web("w1", "a1"), web("w2", "a1")]);
        let s = score_all(&pts, &make_pod("new").label("app", "web").obj(), &snap);
        assert!(s[0] < s[1] && s[1] < s[2], "{s:?}");
        // A pod no Service selects gets no default constraints.
        assert_eq!(score_all(&pts, &make_pod("x").label("app", "db").obj(), &snap), vec![0; 5]);
    }
}
