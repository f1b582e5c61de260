//! The APIService controllers kube-aggregator runs in the API server: autoregistration
//! (`pkg/controllers/autoregister` with kube-apiserver's priority table and the CRD
//! registration controller) and availability (`pkg/controllers/status/local` and `remote`).
//!
//! Every group-version served here gets a Local APIService `<version>.<group>` (`v1.` for the
//! core group) with kube-apiserver's `groupPriorityMinimum`/`versionPriority`, labelled
//! `kube-aggregator.kubernetes.io/automanaged: onstart` for built-in groups and `true` for a
//! CRD's, which is deleted again when the CRD no longer serves it. The `Available` condition is
//! `True`/`Local` for local ones; for service-backed ones the checks are upstream's, in order:
//! the Service exists (`ServiceNotFound`), a ClusterIP Service has the port (`ServicePortError`),
//! it has EndpointSlices (`EndpointsNotFound`) with a ready endpoint on that port
//! (`MissingEndpoints`), and `GET /apis/<group>/<version>` through the front proxy as
//! `system:kube-aggregator` in `system:masters` answers 2xx/3xx within 5 s
//! (`FailedDiscoveryCheck`), else `Passed`. The answer of that GET is kept for discovery.
//!
//! The controller runs on every APIService change and every [`RESYNC`]: it does not follow
//! Services and EndpointSlices, so that period bounds how late an endpoint change is seen.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::{BodyExt, Limited};
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use super::{AUTOMANAGED_LABEL, STORAGE, is_remote};
use crate::AppState;
use crate::registry::store::WriteOptions;
use crate::resources::ResourceDef;
use crate::storage::listers::{cache_get_shared, cache_objects};
use crate::storage::watchcache::{CacheMsg, Recv};
use crate::util::meta_str;

/// How often every APIService is checked again without a change to it.
pub const RESYNC: Duration = Duration::from_secs(5);

/// How long a discovery check may take (kube-aggregator's client timeout).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest discovery document read, bytes.
const MAX_DISCOVERY_BYTES: usize = 3 * 1024 * 1024;

/// kube-apiserver's `groupPriorityMinimum` and `versionPriority` of the built-in group-versions
/// skiff serves (`DefaultGenericAPIServicePriorities` and the kube-apiserver additions).
const PRIORITIES: &[(&str, &str, i64, i64)] = &[
    ("", "v1", 18000, 1),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v1", 17500, 15),
    ("autoscaling", "v2", 17500, 30),
    ("batch", "v1", 17400, 15),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("networking.k8s.io", "v1", 17200, 15),
    ("policy", "v1", 17100, 15),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1", 16700, 15),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("node.k8s.io", "v1", 16300, 15),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("flowcontrol.apiserver.k8s.io", "v1", 16100, 21),
];

/// The priorities a built-in group-version missing from [`PRIORITIES`] gets (upstream's advice
/// for a new group: below the others, version 9).
const DEFAULT_BUILTIN_PRIORITY: (i64, i64) = (15000, 9);

/// The priorities of a CRD's group-versions (the CRD registration controller's).
const CRD_PRIORITY: (i64, i64) = (1000, 100);

/// The Local APIServices the server should have: one per group-version it serves.
pub fn local_api_services(state: &AppState) -> Vec<Value> {
    let builtin = |g: &str| state.registry.all().iter().any(|d| d.group == g);
    let mut out = Vec::new();
    let mut gvs: Vec<(String, String)> = vec![(String::new(), "v1".to_string())];
    for (g, versions) in state.registry.groups() {
        gvs.extend(versions.iter().map(|v| (g.to_string(), v.to_string())));
    }
    for (group, version) in gvs {
        let is_builtin = builtin(&group);
        let (gmin, vprio) = PRIORITIES
            .iter()
            .find(|(g, v, _, _)| *g == group && *v == version)
            .map(|(_, _, g, v)| (*g, *v))
            .unwrap_or(if is_builtin { DEFAULT_BUILTIN_PRIORITY } else { CRD_PRIORITY });
        out.push(json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {
                "name": format!("{version}.{group}"),
                "labels": {AUTOMANAGED_LABEL: if is_builtin { "onstart" } else { "true" }},
            },
            "spec": {"group": group, "version": version, "groupPriorityMinimum": gmin, "versionPriority": vprio},
        }));
    }
    out
}

