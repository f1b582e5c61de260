//! Per-controller metrics (prometheus-client), registered once and labelled by controller.
//!
//! Names follow Kubernetes' workqueue metrics (`workqueue_depth`, `workqueue_adds_total`,
//! `workqueue_retries_total`, `workqueue_queue_duration_seconds`,
//! `workqueue_work_duration_seconds`, label `name`) and controller-runtime's reconcile metrics
//! (`controller_reconcile_total{controller,result}`, `controller_reconcile_errors_total`,
//! `controller_reconcile_duration_seconds`), plus `controller_resource_version_conflicts_total`
//! (reconciles that failed with a 409 Conflict: the "resource version conflict rate" of seed 000
//! §4.4). [`ControllerMetrics::register`] adds them all to a `Registry`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::workqueue::{QueueMetrics, workqueue_duration_histogram};

/// Label set `{controller="deployment"}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// Controller name.
    pub controller: String,
}

/// Label set `{name="deployment"}` (Kubernetes' workqueue metrics label).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// Queue name (the controller name).
    pub name: String,
}

/// Label set `{controller="deployment",result="success"}`; result is `success`, `error` or
/// `requeue`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// Controller name.
    pub controller: String,
    /// Outcome.
    pub result: String,
}

fn duration_histogram() -> Histogram {
    // 1 ms .. ~16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// All controller metric families. Cloning shares the underlying metrics.
#[derive(Clone)]
pub struct ControllerMetrics {
    reconciles: Family<ResultLabel, Counter>,
    errors: Family<ControllerLabel, Counter>,
    conflicts: Family<ControllerLabel, Counter>,
    duration: Family<ControllerLabel, Histogram, fn() -> Histogram>,
    depth: Family<QueueLabel, Gauge>,
    adds: Family<QueueLabel, Counter>,
    retries: Family<QueueLabel, Counter>,
    queue_duration: Family<QueueLabel, Histogram, fn() -> Histogram>,
    work_duration: Family<QueueLabel, Histogram, fn() -> Histogram>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            conflicts: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(workqueue_duration_histogram),
            work_duration: Family::new_with_constructor(workqueue_duration_histogram),
        }
    }
}

impl ControllerMetrics {
    /// Registers every family in `registry` (call once per registry).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_reconcile",
            "Reconciles per controller, by result (success, error, requeue)",
            self.reconciles.clone(),
        );
        registry.register("controller_reconcile_errors", "Reconciles that returned an error", self.errors.clone());
        registry.register(
            "controller_resource_version_conflicts",
            "Reconciles that failed with a 409 Conflict (stale resourceVersion)",
            self.conflicts.clone(),
        );
        registry.register("controller_reconcile_duration_seconds", "Time one reconcile took", self.duration.clone());
        registry.register("workqueue_depth", "Current depth of the work queue", self.depth.clone());
        registry.register("workqueue_adds", "Adds handled by the work queue", self.adds.clone());
        registry.register("workqueue_retries", "Rate-limited retries handled by the work queue", self.retries.clone());
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in the work queue before being requested",
            self.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from the work queue takes",
            self.work_duration.clone(),
        );
    }

    /// The handles one controller updates.
    pub fn for_controller(&self, controller: &str) -> ControllerHandles {
        let c = ControllerLabel { controller: controller.to_string() };
        let q = QueueLabel { name: controller.to_string() };
        let result = |r: &str| ResultLabel { controller: controller.to_string(), result: r.to_string() };
        // One statement per handle: a `get_or_create` guard lives until the end of its
        // statement, and a second `get_or_create` on the same family would deadlock on it.
        let success = self.reconciles.get_or_create(&result("success")).clone();
        let error = self.reconciles.get_or_create(&result("error")).clone();
        let requeue = self.reconciles.get_or_create(&result("requeue")).clone();
        let errors = self.errors.get_or_create(&c).clone();
        let conflicts = self.conflicts.get_or_create(&c).clone();
        let duration = self.duration.get_or_create(&c).clone();
        let depth = self.depth.get_or_create(&q).clone();
        let adds = self.adds.get_or_create(&q).clone();
        let retries = self.retries.get_or_create(&q).clone();
        let queue_duration = self.queue_duration.get_or_create(&q).clone();
        let work_duration = self.work_duration.get_or_create(&q).clone();
        ControllerHandles {
            success,
            error,
            requeue,
            errors,
            conflicts,
            duration,
            queue: QueueMetrics { depth, adds, retries, queue_duration, work_duration },
        }
    }
}

/// One controller's metric handles.
#[derive(Clone)]
pub struct ControllerHandles {
    /// Successful reconciles.
    pub success: Counter,
    /// Failed reconciles (reconcile total, result=error).
    pub error: Counter,
    /// Reconciles that asked to be requeued.
    pub requeue: Counter,
    /// Failed reconciles (errors total).
    pub errors: Counter,
    /// Failed reconciles whose error was a 409 Conflict.
    pub conflicts: Counter,
    /// Reconcile durations.
    pub duration: Histogram,
    /// The controller's queue metrics.
    pub queue: QueueMetrics,
}

impl Default for ControllerHandles {
    fn default() -> Self {
        ControllerMetrics::default().for_controller("unregistered")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_metrics_appear_in_the_text_exposition() {
        let metrics = ControllerMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let h = metrics.for_controller("deployment");
        h.success.inc();
        h.conflicts.inc();
        h.duration.observe(0.01);
        h.queue.depth.set(3);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(out.contains("controller_reconcile_total{controller=\"deployment\",result=\"success\"} 1"), "{out}");
        assert!(out.contains("controller_resource_version_conflicts_total{controller=\"deployment\"} 1"), "{out}");
        assert!(out.contains("workqueue_depth{name=\"deployment\"} 3"), "{out}");
        assert!(out.contains("controller_reconcile_duration_seconds_count{controller=\"deployment\"} 1"), "{out}");
        assert!(out.contains("workqueue_work_duration_seconds_count{name=\"deployment\"} 0"), "{out}");
    }
}
