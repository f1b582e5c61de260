//! Framework types shared by all plugins (`framework/types.go`): [`PodInfo`] with its parsed
//! affinity terms and requests, [`QueuedPodInfo`], [`ClusterEvent`]s, and the node-affinity and
//! toleration helpers of `k8s.io/component-helpers/scheduling/corev1`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{
    Node, Pod, PodAffinityTerm, PreferredSchedulingTerm, Toleration, WeightedPodAffinityTerm,
};
pub use skiff_apimachinery::scheduling::{
    CompiledNodeSelectorTerm, RequiredNodeAffinity, find_untolerated_taint, tolerates_taint,
};
use skiff_apimachinery::selector::{LabelSelector, Operator, Requirement};

use super::resource::{self, Resource};

/// `preemptionPolicy` of a pod (`v1.PreemptionPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreemptionPolicy {
    /// May preempt lower-priority pods (the default).
    PreemptLowerPriority,
    /// Never preempts; waits for room instead.
    Never,
}

/// One parsed pod (anti-)affinity term (`framework.AffinityTerm`).
#[derive(Clone, Debug)]
pub struct AffinityTerm {
    /// Namespaces whose pods the term selects (the pod's own namespace when the term lists none
    /// and has no namespace selector).
    pub namespaces: HashSet<String>,
    /// The pod label selector (a missing selector selects nothing).
    pub selector: LabelSelector,
    /// The node label whose values define the topology domains.
    pub topology_key: String,
    /// Selects further namespaces by their labels ([`LabelSelector::nothing`] when absent).
    pub namespace_selector: LabelSelector,
}

impl AffinityTerm {
    fn from_api(pod: &Pod, term: &PodAffinityTerm) -> Result<Self, String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let pod_labels = pod.metadata.labels.clone().unwrap_or_default();
        let mut selector = LabelSelector::from_metav1_opt(term.label_selector.as_ref())?;
        // matchLabelKeys / mismatchLabelKeys (KEP-3633): merged with the pod's own label values.
        if !selector.is_nothing() {
            let mut reqs = selector.requirements().to_vec();
            for k in term.match_label_keys.iter().flatten() {
                if let Some(v) = pod_labels.get(k) {
                    reqs.push(Requirement::new(k, Operator::In, vec![v.clone()])?);
                }
            }
            for k in term.mismatch_label_keys.iter().flatten() {
                if let Some(v) = pod_labels.get(k) {
                    reqs.push(Requirement::new(k, Operator::NotIn, vec![v.clone()])?);
                }
            }
            selector = LabelSelector::from_requirements(reqs);
        }
        let mut namespaces: HashSet<String> = term.namespaces.iter().flatten().cloned().collect();
        let namespace_selector = match term.namespace_selector.as_ref() {
            Some(s) => LabelSelector::from_metav1(s)?,
            None => LabelSelector::nothing(),
        };
        if namespaces.is_empty() && term.namespace_selector.is_none() {
            namespaces.insert(ns);
        }
        Ok(Self { namespaces, selector, topology_key: term.topology_key.clone(), namespace_selector })
    }

    /// Whether `pod` (whose namespace has labels `ns_labels`) is selected by this term
    /// (`AffinityTerm.Matches`).
    pub fn matches(&self, pod: &PodInfo, ns_labels: &BTreeMap<String, String>) -> bool {
        (self.namespaces.contains(&pod.namespace) || self.namespace_selector.matches(ns_labels))
            && self.selector.matches(pod.labels())
    }
}

/// A preferred affinity term with its weight (1-100).
#[derive(Clone, Debug)]
pub struct WeightedAffinityTerm {
    /// The term.
    pub term: AffinityTerm,
    /// Its weight.
    pub weight: i32,
}

/// A host port a container asks for: `(hostIP, protocol, port)`, with `0.0.0.0` and `TCP` as
/// defaults.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// The IP, `0.0.0.0` meaning all.
    pub ip: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The port number.
    pub port: i32,
}

