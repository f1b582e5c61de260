//! HorizontalPodAutoscaler conversion between `autoscaling/v1` and `autoscaling/v2`, the form
//! skiff stores (as Kubernetes 1.33 does).
//!
//! `autoscaling/v1` has room for one metric only (`targetCPUUtilizationPercentage`), so, as
//! `pkg/apis/autoscaling/v1/conversion.go` does, every other part of a v2 object travels through
//! a v1 read and write in annotations:
//! - [`METRIC_SPECS_ANNOTATION`]: the metrics other than a CPU utilization target, as a JSON
//!   list of v1 `MetricSpec`s (the `v2beta1` shape: `targetAverageUtilization`, `metricName`…);
//! - [`METRIC_STATUSES_ANNOTATION`]: every current metric, as v1 `MetricStatus`es;
//! - [`CONDITIONS_ANNOTATION`]: the status conditions;
//! - [`BEHAVIOR_SPECS_ANNOTATION`]: `spec.behavior`, in its v2 shape.
//!
//! A v1 write consumes those annotations (they never reach the stored object), and a v1 object
//! without any metric gets the CPU utilization target of 80 % v1 always implied
//! ([`DEFAULT_CPU_UTILIZATION`]). An annotation that does not parse is left in place rather than
//! failing the request. Fields v1 does not know (unknown to both versions) pass through, so
//! strict field validation still reports them.

use serde_json::{Map, Value, json};

/// `autoscaling.MetricSpecsAnnotation`.
pub const METRIC_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// `autoscaling.MetricStatusesAnnotation`.
pub const METRIC_STATUSES_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// `autoscaling.HorizontalPodAutoscalerConditionsAnnotation`.
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// `autoscaling.BehaviorSpecsAnnotation`.
pub const BEHAVIOR_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";
/// `autoscaling.DefaultCPUUtilization`: the target of an HPA that names no metric, in percent.
pub const DEFAULT_CPU_UTILIZATION: i64 = 80;

fn obj_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    v.as_object_mut().expect("just made an object")
}

/// Copies `keys` of `from` that are present (and not null) into `to`.
fn copy(from: &Value, to: &mut Map<String, Value>, keys: &[&str]) {
    for k in keys {
        if let Some(v) = from.get(*k).filter(|v| !v.is_null()) {
            to.insert((*k).to_string(), v.clone());
        }
    }
}

/// Whether a v2 metric is the one v1 carries in `targetCPUUtilizationPercentage`.
fn is_cpu_utilization(m: &Value) -> bool {
    m.get("type").and_then(Value::as_str) == Some("Resource")
        && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        && m.pointer("/resource/target/averageUtilization").is_some_and(|v| !v.is_null())
}

// -------------------------------------------------------------------------------------------
// v2 → v1