/// The `Available` condition's status, reason and message for `api_service`, and the discovery
/// document its server answered with (service-backed APIServices that passed).
pub async fn check(state: &AppState, api_service: &Value) -> (&'static str, &'static str, String, Option<Value>) {
    if !is_remote(api_service) {
        return ("True", "Local", "Local APIServices are always available".into(), None);
    }
    let spec = &api_service["spec"];
    let svc_ref = &spec["service"];
    let (ns, name) = (svc_ref["namespace"].as_str().unwrap_or_default(), svc_ref["name"].as_str().unwrap_or_default());
    let port = svc_ref["port"].as_i64().unwrap_or(443);
    let services = state.registry.get("", "v1", "services").map_or("services/specs", |d| d.storage);
    let Some(svc) = cache_get_shared(state, services, ns, name) else {
        return ("False", "ServiceNotFound", format!("service/{name} in {ns:?} is not present"), None);
    };
    let svc_type = svc["spec"]["type"].as_str().unwrap_or("ClusterIP");
    if svc_type == "ClusterIP" {
        let ports = svc["spec"]["ports"].as_array().cloned().unwrap_or_default();
        let Some(port_name) = ports
            .iter()
            .find(|p| p["port"].as_i64() == Some(port))
            .map(|p| p["name"].as_str().unwrap_or("").to_string())
        else {
            return (
                "False",
                "ServicePortError",
                format!("service/{name} in {ns:?} is not listening on port {port}"),
                None,
            );
        };
        let slices_storage =
            state.registry.get("discovery.k8s.io", "v1", "endpointslices").map_or("endpointslices", |d| d.storage);
        let slices: Vec<Arc<Value>> = cache_objects(state, slices_storage, &format!("{ns}/"))
            .into_iter()
            .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == name)
            .collect();
        if slices.is_empty() {
            return (
                "False",
                "EndpointsNotFound",
                format!("cannot find endpointslices for service/{name} in {ns:?}"),
                None,
            );
        }
        let has_available = slices.iter().any(|s| {
            let ready = s["endpoints"].as_array().into_iter().flatten().any(|e| e["conditions"]["ready"] != false);
            let port = s["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"].as_str().unwrap_or("") == port_name && p["port"].is_number());
            ready && port
        });
        if !has_available {
            return (
                "False",
                "MissingEndpoints",
                format!("endpointslices for service/{name} in {ns:?} have no addresses with port name {port_name:?}"),
                None,
            );
        }
    }
    match discovery_check(state, api_service).await {
        Ok(doc) => ("True", "Passed", "all checks passed".into(), doc),
        Err(e) => ("False", "FailedDiscoveryCheck", e, None),
    }
}

