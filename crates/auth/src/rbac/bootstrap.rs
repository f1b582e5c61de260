//! The default roles and bindings every cluster starts with
//! (<https://kubernetes.io/docs/reference/access-authn-authz/rbac/#default-roles-and-role-bindings>),
//! created by the API server at startup when missing (and reconciled when they carry
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`).
//!
//! User-facing roles: `cluster-admin` (bound to group `system:masters`), `admin`, `edit` and
//! `view`, which aggregate the `system:aggregate-to-{admin,edit,view}` roles and each other
//! (view ⊂ edit ⊂ admin) through `rbac.authorization.k8s.io/aggregate-to-*` labels, so a CRD
//! author can extend them. Discovery roles: `system:basic-user`, `system:discovery` (bound to
//! `system:authenticated`) and `system:public-info-viewer` (also bound to
//! `system:unauthenticated`).
//!
//! skiff's components each run with their own identity and a role holding what they use:
//! - `system:kube-scheduler` (user `system:kube-scheduler`): read pods/nodes and the objects its
//!   plugins consult, `pods/binding`, `pods/status`, events, its lease;
//! - `system:kube-controller-manager` (user `system:kube-controller-manager`): the controllers
//!   run in one process under one identity, so its role is the union of what Kubernetes gives
//!   the individual `system:controller:*` roles. The garbage collector and namespace controller
//!   must read and delete every kind (including custom resources), hence `get, list, watch,
//!   patch, update, delete, deletecollection` on `*`; `create` is limited to the kinds
//!   controllers create; it may `escalate` ClusterRoles only to write aggregated rules.
//! - `system:node`: the kubelet's needs ([`node_rules`]). As in Kubernetes since 1.8 the
//!   `system:node` ClusterRoleBinding has no subjects: nodes are authorized by the Node
//!   authorizer ([`crate::node::authorizer`]), which grants these rules only for the node's own
//!   objects and the objects its pods use, and NodeRestriction admission limits their writes.
//!   (A cluster created before that change keeps its binding to `system:nodes`: existing
//!   bootstrap objects are not rewritten. Delete the binding's subjects to restrict old nodes.)
//! - `system:skiff:simulated-node-agent` (group `system:skiff:simulated-node-agents`): what
//!   `skiff agent --simulated-nodes` needs to run many KWOK-style nodes under one identity
//!   (nodes, leases, pod status, and reads of namespaces and NetworkPolicies for their
//!   NetworkPolicy bookkeeping; no secrets or configmaps).
//! - `system:node-proxier` (user `system:kube-proxy`) and `system:monitoring`.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde_json::Value;

use super::RBAC_GROUP;
use super::aggregation::aggregate_to_fixed_point;
use super::escalation::full_authority;
use super::rules::{non_resource_rule, policy_rule, with_names};
use crate::user;

/// Label every bootstrap object carries.
pub const BOOTSTRAPPING_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
/// Annotation that lets the server reconcile a bootstrap object to the current defaults.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// Label selecting roles aggregated into `admin`.
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
/// Label selecting roles aggregated into `edit`.
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
/// Label selecting roles aggregated into `view`.
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
const READ_WRITE: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];

/// The bootstrap policy: ClusterRoles and ClusterRoleBindings.
#[derive(Debug, Clone)]
pub struct BootstrapPolicy {
    /// ClusterRoles, aggregated roles already holding their aggregated rules.
    pub cluster_roles: Vec<ClusterRole>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
}

fn meta(name: &str, extra_labels: &[(&str, &str)]) -> ObjectMeta {
    let mut labels = BTreeMap::from([(BOOTSTRAPPING_LABEL.0.to_string(), BOOTSTRAPPING_LABEL.1.to_string())]);
    for (k, v) in extra_labels {
        labels.insert(k.to_string(), v.to_string());
    }
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([(AUTOUPDATE_ANNOTATION.to_string(), "true".to_string())])),
        ..Default::default()
    }
}

fn role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole { metadata: meta(name, labels), rules: Some(rules), aggregation_rule: None }
}

fn aggregated(name: &str, labels: &[(&str, &str)], selector_label: &str) -> ClusterRole {
    ClusterRole {
        metadata: meta(name, labels),
        rules: Some(Vec::new()),
        aggregation_rule: Some(AggregationRule {
            cluster_role_selectors: Some(vec![LabelSelector {
                match_labels: Some(BTreeMap::from([(selector_label.to_string(), "true".to_string())])),
                match_expressions: None,
            }]),
        }),
    }
}

