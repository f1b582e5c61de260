//! Scheduling cycles over an in-memory cache: where pods land, and what users are told when
//! they fit nowhere.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use skiff_scheduler::SchedulerConfig;
use skiff_scheduler::api::{ApiCall, RecordingApi};
use skiff_scheduler::cache::Cache;
use skiff_scheduler::config::build_frameworks;
use skiff_scheduler::framework::{ActionType, ClusterEvent, EventResource, Handle, Parallelizer, PodInfo};
use skiff_scheduler::queue::{FakeClock, QueueConfig, SchedulingQueue};
use skiff_scheduler::schedule_one::{Outcome, Scheduler, Shared, num_feasible_nodes_to_find};
use skiff_scheduler::testing::{make_node, make_pod};

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

struct Harness {
    sched: Scheduler,
    api: Arc<RecordingApi>,
    cache: Arc<Cache>,
    queue: Arc<SchedulingQueue>,
    clock: Arc<FakeClock>,
}

fn harness_with(cfg: SchedulerConfig, nodes: Vec<Node>, existing: Vec<Pod>) -> Harness {
    harness_full(cfg, nodes, existing, None)
}

fn harness_full(
    cfg: SchedulerConfig,
    nodes: Vec<Node>,
    existing: Vec<Pod>,
    listers: Option<Arc<dyn skiff_scheduler::framework::ClusterListers>>,
) -> Harness {
    let api = Arc::new(RecordingApi::default());
    let mut handle = Handle::new(api.clone());
    if let Some(l) = listers {
        handle.listers = l;
    }
    handle.parallelizer = Parallelizer::new(2);
    let fws = build_frameworks(&cfg, &handle).expect("frameworks");
    let clock = Arc::new(FakeClock::default());
    let queue =
        Arc::new(SchedulingQueue::new(fws.clone(), handle.nominator.clone(), clock.clone(), QueueConfig::default()));
    let cache = Arc::new(Cache::new());
    for n in nodes {
        cache.add_node(n);
    }
    for p in existing {
        cache.add_pod(Arc::new(PodInfo::new(p)));
    }
    let shared = Shared { cache: cache.clone(), queue: queue.clone(), handle };
    let sched =
        Scheduler::new(shared, fws, cfg.percentage_of_nodes_to_score(), Some(7), tokio::runtime::Handle::current());
    Harness { sched, api, cache, queue, clock }
}

fn harness(nodes: Vec<Node>, existing: Vec<Pod>) -> Harness {
    harness_with(SchedulerConfig::default(), nodes, existing)
}

impl Harness {
    /// Queues `pod`, runs one scheduling cycle and waits for its binding cycle.
    async fn schedule(&mut self, pod: Pod) -> Outcome {
        self.queue.add(Arc::new(PodInfo::new(pod)));
        self.next().await
    }

    async fn next(&mut self) -> Outcome {
        let q = self.queue.try_pop().expect("a pod in activeQ");
        match self.sched.schedule_one(q) {
            Outcome::Scheduled { node, evaluated_nodes, feasible_nodes, binding } => {
                let r = binding.await.expect("binding task");
                r.map_err(|e| format!("binding failed: {e}")).unwrap();
                Outcome::Scheduled { node, evaluated_nodes, feasible_nodes, binding: tokio::spawn(async { Ok(()) }) }
            }
            other => other,
        }
    }

    async fn node_of(&mut self, pod: Pod) -> String {
        match self.schedule(pod).await {
            Outcome::Scheduled { node, .. } => node,
            other => panic!("not scheduled: {other:?}"),
        }
    }

    async fn unschedulable(&mut self, pod: Pod) -> (String, Option<String>) {
        match self.schedule(pod).await {
            Outcome::Unschedulable { message, nominated_node } => (message, nominated_node),
            other => panic!("expected unschedulable, got {other:?}"),
        }
    }

