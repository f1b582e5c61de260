//! `NodeInfo`: a node with the aggregate of the pods on it, and the per-cycle `Snapshot`.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};

use super::resource::Resource;
use super::types::{HostPort, PodInfo};

/// What the scheduler knows about one container image on a node (`framework.ImageStateSummary`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageStateSummary {
    /// Image size in bytes.
    pub size: i64,
    /// How many nodes hold the image (its spread).
    pub num_nodes: usize,
}

/// A node and the pods placed on it, bound or assumed (`framework.NodeInfo`).
///
/// Cheap to clone: the node object, pods and images are shared (`Arc`). The cache mutates its own
/// copy (copy-on-write) and snapshots share unchanged ones.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    node: Option<Arc<Node>>,
    name: String,
    // Copies of the Node fields every Filter/Score reads, so the hot loop stays in this struct
    // instead of chasing pointers into the Node object.
    unschedulable: bool,
    taints: Vec<Taint>,
    pods: Vec<Arc<PodInfo>>,
    pods_with_affinity: Vec<Arc<PodInfo>>,
    pods_with_required_anti_affinity: Vec<Arc<PodInfo>>,
    used_ports: HashMap<HostPort, u32>,
    requested: Resource,
    non_zero_requested: Resource,
    allocatable: Resource,
    image_states: Arc<HashMap<String, ImageStateSummary>>,
    /// Bumped by the cache on every change; the snapshot copies only newer infos.
    pub generation: u64,
}

impl NodeInfo {
    /// An info for a node name whose Node object is not known (yet): it holds pods only.
    pub fn new(name: &str) -> Self {
        Self { name: name.to_string(), ..Default::default() }
    }

    /// An info for `node` with no pods. Unparseable allocatable quantities count as zero.
    pub fn with_node(node: Node) -> Self {
        let mut n = Self::default();
        n.set_node(Arc::new(node));
        n
    }

    /// Sets (or replaces) the Node object and recomputes allocatable from `status.allocatable`.
    pub fn set_node(&mut self, node: Arc<Node>) {
        self.name = node.metadata.name.clone().unwrap_or_default();
        self.unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        self.taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        self.allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(|a| Resource::from_list(a).unwrap_or_default())
            .unwrap_or_default();
        self.node = Some(node);
    }

    /// Forgets the Node object (the node was deleted but pods are still known on it).
    pub fn clear_node(&mut self) {
        self.node = None;
        self.unschedulable = false;
        self.taints = Vec::new();
        self.allocatable = Resource::default();
    }

