//! The one error enum of the crate. Every variant maps to a stable `mozaiks.mcp.v1` error code;
//! messages name paths and limits, never file contents. Paths in messages go through
//! `vocab::Untrusted` whenever they hold a character a terminal or editor could interpret.
//!
//! `McpError` does not implement `vocab::Coded`: that trait's convention is a `Display` that
//! starts with `CODE: `, while the `mozaiks.mcp.v1` envelope carries the code and the message as
//! separate fields and ADR 0004 fixes the message text without a prefix (for example
//! `workspace_not_found` → "Workspace root could not be resolved inside the allowed root.").
//! Prefixing the code would change that wire contract; the code is available as
//! [`McpError::code`] and as `error.code` in every failure envelope.

/// A tool failure, reported inside the envelope as `error {code, message}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The startup root is missing, not a directory, or not resolvable.
    #[error("Workspace root could not be resolved inside the allowed root.")]
    WorkspaceNotFound,
    /// The workspace root has no `app/app.json`.
    #[error("The workspace has no app root: app/app.json is missing.")]
    AppRootNotFound,
    /// Absolute, home-relative or otherwise non-relative path (inside the root).
    #[error("Path must be workspace-relative.")]
    PathNotRelative,
    /// A `..` segment.
    #[error("Path contains a traversal segment.")]
    PathTraversal,
    /// A URL or `scheme:` form.
    #[error("Path has a URL or scheme prefix.")]
    PathHasScheme,
    /// A drive prefix (`C:`) or UNC form.
    #[error("Path has a drive prefix.")]
    PathHasDrivePrefix,
    /// Glob metacharacters.
    #[error("Path contains glob characters.")]
    PathHasGlob,
    /// An absolute path outside the workspace root.
    #[error("Path escapes the workspace root.")]
    PathEscapesWorkspace,
    /// A symbolic link on the path leads outside the workspace root.
    #[error("A symbolic link on the path leads outside the workspace root.")]
    SymlinkEscape,
    /// Empty, control characters, backslashes, empty or `.` segments, non-portable names.
    #[error("Path is not a valid workspace-relative path: {reason}.")]
    InvalidPath {
        /// Which rule was broken (our own vocabulary).
        reason: String,
    },
    /// Nothing exists at the path.
    #[error("Nothing exists at {}.", display_path(path))]
    NotFound {
        /// Workspace-relative path.
        path: String,
    },
    /// The path names a directory or special file where a regular file is needed.
    #[error("{} is not a regular file.", display_path(path))]
    NotAFile {
        /// Workspace-relative path.
        path: String,
    },
    /// The operating system refused access to one file or directory (`EACCES`).
    #[error("{} could not be read: permission denied.", display_path(path))]
    PermissionDenied {
        /// Workspace-relative path.
        path: String,
    },
    /// A file or the bundle exceeds a bound.
    #[error("{} exceeds the limit of {limit}.", display_path(what))]
    TooLarge {
        /// What was measured (a path, or `bundle files` / `bundle bytes`).
        what: String,
        /// The bound.
        limit: u64,
    },
    /// A manifest the tool needs does not parse or has the wrong shape.
    #[error("{} is not a valid manifest: {reason}.", display_path(path))]
    InvalidManifest {
        /// Workspace-relative path.
        path: String,
        /// Which rule was broken (never file content).
        reason: String,
    },
    /// A bounded parser refused a workspace file at one of its limits (depth, expanded nodes,
    /// expanded bytes); `code` is the limit's own code.
    #[error("{} exceeds a parse limit: {reason}.", display_path(path))]
    ParseLimit {
        /// Workspace-relative path.
        path: String,
        /// `too_deep`, `too_many_nodes` or `expansion_too_large`.
        code: &'static str,
        /// Which limit, with its bound (never file content).
        reason: String,
    },
    /// The tool arguments do not match the input schema (unknown keys included).
    #[error("Tool arguments do not match the input schema: {reason}.")]
    InvalidArguments {
        /// Which rule was broken.
        reason: String,
    },
    /// A pipeline tool was called but the server was started without `--candidate-store`.
    #[error("No candidate store was bound at startup.")]
    CandidateStoreNotConfigured,
    /// The candidate store or a candidate in it failed verification.
    #[error("Patch candidate rejected ({upstream_code}).")]
    InvalidCandidate {
        /// The stable code of the finalizer error.
        upstream_code: String,
    },
    /// The archive failed the strict reader.
    #[error("Workspace archive rejected ({upstream_code}).")]
    InvalidArchive {
        /// The stable code of the archive error.
        upstream_code: String,
    },
    /// An I/O failure other than not-found or escape.
    #[error("The workspace could not be read ({kind}).")]
    Io {
        /// `std::io::ErrorKind` rendered, never an OS message with paths.
        kind: String,
    },
}

