//! NodeResourcesBalancedAllocation: prefers nodes whose CPU and memory usage stay balanced after
//! placing the pod.

use std::sync::Arc;

use serde::Deserialize;

use crate::framework::{CycleState, NodeInfo, Plugin, PodInfo, PreScorePlugin, ScorePlugin, Snapshot, Status};
use crate::plugins::names;

use super::resource_allocation::{balanced, requested_and_allocatable};
use super::{ResourceSpec, default_resources};

/// `NodeResourcesBalancedAllocationArgs`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BalancedAllocationArgs {
    /// Resources to balance (cpu and memory by default).
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
}

/// The NodeResourcesBalancedAllocation plugin.
pub struct BalancedAllocation {
    resources: Vec<ResourceSpec>,
}

impl BalancedAllocation {
    /// Builds from args.
    pub fn new(args: BalancedAllocationArgs) -> Self {
        Self { resources: if args.resources.is_empty() { default_resources() } else { args.resources } }
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &str {
        names::NODE_RESOURCES_BALANCED_ALLOCATION
    }
    crate::extension_points!(pre_score, score);
}

impl PreScorePlugin for BalancedAllocation {
    fn pre_score(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        // A best-effort pod changes no balance.
        if self.resources.iter().all(|r| pod.requests.get(&r.name) == 0) {
            return Status::skip();
        }
        Status::success()
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(balanced(requested_and_allocatable(node, pod, &self.resources, true)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{score_all, snapshot};
    use crate::testing::{make_node, make_pod};

    #[test]
    fn balanced_usage_scores_higher() {
        let node = |n: &str| make_node(n).capacity(&[("cpu", "4"), ("memory", "4Gi"), ("pods", "10")]);
        let existing = vec![
            make_pod("cpu-heavy").req(&[("cpu", "3"), ("memory", "1Gi")]).node("a").obj(),
            make_pod("even").req(&[("cpu", "1"), ("memory", "1Gi")]).node("b").obj(),
        ];
        let snap = snapshot(vec![node("a").obj(), node("b").obj()], &existing);
        let pod = make_pod("p").req(&[("cpu", "1"), ("memory", "1Gi")]).obj();
        // a: cpu 4/4=1.0, mem 2/4=0.5 → std .25 → 75; b: .5/.5 → 100.
        assert_eq!(score_all(&BalancedAllocation::new(Default::default()), &pod, &snap), vec![75, 100]);
        // Best-effort pods are not scored by this plugin.
        assert_eq!(score_all(&BalancedAllocation::new(Default::default()), &make_pod("b").obj(), &snap), vec![0, 0]);
    }
}
