//! The node IPAM controller (kube-controller-manager's `nodeipam` controller with the
//! `RangeAllocator`, `--allocate-node-cidrs`): gives every Node without `spec.podCIDR` a
//! subnet of the cluster CIDR (`--cluster-cidr`, `/24` per node for IPv4 as with
//! `--node-cidr-mask-size`), never the same subnet twice, and releases it when the Node is
//! deleted.
//!
//! See <https://kubernetes.io/docs/reference/command-line-tools-reference/kube-controller-manager/>
//! (flags `--allocate-node-cidrs`, `--cluster-cidr`, `--node-cidr-mask-size-ipv4/-ipv6`).
//!
//! Bookkeeping happens in the informer's event handlers, so that the allocation map is rebuilt
//! from every existing Node (their `spec.podCIDRs` are marked occupied) before the first
//! allocation: workers start only after the cache has synced. A node's allocation is kept
//! while its patch is retried, so a failed or repeated sync never hands out a second subnet.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;

use skiff_runtime::api::{ApiClient, ApiClientExt, KubeApi, PatchType, is_not_found};
use skiff_runtime::controller::{
    Action, ReconcileError, ReconcileResult, Reconciler, ShutDownOnDrop, WorkerConfig, run_workers,
};
use skiff_runtime::informer::{HandlerFns, Informer, SharedInformerFactory};
use skiff_runtime::leaderelection::{LeaderElectionConfig, LeaderElectionError, LeaderElector};
use skiff_runtime::metrics::ControllerMetrics;
use skiff_runtime::workqueue::WorkQueue;

/// The largest difference between the cluster CIDR's and a node's prefix length
/// (kube-controller-manager refuses more: 65,536 subnets).
pub const MAX_PREFIX_DIFFERENCE: u8 = 16;

/// Why a CIDR could not be parsed, occupied or allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// Not `ADDRESS/PREFIX`, or a prefix longer than the address.
    #[error("invalid CIDR {0:?}")]
    Invalid(String),
    /// The node mask size does not fit the cluster CIDR.
    #[error(
        "node CIDR mask size /{node} does not fit cluster CIDR {cluster} (at most {MAX_PREFIX_DIFFERENCE} bits more)"
    )]
    MaskSize {
        /// The cluster CIDR.
        cluster: String,
        /// The requested node prefix length.
        node: u8,
    },
    /// The CIDR is not inside the cluster CIDR (or is of the other IP family).
    #[error("CIDR {0} is not inside the cluster CIDR {1}")]
    OutOfRange(String, String),
    /// Every subnet is allocated (kube-controller-manager's "CIDR allocation failed; there are
    /// no remaining CIDRs left to allocate in the accepted range").
    #[error("no remaining CIDRs left to allocate in {0}")]
    Full(String),
}

/// A parsed CIDR: network address as a 128-bit number (IPv4 in the low 32 bits) and prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cidr {
    addr: u128,
    prefix: u8,
    v6: bool,
}

impl Cidr {
    fn bits(v6: bool) -> u8 {
        if v6 { 128 } else { 32 }
    }

    fn parse(s: &str) -> Result<Self, CidrError> {
        let invalid = || CidrError::Invalid(s.to_string());
        let (addr, prefix) = s.trim().split_once('/').ok_or_else(invalid)?;
        let ip: IpAddr = addr.parse().map_err(|_| invalid())?;
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        let (addr, v6) = match ip {
            IpAddr::V4(a) => (u128::from(u32::from(a)), false),
            IpAddr::V6(a) => (u128::from(a), true),
        };
        if prefix > Self::bits(v6) {
            return Err(invalid());
        }
        // Host bits are cleared, as net.ParseCIDR does.
        Ok(Cidr { addr: addr & Self::mask(prefix, v6), prefix, v6 })
    }

    fn mask(prefix: u8, v6: bool) -> u128 {
        let bits = Self::bits(v6);
        if prefix == 0 {
            return 0;
        }
        let all = if v6 { u128::MAX } else { u128::from(u32::MAX) };
        (all >> (bits - prefix)) << (bits - prefix) & all
    }

    fn to_string_with(addr: u128, prefix: u8, v6: bool) -> String {
        let ip: IpAddr = if v6 { IpAddr::V6(addr.into()) } else { IpAddr::V4((addr as u32).into()) };
        format!("{ip}/{prefix}")
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&Cidr::to_string_with(self.addr, self.prefix, self.v6))
    }
}

