//! The scheduler's Prometheus metrics, with kube-scheduler's names, labels and units
//! (<https://kubernetes.io/docs/reference/instrumentation/metrics/>, `pkg/scheduler/metrics`).
//!
//! | family | type | labels | unit / meaning |
//! |---|---|---|---|
//! | `scheduler_schedule_attempts_total` | counter | `result` (`scheduled`, `unschedulable`, `error`), `profile` | scheduling attempts |
//! | `scheduler_scheduling_attempt_duration_seconds` | histogram | `result`, `profile` | seconds from the pod's pop to the end of its attempt (binding included when scheduled) |
//! | `scheduler_pending_pods` | gauge | `queue` (`active`, `backoff`, `unschedulable`, `gated`) | pods waiting, read from the queue at scrape time |
//! | `scheduler_pod_scheduling_sli_duration_seconds` | histogram | `attempts` | seconds from the pod's first pop to its successful binding, over all its attempts |
//! | `scheduler_pod_scheduling_attempts` | histogram | — | attempts a pod needed until it was bound |
//! | `scheduler_preemption_attempts_total` | counter | — | preemption attempts (DefaultPreemption looked for victims) |
//! | `scheduler_preemption_victims` | histogram | — | pods evicted by one successful preemption |
//! | `scheduler_framework_extension_point_duration_seconds` | histogram | `extension_point`, `status`, `profile` | seconds one extension point took in one cycle (`Filter`: the whole parallel filtering of the cycle) |
//!
//! Every handle is cheap to clone (shared atomics). Hot paths use pre-resolved handles
//! ([`ProfileMetrics`]) so recording is a few atomic adds, never a label hash.

use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::status::Code;

/// Label set `{result,profile}` of the attempt metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// `scheduled`, `unschedulable` or `error`.
    pub result: String,
    /// The profile (`schedulerName`).
    pub profile: String,
}

/// Label set `{extension_point,status,profile}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExtensionPointLabels {
    /// `PreFilter`, `Filter`, `PostFilter`, `PreScore`, `Score`, `Reserve`, `Unreserve`, `Permit`,
    /// `PreBind`, `Bind`, `PostBind`.
    pub extension_point: String,
    /// The status code of the extension point (`Success`, `Unschedulable`, ...).
    pub status: String,
    /// The profile.
    pub profile: String,
}

/// Label set `{attempts}` of the SLI histogram (attempts as a decimal, `15+` beyond 15).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptsLabel {
    /// Attempts the pod needed.
    pub attempts: String,
}

/// An extension point timed by `scheduler_framework_extension_point_duration_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtensionPoint {
    /// PreFilter.
    PreFilter,
    /// The whole Filter phase of a cycle (all evaluated nodes, in parallel).
    Filter,
    /// PostFilter (preemption).
    PostFilter,
    /// PreScore.
    PreScore,
    /// Score, normalization and weighting.
    Score,
    /// Reserve.
    Reserve,
    /// Unreserve.
    Unreserve,
    /// Permit.
    Permit,
    /// PreBind.
    PreBind,
    /// Bind.
    Bind,
    /// PostBind.
    PostBind,
}

const EXTENSION_POINTS: usize = 11;
const CODES: usize = 6;

impl ExtensionPoint {
    /// The label value (Kubernetes' extension point name).
    pub fn as_str(self) -> &'static str {
        match self {
            ExtensionPoint::PreFilter => "PreFilter",
            ExtensionPoint::Filter => "Filter",
            ExtensionPoint::PostFilter => "PostFilter",
            ExtensionPoint::PreScore => "PreScore",
            ExtensionPoint::Score => "Score",
            ExtensionPoint::Reserve => "Reserve",
            ExtensionPoint::Unreserve => "Unreserve",
            ExtensionPoint::Permit => "Permit",
            ExtensionPoint::PreBind => "PreBind",
            ExtensionPoint::Bind => "Bind",
            ExtensionPoint::PostBind => "PostBind",
        }
    }
}

