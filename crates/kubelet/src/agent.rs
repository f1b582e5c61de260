//! The node agent (`skiff agent`, and the local node of `skiff server`): registers this
//! machine as a Node, keeps its Lease and status fresh, runs containerd (or uses an existing
//! CRI socket), and runs the pods bound to it.
//!
//! Directory layout under the data directory (as k3s users know it):
//! - `images/` — image tarballs imported at start (air-gapped nodes);
//! - `agent/containerd/` — the managed containerd (root, state, socket, CNI config);
//! - `agent/kubelet/` — pod volumes (`pods/<uid>`) and container logs (`logs/`).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use kube::discovery::ApiResource;
use skiff_runtime::informer::{ApiListerWatcher, HandlerFns, Informer, strip_managed_fields};
use std::sync::Arc;

use crate::Error;
use crate::containerd::{ContainerdConfig, ManagedContainerd};
use crate::cri::CriClient;
use crate::host::ApiPodHost;
use crate::kuberuntime::PodRuntimeConfig;
use crate::lease::{self, LeaseHolder};
use crate::node::{self, MachineInfo, NodeHealth, NodeTemplate};
use crate::pod_workers::PodWorkers;

/// Why a node waiting for its pod CIDR is not Ready yet (the reason text of its Ready condition).
pub const WAITING_FOR_POD_CIDR: &str = "waiting for the node IPAM controller to assign spec.podCIDR";

/// The default sandbox image: the one every node carries in the binary
/// ([`crate::sandbox_image`]), imported into containerd at agent start when missing.
pub const DEFAULT_SANDBOX_IMAGE: &str = crate::sandbox_image::SANDBOX_IMAGE;

/// How often node status is recomputed (kubelet `nodeStatusUpdateFrequency`).
const NODE_STATUS_UPDATE: Duration = Duration::from_secs(10);

/// How often node status is written even when unchanged (kubelet `nodeStatusReportFrequency`).
const NODE_STATUS_REPORT: Duration = Duration::from_secs(300);

/// Settings of [`run_agent`].
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Node name (`--node-name`); default: the host name, lowercased.
    pub node_name: Option<String>,
    /// Data directory (the same as `skiff server --data-dir`).
    pub data_dir: PathBuf,
    /// An existing CRI socket (`--container-runtime-endpoint`); `None` starts a managed
    /// containerd under `<data_dir>/agent/containerd`.
    pub container_runtime_endpoint: Option<PathBuf>,
    /// Pod CIDR of this node when its Node object has none (kubelet `--pod-cidr`). `None`: the
    /// agent registers the Node without one and waits for the node IPAM controller to set
    /// `spec.podCIDR`, then configures the CNI network from it.
    pub pod_cidr: Option<String>,
    /// The node's IP (`--node-ip`); default: the address of the default route's interface.
    pub node_ip: Option<IpAddr>,
    /// Cluster DNS server IPs (`--cluster-dns`).
    pub cluster_dns: Vec<String>,
    /// Cluster domain (`--cluster-domain`).
    pub cluster_domain: String,
    /// The host resolv.conf pods with dnsPolicy Default inherit (`--resolv-conf`; empty: none);
    /// default [`crate::dns::default_resolv_conf`].
    pub resolv_conf: PathBuf,
    /// Maximum pods (`--max-pods`, 110).
    pub max_pods: u32,
    /// Sandbox image.
    pub sandbox_image: String,
    /// Extra node labels (`--node-label`).
    pub labels: BTreeMap<String, String>,
    /// Node taints (`--node-taint`).
    pub taints: Vec<Taint>,
    /// Cgroup root of pods (cgroupfs driver).
    pub cgroup_root: String,
    /// Linux bridge of the managed CNI network.
    pub bridge_name: String,
    /// Port of the kubelet HTTPS endpoint (logs, run); 0 disables it.
    pub kubelet_port: u16,
    /// PEM CA that callers of the kubelet endpoint must present client certificates from
    /// (the API server's kubelet client CA). With `None` the endpoint accepts any caller and
    /// therefore listens on 127.0.0.1 only.
    pub kubelet_client_ca_pem: Option<String>,
    /// Whether the node proxy ([`skiff_proxy`], kube-proxy's nftables mode) programs this
    /// host's Service rules (k3s's `--disable-kube-proxy` turns it off).
    pub kube_proxy: bool,
    /// Whether NetworkPolicies are enforced on this host's pods ([`skiff_netpol`], in
    /// nftables beside the node proxy's table; k3s's `--disable-network-policy` turns it off).
    pub network_policy: bool,
}

