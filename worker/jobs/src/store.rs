//! [`JobStore`]: the one type the service talks to, an enum over the two backends. Argument
//! checks happen here, once, before either backend sees a value.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::access::{
    AuditAct, AuditEntry, NewAuditEntry, Roles, TokenAccess, audit_limit, check_principal,
};
use crate::error::{JobsError, Result};
use crate::evidence::{EvidenceDocument, check_set as check_evidence_set};
use crate::intake::{DeliveryOutcome, DeliveryState, ForgeDelivery, NewForgeDelivery};
use crate::ledger::{SpendToday, UsageDocument, UsageRollupRow, UtcDay, check_range, check_rollup};
use crate::model::{
    Claimed, Fenced, Heartbeat, HostInfo, Job, JobEvent, JobSpec, JobState, MAX_CANDIDATE_BYTES,
    Retry, StoreOptions, check_code, check_message, document_text,
};
use crate::postgres::PgStore;
use crate::report::{ForgeCall, ForgePull};
use crate::review::{
    DecisionRow, MAX_CLAIM_LEASE, PublicationClaim, StoredDecisionRow, TokenHash, TokenInfo,
    TokenName, check_claim_branch, check_publication,
};
use crate::rows::{SpecRow, check_batch};
use crate::sqlite::SqliteStore;
use crate::transition::{FencedWrite, NewJobRow, Transition};
use crate::wake::{Wake, WorkSignal};
use vocab::{AttemptId, HostId, JobId, StoreId};

/// The SQLite file's name inside the state directory when no `--database` is given.
pub const DEFAULT_SQLITE_FILE: &str = state::JOBS_DATABASE.name;

/// Where the jobs live, as parsed from `--database`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseLocation {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL URL or key=value connection string.
    Postgres(String),
}

impl DatabaseLocation {
    /// Parses `--database`: absent or empty means `<state_dir>/jobs.sqlite3`; `sqlite:PATH` or a
    /// plain path is a SQLite file; `postgres://…` / `postgresql://…` is PostgreSQL. Any other
    /// `scheme://` is refused.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_DATABASE_URL` for an unsupported or empty value.
    pub fn parse(database: Option<&str>, state_dir: &Path) -> Result<Self> {
        let Some(text) = database.filter(|t| !t.is_empty()) else {
            return Ok(Self::Sqlite(state_dir.join(DEFAULT_SQLITE_FILE)));
        };
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Self::Postgres(text.to_owned()));
        }
        if let Some(path) = text.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(JobsError::DatabaseUrl {
                    detail: "sqlite: needs a file path".to_owned(),
                });
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if text.contains("://") {
            return Err(JobsError::DatabaseUrl {
                detail: "only sqlite:PATH, a file path or postgres:// URLs are supported"
                    .to_owned(),
            });
        }
        if text.chars().any(char::is_control) {
            return Err(JobsError::DatabaseUrl {
                detail: "the database path contains control characters".to_owned(),
            });
        }
        Ok(Self::Sqlite(PathBuf::from(text)))
    }
}

/// The durable job store. Cheap to clone (the connection or pool is shared).
#[derive(Clone, Debug)]
pub struct JobStore {
    inner: Inner,
    wake: Arc<Wake>,
}

#[derive(Clone, Debug)]
enum Inner {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

macro_rules! dispatch {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match &$self.inner {
            Inner::Sqlite(s) => s.$method($($arg),*).await,
            Inner::Postgres(s) => s.$method($($arg),*).await,
        }
    };
}

/// A claim's digest and lease.
fn check_claim_input(candidate_digest: &str, lease: Duration) -> Result<()> {
    if !vocab::is_typed_sha256(candidate_digest) {
        return Err(JobsError::input(
            "candidate_digest",
            "must be sha256: and 64 lowercase hex digits",
        ));
    }
    if lease.is_zero() || lease > MAX_CLAIM_LEASE {
        return Err(JobsError::input(
            "lease",
            "a publication claim's lease must be over zero and at most a day",
        ));
    }
    Ok(())
}

fn attempts_for(max: usize) -> Result<Vec<AttemptId>> {
    (0..max).map(|_| crate::ids::random_attempt_id()).collect()
}

impl JobStore {
    /// Opens the store named by `--database` (see `DatabaseLocation::parse`) and runs the
    /// versioned migrations.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_DATABASE_URL` for a bad value, `PATCH_CANDIDATE_JOBS_UNAVAILABLE`
    /// when the database cannot be reached, `PATCH_CANDIDATE_JOBS_SCHEMA` when it is newer than
    /// this build.
    ///
    /// # Security
    /// A new SQLite file is created with mode 0600. PostgreSQL is reached without TLS: use a unix
    /// socket or loopback (see docs/SERVICE.md).
    pub async fn open(database: Option<&str>, state_dir: &Path) -> Result<Self> {
        Self::open_with(database, state_dir, &StoreOptions::default()).await
    }

