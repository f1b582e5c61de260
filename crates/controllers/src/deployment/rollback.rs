//! Controller-side rollback (`rollback.go`), requested with the deprecated
//! `deprecated.deployment.rollback.to` annotation (what `extensions/v1beta1`'s
//! `spec.rollbackTo` became): the Deployment's template is replaced by the template of the
//! ReplicaSet of that revision (0 = the previous revision), the annotation is cleared, and the
//! next sync rolls out as for any template change.
//!
//! `kubectl rollout undo` does the same client-side since `apps/v1` (it patches the template
//! and the annotations itself), so this path only serves old clients.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::DeploymentController;
use super::sync::all_rss;
use super::util::*;
use crate::util::name_of;
use skiff_runtime::api::ApiClientExt;
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult};
use skiff_runtime::events::{EVENT_TYPE_NORMAL, EVENT_TYPE_WARNING, reasons as event_reasons};

/// `getRollbackTo`: the requested revision, if the annotation is present and numeric.
pub fn get_rollback_to(d: &Deployment) -> Option<i64> {
    let v = d.metadata.annotations.as_ref()?.get(DEPRECATED_ROLLBACK_TO)?;
    if v.is_empty() {
        return None;
    }
    v.parse().ok()
}

/// `SetFromReplicaSetTemplate`: the Deployment takes the ReplicaSet's template, minus the
/// pod-template-hash label.
pub fn set_from_replica_set_template(d: &mut Deployment, template: &PodTemplateSpec) {
    let mut t = template.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY);
    }
    d.spec.get_or_insert_with(Default::default).template = t;
}

