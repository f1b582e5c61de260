//! The horizontal pod autoscaler (`pkg/controller/podautoscaler/horizontal.go`, Kubernetes
//! 1.33): every sync period (15 s) each HorizontalPodAutoscaler's target scale is read, a
//! replica count computed from its metrics and written back through the target's `scale`
//! subresource.
//!
//! One sync of an HPA (`reconcileAutoscaler`):
//! 1. The target's Scale through [`scale::ScaleClient`] (`AbleToScale` False `FailedGetScale` on
//!    failure).
//! 2. A target at 0 replicas is left alone (`ScalingActive` False `ScalingDisabled`); above
//!    `maxReplicas` or below `minReplicas` it is brought into range.
//! 3. Otherwise each metric proposes a count ([`replica_calculator`]; Resource and
//!    ContainerResource metrics, Utilization and AverageValue, from [`metrics::MetricsClient`] —
//!    Pods, Object and External metrics need the custom/external metrics APIs skiff does not
//!    serve and fail as Kubernetes does without them); the highest wins (`ScalingActive` True
//!    `ValidMetricFound`, or False with the first failure's reason).
//! 4. The proposal is stabilized and rate limited ([`normalize`]): without `spec.behavior` the
//!    highest recommendation of the downscale window (5 min) and at most ×2 / +4 per sync; with
//!    it, both directions' windows and policies (`AbleToScale` `ScaleUpStabilized` /
//!    `ScaleDownStabilized` / `ReadyForNewScale`, `ScalingLimited` with the limiting reason).
//! 5. A changed count is written to the Scale (`SuccessfulRescale` / `FailedRescale` events),
//!    and the status (current/desired replicas, current metrics, `lastScaleTime`, conditions)
//!    is written when it changed.
//!
//! Every key is looked at again one sync period after its last sync, whatever happened, as the
//! upstream queue's fixed-interval rate limiter does.

pub mod metrics;
pub mod normalize;
pub mod replica_calculator;
pub mod scale;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, HPAScalingRules, HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition,
    HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus, MetricValueStatus, ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use serde_json::Value;
use skiff_apimachinery::LabelSelector;

use self::metrics::MetricsClient;
use self::normalize::{NormalizationArg, Recommendation, ScaleEvent};
use self::replica_calculator::ReplicaCalculator;
use self::scale::ScaleClient;
use crate::util::{Clock, labels_of, system_clock, time};
use skiff_runtime::api::{ApiClient, ApiClientExt};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, EventRecorder};
use skiff_runtime::informer::{Informer, ResourceEventHandler, SharedInformerFactory, key_of, split_key};
use skiff_runtime::workqueue::WorkQueue;

/// `--horizontal-pod-autoscaler-sync-period`.
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(15);
/// `--horizontal-pod-autoscaler-downscale-stabilization`.
pub const DEFAULT_DOWNSCALE_STABILIZATION: Duration = Duration::from_secs(5 * 60);

/// Settings (kube-controller-manager's `--horizontal-pod-autoscaler-*` flags).
#[derive(Debug, Clone, Copy)]
pub struct HpaConfig {
    /// How often each HPA is synced (15 s).
    pub sync_period: Duration,
    /// The scale-down stabilization window of HPAs without one in `spec.behavior` (5 min).
    pub downscale_stabilization: Duration,
    /// Tolerance, cpu initialization period and initial readiness delay.
    pub calculator: ReplicaCalculator,
}

impl Default for HpaConfig {
    fn default() -> Self {
        Self {
            sync_period: DEFAULT_SYNC_PERIOD,
            downscale_stabilization: DEFAULT_DOWNSCALE_STABILIZATION,
            calculator: ReplicaCalculator::default(),
        }
    }
}

/// Per-HPA memory of the controller: recent recommendations and scale events.
#[derive(Debug, Default)]
struct History {
    recommendations: Vec<Recommendation>,
    scale_up: Vec<ScaleEvent>,
    scale_down: Vec<ScaleEvent>,
}

