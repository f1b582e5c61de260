//! Strategic merge patch (`application/strategic-merge-patch+json`), applied the way the Kubernetes
//! API server applies it.
//!
//! Semantics follow "Strategic Merge Patch"
//! (<https://github.com/kubernetes/community/blob/master/contributors/devel/sig-api-machinery/strategic-merge-patch.md>),
//! "Preserve Order in Strategic Merge Patch" and the task page "Update API Objects in Place Using
//! kubectl patch":
//!
//! - maps merge recursively; a `null` value deletes the key;
//! - lists whose field has `patchStrategy: merge` are merged: lists of maps element by element,
//!   matched on the field's `patchMergeKey` (containers by `name`, container ports by
//!   `containerPort`, ...), lists of scalars as a set union; every other list is replaced;
//! - directives: `$patch: replace` / `$patch: delete` in a map (replace it / empty it), the same in
//!   a list element (`replace`: the list becomes the patch's elements; `delete`: drop the element
//!   with that merge key); `$retainKeys: [..]` (drop keys of the live map not listed);
//!   `$setElementOrder/<list>: [..]` (final order of a merged list); `$deleteFromPrimitiveList/<list>: [..]`
//!   (remove scalars from a merged scalar list).
//!
//! Order of a merged list (no `$setElementOrder`): the patch's items in patch order interleaved
//! with the live-only items in live order; an item new to the list goes before the remaining live
//! items (so adding a container puts it first, as the kubectl patch docs show).
//!
//! Patch strategies are the `patchStrategy`/`patchMergeKey` struct tags of the Kubernetes Go types
//! (the `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key` of the OpenAPI spec), which
//! k8s-openapi does not carry; they are tabulated below for the types of the built-in API groups.
//! Custom resources have no strategies: Kubernetes answers 415 for them, and so does
//! [`strategic_merge_patch`] (see [`supports_strategic_merge_patch`]).

// `ApiError` is the API's error type everywhere; boxing it here would only move the allocation.
#![allow(clippy::result_large_err)]

use serde_json::{Map, Value};

use crate::ApiError;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// API groups whose kinds are compiled-in Kubernetes types and so accept strategic merge patch.
pub const BUILTIN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "extensions",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Whether `(apiVersion, kind)` is a built-in type (its group is in [`BUILTIN_GROUPS`]).
/// Custom resources are not: Kubernetes rejects strategic merge patches for them with 415.
pub fn supports_strategic_merge_patch(api_version: &str, _kind: &str) -> bool {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    BUILTIN_GROUPS.contains(&group)
}

// ---------------------------------------------------------------------------------------------
// Patch metadata: which lists merge, and on which key.

/// Schema node: the Go type a JSON object corresponds to, as far as patch strategies matter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    /// No strategies known below: maps merge, lists are replaced.
    Unknown,
    /// A built-in object with only ObjectMeta strategies (ConfigMap, Secret, Role, Lease, ...).
    Object,
    ObjectMeta,
    Pod,
    PodSpec,
    PodStatus,
    Container,
    PodTemplateSpec,
    /// Root of PodTemplate (`template`).
    PodTemplate,
    /// Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, ReplicationController.
    Workload,
    /// Their `spec` (`template`).
    WorkloadSpec,
    /// A status with `conditions` merged by `type`.
    ConditionsStatus,
    /// A root whose `status.conditions` merge by `type` (Namespace, PVC, PDB, HPA...).
    ObjectWithConditions,
    CronJob,
    CronJobSpec,
    JobTemplateSpec,
    Service,
    ServiceSpec,
    Node,
    NodeSpec,
    NodeStatus,
    ServiceAccount,
}

/// How a list field is patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    /// No strategy: the patch's list replaces the live one.
    Replace,
    /// `patchStrategy: merge` on a list of scalars.
    MergeScalars,
    /// `patchStrategy: merge` with `patchMergeKey`.
    MergeByKey(&'static str),
}

