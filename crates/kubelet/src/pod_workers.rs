//! Pod workers: one task per pod drives the runtime towards the pod spec (the kubelet's
//! `podWorkers` + `SyncPod`), plus the pod lifecycle event generator (PLEG) that wakes workers
//! when the runtime changes, and housekeeping that removes orphaned sandboxes.
//!
//! A sync (`SyncPod`, one pass):
//! 1. read the runtime's view of the pod (sandboxes and containers by pod UID label);
//! 2. make sure a ready sandbox exists (RunPodSandbox, recreated when it died);
//! 3. set up volumes and /etc/hosts;
//! 4. run init containers one by one, each to successful completion;
//! 5. start regular containers that are missing, restart those whose restartPolicy says so
//!    (with CrashLoopBackOff: 10 s doubling to 5 min), kill those failing liveness/startup probes;
//! 6. when a non-`Always` pod has finished, stop its sandbox;
//! 7. compute the status and write it when it changed.
//!
//! A pod with `deletionTimestamp` is killed (preStop hooks, SIGTERM, SIGKILL after the grace
//! period), its final status written, and its API object deleted with grace period 0.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::backoff::Backoff;
use crate::cri::{CriClient, ImageService, RuntimeService, api};
use crate::envvars::{self, NodeFacts};
use crate::host::{EventType, PodEvent, PodHost};
use crate::images::{self, ImageOutcome};
use crate::kuberuntime::{self, ContainerInfo, ContainerStart, PodRuntimeConfig, ResolvConf, RuntimePod};
use crate::prober::{self, ProbeKind, ProbeResults, ProbeTarget};
use crate::status::{self, StatusInputs, WaitingReason};
use crate::volumes;

/// The kubelet's minimum grace period when killing containers, in seconds.
const MIN_GRACE_SECONDS: i64 = 2;

/// Resync period of a settled pod (the PLEG wakes workers on runtime changes in between).
const RESYNC: Duration = Duration::from_secs(10);

/// Resync period while a pod is starting or failing.
const FAST_RESYNC: Duration = Duration::from_secs(1);

/// How often the PLEG relists the runtime.
const PLEG_PERIOD: Duration = Duration::from_secs(1);

/// How often orphaned sandboxes and pod directories are cleaned up.
const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(10);

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

/// Whether a new version of a pod asks its worker for a sync: a change of spec, labels,
/// annotations, deletion timestamp or grace period, or of the phase (set by someone else, e.g.
/// Failed by an eviction). Other status changes, including the kubelet's own status writes
/// coming back through the watch, and resourceVersion/managedFields bumps do not, like the
/// upstream kubelet's pod config, which hands its pod workers only such changes.
fn needs_sync(old: &Pod, new: &Pod) -> bool {
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || old.metadata.deletion_grace_period_seconds != new.metadata.deletion_grace_period_seconds
        || phase(old) != phase(new)
}

#[derive(Clone)]
enum PodUpdate {
    /// The pod as the API has it now.
    Sync(Pod),
    /// The pod object is gone from the API (deleted with grace 0 or force-deleted).
    Removed(Pod),
}

struct Worker {
    updates: watch::Sender<PodUpdate>,
    wake: Arc<Notify>,
    task: JoinHandle<()>,
}

struct Inner {
    cri: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageService>,
    host: Arc<dyn PodHost>,
    cfg: PodRuntimeConfig,
    host_dns: ResolvConf,
    workers: Mutex<HashMap<String, Worker>>,
    restart_backoff: Mutex<Backoff>,
    image_backoff: Mutex<Backoff>,
    synced: Notify,
    synced_flag: std::sync::atomic::AtomicBool,
    /// Permits of the pod start phase (see [`parallel_pod_starts`]).
    starts: tokio::sync::Semaphore,
}

/// The set of pod workers of one node. Cheap to clone.
#[derive(Clone)]
pub struct PodWorkers {
    inner: Arc<Inner>,
}

impl PodWorkers {
    /// Pod workers running pods through the CRI client `cri`, reading and writing the API
    /// through `host`.
    pub fn new(cri: CriClient, host: Arc<dyn PodHost>, cfg: PodRuntimeConfig) -> Self {
        let cri = Arc::new(cri);
        PodWorkers::with_services(cri.clone(), cri, host, cfg)
    }

