//! The reconcile loop runner: N workers pull keys from a [`WorkQueue`], call a
//! [`Reconciler`], and turn its outcome into the key's next state in the queue.
//!
//! - `Ok(Action::AwaitChange)`: success, [`WorkQueue::forget`] the key's backoff.
//! - `Ok(Action::RequeueAfter(d))`: success, forget, and look again after `d`.
//! - `Ok(Action::RequeueRateLimited)`: look again after the rate limiter's delay.
//! - `Err(_)`: retry with [`WorkQueue::add_rate_limited`] (per-key exponential backoff), up to
//!   `max_retries` if set (the deployment controller drops a key after 15 retries, as Kubernetes
//!   does; it comes back with the next informer event or resync).
//!
//! Because the queue never hands one key to two workers, a reconcile of a key never overlaps
//! another reconcile of the same key (`processNextWorkItem` in Kubernetes' controllers).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use tokio::task::JoinSet;

use crate::api::{ApiError, is_conflict};
use crate::metrics::ControllerHandles;
use crate::workqueue::WorkQueue;

/// What to do with a key after a successful reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the next informer event for the key.
    AwaitChange,
    /// Reconcile the key again after this long (e.g. a progress-deadline check).
    RequeueAfter(Duration),
    /// Reconcile the key again after the rate limiter's delay.
    RequeueRateLimited,
}

/// Why a reconcile failed. Every variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// An API request failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// Anything else (invalid object, failed invariant), with a message.
    #[error("{0}")]
    Other(String),
}

impl ReconcileError {
    /// Whether the failure is a 409 Conflict (counted as a resourceVersion conflict).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Api(e) if is_conflict(e))
    }
}

/// Result of a reconcile.
pub type ReconcileResult = Result<Action, ReconcileError>;

/// One controller's sync function, called with a queue key (`namespace/name` or `name`).
#[async_trait]
pub trait Reconciler: Send + Sync + 'static {
    /// Brings the world in line with the object named by `key`. Must be idempotent.
    async fn reconcile(&self, key: &str) -> ReconcileResult;
}

/// Worker settings of one controller.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Controller name (logs, metrics).
    pub name: String,
    /// Concurrent workers (`--concurrent-deployment-syncs` and friends).
    pub workers: usize,
    /// Drop a key after this many consecutive failed retries (`None`: retry forever).
    pub max_retries: Option<u32>,
}

/// Pulls one key, reconciles it and settles it in the queue. Returns `false` once the queue
/// is shut down.
pub async fn process_next_work_item(
    queue: &WorkQueue<String>,
    reconciler: &dyn Reconciler,
    config: &WorkerConfig,
    metrics: &ControllerHandles,
) -> bool {
    let Some(key) = queue.get().await else {
        return false;
    };
    let started = tokio::time::Instant::now();
    // A panicking reconcile must not take the worker (and the key, stuck "processing") with it:
    // it counts as a failure and is retried with backoff.
    let result = match std::panic::AssertUnwindSafe(reconciler.reconcile(&key)).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            tracing::error!(controller = %config.name, %key, panic = %what, "reconcile panicked");
            Err(ReconcileError::Other(format!("reconcile panicked: {what}")))
        }
    };
    metrics.duration.observe(started.elapsed().as_secs_f64());
    match result {
        Ok(Action::AwaitChange) => {
            metrics.success.inc();
            queue.forget(&key);
        }
        Ok(Action::RequeueAfter(d)) => {
            metrics.requeue.inc();
            queue.forget(&key);
            queue.add_after(key.clone(), d);
        }
        Ok(Action::RequeueRateLimited) => {
            metrics.requeue.inc();
            queue.add_rate_limited(key.clone());
        }
        Err(err) => {
            metrics.error.inc();
            metrics.errors.inc();
            if err.is_conflict() {
                metrics.conflicts.inc();
            }
            let retries = queue.num_requeues(&key);
            if config.max_retries.is_some_and(|max| retries >= max) {
                tracing::warn!(controller = %config.name, %key, %err, retries, "dropping key out of the queue");
                queue.forget(&key);
            } else {
                if err.is_conflict() {
                    tracing::debug!(controller = %config.name, %key, %err, "conflict, retrying");
                } else {
                    tracing::info!(controller = %config.name, %key, %err, "error syncing, retrying");
                }
                queue.add_rate_limited(key.clone());
            }
        }
    }
    queue.done(&key);
    true
}

