//! The node lifecycle controller (kube-controller-manager's `nodelifecycle` with its
//! NoExecute taint manager): notices nodes that stopped heartbeating, marks them Unknown,
//! taints them, and evicts pods that do not tolerate the taints.
//!
//! Follows "Node status / Heartbeats" and "Taint based Evictions"
//! (<https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/#taint-based-evictions>):
//! - a node whose Lease (or Ready heartbeat) has not changed for `node_monitor_grace_period`
//!   (40 s) gets Ready, MemoryPressure, DiskPressure and PIDPressure set to Unknown
//!   ("Kubelet stopped posting node status."), a `NodeNotReady` event, and its pods' Ready
//!   condition set to False;
//! - nodes get `node.kubernetes.io/not-ready` (Ready=False) or `node.kubernetes.io/unreachable`
//!   (Ready=Unknown) taints with effect NoSchedule at once, and with effect NoExecute through a
//!   per-zone rate limiter (`--node-eviction-rate` 0.1 nodes/s; `--secondary-node-eviction-rate`
//!   0.01 when more than `unhealthy_zone_threshold` (55 %) of a large zone is unhealthy, 0 in
//!   small zones; none at all while every node of the zone is unhealthy — full disruption);
//!   condition taints memory-pressure, disk-pressure, pid-pressure and unschedulable
//!   (NoSchedule) follow the node's conditions;
//! - a pod on a node with NoExecute taints is deleted once a taint is not tolerated, or when the
//!   smallest `tolerationSeconds` of its matching tolerations has elapsed since the taint's
//!   `timeAdded` (the DefaultTolerationSeconds admission plugin adds 300 s tolerations); it first
//!   gets the DisruptionTarget condition (reason DeletionByTaintManager).
//!
//! Nodes, node Leases and pods bound to a node are cached by the runtime's informers; events go
//! through the runtime's recorder as `node-controller`.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, ObjectReference, Pod, PodCondition, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use skiff_runtime::api::ApiResource;
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EventRecorder};
use skiff_runtime::informer::{ApiListerWatcher, Informer, Store};
use tokio::task::JoinHandle;

/// Taint key for nodes whose Ready condition is False.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint key for nodes whose Ready condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Taint key for nodes with MemoryPressure.
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
/// Taint key for nodes with DiskPressure.
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
/// Taint key for nodes with PIDPressure.
pub const TAINT_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
/// Taint key for cordoned nodes.
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// `v1.NamespaceNodeLease`: where kubelets keep their heartbeat Leases.
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The event source of this controller (kube-controller-manager's `node-controller`).
const COMPONENT: &str = "node-controller";

/// Settings (kube-controller-manager flag names).
#[derive(Debug, Clone)]
pub struct NodeLifecycleConfig {
    /// `--node-monitor-period`: how often nodes are checked (5 s).
    pub node_monitor_period: Duration,
    /// `--node-monitor-grace-period`: heartbeat silence before a node is Unknown (40 s).
    pub node_monitor_grace_period: Duration,
    /// `--node-eviction-rate`: NoExecute taints per second per healthy zone (0.1).
    pub node_eviction_rate: f64,
    /// `--secondary-node-eviction-rate`: per second in partially disrupted large zones (0.01).
    pub secondary_node_eviction_rate: f64,
    /// `--large-cluster-size-threshold`: zones up to this size stop evicting when partially
    /// disrupted (50).
    pub large_cluster_size_threshold: usize,
    /// `--unhealthy-zone-threshold`: fraction of unhealthy nodes making a zone partially
    /// disrupted (0.55).
    pub unhealthy_zone_threshold: f64,
    /// How often the taint manager re-evaluates pods (1 s).
    pub taint_manager_period: Duration,
}

impl Default for NodeLifecycleConfig {
    fn default() -> Self {
        NodeLifecycleConfig {
            node_monitor_period: Duration::from_secs(5),
            node_monitor_grace_period: Duration::from_secs(40),
            node_eviction_rate: 0.1,
            secondary_node_eviction_rate: 0.01,
            large_cluster_size_threshold: 50,
            unhealthy_zone_threshold: 0.55,
            taint_manager_period: Duration::from_secs(1),
        }
    }
}

/// Health of a zone (kube's `ZoneState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    /// Few nodes unhealthy: evict at the normal rate.
    Normal,
    /// Many nodes unhealthy: evict at the secondary rate (or not at all in small zones).
    PartialDisruption,
    /// Every node unhealthy: no evictions (likely a control-plane or network problem).
    FullDisruption,
}

