//! The watch hub: fans committed revisions out to watchers, in revision order, exactly once.
//!
//! Like etcd's `watchableStore`, a watcher is either **unsynced** (its task reads history from
//! the database to catch up) or **synced** (registered here; the writer thread hands it each
//! committed batch). The switch happens under the hub's lock: a watcher registers only when the
//! revision it has delivered up to is at least [`HubState::published`], and the writer publishes
//! a batch and advances `published` under the same lock, so no revision is skipped or repeated.
//!
//! The writer never waits for a watcher: synced watchers get `try_send` on a bounded channel.
//! When one is full the watcher is demoted to unsynced at the last revision it received, and its
//! task catches up from history at the consumer's pace. Memory is bounded by the channel
//! capacity, whatever the consumer does.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc};

use crate::{Event, EventType, KeyValue, Result, Revision, WatchResponse};

/// Messages a watch channel holds before its watcher is demoted to catching up from history.
pub(super) const WATCH_CHANNEL_CAPACITY: usize = 128;

/// A committed write as the writer thread hands it to the hub.
#[derive(Debug)]
pub(super) struct PendingEvent {
    pub(super) rev: Revision,
    pub(super) key: String,
    pub(super) kind: EventType,
    /// The new incarnation's create revision (0 for a delete).
    pub(super) create_rev: Revision,
    /// The new value (empty for a delete).
    pub(super) value: Vec<u8>,
    /// mod_revision of the value this write replaced; 0 for a create.
    pub(super) prev_rev: Revision,
    /// create_revision of the value this write replaced.
    pub(super) prev_create_rev: Revision,
    /// The replaced value, loaded lazily (only when a synced watcher needs it).
    pub(super) prev_value: Option<Vec<u8>>,
}

impl PendingEvent {
    fn to_event(&self) -> Event {
        Event {
            kind: self.kind,
            kv: KeyValue {
                key: self.key.clone(),
                value: self.value.clone(),
                create_revision: self.create_rev,
                mod_revision: self.rev,
            },
            prev_kv: (self.prev_rev > 0).then(|| KeyValue {
                key: self.key.clone(),
                value: self.prev_value.clone().unwrap_or_default(),
                create_revision: self.prev_create_rev,
                mod_revision: self.prev_rev,
            }),
        }
    }
}

struct Entry {
    prefix: String,
    tx: mpsc::Sender<Result<WatchResponse>>,
    /// Every matching event with a revision at or below this has been delivered.
    after: Revision,
    synced: bool,
    /// Something was sent since the last progress tick (so the stream was not idle).
    sent_since_tick: bool,
    notify: Arc<Notify>,
}

struct HubState {
    /// Every revision at or below this is committed and has been handed to synced watchers.
    published: Revision,
    closed: bool,
    next_id: u64,
    watchers: HashMap<u64, Entry>,
}

/// The fan-out point between the writer thread and watch tasks.
pub(super) struct Hub {
    state: Mutex<HubState>,
}

/// What a watch task learns when it tries to become synced.
pub(super) enum Register {
    /// Registered: the writer now delivers to it.
    Synced,
    /// The hub has published up to this revision; catch up to it first.
    Behind(Revision),
    /// The store is closed.
    Closed,
}

/// What a synced watch task learns when it checks on itself.
pub(super) enum Status {
    /// Still synced.
    Synced,
    /// Demoted: catch up from history after this revision.
    Demoted(Revision),
    /// Gone (consumer hung up, or the store closed): the task ends.
    Gone,
}

