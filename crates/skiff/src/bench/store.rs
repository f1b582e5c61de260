//! `skiff bench store`: durable creates/s and latency of both store backends next to raw
//! baselines measured in the same run (issue 2's benchmark).
//!
//! Phases, each on fresh files and for `--duration` seconds (or `--count` writes) in total,
//! split into `--rounds` slices run in alternation (all SQLite phases of round 1, then of
//! round 2, ...; raw etcd and the etcd backend alternate per concurrency) so that a backend
//! and its baseline meet the same load of the shared machine:
//! - raw SQLite (rusqlite, WAL, `synchronous=FULL`): one durable commit per row (the
//!   single-writer latency baseline) and rows batched into large durable transactions (the
//!   throughput ceiling a group-committing store can approach);
//! - the embedded backend ([`SqliteBackend`]) with 1, 16, 256 concurrent writers;
//! - raw etcd puts with `etcd-client` at the same concurrency, and the etcd backend
//!   ([`EtcdBackend`]) against the same etcd (the bench starts its own single member in a temp
//!   dir unless `--etcd-endpoint` is given; between phases it compacts and defragments its own
//!   etcd so that every phase starts from the same state).
//!
//! - compaction stall: the embedded backend with `--compaction-history` history rows (updates
//!   of 1,000 keys); `--compaction-writers` writers create keys first without compaction (the
//!   baseline), then while a compaction of that whole history runs, then again without
//!   compaction for as long as it ran (the baseline's worst case then covers as much time as
//!   the compaction's). The worst and p99 write
//!   latency of both are printed side by side: issue 2 demands that compaction never stall
//!   writers for more than a few milliseconds.
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
    /// History rows (updates of 1,000 keys) written before the compaction-stall phase; 0 skips it.
    #[arg(long, default_value_t = 50_000)]
    compaction_history: u64,
    /// Concurrent writers whose latency is measured in the compaction-stall phase.
    #[arg(long, default_value_t = 1)]
    compaction_writers: usize,
    /// Each phase is split into this many slices run in alternation with the other phases
    /// (raw, backend, raw, backend, ...), so that a backend and its baseline see the same
    /// disk and CPU weather; the figures sum the slices.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
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

    /// Adds another slice of the same phase.
    fn merge(&mut self, other: Measured) {
        self.ops += other.ops;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
        self.latencies.sort_unstable();
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
    raw_sqlite_indexed: Option<Measured>,
    sqlite: Vec<(usize, Measured)>,
    /// Per number of writers: writes, group commits (transactions) and WAL fsyncs of the
    /// embedded backend.
    sqlite_commits: Vec<(usize, u64, u64, u64)>,
    raw_etcd: Vec<(usize, Measured)>,
    etcd: Vec<(usize, Measured)>,
    compaction: Option<CompactionStall>,
}

/// What the compaction-stall phase measured.
struct CompactionStall {
    writers: usize,
    history_rows: u64,
    /// Writes without a compaction running (same store, same writers): just before it, and
    /// after it for as long as it took.
    baseline: Measured,
    /// Writes while the compaction ran.
    during: Measured,
    /// From `compact()` to the last history row removed.
    took: Duration,
    chunks: u64,
    longest_chunk: Duration,
    /// The longest a write waited behind background work on the writer thread (a compaction or
    /// vacuum step, a WAL restart window) from the start of the compaction to the end of the
    /// baseline after it.
    longest_background_wait: Duration,
    /// The same while the history was written (256 writers back to back: WAL restart windows
    /// only), with the restart windows opened, caught up and skipped then, and the longest WAL.
    fill_background_wait: Duration,
    fill_windows: (u64, u64, u64),
    fill_longest_wal_bytes: u64,
    /// Restart windows skipped (checkpoints slower than a window) during the compaction phase.
    restart_windows_skipped: u64,
    /// The longest `COMMIT` (WAL write + fsync) of a write batch during the phase.
    longest_commit: Duration,
    /// WAL restart windows the writer gave the checkpointer during the compaction and the
    /// baseline after it, and how many of them let the WAL start over.
    restart_windows: u64,
    restart_windows_caught_up: u64,
    /// The longest the WAL grew during the phase, in bytes.
    longest_wal_bytes: u64,
}

