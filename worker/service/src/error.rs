//! The service's error type: its own stable codes, and the codes of the crates it drives
//! (snapshot, turn, finaliser, job store) passed through unchanged.

/// Publication is not configured on this host (no `serve --publish-remote`).
pub(crate) const PUBLISH_DISABLED_CODE: &str = "PATCH_CANDIDATE_SERVICE_PUBLISH_DISABLED";

/// Every code `ServiceError::code` returns for the service's own failures (wrapped errors keep
/// their crate's code), then the HTTP API's own refusals, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = vocab::code_table!(
    ServiceError::CODES,
    // The HTTP API's own refusals (answered without a `ServiceError`).
    &[
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
        "PATCH_CANDIDATE_SERVICE_USAGE_RANGE",
        PUBLISH_DISABLED_CODE,
    ],
);

/// Errors of `patch-candidate serve`, the submission checks and the HTTP API.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum ServiceError {
    /// A repository locator is not an absolute path or a supported URL.
    #[error("PATCH_CANDIDATE_SERVICE_REPOSITORY: {detail}")]
    #[coded(usage)]
    Repository { detail: &'static str },
    /// The repository could not be cloned or fetched, or lacks the pinned commit.
    #[error(
        "PATCH_CANDIDATE_SERVICE_REPOSITORY_UNREACHABLE: the repository cannot be fetched at the pinned commit"
    )]
    #[coded(environment)]
    Unreachable,
    /// git could not be run.
    #[error("PATCH_CANDIDATE_SERVICE_GIT: {detail}")]
    #[coded(environment)]
    Git { detail: &'static str },
    /// The service's local state (state directory, mirrors, staging, lock) is unusable.
    #[error("PATCH_CANDIDATE_SERVICE_STATE: {detail}")]
    #[coded(environment)]
    State { detail: &'static str },
    /// Another `serve` holds this state directory.
    #[error("PATCH_CANDIDATE_SERVICE_LOCKED: another serve process uses this state directory")]
    #[coded(environment)]
    Locked,
    /// A stored job does not match its own bindings (approval bytes, task hash, policy digest).
    #[error("PATCH_CANDIDATE_SERVICE_BINDING: {field} does not match the job's recorded digest")]
    Binding { field: &'static str },
    /// A submission or a stored job's selections are malformed.
    #[error("PATCH_CANDIDATE_SERVICE_SPEC: {detail}")]
    Spec { detail: &'static str },
    /// The HTTP listener cannot be set up as asked.
    #[error("PATCH_CANDIDATE_SERVICE_LISTEN: {detail}")]
    #[coded(usage)]
    Listen { detail: &'static str },
    /// A job was cancelled while it ran.
    #[error("PATCH_CANDIDATE_SERVICE_CANCELLED: the job was cancelled while it ran")]
    Cancelled,
    /// A live job was claimed by a host without live settings (`serve --live-upstream`).
    #[error(
        "PATCH_CANDIDATE_SERVICE_LIVE_UNAVAILABLE: this host has no live settings (serve --live-upstream)"
    )]
    #[coded(environment)]
    LiveUnavailable,
    /// A live job's model is not in this host's gateway allowlist.
    #[error(
        "PATCH_CANDIDATE_SERVICE_LIVE_MODEL: the job's model is not in this host's gateway config"
    )]
    #[coded(environment)]
    LiveModel,
    /// A live job's agent is not the one this host's gateway serves (`serve --live-agent`).
    #[error(
        "PATCH_CANDIDATE_SERVICE_LIVE_AGENT: the job's agent is not the one this host's gateway serves"
    )]
    #[coded(environment)]
    LiveAgent,
    /// A job requires a gate this host does not define (`serve --gates FILE`), or the host has no
    /// gate definitions: another host, or this one after its operator adds it, may run it.
    #[error(
        "PATCH_CANDIDATE_SERVICE_GATES_UNAVAILABLE: this host does not define a gate the job requires (serve --gates)"
    )]
    #[coded(environment)]
    GatesUnavailable,
    /// The caller's principal lacks the role the route or act needs (the role is named, never
    /// the token).
    #[error(
        "PATCH_CANDIDATE_SERVICE_FORBIDDEN: this needs the role '{role}', which the caller does not hold"
    )]
    Forbidden { role: jobs::Role },
    /// Two-person review (`serve --two-person-review`): the principal who submitted the job may
    /// not accept its candidate, and a job without a recorded submitter cannot be accepted.
    #[error("PATCH_CANDIDATE_SERVICE_TWO_PERSON: {detail} (serve --two-person-review)")]
    TwoPerson { detail: &'static str },
    /// The operator's repository policy file (`serve --repository-policy`) cannot be read or
    /// fails a check (the detail names the check and the rule's place, never the file's text).
    #[error("PATCH_CANDIDATE_SERVICE_POLICY_FILE: {detail}")]
    #[coded(usage)]
    PolicyFile { detail: String },
    /// A job or a publication is outside the operator's repository policy: the field named
    /// (`repository`, `allowed_paths`, `create_paths`, `delete_paths`, `agent`, `model`,
    /// `max_wall_seconds`, `max_archive_bytes`, `max_attempts`, `required_gates`,
    /// `publication.remote`, `base`, `branch`), never a value.
    #[error("PATCH_CANDIDATE_SERVICE_POLICY: the repository policy does not allow this {field}")]
    PolicyRefused { field: &'static str },
    /// A daily token quota of the repository policy is spent (`principal` or `repository`):
    /// refused at submit; a queued job waits at claim until the next UTC day or a higher quota.
    #[error(
        "PATCH_CANDIDATE_SERVICE_QUOTA: the {scope}'s daily token quota is spent (it resets at 00:00 UTC)"
    )]
    Quota { scope: &'static str },
    /// No forge of this name in the repository policy in force (or its secret is not loaded).
    #[error("PATCH_CANDIDATE_SERVICE_FORGE_UNKNOWN: no forge of this name is configured")]
    #[coded(usage)]
    ForgeUnknown,
    /// A forge delivery queued to start a job cannot become one (its forge or project left
    /// the policy, its trigger document is unreadable, the host lost it).
    #[error("PATCH_CANDIDATE_SERVICE_FORGE_TRIGGER: {detail}")]
    ForgeTrigger { detail: &'static str },
    /// A webhook delivery's verification or payload, unchanged.
    #[error(transparent)]
    Forge(#[from] forge::ForgeError),
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

impl From<container::IdError> for ServiceError {
    fn from(e: container::IdError) -> Self {
        Self::Container(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::Coded;

    #[test]
    fn every_variant_starts_with_its_code_once() {
        let all = [
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
            ServiceError::Forbidden {
                role: jobs::Role::Admin,
            },
            ServiceError::TwoPerson { detail: "x" },
            ServiceError::PolicyFile {
                detail: "x".to_owned(),
            },
            ServiceError::PolicyRefused { field: "x" },
            ServiceError::Quota { scope: "x" },
            ServiceError::ForgeUnknown,
            ServiceError::ForgeTrigger { detail: "x" },
            ServiceError::Forge(forge::ForgeError::SignatureWrong),
            ServiceError::Gate(gate::GateError::Runner),
            ServiceError::Gateway(gateway::GatewaySetupError::Tls),
            ServiceError::Snapshot(snapshot::SnapshotError::ContextVersion),
            ServiceError::Turn(turn::TurnError::FileBudget),
            ServiceError::Container(container::ContainerError::ImageMissing),
            ServiceError::Finalize(finalizer::FinalizeError::DigestPath),
            ServiceError::Jobs(jobs::JobsError::Corrupt { field: "state" }),
        ];
        vocab::check_coded_samples(&all).unwrap();
        for e in all.iter().filter(|e| vocab::CodedEnum::owns_code(*e)) {
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
