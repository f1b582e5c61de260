//! The scrape loop (metrics-server's `pkg/scraper`): every resolution, each node's kubelet is
//! asked for `/metrics/resource` over HTTPS with the API server's kubelet-client certificate,
//! all nodes at once, each bounded by a timeout of 90 % of the resolution; simulated nodes are
//! sampled from their pods ([`super::synthetic`]). The batch of every answer replaces the
//! previous one in the [`super::storage::Storage`].

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;

use super::MetricsServer;
use super::decode::decode_batch;
use super::storage::MetricsBatch;
use super::synthetic::SIMULATED_NODE_LABEL;
use crate::AppState;
use crate::util::meta_str;

/// The largest `/metrics/resource` body read (a node of 110 pods answers ≈ 100 KiB).
const MAX_BODY: usize = 16 << 20;

/// The kubelet's address and port of a Node: its InternalIP (else ExternalIP, else Hostname)
/// and `status.daemonEndpoints.kubeletEndpoint.Port` (10250 when unset).
pub fn kubelet_address(node: &Value) -> Option<(String, u16)> {
    let addresses = node["status"]["addresses"].as_array()?;
    let address = ["InternalIP", "ExternalIP", "Hostname"].iter().find_map(|t| {
        addresses.iter().find(|a| a["type"] == *t).and_then(|a| a["address"].as_str().map(str::to_string))
    })?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_u64().unwrap_or(10250);
    Some((address, u16::try_from(port).ok().filter(|p| *p > 0)?))
}

/// GETs `path` from the kubelet of `node`.
async fn get_from_kubelet(state: &AppState, node: &Value, path: &str) -> Result<String, String> {
    let (address, port) = kubelet_address(node).ok_or("the node has no address")?;
    let tls = state.kubelet_tls.clone().ok_or("no kubelet client certificate")?;
    let tcp = tokio::net::TcpStream::connect((address.as_str(), port)).await.map_err(|e| e.to_string())?;
    let server_name = ServerName::try_from(address.clone()).map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(tls).connect(server_name, tcp).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let host = if address.contains(':') { format!("[{address}]:{port}") } else { format!("{address}:{port}") };
    let req = axum::http::Request::get(path)
        .header(axum::http::header::HOST, host)
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), MAX_BODY).collect().await.map_err(|e| e.to_string())?.to_bytes();
    if !status.is_success() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body).trim()));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// One scrape of every node.
pub async fn scrape(state: &AppState, server: &MetricsServer) -> MetricsBatch {
    let (Some(nodes_def), Some(pods_def)) =
        (state.registry.get("", "v1", "nodes"), state.registry.get("", "v1", "pods"))
    else {
        return MetricsBatch::default();
    };
    let (Ok(node_cache), Ok(pod_cache)) = (state.cache(nodes_def), state.cache(pods_def)) else {
        return MetricsBatch::default();
    };
    let nodes = node_cache.snapshot(&nodes_def.prefix()).objects;
    let (simulated, real): (Vec<&Arc<Value>>, Vec<&Arc<Value>>) =
        nodes.iter().partition(|n| n["metadata"]["labels"][SIMULATED_NODE_LABEL] == "true");
    let mut batch = MetricsBatch::default();
    if !simulated.is_empty() {
        let names: std::collections::HashSet<&str> = simulated.iter().map(|n| meta_str(n, "name")).collect();
        let pods = pod_cache.snapshot(&pods_def.prefix()).objects;
        let on_simulated: Vec<&Value> = pods
            .iter()
            .map(|p| p.as_ref())
            .filter(|p| names.contains(p["spec"]["nodeName"].as_str().unwrap_or("")))
            .collect();
        let simulated: Vec<&Value> = simulated.iter().map(|n| n.as_ref()).collect();
        batch = server.counters.lock().sample(&simulated, &on_simulated, now_ms());
    }
    let timeout = server.resolution.mul_f64(0.9).max(Duration::from_secs(1));
    let answers = futures::future::join_all(real.iter().map(|node| async move {
        let name = meta_str(node, "name");
        match tokio::time::timeout(timeout, get_from_kubelet(state, node, "/metrics/resource")).await {
            Ok(Ok(text)) => Some(decode_batch(name, &text, now_ms())),
            Ok(Err(e)) => {
                tracing::debug!(node = name, error = %e, "scraping the kubelet's resource metrics failed");
                None
            }
            Err(_) => {
                tracing::debug!(node = name, "scraping the kubelet's resource metrics timed out");
                None
            }
        }
    }))
    .await;
    for b in answers.into_iter().flatten() {
        batch.nodes.extend(b.nodes);
        for (pod, containers) in b.pods {
            // A pod is on one node; a duplicate (two nodes claiming it) keeps the first.
            batch.pods.entry(pod).or_insert(containers);
        }
    }
    batch
}

/// Scrapes every resolution until the task is aborted.
pub async fn run(state: Arc<AppState>, server: Arc<MetricsServer>) {
    let mut ticker = tokio::time::interval(server.resolution);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let batch = scrape(&state, &server).await;
        server.storage.write().store(batch);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_kubelet_is_reached_at_the_internal_ip_and_the_advertised_port() {
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "h"}, {"type": "InternalIP", "address": "10.0.0.2"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10251}}}});
        assert_eq!(kubelet_address(&node), Some(("10.0.0.2".to_string(), 10251)));
        let node = json!({"status": {"addresses": [{"type": "Hostname", "address": "h"}]}});
        assert_eq!(kubelet_address(&node), Some(("h".to_string(), 10250)));
        assert_eq!(kubelet_address(&json!({"status": {}})), None);
        let bad_port = json!({"status": {"addresses": [{"type": "InternalIP", "address": "a"}], "daemonEndpoints": {"kubeletEndpoint": {"Port": 70000}}}});
        assert_eq!(kubelet_address(&bad_port), None);
    }
}
