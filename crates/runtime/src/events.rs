//! The event recorder every component uses (`client-go/tools/record`): core/v1 `Event`s that
//! `kubectl get events` and `kubectl describe` show, with Kubernetes' correlation of repeats.
//!
//! - [`EventRecorder::event`] never blocks: the event goes into a bounded channel (dropped with a
//!   warning when 1000 are pending) drained by the [`EventBroadcaster`]'s writer task.
//! - Correlation ([`EventCorrelator`]), as `client-go`'s `EventCorrelator` does it:
//!   - **dedupe**: an event identical to one already written (same source, involved object,
//!     type, reason and message) is not created again; the existing one is patched with
//!     `count + 1` and a new `lastTimestamp` (kubectl shows `(x4 over 5m)`);
//!   - **aggregation**: more than 10 events within 10 minutes with the same source, object, type
//!     and reason but different messages are folded into one event whose message starts with
//!     `(combined from similar events): `;
//!   - **spam filter**: per source and object, a token bucket of 25 events refilled at one per
//!     5 minutes.
//! - Writes are retried up to 12 times (10 s apart) while the API is unreachable; a patch of an
//!   event that expired meanwhile falls back to a create.
//! - [`cleanup_expired_events`] / [`run_event_ttl_cleaner`] delete events older than the TTL
//!   (Kubernetes does this with `--event-ttl`, default 1 h, through etcd leases).
//!
//! Reasons are Kubernetes' (see [`reasons`]). Reference: `k8s.io/client-go/tools/record`
//! (`event.go`, `events_cache.go`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource as CoreEventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::api::{
    ApiClient, ApiClientExt, ApiError, DeleteOptions, KubeApi, NAMESPACE_TERMINATING_CAUSE, PatchType,
    has_status_cause, is_already_exists, is_not_found, resource_of,
};
use crate::util::{object_reference, time};

/// `v1.EventTypeNormal`.
pub const EVENT_TYPE_NORMAL: &str = "Normal";
/// `v1.EventTypeWarning`.
pub const EVENT_TYPE_WARNING: &str = "Warning";

/// Event reasons, named as Kubernetes names them.
pub mod reasons {
    /// Deployment scaled one of its ReplicaSets (`Scaled up replica set x from 0 to 3`).
    pub const SCALING_REPLICA_SET: &str = "ScalingReplicaSet";
    /// A controller created a pod (`Created pod: x`).
    pub const SUCCESSFUL_CREATE: &str = "SuccessfulCreate";
    /// A controller failed to create a pod.
    pub const FAILED_CREATE: &str = "FailedCreate";
    /// A controller deleted a pod (`Deleted pod: x`).
    pub const SUCCESSFUL_DELETE: &str = "SuccessfulDelete";
    /// A controller failed to delete a pod.
    pub const FAILED_DELETE: &str = "FailedDelete";
    /// A Deployment with an empty selector.
    pub const SELECTING_ALL: &str = "SelectingAll";
    /// A rollback completed (`DeploymentRollback`).
    pub const DEPLOYMENT_ROLLBACK: &str = "DeploymentRollback";
    /// The rollback revision does not exist.
    pub const DEPLOYMENT_ROLLBACK_REVISION_NOT_FOUND: &str = "DeploymentRollbackRevisionNotFound";
    /// The rollback revision has the current template.
    pub const DEPLOYMENT_ROLLBACK_TEMPLATE_UNCHANGED: &str = "DeploymentRollbackTemplateUnchanged";
    /// Creating the new ReplicaSet failed.
    pub const REPLICA_SET_CREATE_ERROR: &str = "ReplicaSetCreateError";
    /// The scheduler bound a pod.
    pub const SCHEDULED: &str = "Scheduled";
    /// The scheduler found no node.
    pub const FAILED_SCHEDULING: &str = "FailedScheduling";
    /// The kubelet pulls an image.
    pub const PULLING: &str = "Pulling";
    /// The kubelet pulled an image.
    pub const PULLED: &str = "Pulled";
    /// The kubelet created a container.
    pub const CREATED: &str = "Created";
    /// The kubelet started a container.
    pub const STARTED: &str = "Started";
    /// The kubelet stops a container.
    pub const KILLING: &str = "Killing";
    /// A container restarts with backoff.
    pub const BACK_OFF: &str = "BackOff";
    /// A probe failed.
    pub const UNHEALTHY: &str = "Unhealthy";
    /// A node stopped reporting ready.
    pub const NODE_NOT_READY: &str = "NodeNotReady";
    /// A node became ready.
    pub const NODE_READY: &str = "NodeReady";
    /// The garbage collector deleted a dependent.
    pub const DELETING_DEPENDENTS: &str = "DeletingDependents";
}

