//! Cases from Kubernetes' `replica_calculator_test.go` and `horizontal_test.go` (their facts:
//! pods, usage levels, requests, targets and expected counts, reasons and messages).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerBehavior, HorizontalPodAutoscalerSpec, MetricSpec, MetricTarget, ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::metrics::{MetricsClient, PodMetric, PodMetricsInfo};
use super::replica_calculator::ReplicaCalculator;
use super::scale::ScaleClient;
use super::*;
use crate::util::add_seconds;
use skiff_runtime::api::ApiError;
use skiff_runtime::fake::FakeApi;

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

/// A pod started 10 minutes ago (past the cpu initialization period: "cool").
fn cool() -> Timestamp {
    add_seconds(now(), -600)
}

/// A pod started a minute ago (within the cpu initialization period: "hot").
fn hot() -> Timestamp {
    add_seconds(now(), -60)
}

#[derive(Clone)]
struct PodCase {
    ready: bool,
    phase: &'static str,
    start: Timestamp,
    deleting: bool,
    request: &'static str,
}

impl Default for PodCase {
    fn default() -> Self {
        Self { ready: true, phase: "Running", start: cool(), deleting: false, request: "1.0" }
    }
}

fn pod(i: usize, c: &PodCase) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("test-pod-{i}")),
            namespace: Some("ns".into()),
            labels: Some([("name".to_string(), "test-pod".to_string())].into()),
            deletion_timestamp: c.deleting.then(|| Time(now())),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                resources: Some(ResourceRequirements {
                    requests: Some([("cpu".to_string(), Quantity(c.request.into()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(c.phase.into()),
            start_time: Some(Time(c.start)),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if c.ready { "True" } else { "False" }.into(),
                // Upstream's fixtures: the readiness changed when the pod started.
                last_transition_time: Some(Time(c.start)),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn pods(cases: &[PodCase]) -> Vec<Arc<Pod>> {
    cases.iter().enumerate().map(|(i, c)| Arc::new(pod(i, c))).collect()
}

/// Samples of the first `levels.len()` pods (the rest are missing), taken now over 30 s.
fn samples(levels: &[i64]) -> PodMetricsInfo {
    levels
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (format!("test-pod-{i}"), PodMetric { timestamp: now(), window: Duration::from_secs(30), value: *v })
        })
        .collect()
}

fn ready(n: usize) -> Vec<PodCase> {
    vec![PodCase::default(); n]
}

fn with_readiness(r: &[bool]) -> Vec<PodCase> {
    r.iter().map(|ready| PodCase { ready: *ready, ..Default::default() }).collect()
}

fn calc(current: i32, cases: &[PodCase], levels: &[i64], target: i32) -> Result<(i32, i32, i64), String> {
    ReplicaCalculator::default()
        .get_resource_replicas(current, target, "cpu", &pods(cases), samples(levels), None, now())
        .map(|p| (p.replicas, p.utilization, p.raw_average))
}

#[test]
fn scale_up_by_utilization() {
    // TestReplicaCalcScaleUp.
    assert_eq!(calc(3, &ready(3), &[300, 500, 700], 30), Ok((5, 50, 500)));
}

#[test]
fn an_unready_pod_counts_as_idle_on_a_scale_up() {
    // TestReplicaCalcScaleUpUnreadyLessScale.
    assert_eq!(calc(3, &with_readiness(&[false, true, true]), &[300, 500, 700], 30), Ok((4, 60, 600)));
}

#[test]
fn a_hot_cpu_pod_counts_as_idle_on_a_scale_up() {
    // TestReplicaCalcScaleUpHotCpuLessScale: the first pod is within its cpu initialization
    // period and its sample predates one window after its readiness change.
    let mut cases = ready(3);
    cases[0].start = add_seconds(now(), -10);
    assert_eq!(calc(3, &cases, &[300, 500, 700], 30), Ok((4, 60, 600)));
}

#[test]
fn unready_pods_can_cancel_a_scale_up() {
    // TestReplicaCalcScaleUpUnreadyNoScale.
    assert_eq!(calc(3, &with_readiness(&[true, false, false]), &[400, 500, 700], 30), Ok((3, 40, 400)));
    // TestReplicaCalcScaleHotCpuNoScale.
    let mut cases = with_readiness(&[true, false, false]);
    cases[1].start = hot();
    cases[2].start = hot();
    assert_eq!(calc(3, &cases, &[400, 500, 700], 30), Ok((3, 40, 400)));
}

#[test]
fn failed_and_deleted_pods_are_ignored() {
    // TestReplicaCalcScaleUpIgnoresFailedPods.
    let mut cases = with_readiness(&[true, true, false, false]);
    cases[2].phase = "Failed";
    cases[3].phase = "Failed";
    assert_eq!(calc(2, &cases, &[500, 700], 30), Ok((4, 60, 600)));
    // TestReplicaCalcScaleUpIgnoresDeletionPods.
    let mut cases = with_readiness(&[true, true, false, false]);
    cases[2].deleting = true;
    cases[3].deleting = true;
    assert_eq!(calc(2, &cases, &[500, 700], 30), Ok((4, 60, 600)));
    // TestReplicaCalcScaleDownIgnoresFailedPods.
    let mut cases = with_readiness(&[true, true, true, true, true, false, false]);
    cases[5].phase = "Failed";
    cases[6].phase = "Failed";
    assert_eq!(calc(5, &cases, &[100, 300, 500, 250, 250], 50), Ok((3, 28, 280)));
}

#[test]
fn scale_down_by_utilization() {
    // TestReplicaCalcScaleDown.
    assert_eq!(calc(5, &ready(5), &[100, 300, 500, 250, 250], 50), Ok((3, 28, 280)));
}

#[test]
fn unready_and_hot_pods_are_left_out_of_a_scale_down() {
    // TestReplicaCalcScaleDownIncludeUnreadyPods.
    assert_eq!(
        calc(5, &with_readiness(&[true, true, true, false, false]), &[100, 300, 500, 250, 250], 50),
        Ok((2, 30, 300))
    );
    // TestReplicaCalcScaleDownIgnoreHotCpuPods.
    let mut cases = ready(5);
    cases[3].start = add_seconds(now(), -10);
    cases[4].start = add_seconds(now(), -10);
    assert_eq!(calc(5, &cases, &[100, 300, 500, 250, 250], 50), Ok((2, 30, 300)));
}

#[test]
fn pending_pods_are_unready() {
    // TestReplicaCalcScaleDownExcludeUnscheduledPods.
    let mut cases = with_readiness(&[true, false, false, false, false]);
    for c in &mut cases[1..] {
        c.phase = "Pending";
    }
    assert_eq!(calc(5, &cases, &[100], 50), Ok((1, 10, 100)));
}

#[test]
fn a_ratio_within_tolerance_keeps_the_count() {
    // TestReplicaCalcTolerance: 102 % of a 100 % target.
    let cases: Vec<PodCase> =
        ["0.9", "1.0", "1.1"].iter().map(|r| PodCase { request: r, ..Default::default() }).collect();
    assert_eq!(calc(3, &cases, &[1010, 1030, 1020], 100), Ok((3, 102, 1020)));
}

#[test]
fn missing_pods_count_as_idle_on_a_scale_up_and_as_full_on_a_scale_down() {
    // Scale up: the missing fourth pod at 0 → 75 % of 4 cores over a 50 % target.
    assert_eq!(calc(4, &ready(4), &[1000, 1000, 1000], 50), Ok((6, 100, 1000)));
    // Scale down: the missing pod at 100 % of its request → 32 % → 3 of 4.
    assert_eq!(calc(4, &ready(4), &[100, 100, 100], 50), Ok((3, 10, 100)));
    // TestReplicaCalcMissingMetricsNoChangeEq-like: a missing pod flipping the direction keeps
    // the count.
    assert_eq!(calc(2, &ready(2), &[1000], 100), Ok((2, 100, 1000)));
}

#[test]
fn calculator_errors_read_as_kubernetes_words_them() {
    assert_eq!(calc(1, &[], &[], 50).unwrap_err(), "no pods returned by selector while calculating replica count");
    assert_eq!(
        calc(1, &with_readiness(&[false]), &[100], 50).unwrap_err(),
        "did not receive metrics for targeted pods (pods might be unready)"
    );
    let mut p = pod(0, &PodCase::default());
    p.spec.as_mut().unwrap().containers[0].resources = None;
    let err = ReplicaCalculator::default()
        .get_resource_replicas(1, 50, "cpu", &[Arc::new(p)], samples(&[100]), None, now())
        .unwrap_err();
    assert_eq!(err, "missing request for cpu in container app of Pod test-pod-0");
}

#[test]
fn raw_usage_targets_scale_by_the_average() {
    // Average 500m over a 250m target: twice the ready pods.
    let (replicas, usage) = ReplicaCalculator::default()
        .get_raw_resource_replicas(3, 250, "cpu", &pods(&ready(3)), samples(&[300, 500, 700]), now())
        .unwrap();
    assert_eq!((replicas, usage), (6, 500));
}

// ---------------------------------------------------------------------------------------------
// The controller.

#[derive(Default)]
struct FakeScales {
    replicas: Mutex<i64>,
    selector: Mutex<String>,
    fail_get: Mutex<Option<ApiError>>,
    updates: Mutex<Vec<i64>>,
}

#[async_trait]
impl ScaleClient for FakeScales {
    async fn get_scale(&self, ns: &str, target: &CrossVersionObjectReference) -> Result<Value, ApiError> {
        if let Some(e) = self.fail_get.lock().clone() {
            return Err(e);
        }
        Ok(json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": target.name, "namespace": ns},
            "spec": {"replicas": *self.replicas.lock()},
            "status": {"replicas": *self.replicas.lock(), "selector": *self.selector.lock()}}))
    }

    async fn update_scale(&self, _: &str, _: &CrossVersionObjectReference, scale: &Value) -> Result<Value, ApiError> {
        let n = scale["spec"]["replicas"].as_i64().unwrap_or(0);
        *self.replicas.lock() = n;
        self.updates.lock().push(n);
        Ok(scale.clone())
    }
}

#[derive(Default)]
struct FakeMetrics {
    levels: Mutex<Option<Vec<i64>>>,
}

#[async_trait]
impl MetricsClient for FakeMetrics {
    async fn get_resource_metric(
        &self,
        _: &str,
        _: &str,
        _: &str,
        _: Option<&str>,
    ) -> Result<(PodMetricsInfo, Timestamp), String> {
        match self.levels.lock().as_ref() {
            Some(l) => Ok((samples(l), now())),
            None => Err("no metrics returned from resource metrics API".into()),
        }
    }
}

struct Fixture {
    api: Arc<FakeApi>,
    factory: SharedInformerFactory,
    scales: Arc<FakeScales>,
    metrics: Arc<FakeMetrics>,
    controller: Arc<HorizontalController>,
    recorder: EventRecorder,
    clock: Arc<Mutex<Timestamp>>,
}

fn cpu_target(utilization: i32) -> MetricSpec {
    MetricSpec {
        type_: "Resource".into(),
        resource: Some(ResourceMetricSource {
            name: "cpu".into(),
            target: MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(utilization),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

fn hpa(
    min: i32,
    max: i32,
    utilization: i32,
    behavior: Option<HorizontalPodAutoscalerBehavior>,
) -> HorizontalPodAutoscaler {
    HorizontalPodAutoscaler {
        metadata: ObjectMeta {
            name: Some("test-hpa".into()),
            namespace: Some("ns".into()),
            resource_version: Some("1".into()),
            ..Default::default()
        },
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: "test-rc".into(),
            },
            min_replicas: Some(min),
            max_replicas: max,
            metrics: Some(vec![cpu_target(utilization)]),
            behavior,
        }),
        status: None,
    }
}

impl Fixture {
    fn new(hpa: HorizontalPodAutoscaler, replicas: i64, cases: &[PodCase], levels: Option<&[i64]>) -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let recorder = EventRecorder::recording("horizontal-pod-autoscaler");
        let scales = Arc::new(FakeScales::default());
        *scales.replicas.lock() = replicas;
        *scales.selector.lock() = "name=test-pod".into();
        let metrics = Arc::new(FakeMetrics::default());
        *metrics.levels.lock() = levels.map(<[i64]>::to_vec);
        let controller = HorizontalController::new(
            api.clone(),
            &factory,
            Arc::new(WorkQueue::new()),
            recorder.clone(),
            scales.clone(),
            metrics.clone(),
            HpaConfig::default(),
        );
        let clock = Arc::new(Mutex::new(now()));
        let reader = clock.clone();
        let controller = controller.with_clock(Arc::new(move || *reader.lock()));
        let f = Self { api, factory, scales, metrics, controller, recorder, clock };
        f.apply(&hpa);
        for p in pods(cases) {
            f.factory.informer::<Pod>().handle_event(Event::Apply((*p).clone()));
        }
        f
    }

    fn apply(&self, hpa: &HorizontalPodAutoscaler) {
        self.api.seed(hpa);
        self.factory.informer::<HorizontalPodAutoscaler>().handle_event(Event::Apply(hpa.clone()));
    }

    /// Syncs and returns the status written (Null when none was), feeding it back to the cache.
    async fn sync(&self) -> Value {
        self.api.clear_actions();
        let result = self.controller.sync("ns/test-hpa").await;
        assert_eq!(result.unwrap(), Action::RequeueAfter(DEFAULT_SYNC_PERIOD));
        let written = self
            .api
            .mutations()
            .into_iter()
            .find(|a| a.verb == "update" && a.subresource.as_deref() == Some("status"))
            .and_then(|a| a.body);
        if let Some(body) = &written {
            let hpa: HorizontalPodAutoscaler = serde_json::from_value(body.clone()).unwrap();
            self.factory.informer::<HorizontalPodAutoscaler>().handle_event(Event::Apply(hpa));
        }
        written.map(|b| b["status"].clone()).unwrap_or(Value::Null)
    }

    fn events(&self) -> Vec<String> {
        self.recorder.recorded().iter().map(|e| e.summary()).collect()
    }
}

fn condition(status: &Value, type_: &str) -> (String, String, String) {
    let c = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == type_).unwrap();
    let s = |f: &str| c[f].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

#[tokio::test]
async fn a_busy_target_is_scaled_up_with_kubernetes_conditions_and_event() {
    // horizontal_test.go TestScaleUp: 3 replicas at 300/500/700m of 1 core, 30 % target → 5.
    let f = Fixture::new(hpa(2, 6, 30, None), 3, &ready(3), Some(&[300, 500, 700]));
    let status = f.sync().await;
    assert_eq!(*f.scales.updates.lock(), vec![5]);
    assert_eq!(status["currentReplicas"], 3);
    assert_eq!(status["desiredReplicas"], 5);
    assert_eq!(status["lastScaleTime"], json!(now().to_string()));
    assert_eq!(
        status["currentMetrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 50, "averageValue": "500m"}}}])
    );
    assert_eq!(
        condition(&status, "AbleToScale"),
        (
            "True".into(),
            "SucceededRescale".into(),
            "the HPA controller was able to update the target scale to 5".into()
        )
    );
    assert_eq!(
        condition(&status, "ScalingActive"),
        (
            "True".into(),
            "ValidMetricFound".into(),
            "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"
                .into()
        )
    );
    assert_eq!(
        condition(&status, "ScalingLimited"),
        ("False".into(), "DesiredWithinRange".into(), "the desired count is within the acceptable range".into())
    );
    assert!(
        f.events().iter().any(|e| e.contains("SuccessfulRescale")
            && e.contains("New size: 5; reason: cpu resource utilization (percentage of request) above target")),
        "{:?}",
        f.events()
    );
}

#[tokio::test]
async fn the_max_replicas_limit_the_scale_up() {
    let f = Fixture::new(hpa(1, 4, 30, None), 3, &ready(3), Some(&[300, 500, 700]));
    let status = f.sync().await;
    assert_eq!(*f.scales.updates.lock(), vec![4]);
    assert_eq!(
        condition(&status, "ScalingLimited"),
        (
            "True".into(),
            "TooManyReplicas".into(),
            "the desired replica count is more than the maximum replica count".into()
        )
    );
}

#[tokio::test]
async fn without_metrics_scaling_is_inactive_with_the_reason() {
    let f = Fixture::new(hpa(1, 5, 50, None), 2, &ready(2), None);
    let status = f.sync().await;
    assert!(f.scales.updates.lock().is_empty());
    assert_eq!(
        condition(&status, "ScalingActive"),
        (
            "False".into(),
            "FailedGetResourceMetric".into(),
            "the HPA was unable to compute the replica count: failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API".into()
        )
    );
    assert_eq!(status["currentReplicas"], 2);
    assert_eq!(status["desiredReplicas"], 2);
    let events = f.events();
    assert!(events.iter().any(|e| e.contains("FailedGetResourceMetric")), "{events:?}");
    assert!(events.iter().any(|e| e.contains("FailedComputeMetricsReplicas")), "{events:?}");
}

#[tokio::test]
async fn a_missing_target_is_unable_to_scale() {
    let f = Fixture::new(hpa(1, 5, 50, None), 2, &ready(2), Some(&[100, 100]));
    *f.scales.fail_get.lock() = Some(ApiError::not_found("apps", "deployments", "test-rc"));
    let status = f.sync().await;
    let (s, reason, message) = condition(&status, "AbleToScale");
    assert_eq!((s.as_str(), reason.as_str()), ("False", "FailedGetScale"));
    assert!(message.starts_with("the HPA controller was unable to get the target's current scale: "), "{message}");
    assert!(f.events().iter().any(|e| e.contains("FailedGetScale")));
}

#[tokio::test]
async fn a_target_at_zero_replicas_is_left_alone() {
    let f = Fixture::new(hpa(1, 5, 50, None), 0, &[], Some(&[]));
    let status = f.sync().await;
    assert!(f.scales.updates.lock().is_empty());
    assert_eq!(
        condition(&status, "ScalingActive"),
        (
            "False".into(),
            "ScalingDisabled".into(),
            "scaling is disabled since the replica count of the target is zero".into()
        )
    );
}

#[tokio::test]
async fn a_target_below_min_replicas_is_raised_to_it() {
    let f = Fixture::new(hpa(3, 5, 50, None), 1, &ready(1), Some(&[10]));
    f.sync().await;
    assert_eq!(*f.scales.updates.lock(), vec![3]);
    assert!(
        f.events().iter().any(|e| e.contains("New size: 3; reason: Current number of replicas below Spec.MinReplicas"))
    );
}

#[tokio::test]
async fn a_scale_down_waits_for_the_stabilization_window_without_behavior() {
    // The first sync records the current count (5) as a recommendation; an idle target is held
    // there for the 5 minute window.
    let f = Fixture::new(hpa(1, 5, 50, None), 5, &ready(5), Some(&[10, 10, 10, 10, 10]));
    let status = f.sync().await;
    assert!(f.scales.updates.lock().is_empty());
    assert_eq!(condition(&status, "AbleToScale").1, "ScaleDownStabilized");
    assert_eq!(status["desiredReplicas"], 5);
}

#[tokio::test]
async fn a_behavior_without_a_scale_down_window_scales_down_at_its_policy_rate() {
    let rules = |window, policy: HPAScalingPolicy| HPAScalingRules {
        stabilization_window_seconds: Some(window),
        select_policy: Some("Max".into()),
        policies: Some(vec![policy]),
        ..Default::default()
    };
    let behavior = HorizontalPodAutoscalerBehavior {
        scale_up: Some(rules(0, HPAScalingPolicy { type_: "Pods".into(), value: 4, period_seconds: 15 })),
        scale_down: Some(rules(0, HPAScalingPolicy { type_: "Pods".into(), value: 2, period_seconds: 60 })),
    };
    let f = Fixture::new(hpa(1, 5, 50, Some(behavior)), 5, &ready(5), Some(&[10, 10, 10, 10, 10]));
    let status = f.sync().await;
    assert_eq!(*f.scales.updates.lock(), vec![3]);
    assert_eq!(
        condition(&status, "ScalingLimited"),
        (
            "True".into(),
            "ScaleDownLimit".into(),
            "the desired replica count is decreasing faster than the maximum scale rate".into()
        )
    );
    // The 2 pods removed within the 60 s period hold the next sync at 3.
    f.sync().await;
    assert_eq!(*f.scales.updates.lock(), vec![3]);
}

#[tokio::test]
async fn conditions_keep_their_transition_time_while_their_status_holds() {
    let f = Fixture::new(hpa(1, 5, 50, None), 2, &ready(2), Some(&[500, 500]));
    let first = f.sync().await;
    assert_eq!(first["conditions"][0]["lastTransitionTime"], json!(now().to_string()));
    // A minute later metrics are gone: only ScalingActive changes status, and only its time moves.
    *f.clock.lock() = add_seconds(now(), 60);
    *f.metrics.levels.lock() = None;
    let second = f.sync().await;
    let time_of = |t: &str| {
        second["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).unwrap()["lastTransitionTime"].clone()
    };
    assert_eq!(time_of("AbleToScale"), json!(now().to_string()));
    assert_eq!(time_of("ScalingActive"), json!(add_seconds(now(), 60).to_string()));
}
