//! Builders for pods and nodes (like kube-scheduler's `st.MakePod()` / `st.MakeNode()`), used by
//! the unit tests, the integration tests and the benchmark.
//!
//! ```
//! use skiff_scheduler::testing::{make_node, make_pod};
//! let node = make_node("node1").capacity(&[("cpu", "4"), ("memory", "32Gi"), ("pods", "110")]).obj();
//! let pod = make_pod("nginx").req(&[("cpu", "100m")]).node_selector(&[("disk", "ssd")]).obj();
//! assert_eq!(node.metadata.name.as_deref(), Some("node1"));
//! assert!(pod.spec.unwrap().node_selector.is_some());
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerImage, ContainerPort, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, NodeSpec, NodeStatus, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSchedulingGate,
    PodSpec, PodStatus, PreferredSchedulingTerm, ResourceRequirements, Taint, Toleration, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};

use crate::framework::{NodeInfo, PodInfo};

fn kv(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect()
}

fn selector(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector { match_labels: Some(kv(labels)), ..Default::default() }
}

/// A pod under construction.
#[derive(Clone, Debug)]
pub struct PodBuilder {
    pod: Pod,
}

/// Starts a pod `name` in namespace `default` with UID `uid-<name>`, no containers.
pub fn make_pod(name: &str) -> PodBuilder {
    PodBuilder {
        pod: Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus::default()),
        },
    }
}

