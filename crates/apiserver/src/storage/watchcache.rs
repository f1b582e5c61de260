//! The watch cache: one per storage prefix (resource), fed by a single store watch.
//!
//! Like kube-apiserver's `Cacher` (`staging/src/k8s.io/apiserver/pkg/storage/cacher`), it keeps
//! the current objects (for lists at `resourceVersion=0` and initial watch events) and a ring of
//! recent events (to resume watches from a recent resourceVersion), and fans events out to any
//! number of watchers through one bounded broadcast channel. A watcher that falls more than the
//! channel's capacity behind is told so ([`Recv::Lagged`]) and its stream is ended cleanly; the
//! client resumes from the last resourceVersion it saw, which the ring still holds.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use skiff_store::{Backend, EventType, RangeRequest, Revision, WatchResponse};
use tokio::sync::broadcast;

use crate::util::set_resource_version;

/// The type of a cached event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created.
    Added,
    /// The key was updated.
    Modified,
    /// The key was deleted.
    Deleted,
}

/// One change, decoded once and shared by every watcher.
#[derive(Debug)]
pub struct CacheEvent {
    /// Added, Modified or Deleted.
    pub kind: EventKind,
    /// The store key.
    pub key: String,
    /// The store revision of the change.
    pub revision: Revision,
    /// The object after the change (for a delete: the last state), with `resourceVersion` set
    /// to `revision`.
    pub object: Arc<Value>,
    /// The stored value before a modification and its revision, kept only when the cache did
    /// not hold that revision itself, and then decoded only when a watcher asks for it
    /// ([`CacheEvent::prev`]: watchers with selectors, to see objects leave them).
    prev_raw: Option<(Vec<u8>, Revision)>,
    /// The object before the change (see [`CacheEvent::prev`]): the cache's own previous object
    /// for the key, shared, or decoded from `prev_raw` on first use.
    prev: std::sync::OnceLock<Option<Arc<Value>>>,
    /// `object` serialized as JSON, made by the first watcher that sends it unchanged and reused
    /// by every other one (see [`CacheEvent::object_json`]): a fan-out to N watchers encodes an
    /// event once, not N times.
    pub encoded: std::sync::OnceLock<Vec<u8>>,
    /// The whole JSON watch-event line of the first event type a watcher sent it as (see
    /// [`CacheEvent::json_line`]), shared by reference by every watcher sending the same.
    pub line: std::sync::OnceLock<(&'static str, bytes::Bytes)>,
}

impl CacheEvent {
    /// True when the key existed before the change (modifications and deletes).
    pub fn has_prev(&self) -> bool {
        self.prev_raw.is_some() || self.prev.get().is_some_and(Option::is_some)
    }

    /// The object before the change (modifications and deletes), with its own resourceVersion;
    /// decoded on first use and shared by every later caller. `None` for a create, or when the
    /// previous value does not decode.
    pub fn prev(&self) -> Option<&Arc<Value>> {
        self.prev.get_or_init(|| self.prev_raw.as_ref().and_then(|(raw, rev)| decode(raw, *rev)).map(Arc::new)).as_ref()
    }

    /// `object` as JSON bytes (stored form, resourceVersion set), encoded on first use and
    /// shared by every later caller.
    pub fn object_json(&self) -> &[u8] {
        self.encoded.get_or_init(|| serde_json::to_vec(&*self.object).unwrap_or_default())
    }

