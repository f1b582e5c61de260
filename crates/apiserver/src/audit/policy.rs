//! The audit policy: `audit.k8s.io/v1` `Policy`, which decides per request the level an event
//! is recorded at and the stages left out
//! (<https://kubernetes.io/docs/tasks/debug/debug-cluster/audit/#audit-policy>). Rules are
//! checked in order and the first match wins; a request no rule matches is not audited
//! (level `None`), as k8s.io/apiserver's `policy.Checker` decides.

use serde::Deserialize;

/// How much of a request an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Default)]
pub enum Level {
    /// Not recorded.
    #[default]
    None,
    /// Who, what, when and the response code; no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata and both bodies.
    RequestResponse,
}

impl Level {
    /// The level's name as events carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// The points of a request's handling at which an event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Hash)]
pub enum Stage {
    /// As soon as the request is authenticated, before it is handled.
    RequestReceived,
    /// Once the response headers are sent, for long-running requests (watches) only.
    ResponseStarted,
    /// When the response is complete.
    ResponseComplete,
    /// When the handler panicked.
    Panic,
}

impl Stage {
    /// The stage's name as events carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

/// `audit.k8s.io/v1` `Policy`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// `audit.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Policy`.
    #[serde(default)]
    pub kind: String,
    /// Ignored (a Policy may carry object metadata).
    #[serde(default)]
    pub metadata: serde_json::Value,
    /// The rules, first match wins.
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    /// Stages no event is written for, whatever the rule.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from recorded bodies.
    #[serde(default)]
    pub omit_managed_fields: bool,
}

/// One rule of a [`Policy`]. Empty lists match everything.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyRule {
    /// The level of the requests this rule matches.
    pub level: Level,
    /// User names.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups, any of which the user is in.
    #[serde(default)]
    pub user_groups: Vec<String>,
    /// Verbs (`get`, `list`, `watch`, `create`, … ).
    #[serde(default)]
    pub verbs: Vec<String>,
    /// Resources by group; a rule with resources or namespaces matches resource requests only.
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    /// Namespaces (`""` matches cluster-scoped requests).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Non-resource paths, `*` as a whole or as a trailing wildcard (`/healthz*`).
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    /// Stages left out for the requests this rule matches.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Overrides the policy's `omitManagedFields` for this rule.
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

/// Resources of one API group in a [`PolicyRule`].
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupResources {
    /// The group (`""`: the core group).
    #[serde(default)]
    pub group: String,
    /// `pods`, `pods/log`, `*/scale`, `pods/*`, `*`; empty: every resource of the group.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names; empty: any.
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// What a policy is asked about one request.
#[derive(Debug, Clone, Default)]
pub struct RequestAttributes<'a> {
    /// The user name (`""` when authentication failed).
    pub user: &'a str,
    /// The user's groups.
    pub groups: &'a [String],
    /// The Kubernetes verb (`get`, `list`, …; for non-resource requests the lower-case HTTP
    /// method).
    pub verb: &'a str,
    /// Whether the request names a resource.
    pub resource_request: bool,
    /// The API group.
    pub group: &'a str,
    /// The resource.
    pub resource: &'a str,
    /// The subresource (`""` when none).
    pub subresource: &'a str,
    /// The namespace (`""` when none).
    pub namespace: &'a str,
    /// The object name (`""` for collections).
    pub name: &'a str,
    /// The URL path.
    pub path: &'a str,
}

/// The decision for one request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// The level.
    pub level: Level,
    /// Stages not written.
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from recorded bodies.
    pub omit_managed_fields: bool,
}

impl Policy {
    /// Parses and checks a policy file's contents (YAML or JSON).
    ///
    /// # Errors
    /// A malformed document, an unknown field, a wrong `apiVersion`/`kind`, or an unknown
    /// level or stage, each named.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let policy: Policy = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        if policy.api_version != "audit.k8s.io/v1" {
            return Err(format!("apiVersion: must be audit.k8s.io/v1, got {:?}", policy.api_version));
        }
        if policy.kind != "Policy" {
            return Err(format!("kind: must be Policy, got {:?}", policy.kind));
        }
        Ok(policy)
    }

    /// The level and omitted stages for a request: the first rule that matches, else `None`.
    pub fn decide(&self, attrs: &RequestAttributes<'_>) -> Decision {
        for rule in &self.rules {
            if rule.matches(attrs) {
                let mut omit = self.omit_stages.clone();
                omit.extend(rule.omit_stages.iter().copied().filter(|s| !self.omit_stages.contains(s)));
                return Decision {
                    level: rule.level,
                    omit_stages: omit,
                    omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
                };
            }
        }
        Decision {
            level: Level::None,
            omit_stages: self.omit_stages.clone(),
            omit_managed_fields: self.omit_managed_fields,
        }
    }
}

fn has(list: &[String], s: &str) -> bool {
    list.iter().any(|x| x == s)
}

