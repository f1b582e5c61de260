//! The `metrics.k8s.io/v1beta1` resources (k8s.io/metrics `NodeMetrics`, `PodMetrics`) as
//! metrics-server's `pkg/api` serves them: get and list (no watch), the label and field
//! selectors applied to the Node or Pod the metrics are of, items sorted by name (namespace,
//! then name, for pods), `metadata.labels` and `creationTimestamp` (now) taken from the Node
//! or Pod, and Tables with `Name`, one column per usage resource (`cpu`, `memory`) and
//! `Window`. A node or pod without usage is left out of lists and is 404 on get, which is what
//! makes `kubectl top node` print `<unknown>` for it.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use super::MetricsServer;
use super::storage::Usage;
use crate::AppState;
use crate::endpoints::negotiation::Output;
use crate::endpoints::request::{Query, RequestInfo};
use crate::endpoints::responsewriters::json_response;
use crate::endpoints::table::{IncludeObject, partial_metadata};
use crate::registry::machinery::Selectors;
use crate::util::{meta_str, now, rfc3339};

/// A CPU quantity of `nanocores` as `resource.Quantity` prints a DecimalSI value at nano
/// scale: the largest of `n`, `u`, `m`, (none) that keeps the number whole.
pub fn cpu_quantity(nanocores: u64) -> String {
    if nanocores == 0 {
        return "0".to_string();
    }
    let mut v = nanocores;
    for suffix in ["n", "u", "m"] {
        if !v.is_multiple_of(1000) {
            return format!("{v}{suffix}");
        }
        v /= 1000;
    }
    v.to_string()
}

/// A memory quantity of `bytes` as `resource.Quantity` prints a BinarySI value: the largest
/// of `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei` that keeps the number whole, else plain bytes.
pub fn memory_quantity(bytes: u64) -> String {
    if bytes == 0 {
        return "0".to_string();
    }
    let mut v = bytes;
    let mut suffix = "";
    for s in ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
        if !v.is_multiple_of(1024) {
            break;
        }
        v /= 1024;
        suffix = s;
    }
    format!("{v}{suffix}")
}

/// A window of `ms` milliseconds as Go's `time.Duration.String` prints it (`15s`, `14.998s`,
/// `1m0.5s`, `250ms`), which metrics-server uses in its Tables.
pub fn go_duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    if ms < 1000 {
        return format!("{sign}{ms}ms");
    }
    let (h, m, s, frac) = (ms / 3_600_000, (ms / 60_000) % 60, (ms / 1000) % 60, ms % 1000);
    let secs = if frac == 0 { format!("{s}s") } else { format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0')) };
    match (h, m) {
        (0, 0) => format!("{sign}{secs}"),
        (0, m) => format!("{sign}{m}m{secs}"),
        (h, m) => format!("{sign}{h}h{m}m{secs}"),
    }
}

/// The window as metav1.Duration serializes it (Go's `Duration.String`).
fn window(u: &Usage) -> String {
    go_duration(u.window_ms)
}

fn timestamp(u: &Usage) -> String {
    rfc3339(u.timestamp_ms.div_euclid(1000))
}

fn usage_json(u: &Usage) -> Value {
    json!({"cpu": cpu_quantity(u.cpu_nanocores), "memory": memory_quantity(u.memory_bytes)})
}

fn metadata(obj: &Value, namespaced: bool) -> Value {
    let mut m = json!({"name": meta_str(obj, "name"), "creationTimestamp": now()});
    if namespaced {
        m["namespace"] = json!(meta_str(obj, "namespace"));
    }
    if let Some(labels) = obj["metadata"].get("labels").filter(|l| l.as_object().is_some_and(|o| !o.is_empty())) {
        m["labels"] = labels.clone();
    }
    m
}

