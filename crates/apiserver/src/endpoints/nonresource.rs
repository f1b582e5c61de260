//! Non-resource endpoints: `/version`, `/healthz`, `/livez`, `/readyz`, `/metrics`, discovery
//! and OpenAPI.

use axum::body::Body;
use axum::http::{StatusCode, header, request::Parts};
use axum::response::Response;
use serde_json::json;
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::endpoints::discovery::discovery_response;
use crate::endpoints::request::Query;
use crate::endpoints::responsewriters::{error_response, json_response};

/// The Kubernetes version skiff implements.
pub const GIT_VERSION: &str = "v1.33.0+skiff";

/// `version.Info` (<https://pkg.go.dev/k8s.io/apimachinery/pkg/version#Info>), every field set.
pub fn version_info() -> serde_json::Value {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": GIT_VERSION,
        "gitCommit": option_env!("SKIFF_GIT_COMMIT").unwrap_or("0000000000000000000000000000000000000000"),
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": format!("skiff {} (rust)", env!("CARGO_PKG_VERSION")),
        "compiler": "rustc",
        "platform": format!("{}/{arch}", std::env::consts::OS),
    })
}

fn text(code: StatusCode, body: String) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("X-Content-Type-Options", "nosniff")
        .body(Body::from(body))
        .unwrap_or_default()
}

async fn health(state: &AppState, path: &str, q: &Query) -> Response {
    let mut checks: Vec<(&str, bool)> = vec![("ping", true)];
    if path.starts_with("/readyz") || path.starts_with("/healthz") {
        let store_ok = state.objects.store.current_revision().await.is_ok();
        checks.push(("etcd", store_ok));
    }
    if path.starts_with("/readyz") {
        checks.push(("informer-sync", state.caches.values().all(|c| c.is_ready())));
        checks.push(("autoregister-completion", state.aggregator.is_synced()));
        checks.push(("shutdown", !*state.shutdown.borrow()));
    }
    let ok = checks.iter().all(|(_, ok)| *ok);
    let name = path.trim_start_matches('/').split('/').next().unwrap_or("healthz");
    if q.contains_key("verbose") || !ok {
        let mut out: String = checks
            .iter()
            .map(|(n, ok)| format!("[{}]{n} {}\n", if *ok { "+" } else { "-" }, if *ok { "ok" } else { "failed" }))
            .collect();
        out.push_str(&format!("{name} check {}\n", if ok { "passed" } else { "failed" }));
        return text(if ok { StatusCode::OK } else { StatusCode::INTERNAL_SERVER_ERROR }, out);
    }
    text(StatusCode::OK, "ok".into())
}

/// Serves a non-resource path.
pub async fn handle(state: &AppState, parts: &Parts, path: &str, q: &Query) -> Response {
    let trimmed = path.trim_end_matches('/');
    let segs: Vec<&str> = trimmed.split('/').filter(|s| !s.is_empty()).collect();
    if parts.method != axum::http::Method::GET && parts.method != axum::http::Method::HEAD {
        return error_response(&ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    match segs.as_slice() {
        ["version"] => json_response(StatusCode::OK, &version_info()),
        ["healthz", ..] | ["livez", ..] | ["readyz", ..] => health(state, path, q).await,
        ["metrics"] => Response::builder()
            .header(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")
            .body(Body::from(state.metrics.render()))
            .unwrap_or_default(),
        ["api"] => discovery_response(state, &parts.headers, true),
        ["apis"] => discovery_response(state, &parts.headers, false),
        ["api", v] => match crate::endpoints::discovery::resource_list(&state.registry, "", v) {
            Some(l) => json_response(StatusCode::OK, &l),
            None => not_found(),
        },
        ["apis", g] => match crate::endpoints::discovery::api_group(&state.registry, g)
            .or_else(|| crate::aggregator::legacy_group(state, g))
        {
            Some(l) => json_response(StatusCode::OK, &l),
            None => not_found(),
        },
        ["apis", g, v] => match crate::endpoints::discovery::resource_list(&state.registry, g, v) {
            Some(l) => json_response(StatusCode::OK, &l),
            None => not_found(),
        },
        ["openapi", ..] => crate::endpoints::openapi::handle(state, &segs[1..], &parts.headers),
        [] => json_response(
            StatusCode::OK,
            &json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/metrics", "/openapi/v2", "/openapi/v3", "/readyz", "/version"]}),
        ),
        _ => not_found(),
    }
}

fn not_found() -> Response {
    error_response(&ApiError::new(404, "NotFound", "the server could not find the requested resource"))
}
