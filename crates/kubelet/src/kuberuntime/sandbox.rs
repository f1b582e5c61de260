//! Creating a pod's sandbox (the upstream `kuberuntime_sandbox.go` `createPodSandbox`, with
//! SyncPod's replacement of a sandbox that died).

use std::collections::HashSet;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;

use super::RuntimePod;
use super::manager::{PodSyncState, RuntimeManager, event, grace_seconds, kill_runtime_pod, pod_desc};
use crate::host::EventType;
use crate::kuberuntime;

/// Runs a new sandbox for `pod`, whose runtime state is `rt` and has no ready sandbox (with an
/// IP, unless the pod uses the host's network). Whatever the pod still has on the runtime is
/// killed first, since its containers must restart in the new sandbox, and the old sandboxes
/// are stopped once replaced. Returns false when RunPodSandbox failed (recorded as a
/// `FailedCreatePodSandBox` event; a later sync retries).
///
/// # Errors
/// [`crate::Error::Io`] when the pod's log directory cannot be created.
pub(super) async fn create_pod_sandbox(
    m: &RuntimeManager,
    st: &mut PodSyncState,
    pod: &Pod,
    rt: &RuntimePod,
) -> Result<bool, crate::Error> {
    if !rt.containers.is_empty() || !rt.sandboxes.is_empty() {
        tracing::info!(pod = %pod_desc(pod), "sandbox is not ready; recreating it");
        kill_runtime_pod(m, Some(pod), rt, grace_seconds(pod)).await;
        st.stop_probes(&HashSet::new());
        st.etc_hosts = None;
    }
    let attempt = rt.sandboxes.iter().map(|s| s.attempt + 1).max().unwrap_or(0);
    let dns = match m.pod_dns(pod) {
        Ok(dns) => dns,
        Err(e) => {
            let message = format!("Failed to create pod sandbox: failed to generate sandbox config: {e}");
            event(m, pod, EventType::Warning, "FailedCreatePodSandBox", message, None);
            return Ok(false);
        }
    };
    for (reason, message) in dns.warnings {
        event(m, pod, EventType::Warning, reason, message, None);
    }
    let config = kuberuntime::sandbox_config(pod, &m.cfg, attempt, dns.config);
    let log_dir = m.cfg.pod_log_dir(pod);
    std::fs::create_dir_all(&log_dir).map_err(|e| crate::Error::io(format!("creating {}", log_dir.display()), e))?;
    let t = Instant::now();
    let ran = m.runtime.run_pod_sandbox(config).await;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "RunPodSandbox");
    if let Err(e) = ran {
        event(m, pod, EventType::Warning, "FailedCreatePodSandBox", format!("Failed to create pod sandbox: {e}"), None);
        return Ok(false);
    }
    // Old sandboxes are removed once replaced (their containers with them, except the newest
    // instance of each container, kept for lastState and logs --previous).
    for old in rt.sandboxes.iter() {
        let _ = m.runtime.stop_pod_sandbox(&old.id).await;
    }
    Ok(true)
}
