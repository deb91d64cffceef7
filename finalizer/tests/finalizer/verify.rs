//! End to end on real repositories: Git snapshot → staged workspace → finalize → store →
//! `verify_against_repository`, plus tampering cases. The source repository is never modified.

use std::path::Path;

use finalizer::{
    CandidateStore, RepositoryPatchCandidate, repository_patch_digest, validate_candidate_json,
    verify_against_repository,
};
use serde_json::{Value, json};

use crate::support::{finalised_with, git_ok};

pub const FILES: &[(&str, &str)] = &[
    ("app/service.py", "def answer():\n    return 1\n"),
    ("app/crlf.txt", "one\r\ntwo\r\nthree\r\n"),
    ("app/noeol.txt", "alpha\nbeta"),
    ("app/odd.txt", "page one\u{c}page two\n"),
    ("app/gone.txt", "remove me\n"),
    ("app/empty_gone.txt", ""),
    ("docs/README.md", "# Readme\n"),
];

pub const CHANGES: &[(&str, &str, Option<&str>)] = &[
    (
        "app/service.py",
        "update",
        Some("def answer():\n    return 2\n"),
    ),
    (
        "app/crlf.txt",
        "update",
        Some("one\r\n2\r\nthree\r\nfour\r\n"),
    ),
    ("app/noeol.txt", "update", Some("alpha\nBETA")),
    ("app/odd.txt", "update", Some("page one\u{c}page 2\n")),
    ("app/gone.txt", "delete", None),
    ("app/empty_gone.txt", "delete", None),
    ("app/new/module.py", "create", Some("x = 1\n")),
    ("app/new/empty.py", "create", Some("")),
];

pub fn context(snapshot_digest: &str, commit: &str) -> Value {
    json!({
        "schema_version": "managed_refinement.execution_context.v1",
        "handoff_id": "handoff-1", "request_id": "request-1", "plan_id": "plan-1", "app_id": "app-1",
        "build_registry_id": "build-1", "repository_full_name": "acme/widgets",
        "baseline_commit_sha": commit, "raw_request": "change things", "request_type": "patch",
        "approved_plan_digest": "ab".repeat(32), "snapshot_digest": snapshot_digest,
        "graph_identity_digest": "g", "impact_report_digest": "i", "execution_strategy_id": "s",
        "rationale": "r", "allowed_paths": ["app/"], "prohibited_paths": [], "read_only_paths": [],
        "create_paths": ["app/new/empty.py", "app/new/module.py"],
        "delete_paths": ["app/empty_gone.txt", "app/gone.txt"],
        "required_validation_gates": ["pytest"], "required_security_gates": [], "required_ci_checks": [],
    })
}

/// A repository, and a candidate finalised from a staged workspace over its commit.
pub fn finalised() -> (tempfile::TempDir, String, RepositoryPatchCandidate) {
    finalised_with(FILES, CHANGES, context)
}

fn fingerprint(repo: &Path) -> (String, Vec<u8>, String) {
    (
        git_ok(repo, &["status", "--porcelain", "--ignored"]),
        std::fs::read(repo.join(".git/index")).unwrap(),
        git_ok(repo, &["for-each-ref"]),
    )
}

#[test]
fn a_candidate_from_a_real_repository_verifies_and_the_repository_is_untouched() {
    let (repo, commit, candidate) = finalised();
    assert_eq!(candidate.changed_files().len(), CHANGES.len());
    let before = fingerprint(repo.path());
    let report = verify_against_repository(&candidate, repo.path()).unwrap();
    assert_eq!(report.baseline_commit_sha, commit);
    assert_eq!(report.files_checked, CHANGES.len());
    assert_eq!(
        report.files_without_diff, 2,
        "empty create and empty delete"
    );
    assert_eq!(fingerprint(repo.path()), before);
    // Stored, read back and verified again.
    let store_dir = tempfile::tempdir().unwrap();
    let store = CandidateStore::open(store_dir.path()).unwrap();
    let digest = store.put(&candidate).unwrap();
    assert_eq!(digest, repository_patch_digest(&candidate).unwrap());
    let back = store.get(&digest).unwrap();
    verify_against_repository(&back, repo.path()).unwrap();
}

fn tampered(
    candidate: &RepositoryPatchCandidate,
    edit: impl FnOnce(&mut Value),
) -> RepositoryPatchCandidate {
    let mut doc = serde_json::to_value(candidate).unwrap();
    edit(&mut doc);
    validate_candidate_json(&serde_json::to_vec(&doc).unwrap()).unwrap()
}

fn index_of(doc: &Value, path: &str) -> usize {
    doc["changed_files"]
        .as_array()
        .unwrap()
        .iter()
        .position(|f| f["path"] == path)
        .unwrap()
}

#[test]
fn tampered_candidates_fail_verification_with_codes() {
    let (repo, _, candidate) = finalised();
    let code = |c: &RepositoryPatchCandidate| {
        verify_against_repository(c, repo.path())
            .unwrap_err()
            .code()
    };
    let c = tampered(&candidate, |d| {
        let i = index_of(d, "app/service.py");
        d["changed_files"][i]["previous_sha256"] = json!(vocab::Sha256::of(b"other").to_string());
    });
    assert_eq!(code(&c), "REPOSITORY_PATCH_VERIFY_BASELINE");
    let c = tampered(&candidate, |d| {
        let i = index_of(d, "app/service.py");
        d["changed_files"][i]["diff"] =
            json!("--- a/app/service.py\n+++ b/app/service.py\n@@ -1 +1 @@\n-x\n+y\n");
    });
    assert_eq!(code(&c), "REPOSITORY_PATCH_VERIFY_DIFF");
    let c = tampered(&candidate, |d| {
        let i = index_of(d, "app/new/module.py");
        d["changed_files"][i]["path"] = json!("DOCS/readme.md");
    });
    assert_eq!(code(&c), "REPOSITORY_PATCH_CREATE_EXISTS");
    let c = tampered(&candidate, |d| {
        let i = index_of(d, "app/new/module.py");
        d["changed_files"][i]["path"] = json!("app/service.py/inner.py");
    });
    assert_eq!(code(&c), "REPOSITORY_PATCH_CREATE_PROOF");
    let c = tampered(&candidate, |d| {
        d["baseline_commit_sha"] = json!("f".repeat(40))
    });
    assert_eq!(code(&c), "REPOSITORY_SNAPSHOT_COMMIT");
    // A later commit changes the file: the old candidate no longer matches its blob there.
    std::fs::write(repo.path().join("app/service.py"), "changed upstream\n").unwrap();
    git_ok(repo.path(), &["commit", "-q", "-am", "upstream"]);
    let head = git_ok(repo.path(), &["rev-parse", "HEAD"])
        .trim()
        .to_owned();
    let c = tampered(&candidate, |d| d["baseline_commit_sha"] = json!(head));
    assert_eq!(code(&c), "REPOSITORY_PATCH_VERIFY_BASELINE");
}
