//! The HPA's resource metrics source (`pkg/controller/podautoscaler/metrics`): per-pod usage of
//! one resource, read from `metrics.k8s.io/v1beta1` PodMetrics listed by the target's selector
//! ([`RestMetricsClient`], the upstream `resourceMetricsClient`). The [`MetricsClient`] trait is
//! the seam unit tests replace with a fixed table.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use skiff_runtime::api::{ApiClient, ApiResource};

/// One pod's usage sample (`metricsclient.PodMetric`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodMetric {
    /// When the sample was taken.
    pub timestamp: Timestamp,
    /// The window the usage was averaged over.
    pub window: Duration,
    /// Usage in milli-units (millicores for cpu, milli-bytes for memory).
    pub value: i64,
}

/// Samples by pod name (`PodMetricsInfo`).
pub type PodMetricsInfo = BTreeMap<String, PodMetric>;

/// A source of per-pod resource usage.
#[async_trait]
pub trait MetricsClient: Send + Sync {
    /// `GetResourceMetric`: the usage of `resource` of the pods of `namespace` matching
    /// `selector` (a label selector string), summed over their containers or, with
    /// `container`, of that container only; with the timestamp of the first sample.
    ///
    /// # Errors
    /// The message of a failed request, `no metrics returned from resource metrics API` when
    /// no pod has metrics, and a `container` missing from a pod's metrics.
    async fn get_resource_metric(
        &self,
        resource: &str,
        namespace: &str,
        selector: &str,
        container: Option<&str>,
    ) -> Result<(PodMetricsInfo, Timestamp), String>;
}

/// `metrics.k8s.io/v1beta1` `pods`.
pub fn pod_metrics_resource() -> ApiResource {
    ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: "PodMetrics".into(),
        plural: "pods".into(),
    }
}

/// Parses a Go `time.Duration` string as metav1.Duration writes it (`30s`, `1m0s`, `1.5s`,
/// `250ms`, `1h2m3s`); `None` when it does not parse.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

/// Milli-units of a quantity (`Quantity.MilliValue()`, rounded up as Go does).
fn milli_value(q: &Value) -> Option<i64> {
    let units = skiff_apimachinery::quantity::parse_quantity_value(q).ok()?;
    Some((units * 1000.0).ceil() as i64)
}

/// `getPodMetrics` / `getContainerMetrics` over a list of PodMetrics objects.
///
/// # Errors
/// `container` absent from a pod's metrics.
pub fn pod_metrics_info(items: &[Value], resource: &str, container: Option<&str>) -> Result<PodMetricsInfo, String> {
    let mut out = PodMetricsInfo::new();
    for m in items {
        let name = m.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let timestamp =
            m.get("timestamp").and_then(Value::as_str).and_then(|t| t.parse().ok()).unwrap_or(Timestamp::UNIX_EPOCH);
        let window = m.get("window").and_then(Value::as_str).and_then(parse_go_duration).unwrap_or(Duration::ZERO);
        let containers = m.get("containers").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        match container {
            Some(want) => {
                let Some(c) = containers.iter().find(|c| c.get("name").and_then(Value::as_str) == Some(want)) else {
                    let ns = m.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
                    return Err(format!("container {want} not present in metrics for pod {ns}/{name}"));
                };
                if let Some(v) = c.pointer(&format!("/usage/{resource}")).and_then(milli_value) {
                    out.insert(name.to_string(), PodMetric { timestamp, window, value: v });
                }
            }
            None => {
                // A pod with a container lacking the resource is left out (as missing).
                let mut sum = 0i64;
                let mut missing = containers.is_empty();
                for c in containers {
                    match c.pointer(&format!("/usage/{resource}")).and_then(milli_value) {
                        Some(v) => sum += v,
                        None => {
                            missing = true;
                            break;
                        }
                    }
                }
                if !missing {
                    out.insert(name.to_string(), PodMetric { timestamp, window, value: sum });
                }
            }
        }
    }
    Ok(out)
}

/// [`MetricsClient`] over the API: lists `metrics.k8s.io/v1beta1` PodMetrics by selector.
pub struct RestMetricsClient {
    api: Arc<dyn ApiClient>,
}

impl RestMetricsClient {
    /// A client reading through `api`.
    pub fn new(api: Arc<dyn ApiClient>) -> Self {
        Self { api }
    }
}

#[async_trait]
impl MetricsClient for RestMetricsClient {
    async fn get_resource_metric(
        &self,
        resource: &str,
        namespace: &str,
        selector: &str,
        container: Option<&str>,
    ) -> Result<(PodMetricsInfo, Timestamp), String> {
        let items = self
            .api
            .list(&pod_metrics_resource(), Some(namespace), Some(selector))
            .await
            .map_err(|e| format!("unable to fetch metrics from resource metrics API: {}", e.message))?;
        if items.is_empty() {
            return Err("no metrics returned from resource metrics API".to_string());
        }
        let info = pod_metrics_info(&items, resource, container)?;
        let timestamp = items[0]
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok())
            .unwrap_or(Timestamp::UNIX_EPOCH);
        Ok((info, timestamp))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn go_durations_parse_as_metav1_writes_them() {
        assert_eq!(parse_go_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_go_duration("1m0s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1h2m3.5s"), Some(Duration::from_secs_f64(3723.5)));
        assert_eq!(parse_go_duration("soon"), None);
    }

    #[test]
    fn pod_usage_is_summed_over_containers_and_a_pod_missing_one_is_left_out() {
        let items = vec![
            json!({"metadata": {"name": "a", "namespace": "ns"}, "timestamp": "2024-01-01T00:00:00Z", "window": "30s",
                "containers": [{"name": "app", "usage": {"cpu": "100m"}}, {"name": "side", "usage": {"cpu": "0.05"}}]}),
            json!({"metadata": {"name": "b", "namespace": "ns"}, "timestamp": "2024-01-01T00:00:00Z", "window": "30s",
                "containers": [{"name": "app", "usage": {"cpu": "100m"}}, {"name": "side", "usage": {"memory": "1Mi"}}]}),
        ];
        let info = pod_metrics_info(&items, "cpu", None).unwrap();
        assert_eq!(info.len(), 1);
        assert_eq!(info["a"].value, 150);
        assert_eq!(info["a"].window, Duration::from_secs(30));
        let info = pod_metrics_info(&items, "cpu", Some("app")).unwrap();
        assert_eq!((info["a"].value, info["b"].value), (100, 100));
        assert_eq!(
            pod_metrics_info(&items, "cpu", Some("db")).unwrap_err(),
            "container db not present in metrics for pod ns/a"
        );
    }
}
