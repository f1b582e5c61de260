//! `skiff server`: the control plane and a local node in one process.
//!
//! Opens the store (embedded SQLite under the data directory, or etcd with
//! `--datastore-endpoint`), starts the API server ([`skiff_apiserver::ApiServer`]) and, once it
//! is ready, every in-process component from [`components`] with its own `kube::Client`. SIGTERM
//! or SIGINT shuts down gracefully: components stop, watches end, in-flight requests finish.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::future::BoxFuture;
use skiff_apiserver::{ApiServer, Config};
use skiff_store::Backend;

/// Flags of `skiff server` (names as k3s users know them).
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// Directory for the database, certificates and kubeconfig (default: /var/lib/skiff for
    /// root, else $XDG_DATA_HOME/skiff or ~/.local/share/skiff).
    #[arg(long, short = 'd', env = "SKIFF_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// HTTPS port of the API server.
    #[arg(long, default_value_t = 6443)]
    pub https_listen_port: u16,
    /// Address the API server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// The datastore: etcd (`--datastore-endpoint`, `--etcd-*file`) or the embedded store.
    #[command(flatten)]
    pub datastore: crate::datastore::DatastoreArgs,
    /// Where to write the admin kubeconfig (default DATA_DIR/kubeconfig.yaml), mode 0600.
    #[arg(long, env = "SKIFF_KUBECONFIG_OUTPUT")]
    pub write_kubeconfig: Option<PathBuf>,
    /// Run only the control plane: no local node (kubelet).
    #[arg(long)]
    pub disable_agent: bool,
    /// The local node does not program Service rules (k3s's flag): no node proxy.
    #[arg(long)]
    pub disable_kube_proxy: bool,
    /// The local node does not enforce NetworkPolicies (k3s's flag).
    #[arg(long)]
    pub disable_network_policy: bool,
    /// Register N simulated nodes (no containers) for scheduling experiments.
    #[arg(long, default_value_t = 0)]
    pub simulated_nodes: u32,
    /// How often the in-process metrics-server scrapes every node's resource metrics for
    /// `metrics.k8s.io` (`kubectl top`, HorizontalPodAutoscalers); metrics-server's flag, 15 s
    /// by default. `0` does not serve `metrics.k8s.io`.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub metric_resolution: Duration,
    /// Extra subject alternative names (host names or IPs) for the serving certificate.
    #[arg(long = "tls-san")]
    pub tls_san: Vec<String>,
    /// How often the store is compacted (kube-apiserver's flag), e.g. `5m`, `30s`; `0`
    /// disables compaction.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub etcd_compaction_interval: Duration,
    /// Read-only requests the API server serves at once; beyond that it answers 429 (watches
    /// and other long-running requests excluded; 0: no limit). kube-apiserver's flag.
    #[arg(long, default_value_t = skiff_apiserver::filters::flowcontrol::DEFAULT_MAX_REQUESTS_INFLIGHT)]
    pub max_requests_inflight: usize,
    /// Mutating requests the API server serves at once; beyond that it answers 429 (0: no
    /// limit). kube-apiserver's flag.
    #[arg(long, default_value_t = skiff_apiserver::filters::flowcontrol::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    pub max_mutating_requests_inflight: usize,
    /// How long a node may miss heartbeats before the node lifecycle controller marks it
    /// Unknown and taints it (kube-controller-manager's flag), e.g. `40s`. Must exceed the
    /// nodes' 10 s lease renew interval.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    pub node_monitor_grace_period: Duration,
    /// How often the horizontal pod autoscaler syncs each HPA (kube-controller-manager's
    /// flag), e.g. `15s`.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_sync_period: Duration,
    /// The scale-down stabilization window of HPAs that set none in `spec.behavior`
    /// (kube-controller-manager's flag), e.g. `5m`.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub horizontal_pod_autoscaler_downscale_stabilization: Duration,
    /// Terminated pods (Succeeded or Failed) kept before pod GC deletes the oldest
    /// (kube-controller-manager's flag); 0 or less keeps them all.
    #[arg(long, default_value_t = skiff_controllers::podgc::DEFAULT_TERMINATED_POD_GC_THRESHOLD, allow_negative_numbers = true)]
    pub terminated_pod_gc_threshold: i32,
    /// Pod network of the cluster (k3s's flag). The local node's pod CIDR is the first /24 of
    /// it (or the range itself when it is /24 or smaller).
    #[arg(long, default_value = "10.42.0.0/16", value_parser = parse_ipv4_cidr)]
    pub cluster_cidr: String,
    /// Service network (k3s's flag): Services get their ClusterIPs from it; its first address
    /// is the `kubernetes` Service's.
    #[arg(long, default_value = skiff_apiserver::registry::core::service::ranges::DEFAULT_SERVICE_CIDR, value_parser = parse_service_cidr)]
    pub service_cluster_ip_range: String,
    /// Ports NodePort and LoadBalancer Services get their node ports from (kube-apiserver's
    /// flag), `FIRST-LAST`.
    #[arg(long, default_value = skiff_apiserver::registry::core::service::ranges::DEFAULT_NODE_PORT_RANGE, value_parser = parse_node_port_range)]
    pub service_node_port_range: String,
    /// The cluster DNS's address (k3s's flag): the `kube-system/kube-dns` Service's ClusterIP,
    /// in the service range, which the local node writes as its pods' nameserver.
    #[arg(long, default_value = skiff_apiserver::controlplane::kubedns::DEFAULT_CLUSTER_DNS)]
    pub cluster_dns: IpAddr,
    /// The cluster's DNS domain (k3s's flag): Services resolve as `svc.ns.svc.DOMAIN`.
    #[arg(long, default_value = skiff_apiserver::controlplane::kubedns::DEFAULT_CLUSTER_DOMAIN)]
    pub cluster_domain: String,
    /// The port the cluster DNS server answers on (UDP and TCP) at the advertised address,
    /// behind the `kube-dns` Service. Default: 53 when running as root and 53 is free there,
    /// else a free port.
    #[arg(long)]
    pub cluster_dns_port: Option<u16>,
    /// The resolv.conf whose nameservers the cluster DNS forwards other names to and that the
    /// local node's dnsPolicy Default pods inherit (the kubelet's and k3s's flag; default:
    /// /etc/resolv.conf for the DNS server; for pods the same, or systemd-resolved's upstream
    /// list when /etc/resolv.conf names only a local stub).
    #[arg(long)]
    pub resolv_conf: Option<PathBuf>,
    /// The address published in the `kubernetes` Service's endpoints (kube-apiserver's flag;
    /// default: the bind address, or this host's default-route address).
    #[arg(long)]
    pub advertise_address: Option<IpAddr>,
    /// An `apiserver.config.k8s.io/v1` `EncryptionConfiguration` file: the resources whose
    /// stored values are encrypted at rest and the providers (aescbc, aesgcm, secretbox,
    /// identity) in order, as kube-apiserver's flag.
    #[arg(long)]
    pub encryption_provider_config: Option<PathBuf>,
    /// An `audit.k8s.io/v1` Policy file: which requests are recorded in the audit log and at
    /// which level (kube-apiserver's flag). Needs `--audit-log-path`.
    #[arg(long, requires = "audit_log_path")]
    pub audit_policy_file: Option<PathBuf>,
    /// Where audit events are written as JSON lines (`-`: standard output; kube-apiserver's flag).
    #[arg(long, requires = "audit_policy_file")]
    pub audit_log_path: Option<PathBuf>,
    /// Megabytes an audit log file grows to before it is rotated (0: never).
    #[arg(long, default_value_t = 100)]
    pub audit_log_maxsize: u64,
    /// Rotated audit log files kept (0: no limit by count).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxbackup: usize,
    /// Days a rotated audit log file is kept (0: no limit by age).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxage: u64,
    /// Audit events queued for the log writer before new ones are dropped (and counted).
    #[arg(long, default_value_t = 10_000)]
    pub audit_log_batch_buffer_size: usize,
    /// The cluster's join token (k3s's `--token`). On a datastore that already holds a cluster
    /// (another server's, on the same etcd) it must be that cluster's: the server then adopts its
    /// CA and service-account key and serves the same cluster. On an empty datastore it becomes
    /// the new cluster's token. Default: DATA_DIR/token, created on first start.
    #[arg(long, env = "SKIFF_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Static bearer tokens in kube-apiserver's CSV format (`token,user,uid,"group1,group2"`).
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Let requests without credentials reach /healthz, /livez, /readyz and /version as
    /// `system:anonymous` (`--anonymous-auth=false`: 401 everywhere). kube-apiserver's flag.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// `iss` of the service-account tokens the server signs (kube-apiserver's flag).
    #[arg(long, default_value = skiff_auth::authn::serviceaccount::DEFAULT_ISSUER)]
    pub service_account_issuer: String,
    /// Audiences service-account tokens must carry to authenticate (default: the issuer).
    #[arg(long, value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// Authorization modes (kube-apiserver's flag): `Node,RBAC` (the Node authorizer limits
    /// each kubelet to its own Node, Lease, pods and the objects they use; RBAC decides the
    /// rest), `RBAC` (nodes get only what RBAC binds to them) or `AlwaysAllow` (every
    /// authenticated request is allowed; benchmarks and single-user setups only).
    #[arg(long, value_delimiter = ',', default_value = "Node,RBAC")]
    pub authorization_mode: Vec<String>,
    /// Admission plugins to run besides the default ones, by kube-apiserver's names (all of
    /// skiff's plugins are on by default; other known kube names are accepted and ignored).
    #[arg(long, value_delimiter = ',')]
    pub enable_admission_plugins: Vec<String>,
    /// Admission plugins to turn off, by kube-apiserver's names: NamespaceLifecycle,
    /// LimitRanger, ServiceAccount, NodeRestriction, Priority, DefaultTolerationSeconds,
    /// PodSecurity, MutatingAdmissionWebhook, ValidatingAdmissionPolicy, ValidatingAdmissionWebhook,
    /// ResourceQuota.
    #[arg(long, value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,
    /// `tolerationSeconds` of the `node.kubernetes.io/not-ready:NoExecute` toleration the
    /// DefaultTolerationSeconds admission plugin adds to every pod that has none
    /// (kube-apiserver's flag).
    #[arg(long, default_value_t = skiff_apiserver::filters::authorization::DEFAULT_TOLERATION_SECONDS)]
    pub default_not_ready_toleration_seconds: i64,
    /// `tolerationSeconds` of the `node.kubernetes.io/unreachable:NoExecute` toleration the
    /// DefaultTolerationSeconds admission plugin adds to every pod that has none
    /// (kube-apiserver's flag).
    #[arg(long, default_value_t = skiff_apiserver::filters::authorization::DEFAULT_TOLERATION_SECONDS)]
    pub default_unreachable_toleration_seconds: i64,
    /// A `kubescheduler.config.k8s.io/v1` KubeSchedulerConfiguration file for the scheduler
    /// (kube-scheduler's `--config`): profiles chosen by a pod's `spec.schedulerName`, each with
    /// its plugins, weights and plugin args, `parallelism`, `percentageOfNodesToScore` and HTTP
    /// `extenders`. Checked at start: the server refuses to start on an invalid file.
    #[arg(long)]
    pub scheduler_config: Option<PathBuf>,
    /// Log verbosity and format (`-v`, `--vmodule`, `--logging-format`).
    #[command(flatten)]
    pub logging: crate::logging::LoggingArgs,
}

