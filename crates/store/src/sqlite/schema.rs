//! The database file: schema, connection settings, creation and validation at open.
//!
//! Schema (version 1):
//! - `kv`: one row per revision, the whole history until compaction. `rev` is the revision (the
//!   rowid); `key` is the key's UTF-8 bytes stored as a BLOB so comparisons are bytewise like
//!   etcd's; `create_rev` is the revision that created this incarnation (0 on a tombstone);
//!   `prev_rev` is the mod_revision of the live value this write replaced (0 for a create);
//!   `deleted` is 1 on a tombstone (a delete), whose `value` is empty. Index `kv_key_rev` on
//!   `(key, rev)` serves gets, ranges at a revision and the startup index load.
//! - `meta`: named integers: `schema_version`, `compacted` (the compacted revision, recorded
//!   durably before any row is removed), `compact_cursor` (every row at or below it has been
//!   processed by the compactor; resumes an interrupted compaction) and `opens` (a counter).
//!
//! A new database is built under a temporary name and renamed into place, so a file at the
//! configured path is always a complete skiff database; anything else there is reported as
//! [`Error::Corrupt`] naming the file, never replaced.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, params};

use crate::{Error, Result, Revision};

/// `PRAGMA application_id` of a skiff store: the bytes `skff`.
pub(super) const APPLICATION_ID: i32 = 0x736b_6666;
/// The schema version this code reads and writes.
pub(super) const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE kv (
    rev INTEGER PRIMARY KEY,
    key BLOB NOT NULL,
    create_rev INTEGER NOT NULL,
    prev_rev INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    value BLOB NOT NULL
);
CREATE INDEX kv_key_rev ON kv (key, rev);
INSERT INTO meta (name, value) VALUES
    ('schema_version', 1), ('compacted', 0), ('compact_cursor', 0), ('opens', 0);
";

/// Page size of a new database, in bytes. Smaller than SQLite's default 4096 because every
/// write dirties a leaf page of the `(key, rev)` index at a place of its own, and a commit
/// writes (and fsyncs) whole pages into the WAL: with 2 KiB pages a write of a typical 2 KiB
/// object costs about 4.5 KiB of WAL instead of about 7 KiB (its row needs one overflow page
/// either way). Existing databases keep the page size they were created with.
pub const PAGE_SIZE: i64 = 2048;

/// How long any connection waits for a lock before failing. Only the writer thread writes, so
/// waits are short (WAL recovery at open, a checkpoint's brief exclusive moments); a generous
/// timeout means "database is locked" never reaches a caller.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// `PRAGMA` settings of the writer connection: WAL with a full sync of the log on every commit
/// (so an acknowledged write survives power loss), no automatic checkpoints in the commit path
/// (the checkpointer thread does them), and a 32 MiB page cache.
pub const WRITER_PRAGMAS: &[(&str, &str)] = &[
    ("synchronous", "FULL"),
    ("wal_autocheckpoint", "0"),
    ("journal_size_limit", "67108864"),
    ("cache_size", "-32768"),
    ("temp_store", "MEMORY"),
];

/// Applies the durability settings the backend commits with (WAL, `synchronous=FULL`) to any
/// connection: the raw-SQLite baseline of `skiff bench store` uses it so that both sides pay
/// the same fsyncs.
pub fn configure_durable_connection(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::InvalidQuery);
    }
    conn.pragma_update(None, "synchronous", "FULL")
}

/// The value of the history row at revision `?1`.
pub(super) const VALUE_AT: &str = "SELECT value FROM kv WHERE rev = ?1";

/// Reads `meta.name`.
pub(super) fn meta(conn: &Connection, name: &str) -> rusqlite::Result<Revision> {
    conn.prepare_cached("SELECT value FROM meta WHERE name = ?1")?.query_row([name], |r| r.get(0))
}

/// Sets `meta.name`.
pub(super) fn set_meta(conn: &Connection, name: &str, value: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE meta SET value = ?2 WHERE name = ?1")?.execute(params![name, value])?;
    Ok(())
}

pub(super) fn corrupt(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::Corrupt { path: path.display().to_string(), reason: reason.to_string() }
}

pub(super) fn internal(path: &Path, e: rusqlite::Error) -> Error {
    Error::Internal(format!("sqlite {}: {e}", path.display()))
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The write-ahead log file SQLite keeps next to the database.
pub(super) fn wal_path(path: &Path) -> PathBuf {
    sidecar(path, "-wal")
}

/// Whether to create the database when the file does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Create {
    IfMissing,
    Never,
}

/// Makes sure `path` holds a valid skiff database, creating it first when it does not exist and
/// `create` allows. Errors name the file.
pub(super) fn prepare(path: &Path, create: Create) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => validate(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if wal_path(path).exists() {
                return Err(corrupt(
                    path,
                    format!(
                        "the database file is missing but its write-ahead log {} exists; restore the file \
                         instead of starting an empty store",
                        wal_path(path).display()
                    ),
                ));
            }
            match create {
                Create::IfMissing => create_new(path),
                Create::Never => Err(corrupt(path, "the database file does not exist")),
            }
        }
        Err(e) => Err(corrupt(path, format!("cannot inspect the database file: {e}"))),
    }
}

