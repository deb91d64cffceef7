//! The embedded backend: one SQLite file (WAL, busy timeout, foreign keys), one connection behind
//! a mutex, every call on the blocking pool. Claims and migrations take the write lock up front
//! (`BEGIN IMMEDIATE`), so two processes on one file (the service and a `jobs submit`) never
//! interleave a read and its write. Times come from the host clock.

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension as _, Row, TransactionBehavior, params};

use crate::access::{AuditAct, AuditEntry, NewAuditEntry, Roles, TokenAccess};
use crate::error::{Backend, JobsError, Result};
use crate::evidence::EvidenceDocument;
use crate::intake::{
    DELIVERY_COLUMNS, DeliveryOutcome, ForgeDelivery, NewForgeDelivery, delivery_row,
};
use crate::ledger::{
    SpendToday, UsageDocument, UsageRollupRow, UtcDay, rollup_limit, rollup_row, rollup_sql,
    spend_on_sql, spend_today,
};
use crate::model::{
    Claimed, Fenced, Heartbeat, HostInfo, Job, JobEvent, JobSpec, JobState, duration_ms,
};
use crate::report::{ForgeCall, ForgePull, PULL_COLUMNS, call_row, pull_row};
use crate::review::decision_act;
use crate::review::{
    DecisionRow, PublicationClaim, PublishFacts, StoredDecisionRow, TokenHash, TokenInfo,
    TokenName, check_target,
};
use crate::rows::{
    Column, DbRow, EVENT_CANCELLED, EVENT_CLAIMED, EVENT_RETRIED, EVENT_SUBMITTED, LEASE_EXPIRED,
    LEASE_EXPIRED_MESSAGE, SpecRow, attempt_pair, audit_row, decision_row, event_row, evidence_row,
    first, host_info, job, job_columns, pair, token_access_row, token_row, usage_row,
};
use crate::schema::{MIGRATIONS, SCHEMA_VERSION, SELECT_STORE_ID, SELECT_VERSION, stored_store_id};
use crate::transition::{FencedWrite, NewJobRow, fenced_update};
use vocab::StoreId;
use vocab::{AttemptId, HostId, JobId, now_unix_ms};

/// A job's state and candidate digest (`?1`: its ID).
const JOB_FACTS: &str = "SELECT state, candidate_digest FROM jobs WHERE id = ?1";
/// Whether job `?1` is published.
const PUBLISHED: &str = "SELECT EXISTS (SELECT 1 FROM publications WHERE job_id = ?1)";
/// Job `?1`'s last decision and the digest it names.
const LAST_DECISION: &str = "SELECT decision, candidate_digest FROM review_decisions
     WHERE job_id = ?1 ORDER BY seq DESC LIMIT 1";

/// The fenced `UPDATE`: numbered `?` parameters, the host clock bound as `?12`, the new `run_at`
/// computed on the host (`now + delay`, saturating) and bound as `?7`.
static FENCED_UPDATE: LazyLock<String> = LazyLock::new(|| fenced_update('?', "?12", "?7"));

pub(crate) fn map_err(e: rusqlite::Error) -> JobsError {
    let unavailable = matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::CannotOpen
                | ErrorCode::SystemIoFailure
                | ErrorCode::DiskFull
        )
    );
    let detail = e.to_string();
    if unavailable {
        JobsError::Unavailable {
            backend: Backend::Sqlite,
            detail,
        }
    } else {
        JobsError::Database {
            backend: Backend::Sqlite,
            detail,
        }
    }
}

fn cols() -> String {
    job_columns("", "approval_json")
}

impl DbRow for Row<'_> {
    fn at<T: Column>(&self, index: usize) -> Result<T> {
        self.get(index).map_err(map_err)
    }

    fn named<T: Column>(&self, name: &str) -> Result<T> {
        self.get(name).map_err(map_err)
    }
}

/// Every row of a (cached) statement, decoded.
fn all<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: impl Fn(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql).map_err(map_err)?;
    let mut rows = stmt.query(params).map_err(map_err)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(map_err)? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// The first row of a statement, decoded, if there is one.
fn one_opt<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: impl FnOnce(&Row<'_>) -> Result<T>,
) -> Result<Option<T>> {
    conn.query_row(sql, params, |r| Ok(decode(r)))
        .optional()
        .map_err(map_err)?
        .transpose()
}

/// The first row of a statement, decoded; no row is a database error.
fn one<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: impl FnOnce(&Row<'_>) -> Result<T>,
) -> Result<T> {
    conn.query_row(sql, params, |r| Ok(decode(r)))
        .map_err(map_err)?
}

/// A transaction that takes the write lock up front.
fn immediate(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_err)
}

fn event(
    conn: &Connection,
    id: &str,
    attempt: Option<&str>,
    at: i64,
    code: &str,
    message: &str,
) -> Result<()> {
    conn.execute(
        "INSERT INTO events (job_id, attempt_id, at, code, message) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, attempt, at, code, message],
    )
    .map_err(map_err)?;
    Ok(())
}

fn get_job(conn: &Connection, id: &str) -> Result<Option<Job>> {
    one_opt(
        conn,
        &format!("SELECT {} FROM jobs WHERE id = ?1", cols()),
        params![id],
        |r| job(r),
    )
}

/// The SQLite job store.
#[derive(Clone, Debug)]
pub(crate) struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
    store_id: StoreId,
}

impl SqliteStore {
    /// Opens (creating with mode 0600 when missing) and migrates the file. Blocking.
    pub(crate) fn open(path: &Path, busy_timeout: Duration) -> Result<Self> {
        // Switching a fresh file to WAL takes an exclusive lock that SQLite does not wait for
        // through the busy handler: processes opening one new file at once retry here, within
        // the same busy timeout.
        let deadline = std::time::Instant::now() + busy_timeout;
        loop {
            match Self::open_once(path, busy_timeout) {
                Err(JobsError::Unavailable { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    fn open_once(path: &Path, busy_timeout: Duration) -> Result<Self> {
        create_private(path)?;
        let mut conn = Connection::open(path).map_err(map_err)?;
        conn.busy_timeout(busy_timeout).map_err(map_err)?;
        // WAL: readers never block the writer. synchronous = FULL: a commit the store reported
        // survives a power cut, not only a process crash.
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(map_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(JobsError::Database {
                backend: Backend::Sqlite,
                detail: format!("journal mode {mode} instead of wal"),
            });
        }
        conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")
            .map_err(map_err)?;
        let store_id = migrate(&mut conn)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            path: path.to_owned(),
            store_id,
        })
    }

    /// The database file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The store's identity, read at open.
    pub(crate) fn store_id(&self) -> &StoreId {
        &self.store_id
    }

    async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let guard = conn.lock();
            // A caller that gave up while this call waited for the connection (a heartbeat past
            // its deadline while another process holds the file locked) is gone: running its
            // statement now could only hold the one connection for nothing — up to the busy
            // timeout each — while the calls queued behind it wait. It does nothing instead.
            if tx.is_closed() {
                return;
            }
            let result = match guard {
                Ok(mut guard) => f(&mut guard),
                Err(_) => Err(JobsError::Database {
                    backend: Backend::Sqlite,
                    detail: "connection lock poisoned by an earlier panic".to_owned(),
                }),
            };
            let _ = tx.send(result);
        });
        rx.await.map_err(|_| JobsError::Database {
            backend: Backend::Sqlite,
            detail: "blocking task failed".to_owned(),
        })?
    }

