//! The Node authorizer of `skiff-auth` ([`skiff_auth::node`]) and NodeRestriction admission of
//! `skiff-admission` wired into the API server: [`install`] puts the Node authorizer before the configured one
//! (`--authorization-mode=Node,RBAC`) and NodeRestriction in front of the admission chain;
//! [`feed`] keeps the [`NodeGraph`] equal to the pods and PersistentVolumes in the watch caches.
//!
//! The graph is answered from memory at decision time; it follows the watch caches a moment
//! behind the store (as Kubernetes' graph follows its informers), so a kubelet that reads a
//! secret the instant its pod is bound may get one 403 and succeed on its retry.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use skiff_admission::plugins::node_restriction::NodeRestriction;
use skiff_apimachinery::ApiError;
use skiff_auth::UserInfo;
use skiff_auth::node::authorizer::NodeAuthorizer;
use skiff_auth::node::graph::NodeGraph;
use skiff_auth::rbac;

use crate::admission::seam::{Admission, Attributes as AdmissionAttributes, Operation};
use crate::auth::{Attributes, Authorizer, RequestUser};
use crate::storage::watchcache::EventKind;

/// The admission plugin's name (kube-apiserver's `--enable-admission-plugins` name).
pub const NODE_RESTRICTION: &str = "NodeRestriction";

/// [`Authorizer`] for `Node,<next>`: the Node authorizer first; what it does not allow goes to
/// `next`, and a 403 from `next` carries the Node authorizer's reason
/// (`…: no relationship found between node 'a' and this object`).
pub struct NodeAdapter {
    /// The Node authorizer.
    pub node: Arc<NodeAuthorizer>,
    /// The authorizer after it (RBAC).
    pub next: Arc<dyn Authorizer>,
}

impl Authorizer for NodeAdapter {
    fn authorize(&self, user: &RequestUser, attrs: &Attributes) -> Result<(), ApiError> {
        let info = UserInfo::new(user.name.clone(), user.groups.iter().cloned());
        let reason = if skiff_auth::node::node_identity(&info).is_some() {
            let a = if attrs.resource_request {
                rbac::Attributes::resource(
                    &info,
                    &attrs.verb,
                    &attrs.group,
                    &attrs.resource,
                    &attrs.namespace,
                    &attrs.name,
                )
                .with_subresource(&attrs.subresource)
            } else {
                rbac::Attributes::non_resource(&info, &attrs.verb, &attrs.path)
            };
            let d = self.node.authorize_request(&a, &attrs.field_selector);
            if d.allowed {
                return Ok(());
            }
            d.reason
        } else {
            String::new()
        };
        self.next.authorize(user, attrs).map_err(|mut e| {
            if e.code == 403 && !reason.is_empty() {
                e.message = format!("{}: {reason}", e.message);
            }
            e
        })
    }
}

/// NodeRestriction in front of an [`Admission`]: checked before the chain's mutating plugins
/// run (creates and updates) and before its validation of deletes, which have no mutating phase.
pub struct NodeRestrictionAdmission {
    /// The plugin.
    pub plugin: NodeRestriction,
    /// The rest of admission.
    pub inner: Arc<dyn Admission>,
}

impl NodeRestrictionAdmission {
    fn check(&self, attrs: &AdmissionAttributes<'_>, obj: Option<&Value>) -> Result<(), ApiError> {
        let Some(user) = attrs.user else { return Ok(()) };
        if !user.groups.iter().any(|g| g == skiff_auth::user::NODES_GROUP) {
            return Ok(());
        }
        self.plugin.check(&crate::admission::chain::admission_request(attrs, user, obj))
    }
}

#[async_trait]
impl Admission for NodeRestrictionAdmission {
    async fn mutate(&self, attrs: &AdmissionAttributes<'_>, obj: &mut Value) -> Result<(), ApiError> {
        self.check(attrs, Some(obj))?;
        self.inner.mutate(attrs, obj).await
    }