fn code_index(c: Code) -> usize {
    match c {
        Code::Success => 0,
        Code::Error => 1,
        Code::Unschedulable => 2,
        Code::UnschedulableAndUnresolvable => 3,
        Code::Wait => 4,
        Code::Skip => 5,
    }
}

/// Outcome of one scheduling attempt, the `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    /// The pod was bound.
    Scheduled,
    /// No node fits (or a plugin rejected the pod after a node was chosen).
    Unschedulable,
    /// An internal error.
    Error,
}

impl AttemptResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptResult::Scheduled => "scheduled",
            AttemptResult::Unschedulable => "unschedulable",
            AttemptResult::Error => "error",
        }
    }

    /// The result for a failed attempt's status code.
    pub fn of_failure(code: Code) -> Self {
        if matches!(code, Code::Unschedulable | Code::UnschedulableAndUnresolvable) {
            AttemptResult::Unschedulable
        } else {
            AttemptResult::Error
        }
    }
}

/// Pending pods per sub-queue, as the `scheduler_pending_pods` gauge reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingPods {
    /// In activeQ.
    pub active: usize,
    /// In backoffQ.
    pub backoff: usize,
    /// Parked as unschedulable (gated pods excluded).
    pub unschedulable: usize,
    /// Held by a PreEnqueue plugin (scheduling gates).
    pub gated: usize,
}

/// Something that can count pending pods at scrape time (the scheduling queue).
pub trait PendingPodsSource: Send + Sync {
    /// The current counts.
    fn pending_pods(&self) -> PendingPods;
}

/// Encodes `scheduler_pending_pods` on each scrape from the attached queue (zeros when none).
#[derive(Clone, Default)]
struct PendingPodsCollector(Arc<Mutex<Option<Weak<dyn PendingPodsSource>>>>);

impl std::fmt::Debug for PendingPodsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingPodsCollector")
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: &'static str,
}

