//! The scheduling queue (`internal/queue.PriorityQueue`).
//!
//! - **activeQ**: a heap ordered by the QueueSort plugin (priority, then queue time); `pop`
//!   blocks until a pod is there.
//! - **backoffQ**: pods that failed recently, ordered by when their backoff ends. Backoff is per
//!   pod: `initial × 2^(attempts−1)`, capped (1 s doubling to 10 s by default).
//!   [`SchedulingQueue::flush_backoff_completed`] (every second) moves expired ones to activeQ.
//! - **unschedulable pods**: parked after a rejection until a cluster event that one of the
//!   rejecting plugins registered for ([`SchedulingQueue::move_all_to_active_or_backoff`]), or
//!   until they have waited `max_in_unschedulable` (5 min,
//!   [`SchedulingQueue::flush_unschedulable_left_over`], every 30 s).
//!
//! A pod popped for scheduling is *in flight*: if a move request happens meanwhile, a rejection
//! sends it to backoffQ instead of the unschedulable pool (the event might have made it fit);
//! updates and deletes seen meanwhile are applied when it comes back.
//! Time comes from a [`Clock`] so tests drive it by hand.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::framework::{ActionType, ClusterEvent, EventResource, Framework, Nominator, PodInfo, QueuedPodInfo};

/// A source of time.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The system monotonic clock.
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to (tests).
pub struct FakeClock {
    base: Instant,
    offset: Mutex<Duration>,
}

impl Default for FakeClock {
    fn default() -> Self {
        Self { base: Instant::now(), offset: Mutex::new(Duration::ZERO) }
    }
}

impl FakeClock {
    /// Moves time forward.
    pub fn advance(&self, d: Duration) {
        *self.offset.lock() += d;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.base + *self.offset.lock()
    }
}

/// Queue timing (`podInitialBackoffSeconds`, `podMaxBackoffSeconds`,
/// `podMaxInUnschedulablePodsDuration`).
#[derive(Clone, Copy, Debug)]
pub struct QueueConfig {
    /// First backoff.
    pub initial_backoff: Duration,
    /// Backoff cap.
    pub max_backoff: Duration,
    /// Longest stay in the unschedulable pool.
    pub max_in_unschedulable: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            max_in_unschedulable: Duration::from_secs(300),
        }
    }
}

impl QueueConfig {
    /// Backoff after `attempts` failed attempts.
    pub fn backoff_duration(&self, attempts: u32) -> Duration {
        let mut d = self.initial_backoff;
        for _ in 1..attempts.max(1) {
            d = d.saturating_mul(2);
            if d >= self.max_backoff {
                return self.max_backoff;
            }
        }
        d.min(self.max_backoff)
    }
}

type Less = Box<dyn Fn(&QueuedPodInfo, &QueuedPodInfo) -> bool + Send + Sync>;

/// A binary heap with keyed update/removal.
struct Heap {
    items: Vec<QueuedPodInfo>,
    index: HashMap<String, usize>,
    less: Less,
}

impl Heap {
    fn new(less: Less) -> Self {
        Self { items: Vec::new(), index: HashMap::new(), less }
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    fn get_mut_and_fix(&mut self, key: &str, f: impl FnOnce(&mut QueuedPodInfo)) -> bool {
        let Some(&i) = self.index.get(key) else { return false };
        f(&mut self.items[i]);
        self.fix(i);
        true
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.items.swap(a, b);
        self.index.insert(self.items[a].pod_info.key.clone(), a);
        self.index.insert(self.items[b].pod_info.key.clone(), b);
    }

    fn up(&mut self, mut i: usize) -> usize {
        while i > 0 {
            let p = (i - 1) / 2;
            if (self.less)(&self.items[i], &self.items[p]) {
                self.swap(i, p);
                i = p;
            } else {
                break;
            }
        }
        i
    }

    fn down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < self.items.len() && (self.less)(&self.items[l], &self.items[m]) {
                m = l;
            }
            if r < self.items.len() && (self.less)(&self.items[r], &self.items[m]) {
                m = r;
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
    }

    fn fix(&mut self, i: usize) {
        let j = self.up(i);
        if j == i {
            self.down(i);
        }
    }

    fn push(&mut self, q: QueuedPodInfo) {
        let key = q.pod_info.key.clone();
        if let Some(&i) = self.index.get(&key) {
            self.items[i] = q;
            self.fix(i);
            return;
        }
        self.items.push(q);
        let i = self.items.len() - 1;
        self.index.insert(key, i);
        self.up(i);
    }

    fn peek(&self) -> Option<&QueuedPodInfo> {
        self.items.first()
    }

    fn remove_at(&mut self, i: usize) -> QueuedPodInfo {
        let last = self.items.len() - 1;
        if i != last {
            self.swap(i, last);
        }
        let q = self.items.pop().expect("non-empty heap");
        self.index.remove(&q.pod_info.key);
        if i < self.items.len() {
            self.fix(i);
        }
        q
    }

    fn pop(&mut self) -> Option<QueuedPodInfo> {
        if self.items.is_empty() { None } else { Some(self.remove_at(0)) }
    }

    fn remove(&mut self, key: &str) -> Option<QueuedPodInfo> {
        let i = *self.index.get(key)?;
        Some(self.remove_at(i))
    }
}

#[derive(Default)]
struct InFlight {
    latest: Option<Arc<PodInfo>>,
    deleted: bool,
}

struct Inner {
    active: Heap,
    backoff: Heap,
    unschedulable: HashMap<String, QueuedPodInfo>,
    in_flight: HashMap<String, InFlight>,
    scheduling_cycle: u64,
    move_request_cycle: Option<u64>,
    closed: bool,
}

/// Counts of pending pods per sub-queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingCounts {
    /// In activeQ.
    pub active: usize,
    /// In backoffQ.
    pub backoff: usize,
    /// In the unschedulable pool.
    pub unschedulable: usize,
}

