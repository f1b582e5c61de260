//! Admission control (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/>):
//! after a request is authenticated and authorized, mutating admission plugins may change the
//! object, then validating plugins may reject it, before it is persisted.
//!
//! - [`AdmissionRequest`]: what plugins see (the AdmissionReview `request` fields);
//! - [`MutatingAdmission`] / [`ValidatingAdmission`]: the plugin traits;
//! - [`AdmissionChain`]: the ordered plugins; [`AdmissionChain::run`] is the one call the API
//!   server makes;
//! - [`AdmissionLookup`]: what built-in plugins read from the API (namespaces, LimitRanges,
//!   ResourceQuotas, PriorityClasses, ServiceAccounts), served from the server's watch caches;
//!   [`MemoryLookup`] is an in-memory implementation;
//! - [`plugins`]: the built-ins (Kubernetes' `plugin/pkg/admission`), each a pure function plus
//!   a plugin wrapper, NodeRestriction among them;
//! - [`webhook`]: MutatingAdmissionWebhook and ValidatingAdmissionWebhook;
//! - [`policy`]: ValidatingAdmissionPolicy (CEL, over `skiff-cel`), and [`matchconditions`],
//!   the CEL `matchConditions` policies and webhooks share.
//!
//! Who is asking comes from `skiff-auth` ([`skiff_auth::UserInfo`]); so do the RBAC authorizer
//! the escalation check asks and the node graph NodeRestriction reads. Like `skiff-auth`, this
//! crate is pure or in-memory and knows nothing about routes or the store: the API server
//! provides an [`AdmissionLookup`] over its watch caches.

// `ApiError` (a metav1.Status) is the error of every request-path function, as in the rest of
// skiff; boxing it would only move the allocation.
#![allow(clippy::result_large_err)]

pub mod matchconditions;
pub mod plugins;
pub mod policy;
pub mod webhook;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::RwLock;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use skiff_auth::UserInfo;

/// The operation being admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// POST (create, and subresource creates such as `pods/eviction`).
    Create,
    /// PUT/PATCH.
    Update,
    /// DELETE (single object).
    Delete,
    /// CONNECT (`pods/exec`, `pods/attach`, `pods/portforward`, proxies).
    Connect,
}

impl Operation {
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
        }
    }
}

/// `group/version, Resource=resource`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupVersionResource {
    /// API group ("" = core).
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Plural resource, e.g. `pods`.
    pub resource: String,
}

/// `group/version, Kind=kind`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupVersionKind {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
}

/// One request as admission sees it (the fields of an `admission.k8s.io/v1` AdmissionReview
/// request).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AdmissionRequest {
    /// Unique id of this admission call.
    pub uid: String,
    /// Operation.
    pub operation: Option<Operation>,
    /// Kind of the object.
    pub kind: GroupVersionKind,
    /// Resource being requested.
    pub resource: GroupVersionResource,
    /// Subresource ("" for the main resource).
    pub sub_resource: String,
    /// Object name (may be "" on create with generateName).
    pub name: String,
    /// Namespace ("" for cluster-scoped resources).
    pub namespace: String,
    /// The new object (create, update; the options object for connect).
    pub object: Option<Value>,
    /// The existing object (update, delete).
    pub old_object: Option<Value>,
    /// The requesting user (after impersonation).
    pub user: UserInfo,
    /// Whether nothing will be persisted (`?dryRun=All`).
    pub dry_run: bool,
    /// The operation's options (`CreateOptions`, `UpdateOptions`, `DeleteOptions`), if any.
    pub options: Option<Value>,
}

impl AdmissionRequest {
    /// A request for `operation` on `group/version` `resource` of kind `kind`.
    pub fn new(operation: Operation, group: &str, version: &str, resource: &str, kind: &str) -> Self {
        Self {
            uid: skiff_auth::authn::serviceaccount::random_uuid(),
            operation: Some(operation),
            kind: GroupVersionKind { group: group.into(), version: version.into(), kind: kind.into() },
            resource: GroupVersionResource { group: group.into(), version: version.into(), resource: resource.into() },
            ..Default::default()
        }
    }

