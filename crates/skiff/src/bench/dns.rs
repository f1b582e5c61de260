//! `skiff bench dns`: the cluster DNS server's queries/s and p99 latency under
//! `dnsperf` (Debian's package), next to `dnsmasq` serving the same names from a hosts file in
//! the same run, and the memory of the records index per Service.
//!
//! The zone holds `--services` ClusterIP Services (`svc-N.bench.svc.cluster.local`, a named
//! port and an EndpointSlice of three endpoints each), put in the index directly: the server
//! answers from the same index whatever fills it, and a bench without an API server keeps the
//! two-core machine's CPU for the servers measured. Each server runs alone on 127.0.0.1 while
//! dnsperf asks every name in turn for `--seconds` (one client, 100 queries outstanding, its
//! defaults); runs alternate between the two servers `--rounds` times and the medians are
//! reported. p99 comes from dnsperf's per-query latencies (`-v`). Since both servers share the
//! machine with dnsperf (and, on a busy machine, with everything else), each run also reports
//! the server's CPU time per answer (skiff's is this process's, which does nothing else
//! meanwhile; dnsmasq's from its /proc/PID/stat), which the load does not change.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::RwLock;
use skiff_dns::{DnsServer, RecordIndex};

use super::harness::{Samples, cpu_us_per_op, free_port, load_average, ms, process_cpu_time, process_rss_bytes};

/// Flags of `skiff bench dns`.
#[derive(clap::Args, Debug)]
pub struct DnsArgs {
    /// Services in the zone.
    #[arg(long, default_value_t = 10_000)]
    pub services: usize,
    /// Seconds of each dnsperf run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Runs of each server, alternated; the medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

/// The target: skiff's queries/s at least this share of dnsmasq's.
const TARGET_RATIO: f64 = 0.8;

/// The namespace of the bench's Services.
const NAMESPACE: &str = "bench";

/// The `i`-th Service's ClusterIP: consecutive addresses of 10.43.0.0/16 from 10.43.1.0.
fn cluster_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 43, 1, 0)) + i as u32)
}

/// The `i`-th Service and its EndpointSlice.
fn service(i: usize) -> (Service, EndpointSlice) {
    let name = format!("svc-{i}");
    let meta = |name: String| ObjectMeta { name: Some(name), namespace: Some(NAMESPACE.into()), ..Default::default() };
    let svc = Service {
        metadata: meta(name.clone()),
        spec: Some(ServiceSpec {
            cluster_ip: Some(cluster_ip(i).to_string()),
            cluster_ips: Some(vec![cluster_ip(i).to_string()]),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut slice_meta = meta(format!("{name}-abcde"));
    slice_meta.labels = Some([(skiff_dns::records::SERVICE_NAME_LABEL.to_string(), name)].into());
    let pod_ip = |k: usize| Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 42, 0, 0)) + (i * 3 + k) as u32).to_string();
    let slice = EndpointSlice {
        metadata: slice_meta,
        address_type: "IPv4".into(),
        endpoints: (0..3)
            .map(|k| Endpoint {
                addresses: vec![pod_ip(k)],
                conditions: Some(EndpointConditions { ready: Some(true), ..Default::default() }),
                ..Default::default()
            })
            .collect(),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(8080),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    };
    (svc, slice)
}

fn fqdn(i: usize) -> String {
    format!("svc-{i}.{NAMESPACE}.svc.cluster.local")
}

/// One dnsperf run's figures.
struct Run {
    qps: f64,
    p99: Duration,
    completed: usize,
    failed: usize,
}

/// Parses dnsperf's `-v` output: one `> RCODE name type latency-seconds` line per answer and
/// the `Queries per second:` summary.
fn parse_dnsperf(out: &str) -> anyhow::Result<Run> {
    let mut samples = Samples::default();
    let mut failed = 0;
    let mut qps = None;
    for line in out.lines() {
        if let Some(answer) = line.strip_prefix("> ") {
            let mut fields = answer.split_whitespace();
            if fields.next() != Some("NOERROR") {
                failed += 1;
            }
            if let Some(secs) = fields.last().and_then(|s| s.parse::<f64>().ok()) {
                samples.0.push(Duration::from_secs_f64(secs));
            }
        } else if let Some(v) = line.trim().strip_prefix("Queries per second:") {
            qps = v.trim().parse().ok();
        }
    }
    let qps = qps.context("no `Queries per second` in dnsperf's output")?;
    let completed = samples.0.len();
    Ok(Run { qps, p99: samples.percentile(99.0), completed, failed })
}