/// The root schema node of a kind.
fn root_type(api_version: &str, kind: &str) -> Ty {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    match (group, kind) {
        ("", "Pod") => Ty::Pod,
        ("", "PodTemplate") => Ty::PodTemplate,
        ("", "ReplicationController")
        | ("apps" | "extensions", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job") => Ty::Workload,
        ("batch", "CronJob") => Ty::CronJob,
        ("", "Service") => Ty::Service,
        ("", "Node") => Ty::Node,
        ("", "ServiceAccount") => Ty::ServiceAccount,
        ("", "Namespace" | "PersistentVolumeClaim")
        | ("policy", "PodDisruptionBudget")
        | ("autoscaling", "HorizontalPodAutoscaler") => Ty::ObjectWithConditions,
        _ => Ty::Object,
    }
}

/// The strategy of field `name` of a `ty` object and the schema node of its value (for a list,
/// of its elements).
fn field(ty: Ty, name: &str) -> (ListStrategy, Ty) {
    use ListStrategy::*;
    let meta = |n: &str| if n == "metadata" { (Replace, Ty::ObjectMeta) } else { (Replace, Ty::Unknown) };
    match (ty, name) {
        (Ty::ObjectMeta, "finalizers") => (MergeScalars, Ty::Unknown),
        (Ty::ObjectMeta, "ownerReferences") => (MergeByKey("uid"), Ty::Unknown),

        (Ty::Pod, "spec") => (Replace, Ty::PodSpec),
        (Ty::Pod, "status") => (Replace, Ty::PodStatus),
        (Ty::PodTemplate, "template") | (Ty::WorkloadSpec, "template") => (Replace, Ty::PodTemplateSpec),
        (Ty::PodTemplateSpec, "spec") => (Replace, Ty::PodSpec),

        (Ty::PodSpec, "containers" | "initContainers" | "ephemeralContainers") => (MergeByKey("name"), Ty::Container),
        (Ty::PodSpec, "volumes" | "imagePullSecrets" | "schedulingGates" | "resourceClaims") => {
            (MergeByKey("name"), Ty::Unknown)
        }
        (Ty::PodSpec, "hostAliases") => (MergeByKey("ip"), Ty::Unknown),
        (Ty::PodSpec, "topologySpreadConstraints") => (MergeByKey("topologyKey"), Ty::Unknown),

        (Ty::Container, "ports") => (MergeByKey("containerPort"), Ty::Unknown),
        (Ty::Container, "env") => (MergeByKey("name"), Ty::Unknown),
        (Ty::Container, "volumeMounts") => (MergeByKey("mountPath"), Ty::Unknown),
        (Ty::Container, "volumeDevices") => (MergeByKey("devicePath"), Ty::Unknown),

        (Ty::PodStatus, "conditions") => (MergeByKey("type"), Ty::Unknown),
        (Ty::PodStatus, "podIPs" | "hostIPs") => (MergeByKey("ip"), Ty::Unknown),
        (Ty::PodStatus, "resourceClaimStatuses") => (MergeByKey("name"), Ty::Unknown),

        (Ty::Workload, "spec") => (Replace, Ty::WorkloadSpec),
        (Ty::Workload | Ty::ObjectWithConditions | Ty::Service, "status") => (Replace, Ty::ConditionsStatus),
        (Ty::ConditionsStatus, "conditions") => (MergeByKey("type"), Ty::Unknown),

        (Ty::CronJob, "spec") => (Replace, Ty::CronJobSpec),
        (Ty::CronJobSpec, "jobTemplate") => (Replace, Ty::JobTemplateSpec),
        (Ty::JobTemplateSpec, "spec") => (Replace, Ty::WorkloadSpec),

        (Ty::Service, "spec") => (Replace, Ty::ServiceSpec),
        (Ty::ServiceSpec, "ports") => (MergeByKey("port"), Ty::Unknown),

        (Ty::Node, "spec") => (Replace, Ty::NodeSpec),
        (Ty::Node, "status") => (Replace, Ty::NodeStatus),
        (Ty::NodeSpec, "podCIDRs") => (MergeScalars, Ty::Unknown),
        (Ty::NodeStatus, "conditions" | "addresses") => (MergeByKey("type"), Ty::Unknown),

        (Ty::ServiceAccount, "secrets") => (MergeByKey("name"), Ty::Unknown),

        (
            Ty::Object
            | Ty::Pod
            | Ty::PodTemplate
            | Ty::PodTemplateSpec
            | Ty::Workload
            | Ty::ObjectWithConditions
            | Ty::CronJob
            | Ty::JobTemplateSpec
            | Ty::Service
            | Ty::Node
            | Ty::ServiceAccount,
            n,
        ) => meta(n),
        _ => (Replace, Ty::Unknown),
    }
}

/// How the list at a field of a built-in kind merges, from the table [`strategic_merge_patch`]
/// follows (the Go types' `patchStrategy`/`patchMergeKey` tags). Server-side apply and the
/// OpenAPI documents read it through [`SchemaNode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMerge {
    /// No merge strategy: the list is replaced as a whole (an atomic list).
    Atomic,
    /// `patchStrategy: merge` on a list of scalars (a set).
    Set,
    /// `patchStrategy: merge` with this `patchMergeKey` (a map keyed by that field).
    Map(&'static str),
}

/// A position in the patch-strategy schema of a built-in kind: start at [`SchemaNode::root`]
/// and descend with [`SchemaNode::field`] (list fields descend to their elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaNode(Ty);

impl SchemaNode {
    /// The root of `(apiVersion, kind)`; kinds without strategies get a node under which
    /// every list is atomic.
    pub fn root(api_version: &str, kind: &str) -> Self {
        Self(root_type(api_version, kind))
    }

    /// The list strategy of field `name` (meaningful when its value is a list) and the node of
    /// its value (for a list, of its elements).
    pub fn field(self, name: &str) -> (ListMerge, SchemaNode) {
        let (strategy, ty) = field(self.0, name);
        let merge = match strategy {
            ListStrategy::Replace => ListMerge::Atomic,
            ListStrategy::MergeScalars => ListMerge::Set,
            ListStrategy::MergeByKey(k) => ListMerge::Map(k),
        };
        (merge, SchemaNode(ty))
    }
}

// ---------------------------------------------------------------------------------------------
// Errors, worded as k8s.io/apimachinery/pkg/util/mergepatch words them.

fn bad_request(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

fn unprocessable(msg: impl Into<String>) -> ApiError {
    ApiError::new(422, "Invalid", msg)
}

fn err_no_merge_key(m: &Map<String, Value>, key: &str) -> ApiError {
    bad_request(format!("map: {} does not contain declared merge key: {key}", Value::Object(m.clone())))
}

fn err_bad_patch_type(t: &Value, m: &Map<String, Value>) -> ApiError {
    let t = t.as_str().map(str::to_string).unwrap_or_else(|| t.to_string());
    bad_request(format!("unknown patch type: {t} in map: {}", Value::Object(m.clone())))
}

fn err_retain_keys() -> ApiError {
    bad_request("invalid patch format of retainKeys")
}

fn err_set_element_order() -> ApiError {
    bad_request("invalid patch format of setElementOrder list")
}

fn err_primitive_list() -> ApiError {
    bad_request("invalid patch format of primitive list")
}

// ---------------------------------------------------------------------------------------------
// The merge.

/// Applies a strategic merge patch to `original` (a whole object as stored), returning the patched
/// object. `original` is not modified.
///
/// # Errors
/// - 415 UnsupportedMediaType for kinds outside [`BUILTIN_GROUPS`] (custom resources);
/// - 400 BadRequest for a patch that is not a JSON object or is malformed (unknown `$patch`
///   value, bad `$retainKeys`/`$setElementOrder`/`$deleteFromPrimitiveList`, a merge-list element
///   without its merge key, ...);
/// - 422 Invalid for lists of lists and a patch with keys outside its own `$retainKeys`.
pub fn strategic_merge_patch(
    api_version: &str,
    kind: &str,
    original: &Value,
    patch: &Value,
) -> Result<Value, ApiError> {
    if !supports_strategic_merge_patch(api_version, kind) {
        return Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let Value::Object(patch) = patch else {
        return Err(bad_request(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            json_kind(patch)
        )));
    };
    let original = match original {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        other => {
            return Err(bad_request(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_kind(other)
            )));
        }
    };
    merge_map(original, patch.clone(), root_type(api_version, kind)).map(Value::Object)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether a map key is a patch directive (`$patch`, `$retainKeys`, `$setElementOrder/x`,
/// `$deleteFromPrimitiveList/x`) rather than data (JSON schemas have data keys like `$ref`).
fn is_directive_key(k: &str) -> bool {
    k == DIRECTIVE
        || k == RETAIN_KEYS
        || k.starts_with(&format!("{SET_ELEMENT_ORDER}/"))
        || k.starts_with(&format!("{DELETE_FROM_PRIMITIVE_LIST}/"))
}

/// A value taken from the patch as is: `null` map entries and directive keys dropped, recursively.
fn clean(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter().filter(|(k, v)| !v.is_null() && !is_directive_key(k)).map(|(k, v)| (k, clean(v))).collect(),
        ),
        Value::Array(a) => Value::Array(
            a.into_iter().filter(|e| !matches!(e, Value::Object(m) if m.get(DIRECTIVE).is_some())).map(clean).collect(),
        ),
        other => other,
    }
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    ty: Ty,
) -> Result<Map<String, Value>, ApiError> {
    if let Some(directive) = patch.get(DIRECTIVE).cloned() {
        return match directive.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                // The patch replaces the map; nested directives and nulls still apply to "nothing".
                merge_map(Map::new(), patch, ty)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(err_bad_patch_type(&directive, &patch)),
        };
    }

    apply_retain_keys(&mut original, &mut patch)?;
    apply_set_element_order(&mut original, &mut patch, ty)?;

    for (key, patch_value) in patch {
        let (key, is_delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some(rest) => match rest.strip_prefix('/') {
                Some(k) if !k.is_empty() => {
                    if !patch_value.is_array() {
                        return Err(err_primitive_list());
                    }
                    (k.to_string(), true)
                }
                _ => return Err(err_primitive_list()),
            },
            None => (key, false),
        };

        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        let (strategy, sub) = field(ty, &key);
        let Some(current) = original.remove(&key) else {
            if !is_delete_list {
                original.insert(key, fresh(patch_value, strategy, sub)?);
            }
            continue;
        };
        let merged = match (current, patch_value) {
            (Value::Object(o), Value::Object(p)) => Value::Object(merge_map(o, p, sub)?),
            (Value::Array(o), Value::Array(p)) => match strategy {
                ListStrategy::Replace => {
                    if is_delete_list {
                        Value::Array(o)
                    } else {
                        clean(Value::Array(p))
                    }
                }
                ListStrategy::MergeScalars => Value::Array(merge_list(o, p, None, sub, is_delete_list)?),
                ListStrategy::MergeByKey(k) => Value::Array(merge_list(o, p, Some(k), sub, is_delete_list)?),
            },
            (current, p) => {
                if is_delete_list {
                    current
                } else {
                    fresh(p, strategy, sub)?
                }
            }
        };
        original.insert(key, merged);
    }
    Ok(original)
}

