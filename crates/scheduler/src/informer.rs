//! The scheduler's informers (kube-scheduler's `eventhandlers.go` wiring): the runtime's
//! [`Informer`]s, whose caches reduce objects with
//! [`skiff_runtime::informer::transform_for_cache`], with handlers that see each change as a
//! [`Change`]. A relist's objects whose resourceVersion did not change are not reported again.

use std::fmt::Debug;
use std::sync::Arc;

use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use skiff_runtime::api::ApiResource;
use skiff_runtime::informer::{ApiListerWatcher, Informer, ResourceEventHandler};
pub use skiff_runtime::informer::{Store, key_of};

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

/// An informer of every `K` in the cluster that calls `handler` for every change once run
/// ([`Informer::run`]); its cache is [`Informer::store`].
pub fn informer<K>(client: &kube::Client, handler: impl Fn(Change<K>) + Send + Sync + 'static) -> Arc<Informer<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let source = ApiListerWatcher::new(Api::<K>::all(client.clone()), watcher::Config::default());
    let informer = Arc::new(Informer::with_source(ApiResource::erase::<K>(&()), None, source));
    informer.add_event_handler(Arc::new(ChangeHandler(handler)));
    informer
}

/// Passes an informer's notifications on as [`Change`]s.
struct ChangeHandler<F>(F);

impl<K, F> ResourceEventHandler<K> for ChangeHandler<F>
where
    K: Resource + Send + Sync,
    F: Fn(Change<K>) + Send + Sync,
{
    fn on_add(&self, obj: &Arc<K>) {
        (self.0)(Change::Add(obj.clone()))
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        // A relist re-delivers every object; only real changes matter to the queue and cache.
        let (o, n) = (&old.meta().resource_version, &new.meta().resource_version);
        if o != n || o.is_none() {
            (self.0)(Change::Update(old.clone(), new.clone()))
        }
    }

    fn on_delete(&self, obj: &Arc<K>) {
        (self.0)(Change::Delete(obj.clone()))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::watcher::Event;
    use parking_lot::Mutex;

    use super::*;

    fn node(rv: &str) -> Node {
        Node {
            metadata: ObjectMeta { name: Some("n1".into()), resource_version: Some(rv.into()), ..Default::default() },
            ..Default::default()
        }
    }

    #[test]
    fn a_relisted_object_is_reported_only_when_its_resource_version_changed() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let informer = Informer::<Node>::new(ApiResource::erase::<Node>(&()), None);
        let log = seen.clone();
        informer.add_event_handler(Arc::new(ChangeHandler(move |c: Change<Node>| {
            log.lock().push(match c {
                Change::Add(_) => "add",
                Change::Update(..) => "update",
                Change::Delete(_) => "delete",
            })
        })));
        for rv in ["1", "1", "2"] {
            informer.handle_event(Event::Init);
            informer.handle_event(Event::InitApply(node(rv)));
            informer.handle_event(Event::InitDone);
        }
        informer.handle_event(Event::Delete(node("2")));
        assert_eq!(*seen.lock(), ["add", "update", "delete"]);
    }
}
