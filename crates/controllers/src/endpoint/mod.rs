//! The Endpoints controller (`pkg/controller/endpoint`): the core/v1 Endpoints of every
//! Service with a selector, which older clients still read. Ready pods are `addresses`, the
//! others `notReadyAddresses` (all `addresses` with `publishNotReadyAddresses`); pods being
//! deleted are left out; addresses with the same ports share a subset. The Endpoints of a
//! deleted Service are deleted. [`util`] holds what the endpoint controllers share.

pub mod util;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::util::is_pod_ready;
use skiff_runtime::api::{ApiClient, ApiClientExt, DeleteOptions, is_not_found};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::informer::{HandlerFns, Informer, SharedInformerFactory};
use skiff_runtime::workqueue::WorkQueue;
use util::{
    endpoint_labels, find_port, pod_ipv4, pod_selector, queue_services_and_their_pods, selects,
    should_pod_be_in_endpoints, should_set_hostname,
};

/// The Endpoints controller; queue keys are Service keys.
pub struct EndpointsController {
    api: Arc<dyn ApiClient>,
    services: Arc<Informer<Service>>,
    pods: Arc<Informer<Pod>>,
    endpoints: Arc<Informer<Endpoints>>,
    queue: Arc<WorkQueue<String>>,
}

/// Subsets with identical ports merged, addresses sorted by IP and ports by name
/// (`endpoints.RepackSubsets`).
pub fn repack(subsets: Vec<EndpointSubset>) -> Vec<EndpointSubset> {
    let mut by_ports: BTreeMap<String, EndpointSubset> = BTreeMap::new();
    for mut s in subsets {
        let mut ports = s.ports.take().unwrap_or_default();
        ports.sort_by(|a, b| (&a.name, a.port, &a.protocol).cmp(&(&b.name, b.port, &b.protocol)));
        let key = serde_json::to_string(&ports).unwrap_or_default();
        let entry = by_ports
            .entry(key)
            .or_insert_with(|| EndpointSubset { ports: (!ports.is_empty()).then_some(ports), ..Default::default() });
        entry.addresses.get_or_insert_with(Vec::new).extend(s.addresses.unwrap_or_default());
        entry.not_ready_addresses.get_or_insert_with(Vec::new).extend(s.not_ready_addresses.unwrap_or_default());
    }
    let ip_key = |a: &EndpointAddress| a.ip.parse::<std::net::Ipv4Addr>().map(u32::from).unwrap_or(u32::MAX);
    by_ports
        .into_values()
        .map(|mut s| {
            for list in [&mut s.addresses, &mut s.not_ready_addresses] {
                if let Some(l) = list.as_mut() {
                    l.sort_by_key(ip_key);
                    l.dedup_by(|a, b| a.ip == b.ip);
                }
                if list.as_ref().is_some_and(Vec::is_empty) {
                    *list = None;
                }
            }
            s
        })
        .collect()
}

