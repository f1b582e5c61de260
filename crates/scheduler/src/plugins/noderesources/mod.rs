//! Node resources: NodeResourcesFit (filter + scoring strategies) and
//! NodeResourcesBalancedAllocation, sharing the resource-allocation scorer.

pub mod balanced_allocation;
pub mod fit;
pub mod resource_allocation;

use serde::Deserialize;

/// A resource and its weight in scoring (`ResourceSpec`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSpec {
    /// Resource name, e.g. `cpu`, `memory`, `nvidia.com/gpu`.
    pub name: String,
    /// Weight (1 when 0 or absent).
    #[serde(default)]
    pub weight: i64,
}

/// `cpu` and `memory`, weight 1 each (the default for both plugins).
pub fn default_resources() -> Vec<ResourceSpec> {
    vec![ResourceSpec { name: "cpu".into(), weight: 1 }, ResourceSpec { name: "memory".into(), weight: 1 }]
}
