//! The conformance suite: the executable specification of [`Backend`], run against every backend.
//!
//! A backend's integration test implements [`Harness`] (how to open a fresh store, and how to
//! reopen the same data) and expands [`conformance_tests!`](crate::conformance_tests), which
//! generates one `#[tokio::test]` per case of this module:
//!
//! ```ignore
//! struct SqliteHarness { dir: tempfile::TempDir }
//!
//! #[async_trait::async_trait]
//! impl skiff_store::conformance::Harness for SqliteHarness {
//!     async fn open(&mut self) -> std::sync::Arc<dyn skiff_store::Backend> {
//!         let opts = skiff_store::Options { progress_interval: std::time::Duration::from_millis(200), ..Default::default() };
//!         std::sync::Arc::new(skiff_store::sqlite::SqliteBackend::open(&self.dir.path().join("db"), opts).unwrap())
//!     }
//! }
//!
//! skiff_store::conformance_tests!(|| async { SqliteHarness { dir: tempfile::tempdir().unwrap() } });
//! ```
//!
//! The cases follow the etcd v3 API guarantees (<https://etcd.io/docs/v3.5/learning/api_guarantees/>)
//! and the way the Kubernetes API server uses them (`k8s.io/apiserver/pkg/storage/etcd3`):
//! resourceVersion = mod_revision, consistent paginated lists, watch from a resourceVersion with
//! `410 Gone` once it is compacted, and bookmarks.
//!
//! Rules the cases rely on, which every harness must honour:
//! - the first [`Harness::open`] returns an empty store (current revision 1, like a new etcd);
//! - a later `open` returns the same data, after the suite has dropped every handle (`Arc`,
//!   watch streams) of the previous open;
//! - backends are opened with [`Options::progress_interval`](crate::Options) of at most one
//!   second (the suite waits up to [`STEP_TIMEOUT`] for a bookmark) and without background
//!   compaction (`compaction_interval: None`), so that compaction happens only when a case asks.
//!
//! Every wait in the suite is bounded by [`STEP_TIMEOUT`]: a hung backend fails the case instead
//! of hanging the test run. No case asserts on timing.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{
    Backend, Error, Event, EventType, KeyValue, MAX_VALUE_BYTES, RangeRequest, RangeResponse, Revision, WatchResponse,
    WatchStream,
};

/// How long the suite waits for any single step (a watch message, a bookmark) before failing.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the suite waits for a concurrent writer task (many writes) to finish.
pub const LONG_STEP_TIMEOUT: Duration = Duration::from_secs(180);

/// How a backend's test opens the store under test.
#[async_trait]
pub trait Harness: Send {
    /// Opens the store. The first call returns a fresh, empty store; every later call reopens
    /// the same data (the persistence cases), after the suite has dropped every handle of the
    /// previous open. Panics (failing the test) when the store cannot be opened.
    async fn open(&mut self) -> Arc<dyn Backend>;
}

/// Generates one `#[tokio::test]` per conformance case (multi-thread runtime, two workers).
///
/// The argument is an expression evaluating to a closure that builds a fresh [`Harness`]
/// asynchronously: `skiff_store::conformance_tests!(|| async { MyHarness::new() });`. The test
/// crate must depend on `tokio` (every crate in this workspace does).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            empty_store_is_at_revision_one_and_every_write_increments_it_by_one,
            create_of_an_existing_key_fails_with_already_exists,
            update_with_a_stale_revision_fails_with_conflict_and_writes_nothing,
            update_of_a_missing_key_fails_with_not_found,
            delete_returns_the_prior_value_and_honours_its_precondition,
            get_returns_the_latest_value_with_its_revisions,
            range_by_prefix_honours_limit_and_start_after,
            paginated_range_reads_one_snapshot_while_writes_continue,
            range_at_an_older_revision_returns_that_snapshot,
            count_counts_the_live_keys_of_a_range_at_its_revision,
            range_at_a_compacted_revision_fails_with_compacted,
            range_at_a_future_revision_fails_with_future_revision,
            compact_is_idempotent_and_rejects_future_revisions,
            watch_delivers_every_change_in_order_exactly_once_with_prev_kv,
            watch_from_now_sees_only_later_writes,
            watch_resumes_after_disconnect_without_gap_or_duplicate,
            watch_from_a_compacted_revision_fails_with_compacted,
            idle_watch_receives_progress_bookmarks,
            concurrent_cas_increments_lose_no_update,
            concurrent_creates_on_many_keys_all_succeed,
            value_at_the_size_limit_is_accepted_and_one_byte_more_is_rejected,
            data_revision_and_history_survive_reopen,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let make = $make;
                let mut harness = make().await;
                $crate::conformance::$case(&mut harness).await;
            }
        )*
    };
}

// ---------------------------------------------------------------------------------------------
// Helpers

async fn step<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(STEP_TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {STEP_TIMEOUT:?} waiting for {what}"),
    }
}

/// Like [`step`], for a task doing many writes: [`LONG_STEP_TIMEOUT`].
async fn long_step<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(LONG_STEP_TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {LONG_STEP_TIMEOUT:?} waiting for {what}"),
    }
}

async fn current(store: &Arc<dyn Backend>) -> Revision {
    store.current_revision().await.expect("current_revision")
}

async fn range_all(store: &Arc<dyn Backend>, prefix: &str, revision: Revision) -> RangeResponse {
    store
        .range(RangeRequest { prefix: prefix.to_string(), revision, ..Default::default() })
        .await
        .unwrap_or_else(|e| panic!("range {prefix:?} at {revision}: {e}"))
}

fn keys(kvs: &[KeyValue]) -> Vec<&str> {
    kvs.iter().map(|kv| kv.key.as_str()).collect()
}

/// Reads the next message of a watch stream, failing the case on timeout, end or error.
async fn next_message(stream: &mut WatchStream, what: &str) -> WatchResponse {
    match step(what, stream.next()).await {
        Some(Ok(msg)) => msg,
        Some(Err(e)) => panic!("watch stream failed while waiting for {what}: {e}"),
        None => panic!("watch stream ended while waiting for {what}"),
    }
}

