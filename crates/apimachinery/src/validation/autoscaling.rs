//! autoscaling HorizontalPodAutoscaler: `ValidateHorizontalPodAutoscaler`,
//! `ValidateHorizontalPodAutoscalerUpdate` and the status checks of
//! `pkg/apis/autoscaling/validation` (Kubernetes 1.33), on the stored autoscaling/v2 form, so
//! field paths are v2's whichever version was written (as Kubernetes validates its internal
//! form). `HPAScaleToZero` is off (alpha), so `minReplicas` must be at least 1 unless the old
//! object already had 0.

use serde_json::Value;

use super::{Errs, NameRule, child, index, name_errors, s};
use crate::quantity::parse_quantity_value;

/// `MaxPeriodSeconds`: the longest scaling policy period.
pub const MAX_PERIOD_SECONDS: i64 = 1800;
/// `MaxStabilizationWindowSeconds`: the longest stabilization window.
pub const MAX_STABILIZATION_WINDOW_SECONDS: i64 = 3600;
/// The metric source types (sorted, as `sets.List` prints them).
pub const METRIC_SOURCE_TYPES: &[&str] = &["ContainerResource", "External", "Object", "Pods", "Resource"];
/// `selectPolicy` values (sorted).
pub const SELECT_POLICIES: &[&str] = &["Disabled", "Max", "Min"];
/// Scaling policy types (sorted).
pub const POLICY_TYPES: &[&str] = &["Percent", "Pods"];

pub(super) fn validate_hpa(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let spec = o.get("spec").unwrap_or(&Value::Null);
    let old_min_zero = old.and_then(|o| o.pointer("/spec/minReplicas")).and_then(Value::as_i64) == Some(0);
    let lower = if old_min_zero { 0 } else { 1 };
    let min = spec.get("minReplicas").and_then(Value::as_i64);
    let max = spec.get("maxReplicas").and_then(Value::as_i64).unwrap_or(0);
    if let Some(m) = min
        && m < lower
    {
        e.invalid("spec.minReplicas", &Value::from(m), &format!("must be greater than or equal to {lower}"));
    }
    if max < 1 {
        e.invalid("spec.maxReplicas", &Value::from(max), "must be greater than 0");
    }
    if let Some(m) = min
        && max < m
    {
        e.invalid("spec.maxReplicas", &Value::from(max), "must be greater than or equal to `minReplicas`");
    }
    cross_version_object_reference(e, spec.get("scaleTargetRef").unwrap_or(&Value::Null), "spec.scaleTargetRef");
    let metrics = spec.get("metrics").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let mut object_or_external = false;
    for (i, m) in metrics.iter().enumerate() {
        metric_spec(e, m, &index("spec.metrics", i));
        object_or_external |= matches!(s(m, "type"), "Object" | "External");
    }
    if min == Some(0) && !object_or_external {
        e.forbidden(
            "spec.metrics",
            "must specify at least one Object or External metric to support scaling to zero replicas",
        );
    }
    if let Some(b) = spec.get("behavior").filter(|b| !b.is_null()) {
        for dir in ["scaleUp", "scaleDown"] {
            if let Some(r) = b.get(dir).filter(|r| !r.is_null()) {
                scaling_rules(e, r, &format!("spec.behavior.{dir}"));
            }
        }
    }
    if let Some(status) = o.get("status") {
        for f in ["currentReplicas", "desiredReplicas"] {
            e.non_negative(&format!("status.{f}"), status.get(f));
        }
    }
}

/// `ValidateCrossVersionObjectReference`.
fn cross_version_object_reference(e: &mut Errs, r: &Value, path: &str) {
    for f in ["kind", "name"] {
        let v = s(r, f);
        if v.is_empty() {
            e.required(&child(path, f), "");
        } else {
            e.names(&child(path, f), v, name_errors(NameRule::PathSegment, v, false));
        }
    }
}

