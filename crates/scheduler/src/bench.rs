//! The scheduling benchmark core, in the shape of kube-scheduler's `scheduler_perf`: N nodes, some
//! initial pods (scheduled first, not measured), then M measured pods, all through the real
//! scheduling cycle over an in-memory cache with a no-op API (binding succeeds immediately).
//! `skiff bench scheduler` prints the report; this module measures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::api::NoopApi;
use crate::cache::Cache;
use crate::config::{SchedulerConfig, build_frameworks};
use crate::framework::{Handle, Parallelizer, PodInfo};
use crate::queue::{QueueConfig, RealClock, SchedulingQueue};
use crate::schedule_one::{Outcome, Scheduler, Shared};
use crate::testing::{make_node, make_pod};

/// Which scheduler_perf workload to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchCase {
    /// `SchedulingBasic`: plain pods requesting 100m CPU / 500Mi.
    SchedulingBasic,
    /// `SchedulingPodAntiAffinity`: every pod has required hostname anti-affinity to the others.
    PodAntiAffinity,
    /// `TopologySpreading`: pods spread over 3 zones with `DoNotSchedule`, maxSkew 5.
    TopologySpreading,
}

impl BenchCase {
    /// Every case, in report order.
    pub fn all() -> [BenchCase; 3] {
        [BenchCase::SchedulingBasic, BenchCase::PodAntiAffinity, BenchCase::TopologySpreading]
    }

    /// The scheduler_perf name.
    pub fn name(self) -> &'static str {
        match self {
            BenchCase::SchedulingBasic => "SchedulingBasic",
            BenchCase::PodAntiAffinity => "SchedulingPodAntiAffinity",
            BenchCase::TopologySpreading => "TopologySpreading",
        }
    }
}

/// Benchmark shape.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// The workload.
    pub case: BenchCase,
    /// Nodes (4 CPU, 32Gi, 110 pods each).
    pub nodes: usize,
    /// Pods scheduled before measuring.
    pub initial_pods: usize,
    /// Pods measured.
    pub measured_pods: usize,
    /// Filter/score workers (default: CPU cores).
    pub parallelism: Option<usize>,
    /// `percentageOfNodesToScore` (0: adaptive).
    pub percentage_of_nodes_to_score: i32,
}

