//! PATCH: JSON Patch (RFC 6902), JSON merge patch (RFC 7386), strategic merge patch, and a
//! subset of server-side apply (<https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/>).
//!
//! Every patch is applied to the current object inside the optimistic-concurrency loop of
//! [`crate::objects::Objects::update`], so concurrent patches retry instead of conflicting.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::machinery;
use crate::objects::WriteOptions;
use crate::registry::ResourceDef;
use crate::rest::{Output, Query, json_response, render_object};
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
        return apply_patch(state, def, ns, name, sub, &patch, &manager, opts, out).await;
    }
    let api_version = def.api_version();
    let raw = if pt == PatchType::Json { None } else { Some(body) };
    match sub {
        "scale" => {
            let scale = crate::subresources::update_scale(state, def, ns, name, opts, |current| {
                apply(pt, "autoscaling/v1", "Scale", current, &patch)
            })
            .await?;
            Ok(json_response(StatusCode::OK, &scale))
        }
        "" | "status" => {
            let subr = if sub.is_empty() { None } else { Some(sub) };
            let w = state
                .objects
                .update(def, ns, name, subr, opts, raw, |old| {
                    let old = old.ok_or_else(|| ApiError::not_found(def.group, def.resource, name))?;
                    apply(pt, &api_version, def.kind, old, &patch)
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

/// A subset of server-side apply: the applied configuration is created when the object does
/// not exist, else merged into it with strategic-merge semantics; the field manager gets a
/// `managedFields` entry (operation Apply). Conflicts between managers are not detected and
/// fields a manager stops applying are not removed.
#[allow(clippy::too_many_arguments)]
async fn apply_patch(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    sub: &str,
    patch: &Value,
    manager: &str,
    opts: &WriteOptions,
    out: Output,
) -> Result<Response, ApiError> {
    let api_version = def.api_version();
    let body_name = meta_str(patch, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let entry = |obj: &Value| {
        let mut mf: Vec<Value> = obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
        let subresource = if sub.is_empty() { None } else { Some(sub) };
        mf.retain(|e| {
            !(e["manager"] == manager && e["operation"] == "Apply" && e["subresource"].as_str() == subresource)
        });
        let mut e = json!({
            "manager": manager, "operation": "Apply", "apiVersion": api_version, "time": crate::util::now(),
            "fieldsType": "FieldsV1", "fieldsV1": fields_v1(patch),
        });
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
        }
        mf.push(e);
        Value::Array(mf)
    };
    let subr = if sub.is_empty() { None } else { Some(sub) };
    let mut created = false;
    let w = match state.objects.get_internal(def, ns, name).await? {
        None if sub.is_empty() => {
            let mut obj = patch.clone();
            let mf = entry(&obj);
            crate::util::set_in(&mut obj, &["metadata", "managedFields"], mf);
            crate::util::set_in(&mut obj, &["metadata", "name"], json!(name));
            created = true;
            state.objects.create(def, ns, obj, None, opts).await?
        }
        None => return Err(ApiError::not_found(def.group, def.resource, name)),
        Some(_) => {
            state
                .objects
                .update(def, ns, name, subr, opts, None, |old| {
                    let old = old.ok_or_else(|| ApiError::not_found(def.group, def.resource, name))?;
                    let mut p = patch.clone();
                    if let Some(m) = p.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("resourceVersion");
                    }
                    let mut new = machinery::strategic_merge_patch(&api_version, def.kind, old, &p)?;
                    // Fields this manager applied before but no longer applies are removed.
                    let previous = old["metadata"]["managedFields"]
                        .as_array()
                        .and_then(|mf| {
                            mf.iter().find(|e| {
                                e["manager"] == manager
                                    && e["operation"] == "Apply"
                                    && e["subresource"].as_str() == subr
                            })
                        })
                        .map(|e| e["fieldsV1"].clone());
                    if let Some(previous) = previous {
                        let now: std::collections::HashSet<Vec<String>> =
                            leaf_paths(&fields_v1(patch)).into_iter().collect();
                        for gone in leaf_paths(&previous).into_iter().filter(|p| !now.contains(p)) {
                            remove_path(&mut new, &gone);
                        }
                    }
                    let mf = entry(old);
                    crate::util::set_in(&mut new, &["metadata", "managedFields"], mf);
                    Ok(new)
                })
                .await?
        }
    };
    let code = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok(json_response(code, &render_object(def, w.object, out)))
}

/// The leaf paths of a `FieldsV1` set (`{"f:spec":{"f:replicas":{}}}` → `[["spec","replicas"]]`).
fn leaf_paths(fields: &Value) -> Vec<Vec<String>> {
    fn walk(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        let Some(m) = v.as_object() else { return };
        let mut leaf = true;
        for (k, child) in m {
            let Some(name) = k.strip_prefix("f:") else { continue };
            leaf = false;
            prefix.push(name.to_string());
            walk(child, prefix, out);
            prefix.pop();
        }
        if leaf && !prefix.is_empty() {
            out.push(prefix.clone());
        }
    }
    let mut out = Vec::new();
    walk(fields, &mut Vec::new(), &mut out);
    out
}

/// Removes the field at `path` from `obj`, if present.
fn remove_path(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut cur = obj;
    for p in parents {
        match cur.get_mut(p.as_str()) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last.as_str());
    }
}

/// The `FieldsV1` set of the fields an applied configuration names (`f:<name>` keys).
fn fields_v1(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, child) in m {
                if k == "apiVersion" || k == "kind" {
                    continue;
                }
                if k == "metadata" {
                    let mut meta = serde_json::Map::new();
                    for mk in ["labels", "annotations"] {
                        if let Some(x) = child.get(mk) {
                            meta.insert(format!("f:{mk}"), fields_v1(x));
                        }
                    }
                    if !meta.is_empty() {
                        out.insert("f:metadata".into(), Value::Object(meta));
                    }
                    continue;
                }
                out.insert(format!("f:{k}"), fields_v1(child));
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn fields_a_manager_stops_applying_are_found_and_removed() {
        let before = fields_v1(&json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 2}}));
        let after: std::collections::HashSet<Vec<String>> =
            leaf_paths(&fields_v1(&json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 3}})))
                .into_iter()
                .collect();
        let gone: Vec<Vec<String>> = leaf_paths(&before).into_iter().filter(|p| !after.contains(p)).collect();
        assert_eq!(gone, vec![vec!["metadata".to_string(), "labels".to_string(), "b".to_string()]]);
        let mut obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        remove_path(&mut obj, &gone[0]);
        assert_eq!(obj, json!({"metadata": {"labels": {"a": "1"}}}));
    }

    #[test]
    fn unknown_patch_content_type_is_415() {
        assert_eq!(PatchType::from_content_type("text/plain").unwrap_err().code, 415);
    }
}
