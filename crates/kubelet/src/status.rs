//! Pod status as the kubelet reports it (`generateAPIPodStatus`): phase, conditions, container
//! statuses, IPs and start time, computed from the runtime's view of the pod.
//!
//! Follows "Pod Lifecycle" (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/>):
//! phases Pending/Running/Succeeded/Failed, conditions PodScheduled, PodReadyToStartContainers,
//! Initialized, ContainersReady and Ready, container states waiting/running/terminated.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::cri::api;
use crate::kuberuntime::{ContainerInfo, RuntimePod};
use crate::qos;

/// A reason/message pair explaining why a container is waiting (ErrImagePull,
/// ImagePullBackOff, CrashLoopBackOff, CreateContainerConfigError, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingReason {
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// Inputs besides the pod and runtime state.
#[derive(Debug, Clone, Default)]
pub struct StatusInputs {
    /// The node IP.
    pub node_ip: String,
    /// Runtime name for container IDs ("containerd").
    pub runtime_name: String,
    /// Readiness probe results by container id (absent = no result yet).
    pub readiness: HashMap<String, bool>,
    /// Startup probe results by container id (absent = no result yet).
    pub startup: HashMap<String, bool>,
    /// Why containers (by name) are waiting, from the last sync.
    pub waiting: HashMap<String, WaitingReason>,
    /// The pod's containers were stopped by the kubelet (deleted or finished): report a
    /// terminal phase once nothing runs.
    pub terminal: bool,
    /// Now.
    pub now: Option<Timestamp>,
}

fn ns_to_time(ns: i64) -> Option<Time> {
    (ns > 0).then(|| Timestamp::from_nanosecond(i128::from(ns)).ok().map(Time)).flatten()
}

/// The terminated state of an exited container.
fn terminated_state(c: &ContainerInfo, runtime: &str) -> ContainerState {
    let reason = if !c.reason.is_empty() {
        c.reason.clone()
    } else if c.exit_code == 0 {
        "Completed".to_string()
    } else {
        "Error".to_string()
    };
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            container_id: Some(format!("{runtime}://{}", c.id)),
            exit_code: c.exit_code,
            reason: Some(reason),
            message: (!c.message.is_empty()).then(|| c.message.clone()),
            started_at: ns_to_time(c.started_at),
            finished_at: ns_to_time(c.finished_at),
            signal: None,
        }),
        ..Default::default()
    }
}

fn waiting_state(reason: &str, message: Option<&str>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting { reason: Some(reason.to_string()), message: message.map(str::to_string) }),
        ..Default::default()
    }
}

/// True for a sidecar: an init container with `restartPolicy: Always` (KEP-753).
fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn has_probe(c: &Container, kind: &str) -> bool {
    match kind {
        "readiness" => c.readiness_probe.is_some(),
        "startup" => c.startup_probe.is_some(),
        _ => false,
    }
}