    pub(crate) async fn schema_version(&self) -> Result<i64> {
        self.run(|c| current_version(c)).await
    }

    pub(crate) async fn submit(&self, spec: JobSpec, id: JobId) -> Result<(Job, bool)> {
        let row = NewJobRow {
            id: id.to_string(),
            kind: spec.kind.as_str(),
            key: spec.idempotency_key(),
            spec_json: SpecRow::text(&spec)?,
            approval_json: spec.approval_json,
            max_attempts: i64::from(spec.max_attempts),
        };
        let key = row.key.clone();
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let inserted = insert_job(&tx, &row, now)?;
            let job = one(
                &tx,
                &format!("SELECT {} FROM jobs WHERE idempotency_key = ?1", cols()),
                params![key],
                |r| job(r),
            )?;
            tx.commit().map_err(map_err)?;
            Ok((job, inserted))
        })
        .await
    }

    pub(crate) async fn claim(
        &self,
        host: HostId,
        max: i64,
        lease: Duration,
        attempts: Vec<AttemptId>,
        spend: bool,
    ) -> Result<Vec<Claimed>> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let lease_until = now.saturating_add(duration_ms(lease));
            let ids: Vec<String> = all(
                &tx,
                "SELECT id FROM jobs WHERE state = 'queued' AND run_at <= ?1
                 ORDER BY run_at, seq LIMIT ?2",
                params![now, max],
                |r| first(r),
            )?;
            let mut claimed = Vec::with_capacity(ids.len());
            let sql = format!(
                "UPDATE jobs SET state = 'running', attempts = attempts + 1, attempt_id = ?1,
                     host_id = ?2, lease_until = ?3, updated_at = ?4
                 WHERE id = ?5 AND state = 'queued' RETURNING {}",
                cols()
            );
            for (id, attempt_id) in ids.iter().zip(attempts) {
                let job = one(
                    &tx,
                    &sql,
                    params![attempt_id.as_str(), host.as_str(), lease_until, now, id],
                    |r| job(r),
                )?;
                event(
                    &tx,
                    id,
                    Some(attempt_id.as_str()),
                    now,
                    EVENT_CLAIMED,
                    &format!("claimed by host {host}"),
                )?;
                // The day's totals in the claim's transaction, on the claim's clock; the
                // principal and repository as the ledger takes them from the spec.
                let spend_today = if spend {
                    Some(spend_on(
                        &tx,
                        UtcDay::from_unix_ms_saturating(now),
                        job.spec.submitted_by.as_deref().unwrap_or_default(),
                        &job.spec.repository,
                    )?)
                } else {
                    None
                };
                claimed.push(Claimed {
                    attempt: job.attempts,
                    attempt_id,
                    lease_until_ms: lease_until,
                    job,
                    spend_today,
                });
            }
            tx.commit().map_err(map_err)?;
            Ok(claimed)
        })
        .await
    }

    pub(crate) async fn heartbeat(
        &self,
        id: JobId,
        attempt: AttemptId,
        lease: Duration,
    ) -> Result<Heartbeat> {
        self.run(move |conn| {
            let now = now_unix_ms();
            let cancel: Option<bool> = one_opt(
                conn,
                "UPDATE jobs SET lease_until = ?1, updated_at = ?2
                 WHERE id = ?3 AND attempt_id = ?4 AND state = 'running'
                 RETURNING cancel_requested",
                params![
                    now.saturating_add(duration_ms(lease)),
                    now,
                    id.as_str(),
                    attempt.as_str()
                ],
                |r| first(r),
            )?;
            Ok(match cancel {
                Some(cancel_requested) => Heartbeat::Renewed { cancel_requested },
                None => Heartbeat::Lost,
            })
        })
        .await
    }

    /// The one fenced write (see [`crate::transition`]): the guarded `UPDATE`, then the candidate,
    /// the usage row and the log line, in one `BEGIN IMMEDIATE` transaction; nothing when the
    /// attempt is no longer current.
    pub(crate) async fn fenced_write(
        &self,
        id: JobId,
        attempt: AttemptId,
        write: FencedWrite,
    ) -> Result<Fenced> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let due = write.delay_ms.map(|d| now.saturating_add(d));
            let n = tx
                .prepare_cached(&FENCED_UPDATE)
                .map_err(map_err)?
                .execute(params![
                    id.as_str(),
                    attempt.as_str(),
                    write.target.state().as_str(),
                    write.target.honours_cancel(),
                    write.target.retries(),
                    write.attempts_back(),
                    due,
                    write.writes_error(),
                    write.error_code(),
                    write.error_message(),
                    write.candidate_digest(),
                    now
                ])
                .map_err(map_err)?;
            if n == 0 {
                return Ok(Fenced::Lost);
            }
            if let Some(candidate) = &write.candidate {
                tx.execute(
                    "INSERT INTO candidates (job_id, attempt_id, digest, bytes, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![
                        id.as_str(),
                        attempt.as_str(),
                        candidate.digest,
                        candidate.bytes,
                        now
                    ],
                )
                .map_err(map_err)?;
            }
            for doc in &write.evidence {
                tx.execute(
                    "INSERT INTO gate_evidence
                         (job_id, attempt_id, gate, outcome, digest, wall_ms, bytes, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        id.as_str(),
                        attempt.as_str(),
                        doc.gate(),
                        doc.outcome().as_str(),
                        doc.digest(),
                        doc.wall_ms_i64(),
                        doc.bytes(),
                        now
                    ],
                )
                .map_err(map_err)?;
            }
            if let Some(usage) = &write.usage
                && upsert_usage(&tx, &id, &attempt, usage, now)? == 0
            {
                return Err(JobsError::Corrupt { field: "usage" });
            }
            event(
                &tx,
                id.as_str(),
                Some(attempt.as_str()),
                now,
                &write.event_code,
                &write.event_message,
            )?;
            if let Some(row) = &write.follow_up {
                insert_job(&tx, row, now)?;
            }
            tx.commit().map_err(map_err)?;
            Ok(Fenced::Applied)
        })
        .await
    }

    pub(crate) async fn record_usage(
        &self,
        id: JobId,
        attempt: AttemptId,
        usage: UsageDocument,
    ) -> Result<()> {
        self.run(move |conn| {
            let n = upsert_usage(conn, &id, &attempt, &usage, now_unix_ms())?;
            if n == 0 {
                return Err(JobsError::NotFound { id: id.to_string() });
            }
            Ok(())
        })
        .await
    }

    pub(crate) async fn usage(&self, id: JobId) -> Result<Vec<(AttemptId, String)>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT attempt_id, usage_json FROM usage WHERE job_id = ?1
                 ORDER BY recorded_at, attempt_id",
                params![id.as_str()],
                |r| usage_row(r),
            )
        })
        .await
    }

    pub(crate) async fn spend_on(
        &self,
        day: UtcDay,
        principal: String,
        repository: String,
    ) -> Result<SpendToday> {
        self.run(move |conn| spend_on(conn, day, &principal, &repository))
            .await
    }

    pub(crate) async fn usage_rollup(
        &self,
        from: UtcDay,
        to: UtcDay,
        principal: Option<String>,
    ) -> Result<Vec<UsageRollupRow>> {
        self.run(move |conn| {
            all(
                conn,
                &ROLLUP,
                params![from.days(), to.days(), principal, rollup_limit()],
                |r| rollup_row(r),
            )
        })
        .await
    }

    pub(crate) async fn rescue_expired(&self) -> Result<u64> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            // The one guarded statement: the condition and the change are evaluated together.
            let rescued: Vec<(String, Option<String>)> = all(
                &tx,
                "UPDATE jobs SET
                     state = CASE WHEN cancel_requested = 1 THEN 'cancelled'
                                  WHEN attempts >= max_attempts THEN 'failed'
                                  ELSE 'queued' END,
                     run_at = ?1, lease_until = NULL, error_code = ?2, error_message = ?3,
                     updated_at = ?1
                 WHERE state = 'running' AND lease_until < ?1
                 RETURNING id, attempt_id",
                params![now, LEASE_EXPIRED, LEASE_EXPIRED_MESSAGE],
                |r| pair(r),
            )?;
            for (id, attempt) in &rescued {
                event(
                    &tx,
                    id,
                    attempt.as_deref(),
                    now,
                    LEASE_EXPIRED,
                    LEASE_EXPIRED_MESSAGE,
                )?;
            }
            tx.commit().map_err(map_err)?;
            Ok(rescued.len() as u64)
        })
        .await
    }

    pub(crate) async fn cancel(&self, id: JobId) -> Result<Job> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let state: Option<String> = one_opt(
                &tx,
                "UPDATE jobs SET
                     state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
                     cancel_requested = CASE WHEN state = 'running' THEN 1 ELSE cancel_requested END,
                     updated_at = ?1
                 WHERE id = ?2 AND (state = 'queued' OR (state = 'running' AND cancel_requested = 0))
                 RETURNING state",
                params![now, id.as_str()],
                |r| first(r),
            )?;
            if let Some(state) = state {
                let message = if state == "cancelled" {
                    "cancelled while queued"
                } else {
                    "cancellation requested while running"
                };
                event(&tx, id.as_str(), None, now, EVENT_CANCELLED, message)?;
            }
            let job = get_job(&tx, id.as_str())?.ok_or_else(|| JobsError::NotFound { id: id.to_string() })?;
            tx.commit().map_err(map_err)?;
            Ok(job)
        })
        .await
    }

    pub(crate) async fn retry(&self, id: JobId) -> Result<Job> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let n = tx
                .execute(
                    "UPDATE jobs SET state = 'queued', run_at = ?1, updated_at = ?1,
                         max_attempts = MAX(max_attempts, attempts + 1), cancel_requested = 0,
                         lease_until = NULL
                     WHERE id = ?2 AND state IN ('failed', 'cancelled')",
                    params![now, id.as_str()],
                )
                .map_err(map_err)?;
            if n == 1 {
                event(
                    &tx,
                    id.as_str(),
                    None,
                    now,
                    EVENT_RETRIED,
                    "queued again by the operator",
                )?;
            }
            let job = get_job(&tx, id.as_str())?
                .ok_or_else(|| JobsError::NotFound { id: id.to_string() })?;
            tx.commit().map_err(map_err)?;
            Ok(job)
        })
        .await
    }

    pub(crate) async fn get(&self, id: JobId) -> Result<Option<Job>> {
        self.run(move |conn| get_job(conn, id.as_str())).await
    }

    pub(crate) async fn list(&self, state: Option<JobState>, limit: i64) -> Result<Vec<Job>> {
        self.run(move |conn| {
            let sql = format!(
                "SELECT {} FROM jobs WHERE (?1 IS NULL OR state = ?1)
                 ORDER BY seq DESC LIMIT ?2",
                job_columns("", "NULL")
            );
            all(
                conn,
                &sql,
                params![state.map(JobState::as_str), limit],
                |r| job(r),
            )
        })
        .await
    }

    pub(crate) async fn follow_ups_of(&self, id: JobId) -> Result<Vec<Job>> {
        self.run(move |conn| {
            // The expression is the one `jobs_by_parent` indexes, so the index serves it.
            let sql = format!(
                "SELECT {} FROM jobs
                 WHERE json_extract(spec_json, '$.follow_up.supersedes_job') = ?1
                 ORDER BY seq LIMIT ?2",
                job_columns("", "NULL")
            );
            all(
                conn,
                &sql,
                params![id.as_str(), crate::MAX_FOLLOW_UPS_LISTED],
                |r| job(r),
            )
        })
        .await
    }

    pub(crate) async fn candidate(&self, id: JobId) -> Result<Option<Vec<u8>>> {
        self.run(move |conn| {
            one_opt(
                conn,
                "SELECT bytes FROM candidates WHERE job_id = ?1",
                params![id.as_str()],
                |r| first(r),
            )
        })
        .await
    }

    pub(crate) async fn evidence(&self, id: JobId) -> Result<Vec<EvidenceDocument>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT gate, outcome, digest, wall_ms, bytes FROM gate_evidence
                 WHERE job_id = ?1 ORDER BY gate",
                params![id.as_str()],
                |r| evidence_row(r),
            )
        })
        .await
    }

    pub(crate) async fn events(&self, id: JobId) -> Result<Vec<JobEvent>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT seq, attempt_id, at, code, message FROM events WHERE job_id = ?1 ORDER BY seq",
                params![id.as_str()],
                |r| event_row(&id, r),
            )
        })
        .await
    }

    pub(crate) async fn append_event(
        &self,
        id: JobId,
        attempt: Option<AttemptId>,
        code: String,
        message: String,
    ) -> Result<()> {
        self.run(move |conn| {
            let n = conn
                .execute(
                    "INSERT INTO events (job_id, attempt_id, at, code, message)
                     SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ?1)",
                    params![
                        id.as_str(),
                        attempt.as_ref().map(AttemptId::as_str),
                        now_unix_ms(),
                        code,
                        message
                    ],
                )
                .map_err(map_err)?;
            if n == 0 {
                return Err(JobsError::NotFound { id: id.to_string() });
            }
            Ok(())
        })
        .await
    }

    pub(crate) async fn register_host(
        &self,
        host: HostId,
        max_turns: u32,
        meta: String,
    ) -> Result<()> {
        self.run(move |conn| {
            let now = now_unix_ms();
            conn.execute(
                "INSERT INTO hosts (host_id, max_turns, meta_json, started_at, seen_at)
                 VALUES (?1, ?2, ?3, ?4, ?4)
                 ON CONFLICT (host_id) DO UPDATE SET max_turns = excluded.max_turns,
                     meta_json = excluded.meta_json, started_at = excluded.started_at,
                     seen_at = excluded.seen_at",
                params![host.as_str(), i64::from(max_turns), meta, now],
            )
            .map_err(map_err)?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn host_heartbeat(&self, host: HostId) -> Result<bool> {
        self.run(move |conn| {
            let n = conn
                .execute(
                    "UPDATE hosts SET seen_at = ?1 WHERE host_id = ?2",
                    params![now_unix_ms(), host.as_str()],
                )
                .map_err(map_err)?;
            Ok(n == 1)
        })
        .await
    }

    pub(crate) async fn hosts(&self) -> Result<Vec<HostInfo>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT host_id, max_turns, meta_json, started_at, seen_at FROM hosts ORDER BY host_id",
                [],
                |r| host_info(r),
            )
        })
        .await
    }

    pub(crate) async fn current_attempts(&self) -> Result<Vec<(JobId, AttemptId)>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT id, attempt_id FROM jobs WHERE state = 'running' ORDER BY id",
                [],
                |r| attempt_pair(r),
            )
        })
        .await
    }
}

