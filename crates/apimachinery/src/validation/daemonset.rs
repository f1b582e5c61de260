//! apps/v1 DaemonSet: `ValidateDaemonSet`/`ValidateDaemonSetUpdate` of
//! `pkg/apis/apps/validation` (Kubernetes 1.33): a non-empty selector matching the template's
//! labels and immutable, a pod template that always restarts, and an update strategy whose
//! `maxUnavailable`/`maxSurge` are non-negative integers or percentages up to 100 % with exactly
//! one of them non-zero.

use serde_json::Value;

use super::{Errs, percent_or_int, validate_selector, validate_selector_immutable, validate_template};

/// The update strategies of a DaemonSet (`apps.DaemonSetUpdateStrategyType`).
pub const UPDATE_STRATEGY_TYPES: [&str; 2] = ["RollingUpdate", "OnDelete"];

/// Create (`old` = `None`) or update of a DaemonSet.
pub(super) fn validate_daemon_set(e: &mut Errs, o: &Value, old: Option<&Value>) {
    let Some(spec) = o.get("spec") else {
        e.required("spec", "");
        return;
    };
    let sel = validate_selector(e, spec, "daemonset");
    let first_template_cause = e.0.len();
    validate_template(e, spec, &["Always"], sel.as_ref());
    // The shared template check names ReplicaSet; Kubernetes names the kind at hand.
    for c in &mut e.0[first_template_cause..] {
        if c.field == "spec.template.spec.activeDeadlineSeconds" {
            c.message = "Forbidden: activeDeadlineSeconds in DaemonSet is not Supported".to_string();
        }
    }
    e.non_negative("spec.minReadySeconds", spec.get("minReadySeconds"));
    e.non_negative("spec.revisionHistoryLimit", spec.get("revisionHistoryLimit"));
    validate_update_strategy(e, spec.get("updateStrategy"));
    validate_selector_immutable(e, spec, old);
}

/// `ValidateDaemonSetUpdateStrategy` and `ValidateRollingUpdateDaemonSet`.
fn validate_update_strategy(e: &mut Errs, strategy: Option<&Value>) {
    let Some(strategy) = strategy.filter(|v| !v.is_null()) else { return };
    let ty = strategy.get("type").cloned().unwrap_or(Value::Null);
    match ty.as_str() {
        Some("OnDelete") => {}
        Some("RollingUpdate") => match strategy.get("rollingUpdate").filter(|v| !v.is_null()) {
            None => e.required("spec.updateStrategy.rollingUpdate", ""),
            Some(ru) => validate_rolling_update_daemon_set(e, ru),
        },
        _ => e.not_supported("spec.updateStrategy", &ty, &UPDATE_STRATEGY_TYPES),
    }
}

fn validate_rolling_update_daemon_set(e: &mut Errs, ru: &Value) {
    let mut non_zero = [false, false];
    for (i, f) in ["maxUnavailable", "maxSurge"].into_iter().enumerate() {
        let Some(v) = ru.get(f).filter(|v| !v.is_null()) else { continue };
        let p = format!("spec.updateStrategy.rollingUpdate.{f}");
        match percent_or_int(v) {
            Err(m) => e.invalid(&p, v, &m),
            Ok((n, pct)) => {
                if n < 0 {
                    e.invalid(&p, v, "must be greater than or equal to 0");
                } else if pct && n > 100 {
                    e.invalid(&p, v, "must not be greater than 100%");
                }
                non_zero[i] = n != 0;
            }
        }
    }
    match non_zero {
        [true, true] => e.invalid(
            "spec.updateStrategy.rollingUpdate.maxSurge",
            ru.get("maxSurge").unwrap_or(&Value::Null),
            "may not be set when maxUnavailable is non-zero",
        ),
        [false, false] => {
            e.required("spec.updateStrategy.rollingUpdate.maxUnavailable", "cannot be 0 when maxSurge is 0")
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::validate;

    fn ds(update_strategy: Value) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "updateStrategy": update_strategy,
                "revisionHistoryLimit": 10,
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"restartPolicy": "Always", "containers": [{"name": "a", "image": "busybox"}]}
                }
            }
        })
    }

    fn causes(obj: &Value, old: Option<&Value>) -> Vec<String> {
        validate("apps/v1", "DaemonSet", obj, old).into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn a_rolling_update_daemon_set_with_max_unavailable_one_is_valid() {
        let obj = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}));
        assert_eq!(causes(&obj, None), Vec::<String>::new());
        let on_delete = ds(json!({"type": "OnDelete"}));
        assert_eq!(causes(&on_delete, None), Vec::<String>::new());
        let surge = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "10%"}}));
        assert_eq!(causes(&surge, None), Vec::<String>::new());
    }

    #[test]
    fn max_unavailable_and_max_surge_may_not_both_be_zero_nor_both_non_zero() {
        let zero = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "0%", "maxSurge": 0}}));
        assert_eq!(
            causes(&zero, None),
            ["spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"]
        );
        let both = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}}));
        assert_eq!(
            causes(&both, None),
            [
                "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: may not be set when maxUnavailable is non-zero"
            ]
        );
    }

    #[test]
    fn rolling_update_values_are_non_negative_integers_or_percentages_up_to_100() {
        let obj = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": -1, "maxSurge": "150%"}}));
        let got = causes(&obj, None);
        assert!(got.contains(&"spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: -1: must be greater than or equal to 0".to_string()), "{got:?}");
        assert!(
            got.contains(
                &"spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"150%\": must not be greater than 100%"
                    .to_string()
            ),
            "{got:?}"
        );
        let word = ds(json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "one"}}));
        assert!(causes(&word, None)[0].starts_with(
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"one\": a valid percent string"
        ));
    }

    #[test]
    fn an_unknown_update_strategy_is_not_supported() {
        let obj = ds(json!({"type": "Recreate"}));
        assert_eq!(
            causes(&obj, None),
            ["spec.updateStrategy: Unsupported value: \"Recreate\": supported values: \"RollingUpdate\", \"OnDelete\""]
        );
    }

    #[test]
    fn the_selector_must_match_the_template_and_may_not_change() {
        let mut obj = ds(json!({"type": "OnDelete"}));
        obj["spec"]["template"]["metadata"]["labels"] = json!({"app": "other"});
        assert_eq!(
            causes(&obj, None),
            [
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`"
            ]
        );
        let old = ds(json!({"type": "OnDelete"}));
        let mut new = old.clone();
        new["spec"]["selector"] = json!({"matchLabels": {"app": "agent", "tier": "x"}});
        new["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
        let got = causes(&new, Some(&old));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("spec.selector: Invalid value: "), "{got:?}");
        assert!(got[0].ends_with("field is immutable"), "{got:?}");
    }

    #[test]
    fn a_daemon_set_pod_must_restart_always_and_has_no_active_deadline() {
        let mut obj = ds(json!({"type": "OnDelete"}));
        obj["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        obj["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(10);
        let got = causes(&obj, None);
        assert!(
            got.contains(
                &"spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""
                    .to_string()
            ),
            "{got:?}"
        );
        assert!(got.contains(&"spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported".to_string()), "{got:?}");
    }

    #[test]
    fn an_empty_selector_is_invalid() {
        let mut obj = ds(json!({"type": "OnDelete"}));
        obj["spec"]["selector"] = json!({});
        let got = causes(&obj, None);
        assert!(
            got.iter()
                .any(|c| c.starts_with("spec.selector: ") && c.ends_with("empty selector is invalid for daemonset")),
            "{got:?}"
        );
    }
}