/// The status of one container (init or regular).
fn container_status(
    spec: &Container,
    rt: &RuntimePod,
    inputs: &StatusInputs,
    init: bool,
    default_waiting: &str,
) -> ContainerStatus {
    let runtime = &inputs.runtime_name;
    let image = spec.image.clone().unwrap_or_default();
    let waiting = inputs.waiting.get(&spec.name);
    let Some(latest) = rt.latest(&spec.name) else {
        let (reason, message) = match waiting {
            Some(w) => (w.reason.as_str(), Some(w.message.as_str())),
            None => (default_waiting, None),
        };
        return ContainerStatus {
            name: spec.name.clone(),
            image,
            image_id: String::new(),
            ready: false,
            started: Some(false),
            restart_count: 0,
            state: Some(waiting_state(reason, message)),
            ..Default::default()
        };
    };
    let mut status = ContainerStatus {
        name: spec.name.clone(),
        image,
        image_id: latest.image_ref.clone(),
        container_id: Some(format!("{runtime}://{}", latest.id)),
        restart_count: latest.attempt as i32,
        ..Default::default()
    };
    match latest.state {
        api::ContainerState::ContainerRunning => {
            status.state = Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: ns_to_time(latest.started_at) }),
                ..Default::default()
            });
            status.last_state = rt.previous(&spec.name).map(|p| terminated_state(p, runtime));
            let started = !has_probe(spec, "startup") || inputs.startup.get(&latest.id).copied().unwrap_or(false);
            // A regular init container is never ready while it runs; a sidecar is, once started.
            let sidecar = spec.restart_policy.as_deref() == Some("Always");
            let ready = (!init || sidecar)
                && started
                && (!has_probe(spec, "readiness") || inputs.readiness.get(&latest.id).copied().unwrap_or(false));
            status.started = Some(started);
            status.ready = ready;
        }
        api::ContainerState::ContainerExited => {
            match waiting {
                // Exited and waiting to be restarted (CrashLoopBackOff, image errors).
                Some(w) => {
                    status.state = Some(waiting_state(&w.reason, Some(&w.message)));
                    status.last_state = Some(terminated_state(latest, runtime));
                }
                None => {
                    status.state = Some(terminated_state(latest, runtime));
                    status.last_state = rt.previous(&spec.name).map(|p| terminated_state(p, runtime));
                }
            }
            status.started = Some(false);
            status.ready = init && spec.restart_policy.as_deref() != Some("Always") && latest.exit_code == 0;
        }
        _ => {
            let (reason, message) = match waiting {
                Some(w) => (w.reason.as_str(), Some(w.message.as_str())),
                None => ("ContainerCreating", None),
            };
            status.state = Some(waiting_state(reason, message));
            status.last_state = rt.previous(&spec.name).map(|p| terminated_state(p, runtime));
            status.started = Some(false);
        }
    }
    status
}

fn is_terminated(s: &ContainerStatus) -> Option<i32> {
    s.state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code)
}

fn is_running(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

fn last_terminated(s: &ContainerStatus) -> Option<i32> {
    s.last_state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code)
}

