//! `skiff agent`: joins this machine (or N simulated nodes) to a cluster run by `skiff server`
//! elsewhere, k3s-style.
//!
//! 1. Credentials: with `--token` (the server's `DATA_DIR/token`), the agent fetches the
//!    server's CA, checks it against the hash in the token, and exchanges the token for a node
//!    client certificate (`CN=system:node:<name>, O=system:nodes`; see
//!    [`skiff_apiserver::controlplane::join`]). Its key, certificate and the CA are kept under
//!    `DATA_DIR/agent/` (`client-kubelet.key`, `client-kubelet.crt`, `server-ca.crt`, names as in
//!    k3s) with a kubeconfig `DATA_DIR/agent/kubelet.kubeconfig`, and reused on restart.
//! 2. The node: [`skiff_kubelet::run_agent`] (a kubelet on a managed containerd or
//!    `--container-runtime-endpoint`), or with `--simulated-nodes N` only N simulated nodes named
//!    `<node-name>-0 … <node-name>-(N-1)` ([`skiff_kubelet::run_simulated_nodes`]).
//!
//! Runs until SIGTERM or SIGINT.

use skiff_apiserver::pki::write_private;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use skiff_apiserver::controlplane::join::{self, NodeCredentials};
use skiff_auth::authn::node_join::JoinToken;

/// Flags of `skiff agent` (names as k3s users know them).
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// URL of the API server to join, e.g. `https://10.0.0.1:6443`.
    #[arg(long, env = "SKIFF_URL")]
    pub server: String,
    /// Join token: the content of the server's DATA_DIR/token (`K10<ca-hash>::node:<secret>`).
    #[arg(long, env = "SKIFF_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File holding the join token (instead of `--token`).
    #[arg(long, env = "SKIFF_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// Node name (default: the host name, lowercased). With `--simulated-nodes` it is the
    /// prefix of the simulated nodes' names.
    #[arg(long, env = "SKIFF_NODE_NAME")]
    pub node_name: Option<String>,
    /// Append a random, persistent id to the node name (`<name>-<8 hex digits>`), for machines
    /// sharing a host name.
    #[arg(long)]
    pub with_node_id: bool,
    /// Directory for credentials, containerd and pod data (default as for `skiff server`).
    #[arg(long, short = 'd', env = "SKIFF_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// An existing CRI socket (default: a containerd the agent starts itself).
    #[arg(long)]
    pub container_runtime_endpoint: Option<PathBuf>,
    /// The node's IP address (default: the address of the default route's interface).
    #[arg(long)]
    pub node_ip: Option<IpAddr>,
    /// Pod CIDR of this node (kubelet's flag). Default: the Node registers without one and the
    /// server's node IPAM controller assigns it a free /24 of `--cluster-cidr`, which the agent
    /// waits for before it configures the CNI network.
    #[arg(long)]
    pub pod_cidr: Option<String>,
    /// The cluster DNS address pods get as their nameserver (the kubelet's flag; the server's
    /// `--cluster-dns`).
    #[arg(long, default_value = skiff_apiserver::controlplane::kubedns::DEFAULT_CLUSTER_DNS)]
    pub cluster_dns: IpAddr,
    /// The cluster's DNS domain in pods' search paths (the kubelet's flag; the server's
    /// `--cluster-domain`).
    #[arg(long, default_value = skiff_apiserver::controlplane::kubedns::DEFAULT_CLUSTER_DOMAIN)]
    pub cluster_domain: String,
    /// The resolv.conf dnsPolicy Default pods inherit (the kubelet's and k3s's flag; default:
    /// /etc/resolv.conf, or systemd-resolved's upstream list when it names only a local stub).
    #[arg(long)]
    pub resolv_conf: Option<PathBuf>,
    /// Run N simulated nodes (no containers) instead of a real node.
    #[arg(long, default_value_t = 0)]
    pub simulated_nodes: u32,
    /// Do not program Service rules on this host (k3s's flag): no node proxy.
    #[arg(long)]
    pub disable_kube_proxy: bool,
    /// Log verbosity and format (`-v`, `--vmodule`, `--logging-format`).
    #[command(flatten)]
    pub logging: crate::logging::LoggingArgs,
    /// Do not enforce NetworkPolicies on this host's pods (k3s's flag).
    #[arg(long)]
    pub disable_network_policy: bool,
}

/// The token from `--token` or `--token-file`.
fn read_token(args: &AgentArgs) -> Result<JoinToken> {
    let text = match (&args.token, &args.token_file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        (None, None) => anyhow::bail!("a join token is needed: --token or --token-file (the server's DATA_DIR/token)"),
    };
    JoinToken::parse(&text).map_err(anyhow::Error::msg)
}

