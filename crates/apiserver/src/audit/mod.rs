//! Auditing (<https://kubernetes.io/docs/tasks/debug/debug-cluster/audit/>): a chronological
//! record of the requests the API server handled, as `audit.k8s.io/v1` `Event`s. The
//! [`policy`] decides per request the level (None, Metadata, Request, RequestResponse) and
//! the stages recorded; the [`log`] backend writes the events as JSON lines off the request
//! path. The handler chain ([`crate::server::handler`]) drives a [`Pending`] event through the
//! stages: `RequestReceived` once the user is known, `ResponseStarted` for watches,
//! `ResponseComplete` when the response is done (for a watch, when its stream ends).
//!
//! At `Metadata` level no body is recorded, so Secrets' data never appears; `Request` adds the
//! request body and `RequestResponse` the response body (JSON or protobuf, recorded as JSON;
//! Table responses are left out). Not done: the `Panic` stage, the `impersonatedUser` field (the
//! impersonated user is recorded as `user`), and the webhook backend.

pub mod log;
pub mod policy;

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::request::Parts;
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::auth::RequestUser;
use crate::endpoints::request::RequestInfo;
use policy::{Decision, Level, Policy, RequestAttributes, Stage};

/// `--audit-policy-file` and the log backend's flags.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// The `audit.k8s.io/v1` Policy file.
    pub policy_file: std::path::PathBuf,
    /// The log backend's settings.
    pub log: log::LogOptions,
}

/// The auditing of one API server: its policy and backend.
pub struct Auditor {
    policy: Policy,
    backend: log::LogBackend,
}

impl Auditor {
    /// Reads the policy and opens the log.
    ///
    /// # Errors
    /// An unreadable or invalid policy file (named, with the problem), or a log file that
    /// cannot be opened.
    pub fn new(opts: &AuditOptions) -> anyhow::Result<Auditor> {
        let text = std::fs::read_to_string(&opts.policy_file)
            .map_err(|e| anyhow::anyhow!("--audit-policy-file {}: {e}", opts.policy_file.display()))?;
        let policy = Policy::parse(&text)
            .map_err(|e| anyhow::anyhow!("--audit-policy-file {}: {e}", opts.policy_file.display()))?;
        let backend = log::LogBackend::start(opts.log.clone())
            .map_err(|e| anyhow::anyhow!("--audit-log-path {}: {e}", opts.log.path.display()))?;
        Ok(Auditor { policy, backend })
    }

    /// The backend's counters.
    pub fn counters(&self) -> &log::LogCounters {
        &self.backend.counters
    }
}

/// Request bodies larger than this are not recorded (kube-apiserver's request limit is 3 MiB;
/// the handlers refuse anything larger with 413 by themselves).
const MAX_RECORDED_BODY: usize = 3 * 1024 * 1024;

/// An event being built for one request. A no-op when auditing is off or the level is `None`.
pub struct Pending {
    auditor: Option<Arc<Auditor>>,
    event: Map<String, Value>,
    decision: Decision,
    received: SystemTime,
    watch: bool,
    decided: bool,
}

/// `2026-12-02T16:50:00.123456Z`: audit timestamps carry microseconds (`metav1.MicroTime`).
fn micro_time(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:06}Z", crate::util::rfc3339(d.as_secs() as i64).trim_end_matches('Z'), d.subsec_micros())
}

impl Pending {
    /// Starts an event for a request as it arrives.
    pub fn start(auditor: Option<&Arc<Auditor>>, parts: &Parts) -> Pending {
        let mut event = Map::new();
        if auditor.is_some() {
            let header =
                |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
            let mut source_ips: Vec<Value> = header("x-forwarded-for")
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect();
            if let Some(crate::auth::ClientAddr(addr)) = parts.extensions.get::<crate::auth::ClientAddr>() {
                source_ips.push(Value::String(addr.ip().to_string()));
            }
            event.insert("kind".into(), json!("Event"));
            event.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
            event.insert("auditID".into(), json!(crate::util::new_uid()));
            event.insert("requestURI".into(), json!(parts.uri.to_string()));
            event.insert("verb".into(), json!(parts.method.as_str().to_ascii_lowercase()));
            event.insert("user".into(), json!({}));
            event.insert("sourceIPs".into(), Value::Array(source_ips));
            let agent = header("user-agent");
            if !agent.is_empty() {
                event.insert("userAgent".into(), json!(agent));
            }
        }
        Pending {
            auditor: auditor.cloned(),
            event,
            decision: Decision::default(),
            received: SystemTime::now(),
            watch: false,
            decided: false,
        }
    }