/// `GET /apis/<group>/<version>` on the aggregated server, as kube-aggregator's check does
/// (without verifying the server, as `system:kube-aggregator` in `system:masters`). Returns
/// the answer when it is JSON.
async fn discovery_check(state: &AppState, api_service: &Value) -> Result<Option<Value>, String> {
    let target = super::proxy::target(state, api_service, true)?;
    let (group, version) = (
        api_service["spec"]["group"].as_str().unwrap_or_default(),
        api_service["spec"]["version"].as_str().unwrap_or_default(),
    );
    let path = if meta_str(api_service, "name") == "v1." {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let url = format!("https://{}{path}", target.host);
    let mut req = axum::http::Request::get(&path).body(Body::empty()).map_err(|e| e.to_string())?;
    let aggregator =
        crate::auth::RequestUser { name: "system:kube-aggregator".into(), groups: vec!["system:masters".into()] };
    super::proxy::set_auth_proxy_headers(req.headers_mut(), &aggregator);
    if let Ok(h) = axum::http::HeaderValue::from_str(&target.host) {
        req.headers_mut().insert(axum::http::header::HOST, h);
    }
    req.headers_mut().insert(axum::http::header::ACCEPT, axum::http::HeaderValue::from_static("application/json"));
    let failing = |e: String| format!("failing or missing response from {url}: {e}");
    let result = tokio::time::timeout(CHECK_TIMEOUT, async {
        let resp = super::proxy::send(&target, req).await.map_err(|e| format!("Get {url:?}: {e}"))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) && !(300..400).contains(&status) {
            return Err(format!("bad status from {url}: {status}"));
        }
        let bytes = Limited::new(resp.into_body(), MAX_DISCOVERY_BYTES)
            .collect()
            .await
            .map_err(|e| format!("Get {url:?}: reading the response: {e}"))?
            .to_bytes();
        Ok(serde_json::from_slice::<Value>(&bytes).ok())
    })
    .await;
    match result {
        Ok(r) => r.map_err(failing),
        Err(_) => Err(failing(format!(
            "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        ))),
    }
}

/// The status with the `Available` condition set, keeping its `lastTransitionTime` while its
/// status does not change; `None` when nothing changes.
fn with_condition(api_service: &Value, status: &str, reason: &str, message: &str) -> Option<Value> {
    let mut st = api_service["status"].clone();
    if !st.is_object() {
        st = json!({});
    }
    let mut conditions = st["conditions"].as_array().cloned().unwrap_or_default();
    let old = conditions.iter().position(|c| c["type"] == "Available");
    if let Some(i) = old {
        let c = &conditions[i];
        if c["status"] == status && c["reason"] == reason && c["message"] == message {
            return None;
        }
    }
    let since = old
        .map(|i| &conditions[i])
        .filter(|c| c["status"] == status)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(crate::util::now()));
    let cond = json!({"type": "Available", "status": status, "lastTransitionTime": since, "reason": reason, "message": message});
    match old {
        Some(i) => conditions[i] = cond,
        None => conditions.push(cond),
    }
    st["conditions"] = json!(conditions);
    Some(st)
}

async fn sync(state: &AppState, def: &ResourceDef, objects: &[Arc<Value>]) -> Result<(), ApiError> {
    let opts = WriteOptions::default();
    let desired = local_api_services(state);
    // Ready once a pass finds every Local APIService registered and Available.
    let mut local_complete = true;
    for d in &desired {
        let name = meta_str(d, "name");
        if !objects.iter().any(|o| meta_str(o, "name") == name && super::is_available(o)) {
            local_complete = false;
        }
        if !objects.iter().any(|o| meta_str(o, "name") == name) {
            match state.objects.create(def, "", d.clone(), None, &opts).await {
                Ok(_) => {}
                Err(e) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
    }
    for o in objects {
        let name = meta_str(o, "name");
        let crd_managed = o["metadata"]["labels"][AUTOMANAGED_LABEL] == "true";
        if crd_managed && !desired.iter().any(|d| meta_str(d, "name") == name) {
            match state.objects.delete(def, "", name, &Default::default()).await {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    let checks = futures::future::join_all(objects.iter().map(|o| check(state, o))).await;
    for (o, (status, reason, message, doc)) in objects.iter().zip(checks) {
        let name = meta_str(o, "name").to_string();
        if is_remote(o) && (doc.is_some() || status != "True") {
            // Keep the last document while the server is away: discovery marks it stale.
            if doc.is_some() {
                state.aggregator.set_discovery(&name, doc);
            }
        }
        let Some(new_status) = with_condition(o, status, reason, &message) else { continue };
        if status != "True" || o["status"]["conditions"].as_array().is_some_and(|c| !c.is_empty()) {
            tracing::info!(apiservice = %name, status, reason, %message, "APIService availability");
        }
        let r = state
            .objects
            .update(def, "", &name, Some("status"), &opts, None, |old| {
                let mut new = old.cloned().ok_or_else(|| ApiError::not_found(def.group, def.resource, &name))?;
                new["status"] = new_status.clone();
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove("resourceVersion");
                }
                Ok(new)
            })
            .await;
        match r {
            Ok(_) => {}
            Err(e) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    let names: Vec<&str> = objects.iter().map(|o| meta_str(o, "name")).collect();
    state.aggregator.retain_discovery(&names);
    if local_complete {
        state.aggregator.set_synced();
    }
    Ok(())
}

/// Runs autoregistration and availability until the APIService watch cache closes. Started
/// by [`crate::ApiServer::start`].
pub async fn run(state: Arc<AppState>) {
    let Some(def) = state.registry.get("apiregistration.k8s.io", "v1", "apiservices").cloned() else { return };
    let Some(cache) = state.caches.get(STORAGE).cloned() else { return };
    // The checks read Services and EndpointSlices: wait for every cache, not only this one.
    while !state.caches.values().all(|c| c.is_ready()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    loop {
        let snap = cache.snapshot(&def.prefix());
        let mut sub = snap.subscription;
        if let Err(e) = sync(&state, &def, &snap.objects).await {
            tracing::warn!(error = %e, "syncing APIServices");
        }
        let resync = tokio::time::sleep(RESYNC);
        tokio::pin!(resync);
        loop {
            tokio::select! {
                m = sub.recv() => match m {
                    Recv::Msg(CacheMsg::Progress(_)) => continue,
                    Recv::Closed => return,
                    _ => break,
                },
                () = &mut resync => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let svc = json!({"status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints",
            "message": "m", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
        assert!(with_condition(&svc, "False", "MissingEndpoints", "m").is_none());
        let st = with_condition(&svc, "False", "FailedDiscoveryCheck", "x").unwrap();
        assert_eq!(st["conditions"][0]["lastTransitionTime"], "2024-01-01T00:00:00Z");
        let st = with_condition(&svc, "True", "Passed", "all checks passed").unwrap();
        assert_ne!(st["conditions"][0]["lastTransitionTime"], "2024-01-01T00:00:00Z");
        assert_eq!(st["conditions"].as_array().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn every_served_group_version_gets_a_local_apiservice_with_kubernetes_priorities() {
        let server = crate::testing::TestApiServer::start().await;
        let state = server.server.state();
        let local = local_api_services(state);
        let find = |n: &str| local.iter().find(|s| meta_str(s, "name") == n).cloned();
        let core = find("v1.").expect("v1.");
        assert_eq!(core["spec"]["groupPriorityMinimum"], 18000);
        let apps = find("v1.apps").expect("v1.apps");
        assert_eq!(
            (apps["spec"]["groupPriorityMinimum"].as_i64(), apps["spec"]["versionPriority"].as_i64()),
            (Some(17800), Some(15))
        );
        assert_eq!(apps["metadata"]["labels"][AUTOMANAGED_LABEL], "onstart");
        assert!(find("v1.apiregistration.k8s.io").is_some());
        for s in &local {
            let causes = skiff_apimachinery::validation::validate("apiregistration.k8s.io/v1", "APIService", s, None);
            assert!(causes.is_empty(), "{s}: {causes:?}");
        }
        let (status, reason, _, _) = check(state, &apps).await;
        assert_eq!((status, reason), ("True", "Local"));
    }

    #[tokio::test]
    async fn a_service_backed_apiservice_without_its_service_or_endpoints_is_unavailable_with_the_reason() {
        let server = crate::testing::TestApiServer::start().await;
        let state = server.server.state();
        let api = json!({"metadata": {"name": "v1.x.io"}, "spec": {"group": "x.io", "version": "v1",
            "service": {"namespace": "default", "name": "api", "port": 443}}});
        let (status, reason, message, _) = check(state, &api).await;
        assert_eq!((status, reason), ("False", "ServiceNotFound"));
        assert_eq!(message, "service/api in \"default\" is not present");
        let services = state.registry.get("", "v1", "services").unwrap().clone();
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "default"},
            "spec": {"ports": [{"port": 443, "targetPort": 8443}]}});
        state.objects.create(&services, "default", svc, None, &WriteOptions::default()).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (status, reason, message, _) = check(state, &api).await;
            if reason != "ServiceNotFound" {
                assert_eq!((status, reason), ("False", "EndpointsNotFound"));
                assert_eq!(message, "cannot find endpointslices for service/api in \"default\"");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the Service never reached the cache");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut other_port = api.clone();
        other_port["spec"]["service"]["port"] = json!(444);
        let (_, reason, message, _) = check(state, &other_port).await;
        assert_eq!(reason, "ServicePortError");
        assert_eq!(message, "service/api in \"default\" is not listening on port 444");
    }
}
