//! The admission chain of the running API server
//! (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/>): the
//! built-in plugins of `skiff-admission` in kube-apiserver's order behind the API server's
//! [`Admission`] seam, fed from the watch caches.
//!
//! - mutating: NamespaceLifecycle, LimitRanger, ServiceAccount, Priority,
//!   DefaultTolerationSeconds, DefaultStorageClass, StorageObjectInUseProtection,
//!   MutatingAdmissionWebhook;
//! - validating: RBAC escalation, NamespaceLifecycle, LimitRanger, PodSecurity, Priority,
//!   ValidatingAdmissionPolicy, ValidatingAdmissionWebhook, ResourceQuota.
//!
//! Requests of the API server itself (bootstrap, status maintenance: no user) are not admitted.
//!
//! ResourceQuota usage is kept right two ways, as in Kubernetes: admission-time accounting
//! (a create is charged to every matching quota and the quotas' `status.used` is written with
//! compare-and-swap *before* the object is persisted; a conflict re-reads the quota and
//! charges again), and kube-controller-manager's resource quota controller (`skiff-controllers`'
//! `resourcequota`, a client of the API) that recomputes `status.hard`/`status.used` whenever a
//! quota or a counted object changes (so deletes release usage and new quotas get their first
//! status; until then a create charged to a quota without status is refused).
//!
//! Watch caches lag the store by a moment: a namespace or service account created just before
//! the request may not be cached yet, so a miss is checked against the store (and for the
//! `default` service account of a brand-new namespace, which the serviceaccount controller is
//! about to create, waited for up to [`SERVICE_ACCOUNT_WAIT`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{Value, json};
use skiff_admission::plugins::{
    default_storage_class, default_toleration_seconds, limit_ranger, namespace_lifecycle, pod_security, priority,
    rbac_escalation, resource_quota, service_account, storage_object_in_use_protection,
};
use skiff_admission::policy::PolicyAdmission;
use skiff_admission::webhook::{ServiceResolver, WebhookAdmission};
use skiff_admission::{self as authadm, AdmissionChain, AdmissionLookup, AdmissionRequest};
use skiff_apimachinery::ApiError;
use skiff_auth::UserInfo;
use skiff_auth::rbac::RbacAuthorizer;

use crate::AppState;
use crate::StateSlot;
use crate::admission::seam::{Admission, Attributes, Operation};
use crate::resources::ResourceDef;
use crate::storage::listers::{ServicePortRef, cache_get_shared, resolve_service_endpoint};
use crate::storage::watchcache::{CacheMsg, EventKind, Recv};

/// How long a pod create waits for a missing service account to appear.
pub const SERVICE_ACCOUNT_WAIT: Duration = Duration::from_secs(5);
/// How long a store read made on a cache miss is trusted.
const OVERLAY_TTL: Duration = Duration::from_secs(10);
/// Attempts at charging quotas when their status changes concurrently.
const QUOTA_ATTEMPTS: usize = 8;

/// (storage segment, namespace, name) of an object read from the store on a cache miss.
type OverlayKey = (String, String, String);

/// The last listing of each (storage, namespace): the cache revision it was taken at and its objects.
type CachedListings = HashMap<(String, String), (i64, Vec<Arc<Value>>)>;

/// [`AdmissionLookup`] over the watch caches, with store reads made on cache misses layered on
/// top for a short while.
pub struct CacheLookup {
    slot: StateSlot,
    overlay: Mutex<HashMap<OverlayKey, (Arc<Value>, Instant)>>,
    /// The last listing of each (storage, namespace) and the cache revision it was taken at:
    /// every pod create lists PriorityClasses, LimitRanges and ResourceQuotas, which rarely
    /// change, so a listing is reused while its cache has not moved.
    lists: Mutex<CachedListings>,
}

impl CacheLookup {
    fn new(slot: StateSlot) -> Self {
        Self { slot, overlay: Mutex::new(HashMap::new()), lists: Mutex::new(HashMap::new()) }
    }

