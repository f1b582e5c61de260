//! `resource.Quantity`: `100m`, `1.5`, `2Gi`, `1e3`, as used in resource requests and limits.
//!
//! Follows the Quantity section of the API reference
//! (<https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/>) and
//! `k8s.io/apimachinery/pkg/api/resource`: `<signedNumber><suffix>` where the suffix is a binary
//! SI suffix (`Ki Mi Gi Ti Pi Ei`), a decimal SI suffix (`n u m "" k M G T P E`) or a decimal
//! exponent (`e3`, `E-2`).
//!
//! Two views of the same grammar:
//! - exact integers, for arithmetic that must not drift: [`parse_scaled`] (`Quantity.ScaledValue`),
//!   [`milli_value`] (`MilliValue`, e.g. millicores for CPU) and [`value`] (`Value`, e.g. bytes for
//!   memory), all rounding up like Kubernetes does;
//! - `f64` in base units (cores, bytes), for validation and comparisons: [`parse_quantity`] and
//!   [`parse_quantity_value`];
//! - [`Quantity`], milli-units that remember their format, for sums and printing
//!   (`Quantity.Add`, `Quantity.String()`): what LimitRanger and ResourceQuota admission compute
//!   and write back. It is built on [`parse_quantity`].
//!
//! k8s-openapi's [`resource::Quantity`] is the string as it travels in objects; [`Quantity`] here
//! is its value.

use k8s_openapi::apimachinery::pkg::api::resource;
use serde_json::Value;

/// The regular expression Kubernetes quotes when a quantity does not parse.
pub const QUANTITY_REGEX_MESSAGE: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// A quantity string that does not follow the quantity grammar, or whose value does not fit in
/// an `i64` at the requested scale. Holds the string as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid quantity {0:?}: quantities must match the regular expression \
     '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' and fit in 64 bits"
)]
pub struct InvalidQuantity(pub String);

/// A quantity split by the grammar: `±<int_part>.<frac_part> × 10^exp10 × 2^exp2`.
struct Parsed<'a> {
    negative: bool,
    /// The number as written, without its sign (digits and at most one `.`).
    number: &'a str,
    int_part: &'a str,
    frac_part: &'a str,
    exp10: i32,
    exp2: u32,
}

/// Splits a quantity into sign, digits and suffix; `None` when it does not follow the grammar.
fn parse_parts(s: &str) -> Option<Parsed<'_>> {
    let s = s.trim();
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let number_end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let (exp10, exp2) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other => {
            let exp = other.strip_prefix(['e', 'E'])?;
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (exp.parse::<i32>().ok()?, 0)
        }
    };
    Some(Parsed { negative, number, int_part, frac_part, exp10, exp2 })
}

/// The exact value of `p × 10^scale`, rounded away from zero; `None` when it does not fit in an
/// `i128`.
fn scaled_i128(p: &Parsed<'_>, scale: i32) -> Option<i128> {
    let mut exp10 = i64::from(scale) + i64::from(p.exp10) - i64::try_from(p.frac_part.len()).ok()?;
    // Fold the digits into an integer mantissa; digits past i128's precision are dropped (they
    // shift the exponent) and only remembered for rounding.
    let mut mantissa: i128 = 0;
    let mut dropping = false;
    let mut inexact = false;
    for b in p.int_part.bytes().chain(p.frac_part.bytes()) {
        let d = i128::from(b - b'0');
        if !dropping {
            if let Some(m) = mantissa.checked_mul(10).and_then(|m| m.checked_add(d)) {
                mantissa = m;
                continue;
            }
            dropping = true;
        }
        // The mantissa now stands for the digits so far divided by ten.
        inexact |= d != 0;
        exp10 += 1;
    }
    if mantissa == 0 && !inexact {
        return Some(0);
    }
    let mut v = mantissa.checked_mul(1i128.checked_shl(p.exp2)?)?;
    if exp10 >= 0 {
        for _ in 0..exp10 {
            v = v.checked_mul(10)?;
        }
    } else {
        for _ in 0..exp10.unsigned_abs() {
            inexact |= v % 10 != 0;
            v /= 10;
            if v == 0 {
                break;
            }
        }
    }
    if inexact {
        v = v.checked_add(1)?;
    }
    Some(if p.negative { -v } else { v })
}

