//! What kube-apiserver runs besides serving requests (k8s.io/kubernetes `pkg/controlplane`):
//! the objects every cluster has from its first start ([`bootstrap`]), the `kubernetes` Service
//! and its endpoints ([`kubernetesservice`]) and skiff's node join endpoints ([`join`]).

pub mod bootstrap;
pub mod join;
pub mod kubernetesservice;
