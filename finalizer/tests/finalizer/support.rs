//! Shared helpers: a deterministic generator, the Python oracles, and throwaway Git repositories.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use finalizer::RepositoryPatchCandidate;
use finalizer::testkit::{Change, finalise_staged};
use serde_json::Value;
use snapshot::{ApprovedExecutionContext, GitSnapshot, RepoPath};

/// A small deterministic PRNG (xorshift64*), so failures reproduce exactly.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn py_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(name)
}

/// Runs a Python oracle with `input` as JSON on stdin and parses its JSON stdout.
pub fn run_oracle(script: &str, input: &serde_json::Value) -> serde_json::Value {
    let mut child = Command::new("python3")
        .arg(py_script(script))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 is required for the parity tests");
    let body = serde_json::to_vec(input).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{script} failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs git in `dir` with a fixed identity and no user or system configuration.
pub fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    git_with_stdin(dir, args, None)
}

pub fn git_with_stdin(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .args(["-c", "core.autocrlf=false", "-c", "apply.whitespace=nowarn"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("git is required");
    if let Some(bytes) = stdin {
        child.stdin.take().unwrap().write_all(bytes).unwrap();
    }
    child.wait_with_output().unwrap()
}

pub fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = git(dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A fresh repository holding `files` in one commit; returns (dir guard, commit id).
#[allow(
    clippy::disallowed_methods,
    reason = "fixture files inside a fresh temporary directory"
)]
pub fn repo_with(files: &[(String, String)]) -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    git_ok(tmp.path(), &["init", "-q", "-b", "main"]);
    for (path, content) in files {
        let full = tmp.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }
    git_ok(tmp.path(), &["add", "-A"]);
    git_ok(
        tmp.path(),
        &["commit", "-q", "--allow-empty", "-m", "baseline"],
    );
    let commit = git_ok(tmp.path(), &["rev-parse", "HEAD"]).trim().to_owned();
    (tmp, commit)
}

/// `files` as owned (path, content) pairs for [`repo_with`].
pub fn owned_files(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
        .collect()
}

/// A repository holding `files`, and a candidate finalised over its commit from a staged
/// workspace (its `app/` files with `changes` applied) under the approval
/// `context(snapshot digest, commit)`.
pub fn finalised_with(
    files: &[(&str, &str)],
    changes: &[Change<'_>],
    context: impl Fn(&str, &str) -> Value,
) -> (tempfile::TempDir, String, RepositoryPatchCandidate) {
    let (repo, commit) = repo_with(&owned_files(files));
    let snap = GitSnapshot::load(repo.path(), &commit).unwrap();
    let evidence = snap
        .evidence("plan-1", "request-1", "app-1", "acme/widgets")
        .unwrap();
    let ctx = ApprovedExecutionContext::from_json(
        &context(evidence.snapshot_digest(), &commit).to_string(),
    )
    .unwrap();
    let selected: Vec<RepoPath> = files
        .iter()
        .filter(|(p, _)| p.starts_with("app/"))
        .map(|(p, _)| RepoPath::parse(p).unwrap())
        .collect();
    let candidate = finalise_staged(&ctx, &evidence, &snap, selected, changes);
    (repo, commit, candidate)
}
