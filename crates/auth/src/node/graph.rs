//! [`NodeGraph`]: the relation the Node authorizer decides on — which node each scheduled pod is
//! bound to, and which secrets, configmaps, persistent volume claims and service account each
//! pod references; which claim each persistent volume is bound to.
//!
//! Kubernetes' Node authorizer keeps a graph (vertices for nodes, pods and the objects pods use;
//! edges object → pod → node, pv → pvc) populated from informers
//! (`plugin/pkg/auth/authorizer/node/graph_populator.go`). skiff keeps the same relation as a
//! reference-counted index, fed from the API server's pod and PersistentVolume watch caches:
//! "is there a path from this object to node N" is a hash lookup. Unscheduled pods (no
//! `spec.nodeName`) relate to no node, as in Kubernetes.

use std::collections::{HashMap, HashSet};

use parking_lot::RwLock;
use serde_json::Value;

/// The kinds of namespaced objects a pod references.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RefKind {
    /// A core/v1 Secret.
    Secret,
    /// A core/v1 ConfigMap.
    ConfigMap,
    /// A core/v1 PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// A core/v1 ServiceAccount.
    ServiceAccount,
}

/// What the graph knows about one bound pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodEntry {
    node: String,
    uid: String,
    refs: Vec<(RefKind, String)>,
}

type ObjectKey = (RefKind, String, String);

#[derive(Debug, Default)]
struct Inner {
    /// `(namespace, name)` → the bound pod.
    pods: HashMap<(String, String), PodEntry>,
    /// `(kind, namespace, name)` → node → how many of the node's pods reference it.
    refs: HashMap<ObjectKey, HashMap<String, u32>>,
    /// PersistentVolume name → the claim its `spec.claimRef` names.
    pv_claims: HashMap<String, (String, String)>,
}

impl Inner {
    fn remove_pod(&mut self, ns: &str, name: &str) {
        let Some(old) = self.pods.remove(&(ns.to_string(), name.to_string())) else { return };
        for (kind, obj) in old.refs {
            let key = (kind, ns.to_string(), obj);
            if let Some(nodes) = self.refs.get_mut(&key) {
                if let Some(n) = nodes.get_mut(&old.node) {
                    *n -= 1;
                    if *n == 0 {
                        nodes.remove(&old.node);
                    }
                }
                if nodes.is_empty() {
                    self.refs.remove(&key);
                }
            }
        }
    }

    fn add_pod(&mut self, ns: &str, name: &str, entry: PodEntry) {
        for (kind, obj) in &entry.refs {
            *self
                .refs
                .entry((*kind, ns.to_string(), obj.clone()))
                .or_default()
                .entry(entry.node.clone())
                .or_default() += 1;
        }
        self.pods.insert((ns.to_string(), name.to_string()), entry);
    }

    fn references(&self, node: &str, kind: RefKind, ns: &str, name: &str) -> bool {
        self.refs.get(&(kind, ns.to_string(), name.to_string())).is_some_and(|nodes| nodes.contains_key(node))
    }
}

/// The pod → node relation and what bound pods reference, safe to share between the feeding
/// task and request handlers.
#[derive(Debug, Default)]
pub struct NodeGraph {
    inner: RwLock<Inner>,
}

fn meta<'v>(obj: &'v Value, field: &str) -> &'v str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

