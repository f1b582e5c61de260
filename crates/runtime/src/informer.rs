//! Shared informers: one list+watch per resource type, an indexed local cache, and event
//! handlers that only enqueue keys (`client-go`'s `SharedIndexInformer`).
//!
//! - An informer's source is a [`ListerWatcher`] (client-go's `cache.ListerWatcher` plus the
//!   `Reflector` driving it): a stream of list+watch events over shared objects. In production
//!   it is [`ApiListerWatcher`], whose state machine is `kube::runtime::watcher`: it lists, then
//!   watches from the list's `resourceVersion`, resumes a broken watch from the last version
//!   seen (bookmarks included), and on **410 Gone** (the version was compacted) starts over with
//!   a full relist (`Event::Init`). Errors are retried with `kube`'s default backoff.
//! - [`Store`] is the cache: objects by `namespace/name` key plus named indexes
//!   ([`NAMESPACE_INDEX`], [`OWNER_UID_INDEX`], [`NODE_NAME_INDEX`], or any [`IndexFunc`]).
//! - An [`Informer`] applies watch events to its store, then calls every
//!   [`ResourceEventHandler`] with the old and new object. A relist is diffed against the cache:
//!   new objects are adds, known ones updates, missing ones deletes. Every `resync_period` each
//!   cached object is re-delivered as an update with `old == new` (periodic resync).
//! - [`SharedInformerFactory`] hands out one informer per resource (typed for the k8s-openapi
//!   types, `DynamicObject` for anything else), so all controllers share one watch and one cache.
//!
//! Reference: `k8s.io/client-go/tools/cache` (`shared_informer.go`, `thread_safe_store.go`,
//! `index.go`, `reflector.go`).

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use parking_lot::{Mutex, RwLock};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::api::ApiResource;

/// Index of objects by `metadata.namespace` (`cache.NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";
/// Index of objects by the uid of each of their `ownerReferences`.
pub const OWNER_UID_INDEX: &str = "ownerUID";
/// Index of pods by `spec.nodeName` (added to the pod informer by whoever needs it).
pub const NODE_NAME_INDEX: &str = "spec.nodeName";

/// Computes the index values of an object.
pub type IndexFunc<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// `MetaNamespaceKeyFunc`: `namespace/name` for namespaced objects, `name` otherwise.
pub fn key_of<K: Resource>(obj: &K) -> String {
    let meta = obj.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Drops `metadata.managedFields` from an object about to be cached, as kube-controller-manager's
/// and kube-scheduler's informers do (client-go `cache.TransformStripManagedFields`): no
/// controller reads them, and they are a large part of small objects such as Leases. Writes of
/// a cached object stay correct: an update without managedFields keeps the stored ones.
pub fn strip_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Drops the volumes of a Pod whose content comes from the API server or the node — `configMap`,
/// `secret`, `downwardAPI`, `projected` (the `kube-api-access-*` volume the ServiceAccount
/// admission adds to every pod) and `emptyDir` — from a copy about to be cached. No controller
/// here and no scheduler plugin reads them (kube-scheduler's volume plugins — VolumeBinding,
/// VolumeRestrictions, VolumeZone, NodeVolumeLimits — look only at persistent, CSI, ephemeral
/// and cloud-disk volumes, which are kept), and a typed `Volume` is ~2 KB of mostly empty
/// fields plus its sources: about a third of a small cached Pod. `volumeMounts` still name the
/// dropped volumes; nothing writes a cached pod's spec back (spec.volumes is immutable anyway).
pub fn strip_api_sourced_volumes(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else { return };
    let Some(volumes) = spec.volumes.as_mut() else { return };
    volumes.retain(|v| {
        v.config_map.is_none()
            && v.secret.is_none()
            && v.downward_api.is_none()
            && v.projected.is_none()
            && v.empty_dir.is_none()
    });
    if volumes.is_empty() {
        spec.volumes = None;
    } else {
        volumes.shrink_to_fit();
    }
}

/// The transform every informer cache applies to an object before storing it (client-go's
/// `SetTransform` with `TransformStripManagedFields`): [`strip_managed_fields`], and for Pods
/// [`strip_api_sourced_volumes`].
pub fn transform_for_cache<K: Resource + 'static>(obj: &mut K) {
    strip_managed_fields(obj);
    if let Some(pod) = (obj as &mut dyn Any).downcast_mut::<Pod>() {
        strip_api_sourced_volumes(pod);
    }
}

/// Reduces a `DynamicObject` to its type and metadata (a `PartialObjectMetadata`, as the
/// garbage collector's metadata informers in kube-controller-manager cache): the metadata view
/// ([`MetaInformer`]) is all that reads it, so its spec and status are not kept.
pub fn metadata_only(obj: &mut DynamicObject) {
    obj.data = serde_json::Value::Null;
    strip_managed_fields(obj);
}

/// Splits a queue key into `(namespace, name)` (`SplitMetaNamespaceKey`).
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

struct StoreInner<K> {
    items: HashMap<String, Arc<K>>,
    indexers: Vec<(&'static str, IndexFunc<K>)>,
    /// index name → index value → object keys.
    indices: HashMap<&'static str, HashMap<String, HashSet<String>>>,
}

impl<K> StoreInner<K> {
    fn index_add(&mut self, key: &str, obj: &K) {
        for (name, f) in &self.indexers {
            let idx = self.indices.entry(name).or_default();
            for v in f(obj) {
                idx.entry(v).or_default().insert(key.to_string());
            }
        }
    }

