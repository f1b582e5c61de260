//! What the proxy programs, reduced from Services and EndpointSlices: kube-proxy's
//! `ServicePort` and `Endpoint` views (`pkg/proxy/serviceport.go`, `endpoint.go`,
//! `endpointslicecache.go`), IPv4 only.

use std::collections::BTreeSet;
use std::fmt;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label joining an EndpointSlice to its Service (`discovery.k8s.io/v1`).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Kubernetes' default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT_SECONDS: u32 = 10_800;

/// A transport protocol of a Service port, as nftables' `meta l4proto` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// `TCP` (the default).
    Tcp,
    /// `UDP`.
    Udp,
    /// `SCTP`.
    Sctp,
}

impl Protocol {
    /// The Kubernetes name (`TCP`, `UDP`, `SCTP`; absent means `TCP`); `None` for anything else.
    pub fn parse(s: Option<&str>) -> Option<Protocol> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// nftables' name (`tcp`, `udp`, `sctp`).
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// One port of one Service (kube-proxy's `ServicePortName`): `namespace/name:port` and protocol.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The port's name (empty for a single unnamed port).
    pub port: String,
    /// The port's protocol.
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}/{}", self.namespace, self.name, self.protocol.nft(), self.port)
    }
}

/// One endpoint of a Service port: a pod address and the target port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    /// The endpoint's IPv4 address.
    pub ip: Ipv4Addr,
    /// The target port.
    pub port: u16,
    /// Whether it runs on this node (`nodeName` of the slice endpoint), for the `Local`
    /// traffic policies.
    pub local: bool,
}

/// Everything the rules of one Service port depend on (kube-proxy's `BaseServicePortInfo` plus
/// its endpoints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// Which port of which Service.
    pub name: ServicePortName,
    /// The ClusterIP (IPv4).
    pub cluster_ip: Ipv4Addr,
    /// The Service port.
    pub port: u16,
    /// The node port (`NodePort` and `LoadBalancer` Services), if any.
    pub node_port: Option<u16>,
    /// `spec.externalIPs` and `status.loadBalancer.ingress[].ip` (IPv4 ones): reached like the
    /// node port, through the external chain.
    pub external_ips: BTreeSet<Ipv4Addr>,
    /// `sessionAffinity: ClientIP` timeout in seconds, `None` without affinity.
    pub affinity_timeout: Option<u32>,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
    /// `externalTrafficPolicy: Local`.
    pub external_local: bool,
    /// The endpoints in use: the ready ones, or when none is ready the serving terminating ones
    /// (kube-proxy's `ProxyTerminatingEndpoints`), sorted.
    pub endpoints: Vec<Endpoint>,
}

impl ServicePort {
    /// Whether anything reaches this port from outside the cluster network (node port or
    /// external addresses), which is what the external chain is for.
    pub fn has_external(&self) -> bool {
        self.node_port.is_some() || !self.external_ips.is_empty()
    }

    /// The endpoints on this node.
    pub fn local_endpoints(&self) -> Vec<Endpoint> {
        self.endpoints.iter().filter(|e| e.local).cloned().collect()
    }
}

fn slice_endpoints(slices: &[&EndpointSlice], port_name: &str, protocol: Protocol, node_name: &str) -> Vec<Endpoint> {
    let mut ready = BTreeSet::new();
    let mut terminating = BTreeSet::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let Some(port) = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or_default() == port_name
                && Protocol::parse(p.protocol.as_deref()) == Some(protocol)
        }) else {
            continue;
        };
        let Some(target) = port.port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0) else { continue };
        for ep in &slice.endpoints {
            let cond = ep.conditions.as_ref();
            // Kubernetes: an unset `ready` means ready; `serving` defaults to `ready`.
            let is_ready = cond.and_then(|c| c.ready).unwrap_or(true);
            let is_serving = cond.and_then(|c| c.serving).unwrap_or(is_ready);
            let is_terminating = cond.and_then(|c| c.terminating).unwrap_or(false);
            let local = ep.node_name.as_deref() == Some(node_name);
            for addr in &ep.addresses {
                let Ok(ip) = addr.parse::<Ipv4Addr>() else { continue };
                let e = Endpoint { ip, port: target, local };
                if is_ready {
                    ready.insert(e);
                } else if is_serving && is_terminating {
                    terminating.insert(e);
                }
            }
        }
    }
    if ready.is_empty() { terminating.into_iter().collect() } else { ready.into_iter().collect() }
}

