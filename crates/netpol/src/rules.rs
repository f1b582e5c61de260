//! The nftables layout of NetworkPolicy enforcement, as libnftables JSON commands.
//!
//! Table `ip skiff-netpol` (beside the proxy's `ip skiff-proxy`, so neither's full resync
//! touches the other), on the `forward` hook — what pods send each other and the world passes
//! there, after the proxy's DNAT, so policies see the chosen endpoint, as upstream requires:
//! - base chain `egress` (priority filter): established/related accept; sources not in the set
//!   `egress-isolated` accept; `jump egress-policies`; drop;
//! - base chain `ingress` (priority filter + 1, so an egress `accept` still meets it — an
//!   accept ends only its own base chain): established/related accept; destinations not in
//!   `ingress-isolated` accept; sources local to the node accept; `jump ingress-policies`; drop;
//! - `ingress-policies`/`egress-policies`: one rule per policy, `ip daddr|saddr @<targets>
//!   jump <policy chain>`; a policy chain holds one rule per (peer × port) of each of its
//!   rules, ending in `accept`;
//! - sets: `sel-<hash>` (ipv4_addr), the addresses of one pod [`Selection`], shared by every
//!   policy using an equal selection; `port-<hash>` (ipv4_addr . inet_proto . inet_service),
//!   every pod's address, protocol and port for one container port name. A label change is
//!   therefore element updates of these sets, never a chain rewrite.
//!
//! Traffic from the node itself to its pods (probes) and from pods to the node leaves or
//! enters through the `output`/`input` hooks, where nothing here filters: the API reference's
//! "traffic to and from the node where a Pod is running is always allowed".

use serde_json::{Value, json};

use crate::policy::{Direction, Peer, PortMatch, Rule, Selection};

/// The table's name (family `ip`).
pub const TABLE: &str = "skiff-netpol";
/// Local pods isolated for ingress.
pub const INGRESS_ISOLATED: &str = "ingress-isolated";
/// Local pods isolated for egress.
pub const EGRESS_ISOLATED: &str = "egress-isolated";
/// The chain of per-policy ingress dispatch rules.
pub const INGRESS_POLICIES: &str = "ingress-policies";
/// The chain of per-policy egress dispatch rules.
pub const EGRESS_POLICIES: &str = "egress-policies";

/// A JSON rule: the statement list of one nftables rule.
pub type NftRule = Vec<Value>;

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

/// `flush chain`.
pub fn flush_chain(name: &str) -> Value {
    command("flush", "chain", json!({"name": name}))
}

/// `delete chain`.
pub fn delete_chain(name: &str) -> Value {
    command("delete", "chain", json!({"name": name}))
}

/// The two kinds of sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetType {
    /// Addresses.
    Addresses,
    /// `address . protocol . port`.
    NamedPort,
}

/// `add set` of a type.
pub fn add_set(name: &str, ty: SetType) -> Value {
    let ty = match ty {
        SetType::Addresses => json!("ipv4_addr"),
        SetType::NamedPort => json!(["ipv4_addr", "inet_proto", "inet_service"]),
    };
    command("add", "set", json!({"name": name, "type": ty}))
}

/// `delete set`.
pub fn delete_set(name: &str) -> Value {
    command("delete", "set", json!({"name": name}))
}

/// `add element`/`delete element` of several elements of one set.
pub fn elements(verb: &str, set: &str, elems: Vec<Value>) -> Value {
    command(verb, "element", json!({"name": set, "elem": elems}))
}