    /// The level this request is recorded at (`None` when auditing is off).
    pub fn level(&self) -> Level {
        if self.auditor.is_some() { self.decision.level } else { Level::None }
    }

    /// Records who asked and for what, decides the level and writes `RequestReceived`.
    pub fn identify(&mut self, user: Option<&RequestUser>, info: Option<&RequestInfo>, path: &str) {
        let Some(auditor) = self.auditor.clone() else { return };
        let empty = Vec::new();
        let verb = match info {
            Some(i) => i.verb.to_string(),
            None => self.event["verb"].as_str().unwrap_or_default().to_string(),
        };
        let attrs = RequestAttributes {
            user: user.map(|u| u.name.as_str()).unwrap_or_default(),
            groups: user.map(|u| &u.groups).unwrap_or(&empty),
            verb: &verb,
            resource_request: info.is_some(),
            group: info.map(|i| i.def.group).unwrap_or_default(),
            resource: info.map(|i| i.def.resource).unwrap_or_default(),
            subresource: info.map(|i| i.subresource.as_str()).unwrap_or_default(),
            namespace: info.map(|i| i.namespace.as_str()).unwrap_or_default(),
            name: info.map(|i| i.name.as_str()).unwrap_or_default(),
            path,
        };
        self.decision = auditor.policy.decide(&attrs);
        self.decided = true;
        self.watch = verb == "watch";
        self.event.insert("verb".into(), json!(verb));
        if let Some(u) = user {
            self.event.insert("user".into(), json!({"username": u.name, "groups": u.groups}));
        }
        if let Some(i) = info {
            let mut object_ref = Map::new();
            object_ref.insert("resource".into(), json!(i.def.resource));
            for (k, v) in [
                ("namespace", i.namespace.as_str()),
                ("name", i.name.as_str()),
                ("subresource", i.subresource.as_str()),
            ] {
                if !v.is_empty() {
                    object_ref.insert(k.into(), json!(v));
                }
            }
            if !i.def.group.is_empty() {
                object_ref.insert("apiGroup".into(), json!(i.def.group));
            }
            object_ref.insert("apiVersion".into(), json!(i.def.version));
            self.event.insert("objectRef".into(), Value::Object(object_ref));
        }
        self.emit(Stage::RequestReceived, None);
    }

    /// Notes the authorization decision as kube-apiserver annotates events.
    pub fn authorized(&mut self, allowed: bool) {
        if self.auditor.is_some() {
            self.event.insert(
                "annotations".into(),
                json!({"authorization.k8s.io/decision": if allowed { "allow" } else { "forbid" }, "authorization.k8s.io/reason": ""}),
            );
        }
    }

    /// Reads the request body when the level records it and hands back an equivalent body.
    pub async fn capture_request(&mut self, body: Body, headers: &axum::http::HeaderMap) -> Body {
        if self.level() < Level::Request {
            return body;
        }
        match axum::body::to_bytes(body, MAX_RECORDED_BODY).await {
            Ok(bytes) => {
                // Objects in any encoding the handlers read (JSON, YAML, protobuf); patches as JSON.
                let decoded = crate::endpoints::negotiation::decode_object(headers, &bytes)
                    .map(|(v, _)| v)
                    .ok()
                    .or_else(|| serde_json::from_slice::<Value>(&bytes).ok());
                if let Some(v) = decoded {
                    self.event.insert("requestObject".into(), self.trim(v));
                }
                Body::from(bytes)
            }
            // Larger than any request the handlers accept: they answer 413 for it.
            Err(_) => Body::from(vec![0u8; MAX_RECORDED_BODY + 1]),
        }
    }

