//! `patch-candidate verify --digest`, `verify --repo` and `export --format git` through the binary,
//! on a candidate finalised from a real repository and saved under a name that promises no
//! digest: every single-field edit is refused with a stable code, the exported patch applies with
//! real `git apply` on a fresh repository at the baseline commit and reproduces every byte, and
//! `--out` never overwrites, never writes into the repository and leaves nothing half-written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use finalizer::RepositoryPatchCandidate;
use finalizer::testkit::{finalise_staged, paths_with};
use serde_json::{Value, json};
use snapshot::{GitSnapshot, RepoPath};

use crate::support::{approval, assert_ok, bin, git_repo, run_ok};

const FILES: &[(&str, &str)] = &[
    ("app/a.txt", "one\ntwo\n"),
    ("app/crlf.txt", "x\r\ny\r\n"),
    ("app/tail.txt", "no newline"),
    ("app/gone.txt", "bye\n"),
    ("app/empty_gone.txt", ""),
    ("app/caf\u{e9}.txt", "au lait\n"),
];

const CHANGES: &[(&str, &str, Option<&str>)] = &[
    ("app/a.txt", "update", Some("one\n2\n")),
    ("app/crlf.txt", "update", Some("x\r\nY\r\nz")),
    ("app/tail.txt", "update", Some("no newline\nnow one\n")),
    ("app/caf\u{e9}.txt", "update", Some("au lait\nsans sucre")),
    ("app/gone.txt", "delete", None),
    ("app/empty_gone.txt", "delete", None),
    ("app/new.txt", "create", Some("fresh\n")),
    ("app/empty.txt", "create", Some("")),
];

fn files() -> BTreeMap<&'static str, String> {
    FILES.iter().map(|(p, c)| (*p, (*c).to_owned())).collect()
}

/// `candidate` as pretty JSON in `candidate.json` of a fresh directory: (directory, file).
fn written(candidate: &RepositoryPatchCandidate) -> (tempfile::TempDir, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("candidate.json");
    std::fs::write(&file, candidate.to_json_pretty().unwrap()).unwrap();
    (work, file)
}

/// A repository and a candidate finalised over its commit.
fn finalised() -> (tempfile::TempDir, String, RepositoryPatchCandidate) {
    let (repo, commit) = git_repo(&files());
    let ctx = approval(
        repo.path(),
        &commit,
        "Edit the files.",
        &["app/"],
        &[],
        &paths_with(CHANGES, "create"),
        &paths_with(CHANGES, "delete"),
    );
    let snap = GitSnapshot::load(repo.path(), &commit).unwrap();
    let evidence = snap
        .evidence("plan-t", "request-t", "app-t", "acme/fixture")
        .unwrap();
    let selected: Vec<RepoPath> = FILES
        .iter()
        .map(|(p, _)| RepoPath::parse(p).unwrap())
        .collect();
    let candidate = finalise_staged(&ctx, &evidence, &snap, selected, CHANGES);
    (repo, commit, candidate)
}

fn json_code(out: &Output) -> String {
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "stdout is not JSON; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    doc["error"]["code"].as_str().unwrap().to_owned()
}

