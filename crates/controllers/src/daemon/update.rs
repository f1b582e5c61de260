//! Rolling updates and history of a DaemonSet (`pkg/controller/daemon/update.go`).
//!
//! History: every template the DaemonSet has had is a ControllerRevision named
//! `<ds>-<hash>` whose `data` is the strategic merge patch that restores it
//! (`{"spec":{"template":{…,"$patch":"replace"}}}`, what `kubectl rollout undo` applies), labelled
//! `controller-revision-hash: <hash>` like the pods made from it, with increasing `revision`
//! numbers; the current one is the revision whose data matches the DaemonSet's template.
//!
//! Rolling update without surge (`maxSurge` 0): old pods are deleted while fewer than
//! `maxUnavailable` daemon pods are unavailable, and the manage loop creates their
//! replacements. With surge: a new pod is created next to an available old one on at most
//! `maxSurge` nodes at a time, and the old pod is deleted once the new one is available. Worked
//! numbers: 5,000 nodes, maxUnavailable 10 % → ⌈500⌉ = 500 old pods replaced at a time.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{Value, json};
use skiff_runtime::api::{ApiClientExt, ApiError, DeleteOptions, PatchType, is_already_exists, resource_of};
use skiff_runtime::informer::key_of;

use super::util::{
    CONTROLLER_REVISION_HASH_LABEL, is_pod_updated, node_should_run_daemon_pod, surge_count, template_generation,
    template_of, unavailable_count,
};
use super::{DaemonSetsController, conflict};
use crate::controller_ref_manager::{Claimant, claim};
use crate::deployment::util::compute_hash;
use crate::util::{is_pod_available, labels_of, name_of, new_controller_ref, selector_of, uid_of};

/// `getPatch`: the strategic merge patch that restores the DaemonSet's template.
pub fn get_patch(ds: &DaemonSet) -> Value {
    let mut template = serde_json::to_value(template_of(ds)).unwrap_or_else(|_| json!({}));
    if let Some(t) = template.as_object_mut() {
        t.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// `Match`: whether the revision holds the DaemonSet's current template.
pub fn matches_revision(ds: &DaemonSet, history: &ControllerRevision) -> bool {
    history.data.as_ref().is_some_and(|d| d.0 == get_patch(ds))
}

fn hash_of(history: &ControllerRevision) -> Option<&str> {
    history.metadata.labels.as_ref()?.get(CONTROLLER_REVISION_HASH_LABEL).map(String::as_str)
}

fn min_ready_seconds(ds: &DaemonSet) -> i32 {
    ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
}

/// A node's pod of the current revision and its pod of an older one, each if any.
type NewAndOldPod = (Option<Arc<Pod>>, Option<Arc<Pod>>);

/// `findUpdatedPodsOnNode`: the node's new and old pod (not being deleted); `None` when it has
/// more than one of either (the manage loop prunes those first).
fn find_updated_pods_on_node(ds: &DaemonSet, pods: &[Arc<Pod>], hash: &str) -> Option<NewAndOldPod> {
    let generation = template_generation(ds);
    let (mut new_pod, mut old_pod) = (None, None);
    for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let slot = if is_pod_updated(pod, hash, generation) { &mut new_pod } else { &mut old_pod };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod.clone());
    }
    Some((new_pod, old_pod))
}

impl DaemonSetsController {
    /// `controlledHistories`: the ControllerRevisions the DaemonSet owns after adopting matching
    /// orphans and releasing owned ones that no longer match.
    async fn controlled_histories(&self, ds: &DaemonSet) -> Result<Vec<Arc<ControllerRevision>>, ApiError> {
        let spec = ds.spec.as_ref().ok_or_else(|| ApiError::bad_request("daemon set has no spec"))?;
        let selector = selector_of(&spec.selector).map_err(ApiError::bad_request)?;
        let ns = ds.metadata.namespace.clone().unwrap_or_default();
        let candidates = self.revisions.store().list_namespace(&ns);
        let claimant = Claimant {
            controller_ref: new_controller_ref(ds),
            namespace: ds.metadata.namespace.clone(),
            being_deleted: ds.metadata.deletion_timestamp.is_some(),
        };
        claim(
            self.api.as_ref(),
            &resource_of::<ControllerRevision>(),
            &claimant,
            candidates,
            |h: &Arc<ControllerRevision>| &h.metadata,
            |h: &Arc<ControllerRevision>| selector.matches(&labels_of(&h.metadata)),
            || self.can_adopt(ds),
        )
        .await
    }

