//! Test fixture of the Deployment controller: seeds the informer caches (and the fake API
//! behind them), runs exactly one sync, and exposes the API actions it produced.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, ReplicaSet, ReplicaSetSpec, ReplicaSetStatus,
    RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use serde_json::Value;

use super::DeploymentController;
use super::util::*;
use crate::util::{add_seconds, fixed_clock, new_controller_ref};
use skiff_runtime::controller::ReconcileResult;
use skiff_runtime::events::EventRecorder;
use skiff_runtime::fake::FakeApi;
use skiff_runtime::informer::SharedInformerFactory;
use skiff_runtime::workqueue::WorkQueue;

/// The fixed "now" of every deployment test.
pub fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn int_or_percent(s: &str) -> IntOrString {
    match s.parse::<i32>() {
        Ok(i) => IntOrString::Int(i),
        Err(_) => IntOrString::String(s.to_string()),
    }
}

pub struct Fixture {
    pub api: Arc<FakeApi>,
    pub factory: SharedInformerFactory,
    pub controller: Arc<DeploymentController>,
    pub recorder: EventRecorder,
}

impl Fixture {
    pub fn new() -> Self {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let recorder = EventRecorder::recording("deployment-controller");
        let controller = DeploymentController::new(api.clone(), &factory, Arc::new(WorkQueue::new()), recorder.clone())
            .with_clock(fixed_clock(now()));
        Self { api, factory, controller, recorder }
    }

