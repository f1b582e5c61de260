//! Runs the scheduler benchmark shapes and prints the reports (the same core `skiff bench
//! scheduler` uses). Usage: `bench_scheduler [scale] [case-name-substring]` where scale (default
//! 1.0) multiplies pod counts (nodes too when below 1).

use skiff_scheduler::{BenchCase, BenchOptions, bench_scheduling};

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let scale: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let filter = std::env::args().nth(2).unwrap_or_default();
    for case in BenchCase::all().into_iter().filter(|c| c.name().contains(filter.as_str())) {
        let base = BenchOptions::scheduler_perf(case);
        let s = |n: usize| ((n as f64 * scale) as usize).max(1);
        let opts = BenchOptions {
            nodes: if scale < 1.0 { s(base.nodes) } else { base.nodes },
            initial_pods: s(base.initial_pods),
            measured_pods: s(base.measured_pods),
            ..base
        };
        println!("{}", bench_scheduling(opts).await);
    }
}
