//! The runner proper: harden the process, read the whole request and tree, run the gate command
//! as a child in its own process group with the deadline, sweep every descendant, read the JUnit
//! file, and build the one report.

use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

use crate::{
    ExitStatus, GateReport, GateRequest, GateRunnerError, LogTail, RelPath, RunStatus, StableCode,
};

/// The extraction root inside a gate image (a tmpfs the host mounts).
pub const DEFAULT_ROOT: &str = "/workspace";

/// How often the runner polls for the child's exit.
const POLL: Duration = Duration::from_millis(5);
/// How long the sweep keeps killing and reaping descendants.
const SWEEP_DEADLINE: Duration = Duration::from_secs(5);
/// How long the runner waits for the log pipe's EOF after the sweep.
const DRAIN_DEADLINE: Duration = Duration::from_secs(2);
/// The drain's fixed read buffer.
const READ_CHUNK: usize = 64 * 1024;

/// Makes the runner non-dumpable (a same-uid child can then neither ptrace it nor open its
/// `/proc/<pid>/{fd,mem,environ}`), a child subreaper (orphaned descendants are reparented to
/// it, so the sweep finds them), and checks that no inherited descriptor would leak into the
/// child. Call before reading stdin.
///
/// # Errors
/// `GATE_RUNNER_HARDEN` naming the step that failed.
pub fn harden() -> Result<(), GateRunnerError> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|_| GateRunnerError::Harden { step: "dumpable" })?;
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|_| GateRunnerError::Harden { step: "subreaper" })?;
    check_inherited_fds()
}

/// Every descriptor above stderr must be close-on-exec (std opens its own that way; a
/// descriptor inherited without it would reach the child). Checked, not repaired: setting the
/// flag on a raw inherited descriptor needs `unsafe`, and the image's runtime gives only 0–2.
fn check_inherited_fds() -> Result<(), GateRunnerError> {
    const O_CLOEXEC: u32 = 0o2_000_000;
    let err = || GateRunnerError::Harden {
        step: "inherited descriptor",
    };
    let entries = std::fs::read_dir("/proc/self/fd").map_err(|_| err())?;
    for entry in entries {
        let entry = entry.map_err(|_| err())?;
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            return Err(err());
        };
        if fd <= 2 {
            continue;
        }
        let info = match std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) {
            Ok(info) => info,
            // The directory handle of the listing itself may be gone by now.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return Err(err()),
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .ok_or_else(err)?;
        if flags & O_CLOEXEC == 0 {
            return Err(err());
        }
    }
    Ok(())
}

/// A bounded ring of the last bytes the child wrote, and the total count.
#[derive(Debug)]
struct Ring {
    cap: usize,
    bytes: VecDeque<u8>,
    total: u64,
}

impl Ring {
    fn new(cap: usize) -> Self {
        Self {
            cap,
            bytes: VecDeque::with_capacity(cap),
            total: 0,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.total = self.total.saturating_add(chunk.len() as u64);
        let keep = chunk
            .get(chunk.len().saturating_sub(self.cap)..)
            .unwrap_or_default();
        self.bytes.extend(keep);
        let excess = self.bytes.len().saturating_sub(self.cap);
        self.bytes.drain(..excess);
    }
}

/// Runs one gate: `input` holds the request frame then the tree stream; `root` is the (empty)
/// extraction directory. Returns the report to write, or an error when no request could be read
/// (then there is no nonce and no report can be written).
///
/// # Errors
/// The framing and parsing errors of the request.
///
/// # Security
/// Everything the child could influence (exit, log, JUnit) is read by the runner itself after
/// the child and every descendant are gone; the nonce is only in the runner's memory.
pub fn run_gate(mut input: impl Read, root: &Path) -> Result<GateReport, GateRunnerError> {
    let request = GateRequest::read_frame(&mut input)?;
    let in_image = root == Path::new(DEFAULT_ROOT);
    let outcome = execute(&request, input, root, in_image);
    Ok(report(&request, outcome))
}

/// What running the request produced.
struct Outcome {
    status: RunStatus,
    runner_error: Option<&'static str>,
    exit: Option<ExitStatus>,
    wall: Duration,
    log: (u64, Vec<u8>),
    junit: Option<crate::JunitReport>,
}

impl Outcome {
    fn runner_error(e: &GateRunnerError) -> Self {
        Self {
            status: RunStatus::RunnerError,
            runner_error: Some(e.code()),
            exit: None,
            wall: Duration::ZERO,
            log: (0, Vec::new()),
            junit: None,
        }
    }
}

fn report(request: &GateRequest, o: Outcome) -> GateReport {
    let wall_ms = u64::try_from(o.wall.as_millis()).unwrap_or(u64::MAX);
    let code = o
        .runner_error
        .and_then(|c| StableCode::try_from(c.to_owned()).ok());
    let log = LogTail::new(o.log.0, o.log.1).unwrap_or_else(|_| empty_log());
    GateReport::new(
        request.nonce().clone(),
        o.status,
        code,
        o.exit,
        wall_ms,
        log,
        o.junit,
    )
    // The outcome's fields agree by construction; should they not, the report says so.
    .unwrap_or_else(|e| minimal(request, e.code()))
}

#[expect(
    clippy::expect_used,
    reason = "an empty tail of a zero total is always valid"
)]
fn empty_log() -> LogTail {
    LogTail::new(0, Vec::new()).expect("an empty log is valid")
}

