//! Role-based access control, exactly as Kubernetes defines it
//! (<https://kubernetes.io/docs/reference/access-authn-authz/rbac/>).
//!
//! [`RbacAuthorizer`] holds an in-memory snapshot of every Role, ClusterRole, RoleBinding and
//! ClusterRoleBinding, kept current from watch events ([`RbacAuthorizer::apply`] /
//! [`RbacAuthorizer::remove`]), with bindings indexed by subject (user name, group name; service
//! accounts by their user name) so one decision only looks at the bindings that can apply to the
//! requesting user. Default deny: a request no rule allows gets [`Decision::allowed`] = false.
//! Members of `system:masters` are always allowed, like kube-apiserver's privileged-group
//! authorizer.
//!
//! - [`rules`]: matching one `PolicyRule`;
//! - [`escalation`]: `escalate`/`bind` and the "may only grant what you hold" check;
//! - [`aggregation`]: aggregated ClusterRoles;
//! - [`bootstrap`]: the default roles and bindings created at startup;
//! - [`reviews`]: (Self|Local)SubjectAccessReview and SelfSubjectRulesReview;
//! - `bench` (behind the `testing` feature): the decision-time benchmark `skiff bench
//!   authorization` runs.

pub mod aggregation;
#[cfg(any(test, feature = "testing"))]
pub mod bench;
pub mod bootstrap;
pub mod escalation;
pub mod reviews;
pub mod rules;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use parking_lot::RwLock;
use serde_json::Value;
use skiff_apimachinery::ApiError;

use crate::user::{self, UserInfo};

/// The RBAC API group.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The attributes of one request that authorization looks at (`authorizer.Attributes`).
///
/// A resource request names a verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
/// `delete`, `deletecollection`, or a special verb such as `impersonate`, `bind`, `escalate`,
/// `use`), an API group, a resource (plural, lower case), optionally a subresource, a namespace
/// ("" for cluster-scoped resources and cluster-wide lists) and a name ("" for list, watch of a
/// collection, create without a name, deletecollection). A non-resource request has a lower-case
/// HTTP verb (`get`, `post`, `put`, `delete`, …) and a path.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// The requesting user.
    pub user: &'a UserInfo,
    /// The verb.
    pub verb: &'a str,
    /// `true` for API resource requests, `false` for non-resource paths.
    pub resource_request: bool,
    /// API group ("" = core).
    pub api_group: &'a str,
    /// Resource, e.g. `pods`.
    pub resource: &'a str,
    /// Subresource, e.g. `log`, or "".
    pub subresource: &'a str,
    /// Namespace, or "".
    pub namespace: &'a str,
    /// Object name, or "".
    pub name: &'a str,
    /// Request path (non-resource requests).
    pub path: &'a str,
}

impl<'a> Attributes<'a> {
    /// A resource request.
    pub fn resource(
        user: &'a UserInfo,
        verb: &'a str,
        api_group: &'a str,
        resource: &'a str,
        namespace: &'a str,
        name: &'a str,
    ) -> Self {
        Self { user, verb, resource_request: true, api_group, resource, subresource: "", namespace, name, path: "" }
    }

    /// A non-resource request for `path`.
    pub fn non_resource(user: &'a UserInfo, verb: &'a str, path: &'a str) -> Self {
        Self {
            user,
            verb,
            resource_request: false,
            api_group: "",
            resource: "",
            subresource: "",
            namespace: "",
            name: "",
            path,
        }
    }

    /// The same request on a subresource.
    pub fn with_subresource(mut self, subresource: &'a str) -> Self {
        self.subresource = subresource;
        self
    }
}

/// The outcome of an authorization check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// Why: for an allowed request which binding allowed it
    /// (`RBAC: allowed by RoleBinding "jane-pods/default" of Role "pod-reader" to User "jane"`);
    /// for a denied one, errors met while evaluating (a binding to a missing role), else "".
    pub reason: String,
}

