//! [`NodeAuthorizer`]: kube-apiserver's `Node` authorization mode
//! (<https://kubernetes.io/docs/reference/access-authn-authz/node/>, Kubernetes 1.33 with
//! `AuthorizeNodeWithSelectors` on, its default).
//!
//! For a request from a node (`system:node:<name>` in `system:nodes`):
//! - secrets and configmaps (get, list, watch of one named object), persistentvolumeclaims and
//!   persistentvolumes (get), `serviceaccounts/token` (create): allowed only when a pod bound to
//!   the node uses the object ([`NodeGraph`]);
//! - leases: get, create, update, patch, delete in `kube-node-lease`, of the lease named after
//!   the node (the name of a create is checked by NodeRestriction admission);
//! - nodes: get/list/watch of its own Node only (a list or watch needs `fieldSelector
//!   metadata.name=<node>`); create, update, patch and `nodes/status` writes are allowed here
//!   and limited to its own Node by NodeRestriction;
//! - pods: get of a pod bound to it; list/watch with `fieldSelector spec.nodeName=<node>` (or of
//!   one named pod bound to it); other verbs by the static node rules (create/delete of mirror
//!   pods, `pods/status`, `pods/eviction`, limited by NodeRestriction);
//! - everything else: the static node rules (the `system:node` ClusterRole's rules,
//!   [`crate::rbac::bootstrap::node_rules`]).
//!
//! The authorizer never denies: a request it does not allow goes on to RBAC ("no opinion"), and
//! its reason (`no relationship found between node 'a' and this object`) is added to RBAC's
//! Forbidden message.

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::graph::{NodeGraph, RefKind};
use super::{NODE_LEASE_NAMESPACE, node_identity};
use crate::rbac::rules::rule_allows;
use crate::rbac::{Attributes, Authorizer, Decision};

/// The Node authorizer over a [`NodeGraph`].
pub struct NodeAuthorizer {
    graph: Arc<NodeGraph>,
    rules: Vec<PolicyRule>,
}

fn allow() -> Decision {
    Decision { allowed: true, reason: String::new() }
}

fn no_opinion(reason: impl Into<String>) -> Decision {
    Decision { allowed: false, reason: reason.into() }
}

/// Whether a field selector (`a=b,c==d`) requires `field` to equal `value`.
pub fn field_selector_requires(selector: &str, field: &str, value: &str) -> bool {
    selector.split(',').any(|req| {
        let req = req.trim();
        if req.contains("!=") {
            return false;
        }
        let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) else { return false };
        k.trim() == field && v.trim() == value
    })
}

impl NodeAuthorizer {
    /// The authorizer over `graph`, with the static rules of the `system:node` ClusterRole.
    pub fn new(graph: Arc<NodeGraph>) -> Self {
        Self { graph, rules: crate::rbac::bootstrap::node_rules() }
    }

    /// The graph it reads.
    pub fn graph(&self) -> &Arc<NodeGraph> {
        &self.graph
    }

    /// Decides a request whose list/watch carried `field_selector` (the raw query parameter,
    /// "" when none). Not allowed means "no opinion": the next authorizer decides.
    pub fn authorize_request(&self, attrs: &Attributes<'_>, field_selector: &str) -> Decision {
        let Some(node) = node_identity(attrs.user) else { return no_opinion("") };
        if node.is_empty() {
            return no_opinion("unknown node");
        }
        if attrs.resource_request {
            let d = match (attrs.api_group, attrs.resource) {
                ("", "secrets") => Some(self.read_namespaced(node, RefKind::Secret, attrs)),
                ("", "configmaps") => Some(self.read_namespaced(node, RefKind::ConfigMap, attrs)),
                ("", "persistentvolumeclaims") if attrs.subresource.is_empty() => Some(self.get_only(attrs, |name| {
                    self.graph.references(node, RefKind::PersistentVolumeClaim, attrs.namespace, name)
                })),
                ("", "persistentvolumes") => {
                    Some(self.get_only(attrs, |name| self.graph.persistent_volume_used_by(node, name)))
                }
                ("", "serviceaccounts") => Some(self.create_token(node, attrs)),
                ("coordination.k8s.io", "leases") => Some(lease(node, attrs)),
                ("", "nodes") => nodes(node, attrs),
                ("", "pods") => self.pods(node, attrs, field_selector),
                _ => None,
            };
            if let Some(d) = d {
                return d;
            }
        }
        if self.rules.iter().any(|r| rule_allows(attrs, r)) {
            return allow();
        }
        no_opinion("")
    }