/// Collects exactly `n` events (skipping bookmarks), checking that every message holds whole,
/// strictly increasing revisions and that bookmarks never go back before a delivered event.
async fn next_events(stream: &mut WatchStream, n: usize) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    let mut last_progress: Revision = 0;
    while out.len() < n {
        match next_message(stream, &format!("event {} of {n}", out.len() + 1)).await {
            WatchResponse::Events(events) => {
                assert!(!events.is_empty(), "a watch message must not be empty");
                for ev in events {
                    if let Some(prev) = out.last() {
                        assert!(
                            ev.kv.mod_revision > prev.kv.mod_revision,
                            "events out of order or duplicated: {} after {}",
                            ev.kv.mod_revision,
                            prev.kv.mod_revision
                        );
                    }
                    assert!(
                        ev.kv.mod_revision > last_progress,
                        "event at revision {} after a bookmark at {last_progress}",
                        ev.kv.mod_revision
                    );
                    out.push(ev);
                }
            }
            WatchResponse::Progress { revision } => {
                if let Some(last) = out.last() {
                    assert!(
                        revision >= last.kv.mod_revision,
                        "bookmark {revision} behind event {}",
                        last.kv.mod_revision
                    );
                }
                last_progress = last_progress.max(revision);
            }
        }
    }
    assert_eq!(out.len(), n, "more events than written arrived in one message");
    out
}

/// Waits for a bookmark at or after `at_least`, failing on any event (the watched prefix is idle).
async fn next_progress(stream: &mut WatchStream, at_least: Revision) -> Revision {
    loop {
        match next_message(stream, &format!("a bookmark at revision >= {at_least}")).await {
            WatchResponse::Progress { revision } if revision >= at_least => return revision,
            WatchResponse::Progress { .. } => continue,
            WatchResponse::Events(events) => panic!("idle watch received events: {events:?}"),
        }
    }
}

/// Asserts that a watch from `after` fails with `Compacted`, either at once or as the stream's
/// first message (etcd reports compaction on the stream).
async fn assert_watch_compacted(store: &Arc<dyn Backend>, prefix: &str, after: Revision, compacted: Revision) {
    let check = |err: Error| match err {
        Error::Compacted { requested, compacted: c } => {
            assert_eq!(requested, after, "Compacted.requested");
            assert_eq!(c, compacted, "Compacted.compacted");
        }
        other => panic!("watch after {after}: expected Compacted, got {other}"),
    };
    match store.watch(prefix, after).await {
        Err(e) => check(e),
        Ok(mut stream) => match step("the compacted error of a watch", stream.next()).await {
            Some(Err(e)) => check(e),
            other => panic!("watch after compacted revision {after}: expected Compacted, got {other:?}"),
        },
    }
}

fn expect_put(ev: &Event, key: &str, value: &[u8], create: Revision, modr: Revision, prev: Option<(&[u8], Revision)>) {
    assert_eq!(ev.kind, EventType::Put, "kind of {ev:?}");
    assert_eq!(ev.kv.key, key, "key of {ev:?}");
    assert_eq!(ev.kv.value, value, "value of {ev:?}");
    assert_eq!(ev.kv.create_revision, create, "create_revision of {ev:?}");
    assert_eq!(ev.kv.mod_revision, modr, "mod_revision of {ev:?}");
    match (prev, &ev.prev_kv) {
        (None, None) => {}
        (Some((v, r)), Some(p)) => {
            assert_eq!(p.key, key, "prev_kv key of {ev:?}");
            assert_eq!(p.value, v, "prev_kv value of {ev:?}");
            assert_eq!(p.mod_revision, r, "prev_kv mod_revision of {ev:?}");
        }
        (want, got) => panic!("prev_kv of {ev:?}: expected {want:?}, got {got:?}"),
    }
}

fn expect_delete(ev: &Event, key: &str, rev: Revision, prev_value: &[u8], prev_rev: Revision) {
    assert_eq!(ev.kind, EventType::Delete, "kind of {ev:?}");
    assert_eq!(ev.kv.key, key, "key of {ev:?}");
    assert!(ev.kv.value.is_empty(), "a delete event carries no value: {ev:?}");
    assert_eq!(ev.kv.create_revision, 0, "create_revision of a delete event: {ev:?}");
    assert_eq!(ev.kv.mod_revision, rev, "mod_revision of {ev:?}");
    let prev = ev.prev_kv.as_ref().unwrap_or_else(|| panic!("delete event without prev_kv: {ev:?}"));
    assert_eq!(prev.value, prev_value, "prev_kv value of {ev:?}");
    assert_eq!(prev.mod_revision, prev_rev, "prev_kv mod_revision of {ev:?}");
}

// ---------------------------------------------------------------------------------------------
// Cases

/// A fresh store is at revision 1 (like a new etcd); create, update and delete each advance the
/// revision by exactly one, and the write's revision is the new current revision.
pub async fn empty_store_is_at_revision_one_and_every_write_increments_it_by_one(h: &mut dyn Harness) {
    let store = h.open().await;
    assert_eq!(current(&store).await, 1, "a fresh store is at revision 1");
    assert_eq!(store.compacted_revision().await.expect("compacted_revision"), 0, "a fresh store is not compacted");
    let r1 = store.create("/registry/pods/default/a", b"1".to_vec()).await.expect("create");
    assert_eq!(r1, 2, "the first write is revision 2");
    let r2 = store.update("/registry/pods/default/a", b"2".to_vec(), r1).await.expect("update");
    assert_eq!(r2, r1 + 1);
    let (r3, _) = store.delete("/registry/pods/default/a", None).await.expect("delete");
    assert_eq!(r3, r2 + 1);
    assert_eq!(current(&store).await, r3);
    assert!(store.get("/registry/pods/default/a").await.expect("get").is_none());
}

/// `create` of an existing key fails with `AlreadyExists`, keeps the old value and consumes no
/// revision.
pub async fn create_of_an_existing_key_fails_with_already_exists(h: &mut dyn Harness) {
    let store = h.open().await;
    let key = "/registry/pods/default/web";
    let rev = store.create(key, b"v1".to_vec()).await.expect("first create");
    match store.create(key, b"v2".to_vec()).await {
        Err(Error::AlreadyExists { key: k }) => assert_eq!(k, key),
        other => panic!("second create: expected AlreadyExists, got {other:?}"),
    }
    let kv = store.get(key).await.expect("get").expect("key exists");
    assert_eq!((kv.value.as_slice(), kv.create_revision, kv.mod_revision), (&b"v1"[..], rev, rev));
    assert_eq!(current(&store).await, rev, "a failed create must not consume a revision");
}