    /// [`JobStore::open`] with explicit tuning.
    ///
    /// # Errors
    /// As [`JobStore::open`].
    pub async fn open_with(
        database: Option<&str>,
        state_dir: &Path,
        options: &StoreOptions,
    ) -> Result<Self> {
        let inner = match DatabaseLocation::parse(database, state_dir)? {
            DatabaseLocation::Sqlite(path) => {
                let busy = options.busy_timeout;
                let store = tokio::task::spawn_blocking(move || SqliteStore::open(&path, busy))
                    .await
                    .map_err(|e| JobsError::Io {
                        what: "open the SQLite database",
                        detail: e.to_string(),
                    })??;
                Inner::Sqlite(store)
            }
            DatabaseLocation::Postgres(url) => Inner::Postgres(PgStore::open(&url, options).await?),
        };
        Ok(Self {
            inner,
            wake: Wake::new(),
        })
    }

    /// A subscription to "work may be available": woken after a submission, a retry, a
    /// requeue, a retrying failure or a rescue — on PostgreSQL from any host (`LISTEN`/`NOTIFY`),
    /// on SQLite from this process's handles. A hint only: a runner still claims on its poll
    /// interval (a snoozed or backing-off job becomes due without a notification).
    #[must_use]
    pub fn work_signal(&self) -> WorkSignal {
        let signal = self.wake.subscribe();
        if let Inner::Postgres(s) = &self.inner {
            self.wake.ensure_listener(s.config());
        }
        signal
    }

    /// After a write that made a job claimable.
    async fn announce(&self) {
        self.wake.bump();
        if let Inner::Postgres(s) = &self.inner {
            s.notify().await;
        }
    }

