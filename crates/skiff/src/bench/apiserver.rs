//! `skiff bench apiserver`: issue 3's benchmark, in one run against real `skiff server
//! --disable-agent` processes (this binary, spawned on free loopback ports with fresh data
//! directories under a temp dir):
//!
//! 1. cold start: spawn to the first `GET /readyz` answering `ok` (fresh data dir, so PKI
//!    generation and store creation included), median of `--starts`;
//! 2. idle RSS: `VmRSS` of a ready server after `--settle` seconds;
//! 3. pod creates/s over HTTPS from `--clients` concurrent clients (one create in flight each),
//!    once per `--create-protocols`: HTTP/1.1 through kube-rs (each client its own connection
//!    pool) and HTTP/2 through hyper's client (one connection per client, as client-go keeps one
//!    connection per host per client and multiplexes its requests over it). Each phase runs
//!    against the server and then against the transport's ceiling, an empty handler (`skiff
//!    bench empty-handler`, see [`super::empty_handler`]: skiff's TLS and HTTP stack answering
//!    `201` with the stored pod, in its own process), with the same clients' stack. Server and
//!    bench client CPU per create are read from /proc around each phase. Next to them, raw
//!    creates/s of the embedded store ([`SqliteBackend`] in-process, same number of concurrent
//!    writers, values of the stored pod's size; its CPU per create read from /proc/self), and
//!    the CPU per create (server and clients together) that 50 % of the raw store's rate allows
//!    on this machine's CPUs;
//! 4. GET latency (p50/p99) of those pods from the same clients;
//! 5. `--watchers` concurrent pod watches: latency from a create to its delivery to every
//!    watcher (p50/p99), with one create every 20 ms (watchers read their raw event streams
//!    without decoding the pods, see [`added_sent_nanos`]), once per `--watch-protocols`:
//!    HTTP/2 with each client's watches multiplexed over one connection (as client-go and
//!    kubectl watch), and HTTP/1.1 through kube-rs (one TLS connection per watch). Server and
//!    bench CPU per delivery are measured over the creates only, apart from the watches' setup.
//!
//! Pods use a scheduler name no scheduler serves, so no component reacts to them and only the
//! API server and the store are measured.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use futures::{AsyncBufReadExt, TryStreamExt};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec};
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchParams};
use skiff_store::Backend;
use skiff_store::sqlite::SqliteBackend;

use super::harness::{
    Samples, ServerProcess, admin_client, cpu_us_per_op, load_average, metric_sum, ms, process_cpu_time, scrape,
};

/// Flags of `skiff bench apiserver`.
#[derive(clap::Args, Debug)]
pub struct ApiserverArgs {
    /// Cold starts to time (the median is reported).
    #[arg(long, default_value_t = 5)]
    starts: usize,
    /// Seconds a ready server idles before its RSS is read.
    #[arg(long, default_value_t = 5.0)]
    settle: f64,
    /// Concurrent clients for creates and GETs.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Pods created through the API (and raw store creates of the same size).
    #[arg(long, default_value_t = 5000)]
    creates: usize,
    /// GETs timed.
    #[arg(long, default_value_t = 10_000)]
    gets: usize,
    /// Concurrent watchers.
    #[arg(long, default_value_t = 1000)]
    watchers: usize,
    /// Creates each watcher must see (one every 20 ms).
    #[arg(long, default_value_t = 50)]
    watch_writes: usize,
    /// How the watchers connect, one phase each in this order: `http2` (one HTTP/2 connection
    /// per client, `--watchers` streams multiplexed over `--clients` connections, as client-go
    /// and kubectl do) and/or `http1` (kube-rs's default client, HTTP/1.1: one TLS connection per watch).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Protocol::Http2, Protocol::Http1])]
    watch_protocols: Vec<Protocol>,
    /// How the create phases' clients send their POSTs, one phase each (against the server,
    /// then against the empty handler) in this order: `http1` (kube-rs's client, one connection
    /// pool per client) and/or `http2` (one HTTP/2 connection per client, as client-go keeps one
    /// per host per client).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Protocol::Http1, Protocol::Http2])]
    create_protocols: Vec<Protocol>,
    /// Directory for the data directories and the raw store (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// The HTTP version a phase's clients use (watches or creates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// HTTP/2 over hyper's client: each client's requests share one connection (client-go's
    /// and kubectl's way: one connection per host per client).
    Http2,
    /// HTTP/1.1 through kube-rs's default client: one TLS connection per request in flight.
    Http1,
}

