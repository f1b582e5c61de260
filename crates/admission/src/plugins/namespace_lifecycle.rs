//! NamespaceLifecycle (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#namespacelifecycle>):
//! no new objects in a namespace that does not exist (404) or is being terminated (403), and the
//! `default`, `kube-system` and `kube-public` namespaces may not be deleted.

use std::sync::Arc;

use async_trait::async_trait;
use skiff_apimachinery::ApiError;
use skiff_apimachinery::status::Cause;

use crate::{AdmissionLookup, AdmissionRequest, Feedback, MutatingAdmission, Operation, ValidatingAdmission};

/// Namespaces that can never be deleted.
pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// Checks one request.
///
/// # Errors
/// 403 `namespaces "default" is forbidden: this namespace may not be deleted`; 404
/// `namespaces "x" not found` for a create in a missing namespace; 403 `… is forbidden: unable
/// to create new content in namespace x because it is being terminated` (cause
/// `NamespaceTerminating`).
pub fn namespace_lifecycle(req: &AdmissionRequest, lookup: &dyn AdmissionLookup) -> Result<(), ApiError> {
    let is_namespace = req.resource.group.is_empty() && req.resource.resource == "namespaces";
    if is_namespace && req.op() == Operation::Delete && IMMORTAL_NAMESPACES.contains(&req.name.as_str()) {
        return Err(ApiError::forbidden("", "namespaces", &req.name, "this namespace may not be deleted"));
    }
    if req.op() != Operation::Create || req.namespace.is_empty() || is_namespace {
        return Ok(());
    }
    // Access reviews are answered for namespaces that do not exist.
    if req.resource.group == "authorization.k8s.io" && req.resource.resource == "localsubjectaccessreviews" {
        return Ok(());
    }
    let Some(ns) = lookup.namespace(&req.namespace) else {
        return Err(ApiError::not_found("", "namespaces", &req.namespace));
    };
    let terminating = ns["status"]["phase"] == "Terminating" || !ns["metadata"]["deletionTimestamp"].is_null();
    if terminating {
        let mut e = req.forbidden(&format!(
            "unable to create new content in namespace {} because it is being terminated",
            req.namespace
        ));
        if let Some(d) = e.details.as_mut() {
            d.causes.push(Cause {
                reason: "NamespaceTerminating".into(),
                message: format!("namespace {} is being terminated", req.namespace),
                field: "metadata.namespace".into(),
            });
        }
        return Err(e);
    }
    Ok(())
}

/// The plugin.
pub struct NamespaceLifecycle {
    lookup: Arc<dyn AdmissionLookup>,
}

impl NamespaceLifecycle {
    /// The plugin over `lookup`.
    pub fn new(lookup: Arc<dyn AdmissionLookup>) -> Self {
        Self { lookup }
    }
}

#[async_trait]
impl MutatingAdmission for NamespaceLifecycle {
    fn name(&self) -> &str {
        "NamespaceLifecycle"
    }
    async fn admit(&self, req: &mut AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        namespace_lifecycle(req, self.lookup.as_ref())
    }
}

#[async_trait]
impl ValidatingAdmission for NamespaceLifecycle {
    fn name(&self) -> &str {
        "NamespaceLifecycle"
    }
    async fn validate(&self, req: &AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        namespace_lifecycle(req, self.lookup.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::MemoryLookup;

    #[test]
    fn namespace_lifecycle_guards_missing_terminating_and_immortal_namespaces() {
        let lookup = MemoryLookup::new();
        lookup.put(json!({"kind": "Namespace", "metadata": {"name": "live"}, "status": {"phase": "Active"}}));
        lookup.put(
            json!({"kind": "Namespace", "metadata": {"name": "dying", "deletionTimestamp": "2024-01-01T00:00:00Z"},
            "status": {"phase": "Terminating"}}),
        );
        let create = |ns: &str| {
            let mut r = AdmissionRequest::new(Operation::Create, "", "v1", "pods", "Pod");
            r.namespace = ns.into();
            r.object = Some(json!({"metadata": {"name": "web"}}));
            r
        };
        assert!(namespace_lifecycle(&create("live"), &lookup).is_ok());
        let e = namespace_lifecycle(&create("missing"), &lookup).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (404, r#"namespaces "missing" not found"#));
        let e = namespace_lifecycle(&create("dying"), &lookup).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            r#"pods "web" is forbidden: unable to create new content in namespace dying because it is being terminated"#
        );
        assert_eq!(e.details.unwrap().causes[0].reason, "NamespaceTerminating");
        let mut update = create("dying");
        update.operation = Some(Operation::Update);
        assert!(namespace_lifecycle(&update, &lookup).is_ok());
        let mut del = AdmissionRequest::new(Operation::Delete, "", "v1", "namespaces", "Namespace");
        del.name = "kube-system".into();
        let e = namespace_lifecycle(&del, &lookup).unwrap_err();
        assert_eq!(e.message, r#"namespaces "kube-system" is forbidden: this namespace may not be deleted"#);
        del.name = "live".into();
        assert!(namespace_lifecycle(&del, &lookup).is_ok());
    }
}
