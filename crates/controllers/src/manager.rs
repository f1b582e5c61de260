//! The controller manager (`kube-controller-manager`): one shared informer factory, one event
//! broadcaster, every controller with its workers, under leader election.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use prometheus_client::registry::Registry;
use tokio::task::JoinSet;

use crate::clusterroleaggregation::ClusterRoleAggregationController;
use crate::cronjob::CronJobController;
use crate::daemon::DaemonSetsController;
use crate::deployment::{DeploymentController, MAX_RETRIES};
use crate::disruption::DisruptionController;
use crate::endpoint::EndpointsController;
use crate::endpointslice::EndpointSliceController;
use crate::endpointslicemirroring::EndpointSliceMirroringController;
use crate::garbagecollector::GarbageCollector;
use crate::job::JobController;
use crate::namespace::NamespaceController;
use crate::podgc::PodGcController;
use crate::replicaset::ReplicaSetController;
use crate::replication::ReplicationManager;
use crate::resourcequota::ResourceQuotaController;
use crate::rootcacertpublisher::Publisher;
use crate::serviceaccount::ServiceAccountsController;
use crate::servicelb::ServiceLbController;
use crate::statefulset::StatefulSetController;
use crate::ttlafterfinished::TtlAfterFinishedController;
use crate::volume::persistentvolume::PersistentVolumeController;
use crate::volume::protection::{PvProtectionController, PvcProtectionController};
use skiff_runtime::api::{ApiClient, KubeApi};
use skiff_runtime::controller::{Reconciler, ShutDownOnDrop, WorkerConfig, run_workers};
use skiff_runtime::events::{EventBroadcaster, EventSource, run_event_ttl_cleaner};
use skiff_runtime::informer::SharedInformerFactory;
use skiff_runtime::leaderelection::{LeaderElectionConfig, LeaderElectionError, LeaderElector};
use skiff_runtime::metrics::ControllerMetrics;
use skiff_runtime::workqueue::WorkQueue;

/// Settings of the controller manager; defaults are kube-controller-manager's.
#[derive(Debug, Clone)]
pub struct ControllerManagerConfig {
    /// `--concurrent-deployment-syncs` (5).
    pub concurrent_deployment_syncs: usize,
    /// `--concurrent-replicaset-syncs` (5).
    pub concurrent_replicaset_syncs: usize,
    /// `--concurrent-daemonset-syncs` (2).
    pub concurrent_daemonset_syncs: usize,
    /// `--concurrent-job-syncs` (5).
    pub concurrent_job_syncs: usize,
    /// `--concurrent-statefulset-syncs` (5).
    pub concurrent_statefulset_syncs: usize,
    /// `--concurrent-cron-job-syncs` (5).
    pub concurrent_cron_job_syncs: usize,
    /// `--concurrent-gc-syncs` (20).
    pub concurrent_gc_syncs: usize,
    /// `--concurrent-namespace-syncs` (10).
    pub concurrent_namespace_syncs: usize,
    /// `--concurrent-serviceaccount-syncs` (1).
    pub concurrent_serviceaccount_syncs: usize,
    /// `--concurrent-resource-quota-syncs` (5).
    pub concurrent_resource_quota_syncs: usize,
    /// `--resource-quota-sync-period` (5 min): how often every quota is recomputed.
    pub resource_quota_sync_period: Duration,
    /// The cluster CA bundle (PEM) the root CA certificate publisher writes into every
    /// namespace's `kube-root-ca.crt` (`--root-ca-file`'s content); `None`: the publisher does
    /// not run.
    pub root_ca_pem: Option<String>,
    /// `--concurrent-service-endpoint-syncs` (5): the EndpointSlice and Endpoints controllers'
    /// workers each.
    pub concurrent_service_endpoint_syncs: usize,
    /// `--mirroring-concurrent-service-endpoint-syncs` (5).
    pub mirroring_concurrent_service_endpoint_syncs: usize,
    /// The horizontal pod autoscaler's `--horizontal-pod-autoscaler-*` settings (sync period
    /// 15 s, downscale stabilization 5 min, tolerance 0.1).
    pub hpa: crate::podautoscaler::HpaConfig,
    /// `--terminated-pod-gc-threshold` (12500): terminated pods kept before the oldest are
    /// deleted; 0 or less keeps them all.
    pub terminated_pod_gc_threshold: i32,
    /// Informer resync period (every cached object re-delivered as an update).
    pub resync_period: Duration,
    /// How often the garbage collector re-runs discovery to monitor new resources (30 s).
    pub gc_discovery_period: Duration,
    /// Delay before a deleted namespace is emptied (5 s).
    pub namespace_deletion_grace: Duration,
    /// Age after which events are deleted (`--event-ttl`, 1 h).
    pub event_ttl: Duration,
    /// How often expired events are looked for.
    pub event_ttl_cleanup_period: Duration,
    /// Leader election (`None`: run unconditionally, e.g. a single server).
    pub leader_election: Option<LeaderElectionConfig>,
    /// Controllers not to run, by name (kube-controller-manager's `--controllers` names):
    /// `deployment`, `replicaset`, `replicationcontroller`, `disruption`, `horizontalpodautoscaling`, `podgc`, `statefulset`, `daemonset`, `job`, `cronjob`, `ttl-after-finished`, `garbagecollector`, `namespace`, `serviceaccount`,
    /// `resourcequota`, `root-ca-cert-publisher`, `clusterrole-aggregation`, `endpointslice`,
    /// `endpoint`, `endpointslicemirroring`, `servicelb`, `persistentvolume-binder`, `pvc-protection`,
    /// `pv-protection`, `eventttl`.
    pub disabled: Vec<String>,
}

