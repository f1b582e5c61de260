//! The NetworkPolicy controller of one node: keeps the pods, namespaces and policies it is
//! told about and turns their changes into nftables transactions on [`crate::rules::TABLE`].
//!
//! Incremental, as the node proxy: a pod event re-evaluates that pod against the sets that
//! can hold it (its namespace's pod selections, namespace-selector selections, isolation,
//! named ports) and marks the sets whose elements change; a namespace
//! relabel re-evaluates its pods against the selections that look at namespace labels; a policy
//! event recompiles that policy, creates the sets it newly uses (filled from every known pod)
//! and marks its chains and the dispatch chains. A sync sends one transaction with only that
//! difference: set elements added and deleted, changed chains flushed and refilled, unused
//! chains and sets deleted. The first sync, and any after a refused transaction, recreates the
//! table whole. Syncs are spaced by at least the minimum sync period.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use parking_lot::Mutex;
use serde_json::{Value, json};
use skiff_proxy::{NftBackend, NftError};

use crate::policy::{self, CompiledPolicy, Direction, NamespaceScope, PodInfo, Protocol, Selection};
use crate::rules::{self, EGRESS_ISOLATED, EGRESS_POLICIES, INGRESS_ISOLATED, INGRESS_POLICIES, NftRule, SetType};

/// The default minimum time between two transactions.
pub const DEFAULT_MIN_SYNC_PERIOD: Duration = Duration::from_millis(10);

/// Settings of a [`Controller`].
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// The nodes whose pods the policies are enforced for: this node's name, or every simulated
    /// node of a process running simulated nodes.
    pub nodes: HashSet<String>,
    /// Minimum time between two transactions.
    pub min_sync_period: Duration,
}

impl ControllerConfig {
    /// Settings for the node `name`, with the default minimum sync period.
    pub fn node(name: &str) -> Self {
        ControllerConfig { nodes: [name.to_string()].into(), min_sync_period: DEFAULT_MIN_SYNC_PERIOD }
    }
}

/// What a set holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SetKind {
    /// The addresses of a pod selection.
    Selection(Selection),
    /// The addresses of local pods isolated in a direction.
    Isolated(Direction),
    /// `address . protocol . port` of every pod with a container port of this name.
    Port(String),
}

impl SetKind {
    fn set_type(&self) -> SetType {
        match self {
            SetKind::Port(_) => SetType::NamedPort,
            _ => SetType::Addresses,
        }
    }
}

/// One element of a set: an address, with the protocol and port of a named-port set.
type Elem = (Ipv4Addr, Option<(Protocol, u16)>);

fn elem_json(e: &Elem) -> Value {
    match e.1 {
        None => json!(e.0.to_string()),
        Some((proto, port)) => json!({"concat": [e.0.to_string(), proto.nft(), port]}),
    }
}

struct SetState {
    kind: SetKind,
    /// The pods in it (`namespace/name`) and the element each contributes.
    members: HashMap<String, Elem>,
    /// Its elements, with the number of pods contributing each (two pods may briefly share an
    /// address).
    elems: BTreeMap<Elem, u32>,
    /// Elements whose presence may have changed since the last sync: a sync looks at these only,
    /// so a change costs the same in a set of ten pods and in one of ten thousand.
    pending: BTreeSet<Elem>,
    /// Made since the last sync: compared whole with the kernel's (it may be a set released and
    /// used again, whose pending changes went with the released state).
    fresh: bool,
    /// Policies using it (the isolation sets are permanent).
    users: usize,
}

#[derive(Default)]
struct State {
    pods: HashMap<String, PodInfo>,
    pods_by_ns: HashMap<String, BTreeSet<String>>,
    namespaces: HashMap<String, BTreeMap<String, String>>,
    policies: BTreeMap<String, CompiledPolicy>,
    policies_by_ns: HashMap<String, BTreeSet<String>>,
    sets: HashMap<String, SetState>,
    /// Names of the sets of pods of one namespace (`podSelector` alone, policy targets), by
    /// namespace: a pod is only evaluated against its namespace's and the unscoped sets.
    scoped_sets: HashMap<String, BTreeSet<String>>,
    /// Names of the other sets (namespace selectors, isolation, named ports).
    unscoped_sets: BTreeSet<String>,
    dirty_sets: BTreeSet<String>,
    dirty_policies: BTreeSet<String>,
    dispatch_dirty: bool,
    seq: u64,
}

/// A set as it is in the kernel.
type AppliedSet = (SetType, BTreeSet<Elem>);

