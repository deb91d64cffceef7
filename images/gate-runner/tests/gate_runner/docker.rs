//! The runner in a gate container with the turn's hardened posture (the `container` crate's
//! spec, spelled as `docker run` flags): no network, read-only root, sized tmpfs, cap-drop ALL,
//! no-new-privileges, the project's seccomp profile, pids/memory/CPU limits, init, log driver
//! none, nonroot. Hostile children try to forge, hide from or outlive the runner; each run must
//! end with an honest report or a stable error, and no container may be left.
//!
//! The test image is a throwaway tag `FROM` the python (or rust) gate image that `images/build.sh
//! --gate` built, with the runner binary under test copied in. Without Docker (or without the
//! gate image) the tests fail when `PATCH_CANDIDATE_REQUIRE_DOCKER=1`, else say so and pass.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash as _, Hasher as _};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gate_runner::{CaseOutcome, ExitStatus, GateReport, JunitReport, RunStatus};
use pretty_assertions::assert_eq;

use crate::support::{RUNNER, Req, Tree, junit_outcomes, tree};

const PYTHON_BASE: &str = "patch-candidate-gate-python:local";
const RUST_BASE: &str = "patch-candidate-gate-rust:local";
const SECCOMP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../worker/container/seccomp/turn.json"
);
/// The host's own bound on one container run (the runner's deadlines are far below it).
const HOST_DEADLINE: Duration = Duration::from_secs(240);

fn required() -> bool {
    std::env::var("PATCH_CANDIDATE_REQUIRE_DOCKER").is_ok_and(|v| v == "1")
}

fn docker() -> Command {
    let mut c = Command::new("docker");
    c.stdin(Stdio::null());
    c
}

fn ok(c: &mut Command) -> bool {
    c.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The throwaway test image for `base`, built once per test binary; `None` (after saying so)
/// when Docker or the base image is unavailable and Docker is not required.
fn image(base: &'static str) -> Option<&'static str> {
    static PY: OnceLock<Option<String>> = OnceLock::new();
    static RS: OnceLock<Option<String>> = OnceLock::new();
    let cell = if base == PYTHON_BASE { &PY } else { &RS };
    cell.get_or_init(|| build_image(base)).as_deref()
}

fn build_image(base: &str) -> Option<String> {
    let base_id = docker()
        .args(["image", "inspect", "--format", "{{.Id}}", base])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| o.stdout);
    let Some(base_id) = base_id else {
        assert!(
            !required(),
            "Docker is required but {base} is unavailable (images/build.sh --gate)"
        );
        eprintln!("SKIPPED (Docker or {base} unavailable, PATCH_CANDIDATE_REQUIRE_DOCKER unset)");
        return None;
    };
    let binary = std::fs::read(RUNNER).unwrap();
    let mut h = DefaultHasher::new();
    binary.hash(&mut h);
    base_id.hash(&mut h);
    let stack = if base == PYTHON_BASE {
        "python"
    } else {
        "rust"
    };
    let tag = format!("patch-candidate-gate-test-{stack}:{:016x}", h.finish());
    if ok(docker().args(["image", "inspect", &tag])) {
        return Some(tag);
    }
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(ctx.path().join("gate-runner"), &binary).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        ctx.path().join("gate-runner"),
        std::fs::Permissions::from_mode(0o555),
    )
    .unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!("FROM {base}\nCOPY gate-runner /gate-runner\n"),
    )
    .unwrap();
    let out = docker()
        .env("DOCKER_BUILDKIT", "0")
        .args(["build", "--quiet", "--tag", &tag])
        .arg(ctx.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "test image build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(tag)
}

/// Per-run knobs beyond the turn posture.
#[derive(Debug, Clone)]
struct Posture {
    memory: &'static str,
    pids: u32,
    exec_tmpfs: bool,
    host_deadline: Duration,
}

impl Default for Posture {
    fn default() -> Self {
        Self {
            memory: "768m",
            pids: 64,
            exec_tmpfs: false,
            host_deadline: HOST_DEADLINE,
        }
    }
}

impl Posture {
    /// The default posture with a memory limit of `memory`.
    fn with_memory(memory: &'static str) -> Self {
        Self {
            memory,
            ..Self::default()
        }
    }
}

