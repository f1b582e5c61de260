//! End-to-end: the real `skiff server --disable-agent` binary driven by the real `kubectl`.
//!
//! Each test starts its own server on a free loopback port with a temp data dir, and gives
//! kubectl its own `--cache-dir`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Server;

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 3
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
        ports:
        - containerPort: 80
";

#[test]
fn kubectl_create_get_apply_patch_replace_delete() {
    let s = Server::start();
    assert!(s.ok(&["version"]).contains("Server Version: v1.33"));

    // create / get in every output format.
    s.ok(&["create", "configmap", "c1", "--from-literal=k=v"]);
    let json: serde_json::Value = serde_json::from_str(&s.ok(&["get", "configmap", "c1", "-o", "json"])).unwrap();
    assert_eq!(json["data"]["k"], "v");
    assert!(s.ok(&["get", "configmap", "c1", "-o", "yaml"]).contains("name: c1"));
    assert_eq!(s.ok(&["get", "configmap", "c1", "-o", "jsonpath={.data.k}"]), "v");
    assert!(s.ok(&["get", "configmaps"]).contains("c1"));

    // apply: create, then update through a strategic merge patch.
    assert!(s.ok_stdin(&["apply", "-f", "-"], DEPLOYMENT).contains("deployment.apps/web created"));
    let changed = DEPLOYMENT.replace("replicas: 3", "replicas: 5").replace("nginx:1.25", "nginx:1.27");
    assert!(s.ok_stdin(&["apply", "-f", "-"], &changed).contains("deployment.apps/web configured"));
    assert_eq!(
        s.ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image} {.metadata.generation}"
        ]),
        "5 nginx:1.27 2"
    );
    // Defaults are applied server-side.
    assert_eq!(
        s.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.strategy.type} {.spec.revisionHistoryLimit}"]),
        "RollingUpdate 10"
    );

    // patch of each type.
    s.ok(&["patch", "deploy", "web", "--type=merge", "-p", r#"{"spec":{"replicas":2}}"#]);
    s.ok(&[
        "patch",
        "deploy",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/tier","value":"front"}]"#,
    ]);
    s.ok(&[
        "patch",
        "deploy",
        "web",
        "--type=strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.28"}]}}}}"#,
    ]);
    assert_eq!(
        s.ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.replicas} {.metadata.labels.tier} {.spec.template.spec.containers[0].image}"
        ]),
        "2 front nginx:1.28"
    );
    s.ok(&["scale", "deploy", "web", "--replicas=4"]);
    s.ok(&["set", "image", "deploy/web", "nginx=nginx:1.29"]);
    s.ok(&["label", "configmap", "c1", "team=a"]);
    s.ok(&["annotate", "configmap", "c1", "note=x"]);
    assert_eq!(
        s.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}"]),
        "4 nginx:1.29"
    );

    // Server-side apply: create, update, and fields no longer applied are removed.
    let ssa =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  labels:\n    keep: a\n    drop: b\ndata:\n  k: v\n";
    assert!(s.ok_stdin(&["apply", "--server-side", "-f", "-"], ssa).contains("serverside-applied"));
    s.ok_stdin(&["apply", "--server-side", "-f", "-"], &ssa.replace("    drop: b\n", "").replace("k: v", "k: w"));
    assert_eq!(s.ok(&["get", "configmap", "ssa", "-o", "jsonpath={.metadata.labels} {.data.k}"]), r#"{"keep":"a"} w"#);

    // replace with a stale resourceVersion → Conflict.
    let stale = s.ok(&["get", "configmap", "c1", "-o", "yaml"]);
    s.ok(&["label", "configmap", "c1", "team=b", "--overwrite"]);
    let out = s.apply_stdin(&["replace", "-f", "-"], &stale);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Conflict") && err.contains("the object has been modified"), "{err}");

    // dry-run=server persists nothing.
    s.ok(&["create", "configmap", "dry", "--from-literal=a=b", "--dry-run=server"]);
    assert!(s.fails(&["get", "configmap", "dry"]).contains("NotFound"));

    // --validate=strict rejects unknown fields.
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: strict\nbogus: 1\n";
    let out = s.apply_stdin(&["create", "--validate=strict", "-f", "-"], bad);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown field \"bogus\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // 422 with causes as kubectl prints them.
    let invalid = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_Valid\n";
    let out = s.apply_stdin(&["create", "-f", "-"], invalid);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is invalid"), "{}", String::from_utf8_lossy(&out.stderr));

    // delete.
    s.ok(&["delete", "configmap", "c1"]);
    assert!(s.fails(&["get", "configmap", "c1"]).contains("NotFound"));
    s.ok(&["delete", "deploy", "web"]);
}