impl Protocol {
    /// How the watch phase's watchers connect over this protocol.
    fn describe_watch(self) -> &'static str {
        match self {
            Protocol::Http2 => "HTTP/2, streams multiplexed over one connection per client",
            Protocol::Http1 => "HTTP/1.1 (kube-rs), one TLS connection per watch",
        }
    }

    /// How a create phase's clients connect over this protocol.
    fn describe_create(self) -> &'static str {
        match self {
            Protocol::Http2 => "HTTP/2 (hyper), one connection per client",
            Protocol::Http1 => "HTTP/1.1 (kube-rs), one connection pool per client",
        }
    }
}

/// Annotation carrying a pod's create time (nanoseconds since the Unix epoch).
const SENT_ANNOTATION: &str = "bench.skiff.io/sent-unix-nanos";
/// A scheduler name nothing serves: bench pods stay pending and untouched.
const NO_SCHEDULER: &str = "skiff-bench-none";

fn unix_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// A small pod, as a user would create it.
pub fn bench_pod(name: &str, annotations: Option<BTreeMap<String, String>>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([("app".to_string(), "bench".to_string())])),
            annotations,
            ..Default::default()
        },
        spec: Some(PodSpec {
            scheduler_name: Some(NO_SCHEDULER.to_string()),
            containers: vec![Container {
                name: "pause".to_string(),
                image: Some("registry.k8s.io/pause:3.10".to_string()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates `namespace`.
pub async fn create_namespace(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta { name: Some(namespace.to_string()), ..Default::default() },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
    Ok(())
}

/// Creates `total` pods in `namespace` from the clients concurrently (client `c` creates
/// `p-c-0`, `p-c-1`, …). Returns the wall time, per-create latencies and one created pod.
pub async fn create_pods(
    clients: &[kube::Client],
    namespace: &str,
    total: usize,
) -> anyhow::Result<(Duration, Samples, Option<Pod>)> {
    let creators = clients.iter().map(|c| Creator::Kube(Box::new(Api::namespaced(c.clone(), namespace)))).collect();
    create_pods_with(creators, total).await
}

/// H2 connection to the server for requests with bodies of type `B`.
type H2Sender<B> = hyper::client::conn::http2::SendRequest<B>;

/// One bench client's way of sending pod creates.
enum Creator {
    /// kube-rs's client (HTTP/1.1, its own connection pool).
    Kube(Box<Api<Pod>>),
    /// One HTTP/2 connection; `uri` is the pod collection's URL.
    Http2 { send: H2Sender<http_body_util::Full<Bytes>>, uri: String },
}

impl Creator {
    /// POSTs `pod` and decodes the created pod, as a typed client does.
    async fn create(&mut self, pod: &Pod) -> anyhow::Result<Pod> {
        match self {
            Creator::Kube(api) => Ok(api.create(&PostParams::default(), pod).await?),
            Creator::Http2 { send, uri } => {
                use http_body_util::BodyExt as _;
                let request = hyper::Request::post(uri.as_str())
                    .header(hyper::header::CONTENT_TYPE, "application/json")
                    .header(hyper::header::ACCEPT, "application/json")
                    .body(http_body_util::Full::new(Bytes::from(serde_json::to_vec(pod)?)))?;
                send.ready().await?;
                let response = send.send_request(request).await?;
                let status = response.status();
                let body = response.into_body().collect().await?.to_bytes();
                anyhow::ensure!(status.is_success(), "{status}: {}", String::from_utf8_lossy(&body));
                Ok(serde_json::from_slice(&body)?)
            }
        }
    }
}

/// [`create_pods`] from any kind of client: `creators[c]` creates `p-c-0`, `p-c-1`, … one at a
/// time, all creators concurrently.
async fn create_pods_with(creators: Vec<Creator>, total: usize) -> anyhow::Result<(Duration, Samples, Option<Pod>)> {
    let per_client = total.div_ceil(creators.len().max(1));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, mut creator) in creators.into_iter().enumerate() {
        let count = per_client.min(total.saturating_sub(c * per_client));
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(count);
            let mut last = None;
            for n in 0..count {
                let pod = bench_pod(&format!("p-{c}-{n}"), None);
                let t = Instant::now();
                let created = creator.create(&pod).await.with_context(|| format!("create p-{c}-{n}"))?;
                lat.push(t.elapsed());
                last = Some(created);
            }
            anyhow::Ok((lat, last))
        });
    }
    let mut samples = Samples::default();
    let mut example = None;
    while let Some(r) = tasks.join_next().await {
        let (lat, last) = r??;
        samples.0.extend(lat);
        example = example.or(last);
    }
    Ok((started.elapsed(), samples, example))
}

/// The create time an ADDED watch event line carries in [`SENT_ANNOTATION`], if it is one.
///
/// The watchers read every byte of every event but do not decode the pods: 1,000 typed decodes
/// per event would take more CPU in this process than the server spends delivering them on the
/// same small machine, and the target is the server's delivery latency.
fn added_sent_nanos(line: &str) -> Option<u128> {
    if !line.starts_with("{\"type\":\"ADDED\"") {
        return None;
    }
    let key = format!("\"{SENT_ANNOTATION}\":\"");
    let rest = &line[line.find(&key)? + key.len()..];
    rest[..rest.find('"')?].parse().ok()
}

/// Runs the benchmark and prints its report.
pub async fn run(args: ApiserverArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = match &args.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    println!("skiff bench apiserver: load average {} at start, {} CPUs", load_average(), num_cpus());

    // 1. Cold start to /readyz, fresh data directory each time.
    let mut starts = Samples::default();
    for i in 0..args.starts.max(1) {
        let mut server = ServerProcess::spawn(&base.path().join(format!("start-{i}")), &[])?;
        let (took, _) = server.wait_ready(Duration::from_secs(60)).await?;
        starts.0.push(took);
    }
    let start_median = starts.percentile(50.0);
    println!(
        "cold start to /readyz: median {} over {} starts (min {}, max {})",
        ms(start_median),
        starts.0.len(),
        ms(starts.0[0]),
        ms(*starts.0.last().unwrap_or(&Duration::ZERO))
    );

    // 2. Idle RSS.
    let mut server = ServerProcess::spawn(&base.path().join("server"), &[])?;
    let (_, admin) = server.wait_ready(Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
    let idle_rss = server.rss_bytes()?;
    println!("idle RSS after {:.0} s: {:.1} MB ({} threads)", args.settle, idle_rss as f64 / 1e6, server.threads()?);

    // 3. Creates over HTTPS, next to the same creates answered by an empty handler and to raw
    //    store creates, all in this run.
    anyhow::ensure!(!args.create_protocols.is_empty(), "--create-protocols names no protocol");
    let mut clients = Vec::with_capacity(args.clients);
    for _ in 0..args.clients.max(1) {
        clients.push(admin_client(&server.kubeconfig()).await?);
    }
    for phase in 0..args.create_protocols.len() {
        create_namespace(&admin, &format!("create-{phase}")).await?;
    }
    // The pod as the server stores and returns it: the empty handler's answer, the raw
    // store's value size.
    let stored = Api::<Pod>::namespaced(admin.clone(), "create-0")
        .create(&PostParams::default(), &bench_pod("probe", None))
        .await?;
    let stored = serde_json::to_vec(&stored)?;
    let value_size = stored.len();
    let response = base.path().join("empty-handler-response.json");
    std::fs::write(&response, &stored)?;
    let mut empty = spawn_empty_handler(base.path(), &server, &response)?;
    empty.wait_ready(Duration::from_secs(60)).await?;
    let mut empty_clients = Vec::with_capacity(clients.len());
    for _ in 0..clients.len() {
        empty_clients.push(admin_client(&empty.kubeconfig()).await?);
    }
    println!(
        "creates: {} pods per phase from {} clients, one create in flight per client; stored pod {} bytes; the \
         empty handler is `skiff bench empty-handler` (skiff's TLS and HTTP stack, answers 201 with that pod)",
        args.creates,
        clients.len(),
        value_size
    );
    let mut create_rows = Vec::new();
    for (phase, protocol) in args.create_protocols.iter().copied().enumerate() {
        let api = create_phase(&server, &clients, protocol, &format!("create-{phase}"), args.creates).await?;
        let baseline = create_phase(&empty, &empty_clients, protocol, "bench", args.creates).await?;
        println!("creates over {}:", protocol.describe_create());
        println!("  {}", api.describe("skiff API"));
        println!("  {}", baseline.describe("empty handler"));
        create_rows.push((protocol, api, baseline));
    }
    drop((empty, empty_clients));
    // Nothing else runs in this process meanwhile: its CPU is the store's.
    let own_cpu = process_cpu_time("/proc/self/stat")?;
    let (raw_took, mut raw_lat) = raw_store_creates(base.path(), clients.len(), args.creates, value_size).await?;
    let raw_us = cpu_us_per_op(own_cpu, process_cpu_time("/proc/self/stat")?, args.creates);
    let raw_rate = args.creates as f64 / raw_took.as_secs_f64();
    println!(
        "raw store creates (SqliteBackend in this process, {} writers): {:.0}/s (p50 {}, p99 {}); CPU per create {:.0} µs",
        clients.len(),
        raw_rate,
        ms(raw_lat.percentile(50.0)),
        ms(raw_lat.percentile(99.0)),
        raw_us
    );

    // 4. GET latency.
    let (get_took, mut get_lat) = get_pods(&clients, "create-0", args.creates, args.gets).await?;
    println!(
        "GETs: {} from {} clients in {:.2} s = {:.0}/s, p50 {}, p99 {}",
        args.gets,
        clients.len(),
        get_took.as_secs_f64(),
        args.gets as f64 / get_took.as_secs_f64(),
        ms(get_lat.percentile(50.0)),
        ms(get_lat.percentile(99.0))
    );

    // 5. Watch delivery latency, one phase per protocol.
    println!(
        "watch: write → delivery = from the creating client's clock just before it sends the POST (stamped into \
         the pod) to a watcher's clock when the event's whole line has been read; the creates, the watchers and \
         the server share this machine's {} CPUs",
        num_cpus()
    );
    let mut watch_rows = Vec::new();
    for (phase, protocol) in args.watch_protocols.iter().copied().enumerate() {
        let namespace = format!("watch-{phase}");
        let w =
            watch_latency(&admin, &clients, &server, protocol, &namespace, args.watchers, args.watch_writes).await?;
        let mut lat = w.delays;
        let delivered = lat.0.len();
        let mut creates = w.creates;
        println!(
            "watch ({}): {} watchers × {} creates: {} of {} deliveries, p50 {}, p99 {}, max {}",
            protocol.describe_watch(),
            args.watchers,
            args.watch_writes,
            delivered,
            w.expected,
            ms(lat.percentile(50.0)),
            ms(lat.percentile(99.0)),
            ms(lat.percentile(100.0)),
        );
        println!(
            "  creates in this phase p50 {}, p99 {}; CPU per delivery: server {:.1} µs, bench watchers {:.1} µs \
             (setting up the watches: server {:.0} µs, bench {:.0} µs per watch)",
            ms(creates.percentile(50.0)),
            ms(creates.percentile(99.0)),
            w.server_us_per_delivery,
            w.bench_us_per_delivery,
            w.server_us_per_watch,
            w.bench_us_per_watch,
        );
        watch_rows.push((protocol, lat.percentile(99.0), delivered == w.expected));
    }
    let busy_rss = server.rss_bytes()?;
    println!("RSS after the run: {:.1} MB; load average {} at end", busy_rss as f64 / 1e6, load_average());

    println!();
    println!("| target (issue 3) | measured | ratio to target | verdict |");
    println!("|---|---|---|---|");
    let mb = idle_rss as f64 / 1e6;
    row("idle RSS ≤ 40 MB", &format!("{mb:.1} MB"), mb / 40.0, mb <= 40.0);
    let s = start_median.as_secs_f64();
    row("start to ready ≤ 0.5 s", &format!("{s:.3} s"), s / 0.5, s <= 0.5);
    // The target is measured with kube-rs's HTTP/1.1 client when that phase ran.
    let target_phase = create_rows.iter().find(|(p, ..)| *p == Protocol::Http1).unwrap_or(&create_rows[0]);
    let api_rate = target_phase.1.rate;
    let share = api_rate / raw_rate;
    row(
        "API creates ≥ 50 % of raw store creates",
        &format!("{:.1} % ({api_rate:.0} vs {raw_rate:.0}/s)", share * 100.0),
        share / 0.5,
        share >= 0.5,
    );
    for (protocol, p99, complete) in watch_rows {
        let target = match protocol {
            Protocol::Http2 => "watch p99 ≤ 50 ms (1,000 watchers, HTTP/2)",
            Protocol::Http1 => "watch p99 ≤ 50 ms (1,000 watchers, HTTP/1.1 kube-rs)",
        };
        row(target, &ms(p99), p99.as_secs_f64() / 0.05, p99 <= Duration::from_millis(50) && complete);
    }

    println!();
    println!(
        "| creates ({} pods, {} clients, 1 in flight each) | creates/s | % of raw store | % of empty handler | \
         server CPU per create | bench client CPU per create |",
        args.creates,
        clients.len()
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| raw store (SqliteBackend in-process, {} writers) | {raw_rate:.0} | 100 % | | {raw_us:.0} µs (store) | |",
        clients.len()
    );
    for (protocol, api, baseline) in &create_rows {
        for (label, phase) in [("empty handler", baseline), ("skiff API", api)] {
            println!(
                "| {label}, {} | {:.0} | {} | {} | {:.0} µs | {:.0} µs |",
                protocol.describe_create(),
                phase.rate,
                percent(phase.rate, raw_rate),
                percent(phase.rate, baseline.rate),
                phase.server_us,
                phase.client_us
            );
        }
    }
    let budget = cpu_budget_us(num_cpus(), raw_rate * 0.5);
    println!();
    println!(
        "CPU budget: 50 % of the raw store is {:.0} creates/s; on these {} CPUs that leaves {budget:.0} µs of CPU per \
         create for the server and the bench clients together, of which the raw store's own work takes {raw_us:.0} µs. \
         Used (server + clients):",
        raw_rate * 0.5,
        num_cpus()
    );
    for (protocol, api, baseline) in &create_rows {
        println!(
            "  {}: empty handler {:.0} µs ({:.0} + {:.0}), skiff API {:.0} µs ({:.0} + {:.0})",
            protocol.describe_create(),
            baseline.server_us + baseline.client_us,
            baseline.server_us,
            baseline.client_us,
            api.server_us + api.client_us,
            api.server_us,
            api.client_us
        );
    }
    Ok(())
}

/// `part` as a percentage of `whole`, one decimal.
fn percent(part: f64, whole: f64) -> String {
    if whole > 0.0 { format!("{:.1} %", part * 100.0 / whole) } else { "n/a".to_string() }
}

/// CPU time per operation, µs, that `cpus` fully busy CPUs can spend at `rate` operations/s.
fn cpu_budget_us(cpus: usize, rate: f64) -> f64 {
    if rate > 0.0 { cpus as f64 * 1e6 / rate } else { f64::INFINITY }
}

/// Spawns `skiff bench empty-handler` (this binary) with `server`'s certificates, answering
/// every request with the bytes of `response`; its data directory is under `base`.
fn spawn_empty_handler(
    base: &std::path::Path,
    server: &ServerProcess,
    response: &std::path::Path,
) -> anyhow::Result<ServerProcess> {
    let exe = std::env::current_exe().context("locating the skiff binary")?;
    let pki_dir = server.data_dir.join("tls");
    let utf8 = |p: &std::path::Path| p.to_str().map(str::to_string).context("the temp dir's path is not UTF-8");
    ServerProcess::spawn_command(
        &exe,
        &["bench", "empty-handler"],
        &base.join("empty-handler"),
        &["--pki-dir", &utf8(&pki_dir)?, "--response-file", &utf8(response)?],
    )
}

/// What one create phase measured against one server.
struct CreatePhase {
    /// Creates per second, wall clock.
    rate: f64,
    /// Latency of each create.
    latencies: Samples,
    /// Server process CPU per create, µs.
    server_us: f64,
    /// This process's CPU per create (the bench clients), µs.
    client_us: f64,
}

impl CreatePhase {
    /// One line: rate, latency percentiles and CPU per create.
    fn describe(&self, label: &str) -> String {
        let mut latencies = Samples(self.latencies.0.clone());
        format!(
            "{label}: {:.0}/s (p50 {}, p99 {}); CPU per create: server {:.0} µs, bench clients {:.0} µs",
            self.rate,
            ms(latencies.percentile(50.0)),
            ms(latencies.percentile(99.0)),
            self.server_us,
            self.client_us
        )
    }
}

/// Creates `total` pods in `namespace` through `server` from `clients` (built for that server)
/// over `protocol`: kube-rs's own clients for HTTP/1.1, or one HTTP/2 connection per client.
/// Either way every connection is open (TLS handshake done) before the clock starts: kube-rs's
/// pools by one `GET /readyz` per client. Server and bench CPU are read from /proc around the
/// creates.
async fn create_phase(
    server: &ServerProcess,
    clients: &[kube::Client],
    protocol: Protocol,
    namespace: &str,
    total: usize,
) -> anyhow::Result<CreatePhase> {
    if protocol == Protocol::Http1 {
        let readyz = || kube::core::Request::new("").get("readyz", &Default::default());
        futures::future::try_join_all(
            clients.iter().map(|c| async move { anyhow::Ok(c.request_text(readyz()?).await?) }),
        )
        .await?;
    }
    let mut creators = Vec::with_capacity(clients.len());
    for client in clients {
        creators.push(match protocol {
            Protocol::Http1 => Creator::Kube(Box::new(Api::namespaced(client.clone(), namespace))),
            Protocol::Http2 => {
                let (send, base) = h2_connection(&server.kubeconfig()).await?;
                Creator::Http2 { send, uri: format!("{base}/api/v1/namespaces/{namespace}/pods") }
            }
        });
    }
    let (server_cpu, own_cpu) = (server.cpu_time()?, process_cpu_time("/proc/self/stat")?);
    let (took, latencies, _) = create_pods_with(creators, total).await?;
    Ok(CreatePhase {
        rate: total as f64 / took.as_secs_f64(),
        latencies,
        server_us: cpu_us_per_op(server_cpu, server.cpu_time()?, total),
        client_us: cpu_us_per_op(own_cpu, process_cpu_time("/proc/self/stat")?, total),
    })
}

fn row(target: &str, measured: &str, ratio: f64, met: bool) {
    println!("| {target} | {measured} | {ratio:.2}× | {} |", if met { "met" } else { "missed" });
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// `total` creates of `value_size`-byte values into a fresh [`SqliteBackend`] from `writers`
/// concurrent tasks, keys as the API server names pods.
async fn raw_store_creates(
    dir: &std::path::Path,
    writers: usize,
    total: usize,
    value_size: usize,
) -> anyhow::Result<(Duration, Samples)> {
    let path = dir.join("raw/state.db");
    std::fs::create_dir_all(dir.join("raw"))?;
    let options = skiff_store::Options { compaction_interval: None, ..Default::default() };
    let store = Arc::new(tokio::task::spawn_blocking(move || SqliteBackend::open(&path, options)).await??);
    let value = Arc::new(vec![b'x'; value_size]);
    let per_writer = total.div_ceil(writers);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        let (store, value) = (store.clone(), value.clone());
        let count = per_writer.min(total.saturating_sub(w * per_writer));
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(count);
            for n in 0..count {
                let t = Instant::now();
                store.create(&format!("/registry/pods/bench/p-{w}-{n}"), value.to_vec()).await?;
                lat.push(t.elapsed());
            }
            anyhow::Ok(lat)
        });
    }
    let mut samples = Samples::default();
    while let Some(r) = tasks.join_next().await {
        samples.0.extend(r??);
    }
    Ok((started.elapsed(), samples))
}

/// `total` GETs of the pods [`create_pods`] made, spread over the clients.
async fn get_pods(
    clients: &[kube::Client],
    namespace: &str,
    created: usize,
    total: usize,
) -> anyhow::Result<(Duration, Samples)> {
    let per_client_created = created.div_ceil(clients.len()).max(1);
    let per_client = total.div_ceil(clients.len());
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, client) in clients.iter().enumerate() {
        let api = Api::<Pod>::namespaced(client.clone(), namespace);
        let own = per_client_created.min(created.saturating_sub(c * per_client_created));
        tasks.spawn(async move {
            let mut lat = Vec::with_capacity(per_client);
            if own == 0 {
                return anyhow::Ok(lat);
            }
            for n in 0..per_client {
                let name = format!("p-{c}-{}", (n * 7919) % own);
                let t = Instant::now();
                api.get(&name).await.with_context(|| format!("get {name}"))?;
                lat.push(t.elapsed());
            }
            anyhow::Ok(lat)
        });
    }
    let mut samples = Samples::default();
    while let Some(r) = tasks.join_next().await {
        samples.0.extend(r??);
    }
    Ok((started.elapsed(), samples))
}

