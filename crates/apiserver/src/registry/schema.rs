//! Typed decoding: every built-in kind round-trips through its k8s-openapi type, which rejects
//! malformed fields (400), drops unknown ones and yields the canonical field order. Comparing
//! the request's fields with the round-tripped ones finds unknown fields, and a pass over the
//! raw bytes finds duplicate ones, for `fieldValidation=Strict|Warn`
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation>).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt::Write as _;

use serde::Serialize;
use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

fn round_trip<T: DeserializeOwned + Serialize>(v: &Value) -> Result<Value, String> {
    // Deserializing from `&Value` reads the tree in place (no deep copy of the request).
    let typed = T::deserialize(v).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// Round-trips `obj` through the k8s-openapi type of `api_version`/`kind`. `None` when skiff has
/// no type for it (the object is then taken as is); `Some(Err(reason))` when it does not decode.
pub fn normalize(api_version: &str, kind: &str, obj: &Value) -> Option<Result<Value, String>> {
    use k8s_openapi::api::{apps, autoscaling, batch, coordination, core, discovery, events, networking, policy, rbac};
    use k8s_openapi::api::{scheduling, storage};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    Some(match (api_version, kind) {
        ("v1", "Namespace") => round_trip::<core::v1::Namespace>(obj),
        ("v1", "Pod") => round_trip::<core::v1::Pod>(obj),
        ("v1", "Node") => round_trip::<core::v1::Node>(obj),
        ("v1", "Service") => round_trip::<core::v1::Service>(obj),
        ("v1", "Endpoints") => round_trip::<core::v1::Endpoints>(obj),
        ("v1", "ConfigMap") => round_trip::<core::v1::ConfigMap>(obj),
        ("v1", "Secret") => round_trip::<core::v1::Secret>(obj),
        ("v1", "ServiceAccount") => round_trip::<core::v1::ServiceAccount>(obj),
        ("v1", "Event") => round_trip::<core::v1::Event>(obj),
        ("v1", "Binding") => round_trip::<core::v1::Binding>(obj),
        ("events.k8s.io/v1", "Event") => round_trip::<events::v1::Event>(obj),
        ("apps/v1", "Deployment") => round_trip::<apps::v1::Deployment>(obj),
        ("apps/v1", "ReplicaSet") => round_trip::<apps::v1::ReplicaSet>(obj),
        ("apps/v1", "StatefulSet") => round_trip::<apps::v1::StatefulSet>(obj),
        ("apps/v1", "DaemonSet") => round_trip::<apps::v1::DaemonSet>(obj),
        ("apps/v1", "ControllerRevision") => round_trip::<apps::v1::ControllerRevision>(obj),
        ("v1", "ReplicationController") => round_trip::<core::v1::ReplicationController>(obj),
        ("v1", "PodTemplate") => round_trip::<core::v1::PodTemplate>(obj),
        ("v1", "LimitRange") => round_trip::<core::v1::LimitRange>(obj),
        ("v1", "ResourceQuota") => round_trip::<core::v1::ResourceQuota>(obj),
        ("v1", "PersistentVolumeClaim") => round_trip::<core::v1::PersistentVolumeClaim>(obj),
        ("v1", "PersistentVolume") => round_trip::<core::v1::PersistentVolume>(obj),
        ("batch/v1", "Job") => round_trip::<batch::v1::Job>(obj),
        ("batch/v1", "CronJob") => round_trip::<batch::v1::CronJob>(obj),
        ("policy/v1", "PodDisruptionBudget") => round_trip::<policy::v1::PodDisruptionBudget>(obj),
        ("scheduling.k8s.io/v1", "PriorityClass") => round_trip::<scheduling::v1::PriorityClass>(obj),
        ("storage.k8s.io/v1", "StorageClass") => round_trip::<storage::v1::StorageClass>(obj),
        ("storage.k8s.io/v1", "CSIDriver") => round_trip::<storage::v1::CSIDriver>(obj),
        ("storage.k8s.io/v1", "CSINode") => round_trip::<storage::v1::CSINode>(obj),
        ("storage.k8s.io/v1", "VolumeAttachment") => round_trip::<storage::v1::VolumeAttachment>(obj),
        ("storage.k8s.io/v1", "CSIStorageCapacity") => round_trip::<storage::v1::CSIStorageCapacity>(obj),
        ("discovery.k8s.io/v1", "EndpointSlice") => round_trip::<discovery::v1::EndpointSlice>(obj),
        ("networking.k8s.io/v1", "Ingress") => round_trip::<networking::v1::Ingress>(obj),
        ("networking.k8s.io/v1", "NetworkPolicy") => round_trip::<networking::v1::NetworkPolicy>(obj),
        ("networking.k8s.io/v1", "IngressClass") => round_trip::<networking::v1::IngressClass>(obj),
        ("autoscaling/v1", "Scale") => round_trip::<autoscaling::v1::Scale>(obj),
        ("autoscaling/v2", "HorizontalPodAutoscaler") => round_trip::<autoscaling::v2::HorizontalPodAutoscaler>(obj),
        ("autoscaling/v1", "HorizontalPodAutoscaler") => round_trip::<autoscaling::v1::HorizontalPodAutoscaler>(obj),
        ("policy/v1", "Eviction") => round_trip::<policy::v1::Eviction>(obj),
        ("coordination.k8s.io/v1", "Lease") => round_trip::<coordination::v1::Lease>(obj),
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<rbac::v1::Role>(obj),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<rbac::v1::RoleBinding>(obj),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<rbac::v1::ClusterRole>(obj),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => round_trip::<rbac::v1::ClusterRoleBinding>(obj),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            round_trip::<apiextensions::v1::CustomResourceDefinition>(obj)
        }
        ("apiregistration.k8s.io/v1", "APIService") => {
            round_trip::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>(obj)
        }
        _ => return None,
    })
}

