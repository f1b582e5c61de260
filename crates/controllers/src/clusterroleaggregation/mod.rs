//! The ClusterRole aggregation controller (`pkg/controller/clusterroleaggregation`,
//! kube-controller-manager's `clusterrole-aggregation`): a ClusterRole with an
//! `aggregationRule` holds, as its `rules`, the union of the rules of the ClusterRoles its
//! `clusterRoleSelectors` match
//! (<https://kubernetes.io/docs/reference/access-authn-authz/rbac/#aggregated-clusterroles>).
//! The union is `skiff_auth::rbac::aggregation::aggregate_rules`, the definition the API
//! server's bootstrap policy uses too.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::rbac::v1::ClusterRole;

use skiff_auth::rbac::aggregation::aggregate_rules;
use skiff_runtime::api::{ApiClient, ApiClientExt};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult, Reconciler};
use skiff_runtime::informer::{HandlerFns, Informer, SharedInformerFactory, Store};
use skiff_runtime::workqueue::WorkQueue;

/// The controller; queue keys are the names of ClusterRoles with an aggregation rule.
pub struct ClusterRoleAggregationController {
    api: Arc<dyn ApiClient>,
    cluster_roles: Arc<Informer<ClusterRole>>,
    queue: Arc<WorkQueue<String>>,
}

/// Queues every ClusterRole that has an aggregation rule (`enqueue`): any ClusterRole's change
/// may change what they select.
fn enqueue_aggregated(store: &Store<ClusterRole>, queue: &WorkQueue<String>) {
    for role in store.list() {
        if role.aggregation_rule.is_some() {
            queue.add(role.metadata.name.clone().unwrap_or_default());
        }
    }
}

