//! Aggregated ClusterRoles
//! (<https://kubernetes.io/docs/reference/access-authn-authz/rbac/#aggregated-clusterroles>).
//!
//! A ClusterRole with an `aggregationRule` gets, as its `rules`, the union of the rules of every
//! other ClusterRole whose labels match one of its `clusterRoleSelectors` (ClusterRoles in name
//! order, duplicate rules once). As in Kubernetes the authorizer only reads stored `rules`: a
//! controller (the cluster-role-aggregation controller, `skiff-controllers`'
//! `clusterroleaggregation`) computes them with [`aggregate_rules`] and writes them back through
//! the API.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use skiff_apimachinery::LabelSelector;
use std::collections::BTreeMap;

/// The rules `target` should hold given every ClusterRole in `all`; `Ok(None)` when `target`
/// has no aggregation rule.
///
/// # Errors
/// A selector that is not a valid label selector.
pub fn aggregate_rules<'a>(
    target: &ClusterRole,
    all: impl IntoIterator<Item = &'a ClusterRole>,
) -> Result<Option<Vec<PolicyRule>>, String> {
    let Some(agg) = &target.aggregation_rule else { return Ok(None) };
    let selectors =
        agg.cluster_role_selectors.iter().flatten().map(LabelSelector::from_metav1).collect::<Result<Vec<_>, _>>()?;
    let target_name = target.metadata.name.as_deref().unwrap_or_default();
    let mut matched: BTreeMap<&str, &ClusterRole> = BTreeMap::new();
    for role in all {
        let name = role.metadata.name.as_deref().unwrap_or_default();
        if name == target_name {
            continue;
        }
        let labels = role.metadata.labels.clone().unwrap_or_default();
        // An empty selector list matches nothing; an empty selector matches everything.
        if selectors.iter().any(|s| s.matches(&labels)) {
            matched.insert(name, role);
        }
    }
    let mut rules: Vec<PolicyRule> = Vec::new();
    for role in matched.values() {
        for r in role.rules.iter().flatten() {
            if !rules.contains(r) {
                rules.push(r.clone());
            }
        }
    }
    Ok(Some(rules))
}

/// Computes aggregation for a set of ClusterRoles repeatedly until nothing changes (aggregated
/// roles may feed other aggregated roles, e.g. view → edit → admin), returning the updated set.
pub fn aggregate_to_fixed_point(mut roles: Vec<ClusterRole>) -> Vec<ClusterRole> {
    for _ in 0..16 {
        let mut changed = false;
        for i in 0..roles.len() {
            if let Ok(Some(rules)) = aggregate_rules(&roles[i], roles.iter())
                && roles[i].rules.as_ref() != Some(&rules)
            {
                roles[i].rules = Some(rules);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    roles
}