/// `update` with a stale expected mod_revision fails with `Conflict` naming both revisions and
/// writes nothing.
pub async fn update_with_a_stale_revision_fails_with_conflict_and_writes_nothing(h: &mut dyn Harness) {
    let store = h.open().await;
    let key = "/registry/configmaps/kube-system/cfg";
    let r1 = store.create(key, b"one".to_vec()).await.expect("create");
    let r2 = store.update(key, b"two".to_vec(), r1).await.expect("update with the right revision");
    assert!(r2 > r1);
    match store.update(key, b"three".to_vec(), r1).await {
        Err(Error::Conflict { key: k, expected, actual }) => {
            assert_eq!((k.as_str(), expected, actual), (key, r1, r2));
        }
        other => panic!("stale update: expected Conflict, got {other:?}"),
    }
    let kv = store.get(key).await.expect("get").expect("key exists");
    assert_eq!((kv.value.as_slice(), kv.create_revision, kv.mod_revision), (&b"two"[..], r1, r2));
    assert_eq!(current(&store).await, r2, "a failed update must not consume a revision");
}

/// `update` of a key that does not exist (never created, or deleted) fails with `NotFound`.
pub async fn update_of_a_missing_key_fails_with_not_found(h: &mut dyn Harness) {
    let store = h.open().await;
    let base = current(&store).await;
    match store.update("/registry/pods/default/ghost", b"x".to_vec(), 1).await {
        Err(Error::NotFound { key }) => assert_eq!(key, "/registry/pods/default/ghost"),
        other => panic!("update of a missing key: expected NotFound, got {other:?}"),
    }
    let r1 = store.create("/registry/pods/default/gone", b"x".to_vec()).await.expect("create");
    store.delete("/registry/pods/default/gone", Some(r1)).await.expect("delete");
    match store.update("/registry/pods/default/gone", b"y".to_vec(), r1).await {
        Err(Error::NotFound { .. }) => {}
        other => panic!("update of a deleted key: expected NotFound, got {other:?}"),
    }
    assert_eq!(current(&store).await, base + 2, "failed updates must not consume revisions");
    assert!(store.get("/registry/pods/default/ghost").await.expect("get").is_none());
}

/// `delete` returns the removed value; a conditional delete with a stale revision fails with
/// `Conflict` and removes nothing; deleting a missing key fails with `NotFound`; a re-created
/// key starts a new incarnation (new create_revision).
pub async fn delete_returns_the_prior_value_and_honours_its_precondition(h: &mut dyn Harness) {
    let store = h.open().await;
    let key = "/registry/secrets/default/token";
    let r1 = store.create(key, b"first".to_vec()).await.expect("create");
    let r2 = store.update(key, b"second".to_vec(), r1).await.expect("update");
    match store.delete(key, Some(r1)).await {
        Err(Error::Conflict { expected, actual, .. }) => assert_eq!((expected, actual), (r1, r2)),
        other => panic!("stale conditional delete: expected Conflict, got {other:?}"),
    }
    assert!(store.get(key).await.expect("get").is_some(), "a failed delete removes nothing");
    let (r3, prior) = store.delete(key, Some(r2)).await.expect("conditional delete");
    assert_eq!(r3, r2 + 1);
    assert_eq!(prior, KeyValue { key: key.into(), value: b"second".to_vec(), create_revision: r1, mod_revision: r2 });
    assert!(store.get(key).await.expect("get").is_none(), "deleted key is gone");
    match store.delete(key, None).await {
        Err(Error::NotFound { key: k }) => assert_eq!(k, key),
        other => panic!("delete of a missing key: expected NotFound, got {other:?}"),
    }
    let r4 = store.create(key, b"third".to_vec()).await.expect("re-create after delete");
    let kv = store.get(key).await.expect("get").expect("re-created");
    assert_eq!((kv.create_revision, kv.mod_revision), (r4, r4), "a re-created key is a new incarnation");
    let (r5, prior) = store.delete(key, None).await.expect("unconditional delete");
    assert_eq!((r5, prior.value.as_slice(), prior.create_revision), (r4 + 1, &b"third"[..], r4));
}

/// `get` returns the latest value with its create and mod revisions, and `None` for missing keys
/// (including keys that only share a prefix with the one asked for).
pub async fn get_returns_the_latest_value_with_its_revisions(h: &mut dyn Harness) {
    let store = h.open().await;
    let r1 = store.create("/registry/pods/ns/a", b"a1".to_vec()).await.expect("create a");
    let _ = store.create("/registry/pods/ns/ab", b"ab".to_vec()).await.expect("create ab");
    let r3 = store.update("/registry/pods/ns/a", b"a2".to_vec(), r1).await.expect("update a");
    let kv = store.get("/registry/pods/ns/a").await.expect("get").expect("a exists");
    assert_eq!(
        kv,
        KeyValue { key: "/registry/pods/ns/a".into(), value: b"a2".to_vec(), create_revision: r1, mod_revision: r3 }
    );
    assert!(store.get("/registry/pods/ns/").await.expect("get").is_none(), "get is exact, not by prefix");
    assert!(store.get("/registry/pods/ns/abc").await.expect("get").is_none());
    // Values are bytes, not text.
    let binary: Vec<u8> = (0..=255u8).collect();
    let rb = store.create("/registry/pods/ns/bin", binary.clone()).await.expect("create binary");
    let kv = store.get("/registry/pods/ns/bin").await.expect("get").expect("bin exists");
    assert_eq!((kv.value, kv.mod_revision), (binary, rb));
    // Empty values are values.
    store.create("/registry/pods/ns/empty", Vec::new()).await.expect("create empty");
    assert_eq!(store.get("/registry/pods/ns/empty").await.expect("get").expect("empty exists").value, b"");
}