/// The subnets of one cluster CIDR (`pkg/controller/nodeipam/ipam/cidrset`): a bitmap of
/// `2^(node prefix − cluster prefix)` subnets, allocated round-robin from the last allocation
/// so that a released subnet is not handed out again at once.
#[derive(Debug, Clone)]
pub struct CidrSet {
    cluster: Cidr,
    node_prefix: u8,
    used: Vec<bool>,
    allocated: usize,
    next_candidate: usize,
}

impl CidrSet {
    /// The subnets of length `node_prefix` of `cluster_cidr` (e.g. `10.42.0.0/16`, 24).
    ///
    /// # Errors
    /// [`CidrError::Invalid`] for an unparsable CIDR; [`CidrError::MaskSize`] when `node_prefix`
    /// is shorter than the cluster's, longer than the address, or more than
    /// [`MAX_PREFIX_DIFFERENCE`] bits longer than the cluster's.
    pub fn new(cluster_cidr: &str, node_prefix: u8) -> Result<Self, CidrError> {
        let cluster = Cidr::parse(cluster_cidr)?;
        if node_prefix < cluster.prefix
            || node_prefix > Cidr::bits(cluster.v6)
            || node_prefix - cluster.prefix > MAX_PREFIX_DIFFERENCE
        {
            return Err(CidrError::MaskSize { cluster: cluster.to_string(), node: node_prefix });
        }
        let count = 1usize << (node_prefix - cluster.prefix);
        Ok(CidrSet { cluster, node_prefix, used: vec![false; count], allocated: 0, next_candidate: 0 })
    }

    /// Whether the cluster CIDR is IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.cluster.v6
    }

    /// How many subnets are allocated or occupied.
    pub fn allocated(&self) -> usize {
        self.allocated
    }

    fn subnet(&self, index: usize) -> String {
        let shift = Cidr::bits(self.cluster.v6) - self.node_prefix;
        let addr = self.cluster.addr | ((index as u128) << shift);
        Cidr::to_string_with(addr, self.node_prefix, self.cluster.v6)
    }

    /// The first and last subnet indices `cidr` covers (one for a node-sized CIDR, several for
    /// a larger one, the enclosing one for a smaller one).
    fn indices(&self, cidr: &str) -> Result<(usize, usize), CidrError> {
        let c = Cidr::parse(cidr)?;
        let out = || CidrError::OutOfRange(c.to_string(), self.cluster.to_string());
        if c.v6 != self.cluster.v6 || c.prefix < self.cluster.prefix {
            return Err(out());
        }
        if c.addr & Cidr::mask(self.cluster.prefix, c.v6) != self.cluster.addr {
            return Err(out());
        }
        let shift = Cidr::bits(c.v6) - self.node_prefix;
        let offset = |a: u128| ((a - self.cluster.addr) >> shift) as usize;
        let first = offset(c.addr);
        let last = if c.prefix >= self.node_prefix {
            first
        } else {
            offset(c.addr | !Cidr::mask(c.prefix, c.v6) & Cidr::mask(Cidr::bits(c.v6), c.v6))
        };
        Ok((first, last.min(self.used.len() - 1)))
    }

    /// `AllocateNext`: the next free subnet, marked used.
    ///
    /// # Errors
    /// [`CidrError::Full`] when every subnet is used.
    pub fn allocate_next(&mut self) -> Result<String, CidrError> {
        let n = self.used.len();
        for i in 0..n {
            let candidate = (self.next_candidate + i) % n;
            if !self.used[candidate] {
                self.used[candidate] = true;
                self.allocated += 1;
                self.next_candidate = (candidate + 1) % n;
                return Ok(self.subnet(candidate));
            }
        }
        Err(CidrError::Full(self.cluster.to_string()))
    }

    /// `Occupy`: marks every subnet `cidr` covers as used (idempotent).
    ///
    /// # Errors
    /// [`CidrError::Invalid`] or [`CidrError::OutOfRange`].
    pub fn occupy(&mut self, cidr: &str) -> Result<(), CidrError> {
        let (first, last) = self.indices(cidr)?;
        for i in first..=last {
            if !self.used[i] {
                self.used[i] = true;
                self.allocated += 1;
            }
        }
        Ok(())
    }

    /// `Release`: frees every subnet `cidr` covers (idempotent).
    ///
    /// # Errors
    /// [`CidrError::Invalid`] or [`CidrError::OutOfRange`].
    pub fn release(&mut self, cidr: &str) -> Result<(), CidrError> {
        let (first, last) = self.indices(cidr)?;
        for i in first..=last {
            if self.used[i] {
                self.used[i] = false;
                self.allocated -= 1;
            }
        }
        Ok(())
    }

    /// Whether the subnet of `cidr` is used.
    pub fn is_used(&self, cidr: &str) -> bool {
        self.indices(cidr).map(|(f, l)| (f..=l).any(|i| self.used[i])).unwrap_or(false)
    }

    /// The canonical node-sized form of `cidr` (host bits cleared), for bookkeeping keys.
    fn canonical(cidr: &str) -> Option<String> {
        Cidr::parse(cidr).ok().map(|c| c.to_string())
    }
}

