//! apps/v1 StatefulSet: `ValidateStatefulSet`/`ValidateStatefulSetUpdate` of
//! `pkg/apis/apps/validation` (Kubernetes 1.33): pod management policy, update strategy
//! (partition, maxUnavailable), PVC retention policy, ordinals, selector and template, and the
//! fields an update may change.
//!
//! The pod template is validated as the pod the StatefulSet controller creates from it: each
//! `volumeClaimTemplates` entry becomes a `persistentVolumeClaim` volume of that name, so a
//! container mounting a claim template by name is valid, as it is on Kubernetes.

use serde_json::{Map, Value, json};

use super::{Errs, json_equal_ignoring_nulls, obj, percent_or_int, s, validate_selector, validate_template};

/// `spec.podManagementPolicy` values.
const POD_MANAGEMENT_POLICIES: [&str; 2] = ["OrderedReady", "Parallel"];
/// `persistentVolumeClaimRetentionPolicy` values, in Kubernetes' order.
const RETENTION_POLICIES: [&str; 2] = ["Retain", "Delete"];
/// The spec fields an update may change (`ValidateStatefulSetUpdate`).
const MUTABLE_SPEC_FIELDS: [&str; 6] =
    ["replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy", "minReadySeconds"];

/// Create (`old` = `None`) or update of a StatefulSet.
pub(super) fn validate_stateful_set(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let Some(spec) = o.get("spec") else {
        e.required("spec", "");
        return;
    };
    validate_stateful_set_spec(e, spec);
    if let Some(old_spec) = old.and_then(|o| o.get("spec")) {
        let strip = |spec: &Value| {
            let mut m = spec.as_object().cloned().unwrap_or_default();
            for f in MUTABLE_SPEC_FIELDS {
                m.remove(f);
            }
            Value::Object(m)
        };
        if !json_equal_ignoring_nulls(&strip(spec), &strip(old_spec)) {
            e.forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', \
                 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            );
        }
    }
}

/// `ValidateStatefulSetSpec`.
fn validate_stateful_set_spec(e: &mut Errs, spec: &Value) {
    match spec.get("podManagementPolicy").filter(|v| !v.is_null()) {
        None => e.required("spec.podManagementPolicy", ""),
        Some(Value::String(p)) if p.is_empty() => e.required("spec.podManagementPolicy", ""),
        Some(p) if POD_MANAGEMENT_POLICIES.contains(&p.as_str().unwrap_or_default()) => {}
        Some(p) => e.invalid("spec.podManagementPolicy", p, "must be 'OrderedReady' or 'Parallel'"),
    }
    validate_update_strategy(e, spec.get("updateStrategy"));
    if let Some(policy) = obj(spec, "persistentVolumeClaimRetentionPolicy") {
        for f in ["whenDeleted", "whenScaled"] {
            let v = policy.get(f).cloned().unwrap_or(Value::String(String::new()));
            if !RETENTION_POLICIES.contains(&v.as_str().unwrap_or_default()) {
                e.not_supported(&format!("spec.persistentVolumeClaimRetentionPolicy.{f}"), &v, &RETENTION_POLICIES);
            }
        }
    }
    e.non_negative("spec.replicas", spec.get("replicas"));
    e.non_negative("spec.minReadySeconds", spec.get("minReadySeconds"));
    if let Some(ordinals) = spec.get("ordinals").filter(|v| !v.is_null()) {
        e.non_negative("spec.ordinals.start", ordinals.get("start"));
    }
    let selector = validate_selector(e, spec, "statefulset");
    let Some(template) = spec.get("template") else {
        e.required("spec.template", "");
        return;
    };
    // activeDeadlineSeconds is checked here, with the StatefulSet's own message.
    let pod_template = template_as_created(template, spec);
    validate_template(e, &json!({ "template": pod_template }), &["Always"], selector.as_ref());
    if template.pointer("/spec/activeDeadlineSeconds").is_some_and(|v| !v.is_null()) {
        e.forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            "activeDeadlineSeconds in StatefulSet is not Supported",
        );
    }
}

/// The template as the controller turns it into pods (`updateStorage`): every claim template
/// replaces or adds the volume of its name.
fn template_as_created(template: &Value, spec: &Value) -> Value {
    let claims: Vec<&str> = super::arr(spec, "volumeClaimTemplates")
        .iter()
        .map(|c| c.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default())
        .filter(|n| !n.is_empty())
        .collect();
    let mut t = template.clone();
    if let Some(pod_spec) = t.get_mut("spec").and_then(Value::as_object_mut) {
        pod_spec.remove("activeDeadlineSeconds");
        if !claims.is_empty() {
            let mut volumes: Vec<Value> = claims
                .iter()
                .map(|name| json!({"name": name, "persistentVolumeClaim": {"claimName": format!("{name}-0")}}))
                .collect();
            let existing = pod_spec.get("volumes").and_then(Value::as_array).cloned().unwrap_or_default();
            volumes.extend(existing.into_iter().filter(|v| !claims.contains(&s(v, "name"))));
            pod_spec.insert("volumes".into(), Value::Array(volumes));
        }
    }
    t
}