/// A patch value for a key the live object lacks (or holds with another JSON type): merged into
/// nothing, so that directives inside it are honoured and nulls dropped.
fn fresh(value: Value, strategy: ListStrategy, sub: Ty) -> Result<Value, ApiError> {
    Ok(match value {
        Value::Object(p) => Value::Object(merge_map(Map::new(), p, sub)?),
        Value::Array(p) => match strategy {
            ListStrategy::Replace => clean(Value::Array(p)),
            ListStrategy::MergeScalars => Value::Array(merge_list(Vec::new(), p, None, sub, false)?),
            ListStrategy::MergeByKey(k) => Value::Array(merge_list(Vec::new(), p, Some(k), sub, false)?),
        },
        other => other,
    })
}

fn apply_retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> Result<(), ApiError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else { return Ok(()) };
    let Value::Array(retain) = retain else { return Err(err_retain_keys()) };
    let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
    for (k, v) in patch.iter() {
        if v.is_null() || k.starts_with(DELETE_FROM_PRIMITIVE_LIST) || k.starts_with(SET_ELEMENT_ORDER) {
            continue;
        }
        if !keep.contains(&k.as_str()) {
            return Err(err_retain_keys());
        }
    }
    original.retain(|k, _| keep.contains(&k.as_str()));
    Ok(())
}

