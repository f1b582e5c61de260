//! NodePorts: a pod asking for host ports fits only where those ports are free.

use crate::framework::{
    ActionType, ClusterEvent, CycleState, EventResource, FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, Snapshot, Status,
};

use super::names;

/// Reason for a port clash.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// The NodePorts plugin.
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &str {
        names::NODE_PORTS
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::Pod, ActionType::DELETE), ClusterEvent::NODE_ADD]
    }
    crate::extension_points!(pre_filter, filter);
}

impl PreFilterPlugin for NodePorts {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if pod.host_ports.is_empty() {
            return (None, Status::skip());
        }
        (None, Status::success())
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if node.host_ports_conflict(&pod.host_ports) {
            return Status::unschedulable(ERR_REASON);
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter_all, snapshot};
    use crate::testing::{make_node, make_pod};
    use k8s_openapi::api::core::v1::Pod;

    fn check(pod: Pod, existing: Pod, fits: bool) {
        let snap = snapshot(vec![make_node("n").obj()], &[existing]);
        let got = filter_all(&NodePorts, &pod, &snap).remove(0);
        assert_eq!(got.is_success(), fits, "{got}");
        if !fits {
            assert_eq!(got.message(), ERR_REASON);
        }
    }

    #[test]
    fn host_ports_conflict_on_same_protocol_and_overlapping_ip() {
        let on_node = |b: crate::testing::PodBuilder| b.node("n").obj();
        check(make_pod("p").host_port("", "", 8080).obj(), on_node(make_pod("e").host_port("", "", 8080)), false);
        check(make_pod("p").host_port("", "UDP", 8080).obj(), on_node(make_pod("e").host_port("", "", 8080)), true);
        check(
            make_pod("p").host_port("10.0.0.1", "", 8080).obj(),
            on_node(make_pod("e").host_port("10.0.0.2", "", 8080)),
            true,
        );
        check(
            make_pod("p").host_port("10.0.0.1", "", 8080).obj(),
            on_node(make_pod("e").host_port("", "", 8080)),
            false,
        );
        check(make_pod("p").host_port("", "", 8081).obj(), on_node(make_pod("e").host_port("", "", 8080)), true);
        check(make_pod("p").obj(), on_node(make_pod("e").host_port("", "", 8080)), true);
    }
}
