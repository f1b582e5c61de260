//! The API actions controllers perform: [`ApiClient`], implemented by [`KubeApi`] (a `kube::Client`)
//! in production and by `fake::FakeApi` (a recording in-memory tracker, behind the `testing`
//! feature) in tests.
//!
//! Controllers read from informer caches and write only through this trait, so every write a
//! reconcile makes can be recorded and compared in a unit test, the way Kubernetes' controller
//! tests compare the actions of `client-go`'s fake clientset.
//!
//! The trait is untyped (JSON in, JSON out, the resource named by a [`ApiResource`]) so that the
//! garbage collector and the namespace controller work on any resource, custom ones included;
//! [`ApiClientExt`] adds typed helpers for the k8s-openapi types.

use async_trait::async_trait;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::Request;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use kube::discovery::ApiResource;
pub use skiff_apimachinery::ApiError;

/// How a patch body is to be interpreted (`Content-Type` of a PATCH request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json` (built-in types only).
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
}

/// `metav1.DeletionPropagation`: what happens to the dependents of a deleted object.
///
/// See <https://kubernetes.io/docs/concepts/architecture/garbage-collection/#cascading-deletion>.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropagationPolicy {
    /// Dependents are left behind, their ownerReferences to the object removed (`orphan` finalizer).
    Orphan,
    /// The object is deleted at once; the garbage collector deletes the dependents afterwards.
    Background,
    /// The object stays (with the `foregroundDeletion` finalizer) until every dependent with
    /// `blockOwnerDeletion: true` is gone.
    Foreground,
}

impl PropagationPolicy {
    /// The wire name (`Orphan`, `Background`, `Foreground`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Orphan => "Orphan",
            Self::Background => "Background",
            Self::Foreground => "Foreground",
        }
    }
}

/// The subset of `metav1.DeleteOptions` controllers use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// `propagationPolicy`; `None` lets the server pick the resource's default.
    pub propagation_policy: Option<PropagationPolicy>,
    /// `preconditions.uid`: delete only if the object still has this uid.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`: delete only if unchanged since this version.
    pub precondition_resource_version: Option<String>,
    /// `gracePeriodSeconds`: `Some(0)` deletes a pod at once, without waiting for its kubelet
    /// (pod GC's force deletion); `None` keeps the pod's own grace period.
    pub grace_period_seconds: Option<u32>,
}

impl DeleteOptions {
    /// Options with only a propagation policy.
    pub fn propagation(policy: PropagationPolicy) -> Self {
        Self { propagation_policy: Some(policy), ..Default::default() }
    }
}

/// One resource found by API discovery (`/api`, `/apis`): its coordinates, scope and verbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredResource {
    /// Group, version, kind and plural name.
    pub resource: ApiResource,
    /// Whether objects of this resource live in namespaces.
    pub namespaced: bool,
    /// Supported verbs (`get`, `list`, `watch`, `create`, `delete`, `deletecollection`, ...).
    pub verbs: Vec<String>,
}

impl DiscoveredResource {
    /// Whether discovery lists `verb` for this resource.
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

/// The API actions of every controller. Each method is one HTTP request to the API server.
///
/// `namespace` is `None` for cluster-scoped resources (and, for [`ApiClient::list`], for a
/// list across all namespaces). Errors are Kubernetes `Status` errors ([`ApiError`]); a transport
/// failure is reported as 503 `ServiceUnavailable`.
#[async_trait]
pub trait ApiClient: Send + Sync {
    /// `GET`: the object, or 404 `NotFound`.
    async fn get(&self, resource: &ApiResource, namespace: Option<&str>, name: &str) -> Result<Value, ApiError>;

    /// `GET` of a subresource (`scale`): 404 `NotFound` when the object is missing or the
    /// resource does not serve that subresource.
    async fn get_subresource(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
    ) -> Result<Value, ApiError>;

    /// `GET` of the collection, optionally filtered by a label selector (string form).
    async fn list(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Value>, ApiError>;

    /// `POST`: creates the object and returns it as stored (name generated from
    /// `metadata.generateName` when empty).
    async fn create(&self, resource: &ApiResource, namespace: Option<&str>, object: &Value) -> Result<Value, ApiError>;

    /// `PUT` of the object or of a subresource (`status`, `finalize`); `metadata.resourceVersion`
    /// in the body makes it conditional (409 `Conflict` when stale).
    async fn update(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        object: &Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError>;

    /// `PATCH` of the object or of a subresource.
    async fn patch(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError>;

    /// `DELETE` of one object.
    async fn delete(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), ApiError>;

    /// `DELETE` of a collection (every object of the resource in the namespace).
    async fn delete_collection(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        options: &DeleteOptions,
    ) -> Result<(), ApiError>;

    /// API discovery: every top-level resource of the preferred version of every group.
    async fn discover(&self) -> Result<Vec<DiscoveredResource>, ApiError>;
}

/// A k8s-openapi (or `kube::CustomResource`) type that [`ApiClientExt`] can send and receive.
pub trait ApiObject:
    kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}

impl<K> ApiObject for K where
    K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}

/// The [`ApiResource`] of a typed object.
pub fn resource_of<K: ApiObject>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn to_value<K: Serialize>(obj: &K) -> Result<Value, ApiError> {
    serde_json::to_value(obj).map_err(|e| ApiError::bad_request(format!("cannot encode object: {e}")))
}

fn from_value<K: DeserializeOwned>(v: Value) -> Result<K, ApiError> {
    serde_json::from_value(v).map_err(|e| ApiError::internal(format!("cannot decode object from the API: {e}")))
}

/// Typed helpers over [`ApiClient`] for k8s-openapi types (namespace taken from the object).
#[async_trait]
pub trait ApiClientExt: ApiClient {
    /// Typed [`ApiClient::get`].
    async fn get_typed<K: ApiObject>(&self, namespace: Option<&str>, name: &str) -> Result<K, ApiError> {
        from_value(self.get(&resource_of::<K>(), namespace, name).await?)
    }