/// The horizontal pod autoscaler controller.
pub struct HorizontalController {
    api: Arc<dyn ApiClient>,
    scales: Arc<dyn ScaleClient>,
    metrics: Arc<dyn MetricsClient>,
    hpas: Arc<Informer<HorizontalPodAutoscaler>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<WorkQueue<String>>,
    recorder: EventRecorder,
    config: HpaConfig,
    clock: Clock,
    history: Mutex<HashMap<String, History>>,
}

struct Handlers {
    queue: Arc<WorkQueue<String>>,
}

impl ResourceEventHandler<HorizontalPodAutoscaler> for Handlers {
    fn on_add(&self, hpa: &Arc<HorizontalPodAutoscaler>) {
        self.queue.add(key_of(hpa.as_ref()));
    }

    fn on_update(&self, old: &Arc<HorizontalPodAutoscaler>, cur: &Arc<HorizontalPodAutoscaler>) {
        // Status writes (the controller's own) wait for the next period; spec changes do not.
        if old.spec != cur.spec {
            self.queue.add(key_of(cur.as_ref()));
        }
    }

    fn on_delete(&self, hpa: &Arc<HorizontalPodAutoscaler>) {
        self.queue.add(key_of(hpa.as_ref()));
    }
}

/// A condition (reason, message) of one type and status to set.
struct Cond {
    type_: &'static str,
    status: &'static str,
    reason: String,
    message: String,
}

fn cond(type_: &'static str, status: &'static str, reason: &str, message: impl Into<String>) -> Cond {
    Cond { type_, status, reason: reason.to_string(), message: message.into() }
}

/// `setConditionInList`: the transition time changes only with the status.
fn set_condition(status: &mut HorizontalPodAutoscalerStatus, c: Cond, now: Timestamp) {
    let list = status.conditions.get_or_insert_with(Vec::new);
    let i = match list.iter().position(|x| x.type_ == c.type_) {
        Some(i) => i,
        None => {
            list.push(HorizontalPodAutoscalerCondition { type_: c.type_.to_string(), ..Default::default() });
            list.len() - 1
        }
    };
    let existing = &mut list[i];
    if existing.status != c.status {
        existing.last_transition_time = Some(time(now));
    }
    existing.status = c.status.to_string();
    existing.reason = Some(c.reason);
    existing.message = Some(c.message);
}

/// `NewMilliQuantity(v, DecimalSI)`.
fn milli_quantity(v: i64) -> Quantity {
    Quantity(skiff_apimachinery::quantity::Quantity { milli: i128::from(v), binary: false }.to_string())
}

/// A metric's proposal (`computeReplicasForMetric`'s results).
struct Proposal {
    replicas: i32,
    metric: String,
    status: MetricStatus,
}

