//! API aggregation: kube-aggregator in front of the API server
//! (<https://kubernetes.io/docs/concepts/extend-kubernetes/api-extension/apiserver-aggregation/>).
//!
//! `apiregistration.k8s.io/v1` APIServices are stored like any resource. One naming a
//! `spec.service` claims its group-version: every request under `/apis/<group>/<version>` is
//! proxied to that Service's endpoints ([`proxy`]) over TLS with the front proxy's client
//! certificate and the requester in `X-Remote-User`/`X-Remote-Group` headers, as the
//! `extension-apiserver-authentication` ConfigMap ([`crate::controlplane::clusterauthenticationtrust`])
//! tells aggregated servers to expect. [`available`] is the APIService controller pair
//! kube-aggregator runs: the autoregistration of a Local APIService per group-version served
//! here (built-in ones `onstart`, a CRD's while it is served) and the `Available` condition
//! (Local, or ServiceNotFound, ServicePortError, EndpointsNotFound, MissingEndpoints,
//! FailedDiscoveryCheck, Passed). Discovery merges the aggregated group-versions
//! ([`legacy_groups`], [`aggregated_groups`]) from the `APIResourceList` each availability
//! check fetched.

pub mod available;
pub mod proxy;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;
use serde_json::{Value, json};

use crate::AppState;
use crate::pki::CertPair;
use crate::resources::version_priority;

/// The store segment of APIServices.
pub const STORAGE: &str = "apiregistration.k8s.io/apiservices";

/// The label marking APIServices the server manages itself (`autoregister.AutoRegisterManagedLabel`):
/// `onstart` for built-in group-versions, `true` for those of CRDs.
pub const AUTOMANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";

/// What the aggregator keeps between requests.
pub struct Aggregator {
    /// The front proxy's client certificate ([`crate::pki::Pki::front_proxy_client`]).
    pub front_proxy: CertPair,
    /// The `APIResourceList` each service-backed APIService answered its last successful
    /// discovery check with, by APIService name.
    discovery: RwLock<HashMap<String, Value>>,
    /// Every Local APIService exists and is Available (kube-apiserver's
    /// `autoregister-completion` readiness check).
    synced: AtomicBool,
}

impl Aggregator {
    /// An aggregator presenting `front_proxy` to aggregated servers.
    pub fn new(front_proxy: CertPair) -> Self {
        Self { front_proxy, discovery: RwLock::default(), synced: AtomicBool::new(false) }
    }

    /// True once every Local APIService has been registered and marked Available.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Records that every Local APIService is registered and Available.
    pub(crate) fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// Records the discovery document of APIService `name` (`None`: forget it).
    pub fn set_discovery(&self, name: &str, doc: Option<Value>) {
        let mut map = self.discovery.write();
        match doc {
            Some(d) => {
                map.insert(name.to_string(), d);
            }
            None => {
                map.remove(name);
            }
        }
    }

    /// Forgets the documents of APIServices not in `names`.
    pub fn retain_discovery(&self, names: &[&str]) {
        self.discovery.write().retain(|k, _| names.contains(&k.as_str()));
    }

    /// The last discovery document of APIService `name`.
    pub fn discovery(&self, name: &str) -> Option<Value> {
        self.discovery.read().get(name).cloned()
    }
}

/// Every stored APIService.
pub fn api_services(state: &AppState) -> Vec<Arc<Value>> {
    crate::storage::listers::cache_objects(state, STORAGE, "")
}

/// True when `api_service` is served by an aggregated server (`spec.service` is set).
pub fn is_remote(api_service: &Value) -> bool {
    api_service["spec"]["service"].is_object()
}

/// True when the `Available` condition of `api_service` is `True`.
pub fn is_available(api_service: &Value) -> bool {
    api_service["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Available" && c["status"] == "True"))
}

/// The `/openapi/v3` index entries (`apis/<group>/<version>` → `serverRelativeURL`) of the
/// group-versions aggregated servers serve that are not served here; each document is fetched
/// from its server through the proxy (kube-aggregator's OpenAPI v3 aggregation forwards each
/// group-version's document as it is). The hash is the APIService's resourceVersion.
pub fn openapi_v3_paths(state: &AppState) -> Vec<(String, Value)> {
    let local: Vec<&str> = state.registry.groups().into_iter().map(|(g, _)| g).collect();
    api_services(state)
        .iter()
        .filter(|s| is_remote(s) && is_available(s))
        .filter_map(|s| {
            let (g, v) = (s["spec"]["group"].as_str()?, s["spec"]["version"].as_str()?);
            if g.is_empty() || local.contains(&g) {
                return None;
            }
            let hash = crate::util::meta_str(s, "resourceVersion");
            Some((
                format!("apis/{g}/{v}"),
                json!({"serverRelativeURL": format!("/openapi/v3/apis/{g}/{v}?hash={hash}")}),
            ))
        })
        .collect()
}

