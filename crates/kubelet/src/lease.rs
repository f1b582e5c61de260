//! Node heartbeats through Leases in the `kube-node-lease` namespace.
//!
//! Follows "Node heartbeats" (<https://kubernetes.io/docs/concepts/architecture/leases/#node-heart-beats>,
//! KEP-589): each node owns a Lease named after it whose `spec.renewTime` the kubelet bumps every
//! 10 s; `leaseDurationSeconds` is 40. One [`run_heartbeats`] task serves any number of nodes:
//! nodes are spread over the interval in buckets so that 5,000 simulated nodes cost a steady
//! ~500 small patches per second instead of a burst.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::Error;

/// The namespace holding node leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// How long a lease is valid without renewal (kubelet's `nodeLeaseDurationSeconds`).
pub const LEASE_DURATION_SECONDS: i32 = 40;

/// How often a lease is renewed (a quarter of the lease duration, as the kubelet does).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);

/// Number of buckets the renew interval is split into.
const BUCKETS: u64 = 10;

/// Renewals in flight at once.
const CONCURRENCY: usize = 32;

/// A node whose lease is kept fresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// Node name (also the lease name and `holderIdentity`).
    pub node_name: String,
    /// Node UID, for the lease's owner reference (so deleting the Node deletes its Lease).
    pub node_uid: Option<String>,
}

/// The Lease object for `holder` renewed at `now`.
pub fn lease_for(holder: &LeaseHolder, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(holder.node_name.clone()),
            namespace: Some(NODE_LEASE_NAMESPACE.to_string()),
            owner_references: holder.node_uid.as_ref().map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".to_string(),
                    kind: "Node".to_string(),
                    name: holder.node_name.clone(),
                    uid: uid.clone(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.node_name.clone()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Renews one node's lease, creating it when missing.
///
/// # Errors
/// [`Error::Kube`] when the API server rejects both the patch and the create.
pub async fn renew_lease(api: &Api<Lease>, holder: &LeaseHolder) -> Result<(), Error> {
    let lease = lease_for(holder, Timestamp::now());
    let patch = serde_json::json!({ "spec": lease.spec });
    match api.patch(&holder.node_name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            // Created concurrently (e.g. by a previous round still in flight): fine.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        },
        Err(e) => Err(e.into()),
    }
}

/// Renews every holder's lease now, `CONCURRENCY` at a time; returns the number of failures.
pub async fn renew_all(api: &Api<Lease>, holders: &[LeaseHolder]) -> usize {
    futures::stream::iter(holders.to_vec())
        .map(|h| {
            let api = api.clone();
            async move {
                let result = renew_lease(&api, &h).await;
                if let Err(e) = &result {
                    tracing::warn!(node = %h.node_name, error = %e, "renewing node lease failed");
                }
                result.is_err()
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter(|failed| std::future::ready(*failed))
        .count()
        .await
}

/// Keeps the leases of `holders` fresh until the future is dropped: renews all of them at once,
/// then each `interval / 10` starts renewing one tenth of them (bucket `i % 10`), so every lease
/// is renewed once per `interval`. At most `CONCURRENCY` renewals are in flight; a slow API
/// server delays renewals (backpressure) instead of piling up requests. Failures are logged
/// and retried in the next round.
pub async fn run_heartbeats(api: Api<Lease>, holders: Vec<LeaseHolder>, interval: Duration) {
    renew_all(&api, &holders).await;
    let buckets: Vec<Vec<LeaseHolder>> = (0..BUCKETS)
        .map(|b| holders.iter().enumerate().filter(|(i, _)| *i as u64 % BUCKETS == b).map(|(_, h)| h.clone()).collect())
        .collect();
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    // Owned here so that dropping this future aborts renewals in flight.
    let mut in_flight = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(interval / BUCKETS as u32);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut bucket = 0usize;
    loop {
        tick.tick().await;
        while in_flight.try_join_next().is_some() {}
        for h in &buckets[bucket] {
            let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { return };
            let api = api.clone();
            let h = h.clone();
            in_flight.spawn(async move {
                if let Err(e) = renew_lease(&api, &h).await {
                    tracing::warn!(node = %h.node_name, error = %e, "renewing node lease failed");
                }
                drop(permit);
            });
        }
        bucket = (bucket + 1) % buckets.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_is_owned_by_its_node_and_held_by_it() {
        let holder = LeaseHolder { node_name: "n1".into(), node_uid: Some("uid-1".into()) };
        let lease = lease_for(&holder, Timestamp::UNIX_EPOCH);
        assert_eq!(lease.metadata.namespace.as_deref(), Some(NODE_LEASE_NAMESPACE));
        let owner = lease.metadata.owner_references.unwrap_or_default();
        assert_eq!(owner.len(), 1);
        assert_eq!(owner[0].kind, "Node");
        assert_eq!(owner[0].uid, "uid-1");
        let spec = lease.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
    }

    #[test]
    fn renew_patch_serializes_renew_time_with_microseconds() {
        let holder = LeaseHolder { node_name: "n1".into(), node_uid: None };
        let lease = lease_for(&holder, Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH));
        let json = serde_json::json!({ "spec": lease.spec });
        assert_eq!(json["spec"]["renewTime"], "2023-11-14T22:13:20.000000Z");
    }
}
