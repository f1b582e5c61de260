//! NodeResourcesFit: the pod's requests must fit in the node's allocatable minus what its pods
//! already request (cpu, memory, ephemeral-storage, pod count, extended resources); nodes are
//! scored with `LeastAllocated` (default), `MostAllocated` or `RequestedToCapacityRatio`.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;

use crate::framework::{
    ActionType, ClusterEvent, Code, CycleState, EventResource, FilterPlugin, NodeInfo, Plugin, PodInfo,
    PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, Snapshot, Status,
};
use crate::plugins::names;

use super::resource_allocation::{
    UtilizationShapePoint, least_allocated, most_allocated, requested_and_allocatable, requested_to_capacity_ratio,
};
use super::{ResourceSpec, default_resources};

/// `ScoringStrategyType`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum ScoringStrategyType {
    /// Prefer the least used nodes (spreading). The default.
    #[default]
    LeastAllocated,
    /// Prefer the most used nodes (bin packing).
    MostAllocated,
    /// A custom function of utilization.
    RequestedToCapacityRatio,
}

/// `RequestedToCapacityRatioParam`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RequestedToCapacityRatioParam {
    /// The function's points, by increasing utilization.
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

/// `ScoringStrategy`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScoringStrategy {
    /// The strategy.
    #[serde(rename = "type", default)]
    pub strategy: ScoringStrategyType,
    /// Resources and weights (cpu and memory, weight 1, by default).
    #[serde(default)]
    pub resources: Vec<ResourceSpec>,
    /// Parameters of `RequestedToCapacityRatio`.
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

/// `NodeResourcesFitArgs`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FitArgs {
    /// Extended resources not checked by Filter.
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    /// Extended resource groups (the part before `/`) not checked by Filter.
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    /// How nodes are scored.
    pub scoring_strategy: Option<ScoringStrategy>,
}

/// The NodeResourcesFit plugin.
pub struct Fit {
    ignored_resources: Vec<String>,
    ignored_resource_groups: Vec<String>,
    strategy: ScoringStrategyType,
    resources: Vec<ResourceSpec>,
    shape: Vec<UtilizationShapePoint>,
}

/// One resource the node lacks (`InsufficientResource`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsufficientResource {
    /// The resource name.
    pub resource_name: String,
    /// `Insufficient <name>` or `Too many pods`.
    pub reason: Cow<'static, str>,
    /// What the pod requests.
    pub requested: i64,
    /// What the node's pods already use.
    pub used: i64,
    /// The node's allocatable.
    pub capacity: i64,
    /// Whether even an empty node could not hold the pod (preemption cannot help).
    pub unresolvable: bool,
}

impl Fit {
    /// Builds from args.
    ///
    /// # Errors
    /// A RequestedToCapacityRatio strategy without a valid shape.
    pub fn new(args: FitArgs) -> Result<Self, String> {
        let s = args.scoring_strategy.unwrap_or_default();
        let shape = s.requested_to_capacity_ratio.map(|r| r.shape).unwrap_or_default();
        if s.strategy == ScoringStrategyType::RequestedToCapacityRatio {
            if shape.is_empty() {
                return Err("NodeResourcesFit: requestedToCapacityRatio.shape must not be empty".into());
            }
            if shape.windows(2).any(|w| w[1].utilization <= w[0].utilization) {
                return Err("NodeResourcesFit: shape utilization values must be strictly increasing".into());
            }
            if shape.iter().any(|p| !(0..=100).contains(&p.utilization) || !(0..=10).contains(&p.score)) {
                return Err("NodeResourcesFit: shape utilization must be in [0, 100] and score in [0, 10]".into());
            }
        }
        Ok(Self {
            ignored_resources: args.ignored_resources,
            ignored_resource_groups: args.ignored_resource_groups,
            strategy: s.strategy,
            resources: if s.resources.is_empty() { default_resources() } else { s.resources },
            shape,
        })
    }

    fn ignored(&self, name: &str) -> bool {
        self.ignored_resources.iter().any(|r| r == name)
            || name.split_once('/').is_some_and(|(g, _)| self.ignored_resource_groups.iter().any(|x| x == g))
    }

