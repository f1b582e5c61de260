//! Secrets encrypted at rest (`--encryption-provider-config`), read back from a real etcd with
//! `etcdctl`: the stored bytes carry kube-apiserver's `k8s:enc:<provider>:v1:<key>:` prefix,
//! other resources stay plain, and a key rotation by reordering the providers keeps every
//! Secret readable.

mod common;

use std::process::Command;

use common::{Etcd, Server};

fn etcd_value(etcd: &Etcd, key: &str) -> Vec<u8> {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &etcd.url, "get", key, "--print-value-only"])
        .output()
        .expect("etcdctl (Debian's etcd-client)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

const KEY1: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI="; // 32 bytes
const KEY2: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXphYmNkZWY="; // 32 bytes

fn config(providers: &str) -> String {
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n{providers}"
    )
}

#[test]
fn secrets_are_encrypted_in_etcd_and_stay_readable_across_a_key_rotation() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("encryption.yaml");
    std::fs::write(
        &cfg,
        config(&format!("      - aescbc: {{keys: [{{name: key1, secret: {KEY1}}}]}}\n      - identity: {{}}\n")),
    )
    .unwrap();
    let cfg_arg = cfg.to_str().unwrap().to_string();
    let mut server = Server::start_with(&["--datastore-endpoint", &etcd.url, "--encryption-provider-config", &cfg_arg]);

    server.ok(&["create", "secret", "generic", "one", "--from-literal=password=hunter2"]);
    server.ok(&["create", "configmap", "plain", "--from-literal=k=visible"]);
    let raw = etcd_value(&etcd, "/registry/secrets/default/one");
    assert!(raw.starts_with(b"k8s:enc:aescbc:v1:key1:"), "{}", String::from_utf8_lossy(&raw));
    assert!(!String::from_utf8_lossy(&raw).contains("aHVudGVyMg"), "the secret's data is not in the clear");
    assert!(String::from_utf8_lossy(&etcd_value(&etcd, "/registry/configmaps/default/plain")).contains("visible"));
    assert_eq!(server.ok(&["get", "secret", "one", "-o", "jsonpath={.data.password}"]), "aHVudGVyMg==");

    // Rotation: a new key first, the old one still listed for reads.
    std::fs::write(
        &cfg,
        config(&format!(
            "      - aesgcm: {{keys: [{{name: key2, secret: {KEY2}}}]}}\n      - aescbc: {{keys: [{{name: key1, secret: {KEY1}}}]}}\n"
        )),
    )
    .unwrap();
    server.stop();
    server.spawn();
    server.ok(&["create", "secret", "generic", "two", "--from-literal=password=swordfish"]);
    assert!(etcd_value(&etcd, "/registry/secrets/default/two").starts_with(b"k8s:enc:aesgcm:v1:key2:"));
    assert_eq!(server.ok(&["get", "secret", "one", "-o", "jsonpath={.data.password}"]), "aHVudGVyMg==");
    assert_eq!(server.ok(&["get", "secret", "two", "-o", "jsonpath={.data.password}"]), "c3dvcmRmaXNo");

    // Re-encryption moves the older Secret to the new key; both stay readable.
    assert!(etcd_value(&etcd, "/registry/secrets/default/one").starts_with(b"k8s:enc:aescbc:v1:key1:"));
    let data_dir = server.dir.path().join("data");
    let out = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["secrets-encrypt", "reencrypt", "--data-dir"])
        .arg(&data_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("re-encrypted"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(etcd_value(&etcd, "/registry/secrets/default/one").starts_with(b"k8s:enc:aesgcm:v1:key2:"));
    assert_eq!(server.ok(&["get", "secret", "one", "-o", "jsonpath={.data.password}"]), "aHVudGVyMg==");

    // A configuration that does not validate stops the server, naming the file and the field.
    std::fs::write(&cfg, config("      - aescbc: {keys: [{name: k, secret: c2hvcnQ=}]}\n")).unwrap();
    server.stop();
    let out = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["server", "--disable-agent", "--bind-address", "127.0.0.1", "--https-listen-port"])
        .arg(common::free_port().to_string())
        .arg("--data-dir")
        .arg(dir.path().join("other"))
        .args(["--datastore-endpoint", &etcd.url, "--encryption-provider-config", &cfg_arg])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("encryption.yaml") && err.contains("secret is not of the expected length"), "{err}");
}
