//! The authorization matrix and snapshot-maintenance tests.

use serde_json::{Value, json};

use super::aggregation::aggregate_rules;
use super::bootstrap::bootstrap_policy;
use super::*;

fn rb(ns: &str, name: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects})
}

fn crb(name: &str, role: &str, subjects: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects})
}

fn cluster_role(name: &str, labels: Value, rules: Value) -> Value {
    json!({"kind": "ClusterRole", "metadata": {"name": name, "labels": labels}, "rules": rules})
}

/// The fixture the matrix runs against.
fn fixture() -> RbacAuthorizer {
    let a = RbacAuthorizer::new();
    let objects = vec![
        // The seed's pod-reader, bound to jane.
        json!({"kind": "Role", "metadata": {"namespace": "default", "name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]}]}),
        rb(
            "default",
            "read-pods",
            "Role",
            "pod-reader",
            json!([{"kind": "User", "name": "jane", "apiGroup": "rbac.authorization.k8s.io"}]),
        ),
        // A ClusterRole limited by resourceNames, bound in one namespace to a group.
        cluster_role(
            "secret-reader",
            json!({}),
            json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["app-secret"], "verbs": ["get"]}]),
        ),
        rb("dev", "devs-secret", "ClusterRole", "secret-reader", json!([{"kind": "Group", "name": "devs"}])),
        // Cluster-wide node reader.
        cluster_role(
            "node-viewer",
            json!({}),
            json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]),
        ),
        crb("ops-nodes", "node-viewer", json!([{"kind": "User", "name": "ops"}])),
        // Subresource-only role, bound cluster-wide to a service account.
        cluster_role(
            "log-reader",
            json!({}),
            json!([{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]),
        ),
        crb(
            "scraper-logs",
            "log-reader",
            json!([{"kind": "ServiceAccount", "name": "scraper", "namespace": "monitoring"}]),
        ),
        // A namespaced service-account subject without namespace: the binding's namespace.
        json!({"kind": "Role", "metadata": {"namespace": "ci", "name": "pod-creator"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]}),
        rb("ci", "builder", "Role", "pod-creator", json!([{"kind": "ServiceAccount", "name": "builder"}])),
        // Every service account of a namespace via its group.
        json!({"kind": "Role", "metadata": {"namespace": "ci", "name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
        rb("ci", "all-sas", "Role", "cm-reader", json!([{"kind": "Group", "name": "system:serviceaccounts:ci"}])),
        // Non-resource URLs.
        cluster_role("health", json!({}), json!([{"nonResourceURLs": ["/healthz/*", "/metrics"], "verbs": ["get"]}])),
        crb("monitors-health", "health", json!([{"kind": "Group", "name": "monitors"}])),
        // Aggregation: "monitoring" gathers mon-a and mon-b.
        cluster_role(
            "mon-a",
            json!({"example.com/aggregate-to-monitoring": "true"}),
            json!([{"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}]),
        ),
        cluster_role(
            "mon-b",
            json!({"example.com/aggregate-to-monitoring": "true"}),
            json!([{"apiGroups": [""], "resources": ["endpoints"], "verbs": ["get", "list"]}]),
        ),
        json!({"kind": "ClusterRole", "metadata": {"name": "monitoring"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-monitoring": "true"}}]}}),
        crb("mona-monitoring", "monitoring", json!([{"kind": "User", "name": "mona"}])),
        // Wildcards within one group.
        cluster_role("apps-admin", json!({}), json!([{"apiGroups": ["apps"], "resources": ["*"], "verbs": ["*"]}])),
        rb("default", "alice-apps", "ClusterRole", "apps-admin", json!([{"kind": "User", "name": "alice"}])),
        // A binding whose role does not exist grants nothing.
        rb("default", "dangling", "Role", "missing", json!([{"kind": "User", "name": "dave"}])),
    ];
    for o in &objects {
        a.apply(o).unwrap();
    }
    // What the aggregation controller would write back.
    for updated in aggregation_updates(&a) {
        a.apply_object(RbacObject::ClusterRole(updated));
    }
    a
}

/// The aggregated ClusterRoles whose stored rules differ from what their aggregation rule
/// computes now, with the new rules set: what the aggregation controller would write back.
fn aggregation_updates(a: &RbacAuthorizer) -> Vec<ClusterRole> {
    let roles = a.cluster_roles();
    let mut out: Vec<ClusterRole> = roles
        .iter()
        .filter_map(|target| match aggregate_rules(target, roles.iter().map(|r| r.as_ref())) {
            Ok(Some(rules)) if target.rules.as_ref() != Some(&rules) => {
                Some(ClusterRole { rules: Some(rules), ..ClusterRole::clone(target) })
            }
            _ => None,
        })
        .collect();
    out.sort_by(|x, y| x.metadata.name.cmp(&y.metadata.name));
    out
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    let mut g: Vec<String> = groups.iter().map(|s| s.to_string()).collect();
    g.push("system:authenticated".into());
    UserInfo::new(name, g)
}

fn sa(ns: &str, name: &str) -> UserInfo {
    let mut groups = crate::user::service_account_groups(ns);
    groups.push("system:authenticated".into());
    UserInfo::new(crate::user::service_account_username(ns, name), groups)
}

#[test]
fn authorization_matrix_gives_the_answers_rbac_defines() {
    let a = fixture();
    let jane = user("jane", &[]);
    let bob = user("bob", &["devs"]);
    let ops = user("ops", &[]);
    let scraper = sa("monitoring", "scraper");
    let builder = sa("ci", "builder");
    let other_ci = sa("ci", "other");
    let builder_elsewhere = sa("default", "builder");
    let mona = user("mona", &[]);
    let alice = user("alice", &[]);
    let admin = UserInfo::new("root", ["system:masters"]);
    let nobody = user("nobody", &[]);
    let dave = user("dave", &[]);
    // (user, verb, group, resource, subresource, namespace, name, allowed)
    type Case<'a> = (&'a UserInfo, &'a str, &'a str, &'a str, &'a str, &'a str, &'a str, bool);
    let cases: Vec<Case> = vec![
        (&jane, "get", "", "pods", "", "default", "web", true),
        (&jane, "list", "", "pods", "", "default", "", true),
        (&jane, "watch", "", "pods", "", "default", "", true),
        (&jane, "delete", "", "pods", "", "default", "web", false),
        (&jane, "create", "", "pods", "", "default", "", false),
        (&jane, "get", "", "pods", "", "kube-system", "web", false),
        (&jane, "list", "", "pods", "", "", "", false),
        (&jane, "get", "", "pods", "log", "default", "web", false),
        (&jane, "get", "apps", "pods", "", "default", "web", false),
        (&jane, "get", "", "services", "", "default", "web", false),
        (&bob, "get", "", "secrets", "", "dev", "app-secret", true),
        (&bob, "get", "", "secrets", "", "dev", "other", false),
        (&bob, "list", "", "secrets", "", "dev", "", false),
        (&bob, "get", "", "secrets", "", "default", "app-secret", false),
        (&bob, "update", "", "secrets", "", "dev", "app-secret", false),
        (&ops, "list", "", "nodes", "", "", "", true),
        (&ops, "get", "", "nodes", "", "", "n1", true),
        (&ops, "delete", "", "nodes", "", "", "n1", false),
        (&ops, "get", "", "nodes", "status", "", "n1", false),
        (&scraper, "get", "", "pods", "log", "any", "p", true),
        (&scraper, "get", "", "pods", "", "any", "p", false),
        (&scraper, "get", "", "pods", "exec", "any", "p", false),
        (&builder, "create", "", "pods", "", "ci", "", true),
        (&builder, "create", "", "pods", "", "default", "", false),
        (&builder_elsewhere, "create", "", "pods", "", "ci", "", false),
        (&builder, "list", "", "configmaps", "", "ci", "", true),
        (&other_ci, "list", "", "configmaps", "", "ci", "", true),
        (&other_ci, "create", "", "pods", "", "ci", "", false),
        (&mona, "get", "", "services", "", "default", "kubernetes", true),
        (&mona, "list", "", "endpoints", "", "", "", true),
        (&mona, "delete", "", "services", "", "default", "kubernetes", false),
        (&alice, "create", "apps", "deployments", "", "default", "", true),
        (&alice, "patch", "apps", "deployments", "scale", "default", "web", true),
        (&alice, "create", "apps", "deployments", "", "prod", "", false),
        (&alice, "create", "batch", "jobs", "", "default", "", false),
        (&admin, "delete", "", "nodes", "", "", "n1", true),
        (&admin, "escalate", "rbac.authorization.k8s.io", "clusterroles", "", "", "x", true),
        (&nobody, "get", "", "pods", "", "default", "web", false),
        (&dave, "get", "", "pods", "", "default", "web", false),
    ];
    for (u, verb, group, resource, sub, ns, name, want) in cases {
        let attrs = Attributes::resource(u, verb, group, resource, ns, name).with_subresource(sub);
        let got = a.authorize(&attrs);
        assert_eq!(got.allowed, want, "{} {verb} {group}/{resource}/{sub} in {ns:?} name {name:?}: {got:?}", u.name);
        assert_eq!(a.check(&attrs).is_ok(), want);
        assert_eq!(a.check_forbidden(&attrs).is_ok(), want);
    }

    let monitor = user("mo", &["monitors"]);
    let paths = [
        (&monitor, "get", "/healthz/etcd", true),
        (&monitor, "get", "/healthz", false),
        (&monitor, "get", "/metrics", true),
        (&monitor, "post", "/metrics", false),
        (&jane, "get", "/metrics", false),
        (&admin, "get", "/anything", true),
    ];
    for (u, verb, path, want) in paths {
        let got = a.authorize(&Attributes::non_resource(u, verb, path));
        assert_eq!(got.allowed, want, "{} {verb} {path}: {got:?}", u.name);
    }
}

#[test]
fn allowed_decisions_name_the_binding_role_and_subject() {
    let a = fixture();
    let jane = user("jane", &[]);
    let d = a.authorize(&Attributes::resource(&jane, "get", "", "pods", "default", "web"));
    assert_eq!(d.reason, r#"RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" to User "jane""#);
    let scraper = sa("monitoring", "scraper");
    let d = a.authorize(&Attributes::resource(&scraper, "get", "", "pods", "x", "p").with_subresource("log"));
    assert_eq!(
        d.reason,
        r#"RBAC: allowed by ClusterRoleBinding "scraper-logs" of ClusterRole "log-reader" to ServiceAccount "scraper/monitoring""#
    );
}

#[test]
fn bindings_to_missing_roles_explain_the_denial() {
    let a = fixture();
    let dave = user("dave", &[]);
    let attrs = Attributes::resource(&dave, "get", "", "pods", "default", "web");
    let d = a.authorize(&attrs);
    assert!(!d.allowed);
    assert_eq!(d.reason, r#"RBAC: role.rbac.authorization.k8s.io "missing" not found"#);
    assert_eq!(
        forbidden(&attrs, &d.reason).message,
        r#"pods "web" is forbidden: User "dave" cannot get resource "pods" in API group "" in the namespace "default": RBAC: role.rbac.authorization.k8s.io "missing" not found"#
    );
}

#[test]
fn forbidden_messages_use_kubernetes_wording() {
    let jane = user("jane", &[]);
    let cases = [
        (
            Attributes::resource(&jane, "delete", "", "pods", "default", "nginx"),
            r#"pods "nginx" is forbidden: User "jane" cannot delete resource "pods" in API group "" in the namespace "default""#,
        ),
        (
            Attributes::resource(&jane, "list", "", "pods", "default", ""),
            r#"pods is forbidden: User "jane" cannot list resource "pods" in API group "" in the namespace "default""#,
        ),
        (
            Attributes::resource(&jane, "list", "", "nodes", "", ""),
            r#"nodes is forbidden: User "jane" cannot list resource "nodes" in API group "" at the cluster scope"#,
        ),
        (
            Attributes::resource(&jane, "create", "apps", "deployments", "prod", "web").with_subresource("scale"),
            r#"deployments.apps "web" is forbidden: User "jane" cannot create resource "deployments/scale" in API group "apps" in the namespace "prod""#,
        ),
        (Attributes::non_resource(&jane, "get", "/metrics"), r#"forbidden: User "jane" cannot get path "/metrics""#),
    ];
    for (attrs, want) in cases {
        let e = forbidden(&attrs, "");
        assert_eq!(e.code, 403);
        assert_eq!(e.reason, "Forbidden");
        assert_eq!(e.message, want);
    }
}

#[test]
fn watch_events_update_and_remove_grants() {
    let a = fixture();
    let jane = user("jane", &[]);
    let get = Attributes::resource(&jane, "get", "", "pods", "default", "web");
    assert!(a.authorize(&get).allowed);
    // The binding moves to another user.
    a.apply(&rb("default", "read-pods", "Role", "pod-reader", json!([{"kind": "User", "name": "joe"}]))).unwrap();
    assert!(!a.authorize(&get).allowed);
    let joe = user("joe", &[]);
    assert!(a.authorize(&Attributes::resource(&joe, "get", "", "pods", "default", "web")).allowed);
    // Rebind jane, then delete the role: the binding dangles.
    a.apply(&rb("default", "read-pods", "Role", "pod-reader", json!([{"kind": "User", "name": "jane"}]))).unwrap();
    assert!(a.authorize(&get).allowed);
    a.remove(RbacKind::Role, "default", "pod-reader");
    assert!(!a.authorize(&get).allowed);
    // Role changes take effect without touching the binding.
    a.apply(&json!({"kind": "Role", "metadata": {"namespace": "default", "name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]}))
        .unwrap();
    assert!(a.authorize(&Attributes::resource(&jane, "delete", "", "pods", "default", "web")).allowed);
    a.remove_object(&rb("default", "read-pods", "Role", "pod-reader", json!([]))).unwrap();
    assert!(!a.authorize(&get).allowed);
    assert!(a.apply(&json!({"kind": "Pod", "metadata": {"name": "x"}})).is_err());
}

#[test]
fn rules_for_lists_cluster_and_namespace_rules() {
    let a = fixture();
    let bob = user("bob", &["devs"]);
    let in_dev = a.rules_for(&bob, "dev");
    assert_eq!(in_dev.rules.len(), 1);
    assert_eq!(in_dev.rules[0].resource_names, Some(vec!["app-secret".to_string()]));
    assert!(a.rules_for(&bob, "default").rules.is_empty());
    let status = a.subject_rules_review_status(&user("mo", &["monitors"]), "default");
    assert_eq!(status["nonResourceRules"][0]["nonResourceURLs"], json!(["/healthz/*", "/metrics"]));
    assert_eq!(status["resourceRules"], json!([]));
    assert_eq!(status["incomplete"], false);
    let dave = a.subject_rules_review_status(&user("dave", &[]), "default");
    assert_eq!(dave["evaluationError"], r#"role.rbac.authorization.k8s.io "missing" not found"#);
    let root = a.rules_for(&UserInfo::new("root", ["system:masters"]), "");
    assert_eq!(root.rules, escalation::full_authority());
}

#[test]
fn aggregation_collects_matching_roles_in_name_order_without_duplicates() {
    let roles: Vec<k8s_openapi::api::rbac::v1::ClusterRole> = [
        cluster_role("b", json!({"agg": "x"}), json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])),
        cluster_role(
            "a",
            json!({"agg": "x"}),
            json!([{"apiGroups": [""], "resources": ["services"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
        ),
        cluster_role("c", json!({"agg": "y"}), json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}])),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect();
    let target: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({"metadata": {"name": "t"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "x"}}]}}))
    .unwrap();
    let rules = aggregate_rules(&target, roles.iter()).unwrap().unwrap();
    let resources: Vec<String> = rules.iter().map(|r| r.resources.as_ref().unwrap()[0].clone()).collect();
    assert_eq!(resources, vec!["services", "pods"]);
    assert_eq!(aggregate_rules(&roles[0], roles.iter()).unwrap(), None);
}

#[test]
fn escalation_is_refused_unless_every_permission_is_held() {
    let a = fixture();
    let jane = user("jane", &[]);
    let role = |verbs: Value| {
        json!({"kind": "Role", "metadata": {"namespace": "default", "name": "mine"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]})
    };
    // Holding get/list/watch pods in default, jane may grant a subset there.
    a.check_rbac_write(&jane, RbacKind::Role, "default", &role(json!(["get", "list"])), None).unwrap();
    let err = a.check_rbac_write(&jane, RbacKind::Role, "default", &role(json!(["get", "delete"])), None).unwrap_err();
    assert_eq!(err.code, 403);
    assert_eq!(
        err.message,
        "roles.rbac.authorization.k8s.io \"mine\" is forbidden: user \"jane\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}"
    );
    // Not in another namespace.
    assert!(a.check_rbac_write(&jane, RbacKind::Role, "prod", &role(json!(["get"])), None).is_err());
    // The escalate verb lifts the check.
    a.apply(&cluster_role(
        "escalator",
        json!({}),
        json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]}]),
    ))
    .unwrap();
    a.apply(&rb("default", "jane-escalate", "ClusterRole", "escalator", json!([{"kind": "User", "name": "jane"}])))
        .unwrap();
    a.check_rbac_write(&jane, RbacKind::Role, "default", &role(json!(["*"])), None).unwrap();
    // system:masters may do anything.
    a.check_rbac_write(
        &UserInfo::new("root", ["system:masters"]),
        RbacKind::ClusterRole,
        "",
        &cluster_role("x", json!({}), json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])),
        None,
    )
    .unwrap();
}

#[test]
fn binding_needs_the_role_permissions_or_the_bind_verb() {
    let a = fixture();
    let jane = user("jane", &[]);
    let binding = rb("default", "share", "Role", "pod-reader", json!([{"kind": "User", "name": "joe"}]));
    // jane holds all of pod-reader, so she may bind it.
    a.check_rbac_write(&jane, RbacKind::RoleBinding, "default", &binding, None).unwrap();
    // ...but not secret-reader, which she does not hold.
    let secret = rb("default", "share2", "ClusterRole", "secret-reader", json!([{"kind": "User", "name": "joe"}]));
    let err = a.check_rbac_write(&jane, RbacKind::RoleBinding, "default", &secret, None).unwrap_err();
    assert!(
        err.message.starts_with("rolebindings.rbac.authorization.k8s.io \"share2\" is forbidden: user \"jane\""),
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains("{APIGroups:[\"\"], Resources:[\"secrets\"], ResourceNames:[\"app-secret\"], Verbs:[\"get\"]}"),
        "{}",
        err.message
    );
    // A missing role is refused.
    let missing = rb("default", "share3", "Role", "nope", json!([]));
    let err = a.check_rbac_write(&jane, RbacKind::RoleBinding, "default", &missing, None).unwrap_err();
    assert!(err.message.ends_with(r#"role.rbac.authorization.k8s.io "nope" not found"#), "{}", err.message);
    // With bind on that ClusterRole by name, it is allowed.
    a.apply(&cluster_role("binder", json!({}), json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["secret-reader"]}]))).unwrap();
    a.apply(&crb("jane-binder", "binder", json!([{"kind": "User", "name": "jane"}]))).unwrap();
    a.check_rbac_write(&jane, RbacKind::RoleBinding, "default", &secret, None).unwrap();
    // A ClusterRoleBinding to cluster-admin is still refused.
    a.apply(&cluster_role("cluster-admin", json!({}), serde_json::to_value(escalation::full_authority()).unwrap()))
        .unwrap();
    let admin = crb("jane-admin", "cluster-admin", json!([{"kind": "User", "name": "jane"}]));
    assert!(a.check_rbac_write(&jane, RbacKind::ClusterRoleBinding, "", &admin, None).is_err());
}

#[test]
fn aggregation_rules_need_full_authority_and_gc_only_updates_pass() {
    let a = fixture();
    a.apply(&cluster_role(
        "escalator",
        json!({}),
        json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}]),
    ))
    .unwrap();
    let jane = user("jane", &[]);
    let agg = json!({"kind": "ClusterRole", "metadata": {"name": "gather"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}});
    let err = a.check_rbac_write(&jane, RbacKind::ClusterRole, "", &agg, None).unwrap_err();
    assert_eq!(
        err.message,
        r#"clusterroles.rbac.authorization.k8s.io "gather" is forbidden: must have cluster-admin privileges to use the aggregationRule"#
    );
    let big = cluster_role("big", json!({}), json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]));
    let mut with_owner = big.clone();
    with_owner["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}]);
    a.check_rbac_write(&jane, RbacKind::ClusterRole, "", &with_owner, Some(&big)).unwrap();
    assert!(a.check_rbac_write(&jane, RbacKind::ClusterRole, "", &big, None).is_err());
}

