//! Service and EndpointSlice builders for tests and `skiff bench proxy` (feature `testing`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::model::SERVICE_NAME_LABEL;

/// Service `ns/name` on `cluster_ip` with one unnamed TCP port `port`: `NodePort` with
/// `node_port`, else `ClusterIP`.
pub fn service(ns: &str, name: &str, cluster_ip: &str, port: i32, node_port: Option<i32>) -> Arc<Service> {
    Arc::new(Service {
        metadata: ObjectMeta { namespace: Some(ns.into()), name: Some(name.into()), ..Default::default() },
        spec: Some(ServiceSpec {
            type_: Some(if node_port.is_some() { "NodePort" } else { "ClusterIP" }.into()),
            cluster_ip: Some(cluster_ip.into()),
            ports: Some(vec![ServicePort { port, node_port, protocol: Some("TCP".into()), ..Default::default() }]),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// EndpointSlice `name` of Service `ns/service` with one unnamed TCP port `port` and one
/// endpoint per `(ip, ready, node name)`.
pub fn slice(ns: &str, service: &str, name: &str, port: i32, endpoints: &[(&str, bool, &str)]) -> Arc<EndpointSlice> {
    Arc::new(EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            labels: Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into()),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        ports: Some(vec![EndpointPort { port: Some(port), protocol: Some("TCP".into()), ..Default::default() }]),
        endpoints: endpoints
            .iter()
            .map(|(ip, ready, node)| Endpoint {
                addresses: vec![ip.to_string()],
                conditions: Some(EndpointConditions { ready: Some(*ready), ..Default::default() }),
                node_name: Some(node.to_string()),
                ..Default::default()
            })
            .collect(),
    })
}