    /// Pod workers running pods through any CRI `runtime` and `images` services (the fakes in
    /// unit tests).
    pub fn with_services(
        runtime: Arc<dyn RuntimeService>,
        images: Arc<dyn ImageService>,
        host: Arc<dyn PodHost>,
        cfg: PodRuntimeConfig,
    ) -> Self {
        let host_dns = kuberuntime::read_resolv_conf(&cfg.resolv_conf);
        PodWorkers {
            inner: Arc::new(Inner {
                cri: runtime,
                images,
                host,
                cfg,
                host_dns,
                workers: Mutex::new(HashMap::new()),
                restart_backoff: Mutex::new(Backoff::default()),
                image_backoff: Mutex::new(Backoff::default()),
                synced: Notify::new(),
                synced_flag: std::sync::atomic::AtomicBool::new(false),
                starts: tokio::sync::Semaphore::new(parallel_pod_starts()),
            }),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &PodRuntimeConfig {
        &self.inner.cfg
    }

    /// The CRI runtime service in use (exec, attach, port-forward).
    pub fn runtime(&self) -> &dyn RuntimeService {
        self.inner.cri.as_ref()
    }

    /// Hands the current version of a pod bound to this node to its worker (starting one).
    pub fn update_pod(&self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        let mut workers = self.inner.workers.lock();
        if let Some(w) = workers.get(&uid)
            && !w.task.is_finished()
        {
            // The newest version is always stored (the next sync reads it); the worker is
            // woken only when something it acts on changed. The kubelet's own status writes
            // come back through the watch and would otherwise cost a full sync each.
            w.updates.send_if_modified(|current| {
                let wake = match current {
                    PodUpdate::Sync(old) => needs_sync(old, &pod),
                    PodUpdate::Removed(_) => true,
                };
                *current = PodUpdate::Sync(pod);
                wake
            });
            return;
        }
        let (tx, rx) = watch::channel(PodUpdate::Sync(pod));
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(run_worker(Arc::clone(&self.inner), uid.clone(), rx, Arc::clone(&wake)));
        workers.insert(uid, Worker { updates: tx, wake, task });
    }

    /// Tells the worker that the pod object was removed from the API: its containers are
    /// killed and everything is cleaned up.
    pub fn remove_pod(&self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else { return };
        if let Some(w) = self.inner.workers.lock().get(&uid)
            && !w.task.is_finished()
        {
            let _ = w.updates.send(PodUpdate::Removed(pod.clone()));
        }
        // Without a worker, housekeeping removes whatever the runtime still has.
    }

    /// Marks the initial pod list as delivered: housekeeping may now treat runtime pods
    /// without a worker as orphans.
    pub fn mark_synced(&self) {
        self.inner.synced_flag.store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.synced.notify_waiters();
    }

    /// The current version of a pod this node runs, by namespace and name.
    pub fn find_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        let workers = self.inner.workers.lock();
        workers.values().filter(|w| !w.task.is_finished()).find_map(|w| {
            let pod = match &*w.updates.borrow() {
                PodUpdate::Sync(p) | PodUpdate::Removed(p) => p.clone(),
            };
            (pod.metadata.namespace.as_deref() == Some(namespace) && pod.metadata.name.as_deref() == Some(name))
                .then_some(pod)
        })
    }

    /// UIDs of pods with a live worker.
    pub fn pod_uids(&self) -> Vec<String> {
        self.inner.workers.lock().iter().filter(|(_, w)| !w.task.is_finished()).map(|(k, _)| k.clone()).collect()
    }

    /// Runs the PLEG and housekeeping loops until the future is dropped.
    pub async fn run(&self) {
        tokio::join!(self.run_pleg(), self.run_housekeeping());
    }

    /// Relists the runtime every second and wakes the workers of pods whose sandboxes or
    /// containers changed state.
    pub async fn run_pleg(&self) {
        let mut last: HashMap<String, Vec<(String, i32)>> = HashMap::new();
        let mut tick = tokio::time::interval(PLEG_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (sandboxes, containers) =
                match tokio::try_join!(self.inner.cri.list_pod_sandboxes(None), self.inner.cri.list_containers(None)) {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::warn!(error = %e, "PLEG relist failed");
                        continue;
                    }
                };
            let mut now: HashMap<String, Vec<(String, i32)>> = HashMap::new();
            for s in sandboxes {
                if let Some(uid) = s.labels.get(kuberuntime::LABEL_POD_UID) {
                    now.entry(uid.clone()).or_default().push((s.id, s.state));
                }
            }
            for c in containers {
                if let Some(uid) = c.labels.get(kuberuntime::LABEL_POD_UID) {
                    now.entry(uid.clone()).or_default().push((c.id, c.state + 10));
                }
            }
            for v in now.values_mut() {
                v.sort();
            }
            let workers = self.inner.workers.lock();
            for (uid, sig) in &now {
                if last.get(uid) != Some(sig)
                    && let Some(w) = workers.get(uid)
                {
                    w.wake.notify_one();
                }
            }
            for uid in last.keys() {
                if !now.contains_key(uid)
                    && let Some(w) = workers.get(uid)
                {
                    w.wake.notify_one();
                }
            }
            drop(workers);
            last = now;
        }
    }

    /// Every 10 s (after [`PodWorkers::mark_synced`]): kills and removes runtime pods that have
    /// no worker (their API object is gone), removes leftover pod directories, and forgets
    /// finished workers.
    pub async fn run_housekeeping(&self) {
        while !self.inner.synced_flag.load(std::sync::atomic::Ordering::SeqCst) {
            let notified = self.inner.synced.notified();
            if self.inner.synced_flag.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            notified.await;
        }
        loop {
            if let Err(e) = self.housekeeping_once().await {
                tracing::warn!(error = %e, "housekeeping failed");
            }
            tokio::time::sleep(HOUSEKEEPING_PERIOD).await;
        }
    }

    /// One housekeeping pass (see [`PodWorkers::run_housekeeping`]).
    ///
    /// # Errors
    /// [`crate::cri::CriError`] when the runtime cannot be listed.
    pub async fn housekeeping_once(&self) -> Result<(), crate::cri::CriError> {
        self.inner.workers.lock().retain(|_, w| !w.task.is_finished());
        let live: HashSet<String> = self.inner.workers.lock().keys().cloned().collect();
        let runtime_uids = kuberuntime::runtime_pod_uids(self.inner.cri.as_ref()).await?;
        for uid in runtime_uids.difference(&live) {
            tracing::info!(pod_uid = %uid, "removing orphaned pod from the runtime");
            let rt = kuberuntime::runtime_pod(self.inner.cri.as_ref(), uid).await?;
            kill_runtime_pod(&self.inner, None, &rt, 30).await;
            remove_runtime_pod(&self.inner, &rt).await;
            volumes::cleanup_pod_dir(&self.inner.cfg.root_dir, uid);
            crate::cgroups::remove_pod_cgroups(&self.inner.cfg.cgroup_root, uid);
        }
        if let Ok(entries) = std::fs::read_dir(self.inner.cfg.root_dir.join("pods")) {
            for e in entries.flatten() {
                let uid = e.file_name().to_string_lossy().into_owned();
                if !live.contains(&uid) && !runtime_uids.contains(&uid) {
                    volumes::cleanup_pod_dir(&self.inner.cfg.root_dir, &uid);
                }
            }
        }
        self.inner.restart_backoff.lock().gc(Instant::now());
        self.inner.image_backoff.lock().gc(Instant::now());
        Ok(())
    }

