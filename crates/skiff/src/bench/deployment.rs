//! `skiff bench deployment`: issue 4's benchmark against a real `skiff server --disable-agent
//! --simulated-nodes N` process (this binary, free loopback port, fresh data directory):
//!
//! 1. a Deployment of `--replicas` pods (pause image) created through the API, timed until
//!    `status.availableReplicas` reaches the replica count (target ≤ 5 s for 1,000);
//! 2. a rolling update of it (a pod-template annotation), timed until every replica is
//!    updated and available and the old ReplicaSet is scaled to zero;
//! 3. the baseline of the same run: the same number of pods created directly through the API
//!    by `--clients` concurrent clients (unscheduled, so nothing else reacts to them).
//!
//! Reconciles/s come from the controllers' `controller_reconcile_total` on the server's
//! `/metrics`, scraped before and after each phase. Two load-independent figures are printed
//! per phase as well: the API writes per replica (successful `create`, `update`, `patch` and
//! `delete` requests from `apiserver_request_total`, by resource) and the server process's CPU
//! seconds (user + system from `/proc/PID/stat`) per 1,000 replicas. The server process hosts
//! every component (API server, store, controllers, scheduler, simulated nodes), so its CPU
//! time is the whole cluster's cost of the phase.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, Node, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};

use super::apiserver::{create_namespace, create_pods};
use super::harness::{ServerProcess, admin_client, load_average, metric_sum, scrape};

/// The flags of the benchmarks of a workload on simulated nodes.
#[derive(clap::Args, Debug)]
pub(super) struct ClusterArgs {
    /// Replicas of the workload.
    #[arg(long, default_value_t = 1000)]
    pub(super) replicas: i32,
    /// Simulated nodes (110 pods each).
    #[arg(long, default_value_t = 20)]
    pub(super) nodes: u32,
    /// Concurrent clients of the baseline's direct pod creates.
    #[arg(long, default_value_t = 64)]
    pub(super) clients: usize,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 300.0)]
    pub(super) timeout: f64,
    /// Directory for the data directory (default: the system temp dir).
    #[arg(long)]
    pub(super) dir: Option<PathBuf>,
}

/// Flags of `skiff bench deployment`.
#[derive(clap::Args, Debug)]
pub struct DeploymentArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Skip the rolling update.
    #[arg(long)]
    skip_rollout: bool,
}

/// The selector `app=<name>` and a template of one pause container with that label.
pub(super) fn pause_workload(name: &str) -> (LabelSelector, PodTemplateSpec) {
    let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta { labels: Some(labels.clone()), ..Default::default() }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "pause".to_string(),
                image: Some("registry.k8s.io/pause:3.10".to_string()),
                ..Default::default()
            }],
            ..Default::default()
        }),
    };
    (LabelSelector { match_labels: Some(labels), ..Default::default() }, template)
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    let (selector, template) = pause_workload(name);
    Deployment {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(DeploymentSpec { replicas: Some(replicas), selector, template, ..Default::default() }),
        ..Default::default()
    }
}

/// Sum of `controller_reconcile_total` over every controller and result.
pub(super) async fn reconciles(client: &kube::Client) -> anyhow::Result<f64> {
    Ok(metric_sum(&scrape(client).await?, "controller_reconcile_total{"))
}

/// API writes by `verb resource[/subresource]` (refused ones as `... (code)`), from the server's
/// `apiserver_request_total{verb,group,resource,subresource,code}` series.
fn api_writes(metrics: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let Some((labels, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let label = |name: &str| {
            let pat = format!("{name}=\"");
            labels.split_once(&pat).and_then(|(_, rest)| rest.split_once('"')).map(|(v, _)| v).unwrap_or_default()
        };
        // The API server labels verbs as Kubernetes does (`POST`, `PUT`, `PATCH`, `DELETE`, …).
        let verb = match label("verb") {
            "POST" | "create" => "create",
            "PUT" | "update" => "update",
            "PATCH" | "patch" => "patch",
            "DELETE" | "delete" => "delete",
            "DELETECOLLECTION" | "deletecollection" => "deletecollection",
            _ => continue,
        };
        let sub = label("subresource");
        let mut key = if sub.is_empty() {
            format!("{verb} {}", label("resource"))
        } else {
            format!("{verb} {}/{sub}", label("resource"))
        };
        let code = label("code");
        if !code.starts_with('2') {
            // Refused writes are listed apart (and not counted as writes).
            key = format!("{key} ({code})");
        }
        *out.entry(key).or_insert(0.0) += value;
    }
    out
}

/// CPU seconds (user + system) the process `pid` has used, from `/proc/PID/stat` (clock ticks of
/// 1/100 s, Linux's fixed `USER_HZ`).
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name: state is the first, utime the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    Ok((ticks(11) + ticks(12)) / 100.0)
}

/// What a phase cost the server: API writes by kind, CPU seconds, and the controllers'
/// reconcile errors and resourceVersion conflicts.
pub(super) struct Cost {
    writes: BTreeMap<String, f64>,
    cpu: f64,
    errors: f64,
    conflicts: f64,
}

