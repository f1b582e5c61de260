//! `?watch=1`: a chunked stream of JSON watch events served from the [`WatchCache`](crate::watchcache::WatchCache)
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>).
//!
//! Each event is one line: `{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}`.
//! Objects entering or leaving a watcher's selectors become ADDED/DELETED, as in Kubernetes'
//! `cacheWatcher`. A watcher that cannot keep up is ended (its client resumes from the last
//! resourceVersion it saw).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use rand::Rng;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;
use tokio::sync::mpsc;

use crate::AppState;
use crate::machinery::Selectors;
use crate::objects::parse_rv;
use crate::registry::ResourceDef;
use crate::rest::{Output, Query, list_options, render_object};
use crate::watchcache::{CacheMsg, EventKind, Recv, Subscription};

/// Watch events buffered per watcher between its task and the HTTP connection.
const WRITE_BUFFER: usize = 64;

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
    tx: mpsc::Sender<Result<Bytes, std::convert::Infallible>>,
}

impl Watcher {
    /// The line for an event this watcher sees (`prev` is the object to send instead of the
    /// event's own, for a selector transition). Plain JSON watches of a resource whose stored
    /// form is its external form reuse the event's shared encoding.
    fn event_line(&self, kind: &'static str, e: &crate::watchcache::CacheEvent, prev: Option<Value>) -> Bytes {
        match prev {
            None if self.output == Output::Json && crate::convert::is_identity(&self.def) => {
                e.json_line(kind, line_encoded)
            }
            None => self.render_line(kind, (*e.object).clone()),
            Some(obj) => self.render_line(kind, obj),
        }
    }

    fn render_line(&self, kind: &str, obj: Value) -> Bytes {
        let obj = render_object(&self.def, crate::convert::to_external(&self.def, obj), self.output);
        line(kind, &obj)
    }

    async fn send_raw(&self, b: Bytes) -> bool {
        self.tx.send(Ok(b)).await.is_ok()
    }

    /// The event type this watcher sees for a change, if any (selector transitions included),
    /// with the object to send when it is not the event's own (`None`: `e.object`).
    fn classify(&self, e: &crate::watchcache::CacheEvent) -> Option<(&'static str, Option<Value>)> {
        if !e.key.starts_with(&self.prefix) || e.revision <= self.after {
            return None;
        }
        let cur = self.selectors.matches(&self.def, &e.object);
        match e.kind {
            EventKind::Added => cur.then_some(("ADDED", None)),
            EventKind::Deleted => cur.then_some(("DELETED", None)),
            EventKind::Modified => {
                let old = e.prev.as_ref().is_some_and(|p| self.selectors.matches(&self.def, p));
                match (old, cur) {
                    (true, true) => Some(("MODIFIED", None)),
                    (false, true) => Some(("ADDED", None)),
                    (true, false) => {
                        // Leaving the selection: the old state, at the new resourceVersion.
                        let mut prev = e.prev.as_ref().map(|p| (**p).clone()).unwrap_or_default();
                        crate::util::set_resource_version(&mut prev, e.revision);
                        Some(("DELETED", Some(prev)))
                    }
                    (false, false) => None,
                }
            }
        }
    }

    async fn run(
        mut self,
        mut sub: Subscription,
        timeout: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        gauge: prometheus_client::metrics::gauge::Gauge,
    ) {
        gauge.inc();
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                _ = shutdown.changed() => break,
                _ = self.tx.closed() => break,
                r = sub.recv() => match r {
                    Recv::Msg(CacheMsg::Event(e)) => {
                        if let Some((kind, prev)) = self.classify(&e) {
                            self.after = e.revision;
                            let b = self.event_line(kind, &e, prev);
                            if !self.send_raw(b).await {
                                break;
                            }
                        }
                    }
                    Recv::Msg(CacheMsg::Progress(rev)) => {
                        if self.bookmarks && rev > self.after && self.output == Output::Json {
                            self.after = rev;
                            let b = bookmark(&self.def, rev, false);
                            if !self.send_raw(line("BOOKMARK", &b)).await {
                                break;
                            }
                        }
                    }
                    Recv::Msg(CacheMsg::Reset) | Recv::Lagged | Recv::Closed => break,
                },
            }
        }
        gauge.dec();
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
    if send_initial.is_some() {
        if opts.resource_version_match.as_deref() != Some("NotOlderThan") {
            return Err(ApiError::new(
                422,
                "Invalid",
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan",
            ));
        }
        if send_initial == Some(true) && !bookmarks {
            return Err(ApiError::new(
                422,
                "Invalid",
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless allowWatchBookmarks=true",
            ));
        }
    } else if opts.resource_version_match.is_some() {
        return Err(ApiError::new(
            422,
            "Invalid",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    let timeout = match q.get("timeoutSeconds").filter(|s| !s.is_empty()) {
        Some(t) => Duration::from_secs(
            t.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t:?}")))?,
        ),
        // kube-apiserver's --min-request-timeout (1800 s) times a random factor in [1, 2).
        None => Duration::from_secs(1800 + rand::rng().random_range(0..1800)),
    };
    let cache = state.cache(def)?;
    let prefix = def.namespace_prefix(ns);
    let (tx, rx) = mpsc::channel(WRITE_BUFFER);
    let mut watcher = Watcher {
        def: def.clone(),
        prefix: prefix.clone(),
        selectors: opts.selectors.clone(),
        output: out,
        bookmarks,
        after: 0,
        tx,
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
        cache.wait_for(min_rv, Duration::from_secs(3)).await;
        let snap = cache.snapshot(&prefix);
        for o in snap.objects.iter().filter(|o| opts.selectors.matches(def, o)) {
            let obj = render_object(def, crate::convert::to_external(def, (**o).clone()), out);
            initial.push(line("ADDED", &obj));
        }
        if send_initial == Some(true) {
            initial.push(line("BOOKMARK", &bookmark(def, snap.revision, true)));
        }
        watcher.after = snap.revision;
        snap.subscription
    } else {
        let after = if rv.is_empty() { cache.revision() } else { parse_rv(&rv)? };
        // History the store has compacted is gone, even if the cache still remembers it.
        let compacted = state.objects.store.compacted_revision().await.unwrap_or(0);
        let window = if after < compacted {
            Err(crate::watchcache::TooOld { oldest: compacted })
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
    let shutdown = state.shutdown.clone();
    let gauge = state.metrics.watch_gauge(def.group, def.resource);
    tokio::spawn(async move {
        for b in initial {
            if !watcher.send_raw(b).await {
                return;
            }
        }
        watcher.run(sub, timeout, shutdown, gauge).await;
    });
    Ok(stream_response(tokio_stream::wrappers::ReceiverStream::new(rx)))
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
}
