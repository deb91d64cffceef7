//! How results and errors reach the user: JSON on stdout with `--json`, text otherwise; the error
//! code always first on stderr; stable exit codes.

use std::io::Write as _;
use std::process::ExitCode;

/// A successful command result.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The `--json` document.
    pub json: serde_json::Value,
    /// What a person reads on stdout without `--json`.
    pub text: String,
}

/// The class of a failure, which decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The input was rejected (exit 1).
    Rejected,
    /// The environment failed: Docker, git, I/O (exit 3).
    Environment,
}

/// A failed command: a stable code and a message that never quotes file contents.
#[derive(Debug)]
pub(crate) struct CliError {
    pub code: String,
    pub message: String,
    pub failure: Failure,
}

impl CliError {
    pub(crate) fn rejected(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            failure: Failure::Rejected,
        }
    }

    pub(crate) fn environment(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            failure: Failure::Environment,
        }
    }
}

impl From<snapshot::SnapshotError> for CliError {
    fn from(e: snapshot::SnapshotError) -> Self {
        let failure = if e.is_environment() {
            Failure::Environment
        } else {
            Failure::Rejected
        };
        Self {
            code: e.code().to_owned(),
            message: e.to_string(),
            failure,
        }
    }
}

pub(crate) fn emit(result: Result<Outcome, CliError>, json: bool) -> ExitCode {
    let stdout = std::io::stdout();
    // stdout is line-buffered: without this, a large JSON document costs one write per line.
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    match result {
        Ok(outcome) => {
            let written = if json {
                serde_json::to_writer_pretty(&mut out, &outcome.json)
                    .map_err(std::io::Error::other)
                    .and_then(|()| writeln!(out))
            } else {
                write!(out, "{}", outcome.text)
            };
            if written.and_then(|()| out.flush()).is_err() {
                return ExitCode::from(3);
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            // The code comes first on stderr, unadorned, so scripts can match it.
            let _ = writeln!(
                std::io::stderr().lock(),
                "{}: {}",
                err.code,
                strip_code(&err.message, &err.code)
            );
            if json {
                let doc = serde_json::json!({"error": {"code": err.code, "message": err.message}});
                let _ = serde_json::to_writer_pretty(&mut out, &doc);
                let _ = writeln!(out);
                let _ = out.flush();
            }
            match err.failure {
                Failure::Rejected => ExitCode::from(1),
                Failure::Environment => ExitCode::from(3),
            }
        }
    }
}

fn strip_code<'a>(message: &'a str, code: &str) -> &'a str {
    message
        .strip_prefix(code)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message)
}
