//! The StatefulSet's pure helpers (`stateful_set_utils.go`): ordinals and stable names,
//! identity and storage of a pod, claim names and their retention-policy owner references,
//! revisions of the set, and pod health.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::controller_utils::pod_from_template;
use crate::history::{self, revision_data};
use crate::util::{is_pod_available, is_pod_ready, name_of, new_controller_ref, pod_phase, uid_of};

/// `apps.StatefulSetPodNameLabel`: a pod's own name, so a Service can select one replica.
pub const STATEFUL_SET_POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// `apps.PodIndexLabel`: a pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// `apps.StatefulSetRevisionLabel` (`ControllerRevisionHashLabelKey`): the name of the revision
/// a pod was created from.
pub const STATEFUL_SET_REVISION_LABEL: &str = "controller-revision-hash";

/// The `persistentVolumeClaimRetentionPolicy` value that keeps claims.
pub const RETAIN: &str = "Retain";
/// The `persistentVolumeClaimRetentionPolicy` value that deletes claims.
pub const DELETE: &str = "Delete";

/// `getParentNameAndOrdinal`: `(parent, ordinal)` of a name `<parent>-<digits>`.
pub fn parent_and_ordinal(name: &str) -> Option<(&str, i32)> {
    let (parent, digits) = name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(|o| (parent, o))
}

/// `getOrdinal`: the pod's ordinal, or -1 when its name has none.
pub fn ordinal_of(pod: &Pod) -> i32 {
    parent_and_ordinal(name_of(&pod.metadata)).map_or(-1, |(_, o)| o)
}

/// `isMemberOf`: whether the pod's name is `<set>-<ordinal>`.
pub fn is_member_of(set: &StatefulSet, pod: &Pod) -> bool {
    parent_and_ordinal(name_of(&pod.metadata)).is_some_and(|(p, _)| p == name_of(&set.metadata))
}

/// `spec.replicas` (1 when unset).
pub fn replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// `getStartOrdinal`: `spec.ordinals.start` (0 when unset).
pub fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.ordinals.as_ref()).and_then(|o| o.start).unwrap_or(0)
}

/// `getEndOrdinal`: the last ordinal of the replicas (`start + replicas - 1`).
pub fn end_ordinal(set: &StatefulSet) -> i32 {
    start_ordinal(set) + replicas(set) - 1
}

/// `podInOrdinalRange`: whether the pod's ordinal is one of the set's replicas.
pub fn pod_in_ordinal_range(pod: &Pod, set: &StatefulSet) -> bool {
    let o = ordinal_of(pod);
    o >= start_ordinal(set) && o <= end_ordinal(set)
}

/// `getPodName`: `<set>-<ordinal>`.
pub fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{ordinal}", name_of(&set.metadata))
}

/// `getPersistentVolumeClaimName`: `<claim template>-<set>-<ordinal>`.
pub fn claim_name(set: &StatefulSet, template: &PersistentVolumeClaim, ordinal: i32) -> String {
    format!("{}-{}-{ordinal}", name_of(&template.metadata), name_of(&set.metadata))
}

/// `spec.minReadySeconds` (0 when unset).
pub fn min_ready_seconds(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
}

/// `spec.podManagementPolicy` is Parallel (`allowsBurst`): pods are created and deleted
/// without waiting for their predecessors.
pub fn allows_burst(set: &StatefulSet) -> bool {
    set.spec.as_ref().and_then(|s| s.pod_management_policy.as_deref()) == Some("Parallel")
}

/// `spec.updateStrategy.type` (RollingUpdate when unset).
pub fn update_strategy_type(set: &StatefulSet) -> &str {
    set.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.type_.as_deref())
        .unwrap_or("RollingUpdate")
}

/// The claim templates.
pub fn claim_templates(set: &StatefulSet) -> &[PersistentVolumeClaim] {
    set.spec.as_ref().and_then(|s| s.volume_claim_templates.as_deref()).unwrap_or_default()
}

/// `getPersistentVolumeClaimRetentionPolicy`: `(whenDeleted, whenScaled)`, Retain when unset.
pub fn retention_policy(set: &StatefulSet) -> (&str, &str) {
    let p = set.spec.as_ref().and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    (
        p.and_then(|p| p.when_deleted.as_deref()).unwrap_or(RETAIN),
        p.and_then(|p| p.when_scaled.as_deref()).unwrap_or(RETAIN),
    )
}

