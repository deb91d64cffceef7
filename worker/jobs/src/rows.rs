//! What both backends share about rows: the stored spec document, the raw job row and its
//! checked conversion into a [`Job`], the checked decoding of every other row the store reads
//! (through [`DbRow`], which each backend implements for its own row type), the event codes the
//! store writes itself.

use serde::{Deserialize, Serialize};

use crate::access::{AuditEntry, Roles, TokenAccess};
use crate::error::{JobsError, Result};
use crate::evidence::EvidenceDocument;
use crate::model::{
    FollowUp, FollowUpPolicy, HostInfo, Job, JobEvent, JobFailure, JobKind, JobSpec, JobState,
    LiveJob, PolicyAdmission,
};
use crate::review::{StoredDecisionRow, TokenInfo};
use vocab::{AttemptId, HostId, JobId};

/// A column value both backends decode: text, integers, bytes, booleans (an SQLite integer is
/// true when it is not zero) and their `Option`s for nullable columns.
pub(crate) trait Column:
    rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a>
{
}

impl<T> Column for T where T: rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a> {}

/// A result row of either backend; a column that cannot be read is the backend's database error.
pub(crate) trait DbRow {
    /// The column at `index` (from 0).
    fn at<T: Column>(&self, index: usize) -> Result<T>;
    /// The column named `name`.
    fn named<T: Column>(&self, name: &str) -> Result<T>;
}

/// Event code of a submission.
pub const EVENT_SUBMITTED: &str = "PATCH_CANDIDATE_JOB_SUBMITTED";
/// Event code of a claim (the message names the host).
pub const EVENT_CLAIMED: &str = "PATCH_CANDIDATE_JOB_CLAIMED";
/// Event code of a recorded result.
pub const EVENT_COMPLETED: &str = "PATCH_CANDIDATE_JOB_COMPLETED";
/// Event code of a snooze (the job's error code says why).
pub const EVENT_SNOOZED: &str = "PATCH_CANDIDATE_JOB_SNOOZED";
/// Event code of a release on drain.
pub const EVENT_RELEASED: &str = "PATCH_CANDIDATE_JOB_RELEASED";
/// Event code of a cancellation request or a cancellation.
pub const EVENT_CANCELLED: &str = "PATCH_CANDIDATE_JOB_CANCELLED";
/// Event code of an operator retry.
pub const EVENT_RETRIED: &str = "PATCH_CANDIDATE_JOB_RETRIED";
/// Error and event code of a lease that expired (set by the rescuer).
pub const LEASE_EXPIRED: &str = "PATCH_CANDIDATE_JOBS_LEASE_EXPIRED";
/// Error code of a snooze without its own.
pub(crate) const LEASE_EXPIRED_MESSAGE: &str = "the lease expired before the attempt finished";

/// The spec as stored in `jobs.spec_json` (kind, approval bytes and attempts have columns).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpecRow {
    approval_digest: String,
    snapshot_digest: String,
    repository: String,
    commit: String,
    task_sha256: String,
    image_id: String,
    policy_digest: String,
    selections: serde_json::Value,
    runtime: Option<String>,
    /// Absent for an offline job (rows written before live jobs existed read as offline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    live: Option<LiveJob>,
    /// Absent for every job but a follow-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    follow_up: Option<FollowUp>,
    /// Absent for every job without automatic follow-ups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    follow_ups: Option<FollowUpPolicy>,
    /// Absent for jobs queued before schema version 7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    submitted_by: Option<String>,
    /// Absent for jobs no repository policy admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    admitted_under: Option<PolicyAdmission>,
}

impl SpecRow {
    pub(crate) fn text(spec: &JobSpec) -> Result<String> {
        let row = SpecRow {
            approval_digest: spec.approval_digest.clone(),
            snapshot_digest: spec.snapshot_digest.clone(),
            repository: spec.repository.clone(),
            commit: spec.commit.clone(),
            task_sha256: spec.task_sha256.clone(),
            image_id: spec.image_id.clone(),
            policy_digest: spec.policy_digest.clone(),
            selections: spec.selections.clone(),
            runtime: spec.runtime.clone(),
            live: spec.live.clone(),
            follow_up: spec.follow_up.clone(),
            follow_ups: spec.follow_ups,
            submitted_by: spec.submitted_by.clone(),
            admitted_under: spec.admitted_under.clone(),
        };
        serde_json::to_string(&row).map_err(|_| JobsError::spec("selections", "not encodable"))
    }
}

/// A job row exactly as read from either backend, before any check.
#[derive(Debug)]
pub(crate) struct RawJob {
    pub id: String,
    pub seq: i64,
    pub kind: String,
    pub state: String,
    pub idempotency_key: String,
    pub spec_json: String,
    pub approval_json: Option<Vec<u8>>,
    pub attempts: i64,
    pub max_attempts: i64,
    pub run_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub attempt_id: Option<String>,
    pub host_id: Option<String>,
    pub lease_until: Option<i64>,
    pub cancel_requested: bool,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub candidate_digest: Option<String>,
}

fn corrupt<E>(field: &'static str) -> impl FnOnce(E) -> JobsError {
    move |_| JobsError::Corrupt { field }
}

