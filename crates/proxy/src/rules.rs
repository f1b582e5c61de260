//! The nftables rules of kube-proxy's nftables mode (`pkg/proxy/nftables/proxier.go`, Kubernetes
//! 1.33), as libnftables JSON commands (`nft -j -f -`).
//!
//! Layout of table `ip skiff-proxy`:
//! - base chains `nat-prerouting`/`nat-output` (priority dstnat) jump to `services`, which looks
//!   up `ip daddr . meta l4proto . th dport` in the verdict map `service-ips` (ClusterIPs,
//!   external IPs, load-balancer ingress IPs) and, for local destinations other than
//!   127.0.0.0/8, `meta l4proto . th dport` in `service-nodeports`;
//! - per Service port: `service-<hash>-<ns>/<name>/<proto>/<port>` choosing among all endpoints,
//!   `local-…` among this node's endpoints (the `Local` traffic policies) and `external-…` for
//!   traffic from outside (node ports, external and ingress IPs: masquerade, then the cluster or
//!   local chain);
//! - filter chains (priority -110, `ct state new`) looking up `no-endpoint-services` and
//!   `no-endpoint-nodeports`, whose elements `goto reject-chain` (no endpoints at all) or drop
//!   (a `Local` policy without local endpoints);
//! - `mark-for-masquerade` sets bit 0x4000 of the packet mark and `masquerading` (postrouting)
//!   masquerades marked packets, and hairpin packets (a pod reaching itself through its Service)
//!   whose `ip saddr . ip daddr` is in the set `endpoint-hairpin`;
//! - ClientIP affinity: one set `affinity-<hash>-…` per endpoint (timeout =
//!   `timeoutSeconds`, refreshed on each new connection) consulted before the random choice.
//!
//! One deliberate difference from kube-proxy: an endpoint is not a chain of its own but one rule
//! of its Service's chain (`numgen random mod k == 0 … dnat to ip:port`, k = endpoints left,
//! which picks uniformly), and hairpin masquerade is the `endpoint-hairpin` lookup. Debian 12's
//! nft (1.0.6) reads every chain and set of the table before each transaction, so kube-proxy's
//! chain per endpoint and anonymous verdict map per Service made each small update cost the
//! time of listing 60,000 chains at 10,000 Services × 5 endpoints (BENCHMARKS.md, proxy).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use serde_json::{Value, json};

use crate::model::{Endpoint, ServicePort, ServicePortName};

/// The table's name (family `ip`).
pub const TABLE: &str = "skiff-proxy";
/// The packet mark bit that asks `masquerading` to masquerade (kube-proxy's 0x4000).
pub const MASQUERADE_BIT: u32 = 0x4000;
/// Verdict map of ClusterIP, external IP and ingress IP `ip . proto . port`.
pub const SERVICE_IPS: &str = "service-ips";
/// Verdict map of node ports (`proto . port`).
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
/// Verdict map of the `ip . proto . port` of Service ports without usable endpoints.
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
/// Verdict map of the node ports (`proto . port`) of Service ports without usable endpoints.
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
/// Set of `ip . ip` pairs of endpoints: a packet from an endpoint to itself after DNAT.
pub const ENDPOINT_HAIRPIN: &str = "endpoint-hairpin";
/// The chain that rejects (connection refused).
pub const REJECT_CHAIN: &str = "reject-chain";
/// The chain that marks a packet for masquerade.
pub const MARK_FOR_MASQUERADE: &str = "mark-for-masquerade";

/// A JSON rule: the statement list of one nftables rule.
pub type Rule = Vec<Value>;

/// An element of one of the verdict maps.
#[derive(Debug, Clone, PartialEq)]
pub struct Element {
    /// The map ([`SERVICE_IPS`], [`SERVICE_NODEPORTS`], [`NO_ENDPOINT_SERVICES`],
    /// [`NO_ENDPOINT_NODEPORTS`]).
    pub map: &'static str,
    /// The key (a `concat`).
    pub key: Value,
    /// The verdict (`goto`/`drop`).
    pub verdict: Value,
}

impl Element {
    /// Map name and key, the identity of an element.
    pub fn id(&self) -> (String, String) {
        (self.map.to_string(), self.key.to_string())
    }
}

