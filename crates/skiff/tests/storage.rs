//! Persistent storage end to end with the real kubectl: the default `local-path` StorageClass,
//! StorageClass validation, a PersistentVolume and a matching claim bound by the
//! PersistentVolume controller, and reclaim Retain leaving the volume Released.

mod common;

use common::Server;

fn phase(server: &Server, args: &[&str]) -> String {
    server.json(args)["status"]["phase"].as_str().unwrap_or_default().to_string()
}

const VOLUME: &str = r#"
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-retain
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: manual
  hostPath: {path: /tmp/skiff-storage-test}
"#;

const CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: default
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  resources: {requests: {storage: 1Gi}}
"#;

#[test]
fn the_default_class_is_local_path_and_a_claim_binds_a_matching_volume_which_is_released_on_delete() {
    let server = Server::start();

    let sc = server.ok(&["get", "sc"]);
    let header = sc.lines().next().unwrap();
    assert!(
        header.split_whitespace().eq([
            "NAME",
            "PROVISIONER",
            "RECLAIMPOLICY",
            "VOLUMEBINDINGMODE",
            "ALLOWVOLUMEEXPANSION",
            "AGE"
        ]),
        "{sc}"
    );
    let row: Vec<&str> = sc.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..6],
        ["local-path", "(default)", "skiff.io/local-path", "Delete", "WaitForFirstConsumer", "false"],
        "{sc}"
    );

    // A class without a provisioner is refused with Kubernetes' cause.
    let bad = server.apply_stdin(
        &["create", "-f", "-"],
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: bad}\nreclaimPolicy: Recycle\n",
    );
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("provisioner: Required value"), "{err}");
    assert!(err.contains(r#"reclaimPolicy: Unsupported value: "Recycle""#), "{err}");

    server.ok_stdin(&["apply", "-f", "-"], VOLUME);
    server.ok_stdin(&["apply", "-f", "-"], CLAIM);
    server.eventually(30, "the claim to bind", || (phase(&server, &["get", "pvc", "data"]) == "Bound").then_some(()));
    let pv = server.json(&["get", "pv", "pv-retain"]);
    assert_eq!(pv["status"]["phase"], "Bound");
    assert_eq!(pv["spec"]["claimRef"]["name"], "data");
    assert_eq!(pv["metadata"]["finalizers"], serde_json::json!(["kubernetes.io/pv-protection"]));
    let pvc = server.json(&["get", "pvc", "data"]);
    assert_eq!(pvc["spec"]["volumeName"], "pv-retain");
    assert_eq!(pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"], "yes");
    assert_eq!(pvc["metadata"]["finalizers"], serde_json::json!(["kubernetes.io/pvc-protection"]));
    assert_eq!(pvc["status"]["capacity"]["storage"], "2Gi");

    // No pod uses the claim: its protection finalizer goes and the delete completes.
    server.ok(&["delete", "pvc", "data", "--timeout=30s"]);
    server.eventually(30, "the volume to be Released", || {
        (phase(&server, &["get", "pv", "pv-retain"]) == "Released").then_some(())
    });

    // A claim without a class gets the default one and waits for its first consumer.
    server.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: later}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Gi}}\n",
    );
    assert_eq!(server.json(&["get", "pvc", "later"])["spec"]["storageClassName"], "local-path");
    server.eventually(30, "the WaitForFirstConsumer event", || {
        server
            .ok(&["get", "events", "--field-selector", "involvedObject.name=later"])
            .contains("waiting for first consumer to be created before binding")
            .then_some(())
    });
    assert_eq!(phase(&server, &["get", "pvc", "later"]), "Pending");
}
