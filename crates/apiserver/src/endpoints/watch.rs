//! `?watch=1`: a chunked stream of JSON watch events served from the [`WatchCache`](crate::storage::watchcache::WatchCache)
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>).
//!
//! Each event is one line: `{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}`.
//! Objects entering or leaving a watcher's selectors become ADDED/DELETED, as in Kubernetes'
//! `cacheWatcher`. A watcher that cannot keep up is ended (its client resumes from the last
//! resourceVersion it saw).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use rand::Rng;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::endpoints::negotiation::{Output, render_object};
use crate::endpoints::request::{Query, list_options};
use crate::registry::machinery::Selectors;
use crate::registry::store::parse_rv;
use crate::resources::ResourceDef;
use crate::storage::watchcache::{CacheMsg, EventKind, Recv, Subscription};

fn line(kind: &str, object: &Value) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(kind.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    let _ = serde_json::to_writer(&mut buf, object);
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

/// A watch event line around an object already encoded as JSON (same bytes as [`line`]).
fn line_encoded(kind: &str, object: &[u8]) -> Bytes {
    let mut buf = Vec::with_capacity(object.len() + kind.len() + 24);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(kind.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    buf.extend_from_slice(object);
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

/// An ERROR event carrying a Status.
pub fn error_line(e: &ApiError) -> Bytes {
    line("ERROR", &e.to_status())
}

fn bookmark(def: &ResourceDef, rv: i64, initial_end: bool) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta})
}

struct Watcher {
    def: ResourceDef,
    prefix: String,
    selectors: Selectors,
    output: Output,
    bookmarks: bool,
    after: i64,
}

/// Counts a watch in `apiserver_registered_watchers` for as long as its stream lives.
struct Registered(prometheus_client::metrics::gauge::Gauge);

impl Registered {
    fn new(gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A watch response body: the initial lines, then each event of the cache's broadcast this
/// watcher sees, encoded when the HTTP connection asks for the next chunk. The connection's
/// task polls the broadcast itself (no task or channel per watcher between them), so an event
/// reaches the socket with one task wake-up per watcher; lines already queued when a chunk is
/// asked for go out together in it.
struct WatchStream {
    watcher: Watcher,
    initial: std::collections::VecDeque<Bytes>,
    sub: Subscription,
    /// Completes at `timeoutSeconds` or on server shutdown; one future for the stream's life, so
    /// its timer and shutdown registrations are made once, not once per event.
    stop: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// The stream has ended (a lag, a reset, the timeout): nothing more is sent, even if the
    /// subscription would yield more.
    ended: bool,
    _registered: Registered,
}

/// A future that completes after `timeout` or once `shutdown` turns true (or its sender is
/// gone).
fn stop_signal(
    timeout: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        tokio::select! {
            _ = tokio::time::sleep(timeout) => {}
            _ = shutdown.wait_for(|stop| *stop) => {}
        }
    })
}

/// What a message from the cache means for a watch stream.
enum Step {
    /// A line to send.
    Send(Bytes),
    /// Nothing for this watcher.
    Skip,
    /// The stream ends (lagged, cache reset or closed).
    End,
}

/// Bytes up to which lines already queued are sent as one chunk (one HTTP/2 DATA frame or
/// HTTP/1.1 chunk, one TLS record): a watcher that fell behind catches up in few writes.
const CHUNK_BYTES: usize = 64 * 1024;

impl WatchStream {
    /// What `msg` makes this watcher send.
    fn step(&mut self, msg: Recv) -> Step {
        match msg {
            Recv::Msg(CacheMsg::Event(e)) => match self.watcher.classify(&e) {
                Some((kind, prev)) => {
                    self.watcher.after = e.revision;
                    Step::Send(self.watcher.event_line(kind, &e, prev))
                }
                None => Step::Skip,
            },
            Recv::Msg(CacheMsg::Progress(rev)) => {
                let w = &mut self.watcher;
                if w.bookmarks && rev > w.after && w.output == Output::Json {
                    w.after = rev;
                    Step::Send(line("BOOKMARK", &bookmark(&w.def, rev, false)))
                } else {
                    Step::Skip
                }
            }
            Recv::Msg(CacheMsg::Reset) | Recv::Lagged | Recv::Closed => Step::End,
        }
    }

