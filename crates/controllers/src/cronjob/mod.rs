//! The CronJob controller (`pkg/controller/cronjob/cronjob_controllerv2.go`): creates a Job
//! for each schedule time of a CronJob, and keeps `status.active`, `lastScheduleTime` and
//! `lastSuccessfulTime`.
//!
//! A sync (`sync` → `cleanup_finished_jobs` → `sync_cron_job`), on the Jobs the CronJob controls:
//! 1. Finished Jobs beyond `successfulJobsHistoryLimit`/`failedJobsHistoryLimit` are deleted,
//!    oldest start first.
//! 2. The active list is reconciled with the Jobs: finished ones leave it (`SawCompletedJob`),
//!    a succeeded one moves `lastSuccessfulTime`, an unfinished Job missing from it is reported
//!    (`UnexpectedJob`), a listed Job gone from the API is dropped (`MissingJob`).
//! 3. Unless the CronJob is being deleted, suspended, or has an unknown time zone or an
//!    unparseable schedule (warning events), the most recent unmet schedule time (in
//!    `spec.timeZone`) is found from `lastScheduleTime` (else the creation time), no earlier
//!    than `startingDeadlineSeconds` ago; more than 100 missed times warn
//!    (`TooManyMissedTimes`) and only the most recent one runs. A time already past its
//!    starting deadline is skipped (`MissSchedule`), one already run is not run again, and
//!    `concurrencyPolicy` decides about active Jobs: Allow runs beside them, Forbid waits
//!    (`JobAlreadyActive`), Replace deletes them first.
//! 4. The Job is created from the template, named `<cronjob>-<minutes since the epoch>` and
//!    annotated with its scheduled time: a controller restarted between the create and the
//!    status write meets its own Job (409 AlreadyExists) and records it instead of running the
//!    time twice. Then the status is written once, and the key comes back at the next schedule
//!    time.

#[cfg(test)]
mod tests;
pub mod utils;

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

use crate::util::{Clock, controller_of, name_of, object_reference, system_clock, time, uid_of};
use skiff_runtime::api::{
    ApiClient, ApiClientExt, ApiError, DeleteOptions, NAMESPACE_TERMINATING_CAUSE, PropagationPolicy, has_status_cause,
    is_already_exists, is_not_found,
};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult, Reconciler};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, EventRecorder, reasons};
use skiff_runtime::informer::{Informer, ResourceEventHandler, SharedInformerFactory, key_of, split_key};
use skiff_runtime::workqueue::WorkQueue;
use utils::{
    active, delete_from_active_list, finished_status, in_active_list, in_active_list_by_name, job_from_template,
    job_name, next_schedule_time, next_schedule_time_duration, schedule_of, sort_by_start_time,
};

/// The CronJob controller's event reasons (besides the shared create/delete ones).
pub mod cron_reasons {
    /// An unfinished Job controlled by the CronJob but not in its active list.
    pub const UNEXPECTED_JOB: &str = "UnexpectedJob";
    /// An active Job finished.
    pub const SAW_COMPLETED_JOB: &str = "SawCompletedJob";
    /// An active Job no longer exists.
    pub const MISSING_JOB: &str = "MissingJob";
    /// `spec.timeZone` is not a known zone.
    pub const UNKNOWN_TIME_ZONE: &str = "UnknownTimeZone";
    /// The schedule does not parse.
    pub const UNPARSEABLE_SCHEDULE: &str = "UnparseableSchedule";
    /// A changed schedule does not parse (from the update handler).
    pub const UNPARSEABLE_CRON_JOB_SCHEDULE: &str = "UnParseableCronJobSchedule";
    /// The schedule names no time twice.
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    /// A `TZ=`/`CRON_TZ=` prefix in the schedule.
    pub const UNSUPPORTED_SCHEDULE: &str = "UnsupportedSchedule";
    /// More than 100 schedule times were missed.
    pub const TOO_MANY_MISSED_TIMES: &str = "TooManyMissedTimes";
    /// A schedule time is past its starting deadline.
    pub const MISS_SCHEDULE: &str = "MissSchedule";
    /// Forbid: a run waits for the active Job.
    pub const JOB_ALREADY_ACTIVE: &str = "JobAlreadyActive";
    /// Replace: reading an active Job failed.
    pub const FAILED_GET: &str = "FailedGet";
}

