//! Container probes (liveness, readiness, startup; exec, httpGet, tcpSocket and gRPC handlers)
//! and lifecycle hook handlers (exec, httpGet, tcpSocket, sleep).
//!
//! Follows "Liveness, Readiness, and Startup Probes"
//! (<https://kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/>) and
//! "Container Lifecycle Hooks" (<https://kubernetes.io/docs/concepts/containers/container-lifecycle-hooks/>).
//! One task per (container, probe kind) runs the probe every `periodSeconds` after
//! `initialDelaySeconds`, and flips the result after `failureThreshold` consecutive failures or
//! `successThreshold` consecutive successes; liveness and readiness wait for the startup probe.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ExecAction, GRPCAction, HTTPGetAction, Pod, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::cri::RuntimeService;
use crate::host::{EventType, PodEvent, PodHost};

/// Probe kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// Restarts the container when failing.
    Liveness,
    /// Gates the container's (and pod's) readiness.
    Readiness,
    /// Holds off the other probes until the container has started.
    Startup,
}

impl ProbeKind {
    /// "Liveness", "Readiness" or "Startup" (as in event messages).
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    /// The container's probe of this kind.
    pub fn probe(self, c: &Container) -> Option<&Probe> {
        match self {
            ProbeKind::Liveness => c.liveness_probe.as_ref(),
            ProbeKind::Readiness => c.readiness_probe.as_ref(),
            ProbeKind::Startup => c.startup_probe.as_ref(),
        }
    }
}

/// Outcome of one probe or hook run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Succeeded.
    Success,
    /// Failed, with the output or error to report.
    Failure(String),
}

/// Resolves a named or numeric port against the container's ports.
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| format!("unknown port name {name:?}"))?,
        },
    };
    u16::try_from(n).ok().filter(|p| *p > 0).ok_or_else(|| format!("invalid port {n}"))
}

/// Runs an exec action in the container (CRI ExecSync); exit code 0 is success.
pub async fn run_exec(cri: &dyn RuntimeService, container_id: &str, action: &ExecAction, timeout: Duration) -> Outcome {
    let cmd = action.command.clone().unwrap_or_default();
    match cri.exec_sync(container_id, cmd, timeout).await {
        Ok(r) if r.exit_code == 0 => Outcome::Success,
        Ok(r) => {
            let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
            out.push_str(&String::from_utf8_lossy(&r.stderr));
            Outcome::Failure(if out.trim().is_empty() {
                format!("command exited with code {}", r.exit_code)
            } else {
                out.trim().to_string()
            })
        }
        Err(e) => Outcome::Failure(e.to_string()),
    }
}

/// Performs an HTTP GET (plain HTTP; HTTPS is reported as a failure) and treats status codes
/// 200–399 as success.
pub async fn run_http_get(action: &HTTPGetAction, container: &Container, pod_ip: &str, timeout: Duration) -> Outcome {
    if action.scheme.as_deref() == Some("HTTPS") {
        return Outcome::Failure("HTTPS probes are not supported by skiff yet".into());
    }
    let port = match resolve_port(&action.port, container) {
        Ok(p) => p,
        Err(e) => return Outcome::Failure(e),
    };
    let host = action.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod_ip.to_string());
    let path = action.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into());
    let path = if path.starts_with('/') { path } else { format!("/{path}") };
    let mut headers = String::new();
    let mut has_host = false;
    for h in action.http_headers.iter().flatten() {
        if h.name.eq_ignore_ascii_case("host") {
            has_host = true;
        }
        headers.push_str(&format!("{}: {}\r\n", h.name, h.value));
    }
    if !has_host {
        headers.push_str(&format!("Host: {host}:{port}\r\n"));
    }
    let request = format!(
        "GET {path} HTTP/1.1\r\n{headers}User-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut buf = Vec::with_capacity(256);
        let mut chunk = [0u8; 256];
        while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(buf)
    };
    match tokio::time::timeout(timeout, attempt).await {
        Err(_) => Outcome::Failure(format!("Get \"http://{host}:{port}{path}\": context deadline exceeded")),
        Ok(Err(e)) => Outcome::Failure(format!("Get \"http://{host}:{port}{path}\": {e}")),
        Ok(Ok(buf)) => {
            let line = String::from_utf8_lossy(&buf);
            let code = line.split_whitespace().nth(1).and_then(|c| c.parse::<u16>().ok());
            match code {
                Some(c) if (200..400).contains(&c) => Outcome::Success,
                Some(c) => Outcome::Failure(format!("HTTP probe failed with statuscode: {c}")),
                None => Outcome::Failure("malformed HTTP response".into()),
            }
        }
    }
}

