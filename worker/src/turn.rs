//! `execute_repository_docker_turn` (reference §10): every argument and approval check before
//! any Docker call, then image inspect → create by ID → pre-start inspection → attach → start →
//! stdin → bounded output → exit status → output parsing, with removal by the generated name on
//! every path.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt as _;
use serde::Serialize;
use snapshot::{
    ApprovedExecutionContext, BaselineFiles, CreateAbsence, EXECUTION_CONTEXT_SCHEMA_VERSION,
    MAX_READ_ONLY_INSPECTION_BYTES, MAX_READ_ONLY_INSPECTION_FILES, MAX_REPOSITORY_FILES,
    PathPolicy, RepoPath, RepositorySnapshotEvidence, StagedPatchProposal, select_read_only_files,
    verify_selected_baseline,
};

use crate::error::WorkerError;
use crate::ids::{ContainerId, ContainerName, ImageId, ImageReference, RuntimeName};
use crate::output::{OutputLimits, parse_turn_output};
use crate::runtime::{ContainerRuntime, OutputChunk, OutputStream, RuntimeError};
use crate::spec::{SpecInput, container_spec, verify_container, verify_env};
use crate::usage::IsolatedAcpUsage;

/// Largest stdin payload (reference §10.3): 20 MiB.
pub const MAX_REQUEST_BYTES: usize = 20_971_520;
/// Largest stdout a turn may produce, enforced while streaming.
pub const MAX_STDOUT_BYTES: usize = 40_000_000;
/// Largest stderr a turn may produce (it is counted and discarded, never surfaced).
pub const MAX_STDERR_BYTES: usize = 1_048_576;
/// Largest archive a turn may return.
pub const MAX_TURN_ARCHIVE_BYTES: usize = 16_777_216;
/// Default wall budget of a turn, in seconds.
pub const DEFAULT_WALL_SECONDS: u64 = 90;
/// Extra time on top of the wall budget for attach, start and exit bookkeeping.
pub const WALL_SLACK: Duration = Duration::from_secs(10);
/// Deadline of short Docker calls (inspect, create, start, kill).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the output stream may stay open after `wait` reported the exit.
pub const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// The `build_family` every turn request carries.
pub const BUILD_FAMILY: &str = "app_bundle";
/// The `change_class` every turn request carries.
pub const CHANGE_CLASS: &str = "patch";

/// The operator's turn configuration (reference §10.2 steps 1–4). The image ID is pinned when an
/// operator approves a build; it is never taken from a request or resolved from the tag.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    pub image: ImageReference,
    pub expected_image_id: ImageId,
    pub max_wall_seconds: u64,
    pub max_archive_bytes: usize,
    pub runtime: Option<RuntimeName>,
    pub max_stdout_bytes: usize,
    pub max_stderr_bytes: usize,
}

impl TurnConfig {
    /// Validates the operator arguments in the reference order.
    ///
    /// # Errors
    /// `REPOSITORY_DOCKER_IMAGE`, `…_EXPECTED_IMAGE_ID`, `…_WALL_BUDGET`, `…_ARCHIVE_BUDGET`.
    pub fn new(
        image: &str,
        expected_image_id: &str,
        max_wall_seconds: u64,
        max_archive_bytes: usize,
    ) -> Result<Self, WorkerError> {
        let image = image.parse()?;
        let expected_image_id = expected_image_id.parse()?;
        if !(1..=3600).contains(&max_wall_seconds) {
            return Err(WorkerError::WallBudget);
        }
        if !(1..=MAX_TURN_ARCHIVE_BYTES).contains(&max_archive_bytes) {
            return Err(WorkerError::ArchiveBudget);
        }
        Ok(Self {
            image,
            expected_image_id,
            max_wall_seconds,
            max_archive_bytes,
            runtime: None,
            max_stdout_bytes: MAX_STDOUT_BYTES,
            max_stderr_bytes: MAX_STDERR_BYTES,
        })
    }

    /// Runs turns under `runtime` (e.g. `runsc`), verified by the pre-start inspection.
    #[must_use]
    pub fn with_runtime(mut self, runtime: Option<RuntimeName>) -> Self {
        self.runtime = runtime;
        self
    }
}