impl Default for ControllerManagerConfig {
    fn default() -> Self {
        Self {
            concurrent_deployment_syncs: 5,
            concurrent_replicaset_syncs: 5,
            concurrent_daemonset_syncs: 2,
            concurrent_job_syncs: 5,
            concurrent_statefulset_syncs: 5,
            concurrent_cron_job_syncs: 5,
            concurrent_gc_syncs: 20,
            concurrent_namespace_syncs: 10,
            concurrent_serviceaccount_syncs: 1,
            concurrent_resource_quota_syncs: crate::resourcequota::DEFAULT_WORKERS,
            resource_quota_sync_period: crate::resourcequota::DEFAULT_SYNC_PERIOD,
            root_ca_pem: None,
            concurrent_service_endpoint_syncs: 5,
            mirroring_concurrent_service_endpoint_syncs: 5,
            hpa: crate::podautoscaler::HpaConfig::default(),
            terminated_pod_gc_threshold: crate::podgc::DEFAULT_TERMINATED_POD_GC_THRESHOLD,
            resync_period: Duration::from_secs(5 * 60),
            gc_discovery_period: Duration::from_secs(30),
            namespace_deletion_grace: Duration::from_secs(5),
            event_ttl: Duration::from_secs(3600),
            event_ttl_cleanup_period: Duration::from_secs(60),
            leader_election: Some(LeaderElectionConfig::new("kube-system", "kube-controller-manager")),
            disabled: Vec::new(),
        }
    }
}

impl ControllerManagerConfig {
    fn enabled(&self, name: &str) -> bool {
        !self.disabled.iter().any(|d| d == name)
    }
}

