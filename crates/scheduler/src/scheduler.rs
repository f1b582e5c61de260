//! The running scheduler (`scheduler.go` + `eventhandlers.go`): informers feed the cache and the
//! queue, a dedicated thread runs scheduling cycles, timers flush the queue.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ReplicationController, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;

use crate::api::KubeApi;
use crate::cache::Cache;
use crate::config::{SchedulerConfig, build_frameworks};
use crate::framework::metrics::SchedulerMetrics;
use crate::framework::{
    ActionType, ClusterEvent, ClusterListers, EventResource, Handle, Nominator, Parallelizer, PodInfo,
    PreemptionPolicy, WaitingPods, preemption_policy_of,
};
use crate::informer::{self, Change, Store};
use crate::queue::{RealClock, SchedulingQueue};
use crate::schedule_one::{Scheduler, Shared};

/// Informer-backed listers for the plugins.
#[derive(Default)]
pub struct InformerListers {
    namespaces: Store<Namespace>,
    services: Store<Service>,
    replication_controllers: Store<ReplicationController>,
    replica_sets: Store<ReplicaSet>,
    stateful_sets: Store<StatefulSet>,
    priority_classes: Store<PriorityClass>,
    pod_disruption_budgets: Store<PodDisruptionBudget>,
}

impl ClusterListers for InformerListers {
    fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        self.namespaces.get(namespace).and_then(|n| n.metadata.labels.clone()).unwrap_or_default()
    }
    fn namespaces(&self) -> Vec<(String, BTreeMap<String, String>)> {
        self.namespaces
            .list()
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n.metadata.labels.clone().unwrap_or_default()))
            .collect()
    }
    fn services(&self, namespace: &str) -> Vec<Arc<Service>> {
        self.services.list_namespace(namespace)
    }
    fn replication_controllers(&self, namespace: &str) -> Vec<Arc<ReplicationController>> {
        self.replication_controllers.list_namespace(namespace)
    }
    fn replica_sets(&self, namespace: &str) -> Vec<Arc<ReplicaSet>> {
        self.replica_sets.list_namespace(namespace)
    }
    fn stateful_sets(&self, namespace: &str) -> Vec<Arc<StatefulSet>> {
        self.stateful_sets.list_namespace(namespace)
    }
    fn pod_disruption_budgets(&self) -> Vec<Arc<PodDisruptionBudget>> {
        self.pod_disruption_budgets.list()
    }
}

impl InformerListers {
    /// Builds a [`PodInfo`], resolving priority and preemption policy from the pod's
    /// PriorityClass (or the global default class) when the API server did not fill them in.
    /// The pod is shared with the informer's cache, not copied.
    pub fn pod_info(&self, pod: Arc<Pod>) -> Arc<PodInfo> {
        let spec = pod.spec.as_ref();
        let class = || -> Option<Arc<PriorityClass>> {
            match spec.and_then(|s| s.priority_class_name.as_deref()).filter(|n| !n.is_empty()) {
                Some(name) => self.priority_classes.get(name),
                None => self.priority_classes.list().into_iter().find(|c| c.global_default == Some(true)),
            }
        };
        let priority = spec.and_then(|s| s.priority).or_else(|| class().map(|c| c.value)).unwrap_or(0);
        let policy = if spec.and_then(|s| s.preemption_policy.as_ref()).is_some() {
            preemption_policy_of(&pod)
        } else {
            match class().and_then(|c| c.preemption_policy.clone()).as_deref() {
                Some("Never") => PreemptionPolicy::Never,
                _ => PreemptionPolicy::PreemptLowerPriority,
            }
        };
        Arc::new(PodInfo::with_priority(pod, priority, policy))
    }
}

/// What changed on a node, as event actions (`nodeSchedulingPropertiesChange`).
pub fn node_update_actions(old: &Node, new: &Node) -> ActionType {
    let mut a = ActionType(0);
    let alloc = |n: &Node| n.status.as_ref().and_then(|s| s.allocatable.clone());
    if alloc(old) != alloc(new) {
        a = a.or(ActionType::UPDATE_NODE_ALLOCATABLE);
    }
    if old.metadata.labels != new.metadata.labels {
        a = a.or(ActionType::UPDATE_NODE_LABEL);
    }
    let taints = |n: &Node| n.spec.as_ref().map(|s| (s.taints.clone(), s.unschedulable));
    if taints(old) != taints(new) {
        a = a.or(ActionType::UPDATE_NODE_TAINT);
    }
    let conds = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|c| c.iter().map(|c| (c.type_.clone(), c.status.clone())).collect::<Vec<_>>())
    };
    if conds(old) != conds(new) {
        a = a.or(ActionType::UPDATE_NODE_CONDITION);
    }
    let images = |n: &Node| n.status.as_ref().and_then(|s| s.images.clone());
    if old.metadata.annotations != new.metadata.annotations || images(old) != images(new) {
        a = a.or(ActionType::UPDATE_NODE_ANNOTATION);
    }
    a
}