/// `CodingWorkerRequest`, the host-built request for one turn.
#[derive(Debug, Clone)]
pub struct CodingWorkerRequest {
    pub app_id: String,
    pub target_app_id: Option<String>,
    pub build_family: String,
    pub build_key: String,
    pub change_class: String,
    pub raw_user_request: String,
    /// Selected editable files (exact baseline text).
    pub files: BaselineFiles,
    /// Approved read-only inspection files.
    pub read_only_files: BaselineFiles,
}

impl CodingWorkerRequest {
    /// The request an approval describes, for `task` (which must equal the approved request).
    #[must_use]
    pub fn for_context(
        context: &ApprovedExecutionContext,
        task: &str,
        files: BaselineFiles,
        read_only_files: BaselineFiles,
    ) -> Self {
        Self {
            app_id: context.app_id().to_owned(),
            target_app_id: None,
            build_family: BUILD_FAMILY.to_owned(),
            build_key: context.build_registry_id().to_owned(),
            change_class: CHANGE_CLASS.to_owned(),
            raw_user_request: task.to_owned(),
            files,
            read_only_files,
        }
    }
}

/// The approval a turn runs under.
#[derive(Debug, Clone, Copy)]
pub struct TurnApproval<'a> {
    pub context: &'a ApprovedExecutionContext,
    pub snapshot: &'a RepositorySnapshotEvidence,
    pub policy: &'a dyn PathPolicy,
    pub create_absence: Option<&'a dyn CreateAbsence>,
}

/// The result of one turn: a sanitised proposal, the archive read strictly once (or the empty
/// marker) and the usage measurement, kept apart from the proposal.
#[derive(Debug, Clone)]
pub struct RepositoryDockerTurn {
    pub proposal: StagedPatchProposal,
    pub workspace_archive: Option<archive::VerifiedArchive>,
    pub usage: Option<IsolatedAcpUsage>,
    /// The generated container name (removed before this value exists).
    pub container_name: String,
}

/// The container's stdin document (reference §10.3), keys in this order.
#[derive(Debug, Serialize)]
struct StdinPayload<'a> {
    app_id: &'a str,
    build_family: &'a str,
    build_record_id: &'a str,
    change_class: &'a str,
    raw_user_request: &'a str,
    files: BTreeMap<&'a str, &'a str>,
    read_only_files: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    create_paths: Option<Vec<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delete_paths: Option<Vec<&'a str>>,
}

fn sorted_paths(paths: &[RepoPath]) -> Vec<&str> {
    let mut v: Vec<&str> = paths.iter().map(RepoPath::as_str).collect();
    v.sort_unstable();
    v
}

/// Serialises the stdin payload and applies its 20 MiB cap.
///
/// # Errors
/// `REPOSITORY_DOCKER_REQUEST_BUDGET`.
pub fn stdin_payload(
    request: &CodingWorkerRequest,
    context: &ApprovedExecutionContext,
) -> Result<Vec<u8>, WorkerError> {
    let grants = !context.create_paths().is_empty() || !context.delete_paths().is_empty();
    let doc = StdinPayload {
        app_id: &request.app_id,
        build_family: &request.build_family,
        build_record_id: &request.build_key,
        change_class: &request.change_class,
        raw_user_request: &request.raw_user_request,
        files: request
            .files
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        read_only_files: request
            .read_only_files
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        create_paths: grants.then(|| sorted_paths(context.create_paths())),
        delete_paths: grants.then(|| sorted_paths(context.delete_paths())),
    };
    let bytes = serde_json::to_vec(&doc).map_err(|_| WorkerError::RequestBudget {
        limit: MAX_REQUEST_BYTES,
    })?;
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(WorkerError::RequestBudget {
            limit: MAX_REQUEST_BYTES,
        });
    }
    Ok(bytes)
}

