//! Strategies of the apps resources that differ from the generic ones, as kube-apiserver's
//! `pkg/registry/apps/<resource>/strategy.go`.

pub mod daemonset;
