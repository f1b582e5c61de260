//! A real `etcd` for tests and benchmarks: one member or an N-member cluster on free loopback
//! ports, with data in a temporary directory, members that can be killed, stopped and restarted.
//!
//! Not part of the store's API: tests (`crates/*/tests/`) and `skiff bench` use it. It runs the
//! `etcd` binary from `$ETCD_BIN` or `PATH` (Debian package `etcd-server`, 3.4).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use skiff_store::etcd::harness::EtcdCluster;
//! let mut cluster = EtcdCluster::start(3).await?;
//! let config = cluster.config(); // EtcdConfig with every member's client URL
//! cluster.kill(0)?;              // SIGKILL one member
//! cluster.restart(0).await?;     // same data dir and ports
//! # Ok(()) }
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions};

use super::{EtcdConfig, EtcdTls, tls_options};
use crate::MAX_VALUE_BYTES;

/// How long a member (or the whole cluster) may take to answer after being started.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a graceful stop waits for the process before killing it.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Set this environment variable to keep the data dirs and logs of every cluster (for
/// debugging a failed test); they are removed otherwise.
pub const KEEP_ENV: &str = "SKIFF_ETCD_KEEP";

/// util-linux's `setpriv`, used to tie etcd's life to the test process.
const SETPRIV: &str = "/usr/bin/setpriv";

/// How often port allocation is retried when a freshly picked port was taken meanwhile.
const START_ATTEMPTS: usize = 3;

/// Settings for [`EtcdCluster::start_with`].
#[derive(Debug, Clone)]
pub struct HarnessOptions {
    /// Number of members (1, 3, 5…).
    pub members: usize,
    /// etcd's `--quota-backend-bytes`. Default 8 GiB so that benchmarks do not hit etcd's
    /// 2 GiB default quota.
    pub quota_backend_bytes: u64,
    /// etcd's `--max-request-bytes`. Default: [`MAX_VALUE_BYTES`] plus 512 KiB, so that a value
    /// of exactly the store's limit fits in one request along with its key and txn framing.
    pub max_request_bytes: usize,
    /// Parent directory for the temporary data directory; `None` uses the system temp dir.
    pub parent_dir: Option<PathBuf>,
    /// Extra command-line flags given to every member.
    pub extra_args: Vec<String>,
    /// Serve clients over TLS with these files (peers stay on plain HTTP). `None`: plain HTTP.
    pub tls: Option<HarnessTls>,
}

/// PEM files for an etcd that serves clients over TLS and requires client certificates
/// (`--cert-file`, `--key-file`, `--trusted-ca-file`, `--client-cert-auth`).
#[derive(Debug, Clone)]
pub struct HarnessTls {
    /// CA that signed both the server and the client certificate.
    pub ca_file: PathBuf,
    /// The members' serving certificate; must be valid for `127.0.0.1`.
    pub server_cert_file: PathBuf,
    /// Its key.
    pub server_key_file: PathBuf,
    /// A client certificate the harness itself (and [`EtcdCluster::config`]) uses.
    pub client_cert_file: PathBuf,
    /// Its key.
    pub client_key_file: PathBuf,
}

impl HarnessTls {
    /// The client side of these files, as [`EtcdConfig::tls`] takes them.
    pub fn client(&self) -> EtcdTls {
        EtcdTls {
            ca_file: Some(self.ca_file.clone()),
            cert_file: Some(self.client_cert_file.clone()),
            key_file: Some(self.client_key_file.clone()),
        }
    }
}

impl Default for HarnessOptions {
    fn default() -> Self {
        Self {
            members: 1,
            quota_backend_bytes: 8 << 30,
            max_request_bytes: MAX_VALUE_BYTES + 512 * 1024,
            parent_dir: None,
            extra_args: Vec::new(),
            tls: None,
        }
    }
}

/// One etcd member process.
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    /// Whether clients talk TLS to it.
    tls: bool,
}

impl Member {
    fn client_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }
}

