//! One scrape of the API server's `/metrics` shows the whole control plane: the API server's
//! request metrics next to the controller manager's reconcile and workqueue metrics and the
//! scheduler's attempt, queue and extension point metrics.

mod common;

use std::time::{Duration, Instant};

use common::Server;

/// The value of the first sample whose line starts with `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn metrics_show_controller_reconciles_after_a_deployment_is_created() {
    let server = Server::start();
    server.ok(&["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = server.ok(&["get", "--raw", "/metrics"]);
        let deployment = sample(&text, r#"controller_reconcile_total{controller="deployment",result="success"}"#);
        let replicaset = sample(&text, r#"controller_reconcile_total{controller="replicaset",result="success"}"#);
        // The deployment's pods get a scheduling attempt (scheduled, or unschedulable without a node).
        let attempted = text.lines().any(|l| l.starts_with("scheduler_schedule_attempts_total{"));
        if deployment.unwrap_or(0.0) >= 1.0 && replicaset.unwrap_or(0.0) >= 1.0 && attempted {
            break text;
        }
        assert!(Instant::now() < deadline, "no controller reconciles on /metrics:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for series in [
        r#"controller_reconcile_duration_seconds_count{controller="deployment"}"#,
        r#"controller_reconcile_errors_total{controller="deployment"}"#,
        r#"controller_resource_version_conflicts_total{controller="replicaset"}"#,
        r#"workqueue_depth{name="deployment"}"#,
        r#"workqueue_adds_total{name="replicaset"}"#,
        r#"workqueue_retries_total{name="replicaset"}"#,
        r#"workqueue_work_duration_seconds_count{name="deployment"}"#,
        r#"workqueue_queue_duration_seconds_count{name="replicaset"}"#,
        r#"scheduler_pending_pods{queue="active"}"#,
        r#"scheduler_pending_pods{queue="gated"}"#,
        r#"scheduler_preemption_attempts_total"#,
    ] {
        assert!(sample(&text, series).is_some(), "{series} missing from /metrics:\n{text}");
    }
    assert!(
        sample(&text, r#"workqueue_adds_total{name="deployment"}"#).unwrap_or(0.0) >= 1.0,
        "the deployment queue saw no adds:\n{text}"
    );
    assert!(text.contains("scheduler_scheduling_attempt_duration_seconds_count{"), "{text}");
    // The API server's own families are in the same exposition.
    assert!(text.contains(r#"apiserver_request_total{verb="POST",group="apps",resource="deployments""#), "{text}");
}