/// Settings of the node IPAM controller.
#[derive(Debug, Clone)]
pub struct NodeIpamConfig {
    /// `--cluster-cidr`, e.g. `10.42.0.0/16`.
    pub cluster_cidr: String,
    /// `--node-cidr-mask-size-ipv4` (24) or `-ipv6` (64), by the cluster CIDR's family; `None`
    /// picks that default.
    pub node_cidr_mask_size: Option<u8>,
    /// Subnets never handed out (e.g. the one `skiff server`'s own node registers with), in
    /// addition to those existing Nodes hold.
    pub reserved: Vec<String>,
    /// Leader election (`None`: run unconditionally, e.g. a single server).
    pub leader_election: Option<LeaderElectionConfig>,
}

impl NodeIpamConfig {
    /// Kubernetes' defaults for a cluster CIDR, leader-elected on the Lease
    /// `kube-system/skiff-node-ipam-controller`.
    pub fn new(cluster_cidr: &str) -> Self {
        NodeIpamConfig {
            cluster_cidr: cluster_cidr.to_string(),
            node_cidr_mask_size: None,
            reserved: Vec::new(),
            leader_election: Some(LeaderElectionConfig::new("kube-system", "skiff-node-ipam-controller")),
        }
    }

    /// The CIDR set these settings describe.
    ///
    /// # Errors
    /// As [`CidrSet::new`], and [`CidrError`] for a reserved CIDR outside the cluster CIDR.
    pub fn cidr_set(&self) -> Result<CidrSet, CidrError> {
        let v6 = Cidr::parse(&self.cluster_cidr)?.v6;
        let mask = self.node_cidr_mask_size.unwrap_or(if v6 { 64 } else { 24 });
        let mut set = CidrSet::new(&self.cluster_cidr, mask)?;
        for r in &self.reserved {
            set.occupy(r)?;
        }
        Ok(set)
    }
}

/// The allocation map: the CIDR set plus who holds what.
struct State {
    set: CidrSet,
    /// Canonical CIDR → node name ("" for reserved ranges).
    owners: HashMap<String, String>,
    /// Node name → the CIDR allocated to it whose patch has not been observed yet.
    pending: HashMap<String, String>,
}

impl State {
    /// Records that `node` holds `cidr` (from its spec). Returns `false` when another node
    /// already holds it (a conflict kube-controller-manager also only reports).
    fn occupy(&mut self, node: &str, cidr: &str) -> bool {
        let Some(key) = CidrSet::canonical(cidr) else { return true };
        match self.owners.get(&key) {
            Some(owner) if owner != node && !owner.is_empty() => return false,
            _ => {}
        }
        if self.set.occupy(&key).is_ok() {
            self.owners.insert(key, node.to_string());
        }
        true
    }

    /// Frees every CIDR `node` holds or was given.
    fn release_node(&mut self, node: &str) {
        self.pending.remove(node);
        let held: Vec<String> = self.owners.iter().filter(|(_, o)| *o == node).map(|(c, _)| c.clone()).collect();
        for cidr in held {
            self.owners.remove(&cidr);
            let _ = self.set.release(&cidr);
        }
    }
}

/// The node IPAM controller; queue keys are node names.
pub struct NodeIpamController {
    api: Arc<dyn ApiClient>,
    nodes: Arc<Informer<Node>>,
    queue: Arc<WorkQueue<String>>,
    state: Arc<Mutex<State>>,
}

