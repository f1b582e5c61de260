//! CRD validation rules (`x-kubernetes-validations`,
//! <https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules>),
//! as apiextensions-apiserver's `schema/cel` validator runs them, and their checks at CRD
//! create and update.
//!
//! On a write of a custom resource, every rule of every schema node with a value is evaluated
//! with `self` bound to that value; a rule that reads `oldSelf` (a transition rule) runs only on
//! update and only where the old value correlates (object properties and map keys by name,
//! `x-kubernetes-list-type: map` items by their keys), unless `optionalOldSelf` binds `oldSelf`
//! as an optional. A false rule is a 422 cause at the node's path (or its `fieldPath`), with the
//! rule's `reason`, and `messageExpression`, `message` or `failed rule: <rule>` as its detail.
//! The costs of one write share [`skiff_cel::cost::RUNTIME_CEL_COST_BUDGET`]; each evaluation
//! is bounded by [`skiff_cel::cost::PER_CALL_LIMIT`] (see [`skiff_cel::cost`]).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde_json::Value;
use skiff_apimachinery::status::Cause;
use skiff_cel::cost::{PER_CALL_LIMIT, RUNTIME_CEL_COST_BUDGET, STATIC_ESTIMATED_COST_LIMIT};
use skiff_cel::{Activation, Compiled, EvalError};

const VARS: &[&str] = &["self", "oldSelf"];

type CompileResult = Arc<Result<Compiled, String>>;

/// Compiled rules by source text: a CRD's rules are compiled once and shared by its versions
/// and by every write (bounded: a CRD churn must not grow it forever).
static COMPILED: LazyLock<Mutex<HashMap<String, CompileResult>>> = LazyLock::new(Default::default);

fn compiled(source: &str) -> CompileResult {
    let mut cache = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = cache.get(source) {
        return c.clone();
    }
    let c = Arc::new(skiff_cel::compile(source, VARS).map_err(|e| e.0));
    if cache.len() >= 4096 {
        cache.clear();
    }
    cache.insert(source.to_string(), c.clone());
    c
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn shown(v: &Value, schema: &Value) -> String {
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => "\"object\"".into(),
        Some("array") => "\"array\"".into(),
        _ => match v {
            Value::Object(_) => "\"object\"".into(),
            Value::Array(_) => "\"array\"".into(),
            other => other.to_string(),
        },
    }
}

/// Runs the validation rules of `schema` over `obj` (`old` on update): the causes of a 422.
pub fn validate(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut budget = RUNTIME_CEL_COST_BUDGET;
    walk(schema, obj, old, "", &mut causes, &mut budget);
    causes
}

/// Whether any node of `schema` has rules (so a write of a CRD without any pays nothing).
pub fn has_rules(schema: &Value) -> bool {
    if schema.get("x-kubernetes-validations").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        return true;
    }
    schema.get("properties").and_then(Value::as_object).is_some_and(|p| p.values().any(has_rules))
        || schema.get("additionalProperties").is_some_and(has_rules)
        || schema.get("items").is_some_and(has_rules)
}

/// Returns false once the budget is spent (no further rules run).
fn walk(schema: &Value, v: &Value, old: Option<&Value>, path: &str, causes: &mut Vec<Cause>, budget: &mut u64) -> bool {
    if v.is_null() {
        return true;
    }
    if let Some(rules) = schema.get("x-kubernetes-validations").and_then(Value::as_array)
        && !run_rules(rules, schema, v, old, path, causes, budget)
    {
        return false;
    }
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let old_map = old.and_then(Value::as_object);
            for (k, x) in map {
                let sub = props.and_then(|p| p.get(k)).or(additional);
                let Some(sub) = sub else { continue };
                if !has_rules(sub) {
                    continue;
                }
                let child =
                    if props.is_some_and(|p| p.contains_key(k)) { join(path, k) } else { format!("{path}[{k}]") };
                if !walk(sub, x, old_map.and_then(|m| m.get(k)), &child, causes, budget) {
                    return false;
                }
            }
        }
        Value::Array(items) => {
            let Some(sub) = schema.get("items") else { return true };
            if !has_rules(sub) {
                return true;
            }
            let keys: Vec<&str> = if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
                schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            let old_items = old.and_then(Value::as_array);
            for (i, x) in items.iter().enumerate() {
                // Only map lists correlate items with the old list (by their keys).
                let old_x = if keys.is_empty() {
                    None
                } else {
                    old_items.and_then(|o| o.iter().find(|ox| keys.iter().all(|k| ox.get(k) == x.get(k))))
                };
                if !walk(sub, x, old_x, &format!("{path}[{i}]"), causes, budget) {
                    return false;
                }
            }
        }
        _ => {}
    }
    true
}

