//! End-to-end: the node agent (`run_agent`) against a real skiff API server and a containerd it
//! starts itself. Needs root, containerd, runc, the CNI plugins and busybox-static; fails
//! loudly without them.

mod common;

use skiff_kubelet::cri::RuntimeService;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, start_api_server};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, ContainerPort, Event, HTTPGetAction, Node, Pod, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use skiff_kubelet::{AgentConfig, run_agent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn require_environment() {
    let missing: Vec<&str> =
        ["/usr/bin/containerd", "/usr/sbin/runc", "/usr/bin/ctr", "/usr/lib/cni/bridge", "/bin/busybox"]
            .into_iter()
            .filter(|p| !Path::new(p).exists())
            .collect();
    let root = rustix::process::geteuid().is_root();
    assert!(
        root && missing.is_empty(),
        "needs root plus containerd, runc, containernetworking-plugins and busybox-static (apt-get install -y containerd runc \
         containernetworking-plugins busybox-static); root: {root}, missing: {missing:?}"
    );
}

async fn http_get(ip: &str) -> Option<String> {
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect((ip, 80)).await.ok()?;
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        Some(out)
    };
    tokio::time::timeout(Duration::from_secs(2), fetch).await.ok().flatten()
}

/// Accepts any server certificate: the kubelet's is self-signed in this setup.
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

async fn kubelet_tls(port: u16) -> Option<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let name = rustls::pki_types::ServerName::try_from("localhost").ok()?;
    connector.connect(name, tcp).await.ok()
}

/// Runs `path` (an /exec URL) as a WebSocket exec session (v4.channel.k8s.io); returns the
/// negotiated response head and the received (channel, payload) frames.
async fn kubelet_ws_exec(port: u16, path: &str) -> Option<(String, Vec<(u8, Vec<u8>)>)> {
    let mut s = kubelet_tls(port).await?;
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: v4.channel.k8s.io, channel.k8s.io\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.ok()?;
    let mut data = Vec::new();
    let read_all = async {
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => data.extend_from_slice(&chunk[..n]),
            }
            // Stop at a close frame (opcode 8) after the head.
            if let Some(p) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                let frames = parse_frames(&data[p + 4..]);
                if frames.iter().any(|(op, _)| *op == 8) {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(15), read_all).await;
    let p = data.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&data[..p]).into_owned();
    let frames = parse_frames(&data[p + 4..])
        .into_iter()
        .filter(|(op, payload)| *op == 2 && !payload.is_empty())
        .map(|(_, payload)| (payload[0], payload[1..].to_vec()))
        .collect();
    Some((head, frames))
}

/// Splits unmasked server WebSocket frames into (opcode, payload).
fn parse_frames(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while b.len() >= 2 {
        let op = b[0] & 0x0f;
        let (len, hdr) = match b[1] & 0x7f {
            126 if b.len() >= 4 => (usize::from(u16::from_be_bytes([b[2], b[3]])), 4),
            127 if b.len() >= 10 => {
                let mut l = [0u8; 8];
                l.copy_from_slice(&b[2..10]);
                (u64::from_be_bytes(l) as usize, 10)
            }
            n if n < 126 => (usize::from(n), 2),
            _ => break,
        };
        if b.len() < hdr + len {
            break;
        }
        out.push((op, b[hdr..hdr + len].to_vec()));
        b = &b[hdr + len..];
    }
    out
}

/// GET over HTTPS to the kubelet endpoint on 127.0.0.1; returns the raw HTTP/1.1 response.
async fn kubelet_get(port: u16, path: &str) -> Option<String> {
    let mut s = kubelet_tls(port).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    (!text.is_empty()).then_some(text)
}

/// Runs [`skiff_kubelet::killall::killall`] on the node's data dir when dropped.
struct KillallOnDrop(PathBuf);