/// Every leaf replaced and every array element removed, as JSON pointers and documents.
fn single_field_edits(root: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(at) = stack.pop() {
        let node = root.pointer(&at).unwrap().clone();
        let mut with = |value: Value| {
            let mut doc = root.clone();
            *doc.pointer_mut(&at).unwrap() = value;
            out.push((at.clone(), doc));
        };
        match node {
            Value::String(s) => with(json!(format!("{s}x"))),
            Value::Bool(b) => with(json!(!b)),
            Value::Null => with(json!("x")),
            Value::Number(_) => with(json!(0)),
            Value::Array(items) => {
                for i in 0..items.len() {
                    let mut shorter = items.clone();
                    shorter.remove(i);
                    with(Value::Array(shorter));
                    stack.push(format!("{at}/{i}"));
                }
            }
            Value::Object(map) => {
                for key in map.keys() {
                    stack.push(format!("{at}/{key}"));
                }
            }
        }
    }
    out
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = run_ok(
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "core.autocrlf=false", "-c", "core.quotePath=true"])
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null"),
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn cli_verify_digest_refuses_every_single_field_edit() {
    let (repo, _, candidate) = finalised();
    let (work, file) = written(&candidate);
    let out = bin()
        .args(["--json", "digest"])
        .arg(&file)
        .output()
        .unwrap();
    let digest = serde_json::from_slice::<Value>(&out.stdout).unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let verify = |path: &Path, extra: &[&str]| {
        bin()
            .args(["--json", "verify"])
            .arg(path)
            .args(["--digest", &digest])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = verify(&file, &[]);
    assert_ok(&out);
    let repo_arg = repo.path().to_str().unwrap();
    let out = verify(&file, &["--repo", repo_arg]);
    assert_ok(&out);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["digest_bound"], true);
    assert_eq!(
        report["repository"]["snapshot_digest"],
        candidate.snapshot_digest()
    );

    let root = serde_json::to_value(&candidate).unwrap();
    let edits = single_field_edits(&root);
    assert!(edits.len() > 60, "{} edits", edits.len());
    let allowed: BTreeSet<&str> = [
        "REPOSITORY_PATCH_DIGEST_INPUT",
        "REPOSITORY_PATCH_DIGEST_HASH",
        "REPOSITORY_PATCH_DIGEST_PATH",
        "REPOSITORY_PATCH_UNSAFE_PATH",
        "REPOSITORY_PATCH_VERIFY_DIGEST",
    ]
    .into();
    let edited = work.path().join("edited.json");
    let mut seen = BTreeSet::new();
    for (at, doc) in &edits {
        std::fs::write(&edited, serde_json::to_vec_pretty(doc).unwrap()).unwrap();
        let out = verify(&edited, &[]);
        assert_eq!(out.status.code(), Some(1), "edit at {at} was not refused");
        let code = json_code(&out);
        assert!(allowed.contains(code.as_str()), "edit at {at}: {code}");
        seen.insert(code);
    }
    assert!(seen.contains("REPOSITORY_PATCH_VERIFY_DIGEST"));
    // A malformed --digest is a usage error with its own code, before anything is read.
    let out = bin()
        .args(["--json", "verify"])
        .arg(&file)
        .args(["--digest", "sha256:XYZ"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_code(&out), "PATCH_CANDIDATE_DIGEST_FLAG");
    // Without --digest, a re-digested edit of the snapshot digest is caught by --repo.
    let mut doc = root.clone();
    doc["snapshot_digest"] = json!(format!("sha256:{}", "5".repeat(64)));
    std::fs::write(&edited, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let out = bin()
        .args(["--json", "verify"])
        .arg(&edited)
        .args(["--repo", repo_arg])
        .output()
        .unwrap();
    assert_eq!(json_code(&out), "REPOSITORY_PATCH_VERIFY_SNAPSHOT");
}

#[test]
fn cli_export_git_applies_on_a_fresh_repository_and_guards_its_output() {
    let (repo, commit, candidate) = finalised();
    let (work, file) = written(&candidate);
    let repo_arg = repo.path().to_str().unwrap().to_owned();
    let export = |extra: &[&str]| {
        bin()
            .args(["--json", "export"])
            .arg(&file)
            .args(["--format", "git"])
            .args(extra)
            .output()
            .unwrap()
    };
    let patch: PathBuf = work.path().join("candidate.patch");
    let patch_arg = patch.to_str().unwrap().to_owned();
    let out = export(&["--out", &patch_arg, "--repo", &repo_arg]);
    assert_ok(&out);
    let bytes = std::fs::read(&patch).unwrap();
    // Piped stdout carries the same exact bytes.
    let piped = bin()
        .arg("export")
        .arg(&file)
        .args(["--format", "git"])
        .output()
        .unwrap();
    assert!(piped.status.success());
    assert_eq!(piped.stdout, bytes);

    // Real `git apply` in a fresh clone at the baseline commit.
    let fresh = tempfile::tempdir().unwrap();
    let clone = fresh.path().join("clone");
    git(
        fresh.path(),
        &[
            "clone",
            "-q",
            "--no-checkout",
            &repo_arg,
            clone.to_str().unwrap(),
        ],
    );
    git(&clone, &["checkout", "-q", &commit]);
    git(&clone, &["apply", &patch_arg]);
    for (path, _, content) in CHANGES {
        let full = clone.join(path);
        match content {
            Some(c) => assert_eq!(std::fs::read(&full).unwrap(), c.as_bytes(), "{path}"),
            None => assert!(!full.exists(), "{path}"),
        }
    }
    let status: BTreeSet<String> = git(
        &clone,
        &[
            "status",
            "--porcelain",
            "--untracked-files=all",
            "--no-renames",
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect();
    let expected: BTreeSet<String> = [
        " M app/a.txt",
        " M \"app/caf\\303\\251.txt\"",
        " M app/crlf.txt",
        " M app/tail.txt",
        " D app/empty_gone.txt",
        " D app/gone.txt",
        "?? app/empty.txt",
        "?? app/new.txt",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(status, expected);

    // An existing --out is refused (exit 2) and left as it was; --force replaces it.
    let out = export(&["--out", &patch_arg]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_code(&out), "PATCH_CANDIDATE_OUTPUT_EXISTS");
    assert_eq!(std::fs::read(&patch).unwrap(), bytes);
    let out = export(&["--out", &patch_arg, "--force"]);
    assert!(out.status.success());
    assert_eq!(std::fs::read(&patch).unwrap(), bytes);
    // --out inside the repository named by --repo: refused, nothing written there.
    let before = git(repo.path(), &["status", "--porcelain", "--ignored"]);
    let inside = repo.path().join("app/out.patch");
    let out = export(&["--out", inside.to_str().unwrap(), "--repo", &repo_arg]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(json_code(&out), "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY");
    assert!(!inside.exists());
    assert_eq!(
        git(repo.path(), &["status", "--porcelain", "--ignored"]),
        before
    );
    // A wrong --digest refuses before writing.
    let other = format!("sha256:{}", "0".repeat(64));
    let fresh_out = work.path().join("other.patch");
    let out = export(&["--out", fresh_out.to_str().unwrap(), "--digest", &other]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_code(&out), "REPOSITORY_PATCH_VERIFY_DIGEST");
    assert!(!fresh_out.exists());
    // Only the candidate and the patch remain in the work directory.
    let names: BTreeSet<String> = std::fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["candidate.json".to_owned(), "candidate.patch".to_owned()])
    );
}