fn out_of_budget(path: &str, v: &Value, schema: &Value) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!(
            "Invalid value: {}: validation failed due to running out of cost budget, no further validation rules will be run",
            shown(v, schema)
        ),
        field: path.to_string(),
    }
}

fn run_rules(
    rules: &[Value],
    schema: &Value,
    v: &Value,
    old: Option<&Value>,
    path: &str,
    causes: &mut Vec<Cause>,
    budget: &mut u64,
) -> bool {
    let invalid = |detail: String| Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {}: {detail}", shown(v, schema)),
        field: path.to_string(),
    };
    for rule in rules {
        let source = rule["rule"].as_str().unwrap_or("").trim();
        if source.is_empty() {
            continue;
        }
        let message = rule["message"].as_str().map(str::trim).unwrap_or("");
        let error_string = if message.is_empty() { source } else { message };
        let c = compiled(source);
        let c = match &*c {
            Ok(c) => c,
            Err(e) => {
                causes.push(invalid(format!("rule compile error: {e}")));
                continue;
            }
        };
        let optional_old = rule["optionalOldSelf"].as_bool().unwrap_or(false);
        let uses_old = c.uses("oldSelf");
        if uses_old && old.is_none() && !optional_old {
            continue;
        }
        let mut act = Activation::new();
        act.bind("self", v);
        if optional_old {
            act.bind_optional("oldSelf", old);
        } else if let Some(o) = old {
            act.bind("oldSelf", o);
        }
        let cost = c.cost_bound(&act);
        if cost > *budget {
            causes.push(out_of_budget(path, v, schema));
            return false;
        }
        *budget -= cost;
        match c.eval_bool(&act, PER_CALL_LIMIT) {
            Ok(true) => {}
            Ok(false) => {
                let detail = message_expression(rule, &act)
                    .unwrap_or_else(|| if message.is_empty() { format!("failed rule: {source}") } else { message.to_string() });
                let field = match rule["fieldPath"].as_str().filter(|p| !p.is_empty()) {
                    Some(fp) => format!("{path}{}", normalize_field_path(fp)).trim_start_matches('.').to_string(),
                    None => path.to_string(),
                };
                let cause = match rule["reason"].as_str().unwrap_or("FieldValueInvalid") {
                    "FieldValueForbidden" => {
                        Cause { reason: "FieldValueForbidden".into(), message: format!("Forbidden: {detail}"), field }
                    }
                    "FieldValueRequired" => {
                        Cause { reason: "FieldValueRequired".into(), message: format!("Required value: {detail}"), field }
                    }
                    "FieldValueDuplicate" => Cause {
                        reason: "FieldValueDuplicate".into(),
                        message: format!("Duplicate value: {}", shown(v, schema)),
                        field,
                    },
                    _ => Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!("Invalid value: {}: {detail}", shown(v, schema)),
                        field,
                    },
                };
                causes.push(cause);
            }
            Err(EvalError::CostLimit(..)) => {
                causes.push(invalid(format!(
                    "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {error_string}"
                )));
                return false;
            }
            Err(EvalError::Runtime(e)) if e.starts_with("no such overload") => causes.push(invalid(format!(
                "'{e}': call arguments did not match a supported operator, function or macro signature for rule: {error_string}"
            ))),
            Err(EvalError::Runtime(e)) => causes.push(invalid(format!("{e} evaluating rule: {error_string}"))),
        }
    }
    true
}

