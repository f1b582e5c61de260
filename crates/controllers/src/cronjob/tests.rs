//! The CronJob controller against the fake API with a fixed clock; cases after Kubernetes'
//! `cronjob_controllerv2_test.go` (`TestControllerV2SyncCronJob`): an hourly schedule, times
//! around the top of an hour.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJobSpec, JobCondition, JobSpec, JobStatus, JobTemplateSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::runtime::watcher::Event;

use super::utils::{NEXT_SCHEDULE_DELTA, SCHEDULED_TIMESTAMP_ANNOTATION};
use super::*;
use crate::util::{fixed_clock, new_controller_ref};
use skiff_runtime::fake::FakeApi;

const NS: &str = "snazzycats";

/// 2026-12-02T10:00:00Z, a top of the hour.
fn top_of_the_hour() -> Timestamp {
    "2026-12-02T10:00:00Z".parse().unwrap()
}

fn at(minutes_after_the_hour: i64) -> Timestamp {
    crate::util::add_seconds(top_of_the_hour(), minutes_after_the_hour * 60)
}

fn minutes(t: Timestamp) -> i64 {
    t.as_second() / 60
}

fn cron_job(schedule: &str, created: Timestamp) -> CronJob {
    CronJob {
        metadata: ObjectMeta {
            name: Some("mycronjob".into()),
            namespace: Some(NS.into()),
            uid: Some("cj-uid".into()),
            resource_version: Some("1".into()),
            creation_timestamp: Some(Time(created)),
            ..Default::default()
        },
        spec: Some(CronJobSpec {
            schedule: schedule.into(),
            concurrency_policy: Some("Allow".into()),
            suspend: Some(false),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(BTreeMap::from([("a".to_string(), "b".to_string())])),
                    annotations: Some(BTreeMap::from([("x".to_string(), "y".to_string())])),
                    ..Default::default()
                }),
                spec: Some(JobSpec {
                    template: PodTemplateSpec {
                        metadata: None,
                        spec: Some(PodSpec {
                            restart_policy: Some("OnFailure".into()),
                            containers: vec![Container {
                                name: "c".into(),
                                image: Some("busybox".into()),
                                ..Default::default()
                            }],
                            ..Default::default()
                        }),
                    },
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

fn with_status(mut cj: CronJob, last_schedule: Option<Timestamp>, active: &[&Job]) -> CronJob {
    cj.status = Some(CronJobStatus {
        last_schedule_time: last_schedule.map(Time),
        active: (!active.is_empty()).then(|| active.iter().map(|j| object_reference(*j)).collect()),
        ..Default::default()
    });
    cj
}

/// A Job of `cj` that started at `started`; `finished` adds a true Complete/Failed condition.
fn job(cj: &CronJob, name: &str, started: Timestamp, finished: Option<(&str, Timestamp)>) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(format!("{name}-uid")),
            resource_version: Some("3".into()),
            owner_references: Some(vec![new_controller_ref(cj)]),
            ..Default::default()
        },
        spec: Some(JobSpec::default()),
        status: Some(JobStatus {
            start_time: Some(Time(started)),
            completion_time: finished.filter(|(t, _)| *t == "Complete").map(|(_, at)| Time(at)),
            conditions: finished.map(|(type_, at)| {
                vec![JobCondition {
                    type_: type_.into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(at)),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
    }
}

struct Fixture {
    api: Arc<FakeApi>,
    controller: Arc<CronJobController>,
    recorder: EventRecorder,
    factory: SharedInformerFactory,
}

impl Fixture {
    /// The controller at `now`, with `cj` and `jobs` in the API and in the caches.
    fn new(cj: &CronJob, jobs: &[&Job], now: Timestamp) -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let recorder = EventRecorder::recording("cronjob-controller");
        let controller = CronJobController::with_clock(
            api.clone(),
            &factory,
            Arc::new(WorkQueue::new()),
            recorder.clone(),
            fixed_clock(now),
        );
        api.seed(cj);
        factory.informer::<CronJob>().handle_event(Event::Apply(cj.clone()));
        for j in jobs {
            api.seed(*j);
            factory.informer::<Job>().handle_event(Event::Apply((*j).clone()));
        }
        Self { api, controller, recorder, factory }
    }

    async fn sync(&self) -> Action {
        self.controller.sync(&format!("{NS}/mycronjob")).await.expect("sync")
    }

    fn stored(&self) -> CronJob {
        self.api.object_typed(Some(NS), "mycronjob").expect("the CronJob")
    }

    /// The stored CronJob handed to the cache, as the informer would after a status write.
    fn observe_status(&self) {
        self.factory.informer::<CronJob>().handle_event(Event::Apply(self.stored()));
    }

    fn events(&self) -> Vec<String> {
        self.recorder.recorded().iter().map(|e| e.summary()).collect()
    }

    fn created_job(&self, name: &str) -> Job {
        self.api.object_typed(Some(NS), name).expect("a created Job")
    }
}

fn requeue_in(secs: u64) -> Action {
    Action::RequeueAfter(Duration::from_secs(secs) + NEXT_SCHEDULE_DELTA)
}

#[tokio::test]
async fn a_cron_job_before_its_first_schedule_time_creates_nothing_and_comes_back_at_it() {
    let f = Fixture::new(&cron_job("0 * * * *", at(-30)), &[], at(-1));
    assert_eq!(f.sync().await, requeue_in(60));
    assert!(f.api.mutation_summaries().is_empty());
}

#[tokio::test]
async fn a_cron_job_past_its_schedule_time_creates_the_job_of_that_minute() {
    let f = Fixture::new(&cron_job("0 * * * *", at(-30)), &[], at(1));
    assert_eq!(f.sync().await, requeue_in(59 * 60));
    let name = format!("mycronjob-{}", minutes(top_of_the_hour()));
    assert_eq!(
        f.api.mutation_summaries(),
        [format!("create jobs {NS}/{name}"), format!("update cronjobs/status {NS}/mycronjob")]
    );
    let j = f.created_job(&name);
    assert_eq!(j.metadata.labels.unwrap()["a"], "b");
    let annotations = j.metadata.annotations.unwrap();
    assert_eq!(annotations["x"], "y");
    assert_eq!(annotations[SCHEDULED_TIMESTAMP_ANNOTATION], "2026-12-02T10:00:00Z");
    let owner = &j.metadata.owner_references.unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("CronJob", "cj-uid", Some(true)));
    assert_eq!(j.spec.unwrap().template.spec.unwrap().restart_policy.as_deref(), Some("OnFailure"));
    let status = f.stored().status.unwrap();
    assert_eq!(status.last_schedule_time.unwrap().0, top_of_the_hour());
    assert_eq!(status.active.unwrap()[0].name.as_deref(), Some(name.as_str()));
    assert_eq!(f.events(), [format!("Normal SuccessfulCreate Created job {name}")]);
}

#[tokio::test]
async fn the_schedule_is_read_in_the_time_zone_and_the_annotation_carries_its_offset() {
    // 09:00 in New York is 14:00 UTC in December.
    let mut cj = cron_job("0 9 * * *", at(3 * 60));
    cj.spec.as_mut().unwrap().time_zone = Some("America/New_York".into());
    let nine_in_new_york = at(4 * 60);
    let early = Fixture::new(&cj, &[], at(4 * 60 - 1));
    assert_eq!(early.sync().await, requeue_in(60));
    let f = Fixture::new(&cj, &[], at(4 * 60 + 5));
    f.sync().await;
    let j = f.created_job(&format!("mycronjob-{}", minutes(nine_in_new_york)));
    assert_eq!(j.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP_ANNOTATION], "2026-12-02T09:00:00-05:00");
}

#[tokio::test]
async fn a_suspended_cron_job_creates_nothing() {
    let mut cj = cron_job("0 * * * *", at(-30));
    cj.spec.as_mut().unwrap().suspend = Some(true);
    let f = Fixture::new(&cj, &[], at(1));
    assert_eq!(f.sync().await, Action::AwaitChange);
    assert!(f.api.mutation_summaries().is_empty());
}

#[tokio::test]
async fn forbid_skips_a_run_while_a_job_is_active() {
    let mut cj = cron_job("0 * * * *", at(-90));
    cj.spec.as_mut().unwrap().concurrency_policy = Some("Forbid".into());
    let running = job(&cj, "mycronjob-old", at(-60), None);
    let cj = with_status(cj, Some(at(-60)), &[&running]);
    let f = Fixture::new(&cj, &[&running], at(1));
    assert_eq!(f.sync().await, requeue_in(59 * 60));
    assert!(f.api.mutation_summaries().is_empty());
    assert_eq!(
        f.events(),
        [
            "Normal JobAlreadyActive Not starting job because prior execution is running and concurrency policy is Forbid"
        ]
    );
}

#[tokio::test]
async fn replace_deletes_the_active_job_before_creating_the_next() {
    let mut cj = cron_job("0 * * * *", at(-90));
    cj.spec.as_mut().unwrap().concurrency_policy = Some("Replace".into());
    let running = job(&cj, "mycronjob-old", at(-60), None);
    let cj = with_status(cj, Some(at(-60)), &[&running]);
    let f = Fixture::new(&cj, &[&running], at(1));
    f.sync().await;
    let name = format!("mycronjob-{}", minutes(top_of_the_hour()));
    assert_eq!(
        f.api.mutation_summaries(),
        [
            format!("delete jobs {NS}/mycronjob-old"),
            format!("create jobs {NS}/{name}"),
            format!("update cronjobs/status {NS}/mycronjob"),
        ]
    );
    let deleted = &f.api.mutations()[0];
    assert_eq!(deleted.delete_options.as_ref().unwrap().propagation_policy, Some(PropagationPolicy::Background));
    let active = f.stored().status.unwrap().active.unwrap();
    assert_eq!(active.iter().map(|r| r.name.clone().unwrap()).collect::<Vec<_>>(), [name]);
}

#[tokio::test]
async fn allow_runs_the_next_job_beside_the_active_one() {
    let cj = cron_job("0 * * * *", at(-90));
    let running = job(&cj, "mycronjob-old", at(-60), None);
    let cj = with_status(cj, Some(at(-60)), &[&running]);
    let f = Fixture::new(&cj, &[&running], at(1));
    f.sync().await;
    assert_eq!(f.stored().status.unwrap().active.unwrap().len(), 2);
}

#[tokio::test]
async fn a_schedule_time_past_the_starting_deadline_is_not_run() {
    let mut cj = cron_job("0 * * * *", at(-90));
    cj.spec.as_mut().unwrap().starting_deadline_seconds = Some(30);
    let f = Fixture::new(&with_status(cj, Some(at(-60)), &[]), &[], at(1));
    assert_eq!(f.sync().await, requeue_in(59 * 60));
    assert!(f.api.mutation_summaries().is_empty());
}

#[tokio::test]
async fn a_schedule_time_within_the_starting_deadline_is_run() {
    let mut cj = cron_job("0 * * * *", at(-90));
    cj.spec.as_mut().unwrap().starting_deadline_seconds = Some(120);
    let f = Fixture::new(&with_status(cj, Some(at(-60)), &[]), &[], at(1));
    f.sync().await;
    assert_eq!(f.api.mutation_summaries().len(), 2);
}

#[tokio::test]
async fn more_than_a_hundred_missed_times_warn_and_only_the_most_recent_runs() {
    let cj = cron_job("0 * * * *", at(-200 * 60 - 30));
    let f = Fixture::new(&cj, &[], at(1));
    f.sync().await;
    assert_eq!(
        f.events()[0],
        "Warning TooManyMissedTimes too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
    );
    let name = format!("mycronjob-{}", minutes(top_of_the_hour()));
    assert_eq!(f.api.mutation_summaries()[0], format!("create jobs {NS}/{name}"));
    assert_eq!(f.api.mutation_summaries().len(), 2);
}

#[tokio::test]
async fn a_few_missed_times_run_only_the_most_recent_without_a_warning() {
    let f = Fixture::new(&cron_job("0 * * * *", at(-5 * 60 - 30)), &[], at(1));
    f.sync().await;
    assert_eq!(f.events(), [format!("Normal SuccessfulCreate Created job mycronjob-{}", minutes(top_of_the_hour()))]);
}

#[tokio::test]
async fn a_schedule_time_already_run_is_not_run_again() {
    let cj = with_status(cron_job("0 * * * *", at(-90)), Some(top_of_the_hour()), &[]);
    let f = Fixture::new(&cj, &[], at(1));
    assert_eq!(f.sync().await, requeue_in(59 * 60));
    assert!(f.api.mutation_summaries().is_empty());
}

#[tokio::test]
async fn after_a_restart_the_job_of_a_schedule_time_is_recorded_not_created_twice() {
    // The previous controller created the Job but died before writing the status.
    let cj = cron_job("0 * * * *", at(-30));
    let name = format!("mycronjob-{}", minutes(top_of_the_hour()));
    let earlier = job(&cj, &name, at(0), None);
    let f = Fixture::new(&cj, &[], at(1));
    f.api.seed(&earlier);
    f.sync().await;
    let status = f.stored().status.unwrap();
    assert_eq!(status.active.unwrap()[0].uid.as_deref(), Some(format!("{name}-uid").as_str()));
    assert_eq!(status.last_schedule_time.unwrap().0, top_of_the_hour());
    assert_eq!(f.api.objects(&skiff_runtime::api::resource_of::<Job>()).len(), 1);
    assert!(f.events().is_empty(), "{:?}", f.events());
}

#[tokio::test]
async fn a_job_of_that_name_owned_by_someone_else_is_left_alone() {
    let cj = cron_job("0 * * * *", at(-30));
    let name = format!("mycronjob-{}", minutes(top_of_the_hour()));
    let mut foreign = job(&cj, &name, at(0), None);
    foreign.metadata.owner_references = None;
    let f = Fixture::new(&cj, &[], at(1));
    f.api.seed(&foreign);
    assert_eq!(f.sync().await, Action::AwaitChange);
    assert_eq!(f.api.mutation_summaries(), [format!("create jobs {NS}/{name}")]);
}

#[tokio::test]
async fn a_finished_active_job_leaves_the_active_list_and_a_success_sets_last_successful_time() {
    let cj = cron_job("0 * * * *", at(-90));
    let done = job(&cj, "mycronjob-old", at(-60), Some(("Complete", at(-50))));
    let f = Fixture::new(&with_status(cj, Some(top_of_the_hour()), &[&done]), &[&done], at(30));
    f.sync().await;
    assert_eq!(f.events(), ["Normal SawCompletedJob Saw completed job: mycronjob-old, status: Complete"]);
    let status = f.stored().status.unwrap();
    assert!(status.active.unwrap_or_default().is_empty());
    // As in Kubernetes, the next sync (on the status update) moves lastSuccessfulTime.
    assert!(status.last_successful_time.is_none());
    f.observe_status();
    f.sync().await;
    assert_eq!(f.stored().status.unwrap().last_successful_time.unwrap().0, at(-50));
}

#[tokio::test]
async fn a_failed_job_does_not_move_last_successful_time() {
    let cj = cron_job("0 * * * *", at(-90));
    let failed = job(&cj, "mycronjob-old", at(-60), Some(("Failed", at(-50))));
    let f = Fixture::new(&with_status(cj, Some(top_of_the_hour()), &[]), &[&failed], at(30));
    f.sync().await;
    assert!(f.api.mutation_summaries().is_empty());
}

#[tokio::test]
async fn an_active_job_gone_from_the_api_is_dropped_from_the_active_list() {
    let cj = cron_job("0 * * * *", at(-90));
    let gone = job(&cj, "mycronjob-gone", at(-60), None);
    let f = Fixture::new(&with_status(cj, Some(top_of_the_hour()), &[&gone]), &[], at(30));
    f.sync().await;
    assert_eq!(f.events(), ["Normal MissingJob Active job went missing: mycronjob-gone"]);
    assert!(f.stored().status.unwrap().active.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn an_unfinished_job_the_controller_did_not_record_is_reported() {
    let cj = cron_job("0 * * * *", at(-90));
    let stray = job(&cj, "mycronjob-stray", at(-60), None);
    let f = Fixture::new(&with_status(cj, Some(top_of_the_hour()), &[]), &[&stray], at(30));
    f.sync().await;
    assert_eq!(
        f.events(),
        ["Warning UnexpectedJob Saw a job that the controller did not create or forgot: mycronjob-stray"]
    );
}

#[tokio::test]
async fn finished_jobs_beyond_the_history_limits_are_deleted_oldest_first() {
    let mut cj = cron_job("0 * * * *", at(-600));
    cj.spec.as_mut().unwrap().successful_jobs_history_limit = Some(1);
    cj.spec.as_mut().unwrap().failed_jobs_history_limit = Some(0);
    let ok = |name: &str, started: i64| job(&cj, name, at(started), Some(("Complete", at(started + 1))));
    let (a, b, c) = (ok("mycronjob-a", -180), ok("mycronjob-b", -120), ok("mycronjob-c", -60));
    let failed = job(&cj, "mycronjob-f", at(-240), Some(("Failed", at(-239))));
    let f = Fixture::new(&with_status(cj, Some(top_of_the_hour()), &[]), &[&c, &a, &failed, &b], at(30));
    f.sync().await;
    let deletes: Vec<String> = f.api.mutation_summaries().into_iter().filter(|m| m.starts_with("delete")).collect();
    assert_eq!(
        deletes,
        [
            format!("delete jobs {NS}/mycronjob-a"),
            format!("delete jobs {NS}/mycronjob-b"),
            format!("delete jobs {NS}/mycronjob-f")
        ]
    );
    assert!(f.events().contains(&"Normal SuccessfulDelete Deleted job mycronjob-a".to_string()));
}

#[tokio::test]
async fn an_unknown_time_zone_stops_scheduling_with_a_warning() {
    let mut cj = cron_job("0 * * * *", at(-30));
    cj.spec.as_mut().unwrap().time_zone = Some("Mars/Olympus".into());
    let f = Fixture::new(&cj, &[], at(1));
    assert_eq!(f.sync().await, Action::AwaitChange);
    assert_eq!(
        f.events(),
        ["Warning UnknownTimeZone invalid timeZone: \"Mars/Olympus\": unknown time zone Mars/Olympus"]
    );
    assert!(f.api.mutation_summaries().is_empty());
}

#[tokio::test]
async fn a_schedule_that_never_fires_is_reported_invalid() {
    let f = Fixture::new(&cron_job("59 23 31 2 *", at(-30)), &[], at(1));
    assert_eq!(f.sync().await, Action::AwaitChange);
    assert_eq!(
        f.events(),
        [
            "Warning InvalidSchedule invalid schedule: 59 23 31 2 * : time difference between two schedules is less than 1 second"
        ]
    );
}

#[tokio::test]
async fn a_cron_job_being_deleted_starts_nothing() {
    let mut cj = cron_job("0 * * * *", at(-30));
    cj.metadata.deletion_timestamp = Some(Time(at(0)));
    let f = Fixture::new(&cj, &[], at(1));
    assert_eq!(f.sync().await, Action::AwaitChange);
    assert!(f.api.mutation_summaries().is_empty());
}

#[tokio::test]
async fn a_changed_schedule_brings_the_key_back_at_its_next_time() {
    let queue = Arc::new(WorkQueue::new());
    let factory = SharedInformerFactory::for_tests();
    let _c = CronJobController::with_clock(
        Arc::new(FakeApi::new()),
        &factory,
        queue.clone(),
        EventRecorder::recording("cronjob-controller"),
        fixed_clock(at(1)),
    );
    let old = cron_job("0 * * * *", at(-30));
    let mut new = old.clone();
    new.spec.as_mut().unwrap().schedule = "*/1 * * * *".into();
    new.metadata.resource_version = Some("2".into());
    let informer = factory.informer::<CronJob>();
    informer.handle_event(Event::Apply(old));
    let added = skiff_runtime::fake::drain_queue(&queue).await;
    assert_eq!(added, [format!("{NS}/mycronjob")]);
    informer.handle_event(Event::Apply(new));
    // Not at once: the next minute is 60 s + 100 ms away.
    assert!(queue.is_empty());
}