/// What one watch phase measured.
struct WatchPhase {
    /// Write → delivery delays, one per (watcher, create) delivered.
    delays: Samples,
    /// Deliveries expected (watchers × creates).
    expected: usize,
    /// Latencies of the phase's creates.
    creates: Samples,
    /// Server CPU per delivery while the creates were delivered (watch setup excluded).
    server_us_per_delivery: f64,
    /// This process's CPU per delivery over the same span (mostly the watchers' reading).
    bench_us_per_delivery: f64,
    /// Server CPU per watch while the watches were opened (TLS handshakes, requests).
    server_us_per_watch: f64,
    /// This process's CPU per watch while opening them.
    bench_us_per_watch: f64,
}

/// The server's gauge of open pod watches.
const WATCH_GAUGE: &str = "apiserver_registered_watchers{group=\"\",resource=\"pods\"}";

/// Where a watcher records its delays.
type Delays = Arc<Mutex<Vec<Duration>>>;

/// Records the delay of the ADDED event `line` carries, if it is one of the bench's; true if
/// it was.
fn record_line(line: &[u8], now: u128, delays: &Delays) -> bool {
    let Some(sent) = std::str::from_utf8(line).ok().and_then(added_sent_nanos) else { return false };
    let d = Duration::from_nanos(now.saturating_sub(sent) as u64);
    delays.lock().unwrap_or_else(|p| p.into_inner()).push(d);
    true
}

