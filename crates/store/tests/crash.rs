//! Crash test: acknowledged writes survive `kill -9` at random moments.
//!
//! The test binary runs itself as a child process (selected by the `SKIFF_STORE_CRASH_CHILD`
//! environment variable). The child opens the store and writes continuously with many
//! concurrent writers (creates and compare-and-swap updates, compactions in between), printing
//! one `ack` line per acknowledged write. The parent SIGKILLs it at a random moment, reopens the
//! store, and checks that every acknowledged write is there with its value and revision, that
//! revisions only ever grow, and that SQLite finds the file intact. Then it starts the next
//! child on the same file. (`harness = false`: this file has its own `main`.)

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use skiff_store::sqlite::SqliteBackend;
use skiff_store::{Backend, Error, Options, RangeRequest, Revision};

const CHILD_ENV: &str = "SKIFF_STORE_CRASH_CHILD";
const TEST_NAME: &str = "acknowledged_writes_survive_sigkill_at_random_moments";
const ROUNDS: usize = 10;
const WRITERS: usize = 16;
const KEYS_PER_WRITER: usize = 6;

fn key(writer: usize, slot: usize) -> String {
    format!("/registry/crash/w{writer:02}/k{slot:02}")
}

/// The value of the `n`th write to `key`: `len` bytes derived from both.
fn value_for(key: &str, n: u64, len: usize) -> Vec<u8> {
    let stamp = format!("{key}#{n}#");
    stamp.as_bytes().iter().copied().cycle().take(len.max(stamp.len())).collect()
}

/// Parses `n` back out of a value.
fn n_of(value: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(value).ok()?;
    s.split('#').nth(1)?.parse().ok()
}

fn options() -> Options {
    Options { progress_interval: Duration::from_secs(1), compaction_interval: None }
}

fn main() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(PathBuf::from(path));
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("{TEST_NAME}: test");
        return;
    }
    // Honour a name filter like the standard harness does.
    if let Some(filter) = args.iter().find(|a| !a.starts_with('-'))
        && !TEST_NAME.contains(filter.as_str())
    {
        println!("running 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out\n");
        return;
    }
    println!("running 1 test");
    let started = Instant::now();
    parent();
    println!("test {TEST_NAME} ... ok");
    println!(
        "\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in {:.2}s\n",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// Child: write until killed.

fn child(path: PathBuf) {
    // Any failure in the child must end it, so that the parent notices.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(101);
    }));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async move {
        let store = Arc::new(SqliteBackend::open(&path, options()).unwrap_or_else(|e| panic!("child open: {e}")));
        // Pick up where the previous child stopped.
        let existing = store
            .range(RangeRequest { prefix: "/registry/crash/".into(), ..Default::default() })
            .await
            .expect("child range");
        let mut state: HashMap<String, (u64, Revision)> = HashMap::new();
        for kv in existing.kvs {
            let n = n_of(&kv.value).expect("a value written by this test");
            state.insert(kv.key, (n, kv.mod_revision));
        }
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let store = store.clone();
            let mut mine: Vec<(String, Option<(u64, Revision)>)> =
                (0..KEYS_PER_WRITER).map(|s| (key(w, s), state.get(&key(w, s)).copied())).collect();
            tasks.push(tokio::spawn(async move {
                let mut i = w as u64;
                loop {
                    i = i.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let slot = (i >> 33) as usize % KEYS_PER_WRITER;
                    let (k, st) = &mut mine[slot];
                    let n = st.map_or(1, |(n, _)| n + 1);
                    let len = 16 + (i >> 20) as usize % 6000;
                    let value = value_for(k, n, len);
                    let result = match st {
                        None => store.create(k, value).await,
                        Some((_, m)) => store.update(k, value, *m).await,
                    };
                    match result {
                        Ok(rev) => {
                            *st = Some((n, rev));
                            let mut out = std::io::stdout().lock();
                            let _ = writeln!(out, "ack {k} {rev} {n} {len}");
                            let _ = out.flush();
                        }
                        Err(e) => panic!("child write {k}: {e}"),
                    }
                }
            }));
        }
        // Compactions all along, so that some kills land in the middle of one.
        let compactor = {
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let now = store.current_revision().await.expect("current");
                    if now > 300 {
                        store.compact(now - 300).await.expect("compact");
                    }
                }
            })
        };
        // A child the parent forgot stops on its own.
        tokio::time::sleep(Duration::from_secs(60)).await;
        compactor.abort();
        for t in tasks {
            t.abort();
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Parent: kill, reopen, verify.

#[derive(Debug, Clone)]
struct Ack {
    key: String,
    rev: Revision,
    n: u64,
    len: usize,
}

/// Reads complete lines only: a line cut off by the kill has no newline and is not an ack.
fn read_acks(stdout: impl std::io::Read, seen: &AtomicUsize) -> Vec<Ack> {
    let mut reader = BufReader::new(stdout);
    let mut acks = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.last() != Some(&b'\n') => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let parts: Vec<&str> = text.split_whitespace().collect();
                match parts.as_slice() {
                    ["ack", key, rev, n, len] => acks.push(Ack {
                        key: key.to_string(),
                        rev: rev.parse().expect("rev"),
                        n: n.parse().expect("n"),
                        len: len.parse().expect("len"),
                    }),
                    _ => panic!("unexpected child output: {text:?}"),
                }
                seen.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    acks
}

fn parent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("skiff.db");
    let exe = std::env::current_exe().expect("current_exe");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let mut rng = rand::rng();
    let mut all: Vec<Ack> = Vec::new();
    let mut max_before: Revision = 0;
    let mut killed_mid_write = 0;
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .env(CHILD_ENV, &path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("child stdout");
        let seen = Arc::new(AtomicUsize::new(0));
        let reader = {
            let seen = seen.clone();
            std::thread::spawn(move || read_acks(stdout, &seen))
        };
        if round < 2 {
            // The first rounds die young: possibly while creating, opening or recovering the file.
            std::thread::sleep(Duration::from_millis(rng.random_range(0..60)));
        } else {
            // Later rounds die while writing: after the first ack, at a random moment.
            let deadline = Instant::now() + Duration::from_secs(30);
            while seen.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("child exited on its own in round {round}: {status}");
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(rng.random_range(0..500)));
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("child exited on its own in round {round}: {status}");
        }
        child.kill().expect("SIGKILL the child");
        let status = child.wait().expect("wait for the child");
        assert!(!status.success(), "the child was killed, not finished");
        let acks = reader.join().expect("reader thread");
        if !acks.is_empty() {
            killed_mid_write += 1;
        }
        // Revisions only grow: every write of this round is after everything acknowledged before.
        for a in &acks {
            assert!(a.rev > max_before, "round {round}: revision {} reused or went back (before: {max_before})", a.rev);
        }
        let mut per_key: HashMap<&str, Revision> = HashMap::new();
        for a in &acks {
            if let Some(prev) = per_key.insert(&a.key, a.rev) {
                assert!(a.rev > prev, "{}: acknowledged revisions go back ({prev} then {})", a.key, a.rev);
            }
        }
        all.extend(acks);
        max_before = rt.block_on(verify(&path, &all, round));
    }
    assert!(killed_mid_write >= ROUNDS / 2, "most children must be killed while writing ({killed_mid_write})");
    assert!(all.len() > 200, "the children wrote too little to test anything ({} acks)", all.len());
    integrity_check(&path);
}

