//! NetworkPolicy enforcement (`skiff-netpol`): every node agent runs one [`Controller`], which
//! watches pods, namespaces and NetworkPolicies and programs the table `ip skiff-netpol` so
//! that the policies selecting this node's pods are enforced on their traffic, ingress and
//! egress, beside the node proxy's table.
//!
//! - [`policy`]: NetworkPolicies compiled (policyTypes defaulting, peers, ports) and pods
//!   reduced to address, labels, locality and named ports.
//! - [`rules`]: the table layout: hooked chains, per-policy chains, sets per pod selection.
//! - [`controller`]: incremental syncs, one nftables transaction each.
//! - `testing` (feature `testing`): Pod, Namespace and NetworkPolicy builders.

pub mod controller;
pub mod policy;
pub mod rules;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::runtime::watcher;
use skiff_proxy::{NftBackend, NftError};
use skiff_runtime::api::ApiResource;
use skiff_runtime::informer::{ApiListerWatcher, Informer};

pub use controller::{Controller, ControllerConfig, DEFAULT_MIN_SYNC_PERIOD, SyncOutcome};

// The informer wiring is the node proxy's ([`skiff_proxy::feed`]).
use skiff_proxy::feed;

/// Registers the controller's handlers on a pod informer.
pub fn feed_pods(informer: &Informer<Pod>, controller: &Arc<Controller>) {
    feed(informer, controller, Controller::on_pod, Controller::on_pod_deleted);
}

/// Registers the controller's handlers on a Namespace informer.
pub fn feed_namespaces(informer: &Informer<Namespace>, controller: &Arc<Controller>) {
    feed(informer, controller, Controller::on_namespace, Controller::on_namespace_deleted);
}

/// Registers the controller's handlers on a NetworkPolicy informer.
pub fn feed_policies(informer: &Informer<NetworkPolicy>, controller: &Arc<Controller>) {
    feed(informer, controller, Controller::on_policy, Controller::on_policy_deleted);
}

/// A backend that programs nothing: simulated nodes keep the controller's bookkeeping (what
/// would be in their kernel) without a kernel, and without recording every transaction as
/// [`skiff_proxy::Bookkeeping`] does.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoKernel;

impl NftBackend for NoKernel {
    fn apply(&self, _commands: &[serde_json::Value]) -> Result<(), NftError> {
        Ok(())
    }
}

/// Runs NetworkPolicy enforcement against the API until dropped: cluster-wide pod, namespace
/// and NetworkPolicy informers feed a [`Controller`] on `backend`, whose first (full) sync
/// waits for the three caches. While the API server is unreachable the kernel keeps the last
/// rules; the informers relist when it returns and the differences are applied.
pub async fn run_network_policy(client: kube::Client, cfg: ControllerConfig, backend: Arc<dyn NftBackend>) {
    let controller = Controller::new(cfg, backend);
    let pods = Arc::new(Informer::with_source(
        ApiResource::erase::<Pod>(&()),
        None,
        ApiListerWatcher::new(Api::<Pod>::all(client.clone()), watcher::Config::default()),
    ));
    let namespaces = Arc::new(Informer::with_source(
        ApiResource::erase::<Namespace>(&()),
        None,
        ApiListerWatcher::new(Api::<Namespace>::all(client.clone()), watcher::Config::default()),
    ));
    let policies = Arc::new(Informer::with_source(
        ApiResource::erase::<NetworkPolicy>(&()),
        None,
        ApiListerWatcher::new(Api::<NetworkPolicy>::all(client), watcher::Config::default()),
    ));
    feed_pods(&pods, &controller);
    feed_namespaces(&namespaces, &controller);
    feed_policies(&policies, &controller);
    let ready = {
        let (pods, namespaces, policies) = (pods.clone(), namespaces.clone(), policies.clone());
        async move {
            pods.wait_for_sync().await;
            namespaces.wait_for_sync().await;
            policies.wait_for_sync().await;
        }
    };
    tokio::join!(pods.run(), namespaces.run(), policies.run(), controller.run(ready));
}

/// Removes the table enforcement made (`skiff killall`); a missing table is not an error.
///
/// # Errors
/// [`NftError`] when `nft` cannot run or refuses.
pub fn cleanup(backend: &dyn NftBackend) -> Result<(), NftError> {
    backend.apply(&rules::delete_table())
}
