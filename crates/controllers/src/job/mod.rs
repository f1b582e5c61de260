//! The Job controller (`pkg/controller/job/job_controller.go`): runs a Job's pods to
//! `completions` successes (NonIndexed) or one success per index (Indexed), at most
//! `parallelism` at a time, and reports the outcome in the Job's status.
//!
//! `sync_job`:
//! 1. Pod tracking: every pod is created with the `batch.kubernetes.io/job-tracking`
//!    finalizer. A finished pod (Succeeded, Failed, or deleted before succeeding) still holding it
//!    is first recorded in `status.uncountedTerminatedPods`, then its finalizer is removed, then
//!    it moves into `succeeded`/`failed` (Indexed: its index into `completedIndexes`). A restart
//!    between the steps finds the uids in the status, so no result is lost or counted twice.
//! 2. Finishing: more failures than `backoffLimit` (reason `BackoffLimitExceeded`) or a run
//!    longer than `activeDeadlineSeconds` (`DeadlineExceeded`) add the `FailureTarget`
//!    condition; enough successes add `SuccessCriteriaMet` (`CompletionsReached`). The remaining
//!    pods are deleted, and once none is active or terminating the final `Failed`/`Complete`
//!    condition follows (with `completionTime` for Complete), as Kubernetes 1.33 does.
//! 3. `suspend`: active pods are deleted and the `Suspended` condition set; resuming resets
//!    `startTime`.
//! 4. Otherwise, once earlier creates/deletes are observed (expectations), pods are created
//!    (slow-start batches) or deleted towards the wanted number of active pods, after the pod
//!    failure backoff (10 s doubling per failure, at most 6 min). `podReplacementPolicy: Failed`
//!    counts terminating pods as active.
//!
//! Not implemented yet: podFailurePolicy, backoffLimitPerIndex, successPolicy, adoption of
//! orphaned pods matching a manual selector.

pub mod indexed;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::controller_utils::{Expectations, SLOW_START_INITIAL_BATCH_SIZE, pod_from_template, slow_start_batch};
use crate::util::{
    Clock, controller_of, is_pod_ready, name_of, new_controller_ref, pod_phase, system_clock, time, uid_of,
};
use indexed::{completion_index, format_indexes, parse_indexes, stamp_index};
use skiff_runtime::api::{
    ApiClient, ApiClientExt, ApiError, DeleteOptions, NAMESPACE_TERMINATING_CAUSE, PatchType, has_status_cause,
    is_not_found, resource_of,
};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, EventRecorder, reasons};
use skiff_runtime::informer::{Informer, ResourceEventHandler, SharedInformerFactory, key_of, split_key};
use skiff_runtime::workqueue::WorkQueue;

/// The finalizer the controller puts on every pod it creates, so that no pod's result is lost.
pub const JOB_TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The first delay before a failed pod is replaced (`DefaultJobPodFailureBackOff`).
pub const DEFAULT_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(10);
/// The longest delay before a failed pod is replaced (`MaxJobPodFailureBackOff`).
pub const MAX_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(360);
/// Most pods created or deleted by one sync (`MaxPodCreateDeletePerSync`).
pub const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;

/// Job condition types (`batch/v1` `JobConditionType`).
pub mod conditions {
    /// The Job finished successfully.
    pub const COMPLETE: &str = "Complete";
    /// The Job failed.
    pub const FAILED: &str = "Failed";
    /// The Job is suspended.
    pub const SUSPENDED: &str = "Suspended";
    /// The Job will fail once its pods are terminated.
    pub const FAILURE_TARGET: &str = "FailureTarget";
    /// The Job will complete once its pods are terminated.
    pub const SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
}

/// Condition reasons, also the event reasons.
pub mod job_reasons {
    /// `backoffLimit` exceeded.
    pub const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
    /// `activeDeadlineSeconds` exceeded.
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    /// Enough pods succeeded.
    pub const COMPLETIONS_REACHED: &str = "CompletionsReached";
    /// The event of a completed Job.
    pub const COMPLETED: &str = "Completed";
    /// The Suspended condition's reason while suspended.
    pub const JOB_SUSPENDED: &str = "JobSuspended";
    /// The Suspended condition's reason after resuming.
    pub const JOB_RESUMED: &str = "JobResumed";
}

