//! DaemonSet helpers (`pkg/controller/daemon/util/daemonset_util.go` and the placement
//! predicates of `daemon_controller.go`): which nodes should run a daemon pod, the tolerations
//! every daemon pod gets, the pod template with its generation and hash labels, the
//! `metadata.name` node affinity that sends a pod to its node through the scheduler, and the
//! rolling-update counts.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec,
    PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use skiff_apimachinery::scheduling::{RequiredNodeAffinity, find_untolerated_taint};

use crate::deployment::util::scaled_value_from_int_or_percent;
use crate::util::labels_of;

/// The pod label carrying the DaemonSet's template generation
/// (`extensions.DaemonSetTemplateGenerationKey`).
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
/// The label carrying the hash of the ControllerRevision a pod was made from
/// (`apps.DefaultDaemonSetUniqueLabelKey`, also `controller-revision-hash` on the revision).
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller-revision-hash";
/// The DaemonSet annotation holding its template generation (`appsv1.DeprecatedTemplateGeneration`;
/// the API server keeps it, see `skiff-apiserver`'s DaemonSet strategy).
pub const TEMPLATE_GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// Taint keys of `k8s.io/api/core/v1/well_known_taints.go`.
pub mod taints {
    /// The node is not ready.
    pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
    /// The node controller cannot reach the node.
    pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
    /// The node is cordoned.
    pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
    /// The node's memory is low.
    pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
    /// The node's disk is low.
    pub const DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
    /// The node is running out of process ids.
    pub const PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
    /// The node's network is not configured.
    pub const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";
}

fn exists_toleration(key: &str, effect: &str) -> Toleration {
    Toleration {
        key: Some(key.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some(effect.to_string()),
        ..Default::default()
    }
}

/// `v1helper.AddOrUpdateTolerationInPodSpec`: a toleration with the same key, operator, value
/// and effect is replaced, otherwise the toleration is appended.
fn add_or_update_toleration(spec: &mut PodSpec, toleration: Toleration) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let same = |t: &Toleration| {
        t.key == toleration.key
            && t.operator.as_deref().unwrap_or("Equal") == toleration.operator.as_deref().unwrap_or("Equal")
            && t.value.as_deref().unwrap_or_default() == toleration.value.as_deref().unwrap_or_default()
            && t.effect.as_deref().unwrap_or_default() == toleration.effect.as_deref().unwrap_or_default()
    };
    match tolerations.iter_mut().find(|t| same(t)) {
        Some(t) => *t = toleration,
        None => tolerations.push(toleration),
    }
}

/// `util.AddOrUpdateDaemonPodTolerations`: daemon pods survive a node going not-ready or
/// unreachable (no NoExecute eviction) and are placed on nodes under disk, memory or pid
/// pressure and on cordoned nodes; a hostNetwork daemon (often the network plugin itself) also on
/// nodes whose network is not up yet.
pub fn add_or_update_daemon_pod_tolerations(spec: &mut PodSpec) {
    add_or_update_toleration(spec, exists_toleration(taints::NOT_READY, "NoExecute"));
    add_or_update_toleration(spec, exists_toleration(taints::UNREACHABLE, "NoExecute"));
    add_or_update_toleration(spec, exists_toleration(taints::DISK_PRESSURE, "NoSchedule"));
    add_or_update_toleration(spec, exists_toleration(taints::MEMORY_PRESSURE, "NoSchedule"));
    add_or_update_toleration(spec, exists_toleration(taints::PID_PRESSURE, "NoSchedule"));
    add_or_update_toleration(spec, exists_toleration(taints::UNSCHEDULABLE, "NoSchedule"));
    if spec.host_network == Some(true) {
        add_or_update_toleration(spec, exists_toleration(taints::NETWORK_UNAVAILABLE, "NoSchedule"));
    }
}

