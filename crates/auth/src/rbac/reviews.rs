//! The access-review APIs of `authorization.k8s.io/v1` and `authentication.k8s.io/v1` that
//! `kubectl auth can-i` (incl. `--list`) and `kubectl auth whoami` use
//! (<https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access>):
//! SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview and
//! SelfSubjectRulesReview. Each takes the posted object and answers it with `status` filled in.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use super::{Attributes, Authorizer, RbacAuthorizer};
use crate::user::UserInfo;

/// Which access review is being answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessReviewKind {
    /// `selfsubjectaccessreviews`: about the requesting user.
    SelfSubject,
    /// `subjectaccessreviews`: about `spec.user`/`spec.groups`.
    Subject,
    /// `localsubjectaccessreviews` in a namespace: about `spec.user`, in that namespace only.
    LocalSubject,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
}

/// Answers an access review: `body` is the posted review, `requester` the authenticated user,
/// `namespace` the URL's namespace (LocalSubjectAccessReview only).
///
/// # Errors
/// 400 when neither (or both) of `spec.resourceAttributes` and `spec.nonResourceAttributes` are
/// set, when a SubjectAccessReview names no user or group, or when a LocalSubjectAccessReview's
/// namespace differs from the URL's.
pub fn access_review(
    authorizer: &dyn Authorizer,
    kind: AccessReviewKind,
    body: &Value,
    requester: &UserInfo,
    namespace: &str,
) -> Result<Value, ApiError> {
    let spec = &body["spec"];
    let ra = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let nra = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    if ra.is_some() == nra.is_some() {
        return Err(ApiError::bad_request(
            "exactly one of spec.resourceAttributes and spec.nonResourceAttributes must be specified",
        ));
    }
    let user = match kind {
        AccessReviewKind::SelfSubject => requester.clone(),
        _ => {
            let extra: BTreeMap<String, Vec<String>> = spec["extra"]
                .as_object()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
                .unwrap_or_default();
            let u = UserInfo {
                name: spec["user"].as_str().unwrap_or_default().to_string(),
                uid: spec["uid"].as_str().unwrap_or_default().to_string(),
                groups: strings(&spec["groups"]),
                extra,
            };
            if u.name.is_empty() && u.groups.is_empty() {
                return Err(ApiError::bad_request("at least one of user or group must be specified"));
            }
            u
        }
    };
    if kind == AccessReviewKind::LocalSubject {
        if nra.is_some() {
            return Err(ApiError::bad_request("spec.nonResourceAttributes: disallowed on this kind of request"));
        }
        let ns = ra.and_then(|r| r["namespace"].as_str()).unwrap_or_default();
        if ns != namespace {
            return Err(ApiError::bad_request(format!(
                "spec.resourceAttributes.namespace must match namespace: {namespace}"
            )));
        }
    }
    let decision = if let Some(r) = ra {
        let s = |k: &str| r[k].as_str().unwrap_or_default();
        let attrs = Attributes::resource(&user, s("verb"), s("group"), s("resource"), s("namespace"), s("name"))
            .with_subresource(s("subresource"));
        authorizer.authorize(&attrs)
    } else {
        let n = nra.unwrap_or(&Value::Null);
        let s = |k: &str| n[k].as_str().unwrap_or_default();
        authorizer.authorize(&Attributes::non_resource(&user, s("verb"), s("path")))
    };
    let mut out = body.clone();
    if !out.is_object() {
        out = json!({});
    }
    if out["metadata"].is_null() {
        out["metadata"] = json!({"creationTimestamp": null});
    }
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = decision.reason.into();
    }
    out["status"] = status;
    Ok(out)
}

/// Answers a SelfSubjectRulesReview for `requester` in `spec.namespace`.
///
/// # Errors
/// 400 when `spec.namespace` is missing.
pub fn self_subject_rules_review(
    authorizer: &RbacAuthorizer,
    body: &Value,
    requester: &UserInfo,
) -> Result<Value, ApiError> {
    let ns = body["spec"]["namespace"].as_str().unwrap_or_default();
    if ns.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let mut out = body.clone();
    if out["metadata"].is_null() {
        out["metadata"] = json!({"creationTimestamp": null});
    }
    out["status"] = authorizer.subject_rules_review_status(requester, ns);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authorizer() -> RbacAuthorizer {
        let a = RbacAuthorizer::new();
        a.apply(&json!({"kind": "Role", "metadata": {"namespace": "default", "name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]}]}))
            .unwrap();
        a.apply(&json!({"kind": "RoleBinding", "metadata": {"namespace": "default", "name": "read-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "User", "name": "jane"}]}))
            .unwrap();
        a
    }

    fn ssar(verb: &str, resource: &str, ns: &str) -> Value {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "resource": resource}}})
    }

    #[test]
    fn can_i_answers_yes_and_no() {
        let a = authorizer();
        let jane = UserInfo::new("jane", ["system:authenticated"]);
        let cases =
            [("list", "pods", "default", true), ("delete", "pods", "default", false), ("list", "pods", "prod", false)];
        for (verb, res, ns, want) in cases {
            let r = access_review(&a, AccessReviewKind::SelfSubject, &ssar(verb, res, ns), &jane, "").unwrap();
            assert_eq!(r["status"]["allowed"], want, "{verb} {res} in {ns}");
            assert_eq!(r["kind"], "SelfSubjectAccessReview");
        }
        let r = access_review(&a, AccessReviewKind::SelfSubject, &ssar("get", "pods", "default"), &jane, "").unwrap();
        assert_eq!(
            r["status"]["reason"],
            r#"RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" to User "jane""#
        );
    }

    #[test]
    fn subject_reviews_ask_about_someone_else() {
        let a = authorizer();
        let admin = UserInfo::new("admin", ["system:masters"]);
        let sar = json!({"spec": {"user": "jane", "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}}});
        assert_eq!(access_review(&a, AccessReviewKind::Subject, &sar, &admin, "").unwrap()["status"]["allowed"], true);
        let nobody = json!({"spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}});
        assert_eq!(access_review(&a, AccessReviewKind::Subject, &nobody, &admin, "").unwrap_err().code, 400);
        let local = json!({"spec": {"user": "jane", "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}}});
        assert_eq!(
            access_review(&a, AccessReviewKind::LocalSubject, &local, &admin, "default").unwrap()["status"]["allowed"],
            true
        );
        let e = access_review(&a, AccessReviewKind::LocalSubject, &local, &admin, "other").unwrap_err();
        assert_eq!(e.message, "spec.resourceAttributes.namespace must match namespace: other");
        let both = json!({"spec": {"user": "x", "resourceAttributes": {}, "nonResourceAttributes": {}}});
        assert_eq!(access_review(&a, AccessReviewKind::Subject, &both, &admin, "").unwrap_err().code, 400);
        let path = json!({"spec": {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}});
        assert_eq!(
            access_review(&a, AccessReviewKind::SelfSubject, &path, &admin, "").unwrap()["status"]["allowed"],
            true
        );
    }

    #[test]
    fn rules_reviews_list_what_the_user_may_do() {
        let a = authorizer();
        let jane = UserInfo::new("jane", ["system:authenticated"]);
        let r = self_subject_rules_review(&a, &json!({"spec": {"namespace": "default"}}), &jane).unwrap();
        assert_eq!(
            r["status"]["resourceRules"],
            json!([{"verbs": ["get", "watch", "list"], "apiGroups": [""], "resources": ["pods"]}])
        );
        assert!(self_subject_rules_review(&a, &json!({"spec": {}}), &jane).is_err());
    }
}
