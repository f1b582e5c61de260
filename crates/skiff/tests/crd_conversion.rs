//! End-to-end: a two-version CRD whose versions name one field differently
//! (`spec.cronSpec` in v1, `spec.schedule` in v2), converted by a webhook the test runs
//! (HTTPS, its certificate signed by the cluster CA, ConversionReview v1), read and written at
//! both versions with the real `kubectl`, across a change of storage version; a webhook that is
//! down fails that resource only, with the webhook's error; a broken conversion config is
//! refused at CRD create.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use base64::Engine;
use common::Server;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use skiff_apiserver::pki::{CertPair, sign_leaf};

/// Converts one CronTab to `desired`: `cronSpec` (v1) ⇄ `schedule` (v2).
fn convert(obj: &serde_json::Value, desired: &str) -> serde_json::Value {
    let mut out = obj.clone();
    out["apiVersion"] = serde_json::json!(desired);
    let spec = out["spec"].as_object_mut().expect("a spec");
    let (from, to) = if desired.ends_with("/v2") { ("cronSpec", "schedule") } else { ("schedule", "cronSpec") };
    if let Some(v) = spec.remove(from) {
        spec.insert(to.to_string(), v);
    }
    out
}

/// The conversion webhook on a free loopback port, one review per connection, counting the
/// reviews it answered, until `stop` is set (the next connection then closes the listener).
fn start_webhook(serving: &CertPair, calls: Arc<AtomicUsize>, stop: Arc<AtomicBool>) -> u16 {
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
            if stop.load(Ordering::SeqCst) {
                return;
            }
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
            let req = &review["request"];
            let desired = req["desiredAPIVersion"].as_str().unwrap_or_default();
            let converted: Vec<serde_json::Value> =
                req["objects"].as_array().into_iter().flatten().map(|o| convert(o, desired)).collect();
            let answer = serde_json::json!({
                "apiVersion": review["apiVersion"], "kind": "ConversionReview",
                "response": {"uid": req["uid"], "result": {"status": "Success"}, "convertedObjects": converted},
            })
            .to_string();
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

fn crd(port: u16, ca_bundle: &str, storage: &str) -> String {
    let (v1_storage, v2_storage) = (storage == "v1", storage == "v2");
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
  versions:
  - name: v1
    served: true
    storage: {v1_storage}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              cronSpec: {{type: string}}
              image: {{type: string}}
  - name: v2
    served: true
    storage: {v2_storage}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              schedule: {{type: string}}
              image: {{type: string}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1", "v1beta1"]
      clientConfig:
        url: https://127.0.0.1:{port}/convert
        caBundle: {ca_bundle}
"#
    )
}

#[test]
fn a_two_version_crd_with_a_conversion_webhook_is_served_at_both_versions() {
    let server = Server::start();
    let tls = server.dir.path().join("data/tls");
    let ca = CertPair {
        cert_pem: std::fs::read_to_string(tls.join("ca.crt")).unwrap(),
        key_pem: std::fs::read_to_string(tls.join("ca.key")).unwrap(),
    };
    let serving = sign_leaf(&ca, "converter", &[], &["127.0.0.1".to_string()], true).unwrap();
    let (calls, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let port = start_webhook(&serving, calls.clone(), stop.clone());
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&ca.cert_pem);
    server.ok_stdin(&["apply", "-f", "-"], &crd(port, &ca_bundle, "v1"));
    server.eventually(30, "the CRD to be established at both versions", || {
        let out = server.kubectl(&["get", "crontabs.v2.stable.example.com"]);
        out.status.success().then_some(())
    });

    // Written at the storage version, read at the other through the webhook.
    server.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: old\nspec:\n  cronSpec: \"*/5 * * * *\"\n  image: cron:1\n",
    );
    let before = calls.load(Ordering::SeqCst);
    let v2 = server.json(&["get", "crontabs.v2.stable.example.com", "old"]);
    assert_eq!(v2["apiVersion"], "stable.example.com/v2");
    assert_eq!(v2["spec"]["schedule"], "*/5 * * * *", "{v2}");
    assert!(v2["spec"].get("cronSpec").is_none(), "{v2}");
    assert!(calls.load(Ordering::SeqCst) > before, "the webhook converted the read");
    let v1 = server.json(&["get", "crontabs.v1.stable.example.com", "old"]);
    assert_eq!(v1["spec"]["cronSpec"], "*/5 * * * *", "{v1}");

    // Written at the other version: converted to the storage version and back.
    server.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: stable.example.com/v2\nkind: CronTab\nmetadata:\n  name: new\nspec:\n  schedule: \"0 * * * *\"\n  image: cron:2\n",
    );
    let v1 = server.json(&["get", "crontabs.v1.stable.example.com", "new"]);
    assert_eq!(v1["spec"]["cronSpec"], "0 * * * *", "{v1}");
    assert_eq!(v1["spec"]["image"], "cron:2", "{v1}");
    let list = server.json(&["get", "crontabs.v2.stable.example.com"]);
    let schedules: Vec<&str> =
        list["items"].as_array().unwrap().iter().filter_map(|i| i["spec"]["schedule"].as_str()).collect();
    assert_eq!(schedules, vec!["0 * * * *", "*/5 * * * *"], "{list}");
    let table = server.ok(&["get", "crontabs.v2.stable.example.com"]);
    assert!(table.contains("old") && table.contains("new"), "{table}");

    // The storage version moves to v2: objects stored at v1 are still served at both versions,
    // and an update rewrites them.
    server.ok_stdin(&["apply", "-f", "-"], &crd(port, &ca_bundle, "v2"));
    server.eventually(30, "storedVersions to list both versions", || {
        let c = server.json(&["get", "crd", "crontabs.stable.example.com"]);
        (c["status"]["storedVersions"] == serde_json::json!(["v1", "v2"])).then_some(())
    });
    server.ok(&["label", "crontabs.v2.stable.example.com", "old", "migrated=yes"]);
    let v1 = server.json(&["get", "crontabs.v1.stable.example.com", "old"]);
    assert_eq!(v1["spec"]["cronSpec"], "*/5 * * * *", "{v1}");
    assert_eq!(v1["metadata"]["labels"]["migrated"], "yes", "{v1}");

    // The webhook stops: reads that need it fail with its error; other resources are served.
    stop.store(true, Ordering::SeqCst);
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    let err = server.fails(&["get", "crontabs.v1.stable.example.com", "old"]);
    assert!(err.contains("conversion webhook for stable.example.com/v2, Kind=CronTab failed"), "{err}");
    assert!(err.contains("InternalError"), "{err}");
    server.ok(&["get", "namespaces"]);
    // Objects at the storage version need no webhook.
    let v2 = server.json(&["get", "crontabs.v2.stable.example.com", "old"]);
    assert_eq!(v2["spec"]["schedule"], "*/5 * * * *", "{v2}");
}

#[test]
fn a_crd_with_a_broken_conversion_config_is_refused_at_create() {
    let server = Server::start();
    let bad = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v9"]
      clientConfig:
        url: http://127.0.0.1:1/convert
"#;
    let out = server.apply_stdin(&["create", "-f", "-"], bad);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme"
        ),
        "{err}"
    );
    assert!(err.contains("spec.conversion.conversionReviewVersions: Invalid value: []string{\"v9\"}: must include at least one of v1, v1beta1"), "{err}");
    server.fails(&["get", "crd", "widgets.example.com"]);
}
