//! Test support shared by this crate's host tests and the workspace scenario suite: the turn
//! payload in the reference key order, a finished run and the decoding of its output. Compiled for
//! this crate's tests and, with the `testkit` feature, for the tests of the crates above it; never
//! enabled by a binary.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::Write as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::TurnOutput;
use crate::agent::AgentReport;

/// `pairs` as a JSON object of strings, in the given order.
#[must_use]
pub fn text_map(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect::<Map<_, _>>(),
    )
}

/// A payload in the reference key order; `grants` adds `create_paths` and `delete_paths`.
#[must_use]
pub fn payload(
    task: &str,
    files: &[(&str, &str)],
    read_only: &[(&str, &str)],
    grants: Option<(&[&str], &[&str])>,
) -> Vec<u8> {
    let mut text = format!(
        "{{\"app_id\":\"app\",\"build_family\":\"app_bundle\",\"build_record_id\":\"build-1\",\"change_class\":\"patch\",\"raw_user_request\":{},\"files\":{},\"read_only_files\":{}",
        json!(task),
        text_map(files),
        text_map(read_only)
    );
    if let Some((creates, deletes)) = grants {
        text.push_str(&format!(
            ",\"create_paths\":{},\"delete_paths\":{}",
            json!(creates),
            json!(deletes)
        ));
    }
    text.push('}');
    text.into_bytes()
}

/// The standard two-file payload with one read-only inspection file.
#[must_use]
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
        None,
    )
}

/// Spawns `cmd` with stdin, stdout and stderr piped: the child, and its stdin taken from it.
pub fn spawn_piped(cmd: &mut Command) -> (Child, ChildStdin) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdin = child.stdin.take().expect("piped stdin");
    (child, stdin)
}

/// Spawns `cmd` piped (see [`spawn_piped`]) and writes `stdin` to it from a thread of its own,
/// so that a child that never reads cannot block the caller: the child and that writer (which
/// ignores a write error: the child may exit without reading).
pub fn spawn_fed(cmd: &mut Command, stdin: &[u8]) -> (Child, JoinHandle<()>) {
    let (child, mut input) = spawn_piped(cmd);
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    (child, writer)
}

/// One finished run of the runner (a host process or a container): exit code, output and wall
/// time.
#[derive(Debug)]
pub struct Run {
    /// The exit code, if it exited.
    pub code: Option<i32>,
    /// Everything it wrote on stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote on stderr, lossily decoded.
    pub stderr: String,
    /// Its wall time.
    pub elapsed: Duration,
}

impl Run {
    /// The strictly parsed output document (exactly one JSON value plus a newline).
    #[must_use]
    pub fn output(&self) -> TurnOutput {
        assert_eq!(self.code, Some(0), "runner failed: {}", self.stderr);
        assert_eq!(
            self.stdout.iter().filter(|b| **b == b'\n').count(),
            1,
            "one line on stdout"
        );
        vocab::from_slice_strict(&self.stdout, 64 << 20).expect("strict output document")
    }

    /// The synthetic agent's report in the output's summary.
    #[must_use]
    pub fn report(&self) -> AgentReport {
        let out = self.output();
        serde_json::from_str(&out.proposal.summary).expect("agent report in summary")
    }
}

/// Decodes the archive and returns its entries as (path, text).
#[must_use]
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
#[must_use]
pub fn outcomes<'a>(report: &'a AgentReport, prefix: &str) -> Vec<&'a str> {
    report
        .attempts
        .iter()
        .filter(|a| a.action.starts_with(prefix))
        .map(|a| a.outcome.as_str())
        .collect()
}
