#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::io::Write as _;

use pretty_assertions::assert_eq;

use super::*;
use crate::testkit::{Change, candidate, git, read_tar, repo};

fn long_path() -> String {
    format!("{}/deep.txt", ["segment"; 20].join("/"))
}

#[test]
fn candidate_tree_streams_exact_totals_and_an_independent_reader_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let long = long_path();
    let commit = repo(
        dir.path(),
        &[
            ("a.txt", "a\n", false),
            ("gone.txt", "bye\n", false),
            ("run.sh", "#!/bin/sh\n", true),
            ("é/ü.txt", "unicode\n", false),
            (&long, "long\n", false),
        ],
    );
    // The work tree is never read: an uncommitted edit does not reach the gate.
    std::fs::write(dir.path().join("a.txt"), "dirty\n").unwrap();
    let base = BaselineTree::load(dir.path(), &commit).unwrap();
    let cand = candidate(
        &commit,
        &[
            Change::Update("run.sh", "#!/bin/sh\n", "#!/bin/sh\nexit 0\n"),
            Change::Delete("gone.txt", "bye\n"),
            Change::Create("new/dir/file.py", "x = 1\n"),
        ],
    );
    let tree = base.with_candidate(&cand, 1 << 20).unwrap();
    let mut tar = Vec::new();
    tree.write_tar(&mut tar).unwrap();
    let (files, dirs) = read_tar(&tar);
    assert_eq!(files["a.txt"], (0o644, b"a\n".to_vec()));
    assert_eq!(
        files["run.sh"],
        (0o755, b"#!/bin/sh\nexit 0\n".to_vec()),
        "mode kept on update"
    );
    assert!(!files.contains_key("gone.txt"));
    assert_eq!(files["new/dir/file.py"].1, b"x = 1\n");
    assert_eq!(files[&long].1, b"long\n");
    let totals = tree.totals();
    assert_eq!(totals.entries, (files.len() + dirs.len()) as u64);
    assert_eq!(
        totals.bytes,
        files.values().map(|f| f.1.len() as u64).sum::<u64>()
    );
    assert_eq!(tar.len() % 512, 0);

    // Python's tarfile reads the same entries (an implementation nobody here wrote).
    let mut py = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys,tarfile\nt=tarfile.open(fileobj=sys.stdin.buffer,mode='r|')\nfor m in t:\n  print(m.name, oct(m.mode), m.type.decode(), m.size)",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    py.stdin.take().unwrap().write_all(&tar).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(out.status.success());
    let listing = String::from_utf8(out.stdout).unwrap();
    assert_eq!(listing.lines().count() as u64, totals.entries);
    assert!(listing.contains(&format!("{long} 0o644 0 5")));
    assert!(listing.contains("run.sh 0o755 0 17"));
    assert!(listing.contains("new/dir 0o755 5 0"));
    assert!(listing.contains("é/ü.txt 0o644 0 8"));
}

#[test]
fn refusals_have_stable_codes() {
    let dir = tempfile::tempdir().unwrap();
    let commit = repo(dir.path(), &[("a.txt", "a\n", false)]);
    let base = BaselineTree::load(dir.path(), &commit).unwrap();
    let cases = [
        (
            candidate(&commit, &[Change::Create("a.txt", "again\n")]),
            "PATCH_CANDIDATE_GATE_CANDIDATE_MISMATCH",
        ),
        (
            candidate(&commit, &[Change::Update("b.txt", "b\n", "c\n")]),
            "PATCH_CANDIDATE_GATE_CANDIDATE_MISMATCH",
        ),
        (
            candidate(&commit, &[Change::Delete("a.txt", "not a\n")]),
            "PATCH_CANDIDATE_GATE_CANDIDATE_MISMATCH",
        ),
        (
            candidate(&"0".repeat(40), &[Change::Create("b.txt", "b\n")]),
            "PATCH_CANDIDATE_GATE_CANDIDATE_MISMATCH",
        ),
        (
            candidate(&commit, &[Change::Create("a.txt/x", "b\n")]),
            "PATCH_CANDIDATE_GATE_TREE",
        ),
        (
            candidate(&commit, &[Change::Create("big.txt", &"x".repeat(100))]),
            "PATCH_CANDIDATE_GATE_TREE_BUDGET",
        ),
    ];
    for (cand, code) in cases {
        assert_eq!(base.with_candidate(&cand, 64).unwrap_err().code(), code);
    }

    std::os::unix::fs::symlink("a.txt", dir.path().join("link")).unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "link"]);
    let head = git(dir.path(), &["rev-parse", "HEAD"]);
    let e = BaselineTree::load(dir.path(), &head).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_GATE_TREE");
    assert!(e.to_string().contains("symbolic link"));
}
