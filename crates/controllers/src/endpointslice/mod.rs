//! The EndpointSlice controller (`pkg/controller/endpointslice`): every Service with a
//! selector gets `discovery.k8s.io/v1` EndpointSlices listing the pods it selects — one
//! endpoint per pod with an IP, with `ready`/`serving`/`terminating` conditions, the node and
//! zone, the pod's hostname when its subdomain is the Service — labelled
//! `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by`, owned by the
//! Service, at most [`reconciler::MAX_ENDPOINTS_PER_SLICE`] endpoints per slice.
//!
//! Queue keys are Service keys. A pod change that can change endpoints queues the Services
//! selecting the pod (before and after the change), so readiness reaches the slices without a
//! resync. Because the slice cache may lag this controller's own writes, it remembers the
//! resourceVersion of every slice it wrote and does not sync a Service until the cache has
//! caught up (`EndpointSliceTracker`), so it never adds a second slice for the same pods.

pub mod reconciler;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice, ForZone,
};
use parking_lot::Mutex;

use crate::endpoint::util::{
    endpoint_labels, find_port, pod_ipv4, pod_selector, queue_services_and_their_pods, selects,
    should_pod_be_in_endpoints, should_set_hostname,
};
use crate::util::{is_pod_ready, new_controller_ref};
use reconciler::{MAX_ENDPOINTS_PER_SLICE, Plan, SliceTemplate};
use skiff_runtime::api::{ApiClient, ApiClientExt, DeleteOptions, is_not_found};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::informer::{HandlerFns, Informer, SharedInformerFactory};
use skiff_runtime::workqueue::WorkQueue;

/// `kubernetes.io/service-name`: the Service a slice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// `endpointslice.kubernetes.io/managed-by`: which controller owns a slice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's `managed-by` value.
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
/// `topology.kubernetes.io/zone`, copied from the node to its endpoints.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The annotation that asks for topology hints (`Auto`), and its older spelling.
pub const TOPOLOGY_MODE_ANNOTATIONS: &[&str] =
    &["service.kubernetes.io/topology-mode", "service.kubernetes.io/topology-aware-hints"];
/// The index of slices by `namespace/service`.
const BY_SERVICE: &str = "service";

/// The EndpointSlice controller.
pub struct EndpointSliceController {
    api: Arc<dyn ApiClient>,
    services: Arc<Informer<Service>>,
    pods: Arc<Informer<Pod>>,
    slices: Arc<Informer<EndpointSlice>>,
    nodes: Arc<Informer<Node>>,
    queue: Arc<WorkQueue<String>>,
    /// Per Service: the slices this controller wrote, with the resourceVersion written
    /// (`None`: deleted).
    written: Mutex<HashMap<String, HashMap<String, Option<u64>>>>,
    max_per_slice: usize,
}

fn slice_service_key(s: &EndpointSlice) -> Option<String> {
    let labels = s.metadata.labels.as_ref()?;
    (labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(CONTROLLER_NAME)).then_some(())?;
    let svc = labels.get(SERVICE_NAME_LABEL)?;
    Some(format!("{}/{svc}", s.metadata.namespace.as_deref().unwrap_or("")))
}

fn rv(s: &EndpointSlice) -> Option<u64> {
    s.metadata.resource_version.as_deref()?.parse().ok()
}