impl HorizontalController {
    /// Creates the controller on the factory's HPA and pod informers.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
        scales: Arc<dyn ScaleClient>,
        metrics: Arc<dyn MetricsClient>,
        config: HpaConfig,
    ) -> Arc<Self> {
        let hpas = factory.informer::<HorizontalPodAutoscaler>();
        let pods = factory.informer::<Pod>();
        hpas.add_event_handler(Arc::new(Handlers { queue: queue.clone() }));
        Arc::new(Self {
            api,
            scales,
            metrics,
            hpas,
            pods,
            queue,
            recorder,
            config,
            clock: system_clock(),
            history: Mutex::new(HashMap::new()),
        })
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self: Arc<Self>, clock: Clock) -> Arc<Self> {
        if let Some(me) = Arc::get_mut(&mut self) {
            me.clock = clock;
        }
        self
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    fn event(&self, hpa: &HorizontalPodAutoscaler, type_: &str, reason: &str, message: &str) {
        self.recorder.event_for(hpa, type_, reason, message);
    }

    /// Writes the status when it differs from `old` (`updateStatusIfNeeded`).
    async fn update_status_if_needed(
        &self,
        old: Option<&HorizontalPodAutoscalerStatus>,
        hpa: &HorizontalPodAutoscaler,
    ) -> Result<(), String> {
        if old == hpa.status.as_ref() {
            return Ok(());
        }
        if let Err(e) = self.api.update_status_typed(hpa).await {
            self.event(hpa, EVENT_TYPE_WARNING, "FailedUpdateStatus", &e.message);
            return Err(format!("failed to update status for {}: {}", name_of(hpa), e.message));
        }
        Ok(())
    }

    /// The pods of the namespace matching `selector`.
    fn pods_for(&self, ns: &str, selector: &LabelSelector) -> Vec<Arc<Pod>> {
        self.pods.store().list_namespace(ns).into_iter().filter(|p| selector.matches(&labels_of(&p.metadata))).collect()
    }

    /// `computeStatusForResourceMetricGeneric` (+ the container variant).
    #[allow(clippy::too_many_arguments)]
    async fn resource_proposal(
        &self,
        current: i32,
        name: &str,
        target: &k8s_openapi::api::autoscaling::v2::MetricTarget,
        container: Option<&str>,
        ns: &str,
        selector: &str,
        pods: &[Arc<Pod>],
        now: Timestamp,
    ) -> Result<Proposal, String> {
        let scope = if container.is_some() { "container resource" } else { "resource" };
        let status = |current: MetricValueStatus| match container {
            Some(c) => MetricStatus {
                type_: "ContainerResource".into(),
                container_resource: Some(ContainerResourceMetricStatus {
                    name: name.to_string(),
                    container: c.to_string(),
                    current,
                }),
                ..Default::default()
            },
            None => MetricStatus {
                type_: "Resource".into(),
                resource: Some(ResourceMetricStatus { name: name.to_string(), current }),
                ..Default::default()
            },
        };
        if let Some(avg) = &target.average_value {
            let target_milli = skiff_apimachinery::quantity::milli_value(avg).map_err(|e| e.to_string())?;
            let (metrics, _) =
                self.metrics.get_resource_metric(name, ns, selector, container).await.map_err(|e| {
                    format!("failed to get {name} usage: unable to get metrics for resource {name}: {e}")
                })?;
            let (replicas, usage) = self
                .config
                .calculator
                .get_raw_resource_replicas(current, target_milli, name, pods, metrics, now)
                .map_err(|e| format!("failed to get {name} usage: {e}"))?;
            return Ok(Proposal {
                replicas,
                metric: format!("{name} {scope}"),
                status: status(MetricValueStatus { average_value: Some(milli_quantity(usage)), ..Default::default() }),
            });
        }
        let Some(utilization) = target.average_utilization else {
            return Err(format!(
                "invalid {scope} metric source: neither an average utilization target nor an average value (usage) target was set"
            ));
        };
        let (metrics, _) =
            self.metrics.get_resource_metric(name, ns, selector, container).await.map_err(|e| {
                format!("failed to get {name} utilization: unable to get metrics for resource {name}: {e}")
            })?;
        let p = self
            .config
            .calculator
            .get_resource_replicas(current, utilization, name, pods, metrics, container, now)
            .map_err(|e| format!("failed to get {name} utilization: {e}"))?;
        Ok(Proposal {
            replicas: p.replicas,
            metric: format!("{name} {scope} utilization (percentage of request)"),
            status: status(MetricValueStatus {
                average_utilization: Some(p.utilization),
                average_value: Some(milli_quantity(p.raw_average)),
                ..Default::default()
            }),
        })
    }

    /// `computeReplicasForMetric`: one metric's proposal, or the reason and error of its failure.
    async fn metric_proposal(
        &self,
        spec: &MetricSpec,
        current: i32,
        ns: &str,
        selector: &str,
        pods: &[Arc<Pod>],
        now: Timestamp,
    ) -> Result<Proposal, (&'static str, String)> {
        match spec.type_.as_str() {
            "Resource" => {
                let Some(r) = &spec.resource else {
                    return Err(("FailedGetResourceMetric", "invalid resource metric source: no resource set".into()));
                };
                self.resource_proposal(current, &r.name, &r.target, None, ns, selector, pods, now)
                    .await
                    .map_err(|e| ("FailedGetResourceMetric", e))
            }
            "ContainerResource" => {
                let Some(r) = &spec.container_resource else {
                    return Err((
                        "FailedGetContainerResourceMetric",
                        "invalid container resource metric source: no container resource set".into(),
                    ));
                };
                self.resource_proposal(current, &r.name, &r.target, Some(&r.container), ns, selector, pods, now)
                    .await
                    .map_err(|e| ("FailedGetContainerResourceMetric", e))
            }
            "Pods" => {
                let name = spec.pods.as_ref().map(|p| p.metric.name.as_str()).unwrap_or_default();
                Err((
                    "FailedGetPodsMetric",
                    format!("unable to get metric {name}: no custom metrics API (custom.metrics.k8s.io) registered"),
                ))
            }
            "Object" => {
                let name = spec.object.as_ref().map(|p| p.metric.name.as_str()).unwrap_or_default();
                Err((
                    "FailedGetObjectMetric",
                    format!("unable to get metric {name}: no custom metrics API (custom.metrics.k8s.io) registered"),
                ))
            }
            "External" => {
                let name = spec.external.as_ref().map(|p| p.metric.name.as_str()).unwrap_or_default();
                Err((
                    "FailedGetExternalMetric",
                    format!(
                        "unable to get external metric {name}: no external metrics API (external.metrics.k8s.io) registered"
                    ),
                ))
            }
            other => Err(("InvalidMetricSourceType", format!("unknown metric source type {other:?}"))),
        }
    }

    /// `computeReplicasForMetrics`: the highest proposal over all metrics. `Err` carries the
    /// statuses computed so far and the error when no usable count came out (-1 upstream).
    async fn compute_replicas_for_metrics(
        &self,
        hpa: &mut HorizontalPodAutoscaler,
        scale: &Value,
        now: Timestamp,
    ) -> Result<(i32, String, Vec<MetricStatus>, Option<String>), (Vec<MetricStatus>, String)> {
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let selector = scale.pointer("/status/selector").and_then(Value::as_str).unwrap_or("").to_string();
        if selector.is_empty() {
            let msg = "selector is required";
            self.event(hpa, EVENT_TYPE_WARNING, "SelectorRequired", msg);
            let status = hpa.status.get_or_insert_with(Default::default);
            set_condition(
                status,
                cond("ScalingActive", "False", "InvalidSelector", "the HPA target's scale is missing a selector"),
                now,
            );
            return Err((Vec::new(), msg.to_string()));
        }
        let parsed = match LabelSelector::parse(&selector) {
            Ok(s) => s,
            Err(e) => {
                let msg = format!("couldn't convert selector into a corresponding internal selector object: {e}");
                self.event(hpa, EVENT_TYPE_WARNING, "InvalidSelector", &msg);
                let status = hpa.status.get_or_insert_with(Default::default);
                set_condition(
                    status,
                    cond(
                        "ScalingActive",
                        "False",
                        "InvalidSelector",
                        format!("the HPA controller was unable to convert the target's selector: {e}"),
                    ),
                    now,
                );
                return Err((Vec::new(), msg));
            }
        };
        let pods = self.pods_for(&ns, &parsed);
        let spec_replicas = scale.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0) as i32;
        let specs = hpa.spec.as_ref().and_then(|s| s.metrics.clone()).unwrap_or_default();
        let mut statuses = vec![MetricStatus::default(); specs.len()];
        let (mut replicas, mut metric, mut invalid) = (0i32, String::new(), 0usize);
        let mut first_failure: Option<(&'static str, String)> = None;
        for (i, spec) in specs.iter().enumerate() {
            match self.metric_proposal(spec, spec_replicas, &ns, &selector, &pods, now).await {
                Ok(p) => {
                    statuses[i] = p.status;
                    if replicas == 0 || p.replicas > replicas {
                        replicas = p.replicas;
                        metric = p.metric;
                    }
                }
                Err((reason, err)) => {
                    // `getUnableComputeReplicaCountCondition`: an event per failed metric.
                    self.event(hpa, EVENT_TYPE_WARNING, reason, &err);
                    if first_failure.is_none() {
                        first_failure = Some((reason, err));
                    }
                    invalid += 1;
                }
            }
        }
        if invalid > 0 && (invalid >= specs.len() || replicas < spec_replicas) {
            let (reason, err) = first_failure.unwrap_or(("InvalidMetricSourceType", "no metrics".into()));
            let status = hpa.status.get_or_insert_with(Default::default);
            set_condition(
                status,
                cond(
                    "ScalingActive",
                    "False",
                    reason,
                    format!("the HPA was unable to compute the replica count: {err}"),
                ),
                now,
            );
            return Err((statuses, err));
        }
        if specs.is_empty() {
            let msg = "no metrics".to_string();
            return Err((statuses, msg));
        }
        let status = hpa.status.get_or_insert_with(Default::default);
        set_condition(
            status,
            cond(
                "ScalingActive",
                "True",
                "ValidMetricFound",
                format!("the HPA was able to successfully calculate a replica count from {metric}"),
            ),
            now,
        );
        Ok((replicas, metric, statuses, first_failure.map(|(_, e)| e)))
    }

    /// `reconcileAutoscaler`.
    async fn reconcile_autoscaler(&self, shared: &HorizontalPodAutoscaler, key: &str) -> Result<(), String> {
        let now = (self.clock)();
        let mut hpa = shared.clone();
        let old_status = shared.status.clone();
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let spec = hpa.spec.clone().unwrap_or_default();
        let target = &spec.scale_target_ref;
        let reference = format!("{}/{}/{}", target.kind, ns, target.name);

        let mut scale = match self.scales.get_scale(&ns, target).await {
            Ok(s) => s,
            Err(e) => {
                set_condition(
                    hpa.status.get_or_insert_with(Default::default),
                    cond(
                        "AbleToScale",
                        "False",
                        "FailedGetScale",
                        format!("the HPA controller was unable to get the target's current scale: {}", e.message),
                    ),
                    now,
                );
                self.event(&hpa, EVENT_TYPE_WARNING, "FailedGetScale", &e.message);
                self.update_status_if_needed(old_status.as_ref(), &hpa).await?;
                return Err(format!("failed to query scale subresource for {reference}: {}", e.message));
            }
        };
        set_condition(
            hpa.status.get_or_insert_with(Default::default),
            cond(
                "AbleToScale",
                "True",
                "SucceededGetScale",
                "the HPA controller was able to get the target's current scale",
            ),
            now,
        );
        let current = scale.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0) as i32;
        {
            let mut h = self.history.lock();
            let entry = h.entry(key.to_string()).or_default();
            if entry.recommendations.is_empty() {
                entry.recommendations.push(Recommendation { replicas: current, at: now });
            }
        }
        let min = spec.min_replicas.unwrap_or(1);
        let max = spec.max_replicas;
        let mut desired = 0i32;
        let mut rescale_reason = String::new();
        let mut statuses: Vec<MetricStatus> = Vec::new();
        let mut metric_error: Option<String> = None;
        let rescale;
        if current == 0 && min != 0 {
            // Autoscaling is disabled for this resource.
            set_condition(
                hpa.status.get_or_insert_with(Default::default),
                cond(
                    "ScalingActive",
                    "False",
                    "ScalingDisabled",
                    "scaling is disabled since the replica count of the target is zero",
                ),
                now,
            );
            rescale = false;
        } else if current > max {
            rescale_reason = "Current number of replicas above Spec.MaxReplicas".into();
            desired = max;
            rescale = true;
        } else if current < min {
            rescale_reason = "Current number of replicas below Spec.MinReplicas".into();
            desired = min;
            rescale = true;
        } else {
            let (proposed, metric_name, st, err) = match self.compute_replicas_for_metrics(&mut hpa, &scale, now).await
            {
                Ok(r) => r,
                Err((st, err)) => {
                    self.set_status(&mut hpa, current, current, st, false, now);
                    self.update_status_if_needed(old_status.as_ref(), &hpa).await?;
                    self.event(&hpa, EVENT_TYPE_WARNING, "FailedComputeMetricsReplicas", &err);
                    return Err(format!(
                        "failed to compute desired number of replicas based on listed metrics for {reference}: {err}"
                    ));
                }
            };
            statuses = st;
            metric_error = err;
            let mut rescale_metric = String::new();
            if proposed > desired {
                desired = proposed;
                rescale_metric = metric_name;
            }
            if desired > current {
                rescale_reason = format!("{rescale_metric} above target");
            }
            if desired < current {
                rescale_reason = "All metrics below target".into();
            }
            desired = match &spec.behavior {
                None => self.normalize(&mut hpa, key, current, desired, min, max, now),
                Some(_) => self.normalize_with_behaviors(&mut hpa, key, current, desired, min, max, now),
            };
            rescale = desired != current;
        }

        if rescale {
            scale["spec"]["replicas"] = Value::from(desired);
            if let Err(e) = self.scales.update_scale(&ns, target, &scale).await {
                self.event(
                    &hpa,
                    EVENT_TYPE_WARNING,
                    "FailedRescale",
                    &format!("New size: {desired}; reason: {rescale_reason}; error: {}", e.message),
                );
                set_condition(
                    hpa.status.get_or_insert_with(Default::default),
                    cond(
                        "AbleToScale",
                        "False",
                        "FailedUpdateScale",
                        format!("the HPA controller was unable to update the target scale: {}", e.message),
                    ),
                    now,
                );
                self.set_status(&mut hpa, current, current, statuses, false, now);
                self.update_status_if_needed(old_status.as_ref(), &hpa).await?;
                return Err(format!("failed to rescale {reference}: {}", e.message));
            }
            set_condition(
                hpa.status.get_or_insert_with(Default::default),
                cond(
                    "AbleToScale",
                    "True",
                    "SucceededRescale",
                    format!("the HPA controller was able to update the target scale to {desired}"),
                ),
                now,
            );
            self.event(
                &hpa,
                EVENT_TYPE_NORMAL,
                "SuccessfulRescale",
                &format!("New size: {desired}; reason: {rescale_reason}"),
            );
            self.store_scale_event(
                spec.behavior.as_ref().map(|b| (b.scale_up.as_ref(), b.scale_down.as_ref())),
                key,
                current,
                desired,
                now,
            );
            tracing::info!(hpa = %key, current, desired, reason = %rescale_reason, "successful rescale");
        } else {
            desired = current;
        }
        self.set_status(&mut hpa, current, desired, statuses, rescale, now);
        self.update_status_if_needed(old_status.as_ref(), &hpa).await?;
        match metric_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `setStatus`.
    fn set_status(
        &self,
        hpa: &mut HorizontalPodAutoscaler,
        current: i32,
        desired: i32,
        statuses: Vec<MetricStatus>,
        rescale: bool,
        now: Timestamp,
    ) {
        let status = hpa.status.get_or_insert_with(Default::default);
        status.current_replicas = Some(current);
        status.desired_replicas = desired;
        status.current_metrics = (!statuses.is_empty()).then_some(statuses);
        if rescale {
            status.last_scale_time = Some(time(now));
        }
    }

    /// `normalizeDesiredReplicas` (no behavior).
    #[allow(clippy::too_many_arguments)]
    fn normalize(
        &self,
        hpa: &mut HorizontalPodAutoscaler,
        key: &str,
        current: i32,
        prenormalized: i32,
        min: i32,
        max: i32,
        now: Timestamp,
    ) -> i32 {
        let window = self.config.downscale_stabilization.as_secs() as i64;
        let stabilized = {
            let mut h = self.history.lock();
            normalize::stabilize(&mut h.entry(key.to_string()).or_default().recommendations, prenormalized, window, now)
        };
        let status = hpa.status.get_or_insert_with(Default::default);
        let c = if stabilized != prenormalized {
            cond("AbleToScale", "True", normalize::SCALE_DOWN_STABILIZED.0, normalize::SCALE_DOWN_STABILIZED.1)
        } else {
            cond("AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size")
        };
        set_condition(status, c, now);
        let (desired, (reason, message)) = normalize::with_rules(current, stabilized, min, max);
        let limited = if desired == stabilized { "False" } else { "True" };
        set_condition(status, cond("ScalingLimited", limited, reason, message), now);
        desired
    }

    /// `normalizeDesiredReplicasWithBehaviors`.
    #[allow(clippy::too_many_arguments)]
    fn normalize_with_behaviors(
        &self,
        hpa: &mut HorizontalPodAutoscaler,
        key: &str,
        current: i32,
        prenormalized: i32,
        min: i32,
        max: i32,
        now: Timestamp,
    ) -> i32 {
        let behavior = hpa.spec.as_ref().and_then(|s| s.behavior.clone()).unwrap_or_default();
        let up = behavior.scale_up.unwrap_or_default();
        let mut down: HPAScalingRules = behavior.scale_down.unwrap_or_default();
        // `maybeInitScaleDownStabilizationWindow`.
        if down.stabilization_window_seconds.is_none() {
            down.stabilization_window_seconds = Some(self.config.downscale_stabilization.as_secs() as i32);
        }
        let mut h = self.history.lock();
        let entry = h.entry(key.to_string()).or_default();
        let (stabilized, (reason, message)) = normalize::stabilize_with_behaviors(
            &mut entry.recommendations,
            current,
            prenormalized,
            i64::from(up.stabilization_window_seconds.unwrap_or(0)),
            i64::from(down.stabilization_window_seconds.unwrap_or(0)),
            now,
        );
        let status = hpa.status.get_or_insert_with(Default::default);
        let c = if stabilized != prenormalized {
            cond("AbleToScale", "True", reason, message)
        } else {
            cond("AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size")
        };
        set_condition(status, c, now);
        let arg = NormalizationArg { scale_up: &up, scale_down: &down, min, max, current, desired: stabilized };
        let (desired, (reason, message)) = normalize::with_behavior_rate(arg, &entry.scale_up, &entry.scale_down, now);
        let limited = if desired == stabilized { "False" } else { "True" };
        set_condition(status, cond("ScalingLimited", limited, reason, message), now);
        desired
    }

    /// `storeScaleEvent` (only HPAs with a behavior keep events).
    fn store_scale_event(
        &self,
        behavior: Option<(Option<&HPAScalingRules>, Option<&HPAScalingRules>)>,
        key: &str,
        previous: i32,
        new: i32,
        now: Timestamp,
    ) {
        let Some((up, down)) = behavior else { return };
        let mut h = self.history.lock();
        let entry = h.entry(key.to_string()).or_default();
        if new > previous {
            normalize::store_scale_event(&mut entry.scale_up, up, new - previous, now);
        } else {
            normalize::store_scale_event(&mut entry.scale_down, down, previous - new, now);
        }
    }

    /// One sync of `key`; errors are logged (and surfaced in conditions and events) and the
    /// key is looked at again after the sync period either way.
    pub async fn sync(&self, key: &str) -> ReconcileResult {
        let (ns, name) = split_key(key);
        let Some(hpa) = self.hpas.store().get_namespaced(ns, name) else {
            // Deleted: forget its recommendations and events.
            self.history.lock().remove(key);
            return Ok(Action::AwaitChange);
        };
        if let Err(e) = self.reconcile_autoscaler(&hpa, key).await {
            tracing::warn!(hpa = %key, error = %e, "horizontal pod autoscaler sync failed");
        }
        Ok(Action::RequeueAfter(self.config.sync_period))
    }
}

fn name_of(hpa: &HorizontalPodAutoscaler) -> String {
    format!(
        "{}/{}",
        hpa.metadata.namespace.as_deref().unwrap_or_default(),
        hpa.metadata.name.as_deref().unwrap_or_default()
    )
}

#[async_trait]
impl Reconciler for HorizontalController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync(key).await
    }
}
