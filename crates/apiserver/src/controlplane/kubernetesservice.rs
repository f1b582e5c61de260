//! The Services the API server keeps itself — `default/kubernetes` and, when `skiff server`
//! runs the cluster DNS, `kube-system/kube-dns` ([`super::kubedns`]) — and their endpoints, as
//! kube-apiserver keeps `kubernetes` (`pkg/controlplane/controller/kubernetesservice` and the
//! lease endpoint reconciler of `pkg/controlplane/reconcilers/lease.go`).
//!
//! The `kubernetes` Service has the first IP of the service range and port 443 (`https`) to
//! the API server's port. Every API server sharing the store keeps a lease under
//! `/registry/masterleases/<ip>` (kube-apiserver's key) renewed every
//! [`RECONCILE_INTERVAL`], naming its HTTPS port and, when it runs one, its DNS server's port;
//! each [`SystemService`]'s Endpoints and EndpointSlice list the addresses whose lease is
//! younger than [`LEASE_TTL`] and that serve it. A server removes its own lease and address
//! when it shuts down; a crashed server's lease expires and the next reconcile of a live one
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

/// What one API server publishes in its lease.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The address other hosts reach it at.
    pub ip: IpAddr,
    /// Its HTTPS port.
    pub port: u16,
    /// The port its cluster DNS server answers on at `ip` (UDP and TCP), when it runs one
    /// (`skiff server` does; see [`super::kubedns`]).
    pub dns_port: Option<u16>,
}

/// A port of a [`SystemService`]; every port of one Service goes to the same target port.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemPort {
    /// The port's name (`https`, `dns`, `dns-tcp`).
    pub name: &'static str,
    /// `TCP` or `UDP`.
    pub protocol: &'static str,
    /// The Service port clients use on the ClusterIP.
    pub port: u16,
}

/// A selector-less Service the API server keeps itself, whose endpoints are the live API
/// servers (each server's lease): `default/kubernetes` ([`kubernetes`]) and, when the server
/// runs the cluster DNS, `kube-system/kube-dns` ([`super::kubedns::service`]).
#[derive(Debug, Clone)]
pub struct SystemService {
    /// The Service's namespace.
    pub namespace: &'static str,
    /// The Service's name.
    pub name: &'static str,
    /// Its labels (a JSON object).
    pub labels: Value,
    /// The ClusterIP it asks for (allocated like any requested IP: 422 when taken or out of range).
    pub cluster_ip: String,
    /// Its ports.
    pub ports: Vec<SystemPort>,
    /// This server's target port of every port.
    pub target_port: u16,
    /// The port a live server's lease says it serves this Service on (`None`: it does not).
    pub endpoint_port: fn(&Endpoint) -> Option<u16>,
}

