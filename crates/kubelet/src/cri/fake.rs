//! In-memory fakes of the CRI services for unit tests, after cri-api's `FakeRuntimeService` and
//! `FakeImageService` (`k8s.io/cri-api/pkg/apis/testing`): sandboxes and containers live in a
//! map, every call is recorded by its RPC name, and tests move containers along (exit, kill a
//! sandbox) the way a real runtime would on its own.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

use super::{CriError, ImageService, RuntimeService, api};

/// A sandbox held by [`FakeRuntimeService`].
#[derive(Debug, Clone)]
pub struct FakeSandbox {
    /// The config it was run with.
    pub config: api::PodSandboxConfig,
    /// SANDBOX_READY or SANDBOX_NOTREADY.
    pub state: api::PodSandboxState,
    /// Creation time, ns since the epoch.
    pub created_at: i64,
    /// The pod IP handed out at RunPodSandbox.
    pub ip: String,
}

/// A container held by [`FakeRuntimeService`].
#[derive(Debug, Clone)]
pub struct FakeContainer {
    /// The sandbox it was created in.
    pub sandbox_id: String,
    /// The config it was created with.
    pub config: api::ContainerConfig,
    /// CRI state.
    pub state: api::ContainerState,
    /// Creation, start and finish times, ns since the epoch (0 when not yet).
    pub created_at: i64,
    /// Start time.
    pub started_at: i64,
    /// Finish time.
    pub finished_at: i64,
    /// Exit code once exited.
    pub exit_code: i32,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, FakeSandbox>,
    containers: HashMap<String, FakeContainer>,
    calls: Vec<String>,
    next_id: u64,
    clock: i64,
    /// Exit code a container gets when StopContainer kills it.
    stop_exit_code: i32,
    /// RPC names that fail with `Unknown` until cleared.
    failing: Vec<&'static str>,
    /// The timeout of the last StopContainer of each container name, in seconds.
    stop_timeouts: HashMap<String, i64>,
}

impl State {
    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{}", self.next_id)
    }

    /// A strictly increasing runtime clock, so creation order is never ambiguous.
    fn now(&mut self) -> i64 {
        let wall = k8s_openapi::jiff::Timestamp::now().as_nanosecond() as i64;
        self.clock = wall.max(self.clock + 1);
        self.clock
    }

    fn fail(&self, op: &'static str) -> Result<(), CriError> {
        if self.failing.contains(&op) {
            return Err(CriError::Status { op, code: tonic::Code::Unknown, message: "injected failure".into() });
        }
        Ok(())
    }
}

fn not_found(op: &'static str, id: &str) -> CriError {
    CriError::Status { op, code: tonic::Code::NotFound, message: format!("{id} not found") }
}

fn selected(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// An in-memory `RuntimeService` that records its calls.
#[derive(Default)]
pub struct FakeRuntimeService {
    state: Mutex<State>,
}

impl FakeRuntimeService {
    /// The timeout (seconds) of the last StopContainer of container `name`.
    pub fn stop_timeout(&self, name: &str) -> Option<i64> {
        self.state.lock().stop_timeouts.get(name).copied()
    }

    /// An empty runtime whose stopped containers exit with 137 (SIGKILL), like runc's.
    pub fn new() -> Self {
        let fake = FakeRuntimeService::default();
        fake.state.lock().stop_exit_code = 137;
        fake
    }

    /// The calls so far, as `"<RPC> <argument>"` (e.g. `"StartContainer c3"`), oldest first.
    pub fn calls(&self) -> Vec<String> {
        self.state.lock().calls.clone()
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        self.state.lock().calls.clear();
    }

    /// Makes the RPC `op` (e.g. "StartContainer") fail until [`FakeRuntimeService::heal`].
    pub fn inject_failure(&self, op: &'static str) {
        self.state.lock().failing.push(op);
    }

    /// Ends every injected failure.
    pub fn heal(&self) {
        self.state.lock().failing.clear();
    }

    /// The sandboxes, by id.
    pub fn sandboxes(&self) -> HashMap<String, FakeSandbox> {
        self.state.lock().sandboxes.clone()
    }

    /// The containers, by id.
    pub fn containers(&self) -> HashMap<String, FakeContainer> {
        self.state.lock().containers.clone()
    }

    /// Ids of the containers named `name` (CRI metadata name), oldest first.
    pub fn container_ids(&self, name: &str) -> Vec<String> {
        let st = self.state.lock();
        let mut ids: Vec<(&i64, &String)> = st
            .containers
            .iter()
            .filter(|(_, c)| c.config.metadata.as_ref().is_some_and(|m| m.name == name))
            .map(|(id, c)| (&c.created_at, id))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id.clone()).collect()
    }

    /// The process of container `id` exits with `code`, as if on its own.
    pub fn exit_container(&self, id: &str, code: i32) {
        let mut st = self.state.lock();
        let now = st.now();
        if let Some(c) = st.containers.get_mut(id) {
            c.state = api::ContainerState::ContainerExited;
            c.exit_code = code;
            c.finished_at = now;
        }
    }

    /// Backdates when container `id` finished, as if it exited `ago` earlier.
    pub fn age_finish(&self, id: &str, ago: Duration) {
        if let Some(c) = self.state.lock().containers.get_mut(id) {
            c.finished_at -= ago.as_nanos() as i64;
        }
    }

    /// Sandbox `id` dies (its network namespace is gone): it turns NotReady and its
    /// containers exit.
    pub fn kill_sandbox(&self, id: &str) {
        let mut st = self.state.lock();
        let now = st.now();
        if let Some(s) = st.sandboxes.get_mut(id) {
            s.state = api::PodSandboxState::SandboxNotready;
        }
        for c in st.containers.values_mut().filter(|c| c.sandbox_id == id) {
            if c.state == api::ContainerState::ContainerRunning {
                c.state = api::ContainerState::ContainerExited;
                c.exit_code = 137;
                c.finished_at = now;
            }
        }
    }
}

