//! The validation gate runner: the gate wire contract (v1) shared by the in-image runner and the
//! host, and the runner itself, the static `gate-runner` entrypoint of every gate image.
//!
//! # Security
//! Every wire value becomes typed only through a fallible constructor; requests and reports are
//! strict JSON in length-checked frames, and a report is accepted only in its canonical encoding.
//! The runner's stdout carries exactly one report frame; diagnostics go to stderr.
#![deny(clippy::print_stdout, clippy::print_stderr)]
#![forbid(unsafe_code)]

mod error;
mod junit;
mod run;
mod tree;
mod wire;

pub use error::{ERROR_CODES, GateRunnerError};
pub use junit::parse as parse_junit;
pub use run::{DEFAULT_ROOT, harden, run_gate};

pub use wire::{
    Argv, CaseId, CaseOutcome, Env, ExitStatus, GateReport, GateRequest, JunitCase, JunitReport,
    JunitSpec, LogTail, MAX_REPORT_BYTES, Nonce, RelPath, RunLimits, RunStatus, StableCode,
    TreeTotals, write_frame,
};
