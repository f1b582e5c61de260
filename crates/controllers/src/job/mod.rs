//! The Job controller (`pkg/controller/job/job_controller.go`): runs a Job's pods to
//! `completions` successes (NonIndexed) or one success per index (Indexed), at most
//! `parallelism` at a time, and reports the outcome in the Job's status.
//!
//! `sync_job`, in Kubernetes 1.33's order:
//! 1. Claim: pods the Job controls, plus orphans its selector matches (adopted with the
//!    tracking finalizer), minus controlled pods it no longer matches (released) — the
//!    controller ref manager, as ReplicaSet does.
//! 2. Finishing: the first of a `FailJob` rule of the `podFailurePolicy` matching a failed pod
//!    (reason `PodFailurePolicy`, the rule's message), more counted failures than
//!    `backoffLimit` (`BackoffLimitExceeded`), a run longer than `activeDeadlineSeconds`
//!    (`DeadlineExceeded`), for Indexed Jobs with `backoffLimitPerIndex` more failed indexes
//!    than `maxFailedIndexes` (`MaxFailedIndexesExceeded`) or every index finished with some
//!    failed (`FailedIndexes`), decides the `FailureTarget` condition; a met `successPolicy`
//!    rule (`SuccessPolicy`) or enough successes (`CompletionsReached`) the
//!    `SuccessCriteriaMet` condition. A finishing Job's active pods are deleted.
//! 3. Otherwise pods are created or deleted towards the wanted number of active pods
//!    (`manageJob`), once earlier creates/deletes are observed (expectations) and after the pod
//!    failure backoff (10 s doubling per failure, at most 6 min; per index with
//!    `backoffLimitPerIndex`). `suspend` deletes the active pods and sets `Suspended`.
//!    `podReplacementPolicy: Failed` (implied by a `podFailurePolicy`) replaces a pod only once
//!    it is Failed, not while it terminates.
//! 4. Pod tracking (`trackJobStatusAndRemoveFinalizers`): every pod carries the
//!    `batch.kubernetes.io/job-tracking` finalizer. A finished pod is first recorded in
//!    `status.uncountedTerminatedPods` (with the interim condition of step 2), then its finalizer
//!    is removed, then it moves into `succeeded`/`failed` (Indexed: `completedIndexes`,
//!    `failedIndexes`). A restart between the steps finds the uids in the status, so no result is
//!    lost or counted twice. Once nothing is uncounted or terminating, the final `Complete`
//!    (with `completionTime`) or `Failed` condition follows.
//!
//! Pods left holding the finalizer without a live, unfinished Job (orphaned, released, or of a
//! deleted Job) are cleaned by a second queue ([`OrphanPods`], `syncOrphanPod`).

pub mod indexed;
pub mod pod_failure_policy;
pub mod success_policy;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::controller_ref_manager::{Claimant, claim_adding_finalizers};
use crate::controller_utils::{Expectations, SLOW_START_INITIAL_BATCH_SIZE, pod_from_template, slow_start_batch};
use crate::util::{
    Clock, controller_of, is_pod_ready, labels_of, name_of, new_controller_ref, pod_phase, selector_of, system_clock,
    time, uid_of,
};
use indexed::{
    completion_index, format_indexes, index_absolute_failure_count, index_failure_count, parse_indexes,
    stamp_failure_counts, stamp_index,
};
use pod_failure_policy::{actions, match_pod_failure_policy};
use skiff_runtime::api::{
    ApiClient, ApiClientExt, ApiError, DeleteOptions, NAMESPACE_TERMINATING_CAUSE, PatchType, has_status_cause,
    is_not_found, resource_of,
};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, EventRecorder, reasons};
use skiff_runtime::informer::{Informer, OWNER_UID_INDEX, ResourceEventHandler, SharedInformerFactory, key_of};
use skiff_runtime::workqueue::WorkQueue;
use success_policy::{REASON_SUCCESS_POLICY, match_success_policy};

/// The finalizer the controller puts on every pod it creates, so that no pod's result is lost.
pub const JOB_TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The first delay before a failed pod is replaced (`DefaultJobPodFailureBackOff`).
pub const DEFAULT_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(10);
/// The longest delay before a failed pod is replaced (`MaxJobPodFailureBackOff`).
pub const MAX_POD_FAILURE_BACKOFF: Duration = Duration::from_secs(360);
/// Most pods created or deleted by one sync (`MaxPodCreateDeletePerSync`).
pub const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;
/// Most pods recorded in `uncountedTerminatedPods` by one sync (`MaxUncountedPods`), which keeps
/// the status small and one big Job from starving the others.
pub const MAX_UNCOUNTED_PODS: usize = 500;
/// The pod index of pods with no controller, by namespace: the orphans a Job may adopt.
const ORPHANS_BY_NAMESPACE: &str = "jobOrphansByNamespace";

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
    /// A `FailJob` rule of the pod failure policy matched.
    pub const POD_FAILURE_POLICY: &str = "PodFailurePolicy";
    /// More indexes failed than `maxFailedIndexes`.
    pub const MAX_FAILED_INDEXES_EXCEEDED: &str = "MaxFailedIndexesExceeded";
    /// Every index finished and some failed (`backoffLimitPerIndex`).
    pub const FAILED_INDEXES: &str = "FailedIndexes";
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
    orphans: Arc<OrphanPods>,
    recorder: EventRecorder,
    clock: Clock,
}

struct Handlers {
    jobs: Arc<Informer<Job>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<WorkQueue<String>>,
    orphans: Arc<WorkQueue<String>>,
    expectations: Arc<Expectations>,
    finalizers: Arc<FinalizerExpectations>,
}

/// `resolveControllerRef`: the Job a pod's controller reference points to, if it still exists
/// with that uid.
fn resolve_job(jobs: &Informer<Job>, pod: &Pod) -> Option<Arc<Job>> {
    let cref = controller_of(&pod.metadata)?;
    if cref.kind != "Job" || cref.api_version != "batch/v1" {
        return None;
    }
    let job = jobs.store().get_namespaced(pod.metadata.namespace.as_deref(), &cref.name)?;
    (uid_of(&job.metadata) == cref.uid).then_some(job)
}