    fn related(&self, node: &str, attrs: &Attributes<'_>, found: impl FnOnce(&str) -> bool) -> Decision {
        if attrs.name.is_empty() {
            return no_opinion("No Object name found");
        }
        if found(attrs.name) {
            allow()
        } else {
            no_opinion(format!("no relationship found between node '{node}' and this object"))
        }
    }

    fn read_namespaced(&self, node: &str, kind: RefKind, attrs: &Attributes<'_>) -> Decision {
        if !matches!(attrs.verb, "get" | "list" | "watch") {
            return no_opinion("can only read resources of this type");
        }
        if !attrs.subresource.is_empty() {
            return no_opinion("cannot read subresource");
        }
        if attrs.namespace.is_empty() {
            return no_opinion("can only read namespaced object of this type");
        }
        self.related(node, attrs, |name| self.graph.references(node, kind, attrs.namespace, name))
    }

    fn get_only(&self, attrs: &Attributes<'_>, found: impl FnOnce(&str) -> bool) -> Decision {
        if attrs.verb != "get" {
            return no_opinion("can only get individual resources of this type");
        }
        if !attrs.subresource.is_empty() {
            return no_opinion("cannot get subresource");
        }
        let node = node_identity(attrs.user).unwrap_or_default();
        self.related(node, attrs, found)
    }

    fn create_token(&self, node: &str, attrs: &Attributes<'_>) -> Decision {
        if attrs.verb != "create" || attrs.name.is_empty() {
            return no_opinion("can only create tokens for individual service accounts");
        }
        if attrs.subresource != "token" {
            return no_opinion("can only create token subresource of serviceaccount");
        }
        self.related(node, attrs, |name| self.graph.references(node, RefKind::ServiceAccount, attrs.namespace, name))
    }

    fn pods(&self, node: &str, attrs: &Attributes<'_>, field_selector: &str) -> Option<Decision> {
        if !attrs.subresource.is_empty() {
            return None;
        }
        let bound = |name: &str| self.graph.pod_node(attrs.namespace, name).is_some_and(|n| n == node);
        match attrs.verb {
            "get" => Some(self.related(node, attrs, bound)),
            "list" | "watch" => {
                if field_selector_requires(field_selector, "spec.nodeName", node) {
                    Some(allow())
                } else if !attrs.name.is_empty() {
                    Some(self.related(node, attrs, bound))
                } else {
                    Some(no_opinion("can only list/watch pods with spec.nodeName field selector"))
                }
            }
            _ => None,
        }
    }
}

fn lease(node: &str, attrs: &Attributes<'_>) -> Decision {
    if !matches!(attrs.verb, "get" | "create" | "update" | "patch" | "delete") {
        return no_opinion("can only get, create, update, patch, or delete a node lease");
    }
    if attrs.namespace != NODE_LEASE_NAMESPACE {
        return no_opinion(format!("can only access leases in the {NODE_LEASE_NAMESPACE} namespace"));
    }
    // A create names its object in the body: NodeRestriction checks it.
    if attrs.verb != "create" && attrs.name != node {
        return no_opinion("can only access node lease with the same name as the requesting node");
    }
    allow()
}

fn nodes(node: &str, attrs: &Attributes<'_>) -> Option<Decision> {
    match (attrs.subresource, attrs.verb) {
        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => Some(allow()),
        ("", "get" | "list" | "watch") => Some(if attrs.name == node {
            allow()
        } else if attrs.name.is_empty() {
            no_opinion(format!("node '{node}' cannot read all nodes, only its own Node object"))
        } else {
            no_opinion(format!("node '{node}' cannot read '{}', only its own Node object", attrs.name))
        }),
        _ => None,
    }
}

impl Authorizer for NodeAuthorizer {
    fn authorize(&self, attrs: &Attributes<'_>) -> Decision {
        self.authorize_request(attrs, "")
    }
}

