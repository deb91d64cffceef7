//! Fixtures for tests: a `git` isolated from the host's configuration and throwaway repositories
//! made with it, the fixture approval document, file-system traps (links, FIFOs), command output
//! and the process's peak memory. Compiled for this crate's tests and, with the `testkit` feature,
//! for the tests of the crates above it; never enabled by a binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

/// The author and committer name of every fixture commit.
pub const GIT_NAME: &str = "Test";
/// The author and committer e-mail of every fixture commit.
pub const GIT_EMAIL: &str = "test@example.invalid";
/// The author and committer date of every fixture commit, so that commit ids reproduce.
pub const GIT_DATE: &str = "2026-01-01T00:00:00Z";

/// `git` in `dir`, isolated from the host: an empty environment but `PATH` (and `HOME` set to
/// `dir`), no system or global configuration, the fixed identity and date ([`GIT_NAME`],
/// [`GIT_EMAIL`], [`GIT_DATE`]) as author and committer, and `-c` options for no commit signing,
/// the `file` transport allowed, no line-ending conversion and no whitespace warnings from
/// `git apply`. Arguments and stdin are the caller's.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", GIT_NAME)
        .env("GIT_AUTHOR_EMAIL", GIT_EMAIL)
        .env("GIT_AUTHOR_DATE", GIT_DATE)
        .env("GIT_COMMITTER_NAME", GIT_NAME)
        .env("GIT_COMMITTER_EMAIL", GIT_EMAIL)
        .env("GIT_COMMITTER_DATE", GIT_DATE)
        .args(["-c", &format!("user.name={GIT_NAME}")])
        .args(["-c", &format!("user.email={GIT_EMAIL}")])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(["-c", "core.autocrlf=false", "-c", "apply.whitespace=nowarn"]);
    cmd
}

/// Runs [`git_command`]`ARGS` in `dir`; panics (with git's stderr) unless it succeeds; returns
/// stdout as it is.
pub fn git_bytes(dir: &Path, args: &[impl AsRef<OsStr>]) -> Vec<u8> {
    let out = git_command(dir).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "git {:?}: {}",
        args.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// [`git_bytes`] as UTF-8 text, as it is.
pub fn git_text(dir: &Path, args: &[impl AsRef<OsStr>]) -> String {
    String::from_utf8(git_bytes(dir, args)).unwrap()
}

/// [`git_text`] without trailing white space (a commit id, a ref, the last line's newline).
pub fn git(dir: &Path, args: &[impl AsRef<OsStr>]) -> String {
    git_text(dir, args).trim_end().to_owned()
}

/// Writes each `(path, content, executable)` below `dir`, making parent directories, with mode
/// 0755 when executable and 0644 otherwise.
pub fn write_files<'a>(dir: &Path, files: impl IntoIterator<Item = (&'a str, &'a [u8], bool)>) {
    for (path, content, executable) in files {
        let full = dir.join(path);
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(full.parent().unwrap())
            .unwrap();
        std::fs::write(&full, content).unwrap();
        let mode = if executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// `git add -A` and a commit of it (empty allowed) with `message`; returns the new commit id.
pub fn commit(dir: &Path, message: &str) -> String {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", message]);
    git(dir, &["rev-parse", "HEAD"])
}

/// A new repository in `dir` on branch `main` holding `files` (see [`write_files`]) in one
/// commit with `message`; returns the commit id.
pub fn init_repo<'a>(
    dir: &Path,
    files: impl IntoIterator<Item = (&'a str, &'a [u8], bool)>,
    message: &str,
) -> String {
    git(dir, &["init", "-q", "-b", "main"]);
    write_files(dir, files);
    commit(dir, message)
}

/// The baseline commit of the fixture approval ([`approval`]).
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// An approval document for the fixture handoff (`handoff-1`, `request-1`, `plan-1`, `app-1`,
/// `build-1`, `acme/support` at [`COMMIT`]) with the caller's `fields` added: what the request
/// asks, its scopes and gates.
pub fn approval(fields: Value) -> Value {
    let Value::Object(fields) = fields else {
        panic!("approval fields must be a JSON object");
    };
    let mut doc = serde_json::json!({
        "handoff_id": "handoff-1",
        "request_id": "request-1",
        "plan_id": "plan-1",
        "app_id": "app-1",
        "build_registry_id": "build-1",
        "repository_full_name": "acme/support",
        "baseline_commit_sha": COMMIT,
    });
    doc.as_object_mut().unwrap().extend(fields);
    doc
}

/// Below `dir`: a directory `real`, a symbolic link `link` to it and a regular file `file`.
/// Returns their paths in that order.
pub fn dir_link_and_file(dir: &Path) -> [PathBuf; 3] {
    let real = dir.join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let file = dir.join("file");
    std::fs::write(&file, b"x").unwrap();
    [real, link, file]
}

/// Runs `op` on a thread of its own and returns its result; fails the test ("`what` blocked on a
/// FIFO") when it has not returned after 60 s, after opening the write side of `fifo` so that a
/// reader blocked in opening it is let go (the test fails instead of hanging).
pub fn unless_blocked_on_fifo<T: Send + 'static>(
    what: &str,
    fifo: &Path,
    op: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let out = op();
        done_tx.send(()).unwrap();
        out
    });
    let blocked = done_rx.recv_timeout(Duration::from_secs(60)).is_err();
    if blocked {
        let _unblock = std::fs::OpenOptions::new().write(true).open(fifo);
    }
    let out = worker.join().unwrap();
    assert!(!blocked, "{what} blocked on a FIFO");
    out
}

/// Runs `command` to its end; panics with its stderr unless it succeeds; returns its stdout.
pub fn stdout_of(command: &mut Command) -> Vec<u8> {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// A FIFO at `path`, made with `mkfifo`.
pub fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The peak resident set of this process so far, in KiB (`VmHWM` in `/proc/self/status`): what
/// the memory benchmarks measure.
pub fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
