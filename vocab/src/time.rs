//! Time since the Unix epoch read from the clock, and UTC calendar time stamps written by hand (a
//! few time stamps do not justify a date-time dependency).

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch (0 when the clock is before it).
#[must_use]
pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Milliseconds since the Unix epoch (0 when the clock is before it).
#[must_use]
pub fn now_unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `YYYY-MM-DD<separator>HH:MM:SSZ` (UTC) of `seconds` since the Unix epoch (civil from days,
/// Howard Hinnant's algorithm).
#[must_use]
pub fn utc_timestamp(seconds: i64, separator: char) -> String {
    let days = seconds.div_euclid(86_400);
    let rem = seconds.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}{separator}{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// RFC 3339 (UTC, seconds) of `seconds` since the Unix epoch: `YYYY-MM-DDTHH:MM:SSZ`.
#[must_use]
pub fn rfc3339_utc(seconds: i64) -> String {
    utc_timestamp(seconds, 'T')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_dates() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn the_separator_is_the_callers() {
        assert_eq!(utc_timestamp(0, ' '), "1970-01-01 00:00:00Z");
        assert_eq!(utc_timestamp(1_796_083_200, ' '), "2026-12-01 00:00:00Z");
        assert_eq!(utc_timestamp(-1, 'T'), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn the_clock_is_past_the_epoch() {
        let (s, ms) = (now_unix(), now_unix_ms());
        assert!(s > 1_700_000_000);
        assert!(ms / 1000 >= s);
    }
}
