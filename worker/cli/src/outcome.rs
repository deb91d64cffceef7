//! How results and errors reach the user: JSON on stdout with `--json`, text otherwise; the error
//! message (its code first, exactly once) on stderr; the exit status from the failure class.
//!
//! There is one error type, [`CliError`], and one mapping into it: every library error implements
//! [`vocab::Coded`], and `From<E: Coded>` takes its code, message and class as they are. The
//! CLI's own codes live here too: the typed [`CommandError`] for failures with structured fields,
//! and one named constant per code the commands build a [`CliError`] with directly.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use vocab::{Coded, FailureClass, Untrusted};

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
/// A result could not be serialised or rendered for output (exit status 3).
pub(crate) const OUTPUT_CODE: &str = "PATCH_CANDIDATE_OUTPUT";
/// The state directory cannot be created (exit status 3): the state directory crate's code.
pub(crate) const STATE_CODE: &str = state::STATE_CODE;
/// The async runtime or the signal handlers cannot be set up (exit status 3).
pub(crate) const RUNTIME_CODE: &str = "PATCH_CANDIDATE_RUNTIME";
/// `jobs show|logs` for a job the store does not hold (exit status 1): the job store's code.
pub(crate) const JOBS_NOT_FOUND_CODE: &str = jobs::NOT_FOUND_CODE;
/// `tokens revoke` for a name with no live token (exit status 1).
pub(crate) const TOKEN_NOT_FOUND_CODE: &str = "PATCH_CANDIDATE_TOKEN_NOT_FOUND";
/// `--live` without `--model` (exit status 2).
pub(crate) const LIVE_MODEL_CODE: &str = "PATCH_CANDIDATE_LIVE_MODEL";
/// `--agent` names no agent: the turn's code for an unknown agent.
pub(crate) const LIVE_AGENT_CODE: &str = turn::LIVE_AGENT_CODE;
/// `--live` without exactly one credential option (exit status 2).
pub(crate) const LIVE_CREDENTIAL_CODE: &str = "PATCH_CANDIDATE_LIVE_CREDENTIAL";
/// The gateway config and the `--model` disagree (exit status 2): the gateway's config code.
pub(crate) const GATEWAY_CONFIG_CODE: &str = gateway::CONFIG_CODE;
/// `image build` could not run or failed (exit status 3).
pub(crate) const IMAGE_BUILD_CODE: &str = "PATCH_CANDIDATE_IMAGE_BUILD";
/// `demo` could not set up its fixture or run.
pub(crate) const DEMO_CODE: &str = "PATCH_CANDIDATE_DEMO";
/// `git apply --check` refused the demo's candidate.
pub(crate) const DEMO_APPLY_CODE: &str = "PATCH_CANDIDATE_DEMO_APPLY";
/// The demo's chain of attempts did not end green (exit status 1).
pub(crate) const DEMO_CHAIN_CODE: &str = "PATCH_CANDIDATE_DEMO_CHAIN";
/// A malformed `PATCH_CANDIDATE_FAULT` setting (exit status 2).
pub(crate) const FAULT_CODE: &str = "PATCH_CANDIDATE_FAULT";
/// An interrupted command (SIGINT / SIGTERM; exit status 130 / 143).
pub(crate) const INTERRUPTED_CODE: &str = "PATCH_CANDIDATE_INTERRUPTED";
/// `archive inspect|pack` could not read or write a file (exit status 3).
pub(crate) const ARCHIVE_IO_CODE: &str = "REPOSITORY_PATCH_ARCHIVE_IO";
/// `doctor --require-runsc` found `runsc` unusable (exit status 1).
pub(crate) const DOCTOR_RUNSC_CODE: &str = "PATCH_CANDIDATE_DOCTOR_RUNSC";
/// `image build` cannot find its source checkout.
pub(crate) const IMAGE_SOURCE_CODE: &str = "PATCH_CANDIDATE_IMAGE_SOURCE";
/// `image approve --gate`: a malformed name or ID (exit status 2), or no such image on the
/// daemon (exit status 1).
pub(crate) const IMAGE_APPROVE_CODE: &str = "PATCH_CANDIDATE_IMAGE_APPROVE";
/// `janitor` could not remove every container it should have (the Docker seam's own code).
pub(crate) const CLEANUP_FAILED_CODE: &str = container::CLEANUP_FAILED_CODE;
/// `gate`: nothing to run, no `--gate` and the candidate requires none (exit status 2).
pub(crate) const GATE_NONE_CODE: &str = "PATCH_CANDIDATE_GATE_NONE";
/// `gate init` found no recorded gate image and no `--image` (exit status 3).
pub(crate) const GATE_IMAGE_CODE: &str = "PATCH_CANDIDATE_GATE_IMAGE";

