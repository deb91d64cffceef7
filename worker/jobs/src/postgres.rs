//! The many-host backend: PostgreSQL through tokio-postgres and a deadpool connection pool, no
//! TLS (a unix socket or loopback; see docs/SERVICE.md). Claims lock with `FOR UPDATE SKIP
//! LOCKED`, so concurrent claimers never wait on each other's rows; every write about a running
//! attempt is one statement guarded by `id + attempt_id + state='running'`, with its log line
//! written by the same statement (data-modifying CTEs). Times come from the database clock.

use std::sync::LazyLock;
use std::time::Duration;

use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime,
};
use tokio_postgres::{NoTls, Row, ToStatement};

use crate::access::{AuditAct, AuditEntry, NewAuditEntry, Roles, TokenAccess};
use crate::error::{Backend, JobsError, Result};
use crate::evidence::EvidenceDocument;
use crate::intake::{
    DELIVERY_COLUMNS, DeliveryOutcome, ForgeDelivery, NewForgeDelivery, delivery_row,
};
use crate::ledger::{
    CLAIM_SPEND_COLUMNS, DAY_MS, SpendToday, UsageDocument, UsageRollupRow, UtcDay, rollup_limit,
    rollup_row, rollup_sql, spend_columns_at, spend_on_sql, spend_today,
};
use crate::model::{
    Claimed, Fenced, Heartbeat, HostInfo, Job, JobEvent, JobSpec, JobState, StoreOptions,
    duration_ms,
};
use crate::report::{ForgeCall, ForgePull, PULL_COLUMNS, call_row, pull_row};
use crate::review::decision_act;
use crate::review::{
    DecisionRow, PublicationClaim, PublishFacts, StoredDecisionRow, TokenHash, TokenInfo,
    TokenName, check_target,
};
use crate::rows::{
    Column, DbRow, EVENT_CANCELLED, EVENT_CLAIMED, EVENT_RETRIED, EVENT_SUBMITTED,
    JOB_COLUMN_COUNT, LEASE_EXPIRED, LEASE_EXPIRED_MESSAGE, SpecRow, attempt_pair, audit_row,
    decision_row, event_row, evidence_row, first, host_info, job, job_columns, pair,
    token_access_row, token_row, usage_row,
};
use crate::schema::{MIGRATIONS, SCHEMA_VERSION, SELECT_STORE_ID, SELECT_VERSION, stored_store_id};
use crate::transition::{FencedWrite, fenced_update};
use vocab::StoreId;
use vocab::{AttemptId, HostId, JobId};

/// The database clock in milliseconds (the transaction's start, so one statement sees one time).
const NOW: &str = "(extract(epoch FROM now()) * 1000)::bigint";

/// The ledger columns of a usage row after `usage_json, recorded_at`.
const LEDGER_COLUMNS: &str =
    "principal, repository, day, requests, input_tokens, output_tokens, total_tokens";
/// The principal and repository of the job row in scope (its `spec_json`).
const LEDGER_JOB: &str = "COALESCE(spec_json::json ->> 'submitted_by', ''),
     COALESCE(spec_json::json ->> 'repository', '')";
/// Recording an attempt again replaces its document and counts (its first day stays).
const LEDGER_UPSERT: &str = "ON CONFLICT (job_id, attempt_id) DO UPDATE SET
     usage_json = excluded.usage_json, principal = excluded.principal,
     repository = excluded.repository, requests = excluded.requests,
     input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
     total_tokens = excluded.total_tokens";

/// PostgreSQL's integer sum of a column (0 for no rows; `sum` of `bigint` is `numeric`).
fn pg_sum(column: &str) -> String {
    format!("LEAST(COALESCE(sum({column}), 0), 9223372036854775807)::bigint")
}

/// The claim as one statement: the oldest due queued jobs (`$1` of them, skipping rows other
/// hosts hold) become running with their attempt ids (`$2`), host (`$3`) and lease (`$4` ms),
/// each with a `claimed` log line (`$5`); `spend_join` adds columns after the job's and joins
/// (empty for the plain claim).
fn claim_sql(spend_columns: &str, spend_join: &str) -> String {
    format!(
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
         SELECT upd.*{spend_columns} FROM upd{spend_join} ORDER BY upd.run_at, upd.seq",
        job_columns("j.", "j.approval_json")
    )
}