impl RawJob {
    /// Reads a row of [`job_columns`].
    pub(crate) fn read(row: &impl DbRow) -> Result<Self> {
        Ok(Self {
            seq: row.named("seq")?,
            id: row.named("id")?,
            kind: row.named("kind")?,
            state: row.named("state")?,
            idempotency_key: row.named("idempotency_key")?,
            spec_json: row.named("spec_json")?,
            approval_json: row.named("approval_json")?,
            attempts: row.named("attempts")?,
            max_attempts: row.named("max_attempts")?,
            run_at: row.named("run_at")?,
            created_at: row.named("created_at")?,
            updated_at: row.named("updated_at")?,
            attempt_id: row.named("attempt_id")?,
            host_id: row.named("host_id")?,
            lease_until: row.named("lease_until")?,
            cancel_requested: row.named("cancel_requested")?,
            error_code: row.named("error_code")?,
            error_message: row.named("error_message")?,
            candidate_digest: row.named("candidate_digest")?,
        })
    }

    /// Checks every field and builds the job; any failure is `PATCH_CANDIDATE_JOBS_CORRUPT`.
    pub(crate) fn into_job(self) -> Result<Job> {
        let row: SpecRow = serde_json::from_str(&self.spec_json).map_err(corrupt("spec_json"))?;
        let spec = JobSpec {
            kind: JobKind::parse(&self.kind).map_err(corrupt("kind"))?,
            approval_json: self.approval_json.unwrap_or_default(),
            approval_digest: row.approval_digest,
            snapshot_digest: row.snapshot_digest,
            repository: row.repository,
            commit: row.commit,
            task_sha256: row.task_sha256,
            image_id: row.image_id,
            policy_digest: row.policy_digest,
            selections: row.selections,
            runtime: row.runtime,
            live: row.live,
            follow_up: row.follow_up,
            follow_ups: row.follow_ups,
            submitted_by: row.submitted_by,
            admitted_under: row.admitted_under,
            max_attempts: u32::try_from(self.max_attempts).map_err(corrupt("max_attempts"))?,
        };
        let last_error = match (self.error_code, self.error_message) {
            (Some(code), message) => Some(JobFailure {
                code,
                message: message.unwrap_or_default(),
            }),
            (None, _) => None,
        };
        Ok(Job {
            id: JobId::parse(&self.id).map_err(corrupt("id"))?,
            seq: self.seq,
            state: JobState::parse(&self.state).map_err(corrupt("state"))?,
            idempotency_key: self.idempotency_key,
            attempts: u32::try_from(self.attempts).map_err(corrupt("attempts"))?,
            max_attempts: spec.max_attempts,
            spec,
            run_at_ms: self.run_at,
            created_at_ms: self.created_at,
            updated_at_ms: self.updated_at,
            attempt_id: self
                .attempt_id
                .as_deref()
                .map(AttemptId::parse)
                .transpose()
                .map_err(corrupt("attempt_id"))?,
            host: self
                .host_id
                .as_deref()
                .map(HostId::parse)
                .transpose()
                .map_err(corrupt("host_id"))?,
            lease_until_ms: self.lease_until,
            cancel_requested: self.cancel_requested,
            last_error,
            candidate_digest: self.candidate_digest,
        })
    }
}

