//! PATCH: JSON Patch (RFC 6902), JSON merge patch (RFC 7386), strategic merge patch, and
//! server-side apply (<https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/>).
//!
//! Every patch is applied to the current object inside the optimistic-concurrency loop of
//! [`crate::registry::store::Objects::update`], so concurrent patches retry instead of conflicting.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::endpoints::negotiation::{Output, render_object};
use crate::endpoints::request::Query;
use crate::endpoints::responsewriters::json_response;
use crate::registry::machinery;
use crate::registry::managedfields;
use crate::registry::store::WriteOptions;
use crate::resources::ResourceDef;
use crate::util::meta_str;

/// The patch formats skiff understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// From the request's Content-Type; 415 otherwise.
    pub fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        match ct {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(Self::Apply),
            other => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format ({other}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
            ))),
        }
    }
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

/// The live object's resourceVersion is not a precondition: as in Kubernetes, a patch that does
/// not set one is applied again to the newer object when another writer got in between (the
/// update loop retries unpinned writes), instead of failing with 409 Conflict. Removes the
/// version `patched` inherited from the object unless `patch` set it.
fn unpin_resource_version(pt: PatchType, patch: &Value, patched: &mut Value) {
    if !patch_sets_resource_version(pt, patch)
        && let Some(m) = patched.get_mut("metadata").and_then(Value::as_object_mut)
    {
        m.remove("resourceVersion");
    }
}

/// Whether `patch` itself sets `metadata.resourceVersion` (a JSON patch operation on that path,
/// or the field in a merge/strategic patch): only then does it pin the version it applies to.
fn patch_sets_resource_version(pt: PatchType, patch: &Value) -> bool {
    match pt {
        PatchType::Json => patch.as_array().is_some_and(|ops| {
            ops.iter().any(|op| {
                op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion")
                    && op.get("op").and_then(Value::as_str) != Some("test")
            })
        }),
        _ => patch.get("metadata").and_then(|m| m.get("resourceVersion")).is_some_and(|v| !v.is_null()),
    }
}

/// Applies a decoded patch document of type `pt` to `original`.
pub fn apply(pt: PatchType, api_version: &str, kind: &str, original: &Value, patch: &Value) -> Result<Value, ApiError> {
    match pt {
        PatchType::Json => {
            let p: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("error decoding JSON patch: {e}")))?;
            let mut doc = original.clone();
            json_patch::patch(&mut doc, &p).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?;
            Ok(doc)
        }
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            let mut doc = original.clone();
            json_patch::merge(&mut doc, patch);
            Ok(doc)
        }
        PatchType::Strategic | PatchType::Apply => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("a strategic merge patch must be a JSON object"));
            }
            machinery::strategic_merge_patch(api_version, kind, original, patch)
        }
    }
}

/// Serves PATCH on a resource or subresource.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    sub: &str,
    content_type: &str,
    body: &[u8],
    opts: &WriteOptions,
    q: &Query,
    out: Output,
) -> Result<Response, ApiError> {
    let pt = PatchType::from_content_type(content_type)?;
    let patch: Value = if pt == PatchType::Apply && !body.trim_ascii_start().starts_with(b"{") {
        let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("apply patch is not UTF-8"))?;
        serde_saphyr::from_str(text).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        parse_json(body)?
    };
    if pt == PatchType::Apply {
        let manager = q.get("fieldManager").cloned().unwrap_or_default();
        if manager.is_empty() {
            return Err(ApiError::bad_request(
                "PATCH, application/apply-patch+yaml: fieldManager is required for apply requests",
            ));
        }
        if !sub.is_empty() && sub != "status" {
            return Err(ApiError::unsupported_media_type(format!("apply is not supported on {}/{sub}", def.resource)));
        }
        let force = q.get("force").is_some_and(|f| f == "true");
        return apply_patch(state, def, ns, name, sub, &patch, &manager, force, opts, out).await;
    }
    let api_version = def.api_version();
    let raw = if pt == PatchType::Json { None } else { Some(body) };
    match sub {
        "scale" => {
            let scale = crate::registry::subresources::update_scale(state, def, ns, name, opts, |current| {
                let mut new = apply(pt, "autoscaling/v1", "Scale", current, &patch)?;
                unpin_resource_version(pt, &patch, &mut new);
                Ok(new)
            })
            .await?;
            Ok(json_response(StatusCode::OK, &scale))
        }
        "" | "status" | "ephemeralcontainers" => {
            let subr = if sub.is_empty() { None } else { Some(sub) };
            let w = state
                .objects
                .update(def, ns, name, subr, opts, raw, |old| {
                    let old = old.ok_or_else(|| ApiError::not_found(def.group, def.resource, name))?;
                    let mut new = apply(pt, &api_version, def.kind, old, &patch)?;
                    unpin_resource_version(pt, &patch, &mut new);
                    Ok(new)
                })
                .await?;
            let mut resp = json_response(StatusCode::OK, &render_object(def, w.object, out));
            for w in &w.warnings {
                if let Ok(v) = axum::http::HeaderValue::from_str(&format!("299 - \"{}\"", w.replace('"', "\\\""))) {
                    resp.headers_mut().append("Warning", v);
                }
            }
            Ok(resp)
        }
        _ => Err(ApiError::method_not_allowed(format!("PATCH is not supported on {}/{sub}", def.resource))),
    }
}