fn hash(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The set of a pod selection (named by a hash of its canonical text: label selectors may hold
/// characters nft names cannot).
pub fn selection_set(sel: &Selection) -> String {
    format!("sel-{}", hash(&sel.to_string()))
}

/// The set of a container port name.
pub fn port_set(name: &str) -> String {
    format!("port-{}", hash(name))
}

/// The chain of one policy in one direction: a hash, then the readable `namespace/name`
/// (cut so the name stays under nft's limit).
pub fn policy_chain(key: &str, dir: Direction) -> String {
    let readable: String = key.chars().take(200).collect();
    let d = match dir {
        Direction::Ingress => "ingress",
        Direction::Egress => "egress",
    };
    format!("{d}-{}-{readable}", &hash(key)[..8])
}

fn payload(protocol: &str, field: &str) -> Value {
    json!({"payload": {"protocol": protocol, "field": field}})
}

fn matches(op: &str, left: Value, right: Value) -> Value {
    json!({"match": {"op": op, "left": left, "right": right}})
}

fn prefix(c: skiff_proxy::Cidr) -> Value {
    json!({"prefix": {"addr": c.addr.to_string(), "len": c.len}})
}

fn accept() -> Value {
    json!({"accept": null})
}

fn established() -> Value {
    matches("in", json!({"ct": {"key": "state"}}), json!(["established", "related"]))
}

/// The packet's address on the peer's side, and on the selected pod's side.
fn sides(dir: Direction) -> (&'static str, &'static str) {
    match dir {
        Direction::Ingress => ("saddr", "daddr"),
        Direction::Egress => ("daddr", "saddr"),
    }
}

/// The statements matching one peer.
fn peer_match(dir: Direction, peer: &Peer) -> Vec<Value> {
    let field = sides(dir).0;
    match peer {
        Peer::Pods(sel) => vec![matches("==", payload("ip", field), json!(format!("@{}", selection_set(sel))))],
        Peer::Block { cidr, except } => {
            let mut out = vec![matches("==", payload("ip", field), prefix(*cidr))];
            if !except.is_empty() {
                let holes: Vec<Value> = except.iter().map(|c| prefix(*c)).collect();
                out.push(matches("!=", payload("ip", field), json!({"set": holes})));
            }
            out
        }
    }
}

/// The statements matching one destination port.
fn port_match(port: &PortMatch) -> Vec<Value> {
    let l4 = |p: crate::policy::Protocol| matches("==", json!({"meta": {"key": "l4proto"}}), json!(p.nft()));
    match port {
        PortMatch::Any(p) => vec![l4(*p)],
        PortMatch::Range(p, a, b) if a == b => vec![l4(*p), matches("==", payload("th", "dport"), json!(a))],
        PortMatch::Range(p, a, b) => vec![l4(*p), matches("==", payload("th", "dport"), json!({"range": [a, b]}))],
        // The protocol is part of the set's key, so a name of another protocol never matches.
        PortMatch::Named(p, name) => vec![
            l4(*p),
            matches(
                "==",
                json!({"concat": [payload("ip", "daddr"), {"meta": {"key": "l4proto"}}, payload("th", "dport")]}),
                json!(format!("@{}", port_set(name))),
            ),
        ],
    }
}

/// The rules of one policy's chain in `dir`: one per peer × port of each rule, each ending in
/// `accept`. A rule with an empty (all invalid) peer or port list yields nothing.
pub fn policy_rules(dir: Direction, rules: &[Rule]) -> Vec<NftRule> {
    let mut out = Vec::new();
    for rule in rules {
        let peers: Vec<Vec<Value>> = match &rule.peers {
            None => vec![vec![]],
            Some(p) => p.iter().map(|p| peer_match(dir, p)).collect(),
        };
        let ports: Vec<Vec<Value>> = match &rule.ports {
            None => vec![vec![]],
            Some(p) => p.iter().map(port_match).collect(),
        };
        for peer in &peers {
            for port in &ports {
                let mut r = peer.clone();
                r.extend(port.iter().cloned());
                r.push(accept());
                out.push(r);
            }
        }
    }
    out
}

/// The dispatch rule sending traffic of a policy's target pods to its chain.
pub fn dispatch_rule(dir: Direction, targets: &Selection, chain: &str) -> NftRule {
    let field = sides(dir).1;
    vec![
        matches("==", payload("ip", field), json!(format!("@{}", selection_set(targets)))),
        json!({"jump": {"target": chain}}),
    ]
}

fn base_chain(name: &str, prio: i32) -> Value {
    command(
        "add",
        "chain",
        json!({"name": name, "type": "filter", "hook": "forward", "prio": prio, "policy": "accept"}),
    )
}

/// Commands that delete the table of a previous run and create the base table: the isolation
/// sets, the dispatch chains (empty) and the two hooked chains.
pub fn base_table() -> Vec<Value> {
    let mut cmds = vec![
        command("add", "table", json!({})),
        command("delete", "table", json!({})),
        command("add", "table", json!({})),
        add_set(INGRESS_ISOLATED, SetType::Addresses),
        add_set(EGRESS_ISOLATED, SetType::Addresses),
        add_chain(INGRESS_POLICIES),
        add_chain(EGRESS_POLICIES),
    ];
    let egress: Vec<NftRule> = vec![
        vec![established(), accept()],
        vec![matches("!=", payload("ip", "saddr"), json!(format!("@{EGRESS_ISOLATED}"))), accept()],
        vec![json!({"jump": {"target": EGRESS_POLICIES}})],
        vec![json!({"drop": null})],
    ];
    let ingress: Vec<NftRule> = vec![
        vec![established(), accept()],
        vec![matches("!=", payload("ip", "daddr"), json!(format!("@{INGRESS_ISOLATED}"))), accept()],
        vec![matches("==", json!({"fib": {"result": "type", "flags": ["saddr"]}}), json!("local")), accept()],
        vec![json!({"jump": {"target": INGRESS_POLICIES}})],
        vec![json!({"drop": null})],
    ];
    cmds.push(base_chain("egress", 0));
    cmds.extend(egress.iter().map(|r| add_rule("egress", r)));
    cmds.push(base_chain("ingress", 1));
    cmds.extend(ingress.iter().map(|r| add_rule("ingress", r)));
    cmds
}

/// The commands removing the table (`skiff killall`, tests); valid when it is absent.
pub fn delete_table() -> Vec<Value> {
    vec![command("add", "table", json!({})), command("delete", "table", json!({}))]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{NamespaceScope, Protocol};
    use skiff_apimachinery::selector::LabelSelector;
    use skiff_proxy::Cidr;

    fn pods(s: &str) -> Selection {
        Selection {
            namespaces: NamespaceScope::Only("prod".into()),
            pods: LabelSelector::parse(s).unwrap(),
            local: false,
        }
    }

    #[test]
    fn equal_selections_share_a_set_and_locality_is_part_of_its_identity() {
        assert_eq!(selection_set(&pods("a=b,c=d")), selection_set(&pods("c=d,a=b")));
        assert_ne!(selection_set(&pods("a=b")), selection_set(&Selection { local: true, ..pods("a=b") }));
        assert_ne!(selection_set(&pods("a=b")), selection_set(&pods("a=c")));
    }

    #[test]
    fn a_rule_compiles_to_one_nft_rule_per_peer_and_port() {
        let rule = Rule {
            peers: Some(vec![
                Peer::Pods(pods("app=api")),
                Peer::Block {
                    cidr: Cidr::parse("10.0.0.0/8").unwrap(),
                    except: vec![Cidr::parse("10.1.0.0/16").unwrap()],
                },
            ]),
            ports: Some(vec![PortMatch::Range(Protocol::Tcp, 80, 80), PortMatch::Range(Protocol::Udp, 5000, 5010)]),
        };
        let out = policy_rules(Direction::Ingress, &[rule]);
        assert_eq!(out.len(), 4);
        let text = serde_json::to_string(&out).unwrap();
        assert!(text.contains(&format!("@{}", selection_set(&pods("app=api")))));
        assert!(text.contains(r#""op":"!=","left":{"payload":{"protocol":"ip","field":"saddr"}},"right":{"set":[{"prefix":{"addr":"10.1.0.0","len":16}}]}"#), "{text}");
        assert!(text.contains(r#"{"range":[5000,5010]}"#));
        assert!(out.iter().all(|r| r.last() == Some(&json!({"accept": null}))));
    }

    #[test]
    fn egress_rules_match_the_peer_as_destination() {
        let out = policy_rules(Direction::Egress, &[Rule { peers: Some(vec![Peer::Pods(pods("a=b"))]), ports: None }]);
        let text = serde_json::to_string(&out).unwrap();
        assert!(text.contains(r#""field":"daddr"}},"right":"@sel-"#), "{text}");
        let d = dispatch_rule(Direction::Egress, &pods("x=y"), "egress-p");
        assert!(serde_json::to_string(&d).unwrap().contains(r#""field":"saddr"}},"right":"@sel-"#));
    }

    #[test]
    fn an_allow_all_rule_is_a_bare_accept_and_an_empty_peer_list_is_nothing() {
        assert_eq!(policy_rules(Direction::Ingress, &[Rule { peers: None, ports: None }]), vec![vec![accept()]]);
        assert!(policy_rules(Direction::Ingress, &[Rule { peers: Some(vec![]), ports: None }]).is_empty());
        assert!(policy_rules(Direction::Ingress, &[]).is_empty());
    }

    #[test]
    fn a_named_port_is_looked_up_with_the_destination_address_and_protocol() {
        let out = policy_rules(
            Direction::Ingress,
            &[Rule { peers: None, ports: Some(vec![PortMatch::Named(Protocol::Udp, "dns".into())]) }],
        );
        let text = serde_json::to_string(&out).unwrap();
        assert!(text.contains(r#""right":"udp""#));
        assert!(text.contains(&format!("\"@{}\"", port_set("dns"))));
        assert!(text.contains(r#"{"concat":[{"payload":{"protocol":"ip","field":"daddr"}}"#));
    }
}
