//! batch/v1 Job: `ValidateJob`/`ValidateJobUpdate` of `pkg/apis/batch/validation` (Kubernetes
//! 1.33): the generated selector, the spec ranges, Indexed limits, backoffLimitPerIndex,
//! podFailurePolicy, podReplacementPolicy, successPolicy and what may not change on update.

use serde_json::Value;

use super::{
    Errs, arr, child, go_label_selector, go_string_map, index, json_equal_ignoring_nulls, s, string_map,
    validate_selector, validate_template,
};

/// `maxParallelismForIndexedJob`: the most parallelism of an Indexed Job.
const MAX_PARALLELISM_FOR_INDEXED_JOB: i64 = 100_000;
/// `completionsSoftLimit`: above it, an Indexed Job with backoffLimitPerIndex needs tighter
/// limits.
const COMPLETIONS_SOFT_LIMIT: i64 = 100_000;
/// `parallelismLimitForHighCompletions`.
const PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS: i64 = 10_000;
/// `maxFailedIndexesLimitForHighCompletions`.
const MAX_FAILED_INDEXES_FOR_HIGH_COMPLETIONS: i64 = 10_000;
/// `maxPodFailurePolicyRules`.
const MAX_POD_FAILURE_POLICY_RULES: usize = 20;
/// `maxFailedIndexesForIndexedJob`.
const MAX_FAILED_INDEXES: i64 = 100_000;
/// `maxPodFailurePolicyOnExitCodesValues`.
const MAX_EXIT_CODE_VALUES: usize = 255;
/// `maxPodFailurePolicyOnPodConditionsPatterns`.
const MAX_ON_POD_CONDITIONS_PATTERNS: usize = 20;
/// `maxSuccessPolicyRule`.
const MAX_SUCCESS_POLICY_RULES: usize = 20;
/// `maxJobSuccessPolicySucceededIndexesLimit`: the longest `succeededIndexes` string.
const MAX_SUCCEEDED_INDEXES_LENGTH: usize = 64 * 1024;

/// The label the generated selector uses (`batch.kubernetes.io/controller-uid`).
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The label naming the Job on its pods (`batch.kubernetes.io/job-name`).
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

fn int(spec: &Value, f: &str) -> Option<i64> {
    spec.get(f).and_then(Value::as_i64)
}

/// Create (`old` = `None`) or update of a Job.
pub(super) fn validate_job(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let Some(spec) = o.get("spec") else {
        e.required("spec", "");
        return;
    };
    if old.is_none() {
        validate_generated_selector(e, o, spec);
    }
    validate_job_spec(e, spec);
    let sel = validate_selector(e, spec, "job");
    validate_template(e, spec, &["OnFailure", "Never"], sel.as_ref());
    if let Some(old) = old.and_then(|o| o.get("spec")) {
        validate_job_spec_update(e, o, spec, old);
    }
}

/// `ValidateGeneratedSelector`: unless `manualSelector`, the selector and the template labels
/// are the ones the strategy generated from the uid.
fn validate_generated_selector(e: &mut Errs, o: &Value, spec: &Value) {
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let Some(sel) = spec.get("selector").filter(|v| !v.is_null()) else { return };
    let meta = o.get("metadata").cloned().unwrap_or(Value::Null);
    let uid = s(&meta, "uid");
    let name = s(&meta, "name");
    if uid.is_empty() {
        e.required("metadata.uid", "");
    }
    let labels = string_map(spec.pointer("/template/metadata/labels"));
    for (key, want) in
        [("controller-uid", uid), ("job-name", name), (CONTROLLER_UID_LABEL, uid), (JOB_NAME_LABEL, name)]
    {
        let path = format!("spec.template.metadata.labels[{key}]");
        match labels.get(key) {
            None => e.required(&path, &format!("must be '{want}'")),
            Some(v) if v != want => e.invalid_str(&path, v, &format!("must be '{want}'")),
            Some(_) => {}
        }
    }
    let expected = [
        ("controller-uid".to_string(), uid.to_string()),
        (CONTROLLER_UID_LABEL.to_string(), uid.to_string()),
        ("job-name".to_string(), name.to_string()),
        (JOB_NAME_LABEL.to_string(), name.to_string()),
    ]
    .into_iter()
    .collect();
    if let Ok(parsed) = crate::selector::LabelSelector::from_json(sel)
        && !parsed.matches(&expected)
    {
        e.invalid_raw("spec.selector", &go_label_selector(sel), "`selector` not auto-generated");
    }
}