/// Paths (`spec.containers[0].foo`) of fields present in `input` but not in `typed`. Null
/// values are not reported (they decode to "unset").
pub fn unknown_fields(input: &Value, typed: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff(input, typed, &mut String::new(), &mut out);
    out
}

/// Appends `.key` (or `key` at the root) to `path`.
fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

/// Walks `input` beside `typed` with one path buffer (grown and truncated on the way, so a
/// path string is only allocated for a field that is reported).
fn diff(input: &Value, typed: &Value, path: &mut String, out: &mut Vec<String>) {
    match (input, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                if v.is_null() {
                    continue;
                }
                let len = path.len();
                push_key(path, k);
                match b.get(k) {
                    None => out.push(path.clone()),
                    Some(t) if t.is_object() || t.is_array() => diff(v, t, path, out),
                    Some(_) => {}
                }
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                if !(x.is_object() || x.is_array()) {
                    continue;
                }
                let len = path.len();
                let _ = write!(path, "[{i}]");
                diff(x, y, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Paths of keys that appear twice in one JSON object of `raw` (which must be valid JSON).
pub fn duplicate_fields(raw: &[u8]) -> Vec<String> {
    let mut state = WalkState { path: String::new(), dups: Vec::new() };
    let mut de = serde_json::Deserializer::from_slice(raw);
    let _ = Walk(&mut state).deserialize(&mut de);
    state.dups
}

/// The current path (one buffer for the whole walk) and the duplicates found.
struct WalkState {
    path: String,
    dups: Vec<String>,
}

struct Walk<'a>(&'a mut WalkState);

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let st = self.0;
        let mut i = 0;
        loop {
            let len = st.path.len();
            let _ = write!(st.path, "[{i}]");
            let more = seq.next_element_seed(Walk(&mut *st))?.is_some();
            st.path.truncate(len);
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let st = self.0;
        let mut seen: HashSet<Cow<'de, str>> = HashSet::new();
        while let Some(k) = map.next_key_seed(KeySeed)? {
            let len = st.path.len();
            push_key(&mut st.path, &k);
            if !seen.insert(k) {
                st.dups.push(st.path.clone());
            }
            map.next_value_seed(Walk(&mut *st))?;
            st.path.truncate(len);
        }
        Ok(())
    }
}

/// An object key, borrowed from the input unless it has escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_reported_with_their_paths() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "bogus": 1},
            "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicyX": "Always"}]}});
        let typed = normalize("v1", "Pod", &pod).unwrap().unwrap();
        assert_eq!(unknown_fields(&pod, &typed), vec!["metadata.bogus", "spec.containers[0].imagePullPolicyX"]);
    }

    #[test]
    fn a_field_of_the_wrong_type_does_not_decode() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": "three"}});
        assert!(normalize("apps/v1", "Deployment", &d).unwrap().is_err());
    }

    #[test]
    fn duplicate_keys_are_found_at_any_depth() {
        let raw = br#"{"metadata": {"name": "a", "name": "b"}, "spec": {"x": [{"k": 1, "k": 2}]}}"#;
        assert_eq!(duplicate_fields(raw), vec!["metadata.name", "spec.x[0].k"]);
    }

    #[test]
    fn labels_and_data_maps_are_never_unknown() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "b"}}, "data": {"k": "v"}});
        let typed = normalize("v1", "ConfigMap", &cm).unwrap().unwrap();
        assert!(unknown_fields(&cm, &typed).is_empty());
    }
}
