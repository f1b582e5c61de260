//! `skiff bench …`: benchmarks. Each prints its figures next to a baseline measured in the same
//! run (raw SQLite, raw etcd, an empty handler) or the target, and the ratio between them.

mod apiserver;
mod audit;
mod authorization;
mod daemonset;
mod deployment;
mod dns;
mod empty_handler;
mod harness;
mod hpa;
mod jobs;
mod migrate;
mod netpol;
mod podstartup;
mod proxy;
mod scale;
mod statefulset;
mod stats;
mod store;
mod vap;

/// The benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Durable creates/s and latency of the store backends (embedded SQLite, etcd) next to raw
    /// SQLite inserts and raw etcd puts of the same bytes, at 1, 16 and 256 concurrent writers.
    Store(store::StoreArgs),
    /// The scheduling cycle in kube-scheduler's scheduler_perf shapes (SchedulingBasic: 5,000
    /// nodes, 1,000 initial and 10,000 measured pods; pod anti-affinity; topology spreading) over
    /// an in-memory cache with a no-op binder: pods/s and per-cycle latency percentiles.
    Scheduler,
    /// RBAC authorization decision time (p50/p99, microseconds) with 1,000 roles and 1,000
    /// bindings (target p99 < 5 µs); with `--api`, pod creates/s through a server with
    /// authentication, RBAC and admission on next to one with them off, and the ratio.
    Authorization(authorization::AuthorizationArgs),
    /// The API server: idle RSS, cold start to /readyz, pod creates/s over HTTPS from
    /// 64 clients (HTTP/1.1 and HTTP/2) next to an empty handler's and raw store creates/s, GET
    /// p99, and write-to-delivery p99 with 1,000 watchers, against the targets.
    Apiserver(apiserver::ApiserverArgs),
    /// The controllers: a 1,000-replica Deployment on simulated nodes until all
    /// replicas are available, and a rolling update, next to direct pod creates through the API.
    Deployment(deployment::DeploymentArgs),
    /// A 1,000-replica StatefulSet with Parallel pod management on simulated nodes until all
    /// replicas are Ready, next to direct pod creates through the API.
    Statefulset(statefulset::StatefulSetArgs),
    /// The DaemonSet controller: a DaemonSet across N simulated nodes (5,000) and
    /// its rolling update with maxUnavailable 10 %: total time and the server's CPU seconds.
    Daemonset(daemonset::DaemonSetArgs),
    /// The Job controller: 10,000 one-pod Jobs on 100 simulated nodes from create to
    /// Complete, Jobs/s against the 100/s target and API writes per Job.
    Jobs(jobs::JobsArgs),
    /// The audit log's cost: pod creates/s and server CPU per create with every request audited
    /// at Metadata level next to a server without auditing, and the ratio (target <= 10 % fewer).
    Audit(audit::AuditArgs),
    /// `skiff datastore migrate`'s copy of 100,000 objects from the embedded store into etcd:
    /// objects/s (target >= 10,000/s) and peak RSS, next to raw etcd creates of the same data.
    Migrate(migrate::MigrateArgs),
    /// The horizontal pod autoscaler: server CPU per HPA sync with 1,000 HPAs on one-replica
    /// Deployments on simulated nodes, next to the same cluster without HPAs.
    Hpa(hpa::HpaArgs),
    /// Pod startup latency (create → Running seen by a watch) of 30 pods on a real containerd,
    /// p50/p99 against the 2 s target, and memory per simulated node (needs root).
    Podstartup(podstartup::PodStartupArgs),
    /// The node proxy: time from a Service/endpoint change to its nftables
    /// transaction being applied, p50/p99, with 10,000 Services and 50,000 endpoints programmed
    /// in a network namespace (target p99 ≤ 100 ms; needs root and `nft`).
    Proxy(proxy::ProxyArgs),
    /// NetworkPolicy enforcement: time from a pod or namespace label change to the nftables
    /// transaction enforcing it, p50/p99, with 1,000 policies and 10,000 pods of one node in a
    /// network namespace (target p99 ≤ 100 ms), next to rebuilding the whole rule set (needs
    /// root and `nft`).
    Netpol(netpol::NetpolArgs),
    /// The cluster DNS: queries/s and p99 with dnsperf against skiff's DNS server and,
    /// in the same run, dnsmasq serving the same 10,000 Services' names from a hosts file (target
    /// ≥ 80 % of dnsmasq's queries/s), and the records index's memory per Service.
    Dns(dns::DnsArgs),
    /// ValidatingAdmissionPolicy: the admission CPU of one policy with three validations per pod
    /// create against none, in process and (with `--api`) as server CPU per create (target
    /// ≤ 25 µs).
    Vap(vap::VapArgs),
    /// The whole cluster at scale: `--nodes` simulated nodes (1,000) and `--pods` pods (5,000)
    /// as Deployments of 5,000: RSS per pod, time until all are bound and all Running, idle
    /// CPU, next to an idle server with no nodes measured in the same run.
    Scale(scale::ScaleArgs),
    /// The kubelet's stats collection at 110 pods (a fake cgroup v2 tree): CPU per
    /// collection cycle against the ≤ 1 % of a core at 10 s target, next to reading the same
    /// files without parsing.
    Stats(stats::StatsArgs),
    /// An HTTPS server with `skiff server`'s TLS and HTTP stack whose handler does nothing
    /// (`201` with a fixed pod): the transport baseline `skiff bench apiserver` spawns.
    #[command(hide = true)]
    EmptyHandler(empty_handler::EmptyHandlerArgs),
}

/// Runs one benchmark.
pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Store(args) => store::run(args).await,
        BenchCommand::Apiserver(args) => apiserver::run(args).await,
        BenchCommand::Deployment(args) => deployment::run(args).await,
        BenchCommand::Daemonset(args) => daemonset::run(args).await,
        BenchCommand::Jobs(args) => jobs::run(args).await,
        BenchCommand::Migrate(args) => migrate::run(args).await,
        BenchCommand::Audit(args) => audit::run(args).await,
        BenchCommand::Hpa(args) => hpa::run(args).await,
        BenchCommand::Scheduler => {
            use skiff_scheduler::bench::{BenchCase, BenchOptions, bench_scheduling};
            for case in BenchCase::all() {
                println!("{}", bench_scheduling(BenchOptions::scheduler_perf(case)).await);
            }
            Ok(())
        }
        BenchCommand::Podstartup(args) => podstartup::run(args).await,
        BenchCommand::Statefulset(args) => statefulset::run(args).await,
        BenchCommand::Authorization(args) => authorization::run(args).await,
        BenchCommand::Dns(args) => dns::run(args).await,
        BenchCommand::EmptyHandler(args) => empty_handler::run(args).await,
        BenchCommand::Proxy(args) => proxy::run(args).await,
        BenchCommand::Vap(args) => vap::run(args).await,
        BenchCommand::Netpol(args) => netpol::run(args).await,
        BenchCommand::Scale(args) => scale::run(args).await,
        BenchCommand::Stats(args) => stats::run(args).await,
    }
}
