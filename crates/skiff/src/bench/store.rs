//! `skiff bench store`: durable creates/s and latency of both store backends next to raw
//! baselines measured in the same run (issue 2's benchmark).
//!
//! Phases, each on fresh files and for `--duration` seconds (or `--count` writes):
//! - raw SQLite (rusqlite, WAL, `synchronous=FULL`): one durable commit per row (the
//!   single-writer latency baseline) and rows batched into large durable transactions (the
//!   throughput ceiling a group-committing store can approach);
//! - the embedded backend ([`SqliteBackend`]) with 1, 16, 256 concurrent writers;
//! - raw etcd puts with `etcd-client` at the same concurrency, and the etcd backend
//!   ([`EtcdBackend`]) against the same etcd (the bench starts its own single member in a temp
//!   dir unless `--etcd-endpoint` is given; between phases it compacts and defragments its own
//!   etcd so that every phase starts from the same state).
//!
//! Every write carries the same bytes: a key `/registry/bench/<phase>/<writer>/<n>` and a value
//! of `--value-size` bytes. The ratios printed at the end are the targets.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use skiff_store::Backend;
use skiff_store::etcd::harness::{EtcdCluster, HarnessOptions};
use skiff_store::etcd::{EtcdBackend, EtcdConfig};
use skiff_store::sqlite::SqliteBackend;

/// Flags of `skiff bench store`.
#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// Seconds each phase runs.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Stop each phase after this many writes instead of after `--duration`.
    #[arg(long)]
    count: Option<u64>,
    /// Numbers of concurrent writers, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 16, 256])]
    concurrency: Vec<usize>,
    /// Bytes per value (Kubernetes objects are typically 1-4 KiB of JSON).
    #[arg(long, default_value_t = 2048)]
    value_size: usize,
    /// Rows per durable transaction in the batched raw SQLite baseline.
    #[arg(long, default_value_t = 10_000)]
    batch_rows: usize,
    /// Benchmark this etcd (e.g. http://127.0.0.1:2379) instead of starting one. Its history
    /// is neither compacted nor defragmented by the bench, and the bench keys stay behind.
    #[arg(long)]
    etcd_endpoint: Option<String>,
    /// Directory for the SQLite files and the bench's own etcd (default: the system temp dir).
    /// The disk under it is what is measured.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Skip the embedded SQLite backend and its baselines.
    #[arg(long)]
    skip_sqlite: bool,
    /// Skip the etcd backend and its baseline.
    #[arg(long)]
    skip_etcd: bool,
}

/// When a phase stops.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Duration(Duration),
    Count(u64),
}

/// What one phase measured.
#[derive(Debug, Clone)]
struct Measured {
    ops: u64,
    elapsed: Duration,
    /// Per-write latencies, sorted.
    latencies: Vec<Duration>,
}

impl Measured {
    fn new(ops: u64, elapsed: Duration, mut latencies: Vec<Duration>) -> Self {
        latencies.sort_unstable();
        Self { ops, elapsed, latencies }
    }

    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[i.min(self.latencies.len() - 1)]
    }
}

/// All figures of one run.
#[derive(Default)]
struct Report {
    raw_sqlite_commit: Option<Measured>,
    raw_sqlite_batched: Option<Measured>,
    sqlite: Vec<(usize, Measured)>,
    raw_etcd: Vec<(usize, Measured)>,
    etcd: Vec<(usize, Measured)>,
}

