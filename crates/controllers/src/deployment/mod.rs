//! The Deployment controller (`pkg/controller/deployment`): a ReplicaSet per pod template,
//! rolled from old to new by the Deployment's strategy.
//!
//! One file per phase, as in Kubernetes:
//! - this file: wiring (informer handlers only enqueue Deployment keys) and
//!   [`DeploymentController::sync_deployment`], which dispatches in a fixed order:
//!   selecting-all check → deleting (status only) → paused (scale only) → rollback → scaling
//!   event (proportional scale) → strategy;
//! - [`sync`]: steps shared by all paths (find/create the new ReplicaSet, revisions,
//!   proportional scaling, history cleanup, status);
//! - [`rolling`]: RollingUpdate (surge/unavailable arithmetic, worked numbers);
//! - [`recreate`]: Recreate (all old pods gone before the new ones start);
//! - [`rollback`]: the deprecated controller-side rollback annotation;
//! - [`progress`]: the Progressing condition and progressDeadlineSeconds;
//! - [`util`]: pure helpers (hash, annotations, fenceposts, conditions).
//!
//! `kubectl rollout undo` (1.33) does not go through the controller: it patches the
//! Deployment's template with the template of the ReplicaSet of the wanted revision (a JSON
//! patch of `/spec/template` and `/metadata/annotations`); the controller then finds that old
//! ReplicaSet as the new one and bumps its revision, keeping the old number in
//! `deployment.kubernetes.io/revision-history`.

pub mod progress;
pub mod recreate;
pub mod rollback;
pub mod rolling;
pub mod sync;
pub mod util;

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::controller_ref_manager::{Claimant, claim};
use crate::util::{
    Clock, controller_of, labels_of, name_of, new_controller_ref, selector_of, selects_everything, system_clock, uid_of,
};
use skiff_runtime::api::{ApiClient, ApiClientExt, ApiError, resource_of};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult, Reconciler};
use skiff_runtime::events::{EVENT_TYPE_WARNING, EventRecorder, reasons as event_reasons};
use skiff_runtime::informer::{Informer, OWNER_UID_INDEX, ResourceEventHandler, SharedInformerFactory, key_of};
use skiff_runtime::workqueue::WorkQueue;

/// Retries of one key before it is dropped (`maxRetries`).
pub const MAX_RETRIES: u32 = 15;

/// The Deployment controller.
pub struct DeploymentController {
    pub(crate) api: Arc<dyn ApiClient>,
    pub(crate) deployments: Arc<Informer<Deployment>>,
    pub(crate) replicasets: Arc<Informer<ReplicaSet>>,
    pub(crate) pods: Arc<Informer<Pod>>,
    pub(crate) queue: Arc<WorkQueue<String>>,
    pub(crate) recorder: EventRecorder,
    pub(crate) clock: Clock,
}

struct Handlers {
    deployments: Arc<Informer<Deployment>>,
    replicasets: Arc<Informer<ReplicaSet>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<WorkQueue<String>>,
}

impl Handlers {
    fn enqueue(&self, d: &Deployment) {
        self.queue.add(key_of(d));
    }

    /// `resolveControllerRef`: the Deployment a controller reference points to.
    fn resolve(&self, meta: &ObjectMeta) -> Option<Arc<Deployment>> {
        let cref = controller_of(meta)?;
        if cref.kind != "Deployment" {
            return None;
        }
        let d = self.deployments.store().get_namespaced(meta.namespace.as_deref(), &cref.name)?;
        (uid_of(&d.metadata) == cref.uid).then_some(d)
    }

    /// `getDeploymentsForReplicaSet`: Deployments whose non-empty selector matches.
    fn deployments_for_rs(&self, rs: &ReplicaSet) -> Vec<Arc<Deployment>> {
        let labels = labels_of(&rs.metadata);
        if labels.is_empty() {
            return Vec::new();
        }
        let ns = rs.metadata.namespace.as_deref().unwrap_or_default();
        let found: Vec<_> = self
            .deployments
            .store()
            .list_namespace(ns)
            .into_iter()
            .filter(|d| {
                d.spec
                    .as_ref()
                    .and_then(|s| selector_of(&s.selector).ok())
                    .is_some_and(|sel| !sel.is_empty() && sel.matches(&labels))
            })
            .collect();
        if found.len() > 1 {
            tracing::info!(replicaset = %key_of(rs), "user error: more than one deployment selects the replica set");
        }
        found
    }

