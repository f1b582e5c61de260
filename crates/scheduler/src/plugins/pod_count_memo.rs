//! `PodCountMemo`: per-node pod counts ("how many pods on this node does this selector pick")
//! remembered across scheduling cycles, so PreFilter/PreScore of the topology-counting plugins
//! (InterPodAffinity, PodTopologySpread) cost O(nodes) instead of O(pods) per cycle.
//!
//! Kubernetes recounts every node's pods in each PreFilter; the answer only depends on the node's
//! pods, and between two cycles the cache changes only the few nodes that got (or lost) a pod.
//! Snapshot nodes are immutable `Arc<NodeInfo>`s (the cache copies on write), so a count is
//! reused exactly when the snapshot still holds the *same* `Arc` it was computed from. The memo
//! keeps a `Weak` to that allocation: the address cannot be reused while the `Weak` lives, so
//! pointer equality means identical content. Scheduling decisions are unchanged.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::framework::NodeInfo;

/// How many distinct selectors are remembered (least recently used are dropped).
const CAPACITY: usize = 8;

struct Entry {
    key: String,
    last_used: u64,
    /// Aligned with the node slice of the last call; positions are re-validated by pointer.
    slots: Vec<Option<(Weak<NodeInfo>, i64)>>,
}

/// A small LRU of per-node counts, keyed by a string that identifies what is counted (selector,
/// namespace, …). Thread-safe; meant to live in a plugin.
#[derive(Default)]
pub(crate) struct PodCountMemo {
    inner: Mutex<(u64, Vec<Entry>)>,
}

/// The counts of one key during one call of [`PodCountMemo::with`].
pub(crate) struct CountView<'a> {
    slots: &'a mut Vec<Option<(Weak<NodeInfo>, i64)>>,
}

impl CountView<'_> {
    /// The count for `node`, the `i`-th node of the slice given to [`PodCountMemo::with`];
    /// `count` computes it when the node changed since it was last counted.
    pub(crate) fn get(&mut self, i: usize, node: &Arc<NodeInfo>, count: impl FnOnce(&NodeInfo) -> i64) -> i64 {
        if let Some(Some((w, n))) = self.slots.get(i)
            && std::ptr::eq(w.as_ptr(), Arc::as_ptr(node))
        {
            return *n;
        }
        let n = count(node);
        if i < self.slots.len() {
            self.slots[i] = Some((Arc::downgrade(node), n));
        }
        n
    }
}

impl PodCountMemo {
    /// Runs `f` with the counts remembered for `key` over `num_nodes` nodes (the slice the caller
    /// indexes into [`CountView::get`]).
    pub(crate) fn with<R>(&self, key: &str, num_nodes: usize, f: impl FnOnce(&mut CountView<'_>) -> R) -> R {
        let mut g = self.inner.lock();
        let (clock, entries) = &mut *g;
        *clock += 1;
        let i = match entries.iter().position(|e| e.key == key) {
            Some(i) => i,
            None => {
                let fresh = Entry { key: key.to_string(), last_used: 0, slots: Vec::new() };
                if entries.len() < CAPACITY {
                    entries.push(fresh);
                    entries.len() - 1
                } else {
                    let (oldest, _) =
                        entries.iter().enumerate().min_by_key(|(_, e)| e.last_used).unwrap_or((0, &entries[0]));
                    entries[oldest] = fresh;
                    oldest
                }
            }
        };
        let e = &mut entries[i];
        e.last_used = *clock;
        e.slots.resize(num_nodes, None);
        f(&mut CountView { slots: &mut e.slots })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn node(name: &str) -> Arc<NodeInfo> {
        Arc::new(NodeInfo::new(name))
    }

    #[test]
    fn counts_are_reused_for_the_same_node_and_recomputed_for_a_changed_one() {
        let memo = PodCountMemo::default();
        let calls = Cell::new(0);
        let count = |_: &NodeInfo| {
            calls.set(calls.get() + 1);
            7
        };
        let mut nodes = vec![node("a"), node("b")];
        let sum = |nodes: &[Arc<NodeInfo>]| {
            memo.with("k", nodes.len(), |v| nodes.iter().enumerate().map(|(i, n)| v.get(i, n, count)).sum::<i64>())
        };
        assert_eq!(sum(&nodes), 14);
        assert_eq!(calls.get(), 2);
        assert_eq!(sum(&nodes), 14);
        assert_eq!(calls.get(), 2, "unchanged nodes are not recounted");
        nodes[1] = node("b");
        sum(&nodes);
        assert_eq!(calls.get(), 3, "a replaced node is recounted");
    }

    #[test]
    fn keys_are_separate_and_the_least_recently_used_is_dropped() {
        let memo = PodCountMemo::default();
        let n = node("a");
        for k in 0..CAPACITY {
            assert_eq!(memo.with(&k.to_string(), 1, |v| v.get(0, &n, |_| k as i64)), k as i64);
        }
        // Key 0 is still there; a new key evicts key 1 (the oldest now).
        assert_eq!(memo.with("0", 1, |v| v.get(0, &n, |_| 100)), 0);
        assert_eq!(memo.with("new", 1, |v| v.get(0, &n, |_| 5)), 5);
        assert_eq!(memo.with("1", 1, |v| v.get(0, &n, |_| 100)), 100);
        assert_eq!(memo.with("0", 1, |v| v.get(0, &n, |_| 100)), 0);
    }
}
