//! batch/v1 CronJob: `ValidateCronJobCreate`/`ValidateCronJobUpdate` of
//! `pkg/apis/batch/validation` (Kubernetes 1.33): the schedule ([`crate::cron`]: robfig/cron's
//! standard syntax, no `TZ=`/`CRON_TZ=` prefix in new schedules), `timeZone` (an IANA name),
//! `startingDeadlineSeconds` and the history limits (≥ 0), `concurrencyPolicy`, the job
//! template validated as a Job's spec (`ValidateJobTemplateSpec`: no selector, no manual
//! selector, the Job's ranges and pod template rules) and, on create, a name short enough for the
//! controller's `-<minutes>` suffix.

use serde_json::{Value, json};

use super::{Errs, go_label_selector, job, s, validate_template};
use crate::cron;

/// The longest CronJob name (`DNS1035LabelMaxLength - 11`): Job names add `-` and up to ten
/// digits of minutes since the epoch.
pub const MAX_CRON_JOB_NAME_LENGTH: usize = 52;

/// Create (`old` = `None`) or update of a CronJob.
pub(super) fn validate_cron_job(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let empty = json!({});
    let spec = o.get("spec").unwrap_or(&empty);
    let old_spec = old.map(|o| o.get("spec").unwrap_or(&empty));
    validate_cron_job_spec(e, spec, old_spec);
    if old.is_none() {
        let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        if name.len() > MAX_CRON_JOB_NAME_LENGTH {
            e.invalid_str(
                "metadata.name",
                name,
                &format!("must be no more than {MAX_CRON_JOB_NAME_LENGTH} characters"),
            );
        }
    }
}

fn validate_cron_job_spec(e: &mut Errs, spec: &Value, old: Option<&Value>) {
    let schedule = s(spec, "schedule");
    let time_zone = spec.get("timeZone").filter(|v| !v.is_null());
    if schedule.is_empty() {
        e.required("spec.schedule", "");
    } else {
        // A schedule stored before the timeZone field existed may keep its TZ prefix.
        let allow_tz = old.is_some_and(|o| s(o, "schedule").contains("TZ"));
        if let Err(msg) = cron::parse_standard(schedule) {
            e.invalid_str("spec.schedule", schedule, &msg);
        }
        if schedule.contains("TZ") {
            if !allow_tz {
                e.invalid_str(
                    "spec.schedule",
                    schedule,
                    "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                );
            } else if time_zone.is_some() {
                e.invalid_str(
                    "spec.schedule",
                    schedule,
                    "cannot use both timeZone field and TZ or CRON_TZ in schedule",
                );
            }
        }
    }
    e.non_negative("spec.startingDeadlineSeconds", spec.get("startingDeadlineSeconds"));
    if old.is_none_or(|o| o.get("timeZone").filter(|v| !v.is_null()) != time_zone) {
        validate_time_zone(e, time_zone);
    }
    match spec.get("concurrencyPolicy").filter(|v| !v.is_null()) {
        None => e.required("spec.concurrencyPolicy", ""),
        Some(p) => match p.as_str() {
            Some("Allow" | "Forbid" | "Replace") => {}
            Some("") => e.required("spec.concurrencyPolicy", ""),
            _ => e.not_supported("spec.concurrencyPolicy", p, &["Allow", "Forbid", "Replace"]),
        },
    }
    validate_job_template_spec(e, spec.pointer("/jobTemplate/spec").unwrap_or(&json!({})));
    e.non_negative("spec.successfulJobsHistoryLimit", spec.get("successfulJobsHistoryLimit"));
    e.non_negative("spec.failedJobsHistoryLimit", spec.get("failedJobsHistoryLimit"));
}

/// `validateTimeZone`: the name's syntax (IANA's naming rules, with digits and `+` tolerated for
/// legacy names), not `Local`, and known to the time zone database.
fn validate_time_zone(e: &mut Errs, tz: Option<&Value>) {
    let Some(tz) = tz else { return };
    let name = tz.as_str().unwrap_or("");
    let path = "spec.timeZone";
    if name.is_empty() {
        e.invalid_str(path, name, "timeZone must be nil or non-empty string");
        return;
    }
    let part_ok = |p: &str| {
        !matches!(p, "." | "..")
            && !p.starts_with('-')
            && (1..=14).contains(&p.len())
            && p.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b'+'))
    };
    if !name.split('/').all(part_ok) {
        e.invalid_str(path, name, &format!("unknown time zone {name}"));
        return;
    }
    if name.eq_ignore_ascii_case("Local") {
        e.invalid_str(
            path,
            name,
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        );
    }
    if let Err(msg) = cron::load_location(name) {
        e.invalid_str(path, name, &msg);
    }
}

