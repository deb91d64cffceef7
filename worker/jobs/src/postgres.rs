//! The many-host backend: PostgreSQL through tokio-postgres and a deadpool connection pool, no
//! TLS (a unix socket or loopback; see docs/SERVICE.md). Claims lock with `FOR UPDATE SKIP
//! LOCKED`, so concurrent claimers never wait on each other's rows; every write about a running
//! attempt is one statement guarded by `id + attempt_id + state='running'`, with its log line
//! written by the same statement (data-modifying CTEs). Times come from the database clock.

use std::sync::LazyLock;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::{NoTls, Row};

use crate::error::{Backend, JobsError, Result};
use crate::evidence::EvidenceDocument;
use crate::model::{
    Claimed, Fenced, Heartbeat, HostInfo, Job, JobEvent, JobSpec, JobState, StoreOptions,
    duration_ms,
};
use crate::review::{
    DecisionRow, PublicationClaim, PublishFacts, StoredDecisionRow, TokenHash, TokenInfo, TokenName,
};
use crate::rows::{
    EVENT_CANCELLED, EVENT_CLAIMED, EVENT_RETRIED, EVENT_SUBMITTED, LEASE_EXPIRED,
    LEASE_EXPIRED_MESSAGE, RawJob, SpecRow, attempt_pair, host_info, job_columns,
};
use crate::schema::{MIGRATIONS, SCHEMA_VERSION, SELECT_STORE_ID, stored_store_id};
use crate::transition::{FencedWrite, fenced_update};
use vocab::StoreId;
use vocab::{AttemptId, HostId, JobId};

/// The database clock in milliseconds (the transaction's start, so one statement sees one time).
const NOW: &str = "(extract(epoch FROM now()) * 1000)::bigint";

/// The fenced write as one statement of data-modifying CTEs: the guarded `UPDATE` (the delay
/// `$7` added to the database clock), then the candidate (`$12`), the usage row (`$13`) and the
/// log line (`$14`, `$15`) and the gate evidence rows (`$16`..`$20`, parallel arrays) for the row
/// it changed, if any; it returns how many rows it changed.
static FENCED_WRITE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH u AS (
             {update}
             RETURNING id, attempt_id),
         c AS (
             INSERT INTO candidates (job_id, attempt_id, digest, bytes, created_at)
             SELECT id, attempt_id, $11, $12, {NOW} FROM u WHERE $12::bytea IS NOT NULL),
         us AS (
             INSERT INTO usage (job_id, attempt_id, usage_json, recorded_at)
             SELECT id, attempt_id, $13::text, {NOW} FROM u WHERE $13::text IS NOT NULL
             ON CONFLICT (job_id, attempt_id) DO UPDATE SET usage_json = excluded.usage_json),
         ev AS (
             INSERT INTO events (job_id, attempt_id, at, code, message)
             SELECT id, attempt_id, {NOW}, $14, $15 FROM u),
         ge AS (
             INSERT INTO gate_evidence
                 (job_id, attempt_id, gate, outcome, digest, wall_ms, bytes, created_at)
             SELECT u.id, u.attempt_id, e.gate, e.outcome, e.digest, e.wall_ms, e.bytes, {NOW}
             FROM u, unnest($16::text[], $17::text[], $18::text[], $19::bigint[], $20::bytea[])
                  AS e (gate, outcome, digest, wall_ms, bytes))
         SELECT count(*) FROM u",
        update = fenced_update('$', NOW, &format!("{NOW} + $7"))
    )
});

/// The advisory lock key that serialises migrations across hosts starting at once.
const MIGRATION_LOCK: i64 = 0x7063_6a6f_6273; // "pcjobs"

fn is_io(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<std::io::Error>() {
            return true;
        }
        cur = err.source();
    }
    false
}

pub(crate) fn map_pg(e: &tokio_postgres::Error) -> JobsError {
    let by_code = e.code().is_some_and(|c| {
        let c = c.code();
        // connection_exception, admin/crash shutdown, cannot_connect_now, too_many_connections
        c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "53300")
    });
    let detail = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    };
    if by_code || e.is_closed() || (e.as_db_error().is_none() && is_io(e)) {
        JobsError::Unavailable {
            backend: Backend::Postgres,
            detail,
        }
    } else {
        JobsError::Database {
            backend: Backend::Postgres,
            detail,
        }
    }
}

fn pg(e: tokio_postgres::Error) -> JobsError {
    map_pg(&e)
}

fn map_pool(e: PoolError) -> JobsError {
    match e {
        PoolError::Backend(e) => map_pg(&e),
        PoolError::Timeout(t) => JobsError::Unavailable {
            backend: Backend::Postgres,
            detail: format!("timed out waiting for a connection ({t:?})"),
        },
        other => JobsError::Database {
            backend: Backend::Postgres,
            detail: other.to_string(),
        },
    }
}