/// The scheduling queue.
pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    cond: Condvar,
    clock: Arc<dyn Clock>,
    cfg: QueueConfig,
    profiles: HashMap<String, Arc<Framework>>,
    default_profile: Option<Arc<Framework>>,
    nominator: Arc<Nominator>,
}

impl SchedulingQueue {
    /// A queue for pods of `profiles` (the first profile's QueueSort orders activeQ).
    pub fn new(
        profiles: Vec<Arc<Framework>>,
        nominator: Arc<Nominator>,
        clock: Arc<dyn Clock>,
        cfg: QueueConfig,
    ) -> Self {
        let first = profiles.first().cloned();
        let sorter = first.clone();
        let active_less: Less = Box::new(move |a, b| match &sorter {
            Some(f) => f.queue_sort_less(a, b),
            None => a.pod_info.priority > b.pod_info.priority || a.timestamp < b.timestamp,
        });
        let backoff_less: Less = Box::new(move |a, b| {
            a.timestamp + cfg.backoff_duration(a.attempts) < b.timestamp + cfg.backoff_duration(b.attempts)
        });
        Self {
            inner: Mutex::new(Inner {
                active: Heap::new(active_less),
                backoff: Heap::new(backoff_less),
                unschedulable: HashMap::new(),
                in_flight: HashMap::new(),
                scheduling_cycle: 0,
                move_request_cycle: None,
                closed: false,
            }),
            cond: Condvar::new(),
            clock,
            cfg,
            profiles: profiles.iter().map(|f| (f.profile_name().to_string(), f.clone())).collect(),
            default_profile: first,
            nominator,
        }
    }

    fn profile_for(&self, pod: &PodInfo) -> Option<&Arc<Framework>> {
        self.profiles.get(pod.scheduler_name()).or(self.default_profile.as_ref())
    }

    /// The queue's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The queue's timing.
    pub fn config(&self) -> QueueConfig {
        self.cfg
    }

    fn is_backing_off(&self, q: &QueuedPodInfo, now: Instant) -> bool {
        q.attempts > 0 && q.timestamp + self.cfg.backoff_duration(q.attempts) > now
    }

    /// PreEnqueue, then activeQ; a gated pod goes to the unschedulable pool.
    fn to_active_locked(&self, g: &mut Inner, mut q: QueuedPodInfo) {
        let key = q.pod_info.key.clone();
        let s = self.profile_for(&q.pod_info).map(|f| f.run_pre_enqueue_plugins(&q.pod_info));
        if let Some(s) = s.filter(|s| !s.is_success()) {
            q.gated = true;
            q.unschedulable_plugins.insert(s.plugin().to_string());
            g.unschedulable.insert(key, q);
            return;
        }
        q.gated = false;
        g.unschedulable.remove(&key);
        g.backoff.remove(&key);
        g.active.push(q);
        self.cond.notify_one();
    }

    fn to_active_or_backoff_locked(&self, g: &mut Inner, q: QueuedPodInfo, now: Instant) {
        if self.is_backing_off(&q, now) {
            let key = q.pod_info.key.clone();
            g.unschedulable.remove(&key);
            g.backoff.push(q);
        } else {
            self.to_active_locked(g, q);
        }
    }

