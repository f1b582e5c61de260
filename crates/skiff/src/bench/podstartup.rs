//! `skiff bench podstartup`: pod startup latency on a real containerd, and memory per
//! simulated node.
//!
//! Startup latency follows Kubernetes' pod startup SLI
//! (<https://github.com/kubernetes/community/blob/master/sig-scalability/slos/pod_startup_latency.md>):
//! from the create call to the first watch event showing the pod `Running`, for stateless pods
//! whose image is already present (pulls excluded). A `skiff server` with its local node runs as
//! a child process. After one warm-up pod, two runs of `--pods` pods each are measured:
//!
//! - **paced** (the Kubernetes-like figure): pods created at a steady `--qps`. clusterloader2,
//!   which checks this SLO in Kubernetes' own scalability tests (its `PodStartupLatency`
//!   measurement on the "latency pods" of the density and load tests), creates the latency pods
//!   as one-replica Deployments through its `Uniform5qps` tuning set, i.e. 5 per second for the
//!   whole cluster, spread by their resource requests over ≥ 100 nodes, and times each pod from
//!   the first watch event that shows it to the first one that shows it `Running`. Pods created
//!   all at once (its "saturation" pods) are measured against a throughput-derived threshold,
//!   not against the 5 s SLO.
//! - **burst**: all pods created at once, a stress figure of one node's start throughput.
//!
//! Each run prints p50/p99/max, a per-phase breakdown (create → scheduled seen by the watch →
//! sandbox ready → container created → container started → `Running` seen by the watch; the
//! middle steps from the kubelet's `Pulled`/`Created`/`Started` events, whose `eventTime` has
//! microseconds), next to the SLO (p99 ≤ 5 s) and the target (p99 ≤ 2 s), and the CPU
//! time spent per pod by the container runtime (containerd, its shims and what they ran: runc,
//! CNI plugins) and by skiff (the whole server: API server, controllers, scheduler, kubelet),
//! from `/proc/PID/stat`.
//!
//! Memory per simulated node is the resident-set growth of a `skiff server --disable-agent`
//! process with `--simulated-nodes N` over the same server with none, measured in the same run,
//! divided by N (it includes the Node and Lease objects the API server stores and caches).
//!
//! Needs root, containerd, runc, the CNI plugins and busybox-static (`scripts/install-deps`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Container, Event, Node, Pod, PodSpec};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};

/// Options of `skiff bench podstartup`.
#[derive(clap::Args, Debug)]
pub struct PodStartupArgs {
    /// Pods whose startup is measured in each run (paced, then burst).
    #[arg(long, default_value_t = 30)]
    pub pods: usize,
    /// Creation rate of the paced run, pods per second (clusterloader2's latency pods: 5/s).
    #[arg(long, default_value_t = 5.0)]
    pub qps: f64,
    /// Simulated nodes for the memory measurement (0 skips it).
    #[arg(long, default_value_t = 1000)]
    pub simulated_nodes: u32,
    /// After the simulated nodes are Ready, watch the server's RSS for this many seconds
    /// (sampled every 30 s) and print its growth rate (0: one sample after 12 s). Caches fill
    /// for several minutes at 5,000 nodes (watch-cache rings, the node status reports every
    /// 300 s, SQLite page caches): 600 shows the plateau.
    #[arg(long, default_value_t = 0)]
    pub simulated_settle_secs: u64,
    /// Directory with `busybox.tar` (the node brings its own sandbox image); built with `scripts/images/build.sh` (run
    /// from the repository root) when not given.
    #[arg(long)]
    pub images: Option<PathBuf>,
}

/// A `skiff server` child process, stopped (and its node cleaned up) on drop.
struct ServerProcess {
    child: Child,
    data_dir: PathBuf,
    agent: bool,
}

impl ServerProcess {
    fn start(dir: &Path, extra: &[&str], agent: bool) -> anyhow::Result<(ServerProcess, PathBuf)> {
        let data_dir = dir.join("data");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = std::fs::File::create(dir.join("server.log"))?;
        let child = Command::new(std::env::current_exe()?)
            .args(["server", "--bind-address", "127.0.0.1", "--https-listen-port", &port.to_string()])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(if agent { None } else { Some("--disable-agent") })
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting skiff server")?;
        let kubeconfig = data_dir.join("kubeconfig.yaml");
        Ok((ServerProcess { child, data_dir, agent }, kubeconfig))
    }

    fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .context("no VmRSS in /proc/PID/status")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.agent
            && let Ok(exe) = std::env::current_exe()
        {
            let _ = Command::new(exe).args(["killall", "--data-dir"]).arg(&self.data_dir).status();
        }
    }
}

/// Polls `f` every 100 ms until it yields `Some`, for at most `secs`.
async fn poll<T, F: std::future::Future<Output = Option<T>>>(
    secs: u64,
    what: &str,
    mut f: impl FnMut() -> F,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs}s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn client_for(kubeconfig: &Path) -> anyhow::Result<Client> {
    poll(60, "the server's kubeconfig", || async { kubeconfig.exists().then_some(()) }).await?;
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = Client::try_from(config)?;
    let c = client.clone();
    poll(60, "the API server to answer", || {
        let c = c.clone();
        async move { c.apiserver_version().await.ok() }
    })
    .await?;
    Ok(client)
}

async fn ready_nodes(client: &Client) -> usize {
    let nodes: Api<Node> = Api::all(client.clone());
    let Ok(list) = nodes.list(&ListParams::default()).await else { return 0 };
    list.items
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count()
}

fn bench_pod(name: &str) -> Pod {
    let mut pod = Pod {
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "sleep".into(),
                image: Some("skiff.local/busybox:1.35".into()),
                command: Some(vec!["sleep".into(), "3600".into()]),
                ..Default::default()
            }],
            termination_grace_period_seconds: Some(0),
            ..Default::default()
        }),
        ..Default::default()
    };
    pod.metadata.name = Some(name.to_string());
    pod.metadata.labels = Some([("bench".to_string(), "podstartup".to_string())].into());
    pod
}

/// The `q` quantile (nearest rank) of sorted `v`.
fn quantile(v: &[Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Nanoseconds since the Unix epoch, the clock of both the bench and the server's events.
fn now_ns() -> i128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0)
}

/// What one pod went through, in nanoseconds since the epoch.
#[derive(Debug, Default, Clone)]
struct PodTimes {
    /// Just before the create call.
    created: i128,
    /// First watch event with `spec.nodeName` set.
    scheduled: Option<i128>,
    /// The kubelet's `Pulled` event (the image checked, after the sandbox is ready).
    sandbox_ready: Option<i128>,
    /// The kubelet's `Created` event (CreateContainer returned).
    container_created: Option<i128>,
    /// The kubelet's `Started` event (StartContainer returned).
    container_started: Option<i128>,
    /// First watch event with phase `Running`.
    running: Option<i128>,
}

impl PodTimes {
    fn startup(&self) -> Option<Duration> {
        self.running.map(|r| Duration::from_nanos(u64::try_from(r - self.created).unwrap_or(0)))
    }
}

/// Creates `n` pods, all at once (`pace` `None`) or one every `pace`, and follows each through
/// the watch until it is `Running`; then fills in the kubelet's event times.
async fn startup_run(client: &Client, prefix: &str, n: usize, pace: Option<Duration>) -> anyhow::Result<Vec<PodTimes>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let cfg = watcher::Config::default().labels("bench=podstartup");
    let mut stream = std::pin::pin!(watcher::watcher(pods.clone(), cfg));
    // Wait for the watch to be established before creating anything.
    while let Some(ev) = stream.try_next().await? {
        if matches!(ev, watcher::Event::InitDone) {
            break;
        }
    }
    // Creates run as tasks on their schedule, so a slow create does not delay the next one.
    let begin = tokio::time::Instant::now();
    let creates: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let pods = pods.clone();
            let pod = bench_pod(name);
            let at = begin + pace.map(|p| p * i as u32).unwrap_or_default();
            let name = name.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                let t0 = now_ns();
                pods.create(&PostParams::default(), &pod).await.map(|_| (name, t0))
            })
        })
        .collect();
    let mut times: std::collections::HashMap<String, PodTimes> = Default::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let mut running = 0;
    while running < n {
        let ev = match tokio::time::timeout_at(deadline, stream.try_next()).await {
            Ok(r) => r?,
            Err(_) => bail!("only {running} of {n} pods Running after 300 s"),
        };
        let now = now_ns();
        if let Some(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev
            && let Some(name) = p.metadata.name.clone()
            && names.contains(&name)
        {
            let t = times.entry(name).or_default();
            if t.scheduled.is_none() && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                t.scheduled = Some(now);
            }
            if t.running.is_none() && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                t.running = Some(now);
                running += 1;
            }
        }
    }
    for c in creates {
        let (name, t0) = c.await??;
        times.entry(name).or_default().created = t0;
    }
    // The kubelet posts its events asynchronously: wait until every pod has its Started event.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let event_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = events.list(&ListParams::default()).await?;
        for ev in &list.items {
            let Some(t) = ev.involved_object.name.as_ref().and_then(|n| times.get_mut(n)) else { continue };
            let at = ev
                .event_time
                .as_ref()
                .map(|m| m.0.as_nanosecond())
                .or_else(|| ev.first_timestamp.as_ref().map(|f| f.0.as_nanosecond()));
            let slot = match ev.reason.as_deref() {
                Some("Pulled") => &mut t.sandbox_ready,
                Some("Created") => &mut t.container_created,
                Some("Started") => &mut t.container_started,
                _ => continue,
            };
            if slot.is_none() {
                *slot = at;
            }
        }
        if times.values().all(|t| t.container_started.is_some()) || Instant::now() > event_deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(times.into_values().collect())
}

