//! The resource registry: one table of every resource skiff serves, with what discovery
//! advertises (kind, scope, shortNames, categories, verbs, subresources) and how the generic
//! REST layer treats it (storage prefix, generation tracking, create-on-update).
//!
//! Mirrors what kube-apiserver installs for the same group-versions
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-types>).

/// The verbs every stored resource supports.
pub const ALL_VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// A subresource such as `pods/status` or `deployments/scale`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subresource {
    /// The subresource name, e.g. `status`.
    pub name: &'static str,
    /// Group of the object the subresource reads/writes (`autoscaling` for Scale).
    pub group: &'static str,
    /// Version of that object.
    pub version: &'static str,
    /// Kind of that object (`Scale`, `Binding`, `Eviction`, or the parent's kind).
    pub kind: &'static str,
    /// Verbs the subresource supports.
    pub verbs: &'static [&'static str],
}

/// One resource type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group, "" for core.
    pub group: &'static str,
    /// API version, e.g. `v1`.
    pub version: &'static str,
    /// Plural resource name, e.g. `pods`.
    pub resource: &'static str,
    /// Singular name, e.g. `pod`.
    pub singular: &'static str,
    /// Kind, e.g. `Pod`.
    pub kind: &'static str,
    /// True for namespaced resources.
    pub namespaced: bool,
    /// Short names, e.g. `po`.
    pub short_names: &'static [&'static str],
    /// Categories, e.g. `all`.
    pub categories: &'static [&'static str],
    /// Verbs on the resource itself.
    pub verbs: &'static [&'static str],
    /// Subresources.
    pub subresources: &'static [Subresource],
    /// The segment after `/registry/` in store keys (Kubernetes' own, e.g. `deployments`,
    /// `apiextensions.k8s.io/customresourcedefinitions`).
    pub storage: &'static str,
    /// True when `metadata.generation` tracks spec changes.
    pub generation: bool,
    /// True when a PUT to a missing object creates it (Kubernetes' `AllowCreateOnUpdate`).
    pub create_on_update: bool,
}

impl ResourceDef {
    /// `apiVersion` of objects of this type: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_string() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The subresource named `name`, if any.
    pub fn subresource(&self, name: &str) -> Option<&Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// True when the type has a `status` subresource (and so the main resource ignores status).
    pub fn has_status(&self) -> bool {
        self.subresource("status").is_some()
    }

    /// The key prefix of every object of this type: `/registry/pods/`.
    pub fn prefix(&self) -> String {
        format!("/registry/{}/", self.storage)
    }

    /// The store key of one object.
    pub fn key(&self, namespace: &str, name: &str) -> String {
        if self.namespaced {
            format!("/registry/{}/{}/{}", self.storage, namespace, name)
        } else {
            format!("/registry/{}/{}", self.storage, name)
        }
    }

    /// The key prefix of one namespace's objects (or all, for cluster-scoped types).
    pub fn namespace_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("/registry/{}/{}/", self.storage, ns),
            _ => self.prefix(),
        }
    }
}

const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

const fn status(kind: &'static str) -> Subresource {
    Subresource { name: "status", group: "", version: "", kind, verbs: STATUS_VERBS }
}

const fn scale() -> Subresource {
    Subresource { name: "scale", group: "autoscaling", version: "v1", kind: "Scale", verbs: STATUS_VERBS }
}

const fn def(group: &'static str, resource: &'static str, singular: &'static str, kind: &'static str) -> ResourceDef {
    ResourceDef {
        group,
        version: "v1",
        resource,
        singular,
        kind,
        namespaced: true,
        short_names: &[],
        categories: &[],
        verbs: ALL_VERBS,
        subresources: &[],
        storage: resource,
        generation: false,
        create_on_update: false,
    }
}