/// Whether a Job's selector selects `labels`; a missing, empty or invalid selector selects
/// nothing, as in `getPodJobs`.
fn job_selects(job: &Job, labels: &BTreeMap<String, String>) -> bool {
    job.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .filter(|s| !crate::util::selects_everything(s))
        .and_then(|s| selector_of(s).ok())
        .is_some_and(|s| s.matches(labels))
}

impl Handlers {
    /// `getPodJobs`: the Jobs whose selector matches an orphan pod (they may adopt it).
    fn enqueue_matching_jobs(&self, pod: &Pod) {
        let labels = labels_of(&pod.metadata);
        for job in self.jobs.store().list_namespace(pod.metadata.namespace.as_deref().unwrap_or_default()) {
            if job_selects(&job, &labels) {
                self.queue.add(key_of(job.as_ref()));
            }
        }
    }

    /// A pod with the tracking finalizer and no Job that will remove it goes to the orphan queue.
    fn enqueue_if_orphaned(&self, pod: &Pod) {
        if has_finalizer(pod) {
            self.orphans.add(key_of(pod));
        }
    }
}

impl ResourceEventHandler<Pod> for Handlers {
    fn on_add(&self, pod: &Arc<Pod>) {
        if controller_of(&pod.metadata).is_some() {
            match resolve_job(&self.jobs, pod) {
                Some(job) => {
                    let key = key_of(job.as_ref());
                    if pod.metadata.deletion_timestamp.is_some() {
                        self.expectations.deletion_observed(&key, &key_of(pod.as_ref()));
                    } else {
                        self.expectations.creation_observed(&key);
                    }
                    self.queue.add(key);
                }
                None => self.enqueue_if_orphaned(pod),
            }
            return;
        }
        self.enqueue_if_orphaned(pod);
        if pod.metadata.deletion_timestamp.is_none() {
            self.enqueue_matching_jobs(pod);
        }
    }

    fn on_update(&self, old: &Arc<Pod>, cur: &Arc<Pod>) {
        if old.metadata.resource_version == cur.metadata.resource_version {
            return;
        }
        let ref_changed = controller_of(&old.metadata) != controller_of(&cur.metadata);
        if ref_changed && let Some(old_job) = resolve_job(&self.jobs, old) {
            self.queue.add(key_of(old_job.as_ref()));
        }
        if let Some(job) = resolve_job(&self.jobs, cur) {
            let key = key_of(job.as_ref());
            if !has_finalizer(cur) {
                self.finalizers.observed(&key, uid_of(&cur.metadata));
            }
            if cur.metadata.deletion_timestamp.is_some() && old.metadata.deletion_timestamp.is_none() {
                self.expectations.deletion_observed(&key, &key_of(cur.as_ref()));
            }
            if is_finished(&job) {
                self.enqueue_if_orphaned(cur);
            }
            self.queue.add(key);
            return;
        }
        self.enqueue_if_orphaned(cur);
        if controller_of(&cur.metadata).is_none() && (ref_changed || old.metadata.labels != cur.metadata.labels) {
            self.enqueue_matching_jobs(cur);
        }
    }

    fn on_delete(&self, pod: &Arc<Pod>) {
        if let Some(job) = resolve_job(&self.jobs, pod) {
            let key = key_of(job.as_ref());
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
        // `cleanupPodFinalizers`: the deleted Job's pods must not keep its finalizer.
        for pod in self.pods.store().by_index(OWNER_UID_INDEX, uid_of(&job.metadata)) {
            self.enqueue_if_orphaned(&pod);
        }
    }
}

/// `syncOrphanPod`: the queue of pods holding the tracking finalizer whose Job will not remove
/// it — no controller, a controller that is not a Job, a deleted Job or a finished one. Keys are
/// pod keys (`namespace/name`).
pub struct OrphanPods {
    api: Arc<dyn ApiClient>,
    jobs: Arc<Informer<Job>>,
    pods: Arc<Informer<Pod>>,
    queue: Arc<WorkQueue<String>>,
}

impl OrphanPods {
    /// The orphan pods' work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// Removes the tracking finalizer of the pod `key` if it is still orphaned.
    ///
    /// # Errors
    /// The patch's error other than NotFound (a 409 is retried by the queue).
    pub async fn sync_orphan_pod(&self, key: &str) -> ReconcileResult {
        let Some(pod) = self.pods.store().get(key) else { return Ok(Action::AwaitChange) };
        if !has_finalizer(&pod) {
            return Ok(Action::AwaitChange);
        }
        if let Some(cref) = controller_of(&pod.metadata) {
            if cref.kind != "Job" || cref.api_version != "batch/v1" {
                return Ok(Action::AwaitChange);
            }
            if resolve_job(&self.jobs, &pod).is_some_and(|j| !is_finished(&j)) {
                // Adopted meanwhile: its Job counts it.
                return Ok(Action::AwaitChange);
            }
        }
        match remove_tracking_finalizer(self.api.as_ref(), &pod).await {
            Err(e) if !is_not_found(&e) => Err(e.into()),
            _ => Ok(Action::AwaitChange),
        }
    }
}

#[async_trait]
impl Reconciler for OrphanPods {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_orphan_pod(key).await
    }
}

/// Removes the tracking finalizer with a JSON patch that tests it is still at its place in the
/// list: a concurrent status or label change does not conflict with it (as Kubernetes'
/// `$deleteFromPrimitiveList` patch does not), and a concurrent finalizer change fails it.
async fn remove_tracking_finalizer(api: &dyn ApiClient, pod: &Pod) -> Result<(), ApiError> {
    let Some(i) = pod.metadata.finalizers.iter().flatten().position(|f| f == JOB_TRACKING_FINALIZER) else {
        return Ok(());
    };
    let path = format!("/metadata/finalizers/{i}");
    let patch = json!([
        {"op": "test", "path": path, "value": JOB_TRACKING_FINALIZER},
        {"op": "remove", "path": path},
    ]);
    api.patch(
        &resource_of::<Pod>(),
        pod.metadata.namespace.as_deref(),
        name_of(&pod.metadata),
        PatchType::Json,
        &patch,
        None,
    )
    .await
    .map(|_| ())
}

fn has_finalizer(pod: &Pod) -> bool {
    pod.metadata.finalizers.iter().flatten().any(|f| f == JOB_TRACKING_FINALIZER)
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod_phase(pod), "Succeeded" | "Failed")
}

