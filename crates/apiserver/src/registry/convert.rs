//! Conversion between the stored (internal) form and a resource's API version.
//!
//! Custom resources are stored in their CRD's storage version and served in every version with
//! only `apiVersion` rewritten, or converted by their CRD's webhook ([`crate::registry::crd`]).
//! Among built-in types two pairs need it: `events.k8s.io/v1` Events are stored as core `v1`
//! Events, as in Kubernetes, so `kubectl get events` sees what controllers record through
//! either API (field mapping per `k8s.io/kubernetes/pkg/apis/events/v1/conversion.go`);
//! HorizontalPodAutoscalers are stored as `autoscaling/v2` and served as `autoscaling/v1` too,
//! through `skiff_apimachinery::autoscaling`'s annotation-preserving conversion.

use serde_json::{Map, Value};
use skiff_apimachinery::ApiError;

use crate::resources::ResourceDef;

/// (events.k8s.io/v1 field, core/v1 field).
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename(obj: Value, from_is_left: bool, api_version: &str) -> Value {
    let Value::Object(map) = obj else { return obj };
    let mut out = Map::new();
    for (k, v) in map {
        let renamed = EVENT_FIELDS
            .iter()
            .find(|(l, r)| if from_is_left { l == &k } else { r == &k })
            .map(|(l, r)| if from_is_left { r.to_string() } else { l.to_string() });
        out.insert(renamed.unwrap_or(k), v);
    }
    out.insert("apiVersion".into(), Value::String(api_version.to_string()));
    Value::Object(out)
}

fn is_events_v1(def: &ResourceDef) -> bool {
    def.group == "events.k8s.io" && def.kind == "Event"
}

fn is_hpa_v1(def: &ResourceDef) -> bool {
    def.group == "autoscaling" && def.version == "v1" && def.kind == "HorizontalPodAutoscaler"
}

/// True when [`to_external`] returns stored objects unchanged (built-in resources other than
/// events.k8s.io/v1 Events and autoscaling/v1 HorizontalPodAutoscalers), so their stored JSON
/// can be sent as is.
pub fn is_identity(def: &ResourceDef) -> bool {
    def.custom.is_none() && !is_events_v1(def) && !is_hpa_v1(def)
}

/// Stored form → the resource's API version.
///
/// # Errors
/// A custom resource's conversion webhook failed (500, [`crate::registry::crd::conversion`]).
pub fn to_external(def: &ResourceDef, obj: Value) -> Result<Value, ApiError> {
    if def.custom.is_some() {
        return crate::registry::crd::to_version(def, obj);
    }
    if is_events_v1(def) {
        return Ok(rename(obj, false, "events.k8s.io/v1"));
    }
    if is_hpa_v1(def) {
        return Ok(skiff_apimachinery::autoscaling::hpa_v2_to_v1(&obj));
    }
    Ok(obj)
}

/// [`to_external`] of many objects, with one call for a CRD's conversion webhook (a list's
/// page is one ConversionReview, as apiextensions sends it).
///
/// # Errors
/// As [`to_external`].
pub fn to_external_all(def: &ResourceDef, objs: Vec<Value>) -> Result<Vec<Value>, ApiError> {
    if let Some(webhook) = def.custom.and_then(|c| c.webhook.as_ref()) {
        return webhook.convert(objs, &def.api_version());
    }
    objs.into_iter().map(|o| to_external(def, o)).collect()
}

/// The resource's API version → stored form.
///
/// # Errors
/// As [`to_external`].
pub fn to_internal(def: &ResourceDef, obj: Value) -> Result<Value, ApiError> {
    if def.custom.is_some() {
        return crate::registry::crd::to_storage(def, obj);
    }
    if is_events_v1(def) {
        return Ok(rename(obj, true, "v1"));
    }
    if is_hpa_v1(def) {
        return Ok(skiff_apimachinery::autoscaling::hpa_v1_to_v2(&obj));
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_v1_round_trip_through_the_core_form() {
        let def = crate::resources::builtin().into_iter().find(|d| d.group == "events.k8s.io").unwrap();
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reason": "Started", "eventTime": "2024-01-01T00:00:00.000000Z"});
        let core = to_internal(&def, ev.clone()).unwrap();
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(to_external(&def, core).unwrap(), ev);
    }
}
