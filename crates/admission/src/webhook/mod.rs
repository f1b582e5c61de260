//! Dynamic admission webhooks (<https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/>):
//! MutatingAdmissionWebhook and ValidatingAdmissionWebhook over
//! `admissionregistration.k8s.io/v1` configurations.
//!
//! [`WebhookAdmission`] keeps the configurations (fed from watch events like the RBAC
//! authorizer: [`WebhookAdmission::apply`] / [`WebhookAdmission::remove`]). For each request it
//! selects the webhooks whose `rules` (operations, apiGroups, apiVersions, resources with `*`,
//! `*/*`, `pods/*`, `*/status`; scope), `namespaceSelector` and `objectSelector` match, and
//! posts an AdmissionReview v1 over HTTPS (trusting the `caBundle`) to `clientConfig.url` or
//! the `clientConfig.service` (resolved by a [`ServiceResolver`]).
//!
//! Mutating webhooks run in order (configurations by name, webhooks in order) and may answer
//! a base64 JSONPatch, applied to the object; with `reinvocationPolicy: IfNeeded` a webhook is
//! called once more when a later webhook changed the object. Validating webhooks run
//! concurrently. `failurePolicy: Ignore` skips a webhook that cannot be called; `Fail` (the
//! default) rejects with `failed calling webhook`. A rejection becomes
//! `admission webhook "<name>" denied the request: <message>`. Dry-run requests only reach
//! webhooks whose `sideEffects` is `None` or `NoneOnDryRun`. A webhook's `matchConditions`
//! (CEL, [`crate::matchconditions`]) are evaluated after its rules and selectors matched: a false
//! condition skips the webhook; an evaluation error skips it under `failurePolicy: Ignore` and
//! rejects the request (500) under `Fail`.

pub mod client;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as MetaLabelSelector;
use parking_lot::RwLock;
use serde_json::{Value, json};
use skiff_apimachinery::{ApiError, LabelSelector};

use super::{AdmissionLookup, AdmissionRequest, Feedback, MutatingAdmission, ValidatingAdmission, labels};
use client::Endpoint;

/// Default `timeoutSeconds`.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 10;

/// Resolves a webhook's `clientConfig.service` to an address to connect to.
pub trait ServiceResolver: Send + Sync {
    /// `host:port` to connect to for port `port` of Service `namespace/name`.
    ///
    /// # Errors
    /// The service does not exist or has no usable address.
    fn resolve(&self, namespace: &str, name: &str, port: i32) -> Result<String, String>;
}

/// A resolver that knows no services (only `clientConfig.url` webhooks work).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoServices;

impl ServiceResolver for NoServices {
    fn resolve(&self, namespace: &str, name: &str, _port: i32) -> Result<String, String> {
        Err(format!("service \"{namespace}/{name}\" cannot be resolved"))
    }
}

/// The fields both webhook kinds share.
#[derive(Debug, Clone)]
pub struct Webhook {
    /// Webhook name (`name` in the configuration).
    pub name: String,
    /// Configuration name.
    pub configuration: String,
    /// How to reach it.
    pub client_config: WebhookClientConfig,
    /// Which requests it wants.
    pub rules: Vec<RuleWithOperations>,
    /// `Fail` or `Ignore`.
    pub failure_policy: String,
    /// Namespace label selector.
    pub namespace_selector: Option<MetaLabelSelector>,
    /// Object label selector.
    pub object_selector: Option<MetaLabelSelector>,
    /// `None`, `NoneOnDryRun`, `Some`, `Unknown`.
    pub side_effects: String,
    /// Seconds.
    pub timeout_seconds: i32,
    /// `Never` or `IfNeeded` (mutating only).
    pub reinvocation_policy: String,
    /// CEL `matchConditions`, all of which must hold for the webhook to be called.
    pub match_conditions: Vec<crate::matchconditions::MatchCondition>,
}

fn conditions(
    list: &Option<Vec<k8s_openapi::api::admissionregistration::v1::MatchCondition>>,
) -> Vec<crate::matchconditions::MatchCondition> {
    list.iter()
        .flatten()
        .map(|c| crate::matchconditions::MatchCondition { name: c.name.clone(), expression: c.expression.clone() })
        .collect()
}