    /// `constructHistory`: the current revision (created if missing, renumbered above every old
    /// one) and the old ones; revisions without the hash label get their name as hash.
    pub(super) async fn construct_history(
        &self,
        ds: &DaemonSet,
    ) -> Result<(ControllerRevision, Vec<ControllerRevision>), ApiError> {
        let mut current = Vec::new();
        let mut old = Vec::new();
        for history in self.controlled_histories(ds).await? {
            let mut history = history.as_ref().clone();
            if hash_of(&history).is_none() {
                let name = name_of(&history.metadata).to_string();
                history
                    .metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(CONTROLLER_REVISION_HASH_LABEL.into(), name);
                history = self.api.update_typed(&history).await?;
            }
            if matches_revision(ds, &history) {
                current.push(history);
            } else {
                old.push(history);
            }
        }
        let next_revision = old.iter().map(|h| h.revision).max().unwrap_or(0) + 1;
        let cur = if current.is_empty() {
            self.snapshot(ds, next_revision).await?
        } else {
            let mut cur = self.dedup_cur_histories(ds, current).await?;
            if cur.revision < next_revision {
                cur.revision = next_revision;
                cur = self.api.update_typed(&cur).await?;
            }
            cur
        };
        Ok((cur, old))
    }

    /// `dedupCurHistories`: of several revisions holding the current template, keeps the newest,
    /// relabels pods of the others to its hash and deletes them.
    async fn dedup_cur_histories(
        &self,
        ds: &DaemonSet,
        mut current: Vec<ControllerRevision>,
    ) -> Result<ControllerRevision, ApiError> {
        if current.len() == 1 {
            return Ok(current.remove(0));
        }
        current.sort_by_key(|h| h.revision);
        let keep = current.pop().unwrap_or_default();
        let keep_hash = hash_of(&keep).unwrap_or_default().to_string();
        for pods in self.nodes_to_daemon_pods(ds, true).await?.values() {
            for pod in pods {
                if labels_of(&pod.metadata).get(CONTROLLER_REVISION_HASH_LABEL) != Some(&keep_hash) {
                    let patch = json!({"metadata": {"labels": {CONTROLLER_REVISION_HASH_LABEL: keep_hash}}});
                    self.api
                        .patch_typed::<Pod>(
                            pod.metadata.namespace.as_deref(),
                            name_of(&pod.metadata),
                            PatchType::Merge,
                            &patch,
                        )
                        .await?;
                }
            }
        }
        for dup in current {
            self.api
                .delete_typed::<ControllerRevision>(
                    dup.metadata.namespace.as_deref(),
                    name_of(&dup.metadata),
                    &DeleteOptions::default(),
                )
                .await?;
        }
        Ok(keep)
    }