/// The CronJob controller.
pub struct CronJobController {
    api: Arc<dyn ApiClient>,
    cron_jobs: Arc<Informer<CronJob>>,
    jobs: Arc<Informer<Job>>,
    recorder: EventRecorder,
    clock: Clock,
}

struct Handlers {
    cron_jobs: Arc<Informer<CronJob>>,
    queue: Arc<WorkQueue<String>>,
    recorder: EventRecorder,
    clock: Clock,
}

impl Handlers {
    /// `resolveControllerRef`: the key of the CronJob a Job's controller reference points to.
    fn cron_job_key(&self, job: &Job) -> Option<String> {
        let cref = controller_of(&job.metadata)?;
        if cref.kind != "CronJob" {
            return None;
        }
        let cj = self.cron_jobs.store().get_namespaced(job.metadata.namespace.as_deref(), &cref.name)?;
        (uid_of(&cj.metadata) == cref.uid).then(|| key_of(cj.as_ref()))
    }

    fn enqueue_owner(&self, job: &Job) {
        if let Some(key) = self.cron_job_key(job) {
            self.queue.add(key);
        }
    }
}

impl ResourceEventHandler<Job> for Handlers {
    fn on_add(&self, job: &Arc<Job>) {
        self.enqueue_owner(job);
    }

    fn on_update(&self, old: &Arc<Job>, cur: &Arc<Job>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        if controller_of(&old.metadata) != controller_of(&cur.metadata) {
            self.enqueue_owner(old);
        }
        self.enqueue_owner(cur);
    }

    fn on_delete(&self, job: &Arc<Job>) {
        self.enqueue_owner(job);
    }
}

impl ResourceEventHandler<CronJob> for Handlers {
    fn on_add(&self, cj: &Arc<CronJob>) {
        self.queue.add(key_of(cj.as_ref()));
    }

    /// `updateCronJob`: a changed schedule or time zone brings the key back at the new next
    /// schedule time; any other change now.
    fn on_update(&self, old: &Arc<CronJob>, cur: &Arc<CronJob>) {
        let key = key_of(cur.as_ref());
        let spec = |c: &CronJob| c.spec.as_ref().map(|s| (s.schedule.clone(), s.time_zone.clone()));
        if spec(old) == spec(cur) {
            self.queue.add(key);
            return;
        }
        match schedule_of(cur) {
            Err(_) => {
                let schedule = cur.spec.as_ref().map(|s| s.schedule.as_str()).unwrap_or_default();
                self.recorder.event_for(
                    cur.as_ref(),
                    EVENT_TYPE_WARNING,
                    cron_reasons::UNPARSEABLE_CRON_JOB_SCHEDULE,
                    &format!("unparseable schedule for cronjob: {schedule}"),
                );
            }
            Ok(schedule) => match next_schedule_time_duration(cur, (self.clock)(), &schedule) {
                Some(wait) => self.queue.add_after(key, wait),
                None => self.queue.add(key),
            },
        }
    }

    fn on_delete(&self, cj: &Arc<CronJob>) {
        self.queue.add(key_of(cj.as_ref()));
    }
}

/// What a sync decided: when to look again and whether the status changed.
struct Outcome {
    requeue: Option<std::time::Duration>,
    update_status: bool,
}

