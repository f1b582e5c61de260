//! Authorization of the kubelet endpoint's stats and metrics paths, as the kubelet's
//! `--authorization-mode=Webhook` does it
//! (<https://kubernetes.io/docs/reference/access-authn-authz/kubelet-authn-authz/>): the caller
//! (the client certificate's CN as user, its Os as groups) must be allowed the request's verb
//! on `nodes/stats` (`/stats/*`) or `nodes/metrics` (`/metrics/*`) of this node, asked of the
//! API server with a SubjectAccessReview. Decisions are cached as the kubelet caches them:
//! allowed for 5 minutes, denied for 30 seconds. Other paths (logs, exec, port-forward) keep
//! the certificate check alone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;

/// Who is calling: the verified client certificate's subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Caller {
    /// The certificate's CN (`system:anonymous` without a certificate).
    pub user: String,
    /// The certificate's O values.
    pub groups: Vec<String>,
}

impl Caller {
    /// The subject of a DER client certificate; `None` when it does not parse.
    pub fn from_certificate(der: &[u8]) -> Option<Caller> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let user = subject.iter_common_name().next()?.as_str().ok()?.to_string();
        let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_string)).collect();
        Some(Caller { user, groups })
    }

    /// The caller without a certificate.
    pub fn anonymous() -> Caller {
        Caller { user: "system:anonymous".into(), groups: vec!["system:unauthenticated".into()] }
    }
}

/// The attributes a request is authorized on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeAttributes {
    /// Kubernetes verb (`get`, `create`, …).
    pub verb: &'static str,
    /// `stats` or `metrics`.
    pub subresource: &'static str,
    /// This node's name.
    pub node: String,
}

/// Decides whether a caller may do something to this node.
#[async_trait::async_trait]
pub trait NodeAuthorizer: Send + Sync + 'static {
    /// `Ok(true)` when allowed.
    ///
    /// # Errors
    /// When the decision could not be made (the API server is unreachable).
    async fn allowed(&self, caller: &Caller, attrs: &NodeAttributes) -> Result<bool, String>;
}

/// Asks the API server with a SubjectAccessReview.
#[async_trait::async_trait]
impl NodeAuthorizer for kube::Client {
    async fn allowed(&self, caller: &Caller, attrs: &NodeAttributes) -> Result<bool, String> {
        use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.user.clone()),
                groups: Some(caller.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(attrs.verb.to_string()),
                    resource: Some("nodes".into()),
                    subresource: Some(attrs.subresource.to_string()),
                    name: Some(attrs.node.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: kube::Api<SubjectAccessReview> = kube::Api::all(self.clone());
        let answer = api.create(&Default::default(), &review).await.map_err(|e| e.to_string())?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);

/// The authorizer, this node's name and the decision cache.
pub struct Authz {
    authorizer: Arc<dyn NodeAuthorizer>,
    node: String,
    cache: Mutex<HashMap<(Caller, NodeAttributes), (bool, Instant)>>,
}

impl Authz {
    /// Authorization of node `node`'s endpoint by `authorizer`.
    pub fn new(authorizer: Arc<dyn NodeAuthorizer>, node: String) -> Arc<Self> {
        Arc::new(Authz { authorizer, node, cache: Mutex::default() })
    }

    async fn decide(&self, caller: &Caller, attrs: NodeAttributes) -> Result<bool, String> {
        let key = (caller.clone(), attrs);
        if let Some((allowed, at)) = self.cache.lock().get(&key).copied() {
            let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
            if at.elapsed() < ttl {
                return Ok(allowed);
            }
        }
        let allowed = self.authorizer.allowed(caller, &key.1).await?;
        let mut cache = self.cache.lock();
        if cache.len() > 1024 {
            cache.clear();
        }
        cache.insert(key, (allowed, Instant::now()));
        Ok(allowed)
    }
}

/// The subresource a path is authorized on, if it is one of the authorized paths.
pub fn subresource_of(path: &str) -> Option<&'static str> {
    if path == "/stats" || path.starts_with("/stats/") {
        Some("stats")
    } else if path == "/metrics" || path.starts_with("/metrics/") {
        Some("metrics")
    } else {
        None
    }
}

fn verb_of(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    }
}

