//! Several servers, one cluster: a second `skiff server` on the first one's etcd, started with
//! its token, adopts the cluster's CA and service-account key from the datastore, so both serve
//! one cluster; a server with another token is refused and writes nothing.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Etcd, Server, free_port};

fn read(server: &Server, rel: &str) -> String {
    std::fs::read_to_string(server.dir.path().join("data").join(rel)).unwrap()
}

/// `kubectl` with `server`'s kubeconfig but against `other`'s port.
fn kubectl_via(server: &Server, other: &Server, args: &[&str]) -> std::process::Output {
    let mut a = vec!["--server".to_string(), format!("https://127.0.0.1:{}", other.port)];
    a.extend(args.iter().map(|s| s.to_string()));
    server.kubectl(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn a_second_server_with_the_token_serves_the_same_cluster_and_a_wrong_token_is_refused() {
    let etcd = Etcd::start();
    let first = Server::start_with(&["--datastore-endpoint", &etcd.url]);
    let token = read(&first, "token").trim().to_string();
    let second = Server::start_with(&["--datastore-endpoint", &etcd.url, "--token", &token]);

    // One CA and one service-account key; each server has its own serving certificate.
    assert_eq!(read(&first, "tls/ca.crt"), read(&second, "tls/ca.crt"));
    assert_eq!(read(&first, "tls/service-account.key"), read(&second, "tls/service-account.key"));
    assert_ne!(read(&first, "tls/serving.crt"), read(&second, "tls/serving.crt"));

    // The first server's admin credentials work on the second and the other way round; a write
    // through one is read through the other.
    first.ok(&["create", "configmap", "shared", "--from-literal=k=v"]);
    let out = kubectl_via(&first, &second, &["get", "configmap", "shared", "-o", "jsonpath={.data.k}"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v");
    let out = kubectl_via(&second, &first, &["get", "configmap", "shared"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // A service-account token issued by the first server authenticates on the second.
    let sa_token = first.ok(&["create", "token", "default"]).trim().to_string();
    // (A kubeconfig without the admin's client certificate, which would authenticate first.)
    let ca = second.dir.path().join("data/tls/ca.crt");
    let out = Command::new("kubectl")
        .args(["--kubeconfig", "/dev/null", "--server", &format!("https://127.0.0.1:{}", second.port)])
        .arg(format!("--certificate-authority={}", ca.display()))
        .args(["--token", &sa_token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "system:serviceaccount:default:default");

    // A third server with another token stops with a clear error and writes no certificate.
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["server", "--disable-agent", "--bind-address", "127.0.0.1", "--https-listen-port"])
        .arg(free_port().to_string())
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--datastore-endpoint", &etcd.url, "--token", "not-the-token"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a server with a wrong token kept running");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("--token"), "{err}");
    assert!(!dir.path().join("tls/ca.crt").exists(), "nothing written");
    assert!(!dir.path().join("tls/serving.crt").exists(), "nothing written");
}
