//! The `proxy` subresources of pods, services and nodes ([`proxy`]), and `pods/log` (and the
//! kubelet connection used by [`crate::endpoints::streams`]): for logs the API server asks the
//! pod's kubelet (`GET https://<node>:<port>/containerLogs/…`,
//! the node's InternalIP and `status.daemonEndpoints.kubeletEndpoint.Port`) and streams the
//! answer back, as kube-apiserver's `LogREST` does
//! (<https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#read-log-of-the-specified-pod>).
//!
//! The API server authenticates to the kubelet with its `kubelet-client` certificate (signed
//! by the cluster CA, CN=`kube-apiserver-kubelet-client`, O=`system:masters`). Like
//! kube-apiserver without `--kubelet-certificate-authority`, it does not verify the kubelet's
//! (self-signed) serving certificate.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::Value;
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::endpoints::request::Query;

/// The log query parameters forwarded to the kubelet (`PodLogOptions`).
const LOG_PARAMS: &[&str] =
    &["follow", "tailLines", "sinceSeconds", "sinceTime", "timestamps", "previous", "limitBytes"];

#[derive(Debug)]
pub(crate) struct AcceptAnyServerCert(pub(crate) Arc<rustls::crypto::CryptoProvider>);

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

/// TLS settings for calls to kubelets, with the API server's kubelet-client certificate.
pub fn kubelet_client_tls(cert_pem: &str, key_pem: &str) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider)))
        .with_client_auth_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The container a `pods/log`, `pods/exec` or `pods/attach` request is for: the `container`
/// parameter, or the only container of the pod.
///
/// # Errors
/// 400 for an unknown container, or when the pod has several and none was named.
pub(crate) fn container_name(pod: &Value, name: &str, q: &Query) -> Result<String, ApiError> {
    if let Some(c) = q.get("container").filter(|c| !c.is_empty()) {
        let known = ["containers", "initContainers", "ephemeralContainers"]
            .iter()
            .flat_map(|k| pod["spec"][k].as_array().cloned().unwrap_or_default())
            .any(|x| x["name"] == c.as_str());
        if !known {
            return Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}")));
        }
        return Ok(c.clone());
    }
    let names: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            names.join(" ")
        ))),
    }
}

/// Opens a TLS connection (with the API server's kubelet-client certificate) to the kubelet of
/// the node `pod` is bound to, for a request of `path`; returns it with the `host:port` to send
/// as `Host`.
///
/// # Errors
/// 400 when the pod has no node or the node no address; 503 when the kubelet is unreachable.
pub(crate) async fn connect_kubelet(
    state: &Arc<AppState>,
    pod: &Value,
    name: &str,
    path: &str,
) -> Result<(tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String), ApiError> {
    let nodes = state.registry.get("", "v1", "nodes").ok_or_else(|| ApiError::internal("nodes are not registered"))?;
    let node_name = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if node_name.is_empty() {
        return Err(ApiError::bad_request(format!("pod {name} does not have a host assigned")));
    }
    let node = state.objects.get(nodes, "", node_name).await?;
    let addresses = node["status"]["addresses"].as_array().cloned().unwrap_or_default();
    let address = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|t| {
            addresses.iter().find(|a| a["type"] == *t).and_then(|a| a["address"].as_str().map(str::to_string))
        })
        .ok_or_else(|| ApiError::bad_request(format!("node {node_name} has no address")))?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_i64().unwrap_or(10250);
    let tls = state.kubelet_tls.clone().ok_or_else(|| ApiError::unavailable("no kubelet client certificate"))?;
    let host = if address.contains(':') { format!("[{address}]:{port}") } else { format!("{address}:{port}") };
    let unreachable = |e: String| ApiError::unavailable(format!("Get \"https://{host}{path}\": {e}"));
    let tcp =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect((address.as_str(), port as u16)))
            .await
            .map_err(|_| unreachable("dial timeout".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
    let server_name = ServerName::try_from(address.clone()).map_err(|e| unreachable(e.to_string()))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(server_name, tcp)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    Ok((stream, host))
}

/// Serves `GET pods/{name}/log`.
pub async fn pod_log(state: &Arc<AppState>, ns: &str, name: &str, q: &Query) -> Result<Response, ApiError> {
    let pods = state.registry.get("", "v1", "pods").ok_or_else(|| ApiError::internal("pods are not registered"))?;
    let pod = state.objects.get(pods, ns, name).await?;
    let container = container_name(&pod, name, q)?;
    let mut query: Vec<String> = Vec::new();
    for p in LOG_PARAMS {
        if let Some(v) = q.get(*p) {
            query.push(format!("{p}={}", v.replace(['&', ' ', '#'], "")));
        }
    }
    let path = format!(
        "/containerLogs/{ns}/{name}/{container}{}",
        if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) }
    );
    let (stream, host) = connect_kubelet(state, &pod, name, &path).await?;
    let unreachable = |e: String| ApiError::unavailable(format!("Get \"https://{host}{path}\": {e}"));
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| unreachable(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = axum::http::Request::get(&path)
        .header(header::HOST, host.clone())
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let resp = sender.send_request(req).await.map_err(|e| unreachable(e.to_string()))?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let text = String::from_utf8_lossy(&body).trim().to_string();
        let code = if status == StatusCode::NOT_FOUND { 404 } else { 400 };
        return Err(ApiError::new(code, if code == 404 { "NotFound" } else { "BadRequest" }, text));
    }
    let body = Body::new(resp.into_body().map_err(axum::Error::new));
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(body)
        .unwrap_or_default())
}