    fn index_remove(&mut self, key: &str, obj: &K) {
        for (name, f) in &self.indexers {
            if let Some(idx) = self.indices.get_mut(name) {
                for v in f(obj) {
                    if let Some(set) = idx.get_mut(&v) {
                        set.remove(key);
                        if set.is_empty() {
                            idx.remove(&v);
                        }
                    }
                }
            }
        }
    }
}

/// A thread-safe, indexed object cache (`cache.Indexer`). Cloning shares the cache.
pub struct Store<K> {
    inner: Arc<RwLock<StoreInner<K>>>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<K: Resource + Send + Sync + 'static> Default for Store<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Resource + Send + Sync + 'static> Store<K> {
    /// An empty store with the namespace and owner-uid indexes.
    pub fn new() -> Self {
        let store = Self {
            inner: Arc::new(RwLock::new(StoreInner {
                items: HashMap::new(),
                indexers: Vec::new(),
                indices: HashMap::new(),
            })),
        };
        store.add_indexer(NAMESPACE_INDEX, |o: &K| o.meta().namespace.iter().cloned().collect());
        store.add_indexer(OWNER_UID_INDEX, |o: &K| {
            o.meta().owner_references.iter().flatten().map(|r| r.uid.clone()).collect()
        });
        store
    }

    /// Adds a named index (no-op if one with that name exists); existing objects are indexed.
    pub fn add_indexer(&self, name: &'static str, f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static) {
        let mut inner = self.inner.write();
        if inner.indexers.iter().any(|(n, _)| *n == name) {
            return;
        }
        let f: IndexFunc<K> = Arc::new(f);
        let mut idx: HashMap<String, HashSet<String>> = HashMap::new();
        for (key, obj) in &inner.items {
            for v in f(obj) {
                idx.entry(v).or_default().insert(key.clone());
            }
        }
        inner.indices.insert(name, idx);
        inner.indexers.push((name, f));
    }

    /// The object with this key (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.inner.read().items.get(key).cloned()
    }

    /// The object `name` in `namespace` (`None` for cluster-scoped).
    pub fn get_namespaced(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        match namespace {
            Some(ns) if !ns.is_empty() => self.get(&format!("{ns}/{name}")),
            _ => self.get(name),
        }
    }

    /// Every cached object (unordered).
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.read().items.values().cloned().collect()
    }

    /// Every cached key.
    pub fn keys(&self) -> Vec<String> {
        self.inner.read().items.keys().cloned().collect()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.inner.read().items.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects whose index `index` contains `value` (`ByIndex`); empty for an unknown index.
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let inner = self.inner.read();
        let Some(keys) = inner.indices.get(index).and_then(|idx| idx.get(value)) else {
            return Vec::new();
        };
        keys.iter().filter_map(|k| inner.items.get(k).cloned()).collect()
    }

    /// The objects in `namespace`.
    pub fn list_namespace(&self, namespace: &str) -> Vec<Arc<K>> {
        self.by_index(NAMESPACE_INDEX, namespace)
    }

    /// Inserts or replaces an object; returns the new entry and the previous one.
    ///
    /// The object is reduced first by [`transform_for_cache`] (no managedFields; for Pods, no
    /// API-sourced volumes).
    pub fn apply(&self, mut obj: K) -> (Arc<K>, Option<Arc<K>>) {
        transform_for_cache(&mut obj);
        self.insert(Arc::new(obj))
    }

    /// Inserts or replaces an object already in its cached form (a [`ListerWatcher`] applied
    /// the transform), sharing it instead of copying it; returns it and the previous entry.
    pub fn insert(&self, obj: Arc<K>) -> (Arc<K>, Option<Arc<K>>) {
        let key = key_of(&*obj);
        let mut inner = self.inner.write();
        let old = inner.items.insert(key.clone(), obj.clone());
        if let Some(old) = &old {
            inner.index_remove(&key, old);
        }
        inner.index_add(&key, &obj);
        (obj, old)
    }

    /// Removes the object with this key; returns it if it was cached.
    pub fn remove(&self, key: &str) -> Option<Arc<K>> {
        let mut inner = self.inner.write();
        let old = inner.items.remove(key);
        if let Some(old) = &old {
            inner.index_remove(key, old);
        }
        old
    }
}

/// Callbacks of an informer. They run on the informer's task and must be quick: handlers only
/// compute keys and enqueue them.
pub trait ResourceEventHandler<K>: Send + Sync {
    /// An object appeared (first list, watch ADDED, or relist).
    fn on_add(&self, obj: &Arc<K>);
    /// An object changed; `old == new` (same resourceVersion) on a periodic resync.
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>);
    /// An object disappeared (watch DELETED, or missing from a relist), last known state.
    fn on_delete(&self, obj: &Arc<K>);
}

type Callback1<K> = Box<dyn Fn(&Arc<K>) + Send + Sync>;
type Callback2<K> = Box<dyn Fn(&Arc<K>, &Arc<K>) + Send + Sync>;

/// A [`ResourceEventHandler`] from closures (`cache.ResourceEventHandlerFuncs`).
pub struct HandlerFns<K> {
    add: Option<Callback1<K>>,
    update: Option<Callback2<K>>,
    delete: Option<Callback1<K>>,
}

