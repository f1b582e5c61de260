//! From a metrics recommendation to the replica count the HPA sets
//! (`normalizeDesiredReplicas*` of `horizontal.go`, Kubernetes 1.33): stabilization over the
//! recent recommendations, then the rate limits — the fixed ones (at most ×2 or +4 per sync,
//! clamped to min/max) without `spec.behavior`, or the behavior's policies over the recent scale
//! events. Each step returns the reason and message of the condition it sets.

use k8s_openapi::api::autoscaling::v2::{HPAScalingPolicy, HPAScalingRules};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A recommendation and when it was made (`timestampedRecommendation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recommendation {
    /// Recommended replicas.
    pub replicas: i32,
    /// When.
    pub at: Timestamp,
}

/// A scale change and when it happened (`timestampedScaleEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleEvent {
    /// Replicas added (scale up) or removed (scale down), positive.
    pub change: i32,
    /// When.
    pub at: Timestamp,
    /// Older than the longest policy period: may be overwritten.
    pub outdated: bool,
}

/// Condition reasons and messages.
pub const SCALE_UP_LIMIT: (&str, &str) =
    ("ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate");
/// See [`SCALE_UP_LIMIT`].
pub const SCALE_DOWN_LIMIT: (&str, &str) =
    ("ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate");
/// See [`SCALE_UP_LIMIT`].
pub const TOO_MANY_REPLICAS: (&str, &str) =
    ("TooManyReplicas", "the desired replica count is more than the maximum replica count");
/// See [`SCALE_UP_LIMIT`].
pub const TOO_FEW_REPLICAS: (&str, &str) =
    ("TooFewReplicas", "the desired replica count is less than the minimum replica count");
/// See [`SCALE_UP_LIMIT`].
pub const DESIRED_WITHIN_RANGE: (&str, &str) =
    ("DesiredWithinRange", "the desired count is within the acceptable range");
/// See [`SCALE_UP_LIMIT`].
pub const SCALE_UP_STABILIZED: (&str, &str) = (
    "ScaleUpStabilized",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
);
/// See [`SCALE_UP_LIMIT`].
pub const SCALE_DOWN_STABILIZED: (&str, &str) = (
    "ScaleDownStabilized",
    "recent recommendations were higher than current one, applying the highest recent recommendation",
);

fn before(t: Timestamp, secs: i64) -> Timestamp {
    t.checked_sub(SignedDuration::from_secs(secs)).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `stabilizeRecommendation` (no behavior): the highest recommendation within the downscale
/// window, recording `desired` (over the oldest sample outside the window, if any).
pub fn stabilize(recs: &mut Vec<Recommendation>, desired: i32, window_secs: i64, now: Timestamp) -> i32 {
    let cutoff = before(now, window_secs);
    let mut max = desired;
    let mut old = None;
    for (i, r) in recs.iter().enumerate() {
        if r.at < cutoff {
            old = Some(i);
        } else if r.replicas > max {
            max = r.replicas;
        }
    }
    let rec = Recommendation { replicas: desired, at: now };
    match old {
        Some(i) => recs[i] = rec,
        None => recs.push(rec),
    }
    max
}

/// `calculateScaleUpLimit`: twice the current count, at least 4.
pub fn scale_up_limit(current: i32) -> i32 {
    (2.0 * f64::from(current)).max(4.0) as i32
}

/// `convertDesiredReplicasWithRules`: clamps to `[min, min(max, scale_up_limit)]`.
pub fn with_rules(current: i32, desired: i32, min: i32, max: i32) -> (i32, (&'static str, &'static str)) {
    let limit = scale_up_limit(current);
    let (maximum, limiting) = if max > limit { (limit, SCALE_UP_LIMIT) } else { (max, TOO_MANY_REPLICAS) };
    if desired < min {
        (min, TOO_FEW_REPLICAS)
    } else if desired > maximum {
        (maximum, limiting)
    } else {
        (desired, DESIRED_WITHIN_RANGE)
    }
}

/// `stabilizeRecommendationWithBehaviors`: the recommendation held within the lowest recent
/// one (scale-up window) and the highest (scale-down window), recording `desired`.
pub fn stabilize_with_behaviors(
    recs: &mut Vec<Recommendation>,
    current: i32,
    desired: i32,
    up_window_secs: i64,
    down_window_secs: i64,
    now: Timestamp,
) -> (i32, (&'static str, &'static str)) {
    let (up_cutoff, down_cutoff) = (before(now, up_window_secs), before(now, down_window_secs));
    let (mut up, mut down) = (desired, desired);
    let mut old = None;
    for (i, r) in recs.iter().enumerate() {
        if r.at > up_cutoff {
            up = up.min(r.replicas);
        }
        if r.at > down_cutoff {
            down = down.max(r.replicas);
        }
        if r.at < up_cutoff && r.at < down_cutoff {
            old = Some(i);
        }
    }
    let recommendation = current.max(up).min(down);
    let rec = Recommendation { replicas: desired, at: now };
    match old {
        Some(i) => recs[i] = rec,
        None => recs.push(rec),
    }
    let why = if desired >= current { SCALE_UP_STABILIZED } else { SCALE_DOWN_STABILIZED };
    (recommendation, why)
}

/// `getReplicasChangePerPeriod`: replicas changed by the events within the last `period_secs`.
pub fn change_in_period(period_secs: i32, events: &[ScaleEvent], now: Timestamp) -> i32 {
    let cutoff = before(now, i64::from(period_secs));
    events.iter().filter(|e| e.at > cutoff).map(|e| e.change).sum()
}

fn policies(rules: &HPAScalingRules) -> &[HPAScalingPolicy] {
    rules.policies.as_deref().unwrap_or(&[])
}

/// `calculateScaleUpLimitWithScalingRules`.
pub fn scale_up_limit_with_rules(
    current: i32,
    up_events: &[ScaleEvent],
    down_events: &[ScaleEvent],
    rules: &HPAScalingRules,
    now: Timestamp,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    let mut result = if select == "Min" { i32::MAX } else { i32::MIN };
    for p in policies(rules) {
        let start = current - change_in_period(p.period_seconds, up_events, now)
            + change_in_period(p.period_seconds, down_events, now);
        let proposed = match p.type_.as_str() {
            "Pods" => start + p.value,
            _ => (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32,
        };
        result = if select == "Min" { result.min(proposed) } else { result.max(proposed) };
    }
    result
}

/// `calculateScaleDownLimitWithBehaviors`.
pub fn scale_down_limit_with_rules(
    current: i32,
    up_events: &[ScaleEvent],
    down_events: &[ScaleEvent],
    rules: &HPAScalingRules,
    now: Timestamp,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    // For scaling down the smallest change (Min) is the highest count.
    let mut result = if select == "Min" { i32::MIN } else { i32::MAX };
    for p in policies(rules) {
        let start = current - change_in_period(p.period_seconds, up_events, now)
            + change_in_period(p.period_seconds, down_events, now);
        let proposed = match p.type_.as_str() {
            "Pods" => start - p.value,
            _ => (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)) as i32,
        };
        result = if select == "Min" { result.max(proposed) } else { result.min(proposed) };
    }
    result
}

/// The inputs of [`with_behavior_rate`] (`NormalizationArg`).
#[derive(Debug, Clone, Copy)]
pub struct NormalizationArg<'a> {
    /// `spec.behavior.scaleUp` (defaulted).
    pub scale_up: &'a HPAScalingRules,
    /// `spec.behavior.scaleDown` (defaulted).
    pub scale_down: &'a HPAScalingRules,
    /// `spec.minReplicas`.
    pub min: i32,
    /// `spec.maxReplicas`.
    pub max: i32,
    /// The target's current count.
    pub current: i32,
    /// The stabilized recommendation.
    pub desired: i32,
}

/// `convertDesiredReplicasWithBehaviorRate`.
pub fn with_behavior_rate(
    a: NormalizationArg<'_>,
    up_events: &[ScaleEvent],
    down_events: &[ScaleEvent],
    now: Timestamp,
) -> (i32, (&'static str, &'static str)) {
    if a.desired > a.current {
        // Until old events expire, never below the current count.
        let limit = scale_up_limit_with_rules(a.current, up_events, down_events, a.scale_up, now).max(a.current);
        let (maximum, why) = if a.max > limit { (limit, SCALE_UP_LIMIT) } else { (a.max, TOO_MANY_REPLICAS) };
        if a.desired > maximum {
            return (maximum, why);
        }
    } else if a.desired < a.current {
        let limit = scale_down_limit_with_rules(a.current, up_events, down_events, a.scale_down, now).min(a.current);
        let (minimum, why) = if a.min < limit { (limit, SCALE_DOWN_LIMIT) } else { (a.min, TOO_FEW_REPLICAS) };
        if a.desired < minimum {
            return (minimum, why);
        }
    }
    (a.desired, DESIRED_WITHIN_RANGE)
}

/// `storeScaleEvent` for one direction's events: marks events older than the longest policy
/// period outdated and records `change` over an outdated one (or appends it).
pub fn store_scale_event(events: &mut Vec<ScaleEvent>, rules: Option<&HPAScalingRules>, change: i32, now: Timestamp) {
    let longest = rules.map(|r| policies(r).iter().map(|p| p.period_seconds).max().unwrap_or(0)).unwrap_or(0);
    let cutoff = before(now, i64::from(longest));
    let mut old = None;
    for (i, e) in events.iter_mut().enumerate() {
        if e.at < cutoff {
            e.outdated = true;
        }
        if e.outdated {
            old = Some(i);
        }
    }
    let ev = ScaleEvent { change, at: now, outdated: false };
    match old {
        Some(i) => events[i] = ev,
        None => events.push(ev),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    fn ago(secs: i64) -> Timestamp {
        before(t0(), secs)
    }

    fn policy(ty: &str, value: i32, period: i32) -> HPAScalingPolicy {
        HPAScalingPolicy { type_: ty.into(), value, period_seconds: period }
    }

    fn rules(select: &str, policies: Vec<HPAScalingPolicy>) -> HPAScalingRules {
        HPAScalingRules {
            select_policy: Some(select.into()),
            policies: Some(policies),
            stabilization_window_seconds: Some(0),
            ..Default::default()
        }
    }

    fn ev(change: i32, secs_ago: i64) -> ScaleEvent {
        ScaleEvent { change, at: ago(secs_ago), outdated: false }
    }

    #[test]
    fn without_behavior_a_scale_down_keeps_the_highest_recommendation_of_the_window() {
        // TestScaleDownStabilizeInitialSize-like: a higher recommendation 2 minutes ago wins.
        let mut recs = vec![Recommendation { replicas: 5, at: ago(120) }, Recommendation { replicas: 4, at: ago(60) }];
        assert_eq!(stabilize(&mut recs, 2, 300, t0()), 5);
        assert_eq!(recs.len(), 3);
        // Outside the 5 minute window the old sample is replaced, and no longer counts.
        let mut recs = vec![Recommendation { replicas: 9, at: ago(301) }];
        assert_eq!(stabilize(&mut recs, 2, 300, t0()), 2);
        assert_eq!(recs, vec![Recommendation { replicas: 2, at: t0() }]);
    }

    #[test]
    fn without_behavior_scale_up_is_limited_to_double_or_four() {
        assert_eq!(with_rules(1, 10, 1, 20), (4, SCALE_UP_LIMIT));
        assert_eq!(with_rules(5, 30, 1, 20), (10, SCALE_UP_LIMIT));
        assert_eq!(with_rules(5, 30, 1, 8), (8, TOO_MANY_REPLICAS));
        assert_eq!(with_rules(5, 0, 2, 8), (2, TOO_FEW_REPLICAS));
        assert_eq!(with_rules(5, 6, 2, 8), (6, DESIRED_WITHIN_RANGE));
    }

    #[test]
    fn with_behaviors_the_recommendation_is_held_between_the_windows_extremes() {
        // Scale up window 60 s, scale down window 300 s.
        let mut recs = vec![
            Recommendation { replicas: 3, at: ago(30) },
            Recommendation { replicas: 8, at: ago(200) },
            Recommendation { replicas: 1, at: ago(400) },
        ];
        // Desired 10 from 4: the lowest of the up window (3) is below current, so current stays.
        let (r, why) = stabilize_with_behaviors(&mut recs, 4, 10, 60, 300, t0());
        assert_eq!((r, why), (4, SCALE_UP_STABILIZED));
        // The sample older than both windows was overwritten.
        assert_eq!(recs.len(), 3);
        assert!(recs.contains(&Recommendation { replicas: 10, at: t0() }));
        // Desired 2 from 6: the highest of the down window (10 now, 8) holds it at 6.
        let (r, why) = stabilize_with_behaviors(&mut recs, 6, 2, 60, 300, t0());
        assert_eq!((r, why), (6, SCALE_DOWN_STABILIZED));
    }

    #[test]
    fn zero_windows_pass_the_recommendation_through() {
        let mut recs = vec![Recommendation { replicas: 8, at: ago(1) }];
        assert_eq!(stabilize_with_behaviors(&mut recs, 5, 2, 0, 0, t0()).0, 2);
    }

    #[test]
    fn scale_up_policies_select_max_min_or_disabled() {
        // From horizontal_test.go's TestCalculateScaleUpLimitWithScalingRules cases.
        let both = vec![policy("Pods", 4, 60), policy("Percent", 100, 60)];
        assert_eq!(scale_up_limit_with_rules(1, &[], &[], &rules("Max", both.clone()), t0()), 5);
        assert_eq!(scale_up_limit_with_rules(10, &[], &[], &rules("Max", both.clone()), t0()), 20);
        assert_eq!(scale_up_limit_with_rules(10, &[], &[], &rules("Min", both.clone()), t0()), 14);
        assert_eq!(scale_up_limit_with_rules(10, &[], &[], &rules("Disabled", both), t0()), 10);
        // Replicas added within the period count against it.
        let pods = rules("Max", vec![policy("Pods", 4, 60)]);
        assert_eq!(scale_up_limit_with_rules(10, &[ev(3, 30)], &[], &pods, t0()), 11);
        assert_eq!(scale_up_limit_with_rules(10, &[ev(3, 90)], &[], &pods, t0()), 14);
        // Percent rounds up.
        let pct = rules("Max", vec![policy("Percent", 10, 60)]);
        assert_eq!(scale_up_limit_with_rules(3, &[], &[], &pct, t0()), 4);
    }

    #[test]
    fn scale_down_policies_select_and_round_down() {
        let both = vec![policy("Pods", 2, 60), policy("Percent", 50, 60)];
        assert_eq!(scale_down_limit_with_rules(10, &[], &[], &rules("Max", both.clone()), t0()), 5);
        assert_eq!(scale_down_limit_with_rules(10, &[], &[], &rules("Min", both.clone()), t0()), 8);
        assert_eq!(scale_down_limit_with_rules(10, &[], &[], &rules("Disabled", both), t0()), 10);
        let pct = rules("Max", vec![policy("Percent", 30, 60)]);
        assert_eq!(scale_down_limit_with_rules(5, &[], &[], &pct, t0()), 3);
        // Replicas removed within the period count against it.
        let pods = rules("Max", vec![policy("Pods", 2, 60)]);
        assert_eq!(scale_down_limit_with_rules(8, &[], &[ev(2, 10)], &pods, t0()), 8);
    }

    #[test]
    fn the_behavior_rate_limits_with_kubernetes_reasons() {
        let up = rules("Max", vec![policy("Pods", 2, 60)]);
        let down = rules("Max", vec![policy("Pods", 1, 60)]);
        let arg =
            |current, desired| NormalizationArg { scale_up: &up, scale_down: &down, min: 1, max: 10, current, desired };
        assert_eq!(with_behavior_rate(arg(3, 9), &[], &[], t0()), (5, SCALE_UP_LIMIT));
        assert_eq!(with_behavior_rate(arg(9, 20), &[], &[], t0()), (10, TOO_MANY_REPLICAS));
        assert_eq!(with_behavior_rate(arg(5, 1), &[], &[], t0()), (4, SCALE_DOWN_LIMIT));
        assert_eq!(with_behavior_rate(arg(5, 4), &[], &[], t0()), (4, DESIRED_WITHIN_RANGE));
        // A scale up already spent within the period: the limit is the current count.
        assert_eq!(with_behavior_rate(arg(5, 9), &[ev(4, 10)], &[], t0()), (5, SCALE_UP_LIMIT));
    }

    #[test]
    fn scale_events_reuse_outdated_slots() {
        let r = rules("Max", vec![policy("Pods", 1, 60)]);
        let mut events = vec![ev(1, 120), ev(2, 10)];
        store_scale_event(&mut events, Some(&r), 3, t0());
        assert_eq!(events.len(), 2);
        assert_eq!(events[0], ScaleEvent { change: 3, at: t0(), outdated: false });
        store_scale_event(&mut events, Some(&r), 1, t0());
        assert_eq!(events.len(), 3);
    }
}
