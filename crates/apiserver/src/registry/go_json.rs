//! The built-in types' shapes as Kubernetes' Go types define them, for what k8s-openapi's
//! types do not say: each protobuf message's fields (tag, JSON name, kind, message type,
//! repeated, map value kind and message; `protobuf_schema.json` from
//! `tools/gen_protobuf_schema.py`) and which scalar fields are non-pointer `omitempty` ones
//! (`protobuf_zero_omitted.json` from `tools/gen_protobuf_zero_omitted.py`, read from the Go
//! types of k8s.io/api and k8s.io/apimachinery).
//!
//! Go decodes `"hostNetwork": false` and an absent `hostNetwork` into the same struct and
//! encodes both as absent, while `"automountServiceAccountToken": false` (a `*bool`) stays. So
//! Kubernetes stores a zero non-pointer `omitempty` field as absent whichever way a client sent
//! it; [`omit_zero_values`] does the same to a decoded object, and the protobuf decoder skips
//! those zeros. Two templates that differ only there are then equal, as they are for
//! Kubernetes' `apiequality.Semantic.DeepEqual` (a Deployment's template and its ReplicaSet's).

use std::collections::HashMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

/// One field of a message: (tag, JSON name, kind — a scalar type, `message` or `map` —,
/// message type, repeated, map value kind, map value message type).
#[derive(Debug, Deserialize)]
pub struct Field(pub u32, pub String, pub String, pub String, pub bool, pub String, pub String);

/// message name (`api.core.v1.PodSpec`) → its fields by tag.
pub static SCHEMA: LazyLock<HashMap<String, HashMap<u32, Field>>> = LazyLock::new(|| {
    let raw: HashMap<String, Vec<Field>> =
        serde_json::from_str(include_str!("protobuf_schema.json")).unwrap_or_default();
    raw.into_iter().map(|(k, fields)| (k, fields.into_iter().map(|f| (f.0, f)).collect())).collect()
});

/// message → tags of its scalar fields whose zero value means unset.
static ZERO_OMITTED: LazyLock<HashMap<String, Vec<u32>>> =
    LazyLock::new(|| serde_json::from_str(include_str!("protobuf_zero_omitted.json")).unwrap_or_default());

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Whether `v`, the value of field `tag` of `message`, is a zero Go leaves out of its JSON.
/// `None` when the table does not know the message.
pub fn zero_omitted(message: &str, tag: u32, v: &Value) -> Option<bool> {
    let tags = ZERO_OMITTED.get(message)?;
    Some(is_zero(v) && tags.contains(&tag))
}

/// The protobuf package of an API group (`apps` → `api.apps`).
pub fn package(group: &str) -> String {
    match group {
        "" => "api.core".into(),
        "apiextensions.k8s.io" => "apiextensions_apiserver.pkg.apis.apiextensions".into(),
        "meta.k8s.io" => "apimachinery.pkg.apis.meta".into(),
        g => format!("api.{}", g.split('.').next().unwrap_or(g)),
    }
}

/// The message name of a kind (`apps/v1`, `Deployment` → `api.apps.v1.Deployment`).
pub fn message_name(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    format!("{}.{version}.{kind}", package(group))
}

/// Removes the zero values of non-pointer `omitempty` scalar fields from a built-in object,
/// recursively (see the module docs). Kinds and messages the tables do not know are left as
/// they are.
pub fn omit_zero_values(api_version: &str, kind: &str, obj: &mut Value) {
    walk(&message_name(api_version, kind), obj, 0);
}

fn walk(message: &str, v: &mut Value, depth: usize) {
    let (Some(fields), Some(m)) = (SCHEMA.get(message), v.as_object_mut()) else { return };
    if depth > 64 {
        return;
    }
    for f in fields.values() {
        let Some(child) = m.get_mut(&f.1) else { continue };
        match (f.2.as_str(), f.4) {
            ("message", true) => {
                for item in child.as_array_mut().into_iter().flatten() {
                    walk(&f.3, item, depth + 1);
                }
            }
            ("message", false) => walk(&f.3, child, depth + 1),
            ("map", _) if f.5 == "message" => {
                for item in child.as_object_mut().into_iter().flat_map(|o| o.values_mut()) {
                    walk(&f.6, item, depth + 1);
                }
            }
            (_, false) if zero_omitted(message, f.0, child) == Some(true) => {
                m.remove(&f.1);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn zero_non_pointer_omitempty_fields_are_dropped_and_pointer_and_required_zeros_kept() {
        let mut d = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d", "generation": 0},
            "spec": {
                "paused": false,
                "minReadySeconds": 0,
                "replicas": 0,
                "template": {"spec": {
                    "hostNetwork": false,
                    "automountServiceAccountToken": false,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "stdin": false, "tty": true, "ports": [{"containerPort": 80, "hostPort": 0}]}],
                    "volumes": [{"name": "v", "secret": {"secretName": "s", "optional": false}}],
                }},
            },
            "status": {"replicas": 0, "observedGeneration": 0},
        });
        omit_zero_values("apps/v1", "Deployment", &mut d);
        assert_eq!(
            d,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "d"},
                "spec": {
                    "replicas": 0,
                    "template": {"spec": {
                        "automountServiceAccountToken": false,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "tty": true, "ports": [{"containerPort": 80}]}],
                        "volumes": [{"name": "v", "secret": {"secretName": "s", "optional": false}}],
                    }},
                },
                "status": {},
            })
        );
        // A field without omitempty keeps its zero (`ReplicaSetStatus.replicas`).
        let mut rs = json!({"status": {"replicas": 0, "readyReplicas": 0}});
        omit_zero_values("apps/v1", "ReplicaSet", &mut rs);
        assert_eq!(rs, json!({"status": {"replicas": 0}}));
        // Unknown kinds are left alone.
        let mut cr = json!({"spec": {"paused": false}});
        omit_zero_values("example.com/v1", "Widget", &mut cr);
        assert_eq!(cr, json!({"spec": {"paused": false}}));
    }
}
