//! `git_patch` through real `git apply`: a candidate finalised from a real repository is exported,
//! applied on its baseline commit in a fresh repository, and every file's bytes and
//! `git status --porcelain` are compared with what the candidate says (update, create, delete,
//! empty-file create and delete, no trailing newline, CRLF, names Git must quote). The same
//! candidate is the subject of the repository verification's new checks (snapshot digest and
//! derived fields).

use std::collections::BTreeSet;
use std::path::Path;

use finalizer::testkit::paths_with;
use finalizer::{
    RepositoryPatchCandidate, git_patch, git_quote_path, validate_candidate_json,
    verify_against_repository,
};
use serde_json::{Value, json};
use snapshot::FileOp;

use crate::support::{finalised_with, git_ok, git_with_stdin, owned_files, repo_with};

/// The baseline commit's files.
pub const FILES: &[(&str, &str)] = &[
    ("app/service.py", "def answer():\n    return 1\n"),
    ("app/crlf.txt", "one\r\ntwo\r\nthree\r\n"),
    ("app/noeol.txt", "alpha\nbeta"),
    ("app/gains_eol.txt", "keep\nlast"),
    ("app/odd.txt", "page one\u{c}page two\n"),
    ("app/gone.txt", "remove me\n"),
    ("app/gone_noeol.txt", "one\ntwo"),
    ("app/empty_gone.txt", ""),
    ("app/na\u{ef}ve file.txt", "caf\u{e9}\n"),
    ("docs/README.md", "# Readme\n"),
];

/// (path, op, new content).
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
    ("app/gains_eol.txt", "update", Some("keep\nlast\n")),
    ("app/odd.txt", "update", Some("page one\u{c}page 2\n")),
    (
        "app/na\u{ef}ve file.txt",
        "update",
        Some("caf\u{e9} cr\u{e8}me\n"),
    ),
    ("app/gone.txt", "delete", None),
    ("app/gone_noeol.txt", "delete", None),
    ("app/empty_gone.txt", "delete", None),
    ("app/new/module.py", "create", Some("x = 1\n")),
    ("app/new/empty.py", "create", Some("")),
    ("app/new/crlf new.txt", "create", Some("a\r\nb\r\n")),
    ("app/new/\u{fc}nic\u{f8}de", "create", Some("no newline")),
];

fn context(snapshot_digest: &str, commit: &str) -> Value {
    json!({
        "schema_version": "managed_refinement.execution_context.v1",
        "handoff_id": "handoff-1", "request_id": "request-1", "plan_id": "plan-1", "app_id": "app-1",
        "build_registry_id": "build-1", "repository_full_name": "acme/widgets",
        "baseline_commit_sha": commit, "raw_request": "change things", "request_type": "patch",
        "approved_plan_digest": "ab".repeat(32), "snapshot_digest": snapshot_digest,
        "graph_identity_digest": "g", "impact_report_digest": "i", "execution_strategy_id": "s",
        "rationale": "r", "allowed_paths": ["app/"], "prohibited_paths": [], "read_only_paths": [],
        "create_paths": paths_with(CHANGES, "create"), "delete_paths": paths_with(CHANGES, "delete"),
        "required_validation_gates": ["pytest", "lint"], "required_security_gates": ["secret_scan"],
        "required_ci_checks": ["ci/build"],
    })
}

/// A repository, and a candidate finalised from a staged workspace over its commit.
pub fn finalised() -> (tempfile::TempDir, String, RepositoryPatchCandidate) {
    finalised_with(FILES, CHANGES, context)
}

