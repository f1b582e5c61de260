//! DefaultStorageClass (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#defaultstorageclass>,
//! `plugin/pkg/admission/storage/storageclass/setdefault`): a new PersistentVolumeClaim that
//! names no class gets the default StorageClass. A claim with `storageClassName: ""` asked for
//! no class and keeps it; with no default class the claim is left alone.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use skiff_apimachinery::ApiError;
use skiff_apimachinery::table::is_default_storage_class;

use crate::{AdmissionLookup, AdmissionRequest, Feedback, MutatingAdmission};

/// The beta annotation that named a claim's class before `spec.storageClassName`.
pub const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// `GetDefaultClass`: among the classes marked default, the newest (then the first by name),
/// as Kubernetes 1.33 picks when several are marked.
pub fn default_class(classes: &[Arc<Value>]) -> Option<&Value> {
    classes.iter().map(|c| c.as_ref()).filter(|c| is_default_storage_class(c)).max_by(|a, b| {
        let created =
            |c: &Value| c.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or("").to_string();
        let name = |c: &Value| c.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        // RFC 3339 UTC timestamps order as strings; the smaller name wins a tie.
        created(a).cmp(&created(b)).then_with(|| name(b).cmp(&name(a)))
    })
}

/// `PersistentVolumeClaimHasClass`: the claim names a class (possibly `""`) in its spec or its
/// beta annotation.
pub fn claim_has_class(claim: &Value) -> bool {
    claim.pointer("/spec/storageClassName").is_some_and(|c| !c.is_null())
        || claim.pointer("/metadata/annotations").and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION)).is_some()
}

/// The plugin.
pub struct DefaultStorageClass {
    lookup: Arc<dyn AdmissionLookup>,
}

impl DefaultStorageClass {
    /// Over `lookup`'s StorageClasses.
    pub fn new(lookup: Arc<dyn AdmissionLookup>) -> Self {
        Self { lookup }
    }
}

#[async_trait]
impl MutatingAdmission for DefaultStorageClass {
    fn name(&self) -> &str {
        "DefaultStorageClass"
    }
    async fn admit(&self, req: &mut AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        if !req.is_create_of("persistentvolumeclaims") {
            return Ok(());
        }
        let Some(claim) = req.object.as_mut() else { return Ok(()) };
        if claim_has_class(claim) {
            return Ok(());
        }
        let classes = self.lookup.storage_classes();
        let Some(name) = default_class(&classes).and_then(|c| c.pointer("/metadata/name")).cloned() else {
            return Ok(());
        };
        if let Some(spec) =
            claim.as_object_mut().map(|m| m.entry("spec").or_insert_with(|| Value::Object(Default::default())))
            && let Some(spec) = spec.as_object_mut()
        {
            spec.insert("storageClassName".into(), name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{MemoryLookup, Operation};

    fn class(name: &str, created: &str, default: bool) -> Value {
        let annotations =
            if default { json!({"storageclass.kubernetes.io/is-default-class": "true"}) } else { json!({}) };
        json!({"kind": "StorageClass", "metadata": {"name": name, "creationTimestamp": created, "annotations": annotations}, "provisioner": "x"})
    }

    async fn admit(lookup: &Arc<MemoryLookup>, claim: Value) -> Value {
        let plugin = DefaultStorageClass::new(lookup.clone());
        let mut req =
            AdmissionRequest::new(Operation::Create, "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim");
        req.object = Some(claim);
        plugin.admit(&mut req, &mut Feedback::default()).await.unwrap();
        req.object.unwrap()
    }

    #[tokio::test]
    async fn a_claim_without_a_class_gets_the_default_class() {
        let l = Arc::new(MemoryLookup::new());
        l.put(class("slow", "2026-01-01T00:00:00Z", false));
        l.put(class("local-path", "2026-01-01T00:00:00Z", true));
        let claim = admit(&l, json!({"metadata": {"name": "data"}, "spec": {}})).await;
        assert_eq!(claim["spec"]["storageClassName"], "local-path");
    }

    #[tokio::test]
    async fn with_two_default_classes_the_newest_wins() {
        let l = Arc::new(MemoryLookup::new());
        l.put(class("old", "2026-01-01T00:00:00Z", true));
        l.put(class("new", "2026-02-01T00:00:00Z", true));
        l.put(class("b-same", "2025-01-01T00:00:00Z", true));
        let claim = admit(&l, json!({"metadata": {"name": "data"}, "spec": {}})).await;
        assert_eq!(claim["spec"]["storageClassName"], "new");
        assert_eq!(
            default_class(&[
                Arc::new(class("b", "2026-01-01T00:00:00Z", true)),
                Arc::new(class("a", "2026-01-01T00:00:00Z", true))
            ])
            .unwrap()["metadata"]["name"],
            "a"
        );
    }

    #[tokio::test]
    async fn a_claim_asking_for_no_class_or_naming_one_is_left_alone() {
        let l = Arc::new(MemoryLookup::new());
        l.put(class("local-path", "2026-01-01T00:00:00Z", true));
        let claim = admit(&l, json!({"metadata": {"name": "d"}, "spec": {"storageClassName": ""}})).await;
        assert_eq!(claim["spec"]["storageClassName"], "");
        let annotated =
            json!({"metadata": {"name": "d", "annotations": {BETA_STORAGE_CLASS_ANNOTATION: "fast"}}, "spec": {}});
        assert!(admit(&l, annotated).await["spec"]["storageClassName"].is_null());
    }

    #[tokio::test]
    async fn without_a_default_class_the_claim_keeps_no_class() {
        let l = Arc::new(MemoryLookup::new());
        l.put(class("slow", "2026-01-01T00:00:00Z", false));
        assert!(admit(&l, json!({"metadata": {"name": "d"}, "spec": {}})).await["spec"]["storageClassName"].is_null());
    }
}