/// Checks an IPv4 CIDR such as `10.42.0.0/16`.
pub fn parse_ipv4_cidr(s: &str) -> Result<String, String> {
    let (addr, prefix) = s.split_once('/').ok_or_else(|| format!("invalid CIDR {s:?}: want ADDRESS/PREFIX"))?;
    addr.parse::<std::net::Ipv4Addr>().map_err(|e| format!("invalid CIDR {s:?}: {e}"))?;
    match prefix.parse::<u8>() {
        Ok(p) if p <= 30 => Ok(s.to_string()),
        _ => Err(format!("invalid CIDR {s:?}: the prefix must be 0..=30")),
    }
}

/// Checks `--service-cluster-ip-range`.
pub fn parse_service_cidr(s: &str) -> Result<String, String> {
    skiff_apiserver::registry::core::service::ranges::ServiceIpRange::parse(s).map(|_| s.to_string())
}

/// Checks `--service-node-port-range`.
pub fn parse_node_port_range(s: &str) -> Result<String, String> {
    skiff_apiserver::registry::core::service::ranges::NodePortRange::parse(s).map(|_| s.to_string())
}

/// The pod CIDR of the local node: the first /24 of the cluster CIDR, or the cluster CIDR
/// itself when its prefix is 24 or longer. Expects a CIDR accepted by [`parse_ipv4_cidr`].
pub fn local_node_pod_cidr(cluster_cidr: &str) -> String {
    let Some((addr, prefix)) = cluster_cidr.split_once('/') else { return cluster_cidr.to_string() };
    let (Ok(addr), Ok(prefix)) = (addr.parse::<std::net::Ipv4Addr>(), prefix.parse::<u32>()) else {
        return cluster_cidr.to_string();
    };
    if prefix >= 24 {
        return cluster_cidr.to_string();
    }
    let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
    let network = std::net::Ipv4Addr::from(u32::from(addr) & mask);
    format!("{network}/24")
}

