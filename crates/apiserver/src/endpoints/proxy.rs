//! `pods/log` (and the kubelet connection used by [`crate::endpoints::streams`]): the API server asks the pod's kubelet (`GET https://<node>:<port>/containerLogs/…`,
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
