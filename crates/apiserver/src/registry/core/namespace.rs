//! The Namespace strategy (`pkg/registry/core/namespace/strategy.go`): a new namespace is
//! `Active` with the `kubernetes` finalizer, and `spec.finalizers` changes only through the
//! `namespaces/finalize` subresource.

use serde_json::{Value, json};

use crate::util::set_in;

/// `PrepareForCreate`: `spec.finalizers` defaults to `["kubernetes"]`, `status.phase` is
/// `Active`.
pub fn prepare_for_create(obj: &mut Value) {
    let fins = obj.get("spec").and_then(|s| s.get("finalizers")).cloned();
    if fins.is_none() {
        set_in(obj, &["spec", "finalizers"], json!(["kubernetes"]));
    }
    set_in(obj, &["status"], json!({"phase": "Active"}));
}

/// `PrepareForUpdate` of the main resource: `spec.finalizers` keeps its stored value.
pub fn prepare_for_update(old: &Value, new: &mut Value) {
    if let Some(f) = old.get("spec").and_then(|s| s.get("finalizers")) {
        set_in(new, &["spec", "finalizers"], f.clone());
    }
}

/// `namespaces/finalize` (`FinalizeREST`): only `spec.finalizers` changes, to the request's
/// (none when it has none).
pub fn prepare_for_finalize(old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    set_in(
        &mut out,
        &["spec", "finalizers"],
        new.get("spec").and_then(|s| s.get("finalizers")).cloned().unwrap_or(json!([])),
    );
    out
}
