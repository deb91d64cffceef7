//! The crate's error type. Every variant has a stable wire code ([`JobsError::code`]); messages
//! name fields and limits, never job payloads. Untrusted text (an ID that failed to parse, a
//! database driver's detail) is shown only through [`Untrusted`].

use vocab::{Coded, FailureClass, Untrusted, VocabError};

/// Which backend a database failure came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        })
    }
}

/// `PATCH_CANDIDATE_JOBS_NOT_FOUND`: no job has this ID (also the code of the command line and the
/// HTTP API when a job, or its candidate, is not in the store).
pub const NOT_FOUND_CODE: &str = "PATCH_CANDIDATE_JOBS_NOT_FOUND";

/// Every code [`JobsError::code`] can return, for documentation and contract tests.
/// (A malformed ID is the vocabulary's `PATCH_CANDIDATE_JOBS_ID`, [`vocab::ID_CODE`].)
pub const ERROR_CODES: &[&str] = JobsError::CODES;

/// Errors of the job store.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum JobsError {
    /// A job, attempt, host or store ID failed its format check (`PATCH_CANDIDATE_JOBS_ID`).
    #[error(transparent)]
    #[coded(rejected)]
    Vocab(#[from] VocabError),
    /// A submitted job specification failed a check.
    #[error("PATCH_CANDIDATE_JOBS_SPEC: {field}: {detail}")]
    Spec {
        field: &'static str,
        detail: &'static str,
    },
    /// Another argument (an error code, an event message, host metadata, a limit) failed a check.
    #[error("PATCH_CANDIDATE_JOBS_INPUT: {field}: {detail}")]
    Input {
        field: &'static str,
        detail: &'static str,
    },
    /// The `--database` value is neither a SQLite path nor a `postgres://` URL it can use.
    #[error("PATCH_CANDIDATE_JOBS_DATABASE_URL: {detail}")]
    #[coded(usage)]
    DatabaseUrl { detail: String },
    /// No job has this ID.
    #[error("PATCH_CANDIDATE_JOBS_NOT_FOUND: no job {id}")]
    #[coded(code = NOT_FOUND_CODE)]
    NotFound { id: String },
    /// The job is in a state the operation does not apply to.
    #[error("PATCH_CANDIDATE_JOBS_STATE: job {id} is {state}: {detail}")]
    State {
        id: String,
        state: &'static str,
        detail: &'static str,
    },
    /// The database cannot be reached right now (connection refused or lost, server shutting
    /// down, SQLite locked past the busy timeout). Retrying later is the remedy; the store
    /// reconnects by itself.
    #[error("PATCH_CANDIDATE_JOBS_UNAVAILABLE: {backend} database unavailable: {}", Untrusted::quoted(.detail))]
    #[coded(environment)]
    Unavailable { backend: Backend, detail: String },
    /// Any other database failure.
    #[error("PATCH_CANDIDATE_JOBS_DATABASE: {backend}: {}", Untrusted::quoted(.detail))]
    #[coded(environment)]
    Database { backend: Backend, detail: String },
    /// The database schema is newer than this program knows.
    #[error(
        "PATCH_CANDIDATE_JOBS_SCHEMA: database schema version {found} is newer than the supported {supported}"
    )]
    #[coded(environment)]
    Schema { found: i64, supported: i64 },
    /// A stored row failed its check when read back.
    #[error("PATCH_CANDIDATE_JOBS_CORRUPT: stored {field} is invalid")]
    #[coded(environment)]
    Corrupt { field: &'static str },
    /// The write would replace what is written once: a token name already taken (revoked
    /// names included), a second publication of one job's candidate.
    #[error("PATCH_CANDIDATE_JOBS_CONFLICT: {what}")]
    Conflict { what: &'static str },
    /// The job's candidate is published: its history is closed (no decision, no second
    /// publication claim).
    #[error(
        "PATCH_CANDIDATE_JOBS_PUBLISHED: job {id}: the candidate is published; its history takes nothing more"
    )]
    Published { id: String },
    /// A publication is claimed and recorded only while the job's last review decision is
    /// `accept` of the job's candidate; it is not (none yet, or a later `reject` or `retry`).
    #[error(
        "PATCH_CANDIDATE_JOBS_NOT_ACCEPTED: job {id}: the last review decision is not accept of this candidate"
    )]
    NotAccepted { id: String },
    /// Another publish of the job (on this host or another) holds the publication claim.
    #[error("PATCH_CANDIDATE_JOBS_PUBLISHING: job {id}: host {holder} is publishing it to branch {}", Untrusted::quoted(.branch).limit(200))]
    Publishing {
        id: String,
        holder: String,
        branch: String,
    },
    /// The publication claim is no longer this publish's: it was released, or its lease ran out
    /// and another publish took it.
    #[error(
        "PATCH_CANDIDATE_JOBS_CLAIM_LOST: job {id}: this publish no longer holds the publication claim"
    )]
    ClaimLost { id: String },
    /// A UTC day (`YYYY-MM-DD`, days since the epoch, a range of days) failed its check.
    #[error("PATCH_CANDIDATE_JOBS_DAY: {detail}")]
    Day { detail: &'static str },
    /// A usage rollup would return more groups than its cap: ask for fewer days or one principal.
    #[error("PATCH_CANDIDATE_JOBS_ROLLUP_LIMIT: the usage rollup has more than {limit} rows")]
    RollupLimit { limit: usize },
    /// Creating or opening the SQLite file failed.
    #[error("PATCH_CANDIDATE_JOBS_IO: {what}: {}", Untrusted::quoted(.detail))]
    #[coded(environment)]
    Io { what: &'static str, detail: String },
}

impl JobsError {
    /// True for failures of the environment (the database), which a service waits out.
    #[must_use]
    pub fn is_environment(&self) -> bool {
        self.class() == FailureClass::Environment
    }

    /// True when the database could not be reached: the one error a long-running service retries
    /// without giving up.
    #[must_use]
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    pub(crate) fn spec(field: &'static str, detail: &'static str) -> Self {
        Self::Spec { field, detail }
    }

    pub(crate) fn input(field: &'static str, detail: &'static str) -> Self {
        Self::Input { field, detail }
    }
}

/// The crate's result type.
pub type Result<T, E = JobsError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// One sample of every variant (the all-variants test fails until a new variant has one).
    fn samples() -> Vec<JobsError> {
        vec![
            JobsError::from(vocab::JobId::parse("../etc").unwrap_err()),
            JobsError::spec("commit", "must be 40 or 64 lowercase hex digits"),
            JobsError::input("code", "must be 1 to 64 of A-Z 0-9 _"),
            JobsError::DatabaseUrl {
                detail: "unsupported scheme".to_owned(),
            },
            JobsError::NotFound {
                id: "job_00000000000000000000000000000000".to_owned(),
            },
            JobsError::State {
                id: "job_00000000000000000000000000000000".to_owned(),
                state: "completed",
                detail: "only failed or cancelled jobs can be retried",
            },
            JobsError::Unavailable {
                backend: Backend::Postgres,
                detail: "connection refused".to_owned(),
            },
            JobsError::Database {
                backend: Backend::Sqlite,
                detail: "constraint failed".to_owned(),
            },
            JobsError::Schema {
                found: 9,
                supported: 1,
            },
            JobsError::Corrupt { field: "state" },
            JobsError::Io {
                what: "create database file",
                detail: "permission denied".to_owned(),
            },
            JobsError::Conflict {
                what: "the token name is taken",
            },
            JobsError::Published {
                id: "job_00000000000000000000000000000000".to_owned(),
            },
            JobsError::NotAccepted {
                id: "job_00000000000000000000000000000000".to_owned(),
            },
            JobsError::Publishing {
                id: "job_00000000000000000000000000000000".to_owned(),
                holder: "host-a".to_owned(),
                branch: "c/one".to_owned(),
            },
            JobsError::ClaimLost {
                id: "job_00000000000000000000000000000000".to_owned(),
            },
            JobsError::Day {
                detail: "must be YYYY-MM-DD",
            },
            JobsError::RollupLimit { limit: 10 },
        ]
    }

    #[test]
    fn every_variant_starts_with_its_code_once() {
        let samples = samples();
        // Also the table: the ID code is the vocabulary's (`vocab::ID_CODE`).
        vocab::check_coded_samples(&samples).unwrap();
        for e in &samples {
            assert_eq!(e.is_environment(), e.class() == FailureClass::Environment);
            assert!(e.code().starts_with("PATCH_CANDIDATE_JOBS_"));
        }
    }

    #[test]
    fn untrusted_text_is_escaped_in_messages() {
        let e = JobsError::from(vocab::JobId::parse("job_\u{1b}[31m").unwrap_err());
        assert!(!e.to_string().contains('\u{1b}'));
    }

    #[test]
    fn only_unavailable_is_unavailable() {
        for e in samples() {
            assert_eq!(
                e.is_unavailable(),
                e.code() == "PATCH_CANDIDATE_JOBS_UNAVAILABLE"
            );
        }
    }
}
