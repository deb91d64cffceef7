//! The crate's error type. Every variant has a stable wire code ([`SnapshotError::code`]); messages
//! name paths and limits but never quote file contents. Paths and other untrusted names are shown
//! only through [`Untrusted`] (Python `repr` spelling, escaped, length-capped).

use crate::path::{Collision, PathRejection};
use vocab::Untrusted;

/// `REPOSITORY_PATCH_SELECTION`: the selection checks' code, also the turn's when no editable
/// file can be selected.
pub const SELECTION_CODE: &str = "REPOSITORY_PATCH_SELECTION";

/// Every code [`SnapshotError::code`] can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = &[
    "REPOSITORY_PATCH_UNSAFE_PATH",
    "REPOSITORY_PATCH_CONTEXT_INVALID",
    "REPOSITORY_PATCH_SNAPSHOT_INVALID",
    "REPOSITORY_PATCH_CONTEXT_VERSION",
    "REPOSITORY_PATCH_SNAPSHOT_IDENTITY",
    SELECTION_CODE,
    "REPOSITORY_PATCH_GRANTS",
    "REPOSITORY_PATCH_HOST_POLICY",
    "REPOSITORY_PATCH_BASELINE_SET",
    "REPOSITORY_PATCH_MANIFEST_COLLISION",
    "REPOSITORY_PATCH_SECRET_PATH",
    "REPOSITORY_PATCH_ENV_TEMPLATE",
    "REPOSITORY_PATCH_SECRET_CONTRACT",
    "REPOSITORY_PATCH_CREATE_EXISTS",
    "REPOSITORY_PATCH_CREATE_PROOF",
    "REPOSITORY_PATCH_SCOPE",
    "REPOSITORY_PATCH_BASELINE_HASH",
    "REPOSITORY_PATCH_INSPECTION_BUDGET",
    "REPOSITORY_PATCH_INSPECTION_SELECTION",
    "REPOSITORY_PATCH_INSPECTION_SET",
    "REPOSITORY_PATCH_INSPECTION_SCOPE",
    "REPOSITORY_PATCH_POLICY_CONFIG",
    "REPOSITORY_SNAPSHOT_REPOSITORY",
    "REPOSITORY_SNAPSHOT_COMMIT",
    "REPOSITORY_SNAPSHOT_GIT",
    "REPOSITORY_SNAPSHOT_PATH",
    "PATCH_CANDIDATE_APPROVE_PATH",
    "PATCH_CANDIDATE_APPROVE_GRANTS",
    "PATCH_CANDIDATE_APPROVE_COMMIT",
    "PATCH_CANDIDATE_APPROVE_VALUE",
];

/// Errors from path, approval, snapshot and selection checks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// A path failed the canonical / portable profile.
    #[error("REPOSITORY_PATCH_UNSAFE_PATH: {}: {reason}", Untrusted::quoted(.path))]
    UnsafePath { path: String, reason: PathRejection },
    /// A digest was not `sha256:` + 64 lowercase hex.
    #[error("REPOSITORY_PATCH_MANIFEST_HASH: invalid sha256 digest")]
    DigestFormat,
    /// A snapshot manifest value was not a canonical digest.
    #[error("REPOSITORY_PATCH_MANIFEST_HASH: {}", Untrusted::quoted(.path))]
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
    Git { detail: String },
    /// A requested path is not a manifest file of the snapshot.
    #[error("REPOSITORY_SNAPSHOT_PATH: {} is not a manifest file at the commit", Untrusted::quoted(.path))]
    SnapshotPath { path: String },
    /// A path an `approve` flag names cannot be granted as given (not in the tree at the commit,
    /// not a portable path, outside the scopes it needs).
    #[error("PATCH_CANDIDATE_APPROVE_PATH: {flag} {}: {reason}", Untrusted::quoted(.path))]
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
    ApproveGrants {
        flag: &'static str,
        path: String,
        other_flag: &'static str,
        other: String,
        reason: &'static str,
    },
    /// `approve --commit` does not name a commit of the repository.
    #[error("PATCH_CANDIDATE_APPROVE_COMMIT: --commit {}: {reason}", Untrusted::quoted(.rev))]
    ApproveCommit { rev: String, reason: String },
    /// An `approve` text flag (task, ids) is empty or otherwise unusable.
    #[error("PATCH_CANDIDATE_APPROVE_VALUE: {flag} {reason}")]
    ApproveValue {
        flag: &'static str,
        reason: &'static str,
    },
}

