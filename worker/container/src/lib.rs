//! The Docker seam of the trusted worker: the [`ContainerRuntime`] trait with its bollard
//! implementation ([`BollardRuntime`]) and a recording fake side by side (`testkit` feature), the
//! container spec and its pre-start verification, container names, labels and owners, the cleanup
//! guard that removes a container on every path, the abandoned-turn janitor, and the one deadline
//! every short Docker call runs under ([`docker_call`]).
//!
//! Modules are private; this list is the crate's surface.
//!
//! # Security
//! Only this crate talks to Docker, and only over a local Unix socket chosen by the operator; no
//! `DOCKER_*` setting, context or credential is ever read. Docker's own error text is never kept
//! (it can echo input): every failure is a [`ContainerError`] with a stable code.
#![forbid(unsafe_code)]

mod call;
mod cleanup;
mod death;
mod docker;
mod error;
mod ids;
mod janitor;
mod limits;
mod owner;
mod profile;
mod seam;
mod spec;
mod state;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use call::docker_call;
pub use cleanup::{ContainerGuard, settle_pending_removals};
pub use death::{Death, classify_exit};
pub use docker::{BollardRuntime, DEFAULT_DOCKER_SOCKET, DaemonFacts};
pub use error::{CLEANUP_FAILED_CODE, ContainerError, ERROR_CODES};
pub use ids::{
    ContainerId, ContainerName, EXPECTED_IMAGE_ID_CODE, IdError, ImageId, ImageReference,
    RuntimeName,
};
pub use janitor::{DEFAULT_GRACE, list_job_turns, remove_superseded_turns, sweep_abandoned_turns};
pub use limits::{CALL_TIMEOUT, CANCEL_CLEANUP_TIMEOUT, MAX_WALL_SECONDS, WALL_SLACK};
pub use owner::{
    ATTEMPT_LABEL_KEY, DEADLINE_LABEL_KEY, HOST_LABEL_KEY, JOB_LABEL_KEY, JOB_STORE_LABEL_KEY,
    JobBinding, ProcessIdentity, generate_attempt_id, local_owner,
};
pub use profile::{
    RUNC_PIDS_LIMIT, RUNSC, RUNSC_ARGS, RUNSC_PATH, RUNSC_PIDS_LIMIT, RegisteredRuntime,
    RuntimeProfile,
};
pub use seam::{
    ContainerRuntime, ExitStatus, ImageFacts, OutputChunk, OutputStream, RuntimeError, StdinWriter,
    TurnContainer,
};
pub use spec::{
    GateLimits, SpecInput, container_spec, security_opts, verify_container, verify_env,
    verify_gate_env,
};
