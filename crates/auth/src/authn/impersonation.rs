//! User impersonation (<https://kubernetes.io/docs/reference/access-authn-authz/authentication/#user-impersonation>),
//! as `kubectl --as jane --as-group dev` sends it: `Impersonate-User`, `Impersonate-Group`
//! (repeatable), `Impersonate-Uid` and `Impersonate-Extra-<key>` headers. Each impersonated
//! attribute is itself authorized with the verb `impersonate`: `users` (or `serviceaccounts` in
//! the account's namespace for `system:serviceaccount:<ns>:<name>`) and `groups` in the core
//! group, `uids` and `userextras/<key>` in `authentication.k8s.io`. Runs right after
//! authentication; the impersonated user then replaces the requester for everything after.

use std::collections::BTreeMap;

use hyper::HeaderMap;
use skiff_apimachinery::ApiError;

use crate::rbac::{Attributes, Authorizer, forbidden};
use crate::user::{self, ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, UserInfo};

/// `Impersonate-User`.
pub const IMPERSONATE_USER: &str = "impersonate-user";
/// `Impersonate-Group` (repeatable).
pub const IMPERSONATE_GROUP: &str = "impersonate-group";
/// `Impersonate-Uid`.
pub const IMPERSONATE_UID: &str = "impersonate-uid";
/// Prefix of `Impersonate-Extra-<key>` headers (key percent-encoded).
pub const IMPERSONATE_EXTRA_PREFIX: &str = "impersonate-extra-";

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the request carries any `Impersonate-*` header.
pub fn has_impersonation_headers(headers: &HeaderMap) -> bool {
    headers.keys().any(|k| k.as_str().starts_with("impersonate-"))
}

/// Removes every `Impersonate-*` header (after [`impersonate`], so nothing downstream sees them).
pub fn strip_impersonation_headers(headers: &mut HeaderMap) {
    let keys: Vec<_> = headers.keys().filter(|k| k.as_str().starts_with("impersonate-")).cloned().collect();
    for k in keys {
        headers.remove(k);
    }
}

