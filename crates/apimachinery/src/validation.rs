//! Per-type validation: the field errors Kubernetes answers 422 Invalid with.
//!
//! [`validate`] returns [`Cause`]s shaped like `field.Error`s rendered into a `metav1.StatusCause`:
//! `reason` is the cause type (`FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`,
//! `FieldValueDuplicate`, `FieldValueForbidden`, `FieldValueTooLong`, `FieldValueTooMany`,
//! `FieldValueNotFound`),
//! `message` the error body (`Required value`, `Invalid value: "X": <detail>`, `Unsupported
//! value: "X": supported values: "a", "b"`...), `field` the path as kubectl prints it
//! (`spec.template.spec.containers[0].image`, `data[key]`).
//!
//! Rules follow `pkg/apis/*/validation` of Kubernetes 1.33 for: ObjectMeta (every kind), Namespace,
//! Pod (+ pod templates), Deployment, ReplicaSet, DaemonSet/Job (selector and template),
//! StatefulSet (`statefulset`: its pod template counts the claim templates as volumes), CronJob,
//! Service, ConfigMap, Secret, ServiceAccount, Node, Lease, Role/ClusterRole,
//! RoleBinding/ClusterRoleBinding, Event (core/v1 and events.k8s.io/v1), StorageClass and
//! CustomResourceDefinition (names). Objects are expected to be defaulted first
//! ([`crate::defaults::apply_defaults`]), as the API server does.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::names;
use crate::quantity::parse_quantity_value;
use crate::selector::LabelSelector;
pub use crate::status::Cause;

pub mod autoscaling;
mod containers;
pub mod cronjob;
pub mod daemonset;
pub mod job;
mod statefulset;
pub mod storage;

/// Total size limit of `metadata.annotations` (256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
/// Size limit of ConfigMap and Secret data (1 MiB).
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// field.Error helpers.

/// Field errors collected while validating one object.
#[derive(Debug, Default)]
struct Errs(Vec<Cause>);

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause { reason: reason.to_string(), message, field: field.to_string() }
}

/// Renders a bad value as Go's `field.Error` does: strings quoted, numbers and booleans bare,
/// anything else as JSON.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".to_string(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

fn quote_list(values: &[&str]) -> String {
    values.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ")
}

impl Errs {
    fn required(&mut self, field: &str, detail: &str) {
        let msg = if detail.is_empty() { "Required value".to_string() } else { format!("Required value: {detail}") };
        self.0.push(cause("FieldValueRequired", field, msg));
    }
    fn invalid(&mut self, field: &str, value: &Value, detail: &str) {
        let mut msg = format!("Invalid value: {}", show(value));
        if !detail.is_empty() {
            msg.push_str(": ");
            msg.push_str(detail);
        }
        self.0.push(cause("FieldValueInvalid", field, msg));
    }
    fn invalid_str(&mut self, field: &str, value: &str, detail: &str) {
        self.invalid(field, &Value::String(value.to_string()), detail)
    }
    /// `Invalid value: <already rendered value>: detail` (Go `%#v` of maps and structs).
    fn invalid_raw(&mut self, field: &str, rendered: &str, detail: &str) {
        self.0.push(cause("FieldValueInvalid", field, format!("Invalid value: {rendered}: {detail}")));
    }
    /// `field.Invalid(path, field.OmitValueType{}, detail)`: the message names no value.
    fn invalid_omitted(&mut self, field: &str, detail: &str) {
        self.0.push(cause("FieldValueInvalid", field, format!("Invalid value: {detail}")));
    }
    /// `field.TooMany(path, actual, max)`.
    fn too_many(&mut self, field: &str, actual: usize, max: usize) {
        self.0.push(cause("FieldValueTooMany", field, format!("Too many: {actual}: must have at most {max} items")));
    }
    fn not_supported(&mut self, field: &str, value: &Value, supported: &[&str]) {
        let mut msg = format!("Unsupported value: {}", show(value));
        if !supported.is_empty() {
            msg.push_str(&format!(": supported values: {}", quote_list(supported)));
        }
        self.0.push(cause("FieldValueNotSupported", field, msg));
    }
    fn duplicate(&mut self, field: &str, value: &Value) {
        self.0.push(cause("FieldValueDuplicate", field, format!("Duplicate value: {}", show(value))));
    }
    fn forbidden(&mut self, field: &str, detail: &str) {
        self.0.push(cause("FieldValueForbidden", field, format!("Forbidden: {detail}")));
    }
    fn not_found(&mut self, field: &str, value: &Value) {
        self.0.push(cause("FieldValueNotFound", field, format!("Not found: {}", show(value))));
    }
    fn too_long(&mut self, field: &str, max: usize) {
        self.0.push(cause("FieldValueTooLong", field, format!("Too long: may not be more than {max} bytes")));
    }
    fn names(&mut self, field: &str, value: &str, errs: Vec<String>) {
        for e in errs {
            self.invalid_str(field, value, &e);
        }
    }
    fn non_negative(&mut self, field: &str, v: Option<&Value>) {
        if let Some(n) = v.and_then(Value::as_i64)
            && n < 0
        {
            self.invalid(field, &Value::from(n), "must be greater than or equal to 0");
        }
    }
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}

fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

fn s<'a>(v: &'a Value, name: &str) -> &'a str {
    v.get(name).and_then(Value::as_str).unwrap_or("")
}

fn arr<'a>(v: &'a Value, name: &str) -> &'a [Value] {
    v.get(name).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn obj<'a>(v: &'a Value, name: &str) -> Option<&'a Map<String, Value>> {
    v.get(name).and_then(Value::as_object)
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
        .unwrap_or_default()
}

/// Go's `%#v` of a `map[string]string` (keys sorted): `map[string]string{"app":"web"}`.
fn go_string_map(m: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k:?}:{v:?}")).collect();
    format!("map[string]string{{{}}}", inner.join(", "))
}

