//! Rule matching tables and a round trip against HTTPS webhook servers on loopback.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;

use super::*;
use crate::{AdmissionChain, MemoryLookup, Operation};
use skiff_auth::UserInfo;

fn rule(
    ops: &[&str],
    groups: &[&str],
    versions: &[&str],
    resources: &[&str],
    scope: Option<&str>,
) -> RuleWithOperations {
    let v = |x: &[&str]| Some(x.iter().map(|s| s.to_string()).collect());
    RuleWithOperations {
        operations: v(ops),
        api_groups: v(groups),
        api_versions: v(versions),
        resources: v(resources),
        scope: scope.map(str::to_string),
    }
}

fn request(op: Operation, group: &str, resource: &str, sub: &str, ns: &str) -> AdmissionRequest {
    let mut r = AdmissionRequest::new(op, group, "v1", resource, "Kind");
    r.sub_resource = sub.into();
    r.namespace = ns.into();
    r
}

#[test]
fn webhook_rules_match_operations_groups_resources_and_scope() {
    let pods_create = rule(&["CREATE"], &[""], &["v1"], &["pods"], None);
    let cases = [
        (&pods_create, request(Operation::Create, "", "pods", "", "ns"), true),
        (&pods_create, request(Operation::Update, "", "pods", "", "ns"), false),
        (&pods_create, request(Operation::Create, "apps", "pods", "", "ns"), false),
        (&pods_create, request(Operation::Create, "", "pods", "status", "ns"), false),
        (&pods_create, request(Operation::Create, "", "services", "", "ns"), false),
    ];
    for (r, req, want) in cases {
        assert_eq!(rule_matches(r, &req), want, "{:?} {}/{}", req.operation, req.resource.resource, req.sub_resource);
    }
    let resources = [
        ("*/*", "pods", "status", true),
        ("*/*", "pods", "", true),
        ("*", "pods", "", true),
        ("*", "pods", "status", false),
        ("pods/*", "pods", "exec", true),
        ("pods/*", "pods", "", false),
        ("*/status", "deployments", "status", true),
        ("*/status", "deployments", "scale", false),
        ("pods/status", "pods", "status", true),
        ("pods", "pods", "", true),
    ];
    for (pattern, res, sub, want) in resources {
        assert_eq!(resource_matches(pattern, res, sub), want, "{pattern} vs {res}/{sub}");
    }
    let any = rule(&["*"], &["*"], &["*"], &["*"], Some("Cluster"));
    assert!(rule_matches(&any, &request(Operation::Delete, "", "nodes", "", "")));
    assert!(!rule_matches(&any, &request(Operation::Delete, "", "pods", "", "ns")));
    let namespaced = rule(&["*"], &["*"], &["*"], &["*"], Some("Namespaced"));
    assert!(rule_matches(&namespaced, &request(Operation::Create, "", "pods", "", "ns")));
}

