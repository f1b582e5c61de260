//! Authentication: who is making a request
//! (<https://kubernetes.io/docs/reference/access-authn-authz/authentication/>).
//!
//! [`AuthenticatorChain`] tries its authenticators in order and the first success wins; a
//! presented credential that no authenticator accepts (a bad token, an untrusted certificate)
//! fails the request with 401 even when anonymous access is on, as kube-apiserver does. A request
//! with no credential at all is anonymous (`system:anonymous` in `system:unauthenticated`) when
//! [`AnonymousConfig`] allows it for the path, otherwise 401. Every authenticated user gets the
//! group `system:authenticated`. HTTP basic authentication is not offered (Kubernetes removed it
//! in 1.19).
//!
//! - [`x509`]: client certificates signed by the cluster CA (CN → user, O → groups);
//! - [`token_file`]: `--token-auth-file` static tokens;
//! - [`serviceaccount`]: service-account JWTs (ES256) and the [`serviceaccount::TokenIssuer`]
//!   behind the TokenRequest subresource;
//! - [`impersonation`]: `Impersonate-User`/`-Group`/`-Uid`/`-Extra-*` headers;
//! - [`node_join`]: k3s-style join tokens exchanged for node client certificates.

pub mod impersonation;
pub mod node_join;
pub mod serviceaccount;
pub mod token_file;
pub mod x509;

mod jwt_crypto;

use std::sync::Arc;

use hyper::HeaderMap;
use rustls::pki_types::CertificateDer;
use skiff_apimachinery::ApiError;

use crate::user::{ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, UserInfo};

/// What authentication looks at in a request.
#[derive(Debug, Clone, Copy)]
pub struct AuthnRequest<'a> {
    /// The request headers (`Authorization`).
    pub headers: &'a HeaderMap,
    /// The URL path, for per-path anonymous access.
    pub path: &'a str,
    /// The client certificate chain the TLS handshake received, leaf first (empty when none).
    pub client_certificates: &'a [CertificateDer<'static>],
}

/// Why a request could not be authenticated. Always answered with 401 `Unauthorized` (the
/// reasons are for logs, never for the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Unauthorized: {}", .reasons.join("; "))]
pub struct AuthnError {
    /// One reason per authenticator that rejected a presented credential.
    pub reasons: Vec<String>,
}

impl AuthnError {
    /// An error with one reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self { reasons: vec![reason.into()] }
    }

    /// The 401 answer.
    pub fn to_api_error(&self) -> ApiError {
        ApiError::unauthorized()
    }
}

/// One way of authenticating requests (`authenticator.Request`).
pub trait Authenticator: Send + Sync {
    /// `Ok(Some(user))` on success, `Ok(None)` when the request carries no credential of this
    /// kind, `Err` when it carries one that is invalid.
    ///
    /// # Errors
    /// The credential is present but invalid (expired, bad signature, unknown token, …).
    fn authenticate(&self, req: &AuthnRequest<'_>) -> Result<Option<UserInfo>, AuthnError>;
}

/// One way of authenticating bearer tokens (`authenticator.Token`).
pub trait TokenAuthenticator: Send + Sync {
    /// `Ok(Some(user))` when the token is valid, `Ok(None)` when it is not this authenticator's
    /// kind of token (e.g. a JWT from another issuer), `Err` when it is but is invalid.
    ///
    /// # Errors
    /// The token is of this kind but invalid.
    fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthnError>;
}

/// The bearer token of `Authorization: Bearer <token>`; `Ok(None)` without one.
///
/// # Errors
/// `Authorization: Bearer` with an empty token.
pub fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, AuthnError> {
    let Some(value) = headers.get(hyper::header::AUTHORIZATION) else { return Ok(None) };
    let Ok(value) = value.to_str() else { return Ok(None) };
    let value = value.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next().unwrap_or_default();
    let Some(token) = parts.next() else { return Ok(None) };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Ok(None);
    }
    if token.is_empty() {
        return Err(AuthnError::new("invalid bearer token"));
    }
    Ok(Some(token))
}

