//! API discovery: `/api`, `/api/v1`, `/apis`, `/apis/<group>[/<version>]` and aggregated
//! discovery (`apidiscovery.k8s.io/v2`), generated from the [`Registry`] and merged with the
//! groups aggregated API servers serve ([`crate::aggregator`])
//! (<https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api>).

use std::collections::HashMap;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use crate::AppState;
use crate::endpoints::responsewriters::json_response;
use crate::resources::{Registry, ResourceDef};

/// The media type of aggregated discovery responses.
pub const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// `/api`: `APIVersions`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(group: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"name": group, "versions": vs.clone(), "preferredVersion": vs[0]})
}

/// `/apis`: `APIGroupList`.
pub fn api_group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry.groups().iter().map(|(g, vs)| group_entry(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`: `APIGroup`, or `None` for an unknown group.
pub fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    let (g, vs) = registry.groups().into_iter().find(|(g, _)| *g == group)?;
    let mut v = group_entry(g, &vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

fn verbs(v: &[&str]) -> Value {
    json!(v)
}

/// `/api/v1` or `/apis/<group>/<version>`: `APIResourceList`, or `None` when unknown.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs: Vec<&ResourceDef> = registry.in_group_version(group, version).collect();
    if defs.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for d in defs {
        let mut r = json!({
            "name": d.resource,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": verbs(d.verbs),
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        for s in d.subresources {
            let mut sr = json!({
                "name": format!("{}/{}", d.resource, s.name),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": s.kind,
                "verbs": verbs(s.verbs),
            });
            if !s.group.is_empty() {
                sr["group"] = json!(s.group);
            }
            if !s.version.is_empty() {
                sr["version"] = json!(s.version);
            }
            resources.push(sr);
        }
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

fn aggregated_resource(d: &ResourceDef) -> Value {
    let mut r = json!({
        "resource": d.resource,
        "responseKind": {"group": d.group, "version": d.version, "kind": d.kind},
        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": d.singular,
        "verbs": verbs(d.verbs),
    });
    if !d.short_names.is_empty() {
        r["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        r["categories"] = json!(d.categories);
    }
    if !d.subresources.is_empty() {
        let subs: Vec<Value> = d
            .subresources
            .iter()
            .map(|s| {
                let group = if s.version.is_empty() { d.group } else { s.group };
                let version = if s.version.is_empty() { d.version } else { s.version };
                json!({
                    "subresource": s.name,
                    "responseKind": {"group": group, "version": version, "kind": s.kind},
                    "verbs": verbs(s.verbs),
                })
            })
            .collect();
        r["subresources"] = json!(subs);
    }
    r
}

fn aggregated_group(registry: &Registry, group: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = registry.in_group_version(group, v).map(aggregated_resource).collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": vs})
}

/// Aggregated discovery for `/api` (`core == true`) or `/apis`: an `APIGroupDiscoveryList`.
pub fn aggregated(registry: &Registry, core: bool) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(registry, "", &["v1"])]
    } else {
        registry.groups().iter().map(|(g, vs)| aggregated_group(registry, g, vs)).collect()
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// `/api` and `/apis` discovery, plain or aggregated per `Accept`.
pub fn discovery_response(state: &AppState, headers: &HeaderMap, core: bool) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    // The first media range the server can produce wins (client-go lists v2, v2beta1, then
    // plain JSON).
    let mut wants_aggregated = false;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let mime = parts.next().unwrap_or("");
        let params: HashMap<&str, &str> = parts.filter_map(|p| p.split_once('=')).collect();
        if mime != "application/json" && mime != "*/*" {
            continue;
        }
        match (params.get("as"), params.get("g"), params.get("v")) {
            (Some(&"APIGroupDiscoveryList"), Some(&"apidiscovery.k8s.io"), Some(&"v2")) => {
                wants_aggregated = true;
                break;
            }
            (None, _, _) => break,
            _ => continue,
        }
    }
    if wants_aggregated {
        let mut body = aggregated(&state.registry, core);
        if !core && let Some(items) = body["items"].as_array_mut() {
            items.extend(crate::aggregator::aggregated_groups(state));
        }
        let mut resp = json_response(StatusCode::OK, &body);
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(AGGREGATED_V2));
        resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
        return resp;
    }
    let body = if core {
        api_versions(&state.server_address)
    } else {
        let mut list = api_group_list(&state.registry);
        if let Some(groups) = list["groups"].as_array_mut() {
            groups.extend(crate::aggregator::legacy_groups(state));
        }
        list
    };
    let mut resp = json_response(StatusCode::OK, &body);
    resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_has_pods_with_short_name_and_subresources() {
        let r = Registry::default();
        let list = resource_list(&r, "", "v1").unwrap();
        let res = list["resources"].as_array().unwrap();
        let pods = res.iter().find(|x| x["name"] == "pods").unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert!(res.iter().any(|x| x["name"] == "pods/status"));
        let eviction = res.iter().find(|x| x["name"] == "pods/eviction").unwrap();
        assert_eq!(eviction["group"], "policy");
    }

    #[test]
    fn aggregated_discovery_lists_every_group_with_scale_as_autoscaling() {
        let r = Registry::default();
        let agg = aggregated(&r, false);
        let apps = agg["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == "apps").unwrap();
        let deploy = &apps["versions"][0]["resources"][0];
        assert_eq!(deploy["resource"], "deployments");
        let scale = deploy["subresources"].as_array().unwrap().iter().find(|s| s["subresource"] == "scale").unwrap();
        assert_eq!(scale["responseKind"]["group"], "autoscaling");
    }
}
