//! Serving (k8s.io/apiserver `pkg/server`): the [`handler`] chain every API request goes
//! through, and the connection plumbing under the router ([`batched_writes`], [`unread_body`]).

pub mod batched_writes;
pub mod handler;
pub mod unread_body;