    /// The next line to send, or `None` when the stream ends: at `timeoutSeconds`, on server
    /// shutdown, when this watcher lagged behind the cache's backlog, or when the cache reset.
    async fn next_line(&mut self) -> Option<Bytes> {
        if let ControlFlow::Break(line) = self.without_message() {
            return line;
        }
        loop {
            // Ready events first: the stop signal is looked at when nothing is queued.
            let msg = tokio::select! {
                biased;
                r = self.sub.recv() => r,
                _ = &mut self.stop => Recv::Closed,
            };
            if let ControlFlow::Break(line) = self.take(msg) {
                return line;
            }
        }
    }

    /// The next line if one is ready without waiting (initial lines, then messages already
    /// queued for this watcher); `None` when none is, or the stream ended.
    fn ready_line(&mut self) -> Option<Bytes> {
        if let ControlFlow::Break(line) = self.without_message() {
            return line;
        }
        loop {
            let msg = self.sub.try_recv()?;
            if let ControlFlow::Break(line) = self.take(msg) {
                return line;
            }
        }
    }

    /// What needs no message from the cache: `Break(None)` once the stream has ended,
    /// `Break(Some(line))` while initial lines remain, else `Continue`.
    fn without_message(&mut self) -> ControlFlow<Option<Bytes>> {
        if self.ended {
            return ControlFlow::Break(None);
        }
        match self.initial.pop_front() {
            Some(b) => ControlFlow::Break(Some(b)),
            None => ControlFlow::Continue(()),
        }
    }

    /// A received message's outcome: `Break(Some(line))` to send, `Break(None)` when it ends
    /// the stream (marked ended), `Continue` when it is skipped.
    fn take(&mut self, msg: Recv) -> ControlFlow<Option<Bytes>> {
        match self.step(msg) {
            Step::Send(b) => ControlFlow::Break(Some(b)),
            Step::Skip => ControlFlow::Continue(()),
            Step::End => {
                self.ended = true;
                ControlFlow::Break(None)
            }
        }
    }

    /// The next chunk to send: the next line, followed by the lines already ready after it (up
    /// to [`CHUNK_BYTES`]; never waiting for more). A single line is sent as is, shared with the
    /// other watchers; `None` when the stream ends.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        let first = self.next_line().await?;
        if first.len() >= CHUNK_BYTES {
            return Some(first);
        }
        let Some(second) = self.ready_line() else { return Some(first) };
        let mut chunk = bytes::BytesMut::with_capacity((first.len() + second.len()) * 2);
        chunk.extend_from_slice(&first);
        chunk.extend_from_slice(&second);
        while chunk.len() < CHUNK_BYTES {
            let Some(next) = self.ready_line() else { break };
            chunk.extend_from_slice(&next);
        }
        Some(chunk.freeze())
    }

    fn into_stream(self) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static {
        futures::stream::unfold(self, |mut s| async move {
            let chunk = s.next_chunk().await?;
            Some((Ok(chunk), s))
        })
    }
}

impl Watcher {
    /// The line for an event this watcher sees (`prev` is the object to send instead of the
    /// event's own, for a selector transition). Plain JSON watches of a resource whose stored
    /// form is its external form reuse the event's shared encoding.
    fn event_line(&self, kind: &'static str, e: &crate::storage::watchcache::CacheEvent, prev: Option<Value>) -> Bytes {
        match prev {
            None if self.output == Output::Json && crate::registry::convert::is_identity(&self.def) => {
                e.json_line(kind, line_encoded)
            }
            None => self.render_line(kind, (*e.object).clone()),
            Some(obj) => self.render_line(kind, obj),
        }
    }

    fn render_line(&self, kind: &str, obj: Value) -> Bytes {
        // A conversion webhook's failure ends nothing but this event: it becomes an ERROR.
        match crate::registry::convert::to_external(&self.def, obj) {
            Ok(obj) => line(kind, &render_object(&self.def, obj, self.output)),
            Err(e) => error_line(&e),
        }
    }