impl Cost {
    pub(super) async fn sample(client: &kube::Client, pid: u32) -> anyhow::Result<Cost> {
        let text = scrape(client).await?;
        Ok(Cost {
            writes: api_writes(&text),
            cpu: cpu_seconds(pid)?,
            errors: metric_sum(&text, "controller_reconcile_errors_total{"),
            conflicts: metric_sum(&text, "controller_resource_version_conflicts_total{"),
        })
    }

    /// Prints the writes per `unit` (total and by kind) and CPU seconds per 1,000 `unit`s
    /// (`replicas` of them) between `self` and the later sample `after`.
    pub(super) fn report(&self, after: &Cost, replicas: i32, unit: &str, what: &str) {
        let per = replicas.max(1) as f64;
        let mut by_kind: Vec<(String, f64)> = after
            .writes
            .iter()
            .map(|(k, v)| (k.clone(), v - self.writes.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, d)| *d > 0.0)
            .collect();
        by_kind.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = by_kind.iter().filter(|(k, _)| !k.ends_with(')')).map(|(_, d)| d).sum::<f64>() + 0.0;
        let cpu = after.cpu - self.cpu;
        println!(
            "  {what}: {total:.0} API writes ({:.2} per {unit}), server CPU {cpu:.2} s ({:.2} s per 1,000 {unit}s), \
             {:.0} reconcile errors ({:.0} conflicts)",
            total / per,
            cpu * 1000.0 / per,
            after.errors - self.errors,
            after.conflicts - self.conflicts
        );
        let detail: Vec<String> = by_kind.iter().map(|(k, d)| format!("{k} {d:.0}")).collect();
        println!("    {}", detail.join(", "));
    }
}

