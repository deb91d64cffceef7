//! One sealed gate run: a fresh container from the gate's approved image ID with the turn's
//! posture and the gate's limits, the request and the tree streamed on stdin, the one report
//! frame read from stdout under its cap, the container removed on every path.
//!
//! The order is the turn's: image inspect (the ID must be the approved one) → under runsc the
//! daemon's runtime registration → create by ID → pre-start inspection → attach → start → stdin
//! → bounded output → wait → post-mortem inspect (OOM) → removal.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use container::{
    CALL_TIMEOUT, ContainerError, ContainerGuard, ContainerId, ContainerName, ContainerRuntime,
    GateLimits, ImageId, ImageReference, JobBinding, OutputChunk, RuntimeError, RuntimeName,
    RuntimeProfile, SpecInput, classify_exit, container_spec, docker_call, local_owner,
    verify_container, verify_gate_env,
};
use vocab::now_unix;

use crate::definition::GateDefinition;
use crate::error::GateError;
use crate::tree::GateTree;
use gate_runner::{GateReport, MAX_REPORT_BYTES, Nonce};

use crate::wire::{parse_report, request_frame};

/// Time allowed beyond the gate's wall budget and kill grace (tree transfer, report, exit).
pub const GATE_SLACK: Duration = Duration::from_secs(60);
/// Most stderr bytes counted from the runner's own diagnostics before the run is refused.
pub const MAX_RUNNER_STDERR_BYTES: u64 = 1024 * 1024;
/// Chunk size of the tree stream between the tar thread and the container's stdin.
const STREAM_CHUNK: usize = 256 * 1024;
const STOPPED_READING: &str = "the container stopped reading";

/// What the host observed about one run; the outcome is decided from it by
/// [`crate::classify::classify`].
#[derive(Debug)]
pub struct RunFacts {
    /// The parsed, nonce-checked report, or why there is none.
    pub report: Result<GateReport, GateError>,
    /// The container's own exit status (the runner exits 0 after its report).
    pub container_exit: Option<i64>,
    /// The daemon says the OOM killer acted in the container.
    pub oom_killed: bool,
    /// The host's deadline passed and the container was killed.
    pub host_timed_out: bool,
    /// Host-measured wall time of the container run.
    pub wall_ms: u64,
}

/// Where and as whom a gate runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunContext<'a> {
    /// An operator-configured OCI runtime (`runsc`); `None` is the daemon default.
    pub runtime: Option<&'a RuntimeName>,
    /// A service job's binding (labels), if any.
    pub job: Option<&'a JobBinding>,
}

fn nonce() -> Result<Nonce, GateError> {
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| GateError::State {
        detail: "the OS random generator failed",
    })?;
    Ok(Nonce::from_bytes(bytes))
}

fn map_runtime(e: RuntimeError, operation: &'static str) -> GateError {
    GateError::from(match e {
        RuntimeError::Unavailable => ContainerError::Unavailable { detail: operation },
        RuntimeError::NotFound if operation == "image inspect" => ContainerError::ImageMissing,
        RuntimeError::Timeout => ContainerError::Timeout {
            seconds: CALL_TIMEOUT.as_secs(),
        },
        _ => ContainerError::CommandFailed { operation },
    })
}