/// The zone state for `unhealthy` of `total` nodes.
pub fn zone_state(unhealthy: usize, total: usize, threshold: f64) -> ZoneState {
    if total > 0 && unhealthy == total {
        ZoneState::FullDisruption
    } else if unhealthy > 2 && (unhealthy as f64) / (total as f64) >= threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// True when `toleration` tolerates `taint` (kube's `ToleratesTaint`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref()
        && !effect.is_empty()
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match operator {
        "Exists" => true,
        "Equal" => {
            !key.is_empty()
                && toleration.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// When a pod must be evicted given the node's NoExecute taints: `Some(at)` (possibly in the
/// past), or `None` when every taint is tolerated forever.
pub fn eviction_time(tolerations: &[Toleration], taints: &[Taint], now: Timestamp) -> Option<Timestamp> {
    let mut at: Option<Timestamp> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let matching: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        let deadline = if matching.is_empty() {
            Some(now)
        } else if matching.iter().any(|t| t.toleration_seconds.is_none()) {
            None
        } else {
            let secs = matching.iter().filter_map(|t| t.toleration_seconds).min().unwrap_or(0).max(0);
            let added = taint.time_added.as_ref().map(|t| t.0).unwrap_or(now);
            Some(added.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs)).unwrap_or(added))
        };
        if let Some(d) = deadline {
            at = Some(at.map_or(d, |a| a.min(d)));
        }
    }
    at
}

fn condition_status(node: &Node, type_: &str) -> Option<String> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_).map(|c| c.status.clone())
}

/// The NoSchedule taints a node should carry given its conditions and `spec.unschedulable`.
pub fn condition_taints(node: &Node) -> Vec<&'static str> {
    let mut keys = Vec::new();
    match condition_status(node, "Ready").as_deref() {
        Some("True") => {}
        Some("False") => keys.push(TAINT_NOT_READY),
        _ => keys.push(TAINT_UNREACHABLE),
    }
    for (cond, key) in [
        ("MemoryPressure", TAINT_MEMORY_PRESSURE),
        ("DiskPressure", TAINT_DISK_PRESSURE),
        ("PIDPressure", TAINT_PID_PRESSURE),
    ] {
        if condition_status(node, cond).as_deref() == Some("True") {
            keys.push(key);
        }
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false) {
        keys.push(TAINT_UNSCHEDULABLE);
    }
    keys
}

/// A token bucket (tokens per second, burst 1).
#[derive(Debug)]
struct RateLimiter {
    qps: f64,
    tokens: f64,
    last: Instant,
}

impl RateLimiter {
    fn new(qps: f64) -> Self {
        RateLimiter { qps, tokens: 1.0, last: Instant::now() }
    }
    fn try_take(&mut self, qps: f64) -> bool {
        let now = Instant::now();
        self.qps = qps;
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.qps).min(1.0);
        self.last = now;
        if self.qps > 0.0 && self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct NodeHealthState {
    probe_time: Instant,
    lease_renew: Option<MicroTime>,
    ready_heartbeat: Option<Time>,
}

struct Controller {
    client: Client,
    cfg: NodeLifecycleConfig,
    nodes: Store<Node>,
    leases: Store<Lease>,
    pods: Store<Pod>,
    recorder: EventRecorder,
    health: HashMap<String, NodeHealthState>,
    limiters: HashMap<String, RateLimiter>,
}

/// The informers' watch tasks, stopped when the controller's future is dropped.
struct InformerTasks(Vec<JoinHandle<()>>);

impl Drop for InformerTasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Starts an informer on `api` with `config` and waits for its first list.
async fn informer<K>(api: Api<K>, config: watcher::Config, tasks: &mut InformerTasks) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    // Cached through the runtime's transform (no managedFields, as kube-controller-manager's
    // informers): nothing here reads them, and they are about half of a Lease.
    let informer =
        Arc::new(Informer::with_source(ApiResource::erase::<K>(&()), None, ApiListerWatcher::new(api, config)));
    tasks.0.extend(informer.start());
    informer.wait_for_sync().await;
    informer.store().clone()
}

