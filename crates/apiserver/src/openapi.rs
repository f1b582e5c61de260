//! OpenAPI documents: `/openapi/v2` and `/openapi/v3` (not yet generated from the types).

use axum::http::HeaderMap;
use axum::response::Response;
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::rest::error_response;

/// Serves `/openapi/...`.
pub fn handle(_state: &AppState, _rest: &[&str], _headers: &HeaderMap) -> Response {
    error_response(&ApiError::new(404, "NotFound", "the server could not find the requested resource"))
}
