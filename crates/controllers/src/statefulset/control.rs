//! `StatefulSetControl` (`stateful_set_control.go`): one sync of a StatefulSet against its
//! pods.
//!
//! 1. Revisions: the set's template as a ControllerRevision (`updateRevision`); an equal older
//!    revision is reused (a rollback bumps its number), otherwise a new one is created. The
//!    revision the status names as current stays `currentRevision`.
//! 2. Pods are split into replicas (ordinals `start … start+replicas-1`, missing ones made from
//!    the current revision below the partition and the update revision above) and condemned
//!    (other ordinals, highest first).
//! 3. Replicas: failed or succeeded pods are deleted (recreated next sync), missing ones created
//!    with their claims, identity and storage repaired. OrderedReady (monotonic) stops at the
//!    first pod not created, Running, Ready and available; Parallel (burst) acts on all.
//! 4. Condemned pods: their claims get the scale-down owner references, then they are deleted
//!    (OrderedReady: one at a time, highest ordinal first, only once every replica is healthy).
//! 5. RollingUpdate: pods above the partition not at the update revision are deleted, highest
//!    ordinal first, at most `maxUnavailable` unavailable at once; OnDelete leaves them.
//! 6. Status (counts, revisions, collisionCount); a finished rolling update makes the update
//!    revision current. Unreferenced revisions beyond `revisionHistoryLimit` are deleted.
//!
//! `maxUnavailable` is honoured as with Kubernetes' MaxUnavailableStatefulSet feature enabled;
//! unset, it is 1, which is what Kubernetes does without the feature.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use skiff_apimachinery::LabelSelector;

use super::pod_control::StatefulPodControl;
use super::utils::{
    allows_burst, apply_revision, identity_matches, is_created, is_failed, is_healthy, is_pending,
    is_running_and_available, is_running_and_ready, is_succeeded, is_terminating, min_ready_seconds, new_revision,
    new_stateful_set_pod, next_revision, ordinal_of, pod_in_ordinal_range, pod_revision, replicas, set_pod_revision,
    start_ordinal, storage_matches, update_strategy_type,
};
use crate::deployment::util::scaled_value_from_int_or_percent;
use crate::history::{History, equal_revision, find_equal_revisions, sort_controller_revisions};
use crate::util::{Clock, controller_of, labels_of, name_of, uid_of};
use skiff_runtime::api::{ApiClient, ApiClientExt, ApiError, is_conflict, is_not_found};
use skiff_runtime::informer::Informer;

/// Most status writes per sync when the set keeps changing underneath (`retry.DefaultRetry`).
const STATUS_UPDATE_ATTEMPTS: usize = 5;

/// The sync of one StatefulSet (`defaultStatefulSetControl`).
pub struct StatefulSetControl {
    pub(super) api: Arc<dyn ApiClient>,
    pub(super) pod_control: StatefulPodControl,
    pub(super) history: History,
    pub(super) revisions: Arc<Informer<ControllerRevision>>,
    pub(super) clock: Clock,
}

