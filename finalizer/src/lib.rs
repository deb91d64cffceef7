//! The `finalizer` crate: turns host-verified workspace bytes into a digested, reviewable
//! `RepositoryPatchCandidate` (`mozaiks.refinement.repository_patch.v2`).
//!
//! * [`unified_diff`]: diffs byte-identical to CPython `difflib.unified_diff`, bounded in work;
//! * [`repository_patch_digest`]: the reference canonical digest;
//! * [`validate_candidate_json`]: strict parsing of stored or received candidates;
//! * [`verify_digest`] / `check_derived_fields`: a candidate bound to an expected digest, and
//!   its host-derived fields checked against its own files;
//! * [`check_diffs_match_content`]: every diff is the canonical change from the previous bytes
//!   (by hash) to the post-image, so what a reviewer reads is what publication commits;
//! * [`git_patch`]: a `git apply`-ready patch reproducing the candidate's exact bytes;
//! * [`CandidateStore`]: atomic, content-addressed storage with digest verification on read.
//!
//! # Security
//! Nothing here writes to a repository or runs an agent. Candidate content is copied only from
//! host-verified bytes; summary and rationale are host text, never provider output.
//!
//! # Features
//! `effects` (default) adds [`finalize_repository_patch`] and [`proposal_from_staged_tree`]
//! (which read a staged tree), the store's writes and [`verify_against_repository`] (runs `git`).
//! Without it the crate writes no file and spawns no process. `testkit` adds the `testkit`
//! candidate builders for tests (this crate's and the crates above it); never in a binary.
#![forbid(unsafe_code)]

// Modules are private; the items other crates need are re-exported below (the curated surface).
mod consistency;
#[cfg(feature = "effects")]
mod derived;
mod diff;
mod digest;
mod error;
mod export;
#[cfg(feature = "effects")]
mod finalize;
mod model;
mod parallel;
#[cfg(feature = "effects")]
mod staged;
mod store;
#[cfg(feature = "effects")]
mod verify;

#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use consistency::check_diffs_match_content;

pub use diff::{DEFAULT_WORK_BUDGET, DiffMode, unified_diff, unified_diff_with_budget};
pub use digest::{repository_patch_digest, verify_digest};
pub use error::{ERROR_CODES, FinalizeError, PROPOSAL_STATUS_CODE};
pub use export::{git_patch, git_quote_path};
#[cfg(feature = "effects")]
pub use finalize::finalize_repository_patch;
pub use model::{
    CANDIDATE_RATIONALE, CandidateFields, MAX_CANDIDATE_FILES, MAX_CANDIDATE_JSON_BYTES,
    RepositoryPatchCandidate, RepositoryPatchFile, validate_candidate_json,
};
#[cfg(feature = "effects")]
pub use staged::{STAGED_TREE_PROVIDER_ID, proposal_from_staged_tree};
pub use store::CandidateStore;
#[cfg(feature = "effects")]
pub use verify::verify_against_repository;