fn dnsperf(port: u16, queries: &Path, seconds: u64) -> anyhow::Result<Run> {
    let out = Command::new("dnsperf")
        .args(["-s", "127.0.0.1", "-p", &port.to_string(), "-l", &seconds.to_string(), "-v", "-d"])
        .arg(queries)
        .stderr(Stdio::inherit())
        .output()
        .context("running dnsperf (install it with scripts/install-deps)")?;
    if !out.status.success() {
        bail!("dnsperf exited with {}", out.status);
    }
    parse_dnsperf(&String::from_utf8_lossy(&out.stdout))
}

/// A dnsmasq answering the names of `hosts` only, on 127.0.0.1:`port`; killed on drop.
struct Dnsmasq(Child);

impl Dnsmasq {
    fn stat_path(&self) -> String {
        format!("/proc/{}/stat", self.0.id())
    }
}

impl Dnsmasq {
    fn start(hosts: &Path, port: u16, log: &Path) -> anyhow::Result<Self> {
        let child = Command::new("dnsmasq")
            .args(["--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--pid-file="])
            .args(["--listen-address=127.0.0.1", "--bind-interfaces", "--user=root", "--local-ttl=5"])
            .arg(format!("--port={port}"))
            .arg(format!("--addn-hosts={}", hosts.display()))
            .arg(format!("--log-facility={}", log.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting dnsmasq (install it with scripts/install-deps)")?;
        Ok(Self(child))
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Asks 127.0.0.1:`port` for `name` A until it answers with `want`, for up to 30 s.
fn wait_answering(port: u16, name: &str, want: Ipv4Addr) -> anyhow::Result<()> {
    use hickory_proto::op::{Message, MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RData, RecordType};
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    socket.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut query = Message::new();
    query.set_id(7).set_message_type(MessageType::Query).set_op_code(OpCode::Query).set_recursion_desired(true);
    query.add_query(Query::query(Name::from_ascii(format!("{name}."))?, RecordType::A));
    let bytes = query.to_vec()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 1500];
    while Instant::now() < deadline {
        socket.send_to(&bytes, ("127.0.0.1", port))?;
        if let Ok(n) = socket.recv(&mut buf) {
            let answer = Message::from_vec(&buf[..n])?;
            if answer.answers().iter().any(|r| matches!(r.data(), RData::A(a) if a.0 == want)) {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("127.0.0.1:{port} does not answer {name} with {want}")
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the benchmark.
pub async fn run(args: DnsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.services > 0 && args.services < 60_000, "--services must be in 1..60000");
    let dir = tempfile::tempdir()?;

    // The index, and the memory it took (this process's RSS growth while it was filled).
    let before = process_rss_bytes("/proc/self/status")?;
    let mut index = RecordIndex::new("cluster.local")?;
    for i in 0..args.services {
        let (svc, slice) = service(i);
        index.upsert_service(&svc);
        index.upsert_slice(&slice);
    }
    let after = process_rss_bytes("/proc/self/status")?;
    let per_service = after.saturating_sub(before) as f64 / args.services as f64;
    let index = Arc::new(RwLock::new(index));

    let queries = dir.path().join("queries");
    let hosts = dir.path().join("hosts");
    let mut q = String::new();
    let mut h = String::new();
    for i in 0..args.services {
        q.push_str(&format!("{} A\n", fqdn(i)));
        h.push_str(&format!("{} {}\n", cluster_ip(i), fqdn(i)));
    }
    std::fs::write(&queries, q)?;
    std::fs::write(&hosts, h)?;

    let skiff = DnsServer::bind("127.0.0.1:0".parse()?, index, Vec::new()).await?;
    let skiff_port = skiff.local_addr()?.port();
    let skiff_task = tokio::spawn(skiff.run());
    let dnsmasq_port = free_port()?;
    let dnsmasq = Dnsmasq::start(&hosts, dnsmasq_port, &dir.path().join("dnsmasq.log"))?;
    let last = args.services - 1;
    for port in [skiff_port, dnsmasq_port] {
        tokio::task::block_in_place(|| wait_answering(port, &fqdn(last), cluster_ip(last)))?;
    }

    println!(
        "cluster DNS: {} Services, dnsperf {} s per run, {} rounds alternated; load average {}",
        args.services,
        args.seconds,
        args.rounds,
        load_average()
    );
    let (mut skiff_qps, mut skiff_p99, mut skiff_cpu) = (vec![], vec![], vec![]);
    let (mut dnsmasq_qps, mut dnsmasq_p99, mut dnsmasq_cpu) = (vec![], vec![], vec![]);
    let dnsmasq_stat = dnsmasq.stat_path();
    for round in 1..=args.rounds {
        for (server, port, stat) in
            [("skiff", skiff_port, "/proc/self/stat"), ("dnsmasq", dnsmasq_port, dnsmasq_stat.as_str())]
        {
            let cpu_before = process_cpu_time(stat)?;
            let r = tokio::task::block_in_place(|| dnsperf(port, &queries, args.seconds))?;
            let cpu = cpu_us_per_op(cpu_before, process_cpu_time(stat)?, r.completed);
            println!(
                "  round {round} {server:>7}: {:>9.0} queries/s  p99 {}  {cpu:.1} µs CPU/answer  ({} answers, {} not NOERROR)",
                r.qps,
                ms(r.p99),
                r.completed,
                r.failed
            );
            let (qps, p99, cpus) = if server == "skiff" {
                (&mut skiff_qps, &mut skiff_p99, &mut skiff_cpu)
            } else {
                (&mut dnsmasq_qps, &mut dnsmasq_p99, &mut dnsmasq_cpu)
            };
            qps.push(r.qps);
            p99.push(r.p99.as_secs_f64());
            cpus.push(cpu);
        }
    }
    skiff_task.abort();
    let (sq, dq) = (median(&mut skiff_qps), median(&mut dnsmasq_qps));
    let (sp, dp) = (median(&mut skiff_p99), median(&mut dnsmasq_p99));
    let ratio = if dq > 0.0 { sq / dq } else { 0.0 };
    let (sc, dc) = (median(&mut skiff_cpu), median(&mut dnsmasq_cpu));
    println!(
        "skiff DNS:  {sq:>9.0} queries/s (median)  p99 {}  {sc:.1} µs CPU/answer",
        ms(Duration::from_secs_f64(sp))
    );
    println!(
        "dnsmasq:    {dq:>9.0} queries/s (median)  p99 {}  {dc:.1} µs CPU/answer",
        ms(Duration::from_secs_f64(dp))
    );
    println!(
        "ratio:      {:.0} % of dnsmasq's queries/s (target ≥ {:.0} %: {})",
        ratio * 100.0,
        TARGET_RATIO * 100.0,
        if ratio >= TARGET_RATIO { "met" } else { "NOT met" }
    );
    if dc > 0.0 {
        println!("CPU:        skiff uses {:.2}× dnsmasq's CPU time per answer", sc / dc);
    }
    println!(
        "records index: {:.0} bytes per Service ({} Services, each with a named port and a slice of 3 endpoints; RSS growth while filling it)",
        per_service, args.services
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dnsperf_verbose_output_gives_queries_per_second_and_p99() {
        let mut out = String::from("[Status] Sending queries\n");
        for i in 1..=100 {
            out.push_str(&format!("> NOERROR svc-{i}.bench.svc.cluster.local A 0.{i:06}\n"));
        }
        out.push_str("> NXDOMAIN nope.bench.svc.cluster.local A 0.000001\n");
        out.push_str("  Queries per second:   999.889512\n");
        let run = parse_dnsperf(&out).unwrap();
        assert!((run.qps - 999.889512).abs() < 1e-6);
        assert_eq!((run.completed, run.failed), (101, 1));
        assert_eq!(run.p99, Duration::from_micros(99));
        assert!(parse_dnsperf("no summary").is_err());
    }

    #[test]
    fn every_service_gets_its_own_cluster_ip_and_endpoints() {
        let (first, first_slice) = service(0);
        let (last, _) = service(9_999);
        assert_eq!(first.spec.unwrap().cluster_ip.as_deref(), Some("10.43.1.0"));
        assert_eq!(last.spec.unwrap().cluster_ip.as_deref(), Some("10.43.40.15"));
        assert_eq!(first_slice.endpoints.len(), 3);
    }
}