/// A ClusterRoleBinding of ClusterRole `role` to `subjects` (`("User"|"Group", name)`).
pub fn cluster_binding(name: &str, role: &str, subjects: &[(&str, &str)]) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(name, &[]),
        role_ref: RoleRef { api_group: RBAC_GROUP.into(), kind: "ClusterRole".into(), name: role.into() },
        subjects: Some(
            subjects
                .iter()
                .map(|(kind, name)| Subject {
                    api_group: Some(RBAC_GROUP.into()),
                    kind: kind.to_string(),
                    name: name.to_string(),
                    namespace: None,
                })
                .collect(),
        ),
    }
}

fn view_rules() -> Vec<PolicyRule> {
    vec![
        policy_rule(
            READ,
            &[""],
            &[
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "configmaps",
            ],
        ),
        policy_rule(
            READ,
            &[""],
            &[
                "limitranges",
                "resourcequotas",
                "bindings",
                "events",
                "pods/status",
                "resourcequotas/status",
                "namespaces/status",
                "replicationcontrollers/status",
                "pods/log",
            ],
        ),
        policy_rule(READ, &[""], &["namespaces"]),
        policy_rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        policy_rule(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
            ],
        ),
        policy_rule(READ, &["autoscaling"], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        policy_rule(READ, &["batch"], &["cronjobs", "cronjobs/status", "jobs", "jobs/status"]),
        policy_rule(READ, &["policy"], &["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        policy_rule(READ, &["networking.k8s.io"], &["ingresses", "ingresses/status", "networkpolicies"]),
    ]
}

fn edit_rules() -> Vec<PolicyRule> {
    vec![
        policy_rule(
            READ,
            &[""],
            &["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"],
        ),
        policy_rule(&["impersonate"], &[""], &["serviceaccounts"]),
        policy_rule(WRITE, &[""], &["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]),
        policy_rule(&["create"], &[""], &["pods/eviction"]),
        policy_rule(
            WRITE,
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        policy_rule(&["create"], &[""], &["serviceaccounts/token"]),
        policy_rule(
            WRITE,
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        policy_rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        policy_rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
        policy_rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
        policy_rule(WRITE, &["networking.k8s.io"], &["ingresses", "networkpolicies"]),
        policy_rule(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
    ]
}

fn admin_rules() -> Vec<PolicyRule> {
    vec![
        policy_rule(&["create"], &["authorization.k8s.io"], &["localsubjectaccessreviews"]),
        policy_rule(READ_WRITE, &[RBAC_GROUP], &["rolebindings", "roles"]),
    ]
}

/// The kubelet's rules (Kubernetes' `bootstrappolicy.NodeRules`): the `system:node`
/// ClusterRole and the static rules of the Node authorizer, which further limits the graph
/// resources (secrets, configmaps, claims, volumes, service-account tokens), leases, nodes and
/// pod reads to what concerns the requesting node.
pub fn node_rules() -> Vec<PolicyRule> {
    vec![
        // Delegated authentication and authorization checks.
        policy_rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        policy_rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews", "localsubjectaccessreviews"]),
        // Service environment variables.
        policy_rule(READ, &[""], &["services"]),
        // Register its Node and report status (NodeRestriction: only its own).
        policy_rule(&["create", "get", "list", "watch"], &[""], &["nodes"]),
        policy_rule(&["update", "patch"], &[""], &["nodes/status"]),
        policy_rule(&["update", "patch"], &[""], &["nodes"]),
        policy_rule(&["create", "update", "patch"], &["", "events.k8s.io"], &["events"]),
        // Pods bound to it (the Node authorizer limits reads), mirror pods, status, evictions
        // (NodeRestriction limits writes).
        policy_rule(READ, &[""], &["pods"]),
        policy_rule(&["create", "delete"], &[""], &["pods"]),
        policy_rule(&["update", "patch"], &[""], &["pods/status"]),
        policy_rule(&["create"], &[""], &["pods/eviction"]),
        // What pods use (the Node authorizer: only what pods bound to it reference).
        policy_rule(READ, &[""], &["secrets", "configmaps"]),
        policy_rule(&["get"], &[""], &["persistentvolumeclaims", "persistentvolumes"]),
        policy_rule(&["get"], &[""], &["endpoints"]),
        policy_rule(&["create", "get", "list", "watch"], &["certificates.k8s.io"], &["certificatesigningrequests"]),
        // Heartbeats (the Node authorizer: its own Lease in kube-node-lease).
        policy_rule(&["get", "create", "update", "patch", "delete"], &["coordination.k8s.io"], &["leases"]),
        policy_rule(&["get"], &["storage.k8s.io"], &["volumeattachments"]),
        // Projected service-account tokens (the Node authorizer: service accounts of its pods).
        policy_rule(&["create"], &[""], &["serviceaccounts/token"]),
        policy_rule(&["update", "patch"], &[""], &["persistentvolumeclaims/status"]),
        policy_rule(READ, &["node.k8s.io"], &["runtimeclasses"]),
        policy_rule(READ, &["storage.k8s.io"], &["csidrivers"]),
        policy_rule(&["get", "create", "update", "patch", "delete"], &["storage.k8s.io"], &["csinodes"]),
    ]
}

/// What `skiff agent --simulated-nodes N` needs: its simulated Nodes, their Leases and the
/// status of the pods bound to them. Not a node identity, so neither the Node authorizer nor
/// NodeRestriction applies; in exchange it reads no secrets, configmaps or volumes.
fn simulated_node_agent_rules() -> Vec<PolicyRule> {
    vec![
        policy_rule(&["get", "list", "watch", "create", "update", "patch", "delete"], &[""], &["nodes"]),
        policy_rule(&["update", "patch"], &[""], &["nodes/status"]),
        policy_rule(
            &["get", "list", "watch", "create", "update", "patch", "delete"],
            &["coordination.k8s.io"],
            &["leases"],
        ),
        policy_rule(&["get", "list", "watch", "delete"], &[""], &["pods"]),
        policy_rule(&["update", "patch"], &[""], &["pods/status"]),
        policy_rule(&["create", "update", "patch"], &["", "events.k8s.io"], &["events"]),
        // NetworkPolicy bookkeeping: namespace labels and the policies.
        policy_rule(READ, &[""], &["namespaces"]),
        policy_rule(READ, &["networking.k8s.io"], &["networkpolicies"]),
    ]
}

fn scheduler_rules() -> Vec<PolicyRule> {
    vec![
        policy_rule(&["create", "patch", "update"], &["", "events.k8s.io"], &["events"]),
        policy_rule(&["create"], &["coordination.k8s.io"], &["leases"]),
        with_names(policy_rule(&["get", "update"], &["coordination.k8s.io"], &["leases"]), &["kube-scheduler"]),
        policy_rule(READ, &[""], &["nodes"]),
        policy_rule(&["get", "list", "watch", "delete"], &[""], &["pods"]),
        policy_rule(&["create"], &[""], &["bindings", "pods/binding"]),
        policy_rule(&["patch", "update"], &[""], &["pods/status"]),
        policy_rule(
            READ,
            &[""],
            &["replicationcontrollers", "services", "namespaces", "persistentvolumeclaims", "persistentvolumes"],
        ),
        policy_rule(READ, &["apps"], &["replicasets", "statefulsets"]),
        policy_rule(READ, &["policy"], &["poddisruptionbudgets"]),
        policy_rule(READ, &["scheduling.k8s.io"], &["priorityclasses"]),
        policy_rule(READ, &["storage.k8s.io"], &["storageclasses", "csinodes", "csidrivers", "csistoragecapacities"]),
        policy_rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        policy_rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
    ]
}

fn controller_manager_rules() -> Vec<PolicyRule> {
    vec![
        // Garbage collector and namespace controller: every kind.
        policy_rule(&["get", "list", "watch", "patch", "update", "delete", "deletecollection"], &["*"], &["*"]),
        // What the workload, service-account, endpoint, quota and node controllers create.
        policy_rule(
            &["create"],
            &[""],
            &["pods", "events", "endpoints", "serviceaccounts", "serviceaccounts/token", "configmaps", "secrets"],
        ),
        policy_rule(&["create"], &["apps"], &["replicasets", "controllerrevisions"]),
        policy_rule(&["create"], &["batch"], &["jobs"]),
        policy_rule(&["create"], &["discovery.k8s.io"], &["endpointslices"]),
        policy_rule(&["create"], &["coordination.k8s.io"], &["leases"]),
        policy_rule(&["create"], &["events.k8s.io"], &["events"]),
        policy_rule(&["create"], &["policy"], &["evictions"]),
        policy_rule(&["create"], &[""], &["pods/eviction", "pods/binding"]),
        // The cluster-role-aggregation controller writes aggregated rules.
        policy_rule(&["escalate"], &[RBAC_GROUP], &["clusterroles"]),
        policy_rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
        policy_rule(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
    ]
}

/// The bootstrap ClusterRoles and ClusterRoleBindings.
pub fn bootstrap_policy() -> BootstrapPolicy {
    let discovery_urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ];
    let public_urls = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let roles = vec![
        role("cluster-admin", &[], full_authority()),
        aggregated("admin", &[], AGGREGATE_TO_ADMIN),
        aggregated("edit", &[(AGGREGATE_TO_ADMIN, "true")], AGGREGATE_TO_EDIT),
        aggregated("view", &[(AGGREGATE_TO_EDIT, "true")], AGGREGATE_TO_VIEW),
        role("system:aggregate-to-admin", &[(AGGREGATE_TO_ADMIN, "true")], admin_rules()),
        role("system:aggregate-to-edit", &[(AGGREGATE_TO_EDIT, "true")], edit_rules()),
        role("system:aggregate-to-view", &[(AGGREGATE_TO_VIEW, "true")], view_rules()),
        role(
            "system:basic-user",
            &[],
            vec![
                policy_rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                policy_rule(&["create"], &["authentication.k8s.io"], &["selfsubjectreviews"]),
            ],
        ),
        // metrics-server's manifest ships this role; skiff serves metrics.k8s.io itself, so it
        // is bootstrap policy here: reading NodeMetrics and PodMetrics, aggregated into admin,
        // edit and view.
        role(
            "system:aggregated-metrics-reader",
            &[(AGGREGATE_TO_ADMIN, "true"), (AGGREGATE_TO_EDIT, "true"), (AGGREGATE_TO_VIEW, "true")],
            vec![policy_rule(READ, &["metrics.k8s.io"], &["pods", "nodes"])],
        ),
        role("system:discovery", &[], vec![non_resource_rule(&["get"], &discovery_urls)]),
        role("system:public-info-viewer", &[], vec![non_resource_rule(&["get"], &public_urls)]),
        role(
            "system:monitoring",
            &[],
            vec![non_resource_rule(
                &["get"],
                &["/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*"],
            )],
        ),
        role("system:node", &[], node_rules()),
        role(user::SIMULATED_NODE_AGENTS_GROUP_ROLE, &[], simulated_node_agent_rules()),
        role(
            "system:node-proxier",
            &[],
            vec![
                policy_rule(READ, &[""], &["endpoints", "services", "nodes"]),
                policy_rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
                policy_rule(&["create", "patch", "update"], &["", "events.k8s.io"], &["events"]),
            ],
        ),
        role("system:kube-scheduler", &[], scheduler_rules()),
        role("system:kube-controller-manager", &[], controller_manager_rules()),
    ];
    let bindings = vec![
        cluster_binding("cluster-admin", "cluster-admin", &[("Group", user::SYSTEM_MASTERS)]),
        cluster_binding("system:basic-user", "system:basic-user", &[("Group", user::ALL_AUTHENTICATED)]),
        cluster_binding("system:discovery", "system:discovery", &[("Group", user::ALL_AUTHENTICATED)]),
        cluster_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[("Group", user::ALL_AUTHENTICATED), ("Group", user::ALL_UNAUTHENTICATED)],
        ),
        cluster_binding("system:monitoring", "system:monitoring", &[("Group", "system:monitoring")]),
        // No subjects, as in Kubernetes: the Node authorizer grants nodes these rules.
        cluster_binding("system:node", "system:node", &[]),
        cluster_binding(
            user::SIMULATED_NODE_AGENTS_GROUP_ROLE,
            user::SIMULATED_NODE_AGENTS_GROUP_ROLE,
            &[("Group", user::SIMULATED_NODE_AGENTS_GROUP)],
        ),
        cluster_binding("system:node-proxier", "system:node-proxier", &[("User", user::KUBE_PROXY)]),
        cluster_binding("system:kube-scheduler", "system:kube-scheduler", &[("User", user::KUBE_SCHEDULER)]),
        cluster_binding(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            &[("User", user::KUBE_CONTROLLER_MANAGER)],
        ),
    ];
    BootstrapPolicy { cluster_roles: aggregate_to_fixed_point(roles), cluster_role_bindings: bindings }
}

impl BootstrapPolicy {
    /// Every object as JSON with `apiVersion` and `kind`, roles first — what the server creates
    /// at startup when missing.
    pub fn to_json_objects(&self) -> Vec<Value> {
        let with_kind = |mut v: Value, kind: &str| {
            if let Some(m) = v.as_object_mut() {
                m.insert("apiVersion".into(), format!("{RBAC_GROUP}/v1").into());
                m.insert("kind".into(), kind.into());
            }
            v
        };
        let roles =
            self.cluster_roles.iter().map(|r| with_kind(serde_json::to_value(r).unwrap_or_default(), "ClusterRole"));
        let bindings = self
            .cluster_role_bindings
            .iter()
            .map(|b| with_kind(serde_json::to_value(b).unwrap_or_default(), "ClusterRoleBinding"));
        roles.chain(bindings).collect()
    }
}
