//! The resource-allocation scorer shared by the resource plugins
//! (`noderesources/resource_allocation.go`): per configured resource, the node's requested amount
//! including the incoming pod versus allocatable, combined by a strategy.

use crate::framework::resource::{CPU, MEMORY};
use crate::framework::{MAX_NODE_SCORE, NodeInfo, PodInfo};

use super::ResourceSpec;

/// Whether a resource is "scalar" (extended, hugepages...) rather than cpu/memory/storage.
fn is_scalar(name: &str) -> bool {
    !matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pods")
}

/// For each resource: `(requested incl. pod, allocatable)`. `use_requested` false means CPU and
/// memory count non-zero defaults for containers without requests. Extended resources the pod
/// does not request give `(0, 0)` (skipped).
pub fn requested_and_allocatable<'a>(
    node: &'a NodeInfo,
    pod: &'a PodInfo,
    resources: &'a [ResourceSpec],
    use_requested: bool,
) -> impl Iterator<Item = (i64, i64)> + Clone + 'a {
    resources.iter().map(move |r| {
        let name = r.name.as_str();
        let pod_req = if !use_requested && (name == CPU || name == MEMORY) {
            pod.non_zero_requests.get(name)
        } else {
            pod.requests.get(name)
        };
        if pod_req == 0 && is_scalar(name) {
            return (0, 0);
        }
        let node_req = if !use_requested && (name == CPU || name == MEMORY) {
            node.non_zero_requested().get(name)
        } else {
            node.requested().get(name)
        };
        (node_req + pod_req, node.allocatable().get(name))
    })
}

/// `LeastAllocated`: free fraction × 100, weighted average (favours empty nodes → spreading).
pub fn least_allocated(ra: impl Iterator<Item = (i64, i64)>, resources: &[ResourceSpec]) -> i64 {
    weighted(ra, resources, |req, alloc| if req > alloc { 0 } else { (alloc - req) * MAX_NODE_SCORE / alloc }, false)
}

/// `MostAllocated`: used fraction × 100, weighted average (favours full nodes → bin packing).
pub fn most_allocated(ra: impl Iterator<Item = (i64, i64)>, resources: &[ResourceSpec]) -> i64 {
    weighted(ra, resources, |req, alloc| req.min(alloc) * MAX_NODE_SCORE / alloc, false)
}

/// One point of a `RequestedToCapacityRatio` shape: utilization 0-100 → score 0-10.
#[derive(Clone, Debug, serde::Deserialize, PartialEq, Eq)]
pub struct UtilizationShapePoint {
    /// Utilization in percent.
    pub utilization: i64,
    /// Score 0-10 (scaled ×10).
    pub score: i64,
}

/// `RequestedToCapacityRatio`: a piecewise-linear function of utilization, weighted average
/// (rounded).
pub fn requested_to_capacity_ratio(
    ra: impl Iterator<Item = (i64, i64)>,
    resources: &[ResourceSpec],
    shape: &[UtilizationShapePoint],
) -> i64 {
    let f = |p: i64| -> i64 {
        for (i, pt) in shape.iter().enumerate() {
            if p <= pt.utilization {
                if i == 0 {
                    return shape[0].score * 10;
                }
                let prev = &shape[i - 1];
                let (s0, s1) = (prev.score * 10, pt.score * 10);
                return s0 + (s1 - s0) * (p - prev.utilization) / (pt.utilization - prev.utilization).max(1);
            }
        }
        shape.last().map_or(0, |pt| pt.score * 10)
    };
    weighted(ra, resources, |req, alloc| if req > alloc { f(100) } else { f(req * 100 / alloc) }, true)
}

fn weighted(
    ra: impl Iterator<Item = (i64, i64)>,
    resources: &[ResourceSpec],
    score: impl Fn(i64, i64) -> i64,
    round: bool,
) -> i64 {
    let (mut total, mut weights) = (0i64, 0i64);
    for ((req, alloc), r) in ra.zip(resources) {
        if alloc == 0 {
            continue;
        }
        let w = if r.weight == 0 { 1 } else { r.weight };
        total += score(req, alloc) * w;
        weights += w;
    }
    if weights == 0 {
        return 0;
    }
    if round { (total as f64 / weights as f64).round() as i64 } else { total / weights }
}

/// `BalancedAllocation`: 100 × (1 − standard deviation of the used fractions).
pub fn balanced(ra: impl Iterator<Item = (i64, i64)> + Clone) -> i64 {
    let fractions = ra.filter(|(_, a)| *a != 0).map(|(r, a)| (r as f64 / a as f64).min(1.0));
    let (n, sum) = fractions.clone().fold((0usize, 0f64), |(n, s), f| (n + 1, s + f));
    let std = match n {
        0 | 1 => 0.0,
        2 => {
            let mut it = fractions;
            let (a, b) = (it.next().unwrap_or(0.0), it.next().unwrap_or(0.0));
            ((a - b) / 2.0).abs()
        }
        n => {
            let mean = sum / n as f64;
            (fractions.map(|f| (f - mean) * (f - mean)).sum::<f64>() / n as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}