/// Runs `config.workers` workers until the queue is shut down.
pub async fn run_workers(
    queue: Arc<WorkQueue<String>>,
    reconciler: Arc<dyn Reconciler>,
    config: WorkerConfig,
    metrics: ControllerHandles,
) {
    let mut set = JoinSet::new();
    for _ in 0..config.workers.max(1) {
        let (queue, reconciler, config, metrics) = (queue.clone(), reconciler.clone(), config.clone(), metrics.clone());
        set.spawn(async move { while process_next_work_item(&queue, reconciler.as_ref(), &config, &metrics).await {} });
    }
    while set.join_next().await.is_some() {}
}

/// Shuts the queue down when dropped, so that the workers of a cancelled controller stop.
pub struct ShutDownOnDrop(pub Arc<WorkQueue<String>>);

impl Drop for ShutDownOnDrop {
    fn drop(&mut self) {
        self.0.shut_down();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    struct Flaky {
        calls: AtomicU32,
        fail_times: u32,
        conflict: bool,
    }

    #[async_trait]
    impl Reconciler for Flaky {
        async fn reconcile(&self, _key: &str) -> ReconcileResult {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.fail_times {
                if self.conflict {
                    return Err(ApiError::conflict("apps", "deployments", "x").into());
                }
                return Err(ReconcileError::Other("boom".into()));
            }
            Ok(Action::AwaitChange)
        }
    }

    struct Panicky;

    #[async_trait]
    impl Reconciler for Panicky {
        async fn reconcile(&self, key: &str) -> ReconcileResult {
            panic!("bug while syncing {key}");
        }
    }

    #[tokio::test]
    async fn a_panicking_reconcile_is_retried_and_the_worker_survives() {
        let q = WorkQueue::<String>::new();
        let m = ControllerHandles::default();
        q.add("k".into());
        assert!(process_next_work_item(&q, &Panicky, &cfg(None), &m).await);
        assert_eq!(m.errors.get(), 1);
        assert_eq!(q.num_requeues(&"k".to_string()), 1);
        // The key was released: it is handed out again after its backoff.
        assert!(process_next_work_item(&q, &Panicky, &cfg(None), &m).await);
        assert_eq!(m.errors.get(), 2);
    }

    fn cfg(max_retries: Option<u32>) -> WorkerConfig {
        WorkerConfig { name: "test".into(), workers: 1, max_retries }
    }

    #[tokio::test]
    async fn a_failing_key_is_retried_with_backoff_and_forgotten_on_success() {
        let m = ControllerHandles::default();
        let q = WorkQueue::<String>::new().with_metrics(m.queue.clone());
        let r = Flaky { calls: AtomicU32::new(0), fail_times: 2, conflict: true };
        q.add("ns/a".into());
        assert!(process_next_work_item(&q, &r, &cfg(None), &m).await);
        assert_eq!(q.num_requeues(&"ns/a".to_string()), 1);
        assert!(process_next_work_item(&q, &r, &cfg(None), &m).await);
        assert_eq!(q.num_requeues(&"ns/a".to_string()), 2);
        assert!(process_next_work_item(&q, &r, &cfg(None), &m).await);
        assert_eq!(q.num_requeues(&"ns/a".to_string()), 0);
        assert_eq!(m.errors.get(), 2);
        assert_eq!(m.conflicts.get(), 2);
        assert_eq!(m.success.get(), 1);
        assert_eq!(m.queue.retries.get(), 2);
    }

    #[tokio::test]
    async fn a_key_is_dropped_after_max_retries() {
        let q = WorkQueue::<String>::new();
        let r = Flaky { calls: AtomicU32::new(0), fail_times: 100, conflict: false };
        let m = ControllerHandles::default();
        q.add("k".into());
        for _ in 0..3 {
            assert!(process_next_work_item(&q, &r, &cfg(Some(2)), &m).await);
        }
        // Third failure: retries (2) reached the maximum, key forgotten and not re-added.
        assert_eq!(q.num_requeues(&"k".to_string()), 0);
        q.shut_down();
        assert!(!process_next_work_item(&q, &r, &cfg(Some(2)), &m).await);
        assert_eq!(r.calls.load(Ordering::SeqCst), 3);
    }
}