    /// `"sqlite"` or `"postgres"`: for logs and metrics.
    #[must_use]
    pub fn backend_name(&self) -> &'static str {
        match &self.inner {
            Inner::Sqlite(_) => "sqlite",
            Inner::Postgres(_) => "postgres",
        }
    }

    /// The store's identity: generated once when the database's schema was created, the same
    /// for every handle on the database (on every host), different for every other database.
    /// Read at open. The service labels its turn containers with it, so its janitor only
    /// ever judges the containers of its own store.
    #[must_use]
    pub fn store_id(&self) -> &StoreId {
        match &self.inner {
            Inner::Sqlite(s) => s.store_id(),
            Inner::Postgres(s) => s.store_id(),
        }
    }

    /// The SQLite file, when that is the backend.
    #[must_use]
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Sqlite(s) => Some(s.path()),
            Inner::Postgres(_) => None,
        }
    }

    /// The schema version recorded in the database.
    ///
    /// # Errors
    /// A database error.
    pub async fn schema_version(&self) -> Result<i64> {
        dispatch!(self.schema_version())
    }

    /// Submits a job. A spec whose [`JobSpec::idempotency_key`] is already stored returns the
    /// existing job and `false`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_SPEC` for a malformed spec; database errors.
    pub async fn submit(&self, spec: JobSpec) -> Result<(Job, bool)> {
        spec.validate()?;
        let id = crate::ids::random_job_id()?;
        let (job, created) = dispatch!(self.submit(spec, id))?;
        if created {
            self.announce().await;
        }
        Ok((job, created))
    }

    /// Claims up to `max` queued jobs whose `run_at` has come, oldest first, each with a fresh
    /// random attempt ID and a lease of `lease`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` when `max` is over 1000; database errors.
    pub async fn claim(&self, host: &HostId, max: usize, lease: Duration) -> Result<Vec<Claimed>> {
        let limit = check_batch("max", max)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        let attempts = attempts_for(max)?;
        dispatch!(self.claim(host.clone(), limit, lease, attempts, false))
    }

    /// [`JobStore::claim`], and in the same statement (PostgreSQL) or transaction (SQLite) each
    /// claimed job's spend of the day on the store's clock: the daily totals of its principal
    /// and of its repository ([`JobStore::spend_on`]), in [`Claimed::spend_today`]. A quota check
    /// at claim then needs no further round trip.
    ///
    /// # Errors
    /// As [`JobStore::claim`].
    pub async fn claim_reading_spend(
        &self,
        host: &HostId,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Claimed>> {
        let limit = check_batch("max", max)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        let attempts = attempts_for(max)?;
        dispatch!(self.claim(host.clone(), limit, lease, attempts, true))
    }

    /// Records a forge webhook delivery once: `true` when this call recorded it, `false` when
    /// the delivery id or (for a queued one) its subject was recorded before — the stored row is
    /// returned and nothing changes.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed field or an oversized trigger; database
    /// errors.
    pub async fn record_forge_delivery(
        &self,
        new: NewForgeDelivery,
    ) -> Result<(ForgeDelivery, bool)> {
        let trigger = new.checked()?;
        let (row, created) = dispatch!(self.record_forge_delivery(new, trigger))?;
        if created && row.state == DeliveryState::Queued {
            self.announce().await;
        }
        Ok((row, created))
    }

    /// The recorded delivery, if any.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed key; database errors.
    pub async fn forge_delivery(
        &self,
        forge: &str,
        delivery: &str,
    ) -> Result<Option<ForgeDelivery>> {
        crate::intake::check_key(forge, delivery)?;
        dispatch!(self.forge_delivery(forge.to_owned(), delivery.to_owned()))
    }

    /// Takes the oldest queued delivery no other host holds (or whose holder's lease ran out)
    /// for `lease`, counting the attempt.
    ///
    /// # Errors
    /// Database errors.
    pub async fn claim_forge_delivery(
        &self,
        host: &HostId,
        lease: Duration,
    ) -> Result<Option<ForgeDelivery>> {
        dispatch!(self.claim_forge_delivery(host.clone(), lease))
    }

    /// Pins the base commit of a delivery this host holds: the first pinned one stays and is
    /// returned (`None`: the host no longer holds it).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a commit that is not 40 lower-hex digits; database
    /// errors.
    pub async fn pin_forge_base(
        &self,
        forge: &str,
        delivery: &str,
        host: &HostId,
        commit: &str,
    ) -> Result<Option<String>> {
        crate::intake::check_key(forge, delivery)?;
        if commit.len() != 40 || !commit.bytes().all(vocab::is_lower_hex) {
            return Err(JobsError::input(
                "commit",
                "must be 40 lowercase hex digits",
            ));
        }
        dispatch!(self.pin_forge_base(
            forge.to_owned(),
            delivery.to_owned(),
            host.clone(),
            commit.to_owned()
        ))
    }

    /// Ends a delivery this host holds; `Lost` when it no longer holds it.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed key or code; database errors.
    pub async fn finish_forge_delivery(
        &self,
        forge: &str,
        delivery: &str,
        host: &HostId,
        outcome: DeliveryOutcome,
    ) -> Result<Fenced> {
        crate::intake::check_key(forge, delivery)?;
        outcome.check()?;
        dispatch!(self.finish_forge_delivery(
            forge.to_owned(),
            delivery.to_owned(),
            host.clone(),
            outcome
        ))
    }

    /// Takes the open forge report that is due soonest and no other host holds (or whose
    /// holder's lease ran out) for `lease`. A report this host id holds is taken again at once:
    /// a host works its reports one at a time, so that is a report its previous run left when
    /// it was killed.
    ///
    /// # Errors
    /// Database errors.
    pub async fn claim_forge_report(
        &self,
        host: &HostId,
        lease: Duration,
    ) -> Result<Option<ForgeDelivery>> {
        dispatch!(self.claim_forge_report(host.clone(), lease))
    }

    /// The calls back to the forge recorded for a delivery, oldest first.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed key; database errors.
    pub async fn forge_calls(&self, forge: &str, delivery: &str) -> Result<Vec<ForgeCall>> {
        crate::intake::check_key(forge, delivery)?;
        dispatch!(self.forge_calls(forge.to_owned(), delivery.to_owned()))
    }

    /// Records a call back to the forge once, while this host holds the delivery's report (and
    /// resets its failures in a row): the recorded call (the first record stands), or `None`
    /// when the host no longer holds the report.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed key or call name, or a result over
    /// [`crate::MAX_CALL_RESULT_BYTES`]; database errors.
    pub async fn record_forge_call(
        &self,
        forge: &str,
        delivery: &str,
        host: &HostId,
        call: &str,
        result: &serde_json::Value,
    ) -> Result<Option<ForgeCall>> {
        crate::intake::check_key(forge, delivery)?;
        crate::report::check_call(call)?;
        let result = crate::report::encode_result(result)?;
        dispatch!(self.record_forge_call(
            forge.to_owned(),
            delivery.to_owned(),
            host.clone(),
            call.to_owned(),
            result
        ))
    }

    /// Hands a held report back, due again `after` from now; `failed` counts one more failure
    /// in a row. `Lost` when this host no longer holds it.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed key; database errors.
    pub async fn defer_forge_report(
        &self,
        forge: &str,
        delivery: &str,
        host: &HostId,
        after: Duration,
        failed: bool,
    ) -> Result<Fenced> {
        crate::intake::check_key(forge, delivery)?;
        dispatch!(self.defer_forge_report(
            forge.to_owned(),
            delivery.to_owned(),
            host.clone(),
            after,
            failed
        ))
    }

    /// Closes a held report for good with `reason` (a word or a code). `Lost` when this host no
    /// longer holds it.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed key or reason; database errors.
    pub async fn close_forge_report(
        &self,
        forge: &str,
        delivery: &str,
        host: &HostId,
        reason: &str,
    ) -> Result<Fenced> {
        crate::intake::check_key(forge, delivery)?;
        crate::intake::check_text("reason", reason, 64)?;
        dispatch!(self.close_forge_report(
            forge.to_owned(),
            delivery.to_owned(),
            host.clone(),
            reason.to_owned()
        ))
    }

    /// The pull / merge request `number` of `project` this service opened on `forge`, if any.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed key; database errors.
    pub async fn forge_pull(
        &self,
        forge: &str,
        project: &str,
        number: u64,
    ) -> Result<Option<ForgePull>> {
        crate::intake::check_text("forge", forge, 64)?;
        let number = crate::report::pull_number(number)?;
        dispatch!(self.forge_pull(forge.to_owned(), project.to_owned(), number))
    }

    /// Records a pull request (`expected_head == None`: once, the first record stands) or moves
    /// its head and job from `expected_head` (compare and set on the same branch). Returns the
    /// row as stored: the caller compares it with what it asked for.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for malformed fields; database errors (a pull request not
    /// recorded before, for a move).
    pub async fn set_forge_pull(
        &self,
        pull: &ForgePull,
        expected_head: Option<&str>,
    ) -> Result<ForgePull> {
        pull.check()?;
        if let Some(old) = expected_head {
            crate::report::check_commit("expected_head", old)?;
        }
        dispatch!(self.set_forge_pull(pull.clone(), expected_head.map(str::to_owned)))
    }

    /// Renews the lease of a running attempt. `Lost` means the attempt is no longer current.
    ///
    /// # Errors
    /// Database errors (the lease is then neither renewed nor known to be lost).
    pub async fn heartbeat(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        lease: Duration,
    ) -> Result<Heartbeat> {
        dispatch!(self.heartbeat(id.clone(), attempt.clone(), lease))
    }

    /// Records the result: the candidate, the attempt's usage row and the `completed` state in
    /// one transaction, guarded by `id + attempt + state='running'`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed digest, an oversized candidate or usage;
    /// database errors (nothing is written then).
    pub async fn complete(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        candidate: Vec<u8>,
        candidate_digest: &str,
        usage: &serde_json::Value,
    ) -> Result<Fenced> {
        self.complete_with_evidence(id, attempt, candidate, candidate_digest, usage, Vec::new())
            .await
    }

    /// [`JobStore::complete`] with the candidate's gate evidence: the candidate, one document
    /// per gate, the usage row and the `completed` state in one transaction, so a result is
    /// never stored without its evidence, nor twice.
    ///
    /// # Errors
    /// As [`JobStore::complete`], and `PATCH_CANDIDATE_JOBS_INPUT` for more than 64 documents
    /// or two for one gate.
    pub async fn complete_with_evidence(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        candidate: Vec<u8>,
        candidate_digest: &str,
        usage: &serde_json::Value,
        evidence: Vec<EvidenceDocument>,
    ) -> Result<Fenced> {
        self.complete_and_follow_up(
            id,
            attempt,
            (candidate, candidate_digest),
            usage,
            evidence,
            None,
        )
        .await
    }

    /// [`JobStore::complete_with_evidence`] that also queues `follow_up` (an automatic
    /// follow-up of this job's candidate) in the same transaction: the result and the follow-up
    /// are stored together or not at all, and a follow-up whose idempotency key exists is not
    /// queued twice. Returns the fenced outcome; the follow-up's job is found by its key.
    ///
    /// # Errors
    /// As [`JobStore::complete_with_evidence`], and the spec's `PATCH_CANDIDATE_JOBS_SPEC` when
    /// `follow_up` is malformed or is not a follow-up of `id`.
    pub async fn complete_and_follow_up(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        (candidate, candidate_digest): (Vec<u8>, &str),
        usage: &serde_json::Value,
        evidence: Vec<EvidenceDocument>,
        follow_up: Option<JobSpec>,
    ) -> Result<Fenced> {
        let follow_up = match follow_up {
            None => None,
            Some(spec) => {
                spec.validate()?;
                let supersedes = spec.follow_up.as_ref().is_some_and(|f| {
                    f.supersedes_job == *id && f.supersedes_candidate == candidate_digest
                });
                if !supersedes {
                    return Err(JobsError::spec(
                        "follow_up",
                        "must supersede this job's candidate",
                    ));
                }
                Some(NewJobRow {
                    id: crate::ids::random_job_id()?.to_string(),
                    kind: spec.kind.as_str(),
                    key: spec.idempotency_key(),
                    spec_json: SpecRow::text(&spec)?,
                    max_attempts: i64::from(spec.max_attempts),
                    approval_json: spec.approval_json,
                })
            }
        };
        check_evidence_set(&evidence)?;
        if !vocab::is_typed_sha256(candidate_digest) {
            return Err(JobsError::input(
                "candidate_digest",
                "must be sha256: and 64 lowercase hex digits",
            ));
        }
        if candidate.len() > MAX_CANDIDATE_BYTES {
            return Err(JobsError::input("candidate", "larger than 64 MiB"));
        }
        let usage = UsageDocument::new(usage)?;
        self.transition(
            id,
            attempt,
            Transition::Complete {
                candidate,
                digest: candidate_digest.to_owned(),
                usage,
                evidence,
                follow_up,
            },
        )
        .await
    }

    /// Records a failure: `Retry::Never` dead-letters the job (`failed`); `Retry::After` queues
    /// it again after the delay with the attempt spent (`failed` once none is left). A job whose
    /// cancellation was requested becomes `cancelled` either way. `usage`, when given, is the
    /// attempt's usage row, written in the same transaction (an attempt that ran).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed code or message or oversized usage; database
    /// errors (nothing is written then).
    pub async fn fail(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        code: &str,
        message: &str,
        retry: Retry,
        usage: Option<&serde_json::Value>,
    ) -> Result<Fenced> {
        check_code(code)?;
        check_message(message)?;
        let usage = usage.map(UsageDocument::new).transpose()?;
        self.transition(
            id,
            attempt,
            Transition::Fail {
                code: code.to_owned(),
                message: message.to_owned(),
                retry,
                usage,
            },
        )
        .await
    }

    /// Queues the job again after `delay` without spending the attempt (this host lacks the
    /// approved image or the repository); `code` says why.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed code; database errors.
    pub async fn snooze(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        delay: Duration,
        code: &str,
    ) -> Result<Fenced> {
        check_code(code)?;
        self.transition(
            id,
            attempt,
            Transition::Snooze {
                delay,
                code: code.to_owned(),
            },
        )
        .await
    }

    /// Drain: queues the job again now without spending the attempt. `usage`, when given, is the
    /// attempt's usage row (it ran until the drain stopped it), written in the same transaction.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for oversized usage; database errors.
    pub async fn release(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        usage: Option<&serde_json::Value>,
    ) -> Result<Fenced> {
        self.usage_transition(id, attempt, usage, |usage| Transition::Release { usage })
            .await
    }

    /// Stops a running attempt whose cancellation was requested: `cancelled`, guarded like every
    /// attempt write. `usage`, when given, is the attempt's usage row, written in the same
    /// transaction.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for oversized usage; database errors.
    pub async fn finish_cancelled(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        usage: Option<&serde_json::Value>,
    ) -> Result<Fenced> {
        self.usage_transition(id, attempt, usage, |usage| Transition::Cancelled { usage })
            .await
    }

    /// A transition whose only argument is the attempt's usage row, when given.
    async fn usage_transition(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        usage: Option<&serde_json::Value>,
        transition: fn(Option<UsageDocument>) -> Transition,
    ) -> Result<Fenced> {
        let usage = usage.map(UsageDocument::new).transpose()?;
        self.transition(id, attempt, transition(usage)).await
    }

    /// Performs a transition of a running attempt: the backend's one fenced write, then a
    /// wake-up when the job may be claimable again.
    async fn transition(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        transition: Transition,
    ) -> Result<Fenced> {
        let write = FencedWrite::from(transition);
        let may_queue = write.target.may_queue() || write.follow_up.is_some();
        let fenced = dispatch!(self.fenced_write(id.clone(), attempt.clone(), write))?;
        if fenced == Fenced::Applied && may_queue {
            self.announce().await;
        }
        Ok(fenced)
    }

    /// Records the usage of an attempt out of band (not fenced: prefer the `usage` argument of
    /// the outcome writes, which lands only for the current attempt). One row per
    /// `(job, attempt)`: recording again replaces it.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_NOT_FOUND` for an unknown job; input and database errors.
    pub async fn record_usage(
        &self,
        id: &JobId,
        attempt: &AttemptId,
        usage: &serde_json::Value,
    ) -> Result<()> {
        let usage = UsageDocument::new(usage)?;
        dispatch!(self.record_usage(id.clone(), attempt.clone(), usage))
    }

    /// The usage rows of a job, one per attempt, as compact JSON text.
    ///
    /// # Errors
    /// Database errors.
    pub async fn usage(&self, id: &JobId) -> Result<Vec<(AttemptId, String)>> {
        dispatch!(self.usage(id.clone()))
    }

    /// The spend ledger of `day`: the sums of the usage rows of `principal`'s jobs and of
    /// `repository`'s jobs recorded that day (UTC), for a quota check at submission and at
    /// claim. One statement, one round trip, read from the `(principal, day)` and
    /// `(repository, day)` indexes. A principal or repository with no rows spends zero.
    ///
    /// # Errors
    /// Database errors.
    pub async fn spend_on(
        &self,
        day: UtcDay,
        principal: &str,
        repository: &str,
    ) -> Result<SpendToday> {
        dispatch!(self.spend_on(day, principal.to_owned(), repository.to_owned()))
    }

    /// The usage report: the ledger's rows from `from` through `to` (UTC days, both included)
    /// grouped by day, principal and repository, ordered by day, then principal and repository
    /// (bytewise); only `principal`'s rows when given.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_DAY` when `to` is before `from`;
    /// `PATCH_CANDIDATE_JOBS_ROLLUP_LIMIT` when there are more than
    /// [`crate::MAX_USAGE_ROLLUP_ROWS`] groups (nothing is returned then: ask for fewer days or
    /// one principal); database errors.
    pub async fn usage_rollup(
        &self,
        from: UtcDay,
        to: UtcDay,
        principal: Option<&str>,
    ) -> Result<Vec<UsageRollupRow>> {
        check_range(from, to)?;
        let rows = dispatch!(self.usage_rollup(from, to, principal.map(str::to_owned)))?;
        check_rollup(rows)
    }

    /// Returns every expired lease to the queue in one guarded statement (attempt spent;
    /// `failed` when none is left, `cancelled` when a cancellation was requested). Safe to run on
    /// every host at once. Uses the database clock on PostgreSQL, the host clock on SQLite.
    ///
    /// # Errors
    /// Database errors.
    pub async fn rescue_expired(&self) -> Result<u64> {
        let rescued = dispatch!(self.rescue_expired())?;
        if rescued > 0 {
            self.announce().await;
        }
        Ok(rescued)
    }

    /// Cancels a job: a queued one at once, a running one through its next heartbeat
    /// (`cancel_requested`); a terminal one is returned unchanged.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_NOT_FOUND`; database errors.
    pub async fn cancel(&self, id: &JobId) -> Result<Job> {
        dispatch!(self.cancel(id.clone()))
    }

    /// Queues a failed or cancelled job again, allowing one more attempt. A queued or running job
    /// is returned unchanged.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_NOT_FOUND`; `PATCH_CANDIDATE_JOBS_STATE` for a completed job;
    /// database errors.
    pub async fn retry(&self, id: &JobId) -> Result<Job> {
        let job = dispatch!(self.retry(id.clone()))?;
        if job.state == JobState::Completed {
            return Err(JobsError::State {
                id: id.to_string(),
                state: job.state.as_str(),
                detail: "a completed job keeps its result; submit a new job instead",
            });
        }
        if job.state == JobState::Queued {
            self.announce().await;
        }
        Ok(job)
    }

    /// One job, with its approval bytes.
    ///
    /// # Errors
    /// Database errors.
    pub async fn get(&self, id: &JobId) -> Result<Option<Job>> {
        dispatch!(self.get(id.clone()))
    }

    /// The newest `limit` jobs (at most 1000), optionally in one state; approval bytes left out.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` when `limit` is over 1000; database errors.
    pub async fn list(&self, state: Option<JobState>, limit: usize) -> Result<Vec<Job>> {
        let limit = check_batch("limit", limit)?;
        dispatch!(self.list(state, limit))
    }

    /// The jobs that continue job `id`'s candidate (its automatic follow-ups and the follow-ups
    /// its reviewers' retries queued), oldest first, approval bytes left out; at most
    /// `MAX_FOLLOW_UPS_LISTED` (256). Served by an index on the spec's `follow_up.supersedes_job`.
    ///
    /// # Errors
    /// Database errors.
    pub async fn follow_ups_of(&self, id: &JobId) -> Result<Vec<Job>> {
        dispatch!(self.follow_ups_of(id.clone()))
    }

    /// The later attempt that continues job `id`'s candidate: the newest of
    /// [`JobStore::follow_ups_of`] that has not failed or been cancelled. A follow-up that
    /// failed leaves its parent the last candidate of the chain.
    ///
    /// # Errors
    /// Database errors.
    pub async fn later_attempt(&self, id: &JobId) -> Result<Option<Job>> {
        Ok(self
            .follow_ups_of(id)
            .await?
            .into_iter()
            .rev()
            .find(|j| !matches!(j.state, JobState::Failed | JobState::Cancelled)))
    }

    /// The stored candidate of a completed job.
    ///
    /// # Errors
    /// Database errors.
    pub async fn candidate(&self, id: &JobId) -> Result<Option<Vec<u8>>> {
        dispatch!(self.candidate(id.clone()))
    }

    /// The gate evidence stored with a completed job's candidate, by gate name.
    ///
    /// # Errors
    /// Database errors; `PATCH_CANDIDATE_JOBS_CORRUPT` for a row that fails its checks.
    pub async fn evidence(&self, id: &JobId) -> Result<Vec<EvidenceDocument>> {
        dispatch!(self.evidence(id.clone()))
    }

    /// The job's log, oldest first.
    ///
    /// # Errors
    /// Database errors.
    pub async fn events(&self, id: &JobId) -> Result<Vec<JobEvent>> {
        dispatch!(self.events(id.clone()))
    }

    /// Appends a line to the job's log: a stable code and a short message (never source text).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT`, `PATCH_CANDIDATE_JOBS_NOT_FOUND`; database errors.
    pub async fn append_event(
        &self,
        id: &JobId,
        attempt: Option<&AttemptId>,
        code: &str,
        message: &str,
    ) -> Result<()> {
        check_code(code)?;
        check_message(message)?;
        dispatch!(self.append_event(
            id.clone(),
            attempt.cloned(),
            code.to_owned(),
            message.to_owned()
        ))
    }

    /// Registers (or re-registers, at start-up) a worker host.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for oversized metadata; database errors.
    pub async fn register_host(
        &self,
        host: &HostId,
        max_turns: u32,
        meta: &serde_json::Value,
    ) -> Result<()> {
        let meta = document_text("meta", meta)?;
        dispatch!(self.register_host(host.clone(), max_turns, meta))
    }

    /// Marks a host as seen now; false when it is not registered.
    ///
    /// # Errors
    /// Database errors.
    pub async fn host_heartbeat(&self, host: &HostId) -> Result<bool> {
        dispatch!(self.host_heartbeat(host.clone()))
    }

    /// Every registered host.
    ///
    /// # Errors
    /// Database errors.
    pub async fn hosts(&self) -> Result<Vec<HostInfo>> {
        dispatch!(self.hosts())
    }

    /// The attempts that are current (every running job's), on every host: the janitor keeps
    /// exactly these containers.
    ///
    /// # Errors
    /// Database errors.
    pub async fn current_attempts(&self) -> Result<Vec<(JobId, AttemptId)>> {
        dispatch!(self.current_attempts())
    }

    /// Appends a review decision to a completed job's history, in one transaction that checks
    /// the job is completed, its candidate is the one the decision names and it is not
    /// published; returns the decision's sequence number (1, 2, …). `follow_up` is the job a
    /// retry queued. A decision recorded while a publish holds the claim is taken: it is what
    /// that publish's record is checked against. The same transaction audits it
    /// (`review_accept`, `review_forced_accept`, `review_reject`, `review_retry` by the
    /// decision's actor, with the digest and the sequence number).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_NOT_FOUND`; `PATCH_CANDIDATE_JOBS_STATE` for a job that is not
    /// completed or holds another candidate; `PATCH_CANDIDATE_JOBS_PUBLISHED` once the
    /// publication is recorded; database errors.
    pub async fn record_decision(
        &self,
        id: &JobId,
        row: DecisionRow,
        follow_up: Option<&JobId>,
    ) -> Result<i64> {
        dispatch!(self.record_decision(id.clone(), row, follow_up.cloned()))
    }

    /// A job's review decisions, oldest first.
    ///
    /// # Errors
    /// Database errors; `PATCH_CANDIDATE_JOBS_CORRUPT` for a row that fails its checks.
    pub async fn decisions(&self, id: &JobId) -> Result<Vec<StoredDecisionRow>> {
        dispatch!(self.decisions(id.clone()))
    }

    /// Takes the publication claim of job `id`'s candidate for `holder`, which will create
    /// `branch`: in one transaction (the job's row locked on PostgreSQL, the write lock taken on
    /// SQLite, the same order as every decision), checks the job is completed with
    /// `candidate_digest`, not published, its last decision `accept` of that digest, and that no
    /// other claim of the job is live (its lease not run out); then writes the claim with a fresh
    /// token and a lease of `lease`. A publish holds one claim from before anything is built
    /// until its outcome is recorded or it gives up ([`JobStore::release_publication_claim`]);
    /// the lease covers a host that died meanwhile.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_PUBLISHING` (another live claim: its host and branch),
    /// `…_PUBLISHED`, `…_NOT_ACCEPTED`, `…_NOT_FOUND`, `…_STATE` (not completed or another
    /// digest), `…_INPUT` (digest, branch, a lease of zero or over a day); database errors.
    pub async fn claim_publication(
        &self,
        id: &JobId,
        candidate_digest: &str,
        holder: &HostId,
        branch: &str,
        lease: Duration,
    ) -> Result<PublicationClaim> {
        check_claim_input(candidate_digest, lease)?;
        check_claim_branch(branch)?;
        let claim = PublicationClaim::new(
            id.clone(),
            candidate_digest.to_owned(),
            holder.clone(),
            branch.to_owned(),
        )?;
        dispatch!(self.claim_publication(claim, lease))
    }

    /// Renews a held claim's lease to `lease` from now, in one transaction that also checks it
    /// is still the job's claim and the last decision still accepts its digest: a publish calls
    /// it on a timer while it runs, and once more right before it pushes, so a `reject` recorded
    /// while the commit was built (or the gates re-ran) stops the push.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_CLAIM_LOST`, `…_PUBLISHED`, `…_NOT_ACCEPTED`, `…_INPUT` (lease);
    /// database errors. Nothing is written on an error.
    pub async fn renew_publication_claim(
        &self,
        claim: &PublicationClaim,
        lease: Duration,
    ) -> Result<()> {
        check_claim_input(claim.candidate_digest(), lease)?;
        dispatch!(self.renew_publication_claim(claim.clone(), lease))
    }

    /// Gives a claim up (a publish that failed or stopped before recording); `false` when it was
    /// no longer held.
    ///
    /// # Errors
    /// Database errors.
    pub async fn release_publication_claim(&self, claim: &PublicationClaim) -> Result<bool> {
        dispatch!(self.release_publication_claim(claim.clone()))
    }

    /// Records the publication of the claim's job (the push's outcome: the publisher's record, a
    /// JSON object) on behalf of principal `by`, once, audits it (`published`) and releases the
    /// claim, in one transaction that checks the job is not
    /// published, `claim` is still its claim (a lease that ran out and was taken over is lost),
    /// and the last decision still accepts the claim's digest (a `reject` or `retry` recorded
    /// while the push ran wins: nothing is recorded).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_PUBLISHED` (another publish recorded first), `…_CLAIM_LOST`,
    /// `…_NOT_ACCEPTED`, `…_STATE`, `…_INPUT` (the record); database errors. Nothing is written
    /// on an error; the claim stays held until released or its lease runs out.
    pub async fn record_publication(
        &self,
        claim: &PublicationClaim,
        by: &str,
        record: Vec<u8>,
    ) -> Result<()> {
        check_publication(&record)?;
        let act = NewAuditEntry::new(
            by,
            AuditAct::Published,
            claim.job_id().as_str(),
            format!("{} branch {}", claim.candidate_digest(), claim.branch()),
        )?;
        dispatch!(self.record_publication(claim.clone(), record, act))
    }

    /// The publication record of a job's candidate.
    ///
    /// # Errors
    /// Database errors.
    pub async fn publication(&self, id: &JobId) -> Result<Option<Vec<u8>>> {
        dispatch!(self.publication(id.clone()))
    }

    /// Stores a named API token by its hash (the token itself is never given to the store)
    /// with its roles, and audits it (`token_created`, by principal `by`), in one transaction.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_CONFLICT` when the name was ever used; `PATCH_CANDIDATE_JOBS_INPUT`
    /// for a malformed `by`; database errors.
    pub async fn create_token(
        &self,
        name: &TokenName,
        hash: &TokenHash,
        roles: Roles,
        by: &str,
    ) -> Result<()> {
        let act = NewAuditEntry::new(
            by,
            AuditAct::TokenCreated,
            name.as_str(),
            format!("roles {roles}"),
        )?;
        dispatch!(self.create_token(name.clone(), hash.clone(), roles, act))
    }

    /// Every named token, by name (names, roles and times only).
    ///
    /// # Errors
    /// Database errors; `PATCH_CANDIDATE_JOBS_CORRUPT` for stored roles that fail their check.
    pub async fn tokens(&self) -> Result<Vec<TokenInfo>> {
        dispatch!(self.tokens())
    }

    /// Revokes a named token and audits it (`token_revoked`, by `by`) in one transaction; false
    /// (and nothing audited) when no live token has the name.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed `by`; database errors.
    pub async fn revoke_token(&self, name: &TokenName, by: &str) -> Result<bool> {
        let act = NewAuditEntry::new(by, AuditAct::TokenRevoked, name.as_str(), String::new())?;
        dispatch!(self.revoke_token(name.clone(), act))
    }

    /// Sets a live named token's roles (which also ends its `roles_migrated` mark) and audits it
    /// (`token_roles`, by `by`, naming the new and the previous roles) in one transaction;
    /// returns the previous roles, `None` (nothing written) when no live token has the name.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed `by`; database errors.
    pub async fn set_token_roles(
        &self,
        name: &TokenName,
        roles: Roles,
        by: &str,
    ) -> Result<Option<Roles>> {
        check_principal("principal", by)?;
        dispatch!(self.set_token_roles(name.clone(), roles, by.to_owned()))
    }

    /// The principal (name) and roles of the live token with this hash.
    ///
    /// # Errors
    /// Database errors; `PATCH_CANDIDATE_JOBS_CORRUPT` for stored roles that fail their check.
    pub async fn token_access(&self, hash: &TokenHash) -> Result<Option<TokenAccess>> {
        dispatch!(self.token_access(hash.clone()))
    }

    /// The audit trail after entry `after` (0: from the start), oldest first, at most `limit`
    /// entries (1 to [`crate::MAX_AUDIT_LIST`]); page on with the last entry's `seq`.
    ///
    /// # Errors
    /// Database errors; `PATCH_CANDIDATE_JOBS_CORRUPT` for a row that fails its checks.
    pub async fn audit(&self, after: i64, limit: usize) -> Result<Vec<AuditEntry>> {
        dispatch!(self.audit(after, audit_limit(limit)))
    }

    /// Audits the operator's repository policy loaded by host `host` (at start-up or on
    /// SIGHUP): act `policy_loaded`, the policy's digest as the subject.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for a malformed host or digest; database errors.
    pub async fn audit_policy_loaded(&self, host: &str, digest: &str) -> Result<()> {
        let act = NewAuditEntry::new(
            host,
            AuditAct::PolicyLoaded,
            digest,
            "repository policy loaded".to_owned(),
        )?;
        dispatch!(self.append_audit(act))
    }

    /// The latest `limit` audit entries about `subject` (a job id or a token name), oldest
    /// first.
    ///
    /// # Errors
    /// Database errors; `PATCH_CANDIDATE_JOBS_CORRUPT` for a row that fails its checks.
    pub async fn audit_of(&self, subject: &str, limit: usize) -> Result<Vec<AuditEntry>> {
        dispatch!(self.audit_of(subject.to_owned(), audit_limit(limit)))
    }
}
