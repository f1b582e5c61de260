//! Translation between pods and the CRI: sandbox and container configurations built from a
//! pod spec, and the runtime's view of a pod read back from sandbox/container labels.
//!
//! Named after the kubelet's `kuberuntime` package. Sandboxes and containers carry the labels
//! `io.kubernetes.pod.{name,namespace,uid}` and `io.kubernetes.container.name`, so the runtime
//! alone says which pod owns what — that is how a restarted agent adopts running pods.
//!
//! SyncPod itself lives in the submodules: `manager` (SyncPod, computePodActions, killing a
//! pod), `container` (starting and killing one container, CrashLoopBackOff) and `sandbox`
//! (creating the pod sandbox).

pub(crate) mod container;
pub(crate) mod manager;
pub(crate) mod sandbox;

use std::collections::HashMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri::{CriError, RuntimeService, api};
use crate::qos::{self, QosClass};
use crate::volumes::MountSpec;

/// Sandbox/container label: pod name.
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
/// Sandbox/container label: pod namespace.
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Sandbox/container label: pod UID.
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
/// Container label: container name.
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Container annotation: hash of the container spec (a changed spec restarts the container).
pub const ANNOTATION_CONTAINER_HASH: &str = "io.kubernetes.container.hash";
/// Container annotation: restart count.
pub const ANNOTATION_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
/// Container annotation: the pod's termination grace period in seconds.
pub const ANNOTATION_TERMINATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Container annotation: "init" for init containers, "regular" otherwise.
pub const ANNOTATION_CONTAINER_KIND: &str = "skiff.io/container-kind";

/// Node-level settings the pod runtime needs.
#[derive(Debug, Clone)]
pub struct PodRuntimeConfig {
    /// The node's name (`spec.nodeName` of the pods it runs).
    pub node_name: String,
    /// The node's IP (`status.hostIP`; podIP of hostNetwork pods).
    pub node_ip: String,
    /// Kubelet root: pod directories under `<root>/pods`, logs under `<root>/logs`.
    pub root_dir: PathBuf,
    /// Cgroup root of pods (cgroupfs driver), e.g. "/kubepods".
    pub cgroup_root: String,
    /// Cluster DNS server IPs (`--cluster-dns`); empty means pods use the host's resolv.conf.
    pub cluster_dns: Vec<String>,
    /// Cluster domain (`--cluster-domain`), e.g. "cluster.local".
    pub cluster_domain: String,
    /// The host's resolv.conf (`--resolv-conf`, for dnsPolicy Default; empty: none, see
    /// [`crate::dns::HostDns::Disabled`]).
    pub resolv_conf: PathBuf,
    /// Node allocatable CPU in millicores.
    pub allocatable_cpu_millis: i64,
    /// Node memory capacity in bytes (for OOM score adjustment and resourceFieldRef defaults).
    pub memory_capacity: i64,
    /// Node allocatable ephemeral storage in bytes.
    pub allocatable_ephemeral_storage: i64,
    /// Runtime name for container IDs, e.g. "containerd" (IDs look like containerd://<id>).
    pub runtime_name: String,
}

impl PodRuntimeConfig {
    /// Root of container logs: `<root>/logs`.
    pub fn log_root(&self) -> PathBuf {
        self.root_dir.join("logs")
    }

    /// A pod's log directory: `<root>/logs/<namespace>_<name>_<uid>`.
    pub fn pod_log_dir(&self, pod: &Pod) -> PathBuf {
        self.log_root().join(format!(
            "{}_{}_{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.uid.as_deref().unwrap_or_default()
        ))
    }
}

/// Log file of a container attempt, relative to the pod log directory.
pub fn container_log_path(container: &str, attempt: u32) -> String {
    format!("{container}/{attempt}.log")
}

/// A stable 64-bit FNV-1a hash of the container spec, hex-encoded.
pub fn container_hash(container: &Container) -> String {
    let json = serde_json::to_vec(container).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = pod.metadata.labels.clone().unwrap_or_default().into_iter().collect();
    labels.insert(LABEL_POD_NAME.into(), pod.metadata.name.clone().unwrap_or_default());
    labels.insert(LABEL_POD_NAMESPACE.into(), pod.metadata.namespace.clone().unwrap_or_default());
    labels.insert(LABEL_POD_UID.into(), pod.metadata.uid.clone().unwrap_or_default());
    labels
}

