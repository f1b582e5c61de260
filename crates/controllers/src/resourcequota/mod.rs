//! The resource quota controller (`pkg/controller/resourcequota`, kube-controller-manager's
//! `resourcequota`): keeps every ResourceQuota's `status.hard` (= `spec.hard`) and
//! `status.used` (what the objects of its namespace use, restricted to the hard keys) current,
//! so that new quotas get their first status and deleted objects release their usage
//! (<https://kubernetes.io/docs/concepts/policy/resource-quotas/>).
//!
//! The API server's ResourceQuota admission plugin charges each create to `status.used` before
//! it is persisted and refuses a quota whose status is unknown; this controller recomputes the
//! usage from its informers with the same evaluation (`skiff_admission::plugins::resource_quota`).
//!
//! - A quota is queued when it is added or updated, when an object it may count appears,
//!   disappears or (pods, services, claims) changes its usage in the quota's namespace
//!   (replenishment), and every `--resource-quota-sync-period` (full resync).
//! - Pods, services and PersistentVolumeClaims are read whole (their usage depends on their
//!   spec and phase) from the shared typed informers. Every other counted resource
//!   (`configmaps`, `secrets`, `count/<resource>.<group>`, custom resources included) only
//!   counts objects, so it is monitored through a metadata view of the shared informer
//!   (`resource_quota_monitor.go`), created the first time a quota needs it; resources the
//!   factory has no typed informer for are resolved through API discovery.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};

use skiff_admission::plugins::resource_quota::{object_usage, quota_status};
use skiff_apimachinery::quantity::Quantity;
use skiff_runtime::api::{ApiClient, ApiResource, DiscoveredResource, resource_of};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult, Reconciler};
use skiff_runtime::informer::{
    HandlerFns, Informer, MetaEvent, MetaEventHandler, MetaInformer, SharedInformerFactory, Store,
};
use skiff_runtime::workqueue::WorkQueue;

/// `--concurrent-resource-quota-syncs`' default.
pub const DEFAULT_WORKERS: usize = 5;
/// `--resource-quota-sync-period`'s default: how often every quota is recomputed.
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(5 * 60);
/// How long a sync waits for a newly created monitor's first list before trying again.
const MONITOR_SYNC_RETRY: Duration = Duration::from_millis(200);
/// The least time between two discovery requests made for a resource no monitor knows.
const DISCOVERY_RETRY: Duration = Duration::from_secs(5);

/// A resource a quota counts, as `(group, plural)`.
type GroupResource = (String, String);

/// The resources whose objects a quota resource name (a `spec.hard` key) counts: the inverse of
/// the evaluators' usage (`object_usage`). `count/<resource>[.<group>]` counts objects of any
/// resource; the legacy names count core kinds; compute resources count pods; storage
/// requests count PersistentVolumeClaims.
pub fn counted_resources(key: &str) -> Option<GroupResource> {
    if let Some(rest) = key.strip_prefix("count/") {
        let (resource, group) = rest.split_once('.').unwrap_or((rest, ""));
        return Some((group.to_string(), resource.to_string()));
    }
    let core = |r: &str| Some((String::new(), r.to_string()));
    if key == "persistentvolumeclaims" || key == "requests.storage" || key.contains(".storageclass.storage.k8s.io/") {
        return core("persistentvolumeclaims");
    }
    if matches!(key, "pods" | "cpu" | "memory" | "ephemeral-storage")
        || key.starts_with("requests.")
        || key.starts_with("limits.")
    {
        return core("pods");
    }
    if key == "services" || key.starts_with("services.") {
        return core("services");
    }
    match key {
        "secrets" | "configmaps" | "replicationcontrollers" | "resourcequotas" => core(key),
        _ => None,
    }
}

/// The quantities of `hard` or `used` in a quota status, by resource name.
fn quantities(v: &Value) -> HashMap<&str, i128> {
    v.as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.as_str(), Quantity::from_json(v)?.milli))).collect())
        .unwrap_or_default()
}

/// Whether two quota statuses hold the same quantities (`1Gi` and `1073741824` are equal), so
/// a status that only differs in spelling is not rewritten.
fn same_status(a: &Value, b: &Value) -> bool {
    ["hard", "used"].iter().all(|f| quantities(&a[f]) == quantities(&b[f]))
}

fn to_json<K: Serialize>(obj: &K) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

/// Queues every quota of a namespace (`replenishQuota`).
fn enqueue_namespace(quotas: &Store<ResourceQuota>, queue: &WorkQueue<String>, namespace: &str) {
    for q in quotas.list_namespace(namespace) {
        queue.add(format!("{namespace}/{}", q.metadata.name.as_deref().unwrap_or_default()));
    }
}

/// Queues a namespace's quotas when a monitored object appears or disappears.
struct Replenish {
    quotas: Store<ResourceQuota>,
    queue: Arc<WorkQueue<String>>,
}

