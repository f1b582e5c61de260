//! `skiff bench netpol`: NetworkPolicy enforcement on a real kernel. A network namespace made by
//! the benchmark is programmed with 1,000 policies over 10,000 pods of one node (100
//! namespaces × 100 pods, 10 policies per namespace: each selects an `app`, allows two peer
//! selections — a `role` in its namespace and a `role` in namespaces of a `team` — on a
//! numbered and a named port, every third also isolates egress to an ipBlock with an except).
//! Then, one at a time, a pod's `role` or `app` label or a namespace's `team` label changes, and
//! the time from handing the change to the controller (as its informer handler does) to the
//! nftables transaction holding it being applied is measured: p50/p99 against the 100 ms
//! target. The baseline, measured in the same run, is what the change would cost if the rule
//! set were rebuilt whole (the controller's full sync of the same state).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use skiff_netpol::testing::{namespace, network_policy, pod, with_named_port};
use skiff_netpol::{Controller, ControllerConfig};
use skiff_proxy::NftCommand;

use super::harness::{Samples, cpu_us_per_op, load_average, ms, process_cpu_time};

/// Flags of `skiff bench netpol`.
#[derive(clap::Args, Debug)]
pub struct NetpolArgs {
    /// Namespaces (100 pods and 10 policies each: 100 → 10,000 pods, 1,000 policies).
    #[arg(long, default_value_t = 100)]
    pub namespaces: usize,
    /// Measured label changes, applied one after the other.
    #[arg(long, default_value_t = 300)]
    pub changes: usize,
    /// Full rebuilds measured as the baseline.
    #[arg(long, default_value_t = 5)]
    pub rebuilds: usize,
    /// Pause between two measured changes, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub pause_ms: u64,
}

/// The p99 target of the issue.
const TARGET_P99: Duration = Duration::from_millis(100);
const PODS_PER_NAMESPACE: usize = 100;
const POLICIES_PER_NAMESPACE: usize = 10;

/// A network namespace removed on drop.
struct NetNs(String);

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// CPU time of the waited-for children (the `nft` processes), from /proc/self/stat.
fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or_default();
    let ticks: u64 = rest.split_whitespace().skip(13).take(2).filter_map(|f| f.parse::<u64>().ok()).sum();
    Duration::from_millis(ticks * 10)
}

fn pod_ip(n: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 42, 0, 2)) + n as u32)
}

/// Pod `p` of namespace `n`, with its `role`.
fn bench_pod(n: usize, p: usize, app: usize, role: usize) -> Arc<Pod> {
    let ip = pod_ip(n * PODS_PER_NAMESPACE + p).to_string();
    let (app, role) = (format!("app-{app}"), format!("role-{role}"));
    let base = pod(&format!("ns-{n}"), &format!("pod-{p}"), "node-0", &ip, &[("app", &app), ("role", &role)]);
    with_named_port(&base, "http", 8080)
}

