//! Node join endpoints, k3s-style: the join token file and the two routes that let
//! `skiff agent --token` on another machine obtain a node client certificate.
//!
//! - `<data-dir>/token` (mode 0600): the cluster's join token, created on first start as
//!   `K10<sha256 of the CA PEM>::node:<secret>` ([`skiff_auth::authn::node_join::JoinToken`]).
//! - `GET /cacerts` ([`CACERTS_PATH`], no authentication, as k3s): the cluster CA PEM. The agent
//!   checks its hash against the token before trusting the server.
//! - `POST /v1-skiff/node-certificate` ([`NODE_CERTIFICATE_PATH`]) with
//!   `Authorization: Bearer <token or its secret>` and a JSON `NodeJoinRequest`: answers a
//!   `NodeJoinResponse` with a certificate for `CN=system:node:<name>, O=system:nodes` signed by
//!   the cluster CA; a wrong token is a 401 `Status`.
//!
//! The agent side of the exchange is [`join_cluster`]; [`node_kubeconfig`] renders what the agent
//! writes and uses afterwards.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use skiff_apimachinery::ApiError;

use crate::pki::write_private;
use skiff_auth::authn::node_join::{self, JoinToken, NodeJoinRequest, NodeJoinResponse};

use crate::endpoints::responsewriters::{error_response, json_response};
use crate::pki::Pki;

/// File name of the join token under the data directory.
pub const TOKEN_FILE: &str = "token";
/// Path of the unauthenticated CA endpoint.
pub const CACERTS_PATH: &str = "/cacerts";
/// Path of the node certificate endpoint.
pub const NODE_CERTIFICATE_PATH: &str = "/v1-skiff/node-certificate";

/// Path of the join token file of a data directory.
pub fn token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(TOKEN_FILE)
}

/// Reads the join token of `data_dir`, creating it (mode 0600) on first start. A token whose CA
/// hash no longer matches `ca_pem` (the CA was regenerated) keeps its secret and gets the new
/// hash.
///
/// # Errors
/// The file cannot be read or written, or holds something that is not a join token.
pub fn load_or_create_token(data_dir: &Path, ca_pem: &str) -> Result<JoinToken> {
    let path = token_path(data_dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mut token = JoinToken::parse(&text)
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("reading the join token {}", path.display()))?;
            if token.verify_ca(ca_pem).is_err() || token.ca_hash.is_none() {
                token.ca_hash = Some(node_join::ca_hash(ca_pem));
                write_private(&path, &format!("{token}\n"))?;
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = JoinToken::generate(ca_pem);
            write_private(&path, &format!("{token}\n"))?;
            tracing::info!(path = %path.display(), "created the node join token");
            Ok(token)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

struct JoinState {
    token: JoinToken,
    ca_cert_pem: String,
    ca_key_pem: String,
}

/// The join routes ([`CACERTS_PATH`], [`NODE_CERTIFICATE_PATH`]) for the API server's router;
/// loads or creates `<data_dir>/token` ([`load_or_create_token`]).
///
/// # Errors
/// As [`load_or_create_token`].
pub fn router(data_dir: &Path, pki: &Pki) -> Result<axum::Router> {
    let token = load_or_create_token(data_dir, &pki.ca.cert_pem)?;
    let state = Arc::new(JoinState { token, ca_cert_pem: pki.ca.cert_pem.clone(), ca_key_pem: pki.ca.key_pem.clone() });
    Ok(axum::Router::new()
        .route(CACERTS_PATH, axum::routing::get(cacerts))
        .route(NODE_CERTIFICATE_PATH, axum::routing::post(node_certificate))
        .with_state(state))
}

async fn cacerts(State(state): State<Arc<JoinState>>) -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/x-pem-file"))], state.ca_cert_pem.clone())
        .into_response()
}

/// The secret a request presents: `Authorization: Bearer <full token or secret>`. A full token
/// must also name this cluster's CA.
fn presented_secret(headers: &HeaderMap, ours: &JoinToken) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credential) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let presented = JoinToken::parse(credential).ok()?;
    if presented.ca_hash.is_some() && presented.ca_hash != ours.ca_hash {
        return None;
    }
    Some(presented.secret)
}

