//! The Node object a kubelet registers and keeps up to date: capacity and allocatable, addresses,
//! `nodeInfo`, and the conditions Ready, MemoryPressure, DiskPressure and PIDPressure.
//!
//! Follows "Node status" (<https://kubernetes.io/docs/reference/node/node-status/>) and the
//! kubelet's registration (`registerWithAPIServer`): create the Node; when it already exists,
//! adopt it and update its status.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::Error;

/// The version this kubelet reports in `nodeInfo.kubeletVersion` (the Kubernetes release whose
/// behaviour skiff follows).
pub const KUBELET_VERSION: &str = "v1.33.0+skiff";

/// Port of the kubelet's HTTPS endpoint, reported in `status.daemonEndpoints`.
pub const KUBELET_PORT: i32 = 10250;

/// Resources a node offers, as Kubernetes quantities (`status.capacity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCapacity {
    /// CPU cores, e.g. "2" or "1500m".
    pub cpu: String,
    /// Memory, e.g. "8Gi".
    pub memory: String,
    /// Ephemeral storage, e.g. "100Gi".
    pub ephemeral_storage: String,
    /// Maximum number of pods (the kubelet's `--max-pods`, 110 by default).
    pub pods: u32,
}

impl NodeCapacity {
    /// The resource map for `status.capacity` / `status.allocatable`.
    pub fn to_resource_list(&self) -> BTreeMap<String, Quantity> {
        BTreeMap::from([
            ("cpu".to_string(), Quantity(self.cpu.clone())),
            ("memory".to_string(), Quantity(self.memory.clone())),
            ("ephemeral-storage".to_string(), Quantity(self.ephemeral_storage.clone())),
            ("pods".to_string(), Quantity(self.pods.to_string())),
        ])
    }

    /// Checks that every quantity parses.
    ///
    /// # Errors
    /// [`Error::Config`] naming the bad field.
    pub fn validate(&self) -> Result<(), Error> {
        for (field, q) in [("cpu", &self.cpu), ("memory", &self.memory), ("ephemeral-storage", &self.ephemeral_storage)]
        {
            skiff_apimachinery::quantity::parse_scaled(q, 0)
                .map_err(|e| Error::Config(format!("node capacity {field}: {e}")))?;
        }
        Ok(())
    }
}

/// Facts about the machine a node agent runs on, read from /proc, /etc and /sys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineInfo {
    /// Logical CPUs available to this process.
    pub cpus: usize,
    /// `MemTotal` from /proc/meminfo, in bytes.
    pub memory_bytes: u64,
    /// Size of the filesystem holding the data directory, in bytes.
    pub ephemeral_storage_bytes: u64,
    /// The host name (`uname -n`).
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel_version: String,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os_image: String,
    /// /etc/machine-id (empty when absent).
    pub machine_id: String,
    /// /proc/sys/kernel/random/boot_id.
    pub boot_id: String,
    /// /sys/class/dmi/id/product_uuid when readable, else the machine id.
    pub system_uuid: String,
    /// GOARCH-style architecture ("amd64", "arm64").
    pub architecture: String,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

