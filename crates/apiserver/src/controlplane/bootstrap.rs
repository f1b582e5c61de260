//! Objects every cluster has from its first start, created by the API server itself as
//! kube-apiserver's post-start hooks do: the system PriorityClasses
//! (`system-node-critical`, `system-cluster-critical`;
//! <https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/#priorityclass>),
//! and the default `local-path` StorageClass k3s ships.

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

/// The default StorageClass's name, as k3s names it (manifests written for k3s ask for it).
pub const LOCAL_PATH_CLASS: &str = "local-path";

/// The provisioner of [`LOCAL_PATH_CLASS`]. Not k3s's `rancher.io/local-path`: skiff's
/// provisioner is its own (no helper pods, no `local-path-config` ConfigMap), so a user who
/// installs Rancher's local-path-provisioner beside it gets two classes, not two provisioners
/// racing for the same claims.
pub const LOCAL_PATH_PROVISIONER: &str = "skiff.io/local-path";

/// Creates the default `local-path` StorageClass when missing (an existing one, default or not,
/// is left as is): WaitForFirstConsumer so a volume is made on the node its pod runs on, and
/// reclaim Delete as k3s's.
pub async fn storage_classes(state: &AppState) -> Result<()> {
    let def = state
        .registry
        .get("storage.k8s.io", "v1", "storageclasses")
        .context("storageclasses are not registered")?
        .clone();
    let obj = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {
            "name": LOCAL_PATH_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": LOCAL_PATH_PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    });
    match state.objects.create(&def, "", obj, None, &WriteOptions::default()).await {
        Ok(_) => tracing::info!(storage_class = LOCAL_PATH_CLASS, "created default StorageClass"),
        Err(e) if e.code == 409 => {}
        Err(e) => anyhow::bail!("creating StorageClass {LOCAL_PATH_CLASS}: {e}"),
    }
    Ok(())
}
