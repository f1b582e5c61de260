//! The create and update strategies the generic [`store`](crate::registry::store) applies, as
//! kube-apiserver's `rest.RESTCreateStrategy`/`RESTUpdateStrategy`/`RESTDeleteStrategy`
//! (`PrepareForCreate`, `PrepareForUpdate`, `Validate`, `CheckGracefulDelete`): the rules every
//! resource shares live here, the ones a resource adds in its module
//! ([`crate::registry::core`], [`crate::registry::batch`], [`crate::registry::apps`]; custom resources: their CRD's schema in [`crate::registry::crd`]).
//!
//! Admission's NamespaceLifecycle and Priority checks are not strategies: the store repeats them
//! (`Objects::check_namespace`, `Objects::check_global_default`, the immortal namespaces) because
//! the admission plugins do not see every write (the server's own writes skip admission, a
//! server may run without the chain or with those plugins disabled) and read the watch caches,
//! which may not have seen a namespace write yet.

use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::registry::core::{namespace, persistentvolume, pod, service};
use crate::registry::machinery;
use crate::registry::store::FieldValidation;
use crate::resources::ResourceDef;
use crate::util::{meta_mut, set_in};

/// `CheckGracefulDelete`: the grace period in seconds of a delete; only pods have one
/// ([`pod::graceful_period`]), everything else is removed at once.
pub fn graceful_period(def: &ResourceDef, obj: &Value, requested: Option<i64>) -> i64 {
    if !(def.group.is_empty() && def.resource == "pods") {
        return 0;
    }
    pod::graceful_period(obj, requested)
}

/// `PrepareForCreate`: the status fields users may not set on create.
pub fn prepare_for_create(def: &ResourceDef, obj: &mut Value) {
    match (def.group, def.resource) {
        ("", "pods") => pod::prepare_for_create(obj),
        ("", "namespaces") => namespace::prepare_for_create(obj),
        ("", "services") => service::prepare_for_create(obj),
        ("", "persistentvolumeclaims") | ("", "persistentvolumes") => persistentvolume::prepare_for_create(obj),
        ("batch", "jobs") => crate::registry::batch::job::prepare_for_create(obj),
        ("batch", "cronjobs") => crate::registry::batch::cronjob::prepare_for_create(obj),
        ("apps", "daemonsets") => {
            drop_status(obj);
            crate::registry::apps::daemonset::prepare_for_create(obj);
        }
        // Resources whose status only their controllers write (through `/status`).
        ("apps", "deployments" | "replicasets" | "statefulsets")
        | ("", "replicationcontrollers" | "resourcequotas")
        | ("policy", "poddisruptionbudgets")
        | ("networking.k8s.io", "ingresses")
        | ("apiextensions.k8s.io", "customresourcedefinitions") => drop_status(obj),
        _ if def.custom.is_some() && def.has_status() => drop_status(obj),
        _ => {}
    }
}

fn drop_status(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
}

/// Custom resources: structural pruning and schema defaults; pruned fields are unknown fields
/// for `fieldValidation` (Strict → 400, Warn → warnings).
pub fn custom_prune(
    def: &ResourceDef,
    obj: &mut Value,
    fv: FieldValidation,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let Some(cr) = def.custom else { return Ok(()) };
    let unknown = cr.prune_and_default(obj);
    if unknown.is_empty() || fv == FieldValidation::Ignore {
        return Ok(());
    }
    let problems: Vec<String> = unknown.iter().map(|p| format!("unknown field \"{p}\"")).collect();
    if fv == FieldValidation::Strict {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            def.kind,
            def.version,
            def.kind,
            problems.join(", ")
        )));
    }
    warnings.extend(problems);
    Ok(())
}

/// `Validate`/`ValidateUpdate`: the CRD schema for custom resources, the kind's rules otherwise.
pub fn validate_object(
    def: &ResourceDef,
    api_version: &str,
    kind: &str,
    obj: &Value,
    old: Option<&Value>,
) -> Vec<skiff_apimachinery::status::Cause> {
    match def.custom {
        Some(cr) => cr.validate(def, obj, old),
        None => {
            let mut causes = machinery::validate(api_version, kind, obj, old);
            if def.group == "apiextensions.k8s.io" && def.resource == "customresourcedefinitions" {
                causes.extend(crate::registry::crd::rules::validate_crd(obj));
            }
            if def.group == "admissionregistration.k8s.io"
                && matches!(kind, "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding")
            {
                causes.extend(skiff_admission::policy::validate(kind, obj));
            }
            causes
        }
    }
}

