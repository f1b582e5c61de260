//! Priority (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#priority>,
//! <https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/>): a new
//! pod's `spec.priority` (and `preemptionPolicy`) come from its PriorityClass, or from the
//! `globalDefault` class (lowest value when several), or are 0; a missing class is forbidden.
//! On PriorityClass writes, at most one class may be `globalDefault`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::{AdmissionLookup, AdmissionRequest, Feedback, MutatingAdmission, Operation, ValidatingAdmission};

/// `PreemptLowerPriority`, the default preemption policy.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

/// The two system PriorityClasses every cluster has (created by the API server at startup).
pub fn system_priority_classes() -> Vec<Value> {
    [("system-node-critical", 2_000_001_000i64), ("system-cluster-critical", 2_000_000_000i64)]
        .into_iter()
        .map(|(name, value)| {
            json!({
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": format!("Used for system critical pods that must not be moved from their current {}.",
                    if name == "system-node-critical" { "node" } else { "node, unless evicted by a higher-priority pod" }),
                "preemptionPolicy": PREEMPT_LOWER_PRIORITY,
            })
        })
        .collect()
}

fn find_class(lookup: &dyn AdmissionLookup, name: &str) -> Option<Arc<Value>> {
    lookup
        .priority_classes()
        .into_iter()
        .find(|c| c["metadata"]["name"] == name)
        .or_else(|| system_priority_classes().into_iter().find(|c| c["metadata"]["name"] == name).map(Arc::new))
}

/// Sets `spec.priority`, `spec.priorityClassName` (from the global default) and
/// `spec.preemptionPolicy` on a pod being created.
///
/// # Errors
/// 403 `no PriorityClass with name x was found`, or when the pod carries a priority (or
/// preemption policy) different from its class's.
pub fn admit_pod(
    pod: &mut Value,
    lookup: &dyn AdmissionLookup,
    forbidden: impl Fn(&str) -> ApiError,
) -> Result<(), ApiError> {
    let class_name = pod["spec"]["priorityClassName"].as_str().unwrap_or_default().to_string();
    let (name, value, policy) = if class_name.is_empty() {
        let default = lookup
            .priority_classes()
            .into_iter()
            .filter(|c| c["globalDefault"].as_bool() == Some(true))
            .min_by_key(|c| c["value"].as_i64().unwrap_or_default());
        match default {
            Some(c) => (
                c["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                c["value"].as_i64().unwrap_or_default(),
                c["preemptionPolicy"].as_str().unwrap_or(PREEMPT_LOWER_PRIORITY).to_string(),
            ),
            None => (String::new(), 0, PREEMPT_LOWER_PRIORITY.to_string()),
        }
    } else {
        let Some(c) = find_class(lookup, &class_name) else {
            return Err(forbidden(&format!("no PriorityClass with name {class_name} was found")));
        };
        (
            class_name.clone(),
            c["value"].as_i64().unwrap_or_default(),
            c["preemptionPolicy"].as_str().unwrap_or(PREEMPT_LOWER_PRIORITY).to_string(),
        )
    };
    if let Some(given) = pod["spec"]["priority"].as_i64()
        && given != value
    {
        return Err(forbidden(&format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
        )));
    }
    if let Some(given) = pod["spec"]["preemptionPolicy"].as_str()
        && given != policy
    {
        return Err(forbidden(&format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
        )));
    }
    if !name.is_empty() {
        pod["spec"]["priorityClassName"] = name.into();
    }
    pod["spec"]["priority"] = value.into();
    pod["spec"]["preemptionPolicy"] = policy.into();
    Ok(())
}

/// Rejects a second `globalDefault` PriorityClass.
///
/// # Errors
/// 403 `PriorityClass <existing> is already marked as default. Only one default can exist`.
pub fn validate_priority_class(req: &AdmissionRequest, lookup: &dyn AdmissionLookup) -> Result<(), ApiError> {
    let Some(obj) = &req.object else { return Ok(()) };
    if obj["globalDefault"].as_bool() != Some(true) {
        return Ok(());
    }
    let me = obj["metadata"]["name"].as_str().unwrap_or_default();
    if let Some(other) = lookup
        .priority_classes()
        .into_iter()
        .find(|c| c["globalDefault"].as_bool() == Some(true) && c["metadata"]["name"] != me)
    {
        let other = other["metadata"]["name"].as_str().unwrap_or_default().to_string();
        return Err(
            req.forbidden(&format!("PriorityClass {other} is already marked as default. Only one default can exist"))
        );
    }
    Ok(())
}

