//! The controllers' work queue, with `client-go`'s `workqueue` semantics: a FIFO of keys that
//! deduplicates, never hands one key to two workers at once, supports delayed adds and
//! rate-limited re-adds.
//!
//! - **Dedupe**: a key added while already queued is queued once (the *dirty* set).
//! - **Exclusive processing**: a key handed out by [`WorkQueue::get`] is *processing* until
//!   [`WorkQueue::done`]; re-adding it meanwhile marks it dirty, and `done` queues it again, so
//!   the change is processed afterwards, never concurrently.
//! - **Delayed adds** ([`WorkQueue::add_after`]): a waiting set keyed by ready time; the earliest
//!   request for a key wins.
//! - **Rate limiting** ([`WorkQueue::add_rate_limited`], [`WorkQueue::forget`]): the delay comes
//!   from a [`RateLimiter`]; [`default_controller_rate_limiter`] is `client-go`'s
//!   `DefaultControllerRateLimiter`: the larger of a per-key exponential backoff (5 ms doubling
//!   to 1000 s) and an overall token bucket (10 qps, burst 100).
//!
//! Reference: `k8s.io/client-go/util/workqueue` (`queue.go`, `delaying_queue.go`,
//! `rate_limiting_queue.go`, `default_rate_limiters.go`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Decides how long an item waits before it is re-queued after a failure.
pub trait RateLimiter<T>: Send + Sync {
    /// The delay for the next retry of `item` (and records the retry).
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item` (call on success).
    fn forget(&self, item: &T);
    /// How many times `item` has been retried since the last [`RateLimiter::forget`].
    fn num_requeues(&self, item: &T) -> u32;
}

/// Per-item exponential backoff: `base * 2^failures`, capped at `max`
/// (`ItemExponentialFailureRateLimiter`).
pub struct ItemExponentialFailureRateLimiter<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T: Eq + Hash + Clone + Send> ItemExponentialFailureRateLimiter<T> {
    /// A limiter whose first delay is `base` and whose delays never exceed `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self { base, max, failures: Mutex::new(HashMap::new()) }
    }
}

impl<T: Eq + Hash + Clone + Send> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut failures = self.failures.lock();
        let count = failures.entry(item.clone()).or_insert(0);
        let exp = *count;
        *count = count.saturating_add(1);
        // 2^exp overflows (or exceeds any sane cap) quickly: compute in f64 and clamp.
        let backoff = self.base.as_secs_f64() * 2f64.powi(exp.min(1024) as i32);
        if !backoff.is_finite() || backoff > self.max.as_secs_f64() {
            self.max
        } else {
            Duration::from_secs_f64(backoff)
        }
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// An overall token bucket shared by all items (`BucketRateLimiter` over
/// `golang.org/x/time/rate`): `burst` tokens, refilled at `qps` per second; a request that finds
/// the bucket empty reserves a future token and waits for it.
pub struct BucketRateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<Option<(f64, Instant)>>,
}

impl BucketRateLimiter {
    /// A full bucket of `burst` tokens refilled at `qps` tokens per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self { qps, burst: f64::from(burst), state: Mutex::new(None) }
    }

    /// Reserves one token at time `now` and returns how long to wait for it.
    pub fn reserve_at(&self, now: Instant) -> Duration {
        let mut state = self.state.lock();
        let (tokens, last) = state.unwrap_or((self.burst, now));
        let elapsed = now.saturating_duration_since(last).as_secs_f64();
        let tokens = (tokens + elapsed * self.qps).min(self.burst) - 1.0;
        *state = Some((tokens, now.max(last)));
        if tokens >= 0.0 || self.qps <= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-tokens / self.qps) }
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        self.reserve_at(Instant::now())
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// The largest delay of several limiters (`MaxOfRateLimiter`).
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOfRateLimiter<T> {
    /// Combines `limiters`.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters.iter().map(|l| l.when(item)).max().unwrap_or(Duration::ZERO)
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters.iter().map(|l| l.num_requeues(item)).max().unwrap_or(0)
    }
}

/// `workqueue.DefaultControllerRateLimiter()`: max of a per-item exponential backoff (5 ms
/// doubling up to 1000 s) and an overall token bucket of 10 qps with a burst of 100.
pub fn default_controller_rate_limiter<T: Eq + Hash + Clone + Send + 'static>() -> MaxOfRateLimiter<T> {
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000))),
        Box::new(BucketRateLimiter::new(10.0, 100)),
    ])
}

