//! ClusterIP and NodePort allocation of Services (`pkg/registry/core/service/storage/alloc.go`)
//! and its repair against the stored Services (`ipallocator/controller/repair.go`,
//! `portallocator/controller/repair.go`).
//!
//! Every allocation is one key in the store, claimed with a create (which fails when the key
//! exists), so two API servers on one etcd can never hand out the same address or port, and
//! allocations survive restarts:
//!
//! - a ClusterIP is `/registry/ipaddresses/<ip>` holding a `networking.k8s.io/v1` IPAddress
//!   whose `spec.parentRef` names the Service (Kubernetes 1.33's MultiCIDRServiceAllocator keeps
//!   the same object under the same key);
//! - a node port is `/registry/servicenodeports/<port>` holding the owning Service's namespace
//!   and name (kube-apiserver keeps a bitmap in one key; one key per port needs no
//!   read-modify-write).
//!
//! Allocation runs after validation, so a Service that fails validation allocates nothing, and
//! a failed allocation releases what the request had claimed before it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use serde_json::{Value, json};
use skiff_apimachinery::ApiError;
use skiff_apimachinery::status::Cause;
use skiff_store::{Backend, RangeRequest};

use super::ranges::{NodePortRange, ServiceIpRange};

/// Where ClusterIP allocations live (one IPAddress per key).
pub const IP_PREFIX: &str = "/registry/ipaddresses/";
/// Where node-port allocations live (one key per port).
pub const NODE_PORT_PREFIX: &str = "/registry/servicenodeports/";
/// Free values tried blindly before a dynamic allocation reads every held key: in a range
/// that is mostly free the first try succeeds without a list.
const RANDOM_TRIES: usize = 3;
/// The `ipaddress.kubernetes.io/managed-by` value of the IPAddresses this allocator writes.
pub const MANAGED_BY: &str = "ipallocator.k8s.io";

/// The Service owning an allocation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Owner {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
}

impl Owner {
    /// The owner `namespace/name`.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self { namespace: namespace.to_string(), name: name.to_string() }
    }
}

/// What one request claimed: released again when the request fails, or (for an update) what
/// the old object held and the new one no longer uses, released once the write succeeded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocated {
    /// ClusterIPs.
    pub ips: Vec<Ipv4Addr>,
    /// Node ports (including a `healthCheckNodePort`).
    pub ports: Vec<u16>,
}

impl Allocated {
    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.ips.is_empty() && self.ports.is_empty()
    }
}