    /// The log file of a container of `pod`: the current instance, or with `previous` the one
    /// before it. `None` when there is no such instance.
    ///
    /// # Errors
    /// [`crate::cri::CriError`] when the runtime cannot be queried.
    pub async fn container_log_file(
        &self,
        pod: &Pod,
        container: &str,
        previous: bool,
    ) -> Result<Option<PathBuf>, crate::cri::CriError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let rt = kuberuntime::runtime_pod(self.inner.cri.as_ref(), &uid).await?;
        let c = if previous { rt.previous(container) } else { rt.latest(container) };
        Ok(c.map(|c| self.inner.cfg.pod_log_dir(pod).join(kuberuntime::container_log_path(container, c.attempt))))
    }

    /// The runtime id of the running instance of a container of pod `uid`.
    ///
    /// # Errors
    /// [`crate::cri::CriError`] when the runtime cannot be queried.
    pub async fn running_container_id(
        &self,
        uid: &str,
        container: &str,
    ) -> Result<Option<String>, crate::cri::CriError> {
        let rt = kuberuntime::runtime_pod(self.inner.cri.as_ref(), uid).await?;
        Ok(rt.latest(container).filter(|c| c.state == api::ContainerState::ContainerRunning).map(|c| c.id.clone()))
    }

    /// The runtime id of the newest ready sandbox of pod `uid` (the target of port forwarding).
    ///
    /// # Errors
    /// [`crate::cri::CriError`] when the runtime cannot be queried.
    pub async fn ready_sandbox_id(&self, uid: &str) -> Result<Option<String>, crate::cri::CriError> {
        let rt = kuberuntime::runtime_pod(self.inner.cri.as_ref(), uid).await?;
        Ok(rt.sandboxes.iter().find(|s| s.ready).map(|s| s.id.clone()))
    }
}

/// Per-worker state kept between syncs.
struct WorkerState {
    uid: String,
    waiting: HashMap<String, WaitingReason>,
    last_status: Option<k8s_openapi::api::core::v1::PodStatus>,
    probes: HashMap<(String, ProbeKind), JoinHandle<()>>,
    probe_results: Arc<ProbeResults>,
    wake: Arc<Notify>,
    volumes: Option<HashMap<String, PathBuf>>,
    etc_hosts: Option<PathBuf>,
    /// Set once the pod finished (restartPolicy Never/OnFailure) and its sandbox was stopped.
    finished: bool,
    /// Event messages already recorded, to avoid repeating identical warnings every sync.
    recorded: HashSet<String>,
}

impl WorkerState {
    fn stop_probes(&mut self, keep: &HashSet<String>) {
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

impl Drop for WorkerState {
    fn drop(&mut self) {
        for h in self.probes.values() {
            h.abort();
        }
    }
}

fn pod_desc(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

fn field_path(c: &Container, init: bool) -> Option<String> {
    Some(format!("spec.{}{{{}}}", if init { "initContainers" } else { "containers" }, c.name))
}

fn event(inner: &Inner, pod: &Pod, type_: EventType, reason: &str, message: String, field_path: Option<String>) {
    inner.host.record_event(pod, PodEvent { type_, reason: reason.to_string(), message, field_path });
}

fn grace_seconds(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30)
}

async fn run_worker(inner: Arc<Inner>, uid: String, mut updates: watch::Receiver<PodUpdate>, wake: Arc<Notify>) {
    let mut st = WorkerState {
        uid: uid.clone(),
        waiting: HashMap::new(),
        last_status: None,
        probes: HashMap::new(),
        probe_results: Arc::new(ProbeResults::default()),
        wake: Arc::clone(&wake),
        volumes: None,
        etc_hosts: None,
        finished: false,
        recorded: HashSet::new(),
    };
    loop {
        let update = updates.borrow_and_update().clone();
        let next = match update {
            PodUpdate::Removed(pod) => {
                terminate(&inner, &mut st, &pod, false).await;
                break;
            }
            PodUpdate::Sync(pod) if pod.metadata.deletion_timestamp.is_some() => {
                if terminate(&inner, &mut st, &pod, true).await {
                    break;
                }
                FAST_RESYNC
            }
            PodUpdate::Sync(pod) => match sync_pod(&inner, &mut st, &pod).await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(pod = %pod_desc(&pod), error = %e, "pod sync failed");
                    Duration::from_secs(2)
                }
            },
        };
        tokio::select! {
            changed = updates.changed() => if changed.is_err() { break },
            _ = wake.notified() => {}
            _ = tokio::time::sleep(next) => {}
        }
    }
    inner.workers.lock().remove(&uid);
}

