//! The generic object store: Kubernetes object semantics over the key-value [`Backend`].
//!
//! The counterpart of kube-apiserver's `genericregistry.Store` plus the per-type strategies
//! (`PrepareForCreate`/`PrepareForUpdate`): uid, creationTimestamp, generation, generateName,
//! resourceVersion = store `mod_revision` (set on read, never stored), optimistic concurrency,
//! finalizers and graceful deletion, namespace lifecycle, the status/spec split, defaulting,
//! validation and strict field validation. The HTTP layer ([`crate::endpoints`]) only parses requests
//! and renders answers; everything that decides what is stored is here.

use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;
use skiff_store::{Backend, RangeRequest, Revision};

use crate::admission::seam::{self, Admission, Operation};
use crate::auth::RequestUser;
use crate::metrics::Metrics;
use crate::registry::convert;
use crate::registry::core::service::alloc::{Allocated, Owner, ServiceAllocator};
use crate::registry::machinery::{self, Selectors};
use crate::registry::schema;
use crate::registry::strategy::{
    custom_prune, graceful_period, is_services, prepare_for_create, prepare_for_update, validate_object,
    warnings_on_create, warnings_on_update,
};
use crate::resources::ResourceDef;
use crate::util::{meta_mut, meta_str, set_in, set_resource_version};

/// Namespaces that can never be deleted (kube-apiserver's NamespaceLifecycle immortal set).
pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// `fieldValidation` (<https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation>).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Unknown or duplicate fields fail the request with 400.
    Strict,
    /// Unknown or duplicate fields are dropped with a `Warning` header (the default).
    #[default]
    Warn,
    /// Unknown fields are dropped silently.
    Ignore,
}

impl FieldValidation {
    /// Parses the query parameter; 400 for anything else.
    pub fn parse(s: Option<&str>) -> Result<Self, ApiError> {
        match s.unwrap_or("") {
            "" | "Warn" => Ok(Self::Warn),
            "Strict" => Ok(Self::Strict),
            "Ignore" => Ok(Self::Ignore),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}, must be one of: Ignore, Strict, Warn"
            ))),
        }
    }
}

/// Options common to every write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: run everything, persist nothing.
    pub dry_run: bool,
    /// `fieldValidation`.
    pub field_validation: FieldValidation,
    /// The requesting user, for admission (`None` for the server's own writes).
    pub user: Option<RequestUser>,
    /// The field manager whose `Update` the write records in managedFields
    /// ([`crate::registry::managedfields::record_update`]); `None` records nothing.
    pub field_manager: Option<String>,
}

/// A write's result.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as stored (external form, resourceVersion set).
    pub object: Value,
    /// Warnings for `Warning` headers.
    pub warnings: Vec<String>,
    /// True when the write created the object (201 rather than 200).
    pub created: bool,
    /// `object` as JSON, when the write could splice it from the stored bytes instead of a
    /// second serialization (creates of kinds whose stored form is their external form):
    /// byte for byte what `serde_json::to_vec(&object)` gives.
    pub json: Option<Vec<u8>>,
}

/// `DeleteOptions` that matter to the store.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `propagationPolicy`: Orphan, Background or Foreground.
    pub propagation_policy: Option<String>,
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The requesting user, for admission.
    pub user: Option<RequestUser>,
}

/// A delete's result.
#[derive(Debug, Clone)]
pub struct Deleted {
    /// The object: its last state when removed, else its state marked for deletion.
    pub object: Value,
    /// True when the object is gone from the store; false when only marked (finalizers or a
    /// grace period pending).
    pub removed: bool,
}

/// What a list reads.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Label and field selectors.
    pub selectors: Selectors,
    /// `limit` (0 = none).
    pub limit: usize,
    /// `continue` token.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`: NotOlderThan or Exact.
    pub resource_version_match: Option<String>,
}

/// A list's result.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Matching objects (external form), in key order.
    pub items: Vec<Value>,
    /// The snapshot revision.
    pub revision: Revision,
    /// The continue token of the next page.
    pub continue_token: Option<String>,
    /// `remainingItemCount`: how many objects follow this page in the snapshot. Set only on a
    /// page with a continue token and no selectors, as the etcd3 store and the cacher set it
    /// (with selectors the count of keys would overstate what matches).
    pub remaining_item_count: Option<i64>,
}

/// The message of a 410 for a continue token whose revision is compacted, which offers a token
/// to list the rest at the latest revision (the etcd3 store's `inconsistentContinue`).
pub const CONTINUE_INCONSISTENT: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// The revision a continue token carries to continue at the latest revision instead of the
/// first page's (the token of a [`CONTINUE_INCONSISTENT`] 410), as Kubernetes' `-1`.
pub const CONTINUE_AT_LATEST: Revision = -1;

/// The generic object store.
pub struct Objects {
    /// The key-value store.
    pub store: Arc<dyn Backend>,
    /// Metrics (store latency).
    pub metrics: Arc<Metrics>,
    /// Admission plug-ins.
    pub admission: Arc<dyn Admission>,
    /// Where creates learn whether their namespace exists and is not terminating.
    pub namespaces: NamespaceLifecycle,
    /// ClusterIP and node-port allocation of Service writes.
    pub services: Arc<ServiceAllocator>,
}

/// The namespace lifecycle check of creates (kube-apiserver's `NamespaceLifecycle` admission),
/// answered from the namespaces' watch cache instead of a store read per create.
///
/// The invariant: a create is refused (404 or 403) whenever a store read at the moment of the
/// check would refuse it, for every namespace write this API server has completed before the
/// check. Every namespace write of this server goes through [`Objects`], which counts it as in
/// flight until it has recorded the revision it committed at; the write itself runs in its own
/// task, so a cancelled request cannot leave a committed write unrecorded. The cache answers
/// only when no namespace write is in flight and it has applied every recorded revision;
/// otherwise, and whenever the cache does not hold the namespace (it may have been created
/// elsewhere a moment ago), the check reads the store, as before. A namespace write made by
/// another API server on the same etcd reaches this one through its watch, with the window
/// Kubernetes' informer-backed check also has; the namespace controller deletes whatever lands
/// in a terminating namespace during it.
#[derive(Default)]
pub struct NamespaceLifecycle {
    cache: std::sync::OnceLock<Arc<crate::storage::watchcache::WatchCache>>,
    writes: Arc<NamespaceWrites>,
}

