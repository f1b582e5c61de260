//! The writer thread: group commit, compare-and-swap against an in-memory index, compaction in
//! short chunks, and checkpoint requests.
//!
//! Every write goes through one thread that owns the only writing connection. It takes all
//! requests waiting in its queue (up to [`MAX_BATCH_OPS`] / [`MAX_BATCH_BYTES`]), validates each
//! in order against the index of live keys (`key → (create_revision, mod_revision)`, updated as
//! the batch proceeds so later writes in a batch see earlier ones), inserts one history row per
//! accepted write, and commits the batch as one transaction. With the syncer thread attached
//! (always, except in unit tests) the commit only writes the WAL and the syncer fsyncs it for
//! every batch committed meanwhile (see [`sync_loop`]); only then are the revisions made visible,
//! published to watchers and the callers answered. A rejected write (conflict,
//! exists, not found) is answered with its error and does not affect the rest of the batch; a
//! database failure fails the whole batch, rolls the index back and reloads it from disk.
//!
//! A batch waits up to [`GATHER_WAIT`] for more writes only when the previous batch was large,
//! this one is still much smaller (the writers just answered are sending their next writes)
//! and the syncer is busy with an fsync (committing sooner would not make it durable sooner);
//! a lone writer never waits.
//!
//! Compaction runs on the same thread between batches in transactions bounded in time
//! ([`COMPACTION_CHUNK_BUDGET`] of deletes, by revision, the table's primary key), each followed
//! by a pause at least as long in which writes go first, so a write waits at most one short
//! chunk and SQLite never reports "database is locked".

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::Shared;
use super::hub::PendingEvent;
use super::schema::internal;
use crate::{Error, EventType, KeyValue, Result, Revision};

/// At most this many writes go into one transaction.
pub(super) const MAX_BATCH_OPS: usize = 4096;
/// At most about this many value bytes go into one transaction.
pub(super) const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;
/// A batch this large or larger means many concurrent writers: the next batch waits up to
/// [`GATHER_WAIT`] for about as many writes before it commits.
const GATHER_MIN_BATCH: usize = 4;
/// How long a batch waits for the writers answered by the previous commit to send their next
/// writes: far less than one fsync, which it saves.
const GATHER_WAIT: Duration = Duration::from_micros(500);
/// At most this many history rows are examined by one compaction transaction.
pub(super) const COMPACTION_CHUNK: usize = 1024;
/// History rows the first compaction transaction reads; later ones adapt (up to
/// [`COMPACTION_CHUNK`]) so that reading and deleting a chunk takes about
/// [`COMPACTION_CHUNK_BUDGET`]: reading 1,024 rows of 2 KiB values alone can take longer than
/// the budget when their pages are not cached.
const COMPACTION_FIRST_CHUNK: usize = 64;
/// How long one compaction (or vacuum) transaction may spend deleting before it commits: with
/// its commit, about the longest a write waits for compaction.
const COMPACTION_CHUNK_BUDGET: Duration = Duration::from_millis(1);
/// After a compaction or vacuum step that took `t`, the writer leaves the database to writes
/// for [`BACKGROUND_PAUSE_FACTOR`]` × t` (within these bounds) before the next step, whether
/// or not writes are waiting: compaction then takes a fifth of the writer's time at most, and
/// each durable commit flushes at most one step's pages besides its own.
const BACKGROUND_PAUSE_MIN: Duration = Duration::from_millis(1);
const BACKGROUND_PAUSE_MAX: Duration = Duration::from_millis(20);
/// See [`BACKGROUND_PAUSE_MIN`].
const BACKGROUND_PAUSE_FACTOR: u32 = 4;
/// How often the checkpointer thread copies new WAL frames into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// WAL length at which the checkpointer asks for a WAL restart. SQLite starts the WAL over only
/// when a write transaction begins while every frame of it is already copied into the database
/// file, which never happens while the writer commits back to back: the checkpointer then asks
/// the writer for a quiet window of at most [`WAL_RESTART_WINDOW`] (see
/// [`Writer::maybe_open_restart_window`]). The writer never checkpoints itself.
pub(super) const WAL_RESTART_BYTES: i64 = 32 * 1024 * 1024;
/// The longest the writer holds its next batch back so that the checkpointer can copy the last
/// WAL frames: the whole stall a WAL restart may cause. When the checkpoint does not finish in
/// time the writer goes on and the WAL keeps growing until the next window, the next pause
/// in writes, or [`WAL_LIMIT_BYTES`].
pub(super) const WAL_RESTART_WINDOW: Duration = Duration::from_millis(4);
/// WAL length beyond which a restart window waits for the checkpointer's answer up to
/// [`WAL_LIMIT_WINDOW`] instead of [`WAL_RESTART_WINDOW`]: the bound on the WAL's length. The
/// checkpoint in a window fsyncs the WAL and then the database file, which on a busy disk takes
/// 7-46 ms (measured in `skiff bench store` under load 4) rather than the 4 ms of a short
/// window: without this, the short windows never let a WAL written back to back start over
/// and it grew to 512 MiB in the bench. Such a window holds writes back (8-280 ms measured
/// under load) for one checkpoint of the last few frames, so the limit is a safety valve for
/// the disk far above what the bench reaches, not the common way the WAL starts over: writer
/// stalls of more than a few milliseconds are what issue 2 rules out first.
pub(super) const WAL_LIMIT_BYTES: i64 = 1024 * 1024 * 1024;
/// The longest a window for a WAL past [`WAL_LIMIT_BYTES`] holds the next batch back; when the
/// checkpoint takes even longer the writer goes on (and asks again after
/// [`WAL_RESTART_MIN_GAP`]).
pub(super) const WAL_LIMIT_WINDOW: Duration = Duration::from_secs(1);
/// The checkpointer asks for a restart window only after one of its own checkpoints copied at
/// most this many new frames (about 1 MiB of 2 KiB pages), so that the final one fits the
/// window: what is written meanwhile plus one fsync of the database file.
const RESTART_CATCH_UP_FRAMES: i64 = 512;
/// At most this many catch-up checkpoints in a row before asking for a window anyway (writes
/// may outrun them; a window that is too short only costs [`WAL_RESTART_WINDOW`]).
const MAX_CATCH_UP_CHECKPOINTS: u32 = 16;
/// How long a requested restart window waits for a moment in which no write is queued (with
/// few writers, the writer is idle while the syncer fsyncs their last batch: a window then
/// delays nobody unless a write arrives in it); after this it opens even with writes queued,
/// so that a saturated writer still lets the WAL start over.
pub(super) const WAL_RESTART_DEFER: Duration = Duration::from_millis(50);
/// At least this long between two restart windows: with a disk too slow for the window, the
/// writer loses at most a few per cent of its time to them.
const WAL_RESTART_MIN_GAP: Duration = Duration::from_millis(100);
/// While writes keep coming, the checkpointer waits until about this many bytes were written
/// since its last checkpoint: checkpointing every few batches copies the same hot pages (index
/// pages, the newest table page) into the database file again and again, doubling the disk
/// traffic of a write burst. When writes pause it checkpoints at once.
const CHECKPOINT_BYTES: u64 = 32 * 1024 * 1024;
/// Free pages kept for reuse after a compaction; beyond this the file is shrunk.
const KEEP_FREE_PAGES: i64 = 2048;
/// Pages returned to the file system per vacuum step at most (one step per writer loop
/// iteration); the step size adapts so that a step takes about [`COMPACTION_CHUNK_BUDGET`].
const VACUUM_STEP_PAGES: i64 = 128;