/// Kills the pod and cleans up. With `delete_object` (the pod has a deletionTimestamp), writes
/// the final status and deletes the API object; returns false when that failed and should be
/// retried.
async fn terminate(inner: &Arc<Inner>, st: &mut WorkerState, pod: &Pod, delete_object: bool) -> bool {
    let rt = match kuberuntime::runtime_pod(inner.cri.as_ref(), &st.uid).await {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "reading the runtime while terminating failed");
            return false;
        }
    };
    st.stop_probes(&HashSet::new());
    let grace = if delete_object { grace_seconds(pod) } else { grace_seconds(pod).min(MIN_GRACE_SECONDS) };
    kill_runtime_pod(inner, Some(pod), &rt, grace).await;
    if delete_object {
        let rt = kuberuntime::runtime_pod(inner.cri.as_ref(), &st.uid).await.unwrap_or(rt);
        let mut inputs = status_inputs(inner, st);
        inputs.terminal = true;
        inputs.waiting.clear();
        let base = pod_with_status(pod, st);
        let status = status::generate_pod_status(&base, &rt, &inputs);
        if let Err(e) = inner.host.update_pod_status(pod, &status).await {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "writing the final pod status failed");
            return false;
        }
        if let Err(e) = inner.host.delete_pod(pod).await {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "deleting the pod object failed");
            return false;
        }
        remove_runtime_pod(inner, &rt).await;
    } else {
        remove_runtime_pod(inner, &rt).await;
    }
    volumes::cleanup_pod_dir(&inner.cfg.root_dir, &st.uid);
    crate::cgroups::remove_pod_cgroups(&inner.cfg.cgroup_root, &st.uid);
    inner.restart_backoff.lock().reset_prefix(&format!("{}/", st.uid));
    inner.image_backoff.lock().reset_prefix(&format!("{}/", st.uid));
    true
}

/// Stops every running container (preStop hook first, then SIGTERM and SIGKILL after the
/// remaining grace period) and every ready sandbox of a runtime pod.
async fn kill_runtime_pod(inner: &Arc<Inner>, pod: Option<&Pod>, rt: &RuntimePod, grace: i64) {
    let deadline = Instant::now() + Duration::from_secs(grace.max(0) as u64);
    let pod_ip = rt.latest_sandbox().and_then(|s| s.ip.clone()).unwrap_or_default();
    let kills = rt.running_containers().map(|c| {
        let spec = pod.and_then(|p| {
            let s = p.spec.as_ref()?;
            s.containers.iter().chain(s.init_containers.iter().flatten()).find(|x| x.name == c.name).cloned()
        });
        let pod_ip = pod_ip.clone();
        async move {
            if let Some(p) = pod {
                event(
                    inner,
                    p,
                    EventType::Normal,
                    "Killing",
                    format!("Stopping container {}", c.name),
                    Some(format!("spec.containers{{{}}}", c.name)),
                );
            }
            if let Some(hook) = spec.as_ref().and_then(|s| s.lifecycle.as_ref()).and_then(|l| l.pre_stop.clone())
                && let Some(container) = spec.as_ref()
            {
                let budget = deadline.saturating_duration_since(Instant::now());
                let outcome =
                    prober::run_lifecycle_handler(inner.cri.as_ref(), &c.id, container, &pod_ip, &hook, budget).await;
                if let (prober::Outcome::Failure(msg), Some(p)) = (outcome, pod) {
                    event(
                        inner,
                        p,
                        EventType::Warning,
                        "FailedPreStopHook",
                        format!("PreStopHook failed: {msg}"),
                        None,
                    );
                }
            }
            let remaining = deadline.saturating_duration_since(Instant::now()).as_secs() as i64;
            if let Err(e) = inner.cri.stop_container(&c.id, remaining.max(MIN_GRACE_SECONDS)).await
                && !e.is_not_found()
            {
                tracing::warn!(container = %c.id, error = %e, "stopping container failed");
            }
        }
    });
    futures::future::join_all(kills).await;
    for s in rt.sandboxes.iter().filter(|s| s.ready) {
        if let Err(e) = inner.cri.stop_pod_sandbox(&s.id).await
            && !e.is_not_found()
        {
            tracing::warn!(sandbox = %s.id, error = %e, "stopping sandbox failed");
        }
    }
}

/// Removes every container and sandbox of a runtime pod.
async fn remove_runtime_pod(inner: &Inner, rt: &RuntimePod) {
    for c in &rt.containers {
        if let Err(e) = inner.cri.remove_container(&c.id).await
            && !e.is_not_found()
        {
            tracing::warn!(container = %c.id, error = %e, "removing container failed");
        }
    }
    for s in &rt.sandboxes {
        if let Err(e) = inner.cri.stop_pod_sandbox(&s.id).await
            && !e.is_not_found()
        {
            tracing::debug!(sandbox = %s.id, error = %e, "stopping sandbox before removal failed");
        }
        if let Err(e) = inner.cri.remove_pod_sandbox(&s.id).await
            && !e.is_not_found()
        {
            tracing::warn!(sandbox = %s.id, error = %e, "removing sandbox failed");
        }
    }
}

fn status_inputs(inner: &Inner, st: &WorkerState) -> StatusInputs {
    StatusInputs {
        node_ip: inner.cfg.node_ip.clone(),
        runtime_name: inner.cfg.runtime_name.clone(),
        readiness: st.probe_results.of_kind(ProbeKind::Readiness),
        startup: st.probe_results.of_kind(ProbeKind::Startup),
        waiting: st.waiting.clone(),
        terminal: st.finished,
        now: None,
    }
}

/// The pod with the status we last wrote (the watch may not have delivered it yet).
fn pod_with_status(pod: &Pod, st: &WorkerState) -> Pod {
    let mut p = pod.clone();
    if let Some(s) = &st.last_status {
        p.status = Some(s.clone());
    }
    p
}

