//! batch/v1 Job: `ValidateJob`/`ValidateJobUpdate` of `pkg/apis/batch/validation` (Kubernetes
//! 1.33): the generated selector, the spec ranges, Indexed limits, backoffLimitPerIndex,
//! podFailurePolicy, podReplacementPolicy, successPolicy and what may not change on update.

use serde_json::Value;

use super::{
    Errs, arr, child, go_label_selector, go_string_map, index, json_equal_ignoring_nulls, s, string_map,
    validate_selector, validate_template,
};

/// `completionsHardLimit`: the most completions (and parallelism) of an Indexed Job.
const INDEXED_COMPLETIONS_LIMIT: i64 = 100_000;
/// `parallelismLimitForHighCompletions`: the most parallelism of an Indexed Job above
/// [`INDEXED_COMPLETIONS_LIMIT`] completions.
const INDEXED_HIGH_COMPLETIONS_PARALLELISM: i64 = 10_000;
/// `maxPodFailurePolicyRules`.
const MAX_POD_FAILURE_POLICY_RULES: usize = 20;
/// `maxFailedIndexesLimit`.
const MAX_FAILED_INDEXES: i64 = 100_000;
/// `maxPodFailurePolicyOnExitCodesValues`.
const MAX_EXIT_CODE_VALUES: usize = 255;
/// `maxSuccessPolicyRules`.
const MAX_SUCCESS_POLICY_RULES: usize = 20;

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
    let completions = int(spec, "completions");
    let parallelism = int(spec, "parallelism");
    if indexed {
        match completions {
            None => e.required("spec.completions", "when completion mode is Indexed"),
            Some(c) if c > INDEXED_COMPLETIONS_LIMIT && int(spec, "backoffLimitPerIndex").is_some() => e.invalid(
                "spec.completions",
                &Value::from(c),
                &format!(
                    "must be less than or equal to {INDEXED_COMPLETIONS_LIMIT} when backoffLimitPerIndex is specified"
                ),
            ),
            _ => {}
        }
        if let Some(p) = parallelism
            && p > INDEXED_COMPLETIONS_LIMIT
        {
            e.invalid(
                "spec.parallelism",
                &Value::from(p),
                &format!("must be less than or equal to {INDEXED_COMPLETIONS_LIMIT} when completion mode is Indexed"),
            );
        }
        if let (Some(c), Some(p)) = (completions, parallelism)
            && c > INDEXED_COMPLETIONS_LIMIT
            && p > INDEXED_HIGH_COMPLETIONS_PARALLELISM
        {
            e.invalid(
                "spec.parallelism",
                &Value::from(p),
                &format!(
                    "must be less than or equal to {INDEXED_HIGH_COMPLETIONS_PARALLELISM} when completions are above {INDEXED_COMPLETIONS_LIMIT} and used with backoff limit per index"
                ),
            );
        }
    }
    let per_index = int(spec, "backoffLimitPerIndex");
    if let Some(b) = per_index {
        e.non_negative("spec.backoffLimitPerIndex", Some(&Value::from(b)));
        if !indexed {
            e.forbidden("spec.backoffLimitPerIndex", "requires indexed completion mode");
        }
    }
    if let Some(m) = int(spec, "maxFailedIndexes") {
        if per_index.is_none() {
            e.required("spec.backoffLimitPerIndex", "when maxFailedIndexes is specified");
        }
        if m < 0 {
            e.invalid("spec.maxFailedIndexes", &Value::from(m), "must be greater than or equal to 0");
        } else if m > MAX_FAILED_INDEXES {
            e.invalid(
                "spec.maxFailedIndexes",
                &Value::from(m),
                &format!("must be less than or equal to {MAX_FAILED_INDEXES}"),
            );
        } else if let Some(c) = completions
            && m > c
        {
            e.invalid("spec.maxFailedIndexes", &Value::from(m), "must be less than or equal to completions");
        }
    }
    let restart = s(spec.pointer("/template/spec").unwrap_or(&Value::Null), "restartPolicy");
    let pfp = spec.get("podFailurePolicy").filter(|v| !v.is_null());
    if let Some(pfp) = pfp {
        validate_pod_failure_policy(e, pfp, restart, per_index.is_some());
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

fn validate_pod_failure_policy(e: &mut Errs, pfp: &Value, restart: &str, per_index: bool) {
    if restart != "Never" {
        e.invalid_str(
            "spec.template.spec.restartPolicy",
            restart,
            "only \"Never\" is supported when podFailurePolicy is specified",
        );
    }
    let rules = arr(pfp, "rules");
    if rules.len() > MAX_POD_FAILURE_POLICY_RULES {
        e.0.push(super::cause(
            "FieldValueTooMany",
            "spec.podFailurePolicy.rules",
            format!("Too many: {}: must have at most {MAX_POD_FAILURE_POLICY_RULES} items", rules.len()),
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        let p = index("spec.podFailurePolicy.rules", i);
        let action = rule.get("action").cloned().unwrap_or(Value::Null);
        match action.as_str() {
            Some("FailJob" | "Ignore" | "Count") => {}
            Some("FailIndex") if per_index => {}
            Some("FailIndex") => e.forbidden(&child(&p, "action"), "requires the backoffLimitPerIndex to be set"),
            None | Some("") => e.required(&child(&p, "action"), ""),
            _ => e.not_supported(&child(&p, "action"), &action, &["Count", "FailIndex", "FailJob", "Ignore"]),
        }
        let codes = rule.get("onExitCodes").filter(|v| !v.is_null());
        let conds = rule.get("onPodConditions").filter(|v| v.as_array().is_some_and(|a| !a.is_empty()));
        match (codes, conds) {
            (Some(_), Some(_)) | (None, None) => e.invalid_raw(
                &p,
                if codes.is_some() { "[onExitCodes onPodConditions]" } else { "[]" },
                "specifying one of OnExitCodes and OnPodConditions is required",
            ),
            _ => {}
        }
        if let Some(c) = codes {
            validate_on_exit_codes(e, c, &child(&p, "onExitCodes"));
        }
        for (j, pattern) in arr(rule, "onPodConditions").iter().enumerate() {
            let pp = index(&child(&p, "onPodConditions"), j);
            if s(pattern, "type").is_empty() {
                e.required(&child(&pp, "type"), "");
            }
            let st = pattern.get("status").cloned().unwrap_or(Value::Null);
            if !matches!(st.as_str(), Some("True" | "False" | "Unknown")) {
                e.not_supported(&child(&pp, "status"), &st, &["False", "True", "Unknown"]);
            }
        }
    }
}

fn validate_on_exit_codes(e: &mut Errs, c: &Value, p: &str) {
    let op = c.get("operator").cloned().unwrap_or(Value::Null);
    if !matches!(op.as_str(), Some("In" | "NotIn")) {
        e.not_supported(&child(p, "operator"), &op, &["In", "NotIn"]);
    }
    let values: Vec<i64> = arr(c, "values").iter().filter_map(Value::as_i64).collect();
    let vp = child(p, "values");
    if values.is_empty() {
        e.invalid_raw(&vp, "[]int32{}", "at least one value is required");
    }
    if values.len() > MAX_EXIT_CODE_VALUES {
        e.0.push(super::cause(
            "FieldValueTooMany",
            &vp,
            format!("Too many: {}: must have at most {MAX_EXIT_CODE_VALUES} items", values.len()),
        ));
    }
    for (i, v) in values.iter().enumerate() {
        if i > 0 && values[i - 1] == *v {
            e.duplicate(&index(&vp, i), &Value::from(*v));
        } else if i > 0 && values[i - 1] > *v {
            e.invalid(&index(&vp, i), &Value::from(*v), "must be ordered");
        }
        if op.as_str() == Some("In") && *v == 0 {
            e.invalid(&index(&vp, i), &Value::from(0), "must not be 0 for the In operator");
        }
    }
}

fn validate_success_policy(e: &mut Errs, sp: &Value, indexed: bool, completions: Option<i64>) {
    if !indexed {
        e.invalid_raw("spec.successPolicy", "\"object\"", "requires indexed completion mode");
    }
    let rules = arr(sp, "rules");
    if rules.is_empty() {
        e.required(
            "spec.successPolicy.rules",
            "at least one rules must be specified when the successPolicy is specified",
        );
    }
    if rules.len() > MAX_SUCCESS_POLICY_RULES {
        e.0.push(super::cause(
            "FieldValueTooMany",
            "spec.successPolicy.rules",
            format!("Too many: {}: must have at most {MAX_SUCCESS_POLICY_RULES} items", rules.len()),
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        let p = index("spec.successPolicy.rules", i);
        let indexes = rule.get("succeededIndexes").and_then(Value::as_str);
        let count = rule.get("succeededCount").and_then(Value::as_i64);
        if indexes.is_none() && count.is_none() {
            e.required(&p, "at least one of succeededCount or succeededIndexes must be specified");
        }
        let mut listed = None;
        if let Some(ix) = indexes {
            match parse_indexes(ix, completions.unwrap_or(0)) {
                Ok(n) => listed = Some(n),
                Err(msg) => e.invalid_str(&child(&p, "succeededIndexes"), ix, &msg),
            }
        }
        if let Some(n) = count {
            let cp = child(&p, "succeededCount");
            if n < 0 {
                e.invalid(&cp, &Value::from(n), "must be greater than or equal to 0");
            } else if let Some(c) = completions
                && n > c
            {
                e.invalid(
                    &cp,
                    &Value::from(n),
                    &format!("must be less than or equal to {c} (the number of specified completions)"),
                );
            } else if let Some(l) = listed
                && n > l
            {
                e.invalid(
                    &cp,
                    &Value::from(n),
                    &format!("must be less than or equal to {l} (the number of indexes in the specified succeededIndexes field)"),
                );
            }
        }
    }
}

/// Parses a `succeededIndexes`/`completedIndexes` string (`1,3-5,7`): ascending, non-overlapping
/// intervals below `completions` → the number of indexes it names.
pub fn parse_indexes(text: &str, completions: i64) -> Result<i64, String> {
    let mut last: i64 = -1;
    let mut total = 0;
    for part in text.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: i64 = a.parse().map_err(|_| format!("cannot convert string to integer for index: {a:?}"))?;
        let b: i64 = b.parse().map_err(|_| format!("cannot convert string to integer for index: {b:?}"))?;
        if a > b {
            return Err(format!("non-increasing order, previous: {a}, current: {b}"));
        }
        if a <= last {
            return Err(format!("overlapping or non-increasing order, previous: {last}, current: {a}"));
        }
        if b >= completions {
            return Err(format!("too large: {b}: must be less than completions: {completions}"));
        }
        last = b;
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
        assert!(f.contains(&"spec.successPolicy".to_string()), "{f:?}");
        assert!(f.contains(&"spec.successPolicy.rules[0].succeededIndexes".to_string()), "{f:?}");
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
        assert!(parse_indexes("3,1", 5).is_err());
        assert!(parse_indexes("0-5", 5).is_err());
    }
}
