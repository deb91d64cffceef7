//! The outcome of a run, decided by the host from the report and the container's facts (wire
//! contract, "Host duties"), and the comparison of a candidate run with its baseline run.

use std::collections::BTreeSet;

use crate::evidence::{
    Comparison, ComparisonBasis, GateVerdict, IdList, LogTail, RanCounts, TestCounts,
};
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
/// Code of a run whose JUnit report and exit status say "clean" while a pytest summary line in
/// its own log tail says otherwise (failures or errors, or fewer passed tests than the report
/// lists): the report was rewritten after pytest wrote it.
pub const LOG_CONTRADICTION_CODE: &str = "PATCH_CANDIDATE_GATE_LOG_CONTRADICTION";

/// A classified run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub outcome: GateVerdict,
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
pub(crate) fn classify(facts: &RunFacts, junit_configured: bool) -> Classified {
    let error = |code: &str, exit: Option<ChildExit>, log: LogTail| Classified {
        outcome: GateVerdict::Error,
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
            outcome: GateVerdict::TimedOut,
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
                outcome: GateVerdict::TimedOut,
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
    let done = |outcome: GateVerdict,
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
            GateVerdict::Passed
        } else {
            GateVerdict::Failed
        };
        return done(outcome, None, log);
    }
    match (report.junit(), junit) {
        (Some(ReportJunit::Invalid { code }), _) => error(code.as_str(), Some(exit), log),
        (Some(ReportJunit::Ok { .. }), Some(j)) => {
            let any_failure = !j.1.is_empty();
            match (ok_exit, any_failure) {
                (true, false)
                    if log_contradicts(report.log().tail(), report.log().total_bytes(), &j.0) =>
                {
                    error(LOG_CONTRADICTION_CODE, Some(exit), log)
                }
                (true, false) => done(GateVerdict::Passed, Some(j), log),
                (false, true) => done(GateVerdict::Failed, Some(j), log),
                (true, true) => error("PATCH_CANDIDATE_GATE_CONTRADICTION", Some(exit), log),
                (false, false) => error("PATCH_CANDIDATE_GATE_CONTRADICTION", Some(exit), log),
            }
        }
        _ => error(JUNIT_MISSING_CODE, Some(exit), log),
    }
}

/// What a candidate run is compared with: the baseline run's verdict and, with JUnit cases,
/// its failing and passing ids and how many cases ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaselineFacts {
    pub outcome: GateVerdict,
    pub failing: BTreeSet<String>,
    /// The passing ids (`None`: the baseline evidence carries no list).
    pub passing: Option<BTreeSet<String>>,
    /// Cases that ran (passed, failed or error); `None` without JUnit cases.
    pub ran: Option<u64>,
}

impl BaselineFacts {
    /// The facts of a baseline run's evidence.
    #[must_use]
    pub fn from_evidence(e: &crate::evidence::GateEvidence) -> Self {
        Self {
            outcome: e.outcome,
            failing: e.failing.ids.iter().cloned().collect(),
            passing: e.passing.as_ref().map(|p| p.ids.iter().cloned().collect()),
            ran: e
                .tests
                .map(|t| t.passed.saturating_add(t.failed).saturating_add(t.error)),
        }
    }
}

/// The module prefixes of the Python files a candidate deleted, as JUnit ids spell them
/// (`a/b/test_x.py` → `a.b.test_x`), relative to the tree root and to the gate's `cwd`.
#[must_use]
pub fn deleted_modules(deleted: &[&str], cwd: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for path in deleted {
        let Some(stem) = path.strip_suffix(".py") else {
            continue;
        };
        out.insert(stem.replace('/', "."));
        if cwd != "."
            && let Some(rel) = stem.strip_prefix(cwd).and_then(|r| r.strip_prefix('/'))
        {
            out.insert(rel.replace('/', "."));
        }
    }
    out
}

