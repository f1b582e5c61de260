//! The kubelet's pod lifecycle end to end with the real kubectl against `skiff server` and its
//! local node on a real containerd: sidecars (restartable init containers, KEP-753) and
//! `kubectl debug` (ephemeral containers through `pods/ephemeralcontainers`, attached to).
//!
//! Needs root plus containerd, runc, the CNI plugins and busybox-static (`scripts/install-deps`).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::Server;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn require_runtime() {
    let missing: Vec<&str> = ["/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/bin/busybox"]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    assert!(missing.is_empty(), "missing {missing:?}: run scripts/install-deps (as root)");
    let uid = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert_eq!(uid.ok().as_deref(), Some("0"), "the local node runs containers: run the tests as root");
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A web server with a log-shipping sidecar that must be started (its startup probe passes)
/// before the app starts.
const SIDECAR_POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  initContainers:
  - name: shipper
    image: skiff.local/busybox:1.35
    restartPolicy: Always
    command: [sh, -c, 'trap \"exit 0\" TERM; touch /tmp/started; while true; do sleep 1; done']
    startupProbe:
      exec: {command: [cat, /tmp/started]}
      periodSeconds: 1
    readinessProbe:
      exec: {command: [cat, /tmp/started]}
      periodSeconds: 1
  containers:
  - name: web
    image: skiff.local/busybox:1.35
";

/// A Job-like pod: its main container finishes, its sidecar would run forever.
const JOB_POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: batch
spec:
  restartPolicy: Never
  initContainers:
  - name: proxy
    image: skiff.local/busybox:1.35
    restartPolicy: Always
    command: [sh, -c, 'trap \"exit 0\" TERM; while true; do sleep 1; done']
  containers:
  - name: main
    image: skiff.local/busybox:1.35
    command: [sh, -c, 'sleep 2; echo finished']
";

/// Runs kubectl with `input` on stdin, held open until stdout shows `until` (at most 60 s),
/// killed after 90 s so that a session that never ends
/// fails the test instead of hanging it.
fn run_stdin(server: &Server, args: &[&str], input: &str, until: &str) -> Output {
    use std::io::Read;
    let mut child = Command::new("timeout")
        .args(["90", "kubectl", "--kubeconfig"])
        .arg(server.kubeconfig())
        .arg("--cache-dir")
        .arg(server.dir.path().join("kubectl-cache"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kubectl");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    // kubectl reads stdin only once attached; stdin stays open until `until` is printed, so
    // the session never ends on stdin's end before the output is in.
    let _ = stdin.write_all(input.as_bytes());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !text(&seen.lock().unwrap()).contains(until) && std::time::Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(stdin);
    let mut out = child.wait_with_output().expect("kubectl output");
    let _ = reader.join();
    out.stdout = seen.lock().unwrap().clone();
    out
}

#[test]
fn sidecars_run_beside_their_pods_and_kubectl_debug_attaches_an_ephemeral_container() {
    require_runtime();
    let images = tempfile::tempdir().unwrap();
    let built = Command::new(repo_root().join("scripts/images/build.sh")).arg(images.path()).output().unwrap();
    assert!(built.status.success(), "building the offline images: {}", text(&built.stderr));
    let server = Server::start_with_agent(&[]);
    let import = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["images", "import", "--data-dir"])
        .arg(server.dir.path().join("data"))
        .arg(images.path().join("busybox.tar"))
        .output()
        .unwrap();
    assert!(import.status.success(), "skiff images import: {}", text(&import.stderr));

    // The API server accepts restartPolicy Always only on init containers.
    let bad = SIDECAR_POD.replace("  - name: web\n    image", "  - name: web\n    restartPolicy: Always\n    image");
    let out = server.apply_stdin(&["create", "-f", "-"], &bad);
    let err = text(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers"),
        "{err}"
    );

    // 1. A pod with a sidecar becomes Ready; the sidecar keeps running and counts in READY.
    server.ok_stdin(&["create", "-f", "-"], SIDECAR_POD);
    server.ok(&["wait", "--for=condition=Ready", "pod/web", "--timeout=180s"]);
    let pod = server.json(&["get", "pod", "web"]);
    let shipper = &pod["status"]["initContainerStatuses"][0];
    assert_eq!(shipper["name"], "shipper");
    assert_eq!((shipper["ready"].as_bool(), shipper["started"].as_bool()), (Some(true), Some(true)), "{shipper}");
    assert!(shipper["state"]["running"].is_object(), "the sidecar keeps running: {shipper}");
    // Started before the app: the app's container started after the sidecar's.
    let started = |s: &serde_json::Value| s["state"]["running"]["startedAt"].as_str().unwrap_or_default().to_string();
    assert!(started(shipper) <= started(&pod["status"]["containerStatuses"][0]), "{}", pod["status"]);
    let row = server.ok(&["get", "pod", "web", "--no-headers"]);
    assert!(row.split_whitespace().nth(1) == Some("2/2"), "kubectl counts the sidecar: {row}");

    // 2. A Job-like pod completes when its main container finishes; its sidecar is stopped.
    server.ok_stdin(&["create", "-f", "-"], JOB_POD);
    server.eventually(120, "the Job-like pod Succeeded", || {
        (server.ok(&["get", "pod", "batch", "-o", "jsonpath={.status.phase}"]) == "Succeeded").then_some(())
    });
    let batch = server.json(&["get", "pod", "batch"]);
    assert!(batch["status"]["initContainerStatuses"][0]["state"]["terminated"].is_object(), "{}", batch["status"]);

    // 3. kubectl debug: an ephemeral container in web's sandbox, sharing the web container's
    // process namespace (--target), attached to with stdin.
    let out = run_stdin(
        &server,
        &[
            "debug",
            "-i",
            "web",
            "--image=skiff.local/busybox:1.35",
            "--target=web",
            "--container=debugger",
            "--",
            "sh",
            "-c",
            "read line; ps; echo \"got $line\"; read -t 10 rest",
        ],
        "hello debug\n",
        "got hello debug",
    );
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(o.contains("got hello debug"), "kubectl debug: stdout {o:?}, stderr {e:?}");
    assert!(o.contains("httpd"), "the debugger sees the target's processes: stdout {o:?}, stderr {e:?}");
    let pod = server.json(&["get", "pod", "web"]);
    assert_eq!(pod["spec"]["ephemeralContainers"][0]["name"], "debugger");
    assert_eq!(pod["spec"]["ephemeralContainers"][0]["targetContainerName"], "web");
    server.eventually(60, "the debugger's terminated status", || {
        let pod = server.json(&["get", "pod", "web"]);
        pod["status"]["ephemeralContainerStatuses"][0]["state"]["terminated"].is_object().then_some(())
    });

    // Ephemeral containers are only added: removing one through the subresource is refused.
    let out = server.kubectl(&[
        "patch",
        "pod",
        "web",
        "--subresource=ephemeralcontainers",
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/ephemeralContainers/0"}]"#,
    ]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("may not be removed"), "{err}");

    // Deleting the pod stops the app first, then the sidecar (both exit on SIGTERM at once).
    server.ok(&["delete", "pod", "web", "--timeout=60s"]);
}