/// Runs the benchmark and prints the figures.
pub async fn run(args: StoreArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.duration > 0.0 || args.count.is_some(), "--duration must be positive");
    anyhow::ensure!(!args.concurrency.is_empty() && !args.concurrency.contains(&0), "--concurrency needs values >= 1");
    anyhow::ensure!(args.batch_rows > 0, "--batch-rows must be positive");
    let limit = match args.count {
        Some(n) => Limit::Count(n),
        None => Limit::Duration(Duration::from_secs_f64(args.duration)),
    };
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let work = tempfile::Builder::new().prefix("skiff-bench-store-").tempdir_in(&parent)?;
    let value: Arc<Vec<u8>> = Arc::new((0..args.value_size).map(|i| b'a' + (i % 26) as u8).collect());

    println!("skiff bench store: {}-byte values, {}", args.value_size, describe(limit));
    println!("machine: {}", machine());
    println!("data under: {}", work.path().display());
    println!();
    println!("{:<52} {:>12} {:>10} {:>10}", "phase", "writes/s", "p50", "p99");

    let mut report = Report::default();
    if !args.skip_sqlite {
        let m = raw_sqlite_commit_per_row(&work.path().join("raw-commit.db"), &value, limit).await?;
        print_row("raw SQLite, one durable commit per row", &m);
        report.raw_sqlite_commit = Some(m);
        let m = raw_sqlite_batched(&work.path().join("raw-batched.db"), &value, limit, args.batch_rows).await?;
        print_row(&format!("raw SQLite, {} rows per durable commit", args.batch_rows), &m);
        report.raw_sqlite_batched = Some(m);
        for &writers in &args.concurrency {
            let path = work.path().join(format!("skiff-{writers}.db"));
            let store = open_sqlite(&path)?;
            let m = drive_backend(store, &format!("sqlite{writers}"), writers, limit, &value).await?;
            print_row(&format!("embedded SQLite backend, {writers} writers"), &m);
            report.sqlite.push((writers, m));
        }
    }
    if !args.skip_etcd {
        let (cluster, endpoint) = match &args.etcd_endpoint {
            Some(endpoint) => (None, endpoint.clone()),
            None => {
                let options =
                    HarnessOptions { parent_dir: Some(work.path().to_path_buf()), ..HarnessOptions::default() };
                let cluster = EtcdCluster::start_with(options).await.context("starting etcd (package etcd-server)")?;
                let endpoint = cluster.endpoint(0);
                (Some(cluster), endpoint)
            }
        };
        let owned = cluster.is_some();
        let raw = etcd_client::Client::connect([endpoint.as_str()], None)
            .await
            .with_context(|| format!("connecting to etcd at {endpoint}"))?;
        for &writers in &args.concurrency {
            if owned {
                reset_etcd(&raw).await?;
            }
            let m = raw_etcd_puts(&raw, &format!("raw{writers}"), writers, limit, &value).await?;
            print_row(&format!("raw etcd put, {writers} writers"), &m);
            report.raw_etcd.push((writers, m));
            if owned {
                reset_etcd(&raw).await?;
            }
            let config = EtcdConfig::new([endpoint.clone()]);
            let options = skiff_store::Options { compaction_interval: None, ..Default::default() };
            let store: Arc<dyn Backend> = Arc::new(EtcdBackend::connect(config, options).await?);
            let m = drive_backend(store, &format!("etcd{writers}"), writers, limit, &value).await?;
            print_row(&format!("etcd backend, {writers} writers"), &m);
            report.etcd.push((writers, m));
        }
        drop(cluster);
    }
    print_summary(&report);
    Ok(())
}

fn describe(limit: Limit) -> String {
    match limit {
        Limit::Duration(d) => format!("{:.1} s per phase", d.as_secs_f64()),
        Limit::Count(n) => format!("{n} writes per phase"),
    }
}

/// `nproc` and the CPU model, for the record.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} CPUs, {model}")
}

fn print_row(label: &str, m: &Measured) {
    println!(
        "{label:<52} {:>12.0} {:>10} {:>10}",
        m.rate(),
        fmt_duration(m.quantile(0.5)),
        fmt_duration(m.quantile(0.99))
    );
}

fn fmt_duration(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros >= 10_000.0 { format!("{:.1} ms", micros / 1000.0) } else { format!("{micros:.0} µs") }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "meets target" } else { "MISSES target" }
}

fn print_summary(report: &Report) {
    println!();
    println!("ratios (backend / baseline measured above):");
    if let Some(batched) = &report.raw_sqlite_batched {
        for (writers, m) in &report.sqlite {
            let ratio = m.rate() / batched.rate();
            let target =
                if *writers == 256 { format!("  target >= 50%: {}", verdict(ratio >= 0.5)) } else { String::new() };
            println!("  embedded, {writers:>3} writers / raw batched SQLite: {:>6.1}%{target}", ratio * 100.0);
        }
    }
    if let (Some(commit), Some((_, single))) = (&report.raw_sqlite_commit, report.sqlite.iter().find(|(w, _)| *w == 1))
    {
        let p50 = single.quantile(0.5).as_secs_f64() / commit.quantile(0.5).as_secs_f64().max(1e-9);
        let p99 = single.quantile(0.99).as_secs_f64() / commit.quantile(0.99).as_secs_f64().max(1e-9);
        println!(
            "  embedded single-writer latency / one raw durable commit: p50 {p50:.2}x, p99 {p99:.2}x  target <= 2x: {}",
            verdict(p50 <= 2.0)
        );
    }
    for (writers, m) in &report.etcd {
        if let Some((_, raw)) = report.raw_etcd.iter().find(|(w, _)| w == writers) {
            let ratio = m.rate() / raw.rate();
            println!(
                "  etcd backend, {writers:>3} writers / raw etcd put: {:>6.1}%  target >= 80%: {}",
                ratio * 100.0,
                verdict(ratio >= 0.8)
            );
        }
    }
}

