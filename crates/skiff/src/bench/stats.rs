//! `skiff bench stats`: the kubelet's stats collection at 110 pods on one node — the CPU one
//! collection cycle costs (every pod's and container's cgroup v2 files read and parsed, the
//! node's `/proc` files, the Summary assembled and `/metrics/resource` rendered), against the
//! issue's target of at most 1 % of a core at a 10 s interval, and next to a baseline measured
//! in the same run: the same files read into memory and nothing else (the system-call floor
//! any collector pays).
//!
//! The cgroups are a fake tree in a temp dir laid out as the kubelet's cgroupfs driver lays
//! them out (`kubepods[/burstable|/besteffort]/pod<uid>/<container id>`), each directory with
//! the five files the collector reads, filled with text taken from a real cgroup v2 host: 110
//! real pods would need a node of their own and their processes would load the very CPU being
//! measured.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use skiff_kubelet::stats::collector::{CgroupLayout, ContainerInfo, PodInfo, RuntimeStats, node_stats, pod_stats};
use skiff_kubelet::stats::resource_metrics;
use skiff_kubelet::stats::summary::{PodReference, Summary};

use super::harness::{load_average, process_cpu_time};

/// Flags of `skiff bench stats`.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// Pods on the node (the kubelet's default maxPods).
    #[arg(long, default_value_t = 110)]
    pub pods: usize,
    /// Containers per pod.
    #[arg(long, default_value_t = 2)]
    pub containers: usize,
    /// Collection cycles per measurement.
    #[arg(long, default_value_t = 300)]
    pub cycles: usize,
    /// Measurements of each side, alternated; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

/// The target: CPU share of one core at the collection interval.
const TARGET_CORE_SHARE: f64 = 0.01;
/// The interval the target is stated at.
const INTERVAL: Duration = Duration::from_secs(10);

const CPU_STAT: &str = "usage_usec 1693429\nuser_usec 1147390\nsystem_usec 546038\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n";
const MEMORY_STAT: &str = "anon 1646592\nfile 2838528\nkernel 512000\nkernel_stack 32768\npagetables 61440\nsec_pagetables 0\npercpu 1440\nsock 0\nvmalloc 0\nshmem 0\nzswap 0\nzswapped 0\nfile_mapped 1490944\nfile_dirty 0\nfile_writeback 0\nswapcached 0\nanon_thp 0\nfile_thp 0\nshmem_thp 0\ninactive_anon 1609728\nactive_anon 36864\ninactive_file 1179648\nactive_file 1658880\nunevictable 0\nslab_reclaimable 130216\nslab_unreclaimable 160392\nslab 290608\nworkingset_refault_anon 0\nworkingset_refault_file 0\nworkingset_activate_anon 0\nworkingset_activate_file 0\nworkingset_restore_anon 0\nworkingset_restore_file 0\nworkingset_nodereclaim 0\npgscan 0\npgsteal 0\npgscan_kswapd 0\npgscan_direct 0\npgsteal_kswapd 0\npgsteal_direct 0\npgfault 2941\npgmajfault 9\npgrefill 0\npgactivate 0\npgdeactivate 0\npglazyfree 0\npglazyfreed 0\nthp_fault_alloc 0\nthp_collapse_alloc 0\n";
const IO_STAT: &str = "254:0 rbytes=2531328 wbytes=4096 rios=94 wios=1 dbytes=0 dios=0\n";
const FILES: [&str; 5] = ["cpu.stat", "memory.current", "memory.stat", "io.stat", "pids.current"];

fn write_cgroup(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, text) in FILES.iter().zip([CPU_STAT, "5308416\n", MEMORY_STAT, IO_STAT, "3\n"]) {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}

/// Lays out the fake tree; returns the pods and every cgroup directory.
fn build_tree(root: &Path, pods: usize, containers: usize) -> anyhow::Result<(Vec<PodInfo>, Vec<PathBuf>)> {
    let mut infos = Vec::with_capacity(pods);
    let mut dirs = Vec::new();
    for i in 0..pods {
        let uid = format!("0000{i:04}-aaaa-bbbb-cccc-{i:012}");
        let qos = ["", "burstable/", "besteffort/"][i % 3];
        let pod_dir = root.join(format!("kubepods/{qos}pod{uid}"));
        write_cgroup(&pod_dir)?;
        dirs.push(pod_dir.clone());
        let mut cs = Vec::with_capacity(containers);
        for c in 0..containers {
            let id = format!("{i:032x}{c:032x}");
            write_cgroup(&pod_dir.join(&id))?;
            dirs.push(pod_dir.join(&id));
            cs.push(ContainerInfo { name: format!("c{c}"), id, start_ns: 1_700_000_000_000_000_000 });
        }
        infos.push(PodInfo {
            pod_ref: PodReference { name: format!("pod-{i}"), namespace: "default".into(), uid },
            sandbox_id: format!("sandbox-{i}"),
            start_ns: 1_700_000_000_000_000_000,
            containers: cs,
        });
    }
    Ok((infos, dirs))
}