/// `ValidateJobTemplateSpec` at `spec.jobTemplate.spec`: the Job spec rules (ranges, completion
/// mode, pod failure policy, pod template) — the selector is generated for each Job, so none may
/// be given.
fn validate_job_template_spec(e: &mut Errs, job_spec: &Value) {
    const PREFIX: &str = "spec.jobTemplate.spec";
    // The Job rules name their fields from `spec.`: validate apart, then move under the template.
    let mut inner = Errs::default();
    job::validate_job_spec(&mut inner, job_spec);
    validate_template(&mut inner, job_spec, &["OnFailure", "Never"], None);
    for mut cause in inner.0 {
        if let Some(rest) = cause.field.strip_prefix("spec") {
            cause.field = format!("{PREFIX}{rest}");
        }
        e.0.push(cause);
    }
    if let Some(sel) = job_spec.get("selector").filter(|v| !v.is_null()) {
        e.invalid_raw(&format!("{PREFIX}.selector"), &go_label_selector(sel), "`selector` will be auto-generated");
    }
    if job_spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        e.not_supported(&format!("{PREFIX}.manualSelector"), &Value::Bool(true), &["nil", "false"]);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::defaults::apply_defaults;
    use crate::validation::{Cause, validate};

    fn cron_job(spec: Value) -> Value {
        let mut cj = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "tick", "namespace": "default"},
            "spec": {"schedule": "*/5 * * * *",
                     "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure",
                         "containers": [{"name": "c", "image": "busybox"}]}}}}}});
        for (k, v) in spec.as_object().unwrap() {
            cj["spec"][k] = v.clone();
        }
        apply_defaults("batch/v1", "CronJob", &mut cj);
        cj
    }

    fn causes(cj: &Value, old: Option<&Value>) -> Vec<Cause> {
        validate("batch/v1", "CronJob", cj, old)
    }

    fn fields(cj: &Value, old: Option<&Value>) -> Vec<String> {
        causes(cj, old).into_iter().map(|c| c.field).collect()
    }

    #[test]
    fn a_cron_job_with_a_standard_schedule_or_a_descriptor_is_valid() {
        for sched in ["*/5 * * * *", "@hourly", "@every 1h", "0 9 * JAN-MAR MON-FRI", "5/15 0 1,15 * ?"] {
            assert!(causes(&cron_job(json!({"schedule": sched})), None).is_empty(), "{sched}");
        }
    }

    #[test]
    fn a_malformed_schedule_is_invalid_with_the_parsers_message() {
        let c = causes(&cron_job(json!({"schedule": "* *"})), None);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].field, "spec.schedule");
        assert_eq!(c[0].message, "Invalid value: \"* *\": expected exactly 5 fields, found 2: [* *]");
        let c = causes(&cron_job(json!({"schedule": "61 * * * *"})), None);
        assert_eq!(c[0].message, "Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61");
    }

    #[test]
    fn a_missing_schedule_is_required() {
        let mut cj = cron_job(json!({}));
        cj["spec"].as_object_mut().unwrap().remove("schedule");
        let c = causes(&cj, None);
        assert_eq!((c[0].field.as_str(), c[0].reason.as_str()), ("spec.schedule", "FieldValueRequired"));
    }

    #[test]
    fn a_new_schedule_may_not_carry_a_time_zone_prefix() {
        let c = causes(&cron_job(json!({"schedule": "TZ=UTC 0 * * * *"})), None);
        assert_eq!(
            c.iter().map(|c| c.message.as_str()).collect::<Vec<_>>(),
            ["Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"]
        );
        // A stored TZ schedule stays updatable, but not together with timeZone.
        let old = cron_job(json!({"schedule": "TZ=UTC 0 * * * *"}));
        let mut new = old.clone();
        new["spec"]["suspend"] = json!(true);
        assert!(causes(&new, Some(&old)).is_empty());
        new["spec"]["timeZone"] = json!("Europe/Paris");
        assert_eq!(fields(&new, Some(&old)), ["spec.schedule"]);
    }

    #[test]
    fn a_time_zone_must_be_a_known_iana_name() {
        assert!(causes(&cron_job(json!({"timeZone": "America/New_York"})), None).is_empty());
        let msg = |tz: &str| causes(&cron_job(json!({"timeZone": tz})), None)[0].message.clone();
        assert_eq!(msg("Mars/Olympus"), "Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus");
        assert_eq!(msg("../etc/passwd"), "Invalid value: \"../etc/passwd\": unknown time zone ../etc/passwd");
        assert_eq!(msg(""), "Invalid value: \"\": timeZone must be nil or non-empty string");
        assert_eq!(
            msg("Local"),
            "Invalid value: \"Local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"
        );
    }

    #[test]
    fn negative_deadlines_and_history_limits_are_invalid() {
        let cj = cron_job(
            json!({"startingDeadlineSeconds": -1, "successfulJobsHistoryLimit": -2, "failedJobsHistoryLimit": -3}),
        );
        assert_eq!(
            fields(&cj, None),
            ["spec.startingDeadlineSeconds", "spec.successfulJobsHistoryLimit", "spec.failedJobsHistoryLimit"]
        );
        assert_eq!(causes(&cj, None)[0].message, "Invalid value: -1: must be greater than or equal to 0");
    }

    #[test]
    fn an_unknown_concurrency_policy_is_not_supported() {
        let c = causes(&cron_job(json!({"concurrencyPolicy": "Sometimes"})), None);
        assert_eq!(c[0].field, "spec.concurrencyPolicy");
        assert_eq!(
            c[0].message,
            "Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\""
        );
    }

    #[test]
    fn the_job_template_is_validated_as_a_job_spec_under_its_own_path() {
        let mut cj = cron_job(json!({}));
        cj["spec"]["jobTemplate"]["spec"]["parallelism"] = json!(-1);
        cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        let f = fields(&cj, None);
        for want in [
            "spec.jobTemplate.spec.parallelism",
            "spec.jobTemplate.spec.template.spec.restartPolicy",
            "spec.jobTemplate.spec.template.spec.containers[0].image",
        ] {
            assert!(f.contains(&want.to_string()), "{want}: {f:?}");
        }
    }

    #[test]
    fn a_job_template_may_not_bring_its_own_selector() {
        let mut cj = cron_job(json!({}));
        cj["spec"]["jobTemplate"]["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
        cj["spec"]["jobTemplate"]["spec"]["manualSelector"] = json!(true);
        let c = causes(&cj, None);
        let by_field = |f: &str| c.iter().find(|c| c.field == f).map(|c| c.message.clone()).unwrap_or_default();
        assert!(by_field("spec.jobTemplate.spec.selector").ends_with("`selector` will be auto-generated"));
        assert_eq!(
            by_field("spec.jobTemplate.spec.manualSelector"),
            "Unsupported value: true: supported values: \"nil\", \"false\""
        );
    }

    #[test]
    fn a_new_cron_job_name_leaves_room_for_the_job_suffix() {
        let mut cj = cron_job(json!({}));
        cj["metadata"]["name"] = json!("a".repeat(53));
        assert_eq!(fields(&cj, None), ["metadata.name"]);
        // Names stored before the limit stay updatable.
        assert!(causes(&cj, Some(&cj.clone())).is_empty());
    }
}