/// Queues `row` unless a job with its idempotency key exists (then nothing is written), with
/// its `submitted` log line; returns whether it was inserted.
fn insert_job(tx: &rusqlite::Transaction<'_>, row: &NewJobRow, now: i64) -> Result<bool> {
    let inserted = tx
        .execute(
            "INSERT INTO jobs (id, seq, kind, state, idempotency_key, spec_json,
                 approval_json, attempts, max_attempts, run_at, created_at, updated_at)
             VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs), ?2, 'queued', ?3,
                 ?4, ?5, 0, ?6, ?7, ?7, ?7)
             ON CONFLICT (idempotency_key) DO NOTHING",
            params![
                row.id,
                row.kind,
                row.key,
                row.spec_json,
                row.approval_json,
                row.max_attempts,
                now
            ],
        )
        .map_err(map_err)?;
    if inserted == 1 {
        event(tx, &row.id, None, now, EVENT_SUBMITTED, "job submitted")?;
    }
    Ok(inserted == 1)
}

/// Inserts or replaces the attempt's usage row with its ledger columns: the principal and
/// repository from the job's own row, the day of `now`, the document's counts. The first
/// recording's `recorded_at` and day stay. Returns the rows written: 0 when the job is unknown.
fn upsert_usage(
    conn: &Connection,
    id: &JobId,
    attempt: &AttemptId,
    usage: &UsageDocument,
    now: i64,
) -> Result<usize> {
    let c = usage.counts;
    conn.prepare_cached(
        "INSERT INTO usage (job_id, attempt_id, usage_json, recorded_at, principal, repository,
             day, requests, input_tokens, output_tokens, total_tokens)
         SELECT ?1, ?2, ?3, ?4,
             COALESCE(CAST(json_extract(spec_json, '$.submitted_by') AS TEXT), ''),
             COALESCE(CAST(json_extract(spec_json, '$.repository') AS TEXT), ''),
             ?5, ?6, ?7, ?8, ?9
         FROM jobs WHERE id = ?1
         ON CONFLICT (job_id, attempt_id) DO UPDATE SET
             usage_json = excluded.usage_json, principal = excluded.principal,
             repository = excluded.repository, requests = excluded.requests,
             input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
             total_tokens = excluded.total_tokens",
    )
    .map_err(map_err)?
    .execute(params![
        id.as_str(),
        attempt.as_str(),
        usage.text,
        now,
        UtcDay::from_unix_ms_saturating(now).days(),
        c.requests,
        c.input_tokens,
        c.output_tokens,
        c.total_tokens
    ])
    .map_err(map_err)
}

