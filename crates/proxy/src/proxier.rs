//! The proxier: keeps the Services and EndpointSlices it is told about, and turns the changes
//! into nftables transactions (kube-proxy's `Proxier.syncProxyRules` in nftables mode).
//!
//! Incremental: an event marks its Service dirty; a sync recomputes only the dirty Services'
//! rules ([`crate::rules::service_rules`]) and sends one transaction with the difference from
//! what is in the kernel: their chains flushed and refilled, their map elements replaced, their
//! removed chains and sets deleted. The first sync, and any sync after a failed transaction,
//! is full: the table is deleted and recreated whole (kube-proxy's "full sync"). Syncs are
//! spaced by at least `min_sync_period`, so a burst of events is one transaction (kube-proxy's
//! `BoundedFrequencyRunner`). Rules stay in the kernel when the proxy stops or loses the API
//! server; the informers' relist on reconnect brings the missed changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::model::{SERVICE_NAME_LABEL, service_ports};
use crate::nft::{NftBackend, NftError};
use crate::rules::{self, ENDPOINT_HAIRPIN, RuleConfig, ServiceRules};

/// Services with this label belong to another proxy (kube-proxy skips them too).
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";

/// The default minimum time between two transactions.
pub const DEFAULT_MIN_SYNC_PERIOD: Duration = Duration::from_millis(10);

/// Settings of a [`Proxier`].
#[derive(Debug, Clone)]
pub struct ProxierConfig {
    /// This node's name: endpoints with this `nodeName` are local.
    pub node_name: String,
    /// What the rules depend on besides Services.
    pub rules: RuleConfig,
    /// Minimum time between two transactions (kube-proxy's `--min-sync-period`).
    pub min_sync_period: Duration,
}

#[derive(Default)]
struct Inputs {
    /// `namespace/name` → Service.
    services: HashMap<String, Arc<Service>>,
    /// `namespace/service` → slice name → slice.
    slices: HashMap<String, BTreeMap<String, Arc<EndpointSlice>>>,
    /// Services changed since the last sync.
    dirty: BTreeSet<String>,
    /// Changes received so far (see [`Proxier::changes`]).
    seq: u64,
}

#[derive(Default)]
struct Applied {
    /// What each Service has in the kernel.
    services: HashMap<String, ServiceRules>,
    /// Endpoint IP → number of Services using it (the hairpin set holds each IP once).
    hairpin: HashMap<Ipv4Addr, usize>,
}

/// What one sync did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncOutcome {
    /// Whether the table was recreated whole.
    pub full: bool,
    /// Services whose rules were recomputed.
    pub services: usize,
    /// Commands in the transaction (0: nothing to change, no transaction).
    pub commands: usize,
}

/// The node proxy's state and sync (one per node).
pub struct Proxier {
    cfg: ProxierConfig,
    backend: Arc<dyn NftBackend>,
    inputs: Mutex<Inputs>,
    applied: Mutex<Applied>,
    full_sync: AtomicBool,
    wake: tokio::sync::Notify,
    applied_seq: tokio::sync::watch::Sender<u64>,
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The `namespace/service` a slice belongs to (its `kubernetes.io/service-name` label).
fn slice_service_key(slice: &EndpointSlice) -> Option<String> {
    let svc = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some(key(slice.metadata.namespace.as_deref().unwrap_or_default(), svc))
}

impl Proxier {
    /// A proxier programming through `backend`; nothing is applied before the first
    /// [`Proxier::sync`], which is full.
    pub fn new(cfg: ProxierConfig, backend: Arc<dyn NftBackend>) -> Arc<Self> {
        Arc::new(Proxier {
            cfg,
            backend,
            inputs: Mutex::new(Inputs::default()),
            applied: Mutex::new(Applied::default()),
            full_sync: AtomicBool::new(true),
            wake: tokio::sync::Notify::new(),
            applied_seq: tokio::sync::watch::channel(0).0,
        })
    }