/// `range` returns exactly the keys under the prefix, in byte order, honours `limit` (with
/// `more`) and `start_after` (the continue token), and skips deleted keys.
pub async fn range_by_prefix_honours_limit_and_start_after(h: &mut dyn Harness) {
    let store = h.open().await;
    let mut want = Vec::new();
    for key in [
        "/registry/pods/b/2",
        "/registry/pods/a/1",
        "/registry/pods/a/10",
        "/registry/pods/b/1",
        "/registry/pods/\u{e9}t\u{e9}/1", // non-ASCII: sorts by UTF-8 bytes, after ASCII
        "/registry/pods/a/2",
    ] {
        store.create(key, key.as_bytes().to_vec()).await.expect("create");
        want.push(key.to_string());
    }
    for key in ["/registry/pods", "/registry/podsecuritypolicies/x", "/registry/services/a/1", "/registry/pods0"] {
        store.create(key, b"other".to_vec()).await.expect("create outside the prefix");
    }
    let r = store.create("/registry/pods/a/3", b"doomed".to_vec()).await.expect("create");
    store.delete("/registry/pods/a/3", Some(r)).await.expect("delete");
    want.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let now = current(&store).await;

    let all = range_all(&store, "/registry/pods/", 0).await;
    assert_eq!(keys(&all.kvs), want, "every key under the prefix, in byte order, without deleted ones");
    assert!(!all.more);
    assert_eq!(all.revision, now, "revision 0 reads the current revision");
    for kv in &all.kvs {
        assert_eq!(kv.value, kv.key.as_bytes(), "value of {}", kv.key);
    }

    // Page through with every limit; the concatenation is the full listing.
    for limit in 1..=want.len() + 1 {
        let mut got = Vec::new();
        let mut start_after = None;
        loop {
            let page = store
                .range(RangeRequest {
                    prefix: "/registry/pods/".into(),
                    start_after: start_after.clone(),
                    limit,
                    revision: 0,
                })
                .await
                .expect("range page");
            assert!(page.kvs.len() <= limit, "a page holds at most `limit` keys");
            got.extend(page.kvs.iter().map(|kv| kv.key.clone()));
            if !page.more {
                break;
            }
            assert_eq!(page.kvs.len(), limit, "a page with more after it is full");
            start_after = page.kvs.last().map(|kv| kv.key.clone());
        }
        assert_eq!(got, want, "pages of {limit}");
    }

    // start_after a key that does not exist starts at the next one.
    let page = store
        .range(RangeRequest {
            prefix: "/registry/pods/".into(),
            start_after: Some("/registry/pods/a/15".into()),
            limit: 2,
            revision: 0,
        })
        .await
        .expect("range");
    assert_eq!(keys(&page.kvs), vec!["/registry/pods/a/2", "/registry/pods/b/1"]);
    assert!(page.more);
    // Limit exactly the remaining count: no more.
    let page = store
        .range(RangeRequest {
            prefix: "/registry/pods/".into(),
            start_after: Some("/registry/pods/b/1".into()),
            limit: 2,
            revision: 0,
        })
        .await
        .expect("range");
    assert_eq!(keys(&page.kvs), vec!["/registry/pods/b/2", "/registry/pods/\u{e9}t\u{e9}/1"]);
    assert!(!page.more);
    // A prefix nothing lives under.
    let empty = range_all(&store, "/registry/nodes/", 0).await;
    assert!(empty.kvs.is_empty() && !empty.more);
}

/// A paginated list whose later pages pass the first page's revision sees exactly that snapshot,
/// however the keys change between pages (Kubernetes' consistent `continue` tokens).
pub async fn paginated_range_reads_one_snapshot_while_writes_continue(h: &mut dyn Harness) {
    let store = h.open().await;
    let prefix = "/registry/events/default/";
    let mut snapshot: BTreeMap<String, (Vec<u8>, Revision)> = BTreeMap::new();
    for i in 0..60 {
        let key = format!("{prefix}e{i:03}");
        let rev = store.create(&key, format!("v0-{i}").into_bytes()).await.expect("create");
        snapshot.insert(key, (format!("v0-{i}").into_bytes(), rev));
    }

    // Background churn on the same keys while the test pages through them.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let store = store.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("{prefix}e{:03}", n % 60);
                if let Ok(Some(kv)) = store.get(&key).await {
                    let _ = store.update(&key, format!("churn-{n}").into_bytes(), kv.mod_revision).await;
                }
                let _ = store.create(&format!("{prefix}e{:03}x{n}", n % 60), b"new".to_vec()).await;
                n += 1;
                tokio::task::yield_now().await;
            }
        })
    };

    let first =
        store.range(RangeRequest { prefix: prefix.into(), limit: 7, ..Default::default() }).await.expect("first page");
    let at = first.revision;
    // Between pages the test itself rewrites the listing: updates, deletes and creates keys on
    // pages not read yet. None of it may show.
    let mut pages = vec![first];
    let mut round = 0;
    while pages.last().is_some_and(|p| p.more) {
        let last_key = pages.last().and_then(|p| p.kvs.last()).map(|kv| kv.key.clone()).expect("a full page");
        for i in 0..60 {
            let key = format!("{prefix}e{i:03}");
            match (round + i) % 3 {
                0 => {
                    if let Ok(Some(kv)) = store.get(&key).await {
                        let _ = store.update(&key, format!("between-{round}").into_bytes(), kv.mod_revision).await;
                    }
                }
                1 => {
                    let _ = store.delete(&key, None).await;
                }
                _ => {
                    let _ = store.create(&key, b"recreated".to_vec()).await;
                }
            }
        }
        round += 1;
        let page = store
            .range(RangeRequest { prefix: prefix.into(), start_after: Some(last_key), limit: 7, revision: at })
            .await
            .expect("next page at the first page's revision");
        assert_eq!(page.revision, at, "a page read at a revision reports that revision");
        pages.push(page);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    step("the churn task", churn).await.expect("churn task");

    let got: BTreeMap<String, (Vec<u8>, Revision)> = pages
        .iter()
        .flat_map(|p| p.kvs.iter())
        .map(|kv| (kv.key.clone(), (kv.value.clone(), kv.mod_revision)))
        .collect();
    let listed: usize = pages.iter().map(|p| p.kvs.len()).sum();
    assert_eq!(listed, got.len(), "no key is listed twice");
    // The snapshot at `at` includes whatever the churn task wrote before the first page; it is
    // exactly what an unpaginated read at `at` returns, and every key the test created is in it.
    let whole = range_all(&store, prefix, at).await;
    let want: BTreeMap<String, (Vec<u8>, Revision)> =
        whole.kvs.iter().map(|kv| (kv.key.clone(), (kv.value.clone(), kv.mod_revision))).collect();
    assert_eq!(got, want, "the paginated list is the snapshot at revision {at}");
    for (key, (_, rev)) in &got {
        assert!(*rev <= at, "{key} listed at mod_revision {rev}, after the snapshot {at}");
    }
    for key in snapshot.keys() {
        assert!(got.contains_key(key), "{key} existed before the first page and must be listed");
    }
    let now = range_all(&store, prefix, 0).await;
    assert_ne!(keys(&now.kvs), keys(&whole.kvs), "the test must actually have changed the listing");
}

