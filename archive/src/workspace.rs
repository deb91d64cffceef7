//! Coding workspaces (reference §7): materialise approved files into a fresh private directory,
//! harvest what is there afterwards without following links, and remove the tree.
//!
//! All file-system work below the root goes through one `cap_std::fs::Dir` handle opened on the
//! root (the one ambient call); names are relative, resolved inside the handle, never joined onto
//! host paths, and links are never followed (`O_NOFOLLOW`, `open_dir_nofollow`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use cap_fs_ext::{DirExt as _, FollowSymlinks, OpenOptionsFollowExt as _};
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt as _, OpenOptions, OpenOptionsExt as _};
use snapshot::{BaselineFiles, FileOp, RepoPath, detect_collisions, is_secret_sensitive_path};
use vocab::Sha256;

use crate::error::{ArchiveError, EntryName};

/// Mode of every directory this crate creates.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// Mode of every file this crate creates.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// Most directory entries a harvest visits before it gives up (a tree the container filled with
/// junk must not make the host walk forever).
pub const MAX_HARVEST_ENTRIES: usize = 10_000;
/// Most content bytes a harvest reads (4 × the archive budget: unchanged files plus changes).
pub const MAX_HARVEST_BYTES: u64 = 4 * crate::envelope::MAX_ARCHIVE_BYTES as u64;
/// Deepest directory nesting a harvest descends into.
pub const MAX_HARVEST_DEPTH: usize = 64;

/// A harvest violation kind. `Display` gives the wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ViolationKind {
    /// A symbolic link (to a file or a directory); never read or followed.
    Symlink,
    /// A file outside the editable and read-only manifests while new files are not allowed.
    OutsideAllowlist,
    /// An editable file is missing while deletes are not allowed.
    DeleteDenied,
    /// A name that is not a portable path, or a non-regular file (FIFO, socket, device).
    UnsafePath,
    /// A new file at a secret-sensitive path.
    SecretPath,
    /// A read-only file whose bytes changed.
    ReadOnlyModified,
    /// A read-only file that is gone.
    ReadOnlyMissing,
}

impl ViolationKind {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Symlink => "symlink",
            Self::OutsideAllowlist => "outside_allowlist",
            Self::DeleteDenied => "delete_denied",
            Self::UnsafePath => "unsafe_path",
            Self::SecretPath => "secret_path",
            Self::ReadOnlyModified => "read_only_modified",
            Self::ReadOnlyMissing => "read_only_missing",
        }
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One violation: its kind and the (possibly non-portable, lossily decoded) relative path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    pub kind: ViolationKind,
    pub path: String,
}

/// One harvested file. Hashes are of the raw bytes; `content` is the raw bytes (consumers decode
/// strictly). Creates have no `previous_sha256`; deletes have no `new_sha256` and no content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarvestedFile {
    pub path: RepoPath,
    pub op: FileOp,
    pub modified: bool,
    pub previous_sha256: Option<Sha256>,
    pub new_sha256: Option<Sha256>,
    pub content: Option<Vec<u8>>,
}

/// What a harvest found: editable files (updates and creates, sorted by path, then deletes,
/// sorted), violations (sorted), and the total content bytes of `files`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkspaceHarvest {
    pub files: Vec<HarvestedFile>,
    pub violations: Vec<Violation>,
    pub total_content_bytes: u64,
}

/// Harvest options; the default allows neither new files nor deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HarvestOptions {
    pub allow_new_files: bool,
    pub allow_deletes: bool,
}

/// A workspace tree and the manifests it was materialised with.
#[derive(Debug)]
pub struct StagedWorkspace {
    root: PathBuf,
    editable: BTreeMap<RepoPath, Sha256>,
    read_only: BTreeMap<RepoPath, Sha256>,
    owned: bool,
    removed: AtomicBool,
}

/// Creates `root` as a fresh directory with mode 0700. `mkdir` is atomic and fails on anything
/// already there, a dangling link included.
pub(crate) fn create_private_root(root: &Path) -> Result<(), ArchiveError> {
    if root.symlink_metadata().is_ok() {
        return Err(ArchiveError::Workspace {
            detail: "target must not exist".to_owned(),
        });
    }
    let mut builder = std::fs::DirBuilder::new();
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, PRIVATE_DIR_MODE);
    builder.create(root).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            ArchiveError::Workspace {
                detail: "target must not exist".to_owned(),
            }
        } else {
            ArchiveError::workspace_io("cannot create workspace root", &e)
        }
    })
}

