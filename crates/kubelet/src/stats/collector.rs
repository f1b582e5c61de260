//! The stats collector: one [`Summary`] of the node and every pod the runtime runs, from the
//! runtime's pod sandboxes and containers (CRI `ListPodSandbox`, `ListContainers`), their
//! usage as the runtime reports it (`ListContainerStats`, `ListPodSandboxStats`) and the
//! cgroup v2 files of each pod and container ([`super::cgroup`]), as the kubelet's CRI stats
//! provider does.
//!
//! For each value the runtime's figure is used when it has one, else the cgroup's; a pod
//! without pod-level figures gets the sum of its containers'. Node CPU comes from the v2
//! root's `cpu.stat`, else `/proc/stat`; node memory from `/proc/meminfo` ([`super::node`]).
//! Nothing here fails: what cannot be read is left out of the Summary and counted in
//! [`Collected::errors`] (the `resource_scrape_error` of `/metrics/resource`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::cgroup::{CgroupStats, read_cgroup};
use super::node;
use super::summary::{
    ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, PodStats, ProcessStats, RlimitStats, Summary,
};
use crate::cri::{RuntimeService, api};
use crate::qos::{self, QosClass};

/// Where the cgroup v2 hierarchy is and where pods live in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The cgroup v2 mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host);
    /// `None` without one.
    pub fs: Option<PathBuf>,
    /// The pods' cgroup root inside it (the agent's `cgroup_root`, e.g. `/kubepods`).
    pub root: String,
}

impl CgroupLayout {
    /// The host's cgroup v2 mount with the pods under `root`.
    pub fn detect(root: &str) -> Self {
        let fs = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.join("cgroup.controllers").exists());
        CgroupLayout { fs, root: root.to_string() }
    }

    /// The cgroup directory of pod `uid` (whichever QoS class it is under).
    pub fn pod_dir(&self, uid: &str) -> Option<PathBuf> {
        let fs = self.fs.as_ref()?;
        [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort]
            .into_iter()
            .map(|q| fs.join(qos::cgroup_parent(&self.root, q, uid).trim_start_matches('/')))
            .find(|d| d.is_dir())
    }
}

/// A running container of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    /// Name from the pod spec.
    pub name: String,
    /// Runtime id (its cgroup is `<pod cgroup>/<id>` with the cgroupfs driver).
    pub id: String,
    /// Creation time, Unix ns.
    pub start_ns: i64,
}

/// A ready pod sandbox and its running containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// Which pod.
    pub pod_ref: PodReference,
    /// Sandbox id.
    pub sandbox_id: String,
    /// Sandbox creation time, Unix ns.
    pub start_ns: i64,
    /// Running containers.
    pub containers: Vec<ContainerInfo>,
}

/// What the runtime reported itself, by container id and by sandbox id.
#[derive(Debug, Clone, Default)]
pub struct RuntimeStats {
    /// `ListContainerStats`.
    pub containers: HashMap<String, api::ContainerStats>,
    /// `ListPodSandboxStats`.
    pub sandboxes: HashMap<String, api::PodSandboxStats>,
}

/// A Summary and how many of its sources failed.
#[derive(Debug, Clone)]
pub struct Collected {
    /// The Summary.
    pub summary: Summary,
    /// Failed runtime calls and unreadable or corrupt cgroup files.
    pub errors: u32,
}

