//! The last two samples of every node and container, and the usage computed from them
//! (metrics-server's `pkg/storage`): CPU is a rate, the difference of two cumulative readings
//! over the time between them; memory is the newest working set.
//!
//! Which earlier sample a new one is paired with follows metrics-server:
//! - a series whose start lies within one resolution before its first sample (but at least
//!   [`FRESH_MIN_AGE`] before it) gets a synthetic earlier sample at its start, with zero CPU,
//!   so a new container has usage after one scrape;
//! - otherwise the stored newest sample becomes the earlier one when the new sample is newer
//!   and the series has not restarted since (start time before the stored sample);
//! - a new sample with the same timestamp as the stored one keeps the stored earlier one;
//! - a restarted series (start after the stored sample) has no usage until its next sample.
//!
//! A pod has usage only when every one of its containers has.

use std::collections::HashMap;
use std::time::Duration;

/// A series younger than this at its first sample gets no synthetic start sample: too short a
/// window gives inaccurate rates (metrics-server's `freshContainerMinMetricsResolution`).
pub const FRESH_MIN_AGE: Duration = Duration::from_secs(10);

/// One reading of a node or container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsPoint {
    /// When the node or container started, Unix milliseconds (0: unknown). Its cumulative CPU
    /// was zero then.
    pub start_ms: i64,
    /// When the reading was taken, Unix milliseconds.
    pub timestamp_ms: i64,
    /// CPU used since start, nanocore-seconds (nanoseconds of one core).
    pub cumulative_cpu_ns: u64,
    /// Memory working set, bytes.
    pub memory_bytes: u64,
}

/// One scrape of every node: the node points by node name, the container points by pod
/// (namespace, name) and container name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsBatch {
    /// Node points.
    pub nodes: HashMap<String, MetricsPoint>,
    /// Container points of each pod.
    pub pods: HashMap<(String, String), Vec<(String, MetricsPoint)>>,
}

/// Usage over a window: what NodeMetrics and ContainerMetrics report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// CPU, nanocores (cores × 10⁹).
    pub cpu_nanocores: u64,
    /// Memory working set, bytes.
    pub memory_bytes: u64,
    /// End of the window (the newest sample), Unix milliseconds.
    pub timestamp_ms: i64,
    /// Length of the window, milliseconds.
    pub window_ms: i64,
}

/// Why two samples give no usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateError {
    /// The newer sample's start time is before the older one's.
    StartTimeDecreased,
    /// The cumulative CPU went down (a reset the start time did not show).
    CumulativeCpuDecreased,
    /// The two samples have the same timestamp, or are out of order.
    EmptyWindow,
}

/// The usage between `prev` and `last` (metrics-server's `resourceUsage`).
///
/// # Errors
/// [`RateError`] when the pair cannot give a rate.
pub fn resource_usage(last: &MetricsPoint, prev: &MetricsPoint) -> Result<Usage, RateError> {
    if last.start_ms < prev.start_ms {
        return Err(RateError::StartTimeDecreased);
    }
    if last.cumulative_cpu_ns < prev.cumulative_cpu_ns {
        return Err(RateError::CumulativeCpuDecreased);
    }
    let window_ms = last.timestamp_ms - prev.timestamp_ms;
    if window_ms <= 0 {
        return Err(RateError::EmptyWindow);
    }
    let cpu = (last.cumulative_cpu_ns - prev.cumulative_cpu_ns) as f64 / (window_ms as f64 / 1000.0);
    Ok(Usage { cpu_nanocores: cpu as u64, memory_bytes: last.memory_bytes, timestamp_ms: last.timestamp_ms, window_ms })
}

/// The earlier sample to pair with `new`, given the series' stored newest and earlier samples.
fn earlier_point(
    new: &MetricsPoint,
    last: Option<&MetricsPoint>,
    prev: Option<&MetricsPoint>,
    resolution: Duration,
) -> Option<MetricsPoint> {
    let age = new.timestamp_ms - new.start_ms;
    let fresh = new.start_ms > 0
        && new.start_ms < new.timestamp_ms
        && age < resolution.as_millis() as i64
        && age >= FRESH_MIN_AGE.as_millis() as i64;
    if fresh {
        return Some(MetricsPoint { timestamp_ms: new.start_ms, cumulative_cpu_ns: 0, ..*new });
    }
    let last = last?;
    if new.start_ms >= last.timestamp_ms {
        return None; // restarted since the stored sample
    }
    if new.timestamp_ms > last.timestamp_ms {
        return Some(*last);
    }
    prev.filter(|p| p.timestamp_ms < new.timestamp_ms).copied()
}