/// `getPersistentVolumeClaims`: the pod's claims by template name, named
/// `<template>-<set>-<ordinal>`, labelled with the set's `matchLabels`.
pub fn persistent_volume_claims(set: &StatefulSet, ordinal: i32) -> Vec<(String, PersistentVolumeClaim)> {
    let match_labels = set.spec.as_ref().and_then(|s| s.selector.match_labels.clone()).unwrap_or_default();
    claim_templates(set)
        .iter()
        .map(|template| {
            let mut claim = template.clone();
            claim.metadata.name = Some(claim_name(set, template, ordinal));
            claim.metadata.namespace = set.metadata.namespace.clone();
            let labels = claim.metadata.labels.get_or_insert_with(BTreeMap::new);
            labels.extend(match_labels.clone());
            claim.status = None;
            (name_of(&template.metadata).to_string(), claim)
        })
        .collect()
}

/// `updateIdentity`: the pod's name, namespace and its name and index labels.
pub fn update_identity(set: &StatefulSet, pod: &mut Pod) {
    let ordinal = ordinal_of(pod);
    let name = pod_name(set, ordinal);
    pod.metadata.name = Some(name.clone());
    pod.metadata.namespace = set.metadata.namespace.clone();
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(STATEFUL_SET_POD_NAME_LABEL.to_string(), name);
    labels.insert(POD_INDEX_LABEL.to_string(), ordinal.to_string());
}

/// `identityMatches`: the pod's name, namespace and labels are those of its ordinal.
pub fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let Some((parent, ordinal)) = parent_and_ordinal(name_of(&pod.metadata)) else { return false };
    let labels = pod.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    parent == name_of(&set.metadata)
        && name_of(&pod.metadata) == pod_name(set, ordinal)
        && pod.metadata.namespace == set.metadata.namespace
        && label(STATEFUL_SET_POD_NAME_LABEL) == Some(name_of(&pod.metadata))
        && label(POD_INDEX_LABEL) == Some(ordinal.to_string().as_str())
}

/// `storageMatches`: every claim template is mounted as a volume of its name from the pod's
/// own claim.
pub fn storage_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let ordinal = ordinal_of(pod);
    if ordinal < 0 {
        return false;
    }
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    claim_templates(set).iter().all(|template| {
        volumes.iter().find(|v| v.name == name_of(&template.metadata)).is_some_and(|v| {
            v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == claim_name(set, template, ordinal))
        })
    })
}

/// `updateStorage`: one `persistentVolumeClaim` volume per claim template (replacing a template
/// volume of the same name), then the template's other volumes.
pub fn update_storage(set: &StatefulSet, pod: &mut Pod) {
    let claims = persistent_volume_claims(set, ordinal_of(pod));
    let spec = pod.spec.get_or_insert_with(Default::default);
    let current = spec.volumes.take().unwrap_or_default();
    let mut volumes: Vec<Volume> = claims
        .iter()
        .map(|(name, claim)| Volume {
            name: name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: name_of(&claim.metadata).to_string(),
                read_only: None,
            }),
            ..Default::default()
        })
        .collect();
    volumes.extend(current.into_iter().filter(|v| !claims.iter().any(|(name, _)| *name == v.name)));
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
}

/// `newStatefulSetPod`: the pod of `ordinal` from the set's template: stable name, hostname,
/// `subdomain = serviceName`, identity labels, claim volumes and the controller reference.
pub fn new_stateful_set_pod(set: &StatefulSet, ordinal: i32) -> Pod {
    let template = set.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let ns = set.metadata.namespace.as_deref().unwrap_or_default();
    let mut pod = pod_from_template(&template, ns, name_of(&set.metadata), new_controller_ref(set));
    pod.metadata.generate_name = None;
    pod.metadata.name = Some(pod_name(set, ordinal));
    update_identity(set, &mut pod);
    let service_name = set.spec.as_ref().and_then(|s| s.service_name.clone()).filter(|s| !s.is_empty());
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.hostname = pod.metadata.name.clone();
    spec.subdomain = service_name;
    update_storage(set, &mut pod);
    pod
}

