//! Deployment helpers (`pkg/controller/deployment/util/deployment_util.go` and
//! `pkg/util/hash`): annotations, revisions, the pod-template hash, surge/unavailable
//! arithmetic, conditions and ReplicaSet orderings. Pure functions, tested alone.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentSpec, DeploymentStatus, DeploymentStrategy, ReplicaSet,
    RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::util::time;

/// Revision of a ReplicaSet (and, copied, of its Deployment).
pub const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";
/// Earlier revisions a ReplicaSet had before a rollback reused it (comma separated).
pub const REVISION_HISTORY_ANNOTATION: &str = "deployment.kubernetes.io/revision-history";
/// `spec.replicas` of the Deployment when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas + maxSurge` of the Deployment when the ReplicaSet was last scaled.
pub const MAX_REPLICAS_ANNOTATION: &str = "deployment.kubernetes.io/max-replicas";
/// The deprecated controller-side rollback request (`extensions/v1beta1` `rollbackTo`).
pub const DEPRECATED_ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// kubectl's last-applied configuration, never copied to ReplicaSets.
pub const LAST_APPLIED_CONFIG_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The label (and ReplicaSet name suffix) distinguishing revisions.
pub const DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY: &str = "pod-template-hash";
/// Longest `revision-history` annotation kept.
pub const MAX_REV_HISTORY_LENGTH_IN_CHARS: usize = 2000;

/// `Progressing` condition type.
pub const DEPLOYMENT_PROGRESSING: &str = "Progressing";
/// `Available` condition type.
pub const DEPLOYMENT_AVAILABLE: &str = "Available";
/// `ReplicaFailure` condition type.
pub const DEPLOYMENT_REPLICA_FAILURE: &str = "ReplicaFailure";

/// Condition reasons, as Kubernetes names them.
pub mod reasons {
    /// A new ReplicaSet was created (Progressing True).
    pub const NEW_RS_REASON: &str = "NewReplicaSetCreated";
    /// An existing ReplicaSet matches the template (Progressing True).
    pub const FOUND_NEW_RS_REASON: &str = "FoundNewReplicaSet";
    /// The new ReplicaSet made progress (Progressing True).
    pub const REPLICA_SET_UPDATED_REASON: &str = "ReplicaSetUpdated";
    /// The rollout is complete (Progressing True).
    pub const NEW_RS_AVAILABLE_REASON: &str = "NewReplicaSetAvailable";
    /// No progress within progressDeadlineSeconds (Progressing False).
    pub const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";
    /// The Deployment is paused (Progressing Unknown).
    pub const PAUSED_DEPLOY_REASON: &str = "DeploymentPaused";
    /// The Deployment was resumed (Progressing Unknown).
    pub const RESUMED_DEPLOY_REASON: &str = "DeploymentResumed";
    /// Creating the new ReplicaSet failed (Progressing False).
    pub const FAILED_RS_CREATE_REASON: &str = "ReplicaSetCreateError";
    /// Enough replicas are available (Available True).
    pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
    /// Too few replicas are available (Available False).
    pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
}

/// `apps/v1` defaulting of the fields the controller relies on (`SetDefaults_Deployment`):
/// replicas 1, strategy RollingUpdate with 25%/25%, revisionHistoryLimit 10,
/// progressDeadlineSeconds 600.
pub fn set_defaults(d: &mut Deployment) {
    let spec = d.spec.get_or_insert_with(DeploymentSpec::default);
    spec.replicas.get_or_insert(1);
    let strategy = spec.strategy.get_or_insert_with(DeploymentStrategy::default);
    let type_ = strategy.type_.get_or_insert_with(|| "RollingUpdate".to_string());
    if type_ == "RollingUpdate" {
        let ru = strategy.rolling_update.get_or_insert_with(RollingUpdateDeployment::default);
        ru.max_unavailable.get_or_insert_with(|| IntOrString::String("25%".into()));
        ru.max_surge.get_or_insert_with(|| IntOrString::String("25%".into()));
    }
    spec.revision_history_limit.get_or_insert(10);
    spec.progress_deadline_seconds.get_or_insert(600);
}

/// `spec.replicas` (1 when unset).
pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// A ReplicaSet's `spec.replicas` (1 when unset, as the API defaults it).
pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// Sets a ReplicaSet's `spec.replicas`.
pub fn set_rs_replicas(rs: &mut ReplicaSet, n: i32) {
    rs.spec.get_or_insert_with(Default::default).replicas = Some(n);
}

