//! What kube-apiserver runs besides serving requests (k8s.io/kubernetes `pkg/controlplane`):
//! the objects every cluster has from its first start ([`bootstrap`]), the `kubernetes` Service
//! and its endpoints ([`kubernetesservice`]), the `kube-dns` Service of the in-process cluster
//! DNS ([`kubedns`]), skiff's node join endpoints ([`join`]), the cluster's bootstrap data
//! shared by every server on one datastore ([`bootstrapdata`]) and the
//! `extension-apiserver-authentication` ConfigMap ([`clusterauthenticationtrust`]).

pub mod bootstrap;
pub mod bootstrapdata;
pub mod clusterauthenticationtrust;
pub mod join;
pub mod kubedns;
pub mod kubernetesservice;
