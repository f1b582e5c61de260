//! The log backend: audit events as JSON lines in a file (or stdout for `-`), written by a
//! thread of its own so that a slow disk never stalls a request — the request path only puts
//! the event into a bounded queue and, when it is full, drops it, counts and logs the drop, as
//! kube-apiserver's batch backend does (`--audit-log-mode=batch`, its buffer of 10,000 events).
//!
//! Rotation follows `--audit-log-maxsize` (megabytes), `--audit-log-maxbackup` (files kept) and
//! `--audit-log-maxage` (days kept) with lumberjack's naming, which kube-apiserver uses:
//! `audit.log` becomes `audit-2026-12-02T16-50-00.123.log` (UTC) and a new `audit.log` starts.
//! The few lines of rotation are written here: the rotation crates reviewed (file-rotate) keep
//! either a file count or an age, not both, and name backups differently.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Settings of the log backend (kube-apiserver's `--audit-log-*` flags).
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// `--audit-log-path`: the file, or `-` for standard output.
    pub path: PathBuf,
    /// `--audit-log-maxsize`: megabytes before the file is rotated (0: never).
    pub max_size_mb: u64,
    /// `--audit-log-maxbackup`: rotated files kept (0: no limit by count).
    pub max_backups: usize,
    /// `--audit-log-maxage`: days a rotated file is kept (0: no limit by age).
    pub max_age_days: u64,
    /// Events queued for the writer before new ones are dropped.
    pub buffer: usize,
}

/// Counters of the backend (exported as kube-apiserver's `apiserver_audit_event_total` and
/// `apiserver_audit_error_total{plugin="log"}`).
#[derive(Debug, Default)]
pub struct LogCounters {
    /// Events queued.
    pub events: AtomicU64,
    /// Events dropped because the queue was full or the file could not be written.
    pub dropped: AtomicU64,
}

/// A running log backend. Dropping it lets the writer finish the queued events and stop.
pub struct LogBackend {
    tx: std::sync::mpsc::SyncSender<Vec<u8>>,
    /// The counters.
    pub counters: Arc<LogCounters>,
}

impl LogBackend {
    /// Opens (appends to) the log file and starts its writer thread.
    ///
    /// # Errors
    /// The file or its directory cannot be created.
    pub fn start(opts: LogOptions) -> std::io::Result<LogBackend> {
        let mut out = Output::open(&opts)?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(opts.buffer.max(1));
        let counters = Arc::new(LogCounters::default());
        let c = counters.clone();
        std::thread::Builder::new().name("audit-log".into()).spawn(move || {
            while let Ok(line) = rx.recv() {
                if let Err(e) = out.write_line(&line, &opts) {
                    c.dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, path = %opts.path.display(), "writing the audit log failed; event dropped");
                }
            }
            let _ = out.flush();
        })?;
        Ok(LogBackend { tx, counters })
    }

    /// Queues one event (serialized as one JSON line). Never blocks: a full queue drops it.
    pub fn emit(&self, event: &serde_json::Value) {
        self.counters.events.fetch_add(1, Ordering::Relaxed);
        let mut line = serde_json::to_vec(event).unwrap_or_default();
        line.push(b'\n');
        if let Err(e) = self.tx.try_send(line) {
            let dropped = self.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // One line per power of two, so a stalled disk does not flood the server log.
            if dropped.is_power_of_two() {
                tracing::error!(dropped, reason = %e, "the audit log's buffer is full; audit events dropped");
            }
        }
    }
}

enum Output {
    Stdout,
    File { file: std::io::BufWriter<std::fs::File>, size: u64 },
}

