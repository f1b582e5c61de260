//! Pod workers (the kubelet's `pod_workers.go`): one task per pod bound to this node, handed
//! each new version of its pod and running SyncPod ([`crate::kuberuntime::manager`]) until the
//! pod is gone; the PLEG ([`crate::pleg`]) wakes a worker when its pod's runtime state changes,
//! and housekeeping removes what the runtime still holds of pods without a worker.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::cri::{CriClient, ImageService, RuntimeService, api};
use crate::host::PodHost;
use crate::kuberuntime::manager::{
    FAST_RESYNC, PodSyncState, RuntimeManager, kill_runtime_pod, pod_desc, remove_runtime_pod, sync_pod, terminate,
};
use crate::kuberuntime::{self, PodRuntimeConfig};
use crate::pleg::{self, GenericPleg};
use crate::volumes;

/// How often orphaned sandboxes and pod directories are cleaned up.
const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(10);

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
    /// SyncPod and the CRI, shared by every worker.
    manager: RuntimeManager,
    workers: Mutex<HashMap<String, Worker>>,
    synced: Notify,
    synced_flag: std::sync::atomic::AtomicBool,
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
        PodWorkers {
            inner: Arc::new(Inner {
                manager: RuntimeManager::new(runtime, images, host, cfg),
                workers: Mutex::new(HashMap::new()),
                synced: Notify::new(),
                synced_flag: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &PodRuntimeConfig {
        &self.inner.manager.cfg
    }

    /// The CRI runtime service in use (exec, attach, port-forward).
    pub fn runtime(&self) -> &dyn RuntimeService {
        self.inner.manager.runtime.as_ref()
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

    /// Relists the runtime every [`pleg::RELIST_PERIOD`] and wakes the workers of pods whose
    /// sandboxes or containers changed state.
    pub async fn run_pleg(&self) {
        let mut pleg = GenericPleg::new(Arc::clone(&self.inner.manager.runtime));
        let mut tick = tokio::time::interval(pleg::RELIST_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let changed = match pleg.relist().await {
                Ok(changed) => changed,
                Err(e) => {
                    tracing::warn!(error = %e, "PLEG relist failed");
                    continue;
                }
            };
            let workers = self.inner.workers.lock();
            for uid in &changed {
                if let Some(w) = workers.get(uid) {
                    w.wake.notify_one();
                }
            }
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
        let runtime_uids = kuberuntime::runtime_pod_uids(self.inner.manager.runtime.as_ref()).await?;
        for uid in runtime_uids.difference(&live) {
            tracing::info!(pod_uid = %uid, "removing orphaned pod from the runtime");
            let rt = kuberuntime::runtime_pod(self.inner.manager.runtime.as_ref(), uid).await?;
            kill_runtime_pod(&self.inner.manager, None, &rt, 30).await;
            remove_runtime_pod(&self.inner.manager, &rt).await;
            volumes::cleanup_pod_dir(&self.inner.manager.cfg.root_dir, uid);
            crate::cgroups::remove_pod_cgroups(&self.inner.manager.cfg.cgroup_root, uid);
        }
        if let Ok(entries) = std::fs::read_dir(self.inner.manager.cfg.root_dir.join("pods")) {
            for e in entries.flatten() {
                let uid = e.file_name().to_string_lossy().into_owned();
                if !live.contains(&uid) && !runtime_uids.contains(&uid) {
                    volumes::cleanup_pod_dir(&self.inner.manager.cfg.root_dir, &uid);
                }
            }
        }
        self.inner.manager.gc_backoff(Instant::now());
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
        let rt = kuberuntime::runtime_pod(self.inner.manager.runtime.as_ref(), &uid).await?;
        let c = if previous { rt.previous(container) } else { rt.latest(container) };
        Ok(c.map(|c| {
            self.inner.manager.cfg.pod_log_dir(pod).join(kuberuntime::container_log_path(container, c.attempt))
        }))
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
        let rt = kuberuntime::runtime_pod(self.inner.manager.runtime.as_ref(), uid).await?;
        Ok(rt.latest(container).filter(|c| c.state == api::ContainerState::ContainerRunning).map(|c| c.id.clone()))
    }

    /// The runtime id of the newest ready sandbox of pod `uid` (the target of port forwarding).
    ///
    /// # Errors
    /// [`crate::cri::CriError`] when the runtime cannot be queried.
    pub async fn ready_sandbox_id(&self, uid: &str) -> Result<Option<String>, crate::cri::CriError> {
        let rt = kuberuntime::runtime_pod(self.inner.manager.runtime.as_ref(), uid).await?;
        Ok(rt.sandboxes.iter().find(|s| s.ready).map(|s| s.id.clone()))
    }
}

async fn run_worker(inner: Arc<Inner>, uid: String, mut updates: watch::Receiver<PodUpdate>, wake: Arc<Notify>) {
    let mut st = PodSyncState::new(uid.clone(), Arc::clone(&wake));
    loop {
        let update = updates.borrow_and_update().clone();
        let next = match update {
            PodUpdate::Removed(pod) => {
                terminate(&inner.manager, &mut st, &pod, false).await;
                break;
            }
            PodUpdate::Sync(pod) if pod.metadata.deletion_timestamp.is_some() => {
                if terminate(&inner.manager, &mut st, &pod, true).await {
                    break;
                }
                FAST_RESYNC
            }
            PodUpdate::Sync(pod) => match sync_pod(&inner.manager, &mut st, &pod).await {
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

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

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
}
