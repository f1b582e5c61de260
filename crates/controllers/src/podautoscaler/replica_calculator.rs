//! The replica calculator (`pkg/controller/podautoscaler/replica_calculator.go`, Kubernetes
//! 1.33): from the pods a target selects and their usage samples to a proposed replica count.
//!
//! - Pods being deleted or Failed are ignored; Pending pods count as unready; pods without a
//!   sample are *missing*; for cpu, a pod is also unready when it has no Ready condition or
//!   start time, when within the cpu initialization period (5 min) it is not Ready or its sample
//!   predates one window after its last readiness change, and after that period when it is not
//!   Ready and has never been (its readiness changed within the initial readiness delay, 30 s,
//!   of its start).
//! - The usage ratio is over the ready pods' samples; within the tolerance (±10 %) nothing
//!   changes. With missing pods or (on a scale up) unready ones, the ratio is recomputed with
//!   missing pods taken as using 100 % of their request (of the target above 100 %) on a scale
//!   down and 0 on a scale up, and unready ones as 0; a recomputed ratio within tolerance, or
//!   one that flips the direction, keeps the current count.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::metrics::{PodMetric, PodMetricsInfo};
use crate::util::pod_ready_condition;

/// `--horizontal-pod-autoscaler-tolerance`.
pub const DEFAULT_TOLERANCE: f64 = 0.1;
/// `--horizontal-pod-autoscaler-cpu-initialization-period`.
pub const DEFAULT_CPU_INITIALIZATION_PERIOD: Duration = Duration::from_secs(5 * 60);
/// `--horizontal-pod-autoscaler-initial-readiness-delay`.
pub const DEFAULT_INITIAL_READINESS_DELAY: Duration = Duration::from_secs(30);

/// The calculator's settings.
#[derive(Debug, Clone, Copy)]
pub struct ReplicaCalculator {
    /// Relative change of the usage ratio below which the count is kept (0.1).
    pub tolerance: f64,
    /// How long after its start a pod's cpu samples are treated with suspicion.
    pub cpu_initialization_period: Duration,
    /// How soon after its start a readiness change still means "never been ready".
    pub delay_of_initial_readiness_status: Duration,
}

impl Default for ReplicaCalculator {
    fn default() -> Self {
        Self {
            tolerance: DEFAULT_TOLERANCE,
            cpu_initialization_period: DEFAULT_CPU_INITIALIZATION_PERIOD,
            delay_of_initial_readiness_status: DEFAULT_INITIAL_READINESS_DELAY,
        }
    }
}

/// A utilization proposal: replicas, utilization in percent of request, average raw usage in
/// milli-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilizationProposal {
    /// Proposed replica count.
    pub replicas: i32,
    /// Average utilization of the ready pods, percent of their requests.
    pub utilization: i32,
    /// Average usage of the ready pods, milli-units.
    pub raw_average: i64,
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::ZERO)).unwrap_or(t)
}

/// Pods sorted into ready count, unready, missing and ignored (`groupPods`).
#[derive(Debug, Default)]
struct Groups {
    ready: usize,
    unready: BTreeSet<String>,
    missing: BTreeSet<String>,
    ignored: BTreeSet<String>,
}

