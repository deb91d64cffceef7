//! The crate's error type. Every variant has a stable wire code ([`ArchiveError::code`]); messages
//! name paths, fields and limits but never quote entry contents.

use std::fmt;

use snapshot::SnapshotError;

use vocab::{Coded, FailureClass, Untrusted};

/// Code of the canonical-envelope failures (the reference raises a bare `ArchiveError` for them;
/// we give them a stable code of their own).
pub const ENVELOPE_CODE: &str = "REPOSITORY_PATCH_ARCHIVE_ENVELOPE";

/// Every code [`ArchiveError::code`] can return (snapshot errors keep the snapshot's codes), for
/// documentation and contract tests.
pub const ERROR_CODES: &[&str] = ArchiveError::CODES;

/// An entry name as it appears in a message: [`Untrusted::quoted`] (Python `repr` spelling,
/// `'a.txt'`, every control, bidi and zero-width character escaped, capped at
/// [`vocab::DEFAULT_QUOTED_CHARS`] characters with a marker), built from the raw bytes (invalid
/// UTF-8 shown with replacement characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryName(pub(crate) String);

impl EntryName {
    pub(crate) fn from_bytes(raw: &[u8]) -> Self {
        Self(String::from_utf8_lossy(raw).into_owned())
    }

    pub(crate) fn from_str(raw: &str) -> Self {
        Self(raw.to_owned())
    }

    /// The (lossily decoded) name, unescaped: never format it into a message directly.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EntryName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Untrusted::quoted(&self.0), f)
    }
}

/// Most violations a `REPOSITORY_PATCH_ARCHIVE_SCOPE` message lists by name; the rest are
/// counted.
#[cfg(feature = "effects")]
pub(crate) const MAX_LISTED_VIOLATIONS: usize = 10;