/// A running etcd cluster owned by the test; every member is killed when it is dropped and the
/// data directory removed.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    options: HarnessOptions,
    // Declared last: removed after the processes are gone.
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts a cluster of `members` members with default options and waits until it serves
    /// linearizable reads.
    ///
    /// # Errors
    /// `NotFound` when no `etcd` binary exists; any other I/O error, or a member that exits
    /// or does not answer within a minute (the error quotes the end of its log).
    pub async fn start(members: usize) -> io::Result<Self> {
        Self::start_with(HarnessOptions { members, ..HarnessOptions::default() }).await
    }

    /// Starts a cluster with these options; see [`EtcdCluster::start`].
    pub async fn start_with(options: HarnessOptions) -> io::Result<Self> {
        if options.members == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an etcd cluster needs at least one member"));
        }
        let binary = etcd_binary()?;
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(&binary, options.clone()).await {
                Ok(cluster) => return Ok(cluster),
                // Most likely a port was taken between picking and binding it: retry.
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    async fn try_start(binary: &Path, options: HarnessOptions) -> io::Result<Self> {
        let mut dir = match &options.parent_dir {
            Some(parent) => tempfile::Builder::new().prefix("skiff-etcd-").tempdir_in(parent)?,
            None => tempfile::Builder::new().prefix("skiff-etcd-").tempdir()?,
        };
        if std::env::var_os(KEEP_ENV).is_some() {
            dir.disable_cleanup(true);
            eprintln!("etcd harness: keeping {} ({KEEP_ENV} is set)", dir.path().display());
        }
        let ports = free_ports(options.members * 2)?;
        let members: Vec<Member> = (0..options.members)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                data_dir: dir.path().join(format!("m{i}.etcd")),
                log_path: dir.path().join(format!("m{i}.log")),
                child: None,
                tls: options.tls.is_some(),
            })
            .collect();
        let initial_cluster =
            members.iter().map(|m| format!("{}={}", m.name, m.peer_url())).collect::<Vec<_>>().join(",");
        let token = format!("skiff-test-{}", dir.path().file_name().and_then(|n| n.to_str()).unwrap_or("cluster"));
        let mut cluster = Self { members, initial_cluster, token, options, dir };
        for i in 0..cluster.members.len() {
            cluster.spawn(binary, i)?;
        }
        cluster.wait_ready_all().await?;
        Ok(cluster)
    }

    /// Starts member `i`'s process (whose data dir may already exist).
    fn spawn(&mut self, binary: &Path, i: usize) -> io::Result<()> {
        let m = &self.members[i];
        let log = OpenOptions::new().create(true).append(true).open(&m.log_path)?;
        // When util-linux's setpriv is there, etcd gets SIGKILL if the spawning thread dies, so a
        // test process killed by a timeout leaves no etcd behind on a shared machine.
        let mut cmd = if Path::new(SETPRIV).is_file() {
            let mut cmd = Command::new(SETPRIV);
            cmd.args(["--pdeathsig", "KILL", "--"]).arg(binary);
            cmd
        } else {
            Command::new(binary)
        };
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&m.data_dir)
            .arg("--listen-client-urls")
            .arg(m.client_url())
            .arg("--advertise-client-urls")
            .arg(m.client_url())
            .arg("--listen-peer-urls")
            .arg(m.peer_url())
            .arg("--initial-advertise-peer-urls")
            .arg(m.peer_url())
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .arg("--quota-backend-bytes")
            .arg(self.options.quota_backend_bytes.to_string())
            .arg("--max-request-bytes")
            .arg(self.options.max_request_bytes.to_string())
            .arg("--logger")
            .arg("zap")
            .arg("--log-outputs")
            .arg("stderr")
            .arg("--log-level")
            .arg("warn")
            .args(&self.options.extra_args)
            .args(self.options.tls.iter().flat_map(|tls| {
                [
                    "--cert-file".into(),
                    tls.server_cert_file.clone().into_os_string(),
                    "--key-file".into(),
                    tls.server_key_file.clone().into_os_string(),
                    "--trusted-ca-file".into(),
                    tls.ca_file.clone().into_os_string(),
                    "--client-cert-auth".into(),
                ]
            }))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd.spawn().map_err(|e| {
            io::Error::new(e.kind(), format!("cannot run {} (Debian package etcd-server): {e}", binary.display()))
        })?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The client URL of member `i`, e.g. `http://127.0.0.1:40123`.
    ///
    /// # Panics
    /// When `i` is not a member index (a bug in the test).
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].client_url()
    }

    /// The client URLs of every member.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::client_url).collect()
    }

    /// An [`EtcdConfig`] naming every member (with the client certificate when the cluster
    /// serves TLS).
    pub fn config(&self) -> EtcdConfig {
        let mut config = EtcdConfig::new(self.endpoints());
        config.tls = self.options.tls.as_ref().map(HarnessTls::client);
        config
    }

    /// The temporary directory holding the members' data dirs and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether member `i`'s process is running.
    pub fn is_running(&mut self, i: usize) -> bool {
        match self.members[i].child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills member `i` with SIGKILL and reaps it. A no-op when it is not running.
    pub fn kill(&mut self, i: usize) -> io::Result<()> {
        if let Some(mut child) = self.members[i].child.take() {
            match child.kill() {
                Ok(()) => {}
                // Already exited.
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => {}
                Err(e) => return Err(e),
            }
            child.wait()?;
        }
        Ok(())
    }

    /// Stops member `i` gracefully (SIGTERM, SIGKILL after 10 s) and reaps it.
    pub fn stop(&mut self, i: usize) -> io::Result<()> {
        let Some(mut child) = self.members[i].child.take() else { return Ok(()) };
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = rustix::process::Pid::from_child(&child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        child.wait()?;
        Ok(())
    }

    /// Restarts member `i` (after [`kill`](Self::kill) or [`stop`](Self::stop)) with its data
    /// dir and ports, and waits until it serves linearizable reads again (for a cluster: until
    /// it has rejoined a leader).
    pub async fn restart(&mut self, i: usize) -> io::Result<()> {
        if self.is_running(i) {
            return Ok(());
        }
        let binary = etcd_binary()?;
        self.spawn(&binary, i)?;
        self.wait_ready(i).await
    }

    /// Waits until every member serves a linearizable read.
    async fn wait_ready_all(&mut self) -> io::Result<()> {
        for i in 0..self.members.len() {
            self.wait_ready(i).await?;
        }
        Ok(())
    }

    /// Waits until member `i` serves a linearizable read (which needs a cluster leader).
    pub async fn wait_ready(&mut self, i: usize) -> io::Result<()> {
        let endpoint = self.endpoint(i);
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last_error = String::from("no attempt");
        while Instant::now() < deadline {
            if let Some(child) = self.members[i].child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                self.members[i].child = None;
                return Err(io::Error::other(format!(
                    "etcd member {i} ({endpoint}) exited with {status}; log tail:\n{}",
                    self.log_tail(i)
                )));
            }
            match probe(&endpoint, self.connect_options()).await {
                Ok(()) => return Ok(()),
                Err(e) => last_error = e,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "etcd member {i} ({endpoint}) not ready after {READY_TIMEOUT:?}: {last_error}; log tail:\n{}",
                self.log_tail(i)
            ),
        ))
    }

    /// The index of the current leader, asked of the running members; `None` when no running
    /// member knows one.
    pub async fn leader(&mut self) -> Option<usize> {
        for i in 0..self.members.len() {
            if !self.is_running(i) {
                continue;
            }
            let Ok(Ok(mut client)) = tokio::time::timeout(
                Duration::from_secs(2),
                Client::connect([self.endpoint(i)], Some(self.connect_options())),
            )
            .await
            else {
                continue;
            };
            let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(2), client.status()).await else {
                continue;
            };
            let leader_id = status.leader();
            if leader_id == 0 {
                continue;
            }
            let Ok(Ok(members)) = tokio::time::timeout(Duration::from_secs(2), client.member_list()).await else {
                continue;
            };
            for member in members.members() {
                if member.id() == leader_id {
                    return self.members.iter().position(|m| m.name == member.name());
                }
            }
        }
        None
    }

    /// The last 4 KiB of member `i`'s log, for error messages.
    pub fn log_tail(&self, i: usize) -> String {
        let read = || -> io::Result<String> {
            let mut file = File::open(&self.members[i].log_path)?;
            let len = file.metadata()?.len();
            file.seek(SeekFrom::Start(len.saturating_sub(4096)))?;
            let mut buf = Vec::new();
            file.read_to_end(&mut buf)?;
            Ok(String::from_utf8_lossy(&buf).into_owned())
        };
        read().unwrap_or_else(|e| format!("(log unreadable: {e})"))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            let _ = self.kill(i);
        }
    }
}

