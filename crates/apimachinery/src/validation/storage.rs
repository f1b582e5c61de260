//! storage.k8s.io/v1 StorageClass: `ValidateStorageClass`/`ValidateStorageClassUpdate` of
//! `pkg/apis/storage/validation` (Kubernetes 1.33): the provisioner is a qualified name, the
//! parameters are bounded, reclaimPolicy and volumeBindingMode are enums, and parameters,
//! provisioner, reclaimPolicy and volumeBindingMode never change.

use serde_json::Value;

use super::{Errs, s};
use crate::names;

/// `maxProvisionerParameterSize`: the most bytes of all parameter keys and values together.
const MAX_PARAMETERS_SIZE: usize = 256 * 1024;
/// `maxProvisionerParameterLen`: the most parameters a class may have.
const MAX_PARAMETERS: usize = 512;

/// The reclaim policies a StorageClass may name (`supportedReclaimPolicy`).
pub const RECLAIM_POLICIES: &[&str] = &["Delete", "Retain"];
/// The binding modes a StorageClass may name (`supportedVolumeBindingModes`).
pub const VOLUME_BINDING_MODES: &[&str] = &["Immediate", "WaitForFirstConsumer"];

pub(super) fn validate_storage_class(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let provisioner = s(o, "provisioner");
    if provisioner.is_empty() {
        e.required("provisioner", "");
    } else {
        e.names("provisioner", &provisioner.to_lowercase(), names::is_qualified_name(&provisioner.to_lowercase()));
    }
    if let Some(params) = o.get("parameters").and_then(Value::as_object) {
        if params.len() > MAX_PARAMETERS {
            e.too_long("parameters", MAX_PARAMETERS);
            return;
        }
        let mut size = 0;
        for (k, v) in params {
            if k.is_empty() {
                e.invalid_str("parameters", k, "field can not be empty.");
            }
            size += k.len() + v.as_str().map_or(0, str::len);
        }
        if size > MAX_PARAMETERS_SIZE {
            e.too_long("parameters", MAX_PARAMETERS_SIZE);
        }
    }
    if let Some(p) = o.get("reclaimPolicy").filter(|p| !p.is_null() && p.as_str() != Some(""))
        && !RECLAIM_POLICIES.contains(&p.as_str().unwrap_or(""))
    {
        e.not_supported("reclaimPolicy", p, RECLAIM_POLICIES);
    }
    match o.get("volumeBindingMode").filter(|m| !m.is_null()) {
        None => e.required("volumeBindingMode", ""),
        Some(m) if !VOLUME_BINDING_MODES.contains(&m.as_str().unwrap_or("")) => {
            e.not_supported("volumeBindingMode", m, VOLUME_BINDING_MODES)
        }
        Some(_) => {}
    }
    let Some(old) = old else { return };
    if o.get("parameters").filter(|p| !p.is_null()) != old.get("parameters").filter(|p| !p.is_null()) {
        e.forbidden("parameters", "updates to parameters are forbidden.");
    }
    if provisioner != s(old, "provisioner") {
        e.forbidden("provisioner", "updates to provisioner are forbidden.");
    }
    if o.get("reclaimPolicy") != old.get("reclaimPolicy") {
        e.forbidden("reclaimPolicy", "updates to reclaimPolicy are forbidden.");
    }
    if let Some(m) = o.get("volumeBindingMode")
        && o.get("volumeBindingMode") != old.get("volumeBindingMode")
    {
        e.invalid("volumeBindingMode", m, "field is immutable");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::validation::validate;

    fn class(provisioner: &str) -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
               "provisioner": provisioner, "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"})
    }

    fn messages(obj: &Value, old: Option<&Value>) -> Vec<(String, String)> {
        validate("storage.k8s.io/v1", "StorageClass", obj, old).into_iter().map(|c| (c.field, c.message)).collect()
    }

    #[test]
    fn a_class_with_a_provisioner_and_known_policies_is_valid() {
        assert!(messages(&class("skiff.io/local-path"), None).is_empty());
    }

    #[test]
    fn a_class_without_a_provisioner_is_refused() {
        assert_eq!(messages(&class(""), None), vec![("provisioner".into(), "Required value".into())]);
    }

    #[test]
    fn unknown_reclaim_policies_and_binding_modes_are_unsupported() {
        let mut c = class("example.com/disk");
        c["reclaimPolicy"] = json!("Recycle");
        c["volumeBindingMode"] = json!("Later");
        assert_eq!(
            messages(&c, None),
            vec![
                (
                    "reclaimPolicy".into(),
                    r#"Unsupported value: "Recycle": supported values: "Delete", "Retain""#.into()
                ),
                (
                    "volumeBindingMode".into(),
                    r#"Unsupported value: "Later": supported values: "Immediate", "WaitForFirstConsumer""#.into()
                ),
            ]
        );
    }

    #[test]
    fn parameters_provisioner_and_reclaim_policy_may_not_change() {
        let mut old = class("example.com/disk");
        old["parameters"] = json!({"type": "ssd"});
        let mut new = class("example.com/other");
        new["parameters"] = json!({"type": "hdd"});
        new["reclaimPolicy"] = json!("Retain");
        assert_eq!(
            messages(&new, Some(&old)),
            vec![
                ("parameters".into(), "Forbidden: updates to parameters are forbidden.".into()),
                ("provisioner".into(), "Forbidden: updates to provisioner are forbidden.".into()),
                ("reclaimPolicy".into(), "Forbidden: updates to reclaimPolicy are forbidden.".into()),
            ]
        );
    }

    #[test]
    fn allow_volume_expansion_may_change() {
        let old = class("example.com/disk");
        let mut new = old.clone();
        new["allowVolumeExpansion"] = json!(true);
        assert!(messages(&new, Some(&old)).is_empty());
    }
}
