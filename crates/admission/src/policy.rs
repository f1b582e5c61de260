//! ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1,
//! <https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/>):
//! k8s.io/apiserver's `plugin/policy/validating`.
//!
//! [`PolicyAdmission`] keeps the policies and bindings (fed from watch events like
//! [`crate::webhook::WebhookAdmission`]); its plugin, for each binding (by name) whose policy's
//! `matchConstraints` and own `matchResources` match the request:
//!
//! 1. resolves the params (`paramKind` + `paramRef`: by name or selector, in `paramRef.namespace`
//!    or the request's namespace; none found is a denial under `parameterNotFoundAction: Deny`
//!    and a skip under `Allow`); each param is evaluated in turn;
//! 2. evaluates the policy's `matchConditions` (a false one skips the binding);
//! 3. evaluates `variables` (as `variables.<name>`) and each validation, with `object`,
//!    `oldObject`, `request`, `params`, `namespaceObject`;
//! 4. a false validation (or, under `failurePolicy: Fail`, an error) becomes a decision with the
//!    validation's `messageExpression`, `message` or `failed expression: <expression>`, which
//!    each of the binding's `validationActions` applies: `Deny` rejects with
//!    `ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>`
//!    (code from `reason`, 422 Invalid by default), `Warn` adds a `Warning` header, `Audit` an
//!    audit annotation; `auditAnnotations` add `<policy>/<key>` annotations.
//!
//! Expressions are compiled when a policy is applied ([`skiff_cel::compile_cached`]); [`validate`]
//! checks policies and bindings at create/update (422 with upstream's messages and paths).
//! `status.typeChecking` is not computed (cel-rust has no type checker).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as MetaLabelSelector;
use parking_lot::RwLock;
use serde_json::{Value, json};
use skiff_apimachinery::status::Cause;
use skiff_apimachinery::{ApiError, LabelSelector};
use skiff_cel::cost::PER_CALL_LIMIT;
use skiff_cel::{Activation, EvalError};

use crate::matchconditions::{self, MatchCondition};
use crate::{AdmissionLookup, AdmissionRequest, Feedback, ValidatingAdmission, labels};

/// The variables a policy's expressions may read.
pub const POLICY_VARS: &[&str] = &["object", "oldObject", "request", "params", "namespaceObject", "variables"];

/// The audit annotation key of `Audit` decisions.
pub const VALIDATION_FAILURE_ANNOTATION: &str = "validation.policy.admission.k8s.io/validation_failure";

/// `matchConstraints` / `matchResources`.
#[derive(Debug, Clone, Default)]
struct MatchResources {
    rules: Vec<(RuleWithOperations, Vec<String>)>,
    exclude: Vec<(RuleWithOperations, Vec<String>)>,
    namespace_selector: Option<MetaLabelSelector>,
    object_selector: Option<MetaLabelSelector>,
}

fn named_rules(v: &Value) -> Vec<(RuleWithOperations, Vec<String>)> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let names = r["resourceNames"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default();
            let mut rule = r.clone();
            if let Some(m) = rule.as_object_mut() {
                m.remove("resourceNames");
            }
            serde_json::from_value(rule).ok().map(|rule| (rule, names))
        })
        .collect()
}

impl MatchResources {
    fn from_json(v: &Value) -> Self {
        Self {
            rules: named_rules(&v["resourceRules"]),
            exclude: named_rules(&v["excludeResourceRules"]),
            namespace_selector: serde_json::from_value(v["namespaceSelector"].clone()).ok(),
            object_selector: serde_json::from_value(v["objectSelector"].clone()).ok(),
        }
    }

