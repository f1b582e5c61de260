//! `skiff bench …`: benchmarks. Each prints its figures next to a baseline measured in the same
//! run (raw SQLite, raw etcd, an empty handler) and the ratio between them.

/// The benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {}

/// Runs one benchmark.
pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {}
}