impl<K> Default for HandlerFns<K> {
    fn default() -> Self {
        Self { add: None, update: None, delete: None }
    }
}

impl<K> HandlerFns<K> {
    /// No callbacks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the add callback.
    pub fn on_add(mut self, f: impl Fn(&Arc<K>) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    /// Sets the update callback.
    pub fn on_update(mut self, f: impl Fn(&Arc<K>, &Arc<K>) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// Sets the delete callback.
    pub fn on_delete(mut self, f: impl Fn(&Arc<K>) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: Send + Sync> ResourceEventHandler<K> for HandlerFns<K> {
    fn on_add(&self, obj: &Arc<K>) {
        if let Some(f) = &self.add {
            f(obj)
        }
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &self.update {
            f(old, new)
        }
    }
    fn on_delete(&self, obj: &Arc<K>) {
        if let Some(f) = &self.delete {
            f(obj)
        }
    }
}

/// A metadata-only event, for consumers that handle every resource alike (the garbage collector).
#[derive(Debug, Clone, Copy)]
pub enum MetaEvent<'a> {
    /// An object appeared.
    Add(&'a ObjectMeta),
    /// An object changed.
    Update {
        /// Previous state.
        old: &'a ObjectMeta,
        /// New state.
        new: &'a ObjectMeta,
    },
    /// An object disappeared.
    Delete(&'a ObjectMeta),
}

/// Receives [`MetaEvent`]s of some resource.
pub trait MetaEventHandler: Send + Sync {
    /// Called for each event with the resource the object belongs to.
    fn on_meta_event(&self, resource: &ApiResource, event: MetaEvent<'_>);
}

/// The type-erased view of any informer that the garbage collector uses.
pub trait MetaInformer: Send + Sync {
    /// The watched resource.
    fn resource(&self) -> &ApiResource;
    /// Adds a metadata handler (existing objects are replayed as adds).
    fn add_meta_handler(&self, handler: Arc<dyn MetaEventHandler>);
    /// Whether the first list has been applied.
    fn has_synced(&self) -> bool;
    /// Metadata of every cached object.
    fn list_meta(&self) -> Vec<ObjectMeta>;
}

/// The events of a [`ListerWatcher`]: `kube::runtime::watcher`'s list+watch events over
/// shared, immutable objects in their cached form.
pub type WatchStream<K> = BoxStream<'static, Result<Event<Arc<K>>, watcher::Error>>;

/// Where an [`Informer`] gets its objects from (client-go's `cache.ListerWatcher`, driven as its
/// `Reflector` drives one).
///
/// The stream must keep the API's list+watch semantics, which the informer relies on: a list is
/// `Init`, one `InitApply` per object and `InitDone` (the informer diffs it against its cache
/// and reports synced after the first); then `Apply`/`Delete` in resourceVersion order, resumed
/// from the last version seen (bookmarks advance it) after a broken watch; and when that version
/// is gone (410 Gone, compacted) a fresh `Init` relist. Errors are reported as `Err` items and
/// retried by the source itself; the informer only logs them. Objects arrive already reduced to
/// their cached form ([`transform_for_cache`] or [`metadata_only`]), since the source is where a
/// copy is made.
///
/// [`ApiListerWatcher`] is the production source, a watch stream of the API decoded by
/// `kube::runtime::watcher`, which is what out-of-process clients use. The objects are `Arc`s so
/// that a source inside the API server's process can hand every informer the server's own
/// decoded objects from its watch cache — one shared copy per object revision, reduced once —
/// instead of each informer decoding its own copy of the same watch stream.
pub trait ListerWatcher<K>: Send {
    /// Starts listing and watching; the stream ends only when the source is shut down.
    fn list_watch(self: Box<Self>) -> WatchStream<K>;
}

/// The [`ListerWatcher`] of an API watch (cluster-wide, `kube::runtime::watcher` with its
/// default backoff); each decoded object is reduced by `transform` before it is shared.
pub struct ApiListerWatcher<K: Resource> {
    api: Api<K>,
    config: watcher::Config,
    transform: fn(&mut K),
}

impl<K: Resource> ApiListerWatcher<K> {
    /// A source watching `api` with `config`, reducing objects with [`transform_for_cache`].
    pub fn new(api: Api<K>, config: watcher::Config) -> Self
    where
        K: 'static,
    {
        Self { api, config, transform: transform_for_cache::<K> }
    }

    /// Replaces the transform applied to each object before it is cached.
    pub fn with_transform(mut self, transform: fn(&mut K)) -> Self {
        self.transform = transform;
        self
    }
}

impl<K> ListerWatcher<K> for ApiListerWatcher<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn list_watch(self: Box<Self>) -> WatchStream<K> {
        let transform = self.transform;
        // The transform's address tells apart the cached forms of one type (a metadata-only
        // copy is not a full one); two addresses for one function only cost sharing.
        let form = transform as usize;
        watcher::watcher(self.api, self.config)
            .default_backoff()
            .modify(transform)
            .map(move |event| event.map(|e| intern_event(e, form)))
            .boxed()
    }
}

/// Identifies one revision of one object in one cached form: the type, the transform that
/// made the form, the object's uid (unique across clusters and resources, so informers of
/// two API servers in one process never meet) and its `resourceVersion`.
#[derive(Hash, PartialEq, Eq)]
struct RevisionKey {
    type_id: std::any::TypeId,
    form: usize,
    uid: String,
}

/// The newest revision of each object seen by any [`ApiListerWatcher`] of the process, held
/// weakly: while an informer cache holds it, every other informer that decodes the same revision
/// gets this copy instead of keeping its own (see [`intern`]).
struct Revisions {
    entries: HashMap<RevisionKey, (String, std::sync::Weak<dyn Any + Send + Sync>)>,
    /// Entries of deleted objects stay until the table reaches this size, then dead ones are
    /// swept (amortized O(1) per insert).
    sweep_at: usize,
}

static REVISIONS: std::sync::LazyLock<Mutex<Revisions>> =
    std::sync::LazyLock::new(|| Mutex::new(Revisions { entries: HashMap::new(), sweep_at: 1024 }));

/// Whether `a` is an older resourceVersion than `b` (both numeric, as every Kubernetes API
/// server's are in practice; opaque ones are never older, so the newer write wins).
fn older(a: &str, b: &str) -> bool {
    matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(a), Ok(b)) if a < b)
}

/// Shares one copy of each object revision among the process's informers.
///
/// Every in-process component (controller manager, scheduler, node lifecycle controller,
/// simulated nodes) runs its own informers over its own watch of the API, as separate
/// processes would, so the same revision of a Pod arrives decoded once per informer. This
/// returns the copy another informer already holds for the same type, cached form, uid and
/// `resourceVersion` — dropping the fresh decode — or registers `obj` as that copy. Objects
/// without a uid or resourceVersion are not shared.
///
/// Sharing invariant: cached objects are immutable (`Arc<K>`); a component that changes one
/// copies it first (`(*obj).clone()` or `Arc::make_mut`, which copies a shared object).
fn intern<K: Resource + Send + Sync + 'static>(obj: K, form: usize) -> Arc<K> {
    let meta = obj.meta();
    let (Some(uid), Some(rv)) = (meta.uid.as_deref(), meta.resource_version.as_deref()) else {
        return Arc::new(obj);
    };
    let key = RevisionKey { type_id: std::any::TypeId::of::<K>(), form, uid: uid.to_string() };
    let mut revisions = REVISIONS.lock();
    if let Some((held_rv, weak)) = revisions.entries.get(&key)
        && let Some(held) = weak.upgrade()
    {
        if held_rv == rv
            && let Ok(held) = held.downcast::<K>()
        {
            return held;
        }
        if older(rv, held_rv) {
            // A lagging informer's older revision: not worth displacing the newer one.
            return Arc::new(obj);
        }
    }
    let rv = rv.to_string();
    let shared = Arc::new(obj);
    let erased: Arc<dyn Any + Send + Sync> = shared.clone();
    revisions.entries.insert(key, (rv, Arc::downgrade(&erased)));
    if revisions.entries.len() >= revisions.sweep_at {
        revisions.entries.retain(|_, (_, weak)| weak.strong_count() > 0);
        revisions.sweep_at = (revisions.entries.len() * 2).max(1024);
    }
    shared
}

/// The same event over a shared object, one copy per revision in the process ([`intern`]).
fn intern_event<K: Resource + Send + Sync + 'static>(event: Event<K>, form: usize) -> Event<Arc<K>> {
    match event {
        Event::Apply(obj) => Event::Apply(intern(obj, form)),
        Event::Delete(obj) => Event::Delete(intern(obj, form)),
        Event::Init => Event::Init,
        Event::InitApply(obj) => Event::InitApply(intern(obj, form)),
        Event::InitDone => Event::InitDone,
    }
}

/// The same event over a shared object.
fn share_event<K>(event: Event<K>) -> Event<Arc<K>> {
    match event {
        Event::Apply(obj) => Event::Apply(Arc::new(obj)),
        Event::Delete(obj) => Event::Delete(Arc::new(obj)),
        Event::Init => Event::Init,
        Event::InitApply(obj) => Event::InitApply(Arc::new(obj)),
        Event::InitDone => Event::InitDone,
    }
}

/// One resource's list+watch, cache and handlers (`SharedIndexInformer`).
pub struct Informer<K> {
    resource: ApiResource,
    store: Store<K>,
    handlers: RwLock<Vec<Arc<dyn ResourceEventHandler<K>>>>,
    synced: tokio::sync::watch::Sender<bool>,
    resync_period: Option<Duration>,
    init_buffer: Mutex<Option<Vec<Arc<K>>>>,
    source: Mutex<Option<Box<dyn ListerWatcher<K>>>>,
}

impl<K: Resource + Clone + Send + Sync + 'static> Informer<K> {
    /// An informer without a watch source (tests seed its store and call
    /// [`Informer::handle_event`]).
    pub fn new(resource: ApiResource, resync_period: Option<Duration>) -> Self {
        Self {
            resource,
            store: Store::new(),
            handlers: RwLock::new(Vec::new()),
            synced: tokio::sync::watch::channel(false).0,
            resync_period,
            init_buffer: Mutex::new(None),
            source: Mutex::new(None),
        }
    }

