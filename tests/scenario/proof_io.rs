//! The proof image's stdio contract as the scenarios see it: the payload it reads, the one strict
//! JSON document it prints, and the agent report inside that document's summary.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use turn_runner::TurnOutput;
use turn_runner::agent::AgentReport;

/// A payload in the reference key order.
pub fn payload(task: &str, files: &[(&str, &str)], read_only: &[(&str, &str)]) -> Vec<u8> {
    let map = |pairs: &[(&str, &str)]| {
        Value::Object(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect::<Map<_, _>>(),
        )
    };
    format!(
        "{{\"app_id\":\"app\",\"build_family\":\"app_bundle\",\"build_record_id\":\"build-1\",\"change_class\":\"patch\",\"raw_user_request\":{},\"files\":{},\"read_only_files\":{}}}",
        json!(task),
        map(files),
        map(read_only)
    )
    .into_bytes()
}

/// The standard two-file payload with one read-only inspection file.
pub fn standard(task: &str) -> Vec<u8> {
    payload(
        task,
        &[
            (
                "app/ui/pages/Dashboard.jsx",
                "export default function Dashboard() {}\n",
            ),
            ("app/app.json", "{}\n"),
        ],
        &[("tests/test_dashboard.py", "# inspection only\n")],
    )
}

/// One finished run of a container: exit code, output and wall time.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    /// The strictly parsed output document (exactly one JSON value plus a newline).
    pub fn output(&self) -> TurnOutput {
        assert_eq!(self.code, Some(0), "runner failed: {}", self.stderr);
        assert_eq!(
            self.stdout.iter().filter(|b| **b == b'\n').count(),
            1,
            "one line on stdout"
        );
        vocab::from_slice_strict(&self.stdout, 64 << 20).expect("strict output document")
    }

    pub fn report(&self) -> AgentReport {
        let out = self.output();
        serde_json::from_str(&out.proposal.summary).expect("agent report in summary")
    }
}

/// Decodes the archive and returns its entries as (path, text).
pub fn archive_entries(out: &TurnOutput) -> Vec<(String, String)> {
    let b64 = out
        .workspace_archive_base64
        .as_ref()
        .expect("archive present");
    let zip = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("standard base64");
    if zip == archive::EMPTY_ARCHIVE_MARKER {
        return Vec::new();
    }
    archive::read_archive_entries(&zip, &archive::ArchiveLimits::default())
        .expect("canonical archive")
        .into_iter()
        .map(|(p, bytes)| (p.to_string(), String::from_utf8(bytes).unwrap()))
        .collect()
}

/// The outcomes of the attempts whose action starts with `prefix`.
pub fn outcomes<'a>(report: &'a AgentReport, prefix: &str) -> Vec<&'a str> {
    report
        .attempts
        .iter()
        .filter(|a| a.action.starts_with(prefix))
        .map(|a| a.outcome.as_str())
        .collect()
}
