//! In-container proof worker: `turn-runner` (ACP client), `fake-agent` (synthetic ACP agent with
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

pub mod agent;
pub mod confine;
pub mod error;
pub mod hostile;
pub mod live;
pub mod markers;
pub mod probes;
pub mod prompt;
pub mod request;
pub mod runner;
pub mod transport;

pub use error::ProofError;
pub use live::{LIVE_TURN_TIMEOUT, run_live};
pub use request::{LiveAgent, LiveSpec, MAX_REQUEST_BYTES, TurnRequest};
pub use runner::{
    EventSink, RunnerConfig, TurnHooks, TurnOutput, TurnResult, run_turn, run_turn_with,
};

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