impl MetaEventHandler for Replenish {
    fn on_meta_event(&self, _resource: &ApiResource, event: MetaEvent<'_>) {
        if let MetaEvent::Add(meta) | MetaEvent::Delete(meta) = event
            && let Some(ns) = &meta.namespace
        {
            enqueue_namespace(&self.quotas, &self.queue, ns);
        }
    }
}

/// The typed informers of the resources whose usage depends on more than their existence.
struct Evaluated {
    pods: Arc<Informer<Pod>>,
    services: Arc<Informer<Service>>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
}

/// The resources API discovery found, and when.
#[derive(Default)]
struct Discovery {
    resources: Vec<DiscoveredResource>,
    fetched: Option<Instant>,
}

/// The controller; queue keys are `namespace/name` of ResourceQuotas.
pub struct ResourceQuotaController {
    api: Arc<dyn ApiClient>,
    factory: Arc<SharedInformerFactory>,
    quotas: Arc<Informer<ResourceQuota>>,
    evaluated: Evaluated,
    monitors: Mutex<HashMap<GroupResource, Arc<dyn MetaInformer>>>,
    discovery: tokio::sync::Mutex<Discovery>,
    queue: Arc<WorkQueue<String>>,
}

/// Adds the replenishment handler of a typed informer: adds and deletes queue the namespace's
/// quotas, updates only when the object's usage changed (a pod turning terminal, a service
/// changing type). Namespaces without quotas cost one index lookup.
fn replenish_on<K>(informer: &Informer<K>, quotas: &Arc<Informer<ResourceQuota>>, queue: &Arc<WorkQueue<String>>)
where
    K: kube::Resource<DynamicType = ()> + Serialize + Clone + Send + Sync + 'static,
{
    let resource = K::plural(&()).to_string();
    let on = |quotas: Store<ResourceQuota>, queue: Arc<WorkQueue<String>>| {
        move |obj: &Arc<K>| {
            if let Some(ns) = obj.meta().namespace.as_deref() {
                enqueue_namespace(&quotas, &queue, ns);
            }
        }
    };
    let (store, q) = (quotas.store().clone(), queue.clone());
    informer.add_event_handler(Arc::new(
        HandlerFns::new()
            .on_add(on(quotas.store().clone(), queue.clone()))
            .on_delete(on(quotas.store().clone(), queue.clone()))
            .on_update(move |old: &Arc<K>, new: &Arc<K>| {
                let Some(ns) = new.meta().namespace.as_deref() else { return };
                if store.list_namespace(ns).is_empty() {
                    return;
                }
                if object_usage("", &resource, &to_json(old.as_ref()))
                    != object_usage("", &resource, &to_json(new.as_ref()))
                {
                    enqueue_namespace(&store, &q, ns);
                }
            }),
    ));
}

