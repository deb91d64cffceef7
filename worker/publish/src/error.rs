//! The crate's error type. Every variant has a stable wire code ([`PublishError::code`]);
//! messages never quote file contents, credentials or anything git printed (git's stderr is
//! untrusted: it is bounded and classified, never echoed). Commit ids in messages are 40 lower-hex
//! digits checked by this crate.

use vocab::{Coded, FailureClass};

/// Every code [`PublishError::code`] can return (the candidate's own failures keep the finalizer's code), for documentation and contract tests.
pub const ERROR_CODES: &[&str] = PublishError::CODES;

/// Errors of publication: the request, the mirror and its commit, the destination recheck, the
/// rebase and its gate re-run, the push, and the forge pull request.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum PublishError {
    /// A request field is not acceptable (remote, branch, identity, candidate fields).
    #[error("PATCH_CANDIDATE_PUBLISH_INPUT: {detail}")]
    Input { detail: &'static str },
    /// The candidate does not apply to its baseline tree (a create over an existing path, an
    /// update or delete of a path that is not a regular file there).
    #[error("PATCH_CANDIDATE_PUBLISH_CANDIDATE_MISMATCH: {detail}")]
    CandidateMismatch { detail: &'static str },
    /// The baseline commit is not in the repository it is fetched from.
    #[error("PATCH_CANDIDATE_PUBLISH_BASELINE_MISSING: the baseline commit cannot be fetched")]
    BaselineMissing,
    /// The base branch does not exist on the remote.
    #[error("PATCH_CANDIDATE_PUBLISH_BASE_MISSING: the base branch does not exist on the remote")]
    BaseMissing,
    /// The base branch's tip is no longer the approved baseline commit (and no rebase was asked).
    #[error(
        "PATCH_CANDIDATE_PUBLISH_BASE_MOVED: the base branch is at {seen}, not the approved baseline {expected}"
    )]
    BaseMoved { expected: String, seen: String },
    /// Rebasing onto the moved base needs `git merge-tree --write-tree` (git 2.38 or newer).
    #[error("PATCH_CANDIDATE_PUBLISH_GIT_VERSION: rebase needs git {need} or newer")]
    #[coded(environment)]
    GitVersion { need: &'static str },
    /// The candidate does not merge cleanly onto the moved base.
    #[error("PATCH_CANDIDATE_PUBLISH_REBASE_CONFLICT: the candidate conflicts with the moved base")]
    RebaseConflict,
    /// The required gates did not pass on the merged tree.
    #[error(
        "PATCH_CANDIDATE_PUBLISH_REGATE_FAILED: the required gates did not pass on the merged tree"
    )]
    RegateFailed,
    /// The gate re-run on the merged tree could not reach a verdict.
    #[error(
        "PATCH_CANDIDATE_PUBLISH_REGATE_UNAVAILABLE: the gates could not run on the merged tree"
    )]
    #[coded(environment)]
    RegateUnavailable,
    /// The branch already exists on the remote, holding another commit.
    #[error("PATCH_CANDIDATE_PUBLISH_BRANCH_EXISTS: the branch already exists on the remote")]
    BranchExists,
    /// An extension's branch no longer holds the commit it extends (someone else pushed to it,
    /// or it was deleted): nothing is overwritten.
    #[error(
        "PATCH_CANDIDATE_PUBLISH_BRANCH_MOVED: the branch no longer holds the commit it was to extend"
    )]
    BranchMoved,
    /// The remote refused the push for another reason (a hook, a protected namespace).
    #[error("PATCH_CANDIDATE_PUBLISH_PUSH_REJECTED: {detail}")]
    PushRejected { detail: &'static str },
    /// The remote refused the credential (or asked for one and none was configured).
    #[error("PATCH_CANDIDATE_PUBLISH_AUTH: the remote refused authentication")]
    Auth,
    /// The remote cannot be reached or is not a Git repository.
    #[error("PATCH_CANDIDATE_PUBLISH_REMOTE_UNREACHABLE: {detail}")]
    #[coded(environment)]
    Unreachable { detail: &'static str },
    /// The credential file is missing, too large, malformed or readable by others.
    #[error("PATCH_CANDIDATE_PUBLISH_CREDENTIAL: {detail}")]
    Credential { detail: &'static str },
    /// The private mirror could not be created or written.
    #[error("PATCH_CANDIDATE_PUBLISH_MIRROR: {detail}")]
    #[coded(environment)]
    Mirror { detail: &'static str },
    /// git could not run, ran past its deadline or printed something unexpected.
    #[error("PATCH_CANDIDATE_PUBLISH_GIT: {detail}")]
    #[coded(environment)]
    Git { detail: &'static str },
    /// The forge API refused the pull request or answered outside its documented shape.
    #[error("PATCH_CANDIDATE_PUBLISH_FORGE: {detail}")]
    Forge { detail: &'static str },
    /// The candidate's own failures (its digest), unchanged.
    #[error(transparent)]
    #[coded(usage_as_rejected)]
    Finalize(#[from] finalizer::FinalizeError),
}

impl PublishError {
    /// True for failures of the environment (git, the network, local state) rather than a
    /// refusal of the request.
    #[must_use]
    pub fn is_environment(&self) -> bool {
        Coded::class(self) == FailureClass::Environment
    }
}

pub(crate) fn git_error(detail: &'static str) -> PublishError {
    PublishError::Git { detail }
}

pub(crate) fn input(detail: &'static str) -> PublishError {
    PublishError::Input { detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_starts_with_its_code() {
        let all = [
            PublishError::Input { detail: "x" },
            PublishError::CandidateMismatch { detail: "x" },
            PublishError::BaselineMissing,
            PublishError::BaseMissing,
            PublishError::BaseMoved {
                expected: "a".repeat(40),
                seen: "b".repeat(40),
            },
            PublishError::GitVersion { need: "2.38" },
            PublishError::RebaseConflict,
            PublishError::RegateFailed,
            PublishError::RegateUnavailable,
            PublishError::BranchExists,
            PublishError::BranchMoved,
            PublishError::PushRejected { detail: "x" },
            PublishError::Auth,
            PublishError::Unreachable { detail: "x" },
            PublishError::Credential { detail: "x" },
            PublishError::Mirror { detail: "x" },
            PublishError::Git { detail: "x" },
            PublishError::Forge { detail: "x" },
            PublishError::Finalize(finalizer::FinalizeError::DigestPath),
        ];
        vocab::check_coded_samples(&all).unwrap();
    }
}
