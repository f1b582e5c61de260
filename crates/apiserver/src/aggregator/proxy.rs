//! kube-aggregator's proxy handler (`pkg/apiserver/handler_proxy.go`): a request for a
//! group-version an aggregated server claims is authorized here like any other, then sent on to
//! a ready endpoint of the APIService's Service over TLS — verified against `spec.caBundle` as
//! `<service>.<namespace>.svc`, or not at all with `insecureSkipTLSVerify` — presenting the front
//! proxy's client certificate and naming the requester in `X-Remote-User` and `X-Remote-Group`
//! (the headers of the `extension-apiserver-authentication` ConfigMap). The client's own
//! `Authorization`, `Impersonate-*` and `X-Remote-*` headers are never forwarded. The answer is
//! streamed back as it is, watches included; upgrades (exec-like subresources) are not proxied.
//!
//! An APIService whose `Available` condition is not `True` answers `503 service unavailable`
//! (text, as kube-aggregator's `proxyError`) for its group-version only.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::Response;
use base64::Engine;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;

use crate::AppState;
use crate::auth::{Attributes, RequestUser};
use crate::endpoints::request::Query;
use crate::pki::CertPair;
use crate::storage::listers::{ServicePortRef, resolve_service_endpoint};

/// Headers that belong to one connection and are not forwarded (RFC 9110 §7.6.1).
const HOP_BY_HOP: &[&str] =
    &["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];

/// How long connecting to an aggregated server may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// The authorization attributes of a request for an aggregated group-version, from its path
/// alone as k8s.io/apiserver's `RequestInfoFactory` derives them (the aggregated server's
/// resources are not known here): `/apis/<g>/<v>` itself is a non-resource request;
/// `[namespaces/<ns>/]<resource>[/<name>[/<subresource>]]` below it a resource request whose
/// verb comes from the method (`get` without a name is `list`, `watch` with `watch=true`;
/// `delete` without a name is `deletecollection`).
pub fn attributes(method: &Method, path: &str, q: &Query) -> Attributes {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let non_resource = || Attributes {
        verb: method.as_str().to_ascii_lowercase(),
        group: String::new(),
        version: String::new(),
        resource: String::new(),
        subresource: String::new(),
        namespace: String::new(),
        name: String::new(),
        path: path.to_string(),
        resource_request: false,
        field_selector: String::new(),
    };
    let [first, group, version, rest @ ..] = segs.as_slice() else { return non_resource() };
    if *first != "apis" || rest.is_empty() {
        return non_resource();
    }
    // `namespaces/<ns>` alone names the namespace itself, not a namespace scope.
    let (namespace, rest): (&str, &[&str]) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (ns, tail),
        _ => ("", rest),
    };
    let resource = rest.first().copied().unwrap_or_default();
    let name = rest.get(1).copied().unwrap_or_default();
    let subresource = rest.get(2).copied().unwrap_or_default();
    let watch = matches!(q.get("watch").map(String::as_str), Some("1" | "true" | "True"));
    let verb = match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if name.is_empty() => "deletecollection",
        Method::DELETE => "delete",
        _ if watch => "watch",
        _ if name.is_empty() => "list",
        _ => "get",
    };
    Attributes {
        verb: verb.to_string(),
        group: group.to_string(),
        version: version.to_string(),
        resource: resource.to_string(),
        subresource: subresource.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        path: path.to_string(),
        resource_request: true,
        field_selector: q.get("fieldSelector").cloned().unwrap_or_default(),
    }
}