#[derive(Default)]
struct Applied {
    sets: HashMap<String, AppliedSet>,
    chains: HashMap<String, Vec<NftRule>>,
    dispatch: [Vec<NftRule>; 2],
}

/// What one sync did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncOutcome {
    /// Whether the table was recreated whole.
    pub full: bool,
    /// Commands in the transaction (0: nothing to change, no transaction).
    pub commands: usize,
}

/// The NetworkPolicy enforcement state and sync of one node.
pub struct Controller {
    cfg: ControllerConfig,
    backend: Arc<dyn NftBackend>,
    state: Mutex<State>,
    applied: Mutex<Applied>,
    full_sync: AtomicBool,
    wake: tokio::sync::Notify,
    applied_seq: tokio::sync::watch::Sender<u64>,
}

fn key(namespace: Option<&str>, name: Option<&str>) -> String {
    format!("{}/{}", namespace.unwrap_or_default(), name.unwrap_or_default())
}

/// Whether `pod` belongs in a set of `kind`.
fn member(
    kind: &SetKind,
    pod: &PodInfo,
    ns_labels: Option<&BTreeMap<String, String>>,
    policies: &BTreeMap<String, CompiledPolicy>,
    policies_by_ns: &HashMap<String, BTreeSet<String>>,
) -> bool {
    match kind {
        SetKind::Selection(sel) => sel.matches(pod, ns_labels),
        SetKind::Isolated(dir) => {
            pod.local
                && pod.ip.is_some()
                && policies_by_ns.get(&pod.namespace).into_iter().flatten().any(|k| {
                    policies.get(k).is_some_and(|p| p.rules(*dir).is_some() && p.targets.matches(pod, ns_labels))
                })
        }
        SetKind::Port(name) => pod.ip.is_some() && pod.named_ports.contains_key(name),
    }
}

fn elem(kind: &SetKind, pod: &PodInfo) -> Option<Elem> {
    let ip = pod.ip?;
    match kind {
        SetKind::Port(name) => pod.named_ports.get(name).map(|(proto, port)| (ip, Some((*proto, *port)))),
        _ => Some((ip, None)),
    }
}

/// The sets a policy uses, by name (with repeats: one use each).
fn sets_of(p: &CompiledPolicy) -> Vec<(String, SetKind)> {
    let mut out: Vec<(String, SetKind)> =
        p.selections().map(|s| (rules::selection_set(s), SetKind::Selection(s.clone()))).collect();
    out.extend(p.port_names().map(|n| (rules::port_set(n), SetKind::Port(n.to_string()))));
    out
}

impl SetState {
    fn remove_elem(&mut self, e: Elem) {
        if let Some(n) = self.elems.get_mut(&e) {
            *n -= 1;
            if *n == 0 {
                self.elems.remove(&e);
            }
        }
        self.pending.insert(e);
    }
}

impl State {
    /// Re-evaluates pod `key` of `namespace` (present or just removed) against the sets
    /// `which` accepts.
    fn refresh(&mut self, key: &str, namespace: &str, which: impl Fn(&SetKind) -> bool) {
        let State { pods, namespaces, policies, policies_by_ns, sets, scoped_sets, unscoped_sets, dirty_sets, .. } =
            self;
        let pod = pods.get(key);
        let ns_labels = namespaces.get(namespace);
        for name in scoped_sets.get(namespace).into_iter().flatten().chain(unscoped_sets.iter()) {
            let Some(set) = sets.get_mut(name) else { continue };
            if !which(&set.kind) {
                continue;
            }
            let now = pod
                .filter(|p| member(&set.kind, p, ns_labels, policies, policies_by_ns))
                .and_then(|p| elem(&set.kind, p));
            if set.members.get(key).copied() == now {
                continue;
            }
            if let Some(old) = set.members.remove(key) {
                set.remove_elem(old);
            }
            if let Some(new) = now {
                set.members.insert(key.to_string(), new);
                *set.elems.entry(new).or_default() += 1;
                set.pending.insert(new);
            }
            dirty_sets.insert(name.clone());
        }
    }

    /// The namespace a set is limited to, if any.
    fn scope(kind: &SetKind) -> Option<&str> {
        match kind {
            SetKind::Selection(Selection { namespaces: NamespaceScope::Only(ns), .. }) => Some(ns),
            _ => None,
        }
    }