impl ReplicaCalculator {
    fn group_pods(&self, pods: &[Arc<Pod>], metrics: &PodMetricsInfo, resource: &str, now: Timestamp) -> Groups {
        let mut g = Groups::default();
        for pod in pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let status = pod.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
            if pod.metadata.deletion_timestamp.is_some() || phase == "Failed" {
                g.ignored.insert(name);
                continue;
            }
            if phase == "Pending" {
                g.unready.insert(name);
                continue;
            }
            let Some(metric) = metrics.get(&name) else {
                g.missing.insert(name);
                continue;
            };
            if resource == "cpu" {
                let condition = pod_ready_condition(pod);
                let start = status.and_then(|s| s.start_time.as_ref()).map(|t| t.0);
                let unready = match (condition, start) {
                    (Some(c), Some(start)) => {
                        let transition = c.last_transition_time.as_ref().map_or(Timestamp::UNIX_EPOCH, |t| t.0);
                        if after(start, self.cpu_initialization_period) > now {
                            c.status == "False" || metric.timestamp < after(transition, metric.window)
                        } else {
                            c.status == "False" && after(start, self.delay_of_initial_readiness_status) > transition
                        }
                    }
                    _ => true,
                };
                if unready {
                    g.unready.insert(name);
                    continue;
                }
            }
            g.ready += 1;
        }
        g
    }

    fn within_tolerance(&self, ratio: f64) -> bool {
        (1.0 - ratio).abs() <= self.tolerance
    }

    /// `GetResourceReplicas`: the replicas bringing `resource` utilization (percent of
    /// request) to `target_utilization`.
    ///
    /// # Errors
    /// Kubernetes' messages: no pods, no samples for ready pods, a container without a request.
    #[allow(clippy::too_many_arguments)]
    pub fn get_resource_replicas(
        &self,
        current_replicas: i32,
        target_utilization: i32,
        resource: &str,
        pods: &[Arc<Pod>],
        mut metrics: PodMetricsInfo,
        container: Option<&str>,
        now: Timestamp,
    ) -> Result<UtilizationProposal, String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".to_string());
        }
        let g = self.group_pods(pods, &metrics, resource, now);
        for name in g.ignored.iter().chain(g.unready.iter()) {
            metrics.remove(name);
        }
        if metrics.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".to_string());
        }
        let requests = calculate_pod_requests(pods, container, resource)?;
        let (ratio, utilization, raw_average) = utilization_ratio(&metrics, &requests, target_utilization)?;
        let keep = UtilizationProposal { replicas: current_replicas, utilization, raw_average };
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if self.within_tolerance(ratio) {
                return Ok(keep);
            }
            return Ok(UtilizationProposal { replicas: (ratio * g.ready as f64).ceil() as i32, ..keep });
        }
        // At exactly 1.0 missing pods get no sample at all, as upstream.
        if ratio < 1.0 {
            let fallback = i64::from(target_utilization.max(100));
            for name in &g.missing {
                let value = requests.get(name).copied().unwrap_or(0) * fallback / 100;
                metrics.insert(name.clone(), PodMetric { timestamp: now, window: Duration::ZERO, value });
            }
        } else if ratio > 1.0 {
            for name in &g.missing {
                metrics.insert(name.clone(), PodMetric { timestamp: now, window: Duration::ZERO, value: 0 });
            }
        }
        if scale_up_with_unready {
            for name in &g.unready {
                metrics.insert(name.clone(), PodMetric { timestamp: now, window: Duration::ZERO, value: 0 });
            }
        }
        let (new_ratio, _, _) = utilization_ratio(&metrics, &requests, target_utilization)?;
        if self.within_tolerance(new_ratio) || (ratio < 1.0 && new_ratio > 1.0) || (ratio > 1.0 && new_ratio < 1.0) {
            return Ok(keep);
        }
        let new_replicas = (new_ratio * metrics.len() as f64).ceil() as i32;
        if (new_ratio < 1.0 && new_replicas > current_replicas) || (new_ratio > 1.0 && new_replicas < current_replicas)
        {
            return Ok(keep);
        }
        Ok(UtilizationProposal { replicas: new_replicas, ..keep })
    }

    /// `GetRawResourceReplicas` / `calcPlainMetricReplicas`: the replicas bringing the average
    /// usage (milli-units) to `target_usage`. Returns (replicas, average usage).
    ///
    /// # Errors
    /// As [`Self::get_resource_replicas`].
    pub fn get_raw_resource_replicas(
        &self,
        current_replicas: i32,
        target_usage: i64,
        resource: &str,
        pods: &[Arc<Pod>],
        mut metrics: PodMetricsInfo,
        now: Timestamp,
    ) -> Result<(i32, i64), String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".to_string());
        }
        let g = self.group_pods(pods, &metrics, resource, now);
        for name in g.ignored.iter().chain(g.unready.iter()) {
            metrics.remove(name);
        }
        if metrics.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".to_string());
        }
        let (ratio, usage) = usage_ratio(&metrics, target_usage);
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if self.within_tolerance(ratio) {
                return Ok((current_replicas, usage));
            }
            return Ok(((ratio * g.ready as f64).ceil() as i32, usage));
        }
        if ratio != 1.0 {
            for name in &g.missing {
                let value = if ratio < 1.0 { target_usage } else { 0 };
                metrics.insert(name.clone(), PodMetric { timestamp: now, window: Duration::ZERO, value });
            }
        }
        if scale_up_with_unready {
            for name in &g.unready {
                metrics.insert(name.clone(), PodMetric { timestamp: now, window: Duration::ZERO, value: 0 });
            }
        }
        let (new_ratio, _) = usage_ratio(&metrics, target_usage);
        if self.within_tolerance(new_ratio) || (ratio < 1.0 && new_ratio > 1.0) || (ratio > 1.0 && new_ratio < 1.0) {
            return Ok((current_replicas, usage));
        }
        let new_replicas = (new_ratio * metrics.len() as f64).ceil() as i32;
        if (new_ratio < 1.0 && new_replicas > current_replicas) || (new_ratio > 1.0 && new_replicas < current_replicas)
        {
            return Ok((current_replicas, usage));
        }
        Ok((new_replicas, usage))
    }
}