impl PodBuilder {
    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    fn affinity(&mut self) -> &mut Affinity {
        self.spec().affinity.get_or_insert_with(Default::default)
    }

    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.into());
        self
    }

    /// Sets the UID.
    pub fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.into());
        self
    }

    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.pod.metadata.labels.get_or_insert_with(Default::default).insert(k.into(), v.into());
        self
    }

    /// Adds a container requesting `requests` (e.g. `[("cpu", "500m")]`).
    pub fn req(mut self, requests: &[(&str, &str)]) -> Self {
        let n = self.spec().containers.len();
        self.spec().containers.push(Container {
            name: format!("c{n}"),
            image: Some("registry.k8s.io/pause:3.10".into()),
            resources: Some(ResourceRequirements { requests: Some(quantities(requests)), ..Default::default() }),
            ..Default::default()
        });
        self
    }

    /// Adds an init container requesting `requests`.
    pub fn init_req(mut self, requests: &[(&str, &str)]) -> Self {
        let n = self.spec().init_containers.as_ref().map_or(0, Vec::len);
        self.spec().init_containers.get_or_insert_with(Default::default).push(Container {
            name: format!("i{n}"),
            image: Some("registry.k8s.io/pause:3.10".into()),
            resources: Some(ResourceRequirements { requests: Some(quantities(requests)), ..Default::default() }),
            ..Default::default()
        });
        self
    }

    /// Adds a container running `image` with no requests.
    pub fn container_image(mut self, image: &str) -> Self {
        let n = self.spec().containers.len();
        self.spec().containers.push(Container {
            name: format!("c{n}"),
            image: Some(image.into()),
            ..Default::default()
        });
        self
    }

    /// Adds a container with a host port (`ip` "" for all, protocol "" for TCP).
    pub fn host_port(mut self, ip: &str, protocol: &str, port: i32) -> Self {
        let n = self.spec().containers.len();
        self.spec().containers.push(Container {
            name: format!("c{n}"),
            ports: Some(vec![ContainerPort {
                container_port: port,
                host_port: Some(port),
                host_ip: Some(ip.into()).filter(|s: &String| !s.is_empty()),
                protocol: Some(protocol.into()).filter(|s: &String| !s.is_empty()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        self
    }

    /// Sets `spec.nodeSelector`.
    pub fn node_selector(mut self, labels: &[(&str, &str)]) -> Self {
        self.spec().node_selector = Some(kv(labels));
        self
    }

    /// Sets `spec.nodeName`.
    pub fn node(mut self, name: &str) -> Self {
        self.spec().node_name = Some(name.into());
        self
    }

    /// Sets `spec.schedulerName`.
    pub fn scheduler_name(mut self, name: &str) -> Self {
        self.spec().scheduler_name = Some(name.into());
        self
    }

    /// Sets `spec.priority`.
    pub fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }

    /// Sets `spec.priorityClassName`.
    pub fn priority_class(mut self, name: &str) -> Self {
        self.spec().priority_class_name = Some(name.into());
        self
    }

    /// Sets `spec.preemptionPolicy: Never`.
    pub fn preemption_never(mut self) -> Self {
        self.spec().preemption_policy = Some("Never".into());
        self
    }

    /// Adds a toleration.
    pub fn toleration(mut self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        self.spec().tolerations.get_or_insert_with(Default::default).push(Toleration {
            key: Some(key.into()).filter(|s: &String| !s.is_empty()),
            operator: Some(operator.into()),
            value: Some(value.into()).filter(|s: &String| !s.is_empty()),
            effect: Some(effect.into()).filter(|s: &String| !s.is_empty()),
            ..Default::default()
        });
        self
    }

    /// Adds a required node affinity term `key <op> values` (terms are ORed).
    pub fn node_affinity(mut self, key: &str, op: &str, values: &[&str]) -> Self {
        let na = self.affinity().node_affinity.get_or_insert_with(Default::default);
        na.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector { node_selector_terms: Vec::new() })
            .node_selector_terms
            .push(NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: key.into(),
                    operator: op.into(),
                    values: Some(values.iter().map(|s| s.to_string()).collect()),
                }]),
                ..Default::default()
            });
        self
    }

    /// Adds a required node affinity term on `metadata.name In names`.
    pub fn node_affinity_names(mut self, names: &[&str]) -> Self {
        let na: &mut NodeAffinity = self.affinity().node_affinity.get_or_insert_with(Default::default);
        na.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector { node_selector_terms: Vec::new() })
            .node_selector_terms
            .push(NodeSelectorTerm {
                match_fields: Some(
                    names
                        .iter()
                        .map(|n| NodeSelectorRequirement {
                            key: "metadata.name".into(),
                            operator: "In".into(),
                            values: Some(vec![n.to_string()]),
                        })
                        .collect(),
                ),
                ..Default::default()
            });
        self
    }

    /// Adds a preferred node affinity term `key In values` with a weight.
    pub fn preferred_node_affinity(mut self, weight: i32, key: &str, values: &[&str]) -> Self {
        let na = self.affinity().node_affinity.get_or_insert_with(Default::default);
        na.preferred_during_scheduling_ignored_during_execution.get_or_insert_with(Default::default).push(
            PreferredSchedulingTerm {
                weight,
                preference: NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: key.into(),
                        operator: "In".into(),
                        values: Some(values.iter().map(|s| s.to_string()).collect()),
                    }]),
                    ..Default::default()
                },
            },
        );
        self
    }

    fn term(topology_key: &str, labels: &[(&str, &str)]) -> PodAffinityTerm {
        PodAffinityTerm {
            label_selector: Some(selector(labels)),
            topology_key: topology_key.into(),
            ..Default::default()
        }
    }

    /// Adds a required pod affinity term (pods with `labels` in the same `topology_key` domain).
    pub fn pod_affinity(mut self, topology_key: &str, labels: &[(&str, &str)]) -> Self {
        let t = Self::term(topology_key, labels);
        let pa: &mut PodAffinity = self.affinity().pod_affinity.get_or_insert_with(Default::default);
        pa.required_during_scheduling_ignored_during_execution.get_or_insert_with(Default::default).push(t);
        self
    }

    /// Adds a required pod anti-affinity term.
    pub fn pod_anti_affinity(mut self, topology_key: &str, labels: &[(&str, &str)]) -> Self {
        let t = Self::term(topology_key, labels);
        let pa: &mut PodAntiAffinity = self.affinity().pod_anti_affinity.get_or_insert_with(Default::default);
        pa.required_during_scheduling_ignored_during_execution.get_or_insert_with(Default::default).push(t);
        self
    }

    /// Adds a preferred pod affinity term.
    pub fn preferred_pod_affinity(mut self, weight: i32, topology_key: &str, labels: &[(&str, &str)]) -> Self {
        let t = WeightedPodAffinityTerm { weight, pod_affinity_term: Self::term(topology_key, labels) };
        let pa = self.affinity().pod_affinity.get_or_insert_with(Default::default);
        pa.preferred_during_scheduling_ignored_during_execution.get_or_insert_with(Default::default).push(t);
        self
    }

    /// Adds a preferred pod anti-affinity term.
    pub fn preferred_pod_anti_affinity(mut self, weight: i32, topology_key: &str, labels: &[(&str, &str)]) -> Self {
        let t = WeightedPodAffinityTerm { weight, pod_affinity_term: Self::term(topology_key, labels) };
        let pa = self.affinity().pod_anti_affinity.get_or_insert_with(Default::default);
        pa.preferred_during_scheduling_ignored_during_execution.get_or_insert_with(Default::default).push(t);
        self
    }

    /// Adds a topology spread constraint (`when` is `DoNotSchedule` or `ScheduleAnyway`).
    pub fn spread_constraint(mut self, max_skew: i32, topology_key: &str, when: &str, labels: &[(&str, &str)]) -> Self {
        self.spec().topology_spread_constraints.get_or_insert_with(Default::default).push(TopologySpreadConstraint {
            max_skew,
            topology_key: topology_key.into(),
            when_unsatisfiable: when.into(),
            label_selector: Some(selector(labels)),
            ..Default::default()
        });
        self
    }

    /// Adds a scheduling gate.
    pub fn scheduling_gate(mut self, name: &str) -> Self {
        self.spec().scheduling_gates.get_or_insert_with(Default::default).push(PodSchedulingGate { name: name.into() });
        self
    }

    /// Sets `status.nominatedNodeName`.
    pub fn nominated_node(mut self, node: &str) -> Self {
        self.pod.status.get_or_insert_with(Default::default).nominated_node_name = Some(node.into());
        self
    }

    /// Sets `status.startTime` to `secs` after the epoch.
    pub fn start_time(mut self, secs: i64) -> Self {
        let ts = k8s_openapi::jiff::Timestamp::from_second(secs).unwrap_or_default();
        self.pod.status.get_or_insert_with(Default::default).start_time = Some(Time(ts));
        self
    }

    /// Marks the pod as terminating.
    pub fn terminating(mut self) -> Self {
        self.pod.metadata.deletion_timestamp =
            Some(Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap_or_default()));
        self
    }

    /// Sets `spec.overhead`.
    pub fn overhead(mut self, o: &[(&str, &str)]) -> Self {
        self.spec().overhead = Some(quantities(o));
        self
    }

    /// The pod.
    pub fn obj(self) -> Pod {
        self.pod
    }

    /// The pod parsed as a [`PodInfo`].
    pub fn info(self) -> Arc<PodInfo> {
        Arc::new(PodInfo::new(self.pod))
    }
}

