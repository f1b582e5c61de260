//! Aggregated ClusterRoles
//! (<https://kubernetes.io/docs/reference/access-authn-authz/rbac/#aggregated-clusterroles>).
//!
//! A ClusterRole with an `aggregationRule` gets, as its `rules`, the union of the rules of every
//! other ClusterRole whose labels match one of its `clusterRoleSelectors` (ClusterRoles in name
//! order, duplicate rules once). As in Kubernetes the authorizer only reads stored `rules`: a
//! controller (the cluster-role-aggregation controller) computes them with [`aggregate_rules`]
//! or [`RbacAuthorizer::aggregation_updates`] and writes them back through the API.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use skiff_apimachinery::LabelSelector;

use super::RbacAuthorizer;

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

impl RbacAuthorizer {
    /// The aggregated ClusterRoles whose stored rules differ from what their aggregation rule
    /// computes now, with the new rules set: what the aggregation controller should write back
    /// (each write comes back as a watch event and may trigger the next round).
    pub fn aggregation_updates(&self) -> Vec<ClusterRole> {
        let roles: Vec<Arc<ClusterRole>> = self.cluster_roles();
        let mut out = Vec::new();
        for target in roles.iter().filter(|r| r.aggregation_rule.is_some()) {
            match aggregate_rules(target, roles.iter().map(|r| r.as_ref())) {
                Ok(Some(rules)) if target.rules.as_ref() != Some(&rules) => {
                    let mut updated = ClusterRole::clone(target);
                    updated.rules = Some(rules);
                    out.push(updated);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    role = target.metadata.name.as_deref().unwrap_or_default(),
                    "invalid aggregation rule: {e}"
                ),
            }
        }
        out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        out
    }
}