fn should_restart(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

/// Converts a runtime timestamp (ns since the epoch) to an `Instant` in this process.
fn instant_of(ns: i64) -> Instant {
    let now_ns = Timestamp::now().as_nanosecond();
    let ago = u64::try_from((now_ns - i128::from(ns)).max(0)).unwrap_or(0);
    Instant::now().checked_sub(Duration::from_nanos(ago)).unwrap_or_else(Instant::now)
}

/// What one sync decided for a container.
enum ContainerAction {
    /// Nothing to do.
    Keep,
    /// Start a new instance with this attempt number.
    Start(u32),
    /// Waiting for back-off to expire (remaining time).
    Wait(Duration),
}

async fn sync_pod(inner: &Arc<Inner>, st: &mut WorkerState, pod: &Pod) -> Result<Duration, crate::Error> {
    let spec = pod.spec.clone().unwrap_or_default();
    let policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
    let cri_err = |e: crate::cri::CriError| crate::Error::Config(e.to_string());
    let api_phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let t = Instant::now();
    let mut rt = kuberuntime::runtime_pod(inner.cri.as_ref(), &st.uid).await.map_err(cri_err)?;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "sync started; runtime read");

    // A finished pod (Succeeded/Failed) is never restarted: make sure nothing runs.
    if st.finished || api_phase == "Succeeded" || api_phase == "Failed" {
        if rt.running_containers().next().is_some() || rt.sandboxes.iter().any(|s| s.ready) {
            kill_runtime_pod(inner, Some(pod), &rt, grace_seconds(pod)).await;
            rt = kuberuntime::runtime_pod(inner.cri.as_ref(), &st.uid).await.map_err(cri_err)?;
        }
        st.finished = true;
        st.stop_probes(&HashSet::new());
        publish_status(inner, st, pod, &rt).await;
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
        start_permit = acquire_start_permit(inner, pod).await;
        if !rt.containers.is_empty() || !rt.sandboxes.is_empty() {
            tracing::info!(pod = %pod_desc(pod), "sandbox is not ready; recreating it");
            kill_runtime_pod(inner, Some(pod), &rt, grace_seconds(pod)).await;
            st.stop_probes(&HashSet::new());
            st.etc_hosts = None;
        }
        let attempt = rt.sandboxes.iter().map(|s| s.attempt + 1).max().unwrap_or(0);
        let config = kuberuntime::sandbox_config(pod, &inner.cfg, attempt, &inner.host_dns);
        let log_dir = inner.cfg.pod_log_dir(pod);
        std::fs::create_dir_all(&log_dir)
            .map_err(|e| crate::Error::io(format!("creating {}", log_dir.display()), e))?;
        let t = Instant::now();
        let ran = inner.cri.run_pod_sandbox(config).await;
        tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "RunPodSandbox");
        if let Err(e) = ran {
            event(
                inner,
                pod,
                EventType::Warning,
                "FailedCreatePodSandBox",
                format!("Failed to create pod sandbox: {e}"),
                None,
            );
            publish_status(inner, st, pod, &rt).await;
            return Ok(Duration::from_secs(5));
        }
        // Old sandboxes are removed once replaced (their containers with them, except the
        // newest instance of each container, kept for lastState and logs --previous).
        for old in rt.sandboxes.iter() {
            let _ = inner.cri.stop_pod_sandbox(&old.id).await;
        }
        rt = kuberuntime::runtime_pod(inner.cri.as_ref(), &st.uid).await.map_err(cri_err)?;
        next = FAST_RESYNC;
    }
    let Some(sandbox) = rt.latest_sandbox().cloned() else {
        return Ok(FAST_RESYNC);
    };
    let pod_ip = if host_network { inner.cfg.node_ip.clone() } else { sandbox.ip.clone().unwrap_or_default() };
    let sandbox_config = kuberuntime::sandbox_config(pod, &inner.cfg, sandbox.attempt, &inner.host_dns);
    let facts = NodeFacts {
        host_ip: inner.cfg.node_ip.clone(),
        pod_ip: pod_ip.clone(),
        allocatable_cpu_millis: inner.cfg.allocatable_cpu_millis,
        allocatable_memory: inner.cfg.memory_capacity,
        allocatable_ephemeral_storage: inner.cfg.allocatable_ephemeral_storage,
    };

    // 2. Decide per container.
    let in_sandbox = |c: &&ContainerInfo| c.sandbox_id == sandbox.id;
    let mut to_start: Vec<(Container, bool, u32)> = Vec::new();
    let mut init_done = true;
    for c in spec.init_containers.iter().flatten() {
        let latest = rt.latest(&c.name);
        let current = latest.filter(in_sandbox);
        match current {
            Some(l) if l.state == api::ContainerState::ContainerExited && l.exit_code == 0 => continue,
            Some(l) if l.state == api::ContainerState::ContainerRunning => {
                init_done = false;
                break;
            }
            Some(l) if l.state == api::ContainerState::ContainerExited => {
                init_done = false;
                if policy == "Never" {
                    // The pod failed: an init container failed and may not be retried.
                    st.finished = true;
                    kill_runtime_pod(inner, Some(pod), &rt, grace_seconds(pod)).await;
                    break;
                }
                match backoff_action(inner, st, pod, c, l) {
                    ContainerAction::Start(a) => to_start.push((c.clone(), true, a)),
                    ContainerAction::Wait(d) => next = next.min(d),
                    ContainerAction::Keep => {}
                }
                break;
            }
            _ => {
                init_done = false;
                let attempt = latest.map(|l| l.attempt + 1).unwrap_or(0);
                to_start.push((c.clone(), true, attempt));
                break;
            }
        }
    }
    if init_done {
        for c in &spec.containers {
            let latest = rt.latest(&c.name);
            let action = match latest {
                None => ContainerAction::Start(0),
                Some(l) if l.sandbox_id != sandbox.id => ContainerAction::Start(l.attempt + 1),
                Some(l) if l.state == api::ContainerState::ContainerRunning => {
                    let liveness_failed = st.probe_results.get(&l.id, ProbeKind::Liveness) == Some(false);
                    let startup_failed = st.probe_results.get(&l.id, ProbeKind::Startup) == Some(false);
                    let changed = !l.hash.is_empty() && l.hash != kuberuntime::container_hash(c);
                    if liveness_failed || startup_failed || changed {
                        let why = if liveness_failed {
                            format!("Container {} failed liveness probe, will be restarted", c.name)
                        } else if startup_failed {
                            format!("Container {} failed startup probe, will be restarted", c.name)
                        } else {
                            format!("Container {} definition changed, will be restarted", c.name)
                        };
                        event(inner, pod, EventType::Normal, "Killing", why, field_path(c, false));
                        kill_container(inner, pod, c, l, &pod_ip).await;
                        st.wake.notify_one();
                        next = FAST_RESYNC;
                    }
                    ContainerAction::Keep
                }
                Some(l) if l.state == api::ContainerState::ContainerExited => {
                    if should_restart(&policy, l.exit_code) {
                        backoff_action(inner, st, pod, c, l)
                    } else {
                        ContainerAction::Keep
                    }
                }
                Some(l) => {
                    // Created but never started (e.g. the agent died in between): replace it.
                    let _ = inner.cri.remove_container(&l.id).await;
                    ContainerAction::Start(l.attempt)
                }
            };
            match action {
                ContainerAction::Start(a) => to_start.push((c.clone(), false, a)),
                ContainerAction::Wait(d) => next = next.min(d),
                ContainerAction::Keep => {}
            }
        }
    }

    // 3. Volumes and /etc/hosts, then start what needs starting.
    if !to_start.is_empty() && !st.finished {
        next = next.min(FAST_RESYNC);
        if start_permit.is_none() {
            start_permit = acquire_start_permit(inner, pod).await;
        }
        let t = Instant::now();
        let set_up = volumes::setup_volumes(inner.host.as_ref(), &inner.cfg.root_dir, pod, &facts).await;
        tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "volumes set up");
        match set_up {
            Ok(v) => st.volumes = Some(v),
            Err(e) => {
                let msg = format!("MountVolume.SetUp failed: {e}");
                if st.recorded.insert(msg.clone()) {
                    event(inner, pod, EventType::Warning, "FailedMount", msg, None);
                }
                publish_status(inner, st, pod, &rt).await;
                return Ok(Duration::from_secs(2));
            }
        }
        if !host_network && st.etc_hosts.is_none() {
            match volumes::write_etc_hosts(&inner.cfg.root_dir, pod, &pod_ip, &kuberuntime::pod_hostname(pod)) {
                Ok(p) => st.etc_hosts = Some(p),
                Err(e) => tracing::warn!(pod = %pod_desc(pod), error = %e, "writing /etc/hosts failed"),
            }
        }
        for (c, init, attempt) in to_start {
            start_container(inner, st, pod, &c, init, attempt, &sandbox.id, &sandbox_config, &facts, &mut start_permit)
                .await;
        }
        drop(start_permit.take());
        rt = kuberuntime::runtime_pod(inner.cri.as_ref(), &st.uid).await.map_err(cri_err)?;
    }

    // Projected service-account tokens are rewritten before they expire (checked every sync,
    // i.e. at least every RESYNC; also for pods adopted after an agent restart).
    if !st.finished {
        let now = std::time::SystemTime::now();
        if let Err(e) =
            volumes::refresh_service_account_tokens(inner.host.as_ref(), &inner.cfg.root_dir, pod, now).await
        {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "refreshing service account tokens failed");
        }
    }

    // 4. Finished? (restartPolicy Never/OnFailure, every container exited for good.)
    if policy != "Always" && init_done && !spec.containers.is_empty() {
        let all_done = spec.containers.iter().all(|c| match rt.latest(&c.name) {
            Some(l) => l.state == api::ContainerState::ContainerExited && !should_restart(&policy, l.exit_code),
            None => false,
        });
        if all_done {
            st.finished = true;
            kill_runtime_pod(inner, Some(pod), &rt, 0).await;
            rt = kuberuntime::runtime_pod(inner.cri.as_ref(), &st.uid).await.map_err(cri_err)?;
        }
    }

    // 5. Probes for running containers of the current sandbox.
    let running: Vec<ContainerInfo> = rt.running_containers().filter(|c| c.sandbox_id == sandbox.id).cloned().collect();
    let keep: HashSet<String> = running.iter().map(|c| c.id.clone()).collect();
    st.stop_probes(&keep);
    for c in &running {
        let Some(c_spec) = spec.containers.iter().find(|s| s.name == c.name) else { continue };
        for kind in [ProbeKind::Startup, ProbeKind::Liveness, ProbeKind::Readiness] {
            if kind.probe(c_spec).is_none() || st.probes.contains_key(&(c.id.clone(), kind)) {
                continue;
            }
            let target = ProbeTarget {
                cri: Arc::clone(&inner.cri),
                host: Arc::clone(&inner.host),
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

    // 6. Garbage-collect dead instances beyond the newest two of each container.
    gc_dead_containers(inner, &rt).await;

    publish_status(inner, st, pod, &rt).await;
    Ok(next)
}

/// Waits for a permit of the pod start phase (first come, first served). `None` only if the
/// semaphore was closed, which never happens; the start then simply goes ahead.
async fn acquire_start_permit<'a>(inner: &'a Inner, pod: &Pod) -> Option<tokio::sync::SemaphorePermit<'a>> {
    let t = Instant::now();
    let permit = inner.starts.acquire().await.ok();
    let waited = t.elapsed();
    if waited > Duration::from_millis(10) {
        tracing::debug!(pod = %pod_desc(pod), waited_ms = waited.as_millis() as u64, "waited for a pod start permit");
    }
    permit
}

