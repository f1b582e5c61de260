//! `Diagnosis` and `FitError`: why a pod fits no node, aggregated into the message users see in
//! the FailedScheduling event and the PodScheduled condition.

use std::collections::{BTreeMap, HashSet};

use super::interface::NodeToStatus;

/// What went wrong in one scheduling attempt (`framework.Diagnosis`).
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    /// Per node, the status that rejected it.
    pub node_to_status: NodeToStatus,
    /// Plugins that rejected the pod (they decide which events requeue it).
    pub unschedulable_plugins: HashSet<String>,
    /// A PreFilter rejection message (then no node was filtered).
    pub pre_filter_msg: String,
    /// The PostFilter (preemption) outcome message.
    pub post_filter_msg: String,
}

/// "No node fits" (`framework.FitError`).
#[derive(Clone, Debug, Default)]
pub struct FitError {
    /// Nodes in the snapshot.
    pub num_all_nodes: usize,
    /// The details.
    pub diagnosis: Diagnosis,
}

impl FitError {
    /// The message in Kubernetes' format:
    /// `0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: x}, 2 Insufficient cpu.
    /// preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.`
    ///
    /// Reasons are counted over nodes (nodes never evaluated count with the absent-nodes status),
    /// rendered `"<count> <reason>"` and sorted as strings.
    pub fn message(&self) -> String {
        let mut msg = format!("0/{} nodes are available:", self.num_all_nodes);
        let d = &self.diagnosis;
        let push = |msg: &mut String, part: &str| {
            msg.push(' ');
            msg.push_str(part);
            if !part.ends_with('.') {
                msg.push('.');
            }
        };
        if !d.pre_filter_msg.is_empty() {
            push(&mut msg, &d.pre_filter_msg);
        } else {
            let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
            for (_, s) in d.node_to_status.iter() {
                for r in s.reasons() {
                    *histogram.entry(r.to_string()).or_insert(0) += 1;
                }
            }
            let absent = self.num_all_nodes.saturating_sub(d.node_to_status.len());
            if absent > 0 {
                for r in d.node_to_status.absent_nodes_status().reasons() {
                    *histogram.entry(r.to_string()).or_insert(0) += absent;
                }
            }
            let mut parts: Vec<String> = histogram.into_iter().map(|(r, n)| format!("{n} {r}")).collect();
            parts.sort();
            if !parts.is_empty() {
                push(&mut msg, &parts.join(", "));
            }
        }
        if !d.post_filter_msg.is_empty() {
            push(&mut msg, &d.post_filter_msg);
        }
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Status;

    #[test]
    fn message_counts_sorts_and_appends_preemption_outcome() {
        let mut d = Diagnosis::default();
        d.node_to_status.set("a", Status::unresolvable("node(s) had untolerated taint {dedicated: x}"));
        d.node_to_status.set("b", Status::unschedulable("Insufficient cpu"));
        d.node_to_status.set("c", Status::unschedulable("Insufficient cpu"));
        d.post_filter_msg = "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.".into();
        let e = FitError { num_all_nodes: 3, diagnosis: d };
        assert_eq!(
            e.message(),
            "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: x}, 2 Insufficient cpu. \
             preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn absent_nodes_count_with_the_absent_status_and_prefilter_message_wins() {
        let mut d = Diagnosis::default();
        d.node_to_status.set("a", Status::unschedulable("Insufficient memory"));
        d.node_to_status
            .set_absent_nodes_status(Status::unresolvable("node(s) didn't satisfy plugin(s) [NodeAffinity]"));
        let e = FitError { num_all_nodes: 4, diagnosis: d.clone() };
        assert_eq!(
            e.message(),
            "0/4 nodes are available: 1 Insufficient memory, 3 node(s) didn't satisfy plugin(s) [NodeAffinity]."
        );
        d.pre_filter_msg = "pod affinity terms conflict".into();
        let e = FitError { num_all_nodes: 4, diagnosis: d };
        assert_eq!(e.message(), "0/4 nodes are available: pod affinity terms conflict.");
    }
}
