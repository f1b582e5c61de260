//! End-to-end (issue 7): the seed's admission example — a mutating webhook that injects an init
//! container — against the real `skiff server`, with a webhook server started by the test
//! (HTTPS, its certificate signed by the cluster CA, AdmissionReview v1, a JSONPatch answer and
//! a warning kubectl prints), called by URL and through a Service's ready endpoint; and the
//! seed's `pod-reader` Role checked with a real client certificate for jane.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use common::Server;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use skiff_apiserver::pki::{CertPair, sign_leaf};

/// The cluster CA the server generated under its data dir.
fn cluster_ca(server: &Server) -> CertPair {
    let tls = server.dir.path().join("data/tls");
    CertPair {
        cert_pem: std::fs::read_to_string(tls.join("ca.crt")).unwrap(),
        key_pem: std::fs::read_to_string(tls.join("ca.key")).unwrap(),
    }
}

fn eventually<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {secs}s waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The warning the test webhook returns with every answer.
const WEBHOOK_WARNING: &str = "init container injected by the test webhook";

/// Answers one AdmissionReview: a pod gets an init container `injected-init` (JSONPatch) and
/// the answer carries [`WEBHOOK_WARNING`].
fn admission_response(review: &serde_json::Value) -> serde_json::Value {
    let uid = review["request"]["uid"].clone();
    let pod = &review["request"]["object"];
    let init = serde_json::json!({"name": "injected-init", "image": "skiff.local/busybox:1.35", "command": ["true"]});
    let patch = if pod["spec"]["initContainers"].is_array() {
        serde_json::json!([{"op": "add", "path": "/spec/initContainers/-", "value": init}])
    } else {
        serde_json::json!([{"op": "add", "path": "/spec/initContainers", "value": [init]}])
    };
    let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch, "warnings": [WEBHOOK_WARNING]},
    })
}

/// A minimal HTTPS webhook server on a free loopback port (one request per connection), counting
/// the reviews it answered. Runs until the test process ends.
fn start_webhook(serving: &CertPair, calls: Arc<AtomicUsize>) -> u16 {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes()).collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let Ok(conn) = rustls::ServerConnection::new(config.clone()) else { continue };
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut reader = BufReader::new(&mut tls);
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let Ok(review) = serde_json::from_slice::<serde_json::Value>(&body) else { continue };
            calls.fetch_add(1, Ordering::SeqCst);
            let answer = admission_response(&review).to_string();
            let _ = write!(
                tls,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    port
}

#[test]
fn a_mutating_webhook_injects_an_init_container_into_labelled_pods() {
    let server = Server::start();
    let ca = cluster_ca(&server);
    let serving = sign_leaf(&ca, "injector", &[], &["127.0.0.1".to_string()], true).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let port = start_webhook(&serving, calls.clone());
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&ca.cert_pem);
    let config = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: init-injector
webhooks:
- name: init-injector.skiff.test
  clientConfig:
    url: https://127.0.0.1:{port}/mutate
    caBundle: {ca_bundle}
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["pods"]
  objectSelector:
    matchLabels:
      inject: "true"
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 5
"#
    );
    server.ok_stdin(&["apply", "-f", "-"], &config);

    // The configuration reaches the admission chain through a watch: retry the create until
    // the pod comes back mutated.
    let mut attempt = 0;
    let init = eventually(30, "the webhook to inject the init container", || {
        attempt += 1;
        let name = format!("web-{attempt}");
        server.ok(&[
            "run",
            &name,
            "--image=skiff.local/busybox:1.35",
            "--labels=inject=true",
            "--restart=Never",
            "--",
            "sleep",
            "1",
        ]);
        let init = server.ok(&["get", "pod", &name, "-o", "jsonpath={.spec.initContainers[*].name}"]);
        (!init.is_empty()).then_some(init)
    });
    assert_eq!(init, "injected-init");
    assert!(calls.load(Ordering::SeqCst) >= 1, "the webhook server was called");

    // The webhook's warning reaches the client as a `Warning: 299` header, which kubectl
    // prints on stderr.
    let out = server.kubectl(&[
        "run",
        "warned",
        "--image=skiff.local/busybox:1.35",
        "--labels=inject=true",
        "--restart=Never",
        "--",
        "sleep",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("Warning: {WEBHOOK_WARNING}")), "kubectl stderr: {stderr}");

    // Pods outside the objectSelector are not sent to the webhook.
    let before = calls.load(Ordering::SeqCst);
    server.ok(&["run", "plain", "--image=skiff.local/busybox:1.35", "--restart=Never", "--", "sleep", "1"]);
    assert_eq!(server.ok(&["get", "pod", "plain", "-o", "jsonpath={.spec.initContainers[*].name}"]), "");
    assert_eq!(calls.load(Ordering::SeqCst), before, "an unlabelled pod is not reviewed");
}

