//! The CRD controllers kube-apiserver runs itself (apiextensions-apiserver's
//! `pkg/controller/establish` and `pkg/controller/status`, the naming controller, with the
//! serving side of `customresource_handler.go` and the `finalizer` controller): they stay in the
//! API server because they register what it serves. [`run`] follows the CRD watch cache and,
//! for every CustomResourceDefinition, registers one `ResourceDef` per served version (with a
//! watch cache per CRD, shared by its versions), sets `status.acceptedNames`,
//! `storedVersions` and the `NamesAccepted`/`Established` conditions (names that clash with a
//! built-in resource are not accepted), and on deletion removes every object of the CRD before
//! dropping the `customresourcecleanup.apiextensions.k8s.io` finalizer the delete added.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skiff_apimachinery::ApiError;
use skiff_store::RangeRequest;

use super::{CLEANUP_FINALIZER, intern, storage_prefix};
use crate::AppState;
use crate::registry::store::WriteOptions;
use crate::resources::ResourceDef;
use crate::storage::watchcache::{CacheMsg, Recv, WatchCache};
use crate::util::meta_str;

/// `status.acceptedNames` of a CRD: its names with Kubernetes' defaults filled in.
fn accepted_names(crd: &Value) -> Value {
    let mut names = crd["spec"]["names"].clone();
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    if let Some(m) = names.as_object_mut() {
        if m.get("singular").and_then(Value::as_str).is_none_or(str::is_empty) {
            m.insert("singular".into(), json!(kind.to_ascii_lowercase()));
        }
        if m.get("listKind").and_then(Value::as_str).is_none_or(str::is_empty) {
            m.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    names
}

fn condition(ty: &str, status: &str, reason: &str, message: &str, old: &Value) -> Value {
    let previous = old["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty && c["status"] == status))
        .and_then(|c| c.get("lastTransitionTime").cloned());
    json!({"type": ty, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": previous.unwrap_or_else(|| json!(crate::util::now()))})
}

/// The status the controller wants for `crd`, given whether its names conflict.
pub(super) fn desired_status(crd: &Value, conflict: Option<String>) -> Value {
    let mut status = crd["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    let conditions = match &conflict {
        None => vec![
            condition("NamesAccepted", "True", "NoConflicts", "no conflicts found", crd),
            condition("Established", "True", "InitialNamesAccepted", "the initial names have been accepted", crd),
        ],
        Some(msg) => vec![
            condition("NamesAccepted", "False", "NameConflict", msg, crd),
            condition("Established", "False", "NotAccepted", "not all names are accepted", crd),
        ],
    };
    status["conditions"] = json!(conditions);
    status["acceptedNames"] = if conflict.is_none() { accepted_names(crd) } else { json!({"plural": "", "kind": ""}) };
    let mut stored: Vec<Value> = status["storedVersions"].as_array().cloned().unwrap_or_default();
    if conflict.is_none()
        && let Some(v) = crd["spec"]["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["storage"].as_bool() == Some(true)))
            .and_then(|v| v["name"].as_str())
        && !stored.iter().any(|s| s == v)
    {
        stored.push(json!(v));
    }
    status["storedVersions"] = json!(stored);
    status
}

struct Served {
    storage: &'static str,
    cache: Arc<WatchCache>,
    task: tokio::task::AbortHandle,
}

/// Deletes every object stored under `prefix` (the CRD's objects), finalizers or not.
async fn delete_all(state: &AppState, prefix: &str) -> Result<(), ApiError> {
    let store = &state.objects.store;
    loop {
        let req = RangeRequest { prefix: prefix.to_string(), start_after: None, limit: 500, revision: 0 };
        let resp = store.range(req).await.map_err(|e| ApiError::internal(e.to_string()))?;
        if resp.kvs.is_empty() {
            return Ok(());
        }
        for kv in resp.kvs {
            match store.delete(&kv.key, None).await {
                Ok(_) | Err(skiff_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(ApiError::internal(e.to_string())),
            }
        }
    }
}

/// The CRD controller: serves, establishes and cleans up CustomResourceDefinitions until the
/// CRD watch cache closes. Started by [`crate::ApiServer::start`].
pub async fn run(state: Arc<AppState>) {
    let Some(crd_def) = state.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions").cloned() else {
        return;
    };
    let Ok(cache) = state.cache(&crd_def).cloned() else { return };
    let mut served: HashMap<String, Served> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    while !cache.is_ready() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    loop {
        let snap = cache.snapshot(&crd_def.prefix());
        let mut sub = snap.subscription;
        let mut retry = false;
        if let Err(e) = reconcile(&state, &crd_def, &snap.objects, &mut served, &mut tasks).await {
            tracing::warn!(error = %e, "reconciling CustomResourceDefinitions");
            retry = true;
        }
        if retry {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        loop {
            match sub.recv().await {
                Recv::Msg(CacheMsg::Progress(_)) => continue,
                Recv::Closed => return,
                _ => break,
            }
        }
    }
}

async fn reconcile(
    state: &Arc<AppState>,
    crd_def: &ResourceDef,
    crds: &[Arc<Value>],
    served: &mut HashMap<String, Served>,
    tasks: &mut tokio::task::JoinSet<()>,
) -> Result<(), ApiError> {
    let mut seen = HashSet::new();
    for crd in crds {
        let name = meta_str(crd, "name").to_string();
        seen.insert(name.clone());
        let group = crd["spec"]["group"].as_str().unwrap_or("").to_string();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or("").to_string();
        let storage = intern(&format!("{group}/{plural}"));
        if crd["metadata"]["deletionTimestamp"].is_string() {
            state.registry.set_custom(&name, Vec::new());
            delete_all(state, &storage_prefix(&group, &plural)).await?;
            let has_finalizer =
                crd["metadata"]["finalizers"].as_array().is_some_and(|f| f.iter().any(|x| x == CLEANUP_FINALIZER));
            if has_finalizer {
                let opts = WriteOptions::default();
                let r = state
                    .objects
                    .update(crd_def, "", &name, None, &opts, None, |old| {
                        let mut new = old.cloned().ok_or_else(|| ApiError::not_found("", "", &name))?;
                        if let Some(f) = new["metadata"]["finalizers"].as_array_mut() {
                            f.retain(|x| x != CLEANUP_FINALIZER);
                        }
                        Ok(new)
                    })
                    .await;
                match r {
                    Ok(_) => {}
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            continue;
        }
        let conflict = builtin_conflict(state, &group, &plural);
        if conflict.is_none() {
            let entry = match served.remove(&name) {
                Some(s) if s.storage == storage => s,
                old => {
                    if let Some(o) = old {
                        o.task.abort();
                    }
                    let cache = WatchCache::new(
                        format!("/registry/{storage}/"),
                        crate::WATCH_CACHE_EVENTS,
                        crate::WATCHER_BACKLOG,
                    );
                    let task = tasks.spawn(cache.clone().run(state.objects.store.clone()));
                    Served { storage, cache, task }
                }
            };
            let services = {
                let slot = crate::StateSlot::default();
                slot.set(state);
                Arc::new(crate::admission::chain::EndpointResolver::new(slot))
            };
            state.registry.set_custom(&name, super::defs_with_services(crd, &entry.cache, storage, services));
            served.insert(name.clone(), entry);
        }
        let status = desired_status(crd, conflict);
        if !same_status(&crd["status"], &status) {
            let opts = WriteOptions::default();
            let r = state
                .objects
                .update(crd_def, "", &name, Some("status"), &opts, None, |old| {
                    let mut new = old.cloned().ok_or_else(|| ApiError::not_found("", "", &name))?;
                    new["status"] = status.clone();
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove("resourceVersion");
                    }
                    Ok(new)
                })
                .await;
            match r {
                Ok(_) => {}
                Err(e) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
    }
    let gone: Vec<String> = served.keys().filter(|n| !seen.contains(*n)).cloned().collect();
    for name in gone {
        state.registry.set_custom(&name, Vec::new());
        if let Some(s) = served.remove(&name) {
            s.task.abort();
            delete_all(state, &format!("/registry/{}/", s.storage)).await?;
        }
    }
    Ok(())
}

fn strip_times(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(cs) = s["conditions"].as_array_mut() {
        for c in cs {
            if let Some(m) = c.as_object_mut() {
                m.remove("lastTransitionTime");
            }
        }
    }
    s
}

fn same_status(a: &Value, b: &Value) -> bool {
    strip_times(a) == strip_times(b)
}

fn builtin_conflict(state: &AppState, group: &str, plural: &str) -> Option<String> {
    let clash = state.registry.all().iter().any(|d| d.group == group && d.resource == plural);
    clash.then(|| format!("\"{plural}\" is already in use by a built-in resource of group {group:?}"))
}
