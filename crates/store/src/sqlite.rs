//! The embedded backend: one SQLite file (WAL mode) holding every revision until compaction.
//!
//! Layout and moving parts:
//! - **Schema** (`schema.rs`): a `kv` table with one row per revision (`rev` primary key, key,
//!   create_rev, prev_rev, deleted flag, value) indexed on `(key, rev)`, and a `meta` table
//!   (schema version, compacted revision, compaction cursor). A read at revision `R` takes, for
//!   each key, its newest row at or below `R` and skips tombstones; one read transaction gives
//!   one consistent snapshot (SQLite WAL snapshot isolation).
//! - **Shared state** (`shared.rs`): what the backend handle and the threads below share — the
//!   revisions, the watch hub, counters, the flags the threads set for each other — and the
//!   messages between them. Each thread's logic has its own file.
//! - **Writer thread** (`writer.rs`): owns the only writing connection. Group commit: it takes
//!   every queued write, checks each in order against an in-memory index of live keys, inserts
//!   the accepted ones and commits them in one transaction, which writes the WAL without an
//!   fsync (`synchronous=NORMAL`), and hands the batch to the syncer. A rejected
//!   compare-and-swap fails alone.
//! - **Syncer thread** (`syncer.rs`, pipelined group commit): fsyncs the WAL once for every
//!   batch committed since its previous fsync, then makes their revisions visible (the durable
//!   revision bounds every read), publishes them to watchers and answers their callers. While it
//!   waits for the disk the writer already applies and commits the next batches, so the fsync
//!   and the CPU work overlap instead of adding up.
//! - **Readers**: a small pool of `query_only` connections used from `spawn_blocking`.
//! - **Watch hub** (`hub.rs`): the writer hands each committed batch to synced watchers over
//!   bounded channels; a watcher that is behind (new with an old start revision, or too slow)
//!   reads history from the database and switches to live delivery under the hub's lock.
//!   Idle watchers get [`WatchResponse::Progress`] every [`Options::progress_interval`].
//! - **Compaction** (`compaction.rs`): `compact(C)` records `C` durably at once; the writer then
//!   deletes superseded rows and tombstones at or below `C` in transactions of about a
//!   millisecond between batches, pausing at least as long between them, so writers wait at
//!   most one short chunk; a compaction reader thread reads each step's rows ahead on its own
//!   connection. A background policy compacts, every [`Options::compaction_interval`], to the
//!   revision seen at the previous tick (like kube-apiserver's `--etcd-compaction-interval`).
//! - **Checkpointer thread** (`checkpointer.rs`): copies the WAL into the database file with
//!   PASSIVE checkpoints off the commit path: when writes pause (the next write then starts the
//!   WAL over), or after `CHECKPOINT_BYTES` of writes (at most half the restart length) while
//!   they flow. The writer never checkpoints.
//!   SQLite restarts the WAL only when a write begins with every frame copied, which never
//!   happens while writes come back to back: once the WAL reaches `WAL_RESTART_BYTES` the
//!   checkpointer catches up until few frames are left and asks the writer for a quiet window
//!   of at most `WAL_RESTART_WINDOW` in which it copies the rest; if that is not enough (a busy
//!   disk: the checkpoint fsyncs the WAL and the database file), the writer goes on and the WAL
//!   grows until a later window or the next pause. Past `WAL_LIMIT_BYTES`, a safety valve for
//!   the disk set far above the common case, the window waits for the checkpoint to finish (up
//!   to `WAL_LIMIT_WINDOW`): that bounds the WAL at the cost of one stall as long as a
//!   checkpoint's fsyncs, which is why the limit is high — writer stalls longer than a few
//!   milliseconds matter more than the WAL's length. `journal_size_limit` truncates the WAL
//!   after a restart. BENCHMARKS.md has the measurements behind these settings.
//!
//! Durability: a write is acknowledged, and visible to any reader or watcher, only after its
//! transaction's WAL frames are fsynced (by the syncer; a failed fsync fails every later write
//! until the store is reopened), so
//! acknowledged writes survive `kill -9` and power loss; SQLite's WAL recovery makes an
//! interrupted transaction vanish whole. A database is owned by one open backend at a time (an
//! exclusive lock on `<file>-lock`).

mod checkpointer;
mod compaction;
mod hub;
mod schema;
mod shared;
mod syncer;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{Connection, params};
use tokio::sync::{Notify, mpsc, oneshot};

pub use schema::{PAGE_SIZE, WRITER_PRAGMAS, configure_durable_connection};

use self::hub::{Hub, Register, Status, WATCH_CHANNEL_CAPACITY};
use self::schema::{Create, OwnerLock, meta};
use self::shared::{CheckpointerLink, CompactionReaderLink, Request, Shared, Stats, WalRestart, WriteOp, WriteOutcome};
use self::writer::Writer;
use crate::{
    Backend, Error, Event, EventType, KeyValue, MAX_VALUE_BYTES, Options, RangeRequest, RangeResponse, Result,
    Revision, WatchResponse, WatchStream, prefix_range_end,
};

/// Reads running at once (each on its own pooled connection); more wait their turn, so a burst
/// of reads never opens a burst of connections.
const MAX_READERS: usize = 16;
/// At most this many events per message when a watcher catches up from history.
const CATCH_UP_EVENTS: usize = 512;
/// At most about this many value bytes per message when a watcher catches up from history.
const CATCH_UP_BYTES: usize = 4 * 1024 * 1024;

/// Counters the writer keeps, for `skiff bench store` and for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SqliteStats {
    /// Write transactions committed (group commits).
    pub batches: u64,
    /// fsyncs of the WAL by the syncer thread; each makes every batch committed before it
    /// durable (pipelined group commit: `batches / syncs` batches per fsync).
    pub syncs: u64,
    /// Writes committed; `writes / batches` is the average group-commit size.
    pub writes: u64,
    /// Compaction transactions run.
    pub compaction_chunks: u64,
    /// Every history row at or below this revision has been compacted physically (it trails
    /// [`Backend::compacted_revision`] while a compaction is in progress).
    pub compacted_through: Revision,
    /// The longest compaction (or post-compaction vacuum) transaction so far: the longest a
    /// write waited for compaction.
    pub longest_compaction_chunk: Duration,
    /// Background WAL checkpoints run (off the commit path).
    pub checkpoints: u64,
    /// Quiet windows (each at most the restart window's length) the writer gave the
    /// checkpointer to copy the last frames of a long WAL, so that the next write starts it over.
    pub restart_windows: u64,
    /// Restart windows in which the checkpointer copied the whole WAL in time.
    pub restart_windows_caught_up: u64,
    /// Times the checkpointer did not ask for a restart window although the WAL was long,
    /// because its checkpoints took longer than a window (a slow disk): the WAL then grows
    /// until a later attempt or the next pause in writes.
    pub restart_windows_skipped: u64,
    /// Restart windows opened because the WAL passed its limit (far above the restart length)
    /// after shorter windows did not let it start over: these wait for the checkpoint to finish
    /// (its copy and two fsyncs), up to a second, so the WAL stays bounded on a disk too slow
    /// for the short windows.
    pub restart_windows_forced: u64,
    /// Times a background checkpoint found the WAL started over since the previous one.
    pub wal_restarts: u64,
    /// The longest the WAL was when a background checkpoint ran, in bytes.
    pub longest_wal_bytes: u64,
    /// The longest a write waited in the writer's queue before its batch started (the writer
    /// was committing an earlier batch, or running a compaction step, a vacuum step or a WAL
    /// restart window).
    pub longest_queue_wait: Duration,
    /// The longest a write waited in the queue while the writer was busy with background work
    /// (compaction, vacuum, WAL restart window) rather than with earlier writes: the stall
    /// compaction causes, not counting its effect on the disk.
    pub longest_background_wait: Duration,
    /// The longest `COMMIT` of a write batch (writing its WAL frames) or fsync of the WAL.
    pub longest_commit: Duration,
}

