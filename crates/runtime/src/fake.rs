//! [`FakeApi`]: an in-memory [`ApiClient`] that records every action, for unit tests.
//!
//! Like `client-go`'s fake clientset with its object tracker: objects seeded with
//! [`FakeApi::seed`] can be read, created, updated (with `resourceVersion` conflicts), patched
//! (merge and JSON patch; strategic merge patch is applied as a merge patch) and deleted (with
//! uid preconditions and the `foregroundDeletion`/`orphan` finalizers the API server adds). Every
//! call is appended to [`FakeApi::actions`]; [`FakeApi::fail_next`] injects an error.

use std::collections::BTreeMap;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};
use skiff_apimachinery::LabelSelector;

use crate::api::{
    ApiClient, ApiError, ApiObject, ApiResource, DeleteOptions, DiscoveredResource, PatchType, PropagationPolicy,
    resource_of,
};

/// One recorded API call.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// `get`, `list`, `create`, `update`, `patch`, `delete`, `deletecollection`, `discover`.
    pub verb: &'static str,
    /// The resource's plural name (`replicasets`).
    pub resource: String,
    /// The subresource (`status`, `finalize`), if any.
    pub subresource: Option<String>,
    /// The namespace, if any.
    pub namespace: Option<String>,
    /// The object name (for `create`, the name of the created object).
    pub name: String,
    /// The request body: the object for create/update, the patch for patch.
    pub body: Option<Value>,
    /// The patch type of a patch.
    pub patch_type: Option<PatchType>,
    /// The delete options of a delete.
    pub delete_options: Option<DeleteOptions>,
}

impl Action {
    /// Whether the call changes state (not get/list/discover).
    pub fn is_mutation(&self) -> bool {
        !matches!(self.verb, "get" | "list" | "discover")
    }

    /// `verb resource[/subresource] [namespace/]name`, for readable assertions.
    pub fn summary(&self) -> String {
        let res = match &self.subresource {
            Some(s) => format!("{}/{s}", self.resource),
            None => self.resource.clone(),
        };
        match &self.namespace {
            Some(ns) => format!("{} {res} {ns}/{}", self.verb, self.name),
            None => format!("{} {res} {}", self.verb, self.name),
        }
    }
}

type Key = (String, String, String);

#[derive(Default)]
struct State {
    objects: BTreeMap<Key, Value>,
    actions: Vec<Action>,
    resource_version: u64,
    uid: u64,
    failures: Vec<(&'static str, String, ApiError)>,
    discovery: Vec<DiscoveredResource>,
}

/// The recording fake. Cheap to share behind an `Arc`.
#[derive(Default)]
pub struct FakeApi {
    state: Mutex<State>,
}

fn key(resource: &ApiResource, namespace: Option<&str>, name: &str) -> Key {
    (format!("{}/{}", resource.group, resource.plural), namespace.unwrap_or("").to_string(), name.to_string())
}

fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str)
}

fn now_rfc3339() -> String {
    let ts = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%SZ", ts).unwrap_or_default()
}

impl FakeApi {
    /// An empty fake.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a typed object as if it existed on the server (not recorded as an action).
    pub fn seed<K: ApiObject>(&self, object: &K) {
        self.seed_value(&resource_of::<K>(), serde_json::to_value(object).unwrap_or(Value::Null));
    }

