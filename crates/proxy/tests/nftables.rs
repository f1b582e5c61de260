//! The proxy on a real kernel: a network namespace made by the test (a veth pair whose end
//! holds the "node" address 10.0.0.1 and an "endpoint" address 10.0.0.2 with listeners on it),
//! programmed through `nft`, and reached with real TCP connections from inside the namespace.
//! Skips (with the reason printed) when not root, without `nft`, or without network namespaces.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use skiff_proxy::{Cidr, NftBackend, NftCommand, Proxier, ProxierConfig, RuleConfig, testing};

struct NetNs {
    name: String,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip").args(args).status().is_ok_and(|s| s.success())
}

impl NetNs {
    /// A namespace with `v0` (10.0.0.1/24, 10.0.0.2/24) as the default route, or why not.
    fn create(tag: &str) -> Result<NetNs, String> {
        let name = format!("skiff-proxy-{tag}-{}", std::process::id());
        if !ip(&["netns", "add", &name]) {
            return Err("`ip netns add` failed (no iproute2 or no permission)".into());
        }
        let ns = NetNs { name };
        let n = ns.name.as_str();
        for args in [
            vec!["-n", n, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
            vec!["-n", n, "addr", "add", "10.0.0.1/24", "dev", "v0"],
            vec!["-n", n, "addr", "add", "10.0.0.2/24", "dev", "v0"],
            vec!["-n", n, "link", "set", "v0", "up"],
            vec!["-n", n, "link", "set", "v1", "up"],
            vec!["-n", n, "link", "set", "lo", "up"],
            vec!["-n", n, "route", "add", "default", "dev", "v0"],
        ] {
            if !ip(&args) {
                return Err(format!("`ip {}` failed", args.join(" ")));
            }
        }
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
}

impl Drop for NetNs {
    fn drop(&mut self) {
        ip(&["netns", "del", &self.name]);
    }
}

/// A listener on `addr` in the namespace answering every connection with `reply`.
fn serve(ns: &NetNs, addr: &'static str, reply: &'static str) {
    let listener = ns.run(move || TcpListener::bind(addr).expect("bind the endpoint"));
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let _ = conn.write_all(reply.as_bytes());
        }
    });
}

/// Connects from inside the namespace and reads the answer, or the connect error's kind.
fn fetch(ns: &NetNs, to: &str) -> Result<String, ErrorKind> {
    let to: SocketAddr = to.parse().unwrap();
    ns.run(move || {
        let mut conn = TcpStream::connect_timeout(&to, Duration::from_secs(3)).map_err(|e| e.kind())?;
        conn.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut s = String::new();
        conn.read_to_string(&mut s).map_err(|e| e.kind())?;
        Ok(s)
    })
}

fn service(name: &str, cluster_ip: &str, node_port: Option<i32>) -> Arc<Service> {
    testing::service("default", name, cluster_ip, 80, node_port)
}

fn slice(service: &str, port: i32, ips: &[&str]) -> Arc<EndpointSlice> {
    let endpoints: Vec<(&str, bool, &str)> = ips.iter().map(|ip| (*ip, true, "n1")).collect();
    testing::slice("default", service, &format!("{service}-abc"), port, &endpoints)
}

fn proxier(ns: &NetNs) -> Arc<Proxier> {
    let cfg = ProxierConfig {
        node_name: "n1".into(),
        rules: RuleConfig { local_traffic: Cidr::parse("10.0.0.0/24") },
        min_sync_period: Duration::ZERO,
    };
    Proxier::new(cfg, Arc::new(NftCommand::in_netns(&ns.name)))
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

#[test]
fn cluster_ips_and_node_ports_reach_endpoints_and_services_without_endpoints_are_refused() {
    if let Some(why) = unsupported() {
        eprintln!("skipping: {why}");
        return;
    }
    let ns = match NetNs::create("reach") {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("skipping: {why}");
            return;
        }
    };
    let nft = NftCommand::in_netns(&ns.name);
    if nft.apply(&[]).is_err() {
        eprintln!("skipping: nftables does not work in a network namespace here");
        return;
    }
    serve(&ns, "10.0.0.2:8080", "endpoint-a");
    serve(&ns, "10.0.0.2:8081", "endpoint-b");

    let p = proxier(&ns);
    p.on_service(&service("web", "10.43.0.10", Some(30080)));
    p.on_slice(&slice("web", 8080, &["10.0.0.2"]));
    p.on_service(&service("empty", "10.43.0.11", None));
    assert!(p.sync().expect("the full sync is applied").full);

    assert_eq!(fetch(&ns, "10.43.0.10:80"), Ok(String::from("endpoint-a")), "ClusterIP → endpoint");
    assert_eq!(fetch(&ns, "10.0.0.1:30080"), Ok(String::from("endpoint-a")), "NodePort on the node's address");
    assert_eq!(fetch(&ns, "10.43.0.11:80"), Err(ErrorKind::ConnectionRefused), "no endpoints → REJECT");

    // The endpoint goes away: the ClusterIP is refused now.
    p.on_slice(&slice("web", 8080, &[]));
    assert!(!p.sync().unwrap().full);
    assert_eq!(fetch(&ns, "10.43.0.10:80"), Err(ErrorKind::ConnectionRefused));
    assert_eq!(fetch(&ns, "10.0.0.1:30080"), Err(ErrorKind::ConnectionRefused));

    // It comes back on another port: the rewritten chain DNATs there.
    p.on_slice(&slice("web", 8081, &["10.0.0.2"]));
    p.sync().unwrap();
    assert_eq!(fetch(&ns, "10.43.0.10:80"), Ok(String::from("endpoint-b")));

    // A restarted proxy replaces the table of the previous run with its own.
    p.on_service(&service("gone-after-restart", "10.43.0.12", None));
    p.sync().unwrap();
    let again = proxier(&ns);
    again.on_service(&service("web", "10.43.0.10", Some(30080)));
    again.on_slice(&slice("web", 8080, &["10.0.0.2"]));
    assert!(again.sync().unwrap().full);
    let listed = nft.list(&["list", "table", "ip", "skiff-proxy"]).unwrap();
    assert!(!listed.contains("10.43.0.12"), "the stale Service is gone: {listed}");
    assert_eq!(fetch(&ns, "10.43.0.10:80"), Ok(String::from("endpoint-a")));

    skiff_proxy::cleanup(&nft).unwrap();
    assert!(nft.list(&["list", "table", "ip", "skiff-proxy"]).is_err(), "cleanup removes the table");
    assert!(fetch(&ns, "10.43.0.10:80").is_err(), "nothing proxies any more");
    skiff_proxy::cleanup(&nft).expect("cleaning up twice is fine");
}
