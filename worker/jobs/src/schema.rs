//! Versioned schema migrations. Each backend applies, in one transaction at open, every
//! migration above the version recorded in `schema_migrations`; a database whose version is
//! newer than [`SCHEMA_VERSION`] is refused. Migrations are append-only: a released one never
//! changes, a change is a new version.
//!
//! The store's identity ([`vocab::StoreId`]) lives in the one-row table `store_identity`
//! (version 2). Its row is written in the same locked transaction as the migrations, by
//! `INSERT … ON CONFLICT DO NOTHING`, then read back: every handle on one database, from any
//! host, sees the one id that the first open wrote.
//!
//! Version 5 adds `publication_claims` (one live publish per job, across hosts) and a trigger
//! that refuses a decision on a published job in the database itself; a version-4 database
//! keeps every row.
//!
//! Version 6 indexes each job by the job whose candidate it continues (the spec's
//! `follow_up.supersedes_job`), so a review finds the later attempts of a chain without a scan;
//! it adds no column and keeps every row.
//!
//! Version 7 gives every named token its roles (`api_tokens.roles`, the canonical list; the
//! tokens of an older database get every role and `roles_migrated`) and adds the append-only
//! `audit` table; it keeps every row.
//!
//! Version 8 makes the `usage` table the spend ledger: typed columns next to `usage_json` — the
//! job's `principal` (`''` when unknown) and `repository`, the UTC `day` of `recorded_at`
//! (milliseconds) and the live turn's `requests`, `input_tokens`, `output_tokens` and
//! `total_tokens` (0 for an offline turn) — backfilled from each row's job and document, and the
//! indexes of the two quota lookups, `(principal, day)` and `(repository, day)`, which also hold
//! the counts (a lookup reads the index alone). See `crate::ledger`.
//!
//! Version 10 adds `forge_deliveries`: every accepted forge webhook delivery once, by the
//! forge's delivery id and, for one that starts a job, by its subject; and the small queue of
//! those deliveries that hosts work off (see `crate::intake`). It keeps every row.
//!
//! Version 11 adds the report back to the forge of a submitted delivery (`crate::report`): on
//! `forge_deliveries` whether its report is `open` or `closed`, when it is looked at next, its
//! failures in a row and why it closed; `forge_calls`, each call back to the forge recorded once
//! with what the forge answered; and `forge_pulls`, the pull / merge requests this service
//! opened, each with the job and commit its branch holds now. Deliveries submitted before keep
//! no report (`report` stays NULL). It keeps every row.

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 11;

/// The schema version recorded (0 before the first migration).
pub(crate) const SELECT_VERSION: &str = "SELECT COALESCE(MAX(version), 0) FROM schema_migrations";
/// Reads the store id.
pub(crate) const SELECT_STORE_ID: &str = "SELECT store_id FROM store_identity WHERE singleton = 1";

/// The stored store id, checked: anything but 32 lowercase hex is a corrupt database.
pub(crate) fn stored_store_id(text: &str) -> crate::Result<vocab::StoreId> {
    vocab::StoreId::parse(text).map_err(|_| crate::JobsError::Corrupt { field: "store_id" })
}

/// One migration: its version, a name, and the SQL per backend.
pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "jobs, candidates, usage, events, hosts",
        sqlite: r"
CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,
    seq              INTEGER NOT NULL UNIQUE,
    kind             TEXT NOT NULL CHECK (kind IN ('turn', 'noop')),
    state            TEXT NOT NULL
                     CHECK (state IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    idempotency_key  TEXT NOT NULL UNIQUE,
    spec_json        TEXT NOT NULL,
    approval_json    BLOB NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    run_at           INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    attempt_id       TEXT,
    host_id          TEXT,
    lease_until      INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    error_code       TEXT,
    error_message    TEXT,
    candidate_digest TEXT,
    CHECK (state <> 'running' OR (attempt_id IS NOT NULL AND lease_until IS NOT NULL))
);
CREATE INDEX jobs_queue ON jobs (run_at, seq) WHERE state = 'queued';
CREATE INDEX jobs_leases ON jobs (lease_until) WHERE state = 'running';
CREATE INDEX jobs_by_state ON jobs (state, seq);
CREATE TABLE candidates (
    job_id     TEXT PRIMARY KEY REFERENCES jobs (id),
    attempt_id TEXT NOT NULL,
    digest     TEXT NOT NULL,
    bytes      BLOB NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE usage (
    job_id      TEXT NOT NULL REFERENCES jobs (id),
    attempt_id  TEXT NOT NULL,
    usage_json  TEXT NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt_id)
);
CREATE TABLE events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id     TEXT NOT NULL REFERENCES jobs (id),
    attempt_id TEXT,
    at         INTEGER NOT NULL,
    code       TEXT NOT NULL,
    message    TEXT NOT NULL
);
CREATE INDEX events_by_job ON events (job_id, seq);
CREATE TABLE hosts (
    host_id    TEXT PRIMARY KEY,
    max_turns  INTEGER NOT NULL,
    meta_json  TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL
);
",
        postgres: r"
CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,
    seq              BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    kind             TEXT NOT NULL CHECK (kind IN ('turn', 'noop')),
    state            TEXT NOT NULL
                     CHECK (state IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    idempotency_key  TEXT NOT NULL UNIQUE,
    spec_json        TEXT NOT NULL,
    approval_json    BYTEA NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     BIGINT NOT NULL CHECK (max_attempts >= 1),
    run_at           BIGINT NOT NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    attempt_id       TEXT,
    host_id          TEXT,
    lease_until      BIGINT,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    error_code       TEXT,
    error_message    TEXT,
    candidate_digest TEXT,
    CHECK (state <> 'running' OR (attempt_id IS NOT NULL AND lease_until IS NOT NULL))
);
CREATE INDEX jobs_queue ON jobs (run_at, seq) WHERE state = 'queued';
CREATE INDEX jobs_leases ON jobs (lease_until) WHERE state = 'running';
CREATE INDEX jobs_by_state ON jobs (state, seq);
CREATE TABLE candidates (
    job_id     TEXT PRIMARY KEY REFERENCES jobs (id),
    attempt_id TEXT NOT NULL,
    digest     TEXT NOT NULL,
    bytes      BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE usage (
    job_id      TEXT NOT NULL REFERENCES jobs (id),
    attempt_id  TEXT NOT NULL,
    usage_json  TEXT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, attempt_id)
);
CREATE TABLE events (
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     TEXT NOT NULL REFERENCES jobs (id),
    attempt_id TEXT,
    at         BIGINT NOT NULL,
    code       TEXT NOT NULL,
    message    TEXT NOT NULL
);
CREATE INDEX events_by_job ON events (job_id, seq);
CREATE TABLE hosts (
    host_id    TEXT PRIMARY KEY,
    max_turns  BIGINT NOT NULL,
    meta_json  TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL
);
",
    },
    Migration {
        version: 2,
        name: "store identity",
        sqlite: r"
CREATE TABLE store_identity (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    store_id  TEXT NOT NULL
);
",
        postgres: r"
CREATE TABLE store_identity (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    store_id  TEXT NOT NULL
);
",
    },
    Migration {
        version: 3,
        name: "gate evidence",
        sqlite: r"
CREATE TABLE gate_evidence (
    job_id     TEXT NOT NULL REFERENCES jobs (id),
    attempt_id TEXT NOT NULL,
    gate       TEXT NOT NULL,
    outcome    TEXT NOT NULL
               CHECK (outcome IN ('passed', 'failed', 'timed_out', 'policy_refused', 'error')),
    digest     TEXT NOT NULL,
    wall_ms    INTEGER NOT NULL CHECK (wall_ms >= 0),
    bytes      BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, gate)
);
",
        postgres: r"