/// One collection cycle; returns the bytes of `/metrics/resource` (kept so nothing is elided).
fn collect_once(layout: &CgroupLayout, pods: &[PodInfo]) -> usize {
    let mut errors = 0;
    let node = node_stats(layout, "bench-node", 1, &mut errors);
    let pods = pod_stats(layout, pods, &RuntimeStats::default(), 1, &mut errors);
    let summary = Summary { node, pods };
    let json = serde_json::to_vec(&summary).map(|v| v.len()).unwrap_or(0);
    json + resource_metrics::render(&summary, errors).len()
}

/// The baseline: the same files read, nothing parsed.
fn read_once(dirs: &[PathBuf]) -> usize {
    let mut n = 0;
    for d in dirs {
        for f in FILES {
            n += std::fs::read(d.join(f)).map(|b| b.len()).unwrap_or(0);
        }
    }
    for f in ["/proc/stat", "/proc/meminfo", "/proc/loadavg", "/proc/sys/kernel/pid_max"] {
        n += std::fs::read(f).map(|b| b.len()).unwrap_or(0);
    }
    n
}

/// CPU and wall time per cycle of `cycles` runs of `f`.
fn measure(cycles: usize, mut f: impl FnMut() -> usize) -> anyhow::Result<(Duration, Duration)> {
    let cpu0 = process_cpu_time("/proc/self/stat")?;
    let t0 = Instant::now();
    let mut sink = 0usize;
    for _ in 0..cycles {
        sink = sink.wrapping_add(std::hint::black_box(f()));
    }
    let wall = t0.elapsed();
    let cpu = process_cpu_time("/proc/self/stat")?.saturating_sub(cpu0);
    std::hint::black_box(sink);
    let n = cycles.max(1) as u32;
    Ok((cpu / n, wall / n))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Runs the benchmark.
pub async fn run(args: StatsArgs) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let (pods, dirs) = build_tree(tmp.path(), args.pods, args.containers)?;
    let layout = CgroupLayout { fs: Some(tmp.path().to_path_buf()), root: "/kubepods".into() };
    let check = collect_once(&layout, &pods);
    anyhow::ensure!(check > 0, "the collector produced nothing");
    let (cycles, rounds) = (args.cycles, args.rounds.max(1));
    let (collector, baseline) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let (mut collector, mut baseline) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            baseline.push(measure(cycles, || read_once(&dirs))?);
            collector.push(measure(cycles, || collect_once(&layout, &pods))?);
        }
        Ok((collector, baseline))
    })
    .await??;
    let cpu = median(collector.iter().map(|m| m.0).collect());
    let wall = median(collector.iter().map(|m| m.1).collect());
    let base_cpu = median(baseline.iter().map(|m| m.0).collect());
    let base_wall = median(baseline.iter().map(|m| m.1).collect());
    let share = cpu.as_secs_f64() / INTERVAL.as_secs_f64();
    println!(
        "stats collection: {} pods × {} containers ({} cgroup directories, fake tree in a temp dir), {} cycles × {} rounds, load average {}",
        args.pods,
        args.containers,
        args.pods * (args.containers + 1),
        args.cycles,
        rounds,
        load_average()
    );
    println!("  collector: {:.2} ms CPU per cycle ({:.2} ms wall)", cpu.as_secs_f64() * 1e3, wall.as_secs_f64() * 1e3);
    println!(
        "  baseline (read the same files, no parsing): {:.2} ms CPU per cycle ({:.2} ms wall); ratio {:.2}×",
        base_cpu.as_secs_f64() * 1e3,
        base_wall.as_secs_f64() * 1e3,
        cpu.as_secs_f64() / base_cpu.as_secs_f64().max(1e-9)
    );
    println!(
        "  at a {} s interval: {:.3} % of one core (target ≤ {:.0} %): {}",
        INTERVAL.as_secs(),
        share * 100.0,
        TARGET_CORE_SHARE * 100.0,
        if share <= TARGET_CORE_SHARE { "met" } else { "NOT met" }
    );
    Ok(())
}