impl Decision {
    fn allow(reason: String) -> Self {
        Self { allowed: true, reason }
    }
}

/// Anything that decides whether a request is allowed (`authorizer.Authorizer`).
pub trait Authorizer: Send + Sync {
    /// Decides one request.
    fn authorize(&self, attrs: &Attributes<'_>) -> Decision;
}

/// The Forbidden answer for a denied request, in kube-apiserver's wording:
/// `pods "nginx" is forbidden: User "jane" cannot delete resource "pods" in API group "" in the namespace "default"`,
/// `… at the cluster scope` for cluster-scoped requests, and
/// `forbidden: User "jane" cannot get path "/metrics"` for non-resource requests. A non-empty
/// `reason` is appended after `: `.
pub fn forbidden(attrs: &Attributes<'_>, reason: &str) -> ApiError {
    let mut msg = forbidden_message(attrs);
    if !reason.is_empty() {
        msg.push_str(": ");
        msg.push_str(reason);
    }
    if !attrs.resource_request {
        return ApiError::new(403, "Forbidden", format!("forbidden: {msg}"));
    }
    ApiError::forbidden(attrs.api_group, attrs.resource, attrs.name, &msg)
}

/// The sentence [`forbidden`] wraps: `User "jane" cannot delete resource "pods" in API group ""
/// in the namespace "default"`.
pub fn forbidden_message(attrs: &Attributes<'_>) -> String {
    let user = &attrs.user.name;
    if !attrs.resource_request {
        return format!("User {user:?} cannot {} path {:?}", attrs.verb, attrs.path);
    }
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.to_string()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    if attrs.namespace.is_empty() {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
            attrs.verb, attrs.api_group
        )
    } else {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
            attrs.verb, attrs.api_group, attrs.namespace
        )
    }
}

/// One RBAC object, as received from a watch event.
#[derive(Debug, Clone)]
pub enum RbacObject {
    /// `rbac.authorization.k8s.io/v1` Role.
    Role(Role),
    /// ClusterRole.
    ClusterRole(ClusterRole),
    /// RoleBinding.
    RoleBinding(RoleBinding),
    /// ClusterRoleBinding.
    ClusterRoleBinding(ClusterRoleBinding),
}

/// The kind of an RBAC object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RbacKind {
    /// Role.
    Role,
    /// ClusterRole.
    ClusterRole,
    /// RoleBinding.
    RoleBinding,
    /// ClusterRoleBinding.
    ClusterRoleBinding,
}

impl RbacKind {
    /// Parses `Role`, `ClusterRole`, `RoleBinding`, `ClusterRoleBinding`.
    pub fn from_kind(kind: &str) -> Option<Self> {
        Some(match kind {
            "Role" => Self::Role,
            "ClusterRole" => Self::ClusterRole,
            "RoleBinding" => Self::RoleBinding,
            "ClusterRoleBinding" => Self::ClusterRoleBinding,
            _ => return None,
        })
    }

    /// Parses the plural resource: `roles`, `clusterroles`, `rolebindings`, `clusterrolebindings`.
    pub fn from_resource(resource: &str) -> Option<Self> {
        Some(match resource {
            "roles" => Self::Role,
            "clusterroles" => Self::ClusterRole,
            "rolebindings" => Self::RoleBinding,
            "clusterrolebindings" => Self::ClusterRoleBinding,
            _ => return None,
        })
    }

    /// The plural resource name.
    pub fn resource(self) -> &'static str {
        match self {
            Self::Role => "roles",
            Self::ClusterRole => "clusterroles",
            Self::RoleBinding => "rolebindings",
            Self::ClusterRoleBinding => "clusterrolebindings",
        }
    }
}

impl RbacObject {
    /// Decodes an object by its `kind`.
    ///
    /// # Errors
    /// A message when the kind is not an RBAC kind or the object does not decode.
    pub fn from_value(obj: &Value) -> Result<Self, String> {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let kind = RbacKind::from_kind(kind).ok_or_else(|| format!("not an RBAC object: kind {kind:?}"))?;
        Self::from_value_as(kind, obj)
    }

