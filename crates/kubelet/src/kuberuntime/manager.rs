//! SyncPod: the kubelet's generic runtime manager (`kuberuntime_manager.go`), which drives the
//! CRI towards one pod's spec, one pass at a time.
//!
//! A sync ([`sync_pod`], one pass):
//! 1. read the runtime's view of the pod (sandboxes and containers by pod UID label);
//! 2. make sure a ready sandbox exists (RunPodSandbox, recreated with its containers when it
//!    died; see `sandbox.rs`);
//! 3. decide what to kill, remove and start ([`compute_pod_actions`], computePodActions): init
//!    containers one by one, each to successful completion, then the regular containers that
//!    are missing or whose restartPolicy asks for a restart; running containers failing
//!    liveness/startup probes or with a changed spec are killed;
//! 4. execute it: kills, then CrashLoopBackOff (10 s doubling to 5 min) for restarts, volumes
//!    and /etc/hosts, then image pulls, CreateContainer and StartContainer (`container.rs`);
//! 5. when a non-`Always` pod has finished, stop its sandbox;
//! 6. start probe workers for running containers, garbage-collect dead instances, and write
//!    the status when it changed.
//!
//! A pod with `deletionTimestamp` is killed ([`terminate`]: preStop hooks, SIGTERM, SIGKILL
//! after the grace period, killPodWithSyncResult), its final status written, and its API
//! object deleted with grace period 0.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::container::{ContainerAction, backoff_action, kill_container, start_container};
use super::sandbox::create_pod_sandbox;
use super::{ContainerInfo, ContainerKind, PodRuntimeConfig, RuntimePod};
use crate::backoff::Backoff;
use crate::cri::{ImageService, RuntimeService, api};
use crate::dns::{Configurer, HostDns, PodDns};
use crate::envvars::NodeFacts;
use crate::host::{EventType, PodEvent, PodHost};
use crate::kuberuntime;
use crate::prober::{self, ProbeKind, ProbeResults, ProbeTarget};
use crate::status::{self, StatusInputs, WaitingReason};
use crate::volumes;

/// The kubelet's minimum grace period when killing containers, in seconds.
pub(super) const MIN_GRACE_SECONDS: i64 = 2;

/// Resync period of a settled pod (the PLEG wakes workers on runtime changes in between).
pub(crate) const RESYNC: Duration = Duration::from_secs(10);

/// Resync period while a pod is starting or failing.
pub(crate) const FAST_RESYNC: Duration = Duration::from_secs(1);

/// How many pods may be in their start phase (RunPodSandbox, then CreateContainer and
/// StartContainer of the containers due) at once: twice the CPUs, at least 2 and at most 16;
/// the environment variable `SKIFF_PARALLEL_POD_STARTS` overrides it.
///
/// Starting a pod is CPU work for containerd, runc and the CNI plugins. Unbounded, 30 pods
/// bound at once shared the CPUs evenly and all became Running together, at the end (the pod
/// startup benchmark: p50 ≈ p99 ≈ the time to start all 30). Bounded and first come first
/// served (a fair semaphore), pods start in arrival order and each one's latency is its own
/// share of the queue. The upstream kubelet has no such bound; its runtime calls are spread
/// by the pod workers' own pacing.
pub fn parallel_pod_starts() -> usize {
    if let Some(n) = std::env::var("SKIFF_PARALLEL_POD_STARTS").ok().and_then(|v| v.trim().parse::<usize>().ok())
        && n > 0
    {
        return n;
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (cpus * 2).clamp(2, 16)
}

/// The runtime side of the kubelet shared by all pod workers of a node (the upstream
/// `kubeGenericRuntimeManager`): the CRI services, the API host, node settings, and the
/// CrashLoopBackOff and image pull back-offs.
pub(crate) struct RuntimeManager {
    /// The CRI runtime service.
    pub(crate) runtime: Arc<dyn RuntimeService>,
    /// The CRI image service.
    pub(crate) images: Arc<dyn ImageService>,
    /// Reads and writes the API (config maps, secrets, status, events).
    pub(crate) host: Arc<dyn PodHost>,
    /// Node settings.
    pub(crate) cfg: PodRuntimeConfig,
    /// The host's resolv.conf, read once at start (the kubelet reads it for each pod).
    host_dns: HostDns,
    /// CrashLoopBackOff of exited containers, by `<pod uid>/<container name>`.
    restart_backoff: Mutex<Backoff>,
    /// Back-off of failed image pulls, by `<pod uid>/<image>`.
    image_backoff: Mutex<Backoff>,
    /// Permits of the pod start phase (see [`parallel_pod_starts`]).
    starts: tokio::sync::Semaphore,
}

impl RuntimeManager {
    /// A manager running pods through `runtime` and `images`.
    pub(crate) fn new(
        runtime: Arc<dyn RuntimeService>,
        images: Arc<dyn ImageService>,
        host: Arc<dyn PodHost>,
        cfg: PodRuntimeConfig,
    ) -> Self {
        let host_dns = HostDns::read(&cfg.resolv_conf);
        RuntimeManager {
            runtime,
            images,
            host,
            cfg,
            host_dns,
            restart_backoff: Mutex::new(Backoff::default()),
            image_backoff: Mutex::new(Backoff::default()),
            starts: tokio::sync::Semaphore::new(parallel_pod_starts()),
        }
    }

    /// Forgets expired back-off entries (housekeeping).
    pub(crate) fn gc_backoff(&self, now: Instant) {
        self.restart_backoff.lock().gc(now);
        self.image_backoff.lock().gc(now);
    }

    /// The restart back-off of containers, for `container.rs`.
    pub(super) fn restart_backoff(&self) -> &Mutex<Backoff> {
        &self.restart_backoff
    }

    /// The image pull back-off, for `container.rs`.
    pub(super) fn image_backoff(&self) -> &Mutex<Backoff> {
        &self.image_backoff
    }

    /// The pod's DNS settings (the kubelet's `GetPodDNS`).
    ///
    /// # Errors
    /// The host's resolv.conf could not be read or parsed.
    pub(super) fn pod_dns(&self, pod: &Pod) -> Result<PodDns, String> {
        let node_ips: Vec<std::net::IpAddr> = self.cfg.node_ip.parse().into_iter().collect();
        let configurer = Configurer {
            cluster_dns: &self.cfg.cluster_dns,
            cluster_domain: &self.cfg.cluster_domain,
            host: &self.host_dns,
            node_ips: &node_ips,
        };
        configurer.pod_dns(pod)
    }
}

/// Per-pod state a pod worker keeps between syncs.
pub(crate) struct PodSyncState {
    /// The pod's UID.
    pub(crate) uid: String,
    /// Waiting reasons of containers that could not start (image pull, config, back-off).
    pub(super) waiting: HashMap<String, WaitingReason>,
    pub(super) last_status: Option<k8s_openapi::api::core::v1::PodStatus>,
    pub(super) probes: HashMap<(String, ProbeKind), JoinHandle<()>>,
    pub(super) probe_results: Arc<ProbeResults>,
    pub(super) wake: Arc<Notify>,
    pub(super) volumes: Option<HashMap<String, PathBuf>>,
    pub(super) etc_hosts: Option<PathBuf>,
    /// Set once the pod finished (restartPolicy Never/OnFailure) and its sandbox was stopped.
    pub(super) finished: bool,
    /// Event messages already recorded, to avoid repeating identical warnings every sync.
    pub(super) recorded: HashSet<String>,
}

impl PodSyncState {
    /// Fresh state of pod `uid`; `wake` is notified to run a sync early (probe results).
    pub(crate) fn new(uid: String, wake: Arc<Notify>) -> Self {
        PodSyncState {
            uid,
            waiting: HashMap::new(),
            last_status: None,
            probes: HashMap::new(),
            probe_results: Arc::new(ProbeResults::default()),
            wake,
            volumes: None,
            etc_hosts: None,
            finished: false,
            recorded: HashSet::new(),
        }
    }

    /// Stops the probe workers of containers not in `keep`.
    pub(super) fn stop_probes(&mut self, keep: &HashSet<String>) {
        self.probes.retain(|(id, _), h| {
            let k = keep.contains(id);
            if !k {
                h.abort();
            }
            k
        });
        self.probe_results.retain(keep);
    }
}

impl Drop for PodSyncState {
    fn drop(&mut self) {
        for h in self.probes.values() {
            h.abort();
        }
    }
}

/// `name_namespace(uid)`, as the kubelet names pods in logs.
pub(crate) fn pod_desc(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// The event field path of a container in pod spec list `list`, e.g. `spec.containers{app}`.
pub(super) fn field_path(c: &Container, list: &str) -> Option<String> {
    Some(format!("spec.{list}{{{}}}", c.name))
}

/// Records an event about `pod`.
pub(super) fn event(
    m: &RuntimeManager,
    pod: &Pod,
    type_: EventType,
    reason: &str,
    message: String,
    field_path: Option<String>,
) {
    m.host.record_event(pod, PodEvent { type_, reason: reason.to_string(), message, field_path });
}

/// The grace period of a kill: the deletion's, else the spec's, else 30 s.
pub(super) fn grace_seconds(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30)
}

/// Kills the pod and cleans up. With `delete_object` (the pod has a deletionTimestamp), writes
/// the final status and deletes the API object; returns false when that failed and should be
/// retried.
pub(crate) async fn terminate(m: &RuntimeManager, st: &mut PodSyncState, pod: &Pod, delete_object: bool) -> bool {
    let rt = match kuberuntime::runtime_pod(m.runtime.as_ref(), &st.uid).await {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "reading the runtime while terminating failed");
            return false;
        }
    };
    st.stop_probes(&HashSet::new());
    let grace = if delete_object { grace_seconds(pod) } else { grace_seconds(pod).min(MIN_GRACE_SECONDS) };
    kill_runtime_pod(m, Some(pod), &rt, grace).await;
    if delete_object {
        let rt = kuberuntime::runtime_pod(m.runtime.as_ref(), &st.uid).await.unwrap_or(rt);
        let mut inputs = status_inputs(m, st);
        inputs.terminal = true;
        inputs.waiting.clear();
        let base = pod_with_status(pod, st);
        let status = status::generate_pod_status(&base, &rt, &inputs);
        if let Err(e) = m.host.update_pod_status(pod, &status).await {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "writing the final pod status failed");
            return false;
        }
        if let Err(e) = m.host.delete_pod(pod).await {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "deleting the pod object failed");
            return false;
        }
        remove_runtime_pod(m, &rt).await;
    } else {
        remove_runtime_pod(m, &rt).await;
    }
    volumes::cleanup_pod_dir(&m.cfg.root_dir, &st.uid);
    crate::cgroups::remove_pod_cgroups(&m.cfg.cgroup_root, &st.uid);
    m.restart_backoff.lock().reset_prefix(&format!("{}/", st.uid));
    m.image_backoff.lock().reset_prefix(&format!("{}/", st.uid));
    true
}