/// Parses a quantity into its value × `10^scale` (scale 3 gives milli-units, 0 base units, -3
/// thousands), rounded away from zero as `Quantity.ScaledValue` rounds up.
///
/// # Errors
/// [`InvalidQuantity`] when the string is not a quantity or the scaled value does not fit in an
/// `i64`.
pub fn parse_scaled(s: &str, scale: i32) -> Result<i64, InvalidQuantity> {
    let bad = || InvalidQuantity(s.to_string());
    let p = parse_parts(s).ok_or_else(bad)?;
    scaled_i128(&p, scale).and_then(|v| i64::try_from(v).ok()).ok_or_else(bad)
}

/// As [`parse_scaled`], but a value beyond the `i64` range saturates at `i64::MAX` (`i64::MIN`
/// when negative) instead of failing: for amounts such as node allocatable where "more than can
/// be counted" is a meaningful answer.
///
/// # Errors
/// [`InvalidQuantity`] when the string is not a quantity.
pub fn parse_scaled_saturating(s: &str, scale: i32) -> Result<i64, InvalidQuantity> {
    let p = parse_parts(s).ok_or_else(|| InvalidQuantity(s.to_string()))?;
    let saturated = if p.negative { i64::MIN } else { i64::MAX };
    Ok(scaled_i128(&p, scale).map_or(saturated, |v| i64::try_from(v).unwrap_or(saturated)))
}

/// A quantity in milli-units (`Quantity.MilliValue`): millicores for CPU (`"250m"` → 250,
/// `"2"` → 2000).
///
/// # Errors
/// As [`parse_scaled`].
pub fn milli_value(q: &resource::Quantity) -> Result<i64, InvalidQuantity> {
    parse_scaled(&q.0, 3)
}

/// A quantity in base units (`Quantity.Value`), rounded up: bytes for memory and storage
/// (`"128Mi"` → 134217728), a count for pods.
///
/// # Errors
/// As [`parse_scaled`].
pub fn value(q: &resource::Quantity) -> Result<i64, InvalidQuantity> {
    parse_scaled(&q.0, 0)
}

/// Parses a quantity string into its numeric value in base units (cores for CPU, bytes for
/// memory) as an `f64`; precise to about 15 significant digits.
///
/// # Errors
/// [`QUANTITY_REGEX_MESSAGE`] when the string is not a quantity.
pub fn parse_quantity(s: &str) -> Result<f64, String> {
    let p = parse_parts(s).ok_or_else(|| QUANTITY_REGEX_MESSAGE.to_string())?;
    let magnitude: f64 = p.number.parse().map_err(|_| QUANTITY_REGEX_MESSAGE.to_string())?;
    let v = magnitude * 10f64.powi(p.exp10) * 2f64.powi(p.exp2 as i32);
    Ok(if p.negative { -v } else { v })
}

/// Parses a quantity given as a JSON string or number, as [`parse_quantity`].
///
/// # Errors
/// As [`parse_quantity`]; other JSON types are rejected with the same message.
pub fn parse_quantity_value(v: &Value) -> Result<f64, String> {
    match v {
        Value::String(s) => parse_quantity(s),
        Value::Number(n) => n.as_f64().ok_or_else(|| QUANTITY_REGEX_MESSAGE.to_string()),
        _ => Err(QUANTITY_REGEX_MESSAGE.to_string()),
    }
}

