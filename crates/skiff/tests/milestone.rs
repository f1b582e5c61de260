//! The first milestone (issue 8), end to end: the seed's Deployment applied with the real
//! `kubectl` runs on a real containerd through `skiff server`'s local node, survives a
//! `kill -9` of the server, and the unchanged seed manifest reports ImagePullBackOff offline —
//! once on the embedded store and once with `--datastore-endpoint` pointing at a real etcd.
//!
//! Needs root plus containerd, runc, the CNI plugins and busybox-static (`scripts/install-deps`);
//! fails loudly without them.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What the cluster looked like, for a failure message: pods, events and the server log's end.
fn diagnostics(server: &Server) -> String {
    let pods = server.kubectl(&["get", "pods", "-A", "-o", "wide"]);
    let events = server.kubectl(&["get", "events", "-A", "--sort-by=.metadata.creationTimestamp"]);
    let log = server.log();
    let tail: Vec<&str> = log.lines().rev().take(60).collect();
    format!(
        "\n--- pods ---\n{}\n--- events ---\n{}\n--- server log (end) ---\n{}",
        String::from_utf8_lossy(&pods.stdout),
        String::from_utf8_lossy(&events.stdout),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    )
}

/// Polls `f` until it returns `Some` or `secs` pass; the failure message carries the
/// cluster's [`diagnostics`].
fn eventually_in<T>(server: &Server, secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {secs}s waiting for {what}{}", diagnostics(server));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `kubectl rollout status` of the offline Deployment (3 minutes at most).
fn rollout_status(server: &Server) {
    let out = server.kubectl(&["rollout", "status", "deployment/nginx-deployment", "--timeout=180s"]);
    assert!(
        out.status.success(),
        "rollout status failed: {}{}",
        String::from_utf8_lossy(&out.stderr),
        diagnostics(server)
    );
}

/// The HTTP status line of `GET /` on `ip:80`, if the pod answers.
fn http_get(ip: &str) -> Option<String> {
    let addr = format!("{ip}:80").parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.write_all(format!("GET / HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.lines().next().map(str::to_string)
}

fn pod_ips(server: &Server, ns: &str) -> Vec<String> {
    server
        .ok(&["-n", ns, "get", "pods", "-l", "app=nginx", "-o", "jsonpath={.items[*].status.podIP}"])
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn require_runtime() {
    let missing: Vec<&str> = ["/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/bin/busybox"]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    assert!(missing.is_empty(), "missing {missing:?}: run scripts/install-deps (as root)");
    assert!(rustix_is_root(), "the local node runs containers: run the tests as root");
}

fn rustix_is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// The local node's kubelet port (10250) and bridge are per host: one walk-through at a time.
static ONE_NODE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_seed_deployment_runs_on_containerd_and_survives_a_server_kill() {
    let _one = ONE_NODE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    walk_through(&[]);
}

#[test]
fn the_same_walk_through_runs_on_an_etcd_datastore() {
    let _one = ONE_NODE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let etcd = common::Etcd::start();
    walk_through(&["--datastore-endpoint", &etcd.url]);
}

/// The README's walk-through against `skiff server <extra>` with its local node.
fn walk_through(extra: &[&str]) {
    require_runtime();
    let images = tempfile::tempdir().unwrap();
    let built = Command::new(repo_root().join("scripts/images/build.sh")).arg(images.path()).output().unwrap();
    assert!(built.status.success(), "building the offline images: {}", String::from_utf8_lossy(&built.stderr));

    let mut server = Server::start_with_agent(extra);
    let data_dir = server.dir.path().join("data");
    let node = eventually_in(&server, 60, "the local node to be Ready", || {
        let out = server.kubectl(&[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{end}",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.ends_with("=True").then(|| text.trim_end_matches("=True").to_string())
    });
    let import = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["images", "import", "--data-dir"])
        .arg(&data_dir)
        .arg(images.path().join("busybox.tar"))
        .output()
        .unwrap();
    assert!(import.status.success(), "skiff images import: {}", String::from_utf8_lossy(&import.stderr));

    // The offline variant of the seed's Deployment: Deployment → ReplicaSet → Pods → scheduler →
    // kubelet → containerd.
    let offline = repo_root().join("examples/nginx-deployment-offline.yaml");
    server.ok(&["apply", "-f", offline.to_str().unwrap()]);
    rollout_status(&server);
    let wide = server.ok(&["get", "pods", "-o", "wide"]);
    assert_eq!(wide.matches("Running").count(), 3, "3 Running pods: {wide}");
    assert!(wide.contains(&node), "pods run on the local node {node}: {wide}");
    let ips = pod_ips(&server, "default");
    assert_eq!(ips.len(), 3, "3 pod IPs: {ips:?}");
    for ip in &ips {
        let status = eventually_in(&server, 60, "the pod to answer HTTP", || http_get(ip));
        assert!(status.contains("200"), "GET http://{ip}/ answered {status:?}");
    }
    server.ok(&["logs", "deployment/nginx-deployment"]);
    let describe = server.ok(&["describe", "pods", "-l", "app=nginx"]);
    for reason in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(describe.contains(reason), "describe shows {reason}: {describe}");
    }
    let events = server.ok(&["get", "events", "--sort-by=.metadata.creationTimestamp"]);
    for reason in ["ScalingReplicaSet", "SuccessfulCreate", "Scheduled", "Started"] {
        assert!(events.contains(reason), "events show {reason}: {events}");
    }

    // The unchanged seed manifest: no registry is reachable, so the image cannot be pulled.
    server.ok(&["create", "namespace", "seed"]);
    let seed = repo_root().join("examples/nginx-deployment.yaml");
    server.ok(&["-n", "seed", "apply", "-f", seed.to_str().unwrap()]);
    eventually_in(&server, 240, "the seed's pods to report an image pull error", || {
        let pods = server.ok(&["-n", "seed", "get", "pods"]);
        (pods.matches("ErrImagePull").count() + pods.matches("ImagePullBackOff").count() == 3).then_some(())
    });

    // The seed's pod-reader Role, bound to user jane: `kubectl auth can-i` answers as it says.
    let role = repo_root().join("examples/pod-reader-role.yaml");
    server.ok(&["apply", "-f", role.to_str().unwrap()]);
    server.ok(&["create", "rolebinding", "read-pods", "--role=pod-reader", "--user=jane"]);
    assert_eq!(server.ok(&["auth", "can-i", "list", "pods", "--as", "jane"]).trim(), "yes");
    let denied = server.kubectl(&["auth", "can-i", "delete", "pods", "--as", "jane"]);
    assert_eq!(String::from_utf8_lossy(&denied.stdout).trim(), "no");

    // kill -9 the server and start it again: objects are kept, pods keep running (adopted).
    let before = server.ok(&[
        "get",
        "pods",
        "-l",
        "app=nginx",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}/{.status.containerStatuses[0].containerID} {end}",
    ]);
    server.kill9();
    server.spawn();
    rollout_status(&server);
    let after = eventually_in(&server, 120, "the pods to be reported with their containers", || {
        let out = server.ok(&[
            "get",
            "pods",
            "-l",
            "app=nginx",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}/{.status.containerStatuses[0].containerID} {end}",
        ]);
        (out == before).then_some(out)
    });
    assert_eq!(after, before, "the same pods and containers after the restart");
    for ip in &ips {
        let status = eventually_in(&server, 60, "the pod to answer HTTP after the restart", || http_get(ip));
        assert!(status.contains("200"), "GET http://{ip}/ answered {status:?} after the restart");
    }

    // Clean up the host: delete the workloads, wait for the pods to go, stop the server.
    server.ok(&["delete", "namespace", "seed", "--wait=false"]);
    server.ok(&["delete", "deployment", "nginx-deployment"]);
    eventually_in(&server, 180, "the pods to be deleted", || {
        let pods = server.ok(&["get", "pods", "-A", "-o", "name"]);
        pods.trim().is_empty().then_some(())
    });
    server.stop();
}
