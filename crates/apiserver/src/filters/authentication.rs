//! Request authentication as kube-apiserver does it
//! (<https://kubernetes.io/docs/reference/access-authn-authz/authentication/>), tried in order,
//! first success wins:
//!
//! 1. the verified X.509 client certificate of the TLS connection (CN → user, O → groups);
//! 2. `Authorization: Bearer` tokens: the static token file (`--token-auth-file`, CSV
//!    `token,user,uid,"group1,group2"`), then service-account JWTs (ES256) signed by this server;
//! 3. no credential at all: anonymous, which [`authenticate`] lets through only to `/healthz`,
//!    `/livez`, `/readyz` and `/version` (`--anonymous-auth=true`, skiff's default); with
//!    `--anonymous-auth=false` every request without a credential is 401.
//!
//! A presented but invalid credential is 401 even on the public paths. HTTP basic
//! authentication is not offered (Kubernetes removed it in 1.19).
//!
//! Also here: the service-account signing key (`<data-dir>/tls/service-account.key`, a P-256
//! PKCS#8 PEM generated on first start and reused), the TokenRequest subresource
//! (`POST serviceaccounts/<name>/token`, `kubectl create token`) and TokenReview
//! (`authentication.k8s.io/v1`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use async_trait::async_trait;
use axum::http::request::Parts;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;
use skiff_auth::UserInfo;
use skiff_auth::authn::serviceaccount::{self, ServiceAccountTokenGetter, TokenIssuer};
use skiff_auth::authn::token_file::TokenFileAuthenticator;
use skiff_auth::authn::{
    Authenticator as _, AuthnRequest, BearerTokenAuthenticator, TokenAuthenticator, add_authenticated_group,
};

use crate::auth::{Authenticator, CertificateAuthenticator, PeerIdentity, RequestUser, is_public_path};
use crate::registry::virtual_resources::{VirtualHandler, VirtualRequest, VirtualResource};
use crate::storage::listers::cache_get;
use crate::{AppState, StateSlot};

/// Authentication settings of the API server (kube-apiserver's flags of the same names).
#[derive(Debug, Clone)]
pub struct AuthnOptions {
    /// `--token-auth-file`: static bearer tokens (CSV).
    pub token_auth_file: Option<PathBuf>,
    /// `--anonymous-auth`: requests without credentials may reach the public paths (`/healthz`,
    /// `/livez`, `/readyz`, `/version`); when false they are 401 everywhere.
    pub anonymous_auth: bool,
    /// `--service-account-issuer` (`iss` of the tokens this server signs).
    pub service_account_issuer: String,
    /// `--api-audiences` (empty: the issuer).
    pub api_audiences: Vec<String>,
    /// `--service-account-max-token-expiration`, seconds (`None`: no cap).
    pub max_token_expiration_seconds: Option<i64>,
}

impl Default for AuthnOptions {
    fn default() -> Self {
        Self {
            token_auth_file: None,
            anonymous_auth: true,
            service_account_issuer: serviceaccount::DEFAULT_ISSUER.to_string(),
            api_audiences: Vec::new(),
            max_token_expiration_seconds: None,
        }
    }
}

/// `--service-account-lookup`: token validation checks the service account and bound objects
/// in the watch caches.
struct CacheTokenGetter {
    slot: StateSlot,
}

impl CacheTokenGetter {
    fn get(&self, storage: &str, ns: &str, name: &str) -> Option<Value> {
        let state = self.slot.get()?;
        cache_get(&state, storage, ns, name)
    }
}

impl ServiceAccountTokenGetter for CacheTokenGetter {
    fn service_account(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get("serviceaccounts", namespace, name)
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get("pods", namespace, name)
    }
    fn secret(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get("secrets", namespace, name)
    }
    fn node(&self, name: &str) -> Option<Value> {
        self.get("nodes", "", name)
    }
}