/// The TLS client settings for an aggregated server: the front proxy's client certificate, and
/// the server verified against `ca_bundle` (PEM) — or not at all when `insecure`.
///
/// # Errors
/// A malformed client certificate or CA bundle, or an empty bundle without `insecure`.
pub fn client_tls(
    front_proxy: &CertPair,
    ca_bundle: &[u8],
    insecure: bool,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(front_proxy.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("front proxy certificate: {e}"))?;
    let key =
        PrivateKeyDer::from_pem_slice(front_proxy.key_pem.as_bytes()).map_err(|e| format!("front proxy key: {e}"))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(crate::endpoints::proxy::AcceptAnyServerCert(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_bundle) {
            roots
                .add(cert.map_err(|e| format!("invalid caBundle: {e}"))?)
                .map_err(|e| format!("invalid caBundle: {e}"))?;
        }
        if roots.is_empty() {
            return Err("no caBundle to verify the aggregated server with".into());
        }
        builder.with_root_certificates(roots)
    };
    let mut cfg = builder.with_client_auth_cert(certs, key).map_err(|e| e.to_string())?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Where an APIService's requests go: `host:port` of a ready endpoint, the TLS name to verify,
/// and the TLS settings.
pub(crate) struct Target {
    /// `host:port` to connect to.
    pub host: String,
    /// `<service>.<namespace>.svc`, the name a `caBundle`-verified certificate must carry.
    pub server_name: String,
    /// TLS client settings.
    pub tls: Arc<rustls::ClientConfig>,
}

/// Resolves the target of a service-backed APIService; `insecure_always` skips verification
/// whatever the APIService says (the availability check does, as kube-aggregator's).
pub(crate) fn target(state: &AppState, api_service: &Value, insecure_always: bool) -> Result<Target, String> {
    let spec = &api_service["spec"];
    let svc = &spec["service"];
    let (ns, name) = (svc["namespace"].as_str().unwrap_or_default(), svc["name"].as_str().unwrap_or_default());
    let port = svc["port"].as_i64().unwrap_or(443) as i32;
    let host = resolve_service_endpoint(state, ns, name, ServicePortRef::Number(port)).map_err(|e| e.message)?;
    let ca = spec["caBundle"]
        .as_str()
        .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap_or_default())
        .unwrap_or_default();
    let insecure = insecure_always || spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false);
    let tls = client_tls(&state.aggregator.front_proxy, &ca, insecure)?;
    Ok(Target { host, server_name: format!("{name}.{ns}.svc"), tls })
}

/// Sends one HTTP/1.1 request to `target` over TLS and returns the answer (body streaming).
pub(crate) async fn send(
    target: &Target,
    req: axum::http::Request<Body>,
) -> Result<axum::http::Response<hyper::body::Incoming>, String> {
    let tcp = tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect(target.host.as_str()))
        .await
        .map_err(|_| format!("dial tcp {}: i/o timeout", target.host))?
        .map_err(|e| format!("dial tcp {}: {e}", target.host))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(target.server_name.clone()).map_err(|e| format!("invalid server name: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(target.tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(req).await.map_err(|e| e.to_string())
}

/// Sets the front proxy's identity headers for `user` on `req` (`transport.SetAuthProxyHeaders`).
pub(crate) fn set_auth_proxy_headers(headers: &mut axum::http::HeaderMap, user: &RequestUser) {
    if let Ok(v) = HeaderValue::from_str(&user.name) {
        headers.insert("X-Remote-User", v);
    }
    for g in &user.groups {
        if let Ok(v) = HeaderValue::from_str(g) {
            headers.append("X-Remote-Group", v);
        }
    }
}

fn text(code: StatusCode, message: &str) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("X-Content-Type-Options", "nosniff")
        .body(Body::from(format!("{message}\n")))
        .unwrap_or_default()
}