/// A quantity's value in milli-units, remembering whether it was written with a binary suffix,
/// for arithmetic and printing (admission's sums of requests and quota usage).
///
/// Milli-units keep sums exact for the magnitudes requests and quotas use. Printing follows
/// `resource.Quantity.String()`'s canonical forms: binary suffixes (`Ki`…`Ei`) for quantities
/// written with one, decimal suffixes (`m`, `""`, `k`, `M`, `G`, `T`, `P`, `E`) otherwise,
/// choosing the largest suffix that keeps an integer mantissa.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Quantity {
    /// Value × 1000.
    pub milli: i128,
    /// Printed with binary suffixes.
    pub binary: bool,
}

impl Quantity {
    /// Zero (decimal format).
    pub const ZERO: Quantity = Quantity { milli: 0, binary: false };

    /// `units` (as [`parse_quantity`] returns them) rounded to milli-units.
    fn from_units(units: f64, binary: bool) -> Self {
        Self { milli: (units * 1000.0).round() as i128, binary }
    }

    /// Parses a quantity string.
    ///
    /// # Errors
    /// [`QUANTITY_REGEX_MESSAGE`] when the string is not a quantity.
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(Self::from_units(parse_quantity(s)?, s.trim().ends_with('i')))
    }

    /// Parses a JSON string or number; other values and malformed strings are `None`.
    pub fn from_json(v: &Value) -> Option<Self> {
        match v {
            Value::String(s) => Self::parse(s).ok(),
            other => parse_quantity_value(other).ok().map(|units| Self::from_units(units, false)),
        }
    }

    /// The larger of two.
    pub fn max(self, other: Quantity) -> Quantity {
        if other.milli > self.milli { other } else { self }
    }

    /// The value as a float (whole units).
    pub fn as_f64(self) -> f64 {
        self.milli as f64 / 1000.0
    }
}

/// The sum, in the format of the left operand (or of the right one when the left is zero).
impl std::ops::Add for Quantity {
    type Output = Quantity;

    fn add(self, other: Quantity) -> Quantity {
        let binary = if self.milli == 0 { other.binary } else { self.binary };
        Quantity { milli: self.milli + other.milli, binary }
    }
}

