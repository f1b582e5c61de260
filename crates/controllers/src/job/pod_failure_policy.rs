//! `spec.podFailurePolicy` (`pkg/controller/job/pod_failure_policy.go`, KEP-3329): which rule,
//! if any, a failed pod matches, and what the match does to the Job.
//!
//! Rules are tried in order; the first whose requirement a failed pod meets decides:
//! `FailJob` fails the whole Job (with a message naming the container or condition and the rule),
//! `FailIndex` fails only the pod's index (Indexed Jobs with `backoffLimitPerIndex`), `Ignore`
//! keeps the failure out of every backoff count, and `Count` counts it as usual. A pod that
//! matches no rule is counted as usual.

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};

/// The rule actions (`batch/v1` `PodFailurePolicyAction`).
pub mod actions {
    /// Fail the Job.
    pub const FAIL_JOB: &str = "FailJob";
    /// Fail the pod's index.
    pub const FAIL_INDEX: &str = "FailIndex";
    /// Do not count the failure.
    pub const IGNORE: &str = "Ignore";
    /// Count the failure as usual.
    pub const COUNT: &str = "Count";
}

/// What matching a failed pod against the policy decided (`matchPodFailurePolicy`'s three
/// results).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyMatch {
    /// The Job's failure message, for a `FailJob` match.
    pub fail_job_message: Option<String>,
    /// Whether the failure counts towards `backoffLimit` (false only for `Ignore`).
    pub count_failed: bool,
    /// The matched rule's action; `None` when no rule matched.
    pub action: Option<String>,
}

impl PolicyMatch {
    fn unmatched() -> Self {
        Self { fail_job_message: None, count_failed: true, action: None }
    }

    /// Whether the matched rule's action is `action`.
    pub fn is(&self, action: &str) -> bool {
        self.action.as_deref() == Some(action)
    }
}

/// `matchPodFailurePolicy`: the first rule `failed_pod` matches. With no policy, or no match,
/// the failure is counted and no action applies. Unknown actions match nothing, as in
/// Kubernetes (validation admits only the four known ones).
pub fn match_pod_failure_policy(policy: Option<&PodFailurePolicy>, failed_pod: &Pod) -> PolicyMatch {
    let Some(policy) = policy else { return PolicyMatch::unmatched() };
    let status = failed_pod.status.clone().unwrap_or_default();
    let ns = failed_pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = failed_pod.metadata.name.as_deref().unwrap_or_default();
    for (index, rule) in policy.rules.iter().enumerate() {
        let message = if let Some(req) = &rule.on_exit_codes {
            let Some(container) = match_on_exit_codes(&status, req) else { continue };
            let code = container.state.as_ref().and_then(|s| s.terminated.as_ref()).map_or(0, |t| t.exit_code);
            format!(
                "Container {} for pod {ns}/{name} failed with exit code {code} matching {} rule at index {index}",
                container.name, rule.action
            )
        } else if let Some(patterns) = rule.on_pod_conditions.as_ref().filter(|p| !p.is_empty()) {
            let matched = status
                .conditions
                .iter()
                .flatten()
                .find(|c| patterns.iter().any(|p| p.type_ == c.type_ && p.status == c.status));
            let Some(condition) = matched else { continue };
            format!("Pod {ns}/{name} has condition {} matching {} rule at index {index}", condition.type_, rule.action)
        } else {
            continue;
        };
        return match rule.action.as_str() {
            actions::IGNORE => {
                PolicyMatch { fail_job_message: None, count_failed: false, action: Some(rule.action.clone()) }
            }
            actions::COUNT | actions::FAIL_INDEX => {
                PolicyMatch { fail_job_message: None, count_failed: true, action: Some(rule.action.clone()) }
            }
            actions::FAIL_JOB => {
                PolicyMatch { fail_job_message: Some(message), count_failed: true, action: Some(rule.action.clone()) }
            }
            _ => continue,
        };
    }
    PolicyMatch::unmatched()
}

