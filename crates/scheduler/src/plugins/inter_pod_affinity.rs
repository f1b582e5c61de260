//! InterPodAffinity: required pod affinity / anti-affinity filter nodes (including the
//! anti-affinity of pods already running), preferred terms score them.
//!
//! Counts are kept per topology pair (`topologyKey`, node label value): PreFilter counts, over
//! all nodes, the existing pods matching the incoming pod's terms and the existing pods whose
//! anti-affinity matches the incoming pod; Filter then only looks the node's pairs up.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Deserialize;

use crate::framework::{
    ActionType, AffinityTerm, ClusterEvent, CycleState, EventResource, FilterPlugin, Handle, MAX_NODE_SCORE, NodeInfo,
    Plugin, PodInfo, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, Snapshot, Status,
};
use skiff_apimachinery::selector::LabelSelector;

use super::pod_count_memo::PodCountMemo;
use super::{add_to_count, names};

/// Reason: the incoming pod's required affinity is not satisfied.
pub const ERR_REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// Reason: the incoming pod's required anti-affinity is violated.
pub const ERR_REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
/// Reason: an existing pod's required anti-affinity would be violated.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY: &str = "node(s) didn't satisfy existing pods anti-affinity rules";

const PRE_FILTER_KEY: &str = "PreFilterInterPodAffinity";
const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

/// `InterPodAffinityArgs`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterPodAffinityArgs {
    /// Score weight of existing pods' *required* affinity terms matching the incoming pod (0-100).
    #[serde(default = "default_hard_weight")]
    pub hard_pod_affinity_weight: i64,
    /// Ignore existing pods' preferred terms when scoring.
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: bool,
}

fn default_hard_weight() -> i64 {
    1
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        Self { hard_pod_affinity_weight: 1, ignore_preferred_terms_of_existing_pods: false }
    }
}

/// Pod counts per topology key, then per value.
type Counts = HashMap<String, HashMap<String, i64>>;

fn bump(c: &mut Counts, node: &NodeInfo, key: &str, by: i64) {
    let Some(v) = node.labels().get(key) else { return };
    // Look up before inserting: keys are allocated only for new pairs.
    match c.get_mut(key) {
        Some(m) => add_to_count(m, v, by),
        None => {
            c.insert(key.to_string(), HashMap::from([(v.clone(), by)]));
        }
    }
}

fn get(c: &Counts, key: &str, value: &str) -> i64 {
    c.get(key).and_then(|m| m.get(value)).copied().unwrap_or(0)
}

/// The InterPodAffinity plugin.
pub struct InterPodAffinity {
    args: InterPodAffinityArgs,
    handle: Handle,
    /// Per-node counts of pods matching the incoming pod's required terms, reused across cycles
    /// for nodes that did not change.
    memo: PodCountMemo,
}

#[derive(Clone, Default)]
struct PreFilterState {
    existing_anti_affinity: Counts,
    affinity: Counts,
    anti_affinity: Counts,
    affinity_terms: Vec<AffinityTerm>,
    anti_affinity_terms: Vec<AffinityTerm>,
    namespace_labels: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct PreScoreState {
    topology_score: HashMap<String, HashMap<String, i64>>,
}

impl InterPodAffinity {
    /// Builds from args.
    pub fn new(args: InterPodAffinityArgs, handle: Handle) -> Self {
        Self { args, handle, memo: PodCountMemo::default() }
    }

    /// Replaces a namespace selector by the namespaces it selects now
    /// (`mergeAffinityTermNamespacesIfNotEmpty`), so matching needs no namespace labels.
    fn merge_namespaces(&self, mut t: AffinityTerm) -> AffinityTerm {
        if t.namespace_selector.is_nothing() || t.namespace_selector.is_empty() {
            return t;
        }
        for (ns, labels) in self.handle.listers.namespaces() {
            if t.namespace_selector.matches(&labels) {
                t.namespaces.insert(ns);
            }
        }
        t.namespace_selector = LabelSelector::nothing();
        t
    }
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

fn matches_all(terms: &[AffinityTerm], pod: &PodInfo) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, &EMPTY))
}

/// The memo key of "pods matching all of `terms`" (`all`) or "pods matching the one term"
/// (`one`): what [`AffinityTerm::matches`] looks at with no namespace labels, exactly (`Debug`).
fn terms_key(kind: &str, terms: &[AffinityTerm]) -> String {
    let mut key = String::from(kind);
    for t in terms {
        let mut ns: Vec<&String> = t.namespaces.iter().collect();
        ns.sort();
        key.push_str(&format!("|{ns:?}\x00{:?}\x00{:?}", t.namespace_selector, t.selector));
    }
    key
}