/// A pod with everything the plugins need pre-computed once (`framework.PodInfo`).
#[derive(Debug)]
pub struct PodInfo {
    /// The pod object as last seen.
    pub pod: Arc<Pod>,
    /// `namespace/name`.
    pub key: String,
    /// `metadata.uid` (the key when absent).
    pub uid: String,
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The pod's priority (`spec.priority`, resolved from its PriorityClass when unset).
    pub priority: i32,
    /// Whether the pod may preempt others.
    pub preemption_policy: PreemptionPolicy,
    /// Effective requests (`PodRequests`).
    pub requests: Resource,
    /// Requests with CPU/memory defaults for containers that request none (used by scoring).
    pub non_zero_requests: Resource,
    /// Required pod affinity terms.
    pub required_affinity_terms: Vec<AffinityTerm>,
    /// Required pod anti-affinity terms.
    pub required_anti_affinity_terms: Vec<AffinityTerm>,
    /// Preferred pod affinity terms.
    pub preferred_affinity_terms: Vec<WeightedAffinityTerm>,
    /// Preferred pod anti-affinity terms.
    pub preferred_anti_affinity_terms: Vec<WeightedAffinityTerm>,
    /// Host ports of all containers (and init containers).
    pub host_ports: Vec<HostPort>,
    /// Whether `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// A problem found while parsing the pod (bad affinity selector, bad quantity); plugins turn
    /// it into an [`super::Code::UnschedulableAndUnresolvable`] status.
    pub parse_error: Option<String>,
    empty_labels: BTreeMap<String, String>,
}

impl PodInfo {
    /// Parses `pod` with the given resolved priority and preemption policy.
    pub fn with_priority(pod: Arc<Pod>, priority: i32, preemption_policy: PreemptionPolicy) -> Self {
        let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let key = format!("{namespace}/{name}");
        let uid = pod.metadata.uid.clone().unwrap_or_else(|| key.clone());
        let mut errors = Vec::new();
        let requests = resource::pod_requests(&pod, false).unwrap_or_else(|e| {
            errors.push(e);
            Resource::default()
        });
        let non_zero_requests = resource::pod_requests(&pod, true).unwrap_or_default();
        let mut info = PodInfo {
            key,
            uid,
            namespace,
            name,
            priority,
            preemption_policy,
            requests,
            non_zero_requests,
            required_affinity_terms: Vec::new(),
            required_anti_affinity_terms: Vec::new(),
            preferred_affinity_terms: Vec::new(),
            preferred_anti_affinity_terms: Vec::new(),
            host_ports: Vec::new(),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            parse_error: None,
            empty_labels: BTreeMap::new(),
            pod: pod.clone(),
        };
        if let Some(spec) = pod.spec.as_ref() {
            if let Some(aff) = spec.affinity.as_ref() {
                let mut req = |terms: Option<&Vec<PodAffinityTerm>>, out: &mut Vec<AffinityTerm>| {
                    for t in terms.into_iter().flatten() {
                        match AffinityTerm::from_api(&pod, t) {
                            Ok(t) => out.push(t),
                            Err(e) => errors.push(format!("invalid affinity term: {e}")),
                        }
                    }
                };
                if let Some(pa) = aff.pod_affinity.as_ref() {
                    req(
                        pa.required_during_scheduling_ignored_during_execution.as_ref(),
                        &mut info.required_affinity_terms,
                    );
                }
                if let Some(pa) = aff.pod_anti_affinity.as_ref() {
                    req(
                        pa.required_during_scheduling_ignored_during_execution.as_ref(),
                        &mut info.required_anti_affinity_terms,
                    );
                }
                let mut pref = |terms: Option<&Vec<WeightedPodAffinityTerm>>, out: &mut Vec<WeightedAffinityTerm>| {
                    for t in terms.into_iter().flatten() {
                        match AffinityTerm::from_api(&pod, &t.pod_affinity_term) {
                            Ok(term) => out.push(WeightedAffinityTerm { term, weight: t.weight }),
                            Err(e) => errors.push(format!("invalid affinity term: {e}")),
                        }
                    }
                };
                if let Some(pa) = aff.pod_affinity.as_ref() {
                    pref(
                        pa.preferred_during_scheduling_ignored_during_execution.as_ref(),
                        &mut info.preferred_affinity_terms,
                    );
                }
                if let Some(pa) = aff.pod_anti_affinity.as_ref() {
                    pref(
                        pa.preferred_during_scheduling_ignored_during_execution.as_ref(),
                        &mut info.preferred_anti_affinity_terms,
                    );
                }
            }
            for c in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
                for p in c.ports.iter().flatten() {
                    if let Some(hp) = p.host_port.filter(|p| *p > 0) {
                        info.host_ports.push(HostPort {
                            ip: p.host_ip.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "0.0.0.0".into()),
                            protocol: p.protocol.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "TCP".into()),
                            port: hp,
                        });
                    }
                }
            }
        }
        if !errors.is_empty() {
            info.parse_error = Some(errors.join("; "));
        }
        info
    }

    /// Parses `pod`, taking priority from `spec.priority` (0 when unset) and the preemption
    /// policy from `spec.preemptionPolicy`.
    pub fn new(pod: Pod) -> Self {
        let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        let policy = preemption_policy_of(&pod);
        Self::with_priority(Arc::new(pod), priority, policy)
    }

    /// The pod's labels (empty when none).
    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.pod.metadata.labels.as_ref().unwrap_or(&self.empty_labels)
    }

    /// `spec.nodeName` ("" when unset).
    pub fn node_name(&self) -> &str {
        self.pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
    }

    /// `spec.schedulerName` (`default-scheduler` when unset).
    pub fn scheduler_name(&self) -> &str {
        self.pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler")
    }

    /// `status.nominatedNodeName` ("" when unset).
    pub fn nominated_node_name(&self) -> &str {
        self.pod.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()).unwrap_or("")
    }

    /// The pod's tolerations.
    pub fn tolerations(&self) -> &[Toleration] {
        self.pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[])
    }

    /// Whether the pod has any pod affinity or anti-affinity (required or preferred).
    pub fn has_affinity(&self) -> bool {
        !self.required_affinity_terms.is_empty()
            || !self.required_anti_affinity_terms.is_empty()
            || !self.preferred_affinity_terms.is_empty()
            || !self.preferred_anti_affinity_terms.is_empty()
    }

    /// Start time used to rank pods of equal priority: `status.startTime`, else creation time
    /// (seconds since the epoch; 0 when unknown).
    pub fn start_time(&self) -> i64 {
        self.pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .or(self.pod.metadata.creation_timestamp.as_ref())
            .map(|t| t.0.as_second())
            .unwrap_or(0)
    }

    /// A copy of this info around a newer version of the same pod, re-parsed.
    pub fn updated(&self, pod: Arc<Pod>) -> Self {
        Self::with_priority(pod, self.priority, self.preemption_policy)
    }
}