/// Everything one Service port owns in the table; the unit of an incremental update.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceRules {
    /// Chain name → rules.
    pub chains: BTreeMap<String, Vec<Rule>>,
    /// Map elements by [`Element::id`].
    pub elements: BTreeMap<(String, String), Element>,
    /// Affinity set name → timeout in seconds.
    pub affinity_sets: BTreeMap<String, u32>,
    /// Endpoint IPs that need the hairpin masquerade.
    pub hairpin: BTreeSet<Ipv4Addr>,
}

/// An IPv4 prefix (`--cluster-cidr`/the node's pod CIDR) in rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// Network address.
    pub addr: Ipv4Addr,
    /// Prefix length.
    pub len: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/len`; `None` for anything else (IPv6 included).
    pub fn parse(s: &str) -> Option<Cidr> {
        let (addr, len) = s.split_once('/')?;
        let len: u8 = len.parse().ok().filter(|l| *l <= 32)?;
        let addr: Ipv4Addr = addr.parse().ok()?;
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
        Some(Cidr { addr: Ipv4Addr::from(u32::from(addr) & mask), len })
    }
}

/// Where the proxy runs, as far as rules care.
#[derive(Debug, Clone, Default)]
pub struct RuleConfig {
    /// Traffic from outside this range to a ClusterIP is masqueraded (kube-proxy's
    /// `--detect-local-mode` NodeCIDR/ClusterCIDR); `None` masquerades none.
    pub local_traffic: Option<Cidr>,
}

// ---- JSON building blocks -----------------------------------------------------------------

fn payload(protocol: &str, field: &str) -> Value {
    json!({"payload": {"protocol": protocol, "field": field}})
}

fn meta(key: &str) -> Value {
    json!({"meta": {"key": key}})
}

fn matches(op: &str, left: Value, right: Value) -> Value {
    json!({"match": {"op": op, "left": left, "right": right}})
}

fn prefix(c: Cidr) -> Value {
    json!({"prefix": {"addr": c.addr.to_string(), "len": c.len}})
}

fn goto(chain: &str) -> Value {
    json!({"goto": {"target": chain}})
}

fn jump(chain: &str) -> Value {
    json!({"jump": {"target": chain}})
}

fn fib_type(flag: &str) -> Value {
    json!({"fib": {"result": "type", "flags": [flag]}})
}

fn ip_proto_port() -> Value {
    json!({"concat": [payload("ip", "daddr"), meta("l4proto"), payload("th", "dport")]})
}

fn proto_port() -> Value {
    json!({"concat": [meta("l4proto"), payload("th", "dport")]})
}

fn vmap(key: Value, map: &str) -> Value {
    json!({"vmap": {"key": key, "data": format!("@{map}")}})
}

fn ct_new() -> Value {
    matches("in", json!({"ct": {"key": "state"}}), json!("new"))
}

fn local_non_loopback_destination() -> Vec<Value> {
    vec![
        matches("==", fib_type("daddr"), json!("local")),
        matches("!=", payload("ip", "daddr"), prefix(Cidr { addr: Ipv4Addr::new(127, 0, 0, 0), len: 8 })),
    ]
}

/// `{"<verb>": {"<kind>": {family, table, ...fields}}}`.
pub fn command(verb: &str, kind: &str, fields: Value) -> Value {
    let mut obj = json!({"family": "ip", "table": TABLE});
    if let (Some(o), Value::Object(f)) = (obj.as_object_mut(), fields) {
        o.extend(f);
    }
    if kind == "table" {
        obj = json!({"family": "ip", "name": TABLE});
    }
    json!({ verb: { kind: obj } })
}

/// `add chain` (a regular chain).
pub fn add_chain(name: &str) -> Value {
    command("add", "chain", json!({"name": name}))
}

/// `add rule` to `chain`.
pub fn add_rule(chain: &str, rule: &[Value]) -> Value {
    command("add", "rule", json!({"chain": chain, "expr": rule}))
}

/// `add element` (or `delete element` with `verdict: None`) of one map or set element.
pub fn element(verb: &str, map: &str, key: &Value, verdict: Option<&Value>) -> Value {
    let elem = match verdict {
        Some(v) => json!([[key, v]]),
        None => json!([key]),
    };
    command(verb, "element", json!({"name": map, "elem": elem}))
}

/// `add set` of an affinity set: source addresses with a timeout (nft adds `dynamic` for the
/// `update` statements that fill it).
pub fn add_affinity_set(name: &str, timeout_seconds: u32) -> Value {
    command("add", "set", json!({"name": name, "type": "ipv4_addr", "flags": ["timeout"], "timeout": timeout_seconds}))
}

// ---- names --------------------------------------------------------------------------------

/// kube-proxy's chain name base: a hash (so names stay unique when truncated views collide)
/// then the readable `ns/name/proto/port`.
fn name_base(readable: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, readable.as_bytes());
    let hash: String = digest.as_ref()[..4].iter().map(|b| format!("{b:02X}")).collect();
    format!("{hash}-{readable}")
}

/// The chain choosing among all endpoints of a Service port.
pub fn cluster_chain(name: &ServicePortName) -> String {
    format!("service-{}", name_base(&name.to_string()))
}

/// The chain choosing among this node's endpoints of a Service port.
pub fn local_chain(name: &ServicePortName) -> String {
    format!("local-{}", name_base(&name.to_string()))
}

/// The chain of traffic arriving from outside (node port, external and ingress IPs).
pub fn external_chain(name: &ServicePortName) -> String {
    format!("external-{}", name_base(&name.to_string()))
}

/// The ClientIP affinity set of one endpoint of a Service port.
pub fn affinity_set(name: &ServicePortName, ep: &Endpoint) -> String {
    format!("affinity-{}", name_base(&format!("{name}__{}/{}", ep.ip, ep.port)))
}

// ---- the base table -----------------------------------------------------------------------

fn base_chain(name: &str, kind: &str, hook: &str, prio: i32) -> Value {
    command("add", "chain", json!({"name": name, "type": kind, "hook": hook, "prio": prio, "policy": "accept"}))
}

fn verdict_map(name: &str, key: &[&str]) -> Value {
    command("add", "map", json!({"name": name, "type": key, "map": "verdict"}))
}

/// Commands that delete the table of a previous run and create the base table: maps, sets and
/// every chain that is not a Service port's. The `add` before `delete` makes the delete valid
/// when no table exists (one transaction either way).
pub fn base_table() -> Vec<Value> {
    let mark = json!({"meta": {"key": "mark"}});
    let mut cmds = vec![
        command("add", "table", json!({})),
        command("delete", "table", json!({})),
        command("add", "table", json!({})),
    ];
    cmds.push(verdict_map(SERVICE_IPS, &["ipv4_addr", "inet_proto", "inet_service"]));
    cmds.push(verdict_map(SERVICE_NODEPORTS, &["inet_proto", "inet_service"]));
    cmds.push(verdict_map(NO_ENDPOINT_SERVICES, &["ipv4_addr", "inet_proto", "inet_service"]));
    cmds.push(verdict_map(NO_ENDPOINT_NODEPORTS, &["inet_proto", "inet_service"]));
    cmds.push(command("add", "set", json!({"name": ENDPOINT_HAIRPIN, "type": ["ipv4_addr", "ipv4_addr"]})));
    let chains: Vec<(&str, Vec<Rule>)> = vec![
        (MARK_FOR_MASQUERADE, vec![vec![json!({"mangle": {"key": mark, "value": {"|": [mark, MASQUERADE_BIT]}}})]]),
        (
            "masquerading",
            vec![
                vec![
                    matches(
                        "==",
                        json!({"concat": [payload("ip", "saddr"), payload("ip", "daddr")]}),
                        json!(format!("@{ENDPOINT_HAIRPIN}")),
                    ),
                    json!({"masquerade": {"flags": ["fully-random"]}}),
                ],
                vec![matches("==", json!({"&": [mark, MASQUERADE_BIT]}), json!(0)), json!({"return": null})],
                vec![
                    json!({"mangle": {"key": mark, "value": {"^": [mark, MASQUERADE_BIT]}}}),
                    json!({"masquerade": {"flags": ["fully-random"]}}),
                ],
            ],
        ),
        (REJECT_CHAIN, vec![vec![json!({"reject": null})]]),
        (
            "services",
            vec![vec![vmap(ip_proto_port(), SERVICE_IPS)], {
                let mut r = local_non_loopback_destination();
                r.push(vmap(proto_port(), SERVICE_NODEPORTS));
                r
            }],
        ),
        ("service-endpoints-check", vec![vec![vmap(ip_proto_port(), NO_ENDPOINT_SERVICES)]]),
        (
            "nodeport-endpoints-check",
            vec![{
                let mut r = local_non_loopback_destination();
                r.push(vmap(proto_port(), NO_ENDPOINT_NODEPORTS));
                r
            }],
        ),
    ];
    for (name, rules) in &chains {
        cmds.push(add_chain(name));
        for r in rules {
            cmds.push(add_rule(name, r));
        }
    }
    // Hooked chains last: they jump to the regular chains above. Filter at -110 runs before
    // DNAT (-100), so a Service without endpoints is refused before anything rewrites it.
    let hooked: [(&str, &str, &str, i32, Vec<Rule>); 6] = [
        ("nat-prerouting", "nat", "prerouting", -100, vec![vec![jump("services")]]),
        ("nat-output", "nat", "output", -100, vec![vec![jump("services")]]),
        ("nat-postrouting", "nat", "postrouting", 100, vec![vec![jump("masquerading")]]),
        (
            "filter-input",
            "filter",
            "input",
            -110,
            vec![vec![ct_new(), jump("nodeport-endpoints-check")], vec![ct_new(), jump("service-endpoints-check")]],
        ),
        ("filter-forward", "filter", "forward", -110, vec![vec![ct_new(), jump("service-endpoints-check")]]),
        (
            "filter-output",
            "filter",
            "output",
            -110,
            vec![vec![ct_new(), jump("service-endpoints-check")], vec![ct_new(), jump("nodeport-endpoints-check")]],
        ),
    ];
    for (name, kind, hook, prio, rules) in &hooked {
        cmds.push(base_chain(name, kind, hook, *prio));
        for r in rules {
            cmds.push(add_rule(name, r));
        }
    }
    cmds
}

/// The command that removes everything the proxy made (`skiff killall`, tests). The `add`
/// first makes it valid when the table is absent.
pub fn delete_table() -> Vec<Value> {
    vec![command("add", "table", json!({})), command("delete", "table", json!({}))]
}

// ---- one Service port ---------------------------------------------------------------------

/// The endpoint choice: with affinity, a client already in an endpoint's set goes back to it;
/// otherwise endpoint i of n is taken with probability 1/(n-i) given the previous ones were
/// not, which is uniform, and the client is recorded in its affinity set.
fn endpoint_rules(sp: &ServicePort, endpoints: &[Endpoint]) -> Vec<Rule> {
    let proto = sp.name.protocol.nft();
    let dnat = |e: &Endpoint| {
        [matches("==", meta("l4proto"), json!(proto)), json!({"dnat": {"addr": e.ip.to_string(), "port": e.port}})]
    };
    let update = |e: &Endpoint| json!({"set": {"op": "update", "elem": payload("ip", "saddr"), "set": format!("@{}", affinity_set(&sp.name, e))}});
    let mut rules = Vec::new();
    if sp.affinity_timeout.is_some() {
        for e in endpoints {
            let mut r = vec![
                matches("==", payload("ip", "saddr"), json!(format!("@{}", affinity_set(&sp.name, e)))),
                update(e),
            ];
            r.extend(dnat(e));
            rules.push(r);
        }
    }
    let n = endpoints.len();
    for (i, e) in endpoints.iter().enumerate() {
        let mut r = Vec::new();
        if n - i > 1 {
            r.push(matches("==", json!({"numgen": {"mode": "random", "mod": n - i, "offset": 0}}), json!(0)));
        }
        if sp.affinity_timeout.is_some() {
            r.push(update(e));
        }
        r.extend(dnat(e));
        rules.push(r);
    }
    rules
}

/// The rule that masquerades ClusterIP traffic from outside the local range (kube-proxy's
/// `ip daddr <clusterIP> <proto> dport <port> ip saddr != <local CIDR> jump mark-for-masquerade`).
fn cluster_ip_masquerade(sp: &ServicePort, cfg: &RuleConfig) -> Option<Rule> {
    let local = cfg.local_traffic?;
    Some(vec![
        matches("==", payload("ip", "daddr"), json!(sp.cluster_ip.to_string())),
        matches("==", payload(sp.name.protocol.nft(), "dport"), json!(sp.port)),
        matches("!=", payload("ip", "saddr"), prefix(local)),
        jump(MARK_FOR_MASQUERADE),
    ])
}

/// The chains, map elements and sets of one Service port.
pub fn service_rules(sp: &ServicePort, cfg: &RuleConfig) -> ServiceRules {
    let mut out = ServiceRules::default();
    let proto = sp.name.protocol.nft();
    let all = &sp.endpoints;
    let local = sp.local_endpoints();
    let has_external = sp.has_external();
    let cluster = cluster_chain(&sp.name);
    let local_name = local_chain(&sp.name);
    let external = external_chain(&sp.name);

    // Which chains exist: the cluster chain serves the Cluster policies and node-local traffic
    // to an external `Local` Service; the local chain the `Local` policies.
    let want_cluster = !all.is_empty() && (!sp.internal_local || has_external);
    let want_local = !local.is_empty() && (sp.internal_local || (has_external && sp.external_local));
    let masq = cluster_ip_masquerade(sp, cfg);
    if want_cluster {
        let mut rules: Vec<Rule> = Vec::new();
        if !sp.internal_local {
            rules.extend(masq.clone());
        }
        rules.extend(endpoint_rules(sp, all));
        out.chains.insert(cluster.clone(), rules);
    }
    if want_local {
        let mut rules: Vec<Rule> = Vec::new();
        if sp.internal_local {
            rules.extend(masq);
        }
        rules.extend(endpoint_rules(sp, &local));
        out.chains.insert(local_name.clone(), rules);
    }
    let used: &[Endpoint] = match (want_cluster, want_local) {
        (true, _) => all,
        (false, true) => &local,
        _ => &[],
    };
    if let Some(timeout) = sp.affinity_timeout {
        for e in used {
            out.affinity_sets.insert(affinity_set(&sp.name, e), timeout);
        }
    }
    out.hairpin = used.iter().map(|e| e.ip).collect();

    let mut elements: Vec<Element> = Vec::new();
    let mut put = |map: &'static str, key: Value, verdict: Value| elements.push(Element { map, key, verdict });
    let ip_key = |ip: Ipv4Addr, port: u16| json!({"concat": [ip.to_string(), proto, port]});

    // ClusterIP.
    let cip_key = ip_key(sp.cluster_ip, sp.port);
    match (sp.internal_local, want_cluster, want_local) {
        (false, true, _) => put(SERVICE_IPS, cip_key, goto(&cluster)),
        (true, _, true) => put(SERVICE_IPS, cip_key, goto(&local_name)),
        // internalTrafficPolicy Local without local endpoints drops; no endpoints at all refuses.
        (true, _, false) if !all.is_empty() => put(NO_ENDPOINT_SERVICES, cip_key, json!({"drop": null})),
        _ => put(NO_ENDPOINT_SERVICES, cip_key, goto(REJECT_CHAIN)),
    }

    // External traffic.
    if has_external {
        if all.is_empty() {
            for ip in &sp.external_ips {
                put(NO_ENDPOINT_SERVICES, ip_key(*ip, sp.port), goto(REJECT_CHAIN));
            }
            if let Some(np) = sp.node_port {
                put(NO_ENDPOINT_NODEPORTS, json!({"concat": [proto, np]}), goto(REJECT_CHAIN));
            }
        } else {
            let mut rules: Vec<Rule> = Vec::new();
            if sp.external_local {
                // From the node itself the source is kept local, and the cluster chain serves it
                // (kube-proxy short-circuits node-originated traffic the same way).
                rules.push(vec![matches("==", fib_type("saddr"), json!("local")), jump(MARK_FOR_MASQUERADE)]);
                rules.push(vec![matches("==", fib_type("saddr"), json!("local")), goto(&cluster)]);
                rules.push(if want_local { vec![goto(&local_name)] } else { vec![json!({"drop": null})] });
            } else {
                rules.push(vec![jump(MARK_FOR_MASQUERADE)]);
                rules.push(vec![goto(&cluster)]);
            }
            out.chains.insert(external.clone(), rules);
            for ip in &sp.external_ips {
                put(SERVICE_IPS, ip_key(*ip, sp.port), goto(&external));
            }
            if let Some(np) = sp.node_port {
                put(SERVICE_NODEPORTS, json!({"concat": [proto, np]}), goto(&external));
            }
        }
    }
    out.elements = elements.into_iter().map(|e| (e.id(), e)).collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::service_ports;
    use crate::model::tests::{service, slice};

    fn rules_for(
        svc: &k8s_openapi::api::core::v1::Service,
        slices: &[&k8s_openapi::api::discovery::v1::EndpointSlice],
    ) -> ServiceRules {
        let cfg = RuleConfig { local_traffic: Cidr::parse("10.42.0.0/24") };
        let ports = service_ports(svc, slices, "n1");
        assert_eq!(ports.len(), 1);
        service_rules(&ports[0], &cfg)
    }

    /// The `addr:port` of every dnat statement of a chain, in rule order.
    fn dnat_targets(rules: &[Rule]) -> Vec<String> {
        rules
            .iter()
            .flatten()
            .filter_map(|s| s.get("dnat"))
            .map(|d| format!("{}:{}", d["addr"].as_str().unwrap(), d["port"]))
            .collect()
    }

    fn numgen_mods(rules: &[Rule]) -> Vec<u64> {
        rules.iter().flatten().filter_map(|s| s.pointer("/match/left/numgen/mod").and_then(Value::as_u64)).collect()
    }

    fn verdict_of<'a>(r: &'a ServiceRules, map: &str) -> Vec<&'a Value> {
        r.elements.values().filter(|e| e.map == map).map(|e| &e.verdict).collect()
    }

    #[test]
    fn a_cluster_ip_service_maps_its_ip_to_a_chain_choosing_uniformly_among_endpoints() {
        let svc = service("default", "web", "10.43.0.20", 80);
        let s = slice(
            "default",
            "web",
            "web-1",
            8080,
            &[("10.42.0.5", true, "n1"), ("10.42.1.5", true, "n2"), ("10.42.2.5", true, "n3")],
        );
        let r = rules_for(&svc, &[&s]);
        let chain = cluster_chain(&service_ports(&svc, &[&s], "n1")[0].name);
        assert!(chain.starts_with("service-") && chain.ends_with("-default/web/tcp/"), "{chain}");
        assert_eq!(r.chains.keys().collect::<Vec<_>>(), [&chain], "no external chain for a ClusterIP Service");
        let rules = &r.chains[&chain];
        assert_eq!(dnat_targets(rules), ["10.42.0.5:8080", "10.42.1.5:8080", "10.42.2.5:8080"]);
        assert_eq!(numgen_mods(rules), [3, 2], "1/3, then 1/2 of the rest, then the last one");
        let el = &r.elements[&(SERVICE_IPS.to_string(), json!({"concat": ["10.43.0.20", "tcp", 80]}).to_string())];
        assert_eq!(el.verdict, goto(&chain));
        assert_eq!(r.hairpin.len(), 3);
        // ClusterIP traffic from outside the node's pod range is masqueraded; the rule names the port.
        let first = serde_json::to_string(&rules[0]).unwrap();
        assert!(
            first.contains("mark-for-masquerade") && first.contains("10.42.0.0") && first.contains("10.43.0.20"),
            "{first}"
        );
    }

    #[test]
    fn a_service_without_endpoints_is_rejected_and_has_no_chain() {
        let svc = service("default", "empty", "10.43.0.21", 80);
        let r = rules_for(&svc, &[]);
        assert!(r.chains.is_empty());
        assert_eq!(verdict_of(&r, NO_ENDPOINT_SERVICES), [&goto(REJECT_CHAIN)]);
        assert!(verdict_of(&r, SERVICE_IPS).is_empty());
    }

    #[test]
    fn a_node_port_service_masquerades_external_traffic_and_goes_to_all_endpoints() {
        let mut svc = service("default", "web", "10.43.0.20", 80);
        svc.spec.as_mut().unwrap().type_ = Some("NodePort".into());
        svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(30080);
        let s = slice("default", "web", "web-1", 8080, &[("10.42.1.5", true, "n2")]);
        let r = rules_for(&svc, &[&s]);
        let name = &service_ports(&svc, &[&s], "n1")[0].name;
        let ext = &r.chains[&external_chain(name)];
        assert_eq!(ext, &vec![vec![jump(MARK_FOR_MASQUERADE)], vec![goto(&cluster_chain(name))]]);
        assert_eq!(verdict_of(&r, SERVICE_NODEPORTS), [&goto(&external_chain(name))]);
    }

    #[test]
    fn external_traffic_policy_local_sends_outside_traffic_to_local_endpoints_only() {
        let mut svc = service("default", "web", "10.43.0.20", 80);
        let spec = svc.spec.as_mut().unwrap();
        spec.type_ = Some("NodePort".into());
        spec.ports.as_mut().unwrap()[0].node_port = Some(30080);
        spec.external_traffic_policy = Some("Local".into());
        let s = slice("default", "web", "web-1", 8080, &[("10.42.0.5", true, "n1"), ("10.42.1.5", true, "n2")]);
        let r = rules_for(&svc, &[&s]);
        let name = &service_ports(&svc, &[&s], "n1")[0].name;
        assert_eq!(dnat_targets(&r.chains[&local_chain(name)]), ["10.42.0.5:8080"]);
        assert_eq!(
            dnat_targets(&r.chains[&cluster_chain(name)]).len(),
            2,
            "ClusterIP traffic still uses every endpoint"
        );
        let ext = &r.chains[&external_chain(name)];
        assert_eq!(ext.last().unwrap(), &vec![goto(&local_chain(name))]);

        // No local endpoint: outside traffic is dropped, traffic from the node still served.
        let remote = slice("default", "web", "web-1", 8080, &[("10.42.1.5", true, "n2")]);
        let r = rules_for(&svc, &[&remote]);
        assert!(!r.chains.contains_key(&local_chain(name)));
        assert_eq!(r.chains[&external_chain(name)].last().unwrap(), &vec![json!({"drop": null})]);
    }

    #[test]
    fn internal_traffic_policy_local_without_local_endpoints_drops_cluster_ip_traffic() {
        let mut svc = service("default", "web", "10.43.0.20", 80);
        svc.spec.as_mut().unwrap().internal_traffic_policy = Some("Local".into());
        let remote = slice("default", "web", "web-1", 8080, &[("10.42.1.5", true, "n2")]);
        let r = rules_for(&svc, &[&remote]);
        assert!(r.chains.is_empty());
        assert_eq!(verdict_of(&r, NO_ENDPOINT_SERVICES), [&json!({"drop": null})]);
        let local = slice("default", "web", "web-1", 8080, &[("10.42.1.5", true, "n2"), ("10.42.0.7", true, "n1")]);
        let r = rules_for(&svc, &[&local]);
        let name = &service_ports(&svc, &[&local], "n1")[0].name;
        assert_eq!(dnat_targets(&r.chains[&local_chain(name)]), ["10.42.0.7:8080"]);
        assert_eq!(verdict_of(&r, SERVICE_IPS), [&goto(&local_chain(name))]);
    }

    #[test]
    fn client_ip_affinity_sends_known_clients_back_and_records_new_ones() {
        let mut svc = service("default", "web", "10.43.0.20", 80);
        svc.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
        svc.spec.as_mut().unwrap().session_affinity_config = Some(k8s_openapi::api::core::v1::SessionAffinityConfig {
            client_ip: Some(k8s_openapi::api::core::v1::ClientIPConfig { timeout_seconds: Some(60) }),
        });
        let s = slice("default", "web", "web-1", 8080, &[("10.42.0.5", true, "n1"), ("10.42.1.5", true, "n2")]);
        let r = rules_for(&svc, &[&s]);
        assert_eq!(r.affinity_sets.len(), 2);
        assert!(r.affinity_sets.values().all(|t| *t == 60));
        let rules = r.chains.values().next().unwrap();
        // masquerade, 2 lookups of known clients, then the 2 random choices.
        assert_eq!(rules.len(), 5);
        let lookup = serde_json::to_string(&rules[1]).unwrap();
        let set =
            r.affinity_sets.keys().find(|s| lookup.contains(s.as_str())).expect("the lookup names an affinity set");
        assert!(lookup.contains("update") && lookup.contains("10.42."), "{lookup} {set}");
        assert!(serde_json::to_string(&rules[4]).unwrap().contains("\"update\""));
    }

    #[test]
    fn the_base_table_recreates_the_table_and_hooks_nat_and_filter() {
        let cmds = base_table();
        let text = serde_json::to_string(&cmds).unwrap();
        assert_eq!(cmds[1], json!({"delete": {"table": {"family": "ip", "name": TABLE}}}));
        for hook in ["prerouting", "output", "postrouting", "input", "forward"] {
            assert!(text.contains(&format!("\"hook\":\"{hook}\"")), "{hook}");
        }
        for map in [SERVICE_IPS, SERVICE_NODEPORTS, NO_ENDPOINT_SERVICES, NO_ENDPOINT_NODEPORTS] {
            assert!(text.contains(&format!("\"@{map}\"")), "{map} is looked up");
        }
    }

    #[test]
    fn cidrs_are_parsed_to_their_network() {
        assert_eq!(Cidr::parse("10.42.3.7/24"), Some(Cidr { addr: Ipv4Addr::new(10, 42, 3, 0), len: 24 }));
        assert_eq!(Cidr::parse("fd00::/64"), None);
        assert_eq!(Cidr::parse("10.0.0.0/33"), None);
    }
}
