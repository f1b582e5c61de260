//! What the Endpoints, EndpointSlice and mirroring controllers share
//! (`pkg/controller/util/endpoint/controller_utils.go`): which pods a Service selects, which
//! of them belong in its endpoints, and the port a Service port reaches on a pod.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use skiff_runtime::informer::{HandlerFns, Informer, key_of};
use skiff_runtime::workqueue::WorkQueue;

use crate::util::is_pod_ready;

/// `service.kubernetes.io/headless`: set on the endpoints of a Service with `clusterIP: None`.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// The Service's selector when it selects pods: `None` for a Service without one (its
/// endpoints are the user's) or an ExternalName Service. An empty selector counts as none,
/// so that a Service never selects every pod of its namespace by accident.
pub fn pod_selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    spec.selector.as_ref().filter(|s| !s.is_empty())
}

/// True when every selector label is on the pod.
pub fn selects(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// The pod's IPv4 address, if it has one.
pub fn pod_ipv4(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let mut ips = status.pod_ip.iter().cloned().chain(status.pod_ips.iter().flatten().map(|p| p.ip.clone()));
    ips.find(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok())
}

/// `ShouldPodBeInEndpoints`: a pod that is not terminal (Succeeded/Failed) and has an IP;
/// a pod being deleted only when `include_terminating` (the EndpointSlice controller reports
/// it with `terminating: true`, the Endpoints controller drops it).
pub fn should_pod_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    if phase == "Succeeded" || phase == "Failed" {
        return false;
    }
    if pod_ipv4(pod).is_none() {
        return false;
    }
    include_terminating || pod.metadata.deletion_timestamp.is_none()
}

/// `ShouldSetHostname`: the pod's hostname is published when its `subdomain` is the Service.
pub fn should_set_hostname(pod: &Pod, svc: &Service) -> bool {
    let spec = pod.spec.as_ref();
    let hostname = spec.and_then(|s| s.hostname.as_deref()).unwrap_or("");
    !hostname.is_empty()
        && spec.and_then(|s| s.subdomain.as_deref()) == svc.metadata.name.as_deref()
        && pod.metadata.namespace == svc.metadata.namespace
}

/// `FindPort`: the pod port a Service port's `targetPort` names — the number itself, or the
/// container port with that name and the Service port's protocol (`None` when no container
/// has it: the pod gets no endpoint for that port).
pub fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<i32>() {
                return Some(n);
            }
            let proto = port.protocol.as_deref().unwrap_or("TCP");
            pod.spec.as_ref()?.containers.iter().flat_map(|c| c.ports.iter().flatten()).find_map(|cp| {
                (cp.name.as_deref() == Some(name.as_str()) && cp.protocol.as_deref().unwrap_or("TCP") == proto)
                    .then_some(cp.container_port)
            })
        }
    }
}

/// Whether a pod change can change any endpoints (`podEndpointsChanged`): labels, IP,
/// readiness, deletion, phase, node, hostname/subdomain or container ports.
pub fn pod_endpoints_changed(old: &Pod, new: &Pod) -> bool {
    let ports = |p: &Pod| p.spec.as_ref().map(|s| s.containers.iter().map(|c| c.ports.clone()).collect::<Vec<_>>());
    let host = |p: &Pod| p.spec.as_ref().map(|s| (s.hostname.clone(), s.subdomain.clone(), s.node_name.clone()));
    let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
    old.metadata.labels != new.metadata.labels
        || pod_ipv4(old) != pod_ipv4(new)
        || is_pod_ready(old) != is_pod_ready(new)
        || old.metadata.deletion_timestamp.is_some() != new.metadata.deletion_timestamp.is_some()
        || phase(old) != phase(new)
        || host(old) != host(new)
        || ports(old) != ports(new)
}

/// The keys (`namespace/name`) of the Services in `services` that select `pod`.
pub fn services_selecting<'a>(services: impl IntoIterator<Item = &'a Service>, pod: &Pod) -> Vec<String> {
    services.into_iter().filter(|s| pod_selector(s).is_some_and(|sel| selects(sel, pod))).map(key_of).collect()
}

