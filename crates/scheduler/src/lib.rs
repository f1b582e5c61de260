//! skiff's kube-scheduler: assigns pending pods to nodes through the Kubernetes API.
//!
//! Layout mirrors kube-scheduler:
//! - [`framework`]: the plugin API (extension points, `CycleState`, `Status`, `NodeInfo`) and the
//!   runtime that runs a profile's plugins. Plugins depend on it alone.
//! - [`plugins`]: the in-tree plugins, one module each, names in [`plugins::names`].
//! - [`queue`]: activeQ / backoffQ / unschedulable pods.
//! - [`cache`]: nodes with bound and assumed pods; per-cycle snapshots.
//! - [`schedule_one`]: the scheduling cycle and the asynchronous binding cycle.
//! - [`config`]: `KubeSchedulerConfiguration` and profile → framework expansion.
//! - [`api`]: the API writes (binding, status, events, preemption deletes).
//!
//! Start reading at [`schedule_one::Scheduler::schedule_one`].
//!
//! # Running it
//! `skiff server` spawns the scheduler next to the controllers, as a client of its own API:
//! ```no_run
//! # async fn wire(client: kube::Client) -> anyhow::Result<()> {
//! // Defaults (one `default-scheduler` profile), or SchedulerConfig::from_file(path)?
//! let config = skiff_scheduler::SchedulerConfig::default();
//! tokio::spawn(skiff_scheduler::run_scheduler(client, config));
//! # Ok(()) }
//! ```
//! It elects a leader on the `kube-system/kube-scheduler` Lease unless the configuration says
//! `leaderElection: {leaderElect: false}`.
//!
//! # Architecture invariants
//! - Plugins see only [`framework`]; they never touch the queue, the cache or the network
//!   directly (API writes go through [`framework::ClusterApi`] in the handle).
//! - The scheduling cycle is synchronous and never waits on the network: binding, events,
//!   status updates and preemption deletes run as tasks. Configured HTTP extenders
//!   ([`extender`]) are the exception, as in kube-scheduler: their filter, prioritize and
//!   preempt calls are part of the cycle.
//! - A pod is *assumed* in the cache the moment a node is chosen, so the next cycle counts it;
//!   a failed binding forgets it.
//! - All state the scheduler acts on comes from the API (informers); nothing reads the store.

pub mod api;
#[cfg(any(test, feature = "testing"))]
pub mod bench;
pub mod cache;
pub mod config;
pub mod extender;
pub mod framework;
pub mod informer;
pub mod plugins;
pub mod queue;
pub mod schedule_one;
pub mod scheduler;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(any(test, feature = "testing"))]
pub use bench::{BenchCase, BenchOptions, BenchReport, bench_scheduling};
pub use config::SchedulerConfig;
pub use scheduler::run_scheduler;
