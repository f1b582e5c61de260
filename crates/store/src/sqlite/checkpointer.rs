//! The checkpointer thread, and the WAL restart windows it asks the writer for.
//!
//! The checkpointer copies WAL frames into the database file with PASSIVE checkpoints, which
//! take no write lock ([`checkpoint_loop`]); the writer never checkpoints. SQLite starts the WAL
//! over only when a write transaction begins while every frame is already copied, which never
//! happens while writes come back to back: once the WAL is long the checkpointer catches up and
//! asks the writer to hold its next batch back for a short window
//! ([`Writer::maybe_open_restart_window`]) in which it copies the last frames.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::shared::Shared;
use super::writer::Writer;

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
/// checkpoint in a window fsyncs the WAL and then the database file, which on a busy disk can
/// take longer than a short window: then the short windows never let a WAL written back to back
/// start over. Such a window holds writes back for a whole checkpoint of the last few frames,
/// so the limit is a safety valve for the disk, set far above what `skiff bench store` reaches,
/// not the common way the WAL starts over: writer stalls of more than a few milliseconds matter
/// more than the WAL's length (BENCHMARKS.md has the measurements).
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

impl Writer {
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

/// The checkpointer thread's loop: copies WAL frames into the database file with PASSIVE
/// checkpoints, which take no write lock and never block the writer: every
/// [`CHECKPOINT_EVERY`] when writes paused (the next write then starts the WAL over), while
/// compaction runs (its pages are not counted in `wal_bytes`), or after about
/// [`CHECKPOINT_BYTES`] of writes while they flow; at once when the writer opens a restart
/// window (`wake` carries its number; the answer goes to `done`). When the WAL reaches
/// `Shared::wal_restart`'s length it catches up, checkpoint after checkpoint, until the frames
/// left are few, then asks the writer for a window. Ends when the writer drops `wake`'s sender.
pub(super) fn checkpoint_loop(conn: Connection, wake: Receiver<u64>, done: Sender<(u64, bool)>, shared: Arc<Shared>) {
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