    /// An informer fed by `source` once [`Informer::start`] is called.
    pub fn with_source(
        resource: ApiResource,
        resync_period: Option<Duration>,
        source: impl ListerWatcher<K> + 'static,
    ) -> Self {
        let informer = Self::new(resource, resync_period);
        *informer.source.lock() = Some(Box::new(source));
        informer
    }

    /// The watched resource.
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The cache (a shared handle).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Registers a handler. Objects already cached are delivered to it as adds first.
    pub fn add_event_handler(&self, handler: Arc<dyn ResourceEventHandler<K>>) {
        let existing = {
            let mut handlers = self.handlers.write();
            handlers.push(handler.clone());
            self.store.list()
        };
        for obj in existing {
            handler.on_add(&obj);
        }
    }

    /// Whether the first complete list has been applied to the cache.
    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until [`Informer::has_synced`] (`WaitForCacheSync`).
    pub async fn wait_for_sync(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Marks the cache as synced without a watch (tests).
    pub fn mark_synced(&self) {
        self.synced.send_replace(true);
    }

    fn handlers(&self) -> Vec<Arc<dyn ResourceEventHandler<K>>> {
        self.handlers.read().clone()
    }

    /// Applies one watch event to the cache and notifies the handlers; its object is reduced
    /// by [`transform_for_cache`] first.
    pub fn handle_event(&self, event: Event<K>) {
        self.handle_shared_event(share_event(event.modify(transform_for_cache)));
    }

    /// Applies one event of a [`ListerWatcher`] (objects in their cached form) to the cache and
    /// notifies the handlers.
    pub fn handle_shared_event(&self, event: Event<Arc<K>>) {
        match event {
            Event::Init => *self.init_buffer.lock() = Some(Vec::new()),
            Event::InitApply(obj) => self.init_buffer.lock().get_or_insert_with(Vec::new).push(obj),
            Event::InitDone => {
                let listed = self.init_buffer.lock().take().unwrap_or_default();
                self.replace(listed);
                self.synced.send_replace(true);
            }
            Event::Apply(obj) => {
                let (new, old) = self.store.insert(obj);
                for h in self.handlers() {
                    match &old {
                        Some(old) => h.on_update(old, &new),
                        None => h.on_add(&new),
                    }
                }
            }
            Event::Delete(obj) => {
                let key = key_of(&*obj);
                let last = self.store.remove(&key).unwrap_or(obj);
                for h in self.handlers() {
                    h.on_delete(&last);
                }
            }
        }
    }

    /// Replaces the cache with a complete list (`Replace`): adds, updates and deletes are
    /// delivered for the difference.
    fn replace(&self, listed: Vec<Arc<K>>) {
        let mut seen = HashSet::new();
        let mut changes = Vec::new();
        for obj in listed {
            seen.insert(key_of(&*obj));
            let (new, old) = self.store.insert(obj);
            changes.push((old, Some(new)));
        }
        for key in self.store.keys() {
            if !seen.contains(&key)
                && let Some(old) = self.store.remove(&key)
            {
                changes.push((Some(old), None));
            }
        }
        let handlers = self.handlers();
        for (old, new) in changes {
            for h in &handlers {
                match (&old, &new) {
                    (None, Some(n)) => h.on_add(n),
                    (Some(o), Some(n)) => h.on_update(o, n),
                    (Some(o), None) => h.on_delete(o),
                    (None, None) => {}
                }
            }
        }
    }

    /// Re-delivers every cached object as an update with `old == new` (periodic resync).
    pub fn resync(&self) {
        let handlers = self.handlers();
        for obj in self.store.list() {
            for h in &handlers {
                h.on_update(&obj, &obj);
            }
        }
    }

    /// Spawns the watch loop (no-op without a source or if already started).
    pub fn start(self: &Arc<Self>) -> Option<JoinHandle<()>> {
        let stream = self.source.lock().take()?.list_watch();
        let me = self.clone();
        Some(tokio::spawn(async move { me.run_stream(stream).await }))
    }

    /// Runs the watch loop on the caller's task (client-go's `informer.Run`) until the source
    /// ends or the future is dropped; returns at once without a source or if already started.
    pub async fn run(self: Arc<Self>) {
        let Some(source) = self.source.lock().take() else { return };
        self.run_stream(source.list_watch()).await
    }

    async fn run_stream(self: Arc<Self>, mut stream: WatchStream<K>) {
        let mut resync = self.resync_period.map(|p| tokio::time::interval_at(tokio::time::Instant::now() + p, p));
        loop {
            let tick = async {
                match resync.as_mut() {
                    Some(i) => {
                        i.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(event)) => self.handle_shared_event(event),
                    Some(Err(err)) => {
                        tracing::warn!(resource = %self.resource.plural, %err, "watch failed, retrying");
                    }
                    None => return,
                },
                _ = tick => {
                    if self.has_synced() {
                        self.resync();
                    }
                }
            }
        }
    }
}

struct MetaAdapter {
    resource: ApiResource,
    inner: Arc<dyn MetaEventHandler>,
}

impl<K: Resource + Send + Sync> ResourceEventHandler<K> for MetaAdapter {
    fn on_add(&self, obj: &Arc<K>) {
        self.inner.on_meta_event(&self.resource, MetaEvent::Add(obj.meta()));
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        self.inner.on_meta_event(&self.resource, MetaEvent::Update { old: old.meta(), new: new.meta() });
    }
    fn on_delete(&self, obj: &Arc<K>) {
        self.inner.on_meta_event(&self.resource, MetaEvent::Delete(obj.meta()));
    }
}

impl<K: Resource + Clone + Send + Sync + 'static> MetaInformer for Informer<K> {
    fn resource(&self) -> &ApiResource {
        &self.resource
    }