/// Runs the node lifecycle controller and its taint manager until the future is dropped.
///
/// # Errors
/// None today: API errors are logged and retried (the `Result` matches the other controllers'
/// entry points).
pub async fn run_node_lifecycle_controller(client: Client, cfg: NodeLifecycleConfig) -> anyhow::Result<()> {
    let mut tasks = InformerTasks(Vec::new());
    let nodes = informer(Api::<Node>::all(client.clone()), watcher::Config::default(), &mut tasks).await;
    let lease_api: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let leases = informer(lease_api, watcher::Config::default(), &mut tasks).await;
    // Only pods bound to a node matter here (MarkPodsNotReady and the taint manager look pods up
    // by spec.nodeName), so unscheduled pods are not cached at all.
    let assigned = watcher::Config::default().fields("spec.nodeName!=");
    let pods = informer(Api::<Pod>::all(client.clone()), assigned, &mut tasks).await;
    let recorder = EventRecorder::new(client.clone(), COMPONENT);
    let mut ctl =
        Controller { client, cfg, nodes, leases, pods, recorder, health: HashMap::new(), limiters: HashMap::new() };
    let mut monitor = tokio::time::interval(ctl.cfg.node_monitor_period);
    let mut taints = tokio::time::interval(ctl.cfg.taint_manager_period);
    monitor.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    taints.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = monitor.tick() => ctl.monitor_node_health().await,
            _ = taints.tick() => ctl.evict_pods().await,
        }
    }
}

impl Controller {
    async fn monitor_node_health(&mut self) {
        let now = Instant::now();
        let nodes = self.nodes.list();
        let leases: HashMap<String, Arc<Lease>> = self.leases.list().into_iter().map(|l| (l.name_any(), l)).collect();
        // 1. Heartbeats: mark silent nodes Unknown.
        for node in &nodes {
            let name = node.name_any();
            let lease_renew = leases.get(&name).and_then(|l| l.spec.as_ref()?.renew_time.clone());
            let ready_heartbeat = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .and_then(|c| c.last_heartbeat_time.clone());
            let h = self.health.entry(name.clone()).or_insert_with(|| NodeHealthState {
                probe_time: now,
                lease_renew: lease_renew.clone(),
                ready_heartbeat: ready_heartbeat.clone(),
            });
            if h.lease_renew != lease_renew || h.ready_heartbeat != ready_heartbeat {
                h.probe_time = now;
                h.lease_renew = lease_renew;
                h.ready_heartbeat = ready_heartbeat;
            }
            let silent = now.duration_since(h.probe_time) > self.cfg.node_monitor_grace_period;
            if silent && condition_status(node, "Ready").as_deref() != Some("Unknown") {
                self.mark_unknown(node).await;
            }
        }
        // Forget nodes that are gone: a set of the current names, not a scan of every node per
        // entry (5,000 nodes made that 25 million name copies every monitor period).
        let current: HashSet<&str> = nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
        self.health.retain(|n, _| current.contains(n.as_str()));

        // 2. Zone states from the (possibly just updated) conditions.
        let nodes = self.nodes.list();
        let mut zones: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for node in &nodes {
            let zone = node.labels().get(ZONE_LABEL).cloned().unwrap_or_default();
            let e = zones.entry(zone).or_default();
            e.1 += 1;
            if self.effective_ready(node) != Some("True".to_string()) {
                e.0 += 1;
            }
        }
        let states: HashMap<String, (ZoneState, usize)> = zones
            .into_iter()
            .map(|(z, (u, t))| (z, (zone_state(u, t, self.cfg.unhealthy_zone_threshold), t)))
            .collect();

        // 3. Taints.
        for node in &nodes {
            let zone = node.labels().get(ZONE_LABEL).cloned().unwrap_or_default();
            let (state, size) = states.get(&zone).copied().unwrap_or((ZoneState::Normal, 0));
            self.reconcile_taints(node, &zone, state, size).await;
        }
    }

