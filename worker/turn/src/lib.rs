//! One approved coding turn → one verified, digested patch candidate.
//!
//! What to run is lowered once into a [`TurnPlan`] (the image resolved against the `image build`
//! record, the [`TurnConfig`], the host policy, the selections) from the inputs of `run`,
//! `jobs submit`, the API and the service's re-verification.
//!
//! A turn is a chain of owned, validated values: an approved request ([`CodingWorkerRequest`]
//! bound with its approval as a [`snapshot::ApprovedTurn`], under a validated [`TurnConfig`]) → a container owned by the
//! container crate's guard, which removes it on every path → the parsed output (the output
//! contract, `parse_turn_output`) → a staged tree removed when dropped → a candidate
//! ([`run_pipeline`], or [`run_live_pipeline`] with the model gateway tunnelled over stdio). The
//! usage ledger, the image records and the fault-injection points of the crash tests live here
//! too.
//!
//! Modules are private; this list is the crate's surface.
//!
//! # Security
//! Nothing the container prints is trusted: see `parse_turn_output`. Docker is reached only
//! through the container crate's [`container::ContainerRuntime`] seam.
#![forbid(unsafe_code)]

mod acp_usage;
mod agent;
mod config;
mod docker_turn;
mod error;
pub mod fault;
mod feedback;
mod follow_up;
mod images;
mod ledger;
mod limits;
mod live_commands;
mod live_event_gate;
mod live_exchange;
mod live_inbox;
mod output;
mod pipeline;
mod plan;
mod request;
mod staged;
#[cfg(test)]
mod testkit;

pub use acp_usage::IsolatedAcpUsage;
pub use agent::Agent;
pub use config::{MAX_BUILD_TMP_MIB, TurnConfig};
pub use docker_turn::{RepositoryDockerTurn, execute_live_turn, execute_repository_docker_turn};
pub use error::{ERROR_CODES, LIVE_AGENT_CODE, TurnError};
pub use feedback::{FeedbackGate, MAX_FEEDBACK_EXCERPT_BYTES, ReviewFeedback, excerpt_tail};
pub use follow_up::{ParentCandidate, StartFrom, same_changes};
pub use images::{ImagesState, LiveEnvironment, LiveImageState};
pub use ledger::UsageLedger;
pub use limits::{DEFAULT_WALL_SECONDS, MAX_TURN_ARCHIVE_BYTES};
pub use live_commands::CommandCounts;
pub use live_exchange::{
    DEFAULT_LIVE_PORT, LiveContext, LiveLog, LiveNote, LiveProgress, LiveSettings,
};
pub use state::{BoundedReadError, open_regular_file, read_bounded_file};

pub use pipeline::{
    PipelineOutcome, PipelineRequest, PreparedTurn, default_selection, run_live_pipeline,
    run_pipeline, verified_evidence, verify_pipeline_request,
};
pub use plan::{
    ImageKind, MAX_PATH_GUARD_BYTES, PlanInputs, TurnPlan, host_path_guard,
    resolve_image_environment,
};
pub use request::{CodingWorkerRequest, stdin_payload};
