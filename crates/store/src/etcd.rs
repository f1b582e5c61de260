//! The etcd backend: the store contract served by a real etcd v3 cluster through `etcd-client`.
//!
//! This is how skiff scales past one machine: a 3- or 5-member etcd cluster (etcd does the
//! consensus) and any number of stateless API servers, each with its own [`EtcdBackend`].
//! Everything is mapped onto etcd's own primitives, the way kube-apiserver's `storage/etcd3`
//! package does it (<https://etcd.io/docs/v3.4/learning/api/>):
//!
//! - create: a txn `if create_revision(key) == 0 then put`; update: a txn
//!   `if version(key) > 0 && mod_revision(key) == expected then put else get`, so a failed
//!   compare-and-swap writes nothing and reports the key's actual `mod_revision`; delete: a txn
//!   with `delete(prev_kv)`. Each is one request and one round trip (no read before or after,
//!   no `prev_kv` on puts; the `else` get runs only when the compare fails). The txn still
//!   costs etcd more than a plain put: etcd before 3.4.24 (Debian's 3.4.23) copies its buffer of
//!   not yet committed writes into a new read transaction for every txn it applies (etcd
//!   PR #15195; 3.5 avoids the copy for write txns, PR #12896); BENCHMARKS.md has the cost.
//! - range: linearizable reads, paginated internally (every page pinned to the first page's
//!   revision) so that no gRPC response grows past the client's decode limit.
//! - watch: an etcd watch with `prev_kv`, started one revision early so that etcd itself checks
//!   the start revision against its compacted revision with the store contract's bound
//!   (`after_revision < compacted` fails, see [`Backend::watch`]); idle streams send
//!   `WatchProgressRequest`s and turn the answers into [`WatchResponse::Progress`] bookmarks.
//! - compaction: `Compact(rev)` plus a background compactor like kube-apiserver's
//!   (`--etcd-compaction-interval`). etcd does not report its compacted revision directly, so
//!   [`EtcdBackend::compacted_revision`] finds it with cheap `count_only` reads at old
//!   revisions, which is correct no matter which API server (or `etcdctl`) compacted.
//!
//! Every request carries a timeout ([`EtcdConfig::request_timeout`]); an unreachable cluster
//! gives [`Error::Unavailable`] naming the endpoints, and the client reconnects on its own when
//! etcd comes back.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Identity, KvClient, TlsOptions,
    Txn, TxnOp, TxnOpResponse, WatchClient, WatchOptions,
};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{
    Backend, Error, Event, EventType, KeyValue, MAX_VALUE_BYTES, Options, RangeRequest, RangeResponse, Result,
    Revision, WatchResponse, WatchStream,
};

// Test and benchmark support, not part of the store's API.
#[cfg(any(test, feature = "testing"))]
pub mod harness;

/// The most keys one internal range page asks for. With values of at most
/// [`MAX_VALUE_BYTES`] a page stays below the raised decode limit ([`MAX_DECODE_BYTES`]).
const RANGE_PAGE_KEYS: usize = 500;

/// The gRPC decode limit set on the KV and watch clients, in bytes (`i32::MAX`, what
/// kube-apiserver uses as `MaxCallRecvMsgSize`). etcd-client's default of 4 MiB breaks reads of a
/// few large objects.
const MAX_DECODE_BYTES: usize = i32::MAX as usize;

/// How many watch responses may wait for a slow consumer before the backend stops reading
/// from etcd (etcd then buffers, and eventually moves the watcher to its slow "victim" set).
const WATCH_CHANNEL_CAPACITY: usize = 64;

/// How long a progress answer of an etcd older than 3.4.25 / 3.5.8 is held back before it
/// becomes a [`WatchResponse::Progress`], and how long such a stream must have been idle before
/// progress is requested; see [`EtcdBackend::watch`]. Longer than the 100 ms between two rounds
/// in which etcd sends history to watchers still catching up (its `syncWatchersLoop`): with
/// exactly that interval, a watcher resumed after a member was killed, still replaying history,
/// could get a bookmark ahead of an event it had yet to receive (the watch-history test caught
/// it on a loaded machine; BENCHMARKS.md has the runs).
const OLD_ETCD_PROGRESS_GRACE: Duration = Duration::from_millis(250);

/// TLS material for talking to etcd over `https://` endpoints (kube-apiserver's
/// `--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`). All files are PEM.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdTls {
    /// CA bundle that signed the etcd server certificates; `None` uses the system roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate for mutual TLS (needs `key_file` too).
    pub cert_file: Option<PathBuf>,
    /// Private key of `cert_file`.
    pub key_file: Option<PathBuf>,
}

/// Where and how to reach etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Client URLs of the cluster members, e.g. `http://127.0.0.1:2379` or
    /// `https://10.0.0.1:2379` (etcd-client balances requests across them).
    pub endpoints: Vec<String>,
    /// TLS settings for `https://` endpoints; `None` for plain `http://`.
    pub tls: Option<EtcdTls>,
    /// Prepended to every key written and stripped from every key read, so that several skiff
    /// clusters (or test cases) can share one etcd, like kube-apiserver's `--etcd-prefix`.
    /// Empty by default: keys are stored exactly as given (`/registry/...`).
    pub key_prefix: String,
    /// Timeout for establishing a connection to one endpoint. Default 2 s.
    pub dial_timeout: Duration,
    /// Timeout for every unary request (get, range page, txn, compact). A request that runs
    /// out of time fails with [`Error::Unavailable`]; for a write its outcome is then unknown,
    /// like any write whose answer was lost. Default 5 s.
    pub request_timeout: Duration,
    /// gRPC connections (each one HTTP/2 connection per endpoint) the backend spreads its unary
    /// requests over, round-robin; watches use the first. One connection carries every
    /// request on one stream of frames through one client task and one server reader, which
    /// may limit how many writes reach etcd at once under hundreds of concurrent writers.
    /// Default [`DEFAULT_CONNECTIONS`]; 0 counts as 1.
    pub connections: usize,
}

