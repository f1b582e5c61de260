//! The pod lifecycle event generator (PLEG), after the kubelet's `pkg/kubelet/pleg/generic.go`:
//! it relists the runtime's sandboxes and containers periodically and reports the pods whose
//! sandboxes or containers appeared, changed state or disappeared since the previous relist,
//! so their pod workers sync now instead of at their next resync.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cri::{CriError, RuntimeService};
use crate::kuberuntime;

/// How often the PLEG relists the runtime (the upstream `relistPeriod`).
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// One pod's runtime objects as (id, state) pairs, sorted; container states are offset by 10
/// so they never equal a sandbox state.
type PodRecord = Vec<(String, i32)>;

/// A PLEG over one runtime: remembers the previous relist to tell what changed.
pub struct GenericPleg {
    runtime: Arc<dyn RuntimeService>,
    last: HashMap<String, PodRecord>,
}

impl GenericPleg {
    /// A PLEG that has not relisted yet (its first relist reports every pod on the runtime).
    pub fn new(runtime: Arc<dyn RuntimeService>) -> Self {
        GenericPleg { runtime, last: HashMap::new() }
    }

    /// Lists the runtime's sandboxes and containers and returns the UIDs of the pods (by their
    /// `io.kubernetes.pod.uid` label) with a lifecycle event since the previous relist: a
    /// sandbox or container that appeared, changed state or disappeared.
    ///
    /// # Errors
    /// [`CriError`] when the runtime cannot be listed; the previous relist is kept, so the
    /// next successful one reports everything that changed meanwhile.
    pub async fn relist(&mut self) -> Result<Vec<String>, CriError> {
        let (sandboxes, containers) =
            tokio::try_join!(self.runtime.list_pod_sandboxes(None), self.runtime.list_containers(None))?;
        let mut now: HashMap<String, PodRecord> = HashMap::new();
        for s in sandboxes {
            if let Some(uid) = s.labels.get(kuberuntime::LABEL_POD_UID) {
                now.entry(uid.clone()).or_default().push((s.id, s.state));
            }
        }
        for c in containers {
            if let Some(uid) = c.labels.get(kuberuntime::LABEL_POD_UID) {
                now.entry(uid.clone()).or_default().push((c.id, c.state + 10));
            }
        }
        for v in now.values_mut() {
            v.sort();
        }
        let mut changed: Vec<String> = now
            .iter()
            .filter(|(uid, record)| self.last.get(*uid) != Some(*record))
            .map(|(uid, _)| uid.clone())
            .collect();
        changed.extend(self.last.keys().filter(|uid| !now.contains_key(*uid)).cloned());
        self.last = now;
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::api;
    use crate::cri::fake::FakeRuntimeService;

    fn sandbox(uid: &str) -> api::PodSandboxConfig {
        api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata { name: "p".into(), uid: uid.into(), ..Default::default() }),
            labels: [(kuberuntime::LABEL_POD_UID.to_string(), uid.to_string())].into(),
            ..Default::default()
        }
    }

    fn container(uid: &str) -> api::ContainerConfig {
        api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
            labels: [(kuberuntime::LABEL_POD_UID.to_string(), uid.to_string())].into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_relist_reports_only_pods_whose_sandboxes_or_containers_changed() {
        let fake = Arc::new(FakeRuntimeService::new());
        let mut pleg = GenericPleg::new(fake.clone());
        let a = fake.run_pod_sandbox(sandbox("a")).await.unwrap();
        let b = fake.run_pod_sandbox(sandbox("b")).await.unwrap();
        let mut first = pleg.relist().await.unwrap();
        first.sort();
        assert_eq!(first, ["a", "b"], "the first relist reports every pod");
        assert!(pleg.relist().await.unwrap().is_empty(), "nothing changed");

        let c = fake.create_container(&a, container("a"), sandbox("a")).await.unwrap();
        assert_eq!(pleg.relist().await.unwrap(), ["a"], "a container appeared");
        fake.start_container(&c).await.unwrap();
        assert_eq!(pleg.relist().await.unwrap(), ["a"], "it started");
        fake.exit_container(&c, 1);
        assert_eq!(pleg.relist().await.unwrap(), ["a"], "it died");

        fake.remove_pod_sandbox(&b).await.unwrap();
        assert_eq!(pleg.relist().await.unwrap(), ["b"], "a pod that disappeared");
        assert!(pleg.relist().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_failed_relist_keeps_the_previous_one() {
        let fake = Arc::new(FakeRuntimeService::new());
        let mut pleg = GenericPleg::new(fake.clone());
        fake.run_pod_sandbox(sandbox("a")).await.unwrap();
        pleg.relist().await.unwrap();
        fake.inject_failure("ListContainers");
        let b = fake.run_pod_sandbox(sandbox("b")).await.unwrap();
        assert!(pleg.relist().await.is_err());
        fake.heal();
        fake.stop_pod_sandbox(&b).await.unwrap();
        assert_eq!(pleg.relist().await.unwrap(), ["b"], "what changed meanwhile is still reported");
    }
}
