//! Max-in-flight limiting, as kube-apiserver does it with `--max-requests-inflight` and
//! `--max-mutating-requests-inflight` (the `WithMaxInFlightLimit` filter, which API Priority
//! and Fairness replaced as the default; see
//! <https://kubernetes.io/docs/concepts/cluster-administration/flow-control/>).
//!
//! Two pools of seats: read-only requests (GET, HEAD: get, list and non-resource reads) and
//! mutating requests (everything else). A request that finds its pool full is answered at
//! once with `429 TooManyRequests` (a `metav1.Status`, reason `TooManyRequests`,
//! `details.retryAfterSeconds` 1 and a `Retry-After: 1` header), never queued. Exempt, as in
//! Kubernetes: long-running requests (watches and the `exec`, `attach`, `portforward`, `log`
//! and `proxy` subresources) hold no seat, and a client in group `system:masters` is served
//! even when the pool is full. A limit of 0 disables its pool.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use skiff_apimachinery::ApiError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::PeerIdentity;
use crate::metrics::Metrics;

/// kube-apiserver's default `--max-requests-inflight`.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
/// kube-apiserver's default `--max-mutating-requests-inflight`.
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;
/// Seconds a throttled client is asked to wait (kube-apiserver sends 1).
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// The group whose members are never throttled (`user.SystemPrivilegedGroup`).
const SYSTEM_MASTERS: &str = "system:masters";

/// Subresources whose requests are long-running (`BasicLongRunningRequestCheck` in
/// kube-apiserver's server config).
const LONG_RUNNING_SUBRESOURCES: &[&str] = &["attach", "exec", "log", "portforward", "proxy"];

/// The two seat pools; shared by every connection of one server.
pub struct MaxInFlight {
    readonly: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
    metrics: Arc<Metrics>,
}

/// Which pool a request draws from (the `request_kind` label of kube-apiserver's metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// get, list and non-resource reads.
    ReadOnly,
    /// create, update, patch, delete and other writes.
    Mutating,
}

impl RequestKind {
    /// The metric label value (`readOnly` or `mutating`).
    pub fn label(self) -> &'static str {
        match self {
            RequestKind::ReadOnly => "readOnly",
            RequestKind::Mutating => "mutating",
        }
    }
}

impl MaxInFlight {
    /// Pools of `max_readonly` and `max_mutating` seats (0 = unlimited).
    pub fn new(max_readonly: usize, max_mutating: usize, metrics: Arc<Metrics>) -> Self {
        let pool = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Self { readonly: pool(max_readonly), mutating: pool(max_mutating), metrics }
    }

    /// Takes a seat for a request of `kind`: `Ok(None)` when its pool is unlimited,
    /// `Ok(Some(permit))` for a seat held until the permit drops, `Err(PoolFull)` when the pool
    /// is full.
    pub fn try_acquire(&self, kind: RequestKind) -> Result<Option<OwnedSemaphorePermit>, PoolFull> {
        let pool = match kind {
            RequestKind::ReadOnly => &self.readonly,
            RequestKind::Mutating => &self.mutating,
        };
        match pool {
            None => Ok(None),
            Some(s) => s.clone().try_acquire_owned().map(Some).map_err(|_| PoolFull),
        }
    }
}

/// Every seat of a request's pool is taken: the request gets 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolFull;

/// Whether a request is long-running (a watch, or a streaming subresource) from its path and
/// query, as kube-apiserver's request info would classify it.
pub fn is_long_running(method: &Method, path: &str, query: Option<&str>) -> bool {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segs.first() {
        Some(&"api") if segs.len() >= 2 => &segs[2..],
        Some(&"apis") if segs.len() >= 3 => &segs[3..],
        _ => return false,
    };
    if rest.first() == Some(&"watch") {
        return true;
    }
    if *method == Method::GET
        && query.is_some_and(|q| {
            q.split('&').any(|kv| matches!(kv.split_once('='), Some(("watch", "true" | "1"))) || kv == "watch")
        })
    {
        return true;
    }
    // namespaces/{ns}/{resource}/{name}/{subresource} or {resource}/{name}/{subresource}.
    let rest = if rest.first() == Some(&"namespaces") && rest.len() >= 4 { &rest[2..] } else { rest };
    rest.len() >= 3 && LONG_RUNNING_SUBRESOURCES.contains(&rest[2])
}

/// The kind of a request by its method: GET and HEAD are read-only, the rest mutating.
pub fn request_kind(method: &Method) -> RequestKind {
    if *method == Method::GET || *method == Method::HEAD { RequestKind::ReadOnly } else { RequestKind::Mutating }
}

