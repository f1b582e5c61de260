//! CEL `matchConditions` (k8s.io/apiserver `pkg/admission/plugin/webhook/matchconditions`),
//! shared by admission webhooks and ValidatingAdmissionPolicies: a request matches when every
//! condition is true. A false condition stops the evaluation (no match, whatever errors other
//! conditions had); an error with no false condition is returned for the caller's
//! `failurePolicy` to decide.
//!
//! The variables are those of admission CEL: `object`, `oldObject` (null on create, the object
//! on delete), `request` (the AdmissionReview request's fields, without the objects) and, for
//! policies, `params` and `namespaceObject`.

use serde_json::{Value, json};
use skiff_cel::cost::PER_CALL_LIMIT;
use skiff_cel::{Activation, EvalError};

use crate::AdmissionRequest;

/// The variables webhook match conditions may read.
pub const WEBHOOK_VARS: &[&str] = &["object", "oldObject", "request"];

/// The `request` variable: the AdmissionReview request's fields without `object`/`oldObject`.
pub fn request_var(req: &AdmissionRequest) -> Value {
    let mut r = json!({
        "uid": req.uid,
        "kind": {"group": req.kind.group, "version": req.kind.version, "kind": req.kind.kind},
        "resource": {"group": req.resource.group, "version": req.resource.version, "resource": req.resource.resource},
        "requestKind": {"group": req.kind.group, "version": req.kind.version, "kind": req.kind.kind},
        "requestResource": {"group": req.resource.group, "version": req.resource.version, "resource": req.resource.resource},
        "name": req.name,
        "namespace": req.namespace,
        "operation": req.op().as_str(),
        "userInfo": req.user.to_json(),
        "dryRun": req.dry_run,
        "options": req.options.clone().unwrap_or(Value::Null),
    });
    if !req.sub_resource.is_empty() {
        r["subResource"] = req.sub_resource.clone().into();
        r["requestSubResource"] = req.sub_resource.clone().into();
    }
    r
}

/// One condition: `name` and CEL `expression`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchCondition {
    /// The condition's name (in error messages).
    pub name: String,
    /// The CEL expression, evaluating to a bool.
    pub expression: String,
}

/// Reads `matchConditions` (a JSON array of `{name, expression}`) from a webhook or policy.
pub fn parse(v: &Value) -> Vec<MatchCondition> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|c| MatchCondition {
            name: c["name"].as_str().unwrap_or_default().to_string(),
            expression: c["expression"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// Evaluates `conditions` with `vars` (the names the activation binds): `Ok(true)` when every
/// condition holds.
///
/// # Errors
/// An error of a condition (compile or run time) when none was false, worded
/// `failed to evaluate match condition "<name>": <error>`.
pub fn evaluate(conditions: &[MatchCondition], vars: &[&str], act: &Activation<'_>) -> Result<bool, String> {
    let mut first_error = None;
    for c in conditions {
        let compiled = skiff_cel::compile_cached(&c.expression, vars);
        let result = match &*compiled {
            Ok(p) => p.eval_bool(act, PER_CALL_LIMIT).map_err(|e| match e {
                EvalError::CostLimit(..) => e.to_string(),
                EvalError::Runtime(m) => m,
            }),
            Err(e) => Err(format!("compilation failed: {e}")),
        };
        match result {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                if first_error.is_none() {
                    first_error = Some(format!("failed to evaluate match condition {:?}: {e}", c.name));
                }
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(true),
    }
}

/// Evaluates a webhook's match conditions against a request.
///
/// # Errors
/// As [`evaluate`].
pub fn webhook_matches(conditions: &[MatchCondition], req: &AdmissionRequest) -> Result<bool, String> {
    if conditions.is_empty() {
        return Ok(true);
    }
    let request = request_var(req);
    let null = Value::Null;
    let mut act = Activation::new();
    act.bind("object", req.object.as_ref().unwrap_or(&null));
    act.bind("oldObject", req.old_object.as_ref().unwrap_or(&null));
    act.bind("request", &request);
    evaluate(conditions, WEBHOOK_VARS, &act)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Operation;

    fn conds(list: &[(&str, &str)]) -> Vec<MatchCondition> {
        list.iter().map(|(n, e)| MatchCondition { name: n.to_string(), expression: e.to_string() }).collect()
    }

    fn pod_create() -> AdmissionRequest {
        let mut req = AdmissionRequest::new(Operation::Create, "", "v1", "pods", "Pod");
        req.namespace = "default".into();
        req.object = Some(json!({"metadata": {"name": "p", "labels": {"app": "web"}}}));
        req
    }

    #[test]
    fn a_request_matches_when_every_condition_holds() {
        let req = pod_create();
        let c =
            conds(&[("is-create", "request.operation == 'CREATE'"), ("web", "object.metadata.labels.app == 'web'")]);
        assert_eq!(webhook_matches(&c, &req), Ok(true));
        let c = conds(&[("ns", "request.namespace == 'kube-system'")]);
        assert_eq!(webhook_matches(&c, &req), Ok(false));
        assert_eq!(webhook_matches(&[], &req), Ok(true));
    }

    #[test]
    fn a_false_condition_wins_over_an_error_and_an_error_alone_is_returned() {
        let req = pod_create();
        let c = conds(&[("broken", "object.spec.missing == 1"), ("no", "false")]);
        assert_eq!(webhook_matches(&c, &req), Ok(false));
        let c = conds(&[("broken", "object.spec.missing == 1")]);
        let e = webhook_matches(&c, &req).unwrap_err();
        assert_eq!(e, "failed to evaluate match condition \"broken\": no such key: spec");
    }

    #[test]
    fn old_object_is_null_on_create() {
        let req = pod_create();
        assert_eq!(webhook_matches(&conds(&[("new", "oldObject == null")]), &req), Ok(true));
    }
}
