//! The foundation of the patch-candidate pipeline: portable repository paths, the approved
//! execution context, snapshot evidence, the approved turn binding them
//! ([`ApprovedTurn`]), selection checks, path classifiers, the host path guard, and Git snapshots
//! at a pinned commit. The words every crate shares (codes, `sha256:` digests, untrusted text,
//! strict JSON, gate verdicts) live in the `vocab` crate.
//!
//! # Security
//! Every value that comes from outside (approval JSON, snapshot JSON, Git tree entries, archive
//! names) becomes typed only through a fallible constructor here. Nothing in this crate writes to
//! a repository.
//!
//! # Features
//! `effects` (default) adds the Git snapshot loader ([`GitSnapshot`]), the one git launcher of
//! the workspace ([`Git`]: deadline, stdin, bounded output, isolated or explicit host
//! environment), and building an approval's grants against a snapshot ([`Grants`]).
//! Without it the crate spawns no process and writes no file. `testkit` (implies `effects`) adds
//! the `testkit` fixtures for tests (this crate's and the crates above it); never in a binary.
#![forbid(unsafe_code)]

// Modules are private; the items other crates need are re-exported below (the curated surface).
mod approved;
mod classify;
mod context;
mod error;
#[cfg(feature = "effects")]
mod git;
#[cfg(feature = "effects")]
mod grant;
mod guard;
mod path;
mod proposal;
mod selection;
#[cfg(all(feature = "effects", any(test, feature = "testkit")))]
pub mod testkit;

pub use approved::ApprovedTurn;
pub use classify::{
    is_repository_env_template_path, is_secret_contract_path, is_secret_sensitive_path,
    validate_output_text,
};
pub use context::{
    ApprovedExecutionContext, EXECUTION_CONTEXT_SCHEMA_VERSION, MAX_CONTEXT_JSON_BYTES,
    MAX_SNAPSHOT_JSON_BYTES, RepositorySnapshotEvidence, context_from_value,
    verify_snapshot_identity,
};
pub use error::{ERROR_CODES, SELECTION_CODE, SnapshotError};
#[cfg(feature = "effects")]
pub use git::{
    EntryKind, Git, GitCancel, GitLaunchError, GitSnapshot, GitStream, ListedKind, TreeEntry,
    TreeListing, WorkTreeState, resolve_commit, work_tree_state,
};
#[cfg(feature = "effects")]
pub use grant::{ApprovalFields, GrantInput, Grants, approval_document};
pub use guard::{CreateAbsence, DefaultPathGuard, PathGuard};
pub use path::{
    Collision, PathRejection, RepoPath, casefold, check_portable, detect_collisions, in_scope,
    path_is_allowed, safe_artifact_relpath,
};
pub use proposal::{
    FileOp, MAX_PROVIDER_EVENTS, ProposalStatus, ProposedFileChange, ProviderEventKind,
    ProviderEventRecord, StagedPatchProposal,
};
pub use selection::{
    BaselineFiles, MAX_READ_ONLY_INSPECTION_BYTES, MAX_READ_ONLY_INSPECTION_FILES,
    MAX_REPOSITORY_FILES, select_read_only_files, verify_selected_baseline,
};
