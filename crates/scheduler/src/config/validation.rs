//! `ValidateKubeSchedulerConfiguration` (`pkg/scheduler/apis/config/validation`): every problem
//! of a configuration as a field error with kube-scheduler's path and message, after v1's
//! defaulting (values left out take their defaults first, so only what was written can fail).
//!
//! Errors render as `k8s.io/apimachinery`'s `field.Error` does: `PATH: Invalid value: VALUE:
//! DETAIL`, `PATH: Unsupported value: VALUE: supported values: ...`, `PATH: Required value: ...`,
//! `PATH: Duplicate value: VALUE`, `PATH: Forbidden: ...`.

use std::collections::HashSet;

use serde_json::Value;
use skiff_apimachinery::names::is_qualified_name;

use super::{
    DEFAULT_SCHEDULER_NAME, Extender, KubeSchedulerConfiguration, KubeSchedulerProfile, PluginSet, parse_duration,
};

/// The only `apiVersion` read.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";

/// Plugins removed from the v1 API (`invalidPluginsByVersion`).
const REMOVED_PLUGINS: &[&str] = &["AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits"];

/// Highest `score` of a `RequestedToCapacityRatio` shape point (`MaxCustomPriorityScore`).
const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;

fn invalid(path: &str, value: impl std::fmt::Display, detail: &str) -> String {
    format!("{path}: Invalid value: {value}: {detail}")
}

fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn unsupported(path: &str, value: &str, supported: &[&str]) -> String {
    let list: Vec<String> = supported.iter().map(|s| quoted(s)).collect();
    format!("{path}: Unsupported value: {}: supported values: {}", quoted(value), list.join(", "))
}

fn required(path: &str, detail: &str) -> String {
    if detail.is_empty() { format!("{path}: Required value") } else { format!("{path}: Required value: {detail}") }
}

/// The `schedulerName` profile `i` answers to: v1 defaults it to `default-scheduler` only when
/// there is a single profile (several unnamed profiles would be ambiguous); empty otherwise.
pub fn effective_scheduler_name(profiles: &[KubeSchedulerProfile], i: usize) -> String {
    match profiles.get(i).and_then(|p| p.scheduler_name.clone()) {
        Some(name) => name,
        None if profiles.len() <= 1 => DEFAULT_SCHEDULER_NAME.into(),
        None => String::new(),
    }
}

/// Every problem of `c`, in kube-scheduler's order; empty when valid.
pub fn validate(c: &KubeSchedulerConfiguration) -> Vec<String> {
    let mut errs = Vec::new();
    if let Some(v) = c.api_version.as_deref()
        && v != API_VERSION
    {
        errs.push(unsupported("apiVersion", v, &[API_VERSION]));
    }
    if let Some(k) = c.kind.as_deref()
        && k != "KubeSchedulerConfiguration"
    {
        errs.push(unsupported("kind", k, &["KubeSchedulerConfiguration"]));
    }
    validate_leader_election(c, &mut errs);
    if let Some(p) = c.parallelism
        && p <= 0
    {
        errs.push(invalid("parallelism", p, "should be an integer value greater than zero"));
    }
    let mut seen: Vec<(String, usize)> = Vec::new();
    for (i, profile) in c.profiles.iter().enumerate() {
        let path = format!("profiles[{i}]");
        let name = effective_scheduler_name(&c.profiles, i);
        if name.is_empty() {
            errs.push(required(&format!("{path}.schedulerName"), ""));
        }
        if let Some(pct) = profile.percentage_of_nodes_to_score {
            validate_percentage(&format!("{path}.percentageOfNodesToScore"), pct, &mut errs);
        }
        validate_plugin_config(&path, profile, &mut errs);
        if let Some((_, j)) = seen.iter().find(|(n, _)| *n == name) {
            errs.push(format!("{path}.schedulerName: Duplicate value: profiles[{j}].schedulerName"));
        }
        seen.push((name, i));
    }
    validate_common_queue_sort(&c.profiles, &mut errs);
    if let Some(pct) = c.percentage_of_nodes_to_score {
        validate_percentage("percentageOfNodesToScore", pct, &mut errs);
    }
    let initial = c.pod_initial_backoff_seconds.unwrap_or(1);
    let max = c.pod_max_backoff_seconds.unwrap_or(10);
    if initial <= 0 {
        errs.push(invalid("podInitialBackoffSeconds", initial, "must be greater than 0"));
    }
    if max < initial {
        errs.push(invalid("podMaxBackoffSeconds", max, "must be greater than or equal to PodInitialBackoffSeconds"));
    }
    validate_extenders(&c.extenders, &mut errs);
    errs
}

