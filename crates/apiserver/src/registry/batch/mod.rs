//! Strategies of the batch resources that differ from the generic ones, as kube-apiserver's
//! `pkg/registry/batch/<resource>/strategy.go`.

pub mod cronjob;
pub mod job;