fn rs_status(rs: &ReplicaSet) -> (i32, i32, i32) {
    let s = rs.status.as_ref();
    (
        s.map(|s| s.replicas).unwrap_or(0),
        s.and_then(|s| s.ready_replicas).unwrap_or(0),
        s.and_then(|s| s.available_replicas).unwrap_or(0),
    )
}

/// `status.availableReplicas` of a ReplicaSet.
pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs_status(rs).2
}

/// Whether the strategy is RollingUpdate.
pub fn is_rolling_update(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.type_.as_deref()).unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

/// The strategy type (`RollingUpdate` or `Recreate`).
pub fn strategy_type(d: &Deployment) -> &str {
    d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.type_.as_deref()).unwrap_or("RollingUpdate")
}

/// `GetScaledValueFromIntOrPercent`: an absolute value, or `percent` of `total` rounded up
/// (`round_up`) or down.
///
/// # Errors
/// A string that is not a percentage (`"5"`), or a malformed one.
pub fn scaled_value_from_int_or_percent(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let Some(p) = s.strip_suffix('%') else {
                return Err(format!("invalid value for IntOrString: invalid type: string is not a percentage: {s:?}"));
            };
            let p: i64 = p.parse().map_err(|_| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let scaled = p * i64::from(total);
            let v = if round_up { (scaled + 99).div_euclid(100) } else { scaled.div_euclid(100) };
            Ok(v as i32)
        }
    }
}

fn rolling_params(d: &Deployment) -> (IntOrString, IntOrString) {
    let ru = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.rolling_update.as_ref());
    (
        ru.and_then(|r| r.max_surge.clone()).unwrap_or_else(|| IntOrString::String("25%".into())),
        ru.and_then(|r| r.max_unavailable.clone()).unwrap_or_else(|| IntOrString::String("25%".into())),
    )
}

/// `ResolveFenceposts`: (maxSurge rounded up, maxUnavailable rounded down) for `desired`
/// replicas; if both come out 0, maxUnavailable is 1 (validation forbids 0/0, rounding can
/// produce it, and the user who wanted 0 unavailable would have set a surge).
///
/// Worked numbers: desired 10, 25%/25% → surge ⌈2.5⌉ = 3, unavailable ⌊2.5⌋ = 2.
/// Desired 1, 25%/25% → surge ⌈0.25⌉ = 1, unavailable ⌊0.25⌋ = 0.
/// Desired 3, 0/10% → surge 0, unavailable ⌊0.3⌋ = 0 → unavailable forced to 1.
///
/// # Errors
/// An invalid percentage string.
pub fn resolve_fenceposts(
    max_surge: &IntOrString,
    max_unavailable: &IntOrString,
    desired: i32,
) -> Result<(i32, i32), String> {
    let surge = scaled_value_from_int_or_percent(max_surge, desired, true)?;
    let mut unavailable = scaled_value_from_int_or_percent(max_unavailable, desired, false)?;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

/// `MaxSurge`: how many pods above `spec.replicas` a rolling update may run (0 for Recreate).
pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling_update(d) {
        return 0;
    }
    let (s, u) = rolling_params(d);
    resolve_fenceposts(&s, &u, replicas(d)).map(|(s, _)| s).unwrap_or(0)
}

/// `MaxUnavailable`: how many of `spec.replicas` may be unavailable (never more than
/// replicas; 0 for Recreate or zero replicas).
pub fn max_unavailable(d: &Deployment) -> i32 {
    let r = replicas(d);
    if !is_rolling_update(d) || r == 0 {
        return 0;
    }
    let (s, u) = rolling_params(d);
    let (_, u) = resolve_fenceposts(&s, &u, r).unwrap_or((0, 0));
    u.min(r)
}

/// Sum of `spec.replicas` over ReplicaSets (`GetReplicaCountForReplicaSets`).
pub fn replica_count(rss: &[&ReplicaSet]) -> i32 {
    rss.iter().map(|rs| rs_replicas(rs)).sum()
}

/// Sum of `status.replicas` (`GetActualReplicaCountForReplicaSets`).
pub fn actual_replica_count(rss: &[&ReplicaSet]) -> i32 {
    rss.iter().map(|rs| rs_status(rs).0).sum()
}

/// Sum of `status.readyReplicas`.
pub fn ready_replica_count(rss: &[&ReplicaSet]) -> i32 {
    rss.iter().map(|rs| rs_status(rs).1).sum()
}

/// Sum of `status.availableReplicas`.
pub fn available_replica_count(rss: &[&ReplicaSet]) -> i32 {
    rss.iter().map(|rs| rs_status(rs).2).sum()
}

