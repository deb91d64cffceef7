//! The bollard implementation of [`ContainerRuntime`]: the local Unix socket only, a per-request
//! timeout, and API version negotiation (Engine 20.10 speaks 1.41; current engines refuse < 1.44).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use bollard::container::{AttachContainerResults, LogOutput};
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, ContainerInspectResponse, SystemInfo};
use bollard::query_parameters::{
    AttachContainerOptions, AttachContainerOptionsBuilder, CreateContainerOptionsBuilder,
    EventsOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use crate::error::ContainerError;
use crate::ids::{ContainerName, ImageReference, TURN_LABEL_KEY, TURN_LABEL_VALUE};
use crate::profile::RegisteredRuntime;
use crate::seam::{
    ContainerRuntime, ExitStatus, ImageFacts, OutputChunk, OutputStream, RuntimeError, StdinWriter,
    TurnContainer,
};

/// The socket used when `--docker-socket` is not given. `DOCKER_HOST` is never consulted.
pub const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";
/// Per-request deadline for response headers (bollard's own timeout). Long streams (attach,
/// wait) are bounded separately by the turn's wall deadline.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Most `kill` events read back for one container (one is enough to decide).
const MAX_KILL_EVENTS: usize = 16;

/// A Docker client bound to one local Unix socket.
#[derive(Debug, Clone)]
pub struct BollardRuntime {
    docker: Docker,
    socket: PathBuf,
}

impl BollardRuntime {
    /// Connects to `socket` and negotiates the API version.
    ///
    /// # Errors
    /// `REPOSITORY_DOCKER_UNAVAILABLE` when the socket is missing, refuses the connection, or
    /// the version handshake fails or times out.
    pub async fn connect(socket: &Path) -> Result<Self, ContainerError> {
        let text = socket.to_str().ok_or(ContainerError::Unavailable {
            detail: "socket path",
        })?;
        let docker = Docker::connect_with_unix(
            text,
            REQUEST_TIMEOUT.as_secs(),
            bollard::API_DEFAULT_VERSION,
        )
        .map_err(|e| match e {
            BollardError::SocketNotFoundError(_) => ContainerError::Unavailable {
                detail: "socket not found",
            },
            _ => ContainerError::Unavailable { detail: "connect" },
        })?;
        let docker = tokio::time::timeout(REQUEST_TIMEOUT, docker.negotiate_version())
            .await
            .map_err(|_| ContainerError::Unavailable {
                detail: "version negotiation timed out",
            })?
            .map_err(|_| ContainerError::Unavailable {
                detail: "version negotiation",
            })?;
        Ok(Self {
            docker,
            socket: socket.to_path_buf(),
        })
    }

    /// The negotiated API version, e.g. `1.41`.
    #[must_use]
    pub fn api_version(&self) -> String {
        let v = self.docker.client_version();
        format!("{}.{}", v.major_version, v.minor_version)
    }

    /// The socket this client talks to.
    #[must_use]
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// One attach connection to `id` with `options`.
    async fn attach(
        &self,
        id: &str,
        options: AttachContainerOptions,
    ) -> Result<AttachContainerResults, RuntimeError> {
        self.docker
            .attach_container(id, Some(options))
            .await
            .map_err(|e| map_err(&e))
    }
}

fn map_err(e: &BollardError) -> RuntimeError {
    match e {
        BollardError::DockerResponseServerError {
            status_code: 404, ..
        } => RuntimeError::NotFound,
        BollardError::DockerResponseServerError {
            status_code: 409, ..
        } => RuntimeError::Conflict,
        BollardError::DockerResponseServerError { status_code, .. } => RuntimeError::Failed {
            status: Some(*status_code),
        },
        BollardError::RequestTimeoutError => RuntimeError::Timeout,
        BollardError::SocketNotFoundError(_) => RuntimeError::Unavailable,
        BollardError::HyperResponseError { .. } | BollardError::IOError { .. } => {
            RuntimeError::Unavailable
        }
        _ => RuntimeError::Failed { status: None },
    }
}

impl ContainerRuntime for BollardRuntime {
    async fn inspect_image(&self, reference: &ImageReference) -> Result<ImageFacts, RuntimeError> {
        let image = self
            .docker
            .inspect_image(reference.as_str())
            .await
            .map_err(|e| map_err(&e))?;
        Ok(ImageFacts {
            id: image.id.unwrap_or_default(),
            env: image.config.and_then(|c| c.env).unwrap_or_default(),
        })
    }

    async fn create(
        &self,
        name: &ContainerName,
        body: &ContainerCreateBody,
    ) -> Result<String, RuntimeError> {
        let options = CreateContainerOptionsBuilder::default()
            .name(name.as_str())
            .build();
        let created = self
            .docker
            .create_container(Some(options), body.clone())
            .await
            .map_err(|e| map_err(&e))?;
        Ok(created.id)
    }

    async fn inspect(&self, id: &str) -> Result<ContainerInspectResponse, RuntimeError> {
        self.docker
            .inspect_container(id, None)
            .await
            .map_err(|e| map_err(&e))
    }

    async fn attach_output(&self, id: &str) -> Result<OutputStream, RuntimeError> {
        let options = AttachContainerOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .stream(true)
            .build();
        let attached = self.attach(id, options).await?;
        // The input half of this connection is dropped unused: stdin has its own attach.
        let stream = attached.output.filter_map(|item| async move {
            match item {
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                    Some(Ok(OutputChunk::Stdout(message.to_vec())))
                }
                Ok(LogOutput::StdErr { message }) => {
                    Some(Ok(OutputChunk::Stderr(message.to_vec())))
                }
                Ok(LogOutput::StdIn { .. }) => None,
                Err(e) => Some(Err(map_err(&e))),
            }
        });
        Ok(Box::pin(stream))
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.docker
            .start_container(id, None)
            .await
            .map_err(|e| map_err(&e))
    }

    async fn write_stdin(&self, id: &str, payload: &[u8]) -> Result<(), RuntimeError> {
        let mut input = self.attach_stdin(id).await?;
        input
            .write_all(payload)
            .await
            .map_err(|_| RuntimeError::Failed { status: None })?;
        input
            .flush()
            .await
            .map_err(|_| RuntimeError::Failed { status: None })?;
        input
            .shutdown()
            .await
            .map_err(|_| RuntimeError::Failed { status: None })?;
        Ok(())
    }

    async fn attach_stdin(&self, id: &str) -> Result<StdinWriter, RuntimeError> {
        let options = AttachContainerOptionsBuilder::default()
            .stdin(true)
            .stream(true)
            .build();
        let attached = self.attach(id, options).await?;
        // The output half of this connection carries nothing (stdout/stderr have their own
        // attach) and is dropped.
        Ok(attached.input)
    }

    async fn wait(&self, id: &str) -> Result<ExitStatus, RuntimeError> {
        let options = WaitContainerOptionsBuilder::default()
            .condition("not-running")
            .build();
        let mut stream = self.docker.wait_container(id, Some(options));
        match stream.next().await {
            Some(Ok(response)) => Ok(ExitStatus {
                code: response.status_code,
            }),
            // bollard reports a non-zero exit as an error: it is an outcome, not a failure.
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => {
                Ok(ExitStatus { code })
            }
            Some(Err(e)) => Err(map_err(&e)),
            None => Err(RuntimeError::Failed { status: None }),
        }
    }

    async fn kill(&self, id: &str) -> Result<(), RuntimeError> {
        let options = KillContainerOptionsBuilder::default()
            .signal("SIGKILL")
            .build();
        self.docker
            .kill_container(id, Some(options))
            .await
            .map_err(|e| map_err(&e))
    }

    async fn kill_events(&self, id: &str, since_unix: i64) -> Result<Vec<String>, RuntimeError> {
        // `until` makes the daemon replay its recorded events and end the stream (no live tail);
        // one second past now, as the daemon's bound is exclusive at second granularity.
        let since = since_unix.to_string();
        let until = vocab::now_unix().saturating_add(1).to_string();
        let filters = HashMap::from([
            ("type", vec!["container"]),
            ("container", vec![id]),
            ("event", vec!["kill"]),
        ]);
        let options = EventsOptionsBuilder::default()
            .since(&since)
            .until(&until)
            .filters(&filters)
            .build();
        let mut stream = self.docker.events(Some(options));
        let mut signals = Vec::new();
        while let Some(item) = stream.next().await {
            let event = item.map_err(|e| map_err(&e))?;
            // The filter is the daemon's; the ID and action are checked again here.
            let actor = event.actor.unwrap_or_default();
            if event.action.as_deref() != Some("kill") || actor.id.as_deref() != Some(id) {
                continue;
            }
            // Bounded: one entry per recorded kill event; the daemon keeps a small ring of them.
            if signals.len() >= MAX_KILL_EVENTS {
                break;
            }
            let signal = actor
                .attributes
                .and_then(|mut a| a.remove("signal"))
                .unwrap_or_default();
            signals.push(signal);
        }
        Ok(signals)
    }

    async fn remove(&self, name: &str) -> Result<(), RuntimeError> {
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        self.docker
            .remove_container(name, Some(options))
            .await
            .map_err(|e| map_err(&e))
    }

    async fn list_turns(&self) -> Result<Vec<TurnContainer>, RuntimeError> {
        let label = format!("{TURN_LABEL_KEY}={TURN_LABEL_VALUE}");
        let filters = HashMap::from([("label", vec![label.as_str()])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let list = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| map_err(&e))?;
        Ok(list
            .into_iter()
            .map(|c| TurnContainer {
                id: c.id.unwrap_or_default(),
                names: c.names.unwrap_or_default(),
                created: c.created.unwrap_or_default(),
                labels: c.labels.unwrap_or_default(),
            })
            .collect())
    }

    async fn registered_runtimes(
        &self,
    ) -> Result<HashMap<String, RegisteredRuntime>, RuntimeError> {
        Ok(registered(&self.system_info().await?))
    }
}

fn registered(info: &SystemInfo) -> HashMap<String, RegisteredRuntime> {
    info.runtimes
        .iter()
        .flatten()
        .map(|(name, r)| {
            (
                name.clone(),
                RegisteredRuntime {
                    path: r.path.clone(),
                    args: r.runtime_args.clone().unwrap_or_default(),
                },
            )
        })
        .collect()
}

/// What the daemon says about itself (`GET /info`), for `patch-candidate doctor`. Every string
/// is the daemon's own, unvalidated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonFacts {
    /// `ServerVersion`.
    pub server_version: Option<String>,
    /// `CgroupVersion` (`1` or `2`).
    pub cgroup_version: Option<String>,
    /// `CgroupDriver` (`cgroupfs`, `systemd`).
    pub cgroup_driver: Option<String>,
    /// `SecurityOptions`, e.g. `name=seccomp,profile=default`, `name=apparmor`.
    pub security_options: Vec<String>,
    /// `DefaultRuntime`.
    pub default_runtime: Option<String>,
    /// `Runtimes`, by name.
    pub runtimes: HashMap<String, RegisteredRuntime>,
    /// `KernelVersion`.
    pub kernel_version: Option<String>,
}

impl BollardRuntime {
    async fn system_info(&self) -> Result<SystemInfo, RuntimeError> {
        self.docker.info().await.map_err(|e| map_err(&e))
    }

    /// The daemon's `/info`, reduced to what an operator needs to choose a runtime.
    ///
    /// # Errors
    /// `REPOSITORY_DOCKER_UNAVAILABLE` or `REPOSITORY_DOCKER_COMMAND_FAILED` when `/info` fails.
    pub async fn daemon_facts(&self) -> Result<DaemonFacts, ContainerError> {
        let info = self.system_info().await.map_err(|e| match e {
            RuntimeError::Unavailable => ContainerError::Unavailable { detail: "info" },
            _ => ContainerError::CommandFailed { operation: "info" },
        })?;
        Ok(DaemonFacts {
            server_version: info.server_version.clone(),
            cgroup_version: info.cgroup_version.map(|v| v.to_string()),
            cgroup_driver: info.cgroup_driver.map(|v| v.to_string()),
            security_options: info.security_options.clone().unwrap_or_default(),
            default_runtime: info.default_runtime.clone(),
            runtimes: registered(&info),
            kernel_version: info.kernel_version.clone(),
        })
    }
}