/// Who reports events: `source.component` / `reportingComponent` (e.g. `deployment-controller`)
/// and `source.host` / `reportingInstance`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventSource {
    /// Component name.
    pub component: String,
    /// Host or instance name (may be empty).
    pub host: String,
}

impl EventSource {
    /// A source with a component name and no host.
    pub fn component(component: &str) -> Self {
        Self { component: component.to_string(), host: String::new() }
    }
}

/// An event as a recorder in test mode keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    /// The involved object.
    pub object: ObjectReference,
    /// `Normal` or `Warning`.
    pub type_: String,
    /// The reason (`ScalingReplicaSet`).
    pub reason: String,
    /// The message.
    pub message: String,
}

impl RecordedEvent {
    /// `Type Reason Message`, as client-go's `FakeRecorder` formats events.
    pub fn summary(&self) -> String {
        format!("{} {} {}", self.type_, self.reason, self.message)
    }
}

#[derive(Clone)]
enum Sink {
    Channel(mpsc::Sender<Event>),
    Recording(Arc<Mutex<Vec<RecordedEvent>>>),
}

/// Records events about objects (`record.EventRecorder`). Cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    source: EventSource,
    sink: Sink,
    clock: crate::util::Clock,
}

impl EventRecorder {
    /// A recorder writing through its own [`EventBroadcaster`] on `client` (spawns the writer
    /// task: call inside a tokio runtime).
    pub fn new(client: kube::Client, component: &str) -> Self {
        EventBroadcaster::new(Arc::new(KubeApi::new(client))).new_recorder(EventSource::component(component))
    }

    /// A recorder that keeps events in memory (`record.FakeRecorder`), for tests.
    pub fn recording(component: &str) -> Self {
        Self {
            source: EventSource::component(component),
            sink: Sink::Recording(Arc::new(Mutex::new(Vec::new()))),
            clock: crate::util::system_clock(),
        }
    }

    /// The events kept by a [`EventRecorder::recording`] recorder (empty otherwise).
    pub fn recorded(&self) -> Vec<RecordedEvent> {
        match &self.sink {
            Sink::Recording(v) => v.lock().clone(),
            Sink::Channel(_) => Vec::new(),
        }
    }

    /// The reporting source.
    pub fn source(&self) -> &EventSource {
        &self.source
    }

    /// Records an event about the object `object` refers to. Never blocks.
    pub fn event(&self, object: &ObjectReference, type_: &str, reason: &str, message: &str) {
        match &self.sink {
            Sink::Recording(v) => v.lock().push(RecordedEvent {
                object: object.clone(),
                type_: type_.to_string(),
                reason: reason.to_string(),
                message: message.to_string(),
            }),
            Sink::Channel(tx) => {
                let event = make_event(&self.source, object, type_, reason, message, (self.clock)());
                if tx.try_send(event).is_err() {
                    tracing::warn!(reason, message, "event dropped: too many pending events");
                }
            }
        }
    }

    /// Records an event that also says which `action` was being taken (`Binding`, `Started`),
    /// with a microsecond `eventTime`, as client-go's `tools/events` recorder (`Eventf`) reports
    /// for the scheduler and the kubelet; see [`make_action_event`]. Never blocks.
    pub fn event_with_action(&self, object: &ObjectReference, type_: &str, reason: &str, action: &str, message: &str) {
        match &self.sink {
            Sink::Recording(_) => self.event(object, type_, reason, message),
            Sink::Channel(tx) => {
                let event = make_action_event(&self.source, object, type_, reason, action, message, (self.clock)());
                if tx.try_send(event).is_err() {
                    tracing::warn!(reason, message, "event dropped: too many pending events");
                }
            }
        }
    }