static CLAIM: LazyLock<String> = LazyLock::new(|| claim_sql("", ""));
/// The claim that also reads each claimed job's daily totals (day on the database clock, the
/// principal and repository as the ledger takes them from the job's spec: [`LEDGER_JOB`]).
static CLAIM_SPEND: LazyLock<String> = LazyLock::new(|| {
    claim_sql(
        &format!(", {CLAIM_SPEND_COLUMNS}"),
        &format!(
            "
             LEFT JOIN spend_daily p ON p.scope = 'p' AND p.day = {NOW} / {DAY_MS}
                 AND p.name = COALESCE(upd.spec_json::json ->> 'submitted_by', '')
             LEFT JOIN spend_daily r ON r.scope = 'r' AND r.day = {NOW} / {DAY_MS}
                 AND r.name = COALESCE(upd.spec_json::json ->> 'repository', '')"
        ),
    )
});
static SPEND_ON: LazyLock<String> = LazyLock::new(|| spend_on_sql('$', pg_sum));
static ROLLUP: LazyLock<String> =
    LazyLock::new(|| rollup_sql('$', pg_sum, "::text", " COLLATE \"C\""));

/// The fenced write as one statement of data-modifying CTEs: the guarded `UPDATE` (the delay
/// `$7` added to the database clock), then the candidate (`$12`), the usage row (`$13`, its
/// counts `$28`..`$31`, its principal and repository from the updated job row) and the
/// log line (`$14`, `$15`), the gate evidence rows (`$16`..`$20`, parallel arrays) and an
/// automatic follow-up job (`$21`..`$26`, its `submitted` line `$27`; skipped when its
/// idempotency key exists) for the row it changed, if any; it returns how many rows it changed.
static FENCED_WRITE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH u AS (
             {update}
             RETURNING id, attempt_id, spec_json),
         c AS (
             INSERT INTO candidates (job_id, attempt_id, digest, bytes, created_at)
             SELECT id, attempt_id, $11, $12, {NOW} FROM u WHERE $12::bytea IS NOT NULL),
         us AS (
             INSERT INTO usage (job_id, attempt_id, usage_json, recorded_at, {LEDGER_COLUMNS})
             SELECT id, attempt_id, $13::text, {NOW}, {LEDGER_JOB}, {NOW} / {DAY_MS},
                 $28::bigint, $29::bigint, $30::bigint, $31::bigint
             FROM u WHERE $13::text IS NOT NULL
             {LEDGER_UPSERT}),
         ev AS (
             INSERT INTO events (job_id, attempt_id, at, code, message)
             SELECT id, attempt_id, {NOW}, $14, $15 FROM u),
         ge AS (
             INSERT INTO gate_evidence
                 (job_id, attempt_id, gate, outcome, digest, wall_ms, bytes, created_at)
             SELECT u.id, u.attempt_id, e.gate, e.outcome, e.digest, e.wall_ms, e.bytes, {NOW}
             FROM u, unnest($16::text[], $17::text[], $18::text[], $19::bigint[], $20::bytea[])
                  AS e (gate, outcome, digest, wall_ms, bytes)),
         fu AS (
             INSERT INTO jobs (id, kind, state, idempotency_key, spec_json, approval_json,
                 attempts, max_attempts, run_at, created_at, updated_at)
             SELECT $21::text, $22::text, 'queued', $23::text, $24::text, $25::bytea, 0,
                 $26::bigint, {NOW}, {NOW}, {NOW}
             FROM u WHERE $21::text IS NOT NULL
             ON CONFLICT (idempotency_key) DO NOTHING
             RETURNING id),
         fe AS (
             INSERT INTO events (job_id, attempt_id, at, code, message)
             SELECT id, NULL, {NOW}, $27, 'job submitted' FROM fu)
         SELECT count(*) FROM u",
        update = fenced_update('$', NOW, &format!("{NOW} + $7"))
    )
});

/// A job's state and candidate digest (`$1`: its ID), its row locked: a decision, a claim and
/// a publication of one job are one serialised sequence, on every host.
const JOB_FACTS_FOR_UPDATE: &str =
    "SELECT state, candidate_digest FROM jobs WHERE id = $1 FOR UPDATE";
/// Whether job `$1` is published.
const PUBLISHED: &str = "SELECT EXISTS (SELECT 1 FROM publications WHERE job_id = $1)";
/// Job `$1`'s last decision and the digest it names.
const LAST_DECISION: &str = "SELECT decision, candidate_digest FROM review_decisions
     WHERE job_id = $1 ORDER BY seq DESC LIMIT 1";

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

impl DbRow for Row {
    fn at<T: Column>(&self, index: usize) -> Result<T> {
        self.try_get(index).map_err(pg)
    }