impl Webhook {
    fn from_mutating(configuration: &str, w: &MutatingWebhook) -> Self {
        Self {
            name: w.name.clone(),
            configuration: configuration.to_string(),
            client_config: w.client_config.clone(),
            rules: w.rules.clone().unwrap_or_default(),
            failure_policy: w.failure_policy.clone().unwrap_or_else(|| "Fail".into()),
            namespace_selector: w.namespace_selector.clone(),
            object_selector: w.object_selector.clone(),
            side_effects: w.side_effects.clone(),
            timeout_seconds: w.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS),
            reinvocation_policy: w.reinvocation_policy.clone().unwrap_or_else(|| "Never".into()),
            match_conditions: conditions(&w.match_conditions),
        }
    }

    fn from_validating(configuration: &str, w: &ValidatingWebhook) -> Self {
        Self {
            name: w.name.clone(),
            configuration: configuration.to_string(),
            client_config: w.client_config.clone(),
            rules: w.rules.clone().unwrap_or_default(),
            failure_policy: w.failure_policy.clone().unwrap_or_else(|| "Fail".into()),
            namespace_selector: w.namespace_selector.clone(),
            object_selector: w.object_selector.clone(),
            side_effects: w.side_effects.clone(),
            timeout_seconds: w.timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS),
            reinvocation_policy: "Never".into(),
            match_conditions: conditions(&w.match_conditions),
        }
    }
}

fn has_or_star(list: &[String], item: &str) -> bool {
    list.iter().any(|x| x == "*" || x == item)
}

/// Whether a rule's `resources` entry matches a resource and subresource: `*/*` matches
/// everything, `*` every main resource, `pods` the main resource only, `pods/*` every
/// subresource of pods, `*/status` that subresource of anything, `pods/status` exactly.
pub fn resource_matches(pattern: &str, resource: &str, subresource: &str) -> bool {
    let (pres, psub) = match pattern.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (pattern, None),
    };
    let res_ok = pres == "*" || pres == resource;
    match psub {
        None => res_ok && subresource.is_empty(),
        Some("*") => res_ok && (pattern == "*/*" || !subresource.is_empty()),
        Some(s) => res_ok && s == subresource,
    }
}

/// Whether a rule matches a request.
pub fn rule_matches(rule: &RuleWithOperations, req: &AdmissionRequest) -> bool {
    let ops = rule.operations.clone().unwrap_or_default();
    let groups = rule.api_groups.clone().unwrap_or_default();
    let versions = rule.api_versions.clone().unwrap_or_default();
    let resources = rule.resources.clone().unwrap_or_default();
    let scope = rule.scope.clone().unwrap_or_else(|| "*".into());
    let scope_ok = match scope.as_str() {
        "Cluster" => req.namespace.is_empty(),
        "Namespaced" => !req.namespace.is_empty(),
        _ => true,
    };
    scope_ok
        && has_or_star(&ops, req.op().as_str())
        && has_or_star(&groups, &req.resource.group)
        && has_or_star(&versions, &req.resource.version)
        && resources.iter().any(|p| resource_matches(p, &req.resource.resource, &req.sub_resource))
}

fn selector(sel: &Option<MetaLabelSelector>) -> Result<LabelSelector, String> {
    match sel {
        None => Ok(LabelSelector::everything()),
        Some(s) => LabelSelector::from_metav1(s),
    }
}

/// Whether a webhook wants a request: a rule matches, the namespace selector matches the
/// namespace's labels (a Namespace object's own labels; cluster-scoped objects always match),
/// and the object selector matches the object's or the old object's labels.
///
/// # Errors
/// An invalid selector.
pub fn webhook_matches(w: &Webhook, req: &AdmissionRequest, lookup: &dyn AdmissionLookup) -> Result<bool, String> {
    if !w.rules.iter().any(|r| rule_matches(r, req)) {
        return Ok(false);
    }
    let ns_sel = selector(&w.namespace_selector)?;
    if !ns_sel.is_empty() {
        let is_namespace = req.resource.group.is_empty() && req.resource.resource == "namespaces";
        let ns_labels = if is_namespace {
            req.object.as_ref().or(req.old_object.as_ref()).map(labels).unwrap_or_default()
        } else if req.namespace.is_empty() {
            return object_selected(w, req);
        } else {
            lookup.namespace(&req.namespace).map(|n| labels(&n)).unwrap_or_default()
        };
        if !ns_sel.matches(&ns_labels) {
            return Ok(false);
        }
    }
    object_selected(w, req)
}