    /// Records an event about a typed object.
    pub fn event_for<K: Resource<DynamicType = ()>>(&self, obj: &K, type_: &str, reason: &str, message: &str) {
        self.event(&object_reference(obj), type_, reason, message);
    }
}

/// `makeEvent`: a new core/v1 Event named `<object>.<unix nanos in hex>` in the object's
/// namespace (`default` for cluster-scoped objects).
pub fn make_event(
    source: &EventSource,
    object: &ObjectReference,
    type_: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Event {
    let namespace = object.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".to_string());
    let t = time(now);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", object.name.as_deref().unwrap_or_default(), now.as_nanosecond())),
            namespace: Some(namespace),
            ..Default::default()
        },
        involved_object: object.clone(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        first_timestamp: Some(t.clone()),
        last_timestamp: Some(t),
        count: Some(1),
        type_: Some(type_.to_string()),
        source: Some(CoreEventSource {
            component: Some(source.component.clone()).filter(|s| !s.is_empty()),
            host: Some(source.host.clone()).filter(|s| !s.is_empty()),
        }),
        reporting_component: Some(source.component.clone()),
        reporting_instance: Some(source.host.clone()),
        ..Default::default()
    }
}

/// [`make_event`] plus the fields of an event with an action: `action`, `eventTime` at the
/// API's microsecond precision (`lastTimestamp` has whole seconds), and `reportingInstance`
/// (the source's host, or its component when it has none), which the API requires together.
pub fn make_action_event(
    source: &EventSource,
    object: &ObjectReference,
    type_: &str,
    reason: &str,
    action: &str,
    message: &str,
    now: Timestamp,
) -> Event {
    let mut event = make_event(source, object, type_, reason, message, now);
    event.action = Some(action.to_string());
    event.event_time = Some(MicroTime(now));
    let instance = if source.host.is_empty() { &source.component } else { &source.host };
    event.reporting_instance = Some(instance.clone());
    event
}

fn s(o: &Option<String>) -> &str {
    o.as_deref().unwrap_or_default()
}

fn source_parts(e: &Event) -> (String, String) {
    let src = e.source.clone().unwrap_or_default();
    (src.component.unwrap_or_default(), src.host.unwrap_or_default())
}

/// `getEventKey`: identical events share this key.
fn event_key(e: &Event) -> String {
    let (component, host) = source_parts(e);
    let o = &e.involved_object;
    [
        component.as_str(),
        host.as_str(),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.field_path),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.message),
    ]
    .join("")
}

/// `EventAggregatorByReasonFunc`: (aggregate key, local key = message).
fn aggregate_keys(e: &Event) -> (String, String) {
    let (component, host) = source_parts(e);
    let o = &e.involved_object;
    let key = [
        component.as_str(),
        host.as_str(),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.reporting_component),
        s(&e.reporting_instance),
    ]
    .join("");
    (key, s(&e.message).to_string())
}

/// A map that forgets its least recently inserted entries beyond a capacity (the LRU caches of
/// the correlator).
struct BoundedMap<V> {
    map: HashMap<String, (u64, V)>,
    tick: u64,
    capacity: usize,
}

impl<V> BoundedMap<V> {
    fn new(capacity: usize) -> Self {
        Self { map: HashMap::new(), tick: 0, capacity }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(t, v)| {
            *t = tick;
            v
        })
    }

    fn insert(&mut self, key: String, value: V) {
        self.tick += 1;
        if self.map.len() >= self.capacity
            && !self.map.contains_key(&key)
            && let Some(oldest) = self.map.iter().min_by_key(|(_, (t, _))| *t).map(|(k, _)| k.clone())
        {
            self.map.remove(&oldest);
        }
        self.map.insert(key, (self.tick, value));
    }
}

struct AggregateRecord {
    local_keys: HashSet<String>,
    last: Timestamp,
}

#[derive(Clone)]
struct EventLog {
    count: i32,
    first_timestamp: Option<Time>,
    name: String,
    resource_version: Option<String>,
}