/// The plugin.
pub struct Priority {
    lookup: Arc<dyn AdmissionLookup>,
}

impl Priority {
    /// The plugin over `lookup`.
    pub fn new(lookup: Arc<dyn AdmissionLookup>) -> Self {
        Self { lookup }
    }
}

#[async_trait]
impl MutatingAdmission for Priority {
    fn name(&self) -> &str {
        "Priority"
    }
    async fn admit(&self, req: &mut AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        if !req.is_create_of("pods") {
            return Ok(());
        }
        // Borrow the object mutably and the rest shared: no copy of the request.
        let name = req.object_name();
        let AdmissionRequest { object, resource, .. } = req;
        let Some(pod) = object.as_mut() else { return Ok(()) };
        admit_pod(pod, self.lookup.as_ref(), |why| ApiError::forbidden(&resource.group, &resource.resource, &name, why))
    }
}

#[async_trait]
impl ValidatingAdmission for Priority {
    fn name(&self) -> &str {
        "Priority"
    }
    async fn validate(&self, req: &AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        let is_class = req.resource.group == "scheduling.k8s.io" && req.resource.resource == "priorityclasses";
        if is_class && matches!(req.op(), Operation::Create | Operation::Update) && req.sub_resource.is_empty() {
            return validate_priority_class(req, self.lookup.as_ref());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryLookup;

    fn forbidden(why: &str) -> ApiError {
        ApiError::forbidden("", "pods", "p", why)
    }

    fn class(name: &str, value: i64, global: bool) -> Value {
        json!({"kind": "PriorityClass", "metadata": {"name": name}, "value": value, "globalDefault": global})
    }

    #[test]
    fn pods_get_their_class_priority_or_the_global_default() {
        let l = MemoryLookup::new();
        l.put(class("high", 1000, false));
        let mut pod = json!({"spec": {"priorityClassName": "high"}});
        admit_pod(&mut pod, &l, forbidden).unwrap();
        assert_eq!(
            (pod["spec"]["priority"].as_i64(), pod["spec"]["preemptionPolicy"].as_str()),
            (Some(1000), Some(PREEMPT_LOWER_PRIORITY))
        );
        let mut pod = json!({"spec": {}});
        admit_pod(&mut pod, &l, forbidden).unwrap();
        assert_eq!(pod["spec"]["priority"], 0);
        assert!(pod["spec"]["priorityClassName"].is_null());
        l.put(class("low-default", 10, true));
        l.put(class("lower-default", 5, true));
        let mut pod = json!({"spec": {}});
        admit_pod(&mut pod, &l, forbidden).unwrap();
        assert_eq!(
            (pod["spec"]["priority"].as_i64(), pod["spec"]["priorityClassName"].as_str()),
            (Some(5), Some("lower-default"))
        );
        let mut pod = json!({"spec": {"priorityClassName": "system-node-critical"}});
        admit_pod(&mut pod, &l, forbidden).unwrap();
        assert_eq!(pod["spec"]["priority"], 2_000_001_000i64);
    }

    #[test]
    fn unknown_classes_and_conflicting_priorities_are_forbidden() {
        let l = MemoryLookup::new();
        l.put(class("high", 1000, false));
        let mut pod = json!({"spec": {"priorityClassName": "nope"}});
        assert_eq!(
            admit_pod(&mut pod, &l, forbidden).unwrap_err().message,
            r#"pods "p" is forbidden: no PriorityClass with name nope was found"#
        );
        let mut pod = json!({"spec": {"priorityClassName": "high", "priority": 7}});
        assert!(admit_pod(&mut pod, &l, forbidden).unwrap_err().message.contains("the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 1000"));
        let mut pod = json!({"spec": {"priorityClassName": "high", "priority": 1000}});
        assert!(admit_pod(&mut pod, &l, forbidden).is_ok());
    }

    #[test]
    fn only_one_global_default_class_may_exist() {
        let l = MemoryLookup::new();
        l.put(class("first", 1, true));
        let mut req =
            AdmissionRequest::new(Operation::Create, "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass");
        req.object = Some(class("second", 2, true));
        let e = validate_priority_class(&req, &l).unwrap_err();
        assert_eq!(
            e.message,
            r#"priorityclasses.scheduling.k8s.io "second" is forbidden: PriorityClass first is already marked as default. Only one default can exist"#
        );
        req.object = Some(class("first", 3, true));
        assert!(validate_priority_class(&req, &l).is_ok());
        req.object = Some(class("third", 3, false));
        assert!(validate_priority_class(&req, &l).is_ok());
    }
}
