//! The records index: Services and EndpointSlices turned into the answers of CoreDNS's
//! `kubernetes` plugin (its README's "Record rules" section and `plugin/kubernetes/kubernetes.go`).
//!
//! Names answered, with `zone` the cluster domain (`cluster.local`):
//! - `svc.ns.svc.zone` A/AAAA: the ClusterIPs of a ClusterIP/NodePort/LoadBalancer Service; for
//!   a headless Service (`clusterIP: None`) the addresses of its ready endpoints; for an
//!   ExternalName Service a CNAME to `spec.externalName`.
//! - `hostname.svc.ns.svc.zone` A/AAAA: an endpoint of a headless Service carrying a hostname
//!   (a StatefulSet pod with `hostname`/`subdomain`).
//! - `_port._proto.svc.ns.svc.zone` SRV for each named port (`svc.ns.svc.zone` SRV for all).
//! - PTR for ClusterIPs and for headless endpoint addresses.
//! - `a-b-c-d.ns.pod.zone` A: the `pods insecure` mode k3s's and kubeadm's Corefile choose (the
//!   address is taken from the name without checking a pod has it).
//!
//! A name in the zone that matches nothing is NXDOMAIN; a name that exists without records of
//! the asked type is NODATA (NOERROR, empty answer); both carry the zone's SOA in authority.
//! Every record has CoreDNS's default TTL of 5 seconds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::rdata::{A, AAAA, CNAME, PTR, SOA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The TTL of every answer, in seconds (CoreDNS's `ttl` default).
pub const TTL: u32 = 5;

/// The label an EndpointSlice names its Service with (`discovery.k8s.io/v1`).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What a Service resolves to.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// ClusterIP, NodePort and LoadBalancer Services: their `spec.clusterIPs`.
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the endpoints' addresses.
    Headless,
    /// `type: ExternalName`: a CNAME to the (lowercased) external name.
    ExternalName(String),
}

/// A port as DNS sees it: SRV records exist for named ports only.
#[derive(Debug, Clone, PartialEq)]
struct Port {
    name: String,
    protocol: String,
    port: u16,
}

#[derive(Debug, Clone)]
struct ServiceEntry {
    kind: Kind,
    ports: Vec<Port>,
}

#[derive(Debug, Clone)]
struct EndpointEntry {
    addresses: Vec<IpAddr>,
    hostname: Option<String>,
    ready: bool,
}

#[derive(Debug, Clone)]
struct SliceEntry {
    service: String,
    endpoints: Vec<EndpointEntry>,
    ports: Vec<Port>,
}

/// The outcome of a lookup in the cluster zone.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The name exists and these are its records of the asked type (never empty).
    Records(Vec<Record>),
    /// The name exists but has no record of the asked type (NOERROR, empty answer).
    NoData,
    /// The name does not exist in the zone.
    NxDomain,
    /// The name is outside the zones answered here: the caller forwards it upstream.
    NotAuthoritative,
}

/// The records of the cluster zone, kept current by informer handlers
/// ([`RecordIndex::upsert_service`], [`RecordIndex::upsert_slice`] and the removals).
#[derive(Debug)]
pub struct RecordIndex {
    zone: String,
    zone_name: Name,
    services: HashMap<(String, String), ServiceEntry>,
    slices: HashMap<(String, String), SliceEntry>,
    slices_of_service: HashMap<(String, String), BTreeSet<String>>,
    namespaces: BTreeMap<String, usize>,
    cluster_ip_owner: HashMap<IpAddr, (String, String)>,
}

fn port_of(name: Option<&str>, protocol: Option<&str>, port: Option<i32>) -> Option<Port> {
    let name = name.filter(|n| !n.is_empty())?.to_ascii_lowercase();
    let port = u16::try_from(port?).ok()?;
    Some(Port { name, protocol: protocol.unwrap_or("TCP").to_ascii_lowercase(), port })
}

/// An address written as a DNS label (`10-1-2-3`, `fd00--1`), as CoreDNS names endpoints
/// without a hostname and pods.
pub fn dashed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}