    /// The watch-event line `{"type":KIND,"object":OBJECT}\n` of `object`, built by `make`
    /// from [`CacheEvent::object_json`] on first use and shared (a reference count, no copy)
    /// by every later caller asking for the same `kind`.
    /// The line holds the object's encoding, so [`CacheEvent::encoded`] is not filled for it: a
    /// ring of events that watchers have sent keeps each object's JSON once, not twice.
    pub fn json_line(&self, kind: &'static str, make: impl Fn(&str, &[u8]) -> bytes::Bytes) -> bytes::Bytes {
        let (first, line) = self.line.get_or_init(|| {
            let line = match self.encoded.get() {
                Some(json) => make(kind, json),
                None => make(kind, &serde_json::to_vec(&*self.object).unwrap_or_default()),
            };
            (kind, line)
        });
        if *first == kind { line.clone() } else { make(kind, self.object_json()) }
    }
}

/// A message to watchers.
#[derive(Debug, Clone)]
pub enum CacheMsg {
    /// One change.
    Event(Arc<CacheEvent>),
    /// Every change up to this revision has been sent (a bookmark opportunity).
    Progress(Revision),
    /// The cache lost continuity (its store watch was compacted away) and relisted; watchers
    /// must end their streams so clients relist.
    Reset,
}

/// What a watcher's [`Subscription::recv`] yields.
#[derive(Debug)]
pub enum Recv {
    /// A message.
    Msg(CacheMsg),
    /// The watcher fell too far behind and must end its stream.
    Lagged,
    /// The cache is shutting down.
    Closed,
}

/// A watcher's handle on the cache's broadcast.
#[derive(Debug)]
pub struct Subscription {
    rx: broadcast::Receiver<CacheMsg>,
}

impl Subscription {
    /// The next message.
    pub async fn recv(&mut self) -> Recv {
        match self.rx.recv().await {
            Ok(m) => Recv::Msg(m),
            Err(broadcast::error::RecvError::Lagged(_)) => Recv::Lagged,
            Err(broadcast::error::RecvError::Closed) => Recv::Closed,
        }
    }

    /// The next message if one is already queued, without waiting (`None`: nothing queued yet).
    pub fn try_recv(&mut self) -> Option<Recv> {
        match self.rx.try_recv() {
            Ok(m) => Some(Recv::Msg(m)),
            Err(broadcast::error::TryRecvError::Empty) => None,
            Err(broadcast::error::TryRecvError::Lagged(_)) => Some(Recv::Lagged),
            Err(broadcast::error::TryRecvError::Closed) => Some(Recv::Closed),
        }
    }

    /// Forwards every change to `tx` as `Some((tag, kind, object))`, for a consumer that merges
    /// several caches' events into one channel (the RBAC snapshot, the Node authorizer's graph).
    /// Sends `None` and stops when the subscription lags or the cache resets: the consumer must
    /// reload from fresh snapshots. Stops when the cache closes or the receiver is dropped;
    /// progress messages are skipped.
    pub async fn forward_events<T: Copy>(
        mut self,
        tag: T,
        tx: tokio::sync::mpsc::Sender<Option<(T, EventKind, Arc<Value>)>>,
    ) {
        loop {
            match self.recv().await {
                Recv::Msg(CacheMsg::Event(e)) => {
                    if tx.send(Some((tag, e.kind, e.object.clone()))).await.is_err() {
                        return;
                    }
                }
                Recv::Msg(CacheMsg::Progress(_)) => {}
                Recv::Msg(CacheMsg::Reset) | Recv::Lagged => {
                    let _ = tx.send(None).await;
                    return;
                }
                Recv::Closed => return,
            }
        }
    }
}

struct Inner {
    objects: BTreeMap<String, Arc<Value>>,
    ring: VecDeque<Arc<CacheEvent>>,
    /// Every event with a revision strictly greater than this is in the ring (or still to come).
    oldest: Revision,
    /// The cache reflects the store up to this revision.
    revision: Revision,
}

/// The watch cache of one storage prefix.
pub struct WatchCache {
    prefix: String,
    inner: Mutex<Inner>,
    /// Created by the first watcher: a broadcast reserves all its slots up front, and most of
    /// the ~70 served resources are never watched on a small cluster.
    tx: OnceLock<broadcast::Sender<CacheMsg>>,
    watcher_buffer: usize,
    ring_capacity: usize,
    ready: AtomicBool,
}

/// `resourceVersion` older than the cache's window: the answer is 410 Gone, whose message
/// names it as the cacher's does (`too old resource version: R (OLDEST)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOld {
    /// The oldest resourceVersion a watch can start from (every change after it is still held).
    pub oldest: Revision,
}