CREATE TABLE gate_evidence (
    job_id     TEXT NOT NULL REFERENCES jobs (id),
    attempt_id TEXT NOT NULL,
    gate       TEXT NOT NULL,
    outcome    TEXT NOT NULL
               CHECK (outcome IN ('passed', 'failed', 'timed_out', 'policy_refused', 'error')),
    digest     TEXT NOT NULL,
    wall_ms    BIGINT NOT NULL CHECK (wall_ms >= 0),
    bytes      BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, gate)
);
",
    },
    Migration {
        version: 4,
        name: "review decisions, publications, api tokens",
        sqlite: r"
CREATE TABLE review_decisions (
    job_id           TEXT NOT NULL REFERENCES jobs (id),
    seq              INTEGER NOT NULL CHECK (seq >= 1),
    candidate_digest TEXT NOT NULL,
    decision         TEXT NOT NULL CHECK (decision IN ('accept', 'reject', 'retry')),
    actor            TEXT NOT NULL,
    forced           INTEGER NOT NULL CHECK (forced IN (0, 1)),
    at_ms            INTEGER NOT NULL,
    record           BLOB NOT NULL,
    follow_up_job_id TEXT REFERENCES jobs (id),
    PRIMARY KEY (job_id, seq)
);
CREATE INDEX review_decisions_by_candidate ON review_decisions (candidate_digest, seq);
CREATE TRIGGER review_decisions_no_update BEFORE UPDATE ON review_decisions
BEGIN SELECT RAISE(ABORT, 'review decisions are append-only'); END;
CREATE TRIGGER review_decisions_no_delete BEFORE DELETE ON review_decisions
BEGIN SELECT RAISE(ABORT, 'review decisions are append-only'); END;
CREATE TABLE publications (
    job_id           TEXT PRIMARY KEY REFERENCES jobs (id),
    candidate_digest TEXT NOT NULL,
    record           BLOB NOT NULL,
    created_at       INTEGER NOT NULL
);
CREATE TABLE api_tokens (
    name         TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);
",
        postgres: r"
CREATE TABLE review_decisions (
    job_id           TEXT NOT NULL REFERENCES jobs (id),
    seq              BIGINT NOT NULL CHECK (seq >= 1),
    candidate_digest TEXT NOT NULL,
    decision         TEXT NOT NULL CHECK (decision IN ('accept', 'reject', 'retry')),
    actor            TEXT NOT NULL,
    forced           BOOLEAN NOT NULL,
    at_ms            BIGINT NOT NULL,
    record           BYTEA NOT NULL,
    follow_up_job_id TEXT REFERENCES jobs (id),
    PRIMARY KEY (job_id, seq)
);
CREATE INDEX review_decisions_by_candidate ON review_decisions (candidate_digest, seq);
CREATE FUNCTION review_decisions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'review decisions are append-only'; END $$;
CREATE TRIGGER review_decisions_append_only BEFORE UPDATE OR DELETE ON review_decisions
FOR EACH ROW EXECUTE FUNCTION review_decisions_append_only();
CREATE TABLE publications (
    job_id           TEXT PRIMARY KEY REFERENCES jobs (id),
    candidate_digest TEXT NOT NULL,
    record           BYTEA NOT NULL,
    created_at       BIGINT NOT NULL
);
CREATE TABLE api_tokens (
    name         TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   BIGINT NOT NULL,
    revoked_at   BIGINT
);
",
    },
    Migration {
        version: 5,
        name: "publication claims; no decision after a publication",
        sqlite: r"
CREATE TABLE publication_claims (
    job_id           TEXT PRIMARY KEY REFERENCES jobs (id),
    candidate_digest TEXT NOT NULL,
    claim_token      TEXT NOT NULL,
    holder           TEXT NOT NULL,
    branch           TEXT NOT NULL,
    claimed_at       INTEGER NOT NULL,
    lease_until      INTEGER NOT NULL
);
CREATE TRIGGER review_decisions_closed_by_publication BEFORE INSERT ON review_decisions
WHEN EXISTS (SELECT 1 FROM publications WHERE job_id = NEW.job_id)
BEGIN SELECT RAISE(ABORT, 'the candidate is published'); END;
",
        postgres: r"
CREATE TABLE publication_claims (
    job_id           TEXT PRIMARY KEY REFERENCES jobs (id),
    candidate_digest TEXT NOT NULL,
    claim_token      TEXT NOT NULL,
    holder           TEXT NOT NULL,
    branch           TEXT NOT NULL,
    claimed_at       BIGINT NOT NULL,
    lease_until      BIGINT NOT NULL
);
CREATE FUNCTION review_decisions_closed_by_publication() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM publications WHERE job_id = NEW.job_id) THEN
        RAISE EXCEPTION 'the candidate is published';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER review_decisions_closed_by_publication BEFORE INSERT ON review_decisions
