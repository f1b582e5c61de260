//! NodeAffinity: `spec.nodeSelector` and required node affinity filter nodes; preferred node
//! affinity scores them. Args `addedAffinity` adds a scheduler-enforced affinity to every pod of
//! the profile.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeAffinity as ApiNodeAffinity, Pod, PodSpec};
use serde::Deserialize;

use crate::framework::{
    ActionType, ClusterEvent, CompiledNodeSelectorTerm, CycleState, EventResource, FilterPlugin, MAX_NODE_SCORE,
    NodeInfo, Plugin, PodInfo, PreFilterPlugin, PreFilterResult, PreScorePlugin, PreferredNodeAffinity,
    RequiredNodeAffinity, ScorePlugin, Snapshot, Status,
};

use super::{default_normalize_score, names};

/// Reason when the pod's own selector/affinity does not match.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// Reason when `addedAffinity` does not match.
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// Reason when the `metadata.name` terms contradict each other.
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

const PRE_FILTER_KEY: &str = "PreFilterNodeAffinity";
const PRE_SCORE_KEY: &str = "PreScoreNodeAffinity";

/// `NodeAffinityArgs`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinityArgs {
    /// Affinity applied to all pods on top of their own.
    pub added_affinity: Option<ApiNodeAffinity>,
}

/// The NodeAffinity plugin.
pub struct NodeAffinity {
    added_required: Option<RequiredNodeAffinity>,
    added_preferred: PreferredNodeAffinity,
}

#[derive(Clone)]
struct PreFilterState(RequiredNodeAffinity);

#[derive(Clone)]
struct PreScoreState(PreferredNodeAffinity);

impl NodeAffinity {
    /// Builds the plugin from its args.
    pub fn new(args: NodeAffinityArgs) -> Self {
        let added_required = args
            .added_affinity
            .as_ref()
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|ns| {
                let pod = Pod {
                    spec: Some(PodSpec {
                        affinity: Some(k8s_openapi::api::core::v1::Affinity {
                            node_affinity: Some(ApiNodeAffinity {
                                required_during_scheduling_ignored_during_execution: Some(ns.clone()),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                RequiredNodeAffinity::from_pod(&pod)
            });
        let added_preferred = PreferredNodeAffinity::new(
            args.added_affinity
                .as_ref()
                .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref())
                .unwrap_or(&[]),
        );
        Self { added_required, added_preferred }
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &str {
        names::NODE_AFFINITY
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::Node, ActionType::ADD.or(ActionType::UPDATE_NODE_LABEL)),
            ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE_POD_OTHER),
        ]
    }
    crate::extension_points!(pre_filter, filter, pre_score, score);
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let required = RequiredNodeAffinity::from_pod(&pod.pod);
        if required.is_empty() && self.added_required.is_none() {
            return (None, Status::skip());
        }
        let terms_api = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|ns| ns.node_selector_terms.clone());
        state.write(PRE_FILTER_KEY, PreFilterState(required));
        let Some(terms) = terms_api.filter(|t| !t.is_empty()) else { return (None, Status::success()) };
        // Affinity to specific node names (metadata.name In [...]) narrows the search.
        let mut union: HashSet<String> = HashSet::new();
        for t in &terms {
            let mut term_names: Option<HashSet<String>> = None;
            for r in t.match_fields.iter().flatten() {
                if r.key == "metadata.name" && r.operator == "In" {
                    let s: HashSet<String> = r.values.iter().flatten().cloned().collect();
                    term_names = Some(match term_names {
                        None => s,
                        Some(prev) => prev.intersection(&s).cloned().collect(),
                    });
                }
            }
            match term_names {
                // A term without a name restriction admits every node (terms are ORed).
                None => return (None, Status::success()),
                Some(n) => union.extend(n),
            }
        }
        if union.is_empty() {
            return (None, Status::unresolvable(ERR_REASON_CONFLICT));
        }
        (Some(PreFilterResult { node_names: Some(union) }), Status::success())
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(n) = node.node() else { return Status::error("node not found") };
        if let Some(added) = &self.added_required
            && !added.matches(n)
        {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        let matches = match state.read::<PreFilterState>(PRE_FILTER_KEY) {
            Some(s) => s.0.matches(n),
            None => RequiredNodeAffinity::from_pod(&pod.pod).matches(n),
        };
        if !matches {
            return Status::unresolvable(ERR_REASON_POD);
        }
        Status::success()
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let preferred = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| na.preferred_during_scheduling_ignored_during_execution.as_deref())
            .unwrap_or(&[]);
        let p = PreferredNodeAffinity::new(preferred);
        if p.is_empty() && self.added_preferred.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, PreScoreState(p));
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(n) = node.node() else { return Err(Status::error("node not found")) };
        let mut score = self.added_preferred.score(n);
        if let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) {
            score += s.0.score(n);
        }
        Ok(score)
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

/// Keeps the compiled-term type in the public API surface for custom plugins.
pub type Term = CompiledNodeSelectorTerm;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::test_util::{filter_all, score_all, snapshot};
    use crate::testing::{PodBuilder, make_node, make_pod};

