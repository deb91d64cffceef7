//! Read-only verification of a candidate against the repository it claims to patch: every
//! `previous_sha256` equals the file at `baseline_commit_sha`, every create is absent from the
//! complete tree there (case-folded, file/directory prefixes included), every diff is the
//! canonical diff of those bytes, the combined patch passes `git apply --check --cached` against
//! the commit's tree, applying it to a scratch copy yields exactly the candidate's content, the
//! snapshot digest is the one recomputed at the commit, and every derived field (summary,
//! rationale, file order, commit spelling) is what the finalizer writes
//! ([`crate::check_derived_fields`]).
//!
//! # Security
//! The repository is only read: the commit's tree goes into a temporary index file
//! (`GIT_INDEX_FILE`) inside a fresh 0700 directory, `apply` runs with `--check --cached` against
//! it (nothing is written), and the byte-exact application happens in a separate scratch
//! repository. Every git process runs with a cleared environment and no user or system config.

use std::collections::BTreeMap;
use std::path::Path;

use cap_std::fs::Dir;
use serde::Serialize;
use snapshot::{CreateAbsence as _, FileOp, GitSnapshot, RepoPath};
use vocab::Sha256;

use crate::derived::check_derived_fields;
use crate::diff::unified_diff;
use crate::error::FinalizeError;
use crate::model::RepositoryPatchCandidate;

/// What [`verify_against_repository`] established.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepositoryVerification {
    pub baseline_commit_sha: String,
    pub files_checked: usize,
    /// Files whose diff is empty (an empty file created or deleted): checked by hash only.
    pub files_without_diff: usize,
    /// The snapshot digest recomputed at the commit (equal to the candidate's).
    pub snapshot_digest: String,
}

fn git_err(detail: &str) -> FinalizeError {
    FinalizeError::VerifyGit {
        detail: detail.to_owned(),
    }
}

/// The snapshot crate's isolated git launcher, with apply settings pinned.
fn git() -> snapshot::Git {
    let mut cmd = snapshot::Git::isolated(None);
    cmd.args([
        "-c",
        "core.autocrlf=false",
        "-c",
        "core.safecrlf=false",
        "-c",
        "apply.whitespace=nowarn",
    ]);
    cmd
}

/// Runs `cmd` under the launcher's git deadline (output discarded), feeding `stdin`; true on
/// exit status 0.
fn run(cmd: &mut snapshot::Git, stdin: Option<&[u8]>) -> Result<bool, FinalizeError> {
    cmd.run(stdin)
        .map(|out| out.success())
        .map_err(|e| FinalizeError::VerifyGit {
            detail: e.to_string(),
        })
}

/// Verifies `candidate` against the repository at `repo` (see the module docs).
///
/// # Errors
/// Snapshot codes for a missing repository or commit (`REPOSITORY_SNAPSHOT_*`);
/// `REPOSITORY_PATCH_VERIFY_BASELINE` when a previous hash differs from the commit;
/// `REPOSITORY_PATCH_CREATE_EXISTS` / `REPOSITORY_PATCH_CREATE_PROOF` when a create collides;
/// `REPOSITORY_PATCH_VERIFY_DIFF` when a diff is not the canonical diff of the bytes;
/// `REPOSITORY_PATCH_VERIFY_APPLY` when git refuses the patch; `REPOSITORY_PATCH_VERIFY_RESULT`
/// when the applied bytes differ; `REPOSITORY_PATCH_VERIFY_SNAPSHOT` when the snapshot digest
/// differs from the one recomputed at the commit; `REPOSITORY_PATCH_VERIFY_DERIVED` when a
/// derived field differs; `REPOSITORY_PATCH_VERIFY_GIT` when git cannot run.
pub fn verify_against_repository(
    candidate: &RepositoryPatchCandidate,
    repo: &Path,
) -> Result<RepositoryVerification, FinalizeError> {
    let snap = GitSnapshot::load(repo, candidate.baseline_commit_sha())?;
    let mut existing: Vec<RepoPath> = Vec::new();
    for file in candidate.changed_files() {
        let path = file.path();
        match file.op() {
            FileOp::Create => snap.prove_absent(path)?,
            FileOp::Update | FileOp::Delete => {
                if snap.manifest().get(path) != file.previous_sha256() {
                    return Err(FinalizeError::VerifyBaseline {
                        path: path.as_str().to_owned(),
                    });
                }
                existing.push(path.clone());
            }
        }
    }
    let before = snap.read_files(&existing)?;
    let mut patch = String::new();
    let mut without_diff = 0;
    for file in candidate.changed_files() {
        let old = before.get(file.path()).map(String::as_str);
        if unified_diff(file.path().as_str(), old, file.content()) != file.diff() {
            return Err(FinalizeError::VerifyDiff {
                path: file.path().as_str().to_owned(),
            });
        }
        if file.diff().is_empty() {
            without_diff += 1;
        }
        patch.push_str(file.diff());
    }
    if !patch.is_empty() {
        let tmp = tempfile::Builder::new()
            .prefix("patch-candidate-verify-")
            .tempdir()
            .map_err(|_| git_err("cannot create a temporary directory"))?;
        check_against_tree(&snap, tmp.path(), patch.as_bytes())?;
        apply_to_scratch(candidate, &before, tmp.path(), patch.as_bytes())?;
    }
    let snapshot_digest = snap
        .snapshot_digest(candidate.repository_full_name())
        .to_string();
    if snapshot_digest != candidate.snapshot_digest() {
        return Err(FinalizeError::VerifySnapshot);
    }
    check_derived_fields(candidate)?;
    if snap.commit() != candidate.baseline_commit_sha() {
        return Err(FinalizeError::VerifyDerived {
            field: "baseline_commit_sha",
        });
    }
    Ok(RepositoryVerification {
        baseline_commit_sha: snap.commit().to_owned(),
        files_checked: candidate.changed_files().len(),
        files_without_diff: without_diff,
        snapshot_digest,
    })
}