/// `range` at an older revision returns the keys and values as they were then, including keys
/// deleted since, and reports that revision.
pub async fn range_at_an_older_revision_returns_that_snapshot(h: &mut dyn Harness) {
    let store = h.open().await;
    let p = "/registry/deployments/prod/";
    let r1 = store.create(&format!("{p}a"), b"a1".to_vec()).await.expect("create a");
    let r2 = store.update(&format!("{p}a"), b"a2".to_vec(), r1).await.expect("update a");
    let r3 = store.create(&format!("{p}b"), b"b1".to_vec()).await.expect("create b");
    let (r4, _) = store.delete(&format!("{p}a"), Some(r2)).await.expect("delete a");
    let r5 = store.create(&format!("{p}a"), b"a3".to_vec()).await.expect("re-create a");

    let at = |rev| range_all(&store, p, rev);
    let snap = |resp: RangeResponse| -> Vec<(String, Vec<u8>, Revision, Revision)> {
        resp.kvs.into_iter().map(|kv| (kv.key, kv.value, kv.create_revision, kv.mod_revision)).collect()
    };
    let a = format!("{p}a");
    let b = format!("{p}b");
    assert_eq!(snap(at(r1).await), vec![(a.clone(), b"a1".to_vec(), r1, r1)]);
    assert_eq!(snap(at(r2).await), vec![(a.clone(), b"a2".to_vec(), r1, r2)]);
    assert_eq!(snap(at(r3).await), vec![(a.clone(), b"a2".to_vec(), r1, r2), (b.clone(), b"b1".to_vec(), r3, r3)]);
    assert_eq!(snap(at(r4).await), vec![(b.clone(), b"b1".to_vec(), r3, r3)]);
    assert_eq!(snap(at(r5).await), vec![(a.clone(), b"a3".to_vec(), r5, r5), (b.clone(), b"b1".to_vec(), r3, r3)]);
    assert!(at(r1 - 1).await.kvs.is_empty(), "before the first write nothing existed");
    assert_eq!(at(r2).await.revision, r2);
    // Pagination at an old revision.
    let page = store
        .range(RangeRequest { prefix: p.into(), limit: 1, revision: r3, ..Default::default() })
        .await
        .expect("range");
    assert_eq!((keys(&page.kvs), page.more, page.revision), (vec![a.as_str()], true, r3));
}

/// `count` is the number of live keys a range selects at its revision, from `start_after`
/// on, whatever its limit (what a paginated list reports as `remainingItemCount`); it fails
/// like `range` at a compacted or future revision.
pub async fn count_counts_the_live_keys_of_a_range_at_its_revision(h: &mut dyn Harness) {
    let store = h.open().await;
    let p = "/registry/configmaps/default/";
    let mut last = 0;
    for name in ["a", "b", "c", "d"] {
        last = store.create(&format!("{p}{name}"), b"v".to_vec()).await.expect("create");
    }
    store.create("/registry/configmaps/other/x", b"v".to_vec()).await.expect("create elsewhere");
    let r4 = last;
    store.delete(&format!("{p}b"), None).await.expect("delete b");
    let count = |start_after: Option<&str>, revision: Revision, limit: usize| {
        let req =
            RangeRequest { prefix: p.into(), start_after: start_after.map(|k| format!("{p}{k}")), limit, revision };
        let store = store.clone();
        async move { store.count(req).await }
    };
    assert_eq!(count(None, 0, 0).await.expect("count now"), 3, "a, c, d: b is deleted");
    assert_eq!(count(None, 0, 1).await.expect("count with a limit"), 3, "the limit is ignored");
    assert_eq!(count(Some("a"), 0, 0).await.expect("count after a"), 2);
    assert_eq!(count(Some("d"), 0, 0).await.expect("count after d"), 0);
    assert_eq!(count(None, r4, 0).await.expect("count at r4"), 4, "b still existed at r4");
    assert_eq!(count(Some("a"), r4, 0).await.expect("count after a at r4"), 3);
    let now = current(&store).await;
    match count(None, now + 1, 0).await {
        Err(Error::FutureRevision { requested, .. }) => assert_eq!(requested, now + 1),
        other => panic!("count at a future revision: expected FutureRevision, got {other:?}"),
    }
    store.compact(now).await.expect("compact");
    match count(None, r4, 0).await {
        Err(Error::Compacted { requested, .. }) => assert_eq!(requested, r4),
        other => panic!("count at a compacted revision: expected Compacted, got {other:?}"),
    }
}

/// After `compact(C)`, reads below C fail with `Compacted`; the snapshot at C itself stays
/// readable and correct (keys deleted at or before C are gone, keys changed after C show their
/// value at C).
pub async fn range_at_a_compacted_revision_fails_with_compacted(h: &mut dyn Harness) {
    let store = h.open().await;
    let p = "/registry/leases/kube-node-lease/";
    let mut revs = Vec::new();
    for i in 0..5 {
        revs.push(store.create(&format!("{p}n{i}"), b"v0".to_vec()).await.expect("create"));
    }
    let mut last = revs.clone();
    for round in 1..4 {
        for (i, rev) in last.iter_mut().enumerate() {
            *rev = store.update(&format!("{p}n{i}"), format!("v{round}").into_bytes(), *rev).await.expect("update");
        }
    }
    let (_, _) = store.delete(&format!("{p}n0"), None).await.expect("delete n0");
    let c = current(&store).await;
    // After C: n1 changes, n2 is deleted, n5 appears.
    store.update(&format!("{p}n1"), b"after".to_vec(), last[1]).await.expect("update n1");
    store.delete(&format!("{p}n2"), None).await.expect("delete n2");
    store.create(&format!("{p}n5"), b"after".to_vec()).await.expect("create n5");

    store.compact(c).await.expect("compact");
    assert_eq!(store.compacted_revision().await.expect("compacted_revision"), c);
    for rev in [c - 1, revs[0], 1] {
        match store.range(RangeRequest { prefix: p.into(), revision: rev, ..Default::default() }).await {
            Err(Error::Compacted { requested, compacted }) => assert_eq!((requested, compacted), (rev, c)),
            other => panic!("range at compacted revision {rev}: expected Compacted, got {other:?}"),
        }
    }
    let snap = range_all(&store, p, c).await;
    let got: Vec<(String, Vec<u8>, Revision)> =
        snap.kvs.into_iter().map(|kv| (kv.key, kv.value, kv.mod_revision)).collect();
    let want: Vec<(String, Vec<u8>, Revision)> =
        (1..5).map(|i| (format!("{p}n{i}"), b"v3".to_vec(), last[i])).collect();
    assert_eq!(got, want, "the snapshot at the compacted revision");
    let now = range_all(&store, p, 0).await;
    assert_eq!(
        keys(&now.kvs),
        [format!("{p}n1"), format!("{p}n3"), format!("{p}n4"), format!("{p}n5")]
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
    );
    assert_eq!(store.get(&format!("{p}n1")).await.expect("get").expect("n1").value, b"after");
}