/// Loads `<dir>/service-account.key`, generating it (mode 0600) on first start.
///
/// # Errors
/// The file cannot be read or written, or key generation fails.
pub fn load_or_generate_signing_key(dir: &Path) -> Result<String> {
    let path = dir.join("service-account.key");
    if path.exists() {
        return std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()));
    }
    let pem = serviceaccount::generate_signing_key_pem().map_err(anyhow::Error::msg)?;
    crate::pki::write_private(&path, &pem)?;
    Ok(pem)
}

/// The authentication chain of [`crate::filters::authentication`]'s module documentation.
pub struct RequestAuthenticator {
    bearer: BearerTokenAuthenticator,
    anonymous: bool,
}

impl Authenticator for RequestAuthenticator {
    fn authenticate(&self, parts: &Parts, peer: &PeerIdentity) -> Option<RequestUser> {
        self.authenticate_request(parts, peer).ok().flatten()
    }

    fn authenticate_request(&self, parts: &Parts, peer: &PeerIdentity) -> Result<Option<RequestUser>, ApiError> {
        if let Some(u) = CertificateAuthenticator.authenticate(parts, peer) {
            return Ok(Some(u));
        }
        let req = AuthnRequest { headers: &parts.headers, path: parts.uri.path(), client_certificates: &[] };
        match self.bearer.authenticate(&req) {
            Ok(Some(mut user)) => {
                add_authenticated_group(&mut user);
                Ok(Some(RequestUser { name: user.name, groups: user.groups }))
            }
            Ok(None) if self.anonymous => Ok(None),
            Ok(None) => Err(ApiError::unauthorized()),
            Err(e) => {
                tracing::debug!(path = parts.uri.path(), error = %e, "authentication failed");
                Err(ApiError::unauthorized())
            }
        }
    }
}

/// What [`setup`] builds: the request authenticator, the token issuer and the handlers of
/// `serviceaccounts/token` and `tokenreviews`.
pub struct TokenAuthn {
    /// The request authenticator (certificate, token file, service-account tokens).
    pub authenticator: Arc<RequestAuthenticator>,
    /// Signs service-account tokens.
    pub issuer: Arc<TokenIssuer>,
    /// TokenRequest and TokenReview.
    pub resources: Vec<VirtualResource>,
}

/// Builds authentication from `opts`: reads the token file, loads or generates the signing key
/// under `tls_dir`, and prepares the TokenRequest/TokenReview handlers (which find the server
/// through `slot`).
///
/// # Errors
/// An unreadable or malformed token file, or an unusable signing key.
pub fn setup(opts: &AuthnOptions, tls_dir: &Path, slot: &StateSlot) -> Result<TokenAuthn> {
    let mut tokens: Vec<Arc<dyn TokenAuthenticator>> = Vec::new();
    if let Some(path) = &opts.token_auth_file {
        let file = TokenFileAuthenticator::load(path).map_err(anyhow::Error::msg)?;
        tracing::info!(path = %path.display(), tokens = file.len(), "loaded the token auth file");
        tokens.push(Arc::new(file));
    }
    let key = load_or_generate_signing_key(tls_dir)?;
    let issuer = Arc::new(
        TokenIssuer::new(&opts.service_account_issuer, opts.api_audiences.clone(), &key)
            .map_err(anyhow::Error::msg)
            .context("loading the service-account signing key")?,
    );
    let getter: Arc<dyn ServiceAccountTokenGetter> = Arc::new(CacheTokenGetter { slot: slot.clone() });
    tokens.push(Arc::new(issuer.authenticator(Vec::new()).with_lookup(getter)));
    let bearer = BearerTokenAuthenticator::new(tokens);
    let authenticator = Arc::new(RequestAuthenticator { bearer: bearer.clone(), anonymous: opts.anonymous_auth });
    let sa_def = crate::resources::Registry::default()
        .get("", "v1", "serviceaccounts")
        .cloned()
        .context("serviceaccounts are not registered")?;
    let token_review_def = crate::registry::virtual_resources::standard_defs()
        .into_iter()
        .find(|d| d.resource == "tokenreviews")
        .context("tokenreviews are not defined")?;
    let resources = vec![
        VirtualResource {
            def: sa_def,
            subresource: Some("token"),
            handler: Arc::new(TokenRequestHandler {
                issuer: issuer.clone(),
                slot: slot.clone(),
                max_expiration_seconds: opts.max_token_expiration_seconds,
            }),
        },
        VirtualResource { def: token_review_def, subresource: None, handler: Arc::new(TokenReviewHandler { bearer }) },
    ];
    Ok(TokenAuthn { authenticator, issuer, resources })
}