    /// `snapshot`: creates the revision of the current template. A name taken by a revision of
    /// another template is a hash collision: `status.collisionCount` goes up (changing the
    /// hash) and the sync is retried.
    async fn snapshot(&self, ds: &DaemonSet, revision: i64) -> Result<ControllerRevision, ApiError> {
        let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
        let hash = compute_hash(&template_of(ds), collision_count);
        let name = format!("{}-{hash}", name_of(&ds.metadata));
        let mut labels = template_of(ds).metadata.and_then(|m| m.labels).unwrap_or_default();
        labels.insert(CONTROLLER_REVISION_HASH_LABEL.into(), hash);
        let history = ControllerRevision {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.clone()),
                namespace: ds.metadata.namespace.clone(),
                labels: Some(labels),
                annotations: ds.metadata.annotations.clone(),
                owner_references: Some(vec![new_controller_ref(ds)]),
                ..Default::default()
            },
            data: Some(RawExtension(get_patch(ds))),
            revision,
        };
        match self.api.create_typed(&history).await {
            Ok(created) => Ok(created),
            Err(e) if is_already_exists(&e) => {
                let ns = ds.metadata.namespace.as_deref();
                let existing: ControllerRevision = self.api.get_typed(ns, &name).await?;
                if matches_revision(ds, &existing) {
                    return Ok(existing);
                }
                let mut fresh: DaemonSet = self.api.get_typed(ns, name_of(&ds.metadata)).await?;
                let fresh_count = fresh.status.as_ref().and_then(|s| s.collision_count);
                if fresh_count != collision_count {
                    return Err(conflict(format!(
                        "found a stale collision count ({collision_count:?}, expected {fresh_count:?}) of DaemonSet {:?} while processing; will retry until it is updated",
                        name_of(&ds.metadata)
                    )));
                }
                let status = fresh.status.get_or_insert_with(Default::default);
                status.collision_count = Some(fresh_count.unwrap_or(0) + 1);
                self.api.update_status_typed(&fresh).await?;
                tracing::info!(daemonset = %key_of(ds), "hash collision: collisionCount bumped");
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// `cleanupHistory`: deletes the oldest old revisions beyond `revisionHistoryLimit` that no
    /// live pod was made from.
    pub(super) async fn cleanup_history(
        &self,
        ds: &DaemonSet,
        mut old: Vec<ControllerRevision>,
    ) -> Result<(), ApiError> {
        let to_keep = ds.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10).max(0) as usize;
        let Some(mut to_kill) = old.len().checked_sub(to_keep).filter(|n| *n > 0) else { return Ok(()) };
        let live: HashSet<String> = self
            .nodes_to_daemon_pods(ds, true)
            .await?
            .values()
            .flatten()
            .filter_map(|p| labels_of(&p.metadata).get(CONTROLLER_REVISION_HASH_LABEL).cloned())
            .collect();
        old.sort_by_key(|h| h.revision);
        for history in old {
            if to_kill == 0 {
                break;
            }
            if hash_of(&history).is_some_and(|h| live.contains(h)) {
                continue;
            }
            self.api
                .delete_typed::<ControllerRevision>(
                    history.metadata.namespace.as_deref(),
                    name_of(&history.metadata),
                    &DeleteOptions::default(),
                )
                .await?;
            to_kill -= 1;
        }
        Ok(())
    }

    /// `updatedDesiredNodeCounts`: (maxSurge, maxUnavailable, desiredNumberScheduled); every node
    /// that should run the pod gets an entry in `node_to_pods`. A DaemonSet allowing neither
    /// surge nor unavailability (0 % of few nodes) gets maxUnavailable 1.
    fn updated_desired_node_counts(
        &self,
        ds: &DaemonSet,
        node_to_pods: &mut BTreeMap<String, Vec<Arc<Pod>>>,
    ) -> Result<(i32, i32, i32), ApiError> {
        let mut desired = 0;
        for node in self.nodes.store().list() {
            if node_should_run_daemon_pod(&node, ds).0 {
                desired += 1;
                node_to_pods.entry(name_of(&node.metadata).to_string()).or_default();
            }
        }
        let mut max_unavailable = unavailable_count(ds, desired).map_err(ApiError::bad_request)?;
        let max_surge = surge_count(ds, desired).map_err(ApiError::bad_request)?;
        if desired > 0 && max_unavailable == 0 && max_surge == 0 {
            max_unavailable = 1;
        }
        Ok((max_surge, max_unavailable, desired))
    }

    /// `rollingUpdate`: deletes (and, with surge, creates) the pods that move the DaemonSet to
    /// its current revision within `maxUnavailable`/`maxSurge`.
    pub(super) async fn rolling_update(&self, ds: &DaemonSet, hash: &str) -> Result<(), ApiError> {
        let mut node_to_pods = self.nodes_to_daemon_pods(ds, false).await?;
        let (max_surge, max_unavailable, desired) = self.updated_desired_node_counts(ds, &mut node_to_pods)?;
        let now = (self.clock)();
        let min_ready = min_ready_seconds(ds);
        let available = |p: &Pod| is_pod_available(p, min_ready, now);

        if max_surge == 0 {
            let mut num_unavailable = 0;
            let mut allowed_replacements = Vec::new();
            let mut candidates = Vec::new();
            for pods in node_to_pods.values() {
                let Some((new_pod, old_pod)) = find_updated_pods_on_node(ds, pods, hash) else {
                    // Excess pods: the manage loop prunes them; count the node unavailable.
                    num_unavailable += 1;
                    continue;
                };
                match (new_pod, old_pod) {
                    (None, None) | (Some(_), Some(_)) => num_unavailable += 1,
                    (Some(new_pod), None) => {
                        if !available(&new_pod) {
                            num_unavailable += 1;
                        }
                    }
                    (None, Some(old_pod)) => {
                        if !available(&old_pod) {
                            allowed_replacements.push(name_of(&old_pod.metadata).to_string());
                            num_unavailable += 1;
                        } else if num_unavailable < max_unavailable {
                            candidates.push(name_of(&old_pod.metadata).to_string());
                        }
                    }
                }
            }
            let remaining = (max_unavailable - num_unavailable).max(0) as usize;
            candidates.truncate(remaining);
            allowed_replacements.extend(candidates);
            return self.sync_nodes(ds, allowed_replacements, Vec::new(), hash).await;
        }

        let mut old_pods_to_delete = Vec::new();
        let mut should_not_run_pods_to_delete = Vec::new();
        let mut candidate_new_nodes = Vec::new();
        let mut allowed_new_nodes = Vec::new();
        let mut num_surge = 0;
        let mut num_available = 0;
        for (node_name, pods) in &node_to_pods {
            let Some((new_pod, old_pod)) = find_updated_pods_on_node(ds, pods, hash) else {
                num_surge += 1;
                continue;
            };
            match (&old_pod, &new_pod) {
                (Some(p), _) | (None, Some(p)) if available(p) => num_available += 1,
                _ => {}
            }
            match (new_pod, old_pod) {
                (_, None) => {}
                (None, Some(old_pod)) => {
                    let should_run =
                        self.nodes.store().get(node_name).is_some_and(|n| node_should_run_daemon_pod(&n, ds).0);
                    if !available(&old_pod) {
                        if should_run {
                            allowed_new_nodes.push(node_name.clone());
                        } else {
                            old_pods_to_delete.push(name_of(&old_pod.metadata).to_string());
                        }
                    } else if !should_run {
                        should_not_run_pods_to_delete.push(name_of(&old_pod.metadata).to_string());
                    } else if num_surge < max_surge {
                        candidate_new_nodes.push(node_name.clone());
                    }
                }
                (Some(new_pod), Some(old_pod)) => {
                    if !available(&new_pod) {
                        num_surge += 1;
                    } else {
                        old_pods_to_delete.push(name_of(&old_pod.metadata).to_string());
                    }
                }
            }
        }
        // With surge the owner expects full availability: a pod on a node that should no longer
        // run it goes only once as many pods are available elsewhere.
        let deletable = (num_available - desired).max(0) as usize;
        old_pods_to_delete.extend(should_not_run_pods_to_delete.into_iter().take(deletable));
        let remaining_surge = (max_surge - num_surge).max(0) as usize;
        candidate_new_nodes.truncate(remaining_surge);
        allowed_new_nodes.extend(candidate_new_nodes);
        self.sync_nodes(ds, old_pods_to_delete, allowed_new_nodes, hash).await
    }

    /// `RecheckDeletionTimestamp`: before adopting, a live read confirms the DaemonSet still
    /// exists with this uid and is not being deleted.
    pub(super) async fn can_adopt(&self, ds: &DaemonSet) -> Result<(), ApiError> {
        let ns = ds.metadata.namespace.as_deref();
        let fresh: DaemonSet = self.api.get_typed(ns, name_of(&ds.metadata)).await?;
        if uid_of(&fresh.metadata) != uid_of(&ds.metadata) {
            return Err(conflict(format!(
                "original DaemonSet {}/{} is gone: got uid {}, wanted {}",
                ns.unwrap_or_default(),
                name_of(&ds.metadata),
                uid_of(&fresh.metadata),
                uid_of(&ds.metadata)
            )));
        }
        if fresh.metadata.deletion_timestamp.is_some() {
            return Err(conflict(format!(
                "{}/{} has just been deleted",
                ns.unwrap_or_default(),
                name_of(&ds.metadata)
            )));
        }
        Ok(())
    }
}
