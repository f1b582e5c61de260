//! Pod, Namespace and NetworkPolicy builders for tests and `skiff bench netpol` (feature
//! `testing`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec, PodStatus};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn labels(l: &[(&str, &str)]) -> Option<std::collections::BTreeMap<String, String>> {
    Some(l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

/// A running pod `ns/name` on `node` with address `ip`, one container and `labels`.
pub fn pod(ns: &str, name: &str, node: &str, ip: &str, l: &[(&str, &str)]) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            labels: labels(l),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container { name: "c".into(), ..Default::default() }],
            ..Default::default()
        }),
        status: Some(PodStatus { phase: Some("Running".into()), pod_ip: Some(ip.into()), ..Default::default() }),
    })
}

/// A namespace with `labels` (besides the automatic name label).
pub fn namespace(name: &str, l: &[(&str, &str)]) -> Arc<Namespace> {
    Arc::new(Namespace {
        metadata: ObjectMeta { name: Some(name.into()), labels: labels(l), ..Default::default() },
        ..Default::default()
    })
}

/// A NetworkPolicy `ns/name` with `spec` given as JSON (panics on a spec that does not decode:
/// tests only).
pub fn network_policy(ns: &str, name: &str, spec: serde_json::Value) -> Arc<NetworkPolicy> {
    let v = serde_json::json!({"metadata": {"namespace": ns, "name": name}, "spec": spec});
    Arc::new(serde_json::from_value(v).expect("a NetworkPolicy spec"))
}

/// `pod` with a TCP container port `name` = `port` on its first container.
pub fn with_named_port(pod: &Pod, name: &str, port: i32) -> Arc<Pod> {
    let mut pod = pod.clone();
    if let Some(c) = pod.spec.as_mut().and_then(|s| s.containers.first_mut()) {
        c.ports.get_or_insert_with(Vec::new).push(k8s_openapi::api::core::v1::ContainerPort {
            name: Some(name.into()),
            container_port: port,
            ..Default::default()
        });
    }
    Arc::new(pod)
}