/// The revision a pod was created from (its `controller-revision-hash` label).
pub fn pod_revision(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(STATEFUL_SET_REVISION_LABEL))
        .map(String::as_str)
        .unwrap_or_default()
}

/// `setPodRevision`.
pub fn set_pod_revision(pod: &mut Pod, revision: &str) {
    pod.metadata.labels.get_or_insert_with(BTreeMap::new).insert(STATEFUL_SET_REVISION_LABEL.into(), revision.into());
}

/// `getPatch`: the revision data of the set, a strategic merge patch replacing its template
/// (`{"spec":{"template":{…,"$patch":"replace"}}}`), which `kubectl rollout undo` applies as is.
pub fn revision_patch(set: &StatefulSet) -> Value {
    let template = set.spec.as_ref().map(|s| &s.template);
    let mut t = serde_json::to_value(template).unwrap_or(Value::Null);
    if let Some(m) = t.as_object_mut() {
        m.insert("$patch".into(), json!("replace"));
    } else {
        t = json!({"$patch": "replace"});
    }
    json!({"spec": {"template": t}})
}

/// `newRevision`: the set's current template as revision number `revision`, carrying the set's
/// annotations.
pub fn new_revision(set: &StatefulSet, revision: i64, collision_count: i32) -> ControllerRevision {
    let labels = set.spec.as_ref().and_then(|s| s.template.metadata.as_ref()).and_then(|m| m.labels.clone());
    let mut cr = history::new_controller_revision(
        &set.metadata,
        new_controller_ref(set),
        &labels.unwrap_or_default(),
        revision_patch(set),
        revision,
        Some(collision_count),
    );
    if let Some(annotations) = set.metadata.annotations.clone() {
        cr.metadata.annotations.get_or_insert_with(BTreeMap::new).extend(annotations);
    }
    cr
}

/// `ApplyRevision`: the set with the template a revision recorded.
pub fn apply_revision(set: &StatefulSet, revision: &ControllerRevision) -> StatefulSet {
    let mut out = set.clone();
    let mut template = revision_data(revision).pointer("/spec/template").cloned().unwrap_or(Value::Null);
    if let Some(m) = template.as_object_mut() {
        m.remove("$patch");
    }
    if let (Some(spec), Ok(t)) = (out.spec.as_mut(), serde_json::from_value::<PodTemplateSpec>(template)) {
        spec.template = t;
    }
    out
}

/// `nextRevision`: one more than the highest revision number (1 for the first).
pub fn next_revision(revisions: &[ControllerRevision]) -> i64 {
    revisions.iter().map(|r| r.revision).max().unwrap_or(0) + 1
}

/// `isCreated`: the pod exists on the server (it has a phase).
pub fn is_created(pod: &Pod) -> bool {
    !pod_phase(pod).is_empty()
}

/// `isPending`.
pub fn is_pending(pod: &Pod) -> bool {
    pod_phase(pod) == "Pending"
}

/// `isFailed`.
pub fn is_failed(pod: &Pod) -> bool {
    pod_phase(pod) == "Failed"
}

/// `isSucceeded`.
pub fn is_succeeded(pod: &Pod) -> bool {
    pod_phase(pod) == "Succeeded"
}

/// `isTerminating`: the pod has a deletionTimestamp.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// `isRunningAndReady`.
pub fn is_running_and_ready(pod: &Pod) -> bool {
    pod_phase(pod) == "Running" && is_pod_ready(pod)
}

/// `isRunningAndAvailable`: running, and ready for `min_ready_seconds`.
pub fn is_running_and_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    pod_phase(pod) == "Running" && is_pod_available(pod, min_ready_seconds, now)
}

/// `isHealthy`: running, ready and not terminating.
pub fn is_healthy(pod: &Pod) -> bool {
    is_running_and_ready(pod) && !is_terminating(pod)
}

/// Whether `r` references exactly `owner` (`matchesRef`: uid, name, apiVersion and kind).
fn matches_ref(r: &OwnerReference, owner: &OwnerReference) -> bool {
    r.uid == owner.uid && r.name == owner.name && r.api_version == owner.api_version && r.kind == owner.kind
}

/// `hasOwnerRef`: a reference to `uid`.
pub fn has_owner_ref(meta: &ObjectMeta, uid: &str) -> bool {
    !uid.is_empty() && meta.owner_references.iter().flatten().any(|r| r.uid == uid)
}