fn metric_spec_to_v1(m: &Value) -> Value {
    let mut out = Map::new();
    copy(m, &mut out, &["type"]);
    if let Some(r) = m.get("resource").filter(|v| v.is_object()) {
        let mut o = Map::new();
        copy(r, &mut o, &["name"]);
        if let Some(v) = r.pointer("/target/averageUtilization") {
            o.insert("targetAverageUtilization".into(), v.clone());
        }
        if let Some(v) = r.pointer("/target/averageValue") {
            o.insert("targetAverageValue".into(), v.clone());
        }
        out.insert("resource".into(), Value::Object(o));
    }
    if let Some(r) = m.get("containerResource").filter(|v| v.is_object()) {
        let mut o = Map::new();
        copy(r, &mut o, &["name"]);
        if let Some(v) = r.pointer("/target/averageUtilization") {
            o.insert("targetAverageUtilization".into(), v.clone());
        }
        if let Some(v) = r.pointer("/target/averageValue") {
            o.insert("targetAverageValue".into(), v.clone());
        }
        copy(r, &mut o, &["container"]);
        out.insert("containerResource".into(), Value::Object(o));
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("metricName".into(), p.pointer("/metric/name").cloned().unwrap_or(json!("")));
        o.insert("targetAverageValue".into(), p.pointer("/target/averageValue").cloned().unwrap_or(json!("0")));
        if let Some(sel) = p.pointer("/metric/selector") {
            o.insert("selector".into(), sel.clone());
        }
        out.insert("pods".into(), Value::Object(o));
    }
    if let Some(p) = m.get("object").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("target".into(), p.get("describedObject").cloned().unwrap_or(json!({})));
        o.insert("metricName".into(), p.pointer("/metric/name").cloned().unwrap_or(json!("")));
        o.insert("targetValue".into(), p.pointer("/target/value").cloned().unwrap_or(json!("0")));
        if let Some(sel) = p.pointer("/metric/selector") {
            o.insert("selector".into(), sel.clone());
        }
        if let Some(v) = p.pointer("/target/averageValue") {
            o.insert("averageValue".into(), v.clone());
        }
        out.insert("object".into(), Value::Object(o));
    }
    if let Some(p) = m.get("external").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("metricName".into(), p.pointer("/metric/name").cloned().unwrap_or(json!("")));
        if let Some(sel) = p.pointer("/metric/selector") {
            o.insert("metricSelector".into(), sel.clone());
        }
        if let Some(v) = p.pointer("/target/value") {
            o.insert("targetValue".into(), v.clone());
        }
        if let Some(v) = p.pointer("/target/averageValue") {
            o.insert("targetAverageValue".into(), v.clone());
        }
        out.insert("external".into(), Value::Object(o));
    }
    Value::Object(out)
}

fn metric_status_to_v1(m: &Value) -> Value {
    let mut out = Map::new();
    copy(m, &mut out, &["type"]);
    for key in ["resource", "containerResource"] {
        if let Some(r) = m.get(key).filter(|v| v.is_object()) {
            let mut o = Map::new();
            copy(r, &mut o, &["name"]);
            if let Some(v) = r.pointer("/current/averageUtilization") {
                o.insert("currentAverageUtilization".into(), v.clone());
            }
            o.insert("currentAverageValue".into(), r.pointer("/current/averageValue").cloned().unwrap_or(json!("0")));
            copy(r, &mut o, &["container"]);
            out.insert(key.into(), Value::Object(o));
        }
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("metricName".into(), p.pointer("/metric/name").cloned().unwrap_or(json!("")));
        o.insert("currentAverageValue".into(), p.pointer("/current/averageValue").cloned().unwrap_or(json!("0")));
        if let Some(sel) = p.pointer("/metric/selector") {
            o.insert("selector".into(), sel.clone());
        }
        out.insert("pods".into(), Value::Object(o));
    }
    if let Some(p) = m.get("object").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("target".into(), p.get("describedObject").cloned().unwrap_or(json!({})));
        o.insert("metricName".into(), p.pointer("/metric/name").cloned().unwrap_or(json!("")));
        o.insert("currentValue".into(), p.pointer("/current/value").cloned().unwrap_or(json!("0")));
        if let Some(sel) = p.pointer("/metric/selector") {
            o.insert("selector".into(), sel.clone());
        }
        if let Some(v) = p.pointer("/current/averageValue") {
            o.insert("averageValue".into(), v.clone());
        }
        out.insert("object".into(), Value::Object(o));
    }
    if let Some(p) = m.get("external").filter(|v| v.is_object()) {
        let mut o = Map::new();
        o.insert("metricName".into(), p.pointer("/metric/name").cloned().unwrap_or(json!("")));
        if let Some(sel) = p.pointer("/metric/selector") {
            o.insert("metricSelector".into(), sel.clone());
        }
        o.insert("currentValue".into(), p.pointer("/current/value").cloned().unwrap_or(json!("0")));
        if let Some(v) = p.pointer("/current/averageValue") {
            o.insert("currentAverageValue".into(), v.clone());
        }
        out.insert("external".into(), Value::Object(o));
    }
    Value::Object(out)
}

