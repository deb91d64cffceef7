//! The runner's `fs/read_text_file` and `fs/write_text_file` service, confined to the turn's
//! workspace through a cap-std `Dir`: absolute ACP paths must lie inside the workspace, contain no
//! `.`/`..`, name a portable path, and never pass through a symlink. Writes go only to editable
//! files and granted creates; read-only files are readable, never writable.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions};
use snapshot::RepoPath;

/// Largest file the service reads or writes (the archive's byte cap).
pub const MAX_FS_BYTES: usize = archive::MAX_ARCHIVE_BYTES;

/// Why an fs request was refused. Sent back to the agent as the error message and recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FsRefusal {
    #[error("FS_OUTSIDE_WORKSPACE")]
    OutsideWorkspace,
    #[error("FS_UNSAFE_PATH")]
    UnsafePath,
    #[error("FS_NOT_IN_SCOPE")]
    NotInScope,
    #[error("FS_READ_ONLY")]
    ReadOnly,
    #[error("FS_SYMLINK")]
    Symlink,
    #[error("FS_NOT_A_FILE")]
    NotAFile,
    #[error("FS_TOO_LARGE")]
    TooLarge,
    #[error("FS_NOT_UTF8")]
    NotUtf8,
    #[error("FS_NOT_FOUND")]
    NotFound,
    #[error("FS_IO")]
    Io,
}

impl FsRefusal {
    /// The stable code (same as `Display`).
    #[must_use]
    pub fn code(self) -> String {
        self.to_string()
    }
}

/// The confined view of one turn's workspace.
#[derive(Debug)]
pub struct ConfinedWorkspace {
    root: PathBuf,
    dir: Dir,
    editable: BTreeSet<RepoPath>,
    read_only: BTreeSet<RepoPath>,
    creates: BTreeSet<RepoPath>,
}

