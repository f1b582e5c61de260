//! skiff's security pipeline: who is asking ([`authn`]), may they ([`rbac`]), and is the object
//! acceptable ([`admission`]).
//!
//! Every API request passes, in this order (Kubernetes' "Controlling Access to the Kubernetes API",
//! <https://kubernetes.io/docs/concepts/security/controlling-access/>):
//!
//! 1. authentication: [`authn::AuthenticatorChain::authenticate`] (client certificate, bearer
//!    token, anonymous), then [`authn::impersonation::impersonate`] when `Impersonate-*` headers
//!    are present;
//! 2. authorization: [`rbac::RbacAuthorizer::authorize`] with the request's [`rbac::Attributes`];
//!    a denial becomes [`rbac::forbidden`];
//! 3. mutating admission, then validating admission: [`admission::AdmissionChain`];
//! 4. persistence (the API server's business).
//!
//! Everything here is pure or in-memory and testable without a server: the API server feeds the
//! RBAC authorizer from watch events ([`rbac::RbacAuthorizer::apply`]) and gives admission a
//! [`admission::AdmissionLookup`] over its watch caches. This crate knows nothing about routes
//! or the store.

// `ApiError` (a metav1.Status) is the error of every request-path function, as in the rest of
// skiff; boxing it would only move the allocation.
#![allow(clippy::result_large_err)]

pub mod admission;
pub mod authn;
pub mod node;
pub mod rbac;
pub mod user;

pub use user::UserInfo;
