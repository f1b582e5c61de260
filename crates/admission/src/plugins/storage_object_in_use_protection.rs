//! StorageObjectInUseProtection (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#storageobjectinuseprotection>,
//! `plugin/pkg/admission/storage/storageobjectinuseprotection`): every new
//! PersistentVolumeClaim gets the `kubernetes.io/pvc-protection` finalizer and every new
//! PersistentVolume `kubernetes.io/pv-protection`, so a claim a pod uses, or a volume still
//! bound, is kept until the protection controllers remove them.

use async_trait::async_trait;
use serde_json::Value;
use skiff_apimachinery::ApiError;

use crate::{AdmissionRequest, Feedback, MutatingAdmission, array_at};

/// The finalizer protecting a claim in use by a pod.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// The finalizer protecting a volume bound to a claim.
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";

/// Adds `finalizer` to `obj`'s `metadata.finalizers` unless it is there.
pub fn add_finalizer(obj: &mut Value, finalizer: &str) {
    let finalizers = array_at(obj, &["metadata", "finalizers"]);
    if !finalizers.iter().any(|f| f.as_str() == Some(finalizer)) {
        finalizers.push(Value::String(finalizer.to_string()));
    }
}

/// The plugin.
#[derive(Debug, Default, Clone, Copy)]
pub struct StorageObjectInUseProtection;

#[async_trait]
impl MutatingAdmission for StorageObjectInUseProtection {
    fn name(&self) -> &str {
        "StorageObjectInUseProtection"
    }
    async fn admit(&self, req: &mut AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        let finalizer = if req.is_create_of("persistentvolumeclaims") {
            PVC_PROTECTION_FINALIZER
        } else if req.is_create_of("persistentvolumes") {
            PV_PROTECTION_FINALIZER
        } else {
            return Ok(());
        };
        if let Some(obj) = req.object.as_mut() {
            add_finalizer(obj, finalizer);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Operation;

    async fn admit(op: Operation, resource: &str, obj: Value) -> Value {
        let mut req = AdmissionRequest::new(op, "", "v1", resource, "X");
        req.object = Some(obj);
        StorageObjectInUseProtection.admit(&mut req, &mut Feedback::default()).await.unwrap();
        req.object.unwrap()
    }

    #[tokio::test]
    async fn new_claims_and_volumes_get_their_protection_finalizer_once() {
        let claim = admit(Operation::Create, "persistentvolumeclaims", json!({"metadata": {"name": "c"}})).await;
        assert_eq!(claim["metadata"]["finalizers"], json!([PVC_PROTECTION_FINALIZER]));
        let pv = json!({"metadata": {"name": "v", "finalizers": ["example.com/x", PV_PROTECTION_FINALIZER]}});
        let pv = admit(Operation::Create, "persistentvolumes", pv).await;
        assert_eq!(pv["metadata"]["finalizers"], json!(["example.com/x", PV_PROTECTION_FINALIZER]));
    }

    #[tokio::test]
    async fn updates_and_other_kinds_are_left_alone() {
        let claim = admit(Operation::Update, "persistentvolumeclaims", json!({"metadata": {"name": "c"}})).await;
        assert!(claim["metadata"]["finalizers"].is_null());
        let pod = admit(Operation::Create, "pods", json!({"metadata": {"name": "p"}})).await;
        assert!(pod["metadata"]["finalizers"].is_null());
    }
}