/// The embedded SQLite backend. Cheap to share behind an `Arc`; dropping it stops the writer
/// (after its current batch), ends every watch stream and releases the database.
pub struct SqliteBackend {
    shared: Arc<Shared>,
    writer: Option<std::sync::mpsc::Sender<Request>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackend").field("path", &self.shared.path).finish_non_exhaustive()
    }
}

impl SqliteBackend {
    /// Opens the store in the SQLite file at `path`, creating a new empty store only when no file
    /// exists there. An existing file that is not a valid skiff database (garbage, an unrelated
    /// SQLite database, a store without its schema, a newer schema) fails with
    /// [`Error::Corrupt`] naming the file and is left untouched. So does a missing file whose
    /// `-wal` log still exists, and a file another open backend owns.
    pub fn open(path: &Path, opts: Options) -> Result<Self> {
        Self::open_with(path, opts, Create::IfMissing)
    }

    /// Like [`open`](Self::open) but never creates a store: a missing file is
    /// [`Error::Corrupt`]. For restarts, where a missing database means lost data rather than
    /// a first start.
    pub fn open_existing(path: &Path, opts: Options) -> Result<Self> {
        Self::open_with(path, opts, Create::Never)
    }

    fn open_with(path: &Path, opts: Options, create: Create) -> Result<Self> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(schema::corrupt(path, format!("directory {} does not exist", dir.display())));
        }
        let lock = OwnerLock::acquire(path)?;
        schema::prepare(path, create)?;
        let conn = schema::open_connection(path, true)?;
        let shared = Arc::new(Shared {
            path: path.to_path_buf(),
            current_rev: AtomicI64::new(0),
            compacted_rev: AtomicI64::new(0),
            hub: Hub::new(0),
            stats: Stats::default(),
            syncing: AtomicBool::new(false),
            sync_failed: AtomicBool::new(false),
            restart_requested: AtomicBool::new(false),
            restart_forced: AtomicBool::new(false),
            wal_restart: WalRestart::default(),
            queued_writes: AtomicUsize::new(0),
            readers: Mutex::new(Vec::new()),
            readers_closed: AtomicBool::new(false),
            read_permits: tokio::sync::Semaphore::new(MAX_READERS),
            progress_interval: opts.progress_interval.max(Duration::from_millis(10)),
        });
        let mut writer = Writer::load(conn, path, shared.clone(), opts.compaction_interval)?;
        shared.hub.publish(writer.current(), &mut [], &mut |_| Ok(Vec::new()));

        let (wake, wake_rx) = std::sync::mpsc::sync_channel(1);
        let (done_tx, done) = std::sync::mpsc::channel();
        writer.set_checkpointer(CheckpointerLink { wake, done });
        let ckpt_conn = schema::open_connection(path, true)?;
        // The WAL exists: the writer's load wrote to it.
        let wal_path = schema::wal_path(path);
        let wal = std::fs::File::open(&wal_path)
            .map_err(|e| Error::Internal(format!("cannot open the write-ahead log {}: {e}", wal_path.display())))?;
        let sync_conn = schema::open_connection(path, false)?;
        let compaction_conn = schema::open_connection(path, false)?;
        let (compaction_requests, compaction_requests_rx) = std::sync::mpsc::sync_channel(1);
        let (compaction_rows_tx, compaction_rows) = std::sync::mpsc::channel();
        writer.set_compaction_reader(CompactionReaderLink { request: compaction_requests, rows: compaction_rows });
        let (sync_tx, sync_rx) = std::sync::mpsc::channel();
        writer.set_syncer(sync_tx)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let mut threads = Vec::new();
        let spawn_err = |e: std::io::Error| Error::Internal(format!("cannot start a store thread: {e}"));
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("skiff-store-checkpoint".into())
                .spawn(move || checkpointer::checkpoint_loop(ckpt_conn, wake_rx, done_tx, s))
                .map_err(spawn_err)?,
        );
        threads.push(
            std::thread::Builder::new()
                .name("skiff-store-compaction-reader".into())
                .spawn(move || {
                    compaction::compaction_read_loop(compaction_conn, compaction_requests_rx, compaction_rows_tx)
                })
                .map_err(spawn_err)?,
        );
        let s = shared.clone();
        let syncer = std::thread::Builder::new()
            .name("skiff-store-sync".into())
            .spawn(move || syncer::sync_loop(wal, sync_conn, sync_rx, s))
            .map_err(spawn_err)?;
        threads.push(
            std::thread::Builder::new()
                .name("skiff-store-writer".into())
                .spawn(move || {
                    // Dropping the writer at the end of `run` stops the syncer after its last batch.
                    writer.run(rx);
                    if syncer.join().is_err() {
                        tracing::error!("the store's syncer thread panicked");
                    }
                    // The database is released only once the writer and the syncer have stopped.
                    drop(lock);
                })
                .map_err(spawn_err)?,
        );
        Ok(Self { shared, writer: Some(tx), threads })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Starts the "longest" figures of [`SqliteStats`] (longest compaction chunk, WAL length,
    /// queue wait, wait behind background work, commit) over from zero, so that a benchmark
    /// can attribute them to one phase. The counters are left alone.
    pub fn reset_longest_stats(&self) {
        let s = &self.shared.stats;
        for longest in [
            &s.longest_chunk_micros,
            &s.longest_wal_bytes,
            &s.longest_queue_wait_micros,
            &s.longest_background_wait_micros,
            &s.longest_commit_micros,
        ] {
            longest.store(0, Ordering::Relaxed);
        }
    }

    /// Group-commit and compaction counters.
    pub fn stats(&self) -> SqliteStats {
        let s = &self.shared.stats;
        SqliteStats {
            batches: s.batches.load(Ordering::Relaxed),
            syncs: s.syncs.load(Ordering::Relaxed),
            writes: s.writes.load(Ordering::Relaxed),
            compaction_chunks: s.compaction_chunks.load(Ordering::Relaxed),
            compacted_through: s.compact_cursor.load(Ordering::SeqCst),
            longest_compaction_chunk: Duration::from_micros(s.longest_chunk_micros.load(Ordering::Relaxed)),
            checkpoints: s.checkpoints.load(Ordering::Relaxed),
            restart_windows: s.restart_windows.load(Ordering::Relaxed),
            restart_windows_caught_up: s.restart_windows_caught_up.load(Ordering::Relaxed),
            restart_windows_skipped: s.restart_windows_skipped.load(Ordering::Relaxed),
            restart_windows_forced: s.restart_windows_forced.load(Ordering::Relaxed),
            wal_restarts: s.wal_restarts.load(Ordering::Relaxed),
            longest_wal_bytes: s.longest_wal_bytes.load(Ordering::Relaxed),
            longest_queue_wait: Duration::from_micros(s.longest_queue_wait_micros.load(Ordering::Relaxed)),
            longest_background_wait: Duration::from_micros(s.longest_background_wait_micros.load(Ordering::Relaxed)),
            longest_commit: Duration::from_micros(s.longest_commit_micros.load(Ordering::Relaxed)),
        }
    }

    async fn submit(&self, op: WriteOp) -> Result<WriteOutcome> {
        let (reply, rx) = oneshot::channel();
        let closed = || Error::Unavailable(format!("store {} is closed", self.shared.path.display()));
        let writer = self.writer.as_ref().ok_or_else(closed)?;
        self.shared.queued_writes.fetch_add(1, Ordering::SeqCst);
        if writer.send(Request::Write { op, reply, queued_at: std::time::Instant::now() }).is_err() {
            self.shared.queued_writes.fetch_sub(1, Ordering::SeqCst);
            return Err(closed());
        }
        rx.await
            .map_err(|_| Error::Internal(format!("store {}: the writer thread stopped", self.shared.path.display())))?
    }

    async fn read<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&Shared, &mut Connection) -> Result<R> + Send + 'static,
    {
        let shared = self.shared.clone();
        blocking_read(&self.shared, move || shared.with_reader(|c| f(&shared, c))).await
    }
}

