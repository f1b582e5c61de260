//! The `default/kubernetes` Service and its endpoints, maintained by the API server itself as
//! kube-apiserver does (`pkg/controlplane/controller/kubernetesservice` and the lease endpoint
//! reconciler of `pkg/controlplane/reconcilers/lease.go`).
//!
//! The Service has the first IP of the service range and port 443 (`https`) to the API
//! server's port. Every API server sharing the store keeps a lease under
//! `/registry/masterleases/<ip>` (kube-apiserver's key) renewed every
//! [`RECONCILE_INTERVAL`]; the `kubernetes` Endpoints and EndpointSlice list the addresses
//! whose lease is younger than [`LEASE_TTL`]. A server removes its own lease and address when
//! it shuts down; a crashed server's lease expires and the next reconcile of a live one
//! drops it.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;
use skiff_store::RangeRequest;

use crate::AppState;
use crate::registry::store::WriteOptions;

/// How often a server renews its lease and rewrites the endpoints
/// (`--endpoint-reconciler` lease: 10 s).
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a lease stays live without renewal (`master-endpoint-reconcile-ttl`, 15 s).
pub const LEASE_TTL: Duration = Duration::from_secs(15);
/// Where the API servers' leases live.
pub const LEASE_PREFIX: &str = "/registry/masterleases/";
/// The Service's name (in `default`).
pub const NAME: &str = "kubernetes";

/// What one API server publishes.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The address other hosts reach it at.
    pub ip: IpAddr,
    /// Its HTTPS port.
    pub port: u16,
}

/// The address to publish when none is configured: a specific non-loopback bind address, else
/// the local address of the default route (no packet is sent), else 127.0.0.1.
pub fn advertise_address(configured: Option<IpAddr>, bind: IpAddr) -> IpAddr {
    if let Some(ip) = configured {
        return ip;
    }
    if !bind.is_unspecified() && !bind.is_loopback() {
        return bind;
    }
    if let Ok(sock) = std::net::UdpSocket::bind("0.0.0.0:0")
        && sock.connect("192.0.2.1:53").is_ok()
        && let Ok(addr) = sock.local_addr()
        && !addr.ip().is_unspecified()
    {
        return addr.ip();
    }
    IpAddr::from([127, 0, 0, 1])
}

fn def<'a>(
    state: &'a AppState,
    group: &str,
    version: &str,
    resource: &str,
) -> Result<&'a crate::resources::ResourceDef> {
    state.registry.get(group, version, resource).with_context(|| format!("{resource} are not registered"))
}

/// Creates `obj` or, when it exists and differs in the fields `same` compares, replaces them.
async fn create_or_update(
    state: &AppState,
    def: &crate::resources::ResourceDef,
    obj: Value,
    merge: impl Fn(&Value, &Value) -> Option<Value>,
) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let opts = WriteOptions::default();
    match state.objects.get(def, "default", &name).await {
        Err(e) if e.code == 404 => match state.objects.create(def, "default", obj, None, &opts).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
        Ok(current) => {
            let Some(_) = merge(&current, &obj) else { return Ok(()) };
            state
                .objects
                .update(def, "default", &name, None, &opts, None, |cur| {
                    let cur = cur.cloned().unwrap_or_else(|| obj.clone());
                    Ok(merge(&cur, &obj).unwrap_or(cur))
                })
                .await
                .map(|_| ())
        }
    }
}

/// The `kubernetes` Service as kube-apiserver creates it; `port` is the API server's.
pub fn service(cluster_ip: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": NAME, "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "sessionAffinity": "None",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
        },
    })
}

/// Ensures the `kubernetes` Service (its ports are put back when changed, as kube-apiserver's
/// `CreateOrUpdateMasterServiceIfNeeded` does).
pub async fn ensure_service(state: &AppState, port: u16) -> Result<()> {
    let def = def(state, "", "v1", "services")?.clone();
    let ip = state.objects.services.ips.first().to_string();
    create_or_update(state, &def, service(&ip, port), |cur, want| {
        (cur["spec"]["ports"] != want["spec"]["ports"]).then(|| {
            let mut out = cur.clone();
            out["spec"]["ports"] = want["spec"]["ports"].clone();
            out
        })
    })
    .await
    .map_err(|e| anyhow::anyhow!("ensuring the kubernetes Service: {e}"))
}

/// The Endpoints and EndpointSlice of the `kubernetes` Service for the live API servers.
pub fn endpoints_objects(live: &[Endpoint]) -> (Value, Value) {
    let mut ips: Vec<String> = live.iter().map(|e| e.ip.to_string()).collect();
    ips.sort();
    ips.dedup();
    let port = live.first().map_or(6443, |e| e.port);
    let subsets = if ips.is_empty() {
        json!([])
    } else {
        json!([{
            "addresses": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }])
    };
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        // Mirroring would only copy what the API server writes itself.
        "metadata": {"name": NAME, "namespace": "default", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": subsets,
    });
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": NAME, "namespace": "default", "labels": {"kubernetes.io/service-name": NAME}},
        "addressType": "IPv4",
        "endpoints": ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}})).collect::<Vec<_>>(),
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    });
    (endpoints, slice)
}