impl ResourceQuotaController {
    /// Creates the controller on the factory's ResourceQuota, Pod, Service and
    /// PersistentVolumeClaim informers; the monitors of other counted resources are added to
    /// the same factory when a quota first needs them.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: Arc<SharedInformerFactory>,
        queue: Arc<WorkQueue<String>>,
    ) -> Arc<Self> {
        let quotas = factory.informer::<ResourceQuota>();
        let enqueue = |q: Arc<WorkQueue<String>>| {
            move |rq: &Arc<ResourceQuota>| {
                q.add(format!(
                    "{}/{}",
                    rq.metadata.namespace.as_deref().unwrap_or_default(),
                    rq.metadata.name.as_deref().unwrap_or_default()
                ))
            }
        };
        let on_update = enqueue(queue.clone());
        quotas.add_event_handler(Arc::new(
            HandlerFns::new().on_add(enqueue(queue.clone())).on_update(move |_, rq: &Arc<ResourceQuota>| on_update(rq)),
        ));
        let evaluated = Evaluated {
            pods: factory.informer::<Pod>(),
            services: factory.informer::<Service>(),
            claims: factory.informer::<PersistentVolumeClaim>(),
        };
        replenish_on(&evaluated.pods, &quotas, &queue);
        replenish_on(&evaluated.services, &quotas, &queue);
        replenish_on(&evaluated.claims, &quotas, &queue);
        Arc::new(Self {
            api,
            factory,
            quotas,
            evaluated,
            monitors: Mutex::new(HashMap::new()),
            discovery: tokio::sync::Mutex::new(Discovery::default()),
            queue,
        })
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// Queues every quota (the full resync).
    pub fn enqueue_all(&self) {
        for key in self.quotas.store().keys() {
            self.queue.add(key);
        }
    }

    /// Queues every quota each `period` until cancelled.
    pub async fn run_resync(self: Arc<Self>, period: Duration) {
        loop {
            tokio::time::sleep(period).await;
            self.enqueue_all();
        }
    }

    /// The resource a counted `(group, plural)` is served as: a core kind the quota evaluators
    /// know, or what discovery lists as namespaced (asked again at most every few seconds for
    /// a resource it did not list, e.g. a CRD not established yet).
    async fn resolve(&self, gr: &GroupResource) -> Result<Option<ApiResource>, ReconcileError> {
        if gr.0.is_empty() {
            let known = match gr.1.as_str() {
                "configmaps" => Some(resource_of::<ConfigMap>()),
                "secrets" => Some(resource_of::<Secret>()),
                "replicationcontrollers" => Some(resource_of::<ReplicationController>()),
                "resourcequotas" => Some(resource_of::<ResourceQuota>()),
                _ => None,
            };
            if known.is_some() {
                return Ok(known);
            }
        }
        let find = |d: &Discovery| {
            d.resources
                .iter()
                .find(|r| r.namespaced && r.resource.group == gr.0 && r.resource.plural == gr.1)
                .map(|r| r.resource.clone())
        };
        let mut discovery = self.discovery.lock().await;
        if let Some(ar) = find(&discovery) {
            return Ok(Some(ar));
        }
        if discovery.fetched.is_some_and(|t| t.elapsed() < DISCOVERY_RETRY) {
            return Ok(None);
        }
        discovery.resources = self.api.discover().await?;
        discovery.fetched = Some(Instant::now());
        Ok(find(&discovery))
    }

    /// The monitor (metadata view of the shared informer) of a counted resource, created and
    /// started on first use; `None` when the API does not serve the resource.
    async fn monitor(&self, gr: &GroupResource) -> Result<Option<Arc<dyn MetaInformer>>, ReconcileError> {
        if let Some(m) = self.monitors.lock().get(gr) {
            return Ok(Some(m.clone()));
        }
        let Some(ar) = self.resolve(gr).await? else { return Ok(None) };
        let mut monitors = self.monitors.lock();
        if let Some(m) = monitors.get(gr) {
            return Ok(Some(m.clone()));
        }
        let informer = self.factory.meta_informer(&ar);
        informer
            .add_meta_handler(Arc::new(Replenish { quotas: self.quotas.store().clone(), queue: self.queue.clone() }));
        self.factory.start();
        monitors.insert(gr.clone(), informer.clone());
        Ok(Some(informer))
    }

    /// The objects of `namespace` a quota counting `gr` sees, as `(object)` values (whole for
    /// pods, services and claims, metadata otherwise); `None` while a monitor has not listed yet.
    async fn objects(&self, gr: &GroupResource, namespace: &str) -> Result<Option<Vec<Value>>, ReconcileError> {
        fn whole<K>(i: &Informer<K>, ns: &str) -> Option<Vec<Value>>
        where
            K: kube::Resource + Serialize + Clone + Send + Sync + 'static,
        {
            Some(i.store().list_namespace(ns).iter().map(|o| to_json(o.as_ref())).collect())
        }
        if gr.0.is_empty() {
            match gr.1.as_str() {
                "pods" => return Ok(whole(&self.evaluated.pods, namespace)),
                "services" => return Ok(whole(&self.evaluated.services, namespace)),
                "persistentvolumeclaims" => return Ok(whole(&self.evaluated.claims, namespace)),
                _ => {}
            }
        }
        let Some(monitor) = self.monitor(gr).await? else { return Ok(Some(Vec::new())) };
        if !monitor.has_synced() {
            return Ok(None);
        }
        Ok(Some(
            monitor
                .list_meta()
                .into_iter()
                .filter(|m| m.namespace.as_deref() == Some(namespace))
                .map(|m: ObjectMeta| json!({ "metadata": m }))
                .collect(),
        ))
    }

    /// `syncResourceQuota`: recomputes the quota's status from the informers and writes it
    /// (`resourcequotas/status`, conditional on the cached resourceVersion) when its
    /// quantities differ.
    pub async fn sync_resource_quota(&self, key: &str) -> ReconcileResult {
        let Some(quota) = self.quotas.store().get(key) else { return Ok(Action::AwaitChange) };
        let quota = to_json(quota.as_ref());
        let namespace = quota["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let name = quota["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let counted: BTreeSet<GroupResource> = quota["spec"]["hard"]
            .as_object()
            .into_iter()
            .flat_map(|m| m.keys())
            .filter_map(|k| counted_resources(k))
            .collect();
        let mut objects: Vec<(&str, &str, Value)> = Vec::new();
        for gr in &counted {
            let Some(found) = self.objects(gr, &namespace).await? else {
                return Ok(Action::RequeueAfter(MONITOR_SYNC_RETRY));
            };
            objects.extend(found.into_iter().map(|o| (gr.0.as_str(), gr.1.as_str(), o)));
        }
        let status = quota_status(&quota, objects.iter().map(|(g, r, o)| (*g, *r, o)));
        if same_status(&quota["status"], &status) {
            return Ok(Action::AwaitChange);
        }
        let mut updated = quota.clone();
        updated["status"] = status;
        self.api.update(&resource_of::<ResourceQuota>(), Some(&namespace), &name, &updated, Some("status")).await?;
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl Reconciler for ResourceQuotaController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_resource_quota(key).await
    }
}

#[cfg(test)]
mod tests;