impl CronJobController {
    /// Creates the controller on the factory's CronJob and Job informers and registers its
    /// event handlers.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
    ) -> Arc<Self> {
        Self::with_clock(api, factory, queue, recorder, system_clock())
    }

    /// [`CronJobController::new`] on another clock (tests): the handlers and syncs read it.
    pub fn with_clock(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
        clock: Clock,
    ) -> Arc<Self> {
        let cron_jobs = factory.informer::<CronJob>();
        let jobs = factory.informer::<Job>();
        let handlers = Arc::new(Handlers {
            cron_jobs: cron_jobs.clone(),
            queue,
            recorder: recorder.clone(),
            clock: clock.clone(),
        });
        cron_jobs.add_event_handler(handlers.clone());
        jobs.add_event_handler(handlers);
        Arc::new(Self { api, cron_jobs, jobs, recorder, clock })
    }

    /// `getJobsToBeReconciled`: the CronJob's Jobs by controller reference (labels may have
    /// changed since they were made).
    fn jobs_of(&self, cj: &CronJob) -> Vec<Arc<Job>> {
        let ns = cj.metadata.namespace.as_deref().unwrap_or_default();
        self.jobs
            .store()
            .list_namespace(ns)
            .into_iter()
            .filter(|j| {
                controller_of(&j.metadata).is_some_and(|r| r.kind == "CronJob" && r.name == name_of(&cj.metadata))
            })
            .collect()
    }

    /// `sync`: one CronJob key.
    pub async fn sync(&self, key: &str) -> ReconcileResult {
        let Some(cached) = self.cron_jobs.store().get(key) else { return Ok(Action::AwaitChange) };
        let jobs = self.jobs_of(&cached);
        let mut cj = (*cached).clone();
        let cleaned = self.cleanup_finished_jobs(&mut cj, &jobs).await;
        let (outcome, err) = match self.sync_cron_job(&mut cj, &jobs).await {
            Ok(o) => (o, None),
            Err((update_status, e)) => (Outcome { requeue: None, update_status }, Some(e)),
        };
        if cleaned || outcome.update_status {
            self.api.update_status_typed(&cj).await?;
        }
        match (outcome.requeue, err) {
            (Some(wait), _) => Ok(Action::RequeueAfter(wait)),
            (None, Some(e)) => Err(ReconcileError::from(e)),
            (None, None) => Ok(Action::AwaitChange),
        }
    }

    fn event(&self, cj: &CronJob, type_: &str, reason: &str, message: &str) {
        self.recorder.event_for(cj, type_, reason, message);
    }

    /// `syncCronJob`. An error carries whether the status changed before it.
    async fn sync_cron_job(&self, cj: &mut CronJob, jobs: &[Arc<Job>]) -> Result<Outcome, (bool, ApiError)> {
        let now = (self.clock)();
        let mut update = false;
        for job in jobs {
            let uid = uid_of(&job.metadata);
            let found = in_active_list(cj, uid);
            let finished = finished_status(job);
            if !found && finished.is_none() {
                // The cache's CronJob may predate the status write that listed this Job.
                let fresh: CronJob = self
                    .api
                    .get_typed(cj.metadata.namespace.as_deref(), name_of(&cj.metadata))
                    .await
                    .map_err(|e| (update, e))?;
                if in_active_list(&fresh, uid) {
                    *cj = fresh;
                    continue;
                }
                self.event(
                    cj,
                    EVENT_TYPE_WARNING,
                    cron_reasons::UNEXPECTED_JOB,
                    &format!("Saw a job that the controller did not create or forgot: {}", name_of(&job.metadata)),
                );
            } else if found && let Some(status) = finished {
                delete_from_active_list(cj, uid);
                self.event(
                    cj,
                    EVENT_TYPE_NORMAL,
                    cron_reasons::SAW_COMPLETED_JOB,
                    &format!("Saw completed job: {}, status: {status}", name_of(&job.metadata)),
                );
                update = true;
            } else if finished == Some("Complete") {
                // A Job need not be active to count: its completion time is what matters.
                let completed = job.status.as_ref().and_then(|s| s.completion_time.clone());
                let status = cj.status.get_or_insert_with(CronJobStatus::default);
                if let Some(done) = completed
                    && status.last_successful_time.as_ref().is_none_or(|last| done.0 > last.0)
                {
                    status.last_successful_time = Some(done);
                    update = true;
                }
            }
        }

        // An active Job the cache does not have may just be new: ask the API before dropping it.
        let listed: Vec<_> = active(cj).to_vec();
        for r in listed {
            let uid = r.uid.as_deref().unwrap_or_default();
            if jobs.iter().any(|j| uid_of(&j.metadata) == uid) {
                continue;
            }
            let name = r.name.as_deref().unwrap_or_default();
            match self.api.get_typed::<Job>(r.namespace.as_deref(), name).await {
                Err(e) if is_not_found(&e) => {
                    self.event(
                        cj,
                        EVENT_TYPE_NORMAL,
                        cron_reasons::MISSING_JOB,
                        &format!("Active job went missing: {name}"),
                    );
                    delete_from_active_list(cj, uid);
                    update = true;
                }
                Err(e) => return Err((update, e)),
                Ok(_) => {}
            }
        }

        let done = |update_status| Ok(Outcome { requeue: None, update_status });
        if cj.metadata.deletion_timestamp.is_some() {
            return done(update);
        }
        let spec = cj.spec.clone().unwrap_or_default();
        if let Some(tz) = spec.time_zone.as_deref()
            && let Err(e) = skiff_apimachinery::cron::load_location(tz)
        {
            self.event(
                cj,
                EVENT_TYPE_WARNING,
                cron_reasons::UNKNOWN_TIME_ZONE,
                &format!("invalid timeZone: {tz:?}: {e}"),
            );
            return done(update);
        }
        if spec.suspend == Some(true) {
            return done(update);
        }
        if spec.schedule.contains("TZ") {
            self.event(
                cj,
                EVENT_TYPE_WARNING,
                cron_reasons::UNSUPPORTED_SCHEDULE,
                &format!(
                    "CRON_TZ or TZ used in schedule {:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
                    spec.schedule
                ),
            );
        }
        let schedule = match schedule_of(cj) {
            Ok(s) => s,
            Err(e) => {
                self.event(
                    cj,
                    EVENT_TYPE_WARNING,
                    cron_reasons::UNPARSEABLE_SCHEDULE,
                    &format!("unparseable schedule: {:?} : {e}", spec.schedule),
                );
                return done(update);
            }
        };
        let scheduled = match next_schedule_time(cj, now, &schedule) {
            Err(e) => {
                self.event(
                    cj,
                    EVENT_TYPE_WARNING,
                    cron_reasons::INVALID_SCHEDULE,
                    &format!("invalid schedule: {} : {e}", spec.schedule),
                );
                return done(update);
            }
            Ok((scheduled, too_many)) => {
                if too_many {
                    self.event(
                        cj,
                        EVENT_TYPE_WARNING,
                        cron_reasons::TOO_MANY_MISSED_TIMES,
                        "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
                    );
                }
                scheduled
            }
        };
        let requeue = |cj: &CronJob, update_status| {
            Ok(Outcome { requeue: next_schedule_time_duration(cj, now, &schedule), update_status })
        };
        let Some(scheduled) = scheduled else {
            // Only after a restart: otherwise the key comes back at a schedule time.
            return requeue(cj, update);
        };
        if let Some(deadline) = spec.starting_deadline_seconds
            && scheduled.as_second() + deadline < now.as_second()
        {
            self.event(
                cj,
                EVENT_TYPE_WARNING,
                cron_reasons::MISS_SCHEDULE,
                &format!("Missed scheduled time to start a job: {}", rfc1123z(scheduled)),
            );
            return requeue(cj, update);
        }
        let ns = cj.metadata.namespace.clone();
        let last = cj.status.as_ref().and_then(|s| s.last_schedule_time.as_ref()).map(|t| t.0);
        if in_active_list_by_name(cj, ns.as_deref(), &job_name(cj, scheduled)) || last == Some(scheduled) {
            return requeue(cj, update);
        }
        let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
        if policy == "Forbid" && !active(cj).is_empty() {
            self.event(
                cj,
                EVENT_TYPE_NORMAL,
                cron_reasons::JOB_ALREADY_ACTIVE,
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            );
            return requeue(cj, update);
        }
        if policy == "Replace" {
            for r in active(cj).to_vec() {
                let name = r.name.as_deref().unwrap_or_default();
                let job: Job = match self.api.get_typed(r.namespace.as_deref(), name).await {
                    Ok(j) => j,
                    Err(e) => {
                        self.event(
                            cj,
                            EVENT_TYPE_WARNING,
                            cron_reasons::FAILED_GET,
                            &format!("Get job: {}", e.message),
                        );
                        return Err((update, e));
                    }
                };
                if !self.delete_job(cj, &job).await {
                    let msg = format!("could not replace job {}/{name}", r.namespace.as_deref().unwrap_or_default());
                    return Err((update, ApiError::internal(msg)));
                }
                update = true;
            }
        }

        let request = job_from_template(cj, scheduled);
        let created = match self.api.create_typed(&request).await {
            Ok(job) => {
                self.event(
                    cj,
                    EVENT_TYPE_NORMAL,
                    reasons::SUCCESSFUL_CREATE,
                    &format!("Created job {}", name_of(&job.metadata)),
                );
                job
            }
            Err(e) if has_status_cause(&e, NAMESPACE_TERMINATING_CAUSE) => return Err((update, e)),
            Err(e) if is_already_exists(&e) => {
                // Made by an earlier sync that could not record it, or by someone else.
                let job: Job =
                    self.api.get_typed(ns.as_deref(), name_of(&request.metadata)).await.map_err(|e| (update, e))?;
                let ours = controller_of(&job.metadata).is_some_and(|r| r.uid == uid_of(&cj.metadata));
                if !ours || in_active_list(cj, uid_of(&job.metadata)) {
                    return done(update);
                }
                tracing::info!(cronjob = name_of(&cj.metadata), job = name_of(&job.metadata), "Job already exists");
                job
            }
            Err(e) => {
                self.event(
                    cj,
                    EVENT_TYPE_WARNING,
                    reasons::FAILED_CREATE,
                    &format!("Error creating job: {}", e.message),
                );
                return Err((update, e));
            }
        };
        let status = cj.status.get_or_insert_with(CronJobStatus::default);
        status.active.get_or_insert_with(Vec::new).push(object_reference(&created));
        status.last_schedule_time = Some(time(scheduled));
        requeue(cj, true)
    }

    /// `cleanupFinishedJobs`: deletes the oldest finished Jobs beyond the history limits;
    /// whether the status changed.
    async fn cleanup_finished_jobs(&self, cj: &mut CronJob, jobs: &[Arc<Job>]) -> bool {
        let spec = cj.spec.clone().unwrap_or_default();
        let mut update = false;
        for (limit, kind) in
            [(spec.successful_jobs_history_limit, "Complete"), (spec.failed_jobs_history_limit, "Failed")]
        {
            let Some(limit) = limit else { continue };
            let mut finished: Vec<&Job> =
                jobs.iter().map(Arc::as_ref).filter(|j| finished_status(j) == Some(kind)).collect();
            let excess = finished.len().saturating_sub(usize::try_from(limit).unwrap_or(0));
            if excess == 0 {
                continue;
            }
            sort_by_start_time(&mut finished);
            for job in &finished[..excess] {
                if self.delete_job(cj, job).await {
                    update = true;
                }
            }
        }
        update
    }

    /// `deleteJob`: deletes a Job (its pods in the background) and drops it from the active
    /// list; false when the delete failed.
    async fn delete_job(&self, cj: &mut CronJob, job: &Job) -> bool {
        let name = name_of(&job.metadata);
        let options = DeleteOptions { propagation_policy: Some(PropagationPolicy::Background), ..Default::default() };
        if let Err(e) = self.api.delete_typed::<Job>(job.metadata.namespace.as_deref(), name, &options).await {
            self.event(cj, EVENT_TYPE_WARNING, reasons::FAILED_DELETE, &format!("Deleted job: {}", e.message));
            return false;
        }
        delete_from_active_list(cj, uid_of(&job.metadata));
        self.event(cj, EVENT_TYPE_NORMAL, reasons::SUCCESSFUL_DELETE, &format!("Deleted job {name}"));
        true
    }
}

/// Go's `time.RFC1123Z` in UTC (`Mon, 02 Jan 2006 15:04:05 -0700`), as the MissSchedule event
/// prints the missed time.
fn rfc1123z(t: Timestamp) -> String {
    t.to_zoned(TimeZone::UTC).strftime("%a, %d %b %Y %H:%M:%S +0000").to_string()
}

#[async_trait]
impl Reconciler for CronJobController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        let (ns, name) = split_key(key);
        tracing::trace!(namespace = ns.unwrap_or_default(), name, "syncing CronJob");
        self.sync(key).await
    }
}
