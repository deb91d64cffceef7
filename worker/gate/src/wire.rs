//! The gate wire contract v1, host side: the types are the `gate-runner` crate's (defined once,
//! shared with the in-image runner); this module builds the request from a gate definition and
//! reads the report with the host's extra checks (the nonce, the request's own caps).

use gate_runner::{
    Argv, Env, GateReport, GateRequest, JunitReport, JunitSpec, Nonce, RelPath, RunLimits,
    TreeTotals,
};

use crate::definition::GateDefinition;
use crate::error::GateError;
use crate::evidence::TreeFacts;

fn request_error(_: gate_runner::GateRunnerError) -> GateError {
    GateError::Request {
        detail: "the gate definition does not fit the wire contract",
    }
}

/// The framed request for `def` over a tree with `totals`.
///
/// # Errors
/// `PATCH_CANDIDATE_GATE_REQUEST` when a value does not fit the wire contract's caps.
pub(crate) fn request_frame(
    def: &GateDefinition,
    totals: TreeFacts,
    nonce: &Nonce,
) -> Result<Vec<u8>, GateError> {
    let argv = Argv::try_from(def.argv().to_vec()).map_err(request_error)?;
    let cwd = if def.cwd() == "." {
        RelPath::root()
    } else {
        def.cwd().parse().map_err(request_error)?
    };
    let env = Env::try_from(
        def.env()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>(),
    )
    .map_err(request_error)?;
    let limits = RunLimits::new(def.wall_ms(), def.kill_grace_ms(), def.log_tail_bytes())
        .map_err(request_error)?;
    let junit = def
        .junit()
        .map(|j| {
            let path: RelPath = j.path.parse().map_err(request_error)?;
            JunitSpec::new(
                path,
                j.max_bytes,
                u64::from(j.max_cases),
                u64::from(j.max_depth),
            )
            .map_err(request_error)
        })
        .transpose()?;
    let tree = TreeTotals::new(totals.entries, totals.bytes).map_err(request_error)?;
    let request = GateRequest::new(nonce.clone(), argv, cwd, env, limits, junit, tree)
        .map_err(request_error)?;
    let mut out = Vec::new();
    request.write_frame(&mut out).map_err(request_error)?;
    Ok(out)
}

/// Parses the complete stdout of a gate container: exactly one frame of canonical strict JSON
/// (the runner crate's parser), then the host's checks: the nonce of this run, the log tail and
/// case count within what this request allowed.
///
/// # Errors
/// `PATCH_CANDIDATE_GATE_REPORT` naming what is wrong (never quoting the bytes).
pub(crate) fn parse_report(
    stdout: &[u8],
    nonce: &Nonce,
    log_tail_bytes: u64,
    max_cases: u32,
) -> Result<GateReport, GateError> {
    let bad = |detail: &'static str| GateError::Report { detail };
    let report = GateReport::read_stream(stdout).map_err(|e| match e.code() {
        "GATE_WIRE_NOT_CANONICAL" => bad("not canonical"),
        "GATE_WIRE_TRAILING_DATA" => bad("not exactly one frame"),
        "GATE_WIRE_FRAME_LENGTH" | "GATE_WIRE_FRAME_TRUNCATED" | "GATE_RUNNER_IO" => {
            bad("no complete frame")
        }
        _ => bad("not a strict report"),
    })?;
    if report.nonce() != nonce {
        return Err(bad("nonce differs"));
    }
    if report.log().tail().len() as u64 > log_tail_bytes {
        return Err(bad("log tail exceeds its cap"));
    }
    if let Some(JunitReport::Ok { cases, .. }) = report.junit()
        && cases.len() as u64 > u64::from(max_cases)
    {
        return Err(bad("junit case count exceeds its cap"));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use gate_runner::{CaseId, CaseOutcome, ExitStatus, JunitCase, LogTail, RunStatus};

    use super::*;

    fn report(nonce: &Nonce, tail: &[u8], cases: usize) -> GateReport {
        let cases = (0..cases)
            .map(|i| JunitCase {
                id: CaseId::try_from(format!("t::c{i}")).unwrap(),
                outcome: CaseOutcome::Failed,
            })
            .collect();
        GateReport::new(
            nonce.clone(),
            RunStatus::Completed,
            None,
            Some(ExitStatus::Code(1)),
            5,
            LogTail::new(tail.len() as u64, tail.to_vec()).unwrap(),
            Some(JunitReport::Ok {
                cases,
                truncated: false,
            }),
        )
        .unwrap()
    }

    fn frame(r: &GateReport) -> Vec<u8> {
        let mut out = Vec::new();
        r.write_frame(&mut out).unwrap();
        out
    }

    #[test]
    fn accepts_the_canonical_report_of_this_run() {
        let nonce = Nonce::from_bytes([7; 32]);
        let r = parse_report(&frame(&report(&nonce, b"abc", 1)), &nonce, 64, 10).unwrap();
        assert_eq!(r.exit(), Some(ExitStatus::Code(1)));
    }

    #[test]
    fn refuses_every_deviation() {
        let nonce = Nonce::from_bytes([7; 32]);
        let other = Nonce::from_bytes([8; 32]);
        let good = frame(&report(&nonce, b"abc", 1));
        let mut spaced = good.clone();
        let json = String::from_utf8(spaced[4..].to_vec()).unwrap().replacen(
            ",\"wall_ms\"",
            ", \"wall_ms\"",
            1,
        );
        spaced.truncate(0);
        spaced.extend_from_slice(&u32::try_from(json.len()).unwrap().to_be_bytes());
        spaced.extend_from_slice(json.as_bytes());
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "no complete frame"),
            (good[..good.len() - 1].to_vec(), "no complete frame"),
            (
                [good.clone(), good.clone()].concat(),
                "not exactly one frame",
            ),
            (frame(&report(&other, b"abc", 1)), "nonce differs"),
            (spaced, "not canonical"),
            (
                frame(&report(&nonce, b"abcdef", 1)),
                "log tail exceeds its cap",
            ),
            (
                frame(&report(&nonce, b"abc", 11)),
                "junit case count exceeds its cap",
            ),
        ];
        for (bytes, want) in cases {
            let e = parse_report(&bytes, &nonce, 3, 10).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_GATE_REPORT");
            assert!(e.to_string().contains(want), "{e} / {want}");
        }
    }
}
