//! Integration tests of the gate runner binary, run directly on the host as a child process
//! (`--root` names a temporary extraction directory), and in Docker containers with the hardened
//! flags (the `docker` module).
// Test helpers outside `#[test]` functions: failing loudly is their job.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod docker;
mod support;

use std::time::{Duration, Instant};

use gate_runner::{CaseOutcome, ExitStatus, JunitReport, RunStatus};
use pretty_assertions::assert_eq;
use support::{Req, junit_outcomes, run_host, tree};

#[test]
fn runs_the_command_in_the_tree_and_reports_exit_and_log() {
    let t = tree(&[("pkg/", None), ("pkg/data.txt", Some(b"hello tree\n"))]);
    let req = Req::sh("cat data.txt; echo to-stderr >&2; exit 3").cwd("pkg");
    let (report, out) = run_host(&req, &t);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(report.status(), RunStatus::Completed);
    assert_eq!(report.exit(), Some(ExitStatus::Code(3)));
    assert_eq!(report.log().tail(), b"hello tree\nto-stderr\n");
    assert_eq!(report.log().total_bytes(), 21);
    assert_eq!(report.junit(), None);
    assert_eq!(report.nonce(), req.nonce());
}

#[test]
fn the_child_gets_exactly_the_given_env_devnull_stdin_and_no_extra_descriptors() {
    let t = tree(&[]);
    let req = Req::sh(
        "env | sort; readlink /proc/self/fd/0; ls /proc/self/fd | tr '\\n' ' '; \
         tr '\\0' ' ' < /proc/$$/cmdline",
    )
    .env(&[("PATH", "/usr/bin:/bin"), ("GATE_X", "1")]);
    let (report, _) = run_host(&req, &t);
    let log = String::from_utf8(report.log().tail().to_vec()).unwrap();
    let mut lines = log.lines();
    // `env` itself sets nothing: only the two given variables and the shell's own PWD/SHLVL/_.
    let env: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with('/')).collect();
    assert!(env.contains(&"GATE_X=1"), "{env:?}");
    assert!(env.contains(&"PATH=/usr/bin:/bin"), "{env:?}");
    assert!(
        env.iter()
            .all(|l| ["GATE_X=", "PATH=", "PWD=", "SHLVL=", "_="]
                .iter()
                .any(|p| l.starts_with(p))),
        "{env:?}"
    );
    // stdin is /dev/null; 0, 1, 2 and the descriptor `ls` opened to list the directory:
    // nothing inherited; the shell's argv is the request's.
    assert!(log.contains("\n/dev/null\n0 1 2 3 sh -c env"), "{log}");
    assert!(!log.contains(req.nonce().as_str()));
}

#[test]
fn a_junit_file_the_child_writes_is_read_strictly() {
    let t = tree(&[("out/", None)]);
    let xml = r#"<testsuites><testsuite><testcase classname="t" name="ok"/><testcase classname="t" name="bad"><failure/></testcase></testsuite></testsuites>"#;
    let req = Req::sh(&format!(
        "printf '%s' '{xml}' > out/junit.xml; echo PASSED; exit 1"
    ))
    .junit("out/junit.xml");
    let (report, _) = run_host(&req, &t);
    assert_eq!(report.exit(), Some(ExitStatus::Code(1)));
    assert_eq!(
        junit_outcomes(&report),
        vec![
            ("t::ok", CaseOutcome::Passed),
            ("t::bad", CaseOutcome::Failed)
        ]
    );
    // A missing file is reported as missing, not as a clean run.
    let (report, _) = run_host(&Req::sh("true").junit("out/none.xml"), &t);
    assert_eq!(report.junit(), Some(&JunitReport::Missing));
    // An entity bomb is refused with its code.
    let bomb =
        r#"<!DOCTYPE x [<!ENTITY a "aaaa">]><testsuites><testcase name="&a;"/></testsuites>"#;
    let (report, _) = run_host(
        &Req::sh(&format!("printf '%s' '{bomb}' > out/j.xml")).junit("out/j.xml"),
        &t,
    );
    assert_eq!(
        report.junit(),
        Some(&JunitReport::Invalid {
            code: "GATE_JUNIT_DOCTYPE".parse().unwrap()
        })
    );
}

#[test]
fn the_deadline_terms_then_kills_the_group() {
    let t = tree(&[]);
    let started = Instant::now();
    let (report, _) = run_host(&Req::sh("sleep 30").wall(300), &t);
    assert_eq!(report.status(), RunStatus::TimedOut);
    assert_eq!(report.exit(), Some(ExitStatus::Signal(15)));
    assert!(started.elapsed() < Duration::from_secs(10));
    // A child that ignores SIGTERM is killed after the grace.
    let (report, _) = run_host(
        &Req::sh("trap '' TERM; while :; do sleep 1; done")
            .wall(300)
            .grace(200),
        &t,
    );
    assert_eq!(report.status(), RunStatus::TimedOut);
    assert_eq!(report.exit(), Some(ExitStatus::Signal(9)));
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn no_descendant_survives_the_report_not_even_a_double_forked_setsid_one() {
    let t = tree(&[]);
    let req =
        Req::sh("setsid sh -c 'sleep 300 & echo $! > bg.pid; sleep 300' & sleep 0.3; cat bg.pid");
    let (report, out) = run_host(&req, &t);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(report.status(), RunStatus::Completed);
    let pid: u32 = String::from_utf8(report.log().tail().to_vec())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The runner exited only after killing and reaping it.
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} survived"
    );
}

#[test]
fn a_log_flood_is_counted_whole_and_only_its_tail_kept() {
    let t = tree(&[]);
    let req = Req::sh("head -c 50000000 /dev/zero; printf END").tail(1000);
    let (report, _) = run_host(&req, &t);
    assert_eq!(report.log().total_bytes(), 50_000_003);
    assert_eq!(report.log().tail().len(), 1000);
    assert!(report.log().tail().ends_with(b"\0END"));
}

#[test]
fn a_bad_tree_is_a_runner_error_report_and_the_command_never_runs() {
    let mut t = tree(&[("a.txt", Some(b"x"))]);
    // Declares one entry, sends one, but the declared byte count differs.
    let req = Req::sh("touch ran").totals(1, 2);
    let (report, out) = run_host(&req, &t);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(report.status(), RunStatus::RunnerError);
    assert_eq!(report.runner_error().unwrap().as_str(), "GATE_RUNNER_TREE");
    assert_eq!(report.exit(), None);
    // A symlink entry.
    t = support::tree_with_symlink();
    let (report, _) = run_host(&Req::sh("true").totals(1, 0), &t);
    assert_eq!(report.runner_error().unwrap().as_str(), "GATE_RUNNER_TREE");
}

#[test]
fn a_missing_program_or_cwd_is_a_runner_error() {
    let t = tree(&[]);
    let (report, _) = run_host(&Req::argv(&["/no/such/program"]), &t);
    assert_eq!(report.runner_error().unwrap().as_str(), "GATE_RUNNER_SPAWN");
    let (report, _) = run_host(&Req::sh("true").cwd("nodir"), &t);
    assert_eq!(report.runner_error().unwrap().as_str(), "GATE_RUNNER_CWD");
}

#[test]
fn without_a_valid_request_nothing_is_written_to_stdout() {
    for input in [&b""[..], b"\0\0\0\0", b"\0\0\0\x02{}", b"\xff\xff\xff\xff"] {
        let out = support::run_raw(input, &["--root", "/nonexistent"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains("GATE_WIRE_"));
    }
    let out = support::run_raw(b"", &["--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}