    /// The operation (`Create` when unset).
    pub fn op(&self) -> Operation {
        self.operation.unwrap_or(Operation::Create)
    }

    /// Whether this is a `create` of a core-group `resource` (no subresource).
    pub fn is_create_of(&self, resource: &str) -> bool {
        self.op() == Operation::Create
            && self.resource.group.is_empty()
            && self.resource.resource == resource
            && self.sub_resource.is_empty()
    }

    /// The object's name: `name`, else `metadata.name` of the object.
    pub fn object_name(&self) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        self.object.as_ref().and_then(|o| o["metadata"]["name"].as_str()).unwrap_or_default().to_string()
    }

    /// 403 Forbidden about this request's object, in admission's wording:
    /// `pods "web" is forbidden: <why>`.
    pub fn forbidden(&self, why: &str) -> ApiError {
        ApiError::forbidden(&self.resource.group, &self.resource.resource, &self.object_name(), why)
    }

    /// The AdmissionReview `request` JSON.
    pub fn to_review_request(&self) -> Value {
        let mut r = json!({
            "uid": self.uid,
            "kind": {"group": self.kind.group, "version": self.kind.version, "kind": self.kind.kind},
            "resource": {"group": self.resource.group, "version": self.resource.version, "resource": self.resource.resource},
            "requestKind": {"group": self.kind.group, "version": self.kind.version, "kind": self.kind.kind},
            "requestResource": {"group": self.resource.group, "version": self.resource.version, "resource": self.resource.resource},
            "operation": self.op().as_str(),
            "userInfo": self.user.to_json(),
            "object": self.object.clone().unwrap_or(Value::Null),
            "oldObject": self.old_object.clone().unwrap_or(Value::Null),
            "dryRun": self.dry_run,
            "options": self.options.clone().unwrap_or(Value::Null),
        });
        if !self.sub_resource.is_empty() {
            r["subResource"] = self.sub_resource.clone().into();
            r["requestSubResource"] = self.sub_resource.clone().into();
        }
        if !self.name.is_empty() {
            r["name"] = self.name.clone().into();
        }
        if !self.namespace.is_empty() {
            r["namespace"] = self.namespace.clone().into();
        }
        r
    }
}

/// What admission hands back besides the (possibly mutated) object: `Warning` headers for the
/// client and audit annotations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Feedback {
    /// Warnings, sent as `Warning: 299 - "<text>"` response headers.
    pub warnings: Vec<String>,
    /// Audit annotations (`<plugin>/<key>` → value).
    pub audit_annotations: BTreeMap<String, String>,
}

/// A mutating admission plugin (`admission.MutationInterface`).
#[async_trait]
pub trait MutatingAdmission: Send + Sync {
    /// The plugin's name, e.g. `ServiceAccount`.
    fn name(&self) -> &str;
    /// Whether the plugin can act at all right now (e.g. a webhook plugin with webhooks
    /// configured): a cheap check made before [`Self::admit`]'s future is built, which skips
    /// the plugin when `false`. `true` unless overridden.
    fn active(&self) -> bool {
        true
    }
    /// May change `req.object`; an error rejects the request.
    ///
    /// # Errors
    /// The request is rejected with this error.
    async fn admit(&self, req: &mut AdmissionRequest, feedback: &mut Feedback) -> Result<(), ApiError>;
}

/// A validating admission plugin (`admission.ValidationInterface`).
#[async_trait]
pub trait ValidatingAdmission: Send + Sync {
    /// The plugin's name.
    fn name(&self) -> &str;
    /// Whether the plugin can act at all right now: a cheap check made before
    /// [`Self::validate`]'s future is built, which skips the plugin when `false`. `true` unless
    /// overridden.
    fn active(&self) -> bool {
        true
    }
    /// Accepts or rejects the request; must not change it.
    ///
    /// # Errors
    /// The request is rejected with this error.
    async fn validate(&self, req: &AdmissionRequest, feedback: &mut Feedback) -> Result<(), ApiError>;
}