    /// Adds a new pending pod (`Add`).
    pub fn add(&self, pod: Arc<PodInfo>) {
        let nnn = pod.nominated_node_name().to_string();
        if !nnn.is_empty() {
            self.nominator.add(pod.clone(), &nnn);
        }
        let mut g = self.inner.lock();
        if g.in_flight.contains_key(&pod.key) {
            g.in_flight.insert(pod.key.clone(), InFlight { latest: Some(pod), deleted: false });
            return;
        }
        let key = pod.key.clone();
        g.backoff.remove(&key);
        g.unschedulable.remove(&key);
        let q = QueuedPodInfo::new(pod, self.clock.now());
        self.to_active_locked(&mut g, q);
    }

    /// Pops the next pod, blocking until one is there; `None` once closed.
    pub fn pop(&self) -> Option<QueuedPodInfo> {
        let mut g = self.inner.lock();
        loop {
            if g.closed {
                return None;
            }
            if let Some(q) = self.pop_locked(&mut g) {
                return Some(q);
            }
            self.cond.wait(&mut g);
        }
    }

    /// Pops the next pod if activeQ is not empty.
    pub fn try_pop(&self) -> Option<QueuedPodInfo> {
        let mut g = self.inner.lock();
        self.pop_locked(&mut g)
    }

    fn pop_locked(&self, g: &mut Inner) -> Option<QueuedPodInfo> {
        let mut q = g.active.pop()?;
        g.scheduling_cycle += 1;
        q.attempts += 1;
        if q.initial_attempt_timestamp.is_none() {
            q.initial_attempt_timestamp = Some(self.clock.now());
        }
        g.in_flight.insert(q.pod_info.key.clone(), InFlight::default());
        Some(q)
    }

    /// The number of pods popped so far (`SchedulingCycle`).
    pub fn scheduling_cycle(&self) -> u64 {
        self.inner.lock().scheduling_cycle
    }

    /// The pod's attempt ended (it was assumed or requeued).
    pub fn done(&self, key: &str) {
        self.inner.lock().in_flight.remove(key);
    }

    /// Requeues a pod whose attempt failed (`AddUnschedulableIfNotPresent`): to backoffQ after an
    /// error or when a move request arrived during its attempt, else to the unschedulable pool.
    /// A pod deleted during the attempt is dropped; a newer version seen meanwhile replaces it.
    pub fn add_unschedulable_if_not_present(&self, mut q: QueuedPodInfo, pod_scheduling_cycle: u64) {
        let mut g = self.inner.lock();
        let key = q.pod_info.key.clone();
        if let Some(f) = g.in_flight.remove(&key) {
            if f.deleted {
                return;
            }
            if let Some(latest) = f.latest {
                q.pod_info = latest;
            }
        }
        if g.active.contains(&key) || g.backoff.contains(&key) || g.unschedulable.contains_key(&key) {
            return;
        }
        let now = self.clock.now();
        q.timestamp = now;
        let moved = g.move_request_cycle.is_some_and(|c| c >= pod_scheduling_cycle);
        if moved || q.unschedulable_plugins.is_empty() {
            g.backoff.push(q);
        } else {
            g.unschedulable.insert(key, q);
        }
    }

    /// A pending pod changed (`Update`). In the unschedulable pool it moves back when the change
    /// may help (per its rejecting plugins); elsewhere the newer version replaces the queued one.
    pub fn update(&self, old: Option<&PodInfo>, new: Arc<PodInfo>) {
        let nnn = new.nominated_node_name().to_string();
        if !nnn.is_empty() {
            self.nominator.add(new.clone(), &nnn);
        }
        let mut g = self.inner.lock();
        let key = new.key.clone();
        if let Some(f) = g.in_flight.get_mut(&key) {
            f.latest = Some(new);
            return;
        }
        let replace = |q: &mut QueuedPodInfo| q.pod_info = new.clone();
        if g.active.get_mut_and_fix(&key, replace) || g.backoff.get_mut_and_fix(&key, |q| q.pod_info = new.clone()) {
            return;
        }
        if let Some(mut q) = g.unschedulable.remove(&key) {
            q.pod_info = new.clone();
            let action = old.map_or(ActionType::UPDATE, |o| pod_update_actions(o, &new));
            let event = ClusterEvent { resource: EventResource::UnscheduledPod, action, label: "UnscheduledPodUpdate" };
            let worth = action.0 != 0
                && (q.gated
                    || self.profile_for(&new).is_none_or(|f| f.is_worth_requeuing(&q.unschedulable_plugins, &event)));
            if worth {
                let now = self.clock.now();
                if q.gated {
                    self.to_active_locked(&mut g, q);
                } else {
                    self.to_active_or_backoff_locked(&mut g, q, now);
                }
            } else {
                g.unschedulable.insert(key, q);
            }
            return;
        }
        drop(g);
        self.add(new);
    }

