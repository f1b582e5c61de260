//! The CronJob controller's pure helpers (`pkg/controller/cronjob/utils.go`): the schedule
//! arithmetic — the most recent unmet schedule time, how many were missed, when to look again —,
//! the active list, and the Job made from the template.

use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use skiff_apimachinery::cron::{Schedule, load_location};

use crate::util::{finished_condition, name_of, new_controller_ref};

/// The annotation carrying a Job's scheduled time, RFC 3339 in the CronJob's time zone
/// (`batch.kubernetes.io/cronjob-scheduled-timestamp`).
pub const SCHEDULED_TIMESTAMP_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// The padding added to every requeue (`nextScheduleDelta`), so that a clock a little behind
/// still finds the schedule time passed when the key comes back.
pub const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

/// More unmet schedule times than this since the last one is "too many" (`TooManyMissedTimes`).
pub const TOO_MANY_MISSED: i64 = 100;

/// How many schedule times passed unmet (`missedSchedulesType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    /// None.
    None,
    /// Up to [`TOO_MANY_MISSED`].
    Few,
    /// More than [`TOO_MANY_MISSED`].
    Many,
}

/// The error of a schedule that names no real time twice (`0 0 31 2 *`), Kubernetes' message.
pub const NEVER_FIRES: &str = "time difference between two schedules is less than 1 second";

/// `mostRecentScheduleTime`: from the last schedule time (else the creation time; with
/// `include_deadline`, no earlier than `startingDeadlineSeconds` ago), the earliest time
/// considered, the most recent schedule time not after `now` (if any) and how many were missed.
///
/// # Errors
/// [`NEVER_FIRES`] for a schedule without two successive times.
pub fn most_recent_schedule_time(
    cj: &CronJob,
    now: Timestamp,
    schedule: &Schedule,
    include_deadline: bool,
) -> Result<(Timestamp, Option<Timestamp>, Missed), String> {
    let mut earliest = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0)
        .or_else(|| cj.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now);
    if include_deadline && let Some(deadline) = cj.spec.as_ref().and_then(|s| s.starting_deadline_seconds) {
        let from = now.checked_sub(SignedDuration::from_secs(deadline)).unwrap_or(now);
        if from > earliest {
            earliest = from;
        }
    }
    let (Some(t1), Some(t2)) = (schedule.next(earliest), schedule.next(earliest).and_then(|t| schedule.next(t))) else {
        return Err(NEVER_FIRES.into());
    };
    if now < t1 {
        return Ok((earliest, None, Missed::None));
    }
    if now < t2 {
        return Ok((earliest, Some(t1), Missed::None));
    }
    let between = t2.duration_since(t1).as_secs();
    if between < 1 {
        return Err(NEVER_FIRES.into());
    }
    // A rough count, as Kubernetes makes it: how many intervals like the first fit until now.
    let elapsed = now.duration_since(t1).as_secs();
    let missed = elapsed / between + 1;
    // Start one interval before the estimate and let the schedule find the exact times, so that
    // irregular schedules (`30 6-16/4 * * 1-5`) still end on the right one.
    let start = t1.checked_add(SignedDuration::from_secs((missed - 2) * between)).unwrap_or(t1);
    let mut most_recent = None;
    let mut t = schedule.next(start);
    while let Some(at) = t.filter(|at| *at <= now) {
        most_recent = Some(at);
        t = schedule.next(at);
    }
    let kind = if missed > TOO_MANY_MISSED { Missed::Many } else { Missed::Few };
    Ok((earliest, most_recent, kind))
}

/// `nextScheduleTimeDuration`: how long until the key should be synced again — the schedule
/// time after the most recent one (or after now, when times were missed or the schedule is
/// broken), plus [`NEXT_SCHEDULE_DELTA`]; `None` for a schedule with no next time.
pub fn next_schedule_time_duration(cj: &CronJob, now: Timestamp, schedule: &Schedule) -> Option<Duration> {
    let from = match most_recent_schedule_time(cj, now, schedule, false) {
        Err(_) => now,
        Ok((_, Some(t), _)) => t,
        Ok((earliest, None, Missed::None)) => earliest,
        Ok((_, None, _)) => now,
    };
    let next = schedule.next(from)?;
    let wait = next.duration_since(now).as_millis().max(0) as u64;
    Some(Duration::from_millis(wait) + NEXT_SCHEDULE_DELTA)
}

/// `nextScheduleTime`: the most recent unmet schedule time not after `now` (within the starting
/// deadline), and whether more than [`TOO_MANY_MISSED`] were missed before it.
///
/// # Errors
/// As [`most_recent_schedule_time`].
pub fn next_schedule_time(
    cj: &CronJob,
    now: Timestamp,
    schedule: &Schedule,
) -> Result<(Option<Timestamp>, bool), String> {
    let (_, most_recent, missed) = most_recent_schedule_time(cj, now, schedule, true)?;
    match most_recent {
        Some(t) if t <= now => Ok((Some(t), missed == Missed::Many)),
        _ => Ok((None, false)),
    }
}