    /// The resources `node` lacks for `pod` (`fitsRequest`).
    pub fn insufficient_resources(&self, pod: &PodInfo, node: &NodeInfo) -> Vec<InsufficientResource> {
        let mut out = Vec::new();
        let alloc = node.allocatable();
        let used = node.requested();
        let pods = node.pods().len() as i64;
        if pods + 1 > alloc.allowed_pod_number {
            out.push(InsufficientResource {
                resource_name: "pods".into(),
                reason: Cow::Borrowed("Too many pods"),
                requested: 1,
                used: pods,
                capacity: alloc.allowed_pod_number,
                unresolvable: false,
            });
        }
        let req = &pod.requests;
        let mut check = |name: &str, r: i64, a: i64, u: i64, reason: Cow<'static, str>| {
            if r > 0 && r > a - u {
                out.push(InsufficientResource {
                    resource_name: name.to_string(),
                    reason,
                    requested: r,
                    used: u,
                    capacity: a,
                    unresolvable: r > a,
                });
            }
        };
        check("cpu", req.milli_cpu, alloc.milli_cpu, used.milli_cpu, Cow::Borrowed("Insufficient cpu"));
        check("memory", req.memory, alloc.memory, used.memory, Cow::Borrowed("Insufficient memory"));
        check(
            "ephemeral-storage",
            req.ephemeral_storage,
            alloc.ephemeral_storage,
            used.ephemeral_storage,
            Cow::Borrowed("Insufficient ephemeral-storage"),
        );
        for (name, r) in &req.scalar_resources {
            if self.ignored(name) {
                continue;
            }
            check(name, *r, alloc.get(name), used.get(name), Cow::Owned(format!("Insufficient {name}")));
        }
        out
    }
}

impl Plugin for Fit {
    fn name(&self) -> &str {
        names::NODE_RESOURCES_FIT
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::Pod, ActionType::DELETE.or(ActionType::UPDATE_POD_SCALE_DOWN)),
            ClusterEvent::new(EventResource::Node, ActionType::ADD.or(ActionType::UPDATE_NODE_ALLOCATABLE)),
            ClusterEvent::new(EventResource::UnscheduledPod, ActionType::UPDATE_POD_SCALE_DOWN),
        ]
    }
    crate::extension_points!(pre_filter, filter, pre_score, score);
}

impl PreFilterPlugin for Fit {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if let Some(e) = &pod.parse_error {
            return (None, Status::unresolvable(e.clone()));
        }
        (None, Status::success())
    }
}

impl FilterPlugin for Fit {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let insufficient = self.insufficient_resources(pod, node);
        if insufficient.is_empty() {
            return Status::success();
        }
        let code = if insufficient.iter().any(|r| r.unresolvable) {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        Status::with_reasons(code, insufficient.into_iter().map(|r| r.reason).collect())
    }
}

impl PreScorePlugin for Fit {
    fn pre_score(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        Status::success()
    }
}