/// Opens a TCP connection; success when it connects within the timeout.
pub async fn run_tcp(action: &TCPSocketAction, container: &Container, pod_ip: &str, timeout: Duration) -> Outcome {
    let port = match resolve_port(&action.port, container) {
        Ok(p) => p,
        Err(e) => return Outcome::Failure(e),
    };
    let host = action.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod_ip.to_string());
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host.as_str(), port))).await {
        Ok(Ok(_)) => Outcome::Success,
        Ok(Err(e)) => Outcome::Failure(format!("dial tcp {host}:{port}: {e}")),
        Err(_) => Outcome::Failure(format!("dial tcp {host}:{port}: i/o timeout")),
    }
}

/// Go's `time.Duration` printing of whole seconds ("1s", "1m30s"), as upstream messages show
/// probe timeouts.
fn go_seconds(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 { format!("{}m{}s", s / 60, s % 60) } else { format!("{s}s") }
}

/// Runs a gRPC probe (`pkg/probe/grpc`): the `grpc.health.v1.Health/Check` RPC of `service`
/// at `pod_ip:port`, over plaintext HTTP/2 with the `kube-probe/1.33` user agent; success when
/// the server answers SERVING. Client: tonic's channel and `tonic-health`'s generated client
/// (the maintained implementation of the protocol in Rust). Failure messages are upstream's.
pub async fn run_grpc(action: &GRPCAction, pod_ip: &str, timeout: Duration) -> Outcome {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let host = match pod_ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        _ => pod_ip.to_string(),
    };
    let addr = format!("{host}:{}", action.port);
    let connect = async {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .user_agent("kube-probe/1.33")
            .map_err(|e| e.to_string())?
            .connect_timeout(timeout);
        endpoint.connect().await.map_err(|e| {
            // The transport error's source says what happened (connection refused, ...).
            let mut msg = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg = format!("{msg}: {s}");
                source = s.source();
            }
            msg
        })
    };
    let channel = match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return Outcome::Failure(format!(
                "timeout: failed to connect service {addr:?} within {}: {e}",
                go_seconds(timeout)
            ));
        }
        Err(_) => {
            return Outcome::Failure(format!(
                "timeout: failed to connect service {addr:?} within {}: context deadline exceeded",
                go_seconds(timeout)
            ));
        }
    };
    let request = HealthCheckRequest { service: action.service.clone().unwrap_or_default() };
    let deadline_exceeded = || format!("timeout: health rpc did not complete within {}", go_seconds(timeout));
    match tokio::time::timeout(timeout, HealthClient::new(channel).check(request)).await {
        Err(_) => Outcome::Failure(deadline_exceeded()),
        Ok(Err(status)) => match status.code() {
            tonic::Code::Unimplemented => Outcome::Failure(format!(
                "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                status.message()
            )),
            tonic::Code::DeadlineExceeded => Outcome::Failure(deadline_exceeded()),
            code => Outcome::Failure(format!(
                "error: health rpc probe failed: rpc error: code = {code:?} desc = {}",
                status.message()
            )),
        },
        Ok(Ok(response)) => {
            let status = response.into_inner().status();
            if status == ServingStatus::Serving {
                Outcome::Success
            } else {
                Outcome::Failure(format!("service unhealthy (responded with {:?})", status.as_str_name()))
            }
        }
    }
}

/// Runs one probe.
pub async fn run_probe(
    cri: &dyn RuntimeService,
    container_id: &str,
    container: &Container,
    pod_ip: &str,
    probe: &Probe,
) -> Outcome {
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    if let Some(e) = &probe.exec {
        run_exec(cri, container_id, e, timeout).await
    } else if let Some(h) = &probe.http_get {
        run_http_get(h, container, pod_ip, timeout).await
    } else if let Some(t) = &probe.tcp_socket {
        run_tcp(t, container, pod_ip, timeout).await
    } else if let Some(g) = &probe.grpc {
        run_grpc(g, pod_ip, timeout).await
    } else {
        Outcome::Failure("probe has no handler".into())
    }
}

/// Runs a lifecycle hook handler (postStart/preStop), waiting at most `timeout`.
pub async fn run_lifecycle_handler(
    cri: &dyn RuntimeService,
    container_id: &str,
    container: &Container,
    pod_ip: &str,
    handler: &k8s_openapi::api::core::v1::LifecycleHandler,
    timeout: Duration,
) -> Outcome {
    let run = async {
        if let Some(e) = &handler.exec {
            run_exec(cri, container_id, e, timeout).await
        } else if let Some(h) = &handler.http_get {
            run_http_get(h, container, pod_ip, timeout).await
        } else if let Some(t) = &handler.tcp_socket {
            run_tcp(t, container, pod_ip, timeout).await
        } else if let Some(s) = &handler.sleep {
            tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64)).await;
            Outcome::Success
        } else {
            Outcome::Failure("lifecycle hook has no handler".into())
        }
    };
    tokio::time::timeout(timeout, run).await.unwrap_or_else(|_| Outcome::Failure("hook timed out".into()))
}

