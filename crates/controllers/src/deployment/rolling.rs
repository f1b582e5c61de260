//! The RollingUpdate strategy (`rolling.go`): grow the new ReplicaSet within the surge
//! budget, shrink old ones within the unavailability budget, one step per sync.
//!
//! The two budgets, for `replicas: 10, maxSurge: 25%, maxUnavailable: 25%` (surge rounds up to
//! 3, unavailable rounds down to 2):
//! - at most `10 + 3 = 13` pods exist at any time (counting `spec.replicas` of all ReplicaSets);
//! - at least `10 - 2 = 8` pods are available at any time.
//!
//! A rollout of that Deployment from v1 to v2, one sync per line (pods become available in
//! between):
//! 1. old 10, new 0 → new may grow to 13 - 10 = 3: **new 3** (13 pods).
//! 2. 13 pods, 10 available (old) → may remove 10 + 3 - 8 - 3 (unavailable new) = 2: **old 8**.
//! 3. new pods become available: total 11 → new grows by 2: **new 5**; then with 8 + 3
//!    available, old shrinks by 11 - 8 = 3: **old 5**… and so on until new 10, old 0.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

use super::DeploymentController;
use super::sync::{all_rss, replace_rs};
use super::util::*;
use skiff_runtime::controller::{ReconcileError, ReconcileResult};

impl DeploymentController {
    /// `rolloutRolling`: scale up if possible, else scale down if possible, then the status;
    /// old revisions are cleaned up once the rollout is complete.
    pub(crate) async fn rollout_rolling(&self, d: &mut Deployment, rs_list: &mut Vec<ReplicaSet>) -> ReconcileResult {
        let (new_rs, mut old_rss) = self.get_all_replica_sets_and_sync_revision(d, rs_list, true).await?;
        let Some(mut new_rs) = new_rs else {
            return Err(ReconcileError::Other("no new replica set".into()));
        };

        let scaled_up = {
            let all = all_rss(&old_rss, Some(&new_rs));
            let all_owned: Vec<ReplicaSet> = all.into_iter().cloned().collect();
            let (scaled, updated) = self.reconcile_new_replica_set(&all_owned, &new_rs, d).await?;
            new_rs = updated;
            scaled
        };
        if scaled_up {
            let all = all_rss(&old_rss, Some(&new_rs));
            return self.sync_rollout_status(&all, Some(&new_rs), d).await;
        }

        let scaled_down = self.reconcile_old_replica_sets(&mut old_rss, &new_rs, d).await?;
        if scaled_down {
            let all = all_rss(&old_rss, Some(&new_rs));
            return self.sync_rollout_status(&all, Some(&new_rs), d).await;
        }

        if deployment_complete(d, &d.status.clone().unwrap_or_default()) {
            self.cleanup_deployment(&old_rss, d).await?;
        }
        let all = all_rss(&old_rss, Some(&new_rs));
        self.sync_rollout_status(&all, Some(&new_rs), d).await
    }

    /// `reconcileNewReplicaSet`: scales the new ReplicaSet toward `replicas` within the surge
    /// budget ([`new_rs_new_replicas`]), or down if it is above `replicas`.
    pub(crate) async fn reconcile_new_replica_set(
        &self,
        all: &[ReplicaSet],
        new_rs: &ReplicaSet,
        d: &Deployment,
    ) -> Result<(bool, ReplicaSet), ReconcileError> {
        let r = replicas(d);
        if rs_replicas(new_rs) == r {
            return Ok((false, new_rs.clone()));
        }
        if rs_replicas(new_rs) > r {
            return self.scale_replica_set_and_record_event(new_rs, r, d).await;
        }
        let refs: Vec<&ReplicaSet> = all.iter().collect();
        let count = new_rs_new_replicas(d, &refs, new_rs).map_err(ReconcileError::Other)?;
        self.scale_replica_set_and_record_event(new_rs, count, d).await
    }

    /// `reconcileOldReplicaSets`: how far old ReplicaSets may shrink.
    ///
    /// `maxScaledDown = allPods - minAvailable - newRSUnavailable`: besides the surge already
    /// created, pods of the new ReplicaSet that are not yet available count against the
    /// budget, so a broken new revision never eats into the old, working one.
    ///
    /// Worked numbers: replicas 10, maxUnavailable 2 (minAvailable 8), maxSurge 3; old RS at
    /// 10 (all available), new RS at 3 (none available yet): allPods 13, so
    /// 13 - 8 - 3 = 2 old pods may go. If the new pods never become available (a bad
    /// image), the next sync finds allPods 11, new unavailable 3: 11 - 8 - 3 = 0, and the
    /// rollout stalls with 8 old pods serving, until progressDeadlineSeconds reports it.
    ///
    /// Unhealthy old pods are removed first ([`Self::cleanup_unhealthy_replicas`]), since they
    /// cost no availability; then available ones down to minAvailable.
    pub(crate) async fn reconcile_old_replica_sets(
        &self,
        old_rss: &mut [ReplicaSet],
        new_rs: &ReplicaSet,
        d: &Deployment,
    ) -> Result<bool, ReconcileError> {
        let old_refs: Vec<&ReplicaSet> = filter_active(old_rss.iter());
        let old_pods = replica_count(&old_refs);
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods = old_pods + rs_replicas(new_rs);
        let min_available = replicas(d) - max_unavailable(d);
        let new_unavailable = rs_replicas(new_rs) - rs_available(new_rs);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        let cleanup = self.cleanup_unhealthy_replicas(old_rss, d, max_scaled_down).await?;
        let scaled = self.scale_down_old_replica_sets_for_rolling_update(old_rss, new_rs, d).await?;
        Ok(cleanup + scaled > 0)
    }