/// Commits at least this long are logged at debug level (where a write's latency goes).
const SLOW_COMMIT: Duration = Duration::from_millis(20);
/// Waits behind background work at least this long are logged at debug level.
const SLOW_BACKGROUND_WAIT: Duration = Duration::from_millis(5);

const INSERT: &str = "INSERT INTO kv (rev, key, create_rev, prev_rev, deleted, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const VALUE_AT: &str = "SELECT value FROM kv WHERE rev = ?1";

/// One write request.
#[derive(Debug)]
pub(super) enum WriteOp {
    Create { key: String, value: Vec<u8> },
    Update { key: String, value: Vec<u8>, expected: Revision },
    Delete { key: String, expected: Option<Revision> },
}

impl WriteOp {
    fn bytes(&self) -> usize {
        match self {
            WriteOp::Create { key, value } | WriteOp::Update { key, value, .. } => key.len() + value.len(),
            WriteOp::Delete { key, .. } => key.len(),
        }
    }
}

/// The result of an accepted write.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum WriteOutcome {
    Put(Revision),
    Deleted(Revision, KeyValue),
}

/// What the writer thread's queue carries.
pub(super) enum Request {
    /// `queued_at`: when the caller sent it, for the queue-wait figures of [`super::SqliteStats`].
    Write {
        op: WriteOp,
        reply: oneshot::Sender<Result<WriteOutcome>>,
        queued_at: Instant,
    },
    Compact {
        revision: Revision,
        reply: oneshot::Sender<Result<()>>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeyMeta {
    pub(super) create_rev: Revision,
    pub(super) mod_rev: Revision,
}

/// The writer's state. Created at open (loading the index), then moved onto its thread.
pub(super) struct Writer {
    pub(super) conn: Connection,
    path: PathBuf,
    pub(super) index: HashMap<String, KeyMeta>,
    /// The last committed revision.
    current: Revision,
    pub(super) compacted: Revision,
    pub(super) compact_cursor: Revision,
    pub(super) shared: Arc<Shared>,
    compaction_interval: Option<Duration>,
    /// The syncer thread, which fsyncs the WAL for committed batches and then publishes and
    /// answers them; `None` (tests driving a bare writer) commits with `synchronous=FULL` and
    /// answers inline. Dropped with the writer, which stops that thread after its last group.
    syncer: Option<std::sync::mpsc::Sender<Committed>>,
    /// The link to the checkpointer thread; dropped with the writer, which stops that thread.
    checkpointer: Option<CheckpointerLink>,
    /// The link to the compaction reader thread, which reads the history rows of the next
    /// compaction steps ahead of time; `None` (tests driving a bare writer) reads them inside
    /// each step's transaction ([`Writer::compact_chunk`]).
    compaction_reader: Option<CompactionReaderLink>,
    /// History rows read ahead by the compaction reader, in revision order: every row in
    /// `(compact_cursor, prefetched_through]`.
    prefetched: std::collections::VecDeque<CompactionRow>,
    /// See [`Writer::prefetched`]; at or below `compact_cursor` when nothing is read ahead.
    prefetched_through: Revision,
    /// The start (exclusive) of the range asked of the compaction reader and not answered yet.
    prefetch_outstanding: Option<Revision>,
    /// The number of the last WAL restart window opened.
    window_seq: u64,
    /// Since when the checkpointer's request for a restart window has been waiting for a
    /// moment with no write queued (see [`WAL_RESTART_DEFER`]).
    window_requested_at: Option<Instant>,
    /// A compaction finished: shrink the file, a step at a time.
    vacuum_pending: bool,
    /// Writes in the last committed batch.
    last_batch: usize,
    /// Pages per vacuum step, adapted to [`COMPACTION_CHUNK_BUDGET`].
    vacuum_pages: i64,
    /// No background step (compaction chunk, vacuum step) starts before this.
    background_not_before: Instant,
    /// History rows the next compaction transaction reads, adapted to [`COMPACTION_CHUNK_BUDGET`].
    compaction_rows: usize,
    /// Whether the current background step stops as soon as a write is queued (false when
    /// writes kept it waiting too long: it then stops only at its time budget).
    background_yields: bool,
    /// When the last background step (compaction, vacuum, WAL restart window) started and ended,
    /// until the next batch: writes queued meanwhile waited for it.
    last_background: Option<(Instant, Instant)>,
}

/// Reads `meta.name`.
pub(super) fn meta(conn: &Connection, name: &str) -> rusqlite::Result<Revision> {
    conn.prepare_cached("SELECT value FROM meta WHERE name = ?1")?.query_row([name], |r| r.get(0))
}

fn set_meta(conn: &Connection, name: &str, value: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE meta SET value = ?2 WHERE name = ?1")?.execute(params![name, value])?;
    Ok(())
}

/// The current revision as stored: the newest history row, or the compacted revision when
/// compaction removed a trailing tombstone, and at least 1 (an empty store, like etcd).
pub(super) fn stored_revision(conn: &Connection) -> rusqlite::Result<Revision> {
    let max: Option<Revision> = conn.prepare_cached("SELECT MAX(rev) FROM kv")?.query_row([], |r| r.get(0))?;
    Ok(max.unwrap_or(0).max(meta(conn, "compacted")?).max(1))
}

fn key_string(path: &Path, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes)
        .map_err(|_| Error::Internal(format!("sqlite {}: a stored key is not UTF-8", path.display())))
}

fn load_index(conn: &Connection, path: &Path) -> Result<HashMap<String, KeyMeta>> {
    // SQLite returns the other columns from the row holding MAX(rev) in each group.
    let mut stmt = conn
        .prepare("SELECT key, MAX(rev), create_rev, deleted FROM kv GROUP BY key")
        .map_err(|e| internal(path, e))?;
    let mut rows = stmt.query([]).map_err(|e| internal(path, e))?;
    let mut index = HashMap::new();
    while let Some(row) = rows.next().map_err(|e| internal(path, e))? {
        let deleted: bool = row.get(3).map_err(|e| internal(path, e))?;
        if deleted {
            continue;
        }
        let key = key_string(path, row.get(0).map_err(|e| internal(path, e))?)?;
        let mod_rev: Revision = row.get(1).map_err(|e| internal(path, e))?;
        let create_rev: Revision = row.get(2).map_err(|e| internal(path, e))?;
        index.insert(key, KeyMeta { create_rev, mod_rev });
    }
    Ok(index)
}

/// A write accepted into the current batch, or its rejection.
enum Applied {
    Done(WriteOutcome),
    Rejected(Error),
}

impl Writer {
    /// Loads the writer's state from the database. `conn` is the writer connection.
    pub(super) fn load(
        conn: Connection,
        path: &Path,
        shared: Arc<Shared>,
        compaction_interval: Option<Duration>,
    ) -> Result<Self> {
        let index = load_index(&conn, path)?;
        let current = stored_revision(&conn).map_err(|e| internal(path, e))?;
        let compacted = meta(&conn, "compacted").map_err(|e| internal(path, e))?;
        let compact_cursor = meta(&conn, "compact_cursor").map_err(|e| internal(path, e))?;
        // Count the open, which also creates the WAL file now, so its directory entry is synced
        // before any write is acknowledged.
        conn.execute("UPDATE meta SET value = value + 1 WHERE name = 'opens'", []).map_err(|e| internal(path, e))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::Internal(format!("cannot sync directory {}: {e}", dir.display())))?;
        }
        shared.current_rev.store(current, Ordering::SeqCst);
        shared.compacted_rev.store(compacted, Ordering::SeqCst);
        shared.stats.compact_cursor.store(compact_cursor, Ordering::SeqCst);
        Ok(Self {
            conn,
            path: path.to_path_buf(),
            index,
            current,
            compacted,
            compact_cursor,
            shared,
            compaction_interval,
            checkpointer: None,
            compaction_reader: None,
            prefetched: std::collections::VecDeque::new(),
            prefetched_through: 0,
            prefetch_outstanding: None,
            syncer: None,
            window_seq: 0,
            window_requested_at: None,
            vacuum_pending: false,
            last_batch: 0,
            vacuum_pages: 16,
            background_not_before: Instant::now(),
            compaction_rows: COMPACTION_FIRST_CHUNK,
            background_yields: true,
            last_background: None,
        })
    }

    /// The last committed revision.
    pub(super) fn current(&self) -> Revision {
        self.current
    }

    /// Hands durability to the syncer thread: from now on a `COMMIT` only writes the WAL
    /// (`synchronous=NORMAL`) and the syncer fsyncs it before anything is published or answered.
    pub(super) fn set_syncer(&mut self, tx: std::sync::mpsc::Sender<Committed>) -> Result<()> {
        self.conn.pragma_update(None, "synchronous", "NORMAL").map_err(|e| internal(&self.path, e))?;
        self.syncer = Some(tx);
        Ok(())
    }

    /// The `synchronous` setting write batches commit with.
    fn commit_sync(&self) -> &'static str {
        if self.syncer.is_some() { "NORMAL" } else { "FULL" }
    }

    /// The newest revision that is durable and published: what readers, watchers and
    /// compaction may see.
    fn durable(&self) -> Revision {
        self.shared.current_rev.load(Ordering::SeqCst)
    }

    pub(super) fn set_checkpointer(&mut self, link: CheckpointerLink) {
        self.checkpointer = Some(link);
    }

    /// Attaches the compaction reader thread (see [`compaction_read_loop`]).
    pub(super) fn set_compaction_reader(&mut self, link: CompactionReaderLink) {
        self.compaction_reader = Some(link);
    }

    /// The thread's main loop; returns when every request sender is gone.
    pub(super) fn run(mut self, rx: Receiver<Request>) {
        let mut next_tick = self.compaction_interval.map(|i| Instant::now() + i);
        // kube-apiserver's policy: at each tick, compact to the revision seen at the previous
        // tick, so at least one interval of history is always kept.
        let mut seen_at_last_tick: Option<Revision> = None;
        loop {
            let background_work = self.compact_cursor < self.compacted || self.vacuum_pending;
            let first = if background_work {
                // Pace background work: writes that arrive meanwhile go first.
                match rx.recv_timeout(self.background_not_before.saturating_duration_since(Instant::now())) {
                    Ok(r) => Some(r),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else if let Some(tick) = next_tick {
                match rx.recv_timeout(tick.saturating_duration_since(Instant::now())) {
                    Ok(r) => Some(r),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(r) => Some(r),
                    Err(_) => break,
                }
            };
            if let Some(first) = first {
                let mut batch = Vec::new();
                let mut compacts = Vec::new();
                let mut bytes = 0;
                let mut next = Some(first);
                let mut gather_until = None;
                let batch_start = Instant::now();
                while let Some(req) = next.take() {
                    match req {
                        Request::Write { op, reply, queued_at } => {
                            self.shared.queued_writes.fetch_sub(1, Ordering::SeqCst);
                            self.note_queue_wait(queued_at, batch_start);
                            bytes += op.bytes();
                            batch.push((op, reply));
                        }
                        Request::Compact { revision, reply } => compacts.push((revision, reply)),
                    }
                    if batch.len() >= MAX_BATCH_OPS || bytes >= MAX_BATCH_BYTES {
                        break;
                    }
                    next = match rx.try_recv() {
                        Ok(r) => Some(r),
                        // The callers answered after the previous commit are still sending
                        // their next writes: wait a moment for them rather than pay a whole
                        // fsync for a fraction of them (never when writes come one at a time).
                        Err(_)
                            if self.last_batch >= GATHER_MIN_BATCH
                                && batch.len() < self.last_batch * 3 / 4
                                && (self.syncer.is_none() || self.shared.syncing.load(Ordering::SeqCst)) =>
                        {
                            let until = *gather_until.get_or_insert_with(|| Instant::now() + GATHER_WAIT);
                            rx.recv_timeout(until.saturating_duration_since(Instant::now())).ok()
                        }
                        Err(_) => None,
                    };
                }
                self.last_background = None;
                if !batch.is_empty() {
                    self.last_batch = batch.len();
                    self.commit_batch(batch);
                }
                for (revision, reply) in compacts {
                    let _ = reply.send(self.start_compaction(revision));
                }
            }
            if let (Some(tick), Some(interval)) = (next_tick, self.compaction_interval)
                && Instant::now() >= tick
            {
                if let Some(rev) = seen_at_last_tick
                    && rev > self.compacted
                    && let Err(e) = self.start_compaction(rev)
                {
                    tracing::warn!(error = %e, "background compaction failed");
                }
                seen_at_last_tick = Some(self.durable());
                next_tick = Some(Instant::now() + interval);
            }
            // Background work waits for the pause after the previous step and yields to writes
            // already queued (they are taken first on the next turn of the loop), but not for
            // ever: when writes never stop queueing it runs anyway, bounded by its time budget
            // only, so compaction keeps a fifth of the writer's time under any load.
            let now = Instant::now();
            let queued = self.shared.queued_writes.load(Ordering::SeqCst) > 0;
            let starved = now >= self.background_not_before + BACKGROUND_PAUSE_MAX;
            self.background_yields = !starved;
            if now >= self.background_not_before && (!queued || starved) {
                if self.compact_cursor < self.compacted {
                    let step = if self.compaction_reader.is_some() {
                        self.compact_prefetched()
                    } else {
                        self.compact_chunk(self.compaction_rows)
                    };
                    if let Err(e) = step {
                        tracing::warn!(error = %e, "compaction chunk failed; retrying later");
                        // Do not spin on a persistent failure.
                        std::thread::sleep(Duration::from_millis(50));
                    }
                } else if self.vacuum_pending {
                    self.vacuum_step();
                }
            }
            self.maybe_open_restart_window();
        }
        if self.syncer.is_none() {
            self.shared.hub.close();
        }
    }

    /// Records how long a write waited in the queue (`queued_at` to `taken`), and how much of
    /// that was spent behind background work.
    fn note_queue_wait(&self, queued_at: Instant, taken: Instant) {
        let stats = &self.shared.stats;
        let wait = taken.saturating_duration_since(queued_at);
        stats.longest_queue_wait_micros.fetch_max(wait.as_micros() as u64, Ordering::Relaxed);
        if let Some((start, end)) = self.last_background
            && queued_at < end
        {
            let behind = end.saturating_duration_since(queued_at.max(start));
            stats.longest_background_wait_micros.fetch_max(behind.as_micros() as u64, Ordering::Relaxed);
            if behind >= SLOW_BACKGROUND_WAIT {
                tracing::debug!(
                    waited_us = behind.as_micros() as u64,
                    step_us = end.saturating_duration_since(start).as_micros() as u64,
                    "a write waited for a background step"
                );
            }
        }
    }

    /// Validates, writes and commits one batch, then publishes and answers it.
    pub(super) fn commit_batch(&mut self, batch: Vec<(WriteOp, oneshot::Sender<Result<WriteOutcome>>)>) {
        if self.shared.sync_failed.load(Ordering::SeqCst) {
            let msg =
                format!("sqlite {}: an fsync of the write-ahead log failed; reopen the store", self.path.display());
            for (_, reply) in batch {
                let _ = reply.send(Err(Error::Unavailable(msg.clone())));
            }
            return;
        }
        let mut undo: Vec<(String, Option<KeyMeta>)> = Vec::with_capacity(batch.len());
        let mut events: Vec<PendingEvent> = Vec::with_capacity(batch.len());
        let mut results: Vec<Applied> = Vec::with_capacity(batch.len());
        let (ops, replies): (Vec<WriteOp>, Vec<_>) = batch.into_iter().unzip();
        // Roughly what the batch adds to the WAL: its bytes plus a page per write for the key index.
        let batch_bytes: usize = ops.iter().map(|op| op.bytes() + 1024).sum();
        let mut rev = self.current;
        let started = Instant::now();
        let mut commit_started = started;
        let outcome = (|| -> rusqlite::Result<()> {
            self.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            for op in ops {
                results.push(apply(&self.conn, &mut self.index, &mut rev, op, &mut undo, &mut events)?);
            }
            commit_started = Instant::now();
            self.conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(())
        })();
        let commit = commit_started.elapsed();
        self.shared.stats.longest_commit_micros.fetch_max(commit.as_micros() as u64, Ordering::Relaxed);
        if commit >= SLOW_COMMIT {
            tracing::debug!(
                writes = results.len(),
                apply_us = commit_started.saturating_duration_since(started).as_micros() as u64,
                commit_us = commit.as_micros() as u64,
                "slow write commit (WAL write and fsync)"
            );
        }
        match outcome {
            Ok(()) => {
                self.shared.stats.batches.fetch_add(1, Ordering::Relaxed);
                self.shared.stats.wal_bytes.fetch_add(batch_bytes as u64, Ordering::Relaxed);
                self.shared.stats.writes.fetch_add((rev - self.current) as u64, Ordering::Relaxed);
                self.current = rev;
                let replies = replies
                    .into_iter()
                    .zip(results)
                    .map(|(reply, result)| {
                        let result = match result {
                            Applied::Done(o) => Ok(o),
                            Applied::Rejected(e) => Err(e),
                        };
                        (reply, result)
                    })
                    .collect();
                self.hand_over(Committed { rev, events, replies });
            }
            Err(e) => {
                tracing::error!(error = %e, path = %self.path.display(), "write batch failed; nothing in it was written");
                if !self.conn.is_autocommit() {
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
                for (key, prev) in undo.into_iter().rev() {
                    match prev {
                        Some(m) => self.index.insert(key, m),
                        None => self.index.remove(&key),
                    };
                }
                let msg = format!("sqlite {}: write failed, nothing written: {e}", self.path.display());
                // Every write in the batch fails, including ones validated against writes that
                // are now rolled back, and the ones not reached yet.
                for reply in replies {
                    let _ = reply.send(Err(Error::Internal(msg.clone())));
                }
                self.reload();
            }
        }
    }

    /// Sends a committed batch to the syncer, or (without one: it committed with a full sync)
    /// publishes and answers it at once.
    fn hand_over(&mut self, committed: Committed) {
        let committed = match &self.syncer {
            Some(tx) => match tx.send(committed) {
                Ok(()) => return,
                Err(std::sync::mpsc::SendError(c)) => {
                    // The syncer is gone (it panicked): nothing can be made durable any more.
                    let msg = format!("sqlite {}: the WAL syncer stopped; restart the store", self.path.display());
                    for (reply, _) in c.replies {
                        let _ = reply.send(Err(Error::Internal(msg.clone())));
                    }
                    return;
                }
            },
            None => committed,
        };
        let conn = &self.conn;
        let path = &self.path;
        let mut load = |r: Revision| -> Result<Vec<u8>> {
            conn.prepare_cached(VALUE_AT)
                .and_then(|mut s| s.query_row([r], |row| row.get(0)))
                .map_err(|e| internal(path, e))
        };
        committed.finish(&self.shared, &mut load);
    }

    /// Rebuilds the index and revision from the database after a failed commit, whose outcome on
    /// disk is uncertain (e.g. an fsync error).
    fn reload(&mut self) {
        match (load_index(&self.conn, &self.path), stored_revision(&self.conn).map_err(|e| internal(&self.path, e))) {
            (Ok(index), Ok(current)) => {
                self.index = index;
                if current > self.current {
                    // The failed batch did reach the disk; publish nothing (its callers were told it
                    // failed) but never reuse its revisions. Watchers catch up from history.
                    self.current = current;
                    self.hand_over(Committed { rev: current, events: Vec::new(), replies: Vec::new() });
                }
            }
            (Err(e), _) | (_, Err(e)) => tracing::error!(error = %e, "cannot reload the store index"),
        }
    }

    /// Records a new compacted revision durably; the history rows go later, chunk by chunk.
    pub(super) fn start_compaction(&mut self, revision: Revision) -> Result<()> {
        if revision <= self.compacted {
            return Ok(());
        }
        let durable = self.durable();
        if revision > durable {
            return Err(Error::FutureRevision { requested: revision, current: durable });
        }
        set_meta(&self.conn, "compacted", revision).map_err(|e| internal(&self.path, e))?;
        self.compacted = revision;
        self.shared.compacted_rev.store(revision, Ordering::SeqCst);
        Ok(())
    }

    /// Runs `work` in one write transaction committed without waiting for an fsync (losing it
    /// to a power cut is harmless: compaction and vacuum are redone from durable state; the
    /// next durable commit covers it). Restores `synchronous=FULL` before returning and fails if
    /// it cannot, so no write is ever acknowledged without a full sync. Records how long the
    /// transaction held the write lock.
    fn background_transaction<T>(&mut self, work: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let commit_sync = self.commit_sync();
        let conn = &self.conn;
        let started = Instant::now();
        let run = || -> rusqlite::Result<T> {
            if commit_sync == "FULL" {
                conn.pragma_update(None, "synchronous", "NORMAL")?;
            }
            conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            let out = work(conn)?;
            conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(out)
        };
        let result = run();
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        let restore = if commit_sync == "FULL" { conn.pragma_update(None, "synchronous", "FULL") } else { Ok(()) };
        let took = started.elapsed();
        self.last_background = Some((started, Instant::now()));
        if took >= SLOW_BACKGROUND_WAIT {
            tracing::debug!(took_us = took.as_micros() as u64, "slow background transaction");
        }
        self.background_not_before =
            Instant::now() + (took * BACKGROUND_PAUSE_FACTOR).clamp(BACKGROUND_PAUSE_MIN, BACKGROUND_PAUSE_MAX);
        self.shared.stats.longest_chunk_micros.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
        let out = result.map_err(|e| internal(&self.path, e))?;
        restore.map_err(|e| internal(&self.path, e))?;
        Ok(out)
    }

    /// Processes up to `chunk` history rows after the compaction cursor in one transaction, and
    /// fewer when [`COMPACTION_CHUNK_BUDGET`] runs out first or a write is waiting (at least one
    /// row per call). Adapts the next call's `chunk` ([`Writer::compaction_rows`]) to the budget.
    ///
    /// For each row `r` at or below the compacted revision `C`: the value it replaced
    /// (`prev_rev`) is superseded at `C` and is deleted; if `r` is a tombstone it is deleted too
    /// (the key does not exist at `C`; everything older of it is already gone because rows are
    /// processed in revision order). Every delete is by revision (the table's primary key).
    /// Reads at revisions `>= C` and watches after `C` see the same data before and after every
    /// chunk.
    pub(super) fn compact_chunk(&mut self, chunk: usize) -> Result<()> {
        let target = self.compacted;
        let cursor = self.compact_cursor;
        let shared = self.shared.clone();
        let yields = self.background_yields;
        let step_started = Instant::now();
        let new_cursor = self.background_transaction(|conn| {
            let started = Instant::now();
            let (rows, through) = read_compaction_rows(conn, cursor, target, chunk)?;
            let stop = || {
                started.elapsed() >= COMPACTION_CHUNK_BUDGET
                    || (yields && shared.queued_writes.load(Ordering::Relaxed) > 0)
            };
            let done = delete_compacted(conn, &rows, stop)?;
            let new_cursor = if done < rows.len() { rows[done - 1].rev } else { through };
            set_meta(conn, "compact_cursor", new_cursor)?;
            Ok(new_cursor)
        })?;
        let took = step_started.elapsed();
        // A step cut short by a queued write says nothing about the size: only time adapts it.
        if took > COMPACTION_CHUNK_BUDGET * 2 {
            self.compaction_rows = (self.compaction_rows / 2).max(1);
        } else if took < COMPACTION_CHUNK_BUDGET / 2 {
            self.compaction_rows = (self.compaction_rows * 2).min(COMPACTION_CHUNK.max(chunk));
        }
        self.compact_cursor = new_cursor;
        self.shared.stats.compaction_chunks.fetch_add(1, Ordering::Relaxed);
        self.shared.stats.compact_cursor.store(new_cursor, Ordering::SeqCst);
        if new_cursor >= self.compacted {
            self.vacuum_pending = true;
        }
        Ok(())
    }

    /// One compaction step over rows the compaction reader read ahead: deletes by revision
    /// (the table's primary key) only, in a transaction that reads nothing but the B-tree pages
    /// it changes (which the reader's look-ups brought into the OS cache), so a disk busy with
    /// the WAL does not stretch it. Stops at [`COMPACTION_CHUNK_BUDGET`] or, unless starved, at
    /// the first queued write. When no rows are ready, asks the reader for the next ones and
    /// tries again after [`BACKGROUND_PAUSE_MIN`]. Same deletes as [`Writer::compact_chunk`].
    pub(super) fn compact_prefetched(&mut self) -> Result<()> {
        self.take_prefetched_rows();
        if self.prefetched_through <= self.compact_cursor {
            self.request_prefetch();
            self.background_not_before = Instant::now() + BACKGROUND_PAUSE_MIN;
            return Ok(());
        }
        let through = self.prefetched_through;
        let mut rows = std::mem::take(&mut self.prefetched);
        rows.make_contiguous();
        let shared = self.shared.clone();
        let yields = self.background_yields;
        let step = self.background_transaction(|conn| {
            let started = Instant::now();
            let stop = || {
                started.elapsed() >= COMPACTION_CHUNK_BUDGET
                    || (yields && shared.queued_writes.load(Ordering::Relaxed) > 0)
            };
            let done = delete_compacted(conn, rows.as_slices().0, stop)?;
            let new_cursor = if done < rows.len() { rows[done - 1].rev } else { through };
            set_meta(conn, "compact_cursor", new_cursor)?;
            Ok((new_cursor, done))
        });
        let (new_cursor, done) = match step {
            Ok(v) => v,
            Err(e) => {
                // Rolled back: the rows are still to be processed.
                self.prefetched = rows;
                return Err(e);
            }
        };
        rows.drain(..done);
        self.prefetched = rows;
        self.compact_cursor = new_cursor;
        self.shared.stats.compaction_chunks.fetch_add(1, Ordering::Relaxed);
        self.shared.stats.compact_cursor.store(new_cursor, Ordering::SeqCst);
        if new_cursor >= self.compacted {
            self.vacuum_pending = true;
        } else {
            self.request_prefetch();
        }
        Ok(())
    }

    /// Appends the compaction reader's answer, if one came, to the rows read ahead (an answer
    /// that does not continue them is dropped).
    fn take_prefetched_rows(&mut self) {
        let Some(link) = &self.compaction_reader else { return };
        while let Ok(answer) = link.rows.try_recv() {
            if self.prefetch_outstanding == Some(answer.after) {
                self.prefetch_outstanding = None;
            }
            if answer.after == self.prefetched_through.max(self.compact_cursor) && answer.through > answer.after {
                self.prefetched.extend(answer.rows);
                self.prefetched_through = answer.through;
            }
        }
    }

    /// Asks the compaction reader for the rows after those read ahead, unless it is busy, enough
    /// rows are read ahead, or they reach the compacted revision.
    fn request_prefetch(&mut self) {
        let after = self.prefetched_through.max(self.compact_cursor);
        let Some(link) = &self.compaction_reader else { return };
        if self.prefetch_outstanding.is_some() || after >= self.compacted || self.prefetched.len() >= COMPACTION_CHUNK {
            return;
        }
        match link.request.try_send((after, self.compacted, COMPACTION_CHUNK)) {
            Ok(()) => self.prefetch_outstanding = Some(after),
            Err(std::sync::mpsc::TrySendError::Full(_)) => {}
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => {
                tracing::warn!("the compaction reader stopped; compaction reads its rows on the writer thread");
                self.compaction_reader = None;
            }
        }
    }

    /// Returns some free pages to the file system, if more than [`KEEP_FREE_PAGES`] are free;
    /// clears `vacuum_pending` once there is nothing to do. Each step is one short transaction
    /// whose size adapts to [`COMPACTION_CHUNK_BUDGET`].
    fn vacuum_step(&mut self) {
        let free: i64 = match self.conn.query_row("PRAGMA freelist_count", [], |r| r.get(0)) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the free list size");
                self.vacuum_pending = false;
                return;
            }
        };
        if free <= KEEP_FREE_PAGES {
            self.vacuum_pending = false;
            return;
        }
        let n = (free - KEEP_FREE_PAGES).min(self.vacuum_pages);
        let started = Instant::now();
        let shared = self.shared.clone();
        let yields = self.background_yields;
        let step = self.background_transaction(|conn| {
            // The pragma frees one page per step of its statement: run it to completion.
            let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({n})"))?;
            let mut rows = stmt.query([])?;
            while rows.next()?.is_some() {
                if yields && shared.queued_writes.load(Ordering::Relaxed) > 0 {
                    break;
                }
            }
            Ok(())
        });
        let took = started.elapsed();
        if took > COMPACTION_CHUNK_BUDGET {
            self.vacuum_pages = (self.vacuum_pages / 2).max(1);
        } else if took < COMPACTION_CHUNK_BUDGET / 2 {
            self.vacuum_pages = (self.vacuum_pages * 2).min(VACUUM_STEP_PAGES);
        }
        if let Err(e) = step {
            tracing::debug!(error = %e, "incremental vacuum failed");
            self.vacuum_pending = false;
        }
    }

    /// When the checkpointer asked for it (the WAL is long and almost all copied), holds the
    /// next batch back for at most [`WAL_RESTART_WINDOW`] while the checkpointer copies the last
    /// frames: if it finishes in time, the next write transaction starts the WAL over. Writes
    /// arriving meanwhile wait in the queue and go into the next batch. The writer itself never
    /// checkpoints, so no write ever waits for a checkpoint's copying or fsync beyond the window.
    /// Once the WAL is past [`WAL_LIMIT_BYTES`] (the short windows were too short for the disk)
    /// the window waits for the checkpoint up to [`WAL_LIMIT_WINDOW`]: one longer stall, which
    /// bounds the WAL's length.
    ///
    /// A requested window waits up to [`WAL_RESTART_DEFER`] for a turn of the loop with no write
    /// queued, so that it rarely holds a write back at all.
    pub(super) fn maybe_open_restart_window(&mut self) {
        if !self.shared.restart_requested.load(Ordering::SeqCst) {
            // Withdrawn (the WAL started over during a pause) or never made.
            self.window_requested_at = None;
            return;
        }
        let requested_at = *self.window_requested_at.get_or_insert_with(Instant::now);
        if self.shared.queued_writes.load(Ordering::SeqCst) > 0 && requested_at.elapsed() < WAL_RESTART_DEFER {
            return;
        }
        self.window_requested_at = None;
        self.shared.restart_requested.store(false, Ordering::SeqCst);
        let forced = self.shared.restart_forced.swap(false, Ordering::SeqCst);
        let Some(link) = &self.checkpointer else { return };
        self.window_seq += 1;
        let seq = self.window_seq;
        let started = Instant::now();
        if link.wake.try_send(seq).is_err() {
            return;
        }
        let length = if forced { self.shared.wal_restart.limit_window } else { self.shared.wal_restart.window };
        let deadline = started + length;
        let caught_up = loop {
            match link.done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok((s, complete)) if s == seq => break complete,
                // The answer to an earlier window that timed out.
                Ok(_) => continue,
                Err(_) => break false,
            }
        };
        let stats = &self.shared.stats;
        stats.restart_windows.fetch_add(1, Ordering::Relaxed);
        if forced {
            stats.restart_windows_forced.fetch_add(1, Ordering::Relaxed);
        }
        if caught_up {
            stats.restart_windows_caught_up.fetch_add(1, Ordering::Relaxed);
        }
        self.last_background = Some((started, Instant::now()));
        tracing::debug!(
            took_us = started.elapsed().as_micros() as u64,
            caught_up,
            forced,
            "WAL restart window on the writer thread"
        );
    }
}

