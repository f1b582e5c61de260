//! OpenAPI v3 (`/openapi/v3` and `/openapi/v3/<api|apis/group>/<version>`), generated from the
//! k8s-openapi types' JSON schemas (its `schemars` feature), with the Kubernetes extensions
//! clients look for: `x-kubernetes-group-version-kind` on kinds and on operations, and the
//! `fieldValidation`/`dryRun`/`fieldManager` query parameters on writes. kubectl reads it for
//! `kubectl explain` and to learn that the server validates fields itself (so `kubectl apply`
//! sends `fieldValidation=Strict` instead of validating client-side).
//! See <https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3>.
//!
//! `/openapi/v2` (protobuf-only in practice for kubectl) is not served.

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
    use k8s_openapi::api::{apps, coordination, core, events, rbac};
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
        ("coordination.k8s.io/v1", "Lease") => add::<coordination::v1::Lease>(g),
        ("rbac.authorization.k8s.io/v1", "Role") => add::<rbac::v1::Role>(g),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => add::<rbac::v1::RoleBinding>(g),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => add::<rbac::v1::ClusterRole>(g),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => add::<rbac::v1::ClusterRoleBinding>(g),
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
    for (name, def) in kinds {
        if let Some(Value::Object(s)) = schemas.get_mut(&name) {
            s.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": def.group, "version": def.version, "kind": def.kind}]),
            );
        }
    }
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
pub fn handle(state: &AppState, rest: &[&str], _headers: &HeaderMap) -> Response {
    let not_found =
        || error_response(&ApiError::new(404, "NotFound", "the server could not find the requested resource"));
    let (group, version) = match rest {
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
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "public, immutable")
        .header(header::ETAG, format!("\"{HASH}\""))
        .body(Body::from(bytes))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
