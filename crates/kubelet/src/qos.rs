//! Pod QoS classes and what follows from them: the pod's cgroup parent, container OOM score
//! adjustment and CPU shares/quota.
//!
//! Follows Kubernetes' "Pod Quality of Service Classes"
//! (<https://kubernetes.io/docs/concepts/workloads/pods/pod-qos/>) and the kubelet's
//! `qos/policy.go` and `kuberuntime` CPU conversions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use skiff_apimachinery::quantity;

/// The QoS class of a pod (`status.qosClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Every container has equal, non-zero CPU and memory requests and limits.
    Guaranteed,
    /// At least one container has a CPU or memory request or limit, but the pod is not Guaranteed.
    Burstable,
    /// No container has a CPU or memory request or limit.
    BestEffort,
}

impl QosClass {
    /// The name as it appears in `status.qosClass`.
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

fn scaled(name: &str, q: &Quantity) -> i64 {
    // Unparseable quantities count as zero: the API server validates them, and the QoS class of
    // an invalid pod is not worth failing the whole sync over.
    let v = if name == "cpu" { quantity::milli_value(q) } else { quantity::value(q) };
    v.unwrap_or(0)
}

/// Requests of a container for `name` after API defaulting (a missing request defaults to the
/// limit), in millicores for cpu and bytes otherwise.
pub fn effective_request(container: &Container, name: &str) -> i64 {
    let res = container.resources.as_ref();
    let req = res.and_then(|r| r.requests.as_ref()).and_then(|m| m.get(name));
    let lim = res.and_then(|r| r.limits.as_ref()).and_then(|m| m.get(name));
    match (req, lim) {
        (Some(q), _) => scaled(name, q),
        (None, Some(q)) => scaled(name, q),
        (None, None) => 0,
    }
}

/// Limit of a container for `name`, in millicores for cpu and bytes otherwise; 0 when unset.
pub fn limit(container: &Container, name: &str) -> i64 {
    container
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|m| m.get(name))
        .map(|q| scaled(name, q))
        .unwrap_or(0)
}

/// Computes the QoS class of a pod from its init and regular containers.
pub fn pod_qos_class(pod: &Pod) -> QosClass {
    let Some(spec) = pod.spec.as_ref() else { return QosClass::BestEffort };
    let mut requests: BTreeMap<&str, i64> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i64> = BTreeMap::new();
    let mut guaranteed = true;
    for c in spec.init_containers.iter().flatten().chain(spec.containers.iter()) {
        let mut limits_found = 0;
        for name in QOS_RESOURCES {
            let req = effective_request(c, name);
            if req != 0 {
                *requests.entry(name).or_default() += req;
            }
            let lim = limit(c, name);
            if lim != 0 {
                limits_found += 1;
                *limits.entry(name).or_default() += lim;
            }
        }
        if limits_found != QOS_RESOURCES.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed && requests.len() == limits.len() && requests.iter().all(|(k, v)| limits.get(k) == Some(v)) {
        return QosClass::Guaranteed;
    }
    QosClass::Burstable
}

/// The cgroup parent of a pod with the cgroupfs driver: `<root>/pod<uid>` for Guaranteed pods,
/// `<root>/burstable/pod<uid>` and `<root>/besteffort/pod<uid>` otherwise (root is usually
/// `/kubepods`).
pub fn cgroup_parent(root: &str, qos: QosClass, pod_uid: &str) -> String {
    let root = root.trim_end_matches('/');
    match qos {
        QosClass::Guaranteed => format!("{root}/pod{pod_uid}"),
        QosClass::Burstable => format!("{root}/burstable/pod{pod_uid}"),
        QosClass::BestEffort => format!("{root}/besteffort/pod{pod_uid}"),
    }
}

/// OOM score adjustment of a container (kubelet `GetContainerOOMScoreAdjust`): -997 for
/// Guaranteed, 1000 for BestEffort, and for Burstable `1000 - 1000 * memoryRequest /
/// memoryCapacity` clamped to `[3, 999]`. Runtimes configured with `restrict_oom_score_adj`
/// raise negative values to their own score.
pub fn oom_score_adj(qos: QosClass, container: &Container, memory_capacity: i64) -> i64 {
    match qos {
        QosClass::Guaranteed => -997,
        QosClass::BestEffort => 1000,
        QosClass::Burstable => {
            let request = effective_request(container, "memory");
            if memory_capacity <= 0 {
                return 999;
            }
            let adj = 1000 - (1000 * i128::from(request) / i128::from(memory_capacity)) as i64;
            adj.clamp(3, 999)
        }
    }
}

/// The CFS period the kubelet uses, in microseconds.
pub const CPU_PERIOD_US: i64 = 100_000;

/// CPU shares for a CPU request in millicores (minimum 2, maximum 262144).
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli <= 0 {
        return 2;
    }
    (milli * 1024 / 1000).clamp(2, 262_144)
}

