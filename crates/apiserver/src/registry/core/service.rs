//! The Service strategy (`pkg/registry/core/service/strategy.go`).

use serde_json::{Value, json};

use crate::util::set_in;

/// `PrepareForCreate`: a new Service has an empty `status.loadBalancer`.
pub fn prepare_for_create(obj: &mut Value) {
    set_in(obj, &["status"], json!({"loadBalancer": {}}));
}