    /// Typed [`ApiClient::list`].
    async fn list_typed<K: ApiObject>(
        &self,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<K>, ApiError> {
        let items = self.list(&resource_of::<K>(), namespace, label_selector).await?;
        items.into_iter().map(from_value).collect()
    }

    /// Typed [`ApiClient::create`].
    async fn create_typed<K: ApiObject>(&self, object: &K) -> Result<K, ApiError> {
        let ns = object.meta().namespace.clone();
        from_value(self.create(&resource_of::<K>(), ns.as_deref(), &to_value(object)?).await?)
    }

    /// Typed [`ApiClient::update`] of the main resource (`PUT`).
    async fn update_typed<K: ApiObject>(&self, object: &K) -> Result<K, ApiError> {
        let ns = object.meta().namespace.clone();
        let name = object.meta().name.clone().unwrap_or_default();
        from_value(self.update(&resource_of::<K>(), ns.as_deref(), &name, &to_value(object)?, None).await?)
    }

    /// Typed [`ApiClient::update`] of the `status` subresource (`UpdateStatus`).
    async fn update_status_typed<K: ApiObject>(&self, object: &K) -> Result<K, ApiError> {
        let ns = object.meta().namespace.clone();
        let name = object.meta().name.clone().unwrap_or_default();
        from_value(self.update(&resource_of::<K>(), ns.as_deref(), &name, &to_value(object)?, Some("status")).await?)
    }

    /// Typed [`ApiClient::patch`] of the main resource.
    async fn patch_typed<K: ApiObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
    ) -> Result<K, ApiError> {
        from_value(self.patch(&resource_of::<K>(), namespace, name, patch_type, patch, None).await?)
    }

    /// Typed [`ApiClient::delete`].
    async fn delete_typed<K: ApiObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        self.delete(&resource_of::<K>(), namespace, name, options).await
    }
}

impl<T: ApiClient + ?Sized> ApiClientExt for T {}

/// Whether the error is 404 `NotFound`.
pub fn is_not_found(e: &ApiError) -> bool {
    e.code == 404 && (e.reason == "NotFound" || e.reason.is_empty())
}

/// Whether the error is a 409 `Conflict` (stale `resourceVersion`, failed precondition).
pub fn is_conflict(e: &ApiError) -> bool {
    e.code == 409 && e.reason == "Conflict"
}

/// Whether the error is 409 `AlreadyExists`.
pub fn is_already_exists(e: &ApiError) -> bool {
    e.code == 409 && e.reason == "AlreadyExists"
}

/// Whether the error is 405 `MethodNotAllowed` (the verb is not supported for the resource).
pub fn is_method_not_supported(e: &ApiError) -> bool {
    e.code == 405
}

/// Whether the error carries the `StatusCause` of type `cause` (`NamespaceTerminating`).
pub fn has_status_cause(e: &ApiError, cause: &str) -> bool {
    e.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == cause))
}

/// `v1.NamespaceTerminatingCause`: the cause the API server attaches to a create refused because
/// the namespace is being deleted.
pub const NAMESPACE_TERMINATING_CAUSE: &str = "NamespaceTerminating";

/// Converts a `kube::Error` into an [`ApiError`] (API `Status` errors keep code, reason, message
/// and causes; transport errors become 503 `ServiceUnavailable`).
pub fn api_error(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(status) => {
            let mut err = ApiError::new(status.code, &status.reason, status.message.clone());
            if let Some(d) = &status.details {
                err.details = Some(skiff_apimachinery::status::Details {
                    name: d.name.clone(),
                    group: d.group.clone(),
                    kind: d.kind.clone(),
                    causes: d
                        .causes
                        .iter()
                        .map(|c| skiff_apimachinery::status::Cause {
                            reason: c.reason.clone(),
                            message: c.message.clone(),
                            field: c.field.clone(),
                        })
                        .collect(),
                    retry_after_seconds: (d.retry_after_seconds > 0).then_some(d.retry_after_seconds),
                });
            }
            err
        }
        kube::Error::SerdeError(e) => ApiError::internal(format!("cannot decode API response: {e}")),
        other => ApiError::unavailable(other.to_string()),
    }
}

