//! Adoption and release of objects by a controller (`controller_ref_manager.go`).
//!
//! A controller *claims* the objects its selector matches: an orphan that matches is adopted
//! (a controller ownerReference with `controller: true` and `blockOwnerDeletion: true` is
//! added), an owned object that no longer matches is released (the reference is removed), and
//! objects controlled by someone else are left alone. Adoption first re-checks with a live GET
//! that the controller still exists with the same uid and is not being deleted (`canAdopt`),
//! so a recreated controller never adopts on behalf of its deleted namesake.
//!
//! Both adopt and release are JSON merge patches carrying the full new ownerReferences list
//! and the object's `resourceVersion` (and `uid`), so they fail with 409 Conflict instead of
//! clobbering a concurrent change.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as MetaLabelSelector, ObjectMeta, OwnerReference};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::util::{controller_of, labels_of};
use skiff_runtime::api::{ApiClient, ApiClientExt, ApiError, ApiObject, ApiResource, PatchType, is_not_found};
use skiff_runtime::informer::Store;

/// What to do with one candidate object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Already ours and matching: keep.
    Owned,
    /// Orphan that matches: adopt.
    Adopt,
    /// Ours but no longer matching: release.
    Release,
    /// Not ours (owned by another controller, not matching, or being deleted): ignore.
    Ignore,
}

/// The controller side of a claim: who claims, and whether it is being deleted.
#[derive(Debug, Clone)]
pub struct Claimant {
    /// The controller reference to set on adopted objects.
    pub controller_ref: OwnerReference,
    /// The controller's namespace (objects in other namespaces are never adopted).
    pub namespace: Option<String>,
    /// Whether the controller has a deletionTimestamp.
    pub being_deleted: bool,
}

/// `ClaimObject`'s decision for an object with metadata `meta` whose labels match or not.
pub fn decide(claimant: &Claimant, meta: &ObjectMeta, matches: bool) -> ClaimDecision {
    if let Some(cref) = controller_of(meta) {
        if cref.uid != claimant.controller_ref.uid {
            return ClaimDecision::Ignore;
        }
        if matches {
            return ClaimDecision::Owned;
        }
        if claimant.being_deleted {
            return ClaimDecision::Ignore;
        }
        return ClaimDecision::Release;
    }
    if claimant.being_deleted || !matches || meta.deletion_timestamp.is_some() {
        return ClaimDecision::Ignore;
    }
    if claimant.namespace.as_deref().is_some_and(|ns| !ns.is_empty() && meta.namespace.as_deref() != Some(ns)) {
        return ClaimDecision::Ignore;
    }
    ClaimDecision::Adopt
}

/// Patches `meta`'s object to carry `refs` as its ownerReferences (merge patch with
/// resourceVersion and uid preconditions).
pub async fn patch_owner_references(
    api: &dyn ApiClient,
    resource: &ApiResource,
    meta: &ObjectMeta,
    refs: Vec<OwnerReference>,
) -> Result<(), ApiError> {
    patch_owner_references_and_finalizers(api, resource, meta, refs, None).await
}

/// [`patch_owner_references`], also setting the finalizers to `finalizers` when given.
async fn patch_owner_references_and_finalizers(
    api: &dyn ApiClient,
    resource: &ApiResource,
    meta: &ObjectMeta,
    refs: Vec<OwnerReference>,
    finalizers: Option<Vec<String>>,
) -> Result<(), ApiError> {
    let mut patch = json!({
        "metadata": {
            "ownerReferences": crate::garbagecollector::list_or_null(&refs),
            "resourceVersion": meta.resource_version,
            "uid": meta.uid,
        }
    });
    if let Some(f) = finalizers {
        patch["metadata"]["finalizers"] = json!(f);
    }
    api.patch(
        resource,
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
        PatchType::Merge,
        &patch,
        None,
    )
    .await
    .map(|_| ())
}

/// Adds the claimant's controller reference (`AdoptPod`/`AdoptReplicaSet`).
pub async fn adopt(
    api: &dyn ApiClient,
    resource: &ApiResource,
    meta: &ObjectMeta,
    controller_ref: &OwnerReference,
) -> Result<(), ApiError> {
    adopt_with_finalizers(api, resource, meta, controller_ref, &[]).await
}

