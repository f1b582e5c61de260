//! The table of served resources (the resource registry): every resource skiff serves, with what discovery
//! advertises (kind, scope, shortNames, categories, verbs, subresources) and how the generic
//! REST layer treats it (storage prefix, generation tracking, create-on-update).
//!
//! Mirrors what kube-apiserver installs for the same group-versions
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-types>).

use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::storage::watchcache::WatchCache;

/// One `additionalPrinterColumns` entry (`apiextensions.v1.CustomResourceColumnDefinition`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: integer, number, string, boolean or date.
    pub type_: String,
    /// OpenAPI format.
    pub format: String,
    /// Description.
    pub description: String,
    /// 0 = shown by default; > 0 = `-o wide` only.
    pub priority: i64,
    /// Simple JSONPath evaluated against each object (`.spec.replicas`).
    pub json_path: String,
}

/// The scale subresource's paths (`subresources.scale`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`, e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// `statusReplicasPath`, e.g. `.status.replicas`.
    pub status_replicas: String,
    /// `labelSelectorPath` (a string field holding a serialized selector), if any.
    pub label_selector: Option<String>,
}

/// What the generic registry needs to serve one version of a CRD.
pub struct CustomResource {
    /// The CRD's name (`<plural>.<group>`).
    pub crd_name: String,
    /// The version objects are stored in (`storage: true`).
    pub storage_version: String,
    /// `schema.openAPIV3Schema` of this version, if any.
    pub schema: Option<Value>,
    /// `spec.preserveUnknownFields`: no pruning at all.
    pub preserve_unknown_fields: bool,
    /// `additionalPrinterColumns` of this version.
    pub printer_columns: Vec<PrinterColumn>,
    /// `subresources.scale`, if declared.
    pub scale: Option<ScalePaths>,
    /// The watch cache of the CRD's objects.
    pub cache: Arc<WatchCache>,
    /// The conversion webhook (`spec.conversion.strategy: Webhook`); `None`: objects are served
    /// at every version with only `apiVersion` rewritten.
    pub webhook: Option<crate::registry::crd::conversion::WebhookConverter>,
}

impl PartialEq for CustomResource {
    fn eq(&self, o: &Self) -> bool {
        self.crd_name == o.crd_name
            && self.storage_version == o.storage_version
            && self.schema == o.schema
            && self.preserve_unknown_fields == o.preserve_unknown_fields
            && self.printer_columns == o.printer_columns
            && self.scale == o.scale
            && self.webhook == o.webhook
            && Arc::ptr_eq(&self.cache, &o.cache)
    }
}

impl Eq for CustomResource {}

impl std::fmt::Debug for CustomResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomResource")
            .field("crd_name", &self.crd_name)
            .field("storage_version", &self.storage_version)
            .finish_non_exhaustive()
    }
}

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
    /// For a resource served from a CustomResourceDefinition: its schema, printer columns,
    /// scale paths and watch cache ([`crate::registry::crd`]); `None` for built-in types.
    pub custom: Option<&'static CustomResource>,
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

/// The `proxy` subresource of pods, services and nodes (kind `PodProxyOptions`,
/// `ServiceProxyOptions`, `NodeProxyOptions`), with kube-apiserver's verbs.
const fn proxy(kind: &'static str) -> Subresource {
    Subresource {
        name: "proxy",
        group: "",
        version: "v1",
        kind,
        verbs: &["create", "delete", "get", "patch", "update"],
    }
}

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
        custom: None,
    }
}