/// The ready sandboxes with their running containers.
pub fn pod_infos(sandboxes: &[api::PodSandbox], containers: &[api::Container]) -> Vec<PodInfo> {
    let mut by_sandbox: HashMap<&str, Vec<ContainerInfo>> = HashMap::new();
    for c in containers.iter().filter(|c| c.state == api::ContainerState::ContainerRunning as i32) {
        let name = c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
        by_sandbox.entry(&c.pod_sandbox_id).or_default().push(ContainerInfo {
            name,
            id: c.id.clone(),
            start_ns: c.created_at,
        });
    }
    let mut pods: Vec<PodInfo> = sandboxes
        .iter()
        .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
        .filter_map(|s| {
            let m = s.metadata.as_ref()?;
            let mut containers = by_sandbox.remove(s.id.as_str()).unwrap_or_default();
            containers.sort_by(|a, b| a.name.cmp(&b.name));
            Some(PodInfo {
                pod_ref: PodReference { name: m.name.clone(), namespace: m.namespace.clone(), uid: m.uid.clone() },
                sandbox_id: s.id.clone(),
                start_ns: s.created_at,
                containers,
            })
        })
        .collect();
    pods.sort_by(|a, b| (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name)));
    pods
}

fn cri_cpu(cpu: Option<&api::CpuUsage>) -> Option<CpuStats> {
    let cpu = cpu?;
    Some(CpuStats { time: cpu.timestamp, usage_core_nano_seconds: Some(cpu.usage_core_nano_seconds.as_ref()?.value) })
}

fn cri_memory(m: Option<&api::MemoryUsage>) -> Option<MemoryStats> {
    let m = m?;
    let v = |x: &Option<api::UInt64Value>| x.as_ref().map(|x| x.value);
    Some(MemoryStats {
        time: m.timestamp,
        available_bytes: v(&m.available_bytes),
        usage_bytes: v(&m.usage_bytes),
        working_set_bytes: Some(v(&m.working_set_bytes)?),
        rss_bytes: v(&m.rss_bytes),
        page_faults: v(&m.page_faults),
        major_page_faults: v(&m.major_page_faults),
    })
}

fn cgroup_cpu(s: &CgroupStats, now_ns: i64) -> Option<CpuStats> {
    Some(CpuStats { time: now_ns, usage_core_nano_seconds: Some(s.cpu_usage_ns?) })
}

fn cgroup_memory(s: &CgroupStats, now_ns: i64) -> Option<MemoryStats> {
    Some(MemoryStats {
        time: now_ns,
        available_bytes: None,
        usage_bytes: s.memory_usage_bytes,
        working_set_bytes: Some(s.memory_working_set_bytes?),
        rss_bytes: s.memory_rss_bytes,
        page_faults: s.page_faults.map(|p| p.0),
        major_page_faults: s.page_faults.map(|p| p.1),
    })
}

fn read_counted(dir: Option<&Path>, errors: &mut u32) -> Option<CgroupStats> {
    let s = read_cgroup(dir?)?;
    *errors += s.errors;
    Some(s)
}