pub(super) fn validate_job_spec(e: &mut Errs, spec: &Value) {
    for f in ["parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"] {
        e.non_negative(&format!("spec.{f}"), spec.get(f));
    }
    let indexed = match spec.get("completionMode").filter(|v| !v.is_null()) {
        None => false,
        Some(m) => match m.as_str() {
            Some("NonIndexed") => false,
            Some("Indexed") => true,
            _ => {
                e.not_supported("spec.completionMode", m, &["NonIndexed", "Indexed"]);
                false
            }
        },
    };
    let non_indexed = spec.get("completionMode").and_then(Value::as_str).is_none_or(|m| m == "NonIndexed");
    let completions = int(spec, "completions");
    let parallelism = int(spec, "parallelism");
    let per_index = int(spec, "backoffLimitPerIndex");
    let max_failed = int(spec, "maxFailedIndexes");
    e.non_negative("spec.backoffLimitPerIndex", spec.get("backoffLimitPerIndex"));
    if let Some(m) = max_failed {
        e.non_negative("spec.maxFailedIndexes", Some(&Value::from(m)));
        if per_index.is_none() {
            e.required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified");
        }
    }
    if indexed {
        if completions.is_none() {
            e.required("spec.completions", "when completion mode is Indexed");
        }
        if let Some(p) = parallelism
            && p > MAX_PARALLELISM_FOR_INDEXED_JOB
        {
            e.invalid(
                "spec.parallelism",
                &Value::from(p),
                &format!(
                    "must be less than or equal to {MAX_PARALLELISM_FOR_INDEXED_JOB} when completion mode is Indexed"
                ),
            );
        }
        if let (Some(c), Some(m)) = (completions, max_failed)
            && m > c
        {
            e.invalid("spec.maxFailedIndexes", &Value::from(m), "must be less than or equal to completions");
        }
        if let Some(m) = max_failed
            && m > MAX_FAILED_INDEXES
        {
            e.invalid(
                "spec.maxFailedIndexes",
                &Value::from(m),
                &format!("must be less than or equal to {MAX_FAILED_INDEXES}"),
            );
        }
        if completions.is_some_and(|c| c > COMPLETIONS_SOFT_LIMIT) && per_index.is_some() {
            let high =
                format!("when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index");
            match max_failed {
                None => e.required(
                    "spec.maxFailedIndexes",
                    &format!("must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"),
                ),
                Some(m) if m > MAX_FAILED_INDEXES_FOR_HIGH_COMPLETIONS => e.invalid(
                    "spec.maxFailedIndexes",
                    &Value::from(m),
                    &format!("must be less than or equal to {MAX_FAILED_INDEXES_FOR_HIGH_COMPLETIONS} {high}"),
                ),
                Some(_) => {}
            }
            if let Some(p) = parallelism
                && p > PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS
            {
                e.invalid(
                    "spec.parallelism",
                    &Value::from(p),
                    &format!("must be less than or equal to {PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS} {high}"),
                );
            }
        }
    } else if non_indexed {
        if let Some(b) = per_index {
            e.invalid("spec.backoffLimitPerIndex", &Value::from(b), "requires indexed completion mode");
        }
        if let Some(m) = max_failed {
            e.invalid("spec.maxFailedIndexes", &Value::from(m), "requires indexed completion mode");
        }
    }
    let pfp = spec.get("podFailurePolicy").filter(|v| !v.is_null());
    if let Some(pfp) = pfp {
        validate_pod_failure_policy(e, spec, pfp, per_index.is_some());
    }
    if let Some(p) = spec.get("podReplacementPolicy").filter(|v| !v.is_null()) {
        match p.as_str() {
            Some("Failed") => {}
            Some("TerminatingOrFailed") if pfp.is_none() => {}
            Some("TerminatingOrFailed") => e.not_supported("spec.podReplacementPolicy", p, &["Failed"]),
            _ => e.not_supported("spec.podReplacementPolicy", p, &["Failed", "TerminatingOrFailed"]),
        }
    }
    if let Some(sp) = spec.get("successPolicy").filter(|v| !v.is_null()) {
        validate_success_policy(e, sp, indexed, completions);
    }
}

