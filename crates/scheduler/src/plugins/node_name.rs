//! NodeName: a pod that names its node (`spec.nodeName`) fits only there.

use crate::framework::{ClusterEvent, CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, Status};

use super::names;

/// Reason for any other node.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// The NodeName plugin.
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &str {
        names::NODE_NAME
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::NODE_ADD]
    }
    crate::extension_points!(filter);
}

impl FilterPlugin for NodeName {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let want = pod.node_name();
        if want.is_empty() || want == node.name() {
            return Status::success();
        }
        Status::unresolvable(ERR_REASON)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter_all, snapshot};
    use crate::testing::{make_node, make_pod};

    #[test]
    fn only_the_named_node_fits() {
        let snap = snapshot(vec![make_node("a").obj(), make_node("b").obj()], &[]);
        let got: Vec<bool> =
            filter_all(&NodeName, &make_pod("p").node("b").obj(), &snap).iter().map(|s| s.is_success()).collect();
        assert_eq!(got, vec![false, true]);
        let got: Vec<bool> =
            filter_all(&NodeName, &make_pod("p").obj(), &snap).iter().map(|s| s.is_success()).collect();
        assert_eq!(got, vec![true, true]);
    }
}
