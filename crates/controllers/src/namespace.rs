//! The namespace controller (`pkg/controller/namespace`): empties a namespace being deleted,
//! then releases it.
//!
//! When a namespace gets a deletionTimestamp (the API server also sets `status.phase:
//! Terminating` and refuses new objects in it), after a short grace period:
//! 1. `status.phase` is made `Terminating` (if the server did not).
//! 2. For every namespaced resource discovery lists with `list` and `delete` (custom ones
//!    included), the collection is deleted (DELETE of the collection, Background; or one by
//!    one if `deletecollection` is not supported), then listed again to see what remains.
//! 3. The namespace's deletion conditions (`NamespaceContentRemaining`,
//!    `NamespaceFinalizersRemaining`, …) report progress (`kubectl describe namespace`).
//! 4. If pods are still terminating (estimate: their longest grace period) or objects wait on
//!    finalizers, the namespace is looked at again after `estimate / 2 + 1` seconds.
//! 5. Once empty, the `kubernetes` finalizer is removed through `PUT
//!    /api/v1/namespaces/{name}/finalize`, and the API server deletes the namespace.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition, Pod};
use serde_json::Value;

use crate::util::{Clock, system_clock, time};
use skiff_runtime::api::{
    ApiClient, ApiClientExt, ApiError, DeleteOptions, DiscoveredResource, PropagationPolicy, is_conflict,
    is_method_not_supported, is_not_found, resource_of,
};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult, Reconciler};
use skiff_runtime::informer::{HandlerFns, Informer, SharedInformerFactory};
use skiff_runtime::workqueue::WorkQueue;

/// The finalizer the namespace controller owns (`v1.FinalizerKubernetes`).
pub const FINALIZER_KUBERNETES: &str = "kubernetes";
/// Seconds to wait for objects held by finalizers (`finalizerEstimateSeconds`).
pub const FINALIZER_ESTIMATE_SECONDS: i64 = 15;

/// The namespace controller.
pub struct NamespaceController {
    api: Arc<dyn ApiClient>,
    queue: Arc<WorkQueue<String>>,
    clock: Clock,
}

#[derive(Default)]
struct ContentResult {
    estimate: i64,
    remaining: BTreeMap<String, usize>,
    finalizers_remaining: BTreeMap<String, usize>,
}

fn name_of(v: &Value) -> String {
    v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string()
}

