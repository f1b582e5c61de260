//! Parsing of `resource.Quantity` strings ("100m", "128Mi", "1.5G", "2e3") into integers.
//!
//! Follows the grammar of Kubernetes' `k8s.io/apimachinery/pkg/api/resource` package:
//! `<signedNumber><suffix>` where the suffix is a binary SI suffix (Ki, Mi, Gi, Ti, Pi, Ei), a
//! decimal SI suffix (n, u, m, "", k, M, G, T, P, E) or a decimal exponent (e3, E-2).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A quantity string that does not follow the Kubernetes quantity grammar.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {0:?}: expected <number><suffix> such as 100m, 128Mi or 2")]
pub struct InvalidQuantity(pub String);

/// Parses a quantity into its value scaled by `10^scale` (scale 3 gives milli-units), rounding
/// up as Kubernetes' `ScaledValue` does.
///
/// # Errors
/// [`InvalidQuantity`] when the string is not a quantity or the value does not fit in an `i64`.
pub fn parse_scaled(q: &str, scale: i32) -> Result<i64, InvalidQuantity> {
    let bad = || InvalidQuantity(q.to_string());
    let s = q.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let number_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(bad());
    }
    // (multiplier base, exponent): value = number * base^exponent.
    let (base, exponent): (u32, i32) = match suffix {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (2, 10),
        "Mi" => (2, 20),
        "Gi" => (2, 30),
        "Ti" => (2, 40),
        "Pi" => (2, 50),
        "Ei" => (2, 60),
        other => {
            let exp = other.strip_prefix('e').or_else(|| other.strip_prefix('E')).ok_or_else(bad)?;
            (10, exp.parse::<i32>().map_err(|_| bad())?)
        }
    };
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // Work in i128 with the fractional digits folded into a decimal exponent.
    let digits = format!("{int_part}{frac_part}");
    let mantissa: i128 = digits
        .trim_start_matches('0')
        .parse::<i128>()
        .or_else(|e| if digits.chars().all(|c| c == '0') { Ok(0) } else { Err(e) })
        .map_err(|_| bad())?;
    let mut dec_exp: i32 = scale - i32::try_from(frac_part.len()).map_err(|_| bad())?;
    let mut value = mantissa;
    if base == 2 {
        value = value.checked_mul(1i128 << exponent).ok_or_else(bad)?;
    } else {
        dec_exp += exponent;
    }
    if dec_exp >= 0 {
        for _ in 0..dec_exp {
            value = value.checked_mul(10).ok_or_else(bad)?;
        }
    } else {
        let mut divisor: i128 = 1;
        for _ in 0..(-dec_exp) {
            divisor = match divisor.checked_mul(10) {
                Some(d) => d,
                // The value is far below one unit: rounds up to 1 when positive.
                None => return Ok(i64::from(value != 0 && !negative)),
            };
        }
        // Round away from zero (ceil for positive values), as ScaledValue does.
        value = (value + divisor - 1) / divisor;
    }
    let value = if negative { -value } else { value };
    i64::try_from(value).map_err(|_| bad())
}

/// CPU of a quantity in millicores ("250m" → 250, "2" → 2000).
///
/// # Errors
/// [`InvalidQuantity`] when the quantity does not parse.
pub fn cpu_millis(q: &Quantity) -> Result<i64, InvalidQuantity> {
    parse_scaled(&q.0, 3)
}

/// A quantity in base units, e.g. bytes for memory ("128Mi" → 134217728).
///
/// # Errors
/// [`InvalidQuantity`] when the quantity does not parse.
pub fn value(q: &Quantity) -> Result<i64, InvalidQuantity> {
    parse_scaled(&q.0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_quantities_parse_to_millicores() {
        assert_eq!(parse_scaled("100m", 3), Ok(100));
        assert_eq!(parse_scaled("2", 3), Ok(2000));
        assert_eq!(parse_scaled("0.5", 3), Ok(500));
        assert_eq!(parse_scaled("1.25", 3), Ok(1250));
        assert_eq!(parse_scaled("1e3", 0), Ok(1000));
    }

    #[test]
    fn memory_quantities_parse_to_bytes() {
        assert_eq!(parse_scaled("128Mi", 0), Ok(128 * 1024 * 1024));
        assert_eq!(parse_scaled("1Gi", 0), Ok(1 << 30));
        assert_eq!(parse_scaled("1G", 0), Ok(1_000_000_000));
        assert_eq!(parse_scaled("1.5Gi", 0), Ok(3 << 29));
        assert_eq!(parse_scaled("500k", 0), Ok(500_000));
    }

    #[test]
    fn sub_unit_values_round_up() {
        assert_eq!(parse_scaled("1m", 0), Ok(1));
        assert_eq!(parse_scaled("100n", 3), Ok(1));
        assert_eq!(parse_scaled("0", 3), Ok(0));
    }

    #[test]
    fn malformed_quantities_are_rejected() {
        for q in ["", "abc", "1.2.3", "12Xi", "m", "1e", "99999999999999999999999Ei"] {
            assert!(parse_scaled(q, 0).is_err(), "{q} should be rejected");
        }
    }
}