async fn node_certificate(State(state): State<Arc<JoinState>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(secret) = presented_secret(&headers, &state.token) else {
        return error_response(&ApiError::unauthorized());
    };
    // Check the secret before looking at the body, so a wrong token is always a 401.
    if !node_join::secrets_match(&state.token.secret, &secret) {
        return error_response(&ApiError::unauthorized());
    }
    let request: NodeJoinRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error_response(&ApiError::bad_request(format!("invalid node join request: {e}"))),
    };
    match node_join::handle_node_join(&state.token, &secret, &state.ca_cert_pem, &state.ca_key_pem, &request) {
        Ok(resp) => {
            tracing::info!(node = %request.node_name, "issued a node client certificate");
            json_response(StatusCode::OK, &serde_json::to_value(&resp).unwrap_or_default())
        }
        Err(e) => error_response(&e),
    }
}

/// What an agent holds after joining: the CA, its certificate and its private key (PEM).
#[derive(Debug, Clone)]
pub struct NodeCredentials {
    /// The cluster CA bundle (verifies the API server).
    pub ca_pem: String,
    /// The node client certificate (`CN=system:node:<name>, O=system:nodes`).
    pub cert_pem: String,
    /// The node's private key (generated by the agent; never sent).
    pub key_pem: String,
}

fn http_err(e: axum::http::Error) -> anyhow::Error {
    anyhow::anyhow!("building the request: {e}")
}

/// Agent side of the join: fetches `/cacerts` from `server` (TLS unverified at this point),
/// checks it against the token's CA hash, then — now verifying the server with that CA —
/// presents the token and a CSR for `node_name` and returns the signed certificate with the key.
///
/// # Errors
/// The server is unreachable, its CA does not match the token (a bare secret pins nothing),
/// the token is refused (the API's 401 Status), or the answer is malformed.
pub async fn join_cluster(server: &str, token: &str, node_name: &str) -> Result<NodeCredentials> {
    join_cluster_as(server, token, node_name, false).await
}

/// [`join_cluster`], asking for the simulated-node agent identity when `simulated`
/// ([`node_join::join_identity`]): what `skiff agent --simulated-nodes` uses.
///
/// # Errors
/// As [`join_cluster`].
pub async fn join_cluster_as(server: &str, token: &str, node_name: &str, simulated: bool) -> Result<NodeCredentials> {
    let token = JoinToken::parse(token).map_err(anyhow::Error::msg)?;
    let uri: axum::http::Uri = server.parse().with_context(|| format!("invalid server URL {server:?}"))?;

    // 1. The CA, unverified; pinned by the token's hash.
    let mut insecure = kube::Config::new(uri.clone());
    insecure.accept_invalid_certs = true;
    let client = kube::Client::try_from(insecure).context("building the bootstrap client")?;
    let req = axum::http::Request::get(CACERTS_PATH).body(Vec::new()).map_err(http_err)?;
    let ca_pem = client.request_text(req).await.with_context(|| format!("fetching {server}{CACERTS_PATH}"))?;
    token.verify_ca(&ca_pem).map_err(anyhow::Error::msg)?;
    if token.ca_hash.is_none() {
        tracing::warn!("the join token has no CA hash: the server's CA is trusted on first use");
    }
    let roots: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(ca_pem.as_bytes())
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .context("parsing the server's CA bundle")?;
    if roots.is_empty() {
        anyhow::bail!("the server's CA bundle holds no certificate");
    }

    // 2. The certificate, over verified TLS.
    let (mut join_request, key_pem) = node_join::build_join_request(node_name).map_err(anyhow::Error::msg)?;
    join_request.simulated = simulated;
    let mut verified = kube::Config::new(uri);
    verified.root_cert = Some(roots);
    let bearer =
        HeaderValue::from_str(&format!("Bearer {}", token.secret)).context("the token is not a header value")?;
    verified.headers.push((header::AUTHORIZATION, bearer));
    let client = kube::Client::try_from(verified).context("building the join client")?;
    let body = serde_json::to_vec(&join_request)?;
    let req = axum::http::Request::post(NODE_CERTIFICATE_PATH)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(http_err)?;
    let resp: NodeJoinResponse =
        client.request(req).await.with_context(|| format!("requesting a node certificate from {server}"))?;
    Ok(NodeCredentials { ca_pem: resp.ca, cert_pem: resp.certificate, key_pem })
}

