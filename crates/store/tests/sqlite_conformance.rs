//! The shared conformance suite against the embedded SQLite backend, on files in temp dirs.

use std::sync::Arc;
use std::time::Duration;

use skiff_store::conformance::Harness;
use skiff_store::sqlite::SqliteBackend;
use skiff_store::{Backend, Options};

/// A fresh database file per case; `open` reopens the same file.
struct SqliteHarness {
    dir: tempfile::TempDir,
}

#[async_trait::async_trait]
impl Harness for SqliteHarness {
    async fn open(&mut self) -> Arc<dyn Backend> {
        let opts = Options { progress_interval: Duration::from_millis(200), compaction_interval: None };
        let path = self.dir.path().join("skiff.db");
        match SqliteBackend::open(&path, opts) {
            Ok(store) => Arc::new(store),
            Err(e) => panic!("open {}: {e}", path.display()),
        }
    }
}

skiff_store::conformance_tests!(|| async { SqliteHarness { dir: tempfile::tempdir().expect("tempdir") } });
