//! The crate's error type. Every variant has a stable wire code ([`SnapshotError::code`]); messages
//! name paths and limits but never quote file contents. Paths and other untrusted names are shown
//! only through [`Untrusted`] (Python `repr` spelling, escaped, length-capped).

use crate::path::{Collision, PathRejection};
use vocab::Untrusted;

/// `REPOSITORY_PATCH_SELECTION`: the selection checks' code, also the turn's when no editable
/// file can be selected.
pub const SELECTION_CODE: &str = "REPOSITORY_PATCH_SELECTION";

/// Every code [`SnapshotError::code`] can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = SnapshotError::CODES;

/// Errors from path, approval, snapshot and selection checks.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum SnapshotError {
    /// A path failed the canonical / portable profile.
    #[error("REPOSITORY_PATCH_UNSAFE_PATH: {}: {reason}", Untrusted::quoted(.path))]
    UnsafePath { path: String, reason: PathRejection },
    /// A digest was not `sha256:` + 64 lowercase hex.
    #[error("REPOSITORY_PATCH_MANIFEST_HASH: invalid sha256 digest")]
    #[coded(foreign = vocab::MANIFEST_HASH_CODE)]
    DigestFormat,
    /// A snapshot manifest value was not a canonical digest.
    #[error("REPOSITORY_PATCH_MANIFEST_HASH: {}", Untrusted::quoted(.path))]
    #[coded(foreign = vocab::MANIFEST_HASH_CODE)]
    ManifestHash { path: String },
    /// The approval document failed its model validation.
    #[error("REPOSITORY_PATCH_CONTEXT_INVALID: {detail}")]
    ContextInvalid { detail: String },
    /// The snapshot evidence document failed its model validation.
    #[error("REPOSITORY_PATCH_SNAPSHOT_INVALID: {detail}")]
    SnapshotInvalid { detail: String },
    #[error("REPOSITORY_PATCH_CONTEXT_VERSION: unsupported execution context")]
    ContextVersion,
    #[error("REPOSITORY_PATCH_SNAPSHOT_IDENTITY: snapshot does not match approval")]
    SnapshotIdentity,
    #[error("REPOSITORY_PATCH_SELECTION: {detail}")]
    #[coded(code = SELECTION_CODE)]
    Selection { detail: &'static str },
    #[error("REPOSITORY_PATCH_GRANTS: {detail}")]
    Grants { detail: &'static str },
    /// The host path guard refused a path.
    #[error("REPOSITORY_PATCH_HOST_POLICY: {} is protected by host policy", Untrusted::quoted(.path))]
    HostPolicy { path: String },
    #[error("REPOSITORY_PATCH_BASELINE_SET: baseline files must match selected paths")]
    BaselineSet,
    #[error("REPOSITORY_PATCH_MANIFEST_COLLISION: baseline paths collide")]
    ManifestCollision,
    #[error("REPOSITORY_PATCH_SECRET_PATH: {}", Untrusted::quoted(.path))]
    SecretPath { path: String },
    #[error("REPOSITORY_PATCH_ENV_TEMPLATE: {} needs a names-only content gate", Untrusted::quoted(.path))]
    EnvTemplate { path: String },
    /// A changed secrets manifest declared a value. The value is never part of the message.
    #[error("REPOSITORY_PATCH_SECRET_CONTRACT: {} must stay names-only", Untrusted::quoted(.path))]
    SecretContract { path: String },
    #[error("REPOSITORY_PATCH_CREATE_EXISTS: {}", Untrusted::quoted(.path))]
    CreateExists { path: String },
    #[error("REPOSITORY_PATCH_CREATE_PROOF: {detail}")]
    CreateProof { detail: String },
    #[error("REPOSITORY_PATCH_SCOPE: {} is not editable", Untrusted::quoted(.path))]
    Scope { path: String },
    #[error("REPOSITORY_PATCH_BASELINE_HASH: {} differs from approved snapshot", Untrusted::quoted(.path))]
    BaselineHash { path: String },
    #[error("REPOSITORY_PATCH_INSPECTION_BUDGET: {detail}")]
    InspectionBudget { detail: &'static str },
    #[error("REPOSITORY_PATCH_INSPECTION_SELECTION: paths exceed limit or repeat")]
    InspectionSelection,
    #[error("REPOSITORY_PATCH_INSPECTION_SET: files differ from selected paths")]
    InspectionSet,
    #[error("REPOSITORY_PATCH_INSPECTION_SCOPE: {} is not approved read-only context", Untrusted::quoted(.path))]
    InspectionScope { path: String },
    /// The host policy file could not be read or parsed.
    #[error("REPOSITORY_PATCH_POLICY_CONFIG: {detail}")]
    PolicyConfig { detail: String },
    /// The repository is missing or not a Git repository.
    #[error("REPOSITORY_SNAPSHOT_REPOSITORY: {detail}")]
    Repository { detail: String },
    /// The commit is malformed or does not name a commit in the repository.
    #[error("REPOSITORY_SNAPSHOT_COMMIT: {detail}")]
    Commit { detail: String },
    /// Running or reading `git` failed (environment problem).
    #[error("REPOSITORY_SNAPSHOT_GIT: {detail}")]
    #[coded(environment)]
    Git { detail: String },
    /// A requested path is not a manifest file of the snapshot.
    #[error("REPOSITORY_SNAPSHOT_PATH: {} is not a manifest file at the commit", Untrusted::quoted(.path))]
    SnapshotPath { path: String },
    /// A path an `approve` flag names cannot be granted as given (not in the tree at the commit,
    /// not a portable path, outside the scopes it needs).
    #[error("PATCH_CANDIDATE_APPROVE_PATH: {flag} {}: {reason}", Untrusted::quoted(.path))]
    #[coded(usage)]
    ApprovePath {
        flag: &'static str,
        path: String,
        reason: &'static str,
    },
    /// Two `approve` grants collide: the same path (case-folded), or one inside the other.
    #[error(
        "PATCH_CANDIDATE_APPROVE_GRANTS: {flag} {} collides with {other_flag} {} ({reason})",
        Untrusted::quoted(.path),
        Untrusted::quoted(.other)
    )]
    #[coded(usage)]
    ApproveGrants {
        flag: &'static str,
        path: String,
        other_flag: &'static str,
        other: String,
        reason: &'static str,
    },
    /// `approve --commit` does not name a commit of the repository.
    #[error("PATCH_CANDIDATE_APPROVE_COMMIT: --commit {}: {reason}", Untrusted::quoted(.rev))]
    #[coded(usage)]
    ApproveCommit { rev: String, reason: String },
    /// An `approve` text flag (task, ids) is empty or otherwise unusable.
    #[error("PATCH_CANDIDATE_APPROVE_VALUE: {flag} {reason}")]
    #[coded(usage)]
    ApproveValue {
        flag: &'static str,
        reason: &'static str,
    },
}

