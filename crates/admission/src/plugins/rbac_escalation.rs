//! RBAC privilege-escalation prevention as a validating plugin: creates and updates of Roles,
//! ClusterRoles, RoleBindings and ClusterRoleBindings go through
//! [`RbacAuthorizer::check_rbac_write`] (Kubernetes runs the same check in the RBAC registry's
//! storage, <https://kubernetes.io/docs/reference/access-authn-authz/rbac/#privilege-escalation-prevention-and-bootstrapping>).
//! Requests without a user (the API server's own bootstrap writes) are not checked.

use std::sync::Arc;

use async_trait::async_trait;
use skiff_apimachinery::ApiError;

use crate::{AdmissionRequest, Feedback, Operation, ValidatingAdmission};
use skiff_auth::rbac::{RBAC_GROUP, RbacAuthorizer, RbacKind};

/// The plugin.
pub struct RbacEscalation {
    rbac: Arc<RbacAuthorizer>,
}

impl RbacEscalation {
    /// The plugin over the authorizer's snapshot.
    pub fn new(rbac: Arc<RbacAuthorizer>) -> Self {
        Self { rbac }
    }
}

#[async_trait]
impl ValidatingAdmission for RbacEscalation {
    fn name(&self) -> &str {
        "RBACEscalation"
    }

    async fn validate(&self, req: &AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        if req.resource.group != RBAC_GROUP
            || !req.sub_resource.is_empty()
            || !matches!(req.op(), Operation::Create | Operation::Update)
            || req.user.name.is_empty()
        {
            return Ok(());
        }
        let Some(kind) = RbacKind::from_resource(&req.resource.resource) else { return Ok(()) };
        let Some(obj) = &req.object else { return Ok(()) };
        self.rbac.check_rbac_write(&req.user, kind, &req.namespace, obj, req.old_object.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use skiff_auth::UserInfo;

    #[tokio::test]
    async fn role_writes_are_checked_for_escalation() {
        let rbac = Arc::new(RbacAuthorizer::new());
        let plugin = RbacEscalation::new(rbac);
        let mut req = AdmissionRequest::new(Operation::Create, RBAC_GROUP, "v1", "clusterroles", "ClusterRole");
        req.object = Some(
            json!({"metadata": {"name": "all"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        );
        req.user = UserInfo::new("jane", ["system:authenticated"]);
        let e = plugin.validate(&req, &mut Feedback::default()).await.unwrap_err();
        assert!(
            e.message.starts_with(r#"clusterroles.rbac.authorization.k8s.io "all" is forbidden: user "jane""#),
            "{}",
            e.message
        );
        req.user = UserInfo::new("admin", ["system:masters"]);
        plugin.validate(&req, &mut Feedback::default()).await.unwrap();
        req.user = UserInfo::default();
        plugin.validate(&req, &mut Feedback::default()).await.unwrap();
    }
}