/// The `autoscaling/v2` HorizontalPodAutoscaler `obj` as `autoscaling/v1`
/// (`Convert_autoscaling_HorizontalPodAutoscaler_To_v1_HorizontalPodAutoscaler`).
pub fn hpa_v2_to_v1(obj: &Value) -> Value {
    let Some(src) = obj.as_object() else { return obj.clone() };
    let mut out = Map::new();
    for (k, v) in src {
        if k != "spec" && k != "status" {
            out.insert(k.clone(), v.clone());
        }
    }
    out.insert("apiVersion".into(), json!("autoscaling/v1"));
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let metrics = spec.get("metrics").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut annotations: Vec<(&str, String)> = Vec::new();
    if spec.is_object() {
        let mut s = Map::new();
        for (k, v) in spec.as_object().into_iter().flatten() {
            if !matches!(k.as_str(), "metrics" | "behavior") {
                s.insert(k.clone(), v.clone());
            }
        }
        if let Some(cpu) = metrics.iter().find(|m| {
            m.get("type").and_then(Value::as_str) == Some("Resource")
                && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        }) && let Some(u) = cpu.pointer("/resource/target/averageUtilization").filter(|v| !v.is_null())
        {
            s.insert("targetCPUUtilizationPercentage".into(), u.clone());
        }
        out.insert("spec".into(), Value::Object(s));
        let other: Vec<Value> = metrics.iter().filter(|m| !is_cpu_utilization(m)).map(metric_spec_to_v1).collect();
        if !other.is_empty() {
            annotations.push((METRIC_SPECS_ANNOTATION, Value::Array(other).to_string()));
        }
        if let Some(b) = spec.get("behavior").filter(|b| !b.is_null()) {
            annotations.push((BEHAVIOR_SPECS_ANNOTATION, b.to_string()));
        }
    }
    if let Some(status) = obj.get("status").filter(|s| s.is_object()) {
        let mut s = Map::new();
        for (k, v) in status.as_object().into_iter().flatten() {
            if !matches!(k.as_str(), "currentMetrics" | "conditions") {
                s.insert(k.clone(), v.clone());
            }
        }
        let current = status.get("currentMetrics").and_then(Value::as_array).cloned().unwrap_or_default();
        for m in &current {
            if m.get("type").and_then(Value::as_str) == Some("Resource")
                && m.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
                && let Some(u) = m.pointer("/resource/current/averageUtilization").filter(|v| !v.is_null())
            {
                s.insert("currentCPUUtilizationPercentage".into(), u.clone());
            }
        }
        // v1 requires these two (non-pointer ints).
        s.entry("currentReplicas").or_insert(json!(0));
        s.entry("desiredReplicas").or_insert(json!(0));
        out.insert("status".into(), Value::Object(s));
        if !current.is_empty() {
            let v1: Vec<Value> = current.iter().map(metric_status_to_v1).collect();
            annotations.push((METRIC_STATUSES_ANNOTATION, Value::Array(v1).to_string()));
        }
        if let Some(c) = status.get("conditions").and_then(Value::as_array).filter(|c| !c.is_empty()) {
            annotations.push((CONDITIONS_ANNOTATION, Value::Array(c.clone()).to_string()));
        }
    }
    let mut out = Value::Object(out);
    if !annotations.is_empty() {
        let ann = obj_mut(
            obj_mut(obj_mut(&mut out).entry("metadata").or_insert(json!({}))).entry("annotations").or_insert(json!({})),
        );
        for (k, v) in annotations {
            ann.insert(k.to_string(), Value::String(v));
        }
    }
    out
}

// -------------------------------------------------------------------------------------------
// v1 → v2