/// `hasStaleOwnerRef`: a reference to an object of the owner's kind and name but another uid
/// (a claim still owned by a deleted pod of the same name).
pub fn has_stale_owner_ref(meta: &ObjectMeta, owner: &OwnerReference) -> bool {
    meta.owner_references.iter().flatten().any(|r| {
        r.api_version == owner.api_version && r.kind == owner.kind && r.name == owner.name && r.uid != owner.uid
    })
}

/// `hasUnexpectedController`: a controller reference to something other than the set or pod.
fn has_unexpected_controller(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid != uid_of(&set.metadata) && r.uid != uid_of(&pod.metadata))
}

/// `hasNonControllerOwner`: a reference to the set or pod that is not a controller reference.
fn has_non_controller_owner(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    claim.metadata.owner_references.iter().flatten().any(|r| {
        (r.uid == uid_of(&set.metadata) || (!uid_of(&pod.metadata).is_empty() && r.uid == uid_of(&pod.metadata)))
            && r.controller != Some(true)
    })
}

/// `isClaimOwnerUpToDate`: whether the claim's owner references are what the retention policy
/// wants: `whenDeleted: Delete` → the set controls it (the garbage collector deletes it with the
/// set); `whenScaled: Delete` and the pod scaled away → the pod controls it (deleted with the
/// pod); `Retain` → neither.
pub fn is_claim_owner_up_to_date(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    let set_ref = has_owner_ref(&claim.metadata, uid_of(&set.metadata));
    let pod_ref = has_owner_ref(&claim.metadata, uid_of(&pod.metadata));
    if has_unexpected_controller(claim, set, pod) {
        // Someone else controls the claim: only our own references must go.
        return !set_ref && !pod_ref;
    }
    if has_non_controller_owner(claim, set, pod) {
        return false;
    }
    let scaled_down = !pod_in_ordinal_range(pod, set);
    match retention_policy(set) {
        (DELETE, RETAIN) => set_ref && !pod_ref,
        (RETAIN, DELETE) => !set_ref && scaled_down == pod_ref,
        (DELETE, DELETE) => scaled_down != set_ref && scaled_down == pod_ref,
        // Retain/Retain, and unknown values treated as Retain.
        _ => !set_ref && !pod_ref,
    }
}

/// `addControllerRef`: makes the reference to `owner` a controller reference, adding it if
/// missing.
fn add_controller_ref(refs: &mut Vec<OwnerReference>, owner: OwnerReference) {
    match refs.iter_mut().find(|r| r.uid == owner.uid) {
        Some(r) => r.controller = Some(true),
        None => refs.push(owner),
    }
}

/// `updateClaimOwnerRefForSetAndPod`: rewrites the claim's references to the set and pod as
/// [`is_claim_owner_up_to_date`] wants them (only removes ours when another controller owns it).
pub fn update_claim_owner_ref_for_set_and_pod(claim: &mut PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) {
    let set_ref = new_controller_ref(set);
    let pod_ref = new_controller_ref(pod);
    let unexpected = has_unexpected_controller(claim, set, pod);
    let mut refs: Vec<OwnerReference> = claim
        .metadata
        .owner_references
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| !matches_ref(r, &set_ref) && (pod_ref.uid.is_empty() || !matches_ref(r, &pod_ref)))
        .collect();
    if !unexpected {
        let scaled_down = !pod_in_ordinal_range(pod, set);
        let (when_deleted, when_scaled) = retention_policy(set);
        if when_deleted == DELETE && !(when_scaled == DELETE && scaled_down) {
            add_controller_ref(&mut refs, set_ref);
        }
        if when_scaled == DELETE && scaled_down && !pod_ref.uid.is_empty() {
            add_controller_ref(&mut refs, pod_ref);
        }
    }
    claim.metadata.owner_references = (!refs.is_empty()).then_some(refs);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_are_parsed_from_the_trailing_number_of_a_name() {
        assert_eq!(parent_and_ordinal("web-0"), Some(("web", 0)));
        assert_eq!(parent_and_ordinal("my-db-12"), Some(("my-db", 12)));
        assert_eq!(parent_and_ordinal("web-x"), None);
        assert_eq!(parent_and_ordinal("web-"), None);
        assert_eq!(parent_and_ordinal("web"), None);
    }
}