fn create_new(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(corrupt(path, format!("cannot create the database: directory {} does not exist", dir.display())));
    }
    let tmp = sidecar(path, ".creating");
    for leftover in [tmp.clone(), sidecar(&tmp, "-wal"), sidecar(&tmp, "-shm"), sidecar(&tmp, "-journal")] {
        match std::fs::remove_file(&leftover) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(corrupt(path, format!("cannot remove {}: {e}", leftover.display()))),
        }
    }
    let build = || -> rusqlite::Result<()> {
        let conn = Connection::open_with_flags(
            &tmp,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // Page-level settings must precede the first table, and the page size must come first
        // of all (setting the application id already fixes it).
        conn.pragma_update(None, "page_size", PAGE_SIZE)?;
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        conn.pragma_update(None, "application_id", APPLICATION_ID)?;
        configure_durable_connection(&conn)?;
        conn.execute_batch(&format!("BEGIN; {SCHEMA} COMMIT;"))?;
        conn.close().map_err(|(_, e)| e)
    };
    build().map_err(|e| corrupt(path, format!("cannot create the database: {e}")))?;
    let sync = |p: &Path| std::fs::File::open(p).and_then(|f| f.sync_all());
    sync(&tmp).map_err(|e| corrupt(path, format!("cannot sync the new database: {e}")))?;
    std::fs::rename(&tmp, path).map_err(|e| corrupt(path, format!("cannot move the new database into place: {e}")))?;
    sync(&dir).map_err(|e| corrupt(path, format!("cannot sync directory {}: {e}", dir.display())))?;
    Ok(())
}

/// Checks that an existing file is a skiff database of a version this code understands.
fn validate(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| corrupt(path, format!("cannot read the database file: {e}")))?;
    if !meta.is_file() {
        return Err(corrupt(path, "not a regular file"));
    }
    let mut header = [0u8; 16];
    {
        use std::io::Read;
        let mut f =
            std::fs::File::open(path).map_err(|e| corrupt(path, format!("cannot open the database file: {e}")))?;
        let mut n = 0;
        while n < header.len() {
            match f.read(&mut header[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) => return Err(corrupt(path, format!("cannot read the database file: {e}"))),
            }
        }
        if n == 0 {
            return Err(corrupt(path, "the file is empty, not a skiff database"));
        }
        if n < header.len() || &header != b"SQLite format 3\0" {
            return Err(corrupt(path, "not an SQLite database (bad header); the file is corrupt or not a skiff store"));
        }
    }
    let conn = open_connection(path, false)?;
    let check = || -> rusqlite::Result<std::result::Result<(), String>> {
        let app: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        if app != APPLICATION_ID {
            return Ok(Err(format!("an SQLite database but not a skiff store (application_id {app:#x})")));
        }
        let has_meta: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'meta')",
            [],
            |r| r.get(0),
        )?;
        if !has_meta {
            return Ok(Err("a skiff store without its schema (no meta table)".into()));
        }
        let version: Option<i64> = conn
            .query_row("SELECT value FROM meta WHERE name = 'schema_version'", [], |r| r.get(0))
            .map(Some)
            .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })?;
        match version {
            Some(SCHEMA_VERSION) => {}
            Some(v) => {
                return Ok(Err(format!("schema version {v} is not supported (this skiff reads {SCHEMA_VERSION})")));
            }
            None => return Ok(Err("no schema version recorded".into())),
        }
        // Every column and the index the backend relies on.
        conn.prepare("SELECT rev, key, create_rev, prev_rev, deleted, value FROM kv INDEXED BY kv_key_rev LIMIT 0")?;
        for name in ["compacted", "compact_cursor", "opens"] {
            let n: i64 = conn.query_row("SELECT COUNT(*) FROM meta WHERE name = ?1", [name], |r| r.get(0))?;
            if n != 1 {
                return Ok(Err(format!("meta entry {name:?} is missing")));
            }
        }
        Ok(Ok(()))
    };
    match check() {
        Ok(Ok(())) => Ok(()),
        Ok(Err(reason)) => Err(corrupt(path, reason)),
        Err(e) => Err(corrupt(path, format!("not a valid skiff database: {e}"))),
    }
}

/// Opens a connection to an existing database (never creates one). The writer connection gets
/// [`WRITER_PRAGMAS`]; readers are `query_only`.
pub(super) fn open_connection(path: &Path, writer: bool) -> Result<Connection> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(|e| corrupt(path, format!("cannot open: {e}")))?;
    let setup = || -> rusqlite::Result<()> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.set_prepared_statement_cache_capacity(32);
        if writer {
            let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(rusqlite::Error::InvalidQuery);
            }
            for (name, value) in WRITER_PRAGMAS {
                conn.pragma_update(None, name, value)?;
            }
        } else {
            conn.pragma_update(None, "cache_size", "-8192")?;
            conn.pragma_update(None, "query_only", "1")?;
        }
        Ok(())
    };
    setup().map_err(|e| corrupt(path, format!("cannot configure the connection: {e}")))?;
    Ok(conn)
}

/// Holds an exclusive lock on `<db>-lock` for as long as it lives, so that one database is
/// never written by two backends (two processes, or two opens in one process) at once: two
/// writers with separate in-memory indexes would break compare-and-swap.
pub(super) struct OwnerLock {
    _conn: Connection,
}

impl OwnerLock {
    pub(super) fn acquire(path: &Path) -> Result<Self> {
        let lock_path = sidecar(path, "-lock");
        let conn = Connection::open_with_flags(
            &lock_path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| corrupt(path, format!("cannot open lock file {}: {e}", lock_path.display())))?;
        let take = || -> rusqlite::Result<()> {
            conn.busy_timeout(Duration::ZERO)?;
            conn.pragma_update(None, "journal_mode", "DELETE")?;
            conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
            conn.execute_batch(
                "BEGIN EXCLUSIVE; CREATE TABLE IF NOT EXISTS owner (pid INTEGER); DELETE FROM owner; COMMIT;",
            )
        };
        match take() {
            Ok(()) => Ok(Self { _conn: conn }),
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => Err(corrupt(
                path,
                "the database is in use by another skiff store (another process, or a second open in this one)",
            )),
            Err(e) => Err(corrupt(path, format!("cannot lock {}: {e}", lock_path.display()))),
        }
    }
}
