//! The pod garbage collector (`pkg/controller/podgc/gc_controller.go`): every
//! [`GC_CHECK_PERIOD`] it force-deletes the pods nothing else will ever remove.
//!
//! One pass (`gc`), in Kubernetes' order:
//! 1. Terminated pods (phase neither Pending, Running nor Unknown) beyond
//!    `--terminated-pod-gc-threshold`: the surplus goes, evicted pods first, then oldest first
//!    (name breaks ties). A threshold of 0 or less turns this off.
//! 2. Terminating pods on a node that is not Ready and carries the
//!    `node.kubernetes.io/out-of-service` taint (their kubelet will not finish them).
//! 3. Orphaned pods: bound to a node absent from the cache. The node name is quarantined for
//!    [`QUARANTINE_TIME`] (a node just created may not be cached yet); after that a live GET
//!    decides, and only a 404 makes its pods orphans. Their `DisruptionTarget` condition says
//!    `DeletionByPodGC`.
//! 4. Unscheduled terminating pods: being deleted and bound to no node (no kubelet will finish
//!    them).
//!
//! Each deletion first marks a pod that is not Succeeded/Failed as `Failed` (a status patch, so
//! that its controller counts it as failed), then deletes it with grace period 0.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::util::{Clock, add_seconds, name_of, pod_node_name, pod_phase, system_clock, time};
use skiff_runtime::api::{ApiClient, ApiClientExt, ApiError, DeleteOptions, PatchType, is_not_found, resource_of};
use skiff_runtime::informer::{Informer, SharedInformerFactory};

/// How often a pass runs (`gcCheckPeriod`).
pub const GC_CHECK_PERIOD: Duration = Duration::from_secs(20);
/// How long a node missing from the cache is waited for before a live GET (`quarantineTime`).
pub const QUARANTINE_TIME: Duration = Duration::from_secs(40);
/// `--terminated-pod-gc-threshold`'s default.
pub const DEFAULT_TERMINATED_POD_GC_THRESHOLD: i32 = 12500;
/// The taint that lets pods of a down node be deleted (`v1.TaintNodeOutOfService`).
pub const TAINT_NODE_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// The pod garbage collector.
pub struct PodGcController {
    api: Arc<dyn ApiClient>,
    pods: Arc<Informer<Pod>>,
    nodes: Arc<Informer<Node>>,
    terminated_pod_threshold: i32,
    /// Node names missing from the cache, with when they were first seen missing.
    quarantine: Mutex<HashMap<String, Timestamp>>,
    clock: Clock,
}

/// `isPodTerminated`: the phase is neither Pending, Running nor Unknown.
pub fn is_pod_terminated(pod: &Pod) -> bool {
    !matches!(pod_phase(pod), "Pending" | "Running" | "Unknown")
}

/// `eviction.PodIsEvicted`: Failed with reason `Evicted`.
fn is_evicted(pod: &Pod) -> bool {
    pod_phase(pod) == "Failed" && pod.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted")
}

/// `byEvictionAndCreationTimestamp`: evicted pods first, then oldest first, then by name.
fn sort_by_eviction_and_creation(pods: &mut [Arc<Pod>]) {
    pods.sort_by(|a, b| {
        is_evicted(b)
            .cmp(&is_evicted(a))
            .then_with(|| {
                let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
                created(a).cmp(&created(b))
            })
            .then_with(|| name_of(&a.metadata).cmp(name_of(&b.metadata)))
    });
}

/// `IsNodeReady`: the `Ready` condition is `True`.
fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