impl EndpointsController {
    /// Creates the controller on the factory's Service, Pod and Endpoints informers.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        let services = factory.informer::<Service>();
        let pods = factory.informer::<Pod>();
        let endpoints = factory.informer::<Endpoints>();
        queue_services_and_their_pods(&services, &pods, &queue);
        // A deleted or edited Endpoints object of a selected Service is put back.
        let q = queue.clone();
        let q2 = queue.clone();
        let ep_key = |e: &Endpoints| {
            format!("{}/{}", e.metadata.namespace.as_deref().unwrap_or(""), e.metadata.name.as_deref().unwrap_or(""))
        };
        endpoints.add_event_handler(Arc::new(
            HandlerFns::new()
                .on_update(move |_, e: &Arc<Endpoints>| q.add(ep_key(e)))
                .on_delete(move |e: &Arc<Endpoints>| q2.add(ep_key(e))),
        ));
        Arc::new(Self { api, services, pods, endpoints, queue })
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// The subsets `svc` should have.
    pub fn subsets(&self, svc: &Service, selector: &BTreeMap<String, String>) -> Vec<EndpointSubset> {
        let ns = svc.metadata.namespace.as_deref().unwrap_or("");
        let spec = svc.spec.clone().unwrap_or_default();
        let publish = spec.publish_not_ready_addresses.unwrap_or(false);
        let headless = spec.cluster_ip.as_deref() == Some("None");
        let svc_ports = spec.ports.unwrap_or_default();
        let mut subsets = Vec::new();
        for pod in self.pods.store().list_namespace(ns) {
            if !selects(selector, &pod) || !should_pod_be_in_endpoints(&pod, false) {
                continue;
            }
            let Some(ip) = pod_ipv4(&pod) else { continue };
            let address = EndpointAddress {
                ip,
                hostname: should_set_hostname(&pod, svc)
                    .then(|| pod.spec.as_ref().and_then(|s| s.hostname.clone()))
                    .flatten(),
                node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
                target_ref: Some(ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: pod.metadata.namespace.clone(),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                    ..Default::default()
                }),
            };
            let ready = publish || is_pod_ready(&pod);
            let subset = |ports: Option<Vec<EndpointPort>>| EndpointSubset {
                addresses: ready.then(|| vec![address.clone()]),
                not_ready_addresses: (!ready).then(|| vec![address.clone()]),
                ports,
            };
            if svc_ports.is_empty() && headless {
                subsets.push(subset(None));
                continue;
            }
            for sp in &svc_ports {
                let Some(port) = find_port(&pod, sp) else { continue };
                subsets.push(subset(Some(vec![EndpointPort {
                    name: sp.name.clone().filter(|n| !n.is_empty()),
                    port,
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                }])));
            }
        }
        repack(subsets)
    }

    /// `syncService`.
    pub async fn sync_service(&self, key: &str) -> ReconcileResult {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let Some(svc) = self.services.store().get(key) else {
            if self.endpoints.store().get(key).is_some() {
                match self.api.delete_typed::<Endpoints>(Some(ns), name, &DeleteOptions::default()).await {
                    Ok(()) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(Action::AwaitChange);
        };
        let Some(selector) = pod_selector(&svc) else { return Ok(Action::AwaitChange) };
        if svc.metadata.deletion_timestamp.is_some() {
            return Ok(Action::AwaitChange);
        }
        let subsets = self.subsets(&svc, selector);
        let labels = endpoint_labels(&svc, &[]);
        let current = self.endpoints.store().get(key);
        if let Some(cur) = &current {
            let cur_labels = cur.metadata.labels.clone().unwrap_or_default();
            if cur.subsets.clone().unwrap_or_default() == subsets && cur_labels == labels {
                return Ok(Action::AwaitChange);
            }
        }
        let mut ep = current.as_deref().cloned().unwrap_or_else(|| Endpoints {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..Default::default() },
            ..Default::default()
        });
        ep.metadata.labels = (!labels.is_empty()).then_some(labels);
        ep.subsets = Some(subsets);
        if current.is_some() {
            self.api.update_typed(&ep).await?;
        } else {
            self.api.create_typed(&ep).await?;
        }
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl Reconciler for EndpointsController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_service(key).await
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::endpointslice::tests::{pod, service};
    use skiff_runtime::fake::FakeApi;

    #[tokio::test]
    async fn ready_pods_are_addresses_unready_ones_not_ready_addresses_and_a_deleted_service_loses_its_endpoints() {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let c = EndpointsController::new(api.clone(), &factory, Arc::new(WorkQueue::new()));
        factory.informer::<Service>().handle_event(Event::Apply(service("web", &[("app", "web")])));
        factory.informer::<Pod>().handle_event(Event::Apply(pod("b", "10.42.0.10", true, &[("app", "web")])));
        factory.informer::<Pod>().handle_event(Event::Apply(pod("a", "10.42.0.9", true, &[("app", "web")])));
        factory.informer::<Pod>().handle_event(Event::Apply(pod("c", "10.42.0.7", false, &[("app", "web")])));
        c.sync_service("default/web").await.unwrap();
        let ep: Endpoints = api.object_typed(Some("default"), "web").unwrap();
        let subsets = ep.subsets.clone().unwrap();
        assert_eq!(subsets.len(), 1);
        let ips = |l: &Option<Vec<EndpointAddress>>| l.iter().flatten().map(|a| a.ip.clone()).collect::<Vec<_>>();
        assert_eq!(ips(&subsets[0].addresses), ["10.42.0.9", "10.42.0.10"]);
        assert_eq!(ips(&subsets[0].not_ready_addresses), ["10.42.0.7"]);
        assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 8080);

        // Nothing changed: nothing written.
        factory.informer::<Endpoints>().handle_event(Event::Apply(ep));
        api.clear_actions();
        c.sync_service("default/web").await.unwrap();
        assert!(api.mutations().is_empty());

        factory.informer::<Service>().handle_event(Event::Delete(service("web", &[("app", "web")])));
        c.sync_service("default/web").await.unwrap();
        assert_eq!(api.mutation_summaries(), ["delete endpoints default/web"]);
    }
}
