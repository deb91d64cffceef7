//! `execute_repository_docker_turn` (reference §10): every argument and approval check before
//! any Docker call, then image inspect → (under runsc) the daemon's runtime registration → create by ID → pre-start inspection → attach → start →
//! stdin → bounded output → exit status → output parsing.
//!
//! The container is owned by a [`ContainerGuard`] from before `create` until it is proven gone:
//! removed explicitly on success, error and timeout (a failed removal replaces the result), and
//! from `Drop` when the turn's future is cancelled. The whole turn, `create` included, runs under
//! one absolute deadline (wall budget plus slack), which its labels record for the sweeper.

use std::time::Duration;

use futures::StreamExt as _;
use snapshot::{ApprovedTurn, StagedPatchProposal};

use crate::acp_usage::IsolatedAcpUsage;
use crate::config::TurnConfig;
use crate::error::TurnError;
use crate::limits::DRAIN_GRACE;
use crate::live_exchange::{LiveContext, LiveLog, live_exchange, live_payload};
use crate::output::{OutputLimits, parse_turn_output};
use crate::request::{CodingWorkerRequest, stdin_payload, verify_turn_request};
use container::CALL_TIMEOUT;
use container::ContainerError;
use container::ContainerGuard;
use container::RuntimeProfile;
use container::docker_call;
use container::{ContainerId, ContainerName, ImageId};
use container::{ContainerRuntime, OutputChunk, OutputStream, RuntimeError};
use container::{Death, classify_exit};
use container::{SpecInput, container_spec, verify_container, verify_env};
use container::{generate_attempt_id, local_owner};
use vocab::{AttemptId, now_unix};

/// The result of one turn: a sanitised proposal, the verified-shape archive (or the empty
/// marker) and the usage measurement, kept apart from the proposal.
#[derive(Debug, Clone)]
pub struct RepositoryDockerTurn {
    pub proposal: StagedPatchProposal,
    pub workspace_archive: Option<archive::VerifiedArchive>,
    pub usage: Option<IsolatedAcpUsage>,
    /// The generated container name (removed before this value exists).
    pub container_name: ContainerName,
    /// The attempt id the container was labelled with.
    pub attempt: AttemptId,
}

/// Runs one offline coding turn.
///
/// # Errors
/// Any `REPOSITORY_DOCKER_*` code (see [`TurnError`]) or an approval `REPOSITORY_PATCH_*` code.
/// A cleanup failure replaces the turn's own error (reference §10.8).
///
/// # Security
/// No Docker call happens before every argument and approval check has passed. The container is
/// created from the approved image ID, inspected field by field before start, and removed on
/// every path by its generated name — including cancellation of this future (see
/// [`container::settle_pending_removals`]). Nothing from the container's output is trusted.
pub async fn execute_repository_docker_turn<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    request: &CodingWorkerRequest,
    approved: &ApprovedTurn<'_>,
    config: &TurnConfig,
) -> Result<RepositoryDockerTurn, TurnError> {
    execute_turn(runtime, request, approved, config, None)
        .await
        .map(|(turn, _)| turn)
}

/// Runs one live coding turn: the same checks, container, guard and output parsing as
/// [`execute_repository_docker_turn`], with the container's stdio carrying the framed protocol
/// (request, tunnelled model requests served by the gateway, result). The RESULT bytes are parsed
/// exactly like an offline turn's stdout.
///
/// # Errors
/// As [`execute_repository_docker_turn`], plus the `PATCH_CANDIDATE_TUNNEL_*` protocol codes.
///
/// # Security
/// As the offline turn; in addition nothing the container sends on the tunnel is trusted (see
/// [`tunnel::Session`]) and the gateway's credential never enters the container.
pub async fn execute_live_turn<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    request: &CodingWorkerRequest,
    approved: &ApprovedTurn<'_>,
    config: &TurnConfig,
    live: &LiveContext<'_>,
) -> Result<(RepositoryDockerTurn, LiveLog), TurnError> {
    let (turn, log) = execute_turn(runtime, request, approved, config, Some(live)).await?;
    Ok((turn, log.unwrap_or_default()))
}