/// `onlyReplaceFailedPods`: with `podReplacementPolicy: Failed` (implied by a pod failure
/// policy) a terminating pod is neither failed nor replaced until it reaches the Failed phase.
fn only_replace_failed(spec: &JobSpec) -> bool {
    spec.pod_replacement_policy.as_deref() == Some("Failed") || spec.pod_failure_policy.is_some()
}

/// `isPodFailed`: Failed, or (unless only failed pods are replaced) deleted before it succeeded
/// — such a pod may never reach a phase, e.g. when its node is gone.
fn is_pod_failed(pod: &Pod, only_failed: bool) -> bool {
    match pod_phase(pod) {
        "Failed" => true,
        "Succeeded" => false,
        _ => !only_failed && pod.metadata.deletion_timestamp.is_some(),
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

/// What is left of the backoff after `failures` failures, the last finished at `last`.
fn remaining_backoff(failures: i32, last: Option<Timestamp>, now: Timestamp) -> Duration {
    let Some(last) = last else { return Duration::ZERO };
    let wait = failure_backoff(failures).as_secs() as i64 - (now.as_second() - last.as_second());
    Duration::from_secs(wait.max(0) as u64)
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

/// `ensureJobConditionStatus`: sets a condition's status, reason and message (a new
/// condition only when true); whether anything changed.
fn set_condition(
    status: &mut JobStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    let value = if value { "True" } else { "False" };
    let list = status.conditions.get_or_insert_with(Vec::new);
    let fresh = JobCondition {
        type_: type_.into(),
        status: value.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(time(now)),
        last_transition_time: Some(time(now)),
    };
    if let Some(c) = list.iter_mut().find(|c| c.type_ == type_) {
        if c.status == value && c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message) {
            return false;
        }
        *c = fresh;
        return true;
    }
    if value == "False" {
        return false;
    }
    list.push(fresh);
    true
}

/// The condition a finishing Job gets (`FailureTarget` or `SuccessCriteriaMet`) and, once its
/// pods are gone, the final one (`Failed` or `Complete`) with the same reason and message.
#[derive(Debug, Clone)]
struct Finish {
    success: bool,
    reason: String,
    message: String,
}

impl Finish {
    fn failure(reason: &str, message: &str) -> Self {
        Self { success: false, reason: reason.into(), message: message.into() }
    }

    fn success(reason: &str, message: &str) -> Self {
        Self { success: true, reason: reason.into(), message: message.into() }
    }

    fn of(c: &JobCondition, success: bool) -> Self {
        Self { success, reason: c.reason.clone().unwrap_or_default(), message: c.message.clone().unwrap_or_default() }
    }

    fn interim(&self) -> &'static str {
        if self.success { conditions::SUCCESS_CRITERIA_MET } else { conditions::FAILURE_TARGET }
    }

    fn terminal(&self) -> &'static str {
        if self.success { conditions::COMPLETE } else { conditions::FAILED }
    }
}

/// `getFailJobMessage`: the message of the first failed pod matching a `FailJob` rule.
fn fail_job_message(spec: &JobSpec, pods: &[Arc<Pod>], only_failed: bool) -> Option<String> {
    let policy = spec.pod_failure_policy.as_ref()?;
    pods.iter()
        .filter(|p| is_pod_failed(p, only_failed))
        .find_map(|p| match_pod_failure_policy(Some(policy), p).fail_job_message)
}

/// `pastBackoffLimitOnFailure`: with `restartPolicy: OnFailure` failures are container
/// restarts inside running pods; their sum reaching `backoffLimit` fails the Job.
fn past_backoff_limit_on_failure(spec: &JobSpec, pods: &[Arc<Pod>], backoff_limit: i32) -> bool {
    if spec.template.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) != Some("OnFailure") {
        return false;
    }
    let restarts: i32 = pods
        .iter()
        .filter(|p| matches!(pod_phase(p), "Running" | "Pending"))
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| s.init_container_statuses.iter().flatten().chain(s.container_statuses.iter().flatten()))
        .map(|c| c.restart_count)
        .sum();
    if backoff_limit == 0 { restarts > 0 } else { restarts >= backoff_limit }
}

/// `isIndexFailed`: a counted failure of a pod whose index already used up
/// `backoffLimitPerIndex`, or a `FailIndex` match, fails the index.
fn is_index_failed(pod: &Pod, spec: &JobSpec, only_failed: bool, limit: i32) -> bool {
    if !is_pod_failed(pod, only_failed) {
        return false;
    }
    let m = match_pod_failure_policy(spec.pod_failure_policy.as_ref(), pod);
    m.is(actions::FAIL_INDEX) || (m.count_failed && index_failure_count(pod) >= limit)
}

/// Go's JSON drops the zero values of `JobStatus`'s non-pointer fields, so the status read back
/// has none; a status compared or written is normalised the same way, so that an unchanged
/// status is never written again.
fn normalize(status: &mut JobStatus) {
    for f in [&mut status.active, &mut status.succeeded, &mut status.failed] {
        if *f == Some(0) {
            *f = None;
        }
    }
    if status.completed_indexes.as_deref() == Some("") {
        status.completed_indexes = None;
    }
    let u = status.uncounted_terminated_pods.get_or_insert_with(Default::default);
    for list in [&mut u.succeeded, &mut u.failed] {
        if list.as_ref().is_some_and(Vec::is_empty) {
            *list = None;
        }
    }
}

/// `cleanUncountedPodsWithoutFinalizers`: uncounted pods whose finalizer is gone move into the
/// counters; whether anything moved.
fn clean_uncounted(status: &mut JobStatus, with_finalizer: &HashSet<String>) -> bool {
    let u = status.uncounted_terminated_pods.get_or_insert_with(Default::default);
    let mut moved = (0, 0);
    for (list, n) in [(&mut u.succeeded, &mut moved.0), (&mut u.failed, &mut moved.1)] {
        let before = list.as_ref().map_or(0, Vec::len);
        if let Some(l) = list.as_mut() {
            l.retain(|uid| with_finalizer.contains(uid));
        }
        *n = (before - list.as_ref().map_or(0, Vec::len)) as i32;
    }
    status.succeeded = Some(status.succeeded.unwrap_or(0) + moved.0);
    status.failed = Some(status.failed.unwrap_or(0) + moved.1);
    moved != (0, 0)
}

