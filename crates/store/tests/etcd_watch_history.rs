//! Watch-history checker for the etcd backend (in the spirit of etcd's robustness tests):
//! writers churn keys on a 3-member etcd cluster while members are killed with SIGKILL and
//! restarted and history is compacted behind the watchers; watchers on overlapping prefixes drop
//! their streams at random points and resume from the last revision they saw (an event or a
//! bookmark). Afterwards every watcher's combined history must be ordered, unique, reliable
//! (every revision under its prefix, no gap) and agree with the acknowledged writes, and no
//! bookmark may precede an event it claims to cover.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use skiff_store::etcd::EtcdBackend;
use skiff_store::etcd::harness::EtcdCluster;
use skiff_store::{Backend, Error, Event, EventType, Options, Revision, WatchResponse};
use tokio::time::Instant;

const WRITERS: usize = 6;
const KEYS_PER_WRITER: usize = 4;
const WRITES_PER_WRITER: usize = 150;
/// Bound for every wait; a hung backend fails the test.
const DEADLINE: Duration = Duration::from_secs(120);

/// What a writer knows it did.
#[derive(Debug, Clone)]
enum Write {
    /// Acknowledged at this revision: (key, kind, value, previous (value, mod_revision)).
    Acked { rev: Revision, key: String, kind: EventType, value: Vec<u8>, prev: Option<(Vec<u8>, Revision)> },
    /// Failed with Unavailable: it may or may not have been applied.
    Uncertain { key: String, kind: EventType, value: Vec<u8> },
}

/// One watcher's combined history over all its streams.
#[derive(Default)]
struct Seen {
    events: Vec<Event>,
    /// (index into `events` at the time, bookmark revision)
    bookmarks: Vec<(usize, Revision)>,
    resumes: usize,
}

fn options() -> Options {
    Options { progress_interval: Duration::from_millis(150), compaction_interval: None }
}

