//! Steps shared by every path of the Deployment controller (`sync.go`): finding or creating the
//! new ReplicaSet and keeping revisions in step, scaling (including proportional scaling of a
//! rollout in progress), cleaning up old revisions and computing the status.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::jiff::Timestamp;

use super::DeploymentController;
use super::rollback::get_rollback_to;
use super::util::*;
use crate::util::{controller_of, name_of, new_controller_ref, uid_of};
use skiff_runtime::api::{ApiClientExt, DeleteOptions, is_already_exists, is_not_found};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, reasons as event_reasons};

/// Every ReplicaSet, old ones first (the `append(oldRSs, newRS)` of the Go code).
pub(crate) fn all_rss<'a>(old: &'a [ReplicaSet], new_rs: Option<&'a ReplicaSet>) -> Vec<&'a ReplicaSet> {
    old.iter().chain(new_rs).collect()
}

/// `calculateStatus`: counts from the ReplicaSets, and the Available condition (True when at
/// least `replicas - maxUnavailable` replicas are available).
pub fn calculate_status(
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    d: &Deployment,
    now: Timestamp,
) -> DeploymentStatus {
    let available = available_replica_count(all);
    let total = replica_count(all);
    let unavailable = (total - available).max(0);
    let old = d.status.clone().unwrap_or_default();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(actual_replica_count(all)),
        updated_replicas: Some(actual_replica_count(&new_rs.into_iter().collect::<Vec<_>>())),
        ready_replicas: Some(ready_replica_count(all)),
        available_replicas: Some(available),
        unavailable_replicas: Some(unavailable),
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        terminating_replicas: None,
    };
    if available >= replicas(d) - max_unavailable(d) {
        set_condition(
            &mut status,
            new_condition(
                DEPLOYMENT_AVAILABLE,
                "True",
                reasons::MINIMUM_REPLICAS_AVAILABLE,
                "Deployment has minimum availability.",
                now,
            ),
        );
    } else {
        set_condition(
            &mut status,
            new_condition(
                DEPLOYMENT_AVAILABLE,
                "False",
                reasons::MINIMUM_REPLICAS_UNAVAILABLE,
                "Deployment does not have minimum availability.",
                now,
            ),
        );
    }
    normalize_status(status)
}