/// `WarningsOnCreate`: the warnings a kind's strategy adds to a valid create.
pub fn warnings_on_create(def: &ResourceDef, obj: &Value) -> Vec<String> {
    match (def.group, def.resource, def.custom.is_some()) {
        ("batch", "cronjobs", false) => crate::registry::batch::cronjob::warnings_on_create(obj),
        _ => Vec::new(),
    }
}

/// `WarningsOnUpdate`: the warnings a kind's strategy adds to a valid update of the main
/// resource (status strategies add none).
pub fn warnings_on_update(def: &ResourceDef, subresource: Option<&str>, new: &Value) -> Vec<String> {
    match (def.group, def.resource, def.custom.is_some(), subresource) {
        ("batch", "cronjobs", false, None) => crate::registry::batch::cronjob::warnings_on_update(new),
        _ => Vec::new(),
    }
}

/// `PrepareForUpdate`: what the main resource and each subresource may change. A `/status`
/// write of a built-in resource changes the status and the metadata but not the spec (its
/// `StatusStrategy`, e.g. `pkg/registry/apps/deployment/strategy.go`; the Deployment controller
/// writes the revision annotation with its status); a custom resource's `/status` changes only
/// the status. `namespaces/finalize` changes only `spec.finalizers`; a write of the main resource
/// keeps the system metadata and (where there is a status subresource) the status.
/// `pods/ephemeralcontainers` changes only `spec.ephemeralContainers`.
pub fn prepare_for_update(def: &ResourceDef, subresource: Option<&str>, old: &Value, mut new: Value) -> Value {
    match subresource {
        Some("status") if def.custom.is_some() => {
            // Only status changes; everything else stays as stored.
            let mut out = old.clone();
            match new.get("status") {
                Some(s) => set_in(&mut out, &["status"], s.clone()),
                None => drop_status(&mut out),
            }
            return out;
        }
        Some("status") => {
            keep_system_metadata(old, &mut new);
            keep_spec(old, &mut new);
            // Metadata a kind's status strategy also keeps.
            let kept: &[&str] = match (def.group, def.resource) {
                ("apps", "deployments") => &["labels"],
                ("", "pods") => &["ownerReferences"],
                _ => &[],
            };
            let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
            let meta = meta_mut(&mut new);
            for f in kept {
                match old_meta.get(*f) {
                    Some(v) => meta.insert(f.to_string(), v.clone()),
                    None => meta.remove(*f),
                };
            }
            return new;
        }
        Some("finalize") => return namespace::prepare_for_finalize(old, &new),
        Some("ephemeralcontainers") => return crate::registry::core::pod::prepare_for_ephemeral_containers(old, &new),
        _ => {}
    }
    keep_system_metadata(old, &mut new);
    if def.has_status() && subresource != Some("binding") {
        match old.get("status") {
            Some(s) => set_in(&mut new, &["status"], s.clone()),
            None => drop_status(&mut new),
        }
    }
    if def.resource == "namespaces" && def.group.is_empty() {
        namespace::prepare_for_update(old, &mut new);
    }
    if is_services(def) && subresource.is_none() {
        service::prepare_for_update(old, &mut new);
    }
    new
}

/// `rest.BeforeUpdate`'s system metadata: uid, creation and deletion timestamps, generation
/// and namespace stay as stored, managedFields too unless the request sends them.
fn keep_system_metadata(old: &Value, new: &mut Value) {
    let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
    let meta = meta_mut(new);
    for f in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
        match old_meta.get(f) {
            Some(v) => meta.insert(f.to_string(), v.clone()),
            None => meta.remove(f),
        };
    }
    if let Some(ns) = old_meta.get("namespace") {
        meta.insert("namespace".into(), ns.clone());
    }
    if !meta.contains_key("managedFields")
        && let Some(mf) = old_meta.get("managedFields")
    {
        meta.insert("managedFields".into(), mf.clone());
    }
    meta.remove("selfLink");
}

/// Everything but the metadata and the status stays as stored (`newObj.Spec = oldObj.Spec`,
/// also for kinds whose desired state is not under `spec`).
fn keep_spec(old: &Value, new: &mut Value) {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object_mut()) else { return };
    let own = |k: &str| matches!(k, "metadata" | "status" | "apiVersion" | "kind");
    new.retain(|k, _| own(k));
    for (k, v) in old {
        if !own(k) {
            new.insert(k.clone(), v.clone());
        }
    }
}

/// True for core/v1 Services, whose writes allocate ClusterIPs and node ports
/// ([`service::alloc`]).
pub fn is_services(def: &ResourceDef) -> bool {
    def.group.is_empty() && def.resource == "services" && def.custom.is_none()
}
