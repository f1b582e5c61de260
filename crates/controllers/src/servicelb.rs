//! The service load balancer, as k3s's ServiceLB (klipper-lb) presents it: a `LoadBalancer`
//! Service without a `loadBalancerClass` is reached on its node ports at every Ready node, so
//! its `status.loadBalancer.ingress` lists the nodes' addresses (ExternalIP, else InternalIP),
//! each with `ipMode: VIP`. A Service that is no longer a `LoadBalancer` loses them. Traffic
//! itself is the node proxy's job.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service, ServiceStatus};

use skiff_runtime::api::{ApiClient, ApiClientExt, is_not_found};
use skiff_runtime::controller::{Action, ReconcileResult, Reconciler};
use skiff_runtime::informer::{HandlerFns, Informer, SharedInformerFactory};
use skiff_runtime::workqueue::WorkQueue;

/// The ServiceLB controller; queue keys are Service keys.
pub struct ServiceLbController {
    api: Arc<dyn ApiClient>,
    services: Arc<Informer<Service>>,
    nodes: Arc<Informer<Node>>,
    queue: Arc<WorkQueue<String>>,
}

fn key(s: &Service) -> String {
    skiff_runtime::informer::key_of(s)
}

fn is_load_balancer(s: &Service) -> bool {
    s.spec.as_ref().is_some_and(|sp| sp.type_.as_deref() == Some("LoadBalancer") && sp.load_balancer_class.is_none())
}

/// The address a node is reached at: its ExternalIP, else its InternalIP; `None` when the
/// node is not Ready.
pub fn node_address(n: &Node) -> Option<String> {
    let status = n.status.as_ref()?;
    let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return None;
    }
    let addrs = status.addresses.as_ref()?;
    let of = |t: &str| addrs.iter().find(|a| a.type_ == t).map(|a| a.address.clone());
    of("ExternalIP").or_else(|| of("InternalIP"))
}

impl ServiceLbController {
    /// Creates the controller on the factory's Service and Node informers.
    pub fn new(api: Arc<dyn ApiClient>, factory: &SharedInformerFactory, queue: Arc<WorkQueue<String>>) -> Arc<Self> {
        let services = factory.informer::<Service>();
        let nodes = factory.informer::<Node>();
        let (q1, q2) = (queue.clone(), queue.clone());
        services.add_event_handler(Arc::new(
            HandlerFns::new()
                .on_add(move |s: &Arc<Service>| {
                    if is_load_balancer(s) {
                        q1.add(key(s))
                    }
                })
                .on_update(move |old: &Arc<Service>, s: &Arc<Service>| {
                    if is_load_balancer(s) || is_load_balancer(old) {
                        q2.add(key(s))
                    }
                }),
        ));
        let requeue_all = {
            let (q, services) = (queue.clone(), services.clone());
            move || {
                for s in services.store().list() {
                    if is_load_balancer(&s) {
                        q.add(key(&s));
                    }
                }
            }
        };
        let (r1, r2, r3) = (requeue_all.clone(), requeue_all.clone(), requeue_all);
        nodes.add_event_handler(Arc::new(
            HandlerFns::new()
                .on_add(move |_: &Arc<Node>| r1())
                .on_update(move |old: &Arc<Node>, new: &Arc<Node>| {
                    if node_address(old) != node_address(new) {
                        r2()
                    }
                })
                .on_delete(move |_: &Arc<Node>| r3()),
        ));
        Arc::new(Self { api, services, nodes, queue })
    }

    /// The work queue.
    pub fn queue(&self) -> &Arc<WorkQueue<String>> {
        &self.queue
    }

    /// Sets the Service's ingress to the Ready nodes' addresses (or clears it).
    pub async fn sync_service(&self, key: &str) -> ReconcileResult {
        let Some(svc) = self.services.store().get(key) else { return Ok(Action::AwaitChange) };
        let want: Vec<LoadBalancerIngress> = if is_load_balancer(&svc) {
            let ips: BTreeSet<String> = self.nodes.store().list().iter().filter_map(|n| node_address(n)).collect();
            ips.into_iter()
                .map(|ip| LoadBalancerIngress { ip: Some(ip), ip_mode: Some("VIP".into()), ..Default::default() })
                .collect()
        } else {
            Vec::new()
        };
        let have = svc.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|l| l.ingress.clone());
        if have.clone().unwrap_or_default() == want {
            return Ok(Action::AwaitChange);
        }
        let mut updated = (*svc).clone();
        let status = updated.status.get_or_insert_with(ServiceStatus::default);
        status.load_balancer = Some(LoadBalancerStatus { ingress: (!want.is_empty()).then_some(want) });
        match self.api.update_status_typed(&updated).await {
            Ok(_) => Ok(Action::AwaitChange),
            Err(e) if is_not_found(&e) => Ok(Action::AwaitChange),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait]
impl Reconciler for ServiceLbController {
    async fn reconcile(&self, key: &str) -> ReconcileResult {
        self.sync_service(key).await
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeStatus, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::runtime::watcher::Event;

    use super::*;
    use skiff_runtime::fake::FakeApi;

    fn node(name: &str, ip: &str, ready: bool) -> Node {
        Node {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress { type_: "InternalIP".into(), address: ip.into() }]),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_load_balancer_service_lists_the_ready_nodes_addresses() {
        let api = Arc::new(FakeApi::new());
        let factory = SharedInformerFactory::for_tests();
        let c = ServiceLbController::new(api.clone(), &factory, Arc::new(WorkQueue::new()));
        let svc = Service {
            metadata: ObjectMeta { name: Some("lb".into()), namespace: Some("default".into()), ..Default::default() },
            spec: Some(ServiceSpec { type_: Some("LoadBalancer".into()), ..Default::default() }),
            ..Default::default()
        };
        api.seed(&svc);
        factory.informer::<Service>().handle_event(Event::Apply(svc));
        factory.informer::<Node>().handle_event(Event::Apply(node("b", "192.0.2.2", true)));
        factory.informer::<Node>().handle_event(Event::Apply(node("a", "192.0.2.1", true)));
        factory.informer::<Node>().handle_event(Event::Apply(node("c", "192.0.2.3", false)));
        assert_eq!(c.queue().len(), 1);
        c.sync_service("default/lb").await.unwrap();
        let got: Service = api.object_typed(Some("default"), "lb").unwrap();
        let ips: Vec<String> =
            got.status.unwrap().load_balancer.unwrap().ingress.unwrap().into_iter().filter_map(|i| i.ip).collect();
        assert_eq!(ips, ["192.0.2.1", "192.0.2.2"]);
    }
}