    /// `cleanupUnhealthyReplicas`: shrinks old ReplicaSets (oldest first) by their
    /// unavailable pods, at most `max_cleanup` in total. The ReplicaSet controller deletes
    /// not-ready pods first, so this costs no availability.
    ///
    /// Worked numbers: old RS at 5 with 3 available and max_cleanup 4 → shrinks by
    /// min(4, 5 - 3) = 2, to 3.
    pub(crate) async fn cleanup_unhealthy_replicas(
        &self,
        old_rss: &mut [ReplicaSet],
        d: &Deployment,
        max_cleanup: i32,
    ) -> Result<i32, ReconcileError> {
        old_rss.sort_by(by_creation_timestamp);
        let mut total = 0;
        for slot in old_rss.iter_mut() {
            if total >= max_cleanup {
                break;
            }
            let target = slot.clone();
            let size = rs_replicas(&target);
            // `size < available` happens while the ReplicaSet's status still counts pods of a
            // scale-down this controller just made: there is nothing unhealthy to clean up.
            // Kubernetes returns an error here and retries with backoff, which stalls large
            // rollouts for seconds; skipping is equivalent once the status catches up.
            if size == 0 || size <= rs_available(&target) {
                continue;
            }
            let scaled_down = (max_cleanup - total).min(size - rs_available(&target));
            let new_size = size - scaled_down;
            if new_size > size {
                return Err(ReconcileError::Other(format!(
                    "when cleaning up unhealthy replicas, got invalid request to scale down {} {size} -> {new_size}",
                    skiff_runtime::informer::key_of(&target)
                )));
            }
            let (_, updated) = self.scale_replica_set_and_record_event(&target, new_size, d).await?;
            total += scaled_down;
            *slot = updated;
        }
        Ok(total)
    }