/// `runForAll`: calls `f` on each index. Monotonic: in order, stopping at the first that asks
/// to stop (`Ok(true)`) or fails. Burst: concurrently in slow-start batches (1, 2, 4, …),
/// stopping after a batch with a failure. `Ok(true)` means "stop this sync here".
async fn run_for_all<F, Fut>(n: usize, monotonic: bool, f: F) -> Result<bool, ApiError>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<bool, ApiError>>,
{
    if monotonic {
        for i in 0..n {
            if f(i).await? {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    let (mut next, mut batch) = (0, 1);
    while next < n {
        let end = (next + batch).min(n);
        let results = futures::future::join_all((next..end).map(&f)).await;
        if let Some(e) = results.into_iter().find_map(Result::err) {
            return Err(e);
        }
        next = end;
        batch *= 2;
    }
    Ok(false)
}

/// `newVersionedStatefulSetPod`: a missing replica is made from the current revision when it
/// lies below the partition (or, without a rollingUpdate block, among the current replicas),
/// otherwise from the update revision.
fn new_versioned_stateful_set_pod(
    current_set: &StatefulSet,
    update_set: &StatefulSet,
    current_revision: &str,
    update_revision: &str,
    ordinal: i32,
) -> Pod {
    let strategy = current_set.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    let rolling_update = strategy.and_then(|s| s.rolling_update.as_ref());
    let start = start_ordinal(current_set);
    let current_replicas = current_set.status.as_ref().and_then(|s| s.current_replicas).unwrap_or(0);
    // Kubernetes' condition, grouping included: (RollingUpdate && no block && below current) ||
    // (block && below partition).
    let from_current = (update_strategy_type(current_set) == "RollingUpdate"
        && rolling_update.is_none()
        && ordinal < start + current_replicas)
        || rolling_update.is_some_and(|ru| ordinal < start + ru.partition.unwrap_or(0));
    let (set, revision) = if from_current { (current_set, current_revision) } else { (update_set, update_revision) };
    let mut pod = new_stateful_set_pod(set, ordinal);
    set_pod_revision(&mut pod, revision);
    pod
}

/// `updateStatus`: replicas, ready, available, current and updated counts over `lists`.
fn update_status(
    status: &mut StatefulSetStatus,
    min_ready_seconds: i32,
    current: &str,
    update: &str,
    now: Timestamp,
    lists: &[&[Arc<Pod>]],
) {
    let (mut replicas, mut ready, mut available, mut current_n, mut updated) = (0, 0, 0, 0, 0);
    for pod in lists.iter().flat_map(|l| l.iter()) {
        if is_created(pod) {
            replicas += 1;
        }
        if is_running_and_ready(pod) {
            ready += 1;
            if is_running_and_available(pod, min_ready_seconds, now) {
                available += 1;
            }
        }
        if is_created(pod) && !is_terminating(pod) {
            let revision = pod_revision(pod);
            if revision == current {
                current_n += 1;
            }
            if revision == update {
                updated += 1;
            }
        }
    }
    status.replicas = replicas;
    status.ready_replicas = Some(ready);
    status.available_replicas = Some(available);
    status.current_replicas = Some(current_n);
    status.updated_replicas = Some(updated);
}

/// `inconsistentStatus`: whether `status` differs from what the set reports.
fn inconsistent_status(set: &StatefulSet, status: &StatefulSetStatus) -> bool {
    let old = set.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    status.observed_generation.unwrap_or(0) > old.observed_generation.unwrap_or(0)
        || status.replicas != old.replicas
        || n(status.current_replicas) != n(old.current_replicas)
        || n(status.ready_replicas) != n(old.ready_replicas)
        || n(status.updated_replicas) != n(old.updated_replicas)
        || status.current_revision.as_deref().unwrap_or_default() != old.current_revision.as_deref().unwrap_or_default()
        || n(status.available_replicas) != n(old.available_replicas)
        || status.update_revision.as_deref().unwrap_or_default() != old.update_revision.as_deref().unwrap_or_default()
}

/// `completeRollingUpdate`: once every replica is updated and ready, the update revision becomes
/// the current one.
fn complete_rolling_update(set: &StatefulSet, status: &mut StatefulSetStatus) {
    if update_strategy_type(set) == "RollingUpdate"
        && status.updated_replicas.unwrap_or(0) == status.replicas
        && status.ready_replicas.unwrap_or(0) == status.replicas
    {
        status.current_replicas = status.updated_replicas;
        status.current_revision = status.update_revision.clone();
    }
}

/// `getStatefulSetMaxUnavailable`: `maxUnavailable` of the replicas, rounded down, at least 1.
fn max_unavailable(set: &StatefulSet, replica_count: i32) -> Result<i32, ApiError> {
    let value = set
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.max_unavailable.clone())
        .unwrap_or(IntOrString::Int(1));
    let n = scaled_value_from_int_or_percent(&value, replica_count, false).map_err(ApiError::bad_request)?;
    Ok(n.max(1))
}

impl StatefulSetControl {
    /// `ListRevisions`: the cached revisions in the set's namespace matching its selector that
    /// it controls or nobody does.
    pub fn list_revisions(&self, set: &StatefulSet, selector: &LabelSelector) -> Vec<ControllerRevision> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        self.revisions
            .store()
            .list_namespace(ns)
            .into_iter()
            .filter(|r| selector.matches(&labels_of(&r.metadata)))
            .filter(|r| controller_of(&r.metadata).is_none_or(|c| c.uid == uid_of(&set.metadata)))
            .map(|r| (*r).clone())
            .collect()
    }

    /// `UpdateStatefulSet`: the whole sync (module docs); returns the status written.
    ///
    /// # Errors
    /// The first failed write; the status is still written when the pods' step failed.
    pub async fn update_stateful_set(
        &self,
        set: &StatefulSet,
        selector: &LabelSelector,
        pods: &[Arc<Pod>],
    ) -> Result<StatefulSetStatus, ApiError> {
        let mut revisions = self.list_revisions(set, selector);
        sort_controller_revisions(&mut revisions);
        let (current, update, collision_count) = self.get_stateful_set_revisions(set, &revisions).await?;
        let (mut status, pods_result) =
            self.update_stateful_set_pods(set, &current, &update, collision_count, pods).await;
        let status_result = self.update_stateful_set_status(set, &mut status).await;
        let truncate_result = self.truncate_history(set, pods, &revisions, &current, &update).await;
        pods_result?;
        status_result?;
        truncate_result?;
        Ok(status)
    }

    /// `getStatefulSetRevisions`: (current, update, collision count).
    async fn get_stateful_set_revisions(
        &self,
        set: &StatefulSet,
        revisions: &[ControllerRevision],
    ) -> Result<(ControllerRevision, ControllerRevision, i32), ApiError> {
        let mut collision_count = set.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0);
        let wanted = new_revision(set, next_revision(revisions), collision_count);
        let equal = find_equal_revisions(revisions, &wanted);
        let update = match (equal.last(), revisions.last()) {
            // The newest revision already is this template.
            (Some(eq), Some(last)) if equal_revision(last, eq) => last.clone(),
            // An older revision is: roll back to it by making it the newest.
            (Some(eq), _) => self.history.update_controller_revision(eq, wanted.revision).await?,
            (None, _) => self.history.create_controller_revision(&set.metadata, &wanted, &mut collision_count).await?,
        };
        let current_name = set.status.as_ref().and_then(|s| s.current_revision.as_deref()).unwrap_or_default();
        let current =
            revisions.iter().find(|r| name_of(&r.metadata) == current_name).cloned().unwrap_or_else(|| update.clone());
        Ok((current, update, collision_count))
    }

    /// `updateStatefulSet`: steps 2–5 of the module docs. Returns the status and the first
    /// error.
    async fn update_stateful_set_pods(
        &self,
        set: &StatefulSet,
        current: &ControllerRevision,
        update: &ControllerRevision,
        collision_count: i32,
        pods: &[Arc<Pod>],
    ) -> (StatefulSetStatus, Result<(), ApiError>) {
        let now = (self.clock)();
        let min_ready = min_ready_seconds(set);
        let current_set = apply_revision(set, current);
        let update_set = apply_revision(set, update);
        let (current_name, update_name) = (name_of(&current.metadata), name_of(&update.metadata));
        let mut status = StatefulSetStatus {
            observed_generation: set.metadata.generation,
            current_revision: Some(current_name.to_string()),
            update_revision: Some(update_name.to_string()),
            collision_count: Some(collision_count),
            ..Default::default()
        };
        update_status(&mut status, min_ready, current_name, update_name, now, &[pods]);

        let start = start_ordinal(set);
        let mut slots: Vec<Option<Arc<Pod>>> = vec![None; replicas(set).max(0) as usize];
        let mut condemned = Vec::new();
        for pod in pods {
            if pod_in_ordinal_range(pod, set) {
                slots[(ordinal_of(pod) - start) as usize] = Some(pod.clone());
            } else if ordinal_of(pod) >= 0 {
                condemned.push(pod.clone());
            }
        }
        let replicas: Vec<Arc<Pod>> = slots
            .into_iter()
            .enumerate()
            .map(|(i, pod)| {
                pod.unwrap_or_else(|| {
                    let ordinal = start + i as i32;
                    Arc::new(new_versioned_stateful_set_pod(
                        &current_set,
                        &update_set,
                        current_name,
                        update_name,
                        ordinal,
                    ))
                })
            })
            .collect();
        condemned.sort_by_key(|p| std::cmp::Reverse(ordinal_of(p)));
        // The first unhealthy pod: the lowest replica, else the lowest condemned one.
        let first_unhealthy = replicas
            .iter()
            .chain(condemned.iter().rev())
            .find(|p| !is_healthy(p))
            .map(|p| name_of(&p.metadata).to_string());

        if set.metadata.deletion_timestamp.is_some() {
            return (status, Ok(()));
        }
        let monotonic = !allows_burst(set);
        let finish = |status: &mut StatefulSetStatus| {
            update_status(status, min_ready, current_name, update_name, now, &[&replicas, &condemned]);
        };

        let process_replica = |i: usize| self.process_replica(set, &update_set, monotonic, &replicas[i], now);
        match run_for_all(replicas.len(), monotonic, process_replica).await {
            Ok(false) => {}
            other => {
                finish(&mut status);
                return (status, other.map(|_| ()));
            }
        }

        // Claims of scaled-down pods get their owner references before the pods go.
        let (condemned_ref, update_ref) = (&condemned, &update_set);
        let fix_claims = |i: usize| async move {
            let pod = &condemned_ref[i];
            if !self.pod_control.claims_match_retention_policy(update_ref, pod) {
                self.pod_control.update_pod_claim_for_retention_policy(update_ref, pod).await?;
            }
            Ok::<bool, ApiError>(false)
        };
        if let Err(e) = run_for_all(condemned.len(), monotonic, fix_claims).await {
            finish(&mut status);
            return (status, Err(e));
        }

        let first = first_unhealthy.as_deref();
        let process_condemned = |i: usize| self.process_condemned(set, first, monotonic, &condemned[i], now);
        match run_for_all(condemned.len(), monotonic, process_condemned).await {
            Ok(false) => {}
            other => {
                finish(&mut status);
                return (status, other.map(|_| ()));
            }
        }
        finish(&mut status);

        if update_strategy_type(set) == "OnDelete" {
            return (status, Ok(()));
        }
        let result = self.rolling_update(set, &replicas, update_name, &mut status).await;
        (status, result)
    }

    /// `processReplica`: `Ok(true)` stops the sync here.
    async fn process_replica(
        &self,
        set: &StatefulSet,
        update_set: &StatefulSet,
        monotonic: bool,
        pod: &Pod,
        now: Timestamp,
    ) -> Result<bool, ApiError> {
        if is_failed(pod) || is_succeeded(pod) {
            // Whatever the exit code, a finished replica is replaced; its successor is created
            // once the old pod is gone.
            if pod.metadata.deletion_timestamp.is_none() {
                self.pod_control.delete_stateful_pod(set, pod).await?;
            }
            return Ok(true);
        }
        if !is_created(pod) {
            if self.pod_control.pod_claim_is_stale(set, pod) {
                return Ok(true);
            }
            self.pod_control.create_stateful_pod(set, pod).await?;
            return Ok(monotonic);
        }
        if is_pending(pod) {
            self.pod_control.create_missing_persistent_volume_claims(set, pod).await?;
        }
        if monotonic
            && (is_terminating(pod)
                || !is_running_and_ready(pod)
                || !is_running_and_available(pod, min_ready_seconds(set), now))
        {
            return Ok(true);
        }
        let retention_match = self.pod_control.claims_match_retention_policy(update_set, pod);
        if identity_matches(set, pod) && storage_matches(set, pod) && retention_match {
            return Ok(false);
        }
        self.pod_control.update_stateful_pod(update_set, pod).await?;
        Ok(false)
    }

    /// `processCondemned`: deletes a scaled-away pod; monotonic waits for terminating pods and,
    /// unless this pod is the first unhealthy one, for it to be available.
    async fn process_condemned(
        &self,
        set: &StatefulSet,
        first_unhealthy: Option<&str>,
        monotonic: bool,
        pod: &Pod,
        now: Timestamp,
    ) -> Result<bool, ApiError> {
        if is_terminating(pod) {
            return Ok(monotonic);
        }
        let is_first_unhealthy = first_unhealthy == Some(name_of(&pod.metadata));
        if monotonic
            && !is_first_unhealthy
            && (!is_running_and_ready(pod) || !is_running_and_available(pod, min_ready_seconds(set), now))
        {
            return Ok(true);
        }
        self.pod_control.delete_stateful_pod(set, pod).await?;
        Ok(true)
    }

    /// `updateStatefulSetAfterInvariantEstablished`: deletes up to `maxUnavailable` minus the
    /// unavailable replicas among the pods at or above the partition that are not at the update
    /// revision, highest ordinal first.
    async fn rolling_update(
        &self,
        set: &StatefulSet,
        replicas: &[Arc<Pod>],
        update_revision: &str,
        status: &mut StatefulSetStatus,
    ) -> Result<(), ApiError> {
        let partition = set
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition)
            .unwrap_or(0)
            .max(0) as usize;
        let max_unavailable = max_unavailable(set, replicas.len() as i32)? as usize;
        let unavailable = replicas.iter().filter(|p| !is_healthy(p)).count();
        if unavailable >= max_unavailable {
            return Ok(());
        }
        let mut to_delete = max_unavailable - unavailable;
        for pod in replicas.iter().skip(partition).rev() {
            if to_delete == 0 {
                break;
            }
            if pod_revision(pod) != update_revision && !is_terminating(pod) {
                match self.pod_control.delete_stateful_pod(set, pod).await {
                    Err(e) if !is_not_found(&e) => return Err(e),
                    _ => {}
                }
                to_delete -= 1;
                status.current_replicas = Some(status.current_replicas.unwrap_or(0) - 1);
            }
        }
        Ok(())
    }

    /// `updateStatefulSetStatus`: completes a finished rolling update, then writes the status
    /// if it changed, re-reading the set on conflicts.
    async fn update_stateful_set_status(
        &self,
        set: &StatefulSet,
        status: &mut StatefulSetStatus,
    ) -> Result<(), ApiError> {
        complete_rolling_update(set, status);
        if !inconsistent_status(set, status) {
            return Ok(());
        }
        let mut current = set.clone();
        for attempt in 1..=STATUS_UPDATE_ATTEMPTS {
            current.status = Some(status.clone());
            match self.api.update_status_typed(&current).await {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) && attempt < STATUS_UPDATE_ATTEMPTS => {
                    current = self.api.get_typed(set.metadata.namespace.as_deref(), name_of(&set.metadata)).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `truncateHistory`: deletes the oldest revisions no pod, nor the current or update
    /// revision, uses, beyond `revisionHistoryLimit` (10).
    async fn truncate_history(
        &self,
        set: &StatefulSet,
        pods: &[Arc<Pod>],
        revisions: &[ControllerRevision],
        current: &ControllerRevision,
        update: &ControllerRevision,
    ) -> Result<(), ApiError> {
        let mut live: HashSet<&str> = pods.iter().map(|p| pod_revision(p)).collect();
        live.insert(name_of(&current.metadata));
        live.insert(name_of(&update.metadata));
        let old: Vec<&ControllerRevision> = revisions.iter().filter(|r| !live.contains(name_of(&r.metadata))).collect();
        let limit = set.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10).max(0) as usize;
        if old.len() <= limit {
            return Ok(());
        }
        for r in &old[..old.len() - limit] {
            self.history.delete_controller_revision(r).await?;
        }
        Ok(())
    }
}
