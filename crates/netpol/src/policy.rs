//! NetworkPolicies and pods reduced to what enforcement needs (pure functions, no kernel).
//!
//! Semantics followed (the `networking.k8s.io/v1` API reference and the "Network Policies"
//! concept page; kube-network-policies where the API is silent):
//! - `policyTypes` defaults as kube-apiserver's `SetDefaults_NetworkPolicy` does: `Ingress`
//!   always, plus `Egress` when the policy has egress rules; a port's protocol defaults to TCP.
//! - A pod is isolated in a direction when a policy of its namespace selects it with that type;
//!   it then accepts only what one of those policies' rules allows (rules are ORed).
//! - A rule's peers are ORed; a missing or empty `from`/`to` means every peer, a missing or
//!   empty `ports` every port of every protocol. A peer is a pod selection — `podSelector`
//!   alone (the policy's namespace), `namespaceSelector` alone (every pod of the matching
//!   namespaces), or both (the selected pods of the matching namespaces) — or an `ipBlock` with
//!   its `except` holes. ipBlocks match any address, pods' included (as kube-network-policies).
//! - A numbered port may carry `endPort` (a range); a named port is resolved on the
//!   destination pod's containers (ingress: the selected pod; egress: the peer pod).
//! - hostNetwork pods and pods without an IPv4 address are neither selected nor peers.
//!
//! What validation would reject (a bad CIDR, a port out of range, an unknown protocol or
//! selector operator) never widens a rule: the offending peer or port matches nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as MetaSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use skiff_apimachinery::selector::LabelSelector;
use skiff_proxy::Cidr;

/// A transport protocol a NetworkPolicy port names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP (the default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// `TCP`/`UDP`/`SCTP` (`None`: TCP, the API default); anything else is `None`.
    pub fn parse(s: Option<&str>) -> Option<Protocol> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The name nftables gives it (`meta l4proto tcp`).
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// Which namespaces a pod selection looks in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceScope {
    /// One namespace (a `podSelector` alone: the policy's own).
    Only(String),
    /// Every namespace whose labels match.
    Matching(LabelSelector),
}

/// A set of pods: those matching `pods` in the namespaces of `namespaces`, optionally only
/// those on this node (the pods a policy applies to). One nftables set per distinct selection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Namespaces looked in.
    pub namespaces: NamespaceScope,
    /// Pod label selector.
    pub pods: LabelSelector,
    /// Only pods bound to this node.
    pub local: bool,
}

impl Selection {
    /// Whether `pod`, in a namespace labelled `ns_labels`, is in the selection.
    pub fn matches(&self, pod: &PodInfo, ns_labels: Option<&BTreeMap<String, String>>) -> bool {
        if pod.ip.is_none() || (self.local && !pod.local) {
            return false;
        }
        let in_scope = match &self.namespaces {
            NamespaceScope::Only(ns) => *ns == pod.namespace,
            NamespaceScope::Matching(sel) => match ns_labels {
                Some(labels) => sel.matches(labels),
                // A namespace not seen yet: only its automatic name label is known.
                None => sel.matches(&default_namespace_labels(&pod.namespace)),
            },
        };
        in_scope && self.pods.matches(&pod.labels)
    }

    /// Whether the selection looks at namespace labels (a namespace relabel may change it).
    pub fn uses_namespace_labels(&self) -> bool {
        matches!(self.namespaces, NamespaceScope::Matching(_))
    }
}

fn selector_text(sel: &LabelSelector) -> String {
    if sel.is_nothing() { "<nothing>".to_string() } else { sel.to_string() }
}

impl fmt::Display for Selection {
    /// The canonical text the set's name is derived from: equal selections share a set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespaces {
            NamespaceScope::Only(ns) => write!(f, "namespace={ns}")?,
            NamespaceScope::Matching(sel) => write!(f, "namespaces={}", selector_text(sel))?,
        }
        write!(f, ";pods={}", selector_text(&self.pods))?;
        if self.local {
            write!(f, ";local")?;
        }
        Ok(())
    }
}

