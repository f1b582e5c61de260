//! The kubelet's HTTPS endpoint (port 10250): container logs and command execution, called by
//! the API server for `pods/log` and `pods/exec`.
//!
//! Paths follow the kubelet API:
//! - `GET /healthz` → `ok`;
//! - `GET /containerLogs/{namespace}/{pod}/{container}` with `follow`, `tailLines`,
//!   `sinceSeconds`, `sinceTime`, `timestamps`, `previous`, `limitBytes` (PodLogOptions);
//! - `POST /run/{namespace}/{pod}/{container}?cmd=...` runs a command (split on whitespace)
//!   and returns its combined output (no streaming, no stdin; exit code in the
//!   `X-Exit-Code` header);
//! - `GET|POST /exec/{namespace}/{pod}/{container}?command=..&stdin=..&stdout=..&stderr=..&tty=..`
//!   — streaming exec: the kubelet asks the runtime for an exec session (CRI `Exec`) and relays
//!   the caller's upgrade request (SPDY or WebSocket `v4.channel.k8s.io`) to the runtime's
//!   streaming server, then copies bytes both ways. WebSocket `v5.channel.k8s.io` (kubectl 1.30+),
//!   which containerd 1.6 does not speak, is terminated here and translated to SPDY ([`spdy`]);
//! - `GET|POST /attach/{namespace}/{pod}/{container}?stdin=..&stdout=..&stderr=..&tty=..` — the
//!   same for CRI `Attach`;
//! - `GET|POST /portForward/{namespace}/{pod}` — CRI `PortForward`, SPDY only (a WebSocket
//!   request gets 400, on which kubectl falls back to SPDY).
//! - `GET /stats/summary` — the Summary API (`stats/v1alpha1`) of the node and its pods;
//! - `GET /metrics/resource` — the resource metrics metrics-server scrapes ([`crate::stats`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::jiff::Timestamp;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::Error;
use crate::cri::api;
use crate::logs::{self, LogOptions};
use crate::pod_workers::PodWorkers;

pub mod authz;
pub mod spdy;

/// Settings of the kubelet endpoint.
#[derive(Clone)]
pub struct KubeletServerConfig {
    /// Listen address (`0.0.0.0:10250`).
    pub bind: SocketAddr,
    /// PEM CA bundle that callers' client certificates must chain to (the API server's
    /// kubelet-client certificate). `None` accepts unauthenticated callers — only sensible on
    /// loopback.
    pub client_ca_pem: Option<String>,
    /// PEM serving certificate and key; `None` generates a self-signed one for `sans`.
    pub serving: Option<(String, String)>,
    /// Subject alternative names of a generated serving certificate (node name, node IP).
    pub sans: Vec<String>,
    /// Who may read `/stats/*` and `/metrics/*` ([`authz`]: `nodes/stats`, `nodes/metrics`
    /// of `node_name`, asked with SubjectAccessReviews); `None`: every caller with a valid
    /// certificate.
    pub authorizer: Option<Arc<dyn authz::NodeAuthorizer>>,
    /// This node's name (the object the authorizer is asked about).
    pub node_name: String,
}

impl std::fmt::Debug for KubeletServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletServerConfig")
            .field("bind", &self.bind)
            .field("client_ca", &self.client_ca_pem.is_some())
            .field("sans", &self.sans)
            .field("authorizer", &self.authorizer.is_some())
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// The routes, without TLS (for embedding and tests).
pub fn router(workers: PodWorkers) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/containerLogs/{namespace}/{pod}/{container}", get(container_logs))
        .route("/run/{namespace}/{pod}/{container}", post(run_command))
        .route("/exec/{namespace}/{pod}/{container}", get(exec).post(exec))
        .route("/attach/{namespace}/{pod}/{container}", get(attach).post(attach))
        .route("/portForward/{namespace}/{pod}", get(port_forward).post(port_forward))
        .route("/stats/summary", get(stats_summary))
        .route("/metrics/resource", get(metrics_resource))
        .with_state(Arc::new(workers))
}