/// Sorted startup latencies of a run.
fn latencies(run: &[PodTimes]) -> Vec<Duration> {
    let mut v: Vec<Duration> = run.iter().filter_map(PodTimes::startup).collect();
    v.sort();
    v
}

/// p50 and p99 of one phase over the pods that have both ends, as "p50 / p99".
fn phase(run: &[PodTimes], from: impl Fn(&PodTimes) -> Option<i128>, to: impl Fn(&PodTimes) -> Option<i128>) -> String {
    let mut v: Vec<Duration> =
        run.iter().filter_map(|t| Some(Duration::from_nanos(u64::try_from(to(t)? - from(t)?).unwrap_or(0)))).collect();
    if v.is_empty() {
        return "n/a".into();
    }
    v.sort();
    format!("{:>6} / {:>6}", ms(quantile(&v, 0.5)), ms(quantile(&v, 0.99)))
}

/// Waits until no bench pod is left and the runtime has gone quiet (under 5 % of a CPU over
/// half a second, at most 60 s), so one run's teardown does not load the next.
async fn settle(client: &Client, server: &ServerProcess) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let _ = pods.delete_collection(&DeleteParams::default(), &ListParams::default().labels("bench=podstartup")).await;
    poll(120, "the bench pods to be deleted", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels("bench=podstartup")).await.ok()?;
            list.items.is_empty().then_some(())
        }
    })
    .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let before = cpu_seconds(server.child.id(), &server.data_dir);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = cpu_seconds(server.child.id(), &server.data_dir);
        if after.1 - before.1 < 0.025 || Instant::now() > deadline {
            return Ok(());
        }
    }
}

/// Runs one measured run and prints its figures.
async fn measured_run(
    client: &Client,
    server: &ServerProcess,
    title: &str,
    prefix: &str,
    n: usize,
    pace: Option<Duration>,
) -> anyhow::Result<()> {
    let cpu_before = cpu_seconds(server.child.id(), &server.data_dir);
    let load_before = load_average();
    let wall = Instant::now();
    let run = startup_run(client, prefix, n, pace).await?;
    let wall = wall.elapsed();
    let cpu_after = cpu_seconds(server.child.id(), &server.data_dir);
    let lat = latencies(&run);
    let (p50, p99) = (quantile(&lat, 0.5), quantile(&lat, 0.99));
    println!("{title}");
    println!(
        "    p50 {}   p99 {}   max {}   (all {} Running after {:.1} s; load average {load_before})",
        ms(p50),
        ms(p99),
        ms(lat.last().copied().unwrap_or_default()),
        lat.len(),
        wall.as_secs_f64()
    );
    println!(
        "    p99 / target 2 s = {:.2}; p99 / Kubernetes SLO 5 s = {:.2} ({})",
        p99.as_secs_f64() / 2.0,
        p99.as_secs_f64() / 5.0,
        if p99 <= Duration::from_secs(5) { "within the SLO" } else { "over the SLO" }
    );
    println!("    phases, p50 / p99 over the pods (each phase on its own):");
    type Stamp = fn(&PodTimes) -> Option<i128>;
    let phases: [(&str, Stamp, Stamp, &str); 5] = [
        ("create → scheduled (watch)", |t| Some(t.created), |t| t.scheduled, "skiff: API server + scheduler"),
        (
            "scheduled → sandbox ready (Pulled event)",
            |t| t.scheduled,
            |t| t.sandbox_ready,
            "kubelet notices the pod, waits for a start slot, RunPodSandbox (containerd, runc, CNI), ImageStatus",
        ),
        (
            "sandbox ready → created (Created event)",
            |t| t.sandbox_ready,
            |t| t.container_created,
            "env/volumes, CreateContainer",
        ),
        (
            "created → started (Started event)",
            |t| t.container_created,
            |t| t.container_started,
            "StartContainer (containerd, shim, runc)",
        ),
        (
            "started → Running (watch)",
            |t| t.container_started,
            |t| t.running,
            "skiff: runtime re-read, status patch, watch delivery",
        ),
    ];
    for (label, from, to, what) in phases {
        println!("      {label:<42} {}   {what}", phase(&run, from, to));
    }
    let per_pod = |before: f64, after: f64| (after - before) * 1000.0 / lat.len().max(1) as f64;
    let (skiff_ms, runtime_ms) = (per_pod(cpu_before.0, cpu_after.0), per_pod(cpu_before.1, cpu_after.1));
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("    CPU per pod: containerd+shims+runc+CNI {runtime_ms:.0} ms, skiff server {skiff_ms:.0} ms");
    println!(
        "    runtime floor: {} pods × {runtime_ms:.0} ms on {cpus} CPUs ≥ {:.1} s of wall time",
        lat.len(),
        lat.len() as f64 * runtime_ms / 1000.0 / cpus as f64
    );
    Ok(())
}

