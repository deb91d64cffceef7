//! The gate wire contract v1 as the host writes and reads it: the request frame on the container's
//! stdin and the one report frame on its stdout (`docs/GATES.md`, "Wire contract").
//!
//! These types mirror the in-image runner's; every value is built through a checking constructor
//! or a strict parse, and the report is re-encoded and compared with the bytes received, so only
//! the one canonical spelling is accepted.

use serde::{Deserialize, Serialize};

use crate::error::GateError;

/// Wire contract version.
pub const WIRE_VERSION: u32 = 1;
/// Largest request JSON (the `u32` length prefix is checked against it).
pub const MAX_REQUEST_BYTES: usize = 65_536;
/// Largest report JSON.
pub const MAX_REPORT_BYTES: usize = 1_048_576;

/// The JUnit options of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JunitRequest {
    pub path: String,
    pub max_bytes: u64,
    pub max_cases: u32,
    pub max_depth: u32,
}

/// The declared totals of the tree stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeTotals {
    /// Entries in the tar stream (directories and files).
    pub entries: u64,
    /// Summed file bytes.
    pub bytes: u64,
}

/// The request frame (host → runner). Field order is the wire order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateRequest {
    pub version: u32,
    pub nonce: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub wall_ms: u64,
    pub kill_grace_ms: u64,
    pub log_tail_bytes: u64,
    pub junit: Option<JunitRequest>,
    pub tree: TreeTotals,
}

impl GateRequest {
    /// The framed request: `u32` big-endian length, then the JSON.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_REQUEST` when the JSON exceeds [`MAX_REQUEST_BYTES`].
    pub fn frame(&self) -> Result<Vec<u8>, GateError> {
        let json = serde_json::to_vec(self).map_err(|_| GateError::Request {
            detail: "request does not encode",
        })?;
        let len = u32::try_from(json.len())
            .ok()
            .filter(|n| (1..=MAX_REQUEST_BYTES).contains(&(*n as usize)))
            .ok_or(GateError::Request {
                detail: "request exceeds its frame cap",
            })?;
        let mut out = Vec::with_capacity(json.len().saturating_add(4));
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&json);
        Ok(out)
    }
}

/// How the runner ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportStatus {
    Completed,
    TimedOut,
    RunnerError,
}

/// The child's exit, from the runner's own wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChildExit {
    #[serde(rename = "code")]
    Code(i32),
    #[serde(rename = "signal")]
    Signal(i32),
}

/// The combined stdout/stderr of the child, counted and tailed by the runner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportLog {
    pub total_bytes: u64,
    pub tail_b64: String,
}

/// One JUnit test case outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseOutcome {
    Passed,
    Failed,
    Error,
    Skipped,
}

impl CaseOutcome {
    /// `failed` or `error`.
    #[must_use]
    pub fn is_failure(self) -> bool {
        matches!(self, Self::Failed | Self::Error)
    }
}

/// One JUnit test case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportCase {
    pub id: String,
    pub outcome: CaseOutcome,
}

/// The JUnit part of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case", deny_unknown_fields)]
pub enum ReportJunit {
    Missing,
    Invalid {
        code: String,
    },
    Ok {
        cases: Vec<ReportCase>,
        truncated: bool,
    },
}

/// The report frame (runner → host). Field order is the wire order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateReport {
    pub version: u32,
    pub nonce: String,
    pub status: ReportStatus,
    pub runner_error: Option<String>,
    pub exit: Option<ChildExit>,
    pub wall_ms: u64,
    pub log: ReportLog,
    pub junit: Option<ReportJunit>,
}

/// Longest test id kept from a report.
pub const MAX_CASE_ID_CHARS: usize = 1024;
/// Longest runner error code accepted.
const MAX_CODE_CHARS: usize = 96;

