//! OpenAPI v3 (`/openapi/v3` and `/openapi/v3/<api|apis/group>/<version>`) and OpenAPI v2
//! (`/openapi/v2`, Swagger 2.0 JSON), generated from the k8s-openapi types' JSON schemas (its
//! `schemars` feature), with the Kubernetes extensions clients look for:
//! `x-kubernetes-group-version-kind` on kinds and on operations,
//! `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key` and
//! `x-kubernetes-list-type`/`x-kubernetes-list-map-keys` on merged lists (from the
//! strategic-merge table of `skiff_apimachinery::patch`), and the
//! `fieldValidation`/`dryRun`/`fieldManager` query parameters on writes. kubectl reads them for
//! `kubectl explain`, to compute client-side apply patches, and to learn that the server
//! validates fields itself (so `kubectl apply` sends `fieldValidation=Strict`).
//! See <https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-interface-definition>.
//!
//! Custom resources are documented too, as kube-apiserver does: each served version of a
//! CustomResourceDefinition contributes its structural schema (`openAPIV3Schema`, with
//! `apiVersion`/`kind` and a `metadata` reference to ObjectMeta added, named by the reversed
//! group like `com.example.v1.Widget`) and its paths, in `/openapi/v2` and in
//! `/openapi/v3/apis/<group>/<version>`
//! (<https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#publish-validation-schema-in-openapi>).
//!
//! Every document is generated on first use and then served from memory with an `ETag`
//! (`If-None-Match` → 304); a document is regenerated on the first request after the set of
//! custom resources it covers changes (the registry swaps in new definitions on every CRD change,
//! so their identities are the cache key). v2 is also served in gnostic's protobuf encoding
//! (`Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, answered as
//! `application/com.github.proto-openapi.spec.v2.v1.0+protobuf` like kube-apiserver), encoded by
//! [`crate::endpoints::openapi_v2_proto`] from the served JSON: kubectl 1.27 and 1.28 read only that form
//! (for `explain`, client-side `apply`, `create`, `diff`), and later versions fall back to it to
//! validate kinds that `/openapi/v3` does not list. v2 keeps Swagger 2.0's shape as Kubernetes
//! publishes it: a field of a named type is `{"$ref", "description"}` (v3's
//! `allOf: [{"$ref"}]` is rewritten), IntOrString is `type: string, format: int-or-string`,
//! Quantity is `type: string`, and `oneOf` (absent from Swagger 2.0) is dropped.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::schemars::generate::{SchemaGenerator, SchemaSettings};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use skiff_apimachinery::ApiError;
use skiff_apimachinery::patch::{ListMerge, SchemaNode};

use crate::AppState;
use crate::endpoints::responsewriters::{error_response, json_response};
use crate::resources::{Registry, ResourceDef};

/// The hash of a group-version document without custom resources (fixed per build).
const HASH: &str = concat!("skiff-", env!("CARGO_PKG_VERSION"));

/// The cached `/openapi/v3` group-version documents, by `group/version`.
static DOCS: LazyLock<Mutex<HashMap<String, CachedDoc>>> = LazyLock::new(Default::default);

/// One cached group-version document: the custom resources it was built from, its bytes and
/// the hash its URL and ETag carry.
#[derive(Clone)]
struct CachedDoc {
    custom: Vec<usize>,
    doc: Encoded,
}

/// The identities of the custom resource definitions in `defs` (each CRD change leaks new
/// [`ResourceDef`]s, never reusing an address, so equal lists mean equal schemas).
fn custom_key<'a>(defs: impl IntoIterator<Item = &'a ResourceDef>) -> Vec<usize> {
    defs.into_iter().filter(|d| d.custom.is_some()).map(|d| std::ptr::from_ref(d) as usize).collect()
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Kubernetes' definition name of a custom kind: the group's labels reversed, the version, the
/// kind (`example.com`, `v1`, `Widget` → `com.example.v1.Widget`).
pub fn custom_definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The OpenAPI v3 definition of one served CRD version (`None` for a built-in): its
/// `openAPIV3Schema` (any object when it has none) with `apiVersion` and `kind` described and
/// `metadata` referring to ObjectMeta, as kube-apiserver publishes it. `$ref`s start with
/// `#/components/schemas/`; [`v2_doc`] rewrites them and the v3-only keywords for v2.
pub fn custom_kind_definition(def: &ResourceDef) -> Option<Value> {
    let custom = def.custom?;
    let mut schema = match &custom.schema {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    };
    let Value::Object(m) = &mut schema else { return None };
    m.entry("type").or_insert_with(|| json!("object"));
    let props = m.entry("properties").or_insert_with(|| json!({}));
    if let Value::Object(p) = props {
        p.entry("apiVersion").or_insert_with(|| json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}));
        p.entry("kind").or_insert_with(|| json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}));
        p.insert(
            "metadata".into(),
            json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
        );
    }
    Some(schema)
}

/// The definition name and `$ref` of a served kind: a built-in's generated into `g` from its
/// k8s-openapi type, a custom resource's built from its CRD and pushed to `custom`.
fn served_kind(g: &mut SchemaGenerator, def: &ResourceDef, custom: &mut Map<String, Value>) -> Option<(String, Value)> {
    if def.custom.is_none() {
        return kind_schema(g, &def.api_version(), def.kind);
    }
    let name = custom_definition_name(def.group, def.version, def.kind);
    custom.insert(name.clone(), custom_kind_definition(def)?);
    add::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(g);
    let reference = json!({"$ref": format!("#/components/schemas/{name}")});
    Some((name, reference))
}

fn add<T: JsonSchema>(g: &mut SchemaGenerator) -> (String, Value) {
    let r = g.subschema_for::<T>();
    (T::schema_name().to_string(), r.to_value())
}

