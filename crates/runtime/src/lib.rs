//! skiff's client runtime: what every component that watches and reconciles the API needs
//! (client-go's `tools/cache`, `util/workqueue`, `tools/leaderelection` and `tools/record`;
//! kube-rs's `kube-runtime`). The controller manager, the scheduler and the kubelet all use it.
//!
//! - [`informer`]: shared informers (one list+watch per resource, relist on 410 Gone) with an
//!   indexed cache (by namespace, owner uid, node name) and handlers that only enqueue keys;
//!   their source is a [`informer::ListerWatcher`] (the API's watch stream in production);
//! - [`workqueue`]: dedupe, one worker per key at a time, delayed adds, client-go's default
//!   rate limiter (per-key 5 ms…1000 s exponential backoff, 10 qps/100 burst bucket);
//! - [`controller`]: N workers per controller running a [`controller::Reconciler`];
//! - [`metrics`]: reconciles, errors, durations, queue depth, retries, conflicts;
//! - [`leaderelection`]: Lease-based leader election;
//! - [`events`]: the one event recorder (core/v1 Events, with client-go's correlator);
//! - [`api`]: the typed API client every component talks through ([`api::ApiClient`], a
//!   `kube::Client` in production), and `fake` (behind the `testing` feature): its recording
//!   in-memory fake for unit tests;
//! - [`util`]: the clock and object references the above share with their users.

// `ApiError` (a `metav1.Status`) is the error of every API call; boxing it everywhere would
// buy little: errors are the slow path.
#![allow(clippy::result_large_err)]

pub mod api;
pub mod controller;
pub mod events;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod informer;
pub mod leaderelection;
pub mod metrics;
pub mod util;
pub mod workqueue;
