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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::framework::{Framework, Handle, Plugin, PluginSets, Registry};
use crate::plugins::{DEFAULT_MULTI_POINT, in_tree_registry};
use crate::queue::QueueConfig;

/// The default profile name.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// A plugin reference in `enabled`/`disabled`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct PluginRef {
    /// Plugin name (`"*"` in `disabled` means all).
    pub name: String,
    /// Score weight.
    #[serde(default)]
    pub weight: Option<i64>,
}

/// `PluginSet`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
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
#[serde(rename_all = "camelCase")]
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
pub struct PluginConfig {
    /// Plugin name.
    pub name: String,
    /// Plugin-specific args.
    #[serde(default)]
    pub args: serde_json::Value,
}

/// `KubeSchedulerProfile`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
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
#[serde(rename_all = "camelCase")]
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
    /// Lease name (`kube-scheduler`).
    pub resource_name: Option<String>,
    /// Lease namespace (`kube-system`).
    pub resource_namespace: Option<String>,
}

fn yes() -> bool {
    true
}

/// `KubeSchedulerConfiguration` (the supported subset).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
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

    /// Reads and parses a configuration file.
    ///
    /// # Errors
    /// I/O errors and [`ConfigError`]s, with the path.
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<Self> {
        let s = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        Self::from_yaml(&s).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Checks values the way kube-scheduler's validation does (the subset we read).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] describing the first problem.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.component;
        let bad = |s: String| Err(ConfigError::Invalid(s));
        if let Some(v) = c.api_version.as_deref()
            && v != "kubescheduler.config.k8s.io/v1"
        {
            return bad(format!(
                "apiVersion: Unsupported value: {v:?}: supported values: \"kubescheduler.config.k8s.io/v1\""
            ));
        }
        if let Some(k) = c.kind.as_deref()
            && k != "KubeSchedulerConfiguration"
        {
            return bad(format!("kind: Unsupported value: {k:?}"));
        }
        if c.parallelism.is_some_and(|p| p <= 0) {
            return bad("parallelism: Invalid value: should be an integer greater than 0".into());
        }
        let pct_ok = |p: Option<i32>| p.is_none_or(|p| (0..=100).contains(&p));
        if !pct_ok(c.percentage_of_nodes_to_score) {
            return bad("percentageOfNodesToScore: Invalid value: not in valid range [0-100]".into());
        }
        if c.pod_initial_backoff_seconds.is_some_and(|s| s <= 0) || c.pod_max_backoff_seconds.is_some_and(|s| s <= 0) {
            return bad("podInitialBackoffSeconds/podMaxBackoffSeconds: must be greater than 0".into());
        }
        let mut names = HashSet::new();
        for (i, p) in c.profiles.iter().enumerate() {
            let name = p.scheduler_name.clone().unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into());
            if !names.insert(name.clone()) {
                return bad(format!("profiles[{i}].schedulerName: Duplicate value: {name:?}"));
            }
            if !pct_ok(p.percentage_of_nodes_to_score) {
                return bad(format!(
                    "profiles[{i}].percentageOfNodesToScore: Invalid value: not in valid range [0-100]"
                ));
            }
        }
        if let Some(le) = &c.leader_election {
            for d in [&le.lease_duration, &le.renew_deadline, &le.retry_period].into_iter().flatten() {
                parse_duration(d).map_err(ConfigError::Invalid)?;
            }
        }
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
        self.component
            .profiles
            .iter()
            .map(|p| p.scheduler_name.clone().unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into()))
            .collect()
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
    for profile in profiles {
        let pname = profile.scheduler_name.clone().unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into());
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
        let args: HashMap<&str, &serde_json::Value> =
            profile.plugin_config.iter().map(|c| (c.name.as_str(), &c.args)).collect();
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
        assert!(err.contains("NodeResourcesFit"), "{err}");
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

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("5 parsecs").is_err());
    }
}