/// The 1-minute load average, as text.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// CPU seconds used so far: (the skiff server process, containerd plus its shims).
/// containerd and the shims count with their reaped children (runc, CNI plugins); they are
/// found by `data_dir` in their command lines.
fn cpu_seconds(server_pid: u32, data_dir: &Path) -> (f64, f64) {
    let ticks = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    // utime, stime, cutime, cstime: fields 14-17 of /proc/PID/stat.
    let fields = |pid: &str| -> Option<(String, [u64; 4])> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let comm = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?.to_string();
        let rest: Vec<u64> =
            stat.get(stat.rfind(')')? + 2..)?.split(' ').skip(11).take(4).filter_map(|f| f.parse().ok()).collect();
        Some((comm, rest.try_into().ok()?))
    };
    let needle = data_dir.to_string_lossy().into_owned();
    let (mut server, mut runtime) = (0u64, 0u64);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Some((comm, [utime, stime, cutime, cstime])) = fields(&pid) else { continue };
        if pid == server_pid.to_string() {
            server += utime + stime;
        } else if comm.starts_with("containerd") {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle) {
                runtime += utime + stime + cutime + cstime;
            }
        }
    }
    (server as f64 / ticks, runtime as f64 / ticks)
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

async fn pod_startup(args: &PodStartupArgs, dir: &Path) -> anyhow::Result<()> {
    let images = match &args.images {
        Some(d) => d.clone(),
        None => {
            let out = dir.join("images");
            let script = Path::new("scripts/images/build.sh");
            if !script.exists() {
                bail!("no --images DIR and no scripts/images/build.sh here: run from the repository root");
            }
            let built = Command::new("bash").arg(script).arg(&out).output()?;
            if !built.status.success() {
                bail!("building the test images: {}", String::from_utf8_lossy(&built.stderr));
            }
            out
        }
    };
    let cidr = format!("10.42.{}.0/24", 100 + std::process::id() % 150);
    let server_dir = dir.join("node");
    std::fs::create_dir_all(&server_dir)?;
    let (server, kubeconfig) = ServerProcess::start(&server_dir, &["--cluster-cidr", &cidr], true)?;
    let client = client_for(&kubeconfig).await?;
    poll(120, "the local node to be Ready", || async { (ready_nodes(&client).await >= 1).then_some(()) }).await?;
    let import = Command::new(std::env::current_exe()?)
        .args(["images", "import", "--data-dir"])
        .arg(&server.data_dir)
        .arg(images.join("busybox.tar"))
        .output()?;
    if !import.status.success() {
        bail!("skiff images import: {}", String::from_utf8_lossy(&import.stderr));
    }
    // The first pod pays one-time costs (sandbox image unpack, cgroup setup): not measured.
    let warmup = latencies(&startup_run(&client, "warmup", 1, None).await?);
    settle(&client, &server).await?;
    println!(
        "pod startup latency (create → Running seen by a watch), real containerd, image present (pulls excluded):"
    );
    println!("  warm-up pod (alone, not counted)  {}", ms(warmup.first().copied().unwrap_or_default()));
    let qps = if args.qps > 0.0 { args.qps } else { 5.0 };
    let title = format!(
        "  A. paced, Kubernetes-like: {} pods created at {qps} pods/s (clusterloader2 creates its latency pods at 5/s, spread over ≥ 100 nodes)",
        args.pods
    );
    measured_run(&client, &server, &title, "paced", args.pods, Some(Duration::from_secs_f64(1.0 / qps))).await?;
    settle(&client, &server).await?;
    let title = format!(
        "  B. burst: {} pods created at once (one node's start throughput; not how the SLO is measured)",
        args.pods
    );
    measured_run(&client, &server, &title, "burst", args.pods, None).await?;
    settle(&client, &server).await?;
    drop(server);
    Ok(())
}

