//! `kubectl exec`, `kubectl attach` and `kubectl port-forward` end to end: the real kubectl against `skiff server`
//! with its local node on a real containerd, through the API server's `pods/exec` and
//! `pods/portforward` to the kubelet and the runtime's streaming server.
//!
//! kubectl 1.30+ execs over WebSocket `v5.channel.k8s.io` (translated to SPDY by the kubelet);
//! kubectl 1.29 uses SPDY, relayed as is; port-forward falls back from WebSocket to SPDY.
//! Needs root plus containerd, runc, the CNI plugins and busybox-static (`scripts/install-deps`).

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Server;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// kubectl 1.29, which execs over SPDY only (bundled next to the version-picking `kubectl`).
const KUBECTL_1_29: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.29";

fn require_runtime() {
    let missing: Vec<&str> = ["/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/bin/busybox"]
        .into_iter()
        .filter(|p| !Path::new(p).exists())
        .collect();
    assert!(missing.is_empty(), "missing {missing:?}: run scripts/install-deps (as root)");
    let uid = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert_eq!(uid.ok().as_deref(), Some("0"), "the local node runs containers: run the tests as root");
}

/// Runs `kubectl` (`bin`) against `server` with `input` on stdin, killed after 60 s so that a
/// session that never ends fails the test instead of hanging it.
fn run(server: &Server, bin: &str, args: &[&str], input: Option<&str>) -> Output {
    let mut child = Command::new("timeout")
        .args(["60", bin, "--kubeconfig"])
        .arg(server.kubeconfig())
        .arg("--cache-dir")
        .arg(server.dir.path().join(format!("cache-{}", bin.rsplit('/').next().unwrap_or("kubectl"))))
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kubectl");
    if let Some(input) = input {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The HTTP status line of `GET /` on `127.0.0.1:port`, if something answers.
fn http_get(port: u16) -> Option<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.lines().next().map(str::to_string)
}

/// Execs `args` with `bin`, checking stdout, the exit status and, for failures, kubectl's
/// `command terminated with exit code N` message.
fn check_exec(server: &Server, bin: &str, args: &[&str], input: Option<&str>, stdout: &str, code: i32) {
    let out = run(server, bin, args, input);
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(code), "{bin} {args:?}: stdout {o:?}, stderr {e:?}");
    assert_eq!(o, stdout, "{bin} {args:?}: stderr {e:?}");
    if code != 0 {
        assert!(e.contains(&format!("command terminated with exit code {code}")), "{bin} {args:?}: stderr {e:?}");
    }
}

/// Reads one line from stdin (open until the first attach ends), answers it and exits.
const ATTACH_POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: reader
spec:
  restartPolicy: Never
  containers:
  - name: reader
    image: skiff.local/busybox:1.35
    command: [sh, -c, 'read line; echo \"got $line\"']
    stdin: true
    stdinOnce: true
";

/// Prints a line a second for 15 s, then exits (ending any attach session).
const TICKER_POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: ticker
spec:
  restartPolicy: Never
  containers:
  - name: ticker
    image: skiff.local/busybox:1.35
    command: [sh, -c, 'for i in $(seq 1 15); do echo tick $i; sleep 1; done; echo done']
";

#[test]
fn kubectl_exec_and_port_forward_reach_a_container_on_containerd() {
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

    // The image's default command serves HTTP on port 80.
    server.ok(&["run", "box", "--image=skiff.local/busybox:1.35", "--restart=Never"]);
    server.ok(&["wait", "--for=condition=Ready", "pod/box", "--timeout=180s"]);

    // The version-matched kubectl (1.33): WebSocket v5.channel.k8s.io.
    check_exec(&server, "kubectl", &["exec", "box", "--", "echo", "hi"], None, "hi\n", 0);
    let failing = ["exec", "box", "--", "sh", "-c", "echo out; echo err >&2; exit 3"];
    check_exec(&server, "kubectl", &failing, None, "out\n", 3);
    let err = text(&run(&server, "kubectl", &failing, None).stderr);
    assert!(err.contains("err\n"), "stderr is relayed: {err:?}");
    // Interactive stdin: cat ends only when kubectl half-closes stdin at EOF.
    check_exec(&server, "kubectl", &["exec", "-i", "box", "--", "cat"], Some("hello\nworld\n"), "hello\nworld\n", 0);
    let missing = run(&server, "kubectl", &["exec", "box", "-c", "nope", "--", "true"], None);
    assert!(!missing.status.success(), "an unknown container is refused");

    // kubectl 1.29: SPDY, relayed to the runtime unchanged.
    if Path::new(KUBECTL_1_29).exists() {
        check_exec(&server, KUBECTL_1_29, &["exec", "box", "--", "sh", "-c", "echo spdy; exit 2"], None, "spdy\n", 2);
        check_exec(&server, KUBECTL_1_29, &["exec", "-i", "box", "--", "cat"], Some("over spdy\n"), "over spdy\n", 0);
    } else {
        eprintln!("{KUBECTL_1_29} is not installed: the SPDY exec path is not exercised");
    }

    // attach: a container reading one line from its stdin (stdinOnce) answers it on stdout
    // and exits, which ends the session.
    server.ok_stdin(&["create", "-f", "-"], ATTACH_POD);
    server.ok(&["wait", "--for=condition=Ready", "pod/reader", "--timeout=180s"]);
    let out = run(&server, "kubectl", &["attach", "-i", "reader", "-c", "reader"], Some("hello attach\n"));
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(o.contains("got hello attach"), "kubectl attach: stdout {o:?}, stderr {e:?}");
    // A container printing output: attach without stdin relays what it prints from then on,
    // until it exits.
    server.ok_stdin(&["create", "-f", "-"], TICKER_POD);
    server.ok(&["wait", "--for=condition=Ready", "pod/ticker", "--timeout=180s"]);
    let out = run(&server, "kubectl", &["attach", "ticker"], None);
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(o.contains("tick 15\n") && o.ends_with("done\n"), "kubectl attach: stdout {o:?}, stderr {e:?}");

    // port-forward: the WebSocket tunnel is refused, kubectl falls back to SPDY.
    let port = common::free_port();
    let mut forward = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .arg("--cache-dir")
        .arg(server.dir.path().join("cache-kubectl"))
        .args(["port-forward", "pod/box", &format!("{port}:80")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = http_get(port).filter(|s| s.contains("200")) {
            break Some(s);
        }
        if Instant::now() > deadline || forward.try_wait().ok().flatten().is_some() {
            break None;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let _ = forward.kill();
    let out = forward.wait_with_output().unwrap();
    assert!(status.is_some(), "GET through kubectl port-forward: {}", text(&out.stderr));
}