/// `range` at a revision newer than the current one fails with `FutureRevision`.
pub async fn range_at_a_future_revision_fails_with_future_revision(h: &mut dyn Harness) {
    let store = h.open().await;
    store.create("/registry/pods/default/x", b"x".to_vec()).await.expect("create");
    let now = current(&store).await;
    assert_eq!(range_all(&store, "/registry/", now).await.kvs.len(), 1, "the current revision is readable");
    match store.range(RangeRequest { prefix: "/registry/".into(), revision: now + 1, ..Default::default() }).await {
        Err(Error::FutureRevision { requested, current }) => assert_eq!((requested, current), (now + 1, now)),
        other => panic!("range at a future revision: expected FutureRevision, got {other:?}"),
    }
}

/// Compacting to or below the compacted revision is a no-op; compacting past the current
/// revision fails with `FutureRevision` and changes nothing.
pub async fn compact_is_idempotent_and_rejects_future_revisions(h: &mut dyn Harness) {
    let store = h.open().await;
    let mut rev = store.create("/registry/pods/default/c", b"0".to_vec()).await.expect("create");
    for i in 1..6 {
        rev = store.update("/registry/pods/default/c", format!("{i}").into_bytes(), rev).await.expect("update");
    }
    let now = current(&store).await;
    match store.compact(now + 1).await {
        Err(Error::FutureRevision { requested, current }) => assert_eq!((requested, current), (now + 1, now)),
        other => panic!("compact past the current revision: expected FutureRevision, got {other:?}"),
    }
    assert_eq!(store.compacted_revision().await.expect("compacted_revision"), 0);
    store.compact(now - 2).await.expect("compact");
    store.compact(now - 2).await.expect("compact again to the same revision");
    store.compact(now - 4).await.expect("compact to an older revision");
    assert_eq!(store.compacted_revision().await.expect("compacted_revision"), now - 2);
    store.compact(now).await.expect("compact to the current revision");
    assert_eq!(store.compacted_revision().await.expect("compacted_revision"), now);
    let kv = store.get("/registry/pods/default/c").await.expect("get").expect("the latest value survives compaction");
    assert_eq!((kv.value.as_slice(), kv.mod_revision), (&b"5"[..], rev));
    let next = store.update("/registry/pods/default/c", b"6".to_vec(), rev).await.expect("write after compaction");
    assert_eq!(next, now + 1, "compaction does not move the revision");
}

/// A watch delivers every PUT and DELETE under its prefix after its start revision, in revision
/// order, exactly once, with prev_kv, nothing outside the prefix; a second watch from the same
/// revision replays the same history; a watch from a later revision starts after it.
pub async fn watch_delivers_every_change_in_order_exactly_once_with_prev_kv(h: &mut dyn Harness) {
    let store = h.open().await;
    let p = "/registry/configmaps/";
    let base = current(&store).await;
    let mut live = store.watch(p, base).await.expect("watch");
    let a = format!("{p}ns/a");
    let b = format!("{p}ns/b");
    let r1 = store.create(&a, b"a1".to_vec()).await.expect("create a");
    let r2 = store.update(&a, b"a2".to_vec(), r1).await.expect("update a");
    let r3 = store.create(&b, b"b1".to_vec()).await.expect("create b");
    store.create("/registry/secrets/ns/x", b"not watched".to_vec()).await.expect("create outside");
    store.create("/registry/configmaps", b"not under the prefix either".to_vec()).await.expect("create outside");
    let (r4, _) = store.delete(&a, None).await.expect("delete a");
    let r5 = store.update(&b, b"b2".to_vec(), r3).await.expect("update b");

    let check = |events: &[Event]| {
        assert_eq!(events.len(), 5, "{events:?}");
        expect_put(&events[0], &a, b"a1", r1, r1, None);
        expect_put(&events[1], &a, b"a2", r1, r2, Some((b"a1", r1)));
        expect_put(&events[2], &b, b"b1", r3, r3, None);
        expect_delete(&events[3], &a, r4, b"a2", r2);
        expect_put(&events[4], &b, b"b2", r3, r5, Some((b"b1", r3)));
    };
    check(&next_events(&mut live, 5).await);
    // Replay from history.
    let mut replay = store.watch(p, base).await.expect("watch from history");
    check(&next_events(&mut replay, 5).await);
    // Start in the middle: strictly after r2.
    let mut mid = store.watch(p, r2).await.expect("watch from r2");
    let events = next_events(&mut mid, 3).await;
    assert_eq!(events.iter().map(|e| e.kv.mod_revision).collect::<Vec<_>>(), vec![r3, r4, r5]);
    // Nothing else arrives on the live stream: a later write is the very next event.
    let r6 = store.create(&format!("{p}ns/c"), b"c".to_vec()).await.expect("create c");
    let events = next_events(&mut live, 1).await;
    expect_put(&events[0], &format!("{p}ns/c"), b"c", r6, r6, None);
}

