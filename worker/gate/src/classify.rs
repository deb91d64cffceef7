//! The outcome of a run, decided by the host from the report and the container's facts (wire
//! contract, "Host duties"), and the comparison of a candidate run with its baseline run.

use std::collections::BTreeSet;

use crate::evidence::{Comparison, ComparisonBasis, GateOutcome, IdList, LogTail, TestCounts};
use crate::run::RunFacts;
use gate_runner::{
    CaseOutcome, ExitStatus as ChildExit, GateReport, JunitReport as ReportJunit,
    RunStatus as ReportStatus,
};

/// Code of a run the host's deadline ended.
pub const HOST_DEADLINE_CODE: &str = "PATCH_CANDIDATE_GATE_HOST_DEADLINE";
/// Code of a run the runner's deadline ended.
pub const TIMED_OUT_CODE: &str = "PATCH_CANDIDATE_GATE_TIMED_OUT";
/// Code of a configured JUnit file that is missing.
pub const JUNIT_MISSING_CODE: &str = "PATCH_CANDIDATE_GATE_JUNIT_MISSING";
/// Code of a pinned-path refusal.
pub const POLICY_CODE: &str = "PATCH_CANDIDATE_GATE_PINNED_PATH";

/// A classified run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub outcome: GateOutcome,
    pub code: Option<String>,
    pub exit: Option<ChildExit>,
    pub wall_ms: u64,
    pub tests: Option<TestCounts>,
    pub failing: BTreeSet<String>,
    pub passing: BTreeSet<String>,
    pub log: LogTail,
}

fn counts(report: &GateReport) -> Option<(TestCounts, BTreeSet<String>, BTreeSet<String>)> {
    let Some(ReportJunit::Ok { cases, truncated }) = report.junit() else {
        return None;
    };
    let mut c = TestCounts {
        truncated: *truncated,
        ..TestCounts::default()
    };
    let mut failing = BTreeSet::new();
    let mut passing = BTreeSet::new();
    for case in cases {
        c.total = c.total.saturating_add(1);
        use CaseOutcome as O;
        match case.outcome {
            O::Passed => {
                c.passed = c.passed.saturating_add(1);
                passing.insert(case.id.as_str().to_owned());
            }
            O::Failed => c.failed = c.failed.saturating_add(1),
            O::Error => c.error = c.error.saturating_add(1),
            O::Skipped => c.skipped = c.skipped.saturating_add(1),
        }
        if matches!(case.outcome, O::Failed | O::Error) {
            failing.insert(case.id.as_str().to_owned());
        }
    }
    // A test id both passing and failing (duplicated ids) counts as failing.
    passing.retain(|id| !failing.contains(id));
    Some((c, failing, passing))
}

/// Decides the outcome of one run.
#[must_use]
pub fn classify(facts: &RunFacts, junit_configured: bool) -> Classified {
    let error = |code: &str, exit: Option<ChildExit>, log: LogTail| Classified {
        outcome: GateOutcome::Error,
        code: Some(code.to_owned()),
        exit,
        wall_ms: facts.wall_ms,
        tests: None,
        failing: BTreeSet::new(),
        passing: BTreeSet::new(),
        log,
    };
    if facts.host_timed_out {
        return Classified {
            outcome: GateOutcome::TimedOut,
            code: Some(HOST_DEADLINE_CODE.to_owned()),
            ..error("", None, LogTail::empty())
        };
    }
    let report = match &facts.report {
        Ok(r) => r,
        Err(e) => {
            let code = if facts.oom_killed {
                crate::error::GateError::OutOfMemory.code()
            } else {
                e.code()
            };
            return error(code, None, LogTail::empty());
        }
    };
    let log = LogTail::new(report.log().total_bytes(), report.log().tail());
    if facts.container_exit != Some(0) {
        let code = if facts.oom_killed {
            crate::error::GateError::OutOfMemory.code()
        } else {
            "PATCH_CANDIDATE_GATE_CONTAINER_EXIT"
        };
        return error(code, report.exit(), log);
    }
    match report.status() {
        ReportStatus::RunnerError => {
            let code = report
                .runner_error()
                .map_or("PATCH_CANDIDATE_GATE_RUNNER", |c| c.as_str());
            return error(code, report.exit(), log);
        }
        ReportStatus::TimedOut => {
            return Classified {
                outcome: GateOutcome::TimedOut,
                code: Some(TIMED_OUT_CODE.to_owned()),
                wall_ms: report.wall_ms(),
                ..error("", report.exit(), log)
            };
        }
        ReportStatus::Completed => {}
    }
    let Some(exit) = report.exit() else {
        return error("PATCH_CANDIDATE_GATE_REPORT", None, log);
    };
    let ok_exit = exit == ChildExit::Code(0);
    let junit = counts(report);
    let done = |outcome: GateOutcome,
                junit: Option<(TestCounts, BTreeSet<String>, BTreeSet<String>)>,
                log: LogTail| {
        let (tests, failing, passing) = match junit {
            Some((c, f, p)) => (Some(c), f, p),
            None => (None, BTreeSet::new(), BTreeSet::new()),
        };
        Classified {
            outcome,
            code: None,
            exit: Some(exit),
            wall_ms: report.wall_ms(),
            tests,
            failing,
            passing,
            log,
        }
    };
    if !junit_configured {
        let outcome = if ok_exit {
            GateOutcome::Passed
        } else {
            GateOutcome::Failed
        };
        return done(outcome, None, log);
    }
    match (report.junit(), junit) {
        (Some(ReportJunit::Invalid { code }), _) => error(code.as_str(), Some(exit), log),
        (Some(ReportJunit::Ok { .. }), Some(j)) => {
            let any_failure = !j.1.is_empty();
            match (ok_exit, any_failure) {
                (true, false) => done(GateOutcome::Passed, Some(j), log),
                (false, true) => done(GateOutcome::Failed, Some(j), log),
                (true, true) => error("PATCH_CANDIDATE_GATE_CONTRADICTION", Some(exit), log),
                (false, false) => error("PATCH_CANDIDATE_GATE_CONTRADICTION", Some(exit), log),
            }
        }
        _ => error(JUNIT_MISSING_CODE, Some(exit), log),
    }
}

/// Compares a candidate run with its baseline run: by test id when both have JUnit cases, by exit
/// status otherwise.
#[must_use]
pub fn compare(
    candidate: &Classified,
    baseline_failing: &BTreeSet<String>,
    baseline_outcome: GateOutcome,
    by_test_id: bool,
) -> Comparison {
    if by_test_id && candidate.tests.is_some() {
        let new: BTreeSet<String> = candidate
            .failing
            .difference(baseline_failing)
            .cloned()
            .collect();
        let still: BTreeSet<String> = candidate
            .failing
            .intersection(baseline_failing)
            .cloned()
            .collect();
        let fixed: BTreeSet<String> = baseline_failing
            .iter()
            .filter(|id| candidate.passing.contains(*id))
            .cloned()
            .collect();
        return Comparison {
            by: ComparisonBasis::TestId,
            regression: !new.is_empty(),
            new_failures: IdList::from_set(&new),
            fixed: IdList::from_set(&fixed),
            still_failing: IdList::from_set(&still),
        };
    }
    Comparison {
        by: ComparisonBasis::ExitStatus,
        regression: candidate.outcome == GateOutcome::Failed
            && baseline_outcome == GateOutcome::Passed,
        new_failures: IdList::default(),
        fixed: IdList::default(),
        still_failing: IdList::default(),
    }
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
