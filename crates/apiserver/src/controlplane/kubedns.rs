//! The `kube-system/kube-dns` Service of the cluster DNS that `skiff server` runs in-process
//! (`skiff-dns`), kept by the API server with its endpoints like `default/kubernetes`
//! ([`super::kubernetesservice`]).
//!
//! Kubernetes clusters publish their DNS as `kube-system/kube-dns` on the kubelet's
//! `--cluster-dns` address (k3s: `10.43.0.10`), ports 53/UDP `dns` and 53/TCP `dns-tcp`,
//! selecting the CoreDNS pods. skiff's DNS server is not a pod but part of each server process,
//! so the Service has no selector and the API server lists its live servers' DNS addresses in
//! its endpoints (from the same leases as `kubernetes`'s), as a Kubernetes user finds it: the
//! node proxy sends `10.43.0.10:53` to them, and a server that stops leaves them at once.
//! CoreDNS's optional metrics port 9153 is left out: skiff's DNS server serves no metrics.

use std::net::IpAddr;

use serde_json::json;

use super::kubernetesservice::{SystemPort, SystemService};

/// The Service's namespace.
pub const NAMESPACE: &str = "kube-system";
/// The Service's name.
pub const NAME: &str = "kube-dns";
/// k3s's `--cluster-dns`: the tenth address of its default service range.
pub const DEFAULT_CLUSTER_DNS: &str = "10.43.0.10";
/// The kubelet's and CoreDNS's default `--cluster-domain`.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// Where this server's cluster DNS is: the Service's ClusterIP and the port its DNS server
/// answers on (UDP and TCP) at the address the server advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterDns {
    /// `--cluster-dns`: the `kube-dns` Service's ClusterIP, in the service range.
    pub service_ip: IpAddr,
    /// The DNS server's port.
    pub port: u16,
}

/// The `kube-dns` Service: ports 53/UDP `dns` and 53/TCP `dns-tcp` to the DNS server's `port`,
/// with the labels of the CoreDNS add-on's Service that tools select it by.
pub fn service(dns: ClusterDns) -> SystemService {
    SystemService {
        namespace: NAMESPACE,
        name: NAME,
        labels: json!({"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "KubeDNS"}),
        cluster_ip: dns.service_ip.to_string(),
        ports: vec![
            SystemPort { name: "dns", protocol: "UDP", port: 53 },
            SystemPort { name: "dns-tcp", protocol: "TCP", port: 53 },
        ],
        target_port: dns.port,
        endpoint_port: |e| e.dns_port,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::kubernetesservice::Endpoint;

    #[test]
    fn kube_dns_sends_port_53_over_udp_and_tcp_to_the_dns_servers_port() {
        let svc = service(ClusterDns { service_ip: "10.43.0.10".parse().unwrap(), port: 5353 });
        let obj = svc.object();
        assert_eq!(
            (obj["metadata"]["namespace"].as_str(), obj["metadata"]["name"].as_str()),
            (Some(NAMESPACE), Some(NAME))
        );
        assert_eq!(obj["spec"]["clusterIP"], "10.43.0.10");
        assert_eq!(
            obj["spec"]["ports"],
            json!([
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 5353},
            ])
        );
    }

    #[test]
    fn only_servers_running_a_dns_server_are_kube_dns_endpoints() {
        let svc = service(ClusterDns { service_ip: "10.43.0.10".parse().unwrap(), port: 53 });
        let with = Endpoint { ip: "192.0.2.2".parse().unwrap(), port: 6443, dns_port: Some(53) };
        let without = Endpoint { ip: "192.0.2.3".parse().unwrap(), port: 6443, dns_port: None };
        let (endpoints, slice) = svc.endpoints_objects(&svc.serving(&[with, without]));
        assert_eq!(slice["endpoints"], json!([{"addresses": ["192.0.2.2"], "conditions": {"ready": true}}]));
        assert_eq!(
            slice["ports"],
            json!([{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}])
        );
        assert_eq!(slice["metadata"]["labels"]["kubernetes.io/service-name"], NAME);
        assert_eq!(endpoints["subsets"][0]["addresses"], json!([{"ip": "192.0.2.2"}]));
    }
}
