//! The syncer thread (pipelined group commit): fsyncs the WAL once for every batch the writer
//! committed since its previous fsync, then makes them visible, publishes and answers them, so
//! that the fsync overlaps the writer's work on the next batches and nothing is seen or
//! acknowledged before it is durable.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::Instant;

use rusqlite::Connection;

use super::schema::{VALUE_AT, internal};
use super::shared::{Committed, Shared};
use super::writer::SLOW_COMMIT;
use crate::{Result, Revision};

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