/// This server's namespace writes.
#[derive(Default)]
struct NamespaceWrites {
    /// Started and not yet recorded.
    in_flight: std::sync::atomic::AtomicUsize,
    /// The highest revision a recorded write committed at.
    up_to: std::sync::atomic::AtomicI64,
}

/// What the cache knows of a namespace.
enum CachedNamespace {
    /// The cache cannot answer: read the store.
    Unknown,
    /// The namespace as the store holds it.
    Known(Arc<Value>),
}

impl NamespaceLifecycle {
    /// Answers from `cache` (the watch cache of `/registry/namespaces/`) from now on.
    pub fn use_cache(&self, cache: Arc<crate::storage::watchcache::WatchCache>) {
        let _ = self.cache.set(cache);
    }

    fn lookup(&self, ns: &str) -> CachedNamespace {
        use std::sync::atomic::Ordering::SeqCst;
        let Some(cache) = self.cache.get().filter(|c| c.is_ready()) else { return CachedNamespace::Unknown };
        if self.writes.in_flight.load(SeqCst) > 0 || cache.revision() < self.writes.up_to.load(SeqCst) {
            return CachedNamespace::Unknown;
        }
        match cache.get(&format!("{}{ns}", cache.prefix())) {
            Some(obj) => CachedNamespace::Known(obj),
            None => CachedNamespace::Unknown,
        }
    }
}

fn is_namespaces(def: &ResourceDef) -> bool {
    def.resource == "namespaces" && def.group.is_empty()
}

/// Counts a namespace write as in flight until dropped.
struct InFlight(Arc<NamespaceWrites>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn store_error(def: &ResourceDef, name: &str, e: skiff_store::Error) -> ApiError {
    use skiff_store::Error as E;
    match e {
        E::AlreadyExists { .. } => ApiError::already_exists(def.group, def.resource, name),
        E::NotFound { .. } => ApiError::not_found(def.group, def.resource, name),
        E::Conflict { .. } => ApiError::conflict(def.group, def.resource, name),
        E::Compacted { requested, compacted } => {
            ApiError::gone(format!("too old resource version: {requested} ({compacted})"))
        }
        // An exact read past the store's revision: the etcd3 store's answer to etcd's
        // "future revision", without a retry delay.
        E::FutureRevision { requested, current } => ApiError::too_large_resource_version(requested, current, 0),
        E::ValueTooLarge { .. } => ApiError::too_large("etcdserver: request is too large"),
        E::Unavailable(m) => ApiError::unavailable(m),
        E::Corrupt { path, reason } => ApiError::internal(format!("{path}: {reason}")),
        E::Internal(m) => ApiError::internal(m),
    }
}

/// Whether a create's `metadata.resourceVersion` is one the etcd3 store refuses: a version it
/// parses (an unsigned integer) other than 0. Anything else ("", "0", "-1", not a number) is
/// dropped silently, as Kubernetes does.
fn resource_version_set_on_create(rv: Option<&Value>) -> bool {
    rv.and_then(Value::as_str).and_then(|s| s.parse::<u64>().ok()).is_some_and(|v| v != 0)
}

/// Parses a resourceVersion string; 400 when it is not a number.
pub fn parse_rv(s: &str) -> Result<Revision, ApiError> {
    s.parse::<Revision>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

fn decode_stored(def: &ResourceDef, value: &[u8], rev: Revision) -> Result<Value, ApiError> {
    let mut v: Value = serde_json::from_slice(value)
        .map_err(|e| ApiError::internal(format!("stored {} is not valid JSON: {e}", def.resource)))?;
    set_resource_version(&mut v, rev);
    Ok(v)
}

/// The stored form of an object: JSON without resourceVersion (nor the long-gone selfLink),
/// which are removed from `obj` itself rather than from a copy (callers set the new
/// resourceVersion after the write).
fn encode_stored(obj: &mut Value) -> Result<Vec<u8>, ApiError> {
    Ok(encode_stored_with_metadata_end(obj)?.0)
}

/// Stored bytes and, when there is a top-level `metadata` object, the offset of its closing
/// brace and whether it is empty.
type EncodedWithMetadataEnd = (Vec<u8>, Option<(usize, bool)>);

/// [`encode_stored`], plus the offset of the closing brace of the top-level `metadata` object
/// in the bytes (when there is one) and whether that object is empty: where
/// [`with_resource_version`] puts the `resourceVersion` a write assigns.
fn encode_stored_with_metadata_end(obj: &mut Value) -> Result<EncodedWithMetadataEnd, ApiError> {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("selfLink");
    }
    let internal = |e: serde_json::Error| ApiError::internal(e.to_string());
    let (bytes, metadata_end) = match &*obj {
        Value::Object(map) => {
            // serde_json's compact form of a map, written entry by entry to note where
            // metadata ends.
            let mut out = Vec::with_capacity(2048);
            let mut metadata_end = None;
            out.push(b'{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut out, k).map_err(internal)?;
                out.push(b':');
                serde_json::to_writer(&mut out, v).map_err(internal)?;
                if let (true, Value::Object(m)) = (k == "metadata", v) {
                    metadata_end = Some((out.len() - 1, m.is_empty()));
                }
            }
            out.push(b'}');
            (out, metadata_end)
        }
        other => (serde_json::to_vec(other).map_err(internal)?, None),
    };
    if bytes.len() > skiff_store::MAX_VALUE_BYTES {
        // The store's value limit (etcd's --max-request-bytes), not the 3 MiB body limit: say
        // what kube-apiserver says when etcd refuses the write.
        return Err(ApiError::too_large("etcdserver: request is too large"));
    }
    Ok((bytes, metadata_end))
}

/// The JSON of a stored object once [`set_resource_version`] has given it `rv`: `stored` (from
/// [`encode_stored_with_metadata_end`], whose metadata holds no resourceVersion) with
/// `"resourceVersion":"rv"` appended to metadata, as the map insert appends it.
fn with_resource_version(stored: &[u8], metadata_end: (usize, bool), rv: Revision) -> Vec<u8> {
    let (end, empty) = metadata_end;
    let mut out = Vec::with_capacity(stored.len() + 40);
    out.extend_from_slice(&stored[..end]);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(b"\"resourceVersion\":\"");
    out.extend_from_slice(rv.to_string().as_bytes());
    out.push(b'"');
    out.extend_from_slice(&stored[end..]);
    out
}

/// The continue token: base64 JSON `{"v":"meta.k8s.io/v1","rv":R,"start":KEY}` like
/// Kubernetes' own, where KEY is the last key returned, relative to the list prefix.
pub fn encode_continue(rv: Revision, start: &str) -> String {
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// A continue token's revision and start key (relative to the list prefix); 400 "invalid
/// continue token" when it is not one this server issued (the messages of
/// k8s.io/apiserver `storage.DecodeContinue`). A revision of [`CONTINUE_AT_LATEST`] means
/// the latest revision.
fn decode_continue(token: &str) -> Result<(Revision, String), ApiError> {
    let bad = |why: &str| ApiError::bad_request(format!("invalid continue token: continue key is not valid{why}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .map_err(|_| bad(""))?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad(""))?;
    match v.get("v").and_then(Value::as_str) {
        Some("meta.k8s.io/v1") => {}
        other => {
            return Err(bad(&format!(
                ": server does not recognize this encoded version {}",
                other.unwrap_or_default()
            )));
        }
    }
    let rv = v.get("rv").and_then(Value::as_i64).unwrap_or(0);
    if rv == 0 {
        return Err(bad(": incorrect encoded start resourceVersion (version meta.k8s.io/v1)"));
    }
    let start = v.get("start").and_then(Value::as_str).unwrap_or_default().to_string();
    if start.is_empty() {
        return Err(bad(": encoded start key empty (version meta.k8s.io/v1)"));
    }
    // A start key can never climb out of the list's prefix.
    if start.contains("..") || start.starts_with('/') || start.contains("//") {
        return Err(bad(&format!(": {start}")));
    }
    Ok((rv, start))
}

/// Everything but metadata and status: what a `generation` bump tracks.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

fn without_rv(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn has_deletion_timestamp(obj: &Value) -> bool {
    obj.get("metadata").and_then(|m| m.get("deletionTimestamp")).is_some_and(|v| !v.is_null())
}

fn namespace_spec_finalizers(obj: &Value) -> bool {
    obj.get("spec").and_then(|s| s.get("finalizers")).and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// Checks apiVersion/kind of a request body against the resource, filling them when absent.
pub fn check_type(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    };
    if map.get("metadata").is_some_and(|m| !m.is_object() && !m.is_null()) {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: metadata must be an object",
            def.kind, def.version, def.kind
        )));
    }
    let api_version = def.api_version();
    match map.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("apiVersion".into(), Value::String(api_version.clone()));
        }
        Some(v) if v == api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
    }
    match map.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("kind".into(), Value::String(def.kind.to_string()));
        }
        Some(k) if k == def.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                def.kind
            )));
        }
    }
    Ok(())
}