#[test]
fn covers_handles_wildcards_subresources_names_and_urls() {
    use super::rules::{non_resource_rule, policy_rule, with_names};
    use escalation::covers;
    let cases = [
        (vec![policy_rule(&["*"], &["*"], &["*"])], policy_rule(&["get"], &["apps"], &["deployments/scale"]), true),
        (vec![policy_rule(&["get"], &[""], &["*/status"])], policy_rule(&["get"], &[""], &["pods/status"]), true),
        (vec![policy_rule(&["get"], &[""], &["*/status"])], policy_rule(&["get"], &[""], &["pods"]), false),
        (vec![policy_rule(&["get"], &[""], &["pods"])], policy_rule(&["get"], &[""], &["pods/log"]), false),
        (
            vec![with_names(policy_rule(&["get"], &[""], &["pods"]), &["a"])],
            policy_rule(&["get"], &[""], &["pods"]),
            false,
        ),
        (
            vec![policy_rule(&["get"], &[""], &["pods"])],
            with_names(policy_rule(&["get"], &[""], &["pods"]), &["a"]),
            true,
        ),
        (vec![non_resource_rule(&["get"], &["/healthz/*"])], non_resource_rule(&["get"], &["/healthz/etcd"]), true),
        (vec![non_resource_rule(&["get"], &["/healthz"])], non_resource_rule(&["get"], &["/healthz/*"]), false),
        (
            vec![policy_rule(&["get"], &[""], &["pods"]), policy_rule(&["list"], &[""], &["pods"])],
            policy_rule(&["get", "list"], &[""], &["pods"]),
            true,
        ),
    ];
    for (owner, requested, want) in cases {
        assert_eq!(covers(&owner, std::slice::from_ref(&requested)).0, want, "{owner:?} covers {requested:?}");
    }
}

