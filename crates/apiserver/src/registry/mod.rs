//! The registry (k8s.io/apiserver `pkg/registry`): Kubernetes object semantics over the
//! store. [`store`] is the generic store (`genericregistry.Store`), [`strategy`] the create,
//! update and delete strategies it applies, with the per-resource ones in [`core`] and [`batch`]; conversion,
//! defaulting, typed decoding, validation and field ownership are its helpers; [`crd`] serves custom
//! resources; [`subresources`] and [`virtual_resources`] are the REST storages that are not
//! plain objects.

pub mod apps;
pub mod batch;
pub mod convert;
pub mod core;
pub mod crd;
pub mod go_json;
pub mod machinery;
pub mod managedfields;
pub mod schema;
pub mod store;
pub mod strategy;
pub mod subresources;
pub mod virtual_resources;
