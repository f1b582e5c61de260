//! [`ApiError`]: every failure the API answers with, as a Kubernetes `metav1.Status`.
//!
//! Follows the API conventions' "Response Status Kind" section
//! (<https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md#response-status-kind>):
//! an HTTP code, a machine-readable `reason` (`StatusReason`), a human message and optional
//! `details` (name, group, kind, field `causes`). kubectl prints `message`, and for 422 the causes.

use serde_json::{Value, json};

/// One field-level cause of an error (`metav1.StatusCause`), e.g. for 422 Invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `CauseType`, e.g. `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`,
    /// `FieldValueDuplicate`, `FieldValueForbidden`, `FieldValueTooLong`.
    pub reason: String,
    /// Human-readable description.
    pub message: String,
    /// The field path, e.g. `spec.template.metadata.labels`.
    pub field: String,
}

/// A failed API request, rendered as a `Status` body with [`ApiError::code`] as the HTTP code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `StatusReason`: `BadRequest`, `Unauthorized`, `Forbidden`, `NotFound`, `AlreadyExists`,
    /// `Conflict`, `Gone`, `Expired`, `Invalid`, `RequestEntityTooLarge`, `MethodNotAllowed`,
    /// `NotAcceptable`, `UnsupportedMediaType`, `TooManyRequests`, `InternalError`,
    /// `ServiceUnavailable`, `Timeout`.
    pub reason: String,
    /// Human-readable message, in Kubernetes' wording where one exists.
    pub message: String,
    /// `details.group`, `details.kind`, `details.name` when the error is about one object.
    pub details: Option<Details>,
    /// `metadata.continue` of the Status: the token a 410 for an expired continue token offers
    /// to list the rest from the latest revision (etcd3 store's `handleCompactedErrorForPaging`).
    pub continue_token: Option<String>,
}

/// `metav1.StatusDetails`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Details {
    /// Object name.
    pub name: String,
    /// API group ("" for core).
    pub group: String,
    /// Resource (Kubernetes puts the resource, e.g. "pods", in `kind` for most errors).
    pub kind: String,
    /// Field causes (422 Invalid, 400 strict decoding).
    pub causes: Vec<Cause>,
    /// Seconds the client should wait before retrying (429, 503).
    pub retry_after_seconds: Option<u32>,
}

/// `group.resource` as Kubernetes prints it in messages (`pods`, `deployments.apps`).
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") }
}

