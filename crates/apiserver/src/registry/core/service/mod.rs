//! The Service strategy (`pkg/registry/core/service/strategy.go`) and its ClusterIP and
//! NodePort allocation ([`alloc`], over the ranges in [`ranges`]).

pub mod alloc;
pub mod ranges;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::AppState;
use crate::util::set_in;

/// How often allocations are repaired against the stored Services (kube-apiserver's repair
/// controllers: 3 minutes).
pub const REPAIR_INTERVAL: Duration = Duration::from_secs(180);
/// Allocations younger than this are never released by a repair: their Service's create may
/// still be in flight.
pub const REPAIR_MIN_AGE_SECS: i64 = 60;

/// One repair pass over every stored Service ([`alloc::ServiceAllocator::repair`]).
///
/// # Errors
/// The store's.
pub async fn repair(state: &AppState) -> Result<(), skiff_apimachinery::ApiError> {
    let Some(def) = state.registry.get("", "v1", "services") else { return Ok(()) };
    let listed = state.objects.list_from_store(def, None, &crate::registry::store::ListOptions::default(), 0).await?;
    let (recreated, released) =
        state.objects.services.repair(state.objects.store.as_ref(), &listed.items, REPAIR_MIN_AGE_SECS).await?;
    if !recreated.is_empty() || !released.is_empty() {
        tracing::info!(?recreated, ?released, "repaired Service allocations");
    }
    Ok(())
}

/// Repairs at start and every [`REPAIR_INTERVAL`] after.
pub async fn repair_loop(state: Arc<AppState>) {
    loop {
        if let Err(e) = repair(&state).await {
            tracing::warn!(error = %e, "repairing Service allocations failed");
        }
        tokio::time::sleep(REPAIR_INTERVAL).await;
    }
}

/// `PrepareForCreate`: a new Service has an empty `status.loadBalancer`, and `clusterIP` and
/// `clusterIPs` agree when only one of them was given.
pub fn prepare_for_create(obj: &mut Value) {
    set_in(obj, &["status"], json!({"loadBalancer": {}}));
    normalize_cluster_ips(obj);
}

/// `clusterIPs` from `clusterIP` and the other way round (`normalizeClusterIPs`).
fn normalize_cluster_ips(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let ip = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
    let first = spec.get("clusterIPs").and_then(|v| v.get(0)).and_then(Value::as_str).map(str::to_string);
    match first {
        None if !ip.is_empty() => {
            spec.insert("clusterIPs".into(), json!([ip]));
        }
        Some(f) if ip.is_empty() && !f.is_empty() => {
            spec.insert("clusterIP".into(), json!(f));
        }
        _ => {}
    }
}

fn needs_node_ports(spec: &Value) -> bool {
    matches!(spec["type"].as_str(), Some("NodePort" | "LoadBalancer"))
}