/// Opens the root directory handle: the one ambient-authority call. Open first, then check on
/// the handle: `O_NOFOLLOW | O_DIRECTORY` refuses a link or a non-directory at `root` atomically,
/// so nothing can be swapped in between a check and the open.
pub(crate) fn open_root(root: &Path) -> Result<Dir, ArchiveError> {
    let not_a_directory = || ArchiveError::Workspace {
        detail: "workspace root is not a directory".to_owned(),
    };
    let file = open_dir_nofollow(root).map_err(|e| match rustix::io::Errno::from_io_error(&e) {
        Some(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => not_a_directory(),
        _ => ArchiveError::workspace_io("cannot open workspace root", &e),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| ArchiveError::workspace_io("cannot inspect workspace root", &e))?;
    if !meta.is_dir() {
        return Err(not_a_directory());
    }
    Ok(Dir::from_std_file(file))
}

/// `open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`.
fn open_dir_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(std::fs::File::from(fd))
}

fn dir_builder() -> DirBuilder {
    let mut b = DirBuilder::new();
    b.mode(PRIVATE_DIR_MODE);
    b
}

/// Creates the parent directories of `path` inside `dir` (each 0700, no links followed).
pub(crate) fn create_parents(dir: &Dir, path: &RepoPath) -> std::io::Result<()> {
    let builder = dir_builder();
    for prefix in path.parent_prefixes() {
        match dir.symlink_metadata(prefix) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "a non-directory occupies a parent path",
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                dir.create_dir_with(prefix, &builder)?
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` inside `dir`: a new file (`create_new`) or the truncation of an
/// existing regular file; never through a link.
pub(crate) fn write_file(
    dir: &Dir,
    path: &RepoPath,
    bytes: &[u8],
    create: bool,
) -> std::io::Result<()> {
    #[cfg(test)]
    if failpoints::take_write_failure() {
        return Err(std::io::Error::other("injected write failure"));
    }
    if create {
        create_parents(dir, path)?;
    }
    let mut options = OpenOptions::new();
    options
        .write(true)
        .follow(FollowSymlinks::No)
        .mode(PRIVATE_FILE_MODE);
    if create {
        options.create_new(true);
    } else {
        options.truncate(true);
    }
    let mut file = dir.open_with(path.as_str(), &options)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    file.write_all(bytes)?;
    file.flush()
}

/// What [`read_regular`] found at a name the listing showed as a regular file.
#[derive(Debug)]
enum ReadOutcome {
    /// The bytes of a regular file.
    File(Vec<u8>),
    /// A link was swapped in after the listing.
    Link,
    /// Something else (a FIFO, a socket, a device) was swapped in after the listing.
    Special,
    /// The file is larger than the remaining read budget (checked on the handle, before reading).
    OverBudget,
}

/// Opens `rel` without following links and without blocking (`O_NOFOLLOW | O_NONBLOCK`: a FIFO
/// swapped in after the listing cannot stall the read), then checks the handle (`fstat`): only a
/// regular file of at most `limit` bytes is read, and the read itself stops after `limit + 1`
/// bytes (a file that grows past the limit signals an overflow).
fn read_regular(dir: &Dir, rel: &str, limit: u64) -> std::io::Result<ReadOutcome> {
    let nonblock = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits())
        .map_err(|_| std::io::Error::other("O_NONBLOCK does not fit"))?;
    let mut options = OpenOptions::new();
    options
        .read(true)
        .follow(FollowSymlinks::No)
        .custom_flags(nonblock);
    let file = match dir.open_with(rel, &options) {
        Ok(file) => file,
        Err(e) if rustix::io::Errno::from_io_error(&e) == Some(rustix::io::Errno::LOOP) => {
            return Ok(ReadOutcome::Link);
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if meta.file_type().is_symlink() {
        return Ok(ReadOutcome::Link);
    }
    if !meta.is_file() {
        return Ok(ReadOutcome::Special);
    }
    if meta.len() > limit {
        return Ok(ReadOutcome::OverBudget);
    }
    // Sized from the length on the handle (at most the limit): one allocation for the usual case.
    let capacity = usize::try_from(meta.len()).unwrap_or(0).saturating_add(1);
    let mut out = Vec::with_capacity(capacity);
    file.take(limit.saturating_add(1)).read_to_end(&mut out)?;
    Ok(ReadOutcome::File(out))
}

/// Removes `root` and everything below it without following links. A missing root is success.
fn remove_tree(root: &Path) -> Result<(), ArchiveError> {
    #[cfg(test)]
    if failpoints::take_cleanup_failure() {
        return Err(ArchiveError::Cleanup {
            detail: "injected failure".to_owned(),
        });
    }
    let cleanup = |e: std::io::Error| ArchiveError::Cleanup {
        detail: e.kind().to_string(),
    };
    match root.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(cleanup(e)),
        Ok(_) => {}
    }
    let (Some(parent), Some(name)) = (root.parent(), root.file_name()) else {
        return Err(ArchiveError::Cleanup {
            detail: "workspace root has no parent".to_owned(),
        });
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let parent_dir =
        Dir::open_ambient_dir(parent, cap_std::ambient_authority()).map_err(cleanup)?;
    parent_dir.remove_dir_all(name).map_err(cleanup)
}

/// Reference `materialize_coding_workspace`: creates `root` (must not exist; 0700) and writes the
/// editable and read-only files (0600, parents 0700). The manifests record the SHA-256 of the
/// exact bytes written.
///
/// # Errors
/// `WORKSPACE_SECRET_PATH` for a secret-sensitive path, `WORKSPACE_UNSAFE_PATH` when paths collide
/// (within or across the two sets); `REPOSITORY_PATCH_ARCHIVE_WORKSPACE` when the root exists or a
/// write fails (the partial tree is then removed; a failed removal is `CODING_WORKSPACE_CLEANUP`).
///
/// # Security
/// Nothing is created before every path is checked; writes never follow links.
pub fn materialize_workspace(
    root: &Path,
    editable: &BaselineFiles,
    read_only: &BaselineFiles,
) -> Result<StagedWorkspace, ArchiveError> {
    materialize_workspace_from(root, editable, read_only, &StartOverlay::new())
}

/// A follow-up turn's starting tree over the baseline: `path → Some(content)` writes `content`
/// there (an update of a baseline file, or a file an earlier attempt created), `path → None`
/// leaves a baseline file out (an earlier attempt deleted it).
pub type StartOverlay = BTreeMap<RepoPath, Option<String>>;

/// [`materialize_workspace`] for a follow-up turn: the manifests are the baseline's, so a
/// [`StagedWorkspace::harvest`] still reports every change against the baseline, while the tree
/// written is the baseline with `start` applied (see [`StartOverlay`]).
///
/// # Errors
/// As [`materialize_workspace`]; `WORKSPACE_UNSAFE_PATH` also when an overlay path is a
/// read-only file, or an absent entry names no baseline file.
///
/// # Security
/// As [`materialize_workspace`]: every path (overlay paths included) is checked before anything
/// is created.
pub fn materialize_workspace_from(
    root: &Path,
    editable: &BaselineFiles,
    read_only: &BaselineFiles,
    start: &StartOverlay,
) -> Result<StagedWorkspace, ArchiveError> {
    let created = start.keys().filter(|p| !editable.contains_key(*p));
    for path in editable
        .keys()
        .chain(read_only.keys())
        .chain(created.clone())
    {
        if is_secret_sensitive_path(path.as_str()) {
            return Err(ArchiveError::WorkspaceSecretPath {
                path: EntryName::from_str(path.as_str()),
            });
        }
    }
    // An overlay never writes a read-only file, and leaves out only baseline files.
    let misplaced = start.iter().find(|(p, content)| {
        read_only.contains_key(*p) || (content.is_none() && !editable.contains_key(*p))
    });
    if let Some((path, _)) = misplaced {
        return Err(ArchiveError::WorkspaceUnsafePath {
            path: EntryName::from_str(path.as_str()),
        });
    }
    if let Err(c) = detect_collisions(editable.keys().chain(read_only.keys()).chain(created)) {
        let path = match &c {
            snapshot::Collision::Duplicate(p)
            | snapshot::Collision::CaseFold(p, _)
            | snapshot::Collision::FileDirectoryPrefix(p, _) => p.as_str().to_owned(),
        };
        return Err(ArchiveError::WorkspaceUnsafePath {
            path: EntryName::from_str(&path),
        });
    }
    create_private_root(root)?;
    let ws = StagedWorkspace {
        root: root.to_owned(),
        editable: editable
            .iter()
            .map(|(p, c)| (p.clone(), Sha256::of(c.as_bytes())))
            .collect(),
        read_only: read_only
            .iter()
            .map(|(p, c)| (p.clone(), Sha256::of(c.as_bytes())))
            .collect(),
        owned: true,
        removed: AtomicBool::new(false),
    };
    let written = open_root(root).and_then(|dir| {
        let baseline = editable
            .iter()
            .filter(|(p, _)| !start.contains_key(*p))
            .map(|(p, c)| (p, c.as_str()));
        let started = start
            .iter()
            .filter_map(|(p, c)| c.as_deref().map(|c| (p, c)));
        let read_only = read_only.iter().map(|(p, c)| (p, c.as_str()));
        for (path, content) in baseline.chain(started).chain(read_only) {
            write_file(&dir, path, content.as_bytes(), true)
                .map_err(|e| ArchiveError::workspace_io("cannot write workspace file", &e))?;
        }
        Ok(())
    });
    match written {
        Ok(()) => Ok(ws),
        Err(e) => {
            ws.cleanup()?;
            Err(e)
        }
    }
}

impl StagedWorkspace {
    /// Wraps an existing tree (e.g. the container's `/workspace`) with its manifests. The tree is
    /// not owned: [`StagedWorkspace::cleanup`] leaves it in place.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_ARCHIVE_WORKSPACE` when `root` is not a directory (a link is refused).
    pub fn open_existing(
        root: &Path,
        editable_manifest: BTreeMap<RepoPath, Sha256>,
        read_only_manifest: BTreeMap<RepoPath, Sha256>,
    ) -> Result<Self, ArchiveError> {
        open_root(root)?;
        Ok(Self {
            root: root.to_owned(),
            editable: editable_manifest,
            read_only: read_only_manifest,
            owned: false,
            removed: AtomicBool::new(false),
        })
    }

    /// The tree's root directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `path → sha256` of the editable files as materialised (for a staged archive: the
    /// approved pre-run baseline).
    #[must_use]
    pub fn editable_manifest(&self) -> &BTreeMap<RepoPath, Sha256> {
        &self.editable
    }

    /// `path → sha256` of the read-only inspection files.
    #[must_use]
    pub fn read_only_manifest(&self) -> &BTreeMap<RepoPath, Sha256> {
        &self.read_only
    }

    /// Removes the tree (owned workspaces only). Idempotent: after a success further calls do
    /// nothing; after a failure the next call tries again.
    ///
    /// # Errors
    /// `CODING_WORKSPACE_CLEANUP` when the removal fails; the remaining tree stays in place.
    pub fn cleanup(&self) -> Result<(), ArchiveError> {
        if !self.owned || self.removed.load(Ordering::SeqCst) {
            return Ok(());
        }
        remove_tree(&self.root)?;
        self.removed.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Removes the build byproducts a command in the turn left in the tree, before the harvest:
    /// every directory named one of `names` (for example `__pycache__`, `.pytest_cache`) that
    /// holds no file of either manifest, with everything under it. Links are never followed (a
    /// link with such a name is left for the harvest to report). Returns how many directories
    /// were removed.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_ARCHIVE_WORKSPACE` when the tree cannot be read or a byproduct cannot
    /// be removed; `REPOSITORY_PATCH_ARCHIVE_BUDGET` past the harvest's entry or depth limits.
    pub fn remove_byproducts(&self, names: &[&str]) -> Result<u32, ArchiveError> {
        let root = open_root(&self.root)?;
        let io = |e: std::io::Error| ArchiveError::workspace_io("cannot read workspace", &e);
        let over = || ArchiveError::Budget {
            detail: "staged tree exceeds harvest limit",
        };
        let holds_manifest_file = |prefix: &str| {
            self.editable
                .keys()
                .chain(self.read_only.keys())
                .any(|p| p.as_str().starts_with(prefix))
        };
        let mut removed = 0_u32;
        let mut visited = 0_usize;
        let mut stack: Vec<(Dir, String, usize)> = vec![(root, String::new(), 0)];
        while let Some((dir, prefix, depth)) = stack.pop() {
            let mut subdirs = Vec::new();
            for entry in dir.entries().map_err(io)? {
                let entry = entry.map_err(io)?;
                visited += 1;
                if visited > MAX_HARVEST_ENTRIES {
                    return Err(over());
                }
                if !entry.file_type().map_err(io)?.is_dir() {
                    continue;
                }
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                subdirs.push(name);
            }
            for name in subdirs {
                let rel = format!("{prefix}{name}/");
                if names.contains(&name.as_str()) && !holds_manifest_file(&rel) {
                    dir.remove_dir_all(&name).map_err(io)?;
                    removed += 1;
                    continue;
                }
                if depth + 1 > MAX_HARVEST_DEPTH {
                    return Err(over());
                }
                let sub = dir.open_dir_nofollow(&name).map_err(io)?;
                stack.push((sub, rel, depth + 1));
            }
        }
        Ok(removed)
    }

    /// Reference `harvest_coding_workspace`: walks the whole tree without following links and
    /// classifies every entry against the manifests (see [`WorkspaceHarvest`], [`ViolationKind`]).
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_ARCHIVE_WORKSPACE` when the tree cannot be read;
    /// `REPOSITORY_PATCH_ARCHIVE_BUDGET` when it holds more than [`MAX_HARVEST_ENTRIES`] entries,
    /// nests deeper than `MAX_HARVEST_DEPTH`, or more than [`MAX_HARVEST_BYTES`] content bytes.
    ///
    /// # Security
    /// Links are reported, never read or followed; files outside the manifests are not read
    /// unless new files are allowed; secret-sensitive new files are never read.
    pub fn harvest(&self, options: HarvestOptions) -> Result<WorkspaceHarvest, ArchiveError> {
        let root = open_root(&self.root)?;
        let io = |e: std::io::Error| ArchiveError::workspace_io("cannot read workspace", &e);
        let mut found: BTreeMap<RepoPath, HarvestedFile> = BTreeMap::new();
        let mut violations: Vec<Violation> = Vec::new();
        let mut present: BTreeSet<RepoPath> = BTreeSet::new();
        let mut read_bytes = 0_u64;
        let mut visited = 0_usize;
        let mut stack: Vec<(Dir, String, usize)> = vec![(root, String::new(), 0)];
        while let Some((dir, prefix, depth)) = stack.pop() {
            for entry in dir.entries().map_err(io)? {
                let entry = entry.map_err(io)?;
                visited += 1;
                if visited > MAX_HARVEST_ENTRIES {
                    return Err(ArchiveError::Budget {
                        detail: "staged tree exceeds harvest limit",
                    });
                }
                let raw_name = entry.file_name();
                let Some(name) = raw_name.to_str() else {
                    let lossy = raw_name.to_string_lossy();
                    violations.push(Violation {
                        kind: ViolationKind::UnsafePath,
                        path: format!("{prefix}{lossy}"),
                    });
                    continue;
                };
                let rel = format!("{prefix}{name}");
                let file_type = entry.file_type().map_err(io)?;
                if file_type.is_symlink() {
                    violations.push(Violation {
                        kind: ViolationKind::Symlink,
                        path: rel,
                    });
                    continue;
                }
                if file_type.is_dir() {
                    if depth + 1 > MAX_HARVEST_DEPTH {
                        return Err(ArchiveError::Budget {
                            detail: "staged tree exceeds harvest limit",
                        });
                    }
                    let sub = dir.open_dir_nofollow(name).map_err(io)?;
                    stack.push((sub, format!("{rel}/"), depth + 1));
                    continue;
                }
                let Ok(path) = RepoPath::parse(&rel) else {
                    violations.push(Violation {
                        kind: ViolationKind::UnsafePath,
                        path: rel,
                    });
                    continue;
                };
                if !file_type.is_file() {
                    violations.push(Violation {
                        kind: ViolationKind::UnsafePath,
                        path: rel,
                    });
                    continue;
                }
                let editable = self.editable.get(&path);
                let read_only = self.read_only.get(&path);
                if editable.is_none() && read_only.is_none() {
                    if is_secret_sensitive_path(path.as_str()) {
                        violations.push(Violation {
                            kind: ViolationKind::SecretPath,
                            path: rel,
                        });
                        continue;
                    }
                    if !options.allow_new_files {
                        violations.push(Violation {
                            kind: ViolationKind::OutsideAllowlist,
                            path: rel,
                        });
                        continue;
                    }
                }
                #[cfg(test)]
                failpoints::before_read(&dir, name);
                let bytes =
                    match read_regular(&dir, name, MAX_HARVEST_BYTES - read_bytes).map_err(io)? {
                        ReadOutcome::File(bytes) => bytes,
                        ReadOutcome::Link => {
                            violations.push(Violation {
                                kind: ViolationKind::Symlink,
                                path: rel,
                            });
                            continue;
                        }
                        ReadOutcome::Special => {
                            violations.push(Violation {
                                kind: ViolationKind::UnsafePath,
                                path: rel,
                            });
                            continue;
                        }
                        ReadOutcome::OverBudget => {
                            return Err(ArchiveError::Budget {
                                detail: "staged tree exceeds harvest limit",
                            });
                        }
                    };
                read_bytes += bytes.len() as u64;
                if read_bytes > MAX_HARVEST_BYTES {
                    return Err(ArchiveError::Budget {
                        detail: "staged tree exceeds harvest limit",
                    });
                }
                let new_sha = Sha256::of(&bytes);
                present.insert(path.clone());
                if let Some(previous) = read_only {
                    if *previous != new_sha {
                        violations.push(Violation {
                            kind: ViolationKind::ReadOnlyModified,
                            path: rel,
                        });
                    }
                    continue;
                }
                let (op, previous) = match editable {
                    Some(previous) => (FileOp::Update, Some(*previous)),
                    None => (FileOp::Create, None),
                };
                let file = HarvestedFile {
                    path: path.clone(),
                    op,
                    modified: previous != Some(new_sha),
                    previous_sha256: previous,
                    new_sha256: Some(new_sha),
                    content: Some(bytes),
                };
                found.insert(path, file);
            }
        }
        let total_content_bytes = found
            .values()
            .filter_map(|f| f.content.as_ref())
            .map(|c| c.len() as u64)
            .sum();
        let mut files: Vec<HarvestedFile> = found.into_values().collect();
        for (path, previous) in &self.editable {
            if present.contains(path) {
                continue;
            }
            if options.allow_deletes {
                files.push(HarvestedFile {
                    path: path.clone(),
                    op: FileOp::Delete,
                    modified: true,
                    previous_sha256: Some(*previous),
                    new_sha256: None,
                    content: None,
                });
            } else {
                violations.push(Violation {
                    kind: ViolationKind::DeleteDenied,
                    path: path.to_string(),
                });
            }
        }
        for path in self.read_only.keys() {
            if !present.contains(path) {
                violations.push(Violation {
                    kind: ViolationKind::ReadOnlyMissing,
                    path: path.to_string(),
                });
            }
        }
        violations.sort();
        Ok(WorkspaceHarvest {
            files,
            violations,
            total_content_bytes,
        })
    }
}

#[cfg(test)]
pub(crate) mod failpoints {
    //! Test-only fault injection: removal and write failures cannot be provoked for `root`.
    use std::cell::Cell;

    type BeforeRead = Box<dyn FnMut(&cap_std::fs::Dir, &str)>;

    thread_local! {
        pub(crate) static FAIL_CLEANUPS: Cell<u32> = const { Cell::new(0) };
        pub(crate) static FAIL_WRITE_AFTER: Cell<Option<usize>> = const { Cell::new(None) };
        /// Runs in the harvest between the listing and the read of each file.
        pub(crate) static BEFORE_READ: std::cell::RefCell<Option<BeforeRead>> =
            const { std::cell::RefCell::new(None) };
    }

    pub(crate) fn before_read(dir: &cap_std::fs::Dir, name: &str) {
        BEFORE_READ.with(|hook| {
            if let Some(hook) = hook.borrow_mut().as_mut() {
                hook(dir, name);
            }
        });
    }

    pub(crate) fn take_cleanup_failure() -> bool {
        FAIL_CLEANUPS.with(|c| {
            let n = c.get();
            if n > 0 {
                c.set(n - 1);
            }
            n > 0
        })
    }

    pub(crate) fn take_write_failure() -> bool {
        FAIL_WRITE_AFTER.with(|c| match c.get() {
            Some(0) => {
                c.set(None);
                true
            }
            Some(n) => {
                c.set(Some(n - 1));
                false
            }
            None => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline() -> BaselineFiles {
        [("app/a.txt", "a\n"), ("app/b/c.txt", "c\n")]
            .into_iter()
            .map(|(k, v)| (RepoPath::parse(k).unwrap(), v.to_owned()))
            .collect()
    }

    /// Reference: a strict cleanup failure raises `CODING_WORKSPACE_CLEANUP` once, the tree stays,
    /// the next attempt succeeds, and later calls do nothing.
    #[test]
    fn cleanup_failure_is_reported_then_retried_then_idempotent() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        let ws = materialize_workspace(&root, &baseline(), &BTreeMap::new()).unwrap();
        failpoints::FAIL_CLEANUPS.with(|c| c.set(1));
        let e = ws.cleanup().unwrap_err();
        assert_eq!(e.code(), "CODING_WORKSPACE_CLEANUP");
        assert!(root.join("app/a.txt").exists());
        ws.cleanup().unwrap();
        assert!(!root.exists());
        ws.cleanup().unwrap();
    }

    /// A failure part-way through materialisation removes the partial tree.
    #[test]
    fn partial_materialisation_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        failpoints::FAIL_WRITE_AFTER.with(|c| c.set(Some(1)));
        let e = materialize_workspace(&root, &baseline(), &BTreeMap::new()).unwrap_err();
        assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_WORKSPACE");
        assert!(!root.exists());
    }

    /// When that removal fails too, the cleanup error replaces the write error and the partial
    /// tree remains for the operator.
    #[test]
    fn failed_removal_after_partial_materialisation_reports_cleanup() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        failpoints::FAIL_WRITE_AFTER.with(|c| c.set(Some(1)));
        failpoints::FAIL_CLEANUPS.with(|c| c.set(1));
        let e = materialize_workspace(&root, &baseline(), &BTreeMap::new()).unwrap_err();
        assert_eq!(e.code(), "CODING_WORKSPACE_CLEANUP");
        assert!(root.join("app/a.txt").exists());
        assert!(!root.join("app/b/c.txt").exists());
    }

    /// A follow-up's starting tree: the overlay's updates, creates and absences are on disk,
    /// while the harvest of that untouched tree reports them against the baseline.
    #[test]
    fn a_starting_tree_is_written_and_harvested_against_the_baseline() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        let path = |p: &str| RepoPath::parse(p).unwrap();
        let start: StartOverlay = [
            (path("app/a.txt"), Some("a2\n".to_owned())),
            (path("app/b/c.txt"), None),
            (path("app/new.txt"), Some("n\n".to_owned())),
        ]
        .into_iter()
        .collect();
        let ws = materialize_workspace_from(&root, &baseline(), &BTreeMap::new(), &start).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("app/a.txt")).unwrap(),
            "a2\n"
        );
        assert!(!root.join("app/b/c.txt").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("app/new.txt")).unwrap(),
            "n\n"
        );
        assert_eq!(ws.editable_manifest().len(), 2);
        let harvest = ws
            .harvest(HarvestOptions {
                allow_new_files: true,
                allow_deletes: true,
            })
            .unwrap();
        let ops: Vec<(&str, &str)> = harvest
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.op.as_str()))
            .collect();
        assert_eq!(
            ops,
            [
                ("app/a.txt", "update"),
                ("app/new.txt", "create"),
                ("app/b/c.txt", "delete")
            ]
        );
        ws.cleanup().unwrap();

        // An overlay never writes a read-only file, nor leaves out a file that is not in the
        // baseline; nothing is created then.
        let read_only: BaselineFiles = [(path("docs/r.txt"), "r\n".to_owned())].into();
        for bad in [
            [(path("docs/r.txt"), Some("x".to_owned()))],
            [(path("app/none.txt"), None)],
        ] {
            let e = materialize_workspace_from(&root, &baseline(), &read_only, &bad.into())
                .unwrap_err();
            assert_eq!(e.code(), "WORKSPACE_UNSAFE_PATH");
            assert!(!root.exists());
        }
    }

    /// Replaces `name` in `dir` by a FIFO (between the harvest's listing and its read).
    fn swap_in_fifo(dir: &Dir, name: &str) {
        dir.remove_file(name).unwrap();
        rustix::fs::mknodat(
            dir,
            name,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    /// Finding: the harvest opened files without `O_NONBLOCK` after a type check on the listing,
    /// so a FIFO swapped in between blocked it for good. Now it is reported as an unsafe path.
    /// (On the old code the harvest blocks in `open`; the guard below then opens the FIFO's
    /// write side so the test fails instead of hanging.)
    #[test]
    fn r_fifo_swapped_in_during_harvest_does_not_block() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        let ws = materialize_workspace(&root, &baseline(), &BTreeMap::new()).unwrap();
        let fifo = root.join("app/a.txt");
        let harvest = snapshot::testkit::unless_blocked_on_fifo("the harvest", &fifo, move || {
            failpoints::BEFORE_READ.with(|hook| {
                *hook.borrow_mut() = Some(Box::new(|dir: &Dir, name: &str| {
                    if name == "a.txt" {
                        swap_in_fifo(dir, name);
                    }
                }));
            });
            ws.harvest(HarvestOptions::default())
        });
        let harvest = harvest.unwrap();
        // As for a FIFO seen in the listing: an unsafe path, and the editable file is gone.
        assert_eq!(
            harvest.violations,
            [
                Violation {
                    kind: ViolationKind::DeleteDenied,
                    path: "app/a.txt".to_owned(),
                },
                Violation {
                    kind: ViolationKind::UnsafePath,
                    path: "app/a.txt".to_owned(),
                }
            ]
        );
        assert_eq!(
            harvest
                .files
                .iter()
                .map(|f| f.path.as_str())
                .collect::<Vec<_>>(),
            ["app/b/c.txt"]
        );
    }

    /// A link swapped in between the listing and the read is a symlink violation, never read.
    #[test]
    fn r_link_swapped_in_during_harvest_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        let ws = materialize_workspace(&root, &baseline(), &BTreeMap::new()).unwrap();
        failpoints::BEFORE_READ.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(|dir: &Dir, name: &str| {
                if name == "a.txt" {
                    dir.remove_file(name).unwrap();
                    dir.symlink("b/c.txt", name).unwrap();
                }
            }));
        });
        let harvest = ws.harvest(HarvestOptions::default());
        failpoints::BEFORE_READ.with(|hook| *hook.borrow_mut() = None);
        assert_eq!(
            harvest.unwrap().violations,
            [
                Violation {
                    kind: ViolationKind::Symlink,
                    path: "app/a.txt".to_owned(),
                },
                Violation {
                    kind: ViolationKind::DeleteDenied,
                    path: "app/a.txt".to_owned(),
                }
            ]
        );
    }

    /// Finding: `open_root` checked with `lstat` and then opened following links. The open itself
    /// now refuses a link (and a non-directory) at the root.
    #[test]
    fn r_open_root_refuses_links_on_the_handle() {
        let tmp = tempfile::tempdir().unwrap();
        let [real, link, file] = snapshot::testkit::dir_link_and_file(tmp.path());
        for bad in [&link, &file] {
            let e = open_root(bad).unwrap_err();
            assert_eq!(
                e.to_string(),
                "REPOSITORY_PATCH_ARCHIVE_WORKSPACE: workspace root is not a directory"
            );
        }
        assert_eq!(
            open_root(&tmp.path().join("missing")).unwrap_err().code(),
            "REPOSITORY_PATCH_ARCHIVE_WORKSPACE"
        );
        open_root(&real).unwrap();
    }

    #[test]
    fn violation_kinds_have_wire_names() {
        let names: Vec<String> = [
            ViolationKind::Symlink,
            ViolationKind::OutsideAllowlist,
            ViolationKind::DeleteDenied,
            ViolationKind::UnsafePath,
            ViolationKind::SecretPath,
            ViolationKind::ReadOnlyModified,
            ViolationKind::ReadOnlyMissing,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            names,
            [
                "symlink",
                "outside_allowlist",
                "delete_denied",
                "unsafe_path",
                "secret_path",
                "read_only_modified",
                "read_only_missing"
            ]
        );
    }
}
