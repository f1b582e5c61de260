//! A minimal informer: list+watch one resource kind (through `kube::runtime::watcher`), keep a
//! local store, and turn the stream into Add/Update/Delete notifications (relists included:
//! objects missing from a fresh list are reported deleted). Objects are cached through
//! [`skiff_runtime::informer::transform_for_cache`], as the controllers' informers are.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use kube::Resource;
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;

/// A change to a watched object.
#[derive(Debug)]
pub enum Change<K> {
    /// New object.
    Add(Arc<K>),
    /// `(old, new)`.
    Update(Arc<K>, Arc<K>),
    /// Removed object (last known state).
    Delete(Arc<K>),
}

/// The informer's local copy, by `namespace/name` (or `name`).
pub struct Store<K> {
    map: RwLock<HashMap<String, Arc<K>>>,
}

impl<K> Default for Store<K> {
    fn default() -> Self {
        Self { map: RwLock::new(HashMap::new()) }
    }
}

impl<K: Resource> Store<K> {
    /// All objects.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.map.read().values().cloned().collect()
    }

    /// Objects in a namespace.
    pub fn list_namespace(&self, ns: &str) -> Vec<Arc<K>> {
        self.map.read().values().filter(|o| o.meta().namespace.as_deref() == Some(ns)).cloned().collect()
    }

    /// One object by key.
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.map.read().get(key).cloned()
    }
}

/// `namespace/name`, or `name` for cluster-scoped objects.
pub fn key_of<K: Resource>(o: &K) -> String {
    let m = o.meta();
    match m.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", m.name.as_deref().unwrap_or("")),
        _ => m.name.clone().unwrap_or_default(),
    }
}

/// Runs until the stream ends: keeps `store` current and calls `handler` for every change.
/// `synced` is notified after the first complete list.
pub async fn run<K>(
    api: kube::Api<K>,
    store: Arc<Store<K>>,
    synced: Arc<tokio::sync::Notify>,
    handler: impl Fn(Change<K>) + Send + Sync + 'static,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut relist: Option<std::collections::HashSet<String>> = None;
    let mut first_sync = true;
    let upsert = |mut o: K| {
        // Cached like kube-scheduler's informers: no managedFields; for Pods, none of the
        // API-sourced volumes no plugin reads.
        skiff_runtime::informer::transform_for_cache(&mut o);
        let key = key_of(&o);
        let new = Arc::new(o);
        let old = store.map.write().insert(key, new.clone());
        match old {
            Some(old) => {
                if old.meta().resource_version != new.meta().resource_version || old.meta().resource_version.is_none() {
                    handler(Change::Update(old, new));
                }
            }
            None => handler(Change::Add(new)),
        }
    };
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Init) => relist = Some(Default::default()),
            Ok(watcher::Event::InitApply(o)) => {
                if let Some(seen) = relist.as_mut() {
                    seen.insert(key_of(&o));
                }
                upsert(o);
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(seen) = relist.take() {
                    let gone: Vec<Arc<K>> = {
                        let mut m = store.map.write();
                        let keys: Vec<String> = m.keys().filter(|k| !seen.contains(*k)).cloned().collect();
                        keys.into_iter().filter_map(|k| m.remove(&k)).collect()
                    };
                    for o in gone {
                        handler(Change::Delete(o));
                    }
                }
                if first_sync {
                    first_sync = false;
                    synced.notify_one();
                }
            }
            Ok(watcher::Event::Apply(o)) => upsert(o),
            Ok(watcher::Event::Delete(o)) => {
                let removed = store.map.write().remove(&key_of(&o));
                handler(Change::Delete(removed.unwrap_or_else(|| Arc::new(o))));
            }
            Err(e) => tracing::warn!(kind = std::any::type_name::<K>(), error = %e, "watch failed; retrying"),
        }
    }
}