fn stable_code(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= MAX_CODE_CHARS
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Parses the complete stdout of a gate container: exactly one frame, strict canonical JSON, the
/// expected nonce, every cap. Anything else is `None`'s cousin: an error with a stable code.
///
/// # Errors
/// `PATCH_CANDIDATE_GATE_REPORT` naming what is wrong (never quoting the bytes).
pub fn parse_report(
    stdout: &[u8],
    nonce: &str,
    log_tail_bytes: u64,
    max_cases: u32,
) -> Result<GateReport, GateError> {
    let bad = |detail: &'static str| GateError::Report { detail };
    let (len, body) = stdout.split_at_checked(4).ok_or(bad("no frame"))?;
    let len: [u8; 4] = len.try_into().map_err(|_| bad("no frame"))?;
    let len = u32::from_be_bytes(len) as usize;
    if !(1..=MAX_REPORT_BYTES).contains(&len) {
        return Err(bad("frame length out of range"));
    }
    if body.len() != len {
        return Err(bad("not exactly one frame"));
    }
    let report: GateReport =
        snapshot::from_slice_strict(body, MAX_REPORT_BYTES).map_err(|_| bad("not strict JSON"))?;
    // Canonical: the one spelling our encoder gives (field order, no whitespace, escapes).
    let again = serde_json::to_vec(&report).map_err(|_| bad("not canonical"))?;
    if again != body {
        return Err(bad("not canonical"));
    }
    if report.version != WIRE_VERSION {
        return Err(bad("version"));
    }
    if report.nonce != nonce {
        return Err(bad("nonce differs"));
    }
    match (report.status, &report.runner_error) {
        (ReportStatus::RunnerError, Some(code)) if stable_code(code) => {}
        (ReportStatus::Completed | ReportStatus::TimedOut, None) => {}
        _ => return Err(bad("status and runner_error disagree")),
    }
    if report.status == ReportStatus::Completed && report.exit.is_none() {
        return Err(bad("completed without an exit status"));
    }
    let tail_len = base64_decoded_len(&report.log.tail_b64).ok_or(bad("log tail"))?;
    if tail_len > log_tail_bytes || tail_len > report.log.total_bytes {
        return Err(bad("log tail exceeds its cap"));
    }
    match &report.junit {
        Some(ReportJunit::Invalid { code }) if !stable_code(code) => {
            return Err(bad("junit code"));
        }
        Some(ReportJunit::Ok { cases, .. }) => {
            if cases.len() > max_cases as usize {
                return Err(bad("junit case count"));
            }
            if cases
                .iter()
                .any(|c| c.id.is_empty() || c.id.chars().count() > MAX_CASE_ID_CHARS)
            {
                return Err(bad("junit case id"));
            }
        }
        _ => {}
    }
    Ok(report)
}

/// The decoded length of padded standard base64, or `None` when it is not that.
fn base64_decoded_len(text: &str) -> Option<u64> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    u64::try_from(bytes.len()).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    const NONCE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn frame(json: &str) -> Vec<u8> {
        let mut out = u32::try_from(json.len()).unwrap().to_be_bytes().to_vec();
        out.extend_from_slice(json.as_bytes());
        out
    }

    fn good() -> String {
        format!(
            r#"{{"version":1,"nonce":"{NONCE}","status":"completed","runner_error":null,"exit":{{"code":1}},"wall_ms":5,"log":{{"total_bytes":3,"tail_b64":"YWJj"}},"junit":{{"state":"ok","cases":[{{"id":"t::a","outcome":"failed"}}],"truncated":false}}}}"#
        )
    }

    #[test]
    fn accepts_the_canonical_report() {
        let r = parse_report(&frame(&good()), NONCE, 64, 10).unwrap();
        assert_eq!(r.exit, Some(ChildExit::Code(1)));
        assert!(matches!(r.junit, Some(ReportJunit::Ok { .. })));
    }

    #[test]
    fn refuses_every_deviation() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "no frame"),
            (
                [frame(&good()), frame(&good())].concat(),
                "not exactly one frame",
            ),
            (
                frame(&good().replace(NONCE, &"f".repeat(64))),
                "nonce differs",
            ),
            (
                frame(&good().replace(",\"wall_ms\"", ", \"wall_ms\"")),
                "not canonical",
            ),
            (
                frame(&good().replace("\"wall_ms\":5", "\"wall_ms\":5,\"x\":1")),
                "not strict JSON",
            ),
            (
                frame(&good().replace("YWJj", "YWJjZGVm")),
                "log tail exceeds its cap",
            ),
            (
                frame(&good().replace("\"runner_error\":null", "\"runner_error\":\"X\"")),
                "status and runner_error disagree",
            ),
        ];
        for (bytes, want) in cases {
            let e = parse_report(&bytes, NONCE, 3, 10).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_GATE_REPORT");
            assert!(e.to_string().contains(want), "{e} / {want}");
        }
        let e = parse_report(&frame(&good()), NONCE, 64, 0).unwrap_err();
        assert!(e.to_string().contains("junit case count"));
    }

    #[test]
    fn request_frame_is_length_prefixed() {
        let req = GateRequest {
            version: 1,
            nonce: NONCE.to_owned(),
            argv: vec!["true".to_owned()],
            cwd: ".".to_owned(),
            env: vec![("HOME".to_owned(), "/tmp/home".to_owned())],
            wall_ms: 1000,
            kill_grace_ms: 100,
            log_tail_bytes: 10,
            junit: None,
            tree: TreeTotals {
                entries: 1,
                bytes: 2,
            },
        };
        let f = req.frame().unwrap();
        let len = u32::from_be_bytes(f[..4].try_into().unwrap()) as usize;
        assert_eq!(len, f.len() - 4);
        let json = std::str::from_utf8(&f[4..]).unwrap();
        assert!(json.starts_with(r#"{"version":1,"nonce":""#));
        assert!(json.contains(r#""env":[["HOME","/tmp/home"]]"#));
        assert!(json.ends_with(r#""junit":null,"tree":{"entries":1,"bytes":2}}"#));
    }
}