/// The pod's hostname: `spec.hostname` or the pod name, truncated to 63 characters.
pub fn pod_hostname(pod: &Pod) -> String {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod.metadata.name.clone().unwrap_or_default());
    let truncated: String = name.chars().take(63).collect();
    truncated.trim_end_matches(['-', '.']).to_string()
}

fn host_network(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false)
}

fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => api::Protocol::Udp as i32,
        Some("SCTP") => api::Protocol::Sctp as i32,
        _ => api::Protocol::Tcp as i32,
    }
}

fn namespace_options(pod: &Pod) -> api::NamespaceOption {
    let spec = pod.spec.clone().unwrap_or_default();
    let mode =
        |node: bool, otherwise: api::NamespaceMode| if node { api::NamespaceMode::Node } else { otherwise } as i32;
    api::NamespaceOption {
        network: mode(spec.host_network.unwrap_or(false), api::NamespaceMode::Pod),
        pid: mode(
            spec.host_pid.unwrap_or(false),
            if spec.share_process_namespace.unwrap_or(false) {
                api::NamespaceMode::Pod
            } else {
                api::NamespaceMode::Container
            },
        ),
        ipc: mode(spec.host_ipc.unwrap_or(false), api::NamespaceMode::Pod),
        ..Default::default()
    }
}

/// The sandbox configuration of a pod (RunPodSandbox), with its DNS settings from
/// [`crate::dns::Configurer::pod_dns`].
pub fn sandbox_config(pod: &Pod, cfg: &PodRuntimeConfig, attempt: u32, dns: api::DnsConfig) -> api::PodSandboxConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let qos = qos::pod_qos_class(pod);
    let port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| api::PortMapping {
            protocol: protocol(p.protocol.as_deref()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let psc = spec.security_context.clone().unwrap_or_default();
    let privileged = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .any(|c| c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false));
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.clone(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname: if host_network(pod) { String::new() } else { pod_hostname(pod) },
        log_directory: cfg.pod_log_dir(pod).to_string_lossy().into_owned(),
        dns_config: Some(dns),
        port_mappings,
        labels: pod_labels(pod),
        annotations: pod.metadata.annotations.clone().unwrap_or_default().into_iter().collect(),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: qos::cgroup_parent(&cfg.cgroup_root, qos, &uid),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: psc.run_as_user.map(|value| api::Int64Value { value }),
                run_as_group: psc.run_as_group.map(|value| api::Int64Value { value }),
                supplemental_groups: psc.supplemental_groups.clone().unwrap_or_default(),
                privileged,
                ..Default::default()
            }),
            sysctls: psc.sysctls.unwrap_or_default().into_iter().map(|s| (s.name, s.value)).collect(),
            ..Default::default()
        }),
        windows: None,
    }
}

const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const DEFAULT_READONLY_PATHS: &[&str] = &["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// CRI resources of a container: CPU shares from the request, CFS quota from the limit, memory
/// limit, and the QoS-based OOM score adjustment.
pub fn container_resources(
    container: &Container,
    qos_class: QosClass,
    memory_capacity: i64,
) -> api::LinuxContainerResources {
    let cpu_request = qos::effective_request(container, "cpu");
    let cpu_limit = qos::limit(container, "cpu");
    let quota = qos::milli_cpu_to_quota(cpu_limit);
    api::LinuxContainerResources {
        cpu_period: if quota > 0 { qos::CPU_PERIOD_US } else { 0 },
        cpu_quota: quota,
        cpu_shares: qos::milli_cpu_to_shares(if cpu_request == 0 { cpu_limit } else { cpu_request }),
        memory_limit_in_bytes: qos::limit(container, "memory"),
        oom_score_adj: qos::oom_score_adj(qos_class, container, memory_capacity),
        ..Default::default()
    }
}

/// Where a container is declared in the pod spec, which decides how it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerKind {
    /// `spec.containers`.
    Regular,
    /// `spec.initContainers` (sidecars included).
    Init,
    /// `spec.ephemeralContainers`: started once, never restarted; `target` is the runtime id of
    /// the running container named by `targetContainerName`, whose process namespace it joins.
    Ephemeral {
        /// The target container's runtime id.
        target: Option<String>,
    },
}