impl MachineInfo {
    /// Reads the machine's facts; `data_dir` selects the filesystem for ephemeral storage.
    ///
    /// # Errors
    /// [`Error::Io`] when /proc/meminfo is unreadable or `statvfs(data_dir)` fails.
    pub fn probe(data_dir: &Path) -> Result<Self, Error> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").map_err(|e| Error::io("reading /proc/meminfo", e))?;
        let memory_bytes = parse_meminfo_total(&meminfo)
            .ok_or_else(|| Error::Config("/proc/meminfo has no MemTotal line".to_string()))?;
        let vfs = rustix::fs::statvfs(data_dir)
            .map_err(|e| Error::io(format!("statvfs {}", data_dir.display()), std::io::Error::from(e)))?;
        let uname = rustix::system::uname();
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let machine_id = read_trimmed("/etc/machine-id");
        let system_uuid = match read_trimmed("/sys/class/dmi/id/product_uuid") {
            s if s.is_empty() => machine_id.clone(),
            s => s,
        };
        Ok(MachineInfo {
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            memory_bytes,
            ephemeral_storage_bytes: vfs.f_blocks.saturating_mul(vfs.f_frsize),
            hostname: uname.nodename().to_string_lossy().into_owned(),
            kernel_version: uname.release().to_string_lossy().into_owned(),
            os_image: parse_os_release_pretty_name(&os_release).unwrap_or_else(|| "Linux".to_string()),
            machine_id,
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            system_uuid,
            architecture: go_arch(std::env::consts::ARCH).to_string(),
        })
    }

    /// The node's capacity on this machine with `max_pods` pods.
    pub fn capacity(&self, max_pods: u32) -> NodeCapacity {
        NodeCapacity {
            cpu: self.cpus.to_string(),
            memory: format!("{}Ki", self.memory_bytes / 1024),
            ephemeral_storage: format!("{}Ki", self.ephemeral_storage_bytes / 1024),
            pods: max_pods,
        }
    }

    /// `status.nodeInfo` for this machine with the given runtime version ("containerd://1.6.20").
    pub fn node_info(&self, container_runtime_version: &str) -> NodeSystemInfo {
        NodeSystemInfo {
            architecture: self.architecture.clone(),
            boot_id: self.boot_id.clone(),
            container_runtime_version: container_runtime_version.to_string(),
            kernel_version: self.kernel_version.clone(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.to_string(),
            machine_id: self.machine_id.clone(),
            operating_system: "linux".to_string(),
            os_image: self.os_image.clone(),
            system_uuid: self.system_uuid.clone(),
            swap: None,
        }
    }
}

/// Maps Rust's architecture names to Go's, which Kubernetes uses in labels and nodeInfo.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn parse_meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn parse_os_release_pretty_name(os_release: &str) -> Option<String> {
    let line = os_release.lines().find(|l| l.starts_with("PRETTY_NAME="))?;
    Some(line.trim_start_matches("PRETTY_NAME=").trim_matches('"').to_string())
}

/// Node pressure and readiness as the kubelet observes them; turned into conditions by
/// [`node_conditions`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeHealth {
    /// `Err(message)` when the node is not ready (runtime or network down).
    pub not_ready: Option<String>,
    /// Available memory below the eviction threshold.
    pub memory_pressure: bool,
    /// Available disk below the eviction threshold.
    pub disk_pressure: bool,
    /// Available PIDs below the eviction threshold.
    pub pid_pressure: bool,
}

