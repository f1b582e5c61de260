//! The resource-allocation scorer shared by the resource plugins
//! (`noderesources/resource_allocation.go`): per configured resource, the node's requested amount
//! including the incoming pod versus allocatable, combined by a strategy.

use crate::framework::resource::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use crate::framework::{MAX_NODE_SCORE, NodeInfo, PodInfo, Resource};

use super::ResourceSpec;

/// Which field of a [`Resource`] a resource name denotes, resolved once per lookup instead of
/// once per field read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Cpu,
    Memory,
    EphemeralStorage,
    Pods,
    /// Extended resources, hugepages...
    Scalar,
}

fn kind(name: &str) -> Kind {
    match name {
        CPU => Kind::Cpu,
        MEMORY => Kind::Memory,
        EPHEMERAL_STORAGE => Kind::EphemeralStorage,
        PODS => Kind::Pods,
        _ => Kind::Scalar,
    }
}

fn get(r: &Resource, k: Kind, name: &str) -> i64 {
    match k {
        Kind::Cpu => r.milli_cpu,
        Kind::Memory => r.memory,
        Kind::EphemeralStorage => r.ephemeral_storage,
        Kind::Pods => r.allowed_pod_number,
        Kind::Scalar => r.scalar_resources.get(name).copied().unwrap_or(0),
    }
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
        let k = kind(name);
        let non_zero = !use_requested && matches!(k, Kind::Cpu | Kind::Memory);
        let pod_req = if non_zero { get(&pod.non_zero_requests, k, name) } else { get(&pod.requests, k, name) };
        if pod_req == 0 && k == Kind::Scalar {
            return (0, 0);
        }
        let node_req = if non_zero { get(node.non_zero_requested(), k, name) } else { get(node.requested(), k, name) };
        (node_req + pod_req, get(node.allocatable(), k, name))
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
    // Evaluated once into a stack buffer (the default is 2 resources), not once per pass.
    let mut buf = [0f64; 8];
    let mut spill = Vec::new();
    let mut n = 0usize;
    for (r, a) in ra {
        if a == 0 {
            continue;
        }
        let f = (r as f64 / a as f64).min(1.0);
        if n < buf.len() {
            buf[n] = f;
        } else {
            if spill.is_empty() {
                spill.extend_from_slice(&buf);
            }
            spill.push(f);
        }
        n += 1;
    }
    let all: &[f64] = if n <= buf.len() { &buf[..n] } else { &spill };
    let fractions = all.iter().copied();
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
