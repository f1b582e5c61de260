//! How transactions reach the kernel: the `nft` program's JSON interface (`nft -j -f -`, Debian's
//! `nftables` package), one process per transaction, which the kernel applies atomically.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};

/// Why a transaction was not applied.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// The program could not be started or fed (not installed, not permitted).
    #[error("running {program}: {source}")]
    Spawn {
        /// The program's command line.
        program: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `nft` refused the transaction; nothing of it was applied.
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        /// The program's command line.
        program: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr (the offending command).
        stderr: String,
    },
}

/// Applies nftables transactions.
pub trait NftBackend: Send + Sync {
    /// Applies `commands` (libnftables JSON commands) as one transaction: all or nothing.
    ///
    /// # Errors
    /// [`NftError`] when the transaction was not applied.
    fn apply(&self, commands: &[Value]) -> Result<(), NftError>;
}

/// The `nft` program, optionally behind a prefix such as `nsenter --net=/run/netns/x` (tests and
/// benchmarks program a network namespace of their own).
#[derive(Debug, Clone)]
pub struct NftCommand {
    argv: Vec<String>,
}

impl Default for NftCommand {
    fn default() -> Self {
        NftCommand { argv: vec!["nft".to_string()] }
    }
}

impl NftCommand {
    /// `nft` run through `argv` (whose last element is the `nft` program).
    pub fn new(argv: Vec<String>) -> Self {
        NftCommand { argv }
    }

    /// `nft` inside the network namespace `name` (`/run/netns/<name>`, as `ip netns add`
    /// makes), through `nsenter`.
    pub fn in_netns(name: &str) -> Self {
        NftCommand::new(vec!["nsenter".into(), format!("--net=/run/netns/{name}"), "nft".into()])
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]);
        cmd
    }

    /// Whether `nft --version` runs (the program is installed and can be started).
    pub fn is_available(&self) -> bool {
        self.command().arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    }

    /// `nft -j <args>`'s standard output (e.g. `list table ip skiff-proxy`).
    ///
    /// # Errors
    /// [`NftError`] when `nft` cannot run or fails.
    pub fn list(&self, args: &[&str]) -> Result<String, NftError> {
        let program = self.argv.join(" ");
        let out = self
            .command()
            .arg("-j")
            .args(args)
            .output()
            .map_err(|source| NftError::Spawn { program: program.clone(), source })?;
        if !out.status.success() {
            return Err(NftError::Failed {
                program,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl NftBackend for NftCommand {
    fn apply(&self, commands: &[Value]) -> Result<(), NftError> {
        let program = self.argv.join(" ");
        let body = serde_json::to_vec(&json!({ "nftables": commands })).unwrap_or_default();
        let mut child = self
            .command()
            .args(["-j", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| NftError::Spawn { program: program.clone(), source })?;
        let written = child.stdin.take().map(|mut stdin| stdin.write_all(&body));
        let out = child.wait_with_output().map_err(|source| NftError::Spawn { program: program.clone(), source })?;
        if let Some(Err(source)) = written
            && out.status.success()
        {
            return Err(NftError::Spawn { program, source });
        }
        if !out.status.success() {
            return Err(NftError::Failed {
                program,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(())
    }
}

/// A backend that only records the transactions (no kernel): unit tests, and nodes that keep
/// the proxy's bookkeeping without programming a kernel.
#[derive(Debug, Default, Clone)]
pub struct Bookkeeping {
    transactions: Arc<Mutex<Vec<Vec<Value>>>>,
    fail_next: Arc<Mutex<bool>>,
}

impl Bookkeeping {
    /// Every transaction applied so far, oldest first.
    pub fn transactions(&self) -> Vec<Vec<Value>> {
        self.transactions.lock().clone()
    }

    /// Makes the next [`NftBackend::apply`] fail (as `nft` refusing a transaction would).
    pub fn fail_next(&self) {
        *self.fail_next.lock() = true;
    }
}

impl NftBackend for Bookkeeping {
    fn apply(&self, commands: &[Value]) -> Result<(), NftError> {
        if std::mem::take(&mut *self.fail_next.lock()) {
            return Err(NftError::Failed {
                program: "bookkeeping".into(),
                status: "1".into(),
                stderr: "refused".into(),
            });
        }
        self.transactions.lock().push(commands.to_vec());
        Ok(())
    }
}
