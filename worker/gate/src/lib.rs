//! Validation gates, the host side: operator gate definitions ([`GateDefinitions`]), the
//! candidate's tree at its baseline commit ([`BaselineTree`], [`GateTree`]), the sealed gate run
//! through the container crate's seam ([`run_gate`]), the host's classification ([`classify`]),
//! the baseline cache ([`BaselineCache`]), the gate images' records ([`GateImagesState`]), and
//! bound, verifiable evidence ([`GateEvidence`], [`parse_evidence`], [`verify_evidence`]). [`evaluate_gate`] is one gate for one candidate.
//!
//! Modules are private; this list is the crate's surface.
//!
//! # Security
//! A gate runs agent-written code: its container has exactly the turn's posture with the gate's
//! limits. Definitions are trusted operator input; the repository and the agent never supply
//! them. Nothing the container prints is trusted beyond the strict, nonce-bound report; a gate
//! proves the candidate's behaviour under tests it was not allowed to change, nothing more
//! (`docs/GATES.md`).
#![forbid(unsafe_code)]

mod cache;
mod classify;
mod definition;
mod error;
mod evidence;
mod gate;
mod images;
mod pinned;
mod run;
mod store;
#[cfg(test)]
mod testkit;
mod tree;
mod wire;

pub use cache::{BASELINE_CACHE_DIR, BaselineCache};
pub use classify::{
    BaselineFacts, Classified, HOST_DEADLINE_CODE, JUNIT_MISSING_CODE, LOG_CONTRADICTION_CODE,
    POLICY_CODE, TIMED_OUT_CODE, classify, compare, deleted_modules,
};
pub use definition::{
    DEFINITION_DIGEST_SCHEMA, GateDefinition, GateDefinitions, GateKind, GateName, JunitSpec,
    MAX_GATES, MAX_GATES_FILE_BYTES, check_required_gates, init_definitions,
};
pub use error::{ERROR_CODES, GateError};
pub use evidence::{
    Comparison, ComparisonBasis, EVIDENCE_DIGEST_SCHEMA, EVIDENCE_SCHEMA, EvidenceFile,
    EvidenceSubject, GateEvidence, IdList, LogTail, MAX_EVIDENCE_BYTES, MAX_LISTED_IDS,
    MAX_PASSING_IDS, MIN_RAN_PER_MILLE, RanCounts, TestCounts, TreeFacts, escape_log,
    parse_evidence, verify_evidence,
};
pub use gate::{
    BaselineUse, GateResult, evaluate_commit, evaluate_commit_all, evaluate_gate,
    evidence_file_name, verdict_line,
};
pub use images::{GateImageName, GateImageOrigin, GateImageRecord, GateImagesState, GateToolchain};
pub use pinned::PinnedPattern;
pub use run::{GATE_SLACK, MAX_RUNNER_STDERR_BYTES, RunContext, RunFacts, run_gate};
pub use store::{FoundEvidence, find_evidence, store_evidence};
pub use tree::{BaselineTree, GateTree, MAX_TREE_ENTRIES};
pub use wire::parse_report;