    fn acquire(&mut self, name: String, kind: SetKind) {
        if let Some(set) = self.sets.get_mut(&name) {
            set.users += 1;
            return;
        }
        let candidates: Vec<&String> = match Self::scope(&kind) {
            Some(ns) => self.pods_by_ns.get(ns).into_iter().flatten().collect(),
            None => self.pods.keys().collect(),
        };
        let members: HashMap<String, Elem> = candidates
            .into_iter()
            .filter_map(|k| {
                let p = self.pods.get(k)?;
                if !member(&kind, p, self.namespaces.get(&p.namespace), &self.policies, &self.policies_by_ns) {
                    return None;
                }
                Some((k.clone(), elem(&kind, p)?))
            })
            .collect();
        let mut elems = BTreeMap::new();
        for e in members.values() {
            *elems.entry(*e).or_default() += 1;
        }
        match Self::scope(&kind) {
            Some(ns) => self.scoped_sets.entry(ns.to_string()).or_default().insert(name.clone()),
            None => self.unscoped_sets.insert(name.clone()),
        };
        self.dirty_sets.insert(name.clone());
        self.sets.insert(name, SetState { kind, members, elems, pending: BTreeSet::new(), fresh: true, users: 1 });
    }

    fn release(&mut self, name: &str) {
        if let Some(set) = self.sets.get_mut(name) {
            set.users -= 1;
            if set.users == 0 {
                if let Some(set) = self.sets.remove(name) {
                    match Self::scope(&set.kind) {
                        Some(ns) => {
                            if let Some(names) = self.scoped_sets.get_mut(ns) {
                                names.remove(name);
                                if names.is_empty() {
                                    self.scoped_sets.remove(ns);
                                }
                            }
                        }
                        None => {
                            self.unscoped_sets.remove(name);
                        }
                    }
                }
                self.dirty_sets.remove(name);
            }
        }
    }

    /// Desired chains of a policy: name → rules, for the directions it isolates.
    fn policy_chains(&self, key: &str) -> BTreeMap<String, Vec<NftRule>> {
        let mut out = BTreeMap::new();
        if let Some(p) = self.policies.get(key) {
            for dir in [Direction::Ingress, Direction::Egress] {
                if let Some(r) = p.rules(dir) {
                    out.insert(rules::policy_chain(key, dir), rules::policy_rules(dir, r));
                }
            }
        }
        out
    }

    fn dispatch(&self) -> [Vec<NftRule>; 2] {
        let mut out: [Vec<NftRule>; 2] = Default::default();
        for (k, p) in &self.policies {
            for (i, dir) in [Direction::Ingress, Direction::Egress].into_iter().enumerate() {
                if p.rules(dir).is_some() {
                    out[i].push(rules::dispatch_rule(dir, &p.targets, &rules::policy_chain(k, dir)));
                }
            }
        }
        out
    }

    fn changed(&mut self, wake: &tokio::sync::Notify) {
        self.seq += 1;
        wake.notify_one();
    }
}

fn is_isolation(kind: &SetKind) -> bool {
    matches!(kind, SetKind::Isolated(_))
}

const DISPATCH: [&str; 2] = [INGRESS_POLICIES, EGRESS_POLICIES];

impl Controller {
    /// A controller programming through `backend`; nothing is applied before the first
    /// [`Controller::sync`], which is full.
    pub fn new(cfg: ControllerConfig, backend: Arc<dyn NftBackend>) -> Arc<Self> {
        let mut state = State::default();
        for (name, dir) in [(INGRESS_ISOLATED, Direction::Ingress), (EGRESS_ISOLATED, Direction::Egress)] {
            state.unscoped_sets.insert(name.to_string());
            state.sets.insert(
                name.to_string(),
                SetState {
                    kind: SetKind::Isolated(dir),
                    members: HashMap::new(),
                    elems: BTreeMap::new(),
                    pending: BTreeSet::new(),
                    fresh: true,
                    users: 1,
                },
            );
        }
        Arc::new(Controller {
            cfg,
            backend,
            state: Mutex::new(state),
            applied: Mutex::new(Applied::default()),
            full_sync: AtomicBool::new(true),
            wake: tokio::sync::Notify::new(),
            applied_seq: tokio::sync::watch::channel(0).0,
        })
    }

    /// A pod was added or changed.
    pub fn on_pod(&self, pod: &Arc<Pod>) {
        let k = key(pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref());
        let info = PodInfo::from_pod(pod, |node| self.cfg.nodes.contains(node));
        let mut st = self.state.lock();
        let old = st.pods.get(&k);
        if old == Some(&info) {
            return;
        }
        st.pods_by_ns.entry(info.namespace.clone()).or_default().insert(k.clone());
        let ns = info.namespace.clone();
        st.pods.insert(k.clone(), info);
        st.refresh(&k, &ns, |_| true);
        st.changed(&self.wake);
    }

