//! The crate's error type. Every variant has a stable wire code ([`WorkerError::code`]); messages
//! never quote container output, Docker's own error text, or file contents.

use snapshot::{Coded, FailureClass, SnapshotError, Untrusted};

use crate::ids::ContainerName;
use crate::limits::{MAX_TURN_ARCHIVE_BYTES, MAX_WALL_SECONDS};

/// Errors of the Docker turn, the sweeper and the usage ledger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The image reference is not a fixed `name:tag` / `name@digest` reference.
    #[error("REPOSITORY_DOCKER_IMAGE: invalid fixed image reference")]
    ImageReference,
    /// The approved image ID is not `sha256:` + 64 lowercase hex.
    #[error("REPOSITORY_DOCKER_EXPECTED_IMAGE_ID: invalid approved image id")]
    ExpectedImageId,
    #[error(
        "REPOSITORY_DOCKER_WALL_BUDGET: wall budget must be 1..={} seconds",
        MAX_WALL_SECONDS
    )]
    WallBudget,
    #[error(
        "REPOSITORY_DOCKER_ARCHIVE_BUDGET: archive budget must be 1..={} bytes",
        MAX_TURN_ARCHIVE_BYTES
    )]
    ArchiveBudget,
    #[error("REPOSITORY_DOCKER_FILE_BUDGET: selected and created files must be 1..=50")]
    FileBudget,
    #[error("REPOSITORY_DOCKER_CONTEXT_REQUIRED: an approved context and snapshot are required")]
    ContextRequired,
    #[error("REPOSITORY_DOCKER_CONTEXT_MISMATCH: request does not match the approval ({field})")]
    ContextMismatch { field: &'static str },
    #[error("REPOSITORY_DOCKER_REQUEST_BUDGET: stdin payload exceeds {limit} bytes")]
    RequestBudget { limit: usize },
    /// The configured runtime name is not a plain identifier.
    #[error("REPOSITORY_DOCKER_RUNTIME: invalid runtime name")]
    RuntimeName,
    /// The daemon's registration of the configured runtime differs from its profile (for
    /// `runsc`: not registered, another binary, or other `runtimeArgs`).
    #[error(
        "REPOSITORY_DOCKER_RUNTIME_MISMATCH: registered runtime differs from its profile ({field})"
    )]
    RuntimeMismatch { field: &'static str },
    /// The daemon could not be reached (socket missing, refused, API negotiation failed).
    #[error("REPOSITORY_DOCKER_UNAVAILABLE: Docker daemon unavailable ({detail})")]
    Unavailable { detail: &'static str },
    /// A Docker call failed or returned an unexpected status.
    #[error("REPOSITORY_DOCKER_COMMAND_FAILED: {operation} failed")]
    CommandFailed { operation: &'static str },
    /// The resolved image ID is malformed.
    #[error("REPOSITORY_DOCKER_IMAGE_ID: daemon returned a malformed image id")]
    ImageId,
    /// The image tag no longer resolves to the approved image ID.
    #[error("REPOSITORY_DOCKER_IMAGE_ID_MISMATCH: image does not resolve to the approved id")]
    ImageIdMismatch,
    /// A live turn's container broke the framed stdio protocol (or one of its caps).
    #[error("{0}")]
    Tunnel(tunnel::TunnelError),
    /// The image does not exist locally (it is never pulled).
    #[error("REPOSITORY_DOCKER_IMAGE_MISSING: image is not present on the daemon")]
    ImageMissing,
    #[error("REPOSITORY_DOCKER_CONTAINER_ID: daemon returned a malformed container id")]
    ContainerId,
    #[error("REPOSITORY_DOCKER_INSPECT_FORMAT: container inspection has an unexpected shape")]
    InspectFormat,
    /// A pre-start inspection field differs from the container spec.
    #[error("REPOSITORY_DOCKER_ISOLATION_MISMATCH: {field}")]
    IsolationMismatch { field: &'static str },
    /// stdout or stderr exceeded its cap while streaming.
    #[error("REPOSITORY_DOCKER_OUTPUT_LIMIT: {stream} exceeded {limit} bytes")]
    OutputLimit { stream: &'static str, limit: usize },
    /// The wall deadline passed; the container was killed.
    #[error("REPOSITORY_DOCKER_TIMEOUT: turn exceeded {seconds} seconds")]
    Timeout { seconds: u64 },
    /// The kernel OOM killer ended the turn.
    #[error("REPOSITORY_DOCKER_OOM: turn exceeded its memory limit")]
    OutOfMemory,
    /// The container exited non-zero.
    #[error("REPOSITORY_DOCKER_WORKER_FAILED: worker exited with status {status}")]
    WorkerFailed { status: i64 },
    /// The output failed the output contract. The cause is never quoted: it may contain source.
    #[error("REPOSITORY_DOCKER_INVALID_OUTPUT: {reason}")]
    InvalidOutput { reason: &'static str },
    /// A container could not be removed (or its absence proven).
    #[error("REPOSITORY_DOCKER_CLEANUP_FAILED: container {name} could not be removed")]
    CleanupFailed { name: ContainerName },
    /// The usage ledger could not be opened or written.
    #[error("REPOSITORY_USAGE_LEDGER: {detail}")]
    Ledger { detail: String },
    /// A usage receipt argument was not host-owned or malformed.
    #[error("REPOSITORY_USAGE_IDENTITY: {field} is invalid")]
    UsageIdentity { field: &'static str },
    /// The turn ended without a completed proposal (nothing to stage).
    #[error("REPOSITORY_PATCH_PROPOSAL_STATUS: isolated coding turn reported {status}")]
    TurnNotCompleted { status: &'static str },
    /// No editable file could be selected from the approval's scopes.
    #[error("REPOSITORY_PATCH_SELECTION: {detail}")]
    Selection { detail: &'static str },
    /// Local state (staging directory, candidate store location) could not be prepared.
    #[error("PATCH_CANDIDATE_STATE: {detail}")]
    State { detail: &'static str },
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
    /// `finalize` was given part of one input form and part of the other.
    #[error("PATCH_CANDIDATE_FINALIZE_FLAGS: {detail}")]
    FinalizeFlags { detail: &'static str },
    /// `finalize --staged` without a proposal: an approved editable file is missing from the tree
    /// (only a granted delete may be missing).
    #[error(
        "PATCH_CANDIDATE_STAGED_INCOMPLETE: --staged lacks the approved editable file {}: the staged tree holds every editable file of the approval, changed or not (only --delete grants may be missing)",
        Untrusted::quoted(.path)
    )]
    StagedIncomplete { path: String },
    /// A digest flag is not `sha256:` followed by 64 lowercase hex digits.
    #[error(
        "PATCH_CANDIDATE_DIGEST_FLAG: {flag} must be sha256: followed by 64 lowercase hex digits"
    )]
    DigestFlag { flag: &'static str },
    /// An output file already exists and `--force` was not given.
    #[error(
        "PATCH_CANDIDATE_OUTPUT_EXISTS: {flag} names an existing file (pass --force to replace it)"
    )]
    OutputExists { flag: &'static str },
    /// An output file would land inside the source repository.
    #[error(
        "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY: {flag} is inside the repository named by --repo; nothing writes into the source repository"
    )]
    OutputInRepository { flag: &'static str },
    /// An output file could not be written (nothing is left half-written).
    #[error("PATCH_CANDIDATE_OUTPUT_WRITE: cannot write the {flag} file ({kind})")]
    OutputWrite {
        flag: &'static str,
        kind: std::io::ErrorKind,
    },
    /// An approval / selection check failed before any Docker call.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Staging the returned archive failed.
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    /// Finalising, digesting or storing the candidate failed.
    #[error(transparent)]
    Finalize(#[from] finalizer::FinalizeError),
}

impl WorkerError {
    /// The stable wire code (the message prefix before `": "`).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::ImageReference => "REPOSITORY_DOCKER_IMAGE",
            Self::ExpectedImageId => "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID",
            Self::WallBudget => "REPOSITORY_DOCKER_WALL_BUDGET",
            Self::ArchiveBudget => "REPOSITORY_DOCKER_ARCHIVE_BUDGET",
            Self::FileBudget => "REPOSITORY_DOCKER_FILE_BUDGET",
            Self::ContextRequired => "REPOSITORY_DOCKER_CONTEXT_REQUIRED",
            Self::ContextMismatch { .. } => "REPOSITORY_DOCKER_CONTEXT_MISMATCH",
            Self::RequestBudget { .. } => "REPOSITORY_DOCKER_REQUEST_BUDGET",
            Self::RuntimeName => "REPOSITORY_DOCKER_RUNTIME",
            Self::RuntimeMismatch { .. } => "REPOSITORY_DOCKER_RUNTIME_MISMATCH",
            Self::Unavailable { .. } => "REPOSITORY_DOCKER_UNAVAILABLE",
            Self::CommandFailed { .. } => "REPOSITORY_DOCKER_COMMAND_FAILED",
            Self::ImageId => "REPOSITORY_DOCKER_IMAGE_ID",
            Self::ImageIdMismatch => "REPOSITORY_DOCKER_IMAGE_ID_MISMATCH",
            Self::ImageMissing => "REPOSITORY_DOCKER_IMAGE_MISSING",
            Self::ContainerId => "REPOSITORY_DOCKER_CONTAINER_ID",
            Self::InspectFormat => "REPOSITORY_DOCKER_INSPECT_FORMAT",
            Self::IsolationMismatch { .. } => "REPOSITORY_DOCKER_ISOLATION_MISMATCH",
            Self::OutputLimit { .. } => "REPOSITORY_DOCKER_OUTPUT_LIMIT",
            Self::Timeout { .. } => "REPOSITORY_DOCKER_TIMEOUT",
            Self::Tunnel(e) => e.code(),
            Self::OutOfMemory => "REPOSITORY_DOCKER_OOM",
            Self::WorkerFailed { .. } => "REPOSITORY_DOCKER_WORKER_FAILED",
            Self::InvalidOutput { .. } => "REPOSITORY_DOCKER_INVALID_OUTPUT",
            Self::CleanupFailed { .. } => "REPOSITORY_DOCKER_CLEANUP_FAILED",
            Self::Ledger { .. } => "REPOSITORY_USAGE_LEDGER",
            Self::UsageIdentity { .. } => "REPOSITORY_USAGE_IDENTITY",
            Self::TurnNotCompleted { .. } => "REPOSITORY_PATCH_PROPOSAL_STATUS",
            Self::Selection { .. } => "REPOSITORY_PATCH_SELECTION",
            Self::State { .. } => "PATCH_CANDIDATE_STATE",
            Self::ApprovePath { .. } => "PATCH_CANDIDATE_APPROVE_PATH",
            Self::ApproveGrants { .. } => "PATCH_CANDIDATE_APPROVE_GRANTS",
            Self::ApproveCommit { .. } => "PATCH_CANDIDATE_APPROVE_COMMIT",
            Self::ApproveValue { .. } => "PATCH_CANDIDATE_APPROVE_VALUE",
            Self::FinalizeFlags { .. } => "PATCH_CANDIDATE_FINALIZE_FLAGS",
            Self::StagedIncomplete { .. } => "PATCH_CANDIDATE_STAGED_INCOMPLETE",
            Self::DigestFlag { .. } => "PATCH_CANDIDATE_DIGEST_FLAG",
            Self::OutputExists { .. } => "PATCH_CANDIDATE_OUTPUT_EXISTS",
            Self::OutputInRepository { .. } => "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY",
            Self::OutputWrite { .. } => "PATCH_CANDIDATE_OUTPUT_WRITE",
            Self::Snapshot(e) => e.code(),
            Self::Archive(e) => e.code(),
            Self::Finalize(e) => e.code(),
        }
    }

    /// True for failures of the environment (daemon unreachable, a Docker call failing, cleanup)
    /// rather than a rejection of the input or of the container's output.
    #[must_use]
    pub fn is_environment(&self) -> bool {
        self.class() == FailureClass::Environment
    }

    fn environment(&self) -> bool {
        match self {
            Self::Unavailable { .. }
            | Self::CommandFailed { .. }
            | Self::ImageMissing
            | Self::CleanupFailed { .. }
            | Self::Ledger { .. }
            | Self::State { .. }
            | Self::OutputWrite { .. } => true,
            Self::Snapshot(e) => e.is_environment(),
            Self::Archive(e) => e.is_environment(),
            Self::Finalize(e) => e.is_environment(),
            _ => false,
        }
    }
}

impl Coded for WorkerError {
    fn code(&self) -> &'static str {
        WorkerError::code(self)
    }

    fn class(&self) -> FailureClass {
        match self {
            Self::Snapshot(e) => Coded::class(e),
            Self::ApprovePath { .. }
            | Self::ApproveGrants { .. }
            | Self::ApproveCommit { .. }
            | Self::ApproveValue { .. }
            | Self::FinalizeFlags { .. }
            | Self::DigestFlag { .. }
            | Self::OutputExists { .. }
            | Self::OutputInRepository { .. } => FailureClass::Usage,
            _ if self.environment() => FailureClass::Environment,
            _ => FailureClass::Rejected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One value of every variant. The match is exhaustive: a new variant fails to compile here
    /// until it has a sample, and then its message must follow the convention.
    fn samples() -> Vec<WorkerError> {
        let name: ContainerName = format!("mozaiks-acp-{}", "a".repeat(32)).parse().unwrap();
        let all = vec![
            WorkerError::ImageReference,
            WorkerError::ExpectedImageId,
            WorkerError::WallBudget,
            WorkerError::ArchiveBudget,
            WorkerError::FileBudget,
            WorkerError::ContextRequired,
            WorkerError::ContextMismatch { field: "app_id" },
            WorkerError::RequestBudget { limit: 1 },
            WorkerError::RuntimeName,
            WorkerError::RuntimeMismatch { field: "path" },
            WorkerError::Unavailable { detail: "connect" },
            WorkerError::CommandFailed { operation: "start" },
            WorkerError::ImageId,
            WorkerError::ImageIdMismatch,
            WorkerError::ImageMissing,
            WorkerError::ContainerId,
            WorkerError::InspectFormat,
            WorkerError::IsolationMismatch { field: "Image" },
            WorkerError::OutputLimit {
                stream: "stdout",
                limit: 1,
            },
            WorkerError::Timeout { seconds: 1 },
            WorkerError::Tunnel(tunnel::TunnelError::NoResultEnd),
            WorkerError::OutOfMemory,
            WorkerError::WorkerFailed { status: 1 },
            WorkerError::InvalidOutput { reason: "x" },
            WorkerError::CleanupFailed { name },
            WorkerError::Ledger {
                detail: "x".to_owned(),
            },
            WorkerError::UsageIdentity { field: "app_id" },
            WorkerError::TurnNotCompleted { status: "failed" },
            WorkerError::Selection { detail: "x" },
            WorkerError::State { detail: "x" },
            WorkerError::ApprovePath {
                flag: "--allow",
                path: "a\u{1b}".to_owned(),
                reason: "matches nothing at the commit",
            },
            WorkerError::ApproveGrants {
                flag: "--create",
                path: "a/b".to_owned(),
                other_flag: "--delete",
                other: "A".to_owned(),
                reason: "one is a directory of the other",
            },
            WorkerError::ApproveCommit {
                rev: "main".to_owned(),
                reason: "no commit".to_owned(),
            },
            WorkerError::ApproveValue {
                flag: "--task",
                reason: "must not be empty",
            },
            WorkerError::FinalizeFlags { detail: "x" },
            WorkerError::StagedIncomplete {
                path: "a".to_owned(),
            },
            WorkerError::DigestFlag { flag: "--digest" },
            WorkerError::OutputExists { flag: "--out" },
            WorkerError::OutputInRepository { flag: "--out" },
            WorkerError::OutputWrite {
                flag: "--out",
                kind: std::io::ErrorKind::PermissionDenied,
            },
            WorkerError::Snapshot(SnapshotError::ContextInvalid {
                detail: "x".to_owned(),
            }),
            WorkerError::Archive(archive::ArchiveError::Set),
            WorkerError::Finalize(finalizer::FinalizeError::Snapshot(
                SnapshotError::ContextInvalid {
                    detail: "x".to_owned(),
                },
            )),
        ];
        for e in &all {
            match e {
                WorkerError::ImageReference
                | WorkerError::ExpectedImageId
                | WorkerError::WallBudget
                | WorkerError::ArchiveBudget
                | WorkerError::FileBudget
                | WorkerError::ContextRequired
                | WorkerError::ContextMismatch { .. }
                | WorkerError::RequestBudget { .. }
                | WorkerError::RuntimeName
                | WorkerError::RuntimeMismatch { .. }
                | WorkerError::Unavailable { .. }
                | WorkerError::CommandFailed { .. }
                | WorkerError::ImageId
                | WorkerError::ImageIdMismatch
                | WorkerError::ImageMissing
                | WorkerError::ContainerId
                | WorkerError::InspectFormat
                | WorkerError::IsolationMismatch { .. }
                | WorkerError::OutputLimit { .. }
                | WorkerError::Timeout { .. }
                | WorkerError::OutOfMemory
                | WorkerError::WorkerFailed { .. }
                | WorkerError::InvalidOutput { .. }
                | WorkerError::CleanupFailed { .. }
                | WorkerError::Ledger { .. }
                | WorkerError::UsageIdentity { .. }
                | WorkerError::TurnNotCompleted { .. }
                | WorkerError::Selection { .. }
                | WorkerError::State { .. }
                | WorkerError::ApprovePath { .. }
                | WorkerError::ApproveGrants { .. }
                | WorkerError::ApproveCommit { .. }
                | WorkerError::ApproveValue { .. }
                | WorkerError::FinalizeFlags { .. }
                | WorkerError::StagedIncomplete { .. }
                | WorkerError::DigestFlag { .. }
                | WorkerError::OutputExists { .. }
                | WorkerError::OutputInRepository { .. }
                | WorkerError::OutputWrite { .. }
                | WorkerError::Tunnel(_)
                | WorkerError::Snapshot(_)
                | WorkerError::Archive(_)
                | WorkerError::Finalize(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_variant_follows_the_message_convention() {
        let all = samples();
        assert_eq!(all.len(), 43);
        for e in &all {
            if let Err(violation) = snapshot::check_message_convention(e) {
                panic!("{violation}");
            }
        }
    }

    #[test]
    fn approve_messages_name_the_flag_and_escape_names() {
        let e = WorkerError::ApprovePath {
            flag: "--allow",
            path: "a\u{1b}[2K\u{202e}".to_owned(),
            reason: "matches nothing at the commit",
        };
        assert_eq!(
            e.to_string(),
            "PATCH_CANDIDATE_APPROVE_PATH: --allow 'a\\x1b[2K\\u202e': matches nothing at the commit"
        );
    }

    #[test]
    fn failure_classes() {
        for e in samples() {
            let expected = match &e {
                WorkerError::Unavailable { .. }
                | WorkerError::CommandFailed { .. }
                | WorkerError::ImageMissing
                | WorkerError::CleanupFailed { .. }
                | WorkerError::Ledger { .. }
                | WorkerError::State { .. }
                | WorkerError::OutputWrite { .. } => FailureClass::Environment,
                WorkerError::ApprovePath { .. }
                | WorkerError::ApproveGrants { .. }
                | WorkerError::ApproveCommit { .. }
                | WorkerError::ApproveValue { .. }
                | WorkerError::FinalizeFlags { .. }
                | WorkerError::DigestFlag { .. }
                | WorkerError::OutputExists { .. }
                | WorkerError::OutputInRepository { .. } => FailureClass::Usage,
                _ => FailureClass::Rejected,
            };
            assert_eq!(Coded::class(&e), expected, "{}", e.code());
            assert_eq!(
                e.is_environment(),
                expected == FailureClass::Environment,
                "{}",
                e.code()
            );
        }
    }
}
