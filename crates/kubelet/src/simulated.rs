//! Simulated nodes (KWOK-style): Node objects with leases and status, whose bound pods are
//! reported Running and Ready without any container being run.
//!
//! One process can host thousands of such nodes: all of them share one lease task
//! ([`crate::lease::run_heartbeats`]), one pod watch, one node watch and a small pool of
//! workers fed by a deduplicating [`WorkQueue`]. Per node only its name, UID and a 256-bit pod IP
//! bitmap are kept.
//!
//! Pod behaviour, per pod bound to a simulated node:
//! - not terminating → status patched to phase Running with conditions PodScheduled,
//!   PodReadyToStartContainers, Initialized, ContainersReady and Ready all True, every container
//!   `running` and ready, init containers `terminated` with reason Completed, `podIP` from the
//!   node's fake /24 (or the node IP for hostNetwork pods), `hostIP`, `startTime`, `qosClass`;
//! - annotation `skiff.io/simulated-phase: Succeeded|Failed` → the pod is reported completed
//!   instead (containers terminated with exit code 0 or 1), for Job tests;
//! - terminating (`deletionTimestamp` set) → the pod object is deleted with grace period 0 and a
//!   UID precondition, as a kubelet does once the containers have stopped.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, HostIP, Node, NodeSystemInfo,
    Pod, PodCondition, PodIP, PodStatus, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use skiff_runtime::informer::{ApiListerWatcher, HandlerFns, Informer};
use skiff_runtime::workqueue::WorkQueue;
use tokio::task::JoinSet;

use crate::Error;
use crate::lease::{self, LeaseHolder};
use crate::node::{self, NodeCapacity, NodeHealth, NodeTemplate};
use crate::qos;

/// Label set on every simulated node (value "true").
pub const SIMULATED_NODE_LABEL: &str = "skiff.io/simulated";

/// Pod annotation choosing the phase a simulated node reports: `Running` (default), `Succeeded`
/// or `Failed`.
pub const SIMULATED_PHASE_ANNOTATION: &str = "skiff.io/simulated-phase";

/// Field selector of the pod watch: pods bound to some node.
const BOUND_PODS: &str = "spec.nodeName!=";

/// How often each simulated node's status (heartbeat times) is rewritten even when nothing
/// changed (kubelet `nodeStatusReportFrequency`).
const NODE_STATUS_REPORT_INTERVAL: Duration = Duration::from_secs(300);

/// Settings of [`run_simulated_nodes`].
#[derive(Debug, Clone)]
pub struct SimulatedNodesConfig {
    /// Number of nodes (`--simulated-nodes N`).
    pub count: usize,
    /// Node names are `<name_prefix><index>`, index from 0.
    pub name_prefix: String,
    /// Capacity (and allocatable) of each node.
    pub capacity: NodeCapacity,
    /// Extra labels on each node (besides `skiff.io/simulated=true` and the well-known ones).
    pub labels: BTreeMap<String, String>,
    /// Taints of each node.
    pub taints: Vec<Taint>,
    /// Node `i` gets pod CIDR `pod_cidr_base + i * 256` / 24; pods get addresses .2 to .254 of it.
    pub pod_cidr_base: Ipv4Addr,
    /// Node `i` gets InternalIP `node_ip_base + i + 1`.
    pub node_ip_base: Ipv4Addr,
    /// Lease renew interval (10 s in Kubernetes).
    pub heartbeat_interval: Duration,
    /// Concurrent API calls for pod status and deletions.
    pub workers: usize,
    /// Whether the nodes keep NetworkPolicy bookkeeping: a [`skiff_netpol::Controller`] over
    /// their pods with no kernel behind it ([`skiff_netpol::NoKernel`]).
    pub network_policy: bool,
}

impl Default for SimulatedNodesConfig {
    fn default() -> Self {
        SimulatedNodesConfig {
            count: 0,
            name_prefix: "sim-node-".to_string(),
            capacity: NodeCapacity {
                cpu: "32".to_string(),
                memory: "256Gi".to_string(),
                ephemeral_storage: "1Ti".to_string(),
                pods: 110,
            },
            labels: BTreeMap::new(),
            taints: Vec::new(),
            pod_cidr_base: Ipv4Addr::new(10, 128, 0, 0),
            node_ip_base: Ipv4Addr::new(172, 16, 0, 0),
            heartbeat_interval: lease::RENEW_INTERVAL,
            workers: 16,
            network_policy: true,
        }
    }
}