/// The event handlers the Endpoints and EndpointSlice controllers share: every Service change
/// queues the Service; a pod's add, delete, or change of what its endpoints show
/// ([`pod_endpoints_changed`]) queues the Services selecting it — before and after a label change.
pub fn queue_services_and_their_pods(
    services: &Arc<Informer<Service>>,
    pods: &Arc<Informer<Pod>>,
    queue: &Arc<WorkQueue<String>>,
) {
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
    services.add_event_handler(Arc::new(
        HandlerFns::new()
            .on_add(move |s: &Arc<Service>| q1.add(key_of(&**s)))
            .on_update(move |_, s: &Arc<Service>| q2.add(key_of(&**s)))
            .on_delete(move |s: &Arc<Service>| q3.add(key_of(&**s))),
    ));
    let enqueue_for_pod = {
        let (q, services) = (queue.clone(), services.clone());
        move |pod: &Pod| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("");
            for k in services_selecting(services.store().list_namespace(ns).iter().map(|s| s.as_ref()), pod) {
                q.add(k);
            }
        }
    };
    let (e1, e2, e3) = (enqueue_for_pod.clone(), enqueue_for_pod.clone(), enqueue_for_pod);
    pods.add_event_handler(Arc::new(
        HandlerFns::new()
            .on_add(move |p: &Arc<Pod>| e1(p))
            .on_update(move |old: &Arc<Pod>, new: &Arc<Pod>| {
                if pod_endpoints_changed(old, new) {
                    if old.metadata.labels != new.metadata.labels {
                        e2(old);
                    }
                    e2(new);
                }
            })
            .on_delete(move |p: &Arc<Pod>| e3(p)),
    ));
}

/// The labels the endpoints of `svc` carry: the Service's own (minus `reserved`) and the
/// headless label for a headless Service.
pub fn endpoint_labels(svc: &Service, reserved: &[&str]) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.retain(|k, _| !reserved.contains(&k.as_str()) && k != HEADLESS_LABEL);
    if svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
        labels.insert(HEADLESS_LABEL.to_string(), String::new());
    }
    labels
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, PodStatus, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn pod(ip: Option<&str>, phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta { name: Some("p".into()), namespace: Some("d".into()), ..Default::default() },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("http".into()),
                        container_port: 8080,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus { pod_ip: ip.map(str::to_string), phase: Some(phase.into()), ..Default::default() }),
        }
    }

    #[test]
    fn a_pod_without_an_ip_or_finished_is_not_in_endpoints_and_a_terminating_one_only_when_asked() {
        assert!(should_pod_be_in_endpoints(&pod(Some("10.42.0.5"), "Running"), false));
        assert!(!should_pod_be_in_endpoints(&pod(None, "Running"), true));
        assert!(!should_pod_be_in_endpoints(&pod(Some("10.42.0.5"), "Succeeded"), true));
        let mut p = pod(Some("10.42.0.5"), "Running");
        p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(should_pod_be_in_endpoints(&p, true));
        assert!(!should_pod_be_in_endpoints(&p, false));
    }

    #[test]
    fn a_named_target_port_is_the_container_port_of_that_name_and_protocol() {
        let p = pod(Some("10.42.0.5"), "Running");
        let named = |n: &str, proto: &str| ServicePort {
            port: 80,
            target_port: Some(IntOrString::String(n.into())),
            protocol: Some(proto.into()),
            ..Default::default()
        };
        assert_eq!(find_port(&p, &named("http", "TCP")), Some(8080));
        assert_eq!(find_port(&p, &named("http", "UDP")), None);
        assert_eq!(find_port(&p, &named("grpc", "TCP")), None);
        let numbered = ServicePort { port: 80, target_port: Some(IntOrString::Int(9376)), ..Default::default() };
        assert_eq!(find_port(&p, &numbered), Some(9376));
    }

    #[test]
    fn an_empty_or_missing_selector_selects_nothing() {
        let svc = |sel: Option<BTreeMap<String, String>>| Service {
            spec: Some(ServiceSpec { selector: sel, ..Default::default() }),
            ..Default::default()
        };
        assert!(pod_selector(&svc(None)).is_none());
        assert!(pod_selector(&svc(Some(BTreeMap::new()))).is_none());
        let sel = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let mut p = pod(None, "Running");
        assert!(!selects(&sel, &p));
        p.metadata.labels = Some(sel.clone());
        assert!(selects(pod_selector(&svc(Some(sel.clone()))).unwrap(), &p));
    }
}