/// Retries `op` while the cluster is unavailable (a member just died), up to the deadline.
async fn until_available<T, F, Fut>(what: &str, mut op: F) -> skiff_store::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = skiff_store::Result<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        match op().await {
            Err(Error::Unavailable(m)) => {
                assert!(Instant::now() < deadline, "{what}: unavailable for too long: {m}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

async fn writer(
    store: Arc<EtcdBackend>,
    w: usize,
    log: Arc<parking_lot::Mutex<Vec<Write>>>,
    acked: Arc<AtomicUsize>,
    compactions: Arc<AtomicUsize>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
    // (value, mod_revision) of each key this writer owns; None when absent.
    let mut state: Vec<Option<(Vec<u8>, Revision)>> = vec![None; KEYS_PER_WRITER];
    for i in 0..WRITES_PER_WRITER {
        if i == WRITES_PER_WRITER / 2 {
            // Half the writes still to come wait for a compaction, so one always lands during
            // the churn, however the machine's load stretches or squeezes it.
            let deadline = Instant::now() + DEADLINE;
            while compactions.load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline, "writer {w}: no compaction succeeded");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let k = rng.random_range(0..KEYS_PER_WRITER);
        let prefix = if k % 2 == 0 { "/registry/a/" } else { "/registry/b/" };
        let key = format!("{prefix}w{w}/k{k}");
        let value = format!("w{w}-{i}").into_bytes();
        let (kind, result) = match state[k].clone() {
            None => (EventType::Put, store.create(&key, value.clone()).await),
            Some((_, m)) if rng.random_bool(0.25) => {
                (EventType::Delete, store.delete(&key, Some(m)).await.map(|(r, _)| r))
            }
            Some((_, m)) => (EventType::Put, store.update(&key, value.clone(), m).await),
        };
        match result {
            Ok(rev) => {
                let prev = state[k].clone();
                state[k] = (kind == EventType::Put).then(|| (value.clone(), rev));
                let value = if kind == EventType::Put { value } else { Vec::new() };
                log.lock().push(Write::Acked { rev, key: key.clone(), kind, value, prev });
                acked.fetch_add(1, Ordering::SeqCst);
            }
            Err(Error::Unavailable(_)) => {
                // The write may have landed: record it as such and re-read the key.
                log.lock().push(Write::Uncertain { key: key.clone(), kind, value });
                let kv = until_available("re-read after an uncertain write", || store.get(&key)).await.expect("get");
                state[k] = kv.map(|kv| (kv.value, kv.mod_revision));
            }
            Err(e) => panic!("writer {w}: {e}"),
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn watcher(
    store: Arc<EtcdBackend>,
    prefix: &'static str,
    start: Revision,
    seed: u64,
    position: Arc<AtomicI64>,
    target: Arc<AtomicI64>,
) -> Seen {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut seen = Seen::default();
    let mut last = start;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut stream = until_available("open watch", || store.watch(prefix, last))
            .await
            .unwrap_or_else(|e| panic!("watch {prefix} after {last}: {e}"));
        let budget = rng.random_range(1..40);
        for _ in 0..budget {
            let t = target.load(Ordering::SeqCst);
            if t > 0 && last >= t {
                return seen;
            }
            assert!(Instant::now() < deadline, "watcher {prefix} stuck at {last}");
            let message = match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
                Ok(Some(Ok(m))) => m,
                // A member died under the stream: resume from the last revision seen.
                Ok(Some(Err(Error::Unavailable(_)))) | Ok(None) => break,
                Ok(Some(Err(e))) => panic!("watch {prefix} after {last}: {e}"),
                Err(_) => panic!("watch {prefix}: no message for 30 s after {last}"),
            };
            match message {
                WatchResponse::Events(events) => {
                    assert!(!events.is_empty());
                    last = events[events.len() - 1].kv.mod_revision;
                    seen.events.extend(events);
                }
                WatchResponse::Progress { revision } => {
                    seen.bookmarks.push((seen.events.len(), revision));
                    last = last.max(revision);
                }
            }
            position.store(last, Ordering::SeqCst);
        }
        seen.resumes += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_watch_streams_are_ordered_unique_reliable_and_resumable_under_churn_kills_and_compaction() {
    let mut cluster = EtcdCluster::start(3).await.expect("start a 3-member etcd cluster");
    let mut config = cluster.config();
    config.request_timeout = Duration::from_secs(3);
    let store = Arc::new(EtcdBackend::connect(config, options()).await.expect("connect"));
    let start = store.current_revision().await.expect("revision");
    let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let acked = Arc::new(AtomicUsize::new(0));
    let target = Arc::new(AtomicI64::new(0));

    let specs: [(&'static str, u64); 5] =
        [("/registry/", 1), ("/registry/a/", 2), ("/registry/b/", 3), ("/registry/a/w1/", 4), ("/registry/", 5)];
    let mut watchers = Vec::new();
    let mut positions = Vec::new();
    for (prefix, seed) in specs {
        let position = Arc::new(AtomicI64::new(start));
        positions.push(position.clone());
        let task = tokio::spawn(watcher(store.clone(), prefix, start, seed, position, target.clone()));
        watchers.push((prefix, task));
    }
    let compacted = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(writer(store.clone(), w, log.clone(), acked.clone(), compacted.clone())))
        .collect();

    // Compact behind every watcher while the churn goes on.
    let done = Arc::new(AtomicBool::new(false));
    let compactor = {
        let (store, positions, done, compacted) = (store.clone(), positions.clone(), done.clone(), compacted.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let behind = positions.iter().map(|p| p.load(Ordering::SeqCst)).min().unwrap_or(start);
                if behind > start {
                    match store.compact(behind).await {
                        Ok(_) => {
                            compacted.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => eprintln!("compact at {behind}: {e}"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };

    // Kill two members in turn (SIGKILL), each restarted once the others accepted more writes.
    let total = WRITERS * WRITES_PER_WRITER;
    for (round, member) in [0usize, 1].into_iter().enumerate() {
        let deadline = Instant::now() + DEADLINE;
        let wait_for = |n: usize| {
            let acked = acked.clone();
            async move {
                while acked.load(Ordering::SeqCst) < n.min(total * 9 / 10) {
                    assert!(Instant::now() < deadline, "writes stalled");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        wait_for(total * (2 * round + 1) / 5).await;
        cluster.kill(member).expect("kill a member");
        wait_for(total * (2 * round + 2) / 5).await;
        cluster.restart(member).await.expect("restart the member");
    }

    for w in writers {
        tokio::time::timeout(DEADLINE, w).await.expect("writer finished").expect("writer task");
    }
    let end = until_available("final revision", || store.current_revision()).await.expect("revision");
    target.store(end, Ordering::SeqCst);
    let mut histories = Vec::new();
    for (prefix, task) in watchers {
        let seen = tokio::time::timeout(DEADLINE, task).await.expect("watcher finished").expect("watcher task");
        histories.push((prefix, seen));
    }
    done.store(true, Ordering::SeqCst);
    compactor.await.expect("compactor");
    let compactions = compacted.load(Ordering::SeqCst);

    // The reference: everything the writers may have written, by revision.
    let log = log.lock().clone();
    let mut by_rev: BTreeMap<Revision, &Write> = BTreeMap::new();
    for w in &log {
        if let Write::Acked { rev, .. } = w {
            assert!(by_rev.insert(*rev, w).is_none(), "revision {rev} acknowledged twice");
        }
    }
    let uncertain: Vec<&Write> = log.iter().filter(|w| matches!(w, Write::Uncertain { .. })).collect();

    // The full watch on /registry/ sees every revision after `start`, without gap: only the
    // writers write to this cluster.
    let (_, full) = histories.iter().find(|(p, _)| *p == "/registry/").expect("full watcher");
    let revs: Vec<Revision> = full.events.iter().map(|e| e.kv.mod_revision).collect();
    let want: Vec<Revision> = (start + 1..=end).collect();
    assert_eq!(revs, want, "the /registry/ watch delivers every revision exactly once, in order");

    for (prefix, seen) in &histories {
        // Ordered and unique (one write per revision here).
        for pair in seen.events.windows(2) {
            assert!(pair[0].kv.mod_revision < pair[1].kv.mod_revision, "{prefix}: out of order or duplicate");
        }
        // Reliable: exactly the reference's events under the prefix.
        let expected: Vec<&Event> = full.events.iter().filter(|e| e.kv.key.starts_with(prefix)).collect();
        let got: Vec<&Event> = seen.events.iter().collect();
        assert_eq!(got, expected, "{prefix}: the watch history equals the full history under the prefix");
        // Bookmarks never precede an event they cover.
        for &(index, revision) in &seen.bookmarks {
            if let Some(next) = seen.events.get(index) {
                assert!(
                    next.kv.mod_revision > revision,
                    "{prefix}: bookmark at {revision} was followed by an event at {}",
                    next.kv.mod_revision
                );
            }
        }
        eprintln!(
            "{prefix}: {} events, {} bookmarks, {} resumes",
            seen.events.len(),
            seen.bookmarks.len(),
            seen.resumes
        );
    }

    // The reference agrees with the writers: every acknowledged write at its revision, with its
    // previous value; anything else is a write whose answer was lost.
    for event in &full.events {
        match by_rev.get(&event.kv.mod_revision) {
            Some(Write::Acked { key, kind, value, prev, .. }) => {
                assert_eq!((&event.kv.key, event.kind, &event.kv.value), (key, *kind, value), "event {event:?}");
                let got_prev = event.prev_kv.as_ref().map(|p| (p.value.clone(), p.mod_revision));
                assert_eq!(&got_prev, prev, "prev_kv of {event:?}");
            }
            _ => assert!(
                uncertain.iter().any(|w| matches!(w, Write::Uncertain { key, kind, value }
                    if *key == event.kv.key && *kind == event.kind
                        && (*kind == EventType::Delete || *value == event.kv.value))),
                "event {event:?} matches no write"
            ),
        }
    }
    assert_eq!(by_rev.len() + uncertain.len(), total, "every write attempt is logged once");
    eprintln!("{} acknowledged, {} uncertain writes; {compactions} compactions", by_rev.len(), uncertain.len());
    assert!(compactions > 0, "the test must compact during the churn");
    assert!(histories.iter().all(|(_, s)| s.resumes >= 2), "every watcher must actually resume");
    assert!(histories.iter().any(|(_, s)| !s.bookmarks.is_empty()), "bookmarks must be checked too");
}