    fn add_meta_handler(&self, handler: Arc<dyn MetaEventHandler>) {
        self.add_event_handler(Arc::new(MetaAdapter { resource: self.resource.clone(), inner: handler }));
    }

    fn has_synced(&self) -> bool {
        Informer::has_synced(self)
    }

    fn list_meta(&self) -> Vec<ObjectMeta> {
        self.store.list().iter().map(|o| o.meta().clone()).collect()
    }
}

trait AnyInformer: Send + Sync {
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    fn as_meta(self: Arc<Self>) -> Arc<dyn MetaInformer>;
    fn start_any(self: Arc<Self>) -> Option<JoinHandle<()>>;
    fn synced(&self) -> bool;
}

impl<K: Resource + Clone + Send + Sync + 'static> AnyInformer for Informer<K> {
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
    fn as_meta(self: Arc<Self>) -> Arc<dyn MetaInformer> {
        self
    }
    fn start_any(self: Arc<Self>) -> Option<JoinHandle<()>> {
        self.start()
    }
    fn synced(&self) -> bool {
        self.has_synced()
    }
}

fn gvr_key(ar: &ApiResource) -> String {
    format!("{}/{}/{}", ar.group, ar.version, ar.plural)
}

/// Hands out one shared informer per resource (`SharedInformerFactory`). Without a client
/// (tests), informers have no watch and are filled by hand.
pub struct SharedInformerFactory {
    client: Option<kube::Client>,
    resync_period: Option<Duration>,
    informers: Mutex<HashMap<String, Arc<dyn AnyInformer>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl SharedInformerFactory {
    /// A factory whose informers watch through `client` and resync every `resync_period`.
    pub fn new(client: kube::Client, resync_period: Option<Duration>) -> Self {
        Self {
            client: Some(client),
            resync_period,
            informers: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// A factory whose informers never watch (unit tests seed their stores).
    pub fn for_tests() -> Self {
        Self { client: None, resync_period: None, informers: Mutex::new(HashMap::new()), tasks: Mutex::new(Vec::new()) }
    }

    /// The shared informer of a k8s-openapi type (created on first use; cluster-wide).
    pub fn informer<K>(&self) -> Arc<Informer<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let ar = ApiResource::erase::<K>(&());
        let key = gvr_key(&ar);
        let mut informers = self.informers.lock();
        if let Some(existing) = informers.get(&key)
            && let Ok(typed) = existing.clone().as_any().downcast::<Informer<K>>()
        {
            return typed;
        }
        let informer = Arc::new(match &self.client {
            Some(client) => {
                let source = ApiListerWatcher::new(Api::<K>::all(client.clone()), watcher::Config::default());
                Informer::with_source(ar, self.resync_period, source)
            }
            None => Informer::new(ar, self.resync_period),
        });
        // A dynamic informer registered first for the same resource is replaced for new users.
        informers.insert(key, informer.clone());
        informer
    }

    /// The shared informer of any resource as a metadata view: the typed informer if one
    /// exists, a `DynamicObject` informer otherwise.
    pub fn meta_informer(&self, ar: &ApiResource) -> Arc<dyn MetaInformer> {
        let key = gvr_key(ar);
        let mut informers = self.informers.lock();
        if let Some(existing) = informers.get(&key) {
            return existing.clone().as_meta();
        }
        let informer: Arc<Informer<DynamicObject>> = Arc::new(match &self.client {
            Some(client) => {
                let api = Api::<DynamicObject>::all_with(client.clone(), ar);
                // Only the metadata view reads this informer: drop the rest of each object as it
                // arrives, so the garbage collector's cache of every resource stays metadata-sized.
                let source = ApiListerWatcher::new(api, watcher::Config::default()).with_transform(metadata_only);
                Informer::with_source(ar.clone(), self.resync_period, source)
            }
            None => Informer::new(ar.clone(), self.resync_period),
        });
        informers.insert(key, informer.clone());
        informer
    }

    /// Starts every informer not started yet (safe to call again after adding informers).
    pub fn start(&self) {
        let informers: Vec<_> = self.informers.lock().values().cloned().collect();
        let mut tasks = self.tasks.lock();
        for i in informers {
            if let Some(handle) = i.start_any() {
                tasks.push(handle);
            }
        }
    }

    /// Whether every informer created so far has synced.
    pub fn has_synced(&self) -> bool {
        self.informers.lock().values().all(|i| i.synced())
    }

    /// Waits until every informer created so far has synced (`WaitForCacheSync`).
    pub async fn wait_for_cache_sync(&self) {
        while !self.has_synced() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops every watch.
    pub fn shutdown(&self) {
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
    }
}

impl Drop for SharedInformerFactory {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn pod(ns: &str, name: &str, rv: &str, node: Option<&str>, owner: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                owner_references: owner.map(|uid| {
                    vec![OwnerReference {
                        uid: uid.into(),
                        name: "rs".into(),
                        kind: "ReplicaSet".into(),
                        api_version: "apps/v1".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: node.map(str::to_string), ..Default::default() }),
            ..Default::default()
        }
    }

    #[derive(Default)]
    struct Counts {
        adds: AtomicUsize,
        updates: AtomicUsize,
        deletes: AtomicUsize,
    }

    impl ResourceEventHandler<Pod> for Counts {
        fn on_add(&self, _: &Arc<Pod>) {
            self.adds.fetch_add(1, Ordering::SeqCst);
        }
        fn on_update(&self, _: &Arc<Pod>, _: &Arc<Pod>) {
            self.updates.fetch_add(1, Ordering::SeqCst);
        }
        fn on_delete(&self, _: &Arc<Pod>) {
            self.deletes.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn informer() -> (Informer<Pod>, Arc<Counts>) {
        let i = Informer::new(ApiResource::erase::<Pod>(&()), None);
        let counts = Arc::new(Counts::default());
        i.add_event_handler(counts.clone());
        i.store().add_indexer(NODE_NAME_INDEX, |p: &Pod| {
            p.spec.as_ref().and_then(|s| s.node_name.clone()).into_iter().collect()
        });
        (i, counts)
    }

    #[test]
    fn indexes_find_objects_by_namespace_owner_and_node() {
        let (i, _) = informer();
        i.handle_event(Event::Apply(pod("a", "p1", "1", Some("n1"), Some("rs-uid"))));
        i.handle_event(Event::Apply(pod("a", "p2", "2", Some("n2"), None)));
        i.handle_event(Event::Apply(pod("b", "p3", "3", Some("n1"), Some("rs-uid"))));
        let names = |v: Vec<Arc<Pod>>| {
            let mut n: Vec<String> = v.iter().map(|p| key_of(p.as_ref())).collect();
            n.sort();
            n
        };
        assert_eq!(names(i.store().list_namespace("a")), ["a/p1", "a/p2"]);
        assert_eq!(names(i.store().by_index(OWNER_UID_INDEX, "rs-uid")), ["a/p1", "b/p3"]);
        assert_eq!(names(i.store().by_index(NODE_NAME_INDEX, "n1")), ["a/p1", "b/p3"]);
        // Moving a pod updates the index.
        i.handle_event(Event::Apply(pod("a", "p1", "4", Some("n2"), None)));
        assert_eq!(names(i.store().by_index(NODE_NAME_INDEX, "n1")), ["b/p3"]);
        assert_eq!(names(i.store().by_index(OWNER_UID_INDEX, "rs-uid")), ["b/p3"]);
        i.handle_event(Event::Delete(pod("b", "p3", "5", Some("n1"), None)));
        assert!(i.store().by_index(NODE_NAME_INDEX, "n1").is_empty());
    }

    #[test]
    fn a_relist_is_diffed_into_adds_updates_and_deletes() {
        let (i, counts) = informer();
        for e in [
            Event::Init,
            Event::InitApply(pod("a", "p1", "1", None, None)),
            Event::InitApply(pod("a", "p2", "1", None, None)),
            Event::InitDone,
        ] {
            i.handle_event(e);
        }
        assert!(i.has_synced());
        assert_eq!(counts.adds.load(Ordering::SeqCst), 2);
        // A relist (after 410 Gone): p1 changed, p2 vanished, p3 appeared.
        for e in [
            Event::Init,
            Event::InitApply(pod("a", "p1", "7", None, None)),
            Event::InitApply(pod("a", "p3", "8", None, None)),
            Event::InitDone,
        ] {
            i.handle_event(e);
        }
        assert_eq!(counts.adds.load(Ordering::SeqCst), 3);
        assert_eq!(counts.updates.load(Ordering::SeqCst), 1);
        assert_eq!(counts.deletes.load(Ordering::SeqCst), 1);
        let mut keys = i.store().keys();
        keys.sort();
        assert_eq!(keys, ["a/p1", "a/p3"]);
    }

    #[test]
    fn resync_redelivers_every_object_as_an_update_and_late_handlers_get_adds() {
        let (i, counts) = informer();
        i.handle_event(Event::Apply(pod("a", "p1", "1", None, None)));
        i.handle_event(Event::Apply(pod("a", "p2", "1", None, None)));
        i.resync();
        assert_eq!(counts.updates.load(Ordering::SeqCst), 2);
        let late = Arc::new(Counts::default());
        i.add_event_handler(late.clone());
        assert_eq!(late.adds.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_started_informer_consumes_its_stream_and_syncs() {
        struct Listed(Vec<Result<Event<Arc<Pod>>, watcher::Error>>);
        impl ListerWatcher<Pod> for Listed {
            fn list_watch(self: Box<Self>) -> WatchStream<Pod> {
                futures::stream::iter(self.0).chain(futures::stream::pending()).boxed()
            }
        }
        let listed = Arc::new(pod("a", "p1", "1", None, None));
        let source = Listed(vec![Ok(Event::Init), Ok(Event::InitApply(listed.clone())), Ok(Event::InitDone)]);
        let i = Arc::new(Informer::with_source(ApiResource::erase::<Pod>(&()), None, source));
        let handle = i.start().unwrap();
        assert!(i.start().is_none());
        i.wait_for_sync().await;
        assert_eq!(i.store().len(), 1);
        // The source's object is cached as it is, not copied.
        assert!(Arc::ptr_eq(&i.store().list()[0], &listed));
        handle.abort();
    }

    #[test]
    fn the_factory_shares_one_informer_per_resource() {
        let f = SharedInformerFactory::for_tests();
        let a = f.informer::<Pod>();
        let b = f.informer::<Pod>();
        assert!(Arc::ptr_eq(&a, &b));
        let meta = f.meta_informer(&ApiResource::erase::<Pod>(&()));
        a.handle_event(Event::Apply(pod("a", "p1", "1", None, None)));
        assert_eq!(meta.list_meta().len(), 1);
    }

    #[test]
    fn cached_objects_do_not_keep_managed_fields() {
        let (i, _) = informer();
        let mut p = pod("a", "p1", "1", Some("n1"), Some("rs-uid"));
        p.metadata.managed_fields = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
            manager: Some("kubelet".into()),
            operation: Some("Update".into()),
            ..Default::default()
        }]);
        i.handle_event(Event::Apply(p));
        let cached = i.store().get("a/p1").expect("cached");
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(cached.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("n1"), "the rest is kept");
        assert_eq!(i.store().by_index(OWNER_UID_INDEX, "rs-uid").len(), 1);
    }

    #[test]
    fn a_metadata_only_object_keeps_its_type_and_metadata_but_not_its_body() {
        let ar = ApiResource::erase::<Pod>(&());
        let mut obj = DynamicObject::new("p1", &ar).within("a").data(serde_json::json!({"spec": {"nodeName": "n1"}}));
        obj.metadata.uid = Some("u1".into());
        obj.metadata.managed_fields = Some(vec![Default::default()]);
        metadata_only(&mut obj);
        assert_eq!(obj.data, serde_json::Value::Null);
        assert_eq!(obj.metadata.managed_fields, None);
        assert_eq!(obj.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(obj.types.as_ref().map(|t| t.kind.as_str()), Some("Pod"));
    }

    #[test]
    fn a_cached_pod_keeps_its_persistent_volumes_and_drops_the_api_sourced_ones() {
        use k8s_openapi::api::core::v1::{
            ConfigMapVolumeSource, EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, ProjectedVolumeSource,
            Volume,
        };
        let mut p = pod("ns", "a", "1", Some("n1"), None);
        let volume = |name: &str| Volume { name: name.into(), ..Default::default() };
        p.spec.as_mut().unwrap().volumes = Some(vec![
            Volume { projected: Some(ProjectedVolumeSource::default()), ..volume("kube-api-access-x") },
            Volume { config_map: Some(ConfigMapVolumeSource::default()), ..volume("config") },
            Volume { empty_dir: Some(EmptyDirVolumeSource::default()), ..volume("scratch") },
            Volume {
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: "data".into(),
                    ..Default::default()
                }),
                ..volume("data")
            },
        ]);
        let store = Store::<Pod>::new();
        let (cached, _) = store.apply(p);
        let names: Vec<_> = cached.spec.as_ref().unwrap().volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        assert_eq!(names, vec!["data"]);
        assert_eq!(cached.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));

        let mut only_token = pod("ns", "b", "1", None, None);
        only_token.spec.as_mut().unwrap().volumes =
            Some(vec![Volume { projected: Some(ProjectedVolumeSource::default()), ..volume("kube-api-access-y") }]);
        let (cached, _) = store.apply(only_token);
        assert!(cached.spec.as_ref().unwrap().volumes.is_none());
    }

    fn revision(uid: &str, rv: &str, node: &str) -> Pod {
        let mut p = pod("ns", uid, rv, Some(node), None);
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn informers_decoding_the_same_revision_share_one_copy() {
        let first = intern(revision("share-1", "7", "n1"), 1);
        let second = intern(revision("share-1", "7", "n1"), 1);
        assert!(Arc::ptr_eq(&first, &second));
        // Another cached form of the same revision is a different copy.
        let other_form = intern(revision("share-1", "7", "n1"), 2);
        assert!(!Arc::ptr_eq(&first, &other_form));
    }

    #[test]
    fn a_new_revision_is_its_own_copy_and_an_older_one_does_not_displace_it() {
        let old = intern(revision("share-2", "3", "n1"), 1);
        let new = intern(revision("share-2", "4", "n2"), 1);
        assert!(!Arc::ptr_eq(&old, &new));
        assert_eq!(new.spec.as_ref().unwrap().node_name.as_deref(), Some("n2"));
        // A lagging informer still at revision 3 gets its own copy; revision 4 stays shared.
        let lagging = intern(revision("share-2", "3", "n1"), 1);
        assert_eq!(lagging.metadata.resource_version.as_deref(), Some("3"));
        assert!(Arc::ptr_eq(&new, &intern(revision("share-2", "4", "n2"), 1)));
    }

    #[test]
    fn entries_of_copies_no_informer_holds_are_swept() {
        // 5,000 objects decoded and dropped at once (deleted): the table does not keep them all.
        for i in 0..5000 {
            drop(intern(revision(&format!("sweep-{i}"), "1", "n1"), 3));
        }
        let left = REVISIONS.lock().entries.keys().filter(|k| k.form == 3).count();
        assert!(left < 5000, "{left} entries of dropped copies left");
    }

    #[test]
    fn objects_without_uid_or_resource_version_are_not_shared() {
        let a = intern(pod("ns", "share-4", "1", None, None), 1);
        let b = intern(pod("ns", "share-4", "1", None, None), 1);
        assert!(!Arc::ptr_eq(&a, &b));
    }
}