/// Go's `%#v` of an `apps.RollingUpdateStatefulSetStrategy` (the pointer inside is shown as Go
/// shows a nil or non-nil pointer).
fn go_rolling_update(ru: &Value) -> String {
    let partition = ru.get("partition").and_then(Value::as_i64).unwrap_or(0);
    let max_unavailable = if ru.get("maxUnavailable").is_some_and(|v| !v.is_null()) {
        "(*intstr.IntOrString)(0x0)"
    } else {
        "(*intstr.IntOrString)(nil)"
    };
    format!("apps.RollingUpdateStatefulSetStrategy{{Partition:{partition}, MaxUnavailable:{max_unavailable}}}")
}

fn validate_update_strategy(e: &mut Errs, strategy: Option<&Value>) {
    let empty = Map::new();
    let strategy = strategy.and_then(Value::as_object).unwrap_or(&empty);
    let rolling_update = strategy.get("rollingUpdate").filter(|v| !v.is_null());
    match strategy.get("type").and_then(Value::as_str).unwrap_or_default() {
        "" => e.required("spec.updateStrategy", ""),
        "OnDelete" => {
            if let Some(ru) = rolling_update {
                e.invalid_raw(
                    "spec.updateStrategy.rollingUpdate",
                    &go_rolling_update(ru),
                    "only allowed for updateStrategy 'RollingUpdate'",
                );
            }
        }
        "RollingUpdate" => {
            if let Some(ru) = rolling_update {
                validate_rolling_update(e, ru);
            }
        }
        other => {
            let ru = rolling_update.map_or_else(
                || "(*apps.RollingUpdateStatefulSetStrategy)(nil)".to_string(),
                |ru| format!("&{}", go_rolling_update(ru)),
            );
            e.invalid_raw(
                "spec.updateStrategy",
                &format!("apps.StatefulSetUpdateStrategy{{Type:{other:?}, RollingUpdate:{ru}}}"),
                "must be 'RollingUpdate' or 'OnDelete'",
            );
        }
    }
}