fn tls_config(cfg: &KubeletServerConfig) -> Result<rustls::ServerConfig, Error> {
    let bad = |what: &str, e: String| Error::Config(format!("kubelet TLS: {what}: {e}"));
    let (cert_pem, key_pem) = match &cfg.serving {
        Some(pair) => pair.clone(),
        None => {
            let ck =
                rcgen::generate_simple_self_signed(cfg.sans.clone()).map_err(|e| bad("self-signing", e.to_string()))?;
            (ck.cert.pem(), ck.signing_key.serialize_pem())
        }
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| bad("serving certificate", e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| bad("serving key", e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("protocol versions", e.to_string()))?;
    let builder = match &cfg.client_ca_pem {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots
                    .add(c.map_err(|e| bad("client CA", e.to_string()))?)
                    .map_err(|e| bad("client CA", e.to_string()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| bad("client verifier", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut tls = builder.with_single_cert(certs, key).map_err(|e| bad("serving certificate", e.to_string()))?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

/// Serves the kubelet endpoint over HTTPS until the future is dropped.
///
/// # Errors
/// [`Error::Config`] for unusable certificates; [`Error::Io`] when the address cannot be bound.
pub async fn serve(cfg: KubeletServerConfig, workers: PodWorkers) -> Result<(), Error> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls_config(&cfg)?));
    let listener =
        tokio::net::TcpListener::bind(cfg.bind).await.map_err(|e| Error::io(format!("binding {}", cfg.bind), e))?;
    tracing::info!(addr = %cfg.bind, "kubelet endpoint listening");
    let mut app = router(workers);
    if let Some(authorizer) = &cfg.authorizer {
        let state = authz::Authz::new(authorizer.clone(), cfg.node_name.clone());
        app = app.layer(axum::middleware::from_fn_with_state(state, authz::authorize));
    }
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet endpoint accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                _ => {
                    tracing::debug!(%peer, "kubelet endpoint TLS handshake failed");
                    return;
                }
            };
            let caller = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| authz::Caller::from_certificate(c));
            let app = match caller {
                Some(caller) => app.layer(axum::Extension(caller)),
                None => app,
            };
            let svc = hyper_util::service::TowerToHyperService::new(app);
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc).await {
                tracing::debug!(%peer, error = %e, "kubelet endpoint connection ended with an error");
            }
        });
    }
}

/// Collects the node's usage now ([`crate::stats::collect`]).
async fn collect_stats(workers: &PodWorkers) -> crate::stats::Collected {
    let cfg = workers.config();
    let layout = crate::stats::CgroupLayout::detect(&cfg.cgroup_root);
    crate::stats::collect(workers.runtime(), layout, cfg.node_name.clone()).await
}