/// The service-backed APIService serving the OpenAPI v3 document at `path`
/// (`/openapi/v3/apis/<group>/<version>`), if any.
pub fn remote_for_openapi_path(state: &AppState, path: &str) -> Option<Arc<Value>> {
    let rest = path.strip_prefix("/openapi/v3")?;
    if rest.trim_matches('/').split('/').count() != 3 {
        return None;
    }
    remote_for_path(state, rest)
}

/// The service-backed APIService claiming the group-version of `path` (`/apis/<group>/<version>`
/// and below), if any. `/apis/<group>` alone is answered here, as kube-aggregator does.
pub fn remote_for_path(state: &AppState, path: &str) -> Option<Arc<Value>> {
    let mut segs = path.trim_start_matches('/').split('/');
    if segs.next() != Some("apis") {
        return None;
    }
    let group = segs.next().filter(|g| !g.is_empty())?;
    let version = segs.next().filter(|v| !v.is_empty())?;
    let api_service = crate::storage::listers::cache_get_shared(state, STORAGE, "", &format!("{version}.{group}"))?;
    is_remote(&api_service).then_some(api_service)
}

/// The versions of `group` that service-backed APIServices serve, preferred first (highest
/// `versionPriority`, then Kubernetes' version order, as kube-aggregator sorts them).
fn remote_versions(services: &[Arc<Value>], group: &str) -> Vec<(String, String)> {
    let mut versions: Vec<(i64, String, String)> = services
        .iter()
        .filter(|s| is_remote(s) && s["spec"]["group"] == group)
        .filter_map(|s| {
            let v = s["spec"]["version"].as_str()?;
            Some((
                s["spec"]["versionPriority"].as_i64().unwrap_or(0),
                v.to_string(),
                crate::util::meta_str(s, "name").to_string(),
            ))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| version_priority(&a.1).cmp(&version_priority(&b.1))));
    versions.into_iter().map(|(_, v, name)| (v, name)).collect()
}

/// The groups only aggregated servers serve (not served here), each with its versions preferred
/// first and the APIService names, ordered by `groupPriorityMinimum` (highest first) then name.
fn remote_groups(state: &AppState) -> Vec<(String, Vec<(String, String)>)> {
    let services = api_services(state);
    let local: Vec<&str> = state.registry.groups().into_iter().map(|(g, _)| g).collect();
    let mut groups: Vec<(i64, String)> = Vec::new();
    for s in services.iter().filter(|s| is_remote(s)) {
        let Some(g) = s["spec"]["group"].as_str() else { continue };
        if g.is_empty() || local.contains(&g) {
            continue;
        }
        let min = s["spec"]["groupPriorityMinimum"].as_i64().unwrap_or(0);
        match groups.iter_mut().find(|(_, name)| name == g) {
            Some(entry) => entry.0 = entry.0.max(min),
            None => groups.push((min, g.to_string())),
        }
    }
    groups.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    groups.into_iter().map(|(_, g)| (g.clone(), remote_versions(&services, &g))).collect()
}