FOR EACH ROW EXECUTE FUNCTION review_decisions_closed_by_publication();
",
    },
    Migration {
        version: 6,
        name: "jobs by the job they continue",
        sqlite: r"
CREATE INDEX jobs_by_parent ON jobs (json_extract(spec_json, '$.follow_up.supersedes_job'));
",
        postgres: r"
CREATE INDEX jobs_by_parent ON jobs (((spec_json::jsonb) -> 'follow_up' ->> 'supersedes_job'));
",
    },
    Migration {
        version: 7,
        name: "token roles, audit trail",
        sqlite: r"
ALTER TABLE api_tokens ADD COLUMN roles TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN roles_migrated INTEGER NOT NULL DEFAULT 0
    CHECK (roles_migrated IN (0, 1));
UPDATE api_tokens SET roles = 'submit,review,publish,admin', roles_migrated = 1;
CREATE TABLE audit (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms     INTEGER NOT NULL,
    principal TEXT NOT NULL,
    act       TEXT NOT NULL CHECK (act IN ('token_created', 'token_revoked', 'token_roles',
              'review_accept', 'review_reject', 'review_retry', 'review_forced_accept',
              'published', 'policy_loaded')),
    subject   TEXT NOT NULL,
    detail    TEXT NOT NULL
);
CREATE INDEX audit_by_subject ON audit (subject, seq);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
",
        postgres: r"
ALTER TABLE api_tokens ADD COLUMN roles TEXT NOT NULL DEFAULT '';
ALTER TABLE api_tokens ADD COLUMN roles_migrated BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE api_tokens SET roles = 'submit,review,publish,admin', roles_migrated = TRUE;
CREATE TABLE audit (
    seq       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at_ms     BIGINT NOT NULL,
    principal TEXT NOT NULL,
    act       TEXT NOT NULL CHECK (act IN ('token_created', 'token_revoked', 'token_roles',
              'review_accept', 'review_reject', 'review_retry', 'review_forced_accept',
              'published', 'policy_loaded')),
    subject   TEXT NOT NULL,
    detail    TEXT NOT NULL
);
CREATE INDEX audit_by_subject ON audit (subject, seq);
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'the audit trail is append-only'; END $$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit
FOR EACH ROW EXECUTE FUNCTION audit_append_only();
",
    },
    Migration {
        version: 8,
        name: "the spend ledger",
        sqlite: r"
ALTER TABLE usage ADD COLUMN principal TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN repository TEXT NOT NULL DEFAULT '';
ALTER TABLE usage ADD COLUMN day INTEGER NOT NULL DEFAULT 0 CHECK (day >= 0);
ALTER TABLE usage ADD COLUMN requests INTEGER NOT NULL DEFAULT 0 CHECK (requests >= 0);
ALTER TABLE usage ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0);
ALTER TABLE usage ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0);
ALTER TABLE usage ADD COLUMN total_tokens INTEGER NOT NULL DEFAULT 0 CHECK (total_tokens >= 0);
UPDATE usage SET
    principal = COALESCE((SELECT CAST(json_extract(j.spec_json, '$.submitted_by') AS TEXT)
                          FROM jobs j WHERE j.id = usage.job_id), ''),
    repository = COALESCE((SELECT CAST(json_extract(j.spec_json, '$.repository') AS TEXT)
                           FROM jobs j WHERE j.id = usage.job_id), ''),
    day = max(recorded_at, 0) / 86400000,
    requests = CASE WHEN NOT json_valid(usage_json) THEN 0
        WHEN json_type(usage_json, '$.live.requests') = 'integer'
             AND json_extract(usage_json, '$.live.requests') >= 0
        THEN min(json_extract(usage_json, '$.live.requests'), 1000000000000) ELSE 0 END,
    input_tokens = CASE WHEN NOT json_valid(usage_json) THEN 0
        WHEN json_type(usage_json, '$.live.input_tokens') = 'integer'
             AND json_extract(usage_json, '$.live.input_tokens') >= 0
        THEN min(json_extract(usage_json, '$.live.input_tokens'), 1000000000000) ELSE 0 END,
    output_tokens = CASE WHEN NOT json_valid(usage_json) THEN 0
        WHEN json_type(usage_json, '$.live.output_tokens') = 'integer'
             AND json_extract(usage_json, '$.live.output_tokens') >= 0
        THEN min(json_extract(usage_json, '$.live.output_tokens'), 1000000000000) ELSE 0 END,
    total_tokens = CASE WHEN NOT json_valid(usage_json) THEN 0
        WHEN json_type(usage_json, '$.live.total_tokens') = 'integer'
             AND json_extract(usage_json, '$.live.total_tokens') >= 0
        THEN min(json_extract(usage_json, '$.live.total_tokens'), 1000000000000) ELSE 0 END;
CREATE INDEX usage_by_principal_day
    ON usage (principal, day, requests, input_tokens, output_tokens, total_tokens);
CREATE INDEX usage_by_repository_day
    ON usage (repository, day, requests, input_tokens, output_tokens, total_tokens);
",
        postgres: r"