impl SnapshotError {
    /// True for failures of the environment (git missing or past its deadline, I/O) rather than
    /// of the input: the same answer as [`vocab::Coded::class`].
    #[must_use]
    pub fn is_environment(&self) -> bool {
        vocab::Coded::class(self) == vocab::FailureClass::Environment
    }

    /// `REPOSITORY_PATCH_UNSAFE_PATH` for `path`.
    #[must_use]
    pub fn unsafe_path(path: &str, reason: PathRejection) -> Self {
        Self::UnsafePath {
            path: path.to_owned(),
            reason,
        }
    }
}

impl From<Collision> for SnapshotError {
    fn from(_: Collision) -> Self {
        Self::ManifestCollision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::{Coded as _, FailureClass};

    /// One sample of every variant (the all-variants test fails until a new variant has one).
    fn samples() -> Vec<SnapshotError> {
        let path = || "app/x.py".to_owned();
        vec![
            SnapshotError::unsafe_path("../x", PathRejection::Traversal),
            SnapshotError::DigestFormat,
            SnapshotError::ManifestHash { path: path() },
            SnapshotError::ContextInvalid {
                detail: "field required".to_owned(),
            },
            SnapshotError::SnapshotInvalid {
                detail: "field required".to_owned(),
            },
            SnapshotError::ContextVersion,
            SnapshotError::SnapshotIdentity,
            SnapshotError::Selection { detail: "empty" },
            SnapshotError::Grants {
                detail: "duplicate",
            },
            SnapshotError::HostPolicy { path: path() },
            SnapshotError::BaselineSet,
            SnapshotError::ManifestCollision,
            SnapshotError::SecretPath { path: path() },
            SnapshotError::EnvTemplate { path: path() },
            SnapshotError::SecretContract { path: path() },
            SnapshotError::CreateExists { path: path() },
            SnapshotError::CreateProof {
                detail: "a directory exists at the path".to_owned(),
            },
            SnapshotError::Scope { path: path() },
            SnapshotError::BaselineHash { path: path() },
            SnapshotError::InspectionBudget { detail: "bytes" },
            SnapshotError::InspectionSelection,
            SnapshotError::InspectionSet,
            SnapshotError::InspectionScope { path: path() },
            SnapshotError::PolicyConfig {
                detail: "malformed policy file".to_owned(),
            },
            SnapshotError::Repository {
                detail: "not a git repository".to_owned(),
            },
            SnapshotError::Commit {
                detail: "commit not found in repository".to_owned(),
            },
            SnapshotError::Git {
                detail: "git ls-tree exceeded its deadline".to_owned(),
            },
            SnapshotError::SnapshotPath { path: path() },
            SnapshotError::ApprovePath {
                flag: "--allow",
                path: "a\u{1b}".to_owned(),
                reason: "matches nothing at the commit",
            },
            SnapshotError::ApproveGrants {
                flag: "--create",
                path: "a/b".to_owned(),
                other_flag: "--delete",
                other: "A".to_owned(),
                reason: "one is a directory of the other",
            },
            SnapshotError::ApproveCommit {
                rev: "main".to_owned(),
                reason: "no commit".to_owned(),
            },
            SnapshotError::ApproveValue {
                flag: "--task",
                reason: "must not be empty",
            },
        ]
    }

    #[test]
    fn every_variant_starts_with_its_code_once() {
        let samples = samples();
        // Also the table: the digest codes are the vocabulary's (`vocab::MANIFEST_HASH_CODE`).
        vocab::check_coded_samples(&samples).unwrap();
        for e in &samples {
            assert_eq!(e.is_environment(), e.class() == FailureClass::Environment);
        }
    }

    /// Only git failures are the environment's and only `approve`'s flag errors are usage
    /// errors; the inherent and the trait answers agree.
    #[test]
    fn classes() {
        for e in samples() {
            let expected = match e {
                SnapshotError::Git { .. } => FailureClass::Environment,
                SnapshotError::ApprovePath { .. }
                | SnapshotError::ApproveGrants { .. }
                | SnapshotError::ApproveCommit { .. }
                | SnapshotError::ApproveValue { .. } => FailureClass::Usage,
                _ => FailureClass::Rejected,
            };
            assert_eq!(e.class(), expected, "{}", e.code());
        }
    }

    #[test]
    fn approve_messages_name_the_flag_and_escape_names() {
        let e = SnapshotError::ApprovePath {
            flag: "--allow",
            path: "a\u{1b}[2K\u{202e}".to_owned(),
            reason: "matches nothing at the commit",
        };
        assert_eq!(
            e.to_string(),
            "PATCH_CANDIDATE_APPROVE_PATH: --allow 'a\\x1b[2K\\u202e': matches nothing at the commit"
        );
    }

    /// Reference spelling for ordinary names (`{path!r}`), escapes for terminal controls and
    /// bidi/zero-width characters, and a cap on long names.
    #[test]
    fn r_untrusted_paths_are_quoted_python_style() {
        let plain = SnapshotError::Scope {
            path: "app/x.py".to_owned(),
        };
        assert_eq!(
            plain.to_string(),
            "REPOSITORY_PATCH_SCOPE: 'app/x.py' is not editable"
        );
        let hostile = SnapshotError::SecretPath {
            path: "a\u{1b}[2K\u{202e}\u{200b}.env".to_owned(),
        };
        assert_eq!(
            hostile.to_string(),
            "REPOSITORY_PATCH_SECRET_PATH: 'a\\x1b[2K\\u202e\\u200b.env'"
        );
        let long = SnapshotError::CreateExists {
            path: "a".repeat(4000),
        };
        assert!(long.to_string().len() < 300);
        assert!(long.to_string().ends_with("... (4000 characters)"));
    }
}
