//! ResourceQuota (<https://kubernetes.io/docs/concepts/policy/resource-quotas/>): a create is
//! charged against every ResourceQuota of its namespace that tracks something it uses; if any
//! would exceed the quota's `status.hard` the request is forbidden
//! (`exceeded quota: <name>, requested: …, used: …, limited: …`), otherwise the new usage is
//! written to the quotas' `status.used` before the object is persisted.
//!
//! Usage ([`object_usage`], also what a quota controller sums to maintain `status.used` —
//! [`quota_usage`]): pods count `pods` and `count/pods` and, unless terminal, `requests.cpu`/`cpu`,
//! `requests.memory`/`memory`, `limits.cpu`, `limits.memory`, and ephemeral storage; every
//! object counts `count/<resource>[.<group>]`; core kinds also count under their legacy names
//! (`services`, `secrets`, `configmaps`, `persistentvolumeclaims`, `replicationcontrollers`,
//! `resourcequotas`), services count `services.nodeports`/`services.loadbalancers`, claims
//! count `requests.storage`. Quota scopes `Terminating`, `NotTerminating`, `BestEffort`,
//! `NotBestEffort` and `scopeSelector` on `PriorityClass` are honoured.
//!
//! As in Kubernetes, admission reads `status.hard` and `status.used`, which the resource-quota
//! controller maintains ([`quota_status`] computes them): a quota whose status has not been
//! computed yet constrains nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use skiff_apimachinery::ApiError;

use super::limit_ranger::{container_resources, pod_resources};
use crate::{AdmissionLookup, AdmissionRequest, Feedback, Operation, ValidatingAdmission};
use skiff_apimachinery::quantity::Quantity;

/// Resource name → quantity.
pub type Usage = BTreeMap<String, Quantity>;

fn one() -> Quantity {
    Quantity { milli: 1000, binary: false }
}

fn add(u: &mut Usage, k: &str, q: Quantity) {
    let e = u.entry(k.to_string()).or_insert(Quantity::ZERO);
    *e = *e + q;
}

