//! Encryption of stored values at rest (k8s.io/apiserver `pkg/storage/value`;
//! <https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/>): `--encryption-provider-config`
//! names, per resource, an ordered list of providers; a write uses the first, a read the one
//! whose prefix the stored value carries, so keys rotate by reordering the list.
//!
//! [`encryptionconfig`] reads the `EncryptionConfiguration` file; [`transformer`] holds the
//! providers (`aescbc`, `aesgcm`, `secretbox`, `identity`) and writes what kube-apiserver writes
//! (`k8s:enc:<provider>:v1:<key name>:` + the provider's bytes), so a store written by one can
//! be read by the other with the same configuration; [`TransformingBackend`] applies them to a
//! [`skiff_store::Backend`] by key prefix, below the generic store and the watch caches, which
//! see plain values.

pub mod encryptionconfig;
pub mod transformer;

mod backend;

pub use backend::TransformingBackend;
