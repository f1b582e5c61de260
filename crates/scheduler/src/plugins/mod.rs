//! In-tree plugins, one module each (`pkg/scheduler/framework/plugins`). Names live in [`names`].
//!
//! Every plugin depends only on [`crate::framework`].

pub mod default_binder;
pub mod default_preemption;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_unschedulable;
pub mod noderesources;
mod pod_count_memo;
pub mod pod_topology_spread;
pub mod queue_sort;
pub mod scheduling_gates;
pub mod taint_toleration;

use std::collections::HashMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::framework::{MAX_NODE_SCORE, Plugin, Registry};

/// Adds `by` to the pod count of topology value `value` (a node label value), allocating the
/// key only when the value is new; shared by the topology-counting plugins (InterPodAffinity,
/// PodTopologySpread).
pub(crate) fn add_to_count(counts: &mut HashMap<String, i64>, value: &str, by: i64) {
    match counts.get_mut(value) {
        Some(n) => *n += by,
        None => {
            counts.insert(value.to_string(), by);
        }
    }
}

/// Plugin names, as used in KubeSchedulerConfiguration (`plugins/names`).
pub mod names {
    /// Orders activeQ by priority, then queue time.
    pub const PRIORITY_SORT: &str = "PrioritySort";
    /// Keeps pods with `spec.schedulingGates` out of activeQ.
    pub const SCHEDULING_GATES: &str = "SchedulingGates";
    /// Rejects nodes with `spec.unschedulable`.
    pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
    /// Rejects nodes other than `spec.nodeName`.
    pub const NODE_NAME: &str = "NodeName";
    /// Taints and tolerations.
    pub const TAINT_TOLERATION: &str = "TaintToleration";
    /// nodeSelector and node affinity.
    pub const NODE_AFFINITY: &str = "NodeAffinity";
    /// Host ports.
    pub const NODE_PORTS: &str = "NodePorts";
    /// Resource requests vs allocatable; resource scoring strategies.
    pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
    /// Balanced resource usage.
    pub const NODE_RESOURCES_BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
    /// Prefers nodes that already have the images.
    pub const IMAGE_LOCALITY: &str = "ImageLocality";
    /// Pod affinity and anti-affinity.
    pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
    /// Topology spread constraints.
    pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
    /// Preemption of lower-priority pods.
    pub const DEFAULT_PREEMPTION: &str = "DefaultPreemption";
    /// Binds through the API.
    pub const DEFAULT_BINDER: &str = "DefaultBinder";
}

/// The default plugins of a profile with their score weights, in Kubernetes 1.33's order
/// (`getDefaultPlugins`, all through `multiPoint`). Volume and DRA plugins are not part of skiff.
pub const DEFAULT_MULTI_POINT: &[(&str, i64)] = &[
    (names::SCHEDULING_GATES, 0),
    (names::PRIORITY_SORT, 0),
    (names::NODE_UNSCHEDULABLE, 0),
    (names::NODE_NAME, 0),
    (names::TAINT_TOLERATION, 3),
    (names::NODE_AFFINITY, 2),
    (names::NODE_PORTS, 0),
    (names::NODE_RESOURCES_FIT, 1),
    (names::POD_TOPOLOGY_SPREAD, 2),
    (names::INTER_POD_AFFINITY, 2),
    (names::DEFAULT_PREEMPTION, 0),
    (names::NODE_RESOURCES_BALANCED_ALLOCATION, 1),
    (names::IMAGE_LOCALITY, 1),
    (names::DEFAULT_BINDER, 0),
];

/// Parses plugin args (`pluginConfig[].args`) into `T`, defaulting when absent.
///
/// # Errors
/// `decoding args for plugin X: ...` on a shape error.
pub fn decode_args<T: DeserializeOwned + Default>(name: &str, args: Option<&serde_json::Value>) -> Result<T, String> {
    match args {
        None | Some(serde_json::Value::Null) => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("decoding args for plugin {name}: {e}")),
    }
}