/// Parses `250ms`, `30s`, `5m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit() && c != '.').map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?} (use ms, s, m or h)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// The default data directory: `/var/lib/skiff` for root, else the XDG data directory.
pub fn default_data_dir() -> PathBuf {
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/skiff");
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return PathBuf::from(x).join("skiff");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".local/share/skiff"),
        None => PathBuf::from(".skiff"),
    }
}

/// What an in-process component gets: an admin client and the server's flags.
#[derive(Clone)]
pub struct ComponentContext {
    /// A client authenticated as `system:admin` over loopback HTTPS.
    pub client: kube::Client,
    /// The server's flags (e.g. `--simulated-nodes`, `--disable-agent`).
    pub args: ServerArgs,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The cluster CA certificate (PEM), e.g. for the kubelet to verify the API server's
    /// kubelet-client certificate.
    pub ca_pem: String,
    /// Flips to `true` on shutdown; components should return soon after.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The API server's metrics registry: families registered here are served on its
    /// `/metrics` next to the API server's own.
    pub metrics: skiff_apiserver::metrics::SharedRegistry,
    /// The scheduler's configuration (`--scheduler-config`, already checked), or the default
    /// profile.
    pub scheduler_config: skiff_scheduler::SchedulerConfig,
}

/// A component run inside `skiff server` once the API server is ready.
pub type Component = Box<dyn FnOnce(ComponentContext) -> BoxFuture<'static, Result<()>> + Send>;

