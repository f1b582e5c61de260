//! The resource-quota controller kube-controller-manager runs
//! (`pkg/controller/resourcequota`), run by the API server beside the ResourceQuota admission
//! plugin it serves: it recomputes every quota's `status.hard`/`status.used` from the watch
//! caches, so that deletes release usage and new quotas get their first status.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use skiff_admission::plugins::resource_quota;
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::storage::listers::cache_objects;
use crate::storage::watchcache::{CacheMsg, Recv};

/// Whether the quota resource name `key` counts objects of `group`/`resource`.
fn counts(key: &str, group: &str, resource: &str) -> bool {
    let count_key = if group.is_empty() { format!("count/{resource}") } else { format!("count/{resource}.{group}") };
    if key == count_key {
        return true;
    }
    if !group.is_empty() {
        return false;
    }
    match resource {
        "pods" => {
            matches!(key, "pods" | "cpu" | "memory" | "ephemeral-storage")
                || (key.starts_with("requests.") && key != "requests.storage")
                || key.starts_with("limits.")
        }
        "persistentvolumeclaims" => {
            key == "persistentvolumeclaims"
                || key == "requests.storage"
                || key.contains(".storageclass.storage.k8s.io/")
        }
        "services" => key == "services" || key.starts_with("services."),
        "secrets" | "configmaps" | "replicationcontrollers" | "resourcequotas" => key == resource,
        _ => false,
    }
}

/// Recomputes every ResourceQuota's status from the watch caches; returns how many it wrote.
pub async fn sync_quotas(state: &AppState) -> usize {
    let Some(def) = state.registry.get("", "v1", "resourcequotas").cloned() else { return 0 };
    let Some(cache) = state.caches.get(def.storage) else { return 0 };
    let quotas = cache.snapshot(cache.prefix()).objects;
    let mut written = 0;
    for quota in quotas {
        let ns = quota["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let name = quota["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let keys: Vec<String> =
            quota["spec"]["hard"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
        let mut objects: Vec<(&'static str, &'static str, Arc<Value>)> = Vec::new();
        for d in state.registry.all() {
            if !d.namespaced || d.storage.is_empty() || !keys.iter().any(|k| counts(k, d.group, d.resource)) {
                continue;
            }
            for o in cache_objects(state, d.storage, &format!("{ns}/")) {
                objects.push((d.group, d.resource, o));
            }
        }
        let status = resource_quota::quota_status(&quota, objects.iter().map(|(g, r, o)| (*g, *r, o.as_ref())));
        if quota["status"] == status {
            continue;
        }
        let r = state
            .objects
            .update(&def, &ns, &name, Some("status"), &Default::default(), None, |cur| {
                let mut cur = cur.cloned().ok_or_else(|| ApiError::not_found("", "resourcequotas", &name))?;
                cur["metadata"]["resourceVersion"] = Value::Null;
                cur["status"] = status.clone();
                Ok(cur)
            })
            .await;
        match r {
            Ok(_) => written += 1,
            Err(e) if e.code == 404 => {}
            Err(e) => tracing::warn!(namespace = %ns, quota = %name, error = %e, "updating quota status"),
        }
    }
    written
}

/// The resource-quota controller: recomputes quota status when a quota or a pod changes, and
/// every few seconds for the other counted kinds. Runs until the caches close.
pub async fn run_quota_controller(state: Arc<AppState>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    for storage in ["resourcequotas", "pods", "services/specs", "configmaps", "secrets", "persistentvolumeclaims"] {
        let Some(cache) = state.caches.get(storage).cloned() else { continue };
        let tx = tx.clone();
        tokio::spawn(async move {
            loop {
                while !cache.is_ready() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let mut sub = cache.snapshot(cache.prefix()).subscription;
                let _ = tx.try_send(());
                loop {
                    match sub.recv().await {
                        Recv::Msg(CacheMsg::Event(_)) => {
                            let _ = tx.try_send(());
                        }
                        Recv::Msg(CacheMsg::Progress(_)) => {}
                        // Resubscribe (and recompute) after a gap.
                        Recv::Lagged | Recv::Msg(CacheMsg::Reset) => break,
                        Recv::Closed => return,
                    }
                }
            }
        });
    }
    drop(tx);
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            r = rx.recv() => if r.is_none() { return },
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.changed() => return,
        }
        // Let a burst of events settle before recomputing.
        tokio::time::sleep(Duration::from_millis(50)).await;
        while rx.try_recv().is_ok() {}
        sync_quotas(&state).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_keys_count_the_kinds_kubernetes_counts() {
        assert!(counts("pods", "", "pods"));
        assert!(counts("requests.cpu", "", "pods"));
        assert!(counts("limits.memory", "", "pods"));
        assert!(!counts("requests.storage", "", "pods"));
        assert!(counts("requests.storage", "", "persistentvolumeclaims"));
        assert!(counts("count/deployments.apps", "apps", "deployments"));
        assert!(!counts("count/deployments.apps", "", "deployments"));
        assert!(counts("services.nodeports", "", "services"));
        assert!(counts("configmaps", "", "configmaps"));
        assert!(!counts("configmaps", "", "secrets"));
    }
}