/// Metric handles a queue updates, as client-go's workqueue names them (`workqueue_depth`,
/// `workqueue_adds_total`, `workqueue_retries_total`, `workqueue_queue_duration_seconds`,
/// `workqueue_work_duration_seconds`), labelled by the owner with the queue name.
#[derive(Clone)]
pub struct QueueMetrics {
    /// Current number of queued (ready) items.
    pub depth: Gauge,
    /// Items added (after deduplication).
    pub adds: Counter,
    /// Rate-limited re-adds.
    pub retries: Counter,
    /// Seconds an item waited in the queue (from its add to [`WorkQueue::get`]).
    pub queue_duration: Histogram,
    /// Seconds an item was processing (from [`WorkQueue::get`] to [`WorkQueue::done`]).
    pub work_duration: Histogram,
}

/// client-go's workqueue histogram buckets: 10 ns × 10ⁿ up to 10 s.
pub fn workqueue_duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

impl Default for QueueMetrics {
    fn default() -> Self {
        Self {
            depth: Gauge::default(),
            adds: Counter::default(),
            retries: Counter::default(),
            queue_duration: workqueue_duration_histogram(),
            work_duration: workqueue_duration_histogram(),
        }
    }
}

struct State<T> {
    queue: VecDeque<T>,
    dirty: HashSet<T>,
    processing: HashSet<T>,
    /// Delayed items by (ready time, sequence), with an index from item to its entry.
    waiting: BTreeMap<(Instant, u64), T>,
    waiting_index: HashMap<T, (Instant, u64)>,
    /// When each dirty item was added (for `workqueue_queue_duration_seconds`).
    added_at: HashMap<T, Instant>,
    /// When each processing item was handed out (for `workqueue_work_duration_seconds`).
    started_at: HashMap<T, Instant>,
    seq: u64,
    shutting_down: bool,
}

/// A deduplicating, rate-limited, delaying FIFO of keys (see the module docs).
pub struct WorkQueue<T> {
    state: Mutex<State<T>>,
    notify: Notify,
    rate_limiter: Box<dyn RateLimiter<T>>,
    metrics: QueueMetrics,
}