impl Hub {
    pub(super) fn new(published: Revision) -> Self {
        Self { state: Mutex::new(HubState { published, closed: false, next_id: 1, watchers: HashMap::new() }) }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// A fresh watcher id.
    pub(super) fn next_id(&self) -> u64 {
        let mut st = self.state.lock();
        st.next_id += 1;
        st.next_id
    }

    /// Registers a "from now on" watcher at the current published revision, returning that
    /// revision, or `None` when the store is closed.
    pub(super) fn register_now(
        &self,
        id: u64,
        prefix: &str,
        tx: &mpsc::Sender<Result<WatchResponse>>,
        notify: &Arc<Notify>,
    ) -> Option<Revision> {
        let mut st = self.state.lock();
        if st.closed {
            return None;
        }
        let after = st.published;
        st.watchers.insert(id, Entry::new(prefix, tx, after, notify));
        Some(after)
    }

    /// Registers the watcher as synced if it has caught up with everything published.
    pub(super) fn try_register(
        &self,
        id: u64,
        prefix: &str,
        tx: &mpsc::Sender<Result<WatchResponse>>,
        after: Revision,
        notify: &Arc<Notify>,
    ) -> Register {
        let mut st = self.state.lock();
        if st.closed {
            return Register::Closed;
        }
        if after < st.published {
            return Register::Behind(st.published);
        }
        st.watchers.insert(id, Entry::new(prefix, tx, after, notify));
        Register::Synced
    }

    /// Checks a synced watcher after a wake-up; a demoted one is removed (its task re-registers
    /// after catching up).
    pub(super) fn status(&self, id: u64) -> Status {
        let mut st = self.state.lock();
        match st.watchers.get(&id) {
            None => Status::Gone,
            Some(e) if e.synced => Status::Synced,
            Some(e) => {
                let after = e.after;
                st.watchers.remove(&id);
                Status::Demoted(after)
            }
        }
    }

    /// Forgets a watcher whose consumer hung up.
    pub(super) fn remove(&self, id: u64) {
        self.state.lock().watchers.remove(&id);
    }

    /// A progress tick for one watcher: sends a bookmark at the published revision if nothing
    /// was sent to it since the previous tick.
    pub(super) fn progress(&self, id: u64) -> Status {
        let mut st = self.state.lock();
        let published = st.published;
        let Some(e) = st.watchers.get_mut(&id) else { return Status::Gone };
        if !e.synced {
            let after = e.after;
            st.watchers.remove(&id);
            return Status::Demoted(after);
        }
        if std::mem::take(&mut e.sent_since_tick) {
            return Status::Synced;
        }
        match e.tx.try_send(Ok(WatchResponse::Progress { revision: published })) {
            // A full channel means the consumer is busy, not idle: no bookmark needed.
            Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => Status::Synced,
            Err(mpsc::error::TrySendError::Closed(_)) => {
                st.watchers.remove(&id);
                Status::Gone
            }
        }
    }

    /// Hands one committed batch (revisions up to `last_rev`, in order) to the synced watchers
    /// and advances the published revision. `load_prev` reads a replaced value by revision when
    /// a watcher needs it and the writer did not have it at hand.
    pub(super) fn publish(
        &self,
        last_rev: Revision,
        events: &mut [PendingEvent],
        load_prev: &mut dyn FnMut(Revision) -> Result<Vec<u8>>,
    ) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut gone = Vec::new();
        for (id, w) in st.watchers.iter_mut() {
            if !w.synced {
                continue;
            }
            let mut out = Vec::new();
            let mut failed = false;
            for ev in events.iter_mut() {
                if ev.rev <= w.after || !ev.key.starts_with(w.prefix.as_str()) {
                    continue;
                }
                if ev.prev_rev > 0 && ev.prev_value.is_none() {
                    match load_prev(ev.prev_rev) {
                        Ok(v) => ev.prev_value = Some(v),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot load a previous value for watchers; they catch up from history");
                            failed = true;
                            break;
                        }
                    }
                }
                out.push(ev.to_event());
            }
            if failed {
                w.synced = false;
                w.notify.notify_one();
                continue;
            }
            if out.is_empty() {
                w.after = w.after.max(last_rev);
                continue;
            }
            match w.tx.try_send(Ok(WatchResponse::Events(out))) {
                Ok(()) => {
                    w.after = last_rev;
                    w.sent_since_tick = true;
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // The consumer is behind: stop pushing, let its task read history instead.
                    w.synced = false;
                    w.notify.notify_one();
                }
                Err(mpsc::error::TrySendError::Closed(_)) => gone.push(*id),
            }
        }
        for id in gone {
            st.watchers.remove(&id);
        }
        st.published = st.published.max(last_rev);
    }

    /// Closes the hub: every watch stream ends (its consumer resumes elsewhere).
    pub(super) fn close(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        for (_, w) in st.watchers.drain() {
            w.notify.notify_one();
        }
    }
}

impl Entry {
    fn new(prefix: &str, tx: &mpsc::Sender<Result<WatchResponse>>, after: Revision, notify: &Arc<Notify>) -> Self {
        Self {
            prefix: prefix.to_string(),
            tx: tx.clone(),
            after,
            synced: true,
            sent_since_tick: false,
            notify: notify.clone(),
        }
    }
}