/// `spec.preemptionPolicy` of a pod (`PreemptLowerPriority` when unset).
pub fn preemption_policy_of(pod: &Pod) -> PreemptionPolicy {
    match pod.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()) {
        Some("Never") => PreemptionPolicy::Never,
        _ => PreemptionPolicy::PreemptLowerPriority,
    }
}

/// A pod waiting in the scheduling queue (`framework.QueuedPodInfo`).
#[derive(Clone, Debug)]
pub struct QueuedPodInfo {
    /// The pod.
    pub pod_info: Arc<PodInfo>,
    /// When the pod was last added to the queue (or moved back); orders pods of equal priority.
    pub timestamp: Instant,
    /// Scheduling attempts so far; drives the backoff.
    pub attempts: u32,
    /// When the pod was first popped (for the end-to-end latency metric).
    pub initial_attempt_timestamp: Option<Instant>,
    /// Plugins that rejected the pod in its last attempt; only events they registered for move
    /// it out of the unschedulable pool. Empty after an error: any event moves it.
    pub unschedulable_plugins: HashSet<String>,
    /// Whether a PreEnqueue plugin (e.g. SchedulingGates) keeps the pod out of activeQ.
    pub gated: bool,
}

impl QueuedPodInfo {
    /// A freshly queued pod.
    pub fn new(pod_info: Arc<PodInfo>, now: Instant) -> Self {
        Self {
            pod_info,
            timestamp: now,
            attempts: 0,
            initial_attempt_timestamp: None,
            unschedulable_plugins: HashSet::new(),
            gated: false,
        }
    }
}

/// The kind of object a [`ClusterEvent`] is about (`framework.EventResource`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventResource {
    /// A pod already assigned to a node (add/delete/update of a bound pod).
    Pod,
    /// A pod not yet assigned to a node (update of a pending pod by its owner).
    UnscheduledPod,
    /// A node.
    Node,
    /// A namespace (labels matter for affinity namespace selectors).
    Namespace,
    /// Matches every resource.
    WildCard,
}

/// What happened to the object of a [`ClusterEvent`] (`framework.ActionType`, a bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ActionType(pub u32);

