//! The Pod strategy (`pkg/registry/core/pod/strategy.go`): a new pod starts `Pending`, a
//! delete of a running pod is graceful so that its kubelet can stop it, and a write of the
//! `ephemeralcontainers` subresource changes only the ephemeral containers.

use serde_json::{Value, json};

use crate::util::set_in;

/// `PrepareForCreate`: the status a client sent is replaced by `phase: Pending`.
pub fn prepare_for_create(obj: &mut Value) {
    set_in(obj, &["status"], json!({"phase": "Pending"}));
}

/// `CheckGracefulDelete`: the grace period in seconds of a delete. A pod bound to a node and not
/// finished gets the requested `gracePeriodSeconds` or its `terminationGracePeriodSeconds`
/// (default 30), never negative; any other pod is removed at once (0).
pub fn graceful_period(obj: &Value, requested: Option<i64>) -> i64 {
    let bound = obj["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty());
    let phase = obj["status"]["phase"].as_str().unwrap_or("");
    if !bound || phase == "Succeeded" || phase == "Failed" {
        return 0;
    }
    requested.unwrap_or_else(|| obj["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30)).max(0)
}

/// `podEphemeralContainersStrategy.PrepareForUpdate` (`dropNonEphemeralContainerUpdates`): the
/// stored pod with the request's `spec.ephemeralContainers`; everything else the request
/// changed is dropped, except the resourceVersion it may pin and the managedFields.
pub fn prepare_for_ephemeral_containers(old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    match new.pointer("/spec/ephemeralContainers") {
        Some(v) if !v.is_null() => set_in(&mut out, &["spec", "ephemeralContainers"], v.clone()),
        _ => {
            if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("ephemeralContainers");
            }
        }
    }
    for f in ["resourceVersion", "managedFields"] {
        if let Some(v) = new.pointer(&format!("/metadata/{f}"))
            && let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert(f.to_string(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ephemeral_containers_write_changes_only_the_ephemeral_containers() {
        let old = json!({"metadata": {"name": "p", "labels": {"a": "1"}, "resourceVersion": "5"},
                         "spec": {"containers": [{"name": "app", "image": "i"}]},
                         "status": {"phase": "Running"}});
        let new = json!({"metadata": {"name": "p", "labels": {"a": "2"}, "resourceVersion": "5"},
                         "spec": {"containers": [{"name": "app", "image": "other"}],
                                  "ephemeralContainers": [{"name": "debugger", "image": "busybox"}]},
                         "status": {"phase": "Failed"}});
        let out = prepare_for_ephemeral_containers(&old, &new);
        assert_eq!(out["spec"]["ephemeralContainers"][0]["name"], "debugger");
        assert_eq!(out["spec"]["containers"][0]["image"], "i", "the containers stay as stored");
        assert_eq!(out["metadata"]["labels"]["a"], "1", "labels stay as stored");
        assert_eq!(out["status"]["phase"], "Running", "status stays as stored");
    }
}
