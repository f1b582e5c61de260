//! `Parallelizer`: runs per-node work on a fixed pool of `parallelism` workers
//! (`framework/parallelize`), the calling thread being one of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the calling thread works alone before waking the other workers.
pub const FAN_OUT_AFTER: Duration = Duration::from_micros(100);

/// A fixed-size worker pool for per-node work. `parallelism` 1 runs everything inline.
#[derive(Clone)]
pub struct Parallelizer {
    pool: Option<Arc<rayon::ThreadPool>>,
    parallelism: usize,
}

impl std::fmt::Debug for Parallelizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parallelizer").field("parallelism", &self.parallelism).finish()
    }
}

/// Chunk size for `pieces` items: about sqrt(pieces), but small enough that every worker gets
/// work (`chunkSizeFor`).
fn chunk_size(pieces: usize, parallelism: usize) -> usize {
    let s = (pieces as f64).sqrt() as usize;
    let per_worker = pieces / parallelism.max(1) + 1;
    s.min(per_worker).max(1)
}

impl Parallelizer {
    /// A pool of `parallelism` workers (at least 1). If the pool cannot be created the work runs
    /// inline.
    pub fn new(parallelism: usize) -> Self {
        let parallelism = parallelism.max(1);
        let pool = if parallelism > 1 {
            rayon::ThreadPoolBuilder::new()
                .num_threads(parallelism - 1)
                .thread_name(|i| format!("sched-worker-{i}"))
                .build()
                .ok()
                .map(Arc::new)
        } else {
            None
        };
        Self { pool, parallelism }
    }

    /// The number of workers.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// Calls `f(i)` for every `i` in `0..pieces`, spread over the workers. Returns when all are
    /// done.
    pub fn until(&self, pieces: usize, f: impl Fn(usize) + Sync) {
        self.until_stopped(pieces, |i| {
            f(i);
            true
        });
    }

    /// Like [`Parallelizer::until`], but `f` returns whether to go on: once any call returns
    /// false, workers stop claiming new work (calls already running finish).
    ///
    /// The calling thread starts alone and wakes the other workers only once the work has taken
    /// [`FAN_OUT_AFTER`]: waking a worker costs microseconds of latency and CPU (and an idle rayon
    /// worker spins before sleeping), more than short runs (e.g. filtering a few hundred nodes
    /// with cheap plugins) gain from it on a 2-core machine. Which indices run is unaffected.
    pub fn until_stopped(&self, pieces: usize, f: impl Fn(usize) -> bool + Sync) {
        if pieces == 0 {
            return;
        }
        let chunk = chunk_size(pieces, self.parallelism);
        let next = AtomicUsize::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        // Runs one claimed chunk; false when there was nothing left or `f` said stop.
        let claim_and_run = || -> bool {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let start = next.fetch_add(chunk, Ordering::Relaxed);
            if start >= pieces {
                return false;
            }
            for i in start..(start + chunk).min(pieces) {
                if !f(i) {
                    stop.store(true, Ordering::Relaxed);
                    return false;
                }
            }
            true
        };
        let work = || while claim_and_run() {};
        let Some(pool) = self.pool.as_ref().filter(|_| pieces > chunk) else {
            work();
            return;
        };
        let started = Instant::now();
        loop {
            if !claim_and_run() {
                return;
            }
            if started.elapsed() >= FAN_OUT_AFTER {
                break;
            }
        }
        let left = pieces.saturating_sub(next.load(Ordering::Relaxed));
        let workers = self.parallelism.min(left.div_ceil(chunk));
        if workers <= 1 {
            work();
            return;
        }
        pool.in_place_scope(|s| {
            for _ in 1..workers {
                s.spawn(|_| work());
            }
            work();
        });
    }

    /// Maps `f` over `0..pieces` in parallel; results come back in index order.
    pub fn map<T: Send>(&self, pieces: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
        if pieces == 0 {
            return Vec::new();
        }
        let chunk = chunk_size(pieces, self.parallelism);
        let chunks = pieces.div_ceil(chunk);
        let done: parking_lot::Mutex<Vec<(usize, Vec<T>)>> = parking_lot::Mutex::new(Vec::with_capacity(chunks));
        self.until(chunks, |c| {
            let start = c * chunk;
            let part: Vec<T> = (start..(start + chunk).min(pieces)).map(&f).collect();
            done.lock().push((start, part));
        });
        let mut done = done.into_inner();
        done.sort_by_key(|(s, _)| *s);
        let mut out = Vec::with_capacity(pieces);
        for (_, part) in done {
            out.extend(part);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn until_visits_every_index_exactly_once() {
        for p in [1, 2, 4] {
            let par = Parallelizer::new(p);
            let sum = AtomicU64::new(0);
            let count = AtomicU64::new(0);
            par.until(1000, |i| {
                sum.fetch_add(i as u64, Ordering::Relaxed);
                count.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(count.load(Ordering::Relaxed), 1000);
            assert_eq!(sum.load(Ordering::Relaxed), 999 * 1000 / 2);
        }
    }

    #[test]
    fn slow_work_that_fans_out_still_visits_every_index_exactly_once() {
        let par = Parallelizer::new(2);
        let seen: Vec<AtomicU64> = (0..300).map(|_| AtomicU64::new(0)).collect();
        par.until(300, |i| {
            // Each piece takes ~20 µs, so the run outlasts FAN_OUT_AFTER and wakes the worker.
            let t = Instant::now();
            while t.elapsed() < Duration::from_micros(20) {
                std::hint::spin_loop();
            }
            seen[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(seen.iter().all(|n| n.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn until_stopped_stops_claiming_work_once_told() {
        let par = Parallelizer::new(2);
        let count = AtomicU64::new(0);
        par.until_stopped(10_000, |_| count.fetch_add(1, Ordering::Relaxed) < 10);
        let n = count.load(Ordering::Relaxed);
        assert!((11..1000).contains(&n), "{n}");
    }

    #[test]
    fn map_returns_results_in_index_order() {
        let par = Parallelizer::new(3);
        assert_eq!(par.map(50, |i| i * 2), (0..50).map(|i| i * 2).collect::<Vec<_>>());
    }
}