/// `uidTrackingExpectations`: per Job key, the uids of pods whose tracking finalizer removal
/// was sent but not yet seen by the informer; their results are already in the status, so a
/// sync on a stale cache must not count them again.
#[derive(Default)]
pub struct FinalizerExpectations(Mutex<HashMap<String, HashSet<String>>>);

impl FinalizerExpectations {
    fn expect(&self, key: &str, uid: &str) {
        self.0.lock().expect("finalizer expectations").entry(key.to_string()).or_default().insert(uid.to_string());
    }

    fn observed(&self, key: &str, uid: &str) {
        let mut map = self.0.lock().expect("finalizer expectations");
        if let Some(set) = map.get_mut(key) {
            set.remove(uid);
            if set.is_empty() {
                map.remove(key);
            }
        }
    }

    fn pending(&self, key: &str, uid: &str) -> bool {
        self.0.lock().expect("finalizer expectations").get(key).is_some_and(|s| s.contains(uid))
    }

    fn forget(&self, key: &str) {
        self.0.lock().expect("finalizer expectations").remove(key);
    }
}

/// The Job controller.
pub struct JobController {
    api: Arc<dyn ApiClient>,
    jobs: Arc<Informer<Job>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<WorkQueue<String>>,
    expectations: Arc<Expectations>,
    finalizers: Arc<FinalizerExpectations>,
    recorder: EventRecorder,
    clock: Clock,
}

struct Handlers {
    jobs: Arc<Informer<Job>>,
    queue: Arc<WorkQueue<String>>,
    expectations: Arc<Expectations>,
    finalizers: Arc<FinalizerExpectations>,
}

impl Handlers {
    /// `resolveControllerRef`: the Job a pod's controller reference points to.
    fn job_key(&self, pod: &Pod) -> Option<String> {
        let cref = controller_of(&pod.metadata)?;
        if cref.kind != "Job" {
            return None;
        }
        let job = self.jobs.store().get_namespaced(pod.metadata.namespace.as_deref(), &cref.name)?;
        (uid_of(&job.metadata) == cref.uid).then(|| key_of(job.as_ref()))
    }
}

impl ResourceEventHandler<Pod> for Handlers {
    fn on_add(&self, pod: &Arc<Pod>) {
        if let Some(key) = self.job_key(pod) {
            if pod.metadata.deletion_timestamp.is_some() {
                self.expectations.deletion_observed(&key, &key_of(pod.as_ref()));
            } else {
                self.expectations.creation_observed(&key);
            }
            self.queue.add(key);
        }
    }

    fn on_update(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        if let Some(key) = self.job_key(cur) {
            if !has_finalizer(cur) {
                self.finalizers.observed(&key, uid_of(&cur.metadata));
            }
            if cur.metadata.deletion_timestamp.is_some() && old.metadata.deletion_timestamp.is_none() {
                self.expectations.deletion_observed(&key, &key_of(cur.as_ref()));
            }
            self.queue.add(key);
        }
    }

    fn on_delete(&self, pod: &Arc<Pod>) {
        if let Some(key) = self.job_key(pod) {
            self.expectations.deletion_observed(&key, &key_of(pod.as_ref()));
            self.finalizers.observed(&key, uid_of(&pod.metadata));
            self.queue.add(key);
        }
    }
}

impl ResourceEventHandler<Job> for Handlers {
    fn on_add(&self, job: &Arc<Job>) {
        self.queue.add(key_of(job.as_ref()));
    }

    fn on_update(&self, old: &Arc<Job>, cur: &Arc<Job>) {
        if old.metadata.uid != cur.metadata.uid {
            self.expectations.delete_expectations(&key_of(old.as_ref()));
        }
        self.queue.add(key_of(cur.as_ref()));
    }

