//! `POST pods/{name}/eviction` (kube-apiserver's `pkg/registry/core/pod/storage/eviction.go`):
//! deletes a pod unless that would break its PodDisruptionBudget.
//!
//! 1. A pod that is Pending, Succeeded, Failed or already being deleted is deleted without
//!    looking at budgets (it disrupts nothing more). A non-terminal one is deleted only at the
//!    resourceVersion read, so it cannot become Ready in between.
//! 2. Otherwise the budgets of the pod's namespace whose selector matches it are read: none →
//!    delete; more than one → 500 (the eviction API does not support it); one → the budget
//!    decides:
//!    - an unready pod is deleted without spending a disruption when the budget says
//!      `unhealthyPodEvictionPolicy: AlwaysAllow`, or (`IfHealthyBudget`, the default) when the
//!      budget already has `currentHealthy >= desiredHealthy > 0`; its deletion is then pinned
//!      to the resourceVersion read, and a lost race is a 429 so that the client retries;
//!    - otherwise `checkAndDecrement`: 429 TooManyRequests while the budget's status is stale or
//!      `disruptionsAllowed` is 0 (with a `DisruptionBudget` cause saying why), else the budget's
//!      status is written back with one disruption fewer and the pod in `disruptedPods` — a
//!      compare-and-swap on the budget's resourceVersion, re-read and retried on conflict, so
//!      two concurrent evictions never spend the same disruption.
//! 3. Before the delete the pod gets the `DisruptionTarget` condition (`EvictionByEvictionAPI`).
//!
//! Dry-run (the request's `dryRun=All` or the eviction's `deleteOptions.dryRun`) checks
//! everything and writes nothing. `deleteOptions.preconditions` are honoured, and a
//! resourceVersion precondition turns off the retries on conflict.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skiff_apimachinery::status::Cause;
use skiff_apimachinery::{ApiError, LabelSelector};

use crate::AppState;
use crate::registry::store::{DeleteOptions, ListOptions, WriteOptions};
use crate::resources::ResourceDef;
use crate::util::{meta_str, set_in};

/// Most entries a budget's `disruptedPods` may hold before evictions are refused
/// (`MaxDisruptedPodSize`): the disruption controller has fallen far behind.
pub const MAX_DISRUPTED_POD_SIZE: usize = 2000;
/// Attempts of the read-decide-write loops on conflicts (`EvictionsRetry.Steps`).
const EVICTION_RETRIES: usize = 20;
/// Pause between two attempts (`EvictionsRetry.Duration`).
const EVICTION_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// The message of a refused eviction, which `kubectl drain` prints.
pub const TOO_MANY_REQUESTS_MESSAGE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
/// The message of an eviction of a pod covered by several budgets.
pub const MULTIPLE_PDBS_MESSAGE: &str =
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

/// The resource definition of PodDisruptionBudgets (policy/v1).
fn pdb_def() -> Option<&'static ResourceDef> {
    static PDBS: std::sync::LazyLock<Option<ResourceDef>> = std::sync::LazyLock::new(|| {
        crate::resources::builtin().into_iter().find(|d| d.resource == "poddisruptionbudgets" && d.group == "policy")
    });
    PDBS.as_ref()
}

/// 429 TooManyRequests with a `DisruptionBudget` cause (`retryAfterSeconds` left out when 0).
fn too_many_requests(cause: String, retry_after_seconds: u32) -> ApiError {
    let mut e = ApiError::too_many_requests(TOO_MANY_REQUESTS_MESSAGE, retry_after_seconds);
    if let Some(d) = e.details.as_mut() {
        d.retry_after_seconds = (retry_after_seconds > 0).then_some(retry_after_seconds);
        d.causes.push(Cause { reason: "DisruptionBudget".into(), message: cause, field: String::new() });
    }
    e
}

