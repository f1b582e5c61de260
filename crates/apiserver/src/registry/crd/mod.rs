//! Serving custom resources from CustomResourceDefinitions (apiextensions.k8s.io/v1).
//!
//! The counterpart of kube-apiserver's apiextensions-apiserver
//! (<https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/>):
//!
//! - [`establishing`] is the CRD controller kube-apiserver itself runs (apiextensions-apiserver's
//!   establishing, naming/status and finalizer controllers): it registers one [`ResourceDef`]
//!   per served version, sets `status.acceptedNames` and the `NamesAccepted`/`Established`
//!   conditions, and on deletion removes every object of the CRD before dropping the
//!   `customresourcecleanup.apiextensions.k8s.io` finalizer the delete added.
//! - [`CustomResource`] carries what the generic registry needs per version: the structural
//!   schema for pruning, defaulting and validation ([`CustomResource::prune_and_default`],
//!   [`CustomResource::validate`]: types, bounds, `pattern`, `format`, and the CEL rules of
//!   [`rules`]), `additionalPrinterColumns` for Tables
//!   ([`CustomResource::table_columns`]), and the scale subresource's paths.
//!
//! Objects are stored under `/registry/<group>/<plural>/` like Kubernetes; every version is
//! served from the same objects with `apiVersion` rewritten (conversion strategy `None`), or
//! converted by the CRD's webhook ([`conversion`], strategy `Webhook`).

pub mod conversion;
pub mod establishing;
pub mod rules;

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};

use serde_json::{Value, json};
use skiff_apimachinery::ApiError;
use skiff_apimachinery::status::Cause;

pub use establishing::run;

use crate::resources::{ALL_VERBS, CustomResource, PrinterColumn, ResourceDef, ScalePaths, Subresource};
use crate::storage::watchcache::WatchCache;
use crate::util::meta_str;

/// The finalizer a CRD delete adds; the controller removes it once the CRD's objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Interns a string for the `&'static str` fields of a [`ResourceDef`]; each distinct string is
/// leaked once.
pub fn intern(s: &str) -> &'static str {
    static STRINGS: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Default::default);
    let Ok(mut set) = STRINGS.lock() else { return Box::leak(s.to_string().into_boxed_str()) };
    if let Some(found) = set.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

fn intern_list(v: Option<&Value>) -> &'static [&'static str] {
    let items: Vec<&'static str> = v
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(intern).collect())
        .unwrap_or_default();
    if items.is_empty() { &[] } else { Box::leak(items.into_boxed_slice()) }
}

// ---------------------------------------------------------------------------------------------
// JSONPath (the subset printer columns and scale paths use).

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter(String, String),
}

