//! The crate's error type. Every variant has a stable wire code ([`GateError::code`]); messages
//! never quote a definition file's values, repository content, a report or anything a container
//! printed.

use vocab::{Coded, FailureClass};

use container::ContainerError;

/// Every code [`GateError::code`] can return (wrapped errors keep their crate's code), for documentation and contract tests.
pub const ERROR_CODES: &[&str] = GateError::CODES;

/// Errors of the gate host side: definitions, the tree, the run, the baseline cache, evidence.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum GateError {
    /// The operator's gate definition file is unreadable, too large or invalid.
    #[error("PATCH_CANDIDATE_GATE_DEFINITION: {detail}")]
    Definition { detail: String },
    /// A gate the candidate requires (or the operator named) is not defined.
    #[error("PATCH_CANDIDATE_GATE_UNKNOWN: required gate {name} is not defined")]
    Unknown { name: String },
    /// The repository tree cannot be streamed (a symlink, a submodule, an unsafe name).
    #[error("PATCH_CANDIDATE_GATE_TREE: {detail}")]
    Tree { detail: String },
    /// The tree exceeds the gate's caps.
    #[error("PATCH_CANDIDATE_GATE_TREE_BUDGET: tree exceeds {limit} {what}")]
    TreeBudget { what: &'static str, limit: u64 },
    /// The candidate does not apply to the baseline tree (a previous hash or presence differs).
    #[error("PATCH_CANDIDATE_GATE_CANDIDATE_MISMATCH: {detail}")]
    CandidateMismatch { detail: String },
    /// The request could not be built.
    #[error("PATCH_CANDIDATE_GATE_REQUEST: {detail}")]
    Request { detail: &'static str },
    /// The container's report is missing, malformed, forged or over a cap.
    #[error("PATCH_CANDIDATE_GATE_REPORT: {detail}")]
    Report { detail: &'static str },
    /// The runner reported its own failure (its stable code is in the evidence).
    #[error("PATCH_CANDIDATE_GATE_RUNNER: the runner reported an error")]
    Runner,
    /// The report contradicts itself (exit 0 with failed cases, non-zero with a clean report).
    #[error("PATCH_CANDIDATE_GATE_CONTRADICTION: {detail}")]
    Contradiction { detail: &'static str },
    /// The container was killed by the out-of-memory killer before it reported.
    #[error("PATCH_CANDIDATE_GATE_OOM: the gate container exceeded its memory limit")]
    #[coded(environment)]
    OutOfMemory,
    /// The container itself exited non-zero.
    #[error("PATCH_CANDIDATE_GATE_CONTAINER_EXIT: gate container exited with status {status}")]
    #[coded(environment)]
    ContainerExit { status: i64 },
    /// An evidence document failed its strict parse or its checks.
    #[error("PATCH_CANDIDATE_GATE_EVIDENCE: {detail}")]
    Evidence { detail: String },
    /// The evidence belongs to another candidate or does not match its digest.
    #[error("PATCH_CANDIDATE_GATE_EVIDENCE_BINDING: {detail}")]
    EvidenceBinding { detail: &'static str },
    /// The baseline cache or an evidence file could not be read or written.
    #[error("PATCH_CANDIDATE_GATE_STATE: {detail}")]
    #[coded(environment)]
    State { detail: &'static str },
    /// The Docker seam's own failures, unchanged.
    #[error(transparent)]
    #[coded(usage_as_rejected)]
    Container(#[from] ContainerError),
    /// The snapshot loader's failures (git), unchanged.
    #[error(transparent)]
    #[coded(usage_as_rejected)]
    Snapshot(#[from] snapshot::SnapshotError),
    /// The candidate's own failures (digest), unchanged.
    #[error(transparent)]
    #[coded(usage_as_rejected)]
    Finalize(#[from] finalizer::FinalizeError),
}

impl GateError {
    /// True for failures of the environment (Docker, git, local state) rather than a verdict or
    /// a rejection of the input.
    #[must_use]
    pub fn is_environment(&self) -> bool {
        Coded::class(self) == FailureClass::Environment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_starts_with_its_code() {
        let all = [
            GateError::Definition { detail: "x".into() },
            GateError::Unknown { name: "x".into() },
            GateError::Tree { detail: "x".into() },
            GateError::TreeBudget {
                what: "files",
                limit: 1,
            },
            GateError::CandidateMismatch { detail: "x".into() },
            GateError::Request { detail: "x" },
            GateError::Report { detail: "x" },
            GateError::Runner,
            GateError::Contradiction { detail: "x" },
            GateError::OutOfMemory,
            GateError::ContainerExit { status: 1 },
            GateError::Evidence { detail: "x".into() },
            GateError::EvidenceBinding { detail: "x" },
            GateError::State { detail: "x" },
            GateError::Container(ContainerError::ImageMissing),
            GateError::Snapshot(snapshot::SnapshotError::ApproveValue {
                flag: "--task",
                reason: "must not be empty",
            }),
            GateError::Finalize(finalizer::FinalizeError::DigestPath),
        ];
        vocab::check_coded_samples(&all).unwrap();
    }

    /// A wrapped usage error is a rejection of the gate's input; the environment stays the
    /// environment's.
    #[test]
    fn wrapped_errors_are_the_environment_or_rejections() {
        let usage = GateError::Snapshot(snapshot::SnapshotError::ApproveValue {
            flag: "--task",
            reason: "must not be empty",
        });
        assert_eq!(Coded::class(&usage), FailureClass::Rejected);
        let docker = GateError::Container(ContainerError::ImageMissing);
        assert_eq!(Coded::class(&docker), FailureClass::Environment);
        assert!(docker.is_environment() && !usage.is_environment());
    }
}