    fn named<T: Column>(&self, name: &str) -> Result<T> {
        self.try_get(name).map_err(pg)
    }
}

type Params<'a> = &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)];

/// Every row of a statement, decoded.
async fn all<T, S: ?Sized + ToStatement + Sync + Send>(
    client: &impl GenericClient,
    sql: &S,
    params: Params<'_>,
    decode: impl Fn(&Row) -> Result<T>,
) -> Result<Vec<T>> {
    let rows = client.query(sql, params).await.map_err(pg)?;
    rows.iter().map(decode).collect()
}

/// The first row of a statement, decoded, if there is one.
async fn one_opt<T, S: ?Sized + ToStatement + Sync + Send>(
    client: &impl GenericClient,
    sql: &S,
    params: Params<'_>,
    decode: impl FnOnce(&Row) -> Result<T>,
) -> Result<Option<T>> {
    let row = client.query_opt(sql, params).await.map_err(pg)?;
    row.as_ref().map(decode).transpose()
}

/// The one row of a statement, decoded.
async fn one<T, S: ?Sized + ToStatement + Sync + Send>(
    client: &impl GenericClient,
    sql: &S,
    params: Params<'_>,
    decode: impl FnOnce(&Row) -> Result<T>,
) -> Result<T> {
    decode(&client.query_one(sql, params).await.map_err(pg)?)
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
    let found: i64 = one(&tx, SELECT_VERSION, &[], first).await?;
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
    let stored: String = one(&tx, SELECT_STORE_ID, &[], first).await?;
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
        one(&self.client().await?, SELECT_VERSION, &[], first).await
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
        let created: i64 = one(
            &client,
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
            first,
        )
        .await?;
        let job = one(
            &client,
            &format!("SELECT {} FROM jobs WHERE idempotency_key = $1", cols()),
            &[&key],
            job,
        )
        .await?;
        Ok((job, created == 1))
    }

    pub(crate) async fn claim(
        &self,
        host: HostId,
        max: i64,
        lease: Duration,
        attempts: Vec<AttemptId>,
        spend: bool,
    ) -> Result<Vec<Claimed>> {
        let attempts: Vec<String> = attempts.into_iter().map(|a| a.to_string()).collect();
        let sql = if spend { &*CLAIM_SPEND } else { &*CLAIM };
        let client = self.client().await?;
        let stmt = client.prepare_cached(sql).await.map_err(pg)?;
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
            let spend_today = if spend {
                Some(spend_columns_at(row, JOB_COLUMN_COUNT)?)
            } else {
                None
            };
            out.push(Claimed {
                attempt: job.attempts,
                attempt_id,
                lease_until_ms,
                job,
                spend_today,
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
        let params: Params<'_> = &[&id.as_str(), &attempt.as_str(), &duration_ms(lease)];
        Ok(match one_opt(&client, &stmt, params, first).await? {
            Some(cancel_requested) => Heartbeat::Renewed { cancel_requested },
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
        let next = write.follow_up.as_ref();
        let counts = write.usage.as_ref().map(|u| u.counts).unwrap_or_default();
        let client = self.client().await?;
        let stmt = client.prepare_cached(&FENCED_WRITE).await.map_err(pg)?;
        let n: i64 = one(
            &client,
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
                &write.usage.as_ref().map(|u| u.text.as_str()),
                &write.event_code,
                &write.event_message,
                &gates,
                &outcomes,
                &digests,
                &walls,
                &bytes,
                &next.map(|r| r.id.as_str()),
                &next.map(|r| r.kind),
                &next.map(|r| r.key.as_str()),
                &next.map(|r| r.spec_json.as_str()),
                &next.map(|r| r.approval_json.as_slice()),
                &next.map(|r| r.max_attempts),
                &EVENT_SUBMITTED,
                &counts.requests,
                &counts.input_tokens,
                &counts.output_tokens,
                &counts.total_tokens,
            ],
            first,
        )
        .await?;
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
        usage: UsageDocument,
    ) -> Result<()> {
        let sql = format!(
            "INSERT INTO usage (job_id, attempt_id, usage_json, recorded_at, {LEDGER_COLUMNS})
             SELECT $1, $2, $3, {NOW}, {LEDGER_JOB}, {NOW} / {DAY_MS}, $4, $5, $6, $7
             FROM jobs WHERE id = $1
             {LEDGER_UPSERT}"
        );
        let c = usage.counts;
        let client = self.client().await?;
        let n = client
            .execute(
                &sql,
                &[
                    &id.as_str(),
                    &attempt.as_str(),
                    &usage.text,
                    &c.requests,
                    &c.input_tokens,
                    &c.output_tokens,
                    &c.total_tokens,
                ],
            )
            .await
            .map_err(pg)?;
        if n == 0 {
            return Err(JobsError::NotFound { id: id.to_string() });
        }
        Ok(())
    }

    pub(crate) async fn usage(&self, id: JobId) -> Result<Vec<(AttemptId, String)>> {
        let client = self.client().await?;
        all(
            &client,
            "SELECT attempt_id, usage_json FROM usage WHERE job_id = $1 ORDER BY recorded_at, attempt_id",
            &[&id.as_str()],
            usage_row,
        )
        .await
    }

    pub(crate) async fn spend_on(
        &self,
        day: UtcDay,
        principal: String,
        repository: String,
    ) -> Result<SpendToday> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(&SPEND_ON).await.map_err(pg)?;
        let rows = client
            .query(&stmt, &[&day.days(), &principal, &repository])
            .await
            .map_err(pg)?;
        let mut today = SpendToday::default();
        for row in &rows {
            spend_today(row, &mut today)?;
        }
        Ok(today)
    }

    pub(crate) async fn usage_rollup(
        &self,
        from: UtcDay,
        to: UtcDay,
        principal: Option<String>,
    ) -> Result<Vec<UsageRollupRow>> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(&ROLLUP).await.map_err(pg)?;
        all(
            &client,
            &stmt,
            &[&from.days(), &to.days(), &principal, &rollup_limit()],
            rollup_row,
        )
        .await
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
        let n: i64 = one(
            &client,
            &stmt,
            &[&LEASE_EXPIRED, &LEASE_EXPIRED_MESSAGE],
            first,
        )
        .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn get_in(client: &impl GenericClient, id: &JobId) -> Result<Option<Job>> {
        let sql = format!("SELECT {} FROM jobs WHERE id = $1", cols());
        one_opt(client, &sql, &[&id.as_str()], job).await
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
        all(&client, &sql, &[&state.map(JobState::as_str), &limit], job).await
    }

    pub(crate) async fn follow_ups_of(&self, id: JobId) -> Result<Vec<Job>> {
        // The expression is the one `jobs_by_parent` indexes, so the index serves it.
        let sql = format!(
            "SELECT {} FROM jobs
             WHERE ((spec_json::jsonb) -> 'follow_up' ->> 'supersedes_job') = $1
             ORDER BY seq LIMIT $2",
            job_columns("", "NULL::bytea")
        );
        let client = self.client().await?;
        all(
            &client,
            &sql,
            &[&id.as_str(), &crate::MAX_FOLLOW_UPS_LISTED],
            job,
        )
        .await
    }

    pub(crate) async fn candidate(&self, id: JobId) -> Result<Option<Vec<u8>>> {
        let client = self.client().await?;
        let sql = "SELECT bytes FROM candidates WHERE job_id = $1";
        one_opt(&client, sql, &[&id.as_str()], first).await
    }

    pub(crate) async fn evidence(&self, id: JobId) -> Result<Vec<EvidenceDocument>> {
        let client = self.client().await?;
        all(
            &client,
            "SELECT gate, outcome, digest, wall_ms, bytes FROM gate_evidence
                 WHERE job_id = $1 ORDER BY gate",
            &[&id.as_str()],
            evidence_row,
        )
        .await
    }

    pub(crate) async fn events(&self, id: JobId) -> Result<Vec<JobEvent>> {
        let client = self.client().await?;
        all(
            &client,
            "SELECT seq, attempt_id, at, code, message FROM events WHERE job_id = $1 ORDER BY seq",
            &[&id.as_str()],
            |r| event_row(&id, r),
        )
        .await
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
        all(
            &client,
            "SELECT host_id, max_turns, meta_json, started_at, seen_at FROM hosts ORDER BY host_id",
            &[],
            host_info,
        )
        .await
    }

    pub(crate) async fn current_attempts(&self) -> Result<Vec<(JobId, AttemptId)>> {
        let client = self.client().await?;
        all(
            &client,
            "SELECT id, attempt_id FROM jobs WHERE state = 'running' ORDER BY id",
            &[],
            attempt_pair,
        )
        .await
    }
}

/// What a publication step checks of job `id`, read inside its transaction with the job's row
/// locked (`FOR UPDATE`, as a decision locks it): the decisions, the claim and the publication
/// of one job are one serialised sequence, on every host.
async fn publish_facts(
    tx: &deadpool_postgres::Transaction<'_>,
    id: &JobId,
) -> Result<PublishFacts> {
    Ok(PublishFacts {
        job: one_opt(tx, JOB_FACTS_FOR_UPDATE, &[&id.as_str()], pair).await?,
        published: one(tx, PUBLISHED, &[&id.as_str()], first).await?,
        last: one_opt(tx, LAST_DECISION, &[&id.as_str()], pair).await?,
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
        let found = one_opt(&tx, JOB_FACTS_FOR_UPDATE, &[&id.as_str()], pair).await?;
        check_target(&id, found, &row)?;
        if one(&tx, PUBLISHED, &[&id.as_str()], first).await? {
            return Err(JobsError::Published { id: id.to_string() });
        }
        let seq: i64 = one(
            &tx,
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
            first,
        )
        .await?;
        insert_audit(&tx, &decision_act(&id, &row, seq)?).await?;
        tx.commit().await.map_err(pg)?;
        Ok(seq)
    }

    pub(crate) async fn decisions(&self, id: JobId) -> Result<Vec<StoredDecisionRow>> {
        let client = self.client().await?;
        all(
            &client,
            "SELECT job_id, seq, candidate_digest, decision, actor, forced, at_ms, record,
                     follow_up_job_id
                 FROM review_decisions WHERE job_id = $1 ORDER BY seq",
            &[&id.as_str()],
            decision_row,
        )
        .await
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
        let live = format!(
            "SELECT holder, branch FROM publication_claims
             WHERE job_id = $1 AND lease_until > {NOW}"
        );
        if let Some((holder, branch)) = one_opt(&tx, &live, &[&id.as_str()], pair).await? {
            return Err(JobsError::Publishing {
                id: id.to_string(),
                holder,
                branch,
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
        act: NewAuditEntry,
    ) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let id = claim.job_id();
        let facts = publish_facts(&tx, id).await?;
        facts.check_unpublished(id)?;
        let held = one(
            &tx,
            "SELECT EXISTS (SELECT 1 FROM publication_claims
             WHERE job_id = $1 AND claim_token = $2)",
            &[&id.as_str(), &claim.token()],
            first,
        )
        .await?;
        facts.check_held(id, held, claim.candidate_digest())?;
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
        insert_audit(&tx, &act).await?;
        tx.commit().await.map_err(pg)
    }

    pub(crate) async fn publication(&self, id: JobId) -> Result<Option<Vec<u8>>> {
        let client = self.client().await?;
        let sql = "SELECT record FROM publications WHERE job_id = $1";
        one_opt(&client, sql, &[&id.as_str()], first).await
    }

    pub(crate) async fn create_token(
        &self,
        name: TokenName,
        hash: TokenHash,
        roles: Roles,
        act: NewAuditEntry,
    ) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let n = tx
            .execute(
                &format!(
                    "INSERT INTO api_tokens (name, token_sha256, created_at, roles, roles_migrated)
                     VALUES ($1, $2, {NOW}, $3, FALSE)
                     ON CONFLICT DO NOTHING"
                ),
                &[&name.as_str(), &hash.as_str(), &roles.to_list()],
            )
            .await
            .map_err(pg)?;
        if n != 1 {
            return Err(JobsError::Conflict {
                what: "the token name is taken (names are never reused)",
            });
        }
        insert_audit(&tx, &act).await?;
        tx.commit().await.map_err(pg)
    }

    pub(crate) async fn tokens(&self) -> Result<Vec<TokenInfo>> {
        let client = self.client().await?;
        all(
            &client,
            "SELECT name, created_at, revoked_at, roles, roles_migrated FROM api_tokens
             ORDER BY name",
            &[],
            token_row,
        )
        .await
    }

    pub(crate) async fn revoke_token(&self, name: TokenName, act: NewAuditEntry) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let n = tx
            .execute(
                &format!(
                    "UPDATE api_tokens SET revoked_at = {NOW} WHERE name = $1 AND revoked_at IS NULL"
                ),
                &[&name.as_str()],
            )
            .await
            .map_err(pg)?;
        if n == 1 {
            insert_audit(&tx, &act).await?;
        }
        tx.commit().await.map_err(pg)?;
        Ok(n == 1)
    }

    pub(crate) async fn set_token_roles(
        &self,
        name: TokenName,
        roles: Roles,
        by: String,
    ) -> Result<Option<Roles>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        // The row lock orders concurrent role changes of one token (each audits what it replaced).
        let before: Option<String> = one_opt(
            &tx,
            "SELECT roles FROM api_tokens WHERE name = $1 AND revoked_at IS NULL FOR UPDATE",
            &[&name.as_str()],
            first,
        )
        .await?;
        let Some(before) = before else {
            return Ok(None);
        };
        let before = Roles::stored(&before)?;
        tx.execute(
            "UPDATE api_tokens SET roles = $1, roles_migrated = FALSE WHERE name = $2",
            &[&roles.to_list(), &name.as_str()],
        )
        .await
        .map_err(pg)?;
        let act = NewAuditEntry::new(
            &by,
            AuditAct::TokenRoles,
            name.as_str(),
            format!("roles {roles} (was {before})"),
        )?;
        insert_audit(&tx, &act).await?;
        tx.commit().await.map_err(pg)?;
        Ok(Some(before))
    }

    pub(crate) async fn token_access(&self, hash: TokenHash) -> Result<Option<TokenAccess>> {
        let client = self.client().await?;
        let sql =
            "SELECT name, roles FROM api_tokens WHERE token_sha256 = $1 AND revoked_at IS NULL";
        one_opt(&client, sql, &[&hash.as_str()], token_access_row).await
    }

    pub(crate) async fn append_audit(&self, act: NewAuditEntry) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        insert_audit(&tx, &act).await?;
        tx.commit().await.map_err(pg)
    }

    pub(crate) async fn audit(&self, after: i64, limit: i64) -> Result<Vec<AuditEntry>> {
        let client = self.client().await?;
        all(
            &client,
            "SELECT seq, at_ms, principal, act, subject, detail FROM audit
             WHERE seq > $1 ORDER BY seq LIMIT $2",
            &[&after, &limit],
            audit_row,
        )
        .await
    }

    pub(crate) async fn audit_of(&self, subject: String, limit: i64) -> Result<Vec<AuditEntry>> {
        let client = self.client().await?;
        all(
            &client,
            "SELECT * FROM (SELECT seq, at_ms, principal, act, subject, detail FROM audit
                 WHERE subject = $1 ORDER BY seq DESC LIMIT $2) AS latest
             ORDER BY seq",
            &[&subject, &limit],
            audit_row,
        )
        .await
    }
}

