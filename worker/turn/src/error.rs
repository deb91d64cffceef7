//! The crate's error type. Every variant has a stable wire code ([`TurnError::code`]); messages
//! never quote container output, Docker's own error text, or file contents.

use snapshot::SnapshotError;

use vocab::{Coded, FailureClass};

use container::{ContainerError, IdError, MAX_WALL_SECONDS, RuntimeError};

use crate::limits::MAX_TURN_ARCHIVE_BYTES;

/// `PATCH_CANDIDATE_LIVE_AGENT`: a live turn names an agent that is none of the built-in ones
/// (also the command line's code for `--agent`).
pub const LIVE_AGENT_CODE: &str = "PATCH_CANDIDATE_LIVE_AGENT";

/// Every code [`TurnError::code`] returns for the turn's own failures, for documentation and
/// contract tests. Wrapped errors keep their crate's code; a turn that ends without a proposal, an
/// unselectable scope and an unrecorded image ID use the codes of the finalizer
/// ([`finalizer::PROPOSAL_STATUS_CODE`]), the snapshot ([`snapshot::SELECTION_CODE`]) and the
/// Docker seam ([`container::EXPECTED_IMAGE_ID_CODE`]); a refusal of the model gateway keeps the
/// gateway's code.
pub const ERROR_CODES: &[&str] = TurnError::CODES;

