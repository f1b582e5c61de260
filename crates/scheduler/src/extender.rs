//! Scheduler extenders (`pkg/scheduler/extender.go`): HTTP services kube-scheduler consults
//! besides its plugins, configured in `KubeSchedulerConfiguration.extenders`
//! (<https://github.com/kubernetes/design-proposals-archive/blob/main/scheduling/scheduler_extender.md>).
//!
//! Each call is a JSON `POST URL_PREFIX/VERB`:
//! - **filter**: [`ExtenderArgs`](`{"Pod": …, "Nodes": NodeList}` or, for a
//!   `nodeCacheCapable` extender, `{"Pod": …, "NodeNames": [...]}`) → `ExtenderFilterResult`
//!   (`Nodes`/`NodeNames` kept, `FailedNodes` and `FailedAndUnresolvableNodes` with reasons,
//!   `Error`). Runs after the profile's Filter plugins, on the nodes they kept.
//! - **prioritize**: the same args → `HostPriorityList` (`[{"Host", "Score"}]`, scores 0-10),
//!   multiplied by `weight` and by 10 (the node score range is 0-100) and added to the plugins'
//!   total. A failing prioritize call is ignored, as upstream.
//! - **bind**: `ExtenderBindingArgs` (`PodName`, `PodNamespace`, `PodUID`, `Node`) →
//!   `ExtenderBindingResult` (`Error`); the extender binds instead of DefaultBinder.
//! - **preempt**: `ExtenderPreemptionArgs` (`Pod`, `NodeNameToVictims` or, cache-capable,
//!   `NodeNameToMetaVictims`) → `ExtenderPreemptionResult` (`NodeNameToMetaVictims`): the
//!   extender may drop candidate nodes or victims of DefaultPreemption.
//!
//! An extender with `managedResources` is called only for pods requesting one of them
//! (`IsInterested`). An `ignorable` extender that fails (unreachable, non-200, timeout, an
//! `Error` in its answer) is skipped; any other's failure fails the attempt with its error, which
//! the pod's FailedScheduling event carries. Calls time out after `httpTimeout` (5 s).
//!
//! The client is hyper's HTTP/1.1 client, one connection per call, over tokio-rustls for
//! `https://` URLs (the TLS stack the rest of skiff uses), configured from `tlsConfig` as
//! client-go's `TLSConfigFor`: a CA from `caData`/`caFile`, a client certificate from
//! `certData`/`certFile` and `keyData`/`keyFile`, `serverName`, and `insecure` (also implied by
//! `enableHTTPS` without a CA).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::{Extender, parse_duration};
use crate::framework::NodeInfo;

/// Timeout of one call when `httpTimeout` is unset or zero (`DefaultExtenderTimeout`).
pub const DEFAULT_EXTENDER_TIMEOUT: Duration = Duration::from_secs(5);
/// Highest score a prioritize call may give (`MaxExtenderPriority`).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;
/// Largest answer read from an extender, bytes.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// What a filter call decided.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FilterResult {
    /// Names of the nodes the pod may go to (a subset of the nodes sent).
    pub feasible: Vec<String>,
    /// Nodes filtered out, with the reason (preemption may help).
    pub failed: HashMap<String, String>,
    /// Nodes filtered out where preemption would not help; these win over `failed`.
    pub failed_and_unresolvable: HashMap<String, String>,
}

/// One node's score from a prioritize call (`HostPriority`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct HostPriority {
    /// Node name.
    pub host: String,
    /// Score, 0-10.
    #[serde(default)]
    pub score: i64,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct FilterAnswer {
    #[serde(default)]
    nodes: Option<NodeListAnswer>,
    #[serde(default)]
    node_names: Option<Vec<String>>,
    #[serde(default)]
    failed_nodes: Option<HashMap<String, String>>,
    #[serde(default)]
    failed_and_unresolvable_nodes: Option<HashMap<String, String>>,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize, Default)]