    fn get(&self, storage: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        if let Some(v) = self.slot.get().and_then(|s| cache_get_shared(&s, storage, ns, name)) {
            return Some(v);
        }
        let mut overlay = self.overlay.lock();
        if overlay.is_empty() {
            return None;
        }
        overlay.retain(|_, (_, at)| at.elapsed() < OVERLAY_TTL);
        overlay.get(&(storage.to_string(), ns.to_string(), name.to_string())).map(|(v, _)| v.clone())
    }

    fn list_shared(&self, storage: &str, ns: &str) -> Vec<Arc<Value>> {
        let Some(state) = self.slot.get() else { return Vec::new() };
        let Some(cache) = state.caches.get(storage) else { return Vec::new() };
        let memo_key = (storage.to_string(), ns.to_string());
        // The cache's content is a function of its revision: an unchanged revision means an
        // unchanged listing (a relist only ever moves the revision forward).
        let revision = cache.revision();
        if cache.is_ready()
            && let Some((at, objects)) = self.lists.lock().get(&memo_key)
            && *at == revision
        {
            return objects.clone();
        }
        let tail = if ns.is_empty() { String::new() } else { format!("{ns}/") };
        let snap = cache.snapshot(&format!("/registry/{storage}/{tail}"));
        if cache.is_ready() {
            let mut lists = self.lists.lock();
            // One entry per namespace that had creates: bounded, for namespaces that come and go.
            if lists.len() >= 4096 {
                lists.clear();
            }
            lists.insert(memo_key, (snap.revision, snap.objects.clone()));
        }
        snap.objects
    }

    fn list(&self, storage: &str, ns: &str) -> Vec<Value> {
        self.list_shared(storage, ns).into_iter().map(|o| (*o).clone()).collect()
    }

    /// Makes sure `storage` `ns/name` is seen if it is in the store: on a cache miss, reads
    /// the store and remembers the answer. Returns whether it exists.
    async fn ensure(&self, state: &AppState, resource: &str, ns: &str, name: &str) -> bool {
        let Some(def) = state.registry.get("", "v1", resource) else { return false };
        if self.get(def.storage, ns, name).is_some() {
            return true;
        }
        match state.objects.get_internal(def, ns, name).await {
            Ok(Some((obj, _))) => {
                let key = (def.storage.to_string(), ns.to_string(), name.to_string());
                self.overlay.lock().insert(key, (Arc::new(obj), Instant::now()));
                true
            }
            _ => false,
        }
    }
}

impl AdmissionLookup for CacheLookup {
    fn namespace(&self, name: &str) -> Option<Arc<Value>> {
        self.get("namespaces", "", name)
    }
    fn limit_ranges(&self, namespace: &str) -> Vec<Value> {
        self.list("limitranges", namespace)
    }
    fn resource_quotas(&self, namespace: &str) -> Vec<Value> {
        self.list("resourcequotas", namespace)
    }
    fn priority_classes(&self) -> Vec<Arc<Value>> {
        self.list_shared("priorityclasses", "")
    }
    fn service_account(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.get("serviceaccounts", namespace, name)
    }
    fn storage_classes(&self) -> Vec<Arc<Value>> {
        self.list_shared("storageclasses", "")
    }
    fn object_of_kind(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let state = self.slot.get()?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let storage = state.registry.by_kind(group, version, kind)?.storage;
        self.get(storage, namespace, name)
    }
    fn objects_of_kind(&self, api_version: &str, kind: &str, namespace: &str) -> Vec<Arc<Value>> {
        let Some(state) = self.slot.get() else { return Vec::new() };
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let Some(def) = state.registry.by_kind(group, version, kind) else { return Vec::new() };
        self.list_shared(def.storage, namespace)
    }
}

/// kube-apiserver's names of the admission plugins skiff implements, all enabled by default
/// (as they are in kube-apiserver 1.33, plus NodeRestriction, which kubeadm enables beside
/// `--authorization-mode=Node,RBAC`; it is installed by [`crate::filters::node_authz`]).
pub const PLUGINS: [&str; 13] = [
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "PodSecurity",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
];

