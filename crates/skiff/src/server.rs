//! `skiff server`: the control plane and a local node in one process.

/// Flags of `skiff server` (names as k3s users know them).
#[derive(clap::Args, Debug)]
pub struct ServerArgs {}

/// Runs the server until SIGTERM/SIGINT.
pub async fn run(_args: ServerArgs) -> anyhow::Result<()> {
    anyhow::bail!("skiff server is not implemented yet")
}
