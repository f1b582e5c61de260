//! A deduplicating work queue with Kubernetes' `workqueue` semantics: a key is queued at most
//! once, is never handed to two workers at once, and a key added while it is being processed is
//! queued again when the worker calls [`WorkQueue::done`].

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

struct Inner<K> {
    queue: VecDeque<K>,
    dirty: HashSet<K>,
    processing: HashSet<K>,
}

/// The queue; share it in an `Arc`.
pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> Self {
        WorkQueue {
            inner: Mutex::new(Inner { queue: VecDeque::new(), dirty: HashSet::new(), processing: HashSet::new() }),
            notify: Notify::new(),
        }
    }

    /// Queues `key` unless it is already waiting.
    pub fn add(&self, key: K) {
        let mut inner = self.inner.lock();
        if !inner.dirty.insert(key.clone()) {
            return;
        }
        if inner.processing.contains(&key) {
            return;
        }
        inner.queue.push_back(key);
        drop(inner);
        self.notify.notify_one();
    }

    /// Queues `key` after `delay`.
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            this.add(key);
        });
    }

    /// Waits for the next key and marks it as being processed.
    pub async fn get(&self) -> K {
        loop {
            let notified = self.notify.notified();
            {
                let mut inner = self.inner.lock();
                if let Some(key) = inner.queue.pop_front() {
                    inner.dirty.remove(&key);
                    inner.processing.insert(key.clone());
                    let more = !inner.queue.is_empty();
                    drop(inner);
                    if more {
                        self.notify.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    /// Marks `key` as processed; queues it again if it was added meanwhile.
    pub fn done(&self, key: &K) {
        let mut inner = self.inner.lock();
        inner.processing.remove(key);
        if inner.dirty.contains(key) {
            inner.queue.push_back(key.clone());
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// Number of keys waiting (not counting those being processed).
    pub fn len(&self) -> usize {
        self.inner.lock().queue.len()
    }

    /// True when no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_added_twice_is_queued_once() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, "a");
        assert_eq!(q.get().await, "b");
    }

    #[tokio::test]
    async fn a_key_added_while_processing_is_requeued_after_done() {
        let q = WorkQueue::new();
        q.add("a");
        let k = q.get().await;
        q.add("a");
        assert!(q.is_empty(), "a key being processed is not handed out again");
        q.done(&k);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, "a");
    }

    #[tokio::test]
    async fn get_waits_for_an_add() {
        let q = Arc::new(WorkQueue::new());
        let q2 = Arc::clone(&q);
        let waiter = tokio::spawn(async move { q2.get().await });
        tokio::task::yield_now().await;
        q.add(7);
        assert_eq!(waiter.await.ok(), Some(7));
    }
}