/// Other plugin names kube-apiserver 1.33 knows: accepted by the flags, but skiff has no such
/// plugin (enabling one logs a warning and does nothing).
pub const NOT_IMPLEMENTED: [&str; 21] = [
    "AlwaysAdmit",
    "AlwaysDeny",
    "AlwaysPullImages",
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "ClusterTrustBundleAttest",
    "DefaultIngressClass",
    "DenyServiceExternalIPs",
    "EventRateLimit",
    "ExtendedResourceToleration",
    "ImagePolicyWebhook",
    "LimitPodHardAntiAffinityTopology",
    "MutatingAdmissionPolicy",
    "NamespaceAutoProvision",
    "NamespaceExists",
    "OwnerReferencesPermissionEnforcement",
    "PersistentVolumeClaimResize",
    "PodNodeSelector",
    "PodTolerationRestriction",
    "RuntimeClass",
];

/// The plugins that run given kube-apiserver's `--enable-admission-plugins` (added to the
/// default set) and `--disable-admission-plugins` (removed from it) — each a list of plugin
/// names, comma-separated or repeated. Names kube-apiserver knows but skiff does not implement
/// ([`NOT_IMPLEMENTED`], plus `TaintNodesByCondition`) are
/// accepted; enabling one only logs a warning.
///
/// # Errors
/// An unknown plugin name, or a plugin named in both lists (kube-apiserver refuses both).
pub fn enabled_plugins(
    enable: &[String],
    disable: &[String],
) -> Result<std::collections::BTreeSet<&'static str>, String> {
    let split = |v: &[String]| -> Vec<String> {
        v.iter().flat_map(|s| s.split(',')).map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
    };
    let (enable, disable) = (split(enable), split(disable));
    let known =
        |name: &str| PLUGINS.contains(&name) || NOT_IMPLEMENTED.contains(&name) || name == "TaintNodesByCondition";
    for name in enable.iter().chain(&disable) {
        if !known(name) {
            return Err(format!("admission plugin {name:?} is unknown; skiff implements {}", PLUGINS.join(", ")));
        }
    }
    if let Some(both) = enable.iter().find(|n| disable.contains(n)) {
        return Err(format!(
            "admission plugin {both:?} is in both --enable-admission-plugins and --disable-admission-plugins"
        ));
    }
    for name in &enable {
        if !PLUGINS.contains(&name.as_str()) {
            tracing::warn!(plugin = %name, "admission plugin not implemented by skiff; ignored");
        }
    }
    Ok(PLUGINS.iter().copied().filter(|p| !disable.iter().any(|d| d == p)).collect())
}

/// Resolves a webhook's `clientConfig.service` to a ready endpoint of the Service, as
/// kube-apiserver does with `--enable-aggregator-routing` (a ClusterIP needs the node proxy,
/// which the API server's host may not run), through
/// [`resolve_service_endpoint`]. TLS still verifies `<name>.<namespace>.svc` against the
/// webhook's caBundle.
pub struct EndpointResolver {
    slot: StateSlot,
}

impl EndpointResolver {
    /// A resolver over the watch caches of the server `slot` will hold.
    pub fn new(slot: StateSlot) -> Self {
        Self { slot }
    }
}

impl ServiceResolver for EndpointResolver {
    fn resolve(&self, namespace: &str, name: &str, port: i32) -> Result<String, String> {
        let state = self.slot.get().ok_or("the API server is shutting down")?;
        resolve_service_endpoint(&state, namespace, name, ServicePortRef::Number(port)).map_err(|e| e.message)
    }
}

/// The server's admission: the plugin chain plus quota accounting.
pub struct ChainAdmission {
    chain: AdmissionChain,
    lookup: Arc<CacheLookup>,
    webhooks: Arc<WebhookAdmission>,
    policies: Arc<PolicyAdmission>,
    slot: StateSlot,
    /// ResourceQuota is enabled.
    quota: bool,
    /// No plugin is enabled: requests skip admission entirely.
    empty: bool,
}