/// The containers each running container waits for before it is stopped when its pod is
/// killed (KEP-753's termination ordering, the upstream `terminationOrdering`): regular (and
/// ephemeral) containers wait for nothing; a sidecar waits for every regular container and for
/// the sidecars after it in the spec, so sidecars stop last, in reverse order. Only containers
/// in `running` are waited for.
pub(crate) fn termination_order(spec: Option<&PodSpec>, running: &[&str]) -> HashMap<String, Vec<String>> {
    let sidecars: Vec<&str> = spec
        .map(|s| s.init_containers.iter().flatten().filter(|c| is_sidecar(c)).map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    let mut order = HashMap::new();
    for name in running {
        let waits = match sidecars.iter().position(|s| s == name) {
            None => Vec::new(),
            Some(i) => running
                .iter()
                .filter(|other| match sidecars.iter().position(|s| s == *other) {
                    None => true,
                    Some(j) => j > i,
                })
                .map(|s| s.to_string())
                .collect(),
        };
        order.insert(name.to_string(), waits);
    }
    order
}

/// Stops every running container and every ready sandbox of a runtime pod: each container's
/// preStop hook runs at once, then it waits for its turn ([`termination_order`]: sidecars
/// after the regular containers) within the grace period, then SIGTERM and SIGKILL after what
/// is left of the grace period (at least the kubelet's minimum).
pub(crate) async fn kill_runtime_pod(m: &RuntimeManager, pod: Option<&Pod>, rt: &RuntimePod, grace: i64) {
    let deadline = Instant::now() + Duration::from_secs(grace.max(0) as u64);
    let pod_ip = rt.latest_sandbox().and_then(|s| s.ip.clone()).unwrap_or_default();
    let running: Vec<&ContainerInfo> = rt.running_containers().collect();
    let names: Vec<&str> = running.iter().map(|c| c.name.as_str()).collect();
    let order = termination_order(pod.and_then(|p| p.spec.as_ref()), &names);
    // One flag per running container, raised once it has stopped.
    let stopped: HashMap<&str, tokio::sync::watch::Sender<bool>> =
        names.iter().map(|n| (*n, tokio::sync::watch::channel(false).0)).collect();
    let kills = running.iter().map(|c| {
        let spec = pod.and_then(|p| {
            let s = p.spec.as_ref()?;
            s.containers.iter().chain(s.init_containers.iter().flatten()).find(|x| x.name == c.name).cloned()
        });
        let init = pod
            .and_then(|p| p.spec.as_ref())
            .is_some_and(|s| s.init_containers.iter().flatten().any(|x| x.name == c.name));
        let waits: Vec<tokio::sync::watch::Receiver<bool>> = order
            .get(&c.name)
            .into_iter()
            .flatten()
            .filter_map(|n| stopped.get(n.as_str()).map(|tx| tx.subscribe()))
            .collect();
        let done = stopped.get(c.name.as_str());
        let pod_ip = pod_ip.clone();
        async move {
            if let Some(p) = pod {
                let fp = Some(format!("spec.{}{{{}}}", if init { "initContainers" } else { "containers" }, c.name));
                event(m, p, EventType::Normal, "Killing", format!("Stopping container {}", c.name), fp);
            }
            if let Some(hook) = spec.as_ref().and_then(|s| s.lifecycle.as_ref()).and_then(|l| l.pre_stop.clone())
                && let Some(container) = spec.as_ref()
            {
                let budget = deadline.saturating_duration_since(Instant::now());
                let outcome =
                    prober::run_lifecycle_handler(m.runtime.as_ref(), &c.id, container, &pod_ip, &hook, budget).await;
                if let (prober::Outcome::Failure(msg), Some(p)) = (outcome, pod) {
                    event(m, p, EventType::Warning, "FailedPreStopHook", format!("PreStopHook failed: {msg}"), None);
                }
            }
            let turn = futures::future::join_all(waits.into_iter().map(|mut rx| async move {
                let _ = rx.wait_for(|stopped| *stopped).await;
            }));
            let _ = tokio::time::timeout_at(deadline.into(), turn).await;
            let remaining = deadline.saturating_duration_since(Instant::now()).as_secs() as i64;
            if let Err(e) = m.runtime.stop_container(&c.id, remaining.max(MIN_GRACE_SECONDS)).await
                && !e.is_not_found()
            {
                tracing::warn!(container = %c.id, error = %e, "stopping container failed");
            }
            if let Some(tx) = done {
                tx.send_replace(true);
            }
        }
    });
    futures::future::join_all(kills).await;
    for s in rt.sandboxes.iter().filter(|s| s.ready) {
        if let Err(e) = m.runtime.stop_pod_sandbox(&s.id).await
            && !e.is_not_found()
        {
            tracing::warn!(sandbox = %s.id, error = %e, "stopping sandbox failed");
        }
    }
}

/// Removes every container and sandbox of a runtime pod.
pub(crate) async fn remove_runtime_pod(m: &RuntimeManager, rt: &RuntimePod) {
    for c in &rt.containers {
        if let Err(e) = m.runtime.remove_container(&c.id).await
            && !e.is_not_found()
        {
            tracing::warn!(container = %c.id, error = %e, "removing container failed");
        }
    }
    for s in &rt.sandboxes {
        if let Err(e) = m.runtime.stop_pod_sandbox(&s.id).await
            && !e.is_not_found()
        {
            tracing::debug!(sandbox = %s.id, error = %e, "stopping sandbox before removal failed");
        }
        if let Err(e) = m.runtime.remove_pod_sandbox(&s.id).await
            && !e.is_not_found()
        {
            tracing::warn!(sandbox = %s.id, error = %e, "removing sandbox failed");
        }
    }
}

/// What status generation needs besides the pod and the runtime.
fn status_inputs(m: &RuntimeManager, st: &PodSyncState) -> StatusInputs {
    StatusInputs {
        node_ip: m.cfg.node_ip.clone(),
        runtime_name: m.cfg.runtime_name.clone(),
        readiness: st.probe_results.of_kind(ProbeKind::Readiness),
        startup: st.probe_results.of_kind(ProbeKind::Startup),
        waiting: st.waiting.clone(),
        terminal: st.finished,
        now: None,
    }
}

/// The pod with the status we last wrote (the watch may not have delivered it yet).
fn pod_with_status(pod: &Pod, st: &PodSyncState) -> Pod {
    let mut p = pod.clone();
    if let Some(s) = &st.last_status {
        p.status = Some(s.clone());
    }
    p
}

/// Whether restartPolicy `policy` restarts a container that exited with `exit_code`.
pub(super) fn should_restart(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

/// Converts a runtime timestamp (ns since the epoch) to an `Instant` in this process.
pub(super) fn instant_of(ns: i64) -> Instant {
    let now_ns = Timestamp::now().as_nanosecond();
    let ago = u64::try_from((now_ns - i128::from(ns)).max(0)).unwrap_or(0);
    Instant::now().checked_sub(Duration::from_nanos(ago)).unwrap_or_else(Instant::now)
}

/// A running container SyncPod kills.
#[derive(Debug, Clone)]
pub(crate) struct ContainerToKill {
    /// Its spec.
    pub(crate) container: Container,
    /// The running instance.
    pub(crate) instance: ContainerInfo,
    /// The `Killing` event's message (why it is restarted).
    pub(crate) message: String,
    /// The grace period of the kill in seconds when not the pod's: the failed probe's
    /// `terminationGracePeriodSeconds`.
    pub(crate) grace: Option<i64>,
}

/// A container SyncPod starts.
#[derive(Debug, Clone)]
pub(crate) struct ContainerToStart {
    /// Its spec.
    pub(crate) container: Container,
    /// Init, regular or ephemeral.
    pub(crate) kind: ContainerKind,
    /// Attempt (restart count) of the new instance; for a restart under back-off, the back-off
    /// decides (the exited instance's attempt + 1).
    pub(crate) attempt: u32,
    /// The exited instance this restarts: the restart waits out its CrashLoopBackOff first.
    pub(crate) restart_of: Option<ContainerInfo>,
}

/// What SyncPod does to the containers of a pod whose sandbox is ready (the upstream
/// `podActions`).
#[derive(Debug, Clone, Default)]
pub(crate) struct PodActions {
    /// The pod is initialized: every regular init container completed and every sidecar
    /// (restartable init container) has started, or a regular container already ran in this
    /// sandbox. The regular containers may run.
    pub(crate) init_done: bool,
    /// An init container failed under restartPolicy Never: the pod has failed and is killed.
    pub(crate) init_failed: bool,
    /// Nothing of the regular containers runs or will run again (restartPolicy Never or
    /// OnFailure, all of them exited for good): the pod is finished and its sidecars are
    /// stopped, not restarted (upstream: `KillPod` with no `InitContainersToStart`).
    pub(crate) pod_done: bool,
    /// Running containers to kill: failed liveness or startup probe, or a changed spec. The
    /// next sync restarts them per restartPolicy (sidecars: always).
    pub(crate) containers_to_kill: Vec<ContainerToKill>,
    /// Ids of instances created but never started (the agent died in between), removed before
    /// their replacement starts.
    pub(crate) containers_to_remove: Vec<String>,
    /// Containers to start, in order: init containers in spec order (the next one to run, and
    /// sidecars to restart), then the regular containers.
    pub(crate) containers_to_start: Vec<ContainerToStart>,
}

/// True for a restartable init container, a sidecar (`restartPolicy: Always` on an init
/// container, KEP-753).
pub(crate) fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Why a running container is killed, if it is: a failed liveness or startup probe, or a
/// changed spec (the upstream event messages; `what` is "Container" or "Init container"),
/// with the grace period of the kill when the failed probe sets its own
/// `terminationGracePeriodSeconds` (KEP-2238).
fn kill_reason(
    c: &Container,
    l: &ContainerInfo,
    probe_results: &ProbeResults,
    what: &str,
) -> Option<(String, Option<i64>)> {
    let failed = |kind: ProbeKind| probe_results.get(&l.id, kind) == Some(false);
    let probe_grace = |kind: ProbeKind| kind.probe(c).and_then(|p| p.termination_grace_period_seconds);
    let changed = !l.hash.is_empty() && l.hash != kuberuntime::container_hash(c);
    let restarted = if what == "Container" { ", will be restarted" } else { "" };
    if failed(ProbeKind::Startup) {
        Some((format!("{what} {} failed startup probe{restarted}", c.name), probe_grace(ProbeKind::Startup)))
    } else if changed {
        Some((format!("{what} {} definition changed{restarted}", c.name), None))
    } else if failed(ProbeKind::Liveness) {
        Some((format!("{what} {} failed liveness probe{restarted}", c.name), probe_grace(ProbeKind::Liveness)))
    } else {
        None
    }
}

/// The init container half of [`compute_pod_actions`] (the upstream
/// `computeInitContainerActions`, with sidecars): starts the first init container not yet
/// started, the next one once the previous completed (a regular init container, exit code 0)
/// or started (a sidecar: running, and its startup probe succeeded if it has one); restarts
/// exited sidecars at any time; kills sidecars failing their startup or liveness probe or
/// whose spec changed. Walks the list backwards, as upstream, because completed init
/// containers may have been garbage-collected: the last one found says how far the pod got.
/// Returns whether the pod is initialized.
fn compute_init_container_actions(
    spec: &PodSpec,
    rt: &RuntimePod,
    sandbox_id: &str,
    probe_results: &ProbeResults,
    actions: &mut PodActions,
) -> bool {
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    if inits.is_empty() {
        return true;
    }
    let current = |name: &str| rt.latest(name).filter(|l| l.sandbox_id == sandbox_id);
    // A regular container created or running in this sandbox means the init containers ran
    // before, even if their records are gone: only sidecars are kept running from then on.
    let mut initialized = spec.containers.iter().any(|c| {
        current(&c.name).is_some_and(|l| {
            matches!(l.state, api::ContainerState::ContainerRunning | api::ContainerState::ContainerCreated)
        })
    });
    let restart_on_failure = spec.restart_policy.as_deref() != Some("Never");
    let mut previously_initialized = initialized;
    // Indices of init containers to start (collected backwards).
    let mut to_start: Vec<usize> = Vec::new();
    let mut kills: Vec<ContainerToKill> = Vec::new();
    let mut kill = |c: &Container, l: &ContainerInfo, message: String, grace: Option<i64>| {
        kills.push(ContainerToKill { container: c.clone(), instance: l.clone(), message, grace });
    };
    for (i, c) in inits.iter().enumerate().rev() {
        let sidecar = is_sidecar(c);
        let Some(l) = current(&c.name) else {
            if previously_initialized && sidecar {
                to_start.push(i);
            }
            continue;
        };
        if previously_initialized && !sidecar {
            continue;
        }
        match l.state {
            api::ContainerState::ContainerCreated => to_start.push(i),
            api::ContainerState::ContainerRunning if sidecar => 'running: {
                if c.startup_probe.is_some() {
                    match probe_results.get(&l.id, ProbeKind::Startup) {
                        Some(true) => {}
                        Some(false) => {
                            let grace = c.startup_probe.as_ref().and_then(|p| p.termination_grace_period_seconds);
                            kill(c, l, format!("Init container {} failed startup probe", c.name), grace);
                            to_start.push(i);
                            break 'running;
                        }
                        None => break 'running,
                    }
                }
                if i + 1 == inits.len() {
                    initialized = true;
                } else if !previously_initialized {
                    to_start.push(i + 1);
                }
                if let Some((message, grace)) = kill_reason(c, l, probe_results, "Init container") {
                    kill(c, l, message, grace);
                    to_start.push(i);
                }
            }
            api::ContainerState::ContainerRunning => {}
            api::ContainerState::ContainerExited if sidecar => to_start.push(i),
            api::ContainerState::ContainerExited if l.exit_code != 0 => {
                if !restart_on_failure {
                    actions.init_failed = true;
                    return false;
                }
                to_start.push(i);
            }
            api::ContainerState::ContainerExited => {
                if i + 1 == inits.len() {
                    initialized = true;
                } else {
                    to_start.push(i + 1);
                }
            }
            _ => {
                if !sidecar && !restart_on_failure {
                    actions.init_failed = true;
                    return false;
                }
                // kubecontainer's state names: anything but created, running, exited is unknown.
                kill(c, l, format!("Init container is in {:?} state, try killing it", "unknown"), None);
                to_start.push(i);
            }
        }
        previously_initialized = true;
    }
    if !previously_initialized {
        to_start.push(0);
    }
    actions.containers_to_kill.append(&mut kills);
    to_start.sort_unstable();
    to_start.dedup();
    for i in to_start {
        let c = &inits[i];
        let latest = rt.latest(&c.name);
        let in_sandbox = latest.filter(|l| l.sandbox_id == sandbox_id);
        let (attempt, restart_of) = match in_sandbox {
            // An exited instance restarts after its CrashLoopBackOff.
            Some(l) if l.state == api::ContainerState::ContainerExited => (l.attempt + 1, Some(l.clone())),
            // Created but never started (or unknown): removed, then started again.
            Some(l) if l.state != api::ContainerState::ContainerRunning => {
                actions.containers_to_remove.push(l.id.clone());
                (l.attempt, None)
            }
            _ => (latest.map(|l| l.attempt + 1).unwrap_or(0), None),
        };
        actions.containers_to_start.push(ContainerToStart {
            container: c.clone(),
            kind: ContainerKind::Init,
            attempt,
            restart_of,
        });
    }
    initialized
}

/// Decides what SyncPod does to the containers of a pod running in sandbox `sandbox_id` (the
/// upstream `computePodActions`): init containers first ([`compute_init_container_actions`]:
/// in order, each regular one to successful completion and each sidecar until started, before
/// any regular container; a failed init container is restarted after back-off unless
/// restartPolicy is Never, which fails the pod); then regular containers that are missing
/// start, exited ones restart when restartPolicy says so (Always; OnFailure with a non-zero
/// exit code), and running ones are killed when their liveness or startup probe failed or
/// their spec changed. When no regular container runs or will run again, the pod is done and
/// its sidecars are not restarted.
pub(crate) fn compute_pod_actions(
    spec: &PodSpec,
    rt: &RuntimePod,
    sandbox_id: &str,
    probe_results: &ProbeResults,
) -> PodActions {
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let mut actions = PodActions::default();
    actions.init_done = compute_init_container_actions(spec, rt, sandbox_id, probe_results, &mut actions);
    if actions.init_failed {
        actions.containers_to_start.clear();
        actions.containers_to_kill.clear();
        actions.containers_to_remove.clear();
        return actions;
    }
    // Ephemeral containers start once, even before initialization completes (so a pod stuck
    // initializing can be debugged), and never again (upstream: first in SyncPod's starts).
    let mut ephemeral: Vec<ContainerToStart> = kuberuntime::ephemeral_containers(spec)
        .into_iter()
        .filter(|(c, _)| rt.latest(&c.name).is_none())
        .map(|(c, target)| {
            let target = target.and_then(|t| {
                rt.latest(&t).filter(|l| l.state == api::ContainerState::ContainerRunning).map(|l| l.id.clone())
            });
            ContainerToStart { container: c, kind: ContainerKind::Ephemeral { target }, attempt: 0, restart_of: None }
        })
        .collect();
    ephemeral.append(&mut actions.containers_to_start);
    actions.containers_to_start = ephemeral;
    if !actions.init_done {
        return actions;
    }
    let mut keep = 0;
    let mut regular_to_start = 0;
    for c in &spec.containers {
        let start = |attempt, restart_of| ContainerToStart {
            container: c.clone(),
            kind: ContainerKind::Regular,
            attempt,
            restart_of,
        };
        let to_start = match rt.latest(&c.name) {
            None => Some(start(0, None)),
            Some(l) if l.sandbox_id != sandbox_id => Some(start(l.attempt + 1, None)),
            Some(l) if l.state == api::ContainerState::ContainerRunning => {
                // Kept running, or killed now and restarted by a later sync: either way the
                // pod is not done.
                keep += 1;
                if let Some((message, grace)) = kill_reason(c, l, probe_results, "Container") {
                    actions.containers_to_kill.push(ContainerToKill {
                        container: c.clone(),
                        instance: l.clone(),
                        message,
                        grace,
                    });
                }
                None
            }
            Some(l) if l.state == api::ContainerState::ContainerExited => {
                should_restart(policy, l.exit_code).then(|| start(l.attempt + 1, Some(l.clone())))
            }
            Some(l) => {
                actions.containers_to_remove.push(l.id.clone());
                Some(start(l.attempt, None))
            }
        };
        if let Some(s) = to_start {
            regular_to_start += 1;
            actions.containers_to_start.push(s);
        }
    }
    if keep == 0 && regular_to_start == 0 && !spec.containers.is_empty() {
        // Sidecars must not keep a finished pod alive.
        actions.pod_done = true;
        actions.containers_to_start.clear();
    }
    actions
}

/// One SyncPod pass over `pod` (see the module doc); returns when to sync again.
///
/// # Errors
/// [`crate::Error`] when the runtime cannot be read or the pod log directory created.
pub(crate) async fn sync_pod(m: &RuntimeManager, st: &mut PodSyncState, pod: &Pod) -> Result<Duration, crate::Error> {
    let spec = pod.spec.clone().unwrap_or_default();
    let cri_err = |e: crate::cri::CriError| crate::Error::Config(e.to_string());
    let api_phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let t = Instant::now();
    let mut rt = kuberuntime::runtime_pod(m.runtime.as_ref(), &st.uid).await.map_err(cri_err)?;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "sync started; runtime read");

    // A finished pod (Succeeded/Failed) is never restarted: make sure nothing runs.
    if st.finished || api_phase == "Succeeded" || api_phase == "Failed" {
        if rt.running_containers().next().is_some() || rt.sandboxes.iter().any(|s| s.ready) {
            kill_runtime_pod(m, Some(pod), &rt, grace_seconds(pod)).await;
            rt = kuberuntime::runtime_pod(m.runtime.as_ref(), &st.uid).await.map_err(cri_err)?;
        }
        st.finished = true;
        st.stop_probes(&HashSet::new());
        publish_status(m, st, pod, &rt).await;
        return Ok(RESYNC);
    }

    let mut next = RESYNC;
    let host_network = spec.host_network.unwrap_or(false);

    // 1. Sandbox.
    let sandbox_ok = rt.latest_sandbox().is_some_and(|s| s.ready && (host_network || s.ip.is_some()));
    // A permit of the start phase, held from RunPodSandbox to the last StartContainer of this
    // pass (postStart hooks run without it).
    let mut start_permit = None;
    if !sandbox_ok {
        start_permit = acquire_start_permit(m, pod).await;
        if !create_pod_sandbox(m, st, pod, &rt).await? {
            publish_status(m, st, pod, &rt).await;
            return Ok(Duration::from_secs(5));
        }
        rt = kuberuntime::runtime_pod(m.runtime.as_ref(), &st.uid).await.map_err(cri_err)?;
        next = FAST_RESYNC;
    }
    let Some(sandbox) = rt.latest_sandbox().cloned() else {
        return Ok(FAST_RESYNC);
    };
    let pod_ip = if host_network { m.cfg.node_ip.clone() } else { sandbox.ip.clone().unwrap_or_default() };
    // The sandbox exists: its DNS settings only complete the configuration containers are
    // created with, and any warning about them was recorded when it was created.
    let dns = m.pod_dns(pod).map(|d| d.config).unwrap_or_default();
    let sandbox_config = kuberuntime::sandbox_config(pod, &m.cfg, sandbox.attempt, dns);
    let facts = NodeFacts {
        host_ip: m.cfg.node_ip.clone(),
        pod_ip: pod_ip.clone(),
        allocatable_cpu_millis: m.cfg.allocatable_cpu_millis,
        allocatable_memory: m.cfg.memory_capacity,
        allocatable_ephemeral_storage: m.cfg.allocatable_ephemeral_storage,
    };

    // 2. Decide per container, then act on the decision.
    let actions = compute_pod_actions(&spec, &rt, &sandbox.id, &st.probe_results);
    if actions.init_failed {
        // The pod failed: an init container failed and may not be retried.
        st.finished = true;
        kill_runtime_pod(m, Some(pod), &rt, grace_seconds(pod)).await;
    }
    if actions.pod_done {
        // Every regular container exited for good: the pod is finished, and its sidecars are
        // stopped (after the regular containers, in reverse order) instead of restarted.
        st.finished = true;
        kill_runtime_pod(m, Some(pod), &rt, grace_seconds(pod)).await;
        rt = kuberuntime::runtime_pod(m.runtime.as_ref(), &st.uid).await.map_err(cri_err)?;
    }
    for kill in &actions.containers_to_kill {
        let init = spec.init_containers.iter().flatten().any(|c| c.name == kill.container.name);
        event(
            m,
            pod,
            EventType::Normal,
            "Killing",
            kill.message.clone(),
            field_path(&kill.container, if init { "initContainers" } else { "containers" }),
        );
        kill_container(m, pod, &kill.container, &kill.instance, &pod_ip, kill.grace).await;
        st.wake.notify_one();
        next = FAST_RESYNC;
    }
    for id in &actions.containers_to_remove {
        let _ = m.runtime.remove_container(id).await;
    }
    let mut to_start: Vec<(Container, ContainerKind, u32)> = Vec::new();
    for s in actions.containers_to_start {
        let action = match &s.restart_of {
            Some(exited) => backoff_action(m, st, pod, &s.container, exited),
            None => ContainerAction::Start(s.attempt),
        };
        match action {
            ContainerAction::Start(a) => to_start.push((s.container, s.kind, a)),
            ContainerAction::Wait(d) => next = next.min(d),
        }
    }

    // 3. Volumes and /etc/hosts, then start what needs starting.
    if !to_start.is_empty() && !st.finished {
        next = next.min(FAST_RESYNC);
        if start_permit.is_none() {
            start_permit = acquire_start_permit(m, pod).await;
        }
        let t = Instant::now();
        let set_up = volumes::setup_volumes(m.host.as_ref(), &m.cfg.root_dir, pod, &facts).await;
        tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "volumes set up");
        match set_up {
            Ok(v) => st.volumes = Some(v),
            Err(e) => {
                let msg = format!("MountVolume.SetUp failed: {e}");
                if st.recorded.insert(msg.clone()) {
                    event(m, pod, EventType::Warning, "FailedMount", msg, None);
                }
                publish_status(m, st, pod, &rt).await;
                return Ok(Duration::from_secs(2));
            }
        }
        if !host_network && st.etc_hosts.is_none() {
            match volumes::write_etc_hosts(&m.cfg.root_dir, pod, &pod_ip, &kuberuntime::pod_hostname(pod)) {
                Ok(p) => st.etc_hosts = Some(p),
                Err(e) => tracing::warn!(pod = %pod_desc(pod), error = %e, "writing /etc/hosts failed"),
            }
        }
        for (c, kind, attempt) in to_start {
            start_container(m, st, pod, &c, &kind, attempt, &sandbox.id, &sandbox_config, &facts, &mut start_permit)
                .await;
        }
        drop(start_permit.take());
        rt = kuberuntime::runtime_pod(m.runtime.as_ref(), &st.uid).await.map_err(cri_err)?;
    }

    // Projected service-account tokens are rewritten before they expire (checked every sync,
    // i.e. at least every RESYNC; also for pods adopted after an agent restart).
    if !st.finished {
        let now = std::time::SystemTime::now();
        if let Err(e) = volumes::refresh_service_account_tokens(m.host.as_ref(), &m.cfg.root_dir, pod, now).await {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "refreshing service account tokens failed");
        }
    }

    // 4. Probes for running containers of the current sandbox.
    let running: Vec<ContainerInfo> = rt.running_containers().filter(|c| c.sandbox_id == sandbox.id).cloned().collect();
    let keep: HashSet<String> = running.iter().map(|c| c.id.clone()).collect();
    st.stop_probes(&keep);
    for c in &running {
        // Regular containers and sidecars are probed; regular init containers have no probes.
        let c_spec = spec.containers.iter().chain(spec.init_containers.iter().flatten().filter(|c| is_sidecar(c)));
        let Some(c_spec) = c_spec.into_iter().find(|s| s.name == c.name) else { continue };
        for kind in [ProbeKind::Startup, ProbeKind::Liveness, ProbeKind::Readiness] {
            if kind.probe(c_spec).is_none() || st.probes.contains_key(&(c.id.clone(), kind)) {
                continue;
            }
            let target = ProbeTarget {
                cri: Arc::clone(&m.runtime),
                host: Arc::clone(&m.host),
                pod: pod.clone(),
                container: c_spec.clone(),
                container_id: c.id.clone(),
                pod_ip: pod_ip.clone(),
                started_at: instant_of(c.started_at),
            };
            let h =
                tokio::spawn(prober::probe_worker(target, kind, Arc::clone(&st.probe_results), Arc::clone(&st.wake)));
            st.probes.insert((c.id.clone(), kind), h);
        }
    }

    // 5. Garbage-collect dead instances beyond the newest two of each container.
    gc_dead_containers(m, &rt).await;

    publish_status(m, st, pod, &rt).await;
    Ok(next)
}

