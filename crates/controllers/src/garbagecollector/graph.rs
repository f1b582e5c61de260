//! The ownership graph (`graph.go`, `graph_builder.go`): one node per object of any monitored
//! resource, edges from each owner to its dependents, built from informer events by a single
//! task. Processing an event returns the work it implies (objects to re-examine, owners whose
//! dependents must be orphaned); it never calls the API.

use std::collections::{HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use skiff_runtime::api::ApiResource;
use skiff_runtime::informer::MetaEvent;

/// `metav1.FinalizerOrphanDependents`.
pub const FINALIZER_ORPHAN_DEPENDENTS: &str = "orphan";
/// `metav1.FinalizerDeleteDependents`.
pub const FINALIZER_DELETE_DEPENDENTS: &str = "foregroundDeletion";

/// The coordinates of an object: enough to GET it (`objectReference`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectIdentity {
    /// `apps/v1`.
    pub api_version: String,
    /// `ReplicaSet`.
    pub kind: String,
    /// Namespace (`None` for cluster-scoped objects, or unknown for virtual owners of
    /// cluster-scoped dependents).
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
}

impl std::fmt::Display for ObjectIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(
                f,
                "[{}/{}, namespace: {ns}, name: {}, uid: {}]",
                self.api_version, self.kind, self.name, self.uid
            ),
            None => write!(f, "[{}/{}, name: {}, uid: {}]", self.api_version, self.kind, self.name, self.uid),
        }
    }
}

/// One object in the graph.
#[derive(Debug, Clone)]
pub struct Node {
    /// Coordinates.
    pub identity: ObjectIdentity,
    /// The object's ownerReferences.
    pub owners: Vec<OwnerReference>,
    /// Uids of the objects that list this one as an owner.
    pub dependents: HashSet<String>,
    /// Being deleted with the `foregroundDeletion` finalizer: waits for blocking dependents.
    pub deleting_dependents: bool,
    /// Has a deletionTimestamp.
    pub being_deleted: bool,
    /// Known only as somebody's owner, not (yet) observed through an informer.
    pub virtual_node: bool,
}

impl Node {
    /// Dependents whose reference to this node has `blockOwnerDeletion: true`.
    pub fn blocking_dependents<'a>(&self, graph: &'a Graph) -> Vec<&'a Node> {
        self.dependents
            .iter()
            .filter_map(|uid| graph.nodes.get(uid))
            .filter(|dep| dep.owners.iter().any(|o| o.uid == self.identity.uid && o.block_owner_deletion == Some(true)))
            .collect()
    }
}

/// What a graph change asks the collector to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Re-examine the object with this uid (`attemptToDelete`).
    AttemptToDelete(String),
    /// Orphan the dependents of the owner with this uid (`attemptToOrphan`).
    AttemptToOrphan(String),
    /// The dependent (first uid) names a namespaced owner (second uid) that was observed in
    /// another namespace: record `OwnerRefInvalidNamespace` on the dependent
    /// (`reportInvalidNamespaceOwnerRef`).
    ReportInvalidNamespaceOwnerRef(String, String),
}

/// `ownerReferenceMatchesCoordinates`: the reference names this object (uid, name, kind and
/// apiVersion all equal).
pub fn reference_matches(reference: &OwnerReference, owner: &ObjectIdentity) -> bool {
    reference.uid == owner.uid
        && reference.name == owner.name
        && reference.kind == owner.kind
        && reference.api_version == owner.api_version
}

/// Add, update or delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object added.
    Add,
    /// Object updated.
    Update,
    /// Object deleted.
    Delete,
}

/// The deletion-relevant state of an object version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletionState {
    /// Has a deletionTimestamp.
    pub being_deleted: bool,
    /// Its finalizers.
    pub finalizers: Vec<String>,
}

impl DeletionState {
    fn of(meta: &ObjectMeta) -> Self {
        Self {
            being_deleted: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers.clone().unwrap_or_default(),
        }
    }