/// `git apply --check --cached` against the commit's tree in a temporary index.
fn check_against_tree(snap: &GitSnapshot, tmp: &Path, patch: &[u8]) -> Result<(), FinalizeError> {
    let index = tmp.join("index");
    let read = run(
        git()
            .env("GIT_INDEX_FILE", &index)
            .arg("--git-dir")
            .arg(snap.git_dir())
            .args(["read-tree", snap.commit()]),
        None,
    )?;
    if !read {
        return Err(git_err(
            "cannot read the commit's tree into a temporary index",
        ));
    }
    let applies = run(
        git()
            .env("GIT_INDEX_FILE", &index)
            .arg("--git-dir")
            .arg(snap.git_dir())
            .args(["apply", "--check", "--cached", "-"]),
        Some(patch),
    )?;
    if !applies {
        return Err(FinalizeError::VerifyApply);
    }
    Ok(())
}

/// Applies the patch in a scratch repository holding only the previous files, then compares
/// every changed file with the candidate.
fn apply_to_scratch(
    candidate: &RepositoryPatchCandidate,
    before: &BTreeMap<RepoPath, String>,
    tmp: &Path,
    patch: &[u8],
) -> Result<(), FinalizeError> {
    let scratch = tmp.join("scratch");
    if !run(git().arg("init").arg("-q").arg(&scratch), None)? {
        return Err(git_err("cannot create a scratch repository"));
    }
    let dir = Dir::open_ambient_dir(&scratch, cap_std::ambient_authority())
        .map_err(|_| git_err("cannot open the scratch repository"))?;
    let io = |_| git_err("cannot write the scratch repository");
    for (path, content) in before {
        if let Some((parent, _)) = path.as_str().rsplit_once('/') {
            dir.create_dir_all(parent).map_err(io)?;
        }
        dir.write(path.as_str(), content.as_bytes()).map_err(io)?;
    }
    let applied = run(
        git().arg("-C").arg(&scratch).args(["apply", "-"]),
        Some(patch),
    )?;
    if !applied {
        return Err(FinalizeError::VerifyApply);
    }
    for file in candidate.changed_files() {
        let path = file.path();
        let got = dir.read(path.as_str()).ok();
        let ok = match (file.content(), got) {
            (Some(content), Some(bytes)) => bytes == content.as_bytes(),
            // An empty file's create has no diff, so git creates nothing.
            (Some(content), None) => content.is_empty() && file.diff().is_empty(),
            (None, None) => true,
            // An empty file's delete has no diff either; the hash check covered it.
            (None, Some(bytes)) => bytes.is_empty() && file.diff().is_empty(),
        };
        if !ok || file.new_sha256() != file.content().map(|c| Sha256::of(c.as_bytes())).as_ref() {
            return Err(FinalizeError::VerifyResult {
                path: path.as_str().to_owned(),
            });
        }
    }
    Ok(())
}