/// The components `skiff server` runs (controllers, scheduler, kubelet), by name. The API
/// server is not one of them: it runs first and the others are its clients.
pub fn components(args: &ServerArgs) -> Vec<(&'static str, Component)> {
    crate::components::all(args)
}

async fn open_store(args: &ServerArgs, data_dir: &std::path::Path) -> Result<Arc<dyn Backend>> {
    let opts = skiff_store::Options {
        compaction_interval: (!args.etcd_compaction_interval.is_zero()).then_some(args.etcd_compaction_interval),
        ..Default::default()
    };
    // etcd may still be starting (e.g. started by the same script): retried for a minute.
    args.datastore.open(data_dir, opts, Duration::from_secs(60)).await
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

/// Runs the server until SIGTERM/SIGINT.
pub async fn run(args: ServerArgs) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let started = std::time::Instant::now();
    let data_dir = args.data_dir.clone().unwrap_or_else(default_data_dir);
    // Absolute, since the node hands paths under it to containerd and its shims.
    let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating the data directory {}", data_dir.display()))?;
    // Configuration files are checked before anything starts: an invalid one stops the server
    // here, naming the file, the field and the problem, rather than running half-configured.
    let scheduler_config = match &args.scheduler_config {
        Some(path) => skiff_scheduler::SchedulerConfig::from_file(path)?,
        None => skiff_scheduler::SchedulerConfig::default(),
    };
    let pid_file = crate::pidfile::claim(&data_dir)?;
    let mut store = open_store(&args, &data_dir).await?;
    if let Some(path) = &args.encryption_provider_config {
        let rules = skiff_apiserver::storage::value::encryptionconfig::load(path)?;
        store = Arc::new(skiff_apiserver::storage::value::TransformingBackend::new(store, rules));
    }
    let mut config = Config::new(&data_dir);
    config.bind_address = args.bind_address;
    config.port = args.https_listen_port;
    config.kubeconfig_path = args.write_kubeconfig.clone();
    config.extra_sans = args.tls_san.clone();
    config.rbac = true;
    config.security.authn.token_auth_file = args.token_auth_file.clone();
    config.security.authn.anonymous_auth = args.anonymous_auth;
    config.security.authn.service_account_issuer = args.service_account_issuer.clone();
    config.security.authn.api_audiences = args.api_audiences.clone();
    config.security.authorization_mode =
        skiff_apiserver::filters::authorization::AuthorizationMode::parse(&args.authorization_mode)
            .map_err(anyhow::Error::msg)?;
    config.security.enabled_admission_plugins = skiff_apiserver::admission::chain::enabled_plugins(
        &args.enable_admission_plugins,
        &args.disable_admission_plugins,
    )
    .map_err(anyhow::Error::msg)?;
    config.security.default_not_ready_toleration_seconds = args.default_not_ready_toleration_seconds;
    config.security.default_unreachable_toleration_seconds = args.default_unreachable_toleration_seconds;
    config.services = skiff_apiserver::registry::core::service::alloc::ServiceAllocator::new(
        skiff_apiserver::registry::core::service::ranges::ServiceIpRange::parse(&args.service_cluster_ip_range)
            .map_err(anyhow::Error::msg)?,
        skiff_apiserver::registry::core::service::ranges::NodePortRange::parse(&args.service_node_port_range)
            .map_err(anyhow::Error::msg)?,
    );
    config.advertise_address = args.advertise_address;
    config.token = args.token.clone();
    let cluster_dns = crate::components::ClusterDns::bind(&args).await?;
    config.cluster_dns = Some(cluster_dns.endpoint());
    config.audit = args.audit_policy_file.as_ref().map(|policy| skiff_apiserver::audit::AuditOptions {
        policy_file: policy.clone(),
        log: skiff_apiserver::audit::log::LogOptions {
            path: args.audit_log_path.clone().unwrap_or_else(|| PathBuf::from("-")),
            max_size_mb: args.audit_log_maxsize,
            max_backups: args.audit_log_maxbackup,
            max_age_days: args.audit_log_maxage,
            buffer: args.audit_log_batch_buffer_size,
        },
    });
    config.metric_resolution = (!args.metric_resolution.is_zero()).then_some(args.metric_resolution);
    config.max_requests_inflight = args.max_requests_inflight;
    config.max_mutating_requests_inflight = args.max_mutating_requests_inflight;
    let api = ApiServer::start(config, store).await?;
    api.wait_ready().await;
    tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, url = api.url(), "API server ready");
    eprintln!("skiff server is ready at {}\nexport KUBECONFIG={}", api.url(), api.kubeconfig_path().display());
    eprintln!(
        "to join another machine: skiff agent --server https://<this host>:{} --token-file <copy of {}>",
        api.local_addr().port(),
        skiff_apiserver::controlplane::join::token_path(&data_dir).display()
    );

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    // One multiplexed connection for the whole control plane; nodes keep kube's default
    // HTTP/1.1 client, as they would out of process.
    let control_plane = component_client(&api).await.context("building the control plane's client")?;
    for (name, component) in components(&args) {
        let client = if crate::components::NODE_COMPONENTS.contains(&name) {
            api.client().await.with_context(|| format!("building the client of {name}"))?
        } else {
            control_plane.clone()
        };
        let ctx = ComponentContext {
            client,
            args: args.clone(),
            data_dir: data_dir.clone(),
            ca_pem: api.pki().ca.cert_pem.clone(),
            shutdown: stop_rx.clone(),
            metrics: api.state().metrics.registry().clone(),
            scheduler_config: scheduler_config.clone(),
        };
        tasks.push((
            name,
            tokio::spawn(async move {
                if let Err(e) = component(ctx).await {
                    tracing::error!(component = name, error = %format!("{e:#}"), "component failed");
                }
            }),
        ));
    }

    tasks.push(("cluster-dns", tokio::spawn(cluster_dns.run(control_plane.clone(), stop_rx.clone()))));

    shutdown_signal().await;
    let stopping = std::time::Instant::now();
    tracing::info!("shutting down");
    stop_components(&stop_tx, tasks, COMPONENT_STOP_GRACE).await;
    // Stop accepting, end every watch, let in-flight requests (writes) finish, then close the
    // store.
    api.shutdown(API_STOP_GRACE).await;
    crate::pidfile::release(&pid_file);
    tracing::info!(elapsed_ms = stopping.elapsed().as_millis() as u64, "stopped");
    Ok(())
}