/// Go's `%#v` of a `v1.LabelSelector` built from JSON.
fn go_label_selector(v: &Value) -> String {
    let labels = obj(v, "matchLabels").map(|_| go_string_map(&string_map(v.get("matchLabels"))));
    let exprs = arr(v, "matchExpressions");
    let exprs = if v.get("matchExpressions").is_none() {
        "[]v1.LabelSelectorRequirement(nil)".to_string()
    } else {
        let items: Vec<String> = exprs
            .iter()
            .map(|e| {
                let values = match e.get("values").and_then(Value::as_array) {
                    None => "[]string(nil)".to_string(),
                    Some(vs) => format!(
                        "[]string{{{}}}",
                        vs.iter()
                            .map(|x| format!("{:?}", x.as_str().unwrap_or_default()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                format!(
                    "v1.LabelSelectorRequirement{{Key:{:?}, Operator:{:?}, Values:{values}}}",
                    s(e, "key"),
                    s(e, "operator")
                )
            })
            .collect();
        format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
    };
    format!(
        "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{exprs}}}",
        labels.unwrap_or_else(|| "map[string]string(nil)".to_string())
    )
}

// ---------------------------------------------------------------------------------------------
// Entry point.

/// Kinds that are cluster-scoped (no `metadata.namespace`).
pub fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    matches!(
        (group, kind),
        ("", "Namespace" | "Node" | "PersistentVolume" | "ComponentStatus")
            | ("rbac.authorization.k8s.io", "ClusterRole" | "ClusterRoleBinding")
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | (
                "storage.k8s.io",
                "StorageClass" | "CSIDriver" | "CSINode" | "VolumeAttachment" | "VolumeAttributesClass"
            )
            | ("scheduling.k8s.io", "PriorityClass")
            | ("apiregistration.k8s.io", "APIService")
            | ("certificates.k8s.io", "CertificateSigningRequest")
            | ("admissionregistration.k8s.io", _)
            | ("node.k8s.io", "RuntimeClass")
            | ("flowcontrol.apiserver.k8s.io", _)
    )
}

/// How a kind's `metadata.name` is validated.
#[derive(Clone, Copy)]
enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
    /// RBAC names: any path segment (not `.`/`..`, no `/` or `%`).
    PathSegment,
}

fn name_rule(group: &str, kind: &str) -> NameRule {
    match (group, kind) {
        ("", "Namespace") => NameRule::Dns1123Label,
        ("", "Service") => NameRule::Dns1035Label,
        // `ValidateStatefulSetName`: its pods' hostnames are `<name>-<ordinal>`.
        ("apps", "StatefulSet") => NameRule::Dns1123Label,
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        // `path.IsValidPathSegmentName`, then `version.group` (checked in `validate_api_service`).
        ("apiregistration.k8s.io", "APIService") => NameRule::PathSegment,
        _ => NameRule::Dns1123Subdomain,
    }
}

fn name_errors(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    // A generateName prefix may end in '-': check it as if an alphanumeric followed.
    let masked;
    let name = if prefix && name.ends_with('-') {
        masked = format!("{}a", &name[..name.len() - 1]);
        masked.as_str()
    } else {
        name
    };
    match rule {
        NameRule::Dns1123Subdomain => names::is_dns1123_subdomain(name),
        NameRule::Dns1123Label => names::is_dns1123_label(name),
        NameRule::Dns1035Label => names::is_dns1035_label(name),
        NameRule::PathSegment => {
            let mut errs = Vec::new();
            if name == "." || name == ".." {
                errs.push(format!("may not be '{name}'"));
            }
            for c in ["/", "%"] {
                if name.contains(c) {
                    errs.push(format!("may not contain '{c}'"));
                }
            }
            errs
        }
    }
}

/// Validates an object about to be created (`old` = `None`) or to replace `old`.
///
/// `obj` is the whole object as JSON (after defaulting). Unknown kinds get the ObjectMeta checks
/// only. An empty result means valid.
pub fn validate(api_version: &str, kind: &str, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    let mut e = Errs::default();
    validate_object_meta(&mut e, group, kind, obj, !is_cluster_scoped(api_version, kind), old);
    match (group, kind) {
        ("", "Namespace") => validate_namespace(&mut e, obj),
        ("", "Pod") => validate_pod(&mut e, obj, old),
        ("apps", "Deployment") => validate_deployment(&mut e, obj, old),
        ("apps", "ReplicaSet") => validate_workload(&mut e, obj, old, &["Always"], true),
        ("apps", "StatefulSet") => statefulset::validate_stateful_set(&mut e, obj, old),
        ("apps", "DaemonSet") => daemonset::validate_daemon_set(&mut e, obj, old),
        ("", "ReplicationController") => validate_replication_controller(&mut e, obj),
        ("batch", "Job") => job::validate_job(&mut e, obj, old),
        ("", "Service") => validate_service(&mut e, obj, old),
        ("", "ConfigMap") => validate_config_map(&mut e, obj, old),
        ("", "Secret") => validate_secret(&mut e, obj, old),
        ("", "ServiceAccount") => validate_service_account(&mut e, obj),
        ("", "Node") => validate_node(&mut e, obj),
        ("coordination.k8s.io", "Lease") => validate_lease(&mut e, obj),
        ("rbac.authorization.k8s.io", "Role") => validate_rules(&mut e, obj, true),
        ("rbac.authorization.k8s.io", "ClusterRole") => validate_rules(&mut e, obj, false),
        ("rbac.authorization.k8s.io", "RoleBinding") => validate_binding(&mut e, obj, old, true),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => validate_binding(&mut e, obj, old, false),
        ("", "Event") => validate_core_event(&mut e, obj),
        ("events.k8s.io", "Event") => validate_events_event(&mut e, obj),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => validate_crd(&mut e, obj, old),
        ("scheduling.k8s.io", "PriorityClass") => validate_priority_class(&mut e, obj, old),
        ("storage.k8s.io", "StorageClass") => storage::validate_storage_class(&mut e, obj, old),
        ("policy", "PodDisruptionBudget") => validate_pdb(&mut e, obj),
        ("batch", "CronJob") => cronjob::validate_cron_job(&mut e, obj, old),
        ("autoscaling", "HorizontalPodAutoscaler") => autoscaling::validate_hpa(&mut e, obj, old),
        ("apiregistration.k8s.io", "APIService") => validate_api_service(&mut e, obj),
        _ => {}
    }
    e.0
}

/// The ObjectMeta checks alone (name syntax, namespace presence as `namespaced` says, labels,
/// annotations, immutable uid/creationTimestamp on update): what custom resources get besides
/// their schema.
pub fn validate_metadata(obj: &Value, namespaced: bool, old: Option<&Value>) -> Vec<Cause> {
    let mut e = Errs::default();
    validate_object_meta(&mut e, "", "", obj, namespaced, old);
    e.0
}

// ---------------------------------------------------------------------------------------------
// apiregistration.k8s.io.

/// The decoded length of a base64 string (`[]byte` fields are base64 in JSON).
fn base64_len(b64: &str) -> usize {
    let b64 = b64.trim_end_matches('=');
    b64.len() * 3 / 4
}

/// kube-aggregator's `ValidateAPIService`: the name is `version.group`, only `v1` may have an
/// empty group, the group is a DNS subdomain and the version a DNS-1035 label, the priorities
/// are in range, a local APIService (no `service`) has no TLS settings, and a service-backed
/// one names its Service and does not both skip verification and carry a CA bundle.
fn validate_api_service(e: &mut Errs, o: &Value) {
    let spec = o.get("spec").cloned().unwrap_or(Value::Null);
    let group = s(&spec, "group");
    let version = s(&spec, "version");
    let name = o.get("metadata").map(|m| s(m, "name")).unwrap_or("");
    let required_name = format!("{version}.{group}");
    let segment_ok = name_errors(NameRule::PathSegment, name, false).is_empty();
    if !name.is_empty() && segment_ok && name != required_name {
        e.invalid_str("metadata.name", name, &format!("must be `spec.version+\".\"+spec.group`: {required_name:?}"));
    }
    if group.is_empty() && version != "v1" {
        e.required("spec.group", "only v1 may have an empty group and it better be legacy kube");
    }
    if !group.is_empty() {
        e.names("spec.group", group, names::is_dns1123_subdomain(group));
    }
    e.names("spec.version", version, names::is_dns1035_label(version));
    let group_min = spec.get("groupPriorityMinimum").and_then(Value::as_i64).unwrap_or(0);
    if group_min <= 0 || group_min > 20000 {
        e.invalid("spec.groupPriorityMinimum", &Value::from(group_min), "must be positive and less than 20000");
    }
    let version_priority = spec.get("versionPriority").and_then(Value::as_i64).unwrap_or(0);
    if version_priority <= 0 || version_priority > 1000 {
        e.invalid("spec.versionPriority", &Value::from(version_priority), "must be positive and less than 1000");
    }
    let ca_bundle = base64_len(s(&spec, "caBundle"));
    let insecure = spec.get("insecureSkipTLSVerify").and_then(Value::as_bool).unwrap_or(false);
    let Some(service) = spec.get("service").filter(|v| v.is_object()) else {
        if ca_bundle != 0 {
            e.invalid_raw(
                "spec.caBundle",
                &format!("\"{ca_bundle} bytes\""),
                "local APIServices may not have a caBundle",
            );
        }
        if insecure {
            e.invalid(
                "spec.insecureSkipTLSVerify",
                &Value::Bool(true),
                "local APIServices may not have insecureSkipTLSVerify",
            );
        }
        return;
    };
    if s(service, "namespace").is_empty() {
        e.required("spec.service.namespace", "");
    }
    if s(service, "name").is_empty() {
        e.required("spec.service.name", "");
    }
    if insecure && ca_bundle > 0 {
        e.invalid("spec.insecureSkipTLSVerify", &Value::Bool(true), "may not be true if caBundle is present");
    }
}

// ---------------------------------------------------------------------------------------------
// scheduling.k8s.io, policy.

/// The priority classes every cluster has (`scheduling.SystemPriorityClasses`): name and value.
pub const SYSTEM_PRIORITY_CLASSES: &[(&str, i64)] =
    &[("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)];

/// The highest priority a user-defined PriorityClass may have.
pub const HIGHEST_USER_DEFINABLE_PRIORITY: i64 = 1_000_000_000;

fn validate_priority_class(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let name = o.get("metadata").map(|m| s(m, "name")).unwrap_or("");
    let value = o.get("value").and_then(Value::as_i64).unwrap_or(0);
    if name.starts_with("system-") {
        match SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _)| *n == name) {
            None => e.forbidden(
                "metadata.name",
                "priority class names with 'system-' prefix are reserved for system use only",
            ),
            Some((_, v)) if *v != value => e.forbidden(
                "metadata.name",
                &format!("{name} is a system priority class with value {v} and may not be given another value"),
            ),
            Some(_) => {}
        }
    } else if value > HIGHEST_USER_DEFINABLE_PRIORITY {
        e.forbidden(
            "value",
            &format!("maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"),
        );
    }
    if let Some(p) = o.get("preemptionPolicy").filter(|p| !p.is_null())
        && !matches!(p.as_str(), Some("Never" | "PreemptLowerPriority"))
    {
        e.not_supported("preemptionPolicy", p, &["Never", "PreemptLowerPriority"]);
    }
    if let Some(old) = old {
        for f in ["value", "preemptionPolicy"] {
            if old.get(f) != o.get(f) {
                e.forbidden(f, "may not be changed in an update.");
            }
        }
    }
}

fn validate_int_or_percent(e: &mut Errs, field: &str, v: Option<&Value>) {
    let Some(v) = v.filter(|v| !v.is_null()) else { return };
    match percent_or_int(v) {
        Err(msg) => e.invalid(field, v, &msg),
        Ok((n, pct)) => {
            if n < 0 {
                e.invalid(field, v, "must be greater than or equal to 0");
            }
            if pct && n > 100 {
                e.invalid(field, v, "must not be greater than 100%");
            }
        }
    }
}

fn validate_pdb(e: &mut Errs, o: &Value) {
    let Some(spec) = o.get("spec") else { return };
    let min = spec.get("minAvailable").filter(|v| !v.is_null());
    let max = spec.get("maxUnavailable").filter(|v| !v.is_null());
    if min.is_some() && max.is_some() {
        e.invalid_raw("spec", "\"object\"", "minAvailable and maxUnavailable cannot be both set");
    }
    validate_int_or_percent(e, "spec.minAvailable", min);
    validate_int_or_percent(e, "spec.maxUnavailable", max);
    if let Some(p) = spec.get("unhealthyPodEvictionPolicy").filter(|p| !p.is_null())
        && !matches!(p.as_str(), Some("IfHealthyBudget" | "AlwaysAllow"))
    {
        e.not_supported("spec.unhealthyPodEvictionPolicy", p, &["AlwaysAllow", "IfHealthyBudget"]);
    }
    if let Some(sel) = spec.get("selector").filter(|s| s.is_object()) {
        e.0.extend(validate_label_selector_value(sel, "spec.selector"));
    }
}

/// Checks a `metav1.LabelSelector` (JSON) → causes under `path`.
fn validate_label_selector_value(sel: &Value, path: &str) -> Vec<Cause> {
    let mut e = Errs::default();
    e.0.extend(validate_labels_at(sel.get("matchLabels"), &child(path, "matchLabels")));
    for (i, r) in arr(sel, "matchExpressions").iter().enumerate() {
        let p = index(&child(path, "matchExpressions"), i);
        let op = s(r, "operator");
        let values = arr(r, "values");
        match op {
            "In" | "NotIn" if values.is_empty() => {
                e.required(&child(&p, "values"), "must be specified when `operator` is 'In' or 'NotIn'")
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                e.forbidden(&child(&p, "values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => e.invalid_str(&child(&p, "operator"), op, "not a valid selector operator"),
        }
    }
    e.0
}

// ---------------------------------------------------------------------------------------------
// ObjectMeta.

fn validate_object_meta(e: &mut Errs, group: &str, kind: &str, o: &Value, namespaced: bool, old: Option<&Value>) {
    let Some(meta) = o.get("metadata") else {
        e.required("metadata.name", "name or generateName is required");
        return;
    };
    let rule = name_rule(group, kind);
    let name = s(meta, "name");
    let generate = s(meta, "generateName");
    if !generate.is_empty() {
        e.names("metadata.generateName", generate, name_errors(rule, generate, true));
    }
    if name.is_empty() {
        if generate.is_empty() {
            e.required("metadata.name", "name or generateName is required");
        }
    } else {
        e.names("metadata.name", name, name_errors(rule, name, false));
    }
    let namespace = s(meta, "namespace");
    if namespaced {
        if namespace.is_empty() {
            e.required("metadata.namespace", "");
        } else {
            e.names("metadata.namespace", namespace, names::is_dns1123_label(namespace));
        }
    } else if !namespace.is_empty() {
        e.forbidden("metadata.namespace", "not allowed on this type");
    }
    if let Some(g) = meta.get("generation").and_then(Value::as_i64)
        && g < 0
    {
        e.invalid("metadata.generation", &Value::from(g), "must be greater than or equal to 0");
    }
    validate_labels(e, meta.get("labels"), "metadata.labels");
    validate_annotations(e, meta.get("annotations"), "metadata.annotations");
    for (i, f) in arr(meta, "finalizers").iter().enumerate() {
        let f = f.as_str().unwrap_or_default();
        let p = index("metadata.finalizers", i);
        e.names(&p, f, names::is_qualified_name(f));
    }
    for (i, r) in arr(meta, "ownerReferences").iter().enumerate() {
        let p = index("metadata.ownerReferences", i);
        if s(r, "apiVersion").is_empty() {
            e.invalid_str(&child(&p, "apiVersion"), "", "version must not be empty");
        }
        if s(r, "kind").is_empty() {
            e.invalid_str(&child(&p, "kind"), "", "kind must not be empty");
        }
        if s(r, "name").is_empty() {
            e.invalid_str(&child(&p, "name"), "", "name must not be empty");
        }
        if s(r, "uid").is_empty() {
            e.invalid_str(&child(&p, "uid"), "", "uid must not be empty");
        }
    }
    let controllers =
        arr(meta, "ownerReferences").iter().filter(|r| r.get("controller") == Some(&Value::Bool(true))).count();
    if controllers > 1 {
        e.invalid_raw("metadata.ownerReferences", "[...]", "Only one reference can have Controller set to true");
    }
    if let Some(old) = old.and_then(|o| o.get("metadata")) {
        if !s(old, "namespace").is_empty() && s(old, "namespace") != namespace {
            e.invalid_str("metadata.namespace", namespace, "field is immutable");
        }
        if !s(old, "uid").is_empty() && !s(meta, "uid").is_empty() && s(old, "uid") != s(meta, "uid") {
            e.invalid_str("metadata.uid", s(meta, "uid"), "field is immutable");
        }
    }
}

/// Label keys are qualified names, values label values (`ValidateLabels`).
pub fn validate_labels_at(labels: Option<&Value>, path: &str) -> Vec<Cause> {
    let mut e = Errs::default();
    validate_labels(&mut e, labels, path);
    e.0
}

fn validate_labels(e: &mut Errs, labels: Option<&Value>, path: &str) {
    let Some(m) = labels.and_then(Value::as_object) else { return };
    for (k, v) in m {
        e.names(path, k, names::is_qualified_name(k));
        match v.as_str() {
            Some(v) => e.names(path, v, names::is_valid_label_value(v)),
            None => e.invalid(path, v, "label values must be strings"),
        }
    }
}

fn validate_annotations(e: &mut Errs, annotations: Option<&Value>, path: &str) {
    let Some(m) = annotations.and_then(Value::as_object) else { return };
    let mut total = 0;
    for (k, v) in m {
        e.names(path, k, names::is_qualified_name(&k.to_lowercase()));
        total += k.len() + v.as_str().map_or(0, str::len);
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        e.too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT);
    }
}

// ---------------------------------------------------------------------------------------------
// Namespace.

fn validate_namespace(e: &mut Errs, o: &Value) {
    if let Some(spec) = o.get("spec") {
        for (i, f) in arr(spec, "finalizers").iter().enumerate() {
            let f = f.as_str().unwrap_or_default();
            e.names(&index("spec.finalizers", i), f, names::is_qualified_name(f));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pods and pod templates.

const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

fn validate_pod(e: &mut Errs, o: &Value, old: Option<&Value>) {
    match o.get("spec") {
        None => e.required("spec", ""),
        Some(spec) => validate_pod_spec(e, spec, "spec", &["Always", "OnFailure", "Never"]),
    }
    if let (Some(old), Some(spec)) = (old.and_then(|o| o.get("spec")), o.get("spec")) {
        validate_pod_spec_update(e, spec, old);
        containers::validate_ephemeral_containers_update(e, spec, old);
    }
}

/// `ValidatePodSpec`: containers, volumes, policies and resources.
fn validate_pod_spec(e: &mut Errs, spec: &Value, path: &str, restart_policies: &[&str]) {
    // Volumes.
    let mut volume_names = BTreeSet::new();
    for (i, v) in arr(spec, "volumes").iter().enumerate() {
        let p = index(&child(path, "volumes"), i);
        let name = s(v, "name");
        if name.is_empty() {
            e.required(&child(&p, "name"), "");
        } else {
            e.names(&child(&p, "name"), name, names::is_dns1123_label(name));
            if !volume_names.insert(name.to_string()) {
                e.duplicate(&child(&p, "name"), &Value::from(name));
            }
        }
        let sources = VOLUME_SOURCES.iter().filter(|k| v.get(**k).is_some_and(|x| !x.is_null())).count();
        if sources == 0 {
            e.required(&p, "must specify a volume type");
        } else if sources > 1 {
            e.forbidden(&p, "may not specify more than 1 volume type");
        }
    }

    // Containers (names unique across init, regular and ephemeral containers).
    let containers = arr(spec, "containers");
    if containers.is_empty() {
        e.required(&child(path, "containers"), "");
    }
    let mut container_names = BTreeSet::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in arr(spec, list).iter().enumerate() {
            let p = index(&child(path, list), i);
            validate_container(e, c, &p, &volume_names, list != "ephemeralContainers");
            containers::validate_container_kind(e, c, &p, containers::ContainerList::of(list), spec);
            let name = s(c, "name");
            if !name.is_empty() && !container_names.insert(name.to_string()) {
                e.duplicate(&child(&p, "name"), &Value::from(name));
            }
        }
    }

    if let Some(rp) = spec.get("restartPolicy") {
        let v = rp.as_str().unwrap_or_default();
        if !restart_policies.contains(&v) {
            e.not_supported(&child(path, "restartPolicy"), rp, restart_policies);
        }
    }
    if let Some(dp) = spec.get("dnsPolicy") {
        let allowed = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
        if !allowed.contains(&dp.as_str().unwrap_or_default()) {
            e.not_supported(&child(path, "dnsPolicy"), dp, &allowed);
        }
    }
    e.non_negative(&child(path, "terminationGracePeriodSeconds"), spec.get("terminationGracePeriodSeconds"));
    if let Some(n) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && n < 1
    {
        e.invalid(
            &child(path, "activeDeadlineSeconds"),
            &Value::from(n),
            "must be between 1 and 2147483647, inclusive",
        );
    }
    validate_labels(e, spec.get("nodeSelector"), &child(path, "nodeSelector"));
    if let Some(sa) = spec.get("serviceAccountName").and_then(Value::as_str)
        && !sa.is_empty()
    {
        e.names(&child(path, "serviceAccountName"), sa, names::is_dns1123_subdomain(sa));
    }
    if let Some(node) = spec.get("nodeName").and_then(Value::as_str)
        && !node.is_empty()
    {
        e.names(&child(path, "nodeName"), node, names::is_dns1123_subdomain(node));
    }
    for (i, t) in arr(spec, "tolerations").iter().enumerate() {
        let p = index(&child(path, "tolerations"), i);
        let k = s(t, "key");
        if !k.is_empty() {
            e.names(&child(&p, "key"), k, names::is_qualified_name(k));
        }
        let op = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
        match op {
            "Exists" if !s(t, "value").is_empty() => {
                e.invalid_str(&child(&p, "operator"), s(t, "value"), "value must be empty when `operator` is 'Exists'")
            }
            "Exists" | "Equal" => {}
            _ => e.not_supported(&child(&p, "operator"), &Value::from(op), &["Equal", "Exists"]),
        }
        if k.is_empty() && op != "Exists" {
            e.invalid_str(
                &child(&p, "operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            );
        }
        if let Some(eff) = t.get("effect").and_then(Value::as_str)
            && !eff.is_empty()
            && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&eff)
        {
            e.not_supported(&child(&p, "effect"), &Value::from(eff), &["NoSchedule", "PreferNoSchedule", "NoExecute"]);
        }
    }
}

fn validate_container(e: &mut Errs, c: &Value, p: &str, volumes: &BTreeSet<String>, image_required: bool) {
    let name = s(c, "name");
    if name.is_empty() {
        e.required(&child(p, "name"), "");
    } else {
        e.names(&child(p, "name"), name, names::is_dns1123_label(name));
    }
    if image_required && s(c, "image").trim().is_empty() {
        e.required(&child(p, "image"), "");
    }
    if let Some(pp) = c.get("imagePullPolicy") {
        let allowed = ["Always", "IfNotPresent", "Never"];
        if !allowed.contains(&pp.as_str().unwrap_or_default()) {
            e.not_supported(&child(p, "imagePullPolicy"), pp, &allowed);
        }
    }
    if let Some(tmp) = c.get("terminationMessagePolicy") {
        let allowed = ["File", "FallbackToLogsOnError"];
        if !allowed.contains(&tmp.as_str().unwrap_or_default()) {
            e.not_supported(&child(p, "terminationMessagePolicy"), tmp, &allowed);
        }
    }
    // Ports.
    let mut port_names = BTreeSet::new();
    for (i, port) in arr(c, "ports").iter().enumerate() {
        let pp = index(&child(p, "ports"), i);
        let pname = s(port, "name");
        if !pname.is_empty() {
            e.names(&child(&pp, "name"), pname, names::is_valid_port_name(pname));
            if !port_names.insert(pname.to_string()) {
                e.duplicate(&child(&pp, "name"), &Value::from(pname));
            }
        }
        match port.get("containerPort").and_then(Value::as_i64) {
            None | Some(0) => e.required(&child(&pp, "containerPort"), ""),
            Some(n) => {
                for m in names::is_valid_port_num(n) {
                    e.invalid(&child(&pp, "containerPort"), &Value::from(n), &m);
                }
            }
        }
        if let Some(h) = port.get("hostPort").and_then(Value::as_i64)
            && h != 0
        {
            for m in names::is_valid_port_num(h) {
                e.invalid(&child(&pp, "hostPort"), &Value::from(h), &m);
            }
        }
        validate_protocol(e, port.get("protocol"), &child(&pp, "protocol"));
    }
    // Environment.
    for (i, env) in arr(c, "env").iter().enumerate() {
        let ep = index(&child(p, "env"), i);
        let n = s(env, "name");
        if n.is_empty() {
            e.required(&child(&ep, "name"), "");
        } else {
            e.names(&child(&ep, "name"), n, names::is_env_var_name(n));
        }
        if env.get("value").is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
            && env.get("valueFrom").is_some_and(|v| !v.is_null())
        {
            e.invalid_str(&child(&ep, "valueFrom"), "", "may not be specified when `value` is not empty");
        }
    }
    // Volume mounts.
    let mut mount_paths = BTreeSet::new();
    for (i, m) in arr(c, "volumeMounts").iter().enumerate() {
        let mp = index(&child(p, "volumeMounts"), i);
        let n = s(m, "name");
        if n.is_empty() {
            e.required(&child(&mp, "name"), "");
        } else if !volumes.contains(n) {
            e.not_found(&child(&mp, "name"), &Value::from(n));
        }
        let path = s(m, "mountPath");
        if path.is_empty() {
            e.required(&child(&mp, "mountPath"), "");
        } else if !mount_paths.insert(path.to_string()) {
            e.invalid_str(&child(&mp, "mountPath"), path, "must be unique");
        }
    }
    validate_resources(e, c.get("resources"), &child(p, "resources"));
}

fn validate_protocol(e: &mut Errs, v: Option<&Value>, path: &str) {
    match v {
        None => e.required(path, ""),
        Some(v) => {
            let allowed = ["SCTP", "TCP", "UDP"];
            if !allowed.contains(&v.as_str().unwrap_or_default()) {
                e.not_supported(path, v, &allowed);
            }
        }
    }
}

fn validate_resources(e: &mut Errs, r: Option<&Value>, path: &str) {
    let Some(r) = r else { return };
    let mut parsed: BTreeMap<(&str, String), f64> = BTreeMap::new();
    for section in ["limits", "requests"] {
        let Some(m) = obj(r, section) else { continue };
        for (name, q) in m {
            let p = key(&child(path, section), name);
            match parse_quantity_value(q) {
                Err(msg) => e.invalid(&p, q, &msg),
                Ok(v) if v < 0.0 => e.invalid(&p, q, "must be greater than or equal to 0"),
                Ok(v) => {
                    parsed.insert((section, name.clone()), v);
                }
            }
        }
    }
    for ((section, name), req) in parsed.iter().filter(|((s, _), _)| *s == "requests") {
        let _ = section;
        if let Some(limit) = parsed.get(&("limits", name.clone()))
            && req > limit
        {
            let shown = r.pointer(&format!("/requests/{name}")).cloned().unwrap_or(Value::Null);
            let limit_shown = r.pointer(&format!("/limits/{name}")).map(show_quantity).unwrap_or_default();
            e.invalid(
                &key(&child(path, "requests"), name),
                &Value::String(show_quantity(&shown)),
                &format!("must be less than or equal to {name} limit of {limit_shown}"),
            );
        }
    }
}

fn show_quantity(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Fields of a pod spec that may change on update (`ValidatePodUpdate`): container images,
/// activeDeadlineSeconds, added tolerations, removed scheduling gates, and
/// terminationGracePeriodSeconds.
fn validate_pod_spec_update(e: &mut Errs, new: &Value, old: &Value) {
    let mut mutated = old.clone();
    let Some(m) = mutated.as_object_mut() else { return };
    for list in ["containers", "initContainers"] {
        if let (Some(Value::Array(olds)), Some(news)) = (m.get_mut(list), new.get(list).and_then(Value::as_array))
            && olds.len() == news.len()
        {
            for (o, n) in olds.iter_mut().zip(news) {
                if let (Some(o), Some(img)) = (o.as_object_mut(), n.get("image")) {
                    o.insert("image".into(), img.clone());
                }
            }
        }
    }
    for f in ["activeDeadlineSeconds", "terminationGracePeriodSeconds", "schedulingGates", "ephemeralContainers"] {
        match new.get(f) {
            Some(v) => {
                m.insert(f.into(), v.clone());
            }
            None => {
                m.remove(f);
            }
        }
    }
    // Tolerations may only be added.
    let old_tol = arr(old, "tolerations");
    let new_tol = arr(new, "tolerations");
    if old_tol.iter().all(|t| new_tol.contains(t)) {
        match new.get("tolerations") {
            Some(v) => {
                m.insert("tolerations".into(), v.clone());
            }
            None => {
                m.remove("tolerations");
            }
        }
    }
    if !json_equal_ignoring_nulls(&mutated, new) {
        e.forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        );
    }
}

/// Structural equality where a `null` map entry equals a missing one.
fn json_equal_ignoring_nulls(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().all(|k| match (x.get(k), y.get(k)) {
                (None | Some(Value::Null), None | Some(Value::Null)) => true,
                (Some(p), Some(q)) => json_equal_ignoring_nulls(p, q),
                _ => false,
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal_ignoring_nulls(p, q))
        }
        _ => a == b,
    }
}

/// `ValidatePodTemplateSpec` plus the selector match of workload controllers.
fn validate_template(e: &mut Errs, spec: &Value, restart_policies: &[&str], selector: Option<&LabelSelector>) {
    let Some(template) = spec.get("template") else {
        e.required("spec.template", "");
        return;
    };
    let labels = template.pointer("/metadata/labels");
    validate_labels(e, labels, "spec.template.metadata.labels");
    validate_annotations(e, template.pointer("/metadata/annotations"), "spec.template.metadata.annotations");
    if let Some(sel) = selector {
        let labels = string_map(labels);
        if !sel.is_empty() && !sel.matches(&labels) {
            e.invalid_raw(
                "spec.template.metadata.labels",
                &go_string_map(&labels),
                "`selector` does not match template `labels`",
            );
        }
    }
    match template.get("spec") {
        None => e.required("spec.template.spec", ""),
        Some(ps) => {
            validate_pod_spec(e, ps, "spec.template.spec", restart_policies);
            if ps.get("activeDeadlineSeconds").is_some_and(|v| !v.is_null()) && restart_policies == ["Always"] {
                e.forbidden(
                    "spec.template.spec.activeDeadlineSeconds",
                    "activeDeadlineSeconds in ReplicaSet is not Supported",
                );
            }
        }
    }
}

/// The selector of a workload: required, non-empty, valid; returns the parsed selector.
fn validate_selector(e: &mut Errs, spec: &Value, kind_word: &str) -> Option<LabelSelector> {
    let Some(sel) = spec.get("selector").filter(|v| !v.is_null()) else {
        e.required("spec.selector", "");
        return None;
    };
    validate_labels(e, sel.get("matchLabels"), "spec.selector.matchLabels");
    match LabelSelector::from_json(sel) {
        Err(msg) => {
            e.invalid_raw("spec.selector", &go_label_selector(sel), &msg);
            None
        }
        Ok(parsed) if parsed.is_empty() => {
            e.invalid_raw(
                "spec.selector",
                &go_label_selector(sel),
                &format!("empty selector is invalid for {kind_word}"),
            );
            None
        }
        Ok(parsed) => Some(parsed),
    }
}

fn validate_selector_immutable(e: &mut Errs, spec: &Value, old: Option<&Value>) {
    let Some(old_sel) = old.and_then(|o| o.pointer("/spec/selector")) else { return };
    if let Some(sel) = spec.get("selector")
        && !json_equal_ignoring_nulls(sel, old_sel)
    {
        e.invalid_raw("spec.selector", &go_label_selector(sel), "field is immutable");
    }
}

fn validate_workload(e: &mut Errs, o: &Value, old: Option<&Value>, restart: &[&str], selector_required: bool) {
    let Some(spec) = o.get("spec") else {
        e.required("spec", "");
        return;
    };
    e.non_negative("spec.replicas", spec.get("replicas"));
    e.non_negative("spec.minReadySeconds", spec.get("minReadySeconds"));
    let sel = if selector_required || spec.get("selector").is_some() {
        validate_selector(e, spec, &o.get("kind").and_then(Value::as_str).unwrap_or("").to_lowercase())
    } else {
        None
    };
    validate_template(e, spec, restart, sel.as_ref());
    validate_selector_immutable(e, spec, old);
}

fn validate_replication_controller(e: &mut Errs, o: &Value) {
    let Some(spec) = o.get("spec") else { return };
    e.non_negative("spec.replicas", spec.get("replicas"));
    let sel = string_map(spec.get("selector"));
    if sel.is_empty() {
        e.required("spec.selector", "");
    }
    let parsed = LabelSelector::from_map(&sel).ok();
    validate_template(e, spec, &["Always"], parsed.as_ref());
}

fn percent_or_int(v: &Value) -> Result<(i64, bool), String> {
    match v {
        Value::Number(n) => n.as_i64().map(|i| (i, false)).ok_or_else(|| "must be an integer".to_string()),
        Value::String(s) => {
            let digits = s.strip_suffix('%').filter(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()));
            match digits.and_then(|d| d.parse::<i64>().ok()) {
                Some(n) => Ok((n, true)),
                None => Err(names::regex_error(
                    "a valid percent string must be a numeric string followed by an ending '%'",
                    "[0-9]+%",
                    &["1%", "93%"],
                )),
            }
        }
        _ => Err("must be an integer or percentage".to_string()),
    }
}

fn validate_deployment(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let Some(spec) = o.get("spec") else {
        e.required("spec", "");
        return;
    };
    e.non_negative("spec.replicas", spec.get("replicas"));
    e.non_negative("spec.minReadySeconds", spec.get("minReadySeconds"));
    e.non_negative("spec.revisionHistoryLimit", spec.get("revisionHistoryLimit"));
    let sel = validate_selector(e, spec, "deployment");
    validate_template(e, spec, &["Always"], sel.as_ref());
    if let Some(strategy) = spec.get("strategy") {
        let t = strategy.get("type").cloned().unwrap_or(Value::Null);
        match t.as_str() {
            Some("Recreate") => {
                if strategy.get("rollingUpdate").is_some_and(|v| !v.is_null()) {
                    e.forbidden(
                        "spec.strategy.rollingUpdate",
                        "may not be specified when strategy `type` is 'Recreate'",
                    );
                }
            }
            Some("RollingUpdate") => {
                if let Some(ru) = strategy.get("rollingUpdate") {
                    validate_rolling_update(e, ru);
                }
            }
            None => e.required("spec.strategy.type", ""),
            _ => e.not_supported("spec.strategy.type", &t, &["Recreate", "RollingUpdate"]),
        }
    }
    if let Some(pd) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64) {
        let min_ready = spec.get("minReadySeconds").and_then(Value::as_i64).unwrap_or(0);
        if pd < 0 {
            e.invalid("spec.progressDeadlineSeconds", &Value::from(pd), "must be greater than or equal to 0");
        } else if pd <= min_ready {
            e.invalid("spec.progressDeadlineSeconds", &Value::from(pd), "must be greater than minReadySeconds");
        }
    }
    validate_selector_immutable(e, spec, old);
}

fn validate_rolling_update(e: &mut Errs, ru: &Value) {
    let mut values = BTreeMap::new();
    for f in ["maxUnavailable", "maxSurge"] {
        let Some(v) = ru.get(f).filter(|v| !v.is_null()) else { continue };
        let p = format!("spec.strategy.rollingUpdate.{f}");
        match percent_or_int(v) {
            Err(m) => e.invalid(&p, v, &m),
            Ok((n, pct)) => {
                if n < 0 {
                    e.invalid(&p, v, "must be greater than or equal to 0");
                } else if f == "maxUnavailable" && pct && n > 100 {
                    e.invalid(&p, v, "must not be greater than 100%");
                }
                values.insert(f, (n, v.clone()));
            }
        }
    }
    if let (Some((0, mu)), Some((0, _))) = (values.get("maxUnavailable"), values.get("maxSurge")) {
        e.invalid("spec.strategy.rollingUpdate.maxUnavailable", mu, "may not be 0 when `maxSurge` is 0");
    }
}

// ---------------------------------------------------------------------------------------------
// Service.

fn validate_service(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let Some(spec) = o.get("spec") else {
        e.required("spec", "");
        return;
    };
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP");
    let allowed = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !allowed.contains(&ty) {
        e.not_supported("spec.type", &Value::from(ty), &allowed);
    }
    let headless = s(spec, "clusterIP") == "None";
    let ports = arr(spec, "ports");
    if ty == "ExternalName" {
        let name = s(spec, "externalName");
        if name.is_empty() {
            e.required("spec.externalName", "");
        } else {
            e.names("spec.externalName", name, names::is_dns1123_subdomain(name.trim_end_matches('.')));
        }
    } else if ports.is_empty() && !headless {
        e.required("spec.ports", "");
    }
    let mut port_names = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let pp = index("spec.ports", i);
        let name = s(p, "name");
        if ports.len() > 1 && name.is_empty() {
            e.required(&child(&pp, "name"), "");
        } else if !name.is_empty() {
            e.names(&child(&pp, "name"), name, names::is_dns1123_label(name));
            if !port_names.insert(name.to_string()) {
                e.duplicate(&child(&pp, "name"), &Value::from(name));
            }
        }
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        for m in names::is_valid_port_num(port) {
            e.invalid(&child(&pp, "port"), &Value::from(port), &m);
        }
        validate_protocol(e, p.get("protocol"), &child(&pp, "protocol"));
        let proto = s(p, "protocol").to_string();
        if !seen.insert((port, proto.clone())) {
            e.duplicate(&pp, &Value::String(format!("{port}/{proto}")));
        }
        match p.get("targetPort") {
            Some(Value::Number(n)) => {
                let n = n.as_i64().unwrap_or(0);
                for m in names::is_valid_port_num(n) {
                    e.invalid(&child(&pp, "targetPort"), &Value::from(n), &m);
                }
            }
            Some(Value::String(tp)) => e.names(&child(&pp, "targetPort"), tp, names::is_valid_port_name(tp)),
            _ => {}
        }
        if let Some(np) = p.get("nodePort").and_then(Value::as_i64)
            && np != 0
        {
            if ty == "ClusterIP" || ty == "ExternalName" {
                e.forbidden(&child(&pp, "nodePort"), "may not be used when `type` is 'ClusterIP'");
            }
            for m in names::is_valid_port_num(np) {
                e.invalid(&child(&pp, "nodePort"), &Value::from(np), &m);
            }
        }
    }
    if let Some(sa) = spec.get("sessionAffinity") {
        let allowed = ["ClientIP", "None"];
        if !allowed.contains(&sa.as_str().unwrap_or_default()) {
            e.not_supported("spec.sessionAffinity", sa, &allowed);
        }
    }
    validate_labels(e, spec.get("selector"), "spec.selector");
    validate_cluster_ips(e, spec, ty);
    if let Some(old_ip) = old.and_then(|o| o.pointer("/spec/clusterIP")).and_then(Value::as_str) {
        let new_ip = s(spec, "clusterIP");
        if !old_ip.is_empty() && !new_ip.is_empty() && old_ip != new_ip && ty != "ExternalName" {
            e.invalid_str("spec.clusterIP", new_ip, "field is immutable");
        }
    }
}

/// `validateClusterIPs`: `clusterIPs` are IP addresses (or `None` alone), the first one is
/// `clusterIP`, and an ExternalName Service has none.
fn validate_cluster_ips(e: &mut Errs, spec: &Value, ty: &str) {
    let ips: Vec<&str> = arr(spec, "clusterIPs").iter().filter_map(Value::as_str).collect();
    let ip = s(spec, "clusterIP");
    if ty == "ExternalName" {
        if !ips.is_empty() || !ip.is_empty() {
            e.forbidden("spec.clusterIPs", "may not be set for ExternalName services");
        }
        return;
    }
    if !ip.is_empty() && ips.first().is_some_and(|first| *first != ip) {
        e.invalid("spec.clusterIPs", &spec["clusterIPs"], "first value must match `clusterIP`");
    }
    for (i, v) in ips.iter().enumerate() {
        let path = index("spec.clusterIPs", i);
        if *v == "None" {
            if ips.len() > 1 {
                e.invalid_str(&path, v, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)");
            }
            continue;
        }
        if v.parse::<std::net::IpAddr>().is_err() {
            e.invalid_str(&path, v, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ConfigMap, Secret, ServiceAccount.

fn validate_data_keys(e: &mut Errs, o: &Value, fields: &[&str]) -> usize {
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for f in fields {
        let Some(m) = obj(o, f) else { continue };
        for (k, v) in m {
            for msg in names::is_config_map_key(k) {
                e.invalid_str(&key(f, k), k, &msg);
            }
            if !seen.insert(k.clone()) {
                e.invalid_str(&key(f, k), k, "duplicate of key present in data");
            }
            total += v.as_str().map_or(0, str::len);
        }
    }
    total
}

fn validate_immutable_data(e: &mut Errs, o: &Value, old: Option<&Value>, fields: &[&str]) {
    let Some(old) = old else { return };
    if old.get("immutable") != Some(&Value::Bool(true)) {
        return;
    }
    if o.get("immutable") != Some(&Value::Bool(true)) {
        e.forbidden("immutable", "field is immutable when `immutable` is set");
    }
    for f in fields {
        if !json_equal_ignoring_nulls(o.get(*f).unwrap_or(&Value::Null), old.get(*f).unwrap_or(&Value::Null)) {
            e.forbidden(f, "field is immutable when `immutable` is set");
        }
    }
}

fn validate_config_map(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let total = validate_data_keys(e, o, &["data", "binaryData"]);
    if total > MAX_SECRET_SIZE {
        e.too_long("", MAX_SECRET_SIZE);
    }
    validate_immutable_data(e, o, old, &["data", "binaryData"]);
}

/// Byte offset of the first illegal character of standard base64, Go's `illegal base64 data at
/// input byte N`.
fn base64_error(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let body = s.trim_end_matches('=');
    let pad = s.len() - body.len();
    if let Some(i) = body.bytes().position(|c| !(c.is_ascii_alphanumeric() || c == b'+' || c == b'/')) {
        return Some(i);
    }
    let rest = b.len() % 4;
    if pad > 2 || rest != 0 {
        return Some(b.len().saturating_sub(if rest == 0 { pad } else { rest }));
    }
    None
}

fn validate_secret(e: &mut Errs, o: &Value, old: Option<&Value>) {
    validate_data_keys(e, o, &["data"]);
    let mut total = 0;
    if let Some(m) = obj(o, "data") {
        for (k, v) in m {
            let text = v.as_str().unwrap_or_default();
            if let Some(at) = base64_error(text) {
                e.invalid(
                    &key("data", k),
                    &Value::from("<secret contents redacted>"),
                    &format!("illegal base64 data at input byte {at}"),
                );
            }
            total += text.len() * 3 / 4;
        }
    }
    if total > MAX_SECRET_SIZE {
        e.too_long("data", MAX_SECRET_SIZE);
    }
    let ty = o.get("type").and_then(Value::as_str).unwrap_or("Opaque");
    let has = |k: &str| {
        o.pointer(&format!("/data/{}", k.replace('~', "~0").replace('/', "~1"))).is_some()
            || o.pointer(&format!("/stringData/{k}")).is_some()
    };
    match ty {
        "kubernetes.io/service-account-token"
            if o.pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty() =>
        {
            e.required("metadata.annotations[kubernetes.io/service-account.name]", "");
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => e.required("data[.dockercfg]", ""),
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => e.required("data[.dockerconfigjson]", ""),
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    e.required(&format!("data[{k}]"), "");
                }
            }
        }
        "kubernetes.io/ssh-auth" if !has("ssh-privatekey") => e.required("data[ssh-privatekey]", ""),
        _ => {}
    }
    if let Some(old) = old {
        let old_ty = old.get("type").and_then(Value::as_str).unwrap_or("Opaque");
        if old_ty != ty {
            e.invalid_str("type", ty, "field is immutable");
        }
    }
    validate_immutable_data(e, o, old, &["data"]);
}

fn validate_service_account(e: &mut Errs, o: &Value) {
    for (i, sref) in arr(o, "secrets").iter().enumerate() {
        let n = s(sref, "name");
        if !n.is_empty() {
            e.names(&child(&index("secrets", i), "name"), n, names::is_dns1123_subdomain(n));
        }
    }
    for (i, sref) in arr(o, "imagePullSecrets").iter().enumerate() {
        let n = s(sref, "name");
        if !n.is_empty() {
            e.names(&child(&index("imagePullSecrets", i), "name"), n, names::is_dns1123_subdomain(n));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Node, Lease.

fn validate_node(e: &mut Errs, o: &Value) {
    let Some(spec) = o.get("spec") else { return };
    let mut seen = BTreeSet::new();
    for (i, t) in arr(spec, "taints").iter().enumerate() {
        let p = index("spec.taints", i);
        let k = s(t, "key");
        if k.is_empty() {
            e.required(&child(&p, "key"), "");
        } else {
            e.names(&child(&p, "key"), k, names::is_qualified_name(k));
        }
        let v = s(t, "value");
        e.names(&child(&p, "value"), v, names::is_valid_label_value(v));
        let effect = t.get("effect").cloned().unwrap_or(Value::Null);
        let allowed = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
        if !allowed.contains(&effect.as_str().unwrap_or_default()) {
            e.not_supported(&child(&p, "effect"), &effect, &allowed);
        }
        if !seen.insert((k.to_string(), s(t, "effect").to_string())) {
            e.duplicate(&p, &Value::String(format!("{k}:{}", s(t, "effect"))));
        }
    }
    for (i, cidr) in arr(spec, "podCIDRs").iter().enumerate() {
        let c = cidr.as_str().unwrap_or_default();
        if !is_cidr(c) {
            e.invalid_str(
                &index("spec.podCIDRs", i),
                c,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            );
        }
    }
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else { return false };
    let Ok(bits) = bits.parse::<u8>() else { return false };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn validate_lease(e: &mut Errs, o: &Value) {
    let Some(spec) = o.get("spec") else { return };
    if let Some(d) = spec.get("leaseDurationSeconds").and_then(Value::as_i64)
        && d <= 0
    {
        e.invalid("spec.leaseDurationSeconds", &Value::from(d), "must be greater than 0");
    }
    e.non_negative("spec.leaseTransitions", spec.get("leaseTransitions"));
}

// ---------------------------------------------------------------------------------------------
// RBAC.

fn string_list(v: &Value, f: &str) -> Vec<String> {
    arr(v, f).iter().map(|x| x.as_str().unwrap_or_default().to_string()).collect()
}

fn go_string_slice(v: &[String]) -> String {
    format!("[]string{{{}}}", v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(", "))
}

fn validate_rules(e: &mut Errs, o: &Value, namespaced: bool) {
    for (i, rule) in arr(o, "rules").iter().enumerate() {
        let p = index("rules", i);
        if arr(rule, "verbs").is_empty() {
            e.required(&child(&p, "verbs"), "verbs must contain at least one value");
        }
        let urls = string_list(rule, "nonResourceURLs");
        if !urls.is_empty() {
            if namespaced {
                e.invalid_raw(
                    &child(&p, "nonResourceURLs"),
                    &go_string_slice(&urls),
                    "namespaced rules cannot apply to non-resource URLs",
                );
            }
            if !arr(rule, "apiGroups").is_empty()
                || !arr(rule, "resources").is_empty()
                || !arr(rule, "resourceNames").is_empty()
            {
                e.invalid_raw(
                    &child(&p, "nonResourceURLs"),
                    &go_string_slice(&urls),
                    "rules cannot apply to both regular resources and non-resource URLs",
                );
            }
            continue;
        }
        if rule.get("apiGroups").and_then(Value::as_array).is_none_or(Vec::is_empty) {
            e.required(&child(&p, "apiGroups"), "resource rules must supply at least one api group");
        }
        if arr(rule, "resources").is_empty() {
            e.required(&child(&p, "resources"), "resource rules must supply at least one resource");
        }
    }
}

fn go_role_ref(r: &Value) -> String {
    format!("rbac.RoleRef{{APIGroup:{:?}, Kind:{:?}, Name:{:?}}}", s(r, "apiGroup"), s(r, "kind"), s(r, "name"))
}

fn validate_binding(e: &mut Errs, o: &Value, old: Option<&Value>, namespaced: bool) {
    const RBAC: &str = "rbac.authorization.k8s.io";
    let role_ref = o.get("roleRef").cloned().unwrap_or(Value::Null);
    if role_ref.is_null() {
        e.required("roleRef", "");
    } else {
        let g = role_ref.get("apiGroup").cloned().unwrap_or(Value::from(""));
        if g.as_str() != Some(RBAC) {
            e.not_supported("roleRef.apiGroup", &g, &[RBAC]);
        }
        let k = role_ref.get("kind").cloned().unwrap_or(Value::from(""));
        let kinds: &[&str] = if namespaced { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
        if !kinds.contains(&k.as_str().unwrap_or_default()) {
            e.not_supported("roleRef.kind", &k, kinds);
        }
        let n = s(&role_ref, "name");
        if n.is_empty() {
            e.required("roleRef.name", "");
        } else {
            e.names("roleRef.name", n, name_errors(NameRule::PathSegment, n, false));
        }
    }
    for (i, sub) in arr(o, "subjects").iter().enumerate() {
        let p = index("subjects", i);
        let name = s(sub, "name");
        if name.is_empty() {
            e.required(&child(&p, "name"), "");
        }
        let kind = sub.get("kind").cloned().unwrap_or(Value::from(""));
        let group = s(sub, "apiGroup");
        match kind.as_str().unwrap_or_default() {
            "ServiceAccount" => {
                if !group.is_empty() {
                    e.not_supported(&child(&p, "apiGroup"), &Value::from(group), &[""]);
                }
                if !name.is_empty() {
                    e.names(&child(&p, "name"), name, names::is_dns1123_subdomain(name));
                }
                if !namespaced && s(sub, "namespace").is_empty() {
                    e.required(&child(&p, "namespace"), "");
                }
            }
            "User" | "Group" => {
                if group != RBAC {
                    e.not_supported(&child(&p, "apiGroup"), &Value::from(group), &[RBAC]);
                }
            }
            _ => e.not_supported(&child(&p, "kind"), &kind, &["ServiceAccount", "User", "Group"]),
        }
    }
    if let Some(old_ref) = old.and_then(|o| o.get("roleRef"))
        && !json_equal_ignoring_nulls(old_ref, &role_ref)
    {
        e.invalid_raw("roleRef", &go_role_ref(&role_ref), "cannot change roleRef");
    }
}

// ---------------------------------------------------------------------------------------------
// Events.

fn validate_core_event(e: &mut Errs, o: &Value) {
    let ns = o.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    let involved_ns = o.pointer("/involvedObject/namespace").and_then(Value::as_str).unwrap_or("");
    if !involved_ns.is_empty() && !ns.is_empty() && involved_ns != ns {
        e.invalid_str("involvedObject.namespace", involved_ns, "does not match event.namespace");
    }
    if let Some(t) = o.get("type").and_then(Value::as_str)
        && !t.is_empty()
        && o.get("eventTime").is_some_and(|v| !v.is_null())
        && !["Normal", "Warning"].contains(&t)
    {
        e.not_supported("type", &Value::from(t), &["Normal", "Warning"]);
    }
    if let Some(note) = o.get("message").and_then(Value::as_str)
        && o.get("eventTime").is_some_and(|v| !v.is_null())
        && note.len() > 1024
    {
        e.too_long("message", 1024);
    }
}

fn validate_events_event(e: &mut Errs, o: &Value) {
    if o.get("eventTime").is_none_or(Value::is_null) {
        e.required("eventTime", "");
    }
    let t = o.get("type").cloned().unwrap_or(Value::from(""));
    if !["Normal", "Warning"].contains(&t.as_str().unwrap_or_default()) {
        e.not_supported("type", &t, &["Normal", "Warning"]);
    }
    for f in ["reportingController", "reportingInstance", "action", "reason"] {
        if s(o, f).is_empty() {
            e.required(f, "");
        }
    }
    if s(o, "note").len() > 1024 {
        e.too_long("note", 1024);
    }
    let ns = o.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    let regarding_ns = o.pointer("/regarding/namespace").and_then(Value::as_str).unwrap_or("");
    if !regarding_ns.is_empty() && !ns.is_empty() && regarding_ns != ns {
        e.invalid_str("regarding.namespace", regarding_ns, "does not match event.namespace");
    }
}

// ---------------------------------------------------------------------------------------------
// CustomResourceDefinition.

fn validate_crd(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let Some(spec) = o.get("spec") else {
        e.required("spec", "");
        return;
    };
    let group = s(spec, "group");
    if group.is_empty() {
        e.required("spec.group", "");
    } else {
        e.names("spec.group", group, names::is_dns1123_subdomain(group));
        if group.split('.').count() < 2 {
            e.invalid_str("spec.group", group, "should be a domain with at least one dot");
        }
    }
    let plural = spec.pointer("/names/plural").and_then(Value::as_str).unwrap_or("");
    if plural.is_empty() {
        e.required("spec.names.plural", "");
    } else {
        e.names("spec.names.plural", plural, names::is_dns1123_label(plural));
    }
    if spec.pointer("/names/kind").and_then(Value::as_str).unwrap_or("").is_empty() {
        e.required("spec.names.kind", "");
    }
    let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        e.invalid_str("metadata.name", name, "must be spec.names.plural+\".\"+spec.group");
    }
    let scope = spec.get("scope").cloned().unwrap_or(Value::from(""));
    if !["Cluster", "Namespaced"].contains(&scope.as_str().unwrap_or_default()) {
        e.not_supported("spec.scope", &scope, &["Cluster", "Namespaced"]);
    }
    let versions = arr(spec, "versions");
    if versions.is_empty() {
        e.invalid_raw(
            "spec.versions",
            "[]apiextensions.CustomResourceDefinitionVersion(nil)",
            "must have exactly one version marked as storage version",
        );
    } else {
        let storage = versions.iter().filter(|v| v.get("storage") == Some(&Value::Bool(true))).count();
        if storage != 1 {
            e.invalid_raw("spec.versions", "[...]", "must have exactly one version marked as storage version");
        }
        let mut seen = BTreeSet::new();
        for (i, v) in versions.iter().enumerate() {
            let n = s(v, "name");
            let p = child(&index("spec.versions", i), "name");
            e.names(&p, n, names::is_dns1035_label(n));
            if !seen.insert(n.to_string()) {
                e.duplicate(&p, &Value::from(n));
            }
        }
    }
    validate_crd_conversion(e, spec);
    if let Some(old) = old.and_then(|o| o.get("spec")) {
        if s(old, "group") != group {
            e.invalid_str("spec.group", group, "field is immutable");
        }
        if old.pointer("/names/plural") != spec.pointer("/names/plural") {
            e.invalid_str("spec.names.plural", plural, "field is immutable");
        }
    }
}

/// apiextensions' `ValidateCustomResourceConversion` on a v1 CRD's `spec.conversion`, with the
/// field paths of the internal type kube-apiserver reports (`spec.conversion.webhookClientConfig`,
/// `spec.conversion.conversionReviewVersions`): the strategy is None or Webhook; a Webhook has
/// exactly one of an https `url` (host, no user, query or fragment) or a `service` (name,
/// namespace, a valid port, a path starting with '/'), and review versions naming v1 or
/// v1beta1; None has neither.
fn validate_crd_conversion(e: &mut Errs, spec: &Value) {
    let Some(conversion) = spec.get("conversion").filter(|c| c.is_object()) else { return };
    let strategy = s(conversion, "strategy");
    match strategy {
        "" => e.required("spec.conversion.strategy", ""),
        "None" | "Webhook" => {}
        other => e.not_supported("spec.conversion.strategy", &Value::from(other), &["None", "Webhook"]),
    }
    let webhook = conversion.get("webhook").filter(|w| w.is_object());
    let client_config = webhook.and_then(|w| w.get("clientConfig")).filter(|c| c.is_object());
    let review_versions = webhook.map(|w| arr(w, "conversionReviewVersions")).unwrap_or(&[]);
    let cc_path = "spec.conversion.webhookClientConfig";
    if strategy != "Webhook" {
        if client_config.is_some() {
            e.forbidden(cc_path, "should not be set when strategy is not set to Webhook");
        }
        if !review_versions.is_empty() {
            e.forbidden(
                "spec.conversion.conversionReviewVersions",
                "should not be set when strategy is not set to Webhook",
            );
        }
        return;
    }
    match client_config {
        None => e.required(cc_path, "required when strategy is set to Webhook"),
        Some(cc) => {
            let url = cc.get("url").and_then(Value::as_str);
            let service = cc.get("service").filter(|v| v.is_object());
            match (url, service) {
                (Some(url), None) => validate_webhook_url(e, &child(cc_path, "url"), url),
                (None, Some(svc)) => validate_webhook_service(e, &child(cc_path, "service"), svc),
                _ => e.required(cc_path, "exactly one of url or service is required"),
            }
        }
    }
    let p = "spec.conversion.conversionReviewVersions";
    if review_versions.is_empty() {
        e.required(p, "must include at least one of v1, v1beta1");
        return;
    }
    let mut seen = BTreeSet::new();
    let mut accepted = false;
    for (i, v) in review_versions.iter().enumerate() {
        let v = v.as_str().unwrap_or_default();
        if !seen.insert(v) {
            e.invalid_str(&index(p, i), v, "duplicate version");
            continue;
        }
        e.names(&index(p, i), v, names::is_dns1035_label(v));
        accepted |= matches!(v, "v1" | "v1beta1");
    }
    if !accepted {
        let list: Vec<String> = review_versions.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect();
        e.invalid_raw(
            p,
            &format!("[]string{{{}}}", list.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ")),
            "must include at least one of v1, v1beta1",
        );
    }
}

/// k8s.io/apiserver's `ValidateWebhookURL` with https forced.
fn validate_webhook_url(e: &mut Errs, path: &str, url: &str) {
    let Some((scheme, rest)) = url.split_once("://") else {
        e.invalid_str(path, url, "host must be specified");
        return;
    };
    if scheme != "https" {
        e.invalid_str(path, scheme, "'https' is the only allowed URL scheme");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        e.invalid_str(path, url, "user information is not permitted in the URL");
    }
    if authority.is_empty() {
        e.invalid_str(path, authority, "host must be specified");
    }
    if rest.contains('#') {
        e.invalid_str(path, url, "fragments are not permitted in the URL");
    }
    if rest.contains('?') {
        e.invalid_str(path, url, "query parameters are not permitted in the URL");
    }
}

/// k8s.io/apiserver's `ValidateWebhookService`.
fn validate_webhook_service(e: &mut Errs, path: &str, svc: &Value) {
    if s(svc, "name").is_empty() {
        e.required(&child(path, "name"), "service name is required");
    }
    if s(svc, "namespace").is_empty() {
        e.required(&child(path, "namespace"), "service namespace is required");
    }
    if let Some(port) = svc.get("port").and_then(Value::as_i64)
        && !(1..=65535).contains(&port)
    {
        e.invalid(
            &child(path, "port"),
            &Value::from(port),
            "port is not valid: must be between 1 and 65535, inclusive",
        );
    }
    if let Some(p) = svc.get("path").and_then(Value::as_str)
        && !p.is_empty()
        && !p.starts_with('/')
    {
        e.invalid_str(&child(path, "path"), p, "must start with a '/'");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Validates and compares `field: message` lines with `want` (order-insensitive).
    fn check(api_version: &str, kind: &str, obj: Value, old: Option<Value>, want: &[&str]) {
        let got: BTreeSet<String> = validate(api_version, kind, &obj, old.as_ref())
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        assert_eq!(got, want, "\nobject: {obj}");
    }

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec})
    }

    fn deployment(labels: Value, selector: Value) -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": selector,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "progressDeadlineSeconds": 600,
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}
            }
        })
    }

    fn crd_with_conversion(conversion: Value) -> Value {
        json!({"metadata": {"name": "crontabs.stable.example.com"}, "spec": {"group": "stable.example.com", "scope": "Namespaced",
            "names": {"plural": "crontabs", "kind": "CronTab"},
            "versions": [{"name": "v1", "served": true, "storage": true}, {"name": "v2", "served": true, "storage": false}],
            "conversion": conversion}})
    }

    #[test]
    fn a_webhook_conversion_needs_one_https_url_or_service_and_a_known_review_version() {
        let av = "apiextensions.k8s.io/v1";
        let kind = "CustomResourceDefinition";
        let good = json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "ns", "name": "conv", "path": "/convert", "port": 443}}}});
        check(av, kind, crd_with_conversion(good), None, &[]);
        check(av, kind, crd_with_conversion(json!({"strategy": "None"})), None, &[]);
        check(
            av,
            kind,
            crd_with_conversion(json!({"strategy": "Webhook"})),
            None,
            &[
                "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook",
                "spec.conversion.conversionReviewVersions: Required value: must include at least one of v1, v1beta1",
            ],
        );
        check(
            av,
            kind,
            crd_with_conversion(json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v2"],
                "clientConfig": {"url": "http://conv.example.com/convert"}}})),
            None,
            &[
                "spec.conversion.webhookClientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme",
                "spec.conversion.conversionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1",
            ],
        );
        check(
            av,
            kind,
            crd_with_conversion(json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1beta1"],
                "clientConfig": {"url": "https://x/convert", "service": {"namespace": "ns", "name": "conv"}}}})),
            None,
            &["spec.conversion.webhookClientConfig: Required value: exactly one of url or service is required"],
        );
        check(
            av,
            kind,
            crd_with_conversion(json!({"strategy": "Magic", "webhook": {"clientConfig": {"url": "https://x/"}}})),
            None,
            &[
                "spec.conversion.strategy: Unsupported value: \"Magic\": supported values: \"None\", \"Webhook\"",
                "spec.conversion.webhookClientConfig: Forbidden: should not be set when strategy is not set to Webhook",
            ],
        );
    }

    fn api_service(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name}, "spec": spec})
    }

    #[test]
    fn an_apiservice_is_named_version_dot_group_with_priorities_in_range() {
        let av = "apiregistration.k8s.io/v1";
        let good = json!({"group": "wardle.example.com", "version": "v1alpha1", "groupPriorityMinimum": 1000,
            "versionPriority": 15, "service": {"namespace": "wardle", "name": "api", "port": 443}, "insecureSkipTLSVerify": true});
        check(av, "APIService", api_service("v1alpha1.wardle.example.com", good.clone()), None, &[]);
        check(
            av,
            "APIService",
            api_service("v1.wardle.example.com", good.clone()),
            None,
            &[
                "metadata.name: Invalid value: \"v1.wardle.example.com\": must be `spec.version+\".\"+spec.group`: \"v1alpha1.wardle.example.com\"",
            ],
        );
        check(
            av,
            "APIService",
            api_service("v2.", json!({"version": "v2", "groupPriorityMinimum": 0, "versionPriority": 1001})),
            None,
            &[
                "spec.group: Required value: only v1 may have an empty group and it better be legacy kube",
                "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
            ],
        );
    }

    #[test]
    fn an_apiservice_may_not_both_skip_verification_and_carry_a_ca_bundle_and_a_local_one_has_neither() {
        let av = "apiregistration.k8s.io/v1";
        let both = json!({"group": "x.io", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
            "service": {"namespace": "", "name": "api"}, "insecureSkipTLSVerify": true, "caBundle": "AAAA"});
        check(
            av,
            "APIService",
            api_service("v1.x.io", both),
            None,
            &[
                "spec.service.namespace: Required value",
                "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
            ],
        );
        let local = json!({"group": "x.io", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
            "insecureSkipTLSVerify": true, "caBundle": "AAAA"});
        check(
            av,
            "APIService",
            api_service("v1.x.io", local),
            None,
            &[
                "spec.caBundle: Invalid value: \"3 bytes\": local APIServices may not have a caBundle",
                "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify",
            ],
        );
    }

    #[test]
    fn valid_objects_have_no_causes() {
        check(
            "v1",
            "Pod",
            pod(
                json!({"containers": [{"name": "a", "image": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}),
            ),
            None,
            &[],
        );
        check(
            "apps/v1",
            "Deployment",
            deployment(json!({"app": "web"}), json!({"matchLabels": {"app": "web"}})),
            None,
            &[],
        );
        check("v1", "Namespace", json!({"metadata": {"name": "team-a"}}), None, &[]);
        check(
            "v1",
            "ConfigMap",
            json!({"metadata": {"name": "c", "namespace": "d"}, "data": {"a.txt": "x"}}),
            None,
            &[],
        );
    }

    #[test]
    fn object_names_must_be_dns_subdomains() {
        check(
            "v1",
            "ConfigMap",
            json!({"metadata": {"name": "Bad_Name", "namespace": "default"}}),
            None,
            &[
                "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
        );
        check(
            "v1",
            "ConfigMap",
            json!({"metadata": {"namespace": "default"}}),
            None,
            &["metadata.name: Required value: name or generateName is required"],
        );
        check("v1", "ConfigMap", json!({"metadata": {"generateName": "web-", "namespace": "default"}}), None, &[]);
        check("v1", "ConfigMap", json!({"metadata": {"name": "a"}}), None, &["metadata.namespace: Required value"]);
        check(
            "v1",
            "ConfigMap",
            json!({"metadata": {"name": "a", "namespace": "n", "generation": -1}}),
            None,
            &["metadata.generation: Invalid value: -1: must be greater than or equal to 0"],
        );
        check(
            "v1",
            "Namespace",
            json!({"metadata": {"name": "a", "namespace": "x"}}),
            None,
            &["metadata.namespace: Forbidden: not allowed on this type"],
        );
        let ns = validate("v1", "Namespace", &json!({"metadata": {"name": "a.b"}}), None);
        assert!(ns[0].message.contains("RFC 1123 label"), "{ns:?}");
        let svc = validate(
            "v1",
            "Service",
            &json!({"metadata": {"name": "1web", "namespace": "d"}, "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}),
            None,
        );
        assert!(svc[0].message.contains("DNS-1035 label"), "{svc:?}");
        check("rbac.authorization.k8s.io/v1", "ClusterRole", json!({"metadata": {"name": "system:Admin"}}), None, &[]);
        check(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            json!({"metadata": {"name": "a/b"}}),
            None,
            &["metadata.name: Invalid value: \"a/b\": may not contain '/'"],
        );
    }

    #[test]
    fn labels_and_annotations_are_checked() {
        let causes = validate(
            "v1",
            "ConfigMap",
            &json!({"metadata": {"name": "c", "namespace": "d", "labels": {"a b": "ok", "k": "-bad"}, "annotations": {"x/y/z": "v"}}}),
            None,
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["metadata.labels", "metadata.labels", "metadata.annotations"]);
        assert!(causes[0].message.starts_with("Invalid value: \"a b\": name part must consist of"));
        assert!(causes[1].message.starts_with("Invalid value: \"-bad\": a valid label must be"));
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT + 1);
        check(
            "v1",
            "ConfigMap",
            json!({"metadata": {"name": "c", "namespace": "d", "annotations": {"a": big}}}),
            None,
            &["metadata.annotations: Too long: may not be more than 262144 bytes"],
        );
    }

    #[test]
    fn pod_containers_are_required_named_uniquely_and_need_images() {
        check("v1", "Pod", pod(json!({})), None, &["spec.containers: Required value"]);
        check(
            "v1",
            "Pod",
            pod(
                json!({"containers": [{"name": "a", "image": "x"}, {"name": "a", "image": ""}], "restartPolicy": "Sometimes"}),
            ),
            None,
            &[
                "spec.containers[1].name: Duplicate value: \"a\"",
                "spec.containers[1].image: Required value",
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            ],
        );
        check(
            "v1",
            "Pod",
            pod(
                json!({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 70000, "protocol": "TCP"}, {"containerPort": 80, "protocol": "ICMP"}], "volumeMounts": [{"name": "v", "mountPath": "/x"}]}]}),
            ),
            None,
            &[
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].ports[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.containers[0].volumeMounts[0].name: Not found: \"v\"",
            ],
        );
    }

    #[test]
    fn resource_requests_may_not_exceed_limits() {
        check(
            "v1",
            "Pod",
            pod(
                json!({"containers": [{"name": "a", "image": "x", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}),
            ),
            None,
            &[
                "spec.containers[0].resources.requests[cpu]: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
            ],
        );
        check(
            "v1",
            "Pod",
            pod(
                json!({"containers": [{"name": "a", "image": "x", "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "128Mi"}}}]}),
            ),
            None,
            &[],
        );
        let bad = validate(
            "v1",
            "Pod",
            &pod(json!({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"cpu": "lots"}}}]})),
            None,
        );
        assert_eq!(bad[0].field, "spec.containers[0].resources.limits[cpu]");
    }

    #[test]
    fn pod_updates_may_change_only_images_and_a_few_fields() {
        let old = pod(
            json!({"containers": [{"name": "a", "image": "x:1"}], "tolerations": [{"key": "k", "operator": "Exists"}]}),
        );
        let image = pod(
            json!({"containers": [{"name": "a", "image": "x:2"}], "tolerations": [{"key": "k", "operator": "Exists"}, {"key": "j", "operator": "Exists"}]}),
        );
        check("v1", "Pod", image, Some(old.clone()), &[]);
        let changed = pod(
            json!({"containers": [{"name": "a", "image": "x:1", "args": ["y"]}], "tolerations": [{"key": "k", "operator": "Exists"}]}),
        );
        let causes = validate("v1", "Pod", &changed, Some(&old));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec");
        assert!(causes[0].message.starts_with("Forbidden: pod updates may not change fields other than"));
    }

    #[test]
    fn deployment_selector_must_match_template_labels() {
        check(
            "apps/v1",
            "Deployment",
            deployment(json!({"app": "other"}), json!({"matchLabels": {"app": "web"}})),
            None,
            &[
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`",
            ],
        );
        let mut d = deployment(json!({"app": "web"}), json!(null));
        d["spec"].as_object_mut().unwrap().remove("selector");
        check("apps/v1", "Deployment", d, None, &["spec.selector: Required value"]);
        check(
            "apps/v1",
            "Deployment",
            deployment(json!({"app": "web"}), json!({})),
            None,
            &[
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment",
            ],
        );
    }

    #[test]
    fn deployment_selector_is_immutable() {
        let old = deployment(json!({"app": "web", "v": "2"}), json!({"matchLabels": {"app": "web"}}));
        let new = deployment(json!({"app": "web", "v": "2"}), json!({"matchLabels": {"app": "web", "v": "2"}}));
        check(
            "apps/v1",
            "Deployment",
            new,
            Some(old),
            &[
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"web\", \"v\":\"2\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable",
            ],
        );
    }

    #[test]
    fn deployment_strategy_and_counts_are_checked() {
        let mut d = deployment(json!({"app": "web"}), json!({"matchLabels": {"app": "web"}}));
        d["spec"]["replicas"] = json!(-1);
        d["spec"]["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}});
        d["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        check(
            "apps/v1",
            "Deployment",
            d.clone(),
            None,
            &[
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0",
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            ],
        );
        d["spec"]["replicas"] = json!(1);
        d["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        d["spec"]["strategy"] = json!({"type": "Recreate", "rollingUpdate": {"maxSurge": 1}});
        check(
            "apps/v1",
            "Deployment",
            d.clone(),
            None,
            &["spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"],
        );
        d["spec"]["strategy"] = json!({"type": "Blue"});
        check(
            "apps/v1",
            "Deployment",
            d.clone(),
            None,
            &["spec.strategy.type: Unsupported value: \"Blue\": supported values: \"Recreate\", \"RollingUpdate\""],
        );
        d["spec"]["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "x"}});
        check(
            "apps/v1",
            "Deployment",
            d,
            None,
            &[
                "spec.strategy.rollingUpdate.maxSurge: Invalid value: \"x\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            ],
        );
    }

    #[test]
    fn replica_sets_check_selector_and_template() {
        let rs = json!({"metadata": {"name": "r", "namespace": "d"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "c"}}, "spec": {"containers": [{"name": "x", "image": "y"}]}}}});
        let causes = validate("apps/v1", "ReplicaSet", &rs, None);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
    }

    #[test]
    fn services_need_ports_unless_headless_or_external_name() {
        let svc = |spec: Value| json!({"metadata": {"name": "web", "namespace": "d"}, "spec": spec});
        check("v1", "Service", svc(json!({"type": "ClusterIP"})), None, &["spec.ports: Required value"]);
        check("v1", "Service", svc(json!({"clusterIP": "None"})), None, &[]);
        check(
            "v1",
            "Service",
            svc(
                json!({"clusterIP": "10.43.0.300", "clusterIPs": ["10.43.0.300"], "ports": [{"port": 80, "protocol": "TCP"}]}),
            ),
            None,
            &[
                "spec.clusterIPs[0]: Invalid value: \"10.43.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ],
        );
        check(
            "v1",
            "Service",
            svc(json!({"type": "ExternalName", "externalName": "example.com", "clusterIP": "10.43.0.5"})),
            None,
            &["spec.clusterIPs: Forbidden: may not be set for ExternalName services"],
        );
        check("v1", "Service", svc(json!({"type": "ExternalName"})), None, &["spec.externalName: Required value"]);
        check(
            "v1",
            "Service",
            svc(
                json!({"type": "Magic", "ports": [{"port": 0, "protocol": "TCP", "name": "a"}, {"port": 80, "protocol": "TCP"}]}),
            ),
            None,
            &[
                "spec.type: Unsupported value: \"Magic\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
                "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[1].name: Required value",
            ],
        );
        let old = svc(json!({"clusterIP": "10.0.0.1", "ports": [{"port": 80, "protocol": "TCP"}]}));
        check(
            "v1",
            "Service",
            svc(json!({"clusterIP": "10.0.0.2", "ports": [{"port": 80, "protocol": "TCP"}]})),
            Some(old),
            &["spec.clusterIP: Invalid value: \"10.0.0.2\": field is immutable"],
        );
    }

    #[test]
    fn config_map_and_secret_keys_must_be_valid() {
        check(
            "v1",
            "ConfigMap",
            json!({"metadata": {"name": "c", "namespace": "d"}, "data": {"a/b": "x"}}),
            None,
            &[
                "data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            ],
        );
        check(
            "v1",
            "Secret",
            json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque", "data": {"k": "aGVsbG8="}}),
            None,
            &[],
        );
        check(
            "v1",
            "Secret",
            json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque", "data": {"k": "not base64!"}}),
            None,
            &["data[k]: Invalid value: \"<secret contents redacted>\": illegal base64 data at input byte 3"],
        );
        check(
            "v1",
            "Secret",
            json!({"metadata": {"name": "s", "namespace": "d"}, "type": "kubernetes.io/tls", "data": {"tls.crt": ""}}),
            None,
            &["data[tls.key]: Required value"],
        );
        let old = json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque", "immutable": true, "data": {"k": "YQ=="}});
        check(
            "v1",
            "Secret",
            json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque", "immutable": true, "data": {"k": "Yg=="}}),
            Some(old),
            &["data: Forbidden: field is immutable when `immutable` is set"],
        );
    }

    #[test]
    fn rbac_rules_and_bindings_are_checked() {
        check(
            "rbac.authorization.k8s.io/v1",
            "Role",
            json!({"metadata": {"name": "r", "namespace": "d"}, "rules": [{"resources": ["pods"]}, {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}),
            None,
            &[
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
            ],
        );
        let rb = |role_ref: Value| json!({"metadata": {"name": "b", "namespace": "d"}, "roleRef": role_ref, "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "d"}]});
        check(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            rb(json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"})),
            None,
            &[],
        );
        check(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            json!({"metadata": {"name": "b", "namespace": "d"}}),
            None,
            &["roleRef: Required value"],
        );
        check(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            rb(json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "other"})),
            Some(rb(json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}))),
            &[
                "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"other\"}: cannot change roleRef",
            ],
        );
        check(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            json!({"metadata": {"name": "b"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "x"}, {"kind": "Robot", "name": "y"}]}),
            None,
            &[
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].namespace: Required value",
                "subjects[1].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
            ],
        );
    }

    #[test]
    fn nodes_leases_and_events_are_checked() {
        check(
            "v1",
            "Node",
            json!({"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "k", "effect": "Sometimes"}], "podCIDRs": ["10.0.0.0/24", "nope"]}}),
            None,
            &[
                "spec.taints[0].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                "spec.podCIDRs[1]: Invalid value: \"nope\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ],
        );
        check(
            "coordination.k8s.io/v1",
            "Lease",
            json!({"metadata": {"name": "l", "namespace": "d"}, "spec": {"leaseDurationSeconds": 0}}),
            None,
            &["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"],
        );
        check(
            "v1",
            "Event",
            json!({"metadata": {"name": "e", "namespace": "a"}, "involvedObject": {"kind": "Pod", "namespace": "b", "name": "p"}}),
            None,
            &["involvedObject.namespace: Invalid value: \"b\": does not match event.namespace"],
        );
        let causes = validate(
            "events.k8s.io/v1",
            "Event",
            &json!({"metadata": {"name": "e", "namespace": "a"}, "type": "Normal"}),
            None,
        );
        let fields: BTreeSet<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            BTreeSet::from(["eventTime", "reportingController", "reportingInstance", "action", "reason"])
        );
    }

    #[test]
    fn crd_names_must_be_plural_dot_group() {
        let crd = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"}, "versions": [{"name": "v1", "served": true, "storage": true}]}});
        check("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd.clone(), None, &[]);
        let mut bad = crd;
        bad["metadata"]["name"] = json!("widget.example.com");
        check(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            bad,
            None,
            &["metadata.name: Invalid value: \"widget.example.com\": must be spec.names.plural+\".\"+spec.group"],
        );
    }

    #[test]
    fn priority_classes_reserve_the_system_prefix_and_cap_user_values() {
        let pc = |name: &str, value: i64| json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value});
        assert!(validate("scheduling.k8s.io/v1", "PriorityClass", &pc("high", 1000), None).is_empty());
        assert!(
            validate("scheduling.k8s.io/v1", "PriorityClass", &pc("system-node-critical", 2_000_001_000), None)
                .is_empty()
        );
        let causes = validate("scheduling.k8s.io/v1", "PriorityClass", &pc("system-mine", 5), None);
        assert_eq!(causes[0].field, "metadata.name");
        let causes = validate("scheduling.k8s.io/v1", "PriorityClass", &pc("huge", 2_000_000_000), None);
        assert_eq!(causes[0].field, "value");
        let causes = validate("scheduling.k8s.io/v1", "PriorityClass", &pc("high", 1), Some(&pc("high", 2)));
        assert_eq!(causes[0].message, "Forbidden: may not be changed in an update.");
    }

    #[test]
    fn a_pdb_may_not_set_both_min_available_and_max_unavailable() {
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"minAvailable": 1, "maxUnavailable": "150%"}});
        let causes = validate("policy/v1", "PodDisruptionBudget", &pdb, None);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, vec!["spec", "spec.maxUnavailable"]);
    }

    #[test]
    fn metadata_only_validation_follows_the_given_scope() {
        let cr = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "Bad_Name"}});
        let causes = validate_metadata(&cr, false, None);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.name");
    }
}
