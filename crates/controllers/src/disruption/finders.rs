//! The disruption controller's finders (`finders()` in `disruption.go`): from a pod's controller
//! reference to the controller that sets its scale and that scale. They are tried in
//! Kubernetes' order — ReplicationController, Deployment (through its ReplicaSet), ReplicaSet
//! not owned by a Deployment, StatefulSet, then any resource with a `scale` subresource — and a
//! finder that does not recognise the reference, or finds an object with another uid, passes.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::Value;

use super::DisruptionController;
use crate::util::{controller_of, uid_of};
use skiff_runtime::api::{ApiError, ApiResource, DiscoveredResource, is_not_found};

/// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → ``).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// `verifyGroupKind`: the reference has `kind` and one of `groups`.
fn is_kind(cref: &OwnerReference, kind: &str, groups: &[&str]) -> bool {
    cref.kind == kind && groups.contains(&group_of(&cref.api_version))
}

impl DisruptionController {
    /// The uid and scale of the controller `cref` points to, `None` when no finder resolves it.
    ///
    /// # Errors
    /// API errors of the scale finder, and a resource that does not implement `scale`.
    pub(super) async fn find_controller(
        &self,
        cref: &OwnerReference,
        ns: &str,
    ) -> Result<Option<(String, i32)>, ApiError> {
        if let Some(found) = self
            .replication_controller(cref, ns)
            .or_else(|| self.deployment(cref, ns))
            .or_else(|| self.replica_set(cref, ns))
            .or_else(|| self.stateful_set(cref, ns))
        {
            return Ok(Some(found));
        }
        self.scale_controller(cref, ns).await
    }

    /// `getPodReplicationController`.
    fn replication_controller(&self, cref: &OwnerReference, ns: &str) -> Option<(String, i32)> {
        if !is_kind(cref, "ReplicationController", &[""]) {
            return None;
        }
        let rc = self.replication_controllers.store().get_namespaced(Some(ns), &cref.name)?;
        (uid_of(&rc.metadata) == cref.uid)
            .then(|| (cref.uid.clone(), rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)))
    }

    /// `getPodDeployment`: the Deployment controlling the pod's ReplicaSet.
    fn deployment(&self, cref: &OwnerReference, ns: &str) -> Option<(String, i32)> {
        if !is_kind(cref, "ReplicaSet", &["apps", "extensions"]) {
            return None;
        }
        let rs = self.replicasets.store().get_namespaced(Some(ns), &cref.name)?;
        if uid_of(&rs.metadata) != cref.uid {
            return None;
        }
        let dref = controller_of(&rs.metadata)?;
        if !is_kind(dref, "Deployment", &["apps", "extensions"]) {
            return None;
        }
        let d = self.deployments.store().get_namespaced(Some(ns), &dref.name)?;
        (uid_of(&d.metadata) == dref.uid)
            .then(|| (dref.uid.clone(), d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)))
    }

    /// `getPodReplicaSet`: a ReplicaSet not controlled by a Deployment.
    fn replica_set(&self, cref: &OwnerReference, ns: &str) -> Option<(String, i32)> {
        if !is_kind(cref, "ReplicaSet", &["apps", "extensions"]) {
            return None;
        }
        let rs = self.replicasets.store().get_namespaced(Some(ns), &cref.name)?;
        if uid_of(&rs.metadata) != cref.uid || controller_of(&rs.metadata).is_some_and(|r| r.kind == "Deployment") {
            return None;
        }
        Some((cref.uid.clone(), rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)))
    }

    /// `getPodStatefulSet`.
    fn stateful_set(&self, cref: &OwnerReference, ns: &str) -> Option<(String, i32)> {
        if !is_kind(cref, "StatefulSet", &["apps"]) {
            return None;
        }
        let sts = self.statefulsets.store().get_namespaced(Some(ns), &cref.name)?;
        (uid_of(&sts.metadata) == cref.uid)
            .then(|| (cref.uid.clone(), sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)))
    }

    /// The discovered resource serving `kind` in the reference's group and version (the REST
    /// mapping), re-reading discovery once when it is not known yet.
    async fn rest_mapping(&self, cref: &OwnerReference) -> Result<Option<DiscoveredResource>, ApiError> {
        let (group, version) = match cref.api_version.rsplit_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), cref.api_version.clone()),
        };
        let find = |all: &[DiscoveredResource]| {
            all.iter()
                .find(|r| r.resource.kind == cref.kind && r.resource.group == group && r.resource.version == version)
                .cloned()
        };
        let cached = self.discovery.lock().clone();
        if let Some(all) = cached
            && let Some(found) = find(&all)
        {
            return Ok(Some(found));
        }
        let all = Arc::new(self.api.discover().await?);
        *self.discovery.lock() = Some(all.clone());
        Ok(find(&all))
    }

    /// `getScaleController`: the `scale` subresource of whatever the reference names.
    ///
    /// # Errors
    /// An unknown kind, a resource without a `scale` subresource ("… does not implement the
    /// scale subresource"), or another API error.
    async fn scale_controller(&self, cref: &OwnerReference, ns: &str) -> Result<Option<(String, i32)>, ApiError> {
        let Some(mapping) = self.rest_mapping(cref).await? else {
            return Err(ApiError::bad_request(format!(
                "no matches for kind {:?} in version {:?}",
                cref.kind, cref.api_version
            )));
        };
        let resource: &ApiResource = &mapping.resource;
        let ns = mapping.namespaced.then_some(ns);
        let scale = match self.api.get_subresource(resource, ns, &cref.name, "scale").await {
            Ok(s) => s,
            Err(e) if is_not_found(&e) => {
                // Either the controller is gone (it controls nothing then) or its resource has no
                // scale subresource: the object itself tells which.
                return match self.api.get(resource, ns, &cref.name).await {
                    Ok(_) => Err(ApiError::bad_request(format!(
                        "{}.{} does not implement the scale subresource",
                        resource.plural, resource.group
                    ))),
                    Err(e) if is_not_found(&e) => Ok(None),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        if scale.pointer("/metadata/uid").and_then(Value::as_str) != Some(cref.uid.as_str()) {
            return Ok(None);
        }
        let replicas = scale.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
        Ok(Some((cref.uid.clone(), replicas as i32)))
    }
}
