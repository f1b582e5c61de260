//! `CycleState`: per-attempt scratch space plugins share between extension points.

use std::any::Any;
use std::collections::HashSet;

/// Data a plugin stores in [`CycleState`] (`framework.StateData`). Any `Clone + Send + Sync`
/// type qualifies; the clone is used when preemption simulates removing pods.
pub trait StateData: Any + Send + Sync {
    /// A boxed deep copy.
    fn clone_data(&self) -> Box<dyn StateData>;
    /// Upcast for reading.
    fn as_any(&self) -> &dyn Any;
    /// Upcast for writing.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_data(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// State of one scheduling attempt of one pod (`framework.CycleState`).
///
/// Written at PreFilter/PreScore/Reserve, read at Filter/Score/bind time. Keys are conventionally
/// `"PreFilter" + plugin name`. It is created fresh for each attempt and moved into the binding
/// cycle, so it never outlives the pod's attempt.
#[derive(Default)]
pub struct CycleState {
    // A handful of entries (one or two per plugin): a linear scan comparing the key's address
    // first beats hashing the key on every per-node read.
    storage: Vec<(&'static str, Box<dyn StateData>)>,
    /// Plugins whose PreFilter returned Skip: their Filter is not run this cycle.
    pub skip_filter_plugins: HashSet<String>,
    /// Plugins whose PreScore returned Skip: their Score is not run this cycle.
    pub skip_score_plugins: HashSet<String>,
    /// Bit i set: the i-th Filter plugin of the profile is skipped (fast path of
    /// `skip_filter_plugins`, maintained by the framework runtime).
    pub(crate) skip_filter_mask: u64,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        Self {
            storage: self.storage.iter().map(|(k, v)| (*k, (**v).clone_data())).collect(),
            skip_filter_plugins: self.skip_filter_plugins.clone(),
            skip_score_plugins: self.skip_score_plugins.clone(),
            skip_filter_mask: self.skip_filter_mask,
        }
    }
}

impl CycleState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `data` under `key`, replacing what was there.
    pub fn write<T: StateData>(&mut self, key: &'static str, data: T) {
        match self.position(key) {
            Some(i) => self.storage[i].1 = Box::new(data),
            None => self.storage.push((key, Box::new(data))),
        }
    }

    fn position(&self, key: &'static str) -> Option<usize> {
        self.storage.iter().position(|(k, _)| std::ptr::eq(*k, key) || *k == key)
    }

    /// Reads the value under `key` if it exists and has type `T`.
    pub fn read<T: 'static>(&self, key: &'static str) -> Option<&T> {
        let i = self.position(key)?;
        (*self.storage[i].1).as_any().downcast_ref::<T>()
    }

    /// Mutable access to the value under `key` if it exists and has type `T`.
    pub fn read_mut<T: 'static>(&mut self, key: &'static str) -> Option<&mut T> {
        let i = self.position(key)?;
        (*self.storage[i].1).as_any_mut().downcast_mut::<T>()
    }

    /// Removes the value under `key`.
    pub fn delete(&mut self, key: &'static str) {
        if let Some(i) = self.position(key) {
            self.storage.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Counter(i32);

    #[test]
    fn read_returns_what_write_stored_and_clone_is_deep() {
        let mut s = CycleState::new();
        s.write("k", Counter(1));
        let copy = s.clone();
        s.read_mut::<Counter>("k").unwrap().0 = 5;
        assert_eq!(s.read::<Counter>("k"), Some(&Counter(5)));
        assert_eq!(copy.read::<Counter>("k"), Some(&Counter(1)));
        assert_eq!(s.read::<String>("k"), None);
    }
}
