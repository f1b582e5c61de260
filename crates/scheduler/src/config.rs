//! Configuration: a subset of `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`)
//! and how profiles become [`Framework`]s.
//!
//! Supported: `parallelism`, `percentageOfNodesToScore`, `podInitialBackoffSeconds`,
//! `podMaxBackoffSeconds`, `leaderElection`, and `profiles[]` with `schedulerName`,
//! `percentageOfNodesToScore`, `plugins` (every extension point and `multiPoint`, `enabled` with
//! `weight`, `disabled` with `"*"`) and `pluginConfig[].args`. Other fields are ignored.
//!
//! ```yaml
//! apiVersion: kubescheduler.config.k8s.io/v1
//! kind: KubeSchedulerConfiguration
//! percentageOfNodesToScore: 30
//! profiles:
//! - schedulerName: default-scheduler
//! - schedulerName: bin-packing
//!   plugins:
//!     score:
//!       disabled: [{name: NodeResourcesBalancedAllocation}]
//!       enabled: [{name: NodeResourcesFit, weight: 5}]
//!   pluginConfig:
//!   - name: NodeResourcesFit
//!     args: {scoringStrategy: {type: MostAllocated}}
//! ```
//!
//! # Custom plugins
//! Register a factory under a name, then enable the name in a profile:
//! ```
//! use std::sync::Arc;
//! use skiff_scheduler::framework::{CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, Status};
//! use skiff_scheduler::SchedulerConfig;
//!
//! /// Rejects nodes labelled `example.com/maintenance`.
//! struct Maintenance;
//! impl Plugin for Maintenance {
//!     fn name(&self) -> &str { "Maintenance" }
//!     fn as_filter(&self) -> Option<&dyn FilterPlugin> { Some(self) }
//! }
//! impl FilterPlugin for Maintenance {
//!     fn filter(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Status {
//!         if node.labels().contains_key("example.com/maintenance") {
//!             return Status::unresolvable("node(s) were in maintenance");
//!         }
//!         Status::success()
//!     }
//! }
//!
//! let yaml = "profiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      enabled: [{name: Maintenance}]\n";
//! let mut cfg = SchedulerConfig::from_yaml(yaml).unwrap();
//! cfg.registry.register("Maintenance", |_args, _handle| Ok(Arc::new(Maintenance))).unwrap();
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

pub mod validation;

pub use validation::effective_scheduler_name;

use crate::framework::{Framework, Handle, Plugin, PluginSets, Registry};
use crate::plugins::{DEFAULT_MULTI_POINT, in_tree_registry};
use crate::queue::QueueConfig;

/// The default profile name.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// A plugin reference in `enabled`/`disabled`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PluginRef {
    /// Plugin name (`"*"` in `disabled` means all).
    pub name: String,
    /// Score weight.
    #[serde(default)]
    pub weight: Option<i64>,
}

/// `PluginSet`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSet {
    /// Plugins to enable, in order.
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    /// Plugins to disable.
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

/// `Plugins`: plugin sets per extension point.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct Plugins {
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    #[serde(default)]
    pub queue_sort: PluginSet,
    #[serde(default)]
    pub pre_filter: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
    #[serde(default)]
    pub post_filter: PluginSet,
    #[serde(default)]
    pub pre_score: PluginSet,
    #[serde(default)]
    pub score: PluginSet,
    #[serde(default)]
    pub reserve: PluginSet,
    #[serde(default)]
    pub permit: PluginSet,
    #[serde(default)]
    pub pre_bind: PluginSet,
    #[serde(default)]
    pub bind: PluginSet,
    #[serde(default)]
    pub post_bind: PluginSet,
    #[serde(default)]
    pub multi_point: PluginSet,
}

/// `PluginConfig`: args for one plugin.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Plugin name.
    pub name: String,
    /// Plugin-specific args.
    #[serde(default)]
    pub args: serde_json::Value,
}

/// `KubeSchedulerProfile`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSchedulerProfile {
    /// Pods with this `spec.schedulerName` use the profile (`default-scheduler` when empty).
    pub scheduler_name: Option<String>,
    /// Overrides the global percentage for this profile.
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Changes to the default plugins.
    pub plugins: Option<Plugins>,
    /// Plugin args.
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

/// `LeaderElectionConfiguration`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElectionConfiguration {
    /// Whether to run leader election (true in Kubernetes' defaults).
    #[serde(default = "yes")]
    pub leader_elect: bool,
    /// Lease duration, e.g. `15s`.
    pub lease_duration: Option<String>,
    /// Renew deadline, e.g. `10s`.
    pub renew_deadline: Option<String>,
    /// Retry period, e.g. `2s`.
    pub retry_period: Option<String>,
    /// Lock kind: only `leases` (the default) is accepted.
    pub resource_lock: Option<String>,
    /// Lease name (`kube-scheduler`).
    pub resource_name: Option<String>,
    /// Lease namespace (`kube-system`).
    pub resource_namespace: Option<String>,
}

fn yes() -> bool {
    true
}

