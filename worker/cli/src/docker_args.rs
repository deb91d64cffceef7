//! Options and plumbing shared by the Docker commands (`run`, `demo`, `janitor`, `image`).

use std::path::PathBuf;

use clap::Args;
use container::{BollardRuntime, DEFAULT_DOCKER_SOCKET};

use super::CliError;
use super::outcome::RUNTIME_CODE;

/// How to reach Docker: a local Unix socket, never `DOCKER_HOST` or a context.
#[derive(Debug, Clone, Args)]
pub(crate) struct DockerArgs {
    /// The Docker daemon's Unix socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_DOCKER_SOCKET)]
    pub docker_socket: PathBuf,
}

impl DockerArgs {
    pub(crate) async fn connect(&self) -> Result<BollardRuntime, CliError> {
        Ok(BollardRuntime::connect(&self.docker_socket).await?)
    }
}

/// A tokio runtime for one command.
pub(crate) fn tokio_runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|_| CliError::environment(RUNTIME_CODE, "cannot start the async runtime"))
}

/// The state directory (`PATCH_CANDIDATE_STATE_DIR` or `~/.local/state/patch-candidate`).
pub(crate) fn state_dir() -> Result<PathBuf, CliError> {
    Ok(state::StateDir::locate()?.into_path())
}