async fn stats_summary(State(workers): State<Arc<PodWorkers>>) -> Response {
    let collected = collect_stats(&workers).await;
    match serde_json::to_vec(&collected.summary) {
        Ok(body) => ([("Content-Type", "application/json")], body).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn metrics_resource(State(workers): State<Arc<PodWorkers>>) -> Response {
    let collected = collect_stats(&workers).await;
    let text = crate::stats::resource_metrics::render(&collected.summary, collected.errors);
    ([("Content-Type", "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

fn error(code: StatusCode, message: String) -> Response {
    (code, message).into_response()
}

fn truthy(v: Option<&String>) -> bool {
    v.is_some_and(|s| s == "true" || s == "1")
}

/// Parses PodLogOptions query parameters.
pub fn log_options(q: &HashMap<String, String>, now: Timestamp) -> Result<LogOptions, String> {
    let num = |k: &str| -> Result<Option<i64>, String> {
        q.get(k).map(|v| v.parse::<i64>().map_err(|_| format!("invalid {k} {v:?}"))).transpose()
    };
    let since = match (num("sinceSeconds")?, q.get("sinceTime")) {
        (Some(s), _) => Some(now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(s.max(0))).unwrap_or(now)),
        (None, Some(t)) => Some(t.parse::<Timestamp>().map_err(|_| format!("invalid sinceTime {t:?}"))?),
        (None, None) => None,
    };
    Ok(LogOptions {
        tail_lines: num("tailLines")?.map(|n| n.max(0) as usize),
        since,
        timestamps: truthy(q.get("timestamps")),
        limit_bytes: num("limitBytes")?.map(|n| n.max(0) as usize),
    })
}

async fn container_logs(
    State(workers): State<Arc<PodWorkers>>,
    Path((namespace, pod_name, container)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(pod) = workers.find_pod(&namespace, &pod_name) else {
        return error(StatusCode::NOT_FOUND, format!("pod {namespace}/{pod_name} is not on this node"));
    };
    let opts = match log_options(&q, Timestamp::now()) {
        Ok(o) => o,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let previous = truthy(q.get("previous"));
    let path = match workers.container_log_file(&pod, &container, previous).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            let which = if previous { "previous terminated container" } else { "container" };
            return error(StatusCode::BAD_REQUEST, format!("{which} \"{container}\" in pod \"{pod_name}\" not found"));
        }
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let initial = match logs::read_log_file(&path, &opts) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    if !truthy(q.get("follow")) || previous {
        return ([("Content-Type", "text/plain")], initial).into_response();
    }
    // Follow: send what is there, then new lines until the container stops.
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let timestamps = opts.timestamps;
    let stream = futures::stream::unfold(
        (Some(initial), offset, String::new(), workers, path, uid, container, 0u32),
        move |(first, mut offset, mut partial, workers, path, uid, container, mut idle)| async move {
            if let Some(first) = first {
                return Some((
                    Ok::<_, Infallible>(bytes::Bytes::from(first)),
                    (None, offset, partial, workers, path, uid, container, idle),
                ));
            }
            loop {
                let mut chunk = Vec::new();
                if let Ok(mut f) = tokio::fs::File::open(&path).await
                    && f.seek(std::io::SeekFrom::Start(offset)).await.is_ok()
                {
                    let _ = f.read_to_end(&mut chunk).await;
                }
                if !chunk.is_empty() {
                    offset += chunk.len() as u64;
                    partial.push_str(&String::from_utf8_lossy(&chunk));
                    let mut out = Vec::new();
                    while let Some(nl) = partial.find('\n') {
                        let line: String = partial.drain(..=nl).collect();
                        if let Some(l) = logs::parse_line(line.trim_end_matches('\n')) {
                            if timestamps {
                                out.extend_from_slice(l.timestamp_text.as_bytes());
                                out.push(b' ');
                            }
                            out.extend_from_slice(l.content.as_bytes());
                            if l.full {
                                out.push(b'\n');
                            }
                        }
                    }
                    if !out.is_empty() {
                        return Some((
                            Ok(bytes::Bytes::from(out)),
                            (None, offset, partial, workers, path, uid, container, 0),
                        ));
                    }
                }
                // Stop once the container no longer runs (checked every ~2 s of silence).
                idle += 1;
                if idle % 10 == 0 {
                    let running = workers.running_container_id(&uid, &container).await.ok().flatten().is_some();
                    if !running {
                        return None;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    );
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert("Content-Type", HeaderValue::from_static("text/plain"));
    resp
}

async fn run_command(
    State(workers): State<Arc<PodWorkers>>,
    Path((namespace, pod_name, container)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let Some(pod) = workers.find_pod(&namespace, &pod_name) else {
        return error(StatusCode::NOT_FOUND, format!("pod {namespace}/{pod_name} is not on this node"));
    };
    let cmd: Vec<String> = q.get("cmd").map(|c| c.split_whitespace().map(str::to_string).collect()).unwrap_or_default();
    if cmd.is_empty() {
        return error(StatusCode::BAD_REQUEST, "missing cmd".into());
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let id = match workers.running_container_id(&uid, &container).await {
        Ok(Some(id)) => id,
        Ok(None) => return error(StatusCode::BAD_REQUEST, format!("container {container} is not running")),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match workers.runtime().exec_sync(&id, cmd, Duration::from_secs(300)).await {
        Ok(api::ExecSyncResponse { stdout, stderr, exit_code }) => {
            let mut body = stdout;
            body.extend_from_slice(&stderr);
            let mut resp = ([("Content-Type", "text/plain")], body).into_response();
            if let Ok(v) = HeaderValue::from_str(&exit_code.to_string()) {
                resp.headers_mut().insert("X-Exit-Code", v);
            }
            resp
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// Decodes an `application/x-www-form-urlencoded` query into pairs, keeping repeated keys.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = |c: u8| (c as char).to_digit(16);
                    match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push((h * 16 + l) as u8);
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(kv), String::new()),
        })
        .collect()
}

/// Headers relayed from the caller's upgrade request to the runtime's streaming server.
const RELAYED_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "x-stream-protocol-version",
];

/// The WebSocket remotecommand protocol the kubelet translates to SPDY itself.
const WEBSOCKET_V5: &str = "v5.channel.k8s.io";

/// The kind of streaming session a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamKind {
    Exec,
    Attach,
    PortForward,
}

async fn exec(
    State(workers): State<Arc<PodWorkers>>,
    Path((namespace, pod_name, container)): Path<(String, String, String)>,
    req: axum::extract::Request,
) -> Response {
    streaming(&workers, StreamKind::Exec, &namespace, &pod_name, &container, req).await
}

async fn attach(
    State(workers): State<Arc<PodWorkers>>,
    Path((namespace, pod_name, container)): Path<(String, String, String)>,
    req: axum::extract::Request,
) -> Response {
    streaming(&workers, StreamKind::Attach, &namespace, &pod_name, &container, req).await
}

async fn port_forward(
    State(workers): State<Arc<PodWorkers>>,
    Path((namespace, pod_name)): Path<(String, String)>,
    req: axum::extract::Request,
) -> Response {
    streaming(&workers, StreamKind::PortForward, &namespace, &pod_name, "", req).await
}

fn header_list(headers: &axum::http::HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Asks the runtime for a streaming session and connects the caller to it: a WebSocket
/// `v5.channel.k8s.io` exec/attach is translated to SPDY ([`spdy::bridge`]); anything else
/// (SPDY, WebSocket v4) is relayed byte for byte. WebSocket port forwarding is refused with
/// 400, which makes kubectl fall back to SPDY.
async fn streaming(
    workers: &PodWorkers,
    kind: StreamKind,
    namespace: &str,
    pod_name: &str,
    container: &str,
    mut req: axum::extract::Request,
) -> Response {
    let Some(pod) = workers.find_pod(namespace, pod_name) else {
        return error(StatusCode::NOT_FOUND, format!("pod {namespace}/{pod_name} is not on this node"));
    };
    let websocket = header_list(req.headers(), "upgrade").iter().any(|u| u.eq_ignore_ascii_case("websocket"));
    if websocket && kind == StreamKind::PortForward {
        return error(StatusCode::BAD_REQUEST, "port forwarding over WebSocket is not supported; use SPDY".into());
    }
    let params = parse_query(req.uri().query().unwrap_or_default());
    let flag = |k: &str| params.iter().any(|(pk, v)| pk == k && (v == "true" || v == "1"));
    let opts =
        spdy::StreamOptions { stdin: flag("stdin"), stdout: flag("stdout"), stderr: flag("stderr"), tty: flag("tty") };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let url = if kind == StreamKind::PortForward {
        let sandbox = match workers.ready_sandbox_id(&uid).await {
            Ok(Some(id)) => id,
            Ok(None) => return error(StatusCode::BAD_REQUEST, format!("pod {pod_name} has no running sandbox")),
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        let ports: Vec<i32> = params.iter().filter(|(k, _)| k == "port").filter_map(|(_, v)| v.parse().ok()).collect();
        workers.runtime().port_forward(&sandbox, ports).await
    } else {
        let cmd: Vec<String> = params.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect();
        if kind == StreamKind::Exec && cmd.is_empty() {
            return error(StatusCode::BAD_REQUEST, "missing command".into());
        }
        let id = match workers.running_container_id(&uid, container).await {
            Ok(Some(id)) => id,
            Ok(None) => return error(StatusCode::BAD_REQUEST, format!("container {container} is not running")),
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        if kind == StreamKind::Exec {
            let (tty, stdin, stdout, stderr) = (opts.tty, opts.stdin, opts.stdout, opts.stderr);
            workers.runtime().exec(api::ExecRequest { container_id: id, cmd, tty, stdin, stdout, stderr }).await
        } else {
            let (tty, stdin, stdout, stderr) = (opts.tty, opts.stdin, opts.stdout, opts.stderr);
            workers.runtime().attach(api::AttachRequest { container_id: id, tty, stdin, stdout, stderr }).await
        }
    };
    let url = match url {
        Ok(u) => u,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>() else {
        return error(StatusCode::BAD_REQUEST, "streaming needs a connection upgrade (WebSocket or SPDY)".into());
    };
    if websocket && header_list(req.headers(), "sec-websocket-protocol").iter().any(|p| p == WEBSOCKET_V5) {
        let Some(key) = req.headers().get("sec-websocket-key").map(|k| k.as_bytes().to_vec()) else {
            return error(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key".into());
        };
        return translate_websocket_v5(key, on_upgrade, &url, opts).await;
    }
    let mut headers = Vec::new();
    for name in RELAYED_HEADERS {
        for v in req.headers().get_all(*name) {
            if let Ok(v) = v.to_str() {
                headers.push((name.to_string(), v.to_string()));
            }
        }
    }
    let method = req.method().as_str().to_string();
    let (status, head, leftover, mut upstream) = match runtime_upgrade(&url, &method, &headers).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    let mut resp = Response::builder().status(status);
    for (k, v) in &head {
        resp = resp.header(k.as_str(), v.as_str());
    }
    if status != 101 {
        let mut body = leftover;
        let _ = upstream.read_to_end(&mut body).await;
        return resp.body(Body::from(body)).unwrap_or_else(|e| error(StatusCode::BAD_GATEWAY, e.to_string()));
    }
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let mut downstream = TokioIo::new(upgraded);
        use tokio::io::AsyncWriteExt;
        if !leftover.is_empty() && downstream.write_all(&leftover).await.is_err() {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await;
    });
    resp.body(Body::empty()).unwrap_or_else(|e| error(StatusCode::BAD_GATEWAY, e.to_string()))
}

/// The answer of the runtime's streaming server to an upgrade request: status, headers, bytes
/// already read past the head, and the connection.
type RuntimeAnswer = (u16, Vec<(String, String)>, Vec<u8>, tokio::net::TcpStream);

/// Sends an upgrade request to the runtime's streaming `url` (`http://127.0.0.1:PORT/exec/TOKEN`)
/// and reads the response head.
async fn runtime_upgrade(url: &str, method: &str, headers: &[(String, String)]) -> Result<RuntimeAnswer, Response> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(error(StatusCode::INTERNAL_SERVER_ERROR, format!("unsupported streaming URL {url}")));
    };
    let (authority, path) =
        rest.split_once('/').map(|(a, p)| (a.to_string(), format!("/{p}"))).unwrap_or((rest.to_string(), "/".into()));
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\n");
    for (name, v) in headers {
        head.push_str(&format!("{name}: {v}\r\n"));
    }
    head.push_str("Content-Length: 0\r\n\r\n");
    let bad_gateway = |e: String| error(StatusCode::BAD_GATEWAY, format!("the runtime's streaming server: {e}"));
    let mut upstream = tokio::net::TcpStream::connect(&authority).await.map_err(|e| bad_gateway(e.to_string()))?;
    use tokio::io::AsyncWriteExt;
    upstream.write_all(head.as_bytes()).await.map_err(|e| bad_gateway(e.to_string()))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        match upstream.read(&mut chunk).await {
            Ok(0) => return Err(bad_gateway("connection closed".into())),
            Err(e) => return Err(bad_gateway(e.to_string())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > 64 * 1024 {
            return Err(bad_gateway("oversized response head".into()));
        }
    };
    let head_text = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head_text.split("\r\n");
    let status =
        lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse::<u16>().ok()).unwrap_or(502);
    let head =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    Ok((status, head, buf[head_end..].to_vec(), upstream))
}

/// Accepts the caller's WebSocket `v5.channel.k8s.io` session and bridges it to an SPDY session
/// with the runtime.
async fn translate_websocket_v5(
    key: Vec<u8>,
    on_upgrade: hyper::upgrade::OnUpgrade,
    url: &str,
    opts: spdy::StreamOptions,
) -> Response {
    let headers = [
        ("Connection".to_string(), "Upgrade".to_string()),
        ("Upgrade".to_string(), "SPDY/3.1".to_string()),
        ("X-Stream-Protocol-Version".to_string(), "v4.channel.k8s.io".to_string()),
    ];
    let (status, _, leftover, upstream) = match runtime_upgrade(url, "POST", &headers).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    if status != 101 {
        return error(StatusCode::BAD_GATEWAY, format!("the runtime refused the SPDY upgrade ({status})"));
    }
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            None,
        )
        .await;
        let (read, write) = upstream.into_split();
        spdy::bridge(ws, std::io::Cursor::new(leftover).chain(read), write, opts).await;
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Accept", tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key))
        .header("Sec-WebSocket-Protocol", WEBSOCKET_V5)
        .body(Body::empty())
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn pod_log_options_parse_from_the_query() {
        let now = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let o = log_options(&q(&[("tailLines", "5"), ("timestamps", "true"), ("sinceSeconds", "10")]), now)
            .unwrap_or_default();
        assert_eq!(o.tail_lines, Some(5));
        assert!(o.timestamps);
        assert_eq!(o.since, Timestamp::from_second(990).ok());
        let t = log_options(&q(&[("sinceTime", "2024-01-01T00:00:00Z")]), now).unwrap_or_default();
        assert!(t.since.is_some());
        assert!(log_options(&q(&[("tailLines", "x")]), now).is_err());
        assert!(log_options(&q(&[("sinceTime", "yesterday")]), now).is_err());
    }

    #[test]
    fn exec_queries_keep_repeated_commands_and_decode_escapes() {
        let p = parse_query("command=sh&command=-c&command=echo+hi%21&stdout=true&tty");
        let cmds: Vec<&str> = p.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.as_str()).collect();
        assert_eq!(cmds, vec!["sh", "-c", "echo hi!"]);
        assert!(p.contains(&("tty".to_string(), String::new())));
        assert_eq!(parse_query("a=%zz&b=100%"), vec![("a".into(), "%zz".into()), ("b".into(), "100%".into())]);
    }
}
