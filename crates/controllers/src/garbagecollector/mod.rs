//! The garbage collector (`pkg/controller/garbagecollector`): deletes objects whose owners
//! are gone, and carries out the three cascading deletion policies, for every resource the API
//! serves (custom resources included).
//!
//! - **Monitors**: API discovery lists every resource supporting list, watch and delete
//!   (except events); each gets a shared informer whose events feed the [`graph`] (one task
//!   applies them in order). Discovery is re-run periodically to pick up new CRDs.
//! - **attemptToDelete** (workers): for an object whose owners may be gone, a live GET of each
//!   owner classifies its references as *solid* (owner exists), *dangling* (owner gone, or
//!   another object now has its name) or *waiting* (owner being deleted in the foreground).
//!   No solid owner → the object is deleted (Background, or the policy its own finalizers
//!   ask for); solid and dangling → the dangling references are removed.
//! - **Background** deletion: the API server removes the owner at once; its dependents become
//!   dangling and are deleted by the step above.
//! - **Foreground** deletion: the owner carries the `foregroundDeletion` finalizer; its
//!   dependents are deleted (dependents that have dependents of their own, in the foreground
//!   too) and the finalizer is removed once no dependent with `blockOwnerDeletion: true` is
//!   left, which lets the API server delete the owner.
//! - **Orphan** deletion: the owner carries the `orphan` finalizer; the references to it are
//!   removed from all dependents, then the finalizer.
//! - Virtual nodes: an owner referenced but never observed is checked with a live GET; if it
//!   does not exist, a virtual delete event removes it and its dependents are collected —
//!   unless some dependents name its uid with other coordinates: then only the dependents of
//!   the coordinates found absent lose it, and the node is checked again under the others.
//! - Invalid references: a namespaced owner exists only in its dependent's namespace, so a
//!   reference to one observed in another namespace is dangling (the dependent gets a
//!   `OwnerRefInvalidNamespace` warning event and is collected once no owner is left); so is a
//!   reference whose uid, name or kind names no object. A cluster-scoped dependent with a
//!   namespaced owner is never resolvable and is left alone, not retried. The absent-owner cache
//!   is keyed by the owner's coordinates and namespace, so an owner missing from one namespace
//!   is not taken as missing from its own.
//!
//! All writes are JSON merge patches carrying the `resourceVersion` read just before
//! (ownerReferences, finalizers), or deletes with a uid precondition.

pub mod graph;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use self::graph::{FINALIZER_DELETE_DEPENDENTS, FINALIZER_ORPHAN_DEPENDENTS, Graph, GraphEvent, ObjectIdentity, Work};
use skiff_runtime::api::{
    ApiClient, ApiError, ApiResource, DeleteOptions, DiscoveredResource, PatchType, PropagationPolicy, is_conflict,
    is_not_found,
};
use skiff_runtime::controller::{Action, ReconcileError, ReconcileResult, Reconciler, WorkerConfig, run_workers};
use skiff_runtime::events::{EVENT_TYPE_WARNING, EventRecorder};
use skiff_runtime::informer::{MetaEvent, MetaEventHandler, SharedInformerFactory};
use skiff_runtime::metrics::ControllerMetrics;
use skiff_runtime::workqueue::WorkQueue;

/// Resources never monitored (`DefaultIgnoredResources`): events.
pub fn is_ignored(resource: &ApiResource) -> bool {
    resource.plural == "events" && (resource.group.is_empty() || resource.group == "events.k8s.io")
}

/// Maps `(apiVersion, kind)` to resources (`RESTMapper`), from discovery.
#[derive(Debug, Default, Clone)]
pub struct RestMapper {
    resources: Vec<DiscoveredResource>,
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

impl RestMapper {
    /// A mapper over discovered resources.
    pub fn new(resources: Vec<DiscoveredResource>) -> Self {
        Self { resources }
    }

    /// The resource serving `kind` in the group of `api_version` (any version: the discovered,
    /// preferred one is used to read objects written in another version).
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<&DiscoveredResource> {
        let group = group_of(api_version);
        let candidates = self.resources.iter().filter(|r| r.resource.group == group && r.resource.kind == kind);
        let mut first = None;
        for c in candidates {
            if c.resource.api_version == api_version {
                return Some(c);
            }
            first.get_or_insert(c);
        }
        first
    }
}

/// Errors of one garbage collection step.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// The API refused or failed.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// No resource serves this kind (yet): an unknown custom type, retried after discovery.
    #[error("unable to get REST mapping for {0}")]
    RestMapping(String),
    /// A cluster-scoped object names a namespaced owner: never resolvable, not retried.
    #[error("cluster-scoped object {0} has a namespaced owner {1}")]
    NamespacedOwnerOfClusterScopedObject(String, String),
}

/// The garbage collector.
pub struct GarbageCollector {
    api: Arc<dyn ApiClient>,
    factory: Arc<SharedInformerFactory>,
    graph: Mutex<Graph>,
    mapper: RwLock<RestMapper>,
    attempt_to_delete: Arc<WorkQueue<String>>,
    attempt_to_orphan: Arc<WorkQueue<String>>,
    events_tx: mpsc::UnboundedSender<GraphEvent>,
    events_rx: Mutex<Option<mpsc::UnboundedReceiver<GraphEvent>>>,
    absent_owners: Mutex<HashSet<ObjectIdentity>>,
    monitored: Mutex<HashSet<String>>,
    recorder: EventRecorder,
}

/// Reason of the warning event on a dependent whose namespaced owner is in another namespace.
pub const OWNER_REF_INVALID_NAMESPACE: &str = "OwnerRefInvalidNamespace";

/// Most identities kept in the absent-owner cache before it is cleared.
const ABSENT_OWNER_CACHE_SIZE: usize = 500;

struct GraphFeeder {
    tx: mpsc::UnboundedSender<GraphEvent>,
}