impl ConfinedWorkspace {
    /// Opens the workspace at the absolute `root` (the one ambient call).
    ///
    /// # Errors
    /// An I/O error when `root` cannot be opened.
    pub fn open(
        root: &Path,
        editable: BTreeSet<RepoPath>,
        read_only: BTreeSet<RepoPath>,
        creates: BTreeSet<RepoPath>,
    ) -> std::io::Result<Self> {
        let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority())?;
        Ok(Self {
            root: root.to_path_buf(),
            dir,
            editable,
            read_only,
            creates,
        })
    }

    /// Maps an absolute ACP path to a repository path inside the workspace.
    ///
    /// # Errors
    /// `OutsideWorkspace` for a relative path or one outside the root; `UnsafePath` for `.`/`..`
    /// components or a name outside the portable profile.
    pub fn resolve(&self, path: &Path) -> Result<RepoPath, FsRefusal> {
        if !path.is_absolute() {
            return Err(FsRefusal::OutsideWorkspace);
        }
        // `Path::components` silently drops `.` and repeated `/`; check the raw text instead.
        let raw = path.to_str().ok_or(FsRefusal::UnsafePath)?;
        let raw_segments = raw.strip_prefix('/').unwrap_or(raw).split('/');
        if raw_segments
            .into_iter()
            .any(|s| s.is_empty() || s == "." || s == "..")
        {
            return Err(FsRefusal::UnsafePath);
        }
        let rel = path
            .strip_prefix(&self.root)
            .map_err(|_| FsRefusal::OutsideWorkspace)?;
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(s) => parts.push(s.to_str().ok_or(FsRefusal::UnsafePath)?),
                _ => return Err(FsRefusal::UnsafePath),
            }
        }
        RepoPath::parse(&parts.join("/")).map_err(|_| FsRefusal::UnsafePath)
    }

    /// Refuses when any existing ancestor of `path` (or `path` itself) is a symlink or a
    /// non-directory ancestor.
    fn check_no_links(&self, path: &RepoPath) -> Result<bool, FsRefusal> {
        for prefix in path.parent_prefixes() {
            match self.dir.symlink_metadata(prefix) {
                Ok(m) if m.file_type().is_symlink() => return Err(FsRefusal::Symlink),
                Ok(m) if !m.is_dir() => return Err(FsRefusal::NotAFile),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(_) => return Err(FsRefusal::Io),
            }
        }
        match self.dir.symlink_metadata(path.as_str()) {
            Ok(m) if m.file_type().is_symlink() => Err(FsRefusal::Symlink),
            Ok(m) if !m.is_file() => Err(FsRefusal::NotAFile),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(_) => Err(FsRefusal::Io),
        }
    }

    /// `fs/read_text_file`: `line` is 1-based; `limit` counts lines.
    ///
    /// # Errors
    /// A [`FsRefusal`] for anything outside the staged scope, links, non-UTF-8 or oversize files.
    pub fn read(
        &self,
        path: &Path,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> Result<String, FsRefusal> {
        let rel = self.resolve(path)?;
        if !(self.editable.contains(&rel)
            || self.read_only.contains(&rel)
            || self.creates.contains(&rel))
        {
            return Err(FsRefusal::NotInScope);
        }
        if !self.check_no_links(&rel)? {
            return Err(FsRefusal::NotFound);
        }
        let mut opts = OpenOptions::new();
        opts.read(true).follow(FollowSymlinks::No);
        let file = self
            .dir
            .open_with(rel.as_str(), &opts)
            .map_err(|_| FsRefusal::Io)?;
        let mut bytes = Vec::new();
        file.take(MAX_FS_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|_| FsRefusal::Io)?;
        if bytes.len() > MAX_FS_BYTES {
            return Err(FsRefusal::TooLarge);
        }
        let text = String::from_utf8(bytes).map_err(|_| FsRefusal::NotUtf8)?;
        if line.is_none() && limit.is_none() {
            return Ok(text);
        }
        let skip = line.map_or(0, |l| l.saturating_sub(1) as usize);
        let take = limit.map_or(usize::MAX, |l| l as usize);
        Ok(text.split_inclusive('\n').skip(skip).take(take).collect())
    }

    /// `fs/write_text_file`: creates missing parent directories of a granted create.
    ///
    /// # Errors
    /// A [`FsRefusal`] for read-only files, paths neither editable nor granted, links and
    /// oversize content.
    pub fn write(&self, path: &Path, content: &str) -> Result<(), FsRefusal> {
        let rel = self.resolve(path)?;
        if self.read_only.contains(&rel) {
            return Err(FsRefusal::ReadOnly);
        }
        if !(self.editable.contains(&rel) || self.creates.contains(&rel)) {
            return Err(FsRefusal::NotInScope);
        }
        if content.len() > MAX_FS_BYTES {
            return Err(FsRefusal::TooLarge);
        }
        self.check_no_links(&rel)?;
        for prefix in rel.parent_prefixes() {
            match self.dir.create_dir(prefix) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let m = self
                        .dir
                        .symlink_metadata(prefix)
                        .map_err(|_| FsRefusal::Io)?;
                    if m.file_type().is_symlink() {
                        return Err(FsRefusal::Symlink);
                    }
                    if !m.is_dir() {
                        return Err(FsRefusal::NotAFile);
                    }
                }
                Err(_) => return Err(FsRefusal::Io),
            }
        }
        let mut opts = OpenOptions::new();
        opts.write(true)
            .create(true)
            .truncate(true)
            .follow(FollowSymlinks::No);
        let mut file = self
            .dir
            .open_with(rel.as_str(), &opts)
            .map_err(|_| FsRefusal::Io)?;
        file.write_all(content.as_bytes())
            .map_err(|_| FsRefusal::Io)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(paths: &[&str]) -> BTreeSet<RepoPath> {
        paths.iter().map(|p| RepoPath::parse(p).unwrap()).collect()
    }

    fn fixture() -> (tempfile::TempDir, ConfinedWorkspace) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(root.join("app")).unwrap();
        std::fs::write(root.join("app/a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(root.join("ro.txt"), "inspect\n").unwrap();
        std::fs::write(tmp.path().join("outside.txt"), "secret").unwrap();
        let ws = ConfinedWorkspace::open(
            &root,
            set(&["app/a.txt"]),
            set(&["ro.txt"]),
            set(&["new/dir/b.txt"]),
        )
        .unwrap();
        (tmp, ws)
    }

    #[test]
    fn serves_scope_and_refuses_everything_else() {
        let (tmp, ws) = fixture();
        let root = tmp.path().join("ws");
        assert_eq!(
            ws.read(&root.join("app/a.txt"), None, None).unwrap(),
            "one\ntwo\nthree\n"
        );
        assert_eq!(
            ws.read(&root.join("app/a.txt"), Some(2), Some(1)).unwrap(),
            "two\n"
        );
        assert_eq!(
            ws.read(&root.join("ro.txt"), None, None).unwrap(),
            "inspect\n"
        );
        ws.write(&root.join("app/a.txt"), "changed\n").unwrap();
        ws.write(&root.join("new/dir/b.txt"), "created\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("new/dir/b.txt")).unwrap(),
            "created\n"
        );

        let refused = [
            (ws.write(&root.join("ro.txt"), "x"), FsRefusal::ReadOnly),
            (
                ws.write(&root.join("other.txt"), "x"),
                FsRefusal::NotInScope,
            ),
            (
                ws.write(&tmp.path().join("outside.txt"), "x"),
                FsRefusal::OutsideWorkspace,
            ),
            (
                ws.write(Path::new("/etc/passwd"), "x"),
                FsRefusal::OutsideWorkspace,
            ),
            (
                ws.write(Path::new("app/a.txt"), "x"),
                FsRefusal::OutsideWorkspace,
            ),
            (
                ws.write(&root.join("app/../../outside.txt"), "x"),
                FsRefusal::UnsafePath,
            ),
            (
                ws.write(&root.join("app/./a.txt"), "x"),
                FsRefusal::UnsafePath,
            ),
            (
                ws.write(Path::new(&format!("{}//app/a.txt", root.display())), "x"),
                FsRefusal::UnsafePath,
            ),
            (
                ws.write(Path::new(&format!("{}/app/a.txt/", root.display())), "x"),
                FsRefusal::UnsafePath,
            ),
            (
                ws.read(&tmp.path().join("outside.txt"), None, None)
                    .map(drop),
                FsRefusal::OutsideWorkspace,
            ),
            (
                ws.read(&root.join("app/../../outside.txt"), None, None)
                    .map(drop),
                FsRefusal::UnsafePath,
            ),
            (
                ws.read(&root.join("unlisted.txt"), None, None).map(drop),
                FsRefusal::NotInScope,
            ),
        ];
        for (result, expected) in refused {
            assert_eq!(result, Err(expected));
        }
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("outside.txt")).unwrap(),
            "secret"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("ro.txt")).unwrap(),
            "inspect\n"
        );
    }

    #[test]
    fn never_follows_symlinks() {
        let (tmp, ws) = fixture();
        let root = tmp.path().join("ws");
        std::fs::remove_file(root.join("app/a.txt")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside.txt"), root.join("app/a.txt")).unwrap();
        assert_eq!(
            ws.read(&root.join("app/a.txt"), None, None),
            Err(FsRefusal::Symlink)
        );
        assert_eq!(
            ws.write(&root.join("app/a.txt"), "x"),
            Err(FsRefusal::Symlink)
        );
        std::os::unix::fs::symlink(tmp.path(), root.join("new")).unwrap();
        assert_eq!(
            ws.write(&root.join("new/dir/b.txt"), "x"),
            Err(FsRefusal::Symlink)
        );
        assert!(!tmp.path().join("dir").exists());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("outside.txt")).unwrap(),
            "secret"
        );
    }

    #[test]
    fn refuses_invalid_utf8_and_oversize() {
        let (tmp, ws) = fixture();
        let root = tmp.path().join("ws");
        std::fs::write(root.join("app/a.txt"), b"\xff\xfe").unwrap();
        assert_eq!(
            ws.read(&root.join("app/a.txt"), None, None),
            Err(FsRefusal::NotUtf8)
        );
        let big = "x".repeat(MAX_FS_BYTES + 1);
        assert_eq!(
            ws.write(&root.join("app/a.txt"), &big),
            Err(FsRefusal::TooLarge)
        );
    }

    proptest::proptest! {
        /// Reject, never repair: an accepted path is exactly `root/<repo path>` as written, with
        /// no `.`/`..`/empty segment, and every other spelling is refused.
        #[test]
        fn resolve_accepts_only_exact_spellings_inside_the_root(
            tokens in proptest::collection::vec(
                proptest::sample::select(vec!["..", ".", "", "app", "a.txt", "x y", "\u{fc}", "etc", "CON"]),
                0..6,
            ),
            absolute_elsewhere in proptest::bool::ANY,
        ) {
            let (_tmp, ws) = fixture();
            let root = ws.root.clone();
            let tail = tokens.join("/");
            let raw = if absolute_elsewhere { format!("/{tail}") } else { format!("{}/{tail}", root.display()) };
            match ws.resolve(Path::new(&raw)) {
                Ok(rel) => {
                    proptest::prop_assert!(!absolute_elsewhere);
                    proptest::prop_assert_eq!(format!("{}/{}", root.display(), rel.as_str()), raw.clone());
                    proptest::prop_assert!(rel.segments().all(|s| !s.is_empty() && s != "." && s != ".."));
                }
                Err(_) => {
                    let clean = !tokens.is_empty()
                        && tokens.iter().all(|t| !t.is_empty() && *t != "." && *t != "..");
                    proptest::prop_assert!(absolute_elsewhere || !clean || RepoPath::parse(&tail).is_err(), "{raw}");
                }
            }
        }
    }
}
