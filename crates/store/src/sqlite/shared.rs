//! What the backend handle and the store's threads share: [`Shared`] (the revisions, the watch
//! hub, the counters, the flags the threads set for each other, the read pool), the WAL restart
//! settings, and the messages that cross threads — writes and their outcomes, committed batches,
//! and the writer's links to the checkpointer and the compaction reader. Each thread's logic is
//! in its own file: `writer.rs`, `syncer.rs`, `compaction.rs` (with the compaction reader) and
//! `checkpointer.rs`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::Connection;
use tokio::sync::oneshot;

use super::MAX_READERS;
use super::checkpointer::{WAL_LIMIT_BYTES, WAL_LIMIT_WINDOW, WAL_RESTART_BYTES, WAL_RESTART_WINDOW};
use super::hub::{Hub, PendingEvent};
use super::schema::{self, internal};
use crate::{Error, KeyValue, Result, Revision};

/// The counters behind [`super::SqliteStats`], kept by the threads that do the work.
#[derive(Default)]
pub(super) struct Stats {
    pub(super) batches: AtomicU64,
    pub(super) syncs: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) compaction_chunks: AtomicU64,
    pub(super) compact_cursor: AtomicI64,
    pub(super) longest_chunk_micros: AtomicU64,
    pub(super) checkpoints: AtomicU64,
    pub(super) restart_windows: AtomicU64,
    pub(super) restart_windows_caught_up: AtomicU64,
    pub(super) restart_windows_skipped: AtomicU64,
    pub(super) restart_windows_forced: AtomicU64,
    pub(super) wal_restarts: AtomicU64,
    pub(super) longest_wal_bytes: AtomicU64,
    /// About how many bytes were committed since the last background checkpoint.
    pub(super) wal_bytes: AtomicU64,
    pub(super) longest_queue_wait_micros: AtomicU64,
    pub(super) longest_background_wait_micros: AtomicU64,
    pub(super) longest_commit_micros: AtomicU64,
}

/// When the WAL is started over while writes come back to back (see `checkpointer.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct WalRestart {
    /// WAL length at which the checkpointer asks the writer for a restart window, in bytes.
    pub(super) bytes: i64,
    /// The longest the writer holds its next batch back in such a window.
    pub(super) window: Duration,
    /// WAL length beyond which a window waits for the checkpoint up to `limit_window`, in bytes.
    pub(super) limit_bytes: i64,
    /// The longest the writer holds its next batch back once the WAL passed `limit_bytes`.
    pub(super) limit_window: Duration,
}

impl Default for WalRestart {
    fn default() -> Self {
        Self {
            bytes: WAL_RESTART_BYTES,
            window: WAL_RESTART_WINDOW,
            limit_bytes: WAL_LIMIT_BYTES,
            limit_window: WAL_LIMIT_WINDOW,
        }
    }
}

/// State shared by the backend handle, the store's threads and watch tasks.
pub(super) struct Shared {
    pub(super) path: PathBuf,
    /// The last committed revision (set by the writer after each commit).
    pub(super) current_rev: AtomicI64,
    /// The compacted revision (set by the writer once recorded durably).
    pub(super) compacted_rev: AtomicI64,
    pub(super) hub: Hub,
    pub(super) stats: Stats,
    /// The syncer thread is fsyncing the WAL (the writer then gathers larger batches).
    pub(super) syncing: AtomicBool,
    /// An fsync of the WAL failed: every later write fails until the store is reopened.
    pub(super) sync_failed: AtomicBool,
    /// Set by the checkpointer when the WAL keeps growing; the writer then opens a restart
    /// window (see `Writer::maybe_open_restart_window`).
    pub(super) restart_requested: AtomicBool,
    /// The requested window is for a WAL past `WalRestart::limit_bytes`: it waits up to
    /// `WalRestart::limit_window` for the checkpoint.
    pub(super) restart_forced: AtomicBool,
    /// When the checkpointer asks for a restart window, and how long the writer waits.
    pub(super) wal_restart: WalRestart,
    /// Writes sent to the writer thread and not yet taken into a batch: background work
    /// (compaction, vacuum) ends its transaction early when one is waiting.
    pub(super) queued_writes: AtomicUsize,
    pub(super) readers: Mutex<Vec<Connection>>,
    pub(super) readers_closed: AtomicBool,
    pub(super) read_permits: tokio::sync::Semaphore,
    pub(super) progress_interval: Duration,
}

impl Shared {
    /// Runs `f` on a pooled read connection (blocking; call from `spawn_blocking`).
    pub(super) fn with_reader<R>(&self, f: impl FnOnce(&mut Connection) -> Result<R>) -> Result<R> {
        if self.readers_closed.load(Ordering::SeqCst) {
            return Err(Error::Unavailable(format!("store {} is closed", self.path.display())));
        }
        let pooled = self.readers.lock().pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => schema::open_connection(&self.path, false)?,
        };
        let result = f(&mut conn);
        if conn.is_autocommit() && !self.readers_closed.load(Ordering::SeqCst) {
            let mut idle = self.readers.lock();
            if idle.len() < MAX_READERS {
                idle.push(conn);
            }
        }
        result
    }

    pub(super) fn err(&self, e: rusqlite::Error) -> Error {
        internal(&self.path, e)
    }
}

/// One write request.
#[derive(Debug)]
pub(super) enum WriteOp {
    Create { key: String, value: Vec<u8> },
    Update { key: String, value: Vec<u8>, expected: Revision },
    Delete { key: String, expected: Option<Revision> },
}

impl WriteOp {
    pub(super) fn bytes(&self) -> usize {
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

/// A batch committed to the WAL (not yet fsynced, when a syncer runs), with what to publish and
/// answer once it is durable.
pub(super) struct Committed {
    pub(super) rev: Revision,
    pub(super) events: Vec<PendingEvent>,
    pub(super) replies: Vec<(oneshot::Sender<Result<WriteOutcome>>, Result<WriteOutcome>)>,
}

impl Committed {
    /// The batch is durable: makes its revision visible to readers, publishes it to watchers
    /// and answers its callers, in that order.
    pub(super) fn finish(mut self, shared: &Shared, load: &mut dyn FnMut(Revision) -> Result<Vec<u8>>) {
        shared.current_rev.fetch_max(self.rev, Ordering::SeqCst);
        shared.hub.publish(self.rev, &mut self.events, load);
        for (reply, result) in self.replies {
            let _ = reply.send(result);
        }
    }

    /// The batch's fate on disk is unknown (its fsync failed): fails every caller with `msg`.
    pub(super) fn fail(self, msg: &str) {
        for (reply, _) in self.replies {
            let _ = reply.send(Err(Error::Internal(msg.to_string())));
        }
    }
}

/// The writer's ends of its channels to the checkpointer thread.
pub(super) struct CheckpointerLink {
    /// Opens restart window number `n` (the checkpointer checkpoints at once); dropping it
    /// stops the checkpointer.
    pub(super) wake: SyncSender<u64>,
    /// `(n, caught_up)`: the checkpoint for window `n` ended, and whether it copied the whole WAL.
    pub(super) done: Receiver<(u64, bool)>,
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
    pub(super) after: Revision,
    pub(super) through: Revision,
    pub(super) rows: Vec<CompactionRow>,
}

/// The writer's ends of its channels to the compaction reader thread.
pub(super) struct CompactionReaderLink {
    /// `(after, target, n)`: read up to `n` history rows in `(after, target]`. Dropping it
    /// stops the reader.
    pub(super) request: SyncSender<(Revision, Revision, usize)>,
    pub(super) rows: Receiver<CompactionRows>,
}