/// Probe results of one pod, shared between its probe workers and its pod worker.
#[derive(Default)]
pub struct ProbeResults {
    results: Mutex<HashMap<(String, ProbeKind), bool>>,
}

impl ProbeResults {
    /// The result for a container's probe (None = no result yet).
    pub fn get(&self, container_id: &str, kind: ProbeKind) -> Option<bool> {
        self.results.lock().get(&(container_id.to_string(), kind)).copied()
    }

    /// Sets a result; returns true when it changed.
    pub fn set(&self, container_id: &str, kind: ProbeKind, ok: bool) -> bool {
        self.results.lock().insert((container_id.to_string(), kind), ok) != Some(ok)
    }

    /// Results of `kind` by container id.
    pub fn of_kind(&self, kind: ProbeKind) -> HashMap<String, bool> {
        self.results.lock().iter().filter(|((_, k), _)| *k == kind).map(|((id, _), v)| (id.clone(), *v)).collect()
    }

    /// Forgets results of containers not in `keep`.
    pub fn retain(&self, keep: &std::collections::HashSet<String>) {
        self.results.lock().retain(|(id, _), _| keep.contains(id));
    }
}

/// Everything a probe worker needs.
pub struct ProbeTarget {
    /// The CRI runtime service (exec probes).
    pub cri: Arc<dyn RuntimeService>,
    /// For Unhealthy events.
    pub host: Arc<dyn PodHost>,
    /// The pod (for events).
    pub pod: Pod,
    /// The container spec.
    pub container: Container,
    /// The running container's id.
    pub container_id: String,
    /// The pod IP.
    pub pod_ip: String,
    /// When the container started (for initialDelaySeconds).
    pub started_at: std::time::Instant,
}

