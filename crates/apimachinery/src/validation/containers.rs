//! What a container may carry depending on where it is in a pod spec
//! (`pkg/apis/core/validation`, Kubernetes 1.33): `restartPolicy` only on init containers and
//! only `Always` (a sidecar, KEP-753); lifecycle hooks and probes on regular containers and
//! sidecars but not on other init containers; probes checked as `validateProbe` and its
//! liveness/readiness/startup variants (a probe-level `terminationGracePeriodSeconds`, KEP-2238,
//! only on liveness and startup probes); ephemeral containers limited to an allow-list of
//! fields (no ports, probes, lifecycle or resources) and a `targetContainerName` naming a
//! container of the pod; and `ValidatePodEphemeralContainersUpdate`'s rule that existing
//! ephemeral containers are neither removed nor changed.

use serde_json::Value;

use super::{Errs, arr, child, index, json_equal_ignoring_nulls, s};

/// Where a container is declared in a pod spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ContainerList {
    /// `initContainers`.
    Init,
    /// `containers`.
    Regular,
    /// `ephemeralContainers`.
    Ephemeral,
}

impl ContainerList {
    /// The list a pod spec field names.
    pub(super) fn of(field: &str) -> Self {
        match field {
            "initContainers" => ContainerList::Init,
            "ephemeralContainers" => ContainerList::Ephemeral,
            _ => ContainerList::Regular,
        }
    }
}

const PROBES: [&str; 3] = ["livenessProbe", "readinessProbe", "startupProbe"];
const HANDLERS: [&str; 4] = ["exec", "httpGet", "tcpSocket", "grpc"];

/// Fields of `EphemeralContainerCommon` an ephemeral container may not set (upstream allows a
/// list of fields; these are the rest of the struct).
const EPHEMERAL_FORBIDDEN: [&str; 8] = [
    "lifecycle",
    "livenessProbe",
    "ports",
    "readinessProbe",
    "resizePolicy",
    "resources",
    "restartPolicy",
    "startupProbe",
];

fn is_set(c: &Value, field: &str) -> bool {
    match c.get(field) {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => field != "resources" || !o.is_empty(),
        Some(_) => true,
    }
}

/// The rules of container `c` at path `p` that depend on its list (see the module doc);
/// `spec` is the pod spec (for `targetContainerName`).
pub(super) fn validate_container_kind(e: &mut Errs, c: &Value, p: &str, list: ContainerList, spec: &Value) {
    match list {
        ContainerList::Init => {
            let sidecar = match c.get("restartPolicy").filter(|v| !v.is_null()) {
                None => false,
                Some(v) if v.as_str() == Some("Always") => true,
                Some(v) => {
                    e.not_supported(&child(p, "restartPolicy"), v, &["Always"]);
                    false
                }
            };
            if sidecar {
                validate_probes(e, c, p);
            } else {
                for f in ["lifecycle"].into_iter().chain(PROBES) {
                    if is_set(c, f) {
                        e.forbidden(&child(p, f), "may not be set for init containers without restartPolicy=Always");
                    }
                }
            }
        }
        ContainerList::Regular => {
            validate_probes(e, c, p);
            if is_set(c, "restartPolicy") {
                e.forbidden(&child(p, "restartPolicy"), "may not be set for non-init containers");
            }
        }
        ContainerList::Ephemeral => {
            for f in EPHEMERAL_FORBIDDEN {
                if is_set(c, f) {
                    e.forbidden(&child(p, f), "cannot be set for an Ephemeral Container");
                }
            }
            for (i, m) in arr(c, "volumeMounts").iter().enumerate() {
                let mp = index(&child(p, "volumeMounts"), i);
                for f in ["subPath", "subPathExpr"] {
                    if !s(m, f).is_empty() {
                        e.forbidden(&child(&mp, f), "cannot be set for an Ephemeral Container");
                    }
                }
            }
            let target = s(c, "targetContainerName");
            if !target.is_empty() {
                let known = ["containers", "initContainers"]
                    .iter()
                    .flat_map(|l| arr(spec, l))
                    .any(|other| s(other, "name") == target);
                if !known {
                    e.not_found(&child(p, "targetContainerName"), &Value::from(target));
                }
            }
        }
    }
}