    /// A pending pod was deleted (or got bound by someone else).
    pub fn delete(&self, key: &str, uid: &str) {
        self.nominator.remove(uid);
        let mut g = self.inner.lock();
        if let Some(f) = g.in_flight.get_mut(key) {
            f.deleted = true;
        }
        g.active.remove(key);
        g.backoff.remove(key);
        g.unschedulable.remove(key);
    }

    /// Moves unschedulable pods that `event` may help back to activeQ (or backoffQ while their
    /// backoff runs) (`MoveAllToActiveOrBackoffQueue`).
    pub fn move_all_to_active_or_backoff(&self, event: ClusterEvent) {
        let mut g = self.inner.lock();
        let now = self.clock.now();
        let keys: Vec<String> = g
            .unschedulable
            .iter()
            .filter(|(_, q)| !q.gated)
            .filter(|(_, q)| {
                self.profile_for(&q.pod_info).is_none_or(|f| f.is_worth_requeuing(&q.unschedulable_plugins, &event))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            if let Some(q) = g.unschedulable.remove(&k) {
                self.to_active_or_backoff_locked(&mut g, q, now);
            }
        }
        g.move_request_cycle = Some(g.scheduling_cycle);
    }

    /// Moves pods whose backoff ended to activeQ (`flushBackoffQCompleted`); run every second.
    pub fn flush_backoff_completed(&self) {
        let mut g = self.inner.lock();
        let now = self.clock.now();
        while let Some(q) = g.backoff.peek() {
            if self.is_backing_off(q, now) {
                break;
            }
            if let Some(q) = g.backoff.pop() {
                self.to_active_locked(&mut g, q);
            }
        }
    }

    /// Moves pods parked longer than `max_in_unschedulable` (`flushUnschedulablePodsLeftover`);
    /// run every 30 seconds.
    pub fn flush_unschedulable_left_over(&self) {
        let mut g = self.inner.lock();
        let now = self.clock.now();
        let keys: Vec<String> = g
            .unschedulable
            .iter()
            .filter(|(_, q)| !q.gated && now.saturating_duration_since(q.timestamp) > self.cfg.max_in_unschedulable)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            if let Some(q) = g.unschedulable.remove(&k) {
                self.to_active_or_backoff_locked(&mut g, q, now);
            }
        }
    }

    /// Pending pod counts.
    pub fn pending(&self) -> PendingCounts {
        let g = self.inner.lock();
        PendingCounts { active: g.active.len(), backoff: g.backoff.len(), unschedulable: g.unschedulable.len() }
    }

    /// Pending pods per sub-queue, gated pods counted apart (`scheduler_pending_pods`).
    pub fn pending_pods(&self) -> crate::framework::metrics::PendingPods {
        let g = self.inner.lock();
        let gated = g.unschedulable.values().filter(|q| q.gated).count();
        crate::framework::metrics::PendingPods {
            active: g.active.len(),
            backoff: g.backoff.len(),
            unschedulable: g.unschedulable.len() - gated,
            gated,
        }
    }

    /// Where a pod is: `"active"`, `"backoff"`, `"unschedulable"`, `"in-flight"`, or None.
    pub fn locate(&self, key: &str) -> Option<&'static str> {
        let g = self.inner.lock();
        if g.active.contains(key) {
            Some("active")
        } else if g.backoff.contains(key) {
            Some("backoff")
        } else if g.unschedulable.contains_key(key) {
            Some("unschedulable")
        } else if g.in_flight.contains_key(key) {
            Some("in-flight")
        } else {
            None
        }
    }

    /// Wakes `pop` callers and makes them return None.
    pub fn close(&self) {
        self.inner.lock().closed = true;
        self.cond.notify_all();
    }
}

impl crate::framework::metrics::PendingPodsSource for SchedulingQueue {
    fn pending_pods(&self) -> crate::framework::metrics::PendingPods {
        SchedulingQueue::pending_pods(self)
    }
}

