//! How results and errors reach the user: JSON on stdout with `--json`, text otherwise; the error
//! message (its code first, exactly once) on stderr; the exit status from the failure class.
//!
//! There is one error type, [`CliError`], and one mapping into it: every library error implements
//! [`snapshot::Coded`], and `From<E: Coded>` takes its code, message and class as they are.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use snapshot::{Coded, FailureClass, Untrusted};

/// Longest error message printed, in characters (the message of a library error is already
/// capped field by field; this bounds the sum).
const MAX_MESSAGE_CHARS: usize = 4096;
/// Longest host path shown, in characters.
const MAX_SHOWN_PATH_CHARS: usize = 4096;

/// The code of "a path the user named does not exist" (exit status 2), for every flag of every
/// command.
pub(crate) const PATH_MISSING: &str = "PATCH_CANDIDATE_PATH_MISSING";
/// The code of "a path the user named is not the kind of file system object the flag needs"
/// (exit status 2).
pub(crate) const PATH_KIND: &str = "PATCH_CANDIDATE_PATH_KIND";
/// Input that was read but refused by a CLI-level check (size cap, encoding).
pub(crate) const INPUT_CODE: &str = "PATCH_CANDIDATE_INPUT";
/// Local I/O failure.
pub(crate) const IO_CODE: &str = "PATCH_CANDIDATE_IO";

/// Whether this process was asked for `--json` (set once, before the command runs): a signal
/// handler that ends the process early reports its error in the same form as [`emit`].
static JSON_MODE: AtomicBool = AtomicBool::new(false);

/// Records the process's output mode (`--json` or text) for [`report_early_exit`].
pub(crate) fn set_json_mode(json: bool) {
    JSON_MODE.store(json, Ordering::Relaxed);
}

/// Writes `{"error": {"code", "message"}}` (one pretty JSON document and a newline).
fn write_json_error(out: &mut impl std::io::Write, code: &str, message: &str) {
    let doc = serde_json::json!({"error": {"code": code, "message": message}});
    let _ = serde_json::to_writer_pretty(&mut *out, &doc);
    let _ = writeln!(out);
    let _ = out.flush();
}

/// The error report of a process that ends outside [`emit`] (a signal): `message` (which starts
/// with `code`) on stderr and, under `--json`, the same error document [`emit`] writes on stdout.
pub(crate) fn report_early_exit(code: &str, message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{message}");
    if JSON_MODE.load(Ordering::Relaxed) {
        write_json_error(&mut std::io::stdout().lock(), code, message);
    }
}

/// A successful command result.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The `--json` document.
    pub json: serde_json::Value,
    /// What a person reads on stdout without `--json`.
    pub text: String,
}

/// A failed command: a stable code, a detail that never quotes file contents (untrusted names in
/// it went through [`Untrusted`]), and the failure class that decides the exit status.
#[derive(Debug)]
pub(crate) struct CliError {
    pub code: &'static str,
    detail: String,
    pub class: FailureClass,
}

impl CliError {
    fn new(code: &'static str, detail: impl Into<String>, class: FailureClass) -> Self {
        Self {
            code,
            detail: detail.into(),
            class,
        }
    }

    /// The input was refused (exit 1).
    pub(crate) fn rejected(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(code, detail, FailureClass::Rejected)
    }

    /// The command as given cannot run (exit 2).
    pub(crate) fn usage(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(code, detail, FailureClass::Usage)
    }

    /// The environment failed (exit 3).
    pub(crate) fn environment(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(code, detail, FailureClass::Environment)
    }

    /// `flag` names a path that does not exist (exit 2, [`PATH_MISSING`]).
    pub(crate) fn missing_path(flag: &str, path: &Path) -> Self {
        Self::usage(
            PATH_MISSING,
            format!(
                "{flag} names a path that does not exist: {}",
                display_path(path)
            ),
        )
    }

    /// `flag` names a path of the wrong kind (exit 2, [`PATH_KIND`]).
    pub(crate) fn path_kind(flag: &str, path: &Path, needed: &str) -> Self {
        Self::usage(
            PATH_KIND,
            format!("{flag} must name {needed}: {}", display_path(path)),
        )
    }

    /// The full message: the code once, then the detail.
    pub(crate) fn message(&self) -> String {
        let full = format!("{}: {}", self.code, self.detail);
        Untrusted::lines(&full).limit(MAX_MESSAGE_CHARS).render()
    }
}

/// The one mapping from a library error: its code, its message (which starts with the code
/// exactly once; the detail is what follows), and its class.
impl<E: Coded> From<E> for CliError {
    fn from(e: E) -> Self {
        let code = e.code();
        let message = e.to_string();
        let detail = message
            .strip_prefix(code)
            .and_then(|m| m.strip_prefix(": "))
            .unwrap_or(&message)
            .to_owned();
        Self {
            code,
            detail,
            class: e.class(),
        }
    }
}

/// A host path for a message or a listing, escaped like any other untrusted name.
pub(crate) fn display_path(path: &Path) -> String {
    Untrusted::quoted(&path.to_string_lossy())
        .limit(MAX_SHOWN_PATH_CHARS)
        .render()
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
                return ExitCode::from(FailureClass::Environment.exit_status());
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            let message = err.message();
            // The code comes first on stderr, so scripts can match it.
            let _ = writeln!(std::io::stderr().lock(), "{message}");
            if json {
                write_json_error(&mut out, err.code, &message);
            }
            ExitCode::from(err.class.exit_status())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_errors_keep_their_code_once_and_their_class() {
        let e = CliError::from(snapshot::SnapshotError::Git {
            detail: "git missing".to_owned(),
        });
        assert_eq!(e.code, "REPOSITORY_SNAPSHOT_GIT");
        assert_eq!(e.class, FailureClass::Environment);
        assert_eq!(e.message(), "REPOSITORY_SNAPSHOT_GIT: git missing");
        let e = CliError::rejected(INPUT_CODE, "proposal exceeds 3 bytes");
        assert_eq!(
            e.message(),
            "PATCH_CANDIDATE_INPUT: proposal exceeds 3 bytes"
        );
    }

    #[test]
    fn messages_are_escaped_and_capped() {
        let e = CliError::missing_path("--approval", Path::new("a\u{1b}]0;x\u{7}\u{202e}"));
        assert_eq!(
            e.message(),
            "PATCH_CANDIDATE_PATH_MISSING: --approval names a path that does not exist: \
             'a\\x1b]0;x\\x07\\u202e'"
        );
        assert_eq!(e.class.exit_status(), 2);
        let long = CliError::rejected(INPUT_CODE, "x".repeat(10 * MAX_MESSAGE_CHARS));
        assert!(long.message().chars().count() < MAX_MESSAGE_CHARS + 64);
    }
}