/// A rule's `messageExpression` result, when it evaluates to a usable message (a failed one
/// falls back to `message`, as upstream does).
fn message_expression(rule: &Value, act: &Activation<'_>) -> Option<String> {
    let src = rule["messageExpression"].as_str().map(str::trim).filter(|s| !s.is_empty())?;
    let c = compiled(src);
    let c = c.as_ref().as_ref().ok()?;
    let s = c.eval_string(act, PER_CALL_LIMIT).ok()?;
    let s = s.trim();
    (!s.is_empty() && !s.contains('\n') && s.len() <= 5 * 1024).then(|| s.to_string())
}

/// `.spec.x` / `.spec['x']` → `.spec.x` (a rule's `fieldPath` under the node's path).
fn normalize_field_path(fp: &str) -> String {
    let mut out = String::new();
    let mut rest = fp;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("['") {
            let Some(end) = r.find("']") else { return fp.to_string() };
            out.push('.');
            out.push_str(&r[..end]);
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            out.push('.');
            out.push_str(&r[..end]);
            rest = &r[end..];
        } else {
            return fp.to_string();
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// At CRD create/update.

/// Go's `%#v` of an `apiextensions.ValidationRule`, the bad value upstream's messages show.
fn go_rule(rule: &Value) -> String {
    let s = |k: &str| serde_json::to_string(rule[k].as_str().unwrap_or("")).unwrap_or_default();
    let reason = match rule["reason"].as_str() {
        Some(r) => format!("(*apiextensions.FieldValueErrorReason)({r:?})"),
        None => "(*apiextensions.FieldValueErrorReason)(nil)".into(),
    };
    let optional = match rule["optionalOldSelf"].as_bool() {
        Some(b) => format!("(*bool)({b})"),
        None => "(*bool)(nil)".into(),
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath")
    )
}

/// cel-go's estimated-cost message (`getCostErrorMessage`).
fn cost_error_message(name: &str, cost: u64, limit: u64) -> String {
    let f = cost as f64 / limit as f64;
    let factor = if f > 100.0 {
        "more than 100x".to_string()
    } else if f < 1.5 {
        format!("{f:.6}x")
    } else {
        format!("{f:.1}x")
    };
    format!(
        "{name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// Elements a list or map without `maxItems`/`maxProperties` is assumed to hold: the 3 MiB
/// request limit over the smallest element (upstream estimates unbounded sizes the same way).
const UNBOUNDED_SIZE: u64 = 3 * 1024 * 1024 / 2;

/// The largest size of any list or map in `schema`'s subtree, for the static cost estimate.
fn largest_declared(schema: &Value) -> u64 {
    let own = match schema.get("type").and_then(Value::as_str) {
        Some("array") => schema.get("maxItems").and_then(Value::as_u64).unwrap_or(UNBOUNDED_SIZE),
        Some("object") if schema.get("additionalProperties").is_some_and(Value::is_object) => {
            schema.get("maxProperties").and_then(Value::as_u64).unwrap_or(UNBOUNDED_SIZE)
        }
        Some("object") => schema.get("properties").and_then(Value::as_object).map_or(0, |p| p.len() as u64),
        _ => 0,
    };
    let children = schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|p| p.values())
        .chain(schema.get("items"))
        .chain(schema.get("additionalProperties").filter(|a| a.is_object()))
        .map(largest_declared)
        .max()
        .unwrap_or(0);
    own.max(children)
}

const SUPPORTED_REASONS: [&str; 4] =
    ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"];

/// Checks the rules of a CRD's schemas (each version's `schema.openAPIV3Schema`): empty rules
/// and messages, compile errors of rules and message expressions, unsupported reasons, and
/// rules whose estimated cost exceeds [`STATIC_ESTIMATED_COST_LIMIT`], with upstream's
/// messages and paths.
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (i, v) in crd["spec"]["versions"].as_array().into_iter().flatten().enumerate() {
        if let Some(schema) = v["schema"].get("openAPIV3Schema") {
            let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
            check_schema(schema, &path, &mut causes);
        }
    }
    causes
}

fn check_schema(schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, s) in props {
            check_schema(s, &format!("{path}.properties[{k}]"), causes);
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        check_schema(items, &format!("{path}.items"), causes);
    }
    if let Some(a) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        check_schema(a, &format!("{path}.additionalProperties"), causes);
    }
    let Some(rules) = schema.get("x-kubernetes-validations").and_then(Value::as_array) else { return };
    let largest = largest_declared(schema);
    for (i, rule) in rules.iter().enumerate() {
        let at = |f: &str| format!("{path}.x-kubernetes-validations[{i}].{f}");
        let source = rule["rule"].as_str().unwrap_or("");
        let message = rule["message"].as_str().unwrap_or("");
        if source.trim().is_empty() {
            causes.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: rule is not specified".into(),
                field: at("rule"),
            });
            continue;
        }
        if !message.is_empty() && message.trim().is_empty() {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {}: message must be non-empty if specified", Value::from(message)),
                field: at("message"),
            });
        } else if message.trim().contains('\n') {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {}: message must not contain line breaks", Value::from(message)),
                field: at("message"),
            });
        } else if source.trim().contains('\n') && message.trim().is_empty() {
            causes.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: message must be specified if rule contains line breaks".into(),
                field: at("message"),
            });
        }
        if let Some(reason) = rule["reason"].as_str()
            && !SUPPORTED_REASONS.contains(&reason)
        {
            let supported: Vec<String> = SUPPORTED_REASONS.iter().map(|r| format!("{r:?}")).collect();
            causes.push(Cause {
                reason: "FieldValueNotSupported".into(),
                message: format!("Unsupported value: {reason:?}: supported values: {}", supported.join(", ")),
                field: at("reason"),
            });
        }
        match &*compiled(source.trim()) {
            Err(e) => causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {}: compilation failed: {e}", go_rule(rule)),
                field: at("rule"),
            }),
            Ok(c) => {
                let cost = c.static_cost(largest);
                if cost > STATIC_ESTIMATED_COST_LIMIT {
                    causes.push(Cause {
                        reason: "FieldValueForbidden".into(),
                        message: format!(
                            "Forbidden: {}",
                            cost_error_message("estimated rule cost", cost, STATIC_ESTIMATED_COST_LIMIT)
                        ),
                        field: at("rule"),
                    });
                }
                let transition = c.uses("oldSelf");
                if rule["optionalOldSelf"].as_bool() == Some(true) && !transition {
                    causes.push(Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!(
                            "Invalid value: {}: may not be set if rule does not use oldSelf",
                            go_rule(rule)
                        ),
                        field: at("optionalOldSelf"),
                    });
                }
            }
        }
        if let Some(me) = rule["messageExpression"].as_str() {
            if me.trim().is_empty() {
                causes.push(Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value: messageExpression must be non-empty if specified".into(),
                    field: at("messageExpression"),
                });
            } else if let Err(e) = &*compiled(me.trim()) {
                causes.push(Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!("Invalid value: {}: messageExpression compilation failed: {e}", go_rule(rule)),
                    field: at("messageExpression"),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas cannot be larger than maxReplicas"},
                {"rule": "self.replicas >= 0", "fieldPath": ".replicas", "reason": "FieldValueForbidden"},
                {"rule": "!has(oldSelf.name) || self.name == oldSelf.name", "message": "name is immutable"},
                {"rule": "self.size() < 10", "messageExpression": "'too many fields: ' + string(self.size())"},
            ],
            "properties": {
                "minReplicas": {"type": "integer"}, "maxReplicas": {"type": "integer"},
                "replicas": {"type": "integer"}, "name": {"type": "string"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                        "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "port is immutable"}]}},
            },
        }}})
    }

    #[test]
    fn a_false_rule_is_a_cause_with_its_message_at_the_node() {
        let obj = json!({"spec": {"minReplicas": 5, "maxReplicas": 1, "replicas": 1}});
        let causes = validate(&schema(), &obj, None);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec");
        assert_eq!(causes[0].message, "Invalid value: \"object\": minReplicas cannot be larger than maxReplicas");
        assert_eq!(causes[0].reason, "FieldValueInvalid");
    }

    #[test]
    fn reason_and_field_path_shape_the_cause() {
        let obj = json!({"spec": {"minReplicas": 1, "maxReplicas": 1, "replicas": -1}});
        let causes = validate(&schema(), &obj, None);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec.replicas");
        assert_eq!(causes[0].reason, "FieldValueForbidden");
        assert_eq!(causes[0].message, "Forbidden: failed rule: self.replicas >= 0");
    }

    #[test]
    fn transition_rules_run_only_on_update_against_the_correlated_old_value() {
        let old = json!({"spec": {"minReplicas": 1, "maxReplicas": 1, "replicas": 1, "name": "a",
            "ports": [{"name": "http", "port": 80}]}});
        let new = json!({"spec": {"minReplicas": 1, "maxReplicas": 1, "replicas": 1, "name": "b",
            "ports": [{"name": "https", "port": 443}, {"name": "http", "port": 8080}]}});
        assert!(validate(&schema(), &new, None).is_empty(), "no oldSelf on create");
        let causes = validate(&schema(), &new, Some(&old));
        let got: Vec<(&str, &str)> = causes.iter().map(|c| (c.field.as_str(), c.message.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("spec", "Invalid value: \"object\": name is immutable"),
                ("spec.ports[1]", "Invalid value: \"object\": port is immutable"),
            ]
        );
    }

    #[test]
    fn optional_old_self_binds_an_optional_on_create() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"v": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "oldSelf.hasValue() || self.v == 1", "optionalOldSelf": true, "message": "must start at 1"}]}}});
        let causes = validate(&schema, &json!({"spec": {"v": 2}}), None);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(validate(&schema, &json!({"spec": {"v": 2}}), Some(&json!({"spec": {"v": 1}}))).is_empty());
    }

    #[test]
    fn message_expression_results_replace_the_message() {
        let mut spec = serde_json::Map::new();
        for i in 0..12 {
            spec.insert(format!("f{i}"), json!(i));
        }
        spec.insert("minReplicas".into(), json!(1));
        spec.insert("maxReplicas".into(), json!(1));
        spec.insert("replicas".into(), json!(1));
        let causes = validate(&schema(), &json!({"spec": spec}), None);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].message, "Invalid value: \"object\": too many fields: 15");
    }

    #[test]
    fn a_runtime_error_names_the_rule() {
        let obj = json!({"spec": {"maxReplicas": 1}});
        let causes = validate(&schema(), &obj, None);
        assert!(
            causes.iter().any(|c| c.message
                == "Invalid value: \"object\": no such key: minReplicas evaluating rule: minReplicas cannot be larger than maxReplicas"),
            "{causes:?}"
        );
    }

    fn crd_with(rule: Value, extra: Value) -> Value {
        let mut spec = json!({"type": "object", "x-kubernetes-validations": [rule],
            "properties": {"items": {"type": "array", "items": {"type": "string"}}}});
        if let (Some(m), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                m.insert(k.clone(), v.clone());
            }
        }
        json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}}]}})
    }

    #[test]
    fn an_invalid_rule_is_refused_at_crd_create_with_upstreams_path_and_value() {
        let causes = validate_crd(&crd_with(json!({"rule": "self.x =="}), json!({})));
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(
            causes[0].field,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
        );
        assert!(
            causes[0].message.starts_with(
                "Invalid value: apiextensions.ValidationRule{Rule:\"self.x ==\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:"
            ),
            "{}",
            causes[0].message
        );
        let causes = validate_crd(&crd_with(json!({"rule": "other == 1"}), json!({})));
        assert!(causes[0].message.contains("undeclared reference to 'other'"), "{causes:?}");
        let causes = validate_crd(&crd_with(json!({"rule": "true", "reason": "Nope"}), json!({})));
        assert_eq!(causes[0].reason, "FieldValueNotSupported");
        let causes = validate_crd(&crd_with(json!({"rule": ""}), json!({})));
        assert_eq!(causes[0].message, "Required value: rule is not specified");
    }

    #[test]
    fn a_nested_comprehension_over_an_unbounded_list_is_over_budget_at_create() {
        let rule = json!({"rule": "self.items.all(x, self.items.all(y, x == y))"});
        let causes = validate_crd(&crd_with(rule.clone(), json!({})));
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].reason, "FieldValueForbidden");
        assert!(
            causes[0].message.starts_with("Forbidden: estimated rule cost exceeds budget by factor of more than 100x")
        );
        let bounded = json!({"properties": {"items": {"type": "array", "maxItems": 10, "items": {"type": "string"}}}});
        assert!(validate_crd(&crd_with(rule, bounded)).is_empty());
    }
}