impl ScorePlugin for Fit {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let use_requested = self.strategy == ScoringStrategyType::RequestedToCapacityRatio;
        let ra = requested_and_allocatable(node, pod, &self.resources, use_requested);
        Ok(match self.strategy {
            ScoringStrategyType::LeastAllocated => least_allocated(ra, &self.resources),
            ScoringStrategyType::MostAllocated => most_allocated(ra, &self.resources),
            ScoringStrategyType::RequestedToCapacityRatio => {
                requested_to_capacity_ratio(ra, &self.resources, &self.shape)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::test_util::{filter_all, score_all, snapshot};
    use crate::testing::{PodBuilder, make_node, make_pod};
    use k8s_openapi::api::core::v1::Pod;

    fn node() -> crate::testing::NodeBuilder {
        make_node("n").capacity(&[
            ("cpu", "2"),
            ("memory", "4Gi"),
            ("pods", "3"),
            ("nvidia.com/gpu", "1"),
            ("ephemeral-storage", "10Gi"),
        ])
    }

    fn check(pod: PodBuilder, existing: &[Pod], want: (Code, &[&str])) {
        let snap = snapshot(vec![node().obj()], existing);
        let got = filter_all(&Fit::new(Default::default()).unwrap(), &pod.obj(), &snap).remove(0);
        let reasons: Vec<&str> = got.reasons().iter().map(|r| r.as_ref()).collect();
        assert_eq!((got.code(), reasons.as_slice()), want);
    }

    #[test]
    fn requests_must_fit_in_what_is_left() {
        let busy = [make_pod("e").req(&[("cpu", "1500m"), ("memory", "1Gi")]).node("n").obj()];
        check(make_pod("p").req(&[("cpu", "500m")]), &busy, (Code::Success, &[]));
        check(make_pod("p").req(&[("cpu", "501m")]), &busy, (Code::Unschedulable, &["Insufficient cpu"]));
        check(
            make_pod("p").req(&[("cpu", "1"), ("memory", "4Gi")]),
            &busy,
            (Code::Unschedulable, &["Insufficient cpu", "Insufficient memory"]),
        );
        check(make_pod("p").req(&[("nvidia.com/gpu", "1")]), &busy, (Code::Success, &[]));
        check(
            make_pod("p").req(&[("nvidia.com/gpu", "2")]),
            &busy,
            (Code::UnschedulableAndUnresolvable, &["Insufficient nvidia.com/gpu"]),
        );
        check(
            make_pod("p").req(&[("ephemeral-storage", "11Gi")]),
            &[],
            (Code::UnschedulableAndUnresolvable, &["Insufficient ephemeral-storage"]),
        );
        check(make_pod("p").req(&[("cpu", "3")]), &[], (Code::UnschedulableAndUnresolvable, &["Insufficient cpu"]));
    }

    #[test]
    fn init_containers_and_overhead_count_like_kubernetes() {
        check(make_pod("p").req(&[("cpu", "1")]).init_req(&[("cpu", "2")]), &[], (Code::Success, &[]));
        check(
            make_pod("p").req(&[("cpu", "1")]).init_req(&[("cpu", "2")]).overhead(&[("cpu", "1m")]),
            &[],
            (Code::UnschedulableAndUnresolvable, &["Insufficient cpu"]),
        );
    }

    #[test]
    fn pod_count_is_limited_by_allocatable_pods() {
        let three: Vec<Pod> = (0..3).map(|i| make_pod(&format!("e{i}")).node("n").obj()).collect();
        check(make_pod("p"), &three, (Code::Unschedulable, &["Too many pods"]));
        check(make_pod("p"), &three[..2], (Code::Success, &[]));
    }

    #[test]
    fn ignored_resources_are_not_checked() {
        let fit =
            Fit::new(FitArgs { ignored_resource_groups: vec!["nvidia.com".into()], ..Default::default() }).unwrap();
        let snap = snapshot(vec![node().obj()], &[]);
        assert!(filter_all(&fit, &make_pod("p").req(&[("nvidia.com/gpu", "5")]).obj(), &snap)[0].is_success());
    }

    fn strategy(t: ScoringStrategyType) -> Fit {
        Fit::new(FitArgs {
            scoring_strategy: Some(ScoringStrategy {
                strategy: t,
                resources: vec![],
                requested_to_capacity_ratio: Some(RequestedToCapacityRatioParam {
                    shape: vec![
                        UtilizationShapePoint { utilization: 0, score: 10 },
                        UtilizationShapePoint { utilization: 100, score: 0 },
                    ],
                }),
            }),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn scoring_strategies_rank_nodes_like_kubernetes() {
        let n = |name: &str| make_node(name).capacity(&[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")]).obj();
        let existing = [make_pod("e").req(&[("cpu", "2"), ("memory", "4Gi")]).node("busy").obj()];
        let snap = snapshot(vec![n("idle"), n("busy")], &existing);
        let pod = make_pod("p").req(&[("cpu", "1"), ("memory", "2Gi")]).obj();
        // idle: cpu (4-1)/4=75, mem (8-2)/8=75; busy: 25, 25.
        assert_eq!(score_all(&strategy(ScoringStrategyType::LeastAllocated), &pod, &snap), vec![75, 25]);
        assert_eq!(score_all(&strategy(ScoringStrategyType::MostAllocated), &pod, &snap), vec![25, 75]);
        assert_eq!(score_all(&strategy(ScoringStrategyType::RequestedToCapacityRatio), &pod, &snap), vec![75, 25]);
        // A pod without requests is scored with the non-zero defaults (100m, 200Mi).
        let be = make_pod("be").container_image("nginx").obj();
        let s = score_all(&strategy(ScoringStrategyType::LeastAllocated), &be, &snap);
        assert!(s[0] > s[1] && s[0] < 100, "{s:?}");
    }
}
