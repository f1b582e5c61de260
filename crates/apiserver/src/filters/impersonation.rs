//! User impersonation (`kubectl --as`, the `Impersonate-*` headers;
//! <https://kubernetes.io/docs/reference/access-authn-authz/authentication/#user-impersonation>),
//! kube-apiserver's `WithImpersonation` filter (k8s.io/apiserver `pkg/endpoints/filters/impersonation.go`):
//! it runs after authentication and before authorization, so the rest of the request is
//! authorized as the impersonated user.

use std::sync::Arc;

use axum::http::request::Parts;
use skiff_apimachinery::ApiError;
use skiff_auth::authn::impersonation;
use skiff_auth::rbac;

use crate::auth::{Authenticator, PeerIdentity, RequestUser};
use crate::filters::authorization::user_info;

/// Wraps an [`Authenticator`] and applies `Impersonate-*` headers (Kubernetes' user
/// impersonation) once the requester is known, checking the `impersonate` verb with the
/// configured authorizer (RBAC, or AlwaysAllow).
pub struct ImpersonatingAuthenticator {
    /// Who the connection is.
    pub inner: Arc<dyn Authenticator>,
    /// Decides whether the requester may impersonate.
    pub authorizer: Arc<dyn rbac::Authorizer>,
}

impl Authenticator for ImpersonatingAuthenticator {
    fn authenticate(&self, parts: &Parts, peer: &PeerIdentity) -> Option<RequestUser> {
        self.authenticate_request(parts, peer).ok().flatten()
    }

    fn authenticate_request(&self, parts: &Parts, peer: &PeerIdentity) -> Result<Option<RequestUser>, ApiError> {
        let Some(user) = self.inner.authenticate_request(parts, peer)? else { return Ok(None) };
        if !impersonation::has_impersonation_headers(&parts.headers) {
            return Ok(Some(user));
        }
        let requester = user_info(&user);
        match impersonation::impersonate(&requester, &parts.headers, self.authorizer.as_ref())? {
            Some(u) => Ok(Some(RequestUser { name: u.name, groups: u.groups })),
            None => Ok(Some(user)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::authorization::tests::{rbac_with_pod_reader, user};

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut b = axum::http::Request::builder().uri("/api/v1/namespaces/default/pods");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn peer(name: &str, groups: &[&str]) -> PeerIdentity {
        PeerIdentity(Some((name.into(), groups.iter().map(|g| g.to_string()).collect())))
    }

    #[test]
    fn system_masters_may_impersonate_and_the_impersonated_user_is_authenticated() {
        let a = ImpersonatingAuthenticator {
            inner: Arc::new(crate::auth::CertificateAuthenticator),
            authorizer: rbac_with_pod_reader(),
        };
        let u = a
            .authenticate_request(&parts(&[("Impersonate-User", "jane")]), &peer("system:admin", &["system:masters"]))
            .unwrap()
            .unwrap();
        assert_eq!(u, user("jane", &["system:authenticated"]));
    }

    #[test]
    fn impersonation_without_the_impersonate_verb_is_forbidden() {
        let a = ImpersonatingAuthenticator {
            inner: Arc::new(crate::auth::CertificateAuthenticator),
            authorizer: rbac_with_pod_reader(),
        };
        let e = a.authenticate_request(&parts(&[("Impersonate-User", "bob")]), &peer("jane", &[])).unwrap_err();
        assert_eq!(e.code, 403);
        assert!(e.message.contains(r#"User "jane" cannot impersonate resource "users""#), "{}", e.message);
    }

    #[test]
    fn without_impersonation_headers_the_connection_user_is_kept() {
        let a = ImpersonatingAuthenticator {
            inner: Arc::new(crate::auth::CertificateAuthenticator),
            authorizer: rbac_with_pod_reader(),
        };
        let u = a.authenticate_request(&parts(&[]), &peer("jane", &[])).unwrap().unwrap();
        assert_eq!(u, user("jane", &["system:authenticated"]));
    }
}
