//! The crate's error type: one variant per reference code. Messages name paths, kinds and limits,
//! never file contents or provider output; paths are shown only through [`Untrusted`].

use snapshot::SnapshotError;

use vocab::{Coded, FailureClass, Untrusted};

/// `REPOSITORY_PATCH_PROPOSAL_STATUS`: no completed, non-empty edit to finalise; also the turn's
/// code when a turn ends without a completed proposal.
pub const PROPOSAL_STATUS_CODE: &str = "REPOSITORY_PATCH_PROPOSAL_STATUS";

/// Every code [`FinalizeError::code`] can return (snapshot and archive errors keep their own
/// codes), for documentation and contract tests.
pub const ERROR_CODES: &[&str] = FinalizeError::CODES;

/// Errors from finalisation, candidate validation, digesting and the candidate store.
#[derive(Debug, thiserror::Error, vocab::Coded)]
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
    #[error("REPOSITORY_PATCH_WORKSPACE_OP: {}", Untrusted::quoted(.path))]
    WorkspaceOp { path: String },
    #[error("REPOSITORY_PATCH_WORKSPACE_HASH: {}", Untrusted::quoted(.path))]
    WorkspaceHash { path: String },
    #[error("REPOSITORY_PATCH_PROPOSAL_STATUS: completed nonempty edit required")]
    #[coded(code = PROPOSAL_STATUS_CODE)]
    ProposalStatus,
    #[error("REPOSITORY_PATCH_PROPOSAL_SCOPE: {}", Untrusted::quoted(.path))]
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
    #[coded(environment)]
    StoreIo { detail: String },
    /// A different file already occupies the candidate's name.
    #[error("REPOSITORY_PATCH_STORE_CONFLICT: {digest} is already stored with different bytes")]
    StoreConflict { digest: String },
    /// A stored candidate no longer matches the digest it is filed under.
    #[error("REPOSITORY_PATCH_STORE_DIGEST: stored candidate does not match {digest}")]
    StoreDigest { digest: String },
    /// A `previous_sha256` differs from the file at the baseline commit.
    #[error("REPOSITORY_PATCH_VERIFY_BASELINE: {} differs from the baseline commit", Untrusted::quoted(.path))]
    VerifyBaseline { path: String },
    /// A diff is not the canonical diff of the baseline bytes and the candidate content.
    #[error("REPOSITORY_PATCH_VERIFY_DIFF: {} diff is not derived from its bytes", Untrusted::quoted(.path))]
    VerifyDiff { path: String },
    /// `git apply` refused the candidate's patch at the baseline commit.
    #[error("REPOSITORY_PATCH_VERIFY_APPLY: diffs do not apply at the baseline commit")]
    VerifyApply,
    /// Applying the patch did not produce the candidate's bytes.
    #[error("REPOSITORY_PATCH_VERIFY_RESULT: {} applied bytes differ from the candidate", Untrusted::quoted(.path))]
    VerifyResult { path: String },
    /// git could not be run (environment).
    #[error("REPOSITORY_PATCH_VERIFY_GIT: {detail}")]
    #[coded(environment)]
    VerifyGit { detail: String },
    /// No stored candidate has this digest.
    #[error("REPOSITORY_PATCH_STORE_MISSING: {digest}")]
    StoreMissing { digest: String },
    /// The candidate's digest differs from the digest the caller expected.
    #[error(
        "REPOSITORY_PATCH_VERIFY_DIGEST: candidate digest {actual} differs from the expected {expected}"
    )]
    VerifyDigest { expected: String, actual: String },
    /// The snapshot digest differs from the one recomputed at the baseline commit.
    #[error(
        "REPOSITORY_PATCH_VERIFY_SNAPSHOT: snapshot digest differs from the repository at the baseline commit"
    )]
    VerifySnapshot,
    /// A field the finalizer derives (summary, rationale, file order, commit spelling) differs
    /// from what the candidate's own files and repository give.
    #[error("REPOSITORY_PATCH_VERIFY_DERIVED: {field} is not what the finalizer derives")]
    VerifyDerived { field: &'static str },
    /// A file's diff does not reproduce the candidate's bytes, so no exact patch can be rendered.
    #[error("REPOSITORY_PATCH_EXPORT_DIFF: {} diff does not reproduce the candidate's bytes", Untrusted::quoted(.path))]
    ExportDiff { path: String },
}