/// The component-schema name and `$ref` of a kind, generating its schema (and everything it
/// refers to) into `g`.
fn kind_schema(g: &mut SchemaGenerator, api_version: &str, kind: &str) -> Option<(String, Value)> {
    use k8s_openapi::api::{
        admissionregistration, apps, autoscaling, batch, coordination, core, discovery, events, networking, policy,
        rbac, scheduling, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    Some(match (api_version, kind) {
        ("v1", "Namespace") => add::<core::v1::Namespace>(g),
        ("v1", "Pod") => add::<core::v1::Pod>(g),
        ("v1", "Node") => add::<core::v1::Node>(g),
        ("v1", "Service") => add::<core::v1::Service>(g),
        ("v1", "Endpoints") => add::<core::v1::Endpoints>(g),
        ("v1", "ConfigMap") => add::<core::v1::ConfigMap>(g),
        ("v1", "Secret") => add::<core::v1::Secret>(g),
        ("v1", "ServiceAccount") => add::<core::v1::ServiceAccount>(g),
        ("v1", "Event") => add::<core::v1::Event>(g),
        ("events.k8s.io/v1", "Event") => add::<events::v1::Event>(g),
        ("apps/v1", "Deployment") => add::<apps::v1::Deployment>(g),
        ("apps/v1", "ReplicaSet") => add::<apps::v1::ReplicaSet>(g),
        ("apps/v1", "StatefulSet") => add::<apps::v1::StatefulSet>(g),
        ("apps/v1", "DaemonSet") => add::<apps::v1::DaemonSet>(g),
        ("apps/v1", "ControllerRevision") => add::<apps::v1::ControllerRevision>(g),
        ("v1", "ReplicationController") => add::<core::v1::ReplicationController>(g),
        ("v1", "PodTemplate") => add::<core::v1::PodTemplate>(g),
        ("v1", "LimitRange") => add::<core::v1::LimitRange>(g),
        ("v1", "ResourceQuota") => add::<core::v1::ResourceQuota>(g),
        ("v1", "PersistentVolumeClaim") => add::<core::v1::PersistentVolumeClaim>(g),
        ("v1", "PersistentVolume") => add::<core::v1::PersistentVolume>(g),
        ("batch/v1", "Job") => add::<batch::v1::Job>(g),
        ("batch/v1", "CronJob") => add::<batch::v1::CronJob>(g),
        ("policy/v1", "PodDisruptionBudget") => add::<policy::v1::PodDisruptionBudget>(g),
        ("autoscaling/v2", "HorizontalPodAutoscaler") => add::<autoscaling::v2::HorizontalPodAutoscaler>(g),
        ("autoscaling/v1", "HorizontalPodAutoscaler") => add::<autoscaling::v1::HorizontalPodAutoscaler>(g),
        ("scheduling.k8s.io/v1", "PriorityClass") => add::<scheduling::v1::PriorityClass>(g),
        ("storage.k8s.io/v1", "StorageClass") => add::<storage::v1::StorageClass>(g),
        ("storage.k8s.io/v1", "CSIDriver") => add::<storage::v1::CSIDriver>(g),
        ("storage.k8s.io/v1", "CSINode") => add::<storage::v1::CSINode>(g),
        ("storage.k8s.io/v1", "VolumeAttachment") => add::<storage::v1::VolumeAttachment>(g),
        ("storage.k8s.io/v1", "CSIStorageCapacity") => add::<storage::v1::CSIStorageCapacity>(g),
        ("discovery.k8s.io/v1", "EndpointSlice") => add::<discovery::v1::EndpointSlice>(g),
        ("networking.k8s.io/v1", "Ingress") => add::<networking::v1::Ingress>(g),
        ("networking.k8s.io/v1", "NetworkPolicy") => add::<networking::v1::NetworkPolicy>(g),
        ("networking.k8s.io/v1", "IngressClass") => add::<networking::v1::IngressClass>(g),
        ("coordination.k8s.io/v1", "Lease") => add::<coordination::v1::Lease>(g),
        ("rbac.authorization.k8s.io/v1", "Role") => add::<rbac::v1::Role>(g),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => add::<rbac::v1::RoleBinding>(g),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => add::<rbac::v1::ClusterRole>(g),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => add::<rbac::v1::ClusterRoleBinding>(g),
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
            add::<admissionregistration::v1::MutatingWebhookConfiguration>(g)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            add::<admissionregistration::v1::ValidatingWebhookConfiguration>(g)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            add::<admissionregistration::v1::ValidatingAdmissionPolicy>(g)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            add::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(g)
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            add::<apiextensions::v1::CustomResourceDefinition>(g)
        }
        ("apiregistration.k8s.io/v1", "APIService") => {
            add::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>(g)
        }
        _ => return None,
    })
}

fn query_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params() -> Vec<Value> {
    vec![
        query_param(
            "dryRun",
            "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
        ),
        query_param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query_param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: Ignore, Warn (default), Strict.",
        ),
    ]
}

fn ok(schema: &Value) -> Value {
    json!({"200": {"description": "OK", "content": {"application/json": {"schema": schema}}}})
}

fn operation(action: &str, def: &ResourceDef, schema: &Value, params: Vec<Value>, body: Option<Value>) -> Value {
    let gvk = json!({"group": def.group, "version": def.version, "kind": def.kind});
    let mut op = json!({
        "description": format!("{action} {}", def.kind),
        "operationId": format!("{action}{}", def.kind),
        "parameters": params,
        "responses": ok(schema),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    });
    if let Some(b) = body {
        op["requestBody"] = b;
    }
    op
}

