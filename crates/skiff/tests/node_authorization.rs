//! End-to-end Node authorization and NodeRestriction (`--authorization-mode=Node,RBAC`, the
//! default): two node identities with client certificates signed by the cluster CA
//! (`CN=system:node:a`/`b`, `O=system:nodes`, as `skiff agent` gets them) read only the secrets
//! their own pods use and write only their own Node.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::Server;
use skiff_apiserver::pki::{CertPair, sign_leaf};

/// A kubeconfig for `CN=system:node:<name>, O=system:nodes` (the admin kubeconfig with the
/// credentials replaced).
fn node_kubeconfig(server: &Server, dir: &std::path::Path, name: &str) -> PathBuf {
    let tls = server.dir.path().join("data/tls");
    let ca = CertPair {
        cert_pem: std::fs::read_to_string(tls.join("ca.crt")).unwrap(),
        key_pem: std::fs::read_to_string(tls.join("ca.key")).unwrap(),
    };
    let leaf = sign_leaf(&ca, &format!("system:node:{name}"), &["system:nodes"], &[], false).unwrap();
    let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    std::fs::write(&cert, &leaf.cert_pem).unwrap();
    std::fs::write(&key, &leaf.key_pem).unwrap();
    let kubeconfig = dir.join(format!("{name}.yaml"));
    std::fs::copy(server.kubeconfig(), &kubeconfig).unwrap();
    server.ok(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "config",
        "set-credentials",
        "skiff-admin",
        "--client-certificate",
        cert.to_str().unwrap(),
        "--client-key",
        key.to_str().unwrap(),
        "--embed-certs=true",
    ]);
    kubeconfig
}

fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) => assert!(Instant::now() < deadline, "timed out after {secs}s waiting for {what}; last: {last}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pod_using(name: &str, node: &str, secret: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  nodeName: {node}
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
  volumes:
  - name: s
    secret:
      secretName: {secret}
"
    )
}

/// A merge PATCH of `resource/name/status` (pods in `default`) with the client of `kubeconfig`;
/// `Err` holds the API server's message.
fn patch_status(
    kubeconfig: &std::path::Path,
    resource: &str,
    name: &str,
    body: &serde_json::Value,
) -> Result<(), String> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{Api, Patch, PatchParams};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let config = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(config, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let (pp, patch) = (PatchParams::default(), Patch::Merge(body));
        let r = if resource == "pods" {
            Api::<Pod>::namespaced(client, "default").patch_status(name, &pp, &patch).await.map(|_| ())
        } else {
            Api::<Node>::all(client).patch_status(name, &pp, &patch).await.map(|_| ())
        };
        r.map_err(|e| match e {
            kube::Error::Api(s) => s.message,
            other => other.to_string(),
        })
    })
}

fn node_object(name: &str, labels: &str) -> String {
    format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {labels}\n")
}