    fn changed(&self, inputs: &mut Inputs, service: String) {
        inputs.dirty.insert(service);
        inputs.seq += 1;
        self.wake.notify_one();
    }

    /// A Service was added or changed.
    pub fn on_service(&self, svc: &Arc<Service>) {
        let k = key(
            svc.metadata.namespace.as_deref().unwrap_or_default(),
            svc.metadata.name.as_deref().unwrap_or_default(),
        );
        let mut inputs = self.inputs.lock();
        inputs.services.insert(k.clone(), svc.clone());
        self.changed(&mut inputs, k);
    }

    /// A Service was deleted.
    pub fn on_service_deleted(&self, svc: &Service) {
        let k = key(
            svc.metadata.namespace.as_deref().unwrap_or_default(),
            svc.metadata.name.as_deref().unwrap_or_default(),
        );
        let mut inputs = self.inputs.lock();
        inputs.services.remove(&k);
        self.changed(&mut inputs, k);
    }

    /// An EndpointSlice was added or changed.
    pub fn on_slice(&self, slice: &Arc<EndpointSlice>) {
        let Some(k) = slice_service_key(slice) else { return };
        let name = slice.metadata.name.clone().unwrap_or_default();
        let mut inputs = self.inputs.lock();
        inputs.slices.entry(k.clone()).or_default().insert(name, slice.clone());
        self.changed(&mut inputs, k);
    }

    /// An EndpointSlice was deleted.
    pub fn on_slice_deleted(&self, slice: &EndpointSlice) {
        let Some(k) = slice_service_key(slice) else { return };
        let name = slice.metadata.name.clone().unwrap_or_default();
        let mut inputs = self.inputs.lock();
        if let Some(slices) = inputs.slices.get_mut(&k) {
            slices.remove(&name);
            if slices.is_empty() {
                inputs.slices.remove(&k);
            }
        }
        self.changed(&mut inputs, k);
    }

    /// How many changes were received so far; [`Proxier::wait_applied`] with this number waits
    /// until the kernel has them.
    pub fn changes(&self) -> u64 {
        self.inputs.lock().seq
    }

    /// Waits until every change up to `seq` is in the kernel (a transaction containing it was
    /// applied, or it changed nothing).
    pub async fn wait_applied(&self, seq: u64) {
        let mut rx = self.applied_seq.subscribe();
        let _ = rx.wait_for(|applied| *applied >= seq).await;
    }

    /// The rules `service` (`namespace/name`) should have now.
    fn desired(&self, inputs: &Inputs, service: &str) -> ServiceRules {
        let mut out = ServiceRules::default();
        let Some(svc) = inputs.services.get(service) else { return out };
        if svc.metadata.labels.as_ref().is_some_and(|l| l.contains_key(SERVICE_PROXY_NAME_LABEL)) {
            return out;
        }
        let slices: Vec<&EndpointSlice> =
            inputs.slices.get(service).map(|m| m.values().map(|s| s.as_ref()).collect()).unwrap_or_default();
        for sp in service_ports(svc, &slices, &self.cfg.node_name) {
            let r = rules::service_rules(&sp, &self.cfg.rules);
            out.chains.extend(r.chains);
            out.elements.extend(r.elements);
            out.affinity_sets.extend(r.affinity_sets);
            out.hairpin.extend(r.hairpin);
        }
        out
    }