fn validate_percentage(path: &str, pct: i32, errs: &mut Vec<String>) {
    if !(0..=100).contains(&pct) {
        errs.push(invalid(path, pct, "not in valid range [0-100]"));
    }
}

/// component-base's `ValidateLeaderElectionConfiguration`, with the scheduler's `leases`-only
/// lock; checked only when leader election is on, as upstream.
fn validate_leader_election(c: &KubeSchedulerConfiguration, errs: &mut Vec<String>) {
    let Some(le) = &c.leader_election else { return };
    let mut durations = [None, None, None];
    for (k, (field, v)) in [
        ("leaseDuration", &le.lease_duration),
        ("renewDeadline", &le.renew_deadline),
        ("retryPeriod", &le.retry_period),
    ]
    .into_iter()
    .enumerate()
    {
        let Some(v) = v else { continue };
        match parse_duration(v) {
            Ok(d) => durations[k] = Some(d),
            Err(e) => errs.push(invalid(&format!("leaderElection.{field}"), quoted(v), &e)),
        }
    }
    if !le.leader_elect {
        return;
    }
    for (k, field) in ["leaseDuration", "renewDeadline", "retryPeriod"].iter().enumerate() {
        if durations[k].is_some_and(|d| d.is_zero()) {
            let raw = [&le.lease_duration, &le.renew_deadline, &le.retry_period][k].clone().unwrap_or_default();
            errs.push(invalid(&format!("leaderElection.{field}"), quoted(&raw), "must be greater than zero"));
        }
    }
    let lease = durations[0].unwrap_or(std::time::Duration::from_secs(15));
    let renew = durations[1].unwrap_or(std::time::Duration::from_secs(10));
    if lease <= renew {
        let raw = le.lease_duration.clone().unwrap_or_else(|| "15s".into());
        errs.push(invalid(
            "leaderElection.leaseDuration",
            quoted(&raw),
            "LeaseDuration must be greater than RenewDeadline",
        ));
    }
    if let Some(lock) = le.resource_lock.as_deref()
        && lock != "leases"
    {
        errs.push(invalid("leaderElection.resourceLock", quoted(lock), "resourceLock value must be \"leases\""));
    }
    for (field, v) in [("resourceName", &le.resource_name), ("resourceNamespace", &le.resource_namespace)] {
        if v.as_deref() == Some("") {
            errs.push(invalid(&format!("leaderElection.{field}"), "\"\"", &format!("{field} is required")));
        }
    }
}

