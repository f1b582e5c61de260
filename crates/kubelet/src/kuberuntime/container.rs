//! Starting and killing one container (the upstream `kuberuntime_container.go`), and the
//! CrashLoopBackOff decision before a restart.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::manager::{
    MIN_GRACE_SECONDS, PodSyncState, RuntimeManager, event, field_path, grace_seconds, instant_of, pod_desc,
};
use super::{ContainerInfo, ContainerKind, ContainerStart};
use crate::cri::api;
use crate::envvars::{self, NodeFacts};
use crate::host::EventType;
use crate::images::{self, ImageOutcome};
use crate::kuberuntime;
use crate::prober;
use crate::status::WaitingReason;
use crate::volumes;

/// What the back-off decided for a container SyncPod would restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ContainerAction {
    /// Start a new instance with this attempt number.
    Start(u32),
    /// Waiting for back-off to expire (remaining time).
    Wait(Duration),
}

/// Restart decision for an exited container under CrashLoopBackOff (the upstream
/// `doBackOff`): within the back-off since it finished, the container waits with reason
/// CrashLoopBackOff (and one `BackOff` event); past it, the back-off doubles and a new instance
/// starts.
pub(super) fn backoff_action(
    m: &RuntimeManager,
    st: &mut PodSyncState,
    pod: &Pod,
    c: &Container,
    l: &ContainerInfo,
) -> ContainerAction {
    let key = format!("{}/{}", st.uid, c.name);
    let finished = instant_of(if l.finished_at > 0 { l.finished_at } else { l.created_at });
    let now = Instant::now();
    let mut backoff = m.restart_backoff().lock();
    if let Some(remaining) = backoff.in_backoff_since(&key, finished, now) {
        let delay = backoff.get(&key).unwrap_or_default();
        drop(backoff);
        let message =
            format!("back-off {} restarting failed container={} pod={}", format_duration(delay), c.name, pod_desc(pod));
        let first = st.waiting.get(&c.name).map(|w| w.reason.as_str()) != Some("CrashLoopBackOff");
        st.waiting.insert(c.name.clone(), WaitingReason { reason: "CrashLoopBackOff".into(), message });
        if first {
            event(
                m,
                pod,
                EventType::Warning,
                "BackOff",
                format!("Back-off restarting failed container {} in pod {}", c.name, pod_desc(pod)),
                field_path(c, if l.init { "initContainers" } else { "containers" }),
            );
        }
        return ContainerAction::Wait(remaining + Duration::from_millis(50));
    }
    backoff.next(&key, finished);
    ContainerAction::Start(l.attempt + 1)
}

fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{}m0s", s / 60)
    } else if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Kills one container (the upstream `killContainer`): its preStop hook, then StopContainer
/// with what is left of the grace period (at least the kubelet's minimum): `grace` when the
/// kill is for a failed probe with its own `terminationGracePeriodSeconds`, else the pod's.
pub(super) async fn kill_container(
    m: &RuntimeManager,
    pod: &Pod,
    c: &Container,
    l: &ContainerInfo,
    pod_ip: &str,
    grace: Option<i64>,
) {
    let grace = grace.or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds)).unwrap_or(30);
    let deadline = Instant::now() + Duration::from_secs(grace.max(0) as u64);
    let mut remaining = grace;
    if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.clone()) {
        let budget = deadline.saturating_duration_since(Instant::now());
        if let prober::Outcome::Failure(msg) =
            prober::run_lifecycle_handler(m.runtime.as_ref(), &l.id, c, pod_ip, &hook, budget).await
        {
            event(m, pod, EventType::Warning, "FailedPreStopHook", format!("PreStopHook failed: {msg}"), None);
        }
        // What the hook took comes off the grace period.
        remaining = deadline.saturating_duration_since(Instant::now()).as_secs() as i64;
    }
    if let Err(e) = m.runtime.stop_container(&l.id, remaining.max(MIN_GRACE_SECONDS)).await
        && !e.is_not_found()
    {
        tracing::warn!(container = %l.id, error = %e, "stopping container failed");
    }
}

