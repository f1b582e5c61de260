//! `skiff bench jobs`: the Job controller's benchmark against a real `skiff server --simulated-nodes
//! N` process (this binary, free loopback port, fresh data directory): `--jobs` one-pod Jobs
//! whose pods the simulated nodes report Succeeded (`skiff.io/simulated-phase`), created by
//! `--clients` concurrent clients and timed from the first create until a watch has seen every
//! Job's `Complete` condition. Jobs/s is set against the target (100/s) and
//! kube-controller-manager's default client rate limit (20 QPS) as the anchor.
//!
//! API writes per Job (successful creates, updates, patches and deletes by resource, from the
//! server's `apiserver_request_total`) and the server's CPU seconds come from the same samples
//! as `skiff bench deployment`; the Job creates themselves are among the writes.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::watcher;

use super::deployment::{Cost, start_simulated_cluster};
use super::harness::{admin_client, load_average};

/// Flags of `skiff bench jobs`.
#[derive(clap::Args, Debug)]
pub struct JobsArgs {
    /// One-pod Jobs to run.
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    /// Simulated nodes (110 pods each).
    #[arg(long, default_value_t = 100)]
    nodes: u32,
    /// Concurrent clients creating the Jobs.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Directory for the data directory (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// The target.
const TARGET_JOBS_PER_SECOND: f64 = 100.0;
/// kube-controller-manager's default `--kube-api-qps`.
const KCM_DEFAULT_QPS: f64 = 20.0;

fn job(name: &str) -> Job {
    Job {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(JobSpec {
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    annotations: Some(BTreeMap::from([(
                        skiff_kubelet::simulated::SIMULATED_PHASE_ANNOTATION.to_string(),
                        "Succeeded".to_string(),
                    )])),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_string()),
                    containers: vec![Container {
                        name: "main".to_string(),
                        image: Some("registry.k8s.io/pause:3.10".to_string()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn complete(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Complete" && c.status == "True"))
}

/// Runs the benchmark and prints its report.
pub async fn run(args: JobsArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let timeout = Duration::from_secs_f64(args.timeout);
    println!(
        "skiff bench jobs: {} one-pod Jobs on {} simulated nodes, {} creating clients; load average {} at start",
        args.jobs,
        args.nodes,
        args.clients,
        load_average()
    );
    let (_dir, server, admin) =
        start_simulated_cluster(args.dir.as_ref(), args.nodes, Duration::from_secs(120)).await?;

    let api = Api::<Job>::namespaced(admin.clone(), "default");
    // The watch is running before the first create, so no completion is missed.
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
    let watch_api = api.clone();
    let watch = tokio::spawn(async move {
        let mut seen = HashSet::new();
        let mut stream = watcher(watch_api, watcher::Config::default()).boxed();
        while let Some(event) = stream.try_next().await? {
            let jobs: Vec<Job> = match event {
                watcher::Event::Apply(j) | watcher::Event::InitApply(j) => vec![j],
                _ => Vec::new(),
            };
            for j in jobs.into_iter().filter(complete) {
                if seen.insert(j.metadata.name.clone().unwrap_or_default()) {
                    let _ = done_tx.send(seen.len());
                }
            }
        }
        anyhow::Ok(())
    });

    let pid = server.pid();
    let c0 = Cost::sample(&admin, pid).await?;
    let mut clients = Vec::with_capacity(args.clients.max(1));
    for _ in 0..args.clients.max(1) {
        clients.push(admin_client(&server.kubeconfig()).await?);
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let total = args.jobs;
    let t0 = Instant::now();
    let creators: Vec<_> = clients
        .into_iter()
        .map(|c| {
            let next = next.clone();
            tokio::spawn(async move {
                let api = Api::<Job>::namespaced(c, "default");
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= total {
                        return anyhow::Ok(());
                    }
                    api.create(&PostParams::default(), &job(&format!("bench-{i}"))).await?;
                }
            })
        })
        .collect();
    for c in creators {
        c.await??;
    }
    let created = t0.elapsed();
    println!("created {total} Jobs in {:.2} s ({:.0}/s)", created.as_secs_f64(), total as f64 / created.as_secs_f64());

    let mut completed = 0;
    let mut last_report = Instant::now();
    while completed < total {
        let left = timeout.saturating_sub(t0.elapsed());
        anyhow::ensure!(!left.is_zero(), "{completed} of {total} Jobs complete after {timeout:?}");
        match tokio::time::timeout(left.min(Duration::from_secs(5)), done_rx.recv()).await {
            Ok(Some(n)) => completed = n,
            Ok(None) => anyhow::bail!("the Job watch ended: {:?}", watch.await),
            Err(_) => {}
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!("  {:.0} s: {completed} of {total} Jobs complete", t0.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
    }
    let took = t0.elapsed();
    watch.abort();
    let c1 = Cost::sample(&admin, pid).await?;
    let rate = total as f64 / took.as_secs_f64();
    println!("created → {total} Complete: {:.2} s ({rate:.0} Jobs/s)", took.as_secs_f64());
    c0.report(&c1, total as i32, "Job", "jobs");
    println!("RSS at the end: {:.1} MB; load average {} at end", server.rss_bytes()? as f64 / 1e6, load_average());

    println!();
    println!(
        "| measurement | Jobs/s | vs target {TARGET_JOBS_PER_SECOND:.0}/s | vs {KCM_DEFAULT_QPS:.0} QPS client limit |"
    );
    println!("|---|---:|---:|---:|");
    println!(
        "| {total} one-pod Jobs created → Complete ({} nodes) | {rate:.0} | {:.2}× | {:.1}× |",
        args.nodes,
        rate / TARGET_JOBS_PER_SECOND,
        rate / KCM_DEFAULT_QPS
    );
    Ok(())
}