fn undashed(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 {
        if let Ok(v4) = label.replace('-', ".").parse::<Ipv4Addr>() {
            return Some(IpAddr::V4(v4));
        }
    }
    label.replace('-', ":").parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

/// The address a reverse name (`d.c.b.a.in-addr.arpa`, nibbles under `ip6.arpa`) stands for.
fn reverse_to_ip(name: &str) -> Option<IpAddr> {
    if let Some(rest) = name.strip_suffix(".in-addr.arpa") {
        let mut octets: Vec<u8> = rest.split('.').map(|o| o.parse().ok()).collect::<Option<_>>()?;
        if octets.len() != 4 {
            return None;
        }
        octets.reverse();
        return Some(IpAddr::V4(Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3])));
    }
    let rest = name.strip_suffix(".ip6.arpa")?;
    let nibbles: Vec<u8> =
        rest.split('.').map(|n| u8::from_str_radix(n, 16).ok().filter(|_| n.len() == 1)).collect::<Option<_>>()?;
    if nibbles.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, pair) in nibbles.iter().rev().collect::<Vec<_>>().chunks(2).enumerate() {
        bytes[i] = (pair[0] << 4) | pair[1];
    }
    Some(IpAddr::V6(Ipv6Addr::from(bytes)))
}

impl RecordIndex {
    /// An empty index for the cluster domain `zone` (for example `cluster.local`).
    ///
    /// # Errors
    /// When `zone` is not a valid domain name.
    pub fn new(zone: &str) -> anyhow::Result<Self> {
        let zone = zone.trim_end_matches('.').to_ascii_lowercase();
        let zone_name = Name::from_ascii(format!("{zone}."))?;
        Ok(Self {
            zone,
            zone_name,
            services: HashMap::new(),
            slices: HashMap::new(),
            slices_of_service: HashMap::new(),
            namespaces: BTreeMap::new(),
            cluster_ip_owner: HashMap::new(),
        })
    }

    /// The cluster domain, without the trailing dot.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// The number of Services indexed.
    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    /// Adds or replaces a Service (an informer's add or update).
    pub fn upsert_service(&mut self, svc: &Service) {
        let (Some(ns), Some(name)) = (svc.metadata.namespace.clone(), svc.metadata.name.clone()) else {
            return;
        };
        let spec = svc.spec.clone().unwrap_or_default();
        let kind = if spec.type_.as_deref() == Some("ExternalName") {
            Kind::ExternalName(spec.external_name.unwrap_or_default().trim_end_matches('.').to_ascii_lowercase())
        } else if spec.cluster_ip.as_deref() == Some("None") {
            Kind::Headless
        } else {
            let ips = spec
                .cluster_ips
                .clone()
                .filter(|ips| !ips.is_empty())
                .unwrap_or_else(|| spec.cluster_ip.clone().into_iter().collect());
            Kind::ClusterIp(ips.iter().filter_map(|ip| ip.parse().ok()).collect())
        };
        let ports = spec
            .ports
            .unwrap_or_default()
            .iter()
            .filter_map(|p| port_of(p.name.as_deref(), p.protocol.as_deref(), Some(p.port)))
            .collect();
        self.remove_service(&ns, &name);
        if let Kind::ClusterIp(ips) = &kind {
            for ip in ips {
                self.cluster_ip_owner.insert(*ip, (ns.clone(), name.clone()));
            }
        }
        *self.namespaces.entry(ns.clone()).or_default() += 1;
        self.services.insert((ns, name), ServiceEntry { kind, ports });
    }

    /// Removes a Service (an informer's delete).
    pub fn remove_service(&mut self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        if let Some(old) = self.services.remove(&key) {
            if let Kind::ClusterIp(ips) = old.kind {
                for ip in ips {
                    if self.cluster_ip_owner.get(&ip) == Some(&key) {
                        self.cluster_ip_owner.remove(&ip);
                    }
                }
            }
            if let Some(n) = self.namespaces.get_mut(namespace) {
                *n -= 1;
                if *n == 0 {
                    self.namespaces.remove(namespace);
                }
            }
        }
    }

