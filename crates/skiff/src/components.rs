//! The in-process components of `skiff server`, each a client of the API server with its own
//! `kube::Client`: the controller manager, the scheduler, the node lifecycle controller, the
//! local node agent (kubelet) and simulated nodes. Each could equally run as a separate process against any
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

/// kube-controller-manager's role: Deployment, ReplicaSet, garbage collector, namespace,
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
    let config =
        skiff_controllers::ControllerManagerConfig { root_ca_pem: Some(ctx.ca_pem.clone()), ..Default::default() };
    let manager =
        skiff_controllers::run_controller_manager_until(ctx.client, config, &mut ctx.metrics.lock(), shutdown);
    manager.await
}

/// kube-scheduler's role: binds pending pods to nodes (default profile, leader-elected).
///
/// Its Prometheus metrics (`scheduler_schedule_attempts_total`, `scheduler_pending_pods`, ...)
/// are served on the API server's `/metrics`.
async fn scheduler(ctx: ComponentContext) -> anyhow::Result<()> {
    let metrics = skiff_scheduler::framework::metrics::SchedulerMetrics::default();
    // The registry lock is released at the end of this statement, before the scheduler runs.
    metrics.register(&mut ctx.metrics.lock());
    let config = skiff_scheduler::config::SchedulerConfig::default();
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
    let cfg = skiff_kubelet::SimulatedNodesConfig { count: ctx.args.simulated_nodes as usize, ..Default::default() };
    let mut stop = ctx.shutdown.clone();
    tokio::select! {
        r = skiff_kubelet::run_simulated_nodes(ctx.client, cfg) => r.map_err(Into::into),
        _ = stop.wait_for(|s| *s) => Ok(()),
    }
}
