//! Admission seam: mutating then validating plug-ins run on every write after defaulting and
//! typed decoding, before built-in validation and persistence
//! (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/>).
//! The admission chain itself (NamespaceLifecycle, ServiceAccount, LimitRanger, ResourceQuota,
//! PodSecurity, webhooks) belongs to the security work; the API server calls one [`Admission`].

use async_trait::async_trait;
use serde_json::Value;
use skiff_apimachinery::ApiError;

use crate::auth::RequestUser;
use crate::resources::ResourceDef;

/// The operation being admitted (`admission.Operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// POST (and create-on-update).
    Create,
    /// PUT, PATCH, subresource writes.
    Update,
    /// DELETE.
    Delete,
}

/// What is being admitted.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    /// The operation.
    pub operation: Operation,
    /// The resource.
    pub def: &'a ResourceDef,
    /// Namespace ("" for cluster-scoped).
    pub namespace: &'a str,
    /// Object name (may still be empty for generateName creates in mutating plug-ins).
    pub name: &'a str,
    /// Subresource, if any (`status`, `scale`, `binding`…).
    pub subresource: Option<&'a str>,
    /// The requesting user (`None` for the API server's own writes, e.g. bootstrap).
    pub user: Option<&'a RequestUser>,
    /// The current object on update and delete (stored form).
    pub old: Option<&'a Value>,
    /// True for `dryRun=All` (plug-ins with side effects must not act).
    pub dry_run: bool,
}

/// An admission plug-in (or a chain of them).
#[async_trait]
pub trait Admission: Send + Sync + 'static {
    /// Mutating admission: may change `obj` (not called for deletes). `Err` rejects the request.
    async fn mutate(&self, attrs: &Attributes<'_>, obj: &mut Value) -> Result<(), ApiError> {
        let _ = (attrs, obj);
        Ok(())
    }

    /// Validating admission: `obj` is the object to be stored (for deletes, the current one).
    async fn validate(&self, attrs: &Attributes<'_>, obj: &Value) -> Result<(), ApiError> {
        let _ = (attrs, obj);
        Ok(())
    }

    /// [`Admission::mutate`], appending the plug-ins' warnings (webhook responses' `warnings`,
    /// PodSecurity `warn`) to `warnings`, which the API server sends as `Warning: 299 - "…"`
    /// response headers. The default calls `mutate` and warns nothing.
    async fn mutate_collecting(
        &self,
        attrs: &Attributes<'_>,
        obj: &mut Value,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let _ = warnings;
        self.mutate(attrs, obj).await
    }

    /// [`Admission::validate`], appending warnings as [`Admission::mutate_collecting`] does.
    /// `obj` is lent mutably only so that a chain can move it into its request instead of
    /// copying it; it is handed back unchanged.
    async fn validate_collecting(
        &self,
        attrs: &Attributes<'_>,
        obj: &mut Value,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let _ = warnings;
        self.validate(attrs, obj).await
    }
}

/// Admits everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct AdmitAll;

impl Admission for AdmitAll {}