#[async_trait::async_trait]
impl RuntimeService for FakeRuntimeService {
    async fn run_pod_sandbox(&self, config: api::PodSandboxConfig) -> Result<String, CriError> {
        let mut st = self.state.lock();
        st.calls.push("RunPodSandbox".into());
        st.fail("RunPodSandbox")?;
        let id = st.id("s");
        let created_at = st.now();
        let ip = format!("10.88.0.{}", st.next_id);
        st.sandboxes
            .insert(id.clone(), FakeSandbox { config, state: api::PodSandboxState::SandboxReady, created_at, ip });
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut st = self.state.lock();
        st.calls.push(format!("StopPodSandbox {id}"));
        st.fail("StopPodSandbox")?;
        let Some(s) = st.sandboxes.get_mut(id) else { return Err(not_found("StopPodSandbox", id)) };
        s.state = api::PodSandboxState::SandboxNotready;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let mut st = self.state.lock();
        st.calls.push(format!("RemovePodSandbox {id}"));
        st.fail("RemovePodSandbox")?;
        st.sandboxes.remove(id).ok_or_else(|| not_found("RemovePodSandbox", id))?;
        st.containers.retain(|_, c| c.sandbox_id != id);
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError> {
        let st = self.state.lock();
        st.fail("PodSandboxStatus")?;
        let s = st.sandboxes.get(id).ok_or_else(|| not_found("PodSandboxStatus", id))?;
        Ok(api::PodSandboxStatus {
            id: id.to_string(),
            metadata: s.config.metadata.clone(),
            state: s.state as i32,
            created_at: s.created_at,
            network: Some(api::PodSandboxNetworkStatus { ip: s.ip.clone(), ..Default::default() }),
            labels: s.config.labels.clone(),
            annotations: s.config.annotations.clone(),
            ..Default::default()
        })
    }

    async fn list_pod_sandboxes(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>, CriError> {
        let st = self.state.lock();
        st.fail("ListPodSandbox")?;
        let selector = filter.map(|f| f.label_selector).unwrap_or_default();
        Ok(st
            .sandboxes
            .iter()
            .filter(|(_, s)| selected(&s.config.labels, &selector))
            .map(|(id, s)| api::PodSandbox {
                id: id.clone(),
                metadata: s.config.metadata.clone(),
                state: s.state as i32,
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                runtime_handler: String::new(),
            })
            .collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        _sandbox_config: api::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let mut st = self.state.lock();
        let name = config.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
        st.calls.push(format!("CreateContainer {name}"));
        st.fail("CreateContainer")?;
        if !st.sandboxes.contains_key(sandbox_id) {
            return Err(not_found("CreateContainer", sandbox_id));
        }
        let id = st.id("c");
        let created_at = st.now();
        st.containers.insert(
            id.clone(),
            FakeContainer {
                sandbox_id: sandbox_id.to_string(),
                config,
                state: api::ContainerState::ContainerCreated,
                created_at,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
            },
        );
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let mut st = self.state.lock();
        let name =
            st.containers.get(id).and_then(|c| c.config.metadata.as_ref()).map(|m| m.name.clone()).unwrap_or_default();
        st.calls.push(format!("StartContainer {name}"));
        st.fail("StartContainer")?;
        let now = st.now();
        let c = st.containers.get_mut(id).ok_or_else(|| not_found("StartContainer", id))?;
        c.state = api::ContainerState::ContainerRunning;
        c.started_at = now;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError> {
        let mut st = self.state.lock();
        let name =
            st.containers.get(id).and_then(|c| c.config.metadata.as_ref()).map(|m| m.name.clone()).unwrap_or_default();
        st.calls.push(format!("StopContainer {name}"));
        st.stop_timeouts.insert(name, timeout_secs);
        st.fail("StopContainer")?;
        let now = st.now();
        let code = st.stop_exit_code;
        let c = st.containers.get_mut(id).ok_or_else(|| not_found("StopContainer", id))?;
        if c.state == api::ContainerState::ContainerRunning {
            c.state = api::ContainerState::ContainerExited;
            c.exit_code = code;
            c.finished_at = now;
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let mut st = self.state.lock();
        st.calls.push(format!("RemoveContainer {id}"));
        st.fail("RemoveContainer")?;
        st.containers.remove(id).map(|_| ()).ok_or_else(|| not_found("RemoveContainer", id))
    }

    async fn list_containers(&self, filter: Option<api::ContainerFilter>) -> Result<Vec<api::Container>, CriError> {
        let st = self.state.lock();
        st.fail("ListContainers")?;
        let selector = filter.map(|f| f.label_selector).unwrap_or_default();
        Ok(st
            .containers
            .iter()
            .filter(|(_, c)| selected(&c.config.labels, &selector))
            .map(|(id, c)| api::Container {
                id: id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: c.config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default(),
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                ..Default::default()
            })
            .collect())
    }

    async fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        let st = self.state.lock();
        st.fail("ContainerStatus")?;
        let c = st.containers.get(id).ok_or_else(|| not_found("ContainerStatus", id))?;
        let exited = c.state == api::ContainerState::ContainerExited;
        Ok(api::ContainerStatus {
            id: id.to_string(),
            metadata: c.config.metadata.clone(),
            state: c.state as i32,
            created_at: c.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.config.image.clone(),
            image_ref: c.config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default(),
            reason: match (exited, c.exit_code) {
                (false, _) => String::new(),
                (true, 0) => "Completed".into(),
                (true, _) => "Error".into(),
            },
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            log_path: c.config.log_path.clone(),
            ..Default::default()
        })
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        _timeout: Duration,
    ) -> Result<api::ExecSyncResponse, CriError> {
        let mut st = self.state.lock();
        st.calls.push(format!("ExecSync {id} {}", cmd.join(" ")));
        st.fail("ExecSync")?;
        Ok(api::ExecSyncResponse::default())
    }

    async fn exec(&self, req: api::ExecRequest) -> Result<String, CriError> {
        self.state.lock().calls.push(format!("Exec {}", req.container_id));
        Ok(format!("http://fake/exec/{}", req.container_id))
    }

    async fn attach(&self, req: api::AttachRequest) -> Result<String, CriError> {
        self.state.lock().calls.push(format!("Attach {}", req.container_id));
        Ok(format!("http://fake/attach/{}", req.container_id))
    }

    async fn port_forward(&self, sandbox_id: &str, _ports: Vec<i32>) -> Result<String, CriError> {
        self.state.lock().calls.push(format!("PortForward {sandbox_id}"));
        Ok(format!("http://fake/portforward/{sandbox_id}"))
    }
}

/// An in-memory `ImageService`: every image is present unless pulls were made to fail.
#[derive(Default)]
pub struct FakeImageService {
    calls: Mutex<Vec<String>>,
}

impl FakeImageService {
    /// The calls so far, as `"<RPC> <image>"`, oldest first.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().clone()
    }
}

#[async_trait::async_trait]
impl ImageService for FakeImageService {
    async fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        self.calls.lock().push(format!("ImageStatus {image}"));
        Ok(Some(api::Image { id: format!("sha256:{image}"), repo_tags: vec![image.to_string()], ..Default::default() }))
    }

    async fn pull_image(&self, image: &str, _sandbox: Option<api::PodSandboxConfig>) -> Result<String, CriError> {
        self.calls.lock().push(format!("PullImage {image}"));
        Ok(format!("sha256:{image}"))
    }

    async fn list_images(&self) -> Result<Vec<api::Image>, CriError> {
        Ok(Vec::new())
    }
}