    async fn validate(&self, attrs: &AdmissionAttributes<'_>, obj: &Value) -> Result<(), ApiError> {
        if attrs.operation == Operation::Delete {
            self.check(attrs, None)?;
        }
        self.inner.validate(attrs, obj).await
    }

    async fn mutate_collecting(
        &self,
        attrs: &AdmissionAttributes<'_>,
        obj: &mut Value,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        self.check(attrs, Some(obj))?;
        self.inner.mutate_collecting(attrs, obj, warnings).await
    }

    async fn validate_collecting(
        &self,
        attrs: &AdmissionAttributes<'_>,
        obj: &mut Value,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        if attrs.operation == Operation::Delete {
            self.check(attrs, None)?;
        }
        self.inner.validate_collecting(attrs, obj, warnings).await
    }
}

/// Installs the Node authorizer in front of `config.authorizer` when `node_authorizer` is set,
/// and NodeRestriction in front of `config.admission` when `node_restriction` is set and
/// admission is configured, both reading `graph` (the one the access reviews' authorizer reads
/// too). Returns the graph (to be fed by [`feed`]), or `None` when neither is installed.
pub fn install(
    config: &mut crate::Config,
    graph: Arc<NodeGraph>,
    node_authorizer: bool,
    node_restriction: bool,
) -> Option<Arc<NodeGraph>> {
    let node_restriction = node_restriction && config.admission.is_some();
    let node_authorizer = node_authorizer && config.authorizer.is_some();
    if !node_authorizer && !node_restriction {
        return None;
    }
    if node_authorizer && let Some(next) = config.authorizer.take() {
        let node = Arc::new(NodeAuthorizer::new(graph.clone()));
        config.authorizer = Some(Arc::new(NodeAdapter { node, next }));
    }
    if node_restriction && let Some(inner) = config.admission.take() {
        let plugin = NodeRestriction::new(graph.clone());
        config.admission = Some(Arc::new(NodeRestrictionAdmission { plugin, inner }));
    }
    Some(graph)
}

/// Keeps `graph` equal to the pods and PersistentVolumes in `state`'s watch caches: a full load,
/// then every event; reloads when a subscription lags or a cache resets. Runs until the caches
/// close.
pub async fn feed(graph: Arc<NodeGraph>, state: Arc<crate::AppState>) {
    let cache_of = |resource: &str| {
        let def = state.registry.get("", "v1", resource)?;
        state.caches.get(def.storage).cloned()
    };
    let Some(pods) = cache_of("pods") else {
        tracing::warn!("no pod watch cache: the Node authorizer relates no object to any node");
        return;
    };
    let pvs = cache_of("persistentvolumes");
    loop {
        while !pods.is_ready() || pvs.as_ref().is_some_and(|c| !c.is_ready()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Option<(bool, EventKind, Arc<Value>)>>(1024);
        let pod_snap = pods.snapshot(pods.prefix());
        let pv_snap = pvs.as_ref().map(|c| c.snapshot(c.prefix()));
        graph.replace(
            pod_snap.objects.iter().map(|o| o.as_ref()),
            pv_snap.iter().flat_map(|s| s.objects.iter().map(|o| o.as_ref())),
        );
        let mut pumps = vec![tokio::spawn(pod_snap.subscription.forward_events(true, tx.clone()))];
        if let Some(s) = pv_snap {
            pumps.push(tokio::spawn(s.subscription.forward_events(false, tx.clone())));
        }
        drop(tx);
        let mut reload = false;
        while let Some(msg) = rx.recv().await {
            let Some((is_pod, kind, obj)) = msg else {
                reload = true;
                break;
            };
            let meta = &obj["metadata"];
            let (ns, name) =
                (meta["namespace"].as_str().unwrap_or_default(), meta["name"].as_str().unwrap_or_default());
            match (is_pod, kind) {
                (true, EventKind::Deleted) => graph.remove_pod(ns, name),
                (true, _) => graph.apply_pod(&obj),
                (false, EventKind::Deleted) => graph.remove_persistent_volume(name),
                (false, _) => graph.apply_persistent_volume(&obj),
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