    /// Decodes an object known to be of `kind` (its own `kind` field may be missing).
    ///
    /// # Errors
    /// A message when the object does not decode.
    pub fn from_value_as(kind: RbacKind, obj: &Value) -> Result<Self, String> {
        let err = |e: serde_json::Error| format!("decoding {kind:?}: {e}");
        let obj = obj.clone();
        Ok(match kind {
            RbacKind::Role => Self::Role(serde_json::from_value(obj).map_err(err)?),
            RbacKind::ClusterRole => Self::ClusterRole(serde_json::from_value(obj).map_err(err)?),
            RbacKind::RoleBinding => Self::RoleBinding(serde_json::from_value(obj).map_err(err)?),
            RbacKind::ClusterRoleBinding => Self::ClusterRoleBinding(serde_json::from_value(obj).map_err(err)?),
        })
    }
}

/// A role's rules as the authorizer evaluates them: the API rules, their compiled form, and
/// the union of their verbs, so a role without the request's verb is skipped whole.
#[derive(Debug, Default)]
struct RoleEntry {
    rules: Vec<PolicyRule>,
    compiled: Vec<rules::CompiledRule>,
    verbs: rules::VerbSet,
}

impl RoleEntry {
    fn new(rules: Vec<PolicyRule>) -> Arc<Self> {
        let compiled: Vec<rules::CompiledRule> = rules.iter().map(rules::CompiledRule::new).collect();
        let verbs = rules::VerbSet::union(&compiled);
        Arc::new(Self { rules, compiled, verbs })
    }
}

/// A binding as the authorizer keeps it (RoleBinding or ClusterRoleBinding), with the rules of
/// the role it references resolved (re-resolved whenever that role changes), so a decision
/// never looks roles up.
#[derive(Debug)]
struct BindingEntry {
    /// "" for ClusterRoleBindings.
    namespace: String,
    name: String,
    role_ref: RoleRef,
    subjects: Vec<Subject>,
    resolved: Result<Arc<RoleEntry>, String>,
}

/// Identifies a role a binding references: (is a ClusterRole, namespace, name).
type RoleKey = (bool, String, String);

fn role_key(role_ref: &RoleRef, binding_namespace: &str) -> Option<RoleKey> {
    match role_ref.kind.as_str() {
        "ClusterRole" => Some((true, String::new(), role_ref.name.clone())),
        "Role" if !binding_namespace.is_empty() => Some((false, binding_namespace.to_string(), role_ref.name.clone())),
        _ => None,
    }
}

impl BindingEntry {
    fn describe(&self, subject: &Subject) -> String {
        let subject = describe_subject(subject, &self.namespace);
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {:?} of {} {:?} to {subject}",
                self.name, self.role_ref.kind, self.role_ref.name
            )
        } else {
            format!(
                "RoleBinding {:?} of {} {:?} to {subject}",
                format!("{}/{}", self.name, self.namespace),
                self.role_ref.kind,
                self.role_ref.name
            )
        }
    }
}

fn describe_subject(s: &Subject, binding_namespace: &str) -> String {
    if s.kind == "ServiceAccount" {
        let ns = s.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(binding_namespace);
        format!("{} {:?}", s.kind, format!("{}/{}", s.name, ns))
    } else {
        format!("{} {:?}", s.kind, s.name)
    }
}

/// Where a subject points in the index: a user name (users and service accounts) or a group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SubjectKey {
    User(String),
    Group(String),
}