/// Server-side apply (`application/apply-patch+yaml`): creates the object from the applied
/// configuration when it does not exist, else merges it into the live object with field
/// ownership, conflicts and removal of fields no longer applied ([`crate::registry::managedfields`]).
#[allow(clippy::too_many_arguments)]
async fn apply_patch(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    sub: &str,
    patch: &Value,
    manager: &str,
    force: bool,
    opts: &WriteOptions,
    out: Output,
) -> Result<Response, ApiError> {
    if !patch.is_object() {
        return Err(ApiError::bad_request("an apply patch must be an object"));
    }
    let body_name = meta_str(patch, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let body_ns = meta_str(patch, "namespace");
    if def.namespaced && !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    for field in ["apiVersion", "kind"] {
        if patch.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(format!(
                "invalid object type: {field} must be set in an apply configuration"
            )));
        }
    }
    let mut applied = patch.clone();
    if let Some(m) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    let subr = if sub.is_empty() { None } else { Some(sub) };
    let req = managedfields::ApplyRequest { manager, def, subresource: subr, force };
    // The apply computes managedFields itself: the write must not record an Update too.
    let write_opts = WriteOptions { field_manager: None, ..opts.clone() };
    let w = match state.objects.get_internal(def, ns, name).await? {
        None if sub.is_empty() => {
            let mut skeleton =
                json!({"apiVersion": applied["apiVersion"], "kind": applied["kind"], "metadata": {"name": name}});
            if !ns.is_empty() {
                skeleton["metadata"]["namespace"] = json!(ns);
            }
            let obj = managedfields::apply(&skeleton, &applied, req)?;
            state.objects.create(def, ns, obj, None, &write_opts).await?
        }
        None => return Err(ApiError::not_found(def.group, def.resource, name)),
        Some(_) => {
            state
                .objects
                .update(def, ns, name, subr, &write_opts, None, |old| {
                    let old = old.ok_or_else(|| ApiError::not_found(def.group, def.resource, name))?;
                    managedfields::apply(old, &applied, req)
                })
                .await?
        }
    };
    let code = if w.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok(json_response(code, &render_object(def, w.object, out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_patch_that_sets_resource_version_pins_it() {
        let rv = json!({"metadata": {"resourceVersion": "7"}});
        assert!(patch_sets_resource_version(PatchType::Merge, &rv));
        assert!(patch_sets_resource_version(PatchType::Strategic, &rv));
        assert!(!patch_sets_resource_version(PatchType::Strategic, &json!({"spec": {"replicas": 2}})));
        assert!(!patch_sets_resource_version(PatchType::Merge, &json!({"metadata": {"resourceVersion": null}})));
        let set = json!([{"op": "replace", "path": "/metadata/resourceVersion", "value": "7"}]);
        assert!(patch_sets_resource_version(PatchType::Json, &set));
        let test = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "7"}]);
        assert!(!patch_sets_resource_version(PatchType::Json, &test));
    }

    #[test]
    fn merge_patch_removes_null_fields_and_merges_maps() {
        let orig = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let patch = json!({"metadata": {"labels": {"a": null, "c": "3"}}});
        let out = apply(PatchType::Merge, "v1", "ConfigMap", &orig, &patch).unwrap();
        assert_eq!(out, json!({"metadata": {"labels": {"b": "2", "c": "3"}}}));
    }

    #[test]
    fn json_patch_test_failure_is_422() {
        let orig = json!({"spec": {"replicas": 1}});
        let patch = json!([{"op": "test", "path": "/spec/replicas", "value": 2}]);
        assert_eq!(apply(PatchType::Json, "apps/v1", "Deployment", &orig, &patch).unwrap_err().code, 422);
    }

    #[test]
    fn unknown_patch_content_type_is_415() {
        assert_eq!(PatchType::from_content_type("text/plain").unwrap_err().code, 415);
    }
}