/// Every resource skiff serves, in discovery order.
pub fn builtin() -> Vec<ResourceDef> {
    const POD_SUBS: &[Subresource] = &[
        status("Pod"),
        Subresource { name: "binding", group: "", version: "v1", kind: "Binding", verbs: &["create"] },
        Subresource { name: "eviction", group: "policy", version: "v1", kind: "Eviction", verbs: &["create"] },
        Subresource { name: "ephemeralcontainers", group: "", version: "", kind: "Pod", verbs: STATUS_VERBS },
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
        proxy("PodProxyOptions"),
    ];
    const NS_SUBS: &[Subresource] = &[
        status("Namespace"),
        Subresource { name: "finalize", group: "", version: "", kind: "Namespace", verbs: &["update"] },
    ];
    const NODE_SUBS: &[Subresource] = &[proxy("NodeProxyOptions"), status("Node")];
    const SVC_SUBS: &[Subresource] = &[proxy("ServiceProxyOptions"), status("Service")];
    const DEPLOY_SUBS: &[Subresource] = &[scale(), status("Deployment")];
    const RS_SUBS: &[Subresource] = &[scale(), status("ReplicaSet")];
    const CRD_SUBS: &[Subresource] = &[status("CustomResourceDefinition")];
    const APISERVICE_SUBS: &[Subresource] = &[status("APIService")];
    const STS_SUBS: &[Subresource] = &[scale(), status("StatefulSet")];
    const DS_SUBS: &[Subresource] = &[status("DaemonSet")];
    const RC_SUBS: &[Subresource] = &[scale(), status("ReplicationController")];
    const JOB_SUBS: &[Subresource] = &[status("Job")];
    const CJ_SUBS: &[Subresource] = &[status("CronJob")];
    const PDB_SUBS: &[Subresource] = &[status("PodDisruptionBudget")];
    const QUOTA_SUBS: &[Subresource] = &[status("ResourceQuota")];
    const PVC_SUBS: &[Subresource] = &[status("PersistentVolumeClaim")];
    const PV_SUBS: &[Subresource] = &[status("PersistentVolume")];
    const VA_SUBS: &[Subresource] = &[status("VolumeAttachment")];
    const ING_SUBS: &[Subresource] = &[status("Ingress")];
    const HPA_SUBS: &[Subresource] = &[status("HorizontalPodAutoscaler")];
    const VAP_SUBS: &[Subresource] = &[status("ValidatingAdmissionPolicy")];
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
        ResourceDef {
            short_names: &["rc"],
            categories: &["all"],
            subresources: RC_SUBS,
            storage: "controllers",
            generation: true,
            ..def("", "replicationcontrollers", "replicationcontroller", "ReplicationController")
        },
        ResourceDef { ..def("", "podtemplates", "podtemplate", "PodTemplate") },
        ResourceDef { short_names: &["limits"], ..def("", "limitranges", "limitrange", "LimitRange") },
        ResourceDef {
            short_names: &["quota"],
            subresources: QUOTA_SUBS,
            ..def("", "resourcequotas", "resourcequota", "ResourceQuota")
        },
        ResourceDef {
            short_names: &["pvc"],
            subresources: PVC_SUBS,
            ..def("", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim")
        },
        ResourceDef {
            short_names: &["pv"],
            namespaced: false,
            subresources: PV_SUBS,
            ..def("", "persistentvolumes", "persistentvolume", "PersistentVolume")
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
        ResourceDef {
            short_names: &["sts"],
            categories: &["all"],
            subresources: STS_SUBS,
            generation: true,
            ..def("apps", "statefulsets", "statefulset", "StatefulSet")
        },
        ResourceDef {
            short_names: &["ds"],
            categories: &["all"],
            subresources: DS_SUBS,
            generation: true,
            ..def("apps", "daemonsets", "daemonset", "DaemonSet")
        },
        ResourceDef { ..def("apps", "controllerrevisions", "controllerrevision", "ControllerRevision") },
        ResourceDef {
            categories: &["all"],
            subresources: JOB_SUBS,
            generation: true,
            ..def("batch", "jobs", "job", "Job")
        },
        ResourceDef {
            short_names: &["cj"],
            categories: &["all"],
            subresources: CJ_SUBS,
            generation: true,
            ..def("batch", "cronjobs", "cronjob", "CronJob")
        },
        // autoscaling/v2 is stored; v1 is converted ([`crate::registry::convert`]).
        ResourceDef {
            short_names: &["hpa"],
            categories: &["all"],
            subresources: HPA_SUBS,
            version: "v2",
            ..def("autoscaling", "horizontalpodautoscalers", "horizontalpodautoscaler", "HorizontalPodAutoscaler")
        },
        ResourceDef {
            short_names: &["hpa"],
            categories: &["all"],
            subresources: HPA_SUBS,
            ..def("autoscaling", "horizontalpodautoscalers", "horizontalpodautoscaler", "HorizontalPodAutoscaler")
        },
        ResourceDef {
            short_names: &["pdb"],
            subresources: PDB_SUBS,
            generation: true,
            ..def("policy", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget")
        },
        ResourceDef {
            short_names: &["pc"],
            namespaced: false,
            ..def("scheduling.k8s.io", "priorityclasses", "priorityclass", "PriorityClass")
        },
        ResourceDef {
            short_names: &["sc"],
            namespaced: false,
            ..def("storage.k8s.io", "storageclasses", "storageclass", "StorageClass")
        },
        ResourceDef { namespaced: false, ..def("storage.k8s.io", "csidrivers", "csidriver", "CSIDriver") },
        ResourceDef { namespaced: false, ..def("storage.k8s.io", "csinodes", "csinode", "CSINode") },
        ResourceDef {
            namespaced: false,
            subresources: VA_SUBS,
            ..def("storage.k8s.io", "volumeattachments", "volumeattachment", "VolumeAttachment")
        },
        ResourceDef { ..def("storage.k8s.io", "csistoragecapacities", "csistoragecapacity", "CSIStorageCapacity") },
        ResourceDef { ..def("discovery.k8s.io", "endpointslices", "endpointslice", "EndpointSlice") },
        ResourceDef {
            categories: &["api-extensions"],
            namespaced: false,
            ..def(
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "mutatingwebhookconfiguration",
                "MutatingWebhookConfiguration",
            )
        },
        ResourceDef {
            categories: &["api-extensions"],
            namespaced: false,
            ..def(
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                "validatingwebhookconfiguration",
                "ValidatingWebhookConfiguration",
            )
        },
        ResourceDef {
            categories: &["api-extensions"],
            namespaced: false,
            subresources: VAP_SUBS,
            generation: true,
            ..def(
                "admissionregistration.k8s.io",
                "validatingadmissionpolicies",
                "validatingadmissionpolicy",
                "ValidatingAdmissionPolicy",
            )
        },
        ResourceDef {
            categories: &["api-extensions"],
            namespaced: false,
            ..def(
                "admissionregistration.k8s.io",
                "validatingadmissionpolicybindings",
                "validatingadmissionpolicybinding",
                "ValidatingAdmissionPolicyBinding",
            )
        },
        ResourceDef {
            short_names: &["ing"],
            subresources: ING_SUBS,
            storage: "ingress",
            generation: true,
            ..def("networking.k8s.io", "ingresses", "ingress", "Ingress")
        },
        ResourceDef {
            short_names: &["netpol"],
            generation: true,
            ..def("networking.k8s.io", "networkpolicies", "networkpolicy", "NetworkPolicy")
        },
        ResourceDef { namespaced: false, ..def("networking.k8s.io", "ingressclasses", "ingressclass", "IngressClass") },
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
        ResourceDef {
            namespaced: false,
            categories: &["api-extensions"],
            subresources: APISERVICE_SUBS,
            storage: "apiregistration.k8s.io/apiservices",
            ..def("apiregistration.k8s.io", "apiservices", "apiservice", "APIService")
        },
    ]
}

/// The registry: every [`ResourceDef`], looked up by group/version/resource or kind.
///
/// Built-in types are fixed at start; resources of CustomResourceDefinitions come and go at run
/// time ([`Registry::set_custom`]). Those definitions are leaked (`&'static`) so lookups can hand
/// out plain references without holding a lock: the leak is bounded by the number of distinct
/// CRD spec changes, a handful of kilobytes each.
#[derive(Debug, Clone)]
pub struct Registry {
    defs: Vec<ResourceDef>,
    dynamic: Arc<RwLock<Vec<&'static ResourceDef>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self { defs: builtin(), dynamic: Arc::default() }
    }
}

/// Kubernetes' version priority (`version.CompareKubeAwareVersionStrings`): GA before beta
/// before alpha, higher numbers first, anything else last in alphabetical order. Returns a key
/// that sorts the preferred version first.
pub fn version_priority(v: &str) -> (u8, i64, i64, String) {
    let parse = |s: &str| -> Option<(i64, u8, i64)> {
        let rest = s.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: i64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 0, 0));
        }
        for (pre, rank) in [("beta", 1u8), ("alpha", 2u8)] {
            if let Some(n) = tail.strip_prefix(pre) {
                let n: i64 = n.parse().ok()?;
                return Some((major, rank, n));
            }
        }
        None
    };
    match parse(v) {
        Some((major, rank, minor)) => (rank, -major, -minor, String::new()),
        None => (3, 0, 0, v.to_string()),
    }
}