/// The labels every namespace carries (`kubernetes.io/metadata.name`, set by the API server).
pub fn default_namespace_labels(name: &str) -> BTreeMap<String, String> {
    [("kubernetes.io/metadata.name".to_string(), name.to_string())].into()
}

/// One peer of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// Pods.
    Pods(Selection),
    /// `ipBlock`: addresses in `cidr` but in none of `except`.
    Block {
        /// The block.
        cidr: Cidr,
        /// Holes in it.
        except: Vec<Cidr>,
    },
}

/// One port of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortMatch {
    /// Every port of a protocol (`protocol` without `port`).
    Any(Protocol),
    /// `port` (to `endPort`, inclusive) of a protocol.
    Range(Protocol, u16, u16),
    /// A container port name, resolved on the destination pod.
    Named(Protocol, String),
}

/// One ingress or egress rule: traffic with a peer of `peers` to a port of `ports`. `None`
/// is "every peer"/"every port"; `Some(vec![])` (everything in it invalid) matches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Peers (`from` of ingress rules, `to` of egress rules).
    pub peers: Option<Vec<Peer>>,
    /// Destination ports.
    pub ports: Option<Vec<PortMatch>>,
}

/// A NetworkPolicy as enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledPolicy {
    /// `namespace/name`.
    pub key: String,
    /// The policy's namespace.
    pub namespace: String,
    /// The local pods it applies to.
    pub targets: Selection,
    /// Ingress rules when `policyTypes` (defaulted) includes Ingress.
    pub ingress: Option<Vec<Rule>>,
    /// Egress rules when `policyTypes` (defaulted) includes Egress.
    pub egress: Option<Vec<Rule>>,
}

/// A direction of traffic relative to the selected pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Towards the pod.
    Ingress,
    /// From the pod.
    Egress,
}

impl CompiledPolicy {
    /// The rules of `dir`, if the policy isolates in that direction.
    pub fn rules(&self, dir: Direction) -> Option<&[Rule]> {
        match dir {
            Direction::Ingress => self.ingress.as_deref(),
            Direction::Egress => self.egress.as_deref(),
        }
    }

    /// Every pod selection the policy uses: its targets and its peers.
    pub fn selections(&self) -> impl Iterator<Item = &Selection> {
        let peers = self.ingress.iter().chain(self.egress.iter()).flatten().flat_map(|r| r.peers.iter().flatten());
        std::iter::once(&self.targets).chain(peers.filter_map(|p| match p {
            Peer::Pods(s) => Some(s),
            Peer::Block { .. } => None,
        }))
    }

    /// Every container port name the policy uses.
    pub fn port_names(&self) -> impl Iterator<Item = &str> {
        self.ingress.iter().chain(self.egress.iter()).flatten().flat_map(|r| r.ports.iter().flatten()).filter_map(|p| {
            match p {
                PortMatch::Named(_, n) => Some(n.as_str()),
                _ => None,
            }
        })
    }
}

/// The `policyTypes` of a policy after defaulting: (ingress, egress).
pub fn policy_types(policy: &NetworkPolicy) -> (bool, bool) {
    let spec = policy.spec.as_ref();
    match spec.and_then(|s| s.policy_types.as_ref()).filter(|t| !t.is_empty()) {
        Some(types) => (types.iter().any(|t| t == "Ingress"), types.iter().any(|t| t == "Egress")),
        None => (true, spec.and_then(|s| s.egress.as_ref()).is_some_and(|e| !e.is_empty())),
    }
}

fn selector(sel: Option<&MetaSelector>) -> LabelSelector {
    // A selector validation would refuse selects nothing rather than everything.
    sel.map_or_else(LabelSelector::everything, |s| {
        LabelSelector::from_metav1(s).unwrap_or_else(|_| LabelSelector::nothing())
    })
}

fn peer(namespace: &str, p: &NetworkPolicyPeer) -> Option<Peer> {
    if let Some(block) = &p.ip_block {
        let cidr = Cidr::parse(&block.cidr)?;
        let except = block.except.iter().flatten().filter_map(|e| Cidr::parse(e)).collect();
        return Some(Peer::Block { cidr, except });
    }
    let namespaces = match &p.namespace_selector {
        Some(ns) => NamespaceScope::Matching(selector(Some(ns))),
        None if p.pod_selector.is_some() => NamespaceScope::Only(namespace.to_string()),
        None => return None,
    };
    Some(Peer::Pods(Selection { namespaces, pods: selector(p.pod_selector.as_ref()), local: false }))
}

