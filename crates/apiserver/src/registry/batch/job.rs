//! The Job strategy (`pkg/registry/batch/job/strategy.go`): `PrepareForCreate` drops the status
//! and, unless `spec.manualSelector` is true, generates the selector
//! (`batch.kubernetes.io/controller-uid=<uid>`) and the pod template labels that tie the Job's
//! pods to it alone (`batch.kubernetes.io/controller-uid`, `batch.kubernetes.io/job-name` and
//! their legacy spellings `controller-uid`, `job-name`). Validation and immutability are
//! `skiff_apimachinery::validation::job`.

use serde_json::{Map, Value, json};
use skiff_apimachinery::validation::job::{CONTROLLER_UID_LABEL, JOB_NAME_LABEL};

/// The legacy label carrying the Job's uid (`controller-uid`).
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
/// The legacy label carrying the Job's name (`job-name`).
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";

/// `PrepareForCreate`: no status; the generated selector and template labels (after the uid and
/// name are set).
pub fn prepare_for_create(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
    generate_selector(obj);
}

/// `generateSelectorIfNeeded`: with `manualSelector` unset or false, the template gets the four
/// labels (overwriting user values, as Kubernetes does) and the selector becomes
/// `matchLabels: {batch.kubernetes.io/controller-uid: <uid>}` unless the user gave one (which
/// validation then rejects as "`selector` not auto-generated" if it does not select these labels).
pub fn generate_selector(obj: &mut Value) {
    let uid = obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_string();
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let template = object(spec, "template");
    let meta = object(template, "metadata");
    let labels = object(meta, "labels");
    for (k, v) in [
        (LEGACY_CONTROLLER_UID_LABEL, &uid),
        (LEGACY_JOB_NAME_LABEL, &name),
        (CONTROLLER_UID_LABEL, &uid),
        (JOB_NAME_LABEL, &name),
    ] {
        labels.insert(k.to_string(), Value::String(v.clone()));
    }
    if spec.get("selector").is_none_or(Value::is_null) {
        spec.insert("selector".into(), json!({"matchLabels": {CONTROLLER_UID_LABEL: uid}}));
    }
}

fn object<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    if !m.get(key).is_some_and(Value::is_object) {
        m.insert(key.to_string(), json!({}));
    }
    m.get_mut(key).and_then(Value::as_object_mut).expect("just inserted an object")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(spec: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "hello", "namespace": "default", "uid": "u-1"}, "spec": spec})
    }

    #[test]
    fn a_job_without_manual_selector_gets_the_uid_selector_and_template_labels() {
        let mut j = job(json!({"template": {"spec": {"containers": []}}}));
        prepare_for_create(&mut j);
        assert_eq!(
            j.pointer("/spec/selector"),
            Some(&json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}}))
        );
        let labels = j.pointer("/spec/template/metadata/labels").unwrap();
        assert_eq!(labels["batch.kubernetes.io/job-name"], "hello");
        assert_eq!(labels["job-name"], "hello");
        assert_eq!(labels["controller-uid"], "u-1");
        assert_eq!(labels["batch.kubernetes.io/controller-uid"], "u-1");
    }

    #[test]
    fn a_job_with_manual_selector_keeps_its_selector_and_labels() {
        let sel = json!({"matchLabels": {"app": "x"}});
        let mut j = job(json!({"manualSelector": true, "selector": sel,
                               "template": {"metadata": {"labels": {"app": "x"}}}}));
        prepare_for_create(&mut j);
        assert_eq!(j.pointer("/spec/selector"), Some(&sel));
        assert_eq!(j.pointer("/spec/template/metadata/labels"), Some(&json!({"app": "x"})));
    }

    #[test]
    fn the_status_of_a_created_job_is_dropped() {
        let mut j = job(json!({}));
        j["status"] = json!({"succeeded": 3});
        prepare_for_create(&mut j);
        assert!(j.get("status").is_none());
    }
}
