//! Adapters from the API server's seams to `skiff-auth`: RBAC authorization
//! (<https://kubernetes.io/docs/reference/access-authn-authz/rbac/>), the access-review virtual resources (`kubectl auth can-i`, `kubectl auth
//! whoami`), the bootstrap policy, and the task that keeps the RBAC snapshot in step with the
//! watch caches of roles, rolebindings, clusterroles and clusterrolebindings.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use skiff_apimachinery::ApiError;
use skiff_auth::UserInfo;
use skiff_auth::rbac::reviews::{self, AccessReviewKind};
use skiff_auth::rbac::{self, RbacAuthorizer, RbacKind};

use crate::admission::chain::ChainAdmission;
use crate::auth::{Attributes, Authenticator, Authorizer, RequestUser};
use crate::endpoints::request::{Query, RequestInfo, single_name_selector};
use crate::registry::virtual_resources::{VirtualHandler, VirtualRequest, VirtualResource};
use crate::storage::watchcache::{EventKind, WatchCache};
use crate::{AppState, StateSlot};

/// The RBAC storage segments (`ResourceDef::storage`) and their kinds.
const RBAC_RESOURCES: [(&str, RbacKind); 4] = [
    ("roles", RbacKind::Role),
    ("rolebindings", RbacKind::RoleBinding),
    ("clusterroles", RbacKind::ClusterRole),
    ("clusterrolebindings", RbacKind::ClusterRoleBinding),
];

pub(crate) fn user_info(user: &RequestUser) -> UserInfo {
    UserInfo::new(user.name.clone(), user.groups.iter().cloned())
}

/// [`Authorizer`] backed by a [`RbacAuthorizer`] snapshot; a denial is 403 Forbidden in
/// kube-apiserver's wording (`pods "x" is forbidden: User "jane" cannot delete resource "pods"
/// in API group "" in the namespace "default"`).
pub struct RbacAdapter {
    /// The snapshot.
    pub rbac: Arc<RbacAuthorizer>,
}

impl Authorizer for RbacAdapter {
    fn authorize(&self, user: &RequestUser, attrs: &Attributes) -> Result<(), ApiError> {
        let info = user_info(user);
        let a = if attrs.resource_request {
            rbac::Attributes::resource(&info, &attrs.verb, &attrs.group, &attrs.resource, &attrs.namespace, &attrs.name)
                .with_subresource(&attrs.subresource)
        } else {
            rbac::Attributes::non_resource(&info, &attrs.verb, &attrs.path)
        };
        // `check` renders nothing on the allow path (no "allowed by" reason is built).
        self.rbac.check_forbidden(&a)
    }
}

/// Settings of the security pipeline ([`crate::Config::security`]).
#[derive(Debug, Clone)]
pub struct SecurityOptions {
    /// Authentication: token file, anonymous access, service-account tokens.
    pub authn: crate::filters::authentication::AuthnOptions,
    /// Run the built-in admission plugins ([`crate::admission::chain`]) unless
    /// [`crate::Config::admission`] is set.
    pub admission_plugins: bool,
    /// `--authorization-mode`.
    pub authorization_mode: AuthorizationMode,
    /// The admission plugins that run (by kube-apiserver's names), from
    /// `--enable-admission-plugins`/`--disable-admission-plugins`
    /// ([`crate::admission::chain::enabled_plugins`]); default: all of skiff's plugins.
    pub enabled_admission_plugins: std::collections::BTreeSet<&'static str>,
    /// `--default-not-ready-toleration-seconds`: the DefaultTolerationSeconds plugin's
    /// `tolerationSeconds` for `node.kubernetes.io/not-ready:NoExecute`.
    pub default_not_ready_toleration_seconds: i64,
    /// `--default-unreachable-toleration-seconds`: the DefaultTolerationSeconds plugin's
    /// `tolerationSeconds` for `node.kubernetes.io/unreachable:NoExecute`.
    pub default_unreachable_toleration_seconds: i64,
}

/// kube-apiserver's default for both toleration-seconds flags (300 s).
pub const DEFAULT_TOLERATION_SECONDS: i64 =
    skiff_admission::plugins::default_toleration_seconds::DEFAULT_TOLERATION_SECONDS;

