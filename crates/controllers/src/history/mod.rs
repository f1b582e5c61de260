//! ControllerRevision history (`pkg/controller/history/controller_history.go`): the immutable
//! snapshots of a workload's template that StatefulSets (and DaemonSets) roll between.
//!
//! A revision is named `<parent>-<hash>`, where the hash covers its data and, when a name is
//! already taken by different data, the parent's collision count; it carries the
//! [`CONTROLLER_REVISION_HASH_LABEL`] and a controller reference to its parent. Reads come from
//! the callers' informer caches; [`History`] performs the writes.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::Value;

use crate::deployment::util::safe_encode_string;
use crate::util::name_of;
use skiff_runtime::api::{ApiClient, ApiClientExt, ApiError, DeleteOptions, is_already_exists, is_not_found};

/// `ControllerRevisionHashLabel`: the label holding a revision's hash.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// Longest parent-name prefix of a revision name, leaving room for `-` and the hash in a
/// 253-character name.
const MAX_PREFIX_LEN: usize = 223;

/// Most names tried by [`History::create_controller_revision`] before giving up.
const MAX_COLLISIONS: usize = 100;

/// `ControllerRevisionName`: `<prefix>-<hash>`, the prefix cut to 223 characters.
pub fn controller_revision_name(prefix: &str, hash: &str) -> String {
    let prefix = match prefix.char_indices().nth(MAX_PREFIX_LEN) {
        Some((i, _)) => &prefix[..i],
        None => prefix,
    };
    format!("{prefix}-{hash}")
}

/// FNV-1, 32 bits (`hash/fnv.New32`), which `HashControllerRevision` uses.
fn fnv32(data: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in data {
        hash = hash.wrapping_mul(0x0100_0193);
        hash ^= u32::from(*b);
    }
    hash
}

/// The revision's data (`null` when unset).
pub fn revision_data(revision: &ControllerRevision) -> &Value {
    static NULL: Value = Value::Null;
    revision.data.as_ref().map_or(&NULL, |d| &d.0)
}

/// `HashControllerRevision`: FNV-1 over the data's JSON and, when given, the decimal
/// `probe` (the collision count), safe-encoded.
pub fn hash_controller_revision(revision: &ControllerRevision, probe: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(revision_data(revision)).unwrap_or_default();
    if let Some(p) = probe {
        bytes.extend_from_slice(p.to_string().as_bytes());
    }
    safe_encode_string(&fnv32(&bytes).to_string())
}

/// `NewControllerRevision`: a revision of `parent` (namespace and name from `parent`, owned
/// through `controller_ref`) holding `data`, labelled with `template_labels` and its hash.
pub fn new_controller_revision(
    parent: &ObjectMeta,
    controller_ref: OwnerReference,
    template_labels: &BTreeMap<String, String>,
    data: Value,
    revision: i64,
    collision_count: Option<i32>,
) -> ControllerRevision {
    let mut cr = ControllerRevision {
        metadata: ObjectMeta {
            namespace: parent.namespace.clone(),
            labels: Some(template_labels.clone()),
            owner_references: Some(vec![controller_ref]),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision,
    };
    let hash = hash_controller_revision(&cr, collision_count);
    cr.metadata.name = Some(controller_revision_name(name_of(parent), &hash));
    cr.metadata.labels.get_or_insert_with(BTreeMap::new).insert(CONTROLLER_REVISION_HASH_LABEL.to_string(), hash);
    cr
}

fn hash_label(cr: &ControllerRevision) -> Option<&str> {
    cr.metadata.labels.as_ref()?.get(CONTROLLER_REVISION_HASH_LABEL).map(String::as_str)
}

/// `EqualRevision`: two revisions with different hash labels differ; otherwise their data
/// decides.
pub fn equal_revision(lhs: &ControllerRevision, rhs: &ControllerRevision) -> bool {
    if let (Some(l), Some(r)) = (hash_label(lhs), hash_label(rhs))
        && l != r
    {
        return false;
    }
    revision_data(lhs) == revision_data(rhs)
}

/// `FindEqualRevisions`: the revisions equal to `needle`, in the order given.
pub fn find_equal_revisions<'a>(
    revisions: &'a [ControllerRevision],
    needle: &ControllerRevision,
) -> Vec<&'a ControllerRevision> {
    revisions.iter().filter(|r| equal_revision(r, needle)).collect()
}

