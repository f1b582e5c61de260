//! skiff's controller manager: the control loops that turn desired state into actual state.
//!
//! Everything here is a client of the Kubernetes API (through [`api::ApiClient`], a
//! `kube::Client` in production), so the controllers could run as a separate process against
//! any Kubernetes-compatible API server.
//!
//! - Runtime: [`informer`] (shared, indexed caches fed by list+watch), [`workqueue`]
//!   (dedupe, per-key exponential backoff, token bucket), [`controller`] (workers and the
//!   reconcile loop), [`metrics`], [`leaderelection`] (Lease-based), [`events`] (the recorder
//!   every component uses).
//! - Controllers: ...

pub mod api;
pub mod controller;
pub mod controller_ref_manager;
pub mod controller_utils;
pub mod deployment;
pub mod events;
pub mod fake;
pub mod garbagecollector;
pub mod informer;
pub mod leaderelection;
pub mod metrics;
pub mod namespace;
pub mod replicaset;
pub mod serviceaccount;
pub mod util;
pub mod workqueue;
