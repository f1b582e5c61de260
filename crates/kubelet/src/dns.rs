//! Pods' DNS settings, as the kubelet forms them (`pkg/kubelet/network/dns`, `GetPodDNS`): the
//! CRI `DNSConfig` of a pod sandbox, from which the runtime writes the pod's `/etc/resolv.conf`.
//!
//! By `dnsPolicy` ("DNS for Services and Pods", Pod's DNS Policy):
//! - `ClusterFirst` (the default): the cluster DNS (`--cluster-dns`) as the only nameserver,
//!   search `<ns>.svc.<domain> svc.<domain> <domain>` then the host's search domains,
//!   `options ndots:5`. A `hostNetwork` pod falls back to `Default`, and so does every pod when
//!   the node has no cluster DNS (with a `MissingClusterDNS` warning).
//! - `ClusterFirstWithHostNet`: `ClusterFirst`, for `hostNetwork` pods too.
//! - `Default`: the host's resolv.conf (`--resolv-conf`) as it is; with `--resolv-conf ""`, the
//!   node's loopback address and search `.`.
//! - `None`: nothing but the pod's `dnsConfig`.
//!
//! A pod's `dnsConfig` is then appended (nameservers and searches without duplicates, options
//! by name, the pod's winning), and the result cut to the resolver's limits: 3 nameservers, 32
//! search domains of at most 253 characters and 2048 characters in all (`ExpandedDNSConfig`,
//! GA since 1.28), with a `DNSConfigForming` warning when something was cut.

use std::net::IpAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, PodDNSConfigOption};

use crate::cri::api;

/// At most this many nameservers (`validation.MaxDNSNameservers`, glibc's `MAXNS`).
pub const MAX_NAMESERVERS: usize = 3;
/// At most this many search domains (`validation.MaxDNSSearchPathsExpanded`).
pub const MAX_SEARCH_PATHS: usize = 32;
/// At most this many characters in the search line (`validation.MaxDNSSearchListCharsExpanded`).
pub const MAX_SEARCH_LIST_CHARS: usize = 2048;
/// Longer search domains are dropped: some resolvers (glibc 2.28) abort on them
/// (`DNS1123SubdomainMaxLength`).
pub const MAX_SEARCH_PATH_CHARS: usize = 253;

/// The parsed lines of a resolv.conf that pods inherit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvConf {
    /// `nameserver` entries, in order.
    pub servers: Vec<String>,
    /// The last `search` line's domains, without trailing dots.
    pub searches: Vec<String>,
    /// The last `options` line's options.
    pub options: Vec<String>,
}

/// Parses resolv.conf text as the kubelet does (`parseResolvConf`): `nameserver` lines
/// accumulate, the last `search` and the last `options` line win, lines starting with `#` are
/// comments; other lines (`domain`, `sortlist`) are ignored.
///
/// # Errors
/// A `nameserver` line without an address (the kubelet then fails the pod's sandbox).
pub fn parse_resolv_conf(text: &str) -> Result<ResolvConf, String> {
    let mut rc = ResolvConf::default();
    let mut empty_nameserver = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["nameserver", server, ..] => rc.servers.push(server.to_string()),
            ["nameserver"] => empty_nameserver = true,
            ["search", domains @ ..] => {
                // The same domain with and without its trailing dot counts once.
                rc.searches = domains.iter().map(|d| d.trim_end_matches('.').to_string()).collect();
            }
            ["options", options @ ..] => rc.options = options.iter().map(|o| o.to_string()).collect(),
            _ => {}
        }
    }
    if empty_nameserver {
        return Err("nameserver list is empty".into());
    }
    Ok(rc)
}

/// The host's resolver that pods fall back to (the kubelet's `--resolv-conf`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostDns {
    /// The parsed file.
    File(ResolvConf),
    /// `--resolv-conf ""`: no host resolver; pods that would use it get the node's loopback
    /// address ("the nameserver on the local machine") and search `.`.
    Disabled,
    /// The file could not be read or parsed: pods that need it fail to start, with this message.
    Invalid(String),
}

impl HostDns {
    /// Reads `path` (an empty path is [`HostDns::Disabled`]).
    pub fn read(path: &Path) -> Self {
        if path.as_os_str().is_empty() {
            return Self::Disabled;
        }
        match std::fs::read_to_string(path) {
            Ok(text) => match parse_resolv_conf(&text) {
                Ok(rc) => Self::File(rc),
                Err(e) => Self::Invalid(format!("{}: {e}", path.display())),
            },
            Err(e) => Self::Invalid(format!("open {}: {e}", path.display())),
        }
    }
}

