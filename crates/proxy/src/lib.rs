//! The node proxy (`skiff-proxy`): kube-proxy's nftables mode. Every node agent runs one; it
//! watches Services and EndpointSlices and programs the table `ip skiff-proxy` so that
//! ClusterIPs, node ports, external and load-balancer IPs reach the Services' endpoints from
//! pods and from the node itself.
//!
//! - [`model`]: Services and EndpointSlices reduced to Service ports and their endpoints.
//! - [`rules`]: the table layout and each Service port's chains and map elements.
//! - [`proxier`]: incremental syncs, one nftables transaction each.
//! - [`nft`]: the `nft -j -f -` backend, and a bookkeeping one without a kernel.
//! - `testing` (feature `testing`): Service and EndpointSlice builders.

pub mod model;
pub mod nft;
pub mod proxier;
pub mod rules;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::watcher;
use skiff_runtime::api::ApiResource;
use skiff_runtime::informer::{ApiListerWatcher, HandlerFns, Informer};

pub use nft::{Bookkeeping, NftBackend, NftCommand, NftError};
pub use proxier::{DEFAULT_MIN_SYNC_PERIOD, Proxier, ProxierConfig, SyncOutcome};
pub use rules::{Cidr, RuleConfig};

/// Registers on `informer` handlers that hand adds and real updates to `upsert` and deletes
/// to `delete`; a relist's unchanged object is a new `Arc` and is recomputed (to no change),
/// while a periodic resync (the same `Arc`) is ignored.
/// Generic over the receiver, so the NetworkPolicy controller (`skiff-netpol`) feeds itself the
/// same way.
pub fn feed<K: kube::Resource + Clone + Send + Sync + 'static, C: Send + Sync + 'static>(
    informer: &Informer<K>,
    proxier: &Arc<C>,
    upsert: fn(&C, &Arc<K>),
    delete: fn(&C, &K),
) {
    let (add, update, del) = (proxier.clone(), proxier.clone(), proxier.clone());
    informer.add_event_handler(Arc::new(
        HandlerFns::new()
            .on_add(move |o: &Arc<K>| upsert(&add, o))
            .on_update(move |old: &Arc<K>, new: &Arc<K>| {
                if !Arc::ptr_eq(old, new) {
                    upsert(&update, new)
                }
            })
            .on_delete(move |o: &Arc<K>| delete(&del, o)),
    ));
}

/// Registers the proxier's handlers on a Service informer.
pub fn feed_services(informer: &Informer<Service>, proxier: &Arc<Proxier>) {
    feed(informer, proxier, Proxier::on_service, Proxier::on_service_deleted);
}

/// Registers the proxier's handlers on an EndpointSlice informer.
pub fn feed_slices(informer: &Informer<EndpointSlice>, proxier: &Arc<Proxier>) {
    feed(informer, proxier, Proxier::on_slice, Proxier::on_slice_deleted);
}

/// Runs the node proxy against the API until dropped: cluster-wide Service and EndpointSlice
/// informers feed a [`Proxier`] on `backend`, whose first (full) sync waits for both caches.
/// While the API server is unreachable the kernel keeps the last rules; the informers relist
/// when it returns and the differences are applied.
pub async fn run_proxy(client: kube::Client, cfg: ProxierConfig, backend: Arc<dyn NftBackend>) {
    let proxier = Proxier::new(cfg, backend);
    let services = Arc::new(Informer::with_source(
        ApiResource::erase::<Service>(&()),
        None,
        ApiListerWatcher::new(Api::<Service>::all(client.clone()), watcher::Config::default()),
    ));
    let slices = Arc::new(Informer::with_source(
        ApiResource::erase::<EndpointSlice>(&()),
        None,
        ApiListerWatcher::new(Api::<EndpointSlice>::all(client), watcher::Config::default()),
    ));
    feed_services(&services, &proxier);
    feed_slices(&slices, &proxier);
    let ready = {
        let (services, slices) = (services.clone(), slices.clone());
        async move {
            services.wait_for_sync().await;
            slices.wait_for_sync().await;
        }
    };
    tokio::join!(services.run(), slices.run(), proxier.run(ready));
}

/// Removes the table the proxy made (`skiff killall`); a missing table is not an error.
///
/// # Errors
/// [`NftError`] when `nft` cannot run or refuses.
pub fn cleanup(backend: &dyn NftBackend) -> Result<(), NftError> {
    backend.apply(&rules::delete_table())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;
    use std::time::Duration;

    fn svc(name: &str, ip: &str) -> Service {
        Service::clone(&crate::testing::service("default", name, ip, 80, None))
    }

    #[test]
    fn a_relist_after_the_api_server_returns_removes_what_was_deleted_meanwhile_and_keeps_the_rest() {
        let book = Bookkeeping::default();
        let cfg =
            ProxierConfig { node_name: "n1".into(), rules: RuleConfig::default(), min_sync_period: Duration::ZERO };
        let proxier = Proxier::new(cfg, Arc::new(book.clone()));
        let informer = Informer::<Service>::new(ApiResource::erase::<Service>(&()), None);
        feed_services(&informer, &proxier);
        informer.handle_event(Event::Init);
        informer.handle_event(Event::InitApply(svc("a", "10.43.0.1")));
        informer.handle_event(Event::InitApply(svc("b", "10.43.0.2")));
        informer.handle_event(Event::InitDone);
        proxier.sync().unwrap();
        // The watch broke; `b` was deleted while the proxy could not see it. Until the relist
        // nothing is sent: the kernel keeps the last rules.
        let before = book.transactions().len();
        assert_eq!(proxier.sync().unwrap().commands, 0);
        assert_eq!(book.transactions().len(), before);
        informer.handle_event(Event::Init);
        informer.handle_event(Event::InitApply(svc("a", "10.43.0.1")));
        informer.handle_event(Event::InitDone);
        let out = proxier.sync().unwrap();
        assert!(!out.full);
        let tx = serde_json::to_string(&book.transactions().pop().unwrap()).unwrap();
        assert!(tx.contains("10.43.0.2") && tx.contains("\"delete\""), "b's element is deleted: {tx}");
        assert!(!tx.contains("10.43.0.1"), "a is unchanged: {tx}");
    }
}
