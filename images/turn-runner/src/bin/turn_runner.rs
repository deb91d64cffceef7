//! `turn-runner`: the proof image's entrypoint. Reads the turn payload on stdin, runs one ACP turn
//! against the agent, and prints exactly one JSON document on stdout. Exit status: 0 when a
//! document was printed, 2 for a refused request or bad flags, 3 for an environment failure,
//! 4 when an isolation probe found an exposure (nothing is printed then).
//!
//! `--live` (the live image's entrypoint): the framed protocol on stdin/stdout instead (see
//! `turn_runner::live`); the agent is the request's adapter and the deadline 15 minutes.
//!
//! Test-only flags (host-process tests): `--workspace-root DIR`, `--agent PATH`,
//! `--agent-arg ARG` (repeatable), `--turn-timeout-ms N`, `--max-archive-bytes N`,
//! `--max-message-bytes N`, `--max-inbound-bytes N`.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use turn_runner::{
    LIVE_TURN_TIMEOUT, MAX_REQUEST_BYTES, ProofError, RunnerConfig, read_capped, run_live, run_turn,
};

fn parse_flags(args: impl Iterator<Item = String>) -> Result<(RunnerConfig, bool), String> {
    let mut cfg = RunnerConfig::image_defaults();
    let mut args: Vec<String> = args.collect();
    let live = args.first().is_some_and(|a| a == "--live");
    if live {
        args.remove(0);
        // The agent is the request's (`live.agent`), unless `--agent` names one.
        cfg.agent_from_request = true;
        cfg.turn_timeout = LIVE_TURN_TIMEOUT;
    }
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--workspace-root" => cfg.workspace_root = PathBuf::from(value()?),
            "--agent" => {
                cfg.agent = PathBuf::from(value()?);
                cfg.agent_from_request = false;
            }
            "--agent-arg" => cfg.agent_args.push(value()?),
            "--turn-timeout-ms" => {
                let ms: u64 = value()?
                    .parse()
                    .map_err(|_| "bad --turn-timeout-ms".to_owned())?;
                cfg.turn_timeout = Duration::from_millis(ms);
            }
            "--max-archive-bytes" => {
                let n: usize = value()?
                    .parse()
                    .map_err(|_| "bad --max-archive-bytes".to_owned())?;
                if n == 0 || n > archive::MAX_ARCHIVE_BYTES {
                    return Err("--max-archive-bytes outside 1..=16777216".to_owned());
                }
                cfg.max_archive_bytes = n;
            }
            "--max-message-bytes" => {
                cfg.limits.max_message_bytes = value()?
                    .parse()
                    .map_err(|_| "bad --max-message-bytes".to_owned())?;
            }
            "--max-inbound-bytes" => {
                cfg.limits.max_inbound_bytes = value()?
                    .parse()
                    .map_err(|_| "bad --max-inbound-bytes".to_owned())?;
            }
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    Ok((cfg, live))
}

fn exit_for(e: &ProofError) -> u8 {
    match e {
        ProofError::Io { .. } | ProofError::AgentSpawn | ProofError::Workspace { .. } => 3,
        ProofError::Archive(a) if a.is_environment() => 3,
        ProofError::Isolation { .. } => 4,
        _ => 2,
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    // The agent runs as the same user; a non-dumpable runner cannot be ptraced or have its
    // /proc/<pid>/fd (stdout) opened by it.
    if rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .is_err()
    {
        tracing::warn!("could not mark the runner non-dumpable");
    }
    let (cfg, live) = match parse_flags(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(msg) => {
            tracing::error!(code = "PROOF_WORKER_USAGE", "{msg}");
            return ExitCode::from(2);
        }
    };
    if live {
        return live_main(&cfg);
    }
    let stdin = match read_capped(std::io::stdin().lock(), MAX_REQUEST_BYTES) {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::error!(code = e.code(), "{e}");
            return ExitCode::from(exit_for(&e));
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return ExitCode::from(3),
    };
    let result = runtime.block_on(run_turn(&cfg, &stdin));
    // Reap nothing further: the agent's process group was killed when the turn ended.
    drop(runtime);
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(code = e.code(), "{e}");
            return ExitCode::from(exit_for(&e));
        }
    };
    if !result.exposures.is_empty() {
        let e = ProofError::Isolation {
            exposures: result.exposures,
        };
        tracing::error!(code = e.code(), "{e}");
        return ExitCode::from(4);
    }
    let Ok(mut doc) = serde_json::to_vec(&result.output) else {
        tracing::error!(
            code = ProofError::Output.code(),
            "output could not be encoded"
        );
        return ExitCode::from(3);
    };
    doc.push(b'\n');
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(&doc)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}

/// The live turn: frames on stdin/stdout, the result inside them (nothing else on stdout).
fn live_main(cfg: &RunnerConfig) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => return ExitCode::from(3),
    };
    let result = runtime.block_on(async {
        let (input, output) = stdio()?;
        run_live(cfg, input, output).await
    });
    // The stdin reader may still be parked on a read: do not wait for it.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(code = e.code(), "{e}");
            ExitCode::from(exit_for(&e))
        }
    }
}

type Input = Box<dyn tokio::io::AsyncRead + Unpin + Send>;
type Output = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// stdin/stdout on the runtime's reactor when they are pipes (as under Docker's attach and the
/// host tests); tokio's blocking-thread handles otherwise.
fn stdio() -> Result<(Input, Output), ProofError> {
    use std::os::fd::AsFd;
    let pipes = || -> Option<(Input, Output)> {
        let rx = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
        let tx = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
        let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(rx).ok()?;
        let tx = tokio::net::unix::pipe::Sender::from_owned_fd(tx).ok()?;
        Some((Box::new(rx), Box::new(tx)))
    };
    Ok(pipes().unwrap_or_else(|| (Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout()))))
}
