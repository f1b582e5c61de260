//! The writer thread: group commit and compare-and-swap against an in-memory index.
//!
//! Every write goes through one thread that owns the only writing connection. It takes all
//! requests waiting in its queue (up to [`MAX_BATCH_OPS`] / [`MAX_BATCH_BYTES`]), validates each
//! in order against the index of live keys (`key → (create_revision, mod_revision)`, updated as
//! the batch proceeds so later writes in a batch see earlier ones), inserts one history row per
//! accepted write, and commits the batch as one transaction. With the syncer thread attached
//! (always, except in unit tests) the commit only writes the WAL and the syncer fsyncs it for
//! every batch committed meanwhile (see [`super::syncer::sync_loop`]); only then are the
//! revisions made visible, published to watchers and the callers answered. A rejected write
//! (conflict, exists, not found) is answered with its error and does not affect the rest of the
//! batch; a database failure fails the whole batch, rolls the index back and reloads it from
//! disk.
//!
//! A batch waits up to [`GATHER_WAIT`] for more writes only when the previous batch was large,
//! this one is still much smaller (the writers just answered are sending their next writes)
//! and the syncer is busy with an fsync (committing sooner would not make it durable sooner);
//! a lone writer never waits.
//!
//! Between batches the same thread runs compaction and vacuum steps (`compaction.rs`) and opens
//! the WAL restart windows the checkpointer asks for (`checkpointer.rs`); those files continue
//! `impl Writer`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::compaction::{BACKGROUND_PAUSE_MAX, COMPACTION_FIRST_CHUNK};
use super::hub::PendingEvent;
use super::schema::{VALUE_AT, internal, meta};
use super::shared::{
    CheckpointerLink, Committed, CompactionReaderLink, CompactionRow, Request, Shared, WriteOp, WriteOutcome,
};
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

/// Commits at least this long are logged at debug level (where a write's latency goes).
pub(super) const SLOW_COMMIT: Duration = Duration::from_millis(20);
/// Waits behind background work at least this long are logged at debug level.
pub(super) const SLOW_BACKGROUND_WAIT: Duration = Duration::from_millis(5);

const INSERT: &str = "INSERT INTO kv (rev, key, create_rev, prev_rev, deleted, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// A live key's revisions, as the writer's index holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeyMeta {
    pub(super) create_rev: Revision,
    pub(super) mod_rev: Revision,
}

/// The writer's state. Created at open (loading the index), then moved onto its thread.
pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) path: PathBuf,
    pub(super) index: HashMap<String, KeyMeta>,
    /// The last committed revision.
    pub(super) current: Revision,
    pub(super) compacted: Revision,
    pub(super) compact_cursor: Revision,
    pub(super) shared: Arc<Shared>,
    pub(super) compaction_interval: Option<Duration>,
    /// The syncer thread, which fsyncs the WAL for committed batches and then publishes and
    /// answers them; `None` (tests driving a bare writer) commits with `synchronous=FULL` and
    /// answers inline. Dropped with the writer, which stops that thread after its last group.
    pub(super) syncer: Option<std::sync::mpsc::Sender<Committed>>,
    /// The link to the checkpointer thread; dropped with the writer, which stops that thread.
    pub(super) checkpointer: Option<CheckpointerLink>,
    /// The link to the compaction reader thread, which reads the history rows of the next
    /// compaction steps ahead of time; `None` (tests driving a bare writer) reads them inside
    /// each step's transaction ([`Writer::compact_chunk`]).
    pub(super) compaction_reader: Option<CompactionReaderLink>,
    /// History rows read ahead by the compaction reader, in revision order: every row in
    /// `(compact_cursor, prefetched_through]`.
    pub(super) prefetched: std::collections::VecDeque<CompactionRow>,
    /// See [`Writer::prefetched`]; at or below `compact_cursor` when nothing is read ahead.
    pub(super) prefetched_through: Revision,
    /// The start (exclusive) of the range asked of the compaction reader and not answered yet.
    pub(super) prefetch_outstanding: Option<Revision>,
    /// The number of the last WAL restart window opened.
    pub(super) window_seq: u64,
    /// Since when the checkpointer's request for a restart window has been waiting for a
    /// moment with no write queued (see
    /// [`WAL_RESTART_DEFER`](super::checkpointer::WAL_RESTART_DEFER)).
    pub(super) window_requested_at: Option<Instant>,
    /// A compaction finished: shrink the file, a step at a time.
    pub(super) vacuum_pending: bool,
    /// Writes in the last committed batch.
    pub(super) last_batch: usize,
    /// Pages per vacuum step, adapted to
    /// [`COMPACTION_CHUNK_BUDGET`](super::compaction::COMPACTION_CHUNK_BUDGET).
    pub(super) vacuum_pages: i64,
    /// No background step (compaction chunk, vacuum step) starts before this.
    pub(super) background_not_before: Instant,
    /// History rows the next compaction transaction reads, adapted to
    /// [`COMPACTION_CHUNK_BUDGET`](super::compaction::COMPACTION_CHUNK_BUDGET).
    pub(super) compaction_rows: usize,
    /// Whether the current background step stops as soon as a write is queued (false when
    /// writes kept it waiting too long: it then stops only at its time budget).
    pub(super) background_yields: bool,
    /// When the last background step (compaction, vacuum, WAL restart window) started and ended,
    /// until the next batch: writes queued meanwhile waited for it.
    pub(super) last_background: Option<(Instant, Instant)>,
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
    pub(super) fn commit_sync(&self) -> &'static str {
        if self.syncer.is_some() { "NORMAL" } else { "FULL" }
    }

    /// The newest revision that is durable and published: what readers, watchers and
    /// compaction may see.
    pub(super) fn durable(&self) -> Revision {
        self.shared.current_rev.load(Ordering::SeqCst)
    }

    pub(super) fn set_checkpointer(&mut self, link: CheckpointerLink) {
        self.checkpointer = Some(link);
    }

    /// Attaches the compaction reader thread (see
    /// [`compaction_read_loop`](super::compaction::compaction_read_loop)).
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