/// `validateLivenessProbe`, `validateReadinessProbe` and `validateStartupProbe`.
fn validate_probes(e: &mut Errs, c: &Value, p: &str) {
    for kind in PROBES {
        let Some(probe) = c.get(kind).filter(|v| v.is_object()) else { continue };
        let pp = child(p, kind);
        validate_probe(e, probe, &pp);
        if kind != "readinessProbe" {
            if let Some(n) = probe.get("successThreshold").and_then(Value::as_i64)
                && n != 1
            {
                e.invalid(&child(&pp, "successThreshold"), &Value::from(n), "must be 1");
            }
        } else if let Some(v) = probe.get("terminationGracePeriodSeconds").filter(|v| !v.is_null()) {
            e.invalid(&child(&pp, "terminationGracePeriodSeconds"), v, "must not be set for readinessProbes");
        }
    }
}

/// `validateProbe`: exactly one handler, non-negative timings, a positive probe-level grace
/// period, a valid gRPC port.
fn validate_probe(e: &mut Errs, probe: &Value, pp: &str) {
    let mut handlers = 0;
    for h in HANDLERS {
        if probe.get(h).is_some_and(|v| !v.is_null()) {
            if handlers > 0 {
                e.forbidden(&child(pp, h), "may not specify more than 1 handler type");
            }
            handlers += 1;
        }
    }
    if handlers == 0 {
        e.required(pp, "must specify a handler type");
    }
    for f in ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"] {
        e.non_negative(&child(pp, f), probe.get(f));
    }
    if let Some(n) = probe.get("terminationGracePeriodSeconds").and_then(Value::as_i64)
        && n <= 0
    {
        e.invalid(&child(pp, "terminationGracePeriodSeconds"), &Value::from(n), "must be greater than 0");
    }
    if let Some(grpc) = probe.get("grpc").filter(|v| v.is_object()) {
        let port = grpc.get("port").and_then(Value::as_i64).unwrap_or(0);
        for m in crate::names::is_valid_port_num(port) {
            e.invalid(&child(&child(pp, "grpc"), "port"), &Value::from(port), &m);
        }
    }
}

