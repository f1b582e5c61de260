//! Objects every cluster has from its first start, created by the API server itself as
//! kube-apiserver's post-start hooks do: the system PriorityClasses
//! (`system-node-critical`, `system-cluster-critical`;
//! <https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/#priorityclass>).

use anyhow::{Context, Result};
use serde_json::json;
use skiff_apimachinery::validation::SYSTEM_PRIORITY_CLASSES;

use crate::AppState;
use crate::registry::store::WriteOptions;

/// Creates the system PriorityClasses when missing (an existing one is left as is).
pub async fn priority_classes(state: &AppState) -> Result<()> {
    let def = state
        .registry
        .get("scheduling.k8s.io", "v1", "priorityclasses")
        .context("priorityclasses are not registered")?
        .clone();
    for (name, value) in SYSTEM_PRIORITY_CLASSES {
        let description = match *name {
            "system-node-critical" => "Used for system critical pods that must not be moved from their current node.",
            _ => {
                "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."
            }
        };
        let obj = json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "description": description,
        });
        match state.objects.create(&def, "", obj, None, &WriteOptions::default()).await {
            Ok(_) => tracing::info!(priority_class = name, "created system PriorityClass"),
            Err(e) if e.code == 409 => {}
            Err(e) => anyhow::bail!("creating PriorityClass {name}: {e}"),
        }
    }
    Ok(())
}