/// The union `Node,RBAC` (or any two authorizers): the first allows, or the second decides; a
/// denial carries both reasons. Used for access reviews and impersonation checks.
pub struct Union {
    /// Asked first.
    pub first: Arc<dyn Authorizer>,
    /// Asked when the first does not allow.
    pub second: Arc<dyn Authorizer>,
}

impl Authorizer for Union {
    fn authorize(&self, attrs: &Attributes<'_>) -> Decision {
        let d = self.first.authorize(attrs);
        if d.allowed {
            return d;
        }
        let mut d2 = self.second.authorize(attrs);
        if !d2.allowed && !d.reason.is_empty() {
            d2.reason = if d2.reason.is_empty() { d.reason } else { format!("{}, {}", d.reason, d2.reason) };
        }
        d2
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::UserInfo;

    fn graph() -> Arc<NodeGraph> {
        let g = Arc::new(NodeGraph::new());
        g.apply_pod(&json!({"metadata": {"namespace": "default", "name": "pa", "uid": "u1"},
            "spec": {"nodeName": "a", "serviceAccountName": "sa-a",
                "volumes": [{"name": "s", "secret": {"secretName": "secret-a"}},
                            {"name": "c", "configMap": {"name": "cm-a"}},
                            {"name": "d", "persistentVolumeClaim": {"claimName": "pvc-a"}}]}}));
        g.apply_pod(&json!({"metadata": {"namespace": "default", "name": "pb"},
            "spec": {"nodeName": "b", "volumes": [{"name": "s", "secret": {"secretName": "secret-b"}}]}}));
        g.apply_persistent_volume(&json!({"metadata": {"name": "pv-a"},
            "spec": {"claimRef": {"namespace": "default", "name": "pvc-a"}}}));
        g
    }

    struct Case {
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
        sub: &'static str,
        ns: &'static str,
        name: &'static str,
        selector: &'static str,
        allowed: bool,
    }

    // One positional argument per column of the table below, which stays one line per case.
    #[allow(clippy::too_many_arguments)]
    const fn case(
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
        sub: &'static str,
        ns: &'static str,
        name: &'static str,
        selector: &'static str,
        allowed: bool,
    ) -> Case {
        Case { verb, group, resource, sub, ns, name, selector, allowed }
    }

    #[test]
    fn node_a_is_allowed_exactly_what_its_pods_and_the_node_rules_need() {
        let authz = NodeAuthorizer::new(graph());
        let node_a = UserInfo::new("system:node:a", ["system:nodes", "system:authenticated"]);
        let table = [
            // The graph: objects used by pods bound to a.
            case("get", "", "secrets", "", "default", "secret-a", "", true),
            case("watch", "", "secrets", "", "default", "secret-a", "", true),
            case("get", "", "secrets", "", "default", "secret-b", "", false),
            case("get", "", "secrets", "", "kube-system", "secret-a", "", false),
            case("list", "", "secrets", "", "default", "", "", false),
            case("update", "", "secrets", "", "default", "secret-a", "", false),
            case("get", "", "configmaps", "", "default", "cm-a", "", true),
            case("get", "", "configmaps", "", "default", "cm-b", "", false),
            case("get", "", "persistentvolumeclaims", "", "default", "pvc-a", "", true),
            case("list", "", "persistentvolumeclaims", "", "default", "pvc-a", "", false),
            case("get", "", "persistentvolumes", "", "", "pv-a", "", true),
            case("get", "", "persistentvolumes", "", "", "pv-b", "", false),
            case("create", "", "serviceaccounts", "token", "default", "sa-a", "", true),
            case("create", "", "serviceaccounts", "token", "default", "default", "", false),
            case("get", "", "serviceaccounts", "", "default", "sa-a", "", false),
            // Its Node and Lease.
            case("get", "", "nodes", "", "", "a", "", true),
            case("watch", "", "nodes", "", "", "a", "", true),
            case("get", "", "nodes", "", "", "b", "", false),
            case("list", "", "nodes", "", "", "", "", false),
            case("patch", "", "nodes", "status", "", "a", "", true),
            case("create", "", "nodes", "", "", "", "", true),
            case("delete", "", "nodes", "", "", "a", "", false),
            case("update", "coordination.k8s.io", "leases", "", "kube-node-lease", "a", "", true),
            case("create", "coordination.k8s.io", "leases", "", "kube-node-lease", "", "", true),
            case("update", "coordination.k8s.io", "leases", "", "kube-node-lease", "b", "", false),
            case("get", "coordination.k8s.io", "leases", "", "kube-system", "a", "", false),
            case("list", "coordination.k8s.io", "leases", "", "kube-node-lease", "", "", false),
            // Pods.
            case("get", "", "pods", "", "default", "pa", "", true),
            case("get", "", "pods", "", "default", "pb", "", false),
            case("watch", "", "pods", "", "", "", "spec.nodeName=a", true),
            case("list", "", "pods", "", "", "", "spec.nodeName==a", true),
            case("list", "", "pods", "", "", "", "spec.nodeName=b", false),
            case("list", "", "pods", "", "", "", "spec.nodeName!=a", false),
            case("list", "", "pods", "", "", "", "", false),
            case("patch", "", "pods", "status", "default", "pa", "", true),
            case("create", "", "pods", "eviction", "default", "pa", "", true),
            case("delete", "", "pods", "", "default", "pa", "", true),
            case("update", "", "pods", "", "default", "pa", "", false),
            // Static rules: services, events; not deployments.
            case("list", "", "services", "", "default", "", "", true),
            case("create", "", "events", "", "default", "", "", true),
            case("create", "authentication.k8s.io", "tokenreviews", "", "", "", "", true),
            case("get", "apps", "deployments", "", "default", "web", "", false),
        ];
        for c in table {
            let a = Attributes::resource(&node_a, c.verb, c.group, c.resource, c.ns, c.name).with_subresource(c.sub);
            let d = authz.authorize_request(&a, c.selector);
            assert_eq!(
                d.allowed, c.allowed,
                "{} {}/{}/{} {}/{} {:?}: {}",
                c.verb, c.group, c.resource, c.sub, c.ns, c.name, c.selector, d.reason
            );
        }
    }

    #[test]
    fn users_that_are_not_nodes_get_no_opinion() {
        let authz = NodeAuthorizer::new(graph());
        for user in [
            UserInfo::new("jane", ["system:authenticated"]),
            UserInfo::new("system:node:a", ["system:authenticated"]),
            UserInfo::new("system:node:", ["system:nodes"]),
        ] {
            let a = Attributes::resource(&user, "get", "", "secrets", "default", "secret-a");
            assert!(!authz.authorize(&a).allowed, "{user:?}");
            let a = Attributes::resource(&user, "list", "", "services", "default", "");
            assert!(!authz.authorize(&a).allowed, "{user:?}");
        }
    }

    #[test]
    fn a_denied_secret_read_says_there_is_no_relationship() {
        let authz = NodeAuthorizer::new(graph());
        let node_a = UserInfo::new("system:node:a", ["system:nodes"]);
        let a = Attributes::resource(&node_a, "get", "", "secrets", "default", "secret-b");
        assert_eq!(authz.authorize(&a).reason, "no relationship found between node 'a' and this object");
    }

    #[test]
    fn the_union_asks_the_second_authorizer_only_when_the_first_does_not_allow() {
        let u = Union {
            first: Arc::new(NodeAuthorizer::new(graph())),
            second: Arc::new(crate::rbac::RbacAuthorizer::new()),
        };
        let node_a = UserInfo::new("system:node:a", ["system:nodes"]);
        assert!(u.authorize(&Attributes::resource(&node_a, "get", "", "secrets", "default", "secret-a")).allowed);
        let d = u.authorize(&Attributes::resource(&node_a, "get", "", "secrets", "default", "secret-b"));
        assert!(!d.allowed);
        assert!(d.reason.contains("no relationship found"), "{}", d.reason);
    }

    #[test]
    fn field_selectors_are_matched_per_requirement() {
        assert!(field_selector_requires("spec.nodeName=a", "spec.nodeName", "a"));
        assert!(field_selector_requires("metadata.namespace=x, spec.nodeName==a", "spec.nodeName", "a"));
        assert!(!field_selector_requires("spec.nodeName=ab", "spec.nodeName", "a"));
        assert!(!field_selector_requires("spec.nodeName!=a", "spec.nodeName", "a"));
        assert!(!field_selector_requires("", "spec.nodeName", "a"));
    }
}
