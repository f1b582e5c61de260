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
            labels: owner.spec.as_ref().and_then(|s| s.template.metadata.as_ref()).and_then(|m| m.labels.clone()),
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
    assert_eq!(status.completed_indexes.as_deref(), Some("0,1"));
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
    // The running pod still has to terminate before the Job is Failed; stopped by the failing
    // Job, it counts as failed too.
    assert!(f.condition(conditions::FAILED).is_none());
    assert_eq!(f.status().failed, Some(3));
    assert_eq!(f.status().terminating, Some(1));

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

/// A failed pod of `owner` whose container `c` exited with `exit_code`, with the pod conditions
/// `conditions` (all True), finished `ago` seconds before [`now`].
fn failed_with(name: &str, owner: &Job, index: Option<i32>, exit_code: i32, conditions: &[&str], ago: i64) -> Pod {
    let mut p = pod(name, owner, "Failed", index, ago);
    let status = p.status.as_mut().unwrap();
    status.container_statuses.as_mut().unwrap()[0].state.as_mut().unwrap().terminated.as_mut().unwrap().exit_code =
        exit_code;
    status.conditions = Some(
        conditions
            .iter()
            .map(|t| k8s_openapi::api::core::v1::PodCondition {
                type_: (*t).into(),
                status: "True".into(),
                ..Default::default()
            })
            .collect(),
    );
    p
}

fn with_policy(mut j: Job, rules: Value) -> Job {
    let spec = j.spec.as_mut().unwrap();
    spec.pod_failure_policy = Some(serde_json::from_value(json!({ "rules": rules })).unwrap());
    spec.pod_replacement_policy = Some("Failed".into());
    j
}

fn per_index(mut j: Job, limit: i32, max_failed: Option<i32>) -> Job {
    let spec = j.spec.as_mut().unwrap();
    spec.backoff_limit_per_index = Some(limit);
    spec.max_failed_indexes = max_failed;
    spec.backoff_limit = Some(i32::MAX);
    j
}

fn terminating(mut p: Pod, ago: i64) -> Pod {
    p.metadata.deletion_timestamp = Some(Time(add_seconds(now(), -ago)));
    p
}

impl Fixture {
    fn annotations_of_creates(&self) -> Vec<BTreeMap<String, String>> {
        self.creates()
            .into_iter()
            .map(|c| serde_json::from_value(c["metadata"]["annotations"].clone()).unwrap_or_default())
            .collect()
    }

    /// The Job as last written, fed back to the informer, with expectations cleared: what the
    /// next sync sees once the cache caught up.
    fn refresh_job(&self) {
        let j = self.api.object_typed::<Job>(Some("ns"), "pi").unwrap();
        self.factory.informer::<Job>().handle_event(Event::Apply(j));
        self.controller.expectations().delete_expectations("ns/pi");
    }
}

#[tokio::test]
async fn a_fail_job_rule_fails_the_job_with_the_rule_message_recorded_before_the_finalizer_goes() {
    let f = Fixture::new();
    let j = with_policy(
        job("pi", Some(3), 2),
        json!([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]),
    );
    f.seed_job(&j);
    f.seed_pod(&failed_with("a", &j, None, 42, &[], 5));
    f.sync().await.unwrap();
    let target = f.condition(conditions::FAILURE_TARGET).expect("FailureTarget");
    assert_eq!(target.reason.as_deref(), Some(job_reasons::POD_FAILURE_POLICY));
    let message = "Container c for pod ns/a failed with exit code 42 matching FailJob rule at index 0";
    assert_eq!(target.message.as_deref(), Some(message));
    let summaries = f.api.mutation_summaries();
    let first_status = summaries.iter().position(|s| s.contains("jobs/status")).unwrap();
    let patch = summaries.iter().position(|s| s == "patch pods ns/a").unwrap();
    assert!(first_status < patch, "{summaries:?}");
    let failed = f.condition(conditions::FAILED).expect("Failed");
    assert_eq!(failed.message.as_deref(), Some(message));
    assert!(f.events().contains(&format!("Warning PodFailurePolicy {message}")), "{:?}", f.events());
    assert!(f.creates().is_empty());
}

