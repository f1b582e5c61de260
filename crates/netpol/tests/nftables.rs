//! NetworkPolicy enforcement on a real kernel. The test builds a node of network namespaces:
//! a "node" namespace with a bridge (10.42.0.1/24, br_netfilter on, as the agent's CNI
//! bridge) and three "pods", each a namespace whose veth is a bridge port — `db` (10.42.0.2,
//! namespace prod), `api` (10.42.0.3, prod) and `dev` (10.42.0.4, namespace dev) — plus an
//! "outside" namespace routed through the node (192.168.77.2). Every pod and the outside
//! answer TCP on ports 80 and 8080 with their name. The controller programs the node namespace
//! through `nft`; reachability is checked with real connections: a connection the rules drop
//! times out, one they allow is answered.
//! Skips (with the reason printed) when not root, without `nft`, or without namespaces.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skiff_netpol::testing::{namespace, network_policy, pod};
use skiff_netpol::{Controller, ControllerConfig};
use skiff_proxy::NftCommand;

fn ip(args: &[&str]) -> Result<(), String> {
    match Command::new("ip").args(args).status() {
        Ok(s) if s.success() => Ok(()),
        _ => Err(format!("`ip {}` failed", args.join(" "))),
    }
}

/// A network namespace, deleted on drop.
struct NetNs {
    name: String,
}

impl NetNs {
    fn create(tag: &str) -> Result<NetNs, String> {
        let name = format!("skiff-np-{tag}-{}", std::process::id());
        ip(&["netns", "add", &name]).map_err(|_| "`ip netns add` failed (no iproute2 or no permission)".to_string())?;
        let ns = NetNs { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs `f` on a thread inside the namespace (sockets it creates belong to the namespace).
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("open the namespace");
            rustix::thread::move_into_link_name_space(file.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
                .expect("setns");
            f()
        })
        .join()
        .expect("namespace thread")
    }

    /// Listeners on `addr`:80 and :8080 answering every connection with `reply`.
    fn serve(&self, addr: &'static str, reply: &'static str) {
        for port in [80, 8080] {
            let listener = self.run(move || TcpListener::bind((addr, port)).expect("bind"));
            std::thread::spawn(move || {
                for mut conn in listener.incoming().flatten() {
                    let _ = conn.write_all(reply.as_bytes());
                }
            });
        }
    }