impl ChainAdmission {
    /// The chain of the `enabled` plugins ([`PLUGINS`] names) over the watch caches reachable
    /// through `slot`, in kube-apiserver's order, with RBAC's escalation check over
    /// `escalation` (`None` with `--authorization-mode=AlwaysAllow`); DefaultTolerationSeconds
    /// adds `tolerations` (`--default-not-ready-toleration-seconds`,
    /// `--default-unreachable-toleration-seconds`).
    pub fn new(
        slot: StateSlot,
        escalation: Option<Arc<RbacAuthorizer>>,
        enabled: &std::collections::BTreeSet<&'static str>,
        tolerations: default_toleration_seconds::DefaultTolerationSeconds,
    ) -> Self {
        let lookup = Arc::new(CacheLookup::new(slot.clone()));
        let l: Arc<dyn AdmissionLookup> = lookup.clone();
        let services = Arc::new(EndpointResolver { slot: slot.clone() });
        let webhooks = Arc::new(WebhookAdmission::new(l.clone(), services));
        let policies = Arc::new(PolicyAdmission::new(l.clone()));
        let on = |name: &str| enabled.contains(name);
        // kube-apiserver's order; ResourceQuota runs last, in `validate`, because it writes.
        let mut chain = AdmissionChain::new();
        if on("NamespaceLifecycle") {
            chain = chain.mutating(Arc::new(namespace_lifecycle::NamespaceLifecycle::new(l.clone())));
        }
        if on("LimitRanger") {
            chain = chain.mutating(Arc::new(limit_ranger::LimitRanger::new(l.clone())));
        }
        if on("ServiceAccount") {
            chain = chain.mutating(Arc::new(service_account::ServiceAccount::new(l.clone())));
        }
        if on("Priority") {
            chain = chain.mutating(Arc::new(priority::Priority::new(l.clone())));
        }
        if on("DefaultTolerationSeconds") {
            chain = chain.mutating(Arc::new(tolerations));
        }
        if on("DefaultStorageClass") {
            chain = chain.mutating(Arc::new(default_storage_class::DefaultStorageClass::new(l.clone())));
        }
        if on("StorageObjectInUseProtection") {
            chain = chain.mutating(Arc::new(storage_object_in_use_protection::StorageObjectInUseProtection));
        }
        if on("MutatingAdmissionWebhook") {
            chain = chain.mutating(webhooks.mutating_plugin());
        }
        if let Some(rbac) = escalation {
            chain = chain.validating(Arc::new(rbac_escalation::RbacEscalation::new(rbac)));
        }
        if on("NamespaceLifecycle") {
            chain = chain.validating(Arc::new(namespace_lifecycle::NamespaceLifecycle::new(l.clone())));
        }
        if on("LimitRanger") {
            chain = chain.validating(Arc::new(limit_ranger::LimitRanger::new(l.clone())));
        }
        if on("PodSecurity") {
            let config = pod_security::PodSecurityConfig::default();
            chain = chain.validating(Arc::new(pod_security::PodSecurity::new(l.clone(), config)));
        }
        if on("Priority") {
            chain = chain.validating(Arc::new(priority::Priority::new(l)));
        }
        if on("ValidatingAdmissionPolicy") {
            chain = chain.validating(policies.plugin());
        }
        if on("ValidatingAdmissionWebhook") {
            chain = chain.validating(webhooks.validating_plugin());
        }
        let (m, v) = chain.plugin_names();
        let empty = m.is_empty() && v.is_empty() && !on("ResourceQuota");
        Self { chain, lookup, webhooks, policies, slot, quota: on("ResourceQuota"), empty }
    }

    /// The webhook configurations (fed from the watch caches).
    pub fn webhooks(&self) -> &Arc<WebhookAdmission> {
        &self.webhooks
    }

    /// The ValidatingAdmissionPolicies and bindings (fed from the watch caches).
    pub fn policies(&self) -> &Arc<PolicyAdmission> {
        &self.policies
    }