impl EndpointSliceController {
    /// Creates the controller on the factory's Service, Pod, EndpointSlice and Node informers.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        let services = factory.informer::<Service>();
        let pods = factory.informer::<Pod>();
        let slices = factory.informer::<EndpointSlice>();
        let nodes = factory.informer::<Node>();
        slices.store().add_indexer(BY_SERVICE, |s: &EndpointSlice| slice_service_key(s).into_iter().collect());
        queue_services_and_their_pods(&services, &pods, &queue);
        let on_slice = {
            let q = queue.clone();
            move |s: &EndpointSlice| {
                if let Some(k) = slice_service_key(s) {
                    q.add(k);
                }
            }
        };
        let (s1, s2, s3) = (on_slice.clone(), on_slice.clone(), on_slice);
        slices.add_event_handler(Arc::new(
            HandlerFns::new()
                .on_add(move |s: &Arc<EndpointSlice>| s1(s))
                .on_update(move |_, s: &Arc<EndpointSlice>| s2(s))
                .on_delete(move |s: &Arc<EndpointSlice>| s3(s)),
        ));
        Arc::new(Self {
            api,
            services,
            pods,
            slices,
            nodes,
            queue,
            written: Mutex::new(HashMap::new()),
            max_per_slice: MAX_ENDPOINTS_PER_SLICE,
        })
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// True when the slice cache has seen every write this controller made for `key`.
    fn cache_current(&self, key: &str, cached: &[Arc<EndpointSlice>]) -> bool {
        let written = self.written.lock();
        let Some(mine) = written.get(key) else { return true };
        mine.iter().all(|(name, want)| {
            let have = cached.iter().find(|s| s.metadata.name.as_deref() == Some(name.as_str()));
            match (want, have) {
                (None, None) => true,
                (None, Some(_)) => false,
                (Some(_), None) => false,
                (Some(want), Some(s)) => rv(s).is_some_and(|have| have >= *want),
            }
        })
    }