    /// Applies what changed since the last sync in one transaction (or the whole table after a
    /// failure or on the first call).
    ///
    /// # Errors
    /// [`NftError`] when the transaction was refused or `nft` could not run; the next sync is
    /// then full.
    pub fn sync(&self) -> Result<SyncOutcome, NftError> {
        let full = self.full_sync.swap(false, Ordering::SeqCst);
        let (seq, desired) = {
            let mut inputs = self.inputs.lock();
            let keys: Vec<String> = if full {
                inputs.dirty.clear();
                inputs.services.keys().cloned().collect()
            } else {
                std::mem::take(&mut inputs.dirty).into_iter().collect()
            };
            let desired: Vec<(String, ServiceRules)> =
                keys.into_iter().map(|k| (k.clone(), self.desired(&inputs, &k))).collect();
            (inputs.seq, desired)
        };
        let mut applied = self.applied.lock();
        let result = if full { self.full_transaction(desired) } else { self.partial_transaction(&applied, desired) };
        let (commands, next, services) = result;
        let outcome = SyncOutcome { full, services, commands: commands.len() };
        if !commands.is_empty()
            && let Err(e) = self.backend.apply(&commands)
        {
            self.full_sync.store(true, Ordering::SeqCst);
            self.wake.notify_one();
            return Err(e);
        }
        match next {
            Next::Replace(a) => *applied = a,
            Next::Update { services, hairpin } => {
                for (k, r) in services {
                    if r == ServiceRules::default() {
                        applied.services.remove(&k);
                    } else {
                        applied.services.insert(k, r);
                    }
                }
                applied.hairpin = hairpin;
            }
        }
        self.applied_seq.send_replace(seq);
        Ok(outcome)
    }

    /// The whole table: base chains, maps and sets, then every Service's rules, elements
    /// grouped per map.
    fn full_transaction(&self, desired: Vec<(String, ServiceRules)>) -> (Vec<Value>, Next, usize) {
        let mut cmds = rules::base_table();
        let mut elements: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
        let mut next = Applied::default();
        let count = desired.len();
        for (k, r) in desired {
            for (set, timeout) in &r.affinity_sets {
                cmds.push(rules::add_affinity_set(set, *timeout));
            }
            for name in r.chains.keys() {
                cmds.push(rules::add_chain(name));
            }
            for (name, chain) in &r.chains {
                for rule in chain {
                    cmds.push(rules::add_rule(name, rule));
                }
            }
            for e in r.elements.values() {
                elements.entry(e.map).or_default().push(json!([e.key, e.verdict]));
            }
            for ip in &r.hairpin {
                *next.hairpin.entry(*ip).or_default() += 1;
            }
            if r != ServiceRules::default() {
                next.services.insert(k, r);
            }
        }
        for (map, elem) in elements {
            cmds.push(rules::command("add", "element", json!({"name": map, "elem": elem})));
        }
        if !next.hairpin.is_empty() {
            let elem: Vec<Value> = next.hairpin.keys().map(|ip| hairpin_key(*ip)).collect();
            cmds.push(rules::command("add", "element", json!({"name": ENDPOINT_HAIRPIN, "elem": elem})));
        }
        (cmds, Next::Replace(next), count)
    }