/// `SortControllerRevisions`: by revision number, then creation time, then name.
pub fn sort_controller_revisions(revisions: &mut [ControllerRevision]) {
    revisions.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| {
                let t = |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
                t(a).partial_cmp(&t(b)).unwrap_or(Ordering::Equal)
            })
            .then_with(|| name_of(&a.metadata).cmp(name_of(&b.metadata)))
    });
}

/// The writes of the history (`realHistory`).
#[derive(Clone)]
pub struct History {
    api: Arc<dyn ApiClient>,
}

impl History {
    /// History written through `api`.
    pub fn new(api: Arc<dyn ApiClient>) -> Self {
        Self { api }
    }

    /// `CreateControllerRevision`: creates `revision` under the name its hash and
    /// `*collision_count` give. When that name holds the same data already, the existing
    /// revision is returned; when it holds different data, `*collision_count` is incremented and
    /// the next name tried.
    ///
    /// # Errors
    /// The create's or the conflicting revision's read's error; a 409 after
    /// [`MAX_COLLISIONS`] names.
    pub async fn create_controller_revision(
        &self,
        parent: &ObjectMeta,
        revision: &ControllerRevision,
        collision_count: &mut i32,
    ) -> Result<ControllerRevision, ApiError> {
        let mut clone = revision.clone();
        clone.metadata.namespace = parent.namespace.clone();
        for _ in 0..MAX_COLLISIONS {
            let hash = hash_controller_revision(revision, Some(*collision_count));
            clone.metadata.name = Some(controller_revision_name(name_of(parent), &hash));
            match self.api.create_typed(&clone).await {
                Err(e) if is_already_exists(&e) => {
                    let exists: ControllerRevision =
                        self.api.get_typed(parent.namespace.as_deref(), name_of(&clone.metadata)).await?;
                    if revision_data(&exists) == revision_data(&clone) {
                        return Ok(exists);
                    }
                    *collision_count += 1;
                }
                other => return other,
            }
        }
        Err(ApiError::new(
            409,
            "Conflict",
            format!("no free ControllerRevision name for {} after {MAX_COLLISIONS} collisions", name_of(parent)),
        ))
    }

    /// `UpdateControllerRevision`: sets the revision number (how an old revision becomes the
    /// newest again on a rollback), re-reading and retrying on a conflict.
    ///
    /// # Errors
    /// The update's error after one retry, or the re-read's.
    pub async fn update_controller_revision(
        &self,
        revision: &ControllerRevision,
        new_revision: i64,
    ) -> Result<ControllerRevision, ApiError> {
        let mut clone = revision.clone();
        let mut attempt = 0;
        loop {
            if clone.revision == new_revision {
                return Ok(clone);
            }
            clone.revision = new_revision;
            match self.api.update_typed(&clone).await {
                Ok(updated) => return Ok(updated),
                Err(e) if attempt >= 1 => return Err(e),
                Err(_) => {
                    attempt += 1;
                    clone = self.api.get_typed(clone.metadata.namespace.as_deref(), name_of(&clone.metadata)).await?;
                }
            }
        }
    }