/// The samples of every node and container, replaced by each [`Storage::store`].
#[derive(Debug, Clone)]
pub struct Storage {
    resolution: Duration,
    last_nodes: HashMap<String, MetricsPoint>,
    prev_nodes: HashMap<String, MetricsPoint>,
    last_pods: HashMap<(String, String), Vec<(String, MetricsPoint)>>,
    prev_pods: HashMap<(String, String), HashMap<String, MetricsPoint>>,
}

impl Storage {
    /// An empty storage for scrapes every `resolution`.
    pub fn new(resolution: Duration) -> Self {
        Storage {
            resolution,
            last_nodes: HashMap::new(),
            prev_nodes: HashMap::new(),
            last_pods: HashMap::new(),
            prev_pods: HashMap::new(),
        }
    }

    /// Takes one scrape. Nodes and pods absent from it are forgotten, as in metrics-server (a
    /// node that failed its scrape has no metrics until two more succeed).
    pub fn store(&mut self, batch: MetricsBatch) {
        let mut prev_nodes = HashMap::new();
        for (name, point) in &batch.nodes {
            let earlier = earlier_point(point, self.last_nodes.get(name), self.prev_nodes.get(name), self.resolution);
            if let Some(p) = earlier {
                prev_nodes.insert(name.clone(), p);
            }
        }
        let mut prev_pods = HashMap::new();
        let mut last_pods = HashMap::with_capacity(batch.pods.len());
        for (key, containers) in batch.pods {
            let stored_last = self.last_pods.get(&key);
            let stored_prev = self.prev_pods.get(&key);
            let mut seen = std::collections::HashSet::new();
            let mut kept = Vec::with_capacity(containers.len());
            let mut earlier = HashMap::new();
            for (name, point) in containers {
                if !seen.insert(name.clone()) {
                    continue; // a duplicate container point: the first one counts
                }
                let last = stored_last.and_then(|c| c.iter().find(|(n, _)| *n == name)).map(|(_, p)| p);
                let prev = stored_prev.and_then(|c| c.get(&name));
                if let Some(p) = earlier_point(&point, last, prev, self.resolution) {
                    earlier.insert(name.clone(), p);
                }
                kept.push((name, point));
            }
            if !earlier.is_empty() {
                prev_pods.insert(key.clone(), earlier);
            }
            last_pods.insert(key, kept);
        }
        self.last_nodes = batch.nodes;
        self.prev_nodes = prev_nodes;
        self.last_pods = last_pods;
        self.prev_pods = prev_pods;
    }

    /// The usage of node `name`, if its last two samples give one.
    pub fn node_usage(&self, name: &str) -> Option<Usage> {
        resource_usage(self.last_nodes.get(name)?, self.prev_nodes.get(name)?).ok()
    }

    /// The usage of each container of pod `namespace/name` in scrape order, and the window of
    /// the pod (its earliest container's); `None` unless every container has usage.
    pub fn pod_usage(&self, namespace: &str, name: &str) -> Option<(Vec<(String, Usage)>, Usage)> {
        let key = (namespace.to_string(), name.to_string());
        let last = self.last_pods.get(&key)?;
        let prev = self.prev_pods.get(&key)?;
        let mut out = Vec::with_capacity(last.len());
        let mut earliest: Option<Usage> = None;
        for (container, point) in last {
            let usage = resource_usage(point, prev.get(container)?).ok()?;
            if earliest.is_none_or(|e| usage.timestamp_ms < e.timestamp_ms) {
                earliest = Some(usage);
            }
            out.push((container.clone(), usage));
        }
        Some((out, earliest?))
    }

