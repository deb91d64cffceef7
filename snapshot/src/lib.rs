//! The foundation of the patch-candidate pipeline: portable repository paths, `sha256:` digests,
//! the approved execution context, snapshot evidence, selection checks, path classifiers, the host
//! path policy, and Git snapshots at a pinned commit.
//!
//! # Security
//! Every value that comes from outside (approval JSON, snapshot JSON, Git tree entries, archive
//! names) becomes typed only through a fallible constructor here. Nothing in this crate writes to
//! a repository.
//!
//! # Features
//! `effects` (default) adds the Git snapshot loader ([`GitSnapshot`]), which spawns `git`.
//! Without it the crate spawns no process and writes no file.
#![forbid(unsafe_code)]

pub mod classify;
mod coded;
pub mod context;
pub mod digest;
pub mod error;
#[cfg(feature = "effects")]
pub mod git;
pub mod json;
pub mod path;
pub mod policy;
pub mod proposal;
pub mod selection;
mod text;

pub use classify::{
    SECRET_CONTRACT_PATH, is_repository_env_template_path, is_secret_contract_path,
    is_secret_sensitive_path, reject_env_template_path, validate_output_text,
    validate_secret_contract_text,
};
pub use coded::{Coded, FailureClass, check_message_convention};
pub use context::{
    ApprovedExecutionContext, EXECUTION_CONTEXT_SCHEMA_VERSION, RepositorySnapshotEvidence,
    verify_snapshot_identity,
};
pub use digest::{Sha256, sha256_bare_hex};
pub use error::SnapshotError;
#[cfg(feature = "effects")]
pub use git::{EntryKind, GitSnapshot, SNAPSHOT_SCHEMA, TreeEntry};
pub use json::{StrictJsonError, from_slice_strict};
pub use path::{Collision, PathRejection, RepoPath, casefold, detect_collisions};
pub use policy::{CreateAbsence, DefaultPathPolicy, PathPolicy};
pub use proposal::{FileOp, ProposalStatus, ProposedFileChange, StagedPatchProposal};
pub use selection::{
    BaselineFiles, MAX_READ_ONLY_INSPECTION_BYTES, MAX_READ_ONLY_INSPECTION_FILES,
    MAX_REPOSITORY_FILES, select_read_only_files, verify_selected_baseline,
};
pub use text::{DEFAULT_QUOTED_CHARS, Untrusted, is_printable, quote};
