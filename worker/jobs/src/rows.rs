//! What both backends share about rows: the stored spec document, the raw job row and its
//! checked conversion into a [`Job`], the checked host and attempt rows, the event codes the
//! store writes itself.

use serde::{Deserialize, Serialize};

use crate::error::{JobsError, Result};
use crate::model::{FollowUp, HostInfo, Job, JobFailure, JobKind, JobSpec, JobState, LiveJob};
use vocab::{AttemptId, HostId, JobId};

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
    let cols = [
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
    cols.iter()
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

/// Checks a claim or list limit.
pub(crate) fn check_batch(field: &'static str, n: usize) -> Result<i64> {
    if n > crate::model::MAX_BATCH {
        return Err(JobsError::input(field, "larger than 1000"));
    }
    i64::try_from(n).map_err(|_| JobsError::input(field, "out of range"))
}

/// A `hosts` row, checked; any failure is `PATCH_CANDIDATE_JOBS_CORRUPT`.
pub(crate) fn host_info(
    host: String,
    max_turns: i64,
    meta: &str,
    started: i64,
    seen: i64,
) -> Result<HostInfo> {
    Ok(HostInfo {
        host: HostId::parse(&host).map_err(|_| JobsError::Corrupt { field: "host_id" })?,
        max_turns: u32::try_from(max_turns)
            .map_err(|_| JobsError::Corrupt { field: "max_turns" })?,
        meta: serde_json::from_str(meta).map_err(|_| JobsError::Corrupt { field: "meta_json" })?,
        started_at_ms: started,
        seen_at_ms: seen,
    })
}

/// A running job's `(id, attempt_id)`, checked; any failure is `PATCH_CANDIDATE_JOBS_CORRUPT`.
pub(crate) fn attempt_pair(id: &str, attempt: &str) -> Result<(JobId, AttemptId)> {
    Ok((
        JobId::parse(id).map_err(|_| JobsError::Corrupt { field: "id" })?,
        AttemptId::parse(attempt).map_err(|_| JobsError::Corrupt {
            field: "attempt_id",
        })?,
    ))
}
