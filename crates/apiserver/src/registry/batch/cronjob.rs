//! The CronJob strategy (`pkg/registry/batch/cronjob/strategy.go`): `PrepareForCreate` drops
//! the status (only the controller writes it, through `/status`), and the warnings kubectl
//! prints on create and update. Validation and what may change on update are
//! `skiff_apimachinery::validation::cronjob`.

use serde_json::Value;
use skiff_apimachinery::names::is_dns1123_label;

/// `PrepareForCreate`: no status.
pub fn prepare_for_create(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
}

/// `WarningsOnCreate`: a name that is not a DNS label makes surprising pod names and hostnames.
pub fn warnings_on_create(obj: &Value) -> Vec<String> {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let msgs = is_dns1123_label(name);
    if msgs.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "metadata.name: this is used in Pod names and hostnames, which can result in surprising behavior; a DNS label is recommended: [{}]",
        msgs.join(" ")
    )]
}

/// `WarningsOnUpdate`: a schedule that still carries a `TZ=`/`CRON_TZ=` prefix (allowed only
/// because it was stored before the `timeZone` field).
pub fn warnings_on_update(obj: &Value) -> Vec<String> {
    let schedule = obj.pointer("/spec/schedule").and_then(Value::as_str).unwrap_or("");
    if !schedule.contains("TZ") {
        return Vec::new();
    }
    // Kubernetes names the field `spec.spec.schedule` in this message; kept as it says it.
    vec!["cannot use TZ or CRON_TZ in spec.spec.schedule, use timeZone instead, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details".into()]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_status_of_a_created_cron_job_is_dropped() {
        let mut cj = json!({"metadata": {"name": "tick"}, "status": {"lastScheduleTime": "2026-12-02T10:00:00Z"}});
        prepare_for_create(&mut cj);
        assert!(cj.get("status").is_none());
    }

    #[test]
    fn a_name_that_is_no_dns_label_is_warned_about() {
        assert!(warnings_on_create(&json!({"metadata": {"name": "tick"}})).is_empty());
        let w = warnings_on_create(&json!({"metadata": {"name": "tick.tock"}}));
        assert_eq!(w.len(), 1);
        assert!(w[0].starts_with("metadata.name: this is used in Pod names and hostnames"), "{w:?}");
    }

    #[test]
    fn an_update_keeping_a_tz_schedule_is_warned_about() {
        assert!(warnings_on_update(&json!({"spec": {"schedule": "0 * * * *"}})).is_empty());
        assert_eq!(warnings_on_update(&json!({"spec": {"schedule": "TZ=UTC 0 * * * *"}})).len(), 1);
    }
}