/// Appends one entry to the audit trail, inside the act's own transaction.
async fn insert_audit(tx: &deadpool_postgres::Transaction<'_>, act: &NewAuditEntry) -> Result<()> {
    tx.execute(
        &format!(
            "INSERT INTO audit (at_ms, principal, act, subject, detail)
             VALUES ({NOW}, $1, $2, $3, $4)"
        ),
        &[&act.principal, &act.act.as_str(), &act.subject, &act.detail],
    )
    .await
    .map_err(pg)?;
    Ok(())
}

/// Forge deliveries (`crate::intake`).
impl PgStore {
    pub(crate) async fn record_forge_delivery(
        &self,
        new: NewForgeDelivery,
        trigger: Option<String>,
    ) -> Result<(ForgeDelivery, bool)> {
        let client = self.client().await?;
        // A duplicate delivery id or subject inserts nothing (either unique key); only then is
        // the recorded row read, by the delivery id, else by the subject (committed by the other
        // writer). A new delivery costs one statement.
        let inserted = one_opt(
            &client,
            &format!(
                "INSERT INTO forge_deliveries (forge, delivery, received_at, state, reason,
                     subject, trigger_json, updated_at)
                 VALUES ($1, $2, {NOW}, $3, $4, $5, $6, {NOW}) ON CONFLICT DO NOTHING
                 RETURNING {DELIVERY_COLUMNS}"
            ),
            &[
                &new.forge,
                &new.delivery,
                &new.state.as_str(),
                &new.reason,
                &new.subject,
                &trigger,
            ],
            delivery_row,
        )
        .await?;
        if let Some(row) = inserted {
            return Ok((row, true));
        }
        let by_delivery = one_opt(
            &client,
            &format!(
                "SELECT {DELIVERY_COLUMNS} FROM forge_deliveries
                 WHERE forge = $1 AND delivery = $2"
            ),
            &[&new.forge, &new.delivery],
            delivery_row,
        )
        .await?;
        let row = match by_delivery {
            Some(row) => row,
            None => {
                one(
                    &client,
                    &format!(
                        "SELECT {DELIVERY_COLUMNS} FROM forge_deliveries
                         WHERE forge = $1 AND subject = $2"
                    ),
                    &[&new.forge, &new.subject],
                    delivery_row,
                )
                .await?
            }
        };
        Ok((row, false))
    }

    pub(crate) async fn forge_delivery(
        &self,
        forge: String,
        delivery: String,
    ) -> Result<Option<ForgeDelivery>> {
        let client = self.client().await?;
        one_opt(
            &client,
            &format!(
                "SELECT {DELIVERY_COLUMNS} FROM forge_deliveries
                 WHERE forge = $1 AND delivery = $2"
            ),
            &[&forge, &delivery],
            delivery_row,
        )
        .await
    }

    pub(crate) async fn claim_forge_delivery(
        &self,
        host: HostId,
        lease: Duration,
    ) -> Result<Option<ForgeDelivery>> {
        let client = self.client().await?;
        one_opt(
            &client,
            &format!(
                "UPDATE forge_deliveries SET holder = $1, lease_until = {NOW} + $2,
                     attempts = attempts + 1, updated_at = {NOW}
                 WHERE (forge, delivery) = (
                     SELECT forge, delivery FROM forge_deliveries
                     WHERE state = 'queued' AND (lease_until IS NULL OR lease_until <= {NOW})
                     ORDER BY received_at, forge, delivery LIMIT 1
                     FOR UPDATE SKIP LOCKED)
                 RETURNING {DELIVERY_COLUMNS}"
            ),
            &[&host.as_str(), &duration_ms(lease)],
            delivery_row,
        )
        .await
    }

    pub(crate) async fn pin_forge_base(
        &self,
        forge: String,
        delivery: String,
        host: HostId,
        commit: String,
    ) -> Result<Option<String>> {
        let client = self.client().await?;
        one_opt(
            &client,
            "UPDATE forge_deliveries SET base_commit = COALESCE(base_commit, $3)
             WHERE forge = $1 AND delivery = $2 AND holder = $4 AND state = 'queued'
             RETURNING base_commit",
            &[&forge, &delivery, &commit, &host.as_str()],
            first,
        )
        .await
    }

    pub(crate) async fn finish_forge_delivery(
        &self,
        forge: String,
        delivery: String,
        host: HostId,
        outcome: DeliveryOutcome,
    ) -> Result<Fenced> {
        let client = self.client().await?;
        let (state, reason, job) = outcome.columns();
        let n = client
            .execute(
                &format!(
                    "UPDATE forge_deliveries SET state = $3, reason = $4, job_id = $5,
                         holder = NULL, lease_until = NULL, updated_at = {NOW},
                         report = CASE WHEN $3 = 'submitted' THEN 'open' END, report_at = {NOW}
                     WHERE forge = $1 AND delivery = $2 AND holder = $6 AND state = 'queued'"
                ),
                &[&forge, &delivery, &state, &reason, &job, &host.as_str()],
            )
            .await
            .map_err(pg)?;
        Ok(Fenced::one_row(n))
    }
}