/// `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`.
struct TokenRequestHandler {
    issuer: Arc<TokenIssuer>,
    slot: StateSlot,
    max_expiration_seconds: Option<i64>,
}

#[async_trait]
impl VirtualHandler for TokenRequestHandler {
    async fn create(&self, req: &VirtualRequest<'_>, body: Value) -> Result<Value, ApiError> {
        let state = self.slot.get().ok_or_else(|| ApiError::internal("the API server is not running"))?;
        let sa = state.objects.get(req.def, req.namespace, req.name).await?;
        let getter = CacheTokenGetter { slot: self.slot.clone() };
        let mut answer = serviceaccount::token_request(&self.issuer, &sa, &body, &getter, self.max_expiration_seconds)?;
        if answer["metadata"].is_null() {
            answer["metadata"] = json!({});
        }
        answer["metadata"]["name"] = req.name.into();
        answer["metadata"]["namespace"] = req.namespace.into();
        answer["metadata"]["creationTimestamp"] = crate::util::now().into();
        Ok(answer)
    }
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`: is `spec.token` valid, and for whom.
struct TokenReviewHandler {
    bearer: BearerTokenAuthenticator,
}

/// The TokenReview answer for `body` given the authentication outcome.
fn token_review(body: &Value, outcome: Result<Option<UserInfo>, String>) -> Value {
    let mut status = match outcome {
        Ok(Some(mut user)) => {
            add_authenticated_group(&mut user);
            json!({"authenticated": true, "user": user.to_json()})
        }
        Ok(None) => json!({"user": {}, "error": "invalid bearer token"}),
        Err(e) => json!({"user": {}, "error": e}),
    };
    if let Some(a) = body["spec"]["audiences"].as_array().filter(|a| !a.is_empty()) {
        status["audiences"] = Value::Array(a.clone());
    }
    json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": body["spec"].clone(),
        "status": status,
    })
}

#[async_trait]
impl VirtualHandler for TokenReviewHandler {
    async fn create(&self, _req: &VirtualRequest<'_>, body: Value) -> Result<Value, ApiError> {
        let token = body["spec"]["token"].as_str().unwrap_or_default();
        if token.is_empty() {
            return Err(ApiError::invalid(
                "authentication.k8s.io",
                "TokenReview",
                "",
                vec![skiff_apimachinery::status::Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value".into(),
                    field: "spec.token".into(),
                }],
            ));
        }
        let mut headers = axum::http::HeaderMap::new();
        let value = axum::http::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ApiError::bad_request("spec.token is not a valid token"))?;
        headers.insert(axum::http::header::AUTHORIZATION, value);
        let req = AuthnRequest { headers: &headers, path: "/", client_certificates: &[] };
        let outcome = self.bearer.authenticate(&req).map_err(|e| e.to_string());
        Ok(token_review(&body, outcome))
    }
}

/// The authentication filter (`WithAuthentication`): who sent the request, `None` for
/// anonymous. An anonymous request outside the public paths ([`is_public_path`]) is refused with
/// 401 (and counted in the request metrics); a credential that does not verify is refused by the
/// authenticator.
///
/// # Errors
/// 401 Unauthorized as above.
pub fn authenticate(
    state: &AppState,
    parts: &axum::http::request::Parts,
    path: &str,
) -> Result<Option<RequestUser>, ApiError> {
    let peer = parts.extensions.get::<PeerIdentity>().cloned().unwrap_or_default();
    let user = state.authenticator.authenticate_request(parts, &peer)?;
    if user.is_none() && !is_public_path(path) {
        state.metrics.observe_request("", "", "", "", 401, None);
        return Err(ApiError::unauthorized());
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut b = axum::http::Request::builder().uri("/api/v1/pods");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn authn(anonymous: bool, dir: &Path) -> TokenAuthn {
        let file = dir.join("tokens.csv");
        std::fs::write(&file, "s3cret,jane,1001,\"dev,ops\"\n").unwrap();
        let opts = AuthnOptions { token_auth_file: Some(file), anonymous_auth: anonymous, ..Default::default() };
        setup(&opts, &dir.join("tls"), &StateSlot::default()).unwrap()
    }

    #[test]
    fn a_token_file_user_is_authenticated_with_its_groups() {
        let dir = tempfile::tempdir().unwrap();
        let a = authn(true, dir.path());
        let u = a
            .authenticator
            .authenticate_request(&parts(&[("Authorization", "Bearer s3cret")]), &PeerIdentity(None))
            .unwrap()
            .unwrap();
        assert_eq!(u.name, "jane");
        assert_eq!(u.groups, vec!["dev", "ops", "system:authenticated"]);
    }

    #[test]
    fn an_unknown_token_is_401_and_no_credential_is_anonymous_only_when_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let a = authn(true, dir.path());
        let e = a
            .authenticator
            .authenticate_request(&parts(&[("Authorization", "Bearer nope")]), &PeerIdentity(None))
            .unwrap_err();
        assert_eq!(e.code, 401);
        assert_eq!(a.authenticator.authenticate_request(&parts(&[]), &PeerIdentity(None)).unwrap(), None);
        let closed = authn(false, dir.path());
        assert_eq!(closed.authenticator.authenticate_request(&parts(&[]), &PeerIdentity(None)).unwrap_err().code, 401);
    }

    #[test]
    fn a_client_certificate_wins_over_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let a = authn(true, dir.path());
        let peer = PeerIdentity(Some(("system:admin".into(), vec!["system:masters".into()])));
        let u = a.authenticator.authenticate_request(&parts(&[("Authorization", "Bearer s3cret")]), &peer).unwrap();
        assert_eq!(u.unwrap().name, "system:admin");
    }

    #[test]
    fn the_signing_key_is_generated_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_generate_signing_key(dir.path()).unwrap();
        let second = load_or_generate_signing_key(dir.path()).unwrap();
        assert_eq!(first, second);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("service-account.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn service_account_tokens_authenticate_as_the_service_account() {
        let dir = tempfile::tempdir().unwrap();
        let a = authn(true, dir.path());
        let issued = a.issuer.issue("team", "builder", "uid-1", &[], 3600, None).unwrap();
        // No server state: the service-account lookup finds nothing, so the token is refused.
        let bearer = format!("Bearer {}", issued.token);
        let e = a.authenticator.authenticate_request(&parts(&[("Authorization", &bearer)]), &PeerIdentity(None));
        assert_eq!(e.unwrap_err().code, 401);
        let unchecked = a.issuer.authenticator(Vec::new());
        let u = unchecked.authenticate_token(&issued.token).unwrap().unwrap();
        assert_eq!(u.name, "system:serviceaccount:team:builder");
        assert_eq!(u.groups, vec!["system:serviceaccounts", "system:serviceaccounts:team"]);
    }

    #[test]
    fn token_reviews_report_the_user_or_the_error() {
        let body = json!({"spec": {"token": "x", "audiences": ["api"]}});
        let ok = token_review(&body, Ok(Some(UserInfo::new("jane", ["dev"]))));
        assert_eq!(ok["status"]["authenticated"], true);
        assert_eq!(ok["status"]["user"]["username"], "jane");
        assert_eq!(ok["status"]["user"]["groups"], json!(["dev", "system:authenticated"]));
        assert_eq!(ok["status"]["audiences"], json!(["api"]));
        let bad = token_review(&body, Err("expired".into()));
        assert_eq!(bad["status"]["authenticated"], Value::Null);
        assert_eq!(bad["status"]["error"], "expired");
    }
}