/// Starts one container (the upstream `startContainer`): ensures its image, makes its
/// environment and mounts, CreateContainer, StartContainer, then its postStart hook. A failure
/// is recorded as an event and the container's waiting reason, and retried by a later sync.
#[allow(clippy::too_many_arguments)]
pub(super) async fn start_container(
    m: &RuntimeManager,
    st: &mut PodSyncState,
    pod: &Pod,
    c: &Container,
    kind: &ContainerKind,
    attempt: u32,
    sandbox_id: &str,
    sandbox_config: &api::PodSandboxConfig,
    facts: &NodeFacts,
    start_permit: &mut Option<tokio::sync::SemaphorePermit<'_>>,
) {
    let fp = field_path(c, kind.list());
    let image = c.image.clone().unwrap_or_default();
    let image_key = format!("{}/{}", st.uid, image);
    let t = Instant::now();
    let pulled = images::ensure_image(m.images.as_ref(), c, m.image_backoff(), &image_key, || {
        event(m, pod, EventType::Normal, "Pulling", format!("Pulling image {image:?}"), fp.clone());
    })
    .await;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "image ensured");
    let image_ref = match pulled {
        Ok(outcome) => {
            let msg = match &outcome {
                ImageOutcome::Present { .. } => format!("Container image {image:?} already present on machine"),
                ImageOutcome::Pulled { took, .. } => {
                    format!("Successfully pulled image {image:?} in {:.3}s", took.as_secs_f64())
                }
            };
            if !matches!(outcome, ImageOutcome::Present { .. }) || st.recorded.insert(format!("pulled/{}", c.name)) {
                event(m, pod, EventType::Normal, "Pulled", msg, fp.clone());
            }
            outcome.image_ref().to_string()
        }
        Err(e) => {
            let (etype, reason) = if e.reason == "ImagePullBackOff" {
                (EventType::Normal, "BackOff")
            } else {
                (EventType::Warning, "Failed")
            };
            event(m, pod, etype, reason, e.message.clone(), fp.clone());
            if e.reason != "ImagePullBackOff" {
                event(m, pod, EventType::Warning, "Failed", format!("Error: {}", e.reason), fp.clone());
            }
            st.waiting.insert(c.name.clone(), WaitingReason { reason: e.reason.to_string(), message: e.message });
            return;
        }
    };
    let t = Instant::now();
    let env = envvars::make_environment(m.host.as_ref(), pod, c, facts).await;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "environment made");
    let env = match env {
        Ok(env) => env,
        Err(e) => {
            let msg = format!("Error: {e}");
            if st.recorded.insert(msg.clone()) {
                event(m, pod, EventType::Warning, "Failed", msg, fp.clone());
            }
            st.waiting.insert(
                c.name.clone(),
                WaitingReason { reason: "CreateContainerConfigError".into(), message: e.to_string() },
            );
            return;
        }
    };
    let env_map: HashMap<String, String> = env.iter().cloned().collect();
    let empty = HashMap::new();
    let mounts =
        match volumes::container_mounts(c, st.volumes.as_ref().unwrap_or(&empty), &env_map, st.etc_hosts.as_deref()) {
            Ok(m) => m,
            Err(e) => {
                st.waiting.insert(
                    c.name.clone(),
                    WaitingReason { reason: "CreateContainerConfigError".into(), message: e.to_string() },
                );
                return;
            }
        };
    let log_dir = m.cfg.pod_log_dir(pod).join(&c.name);
    if let Err(e) = std::fs::create_dir_all(&log_dir) {
        tracing::warn!(dir = %log_dir.display(), error = %e, "creating the container log directory failed");
    }
    let start = ContainerStart { pod, container: c, kind: kind.clone(), attempt, image_ref, env, mounts };
    let config = kuberuntime::container_config(&start, &m.cfg);
    let t = Instant::now();
    let created = m.runtime.create_container(sandbox_id, config, sandbox_config.clone()).await;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "CreateContainer");
    let id = match created {
        Ok(id) => id,
        Err(e) => {
            event(m, pod, EventType::Warning, "Failed", format!("Error: {e}"), fp.clone());
            st.waiting.insert(
                c.name.clone(),
                WaitingReason { reason: "CreateContainerError".into(), message: e.to_string() },
            );
            return;
        }
    };
    event(m, pod, EventType::Normal, "Created", format!("Created container {}", c.name), fp.clone());
    let t = Instant::now();
    let started = m.runtime.start_container(&id).await;
    tracing::debug!(pod = %pod_desc(pod), elapsed_ms = t.elapsed().as_millis() as u64, "StartContainer");
    if let Err(e) = started {
        event(m, pod, EventType::Warning, "Failed", format!("Error: {e}"), fp.clone());
        st.waiting.insert(c.name.clone(), WaitingReason { reason: "RunContainerError".into(), message: e.to_string() });
        return;
    }
    event(m, pod, EventType::Normal, "Started", format!("Started container {}", c.name), fp.clone());
    st.waiting.remove(&c.name);
    if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.clone()) {
        // A hook may take up to the grace period: other pods' starts need not wait for it.
        drop(start_permit.take());
        let timeout = Duration::from_secs(grace_seconds(pod).max(MIN_GRACE_SECONDS) as u64);
        if let prober::Outcome::Failure(msg) =
            prober::run_lifecycle_handler(m.runtime.as_ref(), &id, c, &facts.pod_ip, &hook, timeout).await
        {
            event(
                m,
                pod,
                EventType::Warning,
                "FailedPostStartHook",
                format!("PostStartHook failed: {msg}"),
                fp.clone(),
            );
            let _ = m.runtime.stop_container(&id, MIN_GRACE_SECONDS).await;
            st.waiting.insert(c.name.clone(), WaitingReason { reason: "PostStartHookError".into(), message: msg });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_durations_print_like_go() {
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(format_duration(Duration::from_secs(300)), "5m0s");
    }
}
