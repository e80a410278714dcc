//! The line every bench prints a figure as, `RESULT SUBJECT CASE MEASURE
//! VALUE`, and reads back. Other programs read it too: make targets and
//! scripts grep it (`^RESULT `), tests/vm/bench-vs-upstream.sh deletes a
//! run's lines by their first two fields and writes one of its own, and
//! vs_upstream's report parses them all into its table. Its text is
//! therefore a format, printed and parsed here alone: fields without
//! spaces, and the value with a fixed number of decimals.

use std::{fmt, num::ParseFloatError, str::FromStr};

/// One figure of a bench.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultLine {
    /// What was measured: a proxy (`upstream`, `ours`) or a bench's part
    /// (`split`, `attack`).
    pub subject: String,
    /// Which case of it: a size (services, nodes) or an attack's name.
    pub case: String,
    pub measure: String,
    pub value: f64,
    /// How many decimals the value is printed with: each bench keeps
    /// the precision its readers have always had.
    pub decimals: usize,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParseError {
    #[error("not a RESULT line")]
    NotAResult,
    #[error("not `RESULT subject case measure value`")]
    Fields,
    #[error("value {0:?}: {1}")]
    Value(String, ParseFloatError),
}

impl ResultLine {
    /// What every line starts with, and what its readers look for.
    pub const PREFIX: &'static str = "RESULT ";

    pub fn new(
        subject: impl Into<String>,
        case: impl ToString,
        measure: impl Into<String>,
        value: f64,
        decimals: usize,
    ) -> Self {
        Self {
            subject: subject.into(),
            case: case.to_string(),
            measure: measure.into(),
            value,
            decimals,
        }
    }

    /// On stdout, where the scripts look for it.
    pub fn print(&self) {
        println!("{self}");
    }
}

impl fmt::Display for ResultLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{} {} {} {:.*}",
            Self::PREFIX,
            self.subject,
            self.case,
            self.measure,
            self.decimals,
            self.value
        )
    }
}

impl FromStr for ResultLine {
    type Err = ParseError;

    /// Any whitespace between the fields, as the scripts' lines may have
    /// it; the decimals are those the value was written with.
    fn from_str(line: &str) -> Result<Self, ParseError> {
        let rest = line
            .strip_prefix(Self::PREFIX)
            .ok_or(ParseError::NotAResult)?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let [subject, case, measure, value] = fields[..] else {
            return Err(ParseError::Fields);
        };
        let parsed = value
            .parse()
            .map_err(|e| ParseError::Value(value.to_owned(), e))?;
        Ok(Self {
            subject: subject.to_owned(),
            case: case.to_owned(),
            measure: measure.to_owned(),
            value: parsed,
            decimals: value.split_once('.').map_or(0, |(_, d)| d.len()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines as the benches printed them before this type, byte for
    /// byte: their readers match on this text.
    #[test]
    fn prints_the_lines_the_benches_always_printed() {
        let value = 12.34567;
        let cases = [
            (
                ResultLine::new("ours", 1000_usize, "churn_p99_ms", value, 3),
                format!(
                    "RESULT {} {} {} {value:.3}",
                    "ours", 1000, "churn_p99_ms"
                ),
            ),
            (
                ResultLine::new("split", 5_usize, "cold_start_s", value, 1),
                format!("RESULT split {} {} {value:.1}", 5, "cold_start_s"),
            ),
            (
                ResultLine::new("attack", "silent", "tried", 320.0, 0),
                format!("RESULT attack {} {} {}", "silent", "tried", 320_u64),
            ),
            (
                ResultLine::new("upstream", 10, "churn_p50_ms", f64::NAN, 3),
                format!("RESULT upstream 10 churn_p50_ms {:.3}", f64::NAN),
            ),
        ];
        for (line, want) in cases {
            assert_eq!(line.to_string(), want);
        }
    }

    #[test]
    fn reads_back_what_it_prints() {
        let line = ResultLine::new("ours", 100, "cold_sync_s", 1.5, 3);
        assert_eq!(line.to_string().parse::<ResultLine>(), Ok(line));
    }

    #[test]
    fn reads_the_scripts_lines() {
        let line: ResultLine = "RESULT ours 1000 host_steal_pct 0.4"
            .parse()
            .expect("a line");
        assert_eq!(
            line,
            ResultLine::new("ours", 1000, "host_steal_pct", 0.4, 1)
        );
    }

    #[test]
    fn refuses_what_is_not_a_whole_line() {
        assert_eq!(
            "RUN ours 1000 stamp".parse::<ResultLine>(),
            Err(ParseError::NotAResult)
        );
        // A run killed mid-line, and a measure with no value.
        assert_eq!(
            "RESULT ours 1000 churn".parse::<ResultLine>(),
            Err(ParseError::Fields)
        );
        assert_eq!(
            "RESULT ours 1000 host_steal_pct ".parse::<ResultLine>(),
            Err(ParseError::Fields)
        );
        assert!(matches!(
            "RESULT ours 1000 churn_p99_ms 1.2x".parse::<ResultLine>(),
            Err(ParseError::Value(..))
        ));
    }
}
