//! The DaemonSet strategy (`pkg/registry/apps/daemonset/strategy.go`): the template generation.
//!
//! apps/v1 has no `spec.templateGeneration`; Kubernetes' conversion carries the internal field
//! in the `deprecated.daemonset.template.generation` annotation, so that is where it lives here.
//! It starts at 1 and goes up by one exactly when `spec.template` changes; clients cannot set it
//! (the DaemonSet controller labels pods with it as `pod-template-generation`, and
//! `kubectl rollout` reads it).

use serde_json::Value;

use crate::util::meta_mut;

/// The annotation holding the template generation (`appsv1.DeprecatedTemplateGeneration`).
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

fn template_generation(obj: &Value) -> Option<i64> {
    obj.pointer("/metadata/annotations")?.get(TEMPLATE_GENERATION_ANNOTATION)?.as_str()?.parse().ok()
}

fn set_template_generation(obj: &mut Value, generation: i64) {
    let meta = meta_mut(obj);
    if !meta.get("annotations").is_some_and(Value::is_object) {
        meta.insert("annotations".into(), Value::Object(Default::default()));
    }
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        a.insert(TEMPLATE_GENERATION_ANNOTATION.into(), Value::String(generation.to_string()));
    }
}

/// `PrepareForCreate`: a template generation below 1 (or none, or not a number) becomes 1.
pub fn prepare_for_create(obj: &mut Value) {
    let generation = template_generation(obj).filter(|g| *g >= 1).unwrap_or(1);
    set_template_generation(obj, generation);
}

/// `PrepareForUpdate` (after defaulting, so that templates compare as Kubernetes' semantic
/// equality does): the stored template generation is kept, plus one when a write of the main
/// resource changed `spec.template`. A `/status` write never changes it.
pub fn prepare_for_update(subresource: Option<&str>, old: &Value, new: &mut Value) {
    let stored = template_generation(old).unwrap_or(1);
    let changed = subresource.is_none() && old.pointer("/spec/template") != new.pointer("/spec/template");
    set_template_generation(new, if changed { stored + 1 } else { stored });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ds(image: &str, generation: Option<&str>) -> Value {
        let mut v = json!({
            "metadata": {"name": "agent"},
            "spec": {"template": {"spec": {"containers": [{"name": "a", "image": image}]}}}
        });
        if let Some(g) = generation {
            v["metadata"]["annotations"] = json!({TEMPLATE_GENERATION_ANNOTATION: g});
        }
        v
    }

    #[test]
    fn a_created_daemon_set_starts_at_template_generation_one() {
        for given in [None, Some("0"), Some("-3"), Some("x")] {
            let mut obj = ds("a", given);
            prepare_for_create(&mut obj);
            assert_eq!(template_generation(&obj), Some(1), "{given:?}");
        }
        let mut obj = ds("a", Some("7"));
        prepare_for_create(&mut obj);
        assert_eq!(template_generation(&obj), Some(7));
    }

    #[test]
    fn the_template_generation_goes_up_only_when_the_template_changes() {
        let old = ds("a", Some("3"));
        let mut same = ds("a", Some("9"));
        prepare_for_update(None, &old, &mut same);
        assert_eq!(template_generation(&same), Some(3));
        let mut changed = ds("b", None);
        prepare_for_update(None, &old, &mut changed);
        assert_eq!(template_generation(&changed), Some(4));
        let mut status = ds("b", None);
        prepare_for_update(Some("status"), &old, &mut status);
        assert_eq!(template_generation(&status), Some(3));
    }
}
