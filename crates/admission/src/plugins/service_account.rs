//! ServiceAccount admission (<https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#serviceaccount>):
//! a new pod without `spec.serviceAccountName` runs as `default`; the service account must
//! exist; unless automounting is off (on the pod, else on the service account) every container
//! and init container mounts a projected `kube-api-access-<random>` volume at
//! `/var/run/secrets/kubernetes.io/serviceaccount` holding a bound token (3607 s, refreshed by
//! the kubelet), `ca.crt` from the `kube-root-ca.crt` ConfigMap and the namespace.

use std::sync::Arc;

use async_trait::async_trait;
use rand::Rng;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::{AdmissionLookup, AdmissionRequest, Feedback, MutatingAdmission, array_at};

/// The default service account's name.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Where the token volume is mounted.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Prefix of the projected volume's name.
pub const VOLUME_PREFIX: &str = "kube-api-access-";
/// The ConfigMap every namespace has with the cluster CA (`ca.crt`).
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// Lifetime requested for the projected token, seconds.
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
/// Annotation of static (mirror) pods, which get no service account.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Kubernetes' random-suffix alphabet (no vowels, no confusable characters).
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A 5-character random suffix as `utilrand.String(5)` makes.
pub fn random_suffix() -> String {
    let mut rng = rand::rng();
    (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

/// The projected token volume named `name`.
pub fn token_volume(name: &str) -> Value {
    // Built once and copied: a copy reuses the maps' hash tables, building rehashes every key.
    static TEMPLATE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| build_token_volume(""));
    let mut v = TEMPLATE.clone();
    v["name"] = name.into();
    v
}

fn build_token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    })
}

/// Admits a pod being created in `namespace`.
///
/// # Errors
/// 403 `pods "x" is forbidden: error looking up service account <ns>/<name>: serviceaccount
/// "<name>" not found` when the service account does not exist.
pub fn admit_pod(
    pod: &mut Value,
    namespace: &str,
    lookup: &dyn AdmissionLookup,
    forbidden: impl Fn(&str) -> ApiError,
) -> Result<(), ApiError> {
    if !pod["metadata"]["annotations"][MIRROR_POD_ANNOTATION].is_null() {
        return Ok(());
    }
    let sa_name = match pod["spec"]["serviceAccountName"].as_str() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => {
            pod["spec"]["serviceAccountName"] = DEFAULT_SERVICE_ACCOUNT.into();
            DEFAULT_SERVICE_ACCOUNT.to_string()
        }
    };
    let Some(sa) = lookup.service_account(namespace, &sa_name) else {
        return Err(forbidden(&format!(
            "error looking up service account {namespace}/{sa_name}: serviceaccount {sa_name:?} not found"
        )));
    };
    let automount = pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true);
    if automount {
        mount_token(pod);
    }
    Ok(())
}

/// Adds the token volume and its mounts (containers that already mount something at the token
/// path are left alone; an existing `kube-api-access-*` volume is reused).
pub fn mount_token(pod: &mut Value) {
    let existing = pod["spec"]["volumes"]
        .as_array()
        .and_then(|vs| vs.iter().find_map(|v| v["name"].as_str().filter(|n| n.starts_with(VOLUME_PREFIX))))
        .map(str::to_string);
    let has_volume = existing.is_some();
    let volume_name = existing.unwrap_or_else(|| format!("{VOLUME_PREFIX}{}", random_suffix()));
    let mount = json!({"name": volume_name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needs_volume = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod["spec"][list].as_array_mut() else { continue };
        for c in containers {
            let mounts = array_at(c, &["volumeMounts"]);
            if !mounts.iter().any(|m| m["mountPath"] == TOKEN_MOUNT_PATH) {
                mounts.push(mount.clone());
                needs_volume = true;
            }
        }
    }
    if needs_volume && !has_volume {
        array_at(pod, &["spec", "volumes"]).push(token_volume(&volume_name));
    }
}

/// The plugin.
pub struct ServiceAccount {
    lookup: Arc<dyn AdmissionLookup>,
}

impl ServiceAccount {
    /// The plugin over `lookup`.
    pub fn new(lookup: Arc<dyn AdmissionLookup>) -> Self {
        Self { lookup }
    }
}

#[async_trait]
impl MutatingAdmission for ServiceAccount {
    fn name(&self) -> &str {
        "ServiceAccount"
    }
    async fn admit(&self, req: &mut AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        if !req.is_create_of("pods") {
            return Ok(());
        }
        // Borrow the object mutably and the rest shared: no copy of the request.
        let name = req.object_name();
        let AdmissionRequest { object, resource, namespace, .. } = req;
        let Some(pod) = object.as_mut() else { return Ok(()) };
        admit_pod(pod, namespace, self.lookup.as_ref(), |why| {
            ApiError::forbidden(&resource.group, &resource.resource, &name, why)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryLookup;

    fn lookup() -> MemoryLookup {
        let l = MemoryLookup::new();
        l.put(json!({"kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "ns"}}));
        l.put(json!({"kind": "ServiceAccount", "metadata": {"name": "quiet", "namespace": "ns"}, "automountServiceAccountToken": false}));
        l
    }

    fn forbidden(why: &str) -> ApiError {
        ApiError::forbidden("", "pods", "p", why)
    }

    #[test]
    fn pods_get_the_default_account_and_a_projected_token() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "own", "mountPath": TOKEN_MOUNT_PATH}]}]}});
        admit_pod(&mut pod, "ns", &lookup(), forbidden).unwrap();
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 1);
        let name = volumes[0]["name"].as_str().unwrap();
        assert!(name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5, "{name}");
        assert_eq!(volumes[0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"], 3607);
        assert_eq!(pod["spec"]["initContainers"][0]["volumeMounts"][0]["name"], name);
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"][0],
            json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH})
        );
        assert_eq!(pod["spec"]["containers"][1]["volumeMounts"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn automount_can_be_turned_off_by_pod_or_account() {
        let mut pod = json!({"spec": {"serviceAccountName": "quiet", "containers": [{"name": "a"}]}});
        admit_pod(&mut pod, "ns", &lookup(), forbidden).unwrap();
        assert!(pod["spec"]["volumes"].is_null());
        // The pod's own setting wins over the account's.
        let mut pod = json!({"spec": {"serviceAccountName": "quiet", "automountServiceAccountToken": true, "containers": [{"name": "a"}]}});
        admit_pod(&mut pod, "ns", &lookup(), forbidden).unwrap();
        assert_eq!(pod["spec"]["volumes"].as_array().unwrap().len(), 1);
        let mut pod = json!({"spec": {"automountServiceAccountToken": false, "containers": [{"name": "a"}]}});
        admit_pod(&mut pod, "ns", &lookup(), forbidden).unwrap();
        assert!(pod["spec"]["volumes"].is_null());
    }

    #[test]
    fn a_missing_account_is_forbidden() {
        let mut pod = json!({"spec": {"serviceAccountName": "ghost", "containers": [{"name": "a"}]}});
        let e = admit_pod(&mut pod, "ns", &lookup(), forbidden).unwrap_err();
        assert_eq!(
            e.message,
            r#"pods "p" is forbidden: error looking up service account ns/ghost: serviceaccount "ghost" not found"#
        );
        let mut pod = json!({"spec": {"containers": [{"name": "a"}]}});
        assert!(admit_pod(&mut pod, "other", &lookup(), forbidden).is_err());
    }
}