/// Authenticates `Authorization: Bearer` tokens with a list of token authenticators (token
/// file, service-account JWTs, …); a token none of them accepts is an error.
#[derive(Clone, Default)]
pub struct BearerTokenAuthenticator {
    tokens: Vec<Arc<dyn TokenAuthenticator>>,
}

impl BearerTokenAuthenticator {
    /// A bearer-token authenticator over `tokens`, tried in order.
    pub fn new(tokens: Vec<Arc<dyn TokenAuthenticator>>) -> Self {
        Self { tokens }
    }
}

impl Authenticator for BearerTokenAuthenticator {
    fn authenticate(&self, req: &AuthnRequest<'_>) -> Result<Option<UserInfo>, AuthnError> {
        let Some(token) = bearer_token(req.headers)? else { return Ok(None) };
        let mut reasons = Vec::new();
        for t in &self.tokens {
            match t.authenticate_token(token) {
                Ok(Some(user)) => return Ok(Some(user)),
                Ok(None) => {}
                Err(e) => reasons.extend(e.reasons),
            }
        }
        if reasons.is_empty() {
            reasons.push("invalid bearer token".into());
        }
        Err(AuthnError { reasons })
    }
}

/// Anonymous access (`--anonymous-auth`, and the `anonymous.conditions` of kube-apiserver's
/// AuthenticationConfiguration).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnonymousConfig {
    /// Whether requests without credentials may proceed as `system:anonymous`.
    pub enabled: bool,
    /// When set, anonymous access is limited to these exact paths (e.g. `/healthz`, `/livez`,
    /// `/readyz`, `/version`); other credential-less requests get 401.
    pub paths: Option<Vec<String>>,
}

impl AnonymousConfig {
    /// Anonymous access only to the health and version endpoints — skiff's default: everything
    /// else answers 401 to a request without credentials.
    pub fn health_and_version_only() -> Self {
        Self {
            enabled: true,
            paths: Some(["/healthz", "/livez", "/readyz", "/version"].iter().map(|s| s.to_string()).collect()),
        }
    }

    fn allows(&self, path: &str) -> bool {
        self.enabled && self.paths.as_ref().is_none_or(|p| p.iter().any(|allowed| allowed == path))
    }
}

/// Authenticators tried in order; first success wins.
#[derive(Clone, Default)]
pub struct AuthenticatorChain {
    authenticators: Vec<Arc<dyn Authenticator>>,
    anonymous: AnonymousConfig,
}

impl AuthenticatorChain {
    /// A chain of `authenticators` with anonymous access off.
    pub fn new(authenticators: Vec<Arc<dyn Authenticator>>) -> Self {
        Self { authenticators, anonymous: AnonymousConfig::default() }
    }

    /// Sets anonymous access.
    pub fn with_anonymous(mut self, anonymous: AnonymousConfig) -> Self {
        self.anonymous = anonymous;
        self
    }

    /// Authenticates a request: the first authenticator that accepts it names the user (plus
    /// `system:authenticated`); any rejected credential → 401; no credential → anonymous when
    /// allowed for the path, else 401.
    ///
    /// # Errors
    /// [`AuthnError`]: answer 401 via [`AuthnError::to_api_error`].
    pub fn authenticate(&self, req: &AuthnRequest<'_>) -> Result<UserInfo, AuthnError> {
        let mut reasons = Vec::new();
        for a in &self.authenticators {
            match a.authenticate(req) {
                Ok(Some(mut user)) => {
                    add_authenticated_group(&mut user);
                    return Ok(user);
                }
                Ok(None) => {}
                Err(e) => reasons.extend(e.reasons),
            }
        }
        if !reasons.is_empty() {
            return Err(AuthnError { reasons });
        }
        if self.anonymous.allows(req.path) {
            return Ok(UserInfo::anonymous());
        }
        Err(AuthnError::new("no credentials"))
    }
}

/// Adds `system:authenticated` to a non-anonymous user that has neither it nor
/// `system:unauthenticated` (`AuthenticatedGroupAdder`).
pub fn add_authenticated_group(user: &mut UserInfo) {
    if user.name == ANONYMOUS || user.in_group(ALL_AUTHENTICATED) || user.in_group(ALL_UNAUTHENTICATED) {
        return;
    }
    user.groups.push(ALL_AUTHENTICATED.into());
}