/// `[scheme:]name[:port]`, the name segment of a proxy request (`net.SplitSchemeNamePort` in
/// k8s.io/apimachinery): `(scheme, name, port)` with `scheme` "", "http" or "https"; `None`
/// for anything else.
fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    (!name.is_empty() && matches!(scheme, "" | "http" | "https")).then_some((scheme, name, port))
}

/// Where a proxy request goes: scheme and `host:port`.
#[derive(Debug, PartialEq)]
struct Location {
    https: bool,
    host: String,
}

/// The location of `pods/{id}/proxy` (`ResourceLocation` in `pkg/registry/core/pod/strategy.go`):
/// the pod's IP, at the given port, else the first declared container port, else the scheme's
/// default port.
fn pod_location(pod: &Value, id: &str) -> Result<Location, ApiError> {
    let (scheme, name, port) =
        split_scheme_name_port(id).ok_or_else(|| ApiError::bad_request(format!("invalid pod request {id:?}")))?;
    let ip = pod["status"]["podIP"]
        .as_str()
        .filter(|ip| !ip.is_empty())
        .ok_or_else(|| ApiError::unavailable(format!("address not allowed: pod {name} has no IP address yet")))?;
    let first_declared =
        || pod["spec"]["containers"].as_array()?.iter().find_map(|c| c["ports"][0]["containerPort"].as_i64());
    let https = scheme == "https";
    let port = match port {
        "" => first_declared().unwrap_or(if https { 443 } else { 80 }),
        p => p.parse().map_err(|_| ApiError::bad_request(format!("invalid pod request {id:?}")))?,
    };
    Ok(Location { https, host: crate::storage::listers::host_port(ip, port) })
}

/// The location of `nodes/{id}/proxy` (`ResourceLocation` in `pkg/registry/core/node/strategy.go`):
/// the node's address; without a port, its kubelet's port over HTTPS.
fn node_location(node: &Value, id: &str) -> Result<Location, ApiError> {
    let (scheme, name, port) =
        split_scheme_name_port(id).ok_or_else(|| ApiError::bad_request(format!("invalid node request {id:?}")))?;
    let addresses = node["status"]["addresses"].as_array().cloned().unwrap_or_default();
    let address = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|t| {
            addresses.iter().find(|a| a["type"] == *t).and_then(|a| a["address"].as_str().map(str::to_string))
        })
        .ok_or_else(|| ApiError::unavailable(format!("node {name} has no address")))?;
    let kubelet_port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_i64().unwrap_or(10250);
    let port = match port {
        "" => kubelet_port,
        p => p.parse().map_err(|_| ApiError::bad_request(format!("invalid node request {id:?}")))?,
    };
    // The kubelet's port is HTTPS unless the request says otherwise, as kube-apiserver's.
    let https = scheme == "https" || (scheme.is_empty() && port == kubelet_port);
    Ok(Location { https, host: crate::storage::listers::host_port(&address, port) })
}

