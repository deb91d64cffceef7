//! From your own repository to a verified candidate with the `patch-candidate` binary and no
//! hand-written JSON: `approve` on a fresh `git init` repository, `finalize --staged`, `verify`;
//! every bad input of `approve` (a stable code naming the flag, exit 2 or 3, nothing written);
//! and `run` with an `approve` approval and neither `--task` nor `--commit` (Docker).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::proof::{DASHBOARD, demo_files};
use crate::support::*;

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A fresh repository: two sources, a test, a README; returns (dir, HEAD).
fn own_repo() -> (tempfile::TempDir, String) {
    git_repo(&BTreeMap::from([
        ("src/lib.rs", "pub fn one() -> u32 {\n    1\n}\n".to_owned()),
        ("src/old.rs", "// retired\n".to_owned()),
        ("tests/one.rs", "#[test]\nfn one() {}\n".to_owned()),
        ("README.md", "# mine\n".to_owned()),
    ]))
}

fn approve(repo: &Path, extra: &[&str]) -> Command {
    let mut cmd = bin();
    cmd.arg("approve")
        .arg("--repo")
        .arg(repo)
        .args(["--allow", "src/", "--read-only", "tests/"])
        .args(["--task", "Return two, add two.rs, retire old.rs."])
        .args(extra);
    cmd
}

/// A staged tree, `staged` below `work`, holding `files` (relative path, content); returns its path.
fn staged_tree(work: &Path, files: &[(&str, &str)]) -> PathBuf {
    let staged = work.join("staged");
    std::fs::create_dir(&staged).unwrap();
    let files = files
        .iter()
        .map(|(rel, text)| (*rel, text.as_bytes(), false));
    snapshot::testkit::write_files(&staged, files);
    staged
}

/// `--json finalize` of the tree `staged` against `repo` under `approval`.
fn finalize_staged(repo: &Path, approval: &Path, staged: &Path) -> Command {
    let mut cmd = bin();
    cmd.args(["--json", "finalize", "--repo"])
        .arg(repo)
        .arg("--approval")
        .arg(approval)
        .arg("--staged")
        .arg(staged);
    cmd
}

#[test]
fn approve_finalize_staged_and_verify_on_a_fresh_repository() {
    let (repo_dir, head) = own_repo();
    let repo = repo_dir.path();
    let work = tempfile::tempdir().unwrap();
    let approval = work.path().join("approval.json");
    let out = approve(
        repo,
        &["--create", "src/two.rs", "--delete", "src/old.rs", "--out"],
    )
    .arg(&approval)
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert!(out.stdout.is_empty(), "the approval went to --out");
    let text = stderr_text(&out);
    assert_contains_all(
        &text,
        &[
            "editable (2):\n  src/lib.rs\n  src/old.rs\n",
            "read-only (1):\n  tests/one.rs\n",
            "may create (1):\n  src/two.rs\n",
            "may delete (1):\n  src/old.rs\n",
            "generated plan_id: plan-",
            "mode 0600",
        ],
    );
    let mode = std::fs::metadata(&approval).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&approval).unwrap()).unwrap();
    assert_eq!(doc["baseline_commit_sha"], head.as_str());

    // The change, made by hand in a staged tree: no proposal or snapshot JSON to write.
    let staged = staged_tree(
        work.path(),
        &[
            ("src/lib.rs", "pub fn one() -> u32 {\n    2\n}\n"),
            ("src/two.rs", "pub fn two() -> u32 {\n    2\n}\n"),
        ],
    );
    let store = work.path().join("candidates");
    let out = finalize_staged(repo, &approval, &staged)
        .arg("--store")
        .arg(&store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_text(&out));
    let doc = json_of(&out);
    let files = changed_files(&doc);
    let pairs = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        files,
        pairs(&[
            ("src/lib.rs", "update"),
            ("src/old.rs", "delete"),
            ("src/two.rs", "create")
        ])
    );
    let stored = PathBuf::from(doc["stored"].as_str().unwrap());
    let out = bin()
        .args(["--json", "verify"])
        .arg(&stored)
        .arg("--repo")
        .arg(repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert_eq!(json_of(&out)["digest"], doc["digest"]);
    // Nothing was written into the repository.
    assert_eq!(git(repo, &["status", "--porcelain", "--ignored"]), "");
}