/// A kubeconfig for a joined node (user `system:node:<name>`) against `server`, everything inline.
pub fn node_kubeconfig(server: &str, creds: &NodeCredentials) -> String {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: skiff\ncontexts:\n- context:\n    cluster: skiff\n    user: node\n  name: skiff\ncurrent-context: skiff\npreferences: {{}}\nusers:\n- name: node\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n",
        ca = b64(&creds.ca_pem),
        cert = b64(&creds.cert_pem),
        key = b64(&creds.key_pem),
    )
}

/// Writes [`node_kubeconfig`] to `path`, mode 0600.
///
/// # Errors
/// The file cannot be written.
pub fn write_node_kubeconfig(path: &Path, server: &str, creds: &NodeCredentials) -> Result<()> {
    write_private(path, &node_kubeconfig(server, creds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_created_once_with_mode_0600_and_pins_the_ca() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::load_or_generate(&dir.path().join("tls"), &["localhost".to_string()]).unwrap();
        let first = load_or_create_token(dir.path(), &pki.ca.cert_pem).unwrap();
        let second = load_or_create_token(dir.path(), &pki.ca.cert_pem).unwrap();
        assert_eq!(first, second);
        assert!(first.to_string().starts_with(&format!("K10{}::node:", node_join::ca_hash(&pki.ca.cert_pem))));
        let mode = std::fs::metadata(token_path(dir.path())).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_bearer_token_for_another_cluster_is_not_accepted() {
        let ours = JoinToken::generate("ca-one");
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {ours}")).unwrap());
        assert_eq!(presented_secret(&headers, &ours), Some(ours.secret.clone()));
        let other = JoinToken { ca_hash: Some(node_join::ca_hash("ca-two")), secret: ours.secret.clone() };
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {other}")).unwrap());
        assert_eq!(presented_secret(&headers, &ours), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(&format!("Basic {}", ours.secret)).unwrap());
        assert_eq!(presented_secret(&headers, &ours), None);
    }

    #[tokio::test]
    async fn an_agent_joins_with_the_token_and_a_wrong_token_is_refused() {
        let h = crate::testing::TestApiServer::start_with_store(skiff_store::Options::default(), |config| {
            config.rbac = true;
        })
        .await;
        let (dir, api) = (h.dir, h.server);
        let token = std::fs::read_to_string(token_path(dir.path())).unwrap();

        let wrong = format!("{}::node:{}", token.trim().split("::").next().unwrap(), "0".repeat(32));
        let err = join_cluster(api.url(), &wrong, "worker-1").await.unwrap_err();
        assert!(matches!(err.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 401), "{err:#}");
        let impostor = format!("K10{}::node:x", "0".repeat(64));
        let err = join_cluster(api.url(), &impostor, "worker-1").await.unwrap_err();
        assert!(format!("{err:#}").contains("does not match"), "{err:#}");

        let creds = join_cluster(api.url(), token.trim(), "worker-1").await.unwrap();
        let kubeconfig_path = dir.path().join("agent/kubelet.kubeconfig");
        write_node_kubeconfig(&kubeconfig_path, api.url(), &creds).unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(&kubeconfig_path).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        // The Node authorizer lets the node read its own Node (not registered yet: 404), not
        // list every Node; RBAC gives it no ClusterRoles.
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
        assert!(nodes.get_opt("worker-1").await.unwrap().is_none());
        let err = nodes.list(&Default::default()).await.unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("only its own Node")),
            "{err:#}"
        );
        let roles: kube::Api<k8s_openapi::api::rbac::v1::ClusterRole> = kube::Api::all(client);
        let err = roles.list(&Default::default()).await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 403), "{err:#}");
        api.shutdown(std::time::Duration::from_secs(1)).await;
    }
}