#[test]
fn kubectl_selectors_chunking_discovery_and_explain() {
    let s = Server::start();
    for i in 0..5 {
        s.ok(&["create", "configmap", &format!("c{i}"), "--from-literal=k=v"]);
        s.ok(&["label", "configmap", &format!("c{i}"), &format!("parity={}", if i % 2 == 0 { "even" } else { "odd" })]);
    }
    let names = |args: &[&str]| {
        let mut v: Vec<String> = s.ok(args).lines().map(|l| l.trim_start_matches("configmap/").to_string()).collect();
        v.sort();
        v
    };
    assert_eq!(names(&["get", "cm", "-l", "parity=odd", "-o", "name"]), vec!["c1", "c3"]);
    assert_eq!(names(&["get", "cm", "-l", "parity in (even)", "-o", "name"]), vec!["c0", "c2", "c4"]);
    assert_eq!(names(&["get", "cm", "--field-selector", "metadata.name=c2", "-o", "name"]), vec!["c2"]);
    assert!(s.fails(&["get", "pods", "--field-selector", "spec.bogus=x"]).contains("field label not supported"));
    let chunked = names(&["get", "cm", "-l", "parity", "--chunk-size=2", "-o", "name"]);
    assert_eq!(chunked, vec!["c0", "c1", "c2", "c3", "c4"]);
    assert_eq!(s.ok(&["get", "cm", "--chunk-size=1", "-l", "parity", "-o", "name"]).lines().count(), 5);

    let resources = s.ok(&["api-resources"]);
    for r in ["deployments", "replicasets", "pods", "namespaces", "leases", "clusterroles", "customresourcedefinitions"]
    {
        assert!(resources.contains(r), "{r} missing from api-resources:\n{resources}");
    }
    assert!(s.ok(&["api-versions"]).contains("apps/v1"));
    let explain = s.ok(&["explain", "pods.spec.containers"]);
    assert!(explain.contains("FIELD: containers") || explain.contains("containers"), "{explain}");
    assert!(s.ok(&["explain", "deployments"]).contains("Deployment enables declarative updates"));
    assert!(s.ok(&["get", "ns"]).contains("kube-node-lease"));
}

#[test]
fn kubectl_pages_lists_over_one_snapshot_and_create_refuses_a_resource_version() {
    let s = Server::start();
    for i in 0..5 {
        s.ok(&["create", "configmap", &format!("c{i}"), "--from-literal=k=v"]);
    }
    let names = |list: &serde_json::Value| -> Vec<String> {
        list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
    };
    let raw = |path: &str| -> serde_json::Value { serde_json::from_str(&s.ok(&["get", "--raw", path])).unwrap() };
    let r1 = raw("/api/v1/namespaces/default/configmaps")["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    s.ok(&["create", "configmap", "c5", "--from-literal=k=v"]);
    s.ok(&["delete", "configmap", "c0"]);
    // kubectl's chunked get (limit and continue, no resourceVersion) returns every item.
    let chunked: Vec<String> =
        s.ok(&["get", "cm", "--chunk-size=2", "-o", "name"]).lines().map(str::to_string).collect();
    let whole: Vec<String> = s.ok(&["get", "cm", "--chunk-size=0", "-o", "name"]).lines().map(str::to_string).collect();
    assert_eq!(chunked, whole);
    for n in ["c1", "c2", "c3", "c4", "c5"] {
        assert!(chunked.contains(&format!("configmap/{n}")), "{n} missing from {chunked:?}");
    }
    assert!(!chunked.contains(&"configmap/c0".to_string()));
    // resourceVersion with a limit: the snapshot at it, a page at a time.
    let p1 = raw(&format!("/api/v1/namespaces/default/configmaps?resourceVersion={r1}&limit=2"));
    assert_eq!(names(&p1), ["c0", "c1"]);
    assert_eq!(p1["metadata"]["resourceVersion"], r1.as_str());
    let total = raw(&format!("/api/v1/namespaces/default/configmaps?resourceVersion={r1}&limit=500"))["items"]
        .as_array()
        .unwrap()
        .len() as i64;
    assert_eq!(p1["metadata"]["remainingItemCount"], total - 2);
    let token = p1["metadata"]["continue"].as_str().expect("a continue token").to_string();
    let p2 = raw(&format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}"));
    assert_eq!(names(&p2), ["c2", "c3"]);
    assert_eq!(p2["metadata"]["resourceVersion"], r1.as_str());
    // A create carrying a resourceVersion is refused as kube-apiserver refuses it (kubectl
    // create clears it itself; --raw sends the body as it is).
    let exported = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"exported","resourceVersion":"42"},"data":{"k":"v"}}"#;
    let out = s.apply_stdin(&["create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", "-"], exported);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains("resourceVersion should not be set on objects to be created"), "{err}");
    assert!(s.fails(&["get", "configmap", "exported"]).contains("NotFound"));
    s.ok_stdin(&["create", "-f", "-"], exported);
    assert_ne!(s.ok(&["get", "configmap", "exported", "-o", "jsonpath={.metadata.resourceVersion}"]), "42");
}

