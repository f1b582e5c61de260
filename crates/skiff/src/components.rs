//! The in-process components of `skiff server`, each a client of the API server with its own
//! `kube::Client`: the controller manager, the scheduler, the node lifecycle controller, the
//! local node agent (kubelet), simulated nodes and the cluster DNS ([`ClusterDns`]). Each could equally run as a separate process against any
//! Kubernetes-compatible API server.

use futures::FutureExt;

use crate::server::{Component, ComponentContext, ServerArgs};

/// The local node agent's component name.
pub const AGENT: &str = "agent";
/// The simulated nodes' component name.
pub const SIMULATED_NODES: &str = "simulated-nodes";
/// Components that act as nodes: they get their own HTTP/1.1 client, like a kubelet in its own
/// process, instead of the control plane's shared one (`server::component_client`).
pub const NODE_COMPONENTS: &[&str] = &[AGENT, SIMULATED_NODES];

/// Every component `skiff server` runs with these flags, by name.
pub fn all(args: &ServerArgs) -> Vec<(&'static str, Component)> {
    let mut list: Vec<(&'static str, Component)> = vec![
        ("controller-manager", Box::new(|ctx: ComponentContext| controller_manager(ctx).boxed())),
        ("scheduler", Box::new(|ctx: ComponentContext| scheduler(ctx).boxed())),
        ("node-lifecycle-controller", Box::new(|ctx: ComponentContext| node_lifecycle(ctx).boxed())),
        ("node-ipam-controller", Box::new(|ctx: ComponentContext| node_ipam(ctx).boxed())),
    ];
    if !args.disable_agent {
        list.push((AGENT, Box::new(|ctx: ComponentContext| agent(ctx).boxed())));
    }
    if args.simulated_nodes > 0 {
        list.push((SIMULATED_NODES, Box::new(|ctx: ComponentContext| simulated_nodes(ctx).boxed())));
    }
    list
}

/// kube-controller-manager's role: Deployment, ReplicaSet, disruption, pod GC, garbage collector, namespace,
/// ServiceAccount, resource quota, root CA certificate publisher (`kube-root-ca.crt` holds the
/// server's CA), ClusterRole aggregation and event TTL controllers (leader-elected).
///
/// Its Prometheus metrics (reconciles, errors, durations, workqueue) are served on the API
/// server's `/metrics`.
async fn controller_manager(ctx: ComponentContext) -> anyhow::Result<()> {
    // On shutdown the controllers stop and the Lease is released, so a restarted server (or
    // another one on the same store) takes over at once instead of after the lease duration.
    let mut stop = ctx.shutdown.clone();
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    // Registration happens here, synchronously; the lock is released before the manager runs.
    let config = skiff_controllers::ControllerManagerConfig {
        root_ca_pem: Some(ctx.ca_pem.clone()),
        terminated_pod_gc_threshold: ctx.args.terminated_pod_gc_threshold,
        hpa: skiff_controllers::podautoscaler::HpaConfig {
            sync_period: ctx.args.horizontal_pod_autoscaler_sync_period,
            downscale_stabilization: ctx.args.horizontal_pod_autoscaler_downscale_stabilization,
            ..Default::default()
        },
        ..Default::default()
    };
    let manager =
        skiff_controllers::run_controller_manager_until(ctx.client, config, &mut ctx.metrics.lock(), shutdown);
    manager.await
}

/// kube-scheduler's role: binds pending pods to nodes (leader-elected), with the profiles and
/// extenders of `--scheduler-config` or the default profile.
///
/// Its Prometheus metrics (`scheduler_schedule_attempts_total`, `scheduler_pending_pods`, ...)
/// are served on the API server's `/metrics`.
async fn scheduler(ctx: ComponentContext) -> anyhow::Result<()> {
    let metrics = skiff_scheduler::framework::metrics::SchedulerMetrics::default();
    // The registry lock is released at the end of this statement, before the scheduler runs.
    metrics.register(&mut ctx.metrics.lock());
    let config = ctx.scheduler_config.clone();
    let mut stop = ctx.shutdown.clone();
    tokio::select! {
        r = skiff_scheduler::scheduler::run_scheduler_with_metrics(ctx.client, config, metrics) => r,
        _ = stop.wait_for(|s| *s) => Ok(()),
    }
}

