//! The seam to `skiff-apimachinery` for selectors, field selectors, strategic merge patch,
//! validation, defaulting and table printing: the REST layer calls only these functions.

use serde_json::Value;
use skiff_apimachinery::status::Cause;
use skiff_apimachinery::{ApiError, FieldSelector, LabelSelector};

use crate::resources::ResourceDef;

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
            external = crate::registry::convert::to_external(def, obj.clone()).unwrap_or_else(|_| obj.clone());
            &external
        } else {
            obj
        };
        self.field.matches(|f| skiff_apimachinery::fields::field_value(&api_version, def.kind, obj, f))
    }
}

/// The field-selector fields a resource supports (`skiff_apimachinery::fields`).
pub fn supported_fields(def: &ResourceDef) -> &'static [&'static str] {
    skiff_apimachinery::fields::supported_fields(&def.api_version(), def.kind)
}

/// Applies a strategic merge patch (`application/strategic-merge-patch+json`) with the type's
/// patch strategies; 415 for types without them.
pub fn strategic_merge_patch(
    api_version: &str,
    kind: &str,
    original: &Value,
    patch: &Value,
) -> Result<Value, ApiError> {
    skiff_apimachinery::patch::strategic_merge_patch(api_version, kind, original, patch)
}

/// Validates an object (with `old` on update) → the causes of a 422.
pub fn validate(api_version: &str, kind: &str, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    skiff_apimachinery::validation::validate(api_version, kind, obj, old)
}

/// Applies Kubernetes' defaults for the kind in place.
pub fn apply_defaults(api_version: &str, kind: &str, obj: &mut Value) {
    skiff_apimachinery::defaults::apply_defaults(api_version, kind, obj)
}

/// Brings deprecated alias fields (`spec.serviceAccount`, `status.podIP`, …) in step with the
/// fields they stand for, after mutating admission changed the object (as Kubernetes' conversion
/// back to `v1` does).
pub fn mirror_deprecated_aliases(api_version: &str, kind: &str, obj: &mut Value) {
    skiff_apimachinery::defaults::mirror_deprecated_aliases(api_version, kind, obj)
}

/// Table column definitions (`metav1.TableColumnDefinition` JSON) for a kind.
pub fn column_definitions(api_version: &str, kind: &str) -> Vec<Value> {
    skiff_apimachinery::table::column_definitions(api_version, kind)
}

/// The cells of one table row for `obj`, matching [`column_definitions`].
pub fn row_cells(api_version: &str, kind: &str, obj: &Value, now: std::time::SystemTime) -> Vec<Value> {
    skiff_apimachinery::table::row_cells(api_version, kind, obj, now)
}

/// The row conditions (`Completed` for finished pods).
pub fn row_conditions(api_version: &str, kind: &str, obj: &Value) -> Vec<Value> {
    skiff_apimachinery::table::row_conditions(api_version, kind, obj)
}