impl MetaEventHandler for GraphFeeder {
    fn on_meta_event(&self, resource: &ApiResource, event: MetaEvent<'_>) {
        let _ = self.tx.send(GraphEvent::from_meta_event(resource, event));
    }
}

fn meta_of(v: &Value) -> ObjectMeta {
    v.get("metadata").cloned().and_then(|m| serde_json::from_value(m).ok()).unwrap_or_default()
}

/// A list for a merge patch: `null` when empty, so the field is removed (as the API server
/// omits empty lists) rather than stored as `[]`.
pub(crate) fn list_or_null<T: serde::Serialize>(items: &[T]) -> Value {
    if items.is_empty() { Value::Null } else { json!(items) }
}

/// The result of classifying an object's owner references.
#[derive(Debug, Default)]
struct Classified {
    solid: Vec<OwnerReference>,
    dangling: Vec<OwnerReference>,
    waiting: Vec<OwnerReference>,
}

impl GarbageCollector {
    /// A collector using `api` for its writes and live reads, `factory` for its monitors and
    /// `recorder` (component `garbage-collector-controller`) for its events.
    pub fn new(api: Arc<dyn ApiClient>, factory: Arc<SharedInformerFactory>, recorder: EventRecorder) -> Arc<Self> {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        Arc::new(Self {
            api,
            factory,
            graph: Mutex::new(Graph::new()),
            mapper: RwLock::new(RestMapper::default()),
            attempt_to_delete: Arc::new(WorkQueue::new()),
            attempt_to_orphan: Arc::new(WorkQueue::new()),
            events_tx,
            events_rx: Mutex::new(Some(events_rx)),
            absent_owners: Mutex::new(HashSet::new()),
            monitored: Mutex::new(HashSet::new()),
            recorder,
        })
    }

    /// The attemptToDelete queue (tests).
    pub fn attempt_to_delete_queue(&self) -> &Arc<WorkQueue<String>> {
        &self.attempt_to_delete
    }

    /// The attemptToOrphan queue (tests).
    pub fn attempt_to_orphan_queue(&self) -> &Arc<WorkQueue<String>> {
        &self.attempt_to_orphan
    }

    /// Runs `f` on the graph (tests, debugging).
    pub fn with_graph<T>(&self, f: impl FnOnce(&Graph) -> T) -> T {
        f(&self.graph.lock())
    }

    /// Re-runs discovery: updates the mapper and adds a monitor for every new deletable
    /// resource. Returns how many monitors were added.
    ///
    /// # Errors
    /// Discovery failing.
    pub async fn sync_monitors(&self) -> Result<usize, ApiError> {
        let resources = self.api.discover().await?;
        let deletable: Vec<DiscoveredResource> = resources
            .iter()
            .filter(|r| r.supports("list") && r.supports("watch") && r.supports("delete") && !is_ignored(&r.resource))
            .cloned()
            .collect();
        *self.mapper.write() = RestMapper::new(resources);
        let mut added = 0;
        for r in deletable {
            let key = format!("{}/{}", r.resource.group, r.resource.plural);
            if !self.monitored.lock().insert(key) {
                continue;
            }
            let informer = self.factory.meta_informer(&r.resource);
            informer.add_meta_handler(Arc::new(GraphFeeder { tx: self.events_tx.clone() }));
            added += 1;
        }
        if added > 0 {
            self.factory.start();
        }
        Ok(added)
    }

    /// Applies one graph event and queues the work it implies.
    pub fn process_graph_event(&self, ev: &GraphEvent) {
        let (work, absent) = self.graph.lock().process(ev);
        if let Some(identity) = absent {
            self.add_absent_owner(identity);
        }
        for w in work {
            match w {
                Work::AttemptToDelete(uid) => self.attempt_to_delete.add(uid),
                Work::AttemptToOrphan(uid) => self.attempt_to_orphan.add(uid),
                Work::ReportInvalidNamespaceOwnerRef(dependent, owner) => {
                    self.report_invalid_namespace_owner_ref(&dependent, &owner)
                }
            }
        }
    }

    fn add_absent_owner(&self, identity: ObjectIdentity) {
        let mut absent = self.absent_owners.lock();
        if absent.len() >= ABSENT_OWNER_CACHE_SIZE {
            absent.clear();
        }
        absent.insert(identity);
    }

