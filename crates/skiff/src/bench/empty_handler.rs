//! `skiff bench empty-handler` (hidden): the transport ceiling for `skiff bench apiserver`. An
//! HTTPS server built like `skiff server`'s own serve path — rustls with the cluster's ECDSA
//! serving certificate and client-certificate verification against its CA, ALPN `h2` and
//! `http/1.1`, hyper-util's auto builder with upgrades behind
//! [`skiff_apiserver::server::batched_writes::BatchedIo`], an axum router, on the same tokio runtime
//! as `skiff server` (the binary's multi-threaded runtime: one worker per CPU) — whose handler
//! does nothing: every request but `GET /readyz` is answered `201 Created` with the same JSON
//! body (a stored pod, so a client decodes what it would decode from the real server).
//!
//! It runs in its own process so that its CPU per request can be read from /proc like the real
//! server's, and writes an admin kubeconfig pointing at itself to `<data-dir>/kubeconfig.yaml`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use skiff_apiserver::pki::Pki;
use skiff_apiserver::server::batched_writes::BatchedIo;

/// Flags of `skiff bench empty-handler`.
#[derive(clap::Args, Debug)]
pub struct EmptyHandlerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: std::net::IpAddr,
    /// HTTPS port.
    #[arg(long)]
    https_listen_port: u16,
    /// Where the kubeconfig pointing at this server is written.
    #[arg(long)]
    data_dir: PathBuf,
    /// A `skiff server`'s certificate directory (`<its data dir>/tls`): its CA, serving
    /// certificate and admin certificate are used as they are.
    #[arg(long)]
    pki_dir: PathBuf,
    /// File whose bytes answer every request (a pod as the real server returned it).
    #[arg(long)]
    response_file: PathBuf,
}

/// Serves until killed.
pub async fn run(args: EmptyHandlerArgs) -> anyhow::Result<()> {
    // No SANs asked for: the server's certificates are loaded as they are, never re-issued.
    let pki = Pki::load_or_generate(&args.pki_dir, &[])?;
    let tls = tokio_rustls::TlsAcceptor::from(Arc::new(skiff_apiserver::tls_config(&pki)?));
    let body = Bytes::from(
        std::fs::read(&args.response_file).with_context(|| format!("reading {}", args.response_file.display()))?,
    );
    let router = axum::Router::new().route("/readyz", axum::routing::get(|| async { "ok" })).fallback(
        move |_request: axum::body::Bytes| {
            let body = body.clone();
            async move { (hyper::StatusCode::CREATED, [(hyper::header::CONTENT_TYPE, "application/json")], body) }
        },
    );
    let listener = tokio::net::TcpListener::bind((args.bind_address, args.https_listen_port)).await?;
    let url = format!("https://{}", listener.local_addr()?);
    pki.write_kubeconfig(&args.data_dir.join("kubeconfig.yaml"), &url)?;
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let (tls, router) = (tls.clone(), router.clone());
        tokio::spawn(async move {
            let Ok(stream) = tls.accept(tcp).await else { return };
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            let io = BatchedIo::new(stream, h2);
            let service = hyper_util::service::TowerToHyperService::new(router);
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let _ =
                io.flush_after_poll(builder.serve_connection_with_upgrades(TokioIo::new(io.clone()), service)).await;
        });
    }
}
