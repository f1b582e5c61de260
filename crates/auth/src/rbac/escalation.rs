//! Privilege-escalation prevention for RBAC writes
//! (<https://kubernetes.io/docs/reference/access-authn-authz/rbac/#privilege-escalation-prevention-and-bootstrapping>).
//!
//! A user may create or update a Role/ClusterRole only if they already hold every permission it
//! grants (in the role's namespace, or cluster-wide for a ClusterRole) or may `escalate` on it;
//! setting an `aggregationRule` needs full authority. A user may create or update a
//! RoleBinding/ClusterRoleBinding only if they hold every permission of the referenced role, or
//! may `bind` it. Members of `system:masters` may do anything. This is Kubernetes'
//! `ConfirmNoEscalation` / `Covers`: each granted rule is broken down into single
//! (verb, group, resource, name) or (verb, URL) rules, and each must be covered by one of the
//! user's rules.

use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use serde_json::Value;
use skiff_apimachinery::ApiError;

use super::rules::{API_GROUP_ALL, RESOURCE_ALL, VERB_ALL, list};
use super::{Attributes, RBAC_GROUP, RbacAuthorizer, RbacKind};
use crate::user::{SYSTEM_MASTERS, UserInfo};

/// The rules of `cluster-admin`: every verb on every resource of every group, and every verb on
/// every non-resource URL.
pub fn full_authority() -> Vec<PolicyRule> {
    vec![
        PolicyRule {
            verbs: vec![VERB_ALL.into()],
            api_groups: Some(vec![API_GROUP_ALL.into()]),
            resources: Some(vec![RESOURCE_ALL.into()]),
            ..Default::default()
        },
        PolicyRule { verbs: vec![VERB_ALL.into()], non_resource_urls: Some(vec!["*".into()]), ..Default::default() },
    ]
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

fn has_all(set: &[String], items: &[String]) -> bool {
    items.iter().all(|i| has(set, i))
}

/// Splits a rule into rules with one verb and one group/resource/name, or one verb and one URL
/// (`BreakdownRule`).
pub fn breakdown_rule(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let one = |s: &String| Some(vec![s.clone()]);
    for group in list(&rule.api_groups) {
        for resource in list(&rule.resources) {
            for verb in &rule.verbs {
                let names = list(&rule.resource_names);
                if names.is_empty() {
                    out.push(PolicyRule {
                        verbs: vec![verb.clone()],
                        api_groups: one(group),
                        resources: one(resource),
                        ..Default::default()
                    });
                }
                for name in names {
                    out.push(PolicyRule {
                        verbs: vec![verb.clone()],
                        api_groups: one(group),
                        resources: one(resource),
                        resource_names: one(name),
                        ..Default::default()
                    });
                }
            }
        }
    }
    for url in list(&rule.non_resource_urls) {
        for verb in &rule.verbs {
            out.push(PolicyRule { verbs: vec![verb.clone()], non_resource_urls: one(url), ..Default::default() });
        }
    }
    out
}

fn resource_covers_all(owner: &[String], requested: &[String]) -> bool {
    if has(owner, RESOURCE_ALL) || has_all(owner, requested) {
        return true;
    }
    requested.iter().all(|path| {
        if has(owner, path) {
            return true;
        }
        match path.split_once('/') {
            Some((_, sub)) => has(owner, &format!("*/{sub}")),
            None => false,
        }
    })
}

fn non_resource_url_covers(owner: &str, sub: &str) -> bool {
    owner == sub || owner.strip_suffix('*').is_some_and(|p| sub.starts_with(p.trim_end_matches('*')))
}

/// Whether `owner` covers every permission of `sub` (`ruleCovers`).
pub fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, VERB_ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups = has(list(&owner.api_groups), API_GROUP_ALL) || has_all(list(&owner.api_groups), list(&sub.api_groups));
    let resources = resource_covers_all(list(&owner.resources), list(&sub.resources));
    let urls = list(&sub.non_resource_urls)
        .iter()
        .all(|p| list(&owner.non_resource_urls).iter().any(|o| non_resource_url_covers(o, p)));
    let owner_names = list(&owner.resource_names);
    let names = if list(&sub.resource_names).is_empty() {
        owner_names.is_empty()
    } else {
        owner_names.is_empty() || has_all(owner_names, list(&sub.resource_names))
    };
    verbs && groups && resources && urls && names
}

