//! Shared controller machinery (`pkg/controller/controller_utils.go`): expectations, the
//! pod deletion ranking, slow-start batches and pods from templates.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::util::{is_pod_active, is_pod_ready, pod_node_name, pod_phase, pod_ready_condition};

/// How long unfulfilled expectations block a sync before they are considered stale (5 min).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Initial batch of [`slow_start_batch`] (`SlowStartInitialBatchSize`).
pub const SLOW_START_INITIAL_BATCH_SIZE: usize = 1;

#[derive(Debug, Clone, Copy)]
struct Expectee {
    add: i64,
    del: i64,
    timestamp: Instant,
}

/// What a controller expects to observe after its own creates and deletes
/// (`UIDTrackingControllerExpectations`): while creations or deletions are outstanding, the
/// controller does not act on its (stale) cache again, so it never creates twice the pods it
/// needs before the informer catches up. Deletions are tracked by pod key so each is counted
/// once, whether observed as a deletionTimestamp update or as the final delete.
#[derive(Default)]
pub struct Expectations {
    expectations: Mutex<HashMap<String, Expectee>>,
    deletion_keys: Mutex<HashMap<String, HashSet<String>>>,
}

impl Expectations {
    /// No expectations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the controller `key` may sync: no expectations recorded, all fulfilled, or
    /// older than [`EXPECTATIONS_TIMEOUT`].
    pub fn satisfied(&self, key: &str) -> bool {
        match self.expectations.lock().get(key) {
            Some(e) => (e.add <= 0 && e.del <= 0) || e.timestamp.elapsed() > EXPECTATIONS_TIMEOUT,
            None => true,
        }
    }

    fn set(&self, key: &str, add: i64, del: i64) {
        self.expectations.lock().insert(key.to_string(), Expectee { add, del, timestamp: Instant::now() });
    }

    /// Expects `adds` pod creations.
    pub fn expect_creations(&self, key: &str, adds: usize) {
        self.set(key, adds as i64, 0);
    }

    /// Expects the deletion of these pod keys.
    pub fn expect_deletions(&self, key: &str, pod_keys: Vec<String>) {
        let n = pod_keys.len() as i64;
        let mut keys = self.deletion_keys.lock();
        if keys.get(key).is_some_and(|k| !k.is_empty()) {
            tracing::warn!(controller = key, "clobbering existing delete keys");
        }
        keys.insert(key.to_string(), pod_keys.into_iter().collect());
        drop(keys);
        self.set(key, 0, n);
    }

    /// Expects `adds` pod creations and the deletion of these pod keys at once
    /// (`SetExpectations`), for controllers that create and delete in one sync (DaemonSet).
    pub fn expect(&self, key: &str, adds: usize, pod_keys: Vec<String>) {
        let dels = pod_keys.len() as i64;
        self.deletion_keys.lock().insert(key.to_string(), pod_keys.into_iter().collect());
        self.set(key, adds as i64, dels);
    }

    fn lower(&self, key: &str, add: i64, del: i64) {
        if let Some(e) = self.expectations.lock().get_mut(key) {
            e.add -= add;
            e.del -= del;
        }
    }

    /// One expected creation was observed (or will never happen).
    pub fn creation_observed(&self, key: &str) {
        self.lower(key, 1, 0);
    }

    /// The deletion of `pod_key` was observed (counted once per pod key).
    pub fn deletion_observed(&self, key: &str, pod_key: &str) {
        let removed = self.deletion_keys.lock().get_mut(key).is_some_and(|k| k.remove(pod_key));
        if removed {
            self.lower(key, 0, 1);
        }
    }

    /// Forgets the controller (it was deleted).
    pub fn delete_expectations(&self, key: &str) {
        self.expectations.lock().remove(key);
        self.deletion_keys.lock().remove(key);
    }

    /// Outstanding (creations, deletions), for tests and logs.
    pub fn outstanding(&self, key: &str) -> Option<(i64, i64)> {
        self.expectations.lock().get(key).map(|e| (e.add, e.del))
    }
}

