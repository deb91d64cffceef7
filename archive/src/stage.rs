//! Host-side staging of a returned archive into a fresh private tree (reference §6.3).
//!
//! Every check runs before the first byte is written. Entries are read from the in-memory
//! archive; an entry name is only ever compared with the approved paths, and each file is written
//! through the *approved* `RepoPath` it matched, never through the name from the archive.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use snapshot::{ApprovedTurn, RepoPath, validate_output_text};

use crate::envelope::EMPTY_ARCHIVE_MARKER;
use crate::error::{ArchiveError, EntryName};
use crate::reader::{Digests, VerifiedArchive, parse, validate_archive_budget};
use crate::workspace::{StagedWorkspace, materialize_workspace, open_root, write_file};

/// The limits of one staging (not part of the approval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageLimits {
    /// Most entries the archive may hold (at most [`crate::MAX_ARCHIVE_FILES`]).
    pub max_files: usize,
    /// Most bytes the archive may have (at most [`crate::MAX_ARCHIVE_BYTES`]).
    pub max_archive_bytes: usize,
}

/// Reference `stage_repository_workspace_archive`.
///
/// `archive_bytes` is the container's output, untrusted; `workspace_root` must not exist yet.
///
/// Checks, in order (the approval and baseline were checked when `approved` was bound): budget
/// limits; input budget; the target does not exist; the empty marker, or the raw preflight and the strict
/// reader; the entry set against the selection and grants; per entry the host policy, size and
/// hash, strict UTF-8 and the output content gates. Then it creates the root (0700),
/// materialises the approved baseline, removes the selected files the archive omits (each under a
/// delete grant), and writes every entry through its approved path.
///
/// The returned workspace's editable manifest is the approved pre-run baseline.
///
/// # Errors
/// The first failing check's code (`REPOSITORY_PATCH_ARCHIVE_*`, the snapshot codes, the
/// policy's own error). After the root exists, any failure removes it; a failed removal is
/// reported as `CODING_WORKSPACE_CLEANUP` instead.
///
/// # Security
/// No file is created unless every check passed; writes never follow links.
pub fn stage_workspace_archive(
    approved: &ApprovedTurn<'_>,
    archive_bytes: &[u8],
    workspace_root: &Path,
    limits: StageLimits,
) -> Result<StagedWorkspace, ArchiveError> {
    let max_entries = preliminary(approved, workspace_root, limits, archive_bytes.len())?;
    let parsed = if archive_bytes == EMPTY_ARCHIVE_MARKER {
        Vec::new()
    } else {
        parse(
            archive_bytes,
            expected_files(approved),
            Some(max_entries),
            limits.max_archive_bytes,
            Digests::CrcOnly,
        )?
        .entries
    };
    let entries: Vec<(&RepoPath, &[u8])> = parsed.iter().map(|e| (&e.path, e.data)).collect();
    write_entries(approved, workspace_root, &entries)
}

/// [`stage_workspace_archive`] for an archive that was already read strictly once: the same
/// checks in the same order, with the reader's step replaced by a check that the verified
/// archive's entry count fits this staging's limits.
///
/// # Errors
/// As [`stage_workspace_archive`].
///
/// # Security
/// As [`stage_workspace_archive`]; entry data is written from the verified archive's own bytes.
pub fn stage_verified_archive(
    approved: &ApprovedTurn<'_>,
    archive: &VerifiedArchive,
    workspace_root: &Path,
    limits: StageLimits,
) -> Result<StagedWorkspace, ArchiveError> {
    let max_entries = preliminary(approved, workspace_root, limits, archive.bytes().len())?;
    let count = archive.len();
    if !archive.is_empty_marker() {
        if count > max_entries {
            return Err(ArchiveError::Budget {
                detail: "entry count exceeds limit",
            });
        }
        if expected_files(approved).is_some_and(|n| n != count) {
            return Err(ArchiveError::Budget {
                detail: "entry count differs from the selection",
            });
        }
    }
    let entries: Vec<(&RepoPath, &[u8])> = archive.entries().collect();
    write_entries(approved, workspace_root, &entries)
}

