//! The durable job store of the patch-candidate service: jobs bound at submission to an approval
//! and a snapshot, leases with fencing tokens (attempt IDs), results, usage and a short log.
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

mod error;
mod evidence;
mod ids;
mod model;
mod postgres;
mod review;
mod rows;
mod schema;
mod sqlite;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
mod transition;
mod wake;

pub use error::{Backend, ERROR_CODES, JobsError, NOT_FOUND_CODE, Result};
pub use evidence::{
    EvidenceDocument, MAX_EVIDENCE_DOCUMENT_BYTES, MAX_EVIDENCE_DOCUMENTS, MAX_GATE_NAME_CHARS,
};
pub use ids::{random_attempt_id, random_job_id};
pub use model::{
    Claimed, Fenced, FollowUp, FollowUpGate, Heartbeat, HostInfo, Job, JobEvent, JobFailure,
    JobKind, JobSpec, JobState, LiveJob, MAX_AGENT_CHARS, MAX_ATTEMPTS_LIMIT, MAX_BATCH,
    MAX_CANDIDATE_BYTES, MAX_CODE_CHARS, MAX_DOCUMENT_BYTES, MAX_FOLLOW_UP_GATES,
    MAX_FOLLOW_UP_NOTE_BYTES, MAX_MESSAGE_BYTES, MAX_MODEL_CHARS, MAX_REPOSITORY_BYTES,
    MAX_SELECTIONS_BYTES, Retry, StoreOptions, backoff,
};
pub use review::{
    DecisionRow, MAX_CLAIM_BRANCH_BYTES, MAX_CLAIM_LEASE, MAX_DECISION_RECORD_BYTES,
    MAX_PUBLICATION_RECORD_BYTES, MAX_TOKEN_NAME_CHARS, OPERATOR_PRINCIPAL, PublicationClaim,
    StoredDecisionRow, TokenHash, TokenInfo, TokenName,
};
pub use rows::{
    EVENT_CANCELLED, EVENT_CLAIMED, EVENT_COMPLETED, EVENT_RELEASED, EVENT_RETRIED, EVENT_SNOOZED,
    EVENT_SUBMITTED, LEASE_EXPIRED,
};
pub use schema::SCHEMA_VERSION;
pub use store::{DEFAULT_SQLITE_FILE, DatabaseLocation, JobStore};
pub use wake::WorkSignal;