fn metric_spec_from_v1(m: &Value) -> Value {
    let mut out = Map::new();
    copy(m, &mut out, &["type"]);
    for key in ["resource", "containerResource"] {
        if let Some(r) = m.get(key).filter(|v| v.is_object()) {
            let mut o = Map::new();
            copy(r, &mut o, &["name"]);
            let utilization = r.get("targetAverageUtilization").filter(|v| !v.is_null());
            let mut target = Map::new();
            target.insert("type".into(), json!(if utilization.is_some() { "Utilization" } else { "AverageValue" }));
            if let Some(v) = r.get("targetAverageValue").filter(|v| !v.is_null()) {
                target.insert("averageValue".into(), v.clone());
            }
            if let Some(u) = utilization {
                target.insert("averageUtilization".into(), u.clone());
            }
            o.insert("target".into(), Value::Object(target));
            copy(r, &mut o, &["container"]);
            out.insert(key.into(), Value::Object(o));
        }
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let mut metric = Map::new();
        metric.insert("name".into(), p.get("metricName").cloned().unwrap_or(json!("")));
        copy(p, &mut metric, &["selector"]);
        out.insert(
            "pods".into(),
            json!({"metric": metric, "target": {"type": "AverageValue",
                "averageValue": p.get("targetAverageValue").cloned().unwrap_or(json!("0"))}}),
        );
    }
    if let Some(p) = m.get("object").filter(|v| v.is_object()) {
        let mut metric = Map::new();
        metric.insert("name".into(), p.get("metricName").cloned().unwrap_or(json!("")));
        copy(p, &mut metric, &["selector"]);
        let average = p.get("averageValue").filter(|v| !v.is_null());
        let mut target = Map::new();
        target.insert("type".into(), json!(if average.is_none() { "Value" } else { "AverageValue" }));
        target.insert("value".into(), p.get("targetValue").cloned().unwrap_or(json!("0")));
        if let Some(a) = average {
            target.insert("averageValue".into(), a.clone());
        }
        out.insert(
            "object".into(),
            json!({"describedObject": p.get("target").cloned().unwrap_or(json!({})), "metric": metric, "target": target}),
        );
    }
    if let Some(p) = m.get("external").filter(|v| v.is_object()) {
        let mut metric = Map::new();
        metric.insert("name".into(), p.get("metricName").cloned().unwrap_or(json!("")));
        if let Some(sel) = p.get("metricSelector").filter(|v| !v.is_null()) {
            metric.insert("selector".into(), sel.clone());
        }
        let value = p.get("targetValue").filter(|v| !v.is_null());
        let mut target = Map::new();
        target.insert("type".into(), json!(if value.is_none() { "AverageValue" } else { "Value" }));
        if let Some(v) = value {
            target.insert("value".into(), v.clone());
        }
        if let Some(v) = p.get("targetAverageValue").filter(|v| !v.is_null()) {
            target.insert("averageValue".into(), v.clone());
        }
        out.insert("external".into(), json!({"metric": metric, "target": target}));
    }
    Value::Object(out)
}

fn metric_status_from_v1(m: &Value) -> Value {
    let mut out = Map::new();
    copy(m, &mut out, &["type"]);
    for key in ["resource", "containerResource"] {
        if let Some(r) = m.get(key).filter(|v| v.is_object()) {
            let mut o = Map::new();
            copy(r, &mut o, &["name"]);
            let mut current = Map::new();
            current.insert("averageValue".into(), r.get("currentAverageValue").cloned().unwrap_or(json!("0")));
            if let Some(u) = r.get("currentAverageUtilization").filter(|v| !v.is_null()) {
                current.insert("averageUtilization".into(), u.clone());
            }
            o.insert("current".into(), Value::Object(current));
            copy(r, &mut o, &["container"]);
            out.insert(key.into(), Value::Object(o));
        }
    }
    if let Some(p) = m.get("pods").filter(|v| v.is_object()) {
        let mut metric = Map::new();
        metric.insert("name".into(), p.get("metricName").cloned().unwrap_or(json!("")));
        copy(p, &mut metric, &["selector"]);
        out.insert(
            "pods".into(),
            json!({"metric": metric, "current": {"averageValue": p.get("currentAverageValue").cloned().unwrap_or(json!("0"))}}),
        );
    }
    if let Some(p) = m.get("object").filter(|v| v.is_object()) {
        let mut metric = Map::new();
        metric.insert("name".into(), p.get("metricName").cloned().unwrap_or(json!("")));
        copy(p, &mut metric, &["selector"]);
        let mut current = Map::new();
        current.insert("value".into(), p.get("currentValue").cloned().unwrap_or(json!("0")));
        if let Some(a) = p.get("averageValue").filter(|v| !v.is_null()) {
            current.insert("averageValue".into(), a.clone());
        }
        out.insert(
            "object".into(),
            json!({"describedObject": p.get("target").cloned().unwrap_or(json!({})), "metric": metric, "current": current}),
        );
    }
    if let Some(p) = m.get("external").filter(|v| v.is_object()) {
        let mut metric = Map::new();
        metric.insert("name".into(), p.get("metricName").cloned().unwrap_or(json!("")));
        if let Some(sel) = p.get("metricSelector").filter(|v| !v.is_null()) {
            metric.insert("selector".into(), sel.clone());
        }
        let mut current = Map::new();
        current.insert("value".into(), p.get("currentValue").cloned().unwrap_or(json!("0")));
        if let Some(v) = p.get("currentAverageValue").filter(|v| !v.is_null()) {
            current.insert("averageValue".into(), v.clone());
        }
        out.insert("external".into(), json!({"metric": metric, "current": current}));
    }
    Value::Object(out)
}

