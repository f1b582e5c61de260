//! `skiff bench daemonset`: the DaemonSet controller's benchmark against a real `skiff server
//! --disable-agent --simulated-nodes N` process (this binary, free loopback port, fresh data
//! directory):
//!
//! 1. a DaemonSet (pause image, RollingUpdate with `--max-unavailable`, 10 % by default) created
//!    through the API, timed until every node runs an available pod;
//! 2. a rolling update of it (a pod-template annotation), timed until `kubectl rollout status`
//!    would finish: the new generation observed and every node's pod updated and available.
//!
//! Per phase the server process's CPU seconds and API writes are printed (the process hosts
//! every component — API server, store, controllers, scheduler, simulated nodes — so its CPU
//! time is the cluster's cost of the phase, the DaemonSet controller's included), with the
//! controllers' reconciles.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, RollingUpdateDaemonSet};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use super::deployment::{Cost, reconciles, start_simulated_cluster};
use super::harness::load_average;

/// Flags of `skiff bench daemonset`.
#[derive(clap::Args, Debug)]
pub struct DaemonSetArgs {
    /// Simulated nodes (one daemon pod each).
    #[arg(long, default_value_t = 5000)]
    nodes: u32,
    /// `maxUnavailable` of the rolling update (an integer or a percentage).
    #[arg(long, default_value = "10%")]
    max_unavailable: String,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Directory for the data directory (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn daemon_set(name: &str, max_unavailable: &str) -> DaemonSet {
    let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
    let max_unavailable = match max_unavailable.parse::<i32>() {
        Ok(n) => IntOrString::Int(n),
        Err(_) => IntOrString::String(max_unavailable.to_string()),
    };
    DaemonSet {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector { match_labels: Some(labels.clone()), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "pause".to_string(),
                        image: Some("registry.k8s.io/pause:3.10".to_string()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            update_strategy: Some(DaemonSetUpdateStrategy {
                type_: Some("RollingUpdate".to_string()),
                rolling_update: Some(RollingUpdateDaemonSet {
                    max_unavailable: Some(max_unavailable),
                    max_surge: Some(IntOrString::Int(0)),
                }),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Polls the DaemonSet every 100 ms until every one of `nodes` nodes runs an updated,
/// available pod of generation `generation` or later; returns the time since `from` and prints
/// progress every 5 s.
async fn wait_rolled_out(
    api: &Api<DaemonSet>,
    nodes: i32,
    generation: Option<i64>,
    from: Instant,
    timeout: Duration,
    what: &str,
) -> anyhow::Result<Duration> {
    let mut last_report = Instant::now();
    loop {
        let ds = api.get("bench").await?;
        let s = ds.status.clone().unwrap_or_default();
        if s.observed_generation >= generation
            && s.desired_number_scheduled == nodes
            && s.updated_number_scheduled == Some(nodes)
            && s.number_available == Some(nodes)
        {
            return Ok(from.elapsed());
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "  {what}: {:.0} s, desired {} current {} updated {} available {}",
                from.elapsed().as_secs_f64(),
                s.desired_number_scheduled,
                s.current_number_scheduled,
                s.updated_number_scheduled.unwrap_or(0),
                s.number_available.unwrap_or(0)
            );
            last_report = Instant::now();
        }
        anyhow::ensure!(from.elapsed() < timeout, "{what}: not done after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the benchmark and prints its report.
pub async fn run(args: DaemonSetArgs) -> anyhow::Result<()> {
    let timeout = Duration::from_secs_f64(args.timeout);
    println!(
        "skiff bench daemonset: {} simulated nodes, maxUnavailable {}; load average {} at start",
        args.nodes,
        args.max_unavailable,
        load_average()
    );
    let (_base, server, admin) = start_simulated_cluster(args.dir.as_ref(), args.nodes, timeout).await?;

    let n = args.nodes as i32;
    let api = Api::<DaemonSet>::namespaced(admin.clone(), "default");
    let pid = server.pid();
    let r0 = reconciles(&admin).await?;
    let c0 = Cost::sample(&admin, pid).await?;
    let t0 = Instant::now();
    let created = api.create(&PostParams::default(), &daemon_set("bench", &args.max_unavailable)).await?;
    let took_create = wait_rolled_out(&api, n, created.metadata.generation, t0, timeout, "create").await?;
    let c1 = Cost::sample(&admin, pid).await?;
    let r1 = reconciles(&admin).await?;
    println!(
        "create → a pod available on each of {n} nodes: {:.2} s ({:.0} pods/s), {:.0} reconciles",
        took_create.as_secs_f64(),
        f64::from(n) / took_create.as_secs_f64(),
        r1 - r0
    );
    c0.report(&c1, n, "pod", "create");

    let t1 = Instant::now();
    let patch = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {"bench.skiff.io/rev": "2"}}}}});
    let patched = api.patch("bench", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let took_update = wait_rolled_out(&api, n, patched.metadata.generation, t1, timeout, "rolling update").await?;
    let c2 = Cost::sample(&admin, pid).await?;
    let r2 = reconciles(&admin).await?;
    println!(
        "rolling update of {n} pods, maxUnavailable {}: {:.2} s ({:.0} pods/s), {:.0} reconciles",
        args.max_unavailable,
        took_update.as_secs_f64(),
        f64::from(n) / took_update.as_secs_f64(),
        r2 - r1
    );
    c1.report(&c2, n, "pod", "rolling update");
    println!("RSS at the end: {:.1} MB; load average {} at end", server.rss_bytes()? as f64 / 1e6, load_average());
    Ok(())
}
