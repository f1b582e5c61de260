//! The root CA certificate publisher (`pkg/controller/certificates/rootcacertpublisher`,
//! kube-controller-manager's `root-ca-cert-publisher`): every namespace holds the
//! `kube-root-ca.crt` ConfigMap whose `ca.crt` is the cluster CA (`--root-ca-file`), which
//! projected service-account volumes mount to verify the API server.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use skiff_runtime::api::{ApiClient, ApiClientExt, NAMESPACE_TERMINATING_CAUSE, has_status_cause, is_not_found};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::informer::{HandlerFns, Informer, SharedInformerFactory};
use skiff_runtime::workqueue::WorkQueue;

/// The ConfigMap published in every namespace (`RootCACertConfigMapName`).
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// The key of the CA bundle in the ConfigMap's `data`.
pub const CA_KEY: &str = "ca.crt";
/// The annotation describing the ConfigMap's use (`DescriptionAnnotation`).
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
/// The value of [`DESCRIPTION_ANNOTATION`], Kubernetes' own wording.
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal \
     endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across \
     distributions of Kubernetes clusters.";

/// The publisher; queue keys are namespace names.
pub struct Publisher {
    api: Arc<dyn ApiClient>,
    config_maps: Arc<Informer<ConfigMap>>,
    queue: Arc<WorkQueue<String>>,
    root_ca: String,
}

