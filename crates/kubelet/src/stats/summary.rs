//! The kubelet's Summary API shape (`k8s.io/kubelet/pkg/apis/stats/v1alpha1`), served at
//! `/stats/summary`: the node's and every pod's and container's CPU and memory, with the
//! times they were measured. Fields skiff does not measure (network, filesystems, volumes,
//! accelerators) are omitted, as the API allows for every optional field.

use k8s_openapi::jiff::Timestamp;
use serde::{Serialize, Serializer};

/// Serializes Unix nanoseconds as `metav1.Time` (RFC 3339, seconds, UTC).
fn time<S: Serializer>(ns: &i64, s: S) -> Result<S::Ok, S::Error> {
    let t = Timestamp::from_second(ns.div_euclid(1_000_000_000)).unwrap_or(Timestamp::UNIX_EPOCH);
    s.serialize_str(&t.to_string())
}

/// `Summary`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// The node.
    pub node: NodeStats,
    /// Every pod the runtime runs for this node.
    pub pods: Vec<PodStats>,
}

/// `NodeStats`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// When the node booted (Unix ns).
    #[serde(serialize_with = "time")]
    pub start_time: i64,
    /// CPU of the whole node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the whole node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Process ids in use and the limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

/// `CPUStats`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When measured (Unix ns).
    #[serde(serialize_with = "time")]
    pub time: i64,
    /// Cumulative CPU since start, nanocore-seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

/// `MemoryStats`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When measured (Unix ns).
    #[serde(serialize_with = "time")]
    pub time: i64,
    /// Memory available before the limit (the node: capacity − working set), bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Total memory in use, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// Working set (usage − inactive file pages), bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous memory, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Page faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    /// Major page faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// `RlimitStats`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RlimitStats {
    /// When measured (Unix ns).
    #[serde(serialize_with = "time")]
    pub time: i64,
    /// `kernel.pid_max`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<u64>,
    /// Processes running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curproc: Option<u64>,
}

/// `PodReference`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct PodReference {
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod UID.
    pub uid: String,
}

/// `ProcessStats`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct ProcessStats {
    /// Processes in the pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

/// `PodStats`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// Which pod.
    pub pod_ref: PodReference,
    /// When the pod sandbox was created (Unix ns).
    #[serde(serialize_with = "time")]
    pub start_time: i64,
    /// Its running containers.
    pub containers: Vec<ContainerStats>,
    /// CPU of the pod's cgroup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the pod's cgroup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Processes of the pod.
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
}

/// `ContainerStats`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// Container name (from the pod spec).
    pub name: String,
    /// When the container was created (Unix ns).
    #[serde(serialize_with = "time")]
    pub start_time: i64,
    /// CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
}