/// Removes annotation `key` from `ann` and parses it as a JSON list, unless it does not parse
/// (then it stays).
fn take_list(ann: &mut Map<String, Value>, key: &str) -> Option<Vec<Value>> {
    let parsed = ann.get(key).and_then(Value::as_str).and_then(|s| serde_json::from_str::<Vec<Value>>(s).ok())?;
    ann.remove(key);
    Some(parsed)
}

fn cpu_utilization(u: &Value) -> Value {
    json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": u}}})
}

/// The `autoscaling/v1` HorizontalPodAutoscaler `obj` as `autoscaling/v2`
/// (`Convert_v1_HorizontalPodAutoscaler_To_autoscaling_HorizontalPodAutoscaler`).
pub fn hpa_v1_to_v2(obj: &Value) -> Value {
    let Some(src) = obj.as_object() else { return obj.clone() };
    let mut out = Map::new();
    for (k, v) in src {
        if k != "spec" && k != "status" {
            out.insert(k.clone(), v.clone());
        }
    }
    out.insert("apiVersion".into(), json!("autoscaling/v2"));
    let mut ann = obj.pointer("/metadata/annotations").and_then(Value::as_object).cloned().unwrap_or_default();
    let had_annotations = obj.pointer("/metadata/annotations").is_some();

    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let mut s = Map::new();
    for (k, v) in spec.as_object().into_iter().flatten() {
        if k != "targetCPUUtilizationPercentage" {
            s.insert(k.clone(), v.clone());
        }
    }
    let mut metrics: Vec<Value> =
        take_list(&mut ann, METRIC_SPECS_ANNOTATION).unwrap_or_default().iter().map(metric_spec_from_v1).collect();
    if let Some(u) = spec.get("targetCPUUtilizationPercentage").filter(|v| !v.is_null()) {
        metrics.push(cpu_utilization(u));
    }
    if metrics.is_empty() {
        // v1 always implied a CPU target; conversion makes it explicit.
        metrics.push(cpu_utilization(&json!(DEFAULT_CPU_UTILIZATION)));
    }
    s.insert("metrics".into(), Value::Array(metrics));
    if let Some(b) =
        ann.get(BEHAVIOR_SPECS_ANNOTATION).and_then(Value::as_str).and_then(|b| serde_json::from_str::<Value>(b).ok())
    {
        ann.remove(BEHAVIOR_SPECS_ANNOTATION);
        if b.is_object() {
            s.insert("behavior".into(), b);
        }
    }
    out.insert("spec".into(), Value::Object(s));

    let status = obj.get("status").cloned().unwrap_or(Value::Null);
    let current = take_list(&mut ann, METRIC_STATUSES_ANNOTATION);
    let conditions = take_list(&mut ann, CONDITIONS_ANNOTATION);
    if status.is_object() || current.is_some() || conditions.is_some() {
        let mut st = Map::new();
        for (k, v) in status.as_object().into_iter().flatten() {
            if k != "currentCPUUtilizationPercentage" {
                st.insert(k.clone(), v.clone());
            }
        }
        match current {
            Some(list) => {
                st.insert("currentMetrics".into(), Value::Array(list.iter().map(metric_status_from_v1).collect()));
            }
            None => {
                if let Some(u) = status.get("currentCPUUtilizationPercentage").filter(|v| !v.is_null()) {
                    st.insert(
                        "currentMetrics".into(),
                        json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": u}}}]),
                    );
                }
            }
        }
        if let Some(c) = conditions {
            st.insert("conditions".into(), Value::Array(c));
        }
        out.insert("status".into(), Value::Object(st));
    }
    let mut out = Value::Object(out);
    if had_annotations && let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        if ann.is_empty() {
            meta.remove("annotations");
        } else {
            meta.insert("annotations".into(), Value::Object(ann));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> Value {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "ns", "annotations": {"team": "a"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 30, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}]}}
            },
            "status": {
                "currentReplicas": 2, "desiredReplicas": 3,
                "currentMetrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 70, "averageValue": "140m"}}}
                ],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "SucceededRescale", "message": "m",
                    "lastTransitionTime": "2024-01-01T00:00:00Z"}]
            }
        })
    }

    #[test]
    fn a_v2_object_reads_as_v1_with_the_cpu_target_and_the_rest_in_annotations() {
        let v1 = hpa_v2_to_v1(&v2());
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
        assert!(v1["spec"].get("metrics").is_none());
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 70);
        let ann = &v1["metadata"]["annotations"];
        assert_eq!(ann["team"], "a");
        let other: Value = serde_json::from_str(ann[METRIC_SPECS_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(other.as_array().unwrap().len(), 2, "memory and pods, not the cpu utilization");
        assert_eq!(other[0]["resource"]["targetAverageValue"], "100Mi");
        assert_eq!(other[1]["pods"]["metricName"], "qps");
        let current: Value = serde_json::from_str(ann[METRIC_STATUSES_ANNOTATION].as_str().unwrap()).unwrap();
        assert_eq!(current[0]["resource"]["currentAverageValue"], "140m");
        assert!(ann[CONDITIONS_ANNOTATION].as_str().unwrap().contains("SucceededRescale"));
        assert!(ann[BEHAVIOR_SPECS_ANNOTATION].as_str().unwrap().contains("stabilizationWindowSeconds"));
    }

    #[test]
    fn a_v2_object_round_trips_through_v1_unchanged() {
        let original = v2();
        let back = hpa_v1_to_v2(&hpa_v2_to_v1(&original));
        assert_eq!(back["metadata"], original["metadata"]);
        assert_eq!(back["spec"]["behavior"], original["spec"]["behavior"]);
        assert_eq!(back["status"]["conditions"], original["status"]["conditions"]);
        assert_eq!(back["status"]["currentMetrics"], original["status"]["currentMetrics"]);
        // The CPU target comes back after the other metrics, as Kubernetes' conversion puts it.
        let metrics = back["spec"]["metrics"].as_array().unwrap();
        assert_eq!(metrics.len(), 3);
        assert_eq!(metrics[0], original["spec"]["metrics"][0]);
        assert_eq!(metrics[1], original["spec"]["metrics"][2]);
        assert_eq!(metrics[2], original["spec"]["metrics"][1]);
    }

    #[test]
    fn a_v1_object_without_a_target_gets_the_implied_80_percent_cpu_target() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 3}});
        let v2 = hpa_v1_to_v2(&v1);
        assert_eq!(v2["apiVersion"], "autoscaling/v2");
        assert_eq!(v2["spec"]["metrics"], json!([cpu_utilization(&json!(80))]));
        assert!(v2.get("status").is_none());
    }

    #[test]
    fn an_unparsable_annotation_stays_on_the_object() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "x", "annotations": {METRIC_SPECS_ANNOTATION: "not json"}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 3, "targetCPUUtilizationPercentage": 40}});
        let v2 = hpa_v1_to_v2(&v1);
        assert_eq!(v2["metadata"]["annotations"][METRIC_SPECS_ANNOTATION], "not json");
        assert_eq!(v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 40);
    }
}