/// Reopens the store and checks every acknowledged write; returns the current revision.
async fn verify(path: &Path, acks: &[Ack], round: usize) -> Revision {
    let store = match SqliteBackend::open_existing(path, options()) {
        Ok(s) => s,
        // The very first child may die before the file exists; that is the only excuse.
        Err(Error::Corrupt { reason, .. }) if acks.is_empty() && !path.exists() => {
            assert!(reason.contains("does not exist"), "{reason}");
            return 0;
        }
        Err(e) => panic!("round {round}: reopen after SIGKILL: {e}"),
    };
    let current = store.current_revision().await.expect("current");
    let compacted = store.compacted_revision().await.expect("compacted");
    let max_acked = acks.iter().map(|a| a.rev).max().unwrap_or(0);
    assert!(current >= max_acked, "round {round}: current revision {current} < acknowledged {max_acked}");
    // History: every acknowledged write not compacted away reads back at its revision.
    for a in acks.iter().filter(|a| a.rev >= compacted) {
        let resp = store
            .range(RangeRequest { prefix: a.key.clone(), revision: a.rev, limit: 1, ..Default::default() })
            .await
            .unwrap_or_else(|e| panic!("round {round}: range {} at {}: {e}", a.key, a.rev));
        let kv = resp.kvs.first().unwrap_or_else(|| panic!("round {round}: acknowledged {a:?} is missing"));
        assert_eq!((kv.key.as_str(), kv.mod_revision), (a.key.as_str(), a.rev), "round {round}: {a:?}");
        assert!(kv.value == value_for(&a.key, a.n, a.len), "round {round}: wrong value for {a:?}");
    }
    // Current state: each key holds its last acknowledged write, or a later one that reached
    // the disk before its child was killed.
    let mut last: BTreeMap<&str, &Ack> = BTreeMap::new();
    for a in acks {
        let e = last.entry(a.key.as_str()).or_insert(a);
        if a.rev > e.rev {
            *e = a;
        }
    }
    for (key, a) in last {
        let kv = store.get(key).await.expect("get").unwrap_or_else(|| panic!("round {round}: {key} lost"));
        let n = n_of(&kv.value).expect("a value written by this test");
        // Later writes may be there unacknowledged (one per killed child at most).
        assert!(n >= a.n, "round {round}: {key} holds write #{n}, last acknowledged #{}", a.n);
        if n == a.n {
            assert_eq!(kv.mod_revision, a.rev, "round {round}: {key}");
            assert!(kv.value == value_for(key, a.n, a.len), "round {round}: {key} value");
        } else {
            assert!(kv.mod_revision > a.rev, "round {round}: {key}");
        }
    }
    current
}

fn integrity_check(path: &Path) {
    let conn = rusqlite::Connection::open(path).expect("open for integrity_check");
    let result: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check");
    assert_eq!(result, "ok", "SQLite integrity_check after {ROUNDS} kills");
}
