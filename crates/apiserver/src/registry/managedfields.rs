//! Field ownership for server-side apply: `metadata.managedFields` as `FieldsV1` sets per field
//! manager and operation, the apply merge, conflict detection and ownership transfer.
//!
//! Follows "Server-Side Apply" (<https://kubernetes.io/docs/reference/using-api/server-side-apply/>):
//!
//! - every write names a field manager (`fieldManager`, else the User-Agent's product name);
//!   a non-apply write (create, PUT, PATCH) adds the fields it changed to its `Update` entry
//!   (one per manager, apiVersion and subresource) and takes them away from every other manager;
//! - an apply (`application/apply-patch+yaml`) merges the applied configuration into the live
//!   object, with lists merged by their list-map keys (containers by `name`, ports by
//!   `containerPort`+`protocol`, ...: the strategic-merge table of `skiff_apimachinery::patch`)
//!   and scalar sets by value; the manager's `Apply` entry becomes exactly the applied fields;
//! - applying a value to a field another manager owns with a different value is a conflict
//!   (409, reason Conflict, causes of type `FieldManagerConflict`) unless `force=true`, which
//!   moves the field to the applier;
//! - a field the applier applied before and no longer applies is removed from the object when
//!   no other manager owns it.
//!
//! A field path is a list of `FieldsV1` path elements: `f:<name>` (a struct or map field),
//! `k:<json>` (a list-map item by its keys), `v:<json>` (a set item by its value).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};
use skiff_apimachinery::ApiError;
use skiff_apimachinery::patch::{ListMerge, SchemaNode};
use skiff_apimachinery::status::{Cause, Details};

use crate::resources::ResourceDef;

/// One field path (`FieldsV1` path elements, e.g. `["f:spec", "f:replicas"]`).
pub type FieldPath = Vec<String>;

/// A set of owned fields (the decoded form of `FieldsV1`). A path is a member when the manager
/// owns that field; list items are members in their own right (the `"."` of `FieldsV1`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet(pub BTreeSet<FieldPath>);

impl FieldSet {
    /// Decodes a `FieldsV1` object (`{"f:spec":{"f:replicas":{}}}`); anything else is empty.
    pub fn from_fields_v1(v: &Value) -> Self {
        fn walk(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
            let Some(m) = v.as_object() else { return };
            for (k, child) in m {
                if k == "." {
                    if !prefix.is_empty() {
                        out.insert(prefix.clone());
                    }
                    continue;
                }
                prefix.push(k.clone());
                if child.as_object().is_some_and(Map::is_empty) {
                    out.insert(prefix.clone());
                } else {
                    walk(child, prefix, out);
                }
                prefix.pop();
            }
        }
        let mut out = BTreeSet::new();
        walk(v, &mut Vec::new(), &mut out);
        Self(out)
    }

    /// Encodes the set as `FieldsV1`: leaves are `{}`, members with children carry `".": {}`.
    pub fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for path in &self.0 {
            let mut cur = &mut root;
            for el in path {
                let next = cur.entry(el.clone()).or_insert_with(|| json!({}));
                if !next.is_object() {
                    *next = json!({});
                }
                let Value::Object(m) = next else { unreachable!("just made an object") };
                cur = m;
            }
            cur.insert(".".into(), json!({}));
        }
        fn tidy(m: &mut Map<String, Value>) {
            if m.len() == 1 && m.contains_key(".") {
                m.remove(".");
                return;
            }
            for (k, v) in m.iter_mut() {
                if k != "."
                    && let Value::Object(c) = v
                {
                    tidy(c);
                }
            }
        }
        for v in root.values_mut() {
            if let Value::Object(c) = v {
                tidy(c);
            }
        }
        Value::Object(root)
    }

    /// True when the set has no members.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when `path` is a member.
    pub fn contains(&self, path: &FieldPath) -> bool {
        self.0.contains(path)
    }

    /// True when `path` or a field below it is a member.
    fn owns_at_or_below(&self, path: &FieldPath) -> bool {
        self.0.range(path.clone()..).next().is_some_and(|p| p.starts_with(path))
    }

    /// True when no member lies strictly below `path`.
    fn is_leaf(&self, path: &FieldPath) -> bool {
        // Members below `path` sort right after it.
        self.0.range(path.clone()..).find(|p| *p != path).is_none_or(|p| !p.starts_with(path))
    }
}