async fn simulated_node_memory(n: u32, settle_secs: u64, dir: &Path) -> anyhow::Result<()> {
    let mut rss = Vec::new();
    for count in [0, n] {
        let sub = dir.join(format!("sim-{count}"));
        std::fs::create_dir_all(&sub)?;
        let (server, kubeconfig) = ServerProcess::start(&sub, &["--simulated-nodes", &count.to_string()], false)?;
        let client = client_for(&kubeconfig).await?;
        poll(300, "the simulated nodes to be Ready", || async {
            (ready_nodes(&client).await >= count as usize).then_some(())
        })
        .await?;
        // Let the first heartbeats and status updates settle.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let first = server.rss_kib()?;
        let mut samples = vec![(Duration::ZERO, first)];
        if count > 0 && settle_secs > 0 {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(settle_secs) {
                tokio::time::sleep(Duration::from_secs(30)).await;
                samples.push((start.elapsed(), server.rss_kib()?));
            }
            print_rss_growth(count, &samples);
        }
        rss.push(samples.last().map_or(first, |s| s.1));
        drop(server);
    }
    let (base, with) = (rss[0], rss[1]);
    let per_node = (with.saturating_sub(base)) as f64 / f64::from(n.max(1));
    println!("memory per simulated node (server RSS with {n} simulated nodes minus with none, same run):");
    println!("  baseline (0 nodes)  {:.1} MiB", base as f64 / 1024.0);
    println!("  with {n:>5} nodes    {:.1} MiB", with as f64 / 1024.0);
    println!("  per node            {per_node:.1} KiB (5,000 nodes ≈ {:.0} MiB)", per_node * 5000.0 / 1024.0);
    Ok(())
}

/// Prints RSS samples `(time since Ready + 12 s, KiB)` and the growth rate over the whole
/// window and over its last third (a plateau shows as a last-third rate near zero).
fn print_rss_growth(count: u32, samples: &[(Duration, u64)]) {
    let rate = |a: &(Duration, u64), b: &(Duration, u64)| {
        (b.1 as f64 - a.1 as f64) / 1024.0 / (b.0 - a.0).as_secs_f64().max(1.0)
    };
    println!("server RSS with {count} simulated nodes after they are Ready (+12 s):");
    for (t, kib) in samples {
        println!("  +{:>4} s  {:.1} MiB", t.as_secs(), *kib as f64 / 1024.0);
    }
    if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
        let third = &samples[samples.len() * 2 / 3];
        println!(
            "  growth  {:.3} MiB/s over the window, {:.3} MiB/s over its last third",
            rate(first, last),
            rate(third, last)
        );
    }
}

/// Runs the benchmark and prints its figures.
///
/// # Errors
/// When the server, the runtime or the images are unavailable, or pods do not start in 300 s.
pub async fn run(args: PodStartupArgs) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("skiff-bench-podstartup").tempdir()?;
    if args.pods > 0 {
        pod_startup(&args, dir.path()).await?;
    }
    if args.simulated_nodes > 0 {
        simulated_node_memory(args.simulated_nodes, args.simulated_settle_secs, dir.path()).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let v: Vec<Duration> = (1..=30).map(Duration::from_millis).collect();
        assert_eq!(quantile(&v, 0.5), Duration::from_millis(15));
        assert_eq!(quantile(&v, 0.99), Duration::from_millis(30));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }
}