/// Runs `def` over `tree` once.
///
/// # Errors
/// Environment failures before or around the run (image missing or not the approved ID, Docker
/// down, pre-start inspection mismatch, cleanup failure, the tree's git reads). A run that
/// happened returns `RunFacts`, whatever its report says.
///
/// # Security
/// No container exists before the image ID and environment have been checked; the container is
/// inspected before start and removed on every path (including cancellation of this future).
/// The nonce comes from the OS RNG and reaches only the runner's stdin.
pub(crate) async fn run_gate<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    def: &GateDefinition,
    tree: &GateTree,
    ctx: RunContext<'_>,
) -> Result<RunFacts, GateError> {
    let reference: ImageReference = def.image().as_str().parse().map_err(ContainerError::from)?;
    let image = match tokio::time::timeout(CALL_TIMEOUT, runtime.inspect_image(&reference)).await {
        Err(_) => return Err(map_runtime(RuntimeError::Timeout, "image inspect")),
        Ok(Err(e)) => return Err(map_runtime(e, "image inspect")),
        Ok(Ok(image)) => image,
    };
    let image_id = ImageId::from_daemon(image.id.trim()).map_err(ContainerError::from)?;
    if &image_id != def.image() {
        return Err(ContainerError::ImageIdMismatch.into());
    }
    verify_gate_env(&image.env)?;
    let profile = RuntimeProfile::for_runtime(ctx.runtime);
    if profile.verifies_registration() {
        let registered = docker_call("info", runtime.registered_runtimes()).await?;
        profile.verify_registration(&registered)?;
    }

    let nonce = nonce()?;
    let frame = request_frame(def, tree.totals(), &nonce)?;
    let lifetime = Duration::from_millis(def.wall_ms().saturating_add(def.kill_grace_ms()))
        .saturating_add(GATE_SLACK);
    let attempt = container::generate_attempt_id();
    let deadline_unix = now_unix()
        .saturating_add(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX))
        .saturating_add(1);
    let labels = local_owner()
        .turn_labels(&attempt, deadline_unix)
        .with_job(ctx.job);
    let mut guard = ContainerGuard::new(runtime, ContainerName::generate());
    let name = guard.name().clone();
    let spec = SpecInput {
        name: &name,
        image_id: def.image(),
        labels: &labels,
        runtime: ctx.runtime,
        gate: Some(GateLimits {
            memory_bytes: def.memory_bytes(),
            pids_limit: def.pids(),
            nano_cpus: def.nano_cpus(),
            workspace_mib: def.workspace_mib(),
            tmp_mib: def.tmp_mib(),
        }),
        build_tmp_mib: None,
    };
    let started = Instant::now();
    let run = run_container(runtime, &mut guard, &spec, frame, tree);
    let outcome = tokio::time::timeout(lifetime, run).await;
    let host_timed_out = outcome.is_err();
    if host_timed_out {
        let _ = tokio::time::timeout(CALL_TIMEOUT, runtime.kill(name.as_str())).await;
    }
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let removed = guard.remove().await;
    removed?;
    let (stdout, container_exit, oom_killed) = match outcome {
        Err(_) => (
            Err(GateError::Report {
                detail: "no report before the host deadline",
            }),
            None,
            false,
        ),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(seen)) => seen,
    };
    let max_cases = def.junit().map_or(0, |j| j.max_cases);
    let report = stdout.and_then(|out| parse_report(&out, &nonce, def.log_tail_bytes(), max_cases));
    Ok(RunFacts {
        report,
        container_exit,
        oom_killed,
        host_timed_out,
        wall_ms,
    })
}

type Seen = (Result<Vec<u8>, GateError>, Option<i64>, bool);