impl ContainerKind {
    /// The pod spec field of the container's list ("containers", "initContainers",
    /// "ephemeralContainers"), as event field paths name it.
    pub fn list(&self) -> &'static str {
        match self {
            ContainerKind::Regular => "containers",
            ContainerKind::Init => "initContainers",
            ContainerKind::Ephemeral { .. } => "ephemeralContainers",
        }
    }

    /// The value of the [`ANNOTATION_CONTAINER_KIND`] annotation.
    pub fn annotation(&self) -> &'static str {
        match self {
            ContainerKind::Regular => "regular",
            ContainerKind::Init => "init",
            ContainerKind::Ephemeral { .. } => "ephemeral",
        }
    }
}

/// The ephemeral containers of a pod as containers (`EphemeralContainerCommon` has the fields
/// of `Container`), with their `targetContainerName`.
pub fn ephemeral_containers(spec: &k8s_openapi::api::core::v1::PodSpec) -> Vec<(Container, Option<String>)> {
    spec.ephemeral_containers
        .iter()
        .flatten()
        .filter_map(|e| {
            let json = serde_json::to_value(e).ok()?;
            let c: Container = serde_json::from_value(json).ok()?;
            Some((c, e.target_container_name.clone().filter(|t| !t.is_empty())))
        })
        .collect()
}

/// Everything resolved for one container start.
#[derive(Debug, Clone)]
pub struct ContainerStart<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// The container spec.
    pub container: &'a Container,
    /// Init, regular or ephemeral.
    pub kind: ContainerKind,
    /// The restart count of the new container.
    pub attempt: u32,
    /// Image id from ImageStatus/PullImage.
    pub image_ref: String,
    /// The environment, in order.
    pub env: Vec<(String, String)>,
    /// Bind mounts.
    pub mounts: Vec<MountSpec>,
}

