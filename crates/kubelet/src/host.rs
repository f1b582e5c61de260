//! What the pod runtime needs from the Kubernetes API, as one trait ([`PodHost`]) so the pod
//! runtime can run against the API server ([`ApiPodHost`]) or in-memory in tests.

use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Pod, PodStatus, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use skiff_runtime::api::KubeApi;
use skiff_runtime::events::{EventBroadcaster, EventRecorder, EventSource};

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
    recorder: EventRecorder,
}

impl ApiPodHost {
    /// A host for the node `node_name`; starts the runtime's event recorder (core/v1 Events
    /// with source component "kubelet" and host `node_name`).
    pub fn new(client: Client, node_name: &str) -> Arc<Self> {
        let source = EventSource { component: "kubelet".into(), host: node_name.to_string() };
        let recorder = EventBroadcaster::new(Arc::new(KubeApi::new(client.clone()))).new_recorder(source);
        Arc::new(ApiPodHost { client, recorder })
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
        // The recorder stamps it now, when it happened, not when its writer gets to it; the
        // action is the reason, as the kubelet reports it.
        let object = event_reference(pod, &event);
        self.recorder.event_with_action(&object, event.type_.as_str(), &event.reason, &event.reason, &event.message);
    }
}

/// The object a kubelet event about `pod` is about: the pod, and the container through the
/// event's `fieldPath` (`spec.containers{c}`).
pub fn event_reference(pod: &Pod, event: &PodEvent) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.namespace(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: event.field_path.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_refers_to_the_pod_and_its_container() {
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
        let r = event_reference(&pod, &ev);
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!((r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()), (Some("ns"), Some("web"), Some("u")));
        assert_eq!(r.field_path.as_deref(), Some("spec.containers{c}"));
    }
}