    fn nodes() -> Vec<k8s_openapi::api::core::v1::Node> {
        vec![
            make_node("n1").label("disk", "ssd").label("gen", "3").obj(),
            make_node("n2").label("disk", "hdd").label("gen", "5").obj(),
            make_node("n3").obj(),
        ]
    }

    fn check(pod: PodBuilder, want_fit: &[bool]) {
        let snap = snapshot(nodes(), &[]);
        let got = filter_all(&NodeAffinity::new(Default::default()), &pod.obj(), &snap);
        let fit: Vec<bool> = got.iter().map(|s| s.is_success()).collect();
        assert_eq!(fit, want_fit);
        for s in got.iter().filter(|s| !s.is_success()) {
            assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        }
    }

    #[test]
    fn node_selector_and_required_affinity_filter_nodes() {
        check(make_pod("p"), &[true, true, true]);
        check(make_pod("p").node_selector(&[("disk", "ssd")]), &[true, false, false]);
        check(make_pod("p").node_affinity("disk", "In", &["ssd", "hdd"]), &[true, true, false]);
        check(make_pod("p").node_affinity("disk", "NotIn", &["ssd"]), &[false, true, true]);
        check(make_pod("p").node_affinity("disk", "Exists", &[]), &[true, true, false]);
        check(make_pod("p").node_affinity("disk", "DoesNotExist", &[]), &[false, false, true]);
        check(make_pod("p").node_affinity("gen", "Gt", &["4"]), &[false, true, false]);
        check(make_pod("p").node_affinity("gen", "Lt", &["4"]), &[true, false, false]);
        // Terms are ORed; nodeSelector is ANDed with them.
        check(
            make_pod("p").node_affinity("disk", "In", &["ssd"]).node_affinity("gen", "In", &["5"]),
            &[true, true, false],
        );
        check(make_pod("p").node_affinity("disk", "Exists", &[]).node_selector(&[("gen", "5")]), &[false, true, false]);
        check(make_pod("p").node_affinity_names(&["n2"]), &[false, true, false]);
    }

    #[test]
    fn mismatch_reports_the_kubernetes_reason() {
        let snap = snapshot(nodes(), &[]);
        let got = filter_all(
            &NodeAffinity::new(Default::default()),
            &make_pod("p").node_selector(&[("disk", "nvme")]).obj(),
            &snap,
        );
        assert_eq!(got[0].message(), ERR_REASON_POD);
    }

    #[test]
    fn preferred_terms_score_by_weight() {
        let snap = snapshot(nodes(), &[]);
        let pod = make_pod("p")
            .preferred_node_affinity(10, "disk", &["ssd"])
            .preferred_node_affinity(30, "gen", &["5"])
            .obj();
        assert_eq!(score_all(&NodeAffinity::new(Default::default()), &pod, &snap), vec![33, 100, 0]);
        assert_eq!(score_all(&NodeAffinity::new(Default::default()), &make_pod("p").obj(), &snap), vec![0, 0, 0]);
    }
}
