//! Validation gates, the host side: operator gate definitions ([`GateDefinitions`]), the
//! candidate's tree at its baseline commit ([`BaselineTree`], `GateTree`), the baseline cache
//! ([`BaselineCache`]), the gate images' records ([`GateImagesState`]), and bound, verifiable
//! evidence ([`GateEvidence`], [`parse_evidence`], [`verify_evidence`]). [`evaluate_gate`] is one
//! gate for one candidate: the sealed gate run through the container crate's seam, the host's
//! classification of its report, and the comparison with the baseline's run.
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

pub use cache::BaselineCache;
pub use classify::LOG_CONTRADICTION_CODE;
pub use definition::{GateDefinitions, GateKind, GateName, check_required_gates, init_definitions};
pub use error::{ERROR_CODES, GateError};
pub use evidence::{
    Comparison, ComparisonBasis, EVIDENCE_SCHEMA, EvidenceSubject, GateEvidence, IdList, LogTail,
    MAX_EVIDENCE_BYTES, TestCounts, parse_evidence, verify_evidence,
};
pub use gate::{
    BaselineUse, GateResult, evaluate_commit_all, evaluate_gate, evidence_file_name, verdict_line,
};
pub use images::{
    EnvironmentStack, GateEnvironment, GateImageName, GateImageOrigin, GateImageRecord,
    GateImagesState,
};

pub use run::RunContext;
pub use store::{find_evidence, store_evidence};
pub use tree::BaselineTree;
