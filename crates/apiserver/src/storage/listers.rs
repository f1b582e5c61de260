//! Reads of the watch caches by key or prefix, the way kube-apiserver's admission plugins and
//! authenticators read their informers' listers: no store round trip, no copy of a whole
//! resource's snapshot for one object.

use std::sync::Arc;

use serde_json::Value;

use crate::AppState;

/// The objects of one watch cache under `prefix` (a namespace prefix or an exact key).
pub(crate) fn cache_objects(state: &AppState, storage: &str, prefix_tail: &str) -> Vec<Arc<Value>> {
    let Some(cache) = state.caches.get(storage) else { return Vec::new() };
    cache.snapshot(&format!("/registry/{storage}/{prefix_tail}")).objects
}

/// One object from a watch cache (`ns` empty for cluster-scoped objects).
pub(crate) fn cache_get(state: &AppState, storage: &str, ns: &str, name: &str) -> Option<Value> {
    cache_get_shared(state, storage, ns, name).map(|o| (*o).clone())
}

/// One object from a watch cache, shared with the cache (not copied).
pub(crate) fn cache_get_shared(state: &AppState, storage: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
    let cache = state.caches.get(storage)?;
    // One key lookup: no snapshot of the prefix (nor a subscription to it) per call.
    let mut key = String::with_capacity(11 + storage.len() + ns.len() + name.len());
    key.push_str("/registry/");
    key.push_str(storage);
    key.push('/');
    if !ns.is_empty() {
        key.push_str(ns);
        key.push('/');
    }
    key.push_str(name);
    cache.get(&key)
}