    /// Stores a JSON object of `resource` (not recorded as an action). A missing uid or
    /// resourceVersion is filled in.
    pub fn seed_value(&self, resource: &ApiResource, mut object: Value) {
        let mut st = self.state.lock();
        st.resource_version += 1;
        let rv = st.resource_version;
        let ns = meta_str(&object, "namespace").map(str::to_string);
        let name = meta_str(&object, "name").unwrap_or_default().to_string();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.entry("resourceVersion").or_insert_with(|| json!(rv.to_string()));
            meta.entry("uid").or_insert_with(|| json!(format!("uid-{name}")));
        }
        st.objects.insert(key(resource, ns.as_deref(), &name), object);
    }

    /// Sets what [`ApiClient::discover`] returns.
    pub fn set_discovery(&self, resources: Vec<DiscoveredResource>) {
        self.state.lock().discovery = resources;
    }

    /// Makes the next call of `verb` on `resource` (plural name) fail with `error`.
    pub fn fail_next(&self, verb: &'static str, resource: &str, error: ApiError) {
        self.state.lock().failures.push((verb, resource.to_string(), error));
    }

    /// Every recorded call, in order.
    pub fn actions(&self) -> Vec<Action> {
        self.state.lock().actions.clone()
    }

    /// The recorded calls that change state.
    pub fn mutations(&self) -> Vec<Action> {
        self.actions().into_iter().filter(Action::is_mutation).collect()
    }

    /// [`Action::summary`] of every mutation.
    pub fn mutation_summaries(&self) -> Vec<String> {
        self.mutations().iter().map(Action::summary).collect()
    }

    /// Forgets the recorded calls.
    pub fn clear_actions(&self) {
        self.state.lock().actions.clear();
    }

    /// The stored object, if any.
    pub fn object(&self, resource: &ApiResource, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.state.lock().objects.get(&key(resource, namespace, name)).cloned()
    }

    /// The stored typed object, if any.
    pub fn object_typed<K: ApiObject>(&self, namespace: Option<&str>, name: &str) -> Option<K> {
        self.object(&resource_of::<K>(), namespace, name).and_then(|v| serde_json::from_value(v).ok())
    }

    /// Every stored object of a resource.
    pub fn objects(&self, resource: &ApiResource) -> Vec<Value> {
        self.state.lock().objects.iter().filter(|(k, _)| in_scope(k, resource, None)).map(|(_, v)| v.clone()).collect()
    }

    fn record(&self, st: &mut State, action: Action) -> Result<(), ApiError> {
        let verb = action.verb;
        let resource = action.resource.clone();
        st.actions.push(action);
        if let Some(pos) = st.failures.iter().position(|(v, r, _)| *v == verb && *r == resource) {
            let (_, _, err) = st.failures.remove(pos);
            return Err(err);
        }
        Ok(())
    }

    fn next_rv(st: &mut State) -> String {
        st.resource_version += 1;
        st.resource_version.to_string()
    }

    /// Locks the state and records `action` (failing with an injected error, if any).
    fn begin(&self, action: Action) -> Result<parking_lot::MutexGuard<'_, State>, ApiError> {
        let mut st = self.state.lock();
        self.record(&mut st, action)?;
        Ok(st)
    }

    /// Stores a written object under a new resourceVersion, or removes it when the write left a
    /// deleted object without finalizers (status writes never finalize), and returns it.
    fn store_write(st: &mut State, resource: &ApiResource, k: Key, mut obj: Value, subresource: Option<&str>) -> Value {
        let rv = Self::next_rv(st);
        set_meta(&mut obj, "resourceVersion", json!(rv));
        if subresource != Some("status") && finalized(resource, &obj) {
            st.objects.remove(&k);
        } else {
            st.objects.insert(k, obj.clone());
        }
        obj
    }
}

/// The stored object's key and a copy of it, or 404 `NotFound`.
fn stored(st: &State, resource: &ApiResource, namespace: Option<&str>, name: &str) -> Result<(Key, Value), ApiError> {
    let k = key(resource, namespace, name);
    match st.objects.get(&k) {
        Some(obj) => Ok((k, obj.clone())),
        None => Err(ApiError::not_found(&resource.group, &resource.plural, name)),
    }
}

/// Whether `k` is an object of `resource`, in `namespace` when one is given.
fn in_scope(k: &Key, resource: &ApiResource, namespace: Option<&str>) -> bool {
    k.0.split_once('/') == Some((resource.group.as_str(), resource.plural.as_str()))
        && namespace.is_none_or(|ns| k.1 == ns)
}

fn action(verb: &'static str, resource: &ApiResource, namespace: Option<&str>, name: &str) -> Action {
    Action {
        verb,
        resource: resource.plural.clone(),
        subresource: None,
        namespace: namespace.map(str::to_string),
        name: name.to_string(),
        body: None,
        patch_type: None,
        delete_options: None,
    }
}

fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"][field] = value;
}