/// A Service's allocations as its spec states them.
fn ips_of(svc: &Value) -> Vec<Ipv4Addr> {
    let spec = &svc["spec"];
    if spec["type"].as_str() == Some("ExternalName") {
        return Vec::new();
    }
    let mut out: Vec<Ipv4Addr> = spec["clusterIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(std::iter::once(&spec["clusterIP"]))
        .filter_map(|v| v.as_str()?.parse().ok())
        .collect();
    out.dedup();
    out.sort();
    out.dedup();
    out
}

fn ports_of(svc: &Value) -> Vec<u16> {
    let spec = &svc["spec"];
    let ty = spec["type"].as_str().unwrap_or("ClusterIP");
    if ty != "NodePort" && ty != "LoadBalancer" {
        return Vec::new();
    }
    let mut out: Vec<u16> = spec["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["nodePort"].as_u64())
        .chain(spec["healthCheckNodePort"].as_u64())
        .filter_map(|p| u16::try_from(p).ok().filter(|p| *p > 0))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What a Service holds (its ClusterIPs and node ports), e.g. to release on delete.
pub fn held_by(svc: &Value) -> Allocated {
    Allocated { ips: ips_of(svc), ports: ports_of(svc) }
}

fn needs_cluster_ip(spec: &Value) -> bool {
    spec["type"].as_str() != Some("ExternalName") && spec["clusterIP"].as_str() != Some("None")
}

fn needs_node_ports(spec: &Value) -> bool {
    match spec["type"].as_str() {
        Some("NodePort") => true,
        Some("LoadBalancer") => spec["allocateLoadBalancerNodePorts"].as_bool() != Some(false),
        _ => false,
    }
}

fn needs_health_check_port(spec: &Value) -> bool {
    spec["type"].as_str() == Some("LoadBalancer") && spec["externalTrafficPolicy"].as_str() == Some("Local")
}

fn store_err(e: skiff_store::Error) -> ApiError {
    match e {
        skiff_store::Error::Unavailable(m) => ApiError::unavailable(m),
        other => ApiError::internal(format!("service allocation: {other}")),
    }
}

fn invalid(name: &str, field: &str, message: String) -> ApiError {
    ApiError::invalid(
        "",
        "Service",
        name,
        vec![Cause { reason: "FieldValueInvalid".into(), message, field: field.into() }],
    )
}

/// Go's `%#v` of a `[]string`, as kube-apiserver renders `spec.clusterIPs` in its errors.
fn go_string_slice(values: &[String]) -> String {
    let items: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// The allocator of one API server: its ranges; the state is in the store.
#[derive(Debug, Clone)]
pub struct ServiceAllocator {
    /// `--service-cluster-ip-range`.
    pub ips: ServiceIpRange,
    /// `--service-node-port-range`.
    pub node_ports: NodePortRange,
}

impl Default for ServiceAllocator {
    fn default() -> Self {
        Self {
            ips: ServiceIpRange::parse(super::ranges::DEFAULT_SERVICE_CIDR).expect("default CIDR parses"),
            node_ports: NodePortRange::parse(super::ranges::DEFAULT_NODE_PORT_RANGE).expect("default range parses"),
        }
    }
}

/// One claim attempt's outcome.
enum Claim {
    Claimed,
    Taken,
}

impl ServiceAllocator {
    /// The allocator of the given ranges.
    pub fn new(ips: ServiceIpRange, node_ports: NodePortRange) -> Self {
        Self { ips, node_ports }
    }

    fn ip_value(ip: Ipv4Addr, owner: &Owner) -> Vec<u8> {
        let obj = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "IPAddress",
            "metadata": {
                "name": ip.to_string(), "uid": crate::util::new_uid(), "creationTimestamp": crate::util::now(),
                "labels": {"ipaddress.kubernetes.io/ip-family": "IPv4", "ipaddress.kubernetes.io/managed-by": MANAGED_BY},
            },
            "spec": {"parentRef": {"group": "", "resource": "services", "namespace": owner.namespace, "name": owner.name}},
        });
        serde_json::to_vec(&obj).unwrap_or_default()
    }

    fn port_value(owner: &Owner) -> Vec<u8> {
        let obj = json!({"namespace": owner.namespace, "name": owner.name, "creationTimestamp": crate::util::now()});
        serde_json::to_vec(&obj).unwrap_or_default()
    }

    /// The owner recorded in an allocation key's value (IPAddress or node-port record).
    fn owner_of(value: &[u8]) -> Option<Owner> {
        let v: Value = serde_json::from_slice(value).ok()?;
        let r = if v.get("spec").is_some() { &v["spec"]["parentRef"] } else { &v };
        Some(Owner::new(r["namespace"].as_str()?, r["name"].as_str()?))
    }

    fn created_at(value: &[u8]) -> i64 {
        let Ok(v) = serde_json::from_slice::<Value>(value) else { return 0 };
        let ts = v["metadata"]["creationTimestamp"].as_str().or(v["creationTimestamp"].as_str()).unwrap_or("");
        crate::util::parse_rfc3339(ts).unwrap_or(0)
    }

    async fn claim(store: &dyn Backend, key: String, value: Vec<u8>) -> Result<Claim, ApiError> {
        match store.create(&key, value).await {
            Ok(_) => Ok(Claim::Claimed),
            Err(skiff_store::Error::AlreadyExists { .. }) => Ok(Claim::Taken),
            Err(e) => Err(store_err(e)),
        }
    }

    async fn taken(store: &dyn Backend, key: &str) -> Result<bool, ApiError> {
        Ok(store.get(key).await.map_err(store_err)?.is_some())
    }

    /// Deletes an allocation key if `owner` holds it (never another Service's).
    async fn release_key(store: &dyn Backend, key: &str, owner: &Owner) {
        match store.get(key).await {
            Ok(Some(kv)) if Self::owner_of(&kv.value).as_ref() == Some(owner) => {
                if let Err(e) = store.delete(key, Some(kv.mod_revision)).await {
                    tracing::warn!(key, error = %e, "releasing a Service allocation failed; the repair loop will");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(key, error = %e, "releasing a Service allocation failed; the repair loop will"),
        }
    }

    /// Releases `what`, held by `owner`.
    pub async fn release(&self, store: &dyn Backend, owner: &Owner, what: &Allocated) {
        for ip in &what.ips {
            Self::release_key(store, &format!("{IP_PREFIX}{ip}"), owner).await;
        }
        for port in &what.ports {
            Self::release_key(store, &format!("{NODE_PORT_PREFIX}{port}"), owner).await;
        }
    }

    /// Allocates what the validated Service `svc` needs, filling `spec.clusterIP(s)` and the
    /// node ports it leaves empty. `old` is the stored Service on update: what it holds stays
    /// held. Returns what was claimed (release it if the write fails) and, on update, what the
    /// old Service held and `svc` no longer uses (release it once the write succeeded).
    /// `dry_run` checks requested values without claiming anything.
    ///
    /// # Errors
    /// 422 `spec.clusterIPs` for a requested IP outside the range or taken; 422
    /// `spec.ports[i].nodePort` (or `spec.healthCheckNodePort`) for a requested port outside the
    /// range or taken; 500 when a range is full; the store's errors. Nothing stays claimed.
    pub async fn allocate(
        &self,
        store: &dyn Backend,
        owner: &Owner,
        svc: &mut Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> Result<(Allocated, Allocated), ApiError> {
        let mut claimed = Allocated::default();
        match self.allocate_inner(store, owner, svc, old, dry_run, &mut claimed).await {
            Ok(()) => {
                let now = held_by(svc);
                let stale = old.map(held_by).unwrap_or_default();
                let stale = Allocated {
                    ips: stale.ips.into_iter().filter(|ip| !now.ips.contains(ip)).collect(),
                    ports: stale.ports.into_iter().filter(|p| !now.ports.contains(p)).collect(),
                };
                Ok((claimed, stale))
            }
            Err(e) => {
                self.release(store, owner, &claimed).await;
                Err(e)
            }
        }
    }

    async fn allocate_inner(
        &self,
        store: &dyn Backend,
        owner: &Owner,
        svc: &mut Value,
        old: Option<&Value>,
        dry_run: bool,
        claimed: &mut Allocated,
    ) -> Result<(), ApiError> {
        let held = old.map(held_by).unwrap_or_default();
        let name = owner.name.clone();
        let spec = svc["spec"].clone();
        if needs_cluster_ip(&spec) {
            let requested = spec["clusterIP"].as_str().unwrap_or("").to_string();
            if requested.is_empty() {
                if !dry_run {
                    let ip = self.claim_any_ip(store, owner).await?;
                    claimed.ips.push(ip);
                    crate::util::set_in(svc, &["spec", "clusterIP"], json!(ip.to_string()));
                    crate::util::set_in(svc, &["spec", "clusterIPs"], json!([ip.to_string()]));
                }
            } else {
                let shown = go_string_slice(std::slice::from_ref(&requested));
                let out_of_range = || {
                    invalid(
                        &name,
                        "spec.clusterIPs",
                        format!(
                            "Invalid value: {shown}: failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {}",
                            self.ips
                        ),
                    )
                };
                // An address of another family (validation let it through) is out of range too.
                let ip: Ipv4Addr = requested.parse().map_err(|_| out_of_range())?;
                if held.ips.contains(&ip) {
                    return self.allocate_node_ports(store, owner, svc, &spec, &held, dry_run, claimed).await;
                }
                if !self.ips.contains(ip) {
                    return Err(out_of_range());
                }
                let key = format!("{IP_PREFIX}{ip}");
                let taken = if dry_run {
                    Self::taken(store, &key).await?
                } else {
                    matches!(Self::claim(store, key, Self::ip_value(ip, owner)).await?, Claim::Taken)
                };
                if taken {
                    return Err(invalid(
                        &name,
                        "spec.clusterIPs",
                        format!("Invalid value: {shown}: failed to allocate IP {ip}: provided IP is already allocated"),
                    ));
                }
                if !dry_run {
                    claimed.ips.push(ip);
                }
            }
        }
        self.allocate_node_ports(store, owner, svc, &spec, &held, dry_run, claimed).await
    }

    /// The node ports (and health-check node port) part of [`Self::allocate`].
    #[allow(clippy::too_many_arguments)]
    async fn allocate_node_ports(
        &self,
        store: &dyn Backend,
        owner: &Owner,
        svc: &mut Value,
        spec: &Value,
        held: &Allocated,
        dry_run: bool,
        claimed: &mut Allocated,
    ) -> Result<(), ApiError> {
        let name = owner.name.clone();
        let ty = spec["type"].as_str().unwrap_or("ClusterIP");
        if ty != "NodePort" && ty != "LoadBalancer" {
            return Ok(());
        }
        let dynamic = needs_node_ports(spec);
        // A port number served over two protocols gets one node port (alloc.go's
        // `initNodePorts`).
        let mut by_port: BTreeMap<i64, u16> = BTreeMap::new();
        let mut used: BTreeSet<u16> = BTreeSet::new();
        let n_ports = spec["ports"].as_array().map_or(0, Vec::len);
        for i in 0..n_ports {
            let p = &spec["ports"][i];
            let port = p["port"].as_i64().unwrap_or(0);
            let requested = p["nodePort"].as_i64().unwrap_or(0);
            let field = format!("spec.ports[{i}].nodePort");
            let np = if requested != 0 {
                let np = self.claim_port(store, owner, requested, held, &used, dry_run, claimed, &name, &field).await?;
                Some(np)
            } else if !dynamic {
                None
            } else if let Some(np) = by_port.get(&port) {
                Some(*np)
            } else if dry_run {
                None
            } else {
                let np = self.claim_any_port(store, owner).await?;
                claimed.ports.push(np);
                Some(np)
            };
            if let Some(np) = np {
                by_port.insert(port, np);
                used.insert(np);
                svc["spec"]["ports"][i]["nodePort"] = json!(np);
            }
        }
        if needs_health_check_port(spec) {
            let requested = spec["healthCheckNodePort"].as_i64().unwrap_or(0);
            let np = if requested != 0 {
                Some(
                    self.claim_port(
                        store,
                        owner,
                        requested,
                        held,
                        &used,
                        dry_run,
                        claimed,
                        &name,
                        "spec.healthCheckNodePort",
                    )
                    .await?,
                )
            } else if dry_run {
                None
            } else {
                let np = self.claim_any_port(store, owner).await?;
                claimed.ports.push(np);
                Some(np)
            };
            if let Some(np) = np {
                svc["spec"]["healthCheckNodePort"] = json!(np);
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn claim_port(
        &self,
        store: &dyn Backend,
        owner: &Owner,
        requested: i64,
        held: &Allocated,
        used: &BTreeSet<u16>,
        dry_run: bool,
        claimed: &mut Allocated,
        name: &str,
        field: &str,
    ) -> Result<u16, ApiError> {
        let port = u16::try_from(requested).unwrap_or(0);
        if port != 0 && (held.ports.contains(&port) || used.contains(&port) || claimed.ports.contains(&port)) {
            return Ok(port);
        }
        if port == 0 || !self.node_ports.contains(requested) {
            return Err(invalid(
                name,
                field,
                format!(
                    "Invalid value: {requested}: provided port is not in the valid range. The range of valid ports is {}",
                    self.node_ports
                ),
            ));
        }
        let key = format!("{NODE_PORT_PREFIX}{port}");
        let taken = if dry_run {
            Self::taken(store, &key).await?
        } else {
            matches!(Self::claim(store, key, Self::port_value(owner)).await?, Claim::Taken)
        };
        if taken {
            return Err(invalid(
                name,
                field,
                format!("Invalid value: {requested}: provided port is already allocated"),
            ));
        }
        if !dry_run {
            claimed.ports.push(port);
        }
        Ok(port)
    }

    /// Claims a free ClusterIP: a few random tries, then every address in
    /// [`ServiceIpRange::candidates`] order that the store does not hold.
    async fn claim_any_ip(&self, store: &dyn Backend, owner: &Owner) -> Result<Ipv4Addr, ApiError> {
        for ip in self.ips.candidates().take(RANDOM_TRIES) {
            if let Claim::Claimed = Self::claim(store, format!("{IP_PREFIX}{ip}"), Self::ip_value(ip, owner)).await? {
                return Ok(ip);
            }
        }
        let held = Self::keys(store, IP_PREFIX).await?;
        for ip in self.ips.candidates() {
            if held.contains(&ip.to_string()) {
                continue;
            }
            if let Claim::Claimed = Self::claim(store, format!("{IP_PREFIX}{ip}"), Self::ip_value(ip, owner)).await? {
                return Ok(ip);
            }
        }
        Err(ApiError::internal("failed to allocate a serviceIP: range is full"))
    }

    async fn claim_any_port(&self, store: &dyn Backend, owner: &Owner) -> Result<u16, ApiError> {
        for port in self.node_ports.candidates().take(RANDOM_TRIES) {
            if let Claim::Claimed =
                Self::claim(store, format!("{NODE_PORT_PREFIX}{port}"), Self::port_value(owner)).await?
            {
                return Ok(port);
            }
        }
        let held = Self::keys(store, NODE_PORT_PREFIX).await?;
        for port in self.node_ports.candidates() {
            if held.contains(&port.to_string()) {
                continue;
            }
            if let Claim::Claimed =
                Self::claim(store, format!("{NODE_PORT_PREFIX}{port}"), Self::port_value(owner)).await?
            {
                return Ok(port);
            }
        }
        Err(ApiError::internal("failed to allocate a nodePort: range is full"))
    }

    /// The allocation keys under `prefix`, without the prefix.
    async fn keys(store: &dyn Backend, prefix: &str) -> Result<BTreeSet<String>, ApiError> {
        Ok(Self::entries(store, prefix).await?.into_iter().map(|(k, _)| k).collect())
    }

    async fn entries(store: &dyn Backend, prefix: &str) -> Result<Vec<(String, skiff_store::KeyValue)>, ApiError> {
        let mut out = Vec::new();
        let mut start_after = None;
        let mut revision = 0;
        loop {
            let req =
                RangeRequest { prefix: prefix.to_string(), start_after: start_after.clone(), limit: 1000, revision };
            let resp = store.range(req).await.map_err(store_err)?;
            revision = resp.revision;
            let more = resp.more;
            for kv in resp.kvs {
                start_after = Some(kv.key.clone());
                out.push((kv.key[prefix.len()..].to_string(), kv));
            }
            if !more {
                return Ok(out);
            }
        }
    }

    /// The repair loop's pass (kube-apiserver's ClusterIP and node-port repair controllers):
    /// every allocation of a stored Service gets its key back if it is missing, and every key
    /// no Service holds is released once it is older than `min_age_secs` (younger ones may
    /// belong to a create still in flight on this or another server). Returns what it
    /// recreated and what it released.
    ///
    /// # Errors
    /// The store's errors.
    pub async fn repair(
        &self,
        store: &dyn Backend,
        services: &[Value],
        min_age_secs: i64,
    ) -> Result<(Allocated, Allocated), ApiError> {
        let mut want_ips: BTreeMap<Ipv4Addr, Owner> = BTreeMap::new();
        let mut want_ports: BTreeMap<u16, Owner> = BTreeMap::new();
        for svc in services {
            let owner = Owner::new(
                svc["metadata"]["namespace"].as_str().unwrap_or(""),
                svc["metadata"]["name"].as_str().unwrap_or(""),
            );
            let held = held_by(svc);
            for ip in held.ips {
                if !self.ips.contains(ip) {
                    tracing::warn!(service = %format!("{}/{}", owner.namespace, owner.name), %ip, "the Service's ClusterIP is not within the service CIDR {}", self.ips);
                }
                want_ips.insert(ip, owner.clone());
            }
            for port in held.ports {
                want_ports.insert(port, owner.clone());
            }
        }
        let (ips_recreated, ips_released) =
            Self::repair_keys(store, IP_PREFIX, &want_ips, Self::ip_value, "ClusterIP", min_age_secs).await?;
        let (ports_recreated, ports_released) = Self::repair_keys(
            store,
            NODE_PORT_PREFIX,
            &want_ports,
            |_, owner| Self::port_value(owner),
            "node port",
            min_age_secs,
        )
        .await?;
        let recreated = Allocated { ips: ips_recreated, ports: ports_recreated };
        let released = Allocated { ips: ips_released, ports: ports_released };
        Ok((recreated, released))
    }

    /// [`Self::repair`] for one kind of allocation stored under `prefix` (keys `prefix<value>`):
    /// recreates the keys `want` names that are missing and releases the unowned ones older than
    /// `min_age_secs`; returns (recreated, released).
    async fn repair_keys<T>(
        store: &dyn Backend,
        prefix: &str,
        want: &BTreeMap<T, Owner>,
        value_of: impl Fn(T, &Owner) -> Vec<u8>,
        what: &str,
        min_age_secs: i64,
    ) -> Result<(Vec<T>, Vec<T>), ApiError>
    where
        T: std::str::FromStr + Ord + Copy + std::fmt::Display,
    {
        let now = crate::util::unix_now();
        let (mut recreated, mut released) = (Vec::new(), Vec::new());
        let mut present = BTreeSet::new();
        for (name, kv) in Self::entries(store, prefix).await? {
            let Ok(parsed) = name.parse::<T>() else { continue };
            present.insert(parsed);
            match want.get(&parsed) {
                Some(o) if Self::owner_of(&kv.value).as_ref() == Some(o) => {}
                Some(o) => {
                    tracing::warn!(value = %parsed, service = %format!("{}/{}", o.namespace, o.name), "{what} is allocated to another Service")
                }
                None if now - Self::created_at(&kv.value) >= min_age_secs
                    && store.delete(&kv.key, Some(kv.mod_revision)).await.is_ok() =>
                {
                    released.push(parsed);
                }
                None => {}
            }
        }
        for (value, owner) in want {
            if !present.contains(value)
                && let Claim::Claimed = Self::claim(store, format!("{prefix}{value}"), value_of(*value, owner)).await?
            {
                recreated.push(*value);
            }
        }
        Ok((recreated, released))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn store() -> (tempfile::TempDir, Arc<dyn Backend>) {
        let dir = tempfile::tempdir().unwrap();
        let s = skiff_store::sqlite::SqliteBackend::open(&dir.path().join("state.db"), Default::default()).unwrap();
        (dir, Arc::new(s))
    }

    fn allocator(cidr: &str, ports: &str) -> ServiceAllocator {
        ServiceAllocator::new(ServiceIpRange::parse(cidr).unwrap(), NodePortRange::parse(ports).unwrap())
    }

    fn svc(ns: &str, name: &str, spec: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}, "spec": spec})
    }

    fn cause(e: &ApiError) -> (String, String) {
        let c = &e.details.as_ref().unwrap().causes[0];
        (c.field.clone(), c.message.clone())
    }

    #[tokio::test]
    async fn a_service_gets_a_free_cluster_ip_and_node_ports_and_gives_them_back() {
        let (_d, store) = store();
        let a = allocator("10.43.0.0/16", "30000-32767");
        let mut s = svc(
            "default",
            "web",
            json!({"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"}, {"port": 443, "protocol": "TCP"}]}),
        );
        let owner = Owner::new("default", "web");
        let (claimed, stale) = a.allocate(store.as_ref(), &owner, &mut s, None, false).await.unwrap();
        assert!(stale.is_empty());
        let ip: Ipv4Addr = s["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        assert!(a.ips.contains(ip));
        assert_eq!(s["spec"]["clusterIPs"], json!([ip.to_string()]));
        let p = &s["spec"]["ports"];
        assert_eq!(p[0]["nodePort"], p[1]["nodePort"], "one node port per port number");
        assert_ne!(p[0]["nodePort"], p[2]["nodePort"]);
        assert_eq!(claimed.ips, [ip]);
        assert_eq!(claimed.ports.len(), 2);
        let kv = store.get(&format!("{IP_PREFIX}{ip}")).await.unwrap().unwrap();
        let obj: Value = serde_json::from_slice(&kv.value).unwrap();
        assert_eq!(obj["kind"], "IPAddress");
        assert_eq!(
            obj["spec"]["parentRef"],
            json!({"group": "", "resource": "services", "namespace": "default", "name": "web"})
        );

        a.release(store.as_ref(), &owner, &held_by(&s)).await;
        assert!(ServiceAllocator::keys(store.as_ref(), IP_PREFIX).await.unwrap().is_empty());
        assert!(ServiceAllocator::keys(store.as_ref(), NODE_PORT_PREFIX).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_requested_ip_outside_the_range_or_taken_is_422_on_cluster_ips_and_claims_nothing() {
        let (_d, store) = store();
        let a = allocator("10.43.0.0/16", "30000-32767");
        let mut s = svc("default", "a", json!({"clusterIP": "10.0.0.5", "type": "NodePort", "ports": [{"port": 80}]}));
        let e = a.allocate(store.as_ref(), &Owner::new("default", "a"), &mut s, None, false).await.unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            cause(&e),
            (
                "spec.clusterIPs".into(),
                "Invalid value: []string{\"10.0.0.5\"}: failed to allocate IP 10.0.0.5: the provided IP (10.0.0.5) is not in the valid range. The range of valid IPs is 10.43.0.0/16".into()
            )
        );
        let mut s = svc("default", "a", json!({"clusterIP": "2001:db8::1", "ports": [{"port": 80}]}));
        let e = a.allocate(store.as_ref(), &Owner::new("default", "a"), &mut s, None, false).await.unwrap_err();
        assert!(cause(&e).1.contains("the provided IP (2001:db8::1) is not in the valid range"), "{e:?}");
        let mut s = svc("default", "b", json!({"clusterIP": "10.43.0.10", "ports": [{"port": 80}]}));
        a.allocate(store.as_ref(), &Owner::new("default", "b"), &mut s, None, false).await.unwrap();
        // A taken IP with a node port asked for: the port claimed first is given back.
        let mut s = svc(
            "default",
            "c",
            json!({"clusterIP": "10.43.0.10", "type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
        );
        let e = a.allocate(store.as_ref(), &Owner::new("default", "c"), &mut s, None, false).await.unwrap_err();
        assert_eq!(cause(&e).0, "spec.clusterIPs");
        assert!(cause(&e).1.ends_with("failed to allocate IP 10.43.0.10: provided IP is already allocated"), "{e:?}");
        assert_eq!(ServiceAllocator::keys(store.as_ref(), IP_PREFIX).await.unwrap().len(), 1);
        assert!(ServiceAllocator::keys(store.as_ref(), NODE_PORT_PREFIX).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_requested_node_port_outside_the_range_or_taken_is_422_on_its_port() {
        let (_d, store) = store();
        let a = allocator("10.43.0.0/16", "30000-32767");
        let mut s = svc("default", "a", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}));
        a.allocate(store.as_ref(), &Owner::new("default", "a"), &mut s, None, false).await.unwrap();
        let mut s = svc(
            "default",
            "b",
            json!({"type": "NodePort", "ports": [{"name": "a", "port": 81}, {"name": "b", "port": 80, "nodePort": 30080}]}),
        );
        let e = a.allocate(store.as_ref(), &Owner::new("default", "b"), &mut s, None, false).await.unwrap_err();
        assert_eq!(
            cause(&e),
            ("spec.ports[1].nodePort".into(), "Invalid value: 30080: provided port is already allocated".into())
        );
        let mut s = svc("default", "b", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 8080}]}));
        let e = a.allocate(store.as_ref(), &Owner::new("default", "b"), &mut s, None, false).await.unwrap_err();
        assert_eq!(
            cause(&e),
            (
                "spec.ports[0].nodePort".into(),
                "Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767"
                    .into()
            )
        );
        // Only a's IP and port remain: b's dynamic IP and first port were released.
        assert_eq!(ServiceAllocator::keys(store.as_ref(), IP_PREFIX).await.unwrap().len(), 1);
        assert_eq!(ServiceAllocator::keys(store.as_ref(), NODE_PORT_PREFIX).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn an_exhausted_range_is_an_internal_error_until_an_address_is_released() {
        let (_d, store) = store();
        let a = allocator("10.0.0.0/29", "30000-30001");
        let mut held = Vec::new();
        for i in 0..6 {
            let mut s = svc("default", &format!("s{i}"), json!({"ports": [{"port": 80}]}));
            a.allocate(store.as_ref(), &Owner::new("default", &format!("s{i}")), &mut s, None, false).await.unwrap();
            held.push(s);
        }
        let mut s = svc("default", "full", json!({"ports": [{"port": 80}]}));
        let e = a.allocate(store.as_ref(), &Owner::new("default", "full"), &mut s, None, false).await.unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (500, "failed to allocate a serviceIP: range is full"));
        a.release(store.as_ref(), &Owner::new("default", "s3"), &held_by(&held[3])).await;
        a.allocate(store.as_ref(), &Owner::new("default", "full"), &mut s, None, false).await.unwrap();
        assert_eq!(s["spec"]["clusterIP"], held[3]["spec"]["clusterIP"]);
    }

    #[tokio::test]
    async fn an_update_keeps_what_it_holds_and_reports_what_it_dropped() {
        let (_d, store) = store();
        let a = allocator("10.43.0.0/16", "30000-32767");
        let owner = Owner::new("default", "web");
        let mut old = svc("default", "web", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}));
        a.allocate(store.as_ref(), &owner, &mut old, None, false).await.unwrap();
        let mut new = old.clone();
        new["spec"]["type"] = json!("ClusterIP");
        new["spec"]["ports"][0].as_object_mut().unwrap().remove("nodePort");
        let (claimed, stale) = a.allocate(store.as_ref(), &owner, &mut new, Some(&old), false).await.unwrap();
        assert!(claimed.is_empty());
        assert_eq!(stale, Allocated { ips: vec![], ports: vec![30080] });
        assert_eq!(new["spec"]["clusterIP"], old["spec"]["clusterIP"]);
    }

    #[tokio::test]
    async fn repair_recreates_lost_allocations_and_releases_leaked_ones() {
        let (_d, store) = store();
        let a = allocator("10.43.0.0/16", "30000-32767");
        let mut kept = svc("default", "kept", json!({"type": "NodePort", "ports": [{"port": 80}]}));
        a.allocate(store.as_ref(), &Owner::new("default", "kept"), &mut kept, None, false).await.unwrap();
        let mut gone = svc("default", "gone", json!({"type": "NodePort", "ports": [{"port": 80}]}));
        a.allocate(store.as_ref(), &Owner::new("default", "gone"), &mut gone, None, false).await.unwrap();
        // A restart lost `kept`'s keys (e.g. written by an older server) and `gone` was deleted
        // without its release.
        let kept_ip = kept["spec"]["clusterIP"].as_str().unwrap().to_string();
        store.delete(&format!("{IP_PREFIX}{kept_ip}"), None).await.unwrap();
        let services = vec![kept.clone()];
        // Young leaked keys are left alone: their create may be in flight.
        let (recreated, released) = a.repair(store.as_ref(), &services, 60).await.unwrap();
        assert_eq!(recreated.ips, [kept_ip.parse::<Ipv4Addr>().unwrap()]);
        assert!(released.is_empty());
        let (recreated, released) = a.repair(store.as_ref(), &services, 0).await.unwrap();
        assert!(recreated.is_empty());
        assert_eq!(released, held_by(&gone));
        let ips = ServiceAllocator::keys(store.as_ref(), IP_PREFIX).await.unwrap();
        assert_eq!(ips.into_iter().collect::<Vec<_>>(), [kept_ip]);
        // The kept Service still owns its address: another may not take it.
        let mut other =
            svc("default", "other", json!({"clusterIP": kept["spec"]["clusterIP"], "ports": [{"port": 80}]}));
        let e = a.allocate(store.as_ref(), &Owner::new("default", "other"), &mut other, None, false).await.unwrap_err();
        assert_eq!(e.code, 422);
    }
}