impl Publisher {
    /// Creates the publisher of `root_ca` (PEM) on the factory's Namespace and ConfigMap
    /// informers: a namespace is queued when it is added or updated while Active, and when its
    /// `kube-root-ca.crt` is changed or deleted.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        root_ca: String,
    ) -> Arc<Self> {
        let namespaces = factory.informer::<Namespace>();
        let config_maps = factory.informer::<ConfigMap>();
        let (q, q2) = (queue.clone(), queue.clone());
        namespaces.add_event_handler(Arc::new(
            HandlerFns::new()
                .on_add(move |ns: &Arc<Namespace>| q.add(ns.metadata.name.clone().unwrap_or_default()))
                .on_update(move |_, ns: &Arc<Namespace>| {
                    if ns.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Active") == "Active" {
                        q2.add(ns.metadata.name.clone().unwrap_or_default());
                    }
                }),
        ));
        let enqueue = |q: Arc<WorkQueue<String>>| {
            move |cm: &Arc<ConfigMap>| {
                if cm.metadata.name.as_deref() == Some(ROOT_CA_CONFIGMAP)
                    && let Some(ns) = &cm.metadata.namespace
                {
                    q.add(ns.clone());
                }
            }
        };
        let on_update = enqueue(queue.clone());
        config_maps.add_event_handler(Arc::new(
            HandlerFns::new().on_update(move |_, cm: &Arc<ConfigMap>| on_update(cm)).on_delete(enqueue(queue.clone())),
        ));
        Arc::new(Self { api, config_maps, queue, root_ca })
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// `syncNamespace`: creates the ConfigMap when missing, or rewrites its data and
    /// description when they differ. A namespace that is gone or terminating is left alone.
    pub async fn sync_namespace(&self, namespace: &str) -> ReconcileResult {
        let data = BTreeMap::from([(CA_KEY.to_string(), self.root_ca.clone())]);
        let Some(cm) = self.config_maps.store().get_namespaced(Some(namespace), ROOT_CA_CONFIGMAP) else {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(ROOT_CA_CONFIGMAP.to_string()),
                    namespace: Some(namespace.to_string()),
                    annotations: Some(BTreeMap::from([(DESCRIPTION_ANNOTATION.to_string(), DESCRIPTION.to_string())])),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            return match self.api.create_typed(&cm).await {
                Ok(_) => Ok(Action::AwaitChange),
                Err(e) if is_not_found(&e) || has_status_cause(&e, NAMESPACE_TERMINATING_CAUSE) => {
                    Ok(Action::AwaitChange)
                }
                Err(e) => Err(e.into()),
            };
        };
        let described =
            cm.metadata.annotations.as_ref().and_then(|a| a.get(DESCRIPTION_ANNOTATION)).is_some_and(|d| !d.is_empty());
        if cm.data.as_ref() == Some(&data) && described {
            return Ok(Action::AwaitChange);
        }
        let mut cm = ConfigMap::clone(&cm);
        cm.data = Some(data);
        cm.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
        self.api.update_typed(&cm).await?;
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl Reconciler for Publisher {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_namespace(key).await
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NamespaceStatus;
    use kube::runtime::watcher::Event;
    use skiff_apimachinery::status::Cause;
    use skiff_runtime::api::ApiError;
    use skiff_runtime::fake::FakeApi;

    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn ns(name: &str, phase: &str) -> Namespace {
        Namespace {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            status: Some(NamespaceStatus { phase: Some(phase.into()), ..Default::default() }),
            ..Default::default()
        }
    }

    fn setup() -> (Arc<FakeApi>, SharedInformerFactory, Arc<Publisher>) {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let c = Publisher::new(api.clone(), &factory, Arc::new(WorkQueue::new()), CA.to_string());
        (api, factory, c)
    }

    async fn drain(q: &WorkQueue<String>) -> Vec<String> {
        skiff_runtime::fake::drain_queue(q).await
    }

    #[tokio::test]
    async fn a_new_namespace_gets_the_ca_bundle_with_its_description() {
        let (api, factory, c) = setup();
        factory.informer::<Namespace>().handle_event(Event::Apply(ns("team", "Active")));
        assert_eq!(drain(c.queue()).await, ["team"]);
        c.sync_namespace("team").await.unwrap();
        assert_eq!(api.mutation_summaries(), ["create configmaps team/kube-root-ca.crt"]);
        let cm = api.object_typed::<ConfigMap>(Some("team"), ROOT_CA_CONFIGMAP).unwrap();
        assert_eq!(cm.data.unwrap()[CA_KEY], CA);
        assert_eq!(cm.metadata.annotations.unwrap()[DESCRIPTION_ANNOTATION], DESCRIPTION);
    }

    #[tokio::test]
    async fn a_published_bundle_is_left_alone_and_an_edited_one_is_restored() {
        let (api, factory, c) = setup();
        c.sync_namespace("team").await.unwrap();
        let cm = api.object_typed::<ConfigMap>(Some("team"), ROOT_CA_CONFIGMAP).unwrap();
        factory.informer::<ConfigMap>().handle_event(Event::Apply(cm.clone()));
        api.clear_actions();
        c.sync_namespace("team").await.unwrap();
        assert!(api.mutations().is_empty());

        let mut edited = cm;
        edited.data = Some(BTreeMap::from([(CA_KEY.to_string(), "not a CA".to_string())]));
        api.seed(&edited);
        factory
            .informer::<ConfigMap>()
            .handle_event(Event::Apply(api.object_typed(Some("team"), ROOT_CA_CONFIGMAP).unwrap()));
        assert_eq!(drain(c.queue()).await, ["team"]);
        c.sync_namespace("team").await.unwrap();
        assert_eq!(api.mutation_summaries(), ["update configmaps team/kube-root-ca.crt"]);
        assert_eq!(api.object_typed::<ConfigMap>(Some("team"), ROOT_CA_CONFIGMAP).unwrap().data.unwrap()[CA_KEY], CA);
    }

    #[tokio::test]
    async fn a_deleted_bundle_queues_its_namespace_and_other_config_maps_do_not() {
        let (_api, factory, c) = setup();
        let cm = |name: &str| ConfigMap {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("team".into()), ..Default::default() },
            ..Default::default()
        };
        let informer = factory.informer::<ConfigMap>();
        informer.handle_event(Event::Apply(cm("settings")));
        informer.handle_event(Event::Delete(cm("settings")));
        assert!(c.queue().is_empty());
        informer.handle_event(Event::Apply(cm(ROOT_CA_CONFIGMAP)));
        informer.handle_event(Event::Delete(cm(ROOT_CA_CONFIGMAP)));
        assert_eq!(drain(c.queue()).await, ["team"]);
    }

    #[tokio::test]
    async fn a_terminating_namespace_is_not_retried() {
        let (api, factory, c) = setup();
        factory.informer::<Namespace>().handle_event(Event::Apply(ns("going", "Terminating")));
        // Added while terminating (a restart): queued, and the refusal ends the sync.
        assert_eq!(drain(c.queue()).await, ["going"]);
        let mut refusal =
            ApiError::forbidden("", "configmaps", ROOT_CA_CONFIGMAP, "namespace going is being terminated");
        if let Some(d) = refusal.details.as_mut() {
            d.causes.push(Cause {
                reason: NAMESPACE_TERMINATING_CAUSE.into(),
                message: "namespace going is being terminated".into(),
                field: String::new(),
            });
        }
        api.fail_next("create", "configmaps", refusal);
        assert_eq!(c.sync_namespace("going").await.unwrap(), Action::AwaitChange);
        // An update of a terminating namespace queues nothing.
        factory.informer::<Namespace>().handle_event(Event::Apply(ns("going", "Terminating")));
        assert!(c.queue().is_empty());
    }
}