/// systemd-resolved's list of the host's upstream resolvers.
pub const SYSTEMD_RESOLVED_UPSTREAMS: &str = "/run/systemd/resolve/resolv.conf";

/// Whether `text` names a nameserver a pod's network namespace can reach: not a loopback
/// address such as systemd-resolved's stub 127.0.0.53, nor multicast, link-local or unspecified.
fn has_reachable_nameserver(text: &str) -> bool {
    parse_resolv_conf(text).is_ok_and(|rc| {
        rc.servers.iter().filter_map(|s| s.parse::<IpAddr>().ok()).any(|ip| match ip {
            IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_multicast() || v4.is_link_local() || v4.is_unspecified()),
            IpAddr::V6(v6) => {
                !(v6.is_loopback() || v6.is_multicast() || v6.is_unicast_link_local() || v6.is_unspecified())
            }
        })
    })
}

/// The host resolv.conf pods inherit when `--resolv-conf` is not given, chosen as k3s chooses
/// it: `/etc/resolv.conf`, unless it names no nameserver a pod can reach (a host running
/// systemd-resolved names only its local stub there) and [`SYSTEMD_RESOLVED_UPSTREAMS`] does.
pub fn default_resolv_conf() -> std::path::PathBuf {
    choose_resolv_conf(Path::new("/etc/resolv.conf"), Path::new(SYSTEMD_RESOLVED_UPSTREAMS))
}

fn choose_resolv_conf(etc: &Path, resolved: &Path) -> std::path::PathBuf {
    let reachable = |p: &Path| std::fs::read_to_string(p).is_ok_and(|t| has_reachable_nameserver(&t));
    if !reachable(etc) && reachable(resolved) { resolved.to_path_buf() } else { etc.to_path_buf() }
}

/// The node's DNS settings (`dns.Configurer`).
#[derive(Debug, Clone)]
pub struct Configurer<'a> {
    /// `--cluster-dns` (empty: none).
    pub cluster_dns: &'a [String],
    /// `--cluster-domain` (empty: no cluster search domains).
    pub cluster_domain: &'a str,
    /// `--resolv-conf`.
    pub host: &'a HostDns,
    /// The node's addresses (for [`HostDns::Disabled`]).
    pub node_ips: &'a [IpAddr],
}

/// A pod's DNS configuration and the warnings to record as events on the pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodDns {
    /// What the runtime writes to the pod's `/etc/resolv.conf`.
    pub config: api::DnsConfig,
    /// `(reason, message)` of each Warning event (`MissingClusterDNS`, `DNSConfigForming`).
    pub warnings: Vec<(&'static str, String)>,
}

/// How a pod's resolver is set up (`podDNSType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodDnsType {
    /// The cluster DNS.
    Cluster,
    /// The host's resolver.
    Host,
    /// Only the pod's `dnsConfig`.
    None,
}

/// The pod's [`PodDnsType`] by its `dnsPolicy` (`getPodDNSType`): an unknown policy (the API
/// server rejects them) is treated as `ClusterFirst`, with the error to log.
pub fn pod_dns_type(pod: &Pod) -> Result<PodDnsType, String> {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    match spec.and_then(|s| s.dns_policy.as_deref()).unwrap_or("ClusterFirst") {
        "None" => Ok(PodDnsType::None),
        "ClusterFirstWithHostNet" => Ok(PodDnsType::Cluster),
        "ClusterFirst" if !host_network => Ok(PodDnsType::Cluster),
        "ClusterFirst" | "Default" => Ok(PodDnsType::Host),
        other => Err(format!("invalid DNSPolicy={other}")),
    }
}

