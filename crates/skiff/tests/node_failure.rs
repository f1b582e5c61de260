//! End-to-end node join and node failure: `skiff agent` processes join a `skiff server
//! --disable-agent` with the server's join token and run simulated nodes; one agent is killed
//! with SIGKILL, its nodes go Unknown (node lifecycle controller, `--node-monitor-grace-period`
//! shortened), and the pods that tolerate `unreachable` for 5 s are evicted and recreated on the
//! surviving node. Joined nodes without `--pod-cidr` get a /24 of `--cluster-cidr` each from
//! the node IPAM controller.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Server;

/// A running `skiff agent` child process.
struct Agent {
    child: Option<Child>,
    log: PathBuf,
    data_dir: PathBuf,
}

impl Agent {
    /// Starts `skiff agent --simulated-nodes N` against `s`, joining with the server's token.
    fn start(s: &Server, name: &str, nodes: u32) -> Agent {
        let data_dir = s.dir.path().join(format!("agent-{name}"));
        let log = s.dir.path().join(format!("agent-{name}.log"));
        let child = agent_command(s, name, &data_dir, &token_file(s))
            .args(["--simulated-nodes", &nodes.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting skiff agent");
        Agent { child: Some(child), log, data_dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, no goodbye: leases simply stop being renewed.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn token_file(s: &Server) -> PathBuf {
    s.dir.path().join("data/token")
}

fn agent_command(s: &Server, name: &str, data_dir: &std::path::Path, token_file: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_skiff"));
    c.args(["agent", "--server", &format!("https://127.0.0.1:{}", s.port), "--node-name", name])
        .arg("--token-file")
        .arg(token_file)
        .arg("--data-dir")
        .arg(data_dir);
    c
}

/// Polls `f` until it returns `Some`, or panics with `what` and `context()` after `limit`.
fn wait_for<T>(limit: Duration, what: &str, context: impl Fn() -> String, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", context());
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `name=ReadyStatus` for every node.
fn node_readiness(s: &Server) -> String {
    s.ok(&[
        "get",
        "nodes",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}"#,
    ])
}

/// `(name, node, phase, terminating)` of every pod of the Deployment.
fn pods(s: &Server) -> Vec<(String, String, String, bool)> {
    let out = s.ok(&[
        "get",
        "pods",
        "-l",
        "app=survivor",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name},{.spec.nodeName},{.status.phase},{.metadata.deletionTimestamp};{end}",
    ]);
    out.split(';')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let f: Vec<&str> = p.split(',').collect();
            let get = |i: usize| f.get(i).copied().unwrap_or_default().to_string();
            (get(0), get(1), get(2), !get(3).is_empty())
        })
        .collect()
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: survivor
spec:
  replicas: 2
  selector:
    matchLabels:
      app: survivor
  template:
    metadata:
      labels:
        app: survivor
    spec:
      tolerations:
      - key: node.kubernetes.io/unreachable
        operator: Exists
        effect: NoExecute
        tolerationSeconds: 5
      - key: node.kubernetes.io/not-ready
        operator: Exists
        effect: NoExecute
        tolerationSeconds: 5
      containers:
      - name: app
        image: skiff.local/busybox:latest
";

#[test]
fn a_wrong_join_token_is_refused_with_401() {
    let s = Server::start();
    let token = std::fs::read_to_string(token_file(&s)).unwrap();
    assert!(token.starts_with("K10"), "{token}");
    let (hash, _) = token.trim().split_once("::").unwrap();
    let wrong = s.dir.path().join("wrong-token");
    std::fs::write(&wrong, format!("{hash}::node:{}", "0".repeat(32))).unwrap();
    let out: Output = agent_command(&s, "intruder", &s.dir.path().join("agent-intruder"), &wrong)
        .args(["--simulated-nodes", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the agent joined with a wrong token: {stderr}");
    assert!(stderr.contains("401") || stderr.contains("Unauthorized"), "{stderr}");
    assert!(!s.ok(&["get", "nodes", "-o", "name"]).contains("intruder"));
}

#[test]
fn pods_of_a_killed_agent_are_evicted_and_recreated_on_the_surviving_node() {
    // Shorter than the default 40 s, still longer than the 10 s lease renew interval (a
    // shorter grace period would declare healthy nodes Unknown between two renewals).
    let s = Server::start_with(&["--node-monitor-grace-period", "20s"]);
    let server_log = || s.log();

    // Agent A joins with the token and runs two simulated nodes as system:node:a.
    let mut a = Agent::start(&s, "a", 2);
    wait_for(
        Duration::from_secs(60),
        "a-0 and a-1 Ready",
        || format!("{}\n{}", a.log(), server_log()),
        || {
            let r = node_readiness(&s);
            (r.contains("a-0=True") && r.contains("a-1=True")).then_some(())
        },
    );
    let kubeconfig = a.data_dir.join("agent/kubelet.kubeconfig");
    let whoami = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(s.dir.path().join("kubectl-cache-a"))
        .args(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"])
        .output()
        .unwrap();
    let whoami = String::from_utf8_lossy(&whoami.stdout);
    // Simulated nodes run under one credential: a simulated-node agent, not a node identity
    // (which the Node authorizer and NodeRestriction would limit to one Node).
    assert!(
        whoami.starts_with("system:skiff:simulated-node-agent:a ")
            && whoami.contains("system:skiff:simulated-node-agents"),
        "{whoami}"
    );

    // The Deployment's pods land on A's nodes (the only ones).
    s.ok_stdin(&["apply", "-f", "-"], DEPLOYMENT);
    let original = wait_for(
        Duration::from_secs(60),
        "2 pods Running on a-*",
        || format!("{:?}\n{}", pods(&s), server_log()),
        || {
            let p = pods(&s);
            let running: Vec<String> = p
                .iter()
                .filter(|(_, node, phase, term)| node.starts_with("a-") && phase == "Running" && !term)
                .map(|(name, ..)| name.clone())
                .collect();
            (running.len() == 2).then_some(running)
        },
    );

    // Agent B brings the surviving node; then A dies without a word.
    let _b = Agent::start(&s, "b", 1);
    wait_for(
        Duration::from_secs(60),
        "b-0 Ready",
        || format!("{}\n{}", node_readiness(&s), server_log()),
        || node_readiness(&s).contains("b-0=True").then_some(()),
    );
    a.kill9();

    wait_for(
        Duration::from_secs(90),
        "a-0 and a-1 Ready=Unknown",
        || format!("{}\n{}", node_readiness(&s), server_log()),
        || {
            let r = node_readiness(&s);
            (r.contains("a-0=Unknown") && r.contains("a-1=Unknown")).then_some(())
        },
    );
    // The node lifecycle controller writes the condition and the taint in two updates.
    wait_for(
        Duration::from_secs(30),
        "a-0 tainted node.kubernetes.io/unreachable",
        || format!("{}\n{}", s.ok(&["get", "node", "a-0", "-o", "jsonpath={.spec.taints}"]), server_log()),
        || {
            let taints = s.ok(&["get", "node", "a-0", "-o", "jsonpath={.spec.taints[*].key}"]);
            taints.contains("node.kubernetes.io/unreachable").then_some(())
        },
    );

    wait_for(
        Duration::from_secs(120),
        "2 replacement pods Running on b-0",
        || format!("{:?}\n{}", pods(&s), server_log()),
        || {
            let p = pods(&s);
            let replacements = p
                .iter()
                .filter(|(name, node, phase, term)| {
                    node == "b-0" && phase == "Running" && !term && !original.contains(name)
                })
                .count();
            (replacements == 2).then_some(())
        },
    );
    // The originals were evicted (deleted; they stay Terminating while their node is away).
    let p = pods(&s);
    for name in &original {
        assert!(p.iter().all(|(n, _, _, term)| n != name || *term), "{name} was not evicted: {p:?}");
    }
}

/// `name=podCIDR` of every node.
fn node_cidrs(s: &Server) -> std::collections::BTreeMap<String, String> {
    let out = s.ok(&["get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.podCIDR} {end}"]);
    out.split_whitespace().filter_map(|p| p.split_once('=')).map(|(n, c)| (n.to_string(), c.to_string())).collect()
}

#[test]
fn joined_nodes_without_a_pod_cidr_get_distinct_24s_of_the_cluster_cidr() {
    let s = Server::start_with(&["--cluster-cidr", "10.77.0.0/16"]);
    // Real-node agents without --pod-cidr. Their CRI endpoint does not exist: they register,
    // wait for the node IPAM controller's pod CIDR (what they would configure CNI with), then
    // fail to reach the runtime, which is all this test needs (no containerd, no bridge).
    let start = |name: &str| {
        let log = s.dir.path().join(format!("agent-{name}.log"));
        let child = agent_command(&s, name, &s.dir.path().join(format!("agent-{name}")), &token_file(&s))
            .arg("--container-runtime-endpoint")
            .arg(s.dir.path().join("no-such-cri.sock"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting skiff agent");
        Agent { child: Some(child), log, data_dir: s.dir.path().join(format!("agent-{name}")) }
    };
    let (x, y) = (start("x"), start("y"));
    // A Node registered by other means (no CIDR either) is served too.
    s.ok_stdin(&["create", "-f", "-"], "apiVersion: v1\nkind: Node\nmetadata:\n  name: z\n");
    let cidrs = wait_for(
        Duration::from_secs(60),
        "pod CIDRs on x, y and z",
        || format!("{:?}\n{}\n{}\n{}", node_cidrs(&s), x.log(), y.log(), s.log()),
        || {
            let c = node_cidrs(&s);
            ["x", "y", "z"].iter().all(|n| c.get(*n).is_some_and(|v| !v.is_empty())).then_some(c)
        },
    );
    let mut seen = std::collections::BTreeSet::new();
    for n in ["x", "y", "z"] {
        let c = &cidrs[n];
        assert!(c.starts_with("10.77.") && c.ends_with(".0/24"), "{n}: {c}");
        assert!(seen.insert(c.clone()), "{c} given twice: {cidrs:?}");
        let list = s.ok(&["get", "node", n, "-o", "jsonpath={.spec.podCIDRs[*]}"]);
        assert_eq!(&list, c);
    }
    // The agents waited for exactly that range.
    for (a, n) in [(&x, "x"), (&y, "y")] {
        wait_for(
            Duration::from_secs(30),
            "the agent to log its pod CIDR",
            || a.log(),
            || (a.log().contains("pod CIDR assigned") && a.log().contains(cidrs[n].as_str())).then_some(()),
        );
    }
}