/// What built-in plugins read from the API. Objects are JSON as stored. Implementations read
/// the API server's watch caches (cheap, synchronous).
pub trait AdmissionLookup: Send + Sync {
    /// Namespace `name` (shared, not copied: admission runs on every write).
    fn namespace(&self, name: &str) -> Option<Arc<Value>>;
    /// LimitRanges in `namespace`.
    fn limit_ranges(&self, namespace: &str) -> Vec<Value>;
    /// ResourceQuotas in `namespace`.
    fn resource_quotas(&self, namespace: &str) -> Vec<Value>;
    /// Every PriorityClass (shared, not copied: every pod create reads them).
    fn priority_classes(&self) -> Vec<Arc<Value>>;
    /// ServiceAccount `namespace/name` (shared, not copied).
    fn service_account(&self, namespace: &str, name: &str) -> Option<Arc<Value>>;
    /// Every StorageClass (shared, not copied), for DefaultStorageClass. The default has
    /// none, for lookups that do not serve storage.
    fn storage_classes(&self) -> Vec<Arc<Value>> {
        Vec::new()
    }
    /// Persists a ResourceQuota's new `status.used` (compare-and-swap on its resourceVersion)
    /// after ResourceQuota admission charged a request to it, as kube-apiserver does before
    /// admitting. The default does nothing (the quota controller catches up).
    ///
    /// # Errors
    /// A conflict or store error; the request is then rejected with it.
    fn update_resource_quota_status(&self, quota: &Value) -> Result<(), ApiError> {
        let _ = quota;
        Ok(())
    }
    /// The object of kind `kind` (`apiVersion` `api_version`) named `namespace/name`
    /// (`namespace` "" for cluster-scoped kinds): a ValidatingAdmissionPolicy's params
    /// (`paramKind`, `paramRef.name`). The default finds none.
    fn object_of_kind(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let _ = (api_version, kind, namespace, name);
        None
    }
    /// Every object of kind `kind` in `namespace` ("" for cluster-scoped kinds): params chosen
    /// by `paramRef.selector`. The default finds none.
    fn objects_of_kind(&self, api_version: &str, kind: &str, namespace: &str) -> Vec<Arc<Value>> {
        let _ = (api_version, kind, namespace);
        Vec::new()
    }
}

/// An in-memory [`AdmissionLookup`] (tests, and servers that keep these few kinds in a map).
#[derive(Debug, Default)]
pub struct MemoryLookup {
    objects: RwLock<HashMap<(String, String, String), Value>>,
}

impl MemoryLookup {
    /// An empty lookup.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces an object by its `kind`, `metadata.namespace` and `metadata.name`.
    pub fn put(&self, obj: Value) {
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        self.objects.write().insert((kind, ns, name), obj);
    }

    /// Removes an object.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) {
        self.objects.write().remove(&(kind.to_string(), namespace.to_string(), name.to_string()));
    }

    /// One object.
    pub fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.objects.read().get(&(kind.to_string(), namespace.to_string(), name.to_string())).cloned()
    }

    fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let mut out: Vec<(String, Value)> = self
            .objects
            .read()
            .iter()
            .filter(|((k, ns, _), _)| k == kind && namespace.is_none_or(|n| n == ns))
            .map(|((_, _, name), v)| (name.clone(), v.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.into_iter().map(|(_, v)| v).collect()
    }
}

impl AdmissionLookup for MemoryLookup {
    fn namespace(&self, name: &str) -> Option<Arc<Value>> {
        self.get("Namespace", "", name).map(Arc::new)
    }
    fn limit_ranges(&self, namespace: &str) -> Vec<Value> {
        self.list("LimitRange", Some(namespace))
    }
    fn resource_quotas(&self, namespace: &str) -> Vec<Value> {
        self.list("ResourceQuota", Some(namespace))
    }
    fn priority_classes(&self) -> Vec<Arc<Value>> {
        self.list("PriorityClass", None).into_iter().map(Arc::new).collect()
    }
    fn service_account(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.get("ServiceAccount", namespace, name).map(Arc::new)
    }
    fn storage_classes(&self) -> Vec<Arc<Value>> {
        self.list("StorageClass", None).into_iter().map(Arc::new).collect()
    }
    fn update_resource_quota_status(&self, quota: &Value) -> Result<(), ApiError> {
        self.put(quota.clone());
        Ok(())
    }
    fn object_of_kind(&self, _api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.get(kind, namespace, name).map(Arc::new)
    }
    fn objects_of_kind(&self, _api_version: &str, kind: &str, namespace: &str) -> Vec<Arc<Value>> {
        self.list(kind, Some(namespace)).into_iter().map(Arc::new).collect()
    }
}