impl<T: Eq + Hash + Clone + Send + Sync + 'static> WorkQueue<T> {
    /// A queue with [`default_controller_rate_limiter`].
    pub fn new() -> Self {
        Self::with_rate_limiter(Box::new(default_controller_rate_limiter()))
    }

    /// A queue with a custom rate limiter.
    pub fn with_rate_limiter(rate_limiter: Box<dyn RateLimiter<T>>) -> Self {
        Self {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                waiting: BTreeMap::new(),
                waiting_index: HashMap::new(),
                added_at: HashMap::new(),
                started_at: HashMap::new(),
                seq: 0,
                shutting_down: false,
            }),
            notify: Notify::new(),
            rate_limiter,
            metrics: QueueMetrics::default(),
        }
    }

    /// Attaches metric handles (builder style).
    pub fn with_metrics(mut self, metrics: QueueMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    fn add_locked(&self, st: &mut State<T>, item: T) -> bool {
        if st.shutting_down || st.dirty.contains(&item) {
            return false;
        }
        self.metrics.adds.inc();
        st.added_at.entry(item.clone()).or_insert_with(Instant::now);
        st.dirty.insert(item.clone());
        if st.processing.contains(&item) {
            return false;
        }
        st.queue.push_back(item);
        self.metrics.depth.set(st.queue.len() as i64);
        true
    }

    /// Queues `item` unless it is already queued; if it is being processed, it is queued again
    /// when [`WorkQueue::done`] is called.
    pub fn add(&self, item: T) {
        let added = {
            let mut st = self.state.lock();
            self.add_locked(&mut st, item)
        };
        if added {
            self.notify.notify_one();
        }
    }

    /// Queues `item` once `delay` has passed (at once for a zero delay). If the item is already
    /// waiting, the earlier ready time wins.
    pub fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            self.add(item);
            return;
        }
        let ready = Instant::now() + delay;
        {
            let mut st = self.state.lock();
            if st.shutting_down {
                return;
            }
            if let Some(existing) = st.waiting_index.get(&item).copied() {
                if existing.0 <= ready {
                    return;
                }
                st.waiting.remove(&existing);
            }
            st.seq += 1;
            let entry = (ready, st.seq);
            st.waiting.insert(entry, item.clone());
            st.waiting_index.insert(item, entry);
        }
        // Wake a waiting worker so it re-computes its sleep deadline.
        self.notify.notify_one();
    }

    /// Queues `item` after the delay the rate limiter assigns it (a retry).
    pub fn add_rate_limited(&self, item: T) {
        self.metrics.retries.inc();
        let delay = self.rate_limiter.when(&item);
        self.add_after(item, delay);
    }

    /// Clears the rate limiter's memory of `item` (call after a successful reconcile).
    pub fn forget(&self, item: &T) {
        self.rate_limiter.forget(item);
    }

    /// How many rate-limited retries `item` has had since the last [`WorkQueue::forget`].
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.rate_limiter.num_requeues(item)
    }

    /// Moves every delayed item whose time has come into the queue.
    fn promote_due(&self, st: &mut State<T>, now: Instant) {
        while let Some((&entry, _)) = st.waiting.first_key_value() {
            if entry.0 > now {
                break;
            }
            if let Some(item) = st.waiting.remove(&entry) {
                st.waiting_index.remove(&item);
                self.add_locked(st, item);
            }
        }
    }

    /// Waits for the next item and marks it as processing. Returns `None` once the queue is
    /// shut down. Every item returned must be passed to [`WorkQueue::done`].
    pub async fn get(&self) -> Option<T> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            let next_ready = {
                let mut st = self.state.lock();
                self.promote_due(&mut st, Instant::now());
                if let Some(item) = st.queue.pop_front() {
                    st.processing.insert(item.clone());
                    st.dirty.remove(&item);
                    let now = Instant::now();
                    if let Some(added) = st.added_at.remove(&item) {
                        self.metrics.queue_duration.observe(now.duration_since(added).as_secs_f64());
                    }
                    st.started_at.insert(item.clone(), now);
                    self.metrics.depth.set(st.queue.len() as i64);
                    let more = !st.queue.is_empty();
                    drop(st);
                    if more {
                        // Chain the wake-up: another worker may be waiting for the rest.
                        self.notify.notify_one();
                    }
                    return Some(item);
                }
                if st.shutting_down {
                    return None;
                }
                // Register interest before releasing the lock so no wake-up is lost.
                notified.as_mut().enable();
                st.waiting.first_key_value().map(|(entry, _)| entry.0)
            };
            match next_ready {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `item` as no longer processing; if it was re-added meanwhile, queues it again.
    pub fn done(&self, item: &T) {
        let requeued = {
            let mut st = self.state.lock();
            st.processing.remove(item);
            if let Some(started) = st.started_at.remove(item) {
                self.metrics.work_duration.observe(started.elapsed().as_secs_f64());
            }
            if st.dirty.contains(item) && !st.shutting_down {
                st.queue.push_back(item.clone());
                self.metrics.depth.set(st.queue.len() as i64);
                true
            } else {
                false
            }
        };
        if requeued {
            self.notify.notify_one();
        }
    }

    /// Number of items ready to be handed out (delayed items not counted).
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    /// Whether no item is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the queue: pending and delayed items are dropped, every waiting worker wakes up and
    /// [`WorkQueue::get`] returns `None` from now on; later adds are ignored.
    pub fn shut_down(&self) {
        {
            let mut st = self.state.lock();
            st.shutting_down = true;
            st.queue.clear();
            st.waiting.clear();
            st.waiting_index.clear();
            st.added_at.clear();
            self.metrics.depth.set(0);
        }
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Whether [`WorkQueue::shut_down`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.state.lock().shutting_down
    }
}

impl<T: Eq + Hash + Clone + Send + Sync + 'static> Default for WorkQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn adding_a_queued_key_twice_hands_it_out_once() {
        let q = WorkQueue::<String>::new();
        q.add("a".into());
        q.add("a".into());
        q.add("b".into());
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await.as_deref(), Some("a"));
        assert_eq!(q.get().await.as_deref(), Some("b"));
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn a_key_re_added_while_processing_is_handed_out_again_only_after_done() {
        let q = WorkQueue::<String>::new();
        q.add("a".into());
        let item = q.get().await.unwrap();
        q.add("a".into());
        q.add("a".into());
        // Still processing: not handed out again.
        assert_eq!(q.len(), 0);
        q.done(&item);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.done(&"a".to_string());
        assert!(q.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_key_is_never_processed_by_two_workers_at_once() {
        let q = Arc::new(WorkQueue::<String>::new());
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_seen = Arc::new(AtomicUsize::new(0));
        let processed = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (q, in_flight, max_seen, processed) =
                (q.clone(), in_flight.clone(), max_seen.clone(), processed.clone());
            workers.push(tokio::spawn(async move {
                while let Some(key) = q.get().await {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    max_seen.fetch_max(now, Ordering::SeqCst);
                    // Re-add while processing, as an informer event would.
                    q.add(key.clone());
                    tokio::task::yield_now().await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    processed.fetch_add(1, Ordering::SeqCst);
                    q.done(&key);
                }
            }));
        }
        for _ in 0..200 {
            q.add("same".into());
            tokio::task::yield_now().await;
        }
        while processed.load(Ordering::SeqCst) < 50 {
            tokio::task::yield_now().await;
        }
        q.shut_down();
        for w in workers {
            w.await.unwrap();
        }
        assert_eq!(max_seen.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_delayed_key_is_not_ready_at_once_and_is_handed_out_later() {
        let q = WorkQueue::<String>::new();
        q.add_after("a".into(), Duration::from_millis(20));
        assert_eq!(q.len(), 0);
        assert_eq!(q.get().await.as_deref(), Some("a"));
    }

    #[tokio::test]
    async fn a_delayed_key_also_added_directly_is_processed_again_when_its_delay_expires() {
        let q = WorkQueue::<String>::new();
        q.add_after("a".into(), Duration::from_millis(5));
        q.add("a".into());
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.done(&"a".to_string());
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.done(&"a".to_string());
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn shutting_down_wakes_a_waiting_worker() {
        let q = Arc::new(WorkQueue::<String>::new());
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.get().await });
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
        q.add("late".into());
        assert!(q.is_empty());
    }

    #[test]
    fn exponential_backoff_doubles_from_5ms_and_caps_at_1000s() {
        let rl = ItemExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000));
        let item = "k".to_string();
        let delays: Vec<Duration> = (0..5).map(|_| rl.when(&item)).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80].iter().map(|ms| Duration::from_millis(*ms)).collect::<Vec<_>>());
        assert_eq!(rl.num_requeues(&item), 5);
        // 5 ms * 2^18 = 1310 s > 1000 s: capped from the 19th failure on, forever.
        for _ in 5..18 {
            rl.when(&item);
        }
        assert_eq!(rl.when(&item), Duration::from_secs(1000));
        for _ in 0..2000 {
            assert_eq!(rl.when(&item), Duration::from_secs(1000));
        }
        rl.forget(&item);
        assert_eq!(rl.num_requeues(&item), 0);
        assert_eq!(rl.when(&item), Duration::from_millis(5));
        // Keys are independent.
        assert_eq!(rl.when(&"other".to_string()), Duration::from_millis(5));
    }

    #[test]
    fn token_bucket_allows_a_burst_of_100_then_10_per_second() {
        let bucket = BucketRateLimiter::new(10.0, 100);
        let t0 = Instant::now();
        for _ in 0..100 {
            assert_eq!(bucket.reserve_at(t0), Duration::ZERO);
        }
        // The 101st waits for one token at 10 qps, the 102nd for two.
        assert_eq!(bucket.reserve_at(t0), Duration::from_millis(100));
        assert_eq!(bucket.reserve_at(t0), Duration::from_millis(200));
        // One second later 10 tokens were refilled, 2 of which were already reserved.
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..8 {
            assert_eq!(bucket.reserve_at(t1), Duration::ZERO);
        }
        assert!(bucket.reserve_at(t1) > Duration::ZERO);
    }

    #[test]
    fn default_limiter_takes_the_larger_of_backoff_and_bucket() {
        let rl = default_controller_rate_limiter::<String>();
        // Bucket has tokens: the per-item backoff decides.
        assert_eq!(rl.when(&"a".to_string()), Duration::from_millis(5));
        assert_eq!(rl.when(&"a".to_string()), Duration::from_millis(10));
        // Drain the bucket with other keys: a fresh key now waits for a token (~100 ms > 5 ms).
        for i in 0..200 {
            rl.when(&format!("k{i}"));
        }
        assert!(rl.when(&"fresh".to_string()) > Duration::from_millis(5));
        rl.forget(&"a".to_string());
        assert_eq!(rl.num_requeues(&"a".to_string()), 0);
    }

    #[tokio::test]
    async fn metrics_track_depth_adds_and_retries() {
        let metrics = QueueMetrics::default();
        let q = WorkQueue::<String>::new().with_metrics(metrics.clone());
        q.add("a".into());
        q.add("a".into());
        q.add("b".into());
        assert_eq!(metrics.depth.get(), 2);
        assert_eq!(metrics.adds.get(), 2);
        let a = q.get().await.unwrap();
        assert_eq!(metrics.depth.get(), 1);
        q.add_rate_limited(a.clone());
        q.done(&a);
        assert_eq!(metrics.retries.get(), 1);
    }

    #[tokio::test]
    async fn queue_and_work_durations_are_observed_once_per_hand_out() {
        let metrics = QueueMetrics::default();
        let q = WorkQueue::<String>::new().with_metrics(metrics.clone());
        q.add("a".into());
        q.add("a".into());
        let a = q.get().await.unwrap();
        assert_eq!(histogram_count(&metrics.queue_duration), 1);
        assert_eq!(histogram_count(&metrics.work_duration), 0);
        q.done(&a);
        assert_eq!(histogram_count(&metrics.work_duration), 1);
    }

    fn histogram_count(h: &Histogram) -> u64 {
        use prometheus_client::encoding::text::encode;
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("h", "h", h.clone());
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out.lines().find_map(|l| l.strip_prefix("h_count ")).and_then(|n| n.parse().ok()).unwrap_or(u64::MAX)
    }
}
