//! Running one git command through the snapshot crate's launcher ([`snapshot::Git`]: isolated
//! environment, no system or global config, no replace refs, no prompts, every transport off)
//! with the one transport a step needs switched back on, under a deadline, with bounded output.

use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use snapshot::{Git, GitLaunchError};

use crate::error::{PublishError, git_error};

/// How long one local git command may take.
pub(crate) const LOCAL_DEADLINE: Duration = Duration::from_secs(120);
/// How long one network command (fetch, ls-remote, push) may take.
pub(crate) const NETWORK_DEADLINE: Duration = Duration::from_secs(300);
/// Most bytes of stderr kept for classification.
const STDERR_CAP: usize = 64 * 1024;

/// A git command in a given repository, with the transports named in `protocols` allowed
/// (`GIT_ALLOW_PROTOCOL` overrides the isolated launcher's empty list), hooks and fsmonitor off.
pub(crate) fn git(git_dir: Option<&Path>, protocols: &str) -> Git {
    let mut cmd = Git::isolated(None);
    cmd.allow_protocol(protocols)
        .env("GIT_LITERAL_PATHSPECS", "1")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
        ]);
    if let Some(dir) = git_dir {
        cmd.arg("--git-dir").arg(dir);
    }
    cmd
}

/// What a finished git command left.
#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

/// This crate's message for a launcher failure (`PATCH_CANDIDATE_PUBLISH_GIT`).
fn launch_error(e: &GitLaunchError) -> PublishError {
    match e {
        GitLaunchError::Deadline(_) => git_error("git exceeded its deadline"),
        GitLaunchError::NotFound => git_error("the git executable was not found on PATH"),
        GitLaunchError::CannotStart => git_error("git could not be started"),
        GitLaunchError::OutputTooLarge => git_error("git printed more than expected"),
        GitLaunchError::Wait => git_error("waiting for git failed"),
        _ => git_error("reading git output failed"),
    }
}

/// Runs `cmd` to completion: `stdin` fed from a thread, at most `stdout_cap` bytes of stdout
/// (more is an error), stderr bounded, killed with its process group after `limit`.
pub(crate) fn run(
    cmd: &mut Git,
    stdin: Option<&[u8]>,
    stdout_cap: usize,
    limit: Duration,
) -> Result<Output, PublishError> {
    let out = cmd
        .deadline(limit)
        .capture_stdout(stdout_cap)
        .capture_stderr(STDERR_CAP)
        .run(stdin)
        .map_err(|e| launch_error(&e))?;
    Ok(Output {
        status: out.status,
        stdout: out.stdout,
        stderr: out.stderr,
    })
}

/// [`run`] that requires exit status 0; `what` names the step in the error.
pub(crate) fn run_ok(
    cmd: &mut Git,
    stdin: Option<&[u8]>,
    stdout_cap: usize,
    what: &'static str,
) -> Result<Vec<u8>, PublishError> {
    let out = run(cmd, stdin, stdout_cap, LOCAL_DEADLINE)?;
    if !out.status.success() {
        return Err(git_error(what));
    }
    Ok(out.stdout)
}

/// Classifies a failed network command's stderr (never echoed) into a stable error.
pub(crate) fn classify_network_failure(stderr: &[u8]) -> PublishError {
    let text = String::from_utf8_lossy(stderr).to_ascii_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if any(&[
        "authentication failed",
        "could not read username",
        "could not read password",
        "unable to get password",
        "unable to get username",
        "terminal prompts disabled",
        "401",
        "403",
        "invalid credentials",
        "permission denied",
    ]) {
        PublishError::Auth
    } else if any(&[
        "does not appear to be a git repository",
        "repository not found",
        "not found",
        "404",
    ]) {
        PublishError::Unreachable {
            detail: "the remote is not a git repository",
        }
    } else {
        PublishError::Unreachable {
            detail: "the remote cannot be reached",
        }
    }
}

/// One line of hex object id output (`write-tree`, `commit-tree`, `merge-tree`): exactly 40
/// lower-hex digits and a newline.
pub(crate) fn object_id_line(stdout: &[u8]) -> Result<String, PublishError> {
    let text = std::str::from_utf8(stdout).map_err(|_| git_error("git printed a non-text id"))?;
    let id = text
        .strip_suffix('\n')
        .ok_or_else(|| git_error("git printed an unexpected id"))?;
    if is_object_id(id) {
        Ok(id.to_owned())
    } else {
        Err(git_error("git printed an unexpected id"))
    }
}

/// 40 lower-hex digits (a SHA-1 object id, the candidate's baseline form).
pub(crate) fn is_object_id(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::fs::PermissionsExt as _;
    use std::time::Instant;

    /// The launcher's isolated git, with a `git` on `PATH` that runs `body` instead.
    fn fake_git(dir: &Path, body: &str) -> Git {
        let script = dir.join("git");
        std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut path = dir.as_os_str().to_owned();
        path.push(":/usr/bin:/bin");
        Git::isolated_with_path(Some(&path), None)
    }

    #[test]
    fn a_command_past_its_deadline_is_killed_with_its_group() {
        let bin = tempfile::tempdir().unwrap();
        let started = Instant::now();
        // A child that spawns a grandchild holding the pipes open.
        let mut cmd = fake_git(bin.path(), "sleep 30 & sleep 30");
        let err = run(&mut cmd, None, 1024, Duration::from_millis(300)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "PATCH_CANDIDATE_PUBLISH_GIT: git exceeded its deadline"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn output_beyond_its_cap_is_refused_and_stdin_is_fed() {
        let bin = tempfile::tempdir().unwrap();
        let mut cmd = fake_git(bin.path(), "cat");
        let out = run(&mut cmd, Some(b"hello"), 5, LOCAL_DEADLINE).unwrap();
        assert_eq!(out.stdout, b"hello");
        let mut cmd = fake_git(bin.path(), "cat");
        let err = run(&mut cmd, Some(b"hello!"), 5, LOCAL_DEADLINE).unwrap_err();
        assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_GIT");
    }

    #[test]
    fn network_failures_are_classified_not_echoed() {
        let auth = classify_network_failure(b"fatal: Authentication failed for 'http://h/r'\n");
        assert_eq!(auth.code(), "PATCH_CANDIDATE_PUBLISH_AUTH");
        let gone =
            classify_network_failure(b"fatal: '/x' does not appear to be a git repository\n");
        assert_eq!(gone.code(), "PATCH_CANDIDATE_PUBLISH_REMOTE_UNREACHABLE");
        let hostile = classify_network_failure(b"remote: \x1b[2J secret-value\n");
        assert!(!hostile.to_string().contains("secret-value"));
    }

    #[test]
    fn object_ids_are_exactly_forty_lower_hex_digits() {
        assert_eq!(
            object_id_line(format!("{}\n", "a".repeat(40)).as_bytes()).unwrap(),
            "a".repeat(40)
        );
        for bad in [
            "A".repeat(40) + "\n",
            "a".repeat(40),
            "a".repeat(39) + "\n",
            "a".repeat(64) + "\n",
        ] {
            assert!(object_id_line(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}
