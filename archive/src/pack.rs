//! Packing a directory's regular files into the canonical archive (the CLI's `archive pack`), so
//! people and tests can produce valid archives without the container.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use snapshot::RepoPath;

use vocab::Untrusted;

use crate::envelope::{MAX_ARCHIVE_BYTES, MAX_ARCHIVE_FILES, build_deterministic_archive};
use crate::error::{ArchiveError, MAX_LISTED_VIOLATIONS};
use crate::workspace::{HarvestOptions, StagedWorkspace};

/// The canonical archive of every regular file below `dir`.
///
/// # Errors
/// `REPOSITORY_PATCH_ARCHIVE_SCOPE` when the tree holds links, non-portable names, special files
/// or secret-sensitive paths (kinds listed); `REPOSITORY_PATCH_ARCHIVE_BUDGET` for more than 50
/// files or an archive over 16 MiB; `REPOSITORY_PATCH_ARCHIVE_ENVELOPE` for an empty tree or
/// colliding names; `REPOSITORY_PATCH_ARCHIVE_WORKSPACE` when the tree cannot be read.
///
/// # Security
/// The walk never follows links (they are refused, not skipped) and the directory is only read.
pub fn pack_directory(dir: &Path) -> Result<Vec<u8>, ArchiveError> {
    let tree = StagedWorkspace::open_existing(dir, BTreeMap::new(), BTreeMap::new())?;
    let harvest = tree.harvest(HarvestOptions {
        allow_new_files: true,
        allow_deletes: false,
    })?;
    if !harvest.violations.is_empty() {
        let kinds: BTreeSet<String> = harvest
            .violations
            .iter()
            .map(|v| format!("{} ({})", v.kind, Untrusted::quoted(&v.path)))
            .collect();
        let total = kinds.len();
        let mut summary = kinds
            .into_iter()
            .take(MAX_LISTED_VIOLATIONS)
            .collect::<Vec<_>>()
            .join(", ");
        if total > MAX_LISTED_VIOLATIONS {
            summary.push_str(&format!(" and {} more", total - MAX_LISTED_VIOLATIONS));
        }
        return Err(ArchiveError::Scope { summary });
    }
    if harvest.files.len() > MAX_ARCHIVE_FILES {
        return Err(ArchiveError::Budget {
            detail: "staged file count exceeds limit",
        });
    }
    let entries: Vec<(RepoPath, Vec<u8>)> = harvest
        .files
        .into_iter()
        .filter_map(|f| f.content.map(|c| (f.path, c)))
        .collect();
    let archive = build_deterministic_archive(&entries)?;
    if archive.len() > MAX_ARCHIVE_BYTES {
        return Err(ArchiveError::Budget {
            detail: "archive exceeds limit",
        });
    }
    Ok(archive)
}