fn is_terminal(p: &Pod) -> bool {
    matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn is_assigned(p: &Pod) -> bool {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty())
}

/// Closes the queue when dropped, so the scheduling thread stops with `run_scheduler`.
struct CloseOnDrop(Arc<SchedulingQueue>);
impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Runs the scheduler against the API until an informer stops, leadership is lost, or the
/// future is dropped.
///
/// With leader election (the default, `leaderElection.leaderElect`), it first acquires the
/// `kube-system/kube-scheduler` Lease (skiff-runtime's [`LeaderElector`]), so of several
/// `skiff server`s only one schedules; the others wait as candidates.
///
/// # Errors
/// Invalid configuration (unknown plugins, bad args, bad leader election durations); a
/// scheduling thread that cannot start; leadership lost (the caller may restart it).
///
/// [`LeaderElector`]: skiff_runtime::leaderelection::LeaderElector
pub async fn run_scheduler(client: kube::Client, config: SchedulerConfig) -> anyhow::Result<()> {
    run_scheduler_with_metrics(client, config, SchedulerMetrics::default()).await
}

/// [`run_scheduler`] recording into `metrics` (register them in a registry first, e.g. the API
/// server's, to have them served on `/metrics`; see [`crate::framework::metrics`]).
///
/// # Errors
/// As [`run_scheduler`].
pub async fn run_scheduler_with_metrics(
    client: kube::Client,
    config: SchedulerConfig,
    metrics: SchedulerMetrics,
) -> anyhow::Result<()> {
    config.check().map_err(|e| anyhow::anyhow!("invalid KubeSchedulerConfiguration: {e}"))?;
    let Some(le) = config.leader_election() else {
        return run_unelected_with_metrics(client, config, metrics).await;
    };
    use skiff_runtime::leaderelection::{LeaderElectionConfig, LeaderElector};
    let mut lec = LeaderElectionConfig::new(&le.namespace, &le.name);
    lec.lease_duration = le.lease_duration;
    lec.renew_deadline = le.renew_deadline;
    lec.retry_period = le.retry_period;
    let elector = LeaderElector::from_client(client.clone(), lec)?;
    tracing::info!(identity = elector.identity(), lease = %format!("{}/{}", le.namespace, le.name), "scheduler waiting for leadership");
    elector.run(run_unelected_with_metrics(client, config, metrics)).await?
}

/// [`run_scheduler`] without leader election.
///
/// # Errors
/// As [`run_scheduler`].
pub async fn run_unelected(client: kube::Client, config: SchedulerConfig) -> anyhow::Result<()> {
    run_unelected_with_metrics(client, config, SchedulerMetrics::default()).await
}