/// Renders a field path as Kubernetes prints it in conflicts: `.spec.replicas`,
/// `.spec.template.spec.containers[name="nginx"].image`, `.metadata.finalizers[="x"]`.
pub fn path_string(path: &[String]) -> String {
    let mut s = String::new();
    for el in path {
        if let Some(f) = el.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = el.strip_prefix("k:") {
            let keys: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = el.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        } else if let Some(i) = el.strip_prefix("i:") {
            s.push_str(&format!("[{i}]"));
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// The schema: list types from the strategic-merge table, plus server-side apply's own rules.

/// How a list field is merged by server-side apply (`x-kubernetes-list-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListType {
    /// Replaced as a whole and owned as one field.
    Atomic,
    /// A set of scalars, owned per value.
    Set,
    /// A list map keyed by the field (and `protocol`, defaulting to TCP, when `true`).
    Map(&'static str, bool),
}

/// A schema position: the strategic-merge table's node, or an atomic value.
#[derive(Debug, Clone, Copy)]
struct Node {
    smp: SchemaNode,
    atomic: bool,
}

impl Node {
    fn root(api_version: &str, kind: &str) -> Self {
        Self { smp: SchemaNode::root(api_version, kind), atomic: false }
    }

    fn child(self, name: &str) -> (ListType, Node) {
        let (merge, smp) = self.smp.field(name);
        let list = match merge {
            ListMerge::Atomic => ListType::Atomic,
            ListMerge::Set => ListType::Set,
            // Ports are keyed by port and protocol for apply (`x-kubernetes-list-map-keys`).
            ListMerge::Map(k @ ("containerPort" | "port")) => ListType::Map(k, true),
            ListMerge::Map(k) => ListType::Map(k, false),
        };
        // Label selectors and node selectors are atomic maps (`x-kubernetes-map-type: atomic`).
        let atomic = matches!(name, "selector" | "nodeSelector" | "labelSelector" | "namespaceSelector");
        (list, Node { smp, atomic })
    }
}

/// The key path element of a list-map item, or `None` when it lacks its key.
fn item_key(item: &Value, list: ListType) -> Option<String> {
    let ListType::Map(key, with_protocol) = list else { return None };
    let mut m = Map::new();
    m.insert(key.to_string(), item.get(key).filter(|v| !v.is_null())?.clone());
    if with_protocol {
        m.insert("protocol".into(), item.get("protocol").cloned().unwrap_or_else(|| json!("TCP")));
    }
    Some(format!("k:{}", Value::Object(m)))
}

fn matches_key(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| match item.get(k) {
        Some(x) => x == v,
        None => k == "protocol" && v == "TCP",
    })
}

/// The fields set in `v` (a value of schema node `node`), under `prefix`.
fn collect(v: &Value, node: Node, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match v {
        Value::Object(m) if !node.atomic && !m.is_empty() => {
            for (k, child) in m {
                if child.is_null() {
                    continue;
                }
                let (list, cn) = node.child(k);
                prefix.push(format!("f:{k}"));
                collect_field(child, list, cn, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
    }
}

fn collect_field(v: &Value, list: ListType, node: Node, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    let Value::Array(items) = v else { return collect(v, node, prefix, out) };
    let keyed: Option<Vec<String>> = match list {
        ListType::Atomic => None,
        ListType::Set => Some(items.iter().map(|i| format!("v:{i}")).collect()),
        ListType::Map(..) => items.iter().map(|i| item_key(i, list)).collect(),
    };
    match keyed {
        Some(keys) if !items.is_empty() => {
            for (item, key) in items.iter().zip(keys) {
                prefix.push(key);
                out.insert(prefix.clone());
                if matches!(list, ListType::Map(..)) {
                    collect(item, node, prefix, out);
                }
                prefix.pop();
            }
        }
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// Metadata fields nobody owns (identity and server-set fields).
const UNOWNED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "managedFields",
];

/// The part of `obj` whose fields are tracked for a write to `subresource`: without apiVersion,
/// kind and identity metadata; the status alone for `/status`, everything but the status
/// otherwise (for kinds with a status subresource).
fn owned_view(obj: &Value, subresource: Option<&str>, has_status: bool) -> Value {
    let Some(m) = obj.as_object() else { return json!({}) };
    let mut out = Map::new();
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if has_status && subresource != Some("status") => {}
            "metadata" => {
                if subresource == Some("status") {
                    continue;
                }
                let mut meta = v.as_object().cloned().unwrap_or_default();
                meta.retain(|k, _| !UNOWNED_METADATA.contains(&k.as_str()));
                if !meta.is_empty() {
                    out.insert(k.clone(), Value::Object(meta));
                }
            }
            _ if subresource == Some("status") => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// The fields of the tracked part of `obj`.
fn fields_of(obj: &Value, node: Node, subresource: Option<&str>, has_status: bool) -> FieldSet {
    let mut out = BTreeSet::new();
    collect(&owned_view(obj, subresource, has_status), node, &mut Vec::new(), &mut out);
    FieldSet(out)
}

/// The value at `path` in `v`.
fn value_at<'a>(mut v: &'a Value, path: &[String]) -> Option<&'a Value> {
    for el in path {
        v = if let Some(f) = el.strip_prefix("f:") {
            v.get(f)?
        } else if let Some(k) = el.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(k).ok()?;
            v.as_array()?.iter().find(|i| matches_key(i, &key))?
        } else if let Some(x) = el.strip_prefix("v:") {
            let x: Value = serde_json::from_str(x).ok()?;
            v.as_array()?.iter().find(|i| **i == x)?
        } else if let Some(i) = el.strip_prefix("i:") {
            v.as_array()?.get(i.parse::<usize>().ok()?)?
        } else {
            return None;
        };
    }
    Some(v)
}

/// Removes the field at `path` from `v` (a map key, a list-map item or a set value).
fn remove_at(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut cur = v;
    for el in parents {
        cur = if let Some(f) = el.strip_prefix("f:") {
            match cur.get_mut(f) {
                Some(c) => c,
                None => return,
            }
        } else if let Some(k) = el.strip_prefix("k:") {
            let Ok(key) = serde_json::from_str::<Map<String, Value>>(k) else { return };
            match cur.as_array_mut().and_then(|a| a.iter_mut().find(|i| matches_key(i, &key))) {
                Some(c) => c,
                None => return,
            }
        } else {
            return;
        };
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(k) = last.strip_prefix("k:") {
        if let (Ok(key), Some(a)) = (serde_json::from_str::<Map<String, Value>>(k), cur.as_array_mut()) {
            a.retain(|i| !matches_key(i, &key));
        }
    } else if let Some(x) = last.strip_prefix("v:")
        && let (Ok(x), Some(a)) = (serde_json::from_str::<Value>(x), cur.as_array_mut())
    {
        a.retain(|i| *i != x);
    }
}

/// Merges an applied configuration into `live`: maps by key, list maps by item key, sets by
/// value, everything else replaced. A `null` removes the field.
fn merge(live: &mut Value, applied: &Value, node: Node) {
    match (live.as_object_mut(), applied) {
        (Some(lm), Value::Object(am)) if !node.atomic => {
            for (k, av) in am {
                if av.is_null() {
                    lm.remove(k);
                    continue;
                }
                let (list, cn) = node.child(k);
                match lm.get_mut(k) {
                    Some(lv) => merge_field(lv, av, list, cn),
                    None => {
                        lm.insert(k.clone(), av.clone());
                    }
                }
            }
        }
        _ => *live = applied.clone(),
    }
}

fn merge_field(live: &mut Value, applied: &Value, list: ListType, node: Node) {
    match (live, applied, list) {
        (Value::Array(l), Value::Array(a), ListType::Set) => {
            for x in a {
                if !l.contains(x) {
                    l.push(x.clone());
                }
            }
        }
        (live @ Value::Array(_), Value::Array(a), ListType::Map(..)) => {
            let keys: Option<Vec<String>> = a.iter().map(|i| item_key(i, list)).collect();
            let (Some(keys), Value::Array(l)) = (keys, &mut *live) else {
                *live = applied.clone();
                return;
            };
            for (item, key) in a.iter().zip(keys) {
                match l.iter_mut().find(|x| item_key(x, list).as_deref() == Some(key.as_str())) {
                    Some(x) => merge(x, item, node),
                    None => l.push(item.clone()),
                }
            }
        }
        (live, applied, _) => merge(live, applied, node),
    }
}

// ---------------------------------------------------------------------------------------------
// managedFields entries.

/// One `metav1.ManagedFieldsEntry`.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `manager`.
    pub manager: String,
    /// `operation`: `Apply` or `Update`.
    pub operation: String,
    /// `apiVersion` the manager wrote with.
    pub api_version: String,
    /// `subresource` ("" for the main resource).
    pub subresource: String,
    /// `time` (RFC 3339), when known.
    pub time: Option<Value>,
    /// `fieldsV1`, decoded.
    pub fields: FieldSet,
}

impl Entry {
    /// Decodes one entry; `None` for entries that are not objects.
    pub fn from_json(v: &Value) -> Option<Self> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        v.as_object()?;
        Some(Self {
            manager: s("manager"),
            operation: s("operation"),
            api_version: s("apiVersion"),
            subresource: s("subresource"),
            time: v.get("time").cloned(),
            fields: FieldSet::from_fields_v1(v.get("fieldsV1").unwrap_or(&Value::Null)),
        })
    }

    /// Encodes the entry as `metav1.ManagedFieldsEntry` JSON.
    pub fn to_json(&self) -> Value {
        let mut e = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        });
        if let Some(t) = &self.time {
            e["time"] = t.clone();
        }
        e["fieldsType"] = json!("FieldsV1");
        e["fieldsV1"] = self.fields.to_fields_v1();
        if !self.subresource.is_empty() {
            e["subresource"] = json!(self.subresource);
        }
        e
    }

    /// How Kubernetes names the manager in conflict messages: `"kubectl"`,
    /// `"kubectl-client-side-apply" using apps/v1`, `"m" with subresource "scale" using apps/v1`.
    pub fn describe(&self) -> String {
        let mut s = format!("\"{}\"", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource \"{}\"", self.subresource));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// The managedFields entries of `obj`.
pub fn entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| a.iter().filter_map(Entry::from_json).collect())
        .unwrap_or_default()
}