fn hook(name: &str, url: &str, ca: &str) -> Value {
    json!({"name": name, "clientConfig": {"url": url, "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5})
}

#[test]
fn selectors_pick_namespaces_and_objects() {
    let lookup = Arc::new(MemoryLookup::new());
    lookup.put(json!({"kind": "Namespace", "metadata": {"name": "team", "labels": {"inject": "yes"}}}));
    lookup.put(json!({"kind": "Namespace", "metadata": {"name": "other"}}));
    let wa = WebhookAdmission::new(lookup.clone(), Arc::new(NoServices));
    let mut h = hook("sel.example.com", "https://127.0.0.1:1/", "x");
    h["namespaceSelector"] = json!({"matchLabels": {"inject": "yes"}});
    h["objectSelector"] = json!({"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]});
    wa.apply(&json!({"kind": "MutatingWebhookConfiguration", "metadata": {"name": "c"}, "webhooks": [h]})).unwrap();
    let w = &wa.mutating_webhooks()[0];
    let pod = |ns: &str, labels: Value| {
        let mut r = request(Operation::Create, "", "pods", "", ns);
        r.object = Some(json!({"metadata": {"name": "p", "labels": labels}}));
        r
    };
    assert!(webhook_matches(w, &pod("team", json!({})), lookup.as_ref()).unwrap());
    assert!(!webhook_matches(w, &pod("other", json!({})), lookup.as_ref()).unwrap());
    assert!(!webhook_matches(w, &pod("team", json!({"skip": "1"})), lookup.as_ref()).unwrap());
    assert!(!webhook_matches(w, &pod("missing", json!({})), lookup.as_ref()).unwrap());
    wa.remove("MutatingWebhookConfiguration", "c");
    assert!(wa.mutating_webhooks().is_empty());
    assert!(wa.apply(&json!({"kind": "Pod"})).is_err());
}

/// A CA and a serving certificate for 127.0.0.1, as PEM.
fn tls_material() -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "webhook-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::from_ca_cert_pem(&ca_cert.pem(), KeyPair::from_pem(&ca_key.serialize_pem()).unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

type Calls = Arc<Mutex<HashMap<String, usize>>>;

fn respond(path: &str, review: &Value) -> Value {
    let req = &review["request"];
    let uid = req["uid"].clone();
    let obj = &req["object"];
    let patch = |ops: Value| base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&ops).unwrap());
    let response = match path {
        "/inject" => {
            if obj["spec"]["initContainers"].is_array() {
                json!({"uid": uid, "allowed": true})
            } else {
                json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                    "patch": patch(json!([{"op": "add", "path": "/spec/initContainers", "value": [{"name": "injected", "image": "busybox"}]}])),
                    "warnings": ["init container injected"]})
            }
        }
        "/label" => {
            if obj["metadata"]["labels"]["labelled"].is_string() {
                json!({"uid": uid, "allowed": true})
            } else {
                json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                    "patch": patch(json!([{"op": "add", "path": "/metadata/labels/labelled", "value": "yes"}]))})
            }
        }
        "/deny" => {
            if obj["metadata"]["labels"]["deny"] == "true" {
                json!({"uid": uid, "allowed": false, "status": {"code": 403, "message": "pods labelled deny are not welcome"}})
            } else {
                json!({"uid": uid, "allowed": true})
            }
        }
        "/baduid" => json!({"uid": "wrong", "allowed": true}),
        _ => json!({"uid": uid, "allowed": true}),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Starts an HTTPS webhook server on a free loopback port; returns its port, CA and call counts.
async fn start_server() -> (u16, String, Calls) {
    let (ca, cert, key) = tls_material();
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert.as_bytes()).map(|c| c.unwrap()).collect();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let calls: Calls = Arc::default();
    let counter = calls.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let counter = counter.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        *counter.lock().unwrap().entry(path.clone()).or_default() += 1;
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let review: Value = serde_json::from_slice(&body).unwrap_or_default();
                        if path == "/slow" {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        }
                        let out = serde_json::to_vec(&respond(&path, &review)).unwrap_or_default();
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(out))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), svc).await;
            });
        }
    });
    (port, ca, calls)
}

fn pod_request(labels: Value) -> AdmissionRequest {
    let mut r = AdmissionRequest::new(Operation::Create, "", "v1", "pods", "Pod");
    r.namespace = "default".into();
    r.name = "web".into();
    r.user = UserInfo::new("jane", ["system:authenticated"]);
    r.object = Some(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": labels},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}}));
    r
}

fn chain(wa: &Arc<WebhookAdmission>) -> AdmissionChain {
    AdmissionChain::new().mutating(wa.mutating_plugin()).validating(wa.validating_plugin())
}

#[tokio::test]
async fn a_mutating_webhook_injects_an_init_container_over_https() {
    let (port, ca, calls) = start_server().await;
    let wa = Arc::new(WebhookAdmission::new(Arc::new(MemoryLookup::new()), Arc::new(NoServices)));
    let url = |p: &str| format!("https://127.0.0.1:{port}{p}");
    let mut inject = hook("inject.example.com", &url("/inject"), &ca);
    inject["reinvocationPolicy"] = "IfNeeded".into();
    wa.apply(&json!({"kind": "MutatingWebhookConfiguration", "metadata": {"name": "a-inject"}, "webhooks": [inject]}))
        .unwrap();
    wa.apply(&json!({"kind": "MutatingWebhookConfiguration", "metadata": {"name": "b-label"},
        "webhooks": [hook("label.example.com", &url("/label"), &ca)]}))
        .unwrap();
    wa.apply(&json!({"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "deny"},
        "webhooks": [hook("deny.example.com", &url("/deny"), &ca)]}))
        .unwrap();

    let mut req = pod_request(json!({}));
    let fb = chain(&wa).run(&mut req).await.unwrap();
    let pod = req.object.as_ref().unwrap();
    assert_eq!(pod["spec"]["initContainers"], json!([{"name": "injected", "image": "busybox"}]));
    assert_eq!(pod["metadata"]["labels"]["labelled"], "yes");
    assert_eq!(fb.warnings, vec!["init container injected"]);
    {
        let c = calls.lock().unwrap();
        // The label webhook changed the object after inject ran, so inject ran again.
        assert_eq!((c["/inject"], c["/label"], c["/deny"]), (2, 1, 1));
    }

    let mut req = pod_request(json!({"deny": "true"}));
    let e = chain(&wa).run(&mut req).await.unwrap_err();
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        r#"admission webhook "deny.example.com" denied the request: pods labelled deny are not welcome"#
    );
}

