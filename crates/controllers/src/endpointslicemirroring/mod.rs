//! The EndpointSlice mirroring controller (`pkg/controller/endpointslicemirroring`): the
//! Endpoints a user writes for a Service without a selector are mirrored into EndpointSlices
//! (managed by `endpointslicemirroring-controller.k8s.io`, owned by the Endpoints), so that
//! clients reading slices see them too. Endpoints labelled
//! `endpointslice.kubernetes.io/skip-mirror: "true"` (the API server's `kubernetes`
//! Endpoints), of a Service with a selector, or without a Service are not mirrored, and their
//! mirrored slices are deleted. At most 1000 addresses of each subset are mirrored
//! (`--mirroring-max-endpoints-per-subset`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use parking_lot::Mutex;

use crate::endpointslice::reconciler::{self, MAX_ENDPOINTS_PER_SLICE, SliceTemplate};
use crate::endpointslice::{MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use crate::util::new_controller_ref;
use skiff_runtime::api::{ApiClient, ApiClientExt, DeleteOptions, is_not_found};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::informer::{HandlerFns, Informer, SharedInformerFactory};
use skiff_runtime::workqueue::WorkQueue;

/// This controller's `managed-by` value.
pub const CONTROLLER_NAME: &str = "endpointslicemirroring-controller.k8s.io";
/// Endpoints with this label set to `"true"` are not mirrored.
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// Addresses mirrored per subset.
pub const MAX_ENDPOINTS_PER_SUBSET: usize = 1000;
/// Annotations not copied to the slices.
const NOT_COPIED_ANNOTATIONS: &[&str] =
    &["endpoints.kubernetes.io/last-change-trigger-time", "kubectl.kubernetes.io/last-applied-configuration"];
const BY_ENDPOINTS: &str = "endpoints";

/// The mirroring controller; queue keys are Endpoints (= Service) keys.
pub struct EndpointSliceMirroringController {
    api: Arc<dyn ApiClient>,
    services: Arc<Informer<Service>>,
    endpoints: Arc<Informer<Endpoints>>,
    slices: Arc<Informer<EndpointSlice>>,
    queue: Arc<WorkQueue<String>>,
    written: Mutex<HashMap<String, HashMap<String, Option<u64>>>>,
}

fn mirrored_key(s: &EndpointSlice) -> Option<String> {
    let labels = s.metadata.labels.as_ref()?;
    (labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(CONTROLLER_NAME)).then_some(())?;
    Some(format!("{}/{}", s.metadata.namespace.as_deref().unwrap_or(""), labels.get(SERVICE_NAME_LABEL)?))
}

fn rv(s: &EndpointSlice) -> Option<u64> {
    s.metadata.resource_version.as_deref()?.parse().ok()
}

fn to_endpoint(a: &EndpointAddress, ready: bool) -> Option<Endpoint> {
    a.ip.parse::<std::net::Ipv4Addr>().ok()?;
    Some(Endpoint {
        addresses: vec![a.ip.clone()],
        conditions: Some(EndpointConditions { ready: Some(ready), ..Default::default() }),
        hostname: a.hostname.clone(),
        node_name: a.node_name.clone(),
        target_ref: a.target_ref.clone(),
        ..Default::default()
    })
}

/// The endpoints the slices of `ep` should hold, by port set.
pub fn desired(ep: &Endpoints) -> Vec<(Vec<EndpointPort>, Vec<Endpoint>)> {
    let mut out: Vec<(Vec<EndpointPort>, Vec<Endpoint>)> = Vec::new();
    for subset in ep.subsets.iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(p.port),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let eps: Vec<Endpoint> = subset
            .addresses
            .iter()
            .flatten()
            .filter_map(|a| to_endpoint(a, true))
            .chain(subset.not_ready_addresses.iter().flatten().filter_map(|a| to_endpoint(a, false)))
            .take(MAX_ENDPOINTS_PER_SUBSET)
            .collect();
        match out.iter_mut().find(|(p, _)| *p == ports) {
            Some((_, e)) => e.extend(eps),
            None => out.push((ports, eps)),
        }
    }
    out
}