impl ApiError {
    /// An error with no details.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self { code, reason: reason.to_string(), message: message.into(), details: None, continue_token: None }
    }

    fn with_details(mut self, group: &str, resource: &str, name: &str) -> Self {
        self.details = Some(Details {
            name: name.to_string(),
            group: group.to_string(),
            kind: resource.to_string(),
            ..Default::default()
        });
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden with Kubernetes' wording: `<resource> "<name>" is forbidden: <why>`.
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let what = qualified(group, resource);
        let message = if name.is_empty() {
            format!("{what} is forbidden: {why}")
        } else {
            format!("{what} \"{name}\" is forbidden: {why}")
        };
        Self::new(403, "Forbidden", message).with_details(group, resource, name)
    }

    /// 404 NotFound: `pods "nginx" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", qualified(group, resource)))
            .with_details(group, resource, name)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 409 AlreadyExists: `pods "nginx" already exists`.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualified(group, resource)))
            .with_details(group, resource, name)
    }

    /// 409 Conflict for a stale resourceVersion, in Kubernetes' wording.
    pub fn conflict(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// 410 Expired: "too old resource version" (lists, continue tokens, watches).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 504 Timeout for a read at a resourceVersion the server has not reached yet
    /// (k8s.io/apiserver `storage.NewTooLargeResourceVersionError`): the message says both
    /// revisions, `details.causes` holds the `ResourceVersionTooLarge` cause client-go's
    /// reflector looks for, and `retryAfterSeconds` the given seconds (1 from the watch cache,
    /// 0 — left out — from an exact read of the store).
    pub fn too_large_resource_version(requested: i64, current: i64, retry_after_seconds: u32) -> Self {
        let mut e =
            Self::new(504, "Timeout", format!("Timeout: Too large resource version: {requested}, current: {current}"));
        e.details = Some(Details {
            causes: vec![Cause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            retry_after_seconds: (retry_after_seconds > 0).then_some(retry_after_seconds),
            ..Default::default()
        });
        e
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 422 Invalid with field causes:
    /// `Deployment.apps "web" is invalid: spec.selector: Required value`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let what = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let list: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        let joined = if list.len() == 1 { list[0].clone() } else { format!("[{}]", list.join(", ")) };
        let mut e = Self::new(422, "Invalid", format!("{what} \"{name}\" is invalid: {joined}"));
        e.details = Some(Details {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            causes,
            retry_after_seconds: None,
        });
        e
    }

    /// 429 TooManyRequests.
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        let mut e = Self::new(429, "TooManyRequests", message);
        e.details = Some(Details { retry_after_seconds: Some(retry_after_seconds), ..Default::default() });
        e
    }

    /// 500 InternalError. Never for bad input.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 503 ServiceUnavailable (the store is unreachable).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// The `metav1.Status` JSON body.
    pub fn to_status(&self) -> Value {
        let metadata = match &self.continue_token {
            Some(c) => json!({"continue": c}),
            None => json!({}),
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": metadata,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty() {
            // StatusReasonUnknown is "", which metav1.Status leaves out.
            if let Some(m) = status.as_object_mut() {
                m.remove("reason");
            }
        }
        if let Some(d) = &self.details {
            let mut details = serde_json::Map::new();
            if !d.name.is_empty() {
                details.insert("name".into(), d.name.clone().into());
            }
            if !d.group.is_empty() {
                details.insert("group".into(), d.group.clone().into());
            }
            if !d.kind.is_empty() {
                details.insert("kind".into(), d.kind.clone().into());
            }
            if !d.causes.is_empty() {
                let causes: Vec<Value> = d
                    .causes
                    .iter()
                    .map(|c| {
                        // metav1.StatusCause's fields are all omitempty.
                        let mut cause = serde_json::Map::new();
                        for (k, v) in [("reason", &c.reason), ("message", &c.message), ("field", &c.field)] {
                            if !v.is_empty() {
                                cause.insert(k.into(), v.clone().into());
                            }
                        }
                        Value::Object(cause)
                    })
                    .collect();
                details.insert("causes".into(), causes.into());
            }
            if let Some(s) = d.retry_after_seconds {
                details.insert("retryAfterSeconds".into(), s.into());
            }
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_uses_kubernetes_wording_and_details() {
        let s = ApiError::not_found("apps", "deployments", "web").to_status();
        assert_eq!(s["message"], "deployments.apps \"web\" not found");
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"]["kind"], "deployments");
    }

    #[test]
    fn a_too_large_resource_version_is_a_timeout_with_the_resource_version_too_large_cause() {
        let s = ApiError::too_large_resource_version(120, 100, 1).to_status();
        assert_eq!(s["code"], 504);
        assert_eq!(s["reason"], "Timeout");
        assert_eq!(s["message"], "Timeout: Too large resource version: 120, current: 100");
        assert_eq!(
            s["details"],
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1})
        );
        let exact = ApiError::too_large_resource_version(120, 100, 0).to_status();
        assert!(exact["details"].get("retryAfterSeconds").is_none(), "{exact}");
    }

    #[test]
    fn a_status_carries_the_continue_token_of_an_expired_list_in_its_metadata() {
        let mut e = ApiError::gone("too old");
        assert_eq!(e.to_status()["metadata"], json!({}));
        e.continue_token = Some("tok".into());
        assert_eq!(e.to_status()["metadata"], json!({"continue": "tok"}));
    }

    #[test]
    fn invalid_lists_every_cause_in_the_message() {
        let causes = vec![
            Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "spec.selector".into(),
            },
            Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: \"A\"".into(),
                field: "metadata.name".into(),
            },
        ];
        let s = ApiError::invalid("apps", "Deployment", "web", causes).to_status();
        assert_eq!(
            s["message"],
            "Deployment.apps \"web\" is invalid: [spec.selector: Required value, metadata.name: Invalid value: \"A\"]"
        );
        assert_eq!(s["details"]["causes"].as_array().unwrap().len(), 2);
    }
}