    /// The names of the nodes with a stored sample.
    pub fn node_names(&self) -> impl Iterator<Item = &String> {
        self.last_nodes.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RES: Duration = Duration::from_secs(15);

    fn point(start_s: i64, ts_s: i64, cpu_s: f64, mem: u64) -> MetricsPoint {
        MetricsPoint {
            start_ms: start_s * 1000,
            timestamp_ms: ts_s * 1000,
            cumulative_cpu_ns: (cpu_s * 1e9) as u64,
            memory_bytes: mem,
        }
    }

    fn node_batch(p: MetricsPoint) -> MetricsBatch {
        MetricsBatch { nodes: HashMap::from([("n1".to_string(), p)]), pods: HashMap::new() }
    }

    fn pod_batch(containers: &[(&str, MetricsPoint)]) -> MetricsBatch {
        MetricsBatch {
            nodes: HashMap::new(),
            pods: HashMap::from([(
                ("default".to_string(), "web".to_string()),
                containers.iter().map(|(n, p)| (n.to_string(), *p)).collect(),
            )]),
        }
    }

    #[test]
    fn cpu_usage_is_the_counter_difference_over_the_window() {
        let u = resource_usage(&point(0, 115, 12.0, 7), &point(0, 100, 9.0, 5)).unwrap();
        // 3 core-seconds over 15 s = 200m.
        assert_eq!(u.cpu_nanocores, 200_000_000);
        assert_eq!(u.memory_bytes, 7);
        assert_eq!(u.window_ms, 15_000);
        assert_eq!(u.timestamp_ms, 115_000);
    }

    #[test]
    fn a_decreasing_counter_or_start_time_or_an_empty_window_gives_no_usage() {
        assert_eq!(
            resource_usage(&point(0, 115, 1.0, 0), &point(0, 100, 9.0, 0)),
            Err(RateError::CumulativeCpuDecreased)
        );
        assert_eq!(resource_usage(&point(5, 115, 10.0, 0), &point(9, 100, 9.0, 0)), Err(RateError::StartTimeDecreased));
        assert_eq!(resource_usage(&point(0, 100, 10.0, 0), &point(0, 100, 9.0, 0)), Err(RateError::EmptyWindow));
    }

    #[test]
    fn a_node_has_usage_after_its_second_sample_only() {
        let mut s = Storage::new(RES);
        s.store(node_batch(point(0, 100, 10.0, 1)));
        assert_eq!(s.node_usage("n1"), None);
        s.store(node_batch(point(0, 115, 13.0, 2)));
        assert_eq!(s.node_usage("n1").unwrap().cpu_nanocores, 200_000_000);
        s.store(node_batch(point(0, 130, 13.0, 3)));
        assert_eq!(s.node_usage("n1").unwrap().cpu_nanocores, 0);
    }

    #[test]
    fn a_repeated_sample_keeps_the_earlier_pair() {
        let mut s = Storage::new(RES);
        s.store(node_batch(point(0, 100, 10.0, 1)));
        s.store(node_batch(point(0, 115, 13.0, 2)));
        s.store(node_batch(point(0, 115, 13.0, 2)));
        assert_eq!(s.node_usage("n1").unwrap().cpu_nanocores, 200_000_000);
    }

    #[test]
    fn a_node_missing_from_a_scrape_is_forgotten() {
        let mut s = Storage::new(RES);
        s.store(node_batch(point(0, 100, 10.0, 1)));
        s.store(node_batch(point(0, 115, 13.0, 2)));
        s.store(MetricsBatch::default());
        assert_eq!(s.node_usage("n1"), None);
        s.store(node_batch(point(0, 130, 16.0, 2)));
        assert_eq!(s.node_usage("n1"), None);
    }

    #[test]
    fn a_fresh_container_gets_usage_from_its_first_sample() {
        let mut s = Storage::new(RES);
        // Started 12 s before its first sample (≥ 10 s, < one resolution): 1.2 core-seconds.
        s.store(pod_batch(&[("app", point(100, 112, 1.2, 9))]));
        let (containers, window) = s.pod_usage("default", "web").unwrap();
        assert_eq!(containers[0].1.cpu_nanocores, 100_000_000);
        assert_eq!(window.window_ms, 12_000);
    }

    #[test]
    fn a_container_too_young_or_too_old_at_its_first_sample_has_no_usage_yet() {
        let mut s = Storage::new(RES);
        s.store(pod_batch(&[("app", point(100, 105, 0.5, 9))]));
        assert!(s.pod_usage("default", "web").is_none());
        let mut s = Storage::new(RES);
        s.store(pod_batch(&[("app", point(100, 200, 0.5, 9))]));
        assert!(s.pod_usage("default", "web").is_none());
    }

    #[test]
    fn a_restarted_container_has_no_usage_until_its_next_sample() {
        let mut s = Storage::new(RES);
        s.store(pod_batch(&[("app", point(0, 100, 10.0, 1))]));
        s.store(pod_batch(&[("app", point(0, 115, 11.5, 1))]));
        assert!(s.pod_usage("default", "web").is_some());
        // Restarted at 120 (after the stored sample at 115), sampled at 200.
        s.store(pod_batch(&[("app", point(120, 200, 0.1, 1))]));
        assert!(s.pod_usage("default", "web").is_none());
        s.store(pod_batch(&[("app", point(120, 215, 1.6, 1))]));
        assert_eq!(s.pod_usage("default", "web").unwrap().0[0].1.cpu_nanocores, 100_000_000);
    }

    #[test]
    fn a_pod_has_usage_only_when_every_container_has() {
        let mut s = Storage::new(RES);
        s.store(pod_batch(&[("app", point(0, 100, 10.0, 1))]));
        s.store(pod_batch(&[("app", point(0, 115, 11.5, 1)), ("sidecar", point(0, 115, 1.0, 1))]));
        assert!(s.pod_usage("default", "web").is_none());
        s.store(pod_batch(&[("app", point(0, 130, 13.0, 1)), ("sidecar", point(0, 130, 1.0, 1))]));
        let (containers, _) = s.pod_usage("default", "web").unwrap();
        assert_eq!(containers.len(), 2);
    }
}