impl Collector for PendingPodsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let source = self.0.lock().as_ref().and_then(Weak::upgrade);
        let p = source.map(|s| s.pending_pods()).unwrap_or_default();
        let mut family = encoder.encode_descriptor(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            None,
            MetricType::Gauge,
        )?;
        for (queue, n) in
            [("active", p.active), ("backoff", p.backoff), ("unschedulable", p.unschedulable), ("gated", p.gated)]
        {
            let labels = QueueLabel { queue };
            ConstGauge::new(n as i64).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

fn attempt_duration_histogram() -> Histogram {
    // 1 ms .. ~16 s (kube-scheduler: ExponentialBuckets(0.001, 2, 15)).
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn sli_histogram() -> Histogram {
    // 10 ms .. ~1.5 h (kube-scheduler: ExponentialBuckets(0.01, 2, 20)).
    Histogram::new(exponential_buckets(0.01, 2.0, 20))
}

fn extension_point_histogram() -> Histogram {
    // 0.1 ms .. ~0.2 s (kube-scheduler: ExponentialBuckets(0.0001, 2, 12)).
    Histogram::new(exponential_buckets(0.0001, 2.0, 12))
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every scheduler metric family. Cloning shares the metrics; [`SchedulerMetrics::register`]
/// adds them to a registry (the API server's, so they appear on its `/metrics`).
#[derive(Clone)]
pub struct SchedulerMetrics {
    schedule_attempts: Family<AttemptLabels, Counter>,
    attempt_duration: HistogramFamily<AttemptLabels>,
    sli_duration: HistogramFamily<AttemptsLabel>,
    pod_scheduling_attempts: Histogram,
    preemption_attempts: Counter,
    preemption_victims: Histogram,
    extension_point_duration: HistogramFamily<ExtensionPointLabels>,
    pending: PendingPodsCollector,
}

impl Default for SchedulerMetrics {
    fn default() -> Self {
        Self {
            schedule_attempts: Family::default(),
            attempt_duration: Family::new_with_constructor(attempt_duration_histogram),
            sli_duration: Family::new_with_constructor(sli_histogram),
            pod_scheduling_attempts: Histogram::new(exponential_buckets(1.0, 2.0, 5)),
            preemption_attempts: Counter::default(),
            preemption_victims: Histogram::new(exponential_buckets(1.0, 2.0, 7)),
            extension_point_duration: Family::new_with_constructor(extension_point_histogram),
            pending: PendingPodsCollector::default(),
        }
    }
}

impl std::fmt::Debug for SchedulerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SchedulerMetrics")
    }
}

impl SchedulerMetrics {
    /// Registers every family in `registry` (once per registry). Counter names get `_total`
    /// appended by the encoder.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            self.schedule_attempts.clone(),
        );
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            self.attempt_duration.clone(),
        );
        registry.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.",
            self.sli_duration.clone(),
        );
        registry.register(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            self.pod_scheduling_attempts.clone(),
        );
        registry.register(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            self.preemption_attempts.clone(),
        );
        registry.register(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            self.preemption_victims.clone(),
        );
        registry.register(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            self.extension_point_duration.clone(),
        );
        registry.register_collector(Box::new(self.pending.clone()));
    }

    /// Makes `scheduler_pending_pods` read `source` on each scrape (replacing an earlier source).
    /// Only a weak reference is kept.
    pub fn set_pending_pods_source(&self, source: Weak<dyn PendingPodsSource>) {
        *self.pending.0.lock() = Some(source);
    }

    /// Records one finished attempt of `profile` that took `seconds`.
    pub fn observe_attempt(&self, profile: &str, result: AttemptResult, seconds: f64) {
        let labels = AttemptLabels { result: result.as_str().to_string(), profile: profile.to_string() };
        self.schedule_attempts.get_or_create(&labels).inc();
        self.attempt_duration.get_or_create(&labels).observe(seconds);
    }

    /// Records a pod bound after `attempts` attempts, `seconds` after its first attempt started.
    pub fn observe_pod_scheduled(&self, attempts: u32, seconds: f64) {
        let label = if attempts >= 15 { "15+".to_string() } else { attempts.to_string() };
        self.sli_duration.get_or_create(&AttemptsLabel { attempts: label }).observe(seconds);
        self.pod_scheduling_attempts.observe(f64::from(attempts));
    }

    /// Counts a preemption attempt.
    pub fn inc_preemption_attempts(&self) {
        self.preemption_attempts.inc();
    }

    /// Records the victims of a successful preemption.
    pub fn observe_preemption_victims(&self, victims: usize) {
        self.preemption_victims.observe(victims as f64);
    }

    /// Pre-resolved handles for one profile's hot paths.
    pub fn for_profile(&self, profile: &str) -> ProfileMetrics {
        ProfileMetrics {
            inner: Arc::new(ProfileInner {
                profile: profile.to_string(),
                family: self.extension_point_duration.clone(),
                slots: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
            }),
        }
    }
}

struct ProfileInner {
    profile: String,
    family: HistogramFamily<ExtensionPointLabels>,
    slots: [[OnceLock<Histogram>; CODES]; EXTENSION_POINTS],
}

/// One profile's `scheduler_framework_extension_point_duration_seconds` handles, resolved on
/// first use per (extension point, status) so recording costs one histogram observation.
#[derive(Clone)]
pub struct ProfileMetrics {
    inner: Arc<ProfileInner>,
}

impl std::fmt::Debug for ProfileMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileMetrics").field("profile", &self.inner.profile).finish()
    }
}

