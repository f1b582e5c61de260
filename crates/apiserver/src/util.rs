//! Small helpers: RFC 3339 timestamps, UIDs, generated names, JSON accessors.

use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng;
use serde_json::Value;

/// `metav1.Time` for a UNIX time in seconds: RFC 3339 in UTC, second precision
/// (`2024-05-01T12:00:00Z`).
pub fn rfc3339(unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs = unix_secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, (secs % 3600) / 60, secs % 60)
}

/// Seconds since the UNIX epoch.
pub fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// The current time as `metav1.Time`.
pub fn now() -> String {
    rfc3339(unix_now())
}

/// Parses an RFC 3339 UTC timestamp (`2024-05-01T12:00:00Z`, fractional seconds ignored) into
/// UNIX seconds.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// A random RFC 4122 version-4 UUID, as Kubernetes assigns to `metadata.uid`.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    skiff_auth::authn::serviceaccount::format_uuid(&b)
}

/// `generateName` + 5 random characters from Kubernetes' alphabet (no vowels, no confusables).
pub fn generate_name(base: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    // Kubernetes truncates the base so the result fits 63 characters.
    let base: String = base.chars().take(58).collect();
    let mut rng = rand::rng();
    let suffix: String = (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
    format!("{base}{suffix}")
}

/// `obj.metadata.<field>` as a string, or "".
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str).unwrap_or("")
}

/// A mutable `obj.metadata` object, created when missing (or replaced when not an object).
pub fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Default::default());
    }
    obj["metadata"].as_object_mut().expect("metadata is an object")
}

/// Sets `metadata.resourceVersion`.
pub fn set_resource_version(obj: &mut Value, rv: i64) {
    if obj.is_object() {
        meta_mut(obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// Follows a dotted path (`spec.nodeName`) into a JSON object.
pub fn path<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(obj, |v, k| v.get(k))
}

/// Sets `obj.<path>` to `v`, turning missing or non-object intermediate values into objects
/// (never panics, unlike `obj["a"]["b"] = v` on a non-object).
pub fn set_in(obj: &mut Value, path: &[&str], v: Value) {
    let mut cur = obj;
    for (i, k) in path.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Default::default());
        }
        let map = cur.as_object_mut().expect("just made an object");
        if i + 1 == path.len() {
            map.insert((*k).to_string(), v);
            return;
        }
        cur = map.entry((*k).to_string()).or_insert(Value::Null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_and_parses_round_trip() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_714_564_800), "2024-05-01T12:00:00Z");
        assert_eq!(parse_rfc3339("2024-05-01T12:00:00Z"), Some(1_714_564_800));
        assert_eq!(parse_rfc3339("2000-02-29T23:59:59.123Z"), Some(951_868_799));
        assert_eq!(parse_rfc3339("garbage"), None);
    }

    #[test]
    fn uids_are_version_4_and_distinct() {
        let a = new_uid();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, new_uid());
    }

    #[test]
    fn generated_names_append_five_characters() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9);
    }
}
