//! Shared test harness: a real skiff API server on SQLite in a temporary directory.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use skiff_apiserver::{ApiServer, Config};
use skiff_store::Backend;
use skiff_store::sqlite::SqliteBackend;

/// A running API server and an admin client.
pub struct ApiHarness {
    pub dir: tempfile::TempDir,
    pub server: ApiServer,
    pub client: kube::Client,
}

/// Starts an API server on 127.0.0.1 (free port) with namespaces default and kube-node-lease.
pub async fn start_api_server() -> ApiHarness {
    start_api_server_with(false).await
}

/// As [`start_api_server`]; with `secure` the security pipeline as `skiff server` runs it
/// (authentication, RBAC, admission, TokenRequest).
pub async fn start_api_server_with(secure: bool) -> ApiHarness {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let opts = skiff_store::Options { compaction_interval: None, progress_interval: Duration::from_millis(200) };
    let store: Arc<dyn Backend> = Arc::new(
        SqliteBackend::open(&dir.path().join("state.db"), opts).unwrap_or_else(|e| panic!("opening sqlite: {e}")),
    );
    let mut config = Config::new(dir.path());
    config.bind_address = "127.0.0.1".parse().unwrap_or_else(|e| panic!("addr: {e}"));
    config.port = 0;
    config.rbac = secure;
    let server = ApiServer::start(config, store).await.unwrap_or_else(|e| panic!("starting the API server: {e}"));
    server.wait_ready().await;
    let client = server.client().await.unwrap_or_else(|e| panic!("client: {e}"));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["default", "kube-node-lease"] {
        let n =
            Namespace { metadata: ObjectMeta { name: Some(ns.into()), ..Default::default() }, ..Default::default() };
        match namespaces.create(&PostParams::default(), &n).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating namespace {ns}: {e}"),
        }
    }
    ApiHarness { dir, server, client }
}

/// Polls `f` every 100 ms until it yields Some, panicking with `what` after `secs` seconds.
pub async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    secs: u64,
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {secs}s waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