/// The job's columns in [`RawJob`] order; `approval` is the expression for the approval column
/// (the column itself, or a typed NULL for list views).
pub(crate) fn job_columns(prefix: &str, approval: &str) -> String {
    JOB_COLUMNS
        .iter()
        .map(|c| {
            if c.is_empty() {
                format!("{approval} AS approval_json")
            } else {
                format!("{prefix}{c}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many columns [`job_columns`] lists (a statement's further columns start there).
pub(crate) const JOB_COLUMN_COUNT: usize = JOB_COLUMNS.len();

/// The job's columns in [`RawJob`] order (`""`: the approval column's expression).
const JOB_COLUMNS: [&str; 19] = [
    "id",
    "seq",
    "kind",
    "state",
    "idempotency_key",
    "spec_json",
    "",
    "attempts",
    "max_attempts",
    "run_at",
    "created_at",
    "updated_at",
    "attempt_id",
    "host_id",
    "lease_until",
    "cancel_requested",
    "error_code",
    "error_message",
    "candidate_digest",
];

/// Checks a claim or list limit.
pub(crate) fn check_batch(field: &'static str, n: usize) -> Result<i64> {
    if n > crate::model::MAX_BATCH {
        return Err(JobsError::input(field, "larger than 1000"));
    }
    i64::try_from(n).map_err(|_| JobsError::input(field, "out of range"))
}

/// A row of [`job_columns`], checked; see [`RawJob::into_job`].
pub(crate) fn job(row: &impl DbRow) -> Result<Job> {
    RawJob::read(row)?.into_job()
}

/// The first column of a row.
pub(crate) fn first<T: Column>(row: &impl DbRow) -> Result<T> {
    row.at(0)
}

/// The first two columns of a row.
pub(crate) fn pair<A: Column, B: Column>(row: &impl DbRow) -> Result<(A, B)> {
    Ok((row.at(0)?, row.at(1)?))
}

/// A `hosts` row (`host_id, max_turns, meta_json, started_at, seen_at`), checked; any failure
/// is `PATCH_CANDIDATE_JOBS_CORRUPT`.
pub(crate) fn host_info(row: &impl DbRow) -> Result<HostInfo> {
    let (host, max_turns, meta): (String, i64, String) = (row.at(0)?, row.at(1)?, row.at(2)?);
    let (started_at_ms, seen_at_ms) = (row.at(3)?, row.at(4)?);
    Ok(HostInfo {
        host: HostId::parse(&host).map_err(|_| JobsError::Corrupt { field: "host_id" })?,
        max_turns: u32::try_from(max_turns)
            .map_err(|_| JobsError::Corrupt { field: "max_turns" })?,
        meta: serde_json::from_str(&meta).map_err(|_| JobsError::Corrupt { field: "meta_json" })?,
        started_at_ms,
        seen_at_ms,
    })
}

/// A running job's `(id, attempt_id)`, checked; any failure is `PATCH_CANDIDATE_JOBS_CORRUPT`.
pub(crate) fn attempt_pair(row: &impl DbRow) -> Result<(JobId, AttemptId)> {
    let id: String = row.at(0)?;
    let attempt: String = row.at(1)?;
    Ok((
        JobId::parse(&id).map_err(|_| JobsError::Corrupt { field: "id" })?,
        AttemptId::parse(&attempt).map_err(|_| JobsError::Corrupt {
            field: "attempt_id",
        })?,
    ))
}

/// A `usage` row (`attempt_id, usage_json`), checked.
pub(crate) fn usage_row(row: &impl DbRow) -> Result<(AttemptId, String)> {
    let attempt: String = row.at(0)?;
    let usage: String = row.at(1)?;
    let attempt = AttemptId::parse(&attempt).map_err(|_| JobsError::Corrupt {
        field: "usage.attempt_id",
    })?;
    Ok((attempt, usage))
}

/// An `events` row of job `id` (`seq, attempt_id, at, code, message`), checked.
pub(crate) fn event_row(id: &JobId, row: &impl DbRow) -> Result<JobEvent> {
    let (seq, attempt, at_ms): (i64, Option<String>, i64) = (row.at(0)?, row.at(1)?, row.at(2)?);
    let (code, message) = (row.at(3)?, row.at(4)?);
    Ok(JobEvent {
        seq,
        job_id: id.clone(),
        attempt_id: attempt
            .as_deref()
            .map(AttemptId::parse)
            .transpose()
            .map_err(|_| JobsError::Corrupt {
                field: "events.attempt_id",
            })?,
        at_ms,
        code,
        message,
    })
}

/// A `gate_evidence` row (`gate, outcome, digest, wall_ms, bytes`), checked.
pub(crate) fn evidence_row(row: &impl DbRow) -> Result<EvidenceDocument> {
    let (gate, outcome, digest): (String, String, String) = (row.at(0)?, row.at(1)?, row.at(2)?);
    EvidenceDocument::from_row(&gate, &outcome, &digest, row.at(3)?, row.at(4)?)
}

/// A `review_decisions` row (`job_id, seq, candidate_digest, decision, actor, forced, at_ms,
/// record, follow_up_job_id`), checked.
pub(crate) fn decision_row(row: &impl DbRow) -> Result<StoredDecisionRow> {
    let (job, seq, digest): (String, i64, String) = (row.at(0)?, row.at(1)?, row.at(2)?);
    let (decision, actor, forced): (String, String, bool) = (row.at(3)?, row.at(4)?, row.at(5)?);
    let (at_ms, record, follow): (i64, Vec<u8>, Option<String>) =
        (row.at(6)?, row.at(7)?, row.at(8)?);
    StoredDecisionRow::from_row(
        &job,
        seq,
        &digest,
        &decision,
        &actor,
        forced,
        at_ms,
        record,
        follow.as_deref(),
    )
}

/// An `api_tokens` row (`name, created_at, revoked_at, roles, roles_migrated`), checked.
pub(crate) fn token_row(row: &impl DbRow) -> Result<TokenInfo> {
    let roles: String = row.at(3)?;
    Ok(TokenInfo {
        name: row.at(0)?,
        created_at_ms: row.at(1)?,
        revoked_at_ms: row.at(2)?,
        roles: Roles::stored(&roles)?,
        roles_migrated: row.at(4)?,
    })
}

/// A live token's `name, roles`, checked.
pub(crate) fn token_access_row(row: &impl DbRow) -> Result<TokenAccess> {
    let roles: String = row.at(1)?;
    Ok(TokenAccess {
        name: row.at(0)?,
        roles: Roles::stored(&roles)?,
    })
}

/// An `audit` row (`seq, at_ms, principal, act, subject, detail`), checked.
pub(crate) fn audit_row(row: &impl DbRow) -> Result<AuditEntry> {
    let act: String = row.at(3)?;
    AuditEntry::from_row(
        row.at(0)?,
        row.at(1)?,
        row.at(2)?,
        &act,
        row.at(4)?,
        row.at(5)?,
    )
}