/// Whether a deleted object has no finalizer left (namespaces also wait for
/// `spec.finalizers`), so the API server removes it.
fn finalized(resource: &ApiResource, obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
        && finalizers(obj).is_empty()
        && (resource.plural != "namespaces"
            || obj.pointer("/spec/finalizers").and_then(Value::as_array).is_none_or(Vec::is_empty))
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

#[async_trait]
impl ApiClient for FakeApi {
    async fn get(&self, resource: &ApiResource, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let st = self.begin(action("get", resource, namespace, name))?;
        stored(&st, resource, namespace, name).map(|(_, obj)| obj)
    }

    /// Serves `scale` (an `autoscaling/v1` Scale of any object with `spec.replicas`); every
    /// other subresource is 404.
    async fn get_subresource(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
    ) -> Result<Value, ApiError> {
        let mut act = action("get", resource, namespace, name);
        act.subresource = Some(subresource.to_string());
        let st = self.begin(act)?;
        let (_, obj) = stored(&st, resource, namespace, name)?;
        match obj.pointer("/spec/replicas") {
            Some(replicas) if subresource == "scale" => Ok(json!({
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {"name": name, "namespace": namespace, "uid": obj.pointer("/metadata/uid")},
                "spec": {"replicas": replicas},
                "status": {"replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0))},
            })),
            _ => Err(ApiError::not_found(&resource.group, &format!("{}/{subresource}", resource.plural), name)),
        }
    }

    async fn list(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Value>, ApiError> {
        let st = self.begin(action("list", resource, namespace, ""))?;
        let selector = match label_selector {
            Some(s) => LabelSelector::parse(s).map_err(ApiError::bad_request)?,
            None => LabelSelector::everything(),
        };
        Ok(st
            .objects
            .iter()
            .filter(|(k, v)| in_scope(k, resource, namespace) && selector.matches_object(v))
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn create(&self, resource: &ApiResource, namespace: Option<&str>, object: &Value) -> Result<Value, ApiError> {
        let mut st = self.state.lock();
        let mut obj = object.clone();
        let mut name = meta_str(&obj, "name").unwrap_or_default().to_string();
        if name.is_empty() {
            let prefix = meta_str(&obj, "generateName").unwrap_or_default().to_string();
            st.uid += 1;
            name = format!("{prefix}{:05}", st.uid);
            set_meta(&mut obj, "name", json!(name));
        }
        let mut act = action("create", resource, namespace, &name);
        act.body = Some(object.clone());
        self.record(&mut st, act)?;
        let k = key(resource, namespace, &name);
        if st.objects.contains_key(&k) {
            return Err(ApiError::already_exists(&resource.group, &resource.plural, &name));
        }
        if let Some(ns) = namespace {
            set_meta(&mut obj, "namespace", json!(ns));
        }
        st.uid += 1;
        let uid = format!("uid-{}-{}", name, st.uid);
        set_meta(&mut obj, "uid", json!(uid));
        let rv = Self::next_rv(&mut st);
        set_meta(&mut obj, "resourceVersion", json!(rv));
        set_meta(&mut obj, "creationTimestamp", json!(now_rfc3339()));
        if obj.get("spec").is_some() {
            set_meta(&mut obj, "generation", json!(1));
        }
        st.objects.insert(k, obj.clone());
        Ok(obj)
    }

    async fn update(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        object: &Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut act = action("update", resource, namespace, name);
        act.subresource = subresource.map(str::to_string);
        act.body = Some(object.clone());
        let mut st = self.begin(act)?;
        let (k, stored) = stored(&st, resource, namespace, name)?;
        if let Some(rv) = meta_str(object, "resourceVersion")
            && !rv.is_empty()
            && Some(rv) != meta_str(&stored, "resourceVersion")
        {
            return Err(ApiError::conflict(&resource.group, &resource.plural, name));
        }
        let new = match subresource {
            Some("status") => {
                // Like Kubernetes' status strategies: spec is kept; metadata.annotations from the
                // request are kept too (the deployment controller records revisions that way).
                let mut n = stored.clone();
                n["status"] = object.get("status").cloned().unwrap_or(Value::Null);
                if let Some(a) = object.pointer("/metadata/annotations") {
                    set_meta(&mut n, "annotations", a.clone());
                }
                n
            }
            Some("finalize") => {
                let mut n = stored.clone();
                n["spec"]["finalizers"] = object.pointer("/spec/finalizers").cloned().unwrap_or(json!([]));
                n
            }
            _ => {
                let mut n = object.clone();
                if let Some(status) = stored.get("status") {
                    n["status"] = status.clone();
                }
                let generation = stored.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
                let generation = if stored.get("spec") != n.get("spec") { generation + 1 } else { generation };
                set_meta(&mut n, "generation", json!(generation));
                for f in ["uid", "creationTimestamp", "deletionTimestamp"] {
                    if let Some(v) = stored.pointer(&format!("/metadata/{f}")) {
                        set_meta(&mut n, f, v.clone());
                    }
                }
                n
            }
        };
        Ok(Self::store_write(&mut st, resource, k, new, subresource))
    }

    async fn patch(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        subresource: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut act = action("patch", resource, namespace, name);
        act.subresource = subresource.map(str::to_string);
        act.body = Some(patch.clone());
        act.patch_type = Some(patch_type);
        let mut st = self.begin(act)?;
        let (k, mut obj) = stored(&st, resource, namespace, name)?;
        if let Some(rv) = meta_str(patch, "resourceVersion")
            && Some(rv) != meta_str(&obj, "resourceVersion")
        {
            return Err(ApiError::conflict(&resource.group, &resource.plural, name));
        }
        if let Some(uid) = meta_str(patch, "uid")
            && Some(uid) != meta_str(&obj, "uid")
        {
            return Err(ApiError::conflict(&resource.group, &resource.plural, name));
        }
        match patch_type {
            PatchType::Merge | PatchType::Strategic => json_patch::merge(&mut obj, patch),
            PatchType::Json => {
                let p: json_patch::Patch = serde_json::from_value(patch.clone())
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                json_patch::patch(&mut obj, &p).map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?;
            }
        }
        Ok(Self::store_write(&mut st, resource, k, obj, subresource))
    }

    async fn delete(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        let mut act = action("delete", resource, namespace, name);
        act.delete_options = Some(options.clone());
        let mut st = self.begin(act)?;
        let (k, mut obj) = stored(&st, resource, namespace, name)?;
        if let Some(uid) = &options.precondition_uid
            && Some(uid.as_str()) != meta_str(&obj, "uid")
        {
            return Err(ApiError::conflict(&resource.group, &resource.plural, name));
        }
        let mut fins = finalizers(&obj);
        match options.propagation_policy {
            Some(PropagationPolicy::Foreground) if !fins.iter().any(|f| f == "foregroundDeletion") => {
                fins.push("foregroundDeletion".into())
            }
            Some(PropagationPolicy::Orphan) if !fins.iter().any(|f| f == "orphan") => fins.push("orphan".into()),
            _ => {}
        }
        if fins.is_empty() {
            st.objects.remove(&k);
        } else {
            set_meta(&mut obj, "finalizers", json!(fins));
            if obj.pointer("/metadata/deletionTimestamp").is_none() {
                set_meta(&mut obj, "deletionTimestamp", json!(now_rfc3339()));
            }
            let rv = Self::next_rv(&mut st);
            set_meta(&mut obj, "resourceVersion", json!(rv));
            st.objects.insert(k, obj);
        }
        Ok(())
    }

    async fn delete_collection(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        let names: Vec<String> = {
            let mut act = action("deletecollection", resource, namespace, "");
            act.delete_options = Some(options.clone());
            let st = self.begin(act)?;
            st.objects.keys().filter(|k| in_scope(k, resource, namespace)).map(|k| k.2.clone()).collect()
        };
        for name in names {
            let mut st = self.state.lock();
            let k = key(resource, namespace, &name);
            if let Some(mut obj) = st.objects.get(&k).cloned() {
                if finalizers(&obj).is_empty() {
                    st.objects.remove(&k);
                } else if obj.pointer("/metadata/deletionTimestamp").is_none() {
                    set_meta(&mut obj, "deletionTimestamp", json!(now_rfc3339()));
                    st.objects.insert(k, obj);
                }
            }
        }
        Ok(())
    }

    async fn discover(&self) -> Result<Vec<DiscoveredResource>, ApiError> {
        let st =
            self.begin(action("discover", &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()), None, ""))?;
        Ok(st.discovery.clone())
    }
}

/// Serializes any value to JSON for assertions (`Value::Null` on failure).
pub fn json_of<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Takes every key ready in `queue`, marking each done, in the order the queue hands them out:
/// what a controller's workers would process next (tests that check what a handler queued).
pub async fn drain_queue<T: Eq + std::hash::Hash + Clone + Send + Sync + 'static>(
    queue: &crate::workqueue::WorkQueue<T>,
) -> Vec<T> {
    let mut keys = Vec::new();
    while !queue.is_empty() {
        let Some(k) = queue.get().await else { break };
        queue.done(&k);
        keys.push(k);
    }
    keys
}
