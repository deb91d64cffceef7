//! Naming a commit the way a person does (`HEAD`, a branch, a tag, an abbreviated id) and telling
//! whether a work tree has uncommitted changes. Both run git through the same hardened command
//! and deadline as the loader; the revision is resolved in the object database only, and the work
//! tree is only looked at (never written: optional locks are off, so the index is not refreshed).

use std::path::Path;

use super::launch::capture;
use super::process::Deadline;
use super::{GIT_DEADLINE, SMALL_OUTPUT_BYTES, discover_git_dir, git_command_with_path};
use crate::error::SnapshotError;

/// Longest revision text accepted.
pub const MAX_REVISION_CHARS: usize = 256;
/// Most bytes of `git status --porcelain -z` read: far beyond any reviewable change set.
const MAX_STATUS_BYTES: usize = 16 * 1024 * 1024;

/// What `git status` says about a repository's work tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkTreeState {
    /// A bare repository (or its git directory): there is no work tree.
    NoWorkTree,
    /// Nothing modified, staged or untracked.
    Clean,
    /// `entries` paths are modified, staged or untracked (ignored files are not counted).
    Changed { entries: usize },
}

fn commit_error(detail: &str) -> SnapshotError {
    SnapshotError::Commit {
        detail: detail.to_owned(),
    }
}

/// The revision text rule: 1..=256 characters, no leading `-` (never an option), no whitespace or
/// control characters. Everything else is git's to interpret (`HEAD~2`, `v1.0`, `main`, ids).
fn check_revision_text(rev: &str) -> Result<(), SnapshotError> {
    if rev.is_empty() || rev.chars().count() > MAX_REVISION_CHARS {
        return Err(commit_error("revision must be 1..=256 characters"));
    }
    if rev.starts_with('-') {
        return Err(commit_error("revision must not start with '-'"));
    }
    if rev.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(commit_error(
            "revision must not contain whitespace or control characters",
        ));
    }
    Ok(())
}

/// Resolves `rev` to the 40-digit id of the commit it names in the repository at `repo`.
///
/// # Errors
/// `REPOSITORY_SNAPSHOT_COMMIT` when the text is not a plausible revision or names no commit;
/// `REPOSITORY_SNAPSHOT_REPOSITORY` when `repo` is not a repository; `REPOSITORY_SNAPSHOT_GIT`
/// when git cannot run or prints something unexpected.
///
/// # Security
/// Runs only `git rev-parse --verify` against the object database and refs, with the loader's
/// cleared environment and deadline.
pub fn resolve_commit(repo: &Path, rev: &str) -> Result<String, SnapshotError> {
    let path_var = std::env::var_os("PATH");
    let path_var = path_var.as_deref();
    check_revision_text(rev)?;
    Deadline::run(GIT_DEADLINE, |deadline| {
        let git_dir = discover_git_dir(deadline, repo, path_var)?;
        let mut cmd = git_command_with_path(path_var, Some(&git_dir));
        cmd.args(["rev-parse", "--quiet", "--verify", "--end-of-options"])
            .arg(format!("{rev}^{{commit}}"));
        let output = capture(deadline, &mut cmd, SMALL_OUTPUT_BYTES)?;
        if !output.status.success() {
            return Err(commit_error(
                "revision does not name a commit in the repository",
            ));
        }
        let text = std::str::from_utf8(&output.stdout)
            .map_err(|_| super::process::git_error("rev-parse printed a non-UTF-8 id"))?;
        let id = text.strip_suffix('\n').unwrap_or(text);
        if id.len() != 40 || !id.bytes().all(vocab::is_lower_hex) {
            return Err(commit_error(
                "the repository does not use 40-digit SHA-1 commit ids",
            ));
        }
        Ok(id.to_owned())
    })
}

