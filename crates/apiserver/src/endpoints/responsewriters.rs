//! The one place responses are rendered (k8s.io/apiserver
//! `pkg/endpoints/handlers/responsewriters`): JSON bodies, `metav1.Status` failures (with
//! `Retry-After`) and successes, and `Warning` headers. Handlers and filters answer through it.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::resources::ResourceDef;

/// A JSON response.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    json_bytes_response(code, serde_json::to_vec(body).unwrap_or_default())
}

/// A response of JSON already serialized.
pub(crate) fn json_bytes_response(code: StatusCode, bytes: Vec<u8>) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(bytes))
        .unwrap_or_default()
}

/// A `metav1.Status` failure response.
pub fn error_response(e: &ApiError) -> Response {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(code, &e.to_status());
    if let Some(s) = e.details.as_ref().and_then(|d| d.retry_after_seconds)
        && let Ok(v) = HeaderValue::from_str(&s.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// Adds each warning as a `Warning: 299 - "<text>"` header, as kube-apiserver sends them.
pub(crate) fn add_warnings(resp: &mut Response, warnings: &[String]) {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append("Warning", v);
        }
    }
}

/// A `metav1.Status` success body for a delete of `name` (`uid` in its details).
pub(crate) fn success_status(def: &ResourceDef, name: &str, uid: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name, "group": def.group, "kind": def.resource, "uid": uid},
    })
}