/// The Service ports the proxy programs for `svc` given its EndpointSlices, as seen from node
/// `node_name`. Empty for Services the proxy ignores: ExternalName, headless (`clusterIP:
/// None`), without an IPv4 ClusterIP, or with only unsupported protocols.
pub fn service_ports(svc: &Service, slices: &[&EndpointSlice], node_name: &str) -> Vec<ServicePort> {
    let Some(spec) = svc.spec.as_ref() else { return Vec::new() };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Vec::new();
    }
    let Some(cluster_ip) = spec.cluster_ip.as_deref().and_then(|ip| ip.parse::<Ipv4Addr>().ok()) else {
        return Vec::new();
    };
    let namespace = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let mut external_ips: BTreeSet<Ipv4Addr> =
        spec.external_ips.iter().flatten().filter_map(|ip| ip.parse().ok()).collect();
    if spec.type_.as_deref() == Some("LoadBalancer") {
        let ingress = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|lb| lb.ingress.as_ref());
        external_ips
            .extend(ingress.iter().copied().flatten().filter_map(|i| i.ip.as_deref()?.parse::<Ipv4Addr>().ok()));
    }
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_AFFINITY_TIMEOUT_SECONDS)
    });
    let node_ports_allowed = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
    let mut out = Vec::new();
    for p in spec.ports.iter().flatten() {
        let Some(protocol) = Protocol::parse(p.protocol.as_deref()) else { continue };
        let Ok(port) = u16::try_from(p.port) else { continue };
        let port_name = p.name.clone().unwrap_or_default();
        out.push(ServicePort {
            endpoints: slice_endpoints(slices, &port_name, protocol, node_name),
            name: ServicePortName { namespace: namespace.clone(), name: name.clone(), port: port_name, protocol },
            cluster_ip,
            port,
            node_port: p.node_port.and_then(|n| u16::try_from(n).ok()).filter(|n| *n != 0 && node_ports_allowed),
            external_ips: external_ips.clone(),
            affinity_timeout,
            internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
        });
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
    use k8s_openapi::api::discovery::v1::EndpointConditions;

    /// A ClusterIP Service `ns/name` on `ip` with one unnamed TCP port `port`.
    pub(crate) fn service(ns: &str, name: &str, ip: &str, port: i32) -> Service {
        Service::clone(&crate::testing::service(ns, name, ip, port, None))
    }

    /// A slice of `ns/service` with one unnamed TCP port and `(ip, ready, node)` endpoints.
    pub(crate) fn slice(ns: &str, service: &str, name: &str, port: i32, eps: &[(&str, bool, &str)]) -> EndpointSlice {
        EndpointSlice::clone(&crate::testing::slice(ns, service, name, port, eps))
    }

    #[test]
    fn only_ready_endpoints_are_used_and_their_node_marks_them_local() {
        let svc = service("default", "web", "10.43.0.20", 80);
        let s = slice(
            "default",
            "web",
            "web-1",
            8080,
            &[("10.42.0.5", true, "n1"), ("10.42.1.5", true, "n2"), ("10.42.0.6", false, "n1")],
        );
        let ports = service_ports(&svc, &[&s], "n1");
        assert_eq!(ports.len(), 1);
        let ips: Vec<String> = ports[0].endpoints.iter().map(|e| format!("{}:{}/{}", e.ip, e.port, e.local)).collect();
        assert_eq!(ips, ["10.42.0.5:8080/true", "10.42.1.5:8080/false"]);
    }

    #[test]
    fn serving_terminating_endpoints_are_used_only_when_none_is_ready() {
        let svc = service("default", "web", "10.43.0.20", 80);
        let mut s = slice("default", "web", "web-1", 8080, &[("10.42.0.5", false, "n1")]);
        s.endpoints[0].conditions =
            Some(EndpointConditions { ready: Some(false), serving: Some(true), terminating: Some(true) });
        assert_eq!(service_ports(&svc, &[&s], "n1")[0].endpoints.len(), 1);
        let ready = slice("default", "web", "web-2", 8080, &[("10.42.0.9", true, "n1")]);
        let eps = &service_ports(&svc, &[&s, &ready], "n1")[0].endpoints;
        assert_eq!(eps.iter().map(|e| e.ip.to_string()).collect::<Vec<_>>(), ["10.42.0.9"]);
    }

    #[test]
    fn headless_and_external_name_services_are_not_proxied() {
        let mut headless = service("default", "db", "None", 5432);
        assert!(service_ports(&headless, &[], "n1").is_empty());
        headless.spec.as_mut().unwrap().cluster_ip = Some("10.43.0.9".into());
        headless.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
        assert!(service_ports(&headless, &[], "n1").is_empty());
    }

    #[test]
    fn a_load_balancer_service_has_its_node_port_ingress_ips_and_policies() {
        let mut svc = service("default", "web", "10.43.0.20", 80);
        let spec = svc.spec.as_mut().unwrap();
        spec.type_ = Some("LoadBalancer".into());
        spec.ports.as_mut().unwrap()[0].node_port = Some(30080);
        spec.external_traffic_policy = Some("Local".into());
        spec.session_affinity = Some("ClientIP".into());
        svc.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress { ip: Some("192.0.2.10".into()), ..Default::default() }]),
            }),
            ..Default::default()
        });
        let p = &service_ports(&svc, &[], "n1")[0];
        assert_eq!(p.node_port, Some(30080));
        assert_eq!(p.external_ips.iter().map(|i| i.to_string()).collect::<Vec<_>>(), ["192.0.2.10"]);
        assert!(p.external_local && !p.internal_local);
        assert_eq!(p.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT_SECONDS));
    }
}