    /// The difference between what the dirty Services have in the kernel and what they should.
    fn partial_transaction(
        &self,
        applied: &Applied,
        desired: Vec<(String, ServiceRules)>,
    ) -> (Vec<Value>, Next, usize) {
        let empty = ServiceRules::default();
        let (mut sets, mut create, mut fill, mut elems) = (vec![], vec![], vec![], vec![]);
        let (mut flush_old, mut delete_old) = (vec![], vec![]);
        let mut hairpin = applied.hairpin.clone();
        let mut hairpin_cmds = Vec::new();
        let count = desired.len();
        for (k, new) in &desired {
            let old = applied.services.get(k).unwrap_or(&empty);
            if old == new {
                continue;
            }
            for (set, timeout) in &new.affinity_sets {
                if old.affinity_sets.get(set) != Some(timeout) {
                    if old.affinity_sets.contains_key(set) {
                        // A new timeout: the set is recreated (after the chains using it are refilled).
                        delete_old.push(rules::command("delete", "set", json!({"name": set})));
                    }
                    sets.push(rules::add_affinity_set(set, *timeout));
                }
            }
            for (name, chain) in &new.chains {
                if old.chains.get(name) == Some(chain) {
                    continue;
                }
                // Every chain exists before any rule jumps to it (external → service).
                create.push(rules::add_chain(name));
                fill.push(rules::command("flush", "chain", json!({"name": name})));
                for rule in chain {
                    fill.push(rules::add_rule(name, rule));
                }
            }
            for (id, e) in &old.elements {
                if new.elements.get(id) != Some(e) {
                    elems.push(rules::element("delete", e.map, &e.key, None));
                }
            }
            for (id, e) in &new.elements {
                if old.elements.get(id) != Some(e) {
                    elems.push(rules::element("add", e.map, &e.key, Some(&e.verdict)));
                }
            }
            for name in old.chains.keys().filter(|c| !new.chains.contains_key(*c)) {
                flush_old.push(rules::command("flush", "chain", json!({"name": name})));
                delete_old.push(rules::command("delete", "chain", json!({"name": name})));
            }
            for set in old.affinity_sets.keys().filter(|s| !new.affinity_sets.contains_key(*s)) {
                delete_old.push(rules::command("delete", "set", json!({"name": set})));
            }
            for ip in old.hairpin.difference(&new.hairpin) {
                if let Some(n) = hairpin.get_mut(ip) {
                    *n -= 1;
                    if *n == 0 {
                        hairpin.remove(ip);
                        hairpin_cmds.push(rules::element("delete", ENDPOINT_HAIRPIN, &hairpin_key(*ip), None));
                    }
                }
            }
            for ip in new.hairpin.difference(&old.hairpin) {
                let n = hairpin.entry(*ip).or_default();
                *n += 1;
                if *n == 1 {
                    hairpin_cmds.push(rules::element("add", ENDPOINT_HAIRPIN, &hairpin_key(*ip), None));
                }
            }
        }
        // A set recreated with a new timeout is deleted before it is added again.
        let (recreated, mut delete_old): (Vec<Value>, Vec<Value>) = delete_old.into_iter().partition(|c| {
            c.pointer("/delete/set/name")
                .and_then(Value::as_str)
                .is_some_and(|n| sets.iter().any(|s| s.pointer("/add/set/name").and_then(Value::as_str) == Some(n)))
        });
        let mut cmds = Vec::new();
        if !recreated.is_empty() {
            // The chains naming those sets are emptied first, then refilled below.
            for c in &fill {
                if c.get("flush").is_some() {
                    cmds.push(c.clone());
                }
            }
            cmds.extend(recreated);
        }
        cmds.extend(sets);
        cmds.extend(create);
        cmds.extend(fill);
        cmds.extend(elems);
        cmds.extend(hairpin_cmds);
        cmds.extend(flush_old);
        // Chains before the sets they used.
        delete_old.sort_by_key(|c| c.pointer("/delete/set").is_some());
        cmds.extend(delete_old);
        (cmds, Next::Update { services: desired, hairpin }, count)
    }

    /// Runs syncs until dropped: the first (full) once `ready` resolves, then whenever a change
    /// arrives, at most one per `min_sync_period`; a failed sync is retried after a second.
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
                Ok(Ok(outcome)) => {
                    if outcome.full {
                        tracing::info!(
                            services = outcome.services,
                            commands = outcome.commands,
                            "programmed the node's Service rules"
                        );
                    } else {
                        tracing::debug!(?outcome, "synced Service rules");
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "programming Service rules failed; retrying with a full sync");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(e) => tracing::error!(error = %e, "the proxy's sync panicked"),
            }
            self.wake.notified().await;
        }
    }
}

enum Next {
    Replace(Applied),
    Update { services: Vec<(String, ServiceRules)>, hairpin: HashMap<Ipv4Addr, usize> },
}

