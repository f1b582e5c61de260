//! The ServiceAccount controller (`pkg/controller/serviceaccount/serviceaccounts_controller.go`):
//! every active namespace has a `default` ServiceAccount, recreated if deleted.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use skiff_runtime::api::{ApiClient, ApiClientExt, NAMESPACE_TERMINATING_CAUSE, has_status_cause, is_already_exists};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::informer::{HandlerFns, Informer, SharedInformerFactory};
use skiff_runtime::workqueue::WorkQueue;

/// The ServiceAccounts every namespace gets.
pub const MANAGED_SERVICE_ACCOUNTS: &[&str] = &["default"];

/// The ServiceAccount controller; queue keys are namespace names.
pub struct ServiceAccountsController {
    api: Arc<dyn ApiClient>,
    namespaces: Arc<Informer<Namespace>>,
    service_accounts: Arc<Informer<ServiceAccount>>,
    queue: Arc<WorkQueue<String>>,
}

impl ServiceAccountsController {
    /// Creates the controller on the factory's Namespace and ServiceAccount informers.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        let namespaces = factory.informer::<Namespace>();
        let service_accounts = factory.informer::<ServiceAccount>();
        let q = queue.clone();
        let q2 = queue.clone();
        namespaces.add_event_handler(Arc::new(
            HandlerFns::new()
                .on_add(move |ns: &Arc<Namespace>| q.add(ns.metadata.name.clone().unwrap_or_default()))
                .on_update(move |_, ns: &Arc<Namespace>| q2.add(ns.metadata.name.clone().unwrap_or_default())),
        ));
        let q = queue.clone();
        service_accounts.add_event_handler(Arc::new(HandlerFns::new().on_delete(move |sa: &Arc<ServiceAccount>| {
            if MANAGED_SERVICE_ACCOUNTS.contains(&sa.metadata.name.as_deref().unwrap_or_default()) {
                q.add(sa.metadata.namespace.clone().unwrap_or_default());
            }
        })));
        Arc::new(Self { api, namespaces, service_accounts, queue })
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// `syncNamespace`: creates the missing managed ServiceAccounts of an active namespace.
    pub async fn sync_namespace(&self, name: &str) -> ReconcileResult {
        let Some(ns) = self.namespaces.store().get(name) else {
            return Ok(Action::AwaitChange);
        };
        let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Active");
        if phase != "Active" || ns.metadata.deletion_timestamp.is_some() {
            return Ok(Action::AwaitChange);
        }
        for sa_name in MANAGED_SERVICE_ACCOUNTS {
            if self.service_accounts.store().get_namespaced(Some(name), sa_name).is_some() {
                continue;
            }
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(sa_name.to_string()),
                    namespace: Some(name.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match self.api.create_typed(&sa).await {
                Ok(_) => {}
                Err(e) if is_already_exists(&e) || has_status_cause(&e, NAMESPACE_TERMINATING_CAUSE) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl Reconciler for ServiceAccountsController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_namespace(key).await
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NamespaceStatus;
    use kube::runtime::watcher::Event;

    use super::*;
    use skiff_runtime::fake::FakeApi;

    fn ns(name: &str, phase: &str) -> Namespace {
        Namespace {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            status: Some(NamespaceStatus { phase: Some(phase.into()), ..Default::default() }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn an_active_namespace_without_default_gets_one_and_a_terminating_one_does_not() {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let c = ServiceAccountsController::new(api.clone(), &factory, Arc::new(WorkQueue::new()));
        factory.informer::<Namespace>().handle_event(Event::Apply(ns("team", "Active")));
        factory.informer::<Namespace>().handle_event(Event::Apply(ns("going", "Terminating")));
        assert_eq!(c.queue().len(), 2);
        c.sync_namespace("team").await.unwrap();
        c.sync_namespace("going").await.unwrap();
        assert_eq!(api.mutation_summaries(), ["create serviceaccounts team/default"]);

        // Already there: nothing to do.
        api.clear_actions();
        let sa = api.object_typed::<ServiceAccount>(Some("team"), "default").unwrap();
        factory.informer::<ServiceAccount>().handle_event(Event::Apply(sa.clone()));
        c.sync_namespace("team").await.unwrap();
        assert!(api.mutations().is_empty());

        // Deleted: the namespace is queued again.
        while !c.queue().is_empty() {
            let k = c.queue().get().await.unwrap();
            c.queue().done(&k);
        }
        factory.informer::<ServiceAccount>().handle_event(Event::Delete(sa));
        assert_eq!(c.queue().len(), 1);
    }
}
