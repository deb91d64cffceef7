//! The startup-bound workspace: one root resolved once, opened as a cap-std [`Dir`]; every tool
//! path goes through [`check_request_path`] (lexical, fail closed) and then through the handle
//! (cap-std refuses anything that leads outside the root, symbolic links included).

use std::cell::RefCell;
use std::io::{self, Read as _};
use std::ops::Deref;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::Dir;
use snapshot::RepoPath;

use crate::envelope::{CONTENT_NOTICE, WorkspaceState};
use crate::error::McpError;
use crate::revision::{self, GitDirs, Revision};

/// Most entries of one directory any tool lists; the first ones by name are kept and a
/// `truncated` diagnostic says how many were left out.
pub const MAX_DIR_ENTRIES: usize = 2_000;
/// Most entries of one directory any tool scans before refusing it (`too_large`).
pub const MAX_DIR_SCAN: u64 = 1_000_000;

/// A workspace-relative path that passed every lexical rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestPath(RepoPath);

impl RequestPath {
    /// The portable text (`/` separators).
    #[must_use]
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// What is at a path, without following a final symbolic link out of the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// Something else (FIFO, socket, device).
    Other,
    /// Nothing.
    Missing,
}

impl EntryKind {
    /// Wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Directory => "directory",
            Self::Other => "other",
            Self::Missing => "missing",
        }
    }
}

/// One directory entry seen during enumeration (never followed if it is a link). Ordered by name
/// (non-UTF-8 names first), then kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listed {
    /// The entry name, if UTF-8.
    pub name: Option<String>,
    /// File type as stored (a symbolic link stays a link).
    pub kind: ListedKind,
}

/// A bounded directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DirListing {
    /// The first [`MAX_DIR_ENTRIES`] entries by name.
    pub entries: Vec<Listed>,
    /// How many entries the directory holds.
    pub total: u64,
}

impl DirListing {
    /// How many entries were left out.
    pub(crate) fn omitted(&self) -> u64 {
        self.total
            .saturating_sub(u64::try_from(self.entries.len()).unwrap_or(u64::MAX))
    }
}

/// The stored type of a listed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ListedKind {
    /// Regular file.
    File,
    /// Directory.
    Directory,
    /// Symbolic link (never followed during enumeration).
    Symlink,
    /// FIFO, socket, device.
    Other,
}

/// The root every tool works in, bound once at startup and shared by every call.
#[derive(Debug)]
pub struct BoundWorkspace {
    root: PathBuf,
    root_text: String,
    dir: Dir,
    git: Option<GitDirs>,
    bound_revision: Revision,
    bound_fingerprint: Option<String>,
}

/// One tool call's view of the bound workspace: every read goes through it and is recorded in
/// its read log (the `sources_sha256` / `sources_read` of that call's envelope).
#[derive(Debug)]
pub struct Workspace {
    bound: Arc<BoundWorkspace>,
    /// The files this call read: (path, content digest).
    reads: RefCell<Vec<(String, vocab::Sha256)>>,
}

impl Deref for Workspace {
    type Target = BoundWorkspace;

    fn deref(&self) -> &BoundWorkspace {
        &self.bound
    }
}

impl BoundWorkspace {
    /// Resolves `root` once (absolute, symbolic links resolved) and opens it as a directory handle.
    ///
    /// # Errors
    /// [`McpError::WorkspaceNotFound`] when the root is missing, not a directory, or not UTF-8.
    ///
    /// # Security
    /// This is the only ambient filesystem access of the server; later reads go through the handle.
    pub(crate) fn bind(root: &Path) -> Result<Self, McpError> {
        let absolute = std::path::absolute(root).map_err(|_| McpError::WorkspaceNotFound)?;
        #[expect(
            clippy::disallowed_methods,
            reason = "the operator-chosen root is resolved exactly once at startup, before the handle is opened"
        )]
        let resolved = std::fs::canonicalize(&absolute).map_err(|_| McpError::WorkspaceNotFound)?;
        let meta = std::fs::metadata(&resolved).map_err(|_| McpError::WorkspaceNotFound)?;
        if !meta.is_dir() {
            return Err(McpError::WorkspaceNotFound);
        }
        let root_text = resolved
            .to_str()
            .ok_or(McpError::WorkspaceNotFound)?
            .to_owned();
        let dir = Dir::open_ambient_dir(&resolved, cap_std::ambient_authority())
            .map_err(|_| McpError::WorkspaceNotFound)?;
        let git = GitDirs::open(&dir, &resolved);
        let bound_revision = revision::revision_of(git.as_ref());
        let bound_fingerprint = revision::fingerprint(&dir);
        Ok(Self {
            root: resolved,
            root_text,
            dir,
            git,
            bound_revision,
            bound_fingerprint,
        })
    }

    /// The resolved absolute root.
    #[must_use]
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }
}

