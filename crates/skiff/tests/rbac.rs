//! End-to-end: RBAC enforced by the real `skiff server`, checked with `kubectl auth can-i`,
//! `kubectl auth whoami` and impersonation (`--as`).

mod common;

use std::time::{Duration, Instant};

use common::Server;

/// Runs `kubectl auth can-i <args>` until it prints `want` (the RBAC snapshot follows the
/// store through a watch, so a fresh binding takes effect a moment later).
fn can_i_eventually(server: &Server, args: &[&str], want: &str) {
    let mut full = vec!["auth", "can-i"];
    full.extend_from_slice(args);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = server.kubectl(&full);
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if stdout == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl {full:?} printed {stdout:?}, want {want:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_role_binding_lets_jane_read_pods_but_not_delete_them() {
    let server = Server::start();
    let role = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/pod-reader-role.yaml");
    server.ok(&["apply", "-f", role]);
    can_i_eventually(&server, &["list", "pods", "--as", "jane"], "no");
    server.ok(&["create", "rolebinding", "read-pods", "--role=pod-reader", "--user=jane"]);
    can_i_eventually(&server, &["list", "pods", "--as", "jane"], "yes");
    can_i_eventually(&server, &["delete", "pods", "--as", "jane"], "no");
    can_i_eventually(&server, &["list", "pods", "--as", "jane", "-n", "kube-system"], "no");

    server.ok(&["get", "pods", "--as", "jane"]);
    let err = server.fails(&["delete", "pod", "x", "--as", "jane"]);
    assert!(
        err.contains(r#"User "jane" cannot delete resource "pods" in API group "" in the namespace "default""#),
        "{err}"
    );
    let err = server.fails(&["get", "secrets", "--as", "jane"]);
    assert!(err.contains("forbidden"), "{err}");

    let list = server.ok(&["auth", "can-i", "--list", "--as", "jane"]);
    assert!(list.lines().any(|l| l.starts_with("pods ") && l.contains("[get list watch]")), "{list}");

    let whoami = server.ok(&["auth", "whoami", "--as", "jane"]);
    assert!(whoami.contains("jane") && whoami.contains("system:authenticated"), "{whoami}");
    let admin = server.ok(&["auth", "whoami"]);
    assert!(admin.contains("system:masters"), "{admin}");
}

#[test]
fn the_admin_is_a_superuser_and_bootstrap_roles_exist() {
    let server = Server::start();
    can_i_eventually(&server, &["*", "*", "--all-namespaces"], "yes");
    let roles = server.ok(&["get", "clusterroles", "-o", "name"]);
    for r in ["clusterrole.rbac.authorization.k8s.io/cluster-admin", "clusterrole.rbac.authorization.k8s.io/view"] {
        assert!(roles.lines().any(|l| l == r), "{r} missing: {roles}");
    }
    // jane has no binding yet: the admin may impersonate her, and she may do nothing.
    can_i_eventually(&server, &["get", "pods", "--as", "jane"], "no");
}
