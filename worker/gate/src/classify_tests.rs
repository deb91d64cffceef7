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
        container: container::ContainerName::generate(),
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
        (GateOutcome::Error, Some("PATCH_CANDIDATE_GATE_OOM"))
    );
    let c = classify(&facts(no_report(), Some(1), false, false), true);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (GateOutcome::Error, Some("PATCH_CANDIDATE_GATE_REPORT"))
    );
    let c = classify(&facts(no_report(), None, false, true), true);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (GateOutcome::TimedOut, Some(HOST_DEADLINE_CODE))
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
    assert_eq!(c.outcome, GateOutcome::Passed);
    let c = classify(&facts(Ok(report.clone()), Some(0), false, false), true);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (GateOutcome::Error, Some(JUNIT_MISSING_CODE))
    );
    let c = classify(&facts(Ok(report), Some(137), false, false), false);
    assert_eq!(
        (c.outcome, c.code.as_deref()),
        (
            GateOutcome::Error,
            Some("PATCH_CANDIDATE_GATE_CONTAINER_EXIT")
        )
    );
}
