//! Prometheus metrics served at `/metrics`, named as kube-apiserver names them
//! (<https://kubernetes.io/docs/reference/instrumentation/metrics/>).
//!
//! The API server registers its families in a [`SharedRegistry`]; the in-process components
//! of `skiff server` (controller manager, scheduler) register theirs in the same one, so a
//! single scrape of `/metrics` shows the whole control plane.

use std::sync::{Arc, Mutex, MutexGuard};

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

/// A Prometheus [`Registry`] shared by the API server and in-process components. Cloning
/// shares it. Families are registered once (registering one name twice would expose it
/// twice); `/metrics` encodes everything registered so far.
#[derive(Clone, Default)]
pub struct SharedRegistry(Arc<Mutex<Registry>>);

impl SharedRegistry {
    /// Locks the registry, e.g. to register families: `registry.lock().register(…)`. Hold the
    /// guard only for registering, never across an `.await`.
    pub fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while registering leaves the registry usable: families are added whole.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The Prometheus text exposition (format 0.0.4 compatible) of every registered metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.lock());
        out
    }
}

/// Every metric of the API server.
pub struct Metrics {
    registry: SharedRegistry,
    /// `apiserver_request_total{verb,group,resource,subresource,code}`.
    pub requests: Family<Labels, Counter>,
    /// `apiserver_request_duration_seconds{verb,group,resource,subresource}` (watches excluded).
    pub request_duration: Family<Labels, Histogram, fn() -> Histogram>,
    /// `apiserver_registered_watchers{group,resource}`: open watch streams.
    pub watchers: Family<Labels, Gauge>,
    /// `etcd_request_duration_seconds{operation,type}`: store latency, whichever backend.
    pub store_duration: Family<Labels, Histogram, fn() -> Histogram>,
    /// `apiserver_current_inflight_requests{request_kind}`: seats in use of the max-in-flight
    /// pools (`readOnly`, `mutating`).
    pub inflight: Family<Labels, Gauge>,
    /// `apiserver_dropped_requests_total{request_kind}`: requests refused with 429 by the
    /// max-in-flight filter.
    pub dropped: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(SharedRegistry::default())
    }
}

impl Metrics {
    /// The API server's metric families, registered in `shared`.
    pub fn new(shared: SharedRegistry) -> Self {
        let mut guard = shared.lock();
        let registry = &mut *guard;
        let requests = Family::<Labels, Counter>::default();
        let request_duration = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let watchers = Family::<Labels, Gauge>::default();
        let store_duration = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let inflight = Family::<Labels, Gauge>::default();
        let dropped = Family::<Labels, Counter>::default();
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
        registry.register(
            "apiserver_current_inflight_requests",
            "Maximal number of currently used inflight request limit of this apiserver per request kind",
            inflight.clone(),
        );
        registry.register(
            "apiserver_dropped_requests",
            "Number of requests dropped with 'Try again later' response",
            dropped.clone(),
        );
        drop(guard);
        Self { registry: shared, requests, request_duration, watchers, store_duration, inflight, dropped }
    }

    /// The registry `/metrics` serves; components register their families here.
    pub fn registry(&self) -> &SharedRegistry {
        &self.registry
    }

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

    /// The in-flight gauge of one request kind (`readOnly` or `mutating`).
    pub fn inflight_gauge(&self, kind: &str) -> Gauge {
        let labels: Labels = vec![("request_kind".into(), kind.into())];
        self.inflight.get_or_create(&labels).clone()
    }

    /// Counts one request refused with 429.
    pub fn observe_dropped(&self, kind: &str) {
        let labels: Labels = vec![("request_kind".into(), kind.into())];
        self.dropped.get_or_create(&labels).inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.registry.encode()
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

    #[test]
    fn families_registered_by_components_are_rendered_with_the_api_servers() {
        let m = Metrics::default();
        let reconciles = Counter::<u64>::default();
        m.registry().lock().register("controller_reconcile", "Reconciles", reconciles.clone());
        reconciles.inc();
        m.observe_request("list", "", "pods", "", 200, Some(0.001));
        let text = m.render();
        assert!(text.contains("controller_reconcile_total 1"), "{text}");
        assert!(text.contains("apiserver_request_total{verb=\"list\""), "{text}");
    }
}
