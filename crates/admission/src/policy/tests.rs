//! ValidatingAdmissionPolicy cases after upstream's plugin tests and the documentation's
//! examples (facts, not code).

use serde_json::json;

use super::*;
use crate::{MemoryLookup, Operation};

fn deployment(replicas: i64) -> AdmissionRequest {
    let mut req = AdmissionRequest::new(Operation::Create, "apps", "v1", "deployments", "Deployment");
    req.namespace = "default".into();
    req.name = "web".into();
    req.object = Some(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": replicas}}));
    req
}

fn replica_policy(extra: Value) -> Value {
    let mut p = json!({"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "replica-limit"},
    "spec": {
        "failurePolicy": "Fail",
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
        "validations": [{"expression": "object.spec.replicas <= int(params.data.maxReplicas)",
            "messageExpression": "'replicas must be no greater than ' + params.data.maxReplicas",
            "reason": "Invalid"}],
    }});
    if let (Some(spec), Some(extra)) = (p["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    p
}

fn binding(actions: &[&str], param_ref: Value) -> Value {
    json!({"kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "replica-limit-binding"},
        "spec": {"policyName": "replica-limit", "validationActions": actions, "paramRef": param_ref}})
}

fn setup(policy: Value, binding: Value) -> (Arc<PolicyAdmission>, Arc<MemoryLookup>) {
    let lookup = Arc::new(MemoryLookup::new());
    lookup.put(json!({"kind": "ConfigMap", "metadata": {"name": "limits", "namespace": "default"},
        "data": {"maxReplicas": "5"}}));
    lookup.put(json!({"kind": "Namespace", "metadata": {"name": "default", "labels": {"env": "prod"}}}));
    let admission = Arc::new(PolicyAdmission::new(lookup.clone()));
    admission.apply(&policy).unwrap();
    admission.apply(&binding).unwrap();
    (admission, lookup)
}

async fn run(a: &Arc<PolicyAdmission>, req: &AdmissionRequest) -> (Result<(), ApiError>, Feedback) {
    let mut feedback = Feedback::default();
    let r = a.plugin().validate(req, &mut feedback).await;
    (r, feedback)
}

fn param_ref() -> Value {
    json!({"name": "limits", "namespace": "default", "parameterNotFoundAction": "Deny"})
}

#[tokio::test]
async fn a_deployment_over_the_params_limit_is_denied_with_the_message_expression() {
    let (a, _) = setup(replica_policy(json!({})), binding(&["Deny"], param_ref()));
    assert!(run(&a, &deployment(5)).await.0.is_ok());
    let e = run(&a, &deployment(6)).await.0.unwrap_err();
    assert_eq!(e.code, 422);
    assert_eq!(e.reason, "Invalid");
    assert_eq!(
        e.message,
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: replicas must be no greater than 5"
    );
}

#[tokio::test]
async fn warn_and_audit_actions_do_not_deny() {
    let (a, _) = setup(replica_policy(json!({})), binding(&["Warn", "Audit"], param_ref()));
    let (r, feedback) = run(&a, &deployment(9)).await;
    assert!(r.is_ok());
    assert_eq!(
        feedback.warnings,
        vec![
            "Validation failed for ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding': replicas must be no greater than 5"
        ]
    );
    let audit = &feedback.audit_annotations[VALIDATION_FAILURE_ANNOTATION];
    assert!(audit.contains("\"policy\":\"replica-limit\""), "{audit}");
}

#[tokio::test]
async fn missing_params_deny_or_allow_per_parameter_not_found_action() {
    let missing = json!({"name": "nope", "parameterNotFoundAction": "Deny"});
    let (a, _) = setup(replica_policy(json!({})), binding(&["Deny"], missing));
    let e = run(&a, &deployment(1)).await.0.unwrap_err();
    assert!(
        e.message.ends_with("no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{}",
        e.message
    );
    let allow = json!({"name": "nope", "parameterNotFoundAction": "Allow"});
    let (a, _) = setup(replica_policy(json!({})), binding(&["Deny"], allow));
    assert!(run(&a, &deployment(100)).await.0.is_ok());
}

#[tokio::test]
async fn params_are_found_by_selector() {
    let (a, lookup) = setup(
        replica_policy(json!({})),
        binding(&["Deny"], json!({"selector": {"matchLabels": {"limits": "true"}}, "parameterNotFoundAction": "Deny"})),
    );
    lookup.put(
        json!({"kind": "ConfigMap", "metadata": {"name": "sel", "namespace": "default", "labels": {"limits": "true"}},
        "data": {"maxReplicas": "2"}}),
    );
    assert!(run(&a, &deployment(3)).await.0.unwrap_err().message.ends_with("no greater than 2"));
}

#[tokio::test]
async fn unmatched_requests_and_false_match_conditions_are_not_evaluated() {
    let policy = replica_policy(
        json!({"matchConditions": [{"name": "not-web", "expression": "object.metadata.name != 'web'"}]}),
    );
    let (a, _) = setup(policy, binding(&["Deny"], param_ref()));
    assert!(run(&a, &deployment(100)).await.0.is_ok());
    let (a, _) = setup(replica_policy(json!({})), binding(&["Deny"], param_ref()));
    let mut pod = AdmissionRequest::new(Operation::Create, "", "v1", "pods", "Pod");
    pod.object = Some(json!({"metadata": {"name": "p"}}));
    assert!(run(&a, &pod).await.0.is_ok());
}

#[tokio::test]
async fn variables_reasons_and_failure_policy_shape_decisions() {
    let policy = json!({"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "replica-limit"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["deployments"]}]},
        "variables": [{"name": "replicas", "expression": "object.spec.replicas"},
                      {"name": "double", "expression": "variables.replicas * 2"}],
        "validations": [
            {"expression": "variables.double < 10", "reason": "Forbidden"},
            {"expression": "object.spec.missing == 1"},
        ],
        "auditAnnotations": [{"key": "replicas", "valueExpression": "string(variables.replicas)"}],
    }});
    let (a, _) = setup(policy.clone(), binding(&["Deny"], Value::Null));
    let (r, feedback) = run(&a, &deployment(7)).await;
    let e = r.unwrap_err();
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(e.message.ends_with("denied request: failed expression: variables.double < 10"), "{}", e.message);
    assert_eq!(feedback.audit_annotations["replica-limit/replicas"], "7");
    let e = run(&a, &deployment(1)).await.0.unwrap_err();
    assert!(
        e.message.ends_with("expression 'object.spec.missing == 1' resulted in error: no such key: missing"),
        "{}",
        e.message
    );
    let mut ignore = policy;
    ignore["spec"]["failurePolicy"] = "Ignore".into();
    let (a, _) = setup(ignore, binding(&["Deny"], Value::Null));
    assert!(run(&a, &deployment(1)).await.0.is_ok());
}

#[test]
fn invalid_policies_and_bindings_are_refused_with_field_causes() {
    let bad = json!({"spec": {"failurePolicy": "Sometimes", "matchConstraints": {"resourceRules": [{}]},
        "validations": [{"expression": "object.spec.replicas <"}]}});
    let causes = validate("ValidatingAdmissionPolicy", &bad);
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, vec!["spec.failurePolicy", "spec.validations[0].expression"]);
    assert!(
        causes[1]
            .message
            .starts_with("Invalid value: \"object.spec.replicas <\": compilation failed: ERROR: <input>:1:")
    );
    assert!(validate("ValidatingAdmissionPolicy", &replica_policy(json!({}))).is_empty());
    let causes =
        validate("ValidatingAdmissionPolicyBinding", &json!({"spec": {"validationActions": ["Deny", "Warn", "Nope"]}}));
    let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, vec!["spec.policyName", "spec.validationActions[2]", "spec.validationActions"]);
}
