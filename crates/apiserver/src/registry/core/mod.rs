//! Strategies of the core (`v1`) resources that differ from the generic ones, one module per
//! resource as kube-apiserver's `pkg/registry/core/<resource>/strategy.go`.

pub mod eviction;
pub mod namespace;
pub mod persistentvolume;
pub mod pod;
pub mod service;