impl Workspace {
    /// A fresh view for one tool call, with an empty read log.
    pub(crate) fn for_call(bound: &Arc<BoundWorkspace>) -> Self {
        Self {
            bound: Arc::clone(bound),
            reads: RefCell::new(Vec::new()),
        }
    }

    /// The digest and count of what this call read so far: the sorted, deduplicated
    /// (path, content digest) pairs.
    fn sources(&self) -> (String, u64) {
        let mut reads = self.reads.borrow().clone();
        reads.sort();
        reads.dedup();
        let mut canonical = String::new();
        for (path, digest) in &reads {
            canonical.push_str(path);
            canonical.push('\0');
            canonical.push_str(&digest.to_string());
            canonical.push('\n');
        }
        (
            vocab::Sha256::of(canonical.as_bytes()).to_string(),
            u64::try_from(reads.len()).unwrap_or(u64::MAX),
        )
    }

    /// The resolved absolute root as text.
    #[must_use]
    pub fn root_text(&self) -> &str {
        &self.root_text
    }

    /// The root directory's own name (upstream's last-resort app name).
    #[must_use]
    pub fn dir_name(&self) -> String {
        self.root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Revision now, revision at bind, whether the tree moved, and the digest of what this call
    /// read.
    #[must_use]
    pub fn state(&self) -> WorkspaceState {
        let (sources_sha256, sources_read) = self.sources();
        let revision = revision::revision_of(self.git.as_ref());
        let changed_since_bind = match (&self.bound_fingerprint, revision::fingerprint(&self.dir)) {
            (Some(before), Some(now)) => Some(*before != now || revision != self.bound_revision),
            _ if revision != self.bound_revision => Some(true),
            _ => None,
        };
        WorkspaceState {
            content_notice: CONTENT_NOTICE.to_owned(),
            revision,
            bound_revision: self.bound_revision.clone(),
            changed_since_bind,
            sources_sha256,
            sources_read,
        }
    }

    /// Applies the lexical rules to a caller-supplied path (see [`check_request_path`]), with the
    /// bound root to tell "absolute inside the root" from "outside the root".
    ///
    /// # Errors
    /// The first rule broken, as a stable code.
    pub fn check(&self, raw: &str) -> Result<RequestPath, McpError> {
        check_request_path(raw, &self.root)
    }

    /// Kind of the entry at `path`; symbolic links on the way are followed only inside the root.
    ///
    /// # Errors
    /// `symlink_escape` when a link on the path leads outside the root; `io_error` otherwise.
    pub fn kind(&self, path: &RequestPath) -> Result<EntryKind, McpError> {
        self.kind_str(path.as_str())
    }

    pub(crate) fn kind_str(&self, path: &str) -> Result<EntryKind, McpError> {
        self.check_links(path)?;
        match self.dir.metadata(path) {
            Ok(m) if m.is_file() => Ok(EntryKind::File),
            Ok(m) if m.is_dir() => Ok(EntryKind::Directory),
            Ok(_) => Ok(EntryKind::Other),
            Err(e) => match e.kind() {
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Ok(EntryKind::Missing),
                _ => Err(map_open_error(&e, path)),
            },
        }
    }

    /// Walks the prefixes of `path`; a symbolic link that cap-std refuses to follow is an escape.
    fn check_links(&self, path: &str) -> Result<(), McpError> {
        let mut end = 0usize;
        for segment in path.split('/') {
            end = if end == 0 {
                segment.len()
            } else {
                end + 1 + segment.len()
            };
            let prefix = path.get(..end).ok_or(McpError::InvalidPath {
                reason: "segment".into(),
            })?;
            match self.dir.symlink_metadata(prefix) {
                Ok(m) if m.file_type().is_symlink() => match self.dir.metadata(prefix) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                        return Err(map_open_error(&e, prefix));
                    }
                    // A dangling in-root link or a missing component: nothing exists there.
                    Err(_) => return Ok(()),
                },
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    return Err(map_open_error(&e, prefix));
                }
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    /// Reads a regular file, refusing anything over `max` bytes before reading it.
    ///
    /// # Errors
    /// `not_found`, `not_a_file`, `too_large`, `symlink_escape`, `io_error`.
    pub fn read_file(&self, path: &RequestPath, max: u64) -> Result<Vec<u8>, McpError> {
        self.read_str(path.as_str(), max)
    }

    pub(crate) fn read_str(&self, path: &str, max: u64) -> Result<Vec<u8>, McpError> {
        self.check_links(path)?;
        let file = open_regular(&self.dir, path, false)?;
        let out = read_bounded(file, path, max)?;
        self.reads
            .borrow_mut()
            .push((path.to_owned(), vocab::Sha256::of(&out)));
        Ok(out)
    }

    /// Lists a directory (sorted by name; links are reported, never followed), with the count of
    /// entries it holds; `Ok(None)` when the directory does not exist. At most
    /// [`MAX_DIR_ENTRIES`] are returned (the first by name); more than [`MAX_DIR_SCAN`] is
    /// `too_large`.
    ///
    /// # Errors
    /// `symlink_escape`, `permission_denied`, `not_a_file`, `too_large`, `io_error`.
    pub(crate) fn list_dir_bounded(&self, path: &str) -> Result<Option<DirListing>, McpError> {
        match self.kind_str(path)? {
            EntryKind::Directory => {}
            EntryKind::Missing => return Ok(None),
            EntryKind::File | EntryKind::Other => {
                return Err(McpError::NotAFile {
                    path: path.to_owned(),
                });
            }
        }
        let entries = self
            .dir
            .read_dir(path)
            .map_err(|e| map_open_error(&e, path))?;
        bounded_listing(entries, path).map(Some)
    }

    /// [`Self::list_dir_bounded`]'s entries only (the first [`MAX_DIR_ENTRIES`] by name).
    ///
    /// # Errors
    /// As [`Self::list_dir_bounded`].
    pub(crate) fn list_dir(&self, path: &str) -> Result<Option<Vec<Listed>>, McpError> {
        Ok(self.list_dir_bounded(path)?.map(|l| l.entries))
    }

    /// Lists the root itself, bounded like [`Self::list_dir_bounded`].
    ///
    /// # Errors
    /// `too_large`, `io_error`.
    pub(crate) fn list_root_bounded(&self) -> Result<DirListing, McpError> {
        let entries = self.dir.entries().map_err(|e| McpError::io(&e))?;
        bounded_listing(entries, ".")
    }
}

/// Keeps the first [`MAX_DIR_ENTRIES`] names in order while scanning at most [`MAX_DIR_SCAN`]
/// entries: memory stays bounded however large the directory is.
fn bounded_listing(entries: cap_std::fs::ReadDir, path: &str) -> Result<DirListing, McpError> {
    {
        let mut kept: std::collections::BinaryHeap<Listed> = std::collections::BinaryHeap::new();
        let mut total = 0u64;
        for entry in entries {
            total += 1;
            if total > MAX_DIR_SCAN {
                return Err(McpError::TooLarge {
                    what: format!("{path} entries"),
                    limit: MAX_DIR_SCAN,
                });
            }
            let entry = entry.map_err(|e| McpError::io(&e))?;
            let file_type = entry.file_type().map_err(|e| McpError::io(&e))?;
            let kind = if file_type.is_symlink() {
                ListedKind::Symlink
            } else if file_type.is_dir() {
                ListedKind::Directory
            } else if file_type.is_file() {
                ListedKind::File
            } else {
                ListedKind::Other
            };
            kept.push(Listed {
                name: entry.file_name().into_string().ok(),
                kind,
            });
            if kept.len() > MAX_DIR_ENTRIES {
                kept.pop();
            }
        }
        Ok(DirListing {
            entries: kept.into_sorted_vec(),
            total,
        })
    }
}

impl Workspace {
    /// Size of a regular file (links not followed).
    pub(crate) fn metadata_len(&self, path: &str) -> Result<u64, McpError> {
        self.dir
            .symlink_metadata(path)
            .map(|m| m.len())
            .map_err(|e| map_open_error(&e, path))
    }
}

/// Maps an open or lookup error. cap-std reports an attempt to leave the root as a
/// `PermissionDenied` error of its own (no OS error number); a real `EACCES` carries one.
pub(crate) fn map_open_error(e: &io::Error, path: &str) -> McpError {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => McpError::NotFound {
            path: path.to_owned(),
        },
        io::ErrorKind::PermissionDenied if e.raw_os_error().is_some() => {
            McpError::PermissionDenied {
                path: path.to_owned(),
            }
        }
        io::ErrorKind::PermissionDenied => McpError::SymlinkEscape,
        _ if e.raw_os_error() == Some(libc::ELOOP) => McpError::NotAFile {
            path: path.to_owned(),
        },
        _ => McpError::io(e),
    }
}