fn port(p: &NetworkPolicyPort) -> Option<PortMatch> {
    let proto = Protocol::parse(p.protocol.as_deref())?;
    match &p.port {
        None => Some(PortMatch::Any(proto)),
        Some(IntOrString::String(name)) if p.end_port.is_none() => Some(PortMatch::Named(proto, name.clone())),
        Some(IntOrString::String(_)) => None,
        Some(IntOrString::Int(n)) => {
            let start = u16::try_from(*n).ok().filter(|n| *n > 0)?;
            let end = match p.end_port {
                None => start,
                Some(e) => u16::try_from(e).ok().filter(|e| *e >= start)?,
            };
            Some(PortMatch::Range(proto, start, end))
        }
    }
}

fn rule(namespace: &str, peers: Option<&Vec<NetworkPolicyPeer>>, ports: Option<&Vec<NetworkPolicyPort>>) -> Rule {
    Rule {
        peers: peers.filter(|p| !p.is_empty()).map(|p| p.iter().filter_map(|x| peer(namespace, x)).collect()),
        ports: ports.filter(|p| !p.is_empty()).map(|p| p.iter().filter_map(port).collect()),
    }
}

/// Compiles a NetworkPolicy (defaulting `policyTypes` and protocols).
pub fn compile(policy: &NetworkPolicy) -> CompiledPolicy {
    let namespace = policy.metadata.namespace.clone().unwrap_or_default();
    let name = policy.metadata.name.as_deref().unwrap_or_default();
    let spec = policy.spec.clone().unwrap_or_default();
    let (ingress, egress) = policy_types(policy);
    let targets = Selection {
        namespaces: NamespaceScope::Only(namespace.clone()),
        pods: selector(spec.pod_selector.as_ref()),
        local: true,
    };
    CompiledPolicy {
        key: format!("{namespace}/{name}"),
        targets,
        ingress: ingress.then(|| {
            spec.ingress.iter().flatten().map(|r| rule(&namespace, r.from.as_ref(), r.ports.as_ref())).collect()
        }),
        egress: egress
            .then(|| spec.egress.iter().flatten().map(|r| rule(&namespace, r.to.as_ref(), r.ports.as_ref())).collect()),
        namespace,
    }
}

/// A pod as enforcement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// Namespace.
    pub namespace: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Its IPv4 address while it has one of its own (not hostNetwork, not terminated).
    pub ip: Option<Ipv4Addr>,
    /// Whether it is bound to this node.
    pub local: bool,
    /// Named container ports: name → (protocol, port).
    pub named_ports: BTreeMap<String, (Protocol, u16)>,
}

impl PodInfo {
    /// Reduces a pod; `is_local` says whether a node name is this node's.
    pub fn from_pod(pod: &Pod, is_local: impl Fn(&str) -> bool) -> PodInfo {
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
        let terminated = status.and_then(|s| s.phase.as_deref()).is_some_and(|p| p == "Succeeded" || p == "Failed");
        let ip = if host_network || terminated {
            None
        } else {
            let listed = status.and_then(|s| s.pod_ips.as_ref()).into_iter().flatten().map(|p| p.ip.as_str());
            status.and_then(|s| s.pod_ip.as_deref()).into_iter().chain(listed).find_map(|s| s.parse::<Ipv4Addr>().ok())
        };
        let mut named_ports = BTreeMap::new();
        let containers = spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
        for port in containers.flat_map(|c| c.ports.iter().flatten()) {
            if let (Some(name), Some(proto), Ok(n)) =
                (&port.name, Protocol::parse(port.protocol.as_deref()), u16::try_from(port.container_port))
            {
                named_ports.entry(name.clone()).or_insert((proto, n));
            }
        }
        PodInfo {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            ip,
            local: spec.and_then(|s| s.node_name.as_deref()).is_some_and(is_local),
            named_ports,
        }
    }
}