/// `createTooManyRequestsError`: the budget's status does not reflect its spec yet.
fn still_processing(pdb_name: &str) -> ApiError {
    too_many_requests(format!("The disruption budget {pdb_name} is still being processed by the server."), 10)
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

fn being_deleted(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// `canIgnorePDB`: deleting this pod disrupts nothing more.
fn can_ignore_pdb(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || being_deleted(pod)
}

/// `shouldEnforceResourceVersion`: a pod that could still become Ready is deleted only as read.
fn should_enforce_resource_version(pod: &Value) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && !being_deleted(pod)
}

/// `podutil.IsPodReady`.
fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn is_conflict(e: &ApiError) -> bool {
    e.code == 409 && e.reason == "Conflict"
}

/// What the eviction's `deleteOptions` ask, with the dry-run of the request folded in
/// (`propagateDryRun`).
fn delete_options(eviction: &Value, opts: &WriteOptions) -> Result<DeleteOptions, ApiError> {
    let d = &eviction["deleteOptions"];
    let body_dry_run = match &d["dryRun"] {
        Value::Null => false,
        Value::Array(a) if a.is_empty() => false,
        Value::Array(a) if a.len() == 1 && a[0] == "All" => true,
        other => {
            return Err(ApiError::invalid(
                "policy",
                "Eviction",
                meta_str(eviction, "name"),
                vec![Cause {
                    reason: "FieldValueNotSupported".into(),
                    message: format!("Unsupported value: {other}: supported values: \"All\""),
                    field: "deleteOptions.dryRun".into(),
                }],
            ));
        }
    };
    let grace = &d["gracePeriodSeconds"];
    if !grace.is_null() && grace.as_i64().is_none() {
        return Err(ApiError::bad_request(format!("deleteOptions.gracePeriodSeconds: invalid value {grace}")));
    }
    Ok(DeleteOptions {
        uid: d["preconditions"]["uid"].as_str().filter(|s| !s.is_empty()).map(str::to_string),
        resource_version: d["preconditions"]["resourceVersion"].as_str().filter(|s| !s.is_empty()).map(str::to_string),
        propagation_policy: d["propagationPolicy"].as_str().map(str::to_string),
        grace_period_seconds: grace.as_i64(),
        dry_run: opts.dry_run || body_dry_run,
        user: opts.user.clone(),
    })
}

/// The server's own write options (no user: no admission), dry-run as the eviction.
fn internal_write(dry_run: bool) -> WriteOptions {
    WriteOptions { dry_run, ..Default::default() }
}

/// `POST pods/{name}/eviction`; see the module documentation. Returns the `Success` Status.
///
/// # Errors
/// 400 for a name mismatch; 404 for a missing pod; 409 for failed preconditions; 429
/// TooManyRequests (with a `DisruptionBudget` cause) when the budget allows no disruption or has
/// not caught up; 403 when the budget's status is corrupt or its `disruptedPods` too long; 500
/// when several budgets cover the pod; 504 when conflicts on the budget never end.
pub async fn evict(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    eviction: Value,
    opts: &WriteOptions,
) -> Result<Value, ApiError> {
    let body_name = meta_str(&eviction, "name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
    }
    let original = delete_options(&eviction, opts)?;
    let success = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});

    // Pods whose deletion cannot break a budget go at once; conflicts are retried unless the
    // caller pinned a resourceVersion.
    let retry_conflicts = original.resource_version.is_none();
    let mut attempt = 0;
    let pod = loop {
        attempt += 1;
        let pod = state.objects.get(def, ns, name).await?;
        if !can_ignore_pdb(&pod) {
            break pod;
        }
        let mut del = original.clone();
        if should_enforce_resource_version(&pod) && del.resource_version.is_none() {
            del.resource_version = Some(meta_str(&pod, "resourceVersion").to_string());
        }
        match add_condition_and_delete(state, def, ns, name, del).await {
            Ok(()) => return Ok(success),
            Err(e) if retry_conflicts && is_conflict(&e) && attempt < EVICTION_RETRIES => {
                tokio::time::sleep(EVICTION_RETRY_PAUSE).await;
            }
            Err(e) => return Err(e),
        }
    };

    let pdbs = budgets_of(state, ns, &pod).await?;
    if pdbs.len() > 1 {
        // Kubernetes answers this with a Status object of code 500 and no reason.
        return Err(ApiError::new(500, "", MULTIPLE_PDBS_MESSAGE));
    }
    let mut pin_pod_version = false;
    let mut pdb_name = String::new();
    if let Some(pdb) = pdbs.into_iter().next() {
        pdb_name = meta_str(&pdb, "name").to_string();
        let status = &pdb["status"];
        let n = |f: &str| status[f].as_i64().unwrap_or(0);
        let unhealthy_can_go = !is_ready(&pod)
            && (pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
                || (n("currentHealthy") >= n("desiredHealthy") && n("desiredHealthy") > 0));
        if unhealthy_can_go {
            // The unready pod counts neither as healthy nor as desired: no disruption is spent,
            // but it must still be unready when deleted.
            pin_pod_version = true;
        } else {
            check_and_decrement_with_retries(state, ns, name, pdb, original.dry_run).await?;
        }
    }

    let mut del = original.clone();
    if pin_pod_version {
        del.resource_version = Some(meta_str(&pod, "resourceVersion").to_string());
    }
    match add_condition_and_delete(state, def, ns, name, del).await {
        Ok(()) => Ok(success),
        Err(e) if is_conflict(&e) && pin_pod_version && original.resource_version.is_none() => {
            // The pod changed (maybe became Ready) since it was judged: let the client retry.
            Err(still_processing(&pdb_name))
        }
        Err(e) => Err(e),
    }
}