fn is_terminal(pod: &Value) -> bool {
    matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

/// The usage one object contributes, by resource name.
pub fn object_usage(group: &str, resource: &str, obj: &Value) -> Usage {
    let mut u = Usage::new();
    let count_key = if group.is_empty() { format!("count/{resource}") } else { format!("count/{resource}.{group}") };
    add(&mut u, &count_key, one());
    if !group.is_empty() {
        return u;
    }
    match resource {
        "pods" => {
            if is_terminal(obj) {
                return Usage::new();
            }
            add(&mut u, "pods", one());
            let (req, lim) = pod_resources(obj);
            for (name, q) in req {
                match name.as_str() {
                    "cpu" | "memory" => {
                        add(&mut u, &format!("requests.{name}"), q);
                        add(&mut u, &name, q);
                    }
                    "ephemeral-storage" => {
                        add(&mut u, "requests.ephemeral-storage", q);
                        add(&mut u, "ephemeral-storage", q);
                    }
                    other => add(&mut u, &format!("requests.{other}"), q),
                }
            }
            for (name, q) in lim {
                add(&mut u, &format!("limits.{name}"), q);
            }
        }
        "services" => {
            add(&mut u, "services", one());
            let ty = obj["spec"]["type"].as_str().unwrap_or("ClusterIP");
            let ports = obj["spec"]["ports"].as_array().map(Vec::len).unwrap_or(0) as i128;
            if ty == "NodePort" || ty == "LoadBalancer" {
                add(&mut u, "services.nodeports", Quantity { milli: ports * 1000, binary: false });
            }
            if ty == "LoadBalancer" {
                add(&mut u, "services.loadbalancers", one());
            }
        }
        "persistentvolumeclaims" => {
            add(&mut u, "persistentvolumeclaims", one());
            if let Some(q) = Quantity::from_json(&obj["spec"]["resources"]["requests"]["storage"]) {
                add(&mut u, "requests.storage", q);
                if let Some(class) = obj["spec"]["storageClassName"].as_str() {
                    add(&mut u, &format!("{class}.storageclass.storage.k8s.io/requests.storage"), q);
                    add(&mut u, &format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"), one());
                }
            }
        }
        "secrets" | "configmaps" | "replicationcontrollers" | "resourcequotas" => add(&mut u, resource, one()),
        _ => {}
    }
    u
}

fn is_best_effort(pod: &Value) -> bool {
    ["containers", "initContainers"].iter().all(|list| {
        pod["spec"][list].as_array().into_iter().flatten().all(|c| {
            let (r, l) = container_resources(c);
            !r.contains_key("cpu") && !r.contains_key("memory") && !l.contains_key("cpu") && !l.contains_key("memory")
        })
    })
}

fn scope_matches(scope: &str, operator: &str, values: &[String], pod: &Value) -> bool {
    let terminating = pod["spec"]["activeDeadlineSeconds"].as_i64().is_some();
    match scope {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "PriorityClass" => {
            let class = pod["spec"]["priorityClassName"].as_str().unwrap_or_default();
            match operator {
                "In" => values.iter().any(|v| v == class),
                "NotIn" => !values.iter().any(|v| v == class),
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether a quota's scopes select this object (only pods can be out of scope).
pub fn quota_selects(quota: &Value, resource: &str, obj: &Value) -> bool {
    let scopes: Vec<&str> =
        quota["spec"]["scopes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let exprs = quota["spec"]["scopeSelector"]["matchExpressions"].as_array().cloned().unwrap_or_default();
    if scopes.is_empty() && exprs.is_empty() {
        return true;
    }
    if resource != "pods" {
        return false;
    }
    scopes.iter().all(|s| scope_matches(s, "Exists", &[], obj))
        && exprs.iter().all(|e| {
            let values: Vec<String> =
                e["values"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect();
            scope_matches(
                e["scopeName"].as_str().unwrap_or_default(),
                e["operator"].as_str().unwrap_or_default(),
                &values,
                obj,
            )
        })
}

/// The `status.used` a quota should show given every object in its namespace
/// (`(group, resource, object)`), restricted to the resources it tracks.
pub fn quota_usage<'a>(quota: &Value, objects: impl IntoIterator<Item = (&'a str, &'a str, &'a Value)>) -> Usage {
    let hard = list_of(&quota["spec"]["hard"]);
    let mut used: Usage = hard.keys().map(|k| (k.clone(), Quantity::ZERO)).collect();
    for (group, resource, obj) in objects {
        if !quota_selects(quota, resource, obj) {
            continue;
        }
        for (k, q) in object_usage(group, resource, obj) {
            if let Some(e) = used.get_mut(&k) {
                *e = *e + q;
            }
        }
    }
    used
}

/// `status.hard` (what admission enforces).
fn hard_of(quota: &Value) -> Usage {
    list_of(&quota["status"]["hard"])
}

fn list_of(v: &Value) -> Usage {
    v.as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Quantity::from_json(v).map(|q| (k.clone(), q))).collect())
        .unwrap_or_default()
}

/// The `status` the resource-quota controller writes: `hard` = `spec.hard`, `used` =
/// [`quota_usage`] over the namespace's objects.
pub fn quota_status<'a>(quota: &Value, objects: impl IntoIterator<Item = (&'a str, &'a str, &'a Value)>) -> Value {
    let to_json = |u: &Usage| Value::Object(u.iter().map(|(k, v)| (k.clone(), Value::String(v.to_string()))).collect());
    serde_json::json!({
        "hard": to_json(&list_of(&quota["spec"]["hard"])),
        "used": to_json(&quota_usage(quota, objects)),
    })
}

fn pretty(u: &Usage) -> String {
    u.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// The resources whose requests (or limits) every container must state when a quota tracks
/// them (the pod evaluator's backward-compatible constraint).
fn missing_container_resources(pod: &Value, tracked: &Usage) -> Option<String> {
    const VALIDATED: &[&str] = &["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];
    let mut missing: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for list in ["containers", "initContainers"] {
        for c in pod["spec"][list].as_array().into_iter().flatten() {
            let (req, lim) = container_resources(c);
            let name = c["name"].as_str().unwrap_or_default().to_string();
            for key in VALIDATED.iter().filter(|k| tracked.contains_key(**k)) {
                let ok = match *key {
                    "cpu" | "requests.cpu" => req.contains_key("cpu"),
                    "memory" | "requests.memory" => req.contains_key("memory"),
                    "limits.cpu" => lim.contains_key("cpu"),
                    _ => lim.contains_key("memory"),
                };
                if !ok {
                    let names = missing.entry(key).or_default();
                    if !names.contains(&name) {
                        names.push(name.clone());
                    }
                }
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(k, names)| {
            let mut names = names.clone();
            names.sort();
            format!("{k} for: {}", names.join(","))
        })
        .collect();
    Some(format!("must specify {}", parts.join("; ")))
}

/// Checks a create against the namespace's quotas and returns the quotas with their new
/// `status.used` (to persist before the object).
///
/// # Errors
/// 403 `exceeded quota: …`, `failed quota: <name>: must specify …`, or `status unknown for
/// quota: <name>, resource: …` when a quota has not been computed yet.
pub fn charge(req: &AdmissionRequest, quotas: &[Value]) -> Result<Vec<Value>, ApiError> {
    let Some(obj) = &req.object else { return Ok(Vec::new()) };
    let delta = object_usage(&req.resource.group, &req.resource.resource, obj);
    let mut updated = Vec::new();
    for quota in quotas {
        let name = quota["metadata"]["name"].as_str().unwrap_or_default();
        let hard = hard_of(quota);
        if !quota_selects(quota, &req.resource.resource, obj) {
            continue;
        }
        let interesting: Usage =
            delta.iter().filter(|(k, _)| hard.contains_key(*k)).map(|(k, v)| (k.clone(), *v)).collect();
        let is_pod = req.resource.group.is_empty() && req.resource.resource == "pods";
        if is_pod && let Some(msg) = missing_container_resources(obj, &hard) {
            return Err(req.forbidden(&format!("failed quota: {name}: {msg}")));
        }
        if interesting.is_empty() {
            continue;
        }
        let used_json = &quota["status"]["used"];
        let unknown: Vec<&String> = interesting.keys().filter(|k| used_json.get(k.as_str()).is_none()).collect();
        if !unknown.is_empty() {
            let names: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
            return Err(req.forbidden(&format!("status unknown for quota: {name}, resource: {}", names.join(","))));
        }
        let used: Usage = interesting
            .keys()
            .map(|k| (k.clone(), Quantity::from_json(&used_json[k.as_str()]).unwrap_or(Quantity::ZERO)))
            .collect();
        let mut failed = Vec::new();
        for (k, d) in &interesting {
            let new = used[k] + *d;
            if new.milli > hard[k].milli {
                failed.push(k.clone());
            }
        }
        if !failed.is_empty() {
            let pick = |u: &Usage| -> Usage { failed.iter().map(|k| (k.clone(), u[k])).collect() };
            return Err(req.forbidden(&format!(
                "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                pretty(&pick(&interesting)),
                pretty(&pick(&used)),
                pretty(&pick(&hard))
            )));
        }
        let mut q = quota.clone();
        if !q["status"]["used"].is_object() {
            q["status"]["used"] = Value::Object(Map::new());
        }
        for (k, d) in &interesting {
            q["status"]["used"][k.as_str()] = (used[k] + *d).to_string().into();
        }
        updated.push(q);
    }
    Ok(updated)
}

/// The plugin.
pub struct ResourceQuota {
    lookup: Arc<dyn AdmissionLookup>,
}

impl ResourceQuota {
    /// The plugin over `lookup`.
    pub fn new(lookup: Arc<dyn AdmissionLookup>) -> Self {
        Self { lookup }
    }
}

#[async_trait]
impl ValidatingAdmission for ResourceQuota {
    fn name(&self) -> &str {
        "ResourceQuota"
    }
    async fn validate(&self, req: &AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        if req.op() != Operation::Create || !req.sub_resource.is_empty() || req.namespace.is_empty() {
            return Ok(());
        }
        let quotas = self.lookup.resource_quotas(&req.namespace);
        if quotas.is_empty() {
            return Ok(());
        }
        let updated = charge(req, &quotas)?;
        if !req.dry_run {
            for q in &updated {
                self.lookup.update_resource_quota_status(q)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::MemoryLookup;

    fn pod(name: &str, cpu: &str, mem: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}}]}})
    }

    fn create(obj: Value) -> AdmissionRequest {
        let mut r = AdmissionRequest::new(Operation::Create, "", "v1", "pods", "Pod");
        r.namespace = "ns".into();
        r.object = Some(obj);
        r
    }

    #[test]
    fn pod_usage_sums_containers_and_raises_to_init_containers() {
        let p = json!({"spec": {
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}},
                           {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}}}]}});
        let u = object_usage("", "pods", &p);
        let s = |k: &str| u[k].to_string();
        assert_eq!(
            (s("pods"), s("count/pods"), s("requests.cpu"), s("cpu")),
            ("1".into(), "1".into(), "2".into(), "2".into())
        );
        assert_eq!((s("requests.memory"), s("limits.memory")), ("256Mi".into(), "256Mi".into()));
        let done = json!({"spec": {"containers": []}, "status": {"phase": "Succeeded"}});
        assert!(object_usage("", "pods", &done).is_empty());
        let svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 443}]}});
        let u = object_usage("", "services", &svc);
        assert_eq!(u["services.nodeports"].to_string(), "2");
        assert_eq!(object_usage("apps", "deployments", &json!({}))["count/deployments.apps"].to_string(), "1");
    }

    #[test]
    fn quota_usage_counts_only_tracked_resources_in_scope() {
        let quota = json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "10", "requests.cpu": "4"}, "scopes": ["NotBestEffort"]}});
        let a = pod("a", "1", "1Gi");
        let b = pod("b", "500m", "1Gi");
        let be = json!({"spec": {"containers": [{"name": "c"}]}});
        let used = quota_usage(&quota, [("", "pods", &a), ("", "pods", &b), ("", "pods", &be)]);
        assert_eq!(
            used.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            vec!["pods=2", "requests.cpu=1500m"]
        );
        let status = quota_status(&quota, [("", "pods", &a)]);
        assert_eq!(
            status,
            json!({"hard": {"pods": "10", "requests.cpu": "4"}, "used": {"pods": "1", "requests.cpu": "1"}})
        );
    }

    #[test]
    fn creates_over_quota_are_forbidden_with_the_kubernetes_message() {
        let quota = json!({"kind": "ResourceQuota", "metadata": {"name": "compute", "namespace": "ns"},
            "spec": {"hard": {"pods": "2", "requests.cpu": "1", "limits.memory": "2Gi"}},
            "status": {"hard": {"pods": "2", "requests.cpu": "1", "limits.memory": "2Gi"},
                       "used": {"pods": "1", "requests.cpu": "500m", "limits.memory": "1Gi"}}});
        let ok = charge(&create(pod("p", "250m", "512Mi")), std::slice::from_ref(&quota)).unwrap();
        assert_eq!(ok[0]["status"]["used"], json!({"pods": "2", "requests.cpu": "750m", "limits.memory": "1536Mi"}));
        let e = charge(&create(pod("p", "750m", "2Gi")), std::slice::from_ref(&quota)).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            r#"pods "p" is forbidden: exceeded quota: compute, requested: limits.memory=2Gi,requests.cpu=750m, used: limits.memory=1Gi,requests.cpu=500m, limited: limits.memory=2Gi,requests.cpu=1"#
        );
        let bare = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "nginx"}]}});
        let e = charge(&create(bare), std::slice::from_ref(&quota)).unwrap_err();
        assert_eq!(
            e.message,
            r#"pods "p" is forbidden: failed quota: compute: must specify limits.memory for: nginx; requests.cpu for: nginx"#
        );
        let half =
            json!({"metadata": {"name": "new"}, "spec": {"hard": {"pods": "5"}}, "status": {"hard": {"pods": "5"}}});
        let e = charge(&create(pod("p", "1m", "1Mi")), &[half]).unwrap_err();
        assert_eq!(e.message, r#"pods "p" is forbidden: status unknown for quota: new, resource: pods"#);
        // Not computed by the controller yet: no constraint.
        let fresh = json!({"metadata": {"name": "new"}, "spec": {"hard": {"pods": "0"}}});
        assert!(charge(&create(pod("p", "1m", "1Mi")), &[fresh]).unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_plugin_records_new_usage_unless_dry_run() {
        let l = Arc::new(MemoryLookup::new());
        l.put(json!({"kind": "ResourceQuota", "metadata": {"name": "count", "namespace": "ns"},
            "spec": {"hard": {"count/configmaps": "1"}},
            "status": {"hard": {"count/configmaps": "1"}, "used": {"count/configmaps": "0"}}}));
        let plugin = ResourceQuota::new(l.clone());
        let mut req = AdmissionRequest::new(Operation::Create, "", "v1", "configmaps", "ConfigMap");
        req.namespace = "ns".into();
        req.object = Some(json!({"metadata": {"name": "a"}}));
        req.dry_run = true;
        plugin.validate(&req, &mut Feedback::default()).await.unwrap();
        assert_eq!(l.get("ResourceQuota", "ns", "count").unwrap()["status"]["used"]["count/configmaps"], "0");
        req.dry_run = false;
        plugin.validate(&req, &mut Feedback::default()).await.unwrap();
        assert_eq!(l.get("ResourceQuota", "ns", "count").unwrap()["status"]["used"]["count/configmaps"], "1");
        let e = plugin.validate(&req, &mut Feedback::default()).await.unwrap_err();
        assert!(e.message.contains("exceeded quota: count, requested: count/configmaps=1, used: count/configmaps=1, limited: count/configmaps=1"), "{}", e.message);
    }
}
