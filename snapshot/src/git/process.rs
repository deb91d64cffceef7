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

use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use crate::error::SnapshotError;

/// Why a git process could not be run to its end. Not a wire error: each caller maps it to its
/// own code (`REPOSITORY_SNAPSHOT_GIT`, `PATCH_CANDIDATE_PUBLISH_GIT`, ...), keeping the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GitLaunchError {
    /// No `git` on `PATH`.
    #[error("the git executable was not found on PATH")]
    NotFound,
    /// `git` could not be spawned.
    #[error("git could not be started")]
    CannotStart,
    /// The deadline passed: the process group was killed.
    #[error("git exceeded its deadline of {0:?}")]
    Deadline(Duration),
    /// The launch was cancelled through its [`GitCancel`](crate::GitCancel): the process group was killed.
    #[error("git was cancelled")]
    Cancelled,
    /// A captured stream held more than its cap: the process group was killed.
    #[error("git printed more than expected")]
    OutputTooLarge,
    /// A captured stream could not be read.
    #[error("reading git output failed")]
    Read,
    /// The exit could not be awaited.
    #[error("waiting for git failed")]
    Wait,
    /// The deadline's watchdog thread could not be started.
    #[error("cannot start the git deadline watchdog")]
    Watchdog,
    /// A pipe the launch asked for was not there.
    #[error("no git {0}")]
    MissingPipe(&'static str),
    /// The process was already reaped.
    #[error("git process already reaped")]
    Reaped,
}

impl From<GitLaunchError> for SnapshotError {
    fn from(e: GitLaunchError) -> Self {
        SnapshotError::Git {
            detail: e.to_string(),
        }
    }
}

/// The deadline of one git operation (a snapshot load, a read of selected files, one `git`
/// command run through the launcher, unless its caller sets a shorter one).
pub const GIT_DEADLINE: Duration = Duration::from_secs(600);

#[derive(Debug, Default)]
struct State {
    live: Vec<Pid>,
    finished: bool,
    expired: bool,
    cancelled: bool,
}

#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    limit: Duration,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stop_error(&self, state: &State) -> Option<GitLaunchError> {
        if state.cancelled {
            Some(GitLaunchError::Cancelled)
        } else if state.expired {
            Some(GitLaunchError::Deadline(self.limit))
        } else {
            None
        }
    }

    /// Kills every registered process group (see the module docs) and refuses further spawns.
    pub(crate) fn cancel(&self) {
        let mut state = self.lock();
        state.cancelled = true;
        for pid in &state.live {
            let _ = rustix::process::kill_process_group(*pid, Signal::KILL);
        }
        drop(state);
        self.wake.notify_all();
    }
}

pub(crate) fn git_error(detail: &str) -> SnapshotError {
    SnapshotError::Git {
        detail: detail.to_owned(),
    }
}

fn spawn_error(e: &std::io::Error) -> GitLaunchError {
    if e.kind() == std::io::ErrorKind::NotFound {
        GitLaunchError::NotFound
    } else {
        GitLaunchError::CannotStart
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
    pub(crate) fn start(limit: Duration) -> Result<Self, GitLaunchError> {
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
            .map_err(|_| GitLaunchError::Watchdog)?;
        Ok(Self {
            shared,
            watchdog: Some(watchdog),
        })
    }

    /// The state a cancel handle reaches (see [`super::launch::GitCancel`]).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// True once the deadline has passed (and every registered process was killed).
    pub(crate) fn expired(&self) -> bool {
        let state = self.shared.lock();
        state.expired || state.cancelled
    }

    /// The stable error of an operation that ran past its deadline (or was cancelled).
    pub(crate) fn expired_error(&self) -> GitLaunchError {
        let state = self.shared.lock();
        self.shared
            .stop_error(&state)
            .unwrap_or(GitLaunchError::Deadline(self.shared.limit))
    }

    /// `result`, unless the deadline passed: then the deadline error, whatever failure the kill
    /// caused downstream (a truncated stream, a failed exit status).
    pub(crate) fn check<T>(&self, result: Result<T, SnapshotError>) -> Result<T, SnapshotError> {
        if self.expired() {
            return Err(self.expired_error().into());
        }
        result
    }

    /// Runs `op` under a deadline of `limit` started for it alone: `op`'s result, checked as
    /// [`Deadline::check`] does.
    pub(crate) fn run<T>(
        limit: Duration,
        op: impl FnOnce(&Self) -> Result<T, SnapshotError>,
    ) -> Result<T, SnapshotError> {
        let deadline = Self::start(limit)?;
        let result = op(&deadline);
        deadline.check(result)
    }

    /// Spawns `cmd` as the leader of a new process group, registered with the watchdog.
    pub(crate) fn spawn(&self, cmd: &mut Command) -> Result<GitChild, GitLaunchError> {
        cmd.process_group(0);
        let mut state = self.shared.lock();
        if let Some(stop) = self.shared.stop_error(&state) {
            return Err(stop);
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
        if state.finished || state.cancelled {
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
/// before [`GitChild::wait`].
#[derive(Debug)]
pub(crate) struct GitChild {
    child: Option<Child>,
    shared: Arc<Shared>,
}

impl GitChild {
    pub(crate) fn take_stdin(&mut self) -> Result<ChildStdin, GitLaunchError> {
        self.child
            .as_mut()
            .and_then(|c| c.stdin.take())
            .ok_or(GitLaunchError::MissingPipe("stdin"))
    }

    pub(crate) fn take_stdout(&mut self) -> Result<ChildStdout, GitLaunchError> {
        self.child
            .as_mut()
            .and_then(|c| c.stdout.take())
            .ok_or(GitLaunchError::MissingPipe("stdout"))
    }

    pub(crate) fn take_stderr(&mut self) -> Result<ChildStderr, GitLaunchError> {
        self.child
            .as_mut()
            .and_then(|c| c.stderr.take())
            .ok_or(GitLaunchError::MissingPipe("stderr"))
    }

    /// Kills the process group (the child is not reaped yet, so its PID is still ours).
    pub(crate) fn kill(&self) {
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
    pub(crate) fn wait(mut self) -> Result<ExitStatus, GitLaunchError> {
        let Some(mut child) = self.child.take() else {
            return Err(GitLaunchError::Reaped);
        };
        let status = Self::reap(&self.shared, &mut child).map_err(|_| GitLaunchError::Wait)?;
        let state = self.shared.lock();
        if let Some(stop) = self.shared.stop_error(&state) {
            return Err(stop);
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
