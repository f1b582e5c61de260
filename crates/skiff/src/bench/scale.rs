//! `skiff bench scale`: the whole cluster's memory and speed at scale, against a real
//! `skiff server --disable-agent` process (this binary, free loopback port, fresh data dir).
//!
//! 1. Baseline of the same run: an idle server with no nodes and no pods — its resident
//!    memory (`VmRSS`) and CPU cores used over an idle window.
//! 2. A server with `--nodes` simulated nodes, once they are Ready: RSS and idle CPU (what the
//!    nodes' heartbeats cost).
//! 3. `--pods` pods as Deployments of at most 5,000 replicas (pause image), created at once:
//!    the time until every pod is bound (the API server's count of successful `pods/binding`
//!    creates reaches the pod count) and until every Deployment reports all replicas available
//!    (simulated pods are Running and Ready at once). Then RSS, its growth per pod over the
//!    nodes-only server, the whole process per pod, and idle CPU with every pod Running.
//!
//! RSS is sampled from `/proc/PID/status` and CPU from `/proc/PID/stat` of the server process,
//! which hosts every component (API server, store, controllers, scheduler, simulated nodes).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use kube::api::{Api, ObjectMeta, PostParams};

use super::deployment::{pause_workload, start_simulated_cluster};
use super::harness::{ServerProcess, load_average, scrape};

/// Replicas of one Deployment at most: the shape is Deployments of 5,000.
const MAX_REPLICAS: usize = 5000;

/// Flags of `skiff bench scale`.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Simulated nodes.
    #[arg(long, default_value_t = 1000)]
    nodes: u32,
    /// Pods, as Deployments of at most 5,000 replicas.
    #[arg(long, default_value_t = 5000)]
    pods: usize,
    /// Seconds of each idle-CPU window.
    #[arg(long, default_value_t = 10.0)]
    idle_window: f64,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 900.0)]
    timeout: f64,
    /// Directory for the data directories (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Splits `pods` into Deployment sizes of at most [`MAX_REPLICAS`].
fn deployment_sizes(pods: usize) -> Vec<usize> {
    let mut sizes = vec![MAX_REPLICAS; pods / MAX_REPLICAS];
    if !pods.is_multiple_of(MAX_REPLICAS) {
        sizes.push(pods % MAX_REPLICAS);
    }
    sizes
}