#[test]
fn kubectl_get_watch_sees_added_modified_deleted() {
    let s = Server::start();
    // Warm kubectl's version and discovery caches first, so the two kubectl processes below
    // do not race to fill them.
    s.ok(&["get", "configmaps"]);
    let watch_err = std::fs::File::create(s.dir.path().join("watch.err")).unwrap();
    let mut watch = s
        .command(&["get", "configmaps", "--watch", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(watch_err)
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let err_path = s.dir.path().join("watch.err");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen: Vec<String> = Vec::new();
    let mut expect = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                // Table rows: EVENT NAME DATA AGE.
                Ok(line) if line.split_whitespace().take(3).collect::<Vec<_>>().join(" ") == want => return,
                Ok(line) => seen.push(line),
                Err(_) => panic!(
                    "no watch line {want:?} in {seen:?}; kubectl said: {}",
                    std::fs::read_to_string(&err_path).unwrap_or_default()
                ),
            }
        }
    };
    // The watch has started once the header appears... create after a first round-trip.
    s.ok(&["create", "configmap", "w1", "--from-literal=k=one"]);
    expect("ADDED w1 1");
    s.ok(&["patch", "configmap", "w1", "--type=merge", "-p", r#"{"data":{"k":"two","k2":"x"}}"#]);
    expect("MODIFIED w1 2");
    s.ok(&["delete", "configmap", "w1"]);
    expect("DELETED w1 2");
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn sigterm_stops_cleanly_and_restart_keeps_objects_and_certificates() {
    let mut s = Server::start();
    s.ok(&["create", "configmap", "persisted", "--from-literal=k=v"]);
    let ca_before = std::fs::read(s.dir.path().join("data/tls/ca.crt")).unwrap();
    let status = s.stop();
    assert!(status.success(), "exit status {status}: {}", s.log());
    s.spawn();
    assert_eq!(std::fs::read(s.dir.path().join("data/tls/ca.crt")).unwrap(), ca_before);
    assert_eq!(s.ok(&["get", "configmap", "persisted", "-o", "jsonpath={.data.k}"]), "v");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(s.kubeconfig()).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn kubectl_works_against_an_etcd_datastore() {
    let etcd = common::Etcd::start();
    let s = Server::start_with(&["--datastore-endpoint", &etcd.url]);
    assert!(s.ok(&["get", "ns"]).contains("kube-node-lease"));
    s.ok(&["create", "configmap", "e1", "--from-literal=k=v"]);
    assert_eq!(s.ok(&["get", "configmap", "e1", "-o", "jsonpath={.data.k}"]), "v");
    s.ok(&["delete", "configmap", "e1"]);
    assert!(s.fails(&["get", "configmap", "e1"]).contains("NotFound"));
}

#[test]
fn kubectl_works_against_a_tls_etcd_with_client_certificates() {
    use skiff_store::etcd::harness::{EtcdCluster, HarnessOptions, HarnessTls};
    let version = std::process::Command::new("etcd").arg("--version").output();
    assert!(version.is_ok_and(|o| o.status.success()), "etcd is not installed: run scripts/install-deps");
    // A CA, a serving certificate for 127.0.0.1 and a client certificate, made with skiff's PKI.
    let pki_dir = tempfile::tempdir().unwrap();
    skiff_apiserver::pki::Pki::load_or_generate(pki_dir.path(), &["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap();
    let file = |name: &str| pki_dir.path().join(name);
    let tls = HarnessTls {
        ca_file: file("ca.crt"),
        server_cert_file: file("serving.crt"),
        server_key_file: file("serving.key"),
        client_cert_file: file("admin.crt"),
        client_key_file: file("admin.key"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let etcd = runtime
        .block_on(EtcdCluster::start_with(HarnessOptions { tls: Some(tls), ..HarnessOptions::default() }))
        .expect("starting etcd with TLS");
    assert!(etcd.endpoint(0).starts_with("https://"));
    let (ca, cert, key) = (file("ca.crt"), file("admin.crt"), file("admin.key"));
    let s = Server::start_with(&[
        "--datastore-endpoint",
        &etcd.endpoint(0),
        "--etcd-cafile",
        ca.to_str().unwrap(),
        "--etcd-certfile",
        cert.to_str().unwrap(),
        "--etcd-keyfile",
        key.to_str().unwrap(),
    ]);
    s.ok(&["create", "configmap", "over-tls", "--from-literal=k=v"]);
    assert_eq!(s.ok(&["get", "configmap", "over-tls", "-o", "jsonpath={.data.k}"]), "v");
    drop(s);
    drop(etcd);
}
