//! Timestamps as Go's `encoding/json` writes a `time.Time`: RFC 3339
//! with nanoseconds, trailing zeros of the fraction dropped (upstream's
//! `/healthz` body is read by tools that parse exactly that).

use std::time::{SystemTime, UNIX_EPOCH};

/// Go's zero `time.Time`, which upstream reports as `lastUpdated` before
/// the first sync.
pub const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Formats `at` in UTC, e.g. `2026-11-21T23:15:51.123456789Z` or
/// `2026-11-21T23:15:51Z`. Times before 1970 are clamped to it: only a
/// broken clock produces them.
pub fn rfc3339_nano(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let nanos = since.subsec_nanos();
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    if nanos != 0 {
        let fraction = format!("{nanos:09}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

/// Formats `at` as Go's `time.UnixDate` in UTC, e.g.
/// `Thu Dec  3 13:41:19 UTC 2026`.
pub fn unix_date(at: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
        "Nov", "Dec",
    ];
    let secs = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    // 1970-01-01 was a Thursday.
    let weekday = DAYS[((days + 4) % 7) as usize];
    let month = MONTHS[(month - 1) as usize];
    format!(
        "{weekday} {month} {day:>2} {:02}:{:02}:{:02} UTC {year}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Year, month and day of the `days`-th day after 1970-01-01, by Howard
/// Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01 so that leap days end each cycle.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}
