//! The NodeRestriction admission plugin
//! (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#noderestriction>,
//! Kubernetes 1.33): what a node (`system:node:<name>` in `system:nodes`) may write, on top of
//! what the Node authorizer lets through.
//!
//! - Node objects: only its own; on create no forbidden labels; on update no change of a
//!   forbidden label and no change of `spec.taints`. Forbidden are labels under
//!   `node-restriction.kubernetes.io/` (so an administrator can label nodes for workload
//!   isolation knowing kubelets cannot set them) and any other `kubernetes.io`/`k8s.io` label
//!   except the ones kubelets set ([`is_kubelet_label`]).
//! - Pods: create only mirror pods (annotation `kubernetes.io/config.mirror`) bound to itself,
//!   owned by nothing or by its own Node, using no service account, secret, configmap or claim;
//!   delete, `pods/status` updates and `pods/eviction` creates only of pods bound to itself; no
//!   other pod write.
//! - Leases: only its own, in `kube-node-lease`.
//! - `serviceaccounts/token`: only tokens bound to a pod on itself.
//!
//! Requests from other users pass untouched. Like kube-apiserver's plugin it runs in the
//! mutating phase (after ServiceAccount) and changes nothing.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use skiff_apimachinery::ApiError;

use crate::{AdmissionRequest, Feedback, MutatingAdmission, Operation};
use skiff_auth::node::graph::{NodeGraph, RefKind, references_any};
use skiff_auth::node::{NODE_LEASE_NAMESPACE, node_identity};

pub use super::service_account::MIRROR_POD_ANNOTATION;

/// The labels kubelets set on their Node (Kubernetes' `kubeletapis` list).
const KUBELET_LABELS: [&str; 11] = [
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

/// Label namespaces kubelets may use freely (and their subdomains).
const KUBELET_LABEL_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or_default()
}

fn in_namespace(ns: &str, domain: &str) -> bool {
    ns == domain || ns.strip_suffix(domain).is_some_and(|p| p.ends_with('.'))
}

/// Whether kubelets set `key` on their Node: one of the well-known node labels, or a label
/// under `kubelet.kubernetes.io/` or `node.kubernetes.io/` (or their subdomains).
pub fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key) || KUBELET_LABEL_NAMESPACES.iter().any(|d| in_namespace(label_namespace(key), d))
}