fn raw(row: &Row) -> std::result::Result<RawJob, tokio_postgres::Error> {
    Ok(RawJob {
        seq: row.try_get("seq")?,
        id: row.try_get("id")?,
        kind: row.try_get("kind")?,
        state: row.try_get("state")?,
        idempotency_key: row.try_get("idempotency_key")?,
        spec_json: row.try_get("spec_json")?,
        approval_json: row.try_get("approval_json")?,
        attempts: row.try_get("attempts")?,
        max_attempts: row.try_get("max_attempts")?,
        run_at: row.try_get("run_at")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        attempt_id: row.try_get("attempt_id")?,
        host_id: row.try_get("host_id")?,
        lease_until: row.try_get("lease_until")?,
        cancel_requested: row.try_get("cancel_requested")?,
        error_code: row.try_get("error_code")?,
        error_message: row.try_get("error_message")?,
        candidate_digest: row.try_get("candidate_digest")?,
    })
}

fn job(row: &Row) -> Result<Job> {
    raw(row).map_err(pg)?.into_job()
}

fn cols() -> String {
    job_columns("", "approval_json")
}

/// Applies the pending migrations and makes sure the store has its identity, in one
/// transaction under the migration advisory lock; returns the identity.
async fn migrate(pool: &Pool) -> Result<StoreId> {
    let mut client = pool.get().await.map_err(map_pool)?;
    let tx = client.transaction().await.map_err(pg)?;
    // Several hosts may start at once: the first takes the lock and migrates, the others
    // wait, then find the work done.
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(pg)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    BIGINT PRIMARY KEY,
             name       TEXT NOT NULL,
             applied_at BIGINT NOT NULL
         )",
    )
    .await
    .map_err(pg)?;
    let found: i64 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .map_err(pg)?
        .try_get(0)
        .map_err(pg)?;
    if found > SCHEMA_VERSION {
        return Err(JobsError::Schema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.batch_execute(m.postgres).await.map_err(pg)?;
        tx.execute(
            &format!(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, {NOW})"
            ),
            &[&m.version, &m.name],
        )
        .await
        .map_err(pg)?;
        tracing::info!(version = m.version, "job store: postgres schema migrated");
    }
    // The lock makes this the only writer; ON CONFLICT keeps it correct without the lock.
    tx.execute(
        "INSERT INTO store_identity (singleton, store_id) VALUES (1, $1)
         ON CONFLICT (singleton) DO NOTHING",
        &[&crate::ids::random_store_id()?.as_str()],
    )
    .await
    .map_err(pg)?;
    let stored: String = tx
        .query_one(SELECT_STORE_ID, &[])
        .await
        .map_err(pg)?
        .try_get(0)
        .map_err(pg)?;
    let store_id = stored_store_id(&stored)?;
    tx.commit().await.map_err(pg)?;
    Ok(store_id)
}

