//! Export of a workspace as the canonical archive (reference §6.2). Runs inside the isolated
//! container after the coding turn; its entries come from harvesting the whole tree, never from
//! the agent's claims.

use std::collections::BTreeSet;

use snapshot::{FileOp, RepoPath, casefold, validate_output_text};

use crate::envelope::{EMPTY_ARCHIVE_MARKER, build_deterministic_archive};
use crate::error::{ArchiveError, EntryName};
use crate::reader::validate_archive_budget;
use crate::workspace::{HarvestOptions, StagedWorkspace};

/// Reference `export_repository_workspace_archive`: checks the grants against the staged
/// baseline, harvests the tree, and returns the canonical archive of every editable file
/// (unchanged ones included, read-only ones never), or [`EMPTY_ARCHIVE_MARKER`] when nothing is
/// left (a deletion-only turn).
///
/// # Errors
/// In order: `REPOSITORY_PATCH_ARCHIVE_BUDGET` (invalid limits), `REPOSITORY_PATCH_ARCHIVE_GRANTS`
/// (duplicate grants, grants conflicting with the baseline), `_BUDGET` (file count),
/// `REPOSITORY_PATCH_ARCHIVE_SCOPE` (any harvest violation), `REPOSITORY_PATCH_ARCHIVE_OP`
/// (ungranted create or delete), `REPOSITORY_PATCH_ARCHIVE_UTF8` (not exact UTF-8), the output
/// content gates (`REPOSITORY_PATCH_ENV_TEMPLATE`, `_SECRET_CONTRACT`), `_BUDGET` (contents,
/// archive size).
pub fn export_workspace_archive(
    ws: &StagedWorkspace,
    max_files: usize,
    max_archive_bytes: usize,
    create_paths: &[RepoPath],
    delete_paths: &[RepoPath],
) -> Result<Vec<u8>, ArchiveError> {
    validate_archive_budget(max_files, max_archive_bytes)?;
    let mut folded = BTreeSet::new();
    for grant in create_paths.iter().chain(delete_paths) {
        if !folded.insert(grant.collision_key()) {
            return Err(ArchiveError::Grants {
                detail: "duplicate operation path",
            });
        }
    }
    let occupied: BTreeSet<String> = ws
        .editable_manifest()
        .keys()
        .chain(ws.read_only_manifest().keys())
        .map(|p| casefold(p.as_str()))
        .collect();
    if create_paths
        .iter()
        .any(|c| occupied.contains(&c.collision_key()))
        || delete_paths
            .iter()
            .any(|d| !ws.editable_manifest().contains_key(d))
    {
        return Err(ArchiveError::Grants {
            detail: "operation paths conflict with staged baseline",
        });
    }
    let staged = ws.editable_manifest().len() + create_paths.len() + ws.read_only_manifest().len();
    if staged > max_files {
        return Err(ArchiveError::Budget {
            detail: "staged file count exceeds limit",
        });
    }
    let harvest = ws.harvest(HarvestOptions {
        allow_new_files: !create_paths.is_empty(),
        allow_deletes: !delete_paths.is_empty(),
    })?;
    if !harvest.violations.is_empty() {
        let kinds: BTreeSet<&str> = harvest.violations.iter().map(|v| v.kind.as_str()).collect();
        return Err(ArchiveError::Scope {
            summary: kinds.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    for file in &harvest.files {
        let granted = match file.op {
            FileOp::Create => create_paths.contains(&file.path),
            FileOp::Delete => delete_paths.contains(&file.path),
            FileOp::Update => true,
        };
        if !granted {
            return Err(ArchiveError::Op {
                path: EntryName::from_str(file.path.as_str()),
            });
        }
    }
    let mut entries: Vec<(RepoPath, Vec<u8>)> = Vec::with_capacity(harvest.files.len());
    let mut total = 0_usize;
    for file in harvest.files {
        if file.op == FileOp::Delete {
            continue;
        }
        let shown = EntryName::from_str(file.path.as_str());
        let Some(content) = file.content else {
            return Err(ArchiveError::Op { path: shown });
        };
        let Ok(text) = std::str::from_utf8(&content) else {
            return Err(ArchiveError::Utf8 {
                path: shown,
                suffix: " is not exact UTF-8",
            });
        };
        validate_output_text(file.path.as_str(), text)?;
        total += content.len();
        if total > max_archive_bytes {
            return Err(ArchiveError::Budget {
                detail: "staged contents exceed limit",
            });
        }
        entries.push((file.path, content));
    }
    let archive = if entries.is_empty() {
        EMPTY_ARCHIVE_MARKER.to_vec()
    } else {
        build_deterministic_archive(&entries)?
    };
    if archive.len() > max_archive_bytes {
        return Err(ArchiveError::Budget {
            detail: "archive exceeds limit",
        });
    }
    Ok(archive)
}