#[test]
fn bootstrap_policy_grants_what_kubernetes_defaults_grant() {
    let policy = bootstrap_policy();
    let objects = policy.to_json_objects();
    let a = RbacAuthorizer::from_objects(objects.iter()).unwrap();
    // Everything is already aggregated: nothing for the controller to write.
    assert!(aggregation_updates(&a).is_empty());
    let view = policy.cluster_roles.iter().find(|r| r.metadata.name.as_deref() == Some("view")).unwrap();
    assert!(!view.rules.as_ref().unwrap().is_empty());
    a.apply(&rb("team", "editors", "ClusterRole", "edit", json!([{"kind": "User", "name": "ed"}]))).unwrap();
    a.apply(&rb("team", "viewers", "ClusterRole", "view", json!([{"kind": "User", "name": "vi"}]))).unwrap();
    a.apply(&rb("team", "admins", "ClusterRole", "admin", json!([{"kind": "User", "name": "ad"}]))).unwrap();
    let ed = user("ed", &[]);
    let vi = user("vi", &[]);
    let ad = user("ad", &[]);
    let anon = UserInfo::anonymous();
    let sched = user("system:kube-scheduler", &[]);
    let node = user("system:node:n1", &["system:nodes"]);
    let kcm = user("system:kube-controller-manager", &[]);
    let cases: Vec<(&UserInfo, &str, &str, &str, &str, &str, bool)> = vec![
        (&ed, "create", "apps", "deployments", "", "team", true),
        (&ed, "get", "", "secrets", "", "team", true),
        (&ed, "create", "rbac.authorization.k8s.io", "roles", "", "team", false),
        (&ed, "create", "", "pods", "", "other", false),
        (&vi, "list", "", "pods", "", "team", true),
        (&vi, "get", "", "pods", "log", "team", true),
        (&vi, "get", "", "secrets", "", "team", false),
        (&vi, "delete", "", "pods", "", "team", false),
        (&ad, "create", "rbac.authorization.k8s.io", "rolebindings", "", "team", true),
        (&ad, "delete", "apps", "deployments", "", "team", true),
        (&ed, "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", true),
        (&anon, "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", false),
        (&sched, "create", "", "pods", "binding", "team", true),
        (&sched, "list", "", "nodes", "", "", true),
        (&sched, "delete", "", "nodes", "", "", false),
        (&sched, "update", "coordination.k8s.io", "leases", "", "kube-system", false),
        // RBAC alone grants nodes nothing: `system:node` is bound to no one, the Node
        // authorizer grants its rules per node.
        (&node, "patch", "", "nodes", "status", "", false),
        (&node, "create", "", "serviceaccounts", "token", "team", false),
        (&node, "create", "rbac.authorization.k8s.io", "clusterroles", "", "", false),
        (&kcm, "delete", "", "pods", "", "team", true),
        (&kcm, "create", "apps", "replicasets", "", "team", true),
        (&kcm, "create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", false),
    ];
    for (u, verb, group, resource, sub, ns, want) in cases {
        let attrs = Attributes::resource(u, verb, group, resource, ns, "").with_subresource(sub);
        assert_eq!(a.authorize(&attrs).allowed, want, "{} {verb} {group}/{resource}/{sub} in {ns}", u.name);
    }
    // The scheduler's lease rule is limited to its own lease.
    let lease =
        Attributes::resource(&sched, "update", "coordination.k8s.io", "leases", "kube-system", "kube-scheduler");
    assert!(a.authorize(&lease).allowed);
    for (u, path, want) in
        [(&anon, "/version", true), (&anon, "/api", false), (&ed, "/apis/apps", true), (&anon, "/readyz", true)]
    {
        assert_eq!(a.authorize(&Attributes::non_resource(u, "get", path)).allowed, want, "{} {path}", u.name);
    }
}