/// Each bad input: a stable code first on stderr and in the `--json` error, naming the flag,
/// the failure class's exit status, and nothing written anywhere.
#[test]
fn approve_bad_input_has_stable_codes_and_writes_nothing() {
    let (repo_dir, _) = own_repo();
    let repo = repo_dir.path();
    let work = tempfile::tempdir().unwrap();
    let out_file = work.path().join("approval.json");
    let out_arg = out_file.to_str().unwrap().to_owned();
    let inside = repo.join("src/approval.json");
    let inside_arg = inside.to_str().unwrap().to_owned();
    let cases: Vec<(&str, Vec<&str>, &str, &str, u8)> = vec![
        (
            "unknown path",
            vec!["--allow", "lib/", "--out", &out_arg],
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--allow",
            2,
        ),
        (
            "create exists",
            vec!["--create", "src/lib.rs", "--out", &out_arg],
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--create",
            2,
        ),
        (
            "grants collide",
            vec![
                "--create", "src/n.rs", "--create", "src/N.rs", "--out", &out_arg,
            ],
            "PATCH_CANDIDATE_APPROVE_GRANTS",
            "--create",
            2,
        ),
        (
            "grants overlap",
            vec![
                "--create",
                "src/d",
                "--create",
                "src/d/x.rs",
                "--out",
                &out_arg,
            ],
            "PATCH_CANDIDATE_APPROVE_GRANTS",
            "--create",
            2,
        ),
        (
            "scopes collide",
            vec!["--read-only", "src", "--out", &out_arg],
            "PATCH_CANDIDATE_APPROVE_GRANTS",
            "--read-only",
            2,
        ),
        (
            "commit not in repo",
            vec![
                "--commit",
                "0123456789abcdef0123456789abcdef01234567",
                "--out",
                &out_arg,
            ],
            "PATCH_CANDIDATE_APPROVE_COMMIT",
            "--commit",
            2,
        ),
        (
            "out inside repo",
            vec!["--out", &inside_arg],
            "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY",
            "--out",
            2,
        ),
        (
            "unwritable directory",
            vec!["--out", "/sys/approval.json"],
            "PATCH_CANDIDATE_OUTPUT_WRITE",
            "--out",
            3,
        ),
    ];
    for (what, extra, code, flag, status) in cases {
        let out = approve(repo, &extra).arg("--json").output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(i32::from(status)),
            "{what}: {}",
            stderr_text(&out)
        );
        assert!(
            stderr_text(&out).starts_with(&format!("{code}: ")),
            "{what}: {}",
            stderr_text(&out)
        );
        let doc = json_of(&out);
        assert_eq!(doc["error"]["code"], code, "{what}");
        assert!(
            doc["error"]["message"].as_str().unwrap().contains(flag),
            "{what}: {doc}"
        );
        assert!(names(work.path()).is_empty(), "{what}");
        assert_eq!(
            git(repo, &["status", "--porcelain", "--ignored"]),
            "",
            "{what}"
        );
    }
    assert!(!Path::new("/sys/approval.json").exists());

    // An existing file: refused without --force (exit 2, untouched), replaced with it (0600).
    std::fs::write(&out_file, "keep").unwrap();
    let out = approve(repo, &["--out", &out_arg]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr_text(&out));
    assert!(stderr_text(&out).starts_with("PATCH_CANDIDATE_OUTPUT_EXISTS: --out "));
    assert_eq!(std::fs::read(&out_file).unwrap(), b"keep");
    let out = approve(repo, &["--out", &out_arg, "--force"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert_eq!(names(work.path()), ["approval.json"]);
    let mode = std::fs::metadata(&out_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // --force without --out is a usage error of clap's.
    let out = approve(repo, &["--force"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A file committed executable (100755) under an allowed path, like `more.py` in a PyPI sdist:
/// `approve` lists it as not editable with why (text and `--json`), and a staged tree that
/// changes it anyway fails with the old code and kind, and the real reason.
#[test]
fn approve_lists_a_committed_executable_and_finalize_names_why_it_is_refused() {
    let repo_dir = tempfile::tempdir().unwrap();
    let repo = repo_dir.path();
    snapshot::testkit::init_repo(
        repo,
        [
            (
                "pkg/lib.py",
                b"def one():\n    return 1\n".as_slice(),
                false,
            ),
            (
                "pkg/more.py",
                b"def more():\n    return 1\n".as_slice(),
                true,
            ),
            (
                "pkg/run.sh",
                b"#!/bin/sh\necho secret-content\n".as_slice(),
                true,
            ),
            ("README.md", b"# mine\n".as_slice(), false),
        ],
        "fixture",
    );
    let work = tempfile::tempdir().unwrap();
    let approval = work.path().join("approval.json");
    let out = bin()
        .args(["--json", "approve", "--repo"])
        .arg(repo)
        .args(["--allow", "pkg/", "--task", "Make one return two.", "--out"])
        .arg(&approval)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_text(&out));
    let text = stderr_text(&out);
    assert_contains_all(
        &text,
        &[
            "editable (1):\n  pkg/lib.py\n",
            "not editable inside the scopes (2):\n",
            "  pkg/more.py  [committed executable (100755)]\n",
            "  pkg/run.sh  [committed executable (100755)]\n",
        ],
    );
    let doc = json_of(&out);
    assert_eq!(
        doc["not_editable"],
        serde_json::json!([
            {"path": "pkg/more.py", "reason": "committed executable (100755)"},
            {"path": "pkg/run.sh", "reason": "committed executable (100755)"},
        ])
    );
    assert_eq!(doc["not_editable_count"], 2);
    // The approval file itself is unchanged in form: no such field.
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&approval).unwrap()).unwrap();
    assert!(written.get("not_editable").is_none(), "{written}");
    assert_eq!(doc["approval"], written);

    // A staged edit of the executable: the refusal keeps its code and kind and says why.
    let staged = staged_tree(
        work.path(),
        &[
            ("pkg/lib.py", "def one():\n    return 2\n"),
            ("pkg/more.py", "def more():\n    return 2\n"),
        ],
    );
    let out = finalize_staged(repo, &approval, &staged).output().unwrap();
    assert!(!out.status.success(), "{}", stderr_text(&out));
    let doc = json_of(&out);
    assert_eq!(doc["error"]["code"], "REPOSITORY_PATCH_WORKSPACE_SCOPE");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "outside_allowlist:pkg/more.py (committed executable (100755), excluded from the snapshot, never editable)"
        ),
        "{message}"
    );
    assert!(!message.contains("return"), "{message}");
    assert_eq!(git(repo, &["status", "--porcelain", "--ignored"]), "");
}