/// A namespace's labels (with the automatic name label even if the object lacks it).
pub fn namespace_labels(ns: &Namespace) -> BTreeMap<String, String> {
    let mut labels = default_namespace_labels(ns.metadata.name.as_deref().unwrap_or_default());
    labels.extend(ns.metadata.labels.clone().unwrap_or_default());
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(spec: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"namespace": "prod", "name": "p"}, "spec": spec})).unwrap()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap()
    }

    #[test]
    fn policy_types_default_to_ingress_and_to_egress_only_with_egress_rules() {
        assert_eq!(policy_types(&policy(json!({"podSelector": {}}))), (true, false));
        assert_eq!(policy_types(&policy(json!({"podSelector": {}, "egress": []}))), (true, false));
        assert_eq!(policy_types(&policy(json!({"podSelector": {}, "egress": [{}]}))), (true, true));
        assert_eq!(policy_types(&policy(json!({"podSelector": {}, "policyTypes": ["Egress"]}))), (false, true));
        let c = compile(&policy(json!({"podSelector": {}, "policyTypes": ["Egress"]})));
        assert_eq!(c.ingress, None);
        assert_eq!(c.egress, Some(vec![]), "egress isolation without rules denies all egress");
    }

    #[test]
    fn a_default_deny_policy_selects_every_local_pod_of_its_namespace_and_allows_nothing() {
        let c = compile(&policy(json!({"podSelector": {}})));
        assert_eq!(c.key, "prod/p");
        assert_eq!(
            c.targets,
            Selection {
                namespaces: NamespaceScope::Only("prod".into()),
                pods: LabelSelector::everything(),
                local: true
            }
        );
        assert_eq!(c.ingress, Some(vec![]));
        assert_eq!(c.egress, None);
    }

    #[test]
    fn an_empty_rule_allows_every_peer_on_every_port() {
        let c = compile(&policy(json!({"podSelector": {}, "ingress": [{}], "egress": [{"to": [], "ports": []}]})));
        let all = Rule { peers: None, ports: None };
        assert_eq!(c.ingress, Some(vec![all.clone()]));
        assert_eq!(c.egress, Some(vec![all]));
    }

    #[test]
    fn pod_and_namespace_selectors_alone_and_combined_select_the_documented_pods() {
        let c = compile(&policy(json!({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": [
            {"podSelector": {"matchLabels": {"role": "api"}}},
            {"namespaceSelector": {"matchLabels": {"team": "a"}}},
            {"namespaceSelector": {"matchLabels": {"team": "b"}}, "podSelector": {"matchLabels": {"role": "x"}}},
        ]}]})));
        let peers = c.ingress.unwrap()[0].peers.clone().unwrap();
        assert_eq!(
            peers,
            vec![
                Peer::Pods(Selection {
                    namespaces: NamespaceScope::Only("prod".into()),
                    pods: sel("role=api"),
                    local: false
                }),
                Peer::Pods(Selection {
                    namespaces: NamespaceScope::Matching(sel("team=a")),
                    pods: LabelSelector::everything(),
                    local: false
                }),
                Peer::Pods(Selection {
                    namespaces: NamespaceScope::Matching(sel("team=b")),
                    pods: sel("role=x"),
                    local: false
                }),
            ]
        );
        assert_eq!(c.targets.pods, sel("app=db"));
    }

    #[test]
    fn ports_default_to_tcp_and_carry_end_ports_names_and_protocol_only_matches() {
        let c = compile(&policy(json!({"podSelector": {}, "ingress": [{"ports": [
            {"port": 80},
            {"protocol": "UDP", "port": 5000, "endPort": 5010},
            {"port": "http"},
            {"protocol": "SCTP"},
        ]}]})));
        assert_eq!(
            c.ingress.unwrap()[0].ports,
            Some(vec![
                PortMatch::Range(Protocol::Tcp, 80, 80),
                PortMatch::Range(Protocol::Udp, 5000, 5010),
                PortMatch::Named(Protocol::Tcp, "http".into()),
                PortMatch::Any(Protocol::Sctp),
            ])
        );
    }

    #[test]
    fn invalid_ports_and_peers_match_nothing_instead_of_everything() {
        let c = compile(&policy(json!({"podSelector": {}, "ingress": [
            {"ports": [{"port": 70000}, {"port": 90, "endPort": 80}, {"protocol": "ICMP"}, {"port": "x", "endPort": 9}]},
            {"from": [{"ipBlock": {"cidr": "not-a-cidr"}}, {}]},
        ]})));
        let rules = c.ingress.unwrap();
        assert_eq!(rules[0].ports, Some(vec![]));
        assert_eq!(rules[1].peers, Some(vec![]));
    }

    #[test]
    fn ip_blocks_keep_their_exceptions() {
        let c = compile(&policy(json!({"podSelector": {}, "egress": [{"to": [
            {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "10.2.3.4/32"]}}
        ]}]})));
        assert_eq!(
            c.egress.unwrap()[0].peers,
            Some(vec![Peer::Block {
                cidr: Cidr::parse("10.0.0.0/8").unwrap(),
                except: vec![Cidr::parse("10.1.0.0/16").unwrap(), Cidr::parse("10.2.3.4/32").unwrap()]
            }])
        );
    }

    #[test]
    fn a_selector_with_an_unknown_operator_selects_nothing() {
        let c = compile(&policy(json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}})));
        assert!(c.targets.pods.is_nothing());
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_pod_is_reduced_to_its_ipv4_address_locality_and_named_ports() {
        let p = pod(json!({
            "metadata": {"namespace": "prod", "name": "a", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080}, {"name": "dns", "containerPort": 53, "protocol": "UDP"}
            ]}]},
            "status": {"podIP": "10.42.0.5", "podIPs": [{"ip": "10.42.0.5"}]}
        }));
        let info = PodInfo::from_pod(&p, |n| n == "n1");
        assert_eq!(info.ip, Some(Ipv4Addr::new(10, 42, 0, 5)));
        assert!(info.local);
        assert_eq!(info.named_ports["http"], (Protocol::Tcp, 8080));
        assert_eq!(info.named_ports["dns"], (Protocol::Udp, 53));
        assert!(!PodInfo::from_pod(&p, |n| n == "n2").local);
    }

    #[test]
    fn host_network_and_terminated_pods_have_no_address_of_their_own() {
        let hostnet = pod(json!({"metadata": {"name": "h"}, "spec": {"hostNetwork": true, "containers": []},
            "status": {"podIP": "192.168.1.1"}}));
        assert_eq!(PodInfo::from_pod(&hostnet, |_| true).ip, None);
        let done = pod(json!({"metadata": {"name": "d"}, "spec": {"containers": []},
            "status": {"podIP": "10.42.0.9", "phase": "Succeeded"}}));
        assert_eq!(PodInfo::from_pod(&done, |_| true).ip, None);
        let v6 = pod(json!({"metadata": {"name": "s"}, "spec": {"containers": []},
            "status": {"podIP": "fd00::5", "podIPs": [{"ip": "fd00::5"}, {"ip": "10.42.0.7"}]}}));
        assert_eq!(PodInfo::from_pod(&v6, |_| true).ip, Some(Ipv4Addr::new(10, 42, 0, 7)));
    }

    #[test]
    fn a_namespace_selector_matches_on_namespace_labels_and_the_automatic_name_label() {
        let p = PodInfo {
            namespace: "dev".into(),
            labels: [("app".to_string(), "web".to_string())].into(),
            ip: Some(Ipv4Addr::new(10, 42, 0, 5)),
            local: false,
            named_ports: BTreeMap::new(),
        };
        let s = Selection {
            namespaces: NamespaceScope::Matching(sel("kubernetes.io/metadata.name=dev")),
            pods: sel("app=web"),
            local: false,
        };
        assert!(s.matches(&p, None));
        let team = Selection { namespaces: NamespaceScope::Matching(sel("team=a")), ..s.clone() };
        assert!(!team.matches(&p, Some(&default_namespace_labels("dev"))));
        let mut labels = default_namespace_labels("dev");
        labels.insert("team".into(), "a".into());
        assert!(team.matches(&p, Some(&labels)));
        assert!(!Selection { local: true, ..s }.matches(&p, None), "a remote pod is not a target");
    }
}
