//! skiff's security pipeline up to admission: who is asking ([`authn`], [`user`]) and may they
//! ([`rbac`], and the Node authorizer in [`node`]).
//!
//! Every API request passes, in this order (Kubernetes' "Controlling Access to the Kubernetes API",
//! <https://kubernetes.io/docs/concepts/security/controlling-access/>):
//!
//! 1. authentication: [`authn::AuthenticatorChain::authenticate`] (client certificate, bearer
//!    token, anonymous), then [`authn::impersonation::impersonate`] when `Impersonate-*` headers
//!    are present;
//! 2. authorization: [`node::authorizer::NodeAuthorizer`] for kubelets, then
//!    [`rbac::RbacAuthorizer::authorize`] with the request's [`rbac::Attributes`]; a denial
//!    becomes [`rbac::forbidden`];
//! 3. mutating admission, then validating admission (the `skiff-admission` crate);
//! 4. persistence (the API server's business).
//!
//! Everything here is pure or in-memory and testable without a server: the API server feeds the
//! RBAC authorizer from watch events ([`rbac::RbacAuthorizer::apply`]) and the Node authorizer's
//! [`node::graph::NodeGraph`] from its watch caches. This crate knows nothing about routes or
//! the store.

// `ApiError` (a metav1.Status) is the error of every request-path function, as in the rest of
// skiff; boxing it would only move the allocation.
#![allow(clippy::result_large_err)]

pub mod authn;
pub mod node;
pub mod rbac;
pub mod user;

pub use user::UserInfo;
