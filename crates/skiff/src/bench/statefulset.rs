//! `skiff bench statefulset`: the StatefulSet controller's benchmark against a real `skiff server
//! --disable-agent --simulated-nodes N` process: a StatefulSet of `--replicas` pods with
//! Parallel pod management created through the API, timed until `status.readyReplicas` and
//! `availableReplicas` reach the replica count; next to the same number of pods created directly
//! through the API by `--clients` concurrent clients (the baseline of the same run). API writes
//! per replica, server CPU and reconciles are reported as `skiff bench deployment` does.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use kube::api::{Api, ObjectMeta, PostParams};

use super::deployment::{ClusterArgs, Cost, baseline, pause_workload, reconciles, start_cluster, wait_for};
use super::harness::load_average;

/// Flags of `skiff bench statefulset`.
#[derive(clap::Args, Debug)]
pub struct StatefulSetArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
}

fn stateful_set(name: &str, replicas: i32) -> StatefulSet {
    let (selector, template) = pause_workload(name);
    StatefulSet {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(name.to_string()),
            pod_management_policy: Some("Parallel".to_string()),
            selector,
            template,
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
    let args = args.cluster;
    let timeout = Duration::from_secs_f64(args.timeout);
    println!(
        "skiff bench statefulset: {} Parallel replicas on {} simulated nodes; load average {} at start",
        args.replicas,
        args.nodes,
        load_average()
    );
    let cluster = start_cluster(&args).await?;
    let admin = &cluster.admin;
    let api = Api::<StatefulSet>::namespaced(admin.clone(), "default");
    let replicas = args.replicas;
    let pid = cluster.server.pid();
    let r0 = reconciles(admin).await?;
    let c0 = Cost::sample(admin, pid).await?;
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
    let c1 = Cost::sample(admin, pid).await?;
    let r1 = reconciles(admin).await?;
    println!(
        "create → {replicas} ready: {:.2} s ({:.0} pods/s), {:.0} reconciles ({:.0}/s)",
        ready.as_secs_f64(),
        replicas as f64 / ready.as_secs_f64(),
        r1 - r0,
        (r1 - r0) / ready.as_secs_f64()
    );
    c0.report(&c1, replicas, "replica", "create");

    let (base_took, clients) = baseline(&cluster, &args).await?;
    println!();
    println!("| measurement | seconds | vs direct pod creates |");
    println!("|---|---:|---:|");
    let (b, c) = (base_took.as_secs_f64(), ready.as_secs_f64());
    println!("| {replicas} Parallel replicas to Ready | {c:.2} | {:.1}× |", c / b);
    println!("| direct creates of {replicas} pods ({clients} clients) | {b:.2} | 1.0× |");
    Ok(())
}