/// Reports back to the forge (`crate::report`).
impl PgStore {
    pub(crate) async fn claim_forge_report(
        &self,
        host: HostId,
        lease: Duration,
    ) -> Result<Option<ForgeDelivery>> {
        let client = self.client().await?;
        one_opt(
            &client,
            &format!(
                "UPDATE forge_deliveries SET holder = $1, lease_until = {NOW} + $2,
                     updated_at = {NOW}
                 WHERE (forge, delivery) = (
                     SELECT forge, delivery FROM forge_deliveries
                     WHERE report = 'open' AND report_at <= {NOW}
                       AND (lease_until IS NULL OR lease_until <= {NOW} OR holder = $1)
                     ORDER BY report_at, forge, delivery LIMIT 1
                     FOR UPDATE SKIP LOCKED)
                 RETURNING {DELIVERY_COLUMNS}"
            ),
            &[&host.as_str(), &duration_ms(lease)],
            delivery_row,
        )
        .await
    }

    pub(crate) async fn forge_calls(
        &self,
        forge: String,
        delivery: String,
    ) -> Result<Vec<ForgeCall>> {
        let client = self.client().await?;
        all(
            &client,
            "SELECT call, result_json, recorded_at FROM forge_calls
             WHERE forge = $1 AND delivery = $2 ORDER BY recorded_at, call",
            &[&forge, &delivery],
            call_row,
        )
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
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let held = tx
            .execute(
                &format!(
                    "UPDATE forge_deliveries SET report_failures = 0, updated_at = {NOW}
                     WHERE forge = $1 AND delivery = $2 AND holder = $3 AND report = 'open'"
                ),
                &[&forge, &delivery, &host.as_str()],
            )
            .await
            .map_err(pg)?;
        if held != 1 {
            return Ok(None);
        }
        tx.execute(
            &format!(
                "INSERT INTO forge_calls (forge, delivery, call, result_json, recorded_at)
                 VALUES ($1, $2, $3, $4, {NOW}) ON CONFLICT DO NOTHING"
            ),
            &[&forge, &delivery, &call, &result],
        )
        .await
        .map_err(pg)?;
        let stored = one(
            &tx,
            "SELECT call, result_json, recorded_at FROM forge_calls
             WHERE forge = $1 AND delivery = $2 AND call = $3",
            &[&forge, &delivery, &call],
            call_row,
        )
        .await?;
        tx.commit().await.map_err(pg)?;
        Ok(Some(stored))
    }