/// Reads a watch body's chunks until `writes` ADDED events carrying [`SENT_ANNOTATION`] were
/// seen, recording each one's delay when its line is complete.
async fn record_deliveries<S, B, E>(body: S, writes: usize, delays: Delays)
where
    S: futures::Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    let mut body = std::pin::pin!(body);
    let mut partial: Vec<u8> = Vec::new();
    let mut seen = 0;
    while seen < writes {
        let Some(Ok(chunk)) = futures::StreamExt::next(&mut body).await else { return };
        let now = unix_nanos();
        let mut chunk = chunk.as_ref();
        if !partial.is_empty() {
            // The end of a line begun in an earlier chunk.
            let Some(end) = chunk.iter().position(|&b| b == b'\n') else {
                partial.extend_from_slice(chunk);
                continue;
            };
            partial.extend_from_slice(&chunk[..end]);
            seen += usize::from(record_line(&partial, now, &delays));
            partial.clear();
            chunk = &chunk[end + 1..];
        }
        let mut lines = chunk.split(|&b| b == b'\n');
        let last = lines.next_back().unwrap_or_default();
        for line in lines {
            seen += usize::from(record_line(line, now, &delays));
        }
        partial.extend_from_slice(last);
    }
}

/// [`record_deliveries`] for a body already split into lines.
async fn record_line_deliveries<S, E>(lines: S, writes: usize, delays: Delays)
where
    S: futures::Stream<Item = Result<String, E>>,
{
    let mut lines = std::pin::pin!(lines);
    let mut seen = 0;
    while seen < writes {
        let Some(Ok(line)) = futures::StreamExt::next(&mut lines).await else { return };
        seen += usize::from(record_line(line.as_bytes(), unix_nanos(), &delays));
    }
}