/// Reference §10.2 steps 6–8: budget, context match, baseline and read-only selection.
///
/// # Errors
/// `REPOSITORY_DOCKER_FILE_BUDGET`, `…_CONTEXT_MISMATCH`, or the selection's `REPOSITORY_PATCH_*`.
pub fn verify_turn_request(
    request: &CodingWorkerRequest,
    approval: &TurnApproval<'_>,
) -> Result<(), WorkerError> {
    let context = approval.context;
    let selected: Vec<RepoPath> = request.files.keys().cloned().collect();
    let total = selected.len() + context.create_paths().len();
    if !(1..=MAX_REPOSITORY_FILES).contains(&total)
        || !context
            .delete_paths()
            .iter()
            .all(|d| request.files.contains_key(d))
    {
        return Err(WorkerError::FileBudget);
    }
    let checks: [(bool, &'static str); 7] = [
        (
            context.schema_version() == EXECUTION_CONTEXT_SCHEMA_VERSION,
            "schema_version",
        ),
        (request.app_id == context.app_id(), "app_id"),
        (
            request
                .target_app_id
                .as_deref()
                .is_none_or(|t| t == context.app_id()),
            "target_app_id",
        ),
        (request.build_family == BUILD_FAMILY, "build_family"),
        (
            request.build_key == context.build_registry_id(),
            "build_key",
        ),
        (request.change_class == CHANGE_CLASS, "change_class"),
        (
            request.raw_user_request == context.raw_request(),
            "raw_user_request",
        ),
    ];
    if let Some((_, field)) = checks.iter().find(|(ok, _)| !ok) {
        return Err(WorkerError::ContextMismatch { field });
    }
    verify_selected_baseline(
        context,
        approval.snapshot,
        &selected,
        &request.files,
        approval.policy,
        approval.create_absence,
    )?;
    if !request.read_only_files.is_empty() {
        let read_only: Vec<RepoPath> = request.read_only_files.keys().cloned().collect();
        select_read_only_files(
            context,
            approval.snapshot,
            &read_only,
            &request.read_only_files,
            approval.policy,
            MAX_READ_ONLY_INSPECTION_FILES,
            MAX_READ_ONLY_INSPECTION_BYTES,
        )?;
    }
    Ok(())
}

/// `<pid>:<start ticks>` of this process, the owner label the sweeper checks for liveness.
#[must_use]
pub fn owner_token() -> String {
    let pid = std::process::id();
    format!(
        "{pid}:{}",
        crate::janitor::process_start_ticks(pid).unwrap_or(0)
    )
}

async fn call<T>(
    operation: &'static str,
    fut: impl Future<Output = Result<T, RuntimeError>>,
) -> Result<T, WorkerError> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Err(_) | Ok(Err(RuntimeError::Timeout)) => Err(WorkerError::Timeout {
            seconds: CALL_TIMEOUT.as_secs(),
        }),
        Ok(Err(RuntimeError::Unavailable)) => Err(WorkerError::Unavailable { detail: operation }),
        Ok(Err(_)) => Err(WorkerError::CommandFailed { operation }),
        Ok(Ok(v)) => Ok(v),
    }
}