/// The index key of a subject of a binding in `binding_namespace` ("" for cluster bindings), or
/// `None` when the subject can never apply (unknown kind, service account without namespace).
fn subject_key(s: &Subject, binding_namespace: &str) -> Option<SubjectKey> {
    match s.kind.as_str() {
        "User" => Some(SubjectKey::User(s.name.clone())),
        "Group" => Some(SubjectKey::Group(s.name.clone())),
        "ServiceAccount" => {
            let ns = s.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(binding_namespace);
            if ns.is_empty() || s.name.is_empty() {
                None
            } else {
                Some(SubjectKey::User(user::service_account_username(ns, &s.name)))
            }
        }
        _ => None,
    }
}

/// Bindings by subject: each entry is the binding and the index of the subject that matched.
#[derive(Debug, Default)]
struct SubjectIndex {
    users: HashMap<String, Vec<(Arc<BindingEntry>, usize)>>,
    groups: HashMap<String, Vec<(Arc<BindingEntry>, usize)>>,
}

impl SubjectIndex {
    fn insert(&mut self, b: &Arc<BindingEntry>) {
        for (i, s) in b.subjects.iter().enumerate() {
            let (map, key) = match subject_key(s, &b.namespace) {
                Some(SubjectKey::User(k)) => (&mut self.users, k),
                Some(SubjectKey::Group(k)) => (&mut self.groups, k),
                None => continue,
            };
            let list = map.entry(key).or_default();
            // A subject listed twice in one binding is indexed once.
            if !list.iter().any(|(e, _)| Arc::ptr_eq(e, b)) {
                list.push((b.clone(), i));
            }
        }
    }

    fn remove(&mut self, b: &Arc<BindingEntry>) {
        for s in &b.subjects {
            let (map, key) = match subject_key(s, &b.namespace) {
                Some(SubjectKey::User(k)) => (&mut self.users, k),
                Some(SubjectKey::Group(k)) => (&mut self.groups, k),
                None => continue,
            };
            if let Some(list) = map.get_mut(&key) {
                list.retain(|(e, _)| !Arc::ptr_eq(e, b));
                if list.is_empty() {
                    map.remove(&key);
                }
            }
        }
    }

    /// Every (binding, subject index) that applies to `user`, users first, then groups in order.
    fn for_user<'s>(&'s self, user: &'s UserInfo) -> impl Iterator<Item = &'s (Arc<BindingEntry>, usize)> + 's {
        let by_name = self.users.get(&user.name).into_iter().flatten();
        let by_group = user.groups.iter().filter_map(|g| self.groups.get(g)).flatten();
        by_name.chain(by_group)
    }

    fn is_empty(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty()
    }
}

/// The snapshot behind the lock.
#[derive(Debug, Default)]
struct State {
    /// Roles by namespace, then name.
    roles: HashMap<String, HashMap<String, Arc<RoleEntry>>>,
    /// ClusterRoles (the object, for aggregation) by name.
    cluster_roles: HashMap<String, (Arc<ClusterRole>, Arc<RoleEntry>)>,
    /// Which bindings (namespace, name) reference each role.
    dependents: HashMap<RoleKey, std::collections::HashSet<(String, String)>>,
    /// RoleBindings by namespace, then name.
    role_bindings: HashMap<String, HashMap<String, Arc<BindingEntry>>>,
    cluster_role_bindings: HashMap<String, Arc<BindingEntry>>,
    cluster_index: SubjectIndex,
    /// RoleBinding index per namespace.
    namespace_index: HashMap<String, SubjectIndex>,
}

fn not_found(resource: &str, name: &str) -> String {
    format!("{resource}.{RBAC_GROUP} {name:?} not found")
}

