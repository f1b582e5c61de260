//! Synthetic usage of simulated nodes (`skiff.io/simulated=true`), which run no containers and
//! serve no `/metrics/resource`: the scraper samples them from their pods' specs instead.
//!
//! Per running pod, each container (and each restartable init container — a sidecar) uses:
//! - CPU: half its CPU request (1m without a request), unless the pod carries
//!   [`SIMULATED_CPU_USAGE_ANNOTATION`] (a quantity such as `250m`): the pod's total, split
//!   over its containers in proportion to their CPU requests (evenly when none has one);
//! - memory: half its memory request (1Mi without one), or [`SIMULATED_MEMORY_USAGE_ANNOTATION`]
//!   split the same way by memory requests.
//!
//! A node uses the sum of its pods. The cumulative CPU counters the rates are computed from are
//! kept here ([`SyntheticCounters`]) and advanced at each sample by the current rate, so a
//! changed annotation shows in full once the next scrape has run: tests and HorizontalPodAutoscaler
//! experiments drive load by annotating pods. A malformed annotation is ignored (the
//! request-based usage applies).

use std::collections::HashMap;

use serde_json::Value;
use skiff_apimachinery::quantity::parse_quantity;

use super::storage::{MetricsBatch, MetricsPoint};
use crate::util::{meta_str, parse_rfc3339};

/// Label of simulated nodes (value `true`), set by `skiff-kubelet`'s simulated nodes.
pub const SIMULATED_NODE_LABEL: &str = "skiff.io/simulated";
/// Pod annotation: the pod's simulated CPU usage, a quantity (`250m`, `1.5`).
pub const SIMULATED_CPU_USAGE_ANNOTATION: &str = "skiff.io/simulated-cpu-usage";
/// Pod annotation: the pod's simulated memory working set, a quantity (`64Mi`).
pub const SIMULATED_MEMORY_USAGE_ANNOTATION: &str = "skiff.io/simulated-memory-usage";

/// CPU of a container without a request, nanocores (1m).
const DEFAULT_CPU_NANOCORES: f64 = 1e6;
/// Memory of a container without a request, bytes (1Mi).
const DEFAULT_MEMORY_BYTES: f64 = 1_048_576.0;

/// The simulated usage of one container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRate {
    /// Container name.
    pub name: String,
    /// CPU, nanocores.
    pub cpu_nanocores: f64,
    /// Working set, bytes.
    pub memory_bytes: f64,
}

fn request(container: &Value, resource: &str) -> Option<f64> {
    let r = &container["resources"];
    let q = r["requests"].get(resource).or_else(|| r["limits"].get(resource))?;
    q.as_str().and_then(|s| parse_quantity(s).ok()).or_else(|| q.as_f64()).filter(|v| v.is_finite() && *v >= 0.0)
}

fn annotation(pod: &Value, key: &str) -> Option<f64> {
    let s = pod["metadata"]["annotations"][key].as_str()?;
    parse_quantity(s.trim()).ok().filter(|v| v.is_finite() && *v >= 0.0)
}

/// The containers a simulated node reports: regular containers and sidecars.
fn running_containers(pod: &Value) -> Vec<&Value> {
    let sidecars = pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"].as_str() == Some("Always"));
    sidecars.chain(pod["spec"]["containers"].as_array().into_iter().flatten()).collect()
}

/// Splits `total` over containers by `weights` (evenly when they sum to zero).
fn split(total: f64, weights: &[f64]) -> Vec<f64> {
    let sum: f64 = weights.iter().sum();
    if sum > 0.0 {
        weights.iter().map(|w| total * w / sum).collect()
    } else {
        vec![total / weights.len().max(1) as f64; weights.len()]
    }
}

/// The simulated usage of each container of `pod` (see the module docs).
pub fn pod_rates(pod: &Value) -> Vec<ContainerRate> {
    let containers = running_containers(pod);
    let cpu_req: Vec<Option<f64>> = containers.iter().map(|c| request(c, "cpu")).collect();
    let mem_req: Vec<Option<f64>> = containers.iter().map(|c| request(c, "memory")).collect();
    let weights = |r: &[Option<f64>]| r.iter().map(|v| v.unwrap_or(0.0)).collect::<Vec<_>>();
    let cpu: Vec<f64> = match annotation(pod, SIMULATED_CPU_USAGE_ANNOTATION) {
        Some(total) => split(total * 1e9, &weights(&cpu_req)),
        None => cpu_req.iter().map(|r| r.map_or(DEFAULT_CPU_NANOCORES, |v| v * 1e9 / 2.0)).collect(),
    };
    let memory: Vec<f64> = match annotation(pod, SIMULATED_MEMORY_USAGE_ANNOTATION) {
        Some(total) => split(total, &weights(&mem_req)),
        None => mem_req.iter().map(|r| r.map_or(DEFAULT_MEMORY_BYTES, |v| v / 2.0)).collect(),
    };
    containers
        .iter()
        .zip(cpu.into_iter().zip(memory))
        .map(|(c, (cpu_nanocores, memory_bytes))| ContainerRate {
            name: c["name"].as_str().unwrap_or_default().to_string(),
            cpu_nanocores,
            memory_bytes,
        })
        .collect()
}

