//! Matching one `PolicyRule` against request attributes, exactly as Kubernetes' RBAC evaluates
//! it (`RuleAllows` in <https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources>).
//!
//! - verbs: `*` or the request's verb;
//! - apiGroups: `*` or the request's group (`""` is the core group);
//! - resources: `*`, the request's `resource` or `resource/subresource`, or `*/subresource`;
//! - resourceNames: empty (any name) or containing the request's name — a request without a
//!   name (list, create, deletecollection) never matches a rule that lists names;
//! - nonResourceURLs: `*`, the exact path, or a prefix ending in `*` (`/healthz/*`).

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::Attributes;

/// The verb wildcard.
pub const VERB_ALL: &str = "*";
/// The API group wildcard.
pub const API_GROUP_ALL: &str = "*";
/// The resource wildcard.
pub const RESOURCE_ALL: &str = "*";
/// The non-resource URL wildcard.
pub const NON_RESOURCE_ALL: &str = "*";

pub(crate) fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or(&[])
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

/// The bit of a standard verb in [`CompiledRule`]'s verb mask (0 for other verbs).
pub fn verb_bit(verb: &str) -> u32 {
    match verb {
        "get" => 1,
        "list" => 1 << 1,
        "watch" => 1 << 2,
        "create" => 1 << 3,
        "update" => 1 << 4,
        "patch" => 1 << 5,
        "delete" => 1 << 6,
        "deletecollection" => 1 << 7,
        "impersonate" => 1 << 8,
        "bind" => 1 << 9,
        "escalate" => 1 << 10,
        "use" => 1 << 11,
        "proxy" => 1 << 12,
        "post" => 1 << 13,
        "put" => 1 << 14,
        _ => 0,
    }
}

const VERB_ALL_BIT: u32 = 1 << 31;

/// A `PolicyRule` compiled for the decision path: verbs as a bit mask (most non-matching rules
/// are rejected with one AND), wildcards as flags, `resource/subresource` entries pre-split, and
/// the name lists as boxed slices, so evaluating a rule neither allocates nor re-parses. It
/// decides exactly as [`rule_allows`] does on the rule it was compiled from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompiledRule {
    mask: u32,
    other_verbs: Box<[Box<str>]>,
    /// `apiGroups` contains `*`.
    any_group: bool,
    groups: Box<[Box<str>]>,
    /// `resources` contains `*`.
    any_resource: bool,
    /// Plain resources (`pods`).
    resources: Box<[Box<str>]>,
    /// `resource/subresource` entries, split (`resource` may be `*`).
    subresources: Box<[(Box<str>, Box<str>)]>,
    /// `resourceNames` (empty = any name).
    names: Box<[Box<str>]>,
    /// `nonResourceURLs` contains `*`.
    any_url: bool,
    /// Exact `nonResourceURLs`.
    urls: Box<[Box<str>]>,
    /// `nonResourceURLs` ending in `*`, without the star.
    url_prefixes: Box<[Box<str>]>,
}

fn boxed<'a>(items: impl IntoIterator<Item = &'a String>) -> Box<[Box<str>]> {
    items.into_iter().map(|s| Box::from(s.as_str())).collect()
}

impl CompiledRule {
    /// Compiles a rule.
    pub fn new(rule: &PolicyRule) -> Self {
        let mut mask = 0;
        let mut other_verbs = Vec::new();
        for v in &rule.verbs {
            match (v.as_str(), verb_bit(v)) {
                (VERB_ALL, _) => mask |= VERB_ALL_BIT,
                (_, 0) => other_verbs.push(v),
                (_, bit) => mask |= bit,
            }
        }
        let groups = list(&rule.api_groups);
        let resources = list(&rule.resources);
        let urls = list(&rule.non_resource_urls);
        Self {
            mask,
            other_verbs: boxed(other_verbs),
            any_group: has(groups, API_GROUP_ALL),
            groups: boxed(groups),
            any_resource: has(resources, RESOURCE_ALL),
            resources: boxed(resources.iter().filter(|r| !r.contains('/'))),
            subresources: resources
                .iter()
                .filter_map(|r| r.split_once('/'))
                .map(|(res, sub)| (Box::from(res), Box::from(sub)))
                .collect(),
            names: boxed(list(&rule.resource_names)),
            any_url: has(urls, NON_RESOURCE_ALL),
            urls: boxed(urls),
            url_prefixes: urls.iter().filter_map(|u| u.strip_suffix('*')).map(Box::from).collect(),
        }
    }