ALTER TABLE usage
    ADD COLUMN principal TEXT NOT NULL DEFAULT '',
    ADD COLUMN repository TEXT NOT NULL DEFAULT '',
    ADD COLUMN day BIGINT NOT NULL DEFAULT 0 CHECK (day >= 0),
    ADD COLUMN requests BIGINT NOT NULL DEFAULT 0 CHECK (requests >= 0),
    ADD COLUMN input_tokens BIGINT NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    ADD COLUMN output_tokens BIGINT NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    ADD COLUMN total_tokens BIGINT NOT NULL DEFAULT 0 CHECK (total_tokens >= 0);
UPDATE usage SET
    principal = COALESCE(j.spec_json::jsonb ->> 'submitted_by', ''),
    repository = COALESCE(j.spec_json::jsonb ->> 'repository', '')
FROM jobs j WHERE j.id = usage.job_id;
UPDATE usage SET
    day = GREATEST(recorded_at, 0) / 86400000,
    requests = CASE WHEN jsonb_typeof(usage_json::jsonb -> 'live' -> 'requests') = 'number'
             AND (usage_json::jsonb -> 'live' ->> 'requests') ~ '^[0-9]{1,18}$'
        THEN LEAST((usage_json::jsonb -> 'live' ->> 'requests')::bigint, 1000000000000) ELSE 0 END,
    input_tokens = CASE WHEN jsonb_typeof(usage_json::jsonb -> 'live' -> 'input_tokens') = 'number'
             AND (usage_json::jsonb -> 'live' ->> 'input_tokens') ~ '^[0-9]{1,18}$'
        THEN LEAST((usage_json::jsonb -> 'live' ->> 'input_tokens')::bigint, 1000000000000) ELSE 0 END,
    output_tokens = CASE WHEN jsonb_typeof(usage_json::jsonb -> 'live' -> 'output_tokens') = 'number'
             AND (usage_json::jsonb -> 'live' ->> 'output_tokens') ~ '^[0-9]{1,18}$'
        THEN LEAST((usage_json::jsonb -> 'live' ->> 'output_tokens')::bigint, 1000000000000) ELSE 0 END,
    total_tokens = CASE WHEN jsonb_typeof(usage_json::jsonb -> 'live' -> 'total_tokens') = 'number'
             AND (usage_json::jsonb -> 'live' ->> 'total_tokens') ~ '^[0-9]{1,18}$'
        THEN LEAST((usage_json::jsonb -> 'live' ->> 'total_tokens')::bigint, 1000000000000) ELSE 0 END;
CREATE INDEX usage_by_principal_day ON usage (principal, day)
    INCLUDE (requests, input_tokens, output_tokens, total_tokens);
CREATE INDEX usage_by_repository_day ON usage (repository, day)
    INCLUDE (requests, input_tokens, output_tokens, total_tokens);
",
    },
    Migration {
        version: 9,
        name: "daily spend totals",
        sqlite: r"
CREATE TABLE spend_daily (
    scope         TEXT NOT NULL CHECK (scope IN ('p', 'r')),
    name          TEXT NOT NULL,
    day           INTEGER NOT NULL CHECK (day >= 0),
    attempts      INTEGER NOT NULL CHECK (attempts >= 0),
    requests      INTEGER NOT NULL CHECK (requests >= 0),
    input_tokens  INTEGER NOT NULL CHECK (input_tokens >= 0),
    output_tokens INTEGER NOT NULL CHECK (output_tokens >= 0),
    total_tokens  INTEGER NOT NULL CHECK (total_tokens >= 0),
    PRIMARY KEY (scope, name, day)
) WITHOUT ROWID;
INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens, output_tokens,
    total_tokens)
SELECT 'p', principal, day, count(*), sum(requests), sum(input_tokens), sum(output_tokens), sum(total_tokens)
FROM usage GROUP BY principal, day;
INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens, output_tokens,
    total_tokens)
SELECT 'r', repository, day, count(*), sum(requests), sum(input_tokens), sum(output_tokens), sum(total_tokens)
FROM usage GROUP BY repository, day;
CREATE TRIGGER usage_spend_insert AFTER INSERT ON usage
BEGIN
    INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens, output_tokens,
        total_tokens)
    VALUES ('p', NEW.principal, NEW.day, 1, NEW.requests, NEW.input_tokens, NEW.output_tokens,
        NEW.total_tokens)
    ON CONFLICT (scope, name, day) DO UPDATE SET
        attempts = attempts + 1,
        requests = requests + excluded.requests,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        total_tokens = total_tokens + excluded.total_tokens;
    INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens, output_tokens,
        total_tokens)
    VALUES ('r', NEW.repository, NEW.day, 1, NEW.requests, NEW.input_tokens, NEW.output_tokens,
        NEW.total_tokens)
    ON CONFLICT (scope, name, day) DO UPDATE SET
        attempts = attempts + 1,
        requests = requests + excluded.requests,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        total_tokens = total_tokens + excluded.total_tokens;