/// Registers the controller metrics in `registry` and returns the future that runs the
/// controller manager; spawn it. The future runs until an unrecoverable error: with leader
/// election it campaigns for the Lease (`kube-system/kube-controller-manager`), runs every
/// controller while leading, stops them all when the lease is lost, and campaigns again.
///
/// ```no_run
/// # async fn example(client: kube::Client) {
/// let mut registry = prometheus_client::registry::Registry::default();
/// let manager = skiff_controllers::run_controller_manager(client, Default::default(), &mut registry);
/// tokio::spawn(manager);
/// # }
/// ```
///
/// # Errors
/// The returned future fails on an invalid leader election config, or when a controller task
/// ends unexpectedly.
pub fn run_controller_manager(
    client: kube::Client,
    config: ControllerManagerConfig,
    registry: &mut Registry,
) -> impl Future<Output = anyhow::Result<()>> + Send + 'static {
    run_controller_manager_until(client, config, registry, std::future::pending())
}

/// Like [`run_controller_manager`], but returns `Ok(())` once `shutdown` completes: the
/// controllers stop and the leader lease is released, so another server takes over at once.
///
/// # Errors
/// As [`run_controller_manager`].
pub fn run_controller_manager_until(
    client: kube::Client,
    config: ControllerManagerConfig,
    registry: &mut Registry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = anyhow::Result<()>> + Send + 'static {
    let metrics = ControllerMetrics::default();
    metrics.register(registry);
    async move {
        let shutdown = shutdown.boxed().shared();
        let api: Arc<dyn ApiClient> = Arc::new(KubeApi::new(client.clone()));
        let Some(le) = config.leader_election.clone() else {
            return tokio::select! {
                r = run_controllers(client, api, config, metrics) => r,
                _ = shutdown => Ok(()),
            };
        };
        let elector = LeaderElector::new(api.clone(), le)?;
        loop {
            let work = {
                let (client, api, config, metrics, shutdown) =
                    (client.clone(), api.clone(), config.clone(), metrics.clone(), shutdown.clone());
                async move {
                    tokio::select! {
                        r = run_controllers(client, api, config, metrics) => r,
                        _ = shutdown => Ok(()),
                    }
                }
            };
            let campaign = elector.run(work);
            let outcome = tokio::select! {
                r = campaign => r,
                // Shut down while still campaigning.
                _ = shutdown.clone() => return Ok(()),
            };
            match outcome {
                Ok(result) => return result,
                Err(LeaderElectionError::LeadershipLost) => {
                    tracing::error!("leader election lost: controllers stopped, campaigning again");
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Builds and runs every enabled controller until one of them stops.
async fn run_controllers(
    client: kube::Client,
    api: Arc<dyn ApiClient>,
    config: ControllerManagerConfig,
    metrics: ControllerMetrics,
) -> anyhow::Result<()> {
    let factory = Arc::new(SharedInformerFactory::new(client, Some(config.resync_period)));
    let broadcaster = EventBroadcaster::new(api.clone());
    let queue = |name: &str| Arc::new(WorkQueue::new().with_metrics(metrics.for_controller(name).queue));
    let mut tasks = JoinSet::new();
    let mut guards = Vec::new();
    // (name, queue, reconciler, workers, max retries), started once the caches have synced.
    type Pending<'a> = (&'a str, Arc<WorkQueue<String>>, Arc<dyn Reconciler>, usize, Option<u32>);
    let mut pending: Vec<Pending> = Vec::new();

    if config.enabled("deployment") {
        let q = queue("deployment");
        let c = DeploymentController::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("deployment-controller")),
        );
        pending.push(("deployment", q, c, config.concurrent_deployment_syncs, Some(MAX_RETRIES)));
    }
    if config.enabled("replicaset") {
        let q = queue("replicaset");
        let c = ReplicaSetController::<k8s_openapi::api::apps::v1::ReplicaSet>::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("replicaset-controller")),
        );
        pending.push(("replicaset", q, c, config.concurrent_replicaset_syncs, None));
    }
    if config.enabled("statefulset") {
        let q = queue("statefulset");
        let c = StatefulSetController::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("statefulset-controller")),
        );
        pending.push(("statefulset", q, c, config.concurrent_statefulset_syncs, None));
    }
    if config.enabled("replicationcontroller") {
        let q = queue("replicationcontroller");
        let c = ReplicationManager::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("replication-controller")),
        );
        // `--concurrent-rc-syncs` (5).
        pending.push(("replicationcontroller", q, c, 5, None));
    }
    if config.enabled("disruption") {
        let q = queue("disruption");
        let c = DisruptionController::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("controllermanager")),
        );
        // kube-controller-manager runs it with one worker.
        pending.push(("disruption", q, c, 1, None));
        let q = queue("stale-pod-disruption");
        let c = crate::disruption::stale::StalePodDisruptionCleaner::new(api.clone(), &factory, q.clone());
        pending.push(("stale-pod-disruption", q, c, 1, None));
    }
    if config.enabled("horizontalpodautoscaling") {
        let q = queue("horizontalpodautoscaling");
        let c = crate::podautoscaler::HorizontalController::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("horizontal-pod-autoscaler")),
            Arc::new(crate::podautoscaler::scale::ApiScaleClient::new(api.clone())),
            Arc::new(crate::podautoscaler::metrics::RestMetricsClient::new(api.clone())),
            config.hpa,
        );
        // `--concurrent-horizontal-pod-autoscaler-syncs` (5).
        pending.push(("horizontalpodautoscaling", q, c, 5, None));
    }
    let mut podgc = None;
    if config.enabled("podgc") {
        podgc = Some(PodGcController::new(api.clone(), &factory, config.terminated_pod_gc_threshold));
    }
    if config.enabled("daemonset") {
        let q = queue("daemonset");
        let c = DaemonSetsController::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("daemonset-controller")),
        );
        pending.push(("daemonset", q, c, config.concurrent_daemonset_syncs, None));
    }
    if config.enabled("job") {
        let q = queue("job");
        let c = JobController::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("job-controller")),
        );
        // `syncOrphanPod` runs on its own queue, one worker, as in kube-controller-manager.
        let orphans = c.orphan_pods().clone();
        pending.push(("job", q, c, config.concurrent_job_syncs, None));
        pending.push(("job-orphan-pods", orphans.queue().clone(), orphans, 1, None));
    }
    if config.enabled("cronjob") {
        let q = queue("cronjob");
        let c = CronJobController::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("cronjob-controller")),
        );
        pending.push(("cronjob", q, c, config.concurrent_cron_job_syncs, None));
    }
    if config.enabled("ttl-after-finished") {
        let q = queue("ttl-after-finished");
        let c = TtlAfterFinishedController::new(api.clone(), &factory, q.clone());
        // `--concurrent-ttl-after-finished-syncs` (5).
        pending.push(("ttl-after-finished", q, c, 5, None));
    }
    if config.enabled("persistentvolume-binder") {
        let q = queue("persistentvolume-binder");
        let c = PersistentVolumeController::new(
            api.clone(),
            &factory,
            q.clone(),
            broadcaster.new_recorder(EventSource::component("persistentvolume-controller")),
        );
        // kube-controller-manager's binder runs one worker per queue.
        pending.push(("persistentvolume-binder", q, c, 1, None));
    }
    if config.enabled("pvc-protection") {
        let q = queue("pvc-protection");
        let c = PvcProtectionController::new(api.clone(), &factory, q.clone());
        pending.push(("pvc-protection", q, c, 1, None));
    }
    if config.enabled("pv-protection") {
        let q = queue("pv-protection");
        let c = PvProtectionController::new(api.clone(), &factory, q.clone());
        pending.push(("pv-protection", q, c, 1, None));
    }
    if config.enabled("namespace") {
        let q = queue("namespace");
        let c = NamespaceController::new(api.clone(), &factory, q.clone(), config.namespace_deletion_grace);
        pending.push(("namespace", q, c, config.concurrent_namespace_syncs, None));
    }
    if config.enabled("serviceaccount") {
        let q = queue("serviceaccount");
        let c = ServiceAccountsController::new(api.clone(), &factory, q.clone());
        pending.push(("serviceaccount", q, c, config.concurrent_serviceaccount_syncs, None));
    }
    let mut quota_resync = None;
    if config.enabled("resourcequota") {
        let q = queue("resourcequota");
        let c = ResourceQuotaController::new(api.clone(), factory.clone(), q.clone());
        quota_resync = Some(c.clone());
        pending.push(("resourcequota", q, c, config.concurrent_resource_quota_syncs, None));
    }
    if let Some(ca) = config.root_ca_pem.clone().filter(|_| config.enabled("root-ca-cert-publisher")) {
        let q = queue("root-ca-cert-publisher");
        let c = Publisher::new(api.clone(), &factory, q.clone(), ca);
        // kube-controller-manager runs it with one worker.
        pending.push(("root-ca-cert-publisher", q, c, 1, None));
    }
    if config.enabled("clusterrole-aggregation") {
        let q = queue("clusterrole-aggregation");
        let c = ClusterRoleAggregationController::new(api.clone(), &factory, q.clone());
        // kube-controller-manager runs it with five workers.
        pending.push(("clusterrole-aggregation", q, c, 5, None));
    }

    if config.enabled("endpointslice") {
        let q = queue("endpointslice");
        let c = EndpointSliceController::new(api.clone(), &factory, q.clone());
        pending.push(("endpointslice", q, c, config.concurrent_service_endpoint_syncs, None));
    }
    if config.enabled("endpoint") {
        let q = queue("endpoint");
        let c = EndpointsController::new(api.clone(), &factory, q.clone());
        pending.push(("endpoint", q, c, config.concurrent_service_endpoint_syncs, None));
    }
    if config.enabled("endpointslicemirroring") {
        let q = queue("endpointslicemirroring");
        let c = EndpointSliceMirroringController::new(api.clone(), &factory, q.clone());
        pending.push(("endpointslicemirroring", q, c, config.mirroring_concurrent_service_endpoint_syncs, None));
    }
    if config.enabled("servicelb") {
        let q = queue("servicelb");
        let c = ServiceLbController::new(api.clone(), &factory, q.clone());
        pending.push(("servicelb", q, c, 1, None));
    }

    factory.start();
    tracing::info!("waiting for informer caches to sync");
    factory.wait_for_cache_sync().await;
    tracing::info!("caches synced, starting controllers");
    for (name, q, c, workers, max_retries) in pending {
        guards.push(ShutDownOnDrop(q.clone()));
        let worker_config = WorkerConfig { name: name.to_string(), workers, max_retries };
        tasks.spawn(run_workers(q, c, worker_config, metrics.for_controller(name)));
    }
    if let Some(gc) = podgc {
        tasks.spawn(gc.run(crate::podgc::GC_CHECK_PERIOD));
    }
    if let Some(c) = quota_resync {
        tasks.spawn(c.run_resync(config.resource_quota_sync_period));
    }
    if config.enabled("garbagecollector") {
        // Created after the other controllers so that it reuses their typed informers.
        let gc = GarbageCollector::new(
            api.clone(),
            factory.clone(),
            broadcaster.new_recorder(EventSource::component("garbage-collector-controller")),
        );
        tasks.spawn(gc.run(config.concurrent_gc_syncs, config.gc_discovery_period, metrics.clone()));
    }
    if config.enabled("eventttl") {
        tasks.spawn(run_event_ttl_cleaner(api.clone(), config.event_ttl, config.event_ttl_cleanup_period));
    }
    if tasks.is_empty() {
        // Every controller disabled: hold leadership (and the caches) until cancelled.
        std::future::pending::<()>().await;
    }
    let result = tasks.join_next().await;
    drop(guards);
    match result {
        Some(Err(e)) if e.is_panic() => anyhow::bail!("a controller panicked: {e}"),
        _ => anyhow::bail!("a controller stopped unexpectedly"),
    }
}
