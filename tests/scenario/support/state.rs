//! Approvals over real repositories and state directories holding the recorded images.

use std::path::{Path, PathBuf};

use snapshot::{ApprovedExecutionContext, GitSnapshot};

use super::docker::proof_images;

/// A fresh state directory holding a copy of the recorded images.
pub fn state_with_images() -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    let images = proof_images();
    std::fs::write(
        state.path().join("images.json"),
        serde_json::to_vec(&images).unwrap(),
    )
    .unwrap();
    state
}

/// [`state_with_images`] plus the python gate image approved as gate image `python` (`image
/// approve`), which `demo` runs its gates in: `None` when the image is missing (a failure when
/// Docker is required). The demo then builds nothing.
pub fn state_for_demo() -> Option<tempfile::TempDir> {
    let id = crate::gates::python_image()?;
    let state = state_with_images();
    super::cli::run_ok(
        super::cli::bin()
            .args(["image", "approve", "--gate", "python", "--id", &id])
            .env("PATCH_CANDIDATE_STATE_DIR", state.path()),
    );
    Some(state)
}

/// An approval for `repo@commit` with the snapshot digest computed from the repository.
pub fn approval(
    repo: &Path,
    commit: &str,
    task: &str,
    allowed: &[&str],
    read_only: &[&str],
    create: &[&str],
    delete: &[&str],
) -> ApprovedExecutionContext {
    let snap = GitSnapshot::load(repo, commit).unwrap();
    let digest = snap.snapshot_digest("acme/fixture").to_string();
    let doc = serde_json::json!({
        "schema_version": "managed_refinement.execution_context.v1",
        "handoff_id": "handoff-t",
        "request_id": "request-t",
        "plan_id": "plan-t",
        "app_id": "app-t",
        "build_registry_id": "build-t",
        "repository_full_name": "acme/fixture",
        "baseline_commit_sha": commit,
        "raw_request": task,
        "request_type": "change",
        "approved_plan_digest": "0".repeat(64),
        "snapshot_digest": digest,
        "graph_identity_digest": "g",
        "impact_report_digest": "i",
        "execution_strategy_id": "s",
        "rationale": "test approval",
        "allowed_paths": allowed,
        "prohibited_paths": [],
        "read_only_paths": read_only,
        "create_paths": create,
        "delete_paths": delete,
    });
    ApprovedExecutionContext::from_json(&doc.to_string()).unwrap()
}

/// [`approval`] granting `app/` and `tests/`, `tests/` read-only, nothing created or deleted (the
/// demo repository's usual grant).
pub fn app_approval(repo: &Path, commit: &str, task: &str) -> ApprovedExecutionContext {
    approval(
        repo,
        commit,
        task,
        &["app/", "tests/"],
        &["tests/"],
        &[],
        &[],
    )
}

/// `gate init python --image IMAGE` as `work/gates.toml`, then `approve` of `repo` granting
/// `allow` for `task` and requiring gate `pytest` of those definitions, as `work/approval.json`;
/// both through the binary with `state` as the state directory. Returns (gates, approval).
pub fn approve_with_pytest(
    state: &Path,
    work: &Path,
    image: &str,
    repo: &Path,
    allow: &str,
    task: &str,
) -> (PathBuf, PathBuf) {
    let bin = || {
        let mut c = super::cli::bin();
        c.env("PATCH_CANDIDATE_STATE_DIR", state);
        c
    };
    let gates = work.join("gates.toml");
    let init = super::cli::run_ok(bin().args(["gate", "init", "python", "--image", image]));
    std::fs::write(&gates, &init.stdout).unwrap();
    let approval = work.join("approval.json");
    super::cli::run_ok(
        bin()
            .args(["approve", "--repo"])
            .arg(repo)
            .args(["--allow", allow, "--task", task, "--gate", "pytest"])
            .arg("--gates")
            .arg(&gates)
            .arg("--out")
            .arg(&approval),
    );
    (gates, approval)
}

/// Writes an approval to a file for CLI tests.
pub fn write_approval(dir: &Path, context: &ApprovedExecutionContext) -> PathBuf {
    let path = dir.join("approval.json");
    std::fs::write(&path, serde_json::to_vec_pretty(context).unwrap()).unwrap();
    path
}

/// A candidate's changed files as (path, operation), in the candidate's order.
pub fn ops(candidate: &finalizer::RepositoryPatchCandidate) -> Vec<(String, snapshot::FileOp)> {
    candidate
        .changed_files()
        .iter()
        .map(|f| (f.path().as_str().to_owned(), f.op()))
        .collect()
}
