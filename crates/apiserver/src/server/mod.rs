//! Serving (k8s.io/apiserver `pkg/server`): the connection plumbing under the router.

pub mod batched_writes;
pub mod unread_body;