/// Restart decision for an exited container under CrashLoopBackOff.
fn backoff_action(inner: &Inner, st: &mut WorkerState, pod: &Pod, c: &Container, l: &ContainerInfo) -> ContainerAction {
    let key = format!("{}/{}", st.uid, c.name);
    let finished = instant_of(if l.finished_at > 0 { l.finished_at } else { l.created_at });
    let now = Instant::now();
    let mut backoff = inner.restart_backoff.lock();
    if let Some(remaining) = backoff.in_backoff_since(&key, finished, now) {
        let delay = backoff.get(&key).unwrap_or_default();
        drop(backoff);
        let message =
            format!("back-off {} restarting failed container={} pod={}", format_duration(delay), c.name, pod_desc(pod));
        let first = st.waiting.get(&c.name).map(|w| w.reason.as_str()) != Some("CrashLoopBackOff");
        st.waiting.insert(c.name.clone(), WaitingReason { reason: "CrashLoopBackOff".into(), message });
        if first {
            event(
                inner,
                pod,
                EventType::Warning,
                "BackOff",
                format!("Back-off restarting failed container {} in pod {}", c.name, pod_desc(pod)),
                field_path(c, false),
            );
        }
        return ContainerAction::Wait(remaining + Duration::from_millis(50));
    }
    backoff.next(&key, finished);
    ContainerAction::Start(l.attempt + 1)
}

fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{}m0s", s / 60)
    } else if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

async fn kill_container(inner: &Inner, pod: &Pod, c: &Container, l: &ContainerInfo, pod_ip: &str) {
    let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
    let deadline = Instant::now() + Duration::from_secs(grace.max(0) as u64);
    if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.clone()) {
        let budget = deadline.saturating_duration_since(Instant::now());
        if let prober::Outcome::Failure(msg) =
            prober::run_lifecycle_handler(inner.cri.as_ref(), &l.id, c, pod_ip, &hook, budget).await
        {
            event(inner, pod, EventType::Warning, "FailedPreStopHook", format!("PreStopHook failed: {msg}"), None);
        }
    }
    let remaining = deadline.saturating_duration_since(Instant::now()).as_secs() as i64;
    if let Err(e) = inner.cri.stop_container(&l.id, remaining.max(MIN_GRACE_SECONDS)).await
        && !e.is_not_found()
    {
        tracing::warn!(container = %l.id, error = %e, "stopping container failed");
    }
}

#[allow(clippy::too_many_arguments)]
async fn start_container(
    inner: &Arc<Inner>,
    st: &mut WorkerState,
    pod: &Pod,
    c: &Container,
    init: bool,
    attempt: u32,
    sandbox_id: &str,
    sandbox_config: &api::PodSandboxConfig,
    facts: &NodeFacts,
    start_permit: &mut Option<tokio::sync::SemaphorePermit<'_>>,
) {
    let fp = field_path(c, init);
    let image = c.image.clone().unwrap_or_default();
    let image_key = format!("{}/{}", st.uid, image);
    let t = Instant::now();
    let pulled = images::ensure_image(inner.images.as_ref(), c, &inner.image_backoff, &image_key, || {
        event(inner, pod, EventType::Normal, "Pulling", format!("Pulling image {image:?}"), fp.clone());
    })
    .await;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "image ensured");
    let image_ref = match pulled {
        Ok(outcome) => {
            let msg = match &outcome {
                ImageOutcome::Present { .. } => format!("Container image {image:?} already present on machine"),
                ImageOutcome::Pulled { took, .. } => {
                    format!("Successfully pulled image {image:?} in {:.3}s", took.as_secs_f64())
                }
            };
            if !matches!(outcome, ImageOutcome::Present { .. }) || st.recorded.insert(format!("pulled/{}", c.name)) {
                event(inner, pod, EventType::Normal, "Pulled", msg, fp.clone());
            }
            outcome.image_ref().to_string()
        }
        Err(e) => {
            let (etype, reason) = if e.reason == "ImagePullBackOff" {
                (EventType::Normal, "BackOff")
            } else {
                (EventType::Warning, "Failed")
            };
            event(inner, pod, etype, reason, e.message.clone(), fp.clone());
            if e.reason != "ImagePullBackOff" {
                event(inner, pod, EventType::Warning, "Failed", format!("Error: {}", e.reason), fp.clone());
            }
            st.waiting.insert(c.name.clone(), WaitingReason { reason: e.reason.to_string(), message: e.message });
            return;
        }
    };
    let t = Instant::now();
    let env = envvars::make_environment(inner.host.as_ref(), pod, c, facts).await;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "environment made");
    let env = match env {
        Ok(env) => env,
        Err(e) => {
            let msg = format!("Error: {e}");
            if st.recorded.insert(msg.clone()) {
                event(inner, pod, EventType::Warning, "Failed", msg, fp.clone());
            }
            st.waiting.insert(
                c.name.clone(),
                WaitingReason { reason: "CreateContainerConfigError".into(), message: e.to_string() },
            );
            return;
        }
    };
    let env_map: HashMap<String, String> = env.iter().cloned().collect();
    let empty = HashMap::new();
    let mounts =
        match volumes::container_mounts(c, st.volumes.as_ref().unwrap_or(&empty), &env_map, st.etc_hosts.as_deref()) {
            Ok(m) => m,
            Err(e) => {
                st.waiting.insert(
                    c.name.clone(),
                    WaitingReason { reason: "CreateContainerConfigError".into(), message: e.to_string() },
                );
                return;
            }
        };
    let log_dir = inner.cfg.pod_log_dir(pod).join(&c.name);
    if let Err(e) = std::fs::create_dir_all(&log_dir) {
        tracing::warn!(dir = %log_dir.display(), error = %e, "creating the container log directory failed");
    }
    let start = ContainerStart { pod, container: c, init, attempt, image_ref, env, mounts };
    let config = kuberuntime::container_config(&start, &inner.cfg);
    let t = Instant::now();
    let created = inner.cri.create_container(sandbox_id, config, sandbox_config.clone()).await;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "CreateContainer");
    let id = match created {
        Ok(id) => id,
        Err(e) => {
            event(inner, pod, EventType::Warning, "Failed", format!("Error: {e}"), fp.clone());
            st.waiting.insert(
                c.name.clone(),
                WaitingReason { reason: "CreateContainerError".into(), message: e.to_string() },
            );
            return;
        }
    };
    event(inner, pod, EventType::Normal, "Created", format!("Created container {}", c.name), fp.clone());
    let t = Instant::now();
    let started = inner.cri.start_container(&id).await;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "StartContainer");
    if let Err(e) = started {
        event(inner, pod, EventType::Warning, "Failed", format!("Error: {e}"), fp.clone());
        st.waiting.insert(c.name.clone(), WaitingReason { reason: "RunContainerError".into(), message: e.to_string() });
        return;
    }
    event(inner, pod, EventType::Normal, "Started", format!("Started container {}", c.name), fp.clone());
    st.waiting.remove(&c.name);
    if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.clone()) {
        // A hook may take up to the grace period: other pods' starts need not wait for it.
        drop(start_permit.take());
        let timeout = Duration::from_secs(grace_seconds(pod).max(MIN_GRACE_SECONDS) as u64);
        if let prober::Outcome::Failure(msg) =
            prober::run_lifecycle_handler(inner.cri.as_ref(), &id, c, &facts.pod_ip, &hook, timeout).await
        {
            event(
                inner,
                pod,
                EventType::Warning,
                "FailedPostStartHook",
                format!("PostStartHook failed: {msg}"),
                fp.clone(),
            );
            let _ = inner.cri.stop_container(&id, MIN_GRACE_SECONDS).await;
            st.waiting.insert(c.name.clone(), WaitingReason { reason: "PostStartHookError".into(), message: msg });
        }
    }
}

