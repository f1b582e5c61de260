//! Jobs end to end with the real kubectl on simulated nodes: a Job made with `kubectl create job`
//! (completions 3, parallelism 2) runs to Complete and `kubectl wait --for=condition=complete`
//! returns; a Job whose pods fail is Failed past its backoffLimit (BackoffLimitExceeded);
//! `kubectl logs job/x` looks only at the Job's own pods.
//!
//! Simulated nodes report a pod Succeeded or Failed when its template carries the
//! `skiff.io/simulated-phase` annotation.

mod common;

use common::Server;
use serde_json::Value;

/// `kubectl create job NAME --image=busybox` as a client-side manifest, with completions,
/// parallelism, backoffLimit and the simulated phase of its pods set, then created.
fn create_job(server: &Server, name: &str, completions: i64, parallelism: i64, backoff_limit: i64, phase: &str) {
    let manifest =
        server.ok(&["create", "job", name, "--image=busybox", "--dry-run=client", "-o", "json", "--", "true"]);
    let mut job: Value = serde_json::from_str(&manifest).unwrap();
    job["spec"]["completions"] = completions.into();
    job["spec"]["parallelism"] = parallelism.into();
    job["spec"]["backoffLimit"] = backoff_limit.into();
    job["spec"]["template"]["metadata"]["annotations"] = serde_json::json!({"skiff.io/simulated-phase": phase});
    let out = server.ok_stdin(&["create", "-f", "-"], &job.to_string());
    assert!(out.contains(&format!("job.batch/{name} created")), "{out}");
}

fn condition(job: &Value, type_: &str) -> Option<Value> {
    job["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_ && c["status"] == "True").cloned()
}

#[test]
fn a_job_completes_a_failing_job_fails_past_its_backoff_limit_and_logs_pick_the_jobs_pod() {
    let server = Server::start_with(&["--simulated-nodes", "2"]);
    server.eventually(30, "two Ready nodes", || {
        let nodes = server.json(&["get", "nodes"]);
        (nodes["items"].as_array()?.len() == 2).then_some(())
    });
    // An unrelated pod that a selector matching everything would pick.
    server.ok(&["run", "unrelated", "--image=nginx"]);

    create_job(&server, "hello", 3, 2, 6, "Succeeded");
    let out = server.ok(&["wait", "--for=condition=complete", "job/hello", "--timeout=90s"]);
    assert!(out.contains("job.batch/hello condition met"), "{out}");
    let job = server.json(&["get", "job", "hello"]);
    assert_eq!(job["status"]["succeeded"], 3, "{job}");
    assert!(job["status"]["completionTime"].is_string(), "{job}");
    assert!(condition(&job, "SuccessCriteriaMet").is_some(), "{job}");
    let pods = server.json(&["get", "pods", "-l", "batch.kubernetes.io/job-name=hello"]);
    let pods = pods["items"].as_array().unwrap();
    assert_eq!(pods.len(), 3, "{pods:?}");
    let tracked = |p: &Value| p["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    assert!(!pods.iter().any(tracked), "tracking finalizers left: {pods:?}");

    // `kubectl logs job/hello` resolves the Job's selector: one of its own three pods, never the
    // unrelated one (simulated nodes serve no logs, so the request itself fails).
    let out = server.kubectl(&["logs", "job/hello"]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("unrelated"), "{text}");
    assert!(text.contains("Found 3 pods, using pod/hello-"), "{text}");
    assert!(pods.iter().any(|p| text.contains(p["metadata"]["name"].as_str().unwrap())), "{text}");

    create_job(&server, "doomed", 1, 1, 1, "Failed");
    let out = server.ok(&["wait", "--for=condition=failed", "job/doomed", "--timeout=90s"]);
    assert!(out.contains("job.batch/doomed condition met"), "{out}");
    let job = server.json(&["get", "job", "doomed"]);
    let failed = condition(&job, "Failed").unwrap();
    assert_eq!(failed["reason"], "BackoffLimitExceeded", "{job}");
    assert_eq!(failed["message"], "Job has reached the specified backoff limit", "{job}");
    assert!(condition(&job, "FailureTarget").is_some(), "{job}");
    assert_eq!(job["status"]["failed"], 2, "{job}");
    let events = server.ok(&["get", "events", "--field-selector", "involvedObject.name=doomed"]);
    assert!(events.contains("BackoffLimitExceeded"), "{events}");
}