/// The exact entry count when the approval has no create or delete grant.
fn expected_files(approved: &ApprovedTurn<'_>) -> Option<usize> {
    let context = approved.context();
    (context.create_paths().is_empty() && context.delete_paths().is_empty())
        .then_some(approved.selected().len())
}

/// Budget, input size and target checks; returns the entry limit.
fn preliminary(
    approved: &ApprovedTurn<'_>,
    workspace_root: &Path,
    limits: StageLimits,
    archive_len: usize,
) -> Result<usize, ArchiveError> {
    validate_archive_budget(limits.max_files, limits.max_archive_bytes)?;
    let max_entries = approved.selected().len() + approved.context().create_paths().len();
    if max_entries > limits.max_files || archive_len > limits.max_archive_bytes {
        return Err(ArchiveError::Budget {
            detail: "input exceeds limit",
        });
    }
    if workspace_root.symlink_metadata().is_ok() {
        return Err(ArchiveError::Workspace {
            detail: "target must not exist".to_owned(),
        });
    }
    Ok(max_entries)
}

fn write_entries(
    approved: &ApprovedTurn<'_>,
    workspace_root: &Path,
    entries: &[(&RepoPath, &[u8])],
) -> Result<StagedWorkspace, ArchiveError> {
    let creates = approved.context().create_paths();
    let deletes = approved.context().delete_paths();
    let policy = approved.policy();
    let selected: BTreeSet<&RepoPath> = approved.selected().iter().collect();
    let present: BTreeSet<&RepoPath> = entries.iter().map(|(p, _)| *p).collect();
    let dropped_without_grant = selected
        .iter()
        .any(|p| !present.contains(p) && !deletes.contains(p));
    let unapproved = present
        .iter()
        .any(|p| !selected.contains(p) && !creates.contains(p));
    if dropped_without_grant || unapproved {
        return Err(ArchiveError::Set);
    }

    // Map each entry to the approved path object it equals; only that object is used to write.
    let approved_paths: BTreeMap<&str, (&RepoPath, bool)> = approved
        .selected()
        .iter()
        .map(|p| (p.as_str(), (p, false)))
        .chain(creates.iter().map(|p| (p.as_str(), (p, true))))
        .collect();
    let mut writes: Vec<(&RepoPath, bool, &[u8])> = Vec::with_capacity(entries.len());
    for &(entry_path, data) in entries {
        let shown = EntryName::from_str(entry_path.as_str());
        let &(target, is_create) = approved_paths
            .get(entry_path.as_str())
            .ok_or(ArchiveError::Set)?;
        policy.validate_path(target)?;
        // Reference step 7 re-reads each entry by name and compares it with the manifest
        // (`ARCHIVE_HASH`) because its manifest and its bytes come from two parsers. Here the
        // entry, its name and its bytes come from one strict parse of one slice (CRC-32 checked,
        // closure verified): the bytes written below are the entry, so there is nothing to
        // re-read or re-hash. The finalizer hashes the staged files from disk.
        let Ok(text) = std::str::from_utf8(data) else {
            return Err(ArchiveError::Utf8 {
                path: shown,
                suffix: "",
            });
        };
        validate_output_text(target.as_str(), text)?;
        writes.push((target, is_create, data));
    }
    let removals: Vec<&RepoPath> = approved
        .selected()
        .iter()
        .filter(|p| !present.contains(p))
        .collect();

    let baseline_ws = materialize_workspace(workspace_root, approved.baseline(), &BTreeMap::new())?;
    let written = open_root(workspace_root).and_then(|dir| {
        for path in &removals {
            dir.remove_file(path.as_str())
                .map_err(|e| ArchiveError::workspace_io("cannot remove deleted file", &e))?;
        }
        for (path, is_create, bytes) in &writes {
            write_file(&dir, path, bytes, *is_create)
                .map_err(|e| ArchiveError::workspace_io("cannot write staged file", &e))?;
        }
        Ok(())
    });
    if let Err(e) = written {
        baseline_ws.cleanup()?;
        return Err(e);
    }
    debug_assert_eq!(baseline_ws.editable_manifest(), approved.expected());
    Ok(baseline_ws)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::build_deterministic_archive;
    use crate::workspace::failpoints;
    use snapshot::{
        ApprovedExecutionContext, BaselineFiles, DefaultPathGuard, RepositorySnapshotEvidence,
    };
    use vocab::Sha256;

    struct Fx {
        context: ApprovedExecutionContext,
        snapshot: RepositorySnapshotEvidence,
        selected: Vec<RepoPath>,
        baseline: BaselineFiles,
    }

    fn fx() -> Fx {
        let context = serde_json::json!({
            "handoff_id": "h", "request_id": "r", "plan_id": "p", "app_id": "a",
            "build_registry_id": "b", "repository_full_name": "o/r",
            "baseline_commit_sha": "0123456789abcdef0123456789abcdef01234567",
            "raw_request": "x", "request_type": "t", "approved_plan_digest": "ab".repeat(32),
            "snapshot_digest": "s", "graph_identity_digest": "g", "impact_report_digest": "i",
            "execution_strategy_id": "e", "rationale": "r", "allowed_paths": ["app/"],
        });
        let files = [("app/a.txt", "a\n"), ("app/b.txt", "b\n")];
        let manifest: BTreeMap<&str, String> = files
            .iter()
            .map(|(k, v)| (*k, Sha256::of(v.as_bytes()).to_string()))
            .collect();
        let snapshot = serde_json::json!({
            "plan_id": "p", "request_id": "r", "app_id": "a", "repository_full_name": "o/r",
            "baseline_commit_sha": "0123456789abcdef0123456789abcdef01234567",
            "snapshot_digest": "s", "file_manifest": manifest,
        });
        Fx {
            context: ApprovedExecutionContext::from_json(&context.to_string()).unwrap(),
            snapshot: RepositorySnapshotEvidence::from_json(&snapshot.to_string()).unwrap(),
            selected: files
                .iter()
                .map(|(k, _)| RepoPath::parse(k).unwrap())
                .collect(),
            baseline: files
                .iter()
                .map(|(k, v)| (RepoPath::parse(k).unwrap(), (*v).to_owned()))
                .collect(),
        }
    }

    const LIMITS: StageLimits = StageLimits {
        max_files: 50,
        max_archive_bytes: crate::envelope::MAX_ARCHIVE_BYTES,
    };

    fn approved<'a>(f: &'a Fx, policy: &'a DefaultPathGuard) -> ApprovedTurn<'a> {
        ApprovedTurn::new(
            &f.context,
            &f.snapshot,
            policy,
            None,
            f.selected.clone(),
            &f.baseline,
        )
        .unwrap()
    }

    fn stage(f: &Fx, archive: &[u8], root: &Path) -> Result<StagedWorkspace, ArchiveError> {
        let policy = DefaultPathGuard::default();
        stage_workspace_archive(&approved(f, &policy), archive, root, LIMITS)
    }

    fn archive() -> Vec<u8> {
        build_deterministic_archive(&[
            (RepoPath::parse("app/a.txt").unwrap(), b"A\n".to_vec()),
            (RepoPath::parse("app/b.txt").unwrap(), b"b\n".to_vec()),
        ])
        .unwrap()
    }

    fn stage_verified(
        f: &Fx,
        archive: &VerifiedArchive,
        root: &Path,
    ) -> Result<StagedWorkspace, ArchiveError> {
        let policy = DefaultPathGuard::default();
        stage_verified_archive(&approved(f, &policy), archive, root, LIMITS)
    }

    fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
        ["app/a.txt", "app/b.txt"]
            .iter()
            .map(|p| ((*p).to_owned(), std::fs::read(root.join(p)).unwrap()))
            .collect()
    }

    /// An archive read once stages exactly like its bytes, and its entry count is checked
    /// against this staging's selection.
    #[test]
    fn verified_archive_stages_like_its_bytes() {
        let f = fx();
        let tmp = tempfile::tempdir().unwrap();
        let limits = crate::reader::ArchiveLimits::default();
        let verified = VerifiedArchive::read(archive(), Some(2), &limits).unwrap();
        assert_eq!(verified.len(), 2);
        let by_bytes = stage(&f, &archive(), &tmp.path().join("bytes")).unwrap();
        let by_verified = stage_verified(&f, &verified, &tmp.path().join("verified")).unwrap();
        assert_eq!(
            tree(&tmp.path().join("bytes")),
            tree(&tmp.path().join("verified"))
        );
        assert_eq!(
            by_bytes.editable_manifest(),
            by_verified.editable_manifest()
        );
        by_bytes.cleanup().unwrap();
        by_verified.cleanup().unwrap();

        let one = build_deterministic_archive(&[(
            RepoPath::parse("app/a.txt").unwrap(),
            b"A\n".to_vec(),
        )])
        .unwrap();
        let one = VerifiedArchive::read(one, None, &limits).unwrap();
        let root = tmp.path().join("one");
        let e = stage_verified(&f, &one, &root).unwrap_err();
        assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_BUDGET");
        assert!(!root.exists());
        // The marker is an archive without entries; the reader refuses anything else.
        let marker = VerifiedArchive::read(EMPTY_ARCHIVE_MARKER.to_vec(), Some(2), &limits);
        assert!(marker.unwrap().is_empty_marker());
        assert!(VerifiedArchive::read(b"PK".to_vec(), None, &limits).is_err());
    }

    /// Stages [`archive`] into a fresh root where the two baseline writes succeed, the first
    /// staged write fails and so do the first `failed_cleanups` removals: the error and the root
    /// (with the temporary directory that holds it).
    fn stage_failing_after_baseline(
        failed_cleanups: u32,
    ) -> (tempfile::TempDir, std::path::PathBuf, ArchiveError) {
        let f = fx();
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        failpoints::FAIL_WRITE_AFTER.with(|c| c.set(Some(2)));
        failpoints::FAIL_CLEANUPS.with(|c| c.set(failed_cleanups));
        let e = stage(&f, &archive(), &root).unwrap_err();
        (tmp, root, e)
    }

    /// A write failure after the baseline is materialised removes the tree.
    #[test]
    fn failure_after_materialisation_removes_the_root() {
        let (_tmp, root, e) = stage_failing_after_baseline(0);
        assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_WORKSPACE");
        assert!(!root.exists());
    }

    /// …and when that removal fails, `CODING_WORKSPACE_CLEANUP` replaces the error and the
    /// partial tree remains.
    #[test]
    fn failed_removal_is_reported_as_cleanup() {
        let (_tmp, root, e) = stage_failing_after_baseline(1);
        assert_eq!(e.code(), "CODING_WORKSPACE_CLEANUP");
        assert!(root.join("app/a.txt").exists());
    }

    /// After a successful stage, strict cleanup fails once, then succeeds, then stays idempotent.
    #[test]
    fn staged_cleanup_is_strict_then_idempotent() {
        let f = fx();
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        let ws = stage(&f, &archive(), &root).unwrap();
        assert_eq!(std::fs::read(root.join("app/a.txt")).unwrap(), b"A\n");
        failpoints::FAIL_CLEANUPS.with(|c| c.set(1));
        assert_eq!(ws.cleanup().unwrap_err().code(), "CODING_WORKSPACE_CLEANUP");
        assert!(root.exists());
        ws.cleanup().unwrap();
        assert!(!root.exists());
        ws.cleanup().unwrap();
    }
}