/// `calculatePodRequests`: each pod's request of `resource` in milli-units, summed over its
/// containers and restartable init containers (sidecars), or of `container` only.
///
/// # Errors
/// `missing request for <resource> in container <c> of Pod <pod>`.
pub fn calculate_pod_requests(
    pods: &[Arc<Pod>],
    container: Option<&str>,
    resource: &str,
) -> Result<BTreeMap<String, i64>, String> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let sidecars = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let containers = spec.map(|s| s.containers.iter()).into_iter().flatten().chain(sidecars);
        let mut sum = 0i64;
        for c in containers {
            if container.is_some_and(|want| want != c.name) {
                continue;
            }
            let request = c.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get(resource));
            match request.and_then(|q| skiff_apimachinery::quantity::milli_value(q).ok()) {
                Some(v) => sum += v,
                None => return Err(format!("missing request for {resource} in container {} of Pod {name}", c.name)),
            }
        }
        out.insert(name, sum);
    }
    Ok(out)
}

/// `GetResourceUtilizationRatio`: (usage / target ratio, utilization percent, average usage).
///
/// # Errors
/// `no metrics returned matched known pods` when no sample belongs to a pod with a request.
pub fn utilization_ratio(
    metrics: &PodMetricsInfo,
    requests: &BTreeMap<String, i64>,
    target_utilization: i32,
) -> Result<(f64, i32, i64), String> {
    let (mut total, mut requested, mut entries) = (0i64, 0i64, 0i64);
    for (name, m) in metrics {
        // A sample of a pod the requests do not know is extraneous.
        let Some(r) = requests.get(name) else { continue };
        total += m.value;
        requested += r;
        entries += 1;
    }
    if requested == 0 {
        return Err("no metrics returned matched known pods".to_string());
    }
    let utilization = (total * 100 / requested) as i32;
    Ok((f64::from(utilization) / f64::from(target_utilization), utilization, total / entries))
}

/// `GetMetricUsageRatio`: (average usage / target, average usage).
pub fn usage_ratio(metrics: &PodMetricsInfo, target_usage: i64) -> (f64, i64) {
    let total: i64 = metrics.values().map(|m| m.value).sum();
    let average = total / metrics.len().max(1) as i64;
    (average as f64 / target_usage as f64, average)
}