fn finalizers_of(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

fn resource_name(r: &DiscoveredResource) -> String {
    if r.resource.group.is_empty() {
        r.resource.plural.clone()
    } else {
        format!("{}.{}", r.resource.plural, r.resource.group)
    }
}

impl NamespaceController {
    /// Creates the controller on the factory's Namespace informer. Deleted namespaces are
    /// queued after `grace` (Kubernetes waits 5 s so that HA API servers see the deletion).
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        grace: Duration,
    ) -> Arc<Self> {
        let namespaces: Arc<Informer<Namespace>> = factory.informer::<Namespace>();
        let enqueue = {
            let queue = queue.clone();
            move |ns: &Arc<Namespace>| {
                if ns.metadata.deletion_timestamp.is_some() {
                    queue.add_after(ns.metadata.name.clone().unwrap_or_default(), grace);
                }
            }
        };
        let enqueue2 = enqueue.clone();
        namespaces
            .add_event_handler(Arc::new(HandlerFns::new().on_add(enqueue).on_update(move |_, new| enqueue2(new))));
        Arc::new(Self { api, queue, clock: system_clock() })
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// Writes `status.phase: Terminating` (re-reading on conflicts).
    async fn ensure_terminating(&self, mut ns: Namespace) -> Result<Namespace, ApiError> {
        for _ in 0..3 {
            if ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating") {
                return Ok(ns);
            }
            ns.status.get_or_insert_with(Default::default).phase = Some("Terminating".into());
            match self.api.update_status_typed(&ns).await {
                Ok(updated) => return Ok(updated),
                Err(e) if is_conflict(&e) => {
                    ns = self.api.get_typed(None, ns.metadata.name.as_deref().unwrap_or_default()).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(ns)
    }

    /// Deletes everything of one resource in the namespace and reports what remains.
    async fn delete_all_content_for_resource(
        &self,
        r: &DiscoveredResource,
        namespace: &str,
        out: &mut ContentResult,
    ) -> Result<(), ApiError> {
        let mut estimate = 0;
        if r.resource.group.is_empty() && r.resource.plural == "pods" {
            let pods: Vec<Pod> = self.api.list_typed(Some(namespace), None).await?;
            for pod in pods {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default();
                if phase == "Succeeded" || phase == "Failed" {
                    continue;
                }
                let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(0);
                estimate = estimate.max(grace);
            }
        }
        let background = DeleteOptions::propagation(PropagationPolicy::Background);
        let mut collection_deleted = false;
        if r.supports("deletecollection") {
            match self.api.delete_collection(&r.resource, Some(namespace), &background).await {
                Ok(()) => collection_deleted = true,
                Err(e) if is_method_not_supported(&e) || is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if !collection_deleted {
            for item in self.api.list(&r.resource, Some(namespace), None).await? {
                match self.api.delete(&r.resource, Some(namespace), &name_of(&item), &background).await {
                    Ok(()) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let remaining = self.api.list(&r.resource, Some(namespace), None).await?;
        if remaining.is_empty() {
            out.estimate = out.estimate.max(estimate);
            return Ok(());
        }
        out.remaining.insert(resource_name(r), remaining.len());
        let mut with_finalizers = 0;
        for item in &remaining {
            let fins = finalizers_of(item);
            if !fins.is_empty() {
                with_finalizers += 1;
            }
            for f in fins {
                *out.finalizers_remaining.entry(f).or_default() += 1;
            }
        }
        if estimate > 0 {
            out.estimate = out.estimate.max(estimate);
            return Ok(());
        }
        if with_finalizers > 0 {
            out.estimate = out.estimate.max(FINALIZER_ESTIMATE_SECONDS);
            return Ok(());
        }
        Err(ApiError::internal(format!(
            "unexpected items still remain in namespace: {namespace} for gvr: {}",
            resource_name(r)
        )))
    }

    /// `deleteAllContent`: every namespaced resource; returns the estimate in seconds.
    async fn delete_all_content(&self, ns: &Namespace) -> Result<i64, ReconcileError> {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let discovered = self.api.discover().await;
        let mut out = ContentResult::default();
        let mut errors = Vec::new();
        let discovery_failed = discovered.is_err();
        let resources: Vec<DiscoveredResource> = match discovered {
            Ok(r) => r.into_iter().filter(|r| r.namespaced && r.supports("list") && r.supports("delete")).collect(),
            Err(e) => {
                errors.push(e.message.clone());
                Vec::new()
            }
        };
        for r in &resources {
            if let Err(e) = self.delete_all_content_for_resource(r, &name, &mut out).await {
                errors.push(e.message);
            }
        }
        self.update_conditions(ns, discovery_failed, &errors, &out).await;
        if !errors.is_empty() {
            return Err(ReconcileError::Other(errors.join("; ")));
        }
        Ok(out.estimate)
    }

    /// The namespace deletion conditions, as `updateNamespaceStatusConditions` words them.
    async fn update_conditions(&self, ns: &Namespace, discovery_failed: bool, errors: &[String], out: &ContentResult) {
        let now = time((self.clock)());
        let cond = |type_: &str, failed: bool, bad: (&str, String), good: (&str, &str)| NamespaceCondition {
            type_: type_.to_string(),
            status: if failed { "True" } else { "False" }.to_string(),
            reason: Some(if failed { bad.0 } else { good.0 }.to_string()),
            message: Some(if failed { bad.1 } else { good.1.to_string() }),
            last_transition_time: Some(now.clone()),
        };
        let remaining: Vec<String> =
            out.remaining.iter().map(|(r, n)| format!("{r} has {n} resource instances")).collect();
        let finalizers: Vec<String> =
            out.finalizers_remaining.iter().map(|(f, n)| format!("{f} in {n} resource instances")).collect();
        let wanted = vec![
            cond(
                "NamespaceDeletionDiscoveryFailure",
                discovery_failed,
                ("DiscoveryFailed", format!("Discovery failed for some groups: {}", errors.join(", "))),
                ("ResourcesDiscovered", "All resources successfully discovered"),
            ),
            cond(
                "NamespaceDeletionGroupVersionParsingFailure",
                false,
                ("GroupVersionParsingFailed", String::new()),
                ("ParsedGroupVersions", "All legacy kube types successfully parsed"),
            ),
            cond(
                "NamespaceDeletionContentFailure",
                !errors.is_empty() && !discovery_failed,
                (
                    "ContentDeletionFailed",
                    format!("Failed to delete all resource types, {} remaining: {}", errors.len(), errors.join(", ")),
                ),
                ("ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
            ),
            cond(
                "NamespaceContentRemaining",
                !remaining.is_empty(),
                ("SomeResourcesRemain", format!("Some resources are remaining: {}", remaining.join(", "))),
                ("ContentRemoved", "All content successfully removed"),
            ),
            cond(
                "NamespaceFinalizersRemaining",
                !finalizers.is_empty(),
                (
                    "SomeFinalizersRemain",
                    format!("Some content in the namespace has finalizers remaining: {}", finalizers.join(", ")),
                ),
                ("ContentHasNoFinalizers", "All content-preserving finalizers finished"),
            ),
        ];
        let current = ns.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        let mut merged = Vec::new();
        let mut changed = false;
        for w in wanted {
            match current.iter().find(|c| c.type_ == w.type_) {
                Some(c) if c.status == w.status && c.reason == w.reason && c.message == w.message => {
                    merged.push(c.clone())
                }
                _ => {
                    changed = true;
                    merged.push(w);
                }
            }
        }
        if !changed {
            return;
        }
        let mut updated = ns.clone();
        updated.status.get_or_insert_with(Default::default).conditions = Some(merged);
        if let Err(e) = self.api.update_status_typed(&updated).await {
            tracing::debug!(%e, namespace = ?ns.metadata.name, "cannot update namespace conditions");
        }
    }

    /// Removes the `kubernetes` finalizer (`PUT namespaces/{name}/finalize`).
    async fn finalize(&self, name: &str) -> Result<(), ApiError> {
        let mut ns: Namespace = match self.api.get_typed(None, name).await {
            Ok(ns) => ns,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        for _ in 0..3 {
            let spec = ns.spec.get_or_insert_with(Default::default);
            let finalizers: Vec<String> =
                spec.finalizers.clone().unwrap_or_default().into_iter().filter(|f| f != FINALIZER_KUBERNETES).collect();
            spec.finalizers = Some(finalizers);
            let name = ns.metadata.name.clone().unwrap_or_default();
            let body = serde_json::to_value(&ns).map_err(|e| ApiError::internal(e.to_string()))?;
            match self.api.update(&resource_of::<Namespace>(), None, &name, &body, Some("finalize")).await {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if is_conflict(&e) => ns = self.api.get_typed(None, &name).await?,
                Err(e) => return Err(e),
            }
        }
        Err(ApiError::conflict("", "namespaces", ns.metadata.name.as_deref().unwrap_or_default()))
    }

    /// `syncNamespaceFromKey` / `Delete`.
    pub async fn sync_namespace(&self, name: &str) -> ReconcileResult {
        let ns: Namespace = match self.api.get_typed(None, name).await {
            Ok(ns) => ns,
            Err(e) if is_not_found(&e) => return Ok(Action::AwaitChange),
            Err(e) => return Err(e.into()),
        };
        if ns.metadata.deletion_timestamp.is_none() {
            return Ok(Action::AwaitChange);
        }
        let ns = self.ensure_terminating(ns).await?;
        let finalized = !ns
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.as_ref())
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER_KUBERNETES));
        if finalized {
            return Ok(Action::AwaitChange);
        }
        let estimate = self.delete_all_content(&ns).await?;
        if estimate > 0 {
            tracing::debug!(namespace = name, estimate, "content remaining in namespace");
            return Ok(Action::RequeueAfter(Duration::from_secs((estimate / 2 + 1) as u64)));
        }
        self.finalize(name).await?;
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl Reconciler for NamespaceController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_namespace(key).await
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{NamespaceSpec, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use skiff_runtime::fake::FakeApi;

    fn discovered(ar: skiff_runtime::api::ApiResource, namespaced: bool, deletecollection: bool) -> DiscoveredResource {
        let mut verbs: Vec<String> = ["get", "list", "watch", "delete"].iter().map(|s| s.to_string()).collect();
        if deletecollection {
            verbs.push("deletecollection".into());
        }
        DiscoveredResource { resource: ar, namespaced, verbs }
    }

    fn fixture() -> (Arc<FakeApi>, Arc<NamespaceController>) {
        let api = Arc::new(FakeApi::new());
        api.set_discovery(vec![
            discovered(resource_of::<Pod>(), true, true),
            discovered(resource_of::<Deployment>(), true, false),
            discovered(resource_of::<Namespace>(), false, false),
        ]);
        let c = NamespaceController::new(
            api.clone(),
            &SharedInformerFactory::for_tests(),
            Arc::new(WorkQueue::new()),
            Duration::ZERO,
        );
        (api, c)
    }

    fn terminating_ns() -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some("team".into()),
                deletion_timestamp: Some(Time(Timestamp::from_second(1_700_000_000).unwrap())),
                ..Default::default()
            },
            spec: Some(NamespaceSpec { finalizers: Some(vec![FINALIZER_KUBERNETES.into()]) }),
            status: None,
        }
    }

    fn obj(name: &str) -> ObjectMeta {
        ObjectMeta { name: Some(name.into()), namespace: Some("team".into()), ..Default::default() }
    }

    #[tokio::test]
    async fn an_empty_terminating_namespace_is_finalized() {
        let (api, c) = fixture();
        api.seed(&terminating_ns());
        api.seed(&Deployment { metadata: obj("web"), ..Default::default() });
        assert_eq!(c.sync_namespace("team").await.unwrap(), Action::AwaitChange);
        let m = api.mutation_summaries();
        assert_eq!(m[0], "update namespaces/status team");
        // Deployments do not support deletecollection here: deleted one by one.
        assert!(m.contains(&"delete deployments team/web".to_string()), "{m:?}");
        assert!(m.contains(&"deletecollection pods team/".to_string()), "{m:?}");
        assert_eq!(m.last().unwrap(), "update namespaces/finalize team");
        let finalize = api.mutations().into_iter().last().unwrap();
        assert_eq!(finalize.body.unwrap()["spec"]["finalizers"], json!([]));
        let status =
            api.mutations().into_iter().rev().find(|a| a.summary() == "update namespaces/status team").unwrap();
        let conds = status.body.unwrap()["status"]["conditions"].clone();
        assert!(
            conds
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "NamespaceContentRemaining" && c["reason"] == "ContentRemoved")
        );
    }

    #[tokio::test]
    async fn terminating_pods_delay_finalization_by_half_their_grace_period() {
        let (api, c) = fixture();
        api.seed(&terminating_ns());
        let mut pod = Pod {
            metadata: obj("p"),
            spec: Some(PodSpec { termination_grace_period_seconds: Some(30), ..Default::default() }),
            status: Some(PodStatus { phase: Some("Running".into()), ..Default::default() }),
        };
        // The kubelet has not finished: the pod stays (held by a finalizer here).
        pod.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        api.seed(&pod);
        assert_eq!(c.sync_namespace("team").await.unwrap(), Action::RequeueAfter(Duration::from_secs(16)));
        assert!(!api.mutation_summaries().iter().any(|m| m.contains("finalize")));
        let status = api.object_typed::<Namespace>(None, "team").unwrap().status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Terminating"));
        let remaining =
            status.conditions.unwrap().into_iter().find(|c| c.type_ == "NamespaceContentRemaining").unwrap();
        assert_eq!(remaining.status, "True");
        assert_eq!(remaining.message.as_deref(), Some("Some resources are remaining: pods has 1 resource instances"));
    }

    #[tokio::test]
    async fn a_namespace_not_being_deleted_is_left_alone() {
        let (api, c) = fixture();
        let mut ns = terminating_ns();
        ns.metadata.deletion_timestamp = None;
        api.seed(&ns);
        c.sync_namespace("team").await.unwrap();
        assert!(api.mutations().is_empty());
        assert_eq!(c.sync_namespace("missing").await.unwrap(), Action::AwaitChange);
    }
}
