//! The StatefulSet controller (`pkg/controller/statefulset`): pods with stable names
//! `<set>-<ordinal>` (from `spec.ordinals.start`), hostnames under `serviceName`, one
//! PersistentVolumeClaim per claim template and pod (`<template>-<set>-<ordinal>`, kept across
//! pod deletion), created in order (OrderedReady) or all at once (Parallel), and rolled to a new
//! template through ControllerRevisions.
//!
//! `sync_stateful_set` (`stateful_set.go`): adopt orphaned ControllerRevisions, claim the pods
//! whose labels match and whose names are `<set>-<ordinal>`, then run one sync of
//! [`control::StatefulSetControl`] and, with `minReadySeconds`, look again once pods may have
//! become available. Event handlers only enqueue keys.
//!
//! Files: `utils` (names, identity, storage, revisions, retention-policy owner references),
//! `pod_control` (writes of one pod and its claims), `control` (the sync), `tests`.
//!
//! Storage: claims are created here but bound by the storage issue's PersistentVolume binder;
//! until then they stay Pending, and their pods are still created (scheduling a pod on an
//! unbound claim is the scheduler's volume binding, not this controller's).

pub mod control;
pub mod pod_control;
pub mod utils;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use skiff_apimachinery::LabelSelector;

use crate::controller_ref_manager::{
    Claimant, adopt, claim, controllers_selecting, recheck_deletion_timestamp, resolve_controller_ref,
};
use crate::history::History;
use crate::util::{
    Clock, controller_of, is_pod_ready, labels_of, name_of, new_controller_ref, selector_of, system_clock, uid_of,
};
use control::StatefulSetControl;
use pod_control::StatefulPodControl;
use skiff_runtime::api::{ApiClient, ApiError, resource_of};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult, Reconciler};
use skiff_runtime::events::EventRecorder;
use skiff_runtime::informer::{Informer, ResourceEventHandler, SharedInformerFactory, key_of, split_key};
use skiff_runtime::workqueue::WorkQueue;
use utils::{is_member_of, min_ready_seconds, replicas};

/// The StatefulSet controller.
pub struct StatefulSetController {
    api: Arc<dyn ApiClient>,
    sets: Arc<Informer<StatefulSet>>,
    pods: Arc<Informer<Pod>>,
    control: StatefulSetControl,
    queue: Arc<WorkQueue<String>>,
}

struct Handlers {
    sets: Arc<Informer<StatefulSet>>,
    queue: Arc<WorkQueue<String>>,
}

impl Handlers {
    /// `resolveControllerRef`.
    fn resolve(&self, meta: &ObjectMeta) -> Option<Arc<StatefulSet>> {
        resolve_controller_ref(self.sets.store(), meta, "StatefulSet")
    }

    /// `getPodStatefulSets`: the sets whose selector matches the pod's labels.
    fn matching_sets(&self, pod: &Pod) -> Vec<Arc<StatefulSet>> {
        controllers_selecting(self.sets.store(), &pod.metadata, |s| s.spec.as_ref().map(|spec| &spec.selector))
    }

    fn enqueue(&self, set: &StatefulSet) {
        self.queue.add(key_of(set));
    }
}

impl ResourceEventHandler<Pod> for Handlers {
    fn on_add(&self, pod: &Arc<Pod>) {
        if let Some(set) = self.resolve(&pod.metadata) {
            self.enqueue(&set);
            return;
        }
        if controller_of(&pod.metadata).is_none() {
            // An orphan: let every matching set consider adopting it.
            for set in self.matching_sets(pod) {
                self.enqueue(&set);
            }
        }
    }

    fn on_update(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        let cur_ref = controller_of(&cur.metadata);
        let old_ref = controller_of(&old.metadata);
        if cur_ref != old_ref
            && old_ref.is_some()
            && let Some(set) = self.resolve(&old.metadata)
        {
            self.enqueue(&set);
        }
        if cur_ref.is_some() {
            if let Some(set) = self.resolve(&cur.metadata) {
                self.enqueue(&set);
                let min_ready = min_ready_seconds(&set);
                if !is_pod_ready(old) && is_pod_ready(cur) && min_ready > 0 {
                    // Availability comes minReadySeconds after readiness, with no event: look
                    // again then (plus a second against clock granularity).
                    self.queue.add_after(key_of(set.as_ref()), Duration::from_secs(min_ready as u64 + 1));
                }
            }
            return;
        }
        if old.metadata.labels != cur.metadata.labels || old_ref.is_some() {
            for set in self.matching_sets(cur) {
                self.enqueue(&set);
            }
        }
    }

    fn on_delete(&self, pod: &Arc<Pod>) {
        if let Some(set) = self.resolve(&pod.metadata) {
            self.enqueue(&set);
        }
    }
}

impl ResourceEventHandler<StatefulSet> for Handlers {
    fn on_add(&self, set: &Arc<StatefulSet>) {
        self.enqueue(set);
    }

    fn on_update(&self, _old: &Arc<StatefulSet>, cur: &Arc<StatefulSet>) {
        self.enqueue(cur);
    }

