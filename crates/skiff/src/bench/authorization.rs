//! `skiff bench authorization`: RBAC decision time (1,000 roles × 1,000 bindings, target
//! p99 < 5 µs) and, with `--api`, what the whole security pipeline costs an API create: pod
//! creates/s through two `skiff server`s started side by side — one with authentication, RBAC
//! and every admission plugin on, one with `--authorization-mode=AlwaysAllow` and every
//! admission plugin disabled (`--disable-admission-plugins`) — and the ratio between them.
//!
//! Both servers authenticate the bench clients the same way (a bearer token from
//! `--token-auth-file`, user `bench` in group `bench`, not `system:masters`, so RBAC really
//! evaluates bindings on the "on" server: the group is bound to the `edit` ClusterRole in the
//! bench namespace). Authentication itself cannot be turned off in Kubernetes; its cost is the
//! token lookup, the same on both sides. The rounds alternate off/on so machine load drifts
//! hit both alike, and the servers' CPU time per create (from /proc/PID/stat) is reported next
//! to the wall-clock rates as a load-independent figure.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use super::apiserver::{create_namespace, create_pods};
use super::harness::{ServerProcess, load_average};

/// Flags of `skiff bench authorization`.
#[derive(clap::Args, Debug)]
pub struct AuthorizationArgs {
    /// Also measure API create throughput with the security pipeline on vs off.
    #[arg(long)]
    api: bool,
    /// Pods created per server and round (with `--api`).
    #[arg(long, default_value_t = 2000)]
    creates: usize,
    /// Concurrent clients (with `--api`).
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Rounds per server, alternating off/on (with `--api`).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Directory for the servers' data directories (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// The bench clients' bearer token, user and group (a `--token-auth-file` line).
const TOKEN: &str = "skiff-bench-authorization-token";
const USER: &str = "bench";
const GROUP: &str = "bench";

/// Flags of the server without the security pipeline.
const OFF_FLAGS: &[&str] = &[
    "--authorization-mode=AlwaysAllow",
    "--disable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,Priority,DefaultTolerationSeconds,PodSecurity,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook,ResourceQuota",
];

/// Runs the benchmark and prints its report.
pub async fn run(args: AuthorizationArgs) -> anyhow::Result<()> {
    let report = tokio::task::spawn_blocking(|| skiff_auth::rbac::bench::bench_authorization(1000, 1000)).await?;
    println!("{report} (target p99 < 5.00 µs)");
    if args.api {
        api_on_vs_off(&args).await?;
    }
    Ok(())
}

/// One server of the comparison.
struct Side {
    name: &'static str,
    server: ServerProcess,
    clients: Vec<kube::Client>,
    rates: Vec<f64>,
    cpu_per_create: Vec<Duration>,
}

async fn api_on_vs_off(args: &AuthorizationArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = match &args.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let token_flag = token_file_flag(base.path())?;
    let mut on_flags = vec![token_flag.clone()];
    on_flags.push("--authorization-mode=RBAC".into());
    let mut off_flags = vec![token_flag];
    off_flags.extend(OFF_FLAGS.iter().map(|f| f.to_string()));
    let compare = Comparison { creates: args.creates, clients: args.clients, rounds: args.rounds };
    compare.run("API creates with authn+authz+admission on vs off", base.path(), &off_flags, &on_flags).await
}

/// Writes the bench token file into `dir` and returns the `--token-auth-file` flag naming it.
pub(super) fn token_file_flag(dir: &Path) -> anyhow::Result<String> {
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, format!("{TOKEN},{USER},bench-uid,\"{GROUP}\"\n"))?;
    Ok(format!("--token-auth-file={}", tokens.display()))
}

/// Pod creates/s through two `skiff server`s side by side, "off" and "on", rounds alternating.
pub(super) struct Comparison {
    /// Pods created per server and round.
    pub creates: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// Rounds per server.
    pub rounds: usize,
}