struct SpamBucket {
    tokens: f64,
    last: Timestamp,
}

/// The outcome of correlating one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Correlated {
    /// Create this new event.
    Create(Event),
    /// Patch the existing event (name in the event) with this merge patch; create the event if
    /// the patch finds it gone.
    Patch(Event, Value),
    /// Drop it (spam filter).
    Skip,
}

/// Dedupe, aggregation and spam filtering of events (`record.EventCorrelator`).
pub struct EventCorrelator {
    aggregates: BoundedMap<AggregateRecord>,
    logs: BoundedMap<EventLog>,
    spam: BoundedMap<SpamBucket>,
}

/// Distinct messages per aggregate key before events are combined.
const MAX_SIMILAR_EVENTS: usize = 10;
/// Window of the aggregation (seconds).
const AGGREGATE_INTERVAL_SECONDS: i64 = 600;
/// Spam filter burst.
const SPAM_BURST: f64 = 25.0;
/// Spam filter refill: one token per 300 s.
const SPAM_QPS: f64 = 1.0 / 300.0;
/// Size of each correlator cache (`maxLruCacheEntries`).
const CACHE_SIZE: usize = 4096;

impl Default for EventCorrelator {
    fn default() -> Self {
        Self::new()
    }
}

impl EventCorrelator {
    /// Empty caches.
    pub fn new() -> Self {
        Self {
            aggregates: BoundedMap::new(CACHE_SIZE),
            logs: BoundedMap::new(CACHE_SIZE),
            spam: BoundedMap::new(CACHE_SIZE),
        }
    }

    /// Decides what to write for `event`, observed at `now` (`EventCorrelate`).
    pub fn correlate(&mut self, event: Event, now: Timestamp) -> Correlated {
        // 1. Aggregate similar events (same reason, different messages).
        let (agg_key, local_key) = aggregate_keys(&event);
        let mut cache_key = event_key(&event);
        let mut event = event;
        let record = match self.aggregates.get_mut(&agg_key) {
            Some(r) if r.last.as_second() + AGGREGATE_INTERVAL_SECONDS >= now.as_second() => r,
            _ => {
                self.aggregates.insert(agg_key.clone(), AggregateRecord { local_keys: HashSet::new(), last: now });
                self.aggregates.get_mut(&agg_key).expect("just inserted")
            }
        };
        record.last = now;
        record.local_keys.insert(local_key);
        if record.local_keys.len() >= MAX_SIMILAR_EVENTS {
            // Keep the set from growing beyond the maximum (`PopAny`).
            if let Some(any) = record.local_keys.iter().next().cloned() {
                record.local_keys.remove(&any);
            }
            let t = time(now);
            event = Event {
                metadata: ObjectMeta {
                    name: Some(format!("{}.{:x}", s(&event.involved_object.name), now.as_nanosecond())),
                    namespace: event.metadata.namespace.clone(),
                    ..Default::default()
                },
                count: Some(1),
                first_timestamp: Some(t.clone()),
                last_timestamp: Some(t),
                message: Some(format!("(combined from similar events): {}", s(&event.message))),
                ..event
            };
            cache_key = agg_key;
        }

        // 2. Dedupe identical events into a count.
        let mut patch = None;
        if let Some(log) = self.logs.get_mut(&cache_key).cloned() {
            event.metadata.name = Some(log.name.clone());
            event.metadata.resource_version = log.resource_version.clone();
            event.first_timestamp = log.first_timestamp.clone();
            event.count = Some(log.count + 1);
            patch = Some(json!({
                "count": log.count + 1,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            }));
        }
        self.logs.insert(
            cache_key,
            EventLog {
                count: event.count.unwrap_or(1),
                first_timestamp: event.first_timestamp.clone(),
                name: s(&event.metadata.name).to_string(),
                resource_version: event.metadata.resource_version.clone(),
            },
        );

        // 3. Spam filter per source + object.
        let (component, host) = source_parts(&event);
        let o = &event.involved_object;
        let spam_key =
            [component.as_str(), host.as_str(), s(&o.kind), s(&o.namespace), s(&o.name), s(&o.uid), s(&o.api_version)]
                .join("");
        let bucket = match self.spam.get_mut(&spam_key) {
            Some(b) => b,
            None => {
                self.spam.insert(spam_key.clone(), SpamBucket { tokens: SPAM_BURST, last: now });
                self.spam.get_mut(&spam_key).expect("just inserted")
            }
        };
        let elapsed = (now.as_millisecond() - bucket.last.as_millisecond()).max(0) as f64 / 1000.0;
        bucket.tokens = (bucket.tokens + elapsed * SPAM_QPS).min(SPAM_BURST);
        bucket.last = now;
        if bucket.tokens < 1.0 {
            return Correlated::Skip;
        }
        bucket.tokens -= 1.0;

        match patch {
            Some(p) => Correlated::Patch(event, p),
            None => Correlated::Create(event),
        }
    }

