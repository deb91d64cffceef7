//! In-container turn runner: `turn-runner` (ACP client), `fake-agent` (synthetic ACP agent with
//! isolation probes and hostile modes) and `hostile-entry` (a test-only entrypoint that breaks the
//! output contract on purpose).
//!
//! # Security
//! The runner trusts nothing the agent says: file access goes through a cap-std `Dir` confined to
//! the turn workspace, terminals are refused, permission requests are rejected, the channel is
//! size-capped and deadline-bound, and the archive is built from a harvest of the staged tree, not
//! from the agent's claims. stdout carries exactly one JSON document; diagnostics go to stderr.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod agents;
mod confine;
mod error;
mod hostile;
mod live;
mod markers;
mod probes;
mod prompt;
mod request;
mod runner;
mod synthetic_agent;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod transport;

// The surface the binaries and the tests use, and the types their fields name; nothing else.
pub use error::{ERROR_CODES, ProofError};
pub use live::{LIVE_TURN_TIMEOUT, run_live};
pub use request::MAX_REQUEST_BYTES;
pub use runner::{RunnerConfig, TurnOutput, run_turn};

/// The synthetic ACP agent of the `fake-agent` binary: its entry point, its idle flag, and the
/// report it writes into a turn's summary.
pub mod agent {

    pub use crate::synthetic_agent::{AgentReport, IDLE_FLAG, serve_stdio};
}

/// The test-only modes of the `hostile-entry` binary and what each does.
pub mod hostile_entry {
    pub use crate::hostile::{HANG_SLICE, MODES, action};
}

/// Reads at most `cap` bytes from `reader`; one byte more is an error (the caller's budget).
///
/// # Errors
/// `PROOF_WORKER_REQUEST_BUDGET` when the input is longer than `cap`; I/O errors.
pub fn read_capped(reader: impl std::io::Read, cap: usize) -> Result<Vec<u8>, ProofError> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    reader.take(cap as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > cap {
        return Err(ProofError::RequestBudget { limit: cap });
    }
    Ok(buf)
}
