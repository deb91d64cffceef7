//! The service's error type: its own stable codes, and the codes of the crates it drives
//! (snapshot, turn, finaliser, job store) passed through unchanged.

use vocab::{Coded, FailureClass};

/// Publication is not configured on this host (no `serve --publish-remote`).
pub(crate) const PUBLISH_DISABLED_CODE: &str = "PATCH_CANDIDATE_SERVICE_PUBLISH_DISABLED";

/// Every code `ServiceError::code` returns for the service's own failures (wrapped errors keep
/// their crate's code), then the HTTP API's own refusals, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = &[
    "PATCH_CANDIDATE_SERVICE_REPOSITORY",
    "PATCH_CANDIDATE_SERVICE_REPOSITORY_UNREACHABLE",
    "PATCH_CANDIDATE_SERVICE_GIT",
    "PATCH_CANDIDATE_SERVICE_STATE",
    "PATCH_CANDIDATE_SERVICE_LOCKED",
    "PATCH_CANDIDATE_SERVICE_BINDING",
    "PATCH_CANDIDATE_SERVICE_SPEC",
    "PATCH_CANDIDATE_SERVICE_LISTEN",
    "PATCH_CANDIDATE_SERVICE_CANCELLED",
    "PATCH_CANDIDATE_SERVICE_LIVE_UNAVAILABLE",
    "PATCH_CANDIDATE_SERVICE_LIVE_MODEL",
    "PATCH_CANDIDATE_SERVICE_LIVE_AGENT",
    "PATCH_CANDIDATE_SERVICE_GATES_UNAVAILABLE",
    // The HTTP API's own refusals (answered without a `ServiceError`).
    "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED",
    "PATCH_CANDIDATE_SERVICE_NOT_READY",
    "PATCH_CANDIDATE_SERVICE_DRAINING",
    "PATCH_CANDIDATE_SERVICE_BUSY",
    "PATCH_CANDIDATE_SERVICE_ROUTE",
    "PATCH_CANDIDATE_SERVICE_METHOD",
    "PATCH_CANDIDATE_SERVICE_CONTENT_TYPE",
    "PATCH_CANDIDATE_SERVICE_BODY",
    "PATCH_CANDIDATE_SERVICE_BODY_TIMEOUT",
    "PATCH_CANDIDATE_SERVICE_QUERY",
    PUBLISH_DISABLED_CODE,
];