/// Whether a webhook that matched by rules and selectors also meets its `matchConditions`.
///
/// # Errors
/// A condition failed to evaluate and the webhook's `failurePolicy` is `Fail`: 500, as
/// kube-apiserver's dispatcher answers a webhook it could not call.
pub fn conditions_match(w: &Webhook, req: &AdmissionRequest) -> Result<bool, ApiError> {
    match crate::matchconditions::webhook_matches(&w.match_conditions, req) {
        Ok(m) => Ok(m),
        Err(e) if w.failure_policy == "Ignore" => {
            tracing::warn!(webhook = %w.name, "ignoring a webhook whose match conditions failed: {e}");
            Ok(false)
        }
        Err(e) => Err(ApiError::internal(format!(
            "Internal error occurred: failed calling webhook {:?}: failed to evaluate match conditions: {e}",
            w.name
        ))),
    }
}

fn object_selected(w: &Webhook, req: &AdmissionRequest) -> Result<bool, String> {
    let sel = selector(&w.object_selector)?;
    if sel.is_empty() {
        return Ok(true);
    }
    Ok([req.object.as_ref(), req.old_object.as_ref()].into_iter().flatten().any(|o| sel.matches(&labels(o))))
}

/// The registered webhook configurations, and the two admission plugins that call them.
pub struct WebhookAdmission {
    mutating: RwLock<BTreeMap<String, MutatingWebhookConfiguration>>,
    validating: RwLock<BTreeMap<String, ValidatingWebhookConfiguration>>,
    lookup: Arc<dyn AdmissionLookup>,
    services: Arc<dyn ServiceResolver>,
}

impl WebhookAdmission {
    /// No configurations yet; namespace labels come from `lookup`, service addresses from
    /// `services`.
    pub fn new(lookup: Arc<dyn AdmissionLookup>, services: Arc<dyn ServiceResolver>) -> Self {
        Self { mutating: RwLock::default(), validating: RwLock::default(), lookup, services }
    }

    /// Adds or replaces a Mutating/ValidatingWebhookConfiguration (by `kind`).
    ///
    /// # Errors
    /// Another kind, or an object that does not decode.
    pub fn apply(&self, obj: &Value) -> Result<(), String> {
        let kind = obj["kind"].as_str().unwrap_or_default();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        match kind {
            "MutatingWebhookConfiguration" => {
                let c = serde_json::from_value(obj.clone()).map_err(|e| format!("decoding {kind}: {e}"))?;
                self.mutating.write().insert(name, c);
            }
            "ValidatingWebhookConfiguration" => {
                let c = serde_json::from_value(obj.clone()).map_err(|e| format!("decoding {kind}: {e}"))?;
                self.validating.write().insert(name, c);
            }
            other => return Err(format!("not a webhook configuration: kind {other:?}")),
        }
        Ok(())
    }

    /// Removes a configuration (`kind` as in [`apply`](Self::apply)).
    pub fn remove(&self, kind: &str, name: &str) {
        match kind {
            "MutatingWebhookConfiguration" => {
                self.mutating.write().remove(name);
            }
            "ValidatingWebhookConfiguration" => {
                self.validating.write().remove(name);
            }
            _ => {}
        }
    }

    /// The mutating webhooks in call order.
    pub fn mutating_webhooks(&self) -> Vec<Webhook> {
        self.mutating
            .read()
            .iter()
            .flat_map(|(n, c)| c.webhooks.iter().flatten().map(move |w| Webhook::from_mutating(n, w)))
            .collect()
    }

    /// The validating webhooks.
    pub fn validating_webhooks(&self) -> Vec<Webhook> {
        self.validating
            .read()
            .iter()
            .flat_map(|(n, c)| c.webhooks.iter().flatten().map(move |w| Webhook::from_validating(n, w)))
            .collect()
    }

    /// The MutatingAdmissionWebhook plugin.
    pub fn mutating_plugin(self: &Arc<Self>) -> Arc<dyn MutatingAdmission> {
        Arc::new(MutatingWebhookPlugin(self.clone()))
    }

    /// The ValidatingAdmissionWebhook plugin.
    pub fn validating_plugin(self: &Arc<Self>) -> Arc<dyn ValidatingAdmission> {
        Arc::new(ValidatingWebhookPlugin(self.clone()))
    }