    /// Whether the rule's verbs include `verb` (whose [`verb_bit`] is `bit`).
    pub fn verb_matches(&self, bit: u32, verb: &str) -> bool {
        self.mask & (VERB_ALL_BIT | bit) != 0 || (bit == 0 && self.other_verbs.iter().any(|v| &**v == verb))
    }

    /// Whether the rule allows the request; `verb_bit` is [`verb_bit`]`(attrs.verb)`, computed
    /// once per decision.
    pub fn allows(&self, attrs: &Attributes<'_>, verb_bit: u32) -> bool {
        if !self.verb_matches(verb_bit, attrs.verb) {
            return false;
        }
        if !attrs.resource_request {
            let path = attrs.path;
            return self.any_url
                || self.urls.iter().any(|u| &**u == path)
                || self.url_prefixes.iter().any(|p| path.starts_with(&**p));
        }
        let group_ok = self.any_group || self.groups.iter().any(|g| &**g == attrs.api_group);
        if !group_ok {
            return false;
        }
        let resource_ok = self.any_resource
            || if attrs.subresource.is_empty() {
                self.resources.iter().any(|r| &**r == attrs.resource)
            } else {
                self.subresources
                    .iter()
                    .any(|(res, sub)| &**sub == attrs.subresource && (&**res == attrs.resource || &**res == "*"))
            };
        resource_ok && (self.names.is_empty() || self.names.iter().any(|n| &**n == attrs.name))
    }
}

/// The verbs of several rules together (a role's), to skip a role that cannot match a verb
/// before looking at its rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerbSet {
    mask: u32,
    /// Some rule names a verb outside [`verb_bit`]'s table.
    other: bool,
}

impl VerbSet {
    /// The verbs of `rules`.
    pub fn union(rules: &[CompiledRule]) -> Self {
        rules.iter().fold(Self::default(), |acc, r| Self {
            mask: acc.mask | r.mask,
            other: acc.other || !r.other_verbs.is_empty(),
        })
    }

    /// `false` when no rule can have a verb whose [`verb_bit`] is `bit` (0: a verb outside the
    /// table); `true` when one may.
    pub fn may_contain(&self, bit: u32) -> bool {
        self.mask & (VERB_ALL_BIT | bit) != 0 || (bit == 0 && self.other)
    }
}

/// Whether `rule` allows the request described by `attrs`.
pub fn rule_allows(attrs: &Attributes<'_>, rule: &PolicyRule) -> bool {
    if attrs.resource_request {
        verb_matches(rule, attrs.verb)
            && api_group_matches(rule, attrs.api_group)
            && resource_matches(rule, attrs.resource, attrs.subresource)
            && resource_name_matches(rule, attrs.name)
    } else {
        verb_matches(rule, attrs.verb) && non_resource_url_matches(rule, attrs.path)
    }
}

/// `verbs` contains `*` or `verb`.
pub fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == VERB_ALL || v == verb)
}

/// `apiGroups` contains `*` or `group`.
pub fn api_group_matches(rule: &PolicyRule, group: &str) -> bool {
    list(&rule.api_groups).iter().any(|g| g == API_GROUP_ALL || g == group)
}

/// `resources` contains `*`, `resource` (no subresource), `resource/subresource`, or
/// `*/subresource`.
pub fn resource_matches(rule: &PolicyRule, resource: &str, subresource: &str) -> bool {
    for r in list(&rule.resources) {
        if r == RESOURCE_ALL {
            return true;
        }
        if subresource.is_empty() {
            if r == resource {
                return true;
            }
            continue;
        }
        if let Some((res, sub)) = r.split_once('/')
            && sub == subresource
            && (res == resource || res == "*")
        {
            return true;
        }
    }
    false
}

/// `resourceNames` is empty or contains `name`.
pub fn resource_name_matches(rule: &PolicyRule, name: &str) -> bool {
    let names = list(&rule.resource_names);
    names.is_empty() || has(names, name)
}

/// `nonResourceURLs` contains `*`, `path`, or a `prefix*` that `path` starts with.
pub fn non_resource_url_matches(rule: &PolicyRule, path: &str) -> bool {
    list(&rule.non_resource_urls).iter().any(|u| {
        u == NON_RESOURCE_ALL || u == path || u.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
    })
}

/// A `PolicyRule` from string slices (empty slices become `None`, as the API omits them).
pub fn policy_rule(verbs: &[&str], api_groups: &[&str], resources: &[&str]) -> PolicyRule {
    let opt = |v: &[&str]| if v.is_empty() { None } else { Some(v.iter().map(|s| s.to_string()).collect()) };
    PolicyRule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        api_groups: opt(api_groups),
        resources: opt(resources),
        resource_names: None,
        non_resource_urls: None,
    }
}

