//! `resource.Quantity` parsing: `100m`, `1.5`, `2Gi`, `1e3`, as used in resource requests/limits.
//!
//! Follows the Quantity section of the API reference
//! (<https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/>):
//! `<signedNumber><suffix>` where the suffix is a binary SI suffix (`Ki Mi Gi Ti Pi Ei`), a
//! decimal SI suffix (`n u m "" k M G T P E`) or a decimal exponent (`e3`, `E-2`).

/// The regular expression Kubernetes quotes when a quantity does not parse.
pub const QUANTITY_REGEX_MESSAGE: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Parses a quantity string into its numeric value (cores for CPU, bytes for memory).
///
/// # Errors
/// [`QUANTITY_REGEX_MESSAGE`] when the string is not a quantity.
pub fn parse_quantity(s: &str) -> Result<f64, String> {
    let err = || QUANTITY_REGEX_MESSAGE.to_string();
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let digits = num.strip_prefix(['+', '-']).unwrap_or(num);
    if digits.is_empty()
        || digits.contains(['+', '-'])
        || digits.matches('.').count() > 1
        || !digits.chars().any(|c| c.is_ascii_digit())
    {
        return Err(err());
    }
    let base: f64 = num.parse().map_err(|_| err())?;
    let multiplier = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        other => {
            let exp = other.strip_prefix(['e', 'E']).ok_or_else(err)?;
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
                return Err(err());
            }
            let e: i32 = exp.parse().map_err(|_| err())?;
            10f64.powi(e)
        }
    };
    Ok(base * multiplier)
}

/// Parses a quantity given as a JSON string or number.
///
/// # Errors
/// As [`parse_quantity`]; other JSON types are rejected with the same message.
pub fn parse_quantity_value(v: &serde_json::Value) -> Result<f64, String> {
    match v {
        serde_json::Value::String(s) => parse_quantity(s),
        serde_json::Value::Number(n) => n.as_f64().ok_or_else(|| QUANTITY_REGEX_MESSAGE.to_string()),
        _ => Err(QUANTITY_REGEX_MESSAGE.to_string()),
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
        ];
        for (s, want) in cases {
            let got = parse_quantity(s).unwrap();
            assert!((got - want).abs() < 1e-9 * want.abs().max(1.0), "{s}: {got} != {want}");
        }
    }

    #[test]
    fn malformed_quantities_are_rejected_with_the_kubernetes_regex() {
        for s in ["", "abc", "1Gb", "1..2", "m", "1e", "1 Gi"] {
            assert_eq!(parse_quantity(s).unwrap_err(), QUANTITY_REGEX_MESSAGE, "{s:?}");
        }
    }
}
