//! Resources that are computed, not stored: access reviews (`selfsubjectaccessreviews`, …),
//! `serviceaccounts/token` (TokenRequest), `selfsubjectreviews`. They support only `create`;
//! a [`VirtualHandler`] registered with [`crate::Config::virtual_resources`] answers them
//! (the security work provides the handlers).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use skiff_apimachinery::ApiError;

use crate::auth::RequestUser;
use crate::resources::ResourceDef;

/// One create request on a virtual resource or subresource.
#[derive(Debug, Clone)]
pub struct VirtualRequest<'a> {
    /// The resource (for a subresource: the parent, e.g. serviceaccounts).
    pub def: &'a ResourceDef,
    /// Subresource ("" for a top-level virtual resource).
    pub subresource: &'a str,
    /// Namespace from the path ("" when none).
    pub namespace: &'a str,
    /// Parent object name for subresources ("" otherwise).
    pub name: &'a str,
    /// The authenticated user.
    pub user: Option<&'a RequestUser>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

/// Answers `POST` on a virtual resource: the request object in, the response object out
/// (returned with 201 Created).
#[async_trait]
pub trait VirtualHandler: Send + Sync + 'static {
    /// Handles one create.
    async fn create(&self, req: &VirtualRequest<'_>, body: Value) -> Result<Value, ApiError>;
}

/// A virtual resource (`subresource == None`, `def` is served in discovery with verb create)
/// or a handler for a subresource of a stored resource (`def` names the parent; the
/// subresource must be in its [`ResourceDef::subresources`]).
#[derive(Clone)]
pub struct VirtualResource {
    /// The resource.
    pub def: ResourceDef,
    /// The subresource this handler serves, if any.
    pub subresource: Option<&'static str>,
    /// The handler.
    pub handler: Arc<dyn VirtualHandler>,
}

const CREATE: &[&str] = &["create"];

const fn review(
    group: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> ResourceDef {
    ResourceDef {
        group,
        version: "v1",
        resource,
        singular,
        kind,
        namespaced,
        short_names: &[],
        categories: &[],
        verbs: CREATE,
        subresources: &[],
        storage: "",
        generation: false,
        create_on_update: false,
        custom: None,
    }
}

/// The virtual resources Kubernetes serves for authentication and authorization, for handlers
/// to be attached to: `selfsubjectaccessreviews`, `subjectaccessreviews`,
/// `localsubjectaccessreviews`, `selfsubjectrulesreviews` (authorization.k8s.io/v1),
/// `selfsubjectreviews` and `tokenreviews` (authentication.k8s.io/v1).
pub fn standard_defs() -> Vec<ResourceDef> {
    vec![
        review(
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "selfsubjectaccessreview",
            "SelfSubjectAccessReview",
            false,
        ),
        review("authorization.k8s.io", "subjectaccessreviews", "subjectaccessreview", "SubjectAccessReview", false),
        review(
            "authorization.k8s.io",
            "localsubjectaccessreviews",
            "localsubjectaccessreview",
            "LocalSubjectAccessReview",
            true,
        ),
        review(
            "authorization.k8s.io",
            "selfsubjectrulesreviews",
            "selfsubjectrulesreview",
            "SelfSubjectRulesReview",
            false,
        ),
        review("authentication.k8s.io", "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", false),
        review("authentication.k8s.io", "tokenreviews", "tokenreview", "TokenReview", false),
    ]
}