/// The default of [`EtcdConfig::connections`]: one. In `skiff bench store` on 2 loaded cores
/// more connections gained nothing at 256 writers and lost at 16 (BENCHMARKS.md): etcd's own
/// CPU is the limit there, not the client's one connection.
pub const DEFAULT_CONNECTIONS: usize = 1;

impl EtcdConfig {
    /// A configuration for these endpoints with the default timeouts, no TLS, no key prefix.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            tls: None,
            key_prefix: String::new(),
            dial_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            connections: DEFAULT_CONNECTIONS,
        }
    }

    /// Parses a comma-separated endpoint list as `--datastore-endpoint` passes it
    /// (`http://127.0.0.1:2379,http://127.0.0.1:22379`).
    ///
    /// # Errors
    /// [`Error::Internal`] when the list is empty or an entry is not an `http://` or `https://`
    /// URL.
    pub fn from_endpoint_list(list: &str) -> Result<Self> {
        let endpoints: Vec<String> =
            list.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect();
        if endpoints.is_empty() {
            return Err(Error::Internal(format!("etcd endpoint list {list:?} names no endpoint")));
        }
        for e in &endpoints {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(Error::Internal(format!(
                    "etcd endpoint {e:?} must be an http:// or https:// URL (e.g. http://127.0.0.1:2379)"
                )));
            }
        }
        Ok(Self::new(endpoints))
    }
}

/// The store contract over a real etcd v3 cluster. See the [module docs](self).
pub struct EtcdBackend {
    inner: Arc<Inner>,
    /// The background compactor; aborted when the backend is dropped.
    compactor: Option<JoinHandle<()>>,
}

impl Drop for EtcdBackend {
    fn drop(&mut self) {
        if let Some(task) = self.compactor.take() {
            task.abort();
        }
    }
}

/// State shared by the backend, its watch tasks and its compactor.
struct Inner {
    /// One KV client per connection ([`EtcdConfig::connections`]).
    kvs: Vec<KvClient>,
    /// The connection the next unary request goes to.
    next_kv: AtomicUsize,
    watch: WatchClient,
    /// The endpoints, comma-joined, for error messages.
    endpoints: String,
    /// [`EtcdConfig::key_prefix`] as bytes.
    prefix: Vec<u8>,
    request_timeout: Duration,
    progress_interval: Duration,
    /// `Some(grace)` when the server answers progress requests out of order with events (etcd
    /// before 3.4.25 / 3.5.8, etcd issue #15220); see [`EtcdBackend::watch`].
    progress_grace: Option<Duration>,
    /// A lower bound of etcd's compacted revision: the largest one this backend compacted to or
    /// observed. Only ever grows.
    compacted: AtomicI64,
}

