//! `skiff killall` on a real host: a process in its own network namespace, with that namespace
//! bind-mounted under a data dir (as containerd's CRI plugin does for pods), is killed and the
//! mount is detached, so the namespace and its addresses disappear; the node's bridge is
//! deleted. Needs root, `unshare` and `ip`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn is_mounted(path: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let p = path.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(&*p))
}

#[test]
fn killall_kills_processes_in_mounted_pod_namespaces_and_detaches_the_mounts() {
    let uid = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert_eq!(uid.as_deref().unwrap_or(""), "0", "needs root (network namespaces and mounts)");
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::canonicalize(dir.path()).unwrap();
    // A "pod": sleep in a new network namespace, started from outside the data dir so only its
    // namespace ties it to the node.
    let mut pod = Command::new("unshare")
        .args(["--net", "sleep", "600"])
        .stdin(Stdio::null())
        .spawn()
        .expect("unshare --net sleep");
    let pid = pod.id();
    let netns = data.join("agent/containerd/state/io.containerd.grpc.v1.cri/netns/cni-test");
    std::fs::create_dir_all(netns.parent().unwrap()).unwrap();
    std::fs::write(&netns, b"").unwrap();
    // unshare forks nothing with a bare command: the child is sleep itself once exec'd; wait
    // until its namespace differs from ours, then bind-mount it like containerd does.
    let deadline = Instant::now() + Duration::from_secs(10);
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    loop {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net"));
        if theirs.as_ref().is_ok_and(|t| *t != ours) {
            break;
        }
        assert!(Instant::now() < deadline, "the process never entered its own network namespace");
        std::thread::sleep(Duration::from_millis(20));
    }
    let bind = Command::new("mount").arg("--bind").arg(format!("/proc/{pid}/ns/net")).arg(&netns).status().unwrap();
    assert!(bind.success(), "bind-mounting the namespace");
    assert!(is_mounted(&netns));

    let report = skiff_kubelet::killall::killall(&data);

    assert!(report.killed.contains(&(pid as i32)), "the pod's process was killed: {report:?}");
    let status = pod.wait().unwrap();
    assert!(!status.success(), "sleep 600 ended by a signal, not normally");
    assert!(report.unmounted.contains(&netns), "the namespace mount was detached: {report:?}");
    assert!(!is_mounted(&netns));
}

fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", "dev", name])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[test]
fn killall_deletes_the_nodes_bridge_but_not_a_bridge_of_another_pod_cidr() {
    let n = std::process::id() % 200 + 20;
    for (bridge_cidr, node_cidr, deleted) in [(n, n, true), (n, n + 1, false)] {
        let dir = tempfile::tempdir().unwrap();
        let bridge = format!("skk{n}");
        let mut cfg = skiff_kubelet::containerd::ContainerdConfig::for_data_dir(
            &dir.path().join("agent"),
            &format!("10.214.{node_cidr}.0/24"),
            skiff_kubelet::sandbox_image::SANDBOX_IMAGE,
        );
        cfg.bridge_name = bridge.clone();
        cfg.write_files().unwrap();
        let ip = |args: &[&str]| assert!(Command::new("ip").args(args).status().unwrap().success(), "ip {args:?}");
        ip(&["link", "add", "name", &bridge, "type", "bridge"]);
        ip(&["addr", "add", &format!("10.214.{bridge_cidr}.1/24"), "dev", &bridge]);

        let report = skiff_kubelet::killall::killall(dir.path());

        assert_eq!(!link_exists(&bridge), deleted, "bridge with 10.214.{bridge_cidr}.1, node {node_cidr}: {report:?}");
        assert_eq!(report.deleted_links.contains(&bridge), deleted, "{report:?}");
        if link_exists(&bridge) {
            ip(&["link", "del", &bridge]);
        }
    }
}
