//! Watch-history checker, in the spirit of etcd's robustness tests
//! (`tests/robustness/validate` in etcd: ordered, unique, reliable, atomic, resumable watches).
//!
//! Concurrent writers churn keys under two prefixes (creates, compare-and-swap updates,
//! deletes) and log every acknowledged write. Several watchers on overlapping prefixes read the
//! streams, some slowly, dropping their stream at random points and resuming from the last
//! revision they saw; meanwhile the store is closed and reopened several times (ending every
//! stream) and compacted up to what every watcher has seen. Afterwards each watcher's combined
//! history is checked against the write log.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use skiff_store::sqlite::SqliteBackend;
use skiff_store::{Backend, Event, EventType, Options, Revision, WatchResponse};
use tokio::sync::RwLock;

const WRITERS: usize = 8;
const KEYS_PER_WRITER: usize = 5;
const WRITES_PER_WRITER: usize = 600;
/// A stalled watcher waits until this many more batches were committed: more than its
/// channel holds (128 messages), so the hub must demote it to catching up from history.
const STALL_BATCHES: u64 = 160;
const RESTARTS: usize = 4;

/// One acknowledged write, as the writer knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Write {
    rev: Revision,
    key: String,
    kind: EventType,
    value: Vec<u8>,
    create_rev: Revision,
    prev: Option<(Vec<u8>, Revision, Revision)>,
}

/// What one watcher saw, across all its streams.
#[derive(Default)]
struct Seen {
    /// Every message, in arrival order: events or a bookmark.
    messages: Vec<Message>,
    resumes: usize,
}

enum Message {
    Events(Vec<Event>),
    Progress(Revision),
}

/// The store, swapped out on restart. Every use holds the read lock; a restart takes the write
/// lock, so no handle outlives the backend being closed.
type Slot = Arc<RwLock<Option<Arc<SqliteBackend>>>>;

fn options() -> Options {
    Options { progress_interval: Duration::from_millis(100), compaction_interval: None }
}

fn open(path: &Path) -> Arc<SqliteBackend> {
    Arc::new(SqliteBackend::open(path, options()).unwrap_or_else(|e| panic!("open {}: {e}", path.display())))
}

async fn writer(slot: Slot, w: usize, log: Arc<parking_lot::Mutex<Vec<Write>>>) {
    // (value, create_rev, mod_rev) of each of this writer's keys; None when absent.
    let mut keys: Vec<Option<(Vec<u8>, Revision, Revision)>> = vec![None; KEYS_PER_WRITER];
    let mut rng = rand::rngs::StdRng::from_rng(&mut rand::rng());
    for i in 0..WRITES_PER_WRITER {
        let slot_no = rng.random_range(0..KEYS_PER_WRITER);
        let prefix = if slot_no % 2 == 0 { "/registry/a/" } else { "/registry/b/" };
        let key = format!("{prefix}w{w}/k{slot_no}");
        let value = format!("w{w}-{i}").into_bytes();
        let guard = slot.read().await;
        let store = guard.as_ref().expect("store open").clone();
        let write = match keys[slot_no].clone() {
            None => {
                let rev = store.create(&key, value.clone()).await.expect("create");
                keys[slot_no] = Some((value.clone(), rev, rev));
                Write { rev, key, kind: EventType::Put, value, create_rev: rev, prev: None }
            }
            Some((old, create, m)) if rng.random_bool(0.25) => {
                let (rev, prior) = store.delete(&key, Some(m)).await.expect("delete");
                assert_eq!((prior.value.as_slice(), prior.mod_revision), (old.as_slice(), m), "delete's prior value");
                keys[slot_no] = None;
                Write {
                    rev,
                    key,
                    kind: EventType::Delete,
                    value: Vec::new(),
                    create_rev: 0,
                    prev: Some((old, create, m)),
                }
            }
            Some((old, create, m)) => {
                let rev = store.update(&key, value.clone(), m).await.expect("update");
                keys[slot_no] = Some((value.clone(), create, rev));
                Write { rev, key, kind: EventType::Put, value, create_rev: create, prev: Some((old, create, m)) }
            }
        };
        drop(store);
        drop(guard);
        log.lock().push(write);
        if i % 16 == 0 {
            tokio::task::yield_now().await;
        }
    }
}