END;
CREATE TRIGGER usage_spend_update AFTER UPDATE ON usage
BEGIN
    UPDATE spend_daily SET
        attempts = max(attempts - 1, 0),
        requests = max(requests - OLD.requests, 0),
        input_tokens = max(input_tokens - OLD.input_tokens, 0),
        output_tokens = max(output_tokens - OLD.output_tokens, 0),
        total_tokens = max(total_tokens - OLD.total_tokens, 0)
    WHERE scope = 'p' AND name = OLD.principal AND day = OLD.day;
    UPDATE spend_daily SET
        attempts = max(attempts - 1, 0),
        requests = max(requests - OLD.requests, 0),
        input_tokens = max(input_tokens - OLD.input_tokens, 0),
        output_tokens = max(output_tokens - OLD.output_tokens, 0),
        total_tokens = max(total_tokens - OLD.total_tokens, 0)
    WHERE scope = 'r' AND name = OLD.repository AND day = OLD.day;
    INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens, output_tokens,
        total_tokens)
    VALUES ('p', NEW.principal, NEW.day, 1, NEW.requests, NEW.input_tokens, NEW.output_tokens,
        NEW.total_tokens)
    ON CONFLICT (scope, name, day) DO UPDATE SET
        attempts = attempts + 1,
        requests = requests + excluded.requests,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        total_tokens = total_tokens + excluded.total_tokens;
    INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens, output_tokens,
        total_tokens)
    VALUES ('r', NEW.repository, NEW.day, 1, NEW.requests, NEW.input_tokens, NEW.output_tokens,
        NEW.total_tokens)
    ON CONFLICT (scope, name, day) DO UPDATE SET
        attempts = attempts + 1,
        requests = requests + excluded.requests,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        total_tokens = total_tokens + excluded.total_tokens;
END;
CREATE TRIGGER usage_spend_delete AFTER DELETE ON usage
BEGIN
    UPDATE spend_daily SET
        attempts = max(attempts - 1, 0),
        requests = max(requests - OLD.requests, 0),
        input_tokens = max(input_tokens - OLD.input_tokens, 0),
        output_tokens = max(output_tokens - OLD.output_tokens, 0),
        total_tokens = max(total_tokens - OLD.total_tokens, 0)
    WHERE scope = 'p' AND name = OLD.principal AND day = OLD.day;
    UPDATE spend_daily SET
        attempts = max(attempts - 1, 0),
        requests = max(requests - OLD.requests, 0),
        input_tokens = max(input_tokens - OLD.input_tokens, 0),
        output_tokens = max(output_tokens - OLD.output_tokens, 0),
        total_tokens = max(total_tokens - OLD.total_tokens, 0)
    WHERE scope = 'r' AND name = OLD.repository AND day = OLD.day;
END;
",
        postgres: r"
CREATE TABLE spend_daily (
    scope         TEXT NOT NULL CHECK (scope IN ('p', 'r')),
    name          TEXT NOT NULL,
    day           BIGINT NOT NULL CHECK (day >= 0),
    attempts      BIGINT NOT NULL CHECK (attempts >= 0),
    requests      BIGINT NOT NULL CHECK (requests >= 0),
    input_tokens  BIGINT NOT NULL CHECK (input_tokens >= 0),
    output_tokens BIGINT NOT NULL CHECK (output_tokens >= 0),
    total_tokens  BIGINT NOT NULL CHECK (total_tokens >= 0),
    PRIMARY KEY (scope, name, day)
);
INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens, output_tokens,
    total_tokens)
SELECT 'p', principal, day, count(*), LEAST(sum(requests), 9223372036854775807)::bigint, LEAST(sum(input_tokens), 9223372036854775807)::bigint, LEAST(sum(output_tokens), 9223372036854775807)::bigint, LEAST(sum(total_tokens), 9223372036854775807)::bigint
FROM usage GROUP BY principal, day;
INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens, output_tokens,
    total_tokens)