impl SimulatedNodesConfig {
    /// Checks the settings.
    ///
    /// # Errors
    /// [`Error::Config`] for unparseable capacities, address ranges that overflow IPv4, or
    /// zero workers.
    pub fn validate(&self) -> Result<(), Error> {
        self.capacity.validate()?;
        let span = (self.count as u64) * 256;
        if u64::from(u32::from(self.pod_cidr_base)) + span > u64::from(u32::MAX) {
            return Err(Error::Config(format!(
                "{} pod CIDRs of /24 do not fit after {}",
                self.count, self.pod_cidr_base
            )));
        }
        if u64::from(u32::from(self.node_ip_base)) + self.count as u64 + 1 > u64::from(u32::MAX) {
            return Err(Error::Config(format!("{} node IPs do not fit after {}", self.count, self.node_ip_base)));
        }
        if self.workers == 0 {
            return Err(Error::Config("simulated nodes need at least one worker".to_string()));
        }
        Ok(())
    }

    /// Name of node `i`.
    pub fn node_name(&self, i: usize) -> String {
        format!("{}{}", self.name_prefix, i)
    }

    fn pod_cidr_start(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.pod_cidr_base) + (i as u32) * 256)
    }

    fn node_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.node_ip_base) + i as u32 + 1)
    }

    fn template(&self, i: usize) -> NodeTemplate {
        let name = self.node_name(i);
        let mut labels = self.labels.clone();
        labels.insert(SIMULATED_NODE_LABEL.to_string(), "true".to_string());
        NodeTemplate {
            name: name.clone(),
            labels,
            annotations: BTreeMap::from([("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string())]),
            pod_cidr: Some(format!("{}/24", self.pod_cidr_start(i))),
            taints: self.taints.clone(),
            capacity: self.capacity.clone(),
            allocatable: self.capacity.clone(),
            internal_ip: self.node_ip(i).to_string(),
            hostname: name,
            node_info: NodeSystemInfo {
                architecture: "amd64".to_string(),
                boot_id: format!("simulated-boot-{i}"),
                container_runtime_version: "simulated://0.1.0".to_string(),
                kernel_version: "simulated".to_string(),
                kube_proxy_version: String::new(),
                kubelet_version: node::KUBELET_VERSION.to_string(),
                machine_id: format!("simulated-{i}"),
                operating_system: "linux".to_string(),
                os_image: "skiff simulated node".to_string(),
                system_uuid: format!("simulated-{i}"),
                swap: None,
            },
            kubelet_port: node::KUBELET_PORT,
        }
    }
}

/// Pod IPs handed out on one node: a bitmap over the last octet of its /24.
#[derive(Debug, Clone, Default)]
struct IpPool {
    used: [u64; 4],
}

impl IpPool {
    /// Takes the lowest free host address in .2–.254.
    fn allocate(&mut self) -> Option<u8> {
        (2u8..=254).find(|&o| !self.is_used(o)).inspect(|&o| self.mark(o, true))
    }
    fn is_used(&self, octet: u8) -> bool {
        self.used[usize::from(octet / 64)] & (1 << (octet % 64)) != 0
    }
    fn mark(&mut self, octet: u8, used: bool) {
        let word = &mut self.used[usize::from(octet / 64)];
        if used {
            *word |= 1 << (octet % 64);
        } else {
            *word &= !(1 << (octet % 64));
        }
    }
}

struct SimNode {
    name: String,
    ips: IpPool,
    /// When the node's conditions last changed status (registration, or the node found not
    /// Ready): the `lastTransitionTime` its status reports keep.
    conditions_since: Timestamp,
}

/// State shared by the watchers and workers.
struct State {
    cfg: SimulatedNodesConfig,
    client: Client,
    by_name: HashMap<String, usize>,
    nodes: Mutex<Vec<SimNode>>,
    /// Bound pods, by "namespace/name" (the informer's cache; the handlers act only on pods of
    /// our nodes).
    pods: Arc<Informer<Pod>>,
    /// Pod IP per pod UID.
    pod_ips: Mutex<HashMap<String, (usize, Ipv4Addr)>>,
    pod_queue: Arc<WorkQueue<String>>,
    node_queue: Arc<WorkQueue<usize>>,
}

/// A running set of simulated nodes; dropping it stops their heartbeats and pod handling.
pub struct SimulatedNodes {
    names: Vec<String>,
    tasks: JoinSet<()>,
}

impl SimulatedNodes {
    /// Registers the nodes (waiting until every one is registered) and starts their leases,
    /// status reporting and pod handling in background tasks.
    ///
    /// # Errors
    /// [`Error::Config`] for invalid settings. API errors during registration are retried.
    pub async fn start(client: Client, cfg: SimulatedNodesConfig) -> Result<Self, Error> {
        cfg.validate()?;
        let nodes_api: Api<Node> = Api::all(client.clone());
        let mut uids: Vec<Option<String>> = vec![None; cfg.count];
        let mut pending: Vec<usize> = (0..cfg.count).collect();
        let mut delay = Duration::from_millis(200);
        let registered_at = Timestamp::now();
        while !pending.is_empty() {
            let results: Vec<(usize, Result<Node, Error>)> = futures::stream::iter(pending.iter().copied())
                .map(|i| {
                    let api = nodes_api.clone();
                    let node =
                        cfg.template(i).to_node(node::node_conditions(&NodeHealth::default(), registered_at, &[]));
                    async move { (i, node::register_node(&api, &node).await) }
                })
                .buffer_unordered(32)
                .collect()
                .await;
            pending.clear();
            for (i, r) in results {
                match r {
                    Ok(n) => uids[i] = n.metadata.uid,
                    Err(e) => {
                        tracing::warn!(node = %cfg.node_name(i), error = %e, "registering simulated node failed; retrying");
                        pending.push(i);
                    }
                }
            }
            if !pending.is_empty() {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
        tracing::info!(count = cfg.count, prefix = %cfg.name_prefix, "simulated nodes registered");

        let names: Vec<String> = (0..cfg.count).map(|i| cfg.node_name(i)).collect();
        let holders: Vec<LeaseHolder> =
            names.iter().zip(uids).map(|(n, node_uid)| LeaseHolder { node_name: n.clone(), node_uid }).collect();
        let state = Arc::new(State {
            by_name: names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect(),
            nodes: Mutex::new(
                names
                    .iter()
                    .map(|n| SimNode { name: n.clone(), ips: IpPool::default(), conditions_since: registered_at })
                    .collect(),
            ),
            pods: Arc::new(Informer::with_source(
                ApiResource::erase::<Pod>(&()),
                None,
                // Only bound pods concern a node: unbound ones (every pod between its create and
                // its binding) are filtered out by the server instead of being decoded here.
                ApiListerWatcher::new(Api::all(client.clone()), watcher::Config::default().fields(BOUND_PODS)),
            )),
            pod_ips: Mutex::new(HashMap::new()),
            pod_queue: Arc::new(WorkQueue::new()),
            node_queue: Arc::new(WorkQueue::new()),
            client: client.clone(),
            cfg,
        });

        let mut tasks = JoinSet::new();
        let lease_api: Api<Lease> = Api::namespaced(client.clone(), lease::NODE_LEASE_NAMESPACE);
        tasks.spawn(lease::run_heartbeats(lease_api, holders, state.cfg.heartbeat_interval));
        tasks.spawn(watch_pods(Arc::clone(&state)));
        tasks.spawn(watch_nodes(Arc::clone(&state)));
        tasks.spawn(report_node_status_periodically(Arc::clone(&state)));
        for _ in 0..state.cfg.workers {
            tasks.spawn(pod_worker(Arc::clone(&state)));
        }
        for _ in 0..2 {
            tasks.spawn(node_worker(Arc::clone(&state)));
        }
        if state.cfg.network_policy {
            network_policy_bookkeeping(&client, &state.pods, &names, &mut tasks);
        }
        Ok(SimulatedNodes { names, tasks })
    }

    /// Names of the simulated nodes.
    pub fn node_names(&self) -> &[String] {
        &self.names
    }

    /// Waits until the background tasks end (they only end when a task panics).
    pub async fn wait(mut self) {
        while let Some(r) = self.tasks.join_next().await {
            if let Err(e) = r {
                tracing::error!(error = %e, "simulated node task ended");
            }
        }
    }
}

/// NetworkPolicy bookkeeping of the simulated nodes: one controller for all of them, fed by
/// their bound-pod informer and its own Namespace and NetworkPolicy informers, programming no
/// kernel.
fn network_policy_bookkeeping(client: &Client, pods: &Arc<Informer<Pod>>, names: &[String], tasks: &mut JoinSet<()>) {
    let cfg = skiff_netpol::ControllerConfig {
        nodes: names.iter().cloned().collect(),
        min_sync_period: skiff_netpol::DEFAULT_MIN_SYNC_PERIOD,
    };
    let controller = skiff_netpol::Controller::new(cfg, Arc::new(skiff_netpol::NoKernel));
    skiff_netpol::feed_pods(pods, &controller);
    let namespaces = Arc::new(Informer::with_source(
        ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
        None,
        ApiListerWatcher::new(Api::all(client.clone()), watcher::Config::default()),
    ));
    let policies = Arc::new(Informer::with_source(
        ApiResource::erase::<k8s_openapi::api::networking::v1::NetworkPolicy>(&()),
        None,
        ApiListerWatcher::new(Api::all(client.clone()), watcher::Config::default()),
    ));
    skiff_netpol::feed_namespaces(&namespaces, &controller);
    skiff_netpol::feed_policies(&policies, &controller);
    let ready = {
        let (pods, namespaces, policies) = (pods.clone(), namespaces.clone(), policies.clone());
        async move {
            pods.wait_for_sync().await;
            namespaces.wait_for_sync().await;
            policies.wait_for_sync().await;
        }
    };
    tasks.spawn(namespaces.run());
    tasks.spawn(policies.run());
    tasks.spawn(controller.run(ready));
}

/// Registers `cfg.count` simulated nodes and serves them until the future is dropped.
///
/// Each node gets: a Node object (capacity from `cfg.capacity`, Ready, InternalIP, fake
/// `nodeInfo`, pod CIDR), a Lease in `kube-node-lease` renewed every `cfg.heartbeat_interval`,
/// and its bound pods reported Running/Ready (see the module docs). All nodes share a handful of
/// tasks; 5,000 nodes fit in one process.
///
/// # Errors
/// [`Error::Config`] for invalid settings; API errors are logged and retried, never returned.
pub async fn run_simulated_nodes(client: Client, cfg: SimulatedNodesConfig) -> Result<(), Error> {
    SimulatedNodes::start(client, cfg).await?.wait().await;
    Ok(())
}

fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

fn pod_node(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// Feeds the pod informer's events to the pod workers. The handlers hold the state weakly: it
/// owns the informer, and dropping the nodes must free both.
async fn watch_pods(state: Arc<State>) {
    let weak = Arc::downgrade(&state);
    let (on_add, on_update, on_delete) = (weak.clone(), weak.clone(), weak);
    let handler = HandlerFns::new()
        .on_add(move |pod: &Arc<Pod>| {
            if let Some(state) = on_add.upgrade() {
                apply_pod(&state, pod);
            }
        })
        .on_update(move |_, pod: &Arc<Pod>| {
            if let Some(state) = on_update.upgrade() {
                apply_pod(&state, pod);
            }
        })
        .on_delete(move |pod: &Arc<Pod>| {
            if let Some(state) = on_delete.upgrade() {
                forget_pod(&state, pod);
            }
        });
    state.pods.add_event_handler(Arc::new(handler));
    let informer = Arc::clone(&state.pods);
    drop(state);
    informer.run().await;
}

/// A pod of the informer's cache was added or changed: adopt its IP and queue its sync.
fn apply_pod(state: &State, pod: &Pod) {
    let Some(node_idx) = pod_node(pod).and_then(|n| state.by_name.get(n)).copied() else { return };
    // Adopt an IP reported earlier (e.g. by a previous run of this process).
    if let (Some(uid), Some(ip)) = (pod.metadata.uid.clone(), pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()))
        && let Ok(ip) = ip.parse::<Ipv4Addr>()
    {
        let base = u32::from(state.cfg.pod_cidr_start(node_idx));
        let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
        if !host_network
            && u32::from(ip) & !0xff == base
            && let std::collections::hash_map::Entry::Vacant(e) = state.pod_ips.lock().entry(uid)
        {
            e.insert((node_idx, ip));
            state.nodes.lock()[node_idx].ips.mark(ip.octets()[3], true);
        }
    }
    state.pod_queue.add(pod_key(pod));
}

/// A pod left the informer's cache: release its IP.
fn forget_pod(state: &State, pod: &Pod) {
    if let Some(uid) = pod.metadata.uid.as_ref()
        && let Some((node_idx, ip)) = state.pod_ips.lock().remove(uid)
    {
        state.nodes.lock()[node_idx].ips.mark(ip.octets()[3], false);
    }
}

async fn pod_worker(state: Arc<State>) {
    loop {
        // The queue is never shut down: the workers end when the runtime drops them.
        let Some(key) = state.pod_queue.get().await else { return };
        let result = sync_pod(&state, &key).await;
        state.pod_queue.done(&key);
        if let Err(e) = result {
            tracing::debug!(pod = %key, error = %e, "simulated pod sync failed; requeueing");
            state.pod_queue.add_after(key, Duration::from_secs(1));
        }
    }
}

/// The phase a simulated node reports for `pod`.
fn desired_phase(pod: &Pod) -> &'static str {
    match pod.annotations().get(SIMULATED_PHASE_ANNOTATION).map(String::as_str) {
        Some("Succeeded") => "Succeeded",
        Some("Failed") => "Failed",
        _ => "Running",
    }
}

/// True when the pod's status already shows what a simulated node would report.
fn already_reported(pod: &Pod, phase: &str) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    let containers = pod.spec.as_ref().map(|s| s.containers.len()).unwrap_or(0);
    status.phase.as_deref() == Some(phase)
        && status.pod_ip.is_some()
        && status.container_statuses.as_ref().map(Vec::len) == Some(containers)
}

async fn sync_pod(state: &State, key: &str) -> Result<(), Error> {
    let Some(pod) = state.pods.store().get(key) else { return Ok(()) };
    let Some(node_idx) = pod_node(&pod).and_then(|n| state.by_name.get(n)).copied() else { return Ok(()) };
    let api: Api<Pod> = Api::namespaced(state.client.clone(), &pod.namespace().unwrap_or_default());
    if pod.metadata.deletion_timestamp.is_some() {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..Default::default()
        };
        return match api.delete(&pod.name_any(), &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    let current_phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(current_phase, Some("Succeeded" | "Failed")) {
        return Ok(());
    }
    let phase = desired_phase(&pod);
    if already_reported(&pod, phase) {
        return Ok(());
    }
    let host_ip = state.cfg.node_ip(node_idx);
    let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
    let pod_ip = if host_network {
        host_ip
    } else {
        let uid = pod.metadata.uid.clone().unwrap_or_else(|| key.to_string());
        let mut ips = state.pod_ips.lock();
        match ips.get(&uid) {
            Some((_, ip)) => *ip,
            None => {
                let octet = state.nodes.lock()[node_idx].ips.allocate().ok_or_else(|| {
                    Error::Config(format!("node {} has no free pod IP", state.cfg.node_name(node_idx)))
                })?;
                let o = state.cfg.pod_cidr_start(node_idx).octets();
                let ip = Ipv4Addr::new(o[0], o[1], o[2], octet);
                ips.insert(uid, (node_idx, ip));
                ip
            }
        }
    };
    let status = simulated_pod_status(&pod, phase, host_ip, pod_ip, Timestamp::now());
    let patch = serde_json::json!({ "status": status });
    match api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn condition(type_: &str, status: bool, reason: Option<&str>, now: &Time) -> PodCondition {
    PodCondition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.map(str::to_string),
        last_transition_time: Some(now.clone()),
        ..Default::default()
    }
}

/// The status a simulated node reports for `pod` in `phase` ("Running", "Succeeded" or
/// "Failed").
fn simulated_pod_status(pod: &Pod, phase: &str, host_ip: Ipv4Addr, pod_ip: Ipv4Addr, now: Timestamp) -> PodStatus {
    let now = Time(now);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let running = phase == "Running";
    let start_time = pod.status.as_ref().and_then(|s| s.start_time.clone()).unwrap_or_else(|| now.clone());
    let container_id = |name: &str| format!("simulated://{uid}-{name}");
    let terminated = |name: &str, exit_code: i32| ContainerState {
        terminated: Some(ContainerStateTerminated {
            container_id: Some(container_id(name)),
            exit_code,
            reason: Some(if exit_code == 0 { "Completed" } else { "Error" }.to_string()),
            started_at: Some(start_time.clone()),
            finished_at: Some(now.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let init_statuses: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: format!("simulated://{}", c.image.clone().unwrap_or_default()),
            container_id: Some(container_id(&c.name)),
            ready: true,
            started: Some(false),
            restart_count: 0,
            state: Some(terminated(&c.name, 0)),
            ..Default::default()
        })
        .collect();
    let exit_code = if phase == "Failed" { 1 } else { 0 };
    let statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: format!("simulated://{}", c.image.clone().unwrap_or_default()),
            container_id: Some(container_id(&c.name)),
            ready: running,
            started: Some(running),
            restart_count: 0,
            state: Some(if running {
                ContainerState {
                    running: Some(ContainerStateRunning { started_at: Some(start_time.clone()) }),
                    ..Default::default()
                }
            } else {
                terminated(&c.name, exit_code)
            }),
            ..Default::default()
        })
        .collect();
    let not_ready_reason = (!running).then_some("PodCompleted");
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(vec![
            condition("PodReadyToStartContainers", running, None, &now),
            condition("Initialized", true, None, &now),
            condition("Ready", running, not_ready_reason, &now),
            condition("ContainersReady", running, not_ready_reason, &now),
            condition("PodScheduled", true, None, &now),
        ]),
        host_ip: Some(host_ip.to_string()),
        host_ips: Some(vec![HostIP { ip: host_ip.to_string() }]),
        pod_ip: Some(pod_ip.to_string()),
        pod_ips: Some(vec![PodIP { ip: pod_ip.to_string() }]),
        start_time: Some(start_time),
        qos_class: Some(qos::pod_qos_class(pod).as_str().to_string()),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        ..Default::default()
    }
}

async fn watch_nodes(state: Arc<State>) {
    let api: Api<Node> = Api::all(state.client.clone());
    let cfg = watcher::Config::default().labels(&format!("{SIMULATED_NODE_LABEL}=true"));
    let mut stream = watcher::watcher(api, cfg).boxed();
    loop {
        let node = match stream.try_next().await {
            Ok(Some(watcher::Event::Apply(n) | watcher::Event::InitApply(n))) => n,
            Ok(Some(_)) => continue,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "simulated nodes: node watch failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let Some(&i) = state.by_name.get(&node.name_any()) else { continue };
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status == "True")
            .unwrap_or(false);
        if !ready {
            // E.g. the node lifecycle controller marked it Unknown while we were away: Ready
            // again from now on.
            state.nodes.lock()[i].conditions_since = Timestamp::now();
            state.node_queue.add(i);
        }
    }
}

async fn report_node_status_periodically(state: Arc<State>) {
    let slots = NODE_STATUS_REPORT_INTERVAL.as_secs().max(1) as usize;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut slot = 0usize;
    loop {
        tick.tick().await;
        slot = (slot + 1) % slots;
        for i in (slot..state.cfg.count).step_by(slots) {
            state.node_queue.add(i);
        }
    }
}

async fn node_worker(state: Arc<State>) {
    let api: Api<Node> = Api::all(state.client.clone());
    loop {
        let Some(i) = state.node_queue.get().await else { return };
        let (name, since) = {
            let nodes = state.nodes.lock();
            (nodes[i].name.clone(), nodes[i].conditions_since)
        };
        let status = state.cfg.template(i).status(reported_conditions(since, Timestamp::now()));
        let patch = serde_json::json!({ "status": status });
        let result = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
        state.node_queue.done(&i);
        match result {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {
                tracing::warn!(node = %name, "simulated node was deleted; not re-registering");
            }
            Err(e) => {
                tracing::debug!(node = %name, error = %e, "simulated node status update failed; retrying");
                state.node_queue.add_after(i, Duration::from_secs(1));
            }
        }
    }
}

/// A healthy simulated node's conditions at `now`: heartbeats at `now`, transitions at `since`
/// (a kubelet keeps `lastTransitionTime` while a condition's status does not change).
fn reported_conditions(since: Timestamp, now: Timestamp) -> Vec<k8s_openapi::api::core::v1::NodeCondition> {
    let previous = node::node_conditions(&NodeHealth::default(), since, &[]);
    node::node_conditions(&NodeHealth::default(), now, &previous)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("sim-node-0".into()),
                init_containers: Some(vec![Container { name: "init".into(), ..Default::default() }]),
                containers: vec![
                    Container { name: "a".into(), image: Some("img:1".into()), ..Default::default() },
                    Container { name: "b".into(), image: Some("img:2".into()), ..Default::default() },
                ],
                ..Default::default()
            }),
            status: None,
        }
    }

    fn cond(status: &PodStatus, t: &str) -> String {
        status.conditions.iter().flatten().find(|c| c.type_ == t).map(|c| c.status.clone()).unwrap_or_default()
    }

    #[test]
    fn running_status_has_ready_containers_and_ips() {
        let p = pod(&[]);
        let s = simulated_pod_status(
            &p,
            "Running",
            Ipv4Addr::new(172, 16, 0, 1),
            Ipv4Addr::new(10, 128, 0, 2),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.128.0.2"));
        assert_eq!(s.host_ip.as_deref(), Some("172.16.0.1"));
        for t in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            assert_eq!(cond(&s, t), "True", "{t}");
        }
        let cs = s.container_statuses.clone().unwrap_or_default();
        assert_eq!(cs.len(), 2);
        assert!(cs.iter().all(|c| c.ready && c.state.as_ref().is_some_and(|st| st.running.is_some())));
        let init = s.init_container_statuses.clone().unwrap_or_default();
        assert_eq!(init[0].state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code), Some(0));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
        let mut reported = p.clone();
        reported.status = Some(s);
        assert!(already_reported(&reported, "Running"));
        assert!(!already_reported(&p, "Running"));
    }

    #[test]
    fn phase_annotation_completes_the_pod() {
        let p = pod(&[(SIMULATED_PHASE_ANNOTATION, "Failed")]);
        assert_eq!(desired_phase(&p), "Failed");
        let s = simulated_pod_status(&p, "Failed", Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, Timestamp::UNIX_EPOCH);
        assert_eq!(cond(&s, "Ready"), "False");
        let exit = s.container_statuses.unwrap_or_default()[0]
            .state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .map(|t| t.exit_code);
        assert_eq!(exit, Some(1));
        assert_eq!(desired_phase(&pod(&[])), "Running");
    }

    #[test]
    fn ip_pool_hands_out_each_host_address_once_and_reuses_freed_ones() {
        let mut pool = IpPool::default();
        let all: Vec<u8> = std::iter::from_fn(|| pool.allocate()).collect();
        assert_eq!(all.len(), 253);
        assert_eq!(all.first(), Some(&2));
        assert_eq!(all.last(), Some(&254));
        pool.mark(100, false);
        assert_eq!(pool.allocate(), Some(100));
        assert_eq!(pool.allocate(), None);
    }

    #[test]
    fn node_addresses_and_cidrs_are_distinct_per_index() {
        let cfg = SimulatedNodesConfig { count: 3000, ..Default::default() };
        assert!(cfg.validate().is_ok());
        assert_eq!(cfg.template(0).pod_cidr.as_deref(), Some("10.128.0.0/24"));
        assert_eq!(cfg.template(257).pod_cidr.as_deref(), Some("10.129.1.0/24"));
        assert_eq!(cfg.template(257).internal_ip, "172.16.1.2");
        assert_eq!(cfg.node_name(12), "sim-node-12");
    }

    #[test]
    fn overflowing_address_ranges_are_rejected() {
        let cfg =
            SimulatedNodesConfig { count: 10, pod_cidr_base: Ipv4Addr::new(255, 255, 255, 0), ..Default::default() };
        assert!(matches!(cfg.validate(), Err(Error::Config(_))));
    }

    #[test]
    fn status_reports_keep_the_transition_time_and_move_the_heartbeat() {
        let since = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let now = Timestamp::from_second(1_300).unwrap_or(Timestamp::UNIX_EPOCH);
        let conditions = reported_conditions(since, now);
        assert_eq!(conditions.len(), 4);
        for c in &conditions {
            assert_eq!(c.last_transition_time.as_ref().map(|t| t.0), Some(since), "{}", c.type_);
            assert_eq!(c.last_heartbeat_time.as_ref().map(|t| t.0), Some(now), "{}", c.type_);
        }
        let ready = conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status.as_str());
        assert_eq!(ready, Some("True"));
    }
}