    fn on_delete(&self, job: &Arc<Job>) {
        let key = key_of(job.as_ref());
        self.expectations.delete_expectations(&key);
        self.finalizers.forget(&key);
        self.queue.add(key);
    }
}

fn has_finalizer(pod: &Pod) -> bool {
    pod.metadata.finalizers.iter().flatten().any(|f| f == JOB_TRACKING_FINALIZER)
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod_phase(pod), "Succeeded" | "Failed")
}

/// The result of a finished pod: `Some(true)` succeeded, `Some(false)` failed (including a pod
/// deleted before it succeeded), `None` still running.
fn pod_result(pod: &Pod) -> Option<bool> {
    match pod_phase(pod) {
        "Succeeded" => Some(true),
        "Failed" => Some(false),
        _ if pod.metadata.deletion_timestamp.is_some() => Some(false),
        _ => None,
    }
}

/// When a failed pod finished: its containers' last termination, else its deletion.
fn finish_time(pod: &Pod) -> Option<Timestamp> {
    let status = pod.status.as_ref();
    status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref().map(|t| t.0))
        .max()
        .or_else(|| pod.metadata.deletion_timestamp.as_ref().map(|t| t.0))
}

/// The failure backoff before the next pod after `failures` failures: 10 s doubling, at most
/// 6 min (`getBackoff`).
pub fn failure_backoff(failures: i32) -> Duration {
    if failures <= 0 {
        return Duration::ZERO;
    }
    let exp = (failures - 1).min(16) as u32;
    (DEFAULT_POD_FAILURE_BACKOFF * 2u32.pow(exp)).min(MAX_POD_FAILURE_BACKOFF)
}

fn condition<'a>(status: &'a JobStatus, type_: &str) -> Option<&'a JobCondition> {
    status.conditions.iter().flatten().find(|c| c.type_ == type_ && c.status == "True")
}

/// `IsJobFinished`: a `Complete` or `Failed` condition is true.
pub fn is_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .is_some_and(|s| condition(s, conditions::COMPLETE).is_some() || condition(s, conditions::FAILED).is_some())
}

/// Sets a condition (replacing one of the same type when its status changes).
fn set_condition(status: &mut JobStatus, type_: &str, value: bool, reason: &str, message: &str, now: Timestamp) {
    let value = if value { "True" } else { "False" };
    let list = status.conditions.get_or_insert_with(Vec::new);
    if let Some(c) = list.iter_mut().find(|c| c.type_ == type_) {
        if c.status == value && c.reason.as_deref() == Some(reason) {
            return;
        }
        let transitioned = c.status != value;
        c.status = value.into();
        c.reason = Some(reason.into());
        c.message = Some(message.into());
        c.last_probe_time = Some(time(now));
        if transitioned {
            c.last_transition_time = Some(time(now));
        }
        return;
    }
    list.push(JobCondition {
        type_: type_.into(),
        status: value.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(time(now)),
        last_transition_time: Some(time(now)),
    });
}

