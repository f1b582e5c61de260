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
//! Every document is generated once and then served from memory with an `ETag`
//! (`If-None-Match` → 304). The protobuf form of v2
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`) is not produced: a request
//! accepting only it gets 406.

use std::collections::HashMap;
use std::sync::LazyLock;

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
use crate::registry::{Registry, ResourceDef};
use crate::rest::{error_response, json_response};

/// Changes whenever the documents change (they are fixed per build).
const HASH: &str = concat!("skiff-", env!("CARGO_PKG_VERSION"));

static DOCS: LazyLock<Mutex<HashMap<String, bytes::Bytes>>> = LazyLock::new(Default::default);

fn add<T: JsonSchema>(g: &mut SchemaGenerator) -> (String, Value) {
    let r = g.subschema_for::<T>();
    (T::schema_name().to_string(), r.to_value())
}

/// The component-schema name and `$ref` of a kind, generating its schema (and everything it
/// refers to) into `g`.
fn kind_schema(g: &mut SchemaGenerator, api_version: &str, kind: &str) -> Option<(String, Value)> {
    use k8s_openapi::api::{
        admissionregistration, apps, batch, coordination, core, discovery, events, networking, policy, rbac, scheduling,
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
        ("scheduling.k8s.io/v1", "PriorityClass") => add::<scheduling::v1::PriorityClass>(g),
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
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            add::<apiextensions::v1::CustomResourceDefinition>(g)
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
    for def in registry.in_group_version(group, version) {
        let Some((name, schema)) = kind_schema(&mut g, &def.api_version(), def.kind) else { continue };
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
    annotate_kinds(&mut schemas, &kinds, "#/components/schemas/");
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::nonresource::GIT_VERSION},
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
        "consumes": if action == "patch" {
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
    for (group, versions) in registry.groups() {
        for version in versions {
            let base = if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
            for def in registry.in_group_version(group, version) {
                let Some((name, mut schema)) = kind_schema(&mut g, &def.api_version(), def.kind) else { continue };
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
    for v in schemas.values_mut() {
        v2_refs(v);
    }
    annotate_kinds(&mut schemas, &kinds, "#/definitions/");
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::nonresource::GIT_VERSION},
        "paths": paths,
        "definitions": schemas,
        "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}

/// The media type of protobuf OpenAPI v2, which skiff does not produce.
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2";

/// True when the request's Accept allows JSON (no Accept, `*/*`, `application/*`, JSON).
fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else { return true };
    accept
        .split(',')
        .map(|t| t.split(';').next().unwrap_or("").trim())
        .any(|t| matches!(t, "" | "*/*" | "application/*" | "application/json"))
}

/// A cached document as a response: 304 when the client has this version already.
fn cached_response(bytes: bytes::Bytes, etag: &str, headers: &HeaderMap) -> Response {
    let etag = format!("\"{etag}\"");
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let builder = Response::builder()
        .header(header::ETAG, &etag)
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::VARY, "Accept");
    let resp = if fresh {
        builder.status(StatusCode::NOT_MODIFIED).body(Body::empty())
    } else {
        builder.status(StatusCode::OK).header(header::CONTENT_TYPE, "application/json").body(Body::from(bytes))
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

static V2: std::sync::OnceLock<(bytes::Bytes, String)> = std::sync::OnceLock::new();

fn serve_v2(registry: &Registry, headers: &HeaderMap) -> Response {
    if !accepts_json(headers) {
        return error_response(&ApiError::not_acceptable(format!(
            "only application/json is served for /openapi/v2; {V2_PROTOBUF}@v1.0+protobuf is not"
        )));
    }
    let (bytes, etag) = V2.get_or_init(|| {
        let b = bytes::Bytes::from(serde_json::to_vec(&v2_doc(registry)).unwrap_or_default());
        let etag = digest(&b);
        (b, etag)
    });
    cached_response(bytes.clone(), etag, headers)
}

/// The `/openapi/v3` discovery document: one entry per group-version.
pub fn root(registry: &Registry) -> Value {
    let mut paths = Map::new();
    paths.insert("api/v1".into(), json!({"serverRelativeURL": format!("/openapi/v3/api/v1?hash={HASH}")}));
    // Only group-versions with at least one documented kind (not the virtual review APIs).
    let mut schemas = SchemaSettings::openapi3().into_generator();
    for (g, versions) in registry.groups() {
        for v in versions {
            if registry.in_group_version(g, v).any(|d| kind_schema(&mut schemas, &d.api_version(), d.kind).is_some()) {
                paths.insert(
                    format!("apis/{g}/{v}"),
                    json!({"serverRelativeURL": format!("/openapi/v3/apis/{g}/{v}?hash={HASH}")}),
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
        ["v3"] => return json_response(StatusCode::OK, &root(&state.registry)),
        ["v3", "api", v] => ("", *v),
        ["v3", "apis", g, v] => (*g, *v),
        _ => return not_found(),
    };
    let key = format!("{group}/{version}");
    let cached = DOCS.lock().get(&key).cloned();
    let bytes = match cached {
        Some(b) => b,
        None => match group_version_doc(&state.registry, group, version) {
            None => return not_found(),
            Some(doc) => {
                let b = bytes::Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
                DOCS.lock().insert(key, b.clone());
                b
            }
        },
    };
    let mut resp = cached_response(bytes, HASH, headers);
    // The root links to this document with ?hash=, so it may be cached for good.
    resp.headers_mut().insert(header::CACHE_CONTROL, axum::http::HeaderValue::from_static("public, immutable"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubectl validates manifests against /openapi/v3 and falls back to the protobuf v2
    /// document (406 here) for a group-version the v3 index lacks, so `kubectl apply` of any
    /// served kind needs its schema.
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

    #[test]
    fn protobuf_only_v2_is_not_acceptable_and_etag_revalidates() {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, "application/com.github.proto-openapi.spec.v2@v1.0+protobuf".parse().unwrap());
        assert!(!accepts_json(&h));
        h.insert(header::ACCEPT, "application/json, */*".parse().unwrap());
        assert!(accepts_json(&h));
        let first = cached_response(bytes::Bytes::from_static(b"{}"), "abc", &HeaderMap::new());
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers()[header::ETAG].clone();
        let mut again = HeaderMap::new();
        again.insert(header::IF_NONE_MATCH, etag);
        assert_eq!(cached_response(bytes::Bytes::from_static(b"{}"), "abc", &again).status(), StatusCode::NOT_MODIFIED);
    }
}
