//! Shared builders for unit tests.

use snapshot::{FileOp, RepoPath};

use vocab::Sha256;

use crate::diff::unified_diff;
use crate::model::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile};

pub(crate) fn fields() -> CandidateFields {
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

pub(crate) fn update(path: &str, before: &str, after: &str) -> RepositoryPatchFile {
    RepositoryPatchFile::new(
        RepoPath::parse(path).unwrap(),
        FileOp::Update,
        Some(Sha256::of(before.as_bytes())),
        Some(Sha256::of(after.as_bytes())),
        Some(after.to_owned()),
        unified_diff(path, Some(before), Some(after)),
    )
    .unwrap()
}

pub(crate) fn create(path: &str, after: &str) -> RepositoryPatchFile {
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

pub(crate) fn delete(path: &str, before: &str) -> RepositoryPatchFile {
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

pub(crate) fn candidate(files: Vec<RepositoryPatchFile>) -> RepositoryPatchCandidate {
    RepositoryPatchCandidate::new(fields(), files).unwrap()
}

pub(crate) fn sample() -> RepositoryPatchCandidate {
    candidate(vec![
        update(
            "app/service.py",
            "def answer():\n    return 1\n",
            "def answer():\n    return 2\n",
        ),
        create("app/new.py", "x = 1\n"),
    ])
}
