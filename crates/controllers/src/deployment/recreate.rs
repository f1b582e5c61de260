//! The Recreate strategy (`recreate.go`): scale every old ReplicaSet to zero, wait until no
//! old pod is running, then create/scale the new ReplicaSet to `replicas` at once.

use std::collections::HashMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;

use super::DeploymentController;
use super::sync::all_rss;
use super::util::*;
use crate::util::{controller_of, labels_of, pod_phase, selector_of, uid_of};
use skiff_runtime::controller::{ReconcileError, ReconcileResult};

impl DeploymentController {
    /// `rolloutRecreate`.
    pub(crate) async fn rollout_recreate(&self, d: &mut Deployment, rs_list: &mut Vec<ReplicaSet>) -> ReconcileResult {
        // Do not create the new ReplicaSet yet: scaling up must wait for the old pods.
        let (mut new_rs, mut old_rss) = self.get_all_replica_sets_and_sync_revision(d, rs_list, false).await?;

        if self.scale_down_old_replica_sets_for_recreate(&mut old_rss, d).await? {
            let all = all_rss(&old_rss, new_rs.as_ref());
            return self.sync_rollout_status(&all, new_rs.as_ref(), d).await;
        }

        let pod_map = self.pod_map_for_deployment(d, rs_list);
        if old_pods_running(new_rs.as_ref(), &old_rss, &pod_map) {
            let all = all_rss(&old_rss, new_rs.as_ref());
            return self.sync_rollout_status(&all, new_rs.as_ref(), d).await;
        }

        if new_rs.is_none() {
            let (created, olds) = self.get_all_replica_sets_and_sync_revision(d, rs_list, true).await?;
            new_rs = created;
            old_rss = olds;
        }
        if let Some(rs) = new_rs.clone() {
            let (_, updated) = self.scale_replica_set_and_record_event(&rs, replicas(d), d).await?;
            new_rs = Some(updated);
        }
        if deployment_complete(d, &d.status.clone().unwrap_or_default()) {
            self.cleanup_deployment(&old_rss, d).await?;
        }
        let all = all_rss(&old_rss, new_rs.as_ref());
        self.sync_rollout_status(&all, new_rs.as_ref(), d).await
    }

    /// `scaleDownOldReplicaSetsForRecreate`: every active old ReplicaSet to zero.
    async fn scale_down_old_replica_sets_for_recreate(
        &self,
        old_rss: &mut [ReplicaSet],
        d: &Deployment,
    ) -> Result<bool, ReconcileError> {
        let mut scaled = false;
        for rs in old_rss.iter_mut() {
            if rs_replicas(rs) == 0 {
                continue;
            }
            let (did, updated) = self.scale_replica_set_and_record_event(rs, 0, d).await?;
            if did {
                *rs = updated;
                scaled = true;
            }
        }
        Ok(scaled)
    }

    /// `getPodMapForDeployment`: the Deployment's pods (by selector), grouped by the uid of the
    /// ReplicaSet that controls them.
    pub(crate) fn pod_map_for_deployment(&self, d: &Deployment, rs_list: &[ReplicaSet]) -> HashMap<String, Vec<Pod>> {
        let mut map: HashMap<String, Vec<Pod>> =
            rs_list.iter().map(|rs| (uid_of(&rs.metadata).to_string(), Vec::new())).collect();
        let Some(selector) = d.spec.as_ref().and_then(|s| selector_of(&s.selector).ok()) else {
            return map;
        };
        let ns = d.metadata.namespace.as_deref().unwrap_or_default();
        for pod in self.pods.store().list_namespace(ns) {
            if !selector.matches(&labels_of(&pod.metadata)) {
                continue;
            }
            if let Some(cref) = controller_of(&pod.metadata)
                && let Some(pods) = map.get_mut(&cref.uid)
            {
                pods.push(pod.as_ref().clone());
            }
        }
        map
    }
}

/// `oldPodsRunning`: whether any old ReplicaSet still reports pods, or any pod of an old
/// ReplicaSet is not in a terminal phase (Unknown counts as running).
pub fn old_pods_running(
    new_rs: Option<&ReplicaSet>,
    old_rss: &[ReplicaSet],
    pod_map: &HashMap<String, Vec<Pod>>,
) -> bool {
    let old_refs: Vec<&ReplicaSet> = old_rss.iter().collect();
    if actual_replica_count(&old_refs) > 0 {
        return true;
    }
    let new_uid = new_rs.map(|rs| uid_of(&rs.metadata).to_string());
    pod_map
        .iter()
        .filter(|(uid, _)| Some(*uid) != new_uid.as_ref())
        .any(|(_, pods)| pods.iter().any(|p| !matches!(pod_phase(p), "Failed" | "Succeeded")))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::DeploymentStrategy;

    use super::super::fixture::*;

    fn recreate(f: &Fixture, replicas: i32) -> k8s_openapi::api::apps::v1::Deployment {
        let mut d = f.deployment("web", replicas, "25%", "25%");
        d.spec.as_mut().unwrap().strategy =
            Some(DeploymentStrategy { type_: Some("Recreate".into()), rolling_update: None });
        d
    }

    #[tokio::test]
    async fn recreate_scales_old_down_first_and_waits_for_old_pods() {
        let f = Fixture::new();
        let d = recreate(&f, 3);
        let old = f.old_rs(&d, "old", 3, 3, 1);
        f.seed_deployment(&d);
        f.seed_rs(&old);
        f.sync("ns/web").await.unwrap();
        assert_eq!(f.scales(), ["old:0"]);
        assert!(f.created_rs_opt().is_none());

        // Old ReplicaSet at 0 but a pod still terminating: no new ReplicaSet yet.
        let f = Fixture::new();
        let old = f.old_rs(&d, "old", 0, 0, 1);
        f.seed_deployment(&d);
        f.seed_rs(&old);
        f.seed_pod(&f.pod_of(&old, "old-pod", "Running"));
        f.sync("ns/web").await.unwrap();
        assert!(f.created_rs_opt().is_none());
        assert!(f.scales().is_empty());

        // All old pods gone: the new ReplicaSet is created at full size.
        let f = Fixture::new();
        let old = f.old_rs(&d, "old", 0, 0, 1);
        f.seed_deployment(&d);
        f.seed_rs(&old);
        f.seed_pod(&f.pod_of(&old, "old-pod", "Succeeded"));
        f.sync("ns/web").await.unwrap();
        let created = f.created_rs();
        assert_eq!(created["spec"]["replicas"], 3);
        assert_eq!(created["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");
    }
}
