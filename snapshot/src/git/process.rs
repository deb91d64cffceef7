//! Every git process runs under a deadline: [`Deadline`] owns a watchdog thread that kills the
//! process group of every registered git process still running when the deadline passes, and the
//! operation then fails with a stable `REPOSITORY_SNAPSHOT_GIT` "exceeded its deadline" error
//! (an environment failure).
//!
//! # Security
//! The kill can never reach an unrelated process: a process is unregistered only after
//! `waitid(WNOWAIT)` has seen it exit (it is then a zombie whose PID and process group cannot be
//! reused), and only then reaped; the watchdog signals under the same lock, so it signals either
//! our live child or our zombie, never a recycled PID. Each git process leads its own process
//! group, so a helper it spawned dies with it and cannot hold our pipes open.

use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use crate::error::SnapshotError;

/// The deadline of one git operation (a snapshot load, a read of selected files, one `git`
/// command run through [`run_git`]).
pub const GIT_DEADLINE: Duration = Duration::from_secs(600);

#[derive(Debug, Default)]
struct State {
    live: Vec<Pid>,
    finished: bool,
    expired: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    limit: Duration,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn expired_error(&self) -> SnapshotError {
        SnapshotError::Git {
            detail: format!("git exceeded its deadline of {:?}", self.limit),
        }
    }
}

pub(crate) fn git_error(detail: &str) -> SnapshotError {
    SnapshotError::Git {
        detail: detail.to_owned(),
    }
}

fn spawn_error(e: &std::io::Error) -> SnapshotError {
    if e.kind() == std::io::ErrorKind::NotFound {
        git_error("the git executable was not found on PATH")
    } else {
        git_error("git could not be started")
    }
}

/// The deadline shared by the git processes of one operation (see the module docs). Dropping it
/// stops the watchdog.
#[derive(Debug)]
pub(crate) struct Deadline {
    shared: Arc<Shared>,
    watchdog: Option<JoinHandle<()>>,
}

impl Deadline {
    /// Starts the clock: processes spawned through [`Deadline::spawn`] are killed when `limit`
    /// has passed.
    pub(crate) fn start(limit: Duration) -> Result<Self, SnapshotError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            limit,
        });
        let end = Instant::now().checked_add(limit);
        let watched = Arc::clone(&shared);
        let watchdog = std::thread::Builder::new()
            .name("git-deadline".to_owned())
            .spawn(move || watch(&watched, end))
            .map_err(|_| git_error("cannot start the git deadline watchdog"))?;
        Ok(Self {
            shared,
            watchdog: Some(watchdog),
        })
    }

    /// True once the deadline has passed (and every registered process was killed).
    pub(crate) fn expired(&self) -> bool {
        self.shared.lock().expired
    }

    /// The stable error of an operation that ran past its deadline.
    pub(crate) fn expired_error(&self) -> SnapshotError {
        self.shared.expired_error()
    }

    /// `result`, unless the deadline passed: then the deadline error, whatever failure the kill
    /// caused downstream (a truncated stream, a failed exit status).
    pub(crate) fn check<T>(&self, result: Result<T, SnapshotError>) -> Result<T, SnapshotError> {
        if self.expired() {
            return Err(self.expired_error());
        }
        result
    }

    /// Spawns `cmd` as the leader of a new process group, registered with the watchdog.
    pub(crate) fn spawn(&self, cmd: &mut Command) -> Result<GitChild, SnapshotError> {
        cmd.process_group(0);
        let mut state = self.shared.lock();
        if state.expired {
            return Err(self.expired_error());
        }
        let child = cmd.spawn().map_err(|e| spawn_error(&e))?;
        state.live.push(Pid::from_child(&child));
        drop(state);
        Ok(GitChild {
            child: Some(child),
            shared: Arc::clone(&self.shared),
        })
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.shared.lock().finished = true;
        self.shared.wake.notify_all();
        if let Some(watchdog) = self.watchdog.take() {
            let _ = watchdog.join();
        }
    }
}