/// Writes the `kubernetes` Endpoints and EndpointSlice for `live` when they differ.
pub async fn write_endpoints(state: &AppState, live: &[Endpoint]) -> Result<()> {
    let (endpoints, slice) = endpoints_objects(live);
    let ep_def = def(state, "", "v1", "endpoints")?.clone();
    let slice_def = def(state, "discovery.k8s.io", "v1", "endpointslices")?.clone();
    let replace = |fields: &'static [&'static str]| {
        move |cur: &Value, want: &Value| {
            let differs = fields.iter().any(|f| cur.get(*f) != want.get(*f))
                || cur["metadata"]["labels"] != want["metadata"]["labels"];
            differs.then(|| {
                let mut out = cur.clone();
                for f in fields {
                    out[*f] = want[*f].clone();
                }
                out["metadata"]["labels"] = want["metadata"]["labels"].clone();
                out
            })
        }
    };
    create_or_update(state, &ep_def, endpoints, replace(&["subsets"]))
        .await
        .map_err(|e| anyhow::anyhow!("writing the kubernetes Endpoints: {e}"))?;
    create_or_update(state, &slice_def, slice, replace(&["endpoints", "ports", "addressType"]))
        .await
        .map_err(|e| anyhow::anyhow!("writing the kubernetes EndpointSlice: {e}"))
}

/// Renews this server's lease and returns the live servers (expired leases are deleted).
async fn renew_and_list(state: &AppState, me: &Endpoint) -> Result<Vec<Endpoint>> {
    let store = state.objects.store.clone();
    let key = format!("{LEASE_PREFIX}{}", me.ip);
    let value =
        serde_json::to_vec(&json!({"ip": me.ip.to_string(), "port": me.port, "renewTime": crate::util::unix_now()}))?;
    match store.get(&key).await? {
        Some(kv) => {
            store.update(&key, value, kv.mod_revision).await?;
        }
        None => {
            let _ = store.create(&key, value).await;
        }
    }
    let resp = store.range(RangeRequest { prefix: LEASE_PREFIX.into(), ..Default::default() }).await?;
    let now = crate::util::unix_now();
    let mut live = Vec::new();
    for kv in resp.kvs {
        let Ok(v) = serde_json::from_slice::<Value>(&kv.value) else { continue };
        let renewed = v["renewTime"].as_i64().unwrap_or(0);
        let (Some(ip), Some(port)) = (v["ip"].as_str().and_then(|s| s.parse().ok()), v["port"].as_u64()) else {
            continue;
        };
        if now - renewed > LEASE_TTL.as_secs() as i64 {
            let _ = store.delete(&kv.key, Some(kv.mod_revision)).await;
            continue;
        }
        live.push(Endpoint { ip, port: port as u16 });
    }
    Ok(live)
}

/// One reconcile: the Service, this server's lease, the endpoints of the live servers.
pub async fn reconcile(state: &AppState, me: &Endpoint) -> Result<()> {
    ensure_service(state, me.port).await?;
    let live = renew_and_list(state, me).await?;
    write_endpoints(state, &live).await
}

/// Removes this server's lease and address (`RemoveEndpoints` on shutdown).
pub async fn remove_self(state: &AppState, me: &Endpoint) -> Result<()> {
    let key = format!("{LEASE_PREFIX}{}", me.ip);
    let _ = state.objects.store.delete(&key, None).await;
    let resp = state.objects.store.range(RangeRequest { prefix: LEASE_PREFIX.into(), ..Default::default() }).await?;
    let now = crate::util::unix_now();
    let live: Vec<Endpoint> = resp
        .kvs
        .iter()
        .filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
        .filter(|v| now - v["renewTime"].as_i64().unwrap_or(0) <= LEASE_TTL.as_secs() as i64)
        .filter_map(|v| Some(Endpoint { ip: v["ip"].as_str()?.parse().ok()?, port: v["port"].as_u64()? as u16 }))
        .collect();
    write_endpoints(state, &live).await
}

/// Runs the reconciler every [`RECONCILE_INTERVAL`] until `shutdown` flips, then removes this
/// server's address.
pub async fn run(state: std::sync::Arc<AppState>, me: Endpoint, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        if let Err(e) = reconcile(&state, &me).await {
            tracing::warn!(error = %format!("{e:#}"), "reconciling the kubernetes Service failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(RECONCILE_INTERVAL) => {}
            _ = shutdown.changed() => break,
        }
    }
    if let Err(e) = remove_self(&state, &me).await {
        tracing::warn!(error = %format!("{e:#}"), "removing this server from the kubernetes endpoints failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoints_list_each_live_server_once_with_the_https_port() {
        let live = [
            Endpoint { ip: "10.0.0.2".parse().unwrap(), port: 6443 },
            Endpoint { ip: "10.0.0.1".parse().unwrap(), port: 6443 },
        ];
        let (ep, slice) = endpoints_objects(&live);
        assert_eq!(ep["subsets"][0]["addresses"], json!([{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]));
        assert_eq!(ep["subsets"][0]["ports"], json!([{"name": "https", "port": 6443, "protocol": "TCP"}]));
        assert_eq!(ep["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"], "true");
        assert_eq!(slice["endpoints"].as_array().unwrap().len(), 2);
        assert_eq!(slice["metadata"]["labels"]["kubernetes.io/service-name"], "kubernetes");
        let (ep, slice) = endpoints_objects(&[]);
        assert_eq!(ep["subsets"], json!([]));
        assert_eq!(slice["endpoints"], json!([]));
    }
}