fn parse_path(path: &str) -> Option<Vec<Step>> {
    let p = path.trim();
    let p = p.strip_prefix('{').and_then(|x| x.strip_suffix('}')).unwrap_or(p);
    let p = p.strip_prefix('$').unwrap_or(p);
    let b = p.as_bytes();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'.' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'.' && b[j] != b'[' {
                    j += 1;
                }
                if j > start {
                    steps.push(Step::Field(p[start..j].to_string()));
                }
                i = j;
            }
            b'[' => {
                let close = p[i..].find(']')? + i;
                let inner = p[i + 1..close].trim();
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Ok(n) = inner.parse::<usize>() {
                    steps.push(Step::Index(n));
                } else if let Some(f) = inner.strip_prefix("?(@.").and_then(|x| x.strip_suffix(')')) {
                    let (k, v) = f.split_once("==")?;
                    let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
                    steps.push(Step::Filter(k.trim().to_string(), v.to_string()));
                } else {
                    steps.push(Step::Field(inner.trim_matches(|c| c == '"' || c == '\'').to_string()));
                }
                i = close + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// Evaluates a simple JSONPath (`.a.b`, `[0]`, `[*]`, `[?(@.type=="Ready")]`) against `obj`:
/// every match, in order.
pub fn json_path(obj: &Value, path: &str) -> Vec<Value> {
    let Some(steps) = parse_path(path) else { return Vec::new() };
    let mut cur = vec![obj.clone()];
    for step in &steps {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(f) => {
                    if let Some(x) = v.get(f) {
                        next.push(x.clone());
                    }
                }
                Step::Index(n) => {
                    if let Some(x) = v.get(*n) {
                        next.push(x.clone());
                    }
                }
                Step::All => match v {
                    Value::Array(a) => next.extend(a),
                    Value::Object(m) => next.extend(m.into_iter().map(|(_, x)| x)),
                    _ => {}
                },
                Step::Filter(k, want) => {
                    if let Value::Array(a) = v {
                        for x in a {
                            let matches = match x.get(k) {
                                Some(Value::String(s)) => s == want,
                                Some(other) if !other.is_null() => {
                                    serde_json::from_str::<Value>(want).ok().as_ref() == Some(other)
                                }
                                _ => false,
                            };
                            if matches {
                                next.push(x);
                            }
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

/// Sets the field at a dotted path (`.spec.replicas`), creating objects on the way.
pub fn set_path(obj: &mut Value, path: &str, value: Value) {
    let fields: Vec<&str> = path.trim_start_matches('.').split('.').filter(|s| !s.is_empty()).collect();
    let keys: Vec<&str> = fields.to_vec();
    crate::util::set_in(obj, &keys, value);
}

// ---------------------------------------------------------------------------------------------
// Schema: pruning, defaulting, validation.

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn truthy(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Removes fields the schema does not know (recording their paths in `unknown`) and fills
/// `default`s, as the apiextensions-apiserver's structural pruning and defaulting do.
fn prune(v: &mut Value, schema: &Value, path: &str, unknown: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let preserve = truthy(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = truthy(schema, "x-kubernetes-embedded-resource");
            if let Some(props) = props {
                for (k, s) in props {
                    if !map.contains_key(k)
                        && let Some(d) = s.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                }
            }
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let p = join(path, &k);
                if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(s) = props.and_then(|p| p.get(&k)) {
                    if let Some(x) = map.get_mut(&k) {
                        prune(x, s, &p, unknown);
                    }
                } else if let Some(s) = additional.filter(|a| a.is_object()) {
                    if let Some(x) = map.get_mut(&k) {
                        prune(x, s, &p, unknown);
                    }
                } else if !preserve && additional.and_then(Value::as_bool) != Some(true) {
                    map.remove(&k);
                    unknown.push(p);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, x) in items.iter_mut().enumerate() {
                    prune(x, s, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

fn invalid(causes: &mut Vec<Cause>, path: &str, value: &Value, detail: String) {
    let shown = match value {
        Value::Object(_) => "\"object\"".to_string(),
        Value::Array(_) => "\"array\"".to_string(),
        other => other.to_string(),
    };
    causes.push(Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {shown}: {detail}"),
        field: path.to_string(),
    });
}

fn check(v: &Value, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    if v.is_null() {
        if !truthy(schema, "nullable") && schema.get("type").is_some() {
            invalid(
                causes,
                path,
                v,
                format!("{path} in body must be of type {}: \"null\"", schema["type"].as_str().unwrap_or("")),
            );
        }
        return;
    }
    let int_or_string = truthy(schema, "x-kubernetes-int-or-string");
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let got = type_name(v);
        let ok = got == want || (want == "number" && got == "integer") || (int_or_string && got == "string");
        if !ok {
            invalid(causes, path, v, format!("{path} in body must be of type {want}: \"{got}\""));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: {v}: supported values: {}", list.join(", ")),
            field: path.to_string(),
        });
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            invalid(causes, path, v, format!("{path} in body should be greater than or equal to {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            invalid(causes, path, v, format!("{path} in body should be less than or equal to {max}"));
        }
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            invalid(causes, path, v, format!("{path} in body should be at least {min} chars long"));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            causes.push(Cause {
                reason: "FieldValueTooLong".into(),
                message: format!("Too long: may not be more than {max} bytes"),
                field: path.to_string(),
            });
        }
        rules::string_checks(s, schema, path, causes);
    }
    match v {
        Value::Object(map) => {
            for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
                if let Some(r) = r.as_str()
                    && !map.contains_key(r)
                {
                    causes.push(Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value".into(),
                        field: join(path, r),
                    });
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, x) in map {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    check(x, s, &join(path, k), causes);
                } else if let Some(s) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                    check(x, s, &join(path, k), causes);
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooMany".into(),
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                    field: path.to_string(),
                });
            }
            if let Some(s) = schema.get("items") {
                for (i, x) in items.iter().enumerate() {
                    check(x, s, &format!("{path}[{i}]"), causes);
                }
            }
        }
        _ => {}
    }
}

impl CustomResource {
    /// The schema pruning, defaulting and validation use: the storage version's for a CRD with a
    /// conversion webhook (objects reach them already converted to it), else this version's.
    pub fn effective_schema(&self) -> Option<&Value> {
        match &self.webhook {
            Some(w) => w.storage_schema.as_ref(),
            None => self.schema.as_ref(),
        }
    }

    /// Prunes unknown fields (unless `preserveUnknownFields`) and applies schema defaults.
    /// Returns the paths of the pruned fields (for `fieldValidation` Strict/Warn).
    pub fn prune_and_default(&self, obj: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        let Some(schema) = self.effective_schema() else { return unknown };
        if self.preserve_unknown_fields {
            return unknown;
        }
        let Value::Object(map) = obj else { return unknown };
        let props = schema.get("properties").and_then(Value::as_object);
        let preserve = truthy(schema, "x-kubernetes-preserve-unknown-fields");
        let keys: Vec<String> = map.keys().cloned().collect();
        for k in keys {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            match props.and_then(|p| p.get(&k)) {
                Some(s) => {
                    if let Some(x) = map.get_mut(&k) {
                        prune(x, s, &k, &mut unknown);
                    }
                }
                None if preserve => {}
                None => {
                    map.remove(&k);
                    unknown.push(k);
                }
            }
        }
        if let Some(props) = props {
            for (k, s) in props {
                if !map.contains_key(k)
                    && let Some(d) = s.get("default")
                {
                    map.insert(k.clone(), d.clone());
                }
            }
        }
        unknown
    }

    /// Validates an object against the schema (type, required, enum, bounds, pattern, format,
    /// then the `x-kubernetes-validations` rules, `old` binding `oldSelf`) plus ObjectMeta: the
    /// causes of a 422.
    pub fn validate(&self, def: &ResourceDef, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = skiff_apimachinery::validation::validate_metadata(obj, def.namespaced, old);
        if let Some(schema) = self.effective_schema() {
            check(obj, schema, "", &mut causes);
            if rules::has_rules(schema) {
                rules::validate_unless_blocked(schema, obj, old, &mut causes);
            }
        }
        causes
    }

    /// Table column definitions: NAME plus the printer columns, or NAME and AGE when the CRD
    /// declares none.
    pub fn table_columns(&self) -> Vec<Value> {
        let name = json!({"name": "Name", "type": "string", "format": "name", "priority": 0,
            "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"});
        let mut cols = vec![name];
        for c in self.effective_columns() {
            cols.push(json!({"name": c.name, "type": c.type_, "format": c.format,
                "description": c.description, "priority": c.priority}));
        }
        cols
    }

    fn effective_columns(&self) -> Vec<PrinterColumn> {
        if !self.printer_columns.is_empty() {
            return self.printer_columns.clone();
        }
        vec![PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp".into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }]
    }

    /// The cells of one row, matching [`CustomResource::table_columns`]. `date` columns show
    /// the age, as Kubernetes' table convertor does.
    pub fn table_cells(&self, obj: &Value, now: std::time::SystemTime) -> Vec<Value> {
        let mut cells = vec![json!(meta_str(obj, "name"))];
        for c in self.effective_columns() {
            let found = json_path(obj, &c.json_path);
            let cell = match found.first() {
                None => Value::Null,
                Some(v) if c.type_ == "date" => {
                    json!(skiff_apimachinery::table::age_since(Some(v), now))
                }
                Some(v) if found.len() == 1 => match (c.type_.as_str(), v) {
                    ("string", Value::String(_)) | ("integer" | "number", Value::Number(_)) => v.clone(),
                    ("boolean", Value::Bool(_)) => v.clone(),
                    ("string", Value::Object(_) | Value::Array(_)) => json!(v.to_string()),
                    ("string", other) => json!(other.to_string()),
                    (_, other) => other.clone(),
                },
                Some(_) => {
                    let parts: Vec<String> =
                        found.iter().map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).collect();
                    json!(parts.join(","))
                }
            };
            cells.push(cell);
        }
        cells
    }
}

// ---------------------------------------------------------------------------------------------
// From a CRD to resource definitions.

/// The resource definitions a CRD's served versions get (empty when it names nothing usable),
/// with no way to reach a conversion webhook's Service (see [`defs_with_services`]).
pub fn defs_for(crd: &Value, cache: &Arc<WatchCache>, storage: &'static str) -> Vec<ResourceDef> {
    defs_with_services(crd, cache, storage, Arc::new(skiff_admission::webhook::NoServices))
}

/// [`defs_for`], resolving a conversion webhook's `clientConfig.service` with `services`.
pub fn defs_with_services(
    crd: &Value,
    cache: &Arc<WatchCache>,
    storage: &'static str,
    services: Arc<dyn skiff_admission::webhook::ServiceResolver>,
) -> Vec<ResourceDef> {
    let webhook = conversion::WebhookConverter::from_crd(crd, services);
    let spec = &crd["spec"];
    let names = &spec["names"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = names["plural"].as_str().unwrap_or("");
    let kind = names["kind"].as_str().unwrap_or("");
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Vec::new();
    }
    let singular = names["singular"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let singular = singular.unwrap_or_else(|| kind.to_ascii_lowercase());
    let crd_name = meta_str(crd, "name").to_string();
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or("")
        .to_string();
    let preserve = spec["preserveUnknownFields"].as_bool().unwrap_or(false);
    let mut out = Vec::new();
    for v in &versions {
        if v["served"].as_bool() != Some(true) {
            continue;
        }
        let Some(version) = v["name"].as_str() else { continue };
        let subs = &v["subresources"];
        let mut subresources = Vec::new();
        let scale = subs.get("scale").filter(|s| s.is_object()).map(|s| ScalePaths {
            spec_replicas: s["specReplicasPath"].as_str().unwrap_or(".spec.replicas").to_string(),
            status_replicas: s["statusReplicasPath"].as_str().unwrap_or(".status.replicas").to_string(),
            label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
        });
        if subs.get("status").is_some_and(Value::is_object) {
            subresources.push(Subresource {
                name: "status",
                group: "",
                version: "",
                kind: intern(kind),
                verbs: &["get", "patch", "update"],
            });
        }
        if scale.is_some() {
            subresources.push(Subresource {
                name: "scale",
                group: "autoscaling",
                version: "v1",
                kind: "Scale",
                verbs: &["get", "patch", "update"],
            });
        }
        let printer_columns = v["additionalPrinterColumns"]
            .as_array()
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: c["name"].as_str().unwrap_or("").to_string(),
                        type_: c["type"].as_str().unwrap_or("string").to_string(),
                        format: c["format"].as_str().unwrap_or("").to_string(),
                        description: c["description"].as_str().unwrap_or("").to_string(),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        json_path: c["jsonPath"].as_str().unwrap_or("").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let custom: &'static CustomResource = Box::leak(Box::new(CustomResource {
            crd_name: crd_name.clone(),
            storage_version: storage_version.clone(),
            schema: v["schema"].get("openAPIV3Schema").cloned(),
            preserve_unknown_fields: preserve,
            printer_columns,
            scale,
            cache: cache.clone(),
            webhook: webhook.clone(),
        }));
        out.push(ResourceDef {
            group: intern(group),
            version: intern(version),
            resource: intern(plural),
            singular: intern(&singular),
            kind: intern(kind),
            namespaced: spec["scope"].as_str() != Some("Cluster"),
            short_names: intern_list(names.get("shortNames")),
            categories: intern_list(names.get("categories")),
            verbs: ALL_VERBS,
            subresources: if subresources.is_empty() { &[] } else { Box::leak(subresources.into_boxed_slice()) },
            storage,
            generation: true,
            create_on_update: false,
            custom: Some(custom),
        });
    }
    out
}

/// The store prefix of a CRD's objects: `/registry/<group>/<plural>/`, as in Kubernetes.
pub fn storage_prefix(group: &str, plural: &str) -> String {
    format!("/registry/{group}/{plural}/")
}

/// Converts a stored custom object to the version `def` serves: by the CRD's webhook when it
/// has one and the object is stored at another version, else by rewriting `apiVersion`.
///
/// # Errors
/// The webhook's failure (500).
pub fn to_version(def: &ResourceDef, obj: Value) -> Result<Value, ApiError> {
    convert_to(def, obj, def.api_version())
}

/// Converts an object of `def`'s version to the storage version (as [`to_version`]).
///
/// # Errors
/// The webhook's failure (500).
pub fn to_storage(def: &ResourceDef, obj: Value) -> Result<Value, ApiError> {
    match def.custom {
        Some(cr) if !cr.storage_version.is_empty() => {
            convert_to(def, obj, format!("{}/{}", def.group, cr.storage_version))
        }
        _ => Ok(obj),
    }
}

fn convert_to(def: &ResourceDef, mut obj: Value, desired: String) -> Result<Value, ApiError> {
    if obj["apiVersion"] == desired.as_str() {
        return Ok(obj);
    }
    if let Some(webhook) = def.custom.and_then(|c| c.webhook.as_ref()) {
        return Ok(webhook.convert(vec![obj], &desired)?.pop().unwrap_or_default());
    }
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), Value::String(desired));
    }
    Ok(obj)
}