impl EtcdBackend {
    /// Connects to the cluster, checks that it answers (a linearizable read, so a cluster
    /// without a leader is refused too) and starts the background compactor of
    /// `opts.compaction_interval`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] naming the endpoints when etcd cannot be reached within the
    /// configured timeouts; [`Error::Internal`] for a bad configuration (no endpoints,
    /// unreadable TLS files, TLS options with `http://` URLs).
    pub async fn connect(config: EtcdConfig, opts: Options) -> Result<Self> {
        if config.endpoints.is_empty() {
            return Err(Error::Internal("etcd: no endpoints configured".into()));
        }
        let endpoints = config.endpoints.join(",");
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(config.dial_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_require_leader(true);
        if let Some(tls) = &config.tls {
            connect = connect.with_tls(tls_options(tls)?);
        }
        let dial = |connect: ConnectOptions| {
            let endpoints = endpoints.clone();
            let list = config.endpoints.clone();
            let timeout = config.dial_timeout + config.request_timeout;
            async move {
                tokio::time::timeout(timeout, Client::connect(&list, Some(connect)))
                    .await
                    .map_err(|_| Error::Unavailable(format!("etcd {endpoints}: connection timed out")))?
                    .map_err(|e| match e {
                        etcd_client::Error::InvalidArgs(_) | etcd_client::Error::InvalidUri(_) => {
                            Error::Internal(format!("etcd {endpoints}: bad configuration: {e}"))
                        }
                        e => Error::Unavailable(format!("etcd {endpoints}: {e}")),
                    })
            }
        };
        let client = dial(connect.clone()).await?;
        let mut kvs = vec![client.kv_client().max_decoding_message_size(MAX_DECODE_BYTES)];
        for _ in 1..config.connections.max(1) {
            kvs.push(dial(connect.clone()).await?.kv_client().max_decoding_message_size(MAX_DECODE_BYTES));
        }
        let watch = client.watch_client().max_decoding_message_size(MAX_DECODE_BYTES);

        let mut maintenance = client.maintenance_client();
        let status = tokio::time::timeout(config.request_timeout, maintenance.status())
            .await
            .map_err(|_| Error::Unavailable(format!("etcd {endpoints}: status request timed out")))?
            .map_err(|e| Error::Unavailable(format!("etcd {endpoints}: {e}")))?;
        let ordered = progress_requests_are_ordered(status.version());
        if !ordered {
            tracing::debug!(
                version = status.version(),
                "etcd answers progress requests out of order with events (etcd issue #15220); \
                 holding progress answers back briefly"
            );
        }
        let progress_grace = (!ordered).then_some(OLD_ETCD_PROGRESS_GRACE);

        let inner = Arc::new(Inner {
            kvs,
            next_kv: AtomicUsize::new(0),
            watch,
            endpoints,
            prefix: config.key_prefix.into_bytes(),
            request_timeout: config.request_timeout,
            progress_interval: opts.progress_interval,
            progress_grace,
            compacted: AtomicI64::new(0),
        });
        inner.current_revision().await?;
        let compactor = opts.compaction_interval.map(|every| tokio::spawn(run_compactor(inner.clone(), every)));
        Ok(Self { inner, compactor })
    }

    /// The endpoints this backend talks to, comma-joined.
    pub fn endpoints(&self) -> &str {
        &self.inner.endpoints
    }

    /// Creates every key of `kvs` in one etcd transaction, all or none: the bulk path of
    /// `skiff datastore migrate`, where one durable commit per key would bound the copy by
    /// etcd's commit rate. Every key gets the transaction's revision (returned).
    ///
    /// # Errors
    /// [`Error::AlreadyExists`] naming the first key of `kvs` that exists (nothing is written);
    /// [`Error::Internal`] for more than [`MAX_TXN_OPS`] keys; [`Error::ValueTooLarge`] when the
    /// request exceeds etcd's request size limit; the errors of [`Backend::create`].
    pub async fn create_all(&self, kvs: &[(String, Vec<u8>)]) -> Result<Revision> {
        if kvs.len() > MAX_TXN_OPS {
            return Err(Error::Internal(format!(
                "create_all: {} keys exceed etcd's {MAX_TXN_OPS} operations per transaction",
                kvs.len()
            )));
        }
        let inner = &self.inner;
        let mut compares = Vec::with_capacity(kvs.len());
        let mut puts = Vec::with_capacity(kvs.len());
        let mut size = 0;
        for (key, value) in kvs {
            check_size(value)?;
            size += value.len();
            let full = inner.full_key(key);
            compares.push(Compare::create_revision(full.clone(), CompareOp::Equal, 0));
            puts.push(TxnOp::put(full, value.clone(), None));
        }
        let resp = inner.txn("create_all", Txn::new().when(compares).and_then(puts), size).await?;
        if resp.succeeded() {
            return header_revision(resp.header());
        }
        for (key, _) in kvs {
            if self.get(key).await?.is_some() {
                return Err(Error::AlreadyExists { key: key.clone() });
            }
        }
        Err(Error::AlreadyExists { key: kvs.first().map(|kv| kv.0.clone()).unwrap_or_default() })
    }
}

/// etcd's default limit of operations in one transaction (`--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// Builds tonic's TLS settings from PEM files (also for `skiff datastore snapshot save`'s own
/// etcd client).
///
/// # Errors
/// [`Error::Internal`] naming an unreadable file.
pub fn tls_options(tls: &EtcdTls) -> Result<TlsOptions> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|e| Error::Internal(format!("etcd TLS: cannot read {}: {e}", path.display())))
    };
    let mut options = TlsOptions::new();
    if let Some(ca) = &tls.ca_file {
        options = options.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => options = options.identity(Identity::from_pem(read(cert)?, read(key)?)),
        (None, None) => {}
        _ => return Err(Error::Internal("etcd TLS: a client certificate needs both cert_file and key_file".into())),
    }
    Ok(options)
}

/// True when this etcd version answers a `WatchProgressRequest` only once every watcher on the
/// stream has caught up, in order with its events: etcd 3.4.25+, 3.5.8+ and 3.6+. Older servers
/// answer at once with the current revision, possibly ahead of events still being sent
/// (etcd issue #15220).
fn progress_requests_are_ordered(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split(['.', '-', '+']).map(|p| p.parse::<u64>().ok());
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    match (major, minor) {
        (3, 4) => patch >= 25,
        (3, 5) => patch >= 8,
        (3, m) => m > 5,
        (m, _) => m > 3,
    }
}

/// What an etcd gRPC error means for the store contract.
enum Failure {
    /// The revision asked for is older than the compacted revision.
    Compacted,
    /// The revision asked for is newer than the current revision.
    FutureRevision,
    /// The request exceeded etcd's `--max-request-bytes`.
    TooLarge,
    /// Anything else, already mapped.
    Other(Error),
}

impl Inner {
    /// `key` with the configured prefix.
    /// A KV client on the next connection, round-robin.
    fn kv(&self) -> KvClient {
        let n = self.next_kv.fetch_add(1, Ordering::Relaxed);
        self.kvs[n % self.kvs.len()].clone()
    }