/// The pod phase (kubelet `getPhase`, with sidecars). `init` pairs each init container's
/// status with whether it is a sidecar (restartable); `initialized` says a regular container
/// has run in the pod (upstream `HasAnyActiveRegularContainerStarted`), after which unstarted
/// sidecars no longer hold the pod Pending. A running sidecar counts as running, a terminated
/// one is ignored (the pod's outcome is its regular containers'); with `terminal` (the kubelet
/// stopped the pod) a pod that runs nothing more reports Succeeded or Failed.
pub fn pod_phase(
    restart_policy: &str,
    init: &[(bool, ContainerStatus)],
    statuses: &[ContainerStatus],
    terminal: bool,
    initialized: bool,
) -> &'static str {
    let mut pending_init = 0;
    let mut pending_sidecars = 0;
    let mut failed_init = 0;
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for (sidecar, s) in init {
        if *sidecar {
            if is_running(s) {
                if s.started != Some(true) {
                    pending_sidecars += 1;
                }
                running += 1;
            } else if is_terminated(s).is_none() && last_terminated(s).is_none() {
                pending_sidecars += 1;
                waiting += 1;
            }
            continue;
        }
        match is_terminated(s) {
            Some(0) => {}
            Some(_) => failed_init += 1,
            None if is_running(s) => pending_init += 1,
            None => match last_terminated(s) {
                Some(code) if code != 0 => failed_init += 1,
                _ => pending_init += 1,
            },
        }
    }
    for s in statuses {
        if is_running(s) {
            running += 1;
        } else if let Some(code) = is_terminated(s) {
            stopped += 1;
            if code == 0 {
                succeeded += 1;
            }
        } else if last_terminated(s).is_some() {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if failed_init > 0 && restart_policy == "Never" {
        return "Failed";
    }
    let pending = pending_init > 0 || (pending_sidecars > 0 && !initialized) || waiting > 0;
    if terminal && running == 0 && (pending || failed_init > 0) {
        // Killed before it ever ran to completion.
        let regular_waiting =
            statuses.iter().any(|s| !is_running(s) && is_terminated(s).is_none() && last_terminated(s).is_none());
        return if stopped > 0 && stopped == succeeded && !regular_waiting { "Succeeded" } else { "Failed" };
    }
    if pending {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 {
        if terminal {
            return if stopped == succeeded { "Succeeded" } else { "Failed" };
        }
        if restart_policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if restart_policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn condition(type_: &str, ok: bool, reason: Option<String>, message: Option<String>, now: &Time) -> PodCondition {
    PodCondition {
        type_: type_.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: if ok { None } else { reason },
        message: if ok { None } else { message },
        last_transition_time: Some(now.clone()),
        ..Default::default()
    }
}

const KUBELET_CONDITIONS: &[&str] = &["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"];

/// Computes the pod's status from the runtime state.
pub fn generate_pod_status(pod: &Pod, rt: &RuntimePod, inputs: &StatusInputs) -> PodStatus {
    let now = Time(inputs.now.unwrap_or_else(Timestamp::now));
    let spec = pod.spec.clone().unwrap_or_default();
    let old = pod.status.clone().unwrap_or_default();
    let restart_policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
    let host_network = spec.host_network.unwrap_or(false);

    let init_specs = spec.init_containers.clone().unwrap_or_default();
    let init_statuses: Vec<ContainerStatus> =
        init_specs.iter().map(|c| container_status(c, rt, inputs, true, "PodInitializing")).collect();
    // Each regular init container completed, each sidecar started (GeneratePodInitializedCondition).
    let incomplete: Vec<&str> = init_specs
        .iter()
        .zip(&init_statuses)
        .filter(|(c, s)| if is_sidecar(c) { s.started != Some(true) } else { is_terminated(s) != Some(0) })
        .map(|(c, _)| c.name.as_str())
        .collect();
    // Once a regular container has run, the pod has been initialized (even if old init
    // container records were garbage-collected, or a sidecar is restarting).
    let regular_ran = spec.containers.iter().any(|c| rt.latest(&c.name).is_some());
    let initialized = incomplete.is_empty() || regular_ran;
    let default_waiting = if initialized { "ContainerCreating" } else { "PodInitializing" };
    let statuses: Vec<ContainerStatus> =
        spec.containers.iter().map(|c| container_status(c, rt, inputs, false, default_waiting)).collect();

    // Ephemeral containers: reported, never ready, no part of the phase or the conditions.
    let ephemeral_statuses: Vec<ContainerStatus> = crate::kuberuntime::ephemeral_containers(&spec)
        .iter()
        .map(|(c, _)| ContainerStatus { ready: false, ..container_status(c, rt, inputs, false, "ContainerCreating") })
        .collect();
    let init_kinds: Vec<(bool, ContainerStatus)> =
        init_specs.iter().zip(&init_statuses).map(|(c, s)| (is_sidecar(c), s.clone())).collect();
    let phase = pod_phase(&restart_policy, &init_kinds, &statuses, inputs.terminal, regular_ran);
    let completed = matches!(phase, "Succeeded" | "Failed");

    let sandbox = rt.latest_sandbox().filter(|s| s.ready);
    let pod_ip = if host_network {
        Some(inputs.node_ip.clone())
    } else {
        sandbox.and_then(|s| s.ip.clone()).or_else(|| old.pod_ip.clone())
    };

    // Sidecars count towards readiness, before the regular containers (GenerateContainersReadyCondition).
    let unready: Vec<&str> = init_specs
        .iter()
        .zip(&init_statuses)
        .filter(|(c, s)| is_sidecar(c) && !s.ready)
        .map(|(_, s)| s.name.as_str())
        .chain(statuses.iter().filter(|s| !s.ready).map(|s| s.name.as_str()))
        .collect();
    let containers_ready = unready.is_empty();
    let gates: Vec<String> = spec.readiness_gates.iter().flatten().map(|g| g.condition_type.clone()).collect();
    let failed_gates: Vec<&String> = gates
        .iter()
        .filter(|g| !old.conditions.iter().flatten().any(|c| &c.type_ == *g && c.status == "True"))
        .collect();
    let (cr_reason, cr_message) = if completed {
        (Some("PodCompleted".to_string()), None)
    } else {
        (
            Some("ContainersNotReady".to_string()),
            Some(format!("containers with unready status: [{}]", unready.join(" "))),
        )
    };
    let ready_reason_message = if !containers_ready {
        (cr_reason.clone(), cr_message.clone())
    } else {
        (
            Some("ReadinessGatesNotReady".to_string()),
            Some(format!(
                "corresponding condition of pod readiness gate {:?} does not exist or is not True",
                failed_gates.first().map(|s| s.as_str()).unwrap_or_default()
            )),
        )
    };
    let mut conditions = vec![
        condition("PodReadyToStartContainers", sandbox.is_some(), None, None, &now),
        condition(
            "Initialized",
            initialized,
            Some("ContainersNotInitialized".into()),
            Some(format!("containers with incomplete status: [{}]", incomplete.join(" "))),
            &now,
        ),
        condition("ContainersReady", containers_ready && !completed, cr_reason, cr_message, &now),
        condition(
            "Ready",
            containers_ready && failed_gates.is_empty() && !completed,
            ready_reason_message.0,
            ready_reason_message.1,
            &now,
        ),
    ];
    // Conditions owned by others (PodScheduled, DisruptionTarget, readiness gates) are kept.
    let mut others: Vec<PodCondition> =
        old.conditions.iter().flatten().filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str())).cloned().collect();
    if !others.iter().any(|c| c.type_ == "PodScheduled") {
        others.push(condition("PodScheduled", true, None, None, &now));
    }
    for c in &mut conditions {
        if let Some(prev) = old.conditions.iter().flatten().find(|o| o.type_ == c.type_)
            && prev.status == c.status
        {
            c.last_transition_time = prev.last_transition_time.clone().or(c.last_transition_time.clone());
        }
    }
    conditions.extend(others);

    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        host_ip: Some(inputs.node_ip.clone()),
        host_ips: Some(vec![HostIP { ip: inputs.node_ip.clone() }]),
        pod_ip: pod_ip.clone(),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
        start_time: old.start_time.clone().or(Some(now)),
        qos_class: Some(qos::pod_qos_class(pod).as_str().to_string()),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        ephemeral_container_statuses: (!ephemeral_statuses.is_empty()).then_some(ephemeral_statuses),
        nominated_node_name: old.nominated_node_name.clone(),
        message: old.message.clone(),
        reason: old.reason.clone(),
        ..Default::default()
    }
}

/// True when two statuses differ in anything but condition timestamps (so unchanged statuses
/// are not written again).
pub fn status_changed(a: &PodStatus, b: &PodStatus) -> bool {
    let strip = |s: &PodStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_transition_time = None;
            c.last_probe_time = None;
        }
        s
    };
    strip(a) != strip(b)
}

