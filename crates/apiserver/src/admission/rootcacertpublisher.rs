//! The root-CA publisher kube-controller-manager runs
//! (`pkg/controller/certificates/rootcacertpublisher`), run by the API server beside the
//! admission chain: the `kube-root-ca.crt` ConfigMap in every namespace.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skiff_admission::plugins::service_account;
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::resources::ResourceDef;
use crate::storage::listers::cache_get;
use crate::storage::watchcache::{CacheMsg, EventKind, Recv};

/// Publishes the cluster CA as the `kube-root-ca.crt` ConfigMap (key `ca.crt`) in every
/// namespace, as kube-controller-manager's root-ca-cert-publisher does; projected
/// service-account volumes read it. Runs until the caches close.
pub async fn run_root_ca_publisher(state: Arc<AppState>, ca_pem: String) {
    let (Some(ns_def), Some(cm_def)) =
        (state.registry.get("", "v1", "namespaces").cloned(), state.registry.get("", "v1", "configmaps").cloned())
    else {
        return;
    };
    let Some(cache) = state.caches.get(ns_def.storage).cloned() else { return };
    let mut shutdown = state.shutdown.clone();
    loop {
        while !cache.is_ready() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let snap = cache.snapshot(cache.prefix());
        let mut sub = snap.subscription;
        let mut pending: Vec<String> =
            snap.objects.iter().filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string)).collect();
        loop {
            for ns in pending.drain(..) {
                publish_root_ca(&state, &cm_def, &ns, &ca_pem).await;
            }
            let msg = tokio::select! {
                m = sub.recv() => m,
                _ = shutdown.changed() => return,
            };
            match msg {
                Recv::Msg(CacheMsg::Event(e)) if e.kind != EventKind::Deleted => {
                    let terminating = !e.object["metadata"]["deletionTimestamp"].is_null();
                    if let (Some(n), false) = (e.object["metadata"]["name"].as_str(), terminating) {
                        pending.push(n.to_string());
                    }
                }
                Recv::Msg(_) => {}
                Recv::Lagged => break,
                Recv::Closed => return,
            }
        }
    }
}

async fn publish_root_ca(state: &AppState, def: &ResourceDef, ns: &str, ca_pem: &str) {
    let name = service_account::ROOT_CA_CONFIGMAP;
    if let Some(cm) = cache_get(state, def.storage, ns, name)
        && cm["data"]["ca.crt"] == ca_pem
    {
        return;
    }
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
        "data": {"ca.crt": ca_pem}});
    match state.objects.create(def, ns, obj, None, &Default::default()).await {
        Ok(_) => {}
        Err(e) if e.code == 409 => {
            let r = state
                .objects
                .update(def, ns, name, None, &Default::default(), None, |cur| {
                    let mut cur = cur.cloned().ok_or_else(|| ApiError::not_found("", "configmaps", name))?;
                    cur["metadata"]["resourceVersion"] = Value::Null;
                    cur["data"] = json!({"ca.crt": ca_pem});
                    Ok(cur)
                })
                .await;
            if let Err(e) = r {
                tracing::debug!(namespace = ns, error = %e, "updating kube-root-ca.crt");
            }
        }
        // A namespace being deleted refuses new content.
        Err(e) => tracing::debug!(namespace = ns, error = %e, "creating kube-root-ca.crt"),
    }
}