    fn on_delete(&self, set: &Arc<StatefulSet>) {
        self.enqueue(set);
    }
}

impl StatefulSetController {
    /// Creates the controller on the factory's StatefulSet, Pod, ControllerRevision and
    /// PersistentVolumeClaim informers and registers its event handlers.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
    ) -> Arc<Self> {
        Arc::new(Self::build(api, factory, queue, recorder, system_clock()))
    }

    fn build(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
        clock: Clock,
    ) -> Self {
        let sets = factory.informer::<StatefulSet>();
        let pods = factory.informer::<Pod>();
        let revisions = factory.informer::<ControllerRevision>();
        let claims = factory.informer::<PersistentVolumeClaim>();
        let handlers = Arc::new(Handlers { sets: sets.clone(), queue: queue.clone() });
        sets.add_event_handler(handlers.clone());
        pods.add_event_handler(handlers);
        let control = StatefulSetControl {
            api: api.clone(),
            pod_control: StatefulPodControl::new(api.clone(), claims, recorder),
            history: History::new(api.clone()),
            revisions,
            clock,
        };
        Self { api, sets, pods, control, queue }
    }

    /// A controller with a fixed clock (tests).
    pub fn with_clock(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
        clock: Clock,
    ) -> Arc<Self> {
        Arc::new(Self::build(api, factory, queue, recorder, clock))
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// `adoptOrphanRevisions`: revisions matching the selector that nobody controls become
    /// the set's, after a live check that the set still exists.
    async fn adopt_orphan_revisions(&self, set: &StatefulSet, selector: &LabelSelector) -> Result<(), ApiError> {
        let orphans: Vec<ControllerRevision> = self
            .control
            .list_revisions(set, selector)
            .into_iter()
            .filter(|r| controller_of(&r.metadata).is_none())
            .collect();
        if orphans.is_empty() {
            return Ok(());
        }
        let ns = set.metadata.namespace.as_deref();
        recheck_deletion_timestamp::<StatefulSet>(self.api.as_ref(), ns, name_of(&set.metadata), uid_of(&set.metadata))
            .await
            .map_err(|e| ApiError::new(e.code, &e.reason, format!("can't adopt ControllerRevisions: {}", e.message)))?;
        let controller_ref = new_controller_ref(set);
        for r in orphans {
            adopt(self.api.as_ref(), &resource_of::<ControllerRevision>(), &r.metadata, &controller_ref).await?;
        }
        Ok(())
    }

    /// `getPodsForStatefulSet`: adopts matching orphans named `<set>-<ordinal>` and releases
    /// owned pods that no longer match; returns the set's pods.
    async fn pods_for_stateful_set(
        &self,
        set: &StatefulSet,
        selector: &LabelSelector,
    ) -> Result<Vec<Arc<Pod>>, ApiError> {
        let ns = set.metadata.namespace.clone();
        let candidates = self.pods.store().list_namespace(ns.as_deref().unwrap_or_default());
        let claimant = Claimant {
            controller_ref: new_controller_ref(set),
            namespace: ns.clone(),
            being_deleted: set.metadata.deletion_timestamp.is_some(),
        };
        let (name, uid) = (name_of(&set.metadata), uid_of(&set.metadata));
        let api = self.api.as_ref();
        claim(
            api,
            &resource_of::<Pod>(),
            &claimant,
            candidates,
            |p: &Arc<Pod>| &p.metadata,
            |p: &Arc<Pod>| selector.matches(&labels_of(&p.metadata)) && is_member_of(set, p),
            || recheck_deletion_timestamp::<StatefulSet>(api, ns.as_deref(), name, uid),
        )
        .await
    }

    /// `sync`: one reconcile of the StatefulSet `key`.
    ///
    /// # Errors
    /// Any failed write; the key is retried with backoff.
    pub async fn sync_stateful_set(&self, key: &str) -> ReconcileResult {
        let (ns, name) = split_key(key);
        let Some(set) = self.sets.store().get_namespaced(ns, name) else {
            return Ok(Action::AwaitChange);
        };
        let Some(spec) = set.spec.as_ref() else { return Ok(Action::AwaitChange) };
        let selector = match selector_of(&spec.selector) {
            Ok(s) => s,
            Err(e) => {
                // A selector the API server accepted but we cannot parse: nothing to do until
                // the set changes.
                tracing::error!(statefulset = key, error = %e, "invalid selector");
                return Ok(Action::AwaitChange);
            }
        };
        self.adopt_orphan_revisions(&set, &selector).await?;
        let pods = self.pods_for_stateful_set(&set, &selector).await?;
        let status = self.control.update_stateful_set(&set, &selector, &pods).await.map_err(ReconcileError::Api)?;
        let min_ready = min_ready_seconds(&set);
        if min_ready > 0 && status.available_replicas.unwrap_or(0) != replicas(&set) {
            return Ok(Action::RequeueAfter(Duration::from_secs(min_ready as u64)));
        }
        Ok(Action::AwaitChange)
    }
}

#[async_trait]
impl Reconciler for StatefulSetController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_stateful_set(key).await
    }
}

#[cfg(test)]
mod tests;