impl SnapshotError {
    /// The stable wire code (the message prefix before `": "`).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnsafePath { .. } => "REPOSITORY_PATCH_UNSAFE_PATH",
            Self::DigestFormat | Self::ManifestHash { .. } => vocab::MANIFEST_HASH_CODE,
            Self::ContextInvalid { .. } => "REPOSITORY_PATCH_CONTEXT_INVALID",
            Self::SnapshotInvalid { .. } => "REPOSITORY_PATCH_SNAPSHOT_INVALID",
            Self::ContextVersion => "REPOSITORY_PATCH_CONTEXT_VERSION",
            Self::SnapshotIdentity => "REPOSITORY_PATCH_SNAPSHOT_IDENTITY",
            Self::Selection { .. } => SELECTION_CODE,
            Self::Grants { .. } => "REPOSITORY_PATCH_GRANTS",
            Self::HostPolicy { .. } => "REPOSITORY_PATCH_HOST_POLICY",
            Self::BaselineSet => "REPOSITORY_PATCH_BASELINE_SET",
            Self::ManifestCollision => "REPOSITORY_PATCH_MANIFEST_COLLISION",
            Self::SecretPath { .. } => "REPOSITORY_PATCH_SECRET_PATH",
            Self::EnvTemplate { .. } => "REPOSITORY_PATCH_ENV_TEMPLATE",
            Self::SecretContract { .. } => "REPOSITORY_PATCH_SECRET_CONTRACT",
            Self::CreateExists { .. } => "REPOSITORY_PATCH_CREATE_EXISTS",
            Self::CreateProof { .. } => "REPOSITORY_PATCH_CREATE_PROOF",
            Self::Scope { .. } => "REPOSITORY_PATCH_SCOPE",
            Self::BaselineHash { .. } => "REPOSITORY_PATCH_BASELINE_HASH",
            Self::InspectionBudget { .. } => "REPOSITORY_PATCH_INSPECTION_BUDGET",
            Self::InspectionSelection => "REPOSITORY_PATCH_INSPECTION_SELECTION",
            Self::InspectionSet => "REPOSITORY_PATCH_INSPECTION_SET",
            Self::InspectionScope { .. } => "REPOSITORY_PATCH_INSPECTION_SCOPE",
            Self::PolicyConfig { .. } => "REPOSITORY_PATCH_POLICY_CONFIG",
            Self::Repository { .. } => "REPOSITORY_SNAPSHOT_REPOSITORY",
            Self::Commit { .. } => "REPOSITORY_SNAPSHOT_COMMIT",
            Self::Git { .. } => "REPOSITORY_SNAPSHOT_GIT",
            Self::SnapshotPath { .. } => "REPOSITORY_SNAPSHOT_PATH",
            Self::ApprovePath { .. } => "PATCH_CANDIDATE_APPROVE_PATH",
            Self::ApproveGrants { .. } => "PATCH_CANDIDATE_APPROVE_GRANTS",
            Self::ApproveCommit { .. } => "PATCH_CANDIDATE_APPROVE_COMMIT",
            Self::ApproveValue { .. } => "PATCH_CANDIDATE_APPROVE_VALUE",
        }
    }

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

impl vocab::Coded for SnapshotError {
    fn code(&self) -> &'static str {
        SnapshotError::code(self)
    }

    fn class(&self) -> vocab::FailureClass {
        match self {
            Self::Git { .. } => vocab::FailureClass::Environment,
            Self::ApprovePath { .. }
            | Self::ApproveGrants { .. }
            | Self::ApproveCommit { .. }
            | Self::ApproveValue { .. } => vocab::FailureClass::Usage,
            _ => vocab::FailureClass::Rejected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::{Coded as _, FailureClass, check_code_table};

    /// One sample of every variant. [`variant_index`] is an exhaustive `match`: a new variant does
    /// not compile until it has an index, and the all-variants test fails until it has a sample.
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

    const VARIANTS: usize = 32;

    fn variant_index(e: &SnapshotError) -> usize {
        match e {
            SnapshotError::UnsafePath { .. } => 0,
            SnapshotError::DigestFormat => 1,
            SnapshotError::ManifestHash { .. } => 2,
            SnapshotError::ContextInvalid { .. } => 3,
            SnapshotError::SnapshotInvalid { .. } => 4,
            SnapshotError::ContextVersion => 5,
            SnapshotError::SnapshotIdentity => 6,
            SnapshotError::Selection { .. } => 7,
            SnapshotError::Grants { .. } => 8,
            SnapshotError::HostPolicy { .. } => 9,
            SnapshotError::BaselineSet => 10,
            SnapshotError::ManifestCollision => 11,
            SnapshotError::SecretPath { .. } => 12,
            SnapshotError::EnvTemplate { .. } => 13,
            SnapshotError::SecretContract { .. } => 14,
            SnapshotError::CreateExists { .. } => 15,
            SnapshotError::CreateProof { .. } => 16,
            SnapshotError::Scope { .. } => 17,
            SnapshotError::BaselineHash { .. } => 18,
            SnapshotError::InspectionBudget { .. } => 19,
            SnapshotError::InspectionSelection => 20,
            SnapshotError::InspectionSet => 21,
            SnapshotError::InspectionScope { .. } => 22,
            SnapshotError::PolicyConfig { .. } => 23,
            SnapshotError::Repository { .. } => 24,
            SnapshotError::Commit { .. } => 25,
            SnapshotError::Git { .. } => 26,
            SnapshotError::SnapshotPath { .. } => 27,
            SnapshotError::ApprovePath { .. } => 28,
            SnapshotError::ApproveGrants { .. } => 29,
            SnapshotError::ApproveCommit { .. } => 30,
            SnapshotError::ApproveValue { .. } => 31,
        }
    }

    #[test]
    fn every_variant_starts_with_its_code_once() {
        let samples = samples();
        vocab::check_samples(&samples, VARIANTS, variant_index).unwrap();
        for e in &samples {
            assert_eq!(e.is_environment(), e.class() == FailureClass::Environment);
        }
    }

    #[test]
    fn the_table_lists_every_code_once() {
        let samples = samples();
        // The digest codes are the vocabulary's (`vocab::MANIFEST_HASH_CODE`).
        let own = samples
            .iter()
            .map(SnapshotError::code)
            .filter(|c| *c != vocab::MANIFEST_HASH_CODE);
        check_code_table(ERROR_CODES, own).unwrap();
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