/// `validatePodFailurePolicy` and its rules.
fn validate_pod_failure_policy(e: &mut Errs, spec: &Value, pfp: &Value, per_index: bool) {
    let template = spec.pointer("/template/spec").unwrap_or(&Value::Null);
    if s(template, "restartPolicy") == "OnFailure" {
        e.invalid_str(
            "spec.template.spec.restartPolicy",
            "OnFailure",
            "only \"Never\" is supported when podFailurePolicy is specified",
        );
    }
    let rules = arr(pfp, "rules");
    if rules.len() > MAX_POD_FAILURE_POLICY_RULES {
        e.too_many("spec.podFailurePolicy.rules", rules.len(), MAX_POD_FAILURE_POLICY_RULES);
    }
    let containers: Vec<&str> =
        arr(template, "containers").iter().chain(arr(template, "initContainers")).map(|c| s(c, "name")).collect();
    for (i, rule) in rules.iter().enumerate() {
        let p = index("spec.podFailurePolicy.rules", i);
        let action = rule.get("action").cloned().unwrap_or(Value::Null);
        match action.as_str() {
            None | Some("") => {
                e.required(&child(&p, "action"), r#"valid values: ["Count" "FailIndex" "FailJob" "Ignore"]"#)
            }
            Some("FailIndex") if !per_index => {
                e.invalid(&child(&p, "action"), &action, "requires the backoffLimitPerIndex to be set")
            }
            Some("FailJob" | "Ignore" | "Count" | "FailIndex") => {}
            _ => e.not_supported(&child(&p, "action"), &action, &["Count", "FailIndex", "FailJob", "Ignore"]),
        }
        let codes = rule.get("onExitCodes").filter(|v| !v.is_null());
        let conds = arr(rule, "onPodConditions");
        if let Some(c) = codes {
            validate_on_exit_codes(e, c, &child(&p, "onExitCodes"), &containers);
        }
        if conds.len() > MAX_ON_POD_CONDITIONS_PATTERNS {
            e.too_many(&child(&p, "onPodConditions"), conds.len(), MAX_ON_POD_CONDITIONS_PATTERNS);
        }
        for (j, pattern) in conds.iter().enumerate() {
            let pp = index(&child(&p, "onPodConditions"), j);
            let type_ = s(pattern, "type");
            e.names(&child(&pp, "type"), type_, crate::names::is_qualified_name(type_));
            let st = pattern.get("status").cloned().unwrap_or(Value::Null);
            match st.as_str() {
                None | Some("") => e.required(&child(&pp, "status"), r#"valid values: ["False" "True" "Unknown"]"#),
                Some("True" | "False" | "Unknown") => {}
                _ => e.not_supported(&child(&pp, "status"), &st, &["False", "True", "Unknown"]),
            }
        }
        match (codes.is_some(), !conds.is_empty()) {
            (true, true) => e.invalid_omitted(&p, "specifying both OnExitCodes and OnPodConditions is not supported"),
            (false, false) => e.invalid_omitted(&p, "specifying one of OnExitCodes and OnPodConditions is required"),
            _ => {}
        }
    }
}

/// `validatePodFailurePolicyRuleOnExitCodes`.
fn validate_on_exit_codes(e: &mut Errs, c: &Value, p: &str, containers: &[&str]) {
    let op = c.get("operator").cloned().unwrap_or(Value::Null);
    match op.as_str() {
        None | Some("") => e.required(&child(p, "operator"), r#"valid values: ["In" "NotIn"]"#),
        Some("In" | "NotIn") => {}
        _ => e.not_supported(&child(p, "operator"), &op, &["In", "NotIn"]),
    }
    if let Some(name) = c.get("containerName").and_then(Value::as_str)
        && !containers.contains(&name)
    {
        e.invalid_str(
            &child(p, "containerName"),
            name,
            "must be one of the container or initContainer names in the pod template",
        );
    }
    let values: Vec<i64> = arr(c, "values").iter().filter_map(Value::as_i64).collect();
    let vp = child(p, "values");
    let rendered = format!("[]int32{{{}}}", values.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "));
    if values.is_empty() {
        e.invalid_raw(&vp, &rendered, "at least one value is required");
    } else if values.len() > MAX_EXIT_CODE_VALUES {
        e.too_many(&vp, values.len(), MAX_EXIT_CODE_VALUES);
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, v) in values.iter().enumerate() {
        if op.as_str() == Some("In") && *v == 0 {
            e.invalid(&index(&vp, i), &Value::from(0), "must not be 0 for the In operator");
        }
        if !seen.insert(*v) {
            e.duplicate(&index(&vp, i), &Value::from(*v));
        }
    }
    if values.windows(2).any(|w| w[0] > w[1]) {
        e.invalid_raw(&vp, &rendered, "must be ordered");
    }
}

/// `validateSuccessPolicy`: only for Indexed Jobs; each rule names indexes, a count or both.
fn validate_success_policy(e: &mut Errs, sp: &Value, indexed: bool, completions: Option<i64>) {
    if !indexed {
        e.invalid_raw("spec.successPolicy", &go_success_policy(sp), "requires indexed completion mode");
        return;
    }
    let completions = completions.unwrap_or(0);
    let rules = arr(sp, "rules");
    if rules.is_empty() {
        e.required(
            "spec.successPolicy.rules",
            "at least one rules must be specified when the successPolicy is specified",
        );
    }
    if rules.len() > MAX_SUCCESS_POLICY_RULES {
        e.too_many("spec.successPolicy.rules", rules.len(), MAX_SUCCESS_POLICY_RULES);
    }
    for (i, rule) in rules.iter().enumerate() {
        let p = index("spec.successPolicy.rules", i);
        let indexes = rule.get("succeededIndexes").and_then(Value::as_str);
        let count = rule.get("succeededCount").and_then(Value::as_i64);
        if indexes.is_none() && count.is_none() {
            e.required(&p, "at least one of succeededCount or succeededIndexes must be specified");
        }
        let mut listed = 0;
        if let Some(ix) = indexes {
            let ip = child(&p, "succeededIndexes");
            if ix.len() > MAX_SUCCEEDED_INDEXES_LENGTH {
                e.too_long(&ip, MAX_SUCCEEDED_INDEXES_LENGTH);
            }
            match parse_indexes(ix, completions) {
                Ok(n) => listed = n,
                Err(msg) => e.invalid_str(&ip, ix, &format!("error parsing succeededIndexes: {msg}")),
            }
        }
        if let Some(n) = count {
            let cp = child(&p, "succeededCount");
            e.non_negative(&cp, Some(&Value::from(n)));
            if n > completions {
                e.invalid(
                    &cp,
                    &Value::from(n),
                    &format!("must be less than or equal to {completions} (the number of specified completions)"),
                );
            }
            if indexes.is_some() && n > listed {
                e.invalid(
                    &cp,
                    &Value::from(n),
                    &format!(
                        "must be less than or equal to {listed} (the number of indexes in the specified succeededIndexes field)"
                    ),
                );
            }
        }
    }
}

/// A successPolicy as Go's `%#v` prints it in an Invalid value.
fn go_success_policy(sp: &Value) -> String {
    let rules: Vec<String> = arr(sp, "rules")
        .iter()
        .map(|r| {
            let ptr = |v: Option<&Value>| if v.is_some_and(|v| !v.is_null()) { "(ptr)" } else { "nil" };
            format!(
                "batch.SuccessPolicyRule{{SucceededIndexes:{}, SucceededCount:{}}}",
                ptr(r.get("succeededIndexes")),
                ptr(r.get("succeededCount"))
            )
        })
        .collect();
    format!("batch.SuccessPolicy{{Rules:[]batch.SuccessPolicyRule{{{}}}}}", rules.join(", "))
}

/// `validateIndexesFormat`: parses a `succeededIndexes`/`completedIndexes` string (`1,3-5,7`)
/// of ascending, non-overlapping intervals below `completions` into the number of indexes it
/// names.
///
/// # Errors
/// Kubernetes' message for the first malformed, too large or out-of-order interval.
pub fn parse_indexes(text: &str, completions: i64) -> Result<i64, String> {
    if text.is_empty() {
        return Ok(0);
    }
    let mut last: Option<i64> = None;
    let mut total = 0;
    for part in text.split(',') {
        let limits: Vec<&str> = part.split('-').collect();
        if limits.len() > 2 {
            return Err(format!(
                "the fragment {part:?} violates the requirement that an index interval can have at most two parts separated by '-'"
            ));
        }
        let parse = |s: &str| -> Result<i64, String> {
            let n: i64 = s.parse().map_err(|_| format!("cannot convert string to integer for index: {s:?}"))?;
            if n >= completions {
                return Err(format!("too large index: {s:?}"));
            }
            Ok(n)
        };
        let a = parse(limits[0])?;
        let b = match limits.get(1) {
            Some(l) => {
                let b = parse(l)?;
                if a >= b {
                    return Err(format!("non-increasing order, previous: {a}, current: {b}"));
                }
                b
            }
            None => a,
        };
        if let Some(l) = last
            && l >= a
        {
            return Err(format!("non-increasing order, previous: {l}, current: {a}"));
        }
        last = Some(b);
        total += b - a + 1;
    }
    Ok(total)
}

/// `ValidateJobSpecUpdate`: the selector, completionMode, podFailurePolicy, backoffLimitPerIndex
/// and successPolicy never change; completions only with parallelism in an Indexed Job (elastic
/// Indexed Jobs); the template only in a suspended Job that never started, and then only its
/// scheduling directives (node affinity and selector, tolerations, scheduling gates, labels,
/// annotations).
fn validate_job_spec_update(e: &mut Errs, job: &Value, spec: &Value, old: &Value) {
    let changed =
        |f: &str| !json_equal_ignoring_nulls(spec.get(f).unwrap_or(&Value::Null), old.get(f).unwrap_or(&Value::Null));
    if changed("selector") {
        e.invalid_raw(
            "spec.selector",
            &go_label_selector(spec.get("selector").unwrap_or(&Value::Null)),
            "field is immutable",
        );
    }
    for f in ["completionMode", "podFailurePolicy", "backoffLimitPerIndex", "successPolicy", "manualSelector"] {
        if changed(f) {
            e.invalid(&format!("spec.{f}"), spec.get(f).unwrap_or(&Value::Null), "field is immutable");
        }
    }
    if changed("completions") {
        let elastic = s(spec, "completionMode") == "Indexed"
            && int(spec, "completions") == int(spec, "parallelism")
            && int(old, "completions") == int(old, "parallelism");
        if !elastic {
            e.invalid("spec.completions", spec.get("completions").unwrap_or(&Value::Null), "field is immutable");
        }
    }
    if changed("template") {
        let never_started = job.pointer("/status/startTime").is_none_or(Value::is_null);
        let suspended = old.get("suspend").and_then(Value::as_bool) == Some(true);
        let mutable = if suspended && never_started {
            let strip = |t: &Value| {
                let mut t = t.clone();
                if let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("labels");
                    m.remove("annotations");
                }
                if let Some(ps) = t.get_mut("spec").and_then(Value::as_object_mut) {
                    for f in ["nodeSelector", "tolerations", "schedulingGates"] {
                        ps.remove(f);
                    }
                    if let Some(a) = ps.get_mut("affinity").and_then(Value::as_object_mut) {
                        a.remove("nodeAffinity");
                    }
                }
                t
            };
            let new_t = strip(spec.get("template").unwrap_or(&Value::Null));
            let old_t = strip(old.get("template").unwrap_or(&Value::Null));
            json_equal_ignoring_nulls(&new_t, &old_t)
        } else {
            false
        };
        if !mutable {
            let labels = string_map(spec.pointer("/template/metadata/labels"));
            e.invalid_raw(
                "spec.template",
                &format!("core.PodTemplateSpec{{ObjectMeta:{{Labels:{}}}}}", go_string_map(&labels)),
                "field is immutable",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::defaults::apply_defaults;
    use crate::validation::validate;

    use super::*;

    /// A defaulted Job as the strategy leaves it (generated selector and labels, uid `u`).
    fn job(spec: Value) -> Value {
        let mut j = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi", "namespace": "default", "uid": "u"},
            "spec": {"selector": {"matchLabels": {CONTROLLER_UID_LABEL: "u"}},
                     "template": {"metadata": {"labels": {"controller-uid": "u", "job-name": "pi",
                                     CONTROLLER_UID_LABEL: "u", JOB_NAME_LABEL: "pi"}},
                                  "spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "busybox"}]}}}});
        for (k, v) in spec.as_object().unwrap() {
            j["spec"][k] = v.clone();
        }
        apply_defaults("batch/v1", "Job", &mut j);
        j
    }

    fn fields(j: &Value, old: Option<&Value>) -> Vec<String> {
        validate("batch/v1", "Job", j, old).into_iter().map(|c| c.field).collect()
    }

    #[test]
    fn a_job_with_the_generated_selector_is_valid() {
        assert_eq!(fields(&job(json!({})), None), Vec::<String>::new());
    }

    #[test]
    fn a_selector_that_does_not_select_the_generated_labels_is_not_auto_generated() {
        let mut j = job(json!({"selector": {"matchLabels": {"app": "other"}}}));
        j["spec"]["template"]["metadata"]["labels"]["app"] = json!("other");
        let causes = validate("batch/v1", "Job", &j, None);
        assert!(causes.iter().any(|c| c.field == "spec.selector" && c.message.contains("not auto-generated")));
    }

    #[test]
    fn a_manual_selector_job_needs_a_selector() {
        let mut j = job(json!({"manualSelector": true}));
        j["spec"].as_object_mut().unwrap().remove("selector");
        assert!(fields(&j, None).contains(&"spec.selector".to_string()));
    }

    #[test]
    fn negative_counts_are_invalid() {
        let j = job(json!({"parallelism": -1, "completions": -2, "backoffLimit": -3,
                           "activeDeadlineSeconds": -4, "ttlSecondsAfterFinished": -5}));
        let f = fields(&j, None);
        for name in ["parallelism", "completions", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"] {
            assert!(f.contains(&format!("spec.{name}")), "{name}: {f:?}");
        }
    }

    #[test]
    fn an_indexed_job_needs_completions_and_bounded_parallelism() {
        let mut j = job(json!({"completionMode": "Indexed", "parallelism": 200_000}));
        j["spec"].as_object_mut().unwrap().remove("completions");
        let causes = validate("batch/v1", "Job", &j, None);
        assert!(causes.iter().any(|c| c.field == "spec.completions" && c.reason == "FieldValueRequired"));
        assert!(causes.iter().any(|c| c.field == "spec.parallelism"));
    }

    #[test]
    fn an_unknown_completion_mode_is_not_supported() {
        let causes = validate("batch/v1", "Job", &job(json!({"completionMode": "Sorted"})), None);
        assert!(causes.iter().any(|c| c.field == "spec.completionMode" && c.reason == "FieldValueNotSupported"));
    }

    #[test]
    fn backoff_limit_per_index_requires_indexed_mode() {
        assert!(fields(&job(json!({"backoffLimitPerIndex": 1})), None).contains(&"spec.backoffLimitPerIndex".into()));
        let ok = job(
            json!({"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1, "maxFailedIndexes": 2}),
        );
        assert_eq!(fields(&ok, None), Vec::<String>::new());
    }

    #[test]
    fn a_pod_failure_policy_needs_restart_policy_never_and_one_matcher_per_rule() {
        let policy = json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
                                      {"action": "Ignore"}]});
        let mut j = job(json!({"podFailurePolicy": policy}));
        j["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
        let f = fields(&j, None);
        assert!(f.contains(&"spec.template.spec.restartPolicy".to_string()), "{f:?}");
        assert!(f.contains(&"spec.podFailurePolicy.rules[1]".to_string()), "{f:?}");
    }

    #[test]
    fn a_success_policy_requires_indexed_mode_and_valid_indexes() {
        let sp = json!({"rules": [{"succeededIndexes": "0-9"}]});
        let f = fields(&job(json!({"completions": 3, "successPolicy": sp})), None);
        assert_eq!(f, ["spec.successPolicy"]);
        let causes = validate(
            "batch/v1",
            "Job",
            &job(json!({"completionMode": "Indexed", "completions": 3, "successPolicy": sp})),
            None,
        );
        let cause = causes.iter().find(|c| c.field == "spec.successPolicy.rules[0].succeededIndexes").unwrap();
        assert_eq!(cause.message, r#"Invalid value: "0-9": error parsing succeededIndexes: too large index: "9""#);
    }

    #[test]
    fn a_success_policy_count_is_bounded_by_completions_and_its_indexes() {
        let sp = json!({"rules": [{"succeededIndexes": "0,2", "succeededCount": 3}, {"succeededCount": 5}]});
        let causes = validate(
            "batch/v1",
            "Job",
            &job(json!({"completionMode": "Indexed", "completions": 4, "successPolicy": sp})),
            None,
        );
        let messages: Vec<(&str, &str)> = causes.iter().map(|c| (c.field.as_str(), c.message.as_str())).collect();
        assert_eq!(
            messages,
            [
                (
                    "spec.successPolicy.rules[0].succeededCount",
                    "Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)"
                ),
                (
                    "spec.successPolicy.rules[1].succeededCount",
                    "Invalid value: 5: must be less than or equal to 4 (the number of specified completions)"
                ),
            ]
        );
    }

    #[test]
    fn a_pod_failure_policy_rule_with_both_matchers_is_refused_with_kubernetes_message() {
        let policy = json!({"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]},
                                       "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]});
        let causes = validate("batch/v1", "Job", &job(json!({"podFailurePolicy": policy})), None);
        let messages: Vec<(&str, &str)> = causes.iter().map(|c| (c.field.as_str(), c.message.as_str())).collect();
        assert_eq!(
            messages,
            [(
                "spec.podFailurePolicy.rules[0]",
                "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported"
            )]
        );
    }

    #[test]
    fn exit_code_rules_name_a_template_container_and_list_ordered_unique_codes() {
        let policy = json!({"rules": [
            {"action": "Count", "onExitCodes": {"containerName": "sidecar", "operator": "In", "values": [0, 3, 2, 2]}},
            {"action": "Ignore", "onExitCodes": {"values": []}},
        ]});
        let causes = validate("batch/v1", "Job", &job(json!({"podFailurePolicy": policy})), None);
        let messages: Vec<(&str, &str)> = causes.iter().map(|c| (c.field.as_str(), c.message.as_str())).collect();
        let p = "spec.podFailurePolicy.rules";
        assert_eq!(
            messages,
            [
                (
                    &*format!("{p}[0].onExitCodes.containerName"),
                    r#"Invalid value: "sidecar": must be one of the container or initContainer names in the pod template"#
                ),
                (&*format!("{p}[0].onExitCodes.values[0]"), "Invalid value: 0: must not be 0 for the In operator"),
                (&*format!("{p}[0].onExitCodes.values[3]"), "Duplicate value: 2"),
                (&*format!("{p}[0].onExitCodes.values"), "Invalid value: []int32{0, 3, 2, 2}: must be ordered"),
                (&*format!("{p}[1].onExitCodes.operator"), r#"Required value: valid values: ["In" "NotIn"]"#),
                (&*format!("{p}[1].onExitCodes.values"), "Invalid value: []int32{}: at least one value is required"),
            ]
        );
    }

    #[test]
    fn fail_index_requires_backoff_limit_per_index_and_conditions_need_a_known_status() {
        let policy = json!({"rules": [{"action": "FailIndex",
                                       "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]}]});
        let causes = validate("batch/v1", "Job", &job(json!({"podFailurePolicy": policy})), None);
        let messages: Vec<(&str, &str)> = causes.iter().map(|c| (c.field.as_str(), c.message.as_str())).collect();
        assert_eq!(
            messages,
            [
                (
                    "spec.podFailurePolicy.rules[0].action",
                    r#"Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set"#
                ),
                (
                    "spec.podFailurePolicy.rules[0].onPodConditions[0].status",
                    r#"Unsupported value: "Maybe": supported values: "False", "True", "Unknown""#
                ),
            ]
        );
    }

    #[test]
    fn max_failed_indexes_requires_indexed_mode_and_backoff_limit_per_index() {
        let causes = validate("batch/v1", "Job", &job(json!({"maxFailedIndexes": 1})), None);
        let messages: Vec<(&str, &str)> = causes.iter().map(|c| (c.field.as_str(), c.message.as_str())).collect();
        assert_eq!(
            messages,
            [
                ("spec.backoffLimitPerIndex", "Required value: when maxFailedIndexes is specified"),
                ("spec.maxFailedIndexes", "Invalid value: 1: requires indexed completion mode"),
            ]
        );
        let too_many = job(json!({"completionMode": "Indexed", "completions": 2, "backoffLimitPerIndex": 1,
                                  "maxFailedIndexes": 3}));
        assert_eq!(fields(&too_many, None), ["spec.maxFailedIndexes"]);
    }

    #[test]
    fn the_selector_completions_and_template_are_immutable() {
        let old = job(json!({"completions": 3}));
        let mut new = job(json!({"completions": 4}));
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx");
        new["spec"]["selector"]["matchLabels"]["x"] = json!("y");
        let f = fields(&new, Some(&old));
        for name in ["spec.selector", "spec.completions", "spec.template"] {
            assert!(f.contains(&name.to_string()), "{name}: {f:?}");
        }
    }

    #[test]
    fn an_elastic_indexed_job_scales_completions_with_parallelism() {
        let old = job(json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3}));
        let new = job(json!({"completionMode": "Indexed", "completions": 5, "parallelism": 5}));
        assert_eq!(fields(&new, Some(&old)), Vec::<String>::new());
    }

    #[test]
    fn a_suspended_job_that_never_started_may_change_its_scheduling_directives() {
        let old = job(json!({"suspend": true}));
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "a"});
        assert_eq!(fields(&new, Some(&old)), Vec::<String>::new());
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx");
        assert_eq!(fields(&new, Some(&old)), vec!["spec.template".to_string()]);
    }

    #[test]
    fn indexes_parse_into_a_count() {
        assert_eq!(parse_indexes("0,2-4", 5), Ok(4));
        assert_eq!(parse_indexes("3,1", 5), Err("non-increasing order, previous: 3, current: 1".into()));
        assert_eq!(parse_indexes("0-5", 5), Err(r#"too large index: "5""#.into()));
        assert!(parse_indexes("1-2-3", 5).unwrap_err().contains("at most two parts"));
    }
}