fn plugin_sets(p: &super::Plugins) -> [(&'static str, &PluginSet); 12] {
    [
        ("preEnqueue", &p.pre_enqueue),
        ("queueSort", &p.queue_sort),
        ("preFilter", &p.pre_filter),
        ("filter", &p.filter),
        ("postFilter", &p.post_filter),
        ("preScore", &p.pre_score),
        ("score", &p.score),
        ("reserve", &p.reserve),
        ("permit", &p.permit),
        ("preBind", &p.pre_bind),
        ("bind", &p.bind),
        ("postBind", &p.post_bind),
    ]
}

fn removed_plugin(path: &str, name: &str) -> Option<String> {
    REMOVED_PLUGINS.contains(&name).then(|| {
        invalid(
            path,
            quoted(name),
            &format!("was invalid in version {0:?} (KubeSchedulerConfiguration is version {0:?})", API_VERSION),
        )
    })
}

fn validate_plugin_config(path: &str, profile: &KubeSchedulerProfile, errs: &mut Vec<String>) {
    if let Some(plugins) = &profile.plugins {
        for (point, set) in plugin_sets(plugins).into_iter().chain([("multiPoint", &plugins.multi_point)]) {
            for (j, p) in set.enabled.iter().enumerate() {
                errs.extend(removed_plugin(&format!("{path}.plugins.{point}.enabled[{j}]"), &p.name));
            }
        }
    }
    let mut seen = HashSet::new();
    for (j, pc) in profile.plugin_config.iter().enumerate() {
        let pc_path = format!("{path}.pluginConfig[{j}]");
        if !seen.insert(pc.name.as_str()) {
            errs.push(format!("{pc_path}: Duplicate value: {}", quoted(&pc.name)));
        }
        if let Some(e) = removed_plugin(&pc_path, &pc.name) {
            errs.push(e);
            continue;
        }
        let args_path = format!("{pc_path}.args");
        let args = &pc.args;
        if !(args.is_null() || args.is_object()) {
            errs.push(invalid(&args_path, args, "has to match plugin args"));
            continue;
        }
        match pc.name.as_str() {
            "DefaultPreemption" => validate_default_preemption_args(&args_path, args, errs),
            "InterPodAffinity" => validate_inter_pod_affinity_args(&args_path, args, errs),
            "PodTopologySpread" => validate_pod_topology_spread_args(&args_path, args, errs),
            "NodeResourcesFit" => validate_node_resources_fit_args(&args_path, args, errs),
            "NodeResourcesBalancedAllocation" => validate_balanced_allocation_args(&args_path, args, errs),
            _ => {}
        }
    }
}

fn int_or(args: &Value, key: &str, default: i64) -> i64 {
    args.get(key).and_then(Value::as_i64).unwrap_or(default)
}

/// `ValidateDefaultPreemptionArgs` (defaults: 10 %, 100 nodes).
fn validate_default_preemption_args(path: &str, args: &Value, errs: &mut Vec<String>) {
    let pct = int_or(args, "minCandidateNodesPercentage", 10);
    let abs = int_or(args, "minCandidateNodesAbsolute", 100);
    let pct_path = format!("{path}.minCandidateNodesPercentage");
    let abs_path = format!("{path}.minCandidateNodesAbsolute");
    if !(0..=100).contains(&pct) {
        errs.push(invalid(&pct_path, pct, "not in valid range [0, 100]"));
    }
    if abs < 0 {
        errs.push(invalid(&abs_path, abs, "not in valid range [0, inf)"));
    }
    if pct == 0 && abs == 0 {
        errs.push(invalid(&pct_path, pct, "cannot be zero at the same time as minCandidateNodesAbsolute"));
        errs.push(invalid(&abs_path, abs, "cannot be zero at the same time as minCandidateNodesPercentage"));
    }
}

/// `ValidateInterPodAffinityArgs` (default weight 1).
fn validate_inter_pod_affinity_args(path: &str, args: &Value, errs: &mut Vec<String>) {
    let w = int_or(args, "hardPodAffinityWeight", 1);
    if !(0..=100).contains(&w) {
        errs.push(invalid(&format!("{path}.hardPodAffinityWeight"), w, "not in valid range [0, 100]"));
    }
}

/// `ValidatePodTopologySpreadArgs` (default `defaultingType: System`).
fn validate_pod_topology_spread_args(path: &str, args: &Value, errs: &mut Vec<String>) {
    let constraints = args.get("defaultConstraints").and_then(Value::as_array).cloned().unwrap_or_default();
    let defaulting = args.get("defaultingType").and_then(Value::as_str).unwrap_or("System");
    let dt_path = format!("{path}.defaultingType");
    if defaulting != "System" && defaulting != "List" {
        errs.push(unsupported(&dt_path, defaulting, &["List", "System"]));
    } else if defaulting == "System" && !constraints.is_empty() {
        errs.push(invalid(&dt_path, quoted(defaulting), "when .defaultConstraints are not empty"));
    }
    let dc_path = format!("{path}.defaultConstraints");
    for (i, c) in constraints.iter().enumerate() {
        let p = format!("{dc_path}[{i}]");
        let skew = int_or(c, "maxSkew", 0);
        if skew <= 0 {
            errs.push(invalid(&format!("{p}.maxSkew"), skew, "not in valid range (0, inf)"));
        }
        let key = c.get("topologyKey").and_then(Value::as_str).unwrap_or("");
        if key.is_empty() {
            errs.push(required(&format!("{p}.topologyKey"), "can not be empty"));
        } else {
            for e in is_qualified_name(key) {
                errs.push(invalid(&format!("{p}.topologyKey"), quoted(key), &e));
            }
        }
        let action = c.get("whenUnsatisfiable").and_then(Value::as_str).unwrap_or("");
        if action.is_empty() {
            errs.push(required(&format!("{p}.whenUnsatisfiable"), "can not be empty"));
        } else if action != "DoNotSchedule" && action != "ScheduleAnyway" {
            errs.push(unsupported(&format!("{p}.whenUnsatisfiable"), action, &["DoNotSchedule", "ScheduleAnyway"]));
        }
        if c.get("labelSelector").is_some_and(|s| !s.is_null()) {
            errs.push(format!(
                "{p}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"
            ));
        }
        let repeated = constraints[..i].iter().any(|o| {
            o.get("topologyKey").and_then(Value::as_str).unwrap_or("") == key
                && o.get("whenUnsatisfiable").and_then(Value::as_str).unwrap_or("") == action
        });
        if repeated {
            errs.push(format!("{p}: Duplicate value: {}", quoted(&format!("{{{key}, {action}}}"))));
        }
    }
}

fn validate_shape(path: &str, shape: Option<&Vec<Value>>, errs: &mut Vec<String>) {
    let shape = shape.cloned().unwrap_or_default();
    if shape.is_empty() {
        errs.push(required(path, "at least one point must be specified"));
        return;
    }
    let util = |p: &Value| int_or(p, "utilization", 0);
    let score = |p: &Value| int_or(p, "score", 0);
    for i in 1..shape.len() {
        if util(&shape[i - 1]) >= util(&shape[i]) {
            errs.push(invalid(
                &format!("{path}[{i}].utilization"),
                util(&shape[i]),
                "values must be sorted in increasing order",
            ));
            break;
        }
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=100).contains(&util(p)) {
            errs.push(invalid(&format!("{path}[{i}].utilization"), util(p), "not in valid range [0, 100]"));
        }
        if !(0..=MAX_CUSTOM_PRIORITY_SCORE).contains(&score(p)) {
            errs.push(invalid(
                &format!("{path}[{i}].score"),
                score(p),
                &format!("not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"),
            ));
        }
    }
}