fn pod_cidrs(node: &Node) -> Vec<String> {
    let spec = node.spec.as_ref();
    let mut cidrs = spec.and_then(|s| s.pod_cidrs.clone()).unwrap_or_default();
    if cidrs.is_empty()
        && let Some(c) = spec.and_then(|s| s.pod_cidr.clone())
    {
        cidrs.push(c);
    }
    cidrs.retain(|c| !c.is_empty());
    cidrs
}

impl NodeIpamController {
    /// Creates the controller on the factory's Node informer.
    ///
    /// # Errors
    /// [`CidrError`] for an invalid cluster CIDR, mask size or reserved range.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        config: &NodeIpamConfig,
    ) -> Result<Arc<Self>, CidrError> {
        let set = config.cidr_set()?;
        let mut owners = HashMap::new();
        for r in &config.reserved {
            if let Some(c) = CidrSet::canonical(r) {
                owners.insert(c, String::new());
            }
        }
        let state = Arc::new(Mutex::new(State { set, owners, pending: HashMap::new() }));
        let nodes = factory.informer::<Node>();
        let observe = {
            let (state, queue) = (state.clone(), queue.clone());
            move |node: &Arc<Node>| {
                let name = node.metadata.name.clone().unwrap_or_default();
                let cidrs = pod_cidrs(node);
                if cidrs.is_empty() {
                    queue.add(name);
                    return;
                }
                let mut st = state.lock();
                if let Some(given) = st.pending.remove(&name)
                    && !cidrs.iter().any(|c| CidrSet::canonical(c).as_deref() == Some(given.as_str()))
                {
                    // The node got another CIDR (set by hand meanwhile): ours goes back.
                    st.owners.remove(&given);
                    let _ = st.set.release(&given);
                }
                for c in &cidrs {
                    if !st.occupy(&name, c) {
                        tracing::error!(node = %name, cidr = %c, "the node's pod CIDR is already allocated to another node");
                    }
                }
            }
        };
        let on_update = {
            let observe = observe.clone();
            move |_: &Arc<Node>, node: &Arc<Node>| observe(node)
        };
        let on_delete = {
            let state = state.clone();
            move |node: &Arc<Node>| state.lock().release_node(node.metadata.name.as_deref().unwrap_or_default())
        };
        nodes.add_event_handler(Arc::new(HandlerFns::new().on_add(observe).on_update(on_update).on_delete(on_delete)));
        Ok(Arc::new(Self { api, nodes, queue, state }))
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// How many subnets are in use.
    pub fn allocated(&self) -> usize {
        self.state.lock().set.allocated()
    }

    /// `AllocateOrOccupyCIDR` for a node without a pod CIDR: picks a subnet (the one already
    /// given to this node when a previous patch failed) and patches `spec.podCIDR` and
    /// `spec.podCIDRs`, conditional on the node's uid.
    pub async fn sync_node(&self, name: &str) -> ReconcileResult {
        let Some(node) = self.nodes.store().get(name) else {
            return Ok(Action::AwaitChange);
        };
        if !pod_cidrs(&node).is_empty() || node.metadata.deletion_timestamp.is_some() {
            return Ok(Action::AwaitChange);
        }
        let cidr = {
            let mut st = self.state.lock();
            match st.pending.get(name) {
                Some(c) => c.clone(),
                None => {
                    let c = st.set.allocate_next().map_err(|e| ReconcileError::Other(e.to_string()))?;
                    st.owners.insert(c.clone(), name.to_string());
                    st.pending.insert(name.to_string(), c.clone());
                    c
                }
            }
        };
        let patch = serde_json::json!({
            "metadata": { "uid": node.metadata.uid },
            "spec": { "podCIDR": cidr, "podCIDRs": [cidr] },
        });
        match self.api.patch_typed::<Node>(None, name, PatchType::Merge, &patch).await {
            Ok(_) => {
                tracing::info!(node = %name, %cidr, "allocated the node's pod CIDR");
                Ok(Action::AwaitChange)
            }
            Err(e) if is_not_found(&e) => {
                self.state.lock().release_node(name);
                Ok(Action::AwaitChange)
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait]
impl Reconciler for NodeIpamController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_node(key).await
    }
}

/// Runs the node IPAM controller (one worker, as the range allocator's) until an
/// unrecoverable error; with leader election only while holding its Lease.
///
/// # Errors
/// An invalid cluster CIDR or mask size, an invalid leader election config, or the worker
/// stopping unexpectedly.
pub async fn run_node_ipam_controller(client: kube::Client, config: NodeIpamConfig) -> anyhow::Result<()> {
    config.cidr_set()?;
    let run = |client: kube::Client, config: NodeIpamConfig| async move {
        let api: Arc<dyn ApiClient> = Arc::new(KubeApi::new(client.clone()));
        let factory = SharedInformerFactory::new(client, None);
        let metrics = ControllerMetrics::default().for_controller("nodeipam");
        let queue = Arc::new(WorkQueue::new().with_metrics(metrics.queue.clone()));
        let controller = NodeIpamController::new(api, &factory, queue.clone(), &config)?;
        factory.start();
        factory.wait_for_cache_sync().await;
        tracing::info!(cluster_cidr = %config.cluster_cidr, allocated = controller.allocated(), "node IPAM controller started");
        let _guard = ShutDownOnDrop(queue.clone());
        let worker_config = WorkerConfig { name: "nodeipam".to_string(), workers: 1, max_retries: None };
        run_workers(queue, controller, worker_config, metrics).await;
        anyhow::bail!("the node IPAM controller stopped unexpectedly")
    };
    let Some(le) = config.leader_election.clone() else {
        return run(client, config).await;
    };
    let elector = LeaderElector::from_client(client.clone(), le)?;
    loop {
        match elector.run(run(client.clone(), config.clone())).await {
            Ok(result) => return result,
            Err(LeaderElectionError::LeadershipLost) => {
                tracing::error!("node IPAM controller lost its lease; campaigning again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::watcher::Event;

    use super::*;
    use skiff_runtime::fake::FakeApi;

    #[test]
    fn a_16_gives_256_distinct_24s_then_reports_full() {
        let mut set = CidrSet::new("10.42.0.0/16", 24).unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..256 {
            let c = set.allocate_next().unwrap();
            assert!(c.starts_with("10.42.") && c.ends_with(".0/24"), "{c}");
            assert!(seen.insert(c));
        }
        assert_eq!(set.allocate_next(), Err(CidrError::Full("10.42.0.0/16".into())));
        set.release("10.42.7.0/24").unwrap();
        assert_eq!(set.allocate_next().unwrap(), "10.42.7.0/24");
    }

    #[test]
    fn occupied_subnets_are_skipped_and_released_ones_are_not_reused_at_once() {
        let mut set = CidrSet::new("10.42.0.0/16", 24).unwrap();
        set.occupy("10.42.0.0/24").unwrap();
        set.occupy("10.42.1.5/24").unwrap(); // host bits are ignored
        assert_eq!(set.allocate_next().unwrap(), "10.42.2.0/24");
        set.release("10.42.0.0/24").unwrap();
        assert_eq!(set.allocate_next().unwrap(), "10.42.3.0/24");
        assert!(set.is_used("10.42.1.0/24") && !set.is_used("10.42.0.0/24"));
        // A /23 covers two subnets.
        set.occupy("10.42.4.0/23").unwrap();
        assert_eq!(set.allocate_next().unwrap(), "10.42.6.0/24");
        assert_eq!(set.allocated(), 6);
    }

    #[test]
    fn bad_cidrs_and_mask_sizes_are_errors() {
        assert!(matches!(CidrSet::new("10.42.0.0", 24), Err(CidrError::Invalid(_))));
        assert!(matches!(CidrSet::new("10.42.0.0/33", 24), Err(CidrError::Invalid(_))));
        assert!(matches!(CidrSet::new("10.42.0.0/16", 8), Err(CidrError::MaskSize { .. })));
        assert!(matches!(CidrSet::new("10.0.0.0/8", 25), Err(CidrError::MaskSize { .. })));
        let mut set = CidrSet::new("10.42.0.0/16", 24).unwrap();
        assert!(matches!(set.occupy("10.43.0.0/24"), Err(CidrError::OutOfRange(..))));
        assert!(matches!(set.occupy("fd00::/64"), Err(CidrError::OutOfRange(..))));
    }

    #[test]
    fn ipv6_cluster_cidrs_get_64s() {
        let cfg = NodeIpamConfig::new("fd00:10:42::/48");
        let mut set = cfg.cidr_set().unwrap();
        assert!(set.is_ipv6());
        assert_eq!(set.allocate_next().unwrap(), "fd00:10:42::/64");
        assert_eq!(set.allocate_next().unwrap(), "fd00:10:42:1::/64");
    }

    fn node(name: &str, uid: &str, cidr: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta { name: Some(name.into()), uid: Some(uid.into()), ..Default::default() },
            spec: Some(NodeSpec {
                pod_cidr: cidr.map(str::to_string),
                pod_cidrs: cidr.map(|c| vec![c.to_string()]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn setup(reserved: &[&str]) -> (Arc<FakeApi>, SharedInformerFactory, Arc<NodeIpamController>) {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let mut cfg = NodeIpamConfig::new("10.42.0.0/16");
        cfg.reserved = reserved.iter().map(|s| s.to_string()).collect();
        let c = NodeIpamController::new(api.clone(), &factory, Arc::new(WorkQueue::new()), &cfg).unwrap();
        (api, factory, c)
    }

    fn spec_cidr(api: &FakeApi, name: &str) -> Option<String> {
        api.object_typed::<Node>(None, name).and_then(|n| n.spec).and_then(|s| s.pod_cidr)
    }

    #[tokio::test]
    async fn nodes_without_a_cidr_get_distinct_subnets_around_existing_and_reserved_ones() {
        let (api, factory, c) = setup(&["10.42.0.0/24"]);
        let informer = factory.informer::<Node>();
        // Existing nodes (the initial list) are occupied before any allocation.
        let existing = node("old", "u-old", Some("10.42.1.0/24"));
        let (a, b) = (node("a", "u-a", None), node("b", "u-b", None));
        for n in [&existing, &a, &b] {
            api.seed(n);
        }
        informer.handle_event(Event::Apply(a.clone()));
        informer.handle_event(Event::Apply(existing));
        informer.handle_event(Event::Apply(b.clone()));
        assert_eq!(c.queue().len(), 2);
        c.sync_node("a").await.unwrap();
        c.sync_node("b").await.unwrap();
        assert_eq!(spec_cidr(&api, "a").as_deref(), Some("10.42.2.0/24"));
        assert_eq!(spec_cidr(&api, "b").as_deref(), Some("10.42.3.0/24"));
        let a2 = api.object_typed::<Node>(None, "a").unwrap();
        assert_eq!(a2.spec.as_ref().and_then(|s| s.pod_cidrs.clone()), Some(vec!["10.42.2.0/24".to_string()]));

        // Once observed, syncing again changes nothing: never a second subnet.
        informer.handle_event(Event::Apply(a2.clone()));
        api.clear_actions();
        c.sync_node("a").await.unwrap();
        assert!(api.mutations().is_empty());
        assert_eq!(c.allocated(), 4);

        // Deletion releases the subnet; it comes back only after the others.
        informer.handle_event(Event::Delete(a2));
        assert_eq!(c.allocated(), 3);
        let d = node("d", "u-d", None);
        api.seed(&d);
        informer.handle_event(Event::Apply(d));
        c.sync_node("d").await.unwrap();
        assert_eq!(spec_cidr(&api, "d").as_deref(), Some("10.42.4.0/24"));
    }

    #[tokio::test]
    async fn a_failed_patch_is_retried_with_the_same_subnet() {
        let (api, factory, c) = setup(&[]);
        let a = node("a", "u-a", None);
        api.seed(&a);
        factory.informer::<Node>().handle_event(Event::Apply(a));
        api.fail_next("patch", "nodes", skiff_runtime::api::ApiError::new(500, "InternalError", "boom"));
        assert!(c.sync_node("a").await.is_err());
        c.sync_node("a").await.unwrap();
        assert_eq!(spec_cidr(&api, "a").as_deref(), Some("10.42.0.0/24"));
        assert_eq!(c.allocated(), 1);
    }

    #[tokio::test]
    async fn a_node_gone_before_its_patch_gives_the_subnet_back() {
        let (api, factory, c) = setup(&[]);
        // In the cache but already deleted from the API.
        factory.informer::<Node>().handle_event(Event::Apply(node("ghost", "u-g", None)));
        c.sync_node("ghost").await.unwrap();
        assert_eq!(c.allocated(), 0);
        assert!(api.object_typed::<Node>(None, "ghost").is_none());
    }
}
