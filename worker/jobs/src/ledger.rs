//! The spend ledger: the typed columns of each `usage` row (schema version 8) and what the store
//! reads back from them.
//!
//! Every usage row carries, next to its document, the job's principal (`submitted_by`, `''` for
//! jobs queued before schema version 7) and repository, taken by the store from the job's own
//! row, the UTC day it was first recorded on, and the gateway's trusted counts of a live turn
//! (`live.requests`, `live.input_tokens`, `live.output_tokens`, `live.total_tokens`), taken by
//! the store from the document it writes. A missing or malformed count is 0; a count is at most
//! [`MAX_LEDGER_COUNT`]. One row per `(job, attempt)`: recording an attempt again replaces its
//! counts, it never adds them twice.
//!
//! [`UtcDay`] names a day; [`Spend`] is a sum of rows; [`SpendToday`] is what a quota check reads
//! (one statement per call, through the `(principal, day)` and `(repository, day)` indexes);
//! [`UsageRollupRow`] is one group of the usage report.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::{JobsError, Result};
use crate::model::document_text;
use crate::rows::DbRow;

/// Milliseconds in a UTC day (`recorded_at` is in milliseconds since the Unix epoch).
pub(crate) const DAY_MS: i64 = 86_400_000;

/// The largest value one row's count holds; a larger count is stored as this. Sums of a day's
/// rows then stay far from `i64::MAX`.
pub const MAX_LEDGER_COUNT: u64 = 1_000_000_000_000;

/// The most groups [`crate::JobStore::usage_rollup`] returns; a range with more is refused
/// (`PATCH_CANDIDATE_JOBS_ROLLUP_LIMIT`): ask for fewer days or one principal.
pub const MAX_USAGE_ROLLUP_ROWS: usize = 10_000;

/// The first day a [`UtcDay`] names: 1970-01-01.
const FIRST_DAY: i64 = 0;
/// The last day a [`UtcDay`] names: 9999-12-31.
const LAST_DAY: i64 = 2_932_896;

/// A UTC calendar day, as days since the Unix epoch, from 1970-01-01 to 9999-12-31. Shown and
/// parsed as `YYYY-MM-DD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcDay(i64);

impl UtcDay {
    /// The first day: 1970-01-01.
    pub const MIN: Self = Self(FIRST_DAY);
    /// The last day: 9999-12-31.
    pub const MAX: Self = Self(LAST_DAY);

    /// Today by the host clock (UTC).
    #[must_use]
    pub fn today() -> Self {
        Self::from_unix_ms_saturating(vocab::now_unix_ms())
    }

    /// The day of `ms` milliseconds since the Unix epoch, clamped into the range.
    pub(crate) fn from_unix_ms_saturating(ms: i64) -> Self {
        Self(ms.div_euclid(DAY_MS).clamp(FIRST_DAY, LAST_DAY))
    }

    /// The day of `seconds` since the Unix epoch.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_DAY` before 1970-01-01 or after 9999-12-31.
    pub fn from_unix_seconds(seconds: i64) -> Result<Self> {
        Self::from_days(seconds.div_euclid(86_400))
    }

    /// The day `days` after 1970-01-01.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_DAY` outside 1970-01-01 to 9999-12-31.
    pub fn from_days(days: i64) -> Result<Self> {
        if (FIRST_DAY..=LAST_DAY).contains(&days) {
            Ok(Self(days))
        } else {
            Err(JobsError::Day {
                detail: "outside 1970-01-01 to 9999-12-31",
            })
        }
    }

    /// Days since 1970-01-01.
    #[must_use]
    pub fn days(self) -> i64 {
        self.0
    }

    /// The day `n` days later, or `None` past 9999-12-31.
    #[must_use]
    pub fn checked_add_days(self, n: u32) -> Option<Self> {
        Self::from_days(self.0.checked_add(i64::from(n))?).ok()
    }

    /// The day `n` days earlier, or `None` before 1970-01-01.
    #[must_use]
    pub fn checked_sub_days(self, n: u32) -> Option<Self> {
        Self::from_days(self.0.checked_sub(i64::from(n))?).ok()
    }

    /// `(year, month, day)` (Howard Hinnant's civil-from-days).
    fn civil(self) -> (i64, i64, i64) {
        let z = self.0 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        (y, m, d)
    }