    fn has(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }
}

/// One change fed to the graph.
#[derive(Debug, Clone)]
pub struct GraphEvent {
    /// Kind of change.
    pub event_type: EventType,
    /// Produced by the collector itself after a live GET found the object gone.
    pub virtual_event: bool,
    /// The object.
    pub identity: ObjectIdentity,
    /// Its ownerReferences.
    pub owners: Vec<OwnerReference>,
    /// Its deletion state.
    pub state: DeletionState,
    /// The previous version's deletion state (updates).
    pub old_state: Option<DeletionState>,
}

impl GraphEvent {
    /// The graph event of an informer event on `resource`.
    pub fn from_meta_event(resource: &ApiResource, event: MetaEvent<'_>) -> Self {
        let (event_type, meta, old) = match event {
            MetaEvent::Add(m) => (EventType::Add, m, None),
            MetaEvent::Update { old, new } => (EventType::Update, new, Some(old)),
            MetaEvent::Delete(m) => (EventType::Delete, m, None),
        };
        Self {
            event_type,
            virtual_event: false,
            identity: ObjectIdentity {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
                namespace: meta.namespace.clone().filter(|n| !n.is_empty()),
                name: meta.name.clone().unwrap_or_default(),
                uid: meta.uid.clone().unwrap_or_default(),
            },
            owners: meta.owner_references.clone().unwrap_or_default(),
            state: DeletionState::of(meta),
            old_state: old.map(DeletionState::of),
        }
    }

    /// A virtual delete: the live GET found the object gone (or with another uid).
    pub fn virtual_delete(identity: ObjectIdentity) -> Self {
        Self {
            event_type: EventType::Delete,
            virtual_event: true,
            identity,
            owners: Vec::new(),
            state: DeletionState::default(),
            old_state: None,
        }
    }
}

/// The graph (`uidToNode`).
#[derive(Debug, Default)]
pub struct Graph {
    /// Nodes by uid.
    pub nodes: HashMap<String, Node>,
}