impl ProfileMetrics {
    /// Records that `point` ended with `code` after `seconds`.
    pub fn observe_extension_point(&self, point: ExtensionPoint, code: Code, seconds: f64) {
        let slot = &self.inner.slots[point as usize][code_index(code)];
        slot.get_or_init(|| {
            let labels = ExtensionPointLabels {
                extension_point: point.as_str().to_string(),
                status: code.as_str().to_string(),
                profile: self.inner.profile.clone(),
            };
            self.inner.family.get_or_create(&labels).clone()
        })
        .observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    struct Fixed(PendingPods);
    impl PendingPodsSource for Fixed {
        fn pending_pods(&self) -> PendingPods {
            self.0
        }
    }

    fn exposition(registry: &Registry) -> String {
        let mut out = String::new();
        encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn registry_output_has_kubernetes_names_labels_and_values() {
        let m = SchedulerMetrics::default();
        let mut registry = Registry::default();
        m.register(&mut registry);
        let source: Arc<dyn PendingPodsSource> =
            Arc::new(Fixed(PendingPods { active: 3, backoff: 2, unschedulable: 1, gated: 4 }));
        m.set_pending_pods_source(Arc::downgrade(&source));
        m.observe_attempt("default-scheduler", AttemptResult::Scheduled, 0.002);
        m.observe_attempt("default-scheduler", AttemptResult::Scheduled, 0.003);
        m.observe_attempt("default-scheduler", AttemptResult::Unschedulable, 0.5);
        m.observe_pod_scheduled(2, 1.5);
        m.inc_preemption_attempts();
        m.observe_preemption_victims(3);
        let p = m.for_profile("default-scheduler");
        p.observe_extension_point(ExtensionPoint::PreFilter, Code::Success, 0.0001);
        p.observe_extension_point(ExtensionPoint::PreFilter, Code::Success, 0.0002);
        p.observe_extension_point(ExtensionPoint::Filter, Code::Unschedulable, 0.01);
        let text = exposition(&registry);
        for line in [
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="default-scheduler"} 2"#,
            r#"scheduler_schedule_attempts_total{result="unschedulable",profile="default-scheduler"} 1"#,
            r#"scheduler_scheduling_attempt_duration_seconds_count{result="scheduled",profile="default-scheduler"} 2"#,
            r#"scheduler_scheduling_attempt_duration_seconds_sum{result="unschedulable",profile="default-scheduler"} 0.5"#,
            r#"scheduler_pod_scheduling_sli_duration_seconds_count{attempts="2"} 1"#,
            r#"scheduler_pod_scheduling_attempts_count 1"#,
            r#"scheduler_preemption_attempts_total 1"#,
            r#"scheduler_preemption_victims_sum 3.0"#,
            r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="PreFilter",status="Success",profile="default-scheduler"} 2"#,
            r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",status="Unschedulable",profile="default-scheduler"} 1"#,
            r#"scheduler_pending_pods{queue="active"} 3"#,
            r#"scheduler_pending_pods{queue="backoff"} 2"#,
            r#"scheduler_pending_pods{queue="unschedulable"} 1"#,
            r#"scheduler_pending_pods{queue="gated"} 4"#,
            "# TYPE scheduler_pending_pods gauge",
            "# TYPE scheduler_scheduling_attempt_duration_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing from:\n{text}");
        }
    }

    #[test]
    fn pending_pods_are_zero_once_the_queue_is_gone() {
        let m = SchedulerMetrics::default();
        let mut registry = Registry::default();
        m.register(&mut registry);
        let source: Arc<dyn PendingPodsSource> =
            Arc::new(Fixed(PendingPods { active: 7, backoff: 0, unschedulable: 0, gated: 0 }));
        m.set_pending_pods_source(Arc::downgrade(&source));
        assert!(exposition(&registry).contains(r#"scheduler_pending_pods{queue="active"} 7"#));
        drop(source);
        assert!(exposition(&registry).contains(r#"scheduler_pending_pods{queue="active"} 0"#));
    }

    #[test]
    fn fifteen_or_more_attempts_share_one_sli_label() {
        let m = SchedulerMetrics::default();
        let mut registry = Registry::default();
        m.register(&mut registry);
        m.observe_pod_scheduled(15, 1.0);
        m.observe_pod_scheduled(40, 1.0);
        assert!(
            exposition(&registry).contains(r#"scheduler_pod_scheduling_sli_duration_seconds_count{attempts="15+"} 2"#)
        );
    }
}