    /// Adds or replaces an EndpointSlice; slices without the `kubernetes.io/service-name` label
    /// are ignored, as CoreDNS ignores them.
    pub fn upsert_slice(&mut self, slice: &EndpointSlice) {
        let (Some(ns), Some(name)) = (slice.metadata.namespace.clone(), slice.metadata.name.clone()) else {
            return;
        };
        self.remove_slice(&ns, &name);
        let Some(service) = slice.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)).cloned() else {
            return;
        };
        let endpoints = slice
            .endpoints
            .iter()
            .map(|ep| EndpointEntry {
                addresses: ep.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
                hostname: ep.hostname.clone().filter(|h| !h.is_empty()).map(|h| h.to_ascii_lowercase()),
                // An unset `ready` means ready (EndpointConditions' doc); the EndpointSlice
                // controller already sets it for publishNotReadyAddresses Services.
                ready: ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
            })
            .collect();
        let ports = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| port_of(p.name.as_deref(), p.protocol.as_deref(), p.port))
            .collect();
        self.slices_of_service.entry((ns.clone(), service.clone())).or_default().insert(name.clone());
        self.slices.insert((ns, name), SliceEntry { service, endpoints, ports });
    }

    /// Removes an EndpointSlice.
    pub fn remove_slice(&mut self, namespace: &str, name: &str) {
        if let Some(old) = self.slices.remove(&(namespace.to_string(), name.to_string())) {
            let key = (namespace.to_string(), old.service);
            if let Some(set) = self.slices_of_service.get_mut(&key) {
                set.remove(name);
                if set.is_empty() {
                    self.slices_of_service.remove(&key);
                }
            }
        }
    }

    /// The zone's SOA record, put in the authority section of negative answers
    /// (CoreDNS's values: `ns.dns.<zone>`, `hostmaster.<zone>`, refresh 7200, retry 1800,
    /// expire 86400, minimum TTL 5).
    pub fn soa(&self) -> Record {
        let mname = Name::from_ascii(format!("ns.dns.{}.", self.zone)).unwrap_or_else(|_| self.zone_name.clone());
        let rname = Name::from_ascii(format!("hostmaster.{}.", self.zone)).unwrap_or_else(|_| self.zone_name.clone());
        Record::from_rdata(self.zone_name.clone(), TTL, RData::SOA(SOA::new(mname, rname, 1, 7200, 1800, 86400, TTL)))
    }

    fn name(&self, relative: &str) -> Option<Name> {
        Name::from_ascii(format!("{relative}.{}.", self.zone)).ok()
    }

    fn ready_endpoints(&self, ns: &str, svc: &str) -> Vec<&EndpointEntry> {
        let Some(names) = self.slices_of_service.get(&(ns.to_string(), svc.to_string())) else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|n| self.slices.get(&(ns.to_string(), n.clone())))
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.ready)
            .collect()
    }

    fn slice_ports(&self, ns: &str, svc: &str) -> Vec<Port> {
        let mut ports: Vec<Port> = Vec::new();
        for n in self.slices_of_service.get(&(ns.to_string(), svc.to_string())).into_iter().flatten() {
            for p in self.slices.get(&(ns.to_string(), n.clone())).map(|s| s.ports.as_slice()).unwrap_or_default() {
                if !ports.contains(p) {
                    ports.push(p.clone());
                }
            }
        }
        ports
    }

    fn address_records(owner: &Name, ips: impl IntoIterator<Item = IpAddr>, qtype: RecordType) -> Vec<Record> {
        ips.into_iter()
            .filter_map(|ip| match (ip, qtype) {
                (IpAddr::V4(v4), RecordType::A) => Some(RData::A(A(v4))),
                (IpAddr::V6(v6), RecordType::AAAA) => Some(RData::AAAA(AAAA(v6))),
                _ => None,
            })
            .map(|rdata| Record::from_rdata(owner.clone(), TTL, rdata))
            .collect()
    }

    fn answer(records: Vec<Record>) -> Answer {
        if records.is_empty() { Answer::NoData } else { Answer::Records(records) }
    }

    /// Answers `qname`/`qtype` from the index. Names under neither the cluster zone nor a
    /// reverse zone with a known address are [`Answer::NotAuthoritative`] (CoreDNS's
    /// `fallthrough in-addr.arpa ip6.arpa` for unknown reverse names).
    pub fn lookup(&self, qname: &Name, qtype: RecordType) -> Answer {
        let lower = qname.to_lowercase().to_ascii();
        let name = lower.trim_end_matches('.');
        if qtype == RecordType::PTR || name.ends_with(".arpa") {
            if let Some(ip) = reverse_to_ip(name) {
                return self.lookup_ptr(qname, ip, qtype);
            }
        }
        let relative = if name == self.zone {
            ""
        } else if let Some(r) = name.strip_suffix(&format!(".{}", self.zone)) {
            r
        } else {
            return Answer::NotAuthoritative;
        };
        let labels: Vec<&str> = if relative.is_empty() { Vec::new() } else { relative.split('.').collect() };
        match labels.as_slice() {
            [] => match qtype {
                RecordType::SOA => Answer::Records(vec![self.soa()]),
                _ => Answer::NoData,
            },
            ["svc"] | ["pod"] => Answer::NoData,
            [ns, "svc"] => {
                if self.namespaces.contains_key(*ns) {
                    Answer::NoData
                } else {
                    Answer::NxDomain
                }
            }
            [svc, ns, "svc"] => self.lookup_service(qname, ns, svc, qtype),
            [first, svc, ns, "svc"] => self.lookup_endpoint(qname, ns, svc, first, qtype),
            [port, proto, svc, ns, "svc"] if port.starts_with('_') && proto.starts_with('_') => {
                self.lookup_srv(qname, ns, svc, &port[1..], &proto[1..], qtype)
            }
            [ip, _ns, "pod"] => match undashed(ip) {
                Some(ip) => Self::answer(Self::address_records(qname, [ip], qtype)),
                None => Answer::NxDomain,
            },
            _ => Answer::NxDomain,
        }
    }

    fn lookup_service(&self, qname: &Name, ns: &str, svc: &str, qtype: RecordType) -> Answer {
        let Some(entry) = self.services.get(&(ns.to_string(), svc.to_string())) else {
            return Answer::NxDomain;
        };
        match (&entry.kind, qtype) {
            (Kind::ExternalName(target), _) => match Name::from_ascii(format!("{target}.")) {
                Ok(target) if qtype != RecordType::SRV => {
                    Answer::Records(vec![Record::from_rdata(qname.clone(), TTL, RData::CNAME(CNAME(target)))])
                }
                _ => Answer::NoData,
            },
            (Kind::ClusterIp(ips), RecordType::A | RecordType::AAAA) => {
                Self::answer(Self::address_records(qname, ips.iter().copied(), qtype))
            }
            (Kind::Headless, RecordType::A | RecordType::AAAA) => {
                let ips = self.ready_endpoints(ns, svc).into_iter().flat_map(|e| e.addresses.iter().copied());
                Self::answer(Self::address_records(qname, ips, qtype))
            }
            (_, RecordType::SRV) => self.srv_records(qname, ns, svc, entry, None),
            _ => Answer::NoData,
        }
    }

    fn srv_records(
        &self,
        qname: &Name,
        ns: &str,
        svc: &str,
        entry: &ServiceEntry,
        want: Option<(&str, &str)>,
    ) -> Answer {
        let matches = |p: &Port| want.is_none_or(|(name, proto)| p.name == name && p.protocol == proto);
        let mut records = Vec::new();
        match &entry.kind {
            Kind::ClusterIp(_) => {
                let Some(target) = self.name(&format!("{svc}.{ns}.svc")) else { return Answer::NoData };
                for p in entry.ports.iter().filter(|p| matches(p)) {
                    records.push(Record::from_rdata(
                        qname.clone(),
                        TTL,
                        RData::SRV(SRV::new(0, 100, p.port, target.clone())),
                    ));
                }
            }
            Kind::Headless => {
                let ports = self.slice_ports(ns, svc);
                for ep in self.ready_endpoints(ns, svc) {
                    for ip in &ep.addresses {
                        let label = ep.hostname.clone().unwrap_or_else(|| dashed(*ip));
                        let Some(target) = self.name(&format!("{label}.{svc}.{ns}.svc")) else { continue };
                        for p in ports.iter().filter(|p| matches(p)) {
                            records.push(Record::from_rdata(
                                qname.clone(),
                                TTL,
                                RData::SRV(SRV::new(0, 100, p.port, target.clone())),
                            ));
                        }
                    }
                }
            }
            Kind::ExternalName(_) => {}
        }
        Self::answer(records)
    }

    fn lookup_srv(&self, qname: &Name, ns: &str, svc: &str, port: &str, proto: &str, qtype: RecordType) -> Answer {
        let Some(entry) = self.services.get(&(ns.to_string(), svc.to_string())) else {
            return Answer::NxDomain;
        };
        let known = match entry.kind {
            Kind::Headless => self.slice_ports(ns, svc),
            _ => entry.ports.clone(),
        };
        if !known.iter().any(|p| p.name == port && p.protocol == proto) {
            return Answer::NxDomain;
        }
        if qtype != RecordType::SRV {
            return Answer::NoData;
        }
        self.srv_records(qname, ns, svc, entry, Some((port, proto)))
    }

    fn lookup_endpoint(&self, qname: &Name, ns: &str, svc: &str, label: &str, qtype: RecordType) -> Answer {
        let Some(entry) = self.services.get(&(ns.to_string(), svc.to_string())) else {
            return Answer::NxDomain;
        };
        if entry.kind != Kind::Headless {
            return Answer::NxDomain;
        }
        let ips: Vec<IpAddr> = self
            .ready_endpoints(ns, svc)
            .into_iter()
            .flat_map(|e| {
                let own = e.hostname.as_deref() == Some(label);
                e.addresses.iter().copied().filter(move |ip| own || (e.hostname.is_none() && dashed(*ip) == label))
            })
            .collect();
        if ips.is_empty() {
            return Answer::NxDomain;
        }
        Self::answer(Self::address_records(qname, ips, qtype))
    }

    fn lookup_ptr(&self, qname: &Name, ip: IpAddr, qtype: RecordType) -> Answer {
        let mut targets = Vec::new();
        if let Some((ns, svc)) = self.cluster_ip_owner.get(&ip) {
            targets.extend(self.name(&format!("{svc}.{ns}.svc")));
        }
        for ((ns, _), slice) in &self.slices {
            let headless =
                self.services.get(&(ns.clone(), slice.service.clone())).is_some_and(|s| s.kind == Kind::Headless);
            if !headless {
                continue;
            }
            for ep in slice.endpoints.iter().filter(|e| e.addresses.contains(&ip)) {
                let label = ep.hostname.clone().unwrap_or_else(|| dashed(ip));
                targets.extend(self.name(&format!("{label}.{}.{ns}.svc", slice.service)));
            }
        }
        if targets.is_empty() {
            return Answer::NotAuthoritative;
        }
        if qtype != RecordType::PTR {
            return Answer::NoData;
        }
        targets.sort();
        targets.dedup();
        Answer::Records(
            targets.into_iter().map(|t| Record::from_rdata(qname.clone(), TTL, RData::PTR(PTR(t)))).collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn service(name: &str, cluster_ip: &str, ports: &[(&str, i32)]) -> Service {
        Service {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() },
            spec: Some(ServiceSpec {
                cluster_ip: Some(cluster_ip.into()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, p)| ServicePort {
                            name: Some(n.to_string()),
                            port: *p,
                            protocol: Some("TCP".into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn slice(service: &str, endpoints: &[(&str, Option<&str>, bool)]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{service}-abc")),
                namespace: Some("default".into()),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: endpoints
                .iter()
                .map(|(ip, host, ready)| Endpoint {
                    addresses: vec![ip.to_string()],
                    hostname: host.map(str::to_string),
                    conditions: Some(EndpointConditions { ready: Some(*ready), ..Default::default() }),
                    ..Default::default()
                })
                .collect(),
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
        }
    }

    fn n(s: &str) -> Name {
        Name::from_ascii(s).unwrap()
    }

    fn rdatas(answer: Answer) -> Vec<String> {
        match answer {
            Answer::Records(r) => r.iter().map(|r| r.data().to_string()).collect(),
            other => panic!("expected records, got {other:?}"),
        }
    }

    fn index() -> RecordIndex {
        let mut idx = RecordIndex::new("cluster.local").unwrap();
        idx.upsert_service(&service("web", "10.43.0.20", &[("http", 80)]));
        idx.upsert_service(&service("db", "None", &[("http", 8080)]));
        idx.upsert_slice(&slice(
            "db",
            &[("10.42.0.5", Some("db-0"), true), ("10.42.0.6", None, true), ("10.42.0.7", Some("db-2"), false)],
        ));
        idx
    }

    #[test]
    fn a_cluster_ip_service_name_answers_its_cluster_ip() {
        assert_eq!(rdatas(index().lookup(&n("web.default.svc.cluster.local."), RecordType::A)), ["10.43.0.20"]);
    }

    #[test]
    fn names_are_matched_case_insensitively() {
        assert_eq!(rdatas(index().lookup(&n("WEB.Default.svc.Cluster.Local."), RecordType::A)), ["10.43.0.20"]);
    }

    #[test]
    fn a_headless_service_answers_every_ready_endpoint_address() {
        let mut got = rdatas(index().lookup(&n("db.default.svc.cluster.local."), RecordType::A));
        got.sort();
        assert_eq!(got, ["10.42.0.5", "10.42.0.6"]);
    }

    #[test]
    fn an_endpoint_hostname_names_its_pod_under_a_headless_service() {
        assert_eq!(rdatas(index().lookup(&n("db-0.db.default.svc.cluster.local."), RecordType::A)), ["10.42.0.5"]);
        assert_eq!(rdatas(index().lookup(&n("10-42-0-6.db.default.svc.cluster.local."), RecordType::A)), ["10.42.0.6"]);
        assert_eq!(index().lookup(&n("db-2.db.default.svc.cluster.local."), RecordType::A), Answer::NxDomain);
    }

    #[test]
    fn a_named_port_has_an_srv_record_pointing_at_the_service() {
        let got = rdatas(index().lookup(&n("_http._tcp.web.default.svc.cluster.local."), RecordType::SRV));
        assert_eq!(got, ["0 100 80 web.default.svc.cluster.local."]);
        let mut headless = rdatas(index().lookup(&n("_http._tcp.db.default.svc.cluster.local."), RecordType::SRV));
        headless.sort();
        assert_eq!(
            headless,
            ["0 100 8080 10-42-0-6.db.default.svc.cluster.local.", "0 100 8080 db-0.db.default.svc.cluster.local."]
        );
        assert_eq!(index().lookup(&n("_grpc._tcp.web.default.svc.cluster.local."), RecordType::SRV), Answer::NxDomain);
    }

    #[test]
    fn ptr_records_name_cluster_ips_and_headless_endpoints() {
        assert_eq!(
            rdatas(index().lookup(&n("20.0.43.10.in-addr.arpa."), RecordType::PTR)),
            ["web.default.svc.cluster.local."]
        );
        assert_eq!(
            rdatas(index().lookup(&n("5.0.42.10.in-addr.arpa."), RecordType::PTR)),
            ["db-0.db.default.svc.cluster.local."]
        );
        assert_eq!(index().lookup(&n("9.9.9.9.in-addr.arpa."), RecordType::PTR), Answer::NotAuthoritative);
    }

    #[test]
    fn an_external_name_service_is_a_cname() {
        let mut idx = index();
        let mut svc = service("ext", "", &[]);
        let spec = svc.spec.as_mut().unwrap();
        spec.type_ = Some("ExternalName".into());
        spec.external_name = Some("example.com".into());
        idx.upsert_service(&svc);
        assert_eq!(rdatas(idx.lookup(&n("ext.default.svc.cluster.local."), RecordType::A)), ["example.com."]);
    }

    #[test]
    fn an_unknown_name_is_nxdomain_and_a_known_name_without_the_type_is_nodata() {
        let idx = index();
        assert_eq!(idx.lookup(&n("nope.default.svc.cluster.local."), RecordType::A), Answer::NxDomain);
        assert_eq!(idx.lookup(&n("web.nope.svc.cluster.local."), RecordType::A), Answer::NxDomain);
        assert_eq!(idx.lookup(&n("web.default.svc.cluster.local."), RecordType::AAAA), Answer::NoData);
        assert_eq!(idx.lookup(&n("default.svc.cluster.local."), RecordType::A), Answer::NoData);
        assert_eq!(idx.lookup(&n("example.com."), RecordType::A), Answer::NotAuthoritative);
    }

    #[test]
    fn a_removed_service_no_longer_resolves() {
        let mut idx = index();
        idx.remove_service("default", "web");
        assert_eq!(idx.lookup(&n("web.default.svc.cluster.local."), RecordType::A), Answer::NxDomain);
        assert_eq!(idx.lookup(&n("20.0.43.10.in-addr.arpa."), RecordType::PTR), Answer::NotAuthoritative);
    }

    #[test]
    fn pod_names_resolve_to_the_address_they_spell() {
        assert_eq!(rdatas(index().lookup(&n("10-42-1-9.default.pod.cluster.local."), RecordType::A)), ["10.42.1.9"]);
    }

    #[test]
    fn an_ipv6_reverse_name_is_parsed_nibble_by_nibble() {
        let name = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa";
        assert_eq!(reverse_to_ip(name), Some("fd00::1".parse().unwrap()));
    }
}
