//! The gate image's entrypoint: `gate-runner [--root DIR]` (default `/workspace`).
//!
//! Reads the request frame and the tree from stdin, runs the gate, writes exactly one report
//! frame to stdout and exits 0. When no request can be read there is no nonce to answer with:
//! it writes nothing to stdout, a coded line to stderr, and exits 2 (the host sees no report).
#![deny(clippy::print_stdout)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use gate_runner::{DEFAULT_ROOT, GateRunnerError, harden, run_gate};

fn root_from_args() -> Result<PathBuf, GateRunnerError> {
    let mut args = std::env::args_os().skip(1);
    let mut root = PathBuf::from(DEFAULT_ROOT);
    while let Some(arg) = args.next() {
        if arg == "--root" {
            root = args
                .next()
                .map(PathBuf::from)
                .ok_or(GateRunnerError::Usage {
                    reason: "--root needs a directory",
                })?;
        } else {
            return Err(GateRunnerError::Usage {
                reason: "usage: gate-runner [--root DIR]",
            });
        }
    }
    if !root.is_absolute() {
        return Err(GateRunnerError::Usage {
            reason: "--root must be absolute",
        });
    }
    Ok(root)
}

fn fail(e: &GateRunnerError) -> ExitCode {
    #[expect(clippy::print_stderr, reason = "the runner's one diagnostic line")]
    {
        eprintln!("gate-runner: {e}");
    }
    ExitCode::from(2)
}

/// Marks every inherited descriptor above stderr close-on-exec, so none reaches the child
/// (a container runtime gives only 0-2; a test harness or shell may pass more). Runs first,
/// while the process has one thread.
fn cloexec_inherited() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        #[allow(unsafe_code)]
        // SAFETY: the process is single-threaded here and nothing else opens or closes
        // descriptors, so `fd` is either one it inherited (open for the whole call) or the
        // listing's own, already closed (then fcntl fails with EBADF and nothing happens).
        // The borrow only sets FD_CLOEXEC; it never closes or reads the descriptor.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let _ = rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::CLOEXEC);
    }
}

fn main() -> ExitCode {
    cloexec_inherited();
    // Hardening comes before stdin is read: the nonce must never sit in a dumpable process.
    if let Err(e) = harden() {
        return fail(&e);
    }
    let root = match root_from_args() {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let stdin = std::io::stdin().lock();
    let report = match run_gate(stdin, &root) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let mut stdout = std::io::stdout().lock();
    match report.write_frame(&mut stdout) {
        Ok(()) => {}
        Err(e) => return fail(&e),
    }
    let _ = stdout.flush();
    ExitCode::SUCCESS
}
