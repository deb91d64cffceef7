//! `turn-runner`: the proof image's entrypoint. Reads the turn payload on stdin, runs one ACP turn
//! against the agent, and prints exactly one JSON document on stdout. Exit status: 0 when a
//! document was printed, 2 for a refused request or bad flags, 3 for an environment failure,
//! 4 when an isolation probe found an exposure (nothing is printed then).
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

use proof_worker::{MAX_REQUEST_BYTES, ProofError, RunnerConfig, read_capped, run_turn};

fn parse_flags(args: impl Iterator<Item = String>) -> Result<RunnerConfig, String> {
    let mut cfg = RunnerConfig::image_defaults();
    let mut args = args;
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--workspace-root" => cfg.workspace_root = PathBuf::from(value()?),
            "--agent" => cfg.agent = PathBuf::from(value()?),
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
    Ok(cfg)
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
    let cfg = match parse_flags(std::env::args().skip(1)) {
        Ok(cfg) => cfg,
        Err(msg) => {
            tracing::error!(code = "PROOF_WORKER_USAGE", "{msg}");
            return ExitCode::from(2);
        }
    };
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
