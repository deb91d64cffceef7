//! The crate's error type. Every variant has a stable wire code ([`ArchiveError::code`]); messages
//! name paths, fields and limits but never quote entry contents.

use std::fmt;

use snapshot::SnapshotError;

/// Code of the canonical-envelope failures (the reference raises a bare `ArchiveError` for them;
/// we give them a stable code of their own).
pub const ENVELOPE_CODE: &str = "REPOSITORY_PATCH_ARCHIVE_ENVELOPE";

/// An entry name as it appears in a message: Python `repr` style (`'a.txt'`), built from the raw
/// bytes (invalid UTF-8 shown with replacement characters, control characters escaped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryName(pub(crate) String);

impl EntryName {
    pub(crate) fn from_bytes(raw: &[u8]) -> Self {
        Self(String::from_utf8_lossy(raw).into_owned())
    }

    pub(crate) fn from_str(raw: &str) -> Self {
        Self(raw.to_owned())
    }

    /// The (lossily decoded) name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Longest name shown in a message, in characters; longer names are cut and marked.
const MAX_SHOWN_NAME_CHARS: usize = 200;

impl fmt::Display for EntryName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.0.chars().count();
        if total <= MAX_SHOWN_NAME_CHARS {
            return f.write_str(&py_repr(&self.0));
        }
        let head: String = self.0.chars().take(MAX_SHOWN_NAME_CHARS).collect();
        write!(f, "{}... ({total} characters)", py_repr(&head))
    }
}

/// Python `repr()` of a string: single quotes unless the text holds `'` and no `"`; control
/// characters, quotes of the chosen kind and backslashes escaped.
#[must_use]
pub fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Errors of the envelope, the workspace, export and staging.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// The bytes are not the canonical envelope. `message` is the reference message (without a
    /// code), e.g. `link entry not permitted: 'a.txt'`.
    #[error("REPOSITORY_PATCH_ARCHIVE_ENVELOPE: {message}")]
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
    Cleanup { detail: String },
    /// An approval, selection, path-policy or content-gate error, with its own code.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

impl ArchiveError {
    /// The stable wire code (the message prefix before `": "`); snapshot errors keep their code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Envelope { .. } => ENVELOPE_CODE,
            Self::Format { .. } => "REPOSITORY_PATCH_ARCHIVE_FORMAT",
            Self::Budget { .. } => "REPOSITORY_PATCH_ARCHIVE_BUDGET",
            Self::Set => "REPOSITORY_PATCH_ARCHIVE_SET",
            Self::Hash { .. } => "REPOSITORY_PATCH_ARCHIVE_HASH",
            Self::Utf8 { .. } => "REPOSITORY_PATCH_ARCHIVE_UTF8",
            Self::Scope { .. } => "REPOSITORY_PATCH_ARCHIVE_SCOPE",
            Self::Op { .. } => "REPOSITORY_PATCH_ARCHIVE_OP",
            Self::Workspace { .. } => "REPOSITORY_PATCH_ARCHIVE_WORKSPACE",
            Self::Grants { .. } => "REPOSITORY_PATCH_ARCHIVE_GRANTS",
            Self::WorkspaceUnsafePath { .. } => "WORKSPACE_UNSAFE_PATH",
            Self::WorkspaceSecretPath { .. } => "WORKSPACE_SECRET_PATH",
            Self::Cleanup { .. } => "CODING_WORKSPACE_CLEANUP",
            Self::Snapshot(e) => e.code(),
        }
    }

    /// True for failures of the environment (file system, I/O) rather than of the input.
    #[must_use]
    pub fn is_environment(&self) -> bool {
        match self {
            Self::Cleanup { .. } => true,
            Self::Snapshot(e) => e.is_environment(),
            _ => false,
        }
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

impl snapshot::Coded for ArchiveError {
    fn code(&self) -> &'static str {
        ArchiveError::code(self)
    }

    fn class(&self) -> snapshot::FailureClass {
        if self.is_environment() {
            snapshot::FailureClass::Environment
        } else {
            snapshot::FailureClass::Rejected
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_matches_python() {
        assert_eq!(py_repr("a.txt"), "'a.txt'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(py_repr("a\0b\\c\n"), "'a\\x00b\\\\c\\n'");
        assert_eq!(py_repr("Répörts"), "'Répörts'");
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