/// `getPodDisruptionBudgets`: the budgets of the namespace whose selector matches the pod (an
/// empty selector matches every pod, an absent or invalid one none).
async fn budgets_of(state: &Arc<AppState>, ns: &str, pod: &Value) -> Result<Vec<Value>, ApiError> {
    let Some(def) = pdb_def() else { return Ok(Vec::new()) };
    let listed = state.objects.list_from_store(def, Some(ns), &ListOptions::default(), 0).await?;
    let labels = skiff_apimachinery::selector::labels_of(pod);
    Ok(listed
        .items
        .into_iter()
        .filter(|pdb| {
            let sel = &pdb["spec"]["selector"];
            !sel.is_null() && LabelSelector::from_json(sel).is_ok_and(|s| s.matches(&labels))
        })
        .collect())
}

/// Re-reads the budget and tries `check_and_decrement` again while its write conflicts.
async fn check_and_decrement_with_retries(
    state: &Arc<AppState>,
    ns: &str,
    pod_name: &str,
    mut pdb: Value,
    dry_run: bool,
) -> Result<(), ApiError> {
    let Some(def) = pdb_def() else { return Ok(()) };
    let pdb_name = meta_str(&pdb, "name").to_string();
    for attempt in 1..=EVICTION_RETRIES {
        match check_and_decrement(state, def, ns, pod_name, &pdb, dry_run).await {
            Ok(()) => return Ok(()),
            Err(e) if is_conflict(&e) && attempt < EVICTION_RETRIES => {
                tokio::time::sleep(EVICTION_RETRY_PAUSE).await;
                pdb = state.objects.get(def, ns, &pdb_name).await?;
            }
            Err(e) if is_conflict(&e) => {
                let mut timeout = ApiError::new(
                    504,
                    "Timeout",
                    format!("Timeout: couldn't update PodDisruptionBudget {pdb_name:?} due to conflicts"),
                );
                timeout.details =
                    Some(skiff_apimachinery::status::Details { retry_after_seconds: Some(10), ..Default::default() });
                return Err(timeout);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `checkAndDecrement`: refuses unless the budget allows a disruption, then spends it: the
/// status is written with `disruptionsAllowed - 1` and the pod in `disruptedPods`, at the
/// budget's resourceVersion (409 when another eviction got in first).
async fn check_and_decrement(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: &str,
    pod_name: &str,
    pdb: &Value,
    dry_run: bool,
) -> Result<(), ApiError> {
    let name = meta_str(pdb, "name");
    let status = &pdb["status"];
    let n = |f: &str| status[f].as_i64().unwrap_or(0);
    let generation = pdb["metadata"]["generation"].as_i64().unwrap_or(0);
    if n("observedGeneration") < generation {
        return Err(still_processing(name));
    }
    let allowed = n("disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::forbidden("policy", "poddisruptionbudget", name, "pdb disruptions allowed is negative"));
    }
    if status["disruptedPods"].as_object().is_some_and(|m| m.len() > MAX_DISRUPTED_POD_SIZE) {
        return Err(ApiError::forbidden(
            "policy",
            "poddisruptionbudget",
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(too_many_requests(
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                n("desiredHealthy"),
                n("currentHealthy")
            ),
            0,
        ));
    }
    if dry_run {
        return Ok(());
    }
    let mut new = pdb.clone();
    set_in(&mut new, &["status", "disruptionsAllowed"], json!(allowed - 1));
    if allowed - 1 == 0 {
        set_disruption_allowed_false(&mut new);
    }
    set_in(&mut new, &["status", "disruptedPods", pod_name], json!(crate::util::now()));
    let rv = meta_str(pdb, "resourceVersion").to_string();
    state
        .objects
        .update(def, ns, name, Some("status"), &internal_write(false), None, |_| {
            let mut pinned = new.clone();
            set_in(&mut pinned, &["metadata", "resourceVersion"], json!(rv));
            Ok(pinned)
        })
        .await?;
    Ok(())
}

/// `UpdateDisruptionAllowedCondition` once the last disruption is spent: the condition turns
/// `False` / `InsufficientPods`.
fn set_disruption_allowed_false(pdb: &mut Value) {
    let observed = pdb["status"]["observedGeneration"].clone();
    let mut conditions: Vec<Value> = pdb["status"]["conditions"].as_array().cloned().unwrap_or_default();
    match conditions.iter_mut().find(|c| c["type"] == "DisruptionAllowed") {
        Some(c) => {
            if c["status"] != "False" {
                c["status"] = json!("False");
                c["lastTransitionTime"] = json!(crate::util::now());
            }
            c["reason"] = json!("InsufficientPods");
            c["observedGeneration"] = observed;
        }
        None => conditions.push(json!({
            "type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "",
            "observedGeneration": observed, "lastTransitionTime": crate::util::now(),
        })),
    }
    set_in(pdb, &["status", "conditions"], json!(conditions));
}

/// `addConditionAndDeletePod`: unless dry-run, sets the pod's `DisruptionTarget` condition
/// (checking the preconditions on the pod as stored, and moving a resourceVersion precondition
/// to the version this write made), then deletes the pod.
async fn add_condition_and_delete(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    mut del: DeleteOptions,
) -> Result<(), ApiError> {
    if !del.dry_run {
        let (uid, rv) = (del.uid.clone(), del.resource_version.clone());
        let written = state
            .objects
            .update(def, ns, name, Some("status"), &internal_write(false), None, |old| {
                let old = old.ok_or_else(|| ApiError::not_found("", "pods", name))?;
                let conflict = |what: &str, want: &str, have: &str| {
                    let mut e = ApiError::conflict("", "pods", name);
                    e.message = format!(
                        "Operation cannot be fulfilled on pods \"{name}\": Precondition failed: {what} in precondition: {want}, {what} in object meta: {have}"
                    );
                    e
                };
                if let Some(uid) = &uid
                    && uid != meta_str(old, "uid")
                {
                    return Err(conflict("UID", uid, meta_str(old, "uid")));
                }
                if let Some(rv) = &rv
                    && rv != meta_str(old, "resourceVersion")
                {
                    return Err(conflict("ResourceVersion", rv, meta_str(old, "resourceVersion")));
                }
                let mut new = old.clone();
                let mut conditions: Vec<Value> = new["status"]["conditions"].as_array().cloned().unwrap_or_default();
                let fresh = json!({
                    "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting", "lastProbeTime": null,
                    "lastTransitionTime": crate::util::now(),
                });
                match conditions.iter_mut().find(|c| c["type"] == "DisruptionTarget") {
                    Some(c) if c["status"] == "True" => {
                        c["reason"] = fresh["reason"].clone();
                        c["message"] = fresh["message"].clone();
                    }
                    Some(c) => *c = fresh,
                    None => conditions.push(fresh),
                }
                set_in(&mut new, &["status", "conditions"], json!(conditions));
                // Unpinned: a concurrent write makes the update loop call this again on the
                // newer pod, preconditions included.
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove("resourceVersion");
                }
                Ok(new)
            })
            .await?;
        if del.resource_version.is_some() {
            del.resource_version = Some(meta_str(&written.object, "resourceVersion").to_string());
        }
    }
    state.objects.delete(def, ns, name, &del).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_carries_the_disruption_budget_cause_and_no_zero_retry_after() {
        let status = too_many_requests("The disruption budget web needs 3 healthy pods and has 3 currently".into(), 0)
            .to_status();
        assert_eq!(status["code"], 429);
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(status["message"], TOO_MANY_REQUESTS_MESSAGE);
        assert_eq!(status["details"]["causes"][0]["reason"], "DisruptionBudget");
        assert!(status["details"].get("retryAfterSeconds").is_none());
        assert_eq!(still_processing("web").to_status()["details"]["retryAfterSeconds"], 10);
    }

    #[test]
    fn pending_terminal_and_deleting_pods_skip_the_budget() {
        assert!(can_ignore_pdb(&json!({"status": {"phase": "Pending"}})));
        assert!(can_ignore_pdb(&json!({"status": {"phase": "Succeeded"}})));
        assert!(can_ignore_pdb(&json!({"status": {"phase": "Running"}, "metadata": {"deletionTimestamp": "x"}})));
        assert!(!can_ignore_pdb(&json!({"status": {"phase": "Running"}})));
        assert!(should_enforce_resource_version(&json!({"status": {"phase": "Pending"}})));
        assert!(!should_enforce_resource_version(&json!({"status": {"phase": "Failed"}})));
    }
}