/// `matchOnExitCodes`: the first terminated container (app containers, then init containers)
/// with a non-zero exit code meeting the requirement.
fn match_on_exit_codes<'a>(
    status: &'a PodStatus,
    req: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<&'a ContainerStatus> {
    let matching = |list: Option<&'a Vec<ContainerStatus>>| {
        list.into_iter().flatten().find(|c| {
            let Some(terminated) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) else { return false };
            req.container_name.as_ref().is_none_or(|n| *n == c.name)
                && terminated.exit_code != 0
                && match req.operator.as_str() {
                    "In" => req.values.contains(&terminated.exit_code),
                    "NotIn" => !req.values.contains(&terminated.exit_code),
                    _ => false,
                }
        })
    };
    matching(status.container_statuses.as_ref()).or_else(|| matching(status.init_container_statuses.as_ref()))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::{PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule};
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, PodCondition};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn exit_rule(action: &str, container: Option<&str>, op: &str, values: &[i32]) -> PodFailurePolicyRule {
        PodFailurePolicyRule {
            action: action.into(),
            on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                container_name: container.map(Into::into),
                operator: op.into(),
                values: values.to_vec(),
            }),
            on_pod_conditions: None,
        }
    }

    fn condition_rule(action: &str, type_: &str) -> PodFailurePolicyRule {
        PodFailurePolicyRule {
            action: action.into(),
            on_exit_codes: None,
            on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                type_: type_.into(),
                status: "True".into(),
            }]),
        }
    }

    fn failed_pod(exits: &[(&str, i32)], init_exits: &[(&str, i32)], conditions: &[&str]) -> Pod {
        let statuses = |list: &[(&str, i32)]| {
            Some(
                list.iter()
                    .map(|(name, code)| ContainerStatus {
                        name: (*name).into(),
                        state: Some(ContainerState {
                            terminated: Some(ContainerStateTerminated { exit_code: *code, ..Default::default() }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            )
        };
        Pod {
            metadata: ObjectMeta { name: Some("p".into()), namespace: Some("ns".into()), ..Default::default() },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Failed".into()),
                container_statuses: statuses(exits),
                init_container_statuses: statuses(init_exits),
                conditions: Some(
                    conditions
                        .iter()
                        .map(|t| PodCondition { type_: (*t).into(), status: "True".into(), ..Default::default() })
                        .collect(),
                ),
                ..Default::default()
            }),
        }
    }

    fn policy(rules: Vec<PodFailurePolicyRule>) -> PodFailurePolicy {
        PodFailurePolicy { rules }
    }

    #[test]
    fn a_fail_job_exit_code_rule_words_the_failure_as_kubernetes_does() {
        let p = policy(vec![exit_rule("FailJob", None, "In", &[42])]);
        let m = match_pod_failure_policy(Some(&p), &failed_pod(&[("main", 42)], &[], &[]));
        assert_eq!(
            m.fail_job_message.as_deref(),
            Some("Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 0")
        );
        assert!(m.count_failed);
        assert!(m.is(actions::FAIL_JOB));
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let p = policy(vec![exit_rule("Ignore", None, "NotIn", &[1, 2]), exit_rule("FailJob", None, "In", &[3])]);
        let m = match_pod_failure_policy(Some(&p), &failed_pod(&[("main", 3)], &[], &[]));
        assert_eq!(m, PolicyMatch { fail_job_message: None, count_failed: false, action: Some("Ignore".into()) });
        // Exit code 1 is in the NotIn list: the second rule does not match either.
        let m = match_pod_failure_policy(Some(&p), &failed_pod(&[("main", 1)], &[], &[]));
        assert_eq!(m, PolicyMatch::unmatched());
    }

    #[test]
    fn an_exit_code_rule_for_a_named_container_ignores_the_others_and_zero_exits() {
        let p = policy(vec![exit_rule("FailJob", Some("sidecar"), "NotIn", &[5])]);
        assert_eq!(match_pod_failure_policy(Some(&p), &failed_pod(&[("main", 7)], &[], &[])).action, None);
        assert_eq!(match_pod_failure_policy(Some(&p), &failed_pod(&[("sidecar", 0)], &[], &[])).action, None);
        let m = match_pod_failure_policy(Some(&p), &failed_pod(&[("main", 7), ("sidecar", 6)], &[], &[]));
        assert!(m.fail_job_message.unwrap().starts_with("Container sidecar for pod ns/p failed with exit code 6"));
    }

    #[test]
    fn init_containers_are_matched_after_app_containers() {
        let p = policy(vec![exit_rule("Count", None, "In", &[9])]);
        let m = match_pod_failure_policy(Some(&p), &failed_pod(&[], &[("init", 9)], &[]));
        assert!(m.is(actions::COUNT));
    }

    #[test]
    fn a_disruption_target_condition_rule_matches_and_names_the_condition() {
        let p = policy(vec![condition_rule("FailJob", "DisruptionTarget")]);
        let m = match_pod_failure_policy(Some(&p), &failed_pod(&[("main", 137)], &[], &["DisruptionTarget"]));
        assert_eq!(
            m.fail_job_message.as_deref(),
            Some("Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0")
        );
        let ignore = policy(vec![condition_rule("Ignore", "DisruptionTarget")]);
        assert!(!match_pod_failure_policy(Some(&ignore), &failed_pod(&[], &[], &["DisruptionTarget"])).count_failed);
    }

    #[test]
    fn no_policy_counts_every_failure() {
        assert_eq!(match_pod_failure_policy(None, &failed_pod(&[("main", 1)], &[], &[])), PolicyMatch::unmatched());
    }
}