impl FinalizeError {
    /// True for failures of the environment (I/O, git) rather than of the input: the same answer
    /// as [`Coded::class`].
    #[must_use]
    pub fn is_environment(&self) -> bool {
        self.class() == FailureClass::Environment
    }

    pub(crate) fn input(detail: impl Into<String>) -> Self {
        Self::DigestInput {
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One sample of every variant (the all-variants test fails until a new variant has one).
    fn samples() -> Vec<FinalizeError> {
        let path = || "app/x.py".to_owned();
        let digest = || format!("sha256:{}", "0".repeat(64));
        vec![
            FinalizeError::Snapshot(SnapshotError::Git {
                detail: "git could not be started".to_owned(),
            }),
            FinalizeError::Archive(archive::ArchiveError::Set),
            FinalizeError::WorkspaceBaseline,
            FinalizeError::WorkspaceScope {
                violations: "symlink:app/x.py".to_owned(),
            },
            FinalizeError::WorkspaceSet,
            FinalizeError::WorkspaceOp { path: path() },
            FinalizeError::WorkspaceHash { path: path() },
            FinalizeError::ProposalStatus,
            FinalizeError::ProposalScope { path: path() },
            FinalizeError::ProposalMismatch,
            FinalizeError::Ownership {
                detail: "owned paths differ",
            },
            FinalizeError::input("invalid candidate"),
            FinalizeError::DigestHash {
                detail: "invalid hash",
            },
            FinalizeError::DigestPath,
            FinalizeError::DigestBudget,
            FinalizeError::StoreIo {
                detail: "read candidate: permission denied".to_owned(),
            },
            FinalizeError::StoreConflict { digest: digest() },
            FinalizeError::StoreDigest { digest: digest() },
            FinalizeError::VerifyBaseline { path: path() },
            FinalizeError::VerifyDiff { path: path() },
            FinalizeError::VerifyApply,
            FinalizeError::VerifyResult { path: path() },
            FinalizeError::VerifyGit {
                detail: "git apply exceeded its deadline".to_owned(),
            },
            FinalizeError::StoreMissing { digest: digest() },
            FinalizeError::VerifyDigest {
                expected: digest(),
                actual: format!("sha256:{}", "1".repeat(64)),
            },
            FinalizeError::VerifySnapshot,
            FinalizeError::VerifyDerived { field: "summary" },
            FinalizeError::ExportDiff { path: path() },
        ]
    }

    #[test]
    fn every_variant_starts_with_its_code_once() {
        let samples = samples();
        vocab::check_coded_samples(&samples).unwrap();
        for e in &samples {
            let environment = matches!(
                e,
                FinalizeError::StoreIo { .. }
                    | FinalizeError::VerifyGit { .. }
                    | FinalizeError::Snapshot(SnapshotError::Git { .. })
            );
            assert_eq!(e.is_environment(), environment, "{}", e.code());
            assert_eq!(e.is_environment(), e.class() == FailureClass::Environment);
        }
    }

    /// Reference `{path!r}` spelling; hostile names escaped.
    #[test]
    fn r_paths_are_quoted_python_style() {
        let e = FinalizeError::WorkspaceOp {
            path: "app/x.py".to_owned(),
        };
        assert_eq!(e.to_string(), "REPOSITORY_PATCH_WORKSPACE_OP: 'app/x.py'");
        let e = FinalizeError::ProposalScope {
            path: "app/\u{1b}]52;c;QUJD\u{7}\u{202e}".to_owned(),
        };
        assert_eq!(
            e.to_string(),
            "REPOSITORY_PATCH_PROPOSAL_SCOPE: 'app/\\x1b]52;c;QUJD\\x07\\u202e'"
        );
    }
}