/// kube-controller-manager's node lifecycle controller: NotReady/Unknown, taints, eviction.
async fn node_lifecycle(ctx: ComponentContext) -> anyhow::Result<()> {
    let cfg = skiff_controllers::nodelifecycle::NodeLifecycleConfig {
        node_monitor_grace_period: ctx.args.node_monitor_grace_period,
        ..Default::default()
    };
    let mut stop = ctx.shutdown.clone();
    tokio::select! {
        r = skiff_controllers::nodelifecycle::run_node_lifecycle_controller(ctx.client, cfg) => r,
        _ = stop.wait_for(|s| *s) => Ok(()),
    }
}

/// kube-controller-manager's node IPAM controller (`--allocate-node-cidrs`): a /24 of
/// `--cluster-cidr` for every Node without `spec.podCIDR` (joined agents without `--pod-cidr`).
/// The local node's range (the first /24) is reserved for it.
async fn node_ipam(ctx: ComponentContext) -> anyhow::Result<()> {
    let mut cfg = skiff_controllers::nodeipam::NodeIpamConfig::new(&ctx.args.cluster_cidr);
    let prefix = ctx.args.cluster_cidr.split_once('/').and_then(|(_, p)| p.parse::<u8>().ok()).unwrap_or(24);
    cfg.node_cidr_mask_size = Some(prefix.max(24));
    if !ctx.args.disable_agent {
        cfg.reserved.push(crate::server::local_node_pod_cidr(&ctx.args.cluster_cidr));
    }
    let mut stop = ctx.shutdown.clone();
    tokio::select! {
        r = skiff_controllers::nodeipam::run_node_ipam_controller(ctx.client, cfg) => r,
        _ = stop.wait_for(|s| *s) => Ok(()),
    }
}

/// The local node: a kubelet running pods on a managed containerd.
async fn agent(ctx: ComponentContext) -> anyhow::Result<()> {
    let mut cfg = skiff_kubelet::AgentConfig::new(&ctx.data_dir);
    cfg.kubelet_client_ca_pem = Some(ctx.ca_pem.clone());
    cfg.pod_cidr = Some(crate::server::local_node_pod_cidr(&ctx.args.cluster_cidr));
    cfg.kube_proxy = !ctx.args.disable_kube_proxy;
    cfg.network_policy = !ctx.args.disable_network_policy;
    cfg.cluster_dns = vec![ctx.args.cluster_dns.to_string()];
    cfg.cluster_domain = ctx.args.cluster_domain.clone();
    if let Some(path) = &ctx.args.resolv_conf {
        cfg.resolv_conf = path.clone();
    }
    // On shutdown the agent future is dropped here, which stops the managed containerd while
    // the runtime still runs (pods keep running, as with the kubelet).
    let mut stop = ctx.shutdown.clone();
    tokio::select! {
        r = skiff_kubelet::run_agent(ctx.client, cfg) => r.map_err(Into::into),
        _ = stop.wait_for(|s| *s) => Ok(()),
    }
}

/// `--simulated-nodes N`: KWOK-style nodes whose pods run without containers.
async fn simulated_nodes(ctx: ComponentContext) -> anyhow::Result<()> {
    let cfg = skiff_kubelet::SimulatedNodesConfig {
        count: ctx.args.simulated_nodes as usize,
        network_policy: !ctx.args.disable_network_policy,
        ..Default::default()
    };
    let mut stop = ctx.shutdown.clone();
    tokio::select! {
        r = skiff_kubelet::run_simulated_nodes(ctx.client, cfg) => r.map_err(Into::into),
        _ = stop.wait_for(|s| *s) => Ok(()),
    }
}

/// The cluster DNS server (`skiff-dns`) of `skiff server`: bound before the API server starts,
/// since the `kube-system/kube-dns` endpoints the API server keeps name its port, and run
/// once the API serves, on its own Service and EndpointSlice informers. Agents run none: their
/// pods reach the server's through the `kube-dns` ClusterIP.
pub struct ClusterDns {
    server: skiff_dns::DnsServer,
    index: std::sync::Arc<parking_lot::RwLock<skiff_dns::RecordIndex>>,
    service_ip: std::net::IpAddr,
}

/// How many times a free port is tried for UDP and TCP together before giving up.
const FREE_PORT_ATTEMPTS: usize = 8;

