//! Admission, the stage between decoding/defaulting and validation of every write
//! (k8s.io/apiserver `pkg/admission`,
//! <https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/>): [`seam`]
//! is the interface the registry calls, [`chain`] the running server's plugins in
//! kube-apiserver's order. What the plugins read but do not write themselves — quota status,
//! `kube-root-ca.crt` — is kept current by kube-controller-manager's controllers
//! (`skiff-controllers`' `resourcequota` and `rootcacertpublisher`), as in Kubernetes.
//!
//! Admission sits below the registry: it reads the watch caches and the resource table, never
//! the store's code.

pub mod chain;
pub mod seam;