impl std::fmt::Display for Quantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.milli;
        if m == 0 {
            return f.write_str("0");
        }
        let sign = if m < 0 { "-" } else { "" };
        let m = m.abs();
        if m % 1000 != 0 {
            return write!(f, "{sign}{m}m");
        }
        let units = m / 1000;
        if self.binary {
            for (suffix, pow) in [("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
                let d = 1i128 << pow;
                if units % d == 0 {
                    return write!(f, "{sign}{}{suffix}", units / d);
                }
            }
            // Kubernetes falls back to decimal when no binary suffix fits, but keeps small
            // numbers plain.
            return write!(f, "{sign}{units}");
        }
        for (suffix, pow) in [("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3)] {
            let d = 10i128.pow(pow);
            if units % d == 0 {
                return write!(f, "{sign}{}{suffix}", units / d);
            }
        }
        write!(f, "{sign}{units}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_with_every_suffix_kind() {
        let cases = [
            ("1", 1.0),
            ("100m", 0.1),
            ("1.5", 1.5),
            ("2Gi", 2.0 * 1024.0 * 1024.0 * 1024.0),
            ("128Mi", 128.0 * 1024.0 * 1024.0),
            ("1k", 1000.0),
            ("1e3", 1000.0),
            ("5E-1", 0.5),
            ("+3", 3.0),
            ("-1", -1.0),
            (".5", 0.5),
        ];
        for (s, want) in cases {
            let got = parse_quantity(s).unwrap();
            assert!((got - want).abs() < 1e-9 * want.abs().max(1.0), "{s}: {got} != {want}");
        }
    }

    #[test]
    fn malformed_quantities_are_rejected_with_the_kubernetes_regex() {
        for s in ["", "abc", "1Gb", "1..2", "m", "1e", "1 Gi", "+-1", ".", "1e+", "12Q", "1.2.3"] {
            assert_eq!(parse_quantity(s).unwrap_err(), QUANTITY_REGEX_MESSAGE, "{s:?}");
            assert_eq!(parse_scaled(s, 0), Err(InvalidQuantity(s.to_string())), "{s:?}");
        }
    }

    #[test]
    fn quantities_scale_exactly_rounding_fractions_away_from_zero() {
        let cases = [
            ("100m", 3, 100),
            ("2", 3, 2000),
            ("0.5", 3, 500),
            ("1.25", 3, 1250),
            ("1e3", 0, 1000),
            ("128Mi", 0, 128 * 1024 * 1024),
            ("1Gi", 0, 1 << 30),
            ("1G", 0, 1_000_000_000),
            ("1.5Gi", 0, 3 << 29),
            ("500k", 0, 500_000),
            // Fractions of the unit round away from zero.
            ("1m", 0, 1),
            ("100m", 0, 1),
            ("100n", 3, 1),
            ("0.0001", 3, 1),
            ("1.0001", 0, 2),
            ("-1.5", 0, -2),
            ("1e-400", 0, 1),
            ("0", 3, 0),
            ("0e999999999", 3, 0),
        ];
        for (q, scale, want) in cases {
            assert_eq!(parse_scaled(q, scale), Ok(want), "{q} x10^{scale}");
        }
        assert_eq!(milli_value(&resource::Quantity("250m".into())), Ok(250));
        assert_eq!(value(&resource::Quantity("1Ki".into())), Ok(1024));
    }

    #[test]
    fn digits_beyond_128_bits_of_precision_still_round_up() {
        let long = format!("0.{}1", "0".repeat(60));
        assert_eq!(parse_scaled(&long, 3), Ok(1));
        let long = format!("1{}", "0".repeat(45));
        assert_eq!(parse_scaled(&format!("{long}e-45"), 0), Ok(1));
        assert_eq!(parse_scaled(&format!("{long}1e-46"), 0), Ok(2));
    }

    #[test]
    fn values_beyond_64_bits_fail_or_saturate() {
        assert!(parse_scaled("99999999999999999999999Ei", 0).is_err());
        assert!(parse_scaled("10E", 0).is_err());
        assert_eq!(parse_scaled_saturating("10E", 3), Ok(i64::MAX));
        assert_eq!(parse_scaled_saturating("-10E", 3), Ok(i64::MIN));
        assert_eq!(parse_scaled_saturating("8Ei", 0), Ok(i64::MAX));
        assert_eq!(parse_scaled_saturating("4Ei", 0), Ok(1 << 62));
        assert!(parse_scaled_saturating("1Gb", 0).is_err());
    }

    #[test]
    fn quantities_print_in_kubernetes_canonical_form() {
        let cases = [
            ("100m", "100m"),
            ("0.5", "500m"),
            ("1", "1"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("2Gi", "2Gi"),
            ("1536Mi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("1G", "1G"),
            ("0", "0"),
        ];
        for (input, want) in cases {
            assert_eq!(Quantity::parse(input).unwrap().to_string(), want, "{input}");
        }
    }

    #[test]
    fn sums_keep_the_format_of_the_first_non_zero_operand() {
        let a = Quantity::parse("512Mi").unwrap();
        let b = Quantity::parse("512Mi").unwrap();
        assert_eq!((Quantity::ZERO + a + b).to_string(), "1Gi");
        let c = Quantity::parse("250m").unwrap() + Quantity::parse("750m").unwrap();
        assert_eq!(c.to_string(), "1");
        assert!(Quantity::parse("1Gb").is_err());
    }

    #[test]
    fn json_strings_and_numbers_are_quantities_and_other_values_are_not() {
        assert_eq!(
            Quantity::from_json(&serde_json::json!("2Gi")),
            Some(Quantity { milli: (2 << 30) * 1000, binary: true })
        );
        assert_eq!(Quantity::from_json(&serde_json::json!(1.5)), Some(Quantity { milli: 1500, binary: false }));
        assert_eq!(Quantity::from_json(&serde_json::json!("2GB")), None);
        assert_eq!(Quantity::from_json(&serde_json::json!(true)), None);
    }
}