#[test]
fn a_node_reads_only_what_its_pods_use_and_writes_only_its_own_node() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node_kubeconfig(&server, dir.path(), "a"), node_kubeconfig(&server, dir.path(), "b"));
    let as_node = |kc: &PathBuf, args: &[&str]| {
        let mut full = vec!["--kubeconfig", kc.to_str().unwrap()];
        full.extend_from_slice(args);
        let out = server.kubectl(&full);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };

    let create_as = |kc: &PathBuf, yaml: &str| {
        let out = server.apply_stdin(&["--kubeconfig", kc.to_str().unwrap(), "create", "-f", "-"], yaml);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };

    // Each node registers itself; registering another one, or a restricted label, is refused.
    let (ok, out) = create_as(&a, &node_object("a", "{kubernetes.io/hostname: a}"));
    assert!(ok, "{out}");
    let (ok, out) = create_as(&b, &node_object("b", "{}"));
    assert!(ok, "{out}");
    let (ok, out) = create_as(&a, &node_object("c", "{}"));
    assert!(!ok && out.contains(r#"node "a" is not allowed to modify node "c""#), "{out}");
    let (ok, out) = create_as(&a, &node_object("a", "{node-restriction.kubernetes.io/x: y}"));
    assert!(!ok, "{out}");

    // The pods are bound by the admin (as the scheduler would).
    for s in ["secret-a", "secret-b", "unused"] {
        server.ok(&["create", "secret", "generic", s, "--from-literal=k=v"]);
    }
    server.ok_stdin(&["apply", "-f", "-"], &pod_using("pa", "a", "secret-a"));
    server.ok_stdin(&["apply", "-f", "-"], &pod_using("pb", "b", "secret-b"));

    // Node a reads the secret its pod uses (once the graph has seen the pod) ...
    eventually(30, "node a to read secret-a", || {
        let (ok, out) = as_node(&a, &["get", "secret", "secret-a", "-o", "name"]);
        if ok { Ok(()) } else { Err(out) }
    });
    // ... but not one only b's pod uses, nor an unused one, nor the list.
    let (ok, out) = as_node(&a, &["get", "secret", "secret-b"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains(r#"User "system:node:a" cannot get resource "secrets""#)
            && out.contains("no relationship found between node 'a' and this object"),
        "{out}"
    );
    assert!(!as_node(&a, &["get", "secret", "unused"]).0);
    assert!(!as_node(&a, &["get", "secrets"]).0);
    // `kubectl auth can-i` (a SelfSubjectAccessReview) answers as the Node authorizer decides,
    // with its reason after "no -", as kubectl prints a denied review.
    let (_, out) = as_node(&a, &["auth", "can-i", "get", "secret/secret-a"]);
    assert_eq!(out.trim(), "yes", "{out}");
    let (_, out) = as_node(&a, &["auth", "can-i", "get", "secret/secret-b"]);
    assert_eq!(out.trim(), "no - no relationship found between node 'a' and this object", "{out}");
    eventually(30, "node b to read secret-b", || {
        let (ok, out) = as_node(&b, &["get", "secret", "secret-b", "-o", "name"]);
        if ok { Ok(()) } else { Err(out) }
    });

    // Its own pods: get, list by spec.nodeName, status; not b's.
    eventually(30, "node a to get its pod", || {
        let (ok, out) = as_node(&a, &["get", "pod", "pa", "-o", "name"]);
        if ok { Ok(()) } else { Err(out) }
    });
    assert!(!as_node(&a, &["get", "pod", "pb"]).0);
    let (ok, out) = as_node(&a, &["get", "pods", "-A", "--field-selector", "spec.nodeName=a", "-o", "name"]);
    assert!(ok && out.contains("pod/pa") && !out.contains("pb"), "{out}");
    assert!(!as_node(&a, &["get", "pods", "-A"]).0, "a node may not list every pod");
    // Status PATCHes as the kubelet sends them (`kubectl patch --subresource` would first GET
    // the subresource, which the node rules do not grant, in Kubernetes either).
    let status = serde_json::json!({"status": {"message": "seen by a"}});
    patch_status(&a, "pods", "pa", &status).unwrap();
    let err = patch_status(&a, "pods", "pb", &status).unwrap_err();
    assert!(err.contains("can only update pod status for pods with spec.nodeName set to itself"), "{err}");

    // Node status: its own, not b's; b's Node is not even readable.
    let ready = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "ok"}]}});
    patch_status(&a, "nodes", "a", &ready).unwrap();
    let err = patch_status(&a, "nodes", "b", &ready).unwrap_err();
    assert!(err.contains(r#"node "a" is not allowed to modify node "b""#), "{err}");
    let (ok, out) = as_node(&a, &["get", "node", "b"]);
    assert!(!ok && out.contains("only its own Node object"), "{out}");
    let (ok, out) = as_node(&a, &["label", "node", "a", "node-restriction.kubernetes.io/trusted=yes"]);
    assert!(!ok && out.contains("is not allowed to modify labels: node-restriction.kubernetes.io/trusted"), "{out}");
    let (ok, out) = as_node(&a, &["label", "node", "a", "example.com/rack=r1"]);
    assert!(ok, "{out}");

    // Service-account tokens (TokenRequest passes admission): only bound to a pod on itself.
    let (ok, out) =
        as_node(&a, &["create", "token", "default", "--bound-object-kind", "Pod", "--bound-object-name", "pa"]);
    assert!(ok && out.trim().starts_with("ey"), "{out}");
    let (ok, out) =
        as_node(&a, &["create", "token", "default", "--bound-object-kind", "Pod", "--bound-object-name", "pb"]);
    assert!(!ok && out.contains("node requested token bound to a pod scheduled on a different node"), "{out}");
    let (ok, out) = as_node(&a, &["create", "token", "default"]);
    assert!(!ok && out.contains("node requested token not bound to a pod"), "{out}");

    // An admin is not restricted.
    server.ok(&["label", "node", "a", "node-restriction.kubernetes.io/trusted=yes"]);
}