/// The container configuration (CreateContainer).
pub fn container_config(start: &ContainerStart<'_>, cfg: &PodRuntimeConfig) -> api::ContainerConfig {
    let ContainerStart { pod, container, kind, attempt, .. } = start;
    let vars: HashMap<String, String> = start.env.iter().cloned().collect();
    let expand_all =
        |v: &Option<Vec<String>>| v.iter().flatten().map(|s| crate::envvars::expand(s, &vars)).collect::<Vec<_>>();
    let mut labels = HashMap::from([
        (LABEL_POD_NAME.to_string(), pod.metadata.name.clone().unwrap_or_default()),
        (LABEL_POD_NAMESPACE.to_string(), pod.metadata.namespace.clone().unwrap_or_default()),
        (LABEL_POD_UID.to_string(), pod.metadata.uid.clone().unwrap_or_default()),
    ]);
    labels.insert(LABEL_CONTAINER_NAME.into(), container.name.clone());
    let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
    let annotations = HashMap::from([
        (ANNOTATION_CONTAINER_HASH.to_string(), container_hash(container)),
        (ANNOTATION_RESTART_COUNT.to_string(), attempt.to_string()),
        (ANNOTATION_TERMINATION_GRACE.to_string(), grace.to_string()),
        (ANNOTATION_CONTAINER_KIND.to_string(), kind.annotation().to_string()),
    ]);
    let sc = container.security_context.clone().unwrap_or_default();
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.clone()).unwrap_or_default();
    let privileged = sc.privileged.unwrap_or(false);
    let unmasked = sc.proc_mount.as_deref() == Some("Unmasked");
    let mut groups = psc.supplemental_groups.clone().unwrap_or_default();
    if let Some(fs_group) = psc.fs_group {
        groups.push(fs_group);
    }
    let caps = sc.capabilities.clone().unwrap_or_default();
    let qos_class = qos::pod_qos_class(pod);
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata { name: container.name.clone(), attempt: *attempt }),
        image: Some(api::ImageSpec {
            image: start.image_ref.clone(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: expand_all(&container.command),
        args: expand_all(&container.args),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: start.env.iter().map(|(k, v)| api::KeyValue { key: k.clone(), value: v.clone() }).collect(),
        mounts: start
            .mounts
            .iter()
            .map(|m| api::Mount {
                container_path: m.container_path.clone(),
                host_path: m.host_path.to_string_lossy().into_owned(),
                readonly: m.readonly,
                ..Default::default()
            })
            .collect(),
        labels,
        annotations,
        log_path: container_log_path(&container.name, *attempt),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(container_resources(container, qos_class, cfg.memory_capacity)),
            security_context: Some(api::LinuxContainerSecurityContext {
                capabilities: Some(api::Capability {
                    add_capabilities: caps.add.unwrap_or_default(),
                    drop_capabilities: caps.drop.unwrap_or_default(),
                    add_ambient_capabilities: Vec::new(),
                }),
                privileged,
                namespace_options: Some(match kind {
                    // A debugging container sees the processes of its target.
                    ContainerKind::Ephemeral { target: Some(id) } => api::NamespaceOption {
                        pid: api::NamespaceMode::Target as i32,
                        target_id: id.clone(),
                        ..namespace_options(pod)
                    },
                    _ => namespace_options(pod),
                }),
                run_as_user: sc.run_as_user.or(psc.run_as_user).map(|value| api::Int64Value { value }),
                run_as_group: sc.run_as_group.or(psc.run_as_group).map(|value| api::Int64Value { value }),
                readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
                supplemental_groups: groups,
                no_new_privs: sc.allow_privilege_escalation.map(|a| !a).unwrap_or(false),
                masked_paths: if privileged || unmasked {
                    Vec::new()
                } else {
                    DEFAULT_MASKED_PATHS.iter().map(|s| s.to_string()).collect()
                },
                readonly_paths: if privileged || unmasked {
                    Vec::new()
                } else {
                    DEFAULT_READONLY_PATHS.iter().map(|s| s.to_string()).collect()
                },
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// A sandbox as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxInfo {
    /// Sandbox id.
    pub id: String,
    /// Attempt (incremented each time the sandbox is recreated).
    pub attempt: u32,
    /// SANDBOX_READY.
    pub ready: bool,
    /// Creation time, ns since the epoch.
    pub created_at: i64,
    /// The pod IP, when the sandbox has one.
    pub ip: Option<String>,
}

/// A container as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    /// Container id.
    pub id: String,
    /// Container name (spec name).
    pub name: String,
    /// Restart count of this instance.
    pub attempt: u32,
    /// CRI state.
    pub state: api::ContainerState,
    /// Creation time, ns since the epoch.
    pub created_at: i64,
    /// Start time, ns (0 when never started).
    pub started_at: i64,
    /// Finish time, ns (0 while running).
    pub finished_at: i64,
    /// Exit code once exited.
    pub exit_code: i32,
    /// Runtime reason (e.g. "OOMKilled", "Error", "Completed").
    pub reason: String,
    /// Runtime message.
    pub message: String,
    /// The image as specified.
    pub image: String,
    /// The image id / digest.
    pub image_ref: String,
    /// The sandbox the container runs in.
    pub sandbox_id: String,
    /// Spec hash annotation.
    pub hash: String,
    /// True for init containers.
    pub init: bool,
}

/// The runtime's view of one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimePod {
    /// Sandboxes, newest first.
    pub sandboxes: Vec<SandboxInfo>,
    /// Containers, newest first.
    pub containers: Vec<ContainerInfo>,
}

impl RuntimePod {
    /// The newest sandbox.
    pub fn latest_sandbox(&self) -> Option<&SandboxInfo> {
        self.sandboxes.first()
    }

    /// The newest instance of container `name`.
    pub fn latest(&self, name: &str) -> Option<&ContainerInfo> {
        self.containers.iter().filter(|c| c.name == name).max_by_key(|c| (c.attempt, c.created_at))
    }

    /// The instance before the newest of container `name` (for `lastState`).
    pub fn previous(&self, name: &str) -> Option<&ContainerInfo> {
        let latest = self.latest(name)?;
        self.containers.iter().filter(|c| c.name == name && c.id != latest.id).max_by_key(|c| (c.attempt, c.created_at))
    }

    /// Containers in the running state.
    pub fn running_containers(&self) -> impl Iterator<Item = &ContainerInfo> {
        self.containers.iter().filter(|c| c.state == api::ContainerState::ContainerRunning)
    }

    /// True when nothing of the pod is running (no running container, no ready sandbox).
    pub fn is_stopped(&self) -> bool {
        self.running_containers().next().is_none() && !self.sandboxes.iter().any(|s| s.ready)
    }
}

fn uid_filter(uid: &str) -> HashMap<String, String> {
    HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())])
}