/// [`ApiClient`] over a `kube::Client`: plain HTTP requests to any Kubernetes-compatible API server.
#[derive(Clone)]
pub struct KubeApi {
    client: kube::Client,
}

impl KubeApi {
    /// Wraps a client.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// The wrapped client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn request(resource: &ApiResource, namespace: Option<&str>) -> Request {
        use kube::Resource;
        Request::new(kube::api::DynamicObject::url_path(resource, namespace))
    }
}

/// Sends a request built by `kube::core::Request` and decodes the JSON answer.
macro_rules! send {
    ($self:expr, $req:expr) => {{
        match $req {
            Ok(req) => $self.client.request::<Value>(req).await.map_err(api_error),
            Err(e) => Err(ApiError::bad_request(format!("cannot build request: {e}"))),
        }
    }};
}

fn delete_params(options: &DeleteOptions) -> DeleteParams {
    let propagation_policy = options.propagation_policy.map(|p| match p {
        PropagationPolicy::Orphan => kube::api::PropagationPolicy::Orphan,
        PropagationPolicy::Background => kube::api::PropagationPolicy::Background,
        PropagationPolicy::Foreground => kube::api::PropagationPolicy::Foreground,
    });
    let preconditions =
        (options.precondition_uid.is_some() || options.precondition_resource_version.is_some()).then(|| {
            Preconditions {
                uid: options.precondition_uid.clone(),
                resource_version: options.precondition_resource_version.clone(),
            }
        });
    DeleteParams {
        propagation_policy,
        preconditions,
        grace_period_seconds: options.grace_period_seconds,
        ..Default::default()
    }
}

fn encode(v: &Value) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(v).map_err(|e| ApiError::bad_request(format!("cannot encode object: {e}")))
}

#[async_trait]
impl ApiClient for KubeApi {
    async fn get(&self, resource: &ApiResource, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        send!(self, Self::request(resource, namespace).get(name, &Default::default()))
    }

    async fn get_subresource(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
    ) -> Result<Value, ApiError> {
        send!(self, Self::request(resource, namespace).get_subresource(subresource, name))
    }

    async fn list(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Value>, ApiError> {
        let mut lp = ListParams::default();
        if let Some(sel) = label_selector {
            lp = lp.labels(sel);
        }
        let mut items = Vec::new();
        loop {
            let mut list = send!(self, Self::request(resource, namespace).list(&lp))?;
            if let Some(Value::Array(page)) = list.get_mut("items").map(Value::take) {
                items.extend(page);
            }
            match list.pointer("/metadata/continue").and_then(Value::as_str) {
                Some(token) if !token.is_empty() => lp.continue_token = Some(token.to_string()),
                _ => break,
            }
        }
        Ok(items)
    }

    async fn create(&self, resource: &ApiResource, namespace: Option<&str>, object: &Value) -> Result<Value, ApiError> {
        send!(self, Self::request(resource, namespace).create(&PostParams::default(), encode(object)?))
    }

    async fn update(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        object: &Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let req = Self::request(resource, namespace);
        let pp = PostParams::default();
        let built = match subresource {
            None => req.replace(name, &pp, encode(object)?),
            Some(sub) => req.replace_subresource(sub, name, &pp, encode(object)?),
        };
        send!(self, built)
    }

    async fn patch(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let req = Self::request(resource, namespace);
        let pp = PatchParams::default();
        let body: Patch<Value> = match patch_type {
            PatchType::Merge => Patch::Merge(patch.clone()),
            PatchType::Strategic => Patch::Strategic(patch.clone()),
            PatchType::Json => Patch::Json(
                serde_json::from_value(patch.clone())
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?,
            ),
        };
        let built = match subresource {
            None => req.patch(name, &pp, &body),
            Some(sub) => req.patch_subresource(sub, name, &pp, &body),
        };
        send!(self, built)
    }

    async fn delete(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        send!(self, Self::request(resource, namespace).delete(name, &delete_params(options))).map(|_| ())
    }

    async fn delete_collection(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        let req = Self::request(resource, namespace).delete_collection(&delete_params(options), &ListParams::default());
        send!(self, req).map(|_| ())
    }

    async fn discover(&self) -> Result<Vec<DiscoveredResource>, ApiError> {
        let discovery = kube::Discovery::new(self.client.clone()).run().await.map_err(api_error)?;
        let mut out = Vec::new();
        for group in discovery.groups() {
            for (ar, caps) in group.recommended_resources() {
                out.push(DiscoveredResource {
                    namespaced: caps.scope == kube::discovery::Scope::Namespaced,
                    verbs: caps.operations.clone(),
                    resource: ar,
                });
            }
        }
        Ok(out)
    }
}