/// SQLite's integer sum of a column (0 for no rows).
fn sqlite_sum(column: &str) -> String {
    format!("COALESCE(sum({column}), 0)")
}

static SPEND_ON: LazyLock<String> = LazyLock::new(|| spend_on_sql('?', sqlite_sum));

/// One day's spend of a principal and a repository ([`SPEND_ON`]), on `conn` (a claim reads it
/// inside its own transaction).
fn spend_on(
    conn: &Connection,
    day: UtcDay,
    principal: &str,
    repository: &str,
) -> Result<SpendToday> {
    let mut stmt = conn.prepare_cached(&SPEND_ON).map_err(map_err)?;
    let mut rows = stmt
        .query(params![day.days(), principal, repository])
        .map_err(map_err)?;
    let mut today = SpendToday::default();
    while let Some(row) = rows.next().map_err(map_err)? {
        spend_today(row, &mut today)?;
    }
    Ok(today)
}
static ROLLUP: LazyLock<String> = LazyLock::new(|| rollup_sql('?', sqlite_sum, "", ""));

/// Creates the file with mode 0600 when it does not exist (the database holds approvals and
/// candidates), so SQLite never creates it with the process umask.
fn create_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(JobsError::Io {
            what: "create the SQLite database file",
            detail: e.to_string(),
        }),
    }
}

fn current_version(conn: &Connection) -> Result<i64> {
    one(conn, SELECT_VERSION, [], |r| first(r))
}

/// Applies the pending migrations and makes sure the store has its identity, in one
/// `BEGIN IMMEDIATE` transaction; returns the identity.
fn migrate(conn: &mut Connection) -> Result<StoreId> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(map_err)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    INTEGER PRIMARY KEY,
             name       TEXT NOT NULL,
             applied_at INTEGER NOT NULL
         )",
    )
    .map_err(map_err)?;
    let found = current_version(&tx)?;
    if found > SCHEMA_VERSION {
        return Err(JobsError::Schema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.execute_batch(m.sqlite).map_err(map_err)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            params![m.version, m.name, now_unix_ms()],
        )
        .map_err(map_err)?;
        tracing::info!(version = m.version, "job store: sqlite schema migrated");
    }
    tx.execute(
        "INSERT INTO store_identity (singleton, store_id) VALUES (1, ?1)
         ON CONFLICT (singleton) DO NOTHING",
        params![crate::ids::random_store_id()?.as_str()],
    )
    .map_err(map_err)?;
    let stored: String = one(&tx, SELECT_STORE_ID, [], |r| first(r))?;
    let store_id = stored_store_id(&stored)?;
    tx.commit().map_err(map_err)?;
    Ok(store_id)
}