/// Removes later duplicates, keeping the first occurrence's place (`omitDuplicates`).
fn omit_duplicates(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

/// Merges the pod's options into `existing` by name, the pod's values winning
/// (`mergeDNSOptions`); an option whose value is empty is written without `:`. The kubelet's
/// order is a Go map's (random); here the existing options keep their place and new ones follow
/// in the pod's order.
pub fn merge_options(existing: &[String], pod: &[PodDNSConfigOption]) -> Vec<String> {
    let mut merged: Vec<(String, String)> = Vec::new();
    let mut set = |name: &str, value: &str| match merged.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = value.to_string(),
        None => merged.push((name.to_string(), value.to_string())),
    };
    for option in existing {
        match option.split_once(':') {
            Some((name, value)) => set(name, value),
            None => set(option, ""),
        }
    }
    for option in pod {
        set(option.name.as_deref().unwrap_or_default(), option.value.as_deref().unwrap_or_default());
    }
    merged.into_iter().map(|(name, value)| if value.is_empty() { name } else { format!("{name}:{value}") }).collect()
}

/// Cuts `searches` to the resolver's limits (`formDNSSearchFitsLimits`): the first 32, without
/// domains longer than 253 characters, then the last ones dropped until the line fits 2048
/// characters. Returns the warning message when something was cut.
pub fn fit_searches(mut searches: Vec<String>) -> (Vec<String>, Option<String>) {
    let mut exceeded = searches.len() > MAX_SEARCH_PATHS;
    searches.truncate(MAX_SEARCH_PATHS);
    let before = searches.len();
    searches.retain(|s| s.len() <= MAX_SEARCH_PATH_CHARS);
    exceeded |= searches.len() != before;
    let line_len = |s: &[String]| s.iter().map(String::len).sum::<usize>() + s.len().saturating_sub(1);
    if line_len(&searches) > MAX_SEARCH_LIST_CHARS {
        exceeded = true;
        while line_len(&searches) > MAX_SEARCH_LIST_CHARS {
            searches.pop();
        }
    }
    let warning = exceeded.then(|| {
        format!(
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            searches.join(" ")
        )
    });
    (searches, warning)
}

/// Cuts `servers` to the first three (`formDNSNameserversFitsLimits`), with the warning message
/// when some were dropped.
pub fn fit_nameservers(mut servers: Vec<String>) -> (Vec<String>, Option<String>) {
    if servers.len() <= MAX_NAMESERVERS {
        return (servers, None);
    }
    servers.truncate(MAX_NAMESERVERS);
    let warning = format!(
        "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
        servers.join(" ")
    );
    (servers, Some(warning))
}

fn pod_desc(pod: &Pod) -> String {
    let m = &pod.metadata;
    format!(
        "{}_{}({})",
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default()
    )
}