impl NodeGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a pod (JSON as stored). A pod without `spec.nodeName` is removed: only
    /// bound pods relate objects to nodes.
    pub fn apply_pod(&self, pod: &Value) {
        let (ns, name) = (meta(pod, "namespace"), meta(pod, "name"));
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let mut inner = self.inner.write();
        inner.remove_pod(ns, name);
        if node.is_empty() || name.is_empty() {
            return;
        }
        let entry = PodEntry { node: node.to_string(), uid: meta(pod, "uid").to_string(), refs: pod_references(pod) };
        inner.add_pod(ns, name, entry);
    }

    /// Removes pod `namespace/name`.
    pub fn remove_pod(&self, namespace: &str, name: &str) {
        self.inner.write().remove_pod(namespace, name);
    }

    /// Adds or replaces a PersistentVolume: its `spec.claimRef` binds it to a claim.
    pub fn apply_persistent_volume(&self, pv: &Value) {
        let name = meta(pv, "name").to_string();
        let claim = &pv["spec"]["claimRef"];
        let (ns, claim_name) =
            (claim["namespace"].as_str().unwrap_or_default(), claim["name"].as_str().unwrap_or_default());
        let mut inner = self.inner.write();
        if ns.is_empty() || claim_name.is_empty() {
            inner.pv_claims.remove(&name);
        } else {
            inner.pv_claims.insert(name, (ns.to_string(), claim_name.to_string()));
        }
    }

    /// Removes PersistentVolume `name`.
    pub fn remove_persistent_volume(&self, name: &str) {
        self.inner.write().pv_claims.remove(name);
    }

    /// Replaces everything with `pods` and `pvs` (a full load after a watch restart).
    pub fn replace<'v>(&self, pods: impl IntoIterator<Item = &'v Value>, pvs: impl IntoIterator<Item = &'v Value>) {
        let fresh = Self::new();
        for p in pods {
            fresh.apply_pod(p);
        }
        for pv in pvs {
            fresh.apply_persistent_volume(pv);
        }
        *self.inner.write() = fresh.inner.into_inner();
    }

    /// The node pod `namespace/name` is bound to, when the graph knows it.
    pub fn pod_node(&self, namespace: &str, name: &str) -> Option<String> {
        self.inner.read().pods.get(&(namespace.to_string(), name.to_string())).map(|p| p.node.clone())
    }

    /// The uid of bound pod `namespace/name`, when the graph knows it.
    pub fn pod_uid(&self, namespace: &str, name: &str) -> Option<String> {
        self.inner.read().pods.get(&(namespace.to_string(), name.to_string())).map(|p| p.uid.clone())
    }

    /// Whether a pod bound to `node` references the `kind` object `namespace/name`.
    pub fn references(&self, node: &str, kind: RefKind, namespace: &str, name: &str) -> bool {
        self.inner.read().references(node, kind, namespace, name)
    }

    /// Whether PersistentVolume `name` is bound to a claim a pod on `node` uses.
    pub fn persistent_volume_used_by(&self, node: &str, name: &str) -> bool {
        let inner = self.inner.read();
        inner
            .pv_claims
            .get(name)
            .is_some_and(|(ns, claim)| inner.references(node, RefKind::PersistentVolumeClaim, ns, claim))
    }

    /// How many bound pods the graph holds.
    pub fn pod_count(&self) -> usize {
        self.inner.read().pods.len()
    }
}

fn push_name(out: &mut Vec<(RefKind, String)>, kind: RefKind, name: &Value) {
    if let Some(n) = name.as_str().filter(|n| !n.is_empty()) {
        out.push((kind, n.to_string()));
    }
}

