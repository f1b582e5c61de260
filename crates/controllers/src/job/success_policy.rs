//! `spec.successPolicy` (`pkg/controller/job/success_policy.go`, KEP-3998): an Indexed Job may
//! succeed before every index has, once the succeeded indexes meet one of the rules.
//!
//! A rule names `succeededIndexes` (all of them must succeed, or `succeededCount` of them), or
//! only a `succeededCount` of any indexes. The first rule met gives the `SuccessCriteriaMet`
//! condition the reason `SuccessPolicy` and the message `Matched rules at index <i>`.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::SuccessPolicy;

use super::indexed::parse_indexes;

/// The reason of a `SuccessCriteriaMet`/`Complete` condition set by the success policy
/// (`JobReasonSuccessPolicy`).
pub const REASON_SUCCESS_POLICY: &str = "SuccessPolicy";

/// `matchSuccessPolicy`: the condition message of the first rule `succeeded` meets, if any.
/// Rules whose `succeededIndexes` name no index below `completions` are skipped.
pub fn match_success_policy(
    policy: Option<&SuccessPolicy>,
    completions: i32,
    succeeded: &BTreeSet<i32>,
) -> Option<String> {
    let policy = policy?;
    if succeeded.is_empty() {
        return None;
    }
    for (index, rule) in policy.rules.iter().enumerate() {
        let met = match (&rule.succeeded_indexes, rule.succeeded_count) {
            (Some(text), count) => {
                let required = parse_indexes(Some(text), completions);
                if required.is_empty() {
                    continue;
                }
                let contained = required.intersection(succeeded).count();
                contained == required.len() || count.is_some_and(|c| contained >= c.max(0) as usize)
            }
            (None, Some(count)) => succeeded.len() >= count.max(0) as usize,
            (None, None) => false,
        };
        if met {
            return Some(format!("Matched rules at index {index}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::SuccessPolicyRule;

    use super::*;

    fn policy(rules: &[(Option<&str>, Option<i32>)]) -> SuccessPolicy {
        SuccessPolicy {
            rules: rules
                .iter()
                .map(|(ix, count)| SuccessPolicyRule { succeeded_indexes: ix.map(Into::into), succeeded_count: *count })
                .collect(),
        }
    }

    fn set(v: &[i32]) -> BTreeSet<i32> {
        v.iter().copied().collect()
    }

    #[test]
    fn a_rule_of_indexes_is_met_when_all_of_them_succeeded() {
        let p = policy(&[(Some("0,2-3"), None)]);
        assert_eq!(match_success_policy(Some(&p), 5, &set(&[0, 2])), None);
        assert_eq!(match_success_policy(Some(&p), 5, &set(&[0, 1, 2, 3])), Some("Matched rules at index 0".into()));
    }

    #[test]
    fn a_rule_of_indexes_and_a_count_is_met_by_that_many_of_them() {
        let p = policy(&[(Some("1-4"), Some(2))]);
        assert_eq!(match_success_policy(Some(&p), 5, &set(&[0, 1])), None);
        assert_eq!(match_success_policy(Some(&p), 5, &set(&[0, 1, 4])), Some("Matched rules at index 0".into()));
    }

    #[test]
    fn a_count_rule_is_met_by_any_indexes_and_the_first_rule_met_is_named() {
        let p = policy(&[(Some("4"), None), (None, Some(2))]);
        assert_eq!(match_success_policy(Some(&p), 5, &set(&[0, 3])), Some("Matched rules at index 1".into()));
    }

    #[test]
    fn no_policy_or_no_success_matches_nothing() {
        assert_eq!(match_success_policy(None, 5, &set(&[0])), None);
        assert_eq!(match_success_policy(Some(&policy(&[(None, Some(0))])), 5, &set(&[])), None);
    }
}