impl Default for SecurityOptions {
    fn default() -> Self {
        Self {
            authn: crate::filters::authentication::AuthnOptions::default(),
            admission_plugins: true,
            authorization_mode: AuthorizationMode::NodeRbac,
            enabled_admission_plugins: crate::admission::chain::PLUGINS.iter().copied().collect(),
            default_not_ready_toleration_seconds: DEFAULT_TOLERATION_SECONDS,
            default_unreachable_toleration_seconds: DEFAULT_TOLERATION_SECONDS,
        }
    }
}

/// kube-apiserver's `--authorization-mode`
/// (<https://kubernetes.io/docs/reference/access-authn-authz/authorization/#authorization-modules>):
/// the authorizers a request is put to in order, the first to allow winning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthorizationMode {
    /// `Node,RBAC` (skiff's default, as kubeadm's): the Node authorizer
    /// ([`crate::filters::node_authz`]) decides for kubelets (`system:node:<name>`), limited to their own
    /// Node, Lease and pods and the objects those pods use; RBAC decides the rest.
    #[default]
    NodeRbac,
    /// `RBAC` alone: nodes get only what RBAC binds to them (by default nothing: the
    /// `system:node` ClusterRoleBinding has no subjects, as in Kubernetes).
    Rbac,
    /// `AlwaysAllow`: every authenticated request is allowed (impersonation, escalation and the
    /// access reviews included) — for benchmarks and single-user setups only.
    AlwaysAllow,
}

impl AuthorizationMode {
    /// Parses the flag's comma-separated list (`RBAC`, `Node,RBAC`, `AlwaysAllow`, …). Any list
    /// containing `AlwaysAllow` allows everything (in Kubernetes a request no earlier authorizer
    /// allows reaches it).
    ///
    /// # Errors
    /// An empty list, a mode skiff does not implement (`ABAC`, `Webhook`, `AlwaysDeny`), or
    /// `Node` without `RBAC`.
    pub fn parse(modes: &[String]) -> Result<Self, String> {
        let modes: Vec<&str> =
            modes.iter().flat_map(|m| m.split(',')).map(str::trim).filter(|m| !m.is_empty()).collect();
        if modes.is_empty() {
            return Err("--authorization-mode: at least one mode is required".into());
        }
        for m in &modes {
            if !matches!(*m, "RBAC" | "Node" | "AlwaysAllow") {
                return Err(format!(
                    "--authorization-mode: unsupported mode {m:?} (skiff supports RBAC, Node (with RBAC) and AlwaysAllow)"
                ));
            }
        }
        if modes.contains(&"AlwaysAllow") {
            return Ok(Self::AlwaysAllow);
        }
        if !modes.contains(&"RBAC") {
            return Err("--authorization-mode: Node requires RBAC (skiff has no mode that decides the requests the Node authorizer leaves)".into());
        }
        Ok(if modes.contains(&"Node") { Self::NodeRbac } else { Self::Rbac })
    }
}

/// What [`install`] set up; [`Installed::start`] runs it once the server state exists.
pub struct Installed {
    rbac: Arc<RbacAuthorizer>,
    slot: StateSlot,
    admission: Option<Arc<ChainAdmission>>,
    node: Option<Arc<skiff_auth::node::graph::NodeGraph>>,
}