/// The cumulative CPU counters of simulated nodes and containers, advanced at every sample.
#[derive(Debug, Default)]
pub struct SyntheticCounters {
    /// By node name, or by `pod uid/container`: (the counter's start ms, last sample ms,
    /// cumulative nanocore-seconds).
    counters: HashMap<String, (i64, i64, f64)>,
}

impl SyntheticCounters {
    /// The counter of `key` at `now_ms` and the time it started from, given the current rate:
    /// started at `start_ms` with this rate when first seen, advanced by `rate × elapsed` after.
    /// The start stays the first one, so a container's start time that becomes known later
    /// (its status's `startedAt` after the pod's `startTime`) does not skew the first rate.
    fn advance(&mut self, key: String, start_ms: i64, now_ms: i64, rate_nanocores: f64) -> (u64, i64) {
        let origin = start_ms.min(now_ms);
        let entry = self.counters.entry(key).or_insert((origin, origin, 0.0));
        let elapsed_s = (now_ms - entry.1).max(0) as f64 / 1000.0;
        entry.2 += rate_nanocores * elapsed_s;
        entry.1 = now_ms.max(entry.1);
        (entry.2 as u64, entry.0)
    }

    /// Forgets series not sampled in the last `keep` sample rounds' keys (`seen`).
    fn retain(&mut self, seen: &std::collections::HashSet<String>) {
        self.counters.retain(|k, _| seen.contains(k));
    }

    /// One sample of simulated nodes: `nodes` (Node objects labelled
    /// [`SIMULATED_NODE_LABEL`]) with the pods bound to them (`pods`, any order) at `now_ms`.
    /// Only pods in phase Running count.
    pub fn sample(&mut self, nodes: &[&Value], pods: &[&Value], now_ms: i64) -> MetricsBatch {
        let mut by_node: HashMap<&str, Vec<&Value>> = HashMap::new();
        for pod in pods {
            if pod["status"]["phase"] == "Running" && pod["metadata"]["deletionTimestamp"].is_null() {
                by_node.entry(pod["spec"]["nodeName"].as_str().unwrap_or_default()).or_default().push(pod);
            }
        }
        let ms = |t: &Value| t.as_str().and_then(parse_rfc3339).map(|s| s * 1000);
        let mut batch = MetricsBatch::default();
        let mut seen = std::collections::HashSet::new();
        for node in nodes {
            let node_name = meta_str(node, "name");
            let (mut node_cpu, mut node_mem) = (0.0, 0.0);
            for pod in by_node.get(node_name).map(Vec::as_slice).unwrap_or_default() {
                let uid = meta_str(pod, "uid");
                let pod_start = ms(&pod["status"]["startTime"]).or_else(|| ms(&pod["metadata"]["creationTimestamp"]));
                let statuses = pod["status"]["containerStatuses"].as_array().into_iter().flatten();
                let statuses: Vec<&Value> =
                    statuses.chain(pod["status"]["initContainerStatuses"].as_array().into_iter().flatten()).collect();
                let mut points = Vec::new();
                for rate in pod_rates(pod) {
                    let started = statuses
                        .iter()
                        .find(|s| s["name"] == rate.name.as_str())
                        .and_then(|s| ms(&s["state"]["running"]["startedAt"]))
                        .or(pod_start)
                        .unwrap_or(now_ms);
                    let key = format!("{uid}/{}", rate.name);
                    seen.insert(key.clone());
                    let (cpu, started) = self.advance(key, started, now_ms, rate.cpu_nanocores);
                    node_cpu += rate.cpu_nanocores;
                    node_mem += rate.memory_bytes;
                    points.push((
                        rate.name,
                        MetricsPoint {
                            start_ms: started,
                            timestamp_ms: now_ms,
                            cumulative_cpu_ns: cpu,
                            memory_bytes: rate.memory_bytes as u64,
                        },
                    ));
                }
                batch.pods.insert((meta_str(pod, "namespace").to_string(), meta_str(pod, "name").to_string()), points);
            }
            let node_start = ms(&node["metadata"]["creationTimestamp"]).unwrap_or(now_ms);
            seen.insert(node_name.to_string());
            let (cpu, node_start) = self.advance(node_name.to_string(), node_start, now_ms, node_cpu);
            batch.nodes.insert(
                node_name.to_string(),
                MetricsPoint {
                    start_ms: node_start,
                    timestamp_ms: now_ms,
                    cumulative_cpu_ns: cpu,
                    memory_bytes: node_mem as u64,
                },
            );
        }
        self.retain(&seen);
        batch
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::metricsserver::storage::Storage;

    #[test]
    fn a_counter_keeps_its_first_start_when_a_later_start_time_becomes_known() {
        let mut c = SyntheticCounters::default();
        // First seen from the pod's startTime (1 s), later with the container's startedAt (2 s).
        assert_eq!(c.advance("u/app".into(), 1_000, 3_000, 1.5e8), (300_000_000, 1_000));
        let (cpu, start) = c.advance("u/app".into(), 2_000, 5_000, 1.5e8);
        assert_eq!(start, 1_000);
        // The rate since the counter's start is exactly the simulated 150m.
        assert_eq!(cpu as f64 / ((5_000 - start) as f64 / 1000.0), 1.5e8);
    }

    fn pod(annotations: Value, containers: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default", "uid": "u1", "annotations": annotations,
                "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"nodeName": "sim-node-0", "containers": containers},
               "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}})
    }

    #[test]
    fn usage_is_half_the_requests_without_annotations() {
        let p = pod(
            json!({}),
            json!([{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}}, {"name": "b"}]),
        );
        let r = pod_rates(&p);
        assert_eq!(r[0].cpu_nanocores, 250e6);
        assert_eq!(r[0].memory_bytes, 64.0 * 1024.0 * 1024.0);
        assert_eq!(r[1].cpu_nanocores, 1e6);
        assert_eq!(r[1].memory_bytes, 1_048_576.0);
    }