/// `ValidateNodeResourcesFitArgs` (default strategy: LeastAllocated over cpu and memory).
fn validate_node_resources_fit_args(path: &str, args: &Value, errs: &mut Vec<String>) {
    let strings = |key: &str| -> Vec<String> {
        args.get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect())
            .unwrap_or_default()
    };
    for (i, r) in strings("ignoredResources").iter().enumerate() {
        for e in is_qualified_name(r) {
            errs.push(invalid(&format!("{path}.ignoredResources[{i}]"), quoted(r), &e));
        }
    }
    for (i, g) in strings("ignoredResourceGroups").iter().enumerate() {
        let p = format!("{path}.ignoredResourceGroups[{i}]");
        if g.contains('/') {
            errs.push(invalid(&p, quoted(g), "resource group name can't contain '/'"));
        }
        for e in is_qualified_name(g) {
            errs.push(invalid(&p, quoted(g), &e));
        }
    }
    let Some(strategy) = args.get("scoringStrategy").filter(|s| !s.is_null()) else { return };
    let sp = format!("{path}.scoringStrategy");
    let ty = strategy.get("type").and_then(Value::as_str).unwrap_or("");
    const TYPES: &[&str] = &["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"];
    if !TYPES.contains(&ty) {
        errs.push(unsupported(&format!("{sp}.type"), ty, TYPES));
    }
    for (i, r) in strategy.get("resources").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let w = int_or(r, "weight", 0);
        if w <= 0 || w > 100 {
            let name = r.get("name").and_then(Value::as_str).unwrap_or("");
            errs.push(invalid(
                &format!("{sp}.resources[{i}].weight"),
                w,
                &format!("resource weight of {name} not in valid range (0, 100]"),
            ));
        }
    }
    let rtcr = strategy.get("requestedToCapacityRatio").filter(|v| !v.is_null());
    if ty == "RequestedToCapacityRatio" {
        match rtcr {
            None => errs.push(required(
                &format!("{sp}.requestedToCapacityRatio"),
                "must be specified when type is RequestedToCapacityRatio",
            )),
            Some(r) => validate_shape(
                &format!("{sp}.requestedToCapacityRatio.shape"),
                r.get("shape").and_then(Value::as_array),
                errs,
            ),
        }
    } else if rtcr.is_some() {
        errs.push(format!(
            "{sp}.requestedToCapacityRatio: Forbidden: must be nil when type is not RequestedToCapacityRatio"
        ));
    }
}