/// Installs the security pipeline into `config` (when `config.rbac` is on): authentication
/// (client certificates, then `--token-auth-file` tokens and service-account tokens, then
/// anonymous as `config.security.authn` says; a preset `config.authenticator` is kept instead),
/// impersonation, RBAC authorization, the access reviews, TokenRequest/TokenReview, and the
/// admission chain. Adds the resources admission needs to `registry` when missing.
///
/// # Errors
/// An unreadable token file or service-account key.
pub fn install(config: &mut crate::Config) -> anyhow::Result<Installed> {
    let rbac = Arc::new(RbacAuthorizer::new());
    let slot = StateSlot::default();
    let inner: Arc<dyn Authenticator> = match config.authenticator.take() {
        Some(a) => a,
        None => {
            let t = crate::filters::authentication::setup(&config.security.authn, &config.data_dir.join("tls"), &slot)?;
            config.virtual_resources.extend(t.resources);
            t.authenticator
        }
    };
    let always_allow = config.security.authorization_mode == AuthorizationMode::AlwaysAllow;
    let node_mode = config.security.authorization_mode == AuthorizationMode::NodeRbac;
    // One pod→node graph for the Node authorizer and NodeRestriction (fed in `start`).
    let graph = Arc::new(skiff_auth::node::graph::NodeGraph::new());
    // What impersonation checks and access reviews ask: the whole `--authorization-mode`, so
    // `kubectl auth can-i` as a node answers as the Node authorizer decides.
    let authorizer: Arc<dyn rbac::Authorizer> = if always_allow {
        Arc::new(rbac::AlwaysAllow)
    } else if node_mode {
        Arc::new(skiff_auth::node::authorizer::Union {
            first: Arc::new(skiff_auth::node::authorizer::NodeAuthorizer::new(graph.clone())),
            second: rbac.clone(),
        })
    } else {
        rbac.clone()
    };
    config.authenticator = Some(Arc::new(crate::filters::impersonation::ImpersonatingAuthenticator {
        inner,
        authorizer: authorizer.clone(),
    }));
    config.authorizer = Some(if always_allow {
        Arc::new(crate::auth::AlwaysAllow)
    } else {
        Arc::new(RbacAdapter { rbac: rbac.clone() })
    });
    config.virtual_resources.extend(review_resources(&rbac, authorizer));
    let mut admission = None;
    if config.admission.is_none() && config.security.admission_plugins {
        // With AlwaysAllow every `escalate`/`bind` check passes, so RBAC's escalation check
        // is left out.
        let escalation = (!always_allow).then(|| rbac.clone());
        let enabled = &config.security.enabled_admission_plugins;
        let tolerations = skiff_admission::plugins::default_toleration_seconds::DefaultTolerationSeconds {
            not_ready_seconds: config.security.default_not_ready_toleration_seconds,
            unreachable_seconds: config.security.default_unreachable_toleration_seconds,
        };
        let chain = Arc::new(ChainAdmission::new(slot.clone(), escalation, enabled, tolerations));
        config.admission = Some(chain.clone());
        admission = Some(chain);
    }
    // Node authorization and NodeRestriction wrap what is configured above.
    let node = crate::filters::node_authz::install(
        config,
        graph,
        node_mode,
        config.security.enabled_admission_plugins.contains(crate::filters::node_authz::NODE_RESTRICTION),
    );
    Ok(Installed { rbac, slot, admission, node })
}

impl Installed {
    /// Connects the handlers to `state`, creates the bootstrap policy (and, with admission, the
    /// system PriorityClasses and default ServiceAccounts), and starts the tasks that follow the
    /// watch caches: the RBAC snapshot, the Node authorizer's graph and the webhook
    /// configurations. (ClusterRole aggregation, quota status and `kube-root-ca.crt` are
    /// kube-controller-manager's controllers, in `skiff-controllers`.)
    ///
    /// # Errors
    /// A bootstrap object cannot be created.
    pub async fn start(self, state: &Arc<crate::AppState>) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
        self.slot.set(state);
        let mut tasks = vec![tokio::spawn(feed(self.rbac.clone(), state.caches.clone()))];
        bootstrap_policy(state).await?;
        tasks.extend(self.node.map(|graph| tokio::spawn(crate::filters::node_authz::feed(graph, state.clone()))));
        if let Some(chain) = self.admission {
            crate::admission::chain::bootstrap(state).await?;
            tasks.push(tokio::spawn(crate::admission::chain::feed_webhooks(chain.webhooks().clone(), state.clone())));
            tasks.push(tokio::spawn(crate::admission::chain::feed_policies(chain.policies().clone(), state.clone())));
        }
        Ok(tasks)
    }
}

#[derive(Clone, Copy)]
enum Review {
    Access(AccessReviewKind),
    Rules,
    SelfSubject,
}

struct ReviewHandler {
    rbac: Arc<RbacAuthorizer>,
    authorizer: Arc<dyn rbac::Authorizer>,
    review: Review,
}

#[async_trait]
impl VirtualHandler for ReviewHandler {
    async fn create(&self, req: &VirtualRequest<'_>, body: Value) -> Result<Value, ApiError> {
        let user = req.user.map(user_info).unwrap_or_else(UserInfo::anonymous);
        match self.review {
            Review::Access(kind) => reviews::access_review(self.authorizer.as_ref(), kind, &body, &user, req.namespace),
            Review::Rules => reviews::self_subject_rules_review(&self.rbac, &body, &user),
            Review::SelfSubject => Ok(skiff_auth::authn::self_subject_review(&user)),
        }
    }
}