    async fn eventually(&self, what: &str, f: impl Fn(&[ApiCall]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !f(&self.api.calls()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}; calls: {:#?}",
                self.api.calls()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn node(name: &str, cpu: &str) -> skiff_scheduler::testing::NodeBuilder {
    make_node(name).capacity(&[("cpu", cpu), ("memory", "8Gi"), ("pods", "110")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_with_node_selector_lands_on_the_labelled_node_and_gets_a_scheduled_event() {
    let mut h =
        harness(vec![node("n1", "4").obj(), node("n2", "4").label("disk", "ssd").obj(), node("n3", "4").obj()], vec![]);
    assert_eq!(h.node_of(make_pod("nginx").node_selector(&[("disk", "ssd")]).obj()).await, "n2");
    assert_eq!(h.api.binds(), vec![("default/nginx".to_string(), "n2".to_string())]);
    h.eventually("Scheduled event", |_| {
        h.api
            .events()
            .iter()
            .any(|e| e.reason == "Scheduled" && e.message == "Successfully assigned default/nginx to n2")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_pod_gets_the_kubernetes_aggregated_message_and_condition() {
    let mut h = harness(
        vec![
            node("node1", "4").taint("dedicated", "x", "NoSchedule").obj(),
            node("node2", "1").obj(),
            node("node3", "1").obj(),
        ],
        vec![],
    );
    let (msg, nominated) = h.unschedulable(make_pod("nginx").req(&[("cpu", "2")]).obj()).await;
    let want = "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: x}, 2 Insufficient cpu. \
                preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";
    assert_eq!(msg, want);
    assert_eq!(nominated, None);
    h.eventually("FailedScheduling event and condition", |calls| {
        let event = calls.iter().any(|c| matches!(c, ApiCall::Event(e) if e.reason == "FailedScheduling" && e.event_type == "Warning" && e.message == want));
        let cond = calls.iter().any(|c| matches!(c, ApiCall::UpdateStatus(_, u) if u.condition.as_ref().is_some_and(|c|
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable") && c.message.as_deref() == Some(want))));
        event && cond
    })
    .await;
    assert_eq!(h.queue.locate("default/nginx"), Some("unschedulable"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_that_finds_no_victims_says_so_per_node() {
    let mut h =
        harness(vec![node("node1", "4").taint("dedicated", "x", "NoSchedule").obj(), node("node2", "2").obj()], vec![]);
    let busy = make_pod("busy").req(&[("cpu", "2")]).priority(10).node("node2").obj();
    h.cache.add_pod(Arc::new(PodInfo::new(busy)));
    let (msg, _) = h.unschedulable(make_pod("p").req(&[("cpu", "1")]).priority(10).obj()).await;
    assert_eq!(
        msg,
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: x}. \
         preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_waiting_for_a_label_is_scheduled_once_a_node_is_labelled() {
    let mut h = harness(vec![node("n1", "4").obj(), node("n2", "4").obj()], vec![]);
    let (msg, _) = h.unschedulable(make_pod("p").node_selector(&[("disk", "ssd")]).obj()).await;
    assert_eq!(
        msg,
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    // An unrelated event does not move it.
    h.queue.move_all_to_active_or_backoff(ClusterEvent::ASSIGNED_POD_DELETE);
    assert_eq!(h.queue.locate("default/p"), Some("unschedulable"));
    h.cache.add_node(node("n2", "4").label("disk", "ssd").obj());
    h.queue.move_all_to_active_or_backoff(ClusterEvent {
        resource: EventResource::Node,
        action: ActionType::UPDATE_NODE_LABEL,
        label: "NodeLabelChange",
    });
    assert_eq!(h.queue.locate("default/p"), Some("backoff"));
    h.clock.advance(Duration::from_secs(1));
    h.queue.flush_backoff_completed();
    match h.next().await {
        Outcome::Scheduled { node, .. } => assert_eq!(node, "n2"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tolerations_admit_tainted_nodes_and_least_allocated_spreads_requests() {
    let busy = make_pod("busy").req(&[("cpu", "3")]).node("n1").obj();
    let mut h = harness(
        vec![node("n1", "4").obj(), node("n2", "4").obj(), node("n3", "4").taint("gpu", "", "NoSchedule").obj()],
        vec![busy],
    );
    assert_eq!(h.node_of(make_pod("a").req(&[("cpu", "1")]).obj()).await, "n2");
    // n3 is tainted; the pod tolerating it picks it as the least allocated node.
    assert_eq!(
        h.node_of(make_pod("b").req(&[("cpu", "1")]).toleration("gpu", "Exists", "", "NoSchedule").obj()).await,
        "n3"
    );
    // n1 has 1 cpu left: a 2-cpu pod goes to n2 (2 left) or n3 (3 left) — n3 is tainted, so n2.
    assert_eq!(h.node_of(make_pod("c").req(&[("cpu", "2")]).obj()).await, "n2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_ports_in_use_push_pods_elsewhere() {
    let mut h = harness(vec![node("n1", "4").obj(), node("n2", "4").obj()], vec![]);
    let first = h.node_of(make_pod("a").host_port("", "", 80).obj()).await;
    let second = h.node_of(make_pod("b").host_port("", "", 80).obj()).await;
    assert_ne!(first, second);
    let (msg, _) = h.unschedulable(make_pod("c").host_port("", "", 80).obj()).await;
    assert!(
        msg.starts_with("0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_affinity_follows_and_anti_affinity_avoids_matching_pods() {
    let nodes = vec![
        node("a1", "4").zone("a").obj(),
        node("a2", "4").zone("a").obj(),
        node("b1", "4").zone("b").obj(),
        node("b2", "4").zone("b").obj(),
    ];
    let db = make_pod("db").label("app", "db").node("b2").obj();
    let mut h = harness(nodes, vec![db]);
    let web = h.node_of(make_pod("web").pod_affinity(ZONE, &[("app", "db")]).obj()).await;
    assert!(web == "b1" || web == "b2", "{web}");
    let mut placed = Vec::new();
    for i in 0..4 {
        let p = make_pod(&format!("r{i}")).label("app", "r").pod_anti_affinity(HOST, &[("app", "r")]).obj();
        placed.push(h.node_of(p).await);
    }
    placed.sort();
    assert_eq!(placed, vec!["a1", "a2", "b1", "b2"]);
    let (msg, _) =
        h.unschedulable(make_pod("r4").label("app", "r").pod_anti_affinity(HOST, &[("app", "r")]).obj()).await;
    // Existing pods' anti-affinity is checked first, as in Kubernetes.
    assert!(
        msg.starts_with("0/4 nodes are available: 4 node(s) didn't satisfy existing pods anti-affinity rules."),
        "{msg}"
    );
    // A pod with anti-affinity to them but not matched by theirs gets the incoming-pod reason.
    let (msg, _) = h.unschedulable(make_pod("x").pod_anti_affinity(HOST, &[("app", "r")]).obj()).await;
    assert!(msg.starts_with("0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules."), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_spread_alternates_between_zones() {
    let nodes = vec![
        node("a1", "8").zone("a").obj(),
        node("a2", "8").zone("a").obj(),
        node("a3", "8").zone("a").obj(),
        node("b1", "8").zone("b").obj(),
    ];
    let mut h = harness(nodes, vec![]);
    let mut zones = Vec::new();
    for i in 0..6 {
        let p = make_pod(&format!("s{i}"))
            .label("app", "s")
            .spread_constraint(1, ZONE, "DoNotSchedule", &[("app", "s")])
            .obj();
        let n = h.node_of(p).await;
        zones.push(if n.starts_with('a') { 'a' } else { 'b' });
    }
    let a = zones.iter().filter(|z| **z == 'a').count();
    assert_eq!(a, 3, "zones {zones:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_priority_pod_preempts_the_lowest_priority_victim_and_then_lands_there() {
    let mut h = harness(vec![node("n1", "2").obj(), node("n2", "2").obj()], vec![]);
    h.cache.add_pod(Arc::new(PodInfo::new(make_pod("mid").req(&[("cpu", "2")]).priority(5).node("n1").obj())));
    h.cache.add_pod(Arc::new(PodInfo::new(make_pod("low").req(&[("cpu", "2")]).priority(1).node("n2").obj())));
    let (msg, nominated) = h.unschedulable(make_pod("vip").req(&[("cpu", "1")]).priority(100).obj()).await;
    assert_eq!(msg, "0/2 nodes are available: 2 Insufficient cpu.");
    assert_eq!(nominated.as_deref(), Some("n2"));
    h.eventually("victim deleted and preemptor nominated", |calls| {
        calls.contains(&ApiCall::Delete("default/low".into()))
            && calls.iter().any(|c| matches!(c, ApiCall::UpdateStatus(k, u) if k == "default/vip" && u.nominated_node_name == Some(Some("n2".into()))))
    })
    .await;
    assert!(!h.api.deletes().contains(&"default/mid".to_string()));
    // A lower-priority pod must not take the room promised to the nominated pod.
    h.cache.remove_pod("uid-low");
    let (msg, _) = h.unschedulable(make_pod("sneaky").req(&[("cpu", "2")]).priority(0).obj()).await;
    assert!(msg.starts_with("0/2 nodes are available: 2 Insufficient cpu."), "{msg}");
    // The victim is gone: the preemptor comes back and lands on its nominated node.
    h.queue.move_all_to_active_or_backoff(ClusterEvent::ASSIGNED_POD_DELETE);
    h.clock.advance(Duration::from_secs(2));
    h.queue.flush_backoff_completed();
    match h.next().await {
        Outcome::Scheduled { node, .. } => assert_eq!(node, "n2"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_never_preempt_say_so() {
    let mut h = harness(vec![node("n1", "1").obj()], vec![make_pod("low").req(&[("cpu", "1")]).node("n1").obj()]);
    let (msg, _) = h.unschedulable(make_pod("p").req(&[("cpu", "1")]).priority(100).preemption_never().obj()).await;
    assert_eq!(
        msg,
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    );
    assert!(h.api.deletes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_binding_forgets_the_assumed_pod_and_requeues_it_with_backoff() {
    let mut h = harness(vec![node("n1", "1").obj()], vec![]);
    h.api.fail_binds.store(true, std::sync::atomic::Ordering::SeqCst);
    h.queue.add(make_pod("p").req(&[("cpu", "1")]).info());
    let q = h.queue.try_pop().unwrap();
    let Outcome::Scheduled { node, binding, .. } = h.sched.schedule_one(q) else { panic!("not scheduled") };
    assert_eq!(node, "n1");
    let err = binding.await.unwrap().unwrap_err();
    assert!(err.contains("injected failure"), "{err}");
    assert!(!h.cache.is_assumed("uid-p"));
    assert_eq!(h.queue.locate("default/p"), Some("backoff"));
    h.api.fail_binds.store(false, std::sync::atomic::Ordering::SeqCst);
    h.clock.advance(Duration::from_secs(2));
    h.queue.flush_backoff_completed();
    match h.next().await {
        Outcome::Scheduled { node, .. } => assert_eq!(node, "n1"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assumed_pods_count_before_binding_is_confirmed() {
    let mut h = harness(vec![node("n1", "1").obj()], vec![]);
    h.node_of(make_pod("a").req(&[("cpu", "600m")]).obj()).await;
    let (msg, _) = h.unschedulable(make_pod("b").req(&[("cpu", "600m")]).obj()).await;
    assert!(msg.starts_with("0/1 nodes are available: 1 Insufficient cpu."), "{msg}");
}

#[test]
fn percentage_of_nodes_to_score_is_adaptive_with_floors() {
    let cases = [
        (0, 50, 50),
        (0, 100, 100),
        (0, 1000, 420),
        (0, 5000, 500),
        (0, 6000, 300),
        (30, 1000, 300),
        (1, 1000, 100),
        (100, 300, 300),
    ];
    for (pct, nodes, want) in cases {
        assert_eq!(num_feasible_nodes_to_find(pct, nodes), want, "pct {pct} nodes {nodes}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_search_evaluates_a_window_that_rotates_across_nodes() {
    let nodes: Vec<Node> = (0..1000).map(|i| node(&format!("n{i:04}"), "64").obj()).collect();
    let mut h = harness(nodes, vec![]);
    let mut chosen = std::collections::HashSet::new();
    for i in 0..6 {
        match h.schedule(make_pod(&format!("p{i}")).obj()).await {
            Outcome::Scheduled { node, evaluated_nodes, feasible_nodes, .. } => {
                assert_eq!((evaluated_nodes, feasible_nodes), (420, 420));
                chosen.insert(node);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(chosen.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_profile_schedules_pods_that_name_it() {
    let yaml = "profiles:\n- schedulerName: default-scheduler\n- schedulerName: packer\n  pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: MostAllocated}}\n  plugins:\n    score:\n      disabled: [{name: NodeResourcesBalancedAllocation}]\n";
    let cfg = SchedulerConfig::from_yaml(yaml).unwrap();
    let busy = make_pod("busy").req(&[("cpu", "2")]).node("n1").obj();
    let mut h = harness_with(cfg, vec![node("n1", "4").obj(), node("n2", "4").obj()], vec![busy]);
    assert_eq!(h.node_of(make_pod("spread").req(&[("cpu", "1")]).obj()).await, "n2");
    assert_eq!(h.node_of(make_pod("packed").req(&[("cpu", "1")]).scheduler_name("packer").obj()).await, "n1");
}

struct Pdbs(Vec<Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>>);
impl skiff_scheduler::framework::ClusterListers for Pdbs {
    fn pod_disruption_budgets(&self) -> Vec<Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>> {
        self.0.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_prefers_victims_not_protected_by_a_disruption_budget() {
    let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 1},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
    }))
    .unwrap();
    for _ in 0..4 {
        let mut h = harness_full(
            SchedulerConfig::default(),
            vec![node("n1", "1").obj(), node("n2", "1").obj()],
            vec![
                make_pod("guarded").label("app", "db").req(&[("cpu", "1")]).priority(1).node("n1").obj(),
                make_pod("free").label("app", "batch").req(&[("cpu", "1")]).priority(1).node("n2").obj(),
            ],
            Some(Arc::new(Pdbs(vec![Arc::new(pdb.clone())]))),
        );
        let (_, nominated) = h.unschedulable(make_pod("vip").req(&[("cpu", "1")]).priority(10).obj()).await;
        assert_eq!(nominated.as_deref(), Some("n2"));
        h.eventually("the unprotected victim is deleted", |calls| {
            calls.contains(&ApiCall::Delete("default/free".into()))
        })
        .await;
        assert!(!h.api.deletes().contains(&"default/guarded".to_string()));
    }
}
