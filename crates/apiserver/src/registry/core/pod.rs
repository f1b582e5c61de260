//! The Pod strategy (`pkg/registry/core/pod/strategy.go`): a new pod starts `Pending`, and a
//! delete of a running pod is graceful so that its kubelet can stop it.

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
