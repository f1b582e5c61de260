//! Kubernetes API machinery for skiff: the pieces every layer shares and no crate provides.
//!
//! - [`status`]: [`status::ApiError`], every API failure as a `metav1.Status`.
//! - [`names`]: DNS-1123 / qualified-name / label-value checks with Kubernetes' messages.
//! - [`selector`]: label selectors ([`selector::LabelSelector`]) and field selectors
//!   ([`selector::FieldSelector`]).
//!
//! This crate knows nothing about HTTP or the store.

pub mod names;
pub mod selector;
pub mod status;

pub use selector::{FieldSelector, LabelSelector};
pub use status::ApiError;