    /// Records the server's copy of a written event (`UpdateState`), so the next repeat patches
    /// it by name.
    pub fn update_state(&mut self, written: &Event) {
        self.logs.insert(
            event_key(written),
            EventLog {
                count: written.count.unwrap_or(1),
                first_timestamp: written.first_timestamp.clone(),
                name: s(&written.metadata.name).to_string(),
                resource_version: written.metadata.resource_version.clone(),
            },
        );
    }
}

/// Writes events to the API (`record.EventBroadcaster` with its sink). Recorders made by
/// [`EventBroadcaster::new_recorder`] share one channel and one writer task; the task ends when
/// the broadcaster and all its recorders are dropped.
pub struct EventBroadcaster {
    tx: mpsc::Sender<Event>,
}

/// Pending events before new ones are dropped.
const EVENT_QUEUE_LENGTH: usize = 1000;
/// Attempts to write one event (`maxTriesPerEvent`).
const MAX_TRIES_PER_EVENT: usize = 12;

impl EventBroadcaster {
    /// Spawns the writer task on `api` (call inside a tokio runtime).
    pub fn new(api: Arc<dyn ApiClient>) -> Self {
        let (tx, mut rx) = mpsc::channel::<Event>(EVENT_QUEUE_LENGTH);
        tokio::spawn(async move {
            let mut correlator = EventCorrelator::new();
            while let Some(event) = rx.recv().await {
                record_to_sink(api.as_ref(), &mut correlator, event, Duration::from_secs(10)).await;
            }
        });
        Self { tx }
    }

    /// A recorder reporting as `source`.
    pub fn new_recorder(&self, source: EventSource) -> EventRecorder {
        EventRecorder { source, sink: Sink::Channel(self.tx.clone()), clock: crate::util::system_clock() }
    }
}

/// Correlates `event` and writes it, retrying transport failures (`recordToSink`).
pub async fn record_to_sink(
    api: &dyn ApiClient,
    correlator: &mut EventCorrelator,
    event: Event,
    retry_sleep: Duration,
) {
    let result = correlator.correlate(event, Timestamp::now());
    for attempt in 0..MAX_TRIES_PER_EVENT {
        match write_event(api, &result).await {
            Ok(Some(written)) => {
                correlator.update_state(&written);
                return;
            }
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(%e, attempt, "unable to write event, retrying");
                let jitter = if attempt == 0 { rand::random::<f64>() } else { 1.0 };
                tokio::time::sleep(retry_sleep.mul_f64(jitter)).await;
            }
        }
    }
    tracing::warn!("unable to write event after {MAX_TRIES_PER_EVENT} attempts, dropping it");
}

/// One write attempt (`recordEvent`): `Ok(Some)` written, `Ok(None)` given up for good (the
/// error will not go away), `Err` retry.
async fn write_event(api: &dyn ApiClient, result: &Correlated) -> Result<Option<Event>, ApiError> {
    let (event, patch) = match result {
        Correlated::Skip => return Ok(None),
        Correlated::Create(e) => (e, None),
        Correlated::Patch(e, p) => (e, Some(p)),
    };
    let ns = event.metadata.namespace.as_deref();
    if let Some(p) = patch {
        match api.patch_typed::<Event>(ns, s(&event.metadata.name), PatchType::Merge, p).await {
            Ok(written) => return Ok(Some(written)),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return classify(e),
        }
    }
    let mut create = event.clone();
    create.metadata.resource_version = None;
    match api.create_typed(&create).await {
        Ok(written) => Ok(Some(written)),
        Err(e) => classify(e),
    }
}

