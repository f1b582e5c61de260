//! Storage between the registry and the store (k8s.io/apiserver `pkg/storage`): the watch
//! caches ([`watchcache`], the `Cacher`).

pub mod watchcache;