/// What changed between two versions of a pending pod, as event actions.
pub fn pod_update_actions(old: &PodInfo, new: &PodInfo) -> ActionType {
    let mut a = ActionType(0);
    if old.labels() != new.labels() {
        a = a.or(ActionType::UPDATE_POD_LABEL);
    }
    let (os, ns) = (old.pod.spec.as_ref(), new.pod.spec.as_ref());
    if os.and_then(|s| s.tolerations.as_ref()) != ns.and_then(|s| s.tolerations.as_ref()) {
        a = a.or(ActionType::UPDATE_POD_TOLERATIONS);
    }
    let gates = |s: Option<&k8s_openapi::api::core::v1::PodSpec>| {
        s.and_then(|s| s.scheduling_gates.as_ref()).map_or(0, Vec::len)
    };
    if gates(os) > 0 && gates(ns) == 0 {
        a = a.or(ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED);
    }
    if new.requests.milli_cpu < old.requests.milli_cpu || new.requests.memory < old.requests.memory {
        a = a.or(ActionType::UPDATE_POD_SCALE_DOWN);
    }
    if a.0 == 0 && os != ns {
        a = ActionType::UPDATE_POD_OTHER;
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RecordingApi;
    use crate::config::{SchedulerConfig, build_frameworks};
    use crate::framework::Handle;
    use crate::plugins::names;
    use crate::testing::make_pod;
    use std::collections::HashSet;

    fn queue() -> (SchedulingQueue, Arc<FakeClock>) {
        let handle = Handle::new(Arc::new(RecordingApi::default()));
        let fw = build_frameworks(&SchedulerConfig::default(), &handle).unwrap();
        let clock = Arc::new(FakeClock::default());
        let q = SchedulingQueue::new(fw, handle.nominator.clone(), clock.clone(), QueueConfig::default());
        (q, clock)
    }

    fn pop_names(q: &SchedulingQueue) -> Vec<String> {
        std::iter::from_fn(|| q.try_pop()).map(|p| p.pod_info.name.clone()).collect()
    }

    fn reject(q: &SchedulingQueue, by: &str) -> String {
        let mut p = q.try_pop().expect("a pod");
        let cycle = q.scheduling_cycle();
        p.unschedulable_plugins = HashSet::from([by.to_string()]);
        let name = p.pod_info.name.clone();
        q.add_unschedulable_if_not_present(p, cycle);
        name
    }

    #[test]
    fn active_queue_pops_by_priority_then_arrival() {
        let (q, clock) = queue();
        q.add(make_pod("low").priority(1).info());
        clock.advance(Duration::from_millis(1));
        q.add(make_pod("high").priority(100).info());
        clock.advance(Duration::from_millis(1));
        q.add(make_pod("low2").priority(1).info());
        clock.advance(Duration::from_millis(1));
        q.add(make_pod("high2").priority(100).info());
        assert_eq!(pop_names(&q), vec!["high", "high2", "low", "low2"]);
    }

    #[test]
    fn backoff_doubles_from_one_second_up_to_ten() {
        let cfg = QueueConfig::default();
        let got: Vec<u64> = (1..=6).map(|a| cfg.backoff_duration(a).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn errored_pod_waits_out_its_backoff_before_returning_to_active() {
        let (q, clock) = queue();
        q.add(make_pod("p").info());
        for attempt in 1..=3u32 {
            let p = q.try_pop().expect("pod active");
            assert_eq!(p.attempts, attempt);
            let cycle = q.scheduling_cycle();
            q.add_unschedulable_if_not_present(p, cycle); // error: no rejecting plugins
            assert_eq!(q.locate("default/p"), Some("backoff"));
            let backoff = QueueConfig::default().backoff_duration(attempt);
            clock.advance(backoff - Duration::from_millis(1));
            q.flush_backoff_completed();
            assert_eq!(q.locate("default/p"), Some("backoff"), "attempt {attempt}: still backing off");
            clock.advance(Duration::from_millis(1));
            q.flush_backoff_completed();
            assert_eq!(q.locate("default/p"), Some("active"), "attempt {attempt}: backoff over");
        }
    }

    #[test]
    fn unschedulable_pods_move_only_on_events_their_plugins_registered() {
        let (q, clock) = queue();
        q.add(make_pod("fit").info());
        q.add(make_pod("taint").info());
        let a = reject(&q, names::NODE_RESOURCES_FIT);
        let b = reject(&q, names::TAINT_TOLERATION);
        assert_eq!((a.as_str(), b.as_str()), ("fit", "taint"));
        assert_eq!(q.pending(), PendingCounts { active: 0, backoff: 0, unschedulable: 2 });
        clock.advance(Duration::from_secs(20));
        // A pod deletion frees resources: only the NodeResourcesFit rejection may be helped.
        q.move_all_to_active_or_backoff(ClusterEvent::ASSIGNED_POD_DELETE);
        assert_eq!(q.locate("default/fit"), Some("active"));
        assert_eq!(q.locate("default/taint"), Some("unschedulable"));
        // A taint change helps the other one.
        q.move_all_to_active_or_backoff(ClusterEvent {
            resource: EventResource::Node,
            action: ActionType::UPDATE_NODE_TAINT,
            label: "NodeTaintChange",
        });
        assert_eq!(q.locate("default/taint"), Some("active"));
    }

    #[test]
    fn a_moved_pod_still_in_backoff_goes_to_backoff_queue() {
        let (q, _clock) = queue();
        q.add(make_pod("p").info());
        reject(&q, names::NODE_RESOURCES_FIT);
        q.move_all_to_active_or_backoff(ClusterEvent::NODE_ADD);
        assert_eq!(q.locate("default/p"), Some("backoff"));
    }

    #[test]
    fn rejection_after_a_move_request_during_the_attempt_goes_to_backoff() {
        let (q, _clock) = queue();
        q.add(make_pod("p").info());
        let mut p = q.try_pop().unwrap();
        let cycle = q.scheduling_cycle();
        q.move_all_to_active_or_backoff(ClusterEvent::NODE_ADD);
        p.unschedulable_plugins.insert(names::NODE_RESOURCES_FIT.into());
        q.add_unschedulable_if_not_present(p, cycle);
        assert_eq!(q.locate("default/p"), Some("backoff"));
    }

    #[test]
    fn unschedulable_pods_are_flushed_after_five_minutes() {
        let (q, clock) = queue();
        q.add(make_pod("p").info());
        reject(&q, names::NODE_AFFINITY);
        clock.advance(Duration::from_secs(299));
        q.flush_unschedulable_left_over();
        assert_eq!(q.locate("default/p"), Some("unschedulable"));
        clock.advance(Duration::from_secs(2));
        q.flush_unschedulable_left_over();
        assert_eq!(q.locate("default/p"), Some("active"));
    }

    #[test]
    fn gated_pods_wait_until_their_gates_are_removed() {
        let (q, _clock) = queue();
        let gated = make_pod("p").scheduling_gate("example.com/wait").info();
        q.add(gated.clone());
        assert_eq!(q.locate("default/p"), Some("unschedulable"));
        q.move_all_to_active_or_backoff(ClusterEvent::NODE_ADD);
        assert_eq!(q.locate("default/p"), Some("unschedulable"));
        q.update(Some(&gated), make_pod("p").info());
        assert_eq!(q.locate("default/p"), Some("active"));
    }

    #[test]
    fn label_update_requeues_a_pod_rejected_by_affinity_but_not_by_fit() {
        let (q, _clock) = queue();
        let old = make_pod("p").info();
        q.add(old.clone());
        reject(&q, names::NODE_RESOURCES_FIT);
        q.update(Some(&old), make_pod("p").label("x", "y").info());
        assert_eq!(q.locate("default/p"), Some("unschedulable"));
        q.update(Some(&old), make_pod("p").label("x", "y").info());
        let (q, _clock) = queue();
        q.add(old.clone());
        reject(&q, names::INTER_POD_AFFINITY);
        q.update(Some(&old), make_pod("p").label("x", "y").info());
        assert_ne!(q.locate("default/p"), Some("unschedulable"));
    }

    #[test]
    fn pods_deleted_in_flight_are_not_requeued() {
        let (q, _clock) = queue();
        q.add(make_pod("p").info());
        let p = q.try_pop().unwrap();
        q.delete("default/p", "uid-p");
        q.add_unschedulable_if_not_present(p, 1);
        assert_eq!(q.locate("default/p"), None);
    }

    #[test]
    fn pop_blocks_until_a_pod_arrives_or_the_queue_closes() {
        let (q, _clock) = queue();
        let q = Arc::new(q);
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.pop().map(|p| p.pod_info.name.clone()));
        q.add(make_pod("late").info());
        assert_eq!(t.join().unwrap().as_deref(), Some("late"));
        let q3 = q.clone();
        let t = std::thread::spawn(move || q3.pop().is_none());
        q.close();
        assert!(t.join().unwrap());
    }
}