/// Typed decoding plus unknown/duplicate field detection. Returns the canonical object (zero
/// values Go's JSON omits left out, [`go_json`](crate::registry::go_json)) and the warnings
/// for `Warn`.
pub fn typed_decode(
    api_version: &str,
    kind: &str,
    obj: Value,
    raw: Option<&[u8]>,
    fv: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    let prefix = || format!("{kind} in version \"{version}\" cannot be handled as a {kind}");
    let mut typed = match schema::normalize(api_version, kind, &obj) {
        None => obj.clone(),
        Some(Ok(t)) => t,
        Some(Err(e)) => return Err(ApiError::bad_request(format!("{}: {e}", prefix()))),
    };
    let mut problems: Vec<String> = Vec::new();
    if fv != FieldValidation::Ignore {
        problems.extend(schema::unknown_fields(&obj, &typed).into_iter().map(|p| format!("unknown field \"{p}\"")));
        if let Some(raw) = raw {
            problems.extend(schema::duplicate_fields(raw).into_iter().map(|p| format!("duplicate field \"{p}\"")));
        }
    }
    if !problems.is_empty() && fv == FieldValidation::Strict {
        return Err(ApiError::bad_request(format!("{}: strict decoding error: {}", prefix(), problems.join(", "))));
    }
    crate::registry::go_json::omit_zero_values(api_version, kind, &mut typed);
    Ok((typed, problems))
}

impl Objects {
    async fn timed<T>(&self, op: &str, def: &ResourceDef, f: impl std::future::Future<Output = T>) -> T {
        let start = Instant::now();
        let out = f.await;
        self.metrics.observe_store(op, def.resource, start.elapsed().as_secs_f64());
        out
    }

    /// A store write (`op` for the metrics). A namespace write is recorded for
    /// [`NamespaceLifecycle`]: in flight until its revision is known, run in its own task so
    /// that it is recorded even when the request is cancelled.
    /// Deletes `key` if its mod revision is still `old_rev` (through [`Self::write`]); returns
    /// the delete's revision and the removed value.
    async fn delete_at(
        &self,
        def: &ResourceDef,
        key: String,
        old_rev: Revision,
    ) -> skiff_store::Result<(Revision, skiff_store::KeyValue)> {
        self.write(
            "delete",
            def,
            move |store| Box::pin(async move { store.delete(&key, Some(old_rev)).await }),
            |(r, _)| *r,
        )
        .await
    }