/// Opens the embedded backend on a fresh file with default options (no background compaction
/// within a phase).
fn open_sqlite(path: &Path) -> anyhow::Result<Arc<dyn Backend>> {
    let options = skiff_store::Options { compaction_interval: None, ..Default::default() };
    let store = SqliteBackend::open(path, options).with_context(|| format!("opening {}", path.display()))?;
    Ok(Arc::new(store))
}

/// Runs `writers` tasks calling `op(writer, n)` until the limit, timing every call.
async fn drive<F, Fut>(label: String, writers: usize, limit: Limit, op: F) -> anyhow::Result<Measured>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let op = Arc::new(op);
    let done = Arc::new(AtomicU64::new(0));
    let issued = Arc::new(AtomicU64::new(0));
    let bar = indicatif::ProgressBar::new_spinner();
    bar.enable_steady_tick(Duration::from_millis(200));
    let start = Instant::now();
    let deadline = match limit {
        Limit::Duration(d) => Some(start + d),
        Limit::Count(_) => None,
    };
    let mut tasks = Vec::with_capacity(writers);
    for writer in 0..writers {
        let (op, done, issued) = (op.clone(), done.clone(), issued.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            loop {
                match (limit, deadline) {
                    (_, Some(deadline)) if Instant::now() >= deadline => break,
                    (Limit::Count(count), _) if issued.fetch_add(1, Ordering::Relaxed) >= count => break,
                    _ => {}
                }
                let t = Instant::now();
                op(writer, n).await?;
                latencies.push(t.elapsed());
                done.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            anyhow::Ok(latencies)
        }));
    }
    let ticker = {
        let (bar, done) = (bar.clone(), done.clone());
        tokio::spawn(async move {
            loop {
                bar.set_message(format!("{label}: {} writes", done.load(Ordering::Relaxed)));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let mut latencies = Vec::new();
    let mut first_error = None;
    for task in tasks {
        match task.await? {
            Ok(l) => latencies.extend(l),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let elapsed = start.elapsed();
    ticker.abort();
    bar.finish_and_clear();
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(Measured::new(done.load(Ordering::Relaxed), elapsed, latencies))
}

/// Durable creates through a [`Backend`].
async fn drive_backend(
    store: Arc<dyn Backend>,
    phase: &str,
    writers: usize,
    limit: Limit,
    value: &Arc<Vec<u8>>,
) -> anyhow::Result<Measured> {
    let phase = phase.to_string();
    let value = value.clone();
    drive(format!("backend {phase}"), writers, limit, move |writer, n| {
        let (store, value) = (store.clone(), value.clone());
        let key = format!("/registry/bench/{phase}/{writer}/{n}");
        async move {
            store.create(&key, value.to_vec()).await.with_context(|| format!("create {key}"))?;
            Ok(())
        }
    })
    .await
}

/// Plain etcd puts of the same bytes through `etcd-client`.
async fn raw_etcd_puts(
    client: &etcd_client::Client,
    phase: &str,
    writers: usize,
    limit: Limit,
    value: &Arc<Vec<u8>>,
) -> anyhow::Result<Measured> {
    let phase = phase.to_string();
    let (client, value) = (client.clone(), value.clone());
    drive(format!("raw etcd {phase}"), writers, limit, move |writer, n| {
        let (mut kv, value) = (client.kv_client(), value.clone());
        let key = format!("/registry/bench/{phase}/{writer}/{n}");
        async move {
            kv.put(key.as_bytes(), value.to_vec(), None).await.with_context(|| format!("put {key}"))?;
            Ok(())
        }
    })
    .await
}

/// Compacts the bench's own etcd to its current revision and defragments it, so that every
/// etcd phase starts from a compact database (etcd's txn throughput degrades with uncompacted
/// history).
async fn reset_etcd(client: &etcd_client::Client) -> anyhow::Result<()> {
    let mut client = client.clone();
    let revision = client.get("\0", Some(etcd_client::GetOptions::new().with_count_only())).await?;
    let revision = revision.header().map(|h| h.revision()).unwrap_or(0);
    if revision > 1 {
        match client.compact(revision, Some(etcd_client::CompactionOptions::new().with_physical())).await {
            Ok(_) => {}
            Err(e) if e.to_string().contains("compacted") => {}
            Err(e) => return Err(e).context("compacting etcd between phases"),
        }
    }
    client.defragment().await.context("defragmenting etcd between phases")?;
    Ok(())
}

/// Opens a raw SQLite database configured exactly like the embedded backend's writer
/// connection: WAL, `synchronous=FULL` (every commit fsyncs the WAL) and the backend's other
/// writer pragmas (no automatic checkpoints in the commit path), so the baseline is the best
/// plain SQLite does with the same durability.
fn raw_sqlite(path: &Path) -> anyhow::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    skiff_store::sqlite::configure_durable_connection(&conn)?;
    for (name, value) in skiff_store::sqlite::WRITER_PRAGMAS {
        conn.pragma_update(None, name, value)?;
    }
    conn.execute_batch("CREATE TABLE kv (rev INTEGER PRIMARY KEY, key BLOB NOT NULL, value BLOB NOT NULL)")?;
    Ok(conn)
}

fn reached(limit: Limit, start: Instant, rows: u64) -> bool {
    match limit {
        Limit::Duration(d) => start.elapsed() >= d,
        Limit::Count(n) => rows >= n,
    }
}

/// One autocommit INSERT per row: one durable commit (one WAL fsync) each.
async fn raw_sqlite_commit_per_row(path: &Path, value: &Arc<Vec<u8>>, limit: Limit) -> anyhow::Result<Measured> {
    let (path, value) = (path.to_path_buf(), value.clone());
    let bar = spinner("raw SQLite, one commit per row");
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Measured> {
        let conn = raw_sqlite(&path)?;
        let mut insert = conn.prepare("INSERT INTO kv (key, value) VALUES (?1, ?2)")?;
        let mut latencies = Vec::new();
        let start = Instant::now();
        let mut rows = 0u64;
        while !reached(limit, start, rows) {
            let key = format!("/registry/bench/rawcommit/0/{rows}");
            let t = Instant::now();
            insert.execute(rusqlite::params![key.as_bytes(), value.as_slice()])?;
            latencies.push(t.elapsed());
            rows += 1;
        }
        Ok(Measured::new(rows, start.elapsed(), latencies))
    })
    .await?;
    bar.finish_and_clear();
    result
}

/// Rows inserted in transactions of `batch` rows, each one durable commit. Reports rows/s; the
/// latency columns are per transaction.
async fn raw_sqlite_batched(path: &Path, value: &Arc<Vec<u8>>, limit: Limit, batch: usize) -> anyhow::Result<Measured> {
    let (path, value) = (path.to_path_buf(), value.clone());
    let bar = spinner("raw SQLite, batched");
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Measured> {
        let mut conn = raw_sqlite(&path)?;
        let mut latencies = Vec::new();
        let start = Instant::now();
        let mut rows = 0u64;
        while !reached(limit, start, rows) {
            let t = Instant::now();
            let tx = conn.transaction()?;
            {
                let mut insert = tx.prepare_cached("INSERT INTO kv (key, value) VALUES (?1, ?2)")?;
                for _ in 0..batch {
                    let key = format!("/registry/bench/rawbatch/0/{rows}");
                    insert.execute(rusqlite::params![key.as_bytes(), value.as_slice()])?;
                    rows += 1;
                }
            }
            tx.commit()?;
            latencies.push(t.elapsed());
        }
        Ok(Measured::new(rows, start.elapsed(), latencies))
    })
    .await?;
    bar.finish_and_clear();
    result
}

fn spinner(label: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(label.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_from_sorted_latencies() {
        let m = Measured::new(4, Duration::from_secs(2), (1..=100).rev().map(Duration::from_millis).collect());
        assert_eq!(m.rate(), 2.0);
        assert_eq!(m.quantile(0.5), Duration::from_millis(51));
        assert_eq!(m.quantile(0.99), Duration::from_millis(99));
        assert_eq!(Measured::new(0, Duration::from_secs(1), Vec::new()).quantile(0.5), Duration::ZERO);
    }
}