    fn trim(&self, mut v: Value) -> Value {
        if self.decision.omit_managed_fields
            && let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("managedFields");
        }
        v
    }

    fn emit(&self, stage: Stage, at: Option<SystemTime>) {
        let Some(auditor) = &self.auditor else { return };
        if self.decision.level == Level::None || self.decision.omit_stages.contains(&stage) {
            return;
        }
        let mut event = self.event.clone();
        event.insert("level".into(), json!(self.decision.level.as_str()));
        event.insert("stage".into(), json!(stage.as_str()));
        event.insert("requestReceivedTimestamp".into(), json!(micro_time(self.received)));
        event.insert("stageTimestamp".into(), json!(micro_time(at.unwrap_or_else(SystemTime::now))));
        auditor.backend.emit(&Value::Object(event));
    }

    /// Records the response: `ResponseComplete` now, or for a watch `ResponseStarted` now and
    /// `ResponseComplete` when its stream ends. Returns the response to send.
    pub async fn finish(mut self, resp: Response) -> Response {
        if self.auditor.is_none() {
            return resp;
        }
        if !self.decided {
            // Refused before the request was understood (authentication failed): decided as a
            // request from nobody.
            let path =
                self.event["requestURI"].as_str().unwrap_or_default().split('?').next().unwrap_or_default().to_string();
            self.identify(None, None, &path);
        }
        if self.decision.level == Level::None {
            return resp;
        }
        let code = resp.status().as_u16();
        let mut status = json!({"metadata": {}, "code": code});
        let content_type = resp
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let protobuf = content_type.starts_with(crate::endpoints::protobuf::MEDIA_TYPE);
        let json_body =
            (content_type.starts_with("application/json") || protobuf) && !content_type.contains("as=Table");
        let wants_body = code >= 400 || (self.decision.level == Level::RequestResponse && json_body);
        if self.watch && code < 400 {
            self.event.insert("responseStatus".into(), status);
            self.emit(Stage::ResponseStarted, None);
            let (parts, body) = resp.into_parts();
            let done = CompleteOnDrop(Some(self));
            let stream = body.into_data_stream().map(move |chunk| {
                let _keep_until_the_stream_is_dropped = &done;
                chunk
            });
            return Response::from_parts(parts, Body::from_stream(stream));
        }
        if !wants_body {
            self.event.insert("responseStatus".into(), status);
            self.emit(Stage::ResponseComplete, None);
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let bytes = match axum::body::to_bytes(body, usize::MAX).await {
            Ok(b) => b,
            Err(_) => {
                self.event.insert("responseStatus".into(), status);
                self.emit(Stage::ResponseComplete, None);
                return Response::from_parts(parts, Body::empty());
            }
        };
        let decoded = if protobuf {
            crate::endpoints::protobuf::decode(&bytes).ok()
        } else {
            serde_json::from_slice::<Value>(&bytes).ok()
        };
        if let Some(v) = decoded {
            if code >= 400 && v["kind"] == "Status" {
                for k in ["status", "message", "reason", "details"] {
                    if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
                        status[k] = x.clone();
                    }
                }
            }
            if self.decision.level == Level::RequestResponse && json_body {
                self.event.insert("responseObject".into(), self.trim(v));
            }
        }
        self.event.insert("responseStatus".into(), status);
        self.emit(Stage::ResponseComplete, None);
        Response::from_parts(parts, Body::from(bytes))
    }
}

/// Writes a watch's `ResponseComplete` when its response stream is dropped (ended, or the
/// client went away).
struct CompleteOnDrop(Option<Pending>);

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            p.emit(Stage::ResponseComplete, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_timestamps_carry_microseconds() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_714_564_800_123_456);
        assert_eq!(micro_time(t), "2024-05-01T12:00:00.123456Z");
    }
}