fn scaling_rules(e: &mut Errs, r: &Value, path: &str) {
    if let Some(w) = r.get("stabilizationWindowSeconds").and_then(Value::as_i64) {
        if w < 0 {
            e.invalid(
                &child(path, "stabilizationWindowSeconds"),
                &Value::from(w),
                "must be greater than or equal to zero",
            );
        }
        if w > MAX_STABILIZATION_WINDOW_SECONDS {
            e.invalid(
                &child(path, "stabilizationWindowSeconds"),
                &Value::from(w),
                &format!("must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}"),
            );
        }
    }
    if let Some(p) = r.get("selectPolicy").filter(|p| !p.is_null())
        && !SELECT_POLICIES.contains(&p.as_str().unwrap_or(""))
    {
        e.not_supported(&child(path, "selectPolicy"), p, SELECT_POLICIES);
    }
    let policies_path = child(path, "policies");
    let policies = r.get("policies").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    if policies.is_empty() {
        e.required(&policies_path, "must specify at least one Policy");
    }
    for (i, p) in policies.iter().enumerate() {
        let at = index(&policies_path, i);
        let ty = p.get("type").cloned().unwrap_or(Value::String(String::new()));
        if !POLICY_TYPES.contains(&ty.as_str().unwrap_or("")) {
            e.not_supported(&child(&at, "type"), &ty, POLICY_TYPES);
        }
        let value = p.get("value").and_then(Value::as_i64).unwrap_or(0);
        if value <= 0 {
            e.invalid(&child(&at, "value"), &Value::from(value), "must be greater than zero");
        }
        let period = p.get("periodSeconds").and_then(Value::as_i64).unwrap_or(0);
        if period <= 0 {
            e.invalid(&child(&at, "periodSeconds"), &Value::from(period), "must be greater than zero");
        }
        if period > MAX_PERIOD_SECONDS {
            e.invalid(
                &child(&at, "periodSeconds"),
                &Value::from(period),
                &format!("must be less than or equal to {MAX_PERIOD_SECONDS}"),
            );
        }
    }
}

/// The field each metric source type is carried in.
fn source_field(ty: &str) -> Option<&'static str> {
    Some(match ty {
        "Object" => "object",
        "Pods" => "pods",
        "Resource" => "resource",
        "External" => "external",
        "ContainerResource" => "containerResource",
        _ => return None,
    })
}

fn metric_spec(e: &mut Errs, m: &Value, path: &str) {
    let ty = m.get("type").cloned().unwrap_or(Value::String(String::new()));
    let ty_str = ty.as_str().unwrap_or("");
    if ty_str.is_empty() {
        e.required(&child(path, "type"), "must specify a metric source type");
    }
    if !METRIC_SOURCE_TYPES.contains(&ty_str) {
        e.not_supported(&child(path, "type"), &ty, METRIC_SOURCE_TYPES);
    }
    // Only the first source present (in this order) is validated, as upstream does.
    let present: Vec<&str> = ["object", "external", "pods", "resource", "containerResource"]
        .into_iter()
        .filter(|f| m.get(*f).is_some_and(|v| !v.is_null()))
        .collect();
    if let Some(first) = present.first() {
        let src = &m[*first];
        let at = child(path, first);
        match *first {
            "object" => {
                cross_version_object_reference(
                    e,
                    src.get("describedObject").unwrap_or(&Value::Null),
                    &child(&at, "describedObject"),
                );
                metric_identifier(e, src, &at);
                metric_target(e, src, &at);
                if absent(src, "/target/value") && absent(src, "/target/averageValue") {
                    e.required(&format!("{at}.target.averageValue"), "must set either a target value or averageValue");
                }
            }
            "external" => {
                metric_identifier(e, src, &at);
                metric_target(e, src, &at);
                if absent(src, "/target/value") && absent(src, "/target/averageValue") {
                    e.required(
                        &format!("{at}.target.averageValue"),
                        "must set either a target value for metric or a per-pod target",
                    );
                }
                if !absent(src, "/target/value") && !absent(src, "/target/averageValue") {
                    e.forbidden(
                        &format!("{at}.target.value"),
                        "may not set both a target value for metric and a per-pod target",
                    );
                }
            }
            "pods" => {
                metric_identifier(e, src, &at);
                metric_target(e, src, &at);
                if absent(src, "/target/averageValue") {
                    e.required(&format!("{at}.target.averageValue"), "must specify a positive target averageValue");
                }
            }
            _ => {
                let name = s(src, "name");
                if name.is_empty() {
                    e.required(&child(&at, "name"), "must specify a resource name");
                }
                if *first == "containerResource" {
                    let container = s(src, "container");
                    if container.is_empty() {
                        e.required(&child(&at, "container"), "must specify a container");
                    } else {
                        e.names(&child(&at, "container"), container, crate::names::is_dns1123_label(container));
                    }
                }
                metric_target(e, src, &at);
                if absent(src, "/target/averageUtilization") && absent(src, "/target/averageValue") {
                    e.required(
                        &format!("{at}.target.averageUtilization"),
                        "must set either a target raw value or a target utilization",
                    );
                }
                if !absent(src, "/target/averageUtilization") && !absent(src, "/target/averageValue") {
                    e.forbidden(
                        &format!("{at}.target.averageValue"),
                        "may not set both a target raw value and a target utilization",
                    );
                }
            }
        }
    }
    let expected = source_field(ty_str);
    match expected {
        Some(f) if !present.contains(&f) => {
            e.required(&child(path, f), "must populate information for the given metric source")
        }
        Some(_) => {}
        // `validateMetricSpec`'s default case reports the type a second time.
        None => e.not_supported(&child(path, "type"), &ty, METRIC_SOURCE_TYPES),
    }
    if present.len() != 1 {
        for f in present.iter().filter(|f| Some(**f) != expected) {
            e.forbidden(&child(path, f), "must populate the given metric source only");
        }
    }
}

