//! skiff's controller manager: the control loops that turn desired state into actual state
//! (watch, compare, reconcile).
//!
//! Everything here is a client of the Kubernetes API, through [`skiff_runtime::api::ApiClient`] (a
//! `kube::Client` in production, `skiff_runtime::fake::FakeApi` in unit tests), so the controllers could run
//! as a separate process against any Kubernetes-compatible API server.
//!
//! The runtime they share (informers, workqueues, the controller loop, leader election, the
//! event recorder, the API client) is `skiff-runtime`.
//!
//! Controllers: [`deployment`], [`replicaset`], [`replication`], [`disruption`], [`podgc`], [`podautoscaler`], [`statefulset`] (on [`history`]), [`daemon`], [`job`], [`cronjob`], [`ttlafterfinished`], [`garbagecollector`], [`namespace`],
//! [`serviceaccount`], [`resourcequota`], [`rootcacertpublisher`], [`clusterroleaggregation`],
//! [`endpointslice`], [`endpoint`], [`endpointslicemirroring`], [`servicelb`], [`volume`] and event TTL
//! cleanup, wired together by [`run_controller_manager`]; and
//! [`nodeipam`] and [`nodelifecycle`], which `skiff server` runs on their own (they need
//! `--cluster-cidr` and `--node-monitor-grace-period`).

// `ApiError` (a `metav1.Status`) is the error of every API call; boxing it everywhere would
// buy little: errors are the slow path.
#![allow(clippy::result_large_err)]

pub mod clusterroleaggregation;
pub mod controller_ref_manager;
pub mod controller_utils;
pub mod cronjob;
pub mod daemon;
pub mod deployment;
pub mod disruption;
pub mod endpoint;
pub mod endpointslice;
pub mod endpointslicemirroring;
pub mod garbagecollector;
pub mod history;
pub mod job;
pub mod manager;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod podautoscaler;
pub mod podgc;
pub mod replicaset;
pub mod replication;
pub mod resourcequota;
pub mod rootcacertpublisher;
pub mod serviceaccount;
pub mod servicelb;
pub mod statefulset;
pub mod ttlafterfinished;
pub mod util;
pub mod volume;

pub use manager::{ControllerManagerConfig, run_controller_manager, run_controller_manager_until};