/// Runs one offline coding turn.
///
/// # Errors
/// Any `REPOSITORY_DOCKER_*` code (see [`WorkerError`]) or an approval `REPOSITORY_PATCH_*` code.
/// A cleanup failure replaces the turn's own error (reference §10.8).
///
/// # Security
/// No Docker call happens before every argument and approval check has passed. The container is
/// created from the approved image ID, inspected field by field before start, and removed on
/// every path by its generated name. Nothing from the container's output is trusted.
pub async fn execute_repository_docker_turn<R: ContainerRuntime>(
    runtime: &R,
    request: &CodingWorkerRequest,
    approval: &TurnApproval<'_>,
    config: &TurnConfig,
) -> Result<RepositoryDockerTurn, WorkerError> {
    verify_turn_request(request, approval)?;
    let payload = stdin_payload(request, approval.context)?;
    let limits = OutputLimits::for_turn(request, approval.context, config.max_archive_bytes);

    let inspected =
        tokio::time::timeout(CALL_TIMEOUT, runtime.inspect_image(config.image.as_str())).await;
    let image = match inspected {
        Err(_) | Ok(Err(RuntimeError::Timeout)) => {
            return Err(WorkerError::Timeout {
                seconds: CALL_TIMEOUT.as_secs(),
            });
        }
        Ok(Err(RuntimeError::NotFound)) => return Err(WorkerError::ImageMissing),
        Ok(Err(RuntimeError::Unavailable)) => {
            return Err(WorkerError::Unavailable {
                detail: "image inspect",
            });
        }
        Ok(Err(_)) => {
            return Err(WorkerError::CommandFailed {
                operation: "image inspect",
            });
        }
        Ok(Ok(image)) => image,
    };
    let image_id = ImageId::from_daemon(image.id.trim())?;
    if image_id != config.expected_image_id {
        return Err(WorkerError::ImageIdMismatch);
    }
    verify_env(&image.env)?;

    let name = ContainerName::generate();
    let owner = owner_token();
    let spec_input = SpecInput {
        name: &name,
        image_id: &config.expected_image_id,
        owner: &owner,
        runtime: config.runtime.as_ref(),
    };
    let outcome = run_container(runtime, &spec_input, &payload, config).await;
    let removed = remove_container(runtime, &name).await;
    let stdout = match (outcome, removed) {
        (_, Err(e)) => return Err(e),
        (Err(e), Ok(())) => return Err(e),
        (Ok(stdout), Ok(())) => stdout,
    };
    let (proposal, workspace_archive, usage) = parse_turn_output(stdout, &limits)?.into_parts();
    Ok(RepositoryDockerTurn {
        proposal,
        workspace_archive,
        usage,
        container_name: name.as_str().to_owned(),
    })
}

/// Create → inspect → attach → start → stdin → drain + wait. Returns the complete stdout.
async fn run_container<R: ContainerRuntime>(
    runtime: &R,
    spec_input: &SpecInput<'_>,
    payload: &[u8],
    config: &TurnConfig,
) -> Result<Vec<u8>, WorkerError> {
    let body = container_spec(spec_input);
    let raw_id = call("create", runtime.create(spec_input.name.as_str(), &body)).await?;
    let id: ContainerId = raw_id.parse()?;
    let inspect = match tokio::time::timeout(CALL_TIMEOUT, runtime.inspect(id.as_str())).await {
        Err(_) => {
            return Err(WorkerError::Timeout {
                seconds: CALL_TIMEOUT.as_secs(),
            });
        }
        Ok(Err(RuntimeError::Unavailable)) => {
            return Err(WorkerError::Unavailable { detail: "inspect" });
        }
        Ok(Err(_)) => return Err(WorkerError::InspectFormat),
        Ok(Ok(v)) => v,
    };
    if inspect.id.as_deref() != Some(id.as_str()) {
        return Err(WorkerError::InspectFormat);
    }
    verify_container(&inspect, spec_input)?;

    let wall = Duration::from_secs(config.max_wall_seconds) + WALL_SLACK;
    let exchange = exchange(runtime, id.as_str(), payload, config);
    let stdout = match tokio::time::timeout(wall, exchange).await {
        Ok(result) => result?,
        Err(_) => {
            // Best effort: the forced removal that always follows kills it anyway.
            let _ = tokio::time::timeout(CALL_TIMEOUT, runtime.kill(id.as_str())).await;
            return Err(WorkerError::Timeout {
                seconds: config.max_wall_seconds,
            });
        }
    };
    let after = call("inspect", runtime.inspect(id.as_str())).await?;
    let state = after.state.as_ref();
    if state.and_then(|s| s.oom_killed) == Some(true) {
        return Err(WorkerError::OutOfMemory);
    }
    Ok(stdout)
}