/// Review decisions, publications and named tokens (schema version 4), publication claims
/// (version 5). Each write is one `BEGIN IMMEDIATE` transaction: the decisions, the claim and
/// the publication of a job are one serialised sequence.
impl SqliteStore {
    pub(crate) async fn record_decision(
        &self,
        id: JobId,
        row: DecisionRow,
        follow_up: Option<JobId>,
    ) -> Result<i64> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let found = one_opt(&tx, JOB_FACTS, params![id.as_str()], |r| pair(r))?;
            check_target(&id, found, &row)?;
            if one(&tx, PUBLISHED, params![id.as_str()], |r| first(r))? {
                return Err(JobsError::Published { id: id.to_string() });
            }
            let seq: i64 = tx
                .query_row(
                    "INSERT INTO review_decisions (job_id, seq, candidate_digest, decision, actor,
                         forced, at_ms, record, follow_up_job_id)
                     SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7, ?8
                     FROM review_decisions WHERE job_id = ?1
                     RETURNING seq",
                    params![
                        id.as_str(),
                        row.candidate_digest(),
                        row.decision(),
                        row.actor(),
                        i64::from(row.forced()),
                        row.at_ms(),
                        row.record(),
                        follow_up.as_ref().map(JobId::as_str),
                    ],
                    |r| r.get(0),
                )
                .map_err(map_err)?;
            insert_audit(&tx, &decision_act(&id, &row, seq)?, now_unix_ms())?;
            tx.commit().map_err(map_err)?;
            Ok(seq)
        })
        .await
    }

    pub(crate) async fn decisions(&self, id: JobId) -> Result<Vec<StoredDecisionRow>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT job_id, seq, candidate_digest, decision, actor, forced, at_ms, record,
                     follow_up_job_id
                 FROM review_decisions WHERE job_id = ?1 ORDER BY seq",
                params![id.as_str()],
                |r| decision_row(r),
            )
        })
        .await
    }

    pub(crate) async fn claim_publication(
        &self,
        claim: PublicationClaim,
        lease: Duration,
    ) -> Result<PublicationClaim> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let id = claim.job_id();
            publish_facts(&tx, id)?.check(id, claim.candidate_digest())?;
            let now = now_unix_ms();
            let live: Option<(String, String)> = one_opt(
                &tx,
                "SELECT holder, branch FROM publication_claims
                 WHERE job_id = ?1 AND lease_until > ?2",
                params![id.as_str(), now],
                |r| pair(r),
            )?;
            if let Some((holder, branch)) = live {
                return Err(JobsError::Publishing {
                    id: id.to_string(),
                    holder,
                    branch,
                });
            }
            tx.execute(
                "INSERT INTO publication_claims (job_id, candidate_digest, claim_token, holder,
                     branch, claimed_at, lease_until)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (job_id) DO UPDATE SET candidate_digest = excluded.candidate_digest,
                     claim_token = excluded.claim_token, holder = excluded.holder,
                     branch = excluded.branch, claimed_at = excluded.claimed_at,
                     lease_until = excluded.lease_until",
                params![
                    id.as_str(),
                    claim.candidate_digest(),
                    claim.token(),
                    claim.holder().as_str(),
                    claim.branch(),
                    now,
                    now.saturating_add(duration_ms(lease)),
                ],
            )
            .map_err(map_err)?;
            tx.commit().map_err(map_err)?;
            Ok(claim)
        })
        .await
    }

    pub(crate) async fn renew_publication_claim(
        &self,
        claim: PublicationClaim,
        lease: Duration,
    ) -> Result<()> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let id = claim.job_id();
            publish_facts(&tx, id)?.check(id, claim.candidate_digest())?;
            let n = tx
                .execute(
                    "UPDATE publication_claims SET lease_until = ?3
                     WHERE job_id = ?1 AND claim_token = ?2",
                    params![
                        id.as_str(),
                        claim.token(),
                        now_unix_ms().saturating_add(duration_ms(lease))
                    ],
                )
                .map_err(map_err)?;
            if n != 1 {
                return Err(JobsError::ClaimLost { id: id.to_string() });
            }
            tx.commit().map_err(map_err)
        })
        .await
    }

    pub(crate) async fn release_publication_claim(&self, claim: PublicationClaim) -> Result<bool> {
        self.run(move |conn| {
            let n = conn
                .execute(
                    "DELETE FROM publication_claims WHERE job_id = ?1 AND claim_token = ?2",
                    params![claim.job_id().as_str(), claim.token()],
                )
                .map_err(map_err)?;
            Ok(n == 1)
        })
        .await
    }

    pub(crate) async fn record_publication(
        &self,
        claim: PublicationClaim,
        record: Vec<u8>,
        act: NewAuditEntry,
    ) -> Result<()> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let id = claim.job_id();
            let facts = publish_facts(&tx, id)?;
            facts.check_unpublished(id)?;
            let held = one(
                &tx,
                "SELECT EXISTS (SELECT 1 FROM publication_claims
                 WHERE job_id = ?1 AND claim_token = ?2)",
                params![id.as_str(), claim.token()],
                |r| first(r),
            )?;
            facts.check_held(id, held, claim.candidate_digest())?;
            tx.execute(
                "INSERT INTO publications (job_id, candidate_digest, record, created_at)
                 VALUES (?1, ?2, ?3, ?4)",
                params![id.as_str(), claim.candidate_digest(), record, now_unix_ms()],
            )
            .map_err(map_err)?;
            tx.execute(
                "DELETE FROM publication_claims WHERE job_id = ?1",
                params![id.as_str()],
            )
            .map_err(map_err)?;
            insert_audit(&tx, &act, now_unix_ms())?;
            tx.commit().map_err(map_err)
        })
        .await
    }

    pub(crate) async fn publication(&self, id: JobId) -> Result<Option<Vec<u8>>> {
        self.run(move |conn| {
            one_opt(
                conn,
                "SELECT record FROM publications WHERE job_id = ?1",
                params![id.as_str()],
                |r| first(r),
            )
        })
        .await
    }

    pub(crate) async fn create_token(
        &self,
        name: TokenName,
        hash: TokenHash,
        roles: Roles,
        act: NewAuditEntry,
    ) -> Result<()> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let n = tx
                .execute(
                    "INSERT INTO api_tokens (name, token_sha256, created_at, roles, roles_migrated)
                     VALUES (?1, ?2, ?3, ?4, 0)
                     ON CONFLICT DO NOTHING",
                    params![name.as_str(), hash.as_str(), now, roles.to_list()],
                )
                .map_err(map_err)?;
            if n != 1 {
                return Err(JobsError::Conflict {
                    what: "the token name is taken (names are never reused)",
                });
            }
            insert_audit(&tx, &act, now)?;
            tx.commit().map_err(map_err)
        })
        .await
    }

    pub(crate) async fn tokens(&self) -> Result<Vec<TokenInfo>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT name, created_at, revoked_at, roles, roles_migrated FROM api_tokens
                 ORDER BY name",
                [],
                |r| token_row(r),
            )
        })
        .await
    }

    pub(crate) async fn revoke_token(&self, name: TokenName, act: NewAuditEntry) -> Result<bool> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let n = tx
                .execute(
                    "UPDATE api_tokens SET revoked_at = ?1 WHERE name = ?2 AND revoked_at IS NULL",
                    params![now, name.as_str()],
                )
                .map_err(map_err)?;
            if n == 1 {
                insert_audit(&tx, &act, now)?;
            }
            tx.commit().map_err(map_err)?;
            Ok(n == 1)
        })
        .await
    }

    pub(crate) async fn set_token_roles(
        &self,
        name: TokenName,
        roles: Roles,
        by: String,
    ) -> Result<Option<Roles>> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let before: Option<String> = one_opt(
                &tx,
                "SELECT roles FROM api_tokens WHERE name = ?1 AND revoked_at IS NULL",
                params![name.as_str()],
                |r| first(r),
            )?;
            let Some(before) = before else {
                return Ok(None);
            };
            let before = Roles::stored(&before)?;
            tx.execute(
                "UPDATE api_tokens SET roles = ?1, roles_migrated = 0 WHERE name = ?2",
                params![roles.to_list(), name.as_str()],
            )
            .map_err(map_err)?;
            let act = NewAuditEntry::new(
                &by,
                AuditAct::TokenRoles,
                name.as_str(),
                format!("roles {roles} (was {before})"),
            )?;
            insert_audit(&tx, &act, now_unix_ms())?;
            tx.commit().map_err(map_err)?;
            Ok(Some(before))
        })
        .await
    }

    pub(crate) async fn token_access(&self, hash: TokenHash) -> Result<Option<TokenAccess>> {
        self.run(move |conn| {
            one_opt(
                conn,
                "SELECT name, roles FROM api_tokens WHERE token_sha256 = ?1 AND revoked_at IS NULL",
                params![hash.as_str()],
                |r| token_access_row(r),
            )
        })
        .await
    }

    pub(crate) async fn append_audit(&self, act: NewAuditEntry) -> Result<()> {
        self.run(move |conn| insert_audit(conn, &act, now_unix_ms()))
            .await
    }

    pub(crate) async fn audit(&self, after: i64, limit: i64) -> Result<Vec<AuditEntry>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT seq, at_ms, principal, act, subject, detail FROM audit
                 WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                params![after, limit],
                |r| audit_row(r),
            )
        })
        .await
    }

    pub(crate) async fn audit_of(&self, subject: String, limit: i64) -> Result<Vec<AuditEntry>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT * FROM (SELECT seq, at_ms, principal, act, subject, detail FROM audit
                     WHERE subject = ?1 ORDER BY seq DESC LIMIT ?2)
                 ORDER BY seq",
                params![subject, limit],
                |r| audit_row(r),
            )
        })
        .await
    }
}

