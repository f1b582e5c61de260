//! Node authorization: a kubelet (user `system:node:<name>` in group `system:nodes`) may act
//! only on its own Node and Lease, on the pods bound to it, and may read only the secrets,
//! configmaps, persistent volume claims, persistent volumes and service accounts those pods use.
//!
//! - [`graph::NodeGraph`]: which node each bound pod is on and what the pod references
//!   (Kubernetes keeps a persistent graph of vertices and edges; skiff keeps the same relation
//!   as an index fed from the API server's pod and PersistentVolumeClaim watch caches, answered
//!   in memory at decision time);
//! - [`authorizer::NodeAuthorizer`]: kube-apiserver's `Node` authorization mode
//!   (<https://kubernetes.io/docs/reference/access-authn-authz/node/>), put before RBAC
//!   (`--authorization-mode=Node,RBAC`); it allows or has no opinion, never denies.
//!
//! What a node may write is limited further by the NodeRestriction admission plugin
//! (`skiff-admission`'s `plugins::node_restriction`), which reads the same graph and
//! [`node_identity`].

pub mod authorizer;
pub mod graph;

use crate::user::{NODE_USER_PREFIX, NODES_GROUP, UserInfo};

/// The namespace of node heartbeat Leases (`kube-node-lease`).
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The node a user is (Kubernetes' `nodeidentifier.NodeIdentity`): `Some(name)` when the user
/// is in `system:nodes` and named `system:node:<name>` (the name may be empty: such a user is a
/// node of unknown name, which every node rule refuses); `None` for any other user.
pub fn node_identity(user: &UserInfo) -> Option<&str> {
    if !user.in_group(NODES_GROUP) {
        return None;
    }
    user.name.strip_prefix(NODE_USER_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_identity_needs_both_the_group_and_the_user_name_prefix() {
        assert_eq!(node_identity(&UserInfo::new("system:node:a", ["system:nodes"])), Some("a"));
        assert_eq!(node_identity(&UserInfo::new("system:node:", ["system:nodes"])), Some(""));
        assert_eq!(node_identity(&UserInfo::new("system:node:a", ["system:authenticated"])), None);
        assert_eq!(node_identity(&UserInfo::new("jane", ["system:nodes"])), None);
    }
}
