//! End-to-end: the security pipeline of the real `skiff server` with the real kubectl —
//! anonymous access, `--token-auth-file` users under RBAC, service-account tokens from
//! `kubectl create token`, TokenReview, ClusterRole aggregation, and the admission chain
//! (NamespaceLifecycle, LimitRanger, ResourceQuota, ServiceAccount, PodSecurity).

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Server;

/// A kubeconfig for this server with the cluster CA and, when given, a bearer token (no client
/// certificate).
fn kubeconfig(server: &Server, dir: &Path, name: &str, token: Option<&str>) -> PathBuf {
    let ca = server.dir.path().join("data/tls/ca.crt");
    let user = match token {
        Some(t) => format!("  user:\n    token: {t}\n"),
        None => "  user: {}\n".to_string(),
    };
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: skiff\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\ncontexts:\n- name: skiff\n  context:\n    cluster: skiff\n    user: u\ncurrent-context: skiff\nusers:\n- name: u\n{user}",
        server.port,
        ca.display()
    );
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A raw HTTPS GET (no client certificate; kubectl would prompt for a password on 401):
/// the status code and the body.
fn raw_get(server: &Server, path: &str, token: Option<&str>) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let ca = std::fs::read(server.dir.path().join("data/tls/ca.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&ca) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), ServerName::try_from("127.0.0.1").unwrap()).unwrap();
    let tcp = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(tls, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    // The server may close without close_notify; what was read is the answer.
    let _ = tls.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

/// Runs kubectl with another kubeconfig; returns (success, stdout, stderr).
fn kubectl_as(server: &Server, config: &Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(config)
        .arg("--cache-dir")
        .arg(server.dir.path().join("kubectl-cache-other"))
        .args(args)
        .output()
        .expect("running kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Retries `f` until it returns `Some` (RBAC and controllers follow the store through watches,
/// so a fresh object takes effect a moment later).
fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) => assert!(Instant::now() < deadline, "{what}: {last}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn anonymous_requests_are_401_except_health_and_version() {
    let server = Server::start();
    let (code, body) = raw_get(&server, "/version", None);
    assert!(code == 200 && body.contains("gitVersion"), "{code} {body}");
    for path in ["/healthz", "/livez", "/readyz"] {
        assert_eq!(raw_get(&server, path, None).0, 200, "{path}");
    }
    for path in ["/api", "/api/v1/namespaces/default/pods", "/apis"] {
        let (code, body) = raw_get(&server, path, None);
        assert_eq!(code, 401, "{path}: {body}");
        assert!(body.contains(r#""kind":"Status""#) && body.contains(r#""reason":"Unauthorized""#), "{body}");
    }
    let (code, _) = raw_get(&server, "/version", Some("not-a-token"));
    assert_eq!(code, 401, "a bad token is 401 even on /version");
}

#[test]
fn token_file_users_authenticate_and_rbac_applies_to_them() {
    let tmp = tempfile::tempdir().unwrap();
    let tokens = tmp.path().join("tokens.csv");
    std::fs::write(&tokens, "jane-s3cret,jane,1001,\"dev,ops\"\n").unwrap();
    let server = Server::start_with(&["--token-auth-file", tokens.to_str().unwrap(), "--anonymous-auth=false"]);
    let jane = kubeconfig(&server, tmp.path(), "jane", Some("jane-s3cret"));

    let (ok, stdout, stderr) = kubectl_as(&server, &jane, &["auth", "whoami", "-o", "json"]);
    assert!(ok, "{stderr}");
    let review: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], "jane");
    assert_eq!(review["status"]["userInfo"]["groups"], serde_json::json!(["dev", "ops", "system:authenticated"]));

    let (ok, _, stderr) = kubectl_as(&server, &jane, &["get", "pods"]);
    assert!(!ok, "jane has no role yet");
    assert!(
        stderr.contains(r#"User "jane" cannot list resource "pods" in API group "" in the namespace "default""#),
        "{stderr}"
    );
    server.ok(&["create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods"]);
    server.ok(&["create", "rolebinding", "read-pods", "--role=pod-reader", "--group=dev"]);
    eventually("jane lists pods through her group's binding", || {
        let (ok, _, stderr) = kubectl_as(&server, &jane, &["get", "pods"]);
        if ok { Ok(()) } else { Err(stderr) }
    });
    let (ok, _, stderr) = kubectl_as(&server, &jane, &["delete", "pod", "x"]);
    assert!(!ok && stderr.contains("Forbidden"), "{stderr}");

    // --anonymous-auth=false: even /version needs credentials.
    assert_eq!(raw_get(&server, "/version", None).0, 401);
    assert_eq!(raw_get(&server, "/version", Some("jane-s3cret")).0, 200);
    assert_eq!(raw_get(&server, "/api", Some("wrong")).0, 401);
}

#[test]
fn service_account_tokens_from_kubectl_create_token_authenticate_as_the_service_account() {
    let server = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let token = server.ok(&["create", "token", "default"]).trim().to_string();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let sa = kubeconfig(&server, tmp.path(), "sa", Some(&token));

    let (ok, stdout, stderr) = kubectl_as(&server, &sa, &["auth", "whoami", "-o", "json"]);
    assert!(ok, "{stderr}");
    let review: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], "system:serviceaccount:default:default");
    let groups = review["status"]["userInfo"]["groups"].to_string();
    for g in ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"] {
        assert!(groups.contains(&format!("\"{g}\"")), "{groups}");
    }
    // `kubectl --token` on a kubeconfig without credentials works the same.
    let anon = kubeconfig(&server, tmp.path(), "anon", None);
    let (ok, stdout, stderr) = kubectl_as(&server, &anon, &["--token", &token, "auth", "whoami"]);
    assert!(ok && stdout.contains("system:serviceaccount:default:default"), "{stdout}{stderr}");

    let (ok, _, stderr) = kubectl_as(&server, &sa, &["get", "configmaps"]);
    assert!(!ok && stderr.contains("system:serviceaccount:default:default"), "{stderr}");
    server.ok(&["create", "rolebinding", "sa-view", "--clusterrole=view", "--serviceaccount=default:default"]);
    eventually("the service account reads what view allows", || {
        let (ok, _, stderr) = kubectl_as(&server, &sa, &["get", "configmaps"]);
        if ok { Ok(()) } else { Err(stderr) }
    });
    let (ok, _, _) = kubectl_as(&server, &sa, &["get", "secrets"]);
    assert!(!ok, "view does not read secrets");

    // TokenReview answers for the token, and not for a forged one.
    let review = |t: &str| -> serde_json::Value {
        let body =
            format!(r#"{{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{{"token":"{t}"}}}}"#);
        serde_json::from_str(&server.ok_stdin(&["create", "--validate=false", "-f", "-", "-o", "json"], &body)).unwrap()
    };
    let good = review(&token);
    assert_eq!(good["status"]["authenticated"], true, "{good}");
    assert_eq!(good["status"]["user"]["username"], "system:serviceaccount:default:default");
    let mut forged = token.clone();
    forged.pop();
    forged.push(if token.ends_with('A') { 'B' } else { 'A' });
    let bad = review(&forged);
    assert_ne!(bad["status"]["authenticated"], true, "{bad}");
}

#[test]
fn cluster_roles_with_an_aggregation_rule_collect_the_rules_of_matching_roles() {
    let server = Server::start();
    server.ok_stdin(
        &["apply", "--validate=false", "-f", "-"],
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: monitoring}
aggregationRule:
  clusterRoleSelectors:
  - matchLabels: {example.com/aggregate-to-monitoring: "true"}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: monitoring-endpoints
  labels: {example.com/aggregate-to-monitoring: "true"}
rules:
- apiGroups: [""]
  resources: ["services", "endpoints"]
  verbs: ["get", "list"]
"#,
    );
    eventually("monitoring aggregates monitoring-endpoints", || {
        let rules = server.ok(&["get", "clusterrole", "monitoring", "-o", "jsonpath={.rules[*].resources}"]);
        if rules.contains("endpoints") { Ok(()) } else { Err(rules) }
    });
}

#[test]
fn admission_rejects_missing_namespaces_and_over_quota_pods_and_applies_limit_range_defaults() {
    let server = Server::start();
    let err = server.fails(&["create", "configmap", "c", "-n", "missing"]);
    assert!(err.contains(r#"namespaces "missing" not found"#), "{err}");

    server.ok(&["create", "namespace", "team"]);
    server.ok_stdin(
        &["apply", "--validate=false", "-f", "-"],
        r#"apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: team}
spec:
  limits:
  - type: Container
    defaultRequest: {cpu: 100m, memory: 64Mi}
    default: {cpu: 200m, memory: 128Mi}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: team}
spec:
  hard: {pods: "3", requests.cpu: 500m}
"#,
    );
    eventually("the quota controller fills in status.used", || {
        let used = server.ok(&["get", "quota", "compute", "-n", "team", "-o", "jsonpath={.status.used.pods}"]);
        if used == "0" { Ok(()) } else { Err(used) }
    });

    let small = r#"apiVersion: v1
kind: Pod
metadata: {name: small, namespace: team}
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10}]
"#;
    eventually("a pod without resources is admitted with the LimitRange defaults", || {
        let out = server.apply_stdin(&["create", "--validate=false", "-f", "-"], small);
        if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
    });
    let pod: serde_json::Value =
        serde_json::from_str(&server.ok(&["get", "pod", "small", "-n", "team", "-o", "json"])).unwrap();
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["resources"]["requests"]["cpu"], "100m", "{pod}");
    assert_eq!(c["resources"]["limits"]["memory"], "128Mi", "{pod}");
    assert_eq!(pod["spec"]["serviceAccountName"], "default", "ServiceAccount admission");
    assert!(
        c["volumeMounts"].to_string().contains("/var/run/secrets/kubernetes.io/serviceaccount"),
        "the token volume is mounted: {pod}"
    );
    eventually("the pod is charged to the quota", || {
        let used = server.ok(&["get", "quota", "compute", "-n", "team", "-o", "jsonpath={.status.used}"]);
        if used.contains(r#""pods":"1""#) && used.contains(r#""requests.cpu":"100m""#) { Ok(()) } else { Err(used) }
    });
    eventually("kube-root-ca.crt is published in the namespace", || {
        let out = server.kubectl(&["get", "configmap", "kube-root-ca.crt", "-n", "team"]);
        if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
    });

    let big = r#"apiVersion: v1
kind: Pod
metadata: {name: big, namespace: team}
spec:
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    resources: {requests: {cpu: "1"}, limits: {cpu: "1"}}
"#;
    let out = server.apply_stdin(&["create", "--validate=false", "-f", "-"], big);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "over quota");
    assert!(err.contains("(Forbidden)"), "{err}");
    assert!(
        err.contains(
            "exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=100m, limited: requests.cpu=500m"
        ),
        "{err}"
    );

    // PodSecurity: a restricted namespace rejects a privileged pod.
    server.ok(&["create", "namespace", "locked"]);
    server.ok(&["label", "namespace", "locked", "pod-security.kubernetes.io/enforce=restricted"]);
    let privileged = r#"apiVersion: v1
kind: Pod
metadata: {name: root, namespace: locked}
spec:
  automountServiceAccountToken: false
  containers:
  - name: c
    image: registry.k8s.io/pause:3.10
    securityContext: {privileged: true}
"#;
    let err = eventually("PodSecurity rejects the privileged pod", || {
        let out = server.apply_stdin(&["create", "--validate=false", "-f", "-"], privileged);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() && err.contains("violates PodSecurity") { Ok(err) } else { Err(err) }
    });
    assert!(err.contains(r#"violates PodSecurity "restricted:latest""#), "{err}");
    assert!(err.contains("privileged"), "{err}");
}

#[test]
fn always_allow_and_disabled_admission_plugins_turn_the_pipeline_off() {
    let tmp = tempfile::tempdir().unwrap();
    let tokens = tmp.path().join("tokens.csv");
    std::fs::write(&tokens, "jane-s3cret,jane,1001,\"dev\"\n").unwrap();
    let server = Server::start_with(&[
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--authorization-mode=AlwaysAllow",
        "--disable-admission-plugins=ServiceAccount,PodSecurity",
    ]);
    let jane = kubeconfig(&server, tmp.path(), "jane", Some("jane-s3cret"));
    // Authentication still applies; authorization allows jane without any binding.
    assert_eq!(raw_get(&server, "/api", Some("wrong")).0, 401);
    let (ok, stdout, stderr) = kubectl_as(&server, &jane, &["auth", "can-i", "delete", "nodes"]);
    assert!(ok && stdout.trim() == "yes", "{stdout} {stderr}");
    let (ok, _, stderr) =
        kubectl_as(&server, &jane, &["run", "p", "--image=skiff.local/busybox:1.35", "--restart=Never"]);
    assert!(ok, "{stderr}");
    // ServiceAccount admission is off: no service account or token volume is added.
    let sa = server.ok(&["get", "pod", "p", "-o", "jsonpath={.spec.serviceAccountName}|{.spec.volumes}"]);
    assert_eq!(sa, "|", "ServiceAccount admission ran");
    // Unknown names are refused at startup, as kube-apiserver does.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["server", "--disable-admission-plugins=NoSuchPlugin", "--data-dir"])
        .arg(tmp.path().join("bad"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NoSuchPlugin"), "{}", String::from_utf8_lossy(&out.stderr));
}