/// The NodeMetrics of `node`, if it has usage.
pub fn node_metrics(server: &MetricsServer, node: &Value) -> Option<Value> {
    let u = server.storage.read().node_usage(meta_str(node, "name"))?;
    Some(json!({
        "kind": "NodeMetrics",
        "apiVersion": super::API_VERSION,
        "metadata": metadata(node, false),
        "timestamp": timestamp(&u),
        "window": window(&u),
        "usage": usage_json(&u),
    }))
}

/// The PodMetrics of `pod`, if every one of its containers has usage.
pub fn pod_metrics(server: &MetricsServer, pod: &Value) -> Option<Value> {
    let (containers, earliest) = server.storage.read().pod_usage(meta_str(pod, "namespace"), meta_str(pod, "name"))?;
    let containers: Vec<Value> =
        containers.iter().map(|(name, u)| json!({"name": name, "usage": usage_json(u)})).collect();
    Some(json!({
        "kind": "PodMetrics",
        "apiVersion": super::API_VERSION,
        "metadata": metadata(pod, true),
        "timestamp": timestamp(&earliest),
        "window": window(&earliest),
        "containers": containers,
    }))
}

/// Sums a usage resource over a PodMetrics' containers, or reads a NodeMetrics' usage.
fn total_usage(obj: &Value, resource: &str) -> String {
    if obj["kind"] == "NodeMetrics" {
        return obj["usage"][resource].as_str().unwrap_or("0").to_string();
    }
    let mut sum = 0u64;
    for c in obj["containers"].as_array().into_iter().flatten() {
        let q = c["usage"][resource].as_str().unwrap_or("0");
        let v = skiff_apimachinery::quantity::parse_quantity(q).unwrap_or(0.0);
        sum += if resource == "cpu" { (v * 1e9).round() as u64 } else { v.round() as u64 };
    }
    if resource == "cpu" { cpu_quantity(sum) } else { memory_quantity(sum) }
}

/// The Table of NodeMetrics or PodMetrics objects (metrics-server's `addNodeMetricsToTable` /
/// `addPodMetricsToTable`): `Name`, `cpu`, `memory`, `Window`.
pub fn to_table(items: &[Value], include: IncludeObject) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut row = json!({"cells": [meta_str(o, "name"), total_usage(o, "cpu"), total_usage(o, "memory"),
                o["window"].as_str().unwrap_or("")]});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(o),
                IncludeObject::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    let columns = if items.is_empty() {
        json!([])
    } else {
        json!([
            {"name": "Name", "type": "string", "format": "name", "description": "Name of the resource", "priority": 0},
            {"name": "cpu", "type": "string", "format": "quantity", "description": "", "priority": 0},
            {"name": "memory", "type": "string", "format": "quantity", "description": "", "priority": 0},
            {"name": "Window", "type": "string", "format": "duration", "description": "", "priority": 0},
        ])
    };
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "columnDefinitions": columns, "rows": rows})
}

fn render(out: Output, obj: Value, list_kind: Option<&str>, items: Vec<Value>) -> Value {
    match (out, list_kind) {
        (Output::Table(inc), Some(_)) => to_table(&items, inc),
        (Output::Table(inc), None) => to_table(std::slice::from_ref(&obj), inc),
        (Output::Metadata, Some(_)) => json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
            "metadata": {}, "items": items.iter().map(partial_metadata).collect::<Vec<_>>()}),
        (Output::Metadata, None) => partial_metadata(&obj),
        (Output::Json, Some(kind)) => {
            json!({"kind": kind, "apiVersion": super::API_VERSION, "metadata": {}, "items": items})
        }
        (Output::Json, None) => obj,
    }
}