#[tokio::test]
async fn an_ignored_disruption_is_not_counted_and_its_pod_is_replaced_at_once() {
    let f = Fixture::new();
    let mut j = with_policy(
        job("pi", Some(1), 1),
        json!([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]),
    );
    j.spec.as_mut().unwrap().backoff_limit = Some(0);
    f.seed_job(&j);
    f.seed_pod(&failed_with("a", &j, None, 137, &["DisruptionTarget"], 1));
    f.sync().await.unwrap();
    assert!(f.condition(conditions::FAILURE_TARGET).is_none());
    assert_eq!(f.status().failed, None);
    assert_eq!(f.creates().len(), 1);
    assert!(f.api.mutation_summaries().contains(&"patch pods ns/a".to_string()));
}

#[tokio::test]
async fn a_count_rule_counts_the_failure_towards_the_backoff_limit() {
    let f = Fixture::new();
    let mut j = with_policy(
        job("pi", Some(1), 1),
        json!([{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [42]}}]),
    );
    j.spec.as_mut().unwrap().backoff_limit = Some(0);
    f.seed_job(&j);
    f.seed_pod(&failed_with("a", &j, None, 1, &[], 1));
    f.sync().await.unwrap();
    let failed = f.condition(conditions::FAILED).expect("Failed");
    assert_eq!(failed.reason.as_deref(), Some(job_reasons::BACKOFF_LIMIT_EXCEEDED));
    assert_eq!(f.status().failed, Some(1));
}

#[tokio::test]
async fn with_pod_replacement_policy_failed_a_terminating_pod_is_neither_failed_nor_replaced() {
    let f = Fixture::new();
    let mut j = job("pi", Some(1), 1);
    j.spec.as_mut().unwrap().pod_replacement_policy = Some("Failed".into());
    f.seed_job(&j);
    f.seed_pod(&terminating(pod("a", &j, "Running", None, 0), 100));
    f.sync().await.unwrap();
    assert!(f.creates().is_empty());
    let status = f.status();
    assert_eq!(status.terminating, Some(1));
    assert_eq!(status.failed, None);
    assert!(!f.api.mutation_summaries().contains(&"patch pods ns/a".to_string()));
}

#[tokio::test]
async fn by_default_a_terminating_pod_counts_as_failed_and_is_replaced() {
    let f = Fixture::new();
    let j = job("pi", Some(1), 1);
    f.seed_job(&j);
    f.seed_pod(&terminating(pod("a", &j, "Running", None, 0), 100));
    f.sync().await.unwrap();
    assert_eq!(f.creates().len(), 1);
    let status = f.status();
    assert_eq!(status.terminating, Some(1));
    assert_eq!(status.failed, Some(1));
    // The Job is not finished while a pod terminates.
    assert!(f.condition(conditions::COMPLETE).is_none());
}

#[tokio::test]
async fn a_failed_index_is_retried_with_its_failure_count_and_its_pod_kept_until_then() {
    let f = Fixture::new();
    let j = per_index(indexed(job("pi", Some(2), 2)), 1, None);
    f.seed_job(&j);
    let mut p0 = failed_with("p0", &j, Some(0), 1, &[], 100);
    indexed::stamp_failure_counts(&mut p0, None);
    f.seed_pod(&p0);
    f.sync().await.unwrap();
    let annotations = f.annotations_of_creates();
    assert_eq!(annotations.len(), 2, "{annotations:?}");
    let by_index: BTreeMap<&str, &str> = annotations
        .iter()
        .map(|a| {
            (
                a[indexed::JOB_COMPLETION_INDEX_ANNOTATION].as_str(),
                a[indexed::JOB_INDEX_FAILURE_COUNT_ANNOTATION].as_str(),
            )
        })
        .collect();
    assert_eq!(by_index, BTreeMap::from([("0", "1"), ("1", "0")]));
    // The failed pod keeps its finalizer until the replacement is seen.
    assert!(!f.api.mutation_summaries().contains(&"patch pods ns/p0".to_string()));
    assert_eq!(f.status().failed_indexes.as_deref(), Some(""));
}

