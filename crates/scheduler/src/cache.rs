//! The scheduler cache (`internal/cache`): nodes with their bound and *assumed* pods, and the
//! per-cycle [`Snapshot`] refreshed incrementally from it.
//!
//! A pod is *assumed* on a node as soon as the scheduling cycle picks the node, so the next cycle
//! already counts its resources, long before the binding is confirmed by the informer. If the
//! binding fails the pod is forgotten; when the informer reports the bound pod the assumption is
//! confirmed. Nodes are copy-on-write (`Arc<NodeInfo>`): a snapshot update copies only the nodes
//! changed since the last one (tracked by a generation counter), in zone-interleaved order
//! (`nodeTree`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;

use crate::framework::{ImageStateSummary, NodeInfo, PodInfo, Snapshot};

/// Errors of cache operations (they indicate a bookkeeping bug or a race, never bad input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// `assume_pod` for a pod the cache already has.
    #[error("pod {0} is in the cache, so can't be assumed")]
    AlreadyInCache(String),
    /// `forget_pod` for a pod that is not assumed.
    #[error("pod {0} wasn't assumed so cannot be forgotten")]
    NotAssumed(String),
}

#[derive(Clone, Debug)]
struct PodState {
    pod: Arc<PodInfo>,
    node: String,
    assumed: bool,
    binding_finished: bool,
}

#[derive(Default)]
struct Inner {
    nodes: HashMap<String, Arc<NodeInfo>>,
    /// generation → node name, the latest generation of each node only.
    by_generation: BTreeMap<u64, String>,
    pods: HashMap<String, PodState>,
    generation: u64,
    structure_generation: u64,
    zone_order: Vec<String>,
    zone_nodes: HashMap<String, Vec<String>>,
    zone_of: HashMap<String, String>,
    images: HashMap<String, (i64, HashSet<String>)>,
}

/// The zone key of a node (`utilnode.GetZoneKey`): region and zone labels.
pub fn zone_key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let get = |a: &str, b: &str| labels.and_then(|l| l.get(a).or_else(|| l.get(b))).cloned().unwrap_or_default();
    let region = get("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region");
    let zone = get("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone");
    if region.is_empty() && zone.is_empty() { String::new() } else { format!("{region}:\x00:{zone}") }
}

impl Inner {
    fn touch(&mut self, name: &str) -> &mut NodeInfo {
        self.generation += 1;
        let generation = self.generation;
        let entry = self.nodes.entry(name.to_string()).or_insert_with(|| Arc::new(NodeInfo::new(name)));
        let ni = Arc::make_mut(entry);
        self.by_generation.remove(&ni.generation);
        ni.generation = generation;
        self.by_generation.insert(generation, name.to_string());
        ni
    }

    fn tree_remove(&mut self, name: &str) {
        if let Some(zone) = self.zone_of.remove(name) {
            if let Some(v) = self.zone_nodes.get_mut(&zone) {
                v.retain(|n| n != name);
                if v.is_empty() {
                    self.zone_nodes.remove(&zone);
                    self.zone_order.retain(|z| z != &zone);
                }
            }
            self.structure_generation += 1;
        }
    }

    fn tree_add(&mut self, name: &str, zone: String) {
        if self.zone_of.get(name) == Some(&zone) {
            return;
        }
        self.tree_remove(name);
        if !self.zone_nodes.contains_key(&zone) {
            self.zone_order.push(zone.clone());
        }
        self.zone_nodes.entry(zone.clone()).or_default().push(name.to_string());
        self.zone_of.insert(name.to_string(), zone);
        self.structure_generation += 1;
    }

    fn forget_images(&mut self, name: &str) {
        if let Some(Some(node)) = self.nodes.get(name).map(|n| n.node_arc().cloned()) {
            for img in node.status.as_ref().and_then(|s| s.images.as_ref()).into_iter().flatten() {
                for n in img.names.iter().flatten() {
                    if let Some((_, nodes)) = self.images.get_mut(n) {
                        nodes.remove(name);
                        if nodes.is_empty() {
                            self.images.remove(n);
                        }
                    }
                }
            }
        }
    }