/// Opens `path` under `dir` exactly once and checks what was opened on the handle: `O_NONBLOCK`
/// (a FIFO or device swapped in after any earlier check cannot make the open wait), `O_NOCTTY`,
/// `O_NOFOLLOW` when `nofollow` (a final symbolic link is refused), then `fstat`: anything but a
/// regular file is `not_a_file`. Reads from the returned handle never wait on a special file.
///
/// # Errors
/// `not_found`, `not_a_file`, `permission_denied`, `symlink_escape`, `io_error`.
pub(crate) fn open_regular(
    dir: &Dir,
    path: &str,
    nofollow: bool,
) -> Result<cap_std::fs::File, McpError> {
    use cap_std::fs::{OpenOptions, OpenOptionsExt as _};
    // A cheap pre-check keeps special files from being opened at all in the common case; the
    // check on the handle below is the one that counts.
    let pre = if nofollow {
        dir.symlink_metadata(path)
    } else {
        dir.metadata(path)
    };
    match pre {
        Ok(m) if m.is_file() => {}
        Ok(m) if nofollow && m.file_type().is_symlink() => {
            return Err(McpError::NotAFile {
                path: path.to_owned(),
            });
        }
        Ok(_) => {
            return Err(McpError::NotAFile {
                path: path.to_owned(),
            });
        }
        Err(e) => return Err(map_open_error(&e, path)),
    }
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if nofollow {
        flags |= libc::O_NOFOLLOW;
    }
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(flags);
    let file = dir
        .open_with(path, &options)
        .map_err(|e| map_open_error(&e, path))?;
    let meta = file.metadata().map_err(|e| McpError::io(&e))?;
    if !meta.is_file() {
        return Err(McpError::NotAFile {
            path: path.to_owned(),
        });
    }
    Ok(file)
}