    /// `DeleteControllerRevision` (a revision already gone counts as deleted).
    ///
    /// # Errors
    /// The delete's error other than 404.
    pub async fn delete_controller_revision(&self, revision: &ControllerRevision) -> Result<(), ApiError> {
        match self
            .api
            .delete_typed::<ControllerRevision>(
                revision.metadata.namespace.as_deref(),
                name_of(&revision.metadata),
                &DeleteOptions::default(),
            )
            .await
        {
            Err(e) if !is_not_found(&e) => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;
    use skiff_runtime::fake::FakeApi;

    use super::*;

    fn parent() -> ObjectMeta {
        ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            uid: Some("web-uid".into()),
            ..Default::default()
        }
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "StatefulSet".into(),
            name: "web".into(),
            uid: "web-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn revision(image: &str, number: i64) -> ControllerRevision {
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        new_controller_revision(&parent(), owner(), &labels, json!({"image": image}), number, None)
    }

    #[test]
    fn a_revision_is_named_after_its_parent_and_labelled_with_its_hash() {
        let r = revision("nginx", 1);
        let hash = r.metadata.labels.as_ref().unwrap()[CONTROLLER_REVISION_HASH_LABEL].clone();
        assert_eq!(r.metadata.name.as_deref(), Some(format!("web-{hash}").as_str()));
        assert_eq!(r.metadata.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(r.metadata.owner_references.as_ref().unwrap()[0].uid, "web-uid");
        assert_ne!(hash_controller_revision(&r, None), hash_controller_revision(&r, Some(1)));
        assert_eq!(controller_revision_name(&"x".repeat(300), "h").len(), MAX_PREFIX_LEN + 2);
    }

    #[test]
    fn revisions_with_the_same_data_are_equal_and_others_are_not() {
        let (a, b, c) = (revision("nginx", 1), revision("nginx", 7), revision("httpd", 1));
        assert!(equal_revision(&a, &b));
        assert!(!equal_revision(&a, &c));
        let all = [a.clone(), c.clone(), b.clone()];
        let found: Vec<i64> = find_equal_revisions(&all, &a).iter().map(|r| r.revision).collect();
        assert_eq!(found, [1, 7]);
    }

    #[test]
    fn revisions_sort_by_number_then_age_then_name() {
        let t = |s| Some(Time(Timestamp::from_second(s).unwrap()));
        let mut a = revision("a", 2);
        a.metadata.creation_timestamp = t(20);
        let mut b = revision("b", 2);
        b.metadata.creation_timestamp = t(10);
        let c = revision("c", 1);
        let mut all = vec![a.clone(), b.clone(), c.clone()];
        sort_controller_revisions(&mut all);
        let order: Vec<_> = all.iter().map(|r| r.metadata.name.clone()).collect();
        assert_eq!(order, [c.metadata.name, b.metadata.name, a.metadata.name]);
    }

    #[tokio::test]
    async fn a_name_taken_by_other_data_bumps_the_collision_count() {
        let api = Arc::new(FakeApi::new());
        let history = History::new(api.clone());
        let wanted = revision("nginx", 1);
        // Another revision squats the name the first attempt uses.
        let mut squatter = revision("httpd", 1);
        squatter.metadata.name = Some(controller_revision_name("web", &hash_controller_revision(&wanted, Some(0))));
        api.seed(&squatter);
        let mut collisions = 0;
        let created = history.create_controller_revision(&parent(), &wanted, &mut collisions).await.unwrap();
        assert_eq!(collisions, 1);
        assert_eq!(
            created.metadata.name.unwrap(),
            controller_revision_name("web", &hash_controller_revision(&wanted, Some(1)))
        );
        // Creating the same revision again finds it instead of colliding.
        let again = history.create_controller_revision(&parent(), &wanted, &mut collisions).await.unwrap();
        assert_eq!(collisions, 1);
        assert_eq!(revision_data(&again), revision_data(&wanted));
    }

    #[tokio::test]
    async fn updating_a_revision_number_writes_only_when_it_changes() {
        let api = Arc::new(FakeApi::new());
        let history = History::new(api.clone());
        let r = revision("nginx", 1);
        api.seed(&r);
        let stored: ControllerRevision = api.object_typed(Some("ns"), name_of(&r.metadata)).unwrap();
        assert_eq!(history.update_controller_revision(&stored, 1).await.unwrap().revision, 1);
        assert!(api.mutations().is_empty());
        assert_eq!(history.update_controller_revision(&stored, 3).await.unwrap().revision, 3);
        assert_eq!(api.mutation_summaries(), [format!("update controllerrevisions ns/{}", name_of(&r.metadata))]);
    }
}
