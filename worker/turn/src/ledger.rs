//! The idempotent usage ledger (reference §11) on an embedded SQLite database: one row per
//! attempt event ID, upserted, so recording the same attempt twice leaves one row. A ledger
//! failure never invalidates a turn.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension as _, params};
use serde::Serialize;

use crate::acp_usage::IsolatedAcpUsage;
use crate::error::TurnError;

/// The agent name every receipt carries.
pub const AGENT_NAME: &str = "RepositoryACPCodingAgent";
/// The ledger `source` of container-reported usage.
pub const SOURCE: &str = "isolated_acp";

/// The host-owned identity a receipt is charged to (never taken from the container).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageIdentity {
    pub app_id: String,
    pub user_id: String,
    pub tenant_id: String,
    pub workspace_id: String,
    pub chat_id: Option<String>,
    pub workflow_name: Option<String>,
    pub build_id: Option<String>,
}

/// One ledger row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageRecord {
    pub event_id: String,
    pub execution_kind: String,
    /// Who the receipt is charged to (its fields stand in the record's own).
    #[serde(flatten)]
    pub identity: UsageIdentity,
    pub agent_name: String,
    pub model_name: Option<String>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub source: String,
}

fn ledger_err(detail: &str) -> TurnError {
    TurnError::Ledger {
        detail: detail.to_owned(),
    }
}

/// `[A-Za-z0-9][A-Za-z0-9._:-]{7,127}`.
fn valid_attempt_id(s: &str) -> bool {
    let first = s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
    first
        && (8..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

/// `[A-Za-z0-9][A-Za-z0-9._:/+-]{0,127}`.
fn valid_model_name(s: &str) -> bool {
    let first = s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
    first
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:/+-".contains(&b))
}

/// `"acp:" + sha256(compact sorted-key JSON of the host identity and attempt)`.
#[must_use]
pub fn usage_event_id(identity: &UsageIdentity, attempt_id: &str) -> String {
    let doc = BTreeMap::from([
        ("app_id", identity.app_id.as_str()),
        ("attempt_id", attempt_id),
        ("tenant_id", identity.tenant_id.as_str()),
        ("user_id", identity.user_id.as_str()),
        ("workspace_id", identity.workspace_id.as_str()),
    ]);
    // A map of strings always serialises.
    let text = serde_json::to_string(&doc).unwrap_or_default();
    format!("acp:{}", vocab::sha256_bare_hex(text.as_bytes()))
}

/// The SQLite usage ledger.
#[derive(Debug)]
pub struct UsageLedger {
    // Behind a mutex so that a ledger can be shared by the turns of a multi-threaded service.
    conn: std::sync::Mutex<Connection>,
}

impl UsageLedger {
    /// Opens (creating if needed) the ledger database at `path`.
    ///
    /// # Errors
    /// `REPOSITORY_USAGE_LEDGER`.
    pub fn open(path: &Path) -> Result<Self, TurnError> {
        let conn = Connection::open(path).map_err(|_| ledger_err("cannot open database"))?;
        Self::init(conn)
    }

    /// An in-memory ledger (tests, dry runs).
    ///
    /// # Errors
    /// `REPOSITORY_USAGE_LEDGER`.
    pub fn in_memory() -> Result<Self, TurnError> {
        let conn = Connection::open_in_memory().map_err(|_| ledger_err("cannot open database"))?;
        Self::init(conn)
    }

    fn init(conn: Connection) -> Result<Self, TurnError> {
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|_| ledger_err("cannot configure database"))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS usage_events (
                event_id TEXT PRIMARY KEY NOT NULL,
                execution_kind TEXT NOT NULL,
                app_id TEXT NOT NULL,
                user_id TEXT NOT NULL,
                tenant_id TEXT NOT NULL,
                workspace_id TEXT NOT NULL,
                chat_id TEXT,
                workflow_name TEXT,
                build_id TEXT,
                agent_name TEXT NOT NULL,
                model_name TEXT,
                prompt_tokens INTEGER NOT NULL,
                completion_tokens INTEGER NOT NULL,
                total_tokens INTEGER NOT NULL,
                source TEXT NOT NULL,
                recorded_at INTEGER NOT NULL
            ) STRICT;",
        )
        .map_err(|_| ledger_err("cannot create schema"))?;
        Ok(Self {
            conn: std::sync::Mutex::new(conn),
        })
    }

    fn connection(&self) -> Result<std::sync::MutexGuard<'_, Connection>, TurnError> {
        self.conn
            .lock()
            .map_err(|_| ledger_err("ledger lock poisoned"))
    }

    /// Upserts one record by its event ID.
    ///
    /// # Errors
    /// `REPOSITORY_USAGE_LEDGER`.
    pub fn record_usage_delta(&self, r: &UsageRecord) -> Result<(), TurnError> {
        let tokens = |v: u64| i64::try_from(v).map_err(|_| ledger_err("token count out of range"));
        self.connection()?
            .execute(
                "INSERT INTO usage_events (event_id, execution_kind, app_id, user_id, tenant_id,
                    workspace_id, chat_id, workflow_name, build_id, agent_name, model_name,
                    prompt_tokens, completion_tokens, total_tokens, source, recorded_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
                 ON CONFLICT(event_id) DO UPDATE SET
                    prompt_tokens = excluded.prompt_tokens,
                    completion_tokens = excluded.completion_tokens,
                    total_tokens = excluded.total_tokens,
                    model_name = excluded.model_name",
                params![
                    r.event_id,
                    r.execution_kind,
                    r.identity.app_id,
                    r.identity.user_id,
                    r.identity.tenant_id,
                    r.identity.workspace_id,
                    r.identity.chat_id,
                    r.identity.workflow_name,
                    r.identity.build_id,
                    r.agent_name,
                    r.model_name,
                    tokens(r.prompt_tokens)?,
                    tokens(r.completion_tokens)?,
                    tokens(r.total_tokens)?,
                    r.source,
                    vocab::now_unix(),
                ],
            )
            .map_err(|_| ledger_err("cannot write record"))?;
        Ok(())
    }

    /// Every record, oldest first.
    ///
    /// # Errors
    /// `REPOSITORY_USAGE_LEDGER`.
    pub fn list(&self) -> Result<Vec<UsageRecord>, TurnError> {
        let conn = self.connection()?;
        let mut stmt = conn
            .prepare(
                "SELECT event_id, execution_kind, app_id, user_id, tenant_id, workspace_id, chat_id,
                    workflow_name, build_id, agent_name, model_name, prompt_tokens,
                    completion_tokens, total_tokens, source
                 FROM usage_events ORDER BY recorded_at, event_id",
            )
            .map_err(|_| ledger_err("cannot read records"))?;
        let rows = stmt
            .query_map([], |row| {
                let count = |i: usize| row.get::<_, i64>(i).map(|v| u64::try_from(v).unwrap_or(0));
                Ok(UsageRecord {
                    event_id: row.get(0)?,
                    execution_kind: row.get(1)?,
                    identity: UsageIdentity {
                        app_id: row.get(2)?,
                        user_id: row.get(3)?,
                        tenant_id: row.get(4)?,
                        workspace_id: row.get(5)?,
                        chat_id: row.get(6)?,
                        workflow_name: row.get(7)?,
                        build_id: row.get(8)?,
                    },
                    agent_name: row.get(9)?,
                    model_name: row.get(10)?,
                    prompt_tokens: count(11)?,
                    completion_tokens: count(12)?,
                    total_tokens: count(13)?,
                    source: row.get(14)?,
                })
            })
            .map_err(|_| ledger_err("cannot read records"))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|_| ledger_err("cannot read records"))
    }

    /// How many records the ledger holds.
    ///
    /// # Errors
    /// `REPOSITORY_USAGE_LEDGER`.
    pub fn count(&self) -> Result<u64, TurnError> {
        let n: Option<i64> = self
            .connection()?
            .query_row("SELECT COUNT(*) FROM usage_events", [], |r| r.get(0))
            .optional()
            .map_err(|_| ledger_err("cannot read records"))?;
        Ok(n.and_then(|v| u64::try_from(v).ok()).unwrap_or(0))
    }
}