/// Applies impersonation headers: `Ok(None)` without them, `Ok(Some(user))` with the
/// impersonated user when `requester` may impersonate every requested attribute.
///
/// # Errors
/// 403 Forbidden in Kubernetes' wording (`users "jane" is forbidden: User "bob" cannot
/// impersonate resource "users" in API group "" at the cluster scope`); 500 when groups, uid or
/// extras are requested without a user (as kube-apiserver answers).
pub fn impersonate(
    requester: &UserInfo,
    headers: &HeaderMap,
    authorizer: &dyn Authorizer,
) -> Result<Option<UserInfo>, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).map(|v| v.trim().to_string()).collect()
    };
    let user_name = values(IMPERSONATE_USER).into_iter().next();
    let groups = values(IMPERSONATE_GROUP);
    let uid = values(IMPERSONATE_UID).into_iter().next();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in headers {
        if let Some(key) = k.as_str().strip_prefix(IMPERSONATE_EXTRA_PREFIX)
            && let Ok(v) = v.to_str()
        {
            extra.entry(percent_decode(key).to_lowercase()).or_default().push(v.trim().to_string());
        }
    }
    let Some(user_name) = user_name else {
        if groups.is_empty() && uid.is_none() && extra.is_empty() {
            return Ok(None);
        }
        return Err(ApiError::internal(
            "Internal error occurred: requested impersonation of groups, uid or extra without impersonating a user",
        ));
    };
    let check = |attrs: Attributes<'_>| -> Result<(), ApiError> {
        let d = authorizer.authorize(&attrs);
        if d.allowed { Ok(()) } else { Err(forbidden(&attrs, &d.reason)) }
    };
    let mut out_groups = Vec::new();
    if let Some((ns, sa)) = user::split_service_account_username(&user_name) {
        check(Attributes::resource(requester, "impersonate", "", "serviceaccounts", ns, sa))?;
        if groups.is_empty() {
            out_groups = user::service_account_groups(ns);
        }
    } else {
        check(Attributes::resource(requester, "impersonate", "", "users", "", &user_name))?;
    }
    for g in &groups {
        check(Attributes::resource(requester, "impersonate", "", "groups", "", g))?;
        out_groups.push(g.clone());
    }
    for (key, vals) in &extra {
        for v in vals {
            check(
                Attributes::resource(requester, "impersonate", "authentication.k8s.io", "userextras", "", v)
                    .with_subresource(key),
            )?;
        }
    }
    if let Some(uid) = &uid {
        check(Attributes::resource(requester, "impersonate", "authentication.k8s.io", "uids", "", uid))?;
    }
    if user_name == ANONYMOUS {
        if !out_groups.iter().any(|g| g == ALL_UNAUTHENTICATED) {
            out_groups.push(ALL_UNAUTHENTICATED.into());
        }
    } else if !out_groups.iter().any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED) {
        out_groups.push(ALL_AUTHENTICATED.into());
    }
    Ok(Some(UserInfo { name: user_name, uid: uid.unwrap_or_default(), groups: out_groups, extra }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::rbac::RbacAuthorizer;

    fn authorizer() -> RbacAuthorizer {
        let a = RbacAuthorizer::new();
        a.apply(&json!({"kind": "ClusterRole", "metadata": {"name": "impersonate-jane"},
            "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["jane"]},
                      {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"], "resourceNames": ["dev"]},
                      {"apiGroups": ["authentication.k8s.io"], "resources": ["userextras/scopes"], "verbs": ["impersonate"]}]}))
        .unwrap();
        a.apply(&json!({"kind": "ClusterRoleBinding", "metadata": {"name": "bob"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "impersonate-jane"},
            "subjects": [{"kind": "User", "name": "bob"}]}))
            .unwrap();
        a.apply(&json!({"kind": "Role", "metadata": {"name": "sa", "namespace": "ci"},
            "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}]}))
            .unwrap();
        a.apply(&json!({"kind": "RoleBinding", "metadata": {"name": "bob-sa", "namespace": "ci"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sa"},
            "subjects": [{"kind": "User", "name": "bob"}]}))
            .unwrap();
        a
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn impersonation_swaps_the_user_when_authorized() {
        let a = authorizer();
        let bob = UserInfo::new("bob", ["system:authenticated"]);
        assert_eq!(impersonate(&bob, &HeaderMap::new(), &a).unwrap(), None);
        let u = impersonate(&bob, &headers(&[("Impersonate-User", "jane")]), &a).unwrap().unwrap();
        assert_eq!(u, UserInfo::new("jane", ["system:authenticated"]));
        let h = headers(&[
            ("Impersonate-User", "jane"),
            ("Impersonate-Group", "dev"),
            ("Impersonate-Extra-Scopes", "view"),
        ]);
        let u = impersonate(&bob, &h, &a).unwrap().unwrap();
        assert_eq!(u.groups, vec!["dev", "system:authenticated"]);
        assert_eq!(u.extra["scopes"], vec!["view"]);
        let sa = impersonate(&bob, &headers(&[("Impersonate-User", "system:serviceaccount:ci:builder")]), &a)
            .unwrap()
            .unwrap();
        assert_eq!(sa.groups, vec!["system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated"]);
    }

    #[test]
    fn unauthorized_impersonation_is_forbidden_in_kubernetes_wording() {
        let a = authorizer();
        let bob = UserInfo::new("bob", ["system:authenticated"]);
        let cases = [
            (
                vec![("Impersonate-User", "admin")],
                r#"users "admin" is forbidden: User "bob" cannot impersonate resource "users" in API group "" at the cluster scope"#,
            ),
            (
                vec![("Impersonate-User", "jane"), ("Impersonate-Group", "system:masters")],
                r#"groups "system:masters" is forbidden: User "bob" cannot impersonate resource "groups" in API group "" at the cluster scope"#,
            ),
            (
                vec![("Impersonate-User", "system:serviceaccount:prod:deployer")],
                r#"serviceaccounts "deployer" is forbidden: User "bob" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "prod""#,
            ),
            (
                vec![("Impersonate-User", "jane"), ("Impersonate-Uid", "1234")],
                r#"uids.authentication.k8s.io "1234" is forbidden: User "bob" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope"#,
            ),
        ];
        for (h, want) in cases {
            let e = impersonate(&bob, &headers(&h), &a).unwrap_err();
            assert_eq!(e.code, 403);
            assert_eq!(e.message, want);
        }
        let e = impersonate(&bob, &headers(&[("Impersonate-Group", "dev")]), &a).unwrap_err();
        assert_eq!(e.code, 500);
    }

    #[test]
    fn impersonation_headers_are_stripped() {
        let mut h = headers(&[("Impersonate-User", "jane"), ("Impersonate-Extra-a%2Fb", "x"), ("Accept", "*/*")]);
        assert!(has_impersonation_headers(&h));
        strip_impersonation_headers(&mut h);
        assert!(!has_impersonation_headers(&h));
        assert_eq!(h.len(), 1);
        assert_eq!(percent_decode("a%2Fb%zz"), "a/b%zz");
    }
}
