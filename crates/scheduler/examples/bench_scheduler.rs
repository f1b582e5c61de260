//! Runs the scheduler benchmark shapes and prints the reports (the same core `skiff bench
//! scheduler` uses). Usage: `bench_scheduler [scale]` where scale (default 1.0) multiplies node
//! and pod counts.

use skiff_scheduler::{BenchCase, BenchOptions, bench_scheduling};

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let scale: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    for case in BenchCase::all() {
        let base = BenchOptions::scheduler_perf(case);
        let s = |n: usize| ((n as f64 * scale) as usize).max(1);
        let opts = BenchOptions {
            nodes: s(base.nodes),
            initial_pods: s(base.initial_pods),
            measured_pods: s(base.measured_pods),
            ..base
        };
        println!("{}", bench_scheduling(opts).await);
    }
}
