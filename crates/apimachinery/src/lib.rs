//! Kubernetes API machinery for skiff: the pieces every layer shares and no crate provides.
//!
//! - [`status`]: [`status::ApiError`], every API failure as a `metav1.Status`.
//!
//! This crate knows nothing about HTTP or the store.

pub mod status;

pub use status::ApiError;
