#![allow(clippy::unwrap_used)]

use super::*;
use crate::error::GateError;

fn facts(
    report: Result<GateReport, GateError>,
    exit: Option<i64>,
    oom: bool,
    host_timed_out: bool,
) -> RunFacts {
    RunFacts {
        report,
        container_exit: exit,
        oom_killed: oom,
        host_timed_out,
        wall_ms: 3,
    }
}

#[test]
fn environment_and_deadline_facts_decide_without_a_report() {
    let no_report = || {
        Err(GateError::Report {
            detail: "no complete frame",
        })
    };
    let c = classify(&facts(no_report(), Some(137), true, false), true);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (GateVerdict::Error, Some("PATCH_CANDIDATE_GATE_OOM"))
    );
    let c = classify(&facts(no_report(), Some(1), false, false), true);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (GateVerdict::Error, Some("PATCH_CANDIDATE_GATE_REPORT"))
    );
    let c = classify(&facts(no_report(), None, false, true), true);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (GateVerdict::TimedOut, Some(HOST_DEADLINE_CODE))
    );
}

#[test]
fn a_report_from_a_container_that_did_not_exit_cleanly_is_an_error() {
    let nonce = gate_runner::Nonce::from_bytes([1; 32]);
    let report = GateReport::new(
        nonce,
        ReportStatus::Completed,
        None,
        Some(ChildExit::Code(0)),
        1,
        gate_runner::LogTail::new(0, Vec::new()).unwrap(),
        None,
    )
    .unwrap();
    let c = classify(&facts(Ok(report.clone()), Some(0), false, false), false);
    assert_eq!(c.outcome, GateVerdict::Passed);
    let c = classify(&facts(Ok(report.clone()), Some(0), false, false), true);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (GateVerdict::Error, Some(JUNIT_MISSING_CODE))
    );
    let c = classify(&facts(Ok(report), Some(137), false, false), false);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (
            GateVerdict::Error,
            Some("PATCH_CANDIDATE_GATE_CONTAINER_EXIT")
        )
    );
}

fn junit_report(exit: i32, log: &[u8], total: u64, cases: &[(&str, CaseOutcome)]) -> GateReport {
    GateReport::new(
        gate_runner::Nonce::from_bytes([1; 32]),
        ReportStatus::Completed,
        None,
        Some(ChildExit::Code(exit)),
        1,
        gate_runner::LogTail::new(total, log.to_vec()).unwrap(),
        Some(ReportJunit::Ok {
            cases: cases
                .iter()
                .map(|(id, o)| gate_runner::JunitCase {
                    id: gate_runner::CaseId::try_from((*id).to_owned()).unwrap(),
                    outcome: *o,
                })
                .collect(),
            truncated: false,
        }),
    )
    .unwrap()
}

#[test]
fn pytest_progress_lines_with_failures() {
    for yes in [
        "..F.                                  [ 42%]",
        "tests/test_more.py ....E..            [100%]",
        "F [  1%]",
    ] {
        assert!(progress_has_failure(yes.as_bytes()), "{yes}");
    }
    for no in [
        "....s.x                               [ 42%]",
        "FAILED tests/test_a.py::t - x [100%]",
        "..F..",
        "..F [abc%]",
        "",
    ] {
        assert!(!progress_has_failure(no.as_bytes()), "{no}");
    }
}

#[test]
fn pytest_summary_lines_parse_and_other_lines_do_not() {
    let s = |l: &str| pytest_summary(l.as_bytes());
    assert_eq!(
        s("1 failed, 900 passed, 3 skipped, 2 warnings in 2.34s"),
        Some(PytestSummary {
            passed: 900,
            failed: 1,
            errors: 0,
            xpassed: 0
        })
    );
    assert_eq!(
        s("===== 2 passed, 1 xpassed, 1 error in 0.12s (0:00:00) ====="),
        Some(PytestSummary {
            passed: 2,
            failed: 0,
            errors: 1,
            xpassed: 1
        })
    );
    assert_eq!(s("no tests ran in 0.01s"), Some(PytestSummary::default()));
    for other in [
        "",
        "tests/test_more.py ........",
        "2 passed in a hurry",
        "2 passed, 3 exploded in 1.0s",
        "passed in 1.0s",
        "-1 passed in 1.0s",
        "2 passed in 1.0s trailing",
    ] {
        assert_eq!(s(other), None, "{other}");
    }
}

