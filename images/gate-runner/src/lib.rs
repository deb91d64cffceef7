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
pub use junit::{JunitRefusal, parse as parse_junit, read_junit};
pub use run::{DEFAULT_ROOT, harden, run_gate};
pub use tree::{Extracted, TreeRule, extract};
pub use wire::{
    Argv, CaseId, CaseOutcome, Env, ExitStatus, GateReport, GateRequest, JunitCase, JunitReport,
    JunitSpec, LogTail, MAX_ARG_BYTES, MAX_ARGV_ITEMS, MAX_CASE_ID_BYTES, MAX_CODE_BYTES,
    MAX_ENV_ENTRIES, MAX_ENV_KEY_BYTES, MAX_JUNIT_BYTES, MAX_JUNIT_CASES, MAX_JUNIT_DEPTH,
    MAX_KILL_GRACE_MS, MAX_LOG_TAIL_BYTES, MAX_REL_PATH_BYTES, MAX_REPORT_BYTES, MAX_REQUEST_BYTES,
    MAX_SEGMENT_BYTES, MAX_TREE_BYTES, MAX_TREE_ENTRIES, MAX_WALL_MS, Nonce, RelPath, RunLimits,
    RunStatus, StableCode, TreeTotals, WIRE_VERSION, canonical_json, read_frame, write_frame,
};
