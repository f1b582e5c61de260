//! Subresources with their own shapes: `/scale` (autoscaling/v1 Scale), `pods/binding` and
//! `pods/eviction`. (`/status` and `namespaces/finalize` are update strategies in
//! [`crate::registry::store`].)

use std::sync::Arc;

use serde_json::{Value, json};
use skiff_apimachinery::ApiError;
use skiff_apimachinery::status::Cause;

use crate::AppState;
use crate::registry::store::WriteOptions;
use crate::resources::ResourceDef;
use crate::util::{meta_str, set_in};

/// `matchLabels`/`matchExpressions` of a label selector as the string form
/// (`metav1.FormatLabelSelector`), for `Scale.status.selector`.
fn format_selector(sel: &Value) -> String {
    let mut parts = Vec::new();
    if sel.get("matchLabels").is_none()
        && sel.get("matchExpressions").is_none()
        && let Some(m) = sel.as_object()
    {
        // A ReplicationController's selector is a plain label map.
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
        return parts.join(",");
    }
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> =
                e["values"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
            match e["operator"].as_str().unwrap_or("") {
                "In" => parts.push(format!("{key} in ({})", values.join(","))),
                "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
                "Exists" => parts.push(key.to_string()),
                "DoesNotExist" => parts.push(format!("!{key}")),
                _ => {}
            }
        }
    }
    parts.join(",")
}

/// The `autoscaling/v1` Scale of a Deployment, ReplicaSet, StatefulSet, ReplicationController
/// or custom resource (from its CRD's scale paths).
pub fn scale_of(def: &ResourceDef, obj: &Value) -> Value {
    if let Some(paths) = def.custom.and_then(|c| c.scale.as_ref()) {
        return crate::registry::crd::scale_of(def, paths, obj);
    }
    let meta = &obj["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {
            "replicas": obj["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": format_selector(&obj["spec"]["selector"]),
        },
    })
}

/// Writes a Scale: `scale_fn` computes the new Scale from the current one; its
/// `spec.replicas` lands in the parent's `spec.replicas`. Returns the new Scale.
pub async fn update_scale<F>(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    opts: &WriteOptions,
    mut scale_fn: F,
) -> Result<Value, ApiError>
where
    F: FnMut(&Value) -> Result<Value, ApiError>,
{
    let w = state
        .objects
        .update(def, ns, name, Some("scale"), opts, None, |old| {
            let old = old.ok_or_else(|| ApiError::not_found(def.group, def.resource, name))?;
            let scale = scale_fn(&scale_of(def, old))?;
            if scale.get("kind").and_then(Value::as_str).is_some_and(|k| k != "Scale") {
                return Err(ApiError::bad_request("the body must be an autoscaling/v1 Scale"));
            }
            let replicas = scale["spec"]["replicas"].as_i64().unwrap_or(0);
            if replicas < 0 {
                return Err(ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                        field: "spec.replicas".into(),
                    }],
                ));
            }
            let mut new = old.clone();
            match def.custom.and_then(|c| c.scale.as_ref()) {
                Some(paths) => crate::registry::crd::set_path(&mut new, &paths.spec_replicas, json!(replicas)),
                None => set_in(&mut new, &["spec", "replicas"], json!(replicas)),
            }
            let rv = meta_str(&scale, "resourceVersion").to_string();
            set_in(&mut new, &["metadata", "resourceVersion"], json!(rv));
            Ok(new)
        })
        .await?;
    Ok(scale_of(def, &w.object))
}

/// `POST pods/{name}/binding`: sets `spec.nodeName` (409 when already bound) and the
/// PodScheduled condition, as kube-apiserver's BindingREST does.
pub async fn bind(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    binding: Value,
    opts: &WriteOptions,
) -> Result<Value, ApiError> {
    let target = binding["target"]["name"].as_str().unwrap_or("").to_string();
    if target.is_empty() {
        return Err(ApiError::invalid(
            "",
            "Binding",
            name,
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "target.name".into(),
            }],
        ));
    }
    let body_name = meta_str(&binding, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    state
        .objects
        .update(def, ns, name, Some("binding"), opts, None, |old| {
            let old = old.ok_or_else(|| ApiError::not_found(def.group, def.resource, name))?;
            let current = old["spec"]["nodeName"].as_str().unwrap_or("");
            if !current.is_empty() {
                let mut e = ApiError::conflict("", "pods/binding", name);
                e.message = format!(
                    "Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{current}\""
                );
                return Err(e);
            }
            if old["metadata"]["deletionTimestamp"].is_string() {
                let mut e = ApiError::conflict("", "pods/binding", name);
                e.message = format!("Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is being deleted, cannot be assigned to a host");
                return Err(e);
            }
            let mut new = old.clone();
            set_in(&mut new, &["spec", "nodeName"], json!(target));
            if let Some(ann) = binding["metadata"]["annotations"].as_object() {
                for (k, v) in ann {
                    set_in(&mut new, &["metadata", "annotations", k], v.clone());
                }
            }
            let mut conditions: Vec<Value> = new["status"]["conditions"].as_array().cloned().unwrap_or_default();
            conditions.retain(|c| c["type"] != "PodScheduled");
            conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": crate::util::now()}));
            set_in(&mut new, &["status", "conditions"], json!(conditions));
            Ok(new)
        })
        .await?;
    Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
}

/// `POST pods/{name}/eviction`, which honours PodDisruptionBudgets: see
/// [`crate::registry::core::eviction`].
pub use crate::registry::core::eviction::evict;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_selector_is_formatted_like_kubernetes() {
        let sel = json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]});
        assert_eq!(format_selector(&sel), "app=web,tier in (a,b)");
    }
}
