//! TaintToleration: a node's NoSchedule/NoExecute taints must be tolerated; untolerated
//! PreferNoSchedule taints lower the score.

use k8s_openapi::api::core::v1::Toleration;

use crate::framework::{
    ActionType, ClusterEvent, CycleState, EventResource, FilterPlugin, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo,
    PreScorePlugin, ScorePlugin, Snapshot, Status, find_untolerated_taint, tolerates_taint,
};
use std::sync::Arc;

use super::{default_normalize_score, names};

const PRE_SCORE_KEY: &str = "PreScoreTaintToleration";

/// The TaintToleration plugin.
pub struct TaintToleration;

#[derive(Clone)]
struct PreScoreState {
    tolerations_prefer_no_schedule: Vec<Toleration>,
}

impl Plugin for TaintToleration {
    fn name(&self) -> &str {
        names::TAINT_TOLERATION
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::Node, ActionType::ADD.or(ActionType::UPDATE_NODE_TAINT)),
            ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE_POD_TOLERATIONS),
        ]
    }
    crate::extension_points!(filter, pre_score, score);
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let taints = node.taints();
        if taints.is_empty() {
            return Status::success();
        }
        match find_untolerated_taint(taints, pod.tolerations(), |t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        {
            None => Status::success(),
            Some(t) => Status::unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or("")
            )),
        }
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let tolerations_prefer_no_schedule = pod
            .tolerations()
            .iter()
            .filter(|t| t.effect.as_deref().unwrap_or("").is_empty() || t.effect.as_deref() == Some("PreferNoSchedule"))
            .cloned()
            .collect();
        state.write(PRE_SCORE_KEY, PreScoreState { tolerations_prefer_no_schedule });
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if node.taints().is_empty() {
            return Ok(0);
        }
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Err(Status::error("reading \"PreScoreTaintToleration\" from cycleState: not found"));
        };
        let count = node
            .taints()
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule")
            .filter(|t| !s.tolerations_prefer_no_schedule.iter().any(|tol| tolerates_taint(tol, t)))
            .count();
        Ok(count as i64)
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::plugins::test_util::{filter_all, score_all, snapshot};
    use crate::testing::{PodBuilder, make_node, make_pod};
    use k8s_openapi::api::core::v1::Node;

    fn check_filter(pod: PodBuilder, node: Node, want: Option<&str>) {
        let snap = snapshot(vec![node], &[]);
        let got = filter_all(&TaintToleration, &pod.obj(), &snap).remove(0);
        match want {
            None => assert!(got.is_success(), "{got}"),
            Some(r) => {
                assert_eq!(got.code(), Code::UnschedulableAndUnresolvable);
                assert_eq!(got.message(), r);
            }
        }
    }

    #[test]
    fn untolerated_no_schedule_taints_reject_the_node() {
        let tainted = || make_node("n").taint("dedicated", "x", "NoSchedule").obj();
        check_filter(make_pod("p"), tainted(), Some("node(s) had untolerated taint {dedicated: x}"));
        check_filter(make_pod("p").toleration("dedicated", "Equal", "x", "NoSchedule"), tainted(), None);
        check_filter(make_pod("p").toleration("dedicated", "Exists", "", ""), tainted(), None);
        check_filter(
            make_pod("p").toleration("dedicated", "Equal", "y", "NoSchedule"),
            tainted(),
            Some("node(s) had untolerated taint {dedicated: x}"),
        );
        check_filter(make_pod("p"), make_node("n").taint("soft", "", "PreferNoSchedule").obj(), None);
        check_filter(
            make_pod("p"),
            make_node("n").taint("gone", "", "NoExecute").obj(),
            Some("node(s) had untolerated taint {gone: }"),
        );
    }

    #[test]
    fn prefer_no_schedule_taints_lower_the_score() {
        let snap = snapshot(
            vec![
                make_node("clean").obj(),
                make_node("one").taint("a", "", "PreferNoSchedule").obj(),
                make_node("two").taint("a", "", "PreferNoSchedule").taint("b", "", "PreferNoSchedule").obj(),
            ],
            &[],
        );
        assert_eq!(score_all(&TaintToleration, &make_pod("p").obj(), &snap), vec![100, 50, 0]);
        let tolerant = make_pod("p").toleration("a", "Exists", "", "PreferNoSchedule").obj();
        assert_eq!(score_all(&TaintToleration, &tolerant, &snap), vec![100, 100, 0]);
    }
}
