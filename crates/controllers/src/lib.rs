//! skiff's controller manager: the control loops that turn desired state into actual state
//! (watch, compare, reconcile).
//!
//! Everything here is a client of the Kubernetes API, through [`api::ApiClient`] (a
//! `kube::Client` in production, [`fake::FakeApi`] in unit tests), so the controllers could run
//! as a separate process against any Kubernetes-compatible API server.
//!
//! Runtime:
//! - [`informer`]: shared informers (one list+watch per resource, relist on 410 Gone) with an
//!   indexed cache (by namespace, owner uid, node name) and handlers that only enqueue keys;
//! - [`workqueue`]: dedupe, one worker per key at a time, delayed adds, client-go's default
//!   rate limiter (per-key 5 ms…1000 s exponential backoff, 10 qps/100 burst bucket);
//! - [`controller`]: N workers per controller running a [`controller::Reconciler`];
//! - [`metrics`]: reconciles, errors, durations, queue depth, retries, conflicts;
//! - [`leaderelection`]: Lease-based leader election (also used by the scheduler);
//! - [`events`]: the event recorder every component uses (core/v1 Events, aggregated).
//!
//! Controllers: [`deployment`], [`replicaset`], [`garbagecollector`], [`namespace`],
//! [`serviceaccount`], and event TTL cleanup, wired together by [`run_controller_manager`]; and
//! [`nodeipam`], which `skiff server` runs on its own (it needs `--cluster-cidr`).

// `ApiError` (a `metav1.Status`) is the error of every API call; boxing it everywhere would
// buy little: errors are the slow path.
#![allow(clippy::result_large_err)]

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
pub mod manager;
pub mod metrics;
pub mod namespace;
pub mod nodeipam;
pub mod replicaset;
pub mod serviceaccount;
pub mod util;
pub mod workqueue;

pub use manager::{ControllerManagerConfig, run_controller_manager, run_controller_manager_until};