    /// Whether the request is selected; `empty_rules_match` for a binding's `matchResources`
    /// whose empty rules defer to the policy's.
    fn matches(&self, req: &AdmissionRequest, lookup: &dyn AdmissionLookup, empty_rules_match: bool) -> bool {
        let rule_ok = |(rule, names): &(RuleWithOperations, Vec<String>)| {
            crate::webhook::rule_matches(rule, req) && (names.is_empty() || names.contains(&req.object_name()))
        };
        let ruled = if self.rules.is_empty() { empty_rules_match } else { self.rules.iter().any(rule_ok) };
        if !ruled || self.exclude.iter().any(rule_ok) {
            return false;
        }
        let sel = |s: &Option<MetaLabelSelector>| match s {
            None => Ok(LabelSelector::everything()),
            Some(s) => LabelSelector::from_metav1(s),
        };
        let Ok(ns_sel) = sel(&self.namespace_selector) else { return false };
        if !ns_sel.is_empty() && !req.namespace.is_empty() {
            let ns_labels = lookup.namespace(&req.namespace).map(|n| labels(&n)).unwrap_or_default();
            if !ns_sel.matches(&ns_labels) {
                return false;
            }
        }
        let Ok(obj_sel) = sel(&self.object_selector) else { return false };
        obj_sel.is_empty()
            || [req.object.as_ref(), req.old_object.as_ref()].into_iter().flatten().any(|o| obj_sel.matches(&labels(o)))
    }
}

#[derive(Debug, Clone)]
struct Validation {
    expression: String,
    compiled: skiff_cel::Shared,
    message: String,
    message_expression: Option<skiff_cel::Shared>,
    reason: String,
}

fn compiled(expr: &str) -> skiff_cel::Shared {
    skiff_cel::compile_cached(expr, POLICY_VARS)
}

/// A policy as the plugin runs it.
#[derive(Debug, Clone)]
struct Policy {
    param_kind: Option<(String, String)>,
    constraints: MatchResources,
    failure_policy: String,
    match_conditions: Vec<MatchCondition>,
    variables: Vec<(String, skiff_cel::Shared)>,
    validations: Vec<Validation>,
    audit_annotations: Vec<(String, skiff_cel::Shared)>,
    uses_variables: bool,
}

impl Policy {
    fn from_json(obj: &Value) -> Self {
        let spec = &obj["spec"];
        let param_kind = spec["paramKind"].as_object().map(|p| {
            (
                p.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string(),
                p.get("kind").and_then(Value::as_str).unwrap_or("").to_string(),
            )
        });
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        // Compiled once here, not per request.
        let variables: Vec<(String, skiff_cel::Shared)> = spec["variables"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| (s(&v["name"]), compiled(v["expression"].as_str().unwrap_or(""))))
            .collect();
        let validations: Vec<Validation> = spec["validations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| Validation {
                expression: s(&v["expression"]),
                compiled: compiled(v["expression"].as_str().unwrap_or("")),
                message: s(&v["message"]),
                message_expression: v["messageExpression"].as_str().filter(|m| !m.trim().is_empty()).map(compiled),
                reason: s(&v["reason"]),
            })
            .collect();
        let audit_annotations = spec["auditAnnotations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| (s(&a["key"]), compiled(a["valueExpression"].as_str().unwrap_or(""))))
            .collect();
        let uses_variables = !variables.is_empty();
        Self {
            param_kind,
            constraints: MatchResources::from_json(&spec["matchConstraints"]),
            failure_policy: spec["failurePolicy"].as_str().unwrap_or("Fail").to_string(),
            match_conditions: matchconditions::parse(&spec["matchConditions"]),
            variables,
            validations,
            audit_annotations,
            uses_variables,
        }
    }
}

/// A binding as the plugin runs it.
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    policy_name: String,
    param_ref: Option<Value>,
    match_resources: Option<MatchResources>,
    actions: Vec<String>,
}