/// Waits for a permit of the pod start phase (first come, first served). `None` only if the
/// semaphore was closed, which never happens; the start then simply goes ahead.
pub(super) async fn acquire_start_permit<'a>(
    m: &'a RuntimeManager,
    pod: &Pod,
) -> Option<tokio::sync::SemaphorePermit<'a>> {
    let t = Instant::now();
    let permit = m.starts.acquire().await.ok();
    let waited = t.elapsed();
    if waited > Duration::from_millis(10) {
        tracing::debug!(pod = %pod_desc(pod), waited_ms = waited.as_millis() as u64, "waited for a pod start permit");
    }
    permit
}

/// Removes exited instances of a container beyond the newest two (the current one and the
/// previous one, kept for `lastState` and `kubectl logs --previous`), and non-ready sandboxes
/// without containers other than the newest.
async fn gc_dead_containers(m: &RuntimeManager, rt: &RuntimePod) {
    let mut by_name: HashMap<&str, Vec<&ContainerInfo>> = HashMap::new();
    for c in &rt.containers {
        by_name.entry(c.name.as_str()).or_default().push(c);
    }
    for (_, mut list) in by_name {
        list.sort_by_key(|c| std::cmp::Reverse((c.attempt, c.created_at)));
        for c in list.iter().skip(2) {
            if c.state != api::ContainerState::ContainerRunning {
                let _ = m.runtime.remove_container(&c.id).await;
            }
        }
    }
    let used: HashSet<&str> = rt.containers.iter().map(|c| c.sandbox_id.as_str()).collect();
    for s in rt.sandboxes.iter().skip(1) {
        if !s.ready && !used.contains(s.id.as_str()) {
            let _ = m.runtime.remove_pod_sandbox(&s.id).await;
        }
    }
}

