//! The built-in admission plugins. Each module has a pure function doing the work over JSON
//! objects and what it needs from [`super::AdmissionLookup`], and a plugin type implementing
//! [`super::MutatingAdmission`] and/or [`super::ValidatingAdmission`].

pub mod default_storage_class;
pub mod default_toleration_seconds;
pub mod limit_ranger;
pub mod namespace_lifecycle;
pub mod node_restriction;
pub mod pod_security;
pub mod priority;
pub mod rbac_escalation;
pub mod resource_quota;
pub mod service_account;
pub mod storage_object_in_use_protection;
