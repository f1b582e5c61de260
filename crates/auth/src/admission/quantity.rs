//! Quantity arithmetic for admission (sums, comparisons, printing) on top of
//! `skiff_apimachinery::quantity::parse_quantity`.
//!
//! Values are kept as integer milli-units (`1` = 1/1000 of the unit) so sums are exact for the
//! magnitudes requests and quotas use. Printing follows `resource.Quantity.String()`'s canonical
//! forms: binary suffixes (`Ki`…`Ei`) for quantities written with one, decimal suffixes
//! (`m`, `""`, `k`, `M`, `G`, `T`, `P`, `E`) otherwise, choosing the largest suffix that keeps
//! an integer mantissa.

use serde_json::Value;
use skiff_apimachinery::quantity::parse_quantity;

/// A quantity in milli-units, remembering whether it was written with a binary suffix.
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

    /// Parses a quantity string.
    ///
    /// # Errors
    /// Kubernetes' quantity regex message.
    pub fn parse(s: &str) -> Result<Self, String> {
        let v = parse_quantity(s)?;
        let s = s.trim();
        Ok(Self { milli: (v * 1000.0).round() as i128, binary: s.ends_with('i') })
    }

    /// Parses a JSON string or number; other values and malformed strings are `None`.
    pub fn from_json(v: &Value) -> Option<Self> {
        match v {
            Value::String(s) => Self::parse(s).ok(),
            Value::Number(n) => n.as_f64().map(|f| Self { milli: (f * 1000.0).round() as i128, binary: false }),
            _ => None,
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
}
