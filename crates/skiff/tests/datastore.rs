//! `skiff datastore`: migrating a cluster from the embedded store to a real etcd, and saving
//! and restoring snapshots, each on real `skiff server` processes driven with kubectl.

mod common;

use std::process::{Command, Output};

use common::{Etcd, Server};

fn skiff(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skiff")).args(args).output().expect("running skiff")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_migrated_cluster_serves_the_same_objects_and_credentials_from_etcd() {
    let mut s = Server::start();
    s.ok(&["create", "namespace", "shop"]);
    s.ok(&["-n", "shop", "create", "configmap", "cart", "--from-literal=items=3"]);
    s.ok(&["-n", "shop", "create", "secret", "generic", "db", "--from-literal=password=hunter2"]);
    s.ok(&["-n", "shop", "create", "deployment", "web", "--image=busybox:1.36", "--replicas=0"]);
    s.ok(&["-n", "shop", "create", "serviceaccount", "robot"]);
    let token = s.ok(&["-n", "shop", "create", "token", "robot", "--duration=1h"]).trim().to_string();
    let cm_uid = uid_of(&s, "shop", "configmap", "cart").unwrap();
    let deploy_uid = s.json(&["-n", "shop", "get", "deployment", "web"])["metadata"]["uid"].clone();
    let data = s.dir.path().join("data");
    let data = data.to_str().unwrap();
    let etcd = Etcd::start();

    // A running server's data dir is refused, and nothing is written to etcd.
    let out = skiff(&["datastore", "migrate", "--quiet", "--data-dir", data, "--datastore-endpoint", &etcd.url]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("another skiff server"), "{}", stderr(&out));

    assert!(s.stop().success());
    let out = skiff(&["datastore", "migrate", "--quiet", "--data-dir", data, "--datastore-endpoint", &etcd.url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("verified them in"), "{}", stderr(&out));

    // A second migration finds a non-empty target and refuses.
    let out = skiff(&["datastore", "migrate", "--quiet", "--data-dir", data, "--datastore-endpoint", &etcd.url]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("already holds"), "{}", stderr(&out));

    // The embedded database is set aside, so only etcd can answer what follows.
    std::fs::rename(s.dir.path().join("data/db"), s.dir.path().join("db-before-migration")).unwrap();
    s.respawn_with(&["--datastore-endpoint", &etcd.url]);
    assert_eq!(uid_of(&s, "shop", "configmap", "cart"), Some(cm_uid));
    assert_eq!(s.json(&["-n", "shop", "get", "deployment", "web"])["metadata"]["uid"], deploy_uid);
    assert_eq!(s.ok(&["-n", "shop", "get", "secret", "db", "-o", "jsonpath={.data.password}"]), "aHVudGVyMg==");
    // The token issued before the move still authenticates: the signing key came along.
    let who = Command::new("kubectl")
        .args(["--kubeconfig=/dev/null", "--insecure-skip-tls-verify", "--token", &token])
        .arg(format!("--server=https://127.0.0.1:{}", s.port))
        .args(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&who.stdout), "system:serviceaccount:shop:robot", "{}", stderr(&who));
    // etcd's own snapshot, which etcd's tools read.
    let snap = s.dir.path().join("etcd.snapshot");
    let out = skiff(&["datastore", "snapshot", "save", snap.to_str().unwrap(), "--datastore-endpoint", &etcd.url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "status", "-w", "json"])
        .arg(&snap)
        .output()
        .expect("etcdctl (etcd-client) is installed");
    let status: serde_json::Value =
        serde_json::from_slice(&status.stdout).unwrap_or_else(|_| panic!("{}", stderr(&status)));
    assert!(status["totalKey"].as_u64().unwrap() > 10, "{status}");
    // And the cluster is writable on its new store.
    s.ok(&["-n", "shop", "create", "configmap", "after-move"]);
    assert!(!s.dir.path().join("data/db/state.db").exists(), "the server must not have opened an embedded store");
}

fn uid_of(s: &Server, ns: &str, kind: &str, name: &str) -> Option<String> {
    let out = s.kubectl(&["-n", ns, "get", kind, name, "-o", "jsonpath={.metadata.uid}"]);
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_restored_snapshot_puts_the_embedded_store_back_to_the_state_it_saved() {
    let mut s = Server::start();
    s.ok(&["create", "configmap", "before"]);
    let before = uid_of(&s, "default", "configmap", "before").unwrap();
    let data = s.dir.path().join("data");
    let data = data.to_str().unwrap();
    let snap = s.dir.path().join("snap.db");
    let snap = snap.to_str().unwrap();
    // Saved while the server runs.
    let out = skiff(&["datastore", "snapshot", "save", snap, "--data-dir", data]);
    assert!(out.status.success(), "{}", stderr(&out));
    // An existing file is never overwritten.
    let out = skiff(&["datastore", "snapshot", "save", snap, "--data-dir", data]);
    assert!(!out.status.success());
    s.ok(&["create", "configmap", "after"]);
    s.ok(&["delete", "configmap", "before"]);

    // Restoring under a running server is refused.
    let out = skiff(&["datastore", "snapshot", "restore", snap, "--data-dir", data]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("another skiff server"), "{}", stderr(&out));
    assert!(s.stop().success());
    // A file that is not a snapshot changes nothing.
    let junk = s.dir.path().join("junk.db");
    std::fs::write(&junk, b"not a database").unwrap();
    let out = skiff(&["datastore", "snapshot", "restore", junk.to_str().unwrap(), "--data-dir", data]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not a snapshot"), "{}", stderr(&out));

    let out = skiff(&["datastore", "snapshot", "restore", snap, "--data-dir", data]);
    assert!(out.status.success(), "{}", stderr(&out));
    s.spawn();
    assert_eq!(uid_of(&s, "default", "configmap", "before").as_deref(), Some(before.as_str()));
    assert_eq!(uid_of(&s, "default", "configmap", "after"), None);
    // The replaced database is kept beside the restored one.
    let kept = std::fs::read_dir(s.dir.path().join("data/db"))
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with("state.db.before-restore-"));
    assert!(kept);
}