struct NodeListAnswer {
    #[serde(default)]
    items: Option<Vec<Value>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct ErrorAnswer {
    #[serde(default)]
    error: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct PreemptionAnswer {
    #[serde(default)]
    node_name_to_meta_victims: Option<HashMap<String, Option<MetaVictims>>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct MetaVictims {
    #[serde(default)]
    pods: Option<Vec<MetaPod>>,
    #[serde(default, rename = "NumPDBViolations")]
    num_pdb_violations: i64,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct MetaPod {
    #[serde(default, rename = "UID")]
    uid: String,
}

/// Victims on one node, for the preempt verb: the pods' UIDs and the budget violations.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct NodeVictims {
    /// The victims (whole pods; only their UIDs are sent to a cache-capable extender).
    pub pods: Vec<Arc<Pod>>,
    /// Victims whose eviction violates a PodDisruptionBudget.
    pub num_pdb_violations: i64,
}

/// An HTTP extender (`HTTPExtender`).
pub struct HttpExtender {
    url_prefix: String,
    filter_verb: String,
    preempt_verb: String,
    prioritize_verb: String,
    bind_verb: String,
    weight: i64,
    node_cache_capable: bool,
    managed_resources: HashSet<String>,
    ignorable: bool,
    timeout: Duration,
    tls: Option<Arc<rustls::ClientConfig>>,
    server_name: Option<String>,
}

impl std::fmt::Debug for HttpExtender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpExtender").field("url_prefix", &self.url_prefix).finish_non_exhaustive()
    }
}

/// Builds the extenders of a configuration, in order.
///
/// # Errors
/// As [`HttpExtender::new`], naming the extender's index.
pub fn build_extenders(configs: &[Extender]) -> Result<Vec<Arc<HttpExtender>>, String> {
    configs
        .iter()
        .enumerate()
        .map(|(i, c)| HttpExtender::new(c).map(Arc::new).map_err(|e| format!("extenders[{i}]: {e}")))
        .collect()
}

fn read_pem(data: &str, file: &str, what: &str) -> Result<Option<Vec<u8>>, String> {
    if !data.is_empty() {
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(Some)
            .map_err(|e| format!("tlsConfig.{what}Data: not base64: {e}"));
    }
    if !file.is_empty() {
        return std::fs::read(file).map(Some).map_err(|e| format!("tlsConfig.{what}File: reading {file}: {e}"));
    }
    Ok(None)
}

impl HttpExtender {
    /// An extender from its configuration (`NewHTTPExtender`).
    ///
    /// # Errors
    /// An invalid URL or `httpTimeout`, unreadable or invalid TLS material.
    pub fn new(cfg: &Extender) -> Result<Self, String> {
        let uri: hyper::Uri = cfg.url_prefix.parse().map_err(|e| format!("urlPrefix {:?}: {e}", cfg.url_prefix))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("urlPrefix {:?}: must be an http:// or https:// URL", cfg.url_prefix)),
        };
        let timeout = match cfg.http_timeout.as_deref() {
            Some(t) => parse_duration(t).map_err(|e| format!("httpTimeout: {e}"))?,
            None => Duration::ZERO,
        };
        let timeout = if timeout.is_zero() { DEFAULT_EXTENDER_TIMEOUT } else { timeout };
        let tls_cfg = cfg.tls_config.clone().unwrap_or_default();
        let tls = if https { Some(Arc::new(client_tls(cfg.enable_https, &tls_cfg)?)) } else { None };
        Ok(Self {
            url_prefix: cfg.url_prefix.clone(),
            filter_verb: cfg.filter_verb.clone(),
            preempt_verb: cfg.preempt_verb.clone(),
            prioritize_verb: cfg.prioritize_verb.clone(),
            bind_verb: cfg.bind_verb.clone(),
            weight: cfg.weight,
            node_cache_capable: cfg.node_cache_capable,
            managed_resources: cfg.managed_resources.iter().map(|r| r.name.clone()).collect(),
            ignorable: cfg.ignorable,
            timeout,
            tls,
            server_name: (!tls_cfg.server_name.is_empty()).then(|| tls_cfg.server_name.clone()),
        })
    }

    /// The extender's name: its URL prefix.
    pub fn name(&self) -> &str {
        &self.url_prefix
    }

    /// Whether a failure of this extender is skipped rather than failing the attempt.
    pub fn is_ignorable(&self) -> bool {
        self.ignorable
    }

    /// Whether the extender binds pods.
    pub fn is_binder(&self) -> bool {
        !self.bind_verb.is_empty()
    }

    /// Whether the extender takes part in preemption.
    pub fn supports_preemption(&self) -> bool {
        !self.preempt_verb.is_empty()
    }

    /// Whether the extender filters.
    pub fn is_filter(&self) -> bool {
        !self.filter_verb.is_empty()
    }

    /// Whether the extender scores.
    pub fn is_prioritizer(&self) -> bool {
        !self.prioritize_verb.is_empty()
    }

    /// The prioritize weight.
    pub fn weight(&self) -> i64 {
        self.weight
    }

    /// Whether the extender is called for `pod` (`IsInterested`): always without
    /// `managedResources`, else when a container or init container requests or limits one.
    pub fn is_interested(&self, pod: &Pod) -> bool {
        if self.managed_resources.is_empty() {
            return true;
        }
        let Some(spec) = &pod.spec else { return false };
        spec.containers.iter().chain(spec.init_containers.iter().flatten()).any(|c| {
            let r = c.resources.as_ref();
            let has = |m: Option<&std::collections::BTreeMap<String, _>>| {
                m.is_some_and(|m| m.keys().any(|k| self.managed_resources.contains(k)))
            };
            has(r.and_then(|r| r.requests.as_ref())) || has(r.and_then(|r| r.limits.as_ref()))
        })
    }

    fn args(&self, pod: &Pod, nodes: &[Arc<NodeInfo>]) -> Value {
        if self.node_cache_capable {
            let names: Vec<&str> = nodes.iter().map(|n| n.name()).collect();
            json!({"Pod": pod, "Nodes": null, "NodeNames": names})
        } else {
            let items: Vec<Value> =
                nodes.iter().filter_map(|n| n.node()).map(|n| serde_json::to_value(n).unwrap_or(Value::Null)).collect();
            json!({"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": null})
        }
    }

    /// The filter call (`Filter`). Without a filter verb every node passes.
    ///
    /// # Errors
    /// The call failed, the answer carries an `Error`, or it names a node that was not sent.
    pub async fn filter(&self, pod: &Pod, nodes: &[Arc<NodeInfo>]) -> Result<FilterResult, String> {
        if self.filter_verb.is_empty() {
            return Ok(FilterResult {
                feasible: nodes.iter().map(|n| n.name().to_string()).collect(),
                ..Default::default()
            });
        }
        let body = self.send(&self.filter_verb, &self.args(pod, nodes)).await?;
        let answer: FilterAnswer = decode(&body)?;
        if !answer.error.is_empty() {
            return Err(answer.error);
        }
        let sent: HashSet<&str> = nodes.iter().map(|n| n.name()).collect();
        let names: Vec<String> = if self.node_cache_capable && answer.node_names.is_some() {
            answer.node_names.unwrap_or_default()
        } else {
            answer
                .nodes
                .and_then(|l| l.items)
                .unwrap_or_default()
                .iter()
                .map(|n| n.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string())
                .collect()
        };
        if let Some(unknown) = names.iter().find(|n| !sent.contains(n.as_str())) {
            return Err(format!(
                "extender {:?} claims a filtered node {unknown:?} which is not found in the input node list",
                self.url_prefix
            ));
        }
        Ok(FilterResult {
            feasible: names,
            failed: answer.failed_nodes.unwrap_or_default(),
            failed_and_unresolvable: answer.failed_and_unresolvable_nodes.unwrap_or_default(),
        })
    }

    /// The prioritize call (`Prioritize`): the scores and the weight to apply. Without a
    /// prioritize verb every node scores 0 with weight 0.
    ///
    /// # Errors
    /// The call failed or the answer is not a `HostPriorityList`.
    pub async fn prioritize(&self, pod: &Pod, nodes: &[Arc<NodeInfo>]) -> Result<(Vec<HostPriority>, i64), String> {
        if self.prioritize_verb.is_empty() {
            let zero = nodes.iter().map(|n| HostPriority { host: n.name().to_string(), score: 0 }).collect();
            return Ok((zero, 0));
        }
        let body = self.send(&self.prioritize_verb, &self.args(pod, nodes)).await?;
        let list: Option<Vec<HostPriority>> = decode(&body)?;
        Ok((list.unwrap_or_default(), self.weight))
    }

    /// The bind call (`Bind`).
    ///
    /// # Errors
    /// The call failed or the answer carries an `Error`.
    pub async fn bind(&self, namespace: &str, name: &str, uid: &str, node: &str) -> Result<(), String> {
        if self.bind_verb.is_empty() {
            return Err("unexpected empty bindVerb in extender".into());
        }
        let args = json!({"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node});
        let body = self.send(&self.bind_verb, &args).await?;
        let answer: ErrorAnswer = decode(&body)?;
        if answer.error.is_empty() { Ok(()) } else { Err(answer.error) }
    }

    /// The preempt call (`ProcessPreemption`): the candidate nodes and victims the extender
    /// keeps, mapped back from UIDs to the pods on those nodes.
    ///
    /// # Errors
    /// The call failed, or the extender names a node or pod not on offer.
    pub async fn process_preemption(
        &self,
        pod: &Pod,
        victims: &HashMap<String, NodeVictims>,
    ) -> Result<HashMap<String, NodeVictims>, String> {
        if self.preempt_verb.is_empty() {
            return Err(format!(
                "preempt verb is not defined for extender {} but run into ProcessPreemption",
                self.url_prefix
            ));
        }
        let uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
        let meta: serde_json::Map<String, Value> = victims
            .iter()
            .map(|(node, v)| {
                let pods: Vec<Value> = v.pods.iter().map(|p| json!({"UID": uid(p)})).collect();
                (node.clone(), json!({"Pods": pods, "NumPDBViolations": v.num_pdb_violations}))
            })
            .collect();
        let args = if self.node_cache_capable {
            json!({"Pod": pod, "NodeNameToVictims": null, "NodeNameToMetaVictims": meta})
        } else {
            let full: serde_json::Map<String, Value> = victims
                .iter()
                .map(|(node, v)| {
                    let pods: Vec<&Pod> = v.pods.iter().map(|p| p.as_ref()).collect();
                    (node.clone(), json!({"Pods": pods, "NumPDBViolations": v.num_pdb_violations}))
                })
                .collect();
            json!({"Pod": pod, "NodeNameToVictims": full, "NodeNameToMetaVictims": null})
        };
        let body = self.send(&self.preempt_verb, &args).await?;
        let answer: PreemptionAnswer = decode(&body)?;
        let mut out = HashMap::new();
        for (node, mv) in answer.node_name_to_meta_victims.unwrap_or_default() {
            let offered = victims
                .get(&node)
                .ok_or_else(|| format!("extender {} named node {node:?}, not a candidate", self.url_prefix))?;
            let mv = mv.unwrap_or_default();
            let mut pods = Vec::new();
            for m in mv.pods.unwrap_or_default() {
                let p = offered.pods.iter().find(|p| uid(p) == m.uid).ok_or_else(|| {
                    format!(
                        "extender: {} claims to preempt pod (UID: {}) on node: {node}, but the pod is not found on that node",
                        self.url_prefix, m.uid
                    )
                })?;
                pods.push(p.clone());
            }
            out.insert(node, NodeVictims { pods, num_pdb_violations: mv.num_pdb_violations });
        }
        Ok(out)
    }

    /// Posts `args` to `URL_PREFIX/VERB` within the timeout; the body of a 200 answer.
    async fn send(&self, verb: &str, args: &Value) -> Result<Bytes, String> {
        let url = format!("{}/{verb}", self.url_prefix.trim_end_matches('/'));
        let payload = serde_json::to_vec(args).map_err(|e| e.to_string())?;
        let (status, body) = match tokio::time::timeout(self.timeout, self.post(&url, payload)).await {
            Ok(r) => r.map_err(|e| format!("Post {url:?}: {e}"))?,
            Err(_) => {
                return Err(format!(
                    "Post {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                ));
            }
        };
        if status != StatusCode::OK {
            return Err(format!("failed {verb} with extender at URL {url}, code {}", status.as_u16()));
        }
        Ok(body)
    }

    async fn post(&self, url: &str, payload: Vec<u8>) -> Result<(StatusCode, Bytes), String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
        let host = uri.host().ok_or("no host in the URL")?.trim_start_matches('[').trim_end_matches(']').to_string();
        let port = uri.port_u16().unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let authority = uri.authority().map(|a| a.to_string()).unwrap_or_else(|| host.clone());
        let path = uri.path_and_query().map(|p| p.to_string()).unwrap_or_else(|| "/".into());
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("dial tcp {authority}: connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(hyper::header::HOST, &authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::from(payload)))
            .map_err(|e| e.to_string())?;
        match &self.tls {
            Some(config) => {
                let name = self.server_name.clone().unwrap_or(host);
                let name = ServerName::try_from(name).map_err(|e| format!("invalid server name: {e}"))?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("tls: {e}"))?;
                exchange(TokioIo::new(tls), req).await
            }
            None => exchange(TokioIo::new(tcp), req).await,
        }
    }
}

async fn exchange<T>(io: T, req: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes), String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let result = async {
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the response: {e}"))?
            .to_bytes();
        Ok((status, body))
    }
    .await;
    driver.abort();
    result
}

fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("decoding the extender's answer: {e}"))
}