/// The `kube::Client` of the in-process control-plane components (controller manager,
/// scheduler, node lifecycle and IPAM controllers): the admin identity (client certificate)
/// and base URL of [`ApiServer::client`] and kube's retry policy for 429/503/504, but HTTP/2
/// with prior knowledge, so that every request and watch of those components is a stream of
/// one TLS connection. kube's default client speaks HTTP/1.1 and holds one connection (TLS
/// state and read/write buffers at both ends) per open watch: ≈ 50 for the informers,
/// ≈ 4 MB of the idle server's heap.
///
/// Flow control: a stream may buffer up to 2 MiB (hyper's default stream window) that its
/// reader has not consumed yet; the connection window is as large as every open stream's, so a
/// watch nobody reads cannot stall the others (as separate TCP connections would not).
///
/// # Errors
/// The kubeconfig the server generated cannot be turned into a client configuration.
pub async fn component_client(api: &ApiServer) -> Result<kube::Client> {
    use kube::client::ConfigExt as _;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&api.pki().kubeconfig(api.url()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let connector = config.rustls_https_connector()?;
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .http2_initial_stream_window_size(COMPONENT_STREAM_WINDOW)
        .http2_initial_connection_window_size(COMPONENT_CONNECTION_WINDOW)
        .build::<_, kube::client::Body>(connector);
    let retry = tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry());
    let boxed_errors = tower::util::MapErrLayer::new(tower::BoxError::from);
    Ok(kube::client::ClientBuilder::new(http, config.default_namespace.clone())
        .with_layer(&boxed_errors)
        .with_layer(&config.extra_headers_layer()?)
        .with_layer(&retry)
        .with_layer(&config.base_uri_layer())
        .build())
}