/// Every code the command line defines itself: the named constants above that are not another
/// crate's, and the codes of [`CommandError`]. For the tests and the workspace's code scan.
#[cfg(test)]
pub(crate) const ERROR_CODES: &[&str] = &[
    PATH_MISSING,
    PATH_KIND,
    INPUT_CODE,
    IO_CODE,
    OUTPUT_CODE,
    RUNTIME_CODE,
    TOKEN_NOT_FOUND_CODE,
    LIVE_MODEL_CODE,
    LIVE_CREDENTIAL_CODE,
    IMAGE_BUILD_CODE,
    DEMO_CODE,
    DEMO_APPLY_CODE,
    DEMO_CHAIN_CODE,
    FAULT_CODE,
    INTERRUPTED_CODE,
    ARCHIVE_IO_CODE,
    DOCTOR_RUNSC_CODE,
    IMAGE_SOURCE_CODE,
    IMAGE_APPROVE_CODE,
    GATE_NONE_CODE,
    GATE_IMAGE_CODE,
    "PATCH_CANDIDATE_FINALIZE_FLAGS",
    "PATCH_CANDIDATE_STAGED_INCOMPLETE",
    "PATCH_CANDIDATE_DIGEST_FLAG",
    "PATCH_CANDIDATE_OUTPUT_EXISTS",
    "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY",
    "PATCH_CANDIDATE_OUTPUT_WRITE",
];

/// The CLI's own failures with structured fields (flags of `finalize`, `digest`, output files).
/// Each has a stable code ([`vocab::Coded`]); messages name flags, never file contents.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CommandError {
    /// `finalize` was given part of one input form and part of the other.
    #[error("PATCH_CANDIDATE_FINALIZE_FLAGS: {detail}")]
    FinalizeFlags { detail: &'static str },
    /// `finalize --staged` without a proposal: an approved editable file is missing from the tree
    /// (only a granted delete may be missing).
    #[error(
        "PATCH_CANDIDATE_STAGED_INCOMPLETE: --staged lacks the approved editable file {}: the staged tree holds every editable file of the approval, changed or not (only --delete grants may be missing)",
        Untrusted::quoted(.path)
    )]
    StagedIncomplete { path: String },
    /// A digest flag is not `sha256:` followed by 64 lowercase hex digits.
    #[error(
        "PATCH_CANDIDATE_DIGEST_FLAG: {flag} must be sha256: followed by 64 lowercase hex digits"
    )]
    DigestFlag { flag: &'static str },
    /// An output file already exists and `--force` was not given.
    #[error(
        "PATCH_CANDIDATE_OUTPUT_EXISTS: {flag} names an existing file (pass --force to replace it)"
    )]
    OutputExists { flag: &'static str },
    /// An output file would land inside the source repository.
    #[error(
        "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY: {flag} is inside the repository named by --repo; nothing writes into the source repository"
    )]
    OutputInRepository { flag: &'static str },
    /// An output file could not be written (nothing is left half-written).
    #[error("PATCH_CANDIDATE_OUTPUT_WRITE: cannot write the {flag} file ({kind})")]
    OutputWrite {
        flag: &'static str,
        kind: std::io::ErrorKind,
    },
}

impl CommandError {
    /// The stable wire code (the message prefix before `": "`).
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::FinalizeFlags { .. } => "PATCH_CANDIDATE_FINALIZE_FLAGS",
            Self::StagedIncomplete { .. } => "PATCH_CANDIDATE_STAGED_INCOMPLETE",
            Self::DigestFlag { .. } => "PATCH_CANDIDATE_DIGEST_FLAG",
            Self::OutputExists { .. } => "PATCH_CANDIDATE_OUTPUT_EXISTS",
            Self::OutputInRepository { .. } => "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY",
            Self::OutputWrite { .. } => "PATCH_CANDIDATE_OUTPUT_WRITE",
        }
    }
}