#[expect(
    clippy::expect_used,
    reason = "a runner_error report with a valid code is always valid"
)]
fn minimal(request: &GateRequest, code: &'static str) -> GateReport {
    let code = StableCode::try_from(code.to_owned()).expect("error codes are stable codes");
    GateReport::new(
        request.nonce().clone(),
        RunStatus::RunnerError,
        Some(code),
        None,
        0,
        empty_log(),
        None,
    )
    .expect("a runner_error report with a code is valid")
}

fn execute(request: &GateRequest, tree: impl Read, root: &Path, in_image: bool) -> Outcome {
    let dir = match cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority()) {
        Ok(d) => d,
        Err(e) => return Outcome::runner_error(&GateRunnerError::Root { kind: e.kind() }),
    };
    if let Err(e) = crate::tree::extract(tree, &dir, request.tree()) {
        return Outcome::runner_error(&e);
    }
    if !request.cwd().is_root() {
        match dir.symlink_metadata(request.cwd().as_str()) {
            Ok(m) if m.is_dir() => {}
            _ => return Outcome::runner_error(&GateRunnerError::Cwd),
        }
    }
    let cwd = child_cwd(root, request.cwd());
    let mut outcome = match supervise(request, &cwd, in_image) {
        Ok(o) => o,
        Err(e) => return Outcome::runner_error(&e),
    };
    outcome.junit = request
        .junit()
        .map(|spec| crate::junit::read_junit(&dir, spec));
    outcome
}

fn child_cwd(root: &Path, cwd: &RelPath) -> PathBuf {
    let mut p = root.to_path_buf();
    for seg in cwd.segments() {
        p.push(seg);
    }
    p
}

/// Spawns the child, drains its log, enforces the deadline, and sweeps every descendant.
fn supervise(
    request: &GateRequest,
    cwd: &Path,
    in_image: bool,
) -> Result<Outcome, GateRunnerError> {
    let (reader, writer) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| {
            GateRunnerError::Io {
                kind: std::io::Error::from(e).kind(),
            }
        })?;
    let writer2 = writer.try_clone()?;
    let argv = request.argv().items();
    let (program, args) = argv.split_first().ok_or(GateRunnerError::Spawn {
        kind: std::io::ErrorKind::InvalidInput,
    })?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(request.env().entries().iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(writer2))
        .process_group(0);
    let limits = request.limits();
    let started = Instant::now();
    let spawned = cmd.spawn();
    // The Command holds the pipe's write ends; drop them so the drain sees EOF when the
    // descendants are gone.
    drop(cmd);
    let child = spawned.map_err(|e| GateRunnerError::Spawn { kind: e.kind() })?;
    let pid = Pid::from_child(&child);
    // Reaped through rustix (the subreaper reaps orphans too); std's handle is not waited on.
    drop(child);

    let cap = usize::try_from(limits.log_tail_bytes()).unwrap_or(usize::MAX);
    let ring = Arc::new(Mutex::new(Ring::new(cap)));
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let drain_ring = Arc::clone(&ring);
    let mut reader = std::fs::File::from(reader);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if let Ok(mut r) = drain_ring.lock() {
                        r.push(buf.get(..n).unwrap_or_default());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done_tx.send(());
    });

    let deadline = started + Duration::from_millis(limits.wall_ms());
    let mut timed_out = false;
    let mut status = wait_until(pid, deadline);
    if status.is_none() {
        timed_out = true;
        let _ = rustix::process::kill_process_group(pid, Signal::TERM);
        let grace = Instant::now() + Duration::from_millis(limits.kill_grace_ms());
        status = wait_until(pid, grace);
        if status.is_none() {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
            status = wait_until(pid, Instant::now() + SWEEP_DEADLINE);
        }
    }
    let wall = started.elapsed();
    sweep(pid, in_image);
    let _ = done_rx.recv_timeout(DRAIN_DEADLINE);
    let log = match ring.lock() {
        Ok(r) => (r.total, r.bytes.iter().copied().collect()),
        Err(_) => (0, Vec::new()),
    };
    let Some(status) = status else {
        // The child survived SIGKILL for the whole sweep deadline: nothing honest to report.
        return Err(GateRunnerError::Harden {
            step: "child survived SIGKILL",
        });
    };
    Ok(Outcome {
        status: if timed_out {
            RunStatus::TimedOut
        } else {
            RunStatus::Completed
        },
        runner_error: None,
        exit: Some(status),
        wall,
        log,
        junit: None,
    })
}