/// `NewRSNewReplicas`: the size the new ReplicaSet may grow to now.
///
/// RollingUpdate: grow by at most `replicas + maxSurge - (all pods)`, and never beyond
/// `replicas`. Worked numbers: replicas 10, maxSurge 3 (25%), old RS at 10, new RS at 0 →
/// total may reach 13, so the new RS grows to 3. Recreate: straight to `replicas`.
///
/// # Errors
/// An invalid maxSurge percentage.
pub fn new_rs_new_replicas(d: &Deployment, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> Result<i32, String> {
    let r = replicas(d);
    if is_rolling_update(d) {
        let (s, _) = rolling_params(d);
        let surge = scaled_value_from_int_or_percent(&s, r, true)?;
        let current = replica_count(all);
        let max_total = r + surge;
        if current >= max_total {
            return Ok(rs_replicas(new_rs));
        }
        let scale_up = (max_total - current).min(r - rs_replicas(new_rs));
        Ok(rs_replicas(new_rs) + scale_up)
    } else {
        Ok(r)
    }
}

/// Annotations of a ReplicaSet (empty when unset).
fn annotations(rs: &ReplicaSet) -> BTreeMap<String, String> {
    rs.metadata.annotations.clone().unwrap_or_default()
}

/// `Revision`: the revision annotation as a number (0 when missing).
///
/// # Errors
/// A revision annotation that is not a number.
pub fn revision(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Result<i64, String> {
    match meta.annotations.as_ref().and_then(|a| a.get(REVISION_ANNOTATION)) {
        None => Ok(0),
        Some(v) => v.parse().map_err(|_| format!("invalid revision {v:?}")),
    }
}

/// `MaxRevision`: the highest revision among ReplicaSets.
pub fn max_revision(rss: &[&ReplicaSet]) -> i64 {
    rss.iter().filter_map(|rs| revision(&rs.metadata).ok()).max().unwrap_or(0).max(0)
}

/// `LastRevision`: the second-highest revision (the one `rollout undo` returns to).
pub fn last_revision(rss: &[&ReplicaSet]) -> i64 {
    let (mut max, mut sec) = (0, 0);
    for v in rss.iter().filter_map(|rs| revision(&rs.metadata).ok()) {
        if v >= max {
            sec = max;
            max = v;
        } else if v > sec {
            sec = v;
        }
    }
    sec
}

/// Annotations never copied from a Deployment to its ReplicaSets (`skipCopyAnnotation`).
pub fn skip_copy_annotation(key: &str) -> bool {
    matches!(
        key,
        LAST_APPLIED_CONFIG_ANNOTATION
            | REVISION_ANNOTATION
            | REVISION_HISTORY_ANNOTATION
            | DESIRED_REPLICAS_ANNOTATION
            | MAX_REPLICAS_ANNOTATION
            | DEPRECATED_ROLLBACK_TO
    )
}

/// `copyDeploymentAnnotationsToReplicaSet` (e.g. `kubernetes.io/change-cause`); returns
/// whether anything changed.
pub fn copy_deployment_annotations_to_rs(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let mut changed = false;
    let rs_ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if skip_copy_annotation(k) || rs_ann.get(k) == Some(v) {
            continue;
        }
        rs_ann.insert(k.clone(), v.clone());
        changed = true;
    }
    changed
}

/// `SetReplicasAnnotations`: desired/max replicas annotations; returns whether they changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS_ANNOTATION, desired), (MAX_REPLICAS_ANNOTATION, max)] {
        let v = v.to_string();
        if ann.get(k) != Some(&v) {
            ann.insert(k.to_string(), v);
            changed = true;
        }
    }
    changed
}

/// `ReplicasAnnotationsNeedUpdate`.
pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    let ann = annotations(rs);
    ann.get(DESIRED_REPLICAS_ANNOTATION) != Some(&desired.to_string())
        || ann.get(MAX_REPLICAS_ANNOTATION) != Some(&max.to_string())
}

/// `GetDesiredReplicasAnnotation`.
pub fn desired_replicas_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotations(rs).get(DESIRED_REPLICAS_ANNOTATION)?.parse().ok()
}

/// `getMaxReplicasAnnotation`.
pub fn max_replicas_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotations(rs).get(MAX_REPLICAS_ANNOTATION)?.parse().ok()
}

