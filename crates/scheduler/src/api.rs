//! [`ClusterApi`] implementations: [`KubeApi`] over `kube::Client` (the real API server),
//! `RecordingApi` for tests (behind the `testing` feature), [`NoopApi`] for benchmarks and for
//! checking a configuration.

#[cfg(any(test, feature = "testing"))]
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
#[cfg(any(test, feature = "testing"))]
use parking_lot::Mutex;
use skiff_runtime::events::EventRecorder;

use crate::framework::{ClusterApi, PodInfo, PodStatusUpdate, SchedulerEvent};

/// The component name on events (`default-scheduler`).
pub const COMPONENT: &str = "default-scheduler";

/// Writes through the Kubernetes API.
///
/// Events go through the runtime's recorder as `default-scheduler`: repeated events (same
/// object, reason and message) are aggregated by client-go's correlator, so `kubectl describe`
/// shows `(x3 over 2m)`.
#[derive(Clone)]
pub struct KubeApi {
    client: kube::Client,
    recorder: EventRecorder,
}

impl KubeApi {
    /// Wraps a client (starts the event recorder's writer task: call inside a tokio runtime).
    pub fn new(client: kube::Client) -> Self {
        let recorder = EventRecorder::new(client.clone(), COMPONENT);
        Self { client, recorder }
    }
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// The pod's conditions with `cond` replacing the condition of the same type; the transition
/// time is kept when the status did not change (`podutil.UpdatePodCondition`).
pub fn merged_conditions(pod: &Pod, mut cond: PodCondition) -> Vec<PodCondition> {
    let mut conds = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    match conds.iter_mut().find(|c| c.type_ == cond.type_) {
        Some(existing) => {
            if existing.status == cond.status {
                cond.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = cond;
        }
        None => conds.push(cond),
    }
    conds
}

#[async_trait]
impl ClusterApi for KubeApi {
    async fn bind(&self, pod: &PodInfo, node: &str) -> anyhow::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let binding = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.pod.metadata.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let _: serde_json::Value =
            api.create_subresource("binding", &pod.name, &PostParams::default(), &binding).await?;
        Ok(())
    }

    async fn delete_pod(&self, pod: &PodInfo) -> anyhow::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        // Record why the pod goes away (DisruptionTarget), then delete this very pod (UID precondition).
        let cond = PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("PreemptionByScheduler".into()),
            message: Some(format!("{COMPONENT}: preempting to accommodate a higher priority pod")),
            last_transition_time: Some(Time(now())),
            ..Default::default()
        };
        let patch = serde_json::json!({"status": {"conditions": merged_conditions(&pod.pod, cond)}});
        if let Err(e) = api.patch_status(&pod.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            tracing::debug!(pod = %pod.key, error = %e, "adding DisruptionTarget condition failed");
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: pod.pod.metadata.uid.clone(), resource_version: None }),
            ..Default::default()
        };
        match api.delete(&pod.name, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn update_pod_status(&self, pod: &PodInfo, update: PodStatusUpdate) -> anyhow::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let mut status = serde_json::Map::new();
        if let Some(cond) = update.condition {
            status.insert("conditions".into(), serde_json::to_value(merged_conditions(&pod.pod, cond))?);
        }
        if let Some(n) = update.nominated_node_name {
            status.insert("nominatedNodeName".into(), n.map_or(serde_json::Value::Null, serde_json::Value::String));
        }
        if status.is_empty() {
            return Ok(());
        }
        let patch = serde_json::json!({ "status": status });
        api.patch_status(&pod.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    async fn record_event(&self, ev: SchedulerEvent) -> anyhow::Result<()> {
        self.recorder.event_with_action(&ev.regarding, ev.event_type, ev.reason, ev.action, &ev.message);
        Ok(())
    }
}

/// A call made through [`RecordingApi`].
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Debug, PartialEq)]
pub enum ApiCall {
    /// `bind(pod key, node)`.
    Bind(String, String),
    /// `delete_pod(pod key)`.
    Delete(String),
    /// `update_pod_status(pod key, update)`.
    UpdateStatus(String, PodStatusUpdate),
    /// `record_event(event)`.
    Event(SchedulerEvent),
}

/// Records every call; binds fail while `fail_binds` is set.
#[cfg(any(test, feature = "testing"))]
#[derive(Default)]
pub struct RecordingApi {
    calls: Mutex<Vec<ApiCall>>,
    /// Makes `bind` fail (to test the binding-failure path).
    pub fail_binds: AtomicBool,
}

#[cfg(any(test, feature = "testing"))]
impl RecordingApi {
    /// Every call so far.
    pub fn calls(&self) -> Vec<ApiCall> {
        self.calls.lock().clone()
    }

    /// `(pod key, node)` of successful binds.
    pub fn binds(&self) -> Vec<(String, String)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                ApiCall::Bind(p, n) => Some((p, n)),
                _ => None,
            })
            .collect()
    }

    /// Events recorded.
    pub fn events(&self) -> Vec<SchedulerEvent> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                ApiCall::Event(e) => Some(e),
                _ => None,
            })
            .collect()
    }

    /// Keys of deleted pods.
    pub fn deletes(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                ApiCall::Delete(p) => Some(p),
                _ => None,
            })
            .collect()
    }
}

#[cfg(any(test, feature = "testing"))]
#[async_trait]
impl ClusterApi for RecordingApi {
    async fn bind(&self, pod: &PodInfo, node: &str) -> anyhow::Result<()> {
        if self.fail_binds.load(Ordering::SeqCst) {
            anyhow::bail!("pods \"{}\" is forbidden: injected failure", pod.name);
        }
        self.calls.lock().push(ApiCall::Bind(pod.key.clone(), node.to_string()));
        Ok(())
    }
    async fn delete_pod(&self, pod: &PodInfo) -> anyhow::Result<()> {
        self.calls.lock().push(ApiCall::Delete(pod.key.clone()));
        Ok(())
    }
    async fn update_pod_status(&self, pod: &PodInfo, update: PodStatusUpdate) -> anyhow::Result<()> {
        self.calls.lock().push(ApiCall::UpdateStatus(pod.key.clone(), update));
        Ok(())
    }
    async fn record_event(&self, event: SchedulerEvent) -> anyhow::Result<()> {
        self.calls.lock().push(ApiCall::Event(event));
        Ok(())
    }
}

/// Accepts every call and does nothing (benchmarks).
#[derive(Default)]
pub struct NoopApi;

#[async_trait]
impl ClusterApi for NoopApi {
    async fn bind(&self, _pod: &PodInfo, _node: &str) -> anyhow::Result<()> {
        Ok(())
    }
    async fn delete_pod(&self, _pod: &PodInfo) -> anyhow::Result<()> {
        Ok(())
    }
    async fn update_pod_status(&self, _pod: &PodInfo, _update: PodStatusUpdate) -> anyhow::Result<()> {
        Ok(())
    }
    async fn record_event(&self, _event: SchedulerEvent) -> anyhow::Result<()> {
        Ok(())
    }
}
