//! `metrics.k8s.io/v1beta1` served in process: what metrics-server
//! (<https://github.com/kubernetes-sigs/metrics-server>) does as an aggregated API server,
//! here a part of the API server, enabled by [`crate::Config::metric_resolution`].
//!
//! - [`scraper`]: every resolution (15 s by default, metrics-server's `--metric-resolution`),
//!   each node's kubelet `/metrics/resource` is read ([`decode`]); simulated nodes are sampled
//!   from their pods' requests and the `skiff.io/simulated-*-usage` annotations ([`synthetic`]);
//! - [`storage`]: the last two samples of every node and container, and CPU rates from them;
//! - [`api`]: NodeMetrics and PodMetrics, get and list with label and field selectors, Tables.
//!
//! Reading the nodes and pods from the API server's own watch caches is what an aggregated
//! metrics-server does with its informers, without a second copy of every pod.

use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::resources::ResourceDef;

pub mod api;
pub mod decode;
pub mod scraper;
pub mod storage;
pub mod synthetic;

/// The API group.
pub const GROUP: &str = "metrics.k8s.io";
/// `apiVersion` of NodeMetrics and PodMetrics.
pub const API_VERSION: &str = "metrics.k8s.io/v1beta1";
/// metrics-server's default `--metric-resolution`.
pub const DEFAULT_METRIC_RESOLUTION: Duration = Duration::from_secs(15);

const VERBS: &[&str] = &["get", "list"];

/// The two served resources: cluster-scoped `nodes` (NodeMetrics) and namespaced `pods`
/// (PodMetrics).
pub fn resource_defs() -> Vec<ResourceDef> {
    let def = |resource, singular, kind, namespaced| ResourceDef {
        group: GROUP,
        version: "v1beta1",
        resource,
        singular,
        kind,
        namespaced,
        short_names: &[],
        categories: &[],
        verbs: VERBS,
        subresources: &[],
        storage: "",
        generation: false,
        create_on_update: false,
        custom: None,
    };
    vec![def("nodes", "nodemetrics", "NodeMetrics", false), def("pods", "podmetrics", "PodMetrics", true)]
}

/// The scraped samples and the state of the synthetic counters.
pub struct MetricsServer {
    pub(crate) storage: RwLock<storage::Storage>,
    pub(crate) counters: Mutex<synthetic::SyntheticCounters>,
    pub(crate) resolution: Duration,
}

impl MetricsServer {
    /// An empty metrics server scraping every `resolution`.
    pub fn new(resolution: Duration) -> Self {
        MetricsServer {
            storage: RwLock::new(storage::Storage::new(resolution)),
            counters: Mutex::default(),
            resolution,
        }
    }

    /// How often nodes are scraped.
    pub fn resolution(&self) -> Duration {
        self.resolution
    }
}