/// Creates up to `count` objects by calling `create` in batches of 1, 2, 4, … (concurrently
/// within a batch), stopping after the first batch with a failure, so a systematic failure
/// (quota, admission) costs few requests and few events. Returns the successes and the first
/// error.
pub async fn slow_start_batch<E, F, Fut>(count: usize, initial_batch_size: usize, create: F) -> (usize, Option<E>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut remaining = count;
    let mut successes = 0;
    let mut batch = initial_batch_size.max(1).min(remaining);
    while batch > 0 {
        let results = futures::future::join_all((0..batch).map(|_| create())).await;
        let mut first_error = None;
        for r in results {
            match r {
                Ok(()) => successes += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if first_error.is_some() {
            return (successes, first_error);
        }
        remaining -= batch;
        batch = (2 * batch).min(remaining);
    }
    (successes, None)
}

/// `GetPodFromTemplate`: a pod with the template's labels, annotations, finalizers and spec,
/// `generateName: <controller>-` and the controller reference.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    controller_name: &str,
    controller_ref: OwnerReference,
) -> Pod {
    let tmeta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{controller_name}-")),
            namespace: Some(namespace.to_string()),
            labels: tmeta.labels,
            annotations: tmeta.annotations,
            finalizers: tmeta.finalizers,
            owner_references: Some(vec![controller_ref]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// `controller.kubernetes.io/pod-deletion-cost`: pods with lower cost are deleted first.
pub const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

fn deletion_cost(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST_ANNOTATION))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .unwrap_or(0)
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match pod_phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

fn ready_time(pod: &Pod) -> Option<Timestamp> {
    if !is_pod_ready(pod) {
        return None;
    }
    pod_ready_condition(pod).and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0)
}

/// `⌊log2(age in ns)⌋` of a time (`logarithmicRankDiff`'s buckets): pods of similar age fall
/// in the same bucket. A missing time sorts first (-2), a time not in the past next (-1).
fn log_age_bucket(t: Option<Timestamp>, now: Timestamp) -> i64 {
    match t {
        None => -2,
        Some(t) => {
            let d = now.as_nanosecond() - t.as_nanosecond();
            if d > 0 { (d as f64).log2() as i64 } else { -1 }
        }
    }
}

fn max_container_restarts(pod: &Pod) -> (i32, i32) {
    let status = pod.status.as_ref();
    let regular = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0);
    let sidecars: HashSet<&str> = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect();
    let sidecar = status
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| sidecars.contains(c.name.as_str()))
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0);
    (regular, sidecar)
}

/// The deletion rank of a pod as a sort key (smaller = deleted first), following
/// `ActivePodsWithRanks.Less` criterion by criterion:
/// 1. unassigned < assigned;
/// 2. Pending < Unknown < Running;
/// 3. not ready < ready;
/// 4. lower `controller.kubernetes.io/pod-deletion-cost` < higher;
/// 5. more active pods of the same owner on its node (doubled up) < fewer;
/// 6. ready for a shorter time < longer (logarithmic age buckets, `LogarithmicScaleDown`);
/// 7. more container restarts < fewer (regular containers, then sidecars);
/// 8. no creation time < newer < older (logarithmic buckets);
/// 9. uid.
///
/// Kubernetes' `Less` breaks ties within one age bucket by uid immediately, which is not a
/// total order when mixed with exact-time ties; as a key the order is total (Rust's sort
/// requires it) and pods in one bucket are told apart by the later criteria first.
pub type DeletionKey =
    (u8, u8, u8, i32, std::cmp::Reverse<usize>, i64, std::cmp::Reverse<i32>, std::cmp::Reverse<i32>, i64, String);

/// [`DeletionKey`] of pod `p` with `rank` co-located pods, at `now`.
pub fn deletion_key(p: &Pod, rank: usize, now: Timestamp) -> DeletionKey {
    let ready = is_pod_ready(p);
    let (regular, sidecar) = max_container_restarts(p);
    (
        u8::from(!pod_node_name(p).is_empty()),
        phase_ordinal(p),
        u8::from(ready),
        deletion_cost(p),
        std::cmp::Reverse(rank),
        if ready { log_age_bucket(ready_time(p), now) } else { 0 },
        std::cmp::Reverse(regular),
        std::cmp::Reverse(sidecar),
        log_age_bucket(p.metadata.creation_timestamp.as_ref().map(|t| t.0), now),
        p.metadata.uid.clone().unwrap_or_default(),
    )
}