fn set_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(entries.iter().map(Entry::to_json).collect()));
    }
}

/// The field manager of a non-apply write: the `fieldManager` parameter, else the product
/// name of the User-Agent (`kubectl/v1.33.0 (linux/amd64) ...` → `kubectl`), as
/// kube-apiserver derives it. `None` when neither is there.
pub fn manager_for_update(field_manager: Option<&str>, user_agent: Option<&str>) -> Option<String> {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return Some(m.to_string());
    }
    let ua = user_agent?.split('/').next()?.trim();
    if ua.is_empty() { None } else { Some(ua.chars().take(128).collect()) }
}

/// Whether writes to `subresource` are tracked (the main resource, `/status`, `/scale`).
fn tracked(subresource: Option<&str>) -> bool {
    matches!(subresource, None | Some("status") | Some("scale"))
}

/// Records a non-apply write (create when `old` is `None`, else update) by `manager` in
/// `new`'s managedFields: the manager's `Update` entry gains the fields the write added or
/// changed, and every other manager loses them; removed fields leave every entry. A write that
/// changes no tracked field leaves managedFields as they are.
pub fn record_update(
    def: &ResourceDef,
    subresource: Option<&str>,
    manager: &str,
    old: Option<&Value>,
    new: &mut Value,
) {
    if !tracked(subresource) {
        return;
    }
    let api_version = new["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = new["kind"].as_str().unwrap_or_default().to_string();
    let node = Node::root(&api_version, &kind);
    let sub = subresource.filter(|s| *s == "status");
    let has_status = def.has_status();
    let empty = json!({});
    let old = old.unwrap_or(&empty);
    let before = fields_of(old, node, sub, has_status);
    let after = fields_of(new, node, sub, has_status);
    let added: Vec<&FieldPath> = after.0.difference(&before.0).collect();
    let removed: Vec<&FieldPath> = before.0.difference(&after.0).collect();
    let modified: Vec<&FieldPath> =
        after.0.intersection(&before.0).filter(|p| after.is_leaf(p) && value_at(old, p) != value_at(new, p)).collect();
    if added.is_empty() && removed.is_empty() && modified.is_empty() {
        return;
    }
    let mut all = entries(new);
    let subresource = subresource.unwrap_or_default();
    let mine = |e: &Entry| {
        e.manager == manager
            && e.operation == "Update"
            && e.api_version == def.api_version()
            && e.subresource == subresource
    };
    for e in all.iter_mut() {
        for p in &removed {
            e.fields.0.remove(*p);
        }
        if !mine(e) {
            for p in added.iter().chain(&modified) {
                e.fields.0.remove(*p);
            }
        }
    }
    let idx = match all.iter().position(mine) {
        Some(i) => i,
        None => {
            all.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: def.api_version(),
                subresource: subresource.to_string(),
                time: None,
                fields: FieldSet::default(),
            });
            all.len() - 1
        }
    };
    let e = &mut all[idx];
    e.fields.0.extend(added.into_iter().chain(modified).cloned());
    e.time = Some(json!(crate::util::now()));
    set_entries(new, all);
}

