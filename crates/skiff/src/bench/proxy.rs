//! `skiff bench proxy`: the node proxy on a real kernel. A network namespace made by
//! the benchmark is programmed with 10,000 Services and 50,000 endpoints; then, one at a time,
//! an endpoint is added to or removed from a Service, or a new Service is created, and the time
//! from handing the change to the proxier (as its informer handler does) to the nftables
//! transaction holding it being applied is measured: p50/p99 against the 100 ms target.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use skiff_proxy::{Cidr, NftCommand, Proxier, ProxierConfig, RuleConfig, testing};

use super::harness::{Samples, cpu_us_per_op, load_average, ms, process_cpu_time};

/// Flags of `skiff bench proxy`.
#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// Services programmed before the measured changes.
    #[arg(long, default_value_t = 10_000)]
    pub services: usize,
    /// Endpoints per Service (10,000 × 5 = 50,000).
    #[arg(long, default_value_t = 5)]
    pub endpoints: usize,
    /// Measured changes, applied one after the other.
    #[arg(long, default_value_t = 300)]
    pub changes: usize,
    /// Pause between two measured changes, in milliseconds (changes arriving apart, as from
    /// a cluster's informers; 0 sends the next as soon as the previous one is applied).
    #[arg(long, default_value_t = 20)]
    pub pause_ms: u64,
}

/// The p99 target of the issue.
const TARGET_P99: Duration = Duration::from_millis(100);

fn service(i: usize, ip: Ipv4Addr, node_port: Option<i32>) -> Arc<Service> {
    testing::service("bench", &format!("svc-{i}"), &ip.to_string(), 80, node_port)
}

/// The slice of Service `i`; its endpoints are on other nodes than the proxy's.
fn slice(i: usize, ips: &[Ipv4Addr]) -> Arc<EndpointSlice> {
    let ips: Vec<String> = ips.iter().map(Ipv4Addr::to_string).collect();
    let endpoints: Vec<(&str, bool, &str)> = ips.iter().map(|ip| (ip.as_str(), true, "node-1")).collect();
    testing::slice("bench", &format!("svc-{i}"), &format!("svc-{i}-1"), 8080, &endpoints)
}

/// ClusterIP of Service `i` in 10.43.0.0/16 (the default range; `.0.0` skipped).
fn cluster_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 43, 0, 1)) + i as u32)
}

/// Pod IP number `n` in 10.42.0.0/15.
fn pod_ip(n: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 42, 0, 2)) + n as u32)
}

/// A network namespace removed on drop.
struct NetNs(String);

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// CPU time of the waited-for children (the `nft` processes): `cutime + cstime`, fields 16 and
/// 17 of /proc/self/stat, counted after the command name's closing parenthesis.
fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or_default();
    let ticks: u64 = rest.split_whitespace().skip(13).take(2).filter_map(|f| f.parse::<u64>().ok()).sum();
    Duration::from_millis(ticks * 10)
}

async fn sync(p: &Arc<Proxier>) -> anyhow::Result<skiff_proxy::SyncOutcome> {
    let p = p.clone();
    Ok(tokio::task::spawn_blocking(move || p.sync()).await??)
}