    async fn write<T: Send + 'static>(
        &self,
        op: &str,
        def: &ResourceDef,
        write: impl FnOnce(Arc<dyn Backend>) -> futures::future::BoxFuture<'static, skiff_store::Result<T>>,
        revision: fn(&T) -> Revision,
    ) -> skiff_store::Result<T> {
        let store = self.store.clone();
        if !is_namespaces(def) {
            return self.timed(op, def, write(store)).await;
        }
        let writes = self.namespaces.writes.clone();
        writes.in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let in_flight = InFlight(writes);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = write(store);
        let start = Instant::now();
        // The write is recorded by its own task, which outlives a cancelled request.
        tokio::spawn(async move {
            let out = task.await;
            if let Ok(v) = &out {
                in_flight.0.up_to.fetch_max(revision(v), std::sync::atomic::Ordering::SeqCst);
            }
            drop(in_flight);
            let _ = tx.send(out);
        });
        let out = rx.await.unwrap_or_else(|_| Err(skiff_store::Error::Internal("store write task ended".into())));
        self.metrics.observe_store(op, def.resource, start.elapsed().as_secs_f64());
        out
    }

    /// Releases Service allocations `ns/name` holds (a no-op for nothing).
    async fn release_services(&self, ns: &str, name: &str, what: &Allocated) {
        if !what.is_empty() {
            self.services.release(self.store.as_ref(), &Owner::new(ns, name), what).await;
        }
    }

    /// PriorityClass admission: only one PriorityClass may have `globalDefault: true` (403
    /// Forbidden otherwise, as Kubernetes' Priority admission plugin answers).
    async fn check_global_default(&self, def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
        if def.group != "scheduling.k8s.io" || def.resource != "priorityclasses" {
            return Ok(());
        }
        if obj.get("globalDefault").and_then(Value::as_bool) != Some(true) {
            return Ok(());
        }
        let name = meta_str(obj, "name");
        let listed = self.list_from_store(def, None, &ListOptions::default(), 0).await?;
        if let Some(other) = listed
            .items
            .iter()
            .find(|pc| pc.get("globalDefault").and_then(Value::as_bool) == Some(true) && meta_str(pc, "name") != name)
        {
            return Err(ApiError::forbidden(
                def.group,
                def.resource,
                name,
                &format!(
                    "PriorityClass {} is already marked as default. Only one default can exist",
                    meta_str(other, "name")
                ),
            ));
        }
        Ok(())
    }

    /// The object's current state in stored (internal) form, with its revision.
    pub async fn get_internal(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
    ) -> Result<Option<(Value, Revision)>, ApiError> {
        let key = def.key(ns, name);
        let kv = self.timed("get", def, self.store.get(&key)).await.map_err(|e| store_error(def, name, e))?;
        match kv {
            None => Ok(None),
            Some(kv) => Ok(Some((decode_stored(def, &kv.value, kv.mod_revision)?, kv.mod_revision))),
        }
    }

    /// GET one object (external form); 404 when missing.
    pub async fn get(&self, def: &ResourceDef, ns: &str, name: &str) -> Result<Value, ApiError> {
        match self.get_internal(def, ns, name).await? {
            Some((v, _)) => convert::to_external(def, v),
            None => Err(ApiError::not_found(def.group, def.resource, name)),
        }
    }

    /// Checks that a namespace exists and is not terminating, for creates in it.
    async fn check_namespace(&self, def: &ResourceDef, ns: &str, name: &str) -> Result<(), ApiError> {
        static NAMESPACES: std::sync::LazyLock<Option<ResourceDef>> = std::sync::LazyLock::new(|| {
            crate::resources::builtin().into_iter().find(|d| d.resource == "namespaces" && d.group.is_empty())
        });
        let Some(ns_def) = NAMESPACES.as_ref() else { return Ok(()) };
        let current = match self.namespaces.lookup(ns) {
            CachedNamespace::Known(n) => Some(n),
            CachedNamespace::Unknown => self.get_internal(ns_def, "", ns).await?.map(|(n, _)| Arc::new(n)),
        };
        match current {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) => {
                let terminating = has_deletion_timestamp(&n)
                    || n.get("status").and_then(|s| s.get("phase")).and_then(Value::as_str) == Some("Terminating");
                if terminating {
                    Err(ApiError::forbidden(
                        def.group,
                        def.resource,
                        name,
                        &format!("unable to create new content in namespace {ns} because it is being terminated"),
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// POST: creates an object in `ns` ("" for cluster-scoped). `raw` is the request body when
    /// it was JSON (for duplicate-field detection).
    pub async fn create(
        &self,
        def: &ResourceDef,
        ns: &str,
        mut obj: Value,
        raw: Option<&[u8]>,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        check_type(def, &mut obj)?;
        let mut obj = convert::to_internal(def, obj)?;
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let resource_version_set;
        {
            let meta = meta_mut(&mut obj);
            let body_ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("").to_string();
            if def.namespaced {
                if !body_ns.is_empty() && body_ns != ns {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                meta.insert("namespace".into(), Value::String(ns.to_string()));
            } else {
                meta.remove("namespace");
            }
            let name = meta.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            let generate = meta.get("generateName").and_then(Value::as_str).unwrap_or("").to_string();
            if name.is_empty() && !generate.is_empty() {
                meta.insert("name".into(), Value::String(crate::util::generate_name(&generate)));
            }
            resource_version_set = resource_version_set_on_create(meta.get("resourceVersion"));
            // rest.FillObjectMetaSystemFields and BeforeCreate: the system's uid and
            // creationTimestamp replace the client's; deletion fields and selfLink are cleared.
            meta.insert("uid".into(), Value::String(crate::util::new_uid()));
            meta.insert("creationTimestamp".into(), Value::String(crate::util::now()));
            for f in ["resourceVersion", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"] {
                meta.remove(f);
            }
            // A strategy that tracks spec changes starts at generation 1; elsewhere no strategy
            // touches it, so a client's (non-negative, validated) generation is kept.
            if def.generation {
                meta.insert("generation".into(), json!(1));
            }
        }
        prepare_for_create(def, &mut obj);
        machinery::apply_defaults(&api_version, &kind, &mut obj);
        let (mut obj, mut warnings) = typed_decode(&api_version, &kind, obj, raw, opts.field_validation)?;
        custom_prune(def, &mut obj, opts.field_validation, &mut warnings)?;
        let name = meta_str(&obj, "name").to_string();
        let attrs = seam::Attributes {
            operation: Operation::Create,
            def,
            namespace: ns,
            name: &name,
            subresource: None,
            user: opts.user.as_ref(),
            old: None,
            dry_run: opts.dry_run,
        };
        self.admission.mutate_collecting(&attrs, &mut obj, &mut warnings).await?;
        machinery::mirror_deprecated_aliases(&api_version, &kind, &mut obj);
        let causes = validate_object(def, &api_version, &kind, &obj, None);
        if !causes.is_empty() {
            return Err(ApiError::invalid(def.group, def.kind, &name, causes));
        }
        warnings.extend(warnings_on_create(def, &obj));
        self.admission.validate_collecting(&attrs, &mut obj, &mut warnings).await?;
        self.check_global_default(def, &obj).await?;
        if let Some(manager) = &opts.field_manager {
            crate::registry::managedfields::record_update(def, None, manager, None, &mut obj);
        }
        if def.namespaced {
            self.check_namespace(def, ns, &name).await?;
        }
        let claimed = if is_services(def) {
            if !opts.dry_run && self.get_internal(def, ns, &name).await?.is_some() {
                // Allocating first would make a duplicate's error a 422 about its IP.
                return Err(ApiError::already_exists(def.group, def.resource, &name));
            }
            let owner = Owner::new(ns, &name);
            self.services.allocate(self.store.as_ref(), &owner, &mut obj, None, opts.dry_run).await?.0
        } else {
            Allocated::default()
        };
        let (bytes, metadata_end) = match encode_stored_with_metadata_end(&mut obj) {
            Ok(b) => b,
            Err(e) => {
                self.release_services(ns, &name, &claimed).await;
                return Err(e);
            }
        };
        if opts.dry_run {
            if self.get_internal(def, ns, &name).await?.is_some() {
                return Err(ApiError::already_exists(def.group, def.resource, &name));
            }
            return Ok(Written { object: convert::to_external(def, obj)?, warnings, created: true, json: None });
        }
        if resource_version_set {
            // Refused where the etcd3 store's Create refuses it, after admission (a dry run never
            // gets there), with its message. kube-apiserver answers 500 there, its store's error
            // being no API status; the fault is the client's, so skiff answers 400 BadRequest.
            return Err(ApiError::bad_request("resourceVersion should not be set on objects to be created"));
        }
        // The response's JSON is the stored JSON plus the new resourceVersion (one
        // serialization per create instead of two), where the stored form is the external one.
        let splice = metadata_end.filter(|_| convert::is_identity(def)).map(|end| (bytes.clone(), end));
        let key = def.key(ns, &name);
        let rev = match self
            .write("create", def, move |store| Box::pin(async move { store.create(&key, bytes).await }), |r| *r)
            .await
        {
            Ok(rev) => rev,
            Err(e) => {
                self.release_services(ns, &name, &claimed).await;
                return Err(store_error(def, &name, e));
            }
        };
        set_resource_version(&mut obj, rev);
        let json = splice.map(|(stored, end)| with_resource_version(&stored, end, rev));
        Ok(Written { object: convert::to_external(def, obj)?, warnings, created: true, json })
    }

    /// The update loop shared by PUT, PATCH and subresource writes: reads the current object,
    /// lets `mutate` compute the new one from it (in external form), applies the type's update
    /// strategy and writes with compare-and-swap, retrying when another writer got in between
    /// and the caller did not pin a resourceVersion.
    #[allow(clippy::too_many_arguments)]
    pub async fn update<F>(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        subresource: Option<&str>,
        opts: &WriteOptions,
        raw: Option<&[u8]>,
        mut mutate: F,
    ) -> Result<Written, ApiError>
    where
        F: FnMut(Option<&Value>) -> Result<Value, ApiError>,
    {
        for _attempt in 0..MAX_UNPINNED_ATTEMPTS {
            let current = self.get_internal(def, ns, name).await?;
            let Some((old, old_rev)) = current else {
                if subresource.is_none() && def.create_on_update {
                    let new = mutate(None)?;
                    if meta_str(&new, "name") != name {
                        return Err(name_mismatch(meta_str(&new, "name"), name));
                    }
                    return self.create(def, ns, new, raw, opts).await;
                }
                return Err(ApiError::not_found(def.group, def.resource, name));
            };
            let old_ext = convert::to_external(def, old.clone())?;
            let mut new = mutate(Some(&old_ext))?;
            check_type(def, &mut new)?;
            let new = convert::to_internal(def, new)?;
            let body_rv = meta_str(&new, "resourceVersion").to_string();
            let pinned = !body_rv.is_empty();
            if pinned && parse_rv(&body_rv)? != old_rev {
                return Err(ApiError::conflict(def.group, def.resource, name));
            }
            let body_name = meta_str(&new, "name");
            if !body_name.is_empty() && body_name != name {
                return Err(name_mismatch(body_name, name));
            }
            let body_ns = meta_str(&new, "namespace");
            if def.namespaced && !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            let mut new = prepare_for_update(def, subresource, &old, new);
            let api_version = new["apiVersion"].as_str().unwrap_or_default().to_string();
            let kind = new["kind"].as_str().unwrap_or_default().to_string();
            machinery::apply_defaults(&api_version, &kind, &mut new);
            let (mut new, mut warnings) = typed_decode(&api_version, &kind, new, raw, opts.field_validation)?;
            custom_prune(def, &mut new, opts.field_validation, &mut warnings)?;
            if def.group == "apps" && def.resource == "daemonsets" {
                crate::registry::apps::daemonset::prepare_for_update(subresource, &old, &mut new);
            }
            if def.generation {
                let old_gen = old["metadata"]["generation"].as_i64().unwrap_or(1);
                // A Deployment's annotations are copied to its ReplicaSets: changing them is a
                // change its controller must observe (`deploymentStrategy.PrepareForUpdate`).
                let annotations_count = def.group == "apps" && def.resource == "deployments" && subresource.is_none();
                let changed = spec_part(&old) != spec_part(&new)
                    || (annotations_count && old["metadata"]["annotations"] != new["metadata"]["annotations"]);
                let generation = if changed { old_gen + 1 } else { old_gen };
                meta_mut(&mut new).insert("generation".into(), json!(generation));
            }
            let attrs = seam::Attributes {
                operation: Operation::Update,
                def,
                namespace: ns,
                name,
                subresource,
                user: opts.user.as_ref(),
                old: Some(&old),
                dry_run: opts.dry_run,
            };
            self.admission.mutate_collecting(&attrs, &mut new, &mut warnings).await?;
            machinery::mirror_deprecated_aliases(&api_version, &kind, &mut new);
            // A binding changes only spec.nodeName, which pod update validation forbids.
            if subresource != Some("binding") {
                let causes = validate_object(def, &api_version, &kind, &new, Some(&old));
                if !causes.is_empty() {
                    return Err(ApiError::invalid(def.group, def.kind, name, causes));
                }
            }
            warnings.extend(warnings_on_update(def, subresource, &new));
            self.admission.validate_collecting(&attrs, &mut new, &mut warnings).await?;
            self.check_global_default(def, &new).await?;
            if let Some(manager) = &opts.field_manager {
                crate::registry::managedfields::record_update(def, subresource, manager, Some(&old), &mut new);
            }
            // An object being deleted whose last finalizer was just removed is removed.
            let grace = new["metadata"]["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
            if has_deletion_timestamp(&new)
                && finalizers(&new).is_empty()
                && grace == 0
                && !namespace_spec_finalizers(&new)
            {
                if opts.dry_run {
                    return Ok(Written {
                        object: convert::to_external(def, new)?,
                        warnings,
                        created: false,
                        json: None,
                    });
                }
                let key = def.key(ns, name);
                match self.delete_at(def, key, old_rev).await {
                    Ok((rev, _)) => {
                        if is_services(def) {
                            let held = crate::registry::core::service::alloc::held_by(&old);
                            self.release_services(ns, name, &held).await;
                        }
                        set_resource_version(&mut new, rev);
                        return Ok(Written {
                            object: convert::to_external(def, new)?,
                            warnings,
                            created: false,
                            json: None,
                        });
                    }
                    Err(skiff_store::Error::Conflict { .. }) | Err(skiff_store::Error::NotFound { .. }) if !pinned => {
                        continue;
                    }
                    Err(e) => return Err(store_error(def, name, e)),
                }
            }
            if without_rv(&new) == without_rv(&old) {
                // A no-op update writes nothing and keeps the resourceVersion.
                return Ok(Written { object: convert::to_external(def, old)?, warnings, created: false, json: None });
            }
            let (claimed, stale) = if is_services(def) && subresource.is_none() {
                let owner = Owner::new(ns, name);
                self.services.allocate(self.store.as_ref(), &owner, &mut new, Some(&old), opts.dry_run).await?
            } else {
                (Allocated::default(), Allocated::default())
            };
            let bytes = match encode_stored(&mut new) {
                Ok(b) => b,
                Err(e) => {
                    self.release_services(ns, name, &claimed).await;
                    return Err(e);
                }
            };
            if opts.dry_run {
                set_resource_version(&mut new, old_rev);
                return Ok(Written { object: convert::to_external(def, new)?, warnings, created: false, json: None });
            }
            let key = def.key(ns, name);
            let written = self
                .write(
                    "update",
                    def,
                    move |store| Box::pin(async move { store.update(&key, bytes, old_rev).await }),
                    |r| *r,
                )
                .await;
            if written.is_ok() {
                self.release_services(ns, name, &stale).await;
            } else {
                self.release_services(ns, name, &claimed).await;
            }
            match written {
                Ok(rev) => {
                    set_resource_version(&mut new, rev);
                    return Ok(Written {
                        object: convert::to_external(def, new)?,
                        warnings,
                        created: false,
                        json: None,
                    });
                }
                Err(skiff_store::Error::Conflict { .. }) if !pinned => continue,
                Err(skiff_store::Error::NotFound { .. }) if !pinned => continue,
                Err(e) => return Err(store_error(def, name, e)),
            }
        }
        Err(ApiError::conflict(def.group, def.resource, name))
    }

    /// DELETE one object with Kubernetes' finalizer and graceful-deletion semantics.
    pub async fn delete(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        if def.resource == "namespaces" && def.group.is_empty() && IMMORTAL_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden("", "namespaces", name, "this namespace may not be deleted"));
        }
        for _attempt in 0..MAX_UNPINNED_ATTEMPTS {
            let Some((old, old_rev)) = self.get_internal(def, ns, name).await? else {
                return Err(ApiError::not_found(def.group, def.resource, name));
            };
            if let Some(uid) = &opts.uid {
                let actual = meta_str(&old, "uid");
                if uid != actual {
                    return Err(precondition_failed(
                        def,
                        name,
                        format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
                    ));
                }
            }
            if let Some(rv) = &opts.resource_version
                && parse_rv(rv)? != old_rev
            {
                return Err(precondition_failed(
                    def,
                    name,
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {old_rev}"
                    ),
                ));
            }
            let attrs = seam::Attributes {
                operation: Operation::Delete,
                def,
                namespace: ns,
                name,
                subresource: None,
                user: opts.user.as_ref(),
                old: Some(&old),
                dry_run: opts.dry_run,
            };
            self.admission.validate(&attrs, &old).await?;
            let mut new = old.clone();
            let mut fins = finalizers(&old);
            match opts.propagation_policy.as_deref() {
                Some("Orphan") => {
                    if !fins.iter().any(|f| f == "orphan") {
                        fins.push("orphan".into());
                    }
                    fins.retain(|f| f != "foregroundDeletion");
                }
                Some("Foreground") => {
                    if !fins.iter().any(|f| f == "foregroundDeletion") {
                        fins.push("foregroundDeletion".into());
                    }
                    fins.retain(|f| f != "orphan");
                }
                Some("Background") | None => {}
                Some(other) => {
                    return Err(ApiError::invalid(
                        "meta.k8s.io",
                        "DeleteOptions",
                        "",
                        vec![skiff_apimachinery::status::Cause {
                            reason: "FieldValueNotSupported".into(),
                            message: format!(
                                "Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                            ),
                            field: "propagationPolicy".into(),
                        }],
                    ));
                }
            }
            if def.group == "apiextensions.k8s.io"
                && def.resource == "customresourcedefinitions"
                && !fins.iter().any(|f| f == crate::registry::crd::CLEANUP_FINALIZER)
                && !has_deletion_timestamp(&old)
            {
                fins.push(crate::registry::crd::CLEANUP_FINALIZER.to_string());
            }
            let grace = graceful_period(def, &old, opts.grace_period_seconds);
            let ns_pending = def.resource == "namespaces" && def.group.is_empty() && namespace_spec_finalizers(&old);
            let key = def.key(ns, name);
            if fins.is_empty() && grace == 0 && !ns_pending {
                if opts.dry_run {
                    return Ok(Deleted { object: convert::to_external(def, old)?, removed: true });
                }
                match self.delete_at(def, key, old_rev).await {
                    Ok((rev, _)) => {
                        if is_services(def) {
                            let held = crate::registry::core::service::alloc::held_by(&old);
                            self.release_services(ns, name, &held).await;
                        }
                        let mut last = old;
                        set_resource_version(&mut last, rev);
                        return Ok(Deleted { object: convert::to_external(def, last)?, removed: true });
                    }
                    Err(skiff_store::Error::Conflict { .. }) => continue,
                    Err(e) => return Err(store_error(def, name, e)),
                }
            }
            // Mark for deletion: deletionTimestamp (+ grace for pods), finalizers, phase.
            {
                let existing_grace = old["metadata"]["deletionGracePeriodSeconds"].as_i64();
                let already = has_deletion_timestamp(&old);
                let meta = meta_mut(&mut new);
                if fins.is_empty() {
                    meta.remove("finalizers");
                } else {
                    meta.insert("finalizers".into(), json!(fins));
                }
                if !already || existing_grace.is_some_and(|g| grace < g) {
                    meta.insert(
                        "deletionTimestamp".into(),
                        json!(crate::util::rfc3339(crate::util::unix_now() + grace)),
                    );
                    meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
                }
            }
            if def.resource == "namespaces" && def.group.is_empty() {
                set_in(&mut new, &["status", "phase"], json!("Terminating"));
            }
            if without_rv(&new) == without_rv(&old) {
                return Ok(Deleted { object: convert::to_external(def, old)?, removed: false });
            }
            if opts.dry_run {
                return Ok(Deleted { object: convert::to_external(def, new)?, removed: false });
            }
            let bytes = encode_stored(&mut new)?;
            match self
                .write(
                    "update",
                    def,
                    move |store| Box::pin(async move { store.update(&key, bytes, old_rev).await }),
                    |r| *r,
                )
                .await
            {
                Ok(rev) => {
                    set_resource_version(&mut new, rev);
                    return Ok(Deleted { object: convert::to_external(def, new)?, removed: false });
                }
                Err(skiff_store::Error::Conflict { .. }) => continue,
                Err(e) => return Err(store_error(def, name, e)),
            }
        }
        Err(ApiError::conflict(def.group, def.resource, name))
    }

    /// LIST from the store: one consistent snapshot, filtered, paginated. `revision` is the
    /// snapshot to read (0: the latest); a continue token overrides it with the revision of the
    /// list's first page (or the latest, for a token from a [`CONTINUE_INCONSISTENT`] 410).
    pub async fn list_from_store(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        opts: &ListOptions,
        revision: Revision,
    ) -> Result<Listed, ApiError> {
        let mut listed = self.list_stored(def, ns, opts, revision).await?;
        // One conversion for the page (one ConversionReview for a CRD's webhook).
        listed.items = convert::to_external_all(def, std::mem::take(&mut listed.items))?;
        Ok(listed)
    }

    /// [`Objects::list_from_store`] with the items in their stored form.
    async fn list_stored(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        opts: &ListOptions,
        revision: Revision,
    ) -> Result<Listed, ApiError> {
        let prefix = def.namespace_prefix(ns);
        let (mut revision, mut start_after) = (revision, None);
        let mut continued_from = None;
        if let Some(token) = &opts.continue_token {
            let (rv, start) = decode_continue(token)?;
            revision = if rv == CONTINUE_AT_LATEST { 0 } else { rv };
            start_after = Some(format!("{prefix}{start}"));
            continued_from = Some(start);
        }
        let mut items = Vec::new();
        loop {
            let want = if opts.limit == 0 { 0 } else { (opts.limit - items.len()).max(1) };
            let req = RangeRequest { prefix: prefix.clone(), start_after: start_after.clone(), limit: want, revision };
            let resp = match self.timed("list", def, self.store.range(req)).await {
                Ok(r) => r,
                Err(skiff_store::Error::Compacted { .. }) => {
                    return Err(match &continued_from {
                        Some(start) => {
                            let mut e = ApiError::gone(CONTINUE_INCONSISTENT);
                            e.continue_token = Some(encode_continue(CONTINUE_AT_LATEST, start));
                            e
                        }
                        None => ApiError::gone("The resourceVersion for the provided list is too old."),
                    });
                }
                Err(e) => return Err(store_error(def, "", e)),
            };
            revision = resp.revision;
            let n = resp.kvs.len();
            for (i, kv) in resp.kvs.into_iter().enumerate() {
                let obj = decode_stored(def, &kv.value, kv.mod_revision)?;
                start_after = Some(kv.key.clone());
                if opts.selectors.matches(def, &obj) {
                    items.push(obj);
                    if opts.limit > 0 && items.len() >= opts.limit {
                        let more = i + 1 < n || resp.more;
                        if !more {
                            return Ok(Listed { items, revision, continue_token: None, remaining_item_count: None });
                        }
                        let last = kv.key.strip_prefix(&prefix).unwrap_or(&kv.key).to_string();
                        let remaining_item_count = if opts.selectors.is_empty() {
                            let rest = RangeRequest {
                                prefix: prefix.clone(),
                                start_after: Some(kv.key.clone()),
                                limit: 0,
                                revision,
                            };
                            Some(self.store.count(rest).await.map_err(|e| store_error(def, "", e))?)
                        } else {
                            None
                        };
                        return Ok(Listed {
                            items,
                            revision,
                            continue_token: Some(encode_continue(revision, &last)),
                            remaining_item_count,
                        });
                    }
                }
            }
            if !resp.more {
                return Ok(Listed { items, revision, continue_token: None, remaining_item_count: None });
            }
        }
    }
}

/// One page of a watch-cache snapshot (the cacher's `GetList`): the objects of `objects` (in
/// key order, all under `prefix`) that `opts`' selectors match, at most `limit` of them (0: all),
/// with a continue token at `revision` when objects follow the page and, without selectors,
/// how many do. The next page is read from the store at `revision`.
pub fn page_of_snapshot(
    def: &ResourceDef,
    prefix: &str,
    objects: &[Arc<Value>],
    revision: Revision,
    opts: &ListOptions,
    limit: usize,
) -> Result<Listed, ApiError> {
    let mut items: Vec<Value> = Vec::new();
    let mut last = None;
    let mut more = false;
    for o in objects {
        if limit > 0 && items.len() >= limit {
            more = true;
            break;
        }
        if opts.selectors.matches(def, o) {
            items.push((**o).clone());
            last = Some(o);
        }
    }
    let items = convert::to_external_all(def, items)?;
    let (continue_token, remaining_item_count) = match last.filter(|_| more) {
        Some(o) => {
            let key = def.key(meta_str(o, "namespace"), meta_str(o, "name"));
            let start = key.strip_prefix(prefix).unwrap_or(&key);
            let remaining = opts.selectors.is_empty().then(|| (objects.len() - items.len()) as i64);
            (Some(encode_continue(revision, start)), remaining)
        }
        None => (None, None),
    };
    Ok(Listed { items, revision, continue_token, remaining_item_count })
}

/// How often an update or delete that does not pin a resourceVersion is re-read and re-applied
/// after losing a compare-and-swap before it answers 409. kube-apiserver's GuaranteedUpdate
/// retries without a limit (each lost race means another write landed); the cap only bounds a
/// request against pathological contention. 16 was too few: 24 concurrent patches of one
/// object each lost 16 group-committed rounds about once in ten runs.
const MAX_UNPINNED_ATTEMPTS: usize = 256;

fn name_mismatch(body: &str, url: &str) -> ApiError {
    ApiError::bad_request(format!("the name of the object ({body}) does not match the name on the URL ({url})"))
}

fn precondition_failed(def: &ResourceDef, name: &str, message: String) -> ApiError {
    let mut e = ApiError::conflict(def.group, def.resource, name);
    e.message = message;
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::watchcache::WatchCache;
    use std::sync::atomic::Ordering::SeqCst;
    use std::time::Duration;

    #[test]
    fn only_a_parsable_nonzero_resource_version_is_refused_on_create() {
        for rv in ["1", "42", "18446744073709551615"] {
            assert!(resource_version_set_on_create(Some(&json!(rv))), "{rv}");
        }
        for rv in [json!(""), json!("0"), json!("-1"), json!("abc"), json!(null)] {
            assert!(!resource_version_set_on_create(Some(&rv)), "{rv}");
        }
        assert!(!resource_version_set_on_create(None));
    }

    #[test]
    fn a_snapshot_page_carries_a_continue_token_and_the_count_of_what_follows() {
        let registry = crate::resources::Registry::default();
        let def = registry.get("", "v1", "configmaps").unwrap().clone();
        let prefix = def.namespace_prefix(Some("ns"));
        let objects: Vec<Arc<Value>> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| Arc::new(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": n, "namespace": "ns", "labels": {"odd": (*n == "a" || *n == "c" || *n == "e").to_string()}}})))
            .collect();
        let all = ListOptions::default();
        let page = page_of_snapshot(&def, &prefix, &objects, 9, &all, 2).unwrap();
        let names = |l: &Listed| l.items.iter().map(|i| meta_str(i, "name").to_string()).collect::<Vec<_>>();
        assert_eq!(names(&page), ["a", "b"]);
        assert_eq!(page.remaining_item_count, Some(3));
        assert_eq!(decode_continue(page.continue_token.as_deref().unwrap()).unwrap(), (9, "b".to_string()));
        let whole = page_of_snapshot(&def, &prefix, &objects, 9, &all, 0).unwrap();
        assert_eq!((whole.items.len(), whole.continue_token, whole.remaining_item_count), (5, None, None));
        let exact = page_of_snapshot(&def, &prefix, &objects, 9, &all, 5).unwrap();
        assert_eq!((exact.items.len(), exact.continue_token, exact.remaining_item_count), (5, None, None));
        // With selectors the page ends at its last match and no count is given.
        let odd =
            ListOptions { selectors: Selectors::parse(&def, Some("odd=true"), None).unwrap(), ..Default::default() };
        let page = page_of_snapshot(&def, &prefix, &objects, 9, &odd, 2).unwrap();
        assert_eq!(names(&page), ["a", "c"]);
        assert_eq!(page.remaining_item_count, None);
        assert_eq!(decode_continue(page.continue_token.as_deref().unwrap()).unwrap(), (9, "c".to_string()));
    }

    #[test]
    fn a_continue_token_this_server_did_not_issue_is_a_bad_request() {
        let token = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let msg = |t: &str| decode_continue(t).unwrap_err().message;
        assert_eq!(msg("%%%"), "invalid continue token: continue key is not valid");
        assert_eq!(
            msg(&token(json!({"v": "meta.k8s.io/v1", "rv": 0, "start": "a"}))),
            "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        );
        assert_eq!(
            msg(&token(json!({"v": "meta.k8s.io/v1", "rv": 3, "start": ""}))),
            "invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"
        );
        assert_eq!(
            msg(&token(json!({"v": "v2", "rv": 3, "start": "a"}))),
            "invalid continue token: continue key is not valid: server does not recognize this encoded version v2"
        );
        assert_eq!(
            msg(&token(json!({"v": "meta.k8s.io/v1", "rv": 3, "start": "../secrets/x"}))),
            "invalid continue token: continue key is not valid: ../secrets/x"
        );
        assert_eq!(
            decode_continue(&encode_continue(CONTINUE_AT_LATEST, "a")).unwrap(),
            (CONTINUE_AT_LATEST, "a".into())
        );
    }

    #[test]
    fn a_created_object_spliced_from_its_stored_json_is_what_serializing_it_gives() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n", "resourceVersion": "3",
                "labels": {"a\"b": "c\\d"}}, "spec": {"containers": [{"name": "c", "image": "é"}]}}),
            json!({"metadata": {}, "kind": "X"}),
            json!({"kind": "X", "metadata": {"selfLink": "/x"}, "z": [1, 2.5, null, {"q": false}]}),
        ];
        for mut obj in objects {
            let (stored, end) = encode_stored_with_metadata_end(&mut obj).unwrap();
            assert_eq!(stored, serde_json::to_vec(&obj).unwrap());
            set_resource_version(&mut obj, 42);
            assert_eq!(with_resource_version(&stored, end.unwrap(), 42), serde_json::to_vec(&obj).unwrap());
        }
    }

    #[tokio::test]
    async fn the_namespace_cache_answers_only_once_it_has_seen_every_recorded_namespace_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store: Arc<dyn Backend> =
            Arc::new(skiff_store::sqlite::SqliteBackend::open(&path, Default::default()).unwrap());
        let cache = WatchCache::new("/registry/namespaces/".into(), 16, 16);
        let follower = tokio::spawn(cache.clone().run(store.clone()));
        let rev = store.create("/registry/namespaces/a", br#"{"metadata":{"name":"a"}}"#.to_vec()).await.unwrap();
        assert!(cache.wait_for(rev, Duration::from_secs(30)).await);

        let lifecycle = NamespaceLifecycle::default();
        assert!(matches!(lifecycle.lookup("a"), CachedNamespace::Unknown), "no cache yet");
        lifecycle.use_cache(cache.clone());
        assert!(matches!(lifecycle.lookup("a"), CachedNamespace::Known(_)));
        assert!(matches!(lifecycle.lookup("missing"), CachedNamespace::Unknown), "absent: read the store");

        lifecycle.writes.in_flight.fetch_add(1, SeqCst);
        assert!(matches!(lifecycle.lookup("a"), CachedNamespace::Unknown), "a write in flight");
        lifecycle.writes.in_flight.fetch_sub(1, SeqCst);

        lifecycle.writes.up_to.store(rev + 1, SeqCst);
        assert!(matches!(lifecycle.lookup("a"), CachedNamespace::Unknown), "the cache lags a recorded write");
        let next = store.create("/registry/namespaces/b", br#"{"metadata":{"name":"b"}}"#.to_vec()).await.unwrap();
        assert!(cache.wait_for(next, Duration::from_secs(30)).await);
        assert!(matches!(lifecycle.lookup("a"), CachedNamespace::Known(_)));
        follower.abort();
    }
}