fn condition(type_: &str, status: bool, reason: &str, message: &str, now: &Time) -> NodeCondition {
    NodeCondition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// The four node conditions for `health` at `now`, keeping `lastTransitionTime` of conditions
/// in `previous` whose status did not change. Reasons and messages are the kubelet's
/// (KubeletReady, KubeletHasSufficientMemory, ...).
pub fn node_conditions(health: &NodeHealth, now: Timestamp, previous: &[NodeCondition]) -> Vec<NodeCondition> {
    let now = Time(now);
    let mut conditions = vec![
        if health.memory_pressure {
            condition(
                "MemoryPressure",
                true,
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
                &now,
            )
        } else {
            condition(
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                &now,
            )
        },
        if health.disk_pressure {
            condition("DiskPressure", true, "KubeletHasDiskPressure", "kubelet has disk pressure", &now)
        } else {
            condition("DiskPressure", false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", &now)
        },
        if health.pid_pressure {
            condition("PIDPressure", true, "KubeletHasInsufficientPID", "kubelet has insufficient PID available", &now)
        } else {
            condition("PIDPressure", false, "KubeletHasSufficientPID", "kubelet has sufficient PID available", &now)
        },
        match &health.not_ready {
            None => condition("Ready", true, "KubeletReady", "kubelet is posting ready status", &now),
            Some(message) => condition("Ready", false, "KubeletNotReady", message, &now),
        },
    ];
    for c in &mut conditions {
        if let Some(old) = previous.iter().find(|o| o.type_ == c.type_)
            && old.status == c.status
            && old.last_transition_time.is_some()
        {
            c.last_transition_time = old.last_transition_time.clone();
        }
    }
    conditions
}

/// True when two condition lists differ in anything but heartbeat times.
pub fn conditions_changed(a: &[NodeCondition], b: &[NodeCondition]) -> bool {
    let key = |c: &NodeCondition| (c.type_.clone(), c.status.clone(), c.reason.clone(), c.message.clone());
    let mut ka: Vec<_> = a.iter().map(key).collect();
    let mut kb: Vec<_> = b.iter().map(key).collect();
    ka.sort();
    kb.sort();
    ka != kb
}

/// Everything needed to build a Node object.
#[derive(Debug, Clone)]
pub struct NodeTemplate {
    /// `metadata.name`.
    pub name: String,
    /// Labels besides the well-known ones this module adds (kubernetes.io/hostname, os, arch).
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// `spec.podCIDR` (and `podCIDRs`), when the node has one.
    pub pod_cidr: Option<String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `status.capacity`.
    pub capacity: NodeCapacity,
    /// `status.allocatable` (capacity minus reservations).
    pub allocatable: NodeCapacity,
    /// `status.addresses`: InternalIP and Hostname.
    pub internal_ip: String,
    /// The Hostname address and the kubernetes.io/hostname label.
    pub hostname: String,
    /// `status.nodeInfo`.
    pub node_info: NodeSystemInfo,
    /// The kubelet HTTPS port in `status.daemonEndpoints`.
    pub kubelet_port: i32,
}

impl NodeTemplate {
    /// The Node object, with status built from `conditions`.
    pub fn to_node(&self, conditions: Vec<NodeCondition>) -> Node {
        let mut labels = self.labels.clone();
        labels.insert("kubernetes.io/hostname".to_string(), self.hostname.clone());
        labels.insert("kubernetes.io/os".to_string(), "linux".to_string());
        labels.insert("kubernetes.io/arch".to_string(), self.node_info.architecture.clone());
        labels.insert("beta.kubernetes.io/os".to_string(), "linux".to_string());
        labels.insert("beta.kubernetes.io/arch".to_string(), self.node_info.architecture.clone());
        Node {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(labels),
                annotations: (!self.annotations.is_empty()).then(|| self.annotations.clone()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: self.pod_cidr.clone(),
                pod_cidrs: self.pod_cidr.clone().map(|c| vec![c]),
                taints: (!self.taints.is_empty()).then(|| self.taints.clone()),
                ..Default::default()
            }),
            status: Some(self.status(conditions)),
        }
    }

    /// `status` for the node with the given conditions.
    pub fn status(&self, conditions: Vec<NodeCondition>) -> NodeStatus {
        NodeStatus {
            addresses: Some(vec![
                NodeAddress { type_: "InternalIP".to_string(), address: self.internal_ip.clone() },
                NodeAddress { type_: "Hostname".to_string(), address: self.hostname.clone() },
            ]),
            capacity: Some(self.capacity.to_resource_list()),
            allocatable: Some(self.allocatable.to_resource_list()),
            conditions: Some(conditions),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port: self.kubelet_port }),
            }),
            node_info: Some(self.node_info.clone()),
            ..Default::default()
        }
    }
}