/// `SetNewReplicaSetAnnotations`: copies the Deployment's annotations, raises the revision to
/// `new_revision` (keeping the previous one in `revision-history` when a rollback reuses an
/// old ReplicaSet) and, for a ReplicaSet about to be created (`!exists`), sets the replicas
/// annotations. Returns whether anything changed.
pub fn set_new_replica_set_annotations(d: &Deployment, rs: &mut ReplicaSet, new_revision: &str, exists: bool) -> bool {
    let mut changed = copy_deployment_annotations_to_rs(d, rs);
    let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let old_revision = ann.get(REVISION_ANNOTATION).cloned();
    let old_int: i64 = match old_revision.as_deref() {
        None | Some("") => 0,
        Some(v) => match v.parse() {
            Ok(n) => n,
            Err(_) => return false,
        },
    };
    let Ok(new_int) = new_revision.parse::<i64>() else {
        return false;
    };
    if old_int < new_int {
        ann.insert(REVISION_ANNOTATION.to_string(), new_revision.to_string());
        changed = true;
    }
    if let Some(old) = old_revision.filter(|_| old_int < new_int) {
        let history = ann.get(REVISION_HISTORY_ANNOTATION).cloned().unwrap_or_default();
        if history.is_empty() {
            ann.insert(REVISION_HISTORY_ANNOTATION.to_string(), old);
        } else {
            let mut revisions: Vec<&str> = history.split(',').collect();
            let mut total = history.len() + old.len() + 1;
            let mut start = 0;
            while total > MAX_REV_HISTORY_LENGTH_IN_CHARS && start < revisions.len() {
                total -= revisions[start].len() + 1;
                start += 1;
            }
            if total <= MAX_REV_HISTORY_LENGTH_IN_CHARS {
                revisions = revisions.split_off(start);
                revisions.push(&old);
                ann.insert(REVISION_HISTORY_ANNOTATION.to_string(), revisions.join(","));
            }
        }
    }
    if !exists && set_replicas_annotations(rs, replicas(d), replicas(d) + max_surge(d)) {
        changed = true;
    }
    changed
}

/// `SetDeploymentRevision`; returns whether it changed.
pub fn set_deployment_revision(d: &mut Deployment, revision: &str) -> bool {
    let ann = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if ann.get(REVISION_ANNOTATION).map(String::as_str) != Some(revision) {
        ann.insert(REVISION_ANNOTATION.to_string(), revision.to_string());
        return true;
    }
    false
}

/// FNV-1a, 32 bits (`hash/fnv.New32a`).
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in data {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// `rand.SafeEncodeString`: maps each character onto consonants and digits that cannot form
/// words (`bcdfghjklmnpqrstvwxz2456789`).
pub fn safe_encode_string(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes().map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char).collect()
}

/// `ComputeHash`: FNV-32a over the template (its canonical JSON here; Kubernetes hashes a
/// printout of the Go struct), then over the collision count as 8 little-endian bytes, printed
/// in decimal and safe-encoded, e.g. `5d59d67564`.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut data = serde_json::to_vec(template).unwrap_or_default();
    if let Some(c) = collision_count {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&(c as u32).to_le_bytes());
        data.extend_from_slice(&bytes);
    }
    safe_encode_string(&fnv32a(&data).to_string())
}

fn without_hash(t: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = t.clone();
    if let Some(meta) = t.metadata.as_mut() {
        if let Some(labels) = meta.labels.as_mut() {
            labels.remove(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY);
            if labels.is_empty() {
                meta.labels = None;
            }
        }
        if meta.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
            meta.annotations = None;
        }
    }
    t
}

/// Removes nulls, empty objects and empty arrays from object fields, recursively: the JSON
/// forms of one Go value (`"resources": {}` is how Go writes an empty struct, which other
/// writers omit).
fn prune(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, prune(v)))
                .filter(|(_, v)| match v {
                    Value::Null => false,
                    Value::Object(m) => !m.is_empty(),
                    Value::Array(a) => !a.is_empty(),
                    _ => true,
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(prune).collect()),
        other => other,
    }
}

/// `EqualIgnoreHash`: templates equal up to the `pod-template-hash` label (and up to empty
/// fields, which Go's `DeepEqual` of decoded structs does not see either).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let (a, b) = (without_hash(a), without_hash(b));
    a == b || prune(serde_json::to_value(&a).unwrap_or_default()) == prune(serde_json::to_value(&b).unwrap_or_default())
}

/// The template of a ReplicaSet (empty when unset).
pub fn rs_template(rs: &ReplicaSet) -> PodTemplateSpec {
    rs.spec.as_ref().and_then(|s| s.template.clone()).unwrap_or_default()
}

