//! The canonical deterministic ZIP envelope (`mozaiks.deterministic_archive.v1`): writer, strict
//! reader with a raw central-directory preflight, the empty transport marker, workspace
//! materialisation / harvest / export (in the container), and staging into a fresh private tree
//! (on the host).
//!
//! # Security
//! Archive bytes are hostile input. The reader accepts exactly the bytes the canonical writer
//! emits and rejects everything else before anything is written; the preflight bounds every
//! allocation by the file budget; staging writes only through approved paths, never by entry
//! name, into a fresh 0700 directory that is removed on any failure.
//!
//! # Features
//! `effects` (default) adds workspace materialisation, harvest and export, staging and packing:
//! everything that touches a filesystem. Without it the crate writes no file.
#![forbid(unsafe_code)]

// Modules are private; the items other crates need are re-exported below (the curated surface).
mod envelope;
mod error;
#[cfg(feature = "effects")]
mod export;
#[cfg(feature = "effects")]
mod pack;
mod reader;
#[cfg(feature = "effects")]
mod stage;
#[cfg(feature = "effects")]
mod workspace;

pub use envelope::{
    ARCHIVE_SCHEMA_VERSION, EMPTY_ARCHIVE_MARKER, MAX_ARCHIVE_BYTES, MAX_ARCHIVE_FILES,
    archive_digest, build_deterministic_archive, empty_marker_permitted,
};
pub use error::{ArchiveError, ERROR_CODES};
#[cfg(feature = "effects")]
pub use export::export_workspace_archive;
#[cfg(feature = "effects")]
pub use pack::pack_directory;
pub use reader::{
    ArchiveLimits, ArchiveManifest, VerifiedArchive, preflight_archive_directory,
    read_archive_entries, read_archive_manifest, read_archive_manifest_from,
};
#[cfg(feature = "effects")]
pub use stage::{StageLimits, stage_verified_archive, stage_workspace_archive};
#[cfg(feature = "effects")]
pub use workspace::{
    HarvestOptions, HarvestedFile, MAX_HARVEST_BYTES, MAX_HARVEST_ENTRIES, StagedWorkspace,
    StartOverlay, Violation, ViolationKind, WorkspaceHarvest, materialize_workspace,
    materialize_workspace_from,
};