    /// Days since the epoch of a checked civil date (days-from-civil).
    fn from_civil(y: i64, m: i64, d: i64) -> i64 {
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = if m > 2 { m - 3 } else { m + 9 };
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl fmt::Display for UtcDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = self.civil();
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

/// A fixed-width run of ASCII digits as a number.
fn digits(bytes: &[u8]) -> Option<i64> {
    bytes.iter().try_fold(0_i64, |n, b| {
        b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
    })
}

impl FromStr for UtcDay {
    type Err = JobsError;

    /// Parses exactly `YYYY-MM-DD` (a real calendar day, 1970-01-01 to 9999-12-31).
    fn from_str(s: &str) -> Result<Self> {
        let bad = |detail| JobsError::Day { detail };
        let b = s.as_bytes();
        let (Some(year), Some(b'-'), Some(month), Some(b'-'), Some(day), 10) = (
            b.get(0..4).and_then(digits),
            b.get(4),
            b.get(5..7).and_then(digits),
            b.get(7),
            b.get(8..10).and_then(digits),
            b.len(),
        ) else {
            return Err(bad("must be YYYY-MM-DD"));
        };
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return Err(bad("no such calendar day"));
        }
        Self::from_days(Self::from_civil(year, month, day))
    }
}

impl Serialize for UtcDay {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What a set of ledger rows adds up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Spend {
    /// Usage rows (attempts that ran and recorded their usage).
    pub attempts: u64,
    /// Model requests the gateway saw.
    pub requests: u64,
    /// Input tokens the provider reported.
    pub input_tokens: u64,
    /// Output tokens the provider reported.
    pub output_tokens: u64,
    /// Total tokens the provider reported.
    pub total_tokens: u64,
}

impl Spend {
    /// The sum of two, saturating.
    #[must_use]
    pub fn saturating_add(self, other: Self) -> Self {
        Self {
            attempts: self.attempts.saturating_add(other.attempts),
            requests: self.requests.saturating_add(other.requests),
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            total_tokens: self.total_tokens.saturating_add(other.total_tokens),
        }
    }

    /// Five columns from `at`: `count(*)` and the four sums (a negative sum, which the `CHECK`s
    /// rule out, reads as 0).
    fn read(row: &impl DbRow, at: usize) -> Result<Self> {
        let n = |i: usize| -> Result<u64> {
            let v: i64 = row.at(at + i)?;
            Ok(u64::try_from(v).unwrap_or(0))
        };
        Ok(Self {
            attempts: n(0)?,
            requests: n(1)?,
            input_tokens: n(2)?,
            output_tokens: n(3)?,
            total_tokens: n(4)?,
        })
    }
}

/// One day's spend of a principal and of a repository: what a quota check compares with its
/// limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SpendToday {
    /// Every usage row of the principal's jobs recorded that day.
    pub principal: Spend,
    /// Every usage row of the repository's jobs recorded that day.
    pub repository: Spend,
}

/// One group of the usage report: a day, a principal, a repository and their spend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UsageRollupRow {
    /// The UTC day the rows were recorded on.
    pub day: UtcDay,
    /// The jobs' principal (`""` for jobs queued before principals were recorded).
    pub principal: String,
    /// The jobs' repository locator.
    pub repository: String,
    /// The group's sums.
    #[serde(flatten)]
    pub spend: Spend,
}

/// The ledger counts of one usage document.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) requests: i64,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
    pub(crate) total_tokens: i64,
}

impl Counts {
    /// The counts of a usage document: `live.<field>` when it is a whole number from 0, capped at
    /// [`MAX_LEDGER_COUNT`]; 0 otherwise (an offline turn, a missing or malformed field).
    pub(crate) fn of(usage: &serde_json::Value) -> Self {
        let live = usage.get("live");
        let count = |field: &str| -> i64 {
            live.and_then(|l| l.get(field))
                .and_then(serde_json::Value::as_u64)
                .map_or(0, |n| i64::try_from(n.min(MAX_LEDGER_COUNT)).unwrap_or(0))
        };
        Self {
            requests: count("requests"),
            input_tokens: count("input_tokens"),
            output_tokens: count("output_tokens"),
            total_tokens: count("total_tokens"),
        }
    }
}