fn absent(v: &Value, pointer: &str) -> bool {
    v.pointer(pointer).is_none_or(Value::is_null)
}

/// `validateMetricIdentifier` of `src.metric`.
fn metric_identifier(e: &mut Errs, src: &Value, at: &str) {
    let name = src.pointer("/metric/name").and_then(Value::as_str).unwrap_or("");
    let path = format!("{at}.metric.name");
    if name.is_empty() {
        e.required(&path, "must specify a metric name");
    } else {
        e.names(&path, name, name_errors(NameRule::PathSegment, name, false));
    }
}

/// `validateMetricTarget` of `src.target`.
fn metric_target(e: &mut Errs, src: &Value, at: &str) {
    let t = src.get("target").unwrap_or(&Value::Null);
    let path = child(at, "target");
    let ty = t.get("type").cloned().unwrap_or(Value::String(String::new()));
    if ty.as_str().unwrap_or("").is_empty() {
        e.required(&child(&path, "type"), "must specify a metric target type");
    }
    if !matches!(ty.as_str(), Some("Utilization" | "Value" | "AverageValue")) {
        e.invalid(&child(&path, "type"), &ty, "must be either Utilization, Value, or AverageValue");
    }
    for f in ["value", "averageValue"] {
        if let Some(q) = t.get(f).filter(|q| !q.is_null())
            && parse_quantity_value(q).is_ok_and(|v| v <= 0.0)
        {
            e.invalid(&child(&path, f), q, "must be positive");
        }
    }
    if let Some(u) = t.get("averageUtilization").and_then(Value::as_i64)
        && u < 1
    {
        e.invalid(&child(&path, "averageUtilization"), &Value::from(u), "must be greater than 0");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::defaults::apply_defaults;
    use crate::validation::validate;

    fn hpa(spec: Value) -> Value {
        let mut o = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "ns"}, "spec": spec});
        apply_defaults("autoscaling/v2", "HorizontalPodAutoscaler", &mut o);
        o
    }

    fn target() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
    }

    fn causes(o: &Value) -> Vec<(String, String)> {
        validate("autoscaling/v2", "HorizontalPodAutoscaler", o, None)
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect()
    }

    #[test]
    fn a_minimal_hpa_is_defaulted_to_one_replica_and_an_80_percent_cpu_target_and_is_valid() {
        let o = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 5}));
        assert_eq!(o["spec"]["minReplicas"], 1);
        assert_eq!(o["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 80);
        assert!(causes(&o).is_empty(), "{:?}", causes(&o));
    }

    #[test]
    fn a_behavior_is_filled_with_the_default_rules_of_each_direction() {
        let o = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 5,
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 10}}}));
        let b = &o["spec"]["behavior"];
        assert_eq!(b["scaleDown"]["stabilizationWindowSeconds"], 10);
        assert_eq!(b["scaleDown"]["selectPolicy"], "Max");
        assert_eq!(b["scaleDown"]["policies"], json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]));
        assert_eq!(b["scaleUp"]["stabilizationWindowSeconds"], 0);
        assert_eq!(b["scaleUp"]["policies"][0], json!({"type": "Pods", "value": 4, "periodSeconds": 15}));
        assert!(causes(&o).is_empty());
    }

    #[test]
    fn replica_bounds_are_checked_with_kubernetes_messages() {
        let o = hpa(json!({"scaleTargetRef": target(), "minReplicas": 0, "maxReplicas": 0}));
        let c = causes(&o);
        assert!(
            c.contains(&("spec.minReplicas".into(), "Invalid value: 0: must be greater than or equal to 1".into())),
            "{c:?}"
        );
        assert!(c.contains(&("spec.maxReplicas".into(), "Invalid value: 0: must be greater than 0".into())));
        let o = hpa(json!({"scaleTargetRef": target(), "minReplicas": 4, "maxReplicas": 2}));
        assert_eq!(
            causes(&o),
            vec![(
                "spec.maxReplicas".to_string(),
                "Invalid value: 2: must be greater than or equal to `minReplicas`".to_string()
            )]
        );
    }

    #[test]
    fn a_scale_target_without_kind_or_name_is_required() {
        let o = hpa(json!({"scaleTargetRef": {"kind": "", "name": "a/b"}, "maxReplicas": 2}));
        let c = causes(&o);
        assert!(c.contains(&("spec.scaleTargetRef.kind".into(), "Required value".into())));
        assert!(c.contains(&("spec.scaleTargetRef.name".into(), "Invalid value: \"a/b\": may not contain '/'".into())));
    }

    #[test]
    fn metric_sources_must_match_their_type_and_carry_a_target() {
        let o = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 2, "metrics": [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}},
            {"type": "Pods", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 0}}},
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "-1"}}}
        ]}));
        let c = causes(&o);
        assert!(c.contains(&(
            "spec.metrics[0].resource.target.averageUtilization".into(),
            "Required value: must set either a target raw value or a target utilization".into()
        )));
        assert!(c.contains(&(
            "spec.metrics[1].resource.target.averageUtilization".into(),
            "Invalid value: 0: must be greater than 0".into()
        )));
        assert!(c.contains(&(
            "spec.metrics[1].pods".into(),
            "Required value: must populate information for the given metric source".into()
        )));
        assert!(c.contains(&(
            "spec.metrics[2].resource.target.averageValue".into(),
            "Invalid value: \"-1\": must be positive".into()
        )));
    }

    #[test]
    fn an_unknown_metric_type_is_not_supported() {
        let o = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 2, "metrics": [{"type": "Magic"}]}));
        let c = causes(&o);
        assert!(c.contains(&(
            "spec.metrics[0].type".into(),
            "Unsupported value: \"Magic\": supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"".into()
        )));
    }

    #[test]
    fn behavior_rules_are_bounded() {
        let o = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 2, "behavior": {"scaleUp": {
            "stabilizationWindowSeconds": 3601, "selectPolicy": "Sometimes",
            "policies": [{"type": "Nodes", "value": 0, "periodSeconds": 1801}]}}}));
        let c = causes(&o);
        let at = "spec.behavior.scaleUp";
        assert!(c.contains(&(
            format!("{at}.stabilizationWindowSeconds"),
            "Invalid value: 3601: must be less than or equal to 3600".into()
        )));
        assert!(c.contains(&(
            format!("{at}.selectPolicy"),
            "Unsupported value: \"Sometimes\": supported values: \"Disabled\", \"Max\", \"Min\"".into()
        )));
        assert!(c.contains(&(
            format!("{at}.policies[0].type"),
            "Unsupported value: \"Nodes\": supported values: \"Percent\", \"Pods\"".into()
        )));
        assert!(c.contains(&(format!("{at}.policies[0].value"), "Invalid value: 0: must be greater than zero".into())));
        assert!(c.contains(&(
            format!("{at}.policies[0].periodSeconds"),
            "Invalid value: 1801: must be less than or equal to 1800".into()
        )));
        let o = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 2, "behavior": {"scaleDown": {"policies": []}}}));
        assert!(causes(&o).contains(&(
            "spec.behavior.scaleDown.policies".into(),
            "Required value: must specify at least one Policy".into()
        )));
    }
}