async fn execute_turn<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    request: &CodingWorkerRequest,
    approved: &ApprovedTurn<'_>,
    config: &TurnConfig,
    live: Option<&LiveContext<'_>>,
) -> Result<(RepositoryDockerTurn, Option<LiveLog>), TurnError> {
    verify_turn_request(request, approved)?;
    let payload = stdin_payload(request, approved.context())?;
    let payload = match live {
        Some(live) => live_payload(&payload, live.settings)?,
        None => payload,
    };
    let limits = OutputLimits::for_turn(request, approved.context(), config.max_archive_bytes());

    let inspected = tokio::time::timeout(CALL_TIMEOUT, runtime.inspect_image(config.image())).await;
    let image = match inspected {
        Err(_) | Ok(Err(RuntimeError::Timeout)) => {
            return Err(TurnError::from(ContainerError::Timeout {
                seconds: CALL_TIMEOUT.as_secs(),
            }));
        }
        Ok(Err(RuntimeError::NotFound)) => {
            return Err(TurnError::from(ContainerError::ImageMissing));
        }
        Ok(Err(e)) => return Err(TurnError::runtime(&e, "image inspect")),
        Ok(Ok(image)) => image,
    };
    let image_id = ImageId::from_daemon(image.id.trim())?;
    if &image_id != config.expected_image_id() {
        return Err(TurnError::from(ContainerError::ImageIdMismatch));
    }
    verify_env(&image.env)?;
    // Under a runtime whose registration matters (runsc), the daemon's `/info` must list exactly
    // the expected binary and arguments before anything is created.
    let profile = RuntimeProfile::for_runtime(config.runtime());
    if profile.verifies_registration() {
        let registered = docker_call("info", runtime.registered_runtimes()).await?;
        profile.verify_registration(&registered)?;
    }

    let attempt = generate_attempt_id();
    // A live turn also has the grace after STOP.
    let lifetime = config.turn_lifetime() + live.map_or(Duration::ZERO, |l| l.settings.stop_grace);
    // Rounded up: the label never claims an earlier deadline than the one enforced below.
    let lifetime_secs = i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX);
    let deadline_unix = now_unix().saturating_add(lifetime_secs).saturating_add(1);
    let labels = local_owner()
        .turn_labels(&attempt, deadline_unix)
        .with_job(config.job());
    let mut guard = ContainerGuard::new(runtime, ContainerName::generate());
    let name = guard.name().clone();
    let spec_input = SpecInput {
        name: &name,
        image_id: config.expected_image_id(),
        labels: &labels,
        runtime: config.runtime(),
        gate: None,
        build_tmp_mib: config.build_tmp_mib(),
    };
    let run = run_container(runtime, &mut guard, &spec_input, &payload, config, live);
    let outcome = match tokio::time::timeout(lifetime, run).await {
        Ok(outcome) => outcome,
        Err(_) => {
            // Best effort: the forced removal that always follows kills it anyway.
            let _ = tokio::time::timeout(CALL_TIMEOUT, runtime.kill(name.as_str())).await;
            Err(TurnError::from(ContainerError::Timeout {
                seconds: config.max_wall_seconds(),
            }))
        }
    };
    let removed = guard.remove().await.map_err(TurnError::from);
    let (stdout, log) = match (outcome, removed) {
        (_, Err(e)) | (Err(e), Ok(())) => return Err(e),
        (Ok(out), Ok(())) => out,
    };
    let (proposal, workspace_archive, usage) = parse_turn_output(stdout, &limits)?.into_parts();
    Ok((
        RepositoryDockerTurn {
            proposal,
            workspace_archive,
            usage,
            container_name: name,
            attempt,
        },
        log,
    ))
}

/// Create → inspect → attach → start → stdin → drain + wait. Returns the complete stdout (for a
/// live turn: the RESULT bytes, and the tunnel's record).
async fn run_container<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    guard: &mut ContainerGuard<R>,
    spec_input: &SpecInput<'_>,
    payload: &[u8],
    config: &TurnConfig,
    live: Option<&LiveContext<'_>>,
) -> Result<(Vec<u8>, Option<LiveLog>), TurnError> {
    // The daemon's events are recorded by the second: one second early never misses a kill.
    let since = now_unix().saturating_sub(1);
    let body = container_spec(spec_input);
    let created = docker_call("create", runtime.create(spec_input.name, &body)).await;
    guard.confirm_created();
    let id: ContainerId = created?.parse()?;
    crate::fault::point(crate::fault::AFTER_CONTAINER_CREATE).await;
    let inspect = match tokio::time::timeout(CALL_TIMEOUT, runtime.inspect(id.as_str())).await {
        Err(_) => {
            return Err(TurnError::from(ContainerError::Timeout {
                seconds: CALL_TIMEOUT.as_secs(),
            }));
        }
        Ok(Err(RuntimeError::Unavailable)) => {
            return Err(TurnError::from(ContainerError::Unavailable {
                detail: "inspect",
            }));
        }
        Ok(Err(_)) => return Err(TurnError::from(ContainerError::InspectFormat)),
        Ok(Ok(v)) => v,
    };
    if inspect.id.as_deref() != Some(id.as_str()) {
        return Err(TurnError::from(ContainerError::InspectFormat));
    }
    verify_container(&inspect, spec_input)?;

    let (stdout, log) = match live {
        None => (
            exchange(runtime, id.as_str(), payload, config, since).await?,
            None,
        ),
        Some(live) => {
            let exchanged = live_exchange(runtime, id.as_str(), payload, config, live).await;
            let (result, log) = match exchanged {
                Ok(v) => v,
                // A container that died under the protocol broke it: its death is the cause.
                Err(e) => return Err(died_first(runtime, id.as_str(), since).await.unwrap_or(e)),
            };
            let status = docker_call("wait", runtime.wait(id.as_str())).await?;
            if status.code != 0 {
                return Err(nonzero_exit(runtime, id.as_str(), status.code, since).await);
            }
            (result, Some(log))
        }
    };
    let after = docker_call("inspect", runtime.inspect(id.as_str())).await?;
    let state = after.state.as_ref();
    if state.and_then(|s| s.oom_killed) == Some(true) {
        return Err(TurnError::OutOfMemory);
    }
    Ok((stdout, log))
}