/// The OpenAPI v3 document of one group-version, or `None` when nothing is served there.
pub fn group_version_doc(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut g = SchemaSettings::openapi3().into_generator();
    let base = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
    let mut paths = Map::new();
    let mut kinds = Vec::new();
    let mut custom = Map::new();
    for def in registry.in_group_version(group, version) {
        let Some((name, schema)) = served_kind(&mut g, def, &mut custom) else { continue };
        kinds.push((name, def.clone()));
        let (collection, item) = if def.namespaced {
            (
                format!("{base}/namespaces/{{namespace}}/{}", def.resource),
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", def.resource),
            )
        } else {
            (format!("{base}/{}", def.resource), format!("{base}/{}/{{name}}", def.resource))
        };
        let mut path_params =
            vec![json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string"}})];
        let mut coll_params = Vec::new();
        if def.namespaced {
            let ns = json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}});
            path_params.push(ns.clone());
            coll_params.push(ns);
        }
        let body = json!({"content": {"application/json": {"schema": schema}}, "required": true});
        let patch_body = json!({"content": {
            "application/json-patch+json": {"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}},
            "application/merge-patch+json": {"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}},
            "application/strategic-merge-patch+json": {"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}},
            "application/apply-patch+yaml": {"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}},
        }, "required": true});
        // Custom resources take no strategic merge patch; kubectl's apply picks its patch type
        // from this list.
        let mut patch_body = patch_body;
        if def.custom.is_some()
            && let Some(Value::Object(content)) = patch_body.get_mut("content")
        {
            content.remove("application/strategic-merge-patch+json");
        }
        let mut patch_params = write_params();
        patch_params.push(query_param("force", "Force is going to \"force\" Apply requests."));
        paths.insert(
            item,
            json!({
                "get": operation("get", def, &schema, vec![], None),
                "put": operation("put", def, &schema, write_params(), Some(body.clone())),
                "patch": operation("patch", def, &schema, patch_params, Some(patch_body)),
                "delete": operation("delete", def, &json!({"type": "object"}), vec![query_param("dryRun", "dry run"), query_param("propagationPolicy", "propagation policy")], None),
                "parameters": path_params,
            }),
        );
        paths.insert(
            collection,
            json!({
                "get": operation("list", def, &json!({"type": "object"}), vec![query_param("labelSelector", "label selector"), query_param("fieldSelector", "field selector"), query_param("limit", "limit"), query_param("continue", "continue"), query_param("resourceVersion", "resourceVersion"), query_param("watch", "watch")], None),
                "post": operation("post", def, &schema, write_params(), Some(body)),
                "delete": operation("deletecollection", def, &json!({"type": "object"}), vec![], None),
                "parameters": coll_params,
            }),
        );
    }
    if kinds.is_empty() {
        return None;
    }
    let mut schemas = g.take_definitions(true);
    schemas.extend(custom);
    annotate_kinds(&mut schemas, &kinds, "#/components/schemas/");
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::endpoints::nonresource::GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// Marks each kind's definition with `x-kubernetes-group-version-kind` and the merged lists
/// below it with their patch strategy and list type. `ref_prefix` is how `$ref`s start.
fn annotate_kinds(schemas: &mut Map<String, Value>, kinds: &[(String, ResourceDef)], ref_prefix: &str) {
    let mut visited: Vec<(String, SchemaNode)> = Vec::new();
    for (name, def) in kinds {
        if let Some(Value::Object(s)) = schemas.get_mut(name) {
            let gvk = json!({"group": def.group, "version": def.version, "kind": def.kind});
            match s.get_mut("x-kubernetes-group-version-kind") {
                Some(Value::Array(list)) if !list.contains(&gvk) => list.push(gvk),
                Some(_) => {}
                None => {
                    s.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
                }
            }
        }
        annotate_lists(schemas, name, SchemaNode::root(&def.api_version(), def.kind), ref_prefix, &mut visited);
    }
}

/// The definition a property schema refers to (`$ref`, `allOf: [{$ref}]`, or its items').
fn referenced<'a>(prop: &'a Value, ref_prefix: &str) -> Option<&'a str> {
    let direct = |v: &'a Value| {
        v.get("$ref")
            .or_else(|| v.get("allOf").and_then(|a| a.get(0)).and_then(|a| a.get("$ref")))
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix(ref_prefix))
    };
    direct(prop).or_else(|| prop.get("items").and_then(direct))
}

fn annotate_lists(
    schemas: &mut Map<String, Value>,
    name: &str,
    node: SchemaNode,
    ref_prefix: &str,
    visited: &mut Vec<(String, SchemaNode)>,
) {
    if visited.iter().any(|(n, s)| n == name && *s == node) {
        return;
    }
    visited.push((name.to_string(), node));
    let mut next = Vec::new();
    if let Some(Value::Object(props)) = schemas.get_mut(name).and_then(|s| s.get_mut("properties")) {
        for (field, prop) in props.iter_mut() {
            let (merge, child) = node.field(field);
            if let Some(p) = prop.as_object_mut().filter(|p| p.get("type").and_then(Value::as_str) == Some("array")) {
                match merge {
                    ListMerge::Atomic => {}
                    ListMerge::Set => {
                        p.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
                        p.insert("x-kubernetes-list-type".into(), json!("set"));
                    }
                    ListMerge::Map(key) => {
                        p.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
                        p.insert("x-kubernetes-patch-merge-key".into(), json!(key));
                        p.insert("x-kubernetes-list-type".into(), json!("map"));
                        let keys = if matches!(key, "containerPort" | "port") {
                            json!([key, "protocol"])
                        } else {
                            json!([key])
                        };
                        p.insert("x-kubernetes-list-map-keys".into(), keys);
                    }
                }
            }
            if let Some(r) = referenced(prop, ref_prefix) {
                next.push((r.to_string(), child));
            }
        }
    }
    for (r, child) in next {
        annotate_lists(schemas, &r, child, ref_prefix, visited);
    }
}

/// Rewrites every `$ref` from OpenAPI v3's `#/components/schemas/` to v2's `#/definitions/`.
fn v2_refs(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if k == "$ref"
                    && let Value::String(r) = child
                    && let Some(rest) = r.strip_prefix("#/components/schemas/")
                {
                    *r = format!("#/definitions/{rest}");
                } else {
                    v2_refs(child);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(v2_refs),
        _ => {}
    }
}

/// Rewrites one schema (and those nested in it) from the v3 form schemars generates into
/// Swagger 2.0 as Kubernetes publishes v2: `allOf: [{"$ref"}]` becomes a sibling `$ref`,
/// `x-kubernetes-int-or-string` becomes `type: string, format: int-or-string`, and `oneOf`/`anyOf`/
/// `not`/`nullable` (not in Swagger 2.0) are dropped, leaving an untyped schema (any value).
fn v2_schema(schema: &mut Value) {
    let Value::Object(m) = schema else { return };
    if let Some(Value::Array(all)) = m.get("allOf")
        && let [Value::Object(only)] = all.as_slice()
        && only.len() == 1
        && let Some(r) = only.get("$ref").cloned()
    {
        m.remove("allOf");
        m.insert("$ref".into(), r);
    }
    for v3_only in ["oneOf", "anyOf", "not", "nullable"] {
        m.remove(v3_only);
    }
    if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) && !m.contains_key("type") {
        m.remove("x-kubernetes-int-or-string");
        m.insert("type".into(), json!("string"));
        m.insert("format".into(), json!("int-or-string"));
    }
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(v2_schema);
    }
    match m.get_mut("items") {
        Some(Value::Array(items)) => items.iter_mut().for_each(v2_schema),
        Some(item) => v2_schema(item),
        None => {}
    }
    if let Some(extra) = m.get_mut("additionalProperties") {
        v2_schema(extra);
    }
    if let Some(Value::Array(all)) = m.get_mut("allOf") {
        all.iter_mut().for_each(v2_schema);
    }
}