    /// A RollingUpdate Deployment `ns/<name>` selecting `app=web`, image `nginx:2`.
    pub fn deployment(&self, name: &str, replicas: i32, surge: &str, unavailable: &str) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("{name}-uid")),
                generation: Some(1),
                resource_version: Some("100".into()),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some([("app".to_string(), "web".to_string())].into()),
                    ..Default::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some([("app".to_string(), "web".to_string())].into()),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "web".into(),
                            image: Some("nginx:2".into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                },
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(int_or_percent(surge)),
                        max_unavailable: Some(int_or_percent(unavailable)),
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    pub fn deployment_with_image(&self, name: &str, replicas: i32, image: &str) -> Deployment {
        let mut d = self.deployment(name, replicas, "25%", "25%");
        set_image(&mut d.spec.as_mut().unwrap().template, image);
        d
    }

    fn rs(
        &self,
        d: &Deployment,
        suffix: &str,
        size: i32,
        available: i32,
        revision: i64,
        image: Option<&str>,
    ) -> ReplicaSet {
        let mut template = d_template(d);
        if let Some(image) = image {
            set_image(&mut template, image);
        }
        template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(Default::default)
            .insert(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY.into(), suffix.into());
        let labels = template.metadata.as_ref().unwrap().labels.clone();
        let mut selector = d.spec.as_ref().unwrap().selector.clone();
        selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY.into(), suffix.into());
        let dname = d.metadata.name.clone().unwrap();
        let r = replicas(d);
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(format!("{dname}-{suffix}")),
                namespace: Some("ns".into()),
                uid: Some(format!("{dname}-{suffix}-uid")),
                resource_version: Some("50".into()),
                generation: Some(1),
                labels,
                creation_timestamp: Some(Time(add_seconds(now(), -10_000 + revision * 10))),
                owner_references: Some(vec![new_controller_ref(d)]),
                annotations: Some(
                    [
                        (REVISION_ANNOTATION.to_string(), revision.to_string()),
                        (DESIRED_REPLICAS_ANNOTATION.to_string(), r.to_string()),
                        (MAX_REPLICAS_ANNOTATION.to_string(), (r + max_surge(d)).to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(size),
                min_ready_seconds: None,
                selector,
                template: Some(template),
            }),
            status: Some(ReplicaSetStatus {
                replicas: size,
                ready_replicas: Some(available),
                available_replicas: Some(available),
                fully_labeled_replicas: Some(size),
                observed_generation: Some(1),
                ..Default::default()
            }),
        }
    }

    /// A ReplicaSet of the Deployment's current template (`<deployment>-<suffix>`).
    pub fn new_rs(&self, d: &Deployment, suffix: &str, size: i32, available: i32, revision: i64) -> ReplicaSet {
        self.rs(d, suffix, size, available, revision, None)
    }

    /// A ReplicaSet of an older template (image `nginx:old-<suffix>`).
    pub fn old_rs(&self, d: &Deployment, suffix: &str, size: i32, available: i32, revision: i64) -> ReplicaSet {
        let image = format!("nginx:old-{suffix}");
        self.rs(d, suffix, size, available, revision, Some(&image))
    }

    /// A ReplicaSet of a template with `image`.
    pub fn old_rs_with_image(
        &self,
        d: &Deployment,
        suffix: &str,
        size: i32,
        available: i32,
        revision: i64,
        image: &str,
    ) -> ReplicaSet {
        self.rs(d, suffix, size, available, revision, Some(image))
    }

    /// A pod controlled by `rs` in `phase`.
    pub fn pod_of(&self, rs: &ReplicaSet, name: &str, phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("{name}-uid")),
                labels: rs.metadata.labels.clone(),
                owner_references: Some(vec![new_controller_ref(rs)]),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
        }
    }

    pub fn seed_deployment(&self, d: &Deployment) {
        self.api.seed(d);
        self.factory.informer::<Deployment>().handle_event(Event::Apply(d.clone()));
    }

    pub fn seed_rs(&self, rs: &ReplicaSet) {
        self.api.seed(rs);
        self.factory.informer::<ReplicaSet>().handle_event(Event::Apply(rs.clone()));
    }

    pub fn seed_pod(&self, pod: &Pod) {
        self.api.seed(pod);
        self.factory.informer::<Pod>().handle_event(Event::Apply(pod.clone()));
    }

    /// Lets the cache catch up with the API's copy of a Deployment.
    pub fn refresh_deployment_from_api(&self, name: &str) {
        let d: Deployment = self.api.object_typed(Some("ns"), name).expect("deployment in the API");
        self.factory.informer::<Deployment>().handle_event(Event::Apply(d));
    }

    /// Runs one sync after forgetting earlier actions and events.
    pub async fn sync(&self, key: &str) -> ReconcileResult {
        self.api.clear_actions();
        self.controller.sync_deployment(key).await
    }

    fn bodies(&self, verb: &str, resource: &str, subresource: Option<&str>) -> Vec<Value> {
        self.api
            .mutations()
            .into_iter()
            .filter(|a| a.verb == verb && a.resource == resource && a.subresource.as_deref() == subresource)
            .filter_map(|a| a.body)
            .collect()
    }

    /// ReplicaSet resizes as `suffix:size` (suffix = name without `<deployment>-`).
    pub fn scales(&self) -> Vec<String> {
        let store = self.factory.informer::<ReplicaSet>();
        let mut last_size: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        let mut out = Vec::new();
        for body in self.bodies("update", "replicasets", None) {
            let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let size = body["spec"]["replicas"].as_i64().unwrap_or(1);
            let before = last_size.get(&name).copied().unwrap_or_else(|| {
                store.store().get(&format!("ns/{name}")).map(|rs| i64::from(rs_replicas(&rs))).unwrap_or(-1)
            });
            if before != size {
                let suffix = name.split_once('-').map(|(_, s)| s.to_string()).unwrap_or(name.clone());
                out.push(format!("{suffix}:{size}"));
            }
            last_size.insert(name, size);
        }
        out
    }

    pub fn created_rs_opt(&self) -> Option<Value> {
        self.bodies("create", "replicasets", None).into_iter().next()
    }

    pub fn created_rs(&self) -> Value {
        self.created_rs_opt().expect("a ReplicaSet was created")
    }

    pub fn rs_updates(&self) -> Vec<Value> {
        self.bodies("update", "replicasets", None)
    }

    pub fn deployment_updates(&self) -> Vec<Value> {
        self.bodies("update", "deployments", None)
    }

    pub fn deployment_status_updates(&self) -> Vec<Value> {
        self.bodies("update", "deployments", Some("status"))
    }

    pub fn deleted_rss(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .api
            .mutations()
            .into_iter()
            .filter(|a| a.verb == "delete" && a.resource == "replicasets")
            .map(|a| a.name)
            .collect();
        names.sort();
        names
    }

    pub fn events(&self) -> Vec<String> {
        self.recorder.recorded().iter().map(|e| e.summary()).collect()
    }
}

pub fn set_image(t: &mut PodTemplateSpec, image: &str) {
    if let Some(spec) = t.spec.as_mut() {
        for c in &mut spec.containers {
            c.image = Some(image.to_string());
        }
    }
}