/// A batch committed to the WAL (not yet fsynced, when a syncer runs), with what to publish and
/// answer once it is durable.
pub(super) struct Committed {
    rev: Revision,
    events: Vec<PendingEvent>,
    replies: Vec<(oneshot::Sender<Result<WriteOutcome>>, Result<WriteOutcome>)>,
}

impl Committed {
    /// The batch is durable: makes its revision visible to readers, publishes it to watchers
    /// and answers its callers, in that order.
    fn finish(mut self, shared: &Shared, load: &mut dyn FnMut(Revision) -> Result<Vec<u8>>) {
        shared.current_rev.fetch_max(self.rev, Ordering::SeqCst);
        shared.hub.publish(self.rev, &mut self.events, load);
        for (reply, result) in self.replies {
            let _ = reply.send(result);
        }
    }

    fn fail(self, msg: &str) {
        for (reply, _) in self.replies {
            let _ = reply.send(Err(Error::Internal(msg.to_string())));
        }
    }
}

/// The syncer thread's loop (pipelined group commit): takes every batch the writer has
/// committed to the WAL since its last turn, fsyncs the WAL once for all of them, then for each
/// in order makes its revision visible, publishes it and answers it. Meanwhile the writer
/// already applies and commits the next batches, so the fsync overlaps their work. Nothing is
/// visible to readers or watchers, or acknowledged, before its fsync. After a failed fsync every
/// write fails (the WAL's state on disk is unknown): the store must be reopened. Ends when the
/// writer drops its sender, after the last batch; then closes the watch hub.
pub(super) fn sync_loop(wal: std::fs::File, conn: Connection, rx: Receiver<Committed>, shared: Arc<Shared>) {
    let path = shared.path.clone();
    let mut failed: Option<String> = None;
    let mut load = |r: Revision| -> Result<Vec<u8>> {
        conn.prepare_cached(VALUE_AT)
            .and_then(|mut s| s.query_row([r], |row| row.get(0)))
            .map_err(|e| internal(&path, e))
    };
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        while let Ok(c) = rx.try_recv() {
            group.push(c);
        }
        if failed.is_none() {
            shared.syncing.store(true, Ordering::SeqCst);
            let started = Instant::now();
            let result = wal.sync_data();
            let took = started.elapsed();
            shared.syncing.store(false, Ordering::SeqCst);
            shared.stats.syncs.fetch_add(1, Ordering::Relaxed);
            shared.stats.longest_commit_micros.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
            if took >= SLOW_COMMIT {
                tracing::debug!(batches = group.len(), fsync_us = took.as_micros() as u64, "slow WAL fsync");
            }
            if let Err(e) = result {
                tracing::error!(error = %e, path = %shared.path.display(), "cannot fsync the WAL; every write fails until the store is reopened");
                shared.sync_failed.store(true, Ordering::SeqCst);
                failed = Some(format!(
                    "sqlite {}: cannot fsync the write-ahead log ({e}); the write may or may not be stored; reopen the store",
                    shared.path.display()
                ));
            }
        }
        for c in group {
            match &failed {
                None => c.finish(&shared, &mut load),
                Some(msg) => c.fail(msg),
            }
        }
    }
    shared.hub.close();
}