/// Runs a read on the blocking pool, at most [`MAX_READERS`] at once.
async fn blocking_read<R: Send + 'static>(
    shared: &Shared,
    f: impl FnOnce() -> Result<R> + Send + 'static,
) -> Result<R> {
    let _permit = shared
        .read_permits
        .acquire()
        .await
        .map_err(|_| Error::Unavailable(format!("store {} is closed", shared.path.display())))?;
    tokio::task::spawn_blocking(f).await.map_err(|e| Error::Internal(format!("store read task failed: {e}")))?
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        // Closing the queue makes the writer finish its batch and exit; it closes the hub and
        // its checkpoint channel, which stops the checkpointer.
        self.writer.take();
        for t in self.threads.drain(..).rev() {
            if t.join().is_err() {
                tracing::error!(path = %self.shared.path.display(), "a store thread panicked");
            }
        }
        self.shared.hub.close();
        self.shared.readers_closed.store(true, Ordering::SeqCst);
        self.shared.readers.lock().clear();
    }
}

fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::ValueTooLarge { size: value.len(), limit: MAX_VALUE_BYTES });
    }
    Ok(())
}

fn unexpected(what: &str) -> Error {
    Error::Internal(format!("store writer returned an unexpected outcome for {what}"))
}

#[async_trait]
impl Backend for SqliteBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let key = key.to_string();
        self.read(move |s, c| read_get(s, c, key)).await
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.read(move |s, c| read_range(s, c, &req)).await
    }

    async fn count(&self, req: RangeRequest) -> Result<i64> {
        self.read(move |s, c| read_count(s, c, &req)).await
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Revision> {
        check_value(&value)?;
        match self.submit(WriteOp::Create { key: key.to_string(), value }).await? {
            WriteOutcome::Put(rev) => Ok(rev),
            WriteOutcome::Deleted(..) => Err(unexpected("create")),
        }
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected_mod_revision: Revision) -> Result<Revision> {
        check_value(&value)?;
        match self.submit(WriteOp::Update { key: key.to_string(), value, expected: expected_mod_revision }).await? {
            WriteOutcome::Put(rev) => Ok(rev),
            WriteOutcome::Deleted(..) => Err(unexpected("update")),
        }
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(Revision, KeyValue)> {
        match self.submit(WriteOp::Delete { key: key.to_string(), expected: expected_mod_revision }).await? {
            WriteOutcome::Deleted(rev, prev) => Ok((rev, prev)),
            WriteOutcome::Put(_) => Err(unexpected("delete")),
        }
    }

    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<WatchStream> {
        let shared = self.shared.clone();
        let compacted = shared.compacted_rev.load(Ordering::SeqCst);
        if after_revision > 0 && after_revision < compacted {
            return Err(Error::Compacted { requested: after_revision, compacted });
        }
        let (tx, rx) = mpsc::channel(WATCH_CHANNEL_CAPACITY);
        let id = shared.hub.next_id();
        let notify = Arc::new(Notify::new());
        let prefix = prefix.to_string();
        let (after, synced) = if after_revision <= 0 {
            match shared.hub.register_now(id, &prefix, &tx, &notify) {
                Some(now) => (now, true),
                None => return Err(Error::Unavailable(format!("store {} is closed", shared.path.display()))),
            }
        } else {
            (after_revision, false)
        };
        tokio::spawn(watch_task(shared, WatchTask { id, prefix, after, tx, notify }, synced));
        Ok(WatchStream::new(rx))
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.current_rev.load(Ordering::SeqCst))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        let closed = || Error::Unavailable(format!("store {} is closed", self.shared.path.display()));
        let writer = self.writer.as_ref().ok_or_else(closed)?;
        writer.send(Request::Compact { revision, reply }).map_err(|_| closed())?;
        rx.await
            .map_err(|_| Error::Internal(format!("store {}: the writer thread stopped", self.shared.path.display())))?
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.shared.compacted_rev.load(Ordering::SeqCst))
    }
}

// ---------------------------------------------------------------------------------------------
// Reads

fn key_string(s: &Shared, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes)
        .map_err(|_| Error::Internal(format!("sqlite {}: a stored key is not UTF-8", s.path.display())))
}

fn read_get(s: &Shared, conn: &mut Connection, key: String) -> Result<Option<KeyValue>> {
    // Rows above the durable revision may be committed to the WAL but not yet fsynced.
    let durable = s.current_rev.load(Ordering::SeqCst);
    let row: Option<(Revision, Revision, bool, Vec<u8>)> = {
        let mut stmt = conn
            .prepare_cached(
                "SELECT rev, create_rev, deleted, value FROM kv WHERE key = ?1 AND rev <= ?2 ORDER BY rev DESC LIMIT 1",
            )
            .map_err(|e| s.err(e))?;
        let mut rows = stmt.query(params![key.as_bytes(), durable]).map_err(|e| s.err(e))?;
        match rows.next().map_err(|e| s.err(e))? {
            Some(r) => Some((
                r.get(0).map_err(|e| s.err(e))?,
                r.get(1).map_err(|e| s.err(e))?,
                r.get(2).map_err(|e| s.err(e))?,
                r.get(3).map_err(|e| s.err(e))?,
            )),
            None => None,
        }
    };
    Ok(match row {
        Some((rev, create_rev, false, value)) => {
            Some(KeyValue { key, value, create_revision: create_rev, mod_revision: rev })
        }
        _ => None,
    })
}

/// The `[lo, hi)` byte bounds of a range request: keys under `prefix`, strictly after
/// `start_after`.
fn range_bounds(prefix: &str, start_after: Option<&str>) -> (Vec<u8>, Vec<u8>) {
    let mut lo = prefix.as_bytes().to_vec();
    if let Some(after) = start_after {
        // The smallest byte string greater than `after` is `after` followed by a zero byte.
        let mut next = after.as_bytes().to_vec();
        next.push(0);
        if next > lo {
            lo = next;
        }
    }
    // Keys are UTF-8, which never contains the byte 0xff: [0xff] is above every key.
    let hi = prefix_range_end(prefix).unwrap_or_else(|| vec![0xff]);
    (lo, hi)
}