/// Errors of `patch-candidate serve`, the submission checks and the HTTP API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A repository locator is not an absolute path or a supported URL.
    #[error("PATCH_CANDIDATE_SERVICE_REPOSITORY: {detail}")]
    Repository { detail: &'static str },
    /// The repository could not be cloned or fetched, or lacks the pinned commit.
    #[error(
        "PATCH_CANDIDATE_SERVICE_REPOSITORY_UNREACHABLE: the repository cannot be fetched at the pinned commit"
    )]
    Unreachable,
    /// git could not be run.
    #[error("PATCH_CANDIDATE_SERVICE_GIT: {detail}")]
    Git { detail: &'static str },
    /// The service's local state (state directory, mirrors, staging, lock) is unusable.
    #[error("PATCH_CANDIDATE_SERVICE_STATE: {detail}")]
    State { detail: &'static str },
    /// Another `serve` holds this state directory.
    #[error("PATCH_CANDIDATE_SERVICE_LOCKED: another serve process uses this state directory")]
    Locked,
    /// A stored job does not match its own bindings (approval bytes, task hash, policy digest).
    #[error("PATCH_CANDIDATE_SERVICE_BINDING: {field} does not match the job's recorded digest")]
    Binding { field: &'static str },
    /// A submission or a stored job's selections are malformed.
    #[error("PATCH_CANDIDATE_SERVICE_SPEC: {detail}")]
    Spec { detail: &'static str },
    /// The HTTP listener cannot be set up as asked.
    #[error("PATCH_CANDIDATE_SERVICE_LISTEN: {detail}")]
    Listen { detail: &'static str },
    /// A job was cancelled while it ran.
    #[error("PATCH_CANDIDATE_SERVICE_CANCELLED: the job was cancelled while it ran")]
    Cancelled,
    /// A live job was claimed by a host without live settings (`serve --live-upstream`).
    #[error(
        "PATCH_CANDIDATE_SERVICE_LIVE_UNAVAILABLE: this host has no live settings (serve --live-upstream)"
    )]
    LiveUnavailable,
    /// A live job's model is not in this host's gateway allowlist.
    #[error(
        "PATCH_CANDIDATE_SERVICE_LIVE_MODEL: the job's model is not in this host's gateway config"
    )]
    LiveModel,
    /// A live job's agent is not the one this host's gateway serves (`serve --live-agent`).
    #[error(
        "PATCH_CANDIDATE_SERVICE_LIVE_AGENT: the job's agent is not the one this host's gateway serves"
    )]
    LiveAgent,
    /// A job requires a gate this host does not define (`serve --gates FILE`), or the host has no
    /// gate definitions: another host, or this one after its operator adds it, may run it.
    #[error(
        "PATCH_CANDIDATE_SERVICE_GATES_UNAVAILABLE: this host does not define a gate the job requires (serve --gates)"
    )]
    GatesUnavailable,
    /// A gate's host-side failure (tree, cache, Docker around the run), unchanged.
    #[error(transparent)]
    Gate(#[from] gate::GateError),
    /// This host's gateway cannot be set up for a live attempt (e.g. the credential is unreadable).
    #[error(transparent)]
    Gateway(#[from] gateway::GatewaySetupError),
    #[error(transparent)]
    Snapshot(#[from] snapshot::SnapshotError),
    #[error(transparent)]
    Turn(#[from] turn::TurnError),
    #[error(transparent)]
    Container(#[from] container::ContainerError),
    #[error(transparent)]
    Finalize(#[from] finalizer::FinalizeError),
    #[error(transparent)]
    Jobs(#[from] jobs::JobsError),
}

impl ServiceError {
    /// The stable wire code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Repository { .. } => "PATCH_CANDIDATE_SERVICE_REPOSITORY",
            Self::Unreachable => "PATCH_CANDIDATE_SERVICE_REPOSITORY_UNREACHABLE",
            Self::Git { .. } => "PATCH_CANDIDATE_SERVICE_GIT",
            Self::State { .. } => "PATCH_CANDIDATE_SERVICE_STATE",
            Self::Locked => "PATCH_CANDIDATE_SERVICE_LOCKED",
            Self::Binding { .. } => "PATCH_CANDIDATE_SERVICE_BINDING",
            Self::Spec { .. } => "PATCH_CANDIDATE_SERVICE_SPEC",
            Self::Listen { .. } => "PATCH_CANDIDATE_SERVICE_LISTEN",
            Self::Cancelled => "PATCH_CANDIDATE_SERVICE_CANCELLED",
            Self::LiveUnavailable => "PATCH_CANDIDATE_SERVICE_LIVE_UNAVAILABLE",
            Self::LiveModel => "PATCH_CANDIDATE_SERVICE_LIVE_MODEL",
            Self::LiveAgent => "PATCH_CANDIDATE_SERVICE_LIVE_AGENT",
            Self::GatesUnavailable => "PATCH_CANDIDATE_SERVICE_GATES_UNAVAILABLE",
            Self::Gate(e) => e.code(),
            Self::Gateway(e) => e.code(),
            Self::Snapshot(e) => e.code(),
            Self::Turn(e) => e.code(),
            Self::Container(e) => e.code(),
            Self::Finalize(e) => Coded::code(e),
            Self::Jobs(e) => e.code(),
        }
    }
}

impl From<container::IdError> for ServiceError {
    fn from(e: container::IdError) -> Self {
        Self::Container(e.into())
    }
}

impl Coded for ServiceError {
    fn code(&self) -> &'static str {
        ServiceError::code(self)
    }

    fn class(&self) -> FailureClass {
        match self {
            Self::Repository { .. } | Self::Listen { .. } => FailureClass::Usage,
            Self::Unreachable
            | Self::Git { .. }
            | Self::State { .. }
            | Self::Locked
            | Self::LiveUnavailable
            | Self::LiveModel
            | Self::LiveAgent
            | Self::GatesUnavailable => FailureClass::Environment,
            Self::Gate(e) => Coded::class(e),
            Self::Gateway(e) => Coded::class(e),
            Self::Binding { .. } | Self::Spec { .. } | Self::Cancelled => FailureClass::Rejected,
            Self::Snapshot(e) => Coded::class(e),
            Self::Turn(e) => Coded::class(e),
            Self::Container(e) => Coded::class(e),
            Self::Finalize(e) => Coded::class(e),
            Self::Jobs(e) => Coded::class(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_own_variant_starts_with_its_code_once() {
        for e in [
            ServiceError::Repository { detail: "x" },
            ServiceError::Unreachable,
            ServiceError::Git { detail: "x" },
            ServiceError::State { detail: "x" },
            ServiceError::Locked,
            ServiceError::Binding { field: "x" },
            ServiceError::Spec { detail: "x" },
            ServiceError::Listen { detail: "x" },
            ServiceError::Cancelled,
            ServiceError::LiveUnavailable,
            ServiceError::LiveModel,
            ServiceError::LiveAgent,
            ServiceError::GatesUnavailable,
        ] {
            vocab::check_message_convention(&e).unwrap();
            assert!(e.code().starts_with("PATCH_CANDIDATE_SERVICE_"));
            assert!(ERROR_CODES.contains(&e.code()), "{}", e.code());
        }
    }

    #[test]
    fn a_live_turn_refused_by_the_gateway_fails_the_job_with_the_gateway_code() {
        let e = ServiceError::Turn(turn::TurnError::GatewayRefused {
            code: "PATCH_CANDIDATE_GATEWAY_TOOL",
            status: "failed",
        });
        // The job event's code, and a rejection: the attempt fails, it is not retried.
        assert_eq!(e.code(), "PATCH_CANDIDATE_GATEWAY_TOOL");
        assert_eq!(Coded::class(&e), vocab::FailureClass::Rejected);
        vocab::check_message_convention(&e).unwrap();
    }
}