/// True when test `id` belongs to one of the deleted `modules` (`module::…` or `module.…`).
fn in_deleted(id: &str, modules: &BTreeSet<String>) -> bool {
    let module = id.split("::").next().unwrap_or(id);
    modules.iter().any(|m| {
        module == m
            || module
                .strip_prefix(m.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// Compares a candidate run with its baseline run: by test id when both have JUnit cases, by exit
/// status otherwise. By test id, a baseline-passing test that the candidate's run neither passed
/// nor failed (missing, skipped, deselected) is `vanished` unless it belongs to a file the
/// candidate deleted (`deleted`, from `deleted_modules`); a run that ran fewer than
/// `crate::evidence::MIN_RAN_PER_MILLE` per mille of the baseline's cases (those of deleted
/// files excepted) is `too_few_ran`. Either is a regression.
#[must_use]
pub(crate) fn compare(
    candidate: &Classified,
    baseline: &BaselineFacts,
    deleted: &BTreeSet<String>,
) -> Comparison {
    if let (Some(baseline_ran), Some(tests)) = (baseline.ran, candidate.tests.as_ref()) {
        let baseline_failing = &baseline.failing;
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
        let empty = BTreeSet::new();
        let baseline_passing = baseline.passing.as_ref().unwrap_or(&empty);
        let vanished: BTreeSet<String> = baseline_passing
            .iter()
            .filter(|id| {
                !candidate.passing.contains(*id)
                    && !candidate.failing.contains(*id)
                    && !in_deleted(id, deleted)
            })
            .cloned()
            .collect();
        let deleted_ran = baseline_passing
            .iter()
            .chain(baseline_failing.iter())
            .filter(|id| in_deleted(id, deleted))
            .count() as u64;
        let candidate_ran = tests
            .passed
            .saturating_add(tests.failed)
            .saturating_add(tests.error);
        let expected = baseline_ran.saturating_sub(deleted_ran);
        let too_few_ran = (u128::from(candidate_ran) * 1000
            < u128::from(expected) * u128::from(crate::evidence::MIN_RAN_PER_MILLE))
        .then_some(RanCounts {
            baseline: baseline_ran,
            candidate: candidate_ran,
            deleted: deleted_ran,
        });
        return Comparison {
            by: ComparisonBasis::TestId,
            regression: !new.is_empty() || !vanished.is_empty() || too_few_ran.is_some(),
            new_failures: IdList::from_set(&new),
            fixed: IdList::from_set(&fixed),
            still_failing: IdList::from_set(&still),
            vanished: IdList::from_set(&vanished),
            too_few_ran,
        };
    }
    Comparison {
        by: ComparisonBasis::ExitStatus,
        regression: candidate.outcome == GateVerdict::Failed
            && baseline.outcome == GateVerdict::Passed,
        new_failures: IdList::default(),
        fixed: IdList::default(),
        still_failing: IdList::default(),
        vanished: IdList::default(),
        too_few_ran: None,
    }
}

/// One pytest terminal summary line's counts (`1 failed, 900 passed, 3 skipped in 2.34s`, with
/// or without the `=` rule around it; `no tests ran in 0.01s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PytestSummary {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) errors: u64,
    pub(crate) xpassed: u64,
}

/// Parses one line as a pytest summary line; anything else is `None`.
pub(crate) fn pytest_summary(line: &[u8]) -> Option<PytestSummary> {
    let line = std::str::from_utf8(line).ok()?;
    let line = line
        .trim()
        .trim_start_matches('=')
        .trim_end_matches('=')
        .trim();
    let (counts, time) = line.rsplit_once(" in ")?;
    let seconds = time.split_once(' ').map_or(time, |(s, _)| s);
    let number = seconds.strip_suffix('s')?;
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    if time.len() > seconds.len() && !(time.ends_with(')') && time.contains(" (")) {
        return None;
    }
    let mut s = PytestSummary::default();
    if counts == "no tests ran" {
        return Some(s);
    }
    for item in counts.split(", ") {
        let (n, word) = item.split_once(' ')?;
        if n.is_empty() || n.len() > 19 || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = n.parse().ok()?;
        match word {
            "passed" => s.passed = n,
            "failed" => s.failed = n,
            "error" | "errors" => s.errors = n,
            "xpassed" => s.xpassed = n,
            "skipped" | "deselected" | "xfailed" | "warning" | "warnings" | "rerun" | "reruns" => {}
            _ => return None,
        }
    }
    Some(s)
}

/// The pytest summary lines of a kept log tail. The first line of a tail that does not start at
/// the log's first byte (`cut`) is a fragment, never read.
fn summaries(tail: &[u8], cut: bool) -> impl Iterator<Item = PytestSummary> + '_ {
    tail.split(|&b| b == b'\n')
        .skip(usize::from(cut))
        .filter(|line| line.len() <= 512)
        .filter_map(pytest_summary)
}

/// True when an evidence log tail holds a pytest summary line.
#[must_use]
pub(crate) fn has_pytest_summary(log: &LogTail) -> bool {
    // The evidence tail is escaped, but a summary line is printable ASCII either way.
    summaries(log.tail.as_bytes(), log.total_bytes > log.tail_bytes)
        .next()
        .is_some()
}

/// True when a pytest summary line in the log tail contradicts a clean JUnit report: it counts
/// failures or errors, or fewer passed tests (`passed` + `xpassed`) than the report lists.
fn log_contradicts(tail: &[u8], total_bytes: u64, junit: &TestCounts) -> bool {
    let cut = total_bytes > tail.len() as u64;
    let summary = summaries(tail, cut)
        .any(|s| s.failed > 0 || s.errors > 0 || junit.passed > s.passed.saturating_add(s.xpassed));
    summary
        || tail
            .split(|&b| b == b'\n')
            .skip(usize::from(cut))
            .any(progress_has_failure)
}

/// True when `line` is a pytest progress line (`..F.sE   [ 42%]`, the `-q` and default
/// styles) with an `F` or `E` in it.
pub(crate) fn progress_has_failure(line: &[u8]) -> bool {
    let Ok(line) = std::str::from_utf8(line) else {
        return false;
    };
    let line = line.trim_end();
    let Some((letters, percent)) = line.rsplit_once('[') else {
        return false;
    };
    let percent_ok = percent
        .strip_suffix("%]")
        .map(str::trim_start)
        .is_some_and(|n| !n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit()));
    // The default style starts with the test file's path and a space.
    let letters = letters.trim_end();
    let letters = letters.rsplit_once(' ').map_or(letters, |(_, l)| l);
    percent_ok
        && !letters.is_empty()
        && letters.bytes().all(|b| b".FEsxX".contains(&b))
        && letters.bytes().any(|b| b == b'F' || b == b'E')
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