/// What one container run gave: the report (or why there is none) and the facts.
#[derive(Debug)]
struct Run {
    report: Result<GateReport, String>,
    out: Output,
    elapsed: Duration,
}

impl Run {
    fn report(&self) -> &GateReport {
        match &self.report {
            Ok(r) => r,
            Err(e) => panic!(
                "no valid report ({e}); runner stderr: {}",
                String::from_utf8_lossy(&self.out.stderr)
            ),
        }
    }
    fn log(&self) -> String {
        String::from_utf8_lossy(self.report().log().tail()).into_owned()
    }
}

fn run_in(image: &str, req: &Req, tree: &Tree, posture: &Posture) -> Run {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "pc-gate-test-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let exec = if posture.exec_tmpfs { ",exec" } else { "" };
    let mut cmd = Command::new("docker");
    cmd.args(["run", "-i", "--rm", "--name", &name])
        .args(["--label", "patch-candidate.test=gate-runner"])
        .args(["--network", "none", "--read-only"])
        .args([
            "--tmpfs",
            &format!("/tmp:rw,nosuid,nodev{exec},size=64m,mode=1777"),
        ])
        .args([
            "--tmpfs",
            &format!("/workspace:rw,nosuid,nodev{exec},size=64m,mode=1777"),
        ])
        .args(["--cap-drop", "ALL", "--security-opt", "no-new-privileges"])
        .args(["--security-opt", &format!("seccomp={SECCOMP}")])
        .args(["--pids-limit", &posture.pids.to_string()])
        .args(["--memory", posture.memory, "--memory-swap", posture.memory])
        .args([
            "--cpus",
            "1",
            "--init",
            "--ipc",
            "private",
            "--shm-size",
            "1m",
        ])
        .args(["--ulimit", "nofile=1024:1024", "--log-driver", "none"])
        .args(["--user", "10001:10001"])
        .arg(image)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = req.stdin(tree);
    let writer = std::thread::spawn(move || {
        use std::io::Write as _;
        let _ = stdin.write_all(&input);
    });
    // The host's bound: kill the container if it outlives it (never expected).
    let watchdog_name = name.clone();
    let host_deadline = posture.host_deadline;
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(host_deadline).is_err() {
            let _ = ok(docker().args(["kill", &watchdog_name]));
        }
    });
    let out = child.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    let _ = done_tx.send(());
    watchdog.join().unwrap();
    writer.join().unwrap();
    // Removal on every path: nothing of this run is left on the daemon.
    let left = docker()
        .args(["ps", "-aq", "--filter", &format!("name=^{name}$")])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "container {name} left behind");
    let report = GateReport::read_stream(&out.stdout[..])
        .map_err(|e| e.code().to_owned())
        .and_then(|r| {
            if r.nonce() == req.nonce() {
                Ok(r)
            } else {
                Err("nonce differs".to_owned())
            }
        });
    Run {
        report,
        out,
        elapsed,
    }
}

fn py(script: &str) -> Req {
    Req::argv(&["python3", "-c", script]).env(&[
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/tmp"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
    ])
}

macro_rules! need {
    ($base:expr) => {
        match image($base) {
            Some(i) => i,
            None => return,
        }
    };
}

#[test]
fn a_real_pytest_run_reports_its_junit_cases() {
    let img = need!(PYTHON_BASE);
    let t = tree(&[
        ("tests/", None),
        (
            "tests/test_calc.py",
            Some(b"def test_ok():\n    assert 1 + 1 == 2\n\ndef test_bad():\n    assert 1 + 1 == 3\n"),
        ),
    ]);
    let req = Req::argv(&[
        "python3",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--junitxml=out/junit.xml",
    ])
    .env(&[("PATH", "/usr/bin:/bin"), ("HOME", "/tmp")])
    .junit("out/junit.xml");
    let run = run_in(img, &req, &t, &Posture::default());
    let report = run.report();
    assert_eq!(report.status(), RunStatus::Completed);
    assert_eq!(report.exit(), Some(ExitStatus::Code(1)), "{}", run.log());
    assert_eq!(
        junit_outcomes(report),
        vec![
            ("tests.test_calc::test_ok", CaseOutcome::Passed),
            ("tests.test_calc::test_bad", CaseOutcome::Failed)
        ]
    );
}