/// What `manage` did.
#[derive(Debug, Default)]
struct Managed {
    /// Active pods after the creates and deletes.
    active: i64,
    /// Pods deleted (now terminating), and how many of them were ready.
    deleted: i32,
    deleted_ready: i32,
    /// When to look again (a pod failure backoff).
    requeue: Option<Duration>,
}

/// The pods and counts of one sync that `manage` works from.
struct ManageInput<'a> {
    spec: &'a JobSpec,
    active: &'a [Arc<Pod>],
    pods: &'a [Arc<Pod>],
    terminating: i32,
    succeeded: i32,
    failed: i32,
    succeeded_indexes: &'a BTreeSet<i32>,
    failed_indexes: Option<&'a BTreeSet<i32>>,
    delayed: &'a HashMap<i32, Arc<Pod>>,
    only_failed: bool,
    now: Timestamp,
}

/// `activePodsForRemoval`: for Indexed Jobs first the pods without a valid index and all but one
/// pod of a repeated index; then, up to `at_least`, the newest (highest index) first.
fn active_pods_for_removal(spec: &JobSpec, active: &[Arc<Pod>], at_least: usize) -> Vec<Arc<Pod>> {
    let newest_first = |pods: &mut Vec<Arc<Pod>>| {
        pods.sort_by_key(|p| {
            std::cmp::Reverse((completion_index(p), p.metadata.creation_timestamp.as_ref().map(|t| t.0)))
        })
    };
    let mut rm = Vec::new();
    let mut left = Vec::new();
    if spec.completion_mode.as_deref() == Some("Indexed") {
        let completions = spec.completions.unwrap_or(0);
        let mut by_index: BTreeMap<i32, Vec<Arc<Pod>>> = BTreeMap::new();
        for p in active {
            match completion_index(p).filter(|i| *i < completions) {
                Some(i) => by_index.entry(i).or_default().push(p.clone()),
                None => rm.push(p.clone()),
            }
        }
        for (_, mut same) in by_index {
            // Keep the oldest of a repeated index.
            newest_first(&mut same);
            let keep = same.pop().expect("non-empty group");
            rm.extend(same);
            left.push(keep);
        }
    } else {
        left = active.to_vec();
    }
    if rm.len() < at_least {
        newest_first(&mut left);
        rm.extend(left.into_iter().take(at_least - rm.len()));
    }
    rm
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
        pods.store().add_indexer(ORPHANS_BY_NAMESPACE, |p: &Pod| {
            if controller_of(&p.metadata).is_none() {
                p.metadata.namespace.iter().cloned().collect()
            } else {
                Vec::new()
            }
        });
        let expectations = Arc::new(Expectations::new());
        let finalizers = Arc::new(FinalizerExpectations::default());
        let orphans = Arc::new(OrphanPods {
            api: api.clone(),
            jobs: jobs.clone(),
            pods: pods.clone(),
            queue: Arc::new(WorkQueue::new()),
        });
        let handlers = Arc::new(Handlers {
            jobs: jobs.clone(),
            pods: pods.clone(),
            queue: queue.clone(),
            orphans: orphans.queue.clone(),
            expectations: expectations.clone(),
            finalizers: finalizers.clone(),
        });
        jobs.add_event_handler(handlers.clone());
        pods.add_event_handler(handlers);
        Arc::new(Self { api, jobs, pods, queue, expectations, finalizers, orphans, recorder, clock: system_clock() })
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

    /// The orphan pods' reconciler and queue, run beside the controller.
    pub fn orphan_pods(&self) -> &Arc<OrphanPods> {
        &self.orphans
    }

    /// The expectations (tests).
    pub fn expectations(&self) -> &Arc<Expectations> {
        &self.expectations
    }

    /// Removes the tracking finalizer of every pod in `pods`, each expected to be observed;
    /// the uids removed (or already gone) and the first other error.
    async fn remove_finalizers(&self, key: &str, pods: &[Arc<Pod>]) -> (HashSet<String>, Option<ApiError>) {
        let mut removed = HashSet::new();
        let mut first = None;
        for pod in pods {
            let uid = uid_of(&pod.metadata);
            self.finalizers.expect(key, uid);
            match remove_tracking_finalizer(self.api.as_ref(), pod).await {
                Ok(()) => {
                    removed.insert(uid.to_string());
                }
                Err(e) => {
                    self.finalizers.observed(key, uid);
                    if is_not_found(&e) {
                        removed.insert(uid.to_string());
                    } else {
                        first.get_or_insert(e);
                    }
                }
            }
        }
        (removed, first)
    }

    async fn write_status(&self, job: &Job, status: &JobStatus) -> Result<Job, ApiError> {
        let mut updated = job.clone();
        let mut status = status.clone();
        normalize(&mut status);
        updated.status = Some(status);
        self.api.update_status_typed(&updated).await
    }

    /// Creates one pod of `job` (of `index` for Indexed Jobs; with `backoffLimitPerIndex`
    /// carrying the failure counts of the pod it replaces).
    async fn create_pod(
        &self,
        job: &Job,
        index: Option<i32>,
        per_index: bool,
        replaced: Option<(&Pod, bool)>,
    ) -> Result<(), ApiError> {
        let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let mut pod = pod_from_template(&template, ns, name_of(&job.metadata), new_controller_ref(job));
        let finalizers = pod.metadata.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == JOB_TRACKING_FINALIZER) {
            finalizers.push(JOB_TRACKING_FINALIZER.into());
        }
        if let Some(i) = index {
            stamp_index(&mut pod, name_of(&job.metadata), i);
            if per_index {
                stamp_failure_counts(&mut pod, replaced);
            }
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

    /// Deletes `victims` (expecting their deletions when `expect`); how many were deleted (or
    /// already gone), how many of those were ready, and the first other error.
    async fn delete_pods(
        &self,
        job: &Job,
        key: &str,
        victims: &[Arc<Pod>],
        expect: bool,
    ) -> (i32, i32, Option<ApiError>) {
        if victims.is_empty() {
            return (0, 0, None);
        }
        if expect {
            self.expectations.expect_deletions(key, victims.iter().map(|p| key_of(p.as_ref())).collect());
        }
        let (mut deleted, mut ready, mut first) = (0, 0, None);
        for pod in victims {
            let name = name_of(&pod.metadata);
            let result =
                self.api.delete_typed::<Pod>(pod.metadata.namespace.as_deref(), name, &DeleteOptions::default()).await;
            match result {
                Ok(()) => self.recorder.event_for(
                    job,
                    EVENT_TYPE_NORMAL,
                    reasons::SUCCESSFUL_DELETE,
                    &format!("Deleted pod: {name}"),
                ),
                Err(e) => {
                    if expect {
                        self.expectations.deletion_observed(key, &key_of(pod.as_ref()));
                    }
                    if !is_not_found(&e) {
                        self.recorder.event_for(
                            job,
                            EVENT_TYPE_WARNING,
                            reasons::FAILED_DELETE,
                            &format!("Error deleting: {}", e.message),
                        );
                        first.get_or_insert(e);
                        continue;
                    }
                }
            }
            deleted += 1;
            if is_pod_ready(pod) {
                ready += 1;
            }
        }
        (deleted, ready, first)
    }

    /// The pods the Job controls.
    fn owned_pods(&self, job: &Job) -> Vec<Arc<Pod>> {
        let uid = uid_of(&job.metadata);
        let mut pods: Vec<Arc<Pod>> = self
            .pods
            .store()
            .by_index(OWNER_UID_INDEX, uid)
            .into_iter()
            .filter(|p| controller_of(&p.metadata).is_some_and(|r| r.uid == uid))
            .collect();
        pods.sort_by(|a, b| name_of(&a.metadata).cmp(name_of(&b.metadata)));
        pods
    }

    /// `getPodsForJob`: the pods the Job controls after claiming — orphans its selector matches
    /// are adopted (with the tracking finalizer, assumed present for this sync), controlled pods
    /// it no longer matches are released.
    async fn pods_for_job(&self, job: &Job) -> Result<Vec<Arc<Pod>>, ApiError> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let mut candidates = self.owned_pods(job);
        let mut orphans: Vec<Arc<Pod>> = self
            .pods
            .store()
            .by_index(ORPHANS_BY_NAMESPACE, ns)
            .into_iter()
            .filter(|p| job_selects(job, &labels_of(&p.metadata)))
            .collect();
        orphans.sort_by(|a, b| name_of(&a.metadata).cmp(name_of(&b.metadata)));
        candidates.extend(orphans);
        let claimant = Claimant {
            controller_ref: new_controller_ref(job),
            namespace: job.metadata.namespace.clone(),
            being_deleted: job.metadata.deletion_timestamp.is_some(),
        };
        let api = self.api.clone();
        let (name, uid) = (name_of(&job.metadata).to_string(), uid_of(&job.metadata).to_string());
        let ns_owned = ns.to_string();
        let can_adopt = || async move {
            let fresh: Job = api.get_typed(Some(ns_owned.as_str()), &name).await?;
            if uid_of(&fresh.metadata) != uid {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "original Job {ns_owned}/{name} is gone: got uid {}, wanted {uid}",
                        uid_of(&fresh.metadata)
                    ),
                ));
            }
            if fresh.metadata.deletion_timestamp.is_some() {
                return Err(ApiError::new(409, "Conflict", format!("{ns_owned}/{name} has just been deleted")));
            }
            Ok(())
        };
        let claimed = claim_adding_finalizers(
            self.api.as_ref(),
            &resource_of::<Pod>(),
            &claimant,
            candidates,
            |p: &Arc<Pod>| &p.metadata,
            |p: &Arc<Pod>| job_selects(job, &labels_of(&p.metadata)),
            can_adopt,
            &[JOB_TRACKING_FINALIZER],
        )
        .await?;
        let job_uid = uid_of(&job.metadata);
        Ok(claimed
            .into_iter()
            .map(|p| {
                let adopted = !p.metadata.owner_references.iter().flatten().any(|r| r.uid == job_uid);
                if adopted && !has_finalizer(&p) {
                    let mut copy = p.as_ref().clone();
                    copy.metadata.finalizers.get_or_insert_with(Vec::new).push(JOB_TRACKING_FINALIZER.into());
                    Arc::new(copy)
                } else {
                    p
                }
            })
            .collect())
    }

    /// `syncJob` for one key.
    pub async fn sync_job(&self, key: &str) -> ReconcileResult {
        let Some(job) = self.jobs.store().get(key) else {
            self.expectations.delete_expectations(key);
            self.finalizers.forget(key);
            return Ok(Action::AwaitChange);
        };
        if is_finished(&job) {
            // A finished Job keeps no pod from being removed (`cleanupPodFinalizers`).
            let held: Vec<Arc<Pod>> = self
                .owned_pods(&job)
                .into_iter()
                .filter(|p| has_finalizer(p) && !self.finalizers.pending(key, uid_of(&p.metadata)))
                .collect();
            if let (_, Some(e)) = self.remove_finalizers(key, &held).await {
                return Err(e.into());
            }
            return Ok(Action::AwaitChange);
        }
        let spec = job.spec.clone().unwrap_or_default();
        if !matches!(spec.completion_mode.as_deref(), None | Some("NonIndexed" | "Indexed")) {
            self.recorder.event_for(
                job.as_ref(),
                EVENT_TYPE_WARNING,
                "UnknownCompletionMode",
                "Skipped Job sync because completion mode is unknown",
            );
            return Ok(Action::AwaitChange);
        }
        let now = (self.clock)();
        // Checked before the pods are read: a pod created meanwhile defers the sync instead of
        // sneaking past the count.
        let satisfied = self.expectations.satisfied(key);
        let pods = self.pods_for_job(&job).await?;

        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let completions = spec.completions.unwrap_or(0);
        let backoff_limit = spec.backoff_limit.unwrap_or(6);
        let suspended = spec.suspend == Some(true);
        let only_failed = only_replace_failed(&spec);
        let per_index = spec.backoff_limit_per_index.filter(|_| indexed);
        let policy = spec.pod_failure_policy.as_ref();
        let original = job.status.clone().unwrap_or_default();
        let mut status = original.clone();
        let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
        let unc_succeeded: HashSet<String> = uncounted.succeeded.iter().flatten().cloned().collect();
        let unc_failed: HashSet<String> = uncounted.failed.iter().flatten().cloned().collect();
        let valid_index = |p: &Pod| !indexed || completion_index(p).is_some_and(|i| i < completions);

        // Pods whose result is not in the status yet (the finalizer is still on and its removal
        // not already sent).
        let mut tracked: Vec<&Arc<Pod>> =
            pods.iter().filter(|p| has_finalizer(p) && !self.finalizers.pending(key, uid_of(&p.metadata))).collect();
        if indexed {
            tracked.sort_by_key(|p| completion_index(p));
        }
        let with_finalizer: HashSet<String> = tracked.iter().map(|p| uid_of(&p.metadata).to_string()).collect();
        let active: Vec<Arc<Pod>> =
            pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none() && !is_terminal(p)).cloned().collect();
        let mut terminating =
            pods.iter().filter(|p| p.metadata.deletion_timestamp.is_some() && !is_terminal(p)).count() as i32;
        let mut ready = active.iter().filter(|p| is_pod_ready(p)).count() as i32;
        let new_succeeded = tracked
            .iter()
            .filter(|p| pod_phase(p) == "Succeeded" && !unc_succeeded.contains(uid_of(&p.metadata)) && valid_index(p))
            .count() as i32;
        let new_failed = tracked
            .iter()
            .filter(|p| is_pod_failed(p, only_failed) && !unc_failed.contains(uid_of(&p.metadata)) && valid_index(p))
            .filter(|p| match_pod_failure_policy(policy, p).count_failed)
            .count() as i32;
        let mut succeeded = status.succeeded.unwrap_or(0) + new_succeeded + unc_succeeded.len() as i32;
        let failed = status.failed.unwrap_or(0) + new_failed + unc_failed.len() as i32;

        if status.start_time.is_none() && !suspended {
            status.start_time = Some(time(now));
        }
        let mut requeue: Option<Duration> = None;
        let mut requeue_at = |d: Duration| requeue = Some(requeue.map_or(d, |r: Duration| r.min(d)));

        // 2. Finishing.
        let mut finish = if let Some(c) = condition(&status, conditions::SUCCESS_CRITERIA_MET) {
            Some(Finish::of(c, true))
        } else if let Some(c) = condition(&status, conditions::FAILURE_TARGET) {
            Some(Finish::of(c, false))
        } else {
            fail_job_message(&spec, &pods, only_failed).map(|m| Finish::failure(job_reasons::POD_FAILURE_POLICY, &m))
        };
        if finish.is_none() {
            let started = status.start_time.as_ref().map(|t| t.0);
            let deadline = spec.active_deadline_seconds.zip(started).filter(|_| !suspended);
            if failed > backoff_limit || past_backoff_limit_on_failure(&spec, &pods, backoff_limit) {
                finish = Some(Finish::failure(
                    job_reasons::BACKOFF_LIMIT_EXCEEDED,
                    "Job has reached the specified backoff limit",
                ));
            } else if let Some((secs, start)) = deadline {
                let left = secs - (now.as_second() - start.as_second());
                if left <= 0 {
                    finish = Some(Finish::failure(
                        job_reasons::DEADLINE_EXCEEDED,
                        "Job was active longer than specified deadline",
                    ));
                } else {
                    requeue_at(Duration::from_secs(left as u64));
                }
            }
        }
        let prev_succeeded_indexes = parse_indexes(status.completed_indexes.as_deref(), completions);
        let mut succeeded_indexes = prev_succeeded_indexes.clone();
        let mut failed_indexes = None;
        let mut delayed = HashMap::new();
        if indexed {
            succeeded_indexes.extend(
                pods.iter()
                    .filter(|p| pod_phase(p) == "Succeeded" && has_finalizer(p))
                    .filter_map(|p| completion_index(p))
                    .filter(|i| *i < completions),
            );
            succeeded = succeeded_indexes.len() as i32;
            if let Some(limit) = per_index {
                let mut failed_set = parse_indexes(status.failed_indexes.as_deref(), completions);
                failed_set.extend(
                    pods.iter()
                        .filter(|p| has_finalizer(p) && is_index_failed(p, &spec, only_failed, limit))
                        .filter_map(|p| completion_index(p))
                        .filter(|i| *i < completions),
                );
                if finish.is_none() {
                    if spec.max_failed_indexes.is_some_and(|m| failed_set.len() as i32 > m) {
                        finish = Some(Finish::failure(
                            job_reasons::MAX_FAILED_INDEXES_EXCEEDED,
                            "Job has exceeded the specified maximal number of failed indexes",
                        ));
                    } else if !failed_set.is_empty()
                        && (failed_set.len() + succeeded_indexes.len()) as i32 >= completions
                    {
                        finish = Some(Finish::failure(job_reasons::FAILED_INDEXES, "Job has failed indexes"));
                    }
                }
                delayed = delayed_deletion_per_index(&tracked, &active, &succeeded_indexes, &failed_set, only_failed);
                failed_indexes = Some(failed_set);
            }
            if finish.is_none()
                && let Some(m) = match_success_policy(spec.success_policy.as_ref(), completions, &succeeded_indexes)
            {
                finish = Some(Finish::success(REASON_SUCCESS_POLICY, &m));
            }
        }

        // 3. Manage pods.
        let mut active_count = active.len() as i64;
        let mut manage_err = None;
        let mut suspend_changed = false;
        if finish.is_some() {
            let (deleted, deleted_ready, err) = self.delete_pods(&job, key, &active, false).await;
            if deleted as usize != active.len() || !satisfied {
                // Pods may remain, or be missing from the cache: finish in a later sync.
                finish = None;
            }
            active_count -= deleted as i64;
            terminating += deleted;
            ready -= deleted_ready;
            manage_err = err;
        } else {
            let mut managed_now = false;
            if satisfied && job.metadata.deletion_timestamp.is_none() {
                managed_now = true;
                let input = ManageInput {
                    spec: &spec,
                    active: &active,
                    pods: &pods,
                    terminating,
                    succeeded,
                    failed,
                    succeeded_indexes: &succeeded_indexes,
                    failed_indexes: failed_indexes.as_ref(),
                    delayed: &delayed,
                    only_failed,
                    now,
                };
                let (managed, err) = self.manage(&job, key, &input).await;
                active_count = managed.active;
                terminating += managed.deleted;
                ready -= managed.deleted_ready;
                if let Some(d) = managed.requeue {
                    requeue_at(d);
                }
                manage_err = err;
            }
            let complete = match spec.completions {
                None => succeeded > 0 && active_count == 0,
                Some(c) => succeeded >= c && active_count == 0,
            };
            if complete {
                finish = Some(Finish::success(
                    job_reasons::COMPLETIONS_REACHED,
                    "Reached expected number of succeeded pods",
                ));
            } else if managed_now {
                if suspended {
                    if set_condition(
                        &mut status,
                        conditions::SUSPENDED,
                        true,
                        job_reasons::JOB_SUSPENDED,
                        "Job suspended",
                        now,
                    ) {
                        suspend_changed = true;
                        self.recorder.event_for(job.as_ref(), EVENT_TYPE_NORMAL, "Suspended", "Job suspended");
                    }
                } else if set_condition(
                    &mut status,
                    conditions::SUSPENDED,
                    false,
                    job_reasons::JOB_RESUMED,
                    "Job resumed",
                    now,
                ) {
                    suspend_changed = true;
                    self.recorder.event_for(job.as_ref(), EVENT_TYPE_NORMAL, "Resumed", "Job resumed");
                    // activeDeadlineSeconds counts continuous activity: it starts over.
                    status.start_time = Some(time(now));
                }
            }
        }
        status.active = Some(active_count.max(0) as i32);
        status.ready = Some(ready.max(0));
        status.terminating = Some(terminating.max(0));

        // 4. Pod tracking.
        let mut needs_flush = clean_uncounted(&mut status, &with_finalizer);
        let u = status.uncounted_terminated_pods.clone().unwrap_or_default();
        let mut unc_s: Vec<String> = u.succeeded.unwrap_or_default();
        let mut unc_f: Vec<String> = u.failed.unwrap_or_default();
        let failing = finish.as_ref().is_some_and(|f| !f.success);
        let mut to_finalize = Vec::new();
        let mut reached_max = false;
        for pod in tracked.iter().copied() {
            let pod_uid = uid_of(&pod.metadata).to_string();
            let considered_failed = is_pod_failed(pod, only_failed);
            let waits_for_replacement = completion_index(pod)
                .and_then(|i| delayed.get(&i))
                .is_some_and(|d: &Arc<Pod>| uid_of(&d.metadata) == pod_uid);
            let can_remove = job.metadata.deletion_timestamp.is_some()
                || finish.is_some()
                || pod_phase(pod) == "Succeeded"
                || (considered_failed && !waits_for_replacement);
            if !can_remove {
                continue;
            }
            to_finalize.push(pod.clone());
            if pod_phase(pod) == "Succeeded" && !unc_failed.contains(&pod_uid) {
                if indexed {
                    // The index is enough to never count a success twice.
                    if let Some(i) = completion_index(pod).filter(|i| *i < completions)
                        && !prev_succeeded_indexes.contains(&i)
                    {
                        needs_flush = true;
                    }
                } else if !unc_s.contains(&pod_uid) {
                    unc_s.push(pod_uid);
                    needs_flush = true;
                }
            } else if (considered_failed || failing)
                && !unc_f.contains(&pod_uid)
                && valid_index(pod)
                && match_pod_failure_policy(policy, pod).count_failed
            {
                // A failing Job counts every pod it stops as failed.
                unc_f.push(pod_uid);
                needs_flush = true;
            }
            let recorded =
                succeeded_indexes.len().saturating_sub(prev_succeeded_indexes.len()) + unc_s.len() + unc_f.len();
            if recorded >= MAX_UNCOUNTED_PODS {
                reached_max = true;
                break;
            }
        }
        if indexed {
            let text = format_indexes(&succeeded_indexes);
            if status.completed_indexes.as_deref().unwrap_or_default() != text {
                needs_flush = true;
            }
            status.succeeded = Some(succeeded_indexes.len() as i32);
            status.completed_indexes = Some(text);
            let failed_text = failed_indexes.as_ref().map(format_indexes);
            if status.failed_indexes != failed_text {
                status.failed_indexes = failed_text;
                needs_flush = true;
            }
        }
        if let Some(f) = &finish
            && condition(&status, f.interim()).is_none()
        {
            // The interim condition is recorded before the finalizers go, so that its reason
            // and message (a pod failure policy's names the pod) survive the pods.
            set_condition(&mut status, f.interim(), true, &f.reason, &f.message, now);
            needs_flush = true;
        }
        status.uncounted_terminated_pods =
            Some(UncountedTerminatedPods { succeeded: Some(unc_s), failed: Some(unc_f) });

        let mut current = job.as_ref().clone();
        if needs_flush {
            current = self.write_status(&current, &status).await?;
            needs_flush = false;
        }
        let (removed, rm_err) = self.remove_finalizers(key, &to_finalize).await;
        let still_held: HashSet<String> = with_finalizer.difference(&removed).cloned().collect();
        if clean_uncounted(&mut status, &still_held) {
            needs_flush = true;
        }
        if let Some(e) = rm_err {
            if needs_flush {
                self.write_status(&current, &status).await?;
            }
            return Err(e.into());
        }
        let nothing_uncounted = status
            .uncounted_terminated_pods
            .as_ref()
            .is_none_or(|u| u.succeeded.iter().chain(u.failed.iter()).all(Vec::is_empty));
        let finished_now = !reached_max && nothing_uncounted && terminating == 0 && finish.is_some();
        if finished_now && let Some(f) = &finish {
            set_condition(&mut status, f.terminal(), true, &f.reason, &f.message, now);
            if f.success {
                status.completion_time = Some(time(now));
            }
            needs_flush = true;
        }
        let mut before = original;
        normalize(&mut before);
        let mut after = status.clone();
        normalize(&mut after);
        if needs_flush || suspend_changed || after != before {
            let written = self.write_status(&current, &status).await?;
            if finished_now && let Some(f) = &finish {
                self.record_finished(&written, f);
            }
        }
        if let Some(e) = manage_err {
            return Err(e.into());
        }
        Ok(requeue.map_or(Action::AwaitChange, Action::RequeueAfter))
    }

    /// `recordJobFinished`: the events of a Job that just finished.
    fn record_finished(&self, job: &Job, f: &Finish) {
        if f.success {
            let status = job.status.clone().unwrap_or_default();
            if job.spec.as_ref().and_then(|s| s.completions).is_some_and(|c| status.succeeded.unwrap_or(0) > c) {
                self.recorder.event_for(
                    job,
                    EVENT_TYPE_WARNING,
                    "TooManySucceededPods",
                    "Too many succeeded pods running after completion count reached",
                );
            }
            self.recorder.event_for(job, EVENT_TYPE_NORMAL, job_reasons::COMPLETED, "Job completed");
        } else {
            self.recorder.event_for(job, EVENT_TYPE_WARNING, &f.reason, &f.message);
        }
    }

    /// `manageJob`: deletes the active pods of a suspended Job; otherwise deletes the surplus
    /// (and an Indexed Job's repeated or invalid indexes) or creates the missing pods —
    /// NonIndexed: up to `parallelism` and the remaining completions; Indexed: the lowest
    /// indexes neither succeeded, failed, running nor (with `podReplacementPolicy: Failed`)
    /// terminating — after the pod failure backoff.
    async fn manage(&self, job: &Job, key: &str, input: &ManageInput<'_>) -> (Managed, Option<ApiError>) {
        let spec = input.spec;
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let per_index = spec.backoff_limit_per_index.is_some() && indexed;
        let active = input.active.len() as i64;
        let parallelism = spec.parallelism.unwrap_or(1).max(0) as i64;
        let mut out = Managed { active, ..Default::default() };
        if spec.suspend == Some(true) {
            let (deleted, ready, err) = self.delete_pods(job, key, input.active, true).await;
            out.active -= deleted as i64;
            (out.deleted, out.deleted_ready) = (deleted, ready);
            return (out, err);
        }
        let want = match spec.completions {
            None if input.succeeded > 0 => active,
            None => parallelism,
            Some(c) => (c as i64 - input.succeeded as i64).clamp(0, parallelism),
        };
        let mut victims = active_pods_for_removal(spec, input.active, (active - want).max(0) as usize);
        victims.truncate(MAX_POD_CREATE_DELETE_PER_SYNC);
        if !victims.is_empty() {
            tracing::debug!(job = key, deleting = victims.len(), "too many active pods");
            // Deletion takes precedence: creates wait for the next sync.
            let (deleted, ready, err) = self.delete_pods(job, key, &victims, true).await;
            out.active -= deleted as i64;
            (out.deleted, out.deleted_ready) = (deleted, ready);
            return (out, err);
        }
        let terminating = if input.only_failed { input.terminating as i64 } else { 0 };
        let diff = (want - terminating - active).min(MAX_POD_CREATE_DELETE_PER_SYNC as i64);
        if diff <= 0 {
            return (out, None);
        }
        tracing::debug!(job = key, want, active, creating = diff, "too few active pods");
        if !per_index {
            let last_failure =
                input.pods.iter().filter(|p| is_pod_failed(p, input.only_failed)).filter_map(|p| finish_time(p)).max();
            let wait = remaining_backoff(input.failed, last_failure, input.now);
            if !wait.is_zero() {
                out.requeue = Some(wait);
                return (out, None);
            }
        }
        let mut indexes: Vec<Option<i32>> = vec![None; diff as usize];
        if indexed {
            let mut taken: BTreeSet<i32> = input.succeeded_indexes.clone();
            taken.extend(input.active.iter().filter_map(|p| completion_index(p)));
            if input.only_failed {
                taken.extend(
                    input
                        .pods
                        .iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_some() && !is_terminal(p))
                        .filter_map(|p| completion_index(p)),
                );
            }
            taken.extend(input.failed_indexes.into_iter().flatten());
            let mut pending: Vec<i32> =
                (0..spec.completions.unwrap_or(0)).filter(|i| !taken.contains(i)).take(diff as usize).collect();
            if per_index {
                // Each index waits out its own backoff, counted from its last failed pod.
                let left = |i: &i32| {
                    input.delayed.get(i).map_or(Duration::ZERO, |p| {
                        remaining_backoff(index_absolute_failure_count(p) + 1, finish_time(p), input.now)
                    })
                };
                let soonest = pending.iter().map(left).filter(|d| !d.is_zero()).min();
                pending.retain(|i| left(i).is_zero());
                if pending.is_empty() {
                    out.requeue = soonest;
                    return (out, None);
                }
            }
            indexes = pending.into_iter().map(Some).collect();
        }
        let n = indexes.len();
        if n == 0 {
            return (out, None);
        }
        self.expectations.expect_creations(key, n);
        let next = Mutex::new(indexes.into_iter());
        let policy = spec.pod_failure_policy.as_ref();
        let (successes, err) = slow_start_batch(n, SLOW_START_INITIAL_BATCH_SIZE, || {
            let index = next.lock().expect("index iterator").next().flatten();
            let replaced = index
                .and_then(|i| input.delayed.get(&i))
                .map(|p| (p.as_ref(), match_pod_failure_policy(policy, p).count_failed));
            self.create_pod(job, index, per_index, replaced)
        })
        .await;
        for _ in successes..n {
            self.expectations.creation_observed(key);
        }
        out.active += successes as i64;
        (out, err)
    }
}

/// `getPodsWithDelayedDeletionPerIndex`: per index with no success, failure or running pod, its
/// latest failed pod, whose finalizer stays until a replacement carries the index's failure
/// count forward.
fn delayed_deletion_per_index(
    tracked: &[&Arc<Pod>],
    active: &[Arc<Pod>],
    succeeded: &BTreeSet<i32>,
    failed: &BTreeSet<i32>,
    only_failed: bool,
) -> HashMap<i32, Arc<Pod>> {
    let running: HashSet<i32> = active.iter().filter_map(|p| completion_index(p)).collect();
    let mut out: HashMap<i32, Arc<Pod>> = HashMap::new();
    for pod in tracked.iter().copied().filter(|p| is_pod_failed(p, only_failed)) {
        let Some(i) = completion_index(pod) else { continue };
        if succeeded.contains(&i) || failed.contains(&i) || running.contains(&i) {
            continue;
        }
        let later = |p: &Pod| (index_absolute_failure_count(p), finish_time(p));
        if out.get(&i).is_none_or(|cur| later(pod) >= later(cur)) {
            out.insert(i, pod.clone());
        }
    }
    out
}

#[async_trait]
impl Reconciler for JobController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_job(key).await
    }
}

#[cfg(test)]
mod tests;