/// Removes exited instances of a container beyond the newest two (the current one and the
/// previous one, kept for `lastState` and `kubectl logs --previous`), and non-ready sandboxes
/// without containers other than the newest.
async fn gc_dead_containers(inner: &Inner, rt: &RuntimePod) {
    let mut by_name: HashMap<&str, Vec<&ContainerInfo>> = HashMap::new();
    for c in &rt.containers {
        by_name.entry(c.name.as_str()).or_default().push(c);
    }
    for (_, mut list) in by_name {
        list.sort_by_key(|c| std::cmp::Reverse((c.attempt, c.created_at)));
        for c in list.iter().skip(2) {
            if c.state != api::ContainerState::ContainerRunning {
                let _ = inner.cri.remove_container(&c.id).await;
            }
        }
    }
    let used: HashSet<&str> = rt.containers.iter().map(|c| c.sandbox_id.as_str()).collect();
    for s in rt.sandboxes.iter().skip(1) {
        if !s.ready && !used.contains(s.id.as_str()) {
            let _ = inner.cri.remove_pod_sandbox(&s.id).await;
        }
    }
}

/// Computes the status and writes it when it changed since the last write.
async fn publish_status(inner: &Inner, st: &mut WorkerState, pod: &Pod, rt: &RuntimePod) {
    let base = pod_with_status(pod, st);
    let status = status::generate_pod_status(&base, rt, &status_inputs(inner, st));
    let unchanged = match (&st.last_status, &pod.status) {
        (Some(last), _) => !status::status_changed(last, &status),
        (None, Some(api)) => !status::status_changed(api, &status),
        (None, None) => false,
    };
    if unchanged {
        return;
    }
    let t = Instant::now();
    let written = inner.host.update_pod_status(pod, &status).await;
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
    use super::*;

    #[test]
    fn only_changes_the_worker_acts_on_ask_for_a_sync() {
        let mut pod = Pod::default();
        pod.metadata.resource_version = Some("1".into());
        pod.spec = Some(Default::default());
        let mut status_only = pod.clone();
        status_only.metadata.resource_version = Some("2".into());
        status_only.status =
            Some(k8s_openapi::api::core::v1::PodStatus { pod_ip: Some("10.0.0.5".into()), ..Default::default() });
        assert!(!needs_sync(&pod, &status_only), "a status write without a phase change");
        let mut running = status_only;
        if let Some(s) = running.status.as_mut() {
            s.phase = Some("Running".into());
        }
        assert!(!needs_sync(&running, &running.clone()));
        let mut failed = running.clone();
        if let Some(s) = failed.status.as_mut() {
            s.phase = Some("Failed".into());
        }
        assert!(needs_sync(&running, &failed), "a phase set by someone else");
        let mut deleted = pod.clone();
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()));
        assert!(needs_sync(&pod, &deleted));
        let mut changed = pod.clone();
        if let Some(s) = changed.spec.as_mut() {
            s.active_deadline_seconds = Some(5);
        }
        assert!(needs_sync(&pod, &changed));
        let mut labelled = pod.clone();
        labelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert!(needs_sync(&pod, &labelled));
    }

    #[test]
    fn restart_policy_decides_restarts() {
        assert!(should_restart("Always", 0));
        assert!(should_restart("Always", 1));
        assert!(should_restart("OnFailure", 1));
        assert!(!should_restart("OnFailure", 0));
        assert!(!should_restart("Never", 1));
    }

    #[test]
    fn back_off_durations_print_like_go() {
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(format_duration(Duration::from_secs(300)), "5m0s");
    }

    #[test]
    fn runtime_timestamps_convert_to_past_instants() {
        let ten_s_ago = Timestamp::now().as_nanosecond() - 10_000_000_000;
        let i = instant_of(ten_s_ago as i64);
        let elapsed = i.elapsed();
        assert!(elapsed >= Duration::from_secs(9) && elapsed < Duration::from_secs(60));
    }
}