    fn endpoint(&self, w: &Webhook) -> Result<Endpoint, String> {
        let cc = &w.client_config;
        let ca_bundle = cc.ca_bundle.as_ref().map(|b| b.0.clone()).unwrap_or_default();
        if let Some(url) = &cc.url {
            let rest = url.strip_prefix("https://").ok_or_else(|| format!("webhook URL {url:?} must use https"))?;
            let (authority, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/"),
            };
            let (host, port) = split_host_port(authority);
            return Ok(Endpoint {
                connect: format!("{}:{port}", bracket(&host)),
                server_name: host.clone(),
                authority: authority.to_string(),
                path: path.to_string(),
                ca_bundle,
            });
        }
        if let Some(svc) = &cc.service {
            let port = svc.port.unwrap_or(443);
            let connect = self.services.resolve(&svc.namespace, &svc.name, port)?;
            let host = format!("{}.{}.svc", svc.name, svc.namespace);
            return Ok(Endpoint {
                connect,
                server_name: host.clone(),
                authority: format!("{host}:{port}"),
                path: svc.path.clone().unwrap_or_else(|| "/".into()),
                ca_bundle,
            });
        }
        Err("webhook has neither url nor service".into())
    }

    /// Calls one webhook; `Ok(None)` when it was skipped (ignored failure).
    async fn call(&self, w: &Webhook, req: &AdmissionRequest) -> Result<Option<Value>, ApiError> {
        if req.dry_run && !matches!(w.side_effects.as_str(), "None" | "NoneOnDryRun") {
            return Err(ApiError::bad_request(format!("admission webhook {:?} does not support dry run", w.name)));
        }
        let review =
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req.to_review_request()});
        let timeout = Duration::from_secs(w.timeout_seconds.clamp(1, 30) as u64);
        let result = match self.endpoint(w) {
            Ok(ep) => client::post_json(&ep, &review, timeout).await,
            Err(e) => Err(e),
        }
        .and_then(|resp| {
            let r = resp.get("response").cloned().ok_or("the response has no \"response\" field")?;
            let uid = r["uid"].as_str().unwrap_or_default();
            if uid != req.uid {
                return Err(format!("expected response.uid={:?}, got {uid:?}", req.uid));
            }
            Ok(r)
        });
        match result {
            Ok(r) => Ok(Some(r)),
            Err(e) if w.failure_policy == "Ignore" => {
                tracing::warn!(webhook = %w.name, "ignoring failed webhook call: {e}");
                Ok(None)
            }
            Err(e) => Err(ApiError::internal(format!(
                "Internal error occurred: failed calling webhook {:?}: failed to call webhook: {e}",
                w.name
            ))),
        }
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') { format!("[{host}]") } else { host.to_string() }
}

fn split_host_port(authority: &str) -> (String, u16) {
    if let Some(rest) = authority.strip_prefix('[')
        && let Some((h, p)) = rest.split_once(']')
    {
        let port = p.strip_prefix(':').and_then(|p| p.parse().ok()).unwrap_or(443);
        return (h.to_string(), port);
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => {
            (h.to_string(), p.parse().unwrap_or(443))
        }
        _ => (authority.to_string(), 443),
    }
}

/// The error for a webhook's rejection (`ToStatusErr`): code ≥ 400 (default 400), message
/// `admission webhook "<name>" denied the request: <message>` (or `… without explanation`).
pub fn denied(name: &str, status: &Value) -> ApiError {
    let code = status["code"].as_u64().filter(|c| *c >= 400 && *c < 600).unwrap_or(400) as u16;
    let message = status["message"].as_str().unwrap_or_default();
    let reason = status["reason"].as_str().unwrap_or_default();
    let denied_by = format!("admission webhook {name:?} denied the request");
    let text = if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    let reason = if reason.is_empty() { if code == 403 { "Forbidden" } else { "BadRequest" } } else { reason };
    ApiError::new(code, reason, text)
}

fn take_feedback(w: &Webhook, r: &Value, feedback: &mut Feedback) {
    for warning in r["warnings"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        feedback.warnings.push(warning.to_string());
    }
    for (k, v) in r["auditAnnotations"].as_object().into_iter().flatten() {
        if let Some(v) = v.as_str() {
            feedback.audit_annotations.insert(format!("{}/{k}", w.name), v.to_string());
        }
    }
}

