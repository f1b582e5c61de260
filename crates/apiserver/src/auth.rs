//! Authentication seam: who is making a request.
//!
//! The TLS layer verifies client certificates against the cluster CA and attaches the
//! certificate's identity ([`PeerIdentity`]) to every request of the connection; an
//! [`Authenticator`] then turns a request into a [`RequestUser`] (X.509 CN → user, O → groups,
//! as <https://kubernetes.io/docs/reference/access-authn-authz/authentication/#x509-client-certificates>).
//! Token authenticators and authorization plug in here (the security issue).

use axum::http::request::Parts;

/// The authenticated user of a request (`user.Info`), available to handlers as a request
/// extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestUser {
    /// User name, e.g. `system:admin`.
    pub name: String,
    /// Groups, always including `system:authenticated`.
    pub groups: Vec<String>,
}

/// The client's address (the TCP peer of its connection), for the audit log's `sourceIPs`.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub std::net::SocketAddr);

/// The identity of the verified client certificate of a TLS connection, if it presented one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity(pub Option<(String, Vec<String>)>);

/// Decides who a request comes from. `None` means unauthenticated (401 outside the public paths).
pub trait Authenticator: Send + Sync + 'static {
    /// Authenticates one request from its head and the connection's certificate identity.
    fn authenticate(&self, parts: &Parts, peer: &PeerIdentity) -> Option<RequestUser>;

    /// Like [`Authenticator::authenticate`], but may refuse a request with a specific error
    /// (e.g. 403 Forbidden for impersonation the requester may not do). The default never
    /// refuses.
    fn authenticate_request(
        &self,
        parts: &Parts,
        peer: &PeerIdentity,
    ) -> Result<Option<RequestUser>, skiff_apimachinery::ApiError> {
        Ok(self.authenticate(parts, peer))
    }
}

/// Client certificates only: bearer tokens are not accepted until a token authenticator exists.
#[derive(Debug, Default, Clone, Copy)]
pub struct CertificateAuthenticator;

impl Authenticator for CertificateAuthenticator {
    fn authenticate(&self, _parts: &Parts, peer: &PeerIdentity) -> Option<RequestUser> {
        let (name, groups) = peer.0.clone()?;
        let mut groups = groups;
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        Some(RequestUser { name, groups })
    }
}

/// Paths served without authentication (kube-apiserver's `system:public-info-viewer`).
pub fn is_public_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/readyz" | "/version" | "/version/")
        || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
}

/// What a request wants to do, for authorization (`authorizer.Attributes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// Kubernetes verb (get, list, watch, create, update, patch, delete, deletecollection) for
    /// resource requests; the lower-cased HTTP method for non-resource ones.
    pub verb: String,
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (`pods`); empty for non-resource requests.
    pub resource: String,
    /// Subresource (`status`, `log`, …).
    pub subresource: String,
    /// Namespace ("" for cluster-scoped requests).
    pub namespace: String,
    /// Object name ("" for collections).
    pub name: String,
    /// The URL path (for non-resource requests such as `/metrics`).
    pub path: String,
    /// True for requests on resources.
    pub resource_request: bool,
    /// The `fieldSelector` of a list or watch ("" when none): the Node authorizer lets a node
    /// list and watch pods only with `spec.nodeName=<itself>`.
    pub field_selector: String,
}

/// Decides whether a user may do something. The default allows every authenticated request;
/// the RBAC authorizer (security issue) replaces it.
pub trait Authorizer: Send + Sync + 'static {
    /// `Err` (usually 403 Forbidden in Kubernetes' wording) denies the request.
    fn authorize(&self, user: &RequestUser, attrs: &Attributes) -> Result<(), skiff_apimachinery::ApiError>;
}

/// Allows everything (until RBAC is enforced).
#[derive(Debug, Default, Clone, Copy)]
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn authorize(&self, _user: &RequestUser, _attrs: &Attributes) -> Result<(), skiff_apimachinery::ApiError> {
        Ok(())
    }
}