impl AgentConfig {
    /// Defaults for a data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        AgentConfig {
            node_name: None,
            data_dir: data_dir.into(),
            container_runtime_endpoint: None,
            pod_cidr: None,
            node_ip: None,
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".to_string(),
            resolv_conf: crate::dns::default_resolv_conf(),
            max_pods: 110,
            sandbox_image: DEFAULT_SANDBOX_IMAGE.to_string(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            cgroup_root: "/kubepods".to_string(),
            bridge_name: "skiff0".to_string(),
            kubelet_port: node::KUBELET_PORT as u16,
            kubelet_client_ca_pem: None,
            kube_proxy: true,
            network_policy: true,
        }
    }

    /// `<data_dir>/images`: tarballs imported at agent start.
    pub fn images_dir(&self) -> PathBuf {
        images_dir(&self.data_dir)
    }
}

/// The images directory of a data directory.
pub fn images_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("images")
}

/// The managed containerd's socket for a data directory.
pub fn containerd_socket(data_dir: &Path) -> PathBuf {
    crate::containerd::ContainerdPaths::new(data_dir.join("agent").join("containerd")).socket()
}

/// Picks the node IP: the local address used to reach the default route (no packet is sent),
/// else the host name's first non-loopback address, else 127.0.0.1.
pub async fn detect_node_ip() -> IpAddr {
    if let Ok(sock) = std::net::UdpSocket::bind("0.0.0.0:0")
        && sock.connect("192.0.2.1:53").is_ok()
        && let Ok(addr) = sock.local_addr()
        && !addr.ip().is_unspecified()
    {
        return addr.ip();
    }
    let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
    if let Ok(addrs) = tokio::net::lookup_host((host.as_str(), 0)).await {
        for a in addrs {
            if !a.ip().is_loopback() {
                return a.ip();
            }
        }
    }
    IpAddr::from([127, 0, 0, 1])
}