/// `KubeSchedulerConfiguration` (the supported subset). Decoding is strict, as kube-scheduler's:
/// an unknown field is an error, so a misspelt key never leaves a setting silently unapplied.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSchedulerConfiguration {
    /// Must be `kubescheduler.config.k8s.io/v1` when set.
    pub api_version: Option<String>,
    /// Must be `KubeSchedulerConfiguration` when set.
    pub kind: Option<String>,
    /// Workers for filtering/scoring (default: CPU cores).
    pub parallelism: Option<i32>,
    /// Percentage of nodes to find feasible before scoring (0 or unset: adaptive).
    pub percentage_of_nodes_to_score: Option<i32>,
    /// First backoff in seconds (1).
    pub pod_initial_backoff_seconds: Option<i64>,
    /// Backoff cap in seconds (10).
    pub pod_max_backoff_seconds: Option<i64>,
    /// Profiles (one `default-scheduler` profile when empty).
    #[serde(default)]
    pub profiles: Vec<KubeSchedulerProfile>,
    /// Leader election.
    pub leader_election: Option<LeaderElectionConfiguration>,
    /// HTTP scheduler extenders, called in order after the profile's Filter plugins, with
    /// the Score plugins, and before the Bind plugins ([`crate::extender`]).
    #[serde(default)]
    pub extenders: Vec<Extender>,
    /// Accepted and ignored: the in-process scheduler uses the server's own client.
    pub client_connection: Option<serde_json::Value>,
    /// Accepted and ignored (no profiling endpoints).
    pub enable_profiling: Option<bool>,
    /// Accepted and ignored (no profiling endpoints).
    pub enable_contention_profiling: Option<bool>,
    /// Accepted and ignored: the caches fill once leadership is acquired.
    pub delay_cache_until_active: Option<bool>,
}

/// `Extender` (`kubescheduler.config.k8s.io/v1`): one HTTP extender and the verbs it serves
/// (<https://github.com/kubernetes/design-proposals-archive/blob/main/scheduling/scheduler_extender.md>).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Extender {
    /// Base URL; a verb is posted to `URL_PREFIX/VERB`.
    pub url_prefix: String,
    /// Verb of the filter call (none: no filtering).
    #[serde(default)]
    pub filter_verb: String,
    /// Verb of the preempt call (none: preemption is not offered to the extender).
    #[serde(default)]
    pub preempt_verb: String,
    /// Verb of the prioritize call (none: no scores).
    #[serde(default)]
    pub prioritize_verb: String,
    /// Multiplier of the prioritize scores (0-10 each, scaled to the 0-100 node score range);
    /// must be positive when `prioritizeVerb` is set.
    #[serde(default)]
    pub weight: i64,
    /// Verb of the bind call: the extender binds the pods it is interested in (at most one
    /// extender may bind).
    #[serde(default)]
    pub bind_verb: String,
    /// Speak HTTPS (without a CA in `tlsConfig`, the server certificate is not verified).
    #[serde(default, rename = "enableHTTPS")]
    pub enable_https: bool,
    /// TLS client settings.
    pub tls_config: Option<ExtenderTlsConfig>,
    /// Timeout of one call, a Go duration such as `5s` (default 5 s).
    pub http_timeout: Option<String>,
    /// The extender keeps its own node cache: calls carry node names instead of Node objects.
    #[serde(default)]
    pub node_cache_capable: bool,
    /// Extended resources the extender manages; when any are listed, the extender is called
    /// only for pods requesting one of them.
    #[serde(default)]
    pub managed_resources: Vec<ExtenderManagedResource>,
    /// An unreachable or failing extender is skipped instead of failing the pod's attempt.
    #[serde(default)]
    pub ignorable: bool,
}

/// `ExtenderTLSConfig`: client TLS settings of an extender (byte fields are base64, as Go's
/// `[]byte` in JSON/YAML).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtenderTlsConfig {
    /// Do not verify the server's certificate.
    #[serde(default)]
    pub insecure: bool,
    /// Server name to verify (default: the URL's host).
    #[serde(default)]
    pub server_name: String,
    /// Client certificate file (PEM).
    #[serde(default)]
    pub cert_file: String,
    /// Client key file (PEM).
    #[serde(default)]
    pub key_file: String,
    /// CA file (PEM) to verify the server with.
    #[serde(default)]
    pub ca_file: String,
    /// Client certificate (base64 of PEM); wins over `certFile`.
    #[serde(default)]
    pub cert_data: String,
    /// Client key (base64 of PEM); wins over `keyFile`.
    #[serde(default)]
    pub key_data: String,
    /// CA (base64 of PEM); wins over `caFile`.
    #[serde(default)]
    pub ca_data: String,
}

/// `ExtenderManagedResource`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtenderManagedResource {
    /// Extended resource name, e.g. `example.com/foo`.
    pub name: String,
    /// NodeResourcesFit does not check this resource (the extender does).
    #[serde(default)]
    pub ignored_by_scheduler: bool,
}

/// Where and how the scheduler elects a leader (from `leaderElection`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionSettings {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader retries renewing before stepping down.
    pub renew_deadline: Duration,
    /// Interval between attempts.
    pub retry_period: Duration,
}

/// Errors loading a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The YAML did not parse into the expected shape.
    #[error("decoding KubeSchedulerConfiguration: {0}")]
    Decode(String),
    /// A value is invalid.
    #[error("invalid KubeSchedulerConfiguration: {0}")]
    Invalid(String),
}

/// Everything [`crate::run_scheduler`] needs besides the client.
#[derive(Clone, Default)]
pub struct SchedulerConfig {
    /// The parsed configuration file (defaults when none).
    pub component: KubeSchedulerConfiguration,
    /// Out-of-tree plugin factories, merged with the in-tree registry.
    pub registry: Registry,
    /// Seed for tie-breaking among equally scored nodes (random when None).
    pub seed: Option<u64>,
}

