//! `pods/exec`, `pods/attach` and `pods/portforward`: streaming subresources proxied to the
//! pod's kubelet, as kube-apiserver's `ExecREST`, `AttachREST` and `PortForwardREST` do
//! (<https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#get-connect-exec-of-pod>).
//!
//! The caller's upgrade request (WebSocket `v5.channel.k8s.io`/`v4.channel.k8s.io` from kubectl
//! 1.30+, or SPDY/3.1 from older clients and as their fallback) is sent to the kubelet's
//! `/exec`, `/attach` or `/portForward` endpoint with the same query and upgrade headers. When the
//! kubelet answers `101 Switching Protocols`, the API server answers the same and copies bytes
//! both ways between the two upgraded connections; any other answer is returned as an error
//! Status (for a WebSocket request that is what makes kubectl fall back to SPDY).

use std::sync::Arc;

use axum::body::Body;
use axum::http::request::Parts;
use axum::response::Response;
use hyper_util::rt::TokioIo;
use skiff_apimachinery::ApiError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::AppState;
use crate::endpoints::request::Query;

/// Request headers that carry the upgrade negotiation to the kubelet.
const UPGRADE_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "x-stream-protocol-version",
];

/// Response headers of the kubelet's `101` relayed to the caller.
const RESPONSE_HEADERS: &[&str] =
    &["connection", "upgrade", "sec-websocket-accept", "sec-websocket-protocol", "x-stream-protocol-version"];

/// The kubelet path for `subresource` of pod `ns/name`, with the caller's raw query.
///
/// # Errors
/// 400 for an unknown subresource or container.
fn kubelet_path(
    pod: &serde_json::Value,
    ns: &str,
    name: &str,
    subresource: &str,
    q: &Query,
    raw_query: &str,
) -> Result<String, ApiError> {
    let base = match subresource {
        "exec" | "attach" => {
            let container = crate::endpoints::proxy::container_name(pod, name, q)?;
            format!("/{subresource}/{ns}/{name}/{container}")
        }
        "portforward" => format!("/portForward/{ns}/{name}"),
        other => return Err(ApiError::bad_request(format!("unknown streaming subresource {other}"))),
    };
    Ok(if raw_query.is_empty() { base } else { format!("{base}?{raw_query}") })
}

/// Serves `GET|POST pods/{name}/{exec,attach,portforward}` by connecting the caller's upgraded
/// connection to the kubelet's.
///
/// # Errors
/// 404 for a missing pod; 400 when the pod is not running on a node, the container is unknown
/// or the request is not an upgrade; 503 when the kubelet is unreachable; the kubelet's own
/// refusal otherwise.
pub async fn connect(
    state: &Arc<AppState>,
    parts: &Parts,
    ns: &str,
    name: &str,
    subresource: &str,
    q: &Query,
) -> Result<Response, ApiError> {
    let pods = state.registry.get("", "v1", "pods").ok_or_else(|| ApiError::internal("pods are not registered"))?;
    let pod = state.objects.get(pods, ns, name).await?;
    if matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) {
        return Err(ApiError::bad_request(format!(
            "cannot {subresource} into a container in a completed pod; current phase is {}",
            pod["status"]["phase"].as_str().unwrap_or_default()
        )));
    }
    let Some(on_upgrade) = parts.extensions.get::<hyper::upgrade::OnUpgrade>().cloned() else {
        return Err(ApiError::bad_request(format!("{subresource} needs a connection upgrade (WebSocket or SPDY)")));
    };
    let path = kubelet_path(&pod, ns, name, subresource, q, parts.uri.query().unwrap_or_default())?;
    let (mut kubelet, host) = crate::endpoints::proxy::connect_kubelet(state, &pod, name, &path).await?;
    let unreachable = |e: String| ApiError::unavailable(format!("{} \"https://{host}{path}\": {e}", parts.method));
    let mut head = format!("{} {path} HTTP/1.1\r\nHost: {host}\r\n", parts.method);
    for h in UPGRADE_HEADERS {
        for v in parts.headers.get_all(*h) {
            if let Ok(v) = v.to_str() {
                head.push_str(&format!("{h}: {v}\r\n"));
            }
        }
    }
    head.push_str("Content-Length: 0\r\n\r\n");
    kubelet.write_all(head.as_bytes()).await.map_err(|e| unreachable(e.to_string()))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    let head_end = loop {
        let n = kubelet.read(&mut chunk).await.map_err(|e| unreachable(e.to_string()))?;
        if n == 0 {
            return Err(unreachable("connection closed".into()));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > 64 * 1024 {
            return Err(unreachable("oversized response head".into()));
        }
    };
    let head_text = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head_text.split("\r\n");
    let status =
        lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|c| c.parse::<u16>().ok()).unwrap_or(502);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let leftover = buf[head_end..].to_vec();
    if status != 101 {
        // Read the (small) error body the kubelet sent, as far as it is delimited.
        let len = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse::<usize>().ok());
        let mut body = leftover;
        if let Some(len) = len {
            while body.len() < len.min(64 * 1024) {
                match kubelet.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => body.extend_from_slice(&chunk[..n]),
                }
            }
        }
        let text = String::from_utf8_lossy(&body).trim().to_string();
        return Err(match status {
            404 => ApiError::new(404, "NotFound", text),
            400..=499 => ApiError::new(400, "BadRequest", text),
            _ => ApiError::new(500, "InternalError", text),
        });
    }
    let mut resp = Response::builder().status(101);
    for (k, v) in &headers {
        if RESPONSE_HEADERS.contains(&k.as_str()) {
            resp = resp.header(k.as_str(), v.as_str());
        }
    }
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let mut caller = TokioIo::new(upgraded);
        if !leftover.is_empty() && caller.write_all(&leftover).await.is_err() {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut caller, &mut kubelet).await;
    });
    resp.body(Body::empty()).map_err(|e| ApiError::internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_paths_name_the_kubelet_endpoint_and_keep_the_query() {
        let pod = serde_json::json!({"spec": {"containers": [{"name": "web"}]}});
        let q = Query::default();
        let exec = kubelet_path(&pod, "default", "p", "exec", &q, "command=ls&stdout=true").unwrap_or_default();
        assert_eq!(exec, "/exec/default/p/web?command=ls&stdout=true");
        assert_eq!(kubelet_path(&pod, "ns", "p", "portforward", &q, "").unwrap_or_default(), "/portForward/ns/p");
        assert!(kubelet_path(&pod, "ns", "p", "proxy", &q, "").is_err());
        let two = serde_json::json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert!(kubelet_path(&two, "ns", "p", "attach", &q, "").is_err(), "two containers and none named");
    }
}