/// Runs the benchmark and prints its figures.
///
/// # Errors
/// Without root, `nft` or `ip netns`, or when a transaction is refused.
pub async fn run(args: ProxyArgs) -> anyhow::Result<()> {
    anyhow::ensure!(rustix::process::geteuid().is_root(), "skiff bench proxy needs root (a network namespace)");
    anyhow::ensure!(NftCommand::default().is_available(), "no `nft` program (Debian package nftables)");
    let name = format!("skiff-bench-proxy-{}", std::process::id());
    let status = std::process::Command::new("ip").args(["netns", "add", &name]).status().context("ip netns add")?;
    anyhow::ensure!(status.success(), "ip netns add {name} failed");
    let ns = NetNs(name);
    let nft = NftCommand::in_netns(&ns.0);
    let cfg = ProxierConfig {
        node_name: "node-0".into(),
        rules: RuleConfig { local_traffic: Cidr::parse("10.42.0.0/24") },
        min_sync_period: skiff_proxy::DEFAULT_MIN_SYNC_PERIOD,
    };
    let proxier = Proxier::new(cfg, Arc::new(nft.clone()));
    println!(
        "proxy: {} Services × {} endpoints in network namespace {} (nft JSON, min sync period {:?}), load {}",
        args.services,
        args.endpoints,
        ns.0,
        skiff_proxy::DEFAULT_MIN_SYNC_PERIOD,
        load_average()
    );

    // Every tenth Service is a NodePort (30000 + i/10).
    let mut endpoints: Vec<Vec<Ipv4Addr>> = Vec::with_capacity(args.services);
    for i in 0..args.services {
        let node_port = (i % 10 == 0 && i / 10 < 2_768).then(|| 30_000 + (i / 10) as i32);
        proxier.on_service(&service(i, cluster_ip(i), node_port));
        let ips: Vec<Ipv4Addr> = (0..args.endpoints).map(|e| pod_ip(i * args.endpoints + e)).collect();
        proxier.on_slice(&slice(i, &ips));
        endpoints.push(ips);
    }
    let started = Instant::now();
    let outcome = sync(&proxier).await?;
    println!("  initial full sync: {} ({} commands in one transaction)", ms(started.elapsed()), outcome.commands);

    let runner = tokio::spawn(proxier.clone().run(std::future::ready(())));
    let (own_before, nft_before) = (process_cpu_time("/proc/self/stat")?, children_cpu());
    let mut samples = Samples::default();
    let mut next_pod = args.services * args.endpoints;
    let mut last_ip = None;
    for k in 0..args.changes {
        tokio::time::sleep(Duration::from_millis(args.pause_ms)).await;
        let i = (k * 7_919) % args.services;
        let t0 = Instant::now();
        match k % 3 {
            // A new endpoint.
            0 => {
                endpoints[i].push(pod_ip(next_pod));
                next_pod += 1;
                proxier.on_slice(&slice(i, &endpoints[i]));
            }
            // An endpoint removed.
            1 => {
                endpoints[i].pop();
                proxier.on_slice(&slice(i, &endpoints[i]));
            }
            // A new Service with its endpoints.
            _ => {
                let j = args.services + k;
                let ip = cluster_ip(j);
                proxier.on_service(&service(j, ip, None));
                proxier.on_slice(&slice(j, &[pod_ip(next_pod), pod_ip(next_pod + 1)]));
                next_pod += 2;
                last_ip = Some(ip);
            }
        }
        let seq = proxier.changes();
        tokio::time::timeout(Duration::from_secs(30), proxier.wait_applied(seq))
            .await
            .context("a change was not applied within 30 s")?;
        samples.0.push(t0.elapsed());
    }
    let (own_after, nft_after) = (process_cpu_time("/proc/self/stat")?, children_cpu());
    runner.abort();
    if let Some(ip) = last_ip {
        let listed = nft.list(&["list", "map", "ip", skiff_proxy::rules::TABLE, skiff_proxy::rules::SERVICE_IPS])?;
        anyhow::ensure!(listed.contains(&ip.to_string()), "the last Service created ({ip}) is not in the kernel's map");
    }
    let (p50, p99, max) = (samples.percentile(50.0), samples.percentile(99.0), samples.percentile(100.0));
    println!(
        "  change → rule applied, {} changes: p50 {}, p99 {}, max {} (target p99 ≤ {}: {}, p99/target {:.2})",
        args.changes,
        ms(p50),
        ms(p99),
        ms(max),
        ms(TARGET_P99),
        if p99 <= TARGET_P99 { "met" } else { "missed" },
        p99.as_secs_f64() / TARGET_P99.as_secs_f64()
    );
    println!(
        "  CPU per change: nft {:.1} ms, this process {:.1} ms (wall times above also include waiting for a CPU)",
        cpu_us_per_op(nft_before, nft_after, args.changes) / 1000.0,
        cpu_us_per_op(own_before, own_after, args.changes) / 1000.0
    );
    Ok(())
}