/// The client TLS configuration of an extender (client-go's `TLSConfigFor` over
/// `ExtenderTLSConfig`).
fn client_tls(enable_https: bool, t: &crate::config::ExtenderTlsConfig) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let ca = read_pem(&t.ca_data, &t.ca_file, "ca")?;
    // kube-scheduler: enableHTTPS without a CA means the server's certificate is not verified.
    let insecure = t.insecure || (enable_https && ca.is_none());
    let builder = if insecure {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider)))
    } else {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.as_deref().unwrap_or_default()) {
            let cert = cert.map_err(|e| format!("tlsConfig CA: {e}"))?;
            roots.add(cert).map_err(|e| format!("tlsConfig CA: {e}"))?;
        }
        if roots.is_empty() {
            return Err("https extender without a CA to verify it (set tlsConfig.caData/caFile or insecure)".into());
        }
        builder.with_root_certificates(roots)
    };
    let cert = read_pem(&t.cert_data, &t.cert_file, "cert")?;
    let key = read_pem(&t.key_data, &t.key_file, "key")?;
    let mut config = match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("tlsConfig client certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("tlsConfig client key: {e}"))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| format!("tlsConfig client certificate: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("tlsConfig: a client certificate needs both a certificate and a key".into()),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// `insecure: true`: any server certificate is accepted; handshake signatures are still
/// checked.
#[derive(Debug)]
struct AcceptAnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Runs an extender call to completion from the synchronous scheduling cycle (the scheduler's
/// own thread): on `runtime` when given and this thread is outside any runtime, on a scoped
/// helper thread when it is inside one (tests drive cycles from async code), and on a
/// single-use runtime when no handle is given.
///
/// # Errors
/// The call's error, or a runtime that cannot be built.
pub fn block_on<F, T>(runtime: Option<&tokio::runtime::Handle>, fut: F) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, String>> + Send,
    T: Send,
{
    let run = move |fut: F| match runtime {
        Some(rt) => rt.block_on(fut),
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("starting a runtime for the extender call: {e}"))?
            .block_on(fut),
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| s.spawn(move || run(fut)).join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    } else {
        run(fut)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::BodyExt as _;
    use hyper::body::Incoming;
    use hyper::service::service_fn;

    use super::*;
    use crate::config::ExtenderManagedResource;
    use crate::testing::{make_node, make_pod, node_info};

    type Handler = Arc<dyn Fn(&str, Value) -> (u16, Value) + Send + Sync>;

    /// A one-task HTTP extender on loopback answering with `handler(path, body)`; also records
    /// every request body.
    async fn serve(handler: Handler) -> (String, Arc<parking_lot::Mutex<Vec<(String, Value)>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/scheduler", listener.local_addr().unwrap());
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (handler, log) = (handler.clone(), log.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<Incoming>| {
                        let (handler, log) = (handler.clone(), log.clone());
                        async move {
                            let path = req.uri().path().to_string();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            log.lock().push((path.clone(), v.clone()));
                            let (code, answer) = handler(&path, v);
                            let resp = hyper::Response::builder()
                                .status(code)
                                .body(Full::new(Bytes::from(answer.to_string())))
                                .unwrap();
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), svc).await;
                });
            }
        });
        (url, seen)
    }

    fn nodes(names: &[&str]) -> Vec<Arc<NodeInfo>> {
        names.iter().map(|n| Arc::new(node_info(make_node(n).obj(), &[]))).collect()
    }

    fn extender(url: &str, edit: impl FnOnce(&mut Extender)) -> HttpExtender {
        let mut cfg = Extender {
            url_prefix: url.into(),
            filter_verb: "filter".into(),
            prioritize_verb: "prioritize".into(),
            bind_verb: "bind".into(),
            preempt_verb: "preempt".into(),
            weight: 2,
            ..Default::default()
        };
        edit(&mut cfg);
        HttpExtender::new(&cfg).unwrap()
    }

    #[tokio::test]
    async fn filter_sends_node_objects_and_reads_the_kept_and_failed_nodes() {
        let (url, seen) = serve(Arc::new(|_, args: Value| {
            let keep: Vec<Value> = args["Nodes"]["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["metadata"]["name"] != "b")
                .cloned()
                .collect();
            (200, json!({"Nodes": {"items": keep}, "FailedNodes": {"b": "no b"}, "FailedAndUnresolvableNodes": {}}))
        }))
        .await;
        let ext = extender(&url, |_| {});
        let pod = make_pod("p").obj();
        let r = ext.filter(&pod, &nodes(&["a", "b", "c"])).await.unwrap();
        assert_eq!(r.feasible, vec!["a", "c"]);
        assert_eq!(r.failed.get("b").map(String::as_str), Some("no b"));
        let (path, args) = seen.lock()[0].clone();
        assert_eq!(path, "/scheduler/filter");
        assert_eq!(args["Pod"]["metadata"]["name"], "p");
        assert!(args["NodeNames"].is_null());
    }

    #[tokio::test]
    async fn a_node_cache_capable_extender_gets_and_returns_node_names() {
        let (url, seen) =
            serve(Arc::new(|_, _| (200, json!({"NodeNames": ["c"], "FailedAndUnresolvableNodes": {"a": "gone"}}))))
                .await;
        let ext = extender(&url, |e| e.node_cache_capable = true);
        let r = ext.filter(&make_pod("p").obj(), &nodes(&["a", "c"])).await.unwrap();
        assert_eq!(r.feasible, vec!["c"]);
        assert_eq!(r.failed_and_unresolvable.get("a").map(String::as_str), Some("gone"));
        let args = seen.lock()[0].1.clone();
        assert_eq!(args["NodeNames"], json!(["a", "c"]));
        assert!(args["Nodes"].is_null());
    }

    #[tokio::test]
    async fn an_answer_naming_a_node_not_sent_or_carrying_an_error_fails_the_call() {
        let (url, _) = serve(Arc::new(|_, _| (200, json!({"NodeNames": ["zzz"]})))).await;
        let err = extender(&url, |e| e.node_cache_capable = true).filter(&make_pod("p").obj(), &nodes(&["a"])).await;
        assert!(err.unwrap_err().contains("claims a filtered node \"zzz\""));
        let (url, _) = serve(Arc::new(|_, _| (200, json!({"Error": "extender says no"})))).await;
        let err = extender(&url, |_| {}).filter(&make_pod("p").obj(), &nodes(&["a"])).await;
        assert_eq!(err.unwrap_err(), "extender says no");
    }

    #[tokio::test]
    async fn prioritize_returns_the_host_scores_and_the_weight() {
        let (url, _) =
            serve(Arc::new(|_, _| (200, json!([{"Host": "a", "Score": 3}, {"Host": "b", "Score": 10}])))).await;
        let (list, weight) =
            extender(&url, |_| {}).prioritize(&make_pod("p").obj(), &nodes(&["a", "b"])).await.unwrap();
        assert_eq!(weight, 2);
        assert_eq!(
            list,
            vec![HostPriority { host: "a".into(), score: 3 }, HostPriority { host: "b".into(), score: 10 }]
        );
    }

    #[tokio::test]
    async fn bind_posts_the_binding_args() {
        let (url, seen) = serve(Arc::new(|_, _| (200, json!({"Error": ""})))).await;
        extender(&url, |_| {}).bind("ns", "p", "uid-p", "n1").await.unwrap();
        let (path, args) = seen.lock()[0].clone();
        assert_eq!(path, "/scheduler/bind");
        assert_eq!(args, json!({"PodName": "p", "PodNamespace": "ns", "PodUID": "uid-p", "Node": "n1"}));
    }

    #[tokio::test]
    async fn preemption_maps_the_kept_victims_back_to_pods() {
        let (url, seen) = serve(Arc::new(|_, _| {
            (200, json!({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-v2"}], "NumPDBViolations": 0}}}))
        }))
        .await;
        let ext = extender(&url, |e| e.node_cache_capable = true);
        let v1 = Arc::new(make_pod("v1").obj());
        let v2 = Arc::new(make_pod("v2").obj());
        let offered = HashMap::from([
            ("n1".to_string(), NodeVictims { pods: vec![v1, v2.clone()], num_pdb_violations: 1 }),
            ("n2".to_string(), NodeVictims::default()),
        ]);
        let kept = ext.process_preemption(&make_pod("p").obj(), &offered).await.unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept["n1"].pods, vec![v2]);
        let args = seen.lock()[0].1.clone();
        assert_eq!(args["NodeNameToMetaVictims"]["n1"]["Pods"], json!([{"UID": "uid-v1"}, {"UID": "uid-v2"}]));
    }

    #[tokio::test]
    async fn failures_name_the_url_and_the_problem() {
        let (url, _) = serve(Arc::new(|_, _| (500, json!({})))).await;
        let err = extender(&url, |_| {}).filter(&make_pod("p").obj(), &nodes(&["a"])).await.unwrap_err();
        assert_eq!(err, format!("failed filter with extender at URL {url}/filter, code 500"));
        // A port nobody listens on: bind one, then close it.
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let url = format!("http://{addr}/x");
        let err = extender(&url, |_| {}).filter(&make_pod("p").obj(), &nodes(&["a"])).await.unwrap_err();
        assert!(err.starts_with(&format!("Post \"{url}/filter\": dial tcp {addr}: connect: ")), "{err}");
    }

    #[tokio::test]
    async fn a_slow_extender_times_out_after_http_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        // Accepts and never answers.
        let _keep = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                held.push(tcp);
            }
        });
        let ext = extender(&url, |e| e.http_timeout = Some("200ms".into()));
        let err = ext.filter(&make_pod("p").obj(), &nodes(&["a"])).await.unwrap_err();
        assert!(err.contains("context deadline exceeded"), "{err}");
    }

    /// A CA and a serving certificate for 127.0.0.1 signed by it, as PEM (CA, cert, key).
    fn tls_material() -> (String, String, String) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::from_ca_cert_pem(&ca_cert.pem(), ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &issuer).unwrap();
        (ca_cert.pem(), cert.pem(), key.serialize_pem())
    }

    /// An HTTPS extender on loopback whose filter keeps every node; returns its base URL and CA.
    async fn serve_https() -> (String, String) {
        let (ca, cert, key) = tls_material();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert.as_bytes()).map(|c| c.unwrap()).collect();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let svc = service_fn(|req: hyper::Request<Incoming>| async move {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let args: Value = serde_json::from_slice(&body).unwrap();
                        let answer = json!({"NodeNames": args["NodeNames"]});
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(answer.to_string()))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), svc).await;
                });
            }
        });
        (url, ca)
    }

    #[tokio::test]
    async fn an_https_extender_is_verified_with_its_ca_or_reached_without_one_when_https_is_enabled() {
        use base64::Engine as _;
        let (url, ca) = serve_https().await;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let call = |tls: Option<crate::config::ExtenderTlsConfig>, enable_https: bool| {
            let ext = extender(&url, |e| {
                e.node_cache_capable = true;
                e.tls_config = tls;
                e.enable_https = enable_https;
            });
            async move { ext.filter(&make_pod("p").obj(), &nodes(&["a"])).await }
        };
        let with_ca = crate::config::ExtenderTlsConfig { ca_data: b64(&ca), ..Default::default() };
        assert_eq!(call(Some(with_ca), false).await.unwrap().feasible, vec!["a"]);
        // enableHTTPS without a CA: kube-scheduler does not verify the certificate.
        assert_eq!(call(None, true).await.unwrap().feasible, vec!["a"]);
        // Another CA: the handshake fails.
        let (other_ca, _, _) = tls_material();
        let wrong = crate::config::ExtenderTlsConfig { ca_data: b64(&other_ca), ..Default::default() };
        let err = call(Some(wrong), false).await.unwrap_err();
        assert!(err.contains("tls:"), "{err}");
    }

    #[test]
    fn an_extender_with_managed_resources_is_interested_only_in_pods_requesting_them() {
        let ext = extender("http://127.0.0.1:1", |e| {
            e.managed_resources =
                vec![ExtenderManagedResource { name: "example.com/gpu".into(), ignored_by_scheduler: false }]
        });
        assert!(!ext.is_interested(&make_pod("plain").req(&[("cpu", "1")]).obj()));
        assert!(ext.is_interested(&make_pod("gpu").req(&[("example.com/gpu", "1")]).obj()));
        assert!(extender("http://127.0.0.1:1", |_| {}).is_interested(&make_pod("plain").obj()));
    }

    #[test]
    fn bad_urls_and_tls_material_are_refused_when_the_extender_is_built() {
        assert!(HttpExtender::new(&Extender { url_prefix: "ftp://x".into(), ..Default::default() }).is_err());
        let tls = crate::config::ExtenderTlsConfig { ca_data: "not base64!".into(), ..Default::default() };
        let err = HttpExtender::new(&Extender {
            url_prefix: "https://127.0.0.1:1".into(),
            tls_config: Some(tls),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("caData"), "{err}");
        // enableHTTPS without a CA: the certificate is not verified (kube-scheduler's rule).
        assert!(
            HttpExtender::new(&Extender {
                url_prefix: "https://127.0.0.1:1".into(),
                enable_https: true,
                ..Default::default()
            })
            .is_ok()
        );
    }
}
