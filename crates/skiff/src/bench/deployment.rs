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
//! `/metrics`, scraped before and after each phase.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, Node, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};

use super::apiserver::{create_namespace, create_pods};
use super::harness::{ServerProcess, admin_client, load_average, metric_sum, scrape};

/// Flags of `skiff bench deployment`.
#[derive(clap::Args, Debug)]
pub struct DeploymentArgs {
    /// Replicas of the Deployment.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// Simulated nodes (110 pods each).
    #[arg(long, default_value_t = 20)]
    nodes: u32,
    /// Concurrent clients of the baseline's direct pod creates.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
    /// Skip the rolling update.
    #[arg(long)]
    skip_rollout: bool,
    /// Directory for the data directory (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
    Deployment {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
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
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Sum of `controller_reconcile_total` over every controller and result.
async fn reconciles(client: &kube::Client) -> anyhow::Result<f64> {
    Ok(metric_sum(&scrape(client).await?, "controller_reconcile_total{"))
}

/// Polls the Deployment every 20 ms until `done` holds for it; returns the time since `from`
/// and prints progress every 5 s.
async fn wait_for(
    api: &Api<Deployment>,
    name: &str,
    from: Instant,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Deployment) -> bool,
) -> anyhow::Result<Duration> {
    let mut last_report = Instant::now();
    loop {
        let d = api.get(name).await?;
        if done(&d) {
            return Ok(from.elapsed());
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            let s = d.status.clone().unwrap_or_default();
            eprintln!(
                "  {what}: {:.0} s, replicas {} updated {} ready {} available {}",
                from.elapsed().as_secs_f64(),
                s.replicas.unwrap_or(0),
                s.updated_replicas.unwrap_or(0),
                s.ready_replicas.unwrap_or(0),
                s.available_replicas.unwrap_or(0)
            );
            last_report = Instant::now();
        }
        anyhow::ensure!(from.elapsed() < timeout, "{what}: not done after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the benchmark and prints its report.
pub async fn run(args: DeploymentArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = match &args.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let timeout = Duration::from_secs_f64(args.timeout);
    println!(
        "skiff bench deployment: {} replicas on {} simulated nodes; load average {} at start",
        args.replicas,
        args.nodes,
        load_average()
    );
    let nodes = args.nodes.to_string();
    let mut server = ServerProcess::spawn(&base.path().join("server"), &["--simulated-nodes", &nodes])?;
    let (_, admin) = server.wait_ready(Duration::from_secs(60)).await?;
    // Every simulated node registered and Ready.
    let node_api = Api::<Node>::all(admin.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
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
        if ready >= args.nodes as usize {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "only {ready} of {} nodes Ready", args.nodes);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let the components finish their start-up lists.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. Scale-up from nothing.
    let api = Api::<Deployment>::namespaced(admin.clone(), "default");
    let replicas = args.replicas;
    let r0 = reconciles(&admin).await?;
    let t0 = Instant::now();
    api.create(&PostParams::default(), &deployment("bench", replicas)).await?;
    let created = wait_for(&api, "bench", t0, timeout, "create", |d| {
        let s = d.status.clone().unwrap_or_default();
        s.available_replicas == Some(replicas) && s.observed_generation >= d.metadata.generation
    })
    .await?;
    let r1 = reconciles(&admin).await?;
    println!(
        "create → {replicas} available: {:.2} s ({:.0} pods/s), {:.0} reconciles ({:.0}/s)",
        created.as_secs_f64(),
        replicas as f64 / created.as_secs_f64(),
        r1 - r0,
        (r1 - r0) / created.as_secs_f64()
    );

    // 2. Rolling update.
    let mut rollout = None;
    if !args.skip_rollout {
        let t1 = Instant::now();
        let patch =
            serde_json::json!({"spec": {"template": {"metadata": {"annotations": {"bench.skiff.io/rev": "2"}}}}});
        let patched = api.patch("bench", &PatchParams::default(), &Patch::Merge(&patch)).await?;
        let generation = patched.metadata.generation;
        let took = wait_for(&api, "bench", t1, timeout, "rollout", |d| {
            let s = d.status.clone().unwrap_or_default();
            s.observed_generation >= generation
                && s.updated_replicas == Some(replicas)
                && s.available_replicas == Some(replicas)
                && s.replicas == Some(replicas)
        })
        .await?;
        let r2 = reconciles(&admin).await?;
        println!(
            "rolling update of {replicas}: {:.2} s, {:.0} reconciles ({:.0}/s)",
            took.as_secs_f64(),
            r2 - r1,
            (r2 - r1) / took.as_secs_f64()
        );
        rollout = Some(took);
    }

    // 3. Baseline: the same number of pods created straight through the API.
    let mut clients = Vec::with_capacity(args.clients.max(1));
    for _ in 0..args.clients.max(1) {
        clients.push(admin_client(&server.kubeconfig()).await?);
    }
    create_namespace(&admin, "baseline").await?;
    let (base_took, _, _) = create_pods(&clients, "baseline", replicas as usize).await?;
    println!(
        "baseline: {replicas} pods created directly by {} clients: {:.2} s ({:.0}/s)",
        clients.len(),
        base_took.as_secs_f64(),
        replicas as f64 / base_took.as_secs_f64()
    );
    println!("RSS at the end: {:.1} MB; load average {} at end", server.rss_bytes()? as f64 / 1e6, load_average());
    let _ = &mut server;

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
    println!("| direct creates of {replicas} pods ({} clients) | {b:.2} | 1.0× | — |", clients.len());
    Ok(())
}