/// The PostgreSQL job store.
#[derive(Clone)]
pub(crate) struct PgStore {
    pool: Pool,
    config: std::sync::Arc<tokio_postgres::Config>,
    store_id: StoreId,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connection string may hold a password: never print it.
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    pub(crate) async fn open(url: &str, options: &StoreOptions) -> Result<Self> {
        let mut config: tokio_postgres::Config =
            url.parse()
                .map_err(|e: tokio_postgres::Error| JobsError::DatabaseUrl {
                    detail: format!("not a PostgreSQL connection string: {e}"),
                })?;
        config.connect_timeout(options.connect_timeout);
        if config.get_application_name().is_none() {
            config.application_name("patch-candidate");
        }
        // `Fast` recycling checks `is_closed()` when a connection is checked out: a server that
        // shuts down or restarts closes its sessions, their connection tasks end, and the pool
        // drops them and connects anew, so the store works again as soon as the server is back
        // (the outage conformance case). `Verified` would add a round trip to every call, and
        // catches nothing more on a unix socket or loopback, the only transports (no TLS).
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| JobsError::Database {
                backend: Backend::Postgres,
                detail: e.to_string(),
            })?;
        let store_id = migrate(&pool).await?;
        Ok(Self {
            pool,
            config: std::sync::Arc::new(config),
            store_id,
        })
    }

    /// The store's identity, read at open.
    pub(crate) fn store_id(&self) -> &StoreId {
        &self.store_id
    }

    /// The connection settings (for the `LISTEN` connection).
    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// Tells every listening host that work may be available. Best effort: a lost notification
    /// only delays a runner until its next poll.
    pub(crate) async fn notify(&self) {
        if let Ok(client) = self.client().await {
            let sql = format!("NOTIFY {}", crate::wake::CHANNEL);
            if let Err(e) = client.batch_execute(&sql).await {
                tracing::debug!(code = map_pg(&e).code(), "job store: NOTIFY failed");
            }
        }
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(map_pool)
    }

    pub(crate) async fn schema_version(&self) -> Result<i64> {
        let client = self.client().await?;
        client
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                &[],
            )
            .await
            .map_err(pg)?
            .try_get(0)
            .map_err(pg)
    }

    pub(crate) async fn submit(&self, spec: JobSpec, id: JobId) -> Result<(Job, bool)> {
        let spec_json = SpecRow::text(&spec)?;
        let key = spec.idempotency_key();
        let client = self.client().await?;
        let sql = format!(
            "WITH ins AS (
                 INSERT INTO jobs (id, kind, state, idempotency_key, spec_json, approval_json,
                     attempts, max_attempts, run_at, created_at, updated_at)
                 VALUES ($1, $2, 'queued', $3, $4, $5, 0, $6, {NOW}, {NOW}, {NOW})
                 ON CONFLICT (idempotency_key) DO NOTHING
                 RETURNING id),
             ev AS (
                 INSERT INTO events (job_id, attempt_id, at, code, message)
                 SELECT id, NULL, {NOW}, $7, 'job submitted' FROM ins)
             SELECT count(*) FROM ins"
        );
        let created: i64 = client
            .query_one(
                &sql,
                &[
                    &id.as_str(),
                    &spec.kind.as_str(),
                    &key,
                    &spec_json,
                    &spec.approval_json,
                    &i64::from(spec.max_attempts),
                    &EVENT_SUBMITTED,
                ],
            )
            .await
            .map_err(pg)?
            .try_get(0)
            .map_err(pg)?;
        let row = client
            .query_one(
                &format!("SELECT {} FROM jobs WHERE idempotency_key = $1", cols()),
                &[&key],
            )
            .await
            .map_err(pg)?;
        Ok((job(&row)?, created == 1))
    }

    pub(crate) async fn claim(
        &self,
        host: HostId,
        max: i64,
        lease: Duration,
        attempts: Vec<AttemptId>,
    ) -> Result<Vec<Claimed>> {
        let attempts: Vec<String> = attempts.into_iter().map(|a| a.to_string()).collect();
        let sql = format!(
            "WITH picked AS (
                 SELECT id, row_number() OVER () AS n FROM (
                     SELECT id FROM jobs
                     WHERE state = 'queued' AND run_at <= {NOW}
                     ORDER BY run_at, seq
                     LIMIT $1
                     FOR UPDATE SKIP LOCKED) s),
             upd AS (
                 UPDATE jobs j SET state = 'running', attempts = j.attempts + 1,
                     attempt_id = ($2::text[])[picked.n], host_id = $3,
                     lease_until = {NOW} + $4, updated_at = {NOW}
                 FROM picked WHERE j.id = picked.id
                 RETURNING {}),
             ev AS (
                 INSERT INTO events (job_id, attempt_id, at, code, message)
                 SELECT id, attempt_id, {NOW}, $5, 'claimed by host ' || $3 FROM upd)
             SELECT * FROM upd ORDER BY run_at, seq",
            job_columns("j.", "j.approval_json")
        );
        let client = self.client().await?;
        let stmt = client.prepare_cached(&sql).await.map_err(pg)?;
        let rows = client
            .query(
                &stmt,
                &[
                    &max,
                    &attempts,
                    &host.as_str(),
                    &duration_ms(lease),
                    &EVENT_CLAIMED,
                ],
            )
            .await
            .map_err(pg)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let job = job(row)?;
            let attempt_id = job.attempt_id.clone().ok_or(JobsError::Corrupt {
                field: "attempt_id",
            })?;
            let lease_until_ms = job.lease_until_ms.ok_or(JobsError::Corrupt {
                field: "lease_until",
            })?;
            out.push(Claimed {
                attempt: job.attempts,
                attempt_id,
                lease_until_ms,
                job,
            });
        }
        Ok(out)
    }

    pub(crate) async fn heartbeat(
        &self,
        id: JobId,
        attempt: AttemptId,
        lease: Duration,
    ) -> Result<Heartbeat> {
        let sql = format!(
            "UPDATE jobs SET lease_until = {NOW} + $3, updated_at = {NOW}
             WHERE id = $1 AND attempt_id = $2 AND state = 'running'
             RETURNING cancel_requested"
        );
        let client = self.client().await?;
        let stmt = client.prepare_cached(&sql).await.map_err(pg)?;
        let row = client
            .query_opt(
                &stmt,
                &[&id.as_str(), &attempt.as_str(), &duration_ms(lease)],
            )
            .await
            .map_err(pg)?;
        Ok(match row {
            Some(r) => Heartbeat::Renewed {
                cancel_requested: r.try_get(0).map_err(pg)?,
            },
            None => Heartbeat::Lost,
        })
    }

    /// The one fenced write (see [`crate::transition`]): one statement, so one transaction —
    /// the guarded `UPDATE`, the candidate, the usage row and the log line happen together or
    /// not at all, and only for the current attempt.
    pub(crate) async fn fenced_write(
        &self,
        id: JobId,
        attempt: AttemptId,
        write: FencedWrite,
    ) -> Result<Fenced> {
        let gates: Vec<&str> = write.evidence.iter().map(EvidenceDocument::gate).collect();
        let outcomes: Vec<&str> = write
            .evidence
            .iter()
            .map(|d| d.outcome().as_str())
            .collect();
        let digests: Vec<&str> = write
            .evidence
            .iter()
            .map(EvidenceDocument::digest)
            .collect();
        let walls: Vec<i64> = write
            .evidence
            .iter()
            .map(EvidenceDocument::wall_ms_i64)
            .collect();
        let bytes: Vec<&[u8]> = write.evidence.iter().map(EvidenceDocument::bytes).collect();
        let client = self.client().await?;
        let stmt = client.prepare_cached(&FENCED_WRITE).await.map_err(pg)?;
        let n: i64 = client
            .query_one(
                &stmt,
                &[
                    &id.as_str(),
                    &attempt.as_str(),
                    &write.target.state().as_str(),
                    &write.target.honours_cancel(),
                    &write.target.retries(),
                    &write.attempts_back(),
                    &write.delay_ms,
                    &write.writes_error(),
                    &write.error_code(),
                    &write.error_message(),
                    &write.candidate_digest(),
                    &write.candidate.as_ref().map(|c| c.bytes.as_slice()),
                    &write.usage,
                    &write.event_code,
                    &write.event_message,
                    &gates,
                    &outcomes,
                    &digests,
                    &walls,
                    &bytes,
                ],
            )
            .await
            .map_err(pg)?
            .try_get(0)
            .map_err(pg)?;
        Ok(if n == 0 {
            Fenced::Lost
        } else {
            Fenced::Applied
        })
    }

    pub(crate) async fn record_usage(
        &self,
        id: JobId,
        attempt: AttemptId,
        usage: String,
    ) -> Result<()> {
        let sql = format!(
            "INSERT INTO usage (job_id, attempt_id, usage_json, recorded_at)
             SELECT $1, $2, $3, {NOW} WHERE EXISTS (SELECT 1 FROM jobs WHERE id = $1)
             ON CONFLICT (job_id, attempt_id) DO UPDATE SET usage_json = excluded.usage_json"
        );
        let client = self.client().await?;
        let n = client
            .execute(&sql, &[&id.as_str(), &attempt.as_str(), &usage])
            .await
            .map_err(pg)?;
        if n == 0 {
            return Err(JobsError::NotFound { id: id.to_string() });
        }
        Ok(())
    }

    pub(crate) async fn usage(&self, id: JobId) -> Result<Vec<(AttemptId, String)>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT attempt_id, usage_json FROM usage WHERE job_id = $1 ORDER BY recorded_at, attempt_id",
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|r| {
                let attempt: String = r.try_get(0).map_err(pg)?;
                let usage: String = r.try_get(1).map_err(pg)?;
                let attempt = AttemptId::parse(&attempt).map_err(|_| JobsError::Corrupt {
                    field: "usage.attempt_id",
                })?;
                Ok((attempt, usage))
            })
            .collect()
    }

    pub(crate) async fn rescue_expired(&self) -> Result<u64> {
        // The one guarded statement (its log lines are written by the same statement). Rows
        // another transaction holds (a heartbeat in flight, a concurrent rescuer) are skipped,
        // not waited for: rescuers on several hosts never deadlock, and a skipped row is taken
        // by the next round if it is still expired then.
        let sql = format!(
            "WITH r AS (
                 UPDATE jobs SET
                     state = CASE WHEN cancel_requested THEN 'cancelled'
                                  WHEN attempts >= max_attempts THEN 'failed'
                                  ELSE 'queued' END,
                     run_at = {NOW}, lease_until = NULL, error_code = $1, error_message = $2,
                     updated_at = {NOW}
                 WHERE state = 'running' AND lease_until < {NOW}
                   AND id IN (SELECT id FROM jobs
                              WHERE state = 'running' AND lease_until < {NOW}
                              FOR UPDATE SKIP LOCKED)
                 RETURNING id, attempt_id),
             ev AS (
                 INSERT INTO events (job_id, attempt_id, at, code, message)
                 SELECT id, attempt_id, {NOW}, $1, $2 FROM r)
             SELECT count(*) FROM r"
        );
        let client = self.client().await?;
        let stmt = client.prepare_cached(&sql).await.map_err(pg)?;
        let n: i64 = client
            .query_one(&stmt, &[&LEASE_EXPIRED, &LEASE_EXPIRED_MESSAGE])
            .await
            .map_err(pg)?
            .try_get(0)
            .map_err(pg)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn get_in(
        client: &impl deadpool_postgres::GenericClient,
        id: &JobId,
    ) -> Result<Option<Job>> {
        client
            .query_opt(
                &format!("SELECT {} FROM jobs WHERE id = $1", cols()),
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?
            .as_ref()
            .map(job)
            .transpose()
    }

    pub(crate) async fn cancel(&self, id: JobId) -> Result<Job> {
        let sql = format!(
            "WITH u AS (
                 UPDATE jobs SET
                     state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
                     cancel_requested = (state = 'running') OR cancel_requested,
                     updated_at = {NOW}
                 WHERE id = $1 AND (state = 'queued' OR (state = 'running' AND NOT cancel_requested))
                 RETURNING id, state)
             INSERT INTO events (job_id, attempt_id, at, code, message)
             SELECT id, NULL, {NOW}, $2,
                    CASE WHEN state = 'cancelled' THEN 'cancelled while queued'
                         ELSE 'cancellation requested while running' END
             FROM u"
        );
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        tx.execute(&sql, &[&id.as_str(), &EVENT_CANCELLED])
            .await
            .map_err(pg)?;
        let job = Self::get_in(&tx, &id)
            .await?
            .ok_or_else(|| JobsError::NotFound { id: id.to_string() })?;
        tx.commit().await.map_err(pg)?;
        Ok(job)
    }

    pub(crate) async fn retry(&self, id: JobId) -> Result<Job> {
        let sql = format!(
            "WITH u AS (
                 UPDATE jobs SET state = 'queued', run_at = {NOW}, updated_at = {NOW},
                     max_attempts = GREATEST(max_attempts, attempts + 1),
                     cancel_requested = FALSE, lease_until = NULL
                 WHERE id = $1 AND state IN ('failed', 'cancelled')
                 RETURNING id)
             INSERT INTO events (job_id, attempt_id, at, code, message)
             SELECT id, NULL, {NOW}, $2, 'queued again by the operator' FROM u"
        );
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        tx.execute(&sql, &[&id.as_str(), &EVENT_RETRIED])
            .await
            .map_err(pg)?;
        let job = Self::get_in(&tx, &id)
            .await?
            .ok_or_else(|| JobsError::NotFound { id: id.to_string() })?;
        tx.commit().await.map_err(pg)?;
        Ok(job)
    }

    pub(crate) async fn get(&self, id: JobId) -> Result<Option<Job>> {
        let client = self.client().await?;
        Self::get_in(&client, &id).await
    }

    pub(crate) async fn list(&self, state: Option<JobState>, limit: i64) -> Result<Vec<Job>> {
        let sql = format!(
            "SELECT {} FROM jobs WHERE ($1::text IS NULL OR state = $1)
             ORDER BY seq DESC LIMIT $2",
            job_columns("", "NULL::bytea")
        );
        let client = self.client().await?;
        let rows = client
            .query(&sql, &[&state.map(JobState::as_str), &limit])
            .await
            .map_err(pg)?;
        rows.iter().map(job).collect()
    }

    pub(crate) async fn candidate(&self, id: JobId) -> Result<Option<Vec<u8>>> {
        let client = self.client().await?;
        client
            .query_opt(
                "SELECT bytes FROM candidates WHERE job_id = $1",
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?
            .map(|r| r.try_get(0).map_err(pg))
            .transpose()
    }

    pub(crate) async fn evidence(&self, id: JobId) -> Result<Vec<EvidenceDocument>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT gate, outcome, digest, wall_ms, bytes FROM gate_evidence
                 WHERE job_id = $1 ORDER BY gate",
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|r| {
                let gate: String = r.try_get(0).map_err(pg)?;
                let outcome: String = r.try_get(1).map_err(pg)?;
                let digest: String = r.try_get(2).map_err(pg)?;
                let wall_ms: i64 = r.try_get(3).map_err(pg)?;
                let bytes: Vec<u8> = r.try_get(4).map_err(pg)?;
                EvidenceDocument::from_row(&gate, &outcome, &digest, wall_ms, bytes)
            })
            .collect()
    }

    pub(crate) async fn events(&self, id: JobId) -> Result<Vec<JobEvent>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT seq, attempt_id, at, code, message FROM events WHERE job_id = $1 ORDER BY seq",
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|r| {
                let attempt: Option<String> = r.try_get(1).map_err(pg)?;
                Ok(JobEvent {
                    seq: r.try_get(0).map_err(pg)?,
                    job_id: id.clone(),
                    attempt_id: attempt
                        .as_deref()
                        .map(AttemptId::parse)
                        .transpose()
                        .map_err(|_| JobsError::Corrupt {
                            field: "events.attempt_id",
                        })?,
                    at_ms: r.try_get(2).map_err(pg)?,
                    code: r.try_get(3).map_err(pg)?,
                    message: r.try_get(4).map_err(pg)?,
                })
            })
            .collect()
    }

    pub(crate) async fn append_event(
        &self,
        id: JobId,
        attempt: Option<AttemptId>,
        code: String,
        message: String,
    ) -> Result<()> {
        let sql = format!(
            "INSERT INTO events (job_id, attempt_id, at, code, message)
             SELECT $1, $2, {NOW}, $3, $4 WHERE EXISTS (SELECT 1 FROM jobs WHERE id = $1)"
        );
        let client = self.client().await?;
        let n = client
            .execute(
                &sql,
                &[
                    &id.as_str(),
                    &attempt.as_ref().map(AttemptId::as_str),
                    &code,
                    &message,
                ],
            )
            .await
            .map_err(pg)?;
        if n == 0 {
            return Err(JobsError::NotFound { id: id.to_string() });
        }
        Ok(())
    }

    pub(crate) async fn register_host(
        &self,
        host: HostId,
        max_turns: u32,
        meta: String,
    ) -> Result<()> {
        let sql = format!(
            "INSERT INTO hosts (host_id, max_turns, meta_json, started_at, seen_at)
             VALUES ($1, $2, $3, {NOW}, {NOW})
             ON CONFLICT (host_id) DO UPDATE SET max_turns = excluded.max_turns,
                 meta_json = excluded.meta_json, started_at = excluded.started_at,
                 seen_at = excluded.seen_at"
        );
        let client = self.client().await?;
        client
            .execute(&sql, &[&host.as_str(), &i64::from(max_turns), &meta])
            .await
            .map_err(pg)?;
        Ok(())
    }

    pub(crate) async fn host_heartbeat(&self, host: HostId) -> Result<bool> {
        let client = self.client().await?;
        let n = client
            .execute(
                &format!("UPDATE hosts SET seen_at = {NOW} WHERE host_id = $1"),
                &[&host.as_str()],
            )
            .await
            .map_err(pg)?;
        Ok(n == 1)
    }

    pub(crate) async fn hosts(&self) -> Result<Vec<HostInfo>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT host_id, max_turns, meta_json, started_at, seen_at FROM hosts ORDER BY host_id",
                &[],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|r| {
                let meta: String = r.try_get(2).map_err(pg)?;
                host_info(
                    r.try_get(0).map_err(pg)?,
                    r.try_get(1).map_err(pg)?,
                    &meta,
                    r.try_get(3).map_err(pg)?,
                    r.try_get(4).map_err(pg)?,
                )
            })
            .collect()
    }

    pub(crate) async fn current_attempts(&self) -> Result<Vec<(JobId, AttemptId)>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, attempt_id FROM jobs WHERE state = 'running' ORDER BY id",
                &[],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get(0).map_err(pg)?;
                let attempt: String = r.try_get(1).map_err(pg)?;
                attempt_pair(&id, &attempt)
            })
            .collect()
    }
}