/// Stops consuming until the store has committed [`STALL_BATCHES`] more batches (or restarted,
/// or the writers are done).
async fn stall_until_channel_overflows(slot: &Slot, log: &parking_lot::Mutex<Vec<Write>>) {
    let probe = || async {
        let guard = slot.read().await;
        guard.as_ref().map(|s| (Arc::as_ptr(s) as usize, s.stats().batches))
    };
    let Some((backend, start)) = probe().await else { return };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline && log.lock().len() < WRITERS * WRITES_PER_WRITER {
        match probe().await {
            Some((b, batches)) if b == backend && batches < start + STALL_BATCHES => {}
            _ => return,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Watches `prefix` from `start`, resuming after every disconnect, until it has seen `target`
/// (once `target` is set).
async fn watcher(
    slot: Slot,
    prefix: &'static str,
    start: Revision,
    slow: bool,
    last_seen: Arc<AtomicI64>,
    target: Arc<AtomicI64>,
    log: Arc<parking_lot::Mutex<Vec<Write>>>,
) -> Seen {
    // Slow watchers stall at their first message, and again after every restart.
    let mut stall_next = slow;
    let mut seen = Seen::default();
    let mut last = start;
    let mut rng = rand::rngs::StdRng::from_rng(&mut rand::rng());
    loop {
        let stream = {
            let guard = slot.read().await;
            let store = guard.as_ref().expect("store open").clone();
            store.watch(prefix, last).await
        };
        let mut stream = stream.unwrap_or_else(|e| panic!("watch {prefix} after {last}: {e}"));
        // Drop the stream after a random number of messages (a client reconnecting).
        // Slow watchers keep their stream (until a restart ends it), so what piled up while they
        // stalled is read, not skipped by a reconnect.
        let budget = if slow { usize::MAX } else { rng.random_range(1..60) };
        let mut n = 0;
        loop {
            let t = target.load(Ordering::SeqCst);
            if t > 0 && last >= t {
                return seen;
            }
            let msg = match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => panic!("watch {prefix}: stream error after {last}: {e}"),
                Ok(None) => {
                    // The store restarted: resume.
                    stall_next = slow;
                    break;
                }
                Err(_) => panic!("watch {prefix}: no message for 30s after {last}"),
            };
            match msg {
                WatchResponse::Events(events) => {
                    if let Some(e) = events.last() {
                        last = e.kv.mod_revision;
                    }
                    seen.messages.push(Message::Events(events));
                }
                WatchResponse::Progress { revision } => {
                    last = last.max(revision);
                    seen.messages.push(Message::Progress(revision));
                }
            }
            last_seen.store(last, Ordering::SeqCst);
            n += 1;
            if stall_next {
                stall_next = false;
                stall_until_channel_overflows(&slot, &log).await;
            }
            if slow && rng.random_bool(0.05) {
                // A consumer that stalls: the hub must not wait for it.
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..300))).await;
            }
            if n >= budget {
                break;
            }
        }
        seen.resumes += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_are_ordered_unique_reliable_atomic_and_resumable_under_churn_and_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("skiff.db");
    let slot: Slot = Arc::new(RwLock::new(Some(open(&path))));
    let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let target = Arc::new(AtomicI64::new(0));

    // (prefix, start revision, slow)
    let specs: [(&'static str, Revision, bool); 6] = [
        ("/registry/", 1, false),
        ("/registry/a/", 1, true),
        ("/registry/b/", 1, false),
        ("/registry/a/w1/", 1, false),
        ("/registry/", 1, true),
        ("/registry/b/", 1, true),
    ];
    let mut watchers = Vec::new();
    let mut positions = Vec::new();
    for (prefix, start, slow) in specs {
        let last_seen = Arc::new(AtomicI64::new(start));
        positions.push(last_seen.clone());
        watchers.push((
            prefix,
            start,
            tokio::spawn(watcher(slot.clone(), prefix, start, slow, last_seen, target.clone(), log.clone())),
        ));
    }
    let writers: Vec<_> = (0..WRITERS).map(|w| tokio::spawn(writer(slot.clone(), w, log.clone()))).collect();

    // Restarts and compactions while everything runs.
    let done = Arc::new(AtomicBool::new(false));
    let chaos = {
        let (slot, log, done, path) = (slot.clone(), log.clone(), done.clone(), path.clone());
        tokio::spawn(async move {
            let total = WRITERS * WRITES_PER_WRITER;
            let mut restarts = 0;
            let mut compactions = 0;
            while !done.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let written = log.lock().len();
                if restarts < RESTARTS && written >= (restarts + 1) * total / (RESTARTS + 1) {
                    let mut guard = slot.write().await;
                    let old = guard.take().expect("store open");
                    let old = Arc::try_unwrap(old).expect("no handle outlives the restart");
                    drop(old);
                    *guard = Some(open(&path));
                    restarts += 1;
                } else {
                    // Compact up to what every watcher has seen, so every resume stays valid.
                    let floor = positions.iter().map(|p| p.load(Ordering::SeqCst)).min().unwrap_or(0);
                    let guard = slot.read().await;
                    let store = guard.as_ref().expect("store open").clone();
                    if floor > store.compacted_revision().await.expect("compacted") {
                        store.compact(floor).await.expect("compact");
                        compactions += 1;
                    }
                }
            }
            (restarts, compactions)
        })
    };
    for w in writers {
        w.await.expect("writer");
    }
    let last = slot.read().await.as_ref().expect("store").current_revision().await.expect("current");
    target.store(last, Ordering::SeqCst);
    let mut results = Vec::new();
    for (prefix, start, handle) in watchers {
        let seen = tokio::time::timeout(Duration::from_secs(120), handle)
            .await
            .unwrap_or_else(|_| panic!("watcher {prefix} never caught up to {last}"))
            .expect("watcher task");
        results.push((prefix, start, seen));
    }
    done.store(true, Ordering::SeqCst);
    let (restarts, compactions) = chaos.await.expect("chaos task");
    assert_eq!(restarts, RESTARTS, "the store must actually have restarted");
    assert!(compactions > 0, "the store must actually have been compacted");

    // The write log itself: every revision from 2 to the last was acknowledged exactly once.
    let mut writes = log.lock().clone();
    writes.sort_by_key(|w| w.rev);
    let revs: Vec<Revision> = writes.iter().map(|w| w.rev).collect();
    assert_eq!(revs, (2..=last).collect::<Vec<_>>(), "acknowledged revisions are exactly 2..={last}");
    let by_rev: HashMap<Revision, &Write> = writes.iter().map(|w| (w.rev, w)).collect();

    for (prefix, start, seen) in results {
        let mut events: Vec<&Event> = Vec::new();
        let mut bookmark: Revision = 0;
        for msg in &seen.messages {
            match msg {
                Message::Events(evs) => {
                    // Atomic: a message is whole revisions, never empty.
                    assert!(!evs.is_empty(), "{prefix}: empty message");
                    for e in evs {
                        // Ordered and unique, and never behind a bookmark already given.
                        if let Some(prev) = events.last() {
                            assert!(
                                e.kv.mod_revision > prev.kv.mod_revision,
                                "{prefix}: revision {} after {} (out of order or duplicate)",
                                e.kv.mod_revision,
                                prev.kv.mod_revision
                            );
                        }
                        assert!(
                            e.kv.mod_revision > bookmark,
                            "{prefix}: event {} after bookmark {bookmark}",
                            e.kv.mod_revision
                        );
                        events.push(e);
                    }
                }
                Message::Progress(r) => {
                    if let Some(e) = events.last() {
                        assert!(*r >= e.kv.mod_revision, "{prefix}: bookmark {r} behind event {}", e.kv.mod_revision);
                    }
                    bookmark = bookmark.max(*r);
                }
            }
        }
        // Reliable: exactly the writes under the prefix after the start, each as written.
        let want: Vec<&Write> = writes.iter().filter(|w| w.rev > start && w.key.starts_with(prefix)).collect();
        let got: Vec<Revision> = events.iter().map(|e| e.kv.mod_revision).collect();
        let expected: Vec<Revision> = want.iter().map(|w| w.rev).collect();
        if got != expected {
            let missing: Vec<_> = expected.iter().filter(|r| !got.contains(r)).take(10).collect();
            let extra: Vec<_> = got.iter().filter(|r| !expected.contains(r)).take(10).collect();
            panic!(
                "{prefix}: {} events, want {}; missing {missing:?}, unexpected {extra:?}",
                got.len(),
                expected.len()
            );
        }
        for e in events {
            let w = by_rev[&e.kv.mod_revision];
            assert_eq!(
                (e.kind, e.kv.key.as_str(), e.kv.value.as_slice()),
                (w.kind, w.key.as_str(), w.value.as_slice())
            );
            assert_eq!(e.kv.create_revision, w.create_rev, "{prefix}: create_revision at {}", w.rev);
            let prev = e.prev_kv.as_ref().map(|p| (p.value.clone(), p.create_revision, p.mod_revision));
            assert_eq!(prev, w.prev, "{prefix}: prev_kv at {}", w.rev);
        }
        // Resumable: this watcher did reconnect, and still saw everything once.
        assert!(seen.resumes > 0, "{prefix}: never resumed");
    }
    // Reopening once more gives the same final state as the log.
    let final_state: BTreeMap<String, Vec<u8>> = {
        let mut m = BTreeMap::new();
        for w in &writes {
            match w.kind {
                EventType::Put => m.insert(w.key.clone(), w.value.clone()),
                EventType::Delete => m.remove(&w.key),
            };
        }
        m
    };
    let store = slot.write().await.take().expect("store");
    let listed = store
        .range(skiff_store::RangeRequest { prefix: "/registry/".into(), ..Default::default() })
        .await
        .expect("range");
    let got: BTreeMap<String, Vec<u8>> = listed.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect();
    assert_eq!(got, final_state);
}