impl Binding {
    fn from_json(obj: &Value) -> Self {
        let spec = &obj["spec"];
        Self {
            name: obj["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            policy_name: spec["policyName"].as_str().unwrap_or_default().to_string(),
            param_ref: spec.get("paramRef").filter(|p| p.is_object()).cloned(),
            match_resources: spec.get("matchResources").filter(|m| m.is_object()).map(MatchResources::from_json),
            actions: spec["validationActions"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default(),
        }
    }
}

/// The registered policies and bindings, and the ValidatingAdmissionPolicy plugin.
pub struct PolicyAdmission {
    policies: RwLock<BTreeMap<String, Arc<Policy>>>,
    bindings: RwLock<BTreeMap<String, Arc<Binding>>>,
    lookup: Arc<dyn AdmissionLookup>,
}

/// One failed validation (or failed evaluation under `failurePolicy: Fail`).
struct Decision {
    message: String,
    reason: String,
    index: usize,
}

impl PolicyAdmission {
    /// No policies yet; namespaces and params are read through `lookup`.
    pub fn new(lookup: Arc<dyn AdmissionLookup>) -> Self {
        Self { policies: RwLock::default(), bindings: RwLock::default(), lookup }
    }

    /// Adds or replaces a ValidatingAdmissionPolicy or ValidatingAdmissionPolicyBinding (by
    /// `kind`).
    ///
    /// # Errors
    /// Another kind.
    pub fn apply(&self, obj: &Value) -> Result<(), String> {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        match obj["kind"].as_str().unwrap_or_default() {
            "ValidatingAdmissionPolicy" => {
                self.policies.write().insert(name, Arc::new(Policy::from_json(obj)));
            }
            "ValidatingAdmissionPolicyBinding" => {
                self.bindings.write().insert(name, Arc::new(Binding::from_json(obj)));
            }
            other => return Err(format!("not a validating admission policy: kind {other:?}")),
        }
        Ok(())
    }

    /// Removes a policy or binding (`kind` as in [`apply`](Self::apply)).
    pub fn remove(&self, kind: &str, name: &str) {
        match kind {
            "ValidatingAdmissionPolicy" => {
                self.policies.write().remove(name);
            }
            "ValidatingAdmissionPolicyBinding" => {
                self.bindings.write().remove(name);
            }
            _ => {}
        }
    }

    /// The names of the registered policies or bindings (by `kind`).
    pub fn names(&self, kind: &str) -> Vec<String> {
        match kind {
            "ValidatingAdmissionPolicy" => self.policies.read().keys().cloned().collect(),
            "ValidatingAdmissionPolicyBinding" => self.bindings.read().keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// The ValidatingAdmissionPolicy plugin.
    pub fn plugin(self: &Arc<Self>) -> Arc<dyn ValidatingAdmission> {
        Arc::new(ValidatingAdmissionPolicyPlugin(self.clone()))
    }

    fn params(&self, p: &Policy, b: &Binding, req: &AdmissionRequest) -> Vec<Arc<Value>> {
        let (Some((api_version, kind)), Some(r)) = (&p.param_kind, &b.param_ref) else { return Vec::new() };
        let ns = r["namespace"].as_str().unwrap_or(&req.namespace).to_string();
        if let Some(name) = r["name"].as_str().filter(|n| !n.is_empty()) {
            return self
                .lookup
                .object_of_kind(api_version, kind, &ns, name)
                .or_else(|| self.lookup.object_of_kind(api_version, kind, "", name))
                .into_iter()
                .collect();
        }
        let sel = match serde_json::from_value::<MetaLabelSelector>(r["selector"].clone()) {
            Ok(s) => LabelSelector::from_metav1(&s).unwrap_or_else(|_| LabelSelector::nothing()),
            Err(_) => return Vec::new(),
        };
        let mut found = self.lookup.objects_of_kind(api_version, kind, &ns);
        if found.is_empty() {
            found = self.lookup.objects_of_kind(api_version, kind, "");
        }
        found.into_iter().filter(|o| sel.matches(&labels(o))).collect()
    }

    /// Evaluates one policy/binding/param: the decisions, and audit annotations to add.
    fn evaluate(
        &self,
        p: &Policy,
        req: &AdmissionRequest,
        param: Option<&Value>,
        annotations: &mut Vec<(String, String)>,
    ) -> Vec<Decision> {
        let null = Value::Null;
        let request = matchconditions::request_var(req);
        let ns_obj = if req.namespace.is_empty() { None } else { self.lookup.namespace(&req.namespace) };
        let object = req.object.as_ref().unwrap_or(&null);
        let old_object = req.old_object.as_ref().unwrap_or(&null);
        let params = param.unwrap_or(&null);
        let namespace_object = ns_obj.as_deref().unwrap_or(&null);
        // On delete the object is null and the old object is what is deleted.
        let fail = |message: String| -> Vec<Decision> {
            if p.failure_policy == "Ignore" {
                Vec::new()
            } else {
                vec![Decision { message, reason: String::new(), index: 0 }]
            }
        };
        let no_variables = Value::Object(serde_json::Map::new());
        if !p.match_conditions.is_empty() {
            let act = activation([object, old_object, &request, params, namespace_object, &no_variables]);
            match matchconditions::evaluate(&p.match_conditions, POLICY_VARS, &act) {
                Ok(true) => {}
                Ok(false) => return Vec::new(),
                Err(e) => return fail(e),
            }
        }
        // Variables are evaluated in order, each seeing the earlier ones; an unusable variable
        // is left out, so the expressions that read it fail with `no such key`.
        let mut vars = serde_json::Map::new();
        if p.uses_variables {
            for (name, expr) in &p.variables {
                let so_far = Value::Object(vars.clone());
                let value = match &**expr {
                    Ok(c) => c
                        .eval(
                            &activation([object, old_object, &request, params, namespace_object, &so_far]),
                            PER_CALL_LIMIT,
                        )
                        .map(|v| skiff_cel::to_json(&v)),
                    Err(e) => Err(EvalError::Runtime(format!("compilation failed: {e}"))),
                };
                if let Ok(v) = value {
                    vars.insert(name.clone(), v);
                }
            }
        }
        let vars_value = Value::Object(vars);
        let act = activation([object, old_object, &request, params, namespace_object, &vars_value]);
        let mut decisions = Vec::new();
        for (i, v) in p.validations.iter().enumerate() {
            let result = match &*v.compiled {
                Ok(c) => c.eval_bool(&act, PER_CALL_LIMIT).map_err(|e| e.to_string()),
                Err(e) => Err(format!("compilation failed: {e}")),
            };
            match result {
                Ok(true) => {}
                Ok(false) => {
                    let from_expression = v
                        .message_expression
                        .as_deref()
                        .and_then(|c| c.as_ref().ok())
                        .and_then(|c| c.eval_string(&act, PER_CALL_LIMIT).ok())
                        .map(|m| m.trim().to_string())
                        .filter(|m| !m.is_empty() && !m.contains('\n'));
                    let message = from_expression.unwrap_or_else(|| {
                        if v.message.is_empty() {
                            format!("failed expression: {}", v.expression.trim())
                        } else {
                            v.message.clone()
                        }
                    });
                    decisions.push(Decision { message, reason: v.reason.clone(), index: i });
                }
                Err(e) => {
                    if p.failure_policy != "Ignore" {
                        decisions.push(Decision {
                            message: format!("expression '{}' resulted in error: {e}", v.expression.trim()),
                            reason: String::new(),
                            index: i,
                        });
                    }
                }
            }
        }
        for (key, expr) in &p.audit_annotations {
            if let Ok(c) = &**expr
                && let Ok(s) = c.eval_string(&act, PER_CALL_LIMIT)
            {
                annotations.push((key.clone(), s));
            }
        }
        decisions
    }
}

/// The activation of a policy's expressions: `object`, `oldObject`, `request`, `params`,
/// `namespaceObject`, `variables`, in that order.
fn activation<'a>(values: [&'a Value; 6]) -> Activation<'a> {
    let mut act = Activation::new();
    for (name, v) in POLICY_VARS.iter().zip(values) {
        act.bind(name, v);
    }
    act
}

fn reason_code(reason: &str) -> (u16, &str) {
    match reason {
        "" | "Invalid" => (422, "Invalid"),
        "Unauthorized" => (401, "Unauthorized"),
        "Forbidden" => (403, "Forbidden"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        other => (400, other),
    }
}

struct ValidatingAdmissionPolicyPlugin(Arc<PolicyAdmission>);

#[async_trait]
impl ValidatingAdmission for ValidatingAdmissionPolicyPlugin {
    fn name(&self) -> &str {
        "ValidatingAdmissionPolicy"
    }
    fn active(&self) -> bool {
        !self.0.bindings.read().is_empty()
    }

    async fn validate(&self, req: &AdmissionRequest, feedback: &mut Feedback) -> Result<(), ApiError> {
        let bindings: Vec<Arc<Binding>> = self.0.bindings.read().values().cloned().collect();
        let lookup = self.0.lookup.as_ref();
        let mut denied: Option<(String, String)> = None;
        let mut audit_failures = Vec::new();
        for b in bindings {
            let Some(p) = self.0.policies.read().get(&b.policy_name).cloned() else { continue };
            if !p.constraints.matches(req, lookup, false) {
                continue;
            }
            if let Some(m) = &b.match_resources
                && !m.matches(req, lookup, true)
            {
                continue;
            }
            let mut decisions = Vec::new();
            let mut annotations = Vec::new();
            if p.param_kind.is_some() {
                let params = self.0.params(&p, &b, req);
                if params.is_empty() {
                    let action =
                        b.param_ref.as_ref().and_then(|r| r["parameterNotFoundAction"].as_str()).unwrap_or("Deny");
                    if action == "Deny" && b.param_ref.is_some() {
                        decisions.push(Decision {
                            message: "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction".into(),
                            reason: String::new(),
                            index: 0,
                        });
                    } else if b.param_ref.is_none() {
                        decisions.push(Decision {
                            message: format!("failed to configure binding: paramRef is required when paramKind is set on ValidatingAdmissionPolicy {:?}", b.policy_name),
                            reason: String::new(),
                            index: 0,
                        });
                    }
                }
                for param in &params {
                    decisions.extend(self.0.evaluate(&p, req, Some(param), &mut annotations));
                }
            } else {
                decisions.extend(self.0.evaluate(&p, req, None, &mut annotations));
            }
            for (key, value) in annotations {
                feedback.audit_annotations.insert(format!("{}/{key}", b.policy_name), value);
            }
            for d in decisions {
                for action in &b.actions {
                    match action.as_str() {
                        "Deny" if denied.is_none() => {
                            let message = format!(
                                "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
                                b.policy_name, b.name, d.message
                            );
                            denied = Some((message, d.reason.clone()));
                        }
                        "Warn" => feedback.warnings.push(format!(
                            "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                            b.policy_name, b.name, d.message
                        )),
                        "Audit" => audit_failures.push(json!({
                            "message": d.message, "policy": b.policy_name, "binding": b.name,
                            "expressionIndex": d.index, "validationActions": b.actions,
                        })),
                        _ => {}
                    }
                }
            }
        }
        if !audit_failures.is_empty() {
            feedback
                .audit_annotations
                .insert(VALIDATION_FAILURE_ANNOTATION.into(), Value::Array(audit_failures).to_string());
        }
        if let Some((message, reason)) = denied {
            let (code, reason) = reason_code(&reason);
            let mut e = req.forbidden(&message);
            e.code = code;
            e.reason = reason.to_string();
            if let Some(d) = e.details.as_mut() {
                d.causes.push(Cause { reason: String::new(), message, field: String::new() });
            }
            return Err(e);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Validation of the objects themselves (k8s.io/kubernetes `pkg/apis/admissionregistration/validation`).

fn required(field: &str, detail: &str) -> Cause {
    let message = if detail.is_empty() { "Required value".to_string() } else { format!("Required value: {detail}") };
    Cause { reason: "FieldValueRequired".into(), message, field: field.into() }
}

fn unsupported(field: &str, value: &str, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!("Unsupported value: {value:?}: supported values: {}", list.join(", ")),
        field: field.into(),
    }
}

fn check_expression(expr: &str, field: &str, causes: &mut Vec<Cause>) {
    if expr.trim().is_empty() {
        causes.push(required(field, ""));
        return;
    }
    if let Err(e) = &*skiff_cel::compile_cached(expr, POLICY_VARS) {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: compilation failed: {e}", Value::from(expr)),
            field: field.into(),
        });
    }
}

/// The causes of a 422 for a ValidatingAdmissionPolicy or ValidatingAdmissionPolicyBinding
/// (by `kind`): required fields, supported enum values, and expressions that do not compile.
pub fn validate(kind: &str, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    match kind {
        "ValidatingAdmissionPolicy" => {
            if let Some(fp) = spec["failurePolicy"].as_str()
                && !matches!(fp, "Fail" | "Ignore")
            {
                causes.push(unsupported("spec.failurePolicy", fp, &["Fail", "Ignore"]));
            }
            if !spec["matchConstraints"].is_object() {
                causes.push(required("spec.matchConstraints", ""));
            } else if spec["matchConstraints"]["resourceRules"].as_array().is_none_or(|a| a.is_empty()) {
                causes.push(required("spec.matchConstraints.resourceRules", ""));
            }
            let validations = spec["validations"].as_array().map_or(0, Vec::len);
            let audits = spec["auditAnnotations"].as_array().map_or(0, Vec::len);
            if validations == 0 && audits == 0 {
                causes.push(required(
                    "spec.validations",
                    "validations or auditAnnotations must contain at least one item",
                ));
            }
            for (i, v) in spec["validations"].as_array().into_iter().flatten().enumerate() {
                check_expression(
                    v["expression"].as_str().unwrap_or(""),
                    &format!("spec.validations[{i}].expression"),
                    &mut causes,
                );
                if let Some(me) = v["messageExpression"].as_str() {
                    check_expression(me, &format!("spec.validations[{i}].messageExpression"), &mut causes);
                }
                if let Some(r) = v["reason"].as_str()
                    && !matches!(r, "Unauthorized" | "Forbidden" | "Invalid" | "RequestEntityTooLarge")
                {
                    causes.push(unsupported(
                        &format!("spec.validations[{i}].reason"),
                        r,
                        &["Forbidden", "Invalid", "RequestEntityTooLarge", "Unauthorized"],
                    ));
                }
            }
            for (i, v) in spec["variables"].as_array().into_iter().flatten().enumerate() {
                if v["name"].as_str().is_none_or(str::is_empty) {
                    causes.push(required(&format!("spec.variables[{i}].name"), ""));
                }
                check_expression(
                    v["expression"].as_str().unwrap_or(""),
                    &format!("spec.variables[{i}].expression"),
                    &mut causes,
                );
            }
            for (i, a) in spec["auditAnnotations"].as_array().into_iter().flatten().enumerate() {
                if a["key"].as_str().is_none_or(str::is_empty) {
                    causes.push(required(&format!("spec.auditAnnotations[{i}].key"), ""));
                }
                check_expression(
                    a["valueExpression"].as_str().unwrap_or(""),
                    &format!("spec.auditAnnotations[{i}].valueExpression"),
                    &mut causes,
                );
            }
            for (i, c) in spec["matchConditions"].as_array().into_iter().flatten().enumerate() {
                if c["name"].as_str().is_none_or(str::is_empty) {
                    causes.push(required(&format!("spec.matchConditions[{i}].name"), ""));
                }
                check_expression(
                    c["expression"].as_str().unwrap_or(""),
                    &format!("spec.matchConditions[{i}].expression"),
                    &mut causes,
                );
            }
        }
        "ValidatingAdmissionPolicyBinding" => {
            if spec["policyName"].as_str().is_none_or(str::is_empty) {
                causes.push(required("spec.policyName", ""));
            }
            let actions: Vec<&str> =
                spec["validationActions"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            if actions.is_empty() {
                causes.push(required("spec.validationActions", "at least one validation action is required"));
            }
            for (i, a) in actions.iter().enumerate() {
                if !matches!(*a, "Deny" | "Warn" | "Audit") {
                    causes.push(unsupported(&format!("spec.validationActions[{i}]"), a, &["Audit", "Deny", "Warn"]));
                }
            }
            if actions.contains(&"Deny") && actions.contains(&"Warn") {
                causes.push(Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!(
                        "Invalid value: {}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
                        Value::from(actions.iter().map(|a| Value::from(*a)).collect::<Vec<_>>())
                    ),
                    field: "spec.validationActions".into(),
                });
            }
            if let Some(r) = spec["paramRef"].as_object() {
                let has_name = r.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
                if has_name && r.get("selector").is_some_and(|s| !s.is_null()) {
                    causes.push(Cause {
                        reason: "FieldValueForbidden".into(),
                        message: "Forbidden: name and selector are mutually exclusive".into(),
                        field: "spec.paramRef.name".into(),
                    });
                }
                match r.get("parameterNotFoundAction").and_then(Value::as_str) {
                    None => causes.push(required("spec.paramRef.parameterNotFoundAction", "")),
                    Some("Allow" | "Deny") => {}
                    Some(other) => {
                        causes.push(unsupported("spec.paramRef.parameterNotFoundAction", other, &["Allow", "Deny"]))
                    }
                }
            }
        }
        _ => {}
    }
    causes
}

#[cfg(test)]
mod tests;
