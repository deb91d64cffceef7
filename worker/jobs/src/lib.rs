//! The durable job store of the patch-candidate service: jobs bound at submission to an approval
//! and a snapshot, leases with fencing tokens (attempt IDs), results, usage (the spend ledger:
//! [`JobStore::spend_on`], [`JobStore::usage_rollup`]) and a short log.
//!
//! One type, [`JobStore`], over two real backends: an embedded SQLite file (the default, zero
//! set-up) and PostgreSQL (many hosts sharing one queue). Both pass one conformance suite.
//!
//! The guarantees: a claim hands a job to exactly one attempt (`BEGIN IMMEDIATE` on SQLite,
//! `FOR UPDATE SKIP LOCKED` on PostgreSQL), each with a fresh random [`vocab::AttemptId`]; every
//! write about a running attempt is guarded by `id + attempt_id + state='running'` in the same
//! statement, so execution is at-least-once and the recorded result exactly-once; the rescuer is
//! one guarded statement. See docs/SERVICE.md, "Job store".
//!
//! # Security
//! IDs are typed through the vocabulary's fallible constructors with fixed charsets. Stored text (error messages,
//! log lines) is bounded and free of control characters other than newline and tab; it is still
//! shown through [`vocab::Untrusted`]. PostgreSQL is reached without TLS: a unix socket or
//! loopback only.
#![forbid(unsafe_code)]

mod access;
mod error;
mod evidence;
mod ids;
mod intake;
mod ledger;
mod model;
mod postgres;
mod report;
mod review;
mod rows;
mod schema;
mod sqlite;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
mod transition;
mod wake;

pub use access::{
    AuditAct, AuditEntry, MAX_AUDIT_DETAIL_BYTES, MAX_AUDIT_LIST, Role, Roles, TokenAccess,
};
pub use error::{Backend, ERROR_CODES, JobsError, NOT_FOUND_CODE, Result};
pub use evidence::EvidenceDocument;
pub use ids::{random_attempt_id, random_job_id};
pub use intake::{
    DeliveryOutcome, DeliveryState, ForgeDelivery, MAX_TRIGGER_BYTES, NewForgeDelivery,
};
pub use ledger::{
    MAX_LEDGER_COUNT, MAX_USAGE_ROLLUP_ROWS, Spend, SpendToday, UsageRollupRow, UtcDay,
};
pub(crate) use model::MAX_FOLLOW_UPS_LISTED;
pub use model::{
    Claimed, Fenced, FollowUp, FollowUpGate, FollowUpPolicy, Heartbeat, Job, JobKind, JobSpec,
    JobState, LiveJob, LiveJobEnvironment, MAX_CHAIN_FOLLOW_UPS, MAX_DOCUMENT_BYTES,
    MAX_FOLLOW_UP_GATES, MAX_FOLLOW_UP_NOTE_BYTES, PolicyAdmission, Retry, StoreOptions, backoff,
};
pub use report::{ForgeCall, ForgePull, MAX_CALL_RESULT_BYTES};
pub use review::{
    DecisionRow, OPERATOR_PRINCIPAL, PublicationClaim, StoredDecisionRow, TokenHash, TokenName,
};
pub use rows::{
    EVENT_CANCELLED, EVENT_CLAIMED, EVENT_RELEASED, EVENT_RETRIED, EVENT_SNOOZED, EVENT_SUBMITTED,
    LEASE_EXPIRED,
};
pub use schema::SCHEMA_VERSION;
pub use store::{DEFAULT_SQLITE_FILE, JobStore};
pub use wake::WorkSignal;