/// Errors of the turn: its configuration and request, the container's output, staging,
/// finalising and the usage ledger; the Docker seam's own errors are wrapped unchanged.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum TurnError {
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
    #[error("REPOSITORY_DOCKER_REQUEST_BUDGET: stdin payload exceeds {limit} bytes")]
    RequestBudget { limit: usize },
    /// A live turn's container broke the framed stdio protocol (or one of its caps).
    #[error("{0}")]
    #[coded(delegate, rejected)]
    Tunnel(tunnel::TunnelError),
    /// stdout or stderr exceeded its cap while streaming.
    #[error("REPOSITORY_DOCKER_OUTPUT_LIMIT: {stream} exceeded {limit} bytes")]
    OutputLimit { stream: &'static str, limit: usize },
    /// The kernel OOM killer ended the turn.
    #[error("REPOSITORY_DOCKER_OOM: turn exceeded its memory limit")]
    OutOfMemory,
    /// The container exited non-zero.
    #[error("REPOSITORY_DOCKER_WORKER_FAILED: worker exited with status {status}")]
    WorkerFailed { status: i64 },
    /// The output failed the output contract. The cause is never quoted: it may contain source.
    #[error("REPOSITORY_DOCKER_INVALID_OUTPUT: {reason}")]
    InvalidOutput { reason: &'static str },
    /// The usage ledger could not be opened or written.
    #[error("REPOSITORY_USAGE_LEDGER: {detail}")]
    #[coded(environment)]
    Ledger { detail: String },
    /// A usage receipt argument was not host-owned or malformed.
    #[error("REPOSITORY_USAGE_IDENTITY: {field} is invalid")]
    UsageIdentity { field: &'static str },
    /// The turn ended without a completed proposal (nothing to stage).
    #[error("REPOSITORY_PATCH_PROPOSAL_STATUS: isolated coding turn reported {status}")]
    #[coded(foreign = finalizer::PROPOSAL_STATUS_CODE)]
    TurnNotCompleted { status: &'static str },
    /// A live turn ended without a completed proposal after the model gateway refused or cut one
    /// of its model requests: the gateway's own code (`PATCH_CANDIDATE_GATEWAY_*`, or the
    /// tunnel's backlog reset), the first such refusal of the turn.
    #[error("{code}: the model gateway refused or cut a model request; the turn reported {status}")]
    #[coded(field = code)]
    GatewayRefused {
        code: &'static str,
        status: &'static str,
    },
    /// Review feedback for a follow-up turn is malformed.
    #[error("PATCH_CANDIDATE_REVIEW_FEEDBACK: {detail}")]
    Feedback { detail: &'static str },
    /// The candidate a follow-up turn would continue is not one of this approval at this
    /// baseline, or its changes leave the approval's selection and grants.
    #[error("PATCH_CANDIDATE_FOLLOW_UP_PARENT: {detail}")]
    FollowUpParent { detail: &'static str },
    /// No editable file could be selected from the approval's scopes.
    #[error("REPOSITORY_PATCH_SELECTION: {detail}")]
    #[coded(foreign = snapshot::SELECTION_CODE)]
    Selection { detail: &'static str },
    /// No approved image ID was given and `image build` recorded none for the image: an
    /// environment failure of this host (the recorded build is missing), not of the input.
    #[error(
        "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID: no approved{} image id: pass --image-id or run `patch-candidate image build{}`",
        if .live_flags.is_some() { " live" } else { "" },
        .live_flags.unwrap_or("")
    )]
    #[coded(foreign = container::EXPECTED_IMAGE_ID_CODE, environment)]
    ImageNotRecorded {
        /// `None` for the proof image; a live image's `image build` flags
        /// ([`crate::Agent::image_build_flags`]).
        live_flags: Option<&'static str>,
    },
    /// A live turn named an agent that is none of the built-in ones.
    #[error("PATCH_CANDIDATE_LIVE_AGENT: unknown agent (codex, claude, gemini)")]
    #[coded(code = LIVE_AGENT_CODE)]
    UnknownAgent,
    /// An approval / selection check failed before any Docker call.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Staging the returned archive failed.
    #[error(transparent)]
    #[coded(usage_as_rejected)]
    Archive(#[from] archive::ArchiveError),
    /// Finalising, digesting or storing the candidate failed.
    #[error(transparent)]
    #[coded(usage_as_rejected)]
    Finalize(#[from] finalizer::FinalizeError),
    /// A Docker seam failure (connect, inspect, create, wait, remove, state directory).
    #[error(transparent)]
    #[coded(usage_as_rejected)]
    Container(#[from] ContainerError),
}

impl TurnError {
    /// A Docker call of `operation` that failed (other than by its deadline): the daemon gone, or
    /// the call refused.
    pub(crate) fn runtime(e: &RuntimeError, operation: &'static str) -> Self {
        Self::from(match e {
            RuntimeError::Unavailable => ContainerError::Unavailable { detail: operation },
            _ => ContainerError::CommandFailed { operation },
        })
    }

    /// True for failures of the environment (daemon unreachable, a Docker call failing, cleanup)
    /// rather than a rejection of the input or of the container's output.
    #[must_use]
    pub fn is_environment(&self) -> bool {
        self.class() == FailureClass::Environment
    }
}

impl From<IdError> for TurnError {
    fn from(e: IdError) -> Self {
        Self::Container(ContainerError::Id(e))
    }
}

impl From<state::StateError> for TurnError {
    fn from(e: state::StateError) -> Self {
        Self::Container(ContainerError::State(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One value of every variant. The match is exhaustive: a new variant fails to compile here
    /// until it has a sample, and then its message must follow the convention.
    fn samples() -> Vec<TurnError> {
        let name: container::ContainerName =
            format!("mozaiks-acp-{}", "a".repeat(32)).parse().unwrap();
        let all = vec![
            TurnError::from(IdError::ImageReference),
            TurnError::from(IdError::ExpectedImageId),
            TurnError::WallBudget,
            TurnError::ArchiveBudget,
            TurnError::FileBudget,
            TurnError::ContextRequired,
            TurnError::Container(ContainerError::ContextMismatch { field: "app_id" }),
            TurnError::RequestBudget { limit: 1 },
            TurnError::from(IdError::RuntimeName),
            TurnError::Container(ContainerError::RuntimeMismatch { field: "path" }),
            TurnError::Container(ContainerError::Unavailable { detail: "connect" }),
            TurnError::Container(ContainerError::CommandFailed { operation: "start" }),
            TurnError::from(IdError::ImageId),
            TurnError::Container(ContainerError::ImageIdMismatch),
            TurnError::Container(ContainerError::ImageMissing),
            TurnError::from(IdError::ContainerId),
            TurnError::Container(ContainerError::InspectFormat),
            TurnError::Container(ContainerError::IsolationMismatch { field: "Image" }),
            TurnError::OutputLimit {
                stream: "stdout",
                limit: 1,
            },
            TurnError::Container(ContainerError::Timeout { seconds: 1 }),
            TurnError::Tunnel(tunnel::TunnelError::NoResultEnd),
            TurnError::OutOfMemory,
            TurnError::WorkerFailed { status: 1 },
            TurnError::InvalidOutput { reason: "x" },
            TurnError::Container(ContainerError::CleanupFailed { name }),
            TurnError::Container(ContainerError::KilledExternally { status: 137 }),
            TurnError::Ledger {
                detail: "x".to_owned(),
            },
            TurnError::UsageIdentity { field: "app_id" },
            TurnError::TurnNotCompleted { status: "failed" },
            TurnError::GatewayRefused {
                code: "PATCH_CANDIDATE_GATEWAY_MODEL",
                status: "failed",
            },
            TurnError::Selection { detail: "x" },
            TurnError::Feedback { detail: "x" },
            TurnError::FollowUpParent { detail: "x" },
            TurnError::ImageNotRecorded { live_flags: None },
            TurnError::ImageNotRecorded {
                live_flags: Some(" --live"),
            },
            TurnError::ImageNotRecorded {
                live_flags: Some(" --live --agent gemini"),
            },
            TurnError::UnknownAgent,
            TurnError::Container(ContainerError::State(state::StateError::Unusable {
                detail: "x",
            })),
            TurnError::Snapshot(SnapshotError::ContextInvalid {
                detail: "x".to_owned(),
            }),
            TurnError::Archive(archive::ArchiveError::Set),
            TurnError::Finalize(finalizer::FinalizeError::Snapshot(
                SnapshotError::ContextInvalid {
                    detail: "x".to_owned(),
                },
            )),
        ];
        for e in &all {
            match e {
                TurnError::WallBudget
                | TurnError::ArchiveBudget
                | TurnError::FileBudget
                | TurnError::ContextRequired
                | TurnError::RequestBudget { .. }
                | TurnError::OutputLimit { .. }
                | TurnError::OutOfMemory
                | TurnError::WorkerFailed { .. }
                | TurnError::InvalidOutput { .. }
                | TurnError::Ledger { .. }
                | TurnError::UsageIdentity { .. }
                | TurnError::TurnNotCompleted { .. }
                | TurnError::GatewayRefused { .. }
                | TurnError::Selection { .. }
                | TurnError::Feedback { .. }
                | TurnError::FollowUpParent { .. }
                | TurnError::ImageNotRecorded { .. }
                | TurnError::UnknownAgent
                | TurnError::Tunnel(_)
                | TurnError::Container(_)
                | TurnError::Snapshot(_)
                | TurnError::Archive(_)
                | TurnError::Finalize(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_variant_follows_the_message_convention() {
        let all = samples();
        assert_eq!(all.len(), 41);
        vocab::check_coded_samples(&all).unwrap();
    }

    #[test]
    fn the_table_lists_every_own_code_once() {
        let samples = samples();
        let mut own = Vec::new();
        for e in &samples {
            match e {
                TurnError::Tunnel(_)
                | TurnError::Container(_)
                | TurnError::Snapshot(_)
                | TurnError::Archive(_)
                | TurnError::Finalize(_) => {}
                TurnError::GatewayRefused { code, .. } => assert!(
                    gateway::ERROR_CODES.contains(code) || tunnel::ERROR_CODES.contains(code),
                    "{code}"
                ),
                TurnError::TurnNotCompleted { .. } => {
                    assert_eq!(e.code(), finalizer::PROPOSAL_STATUS_CODE);
                }
                TurnError::Selection { .. } => assert_eq!(e.code(), snapshot::SELECTION_CODE),
                TurnError::ImageNotRecorded { .. } => {
                    assert_eq!(e.code(), container::EXPECTED_IMAGE_ID_CODE);
                }
                _ => own.push(e.code()),
            }
        }
        vocab::check_code_table(ERROR_CODES, own).unwrap();
    }

    #[test]
    fn failure_classes() {
        for e in samples() {
            let expected = match &e {
                TurnError::Container(
                    ContainerError::Unavailable { .. }
                    | ContainerError::CommandFailed { .. }
                    | ContainerError::ImageMissing
                    | ContainerError::CleanupFailed { .. }
                    | ContainerError::KilledExternally { .. }
                    | ContainerError::State(_),
                )
                | TurnError::Ledger { .. }
                | TurnError::ImageNotRecorded { .. } => FailureClass::Environment,
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