/// Reads an opened regular file, refusing anything over `max` bytes (checked on the handle before
/// reading, and again while reading, for a file that grows).
///
/// # Errors
/// `too_large`, `io_error`.
pub(crate) fn read_bounded(
    file: cap_std::fs::File,
    path: &str,
    max: u64,
) -> Result<Vec<u8>, McpError> {
    let too_large = || McpError::TooLarge {
        what: path.to_owned(),
        limit: max,
    };
    let len = file.metadata().map_err(|e| McpError::io(&e))?.len();
    if len > max {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| McpError::io(&e))?;
    if u64::try_from(out.len()).unwrap_or(u64::MAX) > max {
        return Err(too_large());
    }
    Ok(out)
}

/// The lexical rules, in order: empty/NUL/control → `invalid_path`; URL or `scheme:` →
/// `path_has_scheme`; drive prefix or UNC → `path_has_drive_prefix`; absolute → `path_not_relative`
/// inside `root`, `path_escapes_workspace` outside; `~` → `path_not_relative`; glob characters →
/// `path_has_glob`; a `..` segment → `path_traversal`; then the portable-path rules of
/// `mozaiks.portable_path.v1` (backslashes, empty or `.` segments, …) → `invalid_path`.
///
/// # Errors
/// The first rule broken.
pub fn check_request_path(raw: &str, root: &Path) -> Result<RequestPath, McpError> {
    if raw.is_empty() {
        return Err(McpError::InvalidPath {
            reason: "empty path".into(),
        });
    }
    if raw.chars().any(char::is_control) {
        return Err(McpError::InvalidPath {
            reason: "control character".into(),
        });
    }
    if has_scheme(raw) {
        return Err(McpError::PathHasScheme);
    }
    if has_drive_prefix(raw) {
        return Err(McpError::PathHasDrivePrefix);
    }
    if raw.starts_with('/') {
        return Err(if lexically_inside(Path::new(raw), root) {
            McpError::PathNotRelative
        } else {
            McpError::PathEscapesWorkspace
        });
    }
    if raw.starts_with('~') {
        return Err(McpError::PathNotRelative);
    }
    if raw
        .chars()
        .any(|c| matches!(c, '*' | '?' | '[' | ']' | '{' | '}'))
    {
        return Err(McpError::PathHasGlob);
    }
    if raw.split(['/', '\\']).any(|s| s == "..") {
        return Err(McpError::PathTraversal);
    }
    RepoPath::parse(raw)
        .map(RequestPath)
        .map_err(|rejection| McpError::InvalidPath {
            reason: rejection.to_string(),
        })
}