/// The template of a Deployment.
pub fn d_template(d: &Deployment) -> PodTemplateSpec {
    d.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default()
}

/// `ReplicaSetsByCreationTimestamp`: older first, then by name.
pub fn by_creation_timestamp(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
    ta.cmp(&tb).then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// `ReplicaSetsBySizeOlder`: larger first; among equals, older first (scaling down).
pub fn by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b).cmp(&rs_replicas(a)).then_with(|| by_creation_timestamp(a, b))
}

/// `ReplicaSetsBySizeNewer`: larger first; among equals, newer first (scaling up).
pub fn by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    rs_replicas(b).cmp(&rs_replicas(a)).then_with(|| {
        let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
        tb.cmp(&ta)
    })
}

/// `ReplicaSetsByRevision`: lower revision first, then older.
pub fn by_revision(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    let ra = revision(&a.metadata).unwrap_or(0);
    let rb = revision(&b.metadata).unwrap_or(0);
    ra.cmp(&rb).then_with(|| by_creation_timestamp(a, b))
}

/// `FindNewReplicaSet`: the oldest ReplicaSet whose template equals the Deployment's.
pub fn find_new_replica_set(d: &Deployment, rss: &[ReplicaSet]) -> Option<ReplicaSet> {
    let template = d_template(d);
    let mut sorted: Vec<&ReplicaSet> = rss.iter().collect();
    sorted.sort_by(|a, b| by_creation_timestamp(a, b));
    sorted.into_iter().find(|rs| equal_ignore_hash(&rs_template(rs), &template)).cloned()
}

/// `FindOldReplicaSets`: every ReplicaSet but the new one.
pub fn find_old_replica_sets(d: &Deployment, rss: &[ReplicaSet]) -> Vec<ReplicaSet> {
    let new_uid = find_new_replica_set(d, rss).and_then(|rs| rs.metadata.uid);
    rss.iter().filter(|rs| new_uid.is_none() || rs.metadata.uid != new_uid).cloned().collect()
}

/// `FilterActiveReplicaSets`: ReplicaSets with `spec.replicas > 0`.
pub fn filter_active<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> Vec<&'a ReplicaSet> {
    rss.into_iter().filter(|rs| rs_replicas(rs) > 0).collect()
}

/// `FindActiveOrLatest`: the only active ReplicaSet, or the newest one if none is active;
/// `None` if several are active.
pub fn find_active_or_latest<'a>(new_rs: Option<&'a ReplicaSet>, old: &'a [ReplicaSet]) -> Option<&'a ReplicaSet> {
    if new_rs.is_none() && old.is_empty() {
        return None;
    }
    let mut old_sorted: Vec<&ReplicaSet> = old.iter().collect();
    old_sorted.sort_by(|a, b| by_creation_timestamp(b, a));
    let all: Vec<&ReplicaSet> = old_sorted.iter().copied().chain(new_rs).collect();
    let active = filter_active(all);
    match active.len() {
        0 => new_rs.or_else(|| old_sorted.first().copied()),
        1 => Some(active[0]),
        _ => None,
    }
}

/// `IsSaturated`: the new ReplicaSet runs all replicas, all available, and was last sized for
/// the current `spec.replicas`.
pub fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else { return false };
    let r = replicas(d);
    desired_replicas_annotation(rs) == Some(r) && rs_replicas(rs) == r && rs_available(rs) == r
}

/// `getReplicaSetFraction`: how many replicas this ReplicaSet should gain (or lose) when the
/// Deployment's allowed size changes, in proportion to its size, relative to the size
/// recorded in its `max-replicas` annotation (or `status.replicas` of the Deployment).
///
/// Worked numbers: a Deployment at replicas 10 + maxSurge 3 (max 13) scaled to 20 (+5 surge
/// = 25) mid-rollout, with an old RS at 8 and a new RS at 5 (both annotated max-replicas 13):
/// old: round(8 * 25 / 13) - 8 = round(15.38) - 8 = 7; new: round(5 * 25 / 13) - 5 =
/// round(9.62) - 5 = 5.
pub fn replica_set_fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    let r = replicas(d);
    if r == 0 {
        return -rs_replicas(rs);
    }
    let deployment_replicas = r + max_surge(d);
    let annotated =
        max_replicas_annotation(rs).unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
    if annotated == 0 {
        return 0;
    }
    let new_size = f64::from(rs_replicas(rs)) * f64::from(deployment_replicas) / f64::from(annotated);
    new_size.round() as i32 - rs_replicas(rs)
}