SELECT 'r', repository, day, count(*), LEAST(sum(requests), 9223372036854775807)::bigint, LEAST(sum(input_tokens), 9223372036854775807)::bigint, LEAST(sum(output_tokens), 9223372036854775807)::bigint, LEAST(sum(total_tokens), 9223372036854775807)::bigint
FROM usage GROUP BY repository, day;
CREATE FUNCTION usage_spend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE spend_daily SET
            attempts = GREATEST(attempts - 1, 0),
            requests = GREATEST(requests - OLD.requests, 0),
            input_tokens = GREATEST(input_tokens - OLD.input_tokens, 0),
            output_tokens = GREATEST(output_tokens - OLD.output_tokens, 0),
            total_tokens = GREATEST(total_tokens - OLD.total_tokens, 0)
        WHERE scope = 'p' AND name = OLD.principal AND day = OLD.day;
        UPDATE spend_daily SET
            attempts = GREATEST(attempts - 1, 0),
            requests = GREATEST(requests - OLD.requests, 0),
            input_tokens = GREATEST(input_tokens - OLD.input_tokens, 0),
            output_tokens = GREATEST(output_tokens - OLD.output_tokens, 0),
            total_tokens = GREATEST(total_tokens - OLD.total_tokens, 0)
        WHERE scope = 'r' AND name = OLD.repository AND day = OLD.day;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens,
            output_tokens, total_tokens)
        VALUES ('p', NEW.principal, NEW.day, 1, NEW.requests, NEW.input_tokens,
            NEW.output_tokens, NEW.total_tokens)
        ON CONFLICT (scope, name, day) DO UPDATE SET
            attempts = LEAST(spend_daily.attempts::numeric + 1, 9223372036854775807)::bigint,
            requests = LEAST(spend_daily.requests::numeric + EXCLUDED.requests, 9223372036854775807)::bigint,
            input_tokens = LEAST(spend_daily.input_tokens::numeric + EXCLUDED.input_tokens, 9223372036854775807)::bigint,
            output_tokens = LEAST(spend_daily.output_tokens::numeric + EXCLUDED.output_tokens, 9223372036854775807)::bigint,
            total_tokens = LEAST(spend_daily.total_tokens::numeric + EXCLUDED.total_tokens, 9223372036854775807)::bigint;
        INSERT INTO spend_daily (scope, name, day, attempts, requests, input_tokens,
            output_tokens, total_tokens)
        VALUES ('r', NEW.repository, NEW.day, 1, NEW.requests, NEW.input_tokens,
            NEW.output_tokens, NEW.total_tokens)
        ON CONFLICT (scope, name, day) DO UPDATE SET
            attempts = LEAST(spend_daily.attempts::numeric + 1, 9223372036854775807)::bigint,
            requests = LEAST(spend_daily.requests::numeric + EXCLUDED.requests, 9223372036854775807)::bigint,
            input_tokens = LEAST(spend_daily.input_tokens::numeric + EXCLUDED.input_tokens, 9223372036854775807)::bigint,
            output_tokens = LEAST(spend_daily.output_tokens::numeric + EXCLUDED.output_tokens, 9223372036854775807)::bigint,
            total_tokens = LEAST(spend_daily.total_tokens::numeric + EXCLUDED.total_tokens, 9223372036854775807)::bigint;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER usage_spend AFTER INSERT OR UPDATE OR DELETE ON usage
FOR EACH ROW EXECUTE FUNCTION usage_spend();
",
    },
    Migration {
        version: 10,
        name: "forge deliveries",
        sqlite: r"
CREATE TABLE forge_deliveries (
    forge        TEXT NOT NULL,
    delivery     TEXT NOT NULL,
    received_at  INTEGER NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('ignored', 'queued', 'submitted', 'refused')),
    reason       TEXT NOT NULL,
    subject      TEXT,
    trigger_json TEXT,
    base_commit  TEXT,
    holder       TEXT,
    lease_until  INTEGER,
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    job_id       TEXT REFERENCES jobs (id),
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (forge, delivery),
    UNIQUE (forge, subject)
);
CREATE INDEX forge_deliveries_queued ON forge_deliveries (received_at) WHERE state = 'queued';
",
        postgres: r"