/// The ordered admission plugins: every mutating plugin in order, then every validating plugin
/// in order.
#[derive(Clone, Default)]
pub struct AdmissionChain {
    mutating: Vec<Arc<dyn MutatingAdmission>>,
    validating: Vec<Arc<dyn ValidatingAdmission>>,
}

impl AdmissionChain {
    /// An empty chain (admits everything).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a mutating plugin.
    pub fn mutating(mut self, p: Arc<dyn MutatingAdmission>) -> Self {
        self.mutating.push(p);
        self
    }

    /// Appends a validating plugin.
    pub fn validating(mut self, p: Arc<dyn ValidatingAdmission>) -> Self {
        self.validating.push(p);
        self
    }

    /// kube-apiserver's default plugins in its order, over `lookup`, with the webhook plugins
    /// reading `webhooks` and RBAC's escalation check over `rbac`:
    /// mutating — NamespaceLifecycle, LimitRanger, ServiceAccount, Priority,
    /// DefaultTolerationSeconds, DefaultStorageClass, StorageObjectInUseProtection,
    /// MutatingAdmissionWebhook; validating — RBACEscalation,
    /// NamespaceLifecycle, LimitRanger, PodSecurity, Priority, ValidatingAdmissionWebhook,
    /// ResourceQuota.
    pub fn standard(
        lookup: Arc<dyn AdmissionLookup>,
        pod_security: plugins::pod_security::PodSecurityConfig,
        webhooks: Arc<webhook::WebhookAdmission>,
        rbac: Arc<skiff_auth::rbac::RbacAuthorizer>,
    ) -> Self {
        use plugins::*;
        Self::new()
            .mutating(Arc::new(namespace_lifecycle::NamespaceLifecycle::new(lookup.clone())))
            .mutating(Arc::new(limit_ranger::LimitRanger::new(lookup.clone())))
            .mutating(Arc::new(service_account::ServiceAccount::new(lookup.clone())))
            .mutating(Arc::new(priority::Priority::new(lookup.clone())))
            .mutating(Arc::new(default_toleration_seconds::DefaultTolerationSeconds::default()))
            .mutating(Arc::new(default_storage_class::DefaultStorageClass::new(lookup.clone())))
            .mutating(Arc::new(storage_object_in_use_protection::StorageObjectInUseProtection))
            .mutating(webhooks.mutating_plugin())
            .validating(Arc::new(rbac_escalation::RbacEscalation::new(rbac)))
            .validating(Arc::new(namespace_lifecycle::NamespaceLifecycle::new(lookup.clone())))
            .validating(Arc::new(limit_ranger::LimitRanger::new(lookup.clone())))
            .validating(Arc::new(pod_security::PodSecurity::new(lookup.clone(), pod_security)))
            .validating(Arc::new(priority::Priority::new(lookup.clone())))
            .validating(webhooks.validating_plugin())
            .validating(Arc::new(resource_quota::ResourceQuota::new(lookup)))
    }

    /// The names of the mutating then validating plugins.
    pub fn plugin_names(&self) -> (Vec<String>, Vec<String>) {
        (
            self.mutating.iter().map(|p| p.name().to_string()).collect(),
            self.validating.iter().map(|p| p.name().to_string()).collect(),
        )
    }

    /// Runs the mutating plugins (which may change `req.object`), then the validating ones. On
    /// success the caller persists `req.object` and returns the warnings.
    ///
    /// # Errors
    /// The first plugin error: the request is rejected with it.
    pub async fn run(&self, req: &mut AdmissionRequest) -> Result<Feedback, ApiError> {
        let mut feedback = self.mutate(req).await?;
        let more = self.validate(req).await?;
        feedback.warnings.extend(more.warnings);
        feedback.audit_annotations.extend(more.audit_annotations);
        Ok(feedback)
    }