/// `$setElementOrder/<list>`: merge `<list>` now and order the result.
fn apply_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    ty: Ty,
) -> Result<(), ApiError> {
    let keys: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER)).cloned().collect();
    for directive_key in keys {
        let Some(order) = patch.remove(&directive_key) else { continue };
        let list_key = match directive_key.split_once('/') {
            Some((SET_ELEMENT_ORDER, k)) if !k.is_empty() => k.to_string(),
            _ => return Err(err_set_element_order()),
        };
        let Value::Array(order) = order else { return Err(err_set_element_order()) };
        let original_list = match original.get(&list_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(_) => return Err(err_set_element_order()),
        };
        let patch_list = match patch.get(&list_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(Value::Null) => continue, // the list is being deleted; the main loop does it
            Some(_) => return Err(err_set_element_order()),
        };
        let (strategy, sub) = field(ty, &list_key);
        let merge_key = match strategy {
            ListStrategy::MergeByKey(k) => Some(k),
            ListStrategy::MergeScalars => None,
            ListStrategy::Replace => {
                // Kubernetes only sends the directive for merging lists; for others the patch
                // list simply replaces the live one.
                if let Some(p) = patch.remove(&list_key) {
                    original.insert(list_key, clean(p));
                }
                continue;
            }
        };
        if let Some(k) = merge_key {
            for item in &order {
                match item {
                    Value::Object(m) if m.contains_key(k) => {}
                    Value::Object(m) => return Err(err_no_merge_key(m, k)),
                    _ => return Err(err_set_element_order()),
                }
            }
        }
        validate_patch_with_set_order(patch_list.as_deref().unwrap_or(&[]), &order, merge_key)?;
        let live = original_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, None) => continue,
            (o, Some(p)) => merge_list(o.unwrap_or_default(), p, merge_key, sub, false)?,
        };
        let (in_order, server_only) = partition(merged, &order, merge_key);
        let ordered = normalize_element_order(in_order, server_only, &order, &live, merge_key);
        original.insert(list_key.clone(), Value::Array(ordered));
        patch.remove(&list_key);
    }
    Ok(())
}