#[test]
fn a_real_cargo_test_runs_offline_and_frozen_in_the_rust_image() {
    let img = need!(RUST_BASE);
    let t = tree(&[
        (
            "Cargo.toml",
            Some(b"[package]\nname = \"gatecheck\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        ),
        (
            "Cargo.lock",
            Some(b"# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 4\n\n[[package]]\nname = \"gatecheck\"\nversion = \"0.1.0\"\n"),
        ),
        ("src/", None),
        (
            "src/lib.rs",
            Some(b"pub fn add(a: u32, b: u32) -> u32 { a + b }\n#[test]\nfn adds() { assert_eq!(add(2, 2), 4); }\n"),
        ),
    ]);
    let req = Req::argv(&["cargo", "test", "--offline", "--frozen", "-q"])
        .env(&[
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("HOME", "/tmp"),
            ("CARGO_HOME", "/tmp/cargo"),
            ("CARGO_TARGET_DIR", "/tmp/target"),
        ])
        .wall(180_000);
    let posture = Posture {
        exec_tmpfs: true,
        ..Posture::default()
    };
    let run = run_in(img, &req, &t, &posture);
    let report = run.report();
    assert_eq!(report.status(), RunStatus::Completed, "{}", run.log());
    assert_eq!(report.exit(), Some(ExitStatus::Code(0)), "{}", run.log());
    assert!(run.log().contains("1 passed"), "{}", run.log());
}

#[test]
fn hostile_fork_and_thread_bombs_end_honestly_under_the_pids_limit() {
    let img = need!(PYTHON_BASE);
    let t = tree(&[]);
    let fork_bomb = py("import os, time\n\
         n = 0\n\
         while n < 10000:\n\
         \x20   try:\n\
         \x20       if os.fork() == 0:\n\
         \x20           time.sleep(30); os._exit(0)\n\
         \x20       n += 1\n\
         \x20   except OSError:\n\
         \x20       break\n\
         print('forked', n, flush=True)\n\
         os._exit(7)\n");
    let run = run_in(img, &fork_bomb, &t, &Posture::default());
    let report = run.report();
    assert_eq!(report.status(), RunStatus::Completed);
    assert_eq!(report.exit(), Some(ExitStatus::Code(7)));
    let forked: u32 = run
        .log()
        .trim()
        .strip_prefix("forked ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(forked < 64, "forked {forked}");
    // Every sleeping fork was killed: the run did not wait for their 30 s.
    assert!(run.elapsed < Duration::from_secs(25), "{:?}", run.elapsed);

    let thread_bomb = py("import threading, time, os\n\
         n = 0\n\
         try:\n\
         \x20   while n < 10000:\n\
         \x20       threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); n += 1\n\
         except RuntimeError:\n\
         \x20   pass\n\
         print('threads', n, flush=True)\n\
         os._exit(3)\n");
    let run = run_in(img, &thread_bomb, &t, &Posture::default());
    assert_eq!(
        run.report().exit(),
        Some(ExitStatus::Code(3)),
        "{}",
        run.log()
    );
    assert!(run.log().starts_with("threads "));
}

#[test]
fn hostile_memory_balloon_is_killed_and_reported_as_a_signal() {
    let img = need!(PYTHON_BASE);
    let posture = Posture::with_memory("256m");
    let req = py("b = []\nwhile True:\n    b.append(bytearray(16 << 20))\n");
    let run = run_in(img, &req, &tree(&[]), &posture);
    let report = run.report();
    assert_eq!(report.status(), RunStatus::Completed);
    assert_eq!(report.exit(), Some(ExitStatus::Signal(9)));
}

#[test]
fn hostile_sleep_past_the_deadline_is_timed_out_with_nothing_left() {
    let img = need!(PYTHON_BASE);
    let req = Req::sh("trap '' TERM; sleep 600 & sleep 600")
        .wall(1000)
        .grace(300);
    let run = run_in(img, &req, &tree(&[]), &Posture::default());
    let report = run.report();
    assert_eq!(report.status(), RunStatus::TimedOut);
    assert!(matches!(report.exit(), Some(ExitStatus::Signal(_))));
    assert!(run.elapsed < Duration::from_secs(20), "{:?}", run.elapsed);
}

#[test]
fn hostile_log_flood_is_counted_and_bounded_in_a_small_memory_limit() {
    let img = need!(PYTHON_BASE);
    // 512 MiB through the pipe with 64 MiB of memory for the whole container: the runner keeps
    // only its ring.
    let posture = Posture::with_memory("64m");
    let req = Req::sh("head -c 536870912 /dev/zero; echo; echo TAIL-END >&2")
        .tail(4096)
        .wall(120_000);
    let run = run_in(img, &req, &tree(&[]), &posture);
    let report = run.report();
    assert_eq!(report.exit(), Some(ExitStatus::Code(0)));
    assert_eq!(report.log().total_bytes(), 536_870_912 + 1 + 9);
    assert_eq!(report.log().tail().len(), 4096);
    assert!(report.log().tail().ends_with(b"\nTAIL-END\n"));
}

#[test]
fn hostile_junit_files_are_refused_with_their_codes() {
    let img = need!(PYTHON_BASE);
    let t = tree(&[("out/", None)]);
    let cases = [
        (
            // A 1 GiB (sparse) file: refused by its size, never read.
            "f = open('out/j.xml', 'wb'); f.seek((1 << 30) - 1); f.write(b'x'); f.close()",
            "GATE_JUNIT_TOO_LARGE",
        ),
        (
            "open('out/j.xml', 'w').write('<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;\">]><testsuites><testcase name=\"&b;\"/></testsuites>')",
            "GATE_JUNIT_DOCTYPE",
        ),
        (
            "open('out/j.xml', 'w').write('<testsuites>' + '<a>' * 100000 + '</a>' * 100000 + '</testsuites>')",
            "GATE_JUNIT_TOO_DEEP",
        ),
        (
            "import os; os.symlink('/proc/1/environ', 'out/j.xml')",
            "GATE_JUNIT_NOT_A_FILE",
        ),
        ("import os; os.mkfifo('out/j.xml')", "GATE_JUNIT_NOT_A_FILE"),
    ];
    for (script, code) in cases {
        let req = py(script).junit("out/j.xml");
        let run = run_in(img, &req, &t, &Posture::default());
        let report = run.report();
        assert_eq!(
            report.exit(),
            Some(ExitStatus::Code(0)),
            "{code}: {}",
            run.log()
        );
        assert_eq!(
            report.junit(),
            Some(&JunitReport::Invalid {
                code: code.parse().unwrap()
            }),
            "{code}"
        );
    }
}

#[test]
fn hostile_fake_pass_lines_and_forged_frames_stay_in_the_log() {
    let img = need!(PYTHON_BASE);
    // The child prints what a lenient host might take for success, and a well-formed report
    // frame with a guessed nonce, then fails.
    let forged = r#"{"exit":{"code":0},"junit":null,"log":{"tail_b64":"","total_bytes":0},"nonce":"0000000000000000000000000000000000000000000000000000000000000000","runner_error":null,"status":"completed","version":1,"wall_ms":1}"#;
    let script = format!(
        "import sys, struct\n\
         sys.stdout.write('===== 42 passed in 0.01s =====\\nPASSED\\n')\n\
         doc = {forged:?}.encode()\n\
         sys.stdout.buffer.write(struct.pack('>I', len(doc)) + doc)\n\
         sys.stdout.flush()\n\
         sys.exit(1)\n"
    );
    let run = run_in(img, &py(&script), &tree(&[]), &Posture::default());
    let report = run.report();
    assert_eq!(report.status(), RunStatus::Completed);
    assert_eq!(report.exit(), Some(ExitStatus::Code(1)));
    assert!(run.log().contains("42 passed"));
}

#[test]
fn hostile_child_cannot_reach_the_runner_through_proc_or_ptrace() {
    let img = need!(PYTHON_BASE);
    let script = r#"
import ctypes, os
runner = os.getppid()
def attempt(label, f):
    try:
        f()
        print(label, "OPEN")
    except OSError as e:
        print(label, "DENIED", e.errno)
attempt("fd", lambda: os.listdir(f"/proc/{runner}/fd"))
attempt("fd1", lambda: open(f"/proc/{runner}/fd/1", "wb").write(b"forged"))
attempt("mem", lambda: open(f"/proc/{runner}/mem", "rb").read(1))
attempt("environ", lambda: open(f"/proc/{runner}/environ", "rb").read())
attempt("maps", lambda: open(f"/proc/{runner}/maps", "rb").read())
cmdline = open(f"/proc/{runner}/cmdline", "rb").read()
print("cmdline", cmdline.replace(b"\0", b" ").decode())
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.ptrace(16, runner, None, None)  # PTRACE_ATTACH
print("ptrace", rc, ctypes.get_errno())
for k, v in sorted(os.environ.items()):
    print("env", k, v)
"#;
    let run = run_in(img, &py(script), &tree(&[]), &Posture::default());
    let report = run.report();
    let log = run.log();
    assert_eq!(report.exit(), Some(ExitStatus::Code(0)), "{log}");
    for label in ["fd", "fd1", "mem", "environ", "maps"] {
        assert!(log.contains(&format!("{label} DENIED")), "{label}: {log}");
    }
    // The runner's argv holds nothing secret; ptrace fails (seccomp denies it, and the runner
    // is not dumpable).
    assert!(log.contains("cmdline /gate-runner \n"), "{log}");
    assert!(log.contains("ptrace -1 1\n"), "{log}");
    assert!(!log.contains(report.nonce().as_str()));
}

#[test]
fn hostile_child_that_kills_the_runner_leaves_no_report_and_no_container() {
    let img = need!(PYTHON_BASE);
    let req = Req::sh("kill -9 $PPID; sleep 5");
    let run = run_in(img, &req, &tree(&[]), &Posture::default());
    // No report at all: the host's "no valid report" error, never a verdict.
    assert_eq!(
        run.report.as_ref().err().map(String::as_str),
        Some("GATE_WIRE_FRAME_TRUNCATED")
    );
    assert!(run.out.stdout.is_empty());
    let req = Req::sh("kill -STOP $PPID; kill -TERM $PPID; kill -HUP $PPID; exit 0");
    // A stopped runner never reports; the host's own deadline ends the container.
    let posture = Posture {
        host_deadline: Duration::from_secs(15),
        ..Posture::default()
    };
    let run = run_in(img, &req, &tree(&[]), &posture);
    // Stopped or signalled, the runner never reports a pass it did not see: either no report,
    // or the honest one.
    if let Ok(report) = &run.report {
        assert_eq!(report.exit(), Some(ExitStatus::Code(0)));
    }
}

#[test]
fn hostile_double_forked_setsid_survivor_is_swept_before_the_report() {
    let img = need!(PYTHON_BASE);
    // The grandchild leaves the group and the session and writes to the log 0.5 s later; the
    // child exits at once. The sweep kills it first, so ALIVE never reaches the log.
    let script = r#"
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(0.5)
        print("ALIVE", flush=True)
        time.sleep(60)
        os._exit(0)
    os._exit(0)
os.wait()
print("child done", flush=True)
"#;
    let run = run_in(img, &py(script), &tree(&[]), &Posture::default());
    let report = run.report();
    assert_eq!(report.exit(), Some(ExitStatus::Code(0)));
    assert_eq!(run.log(), "child done\n");
    assert!(run.elapsed < Duration::from_secs(20));
}

#[test]
fn the_child_sees_no_network_and_a_read_only_root() {
    let img = need!(PYTHON_BASE);
    let script = r#"
import socket, os
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2); print("net OPEN")
except OSError as e:
    print("net DENIED")
try:
    open("/etc/forged", "w"); print("root OPEN")
except OSError:
    print("root DENIED")
print("uid", os.getuid())
"#;
    let run = run_in(img, &py(script), &tree(&[]), &Posture::default());
    assert_eq!(run.log(), "net DENIED\nroot DENIED\nuid 10001\n");
}