impl EndpointSliceMirroringController {
    /// Creates the controller on the factory's Service, Endpoints and EndpointSlice informers.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        let services = factory.informer::<Service>();
        let endpoints = factory.informer::<Endpoints>();
        let slices = factory.informer::<EndpointSlice>();
        slices.store().add_indexer(BY_ENDPOINTS, |s: &EndpointSlice| mirrored_key(s).into_iter().collect());
        fn key_of(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
            format!("{}/{}", m.namespace.as_deref().unwrap_or(""), m.name.as_deref().unwrap_or(""))
        }
        let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
        services.add_event_handler(Arc::new(
            HandlerFns::new()
                .on_add(move |s: &Arc<Service>| q1.add(key_of(&s.metadata)))
                .on_update(move |_, s: &Arc<Service>| q2.add(key_of(&s.metadata)))
                .on_delete(move |s: &Arc<Service>| q3.add(key_of(&s.metadata))),
        ));
        let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
        endpoints.add_event_handler(Arc::new(
            HandlerFns::new()
                .on_add(move |e: &Arc<Endpoints>| q1.add(key_of(&e.metadata)))
                .on_update(move |_, e: &Arc<Endpoints>| q2.add(key_of(&e.metadata)))
                .on_delete(move |e: &Arc<Endpoints>| q3.add(key_of(&e.metadata))),
        ));
        let on_slice = {
            let q = queue.clone();
            move |s: &EndpointSlice| {
                if let Some(k) = mirrored_key(s) {
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
        Arc::new(Self { api, services, endpoints, slices, queue, written: Mutex::new(HashMap::new()) })
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    fn cache_current(&self, key: &str, cached: &[Arc<EndpointSlice>]) -> bool {
        let written = self.written.lock();
        let Some(mine) = written.get(key) else { return true };
        mine.iter().all(|(name, want)| {
            let have = cached.iter().find(|s| s.metadata.name.as_deref() == Some(name.as_str()));
            match (want, have) {
                (None, None) => true,
                (Some(want), Some(s)) => rv(s).is_some_and(|h| h >= *want),
                _ => false,
            }
        })
    }

    fn remember(&self, key: &str, s: &EndpointSlice, deleted: bool) {
        let Some(name) = s.metadata.name.clone() else { return };
        self.written.lock().entry(key.to_string()).or_default().insert(name, if deleted { None } else { rv(s) });
    }

    /// `syncEndpoints`.
    pub async fn sync_endpoints(&self, key: &str) -> ReconcileResult {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let cached = self.slices.store().by_index(BY_ENDPOINTS, key);
        if !self.cache_current(key, &cached) {
            return Ok(Action::RequeueRateLimited);
        }
        let svc = self.services.store().get(key);
        let ep = self.endpoints.store().get(key);
        let mirror = match (&svc, &ep) {
            (Some(svc), Some(ep)) => {
                let has_selector = svc.spec.as_ref().and_then(|s| s.selector.as_ref()).is_some_and(|s| !s.is_empty());
                let skip = ep.metadata.labels.as_ref().and_then(|l| l.get(SKIP_MIRROR_LABEL)).map(String::as_str)
                    == Some("true");
                (!has_selector && !skip && ep.metadata.deletion_timestamp.is_none()).then_some(ep)
            }
            _ => None,
        };
        let plan = match mirror {
            None => reconciler::Plan { delete: cached.iter().map(|s| (**s).clone()).collect(), ..Default::default() },
            Some(ep) => {
                let mut labels: BTreeMap<String, String> = ep.metadata.labels.clone().unwrap_or_default();
                labels.insert(SERVICE_NAME_LABEL.into(), name.to_string());
                labels.insert(MANAGED_BY_LABEL.into(), CONTROLLER_NAME.into());
                let mut annotations = ep.metadata.annotations.clone().unwrap_or_default();
                annotations.retain(|k, _| !NOT_COPIED_ANNOTATIONS.contains(&k.as_str()));
                let template = SliceTemplate {
                    namespace: ns.to_string(),
                    generate_name: format!("{name}-"),
                    labels,
                    annotations,
                    owner: new_controller_ref(ep.as_ref()),
                    address_type: "IPv4".into(),
                };
                let existing = cached.iter().map(|s| (**s).clone()).collect();
                reconciler::reconcile(&template, existing, desired(ep), MAX_ENDPOINTS_PER_SLICE)
            }
        };
        for s in plan.create {
            let created = self.api.create_typed(&s).await?;
            self.remember(key, &created, false);
        }
        for s in plan.update {
            let updated = self.api.update_typed(&s).await?;
            self.remember(key, &updated, false);
        }
        for s in plan.delete {
            let slice_name = s.metadata.name.clone().unwrap_or_default();
            match self.api.delete_typed::<EndpointSlice>(Some(ns), &slice_name, &DeleteOptions::default()).await {
                Ok(()) => self.remember(key, &s, true),
                Err(e) if is_not_found(&e) => self.remember(key, &s, true),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl Reconciler for EndpointSliceMirroringController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_endpoints(key).await
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{EndpointPort as CorePort, EndpointSubset};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::endpointslice::tests::service;
    use skiff_runtime::fake::FakeApi;

    fn endpoints(labels: &[(&str, &str)]) -> Endpoints {
        Endpoints {
            metadata: ObjectMeta {
                name: Some("ext".into()),
                namespace: Some("default".into()),
                uid: Some("uid-ep".into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            subsets: Some(vec![EndpointSubset {
                addresses: Some(vec![EndpointAddress { ip: "192.0.2.10".into(), ..Default::default() }]),
                not_ready_addresses: Some(vec![EndpointAddress { ip: "192.0.2.11".into(), ..Default::default() }]),
                ports: Some(vec![CorePort { name: Some("db".into()), port: 5432, ..Default::default() }]),
            }]),
        }
    }

    #[tokio::test]
    async fn a_selectorless_services_endpoints_are_mirrored_unless_skip_mirror_is_set() {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let c = EndpointSliceMirroringController::new(api.clone(), &factory, Arc::new(WorkQueue::new()));
        let mut svc = service("ext", &[]);
        svc.spec.as_mut().unwrap().selector = None;
        factory.informer::<Service>().handle_event(Event::Apply(svc));
        factory.informer::<Endpoints>().handle_event(Event::Apply(endpoints(&[("team", "a")])));
        c.sync_endpoints("default/ext").await.unwrap();
        let slices: Vec<EndpointSlice> = api
            .objects(&skiff_runtime::api::resource_of::<EndpointSlice>())
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect();
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!((labels[MANAGED_BY_LABEL].as_str(), labels["team"].as_str()), (CONTROLLER_NAME, "a"));
        assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].kind, "Endpoints");
        let ready: Vec<Option<bool>> = s.endpoints.iter().map(|e| e.conditions.as_ref().unwrap().ready).collect();
        assert_eq!(ready, [Some(true), Some(false)]);
        assert_eq!(s.ports.as_ref().unwrap()[0].port, Some(5432));

        // skip-mirror: the mirrored slice goes.
        for v in api.objects(&skiff_runtime::api::resource_of::<EndpointSlice>()) {
            factory.informer::<EndpointSlice>().handle_event(Event::Apply(serde_json::from_value(v).unwrap()));
        }
        factory.informer::<Endpoints>().handle_event(Event::Apply(endpoints(&[(SKIP_MIRROR_LABEL, "true")])));
        api.clear_actions();
        c.sync_endpoints("default/ext").await.unwrap();
        assert_eq!(api.mutations().len(), 1);
        assert!(api.mutation_summaries()[0].starts_with("delete endpointslices"));
    }
}