    /// `getDeploymentForPod`: pod → its ReplicaSet → that ReplicaSet's Deployment.
    fn deployment_for_pod(&self, pod: &Pod) -> Option<Arc<Deployment>> {
        let cref = controller_of(&pod.metadata)?;
        if cref.kind != "ReplicaSet" {
            return None;
        }
        let rs = self.replicasets.store().get_namespaced(pod.metadata.namespace.as_deref(), &cref.name)?;
        if uid_of(&rs.metadata) != cref.uid {
            return None;
        }
        self.resolve(&rs.metadata)
    }
}

impl ResourceEventHandler<Deployment> for Handlers {
    fn on_add(&self, d: &Arc<Deployment>) {
        self.enqueue(d);
    }
    fn on_update(&self, _old: &Arc<Deployment>, cur: &Arc<Deployment>) {
        self.enqueue(cur);
    }
    fn on_delete(&self, d: &Arc<Deployment>) {
        self.enqueue(d);
    }
}

impl ResourceEventHandler<ReplicaSet> for Handlers {
    fn on_add(&self, rs: &Arc<ReplicaSet>) {
        if rs.metadata.deletion_timestamp.is_some() {
            self.on_delete(rs);
            return;
        }
        if controller_of(&rs.metadata).is_some() {
            if let Some(d) = self.resolve(&rs.metadata) {
                self.enqueue(&d);
            }
            return;
        }
        // An orphan: let matching Deployments consider adopting it.
        for d in self.deployments_for_rs(rs) {
            self.enqueue(&d);
        }
    }

    fn on_update(&self, old: &Arc<ReplicaSet>, cur: &Arc<ReplicaSet>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        let cur_ref = controller_of(&cur.metadata);
        let old_ref = controller_of(&old.metadata);
        let ref_changed = cur_ref != old_ref;
        if ref_changed
            && old_ref.is_some()
            && let Some(d) = self.resolve(&old.metadata)
        {
            self.enqueue(&d);
        }
        if cur_ref.is_some() {
            if let Some(d) = self.resolve(&cur.metadata) {
                self.enqueue(&d);
            }
            return;
        }
        if ref_changed || old.metadata.labels != cur.metadata.labels {
            for d in self.deployments_for_rs(cur) {
                self.enqueue(&d);
            }
        }
    }

    fn on_delete(&self, rs: &Arc<ReplicaSet>) {
        if let Some(d) = self.resolve(&rs.metadata) {
            self.enqueue(&d);
        }
    }
}

impl ResourceEventHandler<Pod> for Handlers {
    fn on_add(&self, _pod: &Arc<Pod>) {}
    fn on_update(&self, _old: &Arc<Pod>, _cur: &Arc<Pod>) {}

    /// A Recreate Deployment waits for its old pods to be gone: sync it when the last one goes.
    fn on_delete(&self, pod: &Arc<Pod>) {
        let Some(d) = self.deployment_for_pod(pod) else { return };
        if util::strategy_type(&d) != "Recreate" {
            return;
        }
        let remaining: usize = self
            .replicasets
            .store()
            .by_index(OWNER_UID_INDEX, uid_of(&d.metadata))
            .iter()
            .filter(|rs| controller_of(&rs.metadata).is_some_and(|r| r.uid == uid_of(&d.metadata)))
            .map(|rs| {
                self.pods
                    .store()
                    .by_index(OWNER_UID_INDEX, uid_of(&rs.metadata))
                    .iter()
                    .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == uid_of(&rs.metadata)))
                    .count()
            })
            .sum();
        if remaining == 0 {
            self.enqueue(&d);
        }
    }
}