/// `watch(prefix, 0)` starts from the current revision: it sees later writes only.
pub async fn watch_from_now_sees_only_later_writes(h: &mut dyn Harness) {
    let store = h.open().await;
    let p = "/registry/services/default/";
    store.create(&format!("{p}before"), b"old".to_vec()).await.expect("create");
    let mut w = store.watch(p, 0).await.expect("watch from now");
    let r = store.create(&format!("{p}after"), b"new".to_vec()).await.expect("create");
    let events = next_events(&mut w, 1).await;
    expect_put(&events[0], &format!("{p}after"), b"new", r, r, None);
}

/// A consumer that drops its stream at arbitrary points and resumes from the last revision it
/// saw, while a writer keeps writing, receives every write exactly once in order.
pub async fn watch_resumes_after_disconnect_without_gap_or_duplicate(h: &mut dyn Harness) {
    let store = h.open().await;
    let p = "/registry/endpoints/";
    let base = current(&store).await;
    const WRITES: usize = 300;
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut revs = Vec::with_capacity(WRITES);
            let mut mods: Vec<Option<Revision>> = vec![None; 10];
            for i in 0..WRITES {
                let slot = i % 10;
                let key = format!("{p}ns/e{slot}");
                let rev = match mods[slot] {
                    None => store.create(&key, format!("{i}").into_bytes()).await.expect("create"),
                    Some(m) if i % 7 == 0 => store.delete(&key, Some(m)).await.expect("delete").0,
                    Some(m) => store.update(&key, format!("{i}").into_bytes(), m).await.expect("update"),
                };
                mods[slot] = if i % 7 == 0 && mods[slot].is_some() { None } else { Some(rev) };
                revs.push(rev);
                // Writes outside the prefix between them.
                store.create(&format!("/registry/other/{i}"), b"x".to_vec()).await.expect("create other");
            }
            revs
        })
    };
    let mut seen: Vec<Revision> = Vec::new();
    let mut last = base;
    let mut reconnects = 0;
    while seen.len() < WRITES {
        let mut stream = store.watch(p, last).await.expect("watch resume");
        // Read a varying number of messages, then disconnect.
        let budget = 1 + (reconnects * 7) % 13;
        for _ in 0..budget {
            if seen.len() >= WRITES {
                break;
            }
            match next_message(&mut stream, "an event after resume").await {
                WatchResponse::Events(events) => {
                    for ev in events {
                        assert!(ev.kv.mod_revision > last, "duplicate or out-of-order event {}", ev.kv.mod_revision);
                        assert!(ev.kv.key.starts_with(p), "event outside the prefix: {}", ev.kv.key);
                        last = ev.kv.mod_revision;
                        seen.push(last);
                    }
                }
                WatchResponse::Progress { revision } => assert!(revision >= last, "bookmark went back"),
            }
        }
        drop(stream);
        reconnects += 1;
    }
    let revs = step("the writer", writer).await.expect("writer task");
    assert_eq!(seen, revs, "the resumed streams together deliver every write exactly once, in order");
    assert!(reconnects > 5, "the test must actually reconnect");
}

/// After `compact(C)`, a watch from `C - 1` fails with `Compacted` (Kubernetes answers 410 Gone)
/// while a watch from `C` works and delivers what follows.
pub async fn watch_from_a_compacted_revision_fails_with_compacted(h: &mut dyn Harness) {
    let store = h.open().await;
    let p = "/registry/nodes/";
    let created = store.create(&format!("{p}n1"), b"0".to_vec()).await.expect("create");
    let mut rev = created;
    for i in 1..5 {
        rev = store.update(&format!("{p}n1"), format!("{i}").into_bytes(), rev).await.expect("update");
    }
    let c = rev;
    let r_after = store.update(&format!("{p}n1"), b"after".to_vec(), rev).await.expect("update after C");
    store.compact(c).await.expect("compact");
    assert_watch_compacted(&store, p, c - 1, c).await;
    assert_watch_compacted(&store, p, 1, c).await;
    let mut w = store.watch(p, c).await.expect("watch from the compacted revision");
    let events = next_events(&mut w, 1).await;
    expect_put(&events[0], &format!("{p}n1"), b"after", created, r_after, Some((b"4", c)));
    let r_live = store.update(&format!("{p}n1"), b"live".to_vec(), r_after).await.expect("update");
    let events = next_events(&mut w, 1).await;
    expect_put(&events[0], &format!("{p}n1"), b"live", created, r_live, Some((b"after", r_after)));
}

/// An idle watch receives bookmarks carrying the current revision, also when writes happen
/// elsewhere, and a bookmark never goes back before an event already delivered.
pub async fn idle_watch_receives_progress_bookmarks(h: &mut dyn Harness) {
    let store = h.open().await;
    let p = "/registry/csinodes/";
    let start = current(&store).await;
    let mut w = store.watch(p, 0).await.expect("watch");
    let first = next_progress(&mut w, start).await;
    assert!(first <= current(&store).await, "a bookmark never runs ahead of the store");
    // Writes outside the prefix move the bookmark forward.
    let mut elsewhere = 0;
    for i in 0..3 {
        elsewhere = store.create(&format!("/registry/pods/x/{i}"), b"x".to_vec()).await.expect("create elsewhere");
    }
    next_progress(&mut w, elsewhere).await;
    // A write under the prefix is an event, and later bookmarks are at or after it.
    let r = store.create(&format!("{p}n1"), b"x".to_vec()).await.expect("create");
    let events = next_events(&mut w, 1).await;
    assert_eq!(events[0].kv.mod_revision, r);
    let after = next_progress(&mut w, r).await;
    assert!(after >= r);
}