/// `SetDeploymentAnnotationsTo`: the Deployment keeps its own controller annotations and takes
/// every other annotation (e.g. `kubernetes.io/change-cause`) from the ReplicaSet rolled
/// back to.
pub fn set_deployment_annotations_to(d: &mut Deployment, rs: &ReplicaSet) {
    let mut ann: BTreeMap<String, String> = d
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| skip_copy_annotation(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in rs.metadata.annotations.iter().flatten() {
        if !skip_copy_annotation(k) {
            ann.insert(k.clone(), v.clone());
        }
    }
    d.metadata.annotations = Some(ann);
}

impl DeploymentController {
    /// `rollback`.
    pub(crate) async fn rollback(&self, d: &mut Deployment, rs_list: &mut Vec<ReplicaSet>) -> ReconcileResult {
        let (new_rs, old_rss) = self.get_all_replica_sets_and_sync_revision(d, rs_list, true).await?;
        let all = all_rss(&old_rss, new_rs.as_ref());
        let mut to = get_rollback_to(d).unwrap_or(0);
        if to == 0 {
            to = last_revision(&all);
            if to == 0 {
                self.recorder.event_for(
                    d,
                    EVENT_TYPE_WARNING,
                    event_reasons::DEPLOYMENT_ROLLBACK_REVISION_NOT_FOUND,
                    "Unable to find last revision.",
                );
                self.update_deployment_and_clear_rollback_to(d).await?;
                return Ok(Action::AwaitChange);
            }
        }
        let target = all.iter().find(|rs| revision(&rs.metadata).ok() == Some(to)).map(|rs| (*rs).clone());
        let Some(target) = target else {
            self.recorder.event_for(
                d,
                EVENT_TYPE_WARNING,
                event_reasons::DEPLOYMENT_ROLLBACK_REVISION_NOT_FOUND,
                "Unable to find the revision to rollback to.",
            );
            self.update_deployment_and_clear_rollback_to(d).await?;
            return Ok(Action::AwaitChange);
        };
        // The revision number is bumped by the next sync, which finds this ReplicaSet as new.
        let performed = self.rollback_to_template(d, &target).await?;
        if performed {
            self.recorder.event_for(
                d,
                EVENT_TYPE_NORMAL,
                event_reasons::DEPLOYMENT_ROLLBACK,
                &format!("Rolled back deployment {:?} to revision {to}", name_of(&d.metadata)),
            );
        }
        Ok(Action::AwaitChange)
    }

    /// `rollbackToTemplate`: copies the template unless it is already current.
    async fn rollback_to_template(&self, d: &mut Deployment, rs: &ReplicaSet) -> Result<bool, ReconcileError> {
        let performed = if !equal_ignore_hash(&d_template(d), &rs_template(rs)) {
            set_from_replica_set_template(d, &rs_template(rs));
            set_deployment_annotations_to(d, rs);
            true
        } else {
            self.recorder.event_for(
                d,
                EVENT_TYPE_WARNING,
                event_reasons::DEPLOYMENT_ROLLBACK_TEMPLATE_UNCHANGED,
                &format!(
                    "The rollback revision contains the same template as current deployment {:?}",
                    name_of(&d.metadata)
                ),
            );
            false
        };
        self.update_deployment_and_clear_rollback_to(d).await?;
        Ok(performed)
    }

    /// `updateDeploymentAndClearRollbackTo`.
    async fn update_deployment_and_clear_rollback_to(&self, d: &mut Deployment) -> Result<(), ReconcileError> {
        if let Some(a) = d.metadata.annotations.as_mut() {
            a.remove(DEPRECATED_ROLLBACK_TO);
        }
        let mut updated = self.api.update_typed(d).await?;
        set_defaults(&mut updated);
        *d = updated;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::*;
    use super::*;

    #[tokio::test]
    async fn rollback_to_the_previous_revision_copies_its_template_and_clears_the_request() {
        let f = Fixture::new();
        let mut d = f.deployment("web", 2, "25%", "25%");
        let v1 = f.old_rs_with_image(&d, "v1", 0, 0, 1, "nginx:1.14");
        let current = f.new_rs(&d, "v2", 2, 2, 2);
        d.metadata.annotations.get_or_insert_with(Default::default).insert(DEPRECATED_ROLLBACK_TO.into(), "0".into());
        f.seed_deployment(&d);
        f.seed_rs(&v1);
        f.seed_rs(&current);
        f.sync("ns/web").await.unwrap();
        let update = f.deployment_updates().pop().expect("deployment updated");
        assert_eq!(update["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.14");
        assert!(update["spec"]["template"]["metadata"]["labels"].get("pod-template-hash").is_none());
        assert!(update["metadata"]["annotations"].get(DEPRECATED_ROLLBACK_TO).is_none());
        assert_eq!(f.events(), ["Normal DeploymentRollback Rolled back deployment \"web\" to revision 1"]);
    }

    #[tokio::test]
    async fn rollback_to_a_missing_revision_only_clears_the_request() {
        let f = Fixture::new();
        let mut d = f.deployment("web", 2, "25%", "25%");
        let current = f.new_rs(&d, "v2", 2, 2, 2);
        d.metadata.annotations.get_or_insert_with(Default::default).insert(DEPRECATED_ROLLBACK_TO.into(), "7".into());
        f.seed_deployment(&d);
        f.seed_rs(&current);
        f.sync("ns/web").await.unwrap();
        let update = f.deployment_updates().pop().expect("deployment updated");
        assert_eq!(update["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:2");
        assert_eq!(
            f.events(),
            ["Warning DeploymentRollbackRevisionNotFound Unable to find the revision to rollback to."]
        );
    }

    #[tokio::test]
    async fn a_kubectl_style_undo_reuses_the_old_replica_set_as_a_new_revision() {
        // kubectl rollout undo patched the template back to v1's: v1's ReplicaSet is the new one.
        let f = Fixture::new();
        let d = f.deployment_with_image("web", 2, "nginx:1.14");
        let v1 = f.old_rs_with_image(&d, "v1", 0, 0, 1, "nginx:1.14");
        let v2 = f.old_rs_with_image(&d, "v2", 2, 2, 2, "nginx:2");
        f.seed_deployment(&d);
        f.seed_rs(&v1);
        f.seed_rs(&v2);
        f.sync("ns/web").await.unwrap();
        let rs_updates = f.rs_updates();
        let v1_update = rs_updates.iter().find(|u| u["metadata"]["name"] == "web-v1").expect("v1 updated");
        assert_eq!(v1_update["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "3");
        assert_eq!(v1_update["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"], "1");
        // The Deployment takes the reused ReplicaSet's revision (written with its status).
        let status = f.deployment_status_updates().into_iter().next().expect("status written");
        assert_eq!(status["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "3");
        // No new ReplicaSet for a template an old one already has.
        assert!(f.created_rs_opt().is_none());
    }
}
