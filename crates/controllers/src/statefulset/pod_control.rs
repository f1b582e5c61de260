//! `StatefulPodControl` (`stateful_pod_control.go`): the writes of one stateful pod — its
//! claims before the pod, the pod, its identity and storage repairs, its deletion — and the
//! owner references the PVC retention policy puts on its claims.
//!
//! Claims are read from the PersistentVolumeClaim informer cache, as Kubernetes' claim lister;
//! a claim created by an earlier sync that the cache has not seen yet is found by its
//! AlreadyExists.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::json;

use super::utils::{
    claim_name, claim_templates, identity_matches, is_claim_owner_up_to_date, ordinal_of, persistent_volume_claims,
    retention_policy, storage_matches, update_claim_owner_ref_for_set_and_pod, update_identity, update_storage,
};
use crate::util::{name_of, new_controller_ref, uid_of};
use skiff_runtime::api::{
    ApiClient, ApiClientExt, ApiError, DeleteOptions, PatchType, is_already_exists, is_conflict, is_not_found,
    resource_of,
};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, EventRecorder};
use skiff_runtime::informer::Informer;

/// Event reason of a claim owned by another controller (`ConflictingController`).
pub const CONFLICTING_CONTROLLER: &str = "ConflictingController";

/// The writes of stateful pods and their claims.
pub struct StatefulPodControl {
    api: Arc<dyn ApiClient>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    recorder: EventRecorder,
}

/// `Successful<Verb>` / `Failed<Verb>` of a verb (`create` → `Create`).
fn reason(success: bool, verb: &str) -> String {
    let mut title = verb.to_string();
    if let Some(first) = title.get_mut(..1) {
        first.make_ascii_uppercase();
    }
    format!("{}{title}", if success { "Successful" } else { "Failed" })
}

impl StatefulPodControl {
    /// Pod control writing through `api`, reading claims from `claims`.
    pub fn new(api: Arc<dyn ApiClient>, claims: Arc<Informer<PersistentVolumeClaim>>, recorder: EventRecorder) -> Self {
        Self { api, claims, recorder }
    }

    fn claim(&self, set: &StatefulSet, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.store().get_namespaced(set.metadata.namespace.as_deref(), name)
    }

    /// `recordPodEvent`: `create Pod web-0 in StatefulSet web successful`.
    fn record_pod_event(&self, verb: &str, set: &StatefulSet, pod: &Pod, err: Option<&ApiError>) {
        let (pod, set_name) = (name_of(&pod.metadata), name_of(&set.metadata));
        match err {
            None => self.recorder.event_for(
                set,
                EVENT_TYPE_NORMAL,
                &reason(true, verb),
                &format!("{verb} Pod {pod} in StatefulSet {set_name} successful"),
            ),
            Some(e) => self.recorder.event_for(
                set,
                EVENT_TYPE_WARNING,
                &reason(false, verb),
                &format!("{verb} Pod {pod} in StatefulSet {set_name} failed error: {}", e.message),
            ),
        }
    }

    /// `recordClaimEvent`: `create Claim data-web-0 Pod web-0 in StatefulSet web success`.
    fn record_claim_event(&self, set: &StatefulSet, pod: &Pod, claim: &str, err: Option<&ApiError>) {
        let (pod, set_name) = (name_of(&pod.metadata), name_of(&set.metadata));
        match err {
            None => self.recorder.event_for(
                set,
                EVENT_TYPE_NORMAL,
                &reason(true, "create"),
                &format!("create Claim {claim} Pod {pod} in StatefulSet {set_name} success"),
            ),
            Some(e) => self.recorder.event_for(
                set,
                EVENT_TYPE_WARNING,
                &reason(false, "create"),
                &format!("create Claim {claim} for Pod {pod} in StatefulSet {set_name} failed error: {}", e.message),
            ),
        }
    }