#[tokio::test]
async fn an_index_retried_backoff_limit_per_index_times_fails_and_then_the_job() {
    let f = Fixture::new();
    let j = per_index(indexed(job("pi", Some(2), 2)), 1, None);
    f.seed_job(&j);
    let mut first = failed_with("p0", &j, Some(0), 1, &[], 100);
    indexed::stamp_failure_counts(&mut first, None);
    let mut second = failed_with("p0b", &j, Some(0), 1, &[], 50);
    indexed::stamp_failure_counts(&mut second, Some((&first, true)));
    first.metadata.finalizers = None; // counted earlier
    f.seed_pod(&first);
    f.seed_pod(&second);
    f.seed_pod(&pod("p1", &j, "Succeeded", Some(1), 0));
    f.sync().await.unwrap();
    let status = f.status();
    assert_eq!(status.failed_indexes.as_deref(), Some("0"));
    assert_eq!(status.completed_indexes.as_deref(), Some("1"));
    let failed = f.condition(conditions::FAILED).expect("Failed");
    assert_eq!(failed.reason.as_deref(), Some(job_reasons::FAILED_INDEXES));
    assert_eq!(failed.message.as_deref(), Some("Job has failed indexes"));
    assert!(f.creates().is_empty());
}

#[tokio::test]
async fn more_failed_indexes_than_max_failed_indexes_fail_the_job_and_stop_its_pods() {
    let f = Fixture::new();
    let j = per_index(indexed(job("pi", Some(4), 2)), 0, Some(0));
    f.seed_job(&j);
    f.seed_pod(&failed_with("p0", &j, Some(0), 1, &[], 100));
    f.seed_pod(&pod("p1", &j, "Running", Some(1), 0));
    f.sync().await.unwrap();
    let target = f.condition(conditions::FAILURE_TARGET).expect("FailureTarget");
    assert_eq!(target.reason.as_deref(), Some(job_reasons::MAX_FAILED_INDEXES_EXCEEDED));
    assert!(f.api.mutation_summaries().contains(&"delete pods ns/p1".to_string()));
    assert!(f.creates().is_empty());
}

