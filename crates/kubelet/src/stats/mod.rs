//! Resource usage of the node, its pods and their containers: the kubelet's Summary API
//! (`/stats/summary`) and resource metrics (`/metrics/resource`), the source of
//! `metrics.k8s.io` (<https://kubernetes.io/docs/reference/instrumentation/node-metrics/>).
//!
//! [`cgroup`] reads cgroup v2 files, [`node`] the node-wide `/proc` files, [`collector`] joins
//! them with the runtime's own figures (CRI `ListContainerStats`/`ListPodSandboxStats`) into a
//! [`summary::Summary`], which [`resource_metrics`] renders for Prometheus.

pub mod cgroup;
pub mod collector;
pub mod node;
pub mod resource_metrics;
pub mod summary;

pub use collector::{CgroupLayout, Collected, collect};