impl JobController {
    /// Creates the controller on the factory's Job and Pod informers and registers its event
    /// handlers.
    pub fn new(
        api: Arc<dyn ApiClient>,
        factory: &SharedInformerFactory,
        queue: Arc<WorkQueue<String>>,
        recorder: EventRecorder,
    ) -> Arc<Self> {
        let jobs = factory.informer::<Job>();
        let pods = factory.informer::<Pod>();
        let expectations = Arc::new(Expectations::new());
        let finalizers = Arc::new(FinalizerExpectations::default());
        let handlers = Arc::new(Handlers {
            jobs: jobs.clone(),
            queue: queue.clone(),
            expectations: expectations.clone(),
            finalizers: finalizers.clone(),
        });
        jobs.add_event_handler(handlers.clone());
        pods.add_event_handler(handlers);
        Arc::new(Self { api, jobs, pods, queue, expectations, finalizers, recorder, clock: system_clock() })
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self: Arc<Self>, clock: Clock) -> Arc<Self> {
        if let Some(me) = Arc::get_mut(&mut self) {
            me.clock = clock;
        }
        self
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// The expectations (tests).
    pub fn expectations(&self) -> &Arc<Expectations> {
        &self.expectations
    }

    async fn remove_finalizers(&self, key: &str, pods: &[Arc<Pod>]) -> Result<(), ApiError> {
        for pod in pods {
            let uid = uid_of(&pod.metadata);
            self.finalizers.expect(key, uid);
            let rest: Vec<String> =
                pod.metadata.finalizers.iter().flatten().filter(|f| *f != JOB_TRACKING_FINALIZER).cloned().collect();
            let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": pod.metadata.resource_version}});
            match self
                .api
                .patch(
                    &resource_of::<Pod>(),
                    pod.metadata.namespace.as_deref(),
                    name_of(&pod.metadata),
                    PatchType::Merge,
                    &patch,
                    None,
                )
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => self.finalizers.observed(key, uid),
                Err(e) => {
                    self.finalizers.observed(key, uid);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    async fn write_status(&self, job: &Job, status: JobStatus) -> Result<Job, ApiError> {
        let mut updated = job.clone();
        updated.status = Some(status);
        self.api.update_status_typed(&updated).await
    }

    async fn create_pod(&self, job: &Job, index: Option<i32>) -> Result<(), ApiError> {
        let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let mut pod = pod_from_template(&template, ns, name_of(&job.metadata), new_controller_ref(job));
        pod.metadata.finalizers.get_or_insert_with(Vec::new).push(JOB_TRACKING_FINALIZER.into());
        if let Some(i) = index {
            stamp_index(&mut pod, name_of(&job.metadata), i);
        }
        match self.api.create_typed(&pod).await {
            Ok(created) => {
                self.recorder.event_for(
                    job,
                    EVENT_TYPE_NORMAL,
                    reasons::SUCCESSFUL_CREATE,
                    &format!("Created pod: {}", name_of(&created.metadata)),
                );
                Ok(())
            }
            Err(e) if has_status_cause(&e, NAMESPACE_TERMINATING_CAUSE) => Ok(()),
            Err(e) => {
                self.recorder.event_for(
                    job,
                    EVENT_TYPE_WARNING,
                    reasons::FAILED_CREATE,
                    &format!("Error creating: {}", e.message),
                );
                Err(e)
            }
        }
    }

    /// Deletes `victims` (expecting their deletions); the first error other than NotFound.
    async fn delete_pods(&self, job: &Job, key: &str, victims: &[Arc<Pod>]) -> Result<(), ApiError> {
        if victims.is_empty() {
            return Ok(());
        }
        self.expectations.expect_deletions(key, victims.iter().map(|p| key_of(p.as_ref())).collect());
        let mut first = None;
        for pod in victims {
            let name = name_of(&pod.metadata);
            match self.api.delete_typed::<Pod>(pod.metadata.namespace.as_deref(), name, &DeleteOptions::default()).await
            {
                Ok(()) => self.recorder.event_for(
                    job,
                    EVENT_TYPE_NORMAL,
                    reasons::SUCCESSFUL_DELETE,
                    &format!("Deleted pod: {name}"),
                ),
                Err(e) => {
                    self.expectations.deletion_observed(key, &key_of(pod.as_ref()));
                    if !is_not_found(&e) {
                        self.recorder.event_for(
                            job,
                            EVENT_TYPE_WARNING,
                            reasons::FAILED_DELETE,
                            &format!("Error deleting: {}", e.message),
                        );
                        first.get_or_insert(e);
                    }
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// `syncJob` for one key.
    pub async fn sync_job(&self, key: &str) -> ReconcileResult {
        let (ns, _) = split_key(key);
        let Some(job) = self.jobs.store().get(key) else {
            self.expectations.delete_expectations(key);
            return Ok(Action::AwaitChange);
        };
        let uid = uid_of(&job.metadata).to_string();
        let pods: Vec<Arc<Pod>> = self
            .pods
            .store()
            .list_namespace(ns.unwrap_or_default())
            .into_iter()
            .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
            .collect();
        if is_finished(&job) {
            // A finished Job keeps no pod from being removed.
            let held: Vec<Arc<Pod>> = pods
                .iter()
                .filter(|p| has_finalizer(p) && is_terminal(p) && !self.finalizers.pending(key, uid_of(&p.metadata)))
                .cloned()
                .collect();
            self.remove_finalizers(key, &held).await?;
            return Ok(Action::AwaitChange);
        }
        let now = (self.clock)();
        let satisfied = self.expectations.satisfied(key);
        let spec = job.spec.clone().unwrap_or_default();
        let original = job.status.clone().unwrap_or_default();
        let mut status = original.clone();
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let completions = spec.completions;
        let parallelism = spec.parallelism.unwrap_or(1).max(0);
        let backoff_limit = spec.backoff_limit.unwrap_or(6);
        let suspended = spec.suspend == Some(true);

        // 1. Pod tracking.
        let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
        let mut unc_succeeded: BTreeSet<String> = uncounted.succeeded.unwrap_or_default().into_iter().collect();
        let mut unc_failed: BTreeSet<String> = uncounted.failed.unwrap_or_default().into_iter().collect();
        let mut completed = parse_indexes(status.completed_indexes.as_deref(), completions.unwrap_or(0));
        let (before_s, before_f, before_c) = (unc_succeeded.len(), unc_failed.len(), completed.len());
        let mut to_finalize = Vec::new();
        // The latest written version of the Job (each status write is optimistic).
        let mut current = job.as_ref().clone();
        let tracked: Vec<&Arc<Pod>> =
            pods.iter().filter(|p| has_finalizer(p) && !self.finalizers.pending(key, uid_of(&p.metadata))).collect();
        for pod in tracked.iter().copied() {
            let Some(succeeded) = pod_result(pod) else { continue };
            let pod_uid = uid_of(&pod.metadata).to_string();
            if succeeded {
                match (indexed, completion_index(pod)) {
                    (false, _) => {
                        unc_succeeded.insert(pod_uid);
                    }
                    (true, Some(i)) if i < completions.unwrap_or(0) => {
                        completed.insert(i);
                    }
                    _ => {}
                }
            } else {
                unc_failed.insert(pod_uid);
            }
            to_finalize.push(pod.clone());
        }
        if (unc_succeeded.len(), unc_failed.len(), completed.len()) != (before_s, before_f, before_c) {
            // Record the results before the finalizers go, so that they survive a restart.
            status.uncounted_terminated_pods = Some(UncountedTerminatedPods {
                succeeded: Some(unc_succeeded.iter().cloned().collect()),
                failed: Some(unc_failed.iter().cloned().collect()),
            });
            if indexed {
                status.completed_indexes = Some(format_indexes(&completed));
                status.succeeded = Some(completed.len() as i32);
            }
            current = self.write_status(&current, status.clone()).await?;
            status = current.status.clone().unwrap_or_default();
        }
        self.remove_finalizers(key, &to_finalize).await?;
        if !indexed {
            status.succeeded = Some(status.succeeded.unwrap_or(0) + unc_succeeded.len() as i32);
        }
        status.failed = Some(status.failed.unwrap_or(0) + unc_failed.len() as i32);
        status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
        if indexed {
            status.completed_indexes = Some(format_indexes(&completed));
            status.succeeded = Some(completed.len() as i32);
        }
        let succeeded = status.succeeded.unwrap_or(0);
        let failed = status.failed.unwrap_or(0);

        let mut active: Vec<Arc<Pod>> =
            pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none() && !is_terminal(p)).cloned().collect();
        let terminating = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_some() && !is_terminal(p)).count();

        // 2. Finishing.
        if status.start_time.is_none() && !suspended {
            status.start_time = Some(time(now));
        }
        let mut requeue = None;
        let started = status.start_time.as_ref().map(|t| t.0);
        if condition(&status, conditions::FAILURE_TARGET).is_none()
            && condition(&status, conditions::SUCCESS_CRITERIA_MET).is_none()
        {
            let deadline = spec.active_deadline_seconds.zip(started).filter(|_| !suspended);
            let complete = match (indexed, completions) {
                (true, c) => completed.len() as i32 >= c.unwrap_or(0),
                (false, Some(c)) => succeeded >= c,
                (false, None) => succeeded > 0 && active.is_empty(),
            };
            if failed > backoff_limit {
                set_condition(
                    &mut status,
                    conditions::FAILURE_TARGET,
                    true,
                    job_reasons::BACKOFF_LIMIT_EXCEEDED,
                    "Job has reached the specified backoff limit",
                    now,
                );
            } else if let Some((secs, start)) = deadline
                && now.as_second() - start.as_second() >= secs
            {
                set_condition(
                    &mut status,
                    conditions::FAILURE_TARGET,
                    true,
                    job_reasons::DEADLINE_EXCEEDED,
                    "Job was active longer than specified deadline",
                    now,
                );
            } else if complete {
                set_condition(
                    &mut status,
                    conditions::SUCCESS_CRITERIA_MET,
                    true,
                    job_reasons::COMPLETIONS_REACHED,
                    "Reached expected number of succeeded pods",
                    now,
                );
            } else if let Some((secs, start)) = deadline {
                let left = secs - (now.as_second() - start.as_second());
                requeue = Some(Duration::from_secs(left.max(1) as u64));
            }
        }
        let finishing = condition(&status, conditions::FAILURE_TARGET)
            .or_else(|| condition(&status, conditions::SUCCESS_CRITERIA_MET))
            .cloned();
        let mut manage_err = None;
        // Pods created (positive) or deleted (negative) by this sync, counted as active as
        // Kubernetes does, before the cache sees them.
        let mut active_delta = 0i64;
        if let Some(target) = &finishing {
            if let Err(e) = self.delete_pods(&job, key, &active).await {
                manage_err = Some(e);
            }
            let remaining = terminating + active.len();
            active.clear();
            if remaining == 0 && to_finalize.len() == tracked.len() {
                let succeeded_job = target.type_ == conditions::SUCCESS_CRITERIA_MET;
                let (type_, reason, message) = (
                    if succeeded_job { conditions::COMPLETE } else { conditions::FAILED },
                    target.reason.clone().unwrap_or_default(),
                    target.message.clone().unwrap_or_default(),
                );
                set_condition(&mut status, type_, true, &reason, &message, now);
                if succeeded_job {
                    status.completion_time = Some(time(now));
                    self.recorder.event_for(job.as_ref(), EVENT_TYPE_NORMAL, job_reasons::COMPLETED, "Job completed");
                } else {
                    self.recorder.event_for(job.as_ref(), EVENT_TYPE_WARNING, &reason, &message);
                }
            }
        } else if suspended {
            // 3. Suspend.
            if let Err(e) = self.delete_pods(&job, key, &active).await {
                manage_err = Some(e);
            }
            active.clear();
            if condition(&status, conditions::SUSPENDED).is_none() {
                set_condition(
                    &mut status,
                    conditions::SUSPENDED,
                    true,
                    job_reasons::JOB_SUSPENDED,
                    "Job suspended",
                    now,
                );
                self.recorder.event_for(job.as_ref(), EVENT_TYPE_NORMAL, "Suspended", "Job suspended");
            }
        } else {
            if condition(&status, conditions::SUSPENDED).is_some() {
                set_condition(&mut status, conditions::SUSPENDED, false, job_reasons::JOB_RESUMED, "Job resumed", now);
                status.start_time = Some(time(now));
                self.recorder.event_for(job.as_ref(), EVENT_TYPE_NORMAL, "Resumed", "Job resumed");
            }
            // 4. Manage pods.
            if satisfied && job.metadata.deletion_timestamp.is_none() {
                let last_failure =
                    pods.iter().filter(|p| pod_result(p) == Some(false)).filter_map(|p| finish_time(p)).max();
                let wait = last_failure.map(|t| {
                    let delay = failure_backoff(failed).as_secs() as i64;
                    delay - (now.as_second() - t.as_second())
                });
                match wait {
                    Some(w) if w > 0 => {
                        let w = Duration::from_secs(w as u64);
                        requeue = Some(requeue.map_or(w, |r: Duration| r.min(w)));
                    }
                    _ => {
                        let replacing = spec.pod_replacement_policy.as_deref() == Some("Failed");
                        let busy = active.len() + if replacing { terminating } else { 0 };
                        match self.manage(&job, key, &spec, &active, busy, succeeded, &completed, parallelism).await {
                            Ok(delta) => active_delta = delta,
                            Err(e) => manage_err = Some(e),
                        }
                    }
                }
            }
        }

        status.active = Some((active.len() as i64 + active_delta).max(0) as i32);
        status.ready = Some(active.iter().filter(|p| is_pod_ready(p)).count() as i32);
        status.terminating = Some(terminating as i32);
        if status != original {
            self.write_status(&current, status).await?;
        }
        if let Some(e) = manage_err {
            return Err(e.into());
        }
        Ok(requeue.map_or(Action::AwaitChange, Action::RequeueAfter))
    }

    /// `manageJob`: creates the missing pods (NonIndexed: up to `parallelism` and the remaining
    /// completions; Indexed: the lowest indexes neither completed nor running) or deletes the
    /// surplus (newest first).
    #[allow(clippy::too_many_arguments)]
    async fn manage(
        &self,
        job: &Job,
        key: &str,
        spec: &k8s_openapi::api::batch::v1::JobSpec,
        active: &[Arc<Pod>],
        busy: usize,
        succeeded: i32,
        completed: &BTreeSet<i32>,
        parallelism: i32,
    ) -> Result<i64, ApiError> {
        let parallelism = parallelism as usize;
        let (wanted, indexes): (usize, Vec<i32>) = if spec.completion_mode.as_deref() == Some("Indexed") {
            let running: BTreeSet<i32> = active.iter().filter_map(|p| completion_index(p)).collect();
            let missing: Vec<i32> =
                (0..spec.completions.unwrap_or(0)).filter(|i| !completed.contains(i) && !running.contains(i)).collect();
            let wanted = (busy + missing.len()).min(parallelism);
            (wanted, missing)
        } else {
            let remaining = match spec.completions {
                Some(c) => (c - succeeded).max(0) as usize,
                None if succeeded > 0 => 0,
                None => parallelism,
            };
            (remaining.min(parallelism), Vec::new())
        };
        if busy > wanted {
            let mut victims: Vec<Arc<Pod>> = active.to_vec();
            // Newest (and, for Indexed Jobs, highest index) first.
            victims.sort_by_key(|p| {
                std::cmp::Reverse((completion_index(p), p.metadata.creation_timestamp.as_ref().map(|t| t.0)))
            });
            victims.truncate((busy - wanted).min(MAX_POD_CREATE_DELETE_PER_SYNC).min(active.len()));
            self.delete_pods(job, key, &victims).await?;
            return Ok(-(victims.len() as i64));
        }
        let n = (wanted - busy).min(MAX_POD_CREATE_DELETE_PER_SYNC);
        if n == 0 {
            return Ok(0);
        }
        self.expectations.expect_creations(key, n);
        let next = std::sync::Mutex::new(indexes.into_iter());
        let (successes, err) = slow_start_batch(n, SLOW_START_INITIAL_BATCH_SIZE, || {
            let index = next.lock().expect("index iterator").next();
            self.create_pod(job, index)
        })
        .await;
        for _ in successes..n {
            self.expectations.creation_observed(key);
        }
        err.map_or(Ok(successes as i64), Err)
    }
}

#[async_trait]
impl Reconciler for JobController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_job(key).await
    }
}

#[cfg(test)]
mod tests;