/// [`adopt`], also adding `finalizers` the object lacks in the same patch, as
/// `PodControllerRefManager` does for the Job controller's tracking finalizer.
pub async fn adopt_with_finalizers(
    api: &dyn ApiClient,
    resource: &ApiResource,
    meta: &ObjectMeta,
    controller_ref: &OwnerReference,
    finalizers: &[&str],
) -> Result<(), ApiError> {
    let mut refs: Vec<OwnerReference> =
        meta.owner_references.iter().flatten().filter(|r| r.uid != controller_ref.uid).cloned().collect();
    refs.push(controller_ref.clone());
    let mut have: Vec<String> = meta.finalizers.clone().unwrap_or_default();
    let missing: Vec<&str> = finalizers.iter().copied().filter(|f| !have.iter().any(|h| h == f)).collect();
    let finalizers = (!missing.is_empty()).then(|| {
        have.extend(missing.into_iter().map(String::from));
        have
    });
    patch_owner_references_and_finalizers(api, resource, meta, refs, finalizers).await
}

/// Removes the references to `owner_uid` (`ReleasePod`/`ReleaseReplicaSet`).
pub async fn release(
    api: &dyn ApiClient,
    resource: &ApiResource,
    meta: &ObjectMeta,
    owner_uid: &str,
) -> Result<(), ApiError> {
    let refs: Vec<OwnerReference> =
        meta.owner_references.iter().flatten().filter(|r| r.uid != owner_uid).cloned().collect();
    patch_owner_references(api, resource, meta, refs).await
}

/// Claims `candidates` for `claimant` (`ClaimPods`/`ClaimReplicaSets`): returns the objects the
/// claimant owns afterwards. `matches` says whether an object's labels match the selector;
/// `can_adopt` is the live re-check, run at most once and only if something is adopted.
///
/// # Errors
/// The first adoption/release error other than NotFound (the claimed list is then incomplete;
/// the caller should retry).
pub async fn claim<T, M, C, Fut>(
    api: &dyn ApiClient,
    resource: &ApiResource,
    claimant: &Claimant,
    candidates: Vec<T>,
    meta_of: impl Fn(&T) -> &ObjectMeta,
    matches: M,
    can_adopt: C,
) -> Result<Vec<T>, ApiError>
where
    M: Fn(&T) -> bool,
    C: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), ApiError>>,
{
    claim_adding_finalizers(api, resource, claimant, candidates, meta_of, matches, can_adopt, &[]).await
}