#[test]
fn benchmark_report_counts_its_decisions() {
    let r = bench::bench_authorization(40, 40);
    assert_eq!(r.decisions, 20_000);
    assert!(r.allowed > 0 && r.allowed < r.decisions, "{r}");
    assert!(r.p50_ns <= r.p99_ns && r.p99_ns <= r.max_ns);
}

#[test]
fn bindings_follow_later_changes_to_the_role_they_reference() {
    let a = RbacAuthorizer::new();
    // The binding arrives before its role, as watch events may.
    a.apply(&rb("ns", "b", "ClusterRole", "late", json!([{"kind": "User", "name": "u"}]))).unwrap();
    let u = user("u", &[]);
    let get = Attributes::resource(&u, "get", "", "pods", "ns", "p");
    assert!(!a.authorize(&get).allowed);
    a.apply(&cluster_role("late", json!({}), json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])))
        .unwrap();
    assert!(a.authorize(&get).allowed);
    // Re-pointing the binding detaches it from the old role.
    a.apply(&cluster_role("other", json!({}), json!([]))).unwrap();
    a.apply(&rb("ns", "b", "ClusterRole", "other", json!([{"kind": "User", "name": "u"}]))).unwrap();
    assert!(!a.authorize(&get).allowed);
    a.apply(&cluster_role("late", json!({}), json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])))
        .unwrap();
    assert!(!a.authorize(&get).allowed);
    a.remove(RbacKind::RoleBinding, "ns", "b");
    assert_eq!(a.counts(), (0, 2, 0, 0));
    // Non-standard verbs still match through the verb list.
    a.apply(&cluster_role(
        "approver",
        json!({}),
        json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["approve"]}]),
    ))
    .unwrap();
    a.apply(&crb("approvers", "approver", json!([{"kind": "User", "name": "u"}]))).unwrap();
    assert!(a.authorize(&Attributes::resource(&u, "approve", "certificates.k8s.io", "signers", "", "x")).allowed);
    assert!(!a.authorize(&Attributes::resource(&u, "sign", "certificates.k8s.io", "signers", "", "x")).allowed);
}