/// Unread bytes one stream of [`component_client`]'s connection may buffer (hyper's default).
const COMPONENT_STREAM_WINDOW: u32 = 2 << 20;
/// The connection-level window of [`component_client`]: room for 1,023 full stream windows
/// (HTTP/2's maximum, 2^31 - 1), a credit, not memory reserved up front.
const COMPONENT_CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// How long components that observe [`ComponentContext::shutdown`] get to return (e.g. the
/// controller manager releasing its Lease) before they are stopped by force.
pub const COMPONENT_STOP_GRACE: Duration = Duration::from_millis(1500);
/// How long in-flight API requests get to finish once the server stops accepting.
pub const API_STOP_GRACE: Duration = Duration::from_secs(3);

/// Tells every component to stop, waits until they return or `grace` has passed (one shared
/// deadline, not one per component), then aborts the ones still running: dropping a
/// component's future ends its requests and watches, so nothing of it outlives the API server.
pub async fn stop_components(
    stop: &tokio::sync::watch::Sender<bool>,
    tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
    grace: Duration,
) {
    let _ = stop.send(true);
    let deadline = tokio::time::Instant::now() + grace;
    for (name, mut task) in tasks {
        if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
            task.abort();
            let _ = task.await;
            tracing::debug!(component = name, "stopped by force after {grace:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn components_that_ignore_shutdown_are_aborted_after_the_grace() {
        let (stop, rx) = tokio::sync::watch::channel(false);
        let mut observed = rx.clone();
        let polite = tokio::spawn(async move {
            let _ = observed.wait_for(|s| *s).await;
        });
        let polite_done = polite.abort_handle();
        let deaf = || tokio::spawn(std::future::pending::<()>());
        let (a, b) = (deaf(), deaf());
        let (abort_a, abort_b) = (a.abort_handle(), b.abort_handle());
        stop_components(&stop, vec![("polite", polite), ("deaf-a", a), ("deaf-b", b)], Duration::from_millis(50)).await;
        assert!(polite_done.is_finished());
        assert!(abort_a.is_finished() && abort_b.is_finished());
        drop(rx);
    }

    #[tokio::test]
    async fn the_control_plane_client_multiplexes_watches_and_requests_over_http2() {
        use futures::StreamExt as _;
        use k8s_openapi::api::core::v1::ConfigMap;
        let opts = skiff_store::Options { compaction_interval: None, ..Default::default() };
        let h = skiff_apiserver::testing::TestApiServer::start_with_store(opts, |_| {}).await;
        let (_dir, api) = (h.dir, h.server);
        let client = component_client(&api).await.unwrap();

        let version = client
            .send(hyper::Request::get("/version").body(kube::client::Body::from(Vec::new())).unwrap())
            .await
            .unwrap();
        assert_eq!(version.version(), hyper::Version::HTTP_2);
        // Watches stay open while other requests (and other watches) go through.
        let maps: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "default");
        let mut watches = Vec::new();
        for _ in 0..8 {
            watches.push(maps.watch(&Default::default(), "0").await.unwrap().boxed());
        }
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta { name: Some("seen".into()), ..Default::default() },
            ..Default::default()
        };
        maps.create(&Default::default(), &cm).await.unwrap();
        for watch in &mut watches {
            let event = tokio::time::timeout(Duration::from_secs(30), watch.next()).await.unwrap().unwrap().unwrap();
            assert!(matches!(event, kube::api::WatchEvent::Added(c) if c.metadata.name.as_deref() == Some("seen")));
        }
        assert_eq!(maps.get("seen").await.unwrap().metadata.name.as_deref(), Some("seen"));
        api.shutdown(Duration::from_secs(1)).await;
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("5y").is_err());
    }

    #[test]
    fn the_local_node_gets_the_first_24_of_the_cluster_cidr() {
        assert_eq!(local_node_pod_cidr("10.42.0.0/16"), "10.42.0.0/24");
        assert_eq!(local_node_pod_cidr("10.42.7.0/24"), "10.42.7.0/24");
        assert_eq!(local_node_pod_cidr("10.42.7.128/25"), "10.42.7.128/25");
        assert_eq!(local_node_pod_cidr("10.43.9.9/12"), "10.32.0.0/24");
        assert!(parse_ipv4_cidr("10.42.0.0").is_err());
        assert!(parse_ipv4_cidr("10.42.0.0/33").is_err());
        assert!(parse_ipv4_cidr("300.1.1.1/8").is_err());
    }
}