    #[test]
    fn the_cpu_annotation_is_split_by_requests() {
        let p = pod(
            json!({SIMULATED_CPU_USAGE_ANNOTATION: "900m", SIMULATED_MEMORY_USAGE_ANNOTATION: "10Mi"}),
            json!([{"name": "a", "resources": {"requests": {"cpu": "200m"}}}, {"name": "b", "resources": {"requests": {"cpu": "100m"}}}]),
        );
        let r = pod_rates(&p);
        assert!((r[0].cpu_nanocores - 600e6).abs() < 1.0, "{r:?}");
        assert!((r[1].cpu_nanocores - 300e6).abs() < 1.0, "{r:?}");
        assert_eq!(r[0].memory_bytes + r[1].memory_bytes, 10.0 * 1024.0 * 1024.0);
    }

    #[test]
    fn a_malformed_annotation_falls_back_to_requests() {
        let p = pod(
            json!({SIMULATED_CPU_USAGE_ANNOTATION: "lots"}),
            json!([{"name": "a", "resources": {"requests": {"cpu": "1"}}}]),
        );
        assert_eq!(pod_rates(&p)[0].cpu_nanocores, 5e8);
    }

    #[test]
    fn sidecars_are_reported_and_other_init_containers_are_not() {
        let mut p = pod(json!({}), json!([{"name": "app"}]));
        p["spec"]["initContainers"] = json!([{"name": "setup"}, {"name": "proxy", "restartPolicy": "Always"}]);
        let names: Vec<String> = pod_rates(&p).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["proxy", "app"]);
    }

    #[test]
    fn two_samples_give_the_annotated_rate_and_the_node_the_sum() {
        let node = json!({"metadata": {"name": "sim-node-0", "creationTimestamp": "2026-01-01T00:00:00Z"}});
        let mut p = pod(json!({SIMULATED_CPU_USAGE_ANNOTATION: "250m"}), json!([{"name": "a"}]));
        let t0 = parse_rfc3339("2026-01-01T01:00:00Z").unwrap() * 1000;
        let mut counters = SyntheticCounters::default();
        let mut storage = Storage::new(std::time::Duration::from_secs(15));
        storage.store(counters.sample(&[&node], &[&p], t0));
        storage.store(counters.sample(&[&node], &[&p], t0 + 15_000));
        let (c, _) = storage.pod_usage("default", "web").unwrap();
        assert_eq!(c[0].1.cpu_nanocores, 250_000_000);
        assert_eq!(storage.node_usage("sim-node-0").unwrap().cpu_nanocores, 250_000_000);
        // A new annotation shows after one more sample.
        p["metadata"]["annotations"][SIMULATED_CPU_USAGE_ANNOTATION] = json!("1");
        storage.store(counters.sample(&[&node], &[&p], t0 + 30_000));
        assert_eq!(storage.pod_usage("default", "web").unwrap().0[0].1.cpu_nanocores, 1_000_000_000);
    }

    #[test]
    fn pods_that_are_not_running_are_not_sampled() {
        let node = json!({"metadata": {"name": "sim-node-0"}});
        let mut p = pod(json!({}), json!([{"name": "a"}]));
        p["status"]["phase"] = json!("Pending");
        let batch = SyntheticCounters::default().sample(&[&node], &[&p], 1000);
        assert!(batch.pods.is_empty());
        assert_eq!(batch.nodes["sim-node-0"].cumulative_cpu_ns, 0);
    }
}