/// A dirty work tree is no error: the approval binds the commit, and stderr says so.
#[test]
fn approve_on_a_dirty_work_tree_binds_the_commit_and_says_so() {
    let (repo_dir, head) = own_repo();
    let repo = repo_dir.path();
    std::fs::write(repo.join("src/lib.rs"), "uncommitted\n").unwrap();
    let out = approve(repo, &[]).output().unwrap();
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert!(
        stderr_text(&out).contains("1 uncommitted change(s); the approval binds commit"),
        "{}",
        stderr_text(&out)
    );
    let doc = json_of(&out);
    assert_eq!(doc["baseline_commit_sha"], head.as_str());
    assert_eq!(git(repo, &["status", "--porcelain"]), "M src/lib.rs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_cli_run_takes_task_and_commit_from_an_approve_approval() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let (repo_dir, commit) = git_repo(&demo_files());
    let repo = repo_dir.path();
    let work = tempfile::tempdir().unwrap();
    let approval = work.path().join("approval.json");
    let out = bin()
        .arg("approve")
        .arg("--repo")
        .arg(repo)
        .args(["--allow", "app/", "--read-only", "tests/"])
        .args(["--task", "Update the dashboard.", "--out"])
        .arg(&approval)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_text(&out));
    let run = |extra: &[&str]| {
        bin()
            .args(["--json", "run", "--repo"])
            .arg(repo)
            .arg("--approval")
            .arg(&approval)
            .args(extra)
            .env("PATCH_CANDIDATE_STATE_DIR", state.path())
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    let doc = json_of(&out);
    assert_eq!(doc["candidate"]["changed_files"][0]["path"], DASHBOARD);
    assert_eq!(doc["candidate"]["baseline_commit_sha"], commit.as_str());
    // Given, they must still match the approval.
    let out = run(&["--task", "Something else."]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_text(&out));
    assert_eq!(
        json_of(&out)["error"]["code"],
        "REPOSITORY_DOCKER_CONTEXT_MISMATCH"
    );
    git(repo, &["commit", "-q", "--allow-empty", "-m", "later"]);
    let later = git(repo, &["rev-parse", "HEAD"]);
    let out = run(&["--commit", &later]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_text(&out));
    assert_eq!(
        json_of(&out)["error"]["code"],
        "REPOSITORY_PATCH_SNAPSHOT_IDENTITY"
    );
    assert_clean_and_tally(
        &docker,
        "docker_cli_run_takes_task_and_commit_from_an_approve_approval",
    )
    .await;
}