/// `ValidateNodeResourcesBalancedAllocationArgs` (a weight left out defaults to 1).
fn validate_balanced_allocation_args(path: &str, args: &Value, errs: &mut Vec<String>) {
    let mut seen = HashSet::new();
    for (i, r) in args.get("resources").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        if !seen.insert(name.to_string()) {
            errs.push(format!("{path}.resources[{i}].name: Duplicate value: {}", quoted(name)));
        }
        let w = int_or(r, "weight", 1);
        if w != 1 {
            errs.push(invalid(&format!("{path}.resources[{i}].weight"), w, "must be 1"));
        }
    }
}

/// `validateCommonQueueSort`: every profile must sort the queue the same way (there is one
/// queue).
fn validate_common_queue_sort(profiles: &[KubeSchedulerProfile], errs: &mut Vec<String>) {
    let Some(first) = profiles.first() else { return };
    let canon = first.plugins.as_ref().map(|p| p.queue_sort.clone()).unwrap_or_default();
    if canon.enabled.len() > 1 {
        errs.push(invalid(
            "profiles[0].plugins.queueSort.Enabled",
            canon.enabled.len(),
            "only one queue sort plugin can be enabled",
        ));
    }
    let name = canon.enabled.first().map(|p| p.name.clone()).unwrap_or_default();
    let canon_args = first.plugin_config.iter().find(|c| !name.is_empty() && c.name == name).map(|c| &c.args);
    for (i, p) in profiles.iter().enumerate().skip(1) {
        let curr = p.plugins.as_ref().map(|p| p.queue_sort.clone()).unwrap_or_default();
        if curr != canon {
            let names: Vec<&str> = curr.enabled.iter().map(|p| p.name.as_str()).collect();
            errs.push(invalid(
                &format!("profiles[{i}].plugins.queueSort"),
                format!("{{enabled: {names:?}}}"),
                "must be the same for all profiles",
            ));
        }
        for c in &p.plugin_config {
            if c.name == name && Some(&c.args) != canon_args {
                errs.push(invalid(
                    &format!("profiles[{i}].pluginConfig.args"),
                    &c.args,
                    "queueSort must be the same for all profiles",
                ));
            }
        }
    }
}

/// `validateExtenders`, plus what skiff checks before the first call: the URL and timeout.
fn validate_extenders(extenders: &[Extender], errs: &mut Vec<String>) {
    let mut binders = 0;
    let mut managed = HashSet::new();
    for (i, e) in extenders.iter().enumerate() {
        let path = format!("extenders[{i}]");
        if !(e.url_prefix.starts_with("http://") || e.url_prefix.starts_with("https://"))
            || e.url_prefix.parse::<hyper::Uri>().is_err()
        {
            errs.push(invalid(
                &format!("{path}.urlPrefix"),
                quoted(&e.url_prefix),
                "must be an http:// or https:// URL",
            ));
        }
        if let Some(t) = &e.http_timeout
            && let Err(msg) = parse_duration(t)
        {
            errs.push(invalid(&format!("{path}.httpTimeout"), quoted(t), &msg));
        }
        if !e.prioritize_verb.is_empty() && e.weight <= 0 {
            errs.push(invalid(&format!("{path}.weight"), e.weight, "must have a positive weight applied to it"));
        }
        if !e.bind_verb.is_empty() {
            binders += 1;
        }
        for (j, r) in e.managed_resources.iter().enumerate() {
            let p = format!("{path}.managedResources[{j}].name");
            let problems = is_qualified_name(&r.name);
            if !problems.is_empty() {
                errs.extend(problems.iter().map(|msg| invalid(&p, quoted(&r.name), msg)));
            } else if !is_extended_resource_name(&r.name) {
                errs.push(invalid(&p, quoted(&r.name), "is an invalid extended resource name"));
            }
            if !managed.insert(r.name.clone()) {
                errs.push(invalid(&p, quoted(&r.name), "duplicate extender managed resource name"));
            }
        }
    }
    if binders > 1 {
        errs.push(invalid(
            "extenders",
            quoted(&format!("found {binders} extenders implementing bind")),
            "only one extender can implement bind",
        ));
    }
}

/// `IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io/`, not a quota
/// `requests.` name.
pub fn is_extended_resource_name(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    !native && !name.starts_with("requests.") && is_qualified_name(&format!("requests.{name}")).is_empty()
}