/// `validateRollingUpdateStatefulSet`: partition ≥ 0; maxUnavailable a non-negative integer or
/// percentage, not 0 and at most 100%.
fn validate_rolling_update(e: &mut Errs, ru: &Value) {
    e.non_negative("spec.updateStrategy.rollingUpdate.partition", ru.get("partition"));
    let Some(mu) = ru.get("maxUnavailable").filter(|v| !v.is_null()) else { return };
    let path = "spec.updateStrategy.rollingUpdate.maxUnavailable";
    match percent_or_int(mu) {
        Err(m) => e.invalid(path, mu, &m),
        Ok((n, percent)) => {
            if n < 0 {
                e.invalid(path, mu, "must be greater than or equal to 0");
            }
            if n == 0 {
                e.invalid(path, mu, "cannot be 0");
            }
            if percent && n > 100 {
                e.invalid(path, mu, "must not be greater than 100%");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{Value, json};

    use crate::validation::validate;

    /// A defaulted StatefulSet whose container mounts the claim template `data`.
    fn sts() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 3,
                "serviceName": "web",
                "podManagementPolicy": "OrderedReady",
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "revisionHistoryLimit": 10,
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "restartPolicy": "Always",
                        "dnsPolicy": "ClusterFirst",
                        "containers": [{
                            "name": "nginx", "image": "nginx",
                            "terminationMessagePolicy": "File", "imagePullPolicy": "Always",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                        }]
                    }
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
                }]
            }
        })
    }

    fn causes(obj: &Value, old: Option<&Value>) -> BTreeSet<String> {
        validate("apps/v1", "StatefulSet", obj, old)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn check(obj: Value, old: Option<Value>, want: &[&str]) {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        assert_eq!(causes(&obj, old.as_ref()), want, "\nobject: {obj}");
    }

    #[test]
    fn a_container_may_mount_a_volume_claim_template_by_name() {
        check(sts(), None, &[]);
    }

    #[test]
    fn a_mount_of_neither_a_volume_nor_a_claim_template_is_not_found() {
        let mut o = sts();
        o["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] = json!("logs");
        check(o, None, &["spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"logs\""]);
    }

    #[test]
    fn a_volume_named_like_a_claim_template_is_replaced_not_duplicated() {
        let mut o = sts();
        o["spec"]["template"]["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
        check(o, None, &[]);
    }

    #[test]
    fn pod_management_policy_update_strategy_and_retention_policy_are_enums() {
        let mut o = sts();
        o["spec"]["podManagementPolicy"] = json!("Random");
        o["spec"]["updateStrategy"] = json!({"type": "Sometimes"});
        o["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] = json!("Keep");
        check(
            o,
            None,
            &[
                "spec.podManagementPolicy: Invalid value: \"Random\": must be 'OrderedReady' or 'Parallel'",
                "spec.updateStrategy: Invalid value: apps.StatefulSetUpdateStrategy{Type:\"Sometimes\", \
                 RollingUpdate:(*apps.RollingUpdateStatefulSetStrategy)(nil)}: must be 'RollingUpdate' or 'OnDelete'",
                "spec.persistentVolumeClaimRetentionPolicy.whenScaled: Unsupported value: \"Keep\": supported \
                 values: \"Retain\", \"Delete\"",
            ],
        );
        let mut o = sts();
        o["spec"]["podManagementPolicy"] = json!("");
        o["spec"]["updateStrategy"] = json!({});
        check(o, None, &["spec.podManagementPolicy: Required value", "spec.updateStrategy: Required value"]);
    }

    #[test]
    fn partition_max_unavailable_ordinals_and_on_delete_rolling_update_are_checked() {
        let mut o = sts();
        o["spec"]["updateStrategy"]["rollingUpdate"] = json!({"partition": -1, "maxUnavailable": 0});
        o["spec"]["ordinals"] = json!({"start": -2});
        o["spec"]["minReadySeconds"] = json!(-1);
        check(
            o,
            None,
            &[
                "spec.updateStrategy.rollingUpdate.partition: Invalid value: -1: must be greater than or equal to 0",
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 0: cannot be 0",
                "spec.ordinals.start: Invalid value: -2: must be greater than or equal to 0",
                "spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0",
            ],
        );
        let mut o = sts();
        o["spec"]["updateStrategy"]["rollingUpdate"] = json!({"maxUnavailable": "120%"});
        check(
            o,
            None,
            &[
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"120%\": must not be greater than 100%",
            ],
        );
        let mut o = sts();
        o["spec"]["updateStrategy"] = json!({"type": "OnDelete", "rollingUpdate": {"partition": 1}});
        check(
            o,
            None,
            &["spec.updateStrategy.rollingUpdate: Invalid value: apps.RollingUpdateStatefulSetStrategy{Partition:1, \
               MaxUnavailable:(*intstr.IntOrString)(nil)}: only allowed for updateStrategy 'RollingUpdate'"],
        );
    }

    #[test]
    fn the_template_must_restart_always_and_set_no_active_deadline() {
        let mut o = sts();
        o["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        o["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(30);
        check(
            o,
            None,
            &[
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
                "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in StatefulSet is not Supported",
            ],
        );
    }

    #[test]
    fn an_empty_selector_is_invalid() {
        let mut o = sts();
        o["spec"]["selector"] = json!({});
        let got = causes(&o, None);
        assert!(
            got.iter().any(|c| c.starts_with("spec.selector: Invalid value: ")
                && c.ends_with("empty selector is invalid for statefulset")),
            "{got:?}"
        );
    }

    #[test]
    fn only_replicas_ordinals_template_update_strategy_retention_and_min_ready_may_change() {
        let old = sts();
        let mut new = sts();
        new["spec"]["replicas"] = json!(5);
        new["spec"]["ordinals"] = json!({"start": 1});
        new["spec"]["minReadySeconds"] = json!(10);
        new["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        new["spec"]["persistentVolumeClaimRetentionPolicy"] = json!({"whenDeleted": "Delete", "whenScaled": "Delete"});
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        check(new, Some(old.clone()), &[]);
        for (field, value) in [
            ("serviceName", json!("other")),
            ("podManagementPolicy", json!("Parallel")),
            (
                "volumeClaimTemplates",
                json!([{"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}}]),
            ),
            ("revisionHistoryLimit", json!(3)),
        ] {
            let mut new = sts();
            new["spec"][field] = value;
            check(
                new,
                Some(old.clone()),
                &["spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', \
                   'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"],
            );
        }
    }

    #[test]
    fn a_statefulset_name_must_be_a_dns_label() {
        let mut o = sts();
        o["metadata"]["name"] = json!("web.example");
        let got = causes(&o, None);
        assert!(got.iter().any(|c| c.starts_with("metadata.name: Invalid value: \"web.example\"")), "{got:?}");
    }
}