/// Runs the benchmark and prints the figures.
pub async fn run(args: StoreArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.duration > 0.0 || args.count.is_some(), "--duration must be positive");
    anyhow::ensure!(!args.concurrency.is_empty() && !args.concurrency.contains(&0), "--concurrency needs values >= 1");
    anyhow::ensure!(args.batch_rows > 0, "--batch-rows must be positive");
    anyhow::ensure!(args.rounds > 0, "--rounds must be positive");
    let rounds = args.rounds;
    // The whole phase's limit, for the compaction phase; the others run `rounds` slices of
    // `limit`.
    let whole = match args.count {
        Some(n) => Limit::Count(n),
        None => Limit::Duration(Duration::from_secs_f64(args.duration)),
    };
    let limit = match whole {
        Limit::Count(n) => Limit::Count(n.div_ceil(u64::from(rounds))),
        Limit::Duration(d) => Limit::Duration(d / rounds),
    };
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let work = tempfile::Builder::new().prefix("skiff-bench-store-").tempdir_in(&parent)?;
    let value: Arc<Vec<u8>> = Arc::new((0..args.value_size).map(|i| b'a' + (i % 26) as u8).collect());

    println!("skiff bench store: {}-byte values, {} ({rounds} alternating slices)", args.value_size, describe(whole));
    println!("machine: {}", machine());
    println!("data under: {}", work.path().display());
    println!();
    println!("{:<52} {:>12} {:>10} {:>10}", "phase", "writes/s", "p50", "p99");

    let mut report = Report::default();
    if !args.skip_sqlite {
        let mut sqlite: Vec<(usize, Option<Measured>)> = args.concurrency.iter().map(|&w| (w, None)).collect();
        report.sqlite_commits = args.concurrency.iter().map(|&w| (w, 0, 0, 0)).collect();
        let add = |slot: &mut Option<Measured>, m: Measured| match slot {
            Some(total) => total.merge(m),
            None => *slot = Some(m),
        };
        for round in 0..rounds {
            let dir = work.path().join(format!("round-{round}"));
            std::fs::create_dir_all(&dir)?;
            let m = raw_sqlite_commit_per_row(&dir.join("raw-commit.db"), &value, limit).await?;
            add(&mut report.raw_sqlite_commit, m);
            let m = raw_sqlite_batched(&dir.join("raw-batched.db"), &value, limit, args.batch_rows).await?;
            add(&mut report.raw_sqlite_batched, m);
            let m = raw_sqlite_indexed(&dir.join("raw-indexed.db"), &value, limit).await?;
            add(&mut report.raw_sqlite_indexed, m);
            for ((writers, slot), commits) in sqlite.iter_mut().zip(report.sqlite_commits.iter_mut()) {
                let path = dir.join(format!("skiff-{writers}.db"));
                let store = open_sqlite(&path)?;
                let m = drive_backend(
                    store.clone() as Arc<dyn Backend>,
                    &format!("sqlite{writers}r{round}"),
                    *writers,
                    limit,
                    &value,
                )
                .await?;
                add(slot, m);
                let stats = store.stats();
                commits.1 += stats.writes;
                commits.2 += stats.batches;
                commits.3 += stats.syncs;
            }
            // Each slice starts on fresh files; keep the disk usage of one round.
            std::fs::remove_dir_all(&dir).ok();
        }
        if let Some(m) = &report.raw_sqlite_commit {
            print_row("raw SQLite, one durable commit per row", m);
        }
        if let Some(m) = &report.raw_sqlite_batched {
            print_row(&format!("raw SQLite, {} rows per durable commit", args.batch_rows), m);
        }
        if let Some(m) = &report.raw_sqlite_indexed {
            print_row("raw SQLite, backend's schema + key index, 256 rows/commit", m);
        }
        for (writers, m) in sqlite {
            if let Some(m) = m {
                print_row(&format!("embedded SQLite backend, {writers} writers"), &m);
                report.sqlite.push((writers, m));
            }
        }
        if args.compaction_history > 0 {
            anyhow::ensure!(args.compaction_writers > 0, "--compaction-writers must be positive");
            let path = work.path().join("skiff-compaction.db");
            let c = compaction_stall(&path, &value, args.compaction_history, args.compaction_writers, whole).await?;
            print_row(&format!("embedded, {} writers, no compaction (baseline)", c.writers), &c.baseline);
            print_row(&format!("embedded, {} writers, compacting {} rows", c.writers, c.history_rows), &c.during);
            report.compaction = Some(c);
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
        // The etcd version decides the ratio: 3.4 before 3.4.24 spends ~1.5× a put's CPU on the
        // txn every create needs (BENCHMARKS.md); `ETCD_BIN=$(scripts/fetch-etcd-3.5)` measures 3.5.
        let version = raw.maintenance_client().status().await.map(|s| s.version().to_string());
        println!("etcd {} at {endpoint}", version.as_deref().unwrap_or("(version unknown)"));
        for &writers in &args.concurrency {
            let (mut raw_total, mut backend_total): (Option<Measured>, Option<Measured>) = (None, None);
            let config = EtcdConfig::new([endpoint.clone()]);
            let options = skiff_store::Options { compaction_interval: None, ..Default::default() };
            let store: Arc<dyn Backend> = Arc::new(EtcdBackend::connect(config, options).await?);
            for round in 0..rounds {
                if owned {
                    reset_etcd(&raw).await?;
                }
                let m = raw_etcd_puts(&raw, &format!("raw{writers}r{round}"), writers, limit, &value).await?;
                match &mut raw_total {
                    Some(t) => t.merge(m),
                    None => raw_total = Some(m),
                }
                if owned {
                    reset_etcd(&raw).await?;
                }
                let m = drive_backend(store.clone(), &format!("etcd{writers}r{round}"), writers, limit, &value).await?;
                match &mut backend_total {
                    Some(t) => t.merge(m),
                    None => backend_total = Some(m),
                }
            }
            if let (Some(raw_m), Some(backend_m)) = (raw_total, backend_total) {
                print_row(&format!("raw etcd put, {writers} writers"), &raw_m);
                print_row(&format!("etcd backend, {writers} writers"), &backend_m);
                report.raw_etcd.push((writers, raw_m));
                report.etcd.push((writers, backend_m));
            }
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
            let (per_commit, per_sync) = report
                .sqlite_commits
                .iter()
                .find(|(w, ..)| w == writers)
                .map(|&(_, writes, batches, syncs)| {
                    (writes as f64 / batches.max(1) as f64, writes as f64 / syncs.max(1) as f64)
                })
                .unwrap_or_default();
            println!(
                "  embedded, {writers:>3} writers / raw batched SQLite: {:>6.1}% ({per_commit:.1} writes per \
                 transaction, {per_sync:.1} per WAL fsync){target}",
                ratio * 100.0
            );
        }
        if let (Some(indexed), Some((_, m))) =
            (&report.raw_sqlite_indexed, report.sqlite.iter().find(|(w, _)| *w == 256))
        {
            println!(
                "  embedded, 256 writers / raw SQLite with the same schema, 256 rows per commit: {:>6.1}% \
                 (raw indexed / raw batched: {:.1}%)",
                m.rate() / indexed.rate() * 100.0,
                indexed.rate() / batched.rate() * 100.0
            );
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
    if let Some(c) = &report.compaction {
        let worst = |m: &Measured| m.latencies.last().copied().unwrap_or_default();
        // A single worst case is mostly the disk's own hiccups: judge by the p99 as well.
        let extra = worst(&c.during).saturating_sub(worst(&c.baseline));
        let extra_p99 = c.during.quantile(0.99).saturating_sub(c.baseline.quantile(0.99));
        println!(
            "  compaction of {} history rows took {:.2} s in {} transactions (longest {}); writes meanwhile: \
             worst {} vs {} without (extra {}), p99 {} vs {}  target: worst and p99 at most 5 ms above: {}",
            c.history_rows,
            c.took.as_secs_f64(),
            c.chunks,
            fmt_duration(c.longest_chunk),
            fmt_duration(worst(&c.during)),
            fmt_duration(worst(&c.baseline)),
            fmt_duration(extra),
            fmt_duration(c.during.quantile(0.99)),
            fmt_duration(c.baseline.quantile(0.99)),
            verdict(extra <= Duration::from_millis(5) && extra_p99 <= Duration::from_millis(5)),
        );
        println!(
            "    worst write wait behind background work on the writer (compaction/vacuum step or WAL restart \
             window): {}  target <= 5 ms: {}",
            fmt_duration(c.longest_background_wait),
            verdict(c.longest_background_wait <= Duration::from_millis(5)),
        );
        println!(
            "    the rest of a slow write's time: longest write COMMIT (WAL write + fsync) {}; WAL restart windows \
             {} ({} let the WAL start over, {} skipped as too slow), longest WAL {:.1} MiB; the writer never \
             checkpoints",
            fmt_duration(c.longest_commit),
            c.restart_windows,
            c.restart_windows_caught_up,
            c.restart_windows_skipped,
            c.longest_wal_bytes as f64 / (1024.0 * 1024.0),
        );
        let (opened, caught_up, skipped) = c.fill_windows;
        println!(
            "    while writing the history (256 writers back to back): worst write wait behind a WAL restart \
             window {}  target <= 5 ms: {}; windows {opened} ({caught_up} let the WAL start over, {skipped} \
             skipped as too slow), longest WAL {:.1} MiB",
            fmt_duration(c.fill_background_wait),
            verdict(c.fill_background_wait <= Duration::from_millis(5)),
            c.fill_longest_wal_bytes as f64 / (1024.0 * 1024.0),
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
fn open_sqlite(path: &Path) -> anyhow::Result<Arc<SqliteBackend>> {
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

/// The compaction-stall phase: fills a fresh embedded store with `history` rows (creates, then
/// updates, of 1,000 keys, from 256 writers), measures `writers` writers creating new keys for
/// the phase's limit, then compacts the whole history and measures the same writers until the
/// last superseded row is gone.
async fn compaction_stall(
    path: &Path,
    value: &Arc<Vec<u8>>,
    history: u64,
    writers: usize,
    limit: Limit,
) -> anyhow::Result<CompactionStall> {
    const KEYS: u64 = 1000;
    const FILLERS: u64 = 256;
    let options = skiff_store::Options { compaction_interval: None, ..Default::default() };
    let store = Arc::new(SqliteBackend::open(path, options).with_context(|| format!("opening {}", path.display()))?);
    let bar = spinner(&format!("compaction: writing {history} history rows"));
    let mut fillers = Vec::new();
    for f in 0..FILLERS.min(history) {
        let (store, value) = (store.clone(), value.clone());
        // Filler f owns keys f, f + 256, ... and writes its share of the history round-robin.
        let keys: Vec<u64> = (f..KEYS).step_by(FILLERS as usize).collect();
        let share = history / FILLERS.min(history) + u64::from(f < history % FILLERS.min(history));
        fillers.push(tokio::spawn(async move {
            let mut revs: Vec<Option<i64>> = vec![None; keys.len()];
            for n in 0..share as usize {
                let i = n % keys.len();
                let key = format!("/registry/bench/compaction/{}", keys[i]);
                let rev = match revs[i] {
                    None => store.create(&key, value.to_vec()).await,
                    Some(r) => store.update(&key, value.to_vec(), r).await,
                };
                revs[i] = Some(rev.with_context(|| format!("writing {key}"))?);
            }
            anyhow::Ok(())
        }));
    }
    for f in fillers {
        f.await??;
    }
    bar.finish_and_clear();

    let filled = store.stats();
    store.reset_longest_stats();
    let baseline_for = match limit {
        Limit::Duration(d) => d,
        Limit::Count(_) => Duration::from_secs(2),
    };
    let start = Instant::now();
    let baseline =
        drive_while(store.clone(), "compactbase", writers, value, move || start.elapsed() < baseline_for).await?;
    let target = store.current_revision().await?;
    let before = store.stats();
    let started = Instant::now();
    store.compact(target).await.context("compacting")?;
    let watched = store.clone();
    let during =
        drive_while(store.clone(), "compacting", writers, value, move || watched.stats().compacted_through < target)
            .await?;
    let took = started.elapsed();
    let after = store.stats();
    // The worst case of a phase grows with its length (the disk's own hiccups): measure the
    // baseline again, after the compaction, for as long as the compaction took (at most a
    // minute), so that it covers at least as much time as the phase it is compared with.
    let again_for = took.min(Duration::from_secs(60));
    let start = Instant::now();
    let mut baseline = baseline;
    baseline
        .merge(drive_while(store.clone(), "compactafter", writers, value, move || start.elapsed() < again_for).await?);
    Ok(CompactionStall {
        writers,
        history_rows: history,
        baseline,
        during,
        took,
        chunks: after.compaction_chunks - before.compaction_chunks,
        longest_chunk: after.longest_compaction_chunk,
        longest_background_wait: after.longest_background_wait,
        longest_commit: after.longest_commit,
        restart_windows: after.restart_windows - before.restart_windows,
        restart_windows_caught_up: after.restart_windows_caught_up - before.restart_windows_caught_up,
        restart_windows_skipped: after.restart_windows_skipped - before.restart_windows_skipped,
        fill_background_wait: filled.longest_background_wait,
        fill_windows: (filled.restart_windows, filled.restart_windows_caught_up, filled.restart_windows_skipped),
        fill_longest_wal_bytes: filled.longest_wal_bytes,
        longest_wal_bytes: after.longest_wal_bytes,
    })
}

/// `writers` tasks creating keys through `store` while `keep_going()` holds (checked every
/// 5 ms), timing every create.
async fn drive_while(
    store: Arc<SqliteBackend>,
    phase: &str,
    writers: usize,
    value: &Arc<Vec<u8>>,
    keep_going: impl Fn() -> bool,
) -> anyhow::Result<Measured> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let bar = spinner(&format!("backend {phase}"));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let (store, value, stop, done) = (store.clone(), value.clone(), stop.clone(), done.clone());
        let phase = phase.to_string();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("/registry/bench/{phase}/{writer}/{n}");
                let t = Instant::now();
                store.create(&key, value.to_vec()).await.with_context(|| format!("create {key}"))?;
                latencies.push(t.elapsed());
                done.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            anyhow::Ok(latencies)
        }));
    }
    while keep_going() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
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

/// The ceiling of the embedded backend's write path in plain SQLite: the backend's table and
/// `(key, rev)` index, its page size, 256 rows per durable commit (what 256 writers can give
/// one group commit) with keys spread like 256 writers' keys. Reports rows/s; latencies are
/// per transaction.
async fn raw_sqlite_indexed(path: &Path, value: &Arc<Vec<u8>>, limit: Limit) -> anyhow::Result<Measured> {
    const ROWS: u64 = 256;
    let (path, value) = (path.to_path_buf(), value.clone());
    let bar = spinner("raw SQLite, indexed");
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<Measured> {
        let mut conn = rusqlite::Connection::open(&path).with_context(|| format!("opening {}", path.display()))?;
        conn.pragma_update(None, "page_size", skiff_store::sqlite::PAGE_SIZE)?;
        skiff_store::sqlite::configure_durable_connection(&conn)?;
        for (name, value) in skiff_store::sqlite::WRITER_PRAGMAS {
            conn.pragma_update(None, name, value)?;
        }
        conn.execute_batch(
            "CREATE TABLE kv (rev INTEGER PRIMARY KEY, key BLOB NOT NULL, create_rev INTEGER NOT NULL, \
             prev_rev INTEGER NOT NULL, deleted INTEGER NOT NULL, value BLOB NOT NULL); \
             CREATE INDEX kv_key_rev ON kv (key, rev);",
        )?;
        let mut latencies = Vec::new();
        let start = Instant::now();
        let mut rows = 0u64;
        while !reached(limit, start, rows) {
            let t = Instant::now();
            let tx = conn.transaction()?;
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO kv (rev, key, create_rev, prev_rev, deleted, value) VALUES (?1, ?2, ?1, 0, 0, ?3)",
                )?;
                for _ in 0..ROWS {
                    let key = format!("/registry/bench/rawindexed/{}/{}", rows % ROWS, rows / ROWS);
                    insert.execute(rusqlite::params![rows as i64 + 1, key.as_bytes(), value.as_slice()])?;
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
