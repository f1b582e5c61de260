use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as MetaSelector, ObjectMeta, Time};
use kube::runtime::watcher::Event;
use serde_json::Value;

use super::*;
use crate::util::{add_seconds, fixed_clock};
use skiff_runtime::fake::FakeApi;

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn job(name: &str, completions: Option<i32>, parallelism: i32) -> Job {
    let labels: BTreeMap<String, String> =
        [("batch.kubernetes.io/controller-uid".to_string(), format!("{name}-uid"))].into();
    Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("{name}-uid")),
            resource_version: Some("10".into()),
            generation: Some(1),
            ..Default::default()
        },
        spec: Some(JobSpec {
            completions,
            parallelism: Some(parallelism),
            backoff_limit: Some(6),
            completion_mode: Some("NonIndexed".into()),
            suspend: Some(false),
            selector: Some(MetaSelector { match_labels: Some(labels.clone()), ..Default::default() }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
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
        status: None,
    }
}

fn indexed(mut j: Job) -> Job {
    j.spec.as_mut().unwrap().completion_mode = Some("Indexed".into());
    j
}

/// A pod of `owner` in `phase`, holding the tracking finalizer; failed pods finished `ago`
/// seconds before [`now`].
fn pod(name: &str, owner: &Job, phase: &str, index: Option<i32>, ago: i64) -> Pod {
    let mut p = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("{name}-uid")),
            resource_version: Some("5".into()),
            finalizers: Some(vec![JOB_TRACKING_FINALIZER.into()]),
            owner_references: Some(vec![new_controller_ref(owner)]),
            creation_timestamp: Some(Time(add_seconds(now(), -1000))),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: (phase == "Failed" || phase == "Succeeded").then(|| {
                vec![ContainerStatus {
                    name: "c".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: if phase == "Failed" { 1 } else { 0 },
                            finished_at: Some(Time(add_seconds(now(), -ago))),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
    };
    if let Some(i) = index {
        stamp_index(&mut p, name_of(&owner.metadata), i);
    }
    p
}

struct Fixture {
    api: Arc<FakeApi>,
    factory: SharedInformerFactory,
    controller: Arc<JobController>,
    recorder: EventRecorder,
}

impl Fixture {
    fn new() -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let recorder = EventRecorder::recording("job-controller");
        let controller = JobController::new(api.clone(), &factory, Arc::new(WorkQueue::new()), recorder.clone())
            .with_clock(fixed_clock(now()));
        Self { api, factory, controller, recorder }
    }

    fn seed_job(&self, j: &Job) {
        self.api.seed(j);
        self.factory.informer::<Job>().handle_event(Event::Apply(j.clone()));
    }

    fn seed_pod(&self, p: &Pod) {
        self.api.seed(p);
        self.factory.informer::<Pod>().handle_event(Event::Apply(p.clone()));
    }

    async fn sync(&self) -> ReconcileResult {
        self.api.clear_actions();
        self.controller.sync_job("ns/pi").await
    }

    fn creates(&self) -> Vec<Value> {
        self.api.mutations().into_iter().filter(|a| a.verb == "create").filter_map(|a| a.body).collect()
    }

    fn status(&self) -> JobStatus {
        self.api.object_typed::<Job>(Some("ns"), "pi").unwrap().status.unwrap_or_default()
    }

    fn condition(&self, type_: &str) -> Option<JobCondition> {
        self.status().conditions.unwrap_or_default().into_iter().find(|c| c.type_ == type_ && c.status == "True")
    }

    fn events(&self) -> Vec<String> {
        self.recorder.recorded().iter().map(|e| e.summary()).collect()
    }
}

#[tokio::test]
async fn a_new_job_creates_parallelism_pods_with_the_tracking_finalizer() {
    let f = Fixture::new();
    f.seed_job(&job("pi", Some(3), 2));
    f.sync().await.unwrap();
    let creates = f.creates();
    assert_eq!(creates.len(), 2);
    assert_eq!(creates[0]["metadata"]["generateName"], "pi-");
    assert_eq!(creates[0]["metadata"]["finalizers"], json!([JOB_TRACKING_FINALIZER]));
    assert_eq!(creates[0]["metadata"]["ownerReferences"][0]["kind"], "Job");
    assert_eq!(f.controller.expectations().outstanding("ns/pi"), Some((2, 0)));
    let status = f.status();
    assert_eq!(status.active, Some(2));
    assert_eq!(status.start_time, Some(time(now())));
    // The cache has not seen the pods yet: no second round of creates.
    let refreshed = f.api.object_typed::<Job>(Some("ns"), "pi").unwrap();
    f.factory.informer::<Job>().handle_event(Event::Apply(refreshed));
    f.sync().await.unwrap();
    assert!(f.creates().is_empty());
}

#[tokio::test]
async fn an_indexed_job_creates_one_pod_per_missing_index_with_its_completion_index() {
    let f = Fixture::new();
    let j = indexed(job("pi", Some(3), 2));
    f.seed_job(&j);
    f.seed_pod(&pod("pi-0-a", &j, "Running", Some(0), 0));
    f.sync().await.unwrap();
    let creates = f.creates();
    assert_eq!(creates.len(), 1);
    let p = &creates[0];
    assert_eq!(p["metadata"]["annotations"][indexed::JOB_COMPLETION_INDEX_ANNOTATION], "1");
    assert_eq!(p["metadata"]["generateName"], "pi-1-");
    assert_eq!(p["spec"]["hostname"], "pi-1");
    assert_eq!(p["spec"]["containers"][0]["env"][0]["name"], "JOB_COMPLETION_INDEX");
}

#[tokio::test]
async fn finished_pods_are_counted_once_and_their_finalizers_removed() {
    let f = Fixture::new();
    let j = job("pi", Some(3), 2);
    f.seed_job(&j);
    f.seed_pod(&pod("a", &j, "Succeeded", None, 0));
    f.seed_pod(&pod("b", &j, "Running", None, 0));
    f.sync().await.unwrap();
    let summaries = f.api.mutation_summaries();
    // Recorded as uncounted first, then the finalizer goes, then the count.
    let first_status = summaries.iter().position(|s| s.contains("jobs/status")).unwrap();
    let patch = summaries.iter().position(|s| s.starts_with("patch pods")).unwrap();
    assert!(first_status < patch, "{summaries:?}");
    let status = f.status();
    assert_eq!(status.succeeded, Some(1));
    // b, and the one pod created for the third completion.
    assert_eq!(status.active, Some(2));
    // A sync on a cache that has not seen the finalizer go does not count the pod again.
    let refreshed = f.api.object_typed::<Job>(Some("ns"), "pi").unwrap();
    f.factory.informer::<Job>().handle_event(Event::Apply(refreshed));
    f.controller.expectations().delete_expectations("ns/pi");
    f.sync().await.unwrap();
    assert_eq!(f.status().succeeded, Some(1));
    assert_eq!(status.uncounted_terminated_pods, Some(UncountedTerminatedPods::default()));
    let a = f.api.object_typed::<Pod>(Some("ns"), "a").unwrap();
    assert!(!has_finalizer(&a));
}

#[tokio::test]
async fn results_recorded_before_a_restart_are_counted_after_it() {
    let f = Fixture::new();
    let mut j = job("pi", Some(3), 1);
    j.status = Some(JobStatus {
        succeeded: Some(1),
        uncounted_terminated_pods: Some(UncountedTerminatedPods {
            succeeded: Some(vec!["a-uid".into()]),
            failed: None,
        }),
        ..Default::default()
    });
    f.seed_job(&j);
    let mut a = pod("a", &j, "Succeeded", None, 0);
    a.metadata.finalizers = None; // removed before the restart
    f.seed_pod(&a);
    f.sync().await.unwrap();
    assert_eq!(f.status().succeeded, Some(2));
}

#[tokio::test]
async fn a_job_whose_completions_succeeded_is_complete() {
    let f = Fixture::new();
    let j = job("pi", Some(2), 2);
    f.seed_job(&j);
    f.seed_pod(&pod("a", &j, "Succeeded", None, 0));
    f.seed_pod(&pod("b", &j, "Succeeded", None, 0));
    f.sync().await.unwrap();
    assert!(f.condition(conditions::SUCCESS_CRITERIA_MET).is_some());
    let complete = f.condition(conditions::COMPLETE).expect("Complete");
    assert_eq!(complete.reason.as_deref(), Some(job_reasons::COMPLETIONS_REACHED));
    assert_eq!(f.status().completion_time, Some(time(now())));
    assert!(f.events().contains(&"Normal Completed Job completed".to_string()), "{:?}", f.events());
    assert!(f.creates().is_empty());
}

#[tokio::test]
async fn an_indexed_job_is_complete_when_every_index_succeeded() {
    let f = Fixture::new();
    let j = indexed(job("pi", Some(2), 2));
    f.seed_job(&j);
    f.seed_pod(&pod("p0", &j, "Succeeded", Some(0), 0));
    f.seed_pod(&pod("p0b", &j, "Succeeded", Some(0), 0));
    f.seed_pod(&pod("p1", &j, "Succeeded", Some(1), 0));
    f.sync().await.unwrap();
    let status = f.status();
    assert_eq!(status.completed_indexes.as_deref(), Some("0-1"));
    assert_eq!(status.succeeded, Some(2));
    assert!(f.condition(conditions::COMPLETE).is_some());
}

#[tokio::test]
async fn failures_past_the_backoff_limit_fail_the_job_and_delete_its_pods() {
    let f = Fixture::new();
    let mut j = job("pi", Some(5), 2);
    j.spec.as_mut().unwrap().backoff_limit = Some(1);
    f.seed_job(&j);
    f.seed_pod(&pod("a", &j, "Failed", None, 100));
    f.seed_pod(&pod("b", &j, "Failed", None, 100));
    f.seed_pod(&pod("c", &j, "Running", None, 0));
    f.sync().await.unwrap();
    let target = f.condition(conditions::FAILURE_TARGET).expect("FailureTarget");
    assert_eq!(target.reason.as_deref(), Some(job_reasons::BACKOFF_LIMIT_EXCEEDED));
    assert!(f.api.mutation_summaries().contains(&"delete pods ns/c".to_string()), "{:?}", f.api.mutation_summaries());
    // The running pod still has to terminate before the Job is Failed.
    assert!(f.condition(conditions::FAILED).is_none());
    assert_eq!(f.status().failed, Some(2));

    // Its pod is gone: Failed.
    let failed_job = f.api.object_typed::<Job>(Some("ns"), "pi").unwrap();
    f.factory.informer::<Job>().handle_event(Event::Apply(failed_job));
    f.factory.informer::<Pod>().handle_event(Event::Delete(pod("c", &j, "Running", None, 0)));
    f.controller.expectations().delete_expectations("ns/pi");
    f.sync().await.unwrap();
    let failed = f.condition(conditions::FAILED).expect("Failed");
    assert_eq!(failed.message.as_deref(), Some("Job has reached the specified backoff limit"));
    assert!(f.creates().is_empty());
}

#[tokio::test]
async fn a_job_past_its_active_deadline_fails() {
    let f = Fixture::new();
    let mut j = job("pi", Some(1), 1);
    j.spec.as_mut().unwrap().active_deadline_seconds = Some(30);
    j.status = Some(JobStatus { start_time: Some(time(add_seconds(now(), -31))), ..Default::default() });
    f.seed_job(&j);
    f.sync().await.unwrap();
    let failed = f.condition(conditions::FAILED).expect("Failed");
    assert_eq!(failed.reason.as_deref(), Some(job_reasons::DEADLINE_EXCEEDED));
    assert!(f.creates().is_empty());
}

#[tokio::test]
async fn a_job_before_its_active_deadline_looks_again_at_the_deadline() {
    let f = Fixture::new();
    let mut j = job("pi", Some(1), 1);
    j.spec.as_mut().unwrap().active_deadline_seconds = Some(30);
    j.status = Some(JobStatus { start_time: Some(time(add_seconds(now(), -10))), ..Default::default() });
    f.seed_job(&j);
    assert_eq!(f.sync().await.unwrap(), Action::RequeueAfter(Duration::from_secs(20)));
}

#[tokio::test]
async fn a_failed_pod_is_replaced_only_after_the_backoff() {
    let f = Fixture::new();
    let j = job("pi", Some(1), 1);
    f.seed_job(&j);
    f.seed_pod(&pod("a", &j, "Failed", None, 4));
    // One failure: 10 s backoff, 4 s gone.
    assert_eq!(f.sync().await.unwrap(), Action::RequeueAfter(Duration::from_secs(6)));
    assert!(f.creates().is_empty());
    assert_eq!(failure_backoff(1), Duration::from_secs(10));
    assert_eq!(failure_backoff(3), Duration::from_secs(40));
    assert_eq!(failure_backoff(10), MAX_POD_FAILURE_BACKOFF);
}

#[tokio::test]
async fn a_suspended_job_deletes_its_active_pods_and_says_so() {
    let f = Fixture::new();
    let mut j = job("pi", Some(3), 2);
    j.spec.as_mut().unwrap().suspend = Some(true);
    f.seed_job(&j);
    f.seed_pod(&pod("a", &j, "Running", None, 0));
    f.sync().await.unwrap();
    assert!(f.api.mutation_summaries().contains(&"delete pods ns/a".to_string()));
    let s = f.condition(conditions::SUSPENDED).expect("Suspended");
    assert_eq!(s.reason.as_deref(), Some(job_reasons::JOB_SUSPENDED));
    assert!(f.creates().is_empty());
    assert_eq!(f.status().start_time, None);
}

#[tokio::test]
async fn a_finished_job_releases_the_finalizers_of_leftover_pods() {
    let f = Fixture::new();
    let mut j = job("pi", Some(1), 1);
    j.status = Some(JobStatus {
        conditions: Some(vec![JobCondition { type_: "Complete".into(), status: "True".into(), ..Default::default() }]),
        ..Default::default()
    });
    f.seed_job(&j);
    f.seed_pod(&pod("a", &j, "Succeeded", None, 0));
    f.sync().await.unwrap();
    assert_eq!(f.api.mutation_summaries(), ["patch pods ns/a"]);
}