/// `--with-node-id`: a random id kept in `DATA_DIR/agent/node-id`.
fn node_id(agent_dir: &Path) -> Result<String> {
    let path = agent_dir.join("node-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim().to_string();
        if !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(id);
        }
    }
    let id = format!("{:08x}", rand_u32());
    std::fs::write(&path, format!("{id}\n")).with_context(|| format!("writing {}", path.display()))?;
    Ok(id)
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish() as u32
}

/// A stable 32-bit hash of a name (FNV-1a), to spread address ranges between agents.
fn name_hash(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

/// The node name: `--node-name` or the host name, plus the node id with `--with-node-id`.
fn node_name(args: &AgentArgs, agent_dir: &Path) -> Result<String> {
    let base = match &args.node_name {
        Some(n) => n.clone(),
        None => skiff_apiserver::pki::host_name().context("the host name is not a valid node name: use --node-name")?,
    };
    let name = if args.with_node_id { format!("{base}-{}", node_id(agent_dir)?) } else { base };
    let problems = skiff_apimachinery::names::is_dns1123_subdomain(&name);
    if !problems.is_empty() {
        anyhow::bail!("invalid node name {name:?}: {}", problems.join(", "));
    }
    Ok(name)
}

const CA_FILE: &str = "server-ca.crt";
const CERT_FILE: &str = "client-kubelet.crt";
const KEY_FILE: &str = "client-kubelet.key";
/// The agent's kubeconfig under `DATA_DIR/agent/`.
pub const KUBECONFIG_FILE: &str = "kubelet.kubeconfig";

/// Saved credentials for `node_name` (as a simulated-node agent when `simulated`) that the
/// token still vouches for.
fn saved_credentials(agent_dir: &Path, token: &JoinToken, node_name: &str, simulated: bool) -> Option<NodeCredentials> {
    let read = |f: &str| std::fs::read_to_string(agent_dir.join(f)).ok();
    let creds = NodeCredentials { ca_pem: read(CA_FILE)?, cert_pem: read(CERT_FILE)?, key_pem: read(KEY_FILE)? };
    token.verify_ca(&creds.ca_pem).ok()?;
    let der = CertificateDer::from_pem_slice(creds.cert_pem.as_bytes()).ok()?;
    let (user, _) = skiff_apiserver::pki::cert_user(&der)?;
    (user == skiff_auth::authn::node_join::join_identity(node_name, simulated).0).then_some(creds)
}

/// Joins (or reuses saved credentials) and returns the node's client and the cluster CA. An
/// agent of simulated nodes (`simulated`) joins as a simulated-node agent, not as a node.
async fn node_client(
    server: &str,
    token: &JoinToken,
    agent_dir: &Path,
    node_name: &str,
    simulated: bool,
) -> Result<(kube::Client, String)> {
    let creds = match saved_credentials(agent_dir, token, node_name, simulated) {
        Some(c) => c,
        None => {
            // The server may still be starting: retry connection failures for a while; a refused
            // token or a CA mismatch is final.
            let deadline = Instant::now() + Duration::from_secs(120);
            let creds = loop {
                match join::join_cluster_as(server, &token.to_string(), node_name, simulated).await {
                    Ok(c) => break c,
                    Err(e)
                        if Instant::now() < deadline
                            && matches!(e.downcast_ref::<kube::Error>(), Some(k) if !matches!(k, kube::Error::Api(_))) =>
                    {
                        tracing::warn!(%server, error = %format!("{e:#}"), "the server is not reachable yet; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(e) => return Err(e).context("joining the cluster"),
                }
            };
            write_private(&agent_dir.join(CA_FILE), &creds.ca_pem)?;
            write_private(&agent_dir.join(KEY_FILE), &creds.key_pem)?;
            write_private(&agent_dir.join(CERT_FILE), &creds.cert_pem)?;
            tracing::info!(node = node_name, %server, "joined the cluster");
            creds
        }
    };
    let kubeconfig_path = agent_dir.join(KUBECONFIG_FILE);
    join::write_node_kubeconfig(&kubeconfig_path, server, &creds)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&kubeconfig_path)?;
    let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?;
    Ok((kube::Client::try_from(cfg)?, creds.ca_pem))
}

/// The simulated nodes' settings: names `<prefix>-<i>`, address ranges spread by the prefix's
/// hash so that two agents rarely hand out the same fake pod IPs.
fn simulated_config(prefix: &str, count: usize) -> skiff_kubelet::SimulatedNodesConfig {
    let h = name_hash(prefix);
    let mut cfg =
        skiff_kubelet::SimulatedNodesConfig { count, name_prefix: format!("{prefix}-"), ..Default::default() };
    if count <= 256 {
        cfg.pod_cidr_base = Ipv4Addr::new(10, 160 + (h % 64) as u8, 0, 0);
        cfg.node_ip_base = Ipv4Addr::new(172, 17 + ((h >> 8) % 14) as u8, 0, 0);
    }
    cfg
}

/// Runs the agent until SIGTERM/SIGINT.
pub async fn run(args: AgentArgs) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let token = read_token(&args)?;
    let data_dir = args.data_dir.clone().unwrap_or_else(crate::server::default_data_dir);
    let agent_dir = data_dir.join("agent");
    std::fs::create_dir_all(&agent_dir).with_context(|| format!("creating {}", agent_dir.display()))?;
    let node_name = node_name(&args, &agent_dir)?;
    let (client, ca_pem) = node_client(&args.server, &token, &agent_dir, &node_name, args.simulated_nodes > 0).await?;
    eprintln!(
        "skiff agent: node {node_name} joined {} (kubeconfig {})",
        args.server,
        agent_dir.join(KUBECONFIG_FILE).display()
    );

    let work = async {
        if args.simulated_nodes > 0 {
            let mut cfg = simulated_config(&node_name, args.simulated_nodes as usize);
            cfg.network_policy = !args.disable_network_policy;
            skiff_kubelet::run_simulated_nodes(client, cfg).await.map_err(anyhow::Error::from)
        } else {
            let mut cfg = skiff_kubelet::AgentConfig::new(&data_dir);
            cfg.node_name = Some(node_name.clone());
            cfg.container_runtime_endpoint = args.container_runtime_endpoint.clone();
            cfg.node_ip = args.node_ip;
            cfg.pod_cidr = args.pod_cidr.clone();
            cfg.kube_proxy = !args.disable_kube_proxy;
            cfg.network_policy = !args.disable_network_policy;
            cfg.cluster_dns = vec![args.cluster_dns.to_string()];
            cfg.cluster_domain = args.cluster_domain.clone();
            if let Some(path) = &args.resolv_conf {
                cfg.resolv_conf = path.clone();
            }
            // The API server's kubelet-client certificate is signed by the cluster CA.
            cfg.kubelet_client_ca_pem = Some(ca_pem);
            skiff_kubelet::run_agent(client, cfg).await.map_err(anyhow::Error::from)
        }
    };
    tokio::select! {
        r = work => r,
        _ = crate::server::shutdown_signal() => {
            tracing::info!("stopping");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> AgentArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: AgentArgs,
        }
        let mut argv = vec!["skiff-agent", "--server", "https://127.0.0.1:6443"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).unwrap().a
    }

    #[test]
    fn node_names_take_a_persistent_id_and_must_be_valid() {
        let dir = tempfile::tempdir().unwrap();
        let a = args(&["--node-name", "worker", "--with-node-id"]);
        let first = node_name(&a, dir.path()).unwrap();
        assert!(first.starts_with("worker-") && first.len() == "worker-".len() + 8, "{first}");
        assert_eq!(node_name(&a, dir.path()).unwrap(), first);
        assert_eq!(node_name(&args(&["--node-name", "worker"]), dir.path()).unwrap(), "worker");
        assert!(node_name(&args(&["--node-name", "Bad_Name"]), dir.path()).is_err());
    }

    #[test]
    fn a_token_is_required_and_parsed() {
        assert!(read_token(&args(&[])).is_err());
        let t = read_token(&args(&["--token", "secret"])).unwrap();
        assert_eq!(t.secret, "secret");
    }

    #[test]
    fn the_agent_defaults_to_the_servers_cluster_dns_and_domain() {
        let a = args(&[]);
        assert_eq!((a.cluster_dns.to_string().as_str(), a.cluster_domain.as_str()), ("10.43.0.10", "cluster.local"));
        let a = args(&["--cluster-dns", "10.96.0.10", "--cluster-domain", "example.internal"]);
        assert_eq!((a.cluster_dns.to_string().as_str(), a.cluster_domain.as_str()), ("10.96.0.10", "example.internal"));
    }

    #[test]
    fn simulated_nodes_of_an_agent_are_named_after_it() {
        let cfg = simulated_config("edge", 2);
        assert_eq!(cfg.node_name(0), "edge-0");
        assert_eq!(cfg.node_name(1), "edge-1");
        cfg.validate().unwrap();
        assert_ne!(simulated_config("edge-a", 1).pod_cidr_base, simulated_config("edge-b", 1).pod_cidr_base);
    }
}
