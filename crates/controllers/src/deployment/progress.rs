//! Rollout progress (`progress.go`): the Progressing condition and
//! `progressDeadlineSeconds`.
//!
//! While a rollout makes progress (more updated/ready/available pods, fewer old ones) the
//! condition is `Progressing=True ReplicaSetUpdated` with a fresh `lastUpdateTime`; once
//! complete it is `NewReplicaSetAvailable`; if `lastUpdateTime` is older than the deadline it
//! becomes `Progressing=False ProgressDeadlineExceeded`, which `kubectl rollout status` reports
//! as a failure. Because nothing happens on the cluster when a rollout is stuck, the
//! Deployment is re-queued for the moment the deadline would pass.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::jiff::Timestamp;

use super::DeploymentController;
use super::sync::calculate_status;
use super::util::*;
use crate::util::name_of;
use skiff_runtime::controller::{Action, ReconcileResult};

/// `getReplicaFailures`: the ReplicaFailure conditions of the new ReplicaSet, or else of any
/// ReplicaSet, as Deployment conditions.
pub fn replica_failures(all: &[&ReplicaSet], new_rs: Option<&ReplicaSet>) -> Vec<DeploymentCondition> {
    let convert = |rs: &ReplicaSet| -> Vec<DeploymentCondition> {
        rs.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .filter(|c| c.type_ == DEPLOYMENT_REPLICA_FAILURE)
            .map(|c| DeploymentCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time.clone(),
                last_update_time: c.last_transition_time.clone(),
            })
            .collect()
    };
    if let Some(rs) = new_rs {
        let found = convert(rs);
        if !found.is_empty() {
            return found;
        }
    }
    all.iter().flat_map(|rs| convert(rs)).collect()
}

/// `syncRolloutStatus`'s status computation: [`calculate_status`] plus the Progressing and
/// ReplicaFailure conditions.
pub fn rollout_status(
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    d: &Deployment,
    now: Timestamp,
) -> DeploymentStatus {
    let mut status = calculate_status(all, new_rs, d, now);
    if !has_progress_deadline(d) {
        remove_condition(&mut status, DEPLOYMENT_PROGRESSING);
    }
    let current = d.status.as_ref().and_then(|s| get_condition(s, DEPLOYMENT_PROGRESSING)).cloned();
    let is_complete = status.replicas == status.updated_replicas
        && current.as_ref().is_some_and(|c| c.reason.as_deref() == Some(reasons::NEW_RS_AVAILABLE_REASON));
    if has_progress_deadline(d) && !is_complete {
        let name = |suffix: &str| match new_rs {
            Some(rs) => format!("ReplicaSet {:?} {suffix}", name_of(&rs.metadata)),
            None => format!("Deployment {:?} {suffix}", name_of(&d.metadata)),
        };
        if deployment_complete(d, &status) {
            let msg = name("has successfully progressed.");
            set_condition(
                &mut status,
                new_condition(DEPLOYMENT_PROGRESSING, "True", reasons::NEW_RS_AVAILABLE_REASON, &msg, now),
            );
        } else if deployment_progressing(d, &status) {
            let msg = name("is progressing.");
            let mut cond =
                new_condition(DEPLOYMENT_PROGRESSING, "True", reasons::REPLICA_SET_UPDATED_REASON, &msg, now);
            // Progress refreshes lastUpdateTime even with an unchanged reason; the transition
            // time only moves if the status changes.
            if let Some(cur) = &current {
                if cur.status == "True" {
                    cond.last_transition_time = cur.last_transition_time.clone();
                }
                remove_condition(&mut status, DEPLOYMENT_PROGRESSING);
            }
            set_condition(&mut status, cond);
        } else if deployment_timed_out(d, &status, now) {
            let msg = name("has timed out progressing.");
            set_condition(
                &mut status,
                new_condition(DEPLOYMENT_PROGRESSING, "False", reasons::TIMED_OUT_REASON, &msg, now),
            );
        }
    }
    match replica_failures(all, new_rs).into_iter().next() {
        Some(failure) => set_condition(&mut status, failure),
        None => remove_condition(&mut status, DEPLOYMENT_REPLICA_FAILURE),
    }
    normalize_status(status)
}

/// `requeueStuckDeployment`: when the rollout is neither complete nor timed out and shows no
/// progress, the time until its deadline passes (`lastUpdateTime + progressDeadlineSeconds -
/// now`), so it is re-checked then. `None`: nothing to check.
///
/// Worked numbers: Progressing updated at 00:00:00, deadline 600 s, now 00:03:00 → check again
/// in 7 minutes. Less than a second left → check again at once (rate limited).
pub fn requeue_stuck_deployment(d: &Deployment, new_status: &DeploymentStatus, now: Timestamp) -> Option<Action> {
    let current = d.status.as_ref().and_then(|s| get_condition(s, DEPLOYMENT_PROGRESSING))?;
    if !has_progress_deadline(d)
        || deployment_complete(d, new_status)
        || current.reason.as_deref() == Some(reasons::TIMED_OUT_REASON)
    {
        return None;
    }
    let updated = current.last_update_time.as_ref()?.0;
    let deadline = i64::from(d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).unwrap_or(600));
    let after_ms = (updated.as_millisecond() + deadline * 1000) - now.as_millisecond();
    if after_ms < 1000 {
        return Some(Action::RequeueRateLimited);
    }
    Some(Action::RequeueAfter(Duration::from_millis(after_ms as u64)))
}

