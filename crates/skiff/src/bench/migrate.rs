//! `skiff bench migrate`: `skiff datastore migrate`'s copy of an embedded store into etcd,
//! objects/s and the peak RSS it adds, next to raw creates of the same keys and values straight
//! into a second etcd at the same concurrency (the rate etcd itself allows) in the same run.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use skiff_store::Backend;
use skiff_store::etcd::EtcdBackend;
use skiff_store::etcd::harness::EtcdCluster;
use skiff_store::sqlite::SqliteBackend;

/// Flags of `skiff bench migrate`.
#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// Objects in the embedded store.
    #[arg(long, default_value_t = 100_000)]
    objects: usize,
    /// Bytes per object (Kubernetes objects are typically 1-4 KiB of JSON).
    #[arg(long, default_value_t = 1536)]
    value_size: usize,
}

fn key(i: usize) -> String {
    format!("/registry/configmaps/ns{}/cm-{i:07}", i % 100)
}

/// Peak RSS (`VmHWM`) of this process in bytes.
fn peak_rss() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmHWM in /proc/self/status"))?;
    Ok(kb * 1024)
}

/// Runs the bench.
///
/// # Errors
/// etcd cannot be started, or a store operation fails.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let opts = skiff_store::Options { compaction_interval: None, ..Default::default() };
    let source: Arc<dyn Backend> = Arc::new(SqliteBackend::open(&dir.path().join("state.db"), opts.clone())?);
    let value = vec![b'x'; args.value_size];
    let started = Instant::now();
    {
        let mut writes = futures::stream::iter((0..args.objects).map(|i| {
            let (source, value) = (source.clone(), value.clone());
            async move { source.create(&key(i), value).await }
        }))
        .buffer_unordered(256);
        while let Some(w) = writes.next().await {
            w?;
        }
    }
    println!(
        "embedded store filled with {} objects of {} bytes in {:.1} s",
        args.objects,
        args.value_size,
        started.elapsed().as_secs_f64()
    );

    // Baseline: the same keys and values created straight into an etcd of its own.
    let raw_etcd = EtcdCluster::start(1).await?;
    let raw: Arc<dyn Backend> = Arc::new(EtcdBackend::connect(raw_etcd.config(), opts.clone()).await?);
    let started = Instant::now();
    {
        let mut writes = futures::stream::iter((0..args.objects).map(|i| {
            let (raw, value) = (raw.clone(), value.clone());
            async move { raw.create(&key(i), value).await }
        }))
        .buffer_unordered(64);
        while let Some(w) = writes.next().await {
            w?;
        }
    }
    let raw_secs = started.elapsed().as_secs_f64();
    drop(raw);
    drop(raw_etcd);

    let etcd = EtcdCluster::start(1).await?;
    let target = crate::datastore::CopyTarget::Etcd(Arc::new(EtcdBackend::connect(etcd.config(), opts).await?));
    // Reset the peak so it measures the copy alone (`5` to clear_refs: proc(5)).
    std::fs::write("/proc/self/clear_refs", "5")?;
    let rss_before = crate::bench::harness::process_rss_bytes("/proc/self/status")?;
    let started = Instant::now();
    let report = crate::datastore::copy(source.as_ref(), &target, false, false).await?;
    let copy_secs = started.elapsed().as_secs_f64();
    let peak = peak_rss()?;
    let n = args.objects as f64;
    println!("raw etcd creates (64 in flight):   {:>8.0} objects/s ({raw_secs:.1} s)", n / raw_secs);
    println!(
        "skiff datastore migrate's copy:    {:>8.0} objects/s ({copy_secs:.1} s, {} keys)   ratio {:.2} of raw   target >= 10,000/s",
        report.keys as f64 / copy_secs,
        report.keys,
        raw_secs / copy_secs
    );
    println!(
        "peak RSS during the copy: {:.1} MiB (RSS before it {:.1} MiB)",
        peak as f64 / 1048576.0,
        rss_before as f64 / 1048576.0
    );
    Ok(())
}