/// Headers that belong to one connection and are not forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: &[&str] =
    &["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];

/// Serves `pods/{id}/proxy/{path}`, `services/{id}/proxy/{path}` and `nodes/{id}/proxy/{path}`
/// (<https://kubernetes.io/docs/tasks/access-application-cluster/access-cluster-services/#manually-constructing-apiserver-proxy-urls>):
/// the request, with its method, query, headers (without hop-by-hop headers and the
/// requester's `Authorization`, which kube-apiserver's authentication filter removes) and body,
/// is sent to the pod's IP, a ready endpoint of the Service's port, or the node's kubelet, and
/// the answer streamed back as it is. HTTPS targets are reached with the API server's
/// kubelet-client certificate, without verifying theirs (as kube-apiserver's proxy transport).
///
/// # Errors
/// 404 for a missing object, 400 for a malformed `[scheme:]name[:port]`, 503 when the target
/// has no address or cannot be reached. Upgrades (WebSocket) are not proxied.
pub async fn proxy(
    state: &Arc<AppState>,
    parts: &axum::http::request::Parts,
    body: Body,
    info: &crate::endpoints::request::RequestInfo,
) -> Result<Response, ApiError> {
    let (ns, id) = (info.namespace.as_str(), info.name.as_str());
    let kind = info.def.resource.trim_end_matches('s');
    let (scheme, name, port) =
        split_scheme_name_port(id).ok_or_else(|| ApiError::bad_request(format!("invalid {kind} request {id:?}")))?;
    let location = match info.def.resource {
        "pods" => pod_location(&state.objects.get(&info.def, ns, name).await?, id)?,
        "nodes" => node_location(&state.objects.get(&info.def, "", name).await?, id)?,
        "services" => {
            let host = crate::storage::listers::resolve_service_endpoint(
                state,
                ns,
                name,
                crate::storage::listers::ServicePortRef::Proxy(port),
            )?;
            Location { https: scheme == "https", host }
        }
        _ => return Err(ApiError::new(404, "NotFound", "the server could not find the requested resource")),
    };
    let path_and_query = match parts.uri.query() {
        Some(q) => format!("{}?{q}", info.proxy_path),
        None => info.proxy_path.clone(),
    };
    let url = format!("{}://{}{path_and_query}", if location.https { "https" } else { "http" }, location.host);
    let unreachable = |e: String| ApiError::unavailable(format!("error trying to reach service: {url}: {e}"));
    let tcp = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(location.host.as_str()))
        .await
        .map_err(|_| unreachable("dial timeout".into()))?
        .map_err(|e| unreachable(e.to_string()))?;
    let mut req = axum::http::Request::builder().method(parts.method.clone()).uri(&path_and_query);
    for (k, v) in &parts.headers {
        if !HOP_BY_HOP.contains(&k.as_str()) && k != header::AUTHORIZATION && k != header::HOST {
            req = req.header(k, v);
        }
    }
    let req = req
        .header(header::HOST, location.host.as_str())
        .body(body)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let resp = if location.https {
        let tls = state
            .kubelet_tls
            .clone()
            .ok_or_else(|| ApiError::unavailable("no client certificate for HTTPS targets"))?;
        let host_only = location.host.rsplit_once(':').map_or(location.host.as_str(), |(h, _)| h);
        let server_name = ServerName::try_from(host_only.trim_matches(['[', ']']).to_string())
            .map_err(|e| unreachable(e.to_string()))?;
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(server_name, tcp)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        send(TokioIo::new(stream), req).await
    } else {
        send(TokioIo::new(tcp), req).await
    }
    .map_err(|e| unreachable(e.to_string()))?;
    let (head, body) = resp.into_parts();
    let mut out = Response::builder().status(head.status);
    for (k, v) in &head.headers {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            out = out.header(k, v);
        }
    }
    Ok(out.body(Body::new(body.map_err(axum::Error::new))).unwrap_or_default())
}

/// One HTTP/1.1 exchange over `io`.
async fn send<T>(io: T, req: axum::http::Request<Body>) -> hyper::Result<axum::http::Response<hyper::body::Incoming>>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await
}

#[cfg(test)]
mod proxy_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_proxy_name_splits_into_scheme_name_and_port_like_split_scheme_name_port() {
        assert_eq!(split_scheme_name_port("web"), Some(("", "web", "")));
        assert_eq!(split_scheme_name_port("web:80"), Some(("", "web", "80")));
        assert_eq!(split_scheme_name_port("https:web:metrics"), Some(("https", "web", "metrics")));
        assert_eq!(split_scheme_name_port("ftp:web:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
    }

    #[test]
    fn a_pod_is_reached_at_the_given_port_else_its_first_declared_port_else_port_80() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": 8080}]}]},
            "status": {"podIP": "10.42.0.7"}});
        assert_eq!(pod_location(&pod, "p:9000").unwrap(), Location { https: false, host: "10.42.0.7:9000".into() });
        assert_eq!(pod_location(&pod, "p").unwrap(), Location { https: false, host: "10.42.0.7:8080".into() });
        let bare = json!({"spec": {"containers": [{"name": "a"}]}, "status": {"podIP": "fd00::7"}});
        assert_eq!(pod_location(&bare, "https:p:").unwrap(), Location { https: true, host: "[fd00::7]:443".into() });
        assert_eq!(pod_location(&bare, "p:web").unwrap_err().code, 400);
        assert_eq!(pod_location(&json!({"spec": {}}), "p").unwrap_err().code, 503);
    }

    #[test]
    fn a_node_is_reached_at_its_kubelet_over_https_unless_another_port_is_named() {
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "192.0.2.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}});
        assert_eq!(node_location(&node, "n1").unwrap(), Location { https: true, host: "192.0.2.5:10250".into() });
        assert_eq!(node_location(&node, "n1:9100").unwrap(), Location { https: false, host: "192.0.2.5:9100".into() });
        assert_eq!(
            node_location(&node, "https:n1:9100").unwrap(),
            Location { https: true, host: "192.0.2.5:9100".into() }
        );
        assert_eq!(node_location(&json!({}), "n1").unwrap_err().code, 503);
    }
}
