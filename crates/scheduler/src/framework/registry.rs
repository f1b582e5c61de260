//! `Registry`: plugin name → factory. The in-tree registry is [`crate::plugins::in_tree_registry`];
//! custom (out-of-tree) plugins are added with [`Registry::register`].

use std::collections::BTreeMap;
use std::sync::Arc;

use super::interface::{Handle, Plugin};

/// Builds a plugin from its `pluginConfig` args (JSON, `None` when not configured) and the
/// profile's [`Handle`] (`frameworkruntime.PluginFactory`).
pub type PluginFactory =
    Arc<dyn Fn(Option<&serde_json::Value>, &Handle) -> Result<Arc<dyn Plugin>, String> + Send + Sync>;

/// Plugin factories by name (`frameworkruntime.Registry`).
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<String, PluginFactory>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a factory.
    ///
    /// # Errors
    /// `a plugin named X already exists` when the name is taken.
    pub fn register(
        &mut self,
        name: &str,
        factory: impl Fn(Option<&serde_json::Value>, &Handle) -> Result<Arc<dyn Plugin>, String> + Send + Sync + 'static,
    ) -> Result<(), String> {
        if self.factories.contains_key(name) {
            return Err(format!("a plugin named {name} already exists"));
        }
        self.factories.insert(name.to_string(), Arc::new(factory));
        Ok(())
    }

    /// Adds every factory of `other`.
    ///
    /// # Errors
    /// A name present in both.
    pub fn merge(&mut self, other: &Registry) -> Result<(), String> {
        for (name, f) in &other.factories {
            if self.factories.contains_key(name) {
                return Err(format!("a plugin named {name} already exists"));
            }
            self.factories.insert(name.clone(), f.clone());
        }
        Ok(())
    }

    /// The factory for `name`.
    pub fn get(&self, name: &str) -> Option<&PluginFactory> {
        self.factories.get(name)
    }

    /// Registered names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }
}