/// [`claim`], adding `finalizers` to every adopted object ([`adopt_with_finalizers`]).
///
/// # Errors
/// As [`claim`].
#[allow(clippy::too_many_arguments)]
pub async fn claim_adding_finalizers<T, M, C, Fut>(
    api: &dyn ApiClient,
    resource: &ApiResource,
    claimant: &Claimant,
    candidates: Vec<T>,
    meta_of: impl Fn(&T) -> &ObjectMeta,
    matches: M,
    can_adopt: C,
    finalizers: &[&str],
) -> Result<Vec<T>, ApiError>
where
    M: Fn(&T) -> bool,
    C: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(), ApiError>>,
{
    let mut claimed = Vec::new();
    let mut first_error = None;
    let check = OnceCell::new();
    let mut can_adopt = Some(can_adopt);
    for obj in candidates {
        let meta = meta_of(&obj);
        match decide(claimant, meta, matches(&obj)) {
            ClaimDecision::Owned => claimed.push(obj),
            ClaimDecision::Ignore => {}
            ClaimDecision::Release => {
                if let Err(e) = release(api, resource, meta, &claimant.controller_ref.uid).await
                    && !is_not_found(&e)
                {
                    first_error.get_or_insert(e);
                }
            }
            ClaimDecision::Adopt => {
                let verdict = check
                    .get_or_init(|| async {
                        match can_adopt.take() {
                            Some(f) => f().await,
                            None => Ok(()),
                        }
                    })
                    .await;
                if let Err(e) = verdict {
                    first_error.get_or_insert(ApiError::new(
                        e.code,
                        &e.reason,
                        format!(
                            "can't adopt {} {}: {}",
                            resource.kind,
                            meta.name.as_deref().unwrap_or_default(),
                            e.message
                        ),
                    ));
                    continue;
                }
                match adopt_with_finalizers(api, resource, meta, &claimant.controller_ref, finalizers).await {
                    Ok(()) => claimed.push(obj),
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(claimed),
    }
}

/// `resolveControllerRef`: the controller of `kind` in `store` that `meta`'s controller
/// reference points to, if it exists with that uid.
pub fn resolve_controller_ref<K: ApiObject>(store: &Store<K>, meta: &ObjectMeta, kind: &str) -> Option<Arc<K>> {
    let cref = controller_of(meta)?;
    if cref.kind != kind {
        return None;
    }
    let owner = store.get_namespaced(meta.namespace.as_deref(), &cref.name)?;
    (owner.meta().uid.as_deref() == Some(cref.uid.as_str())).then_some(owner)
}

/// The controllers in `meta`'s namespace whose non-empty selector (`selector_of`) matches its
/// labels: who may adopt an orphan (`getPodReplicaSets`, `getPodStatefulSets`).
pub fn controllers_selecting<K: ApiObject>(
    store: &Store<K>,
    meta: &ObjectMeta,
    selector_of: impl Fn(&K) -> Option<&MetaLabelSelector>,
) -> Vec<Arc<K>> {
    let labels = labels_of(meta);
    if labels.is_empty() {
        return Vec::new();
    }
    store
        .list_namespace(meta.namespace.as_deref().unwrap_or_default())
        .into_iter()
        .filter(|c| {
            selector_of(c)
                .and_then(|s| crate::util::selector_of(s).ok())
                .is_some_and(|sel| !sel.is_empty() && sel.matches(&labels))
        })
        .collect()
}

/// `RecheckDeletionTimestamp`: the live re-check before an adoption (`canAdopt`): a GET of the
/// controller must find it with the same uid and not being deleted, so a recreated controller
/// never adopts on behalf of its deleted namesake.
///
/// # Errors
/// The GET's error, or 409 Conflict when the controller is gone or being deleted.
pub async fn recheck_deletion_timestamp<K: ApiObject>(
    api: &dyn ApiClient,
    namespace: Option<&str>,
    name: &str,
    uid: &str,
) -> Result<(), ApiError> {
    let fresh: K = api.get_typed(namespace, name).await?;
    let ns = namespace.unwrap_or_default();
    let fresh_uid = fresh.meta().uid.as_deref().unwrap_or_default();
    if fresh_uid != uid {
        let kind = K::kind(&());
        return Err(ApiError::new(
            409,
            "Conflict",
            format!("original {kind} {ns}/{name} is gone: got uid {fresh_uid}, wanted {uid}"),
        ));
    }
    if fresh.meta().deletion_timestamp.is_some() {
        return Err(ApiError::new(409, "Conflict", format!("{ns}/{name} has just been deleted")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimant(deleting: bool) -> Claimant {
        Claimant {
            controller_ref: OwnerReference {
                uid: "me".into(),
                name: "rs".into(),
                kind: "ReplicaSet".into(),
                api_version: "apps/v1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            namespace: Some("ns".into()),
            being_deleted: deleting,
        }
    }

    fn meta(controller: Option<&str>, deleting: bool, ns: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            owner_references: controller
                .map(|uid| vec![OwnerReference { uid: uid.into(), controller: Some(true), ..Default::default() }]),
            deletion_timestamp: deleting.then_some({
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
            }),
            ..Default::default()
        }
    }

    #[test]
    fn claim_decisions_follow_controller_ref_manager() {
        use ClaimDecision::*;
        let cases = [
            // (claimant deleting, object controller, object deleting, ns, matches) → decision
            (false, Some("me"), false, "ns", true, Owned),
            (false, Some("me"), false, "ns", false, Release),
            (true, Some("me"), false, "ns", false, Ignore),
            (true, Some("me"), false, "ns", true, Owned),
            (false, Some("other"), false, "ns", true, Ignore),
            (false, None, false, "ns", true, Adopt),
            (false, None, false, "ns", false, Ignore),
            (false, None, true, "ns", true, Ignore),
            (true, None, false, "ns", true, Ignore),
            (false, None, false, "elsewhere", true, Ignore),
        ];
        for (deleting, ctrl, obj_deleting, ns, matches, want) in cases {
            assert_eq!(decide(&claimant(deleting), &meta(ctrl, obj_deleting, ns), matches), want, "{ctrl:?} {matches}");
        }
    }
}