/// Serves one request for `metrics.k8s.io/v1beta1` nodes or pods.
///
/// # Errors
/// 404 for an unknown object or one without usage; 405 for any verb but get and list
/// (watch included, as metrics-server without its watch support); 400 for bad selectors; 503
/// when the API server runs no metrics scraper.
pub fn serve(state: &Arc<AppState>, info: &RequestInfo, q: &Query, out: Output) -> Result<Response, ApiError> {
    let def = &info.def;
    let server = state.metrics_server.as_ref().ok_or_else(|| {
        ApiError::unavailable(format!(
            "the server is currently unable to handle the request ({}.{})",
            def.resource, def.group
        ))
    })?;
    if !info.subresource.is_empty() || !matches!(info.verb, "get" | "list") {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({}.{})",
            def.resource, def.group
        )));
    }
    let nodes = def.resource == "nodes";
    let source = state
        .registry
        .get("", "v1", if nodes { "nodes" } else { "pods" })
        .ok_or_else(|| ApiError::internal("nodes and pods are not registered"))?
        .clone();
    let cache = state.cache(&source)?;
    let ns = info.namespace.as_str();
    let metrics_of = |o: &Value| if nodes { node_metrics(server, o) } else { pod_metrics(server, o) };
    if info.verb == "get" {
        let not_found = || ApiError::not_found(def.group, def.resource, &info.name);
        let obj = cache.get(&source.key(ns, &info.name)).ok_or_else(not_found)?;
        let m = metrics_of(&obj).ok_or_else(not_found)?;
        return Ok(json_response(StatusCode::OK, &render(out, m, None, Vec::new())));
    }
    let selectors = Selectors::parse(
        &source,
        q.get("labelSelector").map(String::as_str),
        q.get("fieldSelector").map(String::as_str),
    )?;
    let prefix = source.namespace_prefix(if ns.is_empty() { None } else { Some(ns) });
    let snapshot = cache.snapshot(&prefix);
    // Snapshot objects are in key order: namespace, then name.
    let items: Vec<Value> =
        snapshot.objects.iter().filter(|o| selectors.matches(&source, o)).filter_map(|o| metrics_of(o)).collect();
    let kind = if nodes { "NodeMetricsList" } else { "PodMetricsList" };
    Ok(json_response(StatusCode::OK, &render(out, Value::Null, Some(kind), items)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_prints_with_the_largest_whole_suffix() {
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(1_500_000_000), "1500m");
        assert_eq!(cpu_quantity(12_345), "12345n");
        assert_eq!(cpu_quantity(12_000), "12u");
    }

    #[test]
    fn memory_prints_binary_suffixes_only_when_whole() {
        assert_eq!(memory_quantity(0), "0");
        assert_eq!(memory_quantity(1024), "1Ki");
        assert_eq!(memory_quantity(64 * 1024 * 1024), "64Mi");
        assert_eq!(memory_quantity(1536), "1536");
        assert_eq!(memory_quantity(1000), "1000");
        assert_eq!(memory_quantity(3 * 1024 * 1024 * 1024 + 1024), "3145729Ki");
    }

    #[test]
    fn windows_print_as_go_durations() {
        assert_eq!(go_duration(15_000), "15s");
        assert_eq!(go_duration(14_998), "14.998s");
        assert_eq!(go_duration(15_500), "15.5s");
        assert_eq!(go_duration(60_500), "1m0.5s");
        assert_eq!(go_duration(250), "250ms");
        assert_eq!(go_duration(3_600_000), "1h0m0s");
        assert_eq!(go_duration(0), "0s");
    }

    #[test]
    fn a_pod_table_row_sums_its_containers() {
        let pod = json!({"kind": "PodMetrics", "metadata": {"name": "web"}, "window": "15s", "containers": [
            {"name": "a", "usage": {"cpu": "250m", "memory": "1Mi"}},
            {"name": "b", "usage": {"cpu": "500u", "memory": "1Mi"}}]});
        let t = to_table(&[pod], IncludeObject::None);
        assert_eq!(t["rows"][0]["cells"], json!(["web", "250500u", "2Mi", "15s"]));
        assert_eq!(t["columnDefinitions"][1]["name"], "cpu");
        assert_eq!(t["columnDefinitions"][3]["name"], "Window");
    }
}