impl ClusterRoleAggregationController {
    /// Creates the controller on the factory's ClusterRole informer.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        let cluster_roles = factory.informer::<ClusterRole>();
        let (s1, s2, s3) =
            (cluster_roles.store().clone(), cluster_roles.store().clone(), cluster_roles.store().clone());
        let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
        cluster_roles.add_event_handler(Arc::new(
            HandlerFns::new()
                .on_add(move |_: &Arc<ClusterRole>| enqueue_aggregated(&s1, &q1))
                .on_update(move |_, _: &Arc<ClusterRole>| enqueue_aggregated(&s2, &q2))
                .on_delete(move |_: &Arc<ClusterRole>| enqueue_aggregated(&s3, &q3)),
        ));
        Arc::new(Self { api, cluster_roles, queue })
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// `syncClusterRole`: writes the union of the selected roles' rules into the named
    /// ClusterRole when its stored rules differ. The write is conditional on the cached
    /// resourceVersion: a role changed meanwhile is recomputed (its change queued it again).
    pub async fn sync_cluster_role(&self, name: &str) -> ReconcileResult {
        let Some(role) = self.cluster_roles.store().get(name) else { return Ok(Action::AwaitChange) };
        let all = self.cluster_roles.store().list();
        let rules = match aggregate_rules(&role, all.iter().map(|r| r.as_ref())) {
            Ok(Some(rules)) => rules,
            Ok(None) => return Ok(Action::AwaitChange),
            // An invalid selector (the API server's validation refuses one): nothing to write
            // until the role changes.
            Err(e) => return Err(ReconcileError::Other(format!("invalid aggregation rule: {e}"))),
        };
        if role.rules.as_ref() == Some(&rules) {
            return Ok(Action::AwaitChange);
        }
        let mut updated = ClusterRole::clone(&role);
        updated.rules = Some(rules);
        self.api.update_typed(&updated).await?;
        tracing::debug!(role = name, "aggregated ClusterRole rules");
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl Reconciler for ClusterRoleAggregationController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_cluster_role(key).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::rbac::v1::{AggregationRule, PolicyRule};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use kube::runtime::watcher::Event;
    use skiff_runtime::fake::FakeApi;

    use super::*;

    fn rule(verb: &str, resource: &str) -> PolicyRule {
        PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec![resource.into()]),
            verbs: vec![verb.into()],
            ..Default::default()
        }
    }

    fn role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>) -> ClusterRole {
        ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            rules: Some(rules),
            aggregation_rule: None,
        }
    }

    fn aggregated(name: &str, label: &str) -> ClusterRole {
        ClusterRole {
            aggregation_rule: Some(AggregationRule {
                cluster_role_selectors: Some(vec![LabelSelector {
                    match_labels: Some(BTreeMap::from([(label.to_string(), "true".to_string())])),
                    ..Default::default()
                }]),
            }),
            rules: None,
            ..role(name, &[], vec![])
        }
    }

    fn setup(roles: &[ClusterRole]) -> (Arc<FakeApi>, SharedInformerFactory, Arc<ClusterRoleAggregationController>) {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let c = ClusterRoleAggregationController::new(api.clone(), &factory, Arc::new(WorkQueue::new()));
        for r in roles {
            api.seed(r);
            let stored = api.object_typed::<ClusterRole>(None, r.metadata.name.as_deref().unwrap()).unwrap();
            factory.informer::<ClusterRole>().handle_event(Event::Apply(stored));
        }
        (api, factory, c)
    }

    async fn drain(q: &WorkQueue<String>) -> Vec<String> {
        skiff_runtime::fake::drain_queue(q).await
    }

    #[tokio::test]
    async fn an_aggregated_role_gets_the_rules_of_the_roles_it_selects_once_each() {
        let (api, _factory, c) = setup(&[
            aggregated("monitoring", "example.com/aggregate-to-monitoring"),
            role("b-pods", &[("example.com/aggregate-to-monitoring", "true")], vec![rule("get", "pods")]),
            role(
                "a-nodes",
                &[("example.com/aggregate-to-monitoring", "true")],
                vec![rule("get", "nodes"), rule("get", "pods")],
            ),
            role("unrelated", &[], vec![rule("delete", "secrets")]),
        ]);
        c.sync_cluster_role("monitoring").await.unwrap();
        assert_eq!(api.mutation_summaries(), ["update clusterroles monitoring"]);
        let stored = api.object_typed::<ClusterRole>(None, "monitoring").unwrap();
        // Roles in name order, a rule already present not repeated.
        assert_eq!(stored.rules.unwrap(), vec![rule("get", "nodes"), rule("get", "pods")]);
    }

    #[tokio::test]
    async fn a_role_already_holding_its_aggregated_rules_is_not_written() {
        let mut target = aggregated("monitoring", "example.com/aggregate-to-monitoring");
        target.rules = Some(vec![rule("get", "pods")]);
        let (api, _factory, c) = setup(&[
            target,
            role("pods", &[("example.com/aggregate-to-monitoring", "true")], vec![rule("get", "pods")]),
            role("plain", &[], vec![rule("get", "nodes")]),
        ]);
        c.sync_cluster_role("monitoring").await.unwrap();
        c.sync_cluster_role("plain").await.unwrap();
        c.sync_cluster_role("missing").await.unwrap();
        assert!(api.mutations().is_empty());
    }

    #[tokio::test]
    async fn any_cluster_role_change_queues_only_the_aggregated_roles() {
        let (_api, factory, c) = setup(&[
            aggregated("monitoring", "example.com/aggregate-to-monitoring"),
            aggregated("viewing", "example.com/aggregate-to-view"),
        ]);
        drain(c.queue()).await;
        let informer = factory.informer::<ClusterRole>();
        let selected = role("pods", &[("example.com/aggregate-to-view", "true")], vec![rule("get", "pods")]);
        informer.handle_event(Event::Apply(selected.clone()));
        let mut keys = drain(c.queue()).await;
        keys.sort();
        assert_eq!(keys, ["monitoring", "viewing"]);
        informer.handle_event(Event::Delete(selected));
        assert_eq!(c.queue().len(), 2);
    }

    #[tokio::test]
    async fn a_role_changed_since_the_cache_saw_it_is_a_conflict_retried_later() {
        let (api, _factory, c) = setup(&[
            aggregated("monitoring", "example.com/aggregate-to-monitoring"),
            role("pods", &[("example.com/aggregate-to-monitoring", "true")], vec![rule("get", "pods")]),
        ]);
        // Someone else wrote the role after the cache's copy.
        api.seed(&aggregated("monitoring", "example.com/aggregate-to-monitoring"));
        let err = c.sync_cluster_role("monitoring").await.unwrap_err();
        assert!(err.is_conflict(), "{err}");
    }
}