/// `ValidatePodEphemeralContainersUpdate`'s second part: every ephemeral container of `old`
/// is still there, unchanged (only additions are allowed; matched by name, as a patch may
/// reorder the list).
pub(super) fn validate_ephemeral_containers_update(e: &mut Errs, new_spec: &Value, old_spec: &Value) {
    let path = "spec.ephemeralContainers";
    let news = arr(new_spec, "ephemeralContainers");
    for old in arr(old_spec, "ephemeralContainers") {
        let name = s(old, "name");
        match news.iter().find(|n| s(n, "name") == name) {
            None => e.forbidden(path, &format!("existing ephemeral containers {name:?} may not be removed\n")),
            Some(new) if !json_equal_ignoring_nulls(old, new) => {
                e.forbidden(&child(path, name), &format!("existing ephemeral containers {name:?} may not be changed\n"))
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::super::validate;
    use super::*;

    /// The `field: message` lines of a pod with `spec` (and `old_spec` for an update).
    fn causes(spec: Value, old_spec: Option<Value>) -> BTreeSet<String> {
        let pod = |spec: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}, "spec": spec});
        let old = old_spec.map(pod);
        validate("v1", "Pod", &pod(spec), old.as_ref())
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn set(lines: &[&str]) -> BTreeSet<String> {
        lines.iter().map(|s| s.to_string()).collect()
    }

    const EXEC: &str = r#"{"exec": {"command": ["true"]}}"#;

    fn probe() -> Value {
        serde_json::from_str(EXEC).unwrap_or_default()
    }

    #[test]
    fn a_sidecar_is_an_init_container_with_restart_policy_always_and_may_have_probes() {
        let spec = json!({
            "initContainers": [{"name": "proxy", "image": "i", "restartPolicy": "Always",
                                "startupProbe": probe(), "readinessProbe": probe(), "livenessProbe": probe(),
                                "lifecycle": {"preStop": {"sleep": {"seconds": 1}}}}],
            "containers": [{"name": "app", "image": "i"}]
        });
        assert_eq!(causes(spec, None), set(&[]));
    }

    #[test]
    fn restart_policy_is_only_always_and_only_on_init_containers() {
        let spec = json!({
            "initContainers": [{"name": "i", "image": "i", "restartPolicy": "OnFailure"}],
            "containers": [{"name": "app", "image": "i", "restartPolicy": "Always"}]
        });
        assert_eq!(
            causes(spec, None),
            set(&[
                r#"spec.initContainers[0].restartPolicy: Unsupported value: "OnFailure": supported values: "Always""#,
                "spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers",
            ])
        );
    }

    #[test]
    fn an_init_container_without_restart_policy_always_may_not_have_probes_or_hooks() {
        let spec = json!({
            "initContainers": [{"name": "i", "image": "i", "readinessProbe": probe(), "lifecycle": {"postStart": {"exec": {"command": ["x"]}}}}],
            "containers": [{"name": "app", "image": "i"}]
        });
        assert_eq!(
            causes(spec, None),
            set(&[
                "spec.initContainers[0].lifecycle: Forbidden: may not be set for init containers without restartPolicy=Always",
                "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
            ])
        );
    }

    #[test]
    fn probes_need_one_handler_and_liveness_and_startup_probes_one_success() {
        let spec = json!({"containers": [{"name": "app", "image": "i",
            "livenessProbe": {"exec": {"command": ["x"]}, "tcpSocket": {"port": 80}, "successThreshold": 2},
            "readinessProbe": {"periodSeconds": -1, "terminationGracePeriodSeconds": 5},
            "startupProbe": {"grpc": {"port": 70000}, "terminationGracePeriodSeconds": 0}}]});
        assert_eq!(
            causes(spec, None),
            set(&[
                "spec.containers[0].livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
                "spec.containers[0].readinessProbe: Required value: must specify a handler type",
                "spec.containers[0].readinessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0",
                "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes",
                "spec.containers[0].startupProbe.grpc.port: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.containers[0].startupProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0",
            ])
        );
    }

    #[test]
    fn an_ephemeral_container_has_no_ports_probes_or_resources_and_targets_a_pod_container() {
        let spec = json!({
            "containers": [{"name": "app", "image": "i"}],
            "ephemeralContainers": [{"name": "debugger", "image": "busybox", "targetContainerName": "nope",
                "ports": [{"containerPort": 80, "protocol": "TCP"}], "readinessProbe": probe(),
                "resources": {"limits": {"cpu": "1"}}, "volumeMounts": []}]
        });
        assert_eq!(
            causes(spec, None),
            set(&[
                "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].readinessProbe: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral Container",
                r#"spec.ephemeralContainers[0].targetContainerName: Not found: "nope""#,
            ])
        );
    }

    #[test]
    fn ephemeral_containers_may_only_be_added() {
        let debugger = json!({"name": "debugger", "image": "busybox", "targetContainerName": "app"});
        let old = json!({"containers": [{"name": "app", "image": "i"}], "ephemeralContainers": [debugger.clone()]});
        let mut added = old.clone();
        added["ephemeralContainers"] = json!([debugger.clone(), {"name": "second", "image": "busybox"}]);
        assert_eq!(causes(added, Some(old.clone())), set(&[]));

        let mut removed = old.clone();
        removed["ephemeralContainers"] = json!([]);
        assert_eq!(
            causes(removed, Some(old.clone())),
            set(&[
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be removed\n"
            ])
        );
        let mut changed = old.clone();
        changed["ephemeralContainers"][0]["image"] = json!("other");
        assert_eq!(
            causes(changed, Some(old)),
            set(&[
                "spec.ephemeralContainers.debugger: Forbidden: existing ephemeral containers \"debugger\" may not be changed\n"
            ])
        );
    }
}
