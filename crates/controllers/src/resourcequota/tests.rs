use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Container, PodSpec, PodStatus, ResourceQuotaSpec, ResourceQuotaStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use kube::runtime::watcher::Event;
use skiff_runtime::fake::FakeApi;

use super::*;

fn quantities_of(pairs: &[(&str, &str)]) -> BTreeMap<String, K8sQuantity> {
    pairs.iter().map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string()))).collect()
}

fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..Default::default() }
}

fn quota(ns: &str, name: &str, hard: &[(&str, &str)]) -> ResourceQuota {
    ResourceQuota {
        metadata: meta(ns, name),
        spec: Some(ResourceQuotaSpec { hard: Some(quantities_of(hard)), ..Default::default() }),
        status: None,
    }
}

fn pod(ns: &str, name: &str, cpu: &str, phase: &str) -> Pod {
    Pod {
        metadata: meta(ns, name),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities_of(&[("cpu", cpu)])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
    }
}

struct Fixture {
    api: Arc<FakeApi>,
    factory: Arc<SharedInformerFactory>,
    c: Arc<ResourceQuotaController>,
}

impl Fixture {
    fn new() -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = Arc::new(SharedInformerFactory::for_tests());
        let c = ResourceQuotaController::new(api.clone(), factory.clone(), Arc::new(WorkQueue::new()));
        Fixture { api, factory, c }
    }

    /// Seeds a quota in the fake API and the informer (as the watch would deliver it).
    fn add_quota(&self, q: &ResourceQuota) {
        self.api.seed(q);
        let ns = q.metadata.namespace.as_deref();
        let stored = self.api.object_typed::<ResourceQuota>(ns, q.metadata.name.as_deref().unwrap()).unwrap();
        self.factory.informer::<ResourceQuota>().handle_event(Event::Apply(stored));
    }

    fn status(&self, ns: &str, name: &str) -> ResourceQuotaStatus {
        self.api.object_typed::<ResourceQuota>(Some(ns), name).unwrap().status.unwrap_or_default()
    }

    async fn drain(&self) -> Vec<String> {
        let mut keys = skiff_runtime::fake::drain_queue(self.c.queue()).await;
        keys.sort();
        keys
    }
}

#[test]
fn quota_keys_count_the_resources_kubernetes_counts() {
    let core = |r: &str| Some((String::new(), r.to_string()));
    assert_eq!(counted_resources("pods"), core("pods"));
    assert_eq!(counted_resources("requests.cpu"), core("pods"));
    assert_eq!(counted_resources("limits.memory"), core("pods"));
    assert_eq!(counted_resources("requests.storage"), core("persistentvolumeclaims"));
    assert_eq!(counted_resources("gold.storageclass.storage.k8s.io/requests.storage"), core("persistentvolumeclaims"));
    assert_eq!(counted_resources("services.nodeports"), core("services"));
    assert_eq!(counted_resources("configmaps"), core("configmaps"));
    assert_eq!(counted_resources("count/pods"), core("pods"));
    assert_eq!(counted_resources("count/deployments.apps"), Some(("apps".into(), "deployments".into())));
    assert_eq!(counted_resources("count/widgets.example.com"), Some(("example.com".into(), "widgets".into())));
    assert_eq!(counted_resources("hugepages"), None);
}

#[test]
fn statuses_differing_only_in_spelling_are_the_same() {
    let a = json!({"hard": {"memory": "1Gi"}, "used": {"memory": "0"}});
    let b = json!({"hard": {"memory": "1073741824"}, "used": {"memory": "0"}});
    assert!(same_status(&a, &b));
    assert!(!same_status(&a, &json!({"hard": {"memory": "1Gi"}, "used": {"memory": "1"}})));
    assert!(!same_status(&Value::Null, &a));
}

#[tokio::test]
async fn a_new_quota_gets_its_hard_limits_and_the_usage_of_the_live_pods_of_its_namespace() {
    let f = Fixture::new();
    let pods = f.factory.informer::<Pod>();
    pods.handle_event(Event::Apply(pod("team", "web", "100m", "Running")));
    pods.handle_event(Event::Apply(pod("team", "done", "500m", "Succeeded")));
    pods.handle_event(Event::Apply(pod("other", "web", "2", "Running")));
    f.add_quota(&quota("team", "compute", &[("pods", "10"), ("requests.cpu", "1")]));
    assert_eq!(f.drain().await, ["team/compute"]);

    f.c.sync_resource_quota("team/compute").await.unwrap();
    assert_eq!(f.api.mutation_summaries(), ["update resourcequotas/status team/compute"]);
    let status = f.status("team", "compute");
    assert_eq!(status.hard.unwrap(), quantities_of(&[("pods", "10"), ("requests.cpu", "1")]));
    assert_eq!(status.used.unwrap(), quantities_of(&[("pods", "1"), ("requests.cpu", "100m")]));
}

