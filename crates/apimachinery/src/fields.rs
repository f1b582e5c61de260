//! Selectable fields per kind: what `?fieldSelector=` may name, and each field's string value.
//!
//! Kubernetes registers these per type (`AddFieldLabelConversionFunc` in `pkg/apis/*/v1/conversion.go`
//! and the registries' `GetAttrs`/`ToSelectableFields`). Every kind supports `metadata.name` and
//! `metadata.namespace`; the extra fields are listed in [`supported_fields`]. Values are strings as
//! Kubernetes renders them: booleans `true`/`false`, integers in decimal, a missing string `""`.

use serde_json::Value;

const META: &[&str] = &["metadata.name", "metadata.namespace"];

const POD: &[&str] = &[
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
];

const CORE_EVENT: &[&str] = &[
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
];

const EVENTS_EVENT: &[&str] = &[
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
];

const NODE: &[&str] = &["metadata.name", "metadata.namespace", "spec.unschedulable"];
const NAMESPACE: &[&str] = &["metadata.name", "metadata.namespace", "status.phase"];
const SECRET: &[&str] = &["metadata.name", "metadata.namespace", "type"];
const REPLICAS: &[&str] = &["metadata.name", "metadata.namespace", "status.replicas"];
const SERVICE: &[&str] = &["metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"];
const JOB: &[&str] = &["metadata.name", "metadata.namespace", "status.successful"];
const CSR: &[&str] = &["metadata.name", "metadata.namespace", "spec.signerName"];

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// The field selector fields a kind supports, `metadata.name` and `metadata.namespace` first.
/// Unknown kinds (custom resources included) support just those two.
pub fn supported_fields(api_version: &str, kind: &str) -> &'static [&'static str] {
    match (group_of(api_version), kind) {
        ("", "Pod") => POD,
        ("", "Event") => CORE_EVENT,
        ("events.k8s.io", "Event") => EVENTS_EVENT,
        ("", "Node") => NODE,
        ("", "Namespace") => NAMESPACE,
        ("", "Secret") => SECRET,
        ("apps" | "extensions", "ReplicaSet") | ("", "ReplicationController") => REPLICAS,
        ("", "Service") => SERVICE,
        ("batch", "Job") => JOB,
        ("certificates.k8s.io", "CertificateSigningRequest") => CSR,
        _ => META,
    }
}

fn str_at(obj: &Value, pointer: &str) -> String {
    match obj.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn bool_at(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer).and_then(Value::as_bool).unwrap_or(false).to_string()
}

fn int_at(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0).to_string()
}

/// The value of a selectable field of a raw JSON object, or `None` when the kind does not support
/// that field (the server then answers 400 `field label not supported: <field>`).
///
/// Missing fields render as Kubernetes renders their zero values: `""`, `false`, `0`.
pub fn field_value(api_version: &str, kind: &str, obj: &Value, field: &str) -> Option<String> {
    if !supported_fields(api_version, kind).contains(&field) {
        return None;
    }
    let v = match field {
        "metadata.name" => str_at(obj, "/metadata/name"),
        "metadata.namespace" => str_at(obj, "/metadata/namespace"),
        "spec.hostNetwork" => bool_at(obj, "/spec/hostNetwork"),
        "spec.unschedulable" => bool_at(obj, "/spec/unschedulable"),
        "status.podIP" => {
            // Kubernetes takes the first of status.podIPs, falling back to the singular field.
            match obj.pointer("/status/podIPs/0/ip").and_then(Value::as_str) {
                Some(ip) => ip.to_string(),
                None => str_at(obj, "/status/podIP"),
            }
        }
        "status.replicas" => int_at(obj, "/status/replicas"),
        "status.successful" => int_at(obj, "/status/succeeded"),
        "source" => {
            // core/v1 `source` is the reporting component; fall back to the newer field.
            let s = str_at(obj, "/source/component");
            if s.is_empty() { str_at(obj, "/reportingComponent") } else { s }
        }
        "reportingComponent" => str_at(obj, "/reportingComponent"),
        "reportingController" => {
            let s = str_at(obj, "/reportingController");
            if s.is_empty() { str_at(obj, "/reportingComponent") } else { s }
        }
        f if f.starts_with("regarding.") => {
            // events.k8s.io/v1 objects; stored core/v1 events name the same thing involvedObject.
            let sub = &f["regarding.".len()..];
            let v = str_at(obj, &format!("/regarding/{sub}"));
            if v.is_empty() { str_at(obj, &format!("/involvedObject/{sub}")) } else { v }
        }
        f => str_at(obj, &format!("/{}", f.replace('.', "/"))),
    };
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(api_version: &str, kind: &str, obj: Value, field: &str, want: Option<&str>) {
        assert_eq!(field_value(api_version, kind, &obj, field).as_deref(), want, "{kind} {field}");
    }

    #[test]
    fn field_values_render_like_kubernetes() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1", "restartPolicy": "Always", "schedulerName": "default-scheduler"},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.2"}]}
        });
        check("v1", "Pod", pod.clone(), "metadata.name", Some("p"));
        check("v1", "Pod", pod.clone(), "metadata.namespace", Some("ns"));
        check("v1", "Pod", pod.clone(), "spec.nodeName", Some("n1"));
        check("v1", "Pod", pod.clone(), "spec.hostNetwork", Some("false"));
        check("v1", "Pod", pod.clone(), "status.podIP", Some("10.0.0.2"));
        check("v1", "Pod", pod.clone(), "status.nominatedNodeName", Some(""));
        check("v1", "Pod", pod.clone(), "spec.containers", None);
        check("v1", "Node", json!({"spec": {"unschedulable": true}}), "spec.unschedulable", Some("true"));
        check("v1", "Node", json!({}), "spec.unschedulable", Some("false"));
        check("apps/v1", "ReplicaSet", json!({"status": {"replicas": 3}}), "status.replicas", Some("3"));
        check("apps/v1", "ReplicaSet", json!({}), "status.replicas", Some("0"));
        check("apps/v1", "Deployment", json!({}), "status.replicas", None);
        check("v1", "Secret", json!({"type": "Opaque"}), "type", Some("Opaque"));
        check("v1", "Namespace", json!({"status": {"phase": "Active"}}), "status.phase", Some("Active"));
        let ev = json!({"involvedObject": {"kind": "Pod", "name": "p"}, "source": {"component": "kubelet"}, "type": "Normal"});
        check("v1", "Event", ev.clone(), "involvedObject.kind", Some("Pod"));
        check("v1", "Event", ev.clone(), "source", Some("kubelet"));
        check("v1", "Event", ev.clone(), "type", Some("Normal"));
        check("events.k8s.io/v1", "Event", ev.clone(), "regarding.name", Some("p"));
        check("events.k8s.io/v1", "Event", json!({"regarding": {"uid": "u"}}), "regarding.uid", Some("u"));
        check("example.com/v1", "Widget", json!({"metadata": {"name": "w"}}), "metadata.name", Some("w"));
        check("example.com/v1", "Widget", json!({"spec": {"a": "b"}}), "spec.a", None);
    }

    #[test]
    fn every_kind_supports_name_and_namespace() {
        for (av, k) in [("v1", "Pod"), ("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("x/v1", "Y")] {
            let f = supported_fields(av, k);
            assert!(f.contains(&"metadata.name") && f.contains(&"metadata.namespace"), "{k}");
        }
    }
}