// ---------------------------------------------------------------------------------------------
// `pattern` and `format` (kube-openapi's validators, with their messages).

/// Checks a string value against its schema's `pattern` and `format`, with kube-openapi's
/// messages (`spec.x in body should match '<pattern>'`, `spec.x in body must be of type
/// <format>: "<value>"`).
pub fn string_checks(s: &str, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let shown = Value::from(s).to_string();
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && skiff_cel::library::regex_matches(pattern, s) == Ok(false)
    {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {shown}: {path} in body should match '{pattern}'"),
            field: path.to_string(),
        });
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str)
        && !format_ok(format, s)
    {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {shown}: {path} in body must be of type {format}: {shown}"),
            field: path.to_string(),
        });
    }
}

fn all_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5 && parts.iter().zip([8, 4, 4, 4, 12]).all(|(p, n)| p.len() == n && all_hex(p))
}

fn is_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.trim_end_matches('.').split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && s[..4].bytes().all(|c| c.is_ascii_digit())
        && s[5..7].parse::<u32>().is_ok_and(|m| (1..=12).contains(&m))
        && s[8..10].parse::<u32>().is_ok_and(|d| (1..=31).contains(&d))
}

fn is_date_time(s: &str) -> bool {
    s.len() > 11 && is_date(&s[..10]) && matches!(s.as_bytes()[10], b'T' | b't' | b' ') && {
        let rest = &s[11..];
        let (time, zone) = match rest.find(['Z', 'z', '+', '-']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let hms: Vec<&str> = time.split('.').next().unwrap_or("").split(':').collect();
        hms.len() == 3
            && hms.iter().all(|p| p.len() == 2 && p.bytes().all(|c| c.is_ascii_digit()))
            && (zone.eq_ignore_ascii_case("z") || (zone.len() == 6 && zone.as_bytes()[3] == b':') || zone.is_empty())
    }
}

fn is_go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if n == 0 {
            return false;
        }
        rest = &rest[n..];
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h", "d", "w"].into_iter().find(|u| rest.starts_with(u));
        let Some(u) = unit else { return false };
        rest = &rest[u.len()..];
    }
    true
}

