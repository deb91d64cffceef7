//! The spend ledger's report: `GET /v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD` (and the web UI's
//! usage page, which shows the same report). The job store groups the ledger's rows by UTC day,
//! principal and repository ([`jobs::JobStore::usage_rollup`]); a caller with the `admin` role
//! sees every principal's rows, any other caller only its own principal's.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse as _;
use jobs::{Spend, UsageRollupRow, UtcDay};

use super::{ApiError, ApiResult, Caller};
use crate::Shared;

/// A usage range that is malformed, ends before it starts, or spans more than
/// [`MAX_USAGE_DAYS`].
pub(crate) const USAGE_RANGE_CODE: &str = "PATCH_CANDIDATE_SERVICE_USAGE_RANGE";
/// The days a report covers when `from` is not given: the last 30 UTC days through `to`.
pub(crate) const DEFAULT_USAGE_DAYS: u32 = 30;
/// The most days one report covers.
pub(crate) const MAX_USAGE_DAYS: u32 = 366;

/// The query of a usage report; both days optional.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
}

fn range_error(detail: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        USAGE_RANGE_CODE,
        format!(
            "{USAGE_RANGE_CODE}: {detail}; expected ?from=YYYY-MM-DD&to=YYYY-MM-DD, at most {MAX_USAGE_DAYS} days"
        ),
    )
}

/// The report's days from a raw query string: `to` defaults to `today`, `from` to the 30th day
/// through `to`; both included.
///
/// # Errors
/// 400 `PATCH_CANDIDATE_SERVICE_USAGE_RANGE` for another parameter, a malformed day, a range
/// that ends before it starts or spans more than [`MAX_USAGE_DAYS`] days.
pub(crate) fn usage_range(query: &str, today: UtcDay) -> Result<(UtcDay, UtcDay), ApiError> {
    let q: UsageQuery =
        serde_urlencoded::from_str(query).map_err(|_| range_error("unknown parameter"))?;
    let day = |text: Option<&str>| -> Result<Option<UtcDay>, ApiError> {
        text.map(|t| t.parse::<UtcDay>())
            .transpose()
            .map_err(|_| range_error("a day is not a calendar day"))
    };
    let to = day(q.to.as_deref())?.unwrap_or(today);
    let from = match day(q.from.as_deref())? {
        Some(from) => from,
        None => to
            .checked_sub_days(DEFAULT_USAGE_DAYS - 1)
            .unwrap_or(UtcDay::MIN),
    };
    if from > to {
        return Err(range_error("the range ends before it starts"));
    }
    if to.days() - from.days() >= i64::from(MAX_USAGE_DAYS) {
        return Err(range_error("the range is too long"));
    }
    Ok((from, to))
}

/// Whose rows a caller sees: every principal's for `admin` (`None`), else its own.
pub(crate) fn principal_filter(caller: &Caller) -> Option<String> {
    if caller.roles.contains(jobs::Role::Admin) {
        None
    } else {
        Some(caller.principal.as_str().to_owned())
    }
}

/// A usage report, as the API and the web UI show it.
#[derive(Debug)]
pub(crate) struct UsageReport {
    pub(crate) from: UtcDay,
    pub(crate) to: UtcDay,
    /// The principal the rows are limited to (`None`: every principal's).
    pub(crate) principal: Option<String>,
    pub(crate) rows: Vec<UsageRollupRow>,
    pub(crate) totals: Spend,
}

/// The report of `from` through `to` that `caller` may see.
///
/// # Errors
/// The job store's errors (`PATCH_CANDIDATE_JOBS_ROLLUP_LIMIT`, 400, past the row cap).
pub(crate) async fn usage_report(
    sh: &Shared,
    caller: &Caller,
    from: UtcDay,
    to: UtcDay,
) -> Result<UsageReport, ApiError> {
    let principal = principal_filter(caller);
    let rows = sh
        .store
        .usage_rollup(from, to, principal.as_deref())
        .await?;
    let totals = rows
        .iter()
        .fold(Spend::default(), |t, r| t.saturating_add(r.spend));
    Ok(UsageReport {
        from,
        to,
        principal,
        rows,
        totals,
    })
}

/// The answer of `GET /v1/usage`: the range, the principal filter, the rows, their totals and
/// the row cap.
pub(crate) fn usage_answer(report: &UsageReport) -> serde_json::Value {
    serde_json::json!({
        "from": report.from,
        "to": report.to,
        "principal": report.principal,
        "rows": report.rows,
        "totals": report.totals,
        "max_rows": jobs::MAX_USAGE_ROLLUP_ROWS,
    })
}

/// `GET /v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD`: any authenticated caller (the route table);
/// `admin` sees every principal, any other caller its own principal only.
pub(super) async fn usage(
    State(sh): State<Arc<Shared>>,
    axum::Extension(caller): axum::Extension<Caller>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let (from, to) = usage_range(query.as_deref().unwrap_or_default(), UtcDay::today())?;
    let report = usage_report(&sh, &caller, from, to).await?;
    Ok(axum::Json(usage_answer(&report)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> UtcDay {
        text.parse().unwrap()
    }

    #[test]
    fn the_range_defaults_to_the_last_30_days_through_today() {
        let today = day("2026-12-07");
        assert_eq!(usage_range("", today).unwrap(), (day("2026-11-08"), today));
        assert_eq!(
            usage_range("to=2026-03-01", today).unwrap(),
            (day("2026-01-31"), day("2026-03-01"))
        );
        assert_eq!(
            usage_range("from=2026-12-01", today).unwrap(),
            (day("2026-12-01"), today)
        );
        assert_eq!(
            usage_range("from=2026-01-01&to=2026-01-01", today).unwrap(),
            (day("2026-01-01"), day("2026-01-01"))
        );
        // 366 days, both ends included, is the longest range.
        assert_eq!(
            usage_range("from=2024-01-01&to=2024-12-31", today).unwrap(),
            (day("2024-01-01"), day("2024-12-31"))
        );
        assert_eq!(
            usage_range("to=1970-01-10", today).unwrap(),
            (UtcDay::MIN, day("1970-01-10"))
        );
    }

    #[test]
    fn malformed_reversed_and_oversized_ranges_are_refused() {
        let today = day("2026-12-07");
        for bad in [
            "from=2026-13-01",
            "from=2026-1-1",
            "to=yesterday",
            "from=2026-12-07&to=2026-12-06",
            "from=2024-01-01&to=2025-01-01",
            "from=1970-01-01&to=9999-12-31",
            "days=3",
            "from=2026-12-01&from=2026-12-02",
            "from=%00",
        ] {
            let e = usage_range(bad, today).unwrap_err();
            assert_eq!(
                (e.status, e.code),
                (StatusCode::BAD_REQUEST, USAGE_RANGE_CODE),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_admin_sees_every_principal() {
        let caller = |name: &str, roles: &[jobs::Role]| Caller {
            principal: review::Principal::parse(name).unwrap(),
            roles: jobs::Roles::from_list(roles).unwrap(),
        };
        assert_eq!(principal_filter(&caller("ops", &[jobs::Role::Admin])), None);
        assert_eq!(principal_filter(&caller("root", &jobs::Role::ALL)), None);
        for roles in [
            &[][..],
            &[jobs::Role::Submit][..],
            &[jobs::Role::Review, jobs::Role::Publish][..],
        ] {
            assert_eq!(
                principal_filter(&caller("alice", roles)).as_deref(),
                Some("alice")
            );
        }
    }
}
