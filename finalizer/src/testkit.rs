//! Candidate builders for tests: the fixed candidate fields, one file per operation with its
//! canonical diff, a sample candidate, and a staged change list written to a tree and turned into
//! a proposal. Compiled for this crate's tests and, with the `testkit` feature, for the tests of
//! the crates above it; never enabled by a binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::path::Path;

use serde_json::{Value, json};
use snapshot::{FileOp, RepoPath, StagedPatchProposal};
use vocab::Sha256;

use crate::diff::unified_diff;
use crate::model::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile};

/// One staged change: (path, `create` | `update` | `delete`, new content).
pub type Change<'a> = (&'a str, &'a str, Option<&'a str>);

/// The fields of every test candidate (`handoff-1`, `acme/widgets`, …).
#[must_use]
pub fn fields() -> CandidateFields {
    CandidateFields {
        handoff_id: "handoff-1".into(),
        request_id: "request-1".into(),
        plan_id: "plan-1".into(),
        app_id: "app-1".into(),
        build_registry_id: "build-1".into(),
        repository_full_name: "acme/widgets".into(),
        baseline_commit_sha: "a".repeat(40),
        approved_plan_digest: "b".repeat(64),
        snapshot_digest: format!("sha256:{}", "c".repeat(64)),
        proposal_id: "proposal-1".into(),
        provider_id: "synthetic".into(),
        summary: "Approved repository file operations: 2.".into(),
        rationale:
            "Derived from approved snapshot and host-verified workspace bytes; validation pending."
                .into(),
        required_validation_gates: vec!["pytest".into(), "lint".into(), "pytest".into()],
        required_security_gates: vec!["secret_scan".into()],
        required_ci_checks: vec![],
    }
}

/// An update of `path` from `before` to `after` with the canonical diff.
#[must_use]
pub fn update(path: &str, before: &str, after: &str) -> RepositoryPatchFile {
    update_with_diff(
        path,
        before,
        after,
        &unified_diff(path, Some(before), Some(after)),
    )
}

/// An update whose diff text is given as is (a hostile or inconsistent diff).
#[must_use]
pub fn update_with_diff(path: &str, before: &str, after: &str, diff: &str) -> RepositoryPatchFile {
    RepositoryPatchFile::new(
        RepoPath::parse(path).unwrap(),
        FileOp::Update,
        Some(Sha256::of(before.as_bytes())),
        Some(Sha256::of(after.as_bytes())),
        Some(after.to_owned()),
        diff.to_owned(),
    )
    .unwrap()
}

/// A create of `path` holding `after` with the canonical diff.
#[must_use]
pub fn create(path: &str, after: &str) -> RepositoryPatchFile {
    RepositoryPatchFile::new(
        RepoPath::parse(path).unwrap(),
        FileOp::Create,
        None,
        Some(Sha256::of(after.as_bytes())),
        Some(after.to_owned()),
        unified_diff(path, None, Some(after)),
    )
    .unwrap()
}

/// A delete of `path` that held `before` with the canonical diff.
#[must_use]
pub fn delete(path: &str, before: &str) -> RepositoryPatchFile {
    RepositoryPatchFile::new(
        RepoPath::parse(path).unwrap(),
        FileOp::Delete,
        Some(Sha256::of(before.as_bytes())),
        None,
        None,
        unified_diff(path, Some(before), None),
    )
    .unwrap()
}

/// A candidate with [`fields`] and `files`.
#[must_use]
pub fn candidate(files: Vec<RepositoryPatchFile>) -> RepositoryPatchCandidate {
    RepositoryPatchCandidate::new(fields(), files).unwrap()
}

/// An update and a create.
#[must_use]
pub fn sample() -> RepositoryPatchCandidate {
    candidate(vec![
        update(
            "app/service.py",
            "def answer():\n    return 1\n",
            "def answer():\n    return 2\n",
        ),
        create("app/new.py", "x = 1\n"),
    ])
}

/// The paths of `changes` whose operation is `op`.
#[must_use]
pub fn paths_with<'a>(changes: &[Change<'a>], op: &str) -> Vec<&'a str> {
    changes
        .iter()
        .filter(|(_, o, _)| *o == op)
        .map(|(p, _, _)| *p)
        .collect()
}

/// Writes (creating parent directories) or removes each change's file under `root`.
#[allow(
    clippy::disallowed_methods,
    reason = "a test edits its own staged tree"
)]
pub fn apply_changes(root: &Path, changes: &[Change<'_>]) {
    for (path, _, content) in changes {
        let full = root.join(path);
        match content {
            Some(c) => {
                std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                std::fs::write(full, c).unwrap();
            }
            None => std::fs::remove_file(full).unwrap(),
        }
    }
}

/// The completed proposal (`proposal-1` by `synthetic`) that claims exactly `changes`.
#[must_use]
pub fn proposal(changes: &[Change<'_>]) -> StagedPatchProposal {
    let changed: Vec<Value> = changes
        .iter()
        .map(|(p, op, c)| json!({"path": p, "op": op, "content": c}))
        .collect();
    let owned: Vec<&str> = changes.iter().map(|(p, _, _)| *p).collect();
    serde_json::from_value(json!({
        "proposal_id": "proposal-1", "provider_id": "synthetic", "status": "completed",
        "changed_files": changed, "owned_paths": owned,
    }))
    .unwrap()
}

/// The candidate finalised from a staged workspace: the `selected` files of `snap` with `changes`
/// applied, claimed by [`proposal`] of `changes`, approved under `context` and `evidence` with
/// the default path guard and `snap` as the proof of absence.
#[cfg(feature = "effects")]
#[must_use]
pub fn finalise_staged(
    context: &snapshot::ApprovedExecutionContext,
    evidence: &snapshot::RepositorySnapshotEvidence,
    snap: &snapshot::GitSnapshot,
    selected: Vec<RepoPath>,
    changes: &[Change<'_>],
) -> RepositoryPatchCandidate {
    let baseline = snap.read_files(&selected).unwrap();
    let ws_tmp = tempfile::tempdir().unwrap();
    let ws = archive::materialize_workspace(
        &ws_tmp.path().join("ws"),
        &baseline,
        &snapshot::BaselineFiles::new(),
    )
    .unwrap();
    apply_changes(ws.root(), changes);
    let policy = snapshot::DefaultPathGuard::default();
    let approved =
        snapshot::ApprovedTurn::new(context, evidence, &policy, Some(snap), selected, &baseline);
    let candidate =
        crate::finalize_repository_patch(&approved.unwrap(), &ws, &proposal(changes)).unwrap();
    ws.cleanup().unwrap();
    candidate
}
