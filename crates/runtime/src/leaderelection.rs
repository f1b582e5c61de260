//! Leader election on a `coordination.k8s.io/v1` Lease (`client-go/tools/leaderelection`), so
//! that of several `skiff server`s sharing one store exactly one runs the controller manager
//! (and one the scheduler).
//!
//! The algorithm (`tryAcquireOrRenew`):
//! 1. GET the Lease; if it does not exist, CREATE it with ourselves as holder.
//! 2. If the record differs from the one last observed, remember it and the local (monotonic)
//!    time we observed it. Validity is judged only on that local observation time, never on the
//!    remote `renewTime`, so clock skew between servers does not matter.
//! 3. If another holder's lease is still valid (`observedTime + leaseDurationSeconds > now`),
//!    give up this round.
//! 4. Otherwise UPDATE the Lease with our identity and a fresh `renewTime` (keeping
//!    `acquireTime` and `leaseTransitions` if we already held it, incrementing transitions if
//!    we take over). The update carries the `resourceVersion` read in step 1, so of two
//!    candidates racing, only one wins (the other gets 409 Conflict).
//!
//! A candidate retries every `retry_period` (with jitter) until it acquires the lease; the
//! leader renews every `retry_period` and steps down if it could not renew for
//! `renew_deadline`. Defaults are Kubernetes': lease 15 s, renew deadline 10 s, retry 2 s.
//!
//! Reference: <https://pkg.go.dev/k8s.io/client-go/tools/leaderelection>.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::api::{ApiClient, ApiClientExt, KubeApi, is_not_found};

/// Errors of leader election.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeaderElectionError {
    /// The durations violate `lease_duration > renew_deadline > 1.2 * retry_period`, or the
    /// identity or lease name is empty.
    #[error("invalid leader election config: {0}")]
    InvalidConfig(String),
    /// The lease could not be renewed within the renew deadline; the work was stopped.
    #[error("leader election lost")]
    LeadershipLost,
}

/// Settings of one election (`LeaderElectionConfig` + the Lease lock's coordinates).
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// Namespace of the Lease (`kube-system`).
    pub lease_namespace: String,
    /// Name of the Lease (`kube-controller-manager`, `kube-scheduler`).
    pub lease_name: String,
    /// This candidate's unique identity (`hostname_<random>`).
    pub identity: String,
    /// How long non-leaders wait after the last observed renewal before taking over (15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a failed renewal before stepping down (10 s).
    pub renew_deadline: Duration,
    /// Interval between attempts (2 s).
    pub retry_period: Duration,
    /// Give the lease up (empty holder) when the work finishes normally.
    pub release_on_cancel: bool,
}

impl LeaderElectionConfig {
    /// Kubernetes' defaults for a lease in `namespace`/`name` with a generated identity.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            lease_namespace: namespace.to_string(),
            lease_name: name.to_string(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: true,
        }
    }

    /// Checks the invariants client-go checks.
    ///
    /// # Errors
    /// [`LeaderElectionError::InvalidConfig`] with the violated rule.
    pub fn validate(&self) -> Result<(), LeaderElectionError> {
        let bad = |m: &str| Err(LeaderElectionError::InvalidConfig(m.to_string()));
        if self.lease_duration <= self.renew_deadline {
            return bad("leaseDuration must be greater than renewDeadline");
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return bad("renewDeadline must be greater than retryPeriod*JitterFactor");
        }
        if self.retry_period.is_zero() {
            return bad("retryPeriod must be greater than zero");
        }
        if self.identity.is_empty() {
            return bad("identity must not be empty");
        }
        if self.lease_name.is_empty() || self.lease_namespace.is_empty() {
            return bad("lease name and namespace must not be empty");
        }
        Ok(())
    }
}

/// `<hostname>_<16 random hex digits>`, the shape of kube-controller-manager's identity.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "skiff".to_string());
    format!("{host}_{:016x}", rand::random::<u64>())
}

struct Observed {
    record: Option<LeaseSpec>,
    time: Instant,
}