impl DeploymentController {
    /// `sync`: scale only (paused Deployments and scaling events), then history cleanup
    /// (paused only) and status.
    pub(crate) async fn sync(&self, d: &mut Deployment, rs_list: &mut Vec<ReplicaSet>) -> ReconcileResult {
        let (mut new_rs, mut old_rss) = self.get_all_replica_sets_and_sync_revision(d, rs_list, false).await?;
        self.scale(d, &mut new_rs, &mut old_rss).await?;
        if d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false) && get_rollback_to(d).is_none() {
            self.cleanup_deployment(&old_rss, d).await?;
        }
        let all = all_rss(&old_rss, new_rs.as_ref());
        self.sync_deployment_status(&all, new_rs.as_ref(), d).await?;
        Ok(Action::AwaitChange)
    }

    /// `syncStatusOnly` (Deployments being deleted).
    pub(crate) async fn sync_status_only(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<ReplicaSet>,
    ) -> Result<(), ReconcileError> {
        let (new_rs, old_rss) = self.get_all_replica_sets_and_sync_revision(d, rs_list, false).await?;
        let all = all_rss(&old_rss, new_rs.as_ref());
        self.sync_deployment_status(&all, new_rs.as_ref(), d).await
    }

    /// `checkPausedConditions`: Progressing Unknown `DeploymentPaused` / `DeploymentResumed`,
    /// unless the rollout already timed out.
    pub(crate) async fn check_paused_conditions(&self, d: &mut Deployment) -> Result<(), ReconcileError> {
        if !has_progress_deadline(d) {
            return Ok(());
        }
        let status = d.status.clone().unwrap_or_default();
        let cond = get_condition(&status, DEPLOYMENT_PROGRESSING);
        if cond.is_some_and(|c| c.reason.as_deref() == Some(reasons::TIMED_OUT_REASON)) {
            return Ok(());
        }
        let paused_cond_exists = cond.is_some_and(|c| c.reason.as_deref() == Some(reasons::PAUSED_DEPLOY_REASON));
        let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let now = self.now();
        let condition = if paused && !paused_cond_exists {
            new_condition(DEPLOYMENT_PROGRESSING, "Unknown", reasons::PAUSED_DEPLOY_REASON, "Deployment is paused", now)
        } else if !paused && paused_cond_exists {
            new_condition(
                DEPLOYMENT_PROGRESSING,
                "Unknown",
                reasons::RESUMED_DEPLOY_REASON,
                "Deployment is resumed",
                now,
            )
        } else {
            return Ok(());
        };
        set_condition(d.status.get_or_insert_with(Default::default), condition);
        self.update_deployment_status(d).await?;
        Ok(())
    }

    /// `getAllReplicaSetsAndSyncRevision`: (new ReplicaSet, old ReplicaSets); creates the new
    /// one if `create` and it does not exist.
    pub(crate) async fn get_all_replica_sets_and_sync_revision(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<ReplicaSet>,
        create: bool,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), ReconcileError> {
        let old = find_old_replica_sets(d, rs_list);
        let new_rs = self.get_new_replica_set(d, rs_list, &old, create).await?;
        // Keep the list current, so a later step of the same sync does not write the same
        // change again from a stale copy (and conflict).
        if let Some(rs) = &new_rs {
            match rs_list.iter_mut().find(|o| o.metadata.uid == rs.metadata.uid) {
                Some(slot) => *slot = rs.clone(),
                None => rs_list.push(rs.clone()),
            }
        }
        Ok((new_rs, old))
    }

    /// `getNewReplicaSet`: the ReplicaSet of the current template with its annotations brought
    /// up to date (revision = max old revision + 1), or a newly created one named
    /// `<deployment>-<pod-template-hash>`. A name collision with a foreign ReplicaSet bumps
    /// `status.collisionCount`, which changes the hash on the next attempt.
    async fn get_new_replica_set(
        &self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
        old_rss: &[ReplicaSet],
        create: bool,
    ) -> Result<Option<ReplicaSet>, ReconcileError> {
        let existing = find_new_replica_set(d, rs_list);
        let old_refs: Vec<&ReplicaSet> = old_rss.iter().collect();
        let new_revision = (max_revision(&old_refs) + 1).to_string();
        let now = self.now();

        if let Some(existing) = existing {
            let mut rs_copy = existing.clone();
            let annotations_updated = set_new_replica_set_annotations(d, &mut rs_copy, &new_revision, true);
            let d_min_ready = d.spec.as_ref().and_then(|s| s.min_ready_seconds);
            let spec = rs_copy.spec.get_or_insert_with(Default::default);
            let min_ready_needs_update = spec.min_ready_seconds.unwrap_or(0) != d_min_ready.unwrap_or(0);
            if annotations_updated || min_ready_needs_update {
                spec.min_ready_seconds = d_min_ready;
                return Ok(Some(self.api.update_typed(&rs_copy).await?));
            }
            // The revision the existing new ReplicaSet already carries wins.
            let rev = rs_copy
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION_ANNOTATION))
                .cloned()
                .unwrap_or_default();
            let mut needs_update = set_deployment_revision(d, &rev);
            let has_progressing = d.status.as_ref().and_then(|s| get_condition(s, DEPLOYMENT_PROGRESSING)).is_some();
            if has_progress_deadline(d) && !has_progressing {
                let msg = format!("Found new replica set {:?}", name_of(&rs_copy.metadata));
                set_condition(
                    d.status.get_or_insert_with(Default::default),
                    new_condition(DEPLOYMENT_PROGRESSING, "True", reasons::FOUND_NEW_RS_REASON, &msg, now),
                );
                needs_update = true;
            }
            if needs_update {
                self.update_deployment_status(d).await?;
            }
            return Ok(Some(rs_copy));
        }

        if !create {
            return Ok(None);
        }

        // The new ReplicaSet: the template plus the pod-template-hash label.
        let spec = d.spec.clone().unwrap_or_default();
        let mut template = spec.template.clone();
        let collision_count = d.status.as_ref().and_then(|s| s.collision_count);
        let hash = compute_hash(&template, collision_count);
        let tmeta = template.metadata.get_or_insert_with(ObjectMeta::default);
        tmeta
            .labels
            .get_or_insert_with(Default::default)
            .insert(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY.to_string(), hash.clone());
        let mut selector: LabelSelector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY.to_string(), hash.clone());
        let name = format!("{}-{hash}", name_of(&d.metadata));
        let mut new_rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: d.metadata.namespace.clone(),
                owner_references: Some(vec![new_controller_ref(d)]),
                labels: tmeta.labels.clone(),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: spec.min_ready_seconds,
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let mut all: Vec<&ReplicaSet> = old_rss.iter().collect();
        let new_count = {
            let probe = new_rs.clone();
            all.push(&probe);
            new_rs_new_replicas(d, &all, &probe).map_err(ReconcileError::Other)?
        };
        set_rs_replicas(&mut new_rs, new_count);
        set_new_replica_set_annotations(d, &mut new_rs, &new_revision, false);

        let mut already_exists = false;
        let created = match self.api.create_typed(&new_rs).await {
            Ok(rs) => rs,
            Err(e) if is_already_exists(&e) => {
                already_exists = true;
                // Ours (an earlier sync created it but the cache had not caught up), or a hash
                // collision with someone else's ReplicaSet?
                let found = self.replicasets.store().get_namespaced(d.metadata.namespace.as_deref(), &name);
                let ours = found.as_ref().is_some_and(|rs| {
                    controller_of(&rs.metadata).is_some_and(|r| r.uid == uid_of(&d.metadata))
                        && equal_ignore_hash(&d_template(d), &rs_template(rs))
                });
                match found {
                    Some(rs) if ours => rs.as_ref().clone(),
                    _ => {
                        let status = d.status.get_or_insert_with(Default::default);
                        let pre = status.collision_count.unwrap_or(0);
                        status.collision_count = Some(pre + 1);
                        if self.update_deployment_status(d).await.is_ok() {
                            tracing::info!(deployment = %name_of(&d.metadata), collision_count = pre + 1, "found a hash collision");
                        }
                        return Err(e.into());
                    }
                }
            }
            Err(e) if skiff_runtime::api::has_status_cause(&e, skiff_runtime::api::NAMESPACE_TERMINATING_CAUSE) => {
                return Err(e.into());
            }
            Err(e) => {
                let msg = format!("Failed to create new replica set {name:?}: {}", e.message);
                if has_progress_deadline(d) {
                    set_condition(
                        d.status.get_or_insert_with(Default::default),
                        new_condition(DEPLOYMENT_PROGRESSING, "False", reasons::FAILED_RS_CREATE_REASON, &msg, now),
                    );
                    let _ = self.update_deployment_status(d).await;
                }
                self.recorder.event_for(d, EVENT_TYPE_WARNING, reasons::FAILED_RS_CREATE_REASON, &msg);
                return Err(e.into());
            }
        };
        if !already_exists {
            tracing::debug!(
                deployment = name_of(&d.metadata),
                replicaset = name_of(&created.metadata),
                replicas = new_count,
                "created new replica set"
            );
        }
        if !already_exists && new_count > 0 {
            self.recorder.event_for(
                d,
                EVENT_TYPE_NORMAL,
                event_reasons::SCALING_REPLICA_SET,
                &format!("Scaled up replica set {} from 0 to {new_count}", name_of(&created.metadata)),
            );
        }
        let mut needs_update = set_deployment_revision(d, &new_revision);
        if !already_exists && has_progress_deadline(d) {
            let msg = format!("Created new replica set {:?}", name_of(&created.metadata));
            set_condition(
                d.status.get_or_insert_with(Default::default),
                new_condition(DEPLOYMENT_PROGRESSING, "True", reasons::NEW_RS_REASON, &msg, now),
            );
            needs_update = true;
        }
        if needs_update {
            self.update_deployment_status(d).await?;
        }
        Ok(Some(created))
    }

    /// `scale`: scales the ReplicaSets when the Deployment's size changed.
    ///
    /// - One active (or no active) ReplicaSet: it gets all `replicas`.
    /// - A saturated new ReplicaSet: old ones go to zero.
    /// - Otherwise, during a rolling update, the difference between the allowed size
    ///   (`replicas + maxSurge`) and the current total is spread over the active ReplicaSets in
    ///   proportion to their size (see [`replica_set_fraction`] for worked numbers), larger
    ///   ReplicaSets first; leftovers from rounding go to the largest.
    pub(crate) async fn scale(
        &self,
        d: &Deployment,
        new_rs: &mut Option<ReplicaSet>,
        old_rss: &mut [ReplicaSet],
    ) -> Result<(), ReconcileError> {
        let r = replicas(d);
        if let Some(target) = find_active_or_latest(new_rs.as_ref(), old_rss).cloned() {
            if rs_replicas(&target) == r {
                return Ok(());
            }
            let (_, updated) = self.scale_replica_set_and_record_event(&target, r, d).await?;
            replace_rs(new_rs, old_rss, updated);
            return Ok(());
        }
        if is_saturated(d, new_rs.as_ref()) {
            for slot in old_rss.iter_mut() {
                if rs_replicas(slot) > 0 {
                    let (_, updated) = self.scale_replica_set_and_record_event(slot, 0, d).await?;
                    *slot = updated;
                }
            }
            return Ok(());
        }
        if !is_rolling_update(d) {
            return Ok(());
        }
        let mut active: Vec<ReplicaSet> =
            old_rss.iter().chain(new_rs.as_ref()).filter(|rs| rs_replicas(rs) > 0).cloned().collect();
        let total: i32 = active.iter().map(rs_replicas).sum();
        let allowed = if r > 0 { r + max_surge(d) } else { 0 };
        let to_add = allowed - total;
        let operation = match to_add.cmp(&0) {
            std::cmp::Ordering::Greater => {
                active.sort_by(by_size_newer);
                "up"
            }
            std::cmp::Ordering::Less => {
                active.sort_by(by_size_older);
                "down"
            }
            std::cmp::Ordering::Equal => "",
        };
        let mut added = 0;
        let mut sizes: Vec<i32> = Vec::with_capacity(active.len());
        for rs in &active {
            if to_add != 0 {
                let p = proportion(rs, d, to_add, added);
                sizes.push(rs_replicas(rs) + p);
                added += p;
            } else {
                sizes.push(rs_replicas(rs));
            }
        }
        for (i, rs) in active.iter().enumerate() {
            if i == 0 && to_add != 0 {
                let leftover = to_add - added;
                sizes[0] = (sizes[0] + leftover).max(0);
            }
            let (_, updated) = self.scale_replica_set(rs, sizes[i], d, operation).await?;
            replace_rs(new_rs, old_rss, updated);
        }
        Ok(())
    }

    /// `scaleReplicaSetAndRecordEvent`: scales if the size differs; returns (scaled, latest).
    pub(crate) async fn scale_replica_set_and_record_event(
        &self,
        rs: &ReplicaSet,
        new_scale: i32,
        d: &Deployment,
    ) -> Result<(bool, ReplicaSet), ReconcileError> {
        if rs_replicas(rs) == new_scale {
            return Ok((false, rs.clone()));
        }
        let op = if rs_replicas(rs) < new_scale { "up" } else { "down" };
        self.scale_replica_set(rs, new_scale, d, op).await
    }

    /// `scaleReplicaSet`: updates size and replicas annotations; records `ScalingReplicaSet`
    /// (`Scaled up replica set web-5d59d67564 from 1 to 3`) when the size changed.
    pub(crate) async fn scale_replica_set(
        &self,
        rs: &ReplicaSet,
        new_scale: i32,
        d: &Deployment,
        operation: &str,
    ) -> Result<(bool, ReplicaSet), ReconcileError> {
        let size_needs_update = rs_replicas(rs) != new_scale;
        let desired = replicas(d);
        let max = desired + max_surge(d);
        let annotations_need_update = replicas_annotations_need_update(rs, desired, max);
        if !size_needs_update && !annotations_need_update {
            return Ok((false, rs.clone()));
        }
        let old_scale = rs_replicas(rs);
        if size_needs_update {
            tracing::debug!(
                deployment = name_of(&d.metadata),
                replicaset = name_of(&rs.metadata),
                from = old_scale,
                to = new_scale,
                "scaling {operation} replica set"
            );
        }
        let mut copy = rs.clone();
        set_rs_replicas(&mut copy, new_scale);
        set_replicas_annotations(&mut copy, desired, max);
        let updated = self.api.update_typed(&copy).await?;
        if size_needs_update {
            self.recorder.event_for(
                d,
                EVENT_TYPE_NORMAL,
                event_reasons::SCALING_REPLICA_SET,
                &format!("Scaled {operation} replica set {} from {old_scale} to {new_scale}", name_of(&rs.metadata)),
            );
        }
        Ok((size_needs_update, updated))
    }

    /// `cleanupDeployment`: deletes the oldest old ReplicaSets beyond
    /// `revisionHistoryLimit`, skipping any that still have pods, are being deleted, or whose
    /// status is not up to date.
    pub(crate) async fn cleanup_deployment(
        &self,
        old_rss: &[ReplicaSet],
        d: &Deployment,
    ) -> Result<(), ReconcileError> {
        if !has_revision_history_limit(d) {
            return Ok(());
        }
        let limit = d.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10);
        let mut cleanable: Vec<&ReplicaSet> =
            old_rss.iter().filter(|rs| rs.metadata.deletion_timestamp.is_none()).collect();
        let diff = cleanable.len() as i32 - limit;
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| by_revision(a, b));
        for rs in cleanable.into_iter().take(diff as usize) {
            let status = rs.status.clone().unwrap_or_default();
            if status.replicas != 0
                || rs_replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > status.observed_generation.unwrap_or(0)
                || rs.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            tracing::debug!(replicaset = %name_of(&rs.metadata), "trying to cleanup replica set for deployment");
            match self
                .api
                .delete_typed::<ReplicaSet>(
                    rs.metadata.namespace.as_deref(),
                    name_of(&rs.metadata),
                    &DeleteOptions::default(),
                )
                .await
            {
                Ok(()) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// `syncDeploymentStatus`: writes the computed status if it differs.
    pub(crate) async fn sync_deployment_status(
        &self,
        all: &[&ReplicaSet],
        new_rs: Option<&ReplicaSet>,
        d: &mut Deployment,
    ) -> Result<(), ReconcileError> {
        let new_status = calculate_status(all, new_rs, d, self.now());
        if normalize_status(d.status.clone().unwrap_or_default()) == new_status {
            return Ok(());
        }
        d.status = Some(new_status);
        self.update_deployment_status(d).await?;
        Ok(())
    }

    /// `isScalingEvent`: an active ReplicaSet was sized for a different `spec.replicas` (its
    /// desired-replicas annotation), i.e. the Deployment was scaled.
    pub(crate) async fn is_scaling_event(
        &self,
        d: &mut Deployment,
        rs_list: &mut Vec<ReplicaSet>,
    ) -> Result<bool, ReconcileError> {
        let (new_rs, old_rss) = self.get_all_replica_sets_and_sync_revision(d, rs_list, false).await?;
        let r = replicas(d);
        Ok(filter_active(old_rss.iter().chain(new_rs.as_ref()))
            .into_iter()
            .filter_map(desired_replicas_annotation)
            .any(|desired| desired != r))
    }
}

/// Puts `updated` in place of the ReplicaSet with the same uid.
pub(crate) fn replace_rs(new_rs: &mut Option<ReplicaSet>, old_rss: &mut [ReplicaSet], updated: ReplicaSet) {
    if let Some(n) = new_rs.as_mut()
        && n.metadata.uid == updated.metadata.uid
    {
        *n = updated;
        return;
    }
    if let Some(o) = old_rss.iter_mut().find(|o| o.metadata.uid == updated.metadata.uid) {
        *o = updated;
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;
    use super::*;
    use skiff_runtime::api::ApiError;

    /// A Deployment scaled from 10 to `to` replicas mid-rollout, old RS at 8 and new at 5,
    /// both sized for 10 (max 13).
    async fn scaled_mid_rollout(to: i32) -> Fixture {
        let f = Fixture::new();
        let d10 = f.deployment("web", 10, "25%", "25%");
        let old = f.old_rs(&d10, "old", 8, 8, 1);
        let new = f.new_rs(&d10, "new", 5, 0, 2);
        let mut d = d10.clone();
        d.spec.as_mut().unwrap().replicas = Some(to);
        f.seed_deployment(&d);
        f.seed_rs(&old);
        f.seed_rs(&new);
        f.sync("ns/web").await.unwrap();
        f
    }

    #[tokio::test]
    async fn scaling_up_mid_rollout_is_proportional() {
        // Allowed 20 + 5 = 25, current 13: +12 split 7 (old: round(8*25/13) - 8) and 5.
        let f = scaled_mid_rollout(20).await;
        assert_eq!(f.scales(), ["old:15", "new:10"]);
        assert!(
            f.events().contains(&"Normal ScalingReplicaSet Scaled up replica set web-old from 8 to 15".to_string())
        );
        let updates = f.rs_updates();
        assert!(
            updates.iter().all(|u| u["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] == "20")
        );
        assert!(updates.iter().all(|u| u["metadata"]["annotations"]["deployment.kubernetes.io/max-replicas"] == "25"));
    }

    #[tokio::test]
    async fn scaling_down_mid_rollout_is_proportional() {
        // Allowed 5 + 2 = 7, current 13: -6 split -4 (old: round(8*7/13) - 8) and -2.
        let f = scaled_mid_rollout(5).await;
        assert_eq!(f.scales(), ["old:4", "new:3"]);
        assert!(
            f.events().contains(&"Normal ScalingReplicaSet Scaled down replica set web-old from 8 to 4".to_string())
        );
    }

    #[tokio::test]
    async fn scaling_a_settled_deployment_scales_its_only_active_replica_set() {
        let f = Fixture::new();
        let d3 = f.deployment("web", 3, "25%", "25%");
        let rs = f.new_rs(&d3, "new", 3, 3, 1);
        let mut d = d3.clone();
        d.spec.as_mut().unwrap().replicas = Some(6);
        f.seed_deployment(&d);
        f.seed_rs(&rs);
        f.sync("ns/web").await.unwrap();
        assert_eq!(f.scales(), ["new:6"]);
    }

    #[tokio::test]
    async fn history_cleanup_skips_replica_sets_that_still_have_pods() {
        let f = Fixture::new();
        let mut d = f.deployment("web", 2, "25%", "25%");
        d.spec.as_mut().unwrap().revision_history_limit = Some(0);
        d.spec.as_mut().unwrap().paused = Some(true);
        let new = f.new_rs(&d, "new", 2, 2, 4);
        let r1 = f.old_rs(&d, "r1", 0, 0, 1);
        let mut r2 = f.old_rs(&d, "r2", 0, 0, 2);
        r2.status.as_mut().unwrap().replicas = 1;
        let mut r3 = f.old_rs(&d, "r3", 0, 0, 3);
        r3.metadata.generation = Some(2);
        for rs in [&new, &r1, &r2, &r3] {
            f.seed_rs(rs);
        }
        f.seed_deployment(&d);
        f.sync("ns/web").await.unwrap();
        // r2 still has a pod, r3's status is stale: only r1 goes.
        assert_eq!(f.deleted_rss(), ["web-r1"]);
    }

    #[tokio::test]
    async fn a_hash_collision_bumps_the_collision_count() {
        let f = Fixture::new();
        let d = f.deployment("web", 2, "25%", "25%");
        let hash = compute_hash(&d_template(&d), None);
        let mut foreign = f.new_rs(&d, &hash, 0, 0, 1);
        foreign.metadata.owner_references = None;
        foreign.metadata.labels = Some([("other".to_string(), "x".to_string())].into());
        set_image(foreign.spec.as_mut().unwrap().template.as_mut().unwrap(), "busybox");
        f.seed_deployment(&d);
        f.seed_rs(&foreign);
        let err = f.sync("ns/web").await.unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        let status = f.deployment_status_updates().pop().expect("status written");
        assert_eq!(status["status"]["collisionCount"], 1);
        // The next attempt hashes with the collision count: a different name.
        assert_ne!(compute_hash(&d_template(&d), Some(1)), hash);
        let _ = ApiError::internal("unused");
    }

    #[tokio::test]
    async fn a_new_deployment_gets_the_revision_of_its_first_replica_set() {
        let f = Fixture::new();
        let d = f.deployment("web", 2, "25%", "25%");
        f.seed_deployment(&d);
        f.sync("ns/web").await.unwrap();
        let created = f.created_rs_opt().expect("replica set created");
        assert_eq!(created["metadata"]["annotations"][REVISION_ANNOTATION], "1");
        let status = f.deployment_status_updates().into_iter().next().expect("status written");
        assert_eq!(status["metadata"]["annotations"][REVISION_ANNOTATION], "1");
    }

    #[tokio::test]
    async fn an_empty_selector_is_refused_with_an_event() {
        let f = Fixture::new();
        let mut d = f.deployment("web", 2, "25%", "25%");
        d.spec.as_mut().unwrap().selector = Default::default();
        f.seed_deployment(&d);
        f.sync("ns/web").await.unwrap();
        assert_eq!(
            f.events(),
            ["Warning SelectingAll This deployment is selecting all pods. A non-empty selector is required."]
        );
        assert!(f.created_rs_opt().is_none());
        assert_eq!(f.deployment_status_updates()[0]["status"]["observedGeneration"], 1);
    }
}