#[tokio::test]
async fn a_fail_index_rule_fails_only_that_index() {
    let f = Fixture::new();
    let j = with_policy(
        per_index(indexed(job("pi", Some(3), 3)), 5, None),
        json!([{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]),
    );
    f.seed_job(&j);
    f.seed_pod(&failed_with("p0", &j, Some(0), 3, &[], 100));
    f.sync().await.unwrap();
    assert_eq!(f.status().failed_indexes.as_deref(), Some("0"));
    let mut created: Vec<String> =
        f.annotations_of_creates().iter().map(|a| a[indexed::JOB_COMPLETION_INDEX_ANNOTATION].clone()).collect();
    created.sort();
    assert_eq!(created, ["1", "2"]);
    assert!(f.condition(conditions::FAILURE_TARGET).is_none());
}

#[tokio::test]
async fn a_met_success_policy_completes_the_job_once_its_other_pods_stopped() {
    let f = Fixture::new();
    let mut j = indexed(job("pi", Some(3), 3));
    j.spec.as_mut().unwrap().success_policy =
        Some(serde_json::from_value(json!({"rules": [{"succeededIndexes": "0"}]})).unwrap());
    f.seed_job(&j);
    f.seed_pod(&pod("p0", &j, "Succeeded", Some(0), 0));
    f.seed_pod(&pod("p1", &j, "Running", Some(1), 0));
    f.sync().await.unwrap();
    let met = f.condition(conditions::SUCCESS_CRITERIA_MET).expect("SuccessCriteriaMet");
    assert_eq!(met.reason.as_deref(), Some(success_policy::REASON_SUCCESS_POLICY));
    assert_eq!(met.message.as_deref(), Some("Matched rules at index 0"));
    assert!(f.api.mutation_summaries().contains(&"delete pods ns/p1".to_string()));
    assert!(f.condition(conditions::COMPLETE).is_none());
    assert!(f.creates().is_empty());

    f.refresh_job();
    f.factory.informer::<Pod>().handle_event(Event::Delete(pod("p1", &j, "Running", Some(1), 0)));
    f.sync().await.unwrap();
    let complete = f.condition(conditions::COMPLETE).expect("Complete");
    assert_eq!(complete.reason.as_deref(), Some(success_policy::REASON_SUCCESS_POLICY));
    assert!(f.status().completion_time.is_some());
}

#[tokio::test]
async fn an_orphan_matching_the_selector_is_adopted_with_the_tracking_finalizer() {
    let f = Fixture::new();
    let j = job("pi", Some(1), 1);
    f.seed_job(&j);
    let mut orphan = pod("o", &j, "Running", None, 0);
    orphan.metadata.owner_references = None;
    orphan.metadata.finalizers = None;
    f.seed_pod(&orphan);
    f.sync().await.unwrap();
    let adopted = f.api.object_typed::<Pod>(Some("ns"), "o").unwrap();
    assert_eq!(controller_of(&adopted.metadata).map(|r| r.uid.as_str()), Some("pi-uid"));
    assert!(has_finalizer(&adopted));
    // The adopted pod fills the Job's one slot.
    assert!(f.creates().is_empty());
    assert_eq!(f.status().active, Some(1));
}

#[tokio::test]
async fn a_controlled_pod_that_no_longer_matches_is_released_and_then_loses_the_finalizer() {
    let f = Fixture::new();
    let j = job("pi", Some(1), 1);
    f.seed_job(&j);
    let mut stray = pod("s", &j, "Running", None, 0);
    stray.metadata.labels = Some([("app".to_string(), "other".to_string())].into());
    f.seed_pod(&stray);
    f.sync().await.unwrap();
    let released = f.api.object_typed::<Pod>(Some("ns"), "s").unwrap();
    assert!(controller_of(&released.metadata).is_none());
    // The informer sees the release: the pod is an orphan with the finalizer.
    f.factory.informer::<Pod>().handle_event(Event::Apply(released));
    let orphans = f.controller.orphan_pods();
    assert_eq!(orphans.queue().len(), 1);
    f.api.clear_actions();
    orphans.sync_orphan_pod("ns/s").await.unwrap();
    assert_eq!(f.api.mutation_summaries(), ["patch pods ns/s"]);
    assert!(!has_finalizer(&f.api.object_typed::<Pod>(Some("ns"), "s").unwrap()));
}

#[tokio::test]
async fn the_pods_of_a_deleted_job_lose_the_tracking_finalizer() {
    let f = Fixture::new();
    let j = job("pi", Some(1), 1);
    f.seed_job(&j);
    f.seed_pod(&pod("a", &j, "Running", None, 0));
    f.factory.informer::<Job>().handle_event(Event::Delete(j.clone()));
    let orphans = f.controller.orphan_pods();
    assert_eq!(orphans.queue().len(), 1);
    orphans.sync_orphan_pod("ns/a").await.unwrap();
    assert!(!has_finalizer(&f.api.object_typed::<Pod>(Some("ns"), "a").unwrap()));
    // A pod whose Job still runs keeps it.
    let f = Fixture::new();
    f.seed_job(&j);
    f.seed_pod(&pod("a", &j, "Running", None, 0));
    f.controller.orphan_pods().sync_orphan_pod("ns/a").await.unwrap();
    assert!(f.api.mutation_summaries().iter().all(|s| !s.starts_with("patch")));
}