impl State {
    /// The role a role reference names, for a binding in `namespace` ("" for cluster bindings).
    fn resolve(&self, role_ref: &RoleRef, namespace: &str) -> Result<Arc<RoleEntry>, String> {
        match role_ref.kind.as_str() {
            "ClusterRole" => self
                .cluster_roles
                .get(&role_ref.name)
                .map(|(_, r)| r.clone())
                .ok_or_else(|| not_found("clusterrole", &role_ref.name)),
            "Role" if !namespace.is_empty() => self
                .roles
                .get(namespace)
                .and_then(|m| m.get(&role_ref.name))
                .cloned()
                .ok_or_else(|| not_found("role", &role_ref.name)),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    /// Re-resolves every binding that references the role `key` (after it changed).
    fn role_changed(&mut self, key: &RoleKey) {
        let deps: Vec<(String, String)> =
            self.dependents.get(key).map(|d| d.iter().cloned().collect()).unwrap_or_default();
        for (ns, name) in deps {
            let old = if ns.is_empty() {
                self.cluster_role_bindings.get(&name).cloned()
            } else {
                self.role_bindings.get(&ns).and_then(|m| m.get(&name)).cloned()
            };
            if let Some(old) = old {
                self.insert_binding(BindingEntry {
                    namespace: old.namespace.clone(),
                    name: old.name.clone(),
                    role_ref: old.role_ref.clone(),
                    subjects: old.subjects.clone(),
                    resolved: Err(String::new()),
                });
            }
        }
    }

    /// Visits every rule that applies to `user` in `namespace`, ClusterRoleBindings first. The
    /// visitor returns `false` to stop. Rule-resolution errors go to `errors`.
    /// With `verb` (a [`rules::verb_bit`]) only roles that may have the verb are visited.
    fn visit_rules(
        &self,
        user: &UserInfo,
        namespace: &str,
        verb: Option<u32>,
        errors: &mut Vec<String>,
        mut visit: impl FnMut(&BindingEntry, usize, &PolicyRule, &rules::CompiledRule) -> bool,
    ) {
        let ns_index = if namespace.is_empty() { None } else { self.namespace_index.get(namespace) };
        let bindings = self.cluster_index.for_user(user).chain(ns_index.into_iter().flat_map(|i| i.for_user(user)));
        for (b, i) in bindings {
            match &b.resolved {
                Ok(role) => {
                    if let Some(bit) = verb
                        && !role.verbs.may_contain(bit)
                    {
                        continue;
                    }
                    for (r, c) in role.rules.iter().zip(&role.compiled) {
                        if !visit(b, *i, r, c) {
                            return;
                        }
                    }
                }
                Err(e) => errors.push(e.clone()),
            }
        }
    }

    fn insert_binding(&mut self, mut b: BindingEntry) {
        b.resolved = self.resolve(&b.role_ref, &b.namespace);
        let me = (b.namespace.clone(), b.name.clone());
        if let Some(key) = role_key(&b.role_ref, &b.namespace) {
            self.dependents.entry(key).or_default().insert(me.clone());
        }
        let b = Arc::new(b);
        let old = if b.namespace.is_empty() {
            let old = self.cluster_role_bindings.insert(b.name.clone(), b.clone());
            if let Some(old) = &old {
                self.cluster_index.remove(old);
            }
            self.cluster_index.insert(&b);
            old
        } else {
            let ns = b.namespace.clone();
            let old = self.role_bindings.entry(ns.clone()).or_default().insert(b.name.clone(), b.clone());
            if let Some(old) = &old
                && let Some(index) = self.namespace_index.get_mut(&ns)
            {
                index.remove(old);
            }
            self.namespace_index.entry(ns).or_default().insert(&b);
            old
        };
        if let Some(old) = old
            && old.role_ref != b.role_ref
        {
            self.forget_dependent(&old, &me);
        }
    }

    fn forget_dependent(&mut self, old: &BindingEntry, me: &(String, String)) {
        if let Some(key) = role_key(&old.role_ref, &old.namespace)
            && let Some(set) = self.dependents.get_mut(&key)
        {
            set.remove(me);
            if set.is_empty() {
                self.dependents.remove(&key);
            }
        }
    }

    fn remove_binding(&mut self, namespace: &str, name: &str) {
        let me = (namespace.to_string(), name.to_string());
        if namespace.is_empty() {
            if let Some(old) = self.cluster_role_bindings.remove(name) {
                self.cluster_index.remove(&old);
                self.forget_dependent(&old, &me);
            }
            return;
        }
        let Some(map) = self.role_bindings.get_mut(namespace) else { return };
        if let Some(old) = map.remove(name) {
            self.forget_dependent(&old, &me);
            if self.role_bindings.get(namespace).is_none_or(HashMap::is_empty) {
                self.role_bindings.remove(namespace);
            }
            if let Some(index) = self.namespace_index.get_mut(namespace) {
                index.remove(&old);
                if index.is_empty() {
                    self.namespace_index.remove(namespace);
                }
            }
        }
    }
}

/// The rules that apply to a user in a namespace ([`RbacAuthorizer::rules_for`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RulesFor {
    /// Every applicable rule, from ClusterRoleBindings and then RoleBindings of the namespace.
    pub rules: Vec<PolicyRule>,
    /// Rule-resolution errors (bindings to missing roles).
    pub errors: Vec<String>,
}

/// The RBAC authorizer: an indexed in-memory snapshot of roles and bindings.
///
/// Thread-safe: decisions take a read lock; [`apply`](Self::apply) and
/// [`remove`](Self::remove) take the write lock briefly.
#[derive(Debug, Default)]
pub struct RbacAuthorizer {
    state: RwLock<State>,
}

impl RbacAuthorizer {
    /// An empty authorizer: denies everyone but `system:masters`.
    pub fn new() -> Self {
        Self::default()
    }