/// Polls the object every 20 ms until `done` holds for it; returns the time since `from` and
/// prints `progress` of it every 5 s.
pub(super) async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    from: Instant,
    timeout: Duration,
    what: &str,
    done: impl Fn(&K) -> bool,
    progress: impl Fn(&K) -> String,
) -> anyhow::Result<Duration>
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut last_report = Instant::now();
    loop {
        let obj = api.get(name).await?;
        if done(&obj) {
            return Ok(from.elapsed());
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!("  {what}: {:.0} s, {}", from.elapsed().as_secs_f64(), progress(&obj));
            last_report = Instant::now();
        }
        anyhow::ensure!(from.elapsed() < timeout, "{what}: not done after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Deployment's progress: its status counts.
fn deployment_progress(d: &Deployment) -> String {
    let s = d.status.clone().unwrap_or_default();
    format!(
        "replicas {} updated {} ready {} available {}",
        s.replicas.unwrap_or(0),
        s.updated_replicas.unwrap_or(0),
        s.ready_replicas.unwrap_or(0),
        s.available_replicas.unwrap_or(0)
    )
}

/// Waits until `count` nodes are registered and Ready, for `limit` at most.
async fn wait_for_ready_nodes(admin: &kube::Client, count: usize, limit: Duration) -> anyhow::Result<()> {
    let node_api = Api::<Node>::all(admin.clone());
    let deadline = Instant::now() + limit;
    loop {
        let ready = node_api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready >= count {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "only {ready} of {count} nodes Ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `skiff server` with Ready simulated nodes, in a fresh temp dir removed on drop.
pub(super) struct Cluster {
    /// The server process.
    pub(super) server: ServerProcess,
    /// Its admin client.
    pub(super) admin: kube::Client,
    _dir: tempfile::TempDir,
}

/// Starts a server with `nodes` simulated nodes, its data dir in a fresh temp dir (under `dir`,
/// else the system temp dir), and waits (`limit` at most) until they are Ready.
pub(super) async fn start_simulated_cluster(
    dir: Option<&PathBuf>,
    nodes: u32,
    limit: Duration,
) -> anyhow::Result<(tempfile::TempDir, ServerProcess, kube::Client)> {
    start_simulated_cluster_with(dir, nodes, limit, &[]).await
}

/// [`start_simulated_cluster`] with extra server flags.
pub(super) async fn start_simulated_cluster_with(
    dir: Option<&PathBuf>,
    nodes: u32,
    limit: Duration,
    extra: &[&str],
) -> anyhow::Result<(tempfile::TempDir, ServerProcess, kube::Client)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = match dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let count = nodes.to_string();
    let mut flags = vec!["--simulated-nodes", count.as_str()];
    flags.extend_from_slice(extra);
    let mut server = ServerProcess::spawn(&base.path().join("server"), &flags)?;
    let (_, admin) = server.wait_ready(Duration::from_secs(60)).await?;
    wait_for_ready_nodes(&admin, nodes as usize, limit).await?;
    // Let the components finish their start-up lists.
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok((base, server, admin))
}

/// Starts a server with `args.nodes` simulated nodes and waits until they are Ready.
pub(super) async fn start_cluster(args: &ClusterArgs) -> anyhow::Result<Cluster> {
    let (dir, server, admin) = start_simulated_cluster(args.dir.as_ref(), args.nodes, Duration::from_secs(60)).await?;
    Ok(Cluster { server, admin, _dir: dir })
}

/// The baseline of the same run: `args.replicas` pods created straight through the API by
/// `args.clients` clients (unscheduled, so nothing else reacts to them); prints and returns the
/// time and the number of clients, then the server's RSS.
pub(super) async fn baseline(cluster: &Cluster, args: &ClusterArgs) -> anyhow::Result<(Duration, usize)> {
    let mut clients = Vec::with_capacity(args.clients.max(1));
    for _ in 0..args.clients.max(1) {
        clients.push(admin_client(&cluster.server.kubeconfig()).await?);
    }
    create_namespace(&cluster.admin, "baseline").await?;
    let (took, _, _) = create_pods(&clients, "baseline", args.replicas as usize).await?;
    println!(
        "baseline: {} pods created directly by {} clients: {:.2} s ({:.0}/s)",
        args.replicas,
        clients.len(),
        took.as_secs_f64(),
        args.replicas as f64 / took.as_secs_f64()
    );
    println!(
        "RSS at the end: {:.1} MB; load average {} at end",
        cluster.server.rss_bytes()? as f64 / 1e6,
        load_average()
    );
    Ok((took, clients.len()))
}

/// Runs the benchmark and prints its report.
pub async fn run(args: DeploymentArgs) -> anyhow::Result<()> {
    let timeout = Duration::from_secs_f64(args.cluster.timeout);
    println!(
        "skiff bench deployment: {} replicas on {} simulated nodes; load average {} at start",
        args.cluster.replicas,
        args.cluster.nodes,
        load_average()
    );
    let cluster = start_cluster(&args.cluster).await?;
    let (server, admin) = (&cluster.server, &cluster.admin);

    // 1. Scale-up from nothing.
    let api = Api::<Deployment>::namespaced(admin.clone(), "default");
    let replicas = args.cluster.replicas;
    let pid = server.pid();
    let r0 = reconciles(admin).await?;
    let c0 = Cost::sample(admin, pid).await?;
    let t0 = Instant::now();
    api.create(&PostParams::default(), &deployment("bench", replicas)).await?;
    let created = wait_for(
        &api,
        "bench",
        t0,
        timeout,
        "create",
        |d| {
            let s = d.status.clone().unwrap_or_default();
            s.available_replicas == Some(replicas) && s.observed_generation >= d.metadata.generation
        },
        deployment_progress,
    )
    .await?;
    let c1 = Cost::sample(admin, pid).await?;
    let r1 = reconciles(admin).await?;
    println!(
        "create → {replicas} available: {:.2} s ({:.0} pods/s), {:.0} reconciles ({:.0}/s)",
        created.as_secs_f64(),
        replicas as f64 / created.as_secs_f64(),
        r1 - r0,
        (r1 - r0) / created.as_secs_f64()
    );
    c0.report(&c1, replicas, "replica", "create");

    // 2. Rolling update.
    let mut rollout = None;
    if !args.skip_rollout {
        let t1 = Instant::now();
        let patch =
            serde_json::json!({"spec": {"template": {"metadata": {"annotations": {"bench.skiff.io/rev": "2"}}}}});
        let patched = api.patch("bench", &PatchParams::default(), &Patch::Merge(&patch)).await?;
        let generation = patched.metadata.generation;
        let took = wait_for(
            &api,
            "bench",
            t1,
            timeout,
            "rollout",
            |d| {
                let s = d.status.clone().unwrap_or_default();
                s.observed_generation >= generation
                    && s.updated_replicas == Some(replicas)
                    && s.available_replicas == Some(replicas)
                    && s.replicas == Some(replicas)
            },
            deployment_progress,
        )
        .await?;
        let c2 = Cost::sample(admin, pid).await?;
        let r2 = reconciles(admin).await?;
        println!(
            "rolling update of {replicas}: {:.2} s, {:.0} reconciles ({:.0}/s)",
            took.as_secs_f64(),
            r2 - r1,
            (r2 - r1) / took.as_secs_f64()
        );
        c1.report(&c2, replicas, "replica", "rollout");
        rollout = Some(took);
    }

    // 3. Baseline: the same number of pods created straight through the API.
    let (base_took, clients) = baseline(&cluster, &args.cluster).await?;

    println!();
    println!("| measurement | seconds | vs direct pod creates | vs target 5 s |");
    println!("|---|---:|---:|---:|");
    let b = base_took.as_secs_f64();
    let c = created.as_secs_f64();
    println!("| {replicas} replicas to available | {c:.2} | {:.1}× | {:.2}× |", c / b, c / 5.0);
    if let Some(r) = rollout {
        let r = r.as_secs_f64();
        println!("| rolling update of {replicas} | {r:.2} | {:.1}× | — |", r / b);
    }
    println!("| direct creates of {replicas} pods ({clients} clients) | {b:.2} | 1.0× | — |");
    Ok(())
}