impl ClusterDns {
    /// Checks `--cluster-dns` and `--cluster-domain` and binds UDP and TCP on the address the
    /// API server advertises, at `--cluster-dns-port`, or 53 when root and free, else a free
    /// port. Upstream resolvers are the nameservers of `--resolv-conf` (default the host's
    /// `/etc/resolv.conf`: a local stub resolver is reachable from the server).
    ///
    /// # Errors
    /// `--cluster-dns` outside `--service-cluster-ip-range`, an invalid `--cluster-domain`, or
    /// `--cluster-dns-port` not bindable.
    pub async fn bind(args: &ServerArgs) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        use skiff_apiserver::registry::core::service::ranges::ServiceIpRange;
        let range = ServiceIpRange::parse(&args.service_cluster_ip_range).map_err(anyhow::Error::msg)?;
        let in_range = match args.cluster_dns {
            std::net::IpAddr::V4(v4) => range.contains(v4),
            std::net::IpAddr::V6(_) => false,
        };
        anyhow::ensure!(
            in_range,
            "--cluster-dns {} is not in --service-cluster-ip-range {}",
            args.cluster_dns,
            args.service_cluster_ip_range
        );
        let index = skiff_dns::RecordIndex::new(&args.cluster_domain)
            .with_context(|| format!("--cluster-domain {:?} is not a domain name", args.cluster_domain))?;
        let index = std::sync::Arc::new(parking_lot::RwLock::new(index));
        let ip = skiff_apiserver::controlplane::kubernetesservice::advertise_address(
            args.advertise_address,
            args.bind_address,
        );
        let resolv_conf = args.resolv_conf.clone().unwrap_or_else(|| "/etc/resolv.conf".into());
        let upstreams = skiff_dns::read_upstreams(&resolv_conf);
        let bind = |port: u16| skiff_dns::DnsServer::bind((ip, port).into(), index.clone(), upstreams.clone());
        let server = match args.cluster_dns_port {
            Some(port) if port != 0 => {
                bind(port).await.with_context(|| format!("binding the cluster DNS on {ip} port {port}"))?
            }
            _ => {
                let standard = match args.cluster_dns_port {
                    None if rustix::process::geteuid().is_root() => bind(53).await.ok(),
                    _ => None,
                };
                match standard {
                    Some(server) => server,
                    None => {
                        // A free TCP port may be taken for UDP: try a few.
                        let mut attempt = 0;
                        loop {
                            attempt += 1;
                            match bind(0).await {
                                Ok(server) => break server,
                                Err(e) if attempt >= FREE_PORT_ATTEMPTS => {
                                    return Err(e).with_context(|| format!("binding the cluster DNS on {ip}"));
                                }
                                Err(_) => {}
                            }
                        }
                    }
                }
            }
        };
        let addr = server.local_addr()?;
        tracing::info!(%addr, service_ip = %args.cluster_dns, domain = %args.cluster_domain, "cluster DNS bound");
        Ok(Self { server, index, service_ip: args.cluster_dns })
    }

    /// What the API server publishes as `kube-dns`: its ClusterIP and this server's port.
    pub fn endpoint(&self) -> skiff_apiserver::controlplane::kubedns::ClusterDns {
        let port = self.server.local_addr().map_or(53, |a| a.port());
        skiff_apiserver::controlplane::kubedns::ClusterDns { service_ip: self.service_ip, port }
    }

    /// Fills the index from Service and EndpointSlice informers on `client`, then answers until
    /// `shutdown` flips. Queries are answered only once both caches are synced (CoreDNS's
    /// kubernetes plugin waits likewise): an empty index would say NXDOMAIN for names that
    /// exist. Queries sent meanwhile wait in the sockets' buffers.
    pub async fn run(self, client: kube::Client, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let (services, slices) = skiff_dns::feed::informers(&client, &self.index);
        let watches: Vec<_> = [services.start(), slices.start()].into_iter().flatten().collect();
        let synced = async {
            services.wait_for_sync().await;
            slices.wait_for_sync().await;
        };
        let stopped = tokio::select! {
            _ = synced => false,
            _ = shutdown.wait_for(|s| *s) => true,
        };
        if !stopped {
            tracing::info!(services = self.index.read().service_count(), "cluster DNS serving");
            tokio::select! {
                _ = self.server.run() => {}
                _ = shutdown.wait_for(|s| *s) => {}
            }
        }
        for watch in watches {
            watch.abort();
        }
    }
}