/// `GetProportion`: the share of `to_add` (positive: scale up; negative: down) for this
/// ReplicaSet, bounded by what is left to distribute (`to_add - added`).
pub fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = replica_set_fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 { fraction.min(allowed) } else { fraction.max(allowed) }
}

/// `HasProgressDeadline`: progressDeadlineSeconds is set (and not MaxInt32).
pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).is_some_and(|p| p != i32::MAX)
}

/// `HasRevisionHistoryLimit`.
pub fn has_revision_history_limit(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.revision_history_limit).is_some_and(|p| p != i32::MAX)
}

/// `NewDeploymentCondition` at `now`.
pub fn new_condition(type_: &str, status: &str, reason: &str, message: &str, now: Timestamp) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_update_time: Some(time(now)),
        last_transition_time: Some(time(now)),
    }
}

/// `GetDeploymentCondition`.
pub fn get_condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

/// `SetDeploymentCondition`: replaces the condition of that type unless status and reason are
/// unchanged; keeps `lastTransitionTime` when only the reason changes.
pub fn set_condition(status: &mut DeploymentStatus, mut condition: DeploymentCondition) {
    if let Some(current) = get_condition(status, &condition.type_) {
        if current.status == condition.status && current.reason == condition.reason {
            return;
        }
        if current.status == condition.status {
            condition.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove_condition(status, &condition.type_);
    status.conditions.get_or_insert_with(Vec::new).push(condition);
}

/// `RemoveDeploymentCondition`.
pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(c) = status.conditions.as_mut() {
        c.retain(|c| c.type_ != type_);
    }
}

/// `DeploymentComplete`: every replica updated and available, and the generation observed.
pub fn deployment_complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let r = replicas(d);
    status.updated_replicas.unwrap_or(0) == r
        && status.replicas.unwrap_or(0) == r
        && status.available_replicas.unwrap_or(0) == r
        && status.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// `DeploymentProgressing`: more updated, ready or available replicas, or fewer old ones, than
/// the current status says.
pub fn deployment_progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// `DeploymentTimedOut`: no progress reported for progressDeadlineSeconds (judged on the
/// Progressing condition's lastUpdateTime).
pub fn deployment_timed_out(d: &Deployment, status: &DeploymentStatus, now: Timestamp) -> bool {
    if !has_progress_deadline(d) {
        return false;
    }
    let Some(cond) = get_condition(status, DEPLOYMENT_PROGRESSING) else { return false };
    match cond.reason.as_deref() {
        Some(reasons::NEW_RS_AVAILABLE_REASON) => return false,
        Some(reasons::TIMED_OUT_REASON) => return true,
        _ => {}
    }
    let Some(from) = cond.last_update_time.as_ref() else { return false };
    let deadline = d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).unwrap_or(600);
    crate::util::add_seconds(from.0, i64::from(deadline)) < now
}