impl DeploymentController {
    /// `syncRolloutStatus`: writes the rollout status if it changed; otherwise re-queues a
    /// possibly stuck rollout for its deadline.
    pub(crate) async fn sync_rollout_status(
        &self,
        all: &[&ReplicaSet],
        new_rs: Option<&ReplicaSet>,
        d: &mut Deployment,
    ) -> ReconcileResult {
        let now = self.now();
        let new_status = rollout_status(all, new_rs, d, now);
        if normalize_status(d.status.clone().unwrap_or_default()) == new_status {
            return Ok(requeue_stuck_deployment(d, &new_status, now).unwrap_or(Action::AwaitChange));
        }
        d.status = Some(new_status);
        self.update_deployment_status(d).await?;
        Ok(Action::AwaitChange)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;
    use super::*;
    use crate::util::{add_seconds, time};

    #[tokio::test]
    async fn a_stuck_rollout_times_out_after_the_progress_deadline() {
        let f = Fixture::new();
        let mut d = f.deployment("web", 2, "0", "1");
        d.spec.as_mut().unwrap().progress_deadline_seconds = Some(60);
        let started = add_seconds(now(), -61);
        // Progressing since 61 s ago, nothing available since: the new pods never get ready.
        d.status = Some(DeploymentStatus {
            observed_generation: Some(1),
            replicas: Some(2),
            updated_replicas: Some(1),
            ready_replicas: Some(1),
            available_replicas: Some(1),
            unavailable_replicas: Some(1),
            conditions: Some(vec![
                new_condition(
                    DEPLOYMENT_AVAILABLE,
                    "True",
                    reasons::MINIMUM_REPLICAS_AVAILABLE,
                    "Deployment has minimum availability.",
                    started,
                ),
                new_condition(
                    DEPLOYMENT_PROGRESSING,
                    "True",
                    reasons::REPLICA_SET_UPDATED_REASON,
                    "ReplicaSet \"web-new\" is progressing.",
                    started,
                ),
            ]),
            ..Default::default()
        });
        let old = f.old_rs(&d, "old", 1, 1, 1);
        let new = f.new_rs(&d, "new", 1, 0, 2);
        f.seed_deployment(&d);
        f.seed_rs(&old);
        f.seed_rs(&new);
        f.sync("ns/web").await.unwrap();
        let status = f.deployment_status_updates().pop().expect("status written")["status"].clone();
        let cond =
            status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").unwrap().clone();
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "ProgressDeadlineExceeded");
        assert_eq!(cond["message"], "ReplicaSet \"web-new\" has timed out progressing.");
    }

    #[test]
    fn a_rollout_without_progress_is_requeued_for_its_deadline() {
        let mut d = Fixture::new().deployment("web", 2, "25%", "25%");
        d.spec.as_mut().unwrap().progress_deadline_seconds = Some(600);
        let three_minutes_ago = add_seconds(now(), -180);
        d.status = Some(DeploymentStatus {
            conditions: Some(vec![new_condition(
                DEPLOYMENT_PROGRESSING,
                "True",
                reasons::REPLICA_SET_UPDATED_REASON,
                "m",
                three_minutes_ago,
            )]),
            ..Default::default()
        });
        let incomplete = DeploymentStatus { replicas: Some(2), updated_replicas: Some(1), ..Default::default() };
        assert_eq!(
            requeue_stuck_deployment(&d, &incomplete, now()),
            Some(Action::RequeueAfter(Duration::from_secs(420)))
        );
        assert_eq!(
            requeue_stuck_deployment(&d, &incomplete, add_seconds(now(), 420)),
            Some(Action::RequeueRateLimited)
        );
        let complete = DeploymentStatus {
            replicas: Some(2),
            updated_replicas: Some(2),
            available_replicas: Some(2),
            observed_generation: Some(1),
            ..Default::default()
        };
        assert_eq!(requeue_stuck_deployment(&d, &complete, now()), None);
        let _ = time(now());
    }

    #[tokio::test]
    async fn pause_and_resume_set_progressing_unknown() {
        let f = Fixture::new();
        let mut d = f.deployment("web", 2, "25%", "25%");
        d.spec.as_mut().unwrap().paused = Some(true);
        let rs = f.new_rs(&d, "new", 2, 2, 1);
        f.seed_deployment(&d);
        f.seed_rs(&rs);
        f.sync("ns/web").await.unwrap();
        let first = f.deployment_status_updates()[0]["status"].clone();
        let cond = first["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").unwrap().clone();
        assert_eq!(cond["status"], "Unknown");
        assert_eq!(cond["reason"], "DeploymentPaused");
        assert_eq!(cond["message"], "Deployment is paused");

        // Resume.
        f.refresh_deployment_from_api("web");
        let mut resumed: Deployment = f.api.object_typed(Some("ns"), "web").unwrap();
        resumed.spec.as_mut().unwrap().paused = Some(false);
        f.seed_deployment(&resumed);
        f.sync("ns/web").await.unwrap();
        let first = f.deployment_status_updates()[0]["status"].clone();
        let cond = first["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").unwrap().clone();
        assert_eq!(cond["reason"], "DeploymentResumed");
    }
}
