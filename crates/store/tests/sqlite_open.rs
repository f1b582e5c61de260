//! Opening the embedded store on files that are not healthy skiff databases: each is a clear
//! startup error naming the file, and the file is never replaced by a new empty store.

use std::path::Path;

use skiff_store::sqlite::SqliteBackend;
use skiff_store::{Backend, Error, Options};

fn corrupt_reason(path: &Path) -> String {
    match SqliteBackend::open(path, Options::default()) {
        Err(Error::Corrupt { path: named, reason }) => {
            assert_eq!(named, path.display().to_string(), "the error names the file");
            let shown = Error::Corrupt { path: named, reason: reason.clone() }.to_string();
            assert!(shown.contains(&path.display().to_string()), "the message names the file: {shown}");
            reason
        }
        Err(other) => panic!("{}: expected Corrupt, got {other}", path.display()),
        Ok(_) => panic!("{}: opened a file that is not a healthy skiff database", path.display()),
    }
}

#[test]
fn garbage_bytes_are_a_corrupt_error_and_stay_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("skiff.db");
    let garbage: Vec<u8> = (0..10_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(&path, &garbage).expect("write");
    let reason = corrupt_reason(&path);
    assert!(reason.contains("not an SQLite database"), "{reason}");
    assert_eq!(std::fs::read(&path).expect("read"), garbage, "the file is left as it was");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_database_is_a_corrupt_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("skiff.db");
    {
        let store = SqliteBackend::open(&path, Options::default()).expect("create");
        for i in 0..200 {
            store.create(&format!("/registry/pods/default/p{i}"), vec![b'x'; 4096]).await.expect("create");
        }
    }
    // The store's checkpointer copies the WAL in the background and need not have finished when
    // the store is dropped: checkpoint here so the data is in the file being truncated.
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).expect("checkpoint");
    drop(conn);
    let len = std::fs::metadata(&path).expect("metadata").len();
    assert!(len > 64 * 1024, "the store was checkpointed into the file ({len} bytes)");
    // Keep the header page only: the schema and the data are gone.
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..100]).expect("truncate");
    corrupt_reason(&path);
}

#[test]
fn an_unrelated_sqlite_database_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute_batch("CREATE TABLE kine (id INTEGER PRIMARY KEY, name TEXT);").expect("create");
    drop(conn);
    let reason = corrupt_reason(&path);
    assert!(reason.contains("not a skiff store"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_existing_refuses_to_start_an_empty_store_where_one_is_expected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("skiff.db");
    match SqliteBackend::open_existing(&path, Options::default()) {
        Err(Error::Corrupt { path: named, reason }) => {
            assert_eq!(named, path.display().to_string());
            assert!(reason.contains("does not exist"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(!path.exists(), "nothing was created");
    let store = SqliteBackend::open(&path, Options::default()).expect("create");
    store.create("/registry/namespaces/default", b"{}".to_vec()).await.expect("create");
    drop(store);
    let store = SqliteBackend::open_existing(&path, Options::default()).expect("reopen");
    assert!(store.get("/registry/namespaces/default").await.expect("get").is_some());
}