impl EtcdCluster {
    /// Short timeouts for the harness's own probes, plus the client certificate if any.
    fn connect_options(&self) -> ConnectOptions {
        let options =
            ConnectOptions::new().with_connect_timeout(Duration::from_secs(1)).with_timeout(Duration::from_secs(2));
        match self.options.tls.as_ref().map(|tls| tls_options(&tls.client())) {
            Some(Ok(tls)) => options.with_tls(tls),
            // Unreadable files: the probe then fails and the error says why the member is not
            // ready (the files are the test's own).
            Some(Err(e)) => {
                tracing::warn!(error = %e, "etcd harness: TLS files unreadable");
                options
            }
            None => options,
        }
    }
}

/// One linearizable read through `endpoint`.
async fn probe(endpoint: &str, options: ConnectOptions) -> Result<(), String> {
    let attempt = async {
        let mut client = Client::connect([endpoint], Some(options)).await.map_err(|e| e.to_string())?;
        client.get("\0", Some(GetOptions::new().with_count_only())).await.map_err(|e| e.to_string())?;
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(3), attempt).await.map_err(|_| "timed out".to_string())?
}

/// The etcd binary: `$ETCD_BIN`, else `etcd` on `PATH`.
fn etcd_binary() -> io::Result<PathBuf> {
    if let Some(path) = std::env::var_os("ETCD_BIN") {
        return Ok(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("etcd");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "no etcd binary on PATH (install the Debian package etcd-server, or set ETCD_BIN)",
    ))
}

/// `n` distinct free loopback ports (all bound at once, then released for etcd to take).
fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<io::Result<Vec<_>>>()?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct() {
        let mut ports = free_ports(8).unwrap();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 8);
    }
}