/// The stats of every pod in `pods`, merging `runtime`'s figures with the cgroup files under
/// `layout`; `now_ns` timestamps values read from files. Adds unreadable files to `errors`.
pub fn pod_stats(
    layout: &CgroupLayout,
    pods: &[PodInfo],
    runtime: &RuntimeStats,
    now_ns: i64,
    errors: &mut u32,
) -> Vec<PodStats> {
    let mut out = Vec::with_capacity(pods.len());
    for pod in pods {
        let pod_dir = layout.pod_dir(&pod.pod_ref.uid);
        let mut containers = Vec::with_capacity(pod.containers.len());
        for c in &pod.containers {
            let cri = runtime.containers.get(&c.id);
            let mut cpu = cri_cpu(cri.and_then(|s| s.cpu.as_ref()));
            let mut memory = cri_memory(cri.and_then(|s| s.memory.as_ref()));
            if cpu.is_none() || memory.is_none() {
                let dir = pod_dir.as_ref().map(|d| d.join(&c.id));
                if let Some(s) = read_counted(dir.as_deref(), errors) {
                    cpu = cpu.or_else(|| cgroup_cpu(&s, now_ns));
                    memory = memory.or_else(|| cgroup_memory(&s, now_ns));
                }
            }
            containers.push(ContainerStats { name: c.name.clone(), start_time: c.start_ns, cpu, memory });
        }
        let linux = runtime.sandboxes.get(&pod.sandbox_id).and_then(|s| s.linux.as_ref());
        let mut cpu = cri_cpu(linux.and_then(|l| l.cpu.as_ref()));
        let mut memory = cri_memory(linux.and_then(|l| l.memory.as_ref()));
        let mut processes =
            linux.and_then(|l| l.process.as_ref()).and_then(|p| p.process_count.as_ref()).map(|v| v.value);
        if (cpu.is_none() || memory.is_none() || processes.is_none())
            && let Some(s) = read_counted(pod_dir.as_deref(), errors)
        {
            cpu = cpu.or_else(|| cgroup_cpu(&s, now_ns));
            memory = memory.or_else(|| cgroup_memory(&s, now_ns));
            processes = processes.or(s.pids);
        }
        // Without pod-level figures, the pod is the sum of its containers.
        if cpu.is_none() && !containers.is_empty() && containers.iter().all(|c| c.cpu.is_some()) {
            let sum = containers.iter().filter_map(|c| c.cpu?.usage_core_nano_seconds).sum();
            let time = containers.iter().filter_map(|c| c.cpu.map(|x| x.time)).max().unwrap_or(now_ns);
            cpu = Some(CpuStats { time, usage_core_nano_seconds: Some(sum) });
        }
        if memory.is_none() && !containers.is_empty() && containers.iter().all(|c| c.memory.is_some()) {
            let sum =
                |f: fn(&MemoryStats) -> Option<u64>| containers.iter().filter_map(|c| f(c.memory.as_ref()?)).sum();
            let time = containers.iter().filter_map(|c| c.memory.map(|x| x.time)).max().unwrap_or(now_ns);
            memory = Some(MemoryStats {
                time,
                working_set_bytes: Some(sum(|m| m.working_set_bytes)),
                usage_bytes: Some(sum(|m| m.usage_bytes)),
                ..Default::default()
            });
        }
        out.push(PodStats {
            pod_ref: pod.pod_ref.clone(),
            start_time: pod.start_ns,
            containers,
            cpu,
            memory,
            process_stats: processes.map(|n| ProcessStats { process_count: Some(n) }),
        });
    }
    out
}

