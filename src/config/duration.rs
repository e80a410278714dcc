//! Durations written the way Go's `time.ParseDuration` reads them ("30s",
//! "1m0s", "1.5h", "300ms"), as kube-proxy's flags and config file use them.

use std::{fmt, time::Duration};

use serde::{Deserialize, Deserializer};

/// A signed duration in nanoseconds, like Go's `time.Duration`; signed so
/// that "-1s" parses and validation can reject it with the field's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct GoDuration(pub i64);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit { unit: String, input: String },
    #[error("duration {0:?} out of range")]
    Overflow(String),
}

const NANOS_PER_UNIT: &[(&str, u64)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),  // micro sign
    ("\u{3bc}s", 1_000), // Greek mu
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3600 * 1_000_000_000),
];

impl GoDuration {
    pub const ZERO: GoDuration = GoDuration(0);

    pub fn from_std(d: Duration) -> GoDuration {
        GoDuration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }

    /// `None` for negative durations.
    pub fn to_std(self) -> Option<Duration> {
        u64::try_from(self.0).ok().map(Duration::from_nanos)
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    pub fn parse(input: &str) -> Result<GoDuration, DurationError> {
        let invalid = || DurationError::Invalid(input.to_owned());
        let overflow = || DurationError::Overflow(input.to_owned());
        let (negative, mut rest) = if let Some(r) = input.strip_prefix('-') {
            (true, r)
        } else {
            (false, input.strip_prefix('+').unwrap_or(input))
        };
        if rest == "0" {
            return Ok(GoDuration::ZERO);
        }
        if rest.is_empty() {
            return Err(invalid());
        }
        // Accumulated in u128 so the magnitude of i64::MIN fits.
        let mut total: u128 = 0;
        while !rest.is_empty() {
            let int_len = digits_len(rest);
            let int_part = &rest[..int_len];
            rest = &rest[int_len..];
            let mut frac_part = "";
            if let Some(after_dot) = rest.strip_prefix('.') {
                let frac_len = digits_len(after_dot);
                frac_part = &after_dot[..frac_len];
                rest = &after_dot[frac_len..];
            }
            if int_part.is_empty() && frac_part.is_empty() {
                return Err(invalid());
            }
            let unit_len = rest
                .find(|c: char| c == '.' || c.is_ascii_digit())
                .unwrap_or(rest.len());
            let unit = &rest[..unit_len];
            rest = &rest[unit_len..];
            if unit.is_empty() {
                return Err(DurationError::MissingUnit(input.to_owned()));
            }
            let per_unit = NANOS_PER_UNIT
                .iter()
                .find(|(name, _)| *name == unit)
                .map(|(_, n)| u128::from(*n))
                .ok_or_else(|| DurationError::UnknownUnit {
                    unit: unit.to_owned(),
                    input: input.to_owned(),
                })?;
            let whole: u128 = if int_part.is_empty() {
                0
            } else {
                int_part.parse().map_err(|_| overflow())?
            };
            let mut nanos = whole.checked_mul(per_unit).ok_or_else(overflow)?;
            // Go truncates fractions below a nanosecond; digits beyond
            // 19 cannot change the result at all.
            let mut scale: u128 = 1;
            let mut frac: u128 = 0;
            for digit in frac_part.bytes().take(19) {
                frac = frac * 10 + u128::from(digit - b'0');
                scale *= 10;
            }
            nanos += frac * per_unit / scale;
            total = total.checked_add(nanos).ok_or_else(overflow)?;
            if total > 1u128 << 63 {
                return Err(overflow());
            }
        }
        let signed = if negative {
            i64::try_from(-(i128::try_from(total).map_err(|_| overflow())?))
        } else {
            i64::try_from(total)
        };
        signed.map(GoDuration).map_err(|_| overflow())
    }
}

fn digits_len(s: &str) -> usize {
    s.bytes().take_while(u8::is_ascii_digit).count()
}

/// Formats like Go's `Duration.String()` for whole-second values ("1m30s",
/// "0s"); sub-second values fall back to milliseconds or nanoseconds.
impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let nanos = self.0.unsigned_abs();
        if nanos == 0 {
            return f.write_str("0s");
        }
        if !nanos.is_multiple_of(1_000_000_000) {
            if nanos.is_multiple_of(1_000_000) {
                return write!(f, "{sign}{}ms", nanos / 1_000_000);
            }
            return write!(f, "{sign}{nanos}ns");
        }
        let secs = nanos / 1_000_000_000;
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        if h > 0 {
            write!(f, "{sign}{h}h{m}m{s}s")
        } else if m > 0 {
            write!(f, "{sign}{m}m{s}s")
        } else {
            write!(f, "{sign}{s}s")
        }
    }
}

/// As Go's `time.Duration.String()`, which upstream writes.
impl serde::Serialize for GoDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        GoDuration::parse(&text).map_err(serde::de::Error::custom)
    }
}
