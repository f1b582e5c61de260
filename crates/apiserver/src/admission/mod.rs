//! Admission, the stage between decoding/defaulting and validation of every write
//! (k8s.io/apiserver `pkg/admission`,
//! <https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/>): [`seam`]
//! is the interface the registry calls, [`chain`] the running server's plugins in
//! kube-apiserver's order. Beside them run two controllers that keep what the plugins read
//! current: [`resourcequota`] and [`rootcacertpublisher`].
//!
//! Admission sits below the registry: it reads the watch caches and the resource table, never
//! the store's code.

pub mod chain;
pub mod resourcequota;
pub mod rootcacertpublisher;
pub mod seam;
