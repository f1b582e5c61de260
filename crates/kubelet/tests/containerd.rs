//! Integration test of the pod runtime on a real containerd: the test starts containerd with
//! the agent's generated configuration in a temporary directory, imports the offline test
//! images built by scripts/images/build.sh, and runs pods through `PodWorkers` with an
//! in-memory API host.
//!
//! Requires root, containerd, runc, the CNI plugins (/usr/lib/cni) and busybox-static. When
//! they are missing the test FAILS with instructions — it never passes silently.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, EnvVar, EnvVarSource, ExecAction, GRPCAction, HostPathVolumeSource,
    ObjectFieldSelector, Pod, PodSpec, PodStatus, Probe, Secret, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use skiff_kubelet::containerd::{ContainerdConfig, ManagedContainerd};
use skiff_kubelet::cri::{CriClient, ImageService, RuntimeService};
use skiff_kubelet::host::{PodEvent, PodHost};
use skiff_kubelet::kuberuntime::{self, PodRuntimeConfig};
use skiff_kubelet::pod_workers::PodWorkers;
use skiff_kubelet::{images, logs, sandbox_image};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BUSYBOX: &str = "skiff.local/busybox:1.35";
const PAUSE: &str = skiff_kubelet::sandbox_image::SANDBOX_IMAGE;

/// In-memory API: records statuses, deletions and events; serves ConfigMaps and Secrets.
#[derive(Default)]
struct FakeHost {
    statuses: Mutex<HashMap<String, PodStatus>>,
    deleted: Mutex<HashSet<String>>,
    events: Mutex<Vec<(String, PodEvent)>>,
    config_maps: Mutex<HashMap<String, ConfigMap>>,
}

#[async_trait::async_trait]
impl PodHost for FakeHost {
    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, skiff_kubelet::Error> {
        Ok(self.config_maps.lock().get(&format!("{ns}/{name}")).cloned())
    }
    async fn secret(&self, _ns: &str, _name: &str) -> Result<Option<Secret>, skiff_kubelet::Error> {
        Ok(None)
    }
    async fn service_account_token(
        &self,
        _pod: &Pod,
        _audience: Option<String>,
        _expiration_seconds: i64,
    ) -> Result<Option<String>, skiff_kubelet::Error> {
        Ok(Some("test-token".into()))
    }
    async fn update_pod_status(&self, pod: &Pod, status: &PodStatus) -> Result<(), skiff_kubelet::Error> {
        self.statuses.lock().insert(pod.metadata.uid.clone().unwrap_or_default(), status.clone());
        Ok(())
    }
    async fn delete_pod(&self, pod: &Pod) -> Result<(), skiff_kubelet::Error> {
        self.deleted.lock().insert(pod.metadata.uid.clone().unwrap_or_default());
        Ok(())
    }
    fn record_event(&self, pod: &Pod, event: PodEvent) {
        self.events.lock().push((pod.metadata.uid.clone().unwrap_or_default(), event));
    }
}

impl FakeHost {
    fn status(&self, uid: &str) -> Option<PodStatus> {
        self.statuses.lock().get(uid).cloned()
    }
    fn event_reasons(&self, uid: &str) -> Vec<String> {
        self.events.lock().iter().filter(|(u, _)| u == uid).map(|(_, e)| e.reason.clone()).collect()
    }
}

/// Polls `f` every 100 ms until it returns Some, failing the test after `secs` seconds with
/// `what` and the last status seen.
async fn wait_for<T>(secs: u64, what: &str, host: &FakeHost, uid: &str, mut f: impl FnMut() -> Option<T>) -> T {
    wait_for_async(secs, what, host, uid, || std::future::ready(f())).await
}