impl Registry {
    /// Adds a resource (e.g. a virtual one); replaces an existing one of the same
    /// group/version/resource.
    pub fn add(&mut self, def: ResourceDef) {
        self.defs.retain(|d| !(d.group == def.group && d.version == def.version && d.resource == def.resource));
        self.defs.push(def);
    }

    /// Built-in resources (those fixed at start; not the custom ones).
    pub fn all(&self) -> &[ResourceDef] {
        &self.defs
    }

    /// The resources currently served from CustomResourceDefinitions.
    pub fn custom(&self) -> Vec<&'static ResourceDef> {
        self.dynamic.read().map(|d| d.clone()).unwrap_or_default()
    }

    /// Replaces the served resources of the CRD `crd_name` with `defs` (empty: stops serving
    /// it). Definitions equal to the ones already served are kept, so only real changes leak.
    pub fn set_custom(&self, crd_name: &str, defs: Vec<ResourceDef>) {
        let Ok(mut dynamic) = self.dynamic.write() else { return };
        let of_crd = |d: &ResourceDef| d.custom.is_some_and(|c| c.crd_name == crd_name);
        let unchanged = defs.len() == dynamic.iter().filter(|d| of_crd(d)).count()
            && defs.iter().all(|n| dynamic.iter().any(|d| of_crd(d) && *d == n));
        if unchanged {
            return;
        }
        dynamic.retain(|d| !of_crd(d));
        for def in defs {
            dynamic.push(Box::leak(Box::new(def)));
        }
    }

    /// The resource `resource` in `group`/`version`.
    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<&ResourceDef> {
        let found = self.defs.iter().find(|d| d.group == group && d.version == version && d.resource == resource);
        found.or_else(|| {
            let dynamic = self.dynamic.read().ok()?;
            dynamic.iter().copied().find(|d| d.group == group && d.version == version && d.resource == resource)
        })
    }

    /// The resource serving `kind` in `group`/`version`.
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<&ResourceDef> {
        let found = self.defs.iter().find(|d| d.group == group && d.version == version && d.kind == kind);
        found.or_else(|| {
            let dynamic = self.dynamic.read().ok()?;
            dynamic.iter().copied().find(|d| d.group == group && d.version == version && d.kind == kind)
        })
    }

    /// The API groups (not core), each with its versions (preferred first for custom groups),
    /// in registry order.
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        let custom = self.custom();
        for d in self.defs.iter().chain(custom.iter().copied()) {
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
        for (_, versions) in &mut out {
            versions.sort_by_key(|v| version_priority(v));
        }
        out
    }

    /// Resources of one group-version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a ResourceDef> + 'a {
        let mut found: Vec<&'a ResourceDef> =
            self.defs.iter().filter(|d| d.group == group && d.version == version).collect();
        found.extend(self.custom().into_iter().filter(|d| d.group == group && d.version == version));
        found.into_iter()
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

    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut v = vec!["v1alpha1", "v1beta2", "v1", "foo", "v2", "v1beta1"];
        v.sort_by_key(|x| version_priority(x));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }
}
