//! The request filters in front of the handlers, in kube-apiserver's order
//! (`DefaultBuildHandlerChain` in k8s.io/apiserver `pkg/server/config.go`):
//! [`flowcontrol`] (max in flight → 429), [`authentication`] (who is asking),
//! [`impersonation`] (`Impersonate-*` headers, checked with the authorizer),
//! [`authorization`] (RBAC, the security pipeline's installation) with [`node_authz`] (the Node
//! authorizer and NodeRestriction) in front of it.

pub mod authentication;
pub mod authorization;
pub mod flowcontrol;
pub mod impersonation;
pub mod node_authz;