/// [`wait_for`] with an asynchronous condition.
async fn wait_for_async<T, F: std::future::Future<Output = Option<T>>>(
    secs: u64,
    what: &str,
    host: &FakeHost,
    uid: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "timed out after {secs}s waiting for {what}\nlast status: {:#?}\nevents: {:?}",
                host.status(uid),
                host.events
                    .lock()
                    .iter()
                    .filter(|(u, _)| u == uid)
                    .map(|(_, e)| format!("{} {}", e.reason, e.message))
                    .collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn require_environment() {
    let is_root = rustix::process::geteuid().is_root();
    let missing: Vec<&str> = [
        ("containerd", "/usr/bin/containerd"),
        ("runc", "/usr/sbin/runc"),
        ("ctr", "/usr/bin/ctr"),
        ("CNI bridge plugin", "/usr/lib/cni/bridge"),
        ("busybox-static", "/bin/busybox"),
    ]
    .iter()
    .filter(|(_, p)| !Path::new(p).exists())
    .map(|(n, _)| *n)
    .collect();
    if !is_root || !missing.is_empty() {
        panic!(
            "this test runs real containers and needs root plus containerd, runc, the CNI plugins and busybox-static \
             (apt-get install -y containerd runc containernetworking-plugins busybox-static); root: {is_root}, missing: {missing:?}"
        );
    }
}

fn pod(name: &str, uid: &str, containers: Vec<Container>, restart_policy: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            restart_policy: Some(restart_policy.into()),
            termination_grace_period_seconds: Some(5),
            node_name: Some("test-node".into()),
            ..Default::default()
        }),
        status: None,
    }
}