/// `deletionStartsWithFinalizer`: the object now is being deleted with `finalizer`, and the
/// previous version was not.
fn deletion_starts_with_finalizer(old: Option<&DeletionState>, new: &DeletionState, finalizer: &str) -> bool {
    if !new.being_deleted || !new.has(finalizer) {
        return false;
    }
    match old {
        None => true,
        Some(old) => !old.being_deleted || !old.has(finalizer),
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// The node with this uid.
    pub fn node(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    /// `addDependentToOwners`: links `dependent` under each owner, creating virtual owner nodes
    /// (to be verified with a live GET) for owners not seen yet. A reference to a known owner
    /// whose coordinates disagree with it — a namespaced owner in another namespace (reported
    /// with an event when the owner was observed), another name, kind or apiVersion, or a
    /// cluster-scoped virtual owner of a namespaced dependent — sends the dependent to
    /// attemptToDelete, which verifies its references with live GETs in its own namespace.
    fn add_dependent_to_owners(&mut self, dependent: &ObjectIdentity, owners: &[OwnerReference], work: &mut Vec<Work>) {
        let mut potentially_invalid = false;
        for owner in owners {
            match self.nodes.get_mut(&owner.uid) {
                Some(node) => {
                    node.dependents.insert(dependent.uid.clone());
                    if potentially_invalid {
                        continue;
                    }
                    let observed = !node.virtual_node;
                    match &node.identity.namespace {
                        Some(ns) if Some(ns) != dependent.namespace.as_ref() => {
                            if observed {
                                work.push(Work::ReportInvalidNamespaceOwnerRef(
                                    dependent.uid.clone(),
                                    owner.uid.clone(),
                                ));
                            }
                            potentially_invalid = true;
                        }
                        _ if !reference_matches(owner, &node.identity) => potentially_invalid = true,
                        None if dependent.namespace.is_some() && !observed => potentially_invalid = true,
                        _ => {}
                    }
                }
                None => {
                    let node = Node {
                        identity: ObjectIdentity {
                            api_version: owner.api_version.clone(),
                            kind: owner.kind.clone(),
                            namespace: dependent.namespace.clone(),
                            name: owner.name.clone(),
                            uid: owner.uid.clone(),
                        },
                        owners: Vec::new(),
                        dependents: [dependent.uid.clone()].into(),
                        deleting_dependents: false,
                        being_deleted: false,
                        virtual_node: true,
                    };
                    self.nodes.insert(owner.uid.clone(), node);
                    work.push(Work::AttemptToDelete(owner.uid.clone()));
                }
            }
        }
        if potentially_invalid {
            work.push(Work::AttemptToDelete(dependent.uid.clone()));
        }
    }

    /// `partitionDependents`: the dependents of `owner` whose references to its uid match its
    /// coordinates, and those with a reference that does not (or in another namespace than a
    /// namespaced owner's).
    fn partition_dependents(&self, dependents: &HashSet<String>, owner: &ObjectIdentity) -> (Vec<String>, Vec<String>) {
        let (mut matching, mut nonmatching) = (Vec::new(), Vec::new());
        for dep in dependents.iter().filter_map(|uid| self.nodes.get(uid)) {
            let (mut found_match, mut found_mismatch) = (false, false);
            if owner.namespace.is_some() && owner.namespace != dep.identity.namespace {
                found_mismatch = true;
            } else {
                for r in dep.owners.iter().filter(|r| r.uid == owner.uid) {
                    if reference_matches(r, owner) {
                        found_match = true;
                    } else {
                        found_mismatch = true;
                    }
                }
            }
            if found_match {
                matching.push(dep.identity.uid.clone());
            }
            if found_mismatch {
                nonmatching.push(dep.identity.uid.clone());
            }
        }
        (matching, nonmatching)
    }

    /// `getAlternateOwnerIdentity`: among the coordinates `dependents` name for the owner
    /// `absent` (same uid, other apiVersion, kind, name or namespace), the first that sorts
    /// after `absent`, else the first of all; `None` when they all name `absent`.
    fn alternate_owner_identity(&self, dependents: &[String], absent: &ObjectIdentity) -> Option<ObjectIdentity> {
        // Kind and apiVersion sort before namespace, so kinds order the same whatever their scope.
        let key = |r: &ObjectIdentity| {
            (
                r.kind.clone(),
                r.api_version.clone(),
                r.namespace.clone().unwrap_or_default(),
                r.name.clone(),
                r.uid.clone(),
            )
        };
        let absent_cluster_scoped = absent.namespace.is_none();
        let mut seen: HashSet<ObjectIdentity> = [absent.clone()].into();
        let (mut first, mut first_following): (Option<ObjectIdentity>, Option<ObjectIdentity>) = (None, None);
        for dep in dependents.iter().filter_map(|uid| self.nodes.get(uid)) {
            for r in dep.owners.iter().filter(|r| r.uid == absent.uid) {
                if reference_matches(r, absent) && (absent_cluster_scoped || absent.namespace == dep.identity.namespace)
                {
                    continue;
                }
                let mut candidate = ObjectIdentity {
                    api_version: r.api_version.clone(),
                    kind: r.kind.clone(),
                    namespace: dep.identity.namespace.clone(),
                    name: r.name.clone(),
                    uid: r.uid.clone(),
                };
                if absent_cluster_scoped && candidate.api_version == absent.api_version && candidate.kind == absent.kind
                {
                    // That kind is known to be cluster-scoped.
                    candidate.namespace = None;
                }
                if !seen.insert(candidate.clone()) {
                    continue;
                }
                if first.as_ref().is_none_or(|f| key(&candidate) < key(f)) {
                    first = Some(candidate.clone());
                }
                if key(absent) < key(&candidate) && first_following.as_ref().is_none_or(|f| key(&candidate) < key(f)) {
                    first_following = Some(candidate);
                }
            }
        }
        first_following.or(first)
    }

    fn remove_dependent_from_owners(&mut self, dependent_uid: &str, owners: &[OwnerReference]) {
        for owner in owners {
            if let Some(node) = self.nodes.get_mut(&owner.uid) {
                node.dependents.remove(dependent_uid);
            }
        }
    }

    /// `processTransitions`: deletion with `orphan` → orphan the dependents; deletion with
    /// `foregroundDeletion` → mark and re-examine the node and all its dependents.
    fn process_transitions(
        &mut self,
        old: Option<&DeletionState>,
        new: &DeletionState,
        uid: &str,
        work: &mut Vec<Work>,
    ) {
        if deletion_starts_with_finalizer(old, new, FINALIZER_ORPHAN_DEPENDENTS) {
            work.push(Work::AttemptToOrphan(uid.to_string()));
            return;
        }
        if deletion_starts_with_finalizer(old, new, FINALIZER_DELETE_DEPENDENTS)
            && let Some(node) = self.nodes.get_mut(uid)
        {
            node.deleting_dependents = true;
            for dep in &node.dependents {
                work.push(Work::AttemptToDelete(dep.clone()));
            }
            work.push(Work::AttemptToDelete(uid.to_string()));
        }
    }

    /// Applies one event (`processGraphChanges`); returns the implied work and the identity
    /// that was verified absent, if any (for the absent-owner cache: a removed node that had
    /// dependents, or coordinates a virtual delete found gone while an object with the same uid
    /// but other coordinates exists).
    pub fn process(&mut self, ev: &GraphEvent) -> (Vec<Work>, Option<ObjectIdentity>) {
        let mut work = Vec::new();
        let uid = ev.identity.uid.clone();
        let exists = self.nodes.contains_key(&uid);
        match ev.event_type {
            EventType::Add | EventType::Update if !exists => {
                let node = Node {
                    identity: ev.identity.clone(),
                    owners: ev.owners.clone(),
                    dependents: HashSet::new(),
                    deleting_dependents: ev.state.being_deleted && ev.state.has(FINALIZER_DELETE_DEPENDENTS),
                    being_deleted: ev.state.being_deleted,
                    virtual_node: false,
                };
                self.nodes.insert(uid.clone(), node);
                self.add_dependent_to_owners(&ev.identity, &ev.owners, &mut work);
                self.process_transitions(ev.old_state.as_ref(), &ev.state, &uid, &mut work);
            }
            EventType::Add | EventType::Update => {
                let first_observation = self.nodes.get(&uid).filter(|n| n.virtual_node).map(|n| n.identity.clone());
                if let Some(virtual_identity) = first_observation {
                    // First observation of an object known only as an owner: dependents that
                    // named it with other coordinates are re-examined (and, when it is
                    // namespaced and they are not in its namespace, told about it).
                    let observed = &ev.identity;
                    if virtual_identity != *observed {
                        let dependents = self.nodes[&uid].dependents.clone();
                        let (_, nonmatching) = self.partition_dependents(&dependents, observed);
                        for dep in nonmatching {
                            let dep_ns = self.nodes.get(&dep).and_then(|d| d.identity.namespace.clone());
                            if observed.namespace.is_some() && dep_ns != observed.namespace {
                                work.push(Work::ReportInvalidNamespaceOwnerRef(dep.clone(), uid.clone()));
                            }
                            work.push(Work::AttemptToDelete(dep));
                        }
                    }
                    let node = self.nodes.get_mut(&uid).expect("exists");
                    node.virtual_node = false;
                    node.identity = observed.clone();
                }
                let (added, removed, changed) = {
                    let node = self.nodes.get(&uid).expect("exists");
                    references_diffs(&node.owners, &ev.owners)
                };
                if !added.is_empty() || !removed.is_empty() || !changed.is_empty() {
                    // A dependent that stops blocking may unblock a foreground deletion.
                    for r in removed.iter().filter(|r| r.block_owner_deletion == Some(true)).chain(
                        changed
                            .iter()
                            .filter(|(old, new)| {
                                old.block_owner_deletion == Some(true) && new.block_owner_deletion != Some(true)
                            })
                            .map(|(old, _)| old),
                    ) {
                        if self.nodes.get(&r.uid).is_some_and(|o| o.deleting_dependents) {
                            work.push(Work::AttemptToDelete(r.uid.clone()));
                        }
                    }
                    if let Some(node) = self.nodes.get_mut(&uid) {
                        node.owners = ev.owners.clone();
                    }
                    self.add_dependent_to_owners(&ev.identity, &added, &mut work);
                    self.remove_dependent_from_owners(&uid, &removed);
                }
                if ev.state.being_deleted
                    && let Some(node) = self.nodes.get_mut(&uid)
                {
                    node.being_deleted = true;
                }
                self.process_transitions(ev.old_state.as_ref(), &ev.state, &uid, &mut work);
            }
            EventType::Delete => {
                let Some(existing) = self.nodes.get(&uid) else {
                    return (work, None);
                };
                if ev.virtual_event && !existing.virtual_node && existing.identity != ev.identity {
                    // The observed object disagrees with the coordinates that were not found:
                    // keep it; the dependents that named those coordinates lost their owner.
                    let (matching, _) = self.partition_dependents(&existing.dependents, &ev.identity);
                    if matching.is_empty() {
                        return (work, None);
                    }
                    work.extend(matching.into_iter().map(Work::AttemptToDelete));
                    return (work, Some(ev.identity.clone()));
                }
                if ev.virtual_event && existing.virtual_node {
                    // Dependents may disagree on this owner's coordinates: only those naming
                    // the coordinates found absent lose it; the node stays for the others,
                    // under the next coordinates they name.
                    let (matching, nonmatching) = self.partition_dependents(&existing.dependents, &ev.identity);
                    if !nonmatching.is_empty() {
                        let absent = (!matching.is_empty()).then(|| ev.identity.clone());
                        work.extend(matching.into_iter().map(Work::AttemptToDelete));
                        if existing.identity == ev.identity
                            && let Some(alternate) = self.alternate_owner_identity(&nonmatching, &ev.identity)
                        {
                            if let Some(node) = self.nodes.get_mut(&uid) {
                                node.identity = alternate;
                            }
                            work.push(Work::AttemptToDelete(uid));
                        }
                        return (work, absent);
                    }
                }
                let node = self.nodes.remove(&uid).expect("exists");
                self.remove_dependent_from_owners(&uid, &node.owners);
                for dep in &node.dependents {
                    work.push(Work::AttemptToDelete(dep.clone()));
                }
                for owner in &node.owners {
                    if self.nodes.get(&owner.uid).is_some_and(|o| o.deleting_dependents) {
                        work.push(Work::AttemptToDelete(owner.uid.clone()));
                    }
                }
                let absent = (!node.dependents.is_empty()).then(|| ev.identity.clone());
                return (work, absent);
            }
        }
        (work, None)
    }
}

/// `referencesDiffs`: owner references added, removed, and changed (same uid, other fields).
pub fn references_diffs(
    old: &[OwnerReference],
    new: &[OwnerReference],
) -> (Vec<OwnerReference>, Vec<OwnerReference>, Vec<(OwnerReference, OwnerReference)>) {
    let old_by_uid: HashMap<&str, &OwnerReference> = old.iter().map(|r| (r.uid.as_str(), r)).collect();
    let new_uids: HashSet<&str> = new.iter().map(|r| r.uid.as_str()).collect();
    let mut added = Vec::new();
    let mut changed = Vec::new();
    for r in new {
        match old_by_uid.get(r.uid.as_str()) {
            None => added.push(r.clone()),
            Some(o) if *o != r => changed.push(((*o).clone(), r.clone())),
            Some(_) => {}
        }
    }
    let removed = old.iter().filter(|r| !new_uids.contains(r.uid.as_str())).cloned().collect();
    (added, removed, changed)
}
