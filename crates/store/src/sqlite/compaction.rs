//! Compaction: the writer's compaction and vacuum steps, and the compaction reader thread.
//!
//! `compact(C)` records `C` durably at once ([`Writer::start_compaction`]); the history rows at
//! or below it go later. Compaction runs on the writer thread between batches, in transactions
//! bounded in time ([`COMPACTION_CHUNK_BUDGET`] of deletes, by revision, the table's primary
//! key), each followed by a pause at least as long in which writes go first, so a write waits at
//! most one short chunk and SQLite never reports "database is locked". The compaction reader
//! thread ([`compaction_read_loop`]) reads each step's rows ahead on its own connection, outside
//! any write transaction, so the writer's step only deletes. Once a compaction is done, vacuum
//! steps return free pages to the file system.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, params};

use super::schema::{internal, set_meta};
use super::shared::{CompactionRow, CompactionRows};
use super::writer::{SLOW_BACKGROUND_WAIT, Writer};
use crate::{Error, Result, Revision};

/// At most this many history rows are examined by one compaction transaction.
const COMPACTION_CHUNK: usize = 1024;
/// History rows the first compaction transaction reads; later ones adapt (up to
/// [`COMPACTION_CHUNK`]) so that reading and deleting a chunk takes about
/// [`COMPACTION_CHUNK_BUDGET`]: reading 1,024 rows of 2 KiB values alone can take longer than
/// the budget when their pages are not cached.
pub(super) const COMPACTION_FIRST_CHUNK: usize = 64;
/// How long one compaction (or vacuum) transaction may spend deleting before it commits: with
/// its commit, about the longest a write waits for compaction.
const COMPACTION_CHUNK_BUDGET: Duration = Duration::from_millis(1);
/// After a compaction or vacuum step that took `t`, the writer leaves the database to writes
/// for [`BACKGROUND_PAUSE_FACTOR`]` × t` (within these bounds) before the next step, whether
/// or not writes are waiting: compaction then takes a fifth of the writer's time at most, and
/// each durable commit flushes at most one step's pages besides its own.
const BACKGROUND_PAUSE_MIN: Duration = Duration::from_millis(1);
pub(super) const BACKGROUND_PAUSE_MAX: Duration = Duration::from_millis(20);
/// See [`BACKGROUND_PAUSE_MIN`].
const BACKGROUND_PAUSE_FACTOR: u32 = 4;
/// Free pages kept for reuse after a compaction; beyond this the file is shrunk.
const KEEP_FREE_PAGES: i64 = 2048;
/// Pages returned to the file system per vacuum step at most (one step per writer loop
/// iteration); the step size adapts so that a step takes about [`COMPACTION_CHUNK_BUDGET`].
const VACUUM_STEP_PAGES: i64 = 128;

impl Writer {
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
    pub(super) fn vacuum_step(&mut self) {
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
    answers: Sender<CompactionRows>,
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