impl PreFilterState {
    /// Accounts for `existing` on `node` with multiplier `m` (+1 add, −1 remove).
    fn update_with_pod(&mut self, incoming: &PodInfo, existing: &PodInfo, node: &NodeInfo, m: i64) {
        for t in &existing.required_anti_affinity_terms {
            if t.matches(incoming, &self.namespace_labels) {
                bump(&mut self.existing_anti_affinity, node, &t.topology_key, m);
            }
        }
        if matches_all(&self.affinity_terms, existing) {
            for t in &self.affinity_terms {
                bump(&mut self.affinity, node, &t.topology_key, m);
            }
        }
        for t in &self.anti_affinity_terms {
            if t.matches(existing, &EMPTY) {
                bump(&mut self.anti_affinity, node, &t.topology_key, m);
            }
        }
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &str {
        names::INTER_POD_AFFINITY
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::ADD.or(ActionType::DELETE).or(ActionType::UPDATE_POD_LABEL),
            ),
            ClusterEvent::new(EventResource::Node, ActionType::ADD.or(ActionType::UPDATE_NODE_LABEL)),
            ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE_POD_LABEL),
        ]
    }
    crate::extension_points!(pre_filter, filter, pre_score, score);
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if let Some(e) = &pod.parse_error {
            return (None, Status::unresolvable(e.clone()));
        }
        let mut s = PreFilterState {
            namespace_labels: self.handle.listers.namespace_labels(&pod.namespace),
            ..Default::default()
        };
        // Existing pods whose required anti-affinity matches the incoming pod.
        for node in snapshot.have_pods_with_required_anti_affinity() {
            for existing in node.pods_with_required_anti_affinity() {
                for t in &existing.required_anti_affinity_terms {
                    if t.matches(pod, &s.namespace_labels) {
                        bump(&mut s.existing_anti_affinity, node, &t.topology_key, 1);
                    }
                }
            }
        }
        if pod.required_affinity_terms.is_empty() && pod.required_anti_affinity_terms.is_empty() {
            if s.existing_anti_affinity.is_empty() {
                return (None, Status::skip());
            }
            state.write(PRE_FILTER_KEY, s);
            return (None, Status::success());
        }
        s.affinity_terms = pod.required_affinity_terms.iter().cloned().map(|t| self.merge_namespaces(t)).collect();
        s.anti_affinity_terms =
            pod.required_anti_affinity_terms.iter().cloned().map(|t| self.merge_namespaces(t)).collect();
        // Per node: the pods matching all affinity terms count once for each term's topology
        // pair; the pods matching an anti-affinity term count for that term's pair.
        let nodes = snapshot.nodes();
        if !s.affinity_terms.is_empty() {
            let terms = &s.affinity_terms;
            let counts = &mut s.affinity;
            self.memo.with(&terms_key("all", terms), nodes.len(), |memo| {
                for (j, node) in nodes.iter().enumerate() {
                    let n = memo.get(j, node, |n| n.pods().iter().filter(|p| matches_all(terms, p)).count() as i64);
                    if n > 0 {
                        for t in terms {
                            bump(counts, node, &t.topology_key, n);
                        }
                    }
                }
            });
        }
        for t in &s.anti_affinity_terms {
            let counts = &mut s.anti_affinity;
            self.memo.with(&terms_key("one", std::slice::from_ref(t)), nodes.len(), |memo| {
                for (j, node) in nodes.iter().enumerate() {
                    let n = memo.get(j, node, |n| n.pods().iter().filter(|p| t.matches(p, &EMPTY)).count() as i64);
                    if n > 0 {
                        bump(counts, node, &t.topology_key, n);
                    }
                }
            });
        }
        state.write(PRE_FILTER_KEY, s);
        (None, Status::success())
    }

    crate::pre_filter_extensions!(PreFilterState, PRE_FILTER_KEY);
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_KEY) else {
            return Status::error("reading \"PreFilterInterPodAffinity\" from cycleState: not found");
        };
        let labels = node.labels();
        if !s.existing_anti_affinity.is_empty() {
            for (k, v) in labels {
                if get(&s.existing_anti_affinity, k, v) > 0 {
                    return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY);
                }
            }
        }
        for t in &s.anti_affinity_terms {
            if let Some(v) = labels.get(&t.topology_key)
                && get(&s.anti_affinity, &t.topology_key, v) > 0
            {
                return Status::unschedulable(ERR_REASON_ANTI_AFFINITY);
            }
        }
        if !s.affinity_terms.is_empty() {
            let mut pods_exist = true;
            for t in &s.affinity_terms {
                match labels.get(&t.topology_key) {
                    None => return Status::unresolvable(ERR_REASON_AFFINITY),
                    Some(v) => {
                        if get(&s.affinity, &t.topology_key, v) <= 0 {
                            pods_exist = false;
                        }
                    }
                }
            }
            // The first pod of a group with affinity to itself may go anywhere that has the
            // topology labels, as long as no pod matches anywhere yet.
            if !(pods_exist || s.affinity.is_empty() && matches_all(&s.affinity_terms, pod)) {
                return Status::unresolvable(ERR_REASON_AFFINITY);
            }
        }
        Status::success()
    }
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, nodes: &[Arc<NodeInfo>], snapshot: &Snapshot) -> Status {
        if nodes.is_empty() {
            return Status::skip();
        }
        let has_preferred = !pod.preferred_affinity_terms.is_empty() || !pod.preferred_anti_affinity_terms.is_empty();
        if !has_preferred
            && self.args.ignore_preferred_terms_of_existing_pods
            && self.args.hard_pod_affinity_weight == 0
        {
            return Status::skip();
        }
        let preferred: Vec<(AffinityTerm, i64)> = pod
            .preferred_affinity_terms
            .iter()
            .map(|w| (self.merge_namespaces(w.term.clone()), i64::from(w.weight)))
            .chain(
                pod.preferred_anti_affinity_terms
                    .iter()
                    .map(|w| (self.merge_namespaces(w.term.clone()), -i64::from(w.weight))),
            )
            .collect();
        let ns_labels = self.handle.listers.namespace_labels(&pod.namespace);
        let mut s = PreScoreState::default();
        let mut add = |node: &NodeInfo, key: &str, w: i64| {
            if let Some(v) = node.labels().get(key) {
                *s.topology_score.entry(key.to_string()).or_default().entry(v.clone()).or_insert(0) += w;
            }
        };
        let scan = if has_preferred { snapshot.nodes() } else { snapshot.have_pods_with_affinity() };
        for node in scan {
            let pods = if has_preferred { node.pods() } else { node.pods_with_affinity() };
            for existing in pods {
                for (t, w) in &preferred {
                    if t.matches(existing, &EMPTY) {
                        add(node, &t.topology_key, *w);
                    }
                }
                if self.args.hard_pod_affinity_weight > 0 {
                    for t in &existing.required_affinity_terms {
                        if t.matches(pod, &ns_labels) {
                            add(node, &t.topology_key, self.args.hard_pod_affinity_weight);
                        }
                    }
                }
                if !self.args.ignore_preferred_terms_of_existing_pods {
                    for w in &existing.preferred_affinity_terms {
                        if w.term.matches(pod, &ns_labels) {
                            add(node, &w.term.topology_key, i64::from(w.weight));
                        }
                    }
                    for w in &existing.preferred_anti_affinity_terms {
                        if w.term.matches(pod, &ns_labels) {
                            add(node, &w.term.topology_key, -i64::from(w.weight));
                        }
                    }
                }
            }
        }
        if s.topology_score.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, s);
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else { return Ok(0) };
        let labels = node.labels();
        Ok(s.topology_score.iter().filter_map(|(k, vals)| labels.get(k).and_then(|v| vals.get(v))).sum())
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        let (min, max) = scores.iter().fold((i64::MAX, i64::MIN), |(lo, hi), s| (lo.min(*s), hi.max(*s)));
        let diff = max.saturating_sub(min);
        for s in scores.iter_mut() {
            *s = if diff > 0 { (MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)) as i64 } else { 0 };
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::test_util::{filter_all, handle, score_all, snapshot};
    use crate::testing::{make_node, make_pod};
    use k8s_openapi::api::core::v1::{Node, Pod};

    const ZONE: &str = "topology.kubernetes.io/zone";
    const HOST: &str = "kubernetes.io/hostname";

    fn plugin() -> InterPodAffinity {
        InterPodAffinity::new(Default::default(), handle())
    }

    fn nodes() -> Vec<Node> {
        vec![
            make_node("a1").zone("a").obj(),
            make_node("a2").zone("a").obj(),
            make_node("b1").zone("b").obj(),
            make_node("nozone").obj(),
        ]
    }

    fn check(pod: Pod, existing: &[Pod], want: &[Option<(Code, &str)>]) {
        let snap = snapshot(nodes(), existing);
        let got = filter_all(&plugin(), &pod, &snap);
        let got: Vec<Option<(Code, String)>> =
            got.iter().map(|s| if s.is_success() { None } else { Some((s.code(), s.message())) }).collect();
        let want: Vec<Option<(Code, String)>> = want.iter().map(|w| w.map(|(c, m)| (c, m.to_string()))).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn counts_follow_pods_added_between_cycles_of_an_incremental_snapshot() {
        // Same plugin across cycles: unchanged nodes reuse their remembered counts, the node that
        // got a pod is recounted.
        let cache = crate::cache::Cache::new();
        for n in nodes() {
            cache.add_node(n);
        }
        let mut snap = Snapshot::default();
        cache.update_snapshot(&mut snap);
        let ipa = plugin();
        let anti = make_pod("web").pod_anti_affinity(ZONE, &[("app", "db")]).obj();
        let with = make_pod("web2").pod_affinity(ZONE, &[("app", "db")]).obj();
        let ok = |pod: &Pod, snap: &Snapshot| {
            let statuses = filter_all(&ipa, pod, snap);
            let mut names: Vec<&str> =
                snap.nodes().iter().zip(&statuses).filter(|(_, s)| s.is_success()).map(|(n, _)| n.name()).collect();
            names.sort();
            names.join(",")
        };
        assert_eq!(ok(&anti, &snap), "a1,a2,b1,nozone");
        assert_eq!(ok(&with, &snap), "");
        cache.add_pod(Arc::new(PodInfo::new(make_pod("db").label("app", "db").node("a2").obj())));
        cache.update_snapshot(&mut snap);
        assert_eq!(ok(&anti, &snap), "b1,nozone");
        assert_eq!(ok(&with, &snap), "a1,a2");
        cache.add_pod(Arc::new(PodInfo::new(make_pod("db2").label("app", "db").node("b1").obj())));
        cache.update_snapshot(&mut snap);
        assert_eq!(ok(&anti, &snap), "nozone");
        assert_eq!(ok(&with, &snap), "a1,a2,b1");
    }

    #[test]
    fn required_affinity_needs_a_matching_pod_in_the_same_domain() {
        let db = make_pod("db").label("app", "db").node("a2").obj();
        let un = Some((Code::UnschedulableAndUnresolvable, ERR_REASON_AFFINITY));
        check(
            make_pod("web").pod_affinity(ZONE, &[("app", "db")]).obj(),
            std::slice::from_ref(&db),
            &[None, None, un, un],
        );
        check(make_pod("web").pod_affinity(HOST, &[("app", "db")]).obj(), &[db], &[un, None, un, un]);
    }

    #[test]
    fn first_pod_of_a_self_affine_group_may_go_anywhere_with_the_topology_label() {
        let un = Some((Code::UnschedulableAndUnresolvable, ERR_REASON_AFFINITY));
        check(
            make_pod("w").label("app", "web").pod_affinity(ZONE, &[("app", "web")]).obj(),
            &[],
            &[None, None, None, un],
        );
        check(make_pod("w").pod_affinity(ZONE, &[("app", "web")]).obj(), &[], &[un, un, un, un]);
    }

    #[test]
    fn required_anti_affinity_avoids_domains_with_matching_pods() {
        let web = make_pod("web1").label("app", "web").node("a1").obj();
        let un = Some((Code::Unschedulable, ERR_REASON_ANTI_AFFINITY));
        check(
            make_pod("w2").pod_anti_affinity(ZONE, &[("app", "web")]).obj(),
            std::slice::from_ref(&web),
            &[un, un, None, None],
        );
        check(make_pod("w2").pod_anti_affinity(HOST, &[("app", "web")]).obj(), &[web], &[un, None, None, None]);
    }

    #[test]
    fn existing_pods_anti_affinity_is_respected() {
        let loner = make_pod("loner").pod_anti_affinity(ZONE, &[("app", "web")]).node("b1").obj();
        let un = Some((Code::Unschedulable, ERR_REASON_EXISTING_ANTI_AFFINITY));
        check(make_pod("w").label("app", "web").obj(), std::slice::from_ref(&loner), &[None, None, un, None]);
        check(make_pod("w").label("app", "db").obj(), &[loner], &[None, None, None, None]);
    }

    #[test]
    fn anti_affinity_only_counts_pods_in_the_terms_namespaces() {
        let other_ns = make_pod("web1").namespace("other").label("app", "web").node("a1").obj();
        check(make_pod("w2").pod_anti_affinity(HOST, &[("app", "web")]).obj(), &[other_ns], &[None, None, None, None]);
    }

    #[test]
    fn preferred_terms_score_domains() {
        let existing = [
            make_pod("db").label("app", "db").node("a1").obj(),
            make_pod("cache").label("app", "cache").node("b1").obj(),
        ];
        let snap = snapshot(nodes(), &existing);
        let pod = make_pod("w")
            .preferred_pod_affinity(80, ZONE, &[("app", "db")])
            .preferred_pod_anti_affinity(20, ZONE, &[("app", "cache")])
            .obj();
        // zone a: +80, zone b: -20, no zone: 0 → min -20, max 80.
        assert_eq!(score_all(&plugin(), &pod, &snap), vec![100, 100, 0, 20]);
    }

    #[test]
    fn existing_pods_required_affinity_attracts_matching_pods() {
        let existing = [make_pod("fan").pod_affinity(HOST, &[("app", "star")]).node("b1").obj()];
        let snap = snapshot(nodes(), &existing);
        assert_eq!(score_all(&plugin(), &make_pod("s").label("app", "star").obj(), &snap), vec![0, 0, 100, 0]);
    }
}
