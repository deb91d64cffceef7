//! Shared helpers: payloads, running the binaries with a deadline, decoding the output.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Map, Value, json};
use turn_runner::TurnOutput;
use turn_runner::agent::AgentReport;

pub const RUNNER: &str = env!("CARGO_BIN_EXE_turn-runner");
pub const AGENT: &str = env!("CARGO_BIN_EXE_fake-agent");
pub const HOSTILE: &str = env!("CARGO_BIN_EXE_hostile-entry");

/// A payload in the reference key order.
pub fn payload(
    task: &str,
    files: &[(&str, &str)],
    read_only: &[(&str, &str)],
    grants: Option<(&[&str], &[&str])>,
) -> Vec<u8> {
    let map = |pairs: &[(&str, &str)]| {
        Value::Object(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect::<Map<_, _>>(),
        )
    };
    let mut text = format!(
        "{{\"app_id\":\"app\",\"build_family\":\"app_bundle\",\"build_record_id\":\"build-1\",\"change_class\":\"patch\",\"raw_user_request\":{},\"files\":{},\"read_only_files\":{}",
        json!(task),
        map(files),
        map(read_only)
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

/// Runs `program args` with `stdin`, killing it after `deadline`.
pub fn run_with(
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    stdin: &[u8],
    deadline: Duration,
) -> Run {
    let start = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        let until = Instant::now() + deadline;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let out = child.wait_with_output().expect("wait");
    let _ = writer.join();
    let _ = killer.join();
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

/// Runs the runner against the fake agent in a fresh temporary workspace root.
pub fn run_turn(stdin: &[u8], extra: &[&str]) -> (Run, tempfile::TempDir) {
    run_turn_env(stdin, extra, &[])
}

pub fn run_turn_env(
    stdin: &[u8],
    extra: &[&str],
    envs: &[(&str, &str)],
) -> (Run, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let root_str = root.path().to_str().unwrap().to_owned();
    let mut args = vec!["--workspace-root", root_str.as_str(), "--agent", AGENT];
    args.extend_from_slice(extra);
    let run = run_with(RUNNER, &args, envs, stdin, Duration::from_secs(60));
    (run, root)
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

/// The outcome of the first attempt whose action starts with `prefix`.
pub fn outcomes<'a>(report: &'a AgentReport, prefix: &str) -> Vec<&'a str> {
    report
        .attempts
        .iter()
        .filter(|a| a.action.starts_with(prefix))
        .map(|a| a.outcome.as_str())
        .collect()
}