    /// The endpoint of a pod (`podToEndpoint`).
    fn pod_endpoint(&self, svc: &Service, pod: &Pod) -> Endpoint {
        let publish = svc.spec.as_ref().and_then(|s| s.publish_not_ready_addresses).unwrap_or(false);
        let serving = publish || is_pod_ready(pod);
        let terminating = pod.metadata.deletion_timestamp.is_some();
        // A terminating pod is never ready, unless not-ready addresses are published.
        let ready = publish || (serving && !terminating);
        let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty());
        let zone = node_name
            .as_deref()
            .and_then(|n| self.nodes.store().get(n))
            .and_then(|n| n.metadata.labels.as_ref()?.get(ZONE_LABEL).cloned());
        Endpoint {
            addresses: pod_ipv4(pod).into_iter().collect(),
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                serving: Some(serving),
                terminating: Some(terminating),
            }),
            hostname: should_set_hostname(pod, svc)
                .then(|| pod.spec.as_ref().and_then(|s| s.hostname.clone()))
                .flatten(),
            node_name,
            zone,
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.metadata.namespace.clone(),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The endpoints `svc` should have, grouped by port set, in pod-name order.
    pub fn desired(
        &self,
        svc: &Service,
        selector: &BTreeMap<String, String>,
    ) -> Vec<(Vec<EndpointPort>, Vec<Endpoint>)> {
        let ns = svc.metadata.namespace.as_deref().unwrap_or("");
        let mut pods: Vec<Arc<Pod>> = self
            .pods
            .store()
            .list_namespace(ns)
            .into_iter()
            .filter(|p| selects(selector, p) && should_pod_be_in_endpoints(p, true))
            .collect();
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let svc_ports = svc.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
        let mut groups: Vec<(Vec<EndpointPort>, Vec<Endpoint>)> = Vec::new();
        for pod in pods {
            let ports: Vec<EndpointPort> = svc_ports
                .iter()
                .filter_map(|sp| {
                    Some(EndpointPort {
                        name: Some(sp.name.clone().unwrap_or_default()),
                        port: Some(find_port(&pod, sp)?),
                        protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                        app_protocol: sp.app_protocol.clone(),
                    })
                })
                .collect();
            let ep = self.pod_endpoint(svc, &pod);
            match groups.iter_mut().find(|(p, _)| *p == ports) {
                Some((_, eps)) => eps.push(ep),
                None => groups.push((ports, vec![ep])),
            }
        }
        if wants_hints(svc) {
            add_zone_hints(&mut groups);
        }
        groups
    }

    /// `syncService`.
    pub async fn sync_service(&self, key: &str) -> ReconcileResult {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let Some(svc) = self.services.store().get(key) else {
            // The garbage collector deletes the slices the Service owned.
            self.written.lock().remove(key);
            return Ok(Action::AwaitChange);
        };
        let Some(selector) = pod_selector(&svc) else {
            return Ok(Action::AwaitChange);
        };
        if svc.metadata.deletion_timestamp.is_some() {
            return Ok(Action::AwaitChange);
        }
        let cached = self.slices.store().by_index(BY_SERVICE, key);
        if !self.cache_current(key, &cached) {
            // This controller's own writes are not in the cache yet: wait for them.
            return Ok(Action::RequeueRateLimited);
        }
        let mut labels = endpoint_labels(&svc, &[SERVICE_NAME_LABEL, MANAGED_BY_LABEL]);
        labels.insert(SERVICE_NAME_LABEL.into(), name.to_string());
        labels.insert(MANAGED_BY_LABEL.into(), CONTROLLER_NAME.into());
        let template = SliceTemplate {
            namespace: ns.to_string(),
            generate_name: format!("{name}-"),
            labels,
            annotations: BTreeMap::new(),
            owner: new_controller_ref(svc.as_ref()),
            address_type: "IPv4".into(),
        };
        let desired = self.desired(&svc, selector);
        let existing: Vec<EndpointSlice> = cached.iter().map(|s| (**s).clone()).collect();
        let plan = reconciler::reconcile(&template, existing, desired, self.max_per_slice);
        self.apply(key, plan).await?;
        Ok(Action::AwaitChange)
    }

    /// Writes a plan: creates, then updates, then deletes (so that endpoints never disappear
    /// in between), remembering what was written.
    async fn apply(&self, key: &str, plan: Plan) -> Result<(), skiff_runtime::api::ApiError> {
        for s in plan.create {
            let created = self.api.create_typed(&s).await?;
            self.remember(key, &created, false);
        }
        for s in plan.update {
            let updated = self.api.update_typed(&s).await?;
            self.remember(key, &updated, false);
        }
        for s in plan.delete {
            let name = s.metadata.name.clone().unwrap_or_default();
            match self
                .api
                .delete_typed::<EndpointSlice>(s.metadata.namespace.as_deref(), &name, &DeleteOptions::default())
                .await
            {
                Ok(()) => self.remember(key, &s, true),
                Err(e) if is_not_found(&e) => self.remember(key, &s, true),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn remember(&self, key: &str, s: &EndpointSlice, deleted: bool) {
        let Some(name) = s.metadata.name.clone() else { return };
        let mut written = self.written.lock();
        let mine = written.entry(key.to_string()).or_default();
        if deleted {
            mine.insert(name, None);
        } else {
            mine.insert(name, rv(s));
        }
    }
}

fn wants_hints(svc: &Service) -> bool {
    let annotations = svc.metadata.annotations.as_ref();
    TOPOLOGY_MODE_ANNOTATIONS
        .iter()
        .any(|a| annotations.and_then(|m| m.get(*a)).is_some_and(|v| v.eq_ignore_ascii_case("auto")))
}

/// Topology hints for `Auto` mode: every endpoint is hinted to its own zone, and only when
/// every endpoint has a zone (otherwise no endpoint gets a hint, as Kubernetes falls back).
/// Kubernetes also rebalances hints across zones by their nodes' CPUs; skiff does not.
fn add_zone_hints(groups: &mut [(Vec<EndpointPort>, Vec<Endpoint>)]) {
    let all_zoned = groups.iter().all(|(_, eps)| eps.iter().all(|e| e.zone.is_some()));
    if !all_zoned {
        return;
    }
    for (_, eps) in groups.iter_mut() {
        for e in eps.iter_mut() {
            let zone = e.zone.clone().unwrap_or_default();
            e.hints = Some(EndpointHints { for_zones: Some(vec![ForZone { name: zone }]), ..Default::default() });
        }
    }
}

#[async_trait]
impl Reconciler for EndpointSliceController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_service(key).await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus, ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use kube::runtime::watcher::Event;

    use super::*;
    use skiff_runtime::fake::FakeApi;

    pub(crate) fn service(name: &str, selector: &[(&str, &str)]) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(selector.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    target_port: Some(IntOrString::Int(8080)),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                cluster_ip: Some("10.43.0.10".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(crate) fn pod(name: &str, ip: &str, ready: bool, labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: Some("n1".into()), ..Default::default() }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                pod_ip: Some(ip.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    struct Fixture {
        api: Arc<FakeApi>,
        factory: SharedInformerFactory,
        c: Arc<EndpointSliceController>,
    }

    impl Fixture {
        fn new() -> Self {
            let api = Arc::new(FakeApi::new());
            let factory = SharedInformerFactory::for_tests();
            let c = EndpointSliceController::new(api.clone(), &factory, Arc::new(WorkQueue::new()));
            Self { api, factory, c }
        }

        /// Feeds the fake API's slices back into the informer, as the watch would.
        fn sync_slices(&self) {
            let inf = self.factory.informer::<EndpointSlice>();
            let live: Vec<EndpointSlice> = self
                .api
                .objects(&skiff_runtime::api::resource_of::<EndpointSlice>())
                .into_iter()
                .map(|v| serde_json::from_value(v).unwrap())
                .collect();
            for s in inf.store().list() {
                if !live.iter().any(|l| l.metadata.name == s.metadata.name) {
                    inf.handle_event(Event::Delete((*s).clone()));
                }
            }
            for s in live {
                inf.handle_event(Event::Apply(s));
            }
        }

        fn slices(&self) -> Vec<EndpointSlice> {
            self.api
                .objects(&skiff_runtime::api::resource_of::<EndpointSlice>())
                .into_iter()
                .map(|v| serde_json::from_value(v).unwrap())
                .collect()
        }
    }

    #[tokio::test]
    async fn a_service_gets_one_slice_listing_its_pods_with_their_readiness() {
        let f = Fixture::new();
        f.factory.informer::<Service>().handle_event(Event::Apply(service("web", &[("app", "web")])));
        f.factory.informer::<Pod>().handle_event(Event::Apply(pod("a", "10.42.0.5", true, &[("app", "web")])));
        f.factory.informer::<Pod>().handle_event(Event::Apply(pod("b", "10.42.0.6", false, &[("app", "web")])));
        f.factory.informer::<Pod>().handle_event(Event::Apply(pod("c", "10.42.0.7", true, &[("app", "db")])));
        f.c.sync_service("default/web").await.unwrap();
        let slices = f.slices();
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[SERVICE_NAME_LABEL], "web");
        assert_eq!(labels[MANAGED_BY_LABEL], CONTROLLER_NAME);
        assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-web");
        assert_eq!(s.address_type, "IPv4");
        let ports = s.ports.as_ref().unwrap();
        assert_eq!((ports[0].name.as_deref(), ports[0].port), (Some("http"), Some(8080)));
        let ready: Vec<(String, Option<bool>)> =
            s.endpoints.iter().map(|e| (e.addresses[0].clone(), e.conditions.as_ref().unwrap().ready)).collect();
        assert_eq!(ready, [("10.42.0.5".into(), Some(true)), ("10.42.0.6".into(), Some(false))]);
        assert_eq!(s.endpoints[0].node_name.as_deref(), Some("n1"));
    }

    #[tokio::test]
    async fn a_readiness_change_queues_the_service_and_updates_its_slice_in_place() {
        let f = Fixture::new();
        f.factory.informer::<Service>().handle_event(Event::Apply(service("web", &[("app", "web")])));
        let ready = pod("a", "10.42.0.5", true, &[("app", "web")]);
        f.factory.informer::<Pod>().handle_event(Event::Apply(ready.clone()));
        f.c.sync_service("default/web").await.unwrap();
        f.sync_slices();
        while !f.c.queue().is_empty() {
            let k = f.c.queue().get().await.unwrap();
            f.c.queue().done(&k);
        }
        f.api.clear_actions();
        f.factory.informer::<Pod>().handle_event(Event::Apply(pod("a", "10.42.0.5", false, &[("app", "web")])));
        assert_eq!(f.c.queue().len(), 1, "the readiness change queues the Service");
        f.c.sync_service("default/web").await.unwrap();
        let summaries = f.api.mutation_summaries();
        assert_eq!(summaries.len(), 1);
        assert!(summaries[0].starts_with("update endpointslices"), "{summaries:?}");
        let e = &f.slices()[0].endpoints[0];
        assert_eq!(e.conditions.as_ref().unwrap().ready, Some(false));
        assert_eq!(e.conditions.as_ref().unwrap().serving, Some(false));
    }

    #[tokio::test]
    async fn a_sync_waits_for_the_cache_to_see_its_own_writes() {
        let f = Fixture::new();
        f.factory.informer::<Service>().handle_event(Event::Apply(service("web", &[("app", "web")])));
        f.factory.informer::<Pod>().handle_event(Event::Apply(pod("a", "10.42.0.5", true, &[("app", "web")])));
        f.c.sync_service("default/web").await.unwrap();
        // The slice is not in the cache yet: another sync must not create a second one.
        let again = f.c.sync_service("default/web").await.unwrap();
        assert!(matches!(again, Action::RequeueRateLimited));
        assert_eq!(f.slices().len(), 1);
        f.sync_slices();
        f.api.clear_actions();
        f.c.sync_service("default/web").await.unwrap();
        assert!(f.api.mutations().is_empty());
    }

    #[tokio::test]
    async fn published_not_ready_addresses_are_ready_and_terminating_pods_are_not() {
        let f = Fixture::new();
        let mut svc = service("web", &[("app", "web")]);
        f.factory.informer::<Service>().handle_event(Event::Apply(svc.clone()));
        let mut going = pod("a", "10.42.0.5", true, &[("app", "web")]);
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        f.factory.informer::<Pod>().handle_event(Event::Apply(going));
        f.factory.informer::<Pod>().handle_event(Event::Apply(pod("b", "10.42.0.6", false, &[("app", "web")])));
        f.c.sync_service("default/web").await.unwrap();
        let conds: Vec<EndpointConditions> =
            f.slices()[0].endpoints.iter().map(|e| e.conditions.clone().unwrap()).collect();
        assert_eq!(conds[0], EndpointConditions { ready: Some(false), serving: Some(true), terminating: Some(true) });
        assert_eq!(conds[1], EndpointConditions { ready: Some(false), serving: Some(false), terminating: Some(false) });

        svc.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        f.factory.informer::<Service>().handle_event(Event::Apply(svc));
        f.sync_slices();
        f.c.sync_service("default/web").await.unwrap();
        let conds: Vec<EndpointConditions> =
            f.slices()[0].endpoints.iter().map(|e| e.conditions.clone().unwrap()).collect();
        assert_eq!(conds[1].ready, Some(true));
        assert_eq!(conds[0].ready, Some(true));
    }

    #[tokio::test]
    async fn a_service_without_selector_or_pods_gets_no_slice_or_an_empty_one() {
        let f = Fixture::new();
        let mut manual = service("manual", &[]);
        manual.spec.as_mut().unwrap().selector = None;
        f.factory.informer::<Service>().handle_event(Event::Apply(manual));
        f.c.sync_service("default/manual").await.unwrap();
        assert!(f.slices().is_empty());
        let mut headless = service("db", &[("app", "db")]);
        headless.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        f.factory.informer::<Service>().handle_event(Event::Apply(headless));
        f.c.sync_service("default/db").await.unwrap();
        let slices = f.slices();
        assert_eq!(slices.len(), 1);
        assert!(slices[0].endpoints.is_empty());
        assert_eq!(slices[0].metadata.labels.as_ref().unwrap()[crate::endpoint::util::HEADLESS_LABEL], "");
    }
}