    /// `scaleDownOldReplicaSetsForRollingUpdate`: removes available old pods (oldest
    /// ReplicaSets first) while more than `minAvailable` pods are available in total.
    ///
    /// Worked numbers: replicas 10, minAvailable 8, 11 pods available (8 old + 3 new) → 3 old
    /// pods may go.
    pub(crate) async fn scale_down_old_replica_sets_for_rolling_update(
        &self,
        old_rss: &mut [ReplicaSet],
        new_rs: &ReplicaSet,
        d: &Deployment,
    ) -> Result<i32, ReconcileError> {
        let min_available = replicas(d) - max_unavailable(d);
        let available = {
            let all = all_rss(old_rss, Some(new_rs));
            available_replica_count(&all)
        };
        if available <= min_available {
            return Ok(0);
        }
        old_rss.sort_by(by_creation_timestamp);
        let total_to_scale_down = available - min_available;
        let mut total = 0;
        for i in 0..old_rss.len() {
            if total >= total_to_scale_down {
                break;
            }
            let target = old_rss[i].clone();
            let size = rs_replicas(&target);
            if size == 0 {
                continue;
            }
            let scale_down = size.min(total_to_scale_down - total);
            let new_size = size - scale_down;
            let (_, updated) = self.scale_replica_set_and_record_event(&target, new_size, d).await?;
            total += scale_down;
            let mut none = None;
            replace_rs(&mut none, old_rss, updated);
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;
    use skiff_runtime::controller::Action;

    /// One reconcile per row: (replicas, maxSurge, maxUnavailable, old (size, available),
    /// new (size, available)) → the scale actions, as `name:size`.
    #[tokio::test]
    async fn rolling_update_steps_follow_the_surge_and_unavailable_budgets() {
        type Case<'a> = (i32, &'a str, &'a str, (i32, i32), (i32, i32), &'a [&'a str]);
        let cases: &[Case] = &[
            // 10 replicas, 25%/25% = surge 3, unavailable 2: at most 13 pods, at least 8 available.
            (10, "25%", "25%", (10, 10), (0, 0), &["new:3"]),
            (10, "25%", "25%", (10, 10), (3, 0), &["old:8"]),
            (10, "25%", "25%", (8, 8), (3, 0), &["new:5"]),
            // 13 pods, 5 new ones not available yet: 13 - 8 - 5 = 0 may go, nothing moves.
            (10, "25%", "25%", (8, 8), (5, 0), &[]),
            (10, "25%", "25%", (8, 8), (5, 3), &["old:5"]),
            (10, "25%", "25%", (0, 0), (10, 10), &[]),
            // maxSurge 0: old pods must go first (maxUnavailable 1).
            (3, "0", "1", (3, 3), (0, 0), &["old:2"]),
            (3, "0", "1", (2, 2), (0, 0), &["new:1"]),
            // maxUnavailable 0: grow first, shrink only what is replaced.
            (3, "1", "0", (3, 3), (0, 0), &["new:1"]),
            (3, "1", "0", (3, 3), (1, 1), &["old:2"]),
            // Unhealthy old pods go first: 5 - 3 - 0 = 2 may go, both unavailable ones.
            (4, "1", "1", (4, 2), (1, 1), &["old:2"]),
            // The old ReplicaSet's status still counts 8 available after a scale-down to 5:
            // no cleanup error; the rollout continues with the budget.
            (10, "25%", "25%", (5, 8), (8, 8), &["old:0"]),
        ];
        for (replicas, surge, unavailable, old, new, want) in cases {
            let f = Fixture::new();
            let d = f.deployment("web", *replicas, surge, unavailable);
            let old_rs = f.old_rs(&d, "old", old.0, old.1, 1);
            let new_rs = f.new_rs(&d, "new", new.0, new.1, 2);
            f.seed_deployment(&d);
            f.seed_rs(&old_rs);
            f.seed_rs(&new_rs);
            let result = f.sync("ns/web").await;
            assert!(result.is_ok(), "{result:?}");
            assert_eq!(
                f.scales(),
                *want,
                "replicas {replicas} surge {surge} unavailable {unavailable} old {old:?} new {new:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_new_deployment_creates_its_replica_set_with_hash_revision_and_annotations() {
        let f = Fixture::new();
        let d = f.deployment("web", 3, "25%", "25%");
        f.seed_deployment(&d);
        assert_eq!(f.sync("ns/web").await.unwrap(), Action::AwaitChange);
        let created = f.created_rs();
        let name = created["metadata"]["name"].as_str().unwrap().to_string();
        let hash = created["metadata"]["labels"]["pod-template-hash"].as_str().unwrap().to_string();
        assert_eq!(name, format!("web-{hash}"));
        assert_eq!(created["spec"]["selector"]["matchLabels"]["pod-template-hash"], hash);
        assert_eq!(created["spec"]["template"]["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(created["spec"]["replicas"], 3);
        assert_eq!(created["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1");
        assert_eq!(created["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"], "3");
        assert_eq!(created["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"], "4");
        assert_eq!(created["metadata"]["ownerReferences"][0]["kind"], "Deployment");
        assert_eq!(created["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(f.events(), [format!("Normal ScalingReplicaSet Scaled up replica set {name} from 0 to 3")]);
        // The Deployment got the revision and Progressing NewReplicaSetCreated.
        let status_updates = f.deployment_status_updates();
        let first = &status_updates[0];
        assert_eq!(first["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1");
        let cond =
            first["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").unwrap();
        assert_eq!(cond["reason"], "NewReplicaSetCreated");
        assert_eq!(cond["message"], format!("Created new replica set \"{name}\""));
    }

    #[tokio::test]
    async fn a_completed_rollout_reports_new_replica_set_available_and_cleans_history() {
        let f = Fixture::new();
        let mut d = f.deployment("web", 2, "25%", "25%");
        d.spec.as_mut().unwrap().revision_history_limit = Some(1);
        let new_rs = f.new_rs(&d, "new", 2, 2, 5);
        f.seed_deployment(&d);
        f.seed_rs(&new_rs);
        for (name, rev) in [("r1", 1), ("r2", 2), ("r3", 3)] {
            let old = f.old_rs(&d, name, 0, 0, rev);
            f.seed_rs(&old);
        }
        // First sync writes the complete status; the second sees it and cleans up.
        f.sync("ns/web").await.unwrap();
        let status = f.deployment_status_updates().last().unwrap()["status"].clone();
        assert_eq!(status["updatedReplicas"], 2);
        assert_eq!(status["availableReplicas"], 2);
        let progressing =
            status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").unwrap().clone();
        assert_eq!(progressing["reason"], "NewReplicaSetAvailable");
        assert_eq!(progressing["message"], "ReplicaSet \"web-new\" has successfully progressed.");
        let available =
            status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Available").unwrap().clone();
        assert_eq!(available["reason"], "MinimumReplicasAvailable");
        f.refresh_deployment_from_api("web");
        f.sync("ns/web").await.unwrap();
        // Three old revisions, limit 1: the two oldest go.
        assert_eq!(f.deleted_rss(), ["web-r1", "web-r2"]);
    }
}
