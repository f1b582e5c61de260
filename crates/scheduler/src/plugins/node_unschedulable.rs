//! NodeUnschedulable: rejects cordoned nodes (`spec.unschedulable`) unless the pod tolerates the
//! `node.kubernetes.io/unschedulable:NoSchedule` taint.

use k8s_openapi::api::core::v1::Taint;

use crate::framework::{
    ActionType, ClusterEvent, CycleState, EventResource, FilterPlugin, NodeInfo, Plugin, PodInfo, Status,
    tolerates_taint,
};

use super::names;

/// Reason for a cordoned node.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// Reason when the Node object is unknown.
pub const ERR_REASON_UNKNOWN_CONDITION: &str = "node(s) had unknown conditions";

/// The NodeUnschedulable plugin.
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &str {
        names::NODE_UNSCHEDULABLE
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::Node, ActionType::ADD.or(ActionType::UPDATE_NODE_TAINT)),
            ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE_POD_TOLERATIONS),
        ]
    }
    crate::extension_points!(filter);
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if node.node().is_none() {
            return Status::unresolvable(ERR_REASON_UNKNOWN_CONDITION);
        }
        if !node.unschedulable() {
            return Status::success();
        }
        let taint =
            Taint { key: "node.kubernetes.io/unschedulable".into(), effect: "NoSchedule".into(), ..Default::default() };
        if pod.tolerations().iter().any(|t| tolerates_taint(t, &taint)) {
            return Status::success();
        }
        Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter_all, snapshot};
    use crate::testing::{make_node, make_pod};
    use k8s_openapi::api::core::v1::{Node, Pod};

    fn check(pod: Pod, node: Node, want: Option<&str>) {
        let snap = snapshot(vec![node], &[]);
        let got = filter_all(&NodeUnschedulable, &pod, &snap).remove(0);
        match want {
            None => assert!(got.is_success(), "{got}"),
            Some(r) => assert_eq!(
                (got.code(), got.message().as_str()),
                (crate::framework::Code::UnschedulableAndUnresolvable, r)
            ),
        }
    }

    #[test]
    fn cordoned_nodes_are_rejected_unless_tolerated() {
        check(make_pod("p").obj(), make_node("n").obj(), None);
        check(make_pod("p").obj(), make_node("n").unschedulable().obj(), Some(ERR_REASON_UNSCHEDULABLE));
        check(
            make_pod("p").toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule").obj(),
            make_node("n").unschedulable().obj(),
            None,
        );
    }
}
