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

pub mod api;
pub mod bench;
pub mod cache;
pub mod config;
pub mod framework;
pub mod informer;
pub mod plugins;
pub mod queue;
pub mod schedule_one;
pub mod scheduler;
pub mod testing;

pub use bench::{BenchCase, BenchOptions, BenchReport, bench_scheduling};
pub use config::SchedulerConfig;
pub use scheduler::run_scheduler;