/// Every in-tree plugin (`NewInTreeRegistry`).
pub fn in_tree_registry() -> Registry {
    let mut r = Registry::new();
    type Factory = fn(Option<&serde_json::Value>, &crate::framework::Handle) -> Result<Arc<dyn Plugin>, String>;
    let mut add = |name: &str, f: Factory| {
        // Names are distinct constants; a duplicate would be a programming error caught by tests.
        let _ = r.register(name, f);
    };
    add(names::PRIORITY_SORT, |_, _| Ok(Arc::new(queue_sort::PrioritySort)));
    add(names::SCHEDULING_GATES, |_, _| Ok(Arc::new(scheduling_gates::SchedulingGates)));
    add(names::NODE_UNSCHEDULABLE, |_, _| Ok(Arc::new(node_unschedulable::NodeUnschedulable)));
    add(names::NODE_NAME, |_, _| Ok(Arc::new(node_name::NodeName)));
    add(names::TAINT_TOLERATION, |_, _| Ok(Arc::new(taint_toleration::TaintToleration)));
    add(names::NODE_AFFINITY, |a, _| {
        Ok(Arc::new(node_affinity::NodeAffinity::new(decode_args(names::NODE_AFFINITY, a)?)))
    });
    add(names::NODE_PORTS, |_, _| Ok(Arc::new(node_ports::NodePorts)));
    add(names::NODE_RESOURCES_FIT, |a, _| {
        Ok(Arc::new(noderesources::fit::Fit::new(decode_args(names::NODE_RESOURCES_FIT, a)?)?))
    });
    add(names::NODE_RESOURCES_BALANCED_ALLOCATION, |a, _| {
        Ok(Arc::new(noderesources::balanced_allocation::BalancedAllocation::new(decode_args(
            names::NODE_RESOURCES_BALANCED_ALLOCATION,
            a,
        )?)))
    });
    add(names::IMAGE_LOCALITY, |_, _| Ok(Arc::new(image_locality::ImageLocality)));
    add(names::INTER_POD_AFFINITY, |a, h| {
        Ok(Arc::new(inter_pod_affinity::InterPodAffinity::new(decode_args(names::INTER_POD_AFFINITY, a)?, h.clone())))
    });
    add(names::POD_TOPOLOGY_SPREAD, |a, h| {
        Ok(Arc::new(pod_topology_spread::PodTopologySpread::new(
            decode_args(names::POD_TOPOLOGY_SPREAD, a)?,
            h.clone(),
        )?))
    });
    add(names::DEFAULT_PREEMPTION, |a, _| {
        Ok(Arc::new(default_preemption::DefaultPreemption::new(decode_args(names::DEFAULT_PREEMPTION, a)?)))
    });
    add(names::DEFAULT_BINDER, |_, h| Ok(Arc::new(default_binder::DefaultBinder::new(h.clone()))));
    r
}

/// Scales scores so the highest becomes [`MAX_NODE_SCORE`]; with `reverse`, the highest becomes 0
/// and zero becomes the maximum (`helper.DefaultNormalizeScore`).
pub fn default_normalize_score(max_priority: i64, reverse: bool, scores: &mut [i64]) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = max_priority);
        }
        return;
    }
    for s in scores.iter_mut() {
        let mut v = max_priority * *s / max;
        if reverse {
            v = max_priority - v;
        }
        *s = v;
    }
}

/// Default for [`default_normalize_score`]'s maximum.
pub const DEFAULT_MAX_SCORE: i64 = MAX_NODE_SCORE;

#[cfg(test)]
pub(crate) mod test_util {
    //! Runs one plugin the way the framework would, for table-driven plugin tests.
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;

    use crate::api::RecordingApi;
    use crate::framework::{CycleState, Handle, NodeInfo, Plugin, Snapshot, Status};
    use crate::testing::node_info;

