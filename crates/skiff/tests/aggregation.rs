//! End-to-end: API aggregation against the real `skiff server` and `kubectl`. The
//! test runs a small aggregated API server of its own — HTTPS with a certificate the
//! APIService's `caBundle` verifies, accepting only clients with a certificate from the
//! request-header CA the server publishes in `kube-system/extension-apiserver-authentication`,
//! and answering with the `X-Remote-User`/`X-Remote-Group` it was sent — registers it with an
//! APIService, reads through the API server, finds it in discovery, and stops it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use base64::Engine;
use common::Server;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use skiff_apiserver::pki::{CertPair, sign_leaf};

const GROUP: &str = "wardle.example.com";

fn resource_list() -> serde_json::Value {
    serde_json::json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{GROUP}/v1alpha1"),
        "resources": [
            {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
             "verbs": ["get", "list"], "shortNames": ["fl"]},
        ],
    })
}

/// The answer to `path` from the caller named by `user` and `groups`: the discovery document,
/// or a FlunderList whose one item records who asked.
fn answer(path: &str, user: &str, groups: &[String]) -> (u16, serde_json::Value) {
    let gv = format!("/apis/{GROUP}/v1alpha1");
    if path == gv {
        return (200, resource_list());
    }
    if path == format!("/openapi/v3{gv}") {
        return (
            200,
            serde_json::json!({"openapi": "3.0.0", "info": {"title": "wardle", "version": "v1alpha1"}, "paths": {},
            "components": {"schemas": {"com.example.wardle.v1alpha1.Flunder": {"type": "object"}}}}),
        );
    }
    if path.starts_with(&format!("{gv}/namespaces/default/flunders")) {
        let item = serde_json::json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": "Flunder",
            "metadata": {"name": "seen", "namespace": "default",
                "annotations": {"remote-user": user, "remote-groups": groups.join(",")}}});
        let list = serde_json::json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": "FlunderList",
            "metadata": {}, "items": [item]});
        return (200, list);
    }
    (
        404,
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"}),
    )
}

/// The test's aggregated server on a free loopback port, one request per connection, until
/// `stop` is set (the next connection then closes the listener).
fn start_aggregated_server(serving: &CertPair, client_ca_pem: &str, stop: Arc<AtomicBool>) -> u16 {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes()).collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    // Only the front proxy's certificate opens a connection.
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let Ok(conn) = rustls::ServerConnection::new(config.clone()) else { continue };
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut reader = BufReader::new(&mut tls);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                continue;
            }
            let (mut user, mut groups) = (String::new(), Vec::new());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("x-remote-user") {
                        user = value.trim().to_string();
                    } else if name.eq_ignore_ascii_case("x-remote-group") {
                        groups.push(value.trim().to_string());
                    }
                }
            }
            let path =
                request_line.split_whitespace().nth(1).unwrap_or("/").split('?').next().unwrap_or("/").to_string();
            // The client certificate passed the verifier; its name must be the allowed one.
            let peer =
                tls.conn.peer_certificates().and_then(|c| c.first()).and_then(|c| skiff_apiserver::pki::cert_user(c));
            let (code, body) = match peer {
                Some((cn, _)) if cn == "front-proxy-client" => answer(&path, &user, &groups),
                _ => (401, serde_json::json!({"kind": "Status", "code": 401})),
            };
            let body = body.to_string();
            let _ = write!(
                tls,
                "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    port
}

fn available(server: &Server, name: &str) -> (String, String, String) {
    let s = server.json(&["get", "apiservice", name]);
    let c = s["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Available").cloned())
        .unwrap_or_default();
    let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (field("status"), field("reason"), field("message"))
}

