//! The Container Runtime Interface (CRI v1): the [`RuntimeService`] and [`ImageService`] traits
//! the kubelet runs pods through, and [`CriClient`], their gRPC implementation over a unix socket.
//!
//! The traits follow `cri-api`'s `RuntimeService` and `ImageManagerService` interfaces
//! (`k8s.io/cri-api/pkg/apis/services.go`), with only the calls skiff makes; see
//! <https://kubernetes.io/docs/concepts/architecture/cri/>. [`CriClient`] wraps the generated
//! `k8s-cri` clients; its calls carry a deadline so a hung runtime cannot wedge a pod worker
//! forever. Unit tests run the kubelet against the in-memory fakes of `fake`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

pub use k8s_cri::v1 as api;

#[cfg(test)]
pub(crate) mod fake;

/// Default deadline of a CRI call (the kubelet's `--runtime-request-timeout` is 2 minutes; most
/// calls return in milliseconds).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// A failed CRI call.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The socket could not be connected.
    #[error("connecting to the container runtime at {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The transport error.
        source: tonic::transport::Error,
    },
    /// The runtime answered with an error status.
    #[error("container runtime {op}: {message} ({code:?})")]
    Status {
        /// The RPC, e.g. "RunPodSandbox".
        op: &'static str,
        /// gRPC status code.
        code: tonic::Code,
        /// The runtime's message.
        message: String,
    },
}

impl CriError {
    fn status(op: &'static str, s: tonic::Status) -> Self {
        CriError::Status { op, code: s.code(), message: s.message().to_string() }
    }

    /// True when the runtime reported that the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::Status { code: tonic::Code::NotFound, .. })
    }
}

/// A connected CRI client; cheap to clone (the channel is shared).
#[derive(Clone, Debug)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
    endpoint: PathBuf,
}

macro_rules! call {
    ($client:expr, $method:ident, $op:literal, $req:expr, $timeout:expr) => {{
        let mut request = tonic::Request::new($req);
        request.set_timeout($timeout);
        $client.$method(request).await.map(|r| r.into_inner()).map_err(|s| CriError::status($op, s))
    }};
}

impl CriClient {
    /// Connects to the CRI socket at `path` (e.g. `/run/containerd/containerd.sock`; a
    /// `unix://` prefix is accepted).
    ///
    /// # Errors
    /// [`CriError::Connect`] when the socket does not accept connections.
    pub async fn connect(path: &Path) -> Result<Self, CriError> {
        let path = match path.to_str().and_then(|s| s.strip_prefix("unix://")) {
            Some(p) => PathBuf::from(p),
            None => path.to_path_buf(),
        };
        let socket = path.clone();
        // The URI is required by tonic but unused: the connector always dials the socket.
        let channel = Endpoint::from_static("http://[::]:50051")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(socket).await?)) }
            }))
            .await
            .map_err(|source| CriError::Connect { path: path.clone(), source })?;
        let max = 16 * 1024 * 1024;
        Ok(CriClient {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(max),
            image: ImageServiceClient::new(channel).max_decoding_message_size(max),
            endpoint: path,
        })
    }

    /// The socket this client talks to.
    pub fn endpoint(&self) -> &Path {
        &self.endpoint
    }

    /// `Version`: runtime name and version.
    pub async fn version(&self) -> Result<api::VersionResponse, CriError> {
        call!(
            self.runtime.clone(),
            version,
            "Version",
            api::VersionRequest { version: "v1".into() },
            Duration::from_secs(10)
        )
    }

    /// `Status`: runtime conditions (RuntimeReady, NetworkReady).
    pub async fn status(&self) -> Result<api::StatusResponse, CriError> {
        call!(self.runtime.clone(), status, "Status", api::StatusRequest { verbose: false }, Duration::from_secs(10))
    }
}