#[test]
fn jane_with_her_own_client_certificate_can_list_but_not_delete_pods() {
    let server = Server::start();
    let role = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/pod-reader-role.yaml");
    server.ok(&["apply", "-f", role]);
    server.ok(&["create", "rolebinding", "read-pods", "--role=pod-reader", "--user=jane"]);

    // A client certificate for CN=jane, O=developers, signed by the cluster CA.
    let ca = cluster_ca(&server);
    let jane = sign_leaf(&ca, "jane", &["developers"], &[], false).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("jane.crt"), dir.path().join("jane.key"));
    std::fs::write(&cert, &jane.cert_pem).unwrap();
    std::fs::write(&key, &jane.key_pem).unwrap();
    let kubeconfig = dir.path().join("jane.yaml");
    std::fs::copy(server.kubeconfig(), &kubeconfig).unwrap();
    let kc = kubeconfig.to_str().unwrap();
    let set = server.ok(&[
        "--kubeconfig",
        kc,
        "config",
        "set-credentials",
        "skiff-admin",
        "--client-certificate",
        cert.to_str().unwrap(),
        "--client-key",
        key.to_str().unwrap(),
        "--embed-certs=true",
    ]);
    assert!(set.contains("set"), "{set}");

    let whoami = server.ok(&["--kubeconfig", kc, "auth", "whoami"]);
    assert!(whoami.contains("jane") && whoami.contains("developers"), "{whoami}");
    let can_i = |verb: &str, want: &str| {
        eventually(20, &format!("`kubectl auth can-i {verb} pods` to answer {want}"), || {
            let out = server.kubectl(&["--kubeconfig", kc, "auth", "can-i", verb, "pods"]);
            (String::from_utf8_lossy(&out.stdout).trim() == want).then_some(())
        })
    };
    can_i("list", "yes");
    can_i("delete", "no");
    server.ok(&["--kubeconfig", kc, "get", "pods"]);
    let err = server.fails(&["--kubeconfig", kc, "delete", "pod", "x"]);
    assert!(err.contains(r#"User "jane" cannot delete resource "pods""#), "{err}");
}

/// A webhook configured by `clientConfig.service` is called at a ready endpoint of that
/// Service, with TLS verifying `<name>.<namespace>.svc`. The webhook server listens on
/// loopback to keep the test hermetic, so its address is published the way a Service without
/// a selector gets endpoints: an EndpointSlice the test writes, labelled with the service name
/// (Kubernetes' Endpoints validation would refuse a loopback address; skiff's EndpointSlice
/// validation, like kube-apiserver's for slices, checks only that it is an IP).
#[test]
fn a_webhook_configured_by_service_is_called_at_a_ready_endpoint() {
    let server = Server::start();
    let ca = cluster_ca(&server);
    // Only the service DNS name: the call must use it as the TLS server name.
    let serving = sign_leaf(&ca, "injector", &[], &["injector.webhooks.svc".to_string()], true).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let port = start_webhook(&serving, calls.clone());
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&ca.cert_pem);
    let objects = format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: webhooks
---
apiVersion: v1
kind: Service
metadata:
  name: injector
  namespace: webhooks
spec:
  ports:
  - name: https
    port: 443
    targetPort: {port}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: injector-1
  namespace: webhooks
  labels:
    kubernetes.io/service-name: injector
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
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: service-injector
webhooks:
- name: service-injector.skiff.test
  clientConfig:
    service:
      namespace: webhooks
      name: injector
      path: /mutate
      port: 443
    caBundle: {ca_bundle}
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["pods"]
  objectSelector:
    matchLabels:
      inject: "true"
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 5
"#
    );
    server.ok_stdin(&["apply", "-f", "-"], &objects);
    let mut attempt = 0;
    let init = eventually(30, "the webhook behind the service to inject the init container", || {
        attempt += 1;
        let name = format!("svc-{attempt}");
        let out = server.kubectl(&[
            "run",
            &name,
            "--image=skiff.local/busybox:1.35",
            "--labels=inject=true",
            "--restart=Never",
            "--",
            "sleep",
            "1",
        ]);
        if !out.status.success() {
            return None;
        }
        let init = server.ok(&["get", "pod", &name, "-o", "jsonpath={.spec.initContainers[*].name}"]);
        (!init.is_empty()).then_some(init)
    });
    assert_eq!(init, "injected-init");
    assert!(calls.load(Ordering::SeqCst) >= 1, "the webhook server was called");

    // With its endpoint not ready the service cannot be reached: failurePolicy Fail rejects.
    server.ok(&[
        "patch",
        "endpointslice",
        "injector-1",
        "-n",
        "webhooks",
        "--type=json",
        "-p",
        r#"[{"op": "replace", "path": "/endpoints/0/conditions/ready", "value": false}]"#,
    ]);
    let mut attempt = 0;
    let err = eventually(30, "a create to fail without a ready endpoint", || {
        attempt += 1;
        let out = server.kubectl(&[
            "run",
            &format!("down-{attempt}"),
            "--image=skiff.local/busybox:1.35",
            "--labels=inject=true",
            "--restart=Never",
        ]);
        (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).to_string())
    });
    assert!(
        err.contains("service-injector.skiff.test") && err.contains("no endpoints available for service \"injector\""),
        "{err}"
    );
}
