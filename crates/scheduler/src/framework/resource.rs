//! Resource quantities and pod requests computed the way Kubernetes computes them.
//!
//! Follows `resource.Quantity` parsing and `k8s.io/component-helpers/resource.PodRequests`:
//! a pod's request is `max(sum of app containers (+ sidecars), max over init containers) +
//! overhead`, per resource.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

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

/// Error parsing a quantity string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {0:?}")]
pub struct QuantityError(pub String);

/// Parses a Kubernetes quantity and returns `value * scale`, rounded up (as `Quantity.Value()`
/// with scale 1 and `Quantity.MilliValue()` with scale 1000 do). Saturates at `i64::MAX`.
///
/// # Errors
/// [`QuantityError`] when the string is not a quantity.
pub fn parse_quantity_scaled(s: &str, scale: i64) -> Result<i64, QuantityError> {
    let err = || QuantityError(s.to_string());
    let t = s.trim();
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let num_end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
    let (number, suffix) = body.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(err());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let mut mantissa: i128 = 0;
    let mut overflow = false;
    for c in int_part.bytes().chain(frac_part.bytes()) {
        match mantissa.checked_mul(10).and_then(|m| m.checked_add(i128::from(c - b'0'))) {
            Some(m) => mantissa = m,
            None => overflow = true,
        }
    }
    let frac_digits = frac_part.len() as i32;
    // (base, exponent): value = mantissa * base^exponent / 10^frac_digits
    let (base, exp): (i128, i32) = match suffix {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (1024, 1),
        "Mi" => (1024, 2),
        "Gi" => (1024, 3),
        "Ti" => (1024, 4),
        "Pi" => (1024, 5),
        "Ei" => (1024, 6),
        other if other.starts_with(['e', 'E']) => {
            let e: i32 = other[1..].parse().map_err(|_| err())?;
            (10, e)
        }
        _ => return Err(err()),
    };
    if overflow {
        return Ok(if neg { i64::MIN } else { i64::MAX });
    }
    let pow = |b: i128, e: u32| -> Option<i128> { b.checked_pow(e) };
    let mut num = mantissa.checked_mul(i128::from(scale));
    let mut den: Option<i128> = pow(10, frac_digits as u32);
    if exp >= 0 {
        num = num.and_then(|n| pow(base, exp as u32).and_then(|p| n.checked_mul(p)));
    } else {
        den = den.and_then(|d| pow(base, (-exp) as u32).and_then(|p| d.checked_mul(p)));
    }
    let (Some(num), Some(den)) = (num, den) else {
        // Only absurdly large or small quantities get here: saturate or round up to 1.
        return Ok(match (neg, exp >= 0) {
            (false, true) => i64::MAX,
            (true, true) => i64::MIN,
            (false, false) => i64::from(mantissa != 0),
            (true, false) => 0,
        });
    };
    let v = if neg { -(num / den) } else { (num + den - 1) / den };
    Ok(v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
}

/// Parses a quantity for resource `name`: millicores for `cpu`, plain units otherwise.
///
/// # Errors
/// [`QuantityError`] when the string is not a quantity.
pub fn parse_resource_quantity(name: &str, q: &Quantity) -> Result<i64, QuantityError> {
    parse_quantity_scaled(&q.0, if name == CPU { 1000 } else { 1 })
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

    fn check(s: &str, scale: i64, want: Result<i64, ()>) {
        assert_eq!(parse_quantity_scaled(s, scale).map_err(|_| ()), want, "{s} x{scale}");
    }

    #[test]
    fn quantities_parse_like_kubernetes_rounding_up() {
        check("100m", 1000, Ok(100));
        check("1", 1000, Ok(1000));
        check("1.5", 1000, Ok(1500));
        check("0.0001", 1000, Ok(1));
        check("500Mi", 1, Ok(500 * 1024 * 1024));
        check("1Gi", 1, Ok(1 << 30));
        check("1k", 1, Ok(1000));
        check("1e3", 1, Ok(1000));
        check("1.5Gi", 1, Ok(3 << 29));
        check("100m", 1, Ok(1));
        check("-1", 1, Ok(-1));
        check("12Q", 1, Err(()));
        check("", 1, Err(()));
        check("1.2.3", 1, Err(()));
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
