//! Shared helpers: payloads, running the binaries with a deadline, decoding the output.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use turn_runner::testkit::spawn_fed;
pub use turn_runner::testkit::{Run, archive_entries, outcomes, payload, standard};

pub const RUNNER: &str = env!("CARGO_BIN_EXE_turn-runner");
pub const AGENT: &str = env!("CARGO_BIN_EXE_fake-agent");
pub const HOSTILE: &str = env!("CARGO_BIN_EXE_hostile-entry");

/// Runs `program args` with `stdin`, killing it after `deadline`.
pub fn run_with(
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    stdin: &[u8],
    deadline: Duration,
) -> Run {
    let start = Instant::now();
    let (child, writer) = spawn_fed(
        Command::new(program).args(args).envs(envs.iter().copied()),
        stdin,
    );
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        let until = Instant::now() + deadline;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let out = child.wait_with_output().expect("wait");
    let _ = writer.join();
    let _ = killer.join();
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

/// Runs the runner against the fake agent in a fresh temporary workspace root.
pub fn run_turn(stdin: &[u8], extra: &[&str]) -> (Run, tempfile::TempDir) {
    run_turn_env(stdin, extra, &[])
}

pub fn run_turn_env(
    stdin: &[u8],
    extra: &[&str],
    envs: &[(&str, &str)],
) -> (Run, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let root_str = root.path().to_str().unwrap().to_owned();
    let mut args = vec!["--workspace-root", root_str.as_str(), "--agent", AGENT];
    args.extend_from_slice(extra);
    let run = run_with(RUNNER, &args, envs, stdin, Duration::from_secs(60));
    (run, root)
}