impl SchedulerConfig {
    /// Parses a KubeSchedulerConfiguration YAML document and validates it.
    ///
    /// # Errors
    /// [`ConfigError`] for bad YAML or invalid values.
    pub fn from_yaml(yaml: &str) -> Result<Self, ConfigError> {
        let component: KubeSchedulerConfiguration =
            serde_saphyr::from_str(yaml).map_err(|e| ConfigError::Decode(e.to_string()))?;
        let cfg = Self { component, ..Default::default() };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads, parses and [checks](Self::check) a configuration file.
    ///
    /// # Errors
    /// I/O errors, [`ConfigError`]s and [`Self::check`] failures, each prefixed with the path.
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<Self> {
        let s = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let cfg = Self::from_yaml(&s).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        cfg.check().map_err(|e| anyhow::anyhow!("{}: invalid KubeSchedulerConfiguration: {e}", path.display()))?;
        Ok(cfg)
    }

    /// Checks values the way kube-scheduler's validation does ([`validation`]): every problem
    /// is reported, each naming its field.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] listing the problems (one alone, or `[a, b, ...]` as Go's
    /// aggregate errors print).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let errs = validation::validate(&self.component);
        match errs.len() {
            0 => Ok(()),
            1 => Err(ConfigError::Invalid(errs.into_iter().next().unwrap_or_default())),
            _ => Err(ConfigError::Invalid(format!("[{}]", errs.join(", ")))),
        }
    }

    /// Everything kube-scheduler checks before it schedules: [`Self::validate`], then each
    /// profile built (unknown plugins, plugins at points they do not implement, plugin args)
    /// and each extender's client made (URL, TLS files). `skiff server --scheduler-config`
    /// refuses to start when this fails.
    ///
    /// # Errors
    /// The first problem found, as a message.
    pub fn check(&self) -> Result<(), String> {
        self.validate().map_err(|e| e.to_string())?;
        build_frameworks(self, &Handle::new(Arc::new(crate::api::NoopApi)))?;
        crate::extender::build_extenders(&self.component.extenders)?;
        Ok(())
    }

    /// Worker count: `parallelism`, else the number of CPUs.
    pub fn parallelism(&self) -> usize {
        self.component
            .parallelism
            .map(|p| p.max(1) as usize)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// Global `percentageOfNodesToScore` (0 = adaptive).
    pub fn percentage_of_nodes_to_score(&self) -> i32 {
        self.component.percentage_of_nodes_to_score.unwrap_or(0)
    }

    /// Queue timing from the configuration.
    pub fn queue_config(&self) -> QueueConfig {
        let mut q = QueueConfig::default();
        if let Some(s) = self.component.pod_initial_backoff_seconds {
            q.initial_backoff = Duration::from_secs(s.max(1) as u64);
        }
        if let Some(s) = self.component.pod_max_backoff_seconds {
            q.max_backoff = Duration::from_secs(s.max(1) as u64);
        }
        q
    }

    /// Leader election settings (Kubernetes' defaults: enabled, Lease `kube-system/kube-scheduler`,
    /// 15 s lease, 10 s renew deadline, 2 s retry), or None when `leaderElect: false`.
    pub fn leader_election(&self) -> Option<LeaderElectionSettings> {
        let le = self.component.leader_election.as_ref();
        if le.is_some_and(|l| !l.leader_elect) {
            return None;
        }
        let dur = |v: Option<&String>, d: u64| v.and_then(|s| parse_duration(s).ok()).unwrap_or(Duration::from_secs(d));
        Some(LeaderElectionSettings {
            namespace: le.and_then(|l| l.resource_namespace.clone()).unwrap_or_else(|| "kube-system".into()),
            name: le.and_then(|l| l.resource_name.clone()).unwrap_or_else(|| "kube-scheduler".into()),
            lease_duration: dur(le.and_then(|l| l.lease_duration.as_ref()), 15),
            renew_deadline: dur(le.and_then(|l| l.renew_deadline.as_ref()), 10),
            retry_period: dur(le.and_then(|l| l.retry_period.as_ref()), 2),
        })
    }

    /// Profile names (`schedulerName`s).
    pub fn profile_names(&self) -> Vec<String> {
        if self.component.profiles.is_empty() {
            return vec![DEFAULT_SCHEDULER_NAME.into()];
        }
        let profiles = &self.component.profiles;
        (0..profiles.len()).map(|i| effective_scheduler_name(profiles, i)).collect()
    }
}

/// Parses a Go-style duration (`15s`, `1m30s`, `500ms`).
///
/// # Errors
/// A message naming the bad value.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("invalid duration {s:?}");
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let n_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
        let n: f64 = rest[..n_end].parse().map_err(|_| err())?;
        rest = &rest[n_end..];
        let u_end = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let secs = match &rest[..u_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        total += Duration::from_secs_f64(n * secs);
        rest = &rest[u_end..];
    }
    Ok(total)
}

struct Point {
    name: &'static str,
    has: fn(&dyn Plugin) -> bool,
}

const POINTS: &[Point] = &[
    Point { name: "preEnqueue", has: |p| p.as_pre_enqueue().is_some() },
    Point { name: "queueSort", has: |p| p.as_queue_sort().is_some() },
    Point { name: "preFilter", has: |p| p.as_pre_filter().is_some() },
    Point { name: "filter", has: |p| p.as_filter().is_some() },
    Point { name: "postFilter", has: |p| p.as_post_filter().is_some() },
    Point { name: "preScore", has: |p| p.as_pre_score().is_some() },
    Point { name: "score", has: |p| p.as_score().is_some() },
    Point { name: "reserve", has: |p| p.as_reserve().is_some() },
    Point { name: "permit", has: |p| p.as_permit().is_some() },
    Point { name: "preBind", has: |p| p.as_pre_bind().is_some() },
    Point { name: "bind", has: |p| p.as_bind().is_some() },
    Point { name: "postBind", has: |p| p.as_post_bind().is_some() },
];