impl Comparison {
    /// Starts both servers under `base` with their flags (each must include
    /// [`token_file_flag`]) and prints each round and the medians with their ratio.
    pub(super) async fn run(
        &self,
        title: &str,
        base: &Path,
        off_flags: &[String],
        on_flags: &[String],
    ) -> anyhow::Result<()> {
        let args = self;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut sides = Vec::new();
        for (name, flags) in [("off", off_flags), ("on", on_flags)] {
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let mut server = ServerProcess::spawn(&base.join(name), &flags)?;
            let (_, admin) = server.wait_ready(Duration::from_secs(120)).await?;
            let mut clients = Vec::with_capacity(args.clients);
            for _ in 0..args.clients.max(1) {
                clients.push(token_client(&server.kubeconfig()).await?);
            }
            sides.push((Side { name, server, clients, rates: Vec::new(), cpu_per_create: Vec::new() }, admin));
        }
        println!(
            "{title}: {} clients, {} pods per server and round, {} rounds, load average {}",
            args.clients,
            args.creates,
            args.rounds,
            load_average()
        );
        for round in 0..args.rounds {
            for (side, admin) in &mut sides {
                let ns = format!("bench-{round}");
                create_namespace(admin, &ns).await?;
                grant_edit(admin, &ns).await?;
                wait_until_allowed(&side.clients[0], &ns).await?;
                let cpu_before = cpu_time(side.server.pid())?;
                let (elapsed, _, _) = create_pods(&side.clients, &ns, args.creates)
                    .await
                    .with_context(|| format!("creates on the {} server", side.name))?;
                let cpu = cpu_time(side.server.pid())?.saturating_sub(cpu_before);
                let rate = args.creates as f64 / elapsed.as_secs_f64();
                println!(
                    "  round {round} {:>3}: {rate:>8.0} creates/s, server CPU {:.0} µs/create (load average {})",
                    side.name,
                    cpu.as_secs_f64() * 1e6 / args.creates as f64,
                    load_average()
                );
                side.rates.push(rate);
                side.cpu_per_create.push(cpu / args.creates as u32);
            }
        }
        // The median (the mean of the middle two for an even count).
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => 0.0,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            }
        };
        let secs = |v: &[Duration]| v.iter().map(Duration::as_secs_f64).collect::<Vec<_>>();
        let (off, on) = (&sides[0].0, &sides[1].0);
        let (off_rate, on_rate) = (median(&off.rates), median(&on.rates));
        let (off_cpu, on_cpu) = (median(&secs(&off.cpu_per_create)), median(&secs(&on.cpu_per_create)));
        println!(
            "  median: off {off_rate:.0} creates/s, on {on_rate:.0} creates/s → on/off {:.2}; server CPU per create off {:.0} µs, on {:.0} µs → on/off {:.2}",
            on_rate / off_rate.max(f64::MIN_POSITIVE),
            off_cpu * 1e6,
            on_cpu * 1e6,
            on_cpu / off_cpu.max(f64::MIN_POSITIVE)
        );
        Ok(())
    }
}

/// A client of the server whose admin kubeconfig is at `kubeconfig` that authenticates with
/// the bench bearer token instead of the admin certificate.
async fn token_client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.auth_info = kube::config::AuthInfo { token: Some(TOKEN.to_string().into()), ..Default::default() };
    Ok(kube::Client::try_from(config)?)
}

/// Binds the `edit` ClusterRole to the bench group in `namespace`.
async fn grant_edit(admin: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let binding = RoleBinding {
        metadata: ObjectMeta { name: Some("bench-edit".into()), ..Default::default() },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "edit".into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: GROUP.into(),
            namespace: None,
        }]),
    };
    Api::<RoleBinding>::namespaced(admin.clone(), namespace).create(&PostParams::default(), &binding).await?;
    Ok(())
}

/// Waits until the bench user may create pods in `namespace` (the RBAC snapshot follows the
/// store through a watch) and the namespace's default ServiceAccount exists, polling a
/// dry-run create.
async fn wait_until_allowed(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let api = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), namespace);
    let params = PostParams { dry_run: true, ..Default::default() };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&params, &super::apiserver::bench_pod("probe", None)).await {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() > deadline => {
                return Err(
                    anyhow::Error::new(e).context(format!("bench user still cannot create pods in {namespace}"))
                );
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// User + system CPU time of process `pid` (`utime` + `stime` of /proc/PID/stat).
fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    cpu_time_of_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat"))?)
}

/// Clock ticks per second of /proc's CPU times (Linux's `USER_HZ`, 100 on every architecture
/// skiff builds for).
const USER_HZ: u64 = 100;

/// `utime` + `stime` (fields 14 and 15) of a /proc/PID/stat line; the command name (field 2,
/// in parentheses) may itself contain spaces and parentheses.
fn cpu_time_of_stat(stat: &str) -> anyhow::Result<Duration> {
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("malformed /proc/PID/stat")?;
    // `rest` starts at field 3 (state): field n is at index n - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |n: usize| -> anyhow::Result<u64> {
        fields.get(n - 3).context("short /proc/PID/stat")?.parse().context("a CPU time in /proc/PID/stat")
    };
    Ok(Duration::from_millis((ticks(14)? + ticks(15)?) * 1000 / USER_HZ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_adds_user_and_system_ticks_after_the_command_name() {
        let stat = "4242 (skiff (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 9 0 1000 0 0";
        assert_eq!(cpu_time_of_stat(stat).unwrap(), Duration::from_millis(3800));
        assert!(cpu_time_of_stat("4242 (skiff) S 1").is_err());
        assert!(cpu_time(std::process::id()).is_ok());
    }
}
