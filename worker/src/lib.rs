//! The trusted worker: Docker transport, container spec and pre-start verification, turn output
//! parsing, cleanup and sweeping, the usage ledger — and the `patch-candidate` command line.
//!
//! # Security
//! Only this crate talks to Docker, and only over a local Unix socket chosen by the operator; no
//! `DOCKER_*` setting, context or credential is ever read. Nothing the container prints is
//! trusted: see [`output`].
#![forbid(unsafe_code)]

pub mod docker;
pub mod error;
pub mod ids;
pub mod images;
pub mod janitor;
pub mod ledger;
pub mod output;
pub mod pipeline;
pub mod runtime;
pub mod spec;
#[cfg(test)]
mod testkit;
pub mod turn;
pub mod usage;

pub use docker::{BollardRuntime, DEFAULT_DOCKER_SOCKET};
pub use error::WorkerError;
pub use ids::{ContainerName, ImageId, ImageReference, RuntimeName};
pub use janitor::{SweepReport, sweep_abandoned_turns};
pub use ledger::{UsageIdentity, UsageLedger, record_isolated_acp_usage};
pub use output::{OutputLimits, VerifiedOutput, parse_turn_output};
pub use runtime::{ContainerRuntime, RuntimeError};
pub use turn::{
    CodingWorkerRequest, RepositoryDockerTurn, TurnApproval, TurnConfig,
    execute_repository_docker_turn,
};
pub use usage::{IsolatedAcpUsage, parse_isolated_acp_usage};