    /// `createPersistentVolumeClaims`: creates the pod's missing claims; a claim being deleted
    /// is an error (the pod must wait for its replacement).
    ///
    /// # Errors
    /// The first failed create, or a claim being deleted.
    pub async fn create_persistent_volume_claims(&self, set: &StatefulSet, pod: &Pod) -> Result<(), ApiError> {
        let mut first_error = None;
        for (_, claim) in persistent_volume_claims(set, ordinal_of(pod)) {
            let name = name_of(&claim.metadata).to_string();
            match self.claim(set, &name) {
                Some(existing) => {
                    if existing.metadata.deletion_timestamp.is_some() {
                        first_error.get_or_insert(ApiError::new(
                            409,
                            "Conflict",
                            format!("pvc {name} is being deleted"),
                        ));
                    }
                }
                None => match self.api.create_typed(&claim).await {
                    Ok(_) => self.record_claim_event(set, pod, &name, None),
                    // Created by an earlier sync the cache has not caught up with.
                    Err(e) if is_already_exists(&e) => {}
                    Err(e) => {
                        self.record_claim_event(set, pod, &name, Some(&e));
                        first_error.get_or_insert(ApiError::new(
                            e.code,
                            &e.reason,
                            format!("failed to create PVC {name}: {}", e.message),
                        ));
                    }
                },
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// `CreateStatefulPod`: the claims first, then the pod, then the claims' retention-policy
    /// owner references.
    ///
    /// # Errors
    /// A claim's error, or the pod create's (AlreadyExists included: the cache is behind).
    pub async fn create_stateful_pod(&self, set: &StatefulSet, pod: &Pod) -> Result<(), ApiError> {
        tracing::debug!(statefulset = name_of(&set.metadata), pod = name_of(&pod.metadata), "creating stateful pod");
        if let Err(e) = self.create_persistent_volume_claims(set, pod).await {
            self.record_pod_event("create", set, pod, Some(&e));
            return Err(e);
        }
        let created = match self.api.create_typed(pod).await {
            Err(e) if is_already_exists(&e) => return Err(e),
            Err(e) => {
                self.record_pod_event("create", set, pod, Some(&e));
                return Err(e);
            }
            Ok(created) => created,
        };
        if let Err(e) = self.update_pod_claim_for_retention_policy(set, &created).await {
            self.record_pod_event("update", set, pod, Some(&e));
            return Err(e);
        }
        self.record_pod_event("create", set, pod, None);
        Ok(())
    }

    /// `createMissingPersistentVolumeClaims`: for a pending pod whose claims went missing.
    ///
    /// # Errors
    /// As [`Self::create_persistent_volume_claims`], or the owner reference update's.
    pub async fn create_missing_persistent_volume_claims(&self, set: &StatefulSet, pod: &Pod) -> Result<(), ApiError> {
        self.create_persistent_volume_claims(set, pod).await?;
        if let Err(e) = self.update_pod_claim_for_retention_policy(set, pod).await {
            self.record_pod_event("update", set, pod, Some(&e));
            return Err(e);
        }
        Ok(())
    }

    /// `UpdateStatefulPod`: repairs a pod whose identity (name labels) or storage (claim
    /// volumes) does not match its ordinal, and its claims' owner references. The pod is read
    /// fresh from the API first, since cached pods lack the volumes the API fills in.
    ///
    /// # Errors
    /// The read's, a claim's, or the update's error after one conflict retry.
    pub async fn update_stateful_pod(&self, set: &StatefulSet, cached: &Pod) -> Result<(), ApiError> {
        let ns = set.metadata.namespace.as_deref();
        let mut attempt = 0;
        loop {
            let mut pod: Pod = self.api.get_typed(ns, name_of(&cached.metadata)).await?;
            let mut consistent = true;
            if !identity_matches(set, &pod) {
                update_identity(set, &mut pod);
                consistent = false;
            }
            if !storage_matches(set, &pod) {
                update_storage(set, &mut pod);
                consistent = false;
                if let Err(e) = self.create_persistent_volume_claims(set, &pod).await {
                    self.record_pod_event("update", set, &pod, Some(&e));
                    return Err(e);
                }
            }
            // Only the claims change here: the pod itself may already be right.
            if !self.claims_match_retention_policy(set, &pod)
                && let Err(e) = self.update_pod_claim_for_retention_policy(set, &pod).await
            {
                self.record_pod_event("update", set, &pod, Some(&e));
                return Err(e);
            }
            if consistent {
                return Ok(());
            }
            match self.api.update_typed(&pod).await {
                Ok(_) => {
                    self.record_pod_event("update", set, &pod, None);
                    return Ok(());
                }
                Err(e) if is_conflict(&e) && attempt == 0 => attempt += 1,
                Err(e) => {
                    self.record_pod_event("update", set, &pod, Some(&e));
                    return Err(e);
                }
            }
        }
    }

    /// `DeleteStatefulPod`.
    ///
    /// # Errors
    /// The delete's error (404 included: callers decide whether it matters).
    pub async fn delete_stateful_pod(&self, set: &StatefulSet, pod: &Pod) -> Result<(), ApiError> {
        tracing::debug!(statefulset = name_of(&set.metadata), pod = name_of(&pod.metadata), "deleting stateful pod");
        let result = self
            .api
            .delete_typed::<Pod>(pod.metadata.namespace.as_deref(), name_of(&pod.metadata), &DeleteOptions::default())
            .await;
        self.record_pod_event("delete", set, pod, result.as_ref().err());
        result
    }

    /// `ClaimsMatchRetentionPolicy`: whether every existing claim of the pod carries the owner
    /// references its retention policy wants (a missing claim is picked up later).
    pub fn claims_match_retention_policy(&self, set: &StatefulSet, pod: &Pod) -> bool {
        let ordinal = ordinal_of(pod);
        claim_templates(set).iter().all(|t| {
            self.claim(set, &claim_name(set, t, ordinal)).is_none_or(|c| is_claim_owner_up_to_date(&c, set, pod))
        })
    }

    /// `UpdatePodClaimForRetentionPolicy`: rewrites the owner references of the pod's claims to
    /// match the retention policy (a merge patch of `ownerReferences` with a resourceVersion
    /// precondition).
    ///
    /// # Errors
    /// A patch's error other than 404.
    pub async fn update_pod_claim_for_retention_policy(&self, set: &StatefulSet, pod: &Pod) -> Result<(), ApiError> {
        let ordinal = ordinal_of(pod);
        for template in claim_templates(set) {
            let name = claim_name(set, template, ordinal);
            let Some(claim) = self.claim(set, &name) else { continue };
            if is_claim_owner_up_to_date(&claim, set, pod) {
                continue;
            }
            let mut updated = (*claim).clone();
            update_claim_owner_ref_for_set_and_pod(&mut updated, set, pod);
            let others = updated.metadata.owner_references.iter().flatten().any(|r| {
                r.controller == Some(true) && r.uid != uid_of(&set.metadata) && r.uid != uid_of(&pod.metadata)
            });
            if others {
                self.recorder.event_for(
                    set,
                    EVENT_TYPE_WARNING,
                    CONFLICTING_CONTROLLER,
                    &format!(
                        "PersistentVolumeClaim {name} has a conflicting OwnerReference that acts as a managing \
                         controller, the retention policy is ignored for this claim"
                    ),
                );
            }
            let patch = json!({"metadata": {
                "ownerReferences": crate::garbagecollector::list_or_null(
                    updated.metadata.owner_references.as_deref().unwrap_or_default()
                ),
                "resourceVersion": claim.metadata.resource_version,
            }});
            match self
                .api
                .patch(
                    &resource_of::<PersistentVolumeClaim>(),
                    set.metadata.namespace.as_deref(),
                    &name,
                    PatchType::Merge,
                    &patch,
                    None,
                )
                .await
            {
                Err(e) if !is_not_found(&e) => {
                    return Err(ApiError::new(
                        e.code,
                        &e.reason,
                        format!("could not update claim {name} for delete policy ownerRefs: {}", e.message),
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `PodClaimIsStale`: with `whenScaled: Delete`, a claim still owned by an earlier pod of
    /// the same name (another uid) is about to be garbage collected; the pod must not be
    /// created on it.
    pub fn pod_claim_is_stale(&self, set: &StatefulSet, pod: &Pod) -> bool {
        if retention_policy(set).1 != super::utils::DELETE {
            return false;
        }
        let pod_ref = new_controller_ref(pod);
        persistent_volume_claims(set, ordinal_of(pod)).iter().any(|(_, claim)| {
            self.claim(set, name_of(&claim.metadata))
                .is_some_and(|c| super::utils::has_stale_owner_ref(&c.metadata, &pod_ref))
        })
    }
}
