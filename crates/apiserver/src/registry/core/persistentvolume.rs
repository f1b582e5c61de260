//! The PersistentVolume and PersistentVolumeClaim strategies
//! (`pkg/registry/core/persistentvolume/strategy.go`, `.../persistentvolumeclaim/strategy.go`).

use serde_json::{Value, json};

use crate::util::set_in;

/// `PrepareForCreate` of both: a new volume or claim starts `Pending`.
pub fn prepare_for_create(obj: &mut Value) {
    set_in(obj, &["status"], json!({"phase": "Pending"}));
}
