//! Authorization decision-time benchmark (`skiff bench` hooks [`bench_authorization`]).
//!
//! Builds a synthetic snapshot — half ClusterRoles bound by ClusterRoleBindings, half Roles
//! bound by RoleBindings across 50 namespaces, subjects spread over 500 users and 20 groups —
//! then times individual decisions for a deterministic mix of allowed and denied requests.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::{Attributes, RbacAuthorizer};
use crate::UserInfo;

/// Decision-time figures of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorizationBenchReport {
    /// Roles + ClusterRoles in the snapshot.
    pub roles: usize,
    /// RoleBindings + ClusterRoleBindings in the snapshot.
    pub bindings: usize,
    /// Decisions timed.
    pub decisions: usize,
    /// How many of them were allowed.
    pub allowed: usize,
    /// Median decision time, nanoseconds.
    pub p50_ns: u64,
    /// 99th-percentile decision time, nanoseconds.
    pub p99_ns: u64,
    /// Slowest decision, nanoseconds.
    pub max_ns: u64,
    /// Mean decision time, nanoseconds.
    pub mean_ns: u64,
}

impl std::fmt::Display for AuthorizationBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "authorization: {} roles, {} bindings, {} decisions ({} allowed): p50 {:.2} µs, p99 {:.2} µs, max {:.2} µs, mean {:.2} µs",
            self.roles,
            self.bindings,
            self.decisions,
            self.allowed,
            self.p50_ns as f64 / 1000.0,
            self.p99_ns as f64 / 1000.0,
            self.max_ns as f64 / 1000.0,
            self.mean_ns as f64 / 1000.0
        )
    }
}

const NAMESPACES: usize = 50;
const USERS: usize = 500;
const GROUPS: usize = 20;
const RESOURCES: &[&str] = &["pods", "services", "configmaps", "secrets", "deployments", "jobs", "events", "leases"];
const VERBS: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete"];

fn synthetic_rules(rng: &mut StdRng) -> serde_json::Value {
    let rules: Vec<serde_json::Value> = (0..4)
        .map(|_| {
            let r1 = RESOURCES[rng.random_range(0..RESOURCES.len())];
            let r2 = RESOURCES[rng.random_range(0..RESOURCES.len())];
            let verbs: Vec<&str> = VERBS.iter().copied().filter(|_| rng.random_bool(0.4)).collect();
            json!({"apiGroups": ["", "apps", "batch"], "resources": [r1, format!("{r2}/status")], "verbs": verbs})
        })
        .collect();
    json!(rules)
}

/// A snapshot of `roles` roles and `bindings` bindings (half cluster-scoped, half namespaced).
pub fn synthetic_authorizer(roles: usize, bindings: usize, seed: u64) -> RbacAuthorizer {
    let mut rng = StdRng::seed_from_u64(seed);
    let a = RbacAuthorizer::new();
    let cluster_roles = roles / 2;
    let ns_roles = roles - cluster_roles;
    for i in 0..cluster_roles {
        let rules = synthetic_rules(&mut rng);
        let _ = a.apply(&json!({"kind": "ClusterRole", "metadata": {"name": format!("cr-{i}")}, "rules": rules}));
    }
    for i in 0..ns_roles {
        let rules = synthetic_rules(&mut rng);
        let ns = format!("ns-{}", i % NAMESPACES);
        let _ =
            a.apply(&json!({"kind": "Role", "metadata": {"name": format!("r-{i}"), "namespace": ns}, "rules": rules}));
    }
    let subject = |rng: &mut StdRng| {
        if rng.random_bool(0.8) {
            json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": format!("user-{}", rng.random_range(0..USERS))})
        } else {
            json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": format!("group-{}", rng.random_range(0..GROUPS))})
        }
    };
    for i in 0..bindings {
        let subjects = vec![subject(&mut rng), subject(&mut rng)];
        if i % 2 == 0 && cluster_roles > 0 {
            let role = format!("cr-{}", rng.random_range(0..cluster_roles));
            let _ = a.apply(&json!({"kind": "ClusterRoleBinding", "metadata": {"name": format!("crb-{i}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": subjects}));
        } else if ns_roles > 0 {
            let r = rng.random_range(0..ns_roles);
            let ns = format!("ns-{}", r % NAMESPACES);
            let _ = a.apply(&json!({"kind": "RoleBinding", "metadata": {"name": format!("rb-{i}"), "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("r-{r}")}, "subjects": subjects}));
        }
    }
    a
}

/// Times 20,000 authorization decisions ([`RbacAuthorizer::check`], what the request path
/// calls) against a snapshot of `roles` roles and `bindings` bindings and reports percentiles
/// (target: p99 < 5 µs at 1,000 × 1,000). Each synthetic user is in three of 20 groups, each
/// group bound about 20 times, so a denied decision scans ~60 bindings — a pessimistic mix.
pub fn bench_authorization(roles: usize, bindings: usize) -> AuthorizationBenchReport {
    let a = synthetic_authorizer(roles, bindings, 7);
    let mut rng = StdRng::seed_from_u64(11);
    let users: Vec<UserInfo> = (0..USERS)
        .map(|i| {
            UserInfo::new(
                format!("user-{i}"),
                [format!("group-{}", i % GROUPS), format!("group-{}", (i * 7) % GROUPS), "system:authenticated".into()],
            )
        })
        .collect();
    let namespaces: Vec<String> = (0..NAMESPACES).map(|i| format!("ns-{i}")).collect();
    let decisions = 20_000;
    let mut times = Vec::with_capacity(decisions);
    let mut allowed = 0;
    // Warm up caches and the allocator.
    for _ in 0..1000 {
        let u = &users[rng.random_range(0..USERS)];
        let _ = a.authorize(&Attributes::resource(u, "get", "", "pods", &namespaces[0], ""));
    }
    for _ in 0..decisions {
        let u = &users[rng.random_range(0..USERS)];
        let verb = VERBS[rng.random_range(0..VERBS.len())];
        let resource = RESOURCES[rng.random_range(0..RESOURCES.len())];
        let ns = &namespaces[rng.random_range(0..NAMESPACES)];
        let status = rng.random_bool(0.2);
        let mut attrs = Attributes::resource(u, verb, "apps", resource, ns, "x");
        if status {
            attrs = attrs.with_subresource("status");
        }
        let start = Instant::now();
        let d = a.check(&attrs);
        times.push(start.elapsed().as_nanos() as u64);
        allowed += usize::from(d.is_ok());
    }
    times.sort_unstable();
    let pct = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    AuthorizationBenchReport {
        roles,
        bindings,
        decisions,
        allowed,
        p50_ns: pct(0.50),
        p99_ns: pct(0.99),
        max_ns: times.last().copied().unwrap_or_default(),
        mean_ns: times.iter().sum::<u64>() / times.len() as u64,
    }
}
