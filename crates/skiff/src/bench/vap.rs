//! `skiff bench vap`: what one ValidatingAdmissionPolicy with three validations costs a pod
//! create, against no policy, in one run (target ≤ 25 µs of server CPU per create).
//!
//! - In process: the ValidatingAdmissionPolicy plugin's `validate` on the admission request
//!   of a pod create (the bench pod, as the API server hands it to admission), with the policy
//!   and its binding installed, next to the same calls with no binding; rounds alternate
//!   none/policy, and the process's CPU time per call is reported with wall time.
//! - With `--api`: one `skiff server`, pods created over HTTPS by concurrent clients in rounds
//!   without and with the binding (deleted and re-created between rounds, each change waited
//!   for until a probe create shows it in effect); the server's CPU time per create from
//!   /proc/PID/stat, and the difference.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use skiff_admission::policy::PolicyAdmission;
use skiff_admission::{AdmissionRequest, Feedback, MemoryLookup, Operation};

use super::apiserver::{bench_pod, create_namespace, create_pods};
use super::harness::{ServerProcess, cpu_us_per_op, load_average, process_cpu_time};

/// Flags of `skiff bench vap`.
#[derive(clap::Args, Debug)]
pub struct VapArgs {
    /// Admission calls per in-process round.
    #[arg(long, default_value_t = 20000)]
    calls: usize,
    /// Rounds per side, alternating none/policy.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Also measure pod creates through a server, without and with the policy.
    #[arg(long)]
    api: bool,
    /// Pods created per server round (with `--api`).
    #[arg(long, default_value_t = 2000)]
    creates: usize,
    /// Concurrent clients (with `--api`).
    #[arg(long, default_value_t = 16)]
    clients: usize,
}

/// The policy: three validations a pod create passes (so every create evaluates all three).
fn policy() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "bench-pod-policy"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [
                {"expression": "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
                 "message": "images must be pinned"},
                {"expression": "!has(object.spec.hostNetwork) || !object.spec.hostNetwork",
                 "message": "host networking is not allowed"},
                {"expression": "size(object.metadata.name) <= 63 && object.metadata.?labels.orValue({}).all(k, size(k) <= 63)",
                 "message": "names and label keys must fit 63 characters"},
            ],
        },
    })
}

fn binding() -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "bench-pod-policy"},
        "spec": {"policyName": "bench-pod-policy", "validationActions": ["Deny"]},
    })
}

/// Runs the benchmark and prints its report.
pub async fn run(args: VapArgs) -> anyhow::Result<()> {
    in_process(&args).await?;
    if args.api {
        through_server(&args).await?;
    }
    Ok(())
}

fn pod_request(pod: &Value) -> AdmissionRequest {
    let mut req = AdmissionRequest::new(Operation::Create, "", "v1", "pods", "Pod");
    req.namespace = "bench".into();
    req.name = "p".into();
    req.object = Some(pod.clone());
    req
}

