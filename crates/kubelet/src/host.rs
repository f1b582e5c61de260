//! What the pod runtime needs from the Kubernetes API, as one trait ([`PodHost`]) so the pod
//! runtime can run against the API server ([`ApiPodHost`]) or in-memory in tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Event, EventSource, ObjectReference, Pod, PodStatus, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use crate::Error;

/// Event type: "Normal" or "Warning" (core/v1 Event `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened (Pulled, Created, Started, Killing).
    Normal,
    /// Something went wrong (Failed, BackOff, Unhealthy).
    Warning,
}

impl EventType {
    /// The API string.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// An event about a pod (or one of its containers), as the kubelet records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason: Pulling, Pulled, Created, Started, Killing, BackOff, Unhealthy, Failed...
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `involvedObject.fieldPath`, e.g. `spec.containers{web}`.
    pub field_path: Option<String>,
}

/// The API operations the pod runtime uses.
#[async_trait::async_trait]
pub trait PodHost: Send + Sync + 'static {
    /// Reads a ConfigMap; `Ok(None)` when it does not exist.
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, Error>;
    /// Reads a Secret; `Ok(None)` when it does not exist.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, Error>;
    /// Lists the Services of a namespace (for service environment variables). The default
    /// implementation returns none.
    async fn services(&self, namespace: &str) -> Result<Vec<Service>, Error> {
        let _ = namespace;
        Ok(Vec::new())
    }
    /// Requests a service account token bound to `pod` (TokenRequest API); `Ok(None)` when the
    /// API does not offer token requests.
    async fn service_account_token(
        &self,
        pod: &Pod,
        audience: Option<String>,
        expiration_seconds: i64,
    ) -> Result<Option<String>, Error>;
    /// Writes the pod's status (the `status` subresource).
    async fn update_pod_status(&self, pod: &Pod, status: &PodStatus) -> Result<(), Error>;
    /// Deletes the pod object with grace period 0 once its containers stopped (UID
    /// precondition, so a recreated pod of the same name is never deleted).
    async fn delete_pod(&self, pod: &Pod) -> Result<(), Error>;
    /// Records an event about `pod` (best effort, never blocks).
    fn record_event(&self, pod: &Pod, event: PodEvent);
}

/// [`PodHost`] over the Kubernetes API.
pub struct ApiPodHost {
    client: Client,
    events: mpsc::Sender<(Pod, PodEvent, Timestamp)>,
}

impl ApiPodHost {
    /// A host for the node `node_name`; starts a background task posting events (core/v1
    /// Events with source component "kubelet").
    pub fn new(client: Client, node_name: &str) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(post_events(client.clone(), node_name.to_string(), rx));
        Arc::new(ApiPodHost { client, events: tx })
    }
}

fn not_found_is_none<T>(r: Result<T, kube::Error>) -> Result<Option<T>, Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[async_trait::async_trait]
impl PodHost for ApiPodHost {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, Error> {
        not_found_is_none(Api::<ConfigMap>::namespaced(self.client.clone(), namespace).get(name).await)
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, Error> {
        not_found_is_none(Api::<Secret>::namespaced(self.client.clone(), namespace).get(name).await)
    }

    async fn services(&self, namespace: &str) -> Result<Vec<Service>, Error> {
        let api: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        Ok(api.list(&kube::api::ListParams::default()).await?.items)
    }

    async fn service_account_token(
        &self,
        pod: &Pod,
        audience: Option<String>,
        expiration_seconds: i64,
    ) -> Result<Option<String>, Error> {
        let ns = pod.namespace().unwrap_or_default();
        let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_else(|| "default".into());
        let api: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(self.client.clone(), &ns);
        let req = TokenRequest {
            metadata: ObjectMeta::default(),
            spec: TokenRequestSpec {
                audiences: audience.into_iter().collect(),
                expiration_seconds: Some(expiration_seconds),
                bound_object_ref: Some(k8s_openapi::api::authentication::v1::BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            status: None,
        };
        let r: Result<TokenRequest, kube::Error> =
            api.create_subresource("token", &sa, &PostParams::default(), &req).await;
        match r {
            Ok(t) => Ok(t.status.map(|s| s.token)),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 405 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn update_pod_status(&self, pod: &Pod, status: &PodStatus) -> Result<(), Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let patch = serde_json::json!({ "metadata": { "uid": pod.metadata.uid }, "status": status });
        match api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete_pod(&self, pod: &Pod) -> Result<(), Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..Default::default()
        };
        match api.delete(&pod.name_any(), &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn record_event(&self, pod: &Pod, event: PodEvent) {
        // Stamped now, when it happened, not when the poster gets to it.
        if self.events.try_send((pod.clone(), event, Timestamp::now())).is_err() {
            tracing::debug!("event queue full; dropping an event");
        }
    }
}

static EVENT_SEQ: AtomicU64 = AtomicU64::new(0);

/// The core/v1 Event the kubelet posts for `event` about `pod`.
pub fn event_object(pod: &Pod, event: &PodEvent, node_name: &str, now: Timestamp) -> Event {
    let seq = EVENT_SEQ.fetch_add(1, Ordering::Relaxed);
    let name = format!("{}.{:x}{:04x}", pod.name_any(), now.as_nanosecond(), seq & 0xffff);
    Event {
        metadata: ObjectMeta { name: Some(name), namespace: pod.namespace(), ..Default::default() },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.namespace(),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            field_path: event.field_path.clone(),
        },
        reason: Some(event.reason.clone()),
        message: Some(event.message.clone()),
        type_: Some(event.type_.as_str().to_string()),
        source: Some(EventSource { component: Some("kubelet".into()), host: Some(node_name.to_string()) }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        count: Some(1),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some(node_name.to_string()),
        action: Some(event.reason.clone()),
        ..Default::default()
    }
}

/// Posts queued events, up to 8 at once (a burst of pod starts queues several per pod).
async fn post_events(client: Client, node_name: String, rx: mpsc::Receiver<(Pod, PodEvent, Timestamp)>) {
    use futures::StreamExt;
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
        .for_each_concurrent(8, |(pod, event, at)| {
            let client = client.clone();
            let node_name = node_name.clone();
            async move {
                let ev = event_object(&pod, &event, &node_name, at);
                let api: Api<Event> = Api::namespaced(client, &pod.namespace().unwrap_or_default());
                if let Err(e) = api.create(&PostParams::default(), &ev).await {
                    tracing::debug!(error = %e, reason = %event.reason, "posting event failed");
                }
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_the_pod_and_container() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let ev = PodEvent {
            type_: EventType::Normal,
            reason: "Started".into(),
            message: "Started container c".into(),
            field_path: Some("spec.containers{c}".into()),
        };
        let a = event_object(&pod, &ev, "node1", Timestamp::UNIX_EPOCH);
        let b = event_object(&pod, &ev, "node1", Timestamp::UNIX_EPOCH);
        assert_ne!(a.metadata.name, b.metadata.name, "event names are unique");
        assert!(a.metadata.name.unwrap_or_default().starts_with("web."));
        assert_eq!(a.involved_object.field_path.as_deref(), Some("spec.containers{c}"));
        assert_eq!(a.source.and_then(|s| s.host).as_deref(), Some("node1"));
        assert_eq!(a.type_.as_deref(), Some("Normal"));
    }
}