    fn full_key(&self, key: &str) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(&self.prefix);
        full.extend_from_slice(key.as_bytes());
        full
    }

    /// An etcd key turned back into a store key (prefix stripped).
    fn store_key(&self, key: &[u8]) -> Result<String> {
        let rest = key.strip_prefix(self.prefix.as_slice()).ok_or_else(|| {
            Error::Internal(format!("etcd returned key {:?} outside prefix", String::from_utf8_lossy(key)))
        })?;
        String::from_utf8(rest.to_vec())
            .map_err(|_| Error::Internal(format!("etcd key {:?} is not UTF-8", String::from_utf8_lossy(key))))
    }

    fn key_value(&self, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
        Ok(KeyValue {
            key: self.store_key(kv.key())?,
            value: kv.value().to_vec(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
        })
    }

    /// Runs one unary request, re-issued by `make` on retriable failures, within the request
    /// timeout, and classifies its final failure.
    ///
    /// With several endpoints, etcd-client keeps balancing requests onto a member that is down;
    /// such a request fails at once with a connection error without reaching etcd, so it is
    /// always re-sent (to whichever member the balancer picks next). Other unavailability
    /// (a connection lost mid-request, no leader, a server-side timeout) is retried only for
    /// `idempotent` requests: a write's outcome is then unknown and the caller must decide.
    async fn call<T, F, Fut>(&self, what: &str, idempotent: Idempotent, mut make: F) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = Instant::now() + self.request_timeout;
        let mut backoff = RETRY_BACKOFF_START;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let error = match tokio::time::timeout(remaining, make()).await {
                Err(_) => {
                    return Err(Failure::Other(Error::Unavailable(format!(
                        "etcd {}: {what} timed out after {:?}",
                        self.endpoints, self.request_timeout
                    ))));
                }
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
            };
            let retriable = request_not_sent(&error)
                || (idempotent == Idempotent::Yes
                    && matches!(self.classify(what, clone_error(&error)), Failure::Other(Error::Unavailable(_))));
            if !retriable || Instant::now() + backoff >= deadline {
                return Err(self.classify(what, error));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }

    /// A linearizable range request (retried while the cluster is unavailable).
    async fn range_request(
        &self,
        what: &str,
        key: Vec<u8>,
        options: GetOptions,
    ) -> Result<etcd_client::GetResponse, Failure> {
        self.call(what, Idempotent::Yes, || {
            let mut kv = self.kv();
            let (key, options) = (key.clone(), options.clone());
            async move { kv.get(key, Some(options)).await }
        })
        .await
    }

    fn failure_to_error(&self, what: &str, failure: Failure) -> Error {
        match failure {
            Failure::Other(e) => e,
            Failure::Compacted => {
                Error::Internal(format!("etcd {}: {what}: unexpected compacted error", self.endpoints))
            }
            Failure::FutureRevision => {
                Error::Internal(format!("etcd {}: {what}: unexpected future revision error", self.endpoints))
            }
            Failure::TooLarge => Error::Internal(format!("etcd {}: {what}: request too large", self.endpoints)),
        }
    }

    fn classify(&self, what: &str, e: etcd_client::Error) -> Failure {
        use tonic::Code;
        let endpoints = &self.endpoints;
        match e {
            etcd_client::Error::GRpcStatus(status) => {
                let message = with_sources(status.message(), &status);
                let message = message.as_str();
                match status.code() {
                    Code::OutOfRange if message.contains("compacted") => Failure::Compacted,
                    Code::OutOfRange if message.contains("future revision") => Failure::FutureRevision,
                    Code::InvalidArgument if message.contains("too large") => Failure::TooLarge,
                    // Unknown is what tonic reports for most connection-level failures.
                    Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::ResourceExhausted
                    | Code::Cancelled
                    | Code::Aborted
                    | Code::Unknown => {
                        Failure::Other(Error::Unavailable(format!("etcd {endpoints}: {what}: {message}")))
                    }
                    code => Failure::Other(Error::Internal(format!("etcd {endpoints}: {what}: {code:?}: {message}"))),
                }
            }
            etcd_client::Error::TransportError(e) => Failure::Other(Error::Unavailable(format!(
                "etcd {endpoints}: {what}: {}",
                with_sources("transport error", &e)
            ))),
            etcd_client::Error::WatchError(e) => {
                Failure::Other(Error::Unavailable(format!("etcd {endpoints}: {what}: {e}")))
            }
            etcd_client::Error::IoError(e) => {
                Failure::Other(Error::Unavailable(format!("etcd {endpoints}: {what}: {e}")))
            }
            e => Failure::Other(Error::Internal(format!("etcd {endpoints}: {what}: {e}"))),
        }
    }

    /// The current revision, read linearizably (a `count_only` range of one key).
    async fn current_revision(&self) -> Result<Revision> {
        let probe = self.probe_key();
        let resp = self
            .range_request("read revision", probe, GetOptions::new().with_count_only())
            .await
            .map_err(|f| self.failure_to_error("read revision", f))?;
        header_revision(resp.header())
    }

    /// A key for `count_only` probes; nothing needs to exist there.
    fn probe_key(&self) -> Vec<u8> {
        if self.prefix.is_empty() { b"\0".to_vec() } else { self.prefix.clone() }
    }

    /// Whether a read at `revision` is still possible (`revision >= compacted revision`).
    async fn readable_at(&self, revision: Revision) -> Result<bool> {
        let options = GetOptions::new().with_count_only().with_revision(revision);
        match self.range_request("probe compaction", self.probe_key(), options).await {
            Ok(_) => Ok(true),
            Err(Failure::Compacted) => Ok(false),
            Err(f) => Err(self.failure_to_error("probe compaction", f)),
        }
    }

    /// etcd's compacted revision: the smallest revision still readable. Starts from the known
    /// lower bound (one read when nothing changed) and binary-searches up to the current
    /// revision otherwise.
    async fn compacted_revision(&self) -> Result<Revision> {
        let known = self.compacted.load(Ordering::Acquire);
        if self.readable_at(known.max(1)).await? {
            return Ok(known);
        }
        // Unreadable at `lo`, readable at `hi` (the current revision is always readable).
        let mut lo = known.max(1);
        let mut hi = self.current_revision().await?;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.readable_at(mid).await? {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        self.compacted.fetch_max(hi, Ordering::AcqRel);
        Ok(hi)
    }

    /// The error for a read at `requested` that etcd refused as compacted.
    async fn compacted_error(&self, requested: Revision) -> Error {
        match self.compacted_revision().await {
            Ok(compacted) => Error::Compacted { requested, compacted },
            Err(e) => e,
        }
    }

    /// The error for a read at `requested` that etcd refused as a future revision.
    async fn future_error(&self, requested: Revision) -> Error {
        match self.current_revision().await {
            Ok(current) => Error::FutureRevision { requested, current },
            Err(e) => e,
        }
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let compact = self.call("compact", Idempotent::Yes, || {
            let mut kv = self.kv();
            async move { kv.compact(revision, None).await }
        });
        match compact.await {
            Ok(_) => {
                self.compacted.fetch_max(revision, Ordering::AcqRel);
                Ok(())
            }
            // Already compacted at or beyond `revision`: a no-op by contract.
            Err(Failure::Compacted) => Ok(()),
            Err(Failure::FutureRevision) => Err(self.future_error(revision).await),
            Err(f) => Err(self.failure_to_error("compact", f)),
        }
    }

    /// One txn; maps a too-large rejection to [`Error::ValueTooLarge`].
    async fn txn(&self, what: &str, txn: Txn, value_size: usize) -> Result<etcd_client::TxnResponse> {
        let request = self.call(what, Idempotent::No, || {
            let (mut kv, txn) = (self.kv(), txn.clone());
            async move { kv.txn(txn).await }
        });
        match request.await {
            Ok(r) => Ok(r),
            Err(Failure::TooLarge) => Err(Error::ValueTooLarge { size: value_size, limit: MAX_VALUE_BYTES }),
            Err(f) => Err(self.failure_to_error(what, f)),
        }
    }

    /// The key's current state from the `else` branch of a failed compare (a `get`), if any.
    fn else_branch_kv(&self, resp: &etcd_client::TxnResponse) -> Result<Option<KeyValue>> {
        for op in resp.op_responses() {
            if let TxnOpResponse::Get(get) = op {
                return get.kvs().first().map(|kv| self.key_value(kv)).transpose();
            }
        }
        Ok(None)
    }
}

/// `message` followed by the chain of underlying causes of `error` (tonic hides the reason of
/// a transport failure there).
fn with_sources(message: &str, error: &dyn std::error::Error) -> String {
    let mut out = message.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// Whether a request may be re-sent after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Idempotent {
    /// Reads, compaction, watch creation: re-sending is harmless.
    Yes,
    /// Writes: re-sent only when they certainly never reached etcd.
    No,
}

/// First pause between retries of a failed request; doubles up to [`RETRY_BACKOFF_MAX`].
const RETRY_BACKOFF_START: Duration = Duration::from_millis(10);

/// Longest pause between retries of a failed request.
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// True when the request failed while connecting, so etcd never saw it.
fn request_not_sent(error: &etcd_client::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable)
        {
            return true;
        }
        let text = cause.to_string();
        if text.contains("tcp connect error") || text.contains("error trying to connect") {
            return true;
        }
        source = cause.source();
    }
    false
}