/// Every resource skiff serves, in discovery order.
pub fn builtin() -> Vec<ResourceDef> {
    const POD_SUBS: &[Subresource] = &[
        status("Pod"),
        Subresource { name: "binding", group: "", version: "v1", kind: "Binding", verbs: &["create"] },
        Subresource { name: "eviction", group: "policy", version: "v1", kind: "Eviction", verbs: &["create"] },
        Subresource { name: "log", group: "", version: "v1", kind: "Pod", verbs: &["get"] },
        Subresource { name: "exec", group: "", version: "v1", kind: "PodExecOptions", verbs: &["create", "get"] },
        Subresource { name: "attach", group: "", version: "v1", kind: "PodAttachOptions", verbs: &["create", "get"] },
        Subresource {
            name: "portforward",
            group: "",
            version: "v1",
            kind: "PodPortForwardOptions",
            verbs: &["create", "get"],
        },
    ];
    const NS_SUBS: &[Subresource] = &[
        status("Namespace"),
        Subresource { name: "finalize", group: "", version: "", kind: "Namespace", verbs: &["update"] },
    ];
    const NODE_SUBS: &[Subresource] = &[status("Node")];
    const SVC_SUBS: &[Subresource] = &[status("Service")];
    const DEPLOY_SUBS: &[Subresource] = &[scale(), status("Deployment")];
    const RS_SUBS: &[Subresource] = &[scale(), status("ReplicaSet")];
    const CRD_SUBS: &[Subresource] = &[status("CustomResourceDefinition")];
    const SA_SUBS: &[Subresource] = &[Subresource {
        name: "token",
        group: "authentication.k8s.io",
        version: "v1",
        kind: "TokenRequest",
        verbs: &["create"],
    }];
    vec![
        ResourceDef {
            short_names: &["ns"],
            namespaced: false,
            subresources: NS_SUBS,
            ..def("", "namespaces", "namespace", "Namespace")
        },
        ResourceDef {
            short_names: &["po"],
            categories: &["all"],
            subresources: POD_SUBS,
            generation: true,
            ..def("", "pods", "pod", "Pod")
        },
        ResourceDef {
            short_names: &["no"],
            namespaced: false,
            subresources: NODE_SUBS,
            ..def("", "nodes", "node", "Node")
        },
        ResourceDef {
            short_names: &["svc"],
            categories: &["all"],
            subresources: SVC_SUBS,
            storage: "services/specs",
            ..def("", "services", "service", "Service")
        },
        ResourceDef {
            short_names: &["ep"],
            storage: "services/endpoints",
            create_on_update: true,
            ..def("", "endpoints", "endpoints", "Endpoints")
        },
        ResourceDef { short_names: &["cm"], ..def("", "configmaps", "configmap", "ConfigMap") },
        ResourceDef { ..def("", "secrets", "secret", "Secret") },
        ResourceDef {
            short_names: &["sa"],
            subresources: SA_SUBS,
            ..def("", "serviceaccounts", "serviceaccount", "ServiceAccount")
        },
        ResourceDef { short_names: &["ev"], create_on_update: true, ..def("", "events", "event", "Event") },
        ResourceDef {
            short_names: &["ev"],
            storage: "events",
            create_on_update: true,
            ..def("events.k8s.io", "events", "event", "Event")
        },
        ResourceDef {
            short_names: &["deploy"],
            categories: &["all"],
            subresources: DEPLOY_SUBS,
            generation: true,
            ..def("apps", "deployments", "deployment", "Deployment")
        },
        ResourceDef {
            short_names: &["rs"],
            categories: &["all"],
            subresources: RS_SUBS,
            generation: true,
            ..def("apps", "replicasets", "replicaset", "ReplicaSet")
        },
        ResourceDef { create_on_update: true, ..def("coordination.k8s.io", "leases", "lease", "Lease") },
        ResourceDef { create_on_update: true, ..def("rbac.authorization.k8s.io", "roles", "role", "Role") },
        ResourceDef {
            create_on_update: true,
            ..def("rbac.authorization.k8s.io", "rolebindings", "rolebinding", "RoleBinding")
        },
        ResourceDef {
            namespaced: false,
            create_on_update: true,
            ..def("rbac.authorization.k8s.io", "clusterroles", "clusterrole", "ClusterRole")
        },
        ResourceDef {
            namespaced: false,
            create_on_update: true,
            ..def("rbac.authorization.k8s.io", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding")
        },
        ResourceDef {
            namespaced: false,
            short_names: &["crd", "crds"],
            categories: &["api-extensions"],
            subresources: CRD_SUBS,
            storage: "apiextensions.k8s.io/customresourcedefinitions",
            generation: true,
            ..def(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "customresourcedefinition",
                "CustomResourceDefinition",
            )
        },
    ]
}

/// The registry: every [`ResourceDef`], looked up by group/version/resource or kind.
#[derive(Debug, Clone)]
pub struct Registry {
    defs: Vec<ResourceDef>,
}

impl Default for Registry {
    fn default() -> Self {
        Self { defs: builtin() }
    }
}

impl Registry {
    /// Adds a resource (e.g. a virtual one); replaces an existing one of the same
    /// group/version/resource.
    pub fn add(&mut self, def: ResourceDef) {
        self.defs.retain(|d| !(d.group == def.group && d.version == def.version && d.resource == def.resource));
        self.defs.push(def);
    }

    /// All resources.
    pub fn all(&self) -> &[ResourceDef] {
        &self.defs
    }

    /// The resource `resource` in `group`/`version`.
    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<&ResourceDef> {
        self.defs.iter().find(|d| d.group == group && d.version == version && d.resource == resource)
    }

    /// The resource serving `kind` in `group`/`version`.
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<&ResourceDef> {
        self.defs.iter().find(|d| d.group == group && d.version == version && d.kind == kind)
    }

    /// The API groups (not core), each with its versions, in registry order.
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for d in &self.defs {
            if d.group.is_empty() {
                continue;
            }
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, versions)) => {
                    if !versions.contains(&d.version) {
                        versions.push(d.version);
                    }
                }
                None => out.push((d.group, vec![d.version])),
            }
        }
        out
    }

    /// Resources of one group-version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceDef> + 'a {
        self.defs.iter().filter(move |d| d.group == group && d.version == version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_keys_carry_the_namespace_and_cluster_keys_do_not() {
        let r = Registry::default();
        assert_eq!(r.get("", "v1", "pods").unwrap().key("default", "web"), "/registry/pods/default/web");
        assert_eq!(r.get("", "v1", "nodes").unwrap().key("", "n1"), "/registry/nodes/n1");
        assert_eq!(r.get("apps", "v1", "deployments").unwrap().key("a", "b"), "/registry/deployments/a/b");
    }

    #[test]
    fn groups_are_listed_once_with_their_versions() {
        let r = Registry::default();
        let groups = r.groups();
        assert_eq!(groups.iter().filter(|(g, _)| *g == "rbac.authorization.k8s.io").count(), 1);
        assert!(groups.iter().any(|(g, v)| *g == "apps" && v == &vec!["v1"]));
    }
}