#[tokio::test]
async fn failure_policy_timeouts_uids_and_dry_run() {
    let (port, ca, _calls) = start_server().await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = |p: &str| format!("https://127.0.0.1:{port}{p}");
    let cases: Vec<(Value, Option<&str>)> = vec![
        (
            {
                let mut h = hook("down.example.com", &format!("https://127.0.0.1:{dead}/"), &ca);
                h["failurePolicy"] = "Ignore".into();
                h
            },
            None,
        ),
        (
            hook("down.example.com", &format!("https://127.0.0.1:{dead}/"), &ca),
            Some("failed calling webhook \"down.example.com\": failed to call webhook: Post"),
        ),
        (
            {
                let mut h = hook("slow.example.com", &url("/slow"), &ca);
                h["timeoutSeconds"] = 1.into();
                h
            },
            Some("context deadline exceeded"),
        ),
        (hook("uid.example.com", &url("/baduid"), &ca), Some("expected response.uid=")),
        (
            hook("untrusted.example.com", &url("/"), &tls_material().0),
            Some("failed calling webhook \"untrusted.example.com\""),
        ),
    ];
    for (h, want) in cases {
        let wa = Arc::new(WebhookAdmission::new(Arc::new(MemoryLookup::new()), Arc::new(NoServices)));
        wa.apply(&json!({"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "c"}, "webhooks": [h]}))
            .unwrap();
        let result = chain(&wa).run(&mut pod_request(json!({}))).await;
        match want {
            None => assert!(result.is_ok(), "{result:?}"),
            Some(text) => {
                let e = result.unwrap_err();
                assert_eq!(e.code, 500);
                assert!(e.message.contains(text), "{}", e.message);
            }
        }
    }
    let wa = Arc::new(WebhookAdmission::new(Arc::new(MemoryLookup::new()), Arc::new(NoServices)));
    let mut h = hook("effects.example.com", &url("/"), &ca);
    h["sideEffects"] = "Unknown".into();
    wa.apply(&json!({"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "c"}, "webhooks": [h]})).unwrap();
    let mut req = pod_request(json!({}));
    req.dry_run = true;
    let e = chain(&wa).run(&mut req).await.unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, r#"admission webhook "effects.example.com" does not support dry run"#)
    );
    req.dry_run = false;
    assert!(chain(&wa).run(&mut req).await.is_ok());
}

#[test]
fn denials_default_to_400_and_explain_themselves() {
    let e = denied("w", &json!({}));
    assert_eq!((e.code, e.message.as_str()), (400, r#"admission webhook "w" denied the request without explanation"#));
    let e = denied("w", &json!({"code": 200, "reason": "NotAllowed"}));
    assert_eq!((e.code, e.message.as_str()), (400, r#"admission webhook "w" denied the request: NotAllowed"#));
    assert_eq!(split_host_port("[::1]:8443"), ("::1".to_string(), 8443));
    assert_eq!(split_host_port("example.com"), ("example.com".to_string(), 443));
}

#[test]
fn match_conditions_skip_a_webhook_or_fail_per_failure_policy() {
    let config = |policy: &str, expr: &str| {
        json!({"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "c"}, "webhooks": [{
            "name": "w.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": policy, "clientConfig": {"url": "https://127.0.0.1:1/"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "matchConditions": [{"name": "cond", "expression": expr}],
        }]})
    };
    let admission = WebhookAdmission::new(Arc::new(MemoryLookup::new()), Arc::new(NoServices));
    let mut req = request(Operation::Create, "", "pods", "", "ns");
    req.object = Some(json!({"metadata": {"name": "p", "labels": {"skip": "yes"}}}));
    admission.apply(&config("Fail", "!has(object.metadata.labels.skip)")).unwrap();
    let w = &admission.validating_webhooks()[0];
    assert_eq!(w.match_conditions.len(), 1);
    assert_eq!(conditions_match(w, &req), Ok(false));
    admission.apply(&config("Fail", "object.spec.missing")).unwrap();
    let e = conditions_match(&admission.validating_webhooks()[0], &req).unwrap_err();
    assert_eq!(e.code, 500);
    assert!(e.message.contains("failed to evaluate match conditions"), "{}", e.message);
    admission.apply(&config("Ignore", "object.spec.missing")).unwrap();
    assert_eq!(conditions_match(&admission.validating_webhooks()[0], &req), Ok(false));
}