    /// A pod was deleted.
    pub fn on_pod_deleted(&self, pod: &Pod) {
        let k = key(pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref());
        let mut st = self.state.lock();
        let Some(old) = st.pods.remove(&k) else { return };
        if let Some(keys) = st.pods_by_ns.get_mut(&old.namespace) {
            keys.remove(&k);
        }
        st.refresh(&k, &old.namespace, |_| true);
        st.changed(&self.wake);
    }

    /// A namespace was added or changed (its labels are what namespace selectors see).
    pub fn on_namespace(&self, ns: &Arc<Namespace>) {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let labels = policy::namespace_labels(ns);
        let mut st = self.state.lock();
        if st.namespaces.get(&name) == Some(&labels) {
            return;
        }
        st.namespaces.insert(name.clone(), labels);
        let pods: Vec<String> = st.pods_by_ns.get(&name).into_iter().flatten().cloned().collect();
        for k in pods {
            st.refresh(&k, &name, |kind| match kind {
                SetKind::Selection(s) => s.uses_namespace_labels(),
                _ => false,
            });
        }
        st.changed(&self.wake);
    }

    /// A namespace was deleted (its pods and policies are deleted on their own).
    pub fn on_namespace_deleted(&self, ns: &Namespace) {
        let name = ns.metadata.name.clone().unwrap_or_default();
        self.state.lock().namespaces.remove(&name);
    }

    /// A NetworkPolicy was added or changed.
    pub fn on_policy(&self, np: &Arc<NetworkPolicy>) {
        self.set_policy(policy::compile(np));
    }

    /// A NetworkPolicy was deleted.
    pub fn on_policy_deleted(&self, np: &NetworkPolicy) {
        let k = key(np.metadata.namespace.as_deref(), np.metadata.name.as_deref());
        let mut st = self.state.lock();
        let Some(old) = st.policies.remove(&k) else { return };
        if let Some(keys) = st.policies_by_ns.get_mut(&old.namespace) {
            keys.remove(&k);
        }
        self.policy_changed(&mut st, Some(&old), &k);
    }

    fn set_policy(&self, new: CompiledPolicy) {
        let mut st = self.state.lock();
        let k = new.key.clone();
        if st.policies.get(&k) == Some(&new) {
            return;
        }
        st.policies_by_ns.entry(new.namespace.clone()).or_default().insert(k.clone());
        let old = st.policies.insert(k.clone(), new);
        self.policy_changed(&mut st, old.as_ref(), &k);
    }

    /// Moves set uses from `old` to the policy now stored at `k` (if any), re-evaluates the
    /// isolation of the namespace's pods and marks the chains.
    fn policy_changed(&self, st: &mut State, old: Option<&CompiledPolicy>, k: &str) {
        let new_sets = st.policies.get(k).map(sets_of).unwrap_or_default();
        // Acquire first, so a set both used and released stays (and keeps its members).
        for (name, kind) in new_sets {
            st.acquire(name, kind);
        }
        let namespace = match old {
            Some(old) => {
                for (name, _) in sets_of(old) {
                    st.release(&name);
                }
                old.namespace.clone()
            }
            None => st.policies.get(k).map(|p| p.namespace.clone()).unwrap_or_default(),
        };
        let pods: Vec<String> = st.pods_by_ns.get(&namespace).into_iter().flatten().cloned().collect();
        for p in pods {
            st.refresh(&p, &namespace, is_isolation);
        }
        st.dirty_policies.insert(k.to_string());
        st.dispatch_dirty = true;
        st.changed(&self.wake);
    }

    /// How many changes were received so far; [`Controller::wait_applied`] with this number
    /// waits until the kernel has them.
    pub fn changes(&self) -> u64 {
        self.state.lock().seq
    }

    /// Waits until every change up to `seq` is in the kernel.
    pub async fn wait_applied(&self, seq: u64) {
        let mut rx = self.applied_seq.subscribe();
        let _ = rx.wait_for(|applied| *applied >= seq).await;
    }