/// The access-review virtual resources answered from `rbac`: selfsubjectaccessreviews,
/// subjectaccessreviews, localsubjectaccessreviews, selfsubjectrulesreviews
/// (authorization.k8s.io/v1) and selfsubjectreviews (authentication.k8s.io/v1). Access reviews
/// ask `authorizer` (the RBAC snapshot itself, or AlwaysAllow); rules reviews list RBAC rules.
pub fn review_resources(rbac: &Arc<RbacAuthorizer>, authorizer: Arc<dyn rbac::Authorizer>) -> Vec<VirtualResource> {
    crate::registry::virtual_resources::standard_defs()
        .into_iter()
        .filter_map(|def| {
            let review = match def.resource {
                "selfsubjectaccessreviews" => Review::Access(AccessReviewKind::SelfSubject),
                "subjectaccessreviews" => Review::Access(AccessReviewKind::Subject),
                "localsubjectaccessreviews" => Review::Access(AccessReviewKind::LocalSubject),
                "selfsubjectrulesreviews" => Review::Rules,
                "selfsubjectreviews" => Review::SelfSubject,
                _ => return None,
            };
            Some(VirtualResource {
                def,
                subresource: None,
                handler: Arc::new(ReviewHandler { rbac: rbac.clone(), authorizer: authorizer.clone(), review }),
            })
        })
        .collect()
}

/// Creates the bootstrap ClusterRoles and ClusterRoleBindings that do not exist yet
/// (existing ones are left as the cluster admin changed them).
///
/// # Errors
/// A create that fails other than with 409 AlreadyExists.
pub async fn bootstrap_policy(state: &crate::AppState) -> anyhow::Result<()> {
    for obj in rbac::bootstrap::bootstrap_policy().to_json_objects() {
        let resource = if obj["kind"] == "ClusterRole" { "clusterroles" } else { "clusterrolebindings" };
        let Some(def) = state.registry.get(rbac::RBAC_GROUP, "v1", resource).cloned() else {
            anyhow::bail!("{resource} are not registered");
        };
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        match state.objects.create(&def, "", obj, None, &crate::registry::store::WriteOptions::default()).await {
            Ok(_) => tracing::debug!(%resource, %name, "created bootstrap RBAC object"),
            Err(e) if e.code == 409 => {}
            Err(e) => anyhow::bail!("creating {resource} {name}: {e}"),
        }
    }
    Ok(())
}

/// Keeps `rbac` equal to the RBAC objects in the watch caches: a full load, then every event;
/// reloads when a subscription lags or a cache resets. Runs until the caches close.
pub async fn feed(rbac: Arc<RbacAuthorizer>, caches: HashMap<String, Arc<WatchCache>>) {
    let caches: Vec<(Arc<WatchCache>, RbacKind)> =
        RBAC_RESOURCES.iter().filter_map(|(seg, kind)| caches.get(*seg).map(|c| (c.clone(), *kind))).collect();
    loop {
        while !caches.iter().all(|(c, _)| c.is_ready()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Option<(RbacKind, EventKind, Arc<Value>)>>(256);
        let mut objects = Vec::new();
        let mut pumps = Vec::new();
        for (cache, kind) in &caches {
            let snap = cache.snapshot(cache.prefix());
            objects.extend(snap.objects.iter().map(|o| (*kind, o.clone())));
            pumps.push(tokio::spawn(snap.subscription.forward_events(*kind, tx.clone())));
        }
        drop(tx);
        // `replace` dispatches on `kind`, which stored objects may lack: tag them.
        let tagged: Vec<Value> = objects
            .iter()
            .map(|(kind, o)| {
                let mut o = (**o).clone();
                o["kind"] = kind_name(*kind).into();
                o
            })
            .collect();
        if let Err(e) = rbac.replace(tagged.iter().filter(|o| rbac::RbacObject::from_value(o).is_ok())) {
            tracing::warn!(error = %e, "loading the RBAC snapshot");
        }
        let mut reload = false;
        while let Some(msg) = rx.recv().await {
            let Some((kind, ev, obj)) = msg else {
                reload = true;
                break;
            };
            match ev {
                EventKind::Added | EventKind::Modified => match rbac::RbacObject::from_value_as(kind, &obj) {
                    Ok(o) => rbac.apply_object(o),
                    Err(e) => tracing::warn!(error = %e, "ignoring an undecodable RBAC object"),
                },
                EventKind::Deleted => {
                    let meta = &obj["metadata"];
                    let ns = meta["namespace"].as_str().unwrap_or_default();
                    let name = meta["name"].as_str().unwrap_or_default();
                    rbac.remove(kind, ns, name);
                }
            }
        }
        for p in pumps {
            p.abort();
        }
        if !reload {
            return;
        }
    }
}

fn kind_name(kind: RbacKind) -> &'static str {
    match kind {
        RbacKind::Role => "Role",
        RbacKind::RoleBinding => "RoleBinding",
        RbacKind::ClusterRole => "ClusterRole",
        RbacKind::ClusterRoleBinding => "ClusterRoleBinding",
    }
}

