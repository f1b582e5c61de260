//! DefaultTolerationSeconds (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#defaulttolerationseconds>):
//! new pods tolerate the `node.kubernetes.io/not-ready` and `node.kubernetes.io/unreachable`
//! NoExecute taints for 300 seconds unless they already tolerate them.

use async_trait::async_trait;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::{AdmissionRequest, Feedback, MutatingAdmission, array_at};

/// Taint of a node whose Ready condition is False.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint of a node whose Ready condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Default `tolerationSeconds` (`--default-not-ready-toleration-seconds`,
/// `--default-unreachable-toleration-seconds`).
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

fn tolerates(tolerations: &[Value], key: &str) -> bool {
    tolerations.iter().any(|t| {
        let k = t["key"].as_str().unwrap_or_default();
        let effect = t["effect"].as_str().unwrap_or_default();
        (k == key || k.is_empty()) && (effect == "NoExecute" || effect.is_empty())
    })
}

/// Adds the default tolerations to a pod object.
pub fn add_default_tolerations(pod: &mut Value, not_ready_seconds: i64, unreachable_seconds: i64) {
    let tolerations = array_at(pod, &["spec", "tolerations"]);
    for (key, seconds) in [(TAINT_NOT_READY, not_ready_seconds), (TAINT_UNREACHABLE, unreachable_seconds)] {
        if !tolerates(tolerations, key) {
            tolerations
                .push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}));
        }
    }
}

/// The plugin.
#[derive(Debug, Clone, Copy)]
pub struct DefaultTolerationSeconds {
    /// Seconds for `not-ready`.
    pub not_ready_seconds: i64,
    /// Seconds for `unreachable`.
    pub unreachable_seconds: i64,
}

impl Default for DefaultTolerationSeconds {
    fn default() -> Self {
        Self { not_ready_seconds: DEFAULT_TOLERATION_SECONDS, unreachable_seconds: DEFAULT_TOLERATION_SECONDS }
    }
}

#[async_trait]
impl MutatingAdmission for DefaultTolerationSeconds {
    fn name(&self) -> &str {
        "DefaultTolerationSeconds"
    }
    async fn admit(&self, req: &mut AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        if !req.is_create_of("pods") {
            return Ok(());
        }
        if let Some(pod) = req.object.as_mut() {
            add_default_tolerations(pod, self.not_ready_seconds, self.unreachable_seconds);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_tolerations_are_added_unless_already_tolerated() {
        let cases = [
            (json!({"spec": {}}), 2),
            (
                json!({"spec": {"tolerations": [{"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]}}),
                2,
            ),
            (json!({"spec": {"tolerations": [{"operator": "Exists"}]}}), 1),
            (
                json!({"spec": {"tolerations": [{"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"}]}}),
                3,
            ),
        ];
        for (mut pod, want) in cases {
            add_default_tolerations(&mut pod, 300, 300);
            let t = pod["spec"]["tolerations"].as_array().unwrap();
            assert_eq!(t.len(), want, "{pod}");
            assert!(tolerates(t, TAINT_NOT_READY) && tolerates(t, TAINT_UNREACHABLE));
        }
        let mut pod = json!({"spec": {}});
        add_default_tolerations(&mut pod, 300, 300);
        assert_eq!(
            pod["spec"]["tolerations"][0],
            json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        );
    }
}