fn hairpin_key(ip: Ipv4Addr) -> Value {
    json!({"concat": [ip.to_string(), ip.to_string()]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{service, slice};
    use crate::nft::Bookkeeping;
    use crate::rules::{Cidr, NO_ENDPOINT_SERVICES, SERVICE_IPS};

    fn proxier() -> (Arc<Proxier>, Bookkeeping) {
        let book = Bookkeeping::default();
        let cfg = ProxierConfig {
            node_name: "n1".into(),
            rules: RuleConfig { local_traffic: Cidr::parse("10.42.0.0/24") },
            min_sync_period: Duration::ZERO,
        };
        (Proxier::new(cfg, Arc::new(book.clone())), book)
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

    #[test]
    fn the_first_sync_recreates_the_table_with_every_service() {
        let (p, book) = proxier();
        p.on_service(&Arc::new(service("default", "web", "10.43.0.20", 80)));
        p.on_slice(&Arc::new(slice("default", "web", "web-1", 8080, &[("10.42.0.5", true, "n1")])));
        p.on_service(&Arc::new(service("default", "empty", "10.43.0.21", 80)));
        let out = p.sync().unwrap();
        assert!(out.full);
        assert_eq!(out.services, 2);
        let tx = &book.transactions()[0];
        let v = verbs(tx);
        assert_eq!(v[..3], ["add table skiff-proxy", "delete table skiff-proxy", "add table skiff-proxy"]);
        assert!(v.iter().any(|c| c.starts_with("add chain service-") && c.ends_with("default/web/tcp/")));
        let text = serde_json::to_string(tx).unwrap();
        assert!(text.contains("10.43.0.21") && text.contains(rules::REJECT_CHAIN));
    }

    #[test]
    fn an_endpoint_change_rewrites_only_its_services_chain_and_elements() {
        let (p, book) = proxier();
        p.on_service(&Arc::new(service("default", "web", "10.43.0.20", 80)));
        p.on_service(&Arc::new(service("default", "other", "10.43.0.30", 80)));
        p.on_slice(&Arc::new(slice("default", "other", "other-1", 80, &[("10.42.0.9", true, "n1")])));
        p.on_slice(&Arc::new(slice("default", "web", "web-1", 8080, &[("10.42.0.5", true, "n1")])));
        p.sync().unwrap();
        p.on_slice(&Arc::new(slice(
            "default",
            "web",
            "web-1",
            8080,
            &[("10.42.0.5", true, "n1"), ("10.42.0.6", true, "n1")],
        )));
        let out = p.sync().unwrap();
        assert!(!out.full);
        assert_eq!(out.services, 1);
        let tx = book.transactions().pop().unwrap();
        let v = verbs(&tx);
        assert!(v.iter().all(|c| !c.contains("other")), "the other Service is untouched: {v:?}");
        assert!(v[0].starts_with("add chain service-") && v[1].starts_with("flush chain service-"), "{v:?}");
        assert_eq!(v.iter().filter(|c| c.starts_with("add rule")).count(), 3, "masquerade + 2 endpoints: {v:?}");
        assert!(v.contains(&format!("add element {ENDPOINT_HAIRPIN}")), "the new endpoint's hairpin pair: {v:?}");
        assert!(!v.iter().any(|c| c.contains(SERVICE_IPS)), "the ClusterIP element did not change: {v:?}");
    }

    #[test]
    fn losing_the_last_endpoint_swaps_the_service_for_a_reject_element_and_deletes_its_chain() {
        let (p, book) = proxier();
        p.on_service(&Arc::new(service("default", "web", "10.43.0.20", 80)));
        let s = Arc::new(slice("default", "web", "web-1", 8080, &[("10.42.0.5", true, "n1")]));
        p.on_slice(&s);
        p.sync().unwrap();
        p.on_slice_deleted(&s);
        p.sync().unwrap();
        let v = verbs(&book.transactions().pop().unwrap());
        let pos =
            |prefix: &str| v.iter().position(|c| c.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix} in {v:?}"));
        assert!(pos(&format!("delete element {SERVICE_IPS}")) < pos("delete chain service-"), "{v:?}");
        assert!(pos("flush chain service-") < pos("delete chain service-"));
        pos(&format!("add element {NO_ENDPOINT_SERVICES}"));
        pos(&format!("delete element {ENDPOINT_HAIRPIN}"));
    }

    #[test]
    fn chains_that_appear_together_all_exist_before_a_rule_jumps_between_them() {
        let (p, book) = proxier();
        let mut svc = service("default", "web", "10.43.0.20", 80);
        svc.spec.as_mut().unwrap().type_ = Some("NodePort".into());
        svc.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(30080);
        p.on_service(&Arc::new(svc));
        p.sync().unwrap();
        p.on_slice(&Arc::new(slice("default", "web", "web-1", 8080, &[("10.42.0.5", true, "n1")])));
        p.sync().unwrap();
        let v = verbs(&book.transactions().pop().unwrap());
        let last_create = v.iter().rposition(|c| c.starts_with("add chain")).unwrap();
        let first_rule = v.iter().position(|c| c.starts_with("add rule")).unwrap();
        assert_eq!(v.iter().filter(|c| c.starts_with("add chain")).count(), 2, "external and service chains: {v:?}");
        assert!(last_create < first_rule, "{v:?}");
    }

    #[test]
    fn a_deleted_service_leaves_nothing_behind() {
        let (p, book) = proxier();
        let svc = Arc::new(service("default", "web", "10.43.0.20", 80));
        p.on_service(&svc);
        p.sync().unwrap();
        p.on_service_deleted(&svc);
        p.sync().unwrap();
        let v = verbs(&book.transactions().pop().unwrap());
        assert_eq!(v, [format!("delete element {NO_ENDPOINT_SERVICES}")]);
        assert!(p.applied.lock().services.is_empty());
    }

    #[test]
    fn a_refused_transaction_makes_the_next_sync_full() {
        let (p, book) = proxier();
        p.on_service(&Arc::new(service("default", "web", "10.43.0.20", 80)));
        p.sync().unwrap();
        book.fail_next();
        p.on_service(&Arc::new(service("default", "web", "10.43.0.22", 80)));
        assert!(p.sync().is_err());
        let out = p.sync().unwrap();
        assert!(out.full);
        assert!(serde_json::to_string(&book.transactions().pop().unwrap()).unwrap().contains("10.43.0.22"));
    }

    #[test]
    fn a_sync_without_changes_sends_no_transaction_but_counts_as_applied() {
        let (p, book) = proxier();
        p.sync().unwrap();
        let svc = Arc::new(service("default", "web", "10.43.0.20", 80));
        p.on_service(&svc);
        p.sync().unwrap();
        let n = book.transactions().len();
        p.on_service(&svc);
        let out = p.sync().unwrap();
        assert_eq!(out.commands, 0);
        assert_eq!(book.transactions().len(), n);
        assert_eq!(*p.applied_seq.borrow(), p.changes());
    }

    #[test]
    fn two_services_sharing_an_endpoint_ip_keep_its_hairpin_pair_until_both_let_go() {
        let (p, book) = proxier();
        for (name, ip) in [("a", "10.43.0.1"), ("b", "10.43.0.2")] {
            p.on_service(&Arc::new(service("default", name, ip, 80)));
            p.on_slice(&Arc::new(slice("default", name, name, 80, &[("10.42.0.5", true, "n1")])));
        }
        p.sync().unwrap();
        let a = slice("default", "a", "a", 80, &[]);
        p.on_slice_deleted(&a);
        p.sync().unwrap();
        assert!(!verbs(&book.transactions().pop().unwrap()).iter().any(|c| c.contains(ENDPOINT_HAIRPIN)));
        p.on_slice_deleted(&slice("default", "b", "b", 80, &[]));
        p.sync().unwrap();
        assert!(verbs(&book.transactions().pop().unwrap()).contains(&format!("delete element {ENDPOINT_HAIRPIN}")));
    }
}