/// The CronJob's schedule in its time zone (`formatSchedule` + `cron.ParseStandard`): a
/// `TZ=` prefix in the schedule wins over `spec.timeZone`.
///
/// # Errors
/// The parser's message.
pub fn schedule_of(cj: &CronJob) -> Result<Schedule, String> {
    let spec = cj.spec.as_ref();
    let text = spec.map(|s| s.schedule.as_str()).unwrap_or_default();
    let schedule = skiff_apimachinery::cron::parse_standard(text)?;
    if text.contains("TZ") {
        return Ok(schedule);
    }
    Ok(match spec.and_then(|s| s.time_zone.as_deref()).map(load_location) {
        Some(Ok(tz)) => schedule.in_time_zone(tz),
        _ => schedule,
    })
}

/// `getJobName`: `<cronjob>-<scheduled time in minutes since the epoch>`, the same for every
/// attempt at one schedule time, so a second create of a run collides instead of duplicating it.
pub fn job_name(cj: &CronJob, scheduled: Timestamp) -> String {
    format!("{}-{}", name_of(&cj.metadata), scheduled.as_second().div_euclid(60))
}

/// Go's `time.RFC3339` of `t` in the CronJob's time zone (`Z` for a zero offset).
fn rfc3339_in(cj: &CronJob, t: Timestamp) -> String {
    let tz = cj.spec.as_ref().and_then(|s| s.time_zone.as_deref()).and_then(|n| load_location(n).ok());
    let zoned = t.to_zoned(tz.unwrap_or(k8s_openapi::jiff::tz::TimeZone::UTC));
    let base = zoned.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let offset = zoned.offset().seconds();
    if offset == 0 {
        return format!("{base}Z");
    }
    let (sign, abs) = if offset < 0 { ('-', -offset) } else { ('+', offset) };
    format!("{base}{sign}{:02}:{:02}", abs / 3600, abs % 3600 / 60)
}

/// `getJobFromTemplate2`: the Job of one schedule time — the template's labels, annotations
/// (plus [`SCHEDULED_TIMESTAMP_ANNOTATION`]) and spec, named by [`job_name`], controlled by the
/// CronJob.
pub fn job_from_template(cj: &CronJob, scheduled: Timestamp) -> Job {
    let template = cj.spec.as_ref().map(|s| s.job_template.clone()).unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIMESTAMP_ANNOTATION.into(), rfc3339_in(cj, scheduled));
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(cj, scheduled)),
            namespace: cj.metadata.namespace.clone(),
            labels: meta.labels,
            annotations: Some(annotations),
            creation_timestamp: Some(Time(scheduled)),
            owner_references: Some(vec![new_controller_ref(cj)]),
            ..Default::default()
        },
        spec: Some(template.spec.unwrap_or_default()),
        status: None,
    }
}

/// `inActiveList`: the active list holds a Job with this uid.
pub fn in_active_list(cj: &CronJob, uid: &str) -> bool {
    active(cj).iter().any(|r| r.uid.as_deref() == Some(uid))
}

/// `inActiveListByName`.
pub fn in_active_list_by_name(cj: &CronJob, namespace: Option<&str>, name: &str) -> bool {
    active(cj).iter().any(|r| r.name.as_deref() == Some(name) && r.namespace.as_deref() == namespace)
}

/// `deleteFromActiveList`.
pub fn delete_from_active_list(cj: &mut CronJob, uid: &str) {
    if let Some(list) = cj.status.as_mut().and_then(|s| s.active.as_mut()) {
        list.retain(|r| r.uid.as_deref() != Some(uid));
    }
}

/// The active list (empty when unset).
pub fn active(cj: &CronJob) -> &[ObjectReference] {
    cj.status.as_ref().and_then(|s| s.active.as_deref()).unwrap_or_default()
}

/// `getFinishedStatus`: the type of the Job's true `Complete` or `Failed` condition.
pub fn finished_status(job: &Job) -> Option<&str> {
    finished_condition(job).map(|c| c.type_.as_str())
}

/// `byJobStartTime`: oldest `status.startTime` first, Jobs never started last, ties by name.
pub fn sort_by_start_time(jobs: &mut [&Job]) {
    let start = |j: &Job| j.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
    jobs.sort_by(|a, b| match (start(a), start(b)) {
        (Some(x), Some(y)) if x != y => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        _ => name_of(&a.metadata).cmp(name_of(&b.metadata)),
    });
}