async fn run_container<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    guard: &mut ContainerGuard<R>,
    spec: &SpecInput<'_>,
    frame: Vec<u8>,
    tree: &GateTree,
) -> Result<Seen, GateError> {
    // The daemon's events are recorded by the second: one second early never misses a kill.
    let since = now_unix().saturating_sub(1);
    let body = container_spec(spec);
    let created = docker_call("create", runtime.create(spec.name, &body)).await;
    guard.confirm_created();
    let id: ContainerId = created?.parse().map_err(ContainerError::from)?;
    let inspect = match tokio::time::timeout(CALL_TIMEOUT, runtime.inspect(id.as_str())).await {
        Err(_) => return Err(map_runtime(RuntimeError::Timeout, "inspect")),
        Ok(Err(RuntimeError::Unavailable)) => {
            return Err(map_runtime(RuntimeError::Unavailable, "inspect"));
        }
        Ok(Err(_)) => return Err(ContainerError::InspectFormat.into()),
        Ok(Ok(v)) => v,
    };
    if inspect.id.as_deref() != Some(id.as_str()) {
        return Err(ContainerError::InspectFormat.into());
    }
    verify_container(&inspect, spec)?;

    let output = docker_call("attach", runtime.attach_output(id.as_str())).await?;
    let stdin = docker_call("attach stdin", runtime.attach_stdin(id.as_str())).await?;
    docker_call("start", runtime.start(id.as_str())).await?;

    // The tar is produced on a blocking thread (git reads) and forwarded through a bounded
    // channel, so at most a few chunks are in memory.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let tree = tree.clone();
    let producer = tokio::task::spawn_blocking(move || {
        let mut w = ChannelWriter {
            tx,
            buf: Vec::with_capacity(STREAM_CHUNK),
        };
        std::io::Write::write_all(&mut w, &frame).map_err(|_| GateError::Tree {
            detail: STOPPED_READING.to_owned(),
        })?;
        let written = tree.write_tar(&mut w);
        let flushed = std::io::Write::flush(&mut w);
        written?;
        flushed.map_err(|_| GateError::Tree {
            detail: STOPPED_READING.to_owned(),
        })
    });
    let feed = async move {
        let mut stdin = stdin;
        let mut broken = false;
        while let Some(chunk) = rx.recv().await {
            if !broken && stdin.write_all(&chunk).await.is_err() {
                // The runner stopped reading (it refused the stream): drain the producer so it
                // ends; the report decides.
                broken = true;
            }
        }
        let _ = stdin.shutdown().await;
    };
    let max_stdout = MAX_REPORT_BYTES.saturating_add(4);
    let drain = drain(output, max_stdout);
    let (_, stdout) = tokio::join!(feed, drain);
    let produced = producer.await.map_err(|_| GateError::Tree {
        detail: "the tree stream failed".to_owned(),
    })?;
    let status = docker_call("wait", runtime.wait(id.as_str())).await?;
    let after = docker_call("inspect", runtime.inspect(id.as_str())).await?;
    let oom = after.state.as_ref().and_then(|s| s.oom_killed) == Some(true);
    // A container someone else killed (a `docker kill`) is the environment's failure, retried
    // by the service, never a verdict on the candidate (the daemon's kill events decide).
    if status.code != 0
        && !oom
        && let Some(e) = classify_exit(runtime, id.as_str(), status.code, since)
            .await?
            .environment_error()
    {
        return Err(e.into());
    }
    // A git failure while streaming is the host's, not the candidate's; a container that stopped
    // reading is judged by its report.
    if let Err(e) = produced
        && !matches!(&e, GateError::Tree { detail }
            if detail == STOPPED_READING || detail == "the tree stream could not be written")
    {
        return Err(e);
    }
    Ok((stdout, Some(status.code), oom))
}

/// Reads the output to its end: stdout kept up to `max_stdout` bytes (beyond it the report is
/// refused, the rest discarded), the runner's stderr counted and discarded.
async fn drain(
    mut output: container::OutputStream,
    max_stdout: usize,
) -> Result<Vec<u8>, GateError> {
    let mut stdout = Vec::new();
    let mut over = false;
    let mut stderr = 0_u64;
    while let Some(item) = output.next().await {
        match item {
            Ok(OutputChunk::Stdout(bytes)) => {
                if stdout.len().saturating_add(bytes.len()) > max_stdout {
                    over = true;
                    stdout = Vec::new();
                } else if !over {
                    stdout.extend_from_slice(&bytes);
                }
            }
            Ok(OutputChunk::Stderr(bytes)) => {
                stderr = stderr.saturating_add(bytes.len() as u64);
            }
            Err(_) => {
                return Err(GateError::Report {
                    detail: "the output stream failed",
                });
            }
        }
    }
    if over {
        return Err(GateError::Report {
            detail: "stdout exceeds the report cap",
        });
    }
    if stderr > MAX_RUNNER_STDERR_BYTES {
        return Err(GateError::Report {
            detail: "runner stderr exceeds its cap",
        });
    }
    Ok(stdout)
}

/// A `Write` that sends fixed-size chunks into a bounded channel (blocking the producing thread
/// while the container is slower).
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
    buf: Vec<u8>,
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = STREAM_CHUNK.saturating_sub(self.buf.len()).max(1);
        let take = data.len().min(room);
        self.buf
            .extend_from_slice(data.get(..take).unwrap_or_default());
        if self.buf.len() >= STREAM_CHUNK {
            self.flush()?;
        }
        Ok(take)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(STREAM_CHUNK));
        self.tx
            .blocking_send(chunk)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }
}
