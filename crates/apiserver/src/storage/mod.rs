//! Storage between the registry and the store (k8s.io/apiserver `pkg/storage`): the watch
//! caches ([`watchcache`], the `Cacher`) and
//! their [`listers`].

pub mod listers;
pub mod watchcache;