/// Successful `pods/binding` creates in a Prometheus exposition of `apiserver_request_total`.
fn bindings(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("resource=\"pods\"") && l.contains("subresource=\"binding\"") && l.contains("code=\"2"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// CPU cores the process used over an idle `window`, and its RSS at the end, bytes.
async fn idle(server: &ServerProcess, window: Duration) -> anyhow::Result<(f64, u64)> {
    let before = server.cpu_time()?;
    tokio::time::sleep(window).await;
    let used = server.cpu_time()?.saturating_sub(before);
    Ok((used.as_secs_f64() / window.as_secs_f64(), server.rss_bytes()?))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// Runs the benchmark and prints its report.
pub async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let timeout = Duration::from_secs_f64(args.timeout);
    let window = Duration::from_secs_f64(args.idle_window.max(1.0));
    println!(
        "skiff bench scale: {} simulated nodes, {} pods; load average {} at start",
        args.nodes,
        args.pods,
        load_average()
    );

    // 1. Baseline: the idle server.
    let (base_cpu, base_rss) = {
        let dir = match &args.dir {
            Some(d) => tempfile::tempdir_in(d)?,
            None => tempfile::tempdir()?,
        };
        let mut server = ServerProcess::spawn(&dir.path().join("server"), &[])?;
        server.wait_ready(Duration::from_secs(60)).await?;
        // Let the components finish their start-up lists before the window.
        tokio::time::sleep(Duration::from_secs(3)).await;
        idle(&server, window).await?
    };
    println!("idle server (no nodes, no pods): RSS {:.1} MB, CPU {:.3} cores", mb(base_rss), base_cpu);

    // 2. Simulated nodes.
    let (_dir, server, admin) = start_simulated_cluster(args.dir.as_ref(), args.nodes, timeout).await?;
    let (nodes_cpu, nodes_rss) = idle(&server, window).await?;
    println!(
        "{} nodes Ready: RSS {:.1} MB ({:.1} KB per node over the idle server), idle CPU {:.3} cores ({:.2} ms/s per node)",
        args.nodes,
        mb(nodes_rss),
        nodes_rss.saturating_sub(base_rss) as f64 / 1e3 / f64::from(args.nodes.max(1)),
        nodes_cpu,
        (nodes_cpu - base_cpu).max(0.0) * 1e3 / f64::from(args.nodes.max(1)),
    );

    // 3. Pods.
    let api = Api::<Deployment>::namespaced(admin.clone(), "default");
    let sizes = deployment_sizes(args.pods);
    let bound_before = bindings(&scrape(&admin).await?);
    let cpu_before = server.cpu_time()?;
    let t0 = Instant::now();
    for (i, replicas) in sizes.iter().enumerate() {
        let name = format!("scale-{i}");
        let (selector, template) = pause_workload(&name);
        let d = Deployment {
            metadata: ObjectMeta { name: Some(name), ..Default::default() },
            spec: Some(DeploymentSpec { replicas: Some(*replicas as i32), selector, template, ..Default::default() }),
            ..Default::default()
        };
        api.create(&PostParams::default(), &d).await?;
    }
    let mut all_bound = None;
    let mut peak_rss = 0u64;
    let mut last_report = Instant::now();
    let all_running = loop {
        peak_rss = peak_rss.max(server.rss_bytes()?);
        let bound = bindings(&scrape(&admin).await?) - bound_before;
        if all_bound.is_none() && bound >= args.pods as f64 {
            all_bound = Some(t0.elapsed());
        }
        let mut available = 0usize;
        for i in 0..sizes.len() {
            let d = api.get(&format!("scale-{i}")).await?;
            available += d.status.and_then(|s| s.available_replicas).unwrap_or(0).max(0) as usize;
        }
        if available >= args.pods {
            // Every pod Running is every pod bound, whatever the binding count says.
            break t0.elapsed();
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  {:.0} s: {bound:.0} bound, {available} available, RSS {:.0} MB",
                t0.elapsed().as_secs_f64(),
                mb(server.rss_bytes()?)
            );
            last_report = Instant::now();
        }
        anyhow::ensure!(t0.elapsed() < timeout, "{bound:.0} bound and {available} available after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let all_bound = all_bound.unwrap_or(all_running);
    let busy_cpu = server.cpu_time()?.saturating_sub(cpu_before);
    // Let the last status writes and the controllers' follow-up syncs settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (pods_cpu, pods_rss) = idle(&server, window).await?;
    let pods = args.pods.max(1) as f64;
    let per_pod = pods_rss.saturating_sub(nodes_rss) as f64 / pods;
    println!(
        "{} pods in {} Deployments: all bound {:.2} s ({:.0} pods/s), all Running {:.2} s ({:.0} pods/s), \
         server CPU {:.1} s",
        args.pods,
        sizes.len(),
        all_bound.as_secs_f64(),
        pods / all_bound.as_secs_f64(),
        all_running.as_secs_f64(),
        pods / all_running.as_secs_f64(),
        busy_cpu.as_secs_f64()
    );
    println!(
        "with every pod Running: RSS {:.1} MB (peak seen {:.1} MB), {:.1} KB per pod over the nodes-only server, \
         {:.1} KB per pod all-in; idle CPU {:.3} cores; load average {} at end",
        mb(pods_rss),
        mb(peak_rss.max(pods_rss)),
        per_pod / 1e3,
        pods_rss as f64 / pods / 1e3,
        pods_cpu,
        load_average()
    );

    println!();
    println!("| measurement | value | vs idle server |");
    println!("|---|---:|---:|");
    println!("| idle server RSS | {:.1} MB | 1.0× |", mb(base_rss));
    println!("| {} nodes RSS | {:.1} MB | {:.1}× |", args.nodes, mb(nodes_rss), nodes_rss as f64 / base_rss as f64);
    println!(
        "| {} nodes + {} pods RSS | {:.1} MB | {:.1}× |",
        args.nodes,
        args.pods,
        mb(pods_rss),
        pods_rss as f64 / base_rss as f64
    );
    println!("| RSS per pod (over nodes only) | {:.1} KB | — |", per_pod / 1e3);
    println!("| idle CPU, idle server | {base_cpu:.3} cores | 1.0× |");
    let ratio = |c: f64| if base_cpu > 0.0 { format!("{:.1}×", c / base_cpu) } else { "—".into() };
    println!("| idle CPU, {} nodes | {nodes_cpu:.3} cores | {} |", args.nodes, ratio(nodes_cpu));
    println!("| idle CPU, {} nodes + {} pods | {pods_cpu:.3} cores | {} |", args.nodes, args.pods, ratio(pods_cpu));
    println!("| all bound | {:.2} s | — |", all_bound.as_secs_f64());
    println!("| all Running | {:.2} s | — |", all_running.as_secs_f64());
    drop(server);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_split_into_deployments_of_at_most_five_thousand() {
        assert_eq!(deployment_sizes(5000), vec![5000]);
        assert_eq!(deployment_sizes(12_001), vec![5000, 5000, 2001]);
        assert_eq!(deployment_sizes(300), vec![300]);
        assert!(deployment_sizes(0).is_empty());
    }

    #[test]
    fn bindings_count_only_successful_pod_binding_creates() {
        let text = "apiserver_request_total{verb=\"POST\",group=\"\",resource=\"pods\",subresource=\"binding\",code=\"201\"} 7\n\
                    apiserver_request_total{verb=\"POST\",group=\"\",resource=\"pods\",subresource=\"binding\",code=\"409\"} 2\n\
                    apiserver_request_total{verb=\"POST\",group=\"\",resource=\"pods\",subresource=\"\",code=\"201\"} 9\n";
        assert_eq!(bindings(text), 7.0);
    }
}
