//! NetworkPolicy enforcement end to end with the real kubectl: `skiff server` with its local
//! node on a real containerd, pods on the node's CNI bridge, connections made from inside the
//! pods with `kubectl exec … nc`. A default-deny policy isolates a namespace, then allow rules by
//! pod label, by namespace label and by port open exactly what they name.
//! Needs root plus containerd, runc, the CNI plugins, busybox-static and nftables
//! (`scripts/install-deps`); run as `flock /tmp/skiff-node.lock cargo test …` (one real node
//! per host).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Server;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn require_runtime() {
    let missing: Vec<&str> =
        ["/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/bin/busybox", "/usr/sbin/nft"]
            .into_iter()
            .filter(|p| !Path::new(p).exists())
            .collect();
    assert!(missing.is_empty(), "missing {missing:?}: run scripts/install-deps (as root)");
    let uid = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert_eq!(uid.ok().as_deref(), Some("0"), "the local node runs containers: run the tests as root");
}

/// `db` serves HTTP on port 80 (the image's default command); the clients sleep.
const PODS: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: prod
---
apiVersion: v1
kind: Namespace
metadata:
  name: dev
---
apiVersion: v1
kind: Pod
metadata:
  name: db
  namespace: prod
  labels: {app: db}
spec:
  containers:
  - name: web
    image: skiff.local/busybox:1.35
    ports: [{name: http, containerPort: 80}]
---
apiVersion: v1
kind: Pod
metadata:
  name: api
  namespace: prod
  labels: {role: api}
spec:
  containers:
  - name: sleep
    image: skiff.local/busybox:1.35
    command: [sh, -c, 'trap \"exit 0\" TERM; sleep 3600 & wait']
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: dev
spec:
  containers:
  - name: sleep
    image: skiff.local/busybox:1.35
    command: [sh, -c, 'trap \"exit 0\" TERM; sleep 3600 & wait']
";

/// Whether pod `ns/pod` gets an HTTP answer from `ip`:80 (nc gives up after 2 s: a dropped SYN).
fn reaches(server: &Server, ns: &str, pod: &str, ip: &str) -> bool {
    let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {ip} 80");
    let out = server.kubectl(&["-n", ns, "exec", pod, "--", "sh", "-c", &script]);
    String::from_utf8_lossy(&out.stdout).starts_with("HTTP/1")
}

#[test]
fn a_default_deny_policy_then_allow_rules_by_label_namespace_and_port_on_containerd() {
    require_runtime();
    let images = tempfile::tempdir().unwrap();
    let built = Command::new(repo_root().join("scripts/images/build.sh")).arg(images.path()).output().unwrap();
    assert!(built.status.success(), "building the offline images: {}", String::from_utf8_lossy(&built.stderr));
    let server = Server::start_with_agent(&[]);
    let import = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["images", "import", "--data-dir"])
        .arg(server.dir.path().join("data"))
        .arg(images.path().join("busybox.tar"))
        .output()
        .unwrap();
    assert!(import.status.success(), "skiff images import: {}", String::from_utf8_lossy(&import.stderr));
    server.ok_stdin(&["apply", "-f", "-"], PODS);
    for (ns, pod) in [("prod", "db"), ("prod", "api"), ("dev", "client")] {
        server.ok(&["-n", ns, "wait", "--for=condition=Ready", &format!("pod/{pod}"), "--timeout=180s"]);
    }
    let db = server.ok(&["-n", "prod", "get", "pod", "db", "-o", "jsonpath={.status.podIP}"]);

    // No policy: both clients reach db.
    assert!(reaches(&server, "prod", "api", &db), "api → db without policies");
    assert!(reaches(&server, "dev", "client", &db), "client → db without policies");

    // Default deny for prod's ingress.
    server.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: default-deny, namespace: prod}
spec:
  podSelector: {}
",
    );
    server.eventually(60, "api → db to be denied", || (!reaches(&server, "prod", "api", &db)).then_some(()));
    assert!(!reaches(&server, "dev", "client", &db), "client → db denied");

    // Allow by label, on port 80.
    let by_label = |port: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: api-to-db, namespace: prod}}
spec:
  podSelector: {{matchLabels: {{app: db}}}}
  ingress:
  - from: [{{podSelector: {{matchLabels: {{role: api}}}}}}]
    ports: [{{port: {port}}}]
"
        )
    };
    server.ok_stdin(&["apply", "-f", "-"], &by_label("80"));
    server.eventually(60, "api → db to be allowed", || reaches(&server, "prod", "api", &db).then_some(()));
    assert!(!reaches(&server, "dev", "client", &db), "client has no role=api");

    // Allow by namespace: only once dev carries the label.
    server.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: from-dev, namespace: prod}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: dev}}}]
",
    );
    assert!(!reaches(&server, "dev", "client", &db), "dev is not labelled yet");
    server.ok(&["label", "namespace", "dev", "team=dev"]);
    server.eventually(60, "client → db to be allowed", || reaches(&server, "dev", "client", &db).then_some(()));

    // By port: another port denies api, the named port `http` (db's 80) allows it again.
    server.ok_stdin(&["apply", "-f", "-"], &by_label("8080"));
    server.eventually(60, "api → db:80 to be denied", || (!reaches(&server, "prod", "api", &db)).then_some(()));
    server.ok_stdin(&["apply", "-f", "-"], &by_label("http"));
    server.eventually(60, "api → db:http to be allowed", || reaches(&server, "prod", "api", &db).then_some(()));

    // Deleting the policies lifts the isolation.
    server.ok(&["-n", "prod", "delete", "networkpolicy", "--all"]);
    server.ok(&["label", "namespace", "dev", "team-"]);
    server.eventually(60, "client → db to be allowed without policies", || {
        reaches(&server, "dev", "client", &db).then_some(())
    });
}
