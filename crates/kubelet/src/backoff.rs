//! Per-key exponential back-off, as the kubelet's `flowcontrol.Backoff` used for
//! CrashLoopBackOff and ImagePullBackOff: 10 s doubling up to 5 min, forgotten once a key has
//! not backed off for twice the maximum (10 min), e.g. after a container ran that long.
//!
//! Reference: "Container restart policy"
//! (<https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#restart-policy>).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The kubelet's initial container restart back-off.
pub const INITIAL: Duration = Duration::from_secs(10);

/// The kubelet's maximum container restart back-off.
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
struct Entry {
    backoff: Duration,
    last_update: Instant,
}

/// Back-off state per key.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(INITIAL, MAX)
    }
}

impl Backoff {
    /// A back-off starting at `initial`, doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max, entries: HashMap::new() }
    }

    fn expired(&self, entry: &Entry, event_time: Instant) -> bool {
        event_time.saturating_duration_since(entry.last_update) > self.max * 2
    }

    /// Records a failure of `key` at `event_time` (e.g. the container's finish time) and
    /// returns the delay now in force: `initial` the first time (or after expiry), doubled
    /// each further time, at most `max`.
    pub fn next(&mut self, key: &str, event_time: Instant) -> Duration {
        let backoff = match self.entries.get(key) {
            Some(e) if !self.expired(e, event_time) => (e.backoff * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(key.to_string(), Entry { backoff, last_update: event_time });
        backoff
    }

    /// True when `key` is still backing off at `now` for a failure at `event_time`: the
    /// current delay has not elapsed since then. Returns the remaining time.
    pub fn in_backoff_since(&self, key: &str, event_time: Instant, now: Instant) -> Option<Duration> {
        let entry = self.entries.get(key)?;
        if self.expired(entry, event_time) {
            return None;
        }
        let elapsed = now.saturating_duration_since(event_time);
        (elapsed < entry.backoff).then(|| entry.backoff - elapsed)
    }

    /// True when `key` is still backing off at `now`, counted from its last recorded failure
    /// (the `event_time` of the last [`Backoff::next`]); returns the remaining time. This is
    /// `flowcontrol.Backoff.IsInBackOffSinceUpdate`, what the kubelet's image puller asks
    /// before pulling again.
    pub fn in_backoff_since_update(&self, key: &str, now: Instant) -> Option<Duration> {
        let last_failure = self.entries.get(key)?.last_update;
        self.in_backoff_since(key, last_failure, now)
    }

    /// The delay currently recorded for `key`.
    pub fn get(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.backoff)
    }

    /// Forgets `key` (e.g. the pod was deleted).
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Forgets every key starting with `prefix`.
    pub fn reset_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }

    /// Drops entries untouched for longer than twice the maximum.
    pub fn gc(&mut self, now: Instant) {
        let max2 = self.max * 2;
        self.entries.retain(|_, e| now.saturating_duration_since(e.last_update) <= max2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_from_ten_seconds_to_five_minutes() {
        let mut b = Backoff::default();
        let t = Instant::now();
        let delays: Vec<u64> = (0..7).map(|i| b.next("c", t + Duration::from_secs(i)).as_secs()).collect();
        assert_eq!(delays, vec![10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn key_is_in_backoff_until_the_delay_elapsed_since_the_failure() {
        let mut b = Backoff::default();
        let failed_at = Instant::now();
        b.next("c", failed_at);
        assert_eq!(
            b.in_backoff_since("c", failed_at, failed_at + Duration::from_secs(4)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(b.in_backoff_since("c", failed_at, failed_at + Duration::from_secs(10)), None);
        assert_eq!(b.in_backoff_since("other", failed_at, failed_at), None);
    }

    #[test]
    fn a_key_is_in_backoff_since_its_last_failure_until_the_delay_has_elapsed() {
        let mut b = Backoff::default();
        let first = Instant::now();
        b.next("img", first);
        let s = Duration::from_secs;
        assert_eq!(b.in_backoff_since_update("img", first + s(3)), Some(s(7)));
        assert_eq!(b.in_backoff_since_update("img", first + s(10)), None, "retried after 10 s");
        let second = first + s(11);
        b.next("img", second);
        assert_eq!(b.in_backoff_since_update("img", second + s(15)), Some(s(5)), "then 20 s");
        assert_eq!(b.in_backoff_since_update("img", second + s(20)), None);
        assert_eq!(b.in_backoff_since_update("other", second), None);
    }

    #[test]
    fn backoff_resets_after_ten_minutes_without_failure() {
        let mut b = Backoff::default();
        let t = Instant::now();
        b.next("c", t);
        b.next("c", t + Duration::from_secs(10));
        assert_eq!(b.get("c"), Some(Duration::from_secs(20)));
        let later = t + Duration::from_secs(10 + 601);
        assert_eq!(b.next("c", later), Duration::from_secs(10));
    }

    #[test]
    fn reset_prefix_forgets_a_pods_containers() {
        let mut b = Backoff::default();
        let t = Instant::now();
        b.next("uid1/a", t);
        b.next("uid1/b", t);
        b.next("uid2/a", t);
        b.reset_prefix("uid1/");
        assert_eq!(b.get("uid1/a"), None);
        assert!(b.get("uid2/a").is_some());
    }
}
