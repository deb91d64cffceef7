//! The narrow seam between orchestration and Docker (STYLE rule 9): [`ContainerRuntime`] with one
//! bollard implementation ([`crate::docker::BollardRuntime`]) and a recording fake in the tests.
//! Orchestration order, cleanup on every path and "no Docker call before validation" are tested
//! against the fake; everything else against the real daemon.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use bollard::models::{ContainerCreateBody, ContainerInspectResponse};
use futures::Stream;

use crate::ids::{ContainerName, ImageReference};
use crate::profile::RegisteredRuntime;

/// One chunk of container output, already demultiplexed by the daemon's frame headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputChunk {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

/// The attached stdin of a live container: kept open for frames until dropped or shut down.
pub type StdinWriter = Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// The attached output of a container.
pub type OutputStream = Pin<Box<dyn Stream<Item = Result<OutputChunk, RuntimeError>> + Send>>;

/// Why a runtime call failed. Docker's own message text is never kept: it can echo input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The daemon could not be reached.
    #[error("daemon unavailable")]
    Unavailable,
    /// The object does not exist (HTTP 404).
    #[error("no such object")]
    NotFound,
    /// The request conflicts with the object's state (HTTP 409).
    #[error("conflict")]
    Conflict,
    /// The request's own deadline passed.
    #[error("request timed out")]
    Timeout,
    /// Any other failure (HTTP status when there was one).
    #[error("request failed")]
    Failed { status: Option<u16> },
}

/// What the worker needs to know about an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFacts {
    /// The daemon's image ID, unvalidated.
    pub id: String,
    /// The image's `Config.Env`, unvalidated.
    pub env: Vec<String>,
}

/// A labelled turn container as the sweeper sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnContainer {
    pub id: String,
    pub names: Vec<String>,
    /// Creation time, seconds since the Unix epoch.
    pub created: i64,
    pub labels: HashMap<String, String>,
}

/// How a container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    pub code: i64,
}

/// Docker operations a turn and the sweeper need. Implementations must not read the ambient
/// environment (`DOCKER_HOST`, `DOCKER_CONFIG`, contexts, credentials).
pub trait ContainerRuntime: Send + Sync {
    /// `GET /images/{reference}/json`.
    fn inspect_image(
        &self,
        reference: &ImageReference,
    ) -> impl Future<Output = Result<ImageFacts, RuntimeError>> + Send;
    /// `POST /containers/create?name=…`; returns the raw container ID.
    fn create(
        &self,
        name: &ContainerName,
        body: &ContainerCreateBody,
    ) -> impl Future<Output = Result<String, RuntimeError>> + Send;
    /// `GET /containers/{id}/json`.
    fn inspect(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<ContainerInspectResponse, RuntimeError>> + Send;
    /// Attach to stdout and stderr (stream, no logs). Must be called before [`Self::start`].
    fn attach_output(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<OutputStream, RuntimeError>> + Send;
    /// `POST /containers/{id}/start`.
    fn start(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// Attach to stdin alone, write `payload`, then close the write side.
    fn write_stdin(
        &self,
        id: &str,
        payload: &[u8],
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// Attach to stdin alone and keep it open (a live turn's frames); dropping or shutting down
    /// the writer closes the container's stdin.
    fn attach_stdin(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<StdinWriter, RuntimeError>> + Send;
    /// Wait until the container is not running; the daemon's exit code is the authority.
    fn wait(&self, id: &str) -> impl Future<Output = Result<ExitStatus, RuntimeError>> + Send;
    /// `SIGKILL` the container.
    fn kill(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// The signals (as the daemon spells them, e.g. `9`) of every `kill` event the daemon
    /// recorded for container `id` from `since_unix` until now: who else signalled it.
    fn kill_events(
        &self,
        id: &str,
        since_unix: i64,
    ) -> impl Future<Output = Result<Vec<String>, RuntimeError>> + Send;
    /// Force-remove by name or ID (`NotFound` when it does not exist).
    fn remove(&self, name: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;
    /// Every container (any state) carrying the offline turn label.
    fn list_turns(&self) -> impl Future<Output = Result<Vec<TurnContainer>, RuntimeError>> + Send;
    /// The runtimes the daemon has registered (`GET /info`, `Runtimes`), by name.
    fn registered_runtimes(
        &self,
    ) -> impl Future<Output = Result<HashMap<String, RegisteredRuntime>, RuntimeError>> + Send;
}

/// A shared runtime is a runtime (so a guard can own a handle to a runtime that is not `Clone`).
impl<T: ContainerRuntime + ?Sized> ContainerRuntime for std::sync::Arc<T> {
    fn inspect_image(
        &self,
        reference: &ImageReference,
    ) -> impl Future<Output = Result<ImageFacts, RuntimeError>> + Send {
        (**self).inspect_image(reference)
    }
    fn create(
        &self,
        name: &ContainerName,
        body: &ContainerCreateBody,
    ) -> impl Future<Output = Result<String, RuntimeError>> + Send {
        (**self).create(name, body)
    }
    fn inspect(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<ContainerInspectResponse, RuntimeError>> + Send {
        (**self).inspect(id)
    }
    fn attach_output(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<OutputStream, RuntimeError>> + Send {
        (**self).attach_output(id)
    }
    fn start(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send {
        (**self).start(id)
    }
    fn write_stdin(
        &self,
        id: &str,
        payload: &[u8],
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send {
        (**self).write_stdin(id, payload)
    }
    fn attach_stdin(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<StdinWriter, RuntimeError>> + Send {
        (**self).attach_stdin(id)
    }
    fn wait(&self, id: &str) -> impl Future<Output = Result<ExitStatus, RuntimeError>> + Send {
        (**self).wait(id)
    }
    fn kill(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send {
        (**self).kill(id)
    }
    fn kill_events(
        &self,
        id: &str,
        since_unix: i64,
    ) -> impl Future<Output = Result<Vec<String>, RuntimeError>> + Send {
        (**self).kill_events(id, since_unix)
    }
    fn remove(&self, name: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send {
        (**self).remove(name)
    }
    fn list_turns(&self) -> impl Future<Output = Result<Vec<TurnContainer>, RuntimeError>> + Send {
        (**self).list_turns()
    }
    fn registered_runtimes(
        &self,
    ) -> impl Future<Output = Result<HashMap<String, RegisteredRuntime>, RuntimeError>> + Send {
        (**self).registered_runtimes()
    }
}