impl PodGcController {
    /// Creates the collector on the factory's Pod and Node informers. `terminated_pod_threshold`
    /// is `--terminated-pod-gc-threshold` (0 or less: terminated pods are kept).
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, terminated_pod_threshold: i32) -> Arc<Self> {
        Arc::new(Self {
            api,
            pods: factory.informer::<Pod>(),
            nodes: factory.informer::<Node>(),
            terminated_pod_threshold,
            quarantine: Mutex::new(HashMap::new()),
            clock: system_clock(),
        })
    }

    /// Replaces the clock (tests).
    pub fn with_clock(mut self: Arc<Self>, clock: Clock) -> Arc<Self> {
        if let Some(me) = Arc::get_mut(&mut self) {
            me.clock = clock;
        }
        self
    }

    /// Runs a pass every `period`, forever (the caches have synced before this is called).
    pub async fn run(self: Arc<Self>, period: Duration) {
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.gc().await;
        }
    }

    /// One pass over the cached pods and nodes. Failures are logged and retried next pass.
    pub async fn gc(&self) {
        let mut pods = self.pods.store().list();
        pods.sort_by(|a, b| (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name)));
        if self.terminated_pod_threshold > 0 {
            self.gc_terminated(&pods).await;
        }
        self.gc_terminating_out_of_service(&pods).await;
        self.gc_orphaned(&pods).await;
        self.gc_unscheduled_terminating(&pods).await;
    }

    /// `gcTerminated`: deletes the terminated pods beyond the threshold.
    async fn gc_terminated(&self, pods: &[Arc<Pod>]) {
        let mut terminated: Vec<Arc<Pod>> = pods.iter().filter(|p| is_pod_terminated(p)).cloned().collect();
        let surplus = terminated.len() as i64 - i64::from(self.terminated_pod_threshold);
        if surplus <= 0 {
            return;
        }
        tracing::info!(pods = surplus, "garbage collecting terminated pods");
        sort_by_eviction_and_creation(&mut terminated);
        let doomed = &terminated[..surplus as usize];
        futures::future::join_all(doomed.iter().map(|p| self.mark_failed_and_delete(p, None))).await;
    }

    /// `gcTerminating`: terminating pods of out-of-service, not-Ready nodes.
    async fn gc_terminating_out_of_service(&self, pods: &[Arc<Pod>]) {
        let mut doomed: Vec<Arc<Pod>> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .filter(|p| {
                self.nodes.store().get_namespaced(None, pod_node_name(p)).is_some_and(|n| {
                    !is_node_ready(&n)
                        && n.spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .into_iter()
                            .flatten()
                            .any(|t| t.key == TAINT_NODE_OUT_OF_SERVICE)
                })
            })
            .cloned()
            .collect();
        if doomed.is_empty() {
            return;
        }
        sort_by_eviction_and_creation(&mut doomed);
        futures::future::join_all(doomed.iter().map(|p| self.mark_failed_and_delete(p, None))).await;
    }

    /// `gcOrphaned`: pods bound to nodes that are gone after the quarantine.
    async fn gc_orphaned(&self, pods: &[Arc<Pod>]) {
        let now = (self.clock)();
        let known = |node: &str| self.nodes.store().get_namespaced(None, node).is_some();
        let due: Vec<String> = {
            let mut quarantine = self.quarantine.lock();
            for pod in pods {
                let node = pod_node_name(pod);
                if !node.is_empty() && !known(node) {
                    quarantine.entry(node.to_string()).or_insert(now);
                }
            }
            let limit = add_seconds(now, -(QUARANTINE_TIME.as_secs() as i64));
            let due: Vec<String> =
                quarantine.iter().filter(|(_, since)| **since <= limit).map(|(n, _)| n.clone()).collect();
            for n in &due {
                quarantine.remove(n);
            }
            due
        };
        let mut deleted_nodes = Vec::new();
        for node in due {
            if known(&node) {
                continue;
            }
            match self.api.get_typed::<Node>(None, &node).await {
                Err(e) if is_not_found(&e) => deleted_nodes.push(node),
                // Still there (the cache lags), or unknown: the next pass quarantines it again.
                Ok(_) => {}
                Err(e) => tracing::warn!(node, error = %e.message, "cannot check whether a node exists"),
            }
        }
        let condition = json!({
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByPodGC",
            "message": "PodGC: node no longer exists",
            "lastTransitionTime": time(now),
        });
        for pod in pods.iter().filter(|p| deleted_nodes.iter().any(|n| n == pod_node_name(p))) {
            tracing::info!(pod = name_of(&pod.metadata), node = pod_node_name(pod), "deleting an orphaned pod");
            self.mark_failed_and_delete(pod, Some(condition.clone())).await;
        }
    }

    /// `gcUnscheduledTerminating`: pods being deleted that were never bound to a node.
    async fn gc_unscheduled_terminating(&self, pods: &[Arc<Pod>]) {
        for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_some() && pod_node_name(p).is_empty()) {
            tracing::info!(pod = name_of(&pod.metadata), "deleting an unscheduled terminating pod");
            self.mark_failed_and_delete(pod, None).await;
        }
    }

    /// `markFailedAndDeletePodWithCondition`: marks a pod not yet Succeeded/Failed as Failed
    /// (with `condition`, if any), then deletes it with grace period 0. Errors are logged; a pod
    /// already gone is not one.
    async fn mark_failed_and_delete(&self, pod: &Pod, condition: Option<Value>) {
        if let Err(e) = self.try_mark_failed_and_delete(pod, condition).await
            && !is_not_found(&e)
        {
            tracing::warn!(pod = name_of(&pod.metadata), error = %e.message, "pod GC failed to delete a pod");
        }
    }

    async fn try_mark_failed_and_delete(&self, pod: &Pod, condition: Option<Value>) -> Result<(), ApiError> {
        let ns = pod.metadata.namespace.as_deref();
        let name = name_of(&pod.metadata);
        let pods = resource_of::<Pod>();
        if !matches!(pod_phase(pod), "Succeeded" | "Failed") {
            let mut status = json!({"phase": "Failed"});
            if let Some(c) = condition {
                status["conditions"] = json!([c]);
            }
            let patch = json!({"status": status});
            self.api.patch(&pods, ns, name, PatchType::Strategic, &patch, Some("status")).await?;
        }
        let options = DeleteOptions { grace_period_seconds: Some(0), ..Default::default() };
        self.api.delete(&pods, ns, name, &options).await
    }
}

#[cfg(test)]
mod tests;
