//! The handler chain every API request goes through, in kube-apiserver's order
//! (`DefaultBuildHandlerChain` in k8s.io/apiserver `pkg/server/config.go`; max-in-flight runs
//! before it as a router layer, see [`crate::filters::flowcontrol`]): authentication
//! ([`crate::filters::authentication::authenticate`]), request info
//! ([`crate::endpoints::request::parse_resource_path`]), authorization
//! ([`crate::filters::authorization::authorize`]), then the resource handlers
//! ([`crate::endpoints::handlers::dispatch`]) or the non-resource endpoints, and the request
//! metrics, with the audit event ([`crate::audit`]) recorded around them.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;

use crate::AppState;
use crate::audit::Pending;
use crate::endpoints::handlers::dispatch;
use crate::endpoints::request::{parse_query, parse_resource_path};
use crate::endpoints::responsewriters::error_response;
use crate::filters::{authentication, authorization};

/// The entry point for every request: authentication, request info, authorization, the
/// handlers, metrics.
pub async fn handle(state: Arc<AppState>, req: Request<Body>) -> Response {
    let start = Instant::now();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    // The audit event follows the request through the chain (kube-apiserver's WithAudit sits
    // right after authentication; failed authentication is audited too).
    let mut audit = Pending::start(state.audit.as_ref(), &parts);
    let user = match authentication::authenticate(&state, &parts, &path) {
        Ok(u) => u,
        Err(e) => return audit.finish(error_response(&e)).await,
    };
    let q = match parse_query(&parts.uri) {
        Ok(q) => q,
        Err(e) => {
            audit.identify(user.as_ref(), None, &path);
            return audit.finish(error_response(&e)).await;
        }
    };
    // A group-version an aggregated server claims goes to it, authorized from the path alone
    // (kube-aggregator's proxy handler sits in front of the local handlers); so does its
    // OpenAPI v3 document.
    let aggregated = crate::aggregator::remote_for_path(&state, &path)
        .or_else(|| crate::aggregator::remote_for_openapi_path(&state, &path));
    if let Some(api_service) = aggregated {
        let Some(user) = &user else { return error_response(&skiff_apimachinery::ApiError::unauthorized()) };
        let attrs = crate::aggregator::proxy::attributes(&parts.method, &path, &q);
        if let Err(e) = state.authorizer.authorize(user, &attrs) {
            return error_response(&e);
        }
        return crate::aggregator::proxy::serve(&state, &parts, body, &api_service, user).await;
    }
    let info = match parse_resource_path(&state, &parts.method, &path, &q) {
        Ok(i) => i,
        Err(e) => {
            audit.identify(user.as_ref(), None, &path);
            return audit.finish(error_response(&e)).await;
        }
    };
    audit.identify(user.as_ref(), info.as_ref(), &path);
    if let Some(user) = &user
        && let Err(e) = authorization::authorize(&state, user, &parts.method, &path, &q, info.as_ref())
    {
        audit.authorized(false);
        return audit.finish(error_response(&e)).await;
    }
    audit.authorized(true);
    let Some(info) = info else {
        let resp = crate::endpoints::nonresource::handle(&state, &parts, &path, &q).await;
        return audit.finish(resp).await;
    };
    let body = audit.capture_request(body, &parts.headers).await;
    let verb = info.verb;
    let resp = match dispatch(&state, &parts, body, &q, &info, user).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    let metric_verb = match verb {
        "get" => "GET",
        "list" => "LIST",
        "watch" => "WATCH",
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" => "DELETE",
        _ => "DELETECOLLECTION",
    };
    let secs = if verb == "watch" { None } else { Some(start.elapsed().as_secs_f64()) };
    state.metrics.observe_request(
        metric_verb,
        info.def.group,
        info.def.resource,
        &info.subresource,
        resp.status().as_u16(),
        secs,
    );
    // kube-apiserver's httplog line (its `-v=3`/`4` request detail); `skiff -v 4` shows it.
    tracing::debug!(
        verb = metric_verb,
        uri = %parts.uri,
        status = resp.status().as_u16(),
        latency_us = start.elapsed().as_micros() as u64,
        "HTTP"
    );
    audit.finish(resp).await
}