fn items(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

/// The objects a pod spec references, sorted and without duplicates (Kubernetes'
/// `VisitPodSecretNames`/`VisitPodConfigmapNames` plus claims and the service account):
/// `imagePullSecrets`; env `secretKeyRef`/`configMapKeyRef` and `envFrom` of containers, init
/// and ephemeral containers; `secret`, `configMap`, `projected` and `persistentVolumeClaim`
/// volumes, generic ephemeral volumes (claim `<pod>-<volume>`), and the `secretRef`s of volume
/// plugins (azureFile, cephfs, cinder, csi, flexVolume, iscsi, rbd, scaleIO, storageos);
/// `serviceAccountName`.
pub fn pod_references(pod: &Value) -> Vec<(RefKind, String)> {
    use RefKind::*;
    let spec = &pod["spec"];
    let mut out = Vec::new();
    for s in items(&spec["imagePullSecrets"]) {
        push_name(&mut out, Secret, &s["name"]);
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in items(&spec[list]) {
            for e in items(&c["env"]) {
                push_name(&mut out, Secret, &e["valueFrom"]["secretKeyRef"]["name"]);
                push_name(&mut out, ConfigMap, &e["valueFrom"]["configMapKeyRef"]["name"]);
            }
            for e in items(&c["envFrom"]) {
                push_name(&mut out, Secret, &e["secretRef"]["name"]);
                push_name(&mut out, ConfigMap, &e["configMapRef"]["name"]);
            }
        }
    }
    let pod_name = meta(pod, "name");
    for v in items(&spec["volumes"]) {
        push_name(&mut out, Secret, &v["secret"]["secretName"]);
        push_name(&mut out, ConfigMap, &v["configMap"]["name"]);
        for s in items(&v["projected"]["sources"]) {
            push_name(&mut out, Secret, &s["secret"]["name"]);
            push_name(&mut out, ConfigMap, &s["configMap"]["name"]);
        }
        push_name(&mut out, PersistentVolumeClaim, &v["persistentVolumeClaim"]["claimName"]);
        if v["ephemeral"].is_object()
            && let Some(vol) = v["name"].as_str()
        {
            out.push((PersistentVolumeClaim, format!("{pod_name}-{vol}")));
        }
        push_name(&mut out, Secret, &v["azureFile"]["secretName"]);
        for plugin in ["cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos"] {
            push_name(&mut out, Secret, &v[plugin]["secretRef"]["name"]);
        }
        push_name(&mut out, Secret, &v["csi"]["nodePublishSecretRef"]["name"]);
    }
    push_name(&mut out, ServiceAccount, &spec["serviceAccountName"]);
    out.sort();
    out.dedup();
    out
}

/// Whether `pod` references any object of `kind` (NodeRestriction refuses mirror pods that do).
pub fn references_any(pod: &Value, kind: RefKind) -> bool {
    pod_references(pod).iter().any(|(k, _)| *k == kind)
}

/// The set of nodes pods reference `kind` `namespace/name` from (tests and diagnostics).
pub fn nodes_of(graph: &NodeGraph, kind: RefKind, namespace: &str, name: &str) -> HashSet<String> {
    graph
        .inner
        .read()
        .refs
        .get(&(kind, namespace.to_string(), name.to_string()))
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, node: &str, volumes: Value) -> Value {
        json!({"metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}")},
            "spec": {"nodeName": node, "serviceAccountName": "default", "volumes": volumes,
                "containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}],
                    "envFrom": [{"secretRef": {"name": "env-secret"}}]}],
                "imagePullSecrets": [{"name": "pull"}]}})
    }

    #[test]
    fn a_pod_references_env_volume_pull_secrets_claims_and_its_service_account() {
        let p = pod(
            "web",
            "a",
            json!([{"name": "s", "secret": {"secretName": "vol-secret"}},
                   {"name": "p", "projected": {"sources": [{"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-secret"}}]}},
                   {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                   {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
                   {"name": "c", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "csi-secret"}}}]),
        );
        let refs = pod_references(&p);
        let want = [
            (RefKind::Secret, "csi-secret"),
            (RefKind::Secret, "env-secret"),
            (RefKind::Secret, "proj-secret"),
            (RefKind::Secret, "pull"),
            (RefKind::Secret, "vol-secret"),
            (RefKind::ConfigMap, "cm"),
            (RefKind::ConfigMap, "proj-cm"),
            (RefKind::PersistentVolumeClaim, "data"),
            (RefKind::PersistentVolumeClaim, "web-scratch"),
            (RefKind::ServiceAccount, "default"),
        ];
        let mut want: Vec<(RefKind, String)> = want.iter().map(|(k, n)| (*k, n.to_string())).collect();
        want.sort();
        assert_eq!(refs, want);
    }

    #[test]
    fn references_follow_pods_as_they_are_bound_moved_and_deleted() {
        let g = NodeGraph::new();
        let vols = json!([{"name": "s", "secret": {"secretName": "shared"}}]);
        g.apply_pod(&pod("p1", "", vols.clone()));
        assert!(!g.references("a", RefKind::Secret, "default", "shared"), "an unscheduled pod relates to no node");
        g.apply_pod(&pod("p1", "a", vols.clone()));
        g.apply_pod(&pod("p2", "a", vols.clone()));
        assert!(g.references("a", RefKind::Secret, "default", "shared"));
        assert!(!g.references("b", RefKind::Secret, "default", "shared"));
        assert!(!g.references("a", RefKind::Secret, "other", "shared"), "namespaces are distinct");
        g.remove_pod("default", "p1");
        assert!(g.references("a", RefKind::Secret, "default", "shared"), "p2 still uses it");
        g.apply_pod(&pod("p2", "b", vols));
        assert!(!g.references("a", RefKind::Secret, "default", "shared"));
        assert!(g.references("b", RefKind::Secret, "default", "shared"));
        assert_eq!(g.pod_node("default", "p2").as_deref(), Some("b"));
        g.remove_pod("default", "p2");
        assert_eq!(nodes_of(&g, RefKind::Secret, "default", "shared"), HashSet::new());
        assert_eq!(g.pod_count(), 0);
    }

    #[test]
    fn a_persistent_volume_is_used_by_the_node_whose_pod_uses_its_claim() {
        let g = NodeGraph::new();
        g.apply_pod(&pod("db", "a", json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])));
        g.apply_persistent_volume(&json!({"metadata": {"name": "pv1"},
            "spec": {"claimRef": {"namespace": "default", "name": "data"}}}));
        g.apply_persistent_volume(&json!({"metadata": {"name": "pv2"}, "spec": {}}));
        assert!(g.persistent_volume_used_by("a", "pv1"));
        assert!(!g.persistent_volume_used_by("b", "pv1"));
        assert!(!g.persistent_volume_used_by("a", "pv2"));
        g.replace([], []);
        assert!(!g.persistent_volume_used_by("a", "pv1"));
    }
}