/// The CRI's `RuntimeService`: pod sandboxes, containers, exec and streaming, as far as skiff
/// uses them. Implemented by [`CriClient`] over gRPC and by an in-memory fake in unit tests.
///
/// # Errors
/// Every call fails with [`CriError`] when the runtime rejects it or cannot be reached;
/// [`CriError::is_not_found`] tells a missing object apart.
#[async_trait::async_trait]
pub trait RuntimeService: Send + Sync + 'static {
    /// `RunPodSandbox`: creates and starts a sandbox; returns its id.
    async fn run_pod_sandbox(&self, config: api::PodSandboxConfig) -> Result<String, CriError>;

    /// `StopPodSandbox`.
    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError>;

    /// `RemovePodSandbox`.
    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError>;

    /// `PodSandboxStatus`.
    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError>;

    /// `ListPodSandbox` with an optional filter.
    async fn list_pod_sandboxes(&self, filter: Option<api::PodSandboxFilter>)
    -> Result<Vec<api::PodSandbox>, CriError>;

    /// `CreateContainer` in a sandbox; returns the container id.
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError>;

    /// `StartContainer`.
    async fn start_container(&self, id: &str) -> Result<(), CriError>;

    /// `StopContainer`: SIGTERM (or the image's stop signal), SIGKILL after `timeout_secs`.
    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError>;

    /// `RemoveContainer`.
    async fn remove_container(&self, id: &str) -> Result<(), CriError>;

    /// `ListContainers` with an optional filter.
    async fn list_containers(&self, filter: Option<api::ContainerFilter>) -> Result<Vec<api::Container>, CriError>;

    /// `ContainerStatus`.
    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError>;

    /// `ExecSync`: runs `cmd` in the container, waiting at most `timeout` (0 = no limit).
    async fn exec_sync(&self, id: &str, cmd: Vec<String>, timeout: Duration)
    -> Result<api::ExecSyncResponse, CriError>;

    /// `Exec`: prepares a streaming exec; returns the runtime's streaming URL.
    async fn exec(&self, req: api::ExecRequest) -> Result<String, CriError>;

    /// `Attach`: prepares a streaming attach to a running container; returns the streaming URL.
    async fn attach(&self, req: api::AttachRequest) -> Result<String, CriError>;

    /// `PortForward`: prepares port forwarding into a sandbox's network namespace; returns the
    /// streaming URL.
    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String, CriError>;

    /// `ListContainerStats`: CPU and memory of every container (the runtime reads its cgroups).
    /// Runtimes without it answer `Unimplemented` (the default here).
    async fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>, CriError> {
        Err(CriError::Status { op: "ListContainerStats", code: tonic::Code::Unimplemented, message: String::new() })
    }

    /// `ListPodSandboxStats`: CPU, memory and process count of every pod sandbox (containerd
    /// 1.7+ on Linux). Runtimes without it answer `Unimplemented` (the default here).
    async fn list_pod_sandbox_stats(&self) -> Result<Vec<api::PodSandboxStats>, CriError> {
        Err(CriError::Status { op: "ListPodSandboxStats", code: tonic::Code::Unimplemented, message: String::new() })
    }
}

/// The CRI's `ImageService` (`ImageManagerService` in cri-api): local image status and pulls.
/// Implemented by [`CriClient`] over gRPC and by an in-memory fake in unit tests.
///
/// # Errors
/// Every call fails with [`CriError`] when the runtime rejects it or cannot be reached.
#[async_trait::async_trait]
pub trait ImageService: Send + Sync + 'static {
    /// `ImageStatus`: the image when present locally.
    async fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError>;

    /// `PullImage`: always contacts the registry; returns the image reference (id).
    async fn pull_image(&self, image: &str, sandbox: Option<api::PodSandboxConfig>) -> Result<String, CriError>;

    /// `ListImages`.
    async fn list_images(&self) -> Result<Vec<api::Image>, CriError>;
}