/// Reaps children (the child and any reparented orphan) until `pid` exits or `until` passes.
fn wait_until(pid: Pid, until: Instant) -> Option<ExitStatus> {
    loop {
        match rustix::process::wait(WaitOptions::NOHANG) {
            Ok(Some((reaped, st))) => {
                if reaped == pid {
                    return Some(exit_of(st));
                }
                continue;
            }
            Ok(None) => {}
            Err(rustix::io::Errno::INTR) => continue,
            // ECHILD: nothing left to wait for (the child is gone without our seeing it).
            Err(_) => return None,
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

fn exit_of(st: rustix::process::WaitStatus) -> ExitStatus {
    match (st.exit_status(), st.terminating_signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(sig)) => ExitStatus::Signal(sig),
        // Stopped/continued are not reported without WUNTRACED/WCONTINUED.
        (None, None) => ExitStatus::Signal(Signal::KILL.as_raw()),
    }
}

/// Whether `kill(-1)` is confined to the gate container: the runner is PID 1 of its namespace,
/// or PID 2 under the container's init (`--init`, whose parent is PID 1) extracting into the
/// image's `/workspace`. A runner started with `--root` (tests on a host) never uses it, since
/// there `kill(-1)` would reach every process of the user.
fn sweeps_namespace(in_image: bool) -> bool {
    let pid = rustix::process::getpid();
    let parent_is_init = rustix::process::getppid() == Some(Pid::INIT);
    in_image && (pid == Pid::INIT || parent_is_init)
}

/// Kills every process the child left behind and reaps it: in the gate container (see
/// [`sweeps_namespace`]) `kill(-1, SIGKILL)`, every other process of the namespace but init;
/// always the child's group and every process reparented to this subreaper, found through
/// `/proc/self/task/*/children`, until none is left.
fn sweep(pid: Pid, in_image: bool) {
    let until = Instant::now() + SWEEP_DEADLINE;
    let init = sweeps_namespace(in_image);
    loop {
        if init {
            // kill(-1, SIGKILL): rustix spells it as the process group of PID 1.
            let _ = rustix::process::kill_process_group(Pid::INIT, Signal::KILL);
        }
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        for child in children() {
            if let Some(p) = Pid::from_raw(child) {
                let _ = rustix::process::kill_process(p, Signal::KILL);
            }
        }
        // Reap whatever died; ECHILD means no descendant is left.
        loop {
            match rustix::process::wait(WaitOptions::NOHANG) {
                Ok(Some(_)) | Err(rustix::io::Errno::INTR) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
        if Instant::now() >= until {
            return;
        }
        std::thread::sleep(POLL);
    }
}

/// The runner's direct children, from every one of its threads.
fn children() -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let mut path = task.path();
        path.push("children");
        if let Ok(text) = std::fs::read_to_string(&path) {
            out.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_tail_and_counts_everything() {
        let mut r = Ring::new(4);
        r.push(b"ab");
        r.push(b"cdef");
        assert_eq!(r.bytes.iter().copied().collect::<Vec<_>>(), b"cdef");
        r.push(b"0123456789");
        assert_eq!(r.bytes.iter().copied().collect::<Vec<_>>(), b"6789");
        r.push(b"x");
        assert_eq!(r.bytes.iter().copied().collect::<Vec<_>>(), b"789x");
        assert_eq!(r.total, 17);
        let mut zero = Ring::new(0);
        zero.push(b"abc");
        assert!(zero.bytes.is_empty());
        assert_eq!(zero.total, 3);
    }
}