    /// Makes the next sync recreate the table whole (what a refused transaction does; the
    /// benchmark's baseline).
    pub fn force_full_sync(&self) {
        self.full_sync.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// Applies what changed since the last sync in one transaction (the whole table after a
    /// failure or on the first call).
    ///
    /// # Errors
    /// [`NftError`] when the transaction was refused or `nft` could not run; the next sync is
    /// then full.
    pub fn sync(&self) -> Result<SyncOutcome, NftError> {
        let full = self.full_sync.swap(false, Ordering::SeqCst);
        let mut applied = self.applied.lock();
        let (seq, cmds, next) = {
            let mut st = self.state.lock();
            let out = if full { full_transaction(&mut st) } else { partial_transaction(&mut st, &applied) };
            (st.seq, out.0, out.1)
        };
        let outcome = SyncOutcome { full, commands: cmds.len() };
        if !cmds.is_empty()
            && let Err(e) = self.backend.apply(&cmds)
        {
            self.full_sync.store(true, Ordering::SeqCst);
            self.wake.notify_one();
            return Err(e);
        }
        next.apply_to(&mut applied);
        self.applied_seq.send_replace(seq);
        Ok(outcome)
    }

    /// Runs syncs until dropped: the first (full) once `ready` resolves, then whenever a change
    /// arrives, at most one per minimum sync period; a failed sync is retried after a second.
    pub async fn run(self: Arc<Self>, ready: impl std::future::Future<Output = ()>) {
        ready.await;
        let mut last: Option<Instant> = None;
        loop {
            if let Some(last) = last {
                let since = last.elapsed();
                if since < self.cfg.min_sync_period {
                    tokio::time::sleep(self.cfg.min_sync_period - since).await;
                }
            }
            last = Some(Instant::now());
            let me = self.clone();
            match tokio::task::spawn_blocking(move || me.sync()).await {
                Ok(Ok(outcome)) if outcome.full => {
                    tracing::info!(commands = outcome.commands, "programmed the node's NetworkPolicy rules")
                }
                Ok(Ok(outcome)) => tracing::debug!(?outcome, "synced NetworkPolicy rules"),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "programming NetworkPolicy rules failed; retrying with a full sync");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(e) => tracing::error!(error = %e, "the NetworkPolicy sync panicked"),
            }
            self.wake.notified().await;
        }
    }
}

/// How the applied state changes once a transaction is in.
/// How one set changes in the kernel.
enum SetChange {
    Created(AppliedSet),
    Elements { added: Vec<Elem>, deleted: Vec<Elem> },
    Deleted,
}

enum Next {
    Replace(Applied),
    Update {
        sets: Vec<(String, SetChange)>,
        chains: Vec<(String, Option<Vec<NftRule>>)>,
        dispatch: Option<[Vec<NftRule>; 2]>,
    },
}

impl Next {
    fn apply_to(self, applied: &mut Applied) {
        match self {
            Next::Replace(a) => *applied = a,
            Next::Update { sets, chains, dispatch } => {
                for (name, change) in sets {
                    match change {
                        SetChange::Created(s) => {
                            applied.sets.insert(name, s);
                        }
                        SetChange::Elements { added, deleted } => {
                            if let Some((_, have)) = applied.sets.get_mut(&name) {
                                for e in deleted {
                                    have.remove(&e);
                                }
                                have.extend(added);
                            }
                        }
                        SetChange::Deleted => {
                            applied.sets.remove(&name);
                        }
                    }
                }
                for (name, c) in chains {
                    match c {
                        Some(c) => applied.chains.insert(name, c),
                        None => applied.chains.remove(&name),
                    };
                }
                if let Some(d) = dispatch {
                    applied.dispatch = d;
                }
            }
        }
    }
}

fn full_transaction(st: &mut State) -> (Vec<Value>, Next) {
    st.dirty_sets.clear();
    st.dirty_policies.clear();
    st.dispatch_dirty = false;
    let mut cmds = rules::base_table();
    let mut next = Applied::default();
    let mut names: Vec<String> = st.sets.keys().cloned().collect();
    names.sort();
    for name in names {
        let Some(set) = st.sets.get_mut(&name) else { continue };
        set.pending.clear();
        set.fresh = false;
        let ty = set.kind.set_type();
        if !is_isolation(&set.kind) {
            cmds.push(rules::add_set(&name, ty));
        }
        let elems: BTreeSet<Elem> = set.elems.keys().copied().collect();
        if !elems.is_empty() {
            cmds.push(rules::elements("add", &name, elems.iter().map(elem_json).collect()));
        }
        next.sets.insert(name, (ty, elems));
    }
    let keys: Vec<String> = st.policies.keys().cloned().collect();
    for k in keys {
        for (name, chain) in st.policy_chains(&k) {
            cmds.push(rules::add_chain(&name));
            cmds.extend(chain.iter().map(|r| rules::add_rule(&name, r)));
            next.chains.insert(name, chain);
        }
    }
    let dispatch = st.dispatch();
    for (i, chain) in DISPATCH.iter().enumerate() {
        cmds.extend(dispatch[i].iter().map(|r| rules::add_rule(chain, r)));
    }
    next.dispatch = dispatch;
    (cmds, Next::Replace(next))
}