/// Reads the runtime's view of pod `uid`: its sandboxes (with IPs) and containers (with exit
/// codes and times).
///
/// # Errors
/// [`CriError`] when the runtime cannot be queried.
pub async fn runtime_pod(cri: &dyn RuntimeService, uid: &str) -> Result<RuntimePod, CriError> {
    // The sandbox and container halves are independent, and so are the per-object status
    // calls: issued together, a read costs one round of runtime latency instead of one per
    // object (which matters when the runtime is busy starting many pods).
    let (sandboxes, containers) = futures::try_join!(runtime_sandboxes(cri, uid), runtime_containers(cri, uid))?;
    Ok(RuntimePod { sandboxes, containers })
}

/// The sandboxes of pod `uid`, newest first, with the IPs of the ready ones.
async fn runtime_sandboxes(cri: &dyn RuntimeService, uid: &str) -> Result<Vec<SandboxInfo>, CriError> {
    let listed = cri
        .list_pod_sandboxes(Some(api::PodSandboxFilter { label_selector: uid_filter(uid), ..Default::default() }))
        .await?;
    let read = listed.into_iter().map(|s| async move {
        let ready = s.state == api::PodSandboxState::SandboxReady as i32;
        let ip = if ready {
            match cri.pod_sandbox_status(&s.id).await {
                Ok(st) => st.network.map(|n| n.ip).filter(|ip| !ip.is_empty()),
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        Ok(Some(SandboxInfo {
            id: s.id,
            attempt: s.metadata.map(|m| m.attempt).unwrap_or(0),
            ready,
            created_at: s.created_at,
            ip,
        }))
    });
    let mut sandboxes: Vec<SandboxInfo> = futures::future::try_join_all(read).await?.into_iter().flatten().collect();
    sandboxes.sort_by_key(|s| std::cmp::Reverse((s.created_at, s.attempt)));
    Ok(sandboxes)
}

/// The containers of pod `uid`, newest first, with their status.
async fn runtime_containers(cri: &dyn RuntimeService, uid: &str) -> Result<Vec<ContainerInfo>, CriError> {
    let listed = cri
        .list_containers(Some(api::ContainerFilter { label_selector: uid_filter(uid), ..Default::default() }))
        .await?;
    let read = listed.into_iter().map(|c| async move {
        let st = match cri.container_status(&c.id).await {
            Ok(st) => st,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = st.metadata.clone().unwrap_or_default();
        Ok(Some(ContainerInfo {
            id: c.id.clone(),
            name: meta.name,
            attempt: meta.attempt,
            state: api::ContainerState::try_from(st.state).unwrap_or(api::ContainerState::ContainerUnknown),
            created_at: st.created_at,
            started_at: st.started_at,
            finished_at: st.finished_at,
            exit_code: st.exit_code,
            reason: st.reason.clone(),
            message: st.message.clone(),
            image: st.image.map(|i| i.image).unwrap_or_default(),
            image_ref: st.image_ref.clone(),
            sandbox_id: c.pod_sandbox_id.clone(),
            hash: st.annotations.get(ANNOTATION_CONTAINER_HASH).cloned().unwrap_or_default(),
            init: st.annotations.get(ANNOTATION_CONTAINER_KIND).map(|k| k == "init").unwrap_or(false),
        }))
    });
    let mut containers: Vec<ContainerInfo> = futures::future::try_join_all(read).await?.into_iter().flatten().collect();
    containers.sort_by_key(|c| std::cmp::Reverse((c.created_at, c.attempt)));
    Ok(containers)
}

/// Pod UIDs with sandboxes or containers on the runtime (for housekeeping of orphans).
///
/// # Errors
/// [`CriError`] when the runtime cannot be listed.
pub async fn runtime_pod_uids(cri: &dyn RuntimeService) -> Result<std::collections::HashSet<String>, CriError> {
    let mut uids = std::collections::HashSet::new();
    for s in cri.list_pod_sandboxes(None).await? {
        if let Some(uid) = s.labels.get(LABEL_POD_UID) {
            uids.insert(uid.clone());
        }
    }
    for c in cri.list_containers(None).await? {
        if let Some(uid) = c.labels.get(LABEL_POD_UID) {
            uids.insert(uid.clone());
        }
    }
    Ok(uids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn cfg() -> PodRuntimeConfig {
        PodRuntimeConfig {
            node_name: "n1".into(),
            node_ip: "192.0.2.10".into(),
            root_dir: PathBuf::from("/var/lib/skiff/kubelet"),
            cgroup_root: "/kubepods".into(),
            cluster_dns: vec!["10.43.0.10".into()],
            cluster_domain: "cluster.local".into(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            allocatable_cpu_millis: 2000,
            memory_capacity: 4 << 30,
            allocatable_ephemeral_storage: 10 << 30,
            runtime_name: "containerd".into(),
        }
    }

    fn pod(spec: PodSpec) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        }
    }

    #[test]
    fn sandbox_config_carries_labels_ports_and_qos_cgroup_parent() {
        let p = pod(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                ports: Some(vec![ContainerPort { container_port: 80, host_port: Some(8080), ..Default::default() }]),
                ..Default::default()
            }],
            ..Default::default()
        });
        let sc = sandbox_config(&p, &cfg(), 2, api::DnsConfig::default());
        assert_eq!(sc.metadata.as_ref().map(|m| m.attempt), Some(2));
        assert_eq!(sc.hostname, "web");
        assert_eq!(sc.labels.get(LABEL_POD_UID).map(String::as_str), Some("uid-1"));
        assert_eq!(sc.port_mappings.len(), 1);
        assert_eq!(sc.port_mappings[0].host_port, 8080);
        let linux = sc.linux.unwrap_or_default();
        assert_eq!(linux.cgroup_parent, "/kubepods/besteffort/poduid-1");
        assert!(sc.log_directory.ends_with("logs/shop_web_uid-1"));
    }

    #[test]
    fn container_resources_map_requests_and_limits() {
        let c = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".to_string(), Quantity("250m".into()))])),
                limits: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("500m".into())),
                    ("memory".to_string(), Quantity("64Mi".into())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = container_resources(&c, QosClass::Burstable, 4 << 30);
        assert_eq!(r.cpu_shares, 256);
        assert_eq!(r.cpu_quota, 50_000);
        assert_eq!(r.cpu_period, 100_000);
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        let none = container_resources(&Container::default(), QosClass::BestEffort, 4 << 30);
        assert_eq!((none.cpu_shares, none.cpu_quota, none.memory_limit_in_bytes, none.oom_score_adj), (2, 0, 0, 1000));
    }

    #[test]
    fn container_config_expands_command_and_args_from_env() {
        let p = pod(PodSpec::default());
        let c = Container {
            name: "app".into(),
            image: Some("skiff.local/busybox:1.35".into()),
            command: Some(vec!["/bin/sh".into(), "-c".into()]),
            args: Some(vec!["echo $(GREETING)".into()]),
            ..Default::default()
        };
        let start = ContainerStart {
            pod: &p,
            container: &c,
            kind: ContainerKind::Regular,
            attempt: 3,
            image_ref: "sha256:abc".into(),
            env: vec![("GREETING".into(), "hi".into())],
            mounts: vec![],
        };
        let cc = container_config(&start, &cfg());
        assert_eq!(cc.args, vec!["echo hi"]);
        assert_eq!(cc.log_path, "app/3.log");
        assert_eq!(cc.image.as_ref().map(|i| i.image.as_str()), Some("sha256:abc"));
        assert_eq!(cc.annotations.get(ANNOTATION_CONTAINER_HASH), Some(&container_hash(&c)));
        assert_eq!(cc.labels.get(LABEL_CONTAINER_NAME).map(String::as_str), Some("app"));
    }

    #[test]
    fn container_hash_changes_with_the_image() {
        let a = Container { name: "c".into(), image: Some("a:1".into()), ..Default::default() };
        let b = Container { name: "c".into(), image: Some("a:2".into()), ..Default::default() };
        assert_eq!(container_hash(&a), container_hash(&a.clone()));
        assert_ne!(container_hash(&a), container_hash(&b));
    }

    #[test]
    fn hostname_is_truncated_to_a_valid_label() {
        let mut p = pod(PodSpec::default());
        p.metadata.name = Some(format!("{}-x", "a".repeat(62)));
        assert_eq!(pod_hostname(&p), "a".repeat(62));
    }
}