    /// An authorizer loaded with `objects` (any RBAC kinds, e.g. a list's items with `kind` set).
    ///
    /// # Errors
    /// The first object that is not an RBAC object.
    pub fn from_objects<'v>(objects: impl IntoIterator<Item = &'v Value>) -> Result<Self, String> {
        let a = Self::new();
        for o in objects {
            a.apply(o)?;
        }
        Ok(a)
    }

    /// Adds or replaces an object from an ADDED/MODIFIED watch event (dispatching on `kind`).
    ///
    /// # Errors
    /// When the object is not an RBAC object or does not decode; the snapshot is unchanged.
    pub fn apply(&self, obj: &Value) -> Result<(), String> {
        self.apply_object(RbacObject::from_value(obj)?);
        Ok(())
    }

    /// Adds or replaces a typed object.
    pub fn apply_object(&self, obj: RbacObject) {
        let mut st = self.state.write();
        match obj {
            RbacObject::Role(r) => {
                let ns = r.metadata.namespace.clone().unwrap_or_default();
                let name = r.metadata.name.clone().unwrap_or_default();
                st.roles
                    .entry(ns.clone())
                    .or_default()
                    .insert(name.clone(), RoleEntry::new(r.rules.unwrap_or_default()));
                st.role_changed(&(false, ns, name));
            }
            RbacObject::ClusterRole(r) => {
                let name = r.metadata.name.clone().unwrap_or_default();
                let entry = RoleEntry::new(r.rules.clone().unwrap_or_default());
                st.cluster_roles.insert(name.clone(), (Arc::new(r), entry));
                st.role_changed(&(true, String::new(), name));
            }
            RbacObject::RoleBinding(b) => {
                let namespace = b.metadata.namespace.clone().unwrap_or_default();
                if namespace.is_empty() {
                    return;
                }
                st.insert_binding(BindingEntry {
                    namespace,
                    name: b.metadata.name.unwrap_or_default(),
                    role_ref: b.role_ref,
                    subjects: b.subjects.unwrap_or_default(),
                    resolved: Err(String::new()),
                });
            }
            RbacObject::ClusterRoleBinding(b) => {
                // A ClusterRoleBinding may only reference a ClusterRole.
                if b.role_ref.kind != "ClusterRole" {
                    return;
                }
                st.insert_binding(BindingEntry {
                    namespace: String::new(),
                    name: b.metadata.name.unwrap_or_default(),
                    role_ref: b.role_ref,
                    subjects: b.subjects.unwrap_or_default(),
                    resolved: Err(String::new()),
                });
            }
        }
    }