/// The `kubernetes` Service: the range's first IP, port 443 (`https`) to the API server's
/// HTTPS `port`.
pub fn kubernetes(cluster_ip: &str, port: u16) -> SystemService {
    SystemService {
        namespace: "default",
        name: NAME,
        labels: json!({"component": "apiserver", "provider": "kubernetes"}),
        cluster_ip: cluster_ip.to_string(),
        ports: vec![SystemPort { name: "https", protocol: "TCP", port: 443 }],
        target_port: port,
        endpoint_port: |e| Some(e.port),
    }
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
    let namespace = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let opts = WriteOptions::default();
    match state.objects.get(def, &namespace, &name).await {
        Err(e) if e.code == 404 => match state.objects.create(def, &namespace, obj, None, &opts).await {
            Ok(_) => Ok(()),
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
        Ok(current) => {
            let Some(_) = merge(&current, &obj) else { return Ok(()) };
            state
                .objects
                .update(def, &namespace, &name, None, &opts, None, |cur| {
                    let cur = cur.cloned().unwrap_or_else(|| obj.clone());
                    Ok(merge(&cur, &obj).unwrap_or(cur))
                })
                .await
                .map(|_| ())
        }
    }
}

impl SystemService {
    /// The Service object as kube-apiserver creates its own.
    pub fn object(&self) -> Value {
        let ports: Vec<Value> = self
            .ports
            .iter()
            .map(|p| json!({"name": p.name, "port": p.port, "protocol": p.protocol, "targetPort": self.target_port}))
            .collect();
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": self.labels},
            "spec": {
                "type": "ClusterIP", "clusterIP": self.cluster_ip, "clusterIPs": [self.cluster_ip],
                "sessionAffinity": "None", "ports": ports,
            },
        })
    }

    /// The Endpoints and EndpointSlice listing `live` servers (address, port) once each; the
    /// port is the first server's, so that every server writes the same objects.
    pub fn endpoints_objects(&self, live: &[(IpAddr, u16)]) -> (Value, Value) {
        let mut live = live.to_vec();
        live.sort();
        live.dedup_by_key(|(ip, _)| *ip);
        let port = live.first().map_or(self.target_port, |(_, port)| *port);
        let ports: Vec<Value> =
            self.ports.iter().map(|p| json!({"name": p.name, "port": port, "protocol": p.protocol})).collect();
        let subsets = if live.is_empty() {
            json!([])
        } else {
            json!([{
                "addresses": live.iter().map(|(ip, _)| json!({"ip": ip.to_string()})).collect::<Vec<_>>(),
                "ports": ports,
            }])
        };
        let endpoints = json!({
            "apiVersion": "v1", "kind": "Endpoints",
            // Mirroring would only copy what the API server writes itself.
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": subsets,
        });
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": {"kubernetes.io/service-name": self.name}},
            "addressType": "IPv4",
            "endpoints": live.iter().map(|(ip, _)| json!({"addresses": [ip.to_string()], "conditions": {"ready": true}})).collect::<Vec<_>>(),
            "ports": ports,
        });
        (endpoints, slice)
    }

    /// The (address, port) of each of the `live` servers that serve this Service.
    pub fn serving(&self, live: &[Endpoint]) -> Vec<(IpAddr, u16)> {
        live.iter().filter_map(|e| Some((e.ip, (self.endpoint_port)(e)?))).collect()
    }

    /// Ensures the Service exists (its ports are put back when changed, as kube-apiserver's
    /// `CreateOrUpdateMasterServiceIfNeeded` does).
    pub async fn ensure(&self, state: &AppState) -> Result<()> {
        let def = def(state, "", "v1", "services")?.clone();
        create_or_update(state, &def, self.object(), |cur, want| {
            (cur["spec"]["ports"] != want["spec"]["ports"]).then(|| {
                let mut out = cur.clone();
                out["spec"]["ports"] = want["spec"]["ports"].clone();
                out
            })
        })
        .await
        .map_err(|e| anyhow::anyhow!("ensuring the {}/{} Service: {e}", self.namespace, self.name))
    }

    /// Writes the Endpoints and EndpointSlice for the `live` servers that serve this Service,
    /// when they differ.
    pub async fn write_endpoints(&self, state: &AppState, live: &[Endpoint]) -> Result<()> {
        let (endpoints, slice) = self.endpoints_objects(&self.serving(live));
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
        let (ns, name) = (self.namespace, self.name);
        create_or_update(state, &ep_def, endpoints, replace(&["subsets"]))
            .await
            .map_err(|e| anyhow::anyhow!("writing the {ns}/{name} Endpoints: {e}"))?;
        create_or_update(state, &slice_def, slice, replace(&["endpoints", "ports", "addressType"]))
            .await
            .map_err(|e| anyhow::anyhow!("writing the {ns}/{name} EndpointSlice: {e}"))
    }
}

fn lease_value(me: &Endpoint) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(&json!({
        "ip": me.ip.to_string(), "port": me.port, "dnsPort": me.dns_port, "renewTime": crate::util::unix_now(),
    }))?)
}