/// Errors of the envelope, the workspace, export and staging.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum ArchiveError {
    /// The bytes are not the canonical envelope. `message` is the reference message (without a
    /// code), e.g. `link entry not permitted: 'a.txt'`.
    #[error("REPOSITORY_PATCH_ARCHIVE_ENVELOPE: {message}")]
    #[coded(code = ENVELOPE_CODE)]
    Envelope { message: String },
    /// The raw end record or central directory is malformed.
    #[error("REPOSITORY_PATCH_ARCHIVE_FORMAT: {detail}")]
    Format { detail: &'static str },
    /// A file-count or byte budget was exceeded, or a limit was out of range.
    #[error("REPOSITORY_PATCH_ARCHIVE_BUDGET: {detail}")]
    Budget { detail: &'static str },
    /// The archive's entries differ from the approved selection and grants.
    #[error("REPOSITORY_PATCH_ARCHIVE_SET: entries differ from approved operation grants")]
    Set,
    /// An entry's bytes differ from its manifest size or digest.
    #[error("REPOSITORY_PATCH_ARCHIVE_HASH: {path}")]
    Hash { path: EntryName },
    /// An entry or staged file is not exact UTF-8.
    #[error("REPOSITORY_PATCH_ARCHIVE_UTF8: {path}{suffix}")]
    Utf8 {
        path: EntryName,
        suffix: &'static str,
    },
    /// The staged tree has harvest violations (kinds listed, never contents).
    #[error("REPOSITORY_PATCH_ARCHIVE_SCOPE: staged tree has violations: {summary}")]
    Scope { summary: String },
    /// A harvested operation is not granted, or has no content.
    #[error("REPOSITORY_PATCH_ARCHIVE_OP: {path}")]
    Op { path: EntryName },
    /// The staging target is unusable (exists, is a link) or a write failed.
    #[error("REPOSITORY_PATCH_ARCHIVE_WORKSPACE: {detail}")]
    Workspace { detail: String },
    /// Create/delete grants conflict with each other or with the staged baseline.
    #[error("REPOSITORY_PATCH_ARCHIVE_GRANTS: {detail}")]
    Grants { detail: &'static str },
    /// A materialised path is not a safe relative path.
    #[error("WORKSPACE_UNSAFE_PATH: {path}")]
    WorkspaceUnsafePath { path: EntryName },
    /// A materialised path is secret-sensitive.
    #[error("WORKSPACE_SECRET_PATH: {path}")]
    WorkspaceSecretPath { path: EntryName },
    /// Removing a workspace tree failed; the tree (or part of it) remains.
    #[error("CODING_WORKSPACE_CLEANUP: could not remove workspace: {detail}")]
    #[coded(environment)]
    Cleanup { detail: String },
    /// An approval, selection, host path guard or content-gate error, with its own code.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

impl ArchiveError {
    /// True for failures of the environment (file system, I/O) rather than of the input: the
    /// same answer as [`Coded::class`].
    #[must_use]
    pub fn is_environment(&self) -> bool {
        self.class() == FailureClass::Environment
    }

    /// An envelope error whose message ends with `: {name!r}`.
    pub(crate) fn entry(what: &str, name: &EntryName) -> Self {
        Self::Envelope {
            message: format!("{what}: {name}"),
        }
    }

    /// An envelope error without an entry name.
    pub(crate) fn envelope(what: &str) -> Self {
        Self::Envelope {
            message: what.to_owned(),
        }
    }

    pub(crate) fn workspace_io(what: &str, err: &std::io::Error) -> Self {
        Self::Workspace {
            detail: format!("{what}: {}", err.kind()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One sample of every variant (the all-variants test fails until a new variant has one).
    fn samples() -> Vec<ArchiveError> {
        let name = || EntryName::from_str("a.txt");
        vec![
            ArchiveError::entry("link entry not permitted", &name()),
            ArchiveError::Format {
                detail: "invalid ZIP directory",
            },
            ArchiveError::Budget {
                detail: "archive exceeds limit",
            },
            ArchiveError::Set,
            ArchiveError::Hash { path: name() },
            ArchiveError::Utf8 {
                path: name(),
                suffix: " is not exact UTF-8",
            },
            ArchiveError::Scope {
                summary: "symlink".to_owned(),
            },
            ArchiveError::Op { path: name() },
            ArchiveError::Workspace {
                detail: "target must not exist".to_owned(),
            },
            ArchiveError::Grants {
                detail: "duplicate operation path",
            },
            ArchiveError::WorkspaceUnsafePath { path: name() },
            ArchiveError::WorkspaceSecretPath { path: name() },
            ArchiveError::Cleanup {
                detail: "permission denied".to_owned(),
            },
            ArchiveError::Snapshot(SnapshotError::SnapshotIdentity),
        ]
    }

    #[test]
    fn every_variant_starts_with_its_code_once() {
        let samples = samples();
        vocab::check_coded_samples(&samples).unwrap();
        for e in &samples {
            let expected = if matches!(e, ArchiveError::Cleanup { .. }) {
                FailureClass::Environment
            } else {
                FailureClass::Rejected
            };
            assert_eq!(e.class(), expected, "{}", e.code());
            assert_eq!(e.is_environment(), e.class() == FailureClass::Environment);
        }
    }

    /// Reference messages are unchanged for ordinary names.
    #[test]
    fn reference_spelling_for_ordinary_names() {
        let e = ArchiveError::entry("link entry not permitted", &EntryName::from_str("a.txt"));
        assert_eq!(
            e.to_string(),
            "REPOSITORY_PATCH_ARCHIVE_ENVELOPE: link entry not permitted: 'a.txt'"
        );
        for (name, shown) in [
            ("it's", "\"it's\""),
            ("a'b\"c", "'a\\'b\"c'"),
            ("a\0b\\c\n", "'a\\x00b\\\\c\\n'"),
            ("Répörts", "'Répörts'"),
        ] {
            assert_eq!(EntryName::from_str(name).to_string(), shown);
        }
    }

    /// Bidi overrides, zero-width and other format characters were passed through raw before.
    #[test]
    fn r_entry_names_escape_bidi_and_zero_width() {
        let e = ArchiveError::Op {
            path: EntryName::from_str("app/\u{202e}txt.exe\u{200b}\u{e0041}\u{ad}"),
        };
        assert_eq!(
            e.to_string(),
            "REPOSITORY_PATCH_ARCHIVE_OP: 'app/\\u202etxt.exe\\u200b\\U000e0041\\xad'"
        );
    }

    #[test]
    fn long_names_are_cut_in_messages() {
        let shown = EntryName::from_str(&"a".repeat(5000)).to_string();
        assert!(shown.len() < 260, "{shown}");
        assert!(shown.ends_with("... (5000 characters)"));
    }

    #[test]
    fn snapshot_codes_pass_through() {
        let e = ArchiveError::from(SnapshotError::SnapshotIdentity);
        assert_eq!(e.code(), "REPOSITORY_PATCH_SNAPSHOT_IDENTITY");
        assert!(
            e.to_string()
                .starts_with("REPOSITORY_PATCH_SNAPSHOT_IDENTITY: ")
        );
    }
}