/// A candidate in one election.
pub struct LeaderElector {
    api: Arc<dyn ApiClient>,
    config: LeaderElectionConfig,
    observed: Mutex<Observed>,
}

impl LeaderElector {
    /// A candidate using `api`.
    ///
    /// # Errors
    /// [`LeaderElectionError::InvalidConfig`].
    pub fn new(api: Arc<dyn ApiClient>, config: LeaderElectionConfig) -> Result<Self, LeaderElectionError> {
        config.validate()?;
        Ok(Self { api, config, observed: Mutex::new(Observed { record: None, time: Instant::now() }) })
    }

    /// A candidate talking to the API through `client`.
    ///
    /// # Errors
    /// [`LeaderElectionError::InvalidConfig`].
    pub fn from_client(client: kube::Client, config: LeaderElectionConfig) -> Result<Self, LeaderElectionError> {
        Self::new(Arc::new(KubeApi::new(client)), config)
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Whether the last observed record names us as holder.
    pub fn is_leader(&self) -> bool {
        self.observed.lock().record.as_ref().and_then(|r| r.holder_identity.as_deref())
            == Some(self.config.identity.as_str())
    }

    /// The holder of the last observed record.
    pub fn leader(&self) -> Option<String> {
        self.observed.lock().record.as_ref().and_then(|r| r.holder_identity.clone()).filter(|h| !h.is_empty())
    }

    /// Whether the observed record is still valid: observed less than its
    /// `leaseDurationSeconds` ago on our own monotonic clock.
    fn lease_valid(&self, now: Instant) -> bool {
        let obs = self.observed.lock();
        let secs = obs.record.as_ref().and_then(|r| r.lease_duration_seconds).unwrap_or(0).max(0) as u64;
        obs.time + Duration::from_secs(secs) > now
    }

    fn set_observed(&self, record: LeaseSpec) {
        let mut obs = self.observed.lock();
        obs.record = Some(record);
        obs.time = Instant::now();
    }

    fn lease_seconds(&self) -> i32 {
        self.config.lease_duration.as_secs().max(1) as i32
    }

    /// One attempt to acquire or renew the lease. Returns whether we hold it now.
    pub async fn try_acquire_or_renew(&self) -> bool {
        let now = MicroTime(Timestamp::now());
        let mut desired = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.lease_seconds()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(0),
            ..Default::default()
        };
        let ns = self.config.lease_namespace.as_str();
        let existing = match self.api.get_typed::<Lease>(Some(ns), &self.config.lease_name).await {
            Ok(lease) => lease,
            Err(e) if is_not_found(&e) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.lease_name.clone()),
                        namespace: Some(ns.to_string()),
                        ..Default::default()
                    },
                    spec: Some(desired.clone()),
                };
                return match self.api.create_typed(&lease).await {
                    Ok(_) => {
                        self.set_observed(desired);
                        true
                    }
                    Err(e) => {
                        tracing::debug!(%e, lease = %self.config.lease_name, "cannot create lease");
                        false
                    }
                };
            }
            Err(e) => {
                tracing::debug!(%e, lease = %self.config.lease_name, "cannot read lease");
                return false;
            }
        };
        let old = existing.spec.clone().unwrap_or_default();
        {
            let changed = self.observed.lock().record.as_ref() != Some(&old);
            if changed {
                self.set_observed(old.clone());
            }
        }
        let holder = old.holder_identity.clone().unwrap_or_default();
        if !holder.is_empty() && self.lease_valid(Instant::now()) && !self.is_leader() {
            tracing::trace!(holder, "lease is held by another candidate and has not yet expired");
            return false;
        }
        if self.is_leader() {
            desired.acquire_time = old.acquire_time.clone();
            desired.lease_transitions = old.lease_transitions;
        } else {
            desired.lease_transitions = Some(old.lease_transitions.unwrap_or(0) + 1);
        }
        let mut lease = existing;
        lease.spec = Some(desired.clone());
        match self.api.update_typed(&lease).await {
            Ok(_) => {
                self.set_observed(desired);
                true
            }
            Err(e) => {
                tracing::debug!(%e, lease = %self.config.lease_name, "cannot update lease");
                false
            }
        }
    }

    fn jittered_retry(&self) -> Duration {
        self.config.retry_period.mul_f64(1.0 + 1.2 * rand::random::<f64>())
    }

    /// Waits until this candidate holds the lease.
    pub async fn acquire(&self) {
        loop {
            if self.try_acquire_or_renew().await {
                tracing::info!(identity = %self.config.identity, lease = %self.config.lease_name, "acquired lease");
                return;
            }
            tokio::time::sleep(self.jittered_retry()).await;
        }
    }

    /// Renews every `retry_period`; returns when a renewal did not succeed within
    /// `renew_deadline` (leadership lost).
    pub async fn renew_until_lost(&self) {
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let deadline = Instant::now() + self.config.renew_deadline;
            loop {
                let attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await;
                match attempt {
                    Ok(true) => break,
                    Ok(false) if Instant::now() + self.config.retry_period < deadline => {
                        tokio::time::sleep(self.config.retry_period).await;
                    }
                    _ => {
                        tracing::warn!(identity = %self.config.identity, lease = %self.config.lease_name, "failed to renew lease");
                        return;
                    }
                }
            }
        }
    }

    /// Gives the lease up if we hold it (holder cleared, duration 1 s), so another candidate
    /// takes over at once. Returns whether the release was written.
    pub async fn release(&self) -> bool {
        if !self.is_leader() {
            return false;
        }
        let ns = self.config.lease_namespace.as_str();
        let Ok(mut lease) = self.api.get_typed::<Lease>(Some(ns), &self.config.lease_name).await else {
            return false;
        };
        let now = MicroTime(Timestamp::now());
        let spec = LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(now.clone()),
            acquire_time: Some(now),
            lease_transitions: lease.spec.as_ref().and_then(|s| s.lease_transitions),
            ..Default::default()
        };
        lease.spec = Some(spec.clone());
        match self.api.update_typed(&lease).await {
            Ok(_) => {
                self.set_observed(spec);
                true
            }
            Err(e) => {
                tracing::warn!(%e, "cannot release lease");
                false
            }
        }
    }

    /// Acquires the lease, then runs `work` while renewing it (`RunOrDie` without the dying).
    ///
    /// # Errors
    /// [`LeaderElectionError::LeadershipLost`] when renewal fails; `work` is dropped
    /// (cancelled) at that point. When `work` finishes first, its output is returned (after
    /// releasing the lease if `release_on_cancel`).
    pub async fn run<F: Future>(&self, work: F) -> Result<F::Output, LeaderElectionError> {
        self.acquire().await;
        let result = tokio::select! {
            out = work => Ok(out),
            _ = self.renew_until_lost() => Err(LeaderElectionError::LeadershipLost),
        };
        if result.is_ok() && self.config.release_on_cancel {
            self.release().await;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resource_of;
    use crate::fake::FakeApi;

    fn config(identity: &str) -> LeaderElectionConfig {
        LeaderElectionConfig {
            identity: identity.to_string(),
            lease_duration: Duration::from_millis(300),
            renew_deadline: Duration::from_millis(200),
            retry_period: Duration::from_millis(20),
            ..LeaderElectionConfig::new("kube-system", "kube-controller-manager")
        }
    }

    fn lease(api: &FakeApi) -> LeaseSpec {
        api.object_typed::<Lease>(Some("kube-system"), "kube-controller-manager").unwrap().spec.unwrap()
    }

    async fn poll_until(deadline: Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
        let end = Instant::now() + deadline;
        while Instant::now() < end {
            if f().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    #[test]
    fn kubernetes_defaults_are_valid_and_bad_durations_are_rejected() {
        assert!(LeaderElectionConfig::new("kube-system", "x").validate().is_ok());
        let mut c = LeaderElectionConfig::new("kube-system", "x");
        c.renew_deadline = Duration::from_secs(20);
        assert!(matches!(c.validate(), Err(LeaderElectionError::InvalidConfig(_))));
        let mut c = LeaderElectionConfig::new("kube-system", "x");
        c.retry_period = Duration::from_secs(9);
        assert!(c.validate().is_err());
    }

    #[tokio::test]
    async fn the_first_candidate_creates_the_lease_and_the_second_waits() {
        let api = Arc::new(FakeApi::new());
        let a = LeaderElector::new(api.clone(), config("a")).unwrap();
        let b = LeaderElector::new(api.clone(), config("b")).unwrap();
        assert!(a.try_acquire_or_renew().await);
        assert!(a.is_leader());
        let spec = lease(&api);
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(0));
        assert!(!b.try_acquire_or_renew().await);
        assert_eq!(b.leader().as_deref(), Some("a"));
        // Renewal keeps acquireTime and transitions.
        assert!(a.try_acquire_or_renew().await);
        assert_eq!(lease(&api).acquire_time, spec.acquire_time);
        assert_eq!(lease(&api).lease_transitions, Some(0));
    }

    #[tokio::test]
    async fn a_released_lease_is_taken_over_at_once_with_a_transition() {
        let api = Arc::new(FakeApi::new());
        let a = LeaderElector::new(api.clone(), config("a")).unwrap();
        let b = LeaderElector::new(api.clone(), config("b")).unwrap();
        assert!(a.try_acquire_or_renew().await);
        assert!(a.release().await);
        assert!(b.try_acquire_or_renew().await);
        let spec = lease(&api);
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over() {
        let api = Arc::new(FakeApi::new());
        let a = LeaderElector::new(api.clone(), config("a")).unwrap();
        let b = LeaderElector::new(api.clone(), config("b")).unwrap();
        assert!(a.try_acquire_or_renew().await);
        // "a" stops renewing; "b" takes over once its observation is older than the lease.
        assert!(poll_until(Duration::from_secs(10), async || b.try_acquire_or_renew().await).await);
        assert_eq!(lease(&api).holder_identity.as_deref(), Some("b"));
        // "a" notices on its next attempt that it is no longer the leader.
        assert!(!a.try_acquire_or_renew().await);
        assert!(!a.is_leader());
    }

    #[tokio::test]
    async fn a_racing_update_loses_with_a_conflict() {
        let api = Arc::new(FakeApi::new());
        let a = LeaderElector::new(api.clone(), config("a")).unwrap();
        assert!(a.try_acquire_or_renew().await);
        api.fail_next("update", "leases", crate::api::ApiError::conflict("coordination.k8s.io", "leases", "x"));
        assert!(!a.try_acquire_or_renew().await);
    }

    #[tokio::test]
    async fn run_returns_the_work_output_and_releases() {
        let api = Arc::new(FakeApi::new());
        let a = LeaderElector::new(api.clone(), config("a")).unwrap();
        assert_eq!(a.run(async { 42 }).await, Ok(42));
        assert_eq!(lease(&api).holder_identity, None);
    }

    #[tokio::test]
    async fn run_stops_the_work_when_the_lease_is_stolen() {
        let api = Arc::new(FakeApi::new());
        let a = LeaderElector::new(api.clone(), config("a")).unwrap();
        let stealer = {
            let api = api.clone();
            tokio::spawn(async move {
                // Once "a" holds the lease, overwrite the holder with a far-future renewal.
                loop {
                    if let Some(mut l) = api.object_typed::<Lease>(Some("kube-system"), "kube-controller-manager") {
                        let spec = l.spec.get_or_insert_with(Default::default);
                        spec.holder_identity = Some("thief".into());
                        spec.lease_duration_seconds = Some(3600);
                        l.metadata.resource_version = None;
                        api.seed_value(&resource_of::<Lease>(), serde_json::to_value(&l).unwrap());
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        };
        let out = a.run(std::future::pending::<()>()).await;
        stealer.await.unwrap();
        assert_eq!(out, Err(LeaderElectionError::LeadershipLost));
    }
}