fn classify(e: ApiError) -> Result<Option<Event>, ApiError> {
    // Server-side refusals will not change on retry; transport errors (503 from the client) may.
    if e.code == 503 || e.code == 0 || e.code >= 500 && e.code != 501 {
        return Err(e);
    }
    if is_already_exists(&e) || has_status_cause(&e, NAMESPACE_TERMINATING_CAUSE) {
        tracing::debug!(%e, "event refused");
    } else {
        tracing::warn!(%e, "event refused by the server");
    }
    Ok(None)
}

/// The time an event was last seen: `lastTimestamp`, `series.lastObservedTime`, `eventTime`,
/// or `creationTimestamp`.
pub fn last_seen(event: &Event) -> Option<Timestamp> {
    event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.series.as_ref().and_then(|s| s.last_observed_time.as_ref()).map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// Deletes every event last seen more than `ttl` before `now`; returns how many were deleted.
///
/// # Errors
/// The list failing. Individual deletes that fail are skipped (retried next round).
pub async fn cleanup_expired_events(api: &dyn ApiClient, ttl: Duration, now: Timestamp) -> Result<usize, ApiError> {
    let events: Vec<Event> = api.list_typed(None, None).await?;
    let cutoff = now.as_second() - ttl.as_secs() as i64;
    let mut deleted = 0;
    for e in events {
        let Some(seen) = last_seen(&e) else { continue };
        if seen.as_second() >= cutoff {
            continue;
        }
        let opts = DeleteOptions { precondition_uid: e.metadata.uid.clone(), ..Default::default() };
        match api.delete(&resource_of::<Event>(), e.metadata.namespace.as_deref(), s(&e.metadata.name), &opts).await {
            Ok(()) => deleted += 1,
            Err(err) if is_not_found(&err) => {}
            Err(err) => tracing::debug!(%err, "cannot delete expired event"),
        }
    }
    Ok(deleted)
}

/// Runs [`cleanup_expired_events`] every `period` forever.
pub async fn run_event_ttl_cleaner(api: Arc<dyn ApiClient>, ttl: Duration, period: Duration) {
    let mut interval = tokio::time::interval(period);
    loop {
        interval.tick().await;
        match cleanup_expired_events(api.as_ref(), ttl, Timestamp::now()).await {
            Ok(n) if n > 0 => tracing::info!(deleted = n, "deleted expired events"),
            Ok(_) => {}
            Err(e) => tracing::warn!(%e, "listing events for TTL cleanup failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;

    use super::*;
    use crate::fake::FakeApi;

    fn deployment_ref() -> ObjectReference {
        ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("d-uid".into()),
            ..Default::default()
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn ev(message: &str, t: Timestamp) -> Event {
        make_event(
            &EventSource::component("deployment-controller"),
            &deployment_ref(),
            "Normal",
            "ScalingReplicaSet",
            message,
            t,
        )
    }

    #[test]
    fn an_event_with_an_action_carries_it_with_a_microsecond_event_time_and_its_reporting_instance() {
        let t = Timestamp::from_microsecond(1_700_000_000_123_456).unwrap();
        let kubelet = EventSource { component: "kubelet".into(), host: "node1".into() };
        let e =
            make_action_event(&kubelet, &deployment_ref(), "Normal", "Started", "Started", "Started container c", t);
        assert_eq!(e.action.as_deref(), Some("Started"));
        assert_eq!(e.event_time, Some(MicroTime(t)));
        assert_eq!(e.reporting_instance.as_deref(), Some("node1"));
        assert_eq!(e.source.and_then(|s| s.host).as_deref(), Some("node1"));
        let scheduler = EventSource::component("default-scheduler");
        let e = make_action_event(&scheduler, &deployment_ref(), "Normal", "Scheduled", "Binding", "m", t);
        assert_eq!(e.reporting_instance.as_deref(), Some("default-scheduler"));
        assert_eq!(e.source.and_then(|s| s.host), None);
    }

    #[test]
    fn a_new_event_has_kubernetes_shape() {
        let e = ev("Scaled up replica set web-abc from 0 to 3", at(0));
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert!(e.metadata.name.as_deref().unwrap().starts_with("web."));
        assert_eq!(e.count, Some(1));
        assert_eq!(e.first_timestamp, e.last_timestamp);
        assert_eq!(e.source.unwrap().component.as_deref(), Some("deployment-controller"));
        assert_eq!(e.reporting_component.as_deref(), Some("deployment-controller"));
    }

    #[test]
    fn repeats_of_an_event_become_count_patches() {
        let mut c = EventCorrelator::new();
        let first = match c.correlate(ev("same", at(0)), at(0)) {
            Correlated::Create(e) => e,
            other => panic!("expected create, got {other:?}"),
        };
        let mut written = first.clone();
        written.metadata.resource_version = Some("5".into());
        c.update_state(&written);
        match c.correlate(ev("same", at(30)), at(30)) {
            Correlated::Patch(e, patch) => {
                assert_eq!(e.metadata.name, first.metadata.name);
                assert_eq!(e.count, Some(2));
                assert_eq!(e.first_timestamp, first.first_timestamp);
                assert_eq!(patch["count"], 2);
                assert_eq!(patch["lastTimestamp"], json!(time(at(30))));
            }
            other => panic!("expected patch, got {other:?}"),
        }
        match c.correlate(ev("same", at(60)), at(60)) {
            Correlated::Patch(_, patch) => assert_eq!(patch["count"], 3),
            other => panic!("expected patch, got {other:?}"),
        }
    }

    #[test]
    fn ten_similar_events_are_combined() {
        let mut c = EventCorrelator::new();
        for i in 0..9 {
            assert!(matches!(c.correlate(ev(&format!("msg {i}"), at(i)), at(i)), Correlated::Create(_)));
        }
        match c.correlate(ev("msg 9", at(9)), at(9)) {
            Correlated::Create(e) => assert_eq!(e.message.as_deref(), Some("(combined from similar events): msg 9")),
            other => panic!("expected combined create, got {other:?}"),
        }
        match c.correlate(ev("msg 10", at(10)), at(10)) {
            Correlated::Patch(e, p) => {
                assert_eq!(e.count, Some(2));
                assert_eq!(p["message"], "(combined from similar events): msg 10");
            }
            other => panic!("expected combined patch, got {other:?}"),
        }
    }

    #[test]
    fn the_spam_filter_drops_events_beyond_a_burst_of_25() {
        let mut c = EventCorrelator::new();
        let mut skipped = 0;
        for i in 0..30 {
            if c.correlate(ev("same", at(0)), at(0)) == Correlated::Skip {
                skipped += 1;
                assert!(i >= 25);
            }
        }
        assert_eq!(skipped, 5);
        // Five minutes refill one token.
        assert_ne!(c.correlate(ev("same", at(301)), at(301)), Correlated::Skip);
    }

    fn replica_set_event(i: usize, t: Timestamp) -> Event {
        let rs = ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("ReplicaSet".into()),
            name: Some("web-5d8f".into()),
            namespace: Some("default".into()),
            uid: Some("rs-uid".into()),
            ..Default::default()
        };
        make_event(
            &EventSource::component("replicaset-controller"),
            &rs,
            EVENT_TYPE_NORMAL,
            reasons::SUCCESSFUL_CREATE,
            &format!("Created pod: web-5d8f-{i:05}"),
            t,
        )
    }

    #[tokio::test]
    async fn a_thousand_pod_creates_of_one_replica_set_cost_twenty_five_event_writes() {
        let api = FakeApi::new();
        let mut c = EventCorrelator::new();
        for i in 0..1000 {
            record_to_sink(&api, &mut c, replica_set_event(i, Timestamp::now()), Duration::ZERO).await;
        }
        let verbs: Vec<&str> = api.actions().iter().map(|a| a.verb).collect();
        // Nine distinct messages are created as they are; the tenth starts the combined event,
        // whose count the next 15 patch; then the spam filter's burst of 25 is spent.
        assert_eq!(verbs.iter().filter(|v| **v == "create").count(), 10, "{verbs:?}");
        assert_eq!(verbs.iter().filter(|v| **v == "patch").count(), 15, "{verbs:?}");
        let events = api.objects(&resource_of::<Event>());
        assert_eq!(events.len(), 10);
        let combined: Vec<&Value> = events
            .iter()
            .filter(|e| e["message"].as_str().is_some_and(|m| m.starts_with("(combined from similar events): ")))
            .collect();
        assert_eq!(combined.len(), 1);
        assert_eq!(combined[0]["count"], 16);
    }

    #[test]
    fn similar_events_of_different_objects_are_not_combined() {
        let mut c = EventCorrelator::new();
        for i in 0..30 {
            let mut e = ev(&format!("msg {i}"), at(0));
            e.involved_object.name = Some(format!("web-{i}"));
            e.involved_object.uid = Some(format!("uid-{i}"));
            match c.correlate(e, at(0)) {
                Correlated::Create(e) => assert_eq!(e.message, Some(format!("msg {i}"))),
                other => panic!("expected a plain create, got {other:?}"),
            }
        }
    }

    #[test]
    fn similar_events_more_than_ten_minutes_apart_start_a_new_aggregate() {
        let mut c = EventCorrelator::new();
        for i in 0..9 {
            assert!(matches!(c.correlate(ev(&format!("msg {i}"), at(i)), at(i)), Correlated::Create(_)));
        }
        // The 10th distinct message 601 s after the last one is a fresh start, not combined.
        match c.correlate(ev("msg 9", at(8 + 601)), at(8 + 601)) {
            Correlated::Create(e) => assert_eq!(e.message.as_deref(), Some("msg 9")),
            other => panic!("expected a plain create, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_patch_of_an_expired_event_falls_back_to_create() {
        let api = FakeApi::new();
        let mut c = EventCorrelator::new();
        record_to_sink(&api, &mut c, ev("same", at(0)), Duration::ZERO).await;
        let created = api.objects(&resource_of::<Event>());
        assert_eq!(created.len(), 1);
        let name = created[0]["metadata"]["name"].as_str().unwrap().to_string();
        // The event expires on the server; the repeat's patch misses and becomes a create.
        api.delete(&resource_of::<Event>(), Some("default"), &name, &DeleteOptions::default()).await.unwrap();
        api.clear_actions();
        record_to_sink(&api, &mut c, ev("same", at(5)), Duration::ZERO).await;
        assert_eq!(api.actions().iter().map(|a| a.verb).collect::<Vec<_>>(), ["patch", "create"],);
        let events = api.objects(&resource_of::<Event>());
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["count"], 2);
    }

    #[tokio::test]
    async fn expired_events_are_deleted_and_fresh_ones_kept() {
        let api = FakeApi::new();
        let mut old = ev("old", at(0));
        old.metadata.name = Some("old".into());
        let mut fresh = ev("fresh", at(3000));
        fresh.metadata.name = Some("fresh".into());
        api.seed(&old);
        api.seed(&fresh);
        let n = cleanup_expired_events(&api, Duration::from_secs(3600), at(3700)).await.unwrap();
        assert_eq!(n, 1);
        let left: Vec<String> = api
            .objects(&resource_of::<Event>())
            .iter()
            .map(|e| e["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(left, ["fresh"]);
    }

    #[test]
    fn a_recording_recorder_keeps_events() {
        let r = EventRecorder::recording("test");
        let d = Deployment {
            metadata: ObjectMeta { name: Some("web".into()), namespace: Some("default".into()), ..Default::default() },
            ..Default::default()
        };
        r.event_for(&d, EVENT_TYPE_NORMAL, reasons::SCALING_REPLICA_SET, "Scaled up");
        assert_eq!(r.recorded()[0].summary(), "Normal ScalingReplicaSet Scaled up");
        assert_eq!(r.recorded()[0].object.kind.as_deref(), Some("Deployment"));
    }
}