impl Configurer<'_> {
    /// The cluster search domains followed by the host's, without duplicates
    /// (`generateSearchesForDNSClusterFirst`).
    fn cluster_searches(&self, host: Vec<String>, pod: &Pod) -> Vec<String> {
        if self.cluster_domain.is_empty() {
            return host;
        }
        let d = self.cluster_domain;
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut searches = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.to_string()];
        searches.extend(host);
        omit_duplicates(searches)
    }

    /// The pod's DNS configuration (`GetPodDNS`).
    ///
    /// # Errors
    /// The host's resolv.conf could not be read or parsed ([`HostDns::Invalid`]): the kubelet
    /// fails the pod's sandbox then, whatever its policy.
    pub fn pod_dns(&self, pod: &Pod) -> Result<PodDns, String> {
        let host = match self.host {
            HostDns::File(rc) => rc.clone(),
            HostDns::Disabled => ResolvConf::default(),
            HostDns::Invalid(e) => return Err(e.clone()),
        };
        let mut warnings = Vec::new();
        let mut config = api::DnsConfig { servers: host.servers, searches: host.searches, options: host.options };
        let dns_type = pod_dns_type(pod).unwrap_or_else(|e| {
            tracing::error!(pod = %pod_desc(pod), error = %e, "falling back to the ClusterFirst DNS policy");
            PodDnsType::Cluster
        });
        let mut use_host = dns_type == PodDnsType::Host;
        match dns_type {
            PodDnsType::None => config = api::DnsConfig::default(),
            PodDnsType::Cluster if !self.cluster_dns.is_empty() => {
                // The cluster DNS is the only nameserver: it forwards what it does not answer
                // to the resolvers it is configured with.
                config.servers = self.cluster_dns.to_vec();
                config.searches = self.cluster_searches(std::mem::take(&mut config.searches), pod);
                config.options = vec!["ndots:5".to_string()];
            }
            PodDnsType::Cluster => {
                warnings.push((
                    "MissingClusterDNS",
                    format!(
                        "pod: {:?}. kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                        pod_desc(pod)
                    ),
                ));
                use_host = true;
            }
            PodDnsType::Host => {}
        }
        if use_host && *self.host == HostDns::Disabled {
            let loopback = |ip: &IpAddr| if ip.is_ipv6() { "::1" } else { "127.0.0.1" };
            config.servers = self.node_ips.iter().map(|ip| loopback(ip).to_string()).collect();
            if config.servers.is_empty() {
                config.servers.push("127.0.0.1".to_string());
            }
            config.searches = vec![".".to_string()];
        }
        if let Some(extra) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
            config.servers.extend(extra.nameservers.iter().flatten().cloned());
            config.servers = omit_duplicates(std::mem::take(&mut config.servers));
            config.searches.extend(extra.searches.iter().flatten().cloned());
            config.searches = omit_duplicates(std::mem::take(&mut config.searches));
            config.options = merge_options(&config.options, extra.options.as_deref().unwrap_or_default());
        }
        let (servers, warning) = fit_nameservers(std::mem::take(&mut config.servers));
        config.servers = servers;
        warnings.extend(warning.map(|w| ("DNSConfigForming", w)));
        let (searches, warning) = fit_searches(std::mem::take(&mut config.searches));
        config.searches = searches;
        warnings.extend(warning.map(|w| ("DNSConfigForming", w)));
        Ok(PodDns { config, warnings })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodDNSConfig, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// A table column of resolv.conf lines' values.
    type Lines = &'static [&'static str];
    /// A pod's expected nameservers, searches and options.
    type Want = (Lines, Lines, Lines);

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn pod(namespace: &str, policy: Option<&str>, host_network: bool, dns_config: Option<PodDNSConfig>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("test_pod".into()),
                namespace: Some(namespace.into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                dns_policy: policy.map(str::to_string),
                host_network: Some(host_network),
                dns_config,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn option(name: &str, value: Option<&str>) -> PodDNSConfigOption {
        PodDNSConfigOption { name: Some(name.into()), value: value.map(str::to_string) }
    }

    #[test]
    fn resolv_conf_is_parsed_as_the_kubelet_parses_it() {
        // (text, nameservers, searches, options, is an error): dns_test.go's TestParseResolvConf.
        let cases: &[(&str, Lines, Lines, Lines, bool)] = &[
            ("", &[], &[], &[], false),
            (" ", &[], &[], &[], false),
            ("\n", &[], &[], &[], false),
            ("\t\n\t", &[], &[], &[], false),
            ("#comment\n", &[], &[], &[], false),
            (" #comment\n", &[], &[], &[], false),
            ("#comment\n#comment", &[], &[], &[], false),
            ("#comment\nnameserver", &[], &[], &[], true),
            ("#comment\nnameserver\nsearch", &[], &[], &[], true),
            ("#comment\nnameserver 1.2.3.4\nsearch", &["1.2.3.4"], &[], &[], false),
            ("nameserver 1.2.3.4", &["1.2.3.4"], &[], &[], false),
            (" nameserver 1.2.3.4", &["1.2.3.4"], &[], &[], false),
            ("\tnameserver 1.2.3.4", &["1.2.3.4"], &[], &[], false),
            ("nameserver\t1.2.3.4", &["1.2.3.4"], &[], &[], false),
            ("nameserver \t 1.2.3.4", &["1.2.3.4"], &[], &[], false),
            ("nameserver 1.2.3.4\nnameserver 5.6.7.8", &["1.2.3.4", "5.6.7.8"], &[], &[], false),
            ("nameserver 1.2.3.4 #comment", &["1.2.3.4"], &[], &[], false),
            ("search ", &[], &[], &[], false),
            ("search foo", &[], &["foo"], &[], false),
            ("search foo bar", &[], &["foo", "bar"], &[], false),
            ("search foo. bar", &[], &["foo", "bar"], &[], false),
            ("search foo bar bat\n", &[], &["foo", "bar", "bat"], &[], false),
            ("search foo\nsearch bar", &[], &["bar"], &[], false),
            ("nameserver 1.2.3.4\nsearch foo bar", &["1.2.3.4"], &["foo", "bar"], &[], false),
            (
                "nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar",
                &["1.2.3.4", "5.6.7.8"],
                &["bar"],
                &[],
                false,
            ),
            ("#comment\nnameserver 1.2.3.4\n#comment\nsearch foo\ncomment", &["1.2.3.4"], &["foo"], &[], false),
            ("options ", &[], &[], &[], false),
            ("options ndots:5 attempts:2", &[], &[], &["ndots:5", "attempts:2"], false),
            ("options ndots:1\noptions ndots:5 attempts:3", &[], &[], &["ndots:5", "attempts:3"], false),
            (
                "nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar\noptions ndots:5 attempts:4",
                &["1.2.3.4", "5.6.7.8"],
                &["bar"],
                &["ndots:5", "attempts:4"],
                false,
            ),
        ];
        for (text, servers, searches, options, is_err) in cases {
            let got = parse_resolv_conf(text);
            if *is_err {
                assert!(got.is_err(), "{text:?} should not parse: {got:?}");
                continue;
            }
            let want = ResolvConf { servers: strings(servers), searches: strings(searches), options: strings(options) };
            assert_eq!(got.as_ref(), Ok(&want), "{text:?}");
        }
    }

    #[test]
    fn search_lines_are_cut_to_the_resolvers_limits() {
        let a128 = "A".repeat(128);
        let a127 = "A".repeat(127);
        let list_2048: Vec<String> = std::iter::once(a128).chain(std::iter::repeat_n(a127, 15)).collect();
        let numbered = |n: usize| -> Vec<String> {
            strings(&["testNS.svc.TEST", "svc.TEST", "TEST"])
                .into_iter()
                .chain((4..=n).map(|i| i.to_string()))
                .collect()
        };
        let long = "B".repeat(256);
        // (search domains, what is kept, whether a warning is due): TestFormDNSSearchFitsLimits.
        let cases: Vec<(Vec<String>, Vec<String>, bool)> = vec![
            (
                strings(&["testNS.svc.TEST", "svc.TEST", "TEST"]),
                strings(&["testNS.svc.TEST", "svc.TEST", "TEST"]),
                false,
            ),
            (
                strings(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"]),
                strings(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"]),
                false,
            ),
            (
                strings(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", &long, "BBB"]),
                strings(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"]),
                true,
            ),
            (list_2048.clone(), list_2048.clone(), false),
            (list_2048.iter().cloned().chain(["B".to_string()]).collect(), list_2048.clone(), true),
            (numbered(32), numbered(32), false),
            (numbered(33), numbered(32), true),
        ];
        for (input, want, warned) in cases {
            let (got, warning) = fit_searches(input.clone());
            assert_eq!(got, want, "{input:?}");
            assert_eq!(warning.is_some(), warned, "{input:?}");
            if let Some(w) = warning {
                assert_eq!(
                    w,
                    format!(
                        "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                        want.join(" ")
                    )
                );
            }
        }
    }

    #[test]
    fn nameservers_are_cut_to_three() {
        // TestFormDNSNameserversFitsLimits.
        let cases: &[(&[&str], &[&str], bool)] = &[
            (&["127.0.0.1"], &["127.0.0.1"], false),
            (&["127.0.0.1", "10.0.0.10", "8.8.8.8"], &["127.0.0.1", "10.0.0.10", "8.8.8.8"], false),
            (&["127.0.0.1", "10.0.0.10", "8.8.8.8", "1.2.3.4"], &["127.0.0.1", "10.0.0.10", "8.8.8.8"], true),
        ];
        for (input, want, warned) in cases {
            let (got, warning) = fit_nameservers(strings(input));
            assert_eq!(got, strings(want));
            assert_eq!(warning.is_some(), *warned, "{input:?}");
        }
    }

    #[test]
    fn pod_options_override_existing_ones_by_name() {
        // TestMergeDNSOptions.
        let existing = strings(&["ndots:5", "debug"]);
        let cases: Vec<(Vec<PodDNSConfigOption>, &[&str])> = vec![
            (vec![], &["ndots:5", "debug"]),
            (
                vec![option("single-request", None), option("attempts", Some("3"))],
                &["ndots:5", "debug", "single-request", "attempts:3"],
            ),
            (
                vec![
                    option("ndots", Some("3")),
                    option("debug", None),
                    option("single-request", None),
                    option("attempts", Some("3")),
                ],
                &["ndots:3", "debug", "single-request", "attempts:3"],
            ),
        ];
        for (pod_options, want) in cases {
            assert_eq!(merge_options(&existing, &pod_options), strings(want));
        }
    }

    #[test]
    fn the_dns_policy_and_host_network_choose_the_resolver() {
        // (dnsPolicy, hostNetwork, type): TestGetPodDNSType.
        let cases: &[(&str, bool, Result<PodDnsType, ()>)] = &[
            ("ClusterFirst", false, Ok(PodDnsType::Cluster)),
            ("ClusterFirstWithHostNet", true, Ok(PodDnsType::Cluster)),
            ("ClusterFirstWithHostNet", false, Ok(PodDnsType::Cluster)),
            ("Default", false, Ok(PodDnsType::Host)),
            ("Default", true, Ok(PodDnsType::Host)),
            ("ClusterFirst", true, Ok(PodDnsType::Host)),
            ("None", false, Ok(PodDnsType::None)),
            ("invalidPolicy", false, Err(())),
        ];
        for (policy, host_network, want) in cases {
            let got = pod_dns_type(&pod("testNS", Some(policy), *host_network, None)).map_err(|_| ());
            assert_eq!(&got, want, "{policy} hostNetwork={host_network}");
        }
    }

    #[test]
    fn without_a_resolv_conf_host_resolver_pods_get_the_loopback_and_search_dot() {
        // TestGetPodDNS with `--resolv-conf ""`: pods 0-3 are hostNetwork pods.
        let cluster = strings(&["203.0.113.1"]);
        let c = Configurer {
            cluster_dns: &cluster,
            cluster_domain: "kubernetes.io",
            host: &HostDns::Disabled,
            node_ips: &[],
        };
        let dns =
            |policy: &str, host_network: bool| c.pod_dns(&pod("", Some(policy), host_network, None)).unwrap().config;
        for (policy, host_network) in [("ClusterFirstWithHostNet", true), ("ClusterFirst", false)] {
            let got = dns(policy, host_network);
            assert_eq!(got.servers, cluster, "{policy}");
            assert_eq!(got.searches[0], ".svc.kubernetes.io", "{policy}");
        }
        for (policy, host_network) in [("ClusterFirst", true), ("Default", true)] {
            let got = dns(policy, host_network);
            assert_eq!((got.servers, got.searches), (strings(&["127.0.0.1"]), strings(&["."])), "{policy}");
        }
        let v6: [IpAddr; 1] = ["fd00::2".parse().unwrap()];
        let c = Configurer { node_ips: &v6, ..c };
        assert_eq!(c.pod_dns(&pod("", Some("Default"), true, None)).unwrap().config.servers, strings(&["::1"]));
    }

    #[test]
    fn each_policy_merges_the_pods_dns_config_as_the_kubelet_does() {
        // TestGetPodDNSCustom: the host has `nameserver 8.8.8.8` and `search host.domain`.
        let host = HostDns::File(parse_resolv_conf("nameserver 8.8.8.8\nsearch host.domain\n").unwrap());
        let cluster = strings(&["10.0.0.10"]);
        let c = Configurer { cluster_dns: &cluster, cluster_domain: "kubernetes.io", host: &host, node_ips: &[] };
        let custom = |servers: &[&str], searches: &[&str]| PodDNSConfig {
            nameservers: Some(strings(servers)),
            searches: Some(strings(searches)),
            options: Some(vec![option("ndots", Some("3")), option("debug", None)]),
        };
        const CLUSTER_SEARCHES: Lines =
            &["testNS.svc.kubernetes.io", "svc.kubernetes.io", "kubernetes.io", "host.domain", "my.domain"];
        // (policy, hostNetwork, dnsConfig, (nameservers, searches, options))
        let ndots3: Lines = &["ndots:3", "debug"];
        let cases: Vec<(&str, bool, Option<PodDNSConfig>, Want)> = vec![
            ("None", false, None, (&[], &[], &[])),
            (
                "None",
                false,
                Some(custom(&["203.0.113.1"], &["my.domain", "second.domain"])),
                (&["203.0.113.1"], &["my.domain", "second.domain"], ndots3),
            ),
            (
                "ClusterFirst",
                false,
                Some(custom(&["10.0.0.11"], &["my.domain"])),
                (&["10.0.0.10", "10.0.0.11"], CLUSTER_SEARCHES, ndots3),
            ),
            (
                "ClusterFirstWithHostNet",
                true,
                Some(custom(&["10.0.0.11"], &["my.domain"])),
                (&["10.0.0.10", "10.0.0.11"], CLUSTER_SEARCHES, ndots3),
            ),
            (
                "Default",
                false,
                Some(custom(&["10.0.0.11"], &["my.domain"])),
                (&["8.8.8.8", "10.0.0.11"], &["host.domain", "my.domain"], ndots3),
            ),
            ("ClusterFirst", false, None, (&["10.0.0.10"], &CLUSTER_SEARCHES[..4], &["ndots:5"])),
            ("ClusterFirst", true, None, (&["8.8.8.8"], &["host.domain"], &[])),
        ];
        for (policy, host_network, dns_config, (servers, searches, options)) in cases {
            let got = c.pod_dns(&pod("testNS", Some(policy), host_network, dns_config)).unwrap();
            assert_eq!(got.config.servers, strings(servers), "{policy}");
            assert_eq!(got.config.searches, strings(searches), "{policy}");
            assert_eq!(got.config.options, strings(options), "{policy}");
            assert!(got.warnings.is_empty(), "{policy}: {:?}", got.warnings);
        }
    }

    #[test]
    fn a_node_without_cluster_dns_falls_back_to_the_host_with_a_warning() {
        let host = HostDns::File(parse_resolv_conf("nameserver 8.8.8.8\nsearch host.domain\noptions edns0\n").unwrap());
        let c = Configurer { cluster_dns: &[], cluster_domain: "cluster.local", host: &host, node_ips: &[] };
        let got = c.pod_dns(&pod("web", None, false, None)).unwrap();
        assert_eq!(got.config.servers, strings(&["8.8.8.8"]));
        assert_eq!(got.config.searches, strings(&["host.domain"]));
        assert_eq!(got.config.options, strings(&["edns0"]));
        assert_eq!(got.warnings.len(), 1);
        assert_eq!(got.warnings[0].0, "MissingClusterDNS");
    }

    #[test]
    fn an_unreadable_host_resolv_conf_fails_every_policy() {
        let host = HostDns::read(Path::new("/nonexistent/skiff/resolv.conf"));
        assert!(matches!(host, HostDns::Invalid(_)));
        let cluster = strings(&["10.43.0.10"]);
        let c = Configurer { cluster_dns: &cluster, cluster_domain: "cluster.local", host: &host, node_ips: &[] };
        assert!(c.pod_dns(&pod("web", Some("None"), false, None)).is_err());
        assert_eq!(HostDns::read(Path::new("")), HostDns::Disabled);
    }

    #[test]
    fn a_host_with_only_a_local_stub_resolver_hands_pods_systemd_resolveds_upstreams() {
        let dir = tempfile::tempdir().unwrap();
        let (etc, resolved) = (dir.path().join("etc"), dir.path().join("resolved"));
        std::fs::write(&resolved, "nameserver 192.0.2.53\n").unwrap();
        std::fs::write(&etc, "nameserver 127.0.0.53\noptions edns0 trust-ad\n").unwrap();
        assert_eq!(choose_resolv_conf(&etc, &resolved), resolved);
        std::fs::write(&etc, "nameserver 192.0.2.1\n").unwrap();
        assert_eq!(choose_resolv_conf(&etc, &resolved), etc);
        std::fs::write(&etc, "nameserver 127.0.0.1\n").unwrap();
        std::fs::remove_file(&resolved).unwrap();
        assert_eq!(choose_resolv_conf(&etc, &resolved), etc);
    }

    #[test]
    fn too_many_nameservers_from_the_dns_config_are_cut_with_a_warning() {
        let host = HostDns::File(ResolvConf::default());
        let cluster = strings(&["10.43.0.10"]);
        let c = Configurer { cluster_dns: &cluster, cluster_domain: "cluster.local", host: &host, node_ips: &[] };
        let extra = PodDNSConfig {
            nameservers: Some(strings(&["1.1.1.1", "10.43.0.10", "8.8.8.8", "9.9.9.9"])),
            ..Default::default()
        };
        let got = c.pod_dns(&pod("web", None, false, Some(extra))).unwrap();
        assert_eq!(got.config.servers, strings(&["10.43.0.10", "1.1.1.1", "8.8.8.8"]));
        assert_eq!(got.warnings.iter().map(|w| w.0).collect::<Vec<_>>(), ["DNSConfigForming"]);
    }
}