/// A node under construction.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    node: Node,
}

/// Starts a node `name` labelled `kubernetes.io/hostname=<name>` with nothing allocatable.
pub fn make_node(name: &str) -> NodeBuilder {
    NodeBuilder {
        node: Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(kv(&[("kubernetes.io/hostname", name)])),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus::default()),
        },
    }
}

impl NodeBuilder {
    /// Sets capacity and allocatable (e.g. `[("cpu", "4"), ("memory", "32Gi"), ("pods", "110")]`).
    pub fn capacity(mut self, r: &[(&str, &str)]) -> Self {
        let status = self.node.status.get_or_insert_with(Default::default);
        status.capacity = Some(quantities(r));
        status.allocatable = Some(quantities(r));
        self
    }

    /// Adds a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.node.metadata.labels.get_or_insert_with(Default::default).insert(k.into(), v.into());
        self
    }

    /// Sets `topology.kubernetes.io/zone`.
    pub fn zone(self, zone: &str) -> Self {
        self.label("topology.kubernetes.io/zone", zone)
    }

    /// Adds a taint.
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.node.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Default::default).push(Taint {
            key: key.into(),
            value: Some(value.into()).filter(|s: &String| !s.is_empty()),
            effect: effect.into(),
            ..Default::default()
        });
        self
    }

    /// Sets `spec.unschedulable: true`.
    pub fn unschedulable(mut self) -> Self {
        self.node.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        self
    }

    /// Reports an image present on the node.
    pub fn image(mut self, names: &[&str], size_bytes: i64) -> Self {
        self.node.status.get_or_insert_with(Default::default).images.get_or_insert_with(Default::default).push(
            ContainerImage { names: Some(names.iter().map(|s| s.to_string()).collect()), size_bytes: Some(size_bytes) },
        );
        self
    }

    /// The node.
    pub fn obj(self) -> Node {
        self.node
    }
}

/// A [`NodeInfo`] for `node` holding `pods`.
pub fn node_info(node: Node, pods: &[Pod]) -> NodeInfo {
    let mut ni = NodeInfo::with_node(node);
    for p in pods {
        ni.add_pod(Arc::new(PodInfo::new(p.clone())));
    }
    ni
}
