//! The TTL-after-finished controller (`pkg/controller/ttlafterfinished`): deletes a finished
//! Job (`Complete` or `Failed`) `spec.ttlSecondsAfterFinished` seconds after it finished, with
//! foreground propagation so that its pods go first.
//!
//! The finish time is the `lastTransitionTime` of the Complete/Failed condition (as
//! `jobFinishTime`). Before deleting, the Job is read again from the API: a TTL changed since
//! the cache saw it is honoured, and the delete carries the uid and resourceVersion read as
//! preconditions.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;

use crate::util::{Clock, finished_condition, name_of, system_clock};
use skiff_runtime::api::{ApiClient, ApiClientExt, DeleteOptions, PropagationPolicy, is_not_found};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::informer::{Informer, ResourceEventHandler, SharedInformerFactory, key_of, split_key};
use skiff_runtime::workqueue::WorkQueue;

/// The TTL-after-finished controller.
pub struct TtlAfterFinishedController {
    api: Arc<dyn ApiClient>,
    jobs: Arc<Informer<Job>>,
    clock: Clock,
}

struct Handlers {
    queue: Arc<WorkQueue<String>>,
}

fn needs_cleanup(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished).is_some() && finish_time(job).is_some()
}

/// `jobFinishTime`: when the Job's Complete or Failed condition became true.
pub fn finish_time(job: &Job) -> Option<Timestamp> {
    finished_condition(job).map(|c| c.last_transition_time.as_ref().map(|t| t.0).unwrap_or_default())
}

/// `timeLeft`: how long until the Job expires (zero or negative: expired); `None` when it has
/// no TTL or has not finished.
pub fn time_left(job: &Job, now: Timestamp) -> Option<i64> {
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let finished = finish_time(job)?;
    Some(finished.as_second() + i64::from(ttl) - now.as_second())
}

impl ResourceEventHandler<Job> for Handlers {
    fn on_add(&self, job: &Arc<Job>) {
        if job.metadata.deletion_timestamp.is_none() && needs_cleanup(job) {
            self.queue.add(key_of(job.as_ref()));
        }
    }

    fn on_update(&self, _old: &Arc<Job>, cur: &Arc<Job>) {
        self.on_add(cur);
    }

    fn on_delete(&self, _job: &Arc<Job>) {}
}

impl TtlAfterFinishedController {
    /// Creates the controller on the factory's Job informer.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        let jobs = factory.informer::<Job>();
        jobs.add_event_handler(Arc::new(Handlers { queue }));
        Arc::new(Self { api, jobs, clock: system_clock() })
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self: Arc<Self>, clock: Clock) -> Arc<Self> {
        if let Some(me) = Arc::get_mut(&mut self) {
            me.clock = clock;
        }
        self
    }

    /// `processJob` for one key: deletes the Job once expired, or looks again when it expires.
    pub async fn process_job(&self, key: &str) -> ReconcileResult {
        let Some(cached) = self.jobs.store().get(key) else { return Ok(Action::AwaitChange) };
        if cached.metadata.deletion_timestamp.is_some() || !needs_cleanup(&cached) {
            return Ok(Action::AwaitChange);
        }
        let now = (self.clock)();
        match time_left(&cached, now) {
            Some(left) if left > 0 => return Ok(Action::RequeueAfter(Duration::from_secs(left as u64))),
            None => return Ok(Action::AwaitChange),
            _ => {}
        }
        // The cache may be stale: decide again on the Job as stored.
        let (ns, name) = split_key(key);
        let fresh: Job = match self.api.get_typed(ns, name).await {
            Ok(j) => j,
            Err(e) if is_not_found(&e) => return Ok(Action::AwaitChange),
            Err(e) => return Err(e.into()),
        };
        match time_left(&fresh, now) {
            Some(left) if left > 0 => return Ok(Action::RequeueAfter(Duration::from_secs(left as u64))),
            None => return Ok(Action::AwaitChange),
            _ => {}
        }
        if fresh.metadata.deletion_timestamp.is_some() {
            return Ok(Action::AwaitChange);
        }
        let options = DeleteOptions {
            propagation_policy: Some(PropagationPolicy::Foreground),
            precondition_uid: fresh.metadata.uid.clone(),
            precondition_resource_version: fresh.metadata.resource_version.clone(),
            ..Default::default()
        };
        tracing::info!(job = key, "cleaning up a finished Job past its TTL");
        match self.api.delete_typed::<Job>(ns, name_of(&fresh.metadata), &options).await {
            Ok(()) => Ok(Action::AwaitChange),
            Err(e) if is_not_found(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait]
impl Reconciler for TtlAfterFinishedController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.process_job(key).await
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::util::{add_seconds, fixed_clock, time};
    use skiff_runtime::fake::FakeApi;

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    fn job(ttl: Option<i32>, finished_ago: Option<i64>) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some("pi".into()),
                namespace: Some("ns".into()),
                uid: Some("pi-uid".into()),
                resource_version: Some("7".into()),
                ..Default::default()
            },
            spec: Some(JobSpec { ttl_seconds_after_finished: ttl, ..Default::default() }),
            status: Some(JobStatus {
                conditions: finished_ago.map(|ago| {
                    vec![JobCondition {
                        type_: "Complete".into(),
                        status: "True".into(),
                        last_transition_time: Some(time(add_seconds(now(), -ago))),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        }
    }

    async fn process(j: &Job) -> (ReconcileResult, Vec<String>) {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let c = TtlAfterFinishedController::new(api.clone(), &factory, Arc::new(WorkQueue::new()))
            .with_clock(fixed_clock(now()));
        api.seed(j);
        factory.informer::<Job>().handle_event(Event::Apply(j.clone()));
        let r = c.process_job("ns/pi").await;
        (r, api.mutation_summaries())
    }

    #[tokio::test]
    async fn a_finished_job_past_its_ttl_is_deleted() {
        let (r, mutations) = process(&job(Some(10), Some(11))).await;
        assert_eq!(r.unwrap(), Action::AwaitChange);
        assert_eq!(mutations, ["delete jobs ns/pi"]);
    }

    #[tokio::test]
    async fn a_finished_job_within_its_ttl_is_looked_at_when_it_expires() {
        let (r, mutations) = process(&job(Some(10), Some(4))).await;
        assert_eq!(r.unwrap(), Action::RequeueAfter(Duration::from_secs(6)));
        assert!(mutations.is_empty());
    }

    #[tokio::test]
    async fn unfinished_jobs_and_jobs_without_ttl_are_kept() {
        for j in [job(Some(0), None), job(None, Some(1000))] {
            let (r, mutations) = process(&j).await;
            assert_eq!(r.unwrap(), Action::AwaitChange);
            assert!(mutations.is_empty());
        }
    }
}