    /// Builds a snapshot of `nodes` holding `existing` pods (placed by their `spec.nodeName`).
    pub fn snapshot(nodes: Vec<k8s_openapi::api::core::v1::Node>, existing: &[Pod]) -> Snapshot {
        let infos: Vec<NodeInfo> = nodes
            .into_iter()
            .map(|n| {
                let name = n.metadata.name.clone().unwrap_or_default();
                let pods: Vec<Pod> = existing
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
                    .cloned()
                    .collect();
                node_info(n, &pods)
            })
            .collect();
        Snapshot::from_node_infos(infos)
    }

    /// A handle with a recording API.
    pub fn handle() -> Handle {
        Handle::new(Arc::new(RecordingApi::default()))
    }

    /// Runs PreFilter (if any) then Filter on every node; returns each node's status
    /// (Success when skipped).
    pub fn filter_all(plugin: &dyn Plugin, pod: &Pod, snap: &Snapshot) -> Vec<Status> {
        let info = crate::framework::PodInfo::new(pod.clone());
        let mut state = CycleState::new();
        if let Some(pf) = plugin.as_pre_filter() {
            let (res, s) = pf.pre_filter(&mut state, &info, snap);
            if s.is_skip() {
                return snap.nodes().iter().map(|_| Status::success()).collect();
            }
            if !s.is_success() {
                return snap.nodes().iter().map(|_| s.clone()).collect();
            }
            if let Some(names) = res.and_then(|r| r.node_names) {
                return snap
                    .nodes()
                    .iter()
                    .map(|n| {
                        if names.contains(n.name()) {
                            plugin.as_filter().map_or(Status::success(), |f| f.filter(&state, &info, n))
                        } else {
                            Status::unresolvable("not in PreFilterResult")
                        }
                    })
                    .collect();
            }
        }
        let f = plugin.as_filter().expect("plugin has Filter");
        snap.nodes().iter().map(|n| f.filter(&state, &info, n)).collect()
    }

    /// Runs PreScore (if any), Score on every node and NormalizeScore; returns the scores
    /// (all 0 when PreScore skips).
    pub fn score_all(plugin: &dyn Plugin, pod: &Pod, snap: &Snapshot) -> Vec<i64> {
        let info = crate::framework::PodInfo::new(pod.clone());
        let mut state = CycleState::new();
        if let Some(pf) = plugin.as_pre_filter() {
            let _ = pf.pre_filter(&mut state, &info, snap);
        }
        if let Some(ps) = plugin.as_pre_score() {
            let s = ps.pre_score(&mut state, &info, snap.nodes(), snap);
            if s.is_skip() {
                return vec![0; snap.num_nodes()];
            }
            assert!(s.is_success(), "PreScore failed: {s}");
        }
        let sp = plugin.as_score().expect("plugin has Score");
        let mut scores: Vec<i64> = snap.nodes().iter().map(|n| sp.score(&state, &info, n).expect("score")).collect();
        let s = sp.normalize_score(&state, &info, &mut scores);
        assert!(s.is_success(), "NormalizeScore failed: {s}");
        scores
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_tree_registry_has_every_default_plugin() {
        let r = in_tree_registry();
        for (name, _) in DEFAULT_MULTI_POINT {
            assert!(r.get(name).is_some(), "{name} missing");
        }
    }

    #[test]
    fn default_normalize_score_scales_and_reverses() {
        let mut s = vec![0, 5, 10];
        default_normalize_score(100, false, &mut s);
        assert_eq!(s, vec![0, 50, 100]);
        let mut s = vec![0, 5, 10];
        default_normalize_score(100, true, &mut s);
        assert_eq!(s, vec![100, 50, 0]);
        let mut s = vec![0, 0];
        default_normalize_score(100, true, &mut s);
        assert_eq!(s, vec![100, 100]);
    }
}