/// Whether pod `a` (rank `ra`) should be deleted before pod `b` (see [`DeletionKey`]).
pub fn pod_deletion_less(a: &Pod, ra: usize, b: &Pod, rb: usize, now: Timestamp) -> bool {
    deletion_key(a, ra, now) < deletion_key(b, rb, now)
}

/// `getPodsToDelete`: the `diff` pods to delete first among `filtered`, ranking pods higher
/// when more active pods in `related` (pods of the same owner's other ReplicaSets and this one)
/// share their node.
pub fn pods_to_delete<'a>(
    mut filtered: Vec<Pod>,
    related: impl IntoIterator<Item = &'a Pod>,
    diff: usize,
    now: Timestamp,
) -> Vec<Pod> {
    if diff < filtered.len() {
        let mut on_node: HashMap<&str, usize> = HashMap::new();
        for p in related.into_iter().filter(|p| is_pod_active(p)) {
            *on_node.entry(pod_node_name(p)).or_default() += 1;
        }
        filtered.sort_by_cached_key(|p| deletion_key(p, on_node.get(pod_node_name(p)).copied().unwrap_or(0), now));
    }
    filtered.truncate(diff);
    filtered
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::util::add_seconds;

    #[test]
    fn expectations_block_until_observed_and_count_deletions_once() {
        let e = Expectations::new();
        assert!(e.satisfied("ns/rs"));
        e.expect_creations("ns/rs", 2);
        assert!(!e.satisfied("ns/rs"));
        e.creation_observed("ns/rs");
        assert!(!e.satisfied("ns/rs"));
        e.creation_observed("ns/rs");
        assert!(e.satisfied("ns/rs"));

        e.expect_deletions("ns/rs", vec!["ns/p1".into(), "ns/p2".into()]);
        assert!(!e.satisfied("ns/rs"));
        e.deletion_observed("ns/rs", "ns/p1");
        // The same pod observed again (deletionTimestamp update, then the delete) counts once.
        e.deletion_observed("ns/rs", "ns/p1");
        e.deletion_observed("ns/rs", "ns/unrelated");
        assert_eq!(e.outstanding("ns/rs"), Some((0, 1)));
        e.deletion_observed("ns/rs", "ns/p2");
        assert!(e.satisfied("ns/rs"));
        e.delete_expectations("ns/rs");
        assert_eq!(e.outstanding("ns/rs"), None);
    }

    #[tokio::test]
    async fn slow_start_batches_double_and_stop_at_the_first_failing_batch() {
        for (count, fail_from, want_calls, want_ok) in [
            (10, usize::MAX, 10, 10), // batches 1, 2, 4, 3
            (10, 3, 7, 3),            // batches 1 and 2 succeed, the batch of 4 fails: 7 calls
            (10, 0, 1, 0),            // the first create fails: nothing more is tried
            (0, usize::MAX, 0, 0),
        ] {
            let calls = AtomicUsize::new(0);
            let (ok, err) = slow_start_batch(count, SLOW_START_INITIAL_BATCH_SIZE, || {
                let n = calls.fetch_add(1, AtomicOrdering::SeqCst);
                async move { if n >= fail_from { Err(n) } else { Ok(()) } }
            })
            .await;
            assert_eq!(calls.load(AtomicOrdering::SeqCst), want_calls, "count {count} fail_from {fail_from}");
            assert_eq!(ok, want_ok, "count {count} fail_from {fail_from}");
            assert_eq!(err.is_some(), fail_from < count);
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    struct P {
        name: &'static str,
        node: &'static str,
        phase: &'static str,
        ready_since: Option<i64>,
        restarts: i32,
        created: i64,
    }

    fn pod(p: &P) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(p.name.into()),
                uid: Some(p.name.into()),
                creation_timestamp: Some(Time(add_seconds(now(), -p.created))),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: (!p.node.is_empty()).then(|| p.node.to_string()), ..Default::default() }),
            status: Some(PodStatus {
                phase: Some(p.phase.into()),
                conditions: p.ready_since.map(|s| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(add_seconds(now(), -s))),
                        ..Default::default()
                    }]
                }),
                container_statuses: Some(vec![ContainerStatus { restart_count: p.restarts, ..Default::default() }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn deletion_prefers_unscheduled_then_pending_then_not_ready_then_restarts_then_newer() {
        let pods = [
            P {
                name: "running-old",
                node: "n1",
                phase: "Running",
                ready_since: Some(100_000),
                restarts: 0,
                created: 200_000,
            },
            P { name: "unscheduled", node: "", phase: "Pending", ready_since: None, restarts: 0, created: 10 },
            P { name: "pending", node: "n2", phase: "Pending", ready_since: None, restarts: 0, created: 10 },
            P { name: "not-ready", node: "n3", phase: "Running", ready_since: None, restarts: 0, created: 10 },
            P {
                name: "ready-briefly",
                node: "n4",
                phase: "Running",
                ready_since: Some(5),
                restarts: 0,
                created: 200_000,
            },
            P {
                name: "restarting",
                node: "n5",
                phase: "Running",
                ready_since: Some(100_000),
                restarts: 7,
                created: 200_000,
            },
            P {
                name: "running-new",
                node: "n6",
                phase: "Running",
                ready_since: Some(100_000),
                restarts: 0,
                created: 100_001,
            },
        ];
        let all: Vec<Pod> = pods.iter().map(pod).collect();
        // Same-age buckets: ready 100000 s ago is one log2 bucket for all "long ready" pods,
        // so restarts and then creation time decide among them.
        let order: Vec<String> = pods_to_delete(all.clone(), &[] as &[Pod], all.len() - 1, now())
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(order, ["unscheduled", "pending", "not-ready", "ready-briefly", "restarting", "running-new"]);
    }

    #[test]
    fn the_deletion_order_is_total_for_pods_of_mixed_ages() {
        // Ready times and creation times spread over many log2 buckets, some exactly equal.
        let mut pods = Vec::new();
        for i in 0..40i64 {
            let names = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"];
            let mut p = pod(&P {
                name: names[(i % 10) as usize],
                node: if i % 7 == 0 { "" } else { "n1" },
                phase: "Running",
                ready_since: (i % 3 != 0).then_some(1 + (i * i * 37) % 5000),
                restarts: (i % 4) as i32,
                created: 10 + (i * 7919) % 100_000,
            });
            p.metadata.uid = Some(format!("uid-{i:03}"));
            pods.push(p);
        }
        let less = |a: &Pod, b: &Pod| pod_deletion_less(a, 0, b, 0, now());
        for a in &pods {
            assert!(!less(a, a));
            for b in &pods {
                assert!(!(less(a, b) && less(b, a)));
                for c in &pods {
                    if less(a, b) && less(b, c) {
                        assert!(less(a, c));
                    }
                }
            }
        }
        assert_eq!(pods_to_delete(pods.clone(), &pods, 39, now()).len(), 39);
    }

    #[test]
    fn pods_doubled_up_on_a_node_are_deleted_first() {
        let a =
            pod(&P { name: "a", node: "busy", phase: "Running", ready_since: Some(100), restarts: 0, created: 100 });
        let b =
            pod(&P { name: "b", node: "quiet", phase: "Running", ready_since: Some(100), restarts: 0, created: 100 });
        let related = vec![
            a.clone(),
            b.clone(),
            pod(&P { name: "c", node: "busy", phase: "Running", ready_since: Some(100), restarts: 0, created: 100 }),
        ];
        let chosen = pods_to_delete(vec![b, a], &related, 1, now());
        assert_eq!(chosen[0].metadata.name.as_deref(), Some("a"));
    }
}