/// 64 concurrent writers doing compare-and-swap increments of one counter lose no update, and
/// every successful write has its own revision.
pub async fn concurrent_cas_increments_lose_no_update(h: &mut dyn Harness) {
    let store = h.open().await;
    const WRITERS: usize = 64;
    // Every successful increment costs a round in which all 64 writers read and try; with a
    // networked store that is thousands of requests, so the per-writer count stays small.
    const INCREMENTS: usize = 3;
    let key = "/registry/counters/default/c";
    store.create(key, b"0".to_vec()).await.expect("create counter");
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            let mut conflicts = 0usize;
            for _ in 0..INCREMENTS {
                loop {
                    let kv = store.get(key).await.expect("get").expect("counter exists");
                    let n: u64 = std::str::from_utf8(&kv.value).expect("utf8").parse().expect("a number");
                    match store.update(key, (n + 1).to_string().into_bytes(), kv.mod_revision).await {
                        Ok(rev) => {
                            revs.push(rev);
                            break;
                        }
                        Err(Error::Conflict { .. }) => conflicts += 1,
                        Err(e) => panic!("update: {e}"),
                    }
                }
            }
            (revs, conflicts)
        }));
    }
    let mut all = HashSet::new();
    let mut conflicts = 0;
    for t in tasks {
        let (revs, c) = long_step("a writer", t).await.expect("writer task");
        conflicts += c;
        for r in revs {
            assert!(all.insert(r), "revision {r} acknowledged twice");
        }
    }
    let kv = store.get(key).await.expect("get").expect("counter exists");
    assert_eq!(kv.value, (WRITERS * INCREMENTS).to_string().into_bytes(), "no lost update");
    assert_eq!(all.len(), WRITERS * INCREMENTS);
    assert_eq!(kv.mod_revision, *all.iter().max().expect("revisions"));
    // With 64 writers racing, conflicts must have happened: otherwise CAS was not exercised.
    assert!(conflicts > 0, "64 concurrent read-modify-write loops produced no conflict");
}

/// 64 concurrent writers each creating distinct keys all succeed, with distinct revisions, and
/// the store ends up with every key and exactly that many revisions more.
pub async fn concurrent_creates_on_many_keys_all_succeed(h: &mut dyn Harness) {
    let store = h.open().await;
    const WRITERS: usize = 64;
    const EACH: usize = 20;
    let base = current(&store).await;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..EACH {
                let key = format!("/registry/pods/w{w:02}/p{i:02}");
                revs.push((key.clone(), store.create(&key, vec![b'x'; 2048]).await.expect("create")));
            }
            revs
        }));
    }
    let mut revs = HashSet::new();
    let mut created = BTreeMap::new();
    for t in tasks {
        for (key, rev) in long_step("a writer", t).await.expect("writer task") {
            assert!(revs.insert(rev), "revision {rev} acknowledged twice");
            created.insert(key, rev);
        }
    }
    assert_eq!(current(&store).await, base + (WRITERS * EACH) as Revision);
    let all = range_all(&store, "/registry/pods/", 0).await;
    assert_eq!(all.kvs.len(), WRITERS * EACH);
    for kv in all.kvs {
        assert_eq!(created.get(&kv.key), Some(&kv.mod_revision), "{} at its acknowledged revision", kv.key);
    }
}

/// A value of exactly [`MAX_VALUE_BYTES`] is stored and read back; one byte more fails with
/// `ValueTooLarge` for create and update, writing nothing.
pub async fn value_at_the_size_limit_is_accepted_and_one_byte_more_is_rejected(h: &mut dyn Harness) {
    let store = h.open().await;
    let big: Vec<u8> = (0..MAX_VALUE_BYTES).map(|i| (i % 251) as u8).collect();
    let key = "/registry/configmaps/default/big";
    let rev = store.create(key, big.clone()).await.expect("a value of exactly MAX_VALUE_BYTES");
    let kv = store.get(key).await.expect("get").expect("big exists");
    assert!(kv.value == big, "the big value reads back intact");
    let now = current(&store).await;
    let too_big = vec![7u8; MAX_VALUE_BYTES + 1];
    for result in [
        store.create("/registry/configmaps/default/bigger", too_big.clone()).await,
        store.update(key, too_big.clone(), rev).await,
    ] {
        match result {
            Err(Error::ValueTooLarge { size, limit }) => {
                assert_eq!((size, limit), (MAX_VALUE_BYTES + 1, MAX_VALUE_BYTES))
            }
            other => panic!("oversized value: expected ValueTooLarge, got {other:?}"),
        }
    }
    assert_eq!(current(&store).await, now, "rejected values consume no revision");
    assert!(store.get("/registry/configmaps/default/bigger").await.expect("get").is_none());
}

/// Closing and reopening the store keeps every key, value and revision, the compacted revision
/// and the retained history (a watch resumes across the restart); new writes continue from the
/// old revision.
pub async fn data_revision_and_history_survive_reopen(h: &mut dyn Harness) {
    let (before, history_from, compacted, rev_b, events_before) = {
        let store = h.open().await;
        let p = "/registry/pods/default/";
        let r_old = store.create(&format!("{p}old"), b"compacted away".to_vec()).await.expect("create");
        store.update(&format!("{p}old"), b"old2".to_vec(), r_old).await.expect("update");
        let compacted = current(&store).await;
        let ra = store.create(&format!("{p}a"), b"a".to_vec()).await.expect("create a");
        let rb = store.create(&format!("{p}b"), b"b".to_vec()).await.expect("create b");
        store.update(&format!("{p}a"), b"a2".to_vec(), ra).await.expect("update a");
        store.delete(&format!("{p}old"), None).await.expect("delete old");
        store.compact(compacted).await.expect("compact");
        let before = range_all(&store, "/registry/", 0).await;
        let mut w = store.watch("/registry/", compacted).await.expect("watch");
        let events = next_events(&mut w, 4).await;
        (before, compacted, compacted, rb, events)
    };
    // Every handle of the first open is dropped here.
    let store = h.open().await;
    assert_eq!(current(&store).await, before.revision, "the revision survives reopen");
    assert_eq!(store.compacted_revision().await.expect("compacted_revision"), compacted);
    let after = range_all(&store, "/registry/", 0).await;
    assert_eq!(after, before, "every key and value survives reopen");
    let b = store.get("/registry/pods/default/b").await.expect("get").expect("b survives");
    assert_eq!((b.value.as_slice(), b.create_revision, b.mod_revision), (&b"b"[..], rev_b, rev_b));
    // History survives: a watch from before the restart replays the same events.
    let mut w = store.watch("/registry/", history_from).await.expect("watch across the restart");
    assert_eq!(next_events(&mut w, 4).await, events_before);
    assert_watch_compacted(&store, "/registry/", compacted - 1, compacted).await;
    let next = store.create("/registry/pods/default/c", b"c".to_vec()).await.expect("write after reopen");
    assert_eq!(next, before.revision + 1, "revisions continue where they were");
    let events = next_events(&mut w, 1).await;
    expect_put(&events[0], "/registry/pods/default/c", b"c", next, next, None);
}