/// One HTTP/2 connection to the server of `kubeconfig` (its cluster URL, CA and client
/// certificate), for many concurrent requests with bodies of type `B`; and the server's base URL.
async fn h2_connection<B>(kubeconfig: &std::path::Path) -> anyhow::Result<(H2Sender<B>, String)>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use kube::client::ConfigExt as _;
    let config =
        kube::Config::from_custom_kubeconfig(kube::config::Kubeconfig::read_from(kubeconfig)?, &Default::default())
            .await?;
    let mut tls = config.rustls_client_config()?;
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let url = config.cluster_url.clone();
    let host = url.host().context("no host in the cluster URL")?.trim_matches(['[', ']']).to_string();
    let port = url.port_u16().unwrap_or(443);
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from(host.clone())?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls)).connect(name, tcp).await?;
    anyhow::ensure!(stream.get_ref().1.alpn_protocol() == Some(b"h2"), "the server did not negotiate HTTP/2");
    let (send, conn) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .handshake(hyper_util::rt::TokioIo::new(stream))
        .await?;
    tokio::spawn(conn);
    let base = format!("https://{}", url.authority().map(|a| a.as_str()).unwrap_or(&host));
    Ok((send, base))
}

/// Opens `watchers` watches on pods of `namespace` (spread over the clients, over `protocol`),
/// waits until the server counts them all, then creates `writes` pods 20 ms apart, each
/// stamped with its create time; every watcher records the delay to each ADDED event.
async fn watch_latency(
    admin: &kube::Client,
    clients: &[kube::Client],
    server: &ServerProcess,
    protocol: Protocol,
    namespace: &str,
    watchers: usize,
    writes: usize,
) -> anyhow::Result<WatchPhase> {
    create_namespace(admin, namespace).await?;
    let api = Api::<Pod>::namespaced(admin.clone(), namespace);
    let rv = api.list(&ListParams::default()).await?.metadata.resource_version.unwrap_or_default();
    let before = metric_sum(&scrape(admin).await?, WATCH_GAUGE);
    let delays: Delays = Arc::new(Mutex::new(Vec::with_capacity(watchers * writes)));
    let (server_cpu, own_cpu) = (server.cpu_time()?, process_cpu_time("/proc/self/stat")?);
    let mut tasks = tokio::task::JoinSet::new();
    let path = format!("/api/v1/namespaces/{namespace}/pods");
    match protocol {
        Protocol::Http2 => {
            let mut connections = Vec::with_capacity(clients.len());
            for _ in 0..clients.len().max(1) {
                connections.push(h2_connection::<http_body_util::Empty<Bytes>>(&server.kubeconfig()).await?);
            }
            for w in 0..watchers {
                let (send, base) = &connections[w % connections.len()];
                let uri = format!("{base}{path}?watch=1&resourceVersion={rv}&timeoutSeconds=290");
                let request = hyper::Request::get(uri).body(http_body_util::Empty::new())?;
                let mut send = send.clone();
                send.ready().await?;
                let response = send.send_request(request).await.with_context(|| format!("watch {w}"))?;
                anyhow::ensure!(response.status().is_success(), "watch {w}: {}", response.status());
                let body = http_body_util::BodyStream::new(response.into_body())
                    .try_filter_map(|frame| async move { Ok(frame.into_data().ok()) });
                tasks.spawn(record_deliveries(body, writes, delays.clone()));
            }
        }
        Protocol::Http1 => {
            for w in 0..watchers {
                let client = clients[w % clients.len()].clone();
                let request = kube::core::Request::new(&path)
                    .watch(&WatchParams::default().timeout(290), &rv)
                    .with_context(|| format!("watch {w}"))?;
                let body = client.request_stream(request).await.with_context(|| format!("watch {w}"))?;
                tasks.spawn(record_line_deliveries(body.lines(), writes, delays.clone()));
            }
        }
    }
    // Every watch is registered with the server before the first write.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = metric_sum(&scrape(admin).await?, WATCH_GAUGE);
        if now - before >= watchers as f64 {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "only {} of {watchers} watches registered", now - before);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (server_setup, own_setup) = (server.cpu_time()?, process_cpu_time("/proc/self/stat")?);
    let mut creates = Samples::default();
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    for n in 0..writes {
        tick.tick().await;
        let annotations = BTreeMap::from([(SENT_ANNOTATION.to_string(), unix_nanos().to_string())]);
        let t = Instant::now();
        api.create(&PostParams::default(), &bench_pod(&format!("w-{n}"), Some(annotations))).await?;
        creates.0.push(t.elapsed());
    }
    let all_done = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(60), all_done).await.is_err() {
        eprintln!("some watchers did not see every create within 60 s");
    }
    let (server_end, own_end) = (server.cpu_time()?, process_cpu_time("/proc/self/stat")?);
    // Close the watches and wait until the server has let them go, so the next phase counts
    // only its own.
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric_sum(&scrape(admin).await?, WATCH_GAUGE) > before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let delays = std::mem::take(&mut *delays.lock().unwrap_or_else(|p| p.into_inner()));
    let delivered = delays.len();
    Ok(WatchPhase {
        delays: Samples(delays),
        expected: watchers * writes,
        creates,
        server_us_per_delivery: cpu_us_per_op(server_setup, server_end, delivered),
        bench_us_per_delivery: cpu_us_per_op(own_setup, own_end, delivered),
        server_us_per_watch: cpu_us_per_op(server_cpu, server_setup, watchers),
        bench_us_per_watch: cpu_us_per_op(own_cpu, own_setup, watchers),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_have_one_decimal_and_survive_a_zero_whole() {
        assert_eq!(percent(2500.0, 16000.0), "15.6 %");
        assert_eq!(percent(1.0, 0.0), "n/a");
    }

    #[test]
    fn half_of_16000_creates_per_second_on_two_cpus_leaves_250_us_per_create() {
        assert_eq!(cpu_budget_us(2, 16000.0 * 0.5), 250.0);
        assert!(cpu_budget_us(2, 0.0).is_infinite());
    }

    #[test]
    fn bench_pods_avoid_every_scheduler() {
        let pod = bench_pod("p", None);
        assert_eq!(pod.spec.unwrap().scheduler_name.as_deref(), Some(NO_SCHEDULER));
    }

    #[test]
    fn only_added_events_yield_their_create_time() {
        let annotations = BTreeMap::from([(SENT_ANNOTATION.to_string(), "1234".to_string())]);
        let pod = serde_json::to_string(&bench_pod("w-0", Some(annotations))).unwrap();
        assert_eq!(added_sent_nanos(&format!("{{\"type\":\"ADDED\",\"object\":{pod}}}")), Some(1234));
        assert_eq!(added_sent_nanos(&format!("{{\"type\":\"MODIFIED\",\"object\":{pod}}}")), None);
    }

    #[tokio::test]
    async fn deliveries_are_recorded_once_per_line_across_chunk_boundaries() {
        let sent = unix_nanos();
        let annotations = BTreeMap::from([(SENT_ANNOTATION.to_string(), sent.to_string())]);
        let pod = serde_json::to_string(&bench_pod("w-0", Some(annotations))).unwrap();
        let added = format!("{{\"type\":\"ADDED\",\"object\":{pod}}}\n");
        let other = format!("{{\"type\":\"MODIFIED\",\"object\":{pod}}}\n");
        let body = format!("{other}{added}{added}{other}{added}").into_bytes();
        // Chunks cut inside lines, one of them holding no line end at all.
        let chunks: Vec<Result<Vec<u8>, std::convert::Infallible>> =
            body.chunks(added.len() / 3).map(|c| Ok(c.to_vec())).collect();
        let delays: Delays = Arc::default();
        record_deliveries(futures::stream::iter(chunks), 10, delays.clone()).await;
        assert_eq!(delays.lock().unwrap().len(), 3, "three ADDED lines, each counted once");
    }
}
