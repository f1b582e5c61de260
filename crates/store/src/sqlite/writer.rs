//! The writer thread: group commit, compare-and-swap against an in-memory index, compaction in
//! short chunks, and checkpoint requests.
//!
//! Every write goes through one thread that owns the only writing connection. It takes all
//! requests waiting in its queue (up to [`MAX_BATCH_OPS`] / [`MAX_BATCH_BYTES`]), validates each
//! in order against the index of live keys (`key → (create_revision, mod_revision)`, updated as
//! the batch proceeds so later writes in a batch see earlier ones), inserts one history row per
//! accepted write, and commits the batch as one transaction with one fsync of the WAL. Only then
//! are the revisions published to watchers and the callers answered. A rejected write (conflict,
//! exists, not found) is answered with its error and does not affect the rest of the batch; a
//! database failure fails the whole batch, rolls the index back and reloads it from disk.
//!
//! Compaction runs on the same thread between batches, a few hundred history rows per short
//! transaction, so writers wait at most one chunk and SQLite never reports "database is locked".

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
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
/// History rows examined by the first compaction transaction; later ones adapt their size so
/// that each takes about [`COMPACTION_CHUNK_TARGET`].
pub(super) const COMPACTION_CHUNK: usize = 256;
/// How long one compaction transaction should hold the write lock.
const COMPACTION_CHUNK_TARGET: Duration = Duration::from_millis(2);
/// How often the checkpointer thread copies new WAL frames into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);
/// WAL length (in 4 KiB frames, so 64 MiB) at which the writer finishes a checkpoint itself:
/// the background checkpointer cannot reset a WAL that the writer never stops appending to.
const WAL_FORCE_CHECKPOINT_FRAMES: i64 = 16 * 1024;
/// Free pages kept for reuse after a compaction; beyond this the file is shrunk.
const KEEP_FREE_PAGES: i64 = 2048;
/// Pages returned to the file system per vacuum step (one step per writer loop iteration).
const VACUUM_STEP_PAGES: i64 = 128;

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
    Write { op: WriteOp, reply: oneshot::Sender<Result<WriteOutcome>> },
    Compact { revision: Revision, reply: oneshot::Sender<Result<()>> },
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
    /// Dropped with the writer, which stops the checkpointer thread.
    checkpoint_tx: Option<std::sync::mpsc::SyncSender<()>>,
    /// A compaction finished: shrink the file, a step at a time.
    vacuum_pending: bool,
    /// Rows per compaction transaction, adapted to [`COMPACTION_CHUNK_TARGET`].
    chunk_rows: usize,
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
            checkpoint_tx: None,
            vacuum_pending: false,
            chunk_rows: COMPACTION_CHUNK,
        })
    }

    /// The last committed revision.
    pub(super) fn current(&self) -> Revision {
        self.current
    }

    pub(super) fn set_checkpointer(&mut self, tx: std::sync::mpsc::SyncSender<()>) {
        self.checkpoint_tx = Some(tx);
    }

    /// The thread's main loop; returns when every request sender is gone.
    pub(super) fn run(mut self, rx: Receiver<Request>) {
        let mut next_tick = self.compaction_interval.map(|i| Instant::now() + i);
        // kube-apiserver's policy: at each tick, compact to the revision seen at the previous
        // tick, so at least one interval of history is always kept.
        let mut seen_at_last_tick: Option<Revision> = None;
        loop {
            let background_work = self.compact_cursor < self.compacted
                || self.vacuum_pending
                || self.shared.force_checkpoint.load(Ordering::Relaxed);
            let first = if background_work {
                match rx.try_recv() {
                    Ok(r) => Some(r),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => break,
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
                while let Some(req) = next.take() {
                    match req {
                        Request::Write { op, reply } => {
                            bytes += op.bytes();
                            batch.push((op, reply));
                        }
                        Request::Compact { revision, reply } => compacts.push((revision, reply)),
                    }
                    if batch.len() >= MAX_BATCH_OPS || bytes >= MAX_BATCH_BYTES {
                        break;
                    }
                    next = rx.try_recv().ok();
                }
                if !batch.is_empty() {
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
                seen_at_last_tick = Some(self.current);
                next_tick = Some(Instant::now() + interval);
            }
            if self.compact_cursor < self.compacted {
                if let Err(e) = self.compact_chunk_adaptive() {
                    tracing::warn!(error = %e, "compaction chunk failed; retrying later");
                    // Do not spin on a persistent failure.
                    std::thread::sleep(Duration::from_millis(50));
                }
            } else if self.vacuum_pending {
                self.vacuum_step();
            }
            self.maybe_checkpoint();
        }
        self.shared.hub.close();
    }

    /// Validates, writes and commits one batch, then publishes and answers it.
    pub(super) fn commit_batch(&mut self, batch: Vec<(WriteOp, oneshot::Sender<Result<WriteOutcome>>)>) {
        let mut undo: Vec<(String, Option<KeyMeta>)> = Vec::with_capacity(batch.len());
        let mut events: Vec<PendingEvent> = Vec::with_capacity(batch.len());
        let mut results: Vec<Applied> = Vec::with_capacity(batch.len());
        let (ops, replies): (Vec<WriteOp>, Vec<_>) = batch.into_iter().unzip();
        let mut rev = self.current;
        let outcome = (|| -> rusqlite::Result<()> {
            self.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            for op in ops {
                results.push(apply(&self.conn, &mut self.index, &mut rev, op, &mut undo, &mut events)?);
            }
            self.conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(())
        })();
        match outcome {
            Ok(()) => {
                self.shared.stats.batches.fetch_add(1, Ordering::Relaxed);
                self.shared.stats.writes.fetch_add((rev - self.current) as u64, Ordering::Relaxed);
                self.current = rev;
                self.shared.current_rev.store(rev, Ordering::SeqCst);
                if !events.is_empty() {
                    let conn = &self.conn;
                    let path = &self.path;
                    let mut load = |r: Revision| -> Result<Vec<u8>> {
                        conn.prepare_cached(VALUE_AT)
                            .and_then(|mut s| s.query_row([r], |row| row.get(0)))
                            .map_err(|e| internal(path, e))
                    };
                    self.shared.hub.publish(rev, &mut events, &mut load);
                }
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(match result {
                        Applied::Done(o) => Ok(o),
                        Applied::Rejected(e) => Err(e),
                    });
                }
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
                    self.shared.current_rev.store(current, Ordering::SeqCst);
                    self.shared.hub.publish(current, &mut [], &mut |_| Ok(Vec::new()));
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
        if revision > self.current {
            return Err(Error::FutureRevision { requested: revision, current: self.current });
        }
        set_meta(&self.conn, "compacted", revision).map_err(|e| internal(&self.path, e))?;
        self.compacted = revision;
        self.shared.compacted_rev.store(revision, Ordering::SeqCst);
        Ok(())
    }

    /// One compaction transaction, sized from the previous ones' duration.
    fn compact_chunk_adaptive(&mut self) -> Result<()> {
        let started = Instant::now();
        self.compact_chunk(self.chunk_rows)?;
        let took = started.elapsed();
        if took > COMPACTION_CHUNK_TARGET {
            self.chunk_rows = (self.chunk_rows / 2).max(16);
        } else if took < COMPACTION_CHUNK_TARGET / 2 {
            self.chunk_rows = (self.chunk_rows * 2).min(4096);
        }
        Ok(())
    }

    /// Processes up to `chunk` history rows after the compaction cursor in one transaction.
    ///
    /// For each row `r` at or below the compacted revision `C`: the value it replaced
    /// (`prev_rev`) is superseded at `C` and is deleted; if `r` is a tombstone it is deleted too
    /// (the key does not exist at `C`; everything older of it is already gone because rows are
    /// processed in revision order). Reads at revisions `>= C` and watches after `C` see the same
    /// data before and after every chunk.
    pub(super) fn compact_chunk(&mut self, chunk: usize) -> Result<()> {
        let target = self.compacted;
        let cursor = self.compact_cursor;
        let conn = &self.conn;
        let run = || -> rusqlite::Result<Revision> {
            // Losing a chunk to a power cut is harmless (it is redone from the cursor), so the
            // chunk commits without waiting for an fsync; the next durable commit covers it.
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            let rows: Vec<(Revision, Revision, bool)> = conn
                .prepare_cached(
                    "SELECT rev, prev_rev, deleted FROM kv WHERE rev > ?1 AND rev <= ?2 ORDER BY rev LIMIT ?3",
                )?
                .query_map(params![cursor, target, chunk as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let mut delete = conn.prepare_cached("DELETE FROM kv WHERE rev = ?1")?;
            for &(rev, prev_rev, deleted) in &rows {
                if prev_rev > 0 {
                    delete.execute([prev_rev])?;
                }
                if deleted {
                    delete.execute([rev])?;
                }
            }
            let new_cursor = if rows.len() < chunk { target } else { rows.last().map_or(target, |r| r.0) };
            set_meta(conn, "compact_cursor", new_cursor)?;
            conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(new_cursor)
        };
        let started = Instant::now();
        let result = run();
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        let restore = conn.pragma_update(None, "synchronous", "FULL");
        let new_cursor = result.map_err(|e| internal(&self.path, e))?;
        // Never acknowledge a write without a full sync: if FULL cannot be restored, stop.
        restore.map_err(|e| internal(&self.path, e))?;
        self.compact_cursor = new_cursor;
        self.shared.stats.compaction_chunks.fetch_add(1, Ordering::Relaxed);
        self.shared.stats.longest_chunk_micros.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.shared.stats.compact_cursor.store(new_cursor, Ordering::SeqCst);
        if new_cursor >= self.compacted {
            self.vacuum_pending = true;
        }
        Ok(())
    }

    /// Returns up to [`VACUUM_STEP_PAGES`] free pages to the file system, if more than
    /// [`KEEP_FREE_PAGES`] are free; clears `vacuum_pending` once there is nothing to do.
    fn vacuum_step(&mut self) {
        let started = Instant::now();
        let step = || -> rusqlite::Result<bool> {
            let free: i64 = self.conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
            if free <= KEEP_FREE_PAGES {
                return Ok(false);
            }
            let n = (free - KEEP_FREE_PAGES).min(VACUUM_STEP_PAGES);
            // The pragma frees one page per step of its statement: run it to completion.
            let mut stmt = self.conn.prepare(&format!("PRAGMA incremental_vacuum({n})"))?;
            let mut rows = stmt.query([])?;
            while rows.next()?.is_some() {}
            Ok(true)
        };
        match step() {
            Ok(more) => self.vacuum_pending = more,
            Err(e) => {
                tracing::debug!(error = %e, "incremental vacuum failed");
                self.vacuum_pending = false;
            }
        }
        self.shared.stats.longest_chunk_micros.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    fn maybe_checkpoint(&mut self) {
        if self.shared.force_checkpoint.swap(false, Ordering::Relaxed) {
            // Most frames are already copied by the checkpointer, so this is short; afterwards
            // the next transaction starts the WAL over.
            if let Err(e) = self.conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                tracing::warn!(error = %e, "checkpoint failed");
            }
            self.shared.stats.forced_checkpoints.fetch_add(1, Ordering::Relaxed);
        }
    }
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

/// The checkpointer thread's loop: every [`CHECKPOINT_EVERY`] after new commits, copies WAL
/// frames into the database file without blocking the writer (a PASSIVE checkpoint takes no
/// write lock). Ends when the writer drops `stop`'s sender.
pub(super) fn checkpoint_loop(conn: Connection, stop: Receiver<()>, shared: Arc<Shared>) {
    let mut seen = (u64::MAX, u64::MAX);
    loop {
        match stop.recv_timeout(CHECKPOINT_EVERY) {
            Err(RecvTimeoutError::Disconnected) => break,
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
        }
        let now =
            (shared.stats.batches.load(Ordering::Relaxed), shared.stats.compaction_chunks.load(Ordering::Relaxed));
        if now == seen {
            continue;
        }
        seen = now;
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(1)) {
            Ok(log_frames) => {
                shared.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                if log_frames >= WAL_FORCE_CHECKPOINT_FRAMES {
                    shared.force_checkpoint.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => tracing::warn!(error = %e, "background checkpoint failed"),
        }
    }
}