fn bench_policy(n: usize, k: usize) -> Arc<k8s_openapi::api::networking::v1::NetworkPolicy> {
    let mut spec = json!({
        "podSelector": {"matchLabels": {"app": format!("app-{k}")}},
        "ingress": [{
            "from": [
                {"podSelector": {"matchLabels": {"role": format!("role-{}", k % 5)}}},
                {"namespaceSelector": {"matchLabels": {"team": format!("team-{}", n % 10)}},
                 "podSelector": {"matchLabels": {"role": format!("role-{}", (k + 1) % 5)}}},
            ],
            "ports": [{"port": 80 + k as i32}, {"port": "http"}],
        }],
    });
    if k.is_multiple_of(3) {
        spec["egress"] = json!([{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.42.0.0/16"]}}]}]);
    }
    network_policy(&format!("ns-{n}"), &format!("policy-{k}"), spec)
}

async fn sync(c: &Arc<Controller>) -> anyhow::Result<skiff_netpol::SyncOutcome> {
    let c = c.clone();
    Ok(tokio::task::spawn_blocking(move || c.sync()).await??)
}

/// Runs the benchmark and prints its figures.
///
/// # Errors
/// Without root, `nft` or `ip netns`, or when a transaction is refused.
pub async fn run(args: NetpolArgs) -> anyhow::Result<()> {
    anyhow::ensure!(rustix::process::geteuid().is_root(), "skiff bench netpol needs root (a network namespace)");
    anyhow::ensure!(NftCommand::default().is_available(), "no `nft` program (Debian package nftables)");
    let name = format!("skiff-bench-netpol-{}", std::process::id());
    let status = std::process::Command::new("ip").args(["netns", "add", &name]).status().context("ip netns add")?;
    anyhow::ensure!(status.success(), "ip netns add {name} failed");
    let ns = NetNs(name);
    let nft = NftCommand::in_netns(&ns.0);
    let cfg = ControllerConfig::node("node-0");
    let c = Controller::new(cfg, Arc::new(nft.clone()));
    let pods = args.namespaces * PODS_PER_NAMESPACE;
    let policies = args.namespaces * POLICIES_PER_NAMESPACE;
    println!(
        "netpol: {policies} NetworkPolicies, {pods} pods on one node, {} namespaces, in network namespace {} \
         (nft JSON, min sync period {:?}), load {}",
        args.namespaces,
        ns.0,
        skiff_netpol::DEFAULT_MIN_SYNC_PERIOD,
        load_average()
    );
    let started = Instant::now();
    // labels[n][p] = (app, role)
    let mut labels: Vec<Vec<(usize, usize)>> = Vec::with_capacity(args.namespaces);
    let mut teams: Vec<usize> = Vec::with_capacity(args.namespaces);
    for n in 0..args.namespaces {
        let team = n % 10;
        c.on_namespace(&namespace(&format!("ns-{n}"), &[("team", &format!("team-{team}"))]));
        teams.push(team);
        let mut l = Vec::with_capacity(PODS_PER_NAMESPACE);
        for p in 0..PODS_PER_NAMESPACE {
            let (app, role) = (p % 12, p % 5);
            c.on_pod(&bench_pod(n, p, app, role));
            l.push((app, role));
        }
        labels.push(l);
        for k in 0..POLICIES_PER_NAMESPACE {
            c.on_policy(&bench_policy(n, k));
        }
    }
    let compiled = started.elapsed();
    let started = Instant::now();
    let outcome = sync(&c).await?;
    println!(
        "  state built in {}, initial full sync {} ({} commands in one transaction)",
        ms(compiled),
        ms(started.elapsed()),
        outcome.commands
    );

    // Baseline: the same state rebuilt whole.
    let mut rebuilds = Samples::default();
    for _ in 0..args.rebuilds {
        c.force_full_sync();
        let t0 = Instant::now();
        anyhow::ensure!(sync(&c).await?.full, "a forced sync was not full");
        rebuilds.0.push(t0.elapsed());
    }
    let rebuild_p50 = rebuilds.percentile(50.0);

    let runner = tokio::spawn(c.clone().run(std::future::ready(())));
    let (own_before, nft_before) = (process_cpu_time("/proc/self/stat")?, children_cpu());
    let mut samples = Samples::default();
    let mut last_role_change = None;
    for i in 0..args.changes {
        tokio::time::sleep(Duration::from_millis(args.pause_ms)).await;
        let n = (i * 7_919) % args.namespaces;
        let p = (i * 104_729) % PODS_PER_NAMESPACE;
        let t0 = Instant::now();
        match i % 5 {
            // A pod's role: it enters one peer set and leaves another.
            0..=2 => {
                let (app, role) = labels[n][p];
                let role = (role + 1) % 5;
                labels[n][p] = (app, role);
                c.on_pod(&bench_pod(n, p, app, role));
                last_role_change = Some((n, p, role));
            }
            // A pod's app: another policy selects it (target set and chain).
            3 => {
                let (app, role) = labels[n][p];
                let app = (app + 1) % 12;
                labels[n][p] = (app, role);
                c.on_pod(&bench_pod(n, p, app, role));
            }
            // A namespace's team: its pods move between namespace-selector sets.
            _ => {
                teams[n] = (teams[n] + 1) % 10;
                c.on_namespace(&namespace(&format!("ns-{n}"), &[("team", &format!("team-{}", teams[n]))]));
            }
        }
        let seq = c.changes();
        tokio::time::timeout(Duration::from_secs(30), c.wait_applied(seq))
            .await
            .context("a change was not applied within 30 s")?;
        samples.0.push(t0.elapsed());
    }
    let (own_after, nft_after) = (process_cpu_time("/proc/self/stat")?, children_cpu());
    runner.abort();
    if let Some((n, p, role)) = last_role_change {
        // The pod is now in the set of `role-<role>` pods of its namespace.
        let sel = skiff_netpol::policy::Selection {
            namespaces: skiff_netpol::policy::NamespaceScope::Only(format!("ns-{n}")),
            pods: skiff_apimachinery::selector::LabelSelector::parse(&format!("role=role-{role}"))
                .map_err(anyhow::Error::msg)?,
            local: false,
        };
        let set = skiff_netpol::rules::selection_set(&sel);
        let listed = nft.list(&["list", "set", "ip", skiff_netpol::rules::TABLE, &set])?;
        let ip = pod_ip(n * PODS_PER_NAMESPACE + p).to_string();
        anyhow::ensure!(listed.contains(&ip), "the last relabelled pod ({ip}) is not in the kernel's set {set}");
    }
    let (p50, p99, max) = (samples.percentile(50.0), samples.percentile(99.0), samples.percentile(100.0));
    println!(
        "  baseline, the whole rule set rebuilt ({} rebuilds): p50 {}, max {}",
        args.rebuilds,
        ms(rebuild_p50),
        ms(rebuilds.percentile(100.0))
    );
    println!(
        "  label change → enforced, {} changes: p50 {}, p99 {}, max {} (target p99 ≤ {}: {}, p99/target {:.2}; \
         p50/rebuild {:.3})",
        args.changes,
        ms(p50),
        ms(p99),
        ms(max),
        ms(TARGET_P99),
        if p99 <= TARGET_P99 { "met" } else { "missed" },
        p99.as_secs_f64() / TARGET_P99.as_secs_f64(),
        p50.as_secs_f64() / rebuild_p50.as_secs_f64()
    );
    println!(
        "  CPU per change: nft {:.1} ms, this process {:.1} ms (wall times above also include waiting for a CPU)",
        cpu_us_per_op(nft_before, nft_after, args.changes) / 1000.0,
        cpu_us_per_op(own_before, own_after, args.changes) / 1000.0
    );
    Ok(())
}