fn group_entry(group: &str, versions: &[(String, String)]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|(v, _)| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    json!({"name": group, "versions": vs.clone(), "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// The `APIGroup` entries (`/apis`) of the groups aggregated servers serve.
pub fn legacy_groups(state: &AppState) -> Vec<Value> {
    remote_groups(state).iter().map(|(g, vs)| group_entry(g, vs)).collect()
}

/// `/apis/<group>` of a group aggregated servers serve: an `APIGroup`, or `None`.
pub fn legacy_group(state: &AppState, group: &str) -> Option<Value> {
    let groups = remote_groups(state);
    let (g, vs) = groups.iter().find(|(g, _)| g == group)?;
    let mut v = group_entry(g, vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

/// One `APIResourceList` (legacy discovery of a group-version) as an aggregated discovery
/// `APIVersionDiscovery` (apidiscovery.k8s.io/v2): each resource with its subresources folded
/// in, as kube-aggregator converts the documents of servers without aggregated discovery.
pub fn to_version_discovery(group: &str, version: &str, list: &Value, fresh: bool) -> Value {
    let items = list["resources"].as_array().cloned().unwrap_or_default();
    let mut resources: Vec<Value> = Vec::new();
    for r in items.iter().filter(|r| r["name"].as_str().is_some_and(|n| !n.contains('/'))) {
        let name = r["name"].as_str().unwrap_or_default();
        let mut out = json!({
            "resource": name,
            "responseKind": {"group": r["group"].as_str().unwrap_or(group), "version": r["version"].as_str().unwrap_or(version), "kind": r["kind"]},
            "scope": if r["namespaced"] == true { "Namespaced" } else { "Cluster" },
            "singularResource": r["singularName"],
            "verbs": r["verbs"].as_array().cloned().unwrap_or_default(),
        });
        for k in ["shortNames", "categories"] {
            if r[k].as_array().is_some_and(|a| !a.is_empty()) {
                out[k] = r[k].clone();
            }
        }
        let prefix = format!("{name}/");
        let subs: Vec<Value> = items
            .iter()
            .filter_map(|s| {
                let sub = s["name"].as_str()?.strip_prefix(&prefix)?;
                Some(json!({
                    "subresource": sub,
                    "responseKind": {"group": s["group"].as_str().unwrap_or(group), "version": s["version"].as_str().unwrap_or(version), "kind": s["kind"]},
                    "verbs": s["verbs"].as_array().cloned().unwrap_or_default(),
                }))
            })
            .collect();
        if !subs.is_empty() {
            out["subresources"] = json!(subs);
        }
        resources.push(out);
    }
    json!({"version": version, "resources": resources, "freshness": if fresh { "Current" } else { "Stale" }})
}

/// The aggregated discovery `APIGroupDiscovery` items of the groups aggregated servers serve:
/// each version whose server answered a discovery check, `Stale` while it is unavailable.
pub fn aggregated_groups(state: &AppState) -> Vec<Value> {
    let services = api_services(state);
    remote_groups(state)
        .into_iter()
        .filter_map(|(group, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .filter_map(|(v, name)| {
                    let doc = state.aggregator.discovery(name)?;
                    let available =
                        services.iter().any(|s| crate::util::meta_str(s, "name") == name && is_available(s));
                    Some(to_version_discovery(&group, v, &doc, available))
                })
                .collect();
            (!vs.is_empty()).then(|| json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": vs}))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_list_becomes_version_discovery_with_subresources_folded_in() {
        let list = json!({"kind": "APIResourceList", "groupVersion": "wardle.example.com/v1alpha1", "resources": [
            {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder", "verbs": ["get", "list"], "shortNames": ["fl"]},
            {"name": "flunders/status", "singularName": "", "namespaced": true, "kind": "Flunder", "verbs": ["get"]},
            {"name": "fischers", "singularName": "fischer", "namespaced": false, "kind": "Fischer", "verbs": ["get"]},
        ]});
        let v = to_version_discovery("wardle.example.com", "v1alpha1", &list, false);
        assert_eq!(v["freshness"], "Stale");
        let rs = v["resources"].as_array().unwrap();
        assert_eq!(rs.len(), 2);
        assert_eq!(rs[0]["resource"], "flunders");
        assert_eq!(rs[0]["scope"], "Namespaced");
        assert_eq!(rs[0]["shortNames"], json!(["fl"]));
        assert_eq!(rs[0]["subresources"][0]["subresource"], "status");
        assert_eq!(rs[0]["responseKind"]["group"], "wardle.example.com");
        assert_eq!(rs[1]["scope"], "Cluster");
        assert!(rs[1].get("subresources").is_none());
    }

    #[test]
    fn versions_are_ordered_by_version_priority_then_kubernetes_version_order() {
        let svc = |v: &str, p: i64| {
            Arc::new(json!({"metadata": {"name": format!("{v}.x.io")}, "spec": {"group": "x.io", "version": v,
                "versionPriority": p, "service": {"namespace": "n", "name": "s"}}}))
        };
        let services = vec![svc("v1beta1", 10), svc("v1", 10), svc("v2alpha1", 20)];
        let got: Vec<String> = remote_versions(&services, "x.io").into_iter().map(|(v, _)| v).collect();
        assert_eq!(got, vec!["v2alpha1", "v1", "v1beta1"]);
    }
}