/// The axum middleware: admits, exempts or throttles one request (see the module docs).
pub async fn max_in_flight(State(limits): State<Arc<MaxInFlight>>, req: Request<Body>, next: Next) -> Response {
    if is_long_running(req.method(), req.uri().path(), req.uri().query()) {
        return next.run(req).await;
    }
    let kind = request_kind(req.method());
    match limits.try_acquire(kind) {
        Ok(seat) => {
            let gauge = limits.metrics.inflight_gauge(kind.label());
            gauge.inc();
            let resp = next.run(req).await;
            gauge.dec();
            drop(seat);
            resp
        }
        Err(PoolFull) => {
            let privileged = req
                .extensions()
                .get::<PeerIdentity>()
                .and_then(|p| p.0.as_ref())
                .is_some_and(|(_, groups)| groups.iter().any(|g| g == SYSTEM_MASTERS));
            if privileged {
                return next.run(req).await;
            }
            limits.metrics.observe_dropped(kind.label());
            crate::endpoints::responsewriters::error_response(&ApiError::too_many_requests(
                "Too many requests, please try again later.",
                RETRY_AFTER_SECONDS,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::StatusCode;
    use tokio::sync::Notify;
    use tower::ServiceExt;

    use super::*;

    /// A router behind a limit of one read-only and one mutating seat. A request with the
    /// header `x-hold` waits in the handler until `release` is notified; others are answered
    /// at once with 200.
    fn limited_router(release: Arc<Notify>, metrics: Arc<Metrics>) -> axum::Router {
        let limits = Arc::new(MaxInFlight::new(1, 1, metrics));
        axum::Router::new()
            .fallback(move |req: Request<Body>| {
                let release = release.clone();
                async move {
                    if req.headers().contains_key("x-hold") {
                        release.notified().await;
                    }
                    "done"
                }
            })
            .layer(axum::middleware::from_fn_with_state(limits, max_in_flight))
    }

    fn request(method: Method, uri: &str, groups: Option<&[&str]>) -> Request<Body> {
        let mut req = Request::builder().method(method).uri(uri).body(Body::empty()).unwrap();
        if let Some(groups) = groups {
            let id = PeerIdentity(Some(("user".into(), groups.iter().map(|g| g.to_string()).collect())));
            req.extensions_mut().insert(id);
        }
        req
    }

    /// Sends a request that holds a seat of `kind` until released; returns once it holds it.
    async fn hold_seat(router: &axum::Router, metrics: &Metrics, method: Method, uri: &str, kind: &str) {
        let mut req = request(method, uri, None);
        req.headers_mut().insert("x-hold", axum::http::HeaderValue::from_static("1"));
        let r = router.clone();
        tokio::spawn(async move { r.oneshot(req).await });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while metrics.inflight_gauge(kind).get() < 1 {
            assert!(tokio::time::Instant::now() < deadline, "the holding request never started");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn a_request_beyond_the_read_only_limit_gets_429_with_retry_after() {
        let release = Arc::new(Notify::new());
        let metrics = Arc::new(Metrics::default());
        let router = limited_router(release.clone(), metrics.clone());
        hold_seat(&router, &metrics, Method::GET, "/api/v1/pods", "readOnly").await;

        let resp = router.clone().oneshot(request(Method::GET, "/api/v1/pods", Some(&["dev"]))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers().get("retry-after").unwrap(), "1");
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(status["code"], 429);
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
        assert!(metrics.render().contains("apiserver_dropped_requests_total{request_kind=\"readOnly\"} 1"));
        // A write still has its own seat.
        let resp = router.clone().oneshot(request(Method::POST, "/api/v1/namespaces/a/pods", None)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        release.notify_waiters();
    }

    #[tokio::test]
    async fn a_write_beyond_the_mutating_limit_gets_429() {
        let release = Arc::new(Notify::new());
        let metrics = Arc::new(Metrics::default());
        let router = limited_router(release.clone(), metrics.clone());
        hold_seat(&router, &metrics, Method::POST, "/api/v1/namespaces/a/pods", "mutating").await;
        let resp = router.clone().oneshot(request(Method::DELETE, "/api/v1/namespaces/a/pods/x", None)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        let resp = router.clone().oneshot(request(Method::GET, "/api/v1/namespaces/a/pods/x", None)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        release.notify_waiters();
    }

    #[tokio::test]
    async fn watches_logs_and_system_masters_are_not_throttled() {
        let release = Arc::new(Notify::new());
        let metrics = Arc::new(Metrics::default());
        let router = limited_router(release.clone(), metrics.clone());
        hold_seat(&router, &metrics, Method::GET, "/api/v1/pods", "readOnly").await;
        let refused = router.clone().oneshot(request(Method::GET, "/api/v1/pods", None)).await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let exempt = [
            request(Method::GET, "/api/v1/pods?watch=true", None),
            request(Method::GET, "/apis/apps/v1/watch/namespaces/a/deployments", None),
            request(Method::GET, "/api/v1/namespaces/a/pods/p/log?follow=true", None),
            request(Method::GET, "/api/v1/pods", Some(&["system:authenticated", "system:masters"])),
        ];
        for req in exempt {
            let uri = req.uri().clone();
            let resp = router.clone().oneshot(req).await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK, "{uri}");
        }
        release.notify_waiters();
    }

    #[test]
    fn long_running_requests_are_recognised_by_path_and_query() {
        let get = Method::GET;
        assert!(is_long_running(&get, "/api/v1/pods", Some("watch=1")));
        assert!(is_long_running(&get, "/api/v1/watch/pods", None));
        assert!(is_long_running(&Method::POST, "/api/v1/namespaces/a/pods/p/exec", Some("command=ls")));
        assert!(is_long_running(&get, "/api/v1/nodes/n/proxy/metrics", None));
        assert!(!is_long_running(&get, "/api/v1/namespaces/a/pods/p", None));
        assert!(!is_long_running(&get, "/api/v1/namespaces/log", None));
        assert!(!is_long_running(&get, "/api/v1/pods", Some("watch=false")));
        assert!(!is_long_running(&get, "/metrics", None));
    }
}
