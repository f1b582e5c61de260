//! The `skiff` binary: `skiff server`, `skiff bench …` and friends.
//!
//! Each subcommand lives in its own module with its own clap `Args` struct; this file only
//! dispatches.

use clap::{Parser, Subcommand};

mod agent;
mod bench;
mod components;
mod datastore;
mod images;
mod logging;
mod pidfile;
mod secretsencrypt;
mod server;

/// jemalloc as the process's allocator (feature `jemalloc`; `heap-profile` adds its sampled
/// heap profiling, read by `scripts/heap-breakdown`; see BENCHMARKS.md "Memory at scale").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Kubernetes' core machinery in one small binary.
#[derive(Parser)]
#[command(name = "skiff", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size difference between the subcommands' flags costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the control plane (API server, store, controllers, scheduler) and a local node.
    Server(server::ServerArgs),
    /// Join this machine (or simulated nodes) to a cluster as a node agent.
    Agent(agent::AgentArgs),
    /// Run a benchmark and print its figures next to the baselines measured in the same run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Move the datastore to etcd, or save and restore snapshots of it (server stopped).
    #[command(subcommand)]
    Datastore(datastore::DatastoreCommand),
    /// Re-encrypt every Secret with the current first encryption provider (after a key rotation).
    #[command(subcommand, name = "secrets-encrypt")]
    SecretsEncrypt(secretsencrypt::SecretsEncryptCommand),
    /// Manage a node's container images without a registry.
    #[command(subcommand)]
    Images(images::ImagesCommand),
    /// Stop everything a node left on this host (containerd, shims, containers, pod network
    /// namespaces and mounts under the data dir, the node's bridge), like k3s-killall.sh.
    Killall(KillallArgs),
}

/// Flags of `skiff killall`.
#[derive(clap::Args)]
struct KillallArgs {
    /// The node's data directory (as for `skiff server`).
    #[arg(long, short = 'd', env = "SKIFF_DATA_DIR")]
    data_dir: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The server and the agent take klog's verbosity flags; other subcommands log at info
    // (or as RUST_LOG says).
    match &cli.command {
        Command::Server(args) => logging::init(&args.logging)?,
        Command::Agent(args) => logging::init(&args.logging)?,
        _ => logging::init(&logging::LoggingArgs::default())?,
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Server(args) => server::run(args).await,
            Command::Agent(args) => agent::run(args).await,
            Command::Bench(cmd) => bench::run(cmd).await,
            Command::Images(cmd) => images::run(cmd).await,
            Command::Datastore(cmd) => datastore::run(cmd).await,
            Command::SecretsEncrypt(cmd) => secretsencrypt::run(cmd).await,
            Command::Killall(args) => {
                let dir = args.data_dir.unwrap_or_else(server::default_data_dir);
                let report = skiff_kubelet::killall::killall(&dir);
                eprintln!(
                    "killed {} processes, unmounted {} mounts under {}, deleted links: {}, deleted nftables tables: {}",
                    report.killed.len(),
                    report.unmounted.len(),
                    dir.display(),
                    if report.deleted_links.is_empty() { "none".to_string() } else { report.deleted_links.join(", ") },
                    if report.deleted_tables.is_empty() {
                        "none".to_string()
                    } else {
                        report.deleted_tables.join(", ")
                    }
                );
                Ok(())
            }
        }
    });
    // Every acknowledged write is durable by now and the store is closed; blocking tasks still
    // parked (a watch's reader, a DNS lookup) must not hold the exit for seconds.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    result
}
