//! `skiff bench statefulset`: issue 26's StatefulSet benchmark against a real `skiff server
//! --disable-agent --simulated-nodes N` process: a StatefulSet of `--replicas` pods with
//! Parallel pod management created through the API, timed until `status.readyReplicas` and
//! `availableReplicas` reach the replica count; next to the same number of pods created directly
//! through the API by `--clients` concurrent clients (the baseline of the same run). API writes
//! per replica, server CPU and reconciles are reported as `skiff bench deployment` does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ObjectMeta, PostParams};

use super::apiserver::{create_namespace, create_pods};
use super::deployment::{Cost, reconciles, wait_for, wait_for_ready_nodes};
use super::harness::{ServerProcess, admin_client, load_average};

/// Flags of `skiff bench statefulset`.
#[derive(clap::Args, Debug)]
pub struct StatefulSetArgs {
    /// Replicas of the StatefulSet.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// Simulated nodes (110 pods each).
    #[arg(long, default_value_t = 20)]
    nodes: u32,
    /// Concurrent clients of the baseline's direct pod creates.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
    /// Directory for the data directory (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn stateful_set(name: &str, replicas: i32) -> StatefulSet {
    let labels = BTreeMap::from([("app".to_string(), name.to_string())]);
    StatefulSet {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(name.to_string()),
            pod_management_policy: Some("Parallel".to_string()),
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

fn progress(s: &StatefulSet) -> String {
    let st = s.status.clone().unwrap_or_default();
    format!(
        "replicas {} ready {} available {}",
        st.replicas,
        st.ready_replicas.unwrap_or(0),
        st.available_replicas.unwrap_or(0)
    )
}

/// Runs the benchmark and prints its report.
pub async fn run(args: StatefulSetArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = match &args.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let timeout = Duration::from_secs_f64(args.timeout);
    println!(
        "skiff bench statefulset: {} Parallel replicas on {} simulated nodes; load average {} at start",
        args.replicas,
        args.nodes,
        load_average()
    );
    let nodes = args.nodes.to_string();
    let mut server = ServerProcess::spawn(&base.path().join("server"), &["--simulated-nodes", &nodes])?;
    let (_, admin) = server.wait_ready(Duration::from_secs(60)).await?;
    wait_for_ready_nodes(&admin, args.nodes).await?;

    let api = Api::<StatefulSet>::namespaced(admin.clone(), "default");
    let replicas = args.replicas;
    let pid = server.pid();
    let r0 = reconciles(&admin).await?;
    let c0 = Cost::sample(&admin, pid).await?;
    let t0 = Instant::now();
    api.create(&PostParams::default(), &stateful_set("bench", replicas)).await?;
    let ready = wait_for(
        &api,
        "bench",
        t0,
        timeout,
        "create",
        |s| {
            let st = s.status.clone().unwrap_or_default();
            st.ready_replicas == Some(replicas)
                && st.available_replicas == Some(replicas)
                && st.observed_generation >= s.metadata.generation
        },
        progress,
    )
    .await?;
    let c1 = Cost::sample(&admin, pid).await?;
    let r1 = reconciles(&admin).await?;
    println!(
        "create → {replicas} ready: {:.2} s ({:.0} pods/s), {:.0} reconciles ({:.0}/s)",
        ready.as_secs_f64(),
        replicas as f64 / ready.as_secs_f64(),
        r1 - r0,
        (r1 - r0) / ready.as_secs_f64()
    );
    c0.report(&c1, replicas, "create");

    // Baseline: the same number of pods created straight through the API.
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
    println!("| measurement | seconds | vs direct pod creates |");
    println!("|---|---:|---:|");
    let (b, c) = (base_took.as_secs_f64(), ready.as_secs_f64());
    println!("| {replicas} Parallel replicas to Ready | {c:.2} | {:.1}× |", c / b);
    println!("| direct creates of {replicas} pods ({} clients) | {b:.2} | 1.0× |", clients.len());
    Ok(())
}