/// The authorization filter (`WithAuthorization`): asks the configured authorizer whether
/// `user` may make the request, a resource request (`info`) or a non-resource one (the path).
/// As kube-apiserver's RequestInfo, a list or watch of one object by
/// `fieldSelector=metadata.name=x` is authorized as a request on "x".
///
/// # Errors
/// 403 Forbidden when the authorizer denies.
pub fn authorize(
    state: &AppState,
    user: &RequestUser,
    method: &axum::http::Method,
    path: &str,
    q: &Query,
    info: Option<&RequestInfo>,
) -> Result<(), ApiError> {
    let Some(info) = info else {
        let attrs = Attributes {
            verb: method.as_str().to_ascii_lowercase(),
            group: String::new(),
            version: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: path.to_string(),
            resource_request: false,
            field_selector: String::new(),
        };
        return state.authorizer.authorize(user, &attrs);
    };
    let field_selector = q.get("fieldSelector").cloned().unwrap_or_default();
    let mut name = info.name.clone();
    if name.is_empty() && matches!(info.verb, "list" | "watch") {
        name = single_name_selector(&field_selector).unwrap_or_default();
    }
    let attrs = Attributes {
        verb: info.verb.to_string(),
        group: info.def.group.to_string(),
        version: info.def.version.to_string(),
        resource: info.def.resource.to_string(),
        subresource: info.subresource.clone(),
        namespace: info.namespace.clone(),
        name,
        path: path.to_string(),
        resource_request: true,
        field_selector,
    };
    state.authorizer.authorize(user, &attrs)
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    pub(crate) fn rbac_with_pod_reader() -> Arc<RbacAuthorizer> {
        let rbac = Arc::new(RbacAuthorizer::new());
        rbac.apply(&json!({"kind": "Role", "metadata": {"namespace": "default", "name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]}))
            .unwrap();
        rbac.apply(&json!({"kind": "RoleBinding", "metadata": {"namespace": "default", "name": "read-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "User", "name": "jane"}]}))
            .unwrap();
        rbac
    }

    fn attrs(verb: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: String::new(),
            version: "v1".into(),
            resource: "pods".into(),
            subresource: String::new(),
            namespace: "default".into(),
            name: name.into(),
            path: format!("/api/v1/namespaces/default/pods/{name}"),
            resource_request: true,
            field_selector: String::new(),
        }
    }

    pub(crate) fn user(name: &str, groups: &[&str]) -> RequestUser {
        RequestUser { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect() }
    }

    #[test]
    fn a_bound_role_allows_reads_and_a_delete_is_forbidden_in_kubernetes_wording() {
        let a = RbacAdapter { rbac: rbac_with_pod_reader() };
        let jane = user("jane", &["system:authenticated"]);
        assert!(a.authorize(&jane, &attrs("list", "")).is_ok());
        let e = a.authorize(&jane, &attrs("delete", "x")).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            r#"pods "x" is forbidden: User "jane" cannot delete resource "pods" in API group "" in the namespace "default""#
        );
    }

    #[test]
    fn authorization_modes_parse_like_kube_apiserver_flags() {
        let parse = |v: &[&str]| AuthorizationMode::parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(parse(&["RBAC"]), Ok(AuthorizationMode::Rbac));
        assert_eq!(parse(&["Node,RBAC"]), Ok(AuthorizationMode::NodeRbac));
        assert_eq!(parse(&["Node", "RBAC"]), Ok(AuthorizationMode::NodeRbac));
        assert_eq!(parse(&["AlwaysAllow"]), Ok(AuthorizationMode::AlwaysAllow));
        assert_eq!(parse(&["RBAC,AlwaysAllow"]), Ok(AuthorizationMode::AlwaysAllow));
        for bad in [&["Webhook"][..], &["Node"], &[""], &[], &["rbac"]] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