#[tokio::test]
async fn a_quota_whose_status_is_current_is_not_written() {
    let f = Fixture::new();
    let mut q = quota("team", "compute", &[("pods", "10")]);
    q.status = Some(ResourceQuotaStatus {
        hard: Some(quantities_of(&[("pods", "10")])),
        used: Some(quantities_of(&[("pods", "0")])),
    });
    f.add_quota(&q);
    f.c.sync_resource_quota("team/compute").await.unwrap();
    f.c.sync_resource_quota("team/gone").await.unwrap();
    assert!(f.api.mutations().is_empty());
}

#[tokio::test]
async fn pods_queue_the_quotas_of_their_namespace_when_their_usage_changes() {
    let f = Fixture::new();
    f.add_quota(&quota("team", "compute", &[("pods", "10")]));
    f.add_quota(&quota("team", "objects", &[("configmaps", "10")]));
    f.drain().await;
    let pods = f.factory.informer::<Pod>();

    pods.handle_event(Event::Apply(pod("team", "web", "100m", "Pending")));
    assert_eq!(f.drain().await, ["team/compute", "team/objects"]);
    // A status change that does not change usage (Pending → Running) queues nothing.
    pods.handle_event(Event::Apply(pod("team", "web", "100m", "Running")));
    assert!(f.c.queue().is_empty());
    // Turning terminal releases the pod's usage.
    pods.handle_event(Event::Apply(pod("team", "web", "100m", "Succeeded")));
    assert_eq!(f.drain().await, ["team/compute", "team/objects"]);
    pods.handle_event(Event::Delete(pod("team", "web", "100m", "Succeeded")));
    assert_eq!(f.drain().await, ["team/compute", "team/objects"]);
    // Another namespace's pods do not concern these quotas.
    pods.handle_event(Event::Apply(pod("other", "web", "100m", "Pending")));
    assert!(f.c.queue().is_empty());
}

#[tokio::test]
async fn counts_of_other_resources_come_from_a_monitor_created_on_first_use() {
    let f = Fixture::new();
    // The deployment controller's typed informer, not listed yet.
    let deployments = f.factory.informer::<Deployment>();
    f.api.set_discovery(vec![DiscoveredResource {
        resource: resource_of::<Deployment>(),
        namespaced: true,
        verbs: ["list", "watch"].map(String::from).to_vec(),
    }]);
    f.add_quota(&quota("team", "objects", &[("count/deployments.apps", "5"), ("count/widgets.example.com", "5")]));
    f.drain().await;

    // The monitor has not listed yet: try again shortly rather than write a wrong count.
    assert_eq!(f.c.sync_resource_quota("team/objects").await.unwrap(), Action::RequeueAfter(MONITOR_SYNC_RETRY));
    assert!(f.api.mutations().is_empty());

    deployments.handle_event(Event::Apply(Deployment { metadata: meta("team", "a"), ..Default::default() }));
    deployments.handle_event(Event::Apply(Deployment { metadata: meta("team", "b"), ..Default::default() }));
    deployments.handle_event(Event::Apply(Deployment { metadata: meta("other", "c"), ..Default::default() }));
    deployments.mark_synced();
    f.drain().await;
    f.c.sync_resource_quota("team/objects").await.unwrap();
    let used = f.status("team", "objects").used.unwrap();
    // Widgets are not served: they count nothing.
    assert_eq!(used, quantities_of(&[("count/deployments.apps", "2"), ("count/widgets.example.com", "0")]));
    // Discovery was asked once; the unserved resource is not looked up again at once.
    let discoveries = f.api.actions().iter().filter(|a| a.verb == "discover").count();
    assert_eq!(discoveries, 1);

    // Deleting a counted object queues the quota (replenishment).
    deployments.handle_event(Event::Delete(Deployment { metadata: meta("team", "a"), ..Default::default() }));
    assert_eq!(f.drain().await, ["team/objects"]);
}

#[tokio::test]
async fn a_quota_changed_since_the_cache_saw_it_is_a_conflict_retried_later() {
    let f = Fixture::new();
    f.add_quota(&quota("team", "compute", &[("pods", "10")]));
    // Admission charged a create after the cache's copy.
    f.api.seed(&quota("team", "compute", &[("pods", "10")]));
    let err = f.c.sync_resource_quota("team/compute").await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
}