async fn in_process(args: &VapArgs) -> anyhow::Result<()> {
    let lookup = Arc::new(MemoryLookup::new());
    lookup.put(json!({"kind": "Namespace", "metadata": {"name": "bench"}}));
    let mut pod = serde_json::to_value(bench_pod("p", None))?;
    pod["metadata"]["namespace"] = "bench".into();
    let with = Arc::new(PolicyAdmission::new(lookup.clone()));
    with.apply(&policy()).map_err(anyhow::Error::msg)?;
    with.apply(&binding()).map_err(anyhow::Error::msg)?;
    let without = Arc::new(PolicyAdmission::new(lookup));
    without.apply(&policy()).map_err(anyhow::Error::msg)?;
    println!(
        "ValidatingAdmissionPolicy admission, in process: {} calls per round, {} rounds, load average {}",
        args.calls,
        args.rounds,
        load_average()
    );
    let mut totals = [(0.0f64, 0.0f64); 2];
    for round in 0..args.rounds {
        for (side, admission) in [without.clone(), with.clone()].into_iter().enumerate() {
            let plugin = admission.plugin();
            let cpu_before = process_cpu_time("/proc/self/stat")?;
            let started = Instant::now();
            for _ in 0..args.calls {
                // Built inside the loop on both sides: the request the server builds per create.
                let req = pod_request(&pod);
                let mut feedback = Feedback::default();
                if plugin.active() {
                    plugin.validate(&req, &mut feedback).await.context("the bench pod was denied")?;
                }
            }
            let wall = started.elapsed().as_secs_f64() * 1e6 / args.calls as f64;
            let cpu = cpu_us_per_op(cpu_before, process_cpu_time("/proc/self/stat")?, args.calls);
            let name = if side == 0 { "none  " } else { "policy" };
            println!("  round {round} {name}: {wall:>7.2} µs/create wall, {cpu:>7.2} µs/create CPU");
            totals[side].0 += wall;
            totals[side].1 += cpu;
        }
    }
    let n = args.rounds.max(1) as f64;
    let (none, with) = ((totals[0].0 / n, totals[0].1 / n), (totals[1].0 / n, totals[1].1 / n));
    println!(
        "  mean: none {:.2} µs, policy {:.2} µs CPU per create; the policy adds {:.2} µs (target ≤ 25 µs), ratio policy/none {:.1}x wall",
        none.1,
        with.1,
        with.1 - none.1,
        with.0 / none.0.max(0.001)
    );
    Ok(())
}

async fn through_server(args: &VapArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = tempfile::tempdir()?;
    let mut server = ServerProcess::spawn(&base.path().join("server"), &[])?;
    let (_, admin) = server.wait_ready(Duration::from_secs(120)).await?;
    let mut clients = Vec::new();
    for _ in 0..args.clients.max(1) {
        clients.push(super::harness::admin_client(&server.kubeconfig()).await?);
    }
    let policies = Api::<ValidatingAdmissionPolicy>::all(admin.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone());
    policies.create(&PostParams::default(), &serde_json::from_value(policy())?).await?;
    println!(
        "ValidatingAdmissionPolicy admission through a server: {} clients, {} pods per round, {} rounds, load average {}",
        args.clients,
        args.creates,
        args.rounds,
        load_average()
    );
    let mut totals = [0.0f64; 2];
    for round in 0..args.rounds {
        for (side, total) in totals.iter_mut().enumerate() {
            let on = side == 1;
            if on {
                bindings.create(&PostParams::default(), &serde_json::from_value(binding())?).await?;
            }
            let ns = format!("bench-{round}-{side}");
            create_namespace(&admin, &ns).await?;
            wait_for_policy(&admin, &ns, on).await?;
            let cpu_before = server.cpu_time()?;
            let (elapsed, _, _) = create_pods(&clients, &ns, args.creates).await?;
            let cpu = cpu_us_per_op(cpu_before, server.cpu_time()?, args.creates);
            let name = if on { "policy" } else { "none  " };
            println!(
                "  round {round} {name}: {:>7.0} creates/s, server CPU {cpu:>6.0} µs/create (load average {})",
                args.creates as f64 / elapsed.as_secs_f64(),
                load_average()
            );
            *total += cpu;
            if on {
                bindings.delete("bench-pod-policy", &DeleteParams::default()).await?;
            }
        }
    }
    let n = args.rounds.max(1) as f64;
    println!(
        "  mean server CPU per create: none {:.0} µs, policy {:.0} µs, difference {:.0} µs (target ≤ 25 µs)",
        totals[0] / n,
        totals[1] / n,
        (totals[1] - totals[0]) / n
    );
    Ok(())
}

/// Waits until a dry-run create of a pod the policy denies (a `:latest` image) is denied (`on`)
/// or allowed (not `on`) in `ns`.
async fn wait_for_policy(client: &kube::Client, ns: &str, on: bool) -> anyhow::Result<()> {
    let api = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns);
    let mut probe = bench_pod("probe", None);
    if let Some(spec) = probe.spec.as_mut() {
        spec.containers[0].image = Some("registry.k8s.io/pause:latest".into());
    }
    let params = PostParams { dry_run: true, ..Default::default() };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let denied = api.create(&params, &probe).await.is_err();
        if denied == on {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the policy binding change did not take effect within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