/// `scheme:` (two or more scheme characters, so `C:` stays a drive) or any `://`.
fn has_scheme(raw: &str) -> bool {
    if raw.contains("://") {
        return true;
    }
    let Some((head, _)) = raw.split_once(':') else {
        return false;
    };
    let mut chars = head.chars();
    head.len() >= 2
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn has_drive_prefix(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    let drive = matches!(bytes, [letter, b':', ..] if letter.is_ascii_alphabetic());
    drive || raw.starts_with("\\\\") || raw.starts_with("//")
}

/// Lexical containment of an absolute path (no filesystem access: `..` pops, `.` is skipped).
fn lexically_inside(path: &Path, root: &Path) -> bool {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::RootDir => normal.push("/"),
            Component::ParentDir => {
                normal.pop();
            }
            Component::Normal(part) => normal.push(part),
            Component::CurDir | Component::Prefix(_) => {}
        }
    }
    normal.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(raw: &str) -> &'static str {
        match check_request_path(raw, Path::new("/srv/ws")) {
            Ok(_) => "ok",
            Err(e) => e.code(),
        }
    }

    #[test]
    fn eacces_is_permission_denied_and_a_cap_std_escape_is_symlink_escape() {
        let eacces = io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(
            map_open_error(&eacces, "app/x.json").code(),
            "permission_denied"
        );
        let escape = io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a path led outside of the filesystem",
        );
        assert_eq!(
            map_open_error(&escape, "app/x.json").code(),
            "symlink_escape"
        );
        let fifo_loop = io::Error::from_raw_os_error(libc::ELOOP);
        assert_eq!(
            map_open_error(&fifo_loop, "app/x.json").code(),
            "not_a_file"
        );
    }

    #[test]
    fn lexical_table() {
        let table = [
            ("app/app.json", "ok"),
            ("", "invalid_path"),
            ("app/\u{0}x", "invalid_path"),
            ("https://example.com/a", "path_has_scheme"),
            ("file:app/app.json", "path_has_scheme"),
            ("C:\\Windows", "path_has_drive_prefix"),
            ("c:app", "path_has_drive_prefix"),
            ("\\\\server\\share", "path_has_drive_prefix"),
            ("//server/share", "path_has_drive_prefix"),
            ("/srv/ws/app/app.json", "path_not_relative"),
            ("/etc/passwd", "path_escapes_workspace"),
            ("/srv/ws/../other", "path_escapes_workspace"),
            ("~/app", "path_not_relative"),
            ("app/*.json", "path_has_glob"),
            ("app/pages/[id].json", "path_has_glob"),
            ("app/{a,b}", "path_has_glob"),
            ("../outside", "path_traversal"),
            ("app/../../x", "path_traversal"),
            ("app\\..\\x", "path_traversal"),
            ("app\\app.json", "invalid_path"),
            ("app//app.json", "invalid_path"),
            ("./app", "invalid_path"),
            ("app/", "invalid_path"),
        ];
        for (raw, want) in table {
            assert_eq!(code(raw), want, "{raw:?}");
        }
    }

    const TOKENS: &[&str] = &[
        "app", "a.json", "é", "..", ".", "", "/", "\\", "*", "?", "[", "]", "{", "}", "~", ":",
        "C:", "//", "http://", "file:", "\u{0}", " ", "\n", "%2e%2e",
    ];

    proptest::proptest! {
        /// Whatever token sequence is offered, an accepted path is returned unchanged and is a
        /// plain relative path that cannot leave the root lexically.
        #[test]
        fn accepted_paths_are_contained(picks in proptest::collection::vec(0..TOKENS.len(), 0..8)) {
            let raw: String = picks.iter().map(|&i| TOKENS[i]).collect();
            if let Ok(path) = check_request_path(&raw, Path::new("/srv/ws")) {
                proptest::prop_assert_eq!(path.as_str(), raw.as_str());
                proptest::prop_assert!(!raw.starts_with('/') && !raw.starts_with('~'));
                proptest::prop_assert!(!raw.contains('\\') && !raw.contains(':'));
                let glob = ['*', '?', '[', ']', '{', '}'];
                proptest::prop_assert!(!raw.chars().any(|c| c.is_control() || glob.contains(&c)));
                proptest::prop_assert!(raw.split('/').all(|s| !s.is_empty() && s != "." && s != ".."));
                let joined = Path::new("/srv/ws").join(&raw);
                proptest::prop_assert!(joined.starts_with("/srv/ws"));
                proptest::prop_assert!(joined.components().all(|c| !matches!(c, Component::ParentDir)));
            }
        }
    }
}