/// Whether NodeRestriction forbids a node to set, change or remove label `key` on its Node:
/// `node-restriction.kubernetes.io/` labels, and `kubernetes.io`/`k8s.io` labels kubelets do
/// not set.
pub fn is_forbidden_node_label(key: &str) -> bool {
    let ns = label_namespace(key);
    if in_namespace(ns, "node-restriction.kubernetes.io") {
        return true;
    }
    (in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io")) && !is_kubelet_label(key)
}

/// The plugin over the graph (it looks up which node a pod is bound to for evictions and
/// token requests).
pub struct NodeRestriction {
    graph: Arc<NodeGraph>,
}

fn node_name_of(pod: Option<&Value>) -> Option<&str> {
    pod.and_then(|p| p["spec"]["nodeName"].as_str())
}

fn labels(obj: Option<&Value>) -> Vec<(String, String)> {
    obj.and_then(|o| o["metadata"]["labels"].as_object())
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
        .unwrap_or_default()
}

impl NodeRestriction {
    /// The plugin over `graph`.
    pub fn new(graph: Arc<NodeGraph>) -> Self {
        Self { graph }
    }

    /// Checks one request.
    ///
    /// # Errors
    /// 403 Forbidden in kube-apiserver's wording (`nodes "b" is forbidden: node "a" is not
    /// allowed to modify node "b"`).
    pub fn check(&self, req: &AdmissionRequest) -> Result<(), ApiError> {
        let Some(node) = node_identity(&req.user) else { return Ok(()) };
        if node.is_empty() {
            return Err(req.forbidden(&format!("could not determine node from user {:?}", req.user.name)));
        }
        match (req.resource.group.as_str(), req.resource.resource.as_str()) {
            ("", "pods") => self.pod(node, req),
            ("", "nodes") => check_node(node, req),
            ("coordination.k8s.io", "leases") => check_lease(node, req),
            ("", "serviceaccounts") if req.sub_resource == "token" => self.token(node, req),
            _ => Ok(()),
        }
    }

    /// The node of the pod the request is about: the stored pod when admission has it, else the
    /// graph.
    fn bound_node(&self, req: &AdmissionRequest) -> Option<String> {
        node_name_of(req.old_object.as_ref())
            .map(str::to_string)
            .or_else(|| self.graph.pod_node(&req.namespace, &req.object_name()))
    }

    fn pod(&self, node: &str, req: &AdmissionRequest) -> Result<(), ApiError> {
        let op = req.op();
        match req.sub_resource.as_str() {
            "" => match op {
                Operation::Create => check_mirror_pod(node, req),
                Operation::Delete => {
                    if self.bound_node(req).as_deref() != Some(node) {
                        return Err(req.forbidden(&format!(
                            "node {node:?} can only delete pods with spec.nodeName set to itself"
                        )));
                    }
                    Ok(())
                }
                _ => Err(req.forbidden(&format!(
                    "unexpected operation {:?}, node {node:?} can only create and delete mirror pods",
                    op.as_str()
                ))),
            },
            "status" => {
                if op != Operation::Update {
                    return Err(req.forbidden(&format!("unexpected operation {:?}", op.as_str())));
                }
                if self.bound_node(req).as_deref() != Some(node) {
                    return Err(req.forbidden(&format!(
                        "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                    )));
                }
                Ok(())
            }
            "eviction" => {
                if op != Operation::Create {
                    return Err(req.forbidden(&format!("unexpected operation {:?}", op.as_str())));
                }
                let name = if req.name.is_empty() {
                    req.object.as_ref().and_then(|o| o["metadata"]["name"].as_str()).unwrap_or_default().to_string()
                } else {
                    req.name.clone()
                };
                if self.graph.pod_node(&req.namespace, &name).as_deref() != Some(node) {
                    return Err(
                        req.forbidden(&format!("node {node:?} can only evict pods with spec.nodeName set to itself"))
                    );
                }
                Ok(())
            }
            other => Err(req.forbidden(&format!(
                "unexpected subresource {other:?}, node {node:?} can only update pod status and create evictions"
            ))),
        }
    }

    fn token(&self, node: &str, req: &AdmissionRequest) -> Result<(), ApiError> {
        if req.op() != Operation::Create {
            return Ok(());
        }
        let bound = req.object.as_ref().map(|o| &o["spec"]["boundObjectRef"]).filter(|b| b.is_object());
        let Some(bound) = bound else {
            return Err(req.forbidden("node requested token not bound to a pod"));
        };
        if bound["kind"].as_str() != Some("Pod") {
            return Err(req.forbidden(&format!(
                "node requested token bound to a {}, only pods are allowed",
                bound["kind"].as_str().unwrap_or("nothing")
            )));
        }
        let pod = bound["name"].as_str().unwrap_or_default();
        if self.graph.pod_node(&req.namespace, pod).as_deref() != Some(node) {
            return Err(req.forbidden("node requested token bound to a pod scheduled on a different node"));
        }
        if let Some(uid) = bound["uid"].as_str().filter(|u| !u.is_empty())
            && self.graph.pod_uid(&req.namespace, pod).is_some_and(|u| u != uid)
        {
            return Err(req.forbidden("the UID in the bound object reference does not match the pod"));
        }
        Ok(())
    }
}

fn check_mirror_pod(node: &str, req: &AdmissionRequest) -> Result<(), ApiError> {
    let Some(pod) = req.object.as_ref() else { return Ok(()) };
    if pod["metadata"]["annotations"][MIRROR_POD_ANNOTATION].is_null() {
        return Err(req.forbidden(&format!(
            "pod does not have {MIRROR_POD_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
        )));
    }
    if node_name_of(Some(pod)) != Some(node) {
        return Err(req.forbidden(&format!("node {node:?} can only create pods with spec.nodeName set to itself")));
    }
    let owners = pod["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
    if owners.len() > 1 {
        return Err(
            req.forbidden(&format!("node {node:?} can only create pods with a single owner reference set to itself"))
        );
    }
    if let Some(owner) = owners.first() {
        if owner["apiVersion"] != "v1" || owner["kind"] != "Node" || owner["name"] != node {
            return Err(
                req.forbidden(&format!("node {node:?} can only create pods with an owner reference set to itself"))
            );
        }
        if owner["controller"] != true {
            return Err(req.forbidden(&format!(
                "node {node:?} can only create pods with a controller owner reference set to itself"
            )));
        }
        if owner["blockOwnerDeletion"] == true {
            return Err(req.forbidden(&format!("node {node:?} must not set blockOwnerDeletion on an owner reference")));
        }
    }
    if pod["spec"]["serviceAccountName"].as_str().is_some_and(|s| !s.is_empty()) {
        return Err(req.forbidden(&format!("node {node:?} can not create pods that reference a service account")));
    }
    for (kind, what) in [
        (RefKind::Secret, "secrets"),
        (RefKind::ConfigMap, "configmaps"),
        (RefKind::PersistentVolumeClaim, "persistentvolumeclaims"),
    ] {
        if references_any(pod, kind) {
            return Err(req.forbidden(&format!("node {node:?} can not create pods that reference {what}")));
        }
    }
    Ok(())
}

fn check_node(node: &str, req: &AdmissionRequest) -> Result<(), ApiError> {
    let requested = req.object_name();
    if requested != node {
        return Err(req.forbidden(&format!("node {node:?} is not allowed to modify node {requested:?}")));
    }
    if !req.sub_resource.is_empty() {
        return Ok(());
    }
    match req.op() {
        Operation::Create => {
            let mut bad: Vec<String> = labels(req.object.as_ref())
                .into_iter()
                .map(|(k, _)| k)
                .filter(|k| is_forbidden_node_label(k))
                .collect();
            if !bad.is_empty() {
                bad.sort();
                return Err(req.forbidden(&format!(
                    "node {node:?} is not allowed to set the following labels: {}",
                    bad.join(", ")
                )));
            }
        }
        Operation::Update => {
            let (new, old) = (labels(req.object.as_ref()), labels(req.old_object.as_ref()));
            let mut bad: Vec<String> = new
                .iter()
                .filter(|kv| !old.contains(kv))
                .chain(old.iter().filter(|(k, _)| !new.iter().any(|(nk, _)| nk == k)))
                .map(|(k, _)| k.clone())
                .filter(|k| is_forbidden_node_label(k))
                .collect();
            if !bad.is_empty() {
                bad.sort();
                bad.dedup();
                return Err(
                    req.forbidden(&format!("node {node:?} is not allowed to modify labels: {}", bad.join(", ")))
                );
            }
            let taints = |o: Option<&Value>| o.map(|o| o["spec"]["taints"].clone()).filter(|t| !t.is_null());
            let (new_t, old_t) = (taints(req.object.as_ref()), taints(req.old_object.as_ref()));
            let empty = |t: &Option<Value>| t.as_ref().is_none_or(|t| t.as_array().is_some_and(Vec::is_empty));
            if new_t != old_t && !(empty(&new_t) && empty(&old_t)) {
                return Err(req.forbidden(&format!("node {node:?} is not allowed to modify taints")));
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_lease(node: &str, req: &AdmissionRequest) -> Result<(), ApiError> {
    if req.namespace != NODE_LEASE_NAMESPACE {
        return Err(req.forbidden(&format!("can only access leases in the {NODE_LEASE_NAMESPACE:?} namespace")));
    }
    if req.object_name() != node {
        return Err(req.forbidden("can only access node lease with the same name as the requesting node"));
    }
    Ok(())
}

#[async_trait]
impl MutatingAdmission for NodeRestriction {
    fn name(&self) -> &str {
        "NodeRestriction"
    }

    async fn admit(&self, req: &mut AdmissionRequest, _feedback: &mut Feedback) -> Result<(), ApiError> {
        self.check(req)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use skiff_auth::UserInfo;

    fn plugin() -> NodeRestriction {
        let g = Arc::new(NodeGraph::new());
        g.apply_pod(
            &json!({"metadata": {"namespace": "default", "name": "pa", "uid": "ua"}, "spec": {"nodeName": "a"}}),
        );
        g.apply_pod(
            &json!({"metadata": {"namespace": "default", "name": "pb", "uid": "ub"}, "spec": {"nodeName": "b"}}),
        );
        NodeRestriction::new(g)
    }

    fn req(op: Operation, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> AdmissionRequest {
        let mut r = AdmissionRequest::new(op, group, "v1", resource, "");
        r.sub_resource = sub.into();
        r.namespace = ns.into();
        r.name = name.into();
        r.user = UserInfo::new("system:node:a", ["system:nodes", "system:authenticated"]);
        r
    }

    fn node(name: &str, labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}})
    }

    #[test]
    fn kubelet_labels_are_allowed_and_restricted_ones_are_not() {
        for ok in [
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "node.kubernetes.io/anything",
            "x.kubelet.kubernetes.io/y",
            "example.com/team",
            "plain",
        ] {
            assert!(!is_forbidden_node_label(ok), "{ok}");
        }
        for bad in [
            "node-restriction.kubernetes.io/secure",
            "example.node-restriction.kubernetes.io/x",
            "node-role.kubernetes.io/control-plane",
            "kubernetes.io/role",
            "k8s.io/x",
            "foo.k8s.io/x",
        ] {
            assert!(is_forbidden_node_label(bad), "{bad}");
        }
    }

    #[test]
    fn node_writes_are_decided_like_kubernetes() {
        let p = plugin();
        let kubelet = json!({"kubernetes.io/hostname": "a"});
        let table: Vec<(&str, AdmissionRequest, Option<&str>)> = vec![
            (
                "own node create",
                {
                    let mut r = req(Operation::Create, "", "nodes", "", "", "");
                    r.object = Some(node("a", kubelet.clone(), json!([{"key": "k", "effect": "NoSchedule"}])));
                    r
                },
                None,
            ),
            (
                "other node create",
                {
                    let mut r = req(Operation::Create, "", "nodes", "", "", "");
                    r.object = Some(node("b", kubelet.clone(), Value::Null));
                    r
                },
                Some(r#"nodes "b" is forbidden: node "a" is not allowed to modify node "b""#),
            ),
            (
                "create with a restricted label",
                {
                    let mut r = req(Operation::Create, "", "nodes", "", "", "");
                    r.object = Some(node("a", json!({"node-restriction.kubernetes.io/pci": "true"}), Value::Null));
                    r
                },
                Some(r#"node "a" is not allowed to set the following labels: node-restriction.kubernetes.io/pci"#),
            ),
            (
                "other node status",
                req(Operation::Update, "", "nodes", "status", "", "b"),
                Some(r#"node "a" is not allowed to modify node "b""#),
            ),
            ("own node status", req(Operation::Update, "", "nodes", "status", "", "a"), None),
            (
                "update keeping a restricted label",
                {
                    let mut r = req(Operation::Update, "", "nodes", "", "", "a");
                    let labels = json!({"node-restriction.kubernetes.io/pci": "true", "kubernetes.io/hostname": "a"});
                    r.old_object = Some(node("a", labels.clone(), Value::Null));
                    r.object = Some(node("a", labels, json!([])));
                    r
                },
                None,
            ),
            (
                "update removing a restricted label",
                {
                    let mut r = req(Operation::Update, "", "nodes", "", "", "a");
                    r.old_object = Some(node("a", json!({"node-restriction.kubernetes.io/pci": "true"}), Value::Null));
                    r.object = Some(node("a", json!({}), Value::Null));
                    r
                },
                Some("is not allowed to modify labels: node-restriction.kubernetes.io/pci"),
            ),
            (
                "update removing a taint",
                {
                    let mut r = req(Operation::Update, "", "nodes", "", "", "a");
                    r.old_object = Some(node("a", json!({}), json!([{"key": "k", "effect": "NoSchedule"}])));
                    r.object = Some(node("a", json!({}), Value::Null));
                    r
                },
                Some(r#"node "a" is not allowed to modify taints"#),
            ),
        ];
        check_table(&p, table);
    }

    /// Runs each case: `None` wants the request admitted, `Some(text)` a 403 whose message
    /// contains `text`.
    fn check_table(p: &NodeRestriction, table: Vec<(&str, AdmissionRequest, Option<&str>)>) {
        for (what, r, want) in table {
            match (p.check(&r), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => {
                    assert_eq!(e.code, 403, "{what}");
                    assert!(e.message.contains(w), "{what}: {}", e.message);
                }
                (got, _) => panic!("{what}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn pod_and_lease_writes_are_limited_to_the_node_itself() {
        let p = plugin();
        let mirror = |node: &str| {
            json!({"metadata": {"name": "static-web", "annotations": {MIRROR_POD_ANNOTATION: "x"}},
                "spec": {"nodeName": node, "containers": [{"name": "c"}]}})
        };
        let table: Vec<(&str, AdmissionRequest, Option<&str>)> = vec![
            ("status of own pod", req(Operation::Update, "", "pods", "status", "default", "pa"), None),
            (
                "status of b's pod",
                req(Operation::Update, "", "pods", "status", "default", "pb"),
                Some(
                    r#"pods "pb" is forbidden: node "a" can only update pod status for pods with spec.nodeName set to itself"#,
                ),
            ),
            (
                "status with the stored pod",
                {
                    let mut r = req(Operation::Update, "", "pods", "status", "default", "new");
                    r.old_object = Some(json!({"spec": {"nodeName": "b"}}));
                    r
                },
                Some("can only update pod status"),
            ),
            ("delete own pod", req(Operation::Delete, "", "pods", "", "default", "pa"), None),
            (
                "delete b's pod",
                req(Operation::Delete, "", "pods", "", "default", "pb"),
                Some("can only delete pods with spec.nodeName set to itself"),
            ),
            ("evict own pod", req(Operation::Create, "", "pods", "eviction", "default", "pa"), None),
            (
                "evict b's pod",
                req(Operation::Create, "", "pods", "eviction", "default", "pb"),
                Some("can only evict pods with spec.nodeName set to itself"),
            ),
            (
                "update a pod",
                req(Operation::Update, "", "pods", "", "default", "pa"),
                Some(r#"unexpected operation "UPDATE", node "a" can only create and delete mirror pods"#),
            ),
            (
                "mirror pod",
                {
                    let mut r = req(Operation::Create, "", "pods", "", "default", "");
                    r.object = Some(mirror("a"));
                    r
                },
                None,
            ),
            (
                "mirror pod for b",
                {
                    let mut r = req(Operation::Create, "", "pods", "", "default", "");
                    r.object = Some(mirror("b"));
                    r
                },
                Some("can only create pods with spec.nodeName set to itself"),
            ),
            (
                "plain pod",
                {
                    let mut r = req(Operation::Create, "", "pods", "", "default", "");
                    r.object = Some(json!({"metadata": {"name": "x"}, "spec": {"nodeName": "a"}}));
                    r
                },
                Some("can only create mirror pods"),
            ),
            (
                "mirror pod with a secret",
                {
                    let mut r = req(Operation::Create, "", "pods", "", "default", "");
                    let mut m = mirror("a");
                    m["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "x"}}]);
                    r.object = Some(m);
                    r
                },
                Some("can not create pods that reference secrets"),
            ),
            (
                "own lease",
                {
                    let mut r = req(Operation::Create, "coordination.k8s.io", "leases", "", "kube-node-lease", "");
                    r.object = Some(json!({"metadata": {"name": "a"}}));
                    r
                },
                None,
            ),
            (
                "b's lease",
                {
                    let mut r = req(Operation::Create, "coordination.k8s.io", "leases", "", "kube-node-lease", "");
                    r.object = Some(json!({"metadata": {"name": "b"}}));
                    r
                },
                Some("can only access node lease with the same name as the requesting node"),
            ),
            (
                "lease elsewhere",
                req(Operation::Update, "coordination.k8s.io", "leases", "", "default", "a"),
                Some("can only access leases in the \"kube-node-lease\" namespace"),
            ),
            (
                "token for own pod",
                {
                    let mut r = req(Operation::Create, "", "serviceaccounts", "token", "default", "default");
                    r.object = Some(json!({"spec": {"boundObjectRef": {"kind": "Pod", "name": "pa", "uid": "ua"}}}));
                    r
                },
                None,
            ),
            (
                "token for b's pod",
                {
                    let mut r = req(Operation::Create, "", "serviceaccounts", "token", "default", "default");
                    r.object = Some(json!({"spec": {"boundObjectRef": {"kind": "Pod", "name": "pb"}}}));
                    r
                },
                Some("node requested token bound to a pod scheduled on a different node"),
            ),
            (
                "unbound token",
                {
                    let mut r = req(Operation::Create, "", "serviceaccounts", "token", "default", "default");
                    r.object = Some(json!({"spec": {}}));
                    r
                },
                Some("node requested token not bound to a pod"),
            ),
        ];
        check_table(&p, table);
    }

    #[test]
    fn other_users_are_not_restricted() {
        let p = plugin();
        let mut r = req(Operation::Update, "", "pods", "status", "default", "pb");
        r.user = UserInfo::new("system:admin", ["system:masters"]);
        p.check(&r).unwrap();
        r.user = UserInfo::new("system:node:a", ["system:authenticated"]);
        p.check(&r).unwrap();
    }
}