impl BenchOptions {
    /// The scheduler_perf "5000Nodes" shape of `case`: Basic 5,000 nodes / 1,000 initial /
    /// 10,000 measured; anti-affinity 5,000 / 1,000 / 1,000; topology spreading
    /// 5,000 / 5,000 / 2,000.
    pub fn scheduler_perf(case: BenchCase) -> Self {
        let (initial, measured) = match case {
            BenchCase::SchedulingBasic => (1_000, 10_000),
            BenchCase::PodAntiAffinity => (1_000, 1_000),
            BenchCase::TopologySpreading => (5_000, 2_000),
        };
        Self {
            case,
            nodes: 5_000,
            initial_pods: initial,
            measured_pods: measured,
            parallelism: None,
            percentage_of_nodes_to_score: 0,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// The workload name.
    pub case: &'static str,
    /// Nodes.
    pub nodes: usize,
    /// Initial pods.
    pub initial_pods: usize,
    /// Measured pods.
    pub measured_pods: usize,
    /// Measured pods that were scheduled.
    pub scheduled: usize,
    /// Measured pods that fit nowhere.
    pub unschedulable: usize,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Measured pods scheduled per second.
    pub pods_per_second: f64,
    /// Scheduling-cycle latency percentiles: p50, p90, p95, p99.
    pub latency_percentiles: [Duration; 4],
    /// Workers used.
    pub parallelism: usize,
    /// CPU time (user + system, all threads of the process) spent per measured scheduled pod:
    /// independent of how busy the machine is. None where `/proc/self/stat` is unreadable.
    pub cpu_per_pod: Option<Duration>,
    /// `/proc/loadavg`'s 1-minute load average at the end of the run (context for `elapsed`).
    pub load_average: Option<f64>,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [p50, p90, p95, p99] = self.latency_percentiles;
        write!(
            f,
            "{}: {} nodes, {} initial + {} measured pods: {} scheduled, {} unschedulable in {:.2?} = {:.0} pods/s; \
             cycle latency p50 {:.0?} p90 {:.0?} p95 {:.0?} p99 {:.0?}; CPU {} µs/pod (parallelism {}, load average {})",
            self.case,
            self.nodes,
            self.initial_pods,
            self.measured_pods,
            self.scheduled,
            self.unschedulable,
            self.elapsed,
            self.pods_per_second,
            p50,
            p90,
            p95,
            p99,
            self.cpu_per_pod.map_or("?".to_string(), |d| format!("{:.0}", d.as_secs_f64() * 1e6)),
            self.parallelism,
            self.load_average.map_or("?".to_string(), |l| format!("{l:.2}")),
        )
    }
}

fn bench_node(i: usize, case: BenchCase) -> Node {
    let mut b = make_node(&format!("node-{i:05}")).capacity(&[("cpu", "4"), ("memory", "32Gi"), ("pods", "110")]);
    if case == BenchCase::TopologySpreading {
        b = b.zone(["moon-1", "moon-2", "moon-3"][i % 3]);
    }
    b.obj()
}

fn bench_pod(name: &str, case: BenchCase) -> Pod {
    let b = make_pod(name).req(&[("cpu", "100m"), ("memory", "500Mi")]);
    match case {
        BenchCase::SchedulingBasic => b.obj(),
        BenchCase::PodAntiAffinity => {
            b.label("color", "green").pod_anti_affinity("kubernetes.io/hostname", &[("color", "green")]).obj()
        }
        BenchCase::TopologySpreading => b
            .label("color", "blue")
            .spread_constraint(5, "topology.kubernetes.io/zone", "DoNotSchedule", &[("color", "blue")])
            .obj(),
    }
}

/// User + system CPU time of this process (every thread) from `/proc/self/stat`, in clock ticks
/// of 10 ms (`CLK_TCK` = 100 on Linux).
fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Runs one benchmark and reports throughput and per-cycle latency. Must be called inside a
/// multi-threaded Tokio runtime (binding cycles run on it; the scheduling loop runs on a
/// blocking thread).
pub async fn bench_scheduling(opts: BenchOptions) -> BenchReport {
    let parallelism =
        opts.parallelism.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let mut handle = Handle::new(Arc::new(NoopApi));
    handle.parallelizer = Parallelizer::new(parallelism);
    let cfg = SchedulerConfig::default();
    let profiles = match build_frameworks(&cfg, &handle) {
        Ok(p) => p,
        Err(e) => panic!("default profile must build: {e}"),
    };
    let queue = Arc::new(SchedulingQueue::new(
        profiles.clone(),
        handle.nominator.clone(),
        Arc::new(RealClock),
        QueueConfig::default(),
    ));
    let cache = Arc::new(Cache::new());
    for i in 0..opts.nodes {
        cache.add_node(bench_node(i, opts.case));
    }
    let shared = Shared { cache, queue: queue.clone(), handle };
    let runtime = tokio::runtime::Handle::current();
    let mut sched = Scheduler::new(shared, profiles, opts.percentage_of_nodes_to_score, Some(1), runtime);
    let case = opts.case;
    let opts2 = opts.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let make = |prefix: &str, n: usize| -> Vec<Arc<PodInfo>> {
            (0..n).map(|i| Arc::new(PodInfo::new(bench_pod(&format!("{prefix}-{i}"), case)))).collect()
        };
        let run = |sched: &mut Scheduler, pods: Vec<Arc<PodInfo>>, lat: Option<&mut Vec<Duration>>| -> (usize, usize) {
            for p in pods {
                queue.add(p);
            }
            let (mut ok, mut failed) = (0, 0);
            let mut lat = lat;
            while let Some(q) = queue.try_pop() {
                let t = Instant::now();
                let outcome = sched.schedule_one(q);
                if let Some(l) = lat.as_deref_mut() {
                    l.push(t.elapsed());
                }
                match outcome {
                    Outcome::Scheduled { .. } => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        };
        run(&mut sched, make("init", opts2.initial_pods), None);
        let measured = make("measured", opts2.measured_pods);
        let mut lat = Vec::with_capacity(opts2.measured_pods);
        let cpu_start = process_cpu_time();
        let start = Instant::now();
        let (ok, failed) = run(&mut sched, measured, Some(&mut lat));
        let elapsed = start.elapsed();
        let cpu = cpu_start.zip(process_cpu_time()).map(|(a, b)| b.saturating_sub(a));
        (elapsed, ok, failed, lat, cpu)
    })
    .await;
    let (elapsed, scheduled, unschedulable, mut lat, cpu) =
        joined.unwrap_or_else(|e| panic!("benchmark loop panicked: {e}"));
    lat.sort();
    BenchReport {
        case: opts.case.name(),
        nodes: opts.nodes,
        initial_pods: opts.initial_pods,
        measured_pods: opts.measured_pods,
        scheduled,
        unschedulable,
        elapsed,
        pods_per_second: scheduled as f64 / elapsed.as_secs_f64().max(1e-9),
        latency_percentiles: [
            percentile(&lat, 0.5),
            percentile(&lat, 0.9),
            percentile(&lat, 0.95),
            percentile(&lat, 0.99),
        ],
        parallelism,
        cpu_per_pod: cpu.filter(|_| scheduled > 0).map(|c| c / scheduled as u32),
        load_average: load_average(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_benchmarks_schedule_every_pod() {
        for case in BenchCase::all() {
            let opts =
                BenchOptions { nodes: 60, initial_pods: 10, measured_pods: 40, ..BenchOptions::scheduler_perf(case) };
            let r = bench_scheduling(opts).await;
            assert_eq!((r.scheduled, r.unschedulable), (40, 0), "{r}");
            assert!(r.latency_percentiles[0] <= r.latency_percentiles[3]);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn anti_affinity_benchmark_reports_pods_that_fit_nowhere() {
        let opts = BenchOptions {
            nodes: 20,
            initial_pods: 15,
            measured_pods: 10,
            ..BenchOptions::scheduler_perf(BenchCase::PodAntiAffinity)
        };
        let r = bench_scheduling(opts).await;
        assert_eq!((r.scheduled, r.unschedulable), (5, 5), "{r}");
    }

    #[test]
    fn process_cpu_time_grows_with_work() {
        let before = process_cpu_time().expect("/proc/self/stat is readable on Linux");
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut x = 0u64;
        // Spin until a clock tick of CPU time is accounted (10 ms of CPU), or give up.
        while process_cpu_time().unwrap() <= before && Instant::now() < deadline {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        assert!(process_cpu_time().unwrap() > before, "no CPU time accounted after 30 s of spinning");
    }

    #[test]
    fn percentiles_pick_the_ceiling_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&d, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