/// The middleware: 403 `Forbidden (user=…, verb=…, resource=nodes, subresource=…)` unless the
/// caller (a [`Caller`] request extension; anonymous without one) is allowed.
pub async fn authorize(State(authz): State<Arc<Authz>>, req: Request<Body>, next: Next) -> Response {
    let Some(subresource) = subresource_of(req.uri().path()) else { return next.run(req).await };
    let caller = req.extensions().get::<Caller>().cloned().unwrap_or_else(Caller::anonymous);
    let attrs = NodeAttributes { verb: verb_of(req.method()), subresource, node: authz.node.clone() };
    let verb = attrs.verb;
    match authz.decide(&caller, attrs).await {
        Ok(true) => next.run(req).await,
        Ok(false) => (
            StatusCode::FORBIDDEN,
            format!("Forbidden (user={}, verb={verb}, resource=nodes, subresource={subresource})", caller.user),
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("Authorization error (user={}): {e}", caller.user))
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tower::ServiceExt;

    use super::*;

    struct OnlyMasters(AtomicUsize);

    #[async_trait::async_trait]
    impl NodeAuthorizer for OnlyMasters {
        async fn allowed(&self, caller: &Caller, attrs: &NodeAttributes) -> Result<bool, String> {
            self.0.fetch_add(1, Ordering::SeqCst);
            assert_eq!(attrs.node, "n1");
            Ok(caller.groups.iter().any(|g| g == "system:masters"))
        }
    }

    fn app(authorizer: Arc<OnlyMasters>) -> axum::Router {
        axum::Router::new()
            .route("/metrics/resource", axum::routing::get(|| async { "metrics" }))
            .route("/stats/summary", axum::routing::get(|| async { "stats" }))
            .route("/containerLogs/a/b/c", axum::routing::get(|| async { "logs" }))
            .layer(axum::middleware::from_fn_with_state(Authz::new(authorizer, "n1".into()), authorize))
    }

    async fn get(app: &axum::Router, path: &str, caller: Option<Caller>) -> (StatusCode, String) {
        let mut req = Request::get(path).body(Body::empty()).unwrap();
        if let Some(c) = caller {
            req.extensions_mut().insert(c);
        }
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn stats_and_metrics_need_the_nodes_subresource_and_other_paths_do_not() {
        let authorizer = Arc::new(OnlyMasters(AtomicUsize::new(0)));
        let app = app(authorizer.clone());
        let admin = Caller { user: "kube-apiserver-kubelet-client".into(), groups: vec!["system:masters".into()] };
        let jane = Caller { user: "jane".into(), groups: vec![] };
        assert_eq!(get(&app, "/metrics/resource", Some(admin.clone())).await, (StatusCode::OK, "metrics".into()));
        assert_eq!(get(&app, "/stats/summary", Some(admin.clone())).await.0, StatusCode::OK);
        assert_eq!(
            get(&app, "/metrics/resource", Some(jane.clone())).await,
            (StatusCode::FORBIDDEN, "Forbidden (user=jane, verb=get, resource=nodes, subresource=metrics)".into())
        );
        assert_eq!(
            get(&app, "/stats/summary", None).await.1,
            "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource=stats)"
        );
        assert_eq!(get(&app, "/containerLogs/a/b/c", Some(jane)).await.0, StatusCode::OK);
        // Cached: the admin's second metrics read asked nothing.
        let asked = authorizer.0.load(Ordering::SeqCst);
        get(&app, "/metrics/resource", Some(admin)).await;
        assert_eq!(authorizer.0.load(Ordering::SeqCst), asked);
    }

    #[test]
    fn paths_map_to_their_subresources() {
        assert_eq!(subresource_of("/stats/summary"), Some("stats"));
        assert_eq!(subresource_of("/metrics/resource"), Some("metrics"));
        assert_eq!(subresource_of("/metrics"), Some("metrics"));
        assert_eq!(subresource_of("/metricsx"), None);
        assert_eq!(subresource_of("/exec/a/b/c"), None);
    }
}