/// A copy of the parts of an etcd-client error that [`Inner::classify`] looks at.
fn clone_error(error: &etcd_client::Error) -> etcd_client::Error {
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            etcd_client::Error::GRpcStatus(tonic::Status::new(status.code(), with_sources(status.message(), status)))
        }
        other => etcd_client::Error::Internal(other.to_string()),
    }
}

/// The revision in a response header (etcd always sends one).
fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Result<Revision> {
    header.map(|h| h.revision()).ok_or_else(|| Error::Internal("etcd response without header".into()))
}

fn check_size(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Error::ValueTooLarge { size: value.len(), limit: MAX_VALUE_BYTES });
    }
    Ok(())
}

#[async_trait]
impl Backend for EtcdBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let inner = &self.inner;
        let resp = inner
            .range_request("get", inner.full_key(key), GetOptions::new())
            .await
            .map_err(|f| inner.failure_to_error("get", f))?;
        resp.kvs().first().map(|kv| inner.key_value(kv)).transpose()
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let inner = &self.inner;
        if req.revision < 0 {
            return Err(Error::Internal(format!("range at negative revision {}", req.revision)));
        }
        let prefix = inner.full_key(&req.prefix);
        // etcd: a range end of "\0" means "every key >= start".
        let range_end = prefix_range_end_bytes(&prefix).unwrap_or_else(|| vec![0]);
        let mut start = prefix.clone();
        if let Some(after) = &req.start_after {
            let mut after = inner.full_key(after);
            after.push(0); // the smallest key greater than `after`
            if after > start {
                start = after;
            }
        }
        if start.is_empty() {
            start = vec![0];
        }
        let mut kvs = Vec::new();
        let mut revision = req.revision;
        let mut more;
        loop {
            let want = if req.limit == 0 { RANGE_PAGE_KEYS } else { (req.limit - kvs.len()).min(RANGE_PAGE_KEYS) };
            let mut options = GetOptions::new().with_range(range_end.clone()).with_limit(want as i64);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let mut resp = match inner.range_request("range", start.clone(), options).await {
                Ok(resp) => resp,
                Err(Failure::Compacted) => return Err(inner.compacted_error(revision).await),
                Err(Failure::FutureRevision) => return Err(inner.future_error(revision).await),
                Err(f) => return Err(inner.failure_to_error("range", f)),
            };
            if revision == 0 {
                revision = header_revision(resp.header())?;
            }
            more = resp.more();
            let page = resp.take_kvs();
            if let Some(last) = page.last() {
                start = last.key().to_vec();
                start.push(0);
            }
            let page_len = page.len();
            for kv in &page {
                kvs.push(inner.key_value(kv)?);
            }
            let full = req.limit != 0 && kvs.len() >= req.limit;
            if !more || full || page_len == 0 {
                break;
            }
        }
        Ok(RangeResponse { kvs, revision, more })
    }

    async fn count(&self, req: RangeRequest) -> Result<i64> {
        let inner = &self.inner;
        if req.revision < 0 {
            return Err(Error::Internal(format!("count at negative revision {}", req.revision)));
        }
        let prefix = inner.full_key(&req.prefix);
        let range_end = prefix_range_end_bytes(&prefix).unwrap_or_else(|| vec![0]);
        let mut start = prefix;
        if let Some(after) = &req.start_after {
            let mut after = inner.full_key(after);
            after.push(0);
            if after > start {
                start = after;
            }
        }
        if start.is_empty() {
            start = vec![0];
        }
        let mut options = GetOptions::new().with_range(range_end).with_count_only();
        if req.revision > 0 {
            options = options.with_revision(req.revision);
        }
        match inner.range_request("count", start, options).await {
            Ok(resp) => Ok(resp.count()),
            Err(Failure::Compacted) => Err(inner.compacted_error(req.revision).await),
            Err(Failure::FutureRevision) => Err(inner.future_error(req.revision).await),
            Err(f) => Err(inner.failure_to_error("count", f)),
        }
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Revision> {
        check_size(&value)?;
        let inner = &self.inner;
        let size = value.len();
        let full = inner.full_key(key);
        let txn = Txn::new()
            .when(vec![Compare::create_revision(full.clone(), CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(full, value, None)]);
        let resp = inner.txn("create", txn, size).await?;
        if !resp.succeeded() {
            return Err(Error::AlreadyExists { key: key.to_owned() });
        }
        header_revision(resp.header())
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected_mod_revision: Revision) -> Result<Revision> {
        check_size(&value)?;
        let inner = &self.inner;
        let size = value.len();
        let full = inner.full_key(key);
        let txn = Txn::new()
            .when(vec![
                // A missing key compares as mod_revision 0: never let an update create it.
                Compare::version(full.clone(), CompareOp::Greater, 0),
                Compare::mod_revision(full.clone(), CompareOp::Equal, expected_mod_revision),
            ])
            .and_then(vec![TxnOp::put(full.clone(), value, None)])
            .or_else(vec![TxnOp::get(full, None)]);
        let resp = inner.txn("update", txn, size).await?;
        if resp.succeeded() {
            return header_revision(resp.header());
        }
        match inner.else_branch_kv(&resp)? {
            None => Err(Error::NotFound { key: key.to_owned() }),
            Some(kv) => {
                Err(Error::Conflict { key: key.to_owned(), expected: expected_mod_revision, actual: kv.mod_revision })
            }
        }
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(Revision, KeyValue)> {
        let inner = &self.inner;
        let full = inner.full_key(key);
        let mut compares = vec![Compare::version(full.clone(), CompareOp::Greater, 0)];
        if let Some(expected) = expected_mod_revision {
            compares.push(Compare::mod_revision(full.clone(), CompareOp::Equal, expected));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then(vec![TxnOp::delete(full.clone(), Some(DeleteOptions::new().with_prev_key()))])
            .or_else(vec![TxnOp::get(full, None)]);
        let resp = inner.txn("delete", txn, 0).await?;
        if !resp.succeeded() {
            return match inner.else_branch_kv(&resp)? {
                None => Err(Error::NotFound { key: key.to_owned() }),
                Some(kv) => Err(Error::Conflict {
                    key: key.to_owned(),
                    expected: expected_mod_revision.unwrap_or_default(),
                    actual: kv.mod_revision,
                }),
            };
        }
        let revision = header_revision(resp.header())?;
        for op in resp.op_responses() {
            if let TxnOpResponse::Delete(delete) = op
                && let Some(prev) = delete.prev_kvs().first()
            {
                return Ok((revision, inner.key_value(prev)?));
            }
        }
        Err(Error::Internal(format!("etcd {}: delete of {key:?} returned no previous value", inner.endpoints)))
    }

    /// Opens an etcd watch over the prefix with `prev_kv`.
    ///
    /// The etcd watch starts at `after_revision` itself (not `after_revision + 1`) and the
    /// events of that one revision are dropped: etcd refuses a start revision below its
    /// compacted revision, so it then enforces exactly this contract's rule
    /// (`after_revision < compacted` → [`Error::Compacted`]), even when another API server
    /// compacts concurrently. The same check is also made before the watch is opened, so the
    /// usual case fails right here rather than on the stream.
    ///
    /// Progress: when the stream has been idle for half the progress interval, the task sends
    /// a `WatchProgressRequest`; etcd answers with its current revision. etcd 3.4.25+/3.5.8+
    /// answer only once the watcher has caught up, in order with its events. Older servers
    /// (Debian's 3.4.23) answer at once with the current revision, even before the events of
    /// a watcher still replaying history (etcd issue #15220; seen here: a watch from revision 1
    /// got "progress 3841" before the events 2..3841). For them every progress notification is
    /// held back for a grace period ([`OLD_ETCD_PROGRESS_GRACE`]) and dropped if any event
    /// arrives meanwhile (the event carries the progress itself), and none is requested before
    /// the stream has been idle for half an interval and at least that grace period. That
    /// closes the race with a write landing as the request is answered and with ordinary
    /// catch-up (etcd sends history every 100 ms); a watcher whose replay of history pauses
    /// longer than that (a very loaded etcd) stays exposed on those old servers.
    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<WatchStream> {
        let inner = self.inner.clone();
        if after_revision < 0 {
            return Err(Error::Internal(format!("watch after negative revision {after_revision}")));
        }
        if after_revision > 0 {
            let compacted = inner.compacted_revision().await?;
            if after_revision < compacted {
                return Err(Error::Compacted { requested: after_revision, compacted });
            }
        }
        let key = {
            let k = inner.full_key(prefix);
            if k.is_empty() { vec![0] } else { k }
        };
        let range_end = prefix_range_end_bytes(&inner.full_key(prefix)).unwrap_or_else(|| vec![0]);
        let options = WatchOptions::new()
            .with_range(range_end)
            .with_prev_key()
            .with_progress_notify()
            .with_start_revision(after_revision);
        let what = "open watch";
        // The first response confirms the watcher's creation and carries the revision it
        // starts from when `after_revision` is 0.
        let opened = inner.call(what, Idempotent::Yes, || {
            let (mut client, key, options) = (inner.watch.clone(), key.clone(), options.clone());
            async move {
                let (sender, mut responses) = client.watch(key, Some(options)).await?.split();
                match responses.next().await {
                    Some(Ok(created)) => Ok((sender, responses, created)),
                    Some(Err(e)) => Err(e),
                    None => Err(etcd_client::Error::WatchError("stream closed before the watch was created".into())),
                }
            }
        });
        let (sender, responses, created) = opened.await.map_err(|f| inner.failure_to_error(what, f))?;
        if created.canceled() {
            if created.compact_revision() > 0 {
                inner.compacted.fetch_max(created.compact_revision(), Ordering::AcqRel);
                return Err(Error::Compacted { requested: after_revision, compacted: created.compact_revision() });
            }
            return Err(Error::Internal(format!(
                "etcd {}: watch refused: {}",
                inner.endpoints,
                created.cancel_reason()
            )));
        }
        let start = if after_revision > 0 { after_revision } else { header_revision(created.header())? };
        let (tx, rx) = mpsc::channel(WATCH_CHANNEL_CAPACITY);
        let state = WatchTask { inner, after_revision, last_revision: start, tx };
        tokio::spawn(state.run(sender, responses));
        Ok(WatchStream::new(rx))
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        self.inner.compacted_revision().await
    }
}

/// [`crate::prefix_range_end`] for a byte prefix (the key prefix makes keys bytes).
fn prefix_range_end_bytes(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The task behind one [`WatchStream`]: forwards etcd's watch responses and asks for progress
/// while idle.
struct WatchTask {
    inner: Arc<Inner>,
    /// Events at or below this revision are dropped (the extra revision the etcd watch
    /// starts with).
    after_revision: Revision,
    /// The highest revision the consumer knows to be complete (events or progress).
    last_revision: Revision,
    tx: mpsc::Sender<Result<WatchResponse>>,
}

impl WatchTask {
    async fn run(
        mut self,
        mut sender: etcd_client::WatchRequestSender,
        mut responses: etcd_client::WatchResponseStream,
    ) {
        let half = (self.inner.progress_interval / 2).max(Duration::from_millis(1));
        // How long the stream must have been idle before progress is requested.
        let idle = self.inner.progress_grace.map_or(half, |grace| half.max(grace));
        let mut ticker = tokio::time::interval(half);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sent = Instant::now();
        // A progress answer held back until its grace period ends (old etcd only).
        let mut pending: Option<(Revision, Instant)> = None;
        // When the outstanding progress request was sent. A server that is still replaying history
        // to the watcher may not answer; after a full interval the request is repeated.
        let mut requested: Option<Instant> = None;
        loop {
            let grace_end = pending.map(|(_, at)| at);
            tokio::select! {
                _ = self.tx.closed() => return,
                _ = ticker.tick() => {
                    let outstanding = requested.is_some_and(|at| at.elapsed() < self.inner.progress_interval);
                    if !outstanding && pending.is_none() && last_sent.elapsed() >= idle {
                        if let Err(e) = sender.request_progress().await {
                            self.fail(format!("watch progress request failed: {e}")).await;
                            return;
                        }
                        requested = Some(Instant::now());
                    }
                }
                _ = sleep_until_opt(grace_end) => {
                    if let Some((revision, _)) = pending.take() {
                        if !self.send_progress(revision).await {
                            return;
                        }
                        last_sent = Instant::now();
                    }
                }
                message = responses.next() => {
                    let resp = match message {
                        None => {
                            self.fail("watch stream closed by etcd".into()).await;
                            return;
                        }
                        Some(Err(e)) => {
                            let error = self.inner.failure_to_error("watch", self.inner.classify("watch", e));
                            let _ = self.tx.send(Err(error)).await;
                            return;
                        }
                        Some(Ok(resp)) => resp,
                    };
                    if resp.canceled() {
                        let error = if resp.compact_revision() > 0 {
                            self.inner.compacted.fetch_max(resp.compact_revision(), Ordering::AcqRel);
                            Error::Compacted { requested: self.after_revision, compacted: resp.compact_revision() }
                        } else {
                            Error::Unavailable(format!(
                                "etcd {}: watch canceled: {}", self.inner.endpoints, resp.cancel_reason()
                            ))
                        };
                        let _ = self.tx.send(Err(error)).await;
                        return;
                    }
                    if resp.created() {
                        continue;
                    }
                    if resp.events().is_empty() {
                        let revision = match header_revision(resp.header()) {
                            Ok(r) => r,
                            Err(e) => { let _ = self.tx.send(Err(e)).await; return; }
                        };
                        requested = None;
                        if revision < self.last_revision {
                            continue;
                        }
                        match self.inner.progress_grace {
                            Some(grace) => pending = Some((revision, Instant::now() + grace)),
                            None => {
                                if !self.send_progress(revision).await {
                                    return;
                                }
                                last_sent = Instant::now();
                            }
                        }
                        continue;
                    }
                    // Events imply progress: a held-back answer is no longer needed.
                    pending = None;
                    match self.convert(&resp) {
                        Ok(events) if events.is_empty() => {}
                        Ok(events) => {
                            if let Some(last) = events.last() {
                                if events[0].kv.mod_revision <= self.last_revision {
                                    tracing::warn!(
                                        revision = events[0].kv.mod_revision,
                                        progress = self.last_revision,
                                        "etcd sent an event at or below an already reported progress revision"
                                    );
                                }
                                self.last_revision = self.last_revision.max(last.kv.mod_revision);
                            }
                            if self.tx.send(Ok(WatchResponse::Events(events))).await.is_err() {
                                return;
                            }
                            last_sent = Instant::now();
                        }
                        Err(e) => {
                            let _ = self.tx.send(Err(e)).await;
                            return;
                        }
                    }
                }
            }
        }
    }

    fn convert(&self, resp: &etcd_client::WatchResponse) -> Result<Vec<Event>> {
        let mut events = Vec::with_capacity(resp.events().len());
        for ev in resp.events() {
            let kv = ev.kv().ok_or_else(|| Error::Internal("etcd watch event without kv".into()))?;
            if kv.mod_revision() <= self.after_revision {
                continue;
            }
            let kind = match ev.event_type() {
                etcd_client::EventType::Put => EventType::Put,
                etcd_client::EventType::Delete => EventType::Delete,
            };
            let prev_kv = ev.prev_kv().map(|p| self.inner.key_value(p)).transpose()?;
            events.push(Event { kind, kv: self.inner.key_value(kv)?, prev_kv });
        }
        Ok(events)
    }

    async fn send_progress(&mut self, revision: Revision) -> bool {
        self.last_revision = self.last_revision.max(revision);
        self.tx.send(Ok(WatchResponse::Progress { revision: self.last_revision })).await.is_ok()
    }

    async fn fail(&self, reason: String) {
        let _ = self.tx.send(Err(Error::Unavailable(format!("etcd {}: {reason}", self.inner.endpoints)))).await;
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// kube-apiserver's compaction policy: at every tick, compact to the revision that was current
/// at the previous tick, so that at least one interval of history stays available for watch
/// resumption. Several API servers may each run one; compacting to a revision at or below the
/// compacted one is a no-op.
async fn run_compactor(inner: Arc<Inner>, every: Duration) {
    let mut ticker = tokio::time::interval_at(Instant::now() + every, every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Option<Revision> = None;
    loop {
        ticker.tick().await;
        if let Some(revision) = previous {
            match inner.compact(revision).await {
                Ok(()) => tracing::debug!(revision, "etcd compacted"),
                Err(e) => tracing::warn!(revision, error = %e, "etcd compaction failed"),
            }
        }
        match inner.current_revision().await {
            Ok(current) => previous = Some(current),
            Err(e) => tracing::warn!(error = %e, "etcd compactor could not read the current revision"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix_range_end;

    #[test]
    fn endpoint_list_splits_on_commas() {
        let config = EtcdConfig::from_endpoint_list("http://127.0.0.1:2379, https://10.0.0.2:2379").unwrap();
        assert_eq!(config.endpoints, vec!["http://127.0.0.1:2379", "https://10.0.0.2:2379"]);
    }

    #[test]
    fn endpoint_list_rejects_bare_host_ports() {
        assert!(matches!(EtcdConfig::from_endpoint_list("127.0.0.1:2379"), Err(Error::Internal(_))));
        assert!(matches!(EtcdConfig::from_endpoint_list(" , "), Err(Error::Internal(_))));
    }

    #[test]
    fn progress_answers_are_ordered_from_etcd_3_4_25_and_3_5_8() {
        assert!(!progress_requests_are_ordered("3.4.23"));
        assert!(progress_requests_are_ordered("3.4.25"));
        assert!(!progress_requests_are_ordered("3.5.7"));
        assert!(progress_requests_are_ordered("3.5.8"));
        assert!(progress_requests_are_ordered("3.6.0"));
        assert!(!progress_requests_are_ordered("garbage"));
    }

    #[test]
    fn byte_prefix_range_end_matches_the_string_one() {
        assert_eq!(prefix_range_end_bytes(b"/registry/pods/"), prefix_range_end("/registry/pods/"));
        assert_eq!(prefix_range_end_bytes(b""), None);
        assert_eq!(prefix_range_end_bytes(&[b'a', 0xff]), Some(b"b".to_vec()));
    }

    #[test]
    fn tls_with_cert_but_no_key_is_rejected() {
        let tls = EtcdTls { ca_file: None, cert_file: Some("/nonexistent/cert.pem".into()), key_file: None };
        assert!(matches!(tls_options(&tls), Err(Error::Internal(_))));
    }
}