impl Drop for KillallOnDrop {
    fn drop(&mut self) {
        skiff_kubelet::killall::killall(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_registers_the_node_and_runs_pods_from_the_api() {
    require_environment();
    let api = start_api_server().await;
    let client = api.client.clone();
    let data = api.dir.path().join("node");
    // Also when the test fails: stop containerd, the containers and their network namespaces.
    let _host = KillallOnDrop(data.clone());
    let images = data.join("images");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/images/build.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(&images)
        .output()
        .unwrap_or_else(|e| panic!("build.sh: {e}"));
    assert!(out.status.success(), "image build failed: {}", String::from_utf8_lossy(&out.stderr));

    let n = std::process::id() % 200 + 20;
    let mut cfg = AgentConfig::new(&data);
    cfg.node_name = Some("agent-e2e".into());
    cfg.node_ip = Some("127.0.0.1".parse().unwrap_or_else(|e| panic!("ip: {e}")));
    cfg.pod_cidr = Some(format!("10.213.{n}.0/24"));
    cfg.bridge_name = format!("ska{n}");
    cfg.cgroup_root = format!("/skiff-agent-test-{n}");
    cfg.kubelet_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("free port: {e}"));
    let agent = tokio::spawn(run_agent(client.clone(), cfg.clone()));

    // The node registers Ready with the runtime version and a lease.
    let nodes: Api<Node> = Api::all(client.clone());
    let node = eventually(60, "node Ready", || async {
        if agent.is_finished() {
            panic!("the agent stopped early");
        }
        let n = nodes.get_opt("agent-e2e").await.ok()??;
        let ready = n.status.as_ref()?.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(n)
    })
    .await;
    let status = node.status.clone().unwrap_or_default();
    let info = status.node_info.clone().unwrap_or_default();
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "runtime version {:?}",
        info.container_runtime_version
    );
    assert_eq!(status.capacity.unwrap_or_default().get("pods").map(|q| q.0.clone()).as_deref(), Some("110"));
    assert_eq!(node.spec.and_then(|s| s.pod_cidr), Some(format!("10.213.{n}.0/24")));
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    eventually(20, "node lease", || async { leases.get_opt("agent-e2e").await.ok().flatten() }).await;

    // A pod bound to the node runs, gets an IP, passes its readiness probe and serves HTTP.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = Pod {
        metadata: ObjectMeta { name: Some("web".into()), ..Default::default() },
        spec: Some(PodSpec {
            node_name: Some("agent-e2e".into()),
            termination_grace_period_seconds: Some(5),
            containers: vec![Container {
                name: "web".into(),
                image: Some("skiff.local/busybox:1.35".into()),
                ports: Some(vec![ContainerPort { container_port: 80, ..Default::default() }]),
                readiness_probe: Some(Probe {
                    http_get: Some(HTTPGetAction {
                        port: IntOrString::Int(80),
                        path: Some("/".into()),
                        ..Default::default()
                    }),
                    period_seconds: Some(1),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    pods.create(&PostParams::default(), &pod).await.unwrap_or_else(|e| panic!("create pod: {e}"));
    let status = eventually(90, "pod Running and Ready", || async {
        let s = pods.get("web").await.ok()?.status?;
        let ready = s.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
        (s.phase.as_deref() == Some("Running") && ready).then_some(s)
    })
    .await;
    let ip = status.pod_ip.clone().unwrap_or_default();
    assert!(ip.starts_with(&format!("10.213.{n}.")), "pod IP {ip}");
    assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
    let page = eventually(20, "HTTP page", || http_get(&ip)).await;
    assert!(page.contains("Hello from skiff busybox"));
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let reasons = eventually(20, "Started event", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let reasons: Vec<String> = list
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("web"))
            .filter_map(|e| e.reason)
            .collect();
        reasons.iter().any(|r| r == "Started").then_some(reasons)
    })
    .await;
    assert!(reasons.iter().any(|r| r == "Created"), "events: {reasons:?}");

    // The kubelet endpoint answers over HTTPS (loopback, no client CA configured).
    let healthz = eventually(20, "kubelet /healthz", || kubelet_get(cfg.kubelet_port, "/healthz")).await;
    assert!(healthz.starts_with("HTTP/1.1 200") && healthz.ends_with("ok"), "{healthz}");
    let logs = kubelet_get(cfg.kubelet_port, "/containerLogs/default/web/web?tailLines=10").await.unwrap_or_default();
    assert!(logs.starts_with("HTTP/1.1 200"), "{logs}");
    let missing = kubelet_get(cfg.kubelet_port, "/containerLogs/default/nope/web").await.unwrap_or_default();
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    // Streaming exec over WebSocket, relayed to containerd's streaming server.
    let (head, frames) = kubelet_ws_exec(
        cfg.kubelet_port,
        "/exec/default/web/web?command=sh&command=-c&command=echo+hello-exec%3B+echo+oops+%3E%262&stdout=true&stderr=true",
    )
    .await
    .unwrap_or_else(|| panic!("exec session failed"));
    assert!(head.starts_with("HTTP/1.1 101"), "upgrade accepted: {head}");
    let stdout: Vec<u8> = frames.iter().filter(|(c, _)| *c == 1).flat_map(|(_, p)| p.clone()).collect();
    let stderr: Vec<u8> = frames.iter().filter(|(c, _)| *c == 2).flat_map(|(_, p)| p.clone()).collect();
    assert_eq!(String::from_utf8_lossy(&stdout), "hello-exec\n", "frames: {frames:?}");
    assert_eq!(String::from_utf8_lossy(&stderr), "oops\n");

    // After an agent restart the running pod is adopted, not restarted.
    let container_id = status.container_statuses.clone().unwrap_or_default()[0].container_id.clone();
    agent.abort();
    let _ = agent.await;
    let socket = skiff_kubelet::agent::containerd_socket(&data);
    eventually(20, "containerd stopped", || async {
        skiff_kubelet::cri::CriClient::connect(&socket).await.is_err().then_some(())
    })
    .await;
    let agent = tokio::spawn(run_agent(client.clone(), cfg.clone()));
    let mut second = pod.clone();
    second.metadata.name = Some("after-restart".into());
    if let Some(spec) = second.spec.as_mut() {
        spec.containers[0].readiness_probe = None;
    }
    pods.create(&PostParams::default(), &second).await.unwrap_or_else(|e| panic!("create pod: {e}"));
    eventually(90, "a new pod Running after the agent restart", || async {
        (pods.get("after-restart").await.ok()?.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    let adopted = pods.get("web").await.ok().and_then(|p| p.status).unwrap_or_default();
    let cs = adopted.container_statuses.unwrap_or_default();
    assert_eq!(cs[0].container_id, container_id, "the same container keeps running");
    assert_eq!(cs[0].restart_count, 0);
    assert!(http_get(&ip).await.is_some_and(|p| p.contains("Hello")), "the adopted pod still serves");
    pods.delete("after-restart", &DeleteParams::default()).await.unwrap_or_else(|e| panic!("delete: {e}"));

    // Graceful deletion stops the container and removes the object.
    pods.delete("web", &DeleteParams::default()).await.unwrap_or_else(|e| panic!("delete: {e}"));
    eventually(60, "pod object gone", || async { pods.get_opt("web").await.ok()?.is_none().then_some(()) }).await;
    assert!(http_get(&ip).await.is_none(), "the pod stopped serving");

    eventually(60, "second pod gone", || async { pods.get_opt("after-restart").await.ok()?.is_none().then_some(()) })
        .await;
    // Nothing of the deleted pods is left on the runtime.
    let cri = skiff_kubelet::cri::CriClient::connect(&skiff_kubelet::agent::containerd_socket(&data))
        .await
        .unwrap_or_else(|e| panic!("CRI: {e}"));
    let leftovers = eventually(30, "sandboxes removed", || async {
        let s = cri.list_pod_sandboxes(None).await.ok()?;
        s.is_empty().then_some(s)
    })
    .await;
    assert!(leftovers.is_empty());
    agent.abort();
    let _ = agent.await;
    // Wait for the supervisor to stop containerd, then clean the host.
    eventually(20, "containerd stopped", || async {
        skiff_kubelet::cri::CriClient::connect(&socket).await.is_err().then_some(())
    })
    .await;
    let _ = std::process::Command::new("ip").args(["link", "del", &cfg.bridge_name]).status();
    skiff_kubelet::cgroups::remove_cgroup_root(&cfg.cgroup_root);
    api.server.shutdown(Duration::from_secs(1)).await;
}
