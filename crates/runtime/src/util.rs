//! Helpers the runtime shares with its users: a replaceable clock, `metav1.Time` at the API's
//! precision, and object references (the `involvedObject` of an event).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;

/// A source of "now" (wall clock), replaceable in tests.
pub type Clock = std::sync::Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    std::sync::Arc::new(Timestamp::now)
}

/// A clock stuck at `t` (tests).
pub fn fixed_clock(t: Timestamp) -> Clock {
    std::sync::Arc::new(move || t)
}

/// `metav1.Time` for `t`, truncated to whole seconds (the API's precision for `Time`).
pub fn time(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

/// `t + secs` seconds.
pub fn add_seconds(t: Timestamp, secs: i64) -> Timestamp {
    t.checked_add(SignedDuration::from_secs(secs)).unwrap_or(t)
}

/// An `ObjectReference` to a typed object (the `involvedObject` of an event).
pub fn object_reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    let meta = obj.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).to_string()),
        kind: Some(K::kind(&()).to_string()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}
