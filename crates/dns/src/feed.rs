//! Keeps a [`RecordIndex`] current from the runtime's informers of Services and EndpointSlices
//! (CoreDNS's kubernetes plugin watches the same two resources).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher;
use parking_lot::RwLock;
use skiff_runtime::api::ApiResource;
use skiff_runtime::informer::{ApiListerWatcher, HandlerFns, Informer};

use crate::records::RecordIndex;

fn ns_name<K: Resource>(obj: &K) -> (String, String) {
    (obj.meta().namespace.clone().unwrap_or_default(), obj.meta().name.clone().unwrap_or_default())
}

/// Registers the handlers that apply Service changes to `index` on `informer`.
pub fn feed_services(informer: &Informer<Service>, index: Arc<RwLock<RecordIndex>>) {
    let (add, update, delete) = (index.clone(), index.clone(), index);
    informer.add_event_handler(Arc::new(
        HandlerFns::new()
            .on_add(move |svc: &Arc<Service>| add.write().upsert_service(svc))
            .on_update(move |_, svc: &Arc<Service>| update.write().upsert_service(svc))
            .on_delete(move |svc: &Arc<Service>| {
                let (ns, name) = ns_name(svc.as_ref());
                delete.write().remove_service(&ns, &name);
            }),
    ));
}

/// Registers the handlers that apply EndpointSlice changes to `index` on `informer`.
pub fn feed_slices(informer: &Informer<EndpointSlice>, index: Arc<RwLock<RecordIndex>>) {
    let (add, update, delete) = (index.clone(), index.clone(), index);
    informer.add_event_handler(Arc::new(
        HandlerFns::new()
            .on_add(move |s: &Arc<EndpointSlice>| add.write().upsert_slice(s))
            .on_update(move |_, s: &Arc<EndpointSlice>| update.write().upsert_slice(s))
            .on_delete(move |s: &Arc<EndpointSlice>| {
                let (ns, name) = ns_name(s.as_ref());
                delete.write().remove_slice(&ns, &name);
            }),
    ));
}

/// Cluster-wide Service and EndpointSlice informers on `client` feeding `index`; the caller
/// runs them ([`Informer::run`]).
pub fn informers(
    client: &kube::Client,
    index: &Arc<RwLock<RecordIndex>>,
) -> (Arc<Informer<Service>>, Arc<Informer<EndpointSlice>>) {
    let services = Arc::new(Informer::with_source(
        ApiResource::erase::<Service>(&()),
        None,
        ApiListerWatcher::new(Api::<Service>::all(client.clone()), watcher::Config::default()),
    ));
    feed_services(&services, index.clone());
    let slices = Arc::new(Informer::with_source(
        ApiResource::erase::<EndpointSlice>(&()),
        None,
        ApiListerWatcher::new(Api::<EndpointSlice>::all(client.clone()), watcher::Config::default()),
    ));
    feed_slices(&slices, index.clone());
    (services, slices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::{Name, RecordType};
    use k8s_openapi::api::core::v1::ServiceSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::watcher::Event;

    use crate::records::Answer;

    #[test]
    fn a_service_seen_by_the_informer_resolves_until_it_is_deleted() {
        let index = Arc::new(RwLock::new(RecordIndex::new("cluster.local").unwrap()));
        let informer = Informer::<Service>::new(ApiResource::erase::<Service>(&()), None);
        feed_services(&informer, index.clone());
        let svc = Service {
            metadata: ObjectMeta { name: Some("web".into()), namespace: Some("default".into()), ..Default::default() },
            spec: Some(ServiceSpec { cluster_ip: Some("10.43.0.20".into()), ..Default::default() }),
            ..Default::default()
        };
        let name = Name::from_ascii("web.default.svc.cluster.local.").unwrap();
        informer.handle_event(Event::Apply(svc.clone()));
        assert!(matches!(index.read().lookup(&name, RecordType::A), Answer::Records(_)));
        informer.handle_event(Event::Delete(svc));
        assert_eq!(index.read().lookup(&name, RecordType::A), Answer::NxDomain);
    }
}
