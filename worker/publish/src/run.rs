//! Running one git command: the project's hardened command ([`snapshot::git_command`]: cleared
//! environment, no system or global config, no replace refs, no prompts, every transport off)
//! with the one transport a step needs switched back on, under a deadline, with bounded output.
//!
//! The snapshot crate's deadline runner is private to it and returns only an exit status; this
//! crate needs stdin, bounded stdout and a classifiable stderr, so it has its own small runner:
//! the child leads its own process group; its output pipes are read to their end, then it is
//! polled with `try_wait` (never reaped before the check, so a kill can reach only our child)
//! and killed with its group at the deadline.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::error::{PublishError, git_error};

/// How long one local git command may take.
pub(crate) const LOCAL_DEADLINE: Duration = Duration::from_secs(120);
/// How long one network command (fetch, ls-remote, push) may take.
pub(crate) const NETWORK_DEADLINE: Duration = Duration::from_secs(300);
/// Most bytes of stderr kept for classification.
const STDERR_CAP: usize = 64 * 1024;

/// A git command in a given repository, with the transports named in `protocols` allowed
/// (`GIT_ALLOW_PROTOCOL` overrides the base command's empty list), hooks and fsmonitor off.
pub(crate) fn git(git_dir: Option<&Path>, protocols: &str) -> Command {
    let mut cmd = snapshot::git_command(None);
    cmd.env("GIT_ALLOW_PROTOCOL", protocols)
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

fn read_capped(reader: impl Read, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    reader
        .take(u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut out)?;
    Ok((out.len() <= cap).then_some(out))
}

fn kill_group(child: &Child) {
    let _ = rustix::process::kill_process_group(Pid::from_child(child), Signal::KILL);
}

/// Runs `cmd` to completion: `stdin` fed from a thread, at most `stdout_cap` bytes of stdout
/// (more is an error), stderr bounded, killed with its process group after `limit`.
pub(crate) fn run(
    cmd: &mut Command,
    stdin: Option<&[u8]>,
    stdout_cap: usize,
    limit: Duration,
) -> Result<Output, PublishError> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let mut child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            git_error("the git executable was not found on PATH")
        } else {
            git_error("git could not be started")
        }
    })?;
    let input = child.stdin.take();
    let out = child.stdout.take();
    let err = child.stderr.take();
    let started = Instant::now();
    let (status, stdout, stderr) = std::thread::scope(|scope| {
        if let (Some(mut pipe), Some(bytes)) = (input, stdin) {
            // A child that exits early closes the pipe; its status decides the outcome.
            scope.spawn(move || {
                let _ = pipe.write_all(bytes);
            });
        }
        // The readers report when their pipe reaches end of file (normally: the child exited),
        // so the wait below rarely sleeps at all.
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let out_tx = done_tx.clone();
        let out = scope.spawn(move || {
            let r = out.map(|o| read_capped(o, stdout_cap));
            let _ = out_tx.send(());
            r
        });
        let err = scope.spawn(move || {
            let r = err.map(|e| read_capped(e, STDERR_CAP));
            let _ = done_tx.send(());
            r
        });
        let mut timed_out = false;
        for _ in 0..2 {
            let left = limit.saturating_sub(started.elapsed());
            if done_rx.recv_timeout(left).is_err() && started.elapsed() >= limit {
                timed_out = true;
                break;
            }
        }
        let mut pause = Duration::from_micros(50);
        let status = loop {
            if timed_out || started.elapsed() >= limit {
                // Not reaped yet: the group id is still our child's.
                kill_group(&child);
                let _ = child.wait();
                break Err(git_error("git exceeded its deadline"));
            }
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => {}
                Err(_) => {
                    kill_group(&child);
                    let _ = child.wait();
                    break Err(git_error("waiting for git failed"));
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        };
        (status, out.join(), err.join())
    });
    let status = status?;
    let take = |joined: std::thread::Result<Option<std::io::Result<Option<Vec<u8>>>>>| match joined
    {
        Ok(Some(Ok(Some(bytes)))) => Ok(bytes),
        Ok(Some(Ok(None))) => Err(git_error("git printed more than expected")),
        _ => Err(git_error("reading git output failed")),
    };
    Ok(Output {
        status,
        stdout: take(stdout)?,
        stderr: take(stderr)?,
    })
}

/// [`run`] that requires exit status 0; `what` names the step in the error.
pub(crate) fn run_ok(
    cmd: &mut Command,
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

    #[test]
    fn a_command_past_its_deadline_is_killed_with_its_group() {
        let started = Instant::now();
        // A child that spawns a grandchild holding the pipes open.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & sleep 30"]);
        let err = run(&mut cmd, None, 1024, Duration::from_millis(300)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "PATCH_CANDIDATE_PUBLISH_GIT: git exceeded its deadline"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn output_beyond_its_cap_is_refused_and_stdin_is_fed() {
        let mut cmd = Command::new("cat");
        let out = run(&mut cmd, Some(b"hello"), 5, LOCAL_DEADLINE).unwrap();
        assert_eq!(out.stdout, b"hello");
        let mut cmd = Command::new("cat");
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