/// The `SelfSubjectReview` answer (`kubectl auth whoami`): the request body with
/// `status.userInfo` set to the requesting user.
pub fn self_subject_review(user: &UserInfo) -> serde_json::Value {
    serde_json::json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": user.to_json()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Result<Option<UserInfo>, AuthnError>);
    impl Authenticator for Fixed {
        fn authenticate(&self, _req: &AuthnRequest<'_>) -> Result<Option<UserInfo>, AuthnError> {
            self.0.clone()
        }
    }

    fn req<'a>(headers: &'a HeaderMap, path: &'a str) -> AuthnRequest<'a> {
        AuthnRequest { headers, path, client_certificates: &[] }
    }

    #[test]
    fn first_success_wins_and_gets_system_authenticated() {
        let chain = AuthenticatorChain::new(vec![
            Arc::new(Fixed(Ok(None))),
            Arc::new(Fixed(Ok(Some(UserInfo::new("jane", ["dev"]))))),
            Arc::new(Fixed(Ok(Some(UserInfo::new("other", Vec::<String>::new()))))),
        ]);
        let h = HeaderMap::new();
        let u = chain.authenticate(&req(&h, "/api")).unwrap();
        assert_eq!(u.name, "jane");
        assert_eq!(u.groups, vec!["dev", "system:authenticated"]);
    }

    #[test]
    fn a_rejected_credential_is_401_even_with_anonymous_enabled() {
        let chain = AuthenticatorChain::new(vec![Arc::new(Fixed(Err(AuthnError::new("bad token"))))])
            .with_anonymous(AnonymousConfig { enabled: true, paths: None });
        let h = HeaderMap::new();
        let e = chain.authenticate(&req(&h, "/version")).unwrap_err();
        assert_eq!(e.reasons, vec!["bad token"]);
        assert_eq!(e.to_api_error().code, 401);
    }

    #[test]
    fn requests_without_credentials_are_anonymous_only_where_allowed() {
        let h = HeaderMap::new();
        let off = AuthenticatorChain::new(vec![Arc::new(Fixed(Ok(None)))]);
        assert!(off.authenticate(&req(&h, "/version")).is_err());
        let limited = off.clone().with_anonymous(AnonymousConfig::health_and_version_only());
        let anon = limited.authenticate(&req(&h, "/version")).unwrap();
        assert_eq!(anon.name, "system:anonymous");
        assert_eq!(anon.groups, vec!["system:unauthenticated"]);
        assert!(limited.authenticate(&req(&h, "/api/v1/pods")).is_err());
        let open = off.with_anonymous(AnonymousConfig { enabled: true, paths: None });
        assert!(open.authenticate(&req(&h, "/api/v1/pods")).is_ok());
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let cases = [
            ("Bearer abc", Ok(Some("abc"))),
            ("bearer abc", Ok(Some("abc"))),
            ("  Bearer abc  ", Ok(Some("abc"))),
            ("Basic dXNlcjpwYXNz", Ok(None)),
            ("Bearer", Ok(None)),
            ("Bearer  abc", Err(())),
        ];
        for (value, want) in cases {
            let mut h = HeaderMap::new();
            h.insert(hyper::header::AUTHORIZATION, value.parse().unwrap());
            assert_eq!(bearer_token(&h).map_err(|_| ()), want, "{value:?}");
        }
        assert_eq!(bearer_token(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn an_unknown_bearer_token_is_an_error() {
        struct Never;
        impl TokenAuthenticator for Never {
            fn authenticate_token(&self, _t: &str) -> Result<Option<UserInfo>, AuthnError> {
                Ok(None)
            }
        }
        let b = BearerTokenAuthenticator::new(vec![Arc::new(Never)]);
        let mut h = HeaderMap::new();
        h.insert(hyper::header::AUTHORIZATION, "Bearer x".parse().unwrap());
        assert_eq!(b.authenticate(&req(&h, "/")).unwrap_err().reasons, vec!["invalid bearer token"]);
        assert_eq!(b.authenticate(&req(&HeaderMap::new(), "/")).unwrap(), None);
    }
}