/// A consistent view of the cache: objects at `revision`, and a subscription to everything after.
pub struct Snapshot {
    /// Objects (with resourceVersion set), in key order.
    pub objects: Vec<Arc<Value>>,
    /// The revision the objects are at.
    pub revision: Revision,
    /// Changes after `revision`.
    pub subscription: Subscription,
}

/// A stored value as the cache keeps it: decoded, with `resourceVersion` set, and
/// [compacted](compact).
fn decode(value: &[u8], rv: Revision) -> Option<Value> {
    let mut v: Value = serde_json::from_slice(value).ok()?;
    set_resource_version(&mut v, rv);
    Some(compact(v))
}

/// `v` rebuilt with every object and array at its exact size. The decoder grows maps by
/// doubling (an order-preserving map of 8 keys reserves 14 entries of ~110 bytes each), so a
/// decoded object is about a third spare capacity; the cache keeps every object for as long as
/// it exists, so it keeps them tight. Costs one pass over the tree per stored write.
fn compact(v: Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut tight = serde_json::Map::with_capacity(map.len());
            for (k, v) in map {
                tight.insert(k, compact(v));
            }
            Value::Object(tight)
        }
        Value::Array(mut items) => {
            for item in &mut items {
                *item = compact(std::mem::take(item));
            }
            items.shrink_to_fit();
            Value::Array(items)
        }
        other => other,
    }
}

impl WatchCache {
    /// A cache of `prefix` with a ring of `ring_capacity` events and a per-watcher backlog of
    /// `watcher_buffer` messages. Call [`WatchCache::run`] to fill it.
    pub fn new(prefix: String, ring_capacity: usize, watcher_buffer: usize) -> Arc<Self> {
        Arc::new(Self {
            prefix,
            inner: Mutex::new(Inner { objects: BTreeMap::new(), ring: VecDeque::new(), oldest: 0, revision: 0 }),
            tx: OnceLock::new(),
            watcher_buffer: watcher_buffer.max(1),
            ring_capacity: ring_capacity.max(1),
            ready: AtomicBool::new(false),
        })
    }

    /// True once the initial list has been loaded.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The revision the cache is up to date with.
    pub fn revision(&self) -> Revision {
        self.inner.lock().revision
    }

    /// The prefix this cache follows.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Number of active watchers.
    pub fn watchers(&self) -> usize {
        self.tx.get().map_or(0, |tx| tx.receiver_count())
    }

    /// Sends `msg` to the current watchers (none before the first subscription). Callers hold
    /// the `inner` lock for events, so a subscription taken under it sees each event exactly
    /// once: in its snapshot or backlog, or from the broadcast.
    fn broadcast(&self, msg: CacheMsg) {
        if let Some(tx) = self.tx.get() {
            let _ = tx.send(msg);
        }
    }

    /// A new subscription to the broadcast, creating it on first use.
    fn subscribe(&self) -> Subscription {
        Subscription { rx: self.tx.get_or_init(|| broadcast::channel(self.watcher_buffer).0).subscribe() }
    }

