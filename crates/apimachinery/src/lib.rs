//! Kubernetes API machinery for skiff: the pieces every layer shares and no crate provides.
//!
//! - [`status`]: [`status::ApiError`], every API failure as a `metav1.Status`.
//! - [`names`]: DNS-1123 / qualified-name / label-value checks with Kubernetes' messages.
//! - [`selector`]: label selectors ([`selector::LabelSelector`]) and field selectors
//!   ([`selector::FieldSelector`]).
//! - [`fields`]: the selectable fields of each kind and their values.
//! - [`patch`]: strategic merge patch with Kubernetes' patch strategies.
//! - [`validation`]: per-type validation into 422 causes.
//! - [`defaults`]: per-type defaulting.
//! - [`table`]: server-side printing (Table columns and cells).
//! - [`quantity`]: `resource.Quantity` parsing, arithmetic and canonical printing.
//! - [`autoscaling`]: HorizontalPodAutoscaler conversion between autoscaling/v1 and v2.
//! - [`cron`]: CronJob schedules and time zones, as Kubernetes parses and steps them.
//! - [`scheduling`]: node affinity and taint toleration matching (component-helpers).
//!
//! Everything works on raw `serde_json::Value` objects, so unknown fields survive. This crate
//! knows nothing about HTTP or the store.

pub mod autoscaling;
pub mod cron;
pub mod defaults;
pub mod fields;
pub mod names;
pub mod patch;
pub mod quantity;
pub mod scheduling;
pub mod selector;
pub mod status;
pub mod table;
pub mod validation;

pub use selector::{FieldSelector, LabelSelector};
pub use status::ApiError;