    /// Connects from inside the namespace and reads the answer, or the error's kind. A dropped
    /// SYN is a timeout: 2 s, far above a loopback round trip.
    fn fetch(&self, to: &str) -> Result<String, ErrorKind> {
        let to: SocketAddr = to.parse().unwrap();
        self.run(move || {
            let mut conn = TcpStream::connect_timeout(&to, Duration::from_secs(2)).map_err(|e| e.kind())?;
            conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut s = String::new();
            conn.read_to_string(&mut s).map_err(|e| e.kind())?;
            Ok(s)
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

struct Node {
    node: NetNs,
    db: NetNs,
    api: NetNs,
    dev: NetNs,
    outside: NetNs,
}

/// Plugs `pod` into the node's bridge as `host_if` with `addr`.
fn plug(node: &NetNs, pod: &NetNs, host_if: &str, addr: &str) -> Result<(), String> {
    let (n, p) = (node.name.as_str(), pod.name.as_str());
    ip(&["-n", n, "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", p])?;
    ip(&["-n", n, "link", "set", host_if, "master", "br0", "up"])?;
    ip(&["-n", p, "addr", "add", addr, "dev", "eth0"])?;
    ip(&["-n", p, "link", "set", "eth0", "up"])?;
    ip(&["-n", p, "route", "add", "default", "via", "10.42.0.1"])
}

impl Node {
    fn create() -> Result<Node, String> {
        let node = NetNs::create("node")?;
        let n = node.name.as_str();
        ip(&["-n", n, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", n, "addr", "add", "10.42.0.1/24", "dev", "br0"])?;
        ip(&["-n", n, "link", "set", "br0", "up"])?;
        for (key, value) in [("net.ipv4.ip_forward", "1"), ("net.bridge.bridge-nf-call-iptables", "1")] {
            let ok = Command::new("ip")
                .args(["netns", "exec", n, "sysctl", "-qw", &format!("{key}={value}")])
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err(format!("sysctl {key} in a namespace failed"));
            }
        }
        let (db, api, dev, outside) =
            (NetNs::create("db")?, NetNs::create("api")?, NetNs::create("dev")?, NetNs::create("out")?);
        plug(&node, &db, "hdb", "10.42.0.2/24")?;
        plug(&node, &api, "hapi", "10.42.0.3/24")?;
        plug(&node, &dev, "hdev", "10.42.0.4/24")?;
        let o = outside.name.as_str();
        ip(&["-n", n, "link", "add", "hout", "type", "veth", "peer", "name", "eth0", "netns", o])?;
        ip(&["-n", n, "addr", "add", "192.168.77.1/24", "dev", "hout"])?;
        ip(&["-n", n, "link", "set", "hout", "up"])?;
        ip(&["-n", o, "addr", "add", "192.168.77.2/24", "dev", "eth0"])?;
        ip(&["-n", o, "link", "set", "eth0", "up"])?;
        ip(&["-n", o, "route", "add", "default", "via", "192.168.77.1"])?;
        db.serve("10.42.0.2", "db");
        api.serve("10.42.0.3", "api");
        dev.serve("10.42.0.4", "dev");
        outside.serve("192.168.77.2", "outside");
        Ok(Node { node, db, api, dev, outside })
    }
}

/// Why this machine cannot run the test, if it cannot.
fn unsupported() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (network namespaces and nftables)".into());
    }
    if !NftCommand::default().is_available() {
        return Some("no `nft` program (Debian package nftables)".into());
    }
    None
}

fn ok(s: &str) -> Result<String, ErrorKind> {
    Ok(s.to_string())
}

const DENIED: Result<String, ErrorKind> = Err(ErrorKind::TimedOut);

#[test]
fn policies_allow_and_deny_real_connections_between_pods_namespaces_ports_and_blocks() {
    if let Some(why) = unsupported() {
        eprintln!("skipping: {why}");
        return;
    }
    let n = match Node::create() {
        Ok(n) => n,
        Err(why) => {
            eprintln!("skipping: {why}");
            return;
        }
    };
    let nft = NftCommand::in_netns(&n.node.name);
    let c = Controller::new(
        ControllerConfig { min_sync_period: Duration::ZERO, ..ControllerConfig::node("n1") },
        Arc::new(nft.clone()),
    );
    let sync = || assert!(c.sync().is_ok(), "the transaction is applied");
    c.on_namespace(&namespace("prod", &[]));
    c.on_namespace(&namespace("dev", &[]));
    let mut db = k8s_openapi::api::core::v1::Pod::clone(&pod("prod", "db", "n1", "10.42.0.2", &[("app", "db")]));
    db.spec.as_mut().unwrap().containers[0].ports = Some(vec![k8s_openapi::api::core::v1::ContainerPort {
        name: Some("http".into()),
        container_port: 8080,
        ..Default::default()
    }]);
    c.on_pod(&Arc::new(db));
    c.on_pod(&pod("prod", "api", "n1", "10.42.0.3", &[("role", "api")]));
    c.on_pod(&pod("dev", "dev", "n1", "10.42.0.4", &[]));
    assert!(c.sync().unwrap().full);

    // No policy: everything reaches everything.
    assert_eq!(n.api.fetch("10.42.0.2:80"), ok("db"));
    assert_eq!(n.dev.fetch("10.42.0.2:80"), ok("db"));
    assert_eq!(n.outside.fetch("10.42.0.2:80"), ok("db"));

    // Default deny ingress in prod.
    c.on_policy(&network_policy("prod", "default-deny", json!({"podSelector": {}})));
    sync();
    assert_eq!(n.api.fetch("10.42.0.2:80"), DENIED, "same namespace");
    assert_eq!(n.dev.fetch("10.42.0.2:80"), DENIED, "other namespace");
    assert_eq!(n.outside.fetch("10.42.0.2:80"), DENIED, "outside the cluster");
    assert_eq!(n.db.fetch("10.42.0.4:80"), ok("dev"), "egress is not isolated, dev's ingress neither");
    assert_eq!(n.node.fetch("10.42.0.2:80"), ok("db"), "the node always reaches its pods");

    // Allow by label, on one port.
    c.on_policy(&network_policy(
        "prod",
        "api-to-db",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "api"}}}], "ports": [{"port": 80}]}]}),
    ));
    sync();
    assert_eq!(n.api.fetch("10.42.0.2:80"), ok("db"));
    assert_eq!(n.api.fetch("10.42.0.2:8080"), DENIED, "another port");
    assert_eq!(n.dev.fetch("10.42.0.2:80"), DENIED, "not an api pod");

    // A label change is enforced (a set element update).
    c.on_pod(&pod("prod", "api", "n1", "10.42.0.3", &[("role", "web")]));
    sync();
    assert_eq!(n.api.fetch("10.42.0.2:80"), DENIED, "api lost its label");
    c.on_pod(&pod("prod", "api", "n1", "10.42.0.3", &[("role", "api")]));
    sync();
    assert_eq!(n.api.fetch("10.42.0.2:80"), ok("db"));

    // Named port and port ranges.
    c.on_policy(&network_policy(
        "prod",
        "api-to-db",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "api"}}}], "ports": [{"port": "http"}]}]}),
    ));
    sync();
    assert_eq!(n.api.fetch("10.42.0.2:8080"), ok("db"), "the named port http is 8080");
    assert_eq!(n.api.fetch("10.42.0.2:80"), DENIED);
    c.on_policy(&network_policy(
        "prod",
        "api-to-db",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "api"}}}],
                            "ports": [{"port": 8000, "endPort": 8100}, {"protocol": "UDP", "port": 80}]}]}),
    ));
    sync();
    assert_eq!(n.api.fetch("10.42.0.2:8080"), ok("db"), "in 8000-8100");
    assert_eq!(n.api.fetch("10.42.0.2:80"), DENIED, "UDP 80 is not TCP 80");

    // Allow by namespace: effective once the namespace carries the label.
    c.on_policy(&network_policy(
        "prod",
        "from-dev",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "dev"}}}]}]}),
    ));
    sync();
    assert_eq!(n.dev.fetch("10.42.0.2:80"), DENIED);
    c.on_namespace(&namespace("dev", &[("team", "dev")]));
    sync();
    assert_eq!(n.dev.fetch("10.42.0.2:80"), ok("db"));
    assert_eq!(n.dev.fetch("10.42.0.3:80"), DENIED, "the policy selects db only");

    // ipBlock with except.
    let block = |except: &str| {
        network_policy(
            "prod",
            "from-outside",
            json!({"podSelector": {"matchLabels": {"app": "db"}},
                   "ingress": [{"from": [{"ipBlock": {"cidr": "192.168.77.0/24", "except": [except]}}]}]}),
        )
    };
    c.on_policy(&block("192.168.77.2/32"));
    sync();
    assert_eq!(n.outside.fetch("10.42.0.2:80"), DENIED, "excepted");
    c.on_policy(&block("192.168.77.128/25"));
    sync();
    assert_eq!(n.outside.fetch("10.42.0.2:80"), ok("db"));

    // Egress: dev may reach db:80 only; replies to what dev may send pass.
    c.on_policy(&network_policy(
        "dev",
        "egress",
        json!({"podSelector": {}, "policyTypes": ["Egress"],
               "egress": [{"to": [{"ipBlock": {"cidr": "10.42.0.2/32"}}], "ports": [{"port": 80}]}]}),
    ));
    sync();
    assert_eq!(n.dev.fetch("10.42.0.2:80"), ok("db"), "allowed both ways (the reply is established)");
    assert_eq!(n.dev.fetch("192.168.77.2:80"), DENIED, "egress to the outside");
    assert_eq!(n.dev.fetch("10.42.0.2:8080"), DENIED, "another port");
    assert_eq!(n.outside.fetch("10.42.0.4:80"), ok("dev"), "dev's ingress is not isolated; replies pass");

    // Deleting the policies lifts isolation; cleanup removes the table.
    for name in ["default-deny", "api-to-db", "from-dev", "from-outside"] {
        c.on_policy_deleted(&network_policy("prod", name, json!({})));
    }
    c.on_policy_deleted(&network_policy("dev", "egress", json!({})));
    sync();
    assert_eq!(n.api.fetch("10.42.0.2:8080"), ok("db"));
    assert_eq!(n.dev.fetch("192.168.77.2:80"), ok("outside"));
    let listed = nft.list(&["list", "table", "ip", skiff_netpol::rules::TABLE]).unwrap();
    assert!(!listed.contains("sel-"), "no selection set is left: {listed}");
    skiff_netpol::cleanup(&nft).unwrap();
    assert!(nft.list(&["list", "table", "ip", skiff_netpol::rules::TABLE]).is_err());
    skiff_netpol::cleanup(&nft).expect("cleaning up twice is fine");
}