/// `util.GetTemplateGeneration`: the DaemonSet's template generation, if its annotation holds a
/// number.
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata.annotations.as_ref()?.get(TEMPLATE_GENERATION_ANNOTATION)?.parse().ok()
}

/// The DaemonSet's pod template.
pub fn template_of(ds: &DaemonSet) -> PodTemplateSpec {
    ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default()
}

/// `util.CreatePodTemplate`: the template with the daemon tolerations and the
/// `pod-template-generation` and `controller-revision-hash` labels.
pub fn create_pod_template(template: &PodTemplateSpec, generation: Option<i64>, hash: &str) -> PodTemplateSpec {
    let mut t = template.clone();
    add_or_update_daemon_pod_tolerations(t.spec.get_or_insert_with(Default::default));
    let labels = t.metadata.get_or_insert_with(Default::default).labels.get_or_insert_with(BTreeMap::new);
    if let Some(g) = generation {
        labels.insert(TEMPLATE_GENERATION_LABEL.to_string(), g.to_string());
    }
    if !hash.is_empty() {
        labels.insert(CONTROLLER_REVISION_HASH_LABEL.to_string(), hash.to_string());
    }
    t
}

fn node_name_term(node_name: &str) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".to_string(),
            operator: "In".to_string(),
            values: Some(vec![node_name.to_string()]),
        }]),
        ..Default::default()
    }
}

/// `util.ReplaceDaemonSetPodNodeNameNodeAffinity`: the pod's required node affinity becomes the
/// single term `metadata.name In [node]`, so the scheduler can place it nowhere else (the
/// controller has already checked the pod's own node constraints against that node).
pub fn replace_daemon_set_pod_node_name_node_affinity(affinity: Option<Affinity>, node_name: &str) -> Affinity {
    let mut affinity = affinity.unwrap_or_default();
    let na = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    na.required_during_scheduling_ignored_during_execution =
        Some(NodeSelector { node_selector_terms: vec![node_name_term(node_name)] });
    affinity
}

/// `util.GetTargetNodeName`: the node a daemon pod is for: its `spec.nodeName` once bound, else
/// the value of its `metadata.name In [..]` node affinity term.
///
/// # Errors
/// A pod with neither, or whose term names more than one node.
pub fn target_node_name(pod: &Pod) -> Result<String, String> {
    let spec = pod.spec.as_ref();
    if let Some(n) = spec.and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()) {
        return Ok(n.to_string());
    }
    let terms = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|ns| ns.node_selector_terms.as_slice())
        .unwrap_or_default();
    for term in terms {
        for r in term.match_fields.iter().flatten() {
            if r.key == "metadata.name" && r.operator == "In" {
                let values = r.values.as_deref().unwrap_or_default();
                if values.len() != 1 {
                    return Err(format!(
                        "the matchFields value of 'metadata.name' is not unique for pod {}",
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ));
                }
                return Ok(values[0].clone());
            }
        }
    }
    Err(format!("no node name found for pod {}", pod.metadata.name.as_deref().unwrap_or_default()))
}

/// The pod the DaemonSet would run on `node` (`NewPod`): its template with the node name set
/// and the daemon tolerations added.
fn new_pod(ds: &DaemonSet, node_name: &str) -> Pod {
    let t = template_of(ds);
    let mut spec = t.spec.unwrap_or_default();
    spec.node_name = Some(node_name.to_string());
    add_or_update_daemon_pod_tolerations(&mut spec);
    Pod { metadata: t.metadata.unwrap_or_default(), spec: Some(spec), status: None }
}