/// Attach output before start, then feed stdin on its own attach while draining; `wait` decides.
async fn exchange<R: ContainerRuntime>(
    runtime: &R,
    id: &str,
    payload: &[u8],
    config: &TurnConfig,
    since: i64,
) -> Result<Vec<u8>, TurnError> {
    let output = docker_call("attach", runtime.attach_output(id)).await?;
    docker_call("start", runtime.start(id)).await?;
    crate::fault::point(crate::fault::MID_TURN).await;
    let drain = drain_output(output, config.max_stdout_bytes(), config.max_stderr_bytes());
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
    let status = status.map_err(|e| TurnError::runtime(&e, "wait"))?;
    let stdout = match stdout {
        Some(out) => out,
        None => match tokio::time::timeout(DRAIN_GRACE, &mut drain).await {
            Ok(drained) => drained?,
            Err(_) => {
                return Err(TurnError::InvalidOutput {
                    reason: "output stream did not end",
                });
            }
        },
    };
    if status.code != 0 {
        return Err(nonzero_exit(runtime, id, status.code, since).await);
    }
    Ok(stdout)
}

/// The error of a non-zero exit, by its cause (see [`container::classify_exit`]): an OOM kill and
/// the container's own status are the turn's failure; a kill from outside is the environment's.
async fn nonzero_exit<R: ContainerRuntime>(
    runtime: &R,
    id: &str,
    status: i64,
    since: i64,
) -> TurnError {
    match classify_exit(runtime, id, status, since).await {
        Ok(Death::OutOfMemory) => TurnError::OutOfMemory,
        Ok(Death::Exited { status }) => TurnError::WorkerFailed { status },
        Ok(death @ Death::KilledFromOutside { .. }) => death
            .environment_error()
            .map_or(TurnError::WorkerFailed { status }, TurnError::from),
        Err(e) => TurnError::from(e),
    }
}

/// After a live exchange failed: the container's death when it already ended by an OOM kill or a
/// kill from outside (`None` while it runs, or when its own exit status ended it).
async fn died_first<R: ContainerRuntime>(runtime: &R, id: &str, since: i64) -> Option<TurnError> {
    let after = tokio::time::timeout(CALL_TIMEOUT, runtime.inspect(id))
        .await
        .ok()?
        .ok()?;
    let state = after.state?;
    if state.running != Some(false) {
        return None;
    }
    let status = state.exit_code.filter(|code| *code != 0)?;
    match nonzero_exit(runtime, id, status, since).await {
        TurnError::WorkerFailed { .. } => None,
        e => Some(e),
    }
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
) -> Result<Vec<u8>, TurnError> {
    let mut stdout = Vec::new();
    let mut stderr_len = 0_usize;
    while let Some(item) = output.next().await {
        match item {
            Ok(OutputChunk::Stdout(bytes)) => {
                if stdout.len().saturating_add(bytes.len()) > max_stdout {
                    return Err(TurnError::OutputLimit {
                        stream: "stdout",
                        limit: max_stdout,
                    });
                }
                stdout.extend_from_slice(&bytes);
            }
            Ok(OutputChunk::Stderr(bytes)) => {
                stderr_len = stderr_len.saturating_add(bytes.len());
                if stderr_len > max_stderr {
                    return Err(TurnError::OutputLimit {
                        stream: "stderr",
                        limit: max_stderr,
                    });
                }
            }
            Err(e) => return Err(TurnError::runtime(&e, "attach stream")),
        }
    }
    Ok(stdout)
}

#[cfg(test)]
#[path = "turn_tests.rs"]
mod tests;
