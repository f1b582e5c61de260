//! The HPA's view of its target: the generic `scale` subresource (`autoscaling/v1` Scale) of
//! whatever `scaleTargetRef` names — Deployments, ReplicaSets, StatefulSets,
//! ReplicationControllers and custom resources with a scale subresource alike — resolved
//! through discovery as upstream's REST mapper and scale client do. [`ScaleClient`] is the seam
//! unit tests replace.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::autoscaling::v2::CrossVersionObjectReference;
use parking_lot::Mutex;
use serde_json::Value;

use skiff_runtime::api::{ApiClient, ApiError, DiscoveredResource};

/// Reads and writes a target's scale.
#[async_trait]
pub trait ScaleClient: Send + Sync {
    /// The target's `autoscaling/v1` Scale (`spec.replicas`, `status.replicas`,
    /// `status.selector`).
    ///
    /// # Errors
    /// An unknown kind (`no matches for kind …`), or the API's error.
    async fn get_scale(&self, namespace: &str, target: &CrossVersionObjectReference) -> Result<Value, ApiError>;

    /// Writes `scale` (with its new `spec.replicas`) back; returns the stored Scale.
    ///
    /// # Errors
    /// As [`ScaleClient::get_scale`], and 409 when the Scale changed since it was read.
    async fn update_scale(
        &self,
        namespace: &str,
        target: &CrossVersionObjectReference,
        scale: &Value,
    ) -> Result<Value, ApiError>;
}

/// [`ScaleClient`] over the API, with discovery cached and re-read when a kind is unknown.
pub struct ApiScaleClient {
    api: Arc<dyn ApiClient>,
    discovery: Mutex<Option<Arc<Vec<DiscoveredResource>>>>,
}

impl ApiScaleClient {
    /// A scale client reading through `api`.
    pub fn new(api: Arc<dyn ApiClient>) -> Self {
        Self { api, discovery: Mutex::new(None) }
    }

    /// The REST mapping of the target's group and kind: its own version first, else any.
    async fn mapping(&self, target: &CrossVersionObjectReference) -> Result<DiscoveredResource, ApiError> {
        let api_version = target.api_version.clone().unwrap_or_default();
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.clone()),
        };
        let find = |all: &[DiscoveredResource]| {
            let of_kind = || all.iter().filter(|r| r.resource.kind == target.kind && r.resource.group == group);
            of_kind().find(|r| r.resource.version == version).or_else(|| of_kind().next()).cloned()
        };
        let cached = self.discovery.lock().clone();
        if let Some(all) = cached
            && let Some(found) = find(&all)
        {
            return Ok(found);
        }
        let all = Arc::new(self.api.discover().await?);
        *self.discovery.lock() = Some(all.clone());
        find(&all)
            .ok_or_else(|| ApiError::bad_request(format!("no matches for kind {:?} in group {:?}", target.kind, group)))
    }
}

#[async_trait]
impl ScaleClient for ApiScaleClient {
    async fn get_scale(&self, namespace: &str, target: &CrossVersionObjectReference) -> Result<Value, ApiError> {
        let m = self.mapping(target).await?;
        let ns = m.namespaced.then_some(namespace);
        self.api.get_subresource(&m.resource, ns, &target.name, "scale").await
    }

    async fn update_scale(
        &self,
        namespace: &str,
        target: &CrossVersionObjectReference,
        scale: &Value,
    ) -> Result<Value, ApiError> {
        let m = self.mapping(target).await?;
        let ns = m.namespaced.then_some(namespace);
        self.api.update(&m.resource, ns, &target.name, scale, Some("scale")).await
    }
}
