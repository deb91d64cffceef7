//! The crate's error type. Every variant has a stable wire code ([`ReviewError::code`]); messages
//! name gates, fields and digests, never a reason's text, a file's content or agent output.

use vocab::{Sha256, Untrusted};

/// Every code [`ReviewError::code`] can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = ReviewError::CODES;

/// Errors of review decisions and their records.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum ReviewError {
    /// The decision names another candidate digest than the candidate it is applied to (a stale
    /// client, or a decision meant for another candidate).
    #[error(
        "PATCH_CANDIDATE_REVIEW_DIGEST_MISMATCH: the decision was made against {named}, the candidate is {actual}"
    )]
    DigestMismatch { named: Sha256, actual: Sha256 },
    /// A reject, or an override of unmet requirements, without a reason.
    #[error("PATCH_CANDIDATE_REVIEW_REASON_REQUIRED: {what} needs a reason")]
    ReasonRequired { what: &'static str },
    /// A reason that fails its checks (empty, too long, control characters).
    #[error("PATCH_CANDIDATE_REVIEW_REASON: {detail}")]
    Reason { detail: &'static str },
    /// A principal name that fails its checks.
    #[error("PATCH_CANDIDATE_REVIEW_PRINCIPAL: {detail}")]
    Principal { detail: &'static str },
    /// `accept` while a required gate has no passed evidence for this exact digest.
    #[error(
        "PATCH_CANDIDATE_REVIEW_GATES_UNMET: required gates without passed evidence for this candidate: {gates} (override with a reason to record a forced accept)"
    )]
    GatesUnmet { gates: String },
    /// `accept` while the content policy report is missing or not clean.
    #[error(
        "PATCH_CANDIDATE_REVIEW_POLICY_UNCLEAN: the content policy report is {state} (override with a reason to record a forced accept)"
    )]
    PolicyUnclean { state: &'static str },
    /// A decision on a candidate that is already published (publication is final).
    #[error("PATCH_CANDIDATE_REVIEW_PUBLISHED: the candidate is published; its review is closed")]
    Published,
    /// Publication of a candidate whose review state is not `accepted`.
    #[error("PATCH_CANDIDATE_REVIEW_NOT_ACCEPTED: the candidate's review state is {state}")]
    NotAccepted { state: &'static str },
    /// An `accept` (or a publication) of a candidate that a later attempt of its chain
    /// continues: the chain's last candidate is the one to accept (`by` names that attempt).
    #[error(
        "PATCH_CANDIDATE_REVIEW_SUPERSEDED: a later attempt ({by}) continues this candidate; accept the chain's last candidate"
    )]
    Superseded { by: String },
    /// Two candidates that are not attempts of one approval at one baseline commit.
    #[error("PATCH_CANDIDATE_REVIEW_CHAIN: {detail}")]
    Chain { detail: &'static str },
    /// A stored decision record that fails its strict parse or its checks.
    #[error("PATCH_CANDIDATE_REVIEW_RECORD: {detail}")]
    Record { detail: &'static str },
    /// An argument that fails its checks (an unknown decision name).
    #[error("PATCH_CANDIDATE_REVIEW_INPUT: {field}: {}", Untrusted::quoted(.detail).limit(80))]
    #[coded(usage)]
    Input { field: &'static str, detail: String },
    /// The local review store cannot be read or written.
    #[error("PATCH_CANDIDATE_REVIEW_STATE: {detail}")]
    #[coded(environment)]
    State { detail: &'static str },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_starts_with_its_code() {
        let d = Sha256::of(b"a");
        let all = [
            ReviewError::DigestMismatch {
                named: d,
                actual: Sha256::of(b"b"),
            },
            ReviewError::ReasonRequired { what: "reject" },
            ReviewError::Reason { detail: "empty" },
            ReviewError::Principal { detail: "empty" },
            ReviewError::GatesUnmet {
                gates: "pytest".into(),
            },
            ReviewError::PolicyUnclean { state: "missing" },
            ReviewError::Published,
            ReviewError::NotAccepted { state: "pending" },
            ReviewError::Superseded {
                by: "job_0123456789abcdef0123456789abcdef".into(),
            },
            ReviewError::Chain { detail: "x" },
            ReviewError::Record { detail: "x" },
            ReviewError::Input {
                field: "decision",
                detail: "\u{1b}[31m".into(),
            },
            ReviewError::State { detail: "x" },
        ];
        vocab::check_coded_samples(&all).unwrap();
        for e in &all {
            assert!(!e.to_string().contains('\u{1b}'));
        }
    }
}
