//! The HTTPS client that posts AdmissionReviews to webhooks: hyper's HTTP/1.1 client over
//! tokio-rustls, trusting only the configuration's `caBundle`, one connection per call, bounded
//! by the webhook's timeout.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

/// Largest webhook response read, bytes (kube-apiserver's limit is 3 MiB).
pub const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Where and how to call one webhook.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Address to connect to (`host:port`).
    pub connect: String,
    /// TLS server name to verify (host name or IP).
    pub server_name: String,
    /// `Host` header and URL authority.
    pub authority: String,
    /// Path and query.
    pub path: String,
    /// PEM CA bundle to trust.
    pub ca_bundle: Vec<u8>,
}

/// Posts `body` to the endpoint and returns the decoded JSON response.
///
/// # Errors
/// Connection, TLS, timeout, HTTP status or decoding failures, as a message.
pub async fn post_json(endpoint: &Endpoint, body: &Value, timeout: Duration) -> Result<Value, String> {
    let url = format!("https://{}{}", endpoint.authority, endpoint.path);
    match tokio::time::timeout(timeout, post_inner(endpoint, body)).await {
        Ok(r) => r.map_err(|e| format!("Post \"{url}\": {e}")),
        Err(_) => Err(format!("Post \"{url}\": context deadline exceeded")),
    }
}

async fn post_inner(endpoint: &Endpoint, body: &Value) -> Result<Value, String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&endpoint.ca_bundle) {
        let cert = cert.map_err(|e| format!("invalid caBundle: {e}"))?;
        roots.add(cert).map_err(|e| format!("invalid caBundle: {e}"))?;
    }
    if roots.is_empty() {
        return Err("no caBundle to verify the webhook server with".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::try_from(endpoint.server_name.clone()).map_err(|e| format!("invalid server name: {e}"))?;
    let tcp = tokio::net::TcpStream::connect(&endpoint.connect)
        .await
        .map_err(|e| format!("dial tcp {}: {e}", endpoint.connect))?;
    let _ = tcp.set_nodelay(true);
    let tls =
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let payload = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    let req = Request::builder()
        .method(Method::POST)
        .uri(&endpoint.path)
        .header(hyper::header::HOST, &endpoint.authority)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(payload)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string());
    let result = match resp {
        Ok(resp) => {
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| format!("reading the response: {e}"))?
                .to_bytes();
            if status != StatusCode::OK {
                Err(format!("the server responded with status {status}: {}", String::from_utf8_lossy(&bytes)))
            } else {
                serde_json::from_slice(&bytes).map_err(|e| format!("decoding the response: {e}"))
            }
        }
        Err(e) => Err(e),
    };
    driver.abort();
    result
}