fn v2_query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "type": "string", "uniqueItems": true})
}

fn v2_operation(
    action: &str,
    def: &ResourceDef,
    schema: Option<&Value>,
    mut params: Vec<Value>,
    body: Option<&Value>,
) -> Value {
    let verb = match action {
        "get" => "read",
        "put" => "replace",
        "post" => "create",
        other => other,
    };
    if let Some(b) = body {
        params.push(json!({"name": "body", "in": "body", "required": true, "schema": b}));
    }
    let mut op = json!({
        "description": format!("{verb} the specified {}", def.kind),
        "operationId": format!("{verb}{}", def.kind),
        "consumes": if action == "patch" && def.custom.is_some() {
            json!(["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"])
        } else if action == "patch" {
            json!(["application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml"])
        } else {
            json!(["*/*"])
        },
        "produces": ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"],
        "schemes": ["https"],
        "parameters": params,
        "responses": {"200": {"description": "OK", "schema": schema.cloned().unwrap_or_else(|| json!({"type": "object"}))}, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": def.group, "version": def.version, "kind": def.kind},
    });
    if action == "patch" {
        op["x-kubernetes-action"] = json!("patch");
    }
    op
}

/// The OpenAPI v2 (Swagger 2.0) document of every served kind.
pub fn v2_doc(registry: &Registry) -> Value {
    let mut g = SchemaSettings::openapi3().into_generator();
    let mut paths = Map::new();
    let mut kinds: Vec<(String, ResourceDef)> = Vec::new();
    let mut custom = Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            let base = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
            for def in registry.in_group_version(group, version) {
                let Some((name, mut schema)) = served_kind(&mut g, def, &mut custom) else { continue };
                v2_refs(&mut schema);
                kinds.push((name, def.clone()));
                let (collection, item) = if def.namespaced {
                    (
                        format!("{base}/namespaces/{{namespace}}/{}", def.resource),
                        format!("{base}/namespaces/{{namespace}}/{}/{{name}}", def.resource),
                    )
                } else {
                    (format!("{base}/{}", def.resource), format!("{base}/{}/{{name}}", def.resource))
                };
                let mut path_params = vec![
                    json!({"name": "name", "in": "path", "required": true, "type": "string", "uniqueItems": true}),
                ];
                let mut coll_params = Vec::new();
                if def.namespaced {
                    let ns = json!({"name": "namespace", "in": "path", "required": true, "type": "string", "uniqueItems": true});
                    path_params.push(ns.clone());
                    coll_params.push(ns);
                }
                let writes = || {
                    vec![
                        v2_query("dryRun", "When present, indicates that modifications should not be persisted."),
                        v2_query(
                            "fieldManager",
                            "fieldManager is a name associated with the actor or entity that is making these changes.",
                        ),
                        v2_query(
                            "fieldValidation",
                            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields.",
                        ),
                    ]
                };
                let mut patch_params = writes();
                patch_params.push(v2_query("force", "Force is going to \"force\" Apply requests."));
                let patch_body = json!({"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"});
                paths.insert(
                    item,
                    json!({
                        "get": v2_operation("get", def, Some(&schema), vec![], None),
                        "put": v2_operation("put", def, Some(&schema), writes(), Some(&schema)),
                        "patch": v2_operation("patch", def, Some(&schema), patch_params, Some(&patch_body)),
                        "delete": v2_operation("delete", def, None, vec![v2_query("dryRun", "dry run"), v2_query("propagationPolicy", "propagation policy")], None),
                        "parameters": path_params,
                    }),
                );
                paths.insert(
                    collection,
                    json!({
                        "get": v2_operation("list", def, None, ["labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch"].iter().map(|n| v2_query(n, n)).collect(), None),
                        "post": v2_operation("post", def, Some(&schema), writes(), Some(&schema)),
                        "delete": v2_operation("deletecollection", def, None, vec![], None),
                        "parameters": coll_params,
                    }),
                );
            }
        }
    }
    let mut schemas = g.take_definitions(true);
    schemas.extend(custom);
    for v in schemas.values_mut() {
        v2_refs(v);
    }
    annotate_kinds(&mut schemas, &kinds, "#/definitions/");
    for (name, v) in schemas.iter_mut() {
        v2_schema(v);
        if name == "io.k8s.apimachinery.pkg.api.resource.Quantity"
            && let Value::Object(m) = v
        {
            m.entry("type").or_insert_with(|| json!("string"));
        }
    }
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::endpoints::nonresource::GIT_VERSION},
        "paths": paths,
        "definitions": schemas,
        "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}

