//! The disruption controller's second loop (`syncStalePodDisruption` in `disruption.go`): a pod
//! given the `DisruptionTarget` condition (by an eviction about to delete it) that is still not
//! being deleted [`STALE_POD_DISRUPTION_TIMEOUT`] later — the delete failed or was refused — has
//! the condition reset to `False`, so that it does not claim a disruption that never came.
//!
//! Conditions set by the kubelet (`TerminationByKubelet`) and pods in a terminal phase are left
//! alone, as in Kubernetes. The reset is a status patch pinned to the pod's resourceVersion.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::util::{Clock, name_of, pod_phase, system_clock, time};
use skiff_runtime::api::{ApiClient, ApiClientExt, PatchType, is_not_found, resource_of};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::informer::{ResourceEventHandler, SharedInformerFactory, key_of, split_key};
use skiff_runtime::workqueue::WorkQueue;

/// How long a `DisruptionTarget` condition may stand on a pod that is not being deleted.
pub const STALE_POD_DISRUPTION_TIMEOUT: Duration = Duration::from_secs(2 * 60);
/// The pod condition an eviction sets before deleting the pod.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// `nonTerminatingPodHasStaleDisruptionCondition`: `Some(wait)` when the pod carries a
/// `DisruptionTarget` condition this loop owns, stale after `wait` (zero: stale now).
pub fn stale_disruption_condition(pod: &Pod, now: Timestamp) -> Option<Duration> {
    if pod.metadata.deletion_timestamp.is_some() || matches!(pod_phase(pod), "Succeeded" | "Failed") {
        return None;
    }
    let cond = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == DISRUPTION_TARGET)?;
    if cond.status != "True" || cond.reason.as_deref() == Some("TerminationByKubelet") {
        return None;
    }
    let since = cond.last_transition_time.as_ref().map(|t| t.0.as_second()).unwrap_or(0);
    let age = (now.as_second() - since).max(0) as u64;
    Some(STALE_POD_DISRUPTION_TIMEOUT.saturating_sub(Duration::from_secs(age)))
}

/// Resets stale `DisruptionTarget` conditions; keys are pod keys.
pub struct StalePodDisruptionCleaner {
    api: Arc<dyn ApiClient>,
    clock: Clock,
}

struct Handlers {
    queue: Arc<WorkQueue<String>>,
    clock: Clock,
}

impl ResourceEventHandler<Pod> for Handlers {
    fn on_add(&self, pod: &Arc<Pod>) {
        if let Some(wait) = stale_disruption_condition(pod, (self.clock)()) {
            if wait.is_zero() {
                self.queue.add(key_of(pod.as_ref()));
            } else {
                self.queue.add_after(key_of(pod.as_ref()), wait);
            }
        }
    }

    fn on_update(&self, _old: &Arc<Pod>, cur: &Arc<Pod>) {
        self.on_add(cur);
    }

    fn on_delete(&self, _pod: &Arc<Pod>) {}
}

impl StalePodDisruptionCleaner {
    /// Creates the loop on the factory's Pod informer, feeding `queue`.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        Self::with_clock(api, factory, queue, system_clock())
    }

    /// As [`StalePodDisruptionCleaner::new`], with a clock (tests).
    pub fn with_clock(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        clock: Clock,
    ) -> Arc<Self> {
        factory.informer::<Pod>().add_event_handler(Arc::new(Handlers { queue, clock: clock.clone() }));
        Arc::new(Self { api, clock })
    }

    /// `syncStalePodDisruption` of one pod key: reads the pod live and resets its condition once
    /// stale, or looks again when it will be.
    pub async fn sync(&self, key: &str) -> ReconcileResult {
        let (ns, name) = split_key(key);
        let pod: Pod = match self.api.get_typed(ns, name).await {
            Ok(p) => p,
            Err(e) if is_not_found(&e) => return Ok(Action::AwaitChange),
            Err(e) => return Err(e.into()),
        };
        let now = (self.clock)();
        match stale_disruption_condition(&pod, now) {
            None => Ok(Action::AwaitChange),
            Some(wait) if !wait.is_zero() => Ok(Action::RequeueAfter(wait)),
            Some(_) => {
                let patch = json!({
                    "metadata": {"resourceVersion": pod.metadata.resource_version},
                    "status": {"conditions": [{
                        "type": DISRUPTION_TARGET, "status": "False", "lastTransitionTime": time(now),
                    }]},
                });
                tracing::info!(pod = name_of(&pod.metadata), "resetting a stale DisruptionTarget condition");
                self.api.patch(&resource_of::<Pod>(), ns, name, PatchType::Strategic, &patch, Some("status")).await?;
                Ok(Action::AwaitChange)
            }
        }
    }
}

#[async_trait]
impl Reconciler for StalePodDisruptionCleaner {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync(key).await
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::util::{add_seconds, fixed_clock};
    use skiff_runtime::fake::FakeApi;

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    fn marked(name: &str, ago: i64, reason: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some("4".into()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: DISRUPTION_TARGET.into(),
                    status: "True".into(),
                    reason: Some(reason.into()),
                    last_transition_time: Some(Time(add_seconds(now(), -ago))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn fixture() -> (Arc<FakeApi>, SharedInformerFactory, Arc<WorkQueue<String>>, Arc<StalePodDisruptionCleaner>) {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let queue = Arc::new(WorkQueue::new());
        let cleaner = StalePodDisruptionCleaner::with_clock(api.clone(), &factory, queue.clone(), fixed_clock(now()));
        (api, factory, queue, cleaner)
    }

    #[tokio::test]
    async fn a_disruption_condition_older_than_two_minutes_on_a_live_pod_is_reset() {
        let (api, factory, queue, cleaner) = fixture();
        let pod = marked("p", 121, "EvictionByEvictionAPI");
        api.seed(&pod);
        factory.informer::<Pod>().handle_event(Event::Apply(pod));
        assert_eq!(queue.len(), 1, "a stale condition is queued at once");
        assert_eq!(cleaner.sync("ns/p").await.unwrap(), Action::AwaitChange);
        let patch = api.mutations().into_iter().find(|a| a.verb == "patch").unwrap();
        assert_eq!(patch.subresource.as_deref(), Some("status"));
        let body = patch.body.unwrap();
        assert_eq!(body["metadata"]["resourceVersion"], "4");
        assert_eq!(body["status"]["conditions"][0]["type"], "DisruptionTarget");
        assert_eq!(body["status"]["conditions"][0]["status"], "False");
    }

    #[tokio::test]
    async fn a_fresh_condition_is_looked_at_again_when_it_goes_stale() {
        let (api, _, _, cleaner) = fixture();
        api.seed(&marked("p", 100, "EvictionByEvictionAPI"));
        assert_eq!(cleaner.sync("ns/p").await.unwrap(), Action::RequeueAfter(Duration::from_secs(20)));
        assert!(api.mutations().is_empty());
    }

    #[test]
    fn deleted_terminal_and_kubelet_marked_pods_are_left_alone() {
        let mut deleting = marked("a", 500, "EvictionByEvictionAPI");
        deleting.metadata.deletion_timestamp = Some(Time(now()));
        assert_eq!(stale_disruption_condition(&deleting, now()), None);
        let mut failed = marked("b", 500, "EvictionByEvictionAPI");
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        assert_eq!(stale_disruption_condition(&failed, now()), None);
        assert_eq!(stale_disruption_condition(&marked("c", 500, "TerminationByKubelet"), now()), None);
        assert_eq!(stale_disruption_condition(&marked("d", 500, "PreemptionByScheduler"), now()), Some(Duration::ZERO));
    }
}