/// `NodeShouldRunDaemonPod`: `(should_run, should_continue_running)`. A node runs the daemon
/// pod when the template's node name (if any), node selector, required node affinity and
/// taints (NoSchedule and NoExecute, after the daemon tolerations) admit it; a running pod may
/// stay while only NoSchedule taints are untolerated (NoSchedule never evicts).
pub fn node_should_run_daemon_pod(node: &Node, ds: &DaemonSet) -> (bool, bool) {
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let template_node = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    if !template_node.is_empty() && template_node != node_name {
        return (false, false);
    }
    let pod = new_pod(ds, node_name);
    if !RequiredNodeAffinity::from_pod(&pod).matches(node) {
        return (false, false);
    }
    let node_taints = node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default();
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    let fits_taints =
        find_untolerated_taint(node_taints, tolerations, |t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .is_none();
    if fits_taints {
        return (true, true);
    }
    let untolerated_no_execute = find_untolerated_taint(node_taints, tolerations, |t| t.effect == "NoExecute");
    (false, untolerated_no_execute.is_none())
}

/// `util.IsPodUpdated`: the pod carries the current revision's hash or the current template
/// generation.
pub fn is_pod_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let labels = labels_of(&pod.metadata);
    let template_matches = generation.is_some_and(|g| labels.get(TEMPLATE_GENERATION_LABEL) == Some(&g.to_string()));
    let hash_matches = !hash.is_empty() && labels.get(CONTROLLER_REVISION_HASH_LABEL).map(String::as_str) == Some(hash);
    hash_matches || template_matches
}

fn rolling_update_value(ds: &DaemonSet, surge: bool) -> Option<IntOrString> {
    let strategy = ds.spec.as_ref()?.update_strategy.as_ref()?;
    if strategy.type_.as_deref().unwrap_or("RollingUpdate") != "RollingUpdate" {
        return None;
    }
    let ru = strategy.rolling_update.as_ref()?;
    if surge { ru.max_surge.clone() } else { ru.max_unavailable.clone() }
}

/// `util.SurgeCount`: `maxSurge` of `number_to_schedule` nodes, percentages rounded up; 0 unless
/// the strategy is RollingUpdate.
///
/// # Errors
/// A malformed percentage.
pub fn surge_count(ds: &DaemonSet, number_to_schedule: i32) -> Result<i32, String> {
    match rolling_update_value(ds, true) {
        Some(v) => scaled_value_from_int_or_percent(&v, number_to_schedule, true),
        None => Ok(0),
    }
}

/// `util.UnavailableCount`: `maxUnavailable` of `number_to_schedule` nodes, percentages rounded
/// up; 0 unless the strategy is RollingUpdate.
///
/// # Errors
/// A malformed percentage.
pub fn unavailable_count(ds: &DaemonSet, number_to_schedule: i32) -> Result<i32, String> {
    match rolling_update_value(ds, false) {
        Some(v) => scaled_value_from_int_or_percent(&v, number_to_schedule, true),
        None => Ok(0),
    }
}

/// `util.AllowsSurge`: the rolling update may run a second pod on a node.
pub fn allows_surge(ds: &DaemonSet) -> bool {
    surge_count(ds, 1).is_ok_and(|s| s != 0)
}