impl DeploymentController {
    /// Creates the controller on the factory's Deployment, ReplicaSet and Pod informers and
    /// registers its handlers.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
    ) -> Arc<Self> {
        let deployments = factory.informer::<Deployment>();
        let replicasets = factory.informer::<ReplicaSet>();
        let pods = factory.informer::<Pod>();
        let handlers = Arc::new(Handlers {
            deployments: deployments.clone(),
            replicasets: replicasets.clone(),
            pods: pods.clone(),
            queue: queue.clone(),
        });
        deployments.add_event_handler(handlers.clone());
        replicasets.add_event_handler(handlers.clone());
        pods.add_event_handler(handlers);
        Arc::new(Self { api, deployments, replicasets, pods, queue, recorder, clock: system_clock() })
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self: Arc<Self>, clock: Clock) -> Arc<Self> {
        if let Some(me) = Arc::get_mut(&mut self) {
            me.clock = clock;
        }
        self
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    pub(crate) fn now(&self) -> k8s_openapi::jiff::Timestamp {
        (self.clock)()
    }

    /// `UpdateStatus`, then continue with the server's copy (so a later write in the same sync
    /// does not conflict with our own).
    pub(crate) async fn update_deployment_status(&self, d: &mut Deployment) -> Result<(), ApiError> {
        let mut updated = self.api.update_status_typed(d).await?;
        util::set_defaults(&mut updated);
        *d = updated;
        Ok(())
    }

    /// `getReplicaSetsForDeployment`: the ReplicaSets this Deployment owns after adopting
    /// matching orphans and releasing owned ones that no longer match.
    async fn get_replica_sets_for_deployment(&self, d: &Deployment) -> Result<Vec<ReplicaSet>, ReconcileError> {
        let spec = d.spec.clone().unwrap_or_default();
        let selector = selector_of(&spec.selector)
            .map_err(|e| ReconcileError::Other(format!("deployment {} has invalid label selector: {e}", key_of(d))))?;
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let candidates: Vec<ReplicaSet> =
            self.replicasets.store().list_namespace(&ns).iter().map(|rs| rs.as_ref().clone()).collect();
        let claimant = Claimant {
            controller_ref: new_controller_ref(d),
            namespace: Some(ns.clone()),
            being_deleted: d.metadata.deletion_timestamp.is_some(),
        };
        let api = self.api.clone();
        let (name, uid) = (name_of(&d.metadata).to_string(), uid_of(&d.metadata).to_string());
        let ns2 = ns.clone();
        let can_adopt = || async move {
            let fresh: Deployment = api.get_typed(Some(&ns2), &name).await?;
            if uid_of(&fresh.metadata) != uid {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "original Deployment {ns2}/{name} is gone: got uid {}, wanted {uid}",
                        uid_of(&fresh.metadata)
                    ),
                ));
            }
            if fresh.metadata.deletion_timestamp.is_some() {
                return Err(ApiError::new(409, "Conflict", format!("{ns2}/{name} has just been deleted")));
            }
            Ok(())
        };
        let claimed = claim(
            self.api.as_ref(),
            &resource_of::<ReplicaSet>(),
            &claimant,
            candidates,
            |rs: &ReplicaSet| &rs.metadata,
            |rs: &ReplicaSet| selector.matches(&labels_of(&rs.metadata)),
            can_adopt,
        )
        .await?;
        Ok(claimed)
    }

    /// `syncDeployment` for one key.
    pub async fn sync_deployment(&self, key: &str) -> ReconcileResult {
        let Some(cached) = self.deployments.store().get(key) else {
            tracing::debug!(deployment = key, "deployment has been deleted");
            return Ok(Action::AwaitChange);
        };
        // Work on a copy: never mutate the cache.
        let mut d = cached.as_ref().clone();
        util::set_defaults(&mut d);
        let selector = d.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
        if selects_everything(&selector) {
            self.recorder.event_for(
                &d,
                EVENT_TYPE_WARNING,
                event_reasons::SELECTING_ALL,
                "This deployment is selecting all pods. A non-empty selector is required.",
            );
            let status = d.status.get_or_insert_with(Default::default);
            if status.observed_generation.unwrap_or(0) < d.metadata.generation.unwrap_or(0) {
                status.observed_generation = d.metadata.generation;
                self.update_deployment_status(&mut d).await?;
            }
            return Ok(Action::AwaitChange);
        }

        let mut rs_list = self.get_replica_sets_for_deployment(&d).await?;

        if d.metadata.deletion_timestamp.is_some() {
            self.sync_status_only(&mut d, &mut rs_list).await?;
            return Ok(Action::AwaitChange);
        }

        // Pausing/resuming sets Progressing Unknown, so a resumed rollout does not time out at once.
        self.check_paused_conditions(&mut d).await?;

        if d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false) {
            return self.sync(&mut d, &mut rs_list).await;
        }

        // A rollback is not re-entrant: finish it (it clears its annotation) before anything else.
        if rollback::get_rollback_to(&d).is_some() {
            return self.rollback(&mut d, &mut rs_list).await;
        }

        if self.is_scaling_event(&mut d, &mut rs_list).await? {
            return self.sync(&mut d, &mut rs_list).await;
        }

        match util::strategy_type(&d) {
            "Recreate" => self.rollout_recreate(&mut d, &mut rs_list).await,
            "RollingUpdate" => self.rollout_rolling(&mut d, &mut rs_list).await,
            other => Err(ReconcileError::Other(format!("unexpected deployment strategy type: {other}"))),
        }
    }
}

#[async_trait]
impl Reconciler for DeploymentController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_deployment(key).await
    }
}

#[cfg(test)]
pub(crate) mod fixture;