    /// The event type this watcher sees for a change, if any (selector transitions included),
    /// with the object to send when it is not the event's own (`None`: `e.object`).
    fn classify(&self, e: &crate::storage::watchcache::CacheEvent) -> Option<(&'static str, Option<Value>)> {
        if !e.key.starts_with(&self.prefix) || e.revision <= self.after {
            return None;
        }
        let cur = self.selectors.matches(&self.def, &e.object);
        match e.kind {
            EventKind::Added => cur.then_some(("ADDED", None)),
            EventKind::Deleted => cur.then_some(("DELETED", None)),
            EventKind::Modified => {
                // Without selectors every state is selected: the previous one need not be decoded.
                let old = if self.selectors.is_empty() {
                    e.has_prev()
                } else {
                    e.prev().is_some_and(|p| self.selectors.matches(&self.def, p))
                };
                match (old, cur) {
                    (true, true) => Some(("MODIFIED", None)),
                    (false, true) => Some(("ADDED", None)),
                    (true, false) => {
                        // Leaving the selection: the old state, at the new resourceVersion.
                        let mut prev = e.prev().map(|p| (**p).clone()).unwrap_or_default();
                        crate::util::set_resource_version(&mut prev, e.revision);
                        Some(("DELETED", Some(prev)))
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

/// Serves a watch request.
pub async fn serve(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: Option<&str>,
    q: &Query,
    out: Output,
) -> Result<Response, ApiError> {
    let opts = list_options(def, q)?;
    let bookmarks = matches!(q.get("allowWatchBookmarks").map(String::as_str), Some("true" | "1"));
    let send_initial = match q.get("sendInitialEvents").map(String::as_str) {
        None | Some("") => None,
        Some("true" | "1") => Some(true),
        Some("false" | "0") => Some(false),
        Some(other) => return Err(ApiError::bad_request(format!("invalid sendInitialEvents: {other:?}"))),
    };
    let timeout = match q.get("timeoutSeconds").filter(|s| !s.is_empty()) {
        Some(t) => Duration::from_secs(
            t.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t:?}")))?,
        ),
        // kube-apiserver's --min-request-timeout (1800 s) times a random factor in [1, 2).
        None => Duration::from_secs(1800 + rand::rng().random_range(0..1800)),
    };
    let cache = state.cache(def)?;
    let prefix = def.namespace_prefix(ns);
    let mut watcher = Watcher {
        def: def.clone(),
        prefix: prefix.clone(),
        selectors: opts.selectors.clone(),
        output: out,
        bookmarks,
        after: 0,
    };
    let rv = opts.resource_version.clone().unwrap_or_default();
    let initial_state = send_initial == Some(true) || (send_initial.is_none() && (rv.is_empty() || rv == "0"));
    let mut initial: Vec<Bytes> = Vec::new();
    let sub = if initial_state {
        let min_rv = if rv.is_empty() {
            // A consistent read: at least the store's current revision.
            state.objects.store.current_revision().await.unwrap_or(0)
        } else {
            parse_rv(&rv)?
        };
        if !cache.wait_for(min_rv, Duration::from_secs(3)).await && !rv.is_empty() {
            // The cacher's watch answers a resourceVersion it was given and does not reach in
            // time with an error event carrying the Status a list would get.
            let e = ApiError::too_large_resource_version(min_rv, cache.revision(), 1);
            return Ok(stream_response(futures::stream::iter(vec![Ok::<_, std::convert::Infallible>(error_line(&e))])));
        }
        let snap = cache.snapshot(&prefix);
        for o in snap.objects.iter().filter(|o| opts.selectors.matches(def, o)) {
            let obj = render_object(def, crate::registry::convert::to_external(def, (**o).clone())?, out);
            initial.push(line("ADDED", &obj));
        }
        if send_initial == Some(true) && bookmarks {
            initial.push(line("BOOKMARK", &bookmark(def, snap.revision, true)));
        }
        watcher.after = snap.revision;
        snap.subscription
    } else {
        let after = if rv.is_empty() { cache.revision() } else { parse_rv(&rv)? };
        // History the store has compacted is gone, even if the cache still remembers it.
        let compacted = state.objects.store.compacted_revision().await.unwrap_or(0);
        let window = if after < compacted {
            Err(crate::storage::watchcache::TooOld { oldest: compacted })
        } else {
            cache.watch_from(after)
        };
        match window {
            Ok((backlog, sub)) => {
                watcher.after = after;
                for e in backlog {
                    if let Some((kind, prev)) = watcher.classify(&e) {
                        watcher.after = e.revision;
                        initial.push(watcher.event_line(kind, &e, prev));
                    }
                }
                sub
            }
            Err(too_old) => {
                let e = ApiError::gone(format!("too old resource version: {after} ({})", too_old.oldest));
                return Ok(stream_response(futures::stream::iter(vec![Ok::<_, std::convert::Infallible>(
                    error_line(&e),
                )])));
            }
        }
    };
    let stream = WatchStream {
        watcher,
        initial: initial.into(),
        sub,
        stop: stop_signal(timeout, state.shutdown.clone()),
        ended: false,
        _registered: Registered::new(state.metrics.watch_gauge(def.group, def.resource)),
    };
    Ok(stream_response(stream.into_stream()))
}

fn stream_response<S>(s: S) -> Response
where
    S: futures::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
{
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(s))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_around_shared_encoding_equals_the_rendered_line() {
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "resourceVersion": "7"}});
        let encoded = serde_json::to_vec(&obj).unwrap();
        assert_eq!(line_encoded("MODIFIED", &encoded), line("MODIFIED", &obj));
    }

    fn pod_put(cache: &crate::storage::watchcache::WatchCache, key: &str, rev: i64) {
        let name = key.rsplit('/').next().unwrap_or_default();
        let kv = skiff_store::KeyValue {
            key: key.to_string(),
            value: format!(r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}"}}}}"#).into_bytes(),
            create_revision: rev,
            mod_revision: rev,
        };
        cache.apply(skiff_store::Event { kind: skiff_store::EventType::Put, kv, prev_kv: None });
    }

    /// A stream of namespace `ns1`'s pods from the cache's next event on, with its gauge and
    /// the sender of its shutdown signal.
    fn pod_stream(
        cache: &crate::storage::watchcache::WatchCache,
        timeout: Duration,
    ) -> (WatchStream, prometheus_client::metrics::gauge::Gauge, tokio::sync::watch::Sender<bool>) {
        let registry = crate::resources::Registry::default();
        let def = registry.get("", "v1", "pods").expect("pods are registered").clone();
        let (_, sub) = cache.watch_from(cache.revision()).expect("the ring reaches the current revision");
        let (shutdown_tx, shutdown) = tokio::sync::watch::channel(false);
        let gauge = prometheus_client::metrics::gauge::Gauge::default();
        let stream = WatchStream {
            watcher: Watcher {
                prefix: def.namespace_prefix(Some("ns1")),
                def,
                selectors: Selectors::default(),
                output: Output::Json,
                bookmarks: false,
                after: cache.revision(),
            },
            initial: Default::default(),
            sub,
            stop: stop_signal(timeout, shutdown),
            ended: false,
            _registered: Registered::new(gauge.clone()),
        };
        (stream, gauge, shutdown_tx)
    }

    #[tokio::test]
    async fn a_watch_stream_sends_its_namespace_events_and_ends_when_it_lags() {
        let cache = crate::storage::watchcache::WatchCache::new("/registry/pods/".into(), 100, 4);
        let (mut stream, gauge, _shutdown) = pod_stream(&cache, Duration::from_secs(3600));
        assert_eq!(gauge.get(), 1, "a live stream counts as a registered watcher");
        pod_put(&cache, "/registry/pods/ns2/other", 1);
        pod_put(&cache, "/registry/pods/ns1/mine", 2);
        let first = stream.next_line().await.expect("the ns1 event");
        let text = String::from_utf8_lossy(&first);
        assert!(text.starts_with(r#"{"type":"ADDED","object":"#), "{text}");
        assert!(text.contains(r#""name":"mine""#) && text.contains(r#""resourceVersion":"2""#), "{text}");
        assert!(text.ends_with("}\n"), "{text}");
        // More events than the broadcast holds, none read: the stream ends instead of blocking
        // the cache or buffering without bound.
        for r in 3..=12 {
            pod_put(&cache, &format!("/registry/pods/ns1/p{r}"), r);
        }
        assert!(stream.next_line().await.is_none());
        drop(stream);
        assert_eq!(gauge.get(), 0, "a dropped stream no longer counts");
    }

    #[tokio::test]
    async fn a_watch_stream_ends_at_its_timeout_and_on_shutdown() {
        let cache = crate::storage::watchcache::WatchCache::new("/registry/pods/".into(), 100, 16);
        let (mut expired, _, _shutdown) = pod_stream(&cache, Duration::ZERO);
        assert!(expired.next_line().await.is_none());
        let (mut stream, _, shutdown) = pod_stream(&cache, Duration::from_secs(3600));
        shutdown.send_replace(true);
        assert!(stream.next_line().await.is_none());
    }

    #[tokio::test]
    async fn lines_already_queued_go_out_in_one_chunk_and_a_chunk_never_waits_for_more() {
        let cache = crate::storage::watchcache::WatchCache::new("/registry/pods/".into(), 100, 16);
        let (mut stream, _, _shutdown) = pod_stream(&cache, Duration::from_secs(3600));
        pod_put(&cache, "/registry/pods/ns1/a", 1);
        pod_put(&cache, "/registry/pods/ns2/other", 2);
        pod_put(&cache, "/registry/pods/ns1/b", 3);
        let chunk = stream.next_chunk().await.expect("the queued events");
        let text = String::from_utf8_lossy(&chunk);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains(r#""name":"a""#) && lines[1].contains(r#""name":"b""#), "{text}");
        assert!(text.ends_with("}\n"), "{text}");
        // Nothing queued: the next chunk is the next event alone, once it comes.
        let next = tokio::spawn(async move { stream.next_chunk().await });
        tokio::task::yield_now().await;
        pod_put(&cache, "/registry/pods/ns1/c", 4);
        let chunk = next.await.expect("the stream task").expect("the event at revision 4");
        assert_eq!(String::from_utf8_lossy(&chunk).lines().count(), 1);
        assert!(chunk.windows(10).any(|w| w == br#""name":"c""#));
    }

    #[tokio::test]
    async fn a_chunk_ends_with_the_lines_ready_before_a_lag_and_then_the_stream_ends() {
        let cache = crate::storage::watchcache::WatchCache::new("/registry/pods/".into(), 100, 4);
        let (mut stream, _, _shutdown) = pod_stream(&cache, Duration::from_secs(3600));
        stream.initial.extend([Bytes::from_static(b"one\n"), Bytes::from_static(b"two\n")]);
        for r in 1..=10 {
            pod_put(&cache, &format!("/registry/pods/ns1/p{r}"), r);
        }
        assert_eq!(stream.next_chunk().await.as_deref(), Some(&b"one\ntwo\n"[..]));
        assert!(stream.next_chunk().await.is_none(), "lagged: the stream ends");
        pod_put(&cache, "/registry/pods/ns1/late", 11);
        assert!(stream.next_chunk().await.is_none(), "an ended stream stays ended");
    }

    #[tokio::test]
    async fn a_watch_stream_sends_its_initial_lines_before_any_event() {
        let cache = crate::storage::watchcache::WatchCache::new("/registry/pods/".into(), 100, 16);
        let (mut stream, _, _shutdown) = pod_stream(&cache, Duration::from_secs(3600));
        stream.initial.push_back(Bytes::from_static(b"initial\n"));
        pod_put(&cache, "/registry/pods/ns1/a", 1);
        assert_eq!(stream.next_line().await.as_deref(), Some(&b"initial\n"[..]));
        assert!(stream.next_line().await.is_some_and(|l| l.starts_with(br#"{"type":"ADDED""#)));
    }
}
