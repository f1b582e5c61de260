//! skiff's revisioned key-value store: etcd v3 semantics behind one [`Backend`] trait.
//!
//! Everything in skiff that needs state is a client of this store, through the API server.
//! The model is etcd's MVCC store (see `go.etcd.io/etcd/server/mvcc` and the etcd API
//! guarantees, <https://etcd.io/docs/v3.5/learning/api_guarantees/>):
//!
//! - One cluster-wide **revision** (an `i64`, starting at 1 for an empty store) is the single
//!   clock. Every successful write (create, update, delete) increments it by exactly one.
//! - Each [`KeyValue`] carries `create_revision` (the revision that created the current
//!   incarnation of the key) and `mod_revision` (the revision of its last write). The API server
//!   uses `mod_revision` as the object's `resourceVersion`.
//! - Reads are served from one consistent snapshot at a revision ([`Backend::range`]); older
//!   revisions are readable until they are compacted.
//! - [`Backend::watch`] delivers every PUT/DELETE after a revision, with the previous value, in
//!   revision order, exactly once, whole revisions at a time, resumable from any retained
//!   revision; idle streams carry [`WatchResponse::Progress`] bookmarks.
//!
//! Two backends implement the contract and pass the same conformance suite
//! (`conformance`, behind the `testing` feature): [`sqlite::SqliteBackend`] (embedded, the default) and
//! [`etcd::EtcdBackend`] (a real etcd v3 cluster).
//!
//! Keys are laid out like Kubernetes': `/registry/<resource>/<namespace>/<name>` for
//! namespaced objects and `/registry/<resource>/<name>` for cluster-scoped ones.

use std::time::Duration;

use async_trait::async_trait;

// The suite backends' integration tests expand; test support, not part of the store's API.
#[cfg(any(test, feature = "testing"))]
pub mod conformance;
pub mod etcd;
pub mod sqlite;

/// A store revision. `0` means "none" (e.g. "current" in a [`RangeRequest`]).
pub type Revision = i64;

/// The largest value the store accepts, in bytes: 1.5 MiB, etcd's default request limit
/// (`--max-request-bytes`). Larger values fail with [`Error::ValueTooLarge`], which the API
/// server turns into HTTP 413.
pub const MAX_VALUE_BYTES: usize = 1536 * 1024;

/// One key at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The full key, e.g. `/registry/pods/default/nginx`.
    pub key: String,
    /// The stored bytes (JSON for Kubernetes objects). Empty for the `kv` of a delete event.
    pub value: Vec<u8>,
    /// Revision that created this incarnation of the key.
    pub create_revision: Revision,
    /// Revision of the last write to the key (for a delete event: the delete's revision).
    pub mod_revision: Revision,
}

/// What [`Backend::range`] reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeRequest {
    /// Every key that starts with this string is in range (e.g. `/registry/pods/default/`).
    pub prefix: String,
    /// Only keys strictly greater than this one (the continue token of a paginated list).
    pub start_after: Option<String>,
    /// At most this many keys; `0` means no limit.
    pub limit: usize,
    /// Read the snapshot at this revision; `0` means the current revision. Fails with
    /// [`Error::Compacted`] when the revision is older than the compacted revision, and with
    /// [`Error::FutureRevision`] when it is newer than the current one.
    pub revision: Revision,
}

/// What [`Backend::range`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeResponse {
    /// Keys in ascending byte order, at most `limit` of them.
    pub kvs: Vec<KeyValue>,
    /// The snapshot revision these keys were read at. A follow-up page passes it back as
    /// [`RangeRequest::revision`] so the whole list is one consistent snapshot.
    pub revision: Revision,
    /// True when more keys in range follow the last one returned.
    pub more: bool,
}

/// The kind of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The key was created or updated.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Put or Delete.
    pub kind: EventType,
    /// The key after the change. For a delete: `value` is empty, `mod_revision` is the
    /// delete's revision and `create_revision` is 0, as in etcd.
    pub kv: KeyValue,
    /// The key's value just before this change; `None` when the key did not exist (a create).
    pub prev_kv: Option<KeyValue>,
}

/// One message on a watch stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchResponse {
    /// Events of one or more whole revisions, in revision order. A revision's events are never
    /// split across two responses.
    Events(Vec<Event>),
    /// A bookmark: every event up to and including `revision` that matches the watch has been
    /// delivered. Sent while the stream is idle (see [`Backend::watch`]).
    Progress {
        /// The store revision the watcher is caught up to.
        revision: Revision,
    },
}

/// A watch stream. Dropping it cancels the watch.
pub struct WatchStream {
    rx: tokio::sync::mpsc::Receiver<Result<WatchResponse>>,
}

impl WatchStream {
    /// Wraps the receiving end of a channel that a backend's watch task feeds.
    pub fn new(rx: tokio::sync::mpsc::Receiver<Result<WatchResponse>>) -> Self {
        Self { rx }
    }

    /// The next message; `None` once the stream has ended (the backend closed it or failed
    /// after sending an error). A consumer that sees `None` resumes with a new watch from the
    /// last revision it saw.
    pub async fn next(&mut self) -> Option<Result<WatchResponse>> {
        self.rx.recv().await
    }
}