/// `PrepareForUpdate` of the main resource: what the stored Service was allocated stays when
/// the update leaves it out (`patchAllocatedValues`: a PUT or apply without `clusterIP` or a
/// port's `nodePort` keeps them), and fields of the old type that the new type cannot have are
/// dropped when the update left them unchanged (`dropTypeDependentFields`).
pub fn prepare_for_update(old: &Value, new: &mut Value) {
    let (old_spec, old_ty) = (&old["spec"], old["spec"]["type"].as_str().unwrap_or("ClusterIP"));
    let new_ty = new["spec"]["type"].as_str().unwrap_or("ClusterIP").to_string();
    if new.get("spec").is_none_or(|s| !s.is_object()) {
        return;
    }
    if old_ty != "ExternalName" && new_ty != "ExternalName" {
        for f in ["clusterIP", "clusterIPs"] {
            let missing = new["spec"].get(f).is_none_or(|v| v.is_null() || v == "" || v == &json!([]));
            if missing && let Some(v) = old_spec.get(f) {
                new["spec"][f] = v.clone();
            }
        }
    }
    if needs_node_ports(old_spec) && needs_node_ports(&new["spec"]) {
        let old_ports = old_spec["ports"].as_array().cloned().unwrap_or_default();
        if let Some(ports) = new["spec"]["ports"].as_array_mut() {
            for p in ports {
                if p["nodePort"].as_i64().unwrap_or(0) != 0 {
                    continue;
                }
                let same = old_ports.iter().find(|o| {
                    o["port"] == p["port"]
                        && o["protocol"].as_str().unwrap_or("TCP") == p["protocol"].as_str().unwrap_or("TCP")
                });
                if let Some(np) = same.and_then(|o| o.get("nodePort")).filter(|v| v.as_i64().unwrap_or(0) != 0) {
                    p["nodePort"] = np.clone();
                }
            }
        }
    }
    if old_ty == "LoadBalancer"
        && new_ty == "LoadBalancer"
        && new["spec"]["healthCheckNodePort"].as_i64().unwrap_or(0) == 0
        && new["spec"]["externalTrafficPolicy"].as_str() == Some("Local")
        && let Some(hc) = old_spec.get("healthCheckNodePort")
    {
        new["spec"]["healthCheckNodePort"] = hc.clone();
    }
    let spec = new["spec"].as_object_mut().expect("checked above");
    if new_ty == "ExternalName" && old_ty != "ExternalName" {
        for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if spec.get(f) == old_spec.get(f) {
                spec.remove(f);
            }
        }
    }
    if !matches!(new_ty.as_str(), "NodePort" | "LoadBalancer")
        && let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut)
    {
        for (i, p) in ports.iter_mut().enumerate() {
            let old_np = old_spec["ports"].get(i).and_then(|o| o.get("nodePort"));
            if let Some(m) = p.as_object_mut()
                && m.get("nodePort").is_some()
                && m.get("nodePort") == old_np
            {
                m.remove("nodePort");
            }
        }
    }
    if new_ty != "LoadBalancer" && spec.get("healthCheckNodePort") == old_spec.get("healthCheckNodePort") {
        spec.remove("healthCheckNodePort");
    }
    normalize_cluster_ips(new);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_without_cluster_ip_or_node_port_keeps_the_allocated_ones() {
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.43.0.9", "clusterIPs": ["10.43.0.9"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let mut new = json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "TCP"}]}});
        prepare_for_update(&old, &mut new);
        assert_eq!(new["spec"]["clusterIP"], "10.43.0.9");
        assert_eq!(new["spec"]["clusterIPs"], json!(["10.43.0.9"]));
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
        assert!(new["spec"]["ports"][1].get("nodePort").is_none());
    }

    #[test]
    fn a_change_to_cluster_ip_or_external_name_drops_what_the_new_type_cannot_have() {
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.43.0.9", "clusterIPs": ["10.43.0.9"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let mut new = old.clone();
        new["spec"]["type"] = json!("ClusterIP");
        prepare_for_update(&old, &mut new);
        assert!(new["spec"]["ports"][0].get("nodePort").is_none());
        assert_eq!(new["spec"]["clusterIP"], "10.43.0.9");
        let mut new = old.clone();
        new["spec"]["type"] = json!("ExternalName");
        prepare_for_update(&old, &mut new);
        assert!(new["spec"].get("clusterIP").is_none() && new["spec"].get("clusterIPs").is_none());
    }

    #[test]
    fn cluster_ips_follow_cluster_ip_on_create() {
        let mut svc = json!({"spec": {"clusterIP": "None"}});
        prepare_for_create(&mut svc);
        assert_eq!(svc["spec"]["clusterIPs"], json!(["None"]));
        let mut svc = json!({"spec": {"clusterIPs": ["10.43.1.1"]}});
        prepare_for_create(&mut svc);
        assert_eq!(svc["spec"]["clusterIP"], "10.43.1.1");
    }
}
