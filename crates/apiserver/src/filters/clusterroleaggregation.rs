//! The ClusterRole aggregation controller kube-controller-manager runs
//! (`pkg/controller/clusterroleaggregation`), run by the API server beside the RBAC authorizer
//! whose snapshot it reads.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use skiff_apimachinery::ApiError;
use skiff_auth::rbac::{self, RbacAuthorizer};

use crate::storage::watchcache::{CacheMsg, Recv};

/// The ClusterRole aggregation controller (kube-controller-manager's `clusterrole-aggregation`,
/// run inside the API server next to the RBAC snapshot it reads): whenever ClusterRoles change,
/// writes into every ClusterRole with an `aggregationRule` the union of the rules of the
/// ClusterRoles its selectors match ([`RbacAuthorizer::aggregation_updates`]). Runs until the
/// server shuts down.
pub async fn run_cluster_role_aggregation(rbac: Arc<RbacAuthorizer>, state: Arc<crate::AppState>) {
    let Some(def) = state.registry.get(rbac::RBAC_GROUP, "v1", "clusterroles").cloned() else { return };
    let Some(cache) = state.caches.get(def.storage).cloned() else { return };
    let mut shutdown = state.shutdown.clone();
    while !cache.is_ready() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut sub = cache.snapshot(cache.prefix()).subscription;
    loop {
        // The snapshot follows the same cache a moment later: let it catch up.
        tokio::time::sleep(Duration::from_millis(50)).await;
        for role in rbac.aggregation_updates() {
            let name = role.metadata.name.clone().unwrap_or_default();
            let rules = serde_json::to_value(role.rules.clone().unwrap_or_default()).unwrap_or_default();
            let r = state
                .objects
                .update(&def, "", &name, None, &Default::default(), None, |cur| {
                    let mut cur =
                        cur.cloned().ok_or_else(|| ApiError::not_found(rbac::RBAC_GROUP, "clusterroles", &name))?;
                    cur["metadata"]["resourceVersion"] = Value::Null;
                    cur["rules"] = rules.clone();
                    Ok(cur)
                })
                .await;
            match r {
                Ok(_) => tracing::debug!(role = %name, "aggregated ClusterRole rules"),
                Err(e) if e.code == 404 => {}
                Err(e) => tracing::warn!(role = %name, error = %e, "writing aggregated ClusterRole rules"),
            }
        }
        tokio::select! {
            msg = sub.recv() => match msg {
                Recv::Closed => return,
                Recv::Lagged | Recv::Msg(CacheMsg::Reset) => sub = cache.snapshot(cache.prefix()).subscription,
                Recv::Msg(_) => {}
            },
            // A periodic pass catches updates the snapshot had not seen yet.
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.changed() => return,
        }
    }
}
