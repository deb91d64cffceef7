//! The crate's error type: one variant per reference code. Messages name paths, kinds and limits,
//! never file contents or provider output.

use snapshot::SnapshotError;

/// Errors from finalisation, candidate validation, digesting and the candidate store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FinalizeError {
    /// A shared selection / path check failed; keeps the snapshot code.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Reading the staged workspace failed; keeps the archive code.
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    #[error("REPOSITORY_PATCH_WORKSPACE_BASELINE: staged files differ from selected baseline")]
    WorkspaceBaseline,
    /// `kind:path` pairs of every harvest violation.
    #[error("REPOSITORY_PATCH_WORKSPACE_SCOPE: {violations}")]
    WorkspaceScope { violations: String },
    #[error("REPOSITORY_PATCH_WORKSPACE_SET: harvested files differ from selection")]
    WorkspaceSet,
    #[error("REPOSITORY_PATCH_WORKSPACE_OP: {path:?}")]
    WorkspaceOp { path: String },
    #[error("REPOSITORY_PATCH_WORKSPACE_HASH: {path:?}")]
    WorkspaceHash { path: String },
    #[error("REPOSITORY_PATCH_PROPOSAL_STATUS: completed nonempty edit required")]
    ProposalStatus,
    #[error("REPOSITORY_PATCH_PROPOSAL_SCOPE: {path:?}")]
    ProposalScope { path: String },
    #[error("REPOSITORY_PATCH_PROPOSAL_MISMATCH: provider output differs from staged bytes")]
    ProposalMismatch,
    #[error("REPOSITORY_PATCH_OWNERSHIP: {detail}")]
    Ownership { detail: &'static str },
    /// A candidate document or value is not a valid v2 candidate.
    #[error("REPOSITORY_PATCH_DIGEST_INPUT: {detail}")]
    DigestInput { detail: String },
    #[error("REPOSITORY_PATCH_DIGEST_HASH: {detail}")]
    DigestHash { detail: &'static str },
    #[error("REPOSITORY_PATCH_DIGEST_PATH: changed paths collide")]
    DigestPath,
    #[error("REPOSITORY_PATCH_DIGEST_BUDGET: candidate exceeds digest limit")]
    DigestBudget,
    /// The store could not be read or written (environment).
    #[error("REPOSITORY_PATCH_STORE_IO: {detail}")]
    StoreIo { detail: String },
    /// A different file already occupies the candidate's name.
    #[error("REPOSITORY_PATCH_STORE_CONFLICT: {digest} is already stored with different bytes")]
    StoreConflict { digest: String },
    /// A stored candidate no longer matches the digest it is filed under.
    #[error("REPOSITORY_PATCH_STORE_DIGEST: stored candidate does not match {digest}")]
    StoreDigest { digest: String },
    /// A `previous_sha256` differs from the file at the baseline commit.
    #[error("REPOSITORY_PATCH_VERIFY_BASELINE: {path:?} differs from the baseline commit")]
    VerifyBaseline { path: String },
    /// A diff is not the canonical diff of the baseline bytes and the candidate content.
    #[error("REPOSITORY_PATCH_VERIFY_DIFF: {path:?} diff is not derived from its bytes")]
    VerifyDiff { path: String },
    /// `git apply` refused the candidate's patch at the baseline commit.
    #[error("REPOSITORY_PATCH_VERIFY_APPLY: diffs do not apply at the baseline commit")]
    VerifyApply,
    /// Applying the patch did not produce the candidate's bytes.
    #[error("REPOSITORY_PATCH_VERIFY_RESULT: {path:?} applied bytes differ from the candidate")]
    VerifyResult { path: String },
    /// git could not be run (environment).
    #[error("REPOSITORY_PATCH_VERIFY_GIT: {detail}")]
    VerifyGit { detail: String },
    /// No stored candidate has this digest.
    #[error("REPOSITORY_PATCH_STORE_MISSING: {digest}")]
    StoreMissing { digest: String },
}

impl FinalizeError {
    /// The stable wire code (the message prefix before `": "`).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Snapshot(e) => e.code(),
            Self::Archive(e) => e.code(),
            Self::WorkspaceBaseline => "REPOSITORY_PATCH_WORKSPACE_BASELINE",
            Self::WorkspaceScope { .. } => "REPOSITORY_PATCH_WORKSPACE_SCOPE",
            Self::WorkspaceSet => "REPOSITORY_PATCH_WORKSPACE_SET",
            Self::WorkspaceOp { .. } => "REPOSITORY_PATCH_WORKSPACE_OP",
            Self::WorkspaceHash { .. } => "REPOSITORY_PATCH_WORKSPACE_HASH",
            Self::ProposalStatus => "REPOSITORY_PATCH_PROPOSAL_STATUS",
            Self::ProposalScope { .. } => "REPOSITORY_PATCH_PROPOSAL_SCOPE",
            Self::ProposalMismatch => "REPOSITORY_PATCH_PROPOSAL_MISMATCH",
            Self::Ownership { .. } => "REPOSITORY_PATCH_OWNERSHIP",
            Self::DigestInput { .. } => "REPOSITORY_PATCH_DIGEST_INPUT",
            Self::DigestHash { .. } => "REPOSITORY_PATCH_DIGEST_HASH",
            Self::DigestPath => "REPOSITORY_PATCH_DIGEST_PATH",
            Self::DigestBudget => "REPOSITORY_PATCH_DIGEST_BUDGET",
            Self::StoreIo { .. } => "REPOSITORY_PATCH_STORE_IO",
            Self::StoreConflict { .. } => "REPOSITORY_PATCH_STORE_CONFLICT",
            Self::StoreDigest { .. } => "REPOSITORY_PATCH_STORE_DIGEST",
            Self::StoreMissing { .. } => "REPOSITORY_PATCH_STORE_MISSING",
            Self::VerifyBaseline { .. } => "REPOSITORY_PATCH_VERIFY_BASELINE",
            Self::VerifyDiff { .. } => "REPOSITORY_PATCH_VERIFY_DIFF",
            Self::VerifyApply => "REPOSITORY_PATCH_VERIFY_APPLY",
            Self::VerifyResult { .. } => "REPOSITORY_PATCH_VERIFY_RESULT",
            Self::VerifyGit { .. } => "REPOSITORY_PATCH_VERIFY_GIT",
        }
    }

    /// True for failures of the environment (I/O) rather than of the input.
    #[must_use]
    pub fn is_environment(&self) -> bool {
        match self {
            Self::StoreIo { .. } | Self::VerifyGit { .. } => true,
            Self::Snapshot(e) => e.is_environment(),
            Self::Archive(e) => e.is_environment(),
            _ => false,
        }
    }

    pub(crate) fn input(detail: impl Into<String>) -> Self {
        Self::DigestInput {
            detail: detail.into(),
        }
    }
}

impl snapshot::Coded for FinalizeError {
    fn code(&self) -> &'static str {
        FinalizeError::code(self)
    }

    fn class(&self) -> snapshot::FailureClass {
        if self.is_environment() {
            snapshot::FailureClass::Environment
        } else {
            snapshot::FailureClass::Rejected
        }
    }
}