/// The non-deleting items of the patch list must appear in `$setElementOrder` in the same
/// relative order.
fn validate_patch_with_set_order(
    patch_list: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<(), ApiError> {
    if patch_list.is_empty() || order.is_empty() {
        return Ok(());
    }
    let items: Vec<&Value> =
        patch_list.iter().filter(|v| !matches!(v, Value::Object(m) if m.contains_key(DIRECTIVE))).collect();
    let (mut pi, mut oi) = (0, 0);
    while pi < items.len() && oi < order.len() {
        if same_item(items[pi], &order[oi], merge_key) {
            pi += 1;
        }
        oi += 1;
    }
    if pi < items.len() {
        return Err(bad_request(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            Value::Array(patch_list.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

/// Whether two list items are "the same" element: equal merge-key values for maps, equal values
/// for scalars.
fn same_item(a: &Value, b: &Value, merge_key: Option<&str>) -> bool {
    match merge_key {
        Some(k) => match (a.get(k), b.get(k)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
        None => a == b,
    }
}

fn index_of(list: &[Value], item: &Value, merge_key: Option<&str>) -> Option<usize> {
    list.iter().position(|v| same_item(v, item, merge_key))
}

/// Merges a patch list into a live list of a `patchStrategy: merge` field (`merge_key` `None`
/// for scalar lists), then orders the result.
fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: Option<&str>,
    sub: Ty,
    is_delete_list: bool,
) -> Result<Vec<Value>, ApiError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let maps = element_kind_is_map(&original, &patch)?;
    if !maps {
        if is_delete_list {
            return Ok(original.into_iter().filter(|v| !patch.contains(v)).collect());
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch.iter()) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        let (in_patch, server_only) = partition(merged, &patch, None);
        return Ok(normalize_element_order(in_patch, server_only, &patch, &original, None));
    }
    let Some(key) = merge_key else {
        return Err(bad_request("cannot merge lists without merge key for type map"));
    };

    // Special elements: `$patch: delete` removes by key, `$patch: replace` replaces the list.
    let mut original = original;
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for v in patch {
        let Value::Object(m) = v else { return Err(non_map()) };
        match m.get(DIRECTIVE) {
            None => plain.push(Value::Object(m)),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let Some(kv) = m.get(key) else { return Err(err_no_merge_key(&m, key)) };
                    original.retain(|o| o.get(key) != Some(kv));
                }
                Some("replace") => replace = true,
                Some("merge") => return Err(bad_request("merging lists cannot yet be specified in the patch")),
                _ => return Err(err_bad_patch_type(d, &m)),
            },
        }
    }
    let (original, patch) = if replace {
        // Merge each element into nothing so that nested directives and nulls are resolved.
        let mut out = Vec::with_capacity(plain.len());
        for v in plain {
            let Value::Object(m) = v else { return Err(non_map()) };
            out.push(Value::Object(merge_map(Map::new(), m, sub)?));
        }
        (out, Vec::new())
    } else {
        (original, plain)
    };

    let mut merged = original.clone();
    for v in &patch {
        let Value::Object(m) = v else { return Err(non_map()) };
        let Some(kv) = m.get(key) else { return Err(err_no_merge_key(m, key)) };
        match merged.iter().position(|o| o.get(key) == Some(kv)) {
            Some(i) => {
                let Value::Object(live) = std::mem::take(&mut merged[i]) else { return Err(non_map()) };
                merged[i] = Value::Object(merge_map(live, m.clone(), sub)?);
            }
            None => merged.push(Value::Object(merge_map(Map::new(), m.clone(), sub)?)),
        }
    }
    for v in merged.iter().chain(original.iter()) {
        if let Value::Object(m) = v
            && !m.contains_key(key)
        {
            return Err(err_no_merge_key(m, key));
        }
    }
    let (in_patch, server_only) = partition(merged, &patch, Some(key));
    Ok(normalize_element_order(in_patch, server_only, &patch, &original, Some(key)))
}

/// Element kinds were checked by [`element_kind_is_map`]; this error never reaches a client.
fn non_map() -> ApiError {
    bad_request("list element types are not identical")
}

/// Whether the lists hold maps (`true`) or scalars (`false`).
///
/// # Errors
/// 422 for lists of lists, 400 for lists mixing maps and scalars.
fn element_kind_is_map(a: &[Value], b: &[Value]) -> Result<bool, ApiError> {
    let mut kind = None;
    for v in a.iter().chain(b.iter()) {
        let is_map = match v {
            Value::Array(_) => return Err(unprocessable("lists of lists are not supported")),
            Value::Object(_) => true,
            _ => false,
        };
        match kind {
            None => kind = Some(is_map),
            Some(k) if k != is_map => return Err(bad_request("list element types are not identical")),
            _ => {}
        }
    }
    Ok(kind.unwrap_or(false))
}

/// Splits `merged` into items present in `by` and the rest, keeping relative order.
fn partition(merged: Vec<Value>, by: &[Value], merge_key: Option<&str>) -> (Vec<Value>, Vec<Value>) {
    merged.into_iter().partition(|v| index_of(by, v, merge_key).is_some())
}

/// Sorts `items` stably by position in `order`; items absent from `order` keep their place
/// relative to each other, after the present ones.
fn sort_by_order(items: &mut [Value], order: &[Value], merge_key: Option<&str>) {
    items.sort_by_key(|v| index_of(order, v, merge_key).unwrap_or(usize::MAX));
}

/// `normalizeElementOrder`: the patch items ordered by `patch_order`, the server-only items by
/// `server_order`, then interleaved: a server-only item goes before a patch item when both are in
/// the live list and it came first there.
fn normalize_element_order(
    mut patch_items: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    sort_by_order(&mut patch_items, patch_order, merge_key);
    sort_by_order(&mut server_only, server_order, merge_key);
    let mut out = Vec::with_capacity(patch_items.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = patch_items.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => out.extend(left.next()),
            (None, Some(_)) => out.extend(right.next()),
            (Some(l), Some(r)) => {
                let li = index_of(server_order, l, merge_key);
                let ri = index_of(server_order, r, merge_key);
                let left_first = matches!((li, ri), (Some(a), Some(b)) if a < b);
                if left_first {
                    out.extend(left.next());
                } else {
                    out.extend(right.next());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Applies `patch` (YAML-ish JSON) to `original` for a `kind` and compares with `expected`.
    fn check_kind(api_version: &str, kind: &str, original: Value, patch: Value, expected: Value) {
        let got = strategic_merge_patch(api_version, kind, &original, &patch)
            .unwrap_or_else(|e| panic!("patch failed: {e}\npatch: {patch}"));
        assert_eq!(got, expected, "\npatch: {patch}\ngot:      {got}\nexpected: {expected}");
    }

    fn check(original: Value, patch: Value, expected: Value) {
        check_kind("apps/v1", "Deployment", original, patch, expected)
    }

    fn check_err(kind: &str, original: Value, patch: Value, code: u16, message: &str) {
        let api_version = if kind == "Deployment" { "apps/v1" } else { "v1" };
        let err = strategic_merge_patch(api_version, kind, &original, &patch).unwrap_err();
        assert_eq!(err.code, code, "{err}");
        assert!(err.message.contains(message), "{} does not contain {message}", err.message);
    }

    fn deployment(containers: Value) -> Value {
        json!({"spec": {"template": {"spec": {"containers": containers}}}})
    }

    #[test]
    fn maps_merge_recursively_and_null_deletes_keys() {
        check(
            json!({"metadata": {"labels": {"app": "web", "tier": "fe"}, "name": "d"}}),
            json!({"metadata": {"labels": {"tier": null, "env": "prod"}}}),
            json!({"metadata": {"labels": {"app": "web", "env": "prod"}, "name": "d"}}),
        );
        check(
            json!({"spec": {"replicas": 1}}),
            json!({"spec": {"replicas": 3, "paused": true}}),
            json!({"spec": {"replicas": 3, "paused": true}}),
        );
        check(json!({"a": 1}), json!({"missing": null}), json!({"a": 1}));
        check(json!({"spec": {"x": {"y": 1}}}), json!({"spec": {"x": null}}), json!({"spec": {}}));
    }

    #[test]
    fn adding_a_container_merges_by_name_and_puts_the_new_one_first() {
        // "Use a strategic merge patch to update a Deployment" (patch-file-containers.yaml).
        check(
            deployment(json!([{"name": "patch-demo-ctr", "image": "nginx"}])),
            deployment(json!([{"name": "patch-demo-ctr-2", "image": "redis"}])),
            deployment(
                json!([{"name": "patch-demo-ctr-2", "image": "redis"}, {"name": "patch-demo-ctr", "image": "nginx"}]),
            ),
        );
    }

    #[test]
    fn changing_one_container_keeps_the_others_in_place() {
        // kubectl set image deployment/web nginx=nginx:1.26
        check(
            deployment(
                json!([{"name": "a", "image": "a:1"}, {"name": "nginx", "image": "nginx:1.25"}, {"name": "c", "image": "c:1"}]),
            ),
            deployment(json!([{"name": "nginx", "image": "nginx:1.26"}])),
            deployment(
                json!([{"name": "a", "image": "a:1"}, {"name": "nginx", "image": "nginx:1.26"}, {"name": "c", "image": "c:1"}]),
            ),
        );
    }

    #[test]
    fn tolerations_have_no_strategy_and_are_replaced() {
        // "Notes on the strategic merge patch" (patch-file-tolerations.yaml).
        let tol = |k: &str, v: &str| json!({"effect": "NoSchedule", "key": k, "value": v});
        check(
            json!({"spec": {"template": {"spec": {"tolerations": [tol("dedicated", "test-team")]}}}}),
            json!({"spec": {"template": {"spec": {"tolerations": [tol("disktype", "ssd")]}}}}),
            json!({"spec": {"template": {"spec": {"tolerations": [tol("disktype", "ssd")]}}}}),
        );
    }

    #[test]
    fn retain_keys_clears_the_other_keys_of_the_strategy() {
        // "Use strategic merge patch to update a Deployment using the retainKeys strategy".
        check(
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "30%"}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
        );
        check_err(
            "Deployment",
            json!({"spec": {"strategy": {}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}),
            400,
            "invalid patch format of retainKeys",
        );
    }

    #[test]
    fn patch_replace_in_a_list_replaces_the_whole_list() {
        check(
            deployment(json!([{"name": "nginx", "image": "nginx-1.0"}, {"name": "log-tailer", "image": "lt"}])),
            deployment(json!([{"name": "nginx", "image": "nginx-1.0"}, {"$patch": "replace"}])),
            deployment(json!([{"name": "nginx", "image": "nginx-1.0"}])),
        );
    }

    #[test]
    fn patch_replace_in_a_map_replaces_the_map() {
        check(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}], "hostNetwork": true}}}}),
            json!({"spec": {"template": {"spec": {"$patch": "replace", "containers": [{"name": "b", "image": "x", "args": null}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "x"}]}}}}),
        );
    }

    #[test]
    fn patch_delete_removes_a_list_element_or_empties_a_map() {
        check(
            deployment(json!([{"name": "nginx", "image": "nginx"}, {"name": "log-tailer", "image": "lt"}])),
            deployment(json!([{"$patch": "delete", "name": "log-tailer"}])),
            deployment(json!([{"name": "nginx", "image": "nginx"}])),
        );
        check(
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            json!({"spec": {"strategy": {"rollingUpdate": {"$patch": "delete"}}}}),
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {}}}}),
        );
    }

    #[test]
    fn delete_from_primitive_list_removes_finalizers() {
        check_kind(
            "v1",
            "ConfigMap",
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
            json!({"metadata": {"finalizers": ["a", "c"]}}),
        );
        check_kind(
            "v1",
            "ConfigMap",
            json!({"metadata": {}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
            json!({"metadata": {}}),
        );
    }

    #[test]
    fn finalizers_merge_as_a_set_and_new_ones_come_first() {
        check_kind(
            "v1",
            "Pod",
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "a"]}}),
            json!({"metadata": {"finalizers": ["c", "a", "b"]}}),
        );
    }

    #[test]
    fn set_element_order_orders_the_merged_list() {
        check(
            deployment(json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])),
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "b"}, {"name": "a"}],
                "containers": [{"name": "b", "image": "x"}]
            }}}}),
            deployment(json!([{"name": "c"}, {"name": "b", "image": "x"}, {"name": "a"}])),
        );
        // Primitive list: the directive orders the listed items; a server-only item keeps its place
        // before the listed items that followed it in the live list.
        check_kind(
            "v1",
            "Pod",
            json!({"metadata": {"finalizers": ["a", "b", "server-only", "c"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["c", "b", "a"], "finalizers": ["c"]}}),
            json!({"metadata": {"finalizers": ["server-only", "c", "b", "a"]}}),
        );
    }

    #[test]
    fn kubectl_apply_image_change_patch_updates_the_container() {
        // What kubectl 1.33 `apply` sends after the image in the manifest changes.
        let last = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{},"name":"web","namespace":"default"},"spec":{"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"image":"nginx:1.26","name":"nginx"}]}}}}"#;
        let live = json!({
            "metadata": {"name": "web", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "old", "deployment.kubernetes.io/revision": "1"}},
            "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "nginx", "image": "nginx:1.25", "imagePullPolicy": "IfNotPresent", "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
                "restartPolicy": "Always"
            }}}
        });
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": last}},
            "spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "nginx"}], "containers": [{"image": "nginx:1.26", "name": "nginx"}]}}}
        });
        let mut expected = live.clone();
        expected["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json!(last);
        expected["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.26");
        check(live, patch, expected);
    }

    #[test]
    fn kubectl_apply_container_removal_patch_deletes_the_container() {
        let live = deployment(json!([{"name": "nginx", "image": "nginx"}, {"name": "sidecar", "image": "busybox"}]));
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "nginx"}],
            "containers": [{"$patch": "delete", "name": "sidecar"}]
        }}}});
        check(live, patch, deployment(json!([{"name": "nginx", "image": "nginx"}])));
    }

    #[test]
    fn kubectl_apply_env_removal_and_addition_inside_a_container() {
        let c = |env: Value| deployment(json!([{"name": "app", "image": "x", "env": env}]));
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "app"}],
            "containers": [{"name": "app",
                "$setElementOrder/env": [{"name": "B"}, {"name": "C"}],
                "env": [{"name": "C", "value": "3"}, {"$patch": "delete", "name": "A"}]}]
        }}}});
        check(
            c(json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])),
            patch,
            c(json!([{"name": "B", "value": "2"}, {"name": "C", "value": "3"}])),
        );
    }

    #[test]
    fn lists_without_strategy_are_replaced_and_new_lists_are_taken() {
        check(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["x", "y"]}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["z"]}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["z"]}]}}}}),
        );
        check(
            json!({}),
            deployment(json!([{"name": "a", "image": "b", "x": null}])),
            deployment(json!([{"name": "a", "image": "b"}])),
        );
    }

    #[test]
    fn service_ports_merge_by_port_and_node_addresses_by_type() {
        check_kind(
            "v1",
            "Service",
            json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}}),
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]}}),
        );
        check_kind(
            "v1",
            "Node",
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n"}]}}),
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}),
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n"}]}}),
        );
        // Taints have no strategy (kubectl taint sends the full list).
        check_kind(
            "v1",
            "Node",
            json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}),
            json!({"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}}),
            json!({"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}}),
        );
    }

    #[test]
    fn pod_status_conditions_merge_by_type() {
        check_kind(
            "v1",
            "Pod",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}}),
        );
    }

    #[test]
    fn container_ports_merge_by_container_port() {
        check_kind(
            "v1",
            "Pod",
            json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80}, {"containerPort": 81}]}]}}),
            json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 81, "name": "m"}]}]}}),
            json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80}, {"containerPort": 81, "name": "m"}]}]}}),
        );
    }

    #[test]
    fn cronjob_pod_templates_merge_containers_by_name() {
        let cj = |c: Value| json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": c}}}}}});
        check_kind(
            "batch/v1",
            "CronJob",
            cj(json!([{"name": "a", "image": "1"}, {"name": "b", "image": "1"}])),
            cj(json!([{"name": "b", "image": "2"}])),
            cj(json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}])),
        );
    }

    #[test]
    fn malformed_patches_are_client_errors() {
        check_err("Deployment", json!({}), json!([1]), 400, "cannot unmarshal array");
        check_err(
            "Deployment",
            json!({"spec": {}}),
            json!({"spec": {"$patch": "bogus"}}),
            400,
            "unknown patch type: bogus",
        );
        check_err(
            "Deployment",
            deployment(json!([{"name": "a"}])),
            deployment(json!([{"image": "x"}])),
            400,
            "does not contain declared merge key: name",
        );
        check_err(
            "Deployment",
            deployment(json!([{"name": "a"}])),
            deployment(json!([{"name": "a", "$patch": "merge"}])),
            400,
            "merging lists cannot yet be specified",
        );
        check_err(
            "Pod",
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": [["b"]]}}),
            422,
            "lists of lists",
        );
        check_err("Pod", json!({}), json!({"metadata": {"$retainKeys": "x"}}), 400, "retainKeys");
        check_err("Pod", json!({}), json!({"metadata": {"$setElementOrder/finalizers": "x"}}), 400, "setElementOrder");
        check_err(
            "Pod",
            json!({}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "x"}}),
            400,
            "primitive list",
        );
        check_err(
            "Deployment",
            deployment(json!([{"name": "a"}, {"name": "b"}])),
            json!({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "b", "image": "y"}]}}}}),
            400,
            "doesn't match",
        );
    }

    #[test]
    fn custom_resources_are_rejected_with_unsupported_media_type() {
        let err = strategic_merge_patch("example.com/v1", "Widget", &json!({}), &json!({})).unwrap_err();
        assert_eq!(err.code, 415);
        assert!(supports_strategic_merge_patch("rbac.authorization.k8s.io/v1", "Role"));
        assert!(supports_strategic_merge_patch("v1", "ConfigMap"));
        assert!(!supports_strategic_merge_patch("stable.example.com/v1", "CronTab"));
    }

    #[test]
    fn replaced_lists_keep_data_keys_that_look_like_directives() {
        check_kind(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            json!({"spec": {"versions": [{"name": "v1"}]}}),
            json!({"spec": {"versions": [{"name": "v2", "schema": {"openAPIV3Schema": {"$ref": "#/x", "$patch": "x"}}}]}}),
            json!({"spec": {"versions": [{"name": "v2", "schema": {"openAPIV3Schema": {"$ref": "#/x"}}}]}}),
        );
    }

    #[test]
    fn unknown_kinds_of_builtin_groups_merge_maps_and_replace_lists() {
        check_kind(
            "rbac.authorization.k8s.io/v1",
            "Role",
            json!({"metadata": {"name": "r"}, "rules": [{"verbs": ["get"]}]}),
            json!({"rules": [{"verbs": ["list"]}]}),
            json!({"metadata": {"name": "r"}, "rules": [{"verbs": ["list"]}]}),
        );
    }
}
