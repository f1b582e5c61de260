//! SchedulingGates: pods with `spec.schedulingGates` wait outside activeQ until the gates are
//! removed (KEP-3521).

use crate::framework::{ActionType, ClusterEvent, Code, EventResource, Plugin, PodInfo, PreEnqueuePlugin, Status};

use super::names;

/// The SchedulingGates plugin.
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &str {
        names::SCHEDULING_GATES
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED)]
    }
    crate::extension_points!(pre_enqueue);
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates: Vec<&str> = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .into_iter()
            .flatten()
            .map(|g| g.name.as_str())
            .collect();
        if gates.is_empty() {
            return Status::success();
        }
        Status::new(Code::UnschedulableAndUnresolvable, format!("waiting for scheduling gates: [{}]", gates.join(" ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::make_pod;

    #[test]
    fn gated_pods_are_kept_out_with_the_gate_names() {
        let s = SchedulingGates.pre_enqueue(&make_pod("p").scheduling_gate("a").scheduling_gate("b").info());
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "waiting for scheduling gates: [a b]");
        assert!(SchedulingGates.pre_enqueue(&make_pod("p").info()).is_success());
    }
}