fn busybox(name: &str, command: &[&str]) -> Container {
    Container {
        name: name.into(),
        image: Some(BUSYBOX.into()),
        command: (!command.is_empty()).then(|| command.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

fn exec_probe(cmd: &[&str]) -> Probe {
    Probe {
        exec: Some(ExecAction { command: Some(cmd.iter().map(|s| s.to_string()).collect()) }),
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    }
}

/// A pod running the workspace's `skiff-grpc-health-server` on port 50051 (the host's binary
/// and the C libraries it links, mounted read-only into the busybox image): container
/// `server` is gated by a gRPC readiness probe of the whole server (SERVING), container `down`
/// by one of service "down" (NOT_SERVING).
fn grpc_probe_pod() -> Pod {
    let bin = env!("CARGO_BIN_EXE_skiff-grpc-health-server");
    let host_dir = |name: &str, path: &str| Volume {
        name: name.into(),
        host_path: Some(HostPathVolumeSource { path: path.into(), type_: None }),
        ..Default::default()
    };
    let mount = |name: &str, path: &str| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(true),
        ..Default::default()
    };
    let grpc = |service: Option<&str>| Probe {
        grpc: Some(GRPCAction { port: 50051, service: service.map(str::to_string) }),
        period_seconds: Some(1),
        ..Default::default()
    };
    let mut server = busybox("server", &["/grpc-health-server", "50051", "down=NOT_SERVING"]);
    server.volume_mounts = Some(vec![
        mount("bin", "/grpc-health-server"),
        mount("lib", "/lib/x86_64-linux-gnu"),
        mount("lib64", "/lib64"),
    ]);
    server.readiness_probe = Some(grpc(None));
    let mut down = busybox("down", &["/bin/sh", "-c", "exec sleep 3600"]);
    down.readiness_probe = Some(grpc(Some("down")));
    let mut p = pod("grpc", "uid-grpc", vec![server, down], "Always");
    if let Some(spec) = p.spec.as_mut() {
        spec.volumes =
            Some(vec![host_dir("bin", bin), host_dir("lib", "/lib/x86_64-linux-gnu"), host_dir("lib64", "/lib64")]);
    }
    p
}

fn running(status: &PodStatus) -> bool {
    status.phase.as_deref() == Some("Running")
        && status.container_statuses.iter().flatten().all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

async fn http_get(ip: &str, port: u16) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect((ip, port)).await?;
    s.write_all(format!("GET / HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes()).await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

struct Env {
    _dir: tempfile::TempDir,
    containerd: ManagedContainerd,
    bridge: String,
}

impl Env {
    async fn stop(mut self) {
        self.containerd.shutdown().await;
        let _ = std::process::Command::new("ip").args(["link", "del", &self.bridge]).status();
    }
}

/// Runs a WebSocket `v5.channel.k8s.io` exec session against the kubelet endpoint (served on a
/// loopback port): sends `stdin` then the close signal for stdin, and returns the bytes
/// received per channel and the final Status (channel 3) as JSON.
async fn ws_v5_exec(workers: PodWorkers, path: &str, stdin: &[u8]) -> (HashMap<u8, Vec<u8>>, serde_json::Value) {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("local_addr: {e}"));
    let app = skiff_kubelet::server::router(workers);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap_or_else(|e| panic!("request: {e}"));
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        tokio_tungstenite::tungstenite::http::HeaderValue::from_static("v5.channel.k8s.io"),
    );
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect: {e}"));
    let (mut ws, resp) =
        tokio_tungstenite::client_async(req, tcp).await.unwrap_or_else(|e| panic!("WebSocket handshake: {e}"));
    assert_eq!(resp.headers().get("sec-websocket-protocol").and_then(|v| v.to_str().ok()), Some("v5.channel.k8s.io"));
    let mut first = vec![0u8];
    first.extend_from_slice(stdin);
    ws.send(Message::binary(first)).await.unwrap_or_else(|e| panic!("send stdin: {e}"));
    ws.send(Message::binary(vec![255u8, 0])).await.unwrap_or_else(|e| panic!("send close signal: {e}"));
    let mut streams: HashMap<u8, Vec<u8>> = HashMap::new();
    let read = async {
        while let Some(Ok(m)) = ws.next().await {
            match m {
                Message::Binary(b) if !b.is_empty() => streams.entry(b[0]).or_default().extend_from_slice(&b[1..]),
                Message::Close(_) => break,
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read).await.unwrap_or_else(|_| panic!("exec session did not end"));
    server.abort();
    let status = streams.get(&3).and_then(|b| serde_json::from_slice(b).ok()).unwrap_or_default();
    (streams, status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_run_on_real_containerd() {
    require_environment();
    let dir = tempfile::Builder::new().prefix("skiff-kubelet-it").tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let data = dir.path().to_path_buf();

    // Images: built offline from busybox-static.
    let images_dir = data.join("images");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/images/build.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(&images_dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(out.status.success(), "image build failed: {}", String::from_utf8_lossy(&out.stderr));

    // containerd with the agent's config, on a private bridge and CIDR.
    let n = std::process::id() % 200 + 20;
    let bridge = format!("skt{n}");
    let mut cfg = ContainerdConfig::for_data_dir(&data, &format!("10.211.{n}.0/24"), PAUSE);
    cfg.bridge_name = bridge.clone();
    cfg.network_name = format!("skiff-test-{n}");
    let containerd = ManagedContainerd::start(cfg).await.unwrap_or_else(|e| panic!("starting containerd: {e}"));
    let env = Env { _dir: dir, containerd, bridge };
    let socket = env.containerd.socket();
    assert_eq!(images::import_dir(&socket, &images_dir).await, 1, "the busybox test image imports");

    let cri = CriClient::connect(&socket).await.unwrap_or_else(|e| panic!("connecting CRI: {e}"));
    // Nothing provided the sandbox image: the kubelet's built-in one is imported once.
    let ensure = || sandbox_image::ensure_sandbox_image(&cri, &socket, PAUSE, &data);
    assert!(ensure().await.unwrap_or_else(|e| panic!("sandbox image: {e}")), "imported when missing");
    assert!(!ensure().await.unwrap_or_else(|e| panic!("sandbox image: {e}")), "left alone once present");
    let version = cri.version().await.unwrap_or_else(|e| panic!("CRI Version: {e}"));
    assert_eq!(version.runtime_name, "containerd");
    assert!(cri.image_status(BUSYBOX).await.ok().flatten().is_some(), "busybox image is visible through CRI");

    let host = Arc::new(FakeHost::default());
    let rcfg = PodRuntimeConfig {
        node_name: "test-node".into(),
        node_ip: "127.0.0.1".into(),
        root_dir: data.join("kubelet"),
        cgroup_root: format!("/skiff-test-{n}"),
        cluster_dns: vec![],
        cluster_domain: "cluster.local".into(),
        resolv_conf: PathBuf::from("/etc/resolv.conf"),
        allocatable_cpu_millis: 2000,
        memory_capacity: 4 << 30,
        allocatable_ephemeral_storage: 10 << 30,
        runtime_name: version.runtime_name.clone(),
    };
    let workers = PodWorkers::new(cri.clone(), host.clone(), rcfg);
    let pleg = {
        let w = workers.clone();
        tokio::spawn(async move { w.run_pleg().await })
    };

    // 1. An HTTP server pod reaches Running with an IP and serves the page.
    let mut web_container = busybox("web", &[]);
    web_container.ports = Some(vec![ContainerPort { container_port: 80, ..Default::default() }]);
    web_container.env = Some(vec![EnvVar {
        name: "MY_POD".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: "metadata.name".into(), api_version: None }),
            ..Default::default()
        }),
        value: None,
    }]);
    let web = pod("web", "uid-web", vec![web_container], "Always");
    workers.update_pod(web.clone());
    let status = wait_for(60, "web pod Running with an IP", &host, "uid-web", || {
        host.status("uid-web").filter(|s| running(s) && s.pod_ip.is_some())
    })
    .await;
    let ip = status.pod_ip.clone().unwrap_or_default();
    assert!(ip.starts_with(&format!("10.211.{n}.")), "pod IP {ip} comes from the node's pod CIDR");
    let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready").map(|c| c.status.clone());
    assert_eq!(ready.as_deref(), Some("True"));
    let page = wait_for_async(30, "HTTP answer from the pod", &host, "uid-web", || async {
        tokio::time::timeout(Duration::from_secs(2), http_get(&ip, 80)).await.ok()?.ok()
    })
    .await;
    assert!(page.contains("Hello from skiff busybox"), "unexpected page: {page}");
    let reasons = host.event_reasons("uid-web");
    for r in ["Pulled", "Created", "Started"] {
        assert!(reasons.iter().any(|x| x == r), "event {r} recorded; got {reasons:?}");
    }

    // 2. Logs are readable in the CRI format.
    let logger = pod(
        "logger",
        "uid-logger",
        vec![busybox("log", &["/bin/sh", "-c", "echo hello-from-$(MY_NAME); echo to-stderr >&2; exec sleep 3600"])],
        "Always",
    );
    let mut logger = logger;
    if let Some(spec) = logger.spec.as_mut() {
        spec.containers[0].env =
            Some(vec![EnvVar { name: "MY_NAME".into(), value: Some("skiff".into()), value_from: None }]);
    }
    workers.update_pod(logger.clone());
    wait_for(60, "logger Running", &host, "uid-logger", || host.status("uid-logger").filter(running)).await;
    let log_text = wait_for_async(30, "log lines", &host, "uid-logger", || async {
        let path = workers.container_log_file(&logger, "log", false).await.ok().flatten()?;
        let text = String::from_utf8(logs::read_log_file(&path, &logs::LogOptions::default()).ok()?).ok()?;
        text.contains("to-stderr").then_some(text)
    })
    .await;
    assert!(log_text.contains("hello-from-skiff\n"), "env expansion in command and stdout capture: {log_text:?}");
    // The same logs through the kubelet endpoint (as the API server's pods/log calls it).
    let app = skiff_kubelet::server::router(workers.clone());
    let req = axum::http::Request::get("/containerLogs/default/logger/log?tailLines=1")
        .body(axum::body::Body::empty())
        .unwrap_or_else(|e| panic!("request: {e}"));
    let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap_or_else(|e| panic!("router: {e}"));
    assert_eq!(resp.status(), 200);
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap_or_default();
    // stdout and stderr are separate pipes, so the runtime may write either line last: the
    // expected tail is the last line of the file as read above.
    let last_line = log_text.lines().last().map(|l| format!("{l}\n")).unwrap_or_default();
    assert_eq!(String::from_utf8_lossy(&body), last_line, "tailLines=1 returns the last line");
    let req = axum::http::Request::post("/run/default/logger/log?cmd=echo%20ran%20inside")
        .body(axum::body::Body::empty())
        .unwrap_or_else(|e| panic!("request: {e}"));
    let resp = tower::ServiceExt::oneshot(app, req).await.unwrap_or_else(|e| panic!("router: {e}"));
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap_or_default();
    assert_eq!(String::from_utf8_lossy(&body), "ran inside\n");
    // Streaming exec as kubectl 1.30+ does it (WebSocket v5.channel.k8s.io), which the kubelet
    // translates to SPDY for containerd: stdin reaches the process, the v5 close signal ends
    // it, stdout, stderr and the exit code come back.
    let (streams, status) = ws_v5_exec(
        workers.clone(),
        "/exec/default/logger/log?command=sh&command=-c&command=cat%3B+echo+oops+%3E%262%3B+exit+3\
         &stdin=true&stdout=true&stderr=true",
        b"from stdin\n",
    )
    .await;
    assert_eq!(streams.get(&1).map(|b| String::from_utf8_lossy(b).into_owned()).as_deref(), Some("from stdin\n"));
    assert_eq!(streams.get(&2).map(|b| String::from_utf8_lossy(b).into_owned()).as_deref(), Some("oops\n"));
    assert_eq!(status["reason"], "NonZeroExitCode", "status: {status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3", "status: {status}");

    // Started now, checked at deletion (8): one container exits on SIGTERM, one ignores it and
    // must be killed when the deletion's grace period (5 s) ends, not the spec's 600 s.
    let mut graceful = pod(
        "graceful",
        "uid-grace",
        vec![
            busybox("polite", &["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]),
            busybox("stubborn", &["/bin/sh", "-c", "trap '' TERM; while true; do sleep 1; done"]),
        ],
        "Always",
    );
    if let Some(spec) = graceful.spec.as_mut() {
        spec.termination_grace_period_seconds = Some(600);
    }
    workers.update_pod(graceful.clone());

    // 3. A container exiting 1 is restarted with back-off (CrashLoopBackOff).
    let crasher =
        pod("crasher", "uid-crash", vec![busybox("crash", &["/bin/sh", "-c", "echo boom; exit 1"])], "Always");
    workers.update_pod(crasher.clone());
    let s = wait_for(60, "CrashLoopBackOff after a restart", &host, "uid-crash", || {
        host.status("uid-crash").filter(|s| {
            s.container_statuses.iter().flatten().any(|c| {
                c.restart_count >= 1
                    && c.state.as_ref().and_then(|st| st.waiting.as_ref()).and_then(|w| w.reason.as_deref())
                        == Some("CrashLoopBackOff")
            })
        })
    })
    .await;
    let cs = &s.container_statuses.clone().unwrap_or_default()[0];
    let last = cs.last_state.as_ref().and_then(|l| l.terminated.as_ref()).map(|t| t.exit_code);
    assert_eq!(last, Some(1), "lastState shows the failed run");
    wait_for(60, "second restart after the 10 s back-off", &host, "uid-crash", || {
        host.status("uid-crash").filter(|s| s.container_statuses.iter().flatten().any(|c| c.restart_count >= 2))
    })
    .await;
    assert!(host.event_reasons("uid-crash").iter().any(|r| r == "BackOff"), "BackOff event recorded");

    // 4. A restartPolicy Never pod that exits 0 Succeeds.
    let job = pod("job", "uid-job", vec![busybox("once", &["/bin/sh", "-c", "echo done"])], "Never");
    workers.update_pod(job.clone());
    wait_for(60, "job Succeeded", &host, "uid-job", || {
        host.status("uid-job").filter(|s| s.phase.as_deref() == Some("Succeeded"))
    })
    .await;

    // 5. A missing image reports ErrImagePull/ImagePullBackOff with a clear message.
    let mut missing = busybox("nope", &[]);
    missing.image = Some("skiff.local/does-not-exist:1".into());
    let bad = pod("bad-image", "uid-bad", vec![missing], "Always");
    workers.update_pod(bad.clone());
    let s = wait_for(120, "ErrImagePull", &host, "uid-bad", || {
        host.status("uid-bad").filter(|s| {
            s.container_statuses.iter().flatten().any(|c| {
                matches!(
                    c.state.as_ref().and_then(|st| st.waiting.as_ref()).and_then(|w| w.reason.as_deref()),
                    Some("ErrImagePull" | "ImagePullBackOff")
                )
            })
        })
    })
    .await;
    let msg = s.container_statuses.unwrap_or_default()[0]
        .state
        .clone()
        .and_then(|st| st.waiting)
        .and_then(|w| w.message)
        .unwrap_or_default();
    assert!(msg.contains("skiff images import"), "the message explains how to get the image offline: {msg}");

    // 6. A failing liveness probe restarts the container; a readiness probe gates Ready.
    let mut probed =
        busybox("probed", &["/bin/sh", "-c", "touch /tmp/healthy; sleep 2; rm /tmp/healthy; exec sleep 3600"]);
    probed.liveness_probe = Some(exec_probe(&["cat", "/tmp/healthy"]));
    let mut gated = busybox("gated", &["/bin/sh", "-c", "exec sleep 3600"]);
    gated.readiness_probe = Some(exec_probe(&["cat", "/tmp/ready"]));
    let probes = pod("probes", "uid-probes", vec![probed, gated], "Always");
    workers.update_pod(probes.clone());
    wait_for(60, "liveness restart", &host, "uid-probes", || {
        host.status("uid-probes")
            .filter(|s| s.container_statuses.iter().flatten().any(|c| c.name == "probed" && c.restart_count >= 1))
    })
    .await;
    assert!(host.event_reasons("uid-probes").iter().any(|r| r == "Unhealthy"), "Unhealthy event recorded");
    let s = host.status("uid-probes").unwrap_or_default();
    let gated_ready = s.container_statuses.iter().flatten().find(|c| c.name == "gated").map(|c| c.ready);
    assert_eq!(gated_ready, Some(false), "readiness probe failing keeps the container unready");
    let ready = s.conditions.iter().flatten().find(|c| c.type_ == "Ready").map(|c| c.status.clone());
    assert_eq!(ready.as_deref(), Some("False"), "an unready container keeps the pod unready");
    let gated_id = workers
        .running_container_id("uid-probes", "gated")
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("gated container runs"));
    let touched = cri.exec_sync(&gated_id, vec!["touch".into(), "/tmp/ready".into()], Duration::from_secs(10)).await;
    assert_eq!(touched.map(|r| r.exit_code).ok(), Some(0));
    wait_for(30, "readiness after the probe passes", &host, "uid-probes", || {
        host.status("uid-probes")
            .filter(|s| s.container_statuses.iter().flatten().any(|c| c.name == "gated" && c.ready))
    })
    .await;

    // 7. A memory limit breach is reported as OOMKilled.
    let mut hog = busybox("hog", &["/bin/sh", "-c", "x=aaaaaaaaaaaaaaaa; while true; do x=$x$x; done"]);
    hog.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
        limits: Some(
            [("memory".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("32Mi".into()))].into(),
        ),
        ..Default::default()
    });
    let oom = pod("oom", "uid-oom", vec![hog], "Never");
    workers.update_pod(oom.clone());
    let s = wait_for(60, "OOMKilled", &host, "uid-oom", || {
        host.status("uid-oom").filter(|s| s.phase.as_deref() == Some("Failed"))
    })
    .await;
    let term =
        s.container_statuses.unwrap_or_default()[0].state.clone().and_then(|st| st.terminated).unwrap_or_default();
    assert_eq!(term.reason.as_deref(), Some("OOMKilled"), "terminated state: {term:?}");
    assert_eq!(term.exit_code, 137);

    // 7b. gRPC probes: the workspace's grpc.health.v1 server runs in the pod (the host's
    // binary and C libraries mounted read-only into the busybox image); one container is
    // gated on the SERVING server, another on a NOT_SERVING service.
    let grpc_pod = grpc_probe_pod();
    workers.update_pod(grpc_pod.clone());
    let s = wait_for(60, "the gRPC-probed container ready", &host, "uid-grpc", || {
        host.status("uid-grpc").filter(|s| s.container_statuses.iter().flatten().any(|c| c.name == "server" && c.ready))
    })
    .await;
    let down_ready = s.container_statuses.iter().flatten().find(|c| c.name == "down").map(|c| c.ready);
    assert_eq!(down_ready, Some(false), "a NOT_SERVING service keeps its container unready");
    wait_for(30, "the Unhealthy event of the NOT_SERVING probe", &host, "uid-grpc", || {
        host.events
            .lock()
            .iter()
            .any(|(u, e)| {
                u == "uid-grpc"
                    && e.reason == "Unhealthy"
                    && e.message == "Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")"
            })
            .then_some(())
    })
    .await;

    // 7c. Sidecars: a restartable init container starts before the app, keeps running (and is
    // restarted when it exits) and counts towards readiness; a Job-like pod with a sidecar
    // succeeds when its main container exits, its sidecar stopped.
    let mut sidecar =
        busybox("proxy", &["/bin/sh", "-c", "trap 'exit 0' TERM; touch /tmp/up; while true; do sleep 1; done"]);
    sidecar.restart_policy = Some("Always".into());
    sidecar.startup_probe = Some(exec_probe(&["cat", "/tmp/up"]));
    let mut with_sidecar =
        pod("sidecar", "uid-sidecar", vec![busybox("app", &["/bin/sh", "-c", "exec sleep 3600"])], "Always");
    if let Some(spec) = with_sidecar.spec.as_mut() {
        spec.init_containers = Some(vec![sidecar.clone()]);
    }
    workers.update_pod(with_sidecar.clone());
    let s = wait_for(60, "the sidecar pod Ready", &host, "uid-sidecar", || {
        host.status("uid-sidecar")
            .filter(|s| s.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
    .await;
    let proxy = s.init_container_statuses.clone().unwrap_or_default();
    assert_eq!(proxy.len(), 1);
    assert!(proxy[0].ready && proxy[0].started == Some(true), "the sidecar is started and ready: {proxy:?}");
    assert!(proxy[0].state.as_ref().is_some_and(|st| st.running.is_some()), "the sidecar keeps running: {proxy:?}");
    let proxy_id = workers.running_container_id("uid-sidecar", "proxy").await.ok().flatten().unwrap_or_default();
    let _ = cri.exec_sync(&proxy_id, vec!["kill".into(), "1".into()], Duration::from_secs(10)).await;
    wait_for(60, "the exited sidecar restarted", &host, "uid-sidecar", || {
        host.status("uid-sidecar").filter(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .any(|c| c.restart_count >= 1 && c.state.as_ref().is_some_and(|st| st.running.is_some()))
                && s.phase.as_deref() == Some("Running")
        })
    })
    .await;
    let mut job_with_sidecar =
        pod("job-sidecar", "uid-job-sidecar", vec![busybox("main", &["/bin/sh", "-c", "sleep 2; echo done"])], "Never");
    if let Some(spec) = job_with_sidecar.spec.as_mut() {
        spec.init_containers = Some(vec![sidecar]);
    }
    workers.update_pod(job_with_sidecar.clone());
    let s = wait_for(60, "the Job-like pod with a sidecar Succeeded", &host, "uid-job-sidecar", || {
        host.status("uid-job-sidecar").filter(|s| s.phase.as_deref() == Some("Succeeded"))
    })
    .await;
    let proxy = s.init_container_statuses.unwrap_or_default();
    assert!(proxy[0].state.as_ref().is_some_and(|st| st.terminated.is_some()), "the sidecar was stopped: {proxy:?}");
    let rt = kuberuntime::runtime_pod(&cri, "uid-job-sidecar").await.unwrap_or_else(|e| panic!("runtime_pod: {e}"));
    assert!(rt.running_containers().next().is_none(), "nothing of the finished pod runs");

    // 8. Deleting pods stops their containers and deletes the objects.
    wait_for(60, "both graceful containers running", &host, "uid-grace", || {
        host.status("uid-grace").filter(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .filter(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
                .count()
                == 2
        })
    })
    .await;
    for p in
        [&web, &logger, &crasher, &job, &bad, &probes, &oom, &graceful, &grpc_pod, &with_sidecar, &job_with_sidecar]
    {
        let mut deleting = p.clone();
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        deleting.metadata.deletion_grace_period_seconds = Some(5);
        workers.update_pod(deleting);
    }
    for uid in [
        "uid-web",
        "uid-logger",
        "uid-crash",
        "uid-job",
        "uid-bad",
        "uid-probes",
        "uid-oom",
        "uid-grace",
        "uid-grpc",
        "uid-sidecar",
        "uid-job-sidecar",
    ] {
        wait_for(60, "pod object deleted", &host, uid, || host.deleted.lock().contains(uid).then_some(())).await;
        let rt = kuberuntime::runtime_pod(&cri, uid).await.unwrap_or_else(|e| panic!("runtime_pod: {e}"));
        assert!(rt.running_containers().next().is_none(), "{uid}: no container runs after deletion");
    }
    let exit_codes: Vec<(String, Option<i32>)> = host
        .status("uid-grace")
        .unwrap_or_default()
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.name, c.state.and_then(|st| st.terminated).map(|t| t.exit_code)))
        .collect();
    assert!(exit_codes.contains(&("polite".into(), Some(0))), "SIGTERM ends the polite container: {exit_codes:?}");
    assert!(exit_codes.contains(&("stubborn".into(), Some(137))), "SIGKILL after the grace: {exit_codes:?}");
    let status = host.status("uid-web").unwrap_or_default();
    assert!(matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")), "final phase written: {:?}", status.phase);
    assert!(host.event_reasons("uid-web").iter().any(|r| r == "Killing"), "Killing event recorded");
    assert!(http_get(&ip, 80).await.is_err(), "the pod no longer serves after deletion");

    pleg.abort();
    env.stop().await;
    skiff_kubelet::cgroups::remove_cgroup_root(&format!("/skiff-test-{n}"));
}
