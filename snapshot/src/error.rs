//! The crate's error type. Every variant has a stable wire code ([`SnapshotError::code`]); messages
//! name paths and limits but never quote file contents.

use crate::path::{Collision, PathRejection};

/// Errors from path, approval, snapshot and selection checks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// A path failed the canonical / portable profile.
    #[error("REPOSITORY_PATCH_UNSAFE_PATH: {path:?}: {reason}")]
    UnsafePath { path: String, reason: PathRejection },
    /// A digest was not `sha256:` + 64 lowercase hex.
    #[error("REPOSITORY_PATCH_MANIFEST_HASH: invalid sha256 digest")]
    DigestFormat,
    /// A snapshot manifest value was not a canonical digest.
    #[error("REPOSITORY_PATCH_MANIFEST_HASH: {path:?}")]
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
    /// The host path policy refused a path.
    #[error("REPOSITORY_PATCH_HOST_POLICY: {path:?} is protected by host policy")]
    HostPolicy { path: String },
    #[error("REPOSITORY_PATCH_BASELINE_SET: baseline files must match selected paths")]
    BaselineSet,
    #[error("REPOSITORY_PATCH_MANIFEST_COLLISION: baseline paths collide")]
    ManifestCollision,
    #[error("REPOSITORY_PATCH_SECRET_PATH: {path:?}")]
    SecretPath { path: String },
    #[error("REPOSITORY_PATCH_ENV_TEMPLATE: {path:?} needs a names-only content gate")]
    EnvTemplate { path: String },
    /// A changed secrets manifest declared a value. The value is never part of the message.
    #[error("REPOSITORY_PATCH_SECRET_CONTRACT: {path:?} must stay names-only")]
    SecretContract { path: String },
    #[error("REPOSITORY_PATCH_CREATE_EXISTS: {path:?}")]
    CreateExists { path: String },
    #[error("REPOSITORY_PATCH_CREATE_PROOF: {detail}")]
    CreateProof { detail: String },
    #[error("REPOSITORY_PATCH_SCOPE: {path:?} is not editable")]
    Scope { path: String },
    #[error("REPOSITORY_PATCH_BASELINE_HASH: {path:?} differs from approved snapshot")]
    BaselineHash { path: String },
    #[error("REPOSITORY_PATCH_INSPECTION_BUDGET: {detail}")]
    InspectionBudget { detail: &'static str },
    #[error("REPOSITORY_PATCH_INSPECTION_SELECTION: paths exceed limit or repeat")]
    InspectionSelection,
    #[error("REPOSITORY_PATCH_INSPECTION_SET: files differ from selected paths")]
    InspectionSet,
    #[error("REPOSITORY_PATCH_INSPECTION_SCOPE: {path:?} is not approved read-only context")]
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
    #[error("REPOSITORY_SNAPSHOT_PATH: {path:?} is not a manifest file at the commit")]
    SnapshotPath { path: String },
}

impl SnapshotError {
    /// The stable wire code (the message prefix before `": "`).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnsafePath { .. } => "REPOSITORY_PATCH_UNSAFE_PATH",
            Self::DigestFormat | Self::ManifestHash { .. } => "REPOSITORY_PATCH_MANIFEST_HASH",
            Self::ContextInvalid { .. } => "REPOSITORY_PATCH_CONTEXT_INVALID",
            Self::SnapshotInvalid { .. } => "REPOSITORY_PATCH_SNAPSHOT_INVALID",
            Self::ContextVersion => "REPOSITORY_PATCH_CONTEXT_VERSION",
            Self::SnapshotIdentity => "REPOSITORY_PATCH_SNAPSHOT_IDENTITY",
            Self::Selection { .. } => "REPOSITORY_PATCH_SELECTION",
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
        }
    }

    /// True for failures of the environment (git missing, I/O) rather than of the input.
    #[must_use]
    pub fn is_environment(&self) -> bool {
        matches!(self, Self::Git { .. })
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

impl crate::Coded for SnapshotError {
    fn code(&self) -> &'static str {
        SnapshotError::code(self)
    }

    fn class(&self) -> crate::FailureClass {
        if self.is_environment() {
            crate::FailureClass::Environment
        } else {
            crate::FailureClass::Rejected
        }
    }
}
