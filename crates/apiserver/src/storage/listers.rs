//! Reads of the watch caches by key or prefix, the way kube-apiserver's admission plugins and
//! authenticators read their informers' listers: no store round trip, no copy of a whole
//! resource's snapshot for one object.

use std::sync::Arc;

use serde_json::Value;
use skiff_apimachinery::ApiError;

use crate::AppState;

/// The objects of one watch cache under `prefix` (a namespace prefix or an exact key).
pub(crate) fn cache_objects(state: &AppState, storage: &str, prefix_tail: &str) -> Vec<Arc<Value>> {
    let Some(cache) = state.caches.get(storage) else { return Vec::new() };
    cache.snapshot(&format!("/registry/{storage}/{prefix_tail}")).objects
}

/// One object from a watch cache (`ns` empty for cluster-scoped objects).
pub(crate) fn cache_get(state: &AppState, storage: &str, ns: &str, name: &str) -> Option<Value> {
    cache_get_shared(state, storage, ns, name).map(|o| (*o).clone())
}

/// One object from a watch cache, shared with the cache (not copied).
pub(crate) fn cache_get_shared(state: &AppState, storage: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
    let cache = state.caches.get(storage)?;
    // One key lookup: no snapshot of the prefix (nor a subscription to it) per call.
    let mut key = String::with_capacity(11 + storage.len() + ns.len() + name.len());
    key.push_str("/registry/");
    key.push_str(storage);
    key.push('/');
    if !ns.is_empty() {
        key.push_str(ns);
        key.push('/');
    }
    key.push_str(name);
    cache.get(&key)
}

/// Which port of a Service a caller means.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ServicePortRef<'a> {
    /// The Service port numbered so (a webhook's `clientConfig.service.port`).
    Number(i32),
    /// The port part of a `services/{[scheme:]name[:port]}/proxy` request: a port number, else
    /// a port name ("" for a Service's one unnamed port).
    Proxy(&'a str),
}

/// `host:port`, with an IPv6 host in brackets.
pub(crate) fn host_port(host: &str, port: i64) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// The `host:port` of a ready endpoint behind a Service's port, from the watch caches
/// (k8s.io/apiserver `proxy.ResolveEndpoint`, and the service proxy's `ResourceLocation` in
/// `pkg/registry/core/service/storage`): the Service port names the endpoint port; addresses
/// come from the Service's EndpointSlices (label `kubernetes.io/service-name`; endpoints whose
/// `ready` condition is not false), else from its Endpoints. An `ExternalName` Service asked by
/// port number resolves to its external name (`proxy.ResolveCluster`).
///
/// # Errors
/// 404 NotFound for a missing Service; 503 ServiceUnavailable, in kube-apiserver's words, when
/// the Service has no such port or no ready endpoint for it.
pub(crate) fn resolve_service_endpoint(
    state: &AppState,
    namespace: &str,
    name: &str,
    port: ServicePortRef<'_>,
) -> Result<String, ApiError> {
    let objects = |group: &str, resource: &str| {
        state
            .registry
            .get(group, "v1", resource)
            .map_or_else(Vec::new, |d| cache_objects(state, d.storage, &format!("{namespace}/")))
    };
    let storage = state.registry.get("", "v1", "services").map(|d| d.storage).unwrap_or("services/specs");
    let svc = cache_get_shared(state, storage, namespace, name)
        .ok_or_else(|| ApiError::new(404, "NotFound", format!("services \"{name}\" not found")))?;
    let ports = svc["spec"]["ports"].as_array().cloned().unwrap_or_default();
    let port_name = match port {
        ServicePortRef::Number(n) => {
            if svc["spec"]["type"] == "ExternalName" {
                return Ok(host_port(svc["spec"]["externalName"].as_str().unwrap_or_default(), n.into()));
            }
            let p = ports
                .iter()
                .find(|p| p["port"].as_i64() == Some(n.into()))
                .ok_or_else(|| ApiError::unavailable(format!("no service port {n} found for service \"{name}\"")))?;
            p["name"].as_str().unwrap_or_default().to_string()
        }
        ServicePortRef::Proxy(s) => match s.parse::<i64>() {
            // A number names the Service port with that number; anything else is a port name.
            Ok(n) => ports
                .iter()
                .find(|p| p["port"].as_i64() == Some(n))
                .map(|p| p["name"].as_str().unwrap_or_default().to_string())
                .ok_or_else(|| ApiError::unavailable(format!("no service port {n} found for service \"{name}\"")))?,
            Err(_) => s.to_string(),
        },
    };
    let named = |p: &&Value| p["name"].as_str().unwrap_or_default() == port_name;
    for slice in objects("discovery.k8s.io", "endpointslices") {
        if slice["metadata"]["labels"]["kubernetes.io/service-name"] != name {
            continue;
        }
        let Some(target) = slice["ports"].as_array().into_iter().flatten().find(named).and_then(|p| p["port"].as_i64())
        else {
            continue;
        };
        let ready = slice["endpoints"].as_array().into_iter().flatten().filter(|ep| ep["conditions"]["ready"] != false);
        if let Some(addr) = ready.filter_map(|ep| ep["addresses"][0].as_str()).next() {
            return Ok(host_port(addr, target));
        }
    }
    for eps in objects("", "endpoints") {
        if eps["metadata"]["name"] != name {
            continue;
        }
        for subset in eps["subsets"].as_array().into_iter().flatten() {
            let target = subset["ports"].as_array().into_iter().flatten().find(named).and_then(|p| p["port"].as_i64());
            if let (Some(target), Some(ip)) = (target, subset["addresses"][0]["ip"].as_str()) {
                return Ok(host_port(ip, target));
            }
        }
    }
    Err(ApiError::unavailable(format!("no endpoints available for service \"{name}\"")))
}