/// Applies a mutating webhook's answer to the request's object; whether it changed anything.
fn apply_patch(w: &Webhook, r: &Value, req: &mut AdmissionRequest) -> Result<bool, ApiError> {
    let Some(patch) = r["patch"].as_str().filter(|p| !p.is_empty()) else { return Ok(false) };
    let fail = |m: String| ApiError::internal(format!("Internal error occurred: {m}"));
    if r["patchType"].as_str() != Some("JSONPatch") {
        return Err(fail(format!("webhook {:?} returned a patch without patchType JSONPatch", w.name)));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(|e| fail(format!("webhook {:?} returned an invalid patch: {e}", w.name)))?;
    let patch: json_patch::Patch = serde_json::from_slice(&bytes)
        .map_err(|e| fail(format!("webhook {:?} returned an invalid patch: {e}", w.name)))?;
    let Some(obj) = req.object.as_mut() else { return Ok(false) };
    let before = obj.clone();
    let mut patched = obj.clone();
    json_patch::patch(&mut patched, &patch).map_err(|e| fail(format!("JSON patch from webhook {:?}: {e}", w.name)))?;
    *obj = patched;
    Ok(*obj != before)
}

struct MutatingWebhookPlugin(Arc<WebhookAdmission>);

#[async_trait]
impl MutatingAdmission for MutatingWebhookPlugin {
    fn name(&self) -> &str {
        "MutatingAdmissionWebhook"
    }
    fn active(&self) -> bool {
        self.0.mutating.read().values().any(|c| c.webhooks.as_ref().is_some_and(|w| !w.is_empty()))
    }

    async fn admit(&self, req: &mut AdmissionRequest, feedback: &mut Feedback) -> Result<(), ApiError> {
        let hooks = self.0.mutating_webhooks();
        if hooks.is_empty() {
            return Ok(());
        }
        // Per webhook: called, and the object version it last saw.
        let mut seen: Vec<Option<u64>> = vec![None; hooks.len()];
        let mut version = 0u64;
        for (i, w) in hooks.iter().enumerate() {
            let matched = webhook_matches(w, req, self.0.lookup.as_ref()).map_err(ApiError::bad_request)?;
            if !matched || !conditions_match(w, req)? {
                continue;
            }
            if self.invoke(w, req, feedback).await? {
                version += 1;
            }
            seen[i] = Some(version);
        }
        // Reinvocation: IfNeeded webhooks that were called before a later change.
        for (i, w) in hooks.iter().enumerate() {
            if w.reinvocation_policy != "IfNeeded" || seen[i].is_none_or(|v| v == version) {
                continue;
            }
            if webhook_matches(w, req, self.0.lookup.as_ref()).map_err(ApiError::bad_request)?
                && conditions_match(w, req)?
            {
                self.invoke(w, req, feedback).await?;
            }
        }
        Ok(())
    }
}

impl MutatingWebhookPlugin {
    async fn invoke(&self, w: &Webhook, req: &mut AdmissionRequest, feedback: &mut Feedback) -> Result<bool, ApiError> {
        let Some(r) = self.0.call(w, req).await? else { return Ok(false) };
        take_feedback(w, &r, feedback);
        if r["allowed"].as_bool() != Some(true) {
            return Err(denied(&w.name, &r["status"]));
        }
        apply_patch(w, &r, req)
    }
}

struct ValidatingWebhookPlugin(Arc<WebhookAdmission>);

#[async_trait]
impl ValidatingAdmission for ValidatingWebhookPlugin {
    fn name(&self) -> &str {
        "ValidatingAdmissionWebhook"
    }
    fn active(&self) -> bool {
        self.0.validating.read().values().any(|c| c.webhooks.as_ref().is_some_and(|w| !w.is_empty()))
    }

    async fn validate(&self, req: &AdmissionRequest, feedback: &mut Feedback) -> Result<(), ApiError> {
        let mut hooks = Vec::new();
        for w in self.0.validating_webhooks() {
            if webhook_matches(&w, req, self.0.lookup.as_ref()).map_err(ApiError::bad_request)?
                && conditions_match(&w, req)?
            {
                hooks.push(w);
            }
        }
        let results = futures::future::join_all(hooks.iter().map(|w| self.0.call(w, req))).await;
        for (w, r) in hooks.iter().zip(results) {
            let Some(r) = r? else { continue };
            take_feedback(w, &r, feedback);
            if r["allowed"].as_bool() != Some(true) {
                return Err(denied(&w.name, &r["status"]));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