/// Appends one entry to the audit trail, inside the act's own transaction.
fn insert_audit(conn: &Connection, act: &NewAuditEntry, now: i64) -> Result<()> {
    conn.execute(
        "INSERT INTO audit (at_ms, principal, act, subject, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            now,
            act.principal,
            act.act.as_str(),
            act.subject,
            act.detail
        ],
    )
    .map_err(map_err)?;
    Ok(())
}

/// What a publication step checks of job `id`, read inside its transaction.
fn publish_facts(conn: &Connection, id: &JobId) -> Result<PublishFacts> {
    Ok(PublishFacts {
        job: one_opt(conn, JOB_FACTS, params![id.as_str()], |r| pair(r))?,
        published: one(conn, PUBLISHED, params![id.as_str()], |r| first(r))?,
        last: one_opt(conn, LAST_DECISION, params![id.as_str()], |r| pair(r))?,
    })
}

/// The recorded delivery a new one collided with: by its delivery id, else by its subject.
fn recorded_delivery(conn: &Connection, new: &NewForgeDelivery) -> Result<ForgeDelivery> {
    let by_delivery = one_opt(
        conn,
        &format!(
            "SELECT {DELIVERY_COLUMNS} FROM forge_deliveries WHERE forge = ?1 AND delivery = ?2"
        ),
        params![new.forge, new.delivery],
        |r| delivery_row(r),
    )?;
    match by_delivery {
        Some(row) => Ok(row),
        None => one(
            conn,
            &format!(
                "SELECT {DELIVERY_COLUMNS} FROM forge_deliveries WHERE forge = ?1 AND subject = ?2"
            ),
            params![new.forge, new.subject],
            |r| delivery_row(r),
        ),
    }
}

/// Forge deliveries (`crate::intake`).
impl SqliteStore {
    pub(crate) async fn record_forge_delivery(
        &self,
        new: NewForgeDelivery,
        trigger: Option<String>,
    ) -> Result<(ForgeDelivery, bool)> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            // A duplicate delivery id or subject inserts nothing (either unique key); only then
            // is the recorded row read, by the delivery id, else by the subject.
            let inserted = one_opt(
                &tx,
                &format!(
                    "INSERT INTO forge_deliveries (forge, delivery, received_at, state, reason,
                         subject, trigger_json, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?3) ON CONFLICT DO NOTHING
                     RETURNING {DELIVERY_COLUMNS}"
                ),
                params![
                    new.forge,
                    new.delivery,
                    now,
                    new.state.as_str(),
                    new.reason,
                    new.subject,
                    trigger
                ],
                |r| delivery_row(r),
            )?;
            let (row, created) = match inserted {
                Some(row) => (row, true),
                None => (recorded_delivery(&tx, &new)?, false),
            };
            tx.commit().map_err(map_err)?;
            Ok((row, created))
        })
        .await
    }

    pub(crate) async fn forge_delivery(
        &self,
        forge: String,
        delivery: String,
    ) -> Result<Option<ForgeDelivery>> {
        self.run(move |conn| {
            one_opt(
                conn,
                &format!(
                    "SELECT {DELIVERY_COLUMNS} FROM forge_deliveries
                     WHERE forge = ?1 AND delivery = ?2"
                ),
                params![forge, delivery],
                |r| delivery_row(r),
            )
        })
        .await
    }

    pub(crate) async fn claim_forge_delivery(
        &self,
        host: HostId,
        lease: Duration,
    ) -> Result<Option<ForgeDelivery>> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let row = one_opt(
                &tx,
                &format!(
                    "UPDATE forge_deliveries SET holder = ?1, lease_until = ?2,
                         attempts = attempts + 1, updated_at = ?3
                     WHERE (forge, delivery) IN (
                         SELECT forge, delivery FROM forge_deliveries
                         WHERE state = 'queued' AND (lease_until IS NULL OR lease_until <= ?3)
                         ORDER BY received_at, forge, delivery LIMIT 1)
                     RETURNING {DELIVERY_COLUMNS}"
                ),
                params![host.as_str(), now.saturating_add(duration_ms(lease)), now],
                |r| delivery_row(r),
            )?;
            tx.commit().map_err(map_err)?;
            Ok(row)
        })
        .await
    }

    pub(crate) async fn pin_forge_base(
        &self,
        forge: String,
        delivery: String,
        host: HostId,
        commit: String,
    ) -> Result<Option<String>> {
        self.run(move |conn| {
            one_opt(
                conn,
                "UPDATE forge_deliveries SET base_commit = COALESCE(base_commit, ?3)
                 WHERE forge = ?1 AND delivery = ?2 AND holder = ?4 AND state = 'queued'
                 RETURNING base_commit",
                params![forge, delivery, commit, host.as_str()],
                |r| first(r),
            )
        })
        .await
    }

    pub(crate) async fn finish_forge_delivery(
        &self,
        forge: String,
        delivery: String,
        host: HostId,
        outcome: DeliveryOutcome,
    ) -> Result<Fenced> {
        self.run(move |conn| {
            let (state, reason, job) = outcome.columns();
            let n = conn
                .execute(
                    "UPDATE forge_deliveries SET state = ?3, reason = ?4, job_id = ?5,
                         holder = NULL, lease_until = NULL, updated_at = ?6,
                         report = CASE WHEN ?3 = 'submitted' THEN 'open' END, report_at = ?6
                     WHERE forge = ?1 AND delivery = ?2 AND holder = ?7 AND state = 'queued'",
                    params![
                        forge,
                        delivery,
                        state,
                        reason,
                        job,
                        now_unix_ms(),
                        host.as_str()
                    ],
                )
                .map_err(map_err)?;
            Ok(Fenced::one_row(n as u64))
        })
        .await
    }
}