/// Reference `record_isolated_acp_usage`: validates the host-owned attempt and model, then
/// upserts a receipt. Returns whether a row was written; a ledger failure is logged (by event
/// ID only) and returns `false`: the coding turn stays valid.
///
/// # Errors
/// `REPOSITORY_USAGE_IDENTITY` for a malformed `attempt_id` or `model_name`.
pub fn record_isolated_acp_usage(
    ledger: Option<&UsageLedger>,
    usage: Option<&IsolatedAcpUsage>,
    identity: &UsageIdentity,
    attempt_id: &str,
    model_name: Option<&str>,
) -> Result<bool, TurnError> {
    if !valid_attempt_id(attempt_id) {
        return Err(TurnError::UsageIdentity {
            field: "attempt_id",
        });
    }
    if model_name.is_some_and(|m| !valid_model_name(m)) {
        return Err(TurnError::UsageIdentity {
            field: "model_name",
        });
    }
    let (Some(usage), Some(ledger)) = (usage, ledger) else {
        return Ok(false);
    };
    if usage.total_tokens() == 0 {
        return Ok(false);
    }
    let event_id = usage_event_id(identity, attempt_id);
    let record = UsageRecord {
        event_id: event_id.clone(),
        execution_kind: "auxiliary".to_owned(),
        identity: identity.clone(),
        agent_name: AGENT_NAME.to_owned(),
        model_name: model_name.map(str::to_owned),
        prompt_tokens: usage.prompt_tokens(),
        completion_tokens: usage.completion_tokens(),
        total_tokens: usage.total_tokens(),
        source: SOURCE.to_owned(),
    };
    match ledger.record_usage_delta(&record) {
        Ok(()) => Ok(true),
        Err(_) => {
            tracing::warn!("ISOLATED_ACP_USAGE_RECORD_FAILED event_id={event_id}");
            Ok(false)
        }
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