/// What an apply request is.
#[derive(Debug, Clone, Copy)]
pub struct ApplyRequest<'a> {
    /// The applying field manager.
    pub manager: &'a str,
    /// The resource applied to.
    pub def: &'a ResourceDef,
    /// `None` or `Some("status")`.
    pub subresource: Option<&'a str>,
    /// `force=true`: take conflicting fields over instead of failing.
    pub force: bool,
}

/// Applies the configuration `applied` to `live` (the current object, or a skeleton with
/// apiVersion, kind and metadata.name when creating) for `req.manager` and returns the new
/// object with its managedFields.
///
/// # Errors
/// 409 Conflict (reason `Conflict`, causes `FieldManagerConflict`) when the apply would change
/// fields other managers own and `force` is not set.
pub fn apply(live: &Value, applied: &Value, req: ApplyRequest<'_>) -> Result<Value, ApiError> {
    let api_version = live["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = live["kind"].as_str().unwrap_or_default().to_string();
    let node = Node::root(&api_version, &kind);
    let has_status = req.def.has_status();
    let view = owned_view(applied, req.subresource, has_status);
    let mut applied_set = BTreeSet::new();
    collect(&view, node, &mut Vec::new(), &mut applied_set);
    let applied_set = FieldSet(applied_set);

    let mut result = live.clone();
    merge(&mut result, &view, node);

    let subresource = req.subresource.unwrap_or_default();
    let is_applier = |e: &Entry| e.manager == req.manager && e.operation == "Apply" && e.subresource == subresource;
    let mut all = entries(live);

    // Conflicts: applied leaves whose value changes and that another manager owns.
    let mut conflicts: Vec<(usize, FieldPath)> = Vec::new();
    for p in applied_set.0.iter().filter(|p| applied_set.is_leaf(p)) {
        if value_at(live, p) == value_at(&result, p) {
            continue;
        }
        for (i, e) in all.iter().enumerate() {
            if !is_applier(e) && e.fields.contains(p) {
                conflicts.push((i, p.clone()));
            }
        }
    }
    if !conflicts.is_empty() {
        if !req.force {
            return Err(conflict_error(&all, &conflicts));
        }
        for (i, p) in &conflicts {
            all[*i].fields.0.remove(p);
        }
    }

    // Fields this manager applied before and no longer applies go, unless someone else owns them.
    let previous = all.iter().find(|e| is_applier(e)).map(|e| e.fields.clone()).unwrap_or_default();
    let mut gone: Vec<&FieldPath> = previous.0.difference(&applied_set.0).collect();
    // Outermost first: a list item goes before its key fields would.
    gone.sort_by_key(|p| p.len());
    for p in gone {
        if !all.iter().any(|e| !is_applier(e) && e.fields.owns_at_or_below(p)) {
            remove_at(&mut result, p);
        }
    }

    let entry = Entry {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: req.def.api_version(),
        subresource: subresource.to_string(),
        time: Some(json!(crate::util::now())),
        fields: applied_set,
    };
    match all.iter().position(is_applier) {
        Some(i) => all[i] = entry,
        None => all.push(entry),
    }
    set_entries(&mut result, all);
    Ok(result)
}

/// The 409 of a conflicting apply, worded as kube-apiserver words it.
fn conflict_error(all: &[Entry], conflicts: &[(usize, FieldPath)]) -> ApiError {
    let causes = conflicts
        .iter()
        .map(|(i, p)| Cause {
            reason: "FieldManagerConflict".into(),
            message: format!("conflict with {}", all[*i].describe()),
            field: path_string(p),
        })
        .collect();
    let message = if let [(i, p)] = conflicts {
        format!("Apply failed with 1 conflict: conflict with {}: {}", all[*i].describe(), path_string(p))
    } else {
        let mut by_manager: Vec<(String, Vec<String>)> = Vec::new();
        for (i, p) in conflicts {
            let m = all[*i].describe();
            match by_manager.iter_mut().find(|(x, _)| *x == m) {
                Some((_, paths)) => paths.push(path_string(p)),
                None => by_manager.push((m, vec![path_string(p)])),
            }
        }
        by_manager.sort();
        let mut lines = Vec::new();
        for (m, paths) in by_manager {
            lines.push(format!("conflicts with {m}:"));
            lines.extend(paths.into_iter().map(|p| format!("- {p}")));
        }
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    };
    let mut e = ApiError::new(409, "Conflict", message);
    e.details = Some(Details { causes, ..Default::default() });
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployments() -> ResourceDef {
        crate::resources::Registry::default()
            .in_group_version("apps", "v1")
            .find(|d| d.kind == "Deployment")
            .cloned()
            .expect("deployments are served")
    }

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                    {"name": "nginx", "image": image, "ports": [{"containerPort": 80}]}
                ]}}
            }
        })
    }

    fn skeleton() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"}})
    }

    fn req<'a>(def: &'a ResourceDef, manager: &'a str, force: bool) -> ApplyRequest<'a> {
        ApplyRequest { manager, def, subresource: None, force }
    }

    #[test]
    fn fields_v1_round_trips_with_item_markers() {
        let v = json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}
        }}}}});
        let set = FieldSet::from_fields_v1(&v);
        assert_eq!(set.0.len(), 3);
        assert_eq!(set.to_fields_v1(), v);
    }

    #[test]
    fn applied_fields_key_containers_by_name_and_ports_by_port_and_protocol() {
        let def = deployments();
        let obj = apply(&skeleton(), &deployment(2, "nginx:1.25"), req(&def, "kubectl", false)).unwrap();
        let mf = &obj["metadata"]["managedFields"][0];
        assert_eq!(mf["manager"], "kubectl");
        assert_eq!(mf["operation"], "Apply");
        let c = &mf["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"nginx\"}"];
        assert!(c["."].is_object() && c["f:image"].is_object());
        assert!(c["f:ports"]["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"]["f:containerPort"].is_object());
        assert_eq!(mf["fieldsV1"]["f:spec"]["f:selector"], json!({}), "selectors are atomic");
        assert_eq!(mf["fieldsV1"]["f:metadata"]["f:labels"]["f:app"], json!({}));
        assert!(mf["fieldsV1"]["f:metadata"].get("f:name").is_none());
    }

    #[test]
    fn apply_conflicts_with_an_update_manager_that_changed_the_field() {
        let def = deployments();
        let applied = deployment(2, "nginx:1.25");
        let live = apply(&skeleton(), &applied, req(&def, "kubectl", false)).unwrap();
        // kubectl scale changes replicas through /scale: it now owns spec.replicas.
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(5);
        record_update(&def, Some("scale"), "kubectl", Some(&live), &mut scaled);
        let owners: Vec<Entry> = entries(&scaled);
        assert_eq!(owners.len(), 2);
        assert!(!owners[0].fields.contains(&vec!["f:spec".into(), "f:replicas".into()]));
        assert!(owners[1].fields.contains(&vec!["f:spec".into(), "f:replicas".into()]));

        let err = apply(&scaled, &applied, req(&def, "kubectl", false)).unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(err.reason, "Conflict");
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"kubectl\" with subresource \"scale\" using apps/v1: .spec.replicas"
        );
        let causes = &err.details.as_ref().unwrap().causes;
        assert_eq!(causes[0].reason, "FieldManagerConflict");
        assert_eq!(causes[0].field, ".spec.replicas");

        // Applying the live value is no conflict (shared ownership); force takes the field over.
        assert!(apply(&scaled, &deployment(5, "nginx:1.25"), req(&def, "kubectl", false)).is_ok());
        let forced = apply(&scaled, &applied, req(&def, "kubectl", true)).unwrap();
        assert_eq!(forced["spec"]["replicas"], 2);
        assert_eq!(entries(&forced).len(), 1, "the scale entry lost its only field");
    }

    #[test]
    fn two_appliers_conflict_on_a_container_image_with_a_keyed_path() {
        let def = deployments();
        let live = apply(&skeleton(), &deployment(2, "nginx:1.25"), req(&def, "a", false)).unwrap();
        let err = apply(&live, &deployment(2, "nginx:1.27"), req(&def, "b", false)).unwrap_err();
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"a\": .spec.template.spec.containers[name=\"nginx\"].image"
        );
    }

    #[test]
    fn fields_dropped_from_the_applied_config_are_removed_unless_owned_elsewhere() {
        let def = deployments();
        let mut first = deployment(2, "nginx:1.25");
        first["metadata"]["labels"]["tier"] = json!("front");
        first["metadata"]["annotations"] = json!({"note": "x"});
        let live = apply(&skeleton(), &first, req(&def, "kubectl", false)).unwrap();
        // Another manager also sets the annotation to the same value: shared ownership.
        let mut other =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"annotations": {"note": "x"}}});
        other["metadata"]["name"] = json!("web");
        let live = apply(&live, &other, req(&def, "other", false)).unwrap();
        let second = deployment(2, "nginx:1.25");
        let out = apply(&live, &second, req(&def, "kubectl", false)).unwrap();
        assert!(out["metadata"]["labels"].get("tier").is_none(), "tier was only kubectl's");
        assert_eq!(out["metadata"]["annotations"]["note"], "x", "note is still other's");
    }

    #[test]
    fn containers_merge_by_name_and_removed_containers_go() {
        let def = deployments();
        let mut two = deployment(1, "nginx:1.25");
        two["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar", "image": "busybox"}));
        let live = apply(&skeleton(), &two, req(&def, "kubectl", false)).unwrap();
        let out = apply(&live, &deployment(1, "nginx:1.26"), req(&def, "kubectl", false)).unwrap();
        let containers = out["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0]["image"], "nginx:1.26");
        assert_eq!(containers[0]["ports"][0]["containerPort"], 80);
    }

    #[test]
    fn an_update_records_changed_fields_and_takes_them_from_appliers() {
        let def = deployments();
        let live = apply(&skeleton(), &deployment(2, "nginx:1.25"), req(&def, "kubectl", false)).unwrap();
        let mut edited = live.clone();
        edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
        record_update(&def, None, "kubectl-edit", Some(&live), &mut edited);
        let all = entries(&edited);
        let image: FieldPath = vec![
            "f:spec".into(),
            "f:template".into(),
            "f:spec".into(),
            "f:containers".into(),
            "k:{\"name\":\"nginx\"}".into(),
            "f:image".into(),
        ];
        assert!(!all[0].fields.contains(&image));
        assert_eq!(all[1].manager, "kubectl-edit");
        assert_eq!(all[1].fields.0.iter().collect::<Vec<_>>(), vec![&image]);
        // An update that changes nothing leaves managedFields alone.
        let mut same = edited.clone();
        record_update(&def, None, "someone", Some(&edited), &mut same);
        assert_eq!(same, edited);
    }

    #[test]
    fn paths_print_as_kubernetes_prints_them() {
        let p: FieldPath = vec!["f:spec".into(), "f:ports".into(), "k:{\"port\":80,\"protocol\":\"TCP\"}".into()];
        assert_eq!(path_string(&p), ".spec.ports[port=80,protocol=\"TCP\"]");
        assert_eq!(
            path_string(&["f:metadata".into(), "f:finalizers".into(), "v:\"x\"".into()]),
            ".metadata.finalizers[=\"x\"]"
        );
    }

    #[test]
    fn manager_defaults_to_the_user_agent_product() {
        assert_eq!(
            manager_for_update(None, Some("kubectl/v1.33.0 (linux/amd64) kubernetes/abc")).as_deref(),
            Some("kubectl")
        );
        assert_eq!(manager_for_update(Some("x"), Some("kubectl/v1")).as_deref(), Some("x"));
        assert_eq!(manager_for_update(None, None), None);
    }
}