/// Deployment status with zero counts as `None` (how they travel: `omitempty`), so statuses
/// read from the API and computed ones compare equal.
pub fn normalize_status(mut s: DeploymentStatus) -> DeploymentStatus {
    for v in [
        &mut s.replicas,
        &mut s.updated_replicas,
        &mut s.ready_replicas,
        &mut s.available_replicas,
        &mut s.unavailable_replicas,
    ] {
        if *v == Some(0) {
            *v = None;
        }
    }
    if s.observed_generation == Some(0) {
        s.observed_generation = None;
    }
    if s.conditions.as_ref().is_some_and(Vec::is_empty) {
        s.conditions = None;
    }
    s
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::ReplicaSetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn deployment(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        Deployment {
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    fn int(i: i32) -> IntOrString {
        IntOrString::Int(i)
    }

    fn rs(name: &str, replicas: i32, created: i64, revision: Option<&str>) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("{name}-uid")),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                annotations: revision.map(|r| [(REVISION_ANNOTATION.to_string(), r.to_string())].into()),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec { replicas: Some(replicas), ..Default::default() }),
            status: None,
        }
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        // (replicas, maxSurge, maxUnavailable) → (surge, unavailable)
        let cases = [
            (10, pct("25%"), pct("25%"), (3, 2)),
            (1, pct("25%"), pct("25%"), (1, 0)),
            (4, pct("25%"), pct("25%"), (1, 1)),
            (3, int(0), pct("10%"), (0, 1)),
            (5, int(2), int(0), (2, 0)),
            (10, pct("0%"), pct("0%"), (0, 1)),
            (10, pct("100%"), pct("50%"), (10, 5)),
        ];
        for (replicas, surge, unavailable, want) in cases {
            assert_eq!(
                resolve_fenceposts(&surge, &unavailable, replicas).unwrap(),
                want,
                "{replicas} {surge:?} {unavailable:?}"
            );
        }
        assert!(resolve_fenceposts(&pct("5"), &int(0), 10).is_err());
    }

    #[test]
    fn max_unavailable_never_exceeds_replicas_and_recreate_has_no_budget() {
        assert_eq!(max_unavailable(&deployment(2, int(0), int(5))), 2);
        assert_eq!(max_unavailable(&deployment(0, int(1), int(1))), 0);
        let mut recreate = deployment(5, int(1), int(1));
        recreate.spec.as_mut().unwrap().strategy =
            Some(DeploymentStrategy { type_: Some("Recreate".into()), rolling_update: None });
        assert_eq!(max_surge(&recreate), 0);
        assert_eq!(max_unavailable(&recreate), 0);
    }

    #[test]
    fn new_rs_grows_within_the_surge_budget() {
        // replicas 10, maxSurge 3: total may reach 13.
        let d = deployment(10, pct("25%"), pct("25%"));
        let cases = [
            // (old size, new size) → new size allowed now
            (10, 0, 3), // 13 - 10 = 3
            (8, 3, 5),  // 13 - 11 = 2 more
            (10, 3, 3), // total 13 already: no growth
            (0, 8, 10), // never beyond replicas
            (12, 0, 1),
        ];
        for (old_size, new_size, want) in cases {
            let old = rs("old", old_size, 1, Some("1"));
            let new = rs("new", new_size, 2, Some("2"));
            assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new).unwrap(), want, "old {old_size} new {new_size}");
        }
    }

    #[test]
    fn proportions_follow_the_max_replicas_annotation() {
        // Worked example from replica_set_fraction's docs: 10 → 20 replicas mid-rollout.
        let d = deployment(20, pct("25%"), pct("25%"));
        let mut old = rs("old", 8, 1, Some("1"));
        let mut new = rs("new", 5, 2, Some("2"));
        set_replicas_annotations(&mut old, 10, 13);
        set_replicas_annotations(&mut new, 10, 13);
        assert_eq!(max_surge(&d), 5);
        assert_eq!(replica_set_fraction(&old, &d), 7);
        assert_eq!(replica_set_fraction(&new, &d), 5);
        // 25 - 13 = 12 to add: old gets min(7, 12) = 7, new gets min(5, 12 - 7) = 5.
        assert_eq!(proportion(&old, &d, 12, 0), 7);
        assert_eq!(proportion(&new, &d, 12, 7), 5);
        // Scaling to zero removes everything.
        let zero = deployment(0, pct("25%"), pct("25%"));
        assert_eq!(replica_set_fraction(&old, &zero), -8);
        assert_eq!(proportion(&old, &zero, -13, 0), -8);
    }

    #[test]
    fn revisions_and_last_revision() {
        let a = rs("a", 0, 1, Some("1"));
        let b = rs("b", 0, 2, Some("3"));
        let c = rs("c", 0, 3, Some("2"));
        let d = rs("d", 0, 4, None);
        assert_eq!(max_revision(&[&a, &b, &c, &d]), 3);
        assert_eq!(last_revision(&[&a, &b, &c, &d]), 2);
        assert_eq!(last_revision(&[&b]), 0);
    }

    #[test]
    fn new_rs_annotations_keep_history_on_rollback() {
        let mut d = deployment(3, pct("25%"), pct("25%"));
        d.metadata.annotations = Some(
            [
                ("kubernetes.io/change-cause".to_string(), "kubectl set image".to_string()),
                (LAST_APPLIED_CONFIG_ANNOTATION.to_string(), "{}".to_string()),
                (REVISION_ANNOTATION.to_string(), "9".to_string()),
            ]
            .into(),
        );
        let mut fresh = rs("new", 0, 1, None);
        assert!(set_new_replica_set_annotations(&d, &mut fresh, "4", false));
        let ann = fresh.metadata.annotations.clone().unwrap();
        assert_eq!(ann[REVISION_ANNOTATION], "4");
        assert_eq!(ann["kubernetes.io/change-cause"], "kubectl set image");
        assert_eq!(ann[DESIRED_REPLICAS_ANNOTATION], "3");
        assert_eq!(ann[MAX_REPLICAS_ANNOTATION], "4");
        assert!(!ann.contains_key(LAST_APPLIED_CONFIG_ANNOTATION));
        assert!(!ann.contains_key(REVISION_HISTORY_ANNOTATION));

        // Rolling back to revision 1 reuses its ReplicaSet as revision 5: history "1".
        let mut reused = rs("old", 0, 1, Some("1"));
        assert!(set_new_replica_set_annotations(&d, &mut reused, "5", true));
        assert_eq!(reused.metadata.annotations.as_ref().unwrap()[REVISION_HISTORY_ANNOTATION], "1");
        assert!(set_new_replica_set_annotations(&d, &mut reused, "7", true));
        assert_eq!(reused.metadata.annotations.as_ref().unwrap()[REVISION_HISTORY_ANNOTATION], "1,5");
        // Nothing changes for an equal revision.
        assert!(!set_new_replica_set_annotations(&d, &mut reused, "7", true));
    }

    #[test]
    fn the_template_hash_is_stable_safe_encoded_and_changes_with_collisions() {
        let t = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_string(), "nginx".to_string())].into()),
                ..Default::default()
            }),
            spec: None,
        };
        let h = compute_hash(&t, None);
        assert_eq!(h, compute_hash(&t, None));
        assert!(h.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)), "{h}");
        assert!(h.len() <= 10);
        assert_ne!(h, compute_hash(&t, Some(1)));
        assert_ne!(compute_hash(&t, Some(1)), compute_hash(&t, Some(2)));
        // FNV-32a reference values.
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(safe_encode_string("0123"), "4567");
    }

    #[test]
    fn templates_compare_equal_ignoring_the_hash_label() {
        let mut a = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_string(), "x".to_string())].into()),
                ..Default::default()
            }),
            spec: None,
        };
        let b = a.clone();
        a.metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(DEFAULT_DEPLOYMENT_UNIQUE_LABEL_KEY.into(), "abc".into());
        assert!(equal_ignore_hash(&a, &b));
        // `resources: {}` (how Go writes an empty struct) equals no resources.
        let container =
            |resources| k8s_openapi::api::core::v1::Container { name: "c".into(), resources, ..Default::default() };
        let with_spec = |c| PodTemplateSpec {
            metadata: b.metadata.clone(),
            spec: Some(k8s_openapi::api::core::v1::PodSpec { containers: vec![c], ..Default::default() }),
        };
        assert!(equal_ignore_hash(&with_spec(container(Some(Default::default()))), &with_spec(container(None))));
        a.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert("v".into(), "2".into());
        assert!(!equal_ignore_hash(&a, &b));
    }

    #[test]
    fn active_or_latest_picks_the_only_active_or_the_newest() {
        let old1 = rs("old1", 0, 1, Some("1"));
        let old2 = rs("old2", 0, 2, Some("2"));
        let new = rs("new", 3, 3, Some("3"));
        let olds = [old1.clone(), old2.clone()];
        assert_eq!(find_active_or_latest(Some(&new), &olds).unwrap().metadata.name.as_deref(), Some("new"));
        assert_eq!(find_active_or_latest(None, &olds).unwrap().metadata.name.as_deref(), Some("old2"));
        let active_old = [rs("old1", 2, 1, Some("1"))];
        assert!(find_active_or_latest(Some(&new), &active_old).is_none());
    }

    #[test]
    fn conditions_keep_transition_time_when_only_the_reason_changes() {
        let t0 = Timestamp::from_second(1000).unwrap();
        let t1 = Timestamp::from_second(2000).unwrap();
        let mut s = DeploymentStatus::default();
        set_condition(&mut s, new_condition(DEPLOYMENT_PROGRESSING, "True", reasons::NEW_RS_REASON, "m", t0));
        set_condition(
            &mut s,
            new_condition(DEPLOYMENT_PROGRESSING, "True", reasons::REPLICA_SET_UPDATED_REASON, "m2", t1),
        );
        let c = get_condition(&s, DEPLOYMENT_PROGRESSING).unwrap();
        assert_eq!(c.reason.as_deref(), Some(reasons::REPLICA_SET_UPDATED_REASON));
        assert_eq!(c.last_transition_time, Some(time(t0)));
        assert_eq!(c.last_update_time, Some(time(t1)));
        // Same status and reason: no change at all.
        set_condition(
            &mut s,
            new_condition(DEPLOYMENT_PROGRESSING, "True", reasons::REPLICA_SET_UPDATED_REASON, "m3", t1),
        );
        assert_eq!(get_condition(&s, DEPLOYMENT_PROGRESSING).unwrap().message.as_deref(), Some("m2"));
        assert_eq!(s.conditions.as_ref().unwrap().len(), 1);
    }
}