/// The servers whose lease is younger than [`LEASE_TTL`]; with `expire`, older leases are deleted.
async fn live_servers(state: &AppState, expire: bool) -> Result<Vec<Endpoint>> {
    let store = &state.objects.store;
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
            if expire {
                let _ = store.delete(&kv.key, Some(kv.mod_revision)).await;
            }
            continue;
        }
        let dns_port = v["dnsPort"].as_u64().and_then(|p| u16::try_from(p).ok());
        live.push(Endpoint { ip, port: port as u16, dns_port });
    }
    Ok(live)
}

/// Renews this server's lease and returns the live servers (expired leases are deleted).
async fn renew_and_list(state: &AppState, me: &Endpoint) -> Result<Vec<Endpoint>> {
    let store = state.objects.store.clone();
    let key = format!("{LEASE_PREFIX}{}", me.ip);
    let value = lease_value(me)?;
    match store.get(&key).await? {
        Some(kv) => {
            store.update(&key, value, kv.mod_revision).await?;
        }
        None => {
            let _ = store.create(&key, value).await;
        }
    }
    live_servers(state, true).await
}

/// One reconcile: the Services, this server's lease, the endpoints of the live servers.
pub async fn reconcile(state: &AppState, me: &Endpoint, services: &[SystemService]) -> Result<()> {
    for svc in services {
        svc.ensure(state).await?;
    }
    let live = renew_and_list(state, me).await?;
    for svc in services {
        svc.write_endpoints(state, &live).await?;
    }
    Ok(())
}

/// Removes this server's lease and address (`RemoveEndpoints` on shutdown).
pub async fn remove_self(state: &AppState, me: &Endpoint, services: &[SystemService]) -> Result<()> {
    let key = format!("{LEASE_PREFIX}{}", me.ip);
    let _ = state.objects.store.delete(&key, None).await;
    let live = live_servers(state, false).await?;
    for svc in services {
        svc.write_endpoints(state, &live).await?;
    }
    Ok(())
}

/// Runs the reconciler of `services` every [`RECONCILE_INTERVAL`] until `shutdown` flips,
/// then removes this server's address from their endpoints.
pub async fn run(
    state: std::sync::Arc<AppState>,
    me: Endpoint,
    services: Vec<SystemService>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Err(e) = reconcile(&state, &me, &services).await {
            tracing::warn!(error = %format!("{e:#}"), "reconciling the API server's Services failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(RECONCILE_INTERVAL) => {}
            _ = shutdown.changed() => break,
        }
    }
    if let Err(e) = remove_self(&state, &me, &services).await {
        tracing::warn!(error = %format!("{e:#}"), "removing this server from its Services' endpoints failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_endpoints_list_each_live_server_once_with_the_https_port() {
        let live = [(ip("10.0.0.2"), 6443), (ip("10.0.0.1"), 6443), (ip("10.0.0.2"), 6443)];
        let (ep, slice) = kubernetes("10.43.0.1", 6443).endpoints_objects(&live);
        assert_eq!(ep["subsets"][0]["addresses"], json!([{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]));
        assert_eq!(ep["subsets"][0]["ports"], json!([{"name": "https", "port": 6443, "protocol": "TCP"}]));
        assert_eq!(ep["metadata"]["labels"]["endpointslice.kubernetes.io/skip-mirror"], "true");
        assert_eq!(slice["endpoints"].as_array().unwrap().len(), 2);
        assert_eq!(slice["metadata"]["labels"]["kubernetes.io/service-name"], "kubernetes");
        let (ep, slice) = kubernetes("10.43.0.1", 6443).endpoints_objects(&[]);
        assert_eq!(ep["subsets"], json!([]));
        assert_eq!(slice["endpoints"], json!([]));
    }

    #[test]
    fn the_kubernetes_service_sends_port_443_to_the_api_servers_port() {
        let svc = kubernetes("10.43.0.1", 6444).object();
        assert_eq!(svc["metadata"]["namespace"], "default");
        assert_eq!(svc["spec"]["clusterIPs"], json!(["10.43.0.1"]));
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6444}])
        );
    }
}