    /// Removes an object after a DELETED watch event. `namespace` is "" for cluster kinds.
    pub fn remove(&self, kind: RbacKind, namespace: &str, name: &str) {
        let mut st = self.state.write();
        match kind {
            RbacKind::Role => {
                if let Some(m) = st.roles.get_mut(namespace) {
                    m.remove(name);
                    if m.is_empty() {
                        st.roles.remove(namespace);
                    }
                }
                st.role_changed(&(false, namespace.to_string(), name.to_string()));
            }
            RbacKind::ClusterRole => {
                st.cluster_roles.remove(name);
                st.role_changed(&(true, String::new(), name.to_string()));
            }
            RbacKind::RoleBinding => st.remove_binding(namespace, name),
            RbacKind::ClusterRoleBinding => st.remove_binding("", name),
        }
    }

    /// Removes the object a DELETED watch event carries (dispatching on `kind`).
    ///
    /// # Errors
    /// When the object has no RBAC `kind`.
    pub fn remove_object(&self, obj: &Value) -> Result<(), String> {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let kind = RbacKind::from_kind(kind).ok_or_else(|| format!("not an RBAC object: kind {kind:?}"))?;
        let meta = &obj["metadata"];
        let ns = meta["namespace"].as_str().unwrap_or_default();
        let name = meta["name"].as_str().unwrap_or_default();
        self.remove(kind, if matches!(kind, RbacKind::Role | RbacKind::RoleBinding) { ns } else { "" }, name);
        Ok(())
    }