/// Whether the work tree of the repository at `repo` has uncommitted changes (modified, staged or
/// untracked files; ignored files do not count). Informational: snapshots read the commit only.
///
/// # Errors
/// `REPOSITORY_SNAPSHOT_REPOSITORY` when `repo` is not a repository; `REPOSITORY_SNAPSHOT_GIT`
/// when git cannot run, fails, or prints more than 16 MiB.
///
/// # Security
/// Runs `git status` with the loader's cleared environment, optional locks off (the index is not
/// rewritten) and fsmonitor disabled.
pub fn work_tree_state(repo: &Path) -> Result<WorkTreeState, SnapshotError> {
    let path_var = std::env::var_os("PATH");
    let path_var = path_var.as_deref();
    Deadline::run(GIT_DEADLINE, |deadline| {
        let git_dir = discover_git_dir(deadline, repo, path_var)?;
        let absolute = std::path::absolute(repo).map_err(|_| SnapshotError::Repository {
            detail: "repository path cannot be made absolute".to_owned(),
        })?;
        let mut bare = git_command_with_path(path_var, Some(&git_dir));
        bare.args(["rev-parse", "--is-bare-repository"]);
        let output = capture(deadline, &mut bare, SMALL_OUTPUT_BYTES)?;
        // The git directory itself (`repo` is `.git`) has no work tree of its own either.
        if !output.status.success() || output.stdout != b"false\n" || absolute == git_dir {
            return Ok(WorkTreeState::NoWorkTree);
        }
        let mut cmd = git_command_with_path(path_var, None);
        cmd.arg("-C").arg(&absolute).args([
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=normal",
            "--no-renames",
            "--ignore-submodules=none",
        ]);
        if let Some(parent) = absolute.parent() {
            cmd.env("GIT_CEILING_DIRECTORIES", parent);
        }
        let output = capture(deadline, &mut cmd, MAX_STATUS_BYTES)?;
        if !output.status.success() {
            return Err(super::process::git_error("git status failed"));
        }
        let entries = output.stdout.iter().filter(|b| **b == 0).count();
        Ok(if entries == 0 {
            WorkTreeState::Clean
        } else {
            WorkTreeState::Changed { entries }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::git;

    fn repo() -> (tempfile::TempDir, String, String) {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "-b", "main", "."]);
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        git(dir.path(), &["add", "-A"]);
        git(dir.path(), &["commit", "-q", "-m", "one"]);
        let first = git(dir.path(), &["rev-parse", "HEAD"]);
        std::fs::write(dir.path().join("a.txt"), "b\n").unwrap();
        git(dir.path(), &["commit", "-q", "-am", "two"]);
        git(dir.path(), &["tag", "v1"]);
        let second = git(dir.path(), &["rev-parse", "HEAD"]);
        (dir, first, second)
    }

    #[test]
    fn revisions_resolve_to_full_commit_ids() {
        let (dir, first, second) = repo();
        for (rev, expected) in [
            ("HEAD", &second),
            ("main", &second),
            ("v1", &second),
            ("HEAD~1", &first),
            (&first[..10], &first),
            (first.as_str(), &first),
        ] {
            assert_eq!(&resolve_commit(dir.path(), rev).unwrap(), expected, "{rev}");
        }
    }

    #[test]
    fn bad_revisions_are_commit_errors() {
        let (dir, _, _) = repo();
        let tree = git(dir.path(), &["rev-parse", "HEAD^{tree}"]);
        for rev in [
            "",
            "-n",
            "--all",
            "HEAD ~1",
            "a\nb",
            "no-such-branch",
            &"0".repeat(40),
            &"x".repeat(MAX_REVISION_CHARS + 1),
        ] {
            let e = resolve_commit(dir.path(), rev).unwrap_err();
            assert_eq!(e.code(), "REPOSITORY_SNAPSHOT_COMMIT", "{rev:?}");
        }
        // A tree id is not a commit (`^{commit}` peels tags, never trees).
        let e = resolve_commit(dir.path(), &tree).unwrap_err();
        assert_eq!(e.code(), "REPOSITORY_SNAPSHOT_COMMIT");
        let plain = tempfile::tempdir().unwrap();
        let e = resolve_commit(plain.path(), "HEAD").unwrap_err();
        assert_eq!(e.code(), "REPOSITORY_SNAPSHOT_REPOSITORY");
    }

    #[test]
    fn work_tree_state_counts_uncommitted_changes() {
        let (dir, _, _) = repo();
        assert_eq!(work_tree_state(dir.path()).unwrap(), WorkTreeState::Clean);
        std::fs::write(dir.path().join("a.txt"), "dirty\n").unwrap();
        std::fs::write(dir.path().join("new.txt"), "n\n").unwrap();
        assert_eq!(
            work_tree_state(dir.path()).unwrap(),
            WorkTreeState::Changed { entries: 2 }
        );
        assert_eq!(
            work_tree_state(&dir.path().join(".git")).unwrap(),
            WorkTreeState::NoWorkTree
        );
        let bare = tempfile::tempdir().unwrap();
        git(bare.path(), &["init", "-q", "--bare", "."]);
        assert_eq!(
            work_tree_state(bare.path()).unwrap(),
            WorkTreeState::NoWorkTree
        );
    }
}
