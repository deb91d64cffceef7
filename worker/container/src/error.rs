//! The crate's error type: the Docker seam's `REPOSITORY_DOCKER_*` failures. Every variant has a
//! stable wire code ([`ContainerError::code`]); messages never quote Docker's own error text or
//! anything a container printed.

use vocab::{Coded, FailureClass};

use crate::ids::{ContainerName, EXPECTED_IMAGE_ID_CODE, IdError};

/// `REPOSITORY_DOCKER_CLEANUP_FAILED`: a container could not be removed (also `janitor`'s code).
pub const CLEANUP_FAILED_CODE: &str = "REPOSITORY_DOCKER_CLEANUP_FAILED";
/// Every code [`ContainerError::code`] and [`IdError::code`] can return, for documentation and
/// contract tests. The state directory's failures keep the `state` crate's code.
pub const ERROR_CODES: &[&str] = vocab::code_table!(
    &[
        "REPOSITORY_DOCKER_IMAGE",
        EXPECTED_IMAGE_ID_CODE,
        "REPOSITORY_DOCKER_RUNTIME",
        "REPOSITORY_DOCKER_IMAGE_ID",
        "REPOSITORY_DOCKER_CONTAINER_ID",
    ],
    ContainerError::CODES,
);

/// Errors of the Docker seam: connecting, image and container inspection, pre-start
/// verification, waiting, removal and the sweeper.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum ContainerError {
    /// An image reference, image ID, container ID or runtime name failed its constructor.
    #[error(transparent)]
    #[coded(rejected)]
    Id(#[from] IdError),
    /// A label value (job or attempt binding) is not host-owned.
    #[error("REPOSITORY_DOCKER_CONTEXT_MISMATCH: request does not match the approval ({field})")]
    ContextMismatch { field: &'static str },
    /// The daemon's registration of the configured runtime differs from its profile (for
    /// `runsc`: not registered, another binary, or other `runtimeArgs`).
    #[error(
        "REPOSITORY_DOCKER_RUNTIME_MISMATCH: registered runtime differs from its profile ({field})"
    )]
    RuntimeMismatch { field: &'static str },
    /// The daemon could not be reached (socket missing, refused, API negotiation failed).
    #[error("REPOSITORY_DOCKER_UNAVAILABLE: Docker daemon unavailable ({detail})")]
    #[coded(environment)]
    Unavailable { detail: &'static str },
    /// A Docker call failed or returned an unexpected status.
    #[error("REPOSITORY_DOCKER_COMMAND_FAILED: {operation} failed")]
    #[coded(environment)]
    CommandFailed { operation: &'static str },
    /// The image tag no longer resolves to the approved image ID.
    #[error("REPOSITORY_DOCKER_IMAGE_ID_MISMATCH: image does not resolve to the approved id")]
    ImageIdMismatch,
    /// The image does not exist locally (it is never pulled).
    #[error("REPOSITORY_DOCKER_IMAGE_MISSING: image is not present on the daemon")]
    #[coded(environment)]
    ImageMissing,
    #[error("REPOSITORY_DOCKER_INSPECT_FORMAT: container inspection has an unexpected shape")]
    InspectFormat,
    /// A pre-start inspection field differs from the container spec.
    #[error("REPOSITORY_DOCKER_ISOLATION_MISMATCH: {field}")]
    IsolationMismatch { field: &'static str },
    /// The wall deadline passed; the container was killed.
    #[error("REPOSITORY_DOCKER_TIMEOUT: turn exceeded {seconds} seconds")]
    Timeout { seconds: u64 },
    /// The container was signalled through the daemon by someone other than this host (an
    /// operator's `docker kill`, another tool) and its own limits do not explain its end: the
    /// environment's failure, not the container's.
    #[error(
        "REPOSITORY_DOCKER_KILLED_EXTERNALLY: container was killed from outside (status {status})"
    )]
    #[coded(environment)]
    KilledExternally { status: i64 },
    /// A container could not be removed (or its absence proven).
    #[error("REPOSITORY_DOCKER_CLEANUP_FAILED: container {name} could not be removed")]
    #[coded(code = CLEANUP_FAILED_CODE, environment)]
    CleanupFailed { name: ContainerName },
    /// Local state (the state directory) could not be located or prepared, or one of its
    /// records read (the `state` crate's code).
    #[error(transparent)]
    #[coded(environment)]
    State(#[from] state::StateError),
}

impl ContainerError {
    /// True for failures of the environment (daemon unreachable, a Docker call failing, a missing
    /// image, cleanup, local state) rather than a rejection.
    #[must_use]
    pub fn is_environment(&self) -> bool {
        Coded::class(self) == FailureClass::Environment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One value of every variant (the id errors included). The match is exhaustive: a new
    /// variant fails to compile here until it has a sample.
    fn samples() -> Vec<ContainerError> {
        let name: ContainerName = format!("mozaiks-acp-{}", "a".repeat(32)).parse().unwrap();
        let all = vec![
            ContainerError::Id(IdError::ImageReference),
            ContainerError::Id(IdError::ExpectedImageId),
            ContainerError::Id(IdError::RuntimeName),
            ContainerError::Id(IdError::ImageId),
            ContainerError::Id(IdError::ContainerId),
            ContainerError::ContextMismatch { field: "app_id" },
            ContainerError::RuntimeMismatch { field: "path" },
            ContainerError::Unavailable { detail: "connect" },
            ContainerError::CommandFailed { operation: "start" },
            ContainerError::ImageIdMismatch,
            ContainerError::ImageMissing,
            ContainerError::InspectFormat,
            ContainerError::IsolationMismatch { field: "Image" },
            ContainerError::Timeout { seconds: 1 },
            ContainerError::KilledExternally { status: 137 },
            ContainerError::CleanupFailed { name },
            ContainerError::State(state::StateError::Unusable { detail: "x" }),
        ];
        for e in &all {
            match e {
                ContainerError::Id(
                    IdError::ImageReference
                    | IdError::ExpectedImageId
                    | IdError::RuntimeName
                    | IdError::ImageId
                    | IdError::ContainerId,
                )
                | ContainerError::ContextMismatch { .. }
                | ContainerError::RuntimeMismatch { .. }
                | ContainerError::Unavailable { .. }
                | ContainerError::CommandFailed { .. }
                | ContainerError::ImageIdMismatch
                | ContainerError::ImageMissing
                | ContainerError::InspectFormat
                | ContainerError::IsolationMismatch { .. }
                | ContainerError::Timeout { .. }
                | ContainerError::KilledExternally { .. }
                | ContainerError::CleanupFailed { .. }
                | ContainerError::State(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_variant_follows_the_message_convention() {
        let all = samples();
        assert_eq!(all.len(), 17);
        vocab::check_coded_samples(&all).unwrap();
    }

    #[test]
    fn the_table_lists_every_code_once() {
        let samples = samples();
        // The state directory's errors keep the state crate's code.
        let own = samples
            .iter()
            .filter(|e| !matches!(e, ContainerError::State(_)))
            .map(ContainerError::code);
        vocab::check_code_table(ERROR_CODES, own).unwrap();
    }

    #[test]
    fn failure_classes() {
        // Environment: this host's daemon, image store or state; everything else is a rejection.
        let environment = [
            "REPOSITORY_DOCKER_UNAVAILABLE",
            "REPOSITORY_DOCKER_COMMAND_FAILED",
            "REPOSITORY_DOCKER_IMAGE_MISSING",
            "REPOSITORY_DOCKER_KILLED_EXTERNALLY",
            "REPOSITORY_DOCKER_CLEANUP_FAILED",
            "PATCH_CANDIDATE_STATE",
        ];
        for e in samples() {
            let expected = if environment.contains(&e.code()) {
                FailureClass::Environment
            } else {
                FailureClass::Rejected
            };
            assert_eq!(
                (Coded::class(&e), e.is_environment()),
                (expected, expected == FailureClass::Environment),
                "{}",
                e.code()
            );
        }
    }
}