/// CFS quota in microseconds per [`CPU_PERIOD_US`] for a CPU limit in millicores (0 = no quota;
/// at least 1000 µs otherwise).
pub fn milli_cpu_to_quota(milli: i64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    (milli * CPU_PERIOD_US / 1000).max(1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| kv.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect())
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: map(requests),
                limits: map(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>) -> Pod {
        Pod { spec: Some(PodSpec { containers, ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn pod_without_resources_is_best_effort() {
        assert_eq!(pod_qos_class(&pod(vec![container(&[], &[])])), QosClass::BestEffort);
    }

    #[test]
    fn equal_cpu_and_memory_requests_and_limits_are_guaranteed() {
        let c = container(&[("cpu", "100m"), ("memory", "64Mi")], &[("cpu", "100m"), ("memory", "64Mi")]);
        assert_eq!(pod_qos_class(&pod(vec![c])), QosClass::Guaranteed);
    }

    #[test]
    fn limits_alone_default_requests_and_are_guaranteed() {
        let c = container(&[], &[("cpu", "1"), ("memory", "1Gi")]);
        assert_eq!(pod_qos_class(&pod(vec![c])), QosClass::Guaranteed);
    }

    #[test]
    fn request_below_limit_is_burstable() {
        let c = container(&[("cpu", "100m"), ("memory", "32Mi")], &[("cpu", "100m"), ("memory", "64Mi")]);
        assert_eq!(pod_qos_class(&pod(vec![c])), QosClass::Burstable);
        let only_memory = container(&[], &[("memory", "64Mi")]);
        assert_eq!(pod_qos_class(&pod(vec![only_memory])), QosClass::Burstable);
    }

    #[test]
    fn one_best_effort_container_makes_a_guaranteed_pod_burstable() {
        let g = container(&[], &[("cpu", "1"), ("memory", "1Gi")]);
        assert_eq!(pod_qos_class(&pod(vec![g, container(&[], &[])])), QosClass::Burstable);
    }

    #[test]
    fn cgroup_parent_depends_on_qos_class() {
        assert_eq!(cgroup_parent("/kubepods", QosClass::Guaranteed, "u1"), "/kubepods/podu1");
        assert_eq!(cgroup_parent("/kubepods/", QosClass::Burstable, "u1"), "/kubepods/burstable/podu1");
        assert_eq!(cgroup_parent("/kubepods", QosClass::BestEffort, "u1"), "/kubepods/besteffort/podu1");
    }

    #[test]
    fn burstable_oom_score_scales_with_memory_request() {
        let c = container(&[("memory", "1Gi")], &[]);
        assert_eq!(oom_score_adj(QosClass::Burstable, &c, 4 << 30), 750);
        let huge = container(&[("memory", "8Gi")], &[]);
        assert_eq!(oom_score_adj(QosClass::Burstable, &huge, 4 << 30), 3);
        assert_eq!(oom_score_adj(QosClass::Burstable, &container(&[], &[]), 4 << 30), 999);
        assert_eq!(oom_score_adj(QosClass::BestEffort, &c, 4 << 30), 1000);
    }

    #[test]
    fn cpu_conversions_respect_minimums() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_quota(0), 0);
        assert_eq!(milli_cpu_to_quota(5), 1000);
        assert_eq!(milli_cpu_to_quota(250), 25_000);
    }
}
