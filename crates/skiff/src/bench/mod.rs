//! `skiff bench …`: benchmarks. Each prints its figures next to a baseline measured in the same
//! run (raw SQLite, raw etcd, an empty handler) and the ratio between them.

mod store;

/// The benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Durable creates/s and latency of the store backends (embedded SQLite, etcd) next to raw
    /// SQLite inserts and raw etcd puts of the same bytes, at 1, 16 and 256 concurrent writers.
    Store(store::StoreArgs),
}

/// Runs one benchmark.
pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Store(args) => store::run(args).await,
    }
}