/// Whether `s` is of `format` (Kubernetes' supported formats; others are not checked, as
/// upstream ignores formats it does not know).
pub fn format_ok(format: &str, s: &str) -> bool {
    use base64::Engine as _;
    match format {
        "bsonobjectid" => s.len() == 24 && all_hex(s),
        "uri" => s.contains(':') && !s.starts_with(':') || s.starts_with('/'),
        "email" => s.split_once('@').is_some_and(|(l, d)| !l.is_empty() && is_hostname(d) && !l.contains(' ')),
        "hostname" => is_hostname(s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, len)| {
            ip.parse::<std::net::IpAddr>()
                .is_ok_and(|a| len.parse::<u8>().is_ok_and(|l| l <= if a.is_ipv4() { 32 } else { 128 }))
        }),
        "mac" => {
            let parts: Vec<&str> = s.split([':', '-']).collect();
            matches!(parts.len(), 6 | 8 | 20) && parts.iter().all(|p| p.len() == 2 && all_hex(p))
        }
        "uuid" => is_uuid(s),
        "uuid3" => is_uuid(s) && s.as_bytes()[14] == b'3',
        "uuid4" => is_uuid(s) && s.as_bytes()[14] == b'4',
        "uuid5" => is_uuid(s) && s.as_bytes()[14] == b'5',
        "hexcolor" => s.strip_prefix('#').is_some_and(|h| matches!(h.len(), 3 | 6) && all_hex(h)),
        "rgbcolor" => s
            .strip_prefix("rgb(")
            .and_then(|r| r.strip_suffix(')'))
            .is_some_and(|r| r.split(',').filter(|p| p.trim().parse::<u8>().is_ok()).count() == 3),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "date" => is_date(s),
        "date-time" | "datetime" => is_date_time(s),
        "duration" => is_go_duration(s),
        _ => true,
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn kubernetes_formats_accept_and_refuse_as_kube_openapi() {
        for (f, ok, bad) in [
            ("email", "a@example.com", "not-an-email"),
            ("hostname", "my-host.example", "-bad"),
            ("ipv4", "10.0.0.1", "10.0.0"),
            ("ipv6", "::1", "1.2.3.4"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("mac", "01:23:45:67:89:ab", "01:23"),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123"),
            ("date", "2024-02-29", "2024-13-01"),
            ("date-time", "2024-02-29T10:00:00Z", "2024-02-29"),
            ("duration", "1h30m", "1x"),
            ("byte", "aGVsbG8=", "!!"),
            ("hexcolor", "#fff", "fff"),
            ("bsonobjectid", "507f1f77bcf86cd799439011", "507f"),
        ] {
            assert!(format_ok(f, ok), "{f} {ok}");
            assert!(!format_ok(f, bad), "{f} {bad}");
        }
        assert!(format_ok("unknown-format", "anything"));
    }

    #[test]
    fn pattern_and_format_failures_use_kube_openapis_messages() {
        let mut causes = Vec::new();
        let schema = serde_json::json!({"type": "string", "pattern": "^[a-z]+$", "format": "email"});
        string_checks("ABC", &schema, "spec.name", &mut causes);
        assert_eq!(causes[0].message, "Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'");
        assert_eq!(causes[1].message, "Invalid value: \"ABC\": spec.name in body must be of type email: \"ABC\"");
    }
}

/// Runs the rules unless the schema errors already found make their values untrustworthy
/// (missing, mistyped or unsupported values: upstream's `hasBlockingErr`), in which case one
/// cause says so instead.
pub fn validate_unless_blocked(schema: &Value, obj: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let blocking = causes.iter().any(|c| {
        matches!(
            c.reason.as_str(),
            "FieldValueNotSupported"
                | "FieldValueRequired"
                | "FieldValueTooLong"
                | "FieldValueTooMany"
                | "FieldValueTypeInvalid"
        ) || ["string", "integer", "number", "boolean", "array", "object"]
            .iter()
            .any(|t| c.message.contains(&format!(" in body must be of type {t}: ")))
    });
    if blocking {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
            field: "<nil>".into(),
        });
        return;
    }
    causes.extend(validate(schema, obj, old));
}