/// Computes the status and writes it when it changed since the last write.
async fn publish_status(m: &RuntimeManager, st: &mut PodSyncState, pod: &Pod, rt: &RuntimePod) {
    let base = pod_with_status(pod, st);
    let status = status::generate_pod_status(&base, rt, &status_inputs(m, st));
    let unchanged = match (&st.last_status, &pod.status) {
        (Some(last), _) => !status::status_changed(last, &status),
        (None, Some(api)) => !status::status_changed(api, &status),
        (None, None) => false,
    };
    if unchanged {
        return;
    }
    let t = Instant::now();
    let written = m.host.update_pod_status(pod, &status).await;
    tracing::debug!(
        pod = %pod_desc(pod),
        phase = status.phase.as_deref().unwrap_or_default(),
        elapsed_ms = t.elapsed().as_millis() as u64,
        "pod status written"
    );
    match written {
        Ok(()) => st.last_status = Some(status),
        Err(e) => {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "writing pod status failed");
            st.last_status = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, ExecAction, PodStatus, Probe, Secret};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::cri::fake::{FakeImageService, FakeRuntimeService};

    #[test]
    fn restart_policy_decides_restarts() {
        assert!(should_restart("Always", 0));
        assert!(should_restart("Always", 1));
        assert!(should_restart("OnFailure", 1));
        assert!(!should_restart("OnFailure", 0));
        assert!(!should_restart("Never", 1));
    }

    #[test]
    fn runtime_timestamps_convert_to_past_instants() {
        let ten_s_ago = Timestamp::now().as_nanosecond() - 10_000_000_000;
        let i = instant_of(ten_s_ago as i64);
        let elapsed = i.elapsed();
        assert!(elapsed >= Duration::from_secs(9) && elapsed < Duration::from_secs(60));
    }

    /// A `PodHost` that records status writes, deletions and events.
    #[derive(Default)]
    struct RecordingHost {
        statuses: Mutex<Vec<PodStatus>>,
        deleted: Mutex<Vec<String>>,
        events: Mutex<Vec<PodEvent>>,
    }

    #[async_trait::async_trait]
    impl PodHost for RecordingHost {
        async fn config_map(&self, _: &str, _: &str) -> Result<Option<ConfigMap>, crate::Error> {
            Ok(None)
        }
        async fn secret(&self, _: &str, _: &str) -> Result<Option<Secret>, crate::Error> {
            Ok(None)
        }
        async fn service_account_token(
            &self,
            _: &Pod,
            _: Option<String>,
            _: i64,
        ) -> Result<Option<String>, crate::Error> {
            Ok(None)
        }
        async fn update_pod_status(&self, _: &Pod, status: &PodStatus) -> Result<(), crate::Error> {
            self.statuses.lock().push(status.clone());
            Ok(())
        }
        async fn delete_pod(&self, pod: &Pod) -> Result<(), crate::Error> {
            self.deleted.lock().push(pod.metadata.name.clone().unwrap_or_default());
            Ok(())
        }
        fn record_event(&self, _: &Pod, event: PodEvent) {
            self.events.lock().push(event);
        }
    }

    impl RecordingHost {
        fn phase(&self) -> Option<String> {
            self.statuses.lock().last().and_then(|s| s.phase.clone())
        }
        fn has_event(&self, reason: &str, message_part: &str) -> bool {
            self.events.lock().iter().any(|e| e.reason == reason && e.message.contains(message_part))
        }
    }

    /// SyncPod of one pod against the fake runtime.
    struct Harness {
        fake: Arc<FakeRuntimeService>,
        images: Arc<FakeImageService>,
        host: Arc<RecordingHost>,
        m: RuntimeManager,
        st: PodSyncState,
        pod: Pod,
        _dir: tempfile::TempDir,
    }

    fn container(name: &str) -> Container {
        Container { name: name.into(), image: Some("busybox:1.36".into()), ..Default::default() }
    }

    fn pod(policy: &str, init: &[&str], containers: &[&str]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = Some("uid-1".into());
        pod.spec = Some(PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: (!init.is_empty()).then(|| init.iter().map(|n| container(n)).collect()),
            containers: containers.iter().map(|n| container(n)).collect(),
            ..Default::default()
        });
        pod
    }

    impl Harness {
        fn new(pod: Pod) -> Self {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
            std::fs::write(dir.path().join("resolv.conf"), "nameserver 192.0.2.53\n")
                .unwrap_or_else(|e| panic!("resolv.conf: {e}"));
            let cfg = PodRuntimeConfig {
                node_name: "node-1".into(),
                node_ip: "192.0.2.10".into(),
                root_dir: dir.path().to_path_buf(),
                cgroup_root: "/kubepods".into(),
                cluster_dns: Vec::new(),
                cluster_domain: "cluster.local".into(),
                resolv_conf: dir.path().join("resolv.conf"),
                allocatable_cpu_millis: 2000,
                memory_capacity: 4 << 30,
                allocatable_ephemeral_storage: 10 << 30,
                runtime_name: "containerd".into(),
            };
            let fake = Arc::new(FakeRuntimeService::new());
            let host = Arc::new(RecordingHost::default());
            let images = Arc::new(FakeImageService::default());
            let m = RuntimeManager::new(fake.clone(), images.clone(), host.clone(), cfg);
            let st = PodSyncState::new("uid-1".into(), Arc::new(Notify::new()));
            Harness { fake, images, host, m, st, pod, _dir: dir }
        }

        async fn sync(&mut self) -> Duration {
            sync_pod(&self.m, &mut self.st, &self.pod).await.unwrap_or_else(|e| panic!("SyncPod: {e}"))
        }

        /// The container lifecycle calls (Create/Start/Stop), in order.
        fn container_calls(&self) -> Vec<String> {
            self.fake
                .calls()
                .into_iter()
                .filter(|c| {
                    c.starts_with("CreateContainer")
                        || c.starts_with("StartContainer")
                        || c.starts_with("StopContainer")
                })
                .collect()
        }

        /// The newest container named `name`: (id, attempt, state, sandbox id).
        fn latest(&self, name: &str) -> (String, u32, api::ContainerState, String) {
            let ids = self.fake.container_ids(name);
            let id = ids.last().cloned().unwrap_or_else(|| panic!("no container {name}"));
            let c = &self.fake.containers()[&id];
            (id, c.config.metadata.as_ref().map(|m| m.attempt).unwrap_or_default(), c.state, c.sandbox_id.clone())
        }

        fn creates_of(&self, name: &str) -> usize {
            self.fake.calls().iter().filter(|c| **c == format!("CreateContainer {name}")).count()
        }
    }

    #[tokio::test]
    async fn containers_start_in_order_after_init_containers_complete_one_by_one() {
        let mut h = Harness::new(pod("Always", &["init-1", "init-2"], &["app", "sidecar"]));
        h.sync().await;
        assert_eq!(h.container_calls(), ["CreateContainer init-1", "StartContainer init-1"]);
        assert_eq!(h.images.calls(), ["ImageStatus busybox:1.36"], "an IfNotPresent image already there");
        h.sync().await;
        assert_eq!(h.container_calls().len(), 2, "nothing more starts while init-1 runs");

        h.fake.exit_container(&h.latest("init-1").0, 0);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.container_calls(), ["CreateContainer init-2", "StartContainer init-2"]);

        h.fake.exit_container(&h.latest("init-2").0, 0);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(
            h.container_calls(),
            ["CreateContainer app", "StartContainer app", "CreateContainer sidecar", "StartContainer sidecar"]
        );
        assert_eq!(h.creates_of("init-1") + h.creates_of("init-2"), 0, "completed init containers do not run again");
        assert_eq!(h.host.phase().as_deref(), Some("Running"));
    }

    #[tokio::test]
    async fn a_failed_init_container_with_restart_policy_never_fails_the_pod() {
        let mut h = Harness::new(pod("Never", &["init"], &["app"]));
        h.sync().await;
        h.fake.exit_container(&h.latest("init").0, 1);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.creates_of("init"), 0, "the init container is not retried");
        assert_eq!(h.creates_of("app"), 0, "the app never starts");
        assert!(
            h.fake.sandboxes().values().all(|s| s.state == api::PodSandboxState::SandboxNotready),
            "sandbox stopped"
        );
        assert_eq!(h.host.phase().as_deref(), Some("Failed"));
    }

    #[tokio::test]
    async fn a_failed_init_container_with_restart_policy_on_failure_is_retried() {
        let mut h = Harness::new(pod("OnFailure", &["init"], &["app"]));
        h.sync().await;
        h.fake.exit_container(&h.latest("init").0, 1);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.container_calls(), ["CreateContainer init", "StartContainer init"]);
        assert_eq!(h.latest("init").1, 1, "the retry is attempt 1");
        assert_eq!(h.creates_of("app"), 0);
    }

    #[tokio::test]
    async fn exited_containers_restart_as_their_restart_policy_says() {
        for (policy, exit_code, restarts) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 1, true),
            ("Never", 0, false),
            ("Never", 1, false),
        ] {
            let mut h = Harness::new(pod(policy, &[], &["app"]));
            h.sync().await;
            h.fake.exit_container(&h.latest("app").0, exit_code);
            h.fake.clear_calls();
            h.sync().await;
            let case = format!("restartPolicy {policy}, exit code {exit_code}");
            assert_eq!(h.creates_of("app"), usize::from(restarts), "{case}");
            if restarts {
                assert_eq!(h.latest("app").1, 1, "{case}: restart count");
                assert_eq!(h.latest("app").2, api::ContainerState::ContainerRunning, "{case}");
            } else {
                // Nothing will run again: the pod is finished and its sandbox stopped.
                let phase = if exit_code == 0 { "Succeeded" } else { "Failed" };
                assert_eq!(h.host.phase().as_deref(), Some(phase), "{case}");
                assert!(h.fake.calls().iter().any(|c| c.starts_with("StopPodSandbox")), "{case}: sandbox stopped");
            }
        }
    }

    #[tokio::test]
    async fn crash_loop_back_off_grows_and_holds_restarts_until_it_expires() {
        let mut h = Harness::new(pod("Always", &[], &["app"]));
        h.sync().await;
        h.fake.exit_container(&h.latest("app").0, 1);
        h.sync().await;
        assert_eq!(h.creates_of("app"), 2, "the first restart is immediate");

        // Second crash: 10 s of back-off from its finish.
        let id = h.latest("app").0;
        h.fake.exit_container(&id, 1);
        let next = h.sync().await;
        assert_eq!(h.creates_of("app"), 2, "no restart within the back-off");
        assert_eq!(h.st.waiting.get("app").map(|w| w.reason.as_str()), Some("CrashLoopBackOff"));
        assert!(h.host.has_event("BackOff", "Back-off restarting failed container app"));
        assert!(next <= RESYNC, "the worker comes back when the back-off ends");
        h.fake.age_finish(&id, Duration::from_secs(9));
        h.sync().await;
        assert_eq!(h.creates_of("app"), 2, "9 s after the crash it still waits");
        h.fake.age_finish(&id, Duration::from_secs(2));
        h.sync().await;
        assert_eq!(h.creates_of("app"), 3, "11 s after the crash it restarts");
        assert_eq!(h.latest("app").1, 2);

        // Third crash: the back-off doubled to 20 s.
        let id = h.latest("app").0;
        h.fake.exit_container(&id, 1);
        h.fake.age_finish(&id, Duration::from_secs(11));
        let next = h.sync().await;
        assert_eq!(h.creates_of("app"), 3, "11 s is within the doubled back-off");
        assert!(next > Duration::from_secs(8) && next < Duration::from_secs(10), "about 9 s left, got {next:?}");
        assert!(h.st.waiting["app"].message.contains("back-off 20s"), "{}", h.st.waiting["app"].message);
        h.fake.age_finish(&id, Duration::from_secs(10));
        h.sync().await;
        assert_eq!(h.creates_of("app"), 4, "21 s after the crash it restarts");
    }

    #[tokio::test]
    async fn a_failed_liveness_probe_kills_the_container_and_the_next_sync_restarts_it() {
        let mut p = pod("Always", &[], &["app"]);
        if let Some(c) = p.spec.as_mut().map(|s| &mut s.containers[0]) {
            // The probe worker waits out its initial delay: the test sets the result itself.
            c.liveness_probe = Some(Probe {
                exec: Some(ExecAction { command: Some(vec!["true".into()]) }),
                initial_delay_seconds: Some(3600),
                ..Default::default()
            });
        }
        let mut h = Harness::new(p);
        h.sync().await;
        let (id, _, _, _) = h.latest("app");
        h.sync().await;
        assert_eq!(h.latest("app").2, api::ContainerState::ContainerRunning, "a healthy container is left alone");

        h.st.probe_results.set(&id, ProbeKind::Liveness, false);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.container_calls(), ["StopContainer app"]);
        assert!(h.host.has_event("Killing", "Container app failed liveness probe, will be restarted"));

        h.sync().await;
        let (new_id, attempt, state, _) = h.latest("app");
        assert_ne!(new_id, id);
        assert_eq!((attempt, state), (1, api::ContainerState::ContainerRunning), "restarted as attempt 1");
    }

    #[tokio::test]
    async fn a_failed_liveness_probe_kills_with_the_probes_own_grace_period() {
        let mut p = pod("Always", &[], &["app", "other"]);
        if let Some(spec) = p.spec.as_mut() {
            spec.termination_grace_period_seconds = Some(600);
            for c in &mut spec.containers {
                c.liveness_probe = Some(Probe {
                    exec: Some(ExecAction { command: Some(vec!["true".into()]) }),
                    initial_delay_seconds: Some(3600),
                    termination_grace_period_seconds: (c.name == "app").then_some(7),
                    ..Default::default()
                });
            }
        }
        let mut h = Harness::new(p);
        h.sync().await;
        h.st.probe_results.set(&h.latest("app").0, ProbeKind::Liveness, false);
        h.st.probe_results.set(&h.latest("other").0, ProbeKind::Liveness, false);
        h.sync().await;
        assert_eq!(h.fake.stop_timeout("app"), Some(7), "the probe's terminationGracePeriodSeconds");
        assert_eq!(h.fake.stop_timeout("other"), Some(600), "the pod's");
    }

    #[tokio::test]
    async fn an_ephemeral_container_starts_once_in_the_pods_sandbox_targeting_a_container() {
        let mut p = pod("Always", &[], &["app"]);
        if let Some(spec) = p.spec.as_mut() {
            spec.ephemeral_containers = Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
                name: "debugger".into(),
                image: Some("busybox:1.36".into()),
                target_container_name: Some("app".into()),
                ..Default::default()
            }]);
        }
        let mut h = Harness::new(p);
        h.sync().await;
        // The app runs now; the debugger joined it in the first sync without a target id.
        let (app, _, _, sandbox) = h.latest("app");
        let (dbg, _, state, dbg_sandbox) = h.latest("debugger");
        assert_eq!((state, dbg_sandbox.as_str()), (api::ContainerState::ContainerRunning, sandbox.as_str()));
        let kind = h.fake.containers()[&dbg].config.annotations.get(kuberuntime::ANNOTATION_CONTAINER_KIND).cloned();
        assert_eq!(kind.as_deref(), Some("ephemeral"));
        let status = h.host.statuses.lock().last().cloned().unwrap_or_default();
        let eph = status.ephemeral_container_statuses.clone().unwrap_or_default();
        assert_eq!(eph.len(), 1);
        assert!(eph[0].state.as_ref().is_some_and(|s| s.running.is_some()), "{eph:?}");

        // Exited: never restarted.
        h.fake.exit_container(&dbg, 0);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.creates_of("debugger"), 0);

        // A second one added later joins the app's process namespace.
        if let Some(spec) = h.pod.spec.as_mut() {
            spec.ephemeral_containers.get_or_insert_with(Vec::new).push(
                k8s_openapi::api::core::v1::EphemeralContainer {
                    name: "second".into(),
                    image: Some("busybox:1.36".into()),
                    target_container_name: Some("app".into()),
                    ..Default::default()
                },
            );
        }
        h.sync().await;
        let (second, _, _, _) = h.latest("second");
        let ns = h.fake.containers()[&second]
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone())
            .unwrap_or_default();
        assert_eq!((ns.pid, ns.target_id.as_str()), (api::NamespaceMode::Target as i32, app.as_str()));
    }

    #[tokio::test]
    async fn a_pod_being_deleted_kills_its_containers_then_the_sandbox() {
        let mut h = Harness::new(pod("Always", &[], &["app", "sidecar"]));
        h.sync().await;
        h.pod.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        h.pod.metadata.deletion_grace_period_seconds = Some(0);
        h.fake.clear_calls();
        assert!(terminate(&h.m, &mut h.st, &h.pod, true).await);

        let calls = h.fake.calls();
        let at = |prefix: &str| calls.iter().position(|c| c.starts_with(prefix));
        let stop_sandbox = at("StopPodSandbox").unwrap_or_else(|| panic!("no StopPodSandbox in {calls:?}"));
        for c in ["StopContainer app", "StopContainer sidecar"] {
            assert!(at(c).is_some_and(|i| i < stop_sandbox), "{c} before StopPodSandbox: {calls:?}");
        }
        assert!(at("RemovePodSandbox").is_some_and(|i| i > stop_sandbox), "{calls:?}");
        assert_eq!(*h.host.deleted.lock(), ["p"], "the API object is deleted");
        assert!(h.fake.containers().is_empty() && h.fake.sandboxes().is_empty(), "nothing is left on the runtime");
    }

    #[tokio::test]
    async fn a_sandbox_that_died_is_recreated_with_its_containers() {
        let mut h = Harness::new(pod("Always", &[], &["app"]));
        h.sync().await;
        let (old_app, _, _, old_sandbox) = h.latest("app");
        h.fake.kill_sandbox(&old_sandbox);
        h.fake.clear_calls();
        h.sync().await;

        let sandboxes = h.fake.sandboxes();
        let (new_sandbox, s) = sandboxes
            .iter()
            .find(|(_, s)| s.state == api::PodSandboxState::SandboxReady)
            .unwrap_or_else(|| panic!("no ready sandbox in {sandboxes:?}"));
        assert_ne!(*new_sandbox, old_sandbox);
        assert_eq!(s.config.metadata.as_ref().map(|m| m.attempt), Some(1), "the sandbox's attempt counts up");
        let (app, attempt, state, sandbox) = h.latest("app");
        assert_ne!(app, old_app);
        assert_eq!(
            (attempt, state, sandbox.as_str()),
            (1, api::ContainerState::ContainerRunning, new_sandbox.as_str()),
            "the container restarts in the new sandbox"
        );
        assert_eq!(h.creates_of("app"), 1);
    }

    /// A pod whose init containers are `(name, sidecar)` pairs.
    fn sidecar_pod(policy: &str, init: &[(&str, bool)], containers: &[&str]) -> Pod {
        let mut p = pod(policy, &[], containers);
        if let Some(spec) = p.spec.as_mut() {
            spec.init_containers = Some(
                init.iter()
                    .map(|(n, sidecar)| Container {
                        restart_policy: sidecar.then(|| "Always".to_string()),
                        ..container(n)
                    })
                    .collect(),
            );
        }
        p
    }

    fn info(name: &str, state: api::ContainerState, exit_code: i32) -> ContainerInfo {
        ContainerInfo {
            id: format!("{name}-id"),
            name: name.into(),
            attempt: 0,
            state,
            created_at: 1,
            started_at: 2,
            finished_at: if state == api::ContainerState::ContainerExited { 3 } else { 0 },
            exit_code,
            reason: String::new(),
            message: String::new(),
            image: "busybox:1.36".into(),
            image_ref: String::new(),
            sandbox_id: "s1".into(),
            hash: String::new(),
            init: false,
        }
    }

    fn starts(a: &PodActions) -> Vec<String> {
        a.containers_to_start.iter().map(|s| s.container.name.clone()).collect()
    }

    fn kills(a: &PodActions) -> Vec<String> {
        a.containers_to_kill.iter().map(|k| k.message.clone()).collect()
    }

    /// Cases after upstream's `TestComputePodActionsWithRestartableInitContainers`.
    #[test]
    fn sidecars_start_in_order_each_once_the_previous_one_started() {
        use api::ContainerState::{
            ContainerCreated as Created, ContainerExited as Exited, ContainerRunning as Running,
        };
        let spec = |p: Pod| p.spec.unwrap_or_default();
        let two_sidecars = spec(sidecar_pod("Always", &[("sc-1", true), ("sc-2", true)], &["app"]));
        let results = ProbeResults::default();
        let rt = |cs: Vec<ContainerInfo>| RuntimePod { sandboxes: Vec::new(), containers: cs };

        let a = compute_pod_actions(&two_sidecars, &rt(vec![]), "s1", &results);
        assert_eq!((starts(&a), a.init_done), (vec!["sc-1".to_string()], false), "nothing ran: the first sidecar");

        let a = compute_pod_actions(&two_sidecars, &rt(vec![info("sc-1", Running, 0)]), "s1", &results);
        assert_eq!((starts(&a), a.init_done), (vec!["sc-2".to_string()], false), "a running sidecar has started");

        let both = rt(vec![info("sc-1", Running, 0), info("sc-2", Running, 0)]);
        let a = compute_pod_actions(&two_sidecars, &both, "s1", &results);
        assert_eq!((starts(&a), a.init_done), (vec!["app".to_string()], true), "all started: the app starts");

        let a = compute_pod_actions(&two_sidecars, &rt(vec![info("sc-1", Created, 0)]), "s1", &results);
        assert_eq!(starts(&a), ["sc-1"], "a sidecar stuck in created is started again");
        assert_eq!(a.containers_to_remove, ["sc-1-id"]);

        // Exited sidecars restart, before and after initialization, whatever restartPolicy says.
        for policy in ["Always", "OnFailure", "Never"] {
            let s = spec(sidecar_pod(policy, &[("sc-1", true), ("sc-2", true)], &["app"]));
            let a = compute_pod_actions(&s, &rt(vec![info("sc-1", Exited, 0)]), "s1", &results);
            assert_eq!(starts(&a), ["sc-1"], "{policy}: exited before sc-2 started");
            assert!(a.containers_to_start[0].restart_of.is_some(), "{policy}: the restart waits out its back-off");
            let running = rt(vec![info("sc-1", Exited, 1), info("sc-2", Running, 0), info("app", Running, 0)]);
            let a = compute_pod_actions(&s, &running, "s1", &results);
            assert_eq!((starts(&a), a.init_done, a.pod_done), (vec!["sc-1".to_string()], true, false), "{policy}");
        }

        // A regular init container between sidecars runs to completion before the next one.
        let mixed = spec(sidecar_pod("Always", &[("sc-1", true), ("init", false), ("sc-2", true)], &["app"]));
        let a = compute_pod_actions(&mixed, &rt(vec![info("sc-1", Running, 0)]), "s1", &results);
        assert_eq!(starts(&a), ["init"]);
        let a =
            compute_pod_actions(&mixed, &rt(vec![info("sc-1", Running, 0), info("init", Running, 0)]), "s1", &results);
        assert!(starts(&a).is_empty(), "the regular init container is still running");
        let done = rt(vec![info("sc-1", Running, 0), info("init", Exited, 0)]);
        assert_eq!(starts(&compute_pod_actions(&mixed, &done, "s1", &results)), ["sc-2"]);
        // Once the app ran, a completed init container is not run again even if gone, but a
        // missing sidecar is started again.
        let later = rt(vec![info("sc-2", Running, 0), info("app", Running, 0)]);
        let a = compute_pod_actions(&mixed, &later, "s1", &results);
        assert_eq!((starts(&a), a.init_done), (vec!["sc-1".to_string()], true));
    }

    #[test]
    fn a_sidecar_with_a_startup_probe_holds_the_next_container_until_the_probe_succeeds() {
        use api::ContainerState::ContainerRunning as Running;
        let mut p = sidecar_pod("Always", &[("sc", true)], &["app"]);
        if let Some(c) = p.spec.as_mut().and_then(|s| s.init_containers.as_mut()).map(|i| &mut i[0]) {
            c.startup_probe =
                Some(Probe { exec: Some(ExecAction { command: Some(vec!["true".into()]) }), ..Default::default() });
        }
        let spec = p.spec.unwrap_or_default();
        let rt = RuntimePod { sandboxes: Vec::new(), containers: vec![info("sc", Running, 0)] };
        let results = ProbeResults::default();
        let a = compute_pod_actions(&spec, &rt, "s1", &results);
        assert_eq!((starts(&a), a.init_done), (Vec::<String>::new(), false), "no startup result yet: wait");

        results.set("sc-id", ProbeKind::Startup, true);
        let a = compute_pod_actions(&spec, &rt, "s1", &results);
        assert_eq!((starts(&a), a.init_done), (vec!["app".to_string()], true), "started: the app starts");

        results.set("sc-id", ProbeKind::Startup, false);
        let a = compute_pod_actions(&spec, &rt, "s1", &results);
        assert_eq!(kills(&a), ["Init container sc failed startup probe"]);
        assert_eq!(starts(&a), ["sc"], "killed and started again");
    }

    #[test]
    fn a_sidecar_failing_liveness_is_restarted_without_touching_the_app() {
        use api::ContainerState::ContainerRunning as Running;
        let spec = sidecar_pod("Always", &[("sc", true)], &["app"]).spec.unwrap_or_default();
        let rt =
            RuntimePod { sandboxes: Vec::new(), containers: vec![info("sc", Running, 0), info("app", Running, 0)] };
        let results = ProbeResults::default();
        results.set("sc-id", ProbeKind::Liveness, false);
        let a = compute_pod_actions(&spec, &rt, "s1", &results);
        assert_eq!(kills(&a), ["Init container sc failed liveness probe"]);
        assert_eq!((starts(&a), a.init_done), (vec!["sc".to_string()], true));
    }

    #[test]
    fn a_job_like_pod_is_done_when_its_main_containers_finished_and_sidecars_are_not_restarted() {
        use api::ContainerState::{ContainerExited as Exited, ContainerRunning as Running};
        let cases = [
            ("Never", 0, true),
            ("Never", 1, true),
            ("OnFailure", 0, true),
            ("OnFailure", 1, false),
            ("Always", 0, false),
        ];
        for (policy, app_exit, done) in cases {
            let spec = sidecar_pod(policy, &[("sc", true)], &["app"]).spec.unwrap_or_default();
            let rt = RuntimePod {
                sandboxes: Vec::new(),
                containers: vec![info("sc", Running, 0), info("app", Exited, app_exit)],
            };
            let a = compute_pod_actions(&spec, &rt, "s1", &ProbeResults::default());
            let case = format!("restartPolicy {policy}, app exit {app_exit}");
            assert_eq!(a.pod_done, done, "{case}");
            if done {
                assert!(a.containers_to_start.is_empty(), "{case}: nothing starts");
            } else {
                assert_eq!(starts(&a), ["app"], "{case}: the app restarts");
            }
        }
    }

    #[test]
    fn sidecars_stop_after_the_main_containers_in_reverse_order() {
        let spec = sidecar_pod("Always", &[("sc-1", true), ("init", false), ("sc-2", true)], &["a", "b"]).spec;
        let order = termination_order(spec.as_ref(), &["a", "b", "sc-1", "sc-2"]);
        let waits = |n: &str| {
            let mut w = order.get(n).cloned().unwrap_or_default();
            w.sort();
            w
        };
        assert!(waits("a").is_empty() && waits("b").is_empty(), "main containers stop at once");
        assert_eq!(waits("sc-2"), ["a", "b"]);
        assert_eq!(waits("sc-1"), ["a", "b", "sc-2"]);
        // Only what still runs is waited for.
        let order = termination_order(spec.as_ref(), &["sc-1", "b"]);
        assert_eq!(order.get("sc-1").cloned().unwrap_or_default(), ["b"]);
    }

    #[tokio::test]
    async fn a_sidecar_pod_starts_in_order_and_stops_in_reverse_order() {
        let mut h = Harness::new(sidecar_pod("Always", &[("sc-1", true), ("init", false), ("sc-2", true)], &["app"]));
        h.sync().await;
        assert_eq!(h.container_calls(), ["CreateContainer sc-1", "StartContainer sc-1"]);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.container_calls(), ["CreateContainer init", "StartContainer init"], "sc-1 runs: next init");
        h.fake.exit_container(&h.latest("init").0, 0);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.container_calls(), ["CreateContainer sc-2", "StartContainer sc-2"]);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.container_calls(), ["CreateContainer app", "StartContainer app"]);
        let status = h.host.statuses.lock().last().cloned().unwrap_or_default();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready").map(|c| c.status.clone());
        assert_eq!(ready.as_deref(), Some("True"), "sidecars and app ready: {status:?}");
        let init_ready: Vec<(String, bool)> =
            status.init_container_statuses.iter().flatten().map(|s| (s.name.clone(), s.ready)).collect();
        assert_eq!(
            init_ready,
            [("sc-1".to_string(), true), ("init".to_string(), true), ("sc-2".to_string(), true)],
            "initContainerStatuses"
        );

        // A crashed sidecar is restarted while the app keeps running.
        h.fake.exit_container(&h.latest("sc-1").0, 1);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.container_calls(), ["CreateContainer sc-1", "StartContainer sc-1"]);
        assert_eq!(h.latest("sc-1").1, 1, "restart count 1");

        h.pod.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        h.pod.metadata.deletion_grace_period_seconds = Some(30);
        h.fake.clear_calls();
        assert!(terminate(&h.m, &mut h.st, &h.pod, true).await);
        let stops: Vec<String> = h.fake.calls().into_iter().filter(|c| c.starts_with("StopContainer")).collect();
        assert_eq!(stops, ["StopContainer app", "StopContainer sc-2", "StopContainer sc-1"]);
    }

    #[tokio::test]
    async fn a_job_with_a_sidecar_succeeds_when_its_main_container_exits_and_the_sidecar_is_stopped() {
        let mut h = Harness::new(sidecar_pod("Never", &[("proxy", true)], &["job"]));
        h.sync().await;
        h.sync().await;
        assert_eq!(h.latest("job").2, api::ContainerState::ContainerRunning);
        h.fake.exit_container(&h.latest("job").0, 0);
        h.fake.clear_calls();
        h.sync().await;
        assert_eq!(h.container_calls(), ["StopContainer proxy"], "the sidecar is stopped, not restarted");
        assert_eq!(h.host.phase().as_deref(), Some("Succeeded"));
        h.sync().await;
        assert_eq!(h.fake.container_ids("proxy").len(), 1, "the sidecar never ran again");
    }

    #[test]
    fn compute_pod_actions_kills_a_running_container_whose_spec_changed() {
        let spec = PodSpec { containers: vec![container("app")], ..Default::default() };
        let running = ContainerInfo {
            id: "c1".into(),
            name: "app".into(),
            attempt: 0,
            state: api::ContainerState::ContainerRunning,
            created_at: 1,
            started_at: 2,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            image: "busybox:1.36".into(),
            image_ref: String::new(),
            sandbox_id: "s1".into(),
            hash: kuberuntime::container_hash(&container("app")),
            init: false,
        };
        let rt = RuntimePod { sandboxes: Vec::new(), containers: vec![running.clone()] };
        let results = ProbeResults::default();
        let same = compute_pod_actions(&spec, &rt, "s1", &results);
        assert!(same.containers_to_kill.is_empty() && same.containers_to_start.is_empty());

        let changed = RuntimePod { containers: vec![ContainerInfo { hash: "other".into(), ..running }], ..rt };
        let actions = compute_pod_actions(&spec, &changed, "s1", &results);
        assert_eq!(actions.containers_to_kill.len(), 1);
        assert_eq!(actions.containers_to_kill[0].message, "Container app definition changed, will be restarted");
    }
}
