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

pub mod envelope;
pub mod error;
#[cfg(feature = "effects")]
pub mod export;
#[cfg(feature = "effects")]
pub mod pack;
pub mod reader;
#[cfg(feature = "effects")]
pub mod stage;
#[cfg(feature = "effects")]
pub mod workspace;

pub use envelope::{
    ARCHIVE_SCHEMA_VERSION, EMPTY_ARCHIVE_MARKER, MAX_ARCHIVE_BYTES, MAX_ARCHIVE_FILES,
    archive_digest, build_deterministic_archive, empty_marker_permitted,
};
pub use error::{ArchiveError, ENVELOPE_CODE, EntryName};
#[cfg(feature = "effects")]
pub use export::export_workspace_archive;
#[cfg(feature = "effects")]
pub use pack::pack_directory;
pub use reader::{
    ArchiveBytes, ArchiveLimits, ArchiveManifest, ManifestEntry, preflight_archive_directory,
    read_archive_entries, read_archive_manifest, read_archive_manifest_from,
    validate_archive_budget,
};
#[cfg(feature = "effects")]
pub use stage::{StageRequest, stage_workspace_archive};
#[cfg(feature = "effects")]
pub use workspace::{
    HarvestOptions, HarvestedFile, StagedWorkspace, Violation, ViolationKind, WorkspaceHarvest,
    materialize_workspace,
};