    /// The Node object, if known.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_deref()
    }

    /// The Node object as a shared pointer, if known.
    pub fn node_arc(&self) -> Option<&Arc<Node>> {
        self.node.as_ref()
    }

    /// The node name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's labels (empty when none or unknown).
    pub fn labels(&self) -> &std::collections::BTreeMap<String, String> {
        static EMPTY: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
        self.node.as_ref().and_then(|n| n.metadata.labels.as_ref()).unwrap_or(&EMPTY)
    }

    /// The node's taints (`spec.taints`).
    pub fn taints(&self) -> &[Taint] {
        &self.taints
    }

    /// Whether the node is cordoned (`spec.unschedulable`).
    pub fn unschedulable(&self) -> bool {
        self.unschedulable
    }

    /// Pods on the node, bound and assumed.
    pub fn pods(&self) -> &[Arc<PodInfo>] {
        &self.pods
    }

    /// Pods on the node with any pod affinity or anti-affinity.
    pub fn pods_with_affinity(&self) -> &[Arc<PodInfo>] {
        &self.pods_with_affinity
    }

    /// Pods on the node with required anti-affinity.
    pub fn pods_with_required_anti_affinity(&self) -> &[Arc<PodInfo>] {
        &self.pods_with_required_anti_affinity
    }

    /// Sum of the requests of the pods on the node.
    pub fn requested(&self) -> &Resource {
        &self.requested
    }

    /// Sum of the pods' CPU/memory requests with defaults for containers requesting none.
    pub fn non_zero_requested(&self) -> &Resource {
        &self.non_zero_requested
    }

    /// The node's allocatable resources.
    pub fn allocatable(&self) -> &Resource {
        &self.allocatable
    }

    /// Overrides allocatable (tests and simulations).
    pub fn set_allocatable(&mut self, r: Resource) {
        self.allocatable = r;
    }

    /// Images on the node by name (every name a node reports for an image).
    pub fn image_states(&self) -> &HashMap<String, ImageStateSummary> {
        &self.image_states
    }

    /// Replaces the image states (the cache fills the spread).
    pub fn set_image_states(&mut self, states: HashMap<String, ImageStateSummary>) {
        self.image_states = Arc::new(states);
    }

    /// Adds a pod: its requests, host ports and affinity bookkeeping.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.milli_cpu += pod.non_zero_requests.milli_cpu;
        self.non_zero_requested.memory += pod.non_zero_requests.memory;
        for p in &pod.host_ports {
            *self.used_ports.entry(p.clone()).or_insert(0) += 1;
        }
        if pod.has_affinity() {
            self.pods_with_affinity.push(pod.clone());
        }
        if !pod.required_anti_affinity_terms.is_empty() {
            self.pods_with_required_anti_affinity.push(pod.clone());
        }
        self.pods.push(pod);
    }

    /// Removes the pod with `uid`; returns it, or None when it is not on this node.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodInfo>> {
        let i = self.pods.iter().position(|p| p.uid == uid)?;
        let pod = self.pods.swap_remove(i);
        self.pods_with_affinity.retain(|p| p.uid != uid);
        self.pods_with_required_anti_affinity.retain(|p| p.uid != uid);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.milli_cpu -= pod.non_zero_requests.milli_cpu;
        self.non_zero_requested.memory -= pod.non_zero_requests.memory;
        for p in &pod.host_ports {
            if let Some(n) = self.used_ports.get_mut(p) {
                *n -= 1;
                if *n == 0 {
                    self.used_ports.remove(p);
                }
            }
        }
        Some(pod)
    }

    /// Whether any of `wanted` conflicts with a port in use: same protocol and port, and the same
    /// IP or either side being `0.0.0.0` (`HostPortInfo.CheckConflict`).
    pub fn host_ports_conflict(&self, wanted: &[HostPort]) -> bool {
        wanted.iter().any(|w| {
            self.used_ports.keys().any(|u| {
                u.port == w.port && u.protocol == w.protocol && (u.ip == w.ip || u.ip == "0.0.0.0" || w.ip == "0.0.0.0")
            })
        })
    }
}

/// The nodes as the scheduler sees them for one scheduling cycle (`cache.Snapshot`).
///
/// Built and refreshed incrementally by the cache (`Cache::update_snapshot`); plugins only read
/// it. `nodes()` is in zone-interleaved order (like kube-scheduler's `nodeTree`) so that a partial
/// search (`percentageOfNodesToScore`) spreads across zones.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub(crate) node_info_list: Vec<Arc<NodeInfo>>,
    pub(crate) index: HashMap<String, usize>,
    pub(crate) have_pods_with_affinity: Vec<Arc<NodeInfo>>,
    pub(crate) have_pods_with_required_anti_affinity: Vec<Arc<NodeInfo>>,
    pub(crate) generation: u64,
    pub(crate) structure_generation: u64,
}

impl Snapshot {
    /// A snapshot of the given node infos in this order (tests and simulations).
    pub fn from_node_infos(nodes: Vec<NodeInfo>) -> Self {
        let mut s = Snapshot { node_info_list: nodes.into_iter().map(Arc::new).collect(), ..Default::default() };
        s.rebuild_derived();
        s
    }

    pub(crate) fn rebuild_derived(&mut self) {
        self.index = self.node_info_list.iter().enumerate().map(|(i, n)| (n.name().to_string(), i)).collect();
        self.rebuild_affinity_lists();
    }

    pub(crate) fn rebuild_affinity_lists(&mut self) {
        self.have_pods_with_affinity =
            self.node_info_list.iter().filter(|n| !n.pods_with_affinity().is_empty()).cloned().collect();
        self.have_pods_with_required_anti_affinity =
            self.node_info_list.iter().filter(|n| !n.pods_with_required_anti_affinity().is_empty()).cloned().collect();
    }

    /// All nodes (with a Node object), in scheduling order.
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.node_info_list
    }

    /// The number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.node_info_list.len()
    }

    /// The node named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|i| &self.node_info_list[*i])
    }

    /// Nodes holding at least one pod with pod affinity or anti-affinity.
    pub fn have_pods_with_affinity(&self) -> &[Arc<NodeInfo>] {
        &self.have_pods_with_affinity
    }

    /// Nodes holding at least one pod with required anti-affinity.
    pub fn have_pods_with_required_anti_affinity(&self) -> &[Arc<NodeInfo>] {
        &self.have_pods_with_required_anti_affinity
    }
}