/// A usage document checked for storage: its compact text and its ledger counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UsageDocument {
    pub(crate) text: String,
    pub(crate) counts: Counts,
}

impl UsageDocument {
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a document over [`crate::MAX_DOCUMENT_BYTES`].
    pub(crate) fn new(usage: &serde_json::Value) -> Result<Self> {
        Ok(Self {
            text: document_text("usage", usage)?,
            counts: Counts::of(usage),
        })
    }
}

/// One day's spend of a principal (tagged `p`) and a repository (tagged `r`), in one statement:
/// `?1`/`$1` the day, `?2`/`$2` the principal, `?3`/`$3` the repository. It reads the daily
/// totals (`spend_daily`, schema version 9), which triggers on the usage table keep equal to
/// the sums of its rows, so the check costs two primary-key lookups however many attempts the
/// day holds; `sum` (the backend's integer sum expression) turns a missing total into zeros.
pub(crate) fn spend_on_sql(p: char, sum: fn(&str) -> String) -> String {
    let sums = [
        "attempts",
        "requests",
        "input_tokens",
        "output_tokens",
        "total_tokens",
    ]
    .map(sum)
    .join(", ");
    format!(
        "SELECT 'p', {sums} FROM spend_daily WHERE scope = 'p' AND name = {p}2 AND day = {p}1
         UNION ALL
         SELECT 'r', {sums} FROM spend_daily WHERE scope = 'r' AND name = {p}3 AND day = {p}1"
    )
}

/// The claimed job's spend of the claim's day as ten more columns of the claim's answer, for
/// PostgreSQL's claim statement: `p` and `r` are the joined `spend_daily` rows of its principal
/// and repository (missing rows read as zeros); see [`spend_columns_at`].
pub(crate) const CLAIM_SPEND_COLUMNS: &str = "COALESCE(p.attempts, 0), COALESCE(p.requests, 0),
     COALESCE(p.input_tokens, 0), COALESCE(p.output_tokens, 0), COALESCE(p.total_tokens, 0),
     COALESCE(r.attempts, 0), COALESCE(r.requests, 0), COALESCE(r.input_tokens, 0),
     COALESCE(r.output_tokens, 0), COALESCE(r.total_tokens, 0)";

/// The ten columns of [`CLAIM_SPEND_COLUMNS`] from `at`: the principal's, then the repository's.
pub(crate) fn spend_columns_at(row: &impl DbRow, at: usize) -> Result<SpendToday> {
    Ok(SpendToday {
        principal: Spend::read(row, at)?,
        repository: Spend::read(row, at + 5)?,
    })
}

/// Adds one tagged row of [`spend_on_sql`] to `today`.
pub(crate) fn spend_today(row: &impl DbRow, today: &mut SpendToday) -> Result<()> {
    let tag: String = row.at(0)?;
    let spend = Spend::read(row, 1)?;
    if tag == "p" {
        today.principal = spend;
    } else {
        today.repository = spend;
    }
    Ok(())
}

/// The rollup: `?1`/`$1` the first day, `?2`/`$2` the last, `?3`/`$3` the principal or NULL,
/// `?4`/`$4` the row limit; `collate` orders text bytewise on both backends.
pub(crate) fn rollup_sql(p: char, sum: fn(&str) -> String, text: &str, collate: &str) -> String {
    let sums = ["requests", "input_tokens", "output_tokens", "total_tokens"]
        .map(sum)
        .join(", ");
    format!(
        "SELECT day, principal, repository, count(*), {sums} FROM usage
         WHERE day >= {p}1 AND day <= {p}2 AND ({p}3{text} IS NULL OR principal = {p}3)
         GROUP BY day, principal, repository
         ORDER BY day, principal{collate}, repository{collate}
         LIMIT {p}4"
    )
}

/// A row of [`rollup_sql`], checked.
pub(crate) fn rollup_row(row: &impl DbRow) -> Result<UsageRollupRow> {
    let day: i64 = row.at(0)?;
    Ok(UsageRollupRow {
        day: UtcDay::from_days(day).map_err(|_| JobsError::Corrupt { field: "usage.day" })?,
        principal: row.at(1)?,
        repository: row.at(2)?,
        spend: Spend::read(row, 3)?,
    })
}

/// Checks a rollup's range.
pub(crate) fn check_range(from: UtcDay, to: UtcDay) -> Result<()> {
    if from > to {
        return Err(JobsError::Day {
            detail: "the range ends before it starts",
        });
    }
    Ok(())
}

