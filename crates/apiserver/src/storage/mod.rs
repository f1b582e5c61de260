//! Storage between the registry and the store (k8s.io/apiserver `pkg/storage`): the watch
//! caches ([`watchcache`], the `Cacher`), their [`listers`], and encryption of stored values
//! at rest ([`value`]).

pub mod listers;
pub mod value;
pub mod watchcache;