    /// The mutating phase alone (for servers that run built-in validation in between).
    ///
    /// # Errors
    /// The first plugin error.
    pub async fn mutate(&self, req: &mut AdmissionRequest) -> Result<Feedback, ApiError> {
        let mut feedback = Feedback::default();
        for p in self.mutating.iter().filter(|p| p.active()) {
            p.admit(req, &mut feedback).await?;
        }
        Ok(feedback)
    }

    /// The validating phase alone.
    ///
    /// # Errors
    /// The first plugin error.
    pub async fn validate(&self, req: &AdmissionRequest) -> Result<Feedback, ApiError> {
        let mut feedback = Feedback::default();
        for p in self.validating.iter().filter(|p| p.active()) {
            p.validate(req, &mut feedback).await?;
        }
        Ok(feedback)
    }
}

/// `metadata.labels` of an object as a map.
pub(crate) fn labels(obj: &Value) -> BTreeMap<String, String> {
    skiff_apimachinery::selector::labels_of(obj)
}

/// A mutable JSON array at `obj[path...]`, created when missing (and replacing a non-array).
pub(crate) fn array_at<'a>(obj: &'a mut Value, path: &[&str]) -> &'a mut Vec<Value> {
    let mut cur = obj;
    for key in path {
        if !cur.is_object() {
            *cur = json!({});
        }
        cur = cur
            .as_object_mut()
            .map(|m| m.entry(key.to_string()).or_insert(Value::Null))
            .unwrap_or_else(|| unreachable!());
    }
    if !cur.is_array() {
        *cur = json!([]);
    }
    match cur {
        Value::Array(a) => a,
        _ => unreachable!(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Reject;
    #[async_trait]
    impl ValidatingAdmission for Reject {
        fn name(&self) -> &str {
            "Reject"
        }
        async fn validate(&self, req: &AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
            Err(req.forbidden("no"))
        }
    }

    struct Label;
    #[async_trait]
    impl MutatingAdmission for Label {
        fn name(&self) -> &str {
            "Label"
        }
        async fn admit(&self, req: &mut AdmissionRequest, f: &mut Feedback) -> Result<(), ApiError> {
            if let Some(o) = req.object.as_mut() {
                o["metadata"]["labels"] = json!({"admitted": "yes"});
            }
            f.warnings.push("labelled".into());
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_chain_mutates_then_validates() {
        let mut req = AdmissionRequest::new(Operation::Create, "", "v1", "pods", "Pod");
        req.namespace = "default".into();
        req.object = Some(json!({"metadata": {"name": "web"}}));
        let chain = AdmissionChain::new().mutating(Arc::new(Label));
        let fb = chain.run(&mut req).await.unwrap();
        assert_eq!(fb.warnings, vec!["labelled"]);
        assert_eq!(req.object.as_ref().unwrap()["metadata"]["labels"]["admitted"], "yes");
        let e = chain.validating(Arc::new(Reject)).run(&mut req).await.unwrap_err();
        assert_eq!(e.message, r#"pods "web" is forbidden: no"#);
    }

    #[test]
    fn review_requests_carry_the_admissionreview_fields() {
        let mut req = AdmissionRequest::new(Operation::Update, "apps", "v1", "deployments", "Deployment");
        req.namespace = "default".into();
        req.name = "web".into();
        req.sub_resource = "scale".into();
        req.user = UserInfo::new("jane", ["dev"]);
        let r = req.to_review_request();
        assert_eq!(r["operation"], "UPDATE");
        assert_eq!(r["resource"], json!({"group": "apps", "version": "v1", "resource": "deployments"}));
        assert_eq!(r["subResource"], "scale");
        assert_eq!(r["userInfo"]["username"], "jane");
        assert_eq!(r["uid"].as_str().unwrap().len(), 36);
    }

    #[test]
    fn array_at_creates_missing_paths() {
        let mut v = json!({"spec": {}});
        array_at(&mut v, &["spec", "tolerations"]).push(json!(1));
        assert_eq!(v, json!({"spec": {"tolerations": [1]}}));
    }
}