    /// Store reads for what the mutating plugins look up, so a cache lag is not a rejection.
    async fn prime(&self, attrs: &Attributes<'_>, obj: &Value) {
        let Some(state) = self.slot.get() else { return };
        if attrs.operation != Operation::Create || attrs.namespace.is_empty() {
            return;
        }
        self.lookup.ensure(&state, "namespaces", "", attrs.namespace).await;
        let is_pod = attrs.def.group.is_empty() && attrs.def.resource == "pods" && attrs.subresource.is_none();
        if !is_pod || !obj["metadata"]["annotations"][service_account::MIRROR_POD_ANNOTATION].is_null() {
            return;
        }
        let sa = obj["spec"]["serviceAccountName"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(service_account::DEFAULT_SERVICE_ACCOUNT)
            .to_string();
        let deadline = Instant::now() + SERVICE_ACCOUNT_WAIT;
        while !self.lookup.ensure(&state, "serviceaccounts", attrs.namespace, &sa).await {
            // Only the default account is created by a controller; others are the user's.
            if sa != service_account::DEFAULT_SERVICE_ACCOUNT || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// ResourceQuota: charges a create to the namespace's quotas and persists their new usage.
    async fn charge_quotas(&self, req: &AdmissionRequest) -> Result<(), ApiError> {
        if !self.quota
            || req.op() != authadm::Operation::Create
            || !req.sub_resource.is_empty()
            || req.namespace.is_empty()
        {
            return Ok(());
        }
        let Some(state) = self.slot.get() else { return Ok(()) };
        let Some(def) = state.registry.get("", "v1", "resourcequotas").cloned() else { return Ok(()) };
        let mut quotas = self.lookup.resource_quotas(&req.namespace);
        if quotas.is_empty() {
            return Ok(());
        }
        for _ in 0..QUOTA_ATTEMPTS {
            let updated = resource_quota::charge(req, &quotas)?;
            if req.dry_run || updated.is_empty() {
                return Ok(());
            }
            let mut conflict = false;
            for q in &updated {
                let name = q["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let status = q["status"].clone();
                let rv = q["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
                let r = state
                    .objects
                    .update(&def, &req.namespace, &name, Some("status"), &Default::default(), None, |cur| {
                        let mut cur = cur.cloned().ok_or_else(|| ApiError::not_found("", "resourcequotas", &name))?;
                        cur["metadata"]["resourceVersion"] = rv.clone().into();
                        cur["status"] = status.clone();
                        Ok(cur)
                    })
                    .await;
                match r {
                    Ok(_) => {}
                    Err(e) if e.code == 409 => {
                        conflict = true;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !conflict {
                return Ok(());
            }
            // Someone else charged the quota meanwhile: re-read from the store and recharge
            // (quotas already written keep their charge, as in Kubernetes, until the quota
            // controller recomputes them).
            let mut fresh = Vec::with_capacity(quotas.len());
            for q in &quotas {
                let name = q["metadata"]["name"].as_str().unwrap_or_default();
                if let Some((obj, _)) = state.objects.get_internal(&def, &req.namespace, name).await? {
                    fresh.push(obj);
                }
            }
            quotas = fresh;
        }
        Err(ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on resourcequotas: the quotas of {} kept changing", req.namespace),
        ))
    }
}

#[async_trait]
impl Admission for ChainAdmission {
    async fn mutate(&self, attrs: &Attributes<'_>, obj: &mut Value) -> Result<(), ApiError> {
        self.mutate_collecting(attrs, obj, &mut Vec::new()).await
    }

    async fn validate(&self, attrs: &Attributes<'_>, obj: &Value) -> Result<(), ApiError> {
        // A delete's request carries no object: nothing to copy then.
        let mut obj = if attrs.operation == Operation::Delete { Value::Null } else { obj.clone() };
        self.validate_collecting(attrs, &mut obj, &mut Vec::new()).await
    }

    async fn mutate_collecting(
        &self,
        attrs: &Attributes<'_>,
        obj: &mut Value,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let Some(user) = attrs.user.filter(|_| !self.empty) else { return Ok(()) };
        self.prime(attrs, obj).await;
        // The request owns the object while the plugins mutate it (moved, not copied).
        let mut req = admission_request(attrs, user, None);
        req.object = Some(std::mem::take(obj));
        let result = self.chain.mutate(&mut req).await;
        if let Some(o) = req.object {
            *obj = o;
        }
        warnings.extend(result?.warnings);
        Ok(())
    }

    async fn validate_collecting(
        &self,
        attrs: &Attributes<'_>,
        obj: &mut Value,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let Some(user) = attrs.user.filter(|_| !self.empty) else { return Ok(()) };
        // The request holds the object while the plugins read it (moved, not copied) and
        // gives it back whatever they answer.
        let mut req = admission_request(attrs, user, None);
        if attrs.operation != Operation::Delete {
            req.object = Some(std::mem::take(obj));
        }
        let result = match self.chain.validate(&req).await {
            Ok(feedback) => {
                warnings.extend(feedback.warnings);
                self.charge_quotas(&req).await
            }
            Err(e) => Err(e),
        };
        if let Some(o) = req.object.take() {
            *obj = o;
        }
        result
    }
}

/// What a feed keeps equal to the watch caches: objects applied and removed by kind.
trait ConfigSink: Send + Sync + 'static {
    fn apply(&self, kind: &str, obj: &Value);
    fn remove(&self, kind: &str, name: &str);
    fn names(&self, kind: &str) -> Vec<String>;
}

impl ConfigSink for WebhookAdmission {
    fn apply(&self, kind: &str, obj: &Value) {
        let mut o = obj.clone();
        o["kind"] = kind.into();
        if let Err(e) = WebhookAdmission::apply(self, &o) {
            tracing::warn!(error = %e, "ignoring a webhook configuration");
        }
    }
    fn remove(&self, kind: &str, name: &str) {
        WebhookAdmission::remove(self, kind, name)
    }
    fn names(&self, kind: &str) -> Vec<String> {
        let list =
            if kind == "MutatingWebhookConfiguration" { self.mutating_webhooks() } else { self.validating_webhooks() };
        list.into_iter().map(|w| w.configuration).collect()
    }
}

impl ConfigSink for PolicyAdmission {
    fn apply(&self, kind: &str, obj: &Value) {
        let mut o = obj.clone();
        o["kind"] = kind.into();
        if let Err(e) = PolicyAdmission::apply(self, &o) {
            tracing::warn!(error = %e, "ignoring a validating admission policy");
        }
    }
    fn remove(&self, kind: &str, name: &str) {
        PolicyAdmission::remove(self, kind, name)
    }
    fn names(&self, kind: &str) -> Vec<String> {
        PolicyAdmission::names(self, kind)
    }
}

/// Keeps the webhook configurations of `admission` equal to the watch caches.
pub async fn feed_webhooks(webhooks: Arc<WebhookAdmission>, state: Arc<AppState>) {
    let kinds = [
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
    ];
    feed(webhooks, state, kinds).await
}

/// Keeps the ValidatingAdmissionPolicies and bindings of `policies` equal to the watch caches.
pub async fn feed_policies(policies: Arc<PolicyAdmission>, state: Arc<AppState>) {
    let kinds = [
        ("validatingadmissionpolicies", "ValidatingAdmissionPolicy"),
        ("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding"),
    ];
    feed(policies, state, kinds).await
}

async fn feed<S: ConfigSink>(sink: Arc<S>, state: Arc<AppState>, kinds: [(&'static str, &'static str); 2]) {
    let mut tasks = Vec::new();
    for (storage, kind) in kinds {
        let Some(cache) = state.caches.get(storage).cloned() else { continue };
        let sink = sink.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                while !cache.is_ready() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                let snap = cache.snapshot(cache.prefix());
                for name in sink.names(kind) {
                    sink.remove(kind, &name);
                }
                for o in &snap.objects {
                    sink.apply(kind, o);
                }
                let mut sub = snap.subscription;
                loop {
                    match sub.recv().await {
                        Recv::Msg(CacheMsg::Event(e)) => match e.kind {
                            EventKind::Added | EventKind::Modified => sink.apply(kind, &e.object),
                            EventKind::Deleted => {
                                sink.remove(kind, e.object["metadata"]["name"].as_str().unwrap_or_default())
                            }
                        },
                        Recv::Msg(CacheMsg::Progress(_)) => {}
                        Recv::Msg(CacheMsg::Reset) | Recv::Lagged => break,
                        Recv::Closed => return,
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Creates what admission expects every cluster to have: the system PriorityClasses and the
/// `default` ServiceAccount of the system namespaces (the serviceaccount controller makes the
/// others).
///
/// # Errors
/// A create that fails other than with 409 AlreadyExists.
pub async fn bootstrap(state: &AppState) -> anyhow::Result<()> {
    let mut objects: Vec<(ResourceDef, String, Value)> = Vec::new();
    if let Some(def) = state.registry.get("scheduling.k8s.io", "v1", "priorityclasses") {
        for pc in priority::system_priority_classes() {
            objects.push((def.clone(), String::new(), pc));
        }
    }
    if let Some(def) = state.registry.get("", "v1", "serviceaccounts") {
        for ns in crate::SYSTEM_NAMESPACES {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": service_account::DEFAULT_SERVICE_ACCOUNT, "namespace": ns}});
            objects.push((def.clone(), ns.to_string(), sa));
        }
    }
    for (def, ns, obj) in objects {
        match state.objects.create(&def, &ns, obj, None, &Default::default()).await {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => anyhow::bail!("creating bootstrap {}: {e}", def.resource),
        }
    }
    Ok(())
}

/// skiff-admission's view of one admission call: the request as its plugins (and NodeRestriction)
/// read it, with copies of the object and the old object.
pub(crate) fn admission_request(
    attrs: &Attributes<'_>,
    user: &crate::auth::RequestUser,
    obj: Option<&Value>,
) -> AdmissionRequest {
    let op = match attrs.operation {
        Operation::Create => authadm::Operation::Create,
        Operation::Update => authadm::Operation::Update,
        Operation::Delete => authadm::Operation::Delete,
    };
    let d = attrs.def;
    let mut req = AdmissionRequest::new(op, d.group, d.version, d.resource, d.kind);
    req.namespace = attrs.namespace.to_string();
    req.name = attrs.name.to_string();
    req.sub_resource = attrs.subresource.unwrap_or_default().to_string();
    req.object = obj.cloned();
    req.old_object = attrs.old.cloned();
    req.user = UserInfo::new(user.name.clone(), user.groups.iter().cloned());
    req.dry_run = attrs.dry_run;
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_admission_reads_is_served_by_the_built_in_registry() {
        let registry = crate::resources::Registry::default();
        let quota = registry.get("", "v1", "resourcequotas").unwrap();
        assert!(quota.has_status());
        assert_eq!(quota.short_names, &["quota"]);
        let pc = registry.get("scheduling.k8s.io", "v1", "priorityclasses").unwrap();
        assert!(!pc.namespaced);
        for r in ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"] {
            let def = registry.get("admissionregistration.k8s.io", "v1", r).unwrap();
            assert!(!def.namespaced, "{r} is cluster-scoped");
        }
    }

    #[test]
    fn admission_plugin_flags_follow_kube_apiserver_names_and_rules() {
        let v = |s: &str| vec![s.to_string()];
        let all = enabled_plugins(&[], &[]).unwrap();
        assert_eq!(all.len(), PLUGINS.len());
        let some = enabled_plugins(&[], &v("ResourceQuota,PodSecurity")).unwrap();
        assert!(!some.contains("ResourceQuota") && !some.contains("PodSecurity") && some.contains("Priority"));
        assert_eq!(enabled_plugins(&v("NodeRestriction"), &[]).unwrap(), all, "known but not implemented");
        assert!(enabled_plugins(&v("NoSuchPlugin"), &[]).unwrap_err().contains("NoSuchPlugin"));
        assert!(enabled_plugins(&v("Priority"), &v("Priority")).unwrap_err().contains("both"));
        let none = enabled_plugins(&[], &[PLUGINS.join(",")]).unwrap();
        assert!(none.is_empty());
    }
}