/// The revision a read of `req` sees in the snapshot `tx`: the request's, or `current` (the
/// durable revision) when it names none; a future or compacted one is refused.
fn read_revision(s: &Shared, tx: &rusqlite::Transaction<'_>, req: &RangeRequest, current: i64) -> Result<i64> {
    let compacted = meta(tx, "compacted").map_err(|e| s.err(e))?;
    let at = if req.revision <= 0 { current } else { req.revision };
    if at > current {
        return Err(Error::FutureRevision { requested: at, current });
    }
    if at < compacted {
        return Err(Error::Compacted { requested: at, compacted });
    }
    Ok(at)
}

fn read_range(s: &Shared, conn: &mut Connection, req: &RangeRequest) -> Result<RangeResponse> {
    // The durable revision, read before the snapshot starts so the snapshot holds all of it;
    // rows above it may be committed to the WAL but not yet fsynced.
    let current = s.current_rev.load(Ordering::SeqCst);
    let tx = conn.transaction().map_err(|e| s.err(e))?;
    let at = read_revision(s, &tx, req, current)?;
    let (lo, hi) = range_bounds(&req.prefix, req.start_after.as_deref());
    let mut kvs = Vec::new();
    let mut more = false;
    if lo < hi {
        let mut stmt = tx
            .prepare_cached(
                "SELECT key, rev, create_rev, deleted, value FROM kv AS a INDEXED BY kv_key_rev
                 WHERE key >= ?1 AND key < ?2 AND rev <= ?3
                   AND NOT EXISTS (SELECT 1 FROM kv AS b WHERE b.key = a.key AND b.rev > a.rev AND b.rev <= ?3)
                 ORDER BY key",
            )
            .map_err(|e| s.err(e))?;
        let mut rows = stmt.query(params![lo, hi, at]).map_err(|e| s.err(e))?;
        while let Some(row) = rows.next().map_err(|e| s.err(e))? {
            let deleted: bool = row.get(3).map_err(|e| s.err(e))?;
            if deleted {
                continue;
            }
            if req.limit > 0 && kvs.len() == req.limit {
                more = true;
                break;
            }
            kvs.push(KeyValue {
                key: key_string(s, row.get(0).map_err(|e| s.err(e))?)?,
                mod_revision: row.get(1).map_err(|e| s.err(e))?,
                create_revision: row.get(2).map_err(|e| s.err(e))?,
                value: row.get(4).map_err(|e| s.err(e))?,
            });
        }
    }
    Ok(RangeResponse { kvs, revision: at, more })
}

/// The live keys of a range at its revision, counted on the `(key, rev)` index without reading
/// any value.
fn read_count(s: &Shared, conn: &mut Connection, req: &RangeRequest) -> Result<i64> {
    let current = s.current_rev.load(Ordering::SeqCst);
    let tx = conn.transaction().map_err(|e| s.err(e))?;
    let at = read_revision(s, &tx, req, current)?;
    let (lo, hi) = range_bounds(&req.prefix, req.start_after.as_deref());
    if lo >= hi {
        return Ok(0);
    }
    let mut stmt = tx
        .prepare_cached(
            "SELECT count(*) FROM kv AS a INDEXED BY kv_key_rev
             WHERE key >= ?1 AND key < ?2 AND rev <= ?3 AND NOT deleted
               AND NOT EXISTS (SELECT 1 FROM kv AS b WHERE b.key = a.key AND b.rev > a.rev AND b.rev <= ?3)",
        )
        .map_err(|e| s.err(e))?;
    stmt.query_row(params![lo, hi, at], |r| r.get(0)).map_err(|e| s.err(e))
}

/// Reads history for a watcher: events under `prefix` with revisions in `(after, upto]`, at
/// most [`CATCH_UP_EVENTS`] / [`CATCH_UP_BYTES`] of them. Returns them and the revision the
/// watcher has caught up to.
fn read_events(
    s: &Shared,
    conn: &mut Connection,
    prefix: &str,
    after: Revision,
    upto: Revision,
) -> Result<(Vec<Event>, Revision)> {
    let tx = conn.transaction().map_err(|e| s.err(e))?;
    let compacted = meta(&tx, "compacted").map_err(|e| s.err(e))?;
    if after < compacted {
        return Err(Error::Compacted { requested: after, compacted });
    }
    let (lo, hi) = range_bounds(prefix, None);
    let mut events = Vec::new();
    let mut bytes = 0;
    let mut through = upto;
    {
        // Scan by revision (the rowid), not by key: the window is what is needed.
        let mut stmt = tx
            .prepare_cached(
                "SELECT rev, key, create_rev, prev_rev, deleted, value FROM kv NOT INDEXED
                 WHERE rev > ?1 AND rev <= ?2 AND key >= ?3 AND key < ?4 ORDER BY rev LIMIT ?5",
            )
            .map_err(|e| s.err(e))?;
        let mut prev_stmt =
            tx.prepare_cached("SELECT create_rev, value FROM kv WHERE rev = ?1").map_err(|e| s.err(e))?;
        let mut rows = stmt.query(params![after, upto, lo, hi, CATCH_UP_EVENTS as i64]).map_err(|e| s.err(e))?;
        let mut n = 0;
        while let Some(row) = rows.next().map_err(|e| s.err(e))? {
            n += 1;
            let rev: Revision = row.get(0).map_err(|e| s.err(e))?;
            let key = key_string(s, row.get(1).map_err(|e| s.err(e))?)?;
            let create_rev: Revision = row.get(2).map_err(|e| s.err(e))?;
            let prev_rev: Revision = row.get(3).map_err(|e| s.err(e))?;
            let deleted: bool = row.get(4).map_err(|e| s.err(e))?;
            let value: Vec<u8> = row.get(5).map_err(|e| s.err(e))?;
            let prev_kv = if prev_rev > 0 {
                let (prev_create, prev_value): (Revision, Vec<u8>) =
                    prev_stmt.query_row([prev_rev], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| {
                        Error::Internal(format!(
                            "sqlite {}: history row {prev_rev} (the value before revision {rev}) is missing: {e}",
                            s.path.display()
                        ))
                    })?;
                bytes += prev_value.len();
                Some(KeyValue {
                    key: key.clone(),
                    value: prev_value,
                    create_revision: prev_create,
                    mod_revision: prev_rev,
                })
            } else {
                None
            };
            bytes += value.len() + key.len();
            events.push(Event {
                kind: if deleted { EventType::Delete } else { EventType::Put },
                kv: KeyValue { key, value, create_revision: create_rev, mod_revision: rev },
                prev_kv,
            });
            if bytes >= CATCH_UP_BYTES {
                break;
            }
        }
        if n == CATCH_UP_EVENTS || bytes >= CATCH_UP_BYTES {
            through = events.last().map_or(upto, |e| e.kv.mod_revision);
        }
    }
    Ok((events, through))
}

// ---------------------------------------------------------------------------------------------
// Watch tasks