CREATE TABLE forge_deliveries (
    forge        TEXT NOT NULL,
    delivery     TEXT NOT NULL,
    received_at  BIGINT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('ignored', 'queued', 'submitted', 'refused')),
    reason       TEXT NOT NULL,
    subject      TEXT,
    trigger_json TEXT,
    base_commit  TEXT,
    holder       TEXT,
    lease_until  BIGINT,
    attempts     BIGINT NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    job_id       TEXT REFERENCES jobs (id),
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (forge, delivery),
    UNIQUE (forge, subject)
);
CREATE INDEX forge_deliveries_queued ON forge_deliveries (received_at) WHERE state = 'queued';
",
    },
    Migration {
        version: 11,
        name: "forge reports",
        sqlite: r"
ALTER TABLE forge_deliveries ADD COLUMN report TEXT CHECK (report IN ('open', 'closed'));
ALTER TABLE forge_deliveries ADD COLUMN report_at INTEGER;
ALTER TABLE forge_deliveries ADD COLUMN report_failures INTEGER NOT NULL DEFAULT 0
    CHECK (report_failures >= 0);
ALTER TABLE forge_deliveries ADD COLUMN report_reason TEXT;
CREATE INDEX forge_deliveries_reports ON forge_deliveries (report_at) WHERE report = 'open';
CREATE TABLE forge_calls (
    forge       TEXT NOT NULL,
    delivery    TEXT NOT NULL,
    call        TEXT NOT NULL,
    result_json TEXT NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (forge, delivery, call),
    FOREIGN KEY (forge, delivery) REFERENCES forge_deliveries (forge, delivery)
);
CREATE TABLE forge_pulls (
    forge      TEXT NOT NULL,
    project    TEXT NOT NULL,
    number     INTEGER NOT NULL CHECK (number > 0),
    job_id     TEXT NOT NULL REFERENCES jobs (id),
    branch     TEXT NOT NULL,
    head       TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (forge, project, number)
);
",
        postgres: r"
ALTER TABLE forge_deliveries ADD COLUMN report TEXT CHECK (report IN ('open', 'closed'));
ALTER TABLE forge_deliveries ADD COLUMN report_at BIGINT;
ALTER TABLE forge_deliveries ADD COLUMN report_failures BIGINT NOT NULL DEFAULT 0
    CHECK (report_failures >= 0);
ALTER TABLE forge_deliveries ADD COLUMN report_reason TEXT;
CREATE INDEX forge_deliveries_reports ON forge_deliveries (report_at) WHERE report = 'open';
CREATE TABLE forge_calls (
    forge       TEXT NOT NULL,
    delivery    TEXT NOT NULL,
    call        TEXT NOT NULL,
    result_json TEXT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (forge, delivery, call),
    FOREIGN KEY (forge, delivery) REFERENCES forge_deliveries (forge, delivery)
);
CREATE TABLE forge_pulls (
    forge      TEXT NOT NULL,
    project    TEXT NOT NULL,
    number     BIGINT NOT NULL CHECK (number > 0),
    job_id     TEXT NOT NULL REFERENCES jobs (id),
    branch     TEXT NOT NULL,
    head       TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (forge, project, number)
);
",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_dense_and_end_at_the_current_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i64::try_from(i).unwrap() + 1, "{}", m.name);
        }
        assert_eq!(MIGRATIONS.last().unwrap().version, SCHEMA_VERSION);
    }

    /// The stored verdict's `CHECK` is the one `GateVerdict`'s wire names, on both backends.
    #[test]
    fn the_outcome_check_lists_exactly_the_gate_verdicts() {
        let names: Vec<String> = crate::evidence::GateVerdict::ALL
            .iter()
            .map(|v| format!("'{}'", v.as_str()))
            .collect();
        let check = format!("CHECK (outcome IN ({}))", names.join(", "));
        let mut seen = 0;
        for m in MIGRATIONS {
            for sql in [m.sqlite, m.postgres] {
                for (at, _) in sql.match_indices("CHECK (outcome IN") {
                    assert!(sql[at..].starts_with(&check), "{}", m.name);
                    seen += 1;
                }
            }
        }
        assert!(seen >= 2, "the outcome CHECK was not found");
    }

    /// The audit table's act `CHECK` is exactly `AuditAct`'s wire names, on both backends.
    #[test]
    fn the_act_check_lists_exactly_the_audit_acts() {
        let names: Vec<String> = crate::access::AuditAct::ALL
            .iter()
            .map(|a| format!("'{}'", a.as_str()))
            .collect();
        let m = MIGRATIONS.iter().find(|m| m.version == 7).unwrap();
        for sql in [m.sqlite, m.postgres] {
            let at = sql.find("CHECK (act IN (").unwrap() + "CHECK (act IN (".len();
            let end = at + sql[at..].find("))").unwrap();
            let listed: Vec<&str> = sql[at..end].split(',').map(str::trim).collect();
            assert_eq!(listed, names);
        }
    }
}
