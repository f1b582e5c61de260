//! Shared test helpers: the in-process API server (`skiff_apiserver::testing`) with test logging,
//! and polling with a deadline.

#![allow(dead_code)]

use std::time::Duration;

use skiff_apiserver::testing::TestApiServer;

/// Starts the shared in-process API server (see [`TestApiServer`]), with test logging.
pub async fn start_api_server() -> TestApiServer {
    start_api_server_with(false).await
}

/// As [`start_api_server`]; with `secure` the security pipeline as `skiff server` runs it
/// (authentication, RBAC, admission, TokenRequest).
pub async fn start_api_server_with(secure: bool) -> TestApiServer {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
    TestApiServer::start_with(|config| config.rbac = secure).await
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