#[async_trait::async_trait]
impl RuntimeService for CriClient {
    async fn run_pod_sandbox(&self, config: api::PodSandboxConfig) -> Result<String, CriError> {
        let req = api::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() };
        Ok(call!(self.runtime.clone(), run_pod_sandbox, "RunPodSandbox", req, DEFAULT_TIMEOUT)?.pod_sandbox_id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let req = api::StopPodSandboxRequest { pod_sandbox_id: id.to_string() };
        call!(self.runtime.clone(), stop_pod_sandbox, "StopPodSandbox", req, DEFAULT_TIMEOUT).map(|_| ())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let req = api::RemovePodSandboxRequest { pod_sandbox_id: id.to_string() };
        call!(self.runtime.clone(), remove_pod_sandbox, "RemovePodSandbox", req, DEFAULT_TIMEOUT).map(|_| ())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError> {
        let req = api::PodSandboxStatusRequest { pod_sandbox_id: id.to_string(), verbose: false };
        let resp = call!(self.runtime.clone(), pod_sandbox_status, "PodSandboxStatus", req, DEFAULT_TIMEOUT)?;
        resp.status.ok_or_else(|| CriError::Status {
            op: "PodSandboxStatus",
            code: tonic::Code::Internal,
            message: "runtime returned no status".into(),
        })
    }

    async fn list_pod_sandboxes(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>, CriError> {
        let req = api::ListPodSandboxRequest { filter };
        Ok(call!(self.runtime.clone(), list_pod_sandbox, "ListPodSandbox", req, DEFAULT_TIMEOUT)?.items)
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let req = api::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        Ok(call!(self.runtime.clone(), create_container, "CreateContainer", req, DEFAULT_TIMEOUT)?.container_id)
    }

    async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let req = api::StartContainerRequest { container_id: id.to_string() };
        call!(self.runtime.clone(), start_container, "StartContainer", req, DEFAULT_TIMEOUT).map(|_| ())
    }

    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError> {
        let req = api::StopContainerRequest { container_id: id.to_string(), timeout: timeout_secs };
        let deadline = DEFAULT_TIMEOUT + Duration::from_secs(timeout_secs.max(0) as u64);
        call!(self.runtime.clone(), stop_container, "StopContainer", req, deadline).map(|_| ())
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let req = api::RemoveContainerRequest { container_id: id.to_string() };
        call!(self.runtime.clone(), remove_container, "RemoveContainer", req, DEFAULT_TIMEOUT).map(|_| ())
    }

    async fn list_containers(&self, filter: Option<api::ContainerFilter>) -> Result<Vec<api::Container>, CriError> {
        let req = api::ListContainersRequest { filter };
        Ok(call!(self.runtime.clone(), list_containers, "ListContainers", req, DEFAULT_TIMEOUT)?.containers)
    }

    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        let req = api::ContainerStatusRequest { container_id: id.to_string(), verbose: false };
        let resp = call!(self.runtime.clone(), container_status, "ContainerStatus", req, DEFAULT_TIMEOUT)?;
        resp.status.ok_or_else(|| CriError::Status {
            op: "ContainerStatus",
            code: tonic::Code::Internal,
            message: "runtime returned no status".into(),
        })
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<api::ExecSyncResponse, CriError> {
        let req = api::ExecSyncRequest { container_id: id.to_string(), cmd, timeout: timeout.as_secs() as i64 };
        call!(self.runtime.clone(), exec_sync, "ExecSync", req, timeout + Duration::from_secs(10))
    }

    async fn exec(&self, req: api::ExecRequest) -> Result<String, CriError> {
        Ok(call!(self.runtime.clone(), exec, "Exec", req, DEFAULT_TIMEOUT)?.url)
    }

    async fn attach(&self, req: api::AttachRequest) -> Result<String, CriError> {
        Ok(call!(self.runtime.clone(), attach, "Attach", req, DEFAULT_TIMEOUT)?.url)
    }

    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String, CriError> {
        let req = api::PortForwardRequest { pod_sandbox_id: sandbox_id.to_string(), port: ports };
        Ok(call!(self.runtime.clone(), port_forward, "PortForward", req, DEFAULT_TIMEOUT)?.url)
    }

    async fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>, CriError> {
        let req = api::ListContainerStatsRequest { filter: None };
        Ok(call!(self.runtime.clone(), list_container_stats, "ListContainerStats", req, Duration::from_secs(30))?.stats)
    }

    async fn list_pod_sandbox_stats(&self) -> Result<Vec<api::PodSandboxStats>, CriError> {
        let req = api::ListPodSandboxStatsRequest { filter: None };
        Ok(call!(self.runtime.clone(), list_pod_sandbox_stats, "ListPodSandboxStats", req, Duration::from_secs(30))?
            .stats)
    }
}

#[async_trait::async_trait]
impl ImageService for CriClient {
    async fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        let req = api::ImageStatusRequest {
            image: Some(api::ImageSpec { image: image.to_string(), ..Default::default() }),
            verbose: false,
        };
        Ok(call!(self.image.clone(), image_status, "ImageStatus", req, DEFAULT_TIMEOUT)?.image)
    }

    async fn pull_image(&self, image: &str, sandbox: Option<api::PodSandboxConfig>) -> Result<String, CriError> {
        let req = api::PullImageRequest {
            image: Some(api::ImageSpec { image: image.to_string(), ..Default::default() }),
            auth: None,
            sandbox_config: sandbox,
        };
        Ok(call!(self.image.clone(), pull_image, "PullImage", req, Duration::from_secs(600))?.image_ref)
    }

    async fn list_images(&self) -> Result<Vec<api::Image>, CriError> {
        let req = api::ListImagesRequest { filter: None };
        Ok(call!(self.image.clone(), list_images, "ListImages", req, DEFAULT_TIMEOUT)?.images)
    }
}