/// What a publication step checks of job `id`, read inside its transaction with the job's row
/// locked (`FOR UPDATE`, as a decision locks it): the decisions, the claim and the publication
/// of one job are one serialised sequence, on every host.
async fn publish_facts(
    tx: &deadpool_postgres::Transaction<'_>,
    id: &JobId,
) -> Result<PublishFacts> {
    let job = match tx
        .query_opt(
            "SELECT state, candidate_digest FROM jobs WHERE id = $1 FOR UPDATE",
            &[&id.as_str()],
        )
        .await
        .map_err(pg)?
    {
        Some(row) => Some((
            row.try_get::<_, String>(0).map_err(pg)?,
            row.try_get::<_, Option<String>>(1).map_err(pg)?,
        )),
        None => None,
    };
    let published: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM publications WHERE job_id = $1)",
            &[&id.as_str()],
        )
        .await
        .map_err(pg)?
        .try_get(0)
        .map_err(pg)?;
    let last = match tx
        .query_opt(
            "SELECT decision, candidate_digest FROM review_decisions WHERE job_id = $1
             ORDER BY seq DESC LIMIT 1",
            &[&id.as_str()],
        )
        .await
        .map_err(pg)?
    {
        Some(row) => Some((
            row.try_get::<_, String>(0).map_err(pg)?,
            row.try_get::<_, String>(1).map_err(pg)?,
        )),
        None => None,
    };
    Ok(PublishFacts {
        job,
        published,
        last,
    })
}

