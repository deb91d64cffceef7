//! The trusted worker: Docker transport, container spec and pre-start verification, turn output
//! parsing, cleanup and sweeping, the usage ledger — and the `patch-candidate` command line.
//!
//! A turn is a chain of owned, validated values: an approved request ([`CodingWorkerRequest`]
//! checked against a [`TurnApproval`], under a validated [`TurnConfig`]) → a container owned by a
//! guard that removes it on every path, cancellation included ([`settle_pending_removals`]) → the
//! parsed output → a staged tree removed when dropped → a candidate ([`run_pipeline`]).
//!
//! Modules are private; this list is the crate's surface.
//!
//! # Security
//! Only this crate talks to Docker, and only over a local Unix socket chosen by the operator; no
//! `DOCKER_*` setting, context or credential is ever read. Nothing the container prints is
//! trusted: see [`parse_turn_output`].
#![forbid(unsafe_code)]

mod cleanup;
mod config;
mod docker;
mod error;
pub mod fault;
mod ids;
mod images;
mod input;
mod janitor;
mod ledger;
mod limits;
mod live;
mod output;
mod owner;
mod pipeline;
mod request;
mod runtime;
mod runtime_profile;
pub mod service;
mod spec;
mod state;
#[cfg(test)]
mod testkit;
mod turn;
mod usage;

pub use cleanup::{remove_container, settle_pending_removals};
pub use config::TurnConfig;
pub use docker::{BollardRuntime, DEFAULT_DOCKER_SOCKET, DaemonFacts, REQUEST_TIMEOUT};
pub use error::WorkerError;
pub use ids::{
    CONTAINER_NAME_PREFIX, ContainerName, ImageId, ImageReference, RuntimeName, TURN_LABEL_KEY,
    TURN_LABEL_VALUE,
};
pub use images::{HOSTILE_IMAGE, ImagesState, LIVE_IMAGE, LiveImageState, PROOF_IMAGE};
pub use input::{BoundedReadError, open_regular_file, read_bounded_file};
pub use janitor::{
    DEFAULT_GRACE, JobTurn, LEGACY_LIFETIME, SweepReport, list_job_turns, remove_superseded_turns,
    sweep_abandoned_turns,
};
pub use ledger::{UsageIdentity, UsageLedger, UsageRecord, record_isolated_acp_usage};
pub use limits::{
    CALL_TIMEOUT, CANCEL_CLEANUP_TIMEOUT, DEFAULT_WALL_SECONDS, DRAIN_GRACE, MAX_REQUEST_BYTES,
    MAX_STDERR_BYTES, MAX_STDOUT_BYTES, MAX_TURN_ARCHIVE_BYTES, MAX_WALL_SECONDS, WALL_SLACK,
};
pub use live::{
    DEFAULT_LIVE_PORT, LiveContext, LiveEvent, LiveLog, LiveNote, LiveProgress, LiveSettings,
    STOP_GRACE, live_payload,
};
pub use output::{OutputLimits, VerifiedOutput, parse_turn_output};
pub use owner::{
    ATTEMPT_LABEL_KEY, AttemptId, DEADLINE_LABEL_KEY, HOST_LABEL_KEY, HostId, INSTANCE_LABEL_KEY,
    InstanceId, JOB_ATTEMPT_LABEL_KEY, JOB_LABEL_KEY, JOB_STORE_LABEL_KEY, JobBinding,
    OWNER_LABEL_KEY, PID_NAMESPACE_LABEL_KEY, PidNamespace, ProcessIdentity,
    SERVICE_HOST_LABEL_KEY, now_unix,
};
pub use pipeline::{
    PhaseTimings, PipelineOutcome, PipelineRequest, default_selection, run_live_pipeline,
    run_pipeline, staging_root, verify_pipeline_request,
};
pub use request::{
    BUILD_FAMILY, CHANGE_CLASS, CodingWorkerRequest, TurnApproval, stdin_payload,
    verify_turn_request,
};
pub use runtime::{
    ContainerRuntime, ExitStatus, ImageFacts, OutputChunk, OutputStream, RuntimeError, StdinWriter,
    TurnContainer,
};
pub use runtime_profile::{
    RUNC_PIDS_LIMIT, RUNSC, RUNSC_ARGS, RUNSC_PATH, RUNSC_PIDS_LIMIT, RegisteredRuntime,
    RuntimeProfile,
};
pub use state::state_dir;
pub use turn::{
    RepositoryDockerTurn, drain_output, execute_live_turn, execute_repository_docker_turn,
};
pub use usage::{IsolatedAcpUsage, parse_isolated_acp_usage};