/// A non-resource `PolicyRule`.
pub fn non_resource_rule(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        non_resource_urls: Some(urls.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

/// Adds `resourceNames` to a rule built by [`policy_rule`].
pub fn with_names(mut rule: PolicyRule, names: &[&str]) -> PolicyRule {
    rule.resource_names = Some(names.iter().map(|s| s.to_string()).collect());
    rule
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UserInfo;

    #[test]
    fn subresource_rules_match_only_their_subresource_or_the_wildcard() {
        let u = UserInfo::new("u", Vec::<String>::new());
        let log = Attributes::resource(&u, "get", "", "pods", "default", "p").with_subresource("log");
        let plain = Attributes::resource(&u, "get", "", "pods", "default", "p");
        let cases = [
            (vec!["pods"], &log, false),
            (vec!["pods"], &plain, true),
            (vec!["pods/log"], &log, true),
            (vec!["pods/log"], &plain, false),
            (vec!["*/log"], &log, true),
            (vec!["*/status"], &log, false),
            (vec!["*"], &log, true),
            (vec!["deployments/log"], &log, false),
        ];
        for (resources, attrs, want) in cases {
            let rule = policy_rule(&["get"], &[""], &resources);
            assert_eq!(rule_allows(attrs, &rule), want, "{resources:?} vs {}/{}", attrs.resource, attrs.subresource);
        }
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_star_prefix() {
        let u = UserInfo::new("u", Vec::<String>::new());
        let cases = [
            ("/healthz", "/healthz", true),
            ("/healthz", "/healthz/etcd", false),
            ("/healthz/*", "/healthz/etcd", true),
            ("/healthz/*", "/healthz", false),
            ("/healthz*", "/healthz", true),
            ("*", "/anything", true),
            ("/api", "/apis", false),
        ];
        for (url, path, want) in cases {
            let rule = non_resource_rule(&["get"], &[url]);
            assert_eq!(rule_allows(&Attributes::non_resource(&u, "get", path), &rule), want, "{url} vs {path}");
        }
    }

    #[test]
    fn compiled_rules_decide_exactly_as_the_policy_rules_they_come_from() {
        let u = UserInfo::new("u", Vec::<String>::new());
        let rules = [
            policy_rule(&["get", "list"], &[""], &["pods", "pods/log"]),
            policy_rule(&["*"], &["*"], &["*"]),
            policy_rule(&["create"], &["apps", ""], &["*/status", "deployments"]),
            policy_rule(&["impersonate", "frobnicate"], &[""], &["users", "groups"]),
            with_names(policy_rule(&["get", "update"], &["", "apps"], &["configmaps"]), &["a", "b"]),
            policy_rule(&["get"], &[], &["pods"]),
            non_resource_rule(&["get", "post"], &["/healthz", "/api/*", "/metrics*"]),
            non_resource_rule(&["*"], &["*"]),
        ];
        let verbs = ["get", "list", "create", "update", "delete", "impersonate", "frobnicate", "post", "put"];
        let targets = [
            ("", "pods", ""),
            ("", "pods", "log"),
            ("", "pods", "status"),
            ("apps", "deployments", ""),
            ("apps", "deployments", "status"),
            ("", "configmaps", ""),
            ("", "users", ""),
            ("batch", "jobs", ""),
        ];
        let mut compared = 0;
        for rule in &rules {
            let compiled = CompiledRule::new(rule);
            for verb in verbs {
                for (group, resource, sub) in targets {
                    for name in ["", "a", "c"] {
                        let attrs = Attributes::resource(&u, verb, group, resource, "ns", name).with_subresource(sub);
                        assert_eq!(
                            compiled.allows(&attrs, verb_bit(verb)),
                            rule_allows(&attrs, rule),
                            "{rule:?} {attrs:?}"
                        );
                        compared += 1;
                    }
                }
                for path in ["/healthz", "/healthz/etcd", "/api", "/api/v1", "/metrics", "/metricsx", "/apis"] {
                    let attrs = Attributes::non_resource(&u, verb, path);
                    assert_eq!(
                        compiled.allows(&attrs, verb_bit(verb)),
                        rule_allows(&attrs, rule),
                        "{rule:?} {attrs:?}"
                    );
                    compared += 1;
                }
            }
        }
        assert!(compared > 1000);
    }
}