/// Proxies one authorized request to the aggregated server of `api_service`.
pub async fn serve(
    state: &Arc<AppState>,
    parts: &Parts,
    body: Body,
    api_service: &Value,
    user: &RequestUser,
) -> Response {
    let name = crate::util::meta_str(api_service, "name");
    if !super::is_available(api_service) {
        return text(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
    }
    let target = match target(state, api_service, false) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(apiservice = name, error = %e, "no endpoint for the aggregated API");
            return text(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
        }
    };
    let path_and_query = parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_string(), |p| p.to_string());
    let mut req = axum::http::Request::builder().method(parts.method.clone()).uri(&path_and_query);
    if let Some(headers) = req.headers_mut() {
        for (k, v) in &parts.headers {
            let n = k.as_str();
            let dropped = HOP_BY_HOP.contains(&n)
                || k == header::AUTHORIZATION
                || k == header::HOST
                || n.starts_with("x-remote-")
                || n.starts_with("impersonate-");
            if !dropped {
                headers.append(k, v.clone());
            }
        }
        set_auth_proxy_headers(headers, user);
        if let Ok(h) = HeaderValue::from_str(&target.host) {
            headers.insert(header::HOST, h);
        }
    }
    let req = match req.body(body) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    match send(&target, req).await {
        Ok(resp) => {
            let (head, body) = resp.into_parts();
            let mut out = Response::builder().status(head.status);
            for (k, v) in &head.headers {
                if !HOP_BY_HOP.contains(&k.as_str()) {
                    out = out.header(k, v);
                }
            }
            out.body(Body::new(body.map_err(axum::Error::new))).unwrap_or_default()
        }
        Err(e) => {
            tracing::warn!(apiservice = name, error = %e, "proxying to the aggregated API");
            text(StatusCode::SERVICE_UNAVAILABLE, &format!("error trying to reach service: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, path: &str, q: &[(&str, &str)]) -> Attributes {
        let q: Query = q.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        attributes(&method, path, &q)
    }

    #[test]
    fn a_group_version_path_and_its_openapi_document_are_non_resource_requests() {
        let a = attrs(Method::GET, "/apis/wardle.example.com/v1alpha1", &[]);
        assert!(!a.resource_request);
        assert_eq!(a.verb, "get");
        let a = attrs(Method::GET, "/openapi/v3/apis/wardle.example.com/v1alpha1", &[]);
        assert!(!a.resource_request);
        assert_eq!(a.path, "/openapi/v3/apis/wardle.example.com/v1alpha1");
    }

    #[test]
    fn verbs_come_from_the_method_and_the_presence_of_a_name() {
        let a = attrs(Method::GET, "/apis/w.io/v1/namespaces/ns/flunders", &[]);
        assert_eq!((a.verb.as_str(), a.resource.as_str(), a.namespace.as_str()), ("list", "flunders", "ns"));
        let a = attrs(Method::GET, "/apis/w.io/v1/namespaces/ns/flunders", &[("watch", "true")]);
        assert_eq!(a.verb, "watch");
        let a = attrs(Method::GET, "/apis/w.io/v1/namespaces/ns/flunders/f/status", &[]);
        assert_eq!((a.verb.as_str(), a.name.as_str(), a.subresource.as_str()), ("get", "f", "status"));
        let a = attrs(Method::DELETE, "/apis/w.io/v1/fischers", &[]);
        assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("deletecollection", ""));
        let a = attrs(Method::POST, "/apis/w.io/v1/fischers", &[]);
        assert_eq!(a.verb, "create");
        assert_eq!(attrs(Method::GET, "/apis/w.io/v1/namespaces/ns", &[]).resource, "namespaces");
    }

    #[test]
    fn the_front_proxy_names_the_user_and_each_group() {
        let mut h = axum::http::HeaderMap::new();
        let user = RequestUser { name: "jane".into(), groups: vec!["dev".into(), "system:authenticated".into()] };
        set_auth_proxy_headers(&mut h, &user);
        assert_eq!(h["x-remote-user"], "jane");
        let groups: Vec<_> = h.get_all("x-remote-group").iter().map(|v| v.to_str().unwrap()).collect();
        assert_eq!(groups, vec!["dev", "system:authenticated"]);
    }

    #[test]
    fn a_verified_target_needs_a_ca_bundle_and_an_insecure_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::pki::Pki::load_or_generate(dir.path(), &["localhost".to_string()]).unwrap();
        assert!(client_tls(&pki.front_proxy_client, b"", false).is_err());
        assert!(client_tls(&pki.front_proxy_client, b"", true).is_ok());
        assert!(client_tls(&pki.front_proxy_client, pki.ca.cert_pem.as_bytes(), false).is_ok());
    }
}
