//! `skiff bench audit`: what the audit log costs. Pod creates/s and the server's CPU per
//! create through two `skiff server`s side by side — one writing every request at `Metadata`
//! level to an audit log file, one without auditing — rounds alternating, and the ratio
//! (target: at most 10 % fewer creates/s).

use std::path::PathBuf;

use super::authorization::{Comparison, token_file_flag};

/// Flags of `skiff bench audit`.
#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// Pods created per server and round.
    #[arg(long, default_value_t = 2000)]
    creates: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Rounds per server, alternating off/on.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Directory for the servers' data directories (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Every request at Metadata level.
const POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n";

/// Runs the benchmark and prints its report.
///
/// # Errors
/// A server does not start or a create fails.
pub async fn run(args: AuditArgs) -> anyhow::Result<()> {
    let base = match &args.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let token = token_file_flag(base.path())?;
    let policy = base.path().join("audit-policy.yaml");
    std::fs::write(&policy, POLICY)?;
    let log = base.path().join("audit.log");
    let off = vec![token.clone()];
    let on =
        vec![token, format!("--audit-policy-file={}", policy.display()), format!("--audit-log-path={}", log.display())];
    let compare = Comparison { creates: args.creates, clients: args.clients, rounds: args.rounds };
    compare
        .run(
            "API creates with the audit log at Metadata for every request (on) vs no audit (off)",
            base.path(),
            &off,
            &on,
        )
        .await?;
    let lines = std::fs::read_to_string(&log).map(|t| t.lines().count()).unwrap_or_default();
    println!("  audit events written by the on server: {lines}");
    Ok(())
}