/// Store errors. Each maps to one Kubernetes `Status` in the API server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `create` on a key that exists (HTTP 409 AlreadyExists).
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The key.
        key: String,
    },
    /// `update`/`delete` on a key that does not exist (HTTP 404 NotFound).
    #[error("key {key:?} not found")]
    NotFound {
        /// The key.
        key: String,
    },
    /// The compare-and-swap precondition failed: the key's `mod_revision` is not the expected
    /// one (HTTP 409 Conflict). Nothing was written.
    #[error("key {key:?} was modified: expected mod_revision {expected}, found {actual}")]
    Conflict {
        /// The key.
        key: String,
        /// The mod_revision the caller expected.
        expected: Revision,
        /// The key's current mod_revision.
        actual: Revision,
    },
    /// The requested revision has been compacted away (HTTP 410 Gone / "Expired").
    #[error("required revision {requested} has been compacted (compacted revision {compacted})")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The store's compacted revision.
        compacted: Revision,
    },
    /// The requested revision is newer than the store's current revision.
    #[error("revision {requested} is in the future (current revision {current})")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },
    /// The value exceeds [`MAX_VALUE_BYTES`] (HTTP 413 RequestEntityTooLarge).
    #[error("value of {size} bytes exceeds the limit of {limit} bytes")]
    ValueTooLarge {
        /// The value's size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The backend cannot be reached (etcd down) or timed out. Retry later (HTTP 503/504).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The database file is corrupt, missing or unreadable at startup. Names the file.
    #[error("store database {path}: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Any other backend failure (HTTP 500).
    #[error("store internal error: {0}")]
    Internal(String),
}

/// Result with the store's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A revisioned key-value store with etcd v3 semantics. Both backends implement it; the shared
/// `conformance` suite (behind the `testing` feature) is its executable specification.
///
/// Every write returns only once it is durable (fsync on the embedded backend, a committed
/// raft entry on etcd).
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The current value of `key`, or `None`.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Keys under a prefix from one consistent snapshot (see [`RangeRequest`]).
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse>;

    /// The number of keys `req` selects at its revision, ignoring its `limit` (etcd's
    /// `count` of a range): what a paginated list reports as `remainingItemCount` when asked for
    /// the keys after its last one. Fails like [`Backend::range`]. The default reads the range;
    /// backends override it with a count that reads no values.
    async fn count(&self, req: RangeRequest) -> Result<i64> {
        let resp = self.range(RangeRequest { limit: 0, ..req }).await?;
        Ok(resp.kvs.len() as i64)
    }

    /// Creates `key`; fails with [`Error::AlreadyExists`] if it exists. Returns the new
    /// revision (the key's `create_revision` and `mod_revision`).
    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Revision>;

    /// Replaces `key`'s value if its `mod_revision` equals `expected_mod_revision`
    /// (compare-and-swap). Fails with [`Error::NotFound`] or [`Error::Conflict`] without writing
    /// anything. Returns the new revision.
    async fn update(&self, key: &str, value: Vec<u8>, expected_mod_revision: Revision) -> Result<Revision>;

    /// Deletes `key`, if `expected_mod_revision` is `Some`, only when it matches (else
    /// [`Error::Conflict`]). Returns the delete's revision and the value it removed.
    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(Revision, KeyValue)>;

    /// Watches every key under `prefix` for changes with revision **strictly greater** than
    /// `after_revision` (Kubernetes semantics: a watch from resourceVersion R starts after R).
    /// `after_revision = 0` means "from now on".
    ///
    /// Fails with [`Error::Compacted`] when `after_revision` is older than the compacted
    /// revision (`after_revision < compacted_revision`). While idle, the stream sends a
    /// [`WatchResponse::Progress`] at least every `progress_interval` of the backend's options.
    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<WatchStream>;

    /// The store's current revision.
    async fn current_revision(&self) -> Result<Revision>;

    /// Discards history older than `revision`: afterwards reads at revisions `< revision` and
    /// watches with `after_revision < revision` fail with [`Error::Compacted`]. The state at
    /// `revision` itself stays readable. Compacting to a revision at or below the current
    /// compacted revision is a no-op; beyond the current revision is [`Error::FutureRevision`].
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The compacted revision (0 if never compacted).
    async fn compacted_revision(&self) -> Result<Revision>;
}

/// Options shared by both backends.
#[derive(Debug, Clone)]
pub struct Options {
    /// How often an idle watch stream receives a progress bookmark. Default 5 s.
    pub progress_interval: Duration,
    /// How often the background compactor runs; `None` disables it. Default 5 minutes, like
    /// kube-apiserver's `--etcd-compaction-interval`.
    pub compaction_interval: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Self { progress_interval: Duration::from_secs(5), compaction_interval: Some(Duration::from_secs(300)) }
    }
}

/// The end of a prefix range: the smallest string greater than every string starting with
/// `prefix` (etcd's `GetPrefixRangeEnd`). `None` when no such string exists (empty prefix or
/// all bytes 0xff), meaning "to the end of the keyspace".
pub fn prefix_range_end(prefix: &str) -> Option<Vec<u8>> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_range_end_increments_the_last_byte() {
        assert_eq!(prefix_range_end("/registry/pods/"), Some(b"/registry/pods0".to_vec()));
    }

    #[test]
    fn prefix_range_end_of_empty_prefix_is_unbounded() {
        assert_eq!(prefix_range_end(""), None);
    }
}