fn read_meminfo_kib(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The node's health now: runtime and network readiness from CRI Status, and pressure with the
/// kubelet's default hard eviction thresholds (memory.available < 100Mi, nodefs.available < 10%,
/// pid.available < 5%... approximated from /proc).
async fn observe_health(cri: &CriClient, data_dir: &Path) -> NodeHealth {
    let not_ready = match cri.status().await {
        Ok(s) => {
            let failing: Vec<String> = s
                .status
                .map(|st| st.conditions)
                .unwrap_or_default()
                .into_iter()
                .filter(|c| !c.status)
                .map(|c| format!("{}=false reason:{} message:{}", c.r#type, c.reason, c.message))
                .collect();
            (!failing.is_empty()).then(|| format!("container runtime not ready: {}", failing.join(", ")))
        }
        Err(e) => Some(format!("container runtime is down: {e}")),
    };
    let memory_pressure = read_meminfo_kib("MemAvailable:").is_some_and(|kib| kib < 100 * 1024);
    let disk_pressure = rustix::fs::statvfs(data_dir)
        .map(|v| v.f_blocks > 0 && v.f_bavail.saturating_mul(10) < v.f_blocks)
        .unwrap_or(false);
    let pid_pressure = {
        let max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(u64::MAX);
        let used: u64 = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().nth(3).and_then(|f| f.split('/').nth(1)).and_then(|n| n.parse().ok()))
            .unwrap_or(0);
        used.saturating_mul(20) > max.saturating_mul(19)
    };
    NodeHealth { not_ready, memory_pressure, disk_pressure, pid_pressure }
}

/// Runs the node agent until the future is dropped or a fatal error occurs.
///
/// Steps: start containerd (or connect to `container_runtime_endpoint`), import
/// `<data_dir>/images/*.tar` and, when missing, the built-in sandbox image, register the Node (capacity from the machine, pods=110, podCIDR,
/// nodeInfo with the runtime version from CRI Version), then concurrently: renew the Lease
/// every 10 s, update node status (Ready, MemoryPressure, DiskPressure, PIDPressure), watch the
/// pods bound to this node and run them through CRI.
///
/// # Errors
/// [`Error::Io`]/[`Error::Config`] when the data directory, containerd or the CRI socket cannot
/// be set up; [`Error::Kube`] when the node cannot be registered. Errors after start-up are
/// logged and retried.
pub async fn run_agent(client: Client, cfg: AgentConfig) -> Result<(), Error> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| Error::io(format!("creating {}", cfg.data_dir.display()), e))?;
    let machine = MachineInfo::probe(&cfg.data_dir)?;
    let node_name = cfg.node_name.clone().unwrap_or_else(|| machine.hostname.to_lowercase());
    let node_ip = match cfg.node_ip {
        Some(ip) => ip,
        None => detect_node_ip().await,
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let existing = nodes.get_opt(&node_name).await?;
    let capacity = machine.capacity(cfg.max_pods);
    let template = |pod_cidr: Option<String>, runtime_version: &str| NodeTemplate {
        name: node_name.clone(),
        labels: cfg.labels.clone(),
        annotations: BTreeMap::from([("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string())]),
        pod_cidr,
        taints: cfg.taints.clone(),
        capacity: capacity.clone(),
        allocatable: capacity.clone(),
        internal_ip: node_ip.to_string(),
        hostname: machine.hostname.clone(),
        node_info: machine.node_info(runtime_version),
        kubelet_port: i32::from(cfg.kubelet_port),
    };
    let pod_cidr = match existing.as_ref().and_then(node_pod_cidr).or_else(|| cfg.pod_cidr.clone()) {
        Some(c) => c,
        None => {
            // As a kubelet without --pod-cidr: register (NotReady, no runtime yet) and let the
            // node IPAM controller pick the range the CNI network needs.
            let health = NodeHealth { not_ready: Some(WAITING_FOR_POD_CIDR.to_string()), ..Default::default() };
            let node = template(None, "").to_node(node::node_conditions(&health, Timestamp::now(), &[]));
            node::register_node(&nodes, &node).await?;
            tracing::info!(node = %node_name, "registered without a pod CIDR; waiting for the node IPAM controller");
            wait_for_pod_cidr(&nodes, &node_name).await?
        }
    };

    // Container runtime.
    let mut managed = None;
    let socket = match &cfg.container_runtime_endpoint {
        Some(endpoint) => endpoint.clone(),
        None => {
            let mut ccfg = ContainerdConfig::for_data_dir(&cfg.data_dir.join("agent"), &pod_cidr, &cfg.sandbox_image);
            ccfg.bridge_name = cfg.bridge_name.clone();
            let c = ManagedContainerd::start(ccfg).await?;
            let socket = c.socket();
            managed = Some(c);
            socket
        }
    };
    let imported = crate::images::import_dir(&socket, &cfg.images_dir()).await;
    if imported > 0 {
        tracing::info!(imported, dir = %cfg.images_dir().display(), "imported image tarballs");
    }
    let cri = CriClient::connect(&socket).await.map_err(|e| Error::Config(e.to_string()))?;
    let version = cri.version().await.map_err(|e| Error::Config(e.to_string()))?;
    if crate::sandbox_image::ensure_sandbox_image(&cri, &socket, &cfg.sandbox_image, &cfg.data_dir.join("agent"))
        .await?
    {
        tracing::info!(image = %cfg.sandbox_image, "imported the built-in sandbox image");
    }
    let runtime_version = format!("{}://{}", version.runtime_name, version.runtime_version);

    // Node registration.
    let template = template(Some(pod_cidr.clone()), &runtime_version);
    let health = observe_health(&cri, &cfg.data_dir).await;
    let registered =
        node::register_node(&nodes, &template.to_node(node::node_conditions(&health, Timestamp::now(), &[]))).await?;
    tracing::info!(node = %node_name, ip = %node_ip, pod_cidr = %pod_cidr, runtime = %runtime_version, "node registered");

    let kubelet_root = cfg.data_dir.join("agent").join("kubelet");
    let rcfg = PodRuntimeConfig {
        node_name: node_name.clone(),
        node_ip: node_ip.to_string(),
        root_dir: kubelet_root,
        cgroup_root: cfg.cgroup_root.clone(),
        cluster_dns: cfg.cluster_dns.clone(),
        cluster_domain: cfg.cluster_domain.clone(),
        resolv_conf: cfg.resolv_conf.clone(),
        allocatable_cpu_millis: machine.cpus as i64 * 1000,
        memory_capacity: machine.memory_bytes as i64,
        allocatable_ephemeral_storage: machine.ephemeral_storage_bytes as i64,
        runtime_name: version.runtime_name.clone(),
    };
    let host = ApiPodHost::new(client.clone(), &node_name);
    let workers = PodWorkers::new(cri.clone(), host, rcfg);

    let server = {
        let scfg = crate::server::KubeletServerConfig {
            // Without a client CA anyone could read logs and run commands: serve on loopback only.
            bind: if cfg.kubelet_client_ca_pem.is_some() {
                SocketAddr::from(([0, 0, 0, 0], cfg.kubelet_port))
            } else {
                tracing::warn!("no kubelet client CA configured: the kubelet endpoint listens on 127.0.0.1 only");
                SocketAddr::from(([127, 0, 0, 1], cfg.kubelet_port))
            },
            client_ca_pem: cfg.kubelet_client_ca_pem.clone(),
            serving: None,
            sans: vec![node_name.clone(), node_ip.to_string(), machine.hostname.clone()],
            // With client certificates, stats and metrics are authorized as the kubelet's
            // Webhook mode does; on loopback without them, as before.
            authorizer: cfg
                .kubelet_client_ca_pem
                .is_some()
                .then(|| Arc::new(client.clone()) as Arc<dyn crate::server::authz::NodeAuthorizer>),
            node_name: node_name.clone(),
        };
        let workers = workers.clone();
        let enabled = cfg.kubelet_port != 0;
        async move {
            if !enabled {
                return std::future::pending::<()>().await;
            }
            if let Err(e) = crate::server::serve(scfg, workers).await {
                tracing::error!(error = %e, "the kubelet endpoint is not available (kubectl logs will fail)");
            }
            std::future::pending::<()>().await
        }
    };
    let proxy = node_proxy(client.clone(), &node_name, &pod_cidr, cfg.kube_proxy);
    let network_policy = network_policy(client.clone(), &node_name, cfg.network_policy);
    let leases: Api<Lease> = Api::namespaced(client.clone(), lease::NODE_LEASE_NAMESPACE);
    let holder = LeaseHolder { node_name: node_name.clone(), node_uid: registered.metadata.uid.clone() };
    tokio::select! {
        _ = lease::run_heartbeats(leases, vec![holder], lease::RENEW_INTERVAL) => {}
        _ = sync_node_status(nodes.clone(), template, cri.clone(), cfg.data_dir.clone()) => {}
        _ = watch_pods(client.clone(), node_name.clone(), workers.clone()) => {}
        _ = workers.run() => {}
        _ = server => {}
        _ = proxy => {}
        _ = network_policy => {}
    }
    drop(managed);
    Ok(())
}

/// The node proxy on this host's nftables, if enabled and `nft` is installed; never returns.
/// Traffic from outside the node's pod CIDR to a ClusterIP is masqueraded (kube-proxy's
/// `--detect-local-mode=NodeCIDR`).
fn node_proxy(client: Client, node_name: &str, pod_cidr: &str, enabled: bool) -> impl std::future::Future<Output = ()> {
    let cfg = skiff_proxy::ProxierConfig {
        node_name: node_name.to_string(),
        rules: skiff_proxy::RuleConfig { local_traffic: skiff_proxy::Cidr::parse(pod_cidr) },
        min_sync_period: skiff_proxy::DEFAULT_MIN_SYNC_PERIOD,
    };
    async move {
        let nft = skiff_proxy::NftCommand::default();
        let available = enabled
            && tokio::task::spawn_blocking({
                let nft = nft.clone();
                move || nft.is_available()
            })
            .await
            .unwrap_or(false);
        if available {
            skiff_proxy::run_proxy(client, cfg, Arc::new(nft)).await;
        } else if enabled {
            tracing::warn!("no `nft` program (Debian package nftables): Services are not proxied on this node");
        }
        std::future::pending::<()>().await
    }
}

/// NetworkPolicy enforcement on this host's nftables, if enabled and `nft` is installed;
/// never returns. Pods on the CNI bridge reach each other through the `forward` hook only when
/// bridged IPv4 traffic is passed to it (`net.bridge.bridge-nf-call-iptables`, br_netfilter,
/// which kube-network-policies requires too), so it is turned on when off.
fn network_policy(client: Client, node_name: &str, enabled: bool) -> impl std::future::Future<Output = ()> {
    let cfg = skiff_netpol::ControllerConfig::node(node_name);
    async move {
        let nft = skiff_proxy::NftCommand::default();
        let available = enabled
            && tokio::task::spawn_blocking({
                let nft = nft.clone();
                move || nft.is_available()
            })
            .await
            .unwrap_or(false);
        if available {
            const BRIDGE_NF: &str = "/proc/sys/net/bridge/bridge-nf-call-iptables";
            match std::fs::read_to_string(BRIDGE_NF) {
                Ok(v) if v.trim() == "1" => {}
                Ok(_) => {
                    if let Err(e) = std::fs::write(BRIDGE_NF, "1") {
                        tracing::warn!(error = %e, "cannot turn on {BRIDGE_NF}: NetworkPolicies will not see traffic between pods of this node");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "no {BRIDGE_NF} (br_netfilter): NetworkPolicies will not see traffic between pods of this node")
                }
            }
            skiff_netpol::run_network_policy(client, cfg, Arc::new(nft)).await;
        } else if enabled {
            tracing::warn!("no `nft` program (Debian package nftables): NetworkPolicies are not enforced on this node");
        }
        std::future::pending::<()>().await
    }
}

/// `spec.podCIDR` (or the first of `spec.podCIDRs`) of a Node, when set.
fn node_pod_cidr(node: &Node) -> Option<String> {
    let spec = node.spec.as_ref()?;
    spec.pod_cidr.clone().or_else(|| spec.pod_cidrs.as_ref().and_then(|c| c.first().cloned())).filter(|c| !c.is_empty())
}

/// Watches the Node until it has a pod CIDR and returns it. Logs every 30 s while waiting
/// (no node IPAM controller running, or the cluster CIDR exhausted).
///
/// # Errors
/// [`Error::Kube`] when the Node cannot be watched; [`Error::Config`] when it is deleted.
pub async fn wait_for_pod_cidr(nodes: &Api<Node>, node_name: &str) -> Result<String, Error> {
    let started = Instant::now();
    let cfg = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let mut stream = std::pin::pin!(watcher::watcher(nodes.clone(), cfg));
    let mut next_log = Duration::from_secs(30);
    loop {
        let event = match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await {
            Err(_) => None,
            Ok(Ok(Some(e))) => Some(e),
            Ok(Ok(None)) => return Err(Error::Config(format!("the watch of node {node_name} ended"))),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "watching the Node for its pod CIDR failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                None
            }
        };
        match event {
            Some(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                if let Some(c) = node_pod_cidr(&n) {
                    tracing::info!(node = %node_name, pod_cidr = %c, waited = ?started.elapsed(), "pod CIDR assigned");
                    return Ok(c);
                }
            }
            Some(watcher::Event::Delete(_)) => {
                return Err(Error::Config(format!("node {node_name} was deleted while waiting for its pod CIDR")));
            }
            _ => {}
        }
        if started.elapsed() >= next_log {
            tracing::warn!(node = %node_name, waited = ?started.elapsed(), "{WAITING_FOR_POD_CIDR}");
            next_log += Duration::from_secs(30);
        }
    }
}

/// Recomputes node status every 10 s and writes it when it changed, when the API's copy
/// disagrees (e.g. the node lifecycle controller set Ready=Unknown), or every 5 minutes.
async fn sync_node_status(nodes: Api<Node>, template: NodeTemplate, cri: CriClient, data_dir: PathBuf) {
    let mut last_report = Instant::now();
    let mut last_conditions = Vec::new();
    loop {
        tokio::time::sleep(NODE_STATUS_UPDATE).await;
        let health = observe_health(&cri, &data_dir).await;
        let current = match nodes.get_opt(&template.name).await {
            Ok(Some(n)) => n,
            Ok(None) => {
                tracing::warn!(node = %template.name, "the Node object is gone; re-registering");
                let node = template.to_node(node::node_conditions(&health, Timestamp::now(), &[]));
                if let Err(e) = node::register_node(&nodes, &node).await {
                    tracing::warn!(error = %e, "re-registering the node failed");
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the Node failed");
                continue;
            }
        };
        let api_conditions = current.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        let conditions = node::node_conditions(&health, Timestamp::now(), &api_conditions);
        let due = last_report.elapsed() >= NODE_STATUS_REPORT;
        if !due
            && !node::conditions_changed(&conditions, &api_conditions)
            && !node::conditions_changed(&conditions, &last_conditions)
        {
            continue;
        }
        let patch = serde_json::json!({ "status": template.status(conditions.clone()) });
        match nodes.patch_status(&template.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                last_report = Instant::now();
                last_conditions = conditions;
            }
            Err(e) => tracing::warn!(error = %e, "updating node status failed"),
        }
    }
}

/// Watches the pods bound to `node_name` and hands them to the pod workers: the kubelet's pod
/// config source (`pkg/kubelet/config/apiserver.go`) as an [`Informer`] of the runtime crate, whose
/// relists turn pods gone while the watch was down into deletes.
async fn watch_pods(client: Client, node_name: String, workers: PodWorkers) {
    let api: Api<Pod> = Api::all(client);
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    // The informers' default transform drops API-sourced volumes from cached pods; the kubelet
    // mounts them, so it keeps the whole pod and sheds only managedFields.
    let source = ApiListerWatcher::new(api, cfg).with_transform(strip_managed_fields::<Pod>);
    let informer = Arc::new(Informer::with_source(ApiResource::erase::<Pod>(&()), None, source));
    let handler = {
        let (add, update, delete) = (workers.clone(), workers.clone(), workers.clone());
        HandlerFns::new()
            .on_add(move |p: &Arc<Pod>| add.update_pod(Pod::clone(p)))
            .on_update(move |_, p: &Arc<Pod>| {
                tracing::debug!(pod = %p.name_any(), resource_version = ?p.metadata.resource_version, "pod update received");
                update.update_pod(Pod::clone(p))
            })
            .on_delete(move |p: &Arc<Pod>| delete.remove_pod(p))
    };
    informer.add_event_handler(Arc::new(handler));
    let synced = {
        let informer = informer.clone();
        async move {
            informer.wait_for_sync().await;
            workers.mark_synced();
        }
    };
    tokio::join!(informer.run(), synced);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_paths_follow_the_data_dir() {
        let cfg = AgentConfig::new("/var/lib/skiff");
        assert_eq!(cfg.images_dir(), PathBuf::from("/var/lib/skiff/images"));
        assert_eq!(
            containerd_socket(Path::new("/var/lib/skiff")),
            PathBuf::from("/var/lib/skiff/agent/containerd/containerd.sock")
        );
        assert_eq!(cfg.max_pods, 110);
    }

    #[tokio::test]
    async fn node_ip_detection_always_yields_an_address() {
        let ip = detect_node_ip().await;
        assert!(!ip.is_unspecified());
    }
}