fn watch(shared: &Shared, end: Option<Instant>) {
    let mut state = shared.lock();
    loop {
        if state.finished {
            return;
        }
        let now = Instant::now();
        let remaining = match end {
            Some(end) if now >= end => {
                state.expired = true;
                for pid in &state.live {
                    // Our child (alive or a zombie, see the module docs): its group dies.
                    let _ = rustix::process::kill_process_group(*pid, Signal::KILL);
                }
                return;
            }
            Some(end) => end - now,
            None => Duration::from_secs(3600),
        };
        state = match shared.wake.wait_timeout(state, remaining) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
}

/// A git process under a [`Deadline`]; killed (with its process group) and reaped if dropped
/// before [`GitChild::wait_success`].
#[derive(Debug)]
pub(crate) struct GitChild {
    child: Option<Child>,
    shared: Arc<Shared>,
}

impl GitChild {
    pub(crate) fn take_stdin(&mut self) -> Result<ChildStdin, SnapshotError> {
        self.child
            .as_mut()
            .and_then(|c| c.stdin.take())
            .ok_or_else(|| git_error("no git stdin"))
    }

    pub(crate) fn take_stdout(&mut self) -> Result<ChildStdout, SnapshotError> {
        self.child
            .as_mut()
            .and_then(|c| c.stdout.take())
            .ok_or_else(|| git_error("no git stdout"))
    }

    pub(crate) fn take_stderr(&mut self) -> Result<ChildStderr, SnapshotError> {
        self.child
            .as_mut()
            .and_then(|c| c.stderr.take())
            .ok_or_else(|| git_error("no git stderr"))
    }

    /// Kills the process group (the child is not reaped yet, so its PID is still ours).
    pub(crate) fn kill(&mut self) {
        if let Some(c) = self.child.as_ref() {
            let _ = rustix::process::kill_process_group(Pid::from_child(c), Signal::KILL);
        }
    }

    /// Waits for the exit without reaping, unregisters the process, then reaps it.
    fn reap(shared: &Shared, child: &mut Child) -> std::io::Result<ExitStatus> {
        let pid = Pid::from_child(child);
        // Until it exited (or is not waitable at all: `wait` below reports that).
        while let Err(rustix::io::Errno::INTR) = rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {}
        shared.lock().live.retain(|p| *p != pid);
        child.wait()
    }

    /// The exit status; the deadline error when the watchdog killed the process.
    pub(crate) fn wait(mut self) -> Result<ExitStatus, SnapshotError> {
        let Some(mut child) = self.child.take() else {
            return Err(git_error("git process already reaped"));
        };
        let status = Self::reap(&self.shared, &mut child)
            .map_err(|_| git_error("waiting for git failed"))?;
        if self.shared.lock().expired {
            return Err(self.shared.expired_error());
        }
        Ok(status)
    }

    /// Waits for a successful exit.
    pub(crate) fn wait_success(self, what: &str) -> Result<(), SnapshotError> {
        let status = self.wait()?;
        if !status.success() {
            return Err(SnapshotError::Git {
                detail: format!("git {what} failed ({status})"),
            });
        }
        Ok(())
    }
}

impl Drop for GitChild {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = rustix::process::kill_process_group(Pid::from_child(&c), Signal::KILL);
            let _ = Self::reap(&self.shared, &mut c);
        }
    }
}

/// Reads at most `cap` bytes; `None` when the stream holds more.
fn read_capped(reader: impl Read, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    reader
        .take(u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut out)?;
    Ok((out.len() <= cap).then_some(out))
}

/// What [`capture`] collected.
#[derive(Debug)]
pub(crate) struct Captured {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

/// Runs `cmd` under `deadline`, collecting at most `cap` bytes of stdout and of stderr (more is
/// an error and kills the process).
pub(crate) fn capture(
    deadline: &Deadline,
    cmd: &mut Command,
    cap: usize,
) -> Result<Captured, SnapshotError> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = deadline.spawn(cmd)?;
    let stdout = child.take_stdout()?;
    let stderr = child.take_stderr()?;
    let (out, err) = std::thread::scope(|scope| {
        let err = scope.spawn(move || read_capped(stderr, cap));
        let out = read_capped(stdout, cap);
        (out, err.join())
    });
    let read = |r: std::io::Result<Option<Vec<u8>>>| match r {
        Ok(Some(bytes)) => Ok(bytes),
        Ok(None) => Err(git_error("git printed more than expected")),
        Err(_) => Err(git_error("reading git output failed")),
    };
    let out = read(out);
    let err = err
        .map_err(|_| git_error("reading git output failed"))
        .and_then(read);
    if out.is_err() || err.is_err() {
        child.kill();
    }
    let status = child.wait()?;
    Ok(Captured {
        status,
        stdout: out?,
        stderr: err?,
    })
}

/// Runs a git command built by [`super::git_command`] to completion under [`GIT_DEADLINE`],
/// feeding it `stdin`; true on exit status 0. Output goes where `cmd` sends it (nowhere, for
/// [`super::git_command`]).
///
/// # Errors
/// `REPOSITORY_SNAPSHOT_GIT` when git cannot be started or runs past the deadline (it is then
/// killed with its process group).
pub fn run_git(cmd: &mut Command, stdin: Option<&[u8]>) -> Result<bool, SnapshotError> {
    run_git_within(cmd, stdin, GIT_DEADLINE)
}

pub(crate) fn run_git_within(
    cmd: &mut Command,
    stdin: Option<&[u8]>,
    limit: Duration,
) -> Result<bool, SnapshotError> {
    let deadline = Deadline::start(limit)?;
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = deadline.spawn(cmd)?;
    if let Some(bytes) = stdin {
        let mut pipe = child.take_stdin()?;
        // A child that exits early (or is killed at the deadline) closes the pipe; its status
        // decides the outcome.
        let _ = std::io::Write::write_all(&mut pipe, bytes);
    }
    let status = child.wait()?;
    Ok(status.success())
}
