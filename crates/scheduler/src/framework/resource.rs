//! Resource quantities and pod requests computed the way Kubernetes computes them.
//!
//! Quantities are parsed by [`skiff_apimachinery::quantity`]; pod requests follow
//! `k8s.io/component-helpers/resource.PodRequests`: a pod's request is `max(sum of app containers (+ sidecars), max over init containers) +
//! overhead`, per resource.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use skiff_apimachinery::quantity::{InvalidQuantity, parse_scaled_saturating};

/// Resource name of CPU (`v1.ResourceCPU`).
pub const CPU: &str = "cpu";
/// Resource name of memory.
pub const MEMORY: &str = "memory";
/// Resource name of local ephemeral storage.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Resource name of the pod count a node allows.
pub const PODS: &str = "pods";

/// CPU assumed for a container without a CPU request when scoring (`DefaultMilliCPURequest`), in
/// millicores.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed for a container without a memory request when scoring (`DefaultMemoryRequest`),
/// in bytes (200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Parses a quantity for resource `name`: millicores for `cpu`, plain units (bytes, counts)
/// otherwise, rounded up; amounts beyond `i64` saturate (see
/// [`skiff_apimachinery::quantity::parse_scaled_saturating`]).
///
/// # Errors
/// [`InvalidQuantity`] when the string is not a quantity.
pub fn parse_resource_quantity(name: &str, q: &Quantity) -> Result<i64, InvalidQuantity> {
    parse_scaled_saturating(&q.0, if name == CPU { 3 } else { 0 })
}

/// Amounts of resources (`framework.Resource`): CPU in millicores, memory and storage in bytes,
/// pods as a count, and every other resource (extended resources such as `nvidia.com/gpu`,
/// hugepages) in `scalar_resources` in plain units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resource {
    /// CPU in millicores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// The number of pods (only meaningful for allocatable).
    pub allowed_pod_number: i64,
    /// Every other resource by name.
    pub scalar_resources: BTreeMap<String, i64>,
}

impl Resource {
    /// Builds from a `ResourceList` (requests, limits, capacity or allocatable). Unparseable
    /// quantities are reported, not ignored.
    ///
    /// # Errors
    /// The first quantity that does not parse, with its resource name.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Self, String> {
        let mut r = Resource::default();
        for (name, q) in list {
            let v = parse_resource_quantity(name, q).map_err(|e| format!("{name}: {e}"))?;
            r.set(name, v);
        }
        Ok(r)
    }

    /// Sets one resource by name.
    pub fn set(&mut self, name: &str, v: i64) {
        match name {
            CPU => self.milli_cpu = v,
            MEMORY => self.memory = v,
            EPHEMERAL_STORAGE => self.ephemeral_storage = v,
            PODS => self.allowed_pod_number = v,
            _ => {
                self.scalar_resources.insert(name.to_string(), v);
            }
        }
    }

    /// One resource by name (0 when absent). CPU is in millicores.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pod_number,
            _ => self.scalar_resources.get(name).copied().unwrap_or(0),
        }
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.saturating_add(other.allowed_pod_number);
        for (k, v) in &other.scalar_resources {
            let e = self.scalar_resources.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    /// Subtracts `other` from `self`.
    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.saturating_sub(other.allowed_pod_number);
        for (k, v) in &other.scalar_resources {
            let e = self.scalar_resources.entry(k.clone()).or_insert(0);
            *e = e.saturating_sub(*v);
        }
    }

    /// Per resource, keeps the larger of `self` and `other`.
    pub fn set_max(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for (k, v) in &other.scalar_resources {
            let e = self.scalar_resources.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.allowed_pod_number == 0
            && self.scalar_resources.values().all(|v| *v == 0)
    }
}

fn container_requests(c: &Container, non_zero: bool) -> Result<Resource, String> {
    let mut r = match c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        Some(list) => Resource::from_list(list).map_err(|e| format!("container {:?}: {e}", c.name))?,
        None => Resource::default(),
    };
    if non_zero {
        let reqs = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        if !reqs.is_some_and(|l| l.contains_key(CPU)) {
            r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
        }
        if !reqs.is_some_and(|l| l.contains_key(MEMORY)) {
            r.memory = DEFAULT_MEMORY_REQUEST;
        }
    }
    Ok(r)
}

/// The pod's effective resource request (`resourcehelper.PodRequests`): the sum over app
/// containers and restartable init containers (sidecars), raised per resource to the largest
/// non-restartable init container plus the sidecars started before it, plus `spec.overhead`.
///
/// With `non_zero`, containers that request no CPU/memory count as
/// [`DEFAULT_MILLI_CPU_REQUEST`]/[`DEFAULT_MEMORY_REQUEST`] (used for scoring spread).
///
/// # Errors
/// A request quantity that does not parse.
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Result<Resource, String> {
    let mut reqs = Resource::default();
    let Some(spec) = pod.spec.as_ref() else { return Ok(reqs) };
    for c in &spec.containers {
        reqs.add(&container_requests(c, non_zero)?);
    }
    let mut restartable_sum = Resource::default();
    let mut init_max = Resource::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c, non_zero)?;
        if c.restart_policy.as_deref() == Some("Always") {
            // A sidecar keeps running next to the app containers.
            reqs.add(&r);
            restartable_sum.add(&r);
            init_max.set_max(&restartable_sum);
        } else {
            let mut with_sidecars = r;
            with_sidecars.add(&restartable_sum);
            init_max.set_max(&with_sidecars);
        }
    }
    reqs.set_max(&init_max);
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&Resource::from_list(overhead).map_err(|e| format!("overhead: {e}"))?);
    }
    Ok(reqs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantity(name: &str, q: &str) -> Result<i64, InvalidQuantity> {
        parse_resource_quantity(name, &Quantity(q.to_string()))
    }

    #[test]
    fn resource_quantities_are_millicores_for_cpu_and_units_otherwise() {
        assert_eq!(quantity(CPU, "100m"), Ok(100));
        assert_eq!(quantity(CPU, "1.5"), Ok(1500));
        assert_eq!(quantity(CPU, "0.0001"), Ok(1));
        assert_eq!(quantity(MEMORY, "500Mi"), Ok(500 * 1024 * 1024));
        assert_eq!(quantity(MEMORY, "100m"), Ok(1));
        assert_eq!(quantity("nvidia.com/gpu", "2"), Ok(2));
        assert_eq!(quantity(MEMORY, "100E"), Ok(i64::MAX));
        assert!(quantity(MEMORY, "12Q").is_err());
    }

    #[test]
    fn pod_requests_take_max_of_containers_and_init_containers_plus_overhead() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "200m"}}}
                ],
                "initContainers": [
                    {"name": "i", "resources": {"requests": {"cpu": "1", "memory": "50Mi"}}}
                ],
                "overhead": {"cpu": "10m"}
            }
        }))
        .unwrap();
        let r = pod_requests(&pod, false).unwrap();
        assert_eq!(r.milli_cpu, 1010);
        assert_eq!(r.memory, 100 * 1024 * 1024);
        let nz = pod_requests(&pod, true).unwrap();
        assert_eq!(nz.memory, (100 + 200) * 1024 * 1024);
    }

    #[test]
    fn sidecars_add_to_app_containers_and_to_later_init_containers() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}],
                "initContainers": [
                    {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
                    {"name": "i", "resources": {"requests": {"cpu": "250m"}}}
                ]
            }
        }))
        .unwrap();
        assert_eq!(pod_requests(&pod, false).unwrap().milli_cpu, 450);
    }
}