    fn image_states_for(&mut self, node: &Node, name: &str) -> HashMap<String, ImageStateSummary> {
        let mut out = HashMap::new();
        for img in node.status.as_ref().and_then(|s| s.images.as_ref()).into_iter().flatten() {
            let size = img.size_bytes.unwrap_or(0);
            for n in img.names.iter().flatten() {
                let e = self.images.entry(n.clone()).or_insert_with(|| (size, HashSet::new()));
                e.0 = size;
                e.1.insert(name.to_string());
                out.insert(n.clone(), ImageStateSummary { size, num_nodes: e.1.len() });
            }
        }
        out
    }

    fn add_pod_to_node(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.touch(node).add_pod(pod);
    }

    fn remove_pod_from_node(&mut self, uid: &str, node: &str) {
        if !self.nodes.contains_key(node) {
            return;
        }
        let ni = self.touch(node);
        ni.remove_pod(uid);
        if ni.node().is_none() && ni.pods().is_empty() {
            let g = ni.generation;
            self.nodes.remove(node);
            self.by_generation.remove(&g);
        }
    }
}

/// The scheduler cache. All methods are cheap and thread-safe.
#[derive(Default)]
pub struct Cache {
    inner: Mutex<Inner>,
}

impl Cache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or updates a node.
    pub fn add_node(&self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut g = self.inner.lock();
        g.forget_images(&name);
        let states = g.image_states_for(&node, &name);
        let zone = zone_key(&node);
        let had_node = g.nodes.get(&name).is_some_and(|n| n.node().is_some());
        let ni = g.touch(&name);
        ni.set_node(Arc::new(node));
        ni.set_image_states(states);
        g.tree_add(&name, zone);
        if !had_node {
            g.structure_generation += 1;
        }
    }

    /// Removes a node. Pods still bound to it are kept (as Kubernetes does) until deleted.
    pub fn remove_node(&self, name: &str) {
        let mut g = self.inner.lock();
        g.forget_images(name);
        g.tree_remove(name);
        g.structure_generation += 1;
        let Some(ni) = g.nodes.get(name) else { return };
        if ni.pods().is_empty() {
            let gen_ = ni.generation;
            g.nodes.remove(name);
            g.by_generation.remove(&gen_);
        } else {
            g.touch(name).clear_node();
        }
    }

    /// Assumes `pod` runs on `node` (before binding completes).
    ///
    /// # Errors
    /// [`CacheError::AlreadyInCache`] when the pod is already known.
    pub fn assume_pod(&self, pod: Arc<PodInfo>, node: &str) -> Result<(), CacheError> {
        let mut g = self.inner.lock();
        if g.pods.contains_key(&pod.uid) {
            return Err(CacheError::AlreadyInCache(pod.key.clone()));
        }
        g.add_pod_to_node(pod.clone(), node);
        g.pods
            .insert(pod.uid.clone(), PodState { pod, node: node.to_string(), assumed: true, binding_finished: false });
        Ok(())
    }

    /// Marks the binding of an assumed pod as done (it stays assumed until the informer confirms).
    pub fn finish_binding(&self, uid: &str) {
        if let Some(s) = self.inner.lock().pods.get_mut(uid) {
            s.binding_finished = true;
        }
    }

    /// Drops an assumed pod (binding failed).
    ///
    /// # Errors
    /// [`CacheError::NotAssumed`] when the pod is not assumed.
    pub fn forget_pod(&self, uid: &str) -> Result<(), CacheError> {
        let mut g = self.inner.lock();
        match g.pods.get(uid) {
            Some(s) if s.assumed => {
                let node = s.node.clone();
                g.pods.remove(uid);
                g.remove_pod_from_node(uid, &node);
                Ok(())
            }
            _ => Err(CacheError::NotAssumed(uid.to_string())),
        }
    }

    /// Adds or updates a pod bound to a node (from the informer); confirms an assumed pod.
    pub fn add_pod(&self, pod: Arc<PodInfo>) {
        let node = pod.node_name().to_string();
        if node.is_empty() {
            return;
        }
        let mut g = self.inner.lock();
        if let Some(old) = g.pods.get(&pod.uid).cloned() {
            g.remove_pod_from_node(&pod.uid, &old.node);
        }
        g.add_pod_to_node(pod.clone(), &node);
        g.pods.insert(pod.uid.clone(), PodState { pod, node, assumed: false, binding_finished: true });
    }

    /// Same as [`Cache::add_pod`].
    pub fn update_pod(&self, pod: Arc<PodInfo>) {
        self.add_pod(pod);
    }

    /// Removes a pod (deleted, or finished).
    pub fn remove_pod(&self, uid: &str) {
        let mut g = self.inner.lock();
        if let Some(s) = g.pods.remove(uid) {
            g.remove_pod_from_node(uid, &s.node);
        }
    }

    /// Whether the pod is assumed and not yet confirmed.
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.inner.lock().pods.get(uid).is_some_and(|s| s.assumed)
    }

    /// The node a known pod is on.
    pub fn pod_node(&self, uid: &str) -> Option<String> {
        self.inner.lock().pods.get(uid).map(|s| s.node.clone())
    }

    /// The pod object the cache holds for a UID.
    pub fn get_pod(&self, uid: &str) -> Option<Arc<PodInfo>> {
        self.inner.lock().pods.get(uid).map(|s| s.pod.clone())
    }

    /// `(nodes with a Node object, pods)`.
    pub fn counts(&self) -> (usize, usize) {
        let g = self.inner.lock();
        (g.nodes.values().filter(|n| n.node().is_some()).count(), g.pods.len())
    }

    /// Brings `snap` up to date, copying only nodes changed since its last update
    /// (`UpdateSnapshot`).
    pub fn update_snapshot(&self, snap: &mut Snapshot) {
        let g = self.inner.lock();
        if snap.structure_generation != g.structure_generation || snap.node_info_list.is_empty() && !g.nodes.is_empty()
        {
            // Node set or zones changed: rebuild the list in zone round-robin order.
            let mut list = Vec::with_capacity(g.nodes.len());
            let mut cursors: Vec<(usize, &Vec<String>)> =
                g.zone_order.iter().filter_map(|z| g.zone_nodes.get(z)).map(|v| (0usize, v)).collect();
            let mut remaining: usize = cursors.iter().map(|(_, v)| v.len()).sum();
            while remaining > 0 {
                for (i, names) in cursors.iter_mut() {
                    if *i < names.len() {
                        if let Some(ni) = g.nodes.get(&names[*i]).filter(|n| n.node().is_some()) {
                            list.push(ni.clone());
                        }
                        *i += 1;
                        remaining -= 1;
                    }
                }
            }
            snap.node_info_list = list;
            snap.generation = g.generation;
            snap.structure_generation = g.structure_generation;
            snap.rebuild_derived();
            return;
        }
        let mut affinity_changed = false;
        for (_, name) in g.by_generation.range(snap.generation + 1..) {
            let (Some(ni), Some(&i)) = (g.nodes.get(name), snap.index.get(name)) else { continue };
            let old = &snap.node_info_list[i];
            if !old.pods_with_affinity().is_empty() || !ni.pods_with_affinity().is_empty() {
                affinity_changed = true;
            }
            snap.node_info_list[i] = ni.clone();
        }
        if affinity_changed {
            snap.rebuild_affinity_lists();
        }
        snap.generation = g.generation;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{make_node, make_pod};

    fn cache_with(nodes: &[k8s_openapi::api::core::v1::Node]) -> Cache {
        let c = Cache::new();
        for n in nodes {
            c.add_node(n.clone());
        }
        c
    }

    #[test]
    fn assumed_pods_count_until_forgotten() {
        let c = cache_with(&[make_node("n").capacity(&[("cpu", "1")]).obj()]);
        let p = make_pod("p").req(&[("cpu", "500m")]).info();
        c.assume_pod(p.clone(), "n").unwrap();
        let mut s = Snapshot::default();
        c.update_snapshot(&mut s);
        assert_eq!(s.get("n").unwrap().requested().milli_cpu, 500);
        assert_eq!(c.assume_pod(p.clone(), "n"), Err(CacheError::AlreadyInCache("default/p".into())));
        c.forget_pod(&p.uid).unwrap();
        c.update_snapshot(&mut s);
        assert_eq!(s.get("n").unwrap().requested().milli_cpu, 0);
        assert!(c.forget_pod(&p.uid).is_err());
    }

    #[test]
    fn informer_add_confirms_an_assumed_pod_even_on_another_node() {
        let c = cache_with(&[make_node("a").obj(), make_node("b").obj()]);
        let p = make_pod("p").req(&[("cpu", "1")]).info();
        c.assume_pod(p.clone(), "a").unwrap();
        assert!(c.is_assumed(&p.uid));
        c.add_pod(make_pod("p").req(&[("cpu", "1")]).node("b").info());
        assert!(!c.is_assumed(&p.uid));
        let mut s = Snapshot::default();
        c.update_snapshot(&mut s);
        assert_eq!(s.get("a").unwrap().pods().len(), 0);
        assert_eq!(s.get("b").unwrap().pods().len(), 1);
        c.remove_pod(&p.uid);
        c.update_snapshot(&mut s);
        assert_eq!(s.get("b").unwrap().pods().len(), 0);
    }

    #[test]
    fn snapshot_updates_incrementally_and_shares_unchanged_nodes() {
        let c = cache_with(&[make_node("a").obj(), make_node("b").obj()]);
        let mut s = Snapshot::default();
        c.update_snapshot(&mut s);
        let b_before = s.get("b").unwrap().clone();
        c.add_pod(make_pod("p").node("a").info());
        c.update_snapshot(&mut s);
        assert_eq!(s.get("a").unwrap().pods().len(), 1);
        assert!(Arc::ptr_eq(&b_before, s.get("b").unwrap()), "unchanged node is shared, not copied");
    }

    #[test]
    fn snapshot_interleaves_zones_and_drops_removed_nodes() {
        let c = cache_with(&[
            make_node("a1").zone("a").obj(),
            make_node("a2").zone("a").obj(),
            make_node("b1").zone("b").obj(),
            make_node("b2").zone("b").obj(),
        ]);
        let mut s = Snapshot::default();
        c.update_snapshot(&mut s);
        let names: Vec<&str> = s.nodes().iter().map(|n| n.name()).collect();
        assert_eq!(names, vec!["a1", "b1", "a2", "b2"]);
        c.remove_node("b1");
        c.update_snapshot(&mut s);
        let names: Vec<&str> = s.nodes().iter().map(|n| n.name()).collect();
        assert_eq!(names, vec!["a1", "b2", "a2"]);
    }

    #[test]
    fn pods_with_affinity_are_listed_in_the_snapshot() {
        let c = cache_with(&[make_node("a").obj(), make_node("b").obj()]);
        let mut s = Snapshot::default();
        c.update_snapshot(&mut s);
        assert!(s.have_pods_with_required_anti_affinity().is_empty());
        c.add_pod(make_pod("p").pod_anti_affinity("kubernetes.io/hostname", &[("app", "x")]).node("b").info());
        c.update_snapshot(&mut s);
        assert_eq!(s.have_pods_with_required_anti_affinity().len(), 1);
        assert_eq!(s.have_pods_with_affinity()[0].name(), "b");
    }

    #[test]
    fn image_spread_counts_nodes_holding_the_image() {
        let c = cache_with(&[
            make_node("a").image(&["nginx:latest"], 100).obj(),
            make_node("b").image(&["nginx:latest"], 100).obj(),
        ]);
        let mut s = Snapshot::default();
        c.update_snapshot(&mut s);
        assert_eq!(s.get("b").unwrap().image_states()["nginx:latest"], ImageStateSummary { size: 100, num_nodes: 2 });
    }
}
