//! Prometheus metrics served at `/metrics`, named as kube-apiserver names them
//! (<https://kubernetes.io/docs/reference/instrumentation/metrics/>).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

fn latency_histogram() -> Histogram {
    // 0.5 ms … ~16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Every metric of the API server.
pub struct Metrics {
    registry: Registry,
    /// `apiserver_request_total{verb,group,resource,subresource,code}`.
    pub requests: Family<Labels, Counter>,
    /// `apiserver_request_duration_seconds{verb,group,resource,subresource}` (watches excluded).
    pub request_duration: Family<Labels, Histogram, fn() -> Histogram>,
    /// `apiserver_registered_watchers{group,resource}`: open watch streams.
    pub watchers: Family<Labels, Gauge>,
    /// `etcd_request_duration_seconds{operation,type}`: store latency, whichever backend.
    pub store_duration: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<Labels, Counter>::default();
        let request_duration = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let watchers = Family::<Labels, Gauge>::default();
        let store_duration = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests by verb, resource and HTTP code",
            requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds by verb and resource",
            request_duration.clone(),
        );
        registry.register(
            "apiserver_registered_watchers",
            "Number of currently open watches by resource",
            watchers.clone(),
        );
        registry.register(
            "etcd_request_duration_seconds",
            "Store request latency in seconds by operation and object type",
            store_duration.clone(),
        );
        Self { registry, requests, request_duration, watchers, store_duration }
    }
}

impl Metrics {
    /// Records one finished request.
    pub fn observe_request(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        code: u16,
        secs: Option<f64>,
    ) {
        let mut labels: Labels = vec![
            ("verb".into(), verb.into()),
            ("group".into(), group.into()),
            ("resource".into(), resource.into()),
            ("subresource".into(), subresource.into()),
        ];
        if let Some(s) = secs {
            self.request_duration.get_or_create(&labels).observe(s);
        }
        labels.push(("code".into(), code.to_string()));
        self.requests.get_or_create(&labels).inc();
    }

    /// Records one store call.
    pub fn observe_store(&self, operation: &str, resource: &str, secs: f64) {
        let labels: Labels = vec![("operation".into(), operation.into()), ("type".into(), resource.into())];
        self.store_duration.get_or_create(&labels).observe(secs);
    }

    /// The watcher gauge of one resource.
    pub fn watch_gauge(&self, group: &str, resource: &str) -> Gauge {
        let labels: Labels = vec![("group".into(), group.into()), ("resource".into(), resource.into())];
        self.watchers.get_or_create(&labels).clone()
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_verb_resource_and_code() {
        let m = Metrics::default();
        m.observe_request("get", "", "pods", "", 200, Some(0.001));
        m.observe_request("get", "", "pods", "", 200, Some(0.002));
        let text = m.render();
        assert!(
            text.contains(
                "apiserver_request_total{verb=\"get\",group=\"\",resource=\"pods\",subresource=\"\",code=\"200\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains("apiserver_request_duration_seconds_count"));
    }
}
