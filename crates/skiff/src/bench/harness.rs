//! What the end-to-end benches share: a `skiff server` child process (or another HTTPS server
//! the bench spawns, such as `skiff bench empty-handler`) on a free loopback port with a fresh
//! data directory, admin clients built from the kubeconfig it writes, its
//! resident memory, and latency percentiles.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// A running `skiff server` process (or another server spawned by
/// [`ServerProcess::spawn_command`]); killed (SIGKILL) and reaped on drop.
pub struct ServerProcess {
    child: Child,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Its HTTPS port on 127.0.0.1.
    pub port: u16,
    /// When the process was spawned.
    pub spawned: Instant,
}

/// Environment variable naming another `skiff` binary to run the servers with, e.g. to compare
/// two builds' servers under the same bench client in one run.
pub const SERVER_BINARY_ENV: &str = "SKIFF_BENCH_SERVER";

/// A free loopback TCP port.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl ServerProcess {
    /// Spawns `skiff server --disable-agent` (this same binary, or the one named by
    /// [`SERVER_BINARY_ENV`]) on a free port with `data_dir`
    /// (created if missing), store compaction off and `extra` flags; its log goes to
    /// `<data_dir>/server.log`. Does not wait for readiness: see [`ServerProcess::wait_ready`].
    pub fn spawn(data_dir: &Path, extra: &[&str]) -> anyhow::Result<ServerProcess> {
        let exe = match std::env::var_os(SERVER_BINARY_ENV) {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe().context("locating the skiff binary")?,
        };
        let subcommand = ["server", "--disable-agent", "--etcd-compaction-interval", "0"];
        ServerProcess::spawn_command(&exe, &subcommand, data_dir, extra)
    }

    /// Spawns `exe` with `subcommand`, then `--bind-address 127.0.0.1 --https-listen-port
    /// <free port> --data-dir <data_dir>` (created if missing) and `extra`; its stderr goes to
    /// `<data_dir>/server.log`. The process must serve HTTPS on that port and write an admin
    /// kubeconfig to `<data_dir>/kubeconfig.yaml` for [`ServerProcess::wait_ready`].
    pub fn spawn_command(
        exe: &Path,
        subcommand: &[&str],
        data_dir: &Path,
        extra: &[&str],
    ) -> anyhow::Result<ServerProcess> {
        std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        let port = free_port()?;
        let log = std::fs::File::create(data_dir.join("server.log"))?;
        let spawned = Instant::now();
        let child = Command::new(exe)
            .args(subcommand)
            .args(["--bind-address", "127.0.0.1", "--https-listen-port"])
            .arg(port.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", std::env::var("SKIFF_BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {} {}", exe.display(), subcommand.join(" ")))?;
        Ok(ServerProcess { child, data_dir: data_dir.to_path_buf(), port, spawned })
    }

    /// The admin kubeconfig the server writes.
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("kubeconfig.yaml")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Polls `GET /readyz` (building a client as soon as the kubeconfig exists) until it
    /// answers `ok`; returns the time from spawn to that answer and the client.
    ///
    /// # Errors
    /// The process exits, or is not ready within `timeout`.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<(Duration, kube::Client)> {
        let deadline = Instant::now() + timeout;
        let mut client = None;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("skiff server exited with {status}: {}", self.log_tail());
            }
            if client.is_none() && self.kubeconfig().exists() {
                // The file may be half-written: retry on a parse error.
                client = admin_client(&self.kubeconfig()).await.ok();
            }
            if let Some(c) = &client
                && let Ok(text) = c.request_text(kube::core::Request::new("").get("readyz", &Default::default())?).await
                && text.trim() == "ok"
            {
                return Ok((self.spawned.elapsed(), c.clone()));
            }
            if Instant::now() > deadline {
                bail!("skiff server on port {} not ready after {timeout:?}: {}", self.port, self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Resident set size (`VmRSS` of /proc/PID/status), bytes.
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        process_rss_bytes(&format!("/proc/{}/status", self.pid()))
    }

    /// CPU time (user + system, all threads) the server has used so far.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        process_cpu_time(&format!("/proc/{}/stat", self.pid()))
    }

    /// Threads of the server process.
    pub fn threads(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/task", self.pid()))?.count())
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.data_dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident set size (`VmRSS`) in bytes from a process's `/proc/PID/status` (or
/// `/proc/self/status`) file.
pub fn process_rss_bytes(status_path: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(status_path).with_context(|| format!("reading {status_path}"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmRSS in {status_path}"))?;
    Ok(kb * 1024)
}

/// Clock ticks per second of the `utime`/`stime` fields of /proc/PID/stat (`USER_HZ`, 100 on
/// every Linux architecture skiff builds for).
const USER_HZ: u64 = 100;

/// User + system CPU time of all threads of a process from its `/proc/PID/stat` (or
/// `/proc/self/stat`) file.
pub fn process_cpu_time(stat_path: &str) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(stat_path).with_context(|| format!("reading {stat_path}"))?;
    parse_stat_cpu(&stat).with_context(|| format!("parsing {stat_path}"))
}

/// `utime + stime` (fields 14 and 15) of a /proc/PID/stat line; the command name (field 2) may
/// contain spaces and parentheses, so fields are counted after its closing parenthesis.
fn parse_stat_cpu(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / USER_HZ))
}

/// CPU time used between two readings, per operation, in microseconds.
pub fn cpu_us_per_op(before: Duration, after: Duration, ops: usize) -> f64 {
    after.saturating_sub(before).as_secs_f64() * 1e6 / ops.max(1) as f64
}

/// A client authenticated with the admin kubeconfig at `path` (its own connection pool).
pub async fn admin_client(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Latency samples, reported as percentiles.
#[derive(Default)]
pub struct Samples(pub Vec<Duration>);

impl Samples {
    /// The `p`-th percentile (0–100), nearest rank; zero when empty.
    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        self.0.sort_unstable();
        let rank = ((p / 100.0) * self.0.len() as f64).ceil() as usize;
        self.0[rank.clamp(1, self.0.len()) - 1]
    }
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// The sum of every sample of a counter family in a Prometheus text exposition whose series
/// starts with `prefix` (e.g. `controller_reconcile_total{controller="replicaset"`).
pub fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// The server's `/metrics` text.
pub async fn scrape(client: &kube::Client) -> anyhow::Result<String> {
    Ok(client.request_text(kube::core::Request::new("").get("metrics", &Default::default())?).await?)
}

/// The one-minute load average (first field of /proc/loadavg).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut s = Samples((1..=100).map(Duration::from_millis).collect());
        assert_eq!(s.percentile(50.0), Duration::from_millis(50));
        assert_eq!(s.percentile(99.0), Duration::from_millis(99));
        assert_eq!(s.percentile(100.0), Duration::from_millis(100));
        assert_eq!(Samples::default().percentile(99.0), Duration::ZERO);
    }

    #[test]
    fn stat_cpu_counts_fields_after_the_command_name() {
        let line = "42 (skiff (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1000 2 3";
        assert_eq!(parse_stat_cpu(line), Some(Duration::from_secs(3)));
        assert_eq!(parse_stat_cpu("garbage"), None);
        assert_eq!(cpu_us_per_op(Duration::from_millis(10), Duration::from_millis(20), 10), 1000.0);
    }

    #[test]
    fn metric_sums_add_every_matching_series() {
        let text = "a_total{x=\"1\",r=\"ok\"} 2\na_total{x=\"1\",r=\"error\"} 3\na_total{x=\"2\"} 7\n";
        assert_eq!(metric_sum(text, "a_total{x=\"1\""), 5.0);
    }
}