impl McpError {
    /// The stable wire code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::WorkspaceNotFound => "workspace_not_found",
            Self::AppRootNotFound => "app_root_not_found",
            Self::PathNotRelative => "path_not_relative",
            Self::PathTraversal => "path_traversal",
            Self::PathHasScheme => "path_has_scheme",
            Self::PathHasDrivePrefix => "path_has_drive_prefix",
            Self::PathHasGlob => "path_has_glob",
            Self::PathEscapesWorkspace => "path_escapes_workspace",
            Self::SymlinkEscape => "symlink_escape",
            Self::InvalidPath { .. } => "invalid_path",
            Self::NotFound { .. } => "not_found",
            Self::NotAFile { .. } => "not_a_file",
            Self::PermissionDenied { .. } => "permission_denied",
            Self::TooLarge { .. } => "too_large",
            Self::InvalidManifest { .. } => "invalid_manifest",
            Self::ParseLimit { code, .. } => code,
            Self::InvalidArguments { .. } => "invalid_arguments",
            Self::CandidateStoreNotConfigured => "candidate_store_not_configured",
            Self::InvalidCandidate { .. } => "invalid_candidate",
            Self::InvalidArchive { .. } => "invalid_archive",
            Self::Io { .. } => "io_error",
        }
    }

    pub(crate) fn io(err: &std::io::Error) -> Self {
        Self::Io {
            kind: format!("{:?}", err.kind()),
        }
    }
}

/// Every code `McpError::code` can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = &[
    "workspace_not_found",
    "app_root_not_found",
    "path_not_relative",
    "path_traversal",
    "path_has_scheme",
    "path_has_drive_prefix",
    "path_has_glob",
    "path_escapes_workspace",
    "symlink_escape",
    "invalid_path",
    "not_found",
    "not_a_file",
    "permission_denied",
    "too_large",
    "invalid_manifest",
    "too_deep",
    "too_many_nodes",
    "expansion_too_large",
    "invalid_arguments",
    "candidate_store_not_configured",
    "invalid_candidate",
    "invalid_archive",
    "io_error",
];

/// A workspace path as diagnostics and findings show it: unchanged when every character is
/// printable, otherwise the escaped, quoted rendering of `vocab::Untrusted` (control, bidi,
/// line-separator and other invisible characters made visible, length capped).
pub(crate) fn display_path(path: &str) -> String {
    if path.chars().all(vocab::is_printable) && path.chars().count() <= vocab::DEFAULT_QUOTED_CHARS
    {
        path.to_owned()
    } else {
        vocab::Untrusted::quoted(path).to_string()
    }
}

#[cfg(test)]
mod table_tests {
    use super::{ERROR_CODES, McpError};

    /// One value of every variant (the parse limit with each of its codes); the match is
    /// exhaustive, so a new variant needs a sample, and then its code a place in the table.
    #[test]
    fn the_table_lists_every_code_once() {
        let s = String::new;
        let mut all = vec![
            McpError::WorkspaceNotFound,
            McpError::AppRootNotFound,
            McpError::PathNotRelative,
            McpError::PathTraversal,
            McpError::PathHasScheme,
            McpError::PathHasDrivePrefix,
            McpError::PathHasGlob,
            McpError::PathEscapesWorkspace,
            McpError::SymlinkEscape,
            McpError::InvalidPath { reason: s() },
            McpError::NotFound { path: s() },
            McpError::NotAFile { path: s() },
            McpError::PermissionDenied { path: s() },
            McpError::TooLarge {
                what: s(),
                limit: 1,
            },
            McpError::InvalidManifest {
                path: s(),
                reason: s(),
            },
            McpError::InvalidArguments { reason: s() },
            McpError::CandidateStoreNotConfigured,
            McpError::InvalidCandidate { upstream_code: s() },
            McpError::InvalidArchive { upstream_code: s() },
            McpError::Io { kind: s() },
        ];
        for code in ["too_deep", "too_many_nodes", "expansion_too_large"] {
            all.push(McpError::ParseLimit {
                path: s(),
                code,
                reason: s(),
            });
        }
        for e in &all {
            match e {
                McpError::WorkspaceNotFound
                | McpError::AppRootNotFound
                | McpError::PathNotRelative
                | McpError::PathTraversal
                | McpError::PathHasScheme
                | McpError::PathHasDrivePrefix
                | McpError::PathHasGlob
                | McpError::PathEscapesWorkspace
                | McpError::SymlinkEscape
                | McpError::InvalidPath { .. }
                | McpError::NotFound { .. }
                | McpError::NotAFile { .. }
                | McpError::PermissionDenied { .. }
                | McpError::TooLarge { .. }
                | McpError::InvalidManifest { .. }
                | McpError::ParseLimit { .. }
                | McpError::InvalidArguments { .. }
                | McpError::CandidateStoreNotConfigured
                | McpError::InvalidCandidate { .. }
                | McpError::InvalidArchive { .. }
                | McpError::Io { .. } => {}
            }
        }
        vocab::check_code_table(ERROR_CODES, all.iter().map(McpError::code)).unwrap();
    }
}

#[cfg(test)]
mod display_tests {
    use super::display_path;

    #[test]
    fn hostile_names_are_escaped_in_diagnostics() {
        assert_eq!(display_path("app/modules/notes"), "app/modules/notes");
        for hostile in [
            "app/a\u{2028}b",
            "app/a\u{85}b",
            "app/\u{1b}[31m",
            "app/\u{202e}txt.py",
        ] {
            let shown = display_path(hostile);
            assert!(shown.starts_with('\''), "{shown}");
            assert!(shown.chars().all(vocab::is_printable), "{shown}");
        }
        assert!(display_path(&"a".repeat(500)).len() < 300);
    }
}