    pub(crate) async fn defer_forge_report(
        &self,
        forge: String,
        delivery: String,
        host: HostId,
        after: Duration,
        failed: bool,
    ) -> Result<Fenced> {
        let client = self.client().await?;
        let n = client
            .execute(
                &format!(
                    "UPDATE forge_deliveries SET holder = NULL, lease_until = NULL,
                         report_at = {NOW} + $4, updated_at = {NOW},
                         report_failures = report_failures + $5
                     WHERE forge = $1 AND delivery = $2 AND holder = $3 AND report = 'open'"
                ),
                &[
                    &forge,
                    &delivery,
                    &host.as_str(),
                    &duration_ms(after),
                    &i64::from(failed),
                ],
            )
            .await
            .map_err(pg)?;
        Ok(Fenced::one_row(n))
    }

    pub(crate) async fn close_forge_report(
        &self,
        forge: String,
        delivery: String,
        host: HostId,
        reason: String,
    ) -> Result<Fenced> {
        let client = self.client().await?;
        let n = client
            .execute(
                &format!(
                    "UPDATE forge_deliveries SET holder = NULL, lease_until = NULL,
                         report = 'closed', report_reason = $4, updated_at = {NOW}
                     WHERE forge = $1 AND delivery = $2 AND holder = $3 AND report = 'open'"
                ),
                &[&forge, &delivery, &host.as_str(), &reason],
            )
            .await
            .map_err(pg)?;
        Ok(Fenced::one_row(n))
    }