/// One history row as compaction sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CompactionRow {
    pub(super) rev: Revision,
    /// The revision of the value this row replaced (0 for a create).
    pub(super) prev_rev: Revision,
    /// A tombstone.
    pub(super) deleted: bool,
}

/// The compaction reader's answer: every history row in `(after, through]`.
pub(super) struct CompactionRows {
    after: Revision,
    through: Revision,
    rows: Vec<CompactionRow>,
}

/// The writer's ends of its channels to the compaction reader thread.
pub(super) struct CompactionReaderLink {
    /// `(after, target, n)`: read up to `n` history rows in `(after, target]`. Dropping it
    /// stops the reader.
    pub(super) request: std::sync::mpsc::SyncSender<(Revision, Revision, usize)>,
    pub(super) rows: Receiver<CompactionRows>,
}

/// Up to `n` history rows in `(after, target]`, in revision order, and the revision through
/// which they are every row: `target` when fewer than `n` were left, else the last row's.
fn read_compaction_rows(
    conn: &Connection,
    after: Revision,
    target: Revision,
    n: usize,
) -> rusqlite::Result<(Vec<CompactionRow>, Revision)> {
    let rows: Vec<CompactionRow> = conn
        .prepare_cached("SELECT rev, prev_rev, deleted FROM kv WHERE rev > ?1 AND rev <= ?2 ORDER BY rev LIMIT ?3")?
        .query_map(params![after, target, n as i64], |r| {
            Ok(CompactionRow { rev: r.get(0)?, prev_rev: r.get(1)?, deleted: r.get(2)? })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let through = if rows.len() < n { target } else { rows.last().map_or(target, |r| r.rev) };
    Ok((rows, through))
}

/// Deletes what compaction removes for `rows` (in revision order): the value each row replaced
/// and each tombstone itself. Stops early, after at least one row, once `stop()` says so
/// (the step's time budget is spent or a write is queued); returns how many rows it processed.
fn delete_compacted(conn: &Connection, rows: &[CompactionRow], stop: impl Fn() -> bool) -> rusqlite::Result<usize> {
    let mut delete = conn.prepare_cached("DELETE FROM kv WHERE rev = ?1")?;
    for (i, row) in rows.iter().enumerate() {
        if row.prev_rev > 0 {
            delete.execute([row.prev_rev])?;
        }
        if row.deleted {
            delete.execute([row.rev])?;
        }
        if i + 1 < rows.len() && stop() {
            return Ok(i + 1);
        }
    }
    Ok(rows.len())
}

/// The compaction reader thread's loop: reads, on its own read connection and outside any
/// write transaction, the history rows of the writer's next compaction step, and looks up the
/// rows they supersede so that their pages are in the OS cache when the writer deletes them.
/// History at or below the compacted revision is durable and changes only by the writer's
/// compaction, which goes in revision order, so rows read ahead stay valid until processed.
pub(super) fn compaction_read_loop(
    conn: Connection,
    requests: Receiver<(Revision, Revision, usize)>,
    answers: std::sync::mpsc::Sender<CompactionRows>,
) {
    while let Ok((after, target, n)) = requests.recv() {
        let read = || -> rusqlite::Result<CompactionRows> {
            let (rows, through) = read_compaction_rows(&conn, after, target, n)?;
            let mut touch = conn.prepare_cached("SELECT length(key) FROM kv WHERE rev = ?1")?;
            for row in &rows {
                if row.prev_rev > 0 {
                    touch.query_row([row.prev_rev], |_| Ok(())).optional()?;
                }
            }
            Ok(CompactionRows { after, through, rows })
        };
        let answer = match read() {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(error = %e, "compaction reader failed; retrying later");
                // Do not spin on a persistent failure; an empty answer makes the writer ask again.
                std::thread::sleep(Duration::from_millis(50));
                CompactionRows { after, through: after, rows: Vec::new() }
            }
        };
        if answers.send(answer).is_err() {
            break;
        }
    }
}

/// The writer's ends of its channels to the checkpointer thread.
pub(super) struct CheckpointerLink {
    /// Opens restart window number `n` (the checkpointer checkpoints at once); dropping it
    /// stops the checkpointer.
    pub(super) wake: std::sync::mpsc::SyncSender<u64>,
    /// `(n, caught_up)`: the checkpoint for window `n` ended, and whether it copied the whole WAL.
    pub(super) done: Receiver<(u64, bool)>,
}

/// Validates one write against the index and, if accepted, inserts its history row.
fn apply(
    conn: &Connection,
    index: &mut HashMap<String, KeyMeta>,
    rev: &mut Revision,
    op: WriteOp,
    undo: &mut Vec<(String, Option<KeyMeta>)>,
    events: &mut Vec<PendingEvent>,
) -> rusqlite::Result<Applied> {
    let mut insert = conn.prepare_cached(INSERT)?;
    match op {
        WriteOp::Create { key, value } => {
            if index.contains_key(&key) {
                return Ok(Applied::Rejected(Error::AlreadyExists { key }));
            }
            let r = *rev + 1;
            insert.execute(params![r, key.as_bytes(), r, 0, false, value])?;
            *rev = r;
            undo.push((key.clone(), None));
            index.insert(key.clone(), KeyMeta { create_rev: r, mod_rev: r });
            events.push(PendingEvent {
                rev: r,
                key,
                kind: EventType::Put,
                create_rev: r,
                value,
                prev_rev: 0,
                prev_create_rev: 0,
                prev_value: None,
            });
            Ok(Applied::Done(WriteOutcome::Put(r)))
        }
        WriteOp::Update { key, value, expected } => {
            let Some(&m) = index.get(&key) else { return Ok(Applied::Rejected(Error::NotFound { key })) };
            if m.mod_rev != expected {
                return Ok(Applied::Rejected(Error::Conflict { key, expected, actual: m.mod_rev }));
            }
            let r = *rev + 1;
            insert.execute(params![r, key.as_bytes(), m.create_rev, m.mod_rev, false, value])?;
            *rev = r;
            undo.push((key.clone(), Some(m)));
            index.insert(key.clone(), KeyMeta { create_rev: m.create_rev, mod_rev: r });
            events.push(PendingEvent {
                rev: r,
                key,
                kind: EventType::Put,
                create_rev: m.create_rev,
                value,
                prev_rev: m.mod_rev,
                prev_create_rev: m.create_rev,
                prev_value: None,
            });
            Ok(Applied::Done(WriteOutcome::Put(r)))
        }
        WriteOp::Delete { key, expected } => {
            let Some(&m) = index.get(&key) else { return Ok(Applied::Rejected(Error::NotFound { key })) };
            if let Some(expected) = expected
                && m.mod_rev != expected
            {
                return Ok(Applied::Rejected(Error::Conflict { key, expected, actual: m.mod_rev }));
            }
            let prev_value: Vec<u8> = conn
                .prepare_cached(VALUE_AT)?
                .query_row([m.mod_rev], |row| row.get(0))
                .optional()?
                .ok_or(rusqlite::Error::QueryReturnedNoRows)?;
            let r = *rev + 1;
            insert.execute(params![r, key.as_bytes(), 0, m.mod_rev, true, &[] as &[u8]])?;
            *rev = r;
            undo.push((key.clone(), Some(m)));
            index.remove(&key);
            events.push(PendingEvent {
                rev: r,
                key: key.clone(),
                kind: EventType::Delete,
                create_rev: 0,
                value: Vec::new(),
                prev_rev: m.mod_rev,
                prev_create_rev: m.create_rev,
                prev_value: Some(prev_value.clone()),
            });
            Ok(Applied::Done(WriteOutcome::Deleted(
                r,
                KeyValue { key, value: prev_value, create_revision: m.create_rev, mod_revision: m.mod_rev },
            )))
        }
    }
}

/// The checkpointer thread's loop: copies WAL frames into the database file with PASSIVE
/// checkpoints, which take no write lock and never block the writer: every
/// [`CHECKPOINT_EVERY`] when writes paused (the next write then starts the WAL over), while
/// compaction runs (its pages are not counted in `wal_bytes`), or after about
/// [`CHECKPOINT_BYTES`] of writes while they flow; at once when the writer opens a restart
/// window (`wake` carries its number; the answer goes to `done`). When the WAL reaches
/// `Shared::wal_restart`'s length it catches up, checkpoint after checkpoint, until the frames
/// left are few, then asks the writer for a window. Ends when the writer drops `wake`'s sender.
pub(super) fn checkpoint_loop(
    conn: Connection,
    wake: Receiver<u64>,
    done: std::sync::mpsc::Sender<(u64, bool)>,
    shared: Arc<Shared>,
) {
    let page_size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap_or(4096).max(512);
    let restart_frames = (shared.wal_restart.bytes / page_size).max(1);
    let limit_frames = (shared.wal_restart.limit_bytes / page_size).max(restart_frames);
    // Checkpoint at least twice per restart length while writes flow.
    let checkpoint_bytes = CHECKPOINT_BYTES.min((shared.wal_restart.bytes / 2).max(1) as u64);
    // The WAL's length at the previous checkpoint: a shorter one means it started over.
    let mut last_log_frames = 0i64;
    let mut seen_batches = u64::MAX;
    let mut seen_chunks = u64::MAX;
    // Frames were written since the last checkpoint.
    let mut dirty = false;
    // Frames already copied by the previous checkpoint of the same WAL.
    let mut backfilled = 0i64;
    // Checkpoints in a row made to catch up before asking for a restart window.
    let mut catch_up = 0u32;
    let mut last_request: Option<Instant> = None;
    loop {
        let wait = if catch_up > 0 { Duration::ZERO } else { CHECKPOINT_EVERY };
        let window = match wake.recv_timeout(wait) {
            Err(RecvTimeoutError::Disconnected) => break,
            Ok(seq) => Some(seq),
            Err(RecvTimeoutError::Timeout) => None,
        };
        let batches = shared.stats.batches.load(Ordering::Relaxed);
        let chunks = shared.stats.compaction_chunks.load(Ordering::Relaxed);
        let pending = shared.stats.wal_bytes.load(Ordering::Relaxed);
        let writing = batches != seen_batches;
        let compacting = chunks != seen_chunks;
        seen_batches = batches;
        seen_chunks = chunks;
        dirty |= writing || compacting;
        let due =
            window.is_some() || catch_up > 0 || (dirty && (!writing || compacting || pending >= checkpoint_bytes));
        if !due {
            continue;
        }
        dirty = false;
        shared.stats.wal_bytes.fetch_sub(pending, Ordering::Relaxed);
        let started = Instant::now();
        let result =
            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)));
        let took = started.elapsed();
        if let Some(seq) = window {
            let caught_up = matches!(result, Ok((log, copied)) if copied >= log);
            // The writer may have stopped waiting (and even stopped): nothing to do then.
            let _ = done.send((seq, caught_up));
        }
        match result {
            Ok((log_frames, copied)) => {
                tracing::debug!(
                    took_us = took.as_micros() as u64,
                    log_frames,
                    copied,
                    window = window.is_some(),
                    "background checkpoint"
                );
                shared.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                if log_frames < last_log_frames {
                    shared.stats.wal_restarts.fetch_add(1, Ordering::Relaxed);
                }
                last_log_frames = log_frames;
                shared.stats.longest_wal_bytes.fetch_max((log_frames.max(0) * page_size) as u64, Ordering::Relaxed);
                if log_frames < restart_frames {
                    // The WAL started over (writes paused): a pending request is moot.
                    shared.restart_requested.store(false, Ordering::SeqCst);
                    shared.restart_forced.store(false, Ordering::SeqCst);
                }
                let recent_request = last_request.is_some_and(|t| t.elapsed() < WAL_RESTART_MIN_GAP);
                if window.is_none() && log_frames >= restart_frames && !recent_request {
                    let fresh = if copied >= backfilled { copied - backfilled } else { copied };
                    // The checkpoint in a window copies about as many frames as this one and
                    // fsyncs the database file as this one did: when this one took longer than
                    // the window, a window would only hold writes back for nothing.
                    let fits = took * 4 <= shared.wal_restart.window * 3;
                    // Past the limit the window waits for the checkpoint, however slow the disk.
                    let forced = log_frames >= limit_frames;
                    if (fits || forced) && (fresh <= RESTART_CATCH_UP_FRAMES || catch_up >= MAX_CATCH_UP_CHECKPOINTS) {
                        shared.restart_forced.store(forced, Ordering::SeqCst);
                        shared.restart_requested.store(true, Ordering::SeqCst);
                        last_request = Some(Instant::now());
                        catch_up = 0;
                    } else if catch_up >= MAX_CATCH_UP_CHECKPOINTS {
                        // The disk is too slow for a window now: try again after a gap.
                        shared.stats.restart_windows_skipped.fetch_add(1, Ordering::Relaxed);
                        last_request = Some(Instant::now());
                        catch_up = 0;
                    } else {
                        catch_up += 1;
                    }
                } else {
                    catch_up = 0;
                }
                backfilled = copied;
            }
            Err(e) => tracing::warn!(error = %e, "background checkpoint failed"),
        }
    }
}