    /// `reportInvalidNamespaceOwnerRef`: a warning event on the dependent, `ownerRef
    /// [v1/ConfigMap, namespace: b, name: x, uid: …] does not exist in namespace "b"`.
    fn report_invalid_namespace_owner_ref(&self, dependent_uid: &str, owner_uid: &str) {
        let (dependent, reference) = {
            let g = self.graph.lock();
            let Some(dep) = g.node(dependent_uid) else { return };
            let Some(r) = dep.owners.iter().find(|r| r.uid == owner_uid) else { return };
            (dep.identity.clone(), r.clone())
        };
        let invalid = ObjectIdentity {
            api_version: reference.api_version,
            kind: reference.kind,
            namespace: Some(dependent.namespace.clone().unwrap_or_default()),
            name: reference.name,
            uid: reference.uid,
        };
        let object = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(dependent.api_version.clone()),
            kind: Some(dependent.kind.clone()),
            namespace: dependent.namespace.clone(),
            name: Some(dependent.name.clone()),
            uid: Some(dependent.uid.clone()),
            ..Default::default()
        };
        let message = format!(
            "ownerRef {invalid} does not exist in namespace {:?}",
            dependent.namespace.as_deref().unwrap_or_default()
        );
        self.recorder.event(&object, EVENT_TYPE_WARNING, OWNER_REF_INVALID_NAMESPACE, &message);
    }

    /// Applies every graph event queued so far (tests drive the collector with this).
    pub fn drain_graph_events(&self) {
        let mut rx = self.events_rx.lock();
        if let Some(rx) = rx.as_mut() {
            while let Ok(ev) = rx.try_recv() {
                self.process_graph_event(&ev);
            }
        }
    }

    fn resource_for(&self, api_version: &str, kind: &str) -> Result<DiscoveredResource, GcError> {
        self.mapper
            .read()
            .resolve(api_version, kind)
            .cloned()
            .ok_or_else(|| GcError::RestMapping(format!("{api_version}, Kind={kind}")))
    }

    async fn get_object(&self, id: &ObjectIdentity) -> Result<Value, GcError> {
        let r = self.resource_for(&id.api_version, &id.kind)?;
        let ns = if r.namespaced { id.namespace.as_deref() } else { None };
        Ok(self.api.get(&r.resource, ns, &id.name).await?)
    }

    async fn patch_object(&self, id: &ObjectIdentity, patch: &Value) -> Result<(), GcError> {
        let r = self.resource_for(&id.api_version, &id.kind)?;
        let ns = if r.namespaced { id.namespace.as_deref() } else { None };
        self.api.patch(&r.resource, ns, &id.name, PatchType::Merge, patch, None).await?;
        Ok(())
    }

    async fn delete_object(&self, id: &ObjectIdentity, policy: PropagationPolicy) -> Result<(), GcError> {
        let r = self.resource_for(&id.api_version, &id.kind)?;
        let ns = if r.namespaced { id.namespace.as_deref() } else { None };
        let opts = DeleteOptions {
            propagation_policy: Some(policy),
            precondition_uid: Some(id.uid.clone()),
            ..Default::default()
        };
        tracing::debug!(item = %id, policy = policy.as_str(), "deleting object");
        match self.api.delete(&r.resource, ns, &id.name, &opts).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// `isDangling`: whether the owner `reference` of `item` is gone, with its metadata if not.
    async fn is_dangling(
        &self,
        reference: &OwnerReference,
        item: &ObjectIdentity,
    ) -> Result<(bool, Option<ObjectMeta>), GcError> {
        // Keyed by coordinates: first as a cluster-scoped owner, then in the item's namespace.
        let mut key = ObjectIdentity {
            api_version: reference.api_version.clone(),
            kind: reference.kind.clone(),
            namespace: None,
            name: reference.name.clone(),
            uid: reference.uid.clone(),
        };
        if self.absent_owners.lock().contains(&key) {
            return Ok((true, None));
        }
        key.namespace = item.namespace.clone();
        if self.absent_owners.lock().contains(&key) {
            return Ok((true, None));
        }
        let r = self.resource_for(&reference.api_version, &reference.kind)?;
        if !r.namespaced {
            key.namespace = None;
        }
        let ns = if r.namespaced {
            match &item.namespace {
                Some(ns) => Some(ns.as_str()),
                None => {
                    return Err(GcError::NamespacedOwnerOfClusterScopedObject(
                        item.to_string(),
                        reference.name.clone(),
                    ));
                }
            }
        } else {
            None
        };
        match self.api.get(&r.resource, ns, &reference.name).await {
            Ok(owner) => {
                let meta = meta_of(&owner);
                if meta.uid.as_deref() != Some(reference.uid.as_str()) {
                    self.add_absent_owner(key);
                    return Ok((true, None));
                }
                Ok((false, Some(meta)))
            }
            Err(e) if is_not_found(&e) => {
                self.add_absent_owner(key);
                Ok((true, None))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn classify_references(&self, item: &ObjectIdentity, refs: &[OwnerReference]) -> Result<Classified, GcError> {
        let mut out = Classified::default();
        for r in refs {
            let (dangling, owner) = self.is_dangling(r, item).await?;
            if dangling {
                out.dangling.push(r.clone());
                continue;
            }
            let owner = owner.unwrap_or_default();
            let waiting = owner.deletion_timestamp.is_some()
                && owner.finalizers.iter().flatten().any(|f| f == FINALIZER_DELETE_DEPENDENTS);
            if waiting { out.waiting.push(r.clone()) } else { out.solid.push(r.clone()) }
        }
        Ok(out)
    }

    /// Removes the references to `owner_uids` from the object (merge patch on a fresh read).
    async fn delete_owner_references(&self, id: &ObjectIdentity, owner_uids: &[String]) -> Result<(), GcError> {
        let latest = match self.get_object(id).await {
            Ok(v) => v,
            Err(GcError::Api(e)) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let meta = meta_of(&latest);
        if meta.uid.as_deref() != Some(id.uid.as_str()) {
            return Ok(());
        }
        let refs = meta.owner_references.clone().unwrap_or_default();
        let kept: Vec<&OwnerReference> = refs.iter().filter(|r| !owner_uids.contains(&r.uid)).collect();
        if kept.len() == refs.len() {
            return Ok(());
        }
        let patch = json!({"metadata": {"ownerReferences": list_or_null(&kept), "resourceVersion": meta.resource_version, "uid": meta.uid}});
        match self.patch_object(id, &patch).await {
            Err(GcError::Api(e)) if is_not_found(&e) => Ok(()),
            other => other,
        }
    }

    /// Sets `blockOwnerDeletion: false` on every blocking reference of the object.
    async fn unblock_owner_references(&self, id: &ObjectIdentity) -> Result<(), GcError> {
        let latest = self.get_object(id).await?;
        let meta = meta_of(&latest);
        let refs: Vec<OwnerReference> = meta
            .owner_references
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|mut r| {
                if r.block_owner_deletion == Some(true) {
                    r.block_owner_deletion = Some(false);
                }
                r
            })
            .collect();
        let patch =
            json!({"metadata": {"ownerReferences": refs, "resourceVersion": meta.resource_version, "uid": meta.uid}});
        self.patch_object(id, &patch).await
    }

    /// Removes `finalizer` from the object, re-reading on conflicts.
    async fn remove_finalizer(&self, id: &ObjectIdentity, finalizer: &str) -> Result<(), GcError> {
        let mut attempt = 0;
        loop {
            let latest = match self.get_object(id).await {
                Ok(v) => v,
                Err(GcError::Api(e)) if is_not_found(&e) => return Ok(()),
                Err(e) => return Err(e),
            };
            let meta = meta_of(&latest);
            if meta.uid.as_deref() != Some(id.uid.as_str()) {
                return Ok(());
            }
            let finalizers = meta.finalizers.clone().unwrap_or_default();
            if !finalizers.iter().any(|f| f == finalizer) {
                return Ok(());
            }
            let kept: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
            let patch =
                json!({"metadata": {"finalizers": list_or_null(&kept), "resourceVersion": meta.resource_version}});
            match self.patch_object(id, &patch).await {
                Ok(()) => return Ok(()),
                Err(GcError::Api(e)) if is_not_found(&e) => return Ok(()),
                Err(GcError::Api(e)) if is_conflict(&e) && attempt < 4 => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// `attemptToDeleteItem`. Returns `Ok(true)` when a virtual delete event was produced.
    pub async fn attempt_to_delete_item(&self, uid: &str) -> Result<bool, GcError> {
        let Some(item) = self.graph.lock().node(uid).cloned() else {
            return Ok(false);
        };
        if item.being_deleted && !item.deleting_dependents {
            // Being deleted is a one-way trip: wait for the final delete.
            return Ok(false);
        }
        let latest = match self.get_object(&item.identity).await {
            Ok(v) => v,
            Err(GcError::Api(e)) if is_not_found(&e) => {
                let _ = self.events_tx.send(GraphEvent::virtual_delete(item.identity.clone()));
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        let meta = meta_of(&latest);
        if meta.uid.as_deref() != Some(item.identity.uid.as_str()) {
            let _ = self.events_tx.send(GraphEvent::virtual_delete(item.identity.clone()));
            return Ok(true);
        }
        if item.deleting_dependents {
            self.process_deleting_dependents_item(uid).await?;
            return Ok(false);
        }
        let refs = meta.owner_references.clone().unwrap_or_default();
        if refs.is_empty() {
            return Ok(false);
        }
        let c = self.classify_references(&item.identity, &refs).await?;
        if !c.solid.is_empty() {
            if c.dangling.is_empty() && c.waiting.is_empty() {
                return Ok(false);
            }
            // Waiting references must go too, or their owners would wait for this object forever.
            let uids: Vec<String> = c.dangling.iter().chain(&c.waiting).map(|r| r.uid.clone()).collect();
            self.delete_owner_references(&item.identity, &uids).await?;
            return Ok(false);
        }
        if !c.waiting.is_empty() && !item.dependents.is_empty() {
            let dependent_deleting = {
                let g = self.graph.lock();
                item.dependents.iter().any(|d| g.node(d).is_some_and(|n| n.deleting_dependents))
            };
            if dependent_deleting {
                // A dependency cycle in foreground deletion: stop blocking our owners.
                self.unblock_owner_references(&item.identity).await?;
            }
            self.delete_object(&item.identity, PropagationPolicy::Foreground).await?;
            return Ok(false);
        }
        let finalizers = meta.finalizers.clone().unwrap_or_default();
        let policy = if finalizers.iter().any(|f| f == FINALIZER_ORPHAN_DEPENDENTS) {
            PropagationPolicy::Orphan
        } else if finalizers.iter().any(|f| f == FINALIZER_DELETE_DEPENDENTS) {
            PropagationPolicy::Foreground
        } else {
            PropagationPolicy::Background
        };
        self.delete_object(&item.identity, policy).await?;
        Ok(false)
    }

    /// `processDeletingDependentsItem`: removes `foregroundDeletion` once no blocking dependent
    /// is left; otherwise makes sure the blocking dependents are being collected.
    async fn process_deleting_dependents_item(&self, uid: &str) -> Result<(), GcError> {
        let (identity, blocking) = {
            let g = self.graph.lock();
            let Some(node) = g.node(uid) else { return Ok(()) };
            let blocking: Vec<(String, bool)> =
                node.blocking_dependents(&g).iter().map(|d| (d.identity.uid.clone(), d.deleting_dependents)).collect();
            (node.identity.clone(), blocking)
        };
        if blocking.is_empty() {
            return self.remove_finalizer(&identity, FINALIZER_DELETE_DEPENDENTS).await;
        }
        for (dep, deleting) in blocking {
            if !deleting {
                self.attempt_to_delete.add(dep);
            }
        }
        Ok(())
    }

    /// `attemptToOrphanWorker`: removes the owner from all its dependents, then its `orphan`
    /// finalizer.
    pub async fn attempt_to_orphan(&self, uid: &str) -> Result<(), GcError> {
        let (owner, dependents) = {
            let g = self.graph.lock();
            let Some(node) = g.node(uid) else { return Ok(()) };
            let deps: Vec<ObjectIdentity> =
                node.dependents.iter().filter_map(|d| g.node(d)).map(|n| n.identity.clone()).collect();
            (node.identity.clone(), deps)
        };
        let owner_uid = vec![owner.uid.clone()];
        let results =
            futures::future::join_all(dependents.iter().map(|d| self.delete_owner_references(d, &owner_uid))).await;
        if let Some(e) = results.into_iter().find_map(Result::err) {
            return Err(e);
        }
        self.remove_finalizer(&owner, FINALIZER_ORPHAN_DEPENDENTS).await
    }

    /// Runs the collector: the graph task, `workers` attemptToDelete workers, attemptToOrphan
    /// workers, and discovery every `resync` until cancelled.
    pub async fn run(self: Arc<Self>, workers: usize, resync: Duration, metrics: ControllerMetrics) {
        let Some(mut rx) = self.events_rx.lock().take() else { return };
        let mut tasks = tokio::task::JoinSet::new();
        let me = self.clone();
        tasks.spawn(async move {
            while let Some(ev) = rx.recv().await {
                me.process_graph_event(&ev);
            }
        });
        if let Err(e) = self.sync_monitors().await {
            tracing::warn!(%e, "garbage collector discovery failed");
        }
        // Start collecting once the monitors have listed (or after a while, regardless).
        let _ = tokio::time::timeout(Duration::from_secs(30), self.factory.wait_for_cache_sync()).await;
        let delete_metrics = metrics.for_controller("garbagecollector-attempt-to-delete");
        let orphan_metrics = metrics.for_controller("garbagecollector-attempt-to-orphan");
        tasks.spawn(run_workers(
            self.attempt_to_delete.clone(),
            Arc::new(AttemptToDelete(self.clone())),
            WorkerConfig { name: "garbagecollector".into(), workers, max_retries: None },
            delete_metrics,
        ));
        tasks.spawn(run_workers(
            self.attempt_to_orphan.clone(),
            Arc::new(AttemptToOrphan(self.clone())),
            WorkerConfig { name: "garbagecollector-orphan".into(), workers: 1, max_retries: None },
            orphan_metrics,
        ));
        let me = self.clone();
        tasks.spawn(async move {
            let mut interval = tokio::time::interval(resync);
            interval.tick().await;
            loop {
                interval.tick().await;
                match me.sync_monitors().await {
                    Ok(n) if n > 0 => tracing::info!(added = n, "garbage collector monitors added"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(%e, "garbage collector discovery failed"),
                }
            }
        });
        let _guard = (
            skiff_runtime::controller::ShutDownOnDrop(self.attempt_to_delete.clone()),
            skiff_runtime::controller::ShutDownOnDrop(self.attempt_to_orphan.clone()),
        );
        while tasks.join_next().await.is_some() {}
    }
}

struct AttemptToDelete(Arc<GarbageCollector>);

#[async_trait]
impl Reconciler for AttemptToDelete {
    async fn reconcile(&self, uid: &str) -> ReconcileResult {
        let gc = &self.0;
        let observed = gc.graph.lock().node(uid).map(|n| !n.virtual_node);
        match gc.attempt_to_delete_item(uid).await {
            Ok(true) => Ok(Action::AwaitChange),
            Ok(false) if observed == Some(false) => {
                // A virtual node that exists: keep checking until the informer observes it.
                let still_virtual = gc.graph.lock().node(uid).is_some_and(|n| n.virtual_node);
                Ok(if still_virtual { Action::RequeueRateLimited } else { Action::AwaitChange })
            }
            Ok(false) => Ok(Action::AwaitChange),
            Err(GcError::NamespacedOwnerOfClusterScopedObject(a, b)) => {
                tracing::warn!(item = a, owner = b, "cluster-scoped object with a namespaced owner");
                Ok(Action::AwaitChange)
            }
            Err(GcError::Api(e)) => Err(ReconcileError::Api(e)),
            Err(e) => Err(ReconcileError::Other(e.to_string())),
        }
    }
}

struct AttemptToOrphan(Arc<GarbageCollector>);

#[async_trait]
impl Reconciler for AttemptToOrphan {
    async fn reconcile(&self, uid: &str) -> ReconcileResult {
        match self.0.attempt_to_orphan(uid).await {
            Ok(()) => Ok(Action::AwaitChange),
            Err(GcError::Api(e)) => Err(ReconcileError::Api(e)),
            Err(e) => Err(ReconcileError::Other(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::graph::EventType;
    use super::*;
    use skiff_runtime::api::resource_of;
    use skiff_runtime::fake::FakeApi;

    fn discovered(ar: ApiResource, namespaced: bool) -> DiscoveredResource {
        DiscoveredResource {
            resource: ar,
            namespaced,
            verbs: ["get", "list", "watch", "create", "delete", "deletecollection", "patch", "update"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }

    fn widget() -> ApiResource {
        ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    struct Fixture {
        api: Arc<FakeApi>,
        gc: Arc<GarbageCollector>,
    }

    impl Fixture {
        async fn new() -> Self {
            let api = Arc::new(FakeApi::new());
            api.set_discovery(vec![
                discovered(resource_of::<Deployment>(), true),
                discovered(resource_of::<ReplicaSet>(), true),
                discovered(resource_of::<Pod>(), true),
                discovered(widget(), true),
                discovered(resource_of::<k8s_openapi::api::core::v1::Event>(), true),
                discovered(resource_of::<k8s_openapi::api::core::v1::Node>(), false),
            ]);
            let gc = GarbageCollector::new(
                api.clone(),
                Arc::new(SharedInformerFactory::for_tests()),
                EventRecorder::recording("garbage-collector-controller"),
            );
            assert_eq!(gc.sync_monitors().await.unwrap(), 5, "events are not monitored");
            Self { api, gc }
        }

        /// Stores the object in the API and feeds its add event to the graph.
        fn add(&self, ar: &ApiResource, meta: ObjectMeta) -> ObjectMeta {
            self.api.seed_value(ar, json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": meta}));
            let stored =
                meta_of(&self.api.object(ar, meta.namespace.as_deref(), meta.name.as_deref().unwrap()).unwrap());
            self.gc.process_graph_event(&GraphEvent::from_meta_event(ar, MetaEvent::Add(&stored)));
            stored
        }

        fn update(&self, ar: &ApiResource, old: &ObjectMeta, new: ObjectMeta) {
            self.api.seed_value(ar, json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": new}));
            self.gc.process_graph_event(&GraphEvent::from_meta_event(ar, MetaEvent::Update { old, new: &new }));
        }

        /// Removes the object from the API and feeds the delete event.
        async fn delete(&self, ar: &ApiResource, meta: &ObjectMeta) {
            let _ = self
                .api
                .delete(ar, meta.namespace.as_deref(), meta.name.as_deref().unwrap(), &DeleteOptions::default())
                .await;
            self.gc.process_graph_event(&GraphEvent::from_meta_event(ar, MetaEvent::Delete(meta)));
        }

        /// Runs attemptToDelete for every queued uid (one round), applying virtual events.
        async fn run_attempts(&self) {
            let q = self.gc.attempt_to_delete_queue();
            let mut uids = Vec::new();
            while !q.is_empty() {
                let uid = q.get().await.unwrap();
                q.done(&uid);
                uids.push(uid);
            }
            for uid in uids {
                let _ = self.gc.attempt_to_delete_item(&uid).await;
            }
            self.gc.drain_graph_events();
        }

        fn deletes(&self) -> Vec<(String, Option<PropagationPolicy>)> {
            self.api
                .mutations()
                .into_iter()
                .filter(|a| a.verb == "delete")
                .map(|a| (a.name, a.delete_options.and_then(|o| o.propagation_policy)))
                .collect()
        }
    }

    fn meta(name: &str, owners: &[(&ObjectMeta, &ApiResource, bool)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("{name}-uid")),
            owner_references: (!owners.is_empty()).then(|| {
                owners
                    .iter()
                    .map(|(o, ar, block)| OwnerReference {
                        api_version: ar.api_version.clone(),
                        kind: ar.kind.clone(),
                        name: o.name.clone().unwrap(),
                        uid: o.uid.clone().unwrap(),
                        controller: Some(true),
                        block_owner_deletion: Some(*block),
                    })
                    .collect()
            }),
            ..Default::default()
        }
    }

    fn in_namespace(mut m: ObjectMeta, ns: Option<&str>) -> ObjectMeta {
        m.namespace = ns.map(str::to_string);
        m
    }

    impl Fixture {
        fn events(&self) -> Vec<String> {
            self.gc.recorder.recorded().iter().map(|e| e.summary()).collect()
        }
    }

    const INVALID_NAMESPACE_EVENT: &str = "Warning OwnerRefInvalidNamespace ownerRef [apps/v1/Deployment, \
        namespace: ns-b, name: web, uid: web-uid] does not exist in namespace \"ns-b\"";

    fn deleting(mut m: ObjectMeta, finalizer: &str) -> ObjectMeta {
        m.deletion_timestamp = Some(Time(Timestamp::from_second(1_700_000_000).unwrap()));
        m.finalizers = Some(vec![finalizer.to_string()]);
        m
    }

    #[tokio::test]
    async fn background_deletion_collects_dependents_of_a_deleted_owner() {
        let f = Fixture::new().await;
        let (d_ar, rs_ar, pod_ar) = (resource_of::<Deployment>(), resource_of::<ReplicaSet>(), resource_of::<Pod>());
        let d = f.add(&d_ar, meta("web", &[]));
        let rs = f.add(&rs_ar, meta("web-abc", &[(&d, &d_ar, true)]));
        let pod = f.add(&pod_ar, meta("web-abc-1", &[(&rs, &rs_ar, true)]));
        f.run_attempts().await;
        assert!(f.deletes().is_empty(), "owners exist: nothing to collect");

        f.delete(&d_ar, &d).await;
        f.api.clear_actions();
        f.run_attempts().await;
        assert_eq!(f.deletes(), [("web-abc".to_string(), Some(PropagationPolicy::Background))]);
        let del = f.api.mutations().into_iter().find(|a| a.verb == "delete").unwrap();
        assert_eq!(del.delete_options.unwrap().precondition_uid.as_deref(), Some("web-abc-uid"));

        // The ReplicaSet's delete event cascades to its pod.
        f.gc.process_graph_event(&GraphEvent::from_meta_event(&rs_ar, MetaEvent::Delete(&rs)));
        f.api.clear_actions();
        f.run_attempts().await;
        assert_eq!(f.deletes(), [("web-abc-1".to_string(), Some(PropagationPolicy::Background))]);
        let _ = pod;
    }

    #[tokio::test]
    async fn a_dangling_reference_next_to_a_solid_one_is_removed() {
        let f = Fixture::new().await;
        let (d_ar, rs_ar) = (resource_of::<Deployment>(), resource_of::<ReplicaSet>());
        let alive = f.add(&d_ar, meta("alive", &[]));
        let gone = meta("gone", &[]);
        let rs = f.add(&rs_ar, meta("shared", &[(&alive, &d_ar, false), (&gone, &d_ar, false)]));
        f.api.clear_actions();
        // Round 1 verifies the virtual owner "gone"; round 2 examines its dependent.
        f.run_attempts().await;
        f.run_attempts().await;
        assert!(f.deletes().is_empty());
        let patch = f.api.mutations().into_iter().find(|a| a.verb == "patch").expect("patched");
        let refs = patch.body.unwrap()["metadata"]["ownerReferences"].clone();
        assert_eq!(refs.as_array().unwrap().len(), 1);
        assert_eq!(refs[0]["uid"], "alive-uid");
        let _ = rs;
    }

    #[tokio::test]
    async fn a_virtual_owner_that_does_not_exist_gets_its_dependents_collected() {
        let f = Fixture::new().await;
        let (d_ar, rs_ar) = (resource_of::<Deployment>(), resource_of::<ReplicaSet>());
        let never = meta("never-existed", &[]);
        f.add(&rs_ar, meta("orphaned", &[(&never, &d_ar, true)]));
        assert!(f.gc.with_graph(|g| g.node("never-existed-uid").is_some_and(|n| n.virtual_node)));
        f.api.clear_actions();
        // Round 1: the virtual owner is looked up, not found, removed by a virtual delete.
        f.run_attempts().await;
        assert!(f.gc.with_graph(|g| g.node("never-existed-uid").is_none()));
        // Round 2: its dependent is now dangling.
        f.run_attempts().await;
        assert_eq!(f.deletes(), [("orphaned".to_string(), Some(PropagationPolicy::Background))]);
    }

    #[tokio::test]
    async fn foreground_deletion_deletes_dependents_then_removes_the_finalizer() {
        let f = Fixture::new().await;
        let (d_ar, rs_ar) = (resource_of::<Deployment>(), resource_of::<ReplicaSet>());
        let d = f.add(&d_ar, meta("web", &[]));
        let rs = f.add(&rs_ar, meta("web-abc", &[(&d, &d_ar, true)]));
        f.run_attempts().await;
        // kubectl delete --cascade=foreground: the API server sets the finalizer.
        f.update(&d_ar, &d, deleting(d.clone(), FINALIZER_DELETE_DEPENDENTS));
        assert!(f.gc.with_graph(|g| g.node("web-uid").unwrap().deleting_dependents));
        f.api.clear_actions();
        f.run_attempts().await;
        assert_eq!(f.deletes(), [("web-abc".to_string(), Some(PropagationPolicy::Background))]);
        // The finalizer stays while the blocking dependent exists.
        assert!(!f.api.mutations().iter().any(|a| a.verb == "patch" && a.name == "web"));

        // The ReplicaSet is gone: the owner's finalizer is removed.
        f.gc.process_graph_event(&GraphEvent::from_meta_event(&rs_ar, MetaEvent::Delete(&rs)));
        f.api.clear_actions();
        f.run_attempts().await;
        let patch =
            f.api.mutations().into_iter().find(|a| a.verb == "patch" && a.name == "web").expect("finalizer removed");
        assert_eq!(patch.body.unwrap()["metadata"]["finalizers"], Value::Null);
    }

    #[tokio::test]
    async fn orphan_deletion_removes_the_owner_reference_then_the_finalizer() {
        let f = Fixture::new().await;
        let (d_ar, rs_ar) = (resource_of::<Deployment>(), resource_of::<ReplicaSet>());
        let d = f.add(&d_ar, meta("web", &[]));
        f.add(&rs_ar, meta("web-abc", &[(&d, &d_ar, true)]));
        f.update(&d_ar, &d, deleting(d.clone(), FINALIZER_ORPHAN_DEPENDENTS));
        let q = f.gc.attempt_to_orphan_queue();
        assert_eq!(q.len(), 1);
        f.api.clear_actions();
        f.gc.attempt_to_orphan("web-uid").await.unwrap();
        let patches: Vec<_> = f.api.mutations().into_iter().filter(|a| a.verb == "patch").collect();
        assert_eq!(patches[0].name, "web-abc");
        assert_eq!(patches[0].body.as_ref().unwrap()["metadata"]["ownerReferences"], Value::Null);
        assert_eq!(patches[1].name, "web");
        assert_eq!(patches[1].body.as_ref().unwrap()["metadata"]["finalizers"], Value::Null);
        assert!(f.deletes().is_empty());
    }

    #[tokio::test]
    async fn dependents_of_custom_resources_are_collected() {
        let f = Fixture::new().await;
        let pod_ar = resource_of::<Pod>();
        let w = f.add(&widget(), meta("gizmo", &[]));
        f.add(&pod_ar, meta("gizmo-worker", &[(&w, &widget(), true)]));
        f.delete(&widget(), &w).await;
        f.api.clear_actions();
        f.run_attempts().await;
        assert_eq!(f.deletes(), [("gizmo-worker".to_string(), Some(PropagationPolicy::Background))]);
    }

    #[tokio::test]
    async fn a_namespaced_owner_in_another_namespace_is_absent_and_its_dependent_is_collected_with_an_event() {
        let f = Fixture::new().await;
        let (d_ar, pod_ar) = (resource_of::<Deployment>(), resource_of::<Pod>());
        let d = f.add(&d_ar, in_namespace(meta("web", &[]), Some("ns-a")));
        let bad = f.add(&pod_ar, in_namespace(meta("bad", &[(&d, &d_ar, true)]), Some("ns-b")));
        assert_eq!(f.events(), [INVALID_NAMESPACE_EVENT]);
        let event = &f.gc.recorder.recorded()[0];
        assert_eq!(event.object.name.as_deref(), Some("bad"));
        assert_eq!(event.object.namespace.as_deref(), Some("ns-b"));
        f.api.clear_actions();
        f.run_attempts().await;
        assert_eq!(f.deletes(), [("bad".to_string(), Some(PropagationPolicy::Background))]);
        let _ = bad;

        // The owner is absent from ns-b only: its dependent in its own namespace stays.
        let good = f.add(&pod_ar, in_namespace(meta("good", &[(&d, &d_ar, true)]), Some("ns-a")));
        f.api.clear_actions();
        f.gc.attempt_to_delete_item(good.uid.as_deref().unwrap()).await.unwrap();
        assert!(f.deletes().is_empty());
        assert_eq!(f.events().len(), 1);
    }

    #[tokio::test]
    async fn a_dependent_seen_before_its_owner_in_another_namespace_gets_the_event_and_is_collected() {
        let f = Fixture::new().await;
        let (d_ar, pod_ar) = (resource_of::<Deployment>(), resource_of::<Pod>());
        let d = in_namespace(meta("web", &[]), Some("ns-a"));
        f.add(&pod_ar, in_namespace(meta("bad", &[(&d, &d_ar, true)]), Some("ns-b")));
        assert!(f.events().is_empty(), "a virtual owner is not known to be elsewhere");
        // The owner is observed in ns-a before the virtual node was verified.
        f.add(&d_ar, d.clone());
        assert_eq!(f.events(), [INVALID_NAMESPACE_EVENT]);
        f.api.clear_actions();
        f.run_attempts().await;
        assert_eq!(f.deletes(), [("bad".to_string(), Some(PropagationPolicy::Background))]);
        assert!(f.gc.with_graph(|g| g.node("web-uid").is_some_and(|n| !n.virtual_node)));
    }

    #[tokio::test]
    async fn a_cluster_scoped_dependent_of_a_namespaced_owner_is_reported_and_never_collected() {
        let f = Fixture::new().await;
        let (d_ar, node_ar) = (resource_of::<Deployment>(), resource_of::<k8s_openapi::api::core::v1::Node>());
        let d = f.add(&d_ar, in_namespace(meta("web", &[]), Some("ns-a")));
        let n = f.add(&node_ar, in_namespace(meta("n1", &[(&d, &d_ar, true)]), None));
        assert_eq!(
            f.events(),
            ["Warning OwnerRefInvalidNamespace ownerRef [apps/v1/Deployment, namespace: , name: web, uid: web-uid] \
              does not exist in namespace \"\""]
        );
        f.api.clear_actions();
        let err = f.gc.attempt_to_delete_item(n.uid.as_deref().unwrap()).await.unwrap_err();
        assert!(matches!(err, GcError::NamespacedOwnerOfClusterScopedObject(..)), "{err}");
        assert!(f.deletes().is_empty());
        // Not retried.
        let reconciled = AttemptToDelete(f.gc.clone()).reconcile(n.uid.as_deref().unwrap()).await.unwrap();
        assert_eq!(reconciled, Action::AwaitChange);
    }

    #[tokio::test]
    async fn a_reference_with_the_right_uid_but_another_kind_or_name_is_dangling() {
        let f = Fixture::new().await;
        let (d_ar, rs_ar, pod_ar) = (resource_of::<Deployment>(), resource_of::<ReplicaSet>(), resource_of::<Pod>());
        let d = f.add(&d_ar, meta("web", &[]));
        // The uid is the Deployment's; the kind says ReplicaSet, and no ReplicaSet "web" exists.
        f.add(&pod_ar, meta("wrong-kind", &[(&d, &rs_ar, true)]));
        let mut renamed = d.clone();
        renamed.name = Some("other".into());
        f.add(&pod_ar, meta("wrong-name", &[(&renamed, &d_ar, true)]));
        let right = f.add(&pod_ar, meta("right", &[(&d, &d_ar, true)]));
        assert!(f.events().is_empty(), "same namespace: no event");
        f.api.clear_actions();
        f.run_attempts().await;
        let mut deleted: Vec<String> = f.deletes().into_iter().map(|(n, _)| n).collect();
        deleted.sort();
        assert_eq!(deleted, ["wrong-kind", "wrong-name"]);
        // The owner itself is not taken for absent.
        f.api.clear_actions();
        f.gc.attempt_to_delete_item(right.uid.as_deref().unwrap()).await.unwrap();
        assert!(f.deletes().is_empty());
    }

    #[tokio::test]
    async fn an_owner_whose_name_now_belongs_to_another_uid_is_dangling() {
        let f = Fixture::new().await;
        let (d_ar, pod_ar) = (resource_of::<Deployment>(), resource_of::<Pod>());
        f.add(&d_ar, meta("web", &[]));
        let mut old = meta("web", &[]);
        old.uid = Some("old-web-uid".into());
        f.add(&pod_ar, meta("leftover", &[(&old, &d_ar, true)]));
        f.api.clear_actions();
        f.run_attempts().await;
        f.run_attempts().await;
        assert_eq!(f.deletes(), [("leftover".to_string(), Some(PropagationPolicy::Background))]);
    }

    #[tokio::test]
    async fn a_virtual_owner_found_absent_under_one_name_stays_under_the_name_other_dependents_give() {
        let f = Fixture::new().await;
        let (d_ar, pod_ar) = (resource_of::<Deployment>(), resource_of::<Pod>());
        // The Deployment exists but is not observed yet; one dependent misnames it.
        let d = meta("web", &[]);
        f.api.seed_value(&d_ar, json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": d}));
        let mut misnamed = d.clone();
        misnamed.name = Some("wrong".into());
        f.add(&pod_ar, meta("a-misnamed", &[(&misnamed, &d_ar, true)]));
        f.add(&pod_ar, meta("b-right", &[(&d, &d_ar, true)]));
        assert_eq!(f.gc.with_graph(|g| g.node("web-uid").unwrap().identity.name.clone()), "wrong");
        f.api.clear_actions();
        // "wrong" is not found: the node stays, now named as the other dependent names it.
        f.run_attempts().await;
        assert_eq!(
            f.gc.with_graph(|g| g.node("web-uid").map(|n| (n.identity.name.clone(), n.virtual_node))),
            Some(("web".to_string(), true))
        );
        f.run_attempts().await;
        assert_eq!(f.deletes(), [("a-misnamed".to_string(), Some(PropagationPolicy::Background))]);
        // Observed at last: still the owner of the dependent that named it right.
        f.gc.process_graph_event(&GraphEvent::from_meta_event(&d_ar, MetaEvent::Add(&d)));
        assert!(f.gc.with_graph(|g| g.node("web-uid").unwrap().dependents.contains("b-right-uid")));
    }

    #[test]
    fn the_graph_links_dependents_and_unlinks_removed_references() {
        let mut g = Graph::new();
        let d_ar = resource_of::<Deployment>();
        let rs_ar = resource_of::<ReplicaSet>();
        let d = meta("web", &[]);
        let rs = meta("web-abc", &[(&d, &d_ar, true)]);
        let (work, _) = g.process(&GraphEvent::from_meta_event(&rs_ar, MetaEvent::Add(&rs)));
        // The owner is not known yet: a virtual node to verify.
        assert_eq!(work, [Work::AttemptToDelete("web-uid".into())]);
        let (work, _) = g.process(&GraphEvent::from_meta_event(&d_ar, MetaEvent::Add(&d)));
        assert!(work.is_empty());
        assert!(!g.node("web-uid").unwrap().virtual_node);
        assert!(g.node("web-uid").unwrap().dependents.contains("web-abc-uid"));
        let mut released = rs.clone();
        released.owner_references = None;
        g.process(&GraphEvent::from_meta_event(&rs_ar, MetaEvent::Update { old: &rs, new: &released }));
        assert!(g.node("web-uid").unwrap().dependents.is_empty());
        let ev = GraphEvent::virtual_delete(g.node("web-uid").unwrap().identity.clone());
        assert_eq!(ev.event_type, EventType::Delete);
    }
}