fn point_set<'a>(p: &'a Plugins, name: &str) -> &'a PluginSet {
    match name {
        "preEnqueue" => &p.pre_enqueue,
        "queueSort" => &p.queue_sort,
        "preFilter" => &p.pre_filter,
        "filter" => &p.filter,
        "postFilter" => &p.post_filter,
        "preScore" => &p.pre_score,
        "score" => &p.score,
        "reserve" => &p.reserve,
        "permit" => &p.permit,
        "preBind" => &p.pre_bind,
        "bind" => &p.bind,
        _ => &p.post_bind,
    }
}

/// Builds one [`Framework`] per profile: defaults merged with the profile's `plugins`
/// (`multiPoint` expanded to every point a plugin implements; plugins listed at a specific point
/// run first and their weight wins), plugins instantiated once per profile with their args.
///
/// # Errors
/// Unknown plugins, plugins listed at points they do not implement, bad args, profiles with
/// different QueueSort plugins.
pub fn build_frameworks(cfg: &SchedulerConfig, handle: &Handle) -> Result<Vec<Arc<Framework>>, String> {
    let mut registry = in_tree_registry();
    registry.merge(&cfg.registry)?;
    let default_profile = [KubeSchedulerProfile::default()];
    let profiles: &[KubeSchedulerProfile] =
        if cfg.component.profiles.is_empty() { &default_profile } else { &cfg.component.profiles };
    let mut out = Vec::new();
    let mut queue_sort_name: Option<String> = None;
    // Extended resources an extender checks itself are left out of NodeResourcesFit's Filter
    // (`ignoredByScheduler`), as kube-scheduler adds them to that plugin's ignoredResources.
    let ignored_by_extenders: Vec<serde_json::Value> = cfg
        .component
        .extenders
        .iter()
        .flat_map(|e| e.managed_resources.iter())
        .filter(|r| r.ignored_by_scheduler)
        .map(|r| serde_json::Value::String(r.name.clone()))
        .collect();
    for (i, profile) in profiles.iter().enumerate() {
        let pname = effective_scheduler_name(profiles, i);
        let user = profile.plugins.clone().unwrap_or_default();
        // multiPoint: defaults, minus disabled, plus/overridden by enabled.
        let mut multi: Vec<(String, i64)> = DEFAULT_MULTI_POINT.iter().map(|(n, w)| (n.to_string(), *w)).collect();
        if user.multi_point.disabled.iter().any(|d| d.name == "*") {
            multi.clear();
        } else {
            multi.retain(|(n, _)| !user.multi_point.disabled.iter().any(|d| &d.name == n));
        }
        for e in &user.multi_point.enabled {
            match multi.iter_mut().find(|(n, _)| n == &e.name) {
                Some(entry) => entry.1 = e.weight.unwrap_or(entry.1),
                None => multi.push((e.name.clone(), e.weight.unwrap_or(0))),
            }
        }
        // Instantiate every plugin mentioned once.
        let mut fit_args = None;
        if !ignored_by_extenders.is_empty() {
            let mut a = profile
                .plugin_config
                .iter()
                .find(|c| c.name == crate::plugins::names::NODE_RESOURCES_FIT)
                .map(|c| c.args.clone())
                .filter(|a| a.is_object())
                .unwrap_or_else(|| serde_json::json!({}));
            let list = a
                .as_object_mut()
                .map(|o| o.entry("ignoredResources").or_insert_with(|| serde_json::json!([])))
                .and_then(|l| l.as_array_mut());
            if let Some(list) = list {
                list.extend(ignored_by_extenders.iter().cloned());
            }
            fit_args = Some(a);
        }
        let mut args: HashMap<&str, &serde_json::Value> =
            profile.plugin_config.iter().map(|c| (c.name.as_str(), &c.args)).collect();
        if let Some(a) = &fit_args {
            args.insert(crate::plugins::names::NODE_RESOURCES_FIT, a);
        }
        let mut instances: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
        let mentioned = multi
            .iter()
            .map(|(n, _)| n.clone())
            .chain(POINTS.iter().flat_map(|pt| point_set(&user, pt.name).enabled.iter().map(|e| e.name.clone())));
        for name in mentioned {
            if instances.contains_key(&name) {
                continue;
            }
            let factory =
                registry.get(&name).ok_or_else(|| format!("profile {pname:?}: plugin {name:?} does not exist"))?;
            let plugin =
                factory(args.get(name.as_str()).copied(), handle).map_err(|e| format!("profile {pname:?}: {e}"))?;
            instances.insert(name, plugin);
        }
        let mut sets = PluginSets::default();
        for pt in POINTS {
            let set = point_set(&user, pt.name);
            let all_disabled = set.disabled.iter().any(|d| d.name == "*");
            let mut list: Vec<(String, i64)> = Vec::new();
            for e in &set.enabled {
                let p = &instances[&e.name];
                if !(pt.has)(p.as_ref()) {
                    return Err(format!("profile {pname:?}: plugin {:?} does not extend {} plugin", e.name, pt.name));
                }
                if !list.iter().any(|(n, _)| n == &e.name) {
                    list.push((e.name.clone(), e.weight.unwrap_or(0)));
                }
            }
            if !all_disabled {
                for (n, w) in &multi {
                    let p = &instances[n];
                    if (pt.has)(p.as_ref())
                        && !set.disabled.iter().any(|d| &d.name == n)
                        && !list.iter().any(|(x, _)| x == n)
                    {
                        list.push((n.clone(), *w));
                    }
                }
            }
            let plugins: Vec<Arc<dyn Plugin>> = list.iter().map(|(n, _)| instances[n].clone()).collect();
            match pt.name {
                "preEnqueue" => sets.pre_enqueue = plugins,
                "queueSort" => {
                    if plugins.len() > 1 {
                        return Err(format!("profile {pname:?}: only one queueSort plugin can be enabled"));
                    }
                    sets.queue_sort = plugins.into_iter().next();
                }
                "preFilter" => sets.pre_filter = plugins,
                "filter" => sets.filter = plugins,
                "postFilter" => sets.post_filter = plugins,
                "preScore" => sets.pre_score = plugins,
                "score" => {
                    sets.score =
                        list.iter().map(|(n, w)| (instances[n].clone(), if *w <= 0 { 1 } else { *w })).collect();
                }
                "reserve" => sets.reserve = plugins,
                "permit" => sets.permit = plugins,
                "preBind" => sets.pre_bind = plugins,
                "bind" => sets.bind = plugins,
                _ => sets.post_bind = plugins,
            }
        }
        let qs = sets.queue_sort.as_ref().map(|p| p.name().to_string()).unwrap_or_default();
        match &queue_sort_name {
            None => queue_sort_name = Some(qs),
            Some(prev) if prev != &qs => {
                return Err("different queue sort plugins for different profiles are not supported".into());
            }
            _ => {}
        }
        let mut fw = Framework::new(&pname, handle.clone(), sets)?;
        fw.percentage_of_nodes_to_score = profile.percentage_of_nodes_to_score;
        out.push(Arc::new(fw));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RecordingApi;

    fn frameworks(yaml: &str) -> Result<Vec<Arc<Framework>>, String> {
        let cfg = SchedulerConfig::from_yaml(yaml).map_err(|e| e.to_string())?;
        build_frameworks(&cfg, &Handle::new(Arc::new(RecordingApi::default())))
    }

    fn point(fw: &Framework, name: &str) -> Vec<String> {
        fw.list_plugins().into_iter().find(|(p, _)| *p == name).map(|(_, v)| v).unwrap_or_default()
    }

    #[test]
    fn default_profile_has_kubernetes_default_plugins_and_weights() {
        let fw = &frameworks("{}").unwrap()[0];
        assert_eq!(fw.profile_name(), "default-scheduler");
        assert_eq!(
            point(fw, "Filter"),
            vec![
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit",
                "PodTopologySpread",
                "InterPodAffinity"
            ]
        );
        assert_eq!(
            point(fw, "Score"),
            vec![
                "TaintToleration:3",
                "NodeAffinity:2",
                "NodeResourcesFit:1",
                "PodTopologySpread:2",
                "InterPodAffinity:2",
                "NodeResourcesBalancedAllocation:1",
                "ImageLocality:1"
            ]
        );
        assert_eq!(point(fw, "PostFilter"), vec!["DefaultPreemption"]);
        assert_eq!(point(fw, "Bind"), vec!["DefaultBinder"]);
        assert_eq!(point(fw, "PreEnqueue"), vec!["SchedulingGates"]);
    }

    #[test]
    fn profiles_enable_disable_and_reweight_plugins() {
        let yaml = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
parallelism: 4
percentageOfNodesToScore: 30
profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  percentageOfNodesToScore: 100
  plugins:
    score:
      disabled:
      - name: NodeResourcesBalancedAllocation
      - name: ImageLocality
      enabled:
      - name: NodeResourcesFit
        weight: 5
    postFilter:
      disabled:
      - name: "*"
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"#;
        let cfg = SchedulerConfig::from_yaml(yaml).unwrap();
        assert_eq!(cfg.parallelism(), 4);
        assert_eq!(cfg.percentage_of_nodes_to_score(), 30);
        let fws = build_frameworks(&cfg, &Handle::new(Arc::new(RecordingApi::default()))).unwrap();
        assert_eq!(fws.len(), 2);
        let packer = &fws[1];
        assert_eq!(packer.profile_name(), "packer");
        assert_eq!(packer.percentage_of_nodes_to_score, Some(100));
        assert_eq!(
            point(packer, "Score"),
            vec![
                "NodeResourcesFit:5",
                "TaintToleration:3",
                "NodeAffinity:2",
                "PodTopologySpread:2",
                "InterPodAffinity:2"
            ]
        );
        assert!(point(packer, "PostFilter").is_empty());
    }

    #[test]
    fn bad_configurations_are_rejected_with_a_reason() {
        let err = frameworks("profiles:\n- plugins:\n    filter:\n      enabled: [{name: Nope}]\n").unwrap_err();
        assert!(err.contains("plugin \"Nope\" does not exist"), "{err}");
        let err =
            frameworks("profiles:\n- plugins:\n    filter:\n      enabled: [{name: ImageLocality}]\n").unwrap_err();
        assert!(err.contains("does not extend filter"), "{err}");
        let err = frameworks("profiles:\n- schedulerName: a\n- schedulerName: a\n").unwrap_err();
        assert!(err.contains("Duplicate"), "{err}");
        let err = frameworks("apiVersion: kubescheduler.config.k8s.io/v1beta3\n").unwrap_err();
        assert!(err.contains("Unsupported value"), "{err}");
        let err = frameworks("percentageOfNodesToScore: 101\n").unwrap_err();
        assert!(err.contains("[0-100]"), "{err}");
        let err = frameworks(
            "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: Bogus}}\n",
        )
        .unwrap_err();
        assert!(err.contains("pluginConfig[0].args.scoringStrategy.type: Unsupported value: \"Bogus\""), "{err}");
        assert!(frameworks("parallelism: [").is_err());
    }

    #[test]
    fn leader_election_defaults_to_kubernetes_lease_and_can_be_disabled() {
        let le = SchedulerConfig::default().leader_election().unwrap();
        assert_eq!((le.namespace.as_str(), le.name.as_str()), ("kube-system", "kube-scheduler"));
        assert_eq!(le.lease_duration, Duration::from_secs(15));
        let cfg = SchedulerConfig::from_yaml("leaderElection:\n  leaderElect: true\n  leaseDuration: 30s\n").unwrap();
        assert_eq!(cfg.leader_election().unwrap().lease_duration, Duration::from_secs(30));
        let cfg = SchedulerConfig::from_yaml("leaderElection:\n  leaderElect: false\n").unwrap();
        assert_eq!(cfg.leader_election(), None);
    }

    /// A valid configuration with every field the upstream test's `validConfig` sets, and
    /// its mutations from `TestValidateKubeSchedulerConfigurationV1` with the errors kube-scheduler
    /// reports for them.
    const VALID: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
parallelism: 8
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
percentageOfNodesToScore: 35
leaderElection:
  leaderElect: true
  leaseDuration: 30s
  renewDeadline: 15s
  retryPeriod: 5s
  resourceLock: leases
  resourceName: name
  resourceNamespace: namespace
profiles:
- schedulerName: me
  plugins:
    queueSort:
      enabled: [{name: PrioritySort}]
    score:
      disabled: [{name: "*"}]
  pluginConfig:
  - name: DefaultPreemption
    args: {minCandidateNodesPercentage: 10, minCandidateNodesAbsolute: 100}
- schedulerName: other
  plugins:
    queueSort:
      enabled: [{name: PrioritySort}]
    bind:
      enabled: [{name: DefaultBinder}]
extenders:
- urlPrefix: http://127.0.0.1:8888/
  prioritizeVerb: prioritize
  weight: 1
"#;

    fn with(edit: impl FnOnce(&mut KubeSchedulerConfiguration)) -> Result<(), String> {
        let mut cfg = SchedulerConfig::from_yaml(VALID).map_err(|e| format!("valid config refused: {e}"))?;
        edit(&mut cfg.component);
        match cfg.validate() {
            Err(ConfigError::Invalid(s)) => Err(s),
            other => other.map_err(|e| e.to_string()),
        }
    }

    fn args(yaml: &str) -> serde_json::Value {
        serde_saphyr::from_str(yaml).unwrap()
    }

    type Edit = Box<dyn FnOnce(&mut KubeSchedulerConfiguration)>;

    #[test]
    fn the_upstream_validation_table_gives_kube_schedulers_field_errors() {
        let cases: Vec<(&str, Edit, &str)> = vec![
            ("good config", Box::new(|_| {}), ""),
            (
                "bad parallelism",
                Box::new(|c| c.parallelism = Some(0)),
                "parallelism: Invalid value: 0: should be an integer value greater than zero",
            ),
            (
                "bad percentageOfNodesToScore",
                Box::new(|c| c.percentage_of_nodes_to_score = Some(-1)),
                "percentageOfNodesToScore: Invalid value: -1: not in valid range [0-100]",
            ),
            (
                "bad resourceLock",
                Box::new(|c| c.leader_election.as_mut().unwrap().resource_lock = Some("configmap".into())),
                "leaderElection.resourceLock: Invalid value: \"configmap\": resourceLock value must be \"leases\"",
            ),
            (
                "lease duration not above the renew deadline",
                Box::new(|c| c.leader_election.as_mut().unwrap().renew_deadline = Some("30s".into())),
                "leaderElection.leaseDuration: Invalid value: \"30s\": LeaseDuration must be greater than RenewDeadline",
            ),
            (
                "bad initial backoff",
                Box::new(|c| c.pod_initial_backoff_seconds = Some(0)),
                "podInitialBackoffSeconds: Invalid value: 0: must be greater than 0",
            ),
            (
                "max backoff below initial",
                Box::new(|c| {
                    c.pod_initial_backoff_seconds = Some(5);
                    c.pod_max_backoff_seconds = Some(1)
                }),
                "podMaxBackoffSeconds: Invalid value: 1: must be greater than or equal to PodInitialBackoffSeconds",
            ),
            (
                "scheduler name not set",
                Box::new(|c| c.profiles[1].scheduler_name = None),
                "profiles[1].schedulerName: Required value",
            ),
            (
                "repeated scheduler name",
                Box::new(|c| c.profiles[1].scheduler_name = Some("me".into())),
                "profiles[1].schedulerName: Duplicate value: profiles[0].schedulerName",
            ),
            (
                "different queue sort",
                Box::new(|c| c.profiles[1].plugins.as_mut().unwrap().queue_sort.enabled[0].name = "AnotherSort".into()),
                "profiles[1].plugins.queueSort: Invalid value: {enabled: [\"AnotherSort\"]}: must be the same for all profiles",
            ),
            (
                "one empty queue sort",
                Box::new(|c| c.profiles[1].plugins.as_mut().unwrap().queue_sort = PluginSet::default()),
                "profiles[1].plugins.queueSort: Invalid value: {enabled: []}: must be the same for all profiles",
            ),
            (
                "extender negative weight",
                Box::new(|c| c.extenders[0].weight = -1),
                "extenders[0].weight: Invalid value: -1: must have a positive weight applied to it",
            ),
            (
                "extender duplicate bind",
                Box::new(|c| {
                    c.extenders[0].bind_verb = "foo".into();
                    let mut e = c.extenders[0].clone();
                    e.url_prefix = "http://127.0.0.1:8889/".into();
                    c.extenders.push(e);
                }),
                "extenders: Invalid value: \"found 2 extenders implementing bind\": only one extender can implement bind",
            ),
            (
                "extender managed resource not an extended resource",
                Box::new(|c| {
                    c.extenders[0]
                        .managed_resources
                        .push(ExtenderManagedResource { name: "foo".into(), ignored_by_scheduler: false })
                }),
                "extenders[0].managedResources[0].name: Invalid value: \"foo\": is an invalid extended resource name",
            ),
            (
                "extender duplicate managed resource",
                Box::new(|c| {
                    let r = ExtenderManagedResource { name: "example.com/foo".into(), ignored_by_scheduler: false };
                    c.extenders[0].managed_resources = vec![r.clone(), r];
                }),
                "extenders[0].managedResources[1].name: Invalid value: \"example.com/foo\": duplicate extender managed resource name",
            ),
            (
                "invalid node percentage in a profile",
                Box::new(|c| c.profiles[0].percentage_of_nodes_to_score = Some(200)),
                "profiles[0].percentageOfNodesToScore: Invalid value: 200: not in valid range [0-100]",
            ),
            (
                "bad plugin args",
                Box::new(|c| {
                    c.profiles[0].plugin_config[0] =
                        PluginConfig { name: "InterPodAffinity".into(), args: args("hardPodAffinityWeight: -1") }
                }),
                "profiles[0].pluginConfig[0].args.hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]",
            ),
            (
                "duplicated pluginConfig",
                Box::new(|c| {
                    let dup = c.profiles[0].plugin_config[0].clone();
                    c.profiles[0].plugin_config.push(dup);
                }),
                "profiles[0].pluginConfig[1]: Duplicate value: \"DefaultPreemption\"",
            ),
            (
                "plugin removed from v1",
                Box::new(|c| {
                    c.profiles[0]
                        .plugins
                        .as_mut()
                        .unwrap()
                        .filter
                        .enabled
                        .push(PluginRef { name: "AzureDiskLimits".into(), weight: None })
                }),
                "profiles[0].plugins.filter.enabled[0]: Invalid value: \"AzureDiskLimits\": was invalid in version \"kubescheduler.config.k8s.io/v1\" (KubeSchedulerConfiguration is version \"kubescheduler.config.k8s.io/v1\")",
            ),
            (
                "two errors are both reported",
                Box::new(|c| {
                    c.parallelism = Some(-1);
                    c.extenders[0].weight = 0;
                }),
                "[parallelism: Invalid value: -1: should be an integer value greater than zero, extenders[0].weight: Invalid value: 0: must have a positive weight applied to it]",
            ),
        ];
        for (name, edit, want) in cases {
            let got = with(edit).err().unwrap_or_default();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn the_upstream_plugin_args_tables_give_kube_schedulers_field_errors() {
        let cases = [
            (
                "DefaultPreemption",
                "minCandidateNodesPercentage: -1",
                "args.minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100]",
            ),
            (
                "DefaultPreemption",
                "minCandidateNodesAbsolute: -1",
                "args.minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
            ),
            (
                "DefaultPreemption",
                "{minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 0}",
                "[profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute, profiles[0].pluginConfig[0].args.minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage]",
            ),
            (
                "InterPodAffinity",
                "hardPodAffinityWeight: 101",
                "args.hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]",
            ),
            ("InterPodAffinity", "hardPodAffinityWeight: 100", ""),
            (
                "PodTopologySpread",
                "{defaultingType: List, defaultConstraints: [{maxSkew: 0, topologyKey: k, whenUnsatisfiable: DoNotSchedule}]}",
                "args.defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)",
            ),
            (
                "PodTopologySpread",
                "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: \"\", whenUnsatisfiable: DoNotSchedule}]}",
                "args.defaultConstraints[0].topologyKey: Required value: can not be empty",
            ),
            (
                "PodTopologySpread",
                "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: k, whenUnsatisfiable: Sometimes}]}",
                "args.defaultConstraints[0].whenUnsatisfiable: Unsupported value: \"Sometimes\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
            ),
            (
                "PodTopologySpread",
                "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule}, {maxSkew: 2, topologyKey: k, whenUnsatisfiable: DoNotSchedule}]}",
                "args.defaultConstraints[1]: Duplicate value: \"{k, DoNotSchedule}\"",
            ),
            (
                "PodTopologySpread",
                "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]}",
                "args.defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod",
            ),
            (
                "PodTopologySpread",
                "{defaultConstraints: [{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule}]}",
                "args.defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty",
            ),
            (
                "PodTopologySpread",
                "defaultingType: Sometimes",
                "args.defaultingType: Unsupported value: \"Sometimes\": supported values: \"List\", \"System\"",
            ),
            (
                "NodeResourcesFit",
                "scoringStrategy: {type: Invalid}",
                "args.scoringStrategy.type: Unsupported value: \"Invalid\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\"",
            ),
            (
                "NodeResourcesFit",
                "scoringStrategy: {type: LeastAllocated, resources: [{name: cpu, weight: 101}]}",
                "args.scoringStrategy.resources[0].weight: Invalid value: 101: resource weight of cpu not in valid range (0, 100]",
            ),
            (
                "NodeResourcesFit",
                "scoringStrategy: {type: RequestedToCapacityRatio}",
                "args.scoringStrategy.requestedToCapacityRatio: Required value: must be specified when type is RequestedToCapacityRatio",
            ),
            (
                "NodeResourcesFit",
                "scoringStrategy: {type: MostAllocated, requestedToCapacityRatio: {shape: []}}",
                "args.scoringStrategy.requestedToCapacityRatio: Forbidden: must be nil when type is not RequestedToCapacityRatio",
            ),
            (
                "NodeResourcesFit",
                "scoringStrategy: {type: RequestedToCapacityRatio, requestedToCapacityRatio: {shape: [{utilization: 50, score: 1}, {utilization: 30, score: 11}]}}",
                "[profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape[1].utilization: Invalid value: 30: values must be sorted in increasing order, profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape[1].score: Invalid value: 11: not in valid range [0, 10]]",
            ),
            (
                "NodeResourcesFit",
                "ignoredResourceGroups: [example.com/aaa]",
                "args.ignoredResourceGroups[0]: Invalid value: \"example.com/aaa\": resource group name can't contain '/'",
            ),
            ("NodeResourcesFit", "scoringStrategy: {type: MostAllocated}", ""),
            (
                "NodeResourcesBalancedAllocation",
                "resources: [{name: cpu, weight: 2}]",
                "args.resources[0].weight: Invalid value: 2: must be 1",
            ),
            (
                "NodeResourcesBalancedAllocation",
                "resources: [{name: cpu}, {name: cpu}]",
                "args.resources[1].name: Duplicate value: \"cpu\"",
            ),
        ];
        for (plugin, yaml, want) in cases {
            let got = with(|c| c.profiles[0].plugin_config[0] = PluginConfig { name: plugin.into(), args: args(yaml) })
                .err()
                .unwrap_or_default();
            let want = if want.is_empty() || want.starts_with('[') {
                want.to_string()
            } else {
                format!("profiles[0].pluginConfig[0].{want}")
            };
            assert_eq!(got, want, "{plugin}: {yaml}");
        }
    }

    #[test]
    fn unknown_fields_are_refused_as_kube_schedulers_strict_decoding_does() {
        let err = SchedulerConfig::from_yaml("profile:\n- schedulerName: a\n").err().unwrap().to_string();
        assert!(err.contains("unknown field") && err.contains("profile"), "{err}");
        let err =
            SchedulerConfig::from_yaml("profiles:\n- schedulerName: a\n  plugin: {}\n").err().unwrap().to_string();
        assert!(err.contains("unknown field"), "{err}");
        assert!(SchedulerConfig::from_yaml("clientConnection: {kubeconfig: /x}\nenableProfiling: false\n").is_ok());
    }

    #[test]
    fn a_single_unnamed_profile_is_the_default_scheduler_but_several_need_names() {
        assert_eq!(SchedulerConfig::from_yaml("profiles:\n- {}\n").unwrap().profile_names(), vec!["default-scheduler"]);
        let err = SchedulerConfig::from_yaml("profiles:\n- schedulerName: a\n- {}\n").err().unwrap().to_string();
        assert!(err.contains("profiles[1].schedulerName: Required value"), "{err}");
    }

    #[test]
    fn a_file_error_names_the_file_the_field_and_the_problem() {
        let dir = std::env::temp_dir().join(format!("skiff-sched-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.yaml");
        std::fs::write(&path, "parallelism: 0\n").unwrap();
        let err = SchedulerConfig::from_file(&path).err().unwrap().to_string();
        assert!(err.starts_with(&path.display().to_string()), "{err}");
        assert!(err.contains("parallelism: Invalid value: 0"), "{err}");
        std::fs::write(&path, "profiles:\n- plugins:\n    score:\n      enabled: [{name: Nope}]\n").unwrap();
        let err = SchedulerConfig::from_file(&path).err().unwrap().to_string();
        assert!(err.contains("plugin \"Nope\" does not exist"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn extenders_managed_resources_ignored_by_the_scheduler_are_not_checked_by_node_resources_fit() {
        let yaml = "extenders:\n- urlPrefix: http://127.0.0.1:1/\n  filterVerb: filter\n  managedResources: [{name: example.com/gpu, ignoredByScheduler: true}]\n";
        let cfg = SchedulerConfig::from_yaml(yaml).unwrap();
        let fws = build_frameworks(&cfg, &Handle::new(Arc::new(RecordingApi::default()))).unwrap();
        let pod = crate::testing::make_pod("p").req(&[("example.com/gpu", "1")]).info();
        let node = crate::testing::make_node("n").capacity(&[("cpu", "1"), ("memory", "1Gi"), ("pods", "10")]).obj();
        let snap = crate::plugins::test_util::snapshot(vec![node], &[]);
        let fits = |fw: &Framework| {
            let mut state = crate::framework::CycleState::new();
            let (_, s, _) = fw.run_pre_filter_plugins(&mut state, &pod, &snap);
            s.is_success() && fw.run_filter_plugins(&state, &pod, &snap.nodes()[0]).is_success()
        };
        assert!(fits(&fws[0]));
        // Without the extender the same pod does not fit.
        let fws =
            build_frameworks(&SchedulerConfig::default(), &Handle::new(Arc::new(RecordingApi::default()))).unwrap();
        assert!(!fits(&fws[0]));
    }

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("5 parsecs").is_err());
    }
}
