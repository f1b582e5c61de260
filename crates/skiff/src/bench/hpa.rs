//! `skiff bench hpa`: the horizontal pod autoscaler's CPU cost per sync, against a real
//! `skiff server --simulated-nodes N` process (this binary, free loopback port, fresh data
//! directory) with `--hpas` one-replica Deployments and as many HPAs targeting them.
//!
//! The baseline is the same server with the same Deployments and pods over the same window
//! before any HPA exists (the idle cost of the objects, the nodes' heartbeats and the other
//! controllers). Then the HPAs are created, and once every one has been synced (its status
//! carries conditions) the server's CPU is measured again over the window; the HPA controller's
//! syncs in the window are counted from `controller_reconcile_total`. CPU per sync is the
//! difference over the syncs; the ratio is the server's CPU with HPAs over without.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec, MetricTarget,
    ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

use super::deployment::start_simulated_cluster_with;
use super::harness::{load_average, metric_sum, scrape};

/// Flags of `skiff bench hpa`.
#[derive(clap::Args, Debug)]
pub struct HpaArgs {
    /// HPAs (and one-replica Deployments they target).
    #[arg(long, default_value_t = 1_000)]
    hpas: usize,
    /// Simulated nodes (110 pods each).
    #[arg(long, default_value_t = 10)]
    nodes: u32,
    /// The HPA sync period, seconds (`--horizontal-pod-autoscaler-sync-period`).
    #[arg(long, default_value_t = 15)]
    sync_period: u64,
    /// Measurement window of each phase, seconds.
    #[arg(long, default_value_t = 60)]
    window: u64,
    /// Give up waiting after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Directory for the data directory (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

const RECONCILES: &str = "controller_reconcile_total{controller=\"horizontalpodautoscaling\"";

fn deployment(name: &str) -> Deployment {
    let labels = std::collections::BTreeMap::from([("app".to_string(), name.to_string())]);
    Deployment {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector { match_labels: Some(labels.clone()), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some("registry.k8s.io/pause:3.10".into()),
                        resources: Some(ResourceRequirements {
                            requests: Some([("cpu".to_string(), Quantity("100m".into()))].into()),
                            ..Default::default()
                        }),
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

fn hpa(name: &str) -> HorizontalPodAutoscaler {
    HorizontalPodAutoscaler {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: name.into(),
            },
            min_replicas: Some(1),
            max_replicas: 3,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(50),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }]),
            behavior: None,
        }),
        status: None,
    }
}

/// Polls `done` every second until it holds or `limit` passes.
async fn wait_until<F, Fut>(what: &str, limit: Duration, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let t0 = Instant::now();
    while !done().await? {
        anyhow::ensure!(t0.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// Runs the benchmark and prints its report.
pub async fn run(args: HpaArgs) -> anyhow::Result<()> {
    let timeout = Duration::from_secs_f64(args.timeout);
    let window = Duration::from_secs(args.window);
    println!(
        "skiff bench hpa: {} HPAs on {} one-replica Deployments, {} simulated nodes, sync period {} s, \
         {} s windows; load average {} at start",
        args.hpas,
        args.hpas,
        args.nodes,
        args.sync_period,
        args.window,
        load_average()
    );
    let period = format!("{}s", args.sync_period);
    let (_dir, server, admin) = start_simulated_cluster_with(
        args.dir.as_ref(),
        args.nodes,
        Duration::from_secs(120),
        &["--horizontal-pod-autoscaler-sync-period", &period],
    )
    .await?;

    let deployments = Api::<Deployment>::namespaced(admin.clone(), "default");
    for i in 0..args.hpas {
        deployments.create(&PostParams::default(), &deployment(&format!("hpa-bench-{i}"))).await?;
    }
    let n = args.hpas;
    wait_until("every Deployment available", timeout, || {
        let deployments = deployments.clone();
        async move {
            let list = deployments.list(&ListParams::default()).await?;
            let ready = list
                .items
                .iter()
                .filter(|d| d.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0) >= 1)
                .count();
            Ok(ready >= n)
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Baseline: the same objects, no HPA.
    let cpu0 = server.cpu_time()?;
    tokio::time::sleep(window).await;
    let baseline = (server.cpu_time()? - cpu0).as_secs_f64();
    println!("baseline (no HPA): server CPU {baseline:.2} s over {} s", args.window);

    let hpas = Api::<HorizontalPodAutoscaler>::namespaced(admin.clone(), "default");
    let t0 = Instant::now();
    for i in 0..args.hpas {
        hpas.create(&PostParams::default(), &hpa(&format!("hpa-bench-{i}"))).await?;
    }
    wait_until("every HPA synced once", timeout, || {
        let hpas = hpas.clone();
        async move {
            let list = hpas.list(&ListParams::default()).await?;
            let synced = list
                .items
                .iter()
                .filter(|h| h.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| !c.is_empty()))
                .count();
            Ok(synced >= n)
        }
    })
    .await?;
    println!("{} HPAs created and synced once in {:.1} s", args.hpas, t0.elapsed().as_secs_f64());
    let sample = hpas.list(&ListParams::default().limit(1)).await?;
    if let Some(c) = sample.items.first().and_then(|h| h.status.as_ref()).and_then(|s| s.conditions.as_ref()) {
        for c in c {
            println!(
                "  e.g. {} {} {}: {}",
                c.type_,
                c.status,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            );
        }
    }

    let syncs0 = metric_sum(&scrape(&admin).await?, RECONCILES);
    let cpu1 = server.cpu_time()?;
    tokio::time::sleep(window).await;
    let with_hpas = (server.cpu_time()? - cpu1).as_secs_f64();
    let syncs = metric_sum(&scrape(&admin).await?, RECONCILES) - syncs0;
    let expected = args.hpas as f64 * args.window as f64 / args.sync_period as f64;
    let per_sync_us = (with_hpas - baseline).max(0.0) / syncs.max(1.0) * 1e6;
    println!(
        "with {} HPAs: server CPU {with_hpas:.2} s over {} s; {syncs:.0} HPA syncs ({expected:.0} expected at one per \
         period); load average {} at end",
        args.hpas,
        args.window,
        load_average()
    );
    println!();
    println!("| measurement | server CPU s / {} s | vs baseline | CPU per HPA sync |", args.window);
    println!("|---|---:|---:|---:|");
    println!("| baseline: {} Deployments, no HPA | {baseline:.2} | 1.00× | — |", args.hpas);
    println!(
        "| {} HPAs, sync period {} s | {with_hpas:.2} | {:.2}× | {per_sync_us:.0} µs |",
        args.hpas,
        args.sync_period,
        with_hpas / baseline.max(1e-9)
    );
    Ok(())
}
