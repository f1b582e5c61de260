//! The `skiff` binary: `skiff server`, `skiff bench …` and friends.
//!
//! Each subcommand lives in its own module with its own clap `Args` struct; this file only
//! dispatches.

use clap::{Parser, Subcommand};

mod bench;
mod components;
mod images;
mod server;

/// Kubernetes' core machinery in one small binary.
#[derive(Parser)]
#[command(name = "skiff", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane (API server, store, controllers, scheduler) and a local node.
    Server(server::ServerArgs),
    /// Run a benchmark and print its figures next to the baselines measured in the same run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Manage a node's container images without a registry.
    #[command(subcommand)]
    Images(images::ImagesCommand),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Server(args) => server::run(args).await,
            Command::Bench(cmd) => bench::run(cmd).await,
            Command::Images(cmd) => images::run(cmd).await,
        }
    })
}