/// Probes one container for one kind until the future is dropped; writes results into
/// `results` and wakes `wake` when a result changes.
pub async fn probe_worker(target: ProbeTarget, kind: ProbeKind, results: Arc<ProbeResults>, wake: Arc<Notify>) {
    let Some(probe) = kind.probe(&target.container).cloned() else { return };
    let period = Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64);
    let failure_threshold = probe.failure_threshold.unwrap_or(3).max(1);
    let success_threshold = probe.success_threshold.unwrap_or(1).max(1);
    let initial_delay = Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64);
    let id = target.container_id.clone();
    let has_startup = target.container.startup_probe.is_some();
    tokio::time::sleep_until((target.started_at + initial_delay).into()).await;
    let mut last_ok: Option<bool> = None;
    let mut streak = 0;
    loop {
        let blocked = kind != ProbeKind::Startup && has_startup && results.get(&id, ProbeKind::Startup) != Some(true);
        if !blocked {
            let outcome = run_probe(target.cri.as_ref(), &id, &target.container, &target.pod_ip, &probe).await;
            let ok = outcome == Outcome::Success;
            if Some(ok) == last_ok {
                streak += 1;
            } else {
                streak = 1;
                last_ok = Some(ok);
            }
            if let Outcome::Failure(msg) = &outcome {
                target.host.record_event(
                    &target.pod,
                    PodEvent {
                        type_: EventType::Warning,
                        reason: "Unhealthy".into(),
                        message: format!("{} probe failed: {msg}", kind.as_str()),
                        field_path: Some(format!("spec.containers{{{}}}", target.container.name)),
                    },
                );
            }
            let threshold = if ok { success_threshold } else { failure_threshold };
            if streak >= threshold && results.set(&id, kind, ok) {
                wake.notify_one();
            }
            // A started container stops its startup probe; a failed liveness/startup probe ends
            // with the container being restarted under a new id.
            if (kind == ProbeKind::Startup && results.get(&id, kind) == Some(true))
                || (kind != ProbeKind::Readiness && results.get(&id, kind) == Some(false))
            {
                return;
            }
        }
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    fn container() -> Container {
        Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort { name: Some("http".into()), container_port: 8080, ..Default::default() }]),
            ..Default::default()
        }
    }

    #[test]
    fn named_ports_resolve_through_the_container_ports() {
        let c = container();
        assert_eq!(resolve_port(&IntOrString::String("http".into()), &c), Ok(8080));
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(resolve_port(&IntOrString::String("81".into()), &c), Ok(81));
        assert!(resolve_port(&IntOrString::String("nope".into()), &c).is_err());
        assert!(resolve_port(&IntOrString::Int(0), &c).is_err());
    }

    async fn serve_once(status: &'static str) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        tokio::spawn(async move {
            if let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes()).await;
            }
        });
        port
    }

    #[tokio::test]
    async fn http_probe_succeeds_on_2xx_and_fails_on_5xx() {
        let c = container();
        let ok = HTTPGetAction { port: IntOrString::Int(serve_once("200 OK").await.into()), ..Default::default() };
        assert_eq!(run_http_get(&ok, &c, "127.0.0.1", Duration::from_secs(5)).await, Outcome::Success);
        let bad =
            HTTPGetAction { port: IntOrString::Int(serve_once("503 Unavailable").await.into()), ..Default::default() };
        assert!(
            matches!(run_http_get(&bad, &c, "127.0.0.1", Duration::from_secs(5)).await, Outcome::Failure(m) if m.contains("503"))
        );
    }

    #[tokio::test]
    async fn tcp_probe_fails_on_a_closed_port() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        let c = container();
        let action = TCPSocketAction { port: IntOrString::Int(port.into()), host: None };
        assert_eq!(run_tcp(&action, &c, "127.0.0.1", Duration::from_secs(5)).await, Outcome::Success);
        drop(listener);
        assert!(matches!(run_tcp(&action, &c, "127.0.0.1", Duration::from_secs(5)).await, Outcome::Failure(_)));
    }

    /// A `grpc.health.v1` server on a loopback port (tonic-health's), with service "ready"
    /// SERVING and service "draining" NOT_SERVING.
    async fn health_server() -> u16 {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter.set_service_status("ready", tonic_health::ServingStatus::Serving).await;
        reporter.set_service_status("draining", tonic_health::ServingStatus::NotServing).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        tokio::spawn(async move {
            let _keep = reporter;
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming).await;
        });
        port
    }

    #[tokio::test]
    async fn grpc_probe_succeeds_only_when_the_service_is_serving() {
        let port = i32::from(health_server().await);
        let probe = |service: &str| GRPCAction { port, service: (!service.is_empty()).then(|| service.to_string()) };
        let t = Duration::from_secs(5);
        assert_eq!(run_grpc(&probe("ready"), "127.0.0.1", t).await, Outcome::Success);
        assert_eq!(run_grpc(&probe(""), "127.0.0.1", t).await, Outcome::Success, "the server as a whole");
        assert_eq!(
            run_grpc(&probe("draining"), "127.0.0.1", t).await,
            Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
        );
        match run_grpc(&probe("unknown"), "127.0.0.1", t).await {
            Outcome::Failure(m) => {
                assert!(m.starts_with("error: health rpc probe failed: rpc error: code = NotFound"), "{m}")
            }
            Outcome::Success => panic!("an unknown service is not healthy"),
        }
    }

    #[tokio::test]
    async fn grpc_probe_of_a_closed_port_fails_to_connect() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        drop(listener);
        let action = GRPCAction { port: i32::from(port), service: None };
        match run_grpc(&action, "127.0.0.1", Duration::from_secs(1)).await {
            Outcome::Failure(m) => {
                assert!(
                    m.starts_with(&format!("timeout: failed to connect service \"127.0.0.1:{port}\" within 1s")),
                    "{m}"
                )
            }
            Outcome::Success => panic!("nothing listens"),
        }
    }

    #[tokio::test]
    async fn grpc_probe_of_a_server_without_the_health_service_says_so() {
        // A gRPC server without services answers every method Unimplemented.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_routes(tonic::service::Routes::default())
                .serve_with_incoming(incoming)
                .await;
        });
        let action = GRPCAction { port: i32::from(port), service: None };
        match run_grpc(&action, "127.0.0.1", Duration::from_secs(5)).await {
            Outcome::Failure(m) => assert!(
                m.starts_with("this server does not implement the grpc health protocol (grpc.health.v1.Health)"),
                "{m}"
            ),
            Outcome::Success => panic!("no health service"),
        }
    }

    #[test]
    fn probe_results_report_changes_only() {
        let r = ProbeResults::default();
        assert!(r.set("c1", ProbeKind::Readiness, true));
        assert!(!r.set("c1", ProbeKind::Readiness, true));
        assert!(r.set("c1", ProbeKind::Readiness, false));
        assert_eq!(r.get("c1", ProbeKind::Readiness), Some(false));
        r.retain(&std::collections::HashSet::new());
        assert_eq!(r.get("c1", ProbeKind::Readiness), None);
    }
}