/// Registers `node` with the API server (kubelet `registerWithAPIServer`): creates it, or when
/// it already exists (agent restart) merges our labels and podCIDR into it and updates its
/// status. Returns the Node as stored.
///
/// # Errors
/// [`Error::Kube`] when the API server rejects the create, get or patches.
pub async fn register_node(api: &Api<Node>, node: &Node) -> Result<Node, Error> {
    let name = node.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let existing = api.get(&name).await?;
            let mut meta_patch = serde_json::json!({ "metadata": { "labels": node.metadata.labels } });
            let has_cidr = existing.spec.as_ref().and_then(|s| s.pod_cidr.as_ref()).is_some();
            if !has_cidr && let Some(cidr) = node.spec.as_ref().and_then(|s| s.pod_cidr.clone()) {
                meta_patch["spec"] = serde_json::json!({ "podCIDR": cidr, "podCIDRs": [cidr] });
            }
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&meta_patch)).await?;
        }
        Err(e) => return Err(e.into()),
    }
    // The API server may drop status on create (it is a subresource): always write it.
    let status_patch = serde_json::json!({ "status": node.status });
    Ok(api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status_patch)).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_total_is_read_in_bytes() {
        let meminfo = "MemTotal:       16384 kB\nMemFree:        1024 kB\n";
        assert_eq!(parse_meminfo_total(meminfo), Some(16384 * 1024));
        assert_eq!(parse_meminfo_total("nothing"), None);
    }

    #[test]
    fn os_release_pretty_name_is_unquoted() {
        let os = "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(parse_os_release_pretty_name(os).as_deref(), Some("Debian GNU/Linux 12 (bookworm)"));
    }

    #[test]
    fn healthy_node_is_ready_without_pressure() {
        let c = node_conditions(&NodeHealth::default(), Timestamp::UNIX_EPOCH, &[]);
        let status = |t: &str| c.iter().find(|c| c.type_ == t).map(|c| c.status.clone()).unwrap_or_default();
        assert_eq!(status("Ready"), "True");
        assert_eq!(status("MemoryPressure"), "False");
        assert_eq!(status("DiskPressure"), "False");
        assert_eq!(status("PIDPressure"), "False");
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time() {
        let t0 = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let t1 = Timestamp::from_second(2_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let first = node_conditions(&NodeHealth::default(), t0, &[]);
        let not_ready = NodeHealth { not_ready: Some("runtime down".into()), ..Default::default() };
        let second = node_conditions(&not_ready, t1, &first);
        let ready = second.iter().find(|c| c.type_ == "Ready").cloned().unwrap_or_default();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.last_transition_time, Some(Time(t1)));
        let mem = second.iter().find(|c| c.type_ == "MemoryPressure").cloned().unwrap_or_default();
        assert_eq!(mem.last_transition_time, Some(Time(t0)));
        assert_eq!(mem.last_heartbeat_time, Some(Time(t1)));
        assert!(conditions_changed(&first, &second));
        assert!(!conditions_changed(&first, &node_conditions(&NodeHealth::default(), t1, &first)));
    }

    #[test]
    fn node_object_carries_well_known_labels_and_pod_cidr() {
        let cap = NodeCapacity { cpu: "4".into(), memory: "8Gi".into(), ephemeral_storage: "100Gi".into(), pods: 110 };
        let t = NodeTemplate {
            name: "n1".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            pod_cidr: Some("10.42.0.0/24".into()),
            taints: vec![],
            capacity: cap.clone(),
            allocatable: cap,
            internal_ip: "192.0.2.1".into(),
            hostname: "n1".into(),
            node_info: NodeSystemInfo { architecture: "amd64".into(), ..Default::default() },
            kubelet_port: KUBELET_PORT,
        };
        let node = t.to_node(vec![]);
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("kubernetes.io/hostname").map(String::as_str), Some("n1"));
        assert_eq!(labels.get("kubernetes.io/arch").map(String::as_str), Some("amd64"));
        let spec = node.spec.unwrap_or_default();
        assert_eq!(spec.pod_cidrs, Some(vec!["10.42.0.0/24".to_string()]));
        let status = node.status.unwrap_or_default();
        assert_eq!(status.capacity.unwrap_or_default().get("pods"), Some(&Quantity("110".into())));
    }
}
