//! CronJobs end to end with the real kubectl on simulated nodes: the 422s of bad schedules and
//! time zones, `kubectl create job --from=cronjob/…`, a `*/1 * * * *` CronJob's first scheduled
//! run (the real clock: up to two minutes), `lastScheduleTime`/`lastSuccessfulTime`, and the
//! successful-jobs history trimmed to its limit.

mod common;

use common::Server;

/// A CronJob whose pods the simulated nodes report Succeeded.
const TICK: &str = r#"
apiVersion: batch/v1
kind: CronJob
metadata:
  name: tick
spec:
  schedule: "*/1 * * * *"
  successfulJobsHistoryLimit: 1
  jobTemplate:
    spec:
      template:
        metadata:
          annotations:
            skiff.io/simulated-phase: Succeeded
        spec:
          restartPolicy: Never
          containers:
          - name: tick
            image: busybox
"#;

/// The Jobs' names and whether each is Complete.
fn jobs(server: &Server) -> Vec<(String, bool)> {
    let list = server.json(&["get", "jobs"]);
    let mut out: Vec<(String, bool)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let complete = j["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Complete" && c["status"] == "True"));
            (j["metadata"]["name"].as_str().unwrap().to_string(), complete)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn bad_schedules_and_time_zones_are_refused_with_kubernetes_messages() {
    let server = Server::start();
    let bad = |field: &str, value: &str| TICK.replace("  schedule: \"*/1 * * * *\"", &format!("  {field}: {value}"));
    let out = server.apply_stdin(&["create", "-f", "-"], &bad("schedule", "\"* *\""));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"spec.schedule: Invalid value: "* *": expected exactly 5 fields, found 2: [* *]"#), "{err}");
    let out = server.apply_stdin(&["create", "-f", "-"], &bad("schedule", "\"TZ=UTC 0 * * * *\""));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot use TZ or CRON_TZ in schedule, use timeZone field instead"), "{err}");
    let zone = TICK.replace("  successfulJobsHistoryLimit: 1", "  timeZone: Mars/Olympus");
    let out = server.apply_stdin(&["create", "-f", "-"], &zone);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus"#), "{err}");
    // Nothing was half-created.
    assert!(server.ok(&["get", "cronjobs", "-o", "name"]).trim().is_empty());
}

#[test]
fn a_cron_job_runs_on_its_schedule_and_keeps_its_history_limit() {
    let server = Server::start_with(&["--simulated-nodes", "1"]);
    server.ok_stdin(&["apply", "-f", "-"], TICK);

    // A manual run (client-side in kubectl: a Job owned by the CronJob) completes.
    server.ok(&["create", "job", "manual", "--from=cronjob/tick"]);
    server.ok(&["wait", "--for=condition=complete", "job/manual", "--timeout=60s"]);

    // The first scheduled run: at the next whole minute, named after it.
    let scheduled = server.eventually(150, "a scheduled Job that completed", || {
        jobs(&server).into_iter().find(|(name, complete)| name.starts_with("tick-") && *complete).map(|(n, _)| n)
    });
    let minutes: i64 = scheduled.trim_start_matches("tick-").parse().unwrap();
    let job = server.json(&["get", "job", &scheduled]);
    let stamp = job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"].as_str().unwrap();
    assert!(stamp.ends_with(":00Z"), "{stamp}");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    assert!(minutes > 0);

    // The CronJob's status follows: scheduled, succeeded, nothing active.
    let status = server.eventually(60, "lastSuccessfulTime", || {
        let cj = server.json(&["get", "cronjob", "tick"]);
        cj["status"]["lastSuccessfulTime"].is_string().then(|| cj["status"].clone())
    });
    assert!(status["lastScheduleTime"].is_string(), "{status}");

    // successfulJobsHistoryLimit 1: of the manual and the scheduled run, the older goes.
    server.eventually(60, "the history trimmed to one successful Job", || {
        let names: Vec<String> = jobs(&server).into_iter().filter(|(_, c)| *c).map(|(n, _)| n).collect();
        (names.len() == 1 && names[0].starts_with("tick-")).then_some(())
    });
    let events = server.ok(&["get", "events", "--field-selector", "involvedObject.kind=CronJob"]);
    assert!(events.contains("SuccessfulCreate"), "{events}");
}

#[test]
fn a_restarted_controller_runs_a_time_missed_while_down_once_inside_the_deadline() {
    let mut server = Server::start_with(&["--simulated-nodes", "1"]);
    // Pods that keep running, so every run stays in the active list (concurrencyPolicy Allow).
    let running = TICK
        .replace("        metadata:\n          annotations:\n            skiff.io/simulated-phase: Succeeded\n", "")
        .replace("  successfulJobsHistoryLimit: 1", "  startingDeadlineSeconds: 100");
    server.ok_stdin(&["apply", "-f", "-"], &running);
    let first = server.eventually(150, "the first scheduled Job", || {
        jobs(&server).into_iter().map(|(n, _)| n).find(|n| n.starts_with("tick-"))
    });
    let minute: u64 = first.trim_start_matches("tick-").parse().unwrap();

    // Down across the next schedule time.
    server.kill9();
    let next = std::time::UNIX_EPOCH + std::time::Duration::from_secs((minute + 1) * 60 + 1);
    while std::time::SystemTime::now() < next {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    server.spawn();

    let missed = format!("tick-{}", minute + 1);
    server.eventually(90, "the Job of the time missed while down", || {
        jobs(&server).into_iter().any(|(n, _)| n == missed).then_some(())
    });
    // Both runs are active, each once: the first was not created again after the restart.
    let active = server.eventually(30, "both runs in the active list", || {
        let cj = server.json(&["get", "cronjob", "tick"]);
        let mut names: Vec<String> =
            cj["status"]["active"].as_array()?.iter().filter_map(|r| r["name"].as_str().map(str::to_string)).collect();
        names.sort();
        names.contains(&missed).then_some(names)
    });
    let mut unique = active.clone();
    unique.dedup();
    assert_eq!(active, unique, "a run listed twice");
    assert!(active.contains(&first), "{active:?}");
}