/// Whether `owner` rules cover every rule of `requested`; the uncovered single rules otherwise
/// (`Covers`).
pub fn covers(owner: &[PolicyRule], requested: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let mut missing = Vec::new();
    for rule in requested {
        for simple in breakdown_rule(rule) {
            if !owner.iter().any(|o| rule_covers(o, &simple)) {
                missing.push(simple);
            }
        }
    }
    (missing.is_empty(), missing)
}

/// Merges single rules that differ only by verb (`CompactRules`).
pub fn compact_rules(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    let mut index: std::collections::HashMap<(String, String), usize> = std::collections::HashMap::new();
    for r in rules {
        let simple = list(&r.api_groups).len() == 1
            && list(&r.resources).len() == 1
            && list(&r.resource_names).is_empty()
            && list(&r.non_resource_urls).is_empty();
        if simple {
            let key = (list(&r.api_groups)[0].clone(), list(&r.resources)[0].clone());
            if let Some(&i) = index.get(&key) {
                for v in &r.verbs {
                    if !has(&out[i].verbs, v) {
                        out[i].verbs.push(v.clone());
                    }
                }
                continue;
            }
            index.insert(key, out.len());
        }
        out.push(r.clone());
    }
    out
}

fn go_quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// A rule as Kubernetes prints it in escalation errors (`CompactString`):
/// `{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`.
pub fn compact_string(r: &PolicyRule) -> String {
    let mut parts = Vec::new();
    for (label, field) in [
        ("APIGroups", list(&r.api_groups)),
        ("Resources", list(&r.resources)),
        ("NonResourceURLs", list(&r.non_resource_urls)),
        ("ResourceNames", list(&r.resource_names)),
        ("Verbs", &r.verbs[..]),
    ] {
        if !field.is_empty() {
            parts.push(format!("{label}:{}", go_quote_list(field)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

impl RbacAuthorizer {
    /// `ConfirmNoEscalation`: `Ok` when `user` holds every permission of `rules` in `namespace`
    /// ("" = cluster-wide).
    ///
    /// # Errors
    /// Kubernetes' message: `user "jane" (groups=["system:authenticated"]) is attempting to
    /// grant RBAC permissions not currently held:` followed by one compact rule per line.
    pub fn confirm_no_escalation(&self, user: &UserInfo, namespace: &str, rules: &[PolicyRule]) -> Result<(), String> {
        if user.in_group(SYSTEM_MASTERS) {
            return Ok(());
        }
        let owner = self.rules_for(user, namespace);
        let (ok, missing) = covers(&owner.rules, rules);
        if ok {
            return Ok(());
        }
        let mut lines: Vec<String> = compact_rules(&missing).iter().map(compact_string).collect();
        lines.sort();
        lines.dedup();
        let mut msg = format!(
            "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            go_quote_list(&user.groups),
            lines.join("\n")
        );
        if !owner.errors.is_empty() {
            msg.push_str(&format!("; resolution errors: [{}]", owner.errors.join(" ")));
        }
        Err(msg)
    }

    fn allowed(&self, user: &UserInfo, verb: &str, resource: &str, namespace: &str, name: &str) -> bool {
        self.authorize(&Attributes::resource(user, verb, RBAC_GROUP, resource, namespace, name)).allowed
    }

    /// `BindingAuthorized`: whether `user` may `bind` the role `role_ref` names in a binding in
    /// `binding_namespace` ("" for ClusterRoleBindings).
    pub fn binding_authorized(&self, user: &UserInfo, role_ref: &RoleRef, binding_namespace: &str) -> bool {
        let resource = match role_ref.kind.as_str() {
            "ClusterRole" => "clusterroles",
            "Role" => "roles",
            _ => return false,
        };
        self.allowed(user, "bind", resource, binding_namespace, &role_ref.name)
    }

    /// The escalation check the API server runs before persisting a create or update of a Role,
    /// ClusterRole, RoleBinding or ClusterRoleBinding (the RBAC registry's policy-based storage).
    /// `namespace` is the request's namespace, `old` the current object on update. Updates that
    /// change only garbage-collection fields (ownerReferences, finalizers) are always allowed.
    ///
    /// # Errors
    /// 403 Forbidden in Kubernetes' wording, e.g. `clusterroles.rbac.authorization.k8s.io "x" is
    /// forbidden: user "jane" (groups=[…]) is attempting to grant RBAC permissions not currently
    /// held: …`; 400 when the object does not decode.
    pub fn check_rbac_write(
        &self,
        user: &UserInfo,
        kind: RbacKind,
        namespace: &str,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if user.in_group(SYSTEM_MASTERS) {
            return Ok(());
        }
        if old.is_some_and(|old| only_gc_fields_changed(old, obj)) {
            return Ok(());
        }
        let resource = kind.resource();
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let ns = if matches!(kind, RbacKind::Role | RbacKind::RoleBinding) { namespace } else { "" };
        let forbidden = |msg: &str| ApiError::forbidden(RBAC_GROUP, resource, name, msg);
        let decoded = super::RbacObject::from_value_as(kind, obj).map_err(ApiError::bad_request)?;
        match decoded {
            super::RbacObject::Role(r) => {
                if self.allowed(user, "escalate", resource, ns, name) {
                    return Ok(());
                }
                self.confirm_no_escalation(user, ns, list_rules(&r.rules)).map_err(|m| forbidden(&m))
            }
            super::RbacObject::ClusterRole(r) => {
                if self.allowed(user, "escalate", resource, "", name) {
                    return Ok(());
                }
                self.confirm_no_escalation(user, "", list_rules(&r.rules)).map_err(|m| forbidden(&m))?;
                let old_rule = old.map(|o| o.get("aggregationRule").cloned().unwrap_or(Value::Null));
                let new_rule = obj.get("aggregationRule").cloned().unwrap_or(Value::Null);
                if r.aggregation_rule.is_some()
                    && old_rule.as_ref() != Some(&new_rule)
                    && self.confirm_no_escalation(user, "", &full_authority()).is_err()
                {
                    return Err(forbidden("must have cluster-admin privileges to use the aggregationRule"));
                }
                Ok(())
            }
            super::RbacObject::RoleBinding(b) => {
                if self.binding_authorized(user, &b.role_ref, ns) {
                    return Ok(());
                }
                let rules = self.role_reference_rules(&b.role_ref, ns).map_err(|m| forbidden(&m))?;
                self.confirm_no_escalation(user, ns, &rules).map_err(|m| forbidden(&m))
            }
            super::RbacObject::ClusterRoleBinding(b) => {
                if self.binding_authorized(user, &b.role_ref, "") {
                    return Ok(());
                }
                let rules = self.role_reference_rules(&b.role_ref, "").map_err(|m| forbidden(&m))?;
                self.confirm_no_escalation(user, "", &rules).map_err(|m| forbidden(&m))
            }
        }
    }
}

fn list_rules(r: &Option<Vec<PolicyRule>>) -> &[PolicyRule] {
    r.as_deref().unwrap_or(&[])
}

/// Whether `new` differs from `old` only in `metadata.ownerReferences`/`finalizers` (and the
/// server-managed `resourceVersion`, `managedFields`, `generation`) — `IsOnlyMutatingGCFields`.
pub fn only_gc_fields_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in ["ownerReferences", "finalizers", "resourceVersion", "managedFields", "generation"] {
                m.remove(k);
            }
        }
        v
    };
    strip(old) == strip(new)
}