impl PolicyRule {
    fn matches(&self, a: &RequestAttributes<'_>) -> bool {
        if !self.users.is_empty() && !has(&self.users, a.user) {
            return false;
        }
        if !self.user_groups.is_empty() && !a.groups.iter().any(|g| has(&self.user_groups, g)) {
            return false;
        }
        if !self.verbs.is_empty() && !has(&self.verbs, a.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(a);
        }
        if !self.non_resource_urls.is_empty() {
            return !a.resource_request && self.non_resource_urls.iter().any(|spec| path_matches(a.path, spec));
        }
        true
    }

    fn matches_resource(&self, a: &RequestAttributes<'_>) -> bool {
        if !a.resource_request {
            return false;
        }
        if !self.namespaces.is_empty() && !has(&self.namespaces, a.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined =
            if a.subresource.is_empty() { a.resource.to_string() } else { format!("{}/{}", a.resource, a.subresource) };
        self.resources.iter().filter(|gr| gr.group == a.group).any(|gr| {
            if gr.resources.is_empty() {
                return true;
            }
            (gr.resource_names.is_empty() || has(&gr.resource_names, a.name))
                && gr.resources.iter().any(|res| {
                    res == &combined
                        || res == "*"
                        || (!a.subresource.is_empty() && res.strip_prefix("*/") == Some(a.subresource))
                        || res.strip_suffix("/*") == Some(a.resource)
                })
        })
    }
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*" || spec == path || spec.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
  - level: None
    nonResourceURLs: ["/healthz*", "/version"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps"]
  - level: Request
    resources:
      - group: ""
        resources: ["pods/log", "*/exec"]
  - level: RequestResponse
    namespaces: ["kube-system"]
    resources:
      - group: "apps"
        resources: ["deployments/*"]
        resourceNames: ["coredns"]
  - level: Metadata
    userGroups: ["system:nodes"]
    omitStages: [ResponseStarted]
"#;

    fn req<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        sub: &'a str,
        ns: &'a str,
        name: &'a str,
    ) -> RequestAttributes<'a> {
        RequestAttributes {
            user: "jane",
            groups: &[],
            verb,
            resource_request: true,
            group,
            resource,
            subresource: sub,
            namespace: ns,
            name,
            path: "",
        }
    }

    #[test]
    fn the_first_matching_rule_decides_the_level_as_the_upstream_checker_does() {
        let p = Policy::parse(POLICY).unwrap();
        assert_eq!(p.decide(&req("get", "", "secrets", "", "default", "s")).level, Level::Metadata);
        assert_eq!(p.decide(&req("get", "", "pods", "log", "default", "p")).level, Level::Request);
        assert_eq!(p.decide(&req("create", "", "pods", "exec", "default", "p")).level, Level::Request);
        // `pods` alone does not match `pods/log`, and no rule matches plain pods.
        assert_eq!(p.decide(&req("get", "", "pods", "", "default", "p")).level, Level::None);
        // `deployments/*` covers the resource and its subresources, for the named object only.
        assert_eq!(
            p.decide(&req("update", "apps", "deployments", "", "kube-system", "coredns")).level,
            Level::RequestResponse
        );
        assert_eq!(
            p.decide(&req("update", "apps", "deployments", "scale", "kube-system", "coredns")).level,
            Level::RequestResponse
        );
        assert_eq!(p.decide(&req("update", "apps", "deployments", "", "kube-system", "other")).level, Level::None);
        assert_eq!(p.decide(&req("update", "apps", "deployments", "", "default", "coredns")).level, Level::None);
    }

    #[test]
    fn users_groups_verbs_and_non_resource_urls_narrow_a_rule() {
        let p = Policy::parse(POLICY).unwrap();
        let mut a = req("watch", "", "endpoints", "", "", "");
        a.user = "system:kube-proxy";
        assert_eq!(p.decide(&a).level, Level::None);
        let groups = vec!["system:nodes".to_string()];
        let mut a = req("get", "", "nodes", "", "", "n1");
        a.groups = &groups;
        let d = p.decide(&a);
        assert_eq!(d.level, Level::Metadata);
        assert_eq!(d.omit_stages, vec![Stage::RequestReceived, Stage::ResponseStarted]);
        let health = RequestAttributes { verb: "get", path: "/healthz/ready", ..Default::default() };
        assert_eq!(p.decide(&health).level, Level::None);
        // A resource rule never matches a non-resource request.
        let rule = PolicyRule {
            level: Level::Metadata,
            users: vec![],
            user_groups: vec![],
            verbs: vec![],
            resources: vec![],
            namespaces: vec![String::new()],
            non_resource_urls: vec![],
            omit_stages: vec![],
            omit_managed_fields: None,
        };
        assert!(!rule.matches(&health));
    }

    #[test]
    fn a_malformed_policy_is_refused_with_the_field_named() {
        assert!(
            Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Verbose\n")
                .unwrap_err()
                .contains("Verbose")
        );
        assert!(Policy::parse("apiVersion: audit.k8s.io/v1beta1\nkind: Policy\n").unwrap_err().contains("apiVersion"));
        assert!(
            Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  verb: [get]\n")
                .unwrap_err()
                .contains("verb")
        );
    }
}
