//! Small helpers shared by the controllers: controller references, pod readiness and
//! availability, object references, times and label selectors (Kubernetes' `metav1`,
//! `podutil` and `controller` helper functions).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as MetaLabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use skiff_apimachinery::LabelSelector;
pub use skiff_runtime::util::{Clock, add_seconds, fixed_clock, object_reference, system_clock, time};

/// `metav1.GetControllerOf`: the owner reference with `controller: true`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|r| r.controller == Some(true))
}

/// `metav1.NewControllerRef`: a controller reference to `owner` with `blockOwnerDeletion`.
pub fn new_controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The object's uid ("" when unset).
pub fn uid_of(meta: &ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

/// The object's name ("" when unset).
pub fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

/// The object's labels (empty when unset).
pub fn labels_of(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

/// `metav1.LabelSelectorAsSelector`.
///
/// # Errors
/// An invalid selector (unknown operator, invalid key or value), as a message.
pub fn selector_of(sel: &MetaLabelSelector) -> Result<LabelSelector, String> {
    LabelSelector::from_metav1(sel)
}

/// Whether a `metav1.LabelSelector` is the empty selector (selects everything).
pub fn selects_everything(sel: &MetaLabelSelector) -> bool {
    sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty) && sel.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// `jobutil.FinishedCondition`: the Job's true `Complete` or `Failed` condition, if it has
/// finished (what the CronJob and TTL-after-finished controllers read).
pub fn finished_condition(job: &Job) -> Option<&JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

/// Whether the object has `metadata.deletionTimestamp`.
pub fn being_deleted(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

/// `podutil.IsPodReady`: the `Ready` condition is `True`.
pub fn is_pod_ready(pod: &Pod) -> bool {
    pod_ready_condition(pod).is_some_and(|c| c.status == "True")
}

/// The pod's `Ready` condition.
pub fn pod_ready_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")
}

/// `podutil.IsPodAvailable`: ready, and ready for at least `min_ready_seconds` at `now`.
pub fn is_pod_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    let Some(cond) = pod_ready_condition(pod).filter(|c| c.status == "True") else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    match &cond.last_transition_time {
        Some(t) => add_seconds(t.0, i64::from(min_ready_seconds)) < now,
        None => false,
    }
}

/// The pod's phase ("" when unset).
pub fn pod_phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default()
}

/// `controller.IsPodActive`: not Succeeded, not Failed, not being deleted.
pub fn is_pod_active(pod: &Pod) -> bool {
    let phase = pod_phase(pod);
    phase != "Succeeded" && phase != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

/// The pod's `spec.nodeName` ("" when unscheduled).
pub fn pod_node_name(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn ready_pod(since: Timestamp) -> Pod {
        Pod {
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(since)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_is_available_only_after_min_ready_seconds() {
        let t0 = Timestamp::from_second(1_000_000).unwrap();
        let pod = ready_pod(t0);
        assert!(is_pod_available(&pod, 0, t0));
        assert!(!is_pod_available(&pod, 10, add_seconds(t0, 10)));
        assert!(is_pod_available(&pod, 10, add_seconds(t0, 11)));
        assert!(!is_pod_available(&Pod::default(), 0, t0));
    }
}