struct WatchTask {
    id: u64,
    prefix: String,
    /// Every matching event up to this revision has been delivered.
    after: Revision,
    tx: mpsc::Sender<Result<WatchResponse>>,
    notify: Arc<Notify>,
}

/// Drives one watch: catches up from history while unsynced, then waits as a synced watcher
/// (sending bookmarks when idle) until demoted, cancelled or closed.
async fn watch_task(shared: Arc<Shared>, mut w: WatchTask, mut synced: bool) {
    let period = shared.progress_interval;
    loop {
        if !synced {
            loop {
                match shared.hub.try_register(w.id, &w.prefix, &w.tx, w.after, &w.notify) {
                    Register::Synced => break,
                    Register::Closed => return,
                    Register::Behind(upto) => {
                        let (s, prefix, after) = (shared.clone(), w.prefix.clone(), w.after);
                        let result =
                            blocking_read(&shared, move || s.with_reader(|c| read_events(&s, c, &prefix, after, upto)))
                                .await;
                        match result {
                            Ok((events, through)) => {
                                if !events.is_empty() && w.tx.send(Ok(WatchResponse::Events(events))).await.is_err() {
                                    return;
                                }
                                w.after = through;
                            }
                            Err(e) => {
                                if !shared.hub.is_closed() {
                                    let _ = w.tx.send(Err(e)).await;
                                }
                                return;
                            }
                        }
                    }
                }
            }
        }
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let status = tokio::select! {
                _ = w.notify.notified() => shared.hub.status(w.id),
                _ = w.tx.closed() => {
                    shared.hub.remove(w.id);
                    return;
                }
                _ = ticker.tick() => shared.hub.progress(w.id),
            };
            match status {
                Status::Synced => {}
                Status::Demoted(after) => {
                    w.after = after;
                    synced = false;
                    break;
                }
                Status::Gone => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn opts() -> Options {
        Options { progress_interval: Duration::from_millis(100), compaction_interval: None }
    }

    fn count_rows(path: &Path) -> i64 {
        let conn = Connection::open(path).expect("open");
        conn.query_row("SELECT COUNT(*) FROM kv", [], |r| r.get(0)).expect("count")
    }

    async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Builds a bare writer over a new database, without its thread, to drive batches by hand.
    fn bare_writer(path: &Path) -> Writer {
        bare_writer_with(path, WalRestart::default())
    }

    fn bare_writer_with(path: &Path, wal_restart: WalRestart) -> Writer {
        schema::prepare(path, Create::IfMissing).expect("create");
        let mut shared = bare_shared(path);
        if let Some(s) = Arc::get_mut(&mut shared) {
            s.wal_restart = wal_restart;
        }
        Writer::load(schema::open_connection(path, true).expect("conn"), path, shared, None).expect("load")
    }

    fn bare_shared(path: &Path) -> Arc<Shared> {
        let wal_restart = WalRestart::default();
        Arc::new(Shared {
            path: path.to_path_buf(),
            current_rev: AtomicI64::new(0),
            compacted_rev: AtomicI64::new(0),
            hub: Hub::new(0),
            stats: Stats::default(),
            syncing: AtomicBool::new(false),
            sync_failed: AtomicBool::new(false),
            restart_requested: AtomicBool::new(false),
            restart_forced: AtomicBool::new(false),
            wal_restart,
            queued_writes: AtomicUsize::new(0),
            readers: Mutex::new(Vec::new()),
            readers_closed: AtomicBool::new(false),
            read_permits: tokio::sync::Semaphore::new(MAX_READERS),
            progress_interval: Duration::from_secs(1),
        })
    }

    type Reply = oneshot::Receiver<Result<WriteOutcome>>;

    type Queued = (WriteOp, oneshot::Sender<Result<WriteOutcome>>);

    fn batch(ops: Vec<WriteOp>) -> (Vec<Queued>, Vec<Reply>) {
        ops.into_iter()
            .map(|op| {
                let (tx, rx) = oneshot::channel();
                ((op, tx), rx)
            })
            .unzip()
    }

    fn put(key: &str, value: &str) -> WriteOp {
        WriteOp::Create { key: key.into(), value: value.as_bytes().to_vec() }
    }

    fn upd(key: &str, value: &str, expected: Revision) -> WriteOp {
        WriteOp::Update { key: key.into(), value: value.as_bytes().to_vec(), expected }
    }

    #[test]
    fn a_failed_compare_and_swap_inside_a_batch_fails_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let mut w = bare_writer(&path);
        let (reqs, mut replies) = batch(vec![
            put("/a", "1"),
            upd("/a", "2", 2),  // sees the create above (revision 2)
            upd("/a", "x", 2),  // stale now: conflict
            put("/a", "again"), // exists
            upd("/b", "x", 1),  // missing
            WriteOp::Delete { key: "/a".into(), expected: Some(3) },
            put("/a", "reborn"), // allowed again after the delete
        ]);
        w.commit_batch(reqs);
        let mut got: Vec<Result<WriteOutcome>> = replies.iter_mut().map(|r| r.try_recv().expect("answered")).collect();
        assert_eq!(got.remove(0).expect("create"), WriteOutcome::Put(2));
        assert_eq!(got.remove(0).expect("update"), WriteOutcome::Put(3));
        assert!(matches!(got.remove(0), Err(Error::Conflict { expected: 2, actual: 3, .. })));
        assert!(matches!(got.remove(0), Err(Error::AlreadyExists { .. })));
        assert!(matches!(got.remove(0), Err(Error::NotFound { .. })));
        match got.remove(0).expect("delete") {
            WriteOutcome::Deleted(4, kv) => {
                assert_eq!((kv.value, kv.mod_revision, kv.create_revision), (b"2".to_vec(), 3, 2))
            }
            other => panic!("delete: {other:?}"),
        }
        assert_eq!(got.remove(0).expect("re-create"), WriteOutcome::Put(5));
        assert_eq!(w.current(), 5);
        assert_eq!(w.shared.stats.batches.load(Ordering::Relaxed), 1, "one transaction for the whole batch");
        assert_eq!(count_rows(&path), 4, "one history row per accepted write");
    }

    #[test]
    fn the_index_is_rebuilt_from_history_on_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        {
            let mut w = bare_writer(&path);
            let (reqs, _r) = batch(vec![
                put("/a", "1"),
                put("/b", "1"),
                upd("/a", "2", 2),
                WriteOp::Delete { key: "/b".into(), expected: None },
            ]);
            w.commit_batch(reqs);
        }
        let w = bare_writer(&path);
        assert_eq!(w.current(), 5);
        let index: HashMap<_, _> = w.index.iter().map(|(k, m)| (k.clone(), (m.create_rev, m.mod_rev))).collect();
        assert_eq!(index, HashMap::from([("/a".to_string(), (2, 4))]));
    }

    #[test]
    fn chunked_compaction_keeps_the_snapshot_at_the_compacted_revision_after_every_chunk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let mut w = bare_writer(&path);
        // 8 keys, each rewritten several times, some deleted and re-created.
        let mut ops = Vec::new();
        for k in 0..8 {
            ops.push(put(&format!("/k{k}"), "0"));
        }
        w.commit_batch(batch(ops).0);
        let mut mods: Vec<Revision> = (2..10).collect();
        for round in 1..5 {
            let mut ops = Vec::new();
            for (k, m) in mods.iter().enumerate() {
                ops.push(upd(&format!("/k{k}"), &format!("{round}"), *m));
            }
            let (reqs, mut replies) = batch(ops);
            w.commit_batch(reqs);
            for (k, r) in replies.iter_mut().enumerate() {
                if let Ok(Ok(WriteOutcome::Put(rev))) = r.try_recv() {
                    mods[k] = rev;
                }
            }
        }
        let (reqs, _r) = batch(vec![
            WriteOp::Delete { key: "/k0".into(), expected: None },
            WriteOp::Delete { key: "/k1".into(), expected: None },
            put("/k1", "reborn"),
        ]);
        w.commit_batch(reqs);
        let c = w.current();
        let (reqs, _r) =
            batch(vec![upd("/k2", "after", mods[2]), WriteOp::Delete { key: "/k3".into(), expected: None }]);
        w.commit_batch(reqs);

        let snapshot = |w: &Writer| -> Vec<(String, Vec<u8>, Revision, Revision)> {
            let mut conn = schema::open_connection(&path, false).expect("reader");
            let resp = read_range(
                &w.shared,
                &mut conn,
                &RangeRequest { prefix: "/".into(), revision: c, ..Default::default() },
            )
            .expect("range at C");
            resp.kvs.into_iter().map(|kv| (kv.key, kv.value, kv.create_revision, kv.mod_revision)).collect()
        };
        let before = snapshot(&w);
        let rows_before = count_rows(&path);
        w.start_compaction(c).expect("start compaction");
        let mut chunks = 0;
        while w.compact_cursor < w.compacted {
            w.compact_chunk(3).expect("chunk");
            chunks += 1;
            assert_eq!(snapshot(&w), before, "snapshot at C after chunk {chunks}");
        }
        assert!(chunks > 5, "small chunks: the compaction must have taken many steps");
        // Left: the 7 live keys' values at C (k0 was deleted, k1 re-created), plus the two
        // writes after C. Superseded rows and tombstones at or below C are gone.
        assert_eq!(count_rows(&path), 7 + 2, "rows before compaction: {rows_before}");
        // The writes after C still have their previous values for watchers.
        let mut conn = schema::open_connection(&path, false).expect("reader");
        let (events, _) = read_events(&w.shared, &mut conn, "/", c, w.current()).expect("events after C");
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].prev_kv.as_ref().map(|p| p.value.clone()), Some(b"4".to_vec()));
        assert!(matches!(read_events(&w.shared, &mut conn, "/", c - 1, w.current()), Err(Error::Compacted { .. })));
    }

    #[test]
    fn compaction_over_rows_read_ahead_keeps_the_snapshot_and_removes_what_the_inline_one_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let mut w = bare_writer(&path);
        let (request, requests) = std::sync::mpsc::sync_channel(1);
        let (answers, rows) = std::sync::mpsc::channel();
        w.set_compaction_reader(CompactionReaderLink { request, rows });
        let conn = schema::open_connection(&path, false).expect("compaction reader connection");
        let reader = std::thread::spawn(move || compaction::compaction_read_loop(conn, requests, answers));
        // /a: created then updated 5 times; /b: created, deleted, re-created; /c: created then
        // deleted; then two writes after the compacted revision.
        let (reqs, _r) = batch(vec![put("/a", "0"), put("/b", "0"), put("/c", "0")]);
        w.commit_batch(reqs);
        for i in 1..6 {
            let a = w.index["/a"].mod_rev;
            w.commit_batch(batch(vec![upd("/a", &i.to_string(), a)]).0);
        }
        let (reqs, _r) = batch(vec![
            WriteOp::Delete { key: "/b".into(), expected: None },
            put("/b", "reborn"),
            WriteOp::Delete { key: "/c".into(), expected: None },
        ]);
        w.commit_batch(reqs);
        let c = w.current();
        let a = w.index["/a"].mod_rev;
        w.commit_batch(batch(vec![upd("/a", "after", a), put("/d", "after")]).0);
        let snapshot = |w: &Writer| -> Vec<(String, Vec<u8>, Revision, Revision)> {
            let mut conn = schema::open_connection(&path, false).expect("reader");
            let request = RangeRequest { prefix: "/".into(), revision: c, ..Default::default() };
            let resp = read_range(&w.shared, &mut conn, &request).expect("range at C");
            resp.kvs.into_iter().map(|kv| (kv.key, kv.value, kv.create_revision, kv.mod_revision)).collect()
        };
        let before = snapshot(&w);
        w.start_compaction(c).expect("start compaction");
        // A queued write ends every step after its first row: many steps over one read-ahead.
        w.shared.queued_writes.store(1, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut steps = 0;
        while w.compact_cursor < w.compacted {
            assert!(std::time::Instant::now() < deadline, "compaction stuck at {} of {c}", w.compact_cursor);
            let before_step = w.compact_cursor;
            w.compact_prefetched().expect("step");
            if w.compact_cursor == before_step {
                // The reader has not answered yet.
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            steps += 1;
            assert_eq!(snapshot(&w), before, "snapshot at C after step {steps}");
        }
        assert!(steps > 3, "one row per step: {steps} steps");
        // Left: /a and /b at C, plus the two writes after C.
        assert_eq!(count_rows(&path), 2 + 2);
        drop(w);
        reader.join().expect("the reader stops with the writer");
    }

    #[test]
    fn a_compaction_step_stops_after_one_row_when_a_write_is_queued() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let mut w = bare_writer(&path);
        // A create at revision 2 (an empty store is at 1), then 19 updates, each superseding
        // the row before.
        let mut ops = vec![put("/a", "0")];
        for i in 1..20 {
            ops.push(upd("/a", &i.to_string(), i + 1));
        }
        w.commit_batch(batch(ops).0);
        assert_eq!(w.current(), 21);
        w.start_compaction(21).expect("compact");
        w.shared.queued_writes.store(1, Ordering::SeqCst);
        w.compact_chunk(1024).expect("chunk");
        assert_eq!(w.compact_cursor, 2, "a waiting write ends the step after its first row");
        w.shared.queued_writes.store(0, Ordering::SeqCst);
        while w.compact_cursor < w.compacted {
            w.compact_chunk(1024).expect("chunk");
        }
        assert_eq!(count_rows(&path), 1, "only the live value at the compacted revision is left");
    }

    #[test]
    fn compaction_of_a_trailing_delete_keeps_the_revision() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        {
            let mut w = bare_writer(&path);
            w.commit_batch(batch(vec![put("/a", "1"), WriteOp::Delete { key: "/a".into(), expected: None }]).0);
            w.start_compaction(3).expect("compact");
            while w.compact_cursor < w.compacted {
                w.compact_chunk(10).expect("chunk");
            }
        }
        assert_eq!(count_rows(&path), 0, "everything was history");
        let w = bare_writer(&path);
        assert_eq!(w.current(), 3, "the revision does not go back when its rows are compacted");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn interrupted_compaction_resumes_after_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        {
            let mut w = bare_writer(&path);
            let mut rev = 0;
            w.commit_batch(batch(vec![put("/a", "0")]).0);
            rev += 2;
            for i in 1..100 {
                w.commit_batch(batch(vec![upd("/a", &format!("{i}"), rev)]).0);
                rev += 1;
            }
            w.start_compaction(rev).expect("compact");
            w.compact_chunk(10).expect("one chunk, then the process stops");
        }
        assert!(count_rows(&path) > 1);
        let store = SqliteBackend::open(&path, opts()).expect("reopen");
        assert_eq!(store.compacted_revision().await.expect("compacted"), 101);
        wait_until("the compaction to finish", || store.stats().compacted_through >= 101).await;
        drop(store);
        assert_eq!(count_rows(&path), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_watcher_is_demoted_and_catches_up_from_history_without_loss() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteBackend::open(&dir.path().join("db"), opts()).expect("open");
        let mut w = store.watch("/w/", 1).await.expect("watch");
        // Every write is its own batch, so each is one message: far more than the channel holds.
        let n = WATCH_CHANNEL_CAPACITY * 3;
        let mut revs = Vec::new();
        for i in 0..n {
            revs.push(store.create(&format!("/w/{i}"), vec![1; 100]).await.expect("create"));
        }
        let mut got = Vec::new();
        while got.len() < n {
            match tokio::time::timeout(Duration::from_secs(20), w.next()).await.expect("an event in time") {
                Some(Ok(WatchResponse::Events(evs))) => got.extend(evs.into_iter().map(|e| e.kv.mod_revision)),
                Some(Ok(WatchResponse::Progress { .. })) => {}
                other => panic!("watch ended: {other:?}"),
            }
        }
        assert_eq!(got, revs);
        // And it is live again afterwards.
        let r = store.create("/w/live", vec![]).await.expect("create");
        loop {
            match tokio::time::timeout(Duration::from_secs(20), w.next()).await.expect("in time") {
                Some(Ok(WatchResponse::Events(evs))) => {
                    assert_eq!(evs[0].kv.mod_revision, r);
                    break;
                }
                Some(Ok(WatchResponse::Progress { .. })) => {}
                other => panic!("watch ended: {other:?}"),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropping_the_backend_ends_watch_streams() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteBackend::open(&dir.path().join("db"), opts()).expect("open");
        let mut w = store.watch("/", 0).await.expect("watch");
        drop(store);
        loop {
            match tokio::time::timeout(Duration::from_secs(20), w.next()).await.expect("the stream ends in time") {
                None => break,
                Some(Ok(WatchResponse::Progress { .. })) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_compaction_follows_the_revision_seen_at_the_previous_tick() {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = Options { compaction_interval: Some(Duration::from_millis(50)), ..opts() };
        let store = SqliteBackend::open(&dir.path().join("db"), o).expect("open");
        let mut rev = store.create("/a", b"0".to_vec()).await.expect("create");
        let first = rev;
        for i in 0..20 {
            rev = store.update("/a", format!("{i}").into_bytes(), rev).await.expect("update");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let compacted = store.compacted_revision().await.expect("compacted");
            assert!(compacted <= store.current_revision().await.expect("current"));
            if compacted >= rev {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "background compaction never reached {rev}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(matches!(store.watch("/", first).await, Err(Error::Compacted { .. })));
        assert_eq!(store.get("/a").await.expect("get").expect("a").mod_revision, rev);
    }

    #[test]
    fn the_writer_connection_is_in_wal_mode_with_full_sync() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let w = bare_writer(&path);
        let mode: String = w.conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).expect("journal_mode");
        let sync: i64 = w.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).expect("synchronous");
        assert_eq!((mode.as_str(), sync), ("wal", 2));
        let page_size: i64 = w.conn.query_row("PRAGMA page_size", [], |r| r.get(0)).expect("page_size");
        assert_eq!(page_size, schema::PAGE_SIZE);
    }

    /// A bare writer linked to a checkpointer thread running [`checkpointer::checkpoint_loop`], which
    /// ends when the writer is dropped.
    fn writer_with_checkpointer(path: &Path, restart: WalRestart) -> (Writer, std::thread::JoinHandle<()>) {
        let mut w = bare_writer_with(path, restart);
        let (wake, wake_rx) = std::sync::mpsc::sync_channel(1);
        let (done_tx, done) = std::sync::mpsc::channel();
        w.set_checkpointer(CheckpointerLink { wake, done });
        let conn = schema::open_connection(path, true).expect("checkpointer connection");
        let shared = w.shared.clone();
        (w, std::thread::spawn(move || checkpointer::checkpoint_loop(conn, wake_rx, done_tx, shared)))
    }

    fn wal_frames(path: &Path) -> i64 {
        let conn = Connection::open(path).expect("open");
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1)).expect("checkpoint")
    }

    #[test]
    fn a_wal_growing_under_back_to_back_writes_is_started_over_in_a_restart_window() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        // A 256 KiB restart length, and a window long enough for any disk: this test is about
        // the mechanism, not its timing.
        let restart = WalRestart { bytes: 256 * 1024, window: Duration::from_secs(60), ..Default::default() };
        let (mut w, checkpointer) = writer_with_checkpointer(&path, restart);
        // Batches back to back, as the writer thread runs them under load: the WAL is never
        // fully copied between two commits by itself.
        let value = "v".repeat(2048);
        let mut longest = 0;
        for round in 0..20_000 {
            let ops = (0..16).map(|i| put(&format!("/k/{round}/{i}"), &value)).collect();
            w.commit_batch(batch(ops).0);
            w.maybe_open_restart_window();
            let s = w.shared.stats.wal_restarts.load(Ordering::Relaxed);
            longest = longest.max(w.shared.stats.longest_wal_bytes.load(Ordering::Relaxed));
            if s >= 2 {
                break;
            }
        }
        let stats = &w.shared.stats;
        assert!(stats.restart_windows_caught_up.load(Ordering::Relaxed) >= 1, "a window let the checkpoint finish");
        assert!(stats.wal_restarts.load(Ordering::Relaxed) >= 2, "the WAL started over (longest {longest} bytes)");
        let frames = wal_frames(&path);
        drop(w);
        checkpointer.join().expect("the checkpointer stops with the writer");
        assert!(
            frames * 2048 < 64 * 1024 * 1024,
            "the WAL stays far below the old forced-checkpoint size ({frames} frames)"
        );
    }

    #[test]
    fn a_committed_batch_is_neither_visible_nor_answered_before_the_syncer_fsyncs_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let mut w = bare_writer(&path);
        let (tx, rx) = std::sync::mpsc::channel();
        w.set_syncer(tx).expect("syncer");
        let sync: i64 = w.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).expect("synchronous");
        assert_eq!(sync, 1, "with a syncer, a COMMIT only writes the WAL (NORMAL)");
        let (reqs, mut replies) = batch(vec![put("/a", "1")]);
        w.commit_batch(reqs);
        assert_eq!(w.current(), 2, "committed to the WAL");
        let mut conn = schema::open_connection(&path, false).expect("reader");
        assert_eq!(read_get(&w.shared, &mut conn, "/a".into()).expect("get"), None, "invisible before its fsync");
        let listed = read_range(&w.shared, &mut conn, &RangeRequest { prefix: "/".into(), ..Default::default() });
        assert!(listed.expect("range").kvs.is_empty(), "ranges do not see it either");
        assert!(replies[0].try_recv().is_err(), "not answered before its fsync");
        assert_eq!(w.shared.current_rev.load(Ordering::SeqCst), 1);
        // The syncer takes the batch, fsyncs the WAL, then publishes and answers it.
        let shared = w.shared.clone();
        let wal = std::fs::File::open(schema::wal_path(&path)).expect("wal");
        let sync_conn = schema::open_connection(&path, false).expect("syncer connection");
        let syncer = std::thread::spawn(move || syncer::sync_loop(wal, sync_conn, rx, shared));
        drop(w);
        syncer.join().expect("the syncer ends after the writer");
        assert!(matches!(replies[0].try_recv(), Ok(Ok(WriteOutcome::Put(2)))));
        let shared = bare_shared(&path);
        shared.current_rev.store(2, Ordering::SeqCst);
        let got = read_get(&shared, &mut conn, "/a".into()).expect("get").expect("visible after its fsync");
        assert_eq!(got.mod_revision, 2);
    }

    #[test]
    fn a_wal_past_its_limit_starts_over_even_when_short_windows_are_too_short_for_the_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        // Short windows of zero length: no checkpoint ever finishes in one (a disk whose fsyncs
        // take longer than the window), so only the window for a WAL past its limit, which
        // waits for the checkpoint, can let the WAL start over.
        let restart = WalRestart {
            bytes: 256 * 1024,
            window: Duration::ZERO,
            limit_bytes: 512 * 1024,
            limit_window: Duration::from_secs(60),
        };
        let (mut w, checkpointer) = writer_with_checkpointer(&path, restart);
        // Batches back to back, up to about 64 MiB of values: without the limit the WAL grows
        // with them.
        let value = "v".repeat(2048);
        let mut longest_on_disk = 0;
        for round in 0..2048 {
            let ops = (0..16).map(|i| put(&format!("/k/{round}/{i}"), &value)).collect();
            w.commit_batch(batch(ops).0);
            w.maybe_open_restart_window();
            let wal = std::fs::metadata(schema::wal_path(&path)).map(|m| m.len()).unwrap_or(0);
            longest_on_disk = longest_on_disk.max(wal);
            if w.shared.stats.wal_restarts.load(Ordering::Relaxed) >= 3 {
                break;
            }
        }
        let stats = &w.shared.stats;
        let longest = stats.longest_wal_bytes.load(Ordering::Relaxed);
        assert!(
            stats.wal_restarts.load(Ordering::Relaxed) >= 3,
            "the WAL started over again and again (longest {longest} bytes, {longest_on_disk} on disk)"
        );
        assert!(longest < 16 * 1024 * 1024, "the WAL stayed near its limit (longest {longest} bytes)");
        assert!(stats.restart_windows_forced.load(Ordering::Relaxed) >= 1, "a window for the limit was opened");
        drop(w);
        checkpointer.join().expect("the checkpointer stops with the writer");
    }

    #[test]
    fn a_restart_window_ends_when_the_checkpointer_does_not_answer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let mut w =
            bare_writer_with(&path, WalRestart { bytes: 1024, window: Duration::from_millis(1), ..Default::default() });
        // A checkpointer that never answers: the writer must not wait for it beyond its window.
        let (wake, _wake_rx) = std::sync::mpsc::sync_channel(1);
        let (_done_tx, done) = std::sync::mpsc::channel();
        w.set_checkpointer(CheckpointerLink { wake, done });
        w.shared.restart_requested.store(true, Ordering::SeqCst);
        w.maybe_open_restart_window();
        let stats = &w.shared.stats;
        assert_eq!(stats.restart_windows.load(Ordering::Relaxed), 1);
        assert_eq!(stats.restart_windows_caught_up.load(Ordering::Relaxed), 0);
        assert!(!w.shared.restart_requested.load(Ordering::SeqCst), "the request was served");
        // Writes go on afterwards.
        let (reqs, mut replies) = batch(vec![put("/after", "1")]);
        w.commit_batch(reqs);
        assert!(matches!(replies[0].try_recv(), Ok(Ok(WriteOutcome::Put(_)))));
    }

    #[test]
    fn range_bounds_start_strictly_after_the_continue_key() {
        assert_eq!(range_bounds("/p/", Some("/p/a")), (b"/p/a\0".to_vec(), b"/p0".to_vec()));
        assert_eq!(range_bounds("/p/", Some("/a")), (b"/p/".to_vec(), b"/p0".to_vec()));
        assert_eq!(range_bounds("", None), (Vec::new(), vec![0xff]));
    }

    fn corrupt_reason(path: &Path, create: bool) -> String {
        let result =
            if create { SqliteBackend::open(path, opts()) } else { SqliteBackend::open_existing(path, opts()) };
        match result {
            Err(Error::Corrupt { path: p, reason }) => {
                assert_eq!(p, path.display().to_string(), "the error names the file");
                reason
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn files_that_are_not_skiff_databases_are_refused_and_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let garbage = dir.path().join("garbage");
        std::fs::write(&garbage, vec![0xAB; 8192]).expect("write");
        assert!(corrupt_reason(&garbage, true).contains("not an SQLite database"));
        assert_eq!(std::fs::read(&garbage).expect("read"), vec![0xAB; 8192], "never replaced");

        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").expect("write");
        assert!(corrupt_reason(&empty, true).contains("empty"));

        let foreign = dir.path().join("foreign");
        Connection::open(&foreign).expect("open").execute_batch("CREATE TABLE t (x);").expect("create");
        assert!(corrupt_reason(&foreign, true).contains("not a skiff store"));

        let schemaless = dir.path().join("schemaless");
        {
            let c = Connection::open(&schemaless).expect("open");
            c.pragma_update(None, "application_id", schema::APPLICATION_ID).expect("app id");
            c.execute_batch("CREATE TABLE t (x);").expect("create");
        }
        assert!(corrupt_reason(&schemaless, true).contains("without its schema"));

        // A valid store whose pages were overwritten in the middle.
        let damaged = dir.path().join("damaged");
        drop(SqliteBackend::open(&damaged, opts()).expect("create"));
        let mut bytes = std::fs::read(&damaged).expect("read");
        for b in bytes.iter_mut().skip(100) {
            *b = 0x5A;
        }
        std::fs::write(&damaged, &bytes).expect("write");
        corrupt_reason(&damaged, true);
    }

    #[test]
    fn a_missing_file_is_an_error_unless_creating_is_allowed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        assert!(corrupt_reason(&path, false).contains("does not exist"));
        assert!(!path.exists());
        drop(SqliteBackend::open(&path, opts()).expect("create"));
        drop(SqliteBackend::open_existing(&path, opts()).expect("reopen"));
        // The file vanished but its log did not: data would be lost by starting empty.
        std::fs::write(schema::wal_path(&path), b"log").expect("write wal");
        std::fs::remove_file(&path).expect("remove");
        assert!(corrupt_reason(&path, true).contains("write-ahead log"));
        let nowhere = dir.path().join("no/such/dir/db");
        assert!(corrupt_reason(&nowhere, true).contains("does not exist"));
    }

    #[test]
    fn a_database_is_owned_by_one_open_backend_at_a_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        let first = SqliteBackend::open(&path, opts()).expect("open");
        assert!(corrupt_reason(&path, true).contains("in use"));
        drop(first);
        drop(SqliteBackend::open(&path, opts()).expect("open after the first is dropped"));
    }
}