    /// Fills the cache and follows the store until the task is aborted. Errors are retried.
    pub async fn run(self: Arc<Self>, store: Arc<dyn Backend>) {
        loop {
            let from = match self.relist(&store).await {
                Ok(rev) => rev,
                Err(e) => {
                    tracing::warn!(prefix = %self.prefix, error = %e, "watch cache list failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            self.ready.store(true, Ordering::Release);
            let mut after = from;
            // Follow the store, re-watching from the last revision when a stream ends.
            loop {
                let mut stream = match store.watch(&self.prefix, after).await {
                    Ok(s) => s,
                    Err(skiff_store::Error::Compacted { .. }) => break,
                    Err(e) => {
                        tracing::warn!(prefix = %self.prefix, error = %e, "watch cache watch failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                };
                while let Some(msg) = stream.next().await {
                    match msg {
                        Ok(WatchResponse::Events(events)) => {
                            for e in events {
                                after = after.max(e.kv.mod_revision);
                                self.apply(e);
                            }
                        }
                        Ok(WatchResponse::Progress { revision }) => {
                            after = after.max(revision);
                            let mut inner = self.inner.lock();
                            inner.revision = inner.revision.max(revision);
                            self.broadcast(CacheMsg::Progress(inner.revision));
                        }
                        Err(e) => {
                            tracing::debug!(prefix = %self.prefix, error = %e, "store watch ended");
                            break;
                        }
                    }
                }
            }
            // Continuity lost: end every watcher and start over.
            self.broadcast(CacheMsg::Reset);
        }
    }

    async fn relist(&self, store: &Arc<dyn Backend>) -> skiff_store::Result<Revision> {
        let resp = store.range(RangeRequest { prefix: self.prefix.clone(), ..Default::default() }).await?;
        let mut objects = BTreeMap::new();
        for kv in resp.kvs {
            if let Some(v) = decode(&kv.value, kv.mod_revision) {
                objects.insert(kv.key, Arc::new(v));
            }
        }
        let mut inner = self.inner.lock();
        inner.objects = objects;
        inner.ring.clear();
        inner.oldest = resp.revision;
        inner.revision = resp.revision;
        Ok(resp.revision)
    }

    /// Applies one store event: updates the objects and the ring, and broadcasts it.
    ///
    /// The previous state of a modification or delete is the object the cache held for the
    /// key — the ring and watchers share it by reference instead of decoding their own copy of
    /// the store's `prev_kv` (which is kept only if the cache's object is not that revision).
    pub(crate) fn apply(&self, e: skiff_store::Event) {
        let revision = e.kv.mod_revision;
        let prev_revision = e.prev_kv.as_ref().map(|p| p.mod_revision);
        // Decoded before taking the lock: watchers and readers wait on it.
        let put = match e.kind {
            EventType::Put => match decode(&e.kv.value, revision) {
                Some(obj) => Some(Arc::new(obj)),
                None => {
                    tracing::warn!(key = %e.kv.key, "undecodable value in the store; skipped");
                    return;
                }
            },
            EventType::Delete => None,
        };
        let held_is_prev = |held: &Arc<Value>| {
            prev_revision.is_some_and(|rev| {
                held.pointer("/metadata/resourceVersion").and_then(Value::as_str) == Some(rev.to_string().as_str())
            })
        };
        let prev = std::sync::OnceLock::new();
        let mut prev_raw = None;
        let mut inner = self.inner.lock();
        let (kind, object) = match put {
            Some(object) => {
                let held = inner.objects.insert(e.kv.key.clone(), object.clone());
                let kind = if e.prev_kv.is_some() { EventKind::Modified } else { EventKind::Added };
                match held.filter(held_is_prev) {
                    Some(held) => {
                        let _ = prev.set(Some(held));
                    }
                    None => prev_raw = e.prev_kv.map(|p| (p.value, p.mod_revision)),
                }
                (kind, object)
            }
            None => {
                let held = inner.objects.remove(&e.kv.key).filter(|h| prev_revision.is_none() || held_is_prev(h));
                let Some(last) =
                    held.or_else(|| e.prev_kv.as_ref().and_then(|p| decode(&p.value, p.mod_revision)).map(Arc::new))
                else {
                    return;
                };
                let mut deleted = (*last).clone();
                set_resource_version(&mut deleted, revision);
                let _ = prev.set(Some(last));
                (EventKind::Deleted, Arc::new(deleted))
            }
        };
        let event = Arc::new(CacheEvent {
            kind,
            key: e.kv.key,
            revision,
            object,
            prev_raw,
            prev,
            encoded: std::sync::OnceLock::new(),
            line: std::sync::OnceLock::new(),
        });
        if inner.ring.len() >= self.ring_capacity
            && let Some(dropped) = inner.ring.pop_front()
        {
            inner.oldest = dropped.revision;
        }
        inner.ring.push_back(event.clone());
        inner.revision = inner.revision.max(revision);
        self.broadcast(CacheMsg::Event(event));
    }

    /// Events after `after` from the ring plus a subscription to what follows, or
    /// [`TooOld`] when the ring no longer reaches back to `after`.
    pub fn watch_from(&self, after: Revision) -> Result<(Vec<Arc<CacheEvent>>, Subscription), TooOld> {
        let inner = self.inner.lock();
        if after < inner.oldest {
            return Err(TooOld { oldest: inner.oldest });
        }
        let backlog = inner.ring.iter().filter(|e| e.revision > after).cloned().collect();
        Ok((backlog, self.subscribe()))
    }

    /// The cached object at `key` (resourceVersion set), if any.
    pub fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.inner.lock().objects.get(key).cloned()
    }

    /// The objects under `prefix` (a sub-prefix of the cache's, e.g. one namespace) and a
    /// subscription to later changes, atomically.
    pub fn snapshot(&self, prefix: &str) -> Snapshot {
        let inner = self.inner.lock();
        let objects = inner
            .objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect();
        Snapshot { objects, revision: inner.revision, subscription: self.subscribe() }
    }

    /// Waits (up to `timeout`) until the cache has caught up with `revision`.
    pub async fn wait_for(&self, revision: Revision, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.is_ready() && self.revision() >= revision {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_store::{Event, KeyValue};

    fn put(cache: &WatchCache, key: &str, rev: Revision, prev_rev: Option<Revision>) {
        let kv = |r: Revision| KeyValue {
            key: key.to_string(),
            value: format!(r#"{{"metadata":{{"name":"{key}"}},"n":{r}}}"#).into_bytes(),
            create_revision: 1,
            mod_revision: r,
        };
        cache.apply(Event { kind: EventType::Put, kv: kv(rev), prev_kv: prev_rev.map(kv) });
    }

    #[test]
    fn a_watch_resumes_from_the_ring_until_its_revision_falls_out() {
        let cache = WatchCache::new("/registry/x/".into(), 3, 16);
        for r in 1..=5 {
            put(&cache, "/registry/x/a", r, (r > 1).then(|| r - 1));
        }
        let (backlog, _sub) = cache.watch_from(3).unwrap();
        assert_eq!(backlog.iter().map(|e| e.revision).collect::<Vec<_>>(), vec![4, 5]);
        assert_eq!(backlog[0].kind, EventKind::Modified);
        assert_eq!(backlog[0].object["metadata"]["resourceVersion"], "4");
        // The ring holds revisions 3..=5: a watch from 1 has lost revision 2, one from 2 has not.
        assert_eq!(cache.watch_from(1).unwrap_err(), TooOld { oldest: 2 });
        assert!(cache.watch_from(2).is_ok());
    }

    #[tokio::test]
    async fn the_broadcast_is_created_by_the_first_watcher_and_earlier_events_come_from_the_ring() {
        let cache = WatchCache::new("/registry/x/".into(), 10, 16);
        put(&cache, "/registry/x/a", 1, None);
        assert!(cache.tx.get().is_none(), "no watcher yet: no broadcast slots reserved");
        assert_eq!(cache.watchers(), 0);
        let (backlog, mut sub) = cache.watch_from(0).unwrap();
        assert_eq!(backlog.iter().map(|e| e.revision).collect::<Vec<_>>(), vec![1]);
        assert_eq!(cache.watchers(), 1);
        put(&cache, "/registry/x/b", 2, None);
        match sub.recv().await {
            Recv::Msg(CacheMsg::Event(e)) => assert_eq!(e.revision, 2),
            other => panic!("expected the event at revision 2, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_slow_watcher_is_told_it_lagged_and_writers_never_block() {
        let cache = WatchCache::new("/registry/x/".into(), 100, 4);
        let (_, mut slow) = cache.watch_from(0).unwrap();
        for r in 1..=20 {
            put(&cache, &format!("/registry/x/k{r}"), r, None);
        }
        assert!(matches!(slow.recv().await, Recv::Lagged));
        let snap = cache.snapshot("/registry/x/");
        assert_eq!(snap.objects.len(), 20);
        assert_eq!(snap.revision, 20);
    }

    #[test]
    fn a_modifications_previous_state_is_the_cached_object_shared_not_a_copy() {
        let cache = WatchCache::new("/registry/x/".into(), 10, 16);
        let (_, mut sub) = cache.watch_from(0).unwrap();
        put(&cache, "/registry/x/a", 1, None);
        put(&cache, "/registry/x/a", 2, Some(1));
        let (backlog, _) = cache.watch_from(0).unwrap();
        let (created, modified) = (&backlog[0], &backlog[1]);
        assert!(!created.has_prev() && created.prev().is_none());
        assert_eq!(modified.kind, EventKind::Modified);
        assert!(modified.has_prev());
        let prev = modified.prev().expect("the previous state");
        assert!(Arc::ptr_eq(prev, &created.object), "the revision the cache held, not a decoded copy");
        assert!(modified.prev_raw.is_none(), "no raw copy kept");
        assert_eq!(prev["n"], 1);
        assert_eq!(prev["metadata"]["resourceVersion"], "1");
        assert!(matches!(sub.rx.try_recv(), Ok(CacheMsg::Event(_))));
    }

    #[test]
    fn a_previous_state_the_cache_does_not_hold_is_decoded_from_the_store_event() {
        let cache = WatchCache::new("/registry/x/".into(), 10, 16);
        // Revision 2 modifies a revision the cache never saw (its object map holds none).
        put(&cache, "/registry/x/a", 2, Some(1));
        let (backlog, _) = cache.watch_from(0).unwrap();
        assert!(backlog[0].prev.get().is_none(), "decoded only when asked for");
        assert_eq!(backlog[0].prev().map(|p| p["n"].clone()), Some(1.into()));
    }

    #[test]
    fn a_delete_carries_the_last_state_at_the_delete_revision() {
        let cache = WatchCache::new("/registry/x/".into(), 10, 16);
        put(&cache, "/registry/x/a", 1, None);
        let last = KeyValue {
            key: "/registry/x/a".into(),
            value: br#"{"metadata":{"name":"a"},"n":1}"#.to_vec(),
            create_revision: 1,
            mod_revision: 1,
        };
        let gone = KeyValue { value: Vec::new(), mod_revision: 2, ..last.clone() };
        cache.apply(Event { kind: EventType::Delete, kv: gone, prev_kv: Some(last) });
        let (backlog, _) = cache.watch_from(1).unwrap();
        assert_eq!(backlog[0].kind, EventKind::Deleted);
        assert_eq!(backlog[0].object["metadata"]["resourceVersion"], "2");
        assert_eq!(backlog[0].prev().map(|p| p["metadata"]["resourceVersion"].clone()), Some("1".into()));
        assert!(cache.get("/registry/x/a").is_none());
    }

    #[test]
    fn a_cached_object_is_compacted_without_changing_its_content_or_key_order() {
        let raw = br#"{"kind":"Pod","metadata":{"name":"a","labels":{"z":"1","a":"2"}},"spec":{"containers":[{"name":"c","ports":[{"containerPort":80}]}]},"n":[1,2,3]}"#;
        let decoded = decode(raw, 7).unwrap();
        let mut expected: Value = serde_json::from_slice(raw).unwrap();
        set_resource_version(&mut expected, 7);
        assert_eq!(serde_json::to_string(&decoded).unwrap(), serde_json::to_string(&expected).unwrap());
        assert_eq!(decoded["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn a_watch_line_reuses_the_objects_encoding_and_does_not_keep_a_second_copy() {
        let cache = WatchCache::new("/registry/x/".into(), 10, 16);
        put(&cache, "/registry/x/a", 1, None);
        let (backlog, _) = cache.watch_from(0).unwrap();
        let e = &backlog[0];
        let make = |kind: &str, obj: &[u8]| {
            bytes::Bytes::from(format!("{{\"type\":\"{kind}\",\"object\":{}}}\n", String::from_utf8_lossy(obj)))
        };
        let added = e.json_line("ADDED", make);
        assert!(e.encoded.get().is_none(), "the line holds the encoding");
        assert_eq!(added, e.json_line("ADDED", make));
        let modified = e.json_line("MODIFIED", make);
        assert!(modified.starts_with(b"{\"type\":\"MODIFIED\""));
        assert_eq!(&added[r#"{"type":"ADDED","#.len()..], &modified[r#"{"type":"MODIFIED","#.len()..]);
    }
}