#[test]
fn an_apiservice_backed_by_a_test_server_is_proxied_discovered_and_marked_unavailable_when_it_stops() {
    let server = Server::start();
    // What an aggregated server reads to trust the front proxy.
    let auth = server.json(&["get", "configmap", "-n", "kube-system", "extension-apiserver-authentication"]);
    let request_header_ca =
        auth["data"]["requestheader-client-ca-file"].as_str().expect("request-header CA").to_string();
    assert_eq!(auth["data"]["requestheader-allowed-names"], "[\"front-proxy-client\"]");
    assert_eq!(auth["data"]["requestheader-username-headers"], "[\"X-Remote-User\"]");
    let tls = server.dir.path().join("data/tls");
    let ca = CertPair {
        cert_pem: std::fs::read_to_string(tls.join("ca.crt")).unwrap(),
        key_pem: std::fs::read_to_string(tls.join("ca.key")).unwrap(),
    };
    assert_ne!(ca.cert_pem, request_header_ca, "the front proxy has a CA of its own");
    // Only the service DNS name: the proxy must verify it against the caBundle.
    let serving = sign_leaf(&ca, "wardle-api", &[], &["wardle-api.wardle.svc".to_string()], true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let port = start_aggregated_server(&serving, &request_header_ca, stop.clone());
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&ca.cert_pem);
    let objects = format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: wardle
---
apiVersion: v1
kind: Service
metadata:
  name: wardle-api
  namespace: wardle
spec:
  ports:
  - name: https
    port: 443
    targetPort: {port}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: wardle-api-1
  namespace: wardle
  labels:
    kubernetes.io/service-name: wardle-api
addressType: IPv4
ports:
- name: https
  port: {port}
  protocol: TCP
endpoints:
- addresses: ["127.0.0.1"]
  conditions:
    ready: true
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1alpha1.{GROUP}
spec:
  group: {GROUP}
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 15
  service:
    namespace: wardle
    name: wardle-api
    port: 443
  caBundle: {ca_bundle}
"#
    );
    server.ok_stdin(&["apply", "-f", "-"], &objects);
    let name = format!("v1alpha1.{GROUP}");
    server.eventually(30, "the APIService to pass its checks", || {
        let (status, reason, _) = available(&server, &name);
        (status == "True" && reason == "Passed").then_some(())
    });

    // Proxied with the requester's identity in the front proxy's headers.
    let raw = server.ok(&["get", "--raw", &format!("/apis/{GROUP}/v1alpha1/namespaces/default/flunders")]);
    let list: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let seen = &list["items"][0]["metadata"]["annotations"];
    assert_eq!(seen["remote-user"], "system:admin", "{list}");
    let groups = seen["remote-groups"].as_str().unwrap();
    assert!(groups.split(',').any(|g| g == "system:masters") && groups.contains("system:authenticated"), "{groups}");

    // Authorized here from the path: jane may not list flunders; impersonated, she is who the
    // server is told about, and a forged X-Remote-Group never reaches it.
    let flunders = format!("/apis/{GROUP}/v1alpha1/namespaces/default/flunders");
    let err = server.fails(&["get", "--raw", &flunders, "--as", "jane"]);
    assert!(err.contains("Forbidden") || err.contains("forbidden"), "{err}");
    let raw = server.ok(&["get", "--raw", &flunders, "--as", "jane", "--as-group", "system:masters"]);
    let list: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(list["items"][0]["metadata"]["annotations"]["remote-user"], "jane", "{list}");
    let data = server.dir.path().join("data/tls");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(data.join("ca.crt"))
        .arg("--cert")
        .arg(data.join("admin.crt"))
        .arg("--key")
        .arg(data.join("admin.key"))
        .args(["-H", "X-Remote-Group: forged", "-H", "X-Remote-User: mallory"])
        .arg(format!("https://127.0.0.1:{}{flunders}", server.port))
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a list");
    let seen = &list["items"][0]["metadata"]["annotations"];
    assert_eq!(seen["remote-user"], "system:admin", "{list}");
    assert!(!seen["remote-groups"].as_str().unwrap().contains("forged"), "{list}");

    // Discovery: the group in /apis and kubectl's aggregated discovery.
    assert!(server.ok(&["api-versions"]).lines().any(|l| l == format!("{GROUP}/v1alpha1")));
    let resources = server.ok(&["api-resources", "--api-group", GROUP]);
    assert!(resources.contains("flunders") && resources.contains("Flunder"), "{resources}");
    let group: serde_json::Value =
        serde_json::from_str(&server.ok(&["get", "--raw", &format!("/apis/{GROUP}")])).unwrap();
    assert_eq!(group["preferredVersion"]["version"], "v1alpha1");

    // OpenAPI v3: the index links the group-version, whose document comes from the server.
    let index: serde_json::Value = serde_json::from_str(&server.ok(&["get", "--raw", "/openapi/v3"])).unwrap();
    let url =
        index["paths"][format!("apis/{GROUP}/v1alpha1")]["serverRelativeURL"].as_str().expect("indexed").to_string();
    let doc: serde_json::Value = serde_json::from_str(&server.ok(&["get", "--raw", &url])).unwrap();
    assert!(doc["components"]["schemas"]["com.example.wardle.v1alpha1.Flunder"].is_object(), "{doc}");

    // The built-in group-versions are Local APIServices.
    let listed = server.ok(&["get", "apiservices"]);
    let apps = listed.lines().find(|l| l.starts_with("v1.apps ")).expect("v1.apps listed");
    assert!(apps.contains("Local") && apps.contains("True"), "{listed}");
    assert!(listed.lines().any(|l| l.starts_with(&name) && l.contains("wardle/wardle-api")), "{listed}");

    // The server stops: unavailable, 503 for its group only.
    stop.store(true, Ordering::SeqCst);
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    let message = server.eventually(30, "the APIService to fail its discovery check", || {
        let (status, reason, message) = available(&server, &name);
        (status == "False" && reason == "FailedDiscoveryCheck").then_some(message)
    });
    assert!(message.contains(&format!("/apis/{GROUP}/v1alpha1")), "{message}");
    let err = server.fails(&["get", "--raw", &format!("/apis/{GROUP}/v1alpha1/namespaces/default/flunders")]);
    assert!(err.contains("ServiceUnavailable") || err.contains("503"), "{err}");
    server.ok(&["get", "pods", "-A"]);
    let listed = server.ok(&["get", "apiservices"]);
    assert!(listed.lines().any(|l| l.starts_with(&name) && l.contains("False (FailedDiscoveryCheck)")), "{listed}");
}

#[test]
fn an_invalid_apiservice_is_rejected_with_the_field_errors() {
    let server = Server::start();
    let bad = r#"apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1.wrong.example.com
spec:
  group: wardle.example.com
  version: v1alpha1
  groupPriorityMinimum: 0
  versionPriority: 15
  insecureSkipTLSVerify: true
  caBundle: AAAA
  service:
    namespace: wardle
    name: api
"#;
    let out = server.apply_stdin(&["create", "-f", "-"], bad);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"metadata.name: Invalid value: "v1.wrong.example.com": must be `spec.version+"."+spec.group`: "v1alpha1.wardle.example.com""#), "{err}");
    assert!(err.contains("spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000"), "{err}");
    assert!(
        err.contains("spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present"),
        "{err}"
    );
}