/// Reports back to the forge (`crate::report`).
impl SqliteStore {
    pub(crate) async fn claim_forge_report(
        &self,
        host: HostId,
        lease: Duration,
    ) -> Result<Option<ForgeDelivery>> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let row = one_opt(
                &tx,
                &format!(
                    "UPDATE forge_deliveries SET holder = ?1, lease_until = ?2, updated_at = ?3
                     WHERE (forge, delivery) IN (
                         SELECT forge, delivery FROM forge_deliveries
                         WHERE report = 'open' AND report_at <= ?3
                           AND (lease_until IS NULL OR lease_until <= ?3 OR holder = ?1)
                         ORDER BY report_at, forge, delivery LIMIT 1)
                     RETURNING {DELIVERY_COLUMNS}"
                ),
                params![host.as_str(), now.saturating_add(duration_ms(lease)), now],
                |r| delivery_row(r),
            )?;
            tx.commit().map_err(map_err)?;
            Ok(row)
        })
        .await
    }

    pub(crate) async fn forge_calls(
        &self,
        forge: String,
        delivery: String,
    ) -> Result<Vec<ForgeCall>> {
        self.run(move |conn| {
            all(
                conn,
                "SELECT call, result_json, recorded_at FROM forge_calls
                 WHERE forge = ?1 AND delivery = ?2 ORDER BY recorded_at, call",
                params![forge, delivery],
                |r| call_row(r),
            )
        })
        .await
    }

    pub(crate) async fn record_forge_call(
        &self,
        forge: String,
        delivery: String,
        host: HostId,
        call: String,
        result: String,
    ) -> Result<Option<ForgeCall>> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let held = tx
                .execute(
                    "UPDATE forge_deliveries SET report_failures = 0, updated_at = ?4
                     WHERE forge = ?1 AND delivery = ?2 AND holder = ?3 AND report = 'open'",
                    params![forge, delivery, host.as_str(), now],
                )
                .map_err(map_err)?;
            if held != 1 {
                return Ok(None);
            }
            tx.execute(
                "INSERT INTO forge_calls (forge, delivery, call, result_json, recorded_at)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
                params![forge, delivery, call, result, now],
            )
            .map_err(map_err)?;
            let stored = one(
                &tx,
                "SELECT call, result_json, recorded_at FROM forge_calls
                 WHERE forge = ?1 AND delivery = ?2 AND call = ?3",
                params![forge, delivery, call],
                |r| call_row(r),
            )?;
            tx.commit().map_err(map_err)?;
            Ok(Some(stored))
        })
        .await
    }

    pub(crate) async fn defer_forge_report(
        &self,
        forge: String,
        delivery: String,
        host: HostId,
        after: Duration,
        failed: bool,
    ) -> Result<Fenced> {
        self.run(move |conn| {
            let now = now_unix_ms();
            let n = conn
                .execute(
                    "UPDATE forge_deliveries SET holder = NULL, lease_until = NULL,
                         report_at = ?4, updated_at = ?5,
                         report_failures = report_failures + ?6
                     WHERE forge = ?1 AND delivery = ?2 AND holder = ?3 AND report = 'open'",
                    params![
                        forge,
                        delivery,
                        host.as_str(),
                        now.saturating_add(duration_ms(after)),
                        now,
                        i64::from(failed)
                    ],
                )
                .map_err(map_err)?;
            Ok(Fenced::one_row(n as u64))
        })
        .await
    }

    pub(crate) async fn close_forge_report(
        &self,
        forge: String,
        delivery: String,
        host: HostId,
        reason: String,
    ) -> Result<Fenced> {
        self.run(move |conn| {
            let n = conn
                .execute(
                    "UPDATE forge_deliveries SET holder = NULL, lease_until = NULL,
                         report = 'closed', report_reason = ?4, updated_at = ?5
                     WHERE forge = ?1 AND delivery = ?2 AND holder = ?3 AND report = 'open'",
                    params![forge, delivery, host.as_str(), reason, now_unix_ms()],
                )
                .map_err(map_err)?;
            Ok(Fenced::one_row(n as u64))
        })
        .await
    }

    pub(crate) async fn forge_pull(
        &self,
        forge: String,
        project: String,
        number: i64,
    ) -> Result<Option<ForgePull>> {
        self.run(move |conn| {
            one_opt(
                conn,
                &format!(
                    "SELECT {PULL_COLUMNS} FROM forge_pulls
                     WHERE forge = ?1 AND project = ?2 AND number = ?3"
                ),
                params![forge, project, number],
                |r| pull_row(r),
            )
        })
        .await
    }

    pub(crate) async fn set_forge_pull(
        &self,
        pull: ForgePull,
        expected_head: Option<String>,
    ) -> Result<ForgePull> {
        self.run(move |conn| {
            let tx = immediate(conn)?;
            let now = now_unix_ms();
            let number = pull.number_i64();
            match &expected_head {
                None => tx.execute(
                    "INSERT INTO forge_pulls (forge, project, number, job_id, branch, head,
                         updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
                    params![
                        pull.forge,
                        pull.project,
                        number,
                        pull.job_id.as_str(),
                        pull.branch,
                        pull.head,
                        now
                    ],
                ),
                Some(old) => tx.execute(
                    "UPDATE forge_pulls SET job_id = ?4, head = ?5, updated_at = ?6
                     WHERE forge = ?1 AND project = ?2 AND number = ?3 AND head = ?7
                       AND branch = ?8",
                    params![
                        pull.forge,
                        pull.project,
                        number,
                        pull.job_id.as_str(),
                        pull.head,
                        now,
                        old,
                        pull.branch
                    ],
                ),
            }
            .map_err(map_err)?;
            let stored = one(
                &tx,
                &format!(
                    "SELECT {PULL_COLUMNS} FROM forge_pulls
                     WHERE forge = ?1 AND project = ?2 AND number = ?3"
                ),
                params![pull.forge, pull.project, number],
                |r| pull_row(r),
            )?;
            tx.commit().map_err(map_err)?;
            Ok(stored)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database written by a version-1 build gets its identity when it is upgraded, keeps it
    /// on every later open, and a tampered identity is refused, never replaced.
    #[test]
    fn a_version_1_database_gets_its_identity_on_upgrade() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_migrations (
                 version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL
             )",
        )
        .unwrap();
        let v1 = MIGRATIONS.first().unwrap();
        conn.execute_batch(v1.sqlite).unwrap();
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (1, ?1, 0)",
            params![v1.name],
        )
        .unwrap();
        assert_eq!(current_version(&conn).unwrap(), 1);

        let id = migrate(&mut conn).unwrap();
        assert_eq!(current_version(&conn).unwrap(), SCHEMA_VERSION);
        assert_eq!(migrate(&mut conn).unwrap(), id);

        conn.execute("UPDATE store_identity SET store_id = '../x'", [])
            .unwrap();
        let e = migrate(&mut conn).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_CORRUPT");
        let kept: String = conn.query_row(SELECT_STORE_ID, [], |r| r.get(0)).unwrap();
        assert_eq!(kept, "../x");
    }

    /// A database file as the migrations up to `version` left it, with identity `store_id`.
    fn file_at_version(path: &Path, version: i64, store_id: &str) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_migrations (
                 version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL
             )",
        )
        .unwrap();
        for m in MIGRATIONS.iter().filter(|m| m.version <= version) {
            conn.execute_batch(m.sqlite).unwrap();
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, 0)",
                params![m.version, m.name],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO store_identity (singleton, store_id) VALUES (1, ?1)",
            params![store_id],
        )
        .unwrap();
        conn
    }

    /// A version-3 database file (jobs with a candidate and gate evidence) upgrades to the
    /// current version keeping every row, its identity and its data, and takes review decisions
    /// after.
    #[test]
    fn a_version_3_database_file_upgrades_keeping_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        let digest = format!("sha256:{}", "ab".repeat(32));
        {
            let conn = file_at_version(&path, 3, "0123456789abcdef0123456789abcdef");
            let spec = JobSpec::noop("v3", 1);
            conn.execute(
                "INSERT INTO jobs (id, seq, kind, state, idempotency_key, spec_json, approval_json,
                     attempts, max_attempts, run_at, created_at, updated_at, candidate_digest)
                 VALUES ('job_0123456789abcdef0123456789abcdef', 1, 'noop', 'completed', ?1,
                     ?2, ?3, 1, 1, 0, 0, 0, ?4)",
                params![
                    spec.idempotency_key(),
                    SpecRow::text(&spec).unwrap(),
                    spec.approval_json,
                    digest
                ],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO gate_evidence (job_id, attempt_id, gate, outcome, digest, wall_ms,
                     bytes, created_at)
                 VALUES ('job_0123456789abcdef0123456789abcdef', 'att', 'pytest', 'passed', ?1, 5,
                     x'7b7d', 0)",
                params![digest],
            )
            .unwrap();
            assert_eq!(current_version(&conn).unwrap(), 3);
        }
        let store = SqliteStore::open(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(
            store.store_id().as_str(),
            "0123456789abcdef0123456789abcdef"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
            let id = JobId::parse("job_0123456789abcdef0123456789abcdef").unwrap();
            let job = store.get(id.clone()).await.unwrap().unwrap();
            assert_eq!(job.candidate_digest.as_deref(), Some(digest.as_str()));
            assert_eq!(store.evidence(id.clone()).await.unwrap().len(), 1);
            let row =
                DecisionRow::new(&digest, "reject", "alice", false, 1, b"{}".to_vec()).unwrap();
            assert_eq!(
                store.record_decision(id.clone(), row, None).await.unwrap(),
                1
            );
            assert_eq!(store.decisions(id).await.unwrap().len(), 1);
        });
    }

    /// A version-4 database (a completed job with an accept in its history, being published by
    /// a build without claims) upgrades to version 5 keeping its history; the accept still
    /// stands, a claim and a record work, and the closed history refuses a decision after.
    #[test]
    fn a_version_4_database_file_upgrades_keeping_its_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        let digest = format!("sha256:{}", "cd".repeat(32));
        let id = "job_00112233445566778899aabbccddeeff";
        {
            let conn = file_at_version(&path, 4, "00112233445566778899aabbccddeeff");
            let spec = JobSpec::noop("v4", 1);
            conn.execute(
                "INSERT INTO jobs (id, seq, kind, state, idempotency_key, spec_json, approval_json,
                     attempts, max_attempts, run_at, created_at, updated_at, candidate_digest)
                 VALUES (?1, 1, 'noop', 'completed', ?2, ?3, ?4, 1, 1, 0, 0, 0, ?5)",
                params![
                    id,
                    spec.idempotency_key(),
                    SpecRow::text(&spec).unwrap(),
                    spec.approval_json,
                    digest
                ],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO review_decisions (job_id, seq, candidate_digest, decision, actor,
                     forced, at_ms, record)
                 VALUES (?1, 1, ?2, 'accept', 'alice', 0, 7, x'7b7d')",
                params![id, digest],
            )
            .unwrap();
            assert_eq!(current_version(&conn).unwrap(), 4);
        }
        let store = SqliteStore::open(&path, Duration::from_secs(5)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
            let id = JobId::parse(id).unwrap();
            assert_eq!(store.decisions(id.clone()).await.unwrap().len(), 1);
            let claim = PublicationClaim::new(
                id.clone(),
                digest.clone(),
                HostId::parse("h").unwrap(),
                "b".to_owned(),
            )
            .unwrap();
            let claim = store
                .claim_publication(claim, Duration::from_secs(60))
                .await
                .unwrap();
            let act = NewAuditEntry::new("alice", AuditAct::Published, id.as_str(), "b".to_owned())
                .unwrap();
            store
                .record_publication(claim, b"{}".to_vec(), act)
                .await
                .unwrap();
            let row = DecisionRow::new(&digest, "reject", "bob", false, 1, b"{}".to_vec()).unwrap();
            let e = store
                .record_decision(id.clone(), row, None)
                .await
                .unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_PUBLISHED");
            assert_eq!(store.decisions(id).await.unwrap().len(), 1);
        });
    }

    /// A version-6 database (a live and a revoked named token) upgrades to version 7 keeping
    /// both: each gets every role and the `roles_migrated` mark, the live one still
    /// authenticates, setting its roles ends the mark and is audited, and the audit trail refuses
    /// `UPDATE` and `DELETE` in the database itself.
    #[test]
    fn a_version_6_database_file_upgrades_its_tokens_to_every_role() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        let (live, gone) = ("ab".repeat(32), "cd".repeat(32));
        {
            let conn = file_at_version(&path, 6, "00112233445566778899aabbccddeeff");
            conn.execute(
                "INSERT INTO api_tokens (name, token_sha256, created_at, revoked_at)
                 VALUES ('ci', ?1, 5, NULL), ('old', ?2, 6, 9)",
                params![live, gone],
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path, Duration::from_secs(5)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            assert_eq!(store.schema_version().await.unwrap(), SCHEMA_VERSION);
            let tokens = store.tokens().await.unwrap();
            assert_eq!(tokens.len(), 2);
            for t in &tokens {
                assert_eq!(
                    (t.roles, t.roles_migrated),
                    (Roles::ALL, true),
                    "{}",
                    t.name
                );
            }
            assert_eq!(tokens[1].revoked_at_ms, Some(9));
            let access = store
                .token_access(TokenHash::parse(&live).unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                access,
                TokenAccess {
                    name: "ci".to_owned(),
                    roles: Roles::ALL
                }
            );
            let name = TokenName::parse("ci").unwrap();
            let review = Roles::from_list(&[crate::Role::Review]).unwrap();
            assert_eq!(
                store
                    .set_token_roles(name.clone(), review, "operator".to_owned())
                    .await
                    .unwrap(),
                Some(Roles::ALL)
            );
            let tokens = store.tokens().await.unwrap();
            assert_eq!((tokens[0].roles, tokens[0].roles_migrated), (review, false));
            let trail = store.audit(0, 10).await.unwrap();
            assert_eq!(trail.len(), 1);
            assert_eq!(trail[0].act, AuditAct::TokenRoles);
            assert_eq!(
                trail[0].detail,
                "roles review (was submit,review,publish,admin)"
            );
        });
        drop(store);
        let conn = Connection::open(&path).unwrap();
        for sql in ["UPDATE audit SET principal = 'x'", "DELETE FROM audit"] {
            let e = conn.execute(sql, []).unwrap_err();
            assert!(e.to_string().contains("append-only"), "{sql}: {e}");
        }
    }

    /// The later attempts of a job are found through `jobs_by_parent`, not by a scan: the
    /// query's expression is the indexed one.
    #[test]
    fn follow_ups_are_found_through_the_parent_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jobs.sqlite3");
        drop(SqliteStore::open(&path, Duration::from_secs(5)).unwrap());
        let conn = Connection::open(&path).unwrap();
        let plan: Vec<String> = {
            let mut stmt = conn
                .prepare(
                    "EXPLAIN QUERY PLAN SELECT id FROM jobs
                     WHERE json_extract(spec_json, '$.follow_up.supersedes_job') = ?1
                     ORDER BY seq",
                )
                .unwrap();
            stmt.query_map(params!["job_x"], |r| r.get::<_, String>(3))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert!(
            plan.iter()
                .any(|d| d.contains("USING INDEX jobs_by_parent")),
            "{plan:?}"
        );
    }
}