/// Review decisions, publications and named tokens (schema version 4), publication claims
/// (version 5).
impl PgStore {
    pub(crate) async fn record_decision(
        &self,
        id: JobId,
        row: DecisionRow,
        follow_up: Option<JobId>,
    ) -> Result<i64> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        // The job's row lock orders the decisions of one job (their sequence numbers).
        let found = tx
            .query_opt(
                "SELECT state, candidate_digest FROM jobs WHERE id = $1 FOR UPDATE",
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?;
        let Some(found) = found else {
            return Err(JobsError::NotFound { id: id.to_string() });
        };
        let state: String = found.try_get(0).map_err(pg)?;
        let digest: Option<String> = found.try_get(1).map_err(pg)?;
        crate::review::check_target(&id, &state, digest.as_deref(), &row)?;
        let published: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM publications WHERE job_id = $1)",
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?
            .try_get(0)
            .map_err(pg)?;
        if published {
            return Err(JobsError::Published { id: id.to_string() });
        }
        let seq: i64 = tx
            .query_one(
                "INSERT INTO review_decisions (job_id, seq, candidate_digest, decision, actor,
                     forced, at_ms, record, follow_up_job_id)
                 SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, $4, $5, $6, $7, $8
                 FROM review_decisions WHERE job_id = $1
                 RETURNING seq",
                &[
                    &id.as_str(),
                    &row.candidate_digest(),
                    &row.decision(),
                    &row.actor(),
                    &row.forced(),
                    &row.at_ms(),
                    &row.record(),
                    &follow_up.as_ref().map(JobId::as_str),
                ],
            )
            .await
            .map_err(pg)?
            .try_get(0)
            .map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        Ok(seq)
    }

    pub(crate) async fn decisions(&self, id: JobId) -> Result<Vec<StoredDecisionRow>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT job_id, seq, candidate_digest, decision, actor, forced, at_ms, record,
                     follow_up_job_id
                 FROM review_decisions WHERE job_id = $1 ORDER BY seq",
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|r| {
                let job: String = r.try_get(0).map_err(pg)?;
                let digest: String = r.try_get(2).map_err(pg)?;
                let decision: String = r.try_get(3).map_err(pg)?;
                let actor: String = r.try_get(4).map_err(pg)?;
                let follow: Option<String> = r.try_get(8).map_err(pg)?;
                StoredDecisionRow::from_row(
                    &job,
                    r.try_get(1).map_err(pg)?,
                    &digest,
                    &decision,
                    &actor,
                    r.try_get(5).map_err(pg)?,
                    r.try_get(6).map_err(pg)?,
                    r.try_get(7).map_err(pg)?,
                    follow.as_deref(),
                )
            })
            .collect()
    }

    pub(crate) async fn claim_publication(
        &self,
        claim: PublicationClaim,
        lease: Duration,
    ) -> Result<PublicationClaim> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let id = claim.job_id();
        publish_facts(&tx, id)
            .await?
            .check(id, claim.candidate_digest())?;
        let live = tx
            .query_opt(
                &format!(
                    "SELECT holder, branch FROM publication_claims
                     WHERE job_id = $1 AND lease_until > {NOW}"
                ),
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?;
        if let Some(row) = live {
            return Err(JobsError::Publishing {
                id: id.to_string(),
                holder: row.try_get(0).map_err(pg)?,
                branch: row.try_get(1).map_err(pg)?,
            });
        }
        tx.execute(
            &format!(
                "INSERT INTO publication_claims (job_id, candidate_digest, claim_token, holder,
                     branch, claimed_at, lease_until)
                 VALUES ($1, $2, $3, $4, $5, {NOW}, {NOW} + $6)
                 ON CONFLICT (job_id) DO UPDATE SET candidate_digest = excluded.candidate_digest,
                     claim_token = excluded.claim_token, holder = excluded.holder,
                     branch = excluded.branch, claimed_at = excluded.claimed_at,
                     lease_until = excluded.lease_until"
            ),
            &[
                &id.as_str(),
                &claim.candidate_digest(),
                &claim.token(),
                &claim.holder().as_str(),
                &claim.branch(),
                &duration_ms(lease),
            ],
        )
        .await
        .map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        Ok(claim)
    }

    pub(crate) async fn renew_publication_claim(
        &self,
        claim: PublicationClaim,
        lease: Duration,
    ) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let id = claim.job_id();
        publish_facts(&tx, id)
            .await?
            .check(id, claim.candidate_digest())?;
        let n = tx
            .execute(
                &format!(
                    "UPDATE publication_claims SET lease_until = {NOW} + $3
                     WHERE job_id = $1 AND claim_token = $2"
                ),
                &[&id.as_str(), &claim.token(), &duration_ms(lease)],
            )
            .await
            .map_err(pg)?;
        if n != 1 {
            return Err(JobsError::ClaimLost { id: id.to_string() });
        }
        tx.commit().await.map_err(pg)
    }

    pub(crate) async fn release_publication_claim(&self, claim: PublicationClaim) -> Result<bool> {
        let client = self.client().await?;
        let n = client
            .execute(
                "DELETE FROM publication_claims WHERE job_id = $1 AND claim_token = $2",
                &[&claim.job_id().as_str(), &claim.token()],
            )
            .await
            .map_err(pg)?;
        Ok(n == 1)
    }

    pub(crate) async fn record_publication(
        &self,
        claim: PublicationClaim,
        record: Vec<u8>,
    ) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let id = claim.job_id();
        let facts = publish_facts(&tx, id).await?;
        if facts.published {
            return Err(JobsError::Published { id: id.to_string() });
        }
        let held: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM publication_claims
                 WHERE job_id = $1 AND claim_token = $2)",
                &[&id.as_str(), &claim.token()],
            )
            .await
            .map_err(pg)?
            .try_get(0)
            .map_err(pg)?;
        if !held {
            return Err(JobsError::ClaimLost { id: id.to_string() });
        }
        facts.check(id, claim.candidate_digest())?;
        tx.execute(
            &format!(
                "INSERT INTO publications (job_id, candidate_digest, record, created_at)
                 VALUES ($1, $2, $3, {NOW})"
            ),
            &[&id.as_str(), &claim.candidate_digest(), &record],
        )
        .await
        .map_err(pg)?;
        tx.execute(
            "DELETE FROM publication_claims WHERE job_id = $1",
            &[&id.as_str()],
        )
        .await
        .map_err(pg)?;
        tx.commit().await.map_err(pg)
    }

    pub(crate) async fn publication(&self, id: JobId) -> Result<Option<Vec<u8>>> {
        let client = self.client().await?;
        client
            .query_opt(
                "SELECT record FROM publications WHERE job_id = $1",
                &[&id.as_str()],
            )
            .await
            .map_err(pg)?
            .map(|r| r.try_get(0).map_err(pg))
            .transpose()
    }

    pub(crate) async fn create_token(&self, name: TokenName, hash: TokenHash) -> Result<()> {
        let client = self.client().await?;
        let n = client
            .execute(
                &format!(
                    "INSERT INTO api_tokens (name, token_sha256, created_at) VALUES ($1, $2, {NOW})
                     ON CONFLICT DO NOTHING"
                ),
                &[&name.as_str(), &hash.as_str()],
            )
            .await
            .map_err(pg)?;
        if n == 1 {
            Ok(())
        } else {
            Err(JobsError::Conflict {
                what: "the token name is taken (names are never reused)",
            })
        }
    }

    pub(crate) async fn tokens(&self) -> Result<Vec<TokenInfo>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT name, created_at, revoked_at FROM api_tokens ORDER BY name",
                &[],
            )
            .await
            .map_err(pg)?;
        rows.iter()
            .map(|r| {
                Ok(TokenInfo {
                    name: r.try_get(0).map_err(pg)?,
                    created_at_ms: r.try_get(1).map_err(pg)?,
                    revoked_at_ms: r.try_get(2).map_err(pg)?,
                })
            })
            .collect()
    }

    pub(crate) async fn revoke_token(&self, name: TokenName) -> Result<bool> {
        let client = self.client().await?;
        let n = client
            .execute(
                &format!(
                    "UPDATE api_tokens SET revoked_at = {NOW} WHERE name = $1 AND revoked_at IS NULL"
                ),
                &[&name.as_str()],
            )
            .await
            .map_err(pg)?;
        Ok(n == 1)
    }

    pub(crate) async fn token_principal(&self, hash: TokenHash) -> Result<Option<String>> {
        let client = self.client().await?;
        client
            .query_opt(
                "SELECT name FROM api_tokens WHERE token_sha256 = $1 AND revoked_at IS NULL",
                &[&hash.as_str()],
            )
            .await
            .map_err(pg)?
            .map(|r| r.try_get(0).map_err(pg))
            .transpose()
    }
}
