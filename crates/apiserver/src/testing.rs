//! The in-process API server every crate's tests start (behind the `testing` feature): a real
//! [`ApiServer`] on a real SQLite store in a temporary directory, listening on a free loopback
//! port, with an admin `kube::Client`.
//!
//! ```no_run
//! # async fn demo() {
//! use skiff_apiserver::testing::TestApiServer;
//! let api = TestApiServer::start().await;
//! let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(api.client.clone());
//! # let _ = nodes;
//! // Or with the security pipeline as `skiff server` runs it:
//! let secure = TestApiServer::start_with(|config| config.rbac = true).await;
//! # let _ = secure;
//! # }
//! ```
//!
//! Tests that run the real `skiff` binary use `crates/skiff/tests/common` instead.

use std::sync::Arc;
use std::time::Duration;

use skiff_store::Backend;
use skiff_store::sqlite::SqliteBackend;

use crate::{ApiServer, Config};

/// The store options of [`TestApiServer::start`]: bookmarks every 200 ms, so watch tests do not
/// wait the production 5 s for one, and no background compaction, so a revision is compacted only
/// when a test compacts it.
pub const STORE_OPTIONS: skiff_store::Options =
    skiff_store::Options { compaction_interval: None, progress_interval: Duration::from_millis(200) };

/// How long [`TestApiServer`] waits for the watch caches to load before failing the test.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A running API server for a test, and what it runs on.
///
/// Fields drop in order: the server and clients before the directory they use. Nothing stops the
/// server on drop; tests that need a graceful stop call [`ApiServer::shutdown`] on `server`.
pub struct TestApiServer {
    /// The server, on `https://127.0.0.1:<free port>`.
    pub server: ApiServer,
    /// A client authenticated as `system:admin` (the admin kubeconfig's client certificate).
    pub client: kube::Client,
    /// The store the server runs on, for tests that read, write or compact it directly.
    pub store: Arc<dyn Backend>,
    /// The server's data directory (certificates, kubeconfig, join token) and the store's file
    /// (`state.db`); removed on drop.
    pub dir: tempfile::TempDir,
}

impl TestApiServer {
    /// Starts a server with [`Config::new`]'s defaults on loopback and [`STORE_OPTIONS`].
    ///
    /// # Panics
    /// When any step fails (temp dir, store, PKI, listener) or the caches are not ready within
    /// two minutes: the test cannot run.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// As [`TestApiServer::start`], with `configure` applied to the [`Config`] last (RBAC,
    /// admission, flow-control limits, …).
    ///
    /// # Panics
    /// As [`TestApiServer::start`].
    pub async fn start_with(configure: impl FnOnce(&mut Config)) -> Self {
        Self::start_with_store(STORE_OPTIONS, configure).await
    }

    /// As [`TestApiServer::start_with`], on a store opened with `store_options` (e.g. the
    /// production defaults, `skiff_store::Options::default()`).
    ///
    /// # Panics
    /// As [`TestApiServer::start`].
    pub async fn start_with_store(store_options: skiff_store::Options, configure: impl FnOnce(&mut Config)) -> Self {
        // The process-wide provider kube's and the server's rustls use; a second install fails
        // harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("creating a temp dir: {e}"));
        let mut config = Config::new(dir.path());
        config.bind_address = [127, 0, 0, 1].into();
        config.port = 0;
        configure(&mut config);
        let path = dir.path().join("state.db");
        let store: Arc<dyn Backend> = Arc::new(
            tokio::task::spawn_blocking(move || SqliteBackend::open(&path, store_options))
                .await
                .unwrap_or_else(|e| panic!("opening the store: {e}"))
                .unwrap_or_else(|e| panic!("opening the store: {e}")),
        );
        let server =
            ApiServer::start(config, store.clone()).await.unwrap_or_else(|e| panic!("starting the API server: {e:#}"));
        tokio::time::timeout(READY_TIMEOUT, server.wait_ready())
            .await
            .unwrap_or_else(|_| panic!("the API server's watch caches did not load within {READY_TIMEOUT:?}"));
        let client = server.client().await.unwrap_or_else(|e| panic!("building the admin client: {e:#}"));
        TestApiServer { server, client, store, dir }
    }
}