/// Names of containers (init and regular) of `pod`.
pub fn container_names(pod: &Pod) -> HashSet<String> {
    let spec = pod.spec.clone().unwrap_or_default();
    spec.init_containers.iter().flatten().chain(spec.containers.iter()).map(|c| c.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kuberuntime::SandboxInfo;
    use k8s_openapi::api::core::v1::{PodSpec, Probe};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(restart: &str, init: &[&str], containers: &[&str]) -> Pod {
        let c = |n: &&str| Container { name: n.to_string(), image: Some("img:1".into()), ..Default::default() };
        Pod {
            metadata: ObjectMeta { name: Some("p".into()), uid: Some("u".into()), ..Default::default() },
            spec: Some(PodSpec {
                restart_policy: Some(restart.into()),
                init_containers: (!init.is_empty()).then(|| init.iter().map(c).collect()),
                containers: containers.iter().map(c).collect(),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn ctr(name: &str, attempt: u32, state: api::ContainerState, exit_code: i32) -> ContainerInfo {
        ContainerInfo {
            id: format!("{name}-{attempt}"),
            name: name.into(),
            attempt,
            state,
            created_at: i64::from(attempt) + 1,
            started_at: 1_000_000_000,
            finished_at: if state == api::ContainerState::ContainerExited { 2_000_000_000 } else { 0 },
            exit_code,
            reason: String::new(),
            message: String::new(),
            image: "img:1".into(),
            image_ref: "sha256:1".into(),
            sandbox_id: "s".into(),
            hash: String::new(),
            init: false,
        }
    }

    fn sandbox() -> SandboxInfo {
        SandboxInfo { id: "s".into(), attempt: 0, ready: true, created_at: 1, ip: Some("10.42.0.9".into()) }
    }

    fn inputs() -> StatusInputs {
        StatusInputs { node_ip: "192.0.2.1".into(), runtime_name: "containerd".into(), ..Default::default() }
    }

    fn cond(s: &PodStatus, t: &str) -> String {
        s.conditions.iter().flatten().find(|c| c.type_ == t).map(|c| c.status.clone()).unwrap_or_default()
    }

    #[test]
    fn running_containers_make_a_running_ready_pod_with_the_sandbox_ip() {
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", 0, api::ContainerState::ContainerRunning, 0)],
        };
        let s = generate_pod_status(&pod("Always", &[], &["a"]), &rt, &inputs());
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.42.0.9"));
        assert_eq!(cond(&s, "Ready"), "True");
        assert_eq!(cond(&s, "PodScheduled"), "True");
        let cs = &s.container_statuses.clone().unwrap_or_default()[0];
        assert!(cs.ready);
        assert_eq!(cs.container_id.as_deref(), Some("containerd://a-0"));
    }

    #[test]
    fn nothing_created_yet_is_pending_and_container_creating() {
        let s = generate_pod_status(&pod("Always", &[], &["a"]), &RuntimePod::default(), &inputs());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let cs = &s.container_statuses.clone().unwrap_or_default()[0];
        let reason = cs.state.as_ref().and_then(|st| st.waiting.as_ref()).and_then(|w| w.reason.clone());
        assert_eq!(reason.as_deref(), Some("ContainerCreating"));
        assert_eq!(cond(&s, "Ready"), "False");
    }

    #[test]
    fn pending_init_containers_keep_regular_ones_initializing() {
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("i", 0, api::ContainerState::ContainerRunning, 0)],
        };
        let s = generate_pod_status(&pod("Always", &["i"], &["a"]), &rt, &inputs());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Initialized"), "False");
        let cs = &s.container_statuses.clone().unwrap_or_default()[0];
        let reason = cs.state.as_ref().and_then(|st| st.waiting.as_ref()).and_then(|w| w.reason.clone());
        assert_eq!(reason.as_deref(), Some("PodInitializing"));
    }

    #[test]
    fn crash_loop_shows_waiting_with_last_state_and_restart_count() {
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![
                ctr("a", 2, api::ContainerState::ContainerExited, 1),
                ctr("a", 1, api::ContainerState::ContainerExited, 1),
            ],
        };
        let mut inp = inputs();
        inp.waiting.insert(
            "a".into(),
            WaitingReason {
                reason: "CrashLoopBackOff".into(),
                message: "back-off 20s restarting failed container".into(),
            },
        );
        let s = generate_pod_status(&pod("Always", &[], &["a"]), &rt, &inp);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let cs = &s.container_statuses.clone().unwrap_or_default()[0];
        assert_eq!(cs.restart_count, 2);
        assert_eq!(
            cs.state.as_ref().and_then(|st| st.waiting.as_ref()).and_then(|w| w.reason.as_deref()),
            Some("CrashLoopBackOff")
        );
        assert_eq!(cs.last_state.as_ref().and_then(|st| st.terminated.as_ref()).map(|t| t.exit_code), Some(1));
    }

    #[test]
    fn completed_containers_finish_the_pod_per_restart_policy() {
        let done = |code| RuntimePod {
            sandboxes: vec![],
            containers: vec![ctr("a", 0, api::ContainerState::ContainerExited, code)],
        };
        let phase = |policy, code| generate_pod_status(&pod(policy, &[], &["a"]), &done(code), &inputs()).phase;
        assert_eq!(phase("Never", 0).as_deref(), Some("Succeeded"));
        assert_eq!(phase("Never", 1).as_deref(), Some("Failed"));
        assert_eq!(phase("OnFailure", 0).as_deref(), Some("Succeeded"));
        assert_eq!(phase("OnFailure", 1).as_deref(), Some("Running"));
        assert_eq!(phase("Always", 0).as_deref(), Some("Running"));
    }

    #[test]
    fn terminated_pod_keeps_its_ip_and_reports_a_final_phase() {
        let mut p = pod("Always", &[], &["a"]);
        p.status = Some(PodStatus { pod_ip: Some("10.42.0.9".into()), ..Default::default() });
        let rt =
            RuntimePod { sandboxes: vec![], containers: vec![ctr("a", 0, api::ContainerState::ContainerExited, 143)] };
        let mut inp = inputs();
        inp.terminal = true;
        let s = generate_pod_status(&p, &rt, &inp);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.42.0.9"));
        let ready = s.conditions.iter().flatten().find(|c| c.type_ == "Ready").cloned().unwrap_or_default();
        assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
    }

    #[test]
    fn readiness_probe_gates_container_readiness() {
        let mut p = pod("Always", &[], &["a"]);
        if let Some(spec) = p.spec.as_mut() {
            spec.containers[0].readiness_probe = Some(Probe::default());
        }
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", 0, api::ContainerState::ContainerRunning, 0)],
        };
        let s = generate_pod_status(&p, &rt, &inputs());
        assert_eq!(cond(&s, "ContainersReady"), "False");
        let mut inp = inputs();
        inp.readiness.insert("a-0".into(), true);
        assert_eq!(cond(&generate_pod_status(&p, &rt, &inp), "Ready"), "True");
    }

    #[test]
    fn oom_killed_reason_comes_from_the_runtime() {
        let mut c = ctr("a", 0, api::ContainerState::ContainerExited, 137);
        c.reason = "OOMKilled".into();
        let rt = RuntimePod { sandboxes: vec![], containers: vec![c] };
        let s = generate_pod_status(&pod("Never", &[], &["a"]), &rt, &inputs());
        let t =
            s.container_statuses.unwrap_or_default()[0].state.clone().and_then(|st| st.terminated).unwrap_or_default();
        assert_eq!(t.reason.as_deref(), Some("OOMKilled"));
        assert_eq!(t.exit_code, 137);
    }

    /// A pod whose init containers are `(name, sidecar)` pairs.
    fn sidecar_pod(restart: &str, init: &[(&str, bool)], containers: &[&str]) -> Pod {
        let mut p = pod(restart, &[], containers);
        if let Some(spec) = p.spec.as_mut() {
            spec.init_containers = Some(
                init.iter()
                    .map(|(n, sidecar)| Container {
                        name: n.to_string(),
                        image: Some("img:1".into()),
                        restart_policy: sidecar.then(|| "Always".to_string()),
                        ..Default::default()
                    })
                    .collect(),
            );
        }
        p
    }

    fn message(s: &PodStatus, t: &str) -> String {
        s.conditions.iter().flatten().find(|c| c.type_ == t).and_then(|c| c.message.clone()).unwrap_or_default()
    }

    /// Cases after upstream's `TestPodPhaseWithRestartAlwaysRestartableInitContainers` and
    /// `TestPodPhaseWithRestartNeverRestartableInitContainers`.
    #[test]
    fn sidecars_hold_the_pod_pending_until_started_and_do_not_decide_its_outcome() {
        use api::ContainerState::{ContainerExited as Exited, ContainerRunning as Running};
        let p = sidecar_pod("Always", &[("sc", true)], &["a"]);
        let rt = |cs: Vec<ContainerInfo>| RuntimePod { sandboxes: vec![sandbox()], containers: cs };

        let s = generate_pod_status(&p, &rt(vec![]), &inputs());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(message(&s, "Initialized"), "containers with incomplete status: [sc]");

        // Running but not started (its startup probe has no result yet): still initializing.
        let mut probed = p.clone();
        if let Some(c) = probed.spec.as_mut().and_then(|s| s.init_containers.as_mut()).map(|i| &mut i[0]) {
            c.startup_probe = Some(Probe::default());
        }
        let s = generate_pod_status(&probed, &rt(vec![ctr("sc", 0, Running, 0)]), &inputs());
        assert_eq!((s.phase.as_deref(), cond(&s, "Initialized")), (Some("Pending"), "False".into()));
        let mut started = inputs();
        started.startup.insert("sc-0".into(), true);
        let s = generate_pod_status(&probed, &rt(vec![ctr("sc", 0, Running, 0)]), &started);
        assert_eq!(cond(&s, "Initialized"), "True", "started: initialized");
        assert_eq!(s.phase.as_deref(), Some("Pending"), "the app is still waiting");

        let both = rt(vec![ctr("sc", 0, Running, 0), ctr("a", 0, Running, 0)]);
        let s = generate_pod_status(&p, &both, &inputs());
        assert_eq!((s.phase.as_deref(), cond(&s, "Ready")), (Some("Running"), "True".into()));
        let sc = s.init_container_statuses.clone().unwrap_or_default()[0].clone();
        assert_eq!((sc.ready, sc.started), (true, Some(true)), "a started sidecar is ready and started");

        // A sidecar restarting after the app ran: Running, initialized, not ready.
        let restarting = rt(vec![ctr("sc", 1, Exited, 1), ctr("a", 0, Running, 0)]);
        let mut waiting = inputs();
        waiting.waiting.insert("sc".into(), WaitingReason { reason: "CrashLoopBackOff".into(), message: "m".into() });
        let s = generate_pod_status(&p, &restarting, &waiting);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Initialized"), "True");
        assert_eq!(cond(&s, "ContainersReady"), "False");
        assert_eq!(message(&s, "ContainersReady"), "containers with unready status: [sc]");

        // Job-like pods: the outcome is the main containers', the killed sidecar is ignored.
        for (policy, code, phase) in [("Never", 0, "Succeeded"), ("Never", 1, "Failed"), ("OnFailure", 0, "Succeeded")]
        {
            let p = sidecar_pod(policy, &[("sc", true)], &["a"]);
            let done = rt(vec![ctr("sc", 0, Exited, 137), ctr("a", 0, Exited, code)]);
            for terminal in [false, true] {
                let mut inp = inputs();
                inp.terminal = terminal;
                let s = generate_pod_status(&p, &done, &inp);
                assert_eq!(s.phase.as_deref(), Some(phase), "{policy}, exit {code}, terminal {terminal}");
            }
            // Still running its sidecar: Running until the kubelet stops it.
            let s = generate_pod_status(&p, &rt(vec![ctr("sc", 0, Running, 0), ctr("a", 0, Exited, code)]), &inputs());
            assert_eq!(s.phase.as_deref(), Some("Running"), "{policy}, exit {code}, sidecar running");
        }
    }

    #[test]
    fn a_regular_init_container_after_a_sidecar_keeps_the_pod_initializing() {
        use api::ContainerState::{ContainerExited as Exited, ContainerRunning as Running};
        let p = sidecar_pod("Never", &[("sc", true), ("init", false)], &["a"]);
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("sc", 0, Running, 0), ctr("init", 0, Running, 0)],
        };
        let s = generate_pod_status(&p, &rt, &inputs());
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(message(&s, "Initialized"), "containers with incomplete status: [init]");
        let failed = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("sc", 0, Running, 0), ctr("init", 0, Exited, 2)],
        };
        assert_eq!(generate_pod_status(&p, &failed, &inputs()).phase.as_deref(), Some("Failed"), "restartPolicy Never");
    }

    #[test]
    fn unchanged_status_is_detected_ignoring_timestamps() {
        let rt = RuntimePod {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", 0, api::ContainerState::ContainerRunning, 0)],
        };
        let p = pod("Always", &[], &["a"]);
        let mut a_in = inputs();
        a_in.now = Some(Timestamp::UNIX_EPOCH);
        let a = generate_pod_status(&p, &rt, &a_in);
        let mut p2 = p.clone();
        p2.status = Some(a.clone());
        let b = generate_pod_status(&p2, &rt, &inputs());
        assert!(!status_changed(&a, &b));
    }
}