    /// The Ready status as this controller will have written it (the store may lag).
    fn effective_ready(&self, node: &Node) -> Option<String> {
        let silent = self
            .health
            .get(&node.name_any())
            .is_some_and(|h| h.probe_time.elapsed() > self.cfg.node_monitor_grace_period);
        if silent { Some("Unknown".into()) } else { condition_status(node, "Ready") }
    }

    async fn mark_unknown(&self, node: &Node) {
        let name = node.name_any();
        let now = Time(Timestamp::now());
        let old: Vec<NodeCondition> = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        let mut conditions = old.clone();
        for type_ in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
            let unknown = NodeCondition {
                type_: type_.to_string(),
                status: "Unknown".to_string(),
                reason: Some("NodeStatusUnknown".to_string()),
                message: Some("Kubelet stopped posting node status.".to_string()),
                last_heartbeat_time: old.iter().find(|c| c.type_ == type_).and_then(|c| c.last_heartbeat_time.clone()),
                last_transition_time: Some(now.clone()),
            };
            match conditions.iter_mut().find(|c| c.type_ == type_) {
                Some(c) => *c = unknown,
                None => conditions.push(unknown),
            }
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patch = serde_json::json!({ "status": { "conditions": conditions } });
        if let Err(e) = nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::warn!(node = %name, error = %e, "marking node Unknown failed");
            return;
        }
        tracing::info!(node = %name, "node stopped posting status; marked Unknown");
        if condition_status(node, "Ready").as_deref() == Some("True") {
            self.node_event(node, "NodeNotReady", &format!("Node {name} status is now: NodeNotReady"));
        }
        // Pods on the node are no longer Ready (kube's MarkPodsNotReady).
        for pod in self.pods.list() {
            if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(name.as_str()) {
                continue;
            }
            let mut conds: Vec<PodCondition> =
                pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
            let mut changed = false;
            for c in conds.iter_mut().filter(|c| c.type_ == "Ready" && c.status != "False") {
                c.status = "False".into();
                c.last_transition_time = Some(now.clone());
                changed = true;
            }
            if changed {
                let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
                let patch = serde_json::json!({ "status": { "conditions": conds } });
                if let Err(e) = api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await
                {
                    tracing::debug!(pod = %pod.name_any(), error = %e, "marking pod not ready failed");
                }
            }
        }
    }

    async fn reconcile_taints(&mut self, node: &Node, zone: &str, state: ZoneState, zone_size: usize) {
        let name = node.name_any();
        let ready = self.effective_ready(node);
        // The node as this controller sees it: copied only when its Ready condition must be
        // overridden (most nodes are healthy, and this runs for every node every period).
        let mut view = Cow::Borrowed(node);
        if ready.as_deref() == Some("Unknown")
            && condition_status(node, "Ready").as_deref() != Some("Unknown")
            && let Some(cs) = view.to_mut().status.as_mut().and_then(|s| s.conditions.as_mut())
        {
            cs.iter_mut().filter(|c| c.type_ == "Ready").for_each(|c| c.status = "Unknown".into());
        }
        let existing: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        let managed = |k: &str| {
            [
                TAINT_NOT_READY,
                TAINT_UNREACHABLE,
                TAINT_MEMORY_PRESSURE,
                TAINT_DISK_PRESSURE,
                TAINT_PID_PRESSURE,
                TAINT_UNSCHEDULABLE,
            ]
            .contains(&k)
        };
        let mut desired: Vec<Taint> = existing.iter().filter(|t| !managed(&t.key)).cloned().collect();
        let now = Time(Timestamp::now());
        let keep_or_new = |key: &str, effect: &str| {
            existing.iter().find(|t| t.key == key && t.effect == effect).cloned().unwrap_or_else(|| Taint {
                key: key.to_string(),
                effect: effect.to_string(),
                value: None,
                time_added: Some(now.clone()),
            })
        };
        for key in condition_taints(&view) {
            desired.push(keep_or_new(key, "NoSchedule"));
        }
        let no_execute_key = match ready.as_deref() {
            Some("True") => None,
            Some("False") => Some(TAINT_NOT_READY),
            _ => Some(TAINT_UNREACHABLE),
        };
        if let Some(key) = no_execute_key {
            let has = existing.iter().any(|t| t.key == key && t.effect == "NoExecute");
            if has && state != ZoneState::FullDisruption {
                desired.push(keep_or_new(key, "NoExecute"));
            } else if !has && state != ZoneState::FullDisruption {
                let qps = match state {
                    ZoneState::Normal => self.cfg.node_eviction_rate,
                    ZoneState::PartialDisruption if zone_size > self.cfg.large_cluster_size_threshold => {
                        self.cfg.secondary_node_eviction_rate
                    }
                    _ => 0.0,
                };
                let limiter = self.limiters.entry(zone.to_string()).or_insert_with(|| RateLimiter::new(qps));
                if limiter.try_take(qps) {
                    desired.push(keep_or_new(key, "NoExecute"));
                }
            }
        }
        let key_of = |t: &Taint| (t.key.clone(), t.effect.clone(), t.value.clone());
        let mut a: Vec<_> = existing.iter().map(key_of).collect();
        let mut b: Vec<_> = desired.iter().map(key_of).collect();
        a.sort();
        b.sort();
        if a == b {
            return;
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patch = serde_json::json!({ "spec": { "taints": desired } });
        match nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => tracing::info!(node = %name, taints = ?b, "node taints updated"),
            Err(e) => tracing::warn!(node = %name, error = %e, "updating node taints failed"),
        }
    }

    async fn evict_pods(&self) {
        let now = Timestamp::now();
        let taints: HashMap<String, Vec<Taint>> = self
            .nodes
            .list()
            .iter()
            .filter_map(|n| {
                let t: Vec<Taint> =
                    n.spec.as_ref()?.taints.clone()?.into_iter().filter(|t| t.effect == "NoExecute").collect();
                (!t.is_empty()).then(|| (n.name_any(), t))
            })
            .collect();
        if taints.is_empty() {
            return;
        }
        for pod in self.pods.list() {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(node_taints) = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).and_then(|n| taints.get(n))
            else {
                continue;
            };
            let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
            if let Some(at) = eviction_time(&tolerations, node_taints, now)
                && at <= now
            {
                self.evict(&pod).await;
            }
        }
    }

    async fn evict(&self, pod: &Pod) {
        let ns = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let mut conds: Vec<PodCondition> = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        conds.retain(|c| c.type_ != "DisruptionTarget");
        conds.push(PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("DeletionByTaintManager".into()),
            message: Some("Taint manager: deleting due to NoExecute taint".into()),
            last_transition_time: Some(Time(Timestamp::now())),
            ..Default::default()
        });
        let patch = serde_json::json!({ "status": { "conditions": conds } });
        if let Err(e) = api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(pod = %pod.name_any(), error = %e, "adding DisruptionTarget failed");
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &dp).await {
            Ok(_) => {
                tracing::info!(pod = %format!("{ns}/{}", pod.name_any()), "evicted by the taint manager");
                self.pod_event(pod);
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => tracing::warn!(pod = %pod.name_any(), error = %e, "taint manager eviction failed"),
        }
    }

    fn node_event(&self, node: &Node, reason: &str, message: &str) {
        let obj = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: node.metadata.name.clone(),
            uid: node.metadata.uid.clone(),
            ..Default::default()
        };
        self.recorder.event(&obj, EVENT_TYPE_NORMAL, reason, message);
    }

    fn pod_event(&self, pod: &Pod) {
        let ns = pod.namespace().unwrap_or_default();
        let obj = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: Some(ns.clone()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        };
        let msg = format!("Marking for deletion Pod {ns}/{}", pod.name_any());
        self.recorder.event(&obj, EVENT_TYPE_NORMAL, "TaintManagerEviction", &msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str, added: i64) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            value: None,
            time_added: Timestamp::from_second(added).ok().map(Time),
        }
    }

    fn toleration(key: &str, op: &str, effect: Option<&str>, secs: Option<i64>) -> Toleration {
        Toleration {
            key: (!key.is_empty()).then(|| key.to_string()),
            operator: Some(op.into()),
            effect: effect.map(str::to_string),
            toleration_seconds: secs,
            value: None,
        }
    }

    #[test]
    fn tolerations_match_by_key_effect_and_operator() {
        let t = taint(TAINT_UNREACHABLE, "NoExecute", 0);
        assert!(tolerates(&toleration(TAINT_UNREACHABLE, "Exists", Some("NoExecute"), None), &t));
        assert!(tolerates(&toleration(TAINT_UNREACHABLE, "Exists", None, None), &t));
        assert!(tolerates(&toleration("", "Exists", None, None), &t), "empty key with Exists tolerates everything");
        assert!(!tolerates(&toleration(TAINT_NOT_READY, "Exists", None, None), &t));
        assert!(!tolerates(&toleration(TAINT_UNREACHABLE, "Exists", Some("NoSchedule"), None), &t));
        assert!(tolerates(&toleration(TAINT_UNREACHABLE, "Equal", None, None), &t), "Equal with empty value");
    }

    #[test]
    fn eviction_time_honours_toleration_seconds() {
        let now = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let taints = vec![taint(TAINT_UNREACHABLE, "NoExecute", 990)];
        assert_eq!(eviction_time(&[], &taints, now), Some(now), "untolerated: evict now");
        let five = [toleration(TAINT_UNREACHABLE, "Exists", Some("NoExecute"), Some(5))];
        assert_eq!(eviction_time(&five, &taints, now), Timestamp::from_second(995).ok());
        let forever = [toleration(TAINT_UNREACHABLE, "Exists", Some("NoExecute"), None)];
        assert_eq!(eviction_time(&forever, &taints, now), None);
        let schedule_only = vec![taint(TAINT_UNREACHABLE, "NoSchedule", 990)];
        assert_eq!(eviction_time(&[], &schedule_only, now), None, "NoSchedule taints never evict");
    }

    #[test]
    fn zone_states_follow_the_unhealthy_fraction() {
        assert_eq!(zone_state(0, 10, 0.55), ZoneState::Normal);
        assert_eq!(zone_state(2, 3, 0.55), ZoneState::Normal, "at most two unhealthy nodes is never a disruption");
        assert_eq!(zone_state(6, 10, 0.55), ZoneState::PartialDisruption);
        assert_eq!(zone_state(3, 3, 0.55), ZoneState::FullDisruption);
    }

    #[test]
    fn condition_taints_follow_ready_and_pressure() {
        let node = |ready: &str, memory: &str| Node {
            status: Some(k8s_openapi::api::core::v1::NodeStatus {
                conditions: Some(vec![
                    NodeCondition { type_: "Ready".into(), status: ready.into(), ..Default::default() },
                    NodeCondition { type_: "MemoryPressure".into(), status: memory.into(), ..Default::default() },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(condition_taints(&node("True", "False")).is_empty());
        assert_eq!(condition_taints(&node("False", "False")), vec![TAINT_NOT_READY]);
        assert_eq!(condition_taints(&node("Unknown", "True")), vec![TAINT_UNREACHABLE, TAINT_MEMORY_PRESSURE]);
    }

    #[test]
    fn rate_limiter_allows_a_burst_of_one_then_waits() {
        let mut r = RateLimiter::new(0.1);
        assert!(r.try_take(0.1));
        assert!(!r.try_take(0.1));
        let mut stopped = RateLimiter::new(0.0);
        stopped.tokens = 1.0;
        assert!(!stopped.try_take(0.0), "rate 0 never allows");
    }
}