/// Attach output before start, then feed stdin on its own attach while draining; `wait` decides.
async fn exchange<R: ContainerRuntime>(
    runtime: &R,
    id: &str,
    payload: &[u8],
    config: &TurnConfig,
) -> Result<Vec<u8>, WorkerError> {
    let output = call("attach", runtime.attach_output(id)).await?;
    call("start", runtime.start(id)).await?;
    let drain = drain_output(output, config.max_stdout_bytes, config.max_stderr_bytes);
    let waiter = async {
        // A container that exits without reading stdin breaks the pipe: the exit status and the
        // output contract decide, as with the reference CLI's ignored BrokenPipe.
        let _ = runtime.write_stdin(id, payload).await;
        runtime.wait(id).await
    };
    tokio::pin!(drain);
    tokio::pin!(waiter);
    let mut stdout = None;
    let status = loop {
        tokio::select! {
            drained = &mut drain, if stdout.is_none() => stdout = Some(drained?),
            waited = &mut waiter => break waited,
        }
    };
    let status = match status {
        Ok(s) => s,
        Err(RuntimeError::Unavailable) => return Err(WorkerError::Unavailable { detail: "wait" }),
        Err(_) => return Err(WorkerError::CommandFailed { operation: "wait" }),
    };
    let stdout = match stdout {
        Some(out) => out,
        None => match tokio::time::timeout(DRAIN_GRACE, &mut drain).await {
            Ok(drained) => drained?,
            Err(_) => {
                return Err(WorkerError::InvalidOutput {
                    reason: "output stream did not end",
                });
            }
        },
    };
    if status.code != 0 {
        if let Ok(Ok(after)) = tokio::time::timeout(CALL_TIMEOUT, runtime.inspect(id)).await
            && after.state.and_then(|s| s.oom_killed) == Some(true)
        {
            return Err(WorkerError::OutOfMemory);
        }
        return Err(WorkerError::WorkerFailed {
            status: status.code,
        });
    }
    Ok(stdout)
}

/// Reads the output stream to its end, keeping stdout up to `max_stdout` bytes and counting
/// (then discarding) stderr; either cap exceeded ends the turn while streaming.
///
/// # Errors
/// `REPOSITORY_DOCKER_OUTPUT_LIMIT`, or `REPOSITORY_DOCKER_COMMAND_FAILED` on a stream error.
pub async fn drain_output(
    mut output: OutputStream,
    max_stdout: usize,
    max_stderr: usize,
) -> Result<Vec<u8>, WorkerError> {
    let mut stdout = Vec::new();
    let mut stderr_len = 0_usize;
    while let Some(item) = output.next().await {
        match item {
            Ok(OutputChunk::Stdout(bytes)) => {
                if stdout.len().saturating_add(bytes.len()) > max_stdout {
                    return Err(WorkerError::OutputLimit {
                        stream: "stdout",
                        limit: max_stdout,
                    });
                }
                stdout.extend_from_slice(&bytes);
            }
            Ok(OutputChunk::Stderr(bytes)) => {
                stderr_len = stderr_len.saturating_add(bytes.len());
                if stderr_len > max_stderr {
                    return Err(WorkerError::OutputLimit {
                        stream: "stderr",
                        limit: max_stderr,
                    });
                }
            }
            Err(RuntimeError::Unavailable) => {
                return Err(WorkerError::Unavailable {
                    detail: "attach stream",
                });
            }
            Err(_) => {
                return Err(WorkerError::CommandFailed {
                    operation: "attach stream",
                });
            }
        }
    }
    Ok(stdout)
}

/// Force-removes `name`; `NotFound` means the create never happened (or it is already gone).
/// A removal already in progress is polled until the container is gone.
///
/// # Errors
/// `REPOSITORY_DOCKER_CLEANUP_FAILED`.
pub async fn remove_container<R: ContainerRuntime>(
    runtime: &R,
    name: &ContainerName,
) -> Result<(), WorkerError> {
    let failed = || WorkerError::CleanupFailed {
        name: name.as_str().to_owned(),
    };
    for _ in 0..20 {
        match tokio::time::timeout(CALL_TIMEOUT, runtime.remove(name.as_str())).await {
            Ok(Ok(()) | Err(RuntimeError::NotFound)) => return Ok(()),
            Ok(Err(RuntimeError::Conflict)) => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            _ => return Err(failed()),
        }
    }
    Err(failed())
}

#[cfg(test)]
#[path = "turn_tests.rs"]
mod tests;