impl Coded for CommandError {
    fn code(&self) -> &'static str {
        CommandError::code(self)
    }

    fn class(&self) -> FailureClass {
        match self {
            Self::FinalizeFlags { .. }
            | Self::DigestFlag { .. }
            | Self::OutputExists { .. }
            | Self::OutputInRepository { .. } => FailureClass::Usage,
            Self::OutputWrite { .. } => FailureClass::Environment,
            Self::StagedIncomplete { .. } => FailureClass::Rejected,
        }
    }
}

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
    fn a_live_turn_refused_by_the_gateway_exits_with_the_gateway_code() {
        let e = CliError::from(turn::TurnError::GatewayRefused {
            code: "PATCH_CANDIDATE_GATEWAY_MODEL",
            status: "failed",
        });
        assert_eq!(e.code, "PATCH_CANDIDATE_GATEWAY_MODEL");
        assert_eq!(e.class, FailureClass::Rejected);
        let mut out = Vec::new();
        write_json_error(&mut out, e.code, &e.message());
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["error"]["code"], "PATCH_CANDIDATE_GATEWAY_MODEL");
        assert!(
            doc["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("PATCH_CANDIDATE_GATEWAY_MODEL: the model gateway refused")
        );
    }

    /// One value of every variant; the match is exhaustive, so a new variant needs a sample.
    fn command_error_samples() -> Vec<CommandError> {
        let all = vec![
            CommandError::FinalizeFlags { detail: "x" },
            CommandError::StagedIncomplete {
                path: "a".to_owned(),
            },
            CommandError::DigestFlag { flag: "--digest" },
            CommandError::OutputExists { flag: "--out" },
            CommandError::OutputInRepository { flag: "--out" },
            CommandError::OutputWrite {
                flag: "--out",
                kind: std::io::ErrorKind::PermissionDenied,
            },
        ];
        for e in &all {
            match e {
                CommandError::FinalizeFlags { .. }
                | CommandError::StagedIncomplete { .. }
                | CommandError::DigestFlag { .. }
                | CommandError::OutputExists { .. }
                | CommandError::OutputInRepository { .. }
                | CommandError::OutputWrite { .. } => {}
            }
        }
        all
    }

    #[test]
    fn command_errors_follow_the_message_convention_and_keep_their_classes() {
        let all = command_error_samples();
        assert_eq!(all.len(), 6);
        for e in &all {
            if let Err(violation) = vocab::check_message_convention(e) {
                panic!("{violation}");
            }
            let expected = match e {
                CommandError::OutputWrite { .. } => FailureClass::Environment,
                CommandError::StagedIncomplete { .. } => FailureClass::Rejected,
                _ => FailureClass::Usage,
            };
            assert_eq!(e.class(), expected, "{}", e.code());
        }
        let e = CliError::from(CommandError::DigestFlag { flag: "--digest" });
        assert_eq!(e.class.exit_status(), 2);
        let e = CliError::from(CommandError::OutputWrite {
            flag: "--out",
            kind: std::io::ErrorKind::PermissionDenied,
        });
        assert_eq!(e.class.exit_status(), 3);
        assert_eq!(
            e.message(),
            "PATCH_CANDIDATE_OUTPUT_WRITE: cannot write the --out file (permission denied)"
        );
        let e = CliError::from(CommandError::StagedIncomplete {
            path: "a\u{1b}".to_owned(),
        });
        assert_eq!(e.class.exit_status(), 1);
        assert!(e.message().contains("'a\\x1b'"), "{}", e.message());
    }

    /// The table holds every [`CommandError`] code, and no code twice; the constants that reuse
    /// another crate's code are listed in that crate's table. (That every code constant of this
    /// file is in the table is checked by the workspace's code scan.)
    #[test]
    fn the_table_lists_every_own_code_once() {
        let mut listed = std::collections::BTreeSet::new();
        for code in ERROR_CODES {
            assert!(listed.insert(*code), "{code} twice");
        }
        for e in command_error_samples() {
            assert!(listed.contains(e.code()), "{}", e.code());
        }
        assert!(jobs::ERROR_CODES.contains(&JOBS_NOT_FOUND_CODE));
        assert!(state::ERROR_CODES.contains(&STATE_CODE));
        assert!(container::ERROR_CODES.contains(&CLEANUP_FAILED_CODE));
        assert!(turn::ERROR_CODES.contains(&LIVE_AGENT_CODE));
        assert!(gateway::ERROR_CODES.contains(&GATEWAY_CONFIG_CODE));
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