impl ActionType {
    /// The object was added.
    pub const ADD: ActionType = ActionType(1);
    /// The object was deleted.
    pub const DELETE: ActionType = ActionType(1 << 1);
    /// A node's allocatable changed.
    pub const UPDATE_NODE_ALLOCATABLE: ActionType = ActionType(1 << 2);
    /// A node's labels changed.
    pub const UPDATE_NODE_LABEL: ActionType = ActionType(1 << 3);
    /// A node's taints (or `spec.unschedulable`) changed.
    pub const UPDATE_NODE_TAINT: ActionType = ActionType(1 << 4);
    /// A node's conditions changed.
    pub const UPDATE_NODE_CONDITION: ActionType = ActionType(1 << 5);
    /// A node's annotations or images changed.
    pub const UPDATE_NODE_ANNOTATION: ActionType = ActionType(1 << 6);
    /// A pod's labels changed.
    pub const UPDATE_POD_LABEL: ActionType = ActionType(1 << 7);
    /// A pod's requests went down.
    pub const UPDATE_POD_SCALE_DOWN: ActionType = ActionType(1 << 8);
    /// A pod's tolerations changed.
    pub const UPDATE_POD_TOLERATIONS: ActionType = ActionType(1 << 9);
    /// A pod's scheduling gates were removed.
    pub const UPDATE_POD_SCHEDULING_GATES_ELIMINATED: ActionType = ActionType(1 << 10);
    /// Any other update of a pod's spec.
    pub const UPDATE_POD_OTHER: ActionType = ActionType(1 << 11);
    /// Any update.
    pub const UPDATE: ActionType = ActionType(((1 << 12) - 1) & !3);
    /// Anything.
    pub const ALL: ActionType = ActionType(u32::MAX);

    /// Union of two action sets.
    pub const fn or(self, other: ActionType) -> ActionType {
        ActionType(self.0 | other.0)
    }

    /// Whether the sets intersect.
    pub const fn intersects(self, other: ActionType) -> bool {
        self.0 & other.0 != 0
    }
}

/// A change in the cluster that may make pending pods schedulable (`framework.ClusterEvent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClusterEvent {
    /// What kind of object changed.
    pub resource: EventResource,
    /// What happened to it.
    pub action: ActionType,
    /// A label for logs and metrics, e.g. `NodeAdd`.
    pub label: &'static str,
}

impl ClusterEvent {
    /// A registration for `resource` and `action` (label empty).
    pub const fn new(resource: EventResource, action: ActionType) -> Self {
        Self { resource, action, label: "" }
    }

    /// Whether an `incoming` event is covered by this registration.
    pub fn matches(&self, incoming: &ClusterEvent) -> bool {
        (self.resource == EventResource::WildCard || self.resource == incoming.resource)
            && self.action.intersects(incoming.action)
    }

    /// A node was added.
    pub const NODE_ADD: ClusterEvent =
        ClusterEvent { resource: EventResource::Node, action: ActionType::ADD, label: "NodeAdd" };
    /// An assigned pod was added (bound).
    pub const ASSIGNED_POD_ADD: ClusterEvent =
        ClusterEvent { resource: EventResource::Pod, action: ActionType::ADD, label: "AssignedPodAdd" };
    /// An assigned pod was deleted (or an assumed pod forgotten).
    pub const ASSIGNED_POD_DELETE: ClusterEvent =
        ClusterEvent { resource: EventResource::Pod, action: ActionType::DELETE, label: "AssignedPodDelete" };
    /// Moves everything (the periodic flush and unknown changes).
    pub const UNSCHEDULABLE_TIMEOUT: ClusterEvent =
        ClusterEvent { resource: EventResource::WildCard, action: ActionType::ALL, label: "UnschedulableTimeout" };
}

/// Compiled `preferredDuringSchedulingIgnoredDuringExecution` node affinity terms.
#[derive(Clone, Debug, Default)]
pub struct PreferredNodeAffinity {
    terms: Vec<(i32, CompiledNodeSelectorTerm)>,
}

impl PreferredNodeAffinity {
    /// Compiles the preferred terms of a list (weight 0 terms are dropped).
    pub fn new(terms: &[PreferredSchedulingTerm]) -> Self {
        Self {
            terms: terms
                .iter()
                .filter(|t| t.weight != 0)
                .map(|t| (t.weight, CompiledNodeSelectorTerm::new(&t.preference)))
                .collect(),
        }
    }

    /// Sum of the weights of the terms `node` matches.
    pub fn score(&self, node: &Node) -> i64 {
        self.terms.iter().filter(|(_, t)| t.matches(node)).map(|(w, _)| i64::from(*w)).sum()
    }

    /// Whether there are no terms.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// Image name as the ImageLocality plugin compares it: `:latest` appended when the name carries
/// no tag (`normalizedImageName`).
pub fn normalized_image_name(name: &str) -> String {
    if name.rfind(':').map(|i| i as isize).unwrap_or(-1) <= name.rfind('/').map(|i| i as isize).unwrap_or(-1) {
        format!("{name}:latest")
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_without_tag_get_latest() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("localhost:5000/nginx"), "localhost:5000/nginx:latest");
        assert_eq!(normalized_image_name("nginx:1.25"), "nginx:1.25");
    }
}
