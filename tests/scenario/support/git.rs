//! Real Git repositories: commands that must succeed, fixture repositories and bare clones.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use super::cli::run_ok;

/// `git -C dir ARGS…`, not yet run.
fn git_command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).args(args);
    cmd
}

/// `git -C dir ARGS…`: its output, whether it succeeded or not.
pub fn git_output(dir: &Path, args: &[&str]) -> Output {
    git_command(dir, args).output().unwrap()
}

/// `git -C dir ARGS…`, which must succeed; its stdout as it is.
pub fn git_text(dir: &Path, args: &[&str]) -> String {
    let out = run_ok(&mut git_command(dir, args));
    String::from_utf8(out.stdout).unwrap()
}

/// `git -C dir ARGS…`, which must succeed; its stdout, trimmed.
pub fn git_out(dir: &Path, args: &[&str]) -> String {
    git_text(dir, args).trim().to_owned()
}

/// The test identity and no signing, as `-c` options before a Git command.
const IDENTITY: [&str; 6] = [
    "-c",
    "user.name=t",
    "-c",
    "user.email=t@example.invalid",
    "-c",
    "commit.gpgsign=false",
];

/// [`git_out`] as the test identity, without signing (for commits).
pub fn git(dir: &Path, args: &[&str]) -> String {
    let all: Vec<&str> = IDENTITY.iter().chain(args).copied().collect();
    git_out(dir, &all)
}

/// A real Git repository with `files`, committed; returns (dir, commit).
pub fn git_repo(files: &BTreeMap<&str, String>) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    git_out(dir.path(), &["init", "-q"]);
    snapshot::testkit::write_files(
        dir.path(),
        files
            .iter()
            .map(|(path, content)| (*path, content.as_bytes(), false)),
    );
    git_out(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "fixture"]);
    let commit = git_out(dir.path(), &["rev-parse", "HEAD"]);
    (dir, commit)
}

/// [`git_repo`] of `files` (path, content) with its one commit on branch `main`.
pub fn main_repo(files: &[(&str, &str)]) -> (tempfile::TempDir, String) {
    let files: BTreeMap<&str, String> = files.iter().map(|(p, c)| (*p, (*c).to_owned())).collect();
    let (repo, commit) = git_repo(&files);
    git_out(repo.path(), &["branch", "-M", "main"]);
    (repo, commit)
}

/// `git clone -q --bare repo remote`, which must succeed.
pub fn bare_clone(repo: &Path, remote: &Path) {
    let cloned = Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(repo)
        .arg(remote)
        .status()
        .unwrap();
    assert!(cloned.success());
}