    pub(crate) async fn forge_pull(
        &self,
        forge: String,
        project: String,
        number: i64,
    ) -> Result<Option<ForgePull>> {
        let client = self.client().await?;
        one_opt(
            &client,
            &format!(
                "SELECT {PULL_COLUMNS} FROM forge_pulls
                 WHERE forge = $1 AND project = $2 AND number = $3"
            ),
            &[&forge, &project, &number],
            pull_row,
        )
        .await
    }

    pub(crate) async fn set_forge_pull(
        &self,
        pull: ForgePull,
        expected_head: Option<String>,
    ) -> Result<ForgePull> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg)?;
        let number = pull.number_i64();
        let job = pull.job_id.as_str();
        match &expected_head {
            None => tx
                .execute(
                    &format!(
                        "INSERT INTO forge_pulls (forge, project, number, job_id, branch, head,
                             updated_at)
                         VALUES ($1, $2, $3, $4, $5, $6, {NOW}) ON CONFLICT DO NOTHING"
                    ),
                    &[
                        &pull.forge,
                        &pull.project,
                        &number,
                        &job,
                        &pull.branch,
                        &pull.head,
                    ],
                )
                .await
                .map_err(pg)?,
            Some(old) => tx
                .execute(
                    &format!(
                        "UPDATE forge_pulls SET job_id = $4, head = $5, updated_at = {NOW}
                         WHERE forge = $1 AND project = $2 AND number = $3 AND head = $6
                           AND branch = $7"
                    ),
                    &[
                        &pull.forge,
                        &pull.project,
                        &number,
                        &job,
                        &pull.head,
                        old,
                        &pull.branch,
                    ],
                )
                .await
                .map_err(pg)?,
        };
        let stored = one(
            &tx,
            &format!(
                "SELECT {PULL_COLUMNS} FROM forge_pulls
                 WHERE forge = $1 AND project = $2 AND number = $3"
            ),
            &[&pull.forge, &pull.project, &number],
            pull_row,
        )
        .await?;
        tx.commit().await.map_err(pg)?;
        Ok(stored)
    }
}
