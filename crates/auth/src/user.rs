//! [`UserInfo`]: the authenticated identity of a request (Kubernetes' `user.Info`), and the
//! well-known user and group names (<https://kubernetes.io/docs/reference/access-authn-authz/authentication/#users-in-kubernetes>).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The superuser group: members are allowed everything, without consulting RBAC
/// (kube-apiserver's `system:masters`).
pub const SYSTEM_MASTERS: &str = "system:masters";
/// Added to every authenticated user's groups.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user name of anonymous requests.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of every service account.
pub const ALL_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
/// Prefix of service-account user names: `system:serviceaccount:<namespace>:<name>`.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// The group of every node (kubelet) identity.
pub const NODES_GROUP: &str = "system:nodes";
/// Prefix of node user names: `system:node:<node name>`.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group of `skiff agent --simulated-nodes` identities (user
/// `system:skiff:simulated-node-agent:<name>`): many simulated nodes under one credential, so
/// not a node identity; bound to the ClusterRole of the same name as
/// [`SIMULATED_NODE_AGENTS_GROUP_ROLE`].
pub const SIMULATED_NODE_AGENTS_GROUP: &str = "system:skiff:simulated-node-agents";
/// The ClusterRole (and ClusterRoleBinding) of [`SIMULATED_NODE_AGENTS_GROUP`].
pub const SIMULATED_NODE_AGENTS_GROUP_ROLE: &str = "system:skiff:simulated-node-agent";
/// Prefix of simulated-node agent user names: `system:skiff:simulated-node-agent:<name>`.
pub const SIMULATED_NODE_AGENT_PREFIX: &str = "system:skiff:simulated-node-agent:";
/// The user skiff's scheduler runs as (kube-scheduler's identity).
pub const KUBE_SCHEDULER: &str = "system:kube-scheduler";
/// The user skiff's controller manager runs as (kube-controller-manager's identity).
pub const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
/// The user a kube-proxy-like component runs as.
pub const KUBE_PROXY: &str = "system:kube-proxy";

/// `user.Info`: who made a request. `extra` carries authenticator-specific facts
/// (e.g. `authentication.kubernetes.io/pod-name` for service-account tokens bound to a pod).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UserInfo {
    /// User name, e.g. `jane`, `system:admin`, `system:serviceaccount:default:builder`.
    pub name: String,
    /// A unique identifier that survives renames ("" when the authenticator has none).
    #[serde(default)]
    pub uid: String,
    /// Groups, e.g. `system:authenticated`.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra attributes by key.
    #[serde(default)]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups, no uid and no extra.
    pub fn new(name: impl Into<String>, groups: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self { name: name.into(), groups: groups.into_iter().map(Into::into).collect(), ..Default::default() }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Adds `group` unless already present.
    pub fn add_group(&mut self, group: &str) {
        if !self.in_group(group) {
            self.groups.push(group.to_string());
        }
    }

    /// The anonymous user: `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        Self::new(ANONYMOUS, [ALL_UNAUTHENTICATED])
    }

    /// `(namespace, name)` when this is a service account's user name.
    pub fn service_account(&self) -> Option<(&str, &str)> {
        split_service_account_username(&self.name)
    }

    /// The `authentication.k8s.io/v1` `UserInfo` JSON (`username`, `uid`, `groups`, `extra`), as
    /// AdmissionReview, SubjectAccessReview and SelfSubjectReview carry it.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({ "username": self.name });
        if !self.uid.is_empty() {
            v["uid"] = self.uid.clone().into();
        }
        if !self.groups.is_empty() {
            v["groups"] = self.groups.clone().into();
        }
        if !self.extra.is_empty() {
            v["extra"] = serde_json::to_value(&self.extra).unwrap_or_default();
        }
        v
    }
}

/// `system:serviceaccount:<namespace>:<name>` (Kubernetes' `serviceaccount.MakeUsername`).
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")
}

/// The groups of a service account: `system:serviceaccounts` and
/// `system:serviceaccounts:<namespace>` (`serviceaccount.MakeGroupNames`).
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![ALL_SERVICE_ACCOUNTS.to_string(), format!("{ALL_SERVICE_ACCOUNTS}:{namespace}")]
}

/// Splits `system:serviceaccount:<namespace>:<name>` into `(namespace, name)`; `None` for any
/// other name or when a part is empty or contains `:`.
pub fn split_service_account_username(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (ns, name) = rest.split_once(':')?;
    if ns.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some((ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_usernames_split_into_namespace_and_name() {
        let u = service_account_username("kube-system", "builder");
        assert_eq!(u, "system:serviceaccount:kube-system:builder");
        assert_eq!(split_service_account_username(&u), Some(("kube-system", "builder")));
        for bad in [
            "system:serviceaccount:",
            "system:serviceaccount:ns",
            "system:serviceaccount::n",
            "jane",
            "system:serviceaccount:a:b:c",
        ] {
            assert_eq!(split_service_account_username(bad), None, "{bad}");
        }
    }

    #[test]
    fn user_info_json_omits_empty_fields() {
        let u = UserInfo::new("jane", ["dev"]);
        assert_eq!(u.to_json(), serde_json::json!({"username": "jane", "groups": ["dev"]}));
    }
}
