//! The crate's one error type. Messages never quote request values, file contents or the child's
//! output: they name the field or rule and the limit.

use vocab::StrictJsonError;

/// Every code [`GateRunnerError::code`] and `JunitRefusal::code`
/// can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = vocab::code_table!(
    GateRunnerError::CODES,
    &[
        "GATE_JUNIT_NOT_A_FILE",
        "GATE_JUNIT_TOO_LARGE",
        "GATE_JUNIT_DOCTYPE",
        "GATE_JUNIT_ENTITY",
        "GATE_JUNIT_TOO_DEEP",
        "GATE_JUNIT_SYNTAX",
        "GATE_JUNIT_CASE_ID",
        "GATE_JUNIT_IO",
    ],
);

/// Why a wire document was refused, or why the runner could not run the gate. Every message
/// starts with its code.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum GateRunnerError {
    /// A frame's length prefix is 0 or above the cap.
    #[error("GATE_WIRE_FRAME_LENGTH: frame length {length} outside 1..={limit}")]
    FrameLength { length: u64, limit: usize },
    /// The stream ended inside a frame.
    #[error("GATE_WIRE_FRAME_TRUNCATED: stream ended inside a frame")]
    FrameTruncated,
    /// Bytes follow the one frame a report stream may hold.
    #[error("GATE_WIRE_TRAILING_DATA: data after the frame")]
    TrailingData,
    /// The frame is not strict JSON of the expected shape (the parser's message, which never
    /// quotes the document).
    #[error("GATE_WIRE_JSON: {0}")]
    Json(StrictJsonError),
    /// The document parsed but is not in its canonical encoding.
    #[error("GATE_WIRE_NOT_CANONICAL: document is not canonical JSON")]
    NotCanonical,
    /// A field's value breaks its rule.
    #[error("GATE_WIRE_FIELD: field {field}: {rule}")]
    Field {
        field: &'static str,
        rule: &'static str,
    },
    /// The version is not the one this crate speaks.
    #[error("GATE_WIRE_VERSION: version {found} is not {expected}")]
    Version { found: u64, expected: u32 },
    /// The report's fields contradict each other (e.g. `completed` without an exit status).
    #[error("GATE_WIRE_REPORT_SHAPE: report fields disagree: {rule}")]
    ReportShape { rule: &'static str },

    /// The tree stream broke a rule (see `TreeRule`).
    #[error("GATE_RUNNER_TREE: tree stream refused at entry {entry}: {rule}")]
    Tree {
        entry: u64,
        rule: crate::tree::TreeRule,
    },
    /// The working directory is missing or not a directory in the extracted tree.
    #[error("GATE_RUNNER_CWD: working directory is not a directory of the tree")]
    Cwd,
    /// The child could not be started.
    #[error("GATE_RUNNER_SPAWN: gate command could not be started: {kind}")]
    #[coded(environment)]
    Spawn { kind: std::io::ErrorKind },
    /// Process hardening (`prctl`, signals) failed.
    #[error("GATE_RUNNER_HARDEN: process hardening failed: {step}")]
    #[coded(environment)]
    Harden { step: &'static str },
    /// The extraction root could not be opened.
    #[error("GATE_RUNNER_ROOT: extraction root cannot be opened: {kind}")]
    #[coded(environment)]
    Root { kind: std::io::ErrorKind },
    /// The command line of the runner itself is wrong.
    #[error("GATE_RUNNER_USAGE: {reason}")]
    #[coded(usage)]
    Usage { reason: &'static str },
    /// Any other I/O failure.
    #[error("GATE_RUNNER_IO: i/o failure: {kind}")]
    #[coded(environment)]
    Io { kind: std::io::ErrorKind },
}

impl From<std::io::Error> for GateRunnerError {
    fn from(e: std::io::Error) -> Self {
        Self::Io { kind: e.kind() }
    }
}

impl GateRunnerError {
    pub(crate) fn field(field: &'static str, rule: &'static str) -> Self {
        Self::Field { field, rule }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::junit::JunitRefusal;
    use crate::tree::TreeRule;

    #[test]
    fn every_variant_follows_the_message_convention_with_a_unique_code() {
        let samples = vec![
            GateRunnerError::FrameLength {
                length: 0,
                limit: 10,
            },
            GateRunnerError::FrameTruncated,
            GateRunnerError::TrailingData,
            GateRunnerError::Json(StrictJsonError::DuplicateKey),
            GateRunnerError::NotCanonical,
            GateRunnerError::field("argv", "empty"),
            GateRunnerError::Version {
                found: 2,
                expected: 1,
            },
            GateRunnerError::ReportShape { rule: "x" },
            GateRunnerError::Tree {
                entry: 3,
                rule: TreeRule::Symlink,
            },
            GateRunnerError::Cwd,
            GateRunnerError::Spawn {
                kind: std::io::ErrorKind::NotFound,
            },
            GateRunnerError::Harden { step: "dumpable" },
            GateRunnerError::Root {
                kind: std::io::ErrorKind::NotFound,
            },
            GateRunnerError::Usage { reason: "x" },
            GateRunnerError::Io {
                kind: std::io::ErrorKind::BrokenPipe,
            },
        ];
        vocab::check_coded_samples(&samples).unwrap();
        let mut codes = std::collections::BTreeSet::new();
        for e in &samples {
            assert!(codes.insert(e.code()), "{} twice", e.code());
        }
        let junit = [
            JunitRefusal::NotAFile,
            JunitRefusal::TooLarge,
            JunitRefusal::Doctype,
            JunitRefusal::Entity,
            JunitRefusal::TooDeep,
            JunitRefusal::Syntax,
            JunitRefusal::CaseId,
            JunitRefusal::Io,
        ];
        for r in junit {
            match r {
                JunitRefusal::NotAFile
                | JunitRefusal::TooLarge
                | JunitRefusal::Doctype
                | JunitRefusal::Entity
                | JunitRefusal::TooDeep
                | JunitRefusal::Syntax
                | JunitRefusal::CaseId
                | JunitRefusal::Io => {}
            }
        }
        let produced = samples
            .iter()
            .map(GateRunnerError::code)
            .chain(junit.into_iter().map(JunitRefusal::code));
        vocab::check_code_table(ERROR_CODES, produced).unwrap();
    }
}