/// `podByCreationTimestampAndPhase`: bound pods first, then oldest first, then by name.
pub fn by_creation_timestamp_and_phase(a: &Pod, b: &Pod) -> Ordering {
    let bound = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    bound(b)
        .cmp(&bound(a))
        .then_with(|| {
            let t = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            t(a).cmp(&t(b))
        })
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::tests::node;

    fn ds(spec: PodSpec) -> DaemonSet {
        let mut ds = DaemonSet::default();
        ds.spec.get_or_insert_with(Default::default).template.spec = Some(spec);
        ds
    }

    #[test]
    fn daemon_pods_tolerate_node_conditions_and_cordons_and_host_network_pods_a_missing_network() {
        let mut spec = PodSpec::default();
        add_or_update_daemon_pod_tolerations(&mut spec);
        let keys: Vec<_> = spec.tolerations.iter().flatten().map(|t| t.key.clone().unwrap()).collect();
        assert_eq!(
            keys,
            [
                taints::NOT_READY,
                taints::UNREACHABLE,
                taints::DISK_PRESSURE,
                taints::MEMORY_PRESSURE,
                taints::PID_PRESSURE,
                taints::UNSCHEDULABLE
            ]
        );
        // Applying twice changes nothing.
        add_or_update_daemon_pod_tolerations(&mut spec);
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 6);
        let mut host = PodSpec { host_network: Some(true), ..Default::default() };
        add_or_update_daemon_pod_tolerations(&mut host);
        assert_eq!(host.tolerations.unwrap().last().unwrap().key.as_deref(), Some(taints::NETWORK_UNAVAILABLE));
    }

    #[test]
    fn a_node_runs_the_daemon_pod_when_selector_affinity_and_taints_admit_it() {
        let plain = ds(PodSpec::default());
        assert_eq!(node_should_run_daemon_pod(&node("a", &[], &[]), &plain), (true, true));
        let selective = ds(PodSpec {
            node_selector: Some([("role".to_string(), "edge".to_string())].into()),
            ..Default::default()
        });
        assert_eq!(node_should_run_daemon_pod(&node("a", &[], &[]), &selective), (false, false));
        assert_eq!(node_should_run_daemon_pod(&node("a", &[("role", "edge")], &[]), &selective), (true, true));
        let pinned = ds(PodSpec { node_name: Some("b".into()), ..Default::default() });
        assert_eq!(node_should_run_daemon_pod(&node("a", &[], &[]), &pinned), (false, false));
    }

    #[test]
    fn a_no_schedule_taint_keeps_running_pods_and_a_no_execute_taint_evicts_them() {
        let plain = ds(PodSpec::default());
        assert_eq!(node_should_run_daemon_pod(&node("a", &[], &[("dedicated", "NoSchedule")]), &plain), (false, true));
        assert_eq!(node_should_run_daemon_pod(&node("a", &[], &[("dedicated", "NoExecute")]), &plain), (false, false));
        // The automatic tolerations: a cordoned or unreachable node still runs its daemon.
        let cordoned = node("a", &[], &[(taints::UNSCHEDULABLE, "NoSchedule"), (taints::UNREACHABLE, "NoExecute")]);
        assert_eq!(node_should_run_daemon_pod(&cordoned, &plain), (true, true));
    }

    #[test]
    fn the_node_name_affinity_replaces_any_required_terms_and_names_the_target_node() {
        let mut pod = Pod { spec: Some(PodSpec::default()), ..Default::default() };
        assert!(target_node_name(&pod).is_err());
        let affinity = replace_daemon_set_pod_node_name_node_affinity(None, "n1");
        let affinity = replace_daemon_set_pod_node_name_node_affinity(Some(affinity), "n2");
        let terms = &affinity.node_affinity.as_ref().unwrap().required_during_scheduling_ignored_during_execution;
        assert_eq!(terms.as_ref().unwrap().node_selector_terms.len(), 1);
        pod.spec.as_mut().unwrap().affinity = Some(affinity);
        assert_eq!(target_node_name(&pod).unwrap(), "n2");
        pod.spec.as_mut().unwrap().node_name = Some("n3".into());
        assert_eq!(target_node_name(&pod).unwrap(), "n3");
    }

    #[test]
    fn percentages_of_max_unavailable_round_up() {
        let mut d = ds(PodSpec::default());
        d.spec.as_mut().unwrap().update_strategy = Some(k8s_openapi::api::apps::v1::DaemonSetUpdateStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(k8s_openapi::api::apps::v1::RollingUpdateDaemonSet {
                max_unavailable: Some(IntOrString::String("10%".into())),
                max_surge: Some(IntOrString::Int(0)),
            }),
        });
        assert_eq!(unavailable_count(&d, 5).unwrap(), 1);
        assert_eq!(unavailable_count(&d, 5000).unwrap(), 500);
        assert_eq!(surge_count(&d, 5000).unwrap(), 0);
        assert!(!allows_surge(&d));
    }
}
