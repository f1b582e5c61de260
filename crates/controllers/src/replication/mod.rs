//! The replication manager (`pkg/controller/replication`): ReplicationControllers (core/v1) run
//! on the ReplicaSet controller's logic, which sees each one converted to a ReplicaSet
//! (`conversion.go`): its label-map selector becomes `matchLabels`, and the status it computes
//! is converted back and written to the ReplicationController's `status`. Pods it creates are
//! owned by the ReplicationController; its events come from `replication-controller`.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetSpec, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{ReplicationController, ReplicationControllerCondition, ReplicationControllerStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as MetaLabelSelector;

use crate::replicaset::{ReplicaSetController, ReplicaSetKind};

/// The ReplicationController controller: the ReplicaSet controller run for
/// [`ReplicationController`]s.
pub type ReplicationManager = ReplicaSetController<ReplicationController>;

/// `Convert_v1_ReplicationController_To_apps_ReplicaSet`: the ReplicaSet the ReplicaSet logic
/// works on (same metadata, selector map as `matchLabels`, replicas, minReadySeconds, template,
/// status).
pub fn to_replica_set(rc: &ReplicationController) -> ReplicaSet {
    let spec = rc.spec.clone().unwrap_or_default();
    let status = rc.status.as_ref().map(|s| ReplicaSetStatus {
        replicas: s.replicas,
        fully_labeled_replicas: s.fully_labeled_replicas,
        ready_replicas: s.ready_replicas,
        available_replicas: s.available_replicas,
        observed_generation: s.observed_generation,
        conditions: s.conditions.as_ref().map(|cs| {
            cs.iter()
                .map(|c| ReplicaSetCondition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                    last_transition_time: c.last_transition_time.clone(),
                })
                .collect()
        }),
        ..Default::default()
    });
    ReplicaSet {
        metadata: rc.metadata.clone(),
        spec: Some(ReplicaSetSpec {
            replicas: spec.replicas,
            min_ready_seconds: spec.min_ready_seconds,
            selector: MetaLabelSelector { match_labels: spec.selector, match_expressions: None },
            template: spec.template,
        }),
        status,
    }
}

/// `Convert_apps_ReplicaSetStatus_To_v1_ReplicationControllerStatus`.
pub fn to_replication_controller_status(s: ReplicaSetStatus) -> ReplicationControllerStatus {
    ReplicationControllerStatus {
        replicas: s.replicas,
        fully_labeled_replicas: s.fully_labeled_replicas,
        ready_replicas: s.ready_replicas,
        available_replicas: s.available_replicas,
        observed_generation: s.observed_generation,
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .map(|c| ReplicationControllerCondition {
                    type_: c.type_,
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                    last_transition_time: c.last_transition_time,
                })
                .collect()
        }),
    }
}

impl ReplicaSetKind for ReplicationController {
    fn to_replica_set(this: &Arc<Self>) -> Arc<ReplicaSet> {
        Arc::new(to_replica_set(this))
    }

    fn with_status(&self, status: ReplicaSetStatus) -> Self {
        let mut rc = self.clone();
        rc.status = Some(to_replication_controller_status(status));
        rc
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ReplicationControllerSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::watcher::Event;

    use super::*;
    use skiff_runtime::controller::Action;
    use skiff_runtime::events::EventRecorder;
    use skiff_runtime::fake::FakeApi;
    use skiff_runtime::informer::SharedInformerFactory;
    use skiff_runtime::workqueue::WorkQueue;

    fn rc(replicas: i32) -> ReplicationController {
        let labels: std::collections::BTreeMap<String, String> = [("app".to_string(), "legacy".to_string())].into();
        ReplicationController {
            metadata: ObjectMeta {
                name: Some("legacy".into()),
                namespace: Some("ns".into()),
                uid: Some("legacy-uid".into()),
                resource_version: Some("3".into()),
                generation: Some(2),
                ..Default::default()
            },
            spec: Some(ReplicationControllerSpec {
                replicas: Some(replicas),
                selector: Some(labels.clone()),
                template: Some(PodTemplateSpec {
                    metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            image: Some("nginx".into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn a_replication_controller_converts_to_a_replica_set_and_its_status_back() {
        let rs = to_replica_set(&rc(3));
        let spec = rs.spec.clone().unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.selector.match_labels.unwrap()["app"], "legacy");
        assert_eq!(rs.metadata.uid.as_deref(), Some("legacy-uid"));
        let back = to_replication_controller_status(ReplicaSetStatus {
            replicas: 3,
            ready_replicas: Some(2),
            observed_generation: Some(2),
            ..Default::default()
        });
        assert_eq!((back.replicas, back.ready_replicas, back.observed_generation), (3, Some(2), Some(2)));
    }

    #[tokio::test]
    async fn the_replication_manager_creates_pods_owned_by_the_replication_controller() {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let recorder = EventRecorder::recording("replication-controller");
        let manager = ReplicationManager::new(api.clone(), &factory, Arc::new(WorkQueue::new()), recorder.clone());
        let rc = rc(3);
        api.seed(&rc);
        factory.informer::<ReplicationController>().handle_event(Event::Apply(rc));
        assert_eq!(manager.sync_replica_set("ns/legacy").await.unwrap(), Action::AwaitChange);
        let creates: Vec<_> = api.mutations().into_iter().filter(|a| a.verb == "create").collect();
        assert_eq!(creates.len(), 3);
        let owner = &creates[0].body.as_ref().unwrap()["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "ReplicationController");
        assert_eq!(owner["apiVersion"], "v1");
        assert_eq!(owner["uid"], "legacy-uid");
        // The status lands on the ReplicationController.
        assert_eq!(api.mutation_summaries().last().unwrap(), "update replicationcontrollers/status ns/legacy");
        let stored: ReplicationController = api.object_typed(Some("ns"), "legacy").unwrap();
        assert_eq!(stored.status.unwrap().observed_generation, Some(2));
        let events = recorder.recorded();
        assert_eq!(events[0].object.kind.as_deref(), Some("ReplicationController"));
        assert!(events[0].summary().starts_with("Normal SuccessfulCreate Created pod: legacy-"));
    }
}