impl Output {
    fn open(opts: &LogOptions) -> std::io::Result<Output> {
        if opts.path.as_os_str() == "-" {
            return Ok(Output::Stdout);
        }
        if let Some(dir) = opts.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&opts.path)?;
        let size = file.metadata()?.len();
        Ok(Output::File { file: std::io::BufWriter::new(file), size })
    }

    fn write_line(&mut self, line: &[u8], opts: &LogOptions) -> std::io::Result<()> {
        match self {
            Output::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(line)?;
                out.flush()
            }
            Output::File { file, size } => {
                let limit = opts.max_size_mb * 1024 * 1024;
                if limit > 0 && *size > 0 && *size + line.len() as u64 > limit {
                    file.flush()?;
                    rotate(&opts.path, SystemTime::now())?;
                    prune(&opts.path, opts.max_backups, opts.max_age_days, SystemTime::now())?;
                    *self = Output::open(opts)?;
                    return self.write_line(line, opts);
                }
                file.write_all(line)?;
                // Flushed per event: an audit line in a buffer is lost with the process.
                file.flush()?;
                *size += line.len() as u64;
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout => Ok(()),
            Output::File { file, .. } => file.flush(),
        }
    }
}

/// `audit.log` → `audit-<UTC time>.log` in the same directory (lumberjack's backup name).
fn backup_name(path: &Path, at: SystemTime) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let stamp = crate::util::rfc3339(since.as_secs() as i64).trim_end_matches('Z').replace(':', "-");
    path.with_file_name(format!("{stem}-{stamp}.{:03}{ext}", since.subsec_millis()))
}

fn rotate(path: &Path, now: SystemTime) -> std::io::Result<()> {
    std::fs::rename(path, backup_name(path, now))
}

/// The rotated files of `path`, oldest first (their names sort by time).
fn backups(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let stem = path.file_stem().map(|s| format!("{}-", s.to_string_lossy())).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .is_some_and(|n| n.starts_with(&stem) && n.ends_with(&ext))
                && p != path
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Removes rotated files beyond `max_backups` (oldest first) and older than `max_age_days`.
fn prune(path: &Path, max_backups: usize, max_age_days: u64, now: SystemTime) -> std::io::Result<()> {
    let mut files = backups(path)?;
    if max_backups > 0 && files.len() > max_backups {
        for old in files.drain(..files.len() - max_backups) {
            std::fs::remove_file(old)?;
        }
    }
    if max_age_days > 0 {
        let max_age = Duration::from_secs(max_age_days * 86_400);
        for f in files {
            let modified = std::fs::metadata(&f)?.modified()?;
            if now.duration_since(modified).unwrap_or_default() > max_age {
                std::fs::remove_file(f)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(path: PathBuf) -> LogOptions {
        LogOptions { path, max_size_mb: 1, max_backups: 2, max_age_days: 0, buffer: 16 }
    }

    #[test]
    fn a_backup_is_named_as_lumberjack_names_it() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_694_200_123);
        assert_eq!(
            backup_name(Path::new("/var/log/audit.log"), at),
            PathBuf::from("/var/log/audit-2025-12-02T16-50-00.123.log")
        );
    }

    #[test]
    fn a_full_file_is_rotated_and_only_max_backups_rotated_files_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let o = opts(path.clone());
        let mut out = Output::open(&o).unwrap();
        let line = vec![b'x'; 400 * 1024];
        // Four rotations, each a millisecond apart so the backups have distinct names.
        for _ in 0..10 {
            out.write_line(&line, &o).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let kept = backups(&path).unwrap();
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(kept.iter().all(|p| std::fs::metadata(p).unwrap().len() <= 1024 * 1024));
        assert!(std::fs::metadata(&path).unwrap().len() <= 1024 * 1024);
    }

    #[test]
    fn rotated_files_older_than_max_age_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let old = backup_name(&path, SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
        std::fs::write(&old, b"old").unwrap();
        std::fs::write(dir.path().join("unrelated.txt"), b"keep").unwrap();
        prune(&path, 0, 1, SystemTime::now() + Duration::from_secs(3 * 86_400)).unwrap();
        assert!(!old.exists());
        assert!(dir.path().join("unrelated.txt").exists());
    }

    #[test]
    fn a_full_queue_drops_events_and_counts_them_instead_of_blocking() {
        let (tx, _rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
        let backend = LogBackend { tx, counters: Arc::new(LogCounters::default()) };
        for _ in 0..5 {
            backend.emit(&serde_json::json!({"kind": "Event"}));
        }
        assert_eq!(backend.counters.events.load(Ordering::Relaxed), 5);
        assert_eq!(backend.counters.dropped.load(Ordering::Relaxed), 3);
    }
}