/// The `atexit` forger: pytest printed its own summary, then the report was rewritten to all
/// passed and the process exited 0. The report and the exit status agree; the log does not.
#[test]
fn a_clean_report_that_the_logs_pytest_summary_contradicts_is_an_error() {
    let cases = [
        ("t::a", CaseOutcome::Passed),
        ("t::b", CaseOutcome::Passed),
        ("t::c", CaseOutcome::Passed),
    ];
    let run = |log: &[u8], total: u64| {
        let report = junit_report(0, log, total, &cases);
        classify(&facts(Ok(report), Some(0), false, false), true)
    };
    // Honest: the summary agrees.
    let honest = b"...                                  [100%]\n3 passed in 0.05s\n";
    let c = run(honest, honest.len() as u64);
    assert_eq!((c.outcome, c.code), (GateVerdict::Passed, None));
    // pytest said one failed.
    let failed = b"..F\nFAILED t::c - assert 1 == 2\n1 failed, 2 passed in 0.05s\n";
    let c = run(failed, failed.len() as u64);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (GateVerdict::Error, Some(LOG_CONTRADICTION_CODE))
    );
    // pytest ran fewer tests than the report lists (every module skipped, report forged).
    let skipped = b"sss\n3 skipped in 0.01s\n";
    let c = run(skipped, skipped.len() as u64);
    assert_eq!(c.code.as_deref(), Some(LOG_CONTRADICTION_CODE));
    // pytest's progress line shows a failure even when its summary was silenced.
    let progress = b"..F                                      [100%]\n3 passed in 0.05s\n";
    let c = run(progress, progress.len() as u64);
    assert_eq!(c.code.as_deref(), Some(LOG_CONTRADICTION_CODE));
    // A forged summary printed after pytest's own does not hide it.
    let both = b"1 failed, 2 passed in 0.05s\n3 passed in 0.05s\n";
    let c = run(both, both.len() as u64);
    assert_eq!(c.code.as_deref(), Some(LOG_CONTRADICTION_CODE));
    // The cut first line of a kept tail is never read ("…00 passed" could read as "0 passed").
    let cut = b"0 passed in 0.05s\n3 passed in 0.05s\n";
    let c = run(cut, 10_000);
    assert_eq!(c.outcome, GateVerdict::Passed);
    let c = run(cut, cut.len() as u64);
    assert_eq!(c.code.as_deref(), Some(LOG_CONTRADICTION_CODE));
}

fn classified(passing: &[&str], failing: &[&str], counts: TestCounts) -> Classified {
    Classified {
        outcome: if failing.is_empty() {
            GateVerdict::Passed
        } else {
            GateVerdict::Failed
        },
        code: None,
        exit: Some(ChildExit::Code(i32::from(!failing.is_empty()))),
        wall_ms: 1,
        tests: Some(counts),
        failing: failing.iter().map(|s| (*s).to_owned()).collect(),
        passing: passing.iter().map(|s| (*s).to_owned()).collect(),
        log: LogTail::empty(),
    }
}

#[test]
fn vanished_tests_and_deleted_modules() {
    let set = |ids: &[&str]| ids.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    let baseline = BaselineFacts {
        outcome: GateVerdict::Failed,
        failing: set(&["t::old"]),
        passing: Some(set(&[
            "t::a",
            "t::b",
            "pkg.test_x::test_1",
            "pkg.test_x.Case::test_2",
            "pkg.test_xy::test_3",
        ])),
        ran: Some(6),
    };
    let counts = |ran: u64| TestCounts {
        total: ran,
        passed: ran,
        ..TestCounts::default()
    };
    // pkg/test_x.py deleted: its ids (functions and classes) are exempt, test_xy's are not.
    let deleted = deleted_modules(&["pkg/test_x.py", "README.md"], ".");
    assert_eq!(deleted, set(&["pkg.test_x"]));
    let cand = classified(&["t::a", "t::b", "t::old"], &[], counts(3));
    let c = compare(&cand, &baseline, &deleted);
    assert_eq!(c.vanished.ids, vec!["pkg.test_xy::test_3".to_owned()]);
    assert_eq!(c.fixed.ids, vec!["t::old".to_owned()]);
    assert!(c.regression);
    // 3 ran of 6 - 2 deleted = 4 expected: below 90 %.
    assert_eq!(
        c.too_few_ran,
        Some(RanCounts {
            baseline: 6,
            candidate: 3,
            deleted: 2
        })
    );
    // Relative to the gate's cwd too.
    assert_eq!(
        deleted_modules(&["sub/pkg/test_x.py"], "sub"),
        set(&["sub.pkg.test_x", "pkg.test_x"])
    );
    // A test that now fails is a new failure, not vanished; everything present: no regression.
    let cand = classified(
        &[
            "t::a",
            "pkg.test_x::test_1",
            "pkg.test_x.Case::test_2",
            "pkg.test_xy::test_3",
        ],
        &["t::b"],
        counts(6),
    );
    let c = compare(&cand, &baseline, &BTreeSet::new());
    assert!(c.vanished.is_empty() && c.too_few_ran.is_none());
    assert_eq!(c.new_failures.ids, vec!["t::b".to_owned()]);
    let cand = classified(
        &[
            "t::a",
            "t::b",
            "pkg.test_x::test_1",
            "pkg.test_x.Case::test_2",
            "pkg.test_xy::test_3",
        ],
        &["t::old"],
        counts(6),
    );
    let c = compare(&cand, &baseline, &BTreeSet::new());
    assert!(!c.regression, "{c:?}");
    // Without JUnit on either side: by exit status, nothing vanishes.
    let no_junit = BaselineFacts {
        ran: None,
        ..baseline
    };
    let c = compare(&cand, &no_junit, &BTreeSet::new());
    assert_eq!(c.by, ComparisonBasis::ExitStatus);
    assert!(c.vanished.is_empty());
}