    /// Replaces the whole snapshot (after a relist).
    pub fn replace<'v>(&self, objects: impl IntoIterator<Item = &'v Value>) -> Result<(), String> {
        let fresh = Self::from_objects(objects)?;
        *self.state.write() = fresh.state.into_inner();
        Ok(())
    }

    /// Number of (roles, cluster roles, role bindings, cluster role bindings) held.
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let st = self.state.read();
        (
            st.roles.values().map(HashMap::len).sum(),
            st.cluster_roles.len(),
            st.role_bindings.values().map(HashMap::len).sum(),
            st.cluster_role_bindings.len(),
        )
    }

    /// Decides a request: `system:masters` → allowed; otherwise allowed iff a rule of a role
    /// bound to the user (by a ClusterRoleBinding, or by a RoleBinding in the request's
    /// namespace) allows it.
    pub fn authorize(&self, attrs: &Attributes<'_>) -> Decision {
        let mut allowed_by: Option<String> = None;
        let denied = self.decide(attrs, |b, i| allowed_by = Some(b.describe(&b.subjects[i])));
        match denied {
            Ok(()) => Decision::allow(allowed_by.map(|by| format!("RBAC: allowed by {by}")).unwrap_or_default()),
            Err(reason) => Decision { allowed: false, reason },
        }
    }

    /// The request-path decision: `Ok` when allowed (nothing is allocated), the denial reason
    /// otherwise (see [`Decision::reason`]).
    ///
    /// # Errors
    /// The request is denied; the string is the reason to append to [`forbidden`]'s message.
    pub fn check(&self, attrs: &Attributes<'_>) -> Result<(), String> {
        self.decide(attrs, |_, _| {})
    }

    /// [`check`](Self::check) with the denial already rendered as Kubernetes' 403.
    ///
    /// # Errors
    /// 403 Forbidden from [`forbidden`].
    pub fn check_forbidden(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        self.check(attrs).map_err(|reason| forbidden(attrs, &reason))
    }

    fn decide(&self, attrs: &Attributes<'_>, mut on_allow: impl FnMut(&BindingEntry, usize)) -> Result<(), String> {
        if attrs.user.in_group(user::SYSTEM_MASTERS) {
            return Ok(());
        }
        let st = self.state.read();
        let mut errors = Vec::new();
        let mut allowed = false;
        let verb = rules::verb_bit(attrs.verb);
        st.visit_rules(attrs.user, attrs.namespace, Some(verb), &mut errors, |b, i, _, compiled| {
            if compiled.allows(attrs, verb) {
                on_allow(b, i);
                allowed = true;
                false
            } else {
                true
            }
        });
        if allowed {
            return Ok(());
        }
        Err(match errors.len() {
            0 => String::new(),
            1 => format!("RBAC: {}", errors[0]),
            _ => format!("RBAC: [{}]", errors.join(", ")),
        })
    }

    /// Every rule that applies to `user` in `namespace` (cluster-wide rules only when
    /// `namespace` is ""). For `system:masters` the result starts with the full-authority rules.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> RulesFor {
        let mut out = RulesFor::default();
        if user.in_group(user::SYSTEM_MASTERS) {
            out.rules.extend(escalation::full_authority());
        }
        let st = self.state.read();
        let mut errors = Vec::new();
        st.visit_rules(user, namespace, None, &mut errors, |_, _, r, _| {
            out.rules.push(r.clone());
            true
        });
        out.errors = errors;
        out
    }

    /// The rules a role reference names for a binding in `namespace` ("" for a
    /// ClusterRoleBinding).
    ///
    /// # Errors
    /// `clusterrole.rbac.authorization.k8s.io "x" not found` (or `role…`) when missing.
    pub fn role_reference_rules(&self, role_ref: &RoleRef, namespace: &str) -> Result<Vec<PolicyRule>, String> {
        self.state.read().resolve(role_ref, namespace).map(|r| r.rules.clone())
    }

    /// `SelfSubjectRulesReview.status` for `user` in `namespace`: `resourceRules`,
    /// `nonResourceRules`, `incomplete` and `evaluationError`, as `kubectl auth can-i --list`
    /// reads them.
    pub fn subject_rules_review_status(&self, user: &UserInfo, namespace: &str) -> Value {
        let r = self.rules_for(user, namespace);
        let mut resource_rules = Vec::new();
        let mut non_resource_rules = Vec::new();
        for rule in &r.rules {
            if !rules::list(&rule.resources).is_empty() {
                let mut v = serde_json::json!({ "verbs": rule.verbs });
                for (key, field) in [
                    ("apiGroups", &rule.api_groups),
                    ("resources", &rule.resources),
                    ("resourceNames", &rule.resource_names),
                ] {
                    if let Some(list) = field {
                        v[key] = list.clone().into();
                    }
                }
                resource_rules.push(v);
            }
            if !rules::list(&rule.non_resource_urls).is_empty() {
                non_resource_rules.push(serde_json::json!({
                    "verbs": rule.verbs,
                    "nonResourceURLs": rule.non_resource_urls,
                }));
            }
        }
        let mut status = serde_json::json!({
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": false,
        });
        if !r.errors.is_empty() {
            status["evaluationError"] = r.errors.join(", ").into();
        }
        status
    }

    /// Every ClusterRole of the snapshot (the tests check aggregation against it; production
    /// aggregation reads the controller manager's informer).
    #[cfg(test)]
    pub(crate) fn cluster_roles(&self) -> Vec<Arc<ClusterRole>> {
        self.state.read().cluster_roles.values().map(|(r, _)| r.clone()).collect()
    }
}

impl Authorizer for RbacAuthorizer {
    fn authorize(&self, attrs: &Attributes<'_>) -> Decision {
        RbacAuthorizer::authorize(self, attrs)
    }
}

/// An authorizer that allows everything (`--authorization-mode=AlwaysAllow`), for tests and
/// single-user setups.
#[derive(Debug, Default, Clone, Copy)]
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn authorize(&self, _attrs: &Attributes<'_>) -> Decision {
        Decision::allow(String::new())
    }
}

#[cfg(test)]
mod tests;