/// The autoscaling/v1 Scale of a custom object.
pub fn scale_of(def: &ResourceDef, paths: &ScalePaths, obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let spec = json_path(obj, &paths.spec_replicas).first().and_then(Value::as_i64).unwrap_or(0);
    let status = json_path(obj, &paths.status_replicas).first().and_then(Value::as_i64).unwrap_or(0);
    let mut scale = json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": spec},
        "status": {"replicas": status},
    });
    if let Some(p) = &paths.label_selector
        && let Some(sel) = json_path(obj, p).first().and_then(Value::as_str)
    {
        scale["status"]["selector"] = json!(sel);
    }
    if !def.namespaced
        && let Some(m) = scale["metadata"].as_object_mut()
    {
        m.remove("namespace");
    }
    scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_resources_come_and_go_without_touching_builtins() {
        let r = crate::resources::Registry::default();
        let crd = serde_json::json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster", "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1beta1", "served": true, "storage": false}, {"name": "v1", "served": true, "storage": true}]},
        });
        let cache = crate::storage::watchcache::WatchCache::new("/registry/example.com/widgets/".into(), 4, 4);
        r.set_custom("widgets.example.com", defs_for(&crd, &cache, "example.com/widgets"));
        let w = r.get("example.com", "v1", "widgets").expect("served");
        assert!(!w.namespaced);
        assert_eq!(w.key("", "a"), "/registry/example.com/widgets/a");
        assert!(r.by_kind("example.com", "v1beta1", "Widget").is_some());
        let groups = r.groups();
        let (_, versions) = groups.iter().find(|(g, _)| *g == "example.com").unwrap();
        assert_eq!(versions, &vec!["v1", "v1beta1"]);
        assert_eq!(r.in_group_version("example.com", "v1").count(), 1);
        r.set_custom("widgets.example.com", Vec::new());
        assert!(r.get("example.com", "v1", "widgets").is_none());
        assert!(r.get("apps", "v1", "statefulsets").is_some());
    }

    fn widget_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                        {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1},
                    ],
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "required": ["size"], "properties": {
                            "size": {"type": "integer", "minimum": 0},
                            "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        }},
                        "status": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    }}},
                }],
            },
        })
    }

    fn widget_def() -> ResourceDef {
        let cache = WatchCache::new("/registry/example.com/widgets/".into(), 16, 16);
        defs_for(&widget_crd(), &cache, "example.com/widgets").remove(0)
    }

    #[test]
    fn a_crd_version_becomes_a_resource_with_its_names_and_subresources() {
        let d = widget_def();
        assert_eq!(
            (d.group, d.version, d.resource, d.kind, d.singular),
            ("example.com", "v1", "widgets", "Widget", "widget")
        );
        assert_eq!(d.short_names, &["wd"]);
        assert!(d.has_status());
        assert!(d.subresource("scale").is_some());
        assert_eq!(d.key("ns", "a"), "/registry/example.com/widgets/ns/a");
    }

    #[test]
    fn unknown_fields_are_pruned_and_defaults_filled() {
        let d = widget_def();
        let cr = d.custom.unwrap();
        let mut obj = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 1, "bogus": true, "extra": {"anything": 1}}, "top": 1});
        let unknown = cr.prune_and_default(&mut obj);
        assert_eq!(unknown, vec!["spec.bogus", "top"]);
        assert_eq!(obj["spec"]["color"], "red");
        assert_eq!(obj["spec"]["extra"]["anything"], 1);
        assert!(obj.get("top").is_none());
    }

    #[test]
    fn wrong_types_and_missing_required_fields_are_invalid() {
        let d = widget_def();
        let cr = d.custom.unwrap();
        let obj = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"},
            "spec": {"color": "green"}});
        let causes = cr.validate(&d, &obj, None);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert!(fields.contains(&"spec.size"), "{causes:?}");
        assert!(fields.contains(&"spec.color"), "{causes:?}");
        let obj = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"},
            "spec": {"size": "three"}});
        let causes = cr.validate(&d, &obj, None);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(causes[0].message.contains("must be of type integer"));
    }

    #[test]
    fn printer_columns_read_json_paths() {
        let d = widget_def();
        let cr = d.custom.unwrap();
        let obj = json!({"metadata": {"name": "w"}, "spec": {"size": 3, "color": "blue"}});
        let cols = cr.table_columns();
        assert_eq!(cols.len(), 3);
        assert_eq!(cols[2]["priority"], 1);
        assert_eq!(cr.table_cells(&obj, std::time::SystemTime::now()), vec![json!("w"), json!(3), json!("blue")]);
    }

    #[test]
    fn json_path_filters_select_conditions() {
        let obj =
            json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(json_path(&obj, r#".status.conditions[?(@.type=="Ready")].status"#), vec![json!("True")]);
        assert_eq!(json_path(&obj, ".status.conditions[0].type"), vec![json!("A")]);
        assert!(json_path(&obj, ".spec.missing").is_empty());
    }

    #[test]
    fn status_is_established_with_defaulted_accepted_names() {
        use super::establishing::desired_status;
        let s = desired_status(&widget_crd(), None);
        assert_eq!(s["acceptedNames"]["singular"], "widget");
        assert_eq!(s["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(s["storedVersions"], json!(["v1"]));
        let est = s["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Established").unwrap();
        assert_eq!(est["status"], "True");
    }

    #[test]
    fn scale_reads_the_declared_paths() {
        let d = widget_def();
        let paths = d.custom.unwrap().scale.clone().unwrap();
        let obj =
            json!({"metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 4}, "status": {"size": 2}});
        let s = scale_of(&d, &paths, &obj);
        assert_eq!(s["spec"]["replicas"], 4);
        assert_eq!(s["status"]["replicas"], 2);
    }
}