/// The row limit bound into the rollup query: one more than the cap, to see when it is passed.
pub(crate) fn rollup_limit() -> i64 {
    i64::try_from(MAX_USAGE_ROLLUP_ROWS).map_or(i64::MAX, |n| n.saturating_add(1))
}

/// Refuses a rollup that passed the cap.
pub(crate) fn check_rollup(rows: Vec<UsageRollupRow>) -> Result<Vec<UsageRollupRow>> {
    if rows.len() > MAX_USAGE_ROLLUP_ROWS {
        return Err(JobsError::RollupLimit {
            limit: MAX_USAGE_ROLLUP_ROWS,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn days_round_trip_through_text() {
        for (text, days) in [
            ("1970-01-01", 0),
            ("1970-01-02", 1),
            ("2000-02-29", 11_016),
            ("2026-12-07", 20_794),
            ("9999-12-31", LAST_DAY),
        ] {
            let day: UtcDay = text.parse().unwrap();
            assert_eq!(day.days(), days, "{text}");
            assert_eq!(day.to_string(), text);
            assert_eq!(UtcDay::from_days(days).unwrap(), day);
        }
        // Every day of a few leap cycles round-trips.
        for days in 10_000..12_000 {
            let day = UtcDay::from_days(days).unwrap();
            assert_eq!(day.to_string().parse::<UtcDay>().unwrap(), day);
        }
    }

    #[test]
    fn malformed_days_are_refused_with_the_day_code() {
        for bad in [
            "",
            "2026-1-07",
            "2026-12-7",
            "2026/12/07",
            "2026-12-07 ",
            " 2026-12-07",
            "+026-12-07",
            "2026-13-01",
            "2026-00-01",
            "2026-02-29",
            "2100-02-29",
            "2026-04-31",
            "2026-12-00",
            "1969-12-31",
            "20261-12-07",
            "２０２６-12-07",
        ] {
            let e = bad.parse::<UtcDay>().unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_DAY", "{bad:?}");
        }
        assert!(UtcDay::from_days(-1).is_err());
        assert!(UtcDay::from_days(LAST_DAY + 1).is_err());
        assert!(UtcDay::from_unix_seconds(-1).is_err());
        assert_eq!(UtcDay::from_unix_seconds(86_399).unwrap(), UtcDay::MIN);
        assert_eq!(UtcDay::MAX.checked_add_days(1), None);
        assert_eq!(UtcDay::MIN.checked_sub_days(1), None);
        assert_eq!(UtcDay::from_unix_ms_saturating(i64::MIN), UtcDay::MIN);
        assert_eq!(UtcDay::from_unix_ms_saturating(i64::MAX), UtcDay::MAX);
    }

    #[test]
    fn counts_come_from_the_live_object_only() {
        let live = json!({"live": {"requests": 3, "input_tokens": 100, "output_tokens": 20,
            "total_tokens": 120, "model": "m"}});
        assert_eq!(
            Counts::of(&live),
            Counts {
                requests: 3,
                input_tokens: 100,
                output_tokens: 20,
                total_tokens: 120
            }
        );
        for zero in [
            json!({"outcome": "x"}),
            json!({"live": null}),
            json!({"live": [1, 2]}),
            json!({"live": {"requests": -1, "input_tokens": 1.5, "output_tokens": "7",
                "total_tokens": null}}),
            json!(7),
        ] {
            assert_eq!(Counts::of(&zero), Counts::default(), "{zero}");
        }
        let huge = json!({"live": {"requests": u64::MAX, "total_tokens": MAX_LEDGER_COUNT + 1}});
        let capped = Counts::of(&huge);
        assert_eq!(capped.requests, 1_000_000_000_000);
        assert_eq!(capped.total_tokens, 1_000_000_000_000);
    }

    #[test]
    fn spend_adds_saturating() {
        let one = Spend {
            attempts: 1,
            requests: u64::MAX,
            input_tokens: 2,
            output_tokens: 3,
            total_tokens: 5,
        };
        let two = one.saturating_add(one);
        assert_eq!(two.attempts, 2);
        assert_eq!(two.requests, u64::MAX);
        assert_eq!(two.total_tokens, 10);
    }
}