fn partial_transaction(st: &mut State, applied: &Applied) -> (Vec<Value>, Next) {
    let (mut add_sets, mut elems, mut fill, mut flush_old, mut delete_old) = (vec![], vec![], vec![], vec![], vec![]);
    let mut next_sets = Vec::new();
    for name in std::mem::take(&mut st.dirty_sets) {
        let Some(set) = st.sets.get_mut(&name) else { continue };
        let ty = set.kind.set_type();
        let mut pending = std::mem::take(&mut set.pending);
        if std::mem::take(&mut set.fresh)
            && let Some((_, have)) = applied.sets.get(&name)
        {
            pending.extend(have.iter().copied());
            pending.extend(set.elems.keys().copied());
        }
        let Some((_, have)) = applied.sets.get(&name) else {
            add_sets.push(rules::add_set(&name, ty));
            let want: BTreeSet<Elem> = set.elems.keys().copied().collect();
            if !want.is_empty() {
                elems.push(rules::elements("add", &name, want.iter().map(elem_json).collect()));
            }
            next_sets.push((name, SetChange::Created((ty, want))));
            continue;
        };
        let (mut added, mut deleted) = (Vec::new(), Vec::new());
        for e in pending {
            match (set.elems.contains_key(&e), have.contains(&e)) {
                (true, false) => added.push(e),
                (false, true) => deleted.push(e),
                _ => {}
            }
        }
        if !deleted.is_empty() {
            elems.push(rules::elements("delete", &name, deleted.iter().map(elem_json).collect()));
        }
        if !added.is_empty() {
            elems.push(rules::elements("add", &name, added.iter().map(elem_json).collect()));
        }
        if !added.is_empty() || !deleted.is_empty() {
            next_sets.push((name, SetChange::Elements { added, deleted }));
        }
    }
    let mut next_chains = Vec::new();
    for k in std::mem::take(&mut st.dirty_policies) {
        let want = st.policy_chains(&k);
        for dir in [Direction::Ingress, Direction::Egress] {
            let name = rules::policy_chain(&k, dir);
            match (want.get(&name), applied.chains.get(&name)) {
                (Some(w), Some(h)) if w == h => {}
                (Some(w), have) => {
                    if have.is_none() {
                        add_sets.push(rules::add_chain(&name));
                    } else {
                        fill.push(rules::flush_chain(&name));
                    }
                    fill.extend(w.iter().map(|r| rules::add_rule(&name, r)));
                    next_chains.push((name, Some(w.clone())));
                }
                (None, Some(_)) => {
                    flush_old.push(rules::flush_chain(&name));
                    delete_old.push(rules::delete_chain(&name));
                    next_chains.push((name, None));
                }
                (None, None) => {}
            }
        }
    }
    let mut dispatch_cmds = Vec::new();
    let mut next_dispatch = None;
    if std::mem::take(&mut st.dispatch_dirty) {
        let want = st.dispatch();
        if want != applied.dispatch {
            for (i, chain) in DISPATCH.iter().enumerate() {
                if want[i] != applied.dispatch[i] {
                    dispatch_cmds.push(rules::flush_chain(chain));
                    dispatch_cmds.extend(want[i].iter().map(|r| rules::add_rule(chain, r)));
                }
            }
            next_dispatch = Some(want);
        }
    }
    // Sets no policy uses any more; deleted last, once no rule names them.
    let mut delete_sets = Vec::new();
    for name in applied.sets.keys().filter(|n| !st.sets.contains_key(*n)) {
        delete_sets.push(rules::delete_set(name));
        next_sets.push((name.clone(), SetChange::Deleted));
    }
    delete_sets.sort_by_key(|c| c.to_string());
    let mut cmds = add_sets;
    cmds.extend(elems);
    cmds.extend(fill);
    cmds.extend(dispatch_cmds);
    cmds.extend(flush_old);
    cmds.extend(delete_old);
    cmds.extend(delete_sets);
    (cmds, Next::Update { sets: next_sets, chains: next_chains, dispatch: next_dispatch })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{namespace, network_policy, pod};
    use serde_json::json;
    use skiff_proxy::Bookkeeping;

    fn controller() -> (Arc<Controller>, Bookkeeping) {
        let book = Bookkeeping::default();
        let cfg = ControllerConfig { min_sync_period: Duration::ZERO, ..ControllerConfig::node("n1") };
        (Controller::new(cfg, Arc::new(book.clone())), book)
    }

    fn verbs(tx: &[Value]) -> Vec<String> {
        tx.iter()
            .map(|c| {
                let (verb, obj) = c.as_object().unwrap().iter().next().unwrap();
                let (kind, body) = obj.as_object().unwrap().iter().next().unwrap();
                let name = body.get("name").or(body.get("chain")).and_then(Value::as_str).unwrap_or("");
                format!("{verb} {kind} {name}")
            })
            .collect()
    }

    fn last(book: &Bookkeeping) -> Vec<Value> {
        book.transactions().pop().unwrap()
    }

    fn deny_all_but_api() -> Arc<NetworkPolicy> {
        network_policy(
            "prod",
            "db",
            json!({"podSelector": {"matchLabels": {"app": "db"}},
                   "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "api"}}}], "ports": [{"port": 5432}]}]}),
        )
    }

    #[test]
    fn the_first_sync_creates_the_table_with_sets_chains_and_elements() {
        let (c, book) = controller();
        c.on_namespace(&namespace("prod", &[]));
        c.on_pod(&pod("prod", "db-0", "n1", "10.42.0.5", &[("app", "db")]));
        c.on_pod(&pod("prod", "api-0", "n2", "10.42.1.7", &[("role", "api")]));
        c.on_policy(&deny_all_but_api());
        assert!(c.sync().unwrap().full);
        let tx = last(&book);
        let v = verbs(&tx);
        assert_eq!(v[..3], ["add table skiff-netpol", "delete table skiff-netpol", "add table skiff-netpol"]);
        assert!(v.iter().any(|c| c.starts_with("add chain ingress-") && c.ends_with("-prod/db")), "{v:?}");
        let text = serde_json::to_string(&tx).unwrap();
        assert!(text.contains(r#""name":"ingress-isolated","elem":["10.42.0.5"]"#), "{text}");
        assert!(text.contains(r#""elem":["10.42.1.7"]"#), "the api pod on another node is a peer: {text}");
        assert!(!text.contains(r#""name":"egress-isolated","elem""#), "no egress isolation: {text}");
    }

    #[test]
    fn a_label_change_is_only_set_element_updates() {
        let (c, book) = controller();
        c.on_pod(&pod("prod", "db-0", "n1", "10.42.0.5", &[("app", "db")]));
        c.on_pod(&pod("prod", "api-0", "n1", "10.42.0.6", &[("role", "web")]));
        c.on_policy(&deny_all_but_api());
        c.sync().unwrap();
        c.on_pod(&pod("prod", "api-0", "n1", "10.42.0.6", &[("role", "api")]));
        let out = c.sync().unwrap();
        assert!(!out.full);
        let tx = last(&book);
        assert_eq!(verbs(&tx).len(), 1, "{tx:?}");
        assert!(verbs(&tx)[0].starts_with("add element sel-"));
        assert!(serde_json::to_string(&tx).unwrap().contains("10.42.0.6"));
        // And back: the element is deleted.
        c.on_pod(&pod("prod", "api-0", "n1", "10.42.0.6", &[("role", "web")]));
        c.sync().unwrap();
        assert!(verbs(&last(&book))[0].starts_with("delete element sel-"));
    }

    #[test]
    fn relabelling_a_target_pod_moves_it_in_and_out_of_isolation() {
        let (c, book) = controller();
        c.on_policy(&deny_all_but_api());
        c.on_pod(&pod("prod", "x", "n1", "10.42.0.5", &[("app", "web")]));
        c.sync().unwrap();
        c.on_pod(&pod("prod", "x", "n1", "10.42.0.5", &[("app", "db")]));
        c.sync().unwrap();
        let v = verbs(&last(&book));
        assert!(v.contains(&"add element ingress-isolated".to_string()), "{v:?}");
        assert!(v.iter().any(|c| c.starts_with("add element sel-")), "the target set too: {v:?}");
    }

    #[test]
    fn a_namespace_relabel_updates_namespace_selector_sets() {
        let (c, book) = controller();
        c.on_namespace(&namespace("team-a", &[]));
        c.on_pod(&pod("team-a", "p", "n2", "10.42.1.9", &[]));
        c.on_policy(&network_policy(
            "prod",
            "from-team",
            json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]}]}),
        ));
        c.sync().unwrap();
        c.on_namespace(&namespace("team-a", &[("team", "a")]));
        c.sync().unwrap();
        let tx = last(&book);
        assert_eq!(verbs(&tx).len(), 1);
        assert!(serde_json::to_string(&tx).unwrap().contains("10.42.1.9"));
    }

    #[test]
    fn policies_with_equal_selectors_share_one_set_which_goes_with_the_last_of_them() {
        let (c, book) = controller();
        c.on_policy(&deny_all_but_api());
        c.sync().unwrap();
        let twin = network_policy(
            "prod",
            "db2",
            json!({"podSelector": {"matchLabels": {"app": "db"}},
                   "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "api"}}}]}]}),
        );
        c.on_policy(&twin);
        c.sync().unwrap();
        assert!(!verbs(&last(&book)).iter().any(|v| v.starts_with("add set")), "the sets exist already");
        c.on_policy_deleted(&deny_all_but_api());
        c.sync().unwrap();
        assert!(!verbs(&last(&book)).iter().any(|v| v.starts_with("delete set")), "db2 still uses them");
        c.on_policy_deleted(&twin);
        c.sync().unwrap();
        let v = verbs(&last(&book));
        assert_eq!(v.iter().filter(|v| v.starts_with("delete set")).count(), 2, "{v:?}");
        let dispatch = v.iter().position(|c| c == "flush chain ingress-policies").unwrap();
        let chain = v.iter().position(|c| c.starts_with("delete chain")).unwrap();
        let set = v.iter().position(|c| c.starts_with("delete set")).unwrap();
        assert!(dispatch < chain && chain < set, "nothing is deleted while referenced: {v:?}");
    }

    #[test]
    fn a_set_released_and_used_again_before_a_sync_is_compared_whole_with_the_kernel() {
        let (c, book) = controller();
        c.on_pod(&pod("prod", "api-0", "n2", "10.42.1.7", &[("role", "api")]));
        c.on_policy(&deny_all_but_api());
        c.sync().unwrap();
        c.on_policy_deleted(&deny_all_but_api());
        c.on_pod(&pod("prod", "api-0", "n2", "10.42.1.8", &[("role", "api")]));
        c.on_policy(&deny_all_but_api());
        c.sync().unwrap();
        let text = serde_json::to_string(&last(&book)).unwrap();
        assert!(text.contains(r#""delete":{"element":{"family":"ip","table":"skiff-netpol","name":"sel-"#), "{text}");
        assert!(text.contains("10.42.1.7") && text.contains("10.42.1.8"), "old address out, new in: {text}");
    }

    #[test]
    fn a_named_port_set_holds_address_protocol_and_port_of_pods_with_that_name() {
        let (c, book) = controller();
        let mut p = Pod::clone(&pod("prod", "web", "n1", "10.42.0.5", &[("app", "web")]));
        p.spec.as_mut().unwrap().containers[0].ports = Some(vec![k8s_openapi::api::core::v1::ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..Default::default()
        }]);
        c.on_pod(&Arc::new(p));
        c.on_policy(&network_policy(
            "prod",
            "web",
            json!({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}),
        ));
        c.sync().unwrap();
        let text = serde_json::to_string(&last(&book)).unwrap();
        assert!(text.contains(r#"{"concat":["10.42.0.5","tcp",8080]}"#), "{text}");
    }

    #[test]
    fn an_unchanged_pod_event_sends_nothing_and_a_refused_transaction_makes_the_next_sync_full() {
        let (c, book) = controller();
        let p = pod("prod", "db-0", "n1", "10.42.0.5", &[("app", "db")]);
        c.on_pod(&p);
        c.on_policy(&deny_all_but_api());
        c.sync().unwrap();
        let n = book.transactions().len();
        c.on_pod(&p);
        assert_eq!(c.sync().unwrap().commands, 0);
        assert_eq!(book.transactions().len(), n);
        book.fail_next();
        c.on_pod_deleted(&p);
        assert!(c.sync().is_err());
        assert!(c.sync().unwrap().full);
        let text = serde_json::to_string(&last(&book)).unwrap();
        assert!(!text.contains("10.42.0.5"), "the deleted pod is gone from the rebuilt table");
    }

    #[test]
    fn a_changed_policy_rewrites_its_chain_and_the_dispatch_not_other_policies() {
        let (c, book) = controller();
        c.on_policy(&deny_all_but_api());
        c.on_policy(&network_policy("prod", "other", json!({"podSelector": {}})));
        c.sync().unwrap();
        c.on_policy(&network_policy(
            "prod",
            "db",
            json!({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"ports": [{"port": 80}]}]}),
        ));
        c.sync().unwrap();
        let v = verbs(&last(&book));
        assert!(!v.iter().any(|c| c.contains("prod/other")), "{v:?}");
        assert!(v.iter().any(|c| c.starts_with("flush chain ingress-") && c.ends_with("prod/db")), "{v:?}");
        assert!(v.iter().any(|c| c.starts_with("delete set sel-")), "the api selection is unused now: {v:?}");
    }
}