fn read_file(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The node's stats: CPU from the cgroup v2 root (else `/proc/stat`), memory from
/// `/proc/meminfo`, process ids from `/proc`.
pub fn node_stats(layout: &CgroupLayout, node_name: &str, now_ns: i64, errors: &mut u32) -> NodeStats {
    let stat = read_file("/proc/stat");
    let root_cpu = layout.fs.as_ref().and_then(|fs| read_counted(Some(fs), errors)).and_then(|s| s.cpu_usage_ns);
    let cpu_ns = root_cpu.or_else(|| stat.as_deref().and_then(node::proc_stat_cpu_ns));
    let memory = read_file("/proc/meminfo").as_deref().and_then(node::meminfo);
    if cpu_ns.is_none() {
        *errors += 1;
    }
    if memory.is_none() {
        *errors += 1;
    }
    let curproc = read_file("/proc/loadavg")
        .and_then(|l| l.split_whitespace().nth(3).and_then(|f| f.split_once('/')).and_then(|(_, n)| n.parse().ok()));
    NodeStats {
        node_name: node_name.to_string(),
        start_time: stat.as_deref().and_then(node::proc_stat_boot_time).unwrap_or(0).saturating_mul(1_000_000_000),
        cpu: cpu_ns.map(|ns| CpuStats { time: now_ns, usage_core_nano_seconds: Some(ns) }),
        memory: memory.map(|m| MemoryStats {
            time: now_ns,
            available_bytes: Some(m.capacity.saturating_sub(m.working_set)),
            usage_bytes: Some(m.usage),
            working_set_bytes: Some(m.working_set),
            ..Default::default()
        }),
        rlimit: Some(RlimitStats {
            time: now_ns,
            maxpid: read_file("/proc/sys/kernel/pid_max").and_then(|s| s.trim().parse().ok()),
            curproc,
        }),
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// Collects a Summary of the node `node_name` from `runtime` and the cgroups under `layout`.
pub async fn collect(runtime: &dyn RuntimeService, layout: CgroupLayout, node_name: String) -> Collected {
    let mut errors = 0;
    let ready = api::PodSandboxFilter {
        state: Some(api::PodSandboxStateValue { state: api::PodSandboxState::SandboxReady as i32 }),
        ..Default::default()
    };
    let running = api::ContainerFilter {
        state: Some(api::ContainerStateValue { state: api::ContainerState::ContainerRunning as i32 }),
        ..Default::default()
    };
    let sandboxes = runtime.list_pod_sandboxes(Some(ready)).await.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "stats: listing pod sandboxes failed");
        errors += 1;
        Vec::new()
    });
    let containers = runtime.list_containers(Some(running)).await.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "stats: listing containers failed");
        errors += 1;
        Vec::new()
    });
    // Optional calls: a runtime without them leaves the cgroup files as the source.
    let by_id = |attrs: Option<&String>| attrs.cloned().unwrap_or_default();
    let runtime_stats = RuntimeStats {
        containers: runtime
            .list_container_stats()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|s| (by_id(s.attributes.as_ref().map(|a| &a.id)), s))
            .collect(),
        sandboxes: runtime
            .list_pod_sandbox_stats()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|s| (by_id(s.attributes.as_ref().map(|a| &a.id)), s))
            .collect(),
    };
    let pods = pod_infos(&sandboxes, &containers);
    let joined = tokio::task::spawn_blocking(move || {
        let now = now_ns();
        let mut errors = 0;
        let node = node_stats(&layout, &node_name, now, &mut errors);
        let pods = pod_stats(&layout, &pods, &runtime_stats, now, &mut errors);
        (Summary { node, pods }, errors)
    })
    .await;
    match joined {
        Ok((summary, e)) => Collected { summary, errors: errors + e },
        Err(_) => Collected {
            summary: Summary {
                node: NodeStats { node_name: String::new(), start_time: 0, cpu: None, memory: None, rlimit: None },
                pods: Vec::new(),
            },
            errors: errors + 1,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        std::fs::create_dir_all(dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    fn pod(uid: &str, containers: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            pod_ref: PodReference { name: format!("p-{uid}"), namespace: "default".into(), uid: uid.into() },
            sandbox_id: format!("sb-{uid}"),
            start_ns: 1_000_000_000,
            containers: containers
                .iter()
                .map(|(n, id)| ContainerInfo { name: n.to_string(), id: id.to_string(), start_ns: 2_000_000_000 })
                .collect(),
        }
    }

    #[test]
    fn cgroup_files_fill_pod_and_container_stats() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = CgroupLayout { fs: Some(tmp.path().to_path_buf()), root: "/kubepods".into() };
        let pod_dir = tmp.path().join("kubepods/burstable/podu1");
        write(
            &pod_dir,
            &[
                ("cpu.stat", "usage_usec 3000\n"),
                ("memory.current", "8192\n"),
                ("memory.stat", "inactive_file 4096\nanon 100\n"),
                ("pids.current", "4\n"),
            ],
        );
        write(
            &pod_dir.join("c1"),
            &[("cpu.stat", "usage_usec 1000\n"), ("memory.current", "4096\n"), ("memory.stat", "inactive_file 0\n")],
        );
        let mut errors = 0;
        let stats = pod_stats(&layout, &[pod("u1", &[("app", "c1")])], &RuntimeStats::default(), 77, &mut errors);
        assert_eq!(errors, 0);
        let p = &stats[0];
        assert_eq!(p.cpu.unwrap().usage_core_nano_seconds, Some(3_000_000));
        assert_eq!(p.memory.unwrap().working_set_bytes, Some(4096));
        assert_eq!(p.process_stats.unwrap().process_count, Some(4));
        let c = &p.containers[0];
        assert_eq!(c.cpu.unwrap(), CpuStats { time: 77, usage_core_nano_seconds: Some(1_000_000) });
        assert_eq!(c.memory.unwrap().working_set_bytes, Some(4096));
    }

    #[test]
    fn runtime_figures_win_and_a_pod_without_a_cgroup_sums_its_containers() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = CgroupLayout { fs: Some(tmp.path().to_path_buf()), root: "/kubepods".into() };
        let u64v = |v| Some(api::UInt64Value { value: v });
        let cri = |id: &str, cpu, mem| api::ContainerStats {
            attributes: Some(api::ContainerAttributes { id: id.into(), ..Default::default() }),
            cpu: Some(api::CpuUsage { timestamp: 5, usage_core_nano_seconds: u64v(cpu), usage_nano_cores: None }),
            memory: Some(api::MemoryUsage { timestamp: 6, working_set_bytes: u64v(mem), ..Default::default() }),
            ..Default::default()
        };
        let runtime = RuntimeStats {
            containers: HashMap::from([("c1".into(), cri("c1", 10, 100)), ("c2".into(), cri("c2", 20, 200))]),
            sandboxes: HashMap::new(),
        };
        let mut errors = 0;
        let stats = pod_stats(&layout, &[pod("u2", &[("a", "c1"), ("b", "c2")])], &runtime, 77, &mut errors);
        let p = &stats[0];
        assert_eq!(p.cpu.unwrap(), CpuStats { time: 5, usage_core_nano_seconds: Some(30) });
        assert_eq!(p.memory.unwrap().working_set_bytes, Some(300));
        assert_eq!(p.memory.unwrap().time, 6);
        assert_eq!(p.process_stats, None);
        assert_eq!(errors, 0);
    }

    #[test]
    fn corrupt_or_vanished_cgroups_leave_gaps_and_count_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = CgroupLayout { fs: Some(tmp.path().to_path_buf()), root: "/kubepods".into() };
        write(&tmp.path().join("kubepods/podu3"), &[("cpu.stat", "garbage"), ("memory.current", "x")]);
        let mut errors = 0;
        let stats = pod_stats(
            &layout,
            &[pod("u3", &[("app", "gone")]), pod("u4", &[])],
            &RuntimeStats::default(),
            1,
            &mut errors,
        );
        assert_eq!(errors, 2);
        assert_eq!(stats.len(), 2);
        assert_eq!((stats[0].cpu, stats[0].memory), (None, None));
        assert_eq!((stats[0].containers[0].cpu, stats[0].containers[0].memory), (None, None));
        assert_eq!((stats[1].cpu, stats[1].containers.len()), (None, 0));
    }

    #[test]
    fn only_ready_sandboxes_and_running_containers_are_reported() {
        let sb = |id: &str, uid: &str, state: api::PodSandboxState| api::PodSandbox {
            id: id.into(),
            metadata: Some(api::PodSandboxMetadata {
                name: format!("n{uid}"),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            state: state as i32,
            created_at: 9,
            ..Default::default()
        };
        let c = |id: &str, sandbox: &str, name: &str, state: api::ContainerState| api::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            metadata: Some(api::ContainerMetadata { name: name.into(), attempt: 0 }),
            state: state as i32,
            created_at: 11,
            ..Default::default()
        };
        let pods = pod_infos(
            &[
                sb("s1", "u1", api::PodSandboxState::SandboxReady),
                sb("s2", "u2", api::PodSandboxState::SandboxNotready),
            ],
            &[
                c("c1", "s1", "web", api::ContainerState::ContainerRunning),
                c("c2", "s1", "old", api::ContainerState::ContainerExited),
                c("c3", "s2", "x", api::ContainerState::ContainerRunning),
            ],
        );
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].pod_ref.uid, "u1");
        assert_eq!(pods[0].containers, vec![ContainerInfo { name: "web".into(), id: "c1".into(), start_ns: 11 }]);
    }
}
