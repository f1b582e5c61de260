//! Requests rejected before or while their body is read get the same `metav1.Status` over
//! HTTP/2 as over HTTP/1.1: 413 past the body limit, 415 for an unsupported content type, 400
//! for a malformed body, 429 from the max-in-flight filter. kubectl and client-go speak HTTP/2,
//! where a body left unread must not reset the stream before the Status is sent. The requests
//! are made with curl, which (unlike hyper's client) reports a stream reset while it is still
//! uploading as an error: the strictest of the usual clients.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::Value;
use skiff_apiserver::{ApiServer, Config};
use skiff_store::Backend;
use skiff_store::sqlite::SqliteBackend;

type Body = BoxBody<Bytes, Infallible>;
type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Body>;

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Http1,
    Http2,
}

async fn start(customize: impl FnOnce(&mut Config)) -> (tempfile::TempDir, ApiServer) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let opts = skiff_store::Options { compaction_interval: None, progress_interval: Duration::from_millis(200) };
    let store: Arc<dyn Backend> = Arc::new(SqliteBackend::open(&dir.path().join("state.db"), opts).unwrap());
    let mut config = Config::new(dir.path());
    config.bind_address = "127.0.0.1".parse().unwrap();
    config.port = 0;
    customize(&mut config);
    let server = ApiServer::start(config, store).await.unwrap();
    server.wait_ready().await;
    (dir, server)
}

/// A raw hyper client of `protocol` that presents the admin client certificate.
async fn client(server: &ApiServer, protocol: Protocol) -> HttpsClient {
    use kube::client::ConfigExt as _;
    let kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    let connector = config.rustls_https_connector().unwrap();
    let mut builder = Client::builder(hyper_util::rt::TokioExecutor::new());
    if let Protocol::Http2 = protocol {
        builder.http2_only(true);
    }
    builder.build(connector)
}

/// POSTs `body` to the ConfigMaps with curl over `protocol`, as the admin (client certificate)
/// or as nobody; the answer's code and its body as JSON.
fn curl(
    server_dir: &Path,
    server: &ApiServer,
    protocol: Protocol,
    admin: bool,
    content_type: &str,
    body: &[u8],
) -> (u16, Value) {
    let scratch = tempfile::tempdir().unwrap();
    let body_file = scratch.path().join("body");
    std::fs::write(&body_file, body).unwrap();
    let tls = server_dir.join("tls");
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "-X", "POST", "-o", "-", "-w", "\n%{http_code}"])
        .arg(match protocol {
            Protocol::Http1 => "--http1.1",
            Protocol::Http2 => "--http2",
        })
        .arg("--cacert")
        .arg(tls.join("ca.crt"))
        .args(["-H", &format!("Content-Type: {content_type}"), "--data-binary"])
        .arg(format!("@{}", body_file.display()));
    if admin {
        cmd.arg("--cert").arg(tls.join("admin.crt")).arg("--key").arg(tls.join("admin.key"));
    }
    let out = cmd
        .arg(format!("{}{CONFIGMAPS}", server.url()))
        .output()
        .expect("running curl (scripts/install-deps installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{protocol:?}: curl failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    let (json, code) = stdout.rsplit_once('\n').unwrap_or_else(|| panic!("{protocol:?}: no status line: {stdout}"));
    let status = serde_json::from_str(json).unwrap_or_else(|e| panic!("{protocol:?}: not JSON ({e}): {json}"));
    (code.trim().parse().unwrap(), status)
}

fn assert_status(protocol: Protocol, (code, status): (u16, Value), want_code: u16, want_reason: &str) {
    assert_eq!(code, want_code, "{protocol:?}: {status}");
    assert_eq!(status["kind"], "Status", "{protocol:?}: {status}");
    assert_eq!(status["code"], want_code, "{protocol:?}: {status}");
    assert_eq!(status["reason"], want_reason, "{protocol:?}: {status}");
}

/// A ConfigMap whose JSON is `size` bytes or a little more.
fn config_map_of(size: usize) -> Vec<u8> {
    let data = "x".repeat(size);
    serde_json::to_vec(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big"}, "data": {"a": data}}))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_unsupported_and_malformed_bodies_get_their_status_over_both_protocols() {
    let (dir, server) = start(|_| {}).await;
    for protocol in [Protocol::Http1, Protocol::Http2] {
        let big = curl(dir.path(), &server, protocol, true, "application/json", &config_map_of(4 << 20));
        assert!(big.1["message"].as_str().unwrap().contains("limit is 3145728"), "{protocol:?}: {}", big.1);
        assert_status(protocol, big, 413, "RequestEntityTooLarge");

        let unsupported = curl(dir.path(), &server, protocol, true, "text/plain", &config_map_of(2 << 20));
        assert_status(protocol, unsupported, 415, "UnsupportedMediaType");

        let malformed =
            curl(dir.path(), &server, protocol, true, "application/json", b"{\"apiVersion\": \"v1\", \"kind\":");
        assert_status(protocol, malformed, 400, "BadRequest");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_beyond_the_mutating_limit_gets_429_over_both_protocols() {
    let (dir, server) = start(|c| c.max_mutating_requests_inflight = 1).await;
    for protocol in [Protocol::Http1, Protocol::Http2] {
        // The admin's create holds the one mutating seat while its body is still coming.
        let admin = client(&server, protocol).await;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
        tx.send(Ok(Frame::data(Bytes::from_static(b"{\"apiVersion\":\"v1\",")))).await.unwrap();
        let held_body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed();
        let held = tokio::spawn({
            let url = format!("{}{CONFIGMAPS}", server.url());
            async move {
                let request =
                    hyper::Request::post(url).header("content-type", "application/json").body(held_body).unwrap();
                admin.request(request).await.map(|r| r.status().as_u16())
            }
        });
        // Anyone else (no client certificate: not system:masters, so not exempt) is throttled
        // once the seat is taken, before its body is read; wait for that with a deadline.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let throttled = loop {
            let body = config_map_of(2 << 20);
            let answer =
                tokio::task::block_in_place(|| curl(dir.path(), &server, protocol, false, "application/json", &body));
            if answer.0 == 429 {
                break answer;
            }
            assert!(tokio::time::Instant::now() < deadline, "{protocol:?}: never throttled: {}", answer.1);
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_status(protocol, throttled, 429, "TooManyRequests");
        tx.send(Ok(Frame::data(Bytes::from_static(
            b"\"kind\":\"ConfigMap\",\"metadata\":{\"generateName\":\"held-\"}}",
        ))))
        .await
        .unwrap();
        drop(tx);
        assert_eq!(held.await.unwrap().unwrap(), 201, "{protocol:?}: the held create completes");
    }
}