/// [`run_unelected`] recording into `metrics`.
///
/// # Errors
/// As [`run_scheduler`].
pub async fn run_unelected_with_metrics(
    client: kube::Client,
    config: SchedulerConfig,
    metrics: SchedulerMetrics,
) -> anyhow::Result<()> {
    config.validate()?;
    // Informers for the kinds plugins read.
    let mut tasks = tokio::task::JoinSet::new();
    macro_rules! side_informer {
        ($ty:ty) => {{
            let i = informer::informer::<$ty>(&client, |_| {});
            tasks.spawn(i.clone().run());
            i.store().clone()
        }};
    }
    let listers = Arc::new(InformerListers {
        namespaces: side_informer!(Namespace),
        services: side_informer!(Service),
        replication_controllers: side_informer!(ReplicationController),
        replica_sets: side_informer!(ReplicaSet),
        stateful_sets: side_informer!(StatefulSet),
        priority_classes: side_informer!(PriorityClass),
        pod_disruption_budgets: side_informer!(PodDisruptionBudget),
    });
    let handle = Handle {
        api: Arc::new(KubeApi::new(client.clone())),
        listers: listers.clone(),
        nominator: Arc::new(Nominator::default()),
        waiting_pods: Arc::new(WaitingPods::default()),
        parallelizer: Parallelizer::new(config.parallelism()),
        runtime: Some(tokio::runtime::Handle::current()),
        metrics,
        extenders: Arc::new(crate::extender::build_extenders(&config.component.extenders).map_err(anyhow::Error::msg)?),
    };
    for e in handle.extenders.iter() {
        tracing::info!(extender = e.name(), "scheduler extender");
    }
    let profiles = build_frameworks(&config, &handle).map_err(|e| anyhow::anyhow!("{e}"))?;
    for fw in &profiles {
        tracing::info!(profile = fw.profile_name(), plugins = ?fw.list_plugins(), "scheduler profile");
    }
    let profile_names: HashSet<String> = profiles.iter().map(|f| f.profile_name().to_string()).collect();
    let cache = Arc::new(Cache::new());
    let queue = Arc::new(SchedulingQueue::new(
        profiles.clone(),
        handle.nominator.clone(),
        Arc::new(RealClock),
        config.queue_config(),
    ));
    let _close = CloseOnDrop(queue.clone());
    let pending_source: Arc<dyn crate::framework::metrics::PendingPodsSource> = queue.clone();
    handle.metrics.set_pending_pods_source(Arc::downgrade(&pending_source));

    let nodes = {
        let (cache, queue) = (cache.clone(), queue.clone());
        informer::informer::<Node>(&client, move |c| match c {
            Change::Add(n) => {
                cache.add_node((*n).clone());
                queue.move_all_to_active_or_backoff(ClusterEvent::NODE_ADD);
            }
            Change::Update(old, new) => {
                cache.add_node((*new).clone());
                let action = node_update_actions(&old, &new);
                if action.0 != 0 {
                    queue.move_all_to_active_or_backoff(ClusterEvent {
                        resource: EventResource::Node,
                        action,
                        label: "NodeUpdate",
                    });
                }
            }
            Change::Delete(n) => cache.remove_node(n.metadata.name.as_deref().unwrap_or("")),
        })
    };
    tasks.spawn(nodes.clone().run());
    let pods = {
        let (cache, queue, listers, waiting) =
            (cache.clone(), queue.clone(), listers.clone(), handle.waiting_pods.clone());
        let responsible = move |p: &Pod| {
            let name = p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler");
            profile_names.contains(name)
        };
        let handler = move |c: Change<Pod>| match c {
            Change::Add(p) => {
                if is_terminal(&p) {
                    return;
                }
                if is_assigned(&p) {
                    cache.add_pod(listers.pod_info(p.clone()));
                    queue.move_all_to_active_or_backoff(ClusterEvent::ASSIGNED_POD_ADD);
                } else if responsible(&p) {
                    queue.add(listers.pod_info(p.clone()));
                }
            }
            Change::Update(old, new) => {
                let info = listers.pod_info(new.clone());
                if is_assigned(&new) {
                    if !is_assigned(&old) {
                        queue.delete(&info.key, &info.uid);
                    }
                    if is_terminal(&new) {
                        cache.remove_pod(&info.uid);
                        queue.move_all_to_active_or_backoff(ClusterEvent::ASSIGNED_POD_DELETE);
                        return;
                    }
                    cache.update_pod(info.clone());
                    let old_info = listers.pod_info(old.clone());
                    let mut action = crate::queue::pod_update_actions(&old_info, &info);
                    if !is_assigned(&old) {
                        action = ActionType::ADD;
                    }
                    if action.0 != 0 {
                        queue.move_all_to_active_or_backoff(ClusterEvent {
                            resource: EventResource::Pod,
                            action,
                            label: "AssignedPodUpdate",
                        });
                    }
                } else if responsible(&new) {
                    if is_terminal(&new) {
                        queue.delete(&info.key, &info.uid);
                    } else {
                        let old_info = listers.pod_info(old.clone());
                        queue.update(Some(&old_info), info);
                    }
                }
            }
            Change::Delete(p) => {
                let info = listers.pod_info(p.clone());
                if is_assigned(&p) {
                    cache.remove_pod(&info.uid);
                    queue.move_all_to_active_or_backoff(ClusterEvent::ASSIGNED_POD_DELETE);
                } else {
                    queue.delete(&info.key, &info.uid);
                    if let Some(wp) = waiting.get(&info.uid) {
                        wp.reject("", "pod deleted");
                    }
                }
            }
        };
        informer::informer::<Pod>(&client, handler)
    };
    tasks.spawn(pods.clone().run());

    // Queue timers: backoff every second, the unschedulable pool every 30 seconds.
    {
        let queue = queue.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut n = 0u64;
            loop {
                tick.tick().await;
                queue.flush_backoff_completed();
                n += 1;
                if n.is_multiple_of(30) {
                    queue.flush_unschedulable_left_over();
                }
            }
        });
    }

    nodes.wait_for_sync().await;
    pods.wait_for_sync().await;
    tracing::info!(nodes = cache.counts().0, "scheduler caches synced; scheduling");

    let shared = Shared { cache, queue: queue.clone(), handle };
    let mut sched = Scheduler::new(
        shared,
        profiles,
        config.percentage_of_nodes_to_score(),
        config.seed,
        tokio::runtime::Handle::current(),
    );
    let thread = std::thread::Builder::new().name("scheduler".into()).spawn(move || sched.run())?;

    let result = match tasks.join_next().await {
        Some(Ok(())) => Err(anyhow::anyhow!("a scheduler informer stopped")),
        Some(Err(e)) => Err(anyhow::anyhow!("a scheduler task failed: {e}")),
        None => Ok(()),
    };
    queue.close();
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    result
}