/// The media type kubectl asks for to get v2 in protobuf (gnostic's `openapi.v2.Document`).
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The same type as kube-apiserver also accepts it and labels its answers (`@` is not valid in
/// a media type, so Go's `mime.ParseMediaType` would reject the canonical form).
const V2_PROTOBUF_DOTTED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The representations of `/openapi/v2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V2Format {
    Json,
    Protobuf,
}

/// The representation of `/openapi/v2` the request's Accept prefers: the listed type with the
/// highest `q` (the first among equals) that is JSON (`application/json`, `application/*`,
/// `*/*`) or protobuf; JSON without Accept; `None` (406) when nothing listed is served.
fn negotiate_v2(headers: &HeaderMap) -> Option<V2Format> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Some(V2Format::Json);
    };
    let mut best: Option<(f32, V2Format)> = None;
    for clause in accept.split(',') {
        let mut parts = clause.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q =
            parts.filter_map(|p| p.trim().strip_prefix("q=")).find_map(|q| q.trim().parse::<f32>().ok()).unwrap_or(1.0);
        let format = match media.as_str() {
            "" if accept.trim().is_empty() => V2Format::Json,
            "*/*" | "application/*" | "application/json" => V2Format::Json,
            V2_PROTOBUF | V2_PROTOBUF_DOTTED => V2Format::Protobuf,
            _ => continue,
        };
        if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, format));
        }
    }
    best.map(|(_, f)| f)
}

/// Responses larger than this are gzip-compressed for clients that accept it (kube-apiserver's
/// threshold, 128 KiB).
const GZIP_THRESHOLD: usize = 128 * 1024;

/// True when `Accept-Encoding` lists `gzip` (or `*`) with a non-zero `q`.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let Some(v) = headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()) else { return false };
    v.split(',').any(|clause| {
        let mut parts = clause.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts.filter_map(|p| p.trim().strip_prefix("q=")).find_map(|q| q.trim().parse::<f32>().ok());
        matches!(coding.as_str(), "gzip" | "*") && q.unwrap_or(1.0) > 0.0
    })
}

/// `bytes` gzip-compressed (fastest level, as kube-apiserver compresses responses).
fn gzip(bytes: &[u8]) -> bytes::Bytes {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 8), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default().into()
}

/// A cached document as a response: 304 when the client has this version already; a large one
/// gzip-compressed (once per document) when the client accepts gzip.
fn cached_response(doc: &Encoded, content_type: &'static str, headers: &HeaderMap) -> Response {
    let etag = format!("\"{}\"", doc.etag);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let builder = Response::builder()
        .header(header::ETAG, &etag)
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::VARY, "Accept, Accept-Encoding");
    let resp = if fresh {
        builder.status(StatusCode::NOT_MODIFIED).body(Body::empty())
    } else if doc.bytes.len() > GZIP_THRESHOLD && accepts_gzip(headers) {
        let body = doc.gzip.get_or_init(|| gzip(&doc.bytes)).clone();
        builder
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, content_type)
            .header(header::CONTENT_ENCODING, "gzip")
            .body(Body::from(body))
    } else {
        builder.status(StatusCode::OK).header(header::CONTENT_TYPE, content_type).body(Body::from(doc.bytes.clone()))
    };
    resp.unwrap_or_default()
}

/// Hex digest of a document, for its ETag.
fn digest(bytes: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    format!("{:016X}", h.finish())
}

/// One encoded document, its ETag and (once asked for) its gzip-compressed form.
#[derive(Clone)]
struct Encoded {
    bytes: bytes::Bytes,
    etag: String,
    gzip: Arc<OnceLock<bytes::Bytes>>,
}

impl Encoded {
    /// A document whose ETag is a digest of its bytes.
    fn new(bytes: Vec<u8>) -> Encoded {
        let etag = digest(&bytes);
        Encoded::with_etag(bytes.into(), etag)
    }

    fn with_etag(bytes: bytes::Bytes, etag: String) -> Encoded {
        Encoded { bytes, etag, gzip: Arc::default() }
    }
}

/// The cached `/openapi/v2`: the custom resources it documents ([`custom_key`]), its JSON and,
/// once asked for, its protobuf form.
struct V2Cache {
    custom: Vec<usize>,
    json: Encoded,
    proto: Option<Encoded>,
}

static V2: Mutex<Option<V2Cache>> = Mutex::new(None);

/// The cached v2 document for the registry's current custom resources, (re)built when they
/// changed since it was cached. Callers hold the lock, so one request builds it.
fn v2_cached<'a>(registry: &Registry, cache: &'a mut Option<V2Cache>) -> &'a mut V2Cache {
    let custom = custom_key(registry.custom());
    if cache.as_ref().is_some_and(|c| c.custom != custom) {
        *cache = None;
    }
    cache.get_or_insert_with(|| {
        let json = Encoded::new(serde_json::to_vec(&v2_doc(registry)).unwrap_or_default());
        V2Cache { custom, json, proto: None }
    })
}

/// `/openapi/v2` as JSON.
fn v2_json(registry: &Registry) -> Encoded {
    v2_cached(registry, &mut V2.lock()).json.clone()
}

/// `/openapi/v2` in protobuf, encoded from the JSON bytes on first use (so both always agree;
/// the parsed document is dropped afterwards rather than kept in memory).
fn v2_proto(registry: &Registry) -> Encoded {
    let mut guard = V2.lock();
    let cached = v2_cached(registry, &mut guard);
    if let Some(p) = &cached.proto {
        return p.clone();
    }
    let doc: Value = serde_json::from_slice(&cached.json.bytes).unwrap_or_default();
    let proto = Encoded::new(crate::endpoints::openapi_v2_proto::encode(&doc));
    cached.proto = Some(proto.clone());
    proto
}

fn serve_v2(registry: &Registry, headers: &HeaderMap) -> Response {
    let (doc, content_type) = match negotiate_v2(headers) {
        Some(V2Format::Json) => (v2_json(registry), "application/json"),
        Some(V2Format::Protobuf) => (v2_proto(registry), V2_PROTOBUF_DOTTED),
        None => {
            return error_response(&ApiError::not_acceptable(format!(
                "only application/json and {V2_PROTOBUF} are served for /openapi/v2"
            )));
        }
    };
    cached_response(&doc, content_type, headers)
}

/// The `/openapi/v3` group-version document of `group`/`version` with its hash (fixed per
/// build without custom resources, else a digest of the content), cached until the custom
/// resources of that group-version change; `None` when nothing is documented there.
fn cached_group_version_doc(registry: &Registry, group: &str, version: &str) -> Option<CachedDoc> {
    let key = format!("{group}/{version}");
    let custom = custom_key(registry.in_group_version(group, version));
    if let Some(doc) = DOCS.lock().get(&key).filter(|d| d.custom == custom) {
        return Some(doc.clone());
    }
    let bytes =
        bytes::Bytes::from(serde_json::to_vec(&group_version_doc(registry, group, version)?).unwrap_or_default());
    let hash = if custom.is_empty() { HASH.to_string() } else { digest(&bytes) };
    let doc = CachedDoc { custom, doc: Encoded::with_etag(bytes, hash) };
    DOCS.lock().insert(key, doc.clone());
    Some(doc)
}

/// The `/openapi/v3` discovery document: one entry per group-version, its URL carrying the
/// document's hash (so clients' caches keyed by URL see custom resource changes).
pub fn root(registry: &Registry) -> Value {
    let mut paths = Map::new();
    paths.insert("api/v1".into(), json!({"serverRelativeURL": format!("/openapi/v3/api/v1?hash={HASH}")}));
    // Only group-versions with at least one documented kind (not the virtual review APIs).
    let mut schemas = SchemaSettings::openapi3().into_generator();
    for (g, versions) in registry.groups() {
        for v in versions {
            let defs: Vec<&ResourceDef> = registry.in_group_version(g, v).collect();
            let hash = if defs.iter().any(|d| d.custom.is_some()) {
                cached_group_version_doc(registry, g, v).map(|d| d.doc.etag)
            } else if defs.iter().any(|d| kind_schema(&mut schemas, &d.api_version(), d.kind).is_some()) {
                Some(HASH.to_string())
            } else {
                None
            };
            if let Some(hash) = hash {
                paths.insert(
                    format!("apis/{g}/{v}"),
                    json!({"serverRelativeURL": format!("/openapi/v3/apis/{g}/{v}?hash={hash}")}),
                );
            }
        }
    }
    json!({"paths": paths})
}

/// Serves `/openapi/...` (`rest` is the path after `/openapi`).
pub fn handle(state: &AppState, rest: &[&str], headers: &HeaderMap) -> Response {
    let not_found =
        || error_response(&ApiError::new(404, "NotFound", "the server could not find the requested resource"));
    let (group, version) = match rest {
        ["v2"] => return serve_v2(&state.registry, headers),
        ["v3"] => {
            let mut index = root(&state.registry);
            if let Some(paths) = index["paths"].as_object_mut() {
                paths.extend(crate::aggregator::openapi_v3_paths(state));
            }
            return json_response(StatusCode::OK, &index);
        }
        ["v3", "api", v] => ("", *v),
        ["v3", "apis", g, v] => (*g, *v),
        _ => return not_found(),
    };
    let Some(doc) = cached_group_version_doc(&state.registry, group, version) else { return not_found() };
    let mut resp = cached_response(&doc.doc, "application/json", headers);
    // The root links to this document with ?hash=, so it may be cached for good.
    resp.headers_mut().insert(header::CACHE_CONTROL, axum::http::HeaderValue::from_static("public, immutable"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubectl validates manifests against /openapi/v3 (1.29+) or the protobuf v2 document
    /// (1.27, 1.28), so `kubectl apply` of any served kind needs its schema.
    #[test]
    fn every_served_built_in_kind_has_a_schema() {
        let registry = Registry::default();
        let mut g = SchemaSettings::openapi3().into_generator();
        let mut missing = Vec::new();
        for (group, versions) in registry.groups() {
            for v in versions {
                for def in registry.in_group_version(group, v) {
                    if kind_schema(&mut g, &def.api_version(), def.kind).is_none() {
                        missing.push(format!("{} {}", def.api_version(), def.kind));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "kinds without an OpenAPI schema: {missing:?}");
    }

    #[test]
    fn apps_v1_document_marks_deployment_patch_with_gvk_and_field_validation() {
        let doc = group_version_doc(&Registry::default(), "apps", "v1").unwrap();
        let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Deployment");
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        let schema = &doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(schema["x-kubernetes-group-version-kind"][0]["kind"], "Deployment");
        assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"].is_object());
    }
    #[test]
    fn v2_document_has_kinds_with_gvk_and_patch_strategies() {
        let doc = v2_doc(&Registry::default());
        assert_eq!(doc["swagger"], "2.0");
        let defs = &doc["definitions"];
        assert_eq!(defs["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"][0]["kind"], "Deployment");
        let containers = &defs["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        let ports = &defs["io.k8s.api.core.v1.Container"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
        assert_eq!(ports["x-kubernetes-list-map-keys"], json!(["containerPort", "protocol"]));
        assert!(defs["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"].is_object());
        let text = serde_json::to_string(&doc).unwrap();
        assert!(!text.contains("#/components/schemas/"), "every $ref points into #/definitions/");
        let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Deployment");
    }

    fn accept(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, value.parse().unwrap());
        h
    }

    #[test]
    fn v2_accept_negotiation_picks_json_or_protobuf_by_preference() {
        assert_eq!(negotiate_v2(&HeaderMap::new()), Some(V2Format::Json));
        assert_eq!(negotiate_v2(&accept("application/json, */*")), Some(V2Format::Json));
        assert_eq!(negotiate_v2(&accept(V2_PROTOBUF)), Some(V2Format::Protobuf));
        assert_eq!(negotiate_v2(&accept(V2_PROTOBUF_DOTTED)), Some(V2Format::Protobuf));
        assert_eq!(negotiate_v2(&accept(&format!("application/json;q=0.5, {V2_PROTOBUF}"))), Some(V2Format::Protobuf));
        assert_eq!(negotiate_v2(&accept(&format!("{V2_PROTOBUF}, application/json"))), Some(V2Format::Protobuf));
        assert_eq!(negotiate_v2(&accept(&format!("{V2_PROTOBUF};q=0, application/json"))), Some(V2Format::Json));
        assert_eq!(negotiate_v2(&accept("application/yaml")), None);
        assert_eq!(negotiate_v2(&accept("application/vnd.kubernetes.protobuf")), None);
    }

    #[test]
    fn v2_uses_swagger_two_refs_and_kubernetes_primitive_types() {
        let doc = v2_doc(&Registry::default());
        fn no_v3_keywords(path: &str, s: &Value) {
            assert!(s.get("allOf").is_none() && s.get("oneOf").is_none(), "allOf/oneOf at {path}: {s}");
            for (k, p) in s.get("properties").and_then(Value::as_object).into_iter().flatten() {
                no_v3_keywords(&format!("{path}.{k}"), p);
            }
            for child in ["items", "additionalProperties"] {
                if let Some(c) = s.get(child).filter(|c| c.is_object()) {
                    no_v3_keywords(&format!("{path}[{child}]"), c);
                }
            }
        }
        let defs = &doc["definitions"];
        for (name, def) in defs.as_object().unwrap() {
            no_v3_keywords(name, def);
        }
        let strategy = &defs["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"];
        assert_eq!(strategy["$ref"], "#/definitions/io.k8s.api.apps.v1.DeploymentStrategy");
        assert!(strategy["description"].is_string());
        let int_or_string = &defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
        assert_eq!((&int_or_string["type"], &int_or_string["format"]), (&json!("string"), &json!("int-or-string")));
        assert_eq!(defs["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"], "string");
    }

    fn body(resp: Response) -> bytes::Bytes {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(axum::body::to_bytes(resp.into_body(), usize::MAX)).unwrap()
    }

    fn extension(exts: &[crate::endpoints::openapi_v2_proto::NamedAny], name: &str) -> Value {
        let e = exts.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("no {name} extension"));
        serde_saphyr::from_str(&e.value.as_ref().unwrap().yaml).unwrap()
    }

    #[test]
    fn served_protobuf_v2_decodes_to_the_json_documents_definitions_and_paths() {
        use crate::endpoints::openapi_v2_proto::*;
        let registry = Registry::default();
        let resp = serve_v2(&registry, &accept(V2_PROTOBUF));
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], V2_PROTOBUF_DOTTED);
        let etag = resp.headers()[header::ETAG].clone();
        let doc = decode(&body(resp)).expect("a gnostic openapi.v2.Document");
        assert_eq!(doc.swagger, "2.0");
        let json = v2_doc(&registry);

        let defs = doc.definitions.unwrap().additional_properties;
        assert_eq!(defs.len(), json["definitions"].as_object().unwrap().len());
        let def = |name: &str| {
            defs.iter().find(|d| d.name == name).and_then(|d| d.value.clone()).unwrap_or_else(|| panic!("no {name}"))
        };
        let deployment = def("io.k8s.api.apps.v1.Deployment");
        assert_eq!(
            extension(&deployment.vendor_extension, "x-kubernetes-group-version-kind"),
            json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
        );
        assert_eq!(deployment.r#type.as_ref().unwrap().value, ["object"]);
        let prop = |s: &Schema, name: &str| {
            s.properties.as_ref().unwrap().additional_properties.iter().find(|p| p.name == name).unwrap().value.clone()
        };
        let spec = prop(&deployment, "spec").unwrap();
        assert_eq!(spec.xref, "#/definitions/io.k8s.api.apps.v1.DeploymentSpec");
        let strategy = prop(&def("io.k8s.api.apps.v1.DeploymentSpec"), "strategy").unwrap();
        assert_eq!(strategy.xref, "#/definitions/io.k8s.api.apps.v1.DeploymentStrategy");
        assert!(strategy.description.contains("deployment strategy"), "{}", strategy.description);
        let containers = prop(&def("io.k8s.api.core.v1.PodSpec"), "containers").unwrap();
        assert_eq!(extension(&containers.vendor_extension, "x-kubernetes-patch-merge-key"), json!("name"));
        assert_eq!(extension(&containers.vendor_extension, "x-kubernetes-patch-strategy"), json!("merge"));
        assert_eq!(containers.items.unwrap().schema[0].xref, "#/definitions/io.k8s.api.core.v1.Container");
        let ports = prop(&def("io.k8s.api.core.v1.Container"), "ports").unwrap();
        assert_eq!(
            extension(&ports.vendor_extension, "x-kubernetes-list-map-keys"),
            json!(["containerPort", "protocol"])
        );
        let labels = prop(&def("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"), "labels").unwrap();
        assert!(matches!(
            labels.additional_properties.and_then(|a| a.oneof),
            Some(AdditionalPropertiesOneof::Schema(s)) if s.r#type.as_ref().unwrap().value == ["string"]
        ));

        // kubectl finds the server's field validation on the PATCH operation of a kind.
        let paths = doc.paths.unwrap().path;
        assert_eq!(paths.len(), json["paths"].as_object().unwrap().len());
        let item = paths
            .iter()
            .find(|p| p.name == "/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
            .and_then(|p| p.value.clone())
            .unwrap();
        let patch = item.patch.unwrap();
        assert_eq!(
            extension(&patch.vendor_extension, "x-kubernetes-group-version-kind"),
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert!(patch.parameters.iter().any(|p| matches!(
            &p.oneof,
            Some(ParametersItemOneof::Parameter(Parameter { oneof: Some(ParameterOneof::NonBodyParameter(NonBodyParameter {
                oneof: Some(NonBodyParameterOneof::QueryParameterSubSchema(q)) })) })) if q.name == "fieldValidation"
        )));

        // Cached: the same ETag revalidates to 304, and differs from the JSON one.
        let mut again = accept(V2_PROTOBUF);
        again.insert(header::IF_NONE_MATCH, etag.clone());
        assert_eq!(serve_v2(&registry, &again).status(), StatusCode::NOT_MODIFIED);
        let json_resp = serve_v2(&registry, &accept("application/json"));
        assert_eq!(json_resp.headers()[header::CONTENT_TYPE], "application/json");
        assert_ne!(json_resp.headers()[header::ETAG], etag);
        let served: Value = serde_json::from_slice(&body(json_resp)).unwrap();
        assert_eq!(served["swagger"], "2.0");
    }

    fn widget_crd(size_description: &str) -> Value {
        json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "metadata": {"type": "object"},
                        "spec": {"type": "object", "description": "What the widget should be.", "properties": {
                            "size": {"type": "integer", "description": size_description},
                            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                            "note": {"type": "string", "nullable": true},
                            "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        }},
                    },
                }}}],
            },
        })
    }

    fn serve_widgets(registry: &Registry, crd: &Value) {
        let cache = crate::storage::watchcache::WatchCache::new("/registry/example.com/widgets/".into(), 4, 4);
        registry.set_custom("widgets.example.com", crate::registry::crd::defs_for(crd, &cache, "example.com/widgets"));
    }

    #[test]
    fn custom_definition_names_reverse_the_group() {
        assert_eq!(custom_definition_name("example.com", "v1", "Widget"), "com.example.v1.Widget");
        assert_eq!(
            custom_definition_name("stable.example.com", "v1beta1", "CronTab"),
            "com.example.stable.v1beta1.CronTab"
        );
    }

    #[test]
    fn a_crd_schema_is_published_in_v3_with_object_meta_and_gvk() {
        let registry = Registry::default();
        assert!(group_version_doc(&registry, "example.com", "v1").is_none());
        serve_widgets(&registry, &widget_crd("How many widgets."));
        let doc = group_version_doc(&registry, "example.com", "v1").expect("a document for example.com/v1");
        let schemas = &doc["components"]["schemas"];
        let widget = &schemas["com.example.v1.Widget"];
        assert_eq!(
            widget["x-kubernetes-group-version-kind"],
            json!([{"group": "example.com", "version": "v1", "kind": "Widget"}])
        );
        assert_eq!(widget["properties"]["spec"]["properties"]["size"]["description"], "How many widgets.");
        assert_eq!(widget["properties"]["metadata"]["allOf"][0]["$ref"], format!("#/components/schemas/{OBJECT_META}"));
        assert!(widget["properties"]["apiVersion"]["description"].is_string());
        assert!(schemas[OBJECT_META]["properties"]["name"].is_object());
        let patch = &doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Widget");
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        let content = patch["requestBody"]["content"].as_object().unwrap();
        assert!(content.contains_key("application/merge-patch+json"));
        assert!(!content.contains_key("application/strategic-merge-patch+json"), "no strategic merge patch for CRs");
        let hash = root(&registry)["paths"]["apis/example.com/v1"]["serverRelativeURL"].as_str().unwrap().to_string();
        assert!(!hash.ends_with(HASH), "{hash}");

        serve_widgets(&registry, &widget_crd("The number of widgets."));
        let changed =
            root(&registry)["paths"]["apis/example.com/v1"]["serverRelativeURL"].as_str().unwrap().to_string();
        assert_ne!(changed, hash, "a schema change changes the document's URL");
        let cached = cached_group_version_doc(&registry, "example.com", "v1").unwrap();
        assert!(String::from_utf8_lossy(&cached.doc.bytes).contains("The number of widgets."));

        registry.set_custom("widgets.example.com", Vec::new());
        assert!(root(&registry)["paths"].get("apis/example.com/v1").is_none());
        assert!(cached_group_version_doc(&registry, "example.com", "v1").is_none());
    }

    #[test]
    fn a_crd_schema_is_converted_to_swagger_two_in_v2_and_the_cache_follows_crd_changes() {
        let registry = Registry::default();
        let before = serve_v2(&registry, &accept(V2_PROTOBUF)).headers()[header::ETAG].clone();
        serve_widgets(&registry, &widget_crd("How many widgets."));
        let doc = v2_doc(&registry);
        let widget = &doc["definitions"]["com.example.v1.Widget"];
        assert_eq!(widget["x-kubernetes-group-version-kind"][0]["kind"], "Widget");
        assert_eq!(widget["properties"]["metadata"]["$ref"], format!("#/definitions/{OBJECT_META}"));
        assert!(widget["properties"]["metadata"].get("allOf").is_none());
        let spec = &widget["properties"]["spec"]["properties"];
        assert_eq!(spec["size"], json!({"type": "integer", "description": "How many widgets."}));
        assert_eq!(spec["port"], json!({"type": "string", "format": "int-or-string"}));
        assert_eq!(spec["note"], json!({"type": "string"}));
        assert_eq!(spec["tags"]["x-kubernetes-list-type"], "set");
        assert!(doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets"]["post"].is_object());

        // Served protobuf and JSON follow the CRD: built again after it changes or goes away.
        let resp = serve_v2(&registry, &accept(V2_PROTOBUF));
        assert_ne!(resp.headers()[header::ETAG], before);
        let proto = crate::endpoints::openapi_v2_proto::decode(&body(resp)).unwrap();
        let defs = proto.definitions.unwrap().additional_properties;
        assert!(defs.iter().any(|d| d.name == "com.example.v1.Widget"));
        let json: Value = serde_json::from_slice(&body(serve_v2(&registry, &accept("application/json")))).unwrap();
        assert!(json["definitions"]["com.example.v1.Widget"].is_object());
        registry.set_custom("widgets.example.com", Vec::new());
        let json: Value = serde_json::from_slice(&body(serve_v2(&registry, &accept("application/json")))).unwrap();
        assert!(json["definitions"].get("com.example.v1.Widget").is_none());
        let proto =
            crate::endpoints::openapi_v2_proto::decode(&body(serve_v2(&registry, &accept(V2_PROTOBUF)))).unwrap();
        assert!(!proto.definitions.unwrap().additional_properties.iter().any(|d| d.name == "com.example.v1.Widget"));
    }

    #[test]
    fn large_documents_are_gzipped_for_clients_that_accept_gzip() {
        use std::io::Read;
        assert!(accepts_gzip(
            &[(header::ACCEPT_ENCODING, "gzip")].into_iter().map(|(k, v)| (k, v.parse().unwrap())).collect()
        ));
        let with = |enc: &str| {
            let mut h = accept("application/json");
            h.insert(header::ACCEPT_ENCODING, enc.parse().unwrap());
            h
        };
        assert!(accepts_gzip(&with("deflate, gzip;q=0.5")));
        assert!(!accepts_gzip(&with("gzip;q=0, br")));
        assert!(!accepts_gzip(&HeaderMap::new()));

        let registry = Registry::default();
        let plain = body(serve_v2(&registry, &accept("application/json")));
        assert!(plain.len() > GZIP_THRESHOLD);
        let resp = serve_v2(&registry, &with("gzip"));
        assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
        assert!(resp.headers()[header::VARY].to_str().unwrap().contains("Accept-Encoding"));
        let compressed = body(resp);
        assert!(compressed.len() < plain.len() / 2, "{} of {} bytes", compressed.len(), plain.len());
        let mut inflated = Vec::new();
        flate2::read::GzDecoder::new(&compressed[..]).read_to_end(&mut inflated).unwrap();
        assert_eq!(inflated, plain);
        // A small document is sent as is.
        let doc = Encoded::with_etag(bytes::Bytes::from_static(b"{}"), "abc".into());
        assert!(
            cached_response(&doc, "application/json", &with("gzip")).headers().get(header::CONTENT_ENCODING).is_none()
        );
    }

    #[test]
    fn other_media_types_for_v2_are_not_acceptable_and_etag_revalidates() {
        let resp = serve_v2(&Registry::default(), &accept("application/yaml"));
        assert_eq!(resp.status(), StatusCode::NOT_ACCEPTABLE);
        let doc = Encoded::with_etag(bytes::Bytes::from_static(b"{}"), "abc".into());
        let first = cached_response(&doc, "application/json", &HeaderMap::new());
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers()[header::ETAG].clone();
        let mut again = HeaderMap::new();
        again.insert(header::IF_NONE_MATCH, etag);
        assert_eq!(cached_response(&doc, "application/json", &again).status(), StatusCode::NOT_MODIFIED);
    }
}