fn porcelain(dir: &Path) -> BTreeSet<String> {
    git_ok(
        dir,
        &[
            "status",
            "--porcelain",
            "--untracked-files=all",
            "--no-renames",
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

/// What `git status --porcelain` must show after applying the patch (`--index`: staged codes).
fn expected_status(candidate: &RepositoryPatchCandidate, index: bool) -> BTreeSet<String> {
    candidate
        .changed_files()
        .iter()
        .map(|f| {
            // Status output also quotes a name holding a space (patch headers do not).
            let path = f.path().as_str();
            let quoted = git_quote_path("", path);
            let name = if quoted == path && path.contains(' ') {
                format!("\"{path}\"")
            } else {
                quoted
            };
            let code = match (f.op(), index) {
                (FileOp::Update, false) => " M",
                (FileOp::Delete, false) => " D",
                (FileOp::Create, false) => "??",
                (FileOp::Update, true) => "M ",
                (FileOp::Delete, true) => "D ",
                (FileOp::Create, true) => "A ",
            };
            format!("{code} {name}")
        })
        .collect()
}

#[allow(
    clippy::disallowed_methods,
    reason = "reads a test repository's work tree"
)]
fn assert_tree_is_the_candidate(dir: &Path, candidate: &RepositoryPatchCandidate) {
    for (path, before) in FILES {
        if !candidate
            .changed_files()
            .iter()
            .any(|f| f.path().as_str() == *path)
        {
            assert_eq!(
                std::fs::read(dir.join(path)).unwrap(),
                before.as_bytes(),
                "{path}"
            );
        }
    }
    for file in candidate.changed_files() {
        let full = dir.join(file.path().as_str());
        match file.content() {
            Some(content) => assert_eq!(
                std::fs::read(&full).unwrap(),
                content.as_bytes(),
                "{}",
                file.path().as_str()
            ),
            None => assert!(!full.exists(), "{} still exists", file.path().as_str()),
        }
    }
}

#[test]
fn the_git_export_applies_on_the_baseline_and_reproduces_every_byte() {
    let (_repo, _commit, candidate) = finalised();
    assert_eq!(candidate.changed_files().len(), CHANGES.len());
    let patch = git_patch(&candidate).unwrap();
    // Both empty files are in the patch, which the candidate's own diffs cannot express.
    assert!(
        patch.contains("diff --git a/app/new/empty.py b/app/new/empty.py\nnew file mode 100644\n")
    );
    assert!(patch.contains(
        "diff --git a/app/empty_gone.txt b/app/empty_gone.txt\ndeleted file mode 100644\n"
    ));
    assert!(patch.contains(
        "diff --git \"a/app/na\\303\\257ve file.txt\" \"b/app/na\\303\\257ve file.txt\"\n"
    ));
    let patch_dir = tempfile::tempdir().unwrap();
    let patch_file = patch_dir.path().join("candidate.patch");
    std::fs::write(&patch_file, &patch).unwrap();
    let patch_arg = patch_file.to_str().unwrap();
    for index in [false, true] {
        // A fresh repository at the same baseline commit.
        let (fresh, _) = repo_with(&owned_files(FILES));
        git_ok(fresh.path(), &["apply", "--check", patch_arg]);
        if index {
            git_ok(fresh.path(), &["apply", "--index", patch_arg]);
        } else {
            git_ok(fresh.path(), &["apply", patch_arg]);
        }
        assert_tree_is_the_candidate(fresh.path(), &candidate);
        assert_eq!(
            porcelain(fresh.path()),
            expected_status(&candidate, index),
            "index: {index}"
        );
        if index {
            // The patch also reverses to the clean baseline (it is exact, not merely applicable).
            git_ok(fresh.path(), &["apply", "-R", "--index", patch_arg]);
            assert_eq!(porcelain(fresh.path()), BTreeSet::new());
        }
    }
    // Fed on stdin it applies the same way.
    let (fresh, _) = repo_with(&owned_files(FILES));
    let out = git_with_stdin(fresh.path(), &["apply", "-"], Some(patch.as_bytes()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_tree_is_the_candidate(fresh.path(), &candidate);
}

#[test]
fn repository_verification_recomputes_the_snapshot_digest_and_derived_fields() {
    let (repo, commit, candidate) = finalised();
    let report = verify_against_repository(&candidate, repo.path()).unwrap();
    assert_eq!(report.baseline_commit_sha, commit);
    assert_eq!(report.snapshot_digest, candidate.snapshot_digest());
    let edited = |edit: &dyn Fn(&mut Value)| {
        let mut doc = serde_json::to_value(&candidate).unwrap();
        edit(&mut doc);
        let c = validate_candidate_json(&serde_json::to_vec(&doc).unwrap()).unwrap();
        verify_against_repository(&c, repo.path())
            .unwrap_err()
            .to_string()
    };
    let other_digest = format!("sha256:{}", "5".repeat(64));
    assert_eq!(
        edited(&|d| d["snapshot_digest"] = json!(other_digest)),
        "REPOSITORY_PATCH_VERIFY_SNAPSHOT: snapshot digest differs from the repository at the baseline commit"
    );
    // The snapshot digest covers the repository identity.
    assert!(
        edited(&|d| d["repository_full_name"] = json!("acme/other"))
            .starts_with("REPOSITORY_PATCH_VERIFY_SNAPSHOT: ")
    );
    for (edit, field) in [
        (
            (&|d: &mut Value| d["summary"] = json!("Approved repository file operations: 1."))
                as &dyn Fn(&mut Value),
            "summary",
        ),
        (
            &|d: &mut Value| d["rationale"] = json!("looks fine"),
            "rationale",
        ),
        (
            &|d: &mut Value| d["changed_files"].as_array_mut().unwrap().reverse(),
            "changed_files order",
        ),
    ] {
        assert_eq!(
            edited(edit),
            format!("REPOSITORY_PATCH_VERIFY_DERIVED: {field} is not what the finalizer derives")
        );
    }
}
