//! Git snapshots at a pinned commit: the commit's complete tree, read from the object database.
//!
//! The loader runs the `git` binary rather than linking `gix`: git is the authority on its own
//! object format (packs, alternates, SHA-256 object format, future extensions), and spawning it
//! keeps gix's compile cost and a second object parser out of this crate. Every git process runs
//! with a cleared environment (only `PATH`, plus settings that disable system/global config,
//! replace refs, lazy fetches, prompts and every transport), so `GIT_DIR`, user config or replace
//! refs cannot redirect what is read. The loader runs only `rev-parse`, `cat-file` and `ls-tree`;
//! the worktree and the index are never read. ([`work_tree_state`], which only informs a person
//! that uncommitted changes are not part of a snapshot, is the one function that looks at them.)
//! Every git process, here and in the other crates, is started by the launcher ([`Git`]).
//!
//! [`GitSnapshot::load`] lists the tree with one `git ls-tree -r -z --full-tree <commit>` and
//! streams every blob through one `git cat-file --batch` process, hashing with `sha2` (SHA-NI is
//! detected at run time). Every tree entry is kept with a typed [`EntryKind`]; the file manifest
//! is the set of [`EntryKind::File`] entries. The canonical form behind
//! [`GitSnapshot::snapshot_digest`] is documented in `docs/SNAPSHOT.md`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;
use sha2::Digest as _;
use unicode_normalization::{IsNormalized, UnicodeNormalization as _, is_nfc_quick};

use crate::context::RepositorySnapshotEvidence;
use crate::error::SnapshotError;
use crate::guard::CreateAbsence;
use crate::path::{PathRejection, RepoPath, casefold};
use crate::selection::BaselineFiles;
use vocab::Sha256;
use vocab::Untrusted;

/// The accessors a tree entry has however it was listed (`TreeEntry`, `ListedEntry`): both
/// hold `raw_path`, `mode`, `object_id` and `size` as `ls-tree` gave them.
macro_rules! ls_tree_entry_accessors {
    () => {
        /// The name bytes exactly as stored in the tree.
        #[must_use]
        pub fn raw_path(&self) -> &[u8] {
            &self.raw_path
        }
        /// The name as text, or `None` when it is not UTF-8.
        #[must_use]
        pub fn path(&self) -> Option<&str> {
            std::str::from_utf8(&self.raw_path).ok()
        }
        /// The git mode as `ls-tree` prints it (`100644`, `100755`, `120000`, `160000`, …).
        #[must_use]
        pub fn mode(&self) -> &str {
            &self.mode
        }
        /// The git object id (lowercase hex; 40 digits for SHA-1 repositories, 64 for SHA-256).
        #[must_use]
        pub fn object_id(&self) -> &str {
            &self.object_id
        }
        /// Blob size in bytes (`None` for gitlinks, whose object is not in this repository).
        #[must_use]
        pub fn size(&self) -> Option<u64> {
            self.size
        }
    };
}

mod launch;
mod listing;
mod process;
mod revision;

use launch::capture;
pub use launch::{Git, GitCancel, GitStream};
pub use listing::{ListedKind, TreeListing};
use process::{Deadline, git_error};
pub use process::{GIT_DEADLINE, GitLaunchError};
pub use revision::{WorkTreeState, resolve_commit, work_tree_state};

/// Schema id of the canonical snapshot document hashed by [`GitSnapshot::snapshot_digest`].
pub const SNAPSHOT_SCHEMA: &str = "patch_candidate.repository_snapshot.v1";

/// Read size for streamed blob contents.
const READ_BUFFER_BYTES: usize = 1024 * 1024;
/// Parallel `cat-file --batch` processes: git inflates objects on one core per process, and the
/// per-object pipe writes are its main overhead over a bare read.
const CAT_FILE_WORKERS: usize = 2;
/// Most bytes one [`GitSnapshot::read_files`] call reads (4 × the archive budget, like the
/// harvest: the selected files plus the read-only inspection files fit well within it).
pub const MAX_READ_FILES_BYTES: u64 = 64 * 1024 * 1024;
/// Most bytes of stdout or stderr kept from a short git command (`rev-parse`, `cat-file -t`).
const SMALL_OUTPUT_BYTES: usize = 64 * 1024;
/// Longest `ls-tree -z` record read (mode, type, object id and a path far beyond `PATH_MAX`).
const MAX_LS_TREE_RECORD_BYTES: u64 = 64 * 1024;
/// Longest `cat-file --batch` header read (`<oid> SP <type> SP <size> LF` is under 100 bytes).
const HEADER_BYTES: u64 = 256;
/// Requested capacity of the cat-file output pipe (the unprivileged Linux maximum).
const PIPE_BYTES: usize = 1024 * 1024;
/// A read shorter than this is "short" for [`CoalescingReader`].
const COALESCE_BELOW: usize = 64 * 1024;
/// The pause after a short read.
const COALESCE_PAUSE: std::time::Duration = std::time::Duration::from_micros(200);

/// What a tree entry is, and why it is excluded from the manifest when it is not a plain file.
///
/// Classification order (the first that applies wins): [`Self::NonUtf8Path`],
/// [`Self::NonPortablePath`], then the entry type ([`Self::Submodule`], [`Self::Symlink`],
/// [`Self::Executable`], [`Self::UnsupportedMode`]), then [`Self::CaseFoldCollision`], then
/// [`Self::NonUtf8Content`]; an entry that passes everything is a [`Self::File`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EntryKind {
    /// A regular (`100644`) blob with a portable name and exact UTF-8 content: in the manifest.
    File,
    /// The name is not valid UTF-8 (recorded hex-encoded).
    NonUtf8Path,
    /// The name fails the portable path profile or the canonical rule.
    NonPortablePath,
    /// A gitlink (`160000`): a submodule commit, not content of this repository.
    Submodule,
    /// A symbolic link (`120000`).
    Symlink,
    /// An executable blob (`100755`).
    Executable,
    /// Any other mode or mode/type pairing.
    UnsupportedMode,
    /// The case-folded path equals another entry's, or one is a case-folded directory prefix of
    /// the other (a case-insensitive checkout could not hold both).
    CaseFoldCollision,
    /// A regular file whose bytes are not exact UTF-8.
    NonUtf8Content,
}

impl EntryKind {
    /// The wire name (`file`, `symlink`, `submodule`, …).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::NonUtf8Path => "non_utf8_path",
            Self::NonPortablePath => "non_portable_path",
            Self::Submodule => "submodule",
            Self::Symlink => "symlink",
            Self::Executable => "executable",
            Self::UnsupportedMode => "unsupported_mode",
            Self::CaseFoldCollision => "case_fold_collision",
            Self::NonUtf8Content => "non_utf8_content",
        }
    }

    /// Why an entry of this kind is (or is not) kept out of the manifest, in words a person
    /// reads next to the path: `committed executable (100755)`, `symlink (120000)`, …
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Self::File => "regular file (100644)",
            Self::NonUtf8Path => "name is not UTF-8",
            Self::NonPortablePath => "name is not a portable path",
            Self::Submodule => "submodule (160000)",
            Self::Symlink => "symlink (120000)",
            Self::Executable => "committed executable (100755)",
            Self::UnsupportedMode => "unsupported git mode",
            Self::CaseFoldCollision => "case-fold collision with another entry",
            Self::NonUtf8Content => "content is not UTF-8",
        }
    }

    /// True for every kind except [`Self::File`].
    #[must_use]
    pub fn is_excluded(self) -> bool {
        self != Self::File
    }
}

impl fmt::Display for EntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of the commit's complete tree (blobs, symlinks and gitlinks; trees are implied by
/// the paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    raw_path: Vec<u8>,
    mode: String,
    object_id: String,
    kind: EntryKind,
    size: Option<u64>,
    content_sha256: Option<Sha256>,
}

impl TreeEntry {
    ls_tree_entry_accessors!();
    /// The name bytes, lowercase hex.
    #[must_use]
    pub fn path_hex(&self) -> String {
        hex::encode(&self.raw_path)
    }
    #[must_use]
    pub fn kind(&self) -> EntryKind {
        self.kind
    }
    /// `sha256:` of the blob bytes (`None` for gitlinks).
    #[must_use]
    pub fn content_sha256(&self) -> Option<Sha256> {
        self.content_sha256
    }

    fn canonical(&self) -> CanonicalEntry<'_> {
        CanonicalEntry {
            content_sha256: self.content_sha256,
            kind: self.kind,
            mode: &self.mode,
            object_id: &self.object_id,
            path: self.path(),
            path_hex: HexBytes(&self.raw_path),
            size: self.size,
        }
    }
}

/// The canonical JSON form of an entry. Field order is the sorted key order; do not reorder.
#[derive(Serialize)]
struct CanonicalEntry<'a> {
    content_sha256: Option<Sha256>,
    kind: EntryKind,
    mode: &'a str,
    object_id: &'a str,
    path: Option<&'a str>,
    path_hex: HexBytes<'a>,
    size: Option<u64>,
}

/// Lowercase hex of a byte string, serialised without an intermediate `String`.
struct HexBytes<'a>(&'a [u8]);

impl fmt::Display for HexBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0_u8; 128];
        for chunk in self.0.chunks(64) {
            let out = buf.get_mut(..chunk.len() * 2).ok_or(fmt::Error)?;
            hex::encode_to_slice(chunk, out).map_err(|_| fmt::Error)?;
            f.write_str(std::str::from_utf8(out).map_err(|_| fmt::Error)?)?;
        }
        Ok(())
    }
}

impl Serialize for HexBytes<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl Serialize for TreeEntry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.canonical().serialize(serializer)
    }
}

/// The complete tree of one commit, classified, with its file manifest.
pub struct GitSnapshot {
    git_dir: PathBuf,
    commit: String,
    entries: Vec<TreeEntry>,
    manifest: BTreeMap<RepoPath, Sha256>,
    folded_entries: HashSet<String>,
    folded_directories: HashSet<String>,
    digest_prefix: sha2::Sha256,
}

impl fmt::Debug for GitSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitSnapshot")
            .field("git_dir", &self.git_dir)
            .field("commit", &self.commit)
            .field("entries", &self.entries.len())
            .field("manifest", &self.manifest.len())
            .finish_non_exhaustive()
    }
}

impl GitSnapshot {
    /// Loads the complete tree of `commit` from the repository at `repo` (a worktree root or a
    /// bare repository; discovery never walks above `repo`).
    ///
    /// # Errors
    /// `REPOSITORY_SNAPSHOT_COMMIT` when `commit` is not 40 lowercase hex digits or does not name
    /// a commit; `REPOSITORY_SNAPSHOT_REPOSITORY` when `repo` is missing or not a repository;
    /// `REPOSITORY_SNAPSHOT_GIT` when git cannot be run or its output is malformed.
    ///
    /// # Security
    /// Reads only the object database through git with a cleared environment; never the worktree
    /// or index, never the network (lazy fetch and every protocol are disabled).
    pub fn load(repo: &Path, commit: &str) -> Result<Self, SnapshotError> {
        Self::load_within(
            repo,
            commit,
            std::env::var_os("PATH").as_deref(),
            GIT_DEADLINE,
        )
    }

    /// [`Self::load`] with an explicit `PATH` and deadline: every git process of the load runs
    /// under one deadline of `limit`.
    fn load_within(
        repo: &Path,
        commit: &str,
        path_var: Option<&OsStr>,
        limit: Duration,
    ) -> Result<Self, SnapshotError> {
        let (git_dir, (raw_entries, blobs)) =
            read_commit(repo, commit, path_var, limit, |deadline, git_dir| {
                read_tree(deadline, git_dir, commit, path_var)
            })?;
        Self::from_raw(git_dir, commit.to_owned(), raw_entries, blobs)
    }

    fn from_raw(
        git_dir: PathBuf,
        commit: String,
        raw_entries: Vec<RawEntry>,
        blobs: Vec<BlobInfo>,
    ) -> Result<Self, SnapshotError> {
        // cat-file answered every blob entry in listing order: pair them up by position.
        let mut blobs = blobs.into_iter();
        let mut paired: Vec<(RawEntry, Option<BlobInfo>)> = Vec::with_capacity(raw_entries.len());
        for raw in raw_entries {
            let blob = match raw.object_type {
                ObjectType::Blob => {
                    let info = blobs.next().ok_or_else(|| {
                        git_error("cat-file answered fewer objects than requested")
                    })?;
                    if info.object_id != raw.object_id {
                        return Err(git_error("cat-file answered out of order"));
                    }
                    Some(info)
                }
                ObjectType::Commit | ObjectType::Tree => None,
            };
            paired.push((raw, blob));
        }
        if blobs.next().is_some() {
            return Err(git_error("cat-file answered more objects than requested"));
        }
        paired.sort_unstable_by(|a, b| a.0.path.cmp(&b.0.path));
        if paired
            .windows(2)
            .any(|w| matches!(w, [a, b] if a.0.path == b.0.path))
        {
            return Err(git_error("tree lists one path twice"));
        }
        // Case-fold keys over the complete tree, of the NFC form (a decomposed name collides
        // with its composed spelling). Non-UTF-8 names fold lossily: a replacement character
        // can only add collisions, never hide one.
        let folded: Vec<String> = paired
            .iter_mut()
            .map(|(e, _)| std::mem::take(&mut e.folded))
            .collect();
        let mut key_counts: HashMap<&str, usize> = HashMap::with_capacity(folded.len());
        let mut folded_directories = HashSet::new();
        for key in &folded {
            *key_counts.entry(key.as_str()).or_insert(0) += 1;
            for (i, _) in key.match_indices('/') {
                if let Some(prefix) = key.get(..i)
                    && !folded_directories.contains(prefix)
                {
                    folded_directories.insert(prefix.to_owned());
                }
            }
        }
        let collides = |key: &str| {
            key_counts.get(key).is_some_and(|n| *n > 1)
                || folded_directories.contains(key)
                || key
                    .match_indices('/')
                    .filter_map(|(i, _)| key.get(..i))
                    .any(|prefix| key_counts.contains_key(prefix))
        };

        let mut entries = Vec::with_capacity(paired.len());
        // Entries are sorted by name bytes, which is `RepoPath` order: the manifest is built in
        // one bulk pass.
        let mut manifest_files: Vec<(RepoPath, Sha256)> = Vec::new();
        for ((raw, blob), key) in paired.into_iter().zip(&folded) {
            let blob = blob.as_ref();
            let repo_path = raw.repo_path;
            let kind = match (&repo_path, raw.mode.as_str(), raw.object_type) {
                (None, _, _) => EntryKind::NonUtf8Path,
                (Some(Err(_)), _, _) => EntryKind::NonPortablePath,
                (_, "160000", ObjectType::Commit) => EntryKind::Submodule,
                (_, "120000", ObjectType::Blob) => EntryKind::Symlink,
                (_, "100755", ObjectType::Blob) => EntryKind::Executable,
                (_, "100644", ObjectType::Blob) if collides(key) => EntryKind::CaseFoldCollision,
                (_, "100644", ObjectType::Blob) if blob.is_some_and(|b| !b.utf8) => {
                    EntryKind::NonUtf8Content
                }
                (_, "100644", ObjectType::Blob) => EntryKind::File,
                _ => EntryKind::UnsupportedMode,
            };
            if kind == EntryKind::File
                && let (Some(Ok(path)), Some(blob)) = (&repo_path, blob)
            {
                manifest_files.push((path.clone(), blob.sha256));
            }
            entries.push(TreeEntry {
                raw_path: raw.path,
                mode: raw.mode,
                object_id: raw.object_id,
                kind,
                size: blob.map(|b| b.size),
                content_sha256: blob.map(|b| b.sha256),
            });
        }

        let manifest: BTreeMap<RepoPath, Sha256> = manifest_files.into_iter().collect();
        let mut digest_prefix = sha2::Sha256::new();
        digest_prefix.update(b"{\"commit\":\"");
        digest_prefix.update(commit.as_bytes());
        digest_prefix.update(b"\",\"entries\":");
        let canonical: Vec<CanonicalEntry<'_>> = entries.iter().map(TreeEntry::canonical).collect();
        serde_json::to_writer(vocab::Sha256Writer(&mut digest_prefix), &canonical)
            .map_err(|_| git_error("tree entries could not be serialised"))?;
        digest_prefix.update(b",\"repository_full_name\":");

        let folded_entries = folded.into_iter().collect();
        Ok(Self {
            git_dir,
            commit,
            entries,
            manifest,
            folded_entries,
            folded_directories,
            digest_prefix,
        })
    }

    /// The pinned commit (40 lowercase hex digits).
    #[must_use]
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// The absolute git directory the snapshot was read from.
    #[must_use]
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// Every entry of the complete tree, sorted by name bytes.
    #[must_use]
    pub fn entries(&self) -> &[TreeEntry] {
        &self.entries
    }

    /// `path → sha256:` of every [`EntryKind::File`] entry.
    #[must_use]
    pub fn manifest(&self) -> &BTreeMap<RepoPath, Sha256> {
        &self.manifest
    }

    /// The entries kept out of the manifest, in tree order, each with its [`EntryKind`].
    pub fn excluded(&self) -> impl Iterator<Item = &TreeEntry> + '_ {
        self.entries.iter().filter(|e| e.kind.is_excluded())
    }

    /// The kind of the entry at `path` when the tree holds one there that is kept out of the
    /// manifest (`None` for a manifest file or a path the tree does not hold).
    #[must_use]
    pub fn excluded_kind(&self, path: &str) -> Option<EntryKind> {
        let i = self
            .entries
            .binary_search_by(|e| e.raw_path.as_slice().cmp(path.as_bytes()))
            .ok()?;
        let kind = self.entries.get(i)?.kind;
        kind.is_excluded().then_some(kind)
    }

    /// `sha256:` over the canonical snapshot document (`docs/SNAPSHOT.md`): the schema id,
    /// `repository_full_name`, the commit and every tree entry, excluded entries included.
    #[must_use]
    pub fn snapshot_digest(&self, repository_full_name: &str) -> Sha256 {
        let mut hasher = self.digest_prefix.clone();
        // `Value::to_string` is serde_json's infallible compact writer (same escaping rules).
        hasher.update(
            serde_json::Value::from(repository_full_name)
                .to_string()
                .as_bytes(),
        );
        hasher.update(b",\"schema\":\"");
        hasher.update(SNAPSHOT_SCHEMA.as_bytes());
        hasher.update(b"\"}");
        Sha256::from_raw(hasher.finalize().into())
    }

    /// The canonical snapshot document itself (what [`Self::snapshot_digest`] hashes).
    ///
    /// # Errors
    /// `REPOSITORY_SNAPSHOT_GIT` if serialisation fails (it does not for these types).
    pub fn canonical_document(&self, repository_full_name: &str) -> Result<Vec<u8>, SnapshotError> {
        #[derive(Serialize)]
        struct Document<'a> {
            commit: &'a str,
            entries: &'a [TreeEntry],
            repository_full_name: &'a str,
            schema: &'a str,
        }
        serde_json::to_vec(&Document {
            commit: &self.commit,
            entries: &self.entries,
            repository_full_name,
            schema: SNAPSHOT_SCHEMA,
        })
        .map_err(|_| git_error("snapshot document could not be serialised"))
    }

    /// Snapshot evidence bound to a plan: identity, commit, digest and the file manifest.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_SNAPSHOT_INVALID` when an identity field is empty.
    pub fn evidence(
        &self,
        plan_id: &str,
        request_id: &str,
        app_id: &str,
        repository_full_name: &str,
    ) -> Result<RepositorySnapshotEvidence, SnapshotError> {
        RepositorySnapshotEvidence::new(
            plan_id.to_owned(),
            request_id.to_owned(),
            app_id.to_owned(),
            repository_full_name.to_owned(),
            self.commit.clone(),
            self.snapshot_digest(repository_full_name).to_string(),
            self.manifest.clone(),
        )
    }

    /// The exact text of `paths` at the commit, read again from the object database and checked
    /// against the manifest hash. Reads at most `MAX_READ_FILES_BYTES` in all.
    ///
    /// # Errors
    /// `REPOSITORY_SNAPSHOT_PATH` for a path that is not a manifest file;
    /// `REPOSITORY_PATCH_SELECTION` when the files exceed `MAX_READ_FILES_BYTES` (checked from
    /// the listed sizes before anything is read); `REPOSITORY_SNAPSHOT_GIT` when git fails, runs
    /// past `GIT_DEADLINE`, or returns sizes or bytes that differ from the snapshot.
    pub fn read_files(&self, paths: &[RepoPath]) -> Result<BaselineFiles, SnapshotError> {
        self.read_files_within(paths, MAX_READ_FILES_BYTES, GIT_DEADLINE)
    }

    /// [`Self::read_files`] with an explicit byte cap and deadline.
    fn read_files_within(
        &self,
        paths: &[RepoPath],
        max_bytes: u64,
        limit: Duration,
    ) -> Result<BaselineFiles, SnapshotError> {
        let mut wanted: Vec<Wanted<'_>> = Vec::with_capacity(paths.len());
        let mut total = 0_u64;
        for path in paths {
            let entry = self
                .file_entry(path)
                .ok_or_else(|| SnapshotError::SnapshotPath {
                    path: path.as_str().to_owned(),
                })?;
            let size = entry
                .size()
                .ok_or_else(|| git_error("a manifest file has no recorded size"))?;
            total = total.saturating_add(size);
            if total > max_bytes {
                return Err(SnapshotError::Selection {
                    detail: "selected files exceed the read limit",
                });
            }
            wanted.push(Wanted {
                path,
                object_id: entry.object_id(),
                size,
            });
        }
        let mut out = BaselineFiles::new();
        if wanted.is_empty() {
            return Ok(out);
        }
        let contents = Deadline::run(limit, |deadline| self.cat_files(deadline, &wanted))?;
        for (want, bytes) in wanted.into_iter().zip(contents) {
            if self.manifest.get(want.path) != Some(&Sha256::of(&bytes)) {
                return Err(git_error("object bytes differ from the snapshot manifest"));
            }
            let text = String::from_utf8(bytes)
                .map_err(|_| git_error("object bytes differ from the snapshot manifest"))?;
            out.insert(want.path.clone(), text);
        }
        Ok(out)
    }

    /// Streams the wanted blobs through one `cat-file --batch` under `deadline`.
    fn cat_files(
        &self,
        deadline: &Deadline,
        wanted: &[Wanted<'_>],
    ) -> Result<Vec<Vec<u8>>, SnapshotError> {
        let mut child = deadline.spawn(
            git_command_with_path(std::env::var_os("PATH").as_deref(), Some(&self.git_dir))
                .args(["cat-file", "--batch"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        )?;
        let stdin = child.take_stdin()?;
        let stdout = child.take_stdout()?;
        let request: Vec<u8> = wanted
            .iter()
            .flat_map(|w| w.object_id.bytes().chain(std::iter::once(b'\n')))
            .collect();
        let contents = std::thread::scope(|scope| {
            let writer = scope.spawn(move || {
                let mut stdin = stdin;
                stdin.write_all(&request)
            });
            let read = read_full_blobs(stdout, wanted);
            if read.is_err() {
                child.kill();
            }
            let written = writer
                .join()
                .map_err(|_| git_error("writer thread failed"))?;
            let blobs = read?;
            written.map_err(|_| git_error("cat-file input failed"))?;
            Ok::<_, SnapshotError>(blobs)
        });
        if contents.is_err() {
            // The reader failed: the process is killed, reap it before reporting.
            drop(child);
            return contents;
        }
        child.wait_success("cat-file")?;
        contents
    }

    /// The manifest entry at `path` (entries are sorted by name bytes).
    fn file_entry(&self, path: &RepoPath) -> Option<&TreeEntry> {
        let index = self
            .entries
            .binary_search_by(|e| e.raw_path.as_slice().cmp(path.as_str().as_bytes()))
            .ok()?;
        self.entries
            .get(index)
            .filter(|e| e.kind == EntryKind::File)
    }

    fn folded_parents(key: &str) -> impl Iterator<Item = &str> {
        key.match_indices('/').filter_map(|(i, _)| key.get(..i))
    }
}

impl CreateAbsence for GitSnapshot {
    fn excluded_reason(&self, path: &str) -> Option<&'static str> {
        GitSnapshot::excluded_kind(self, path).map(EntryKind::reason)
    }

    /// Absence over the complete tree (excluded entries included): no entry at the path or at a
    /// case-folded twin (`REPOSITORY_PATCH_CREATE_EXISTS`), no entry where a parent directory of
    /// the path would be, and no directory at the path or its case fold
    /// (`REPOSITORY_PATCH_CREATE_PROOF`).
    fn prove_absent(&self, path: &RepoPath) -> Result<(), SnapshotError> {
        let key = path.collision_key();
        if self.folded_entries.contains(&key) {
            return Err(SnapshotError::CreateExists {
                path: path.as_str().to_owned(),
            });
        }
        if Self::folded_parents(&key).any(|p| self.folded_entries.contains(p)) {
            return Err(SnapshotError::CreateProof {
                detail: format!(
                    "{}: a tree entry occupies a parent directory",
                    Untrusted::quoted(path.as_str())
                ),
            });
        }
        if self.folded_directories.contains(&key) {
            return Err(SnapshotError::CreateProof {
                detail: format!(
                    "{}: a directory exists at the path",
                    Untrusted::quoted(path.as_str())
                ),
            });
        }
        Ok(())
    }
}

/// The collision key of a raw tree name: lossy UTF-8, NFC, full case fold.
fn fold_tree_name(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    match is_nfc_quick(text.chars()) {
        IsNormalized::Yes => casefold(&text),
        IsNormalized::No | IsNormalized::Maybe => casefold(&text.nfc().collect::<String>()),
    }
}

/// Rejects anything but 40 lowercase hex digits (git's canonical SHA-1 object name).
fn validate_commit_text(commit: &str) -> Result<(), SnapshotError> {
    if commit.len() != 40 || !commit.bytes().all(vocab::is_lower_hex) {
        return Err(SnapshotError::Commit {
            detail: "commit must be exactly 40 lowercase hex digits".to_owned(),
        });
    }
    Ok(())
}

fn repository_error(detail: &str) -> SnapshotError {
    SnapshotError::Repository {
        detail: detail.to_owned(),
    }
}

/// The isolated git command of [`Git::isolated`] with an explicit `PATH`, for the loader's own
/// processes (which share one deadline per operation).
fn git_command_with_path(path_var: Option<&OsStr>, git_dir: Option<&Path>) -> Command {
    launch::isolated_command(path_var, git_dir)
}

/// Finds the git directory of `repo` without walking above it.
fn discover_git_dir(
    deadline: &Deadline,
    repo: &Path,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, SnapshotError> {
    let is_dir = std::fs::metadata(repo).map(|m| m.is_dir()).unwrap_or(false);
    if !is_dir {
        return Err(repository_error(
            "repository path is not an existing directory",
        ));
    }
    let absolute = std::path::absolute(repo)
        .map_err(|_| repository_error("repository path cannot be made absolute"))?;
    let mut cmd = git_command_with_path(path_var, None);
    cmd.arg("-C")
        .arg(&absolute)
        .args(["rev-parse", "--absolute-git-dir"]);
    if let Some(parent) = absolute.parent() {
        cmd.env("GIT_CEILING_DIRECTORIES", parent);
    }
    let output = capture(deadline, &mut cmd, SMALL_OUTPUT_BYTES)?;
    if !output.status.success() {
        // Classify git's refusal without echoing it.
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(repository_error(if stderr.contains("dubious ownership") {
            "repository is owned by another user"
        } else {
            "not a git repository"
        }));
    }
    let mut path = output.stdout;
    if path.last() == Some(&b'\n') {
        path.pop();
    }
    if path.is_empty() || path.contains(&b'\n') {
        return Err(git_error("rev-parse printed an unexpected git directory"));
    }
    Ok(PathBuf::from(OsString::from_vec(path)))
}

/// The repository's git directory, once `commit` is known to name a commit object in it.
fn commit_git_dir(
    deadline: &Deadline,
    repo: &Path,
    commit: &str,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, SnapshotError> {
    let git_dir = discover_git_dir(deadline, repo, path_var)?;
    verify_commit_object(deadline, &git_dir, commit, path_var)?;
    Ok(git_dir)
}

/// Checks the spelling of `commit`, then, under one deadline of `limit`, finds the git directory
/// of `repo`, checks that `commit` names a commit object in it and runs `read` there: the git
/// directory and what `read` gave.
fn read_commit<T>(
    repo: &Path,
    commit: &str,
    path_var: Option<&OsStr>,
    limit: Duration,
    read: impl FnOnce(&Deadline, &Path) -> Result<T, SnapshotError>,
) -> Result<(PathBuf, T), SnapshotError> {
    validate_commit_text(commit)?;
    Deadline::run(limit, |deadline| {
        let git_dir = commit_git_dir(deadline, repo, commit, path_var)?;
        let read = read(deadline, &git_dir)?;
        Ok((git_dir, read))
    })
}

/// Checks that `commit` names an object of type commit (a tag or tree is refused, not peeled).
fn verify_commit_object(
    deadline: &Deadline,
    git_dir: &Path,
    commit: &str,
    path_var: Option<&OsStr>,
) -> Result<(), SnapshotError> {
    let output = capture(
        deadline,
        git_command_with_path(path_var, Some(git_dir)).args(["cat-file", "-t", commit]),
        SMALL_OUTPUT_BYTES,
    )?;
    if !output.status.success() {
        return Err(SnapshotError::Commit {
            detail: "commit not found in repository".to_owned(),
        });
    }
    if output.stdout != b"commit\n" {
        return Err(SnapshotError::Commit {
            detail: "object is not a commit".to_owned(),
        });
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObjectType {
    Blob,
    Commit,
    Tree,
}

#[derive(Debug)]
struct RawEntry {
    mode: String,
    object_type: ObjectType,
    object_id: String,
    path: Vec<u8>,
    /// The collision key ([`fold_tree_name`]).
    folded: String,
    /// The name as a [`RepoPath`]: `None` when not UTF-8, `Some(Err)` when not portable.
    repo_path: Option<Result<RepoPath, PathRejection>>,
}

#[derive(Debug, Clone)]
struct BlobInfo {
    object_id: String,
    size: u64,
    sha256: Sha256,
    utf8: bool,
}

fn is_object_id(text: &str) -> bool {
    (text.len() == 40 || text.len() == 64) && text.bytes().all(vocab::is_lower_hex)
}

/// Reads the next NUL-terminated `ls-tree -z` record into `record`, without its NUL: `false` at
/// the end of the output. A read error is reported as `read_failed`; a record over
/// [`MAX_LS_TREE_RECORD_BYTES`], or one the output ends inside, as truncated.
fn next_ls_tree_record(
    reader: &mut impl BufRead,
    record: &mut Vec<u8>,
    read_failed: &str,
) -> Result<bool, SnapshotError> {
    record.clear();
    let read = reader
        .by_ref()
        .take(MAX_LS_TREE_RECORD_BYTES)
        .read_until(0, record)
        .map_err(|_| git_error(read_failed))?;
    if read == 0 {
        return Ok(false);
    }
    if record.pop() != Some(0) {
        return Err(git_error("truncated ls-tree record"));
    }
    Ok(true)
}

/// Splits an `ls-tree -z` record at its tab into the metadata text and the name bytes.
fn split_ls_tree_record(record: &[u8]) -> Option<(&str, &[u8])> {
    let tab = record.iter().position(|b| *b == b'\t')?;
    let (meta, path) = record.split_at_checked(tab)?;
    let path = path.get(1..)?;
    let meta = std::str::from_utf8(meta).ok()?;
    Some((meta, path))
}

/// Six octal digits: a mode as `ls-tree` prints it.
fn is_ls_tree_mode(mode: &str) -> bool {
    mode.len() == 6 && mode.bytes().all(|b| (b'0'..=b'7').contains(&b))
}

/// Parses one `ls-tree -z` record: `<mode> SP <type> SP <object> TAB <path>`.
fn parse_ls_tree_record(record: &[u8]) -> Result<RawEntry, SnapshotError> {
    let malformed = || git_error("malformed ls-tree record");
    let (meta, path) = split_ls_tree_record(record).ok_or_else(malformed)?;
    let mut fields = meta.split(' ');
    let (Some(mode), Some(kind), Some(oid), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(malformed());
    };
    if !is_ls_tree_mode(mode) {
        return Err(malformed());
    }
    let object_type = match kind {
        "blob" => ObjectType::Blob,
        "commit" => ObjectType::Commit,
        "tree" => ObjectType::Tree,
        _ => return Err(malformed()),
    };
    if !is_object_id(oid) || path.is_empty() {
        return Err(malformed());
    }
    // Name checks happen here, on the listing thread, overlapping with cat-file's output.
    let repo_path = std::str::from_utf8(path).ok().map(RepoPath::parse);
    Ok(RawEntry {
        mode: mode.to_owned(),
        object_type,
        object_id: oid.to_owned(),
        folded: fold_tree_name(path),
        path: path.to_vec(),
        repo_path,
    })
}

/// Lists the tree and streams every distinct blob through one `cat-file --batch`, concurrently:
/// a thread parses `ls-tree` output and feeds object ids to `cat-file` while this thread hashes
/// the returned contents.
fn read_tree(
    deadline: &Deadline,
    git_dir: &Path,
    commit: &str,
    path_var: Option<&OsStr>,
) -> Result<(Vec<RawEntry>, Vec<BlobInfo>), SnapshotError> {
    let mut ls = deadline.spawn(
        git_command_with_path(path_var, Some(git_dir))
            .args(["ls-tree", "-r", "-z", "--full-tree", commit])
            .stdout(Stdio::piped()),
    )?;
    let ls_out = ls.take_stdout()?;
    let mut workers = Vec::with_capacity(CAT_FILE_WORKERS);
    let mut inputs = Vec::with_capacity(CAT_FILE_WORKERS);
    for _ in 0..CAT_FILE_WORKERS {
        let mut cat = deadline.spawn(
            git_command_with_path(path_var, Some(git_dir))
                .args(["cat-file", "--batch", "--buffer"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped()),
        )?;
        inputs.push(cat.take_stdin()?);
        let out = cat.take_stdout()?;
        // Best effort: a 1 MiB pipe lets cat-file run ahead instead of waking this reader for
        // each object (it writes every header and blob with its own `write`).
        let _ = rustix::pipe::fcntl_setpipe_size(&out, PIPE_BYTES);
        workers.push((
            cat,
            CoalescingReader {
                inner: out,
                last_short: false,
            },
        ));
    }
    let (entries, streams) = std::thread::scope(|scope| {
        let producer = scope.spawn(move || list_and_request(ls_out, inputs));
        // Each reader owns its cat-file process and kills it on failure, which closes that
        // process's stdin and so stops the producer too: no thread can stay blocked.
        let readers: Vec<_> = workers
            .into_iter()
            .map(|(cat, out)| {
                scope.spawn(move || {
                    let cat = cat;
                    let blobs = hash_blob_stream(out);
                    if blobs.is_err() {
                        cat.kill();
                    }
                    let waited = cat.wait_success("cat-file");
                    blobs.and_then(|b| waited.map(|()| b))
                })
            })
            .collect();
        let mut streams = Vec::with_capacity(readers.len());
        for reader in readers {
            streams.push(
                reader
                    .join()
                    .map_err(|_| git_error("cat-file reader failed"))?,
            );
        }
        let entries = producer
            .join()
            .map_err(|_| git_error("ls-tree reader failed"))?;
        Ok::<_, SnapshotError>((entries, streams))
    })?;
    // A reader's error is the root cause when the producer then failed to feed it.
    let mut streams = streams
        .into_iter()
        .map(|s| s.map(Vec::into_iter))
        .collect::<Result<Vec<_>, _>>()?;
    let entries = entries?;
    ls.wait_success("ls-tree")?;
    // Blob `i` went to worker `i % CAT_FILE_WORKERS`: interleave the answers back.
    let total: usize = streams.iter().map(ExactSizeIterator::len).sum();
    let mut blobs = Vec::with_capacity(total);
    for i in 0..total {
        let next = streams
            .get_mut(i % CAT_FILE_WORKERS)
            .and_then(Iterator::next)
            .ok_or_else(|| git_error("cat-file answered fewer objects than requested"))?;
        blobs.push(next);
    }
    Ok((entries, blobs))
}

fn list_and_request(
    ls_out: std::process::ChildStdout,
    cat_inputs: Vec<std::process::ChildStdin>,
) -> Result<Vec<RawEntry>, SnapshotError> {
    let io = |_| git_error("reading ls-tree or feeding cat-file failed");
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, ls_out);
    let mut writers: Vec<BufWriter<std::process::ChildStdin>> = cat_inputs
        .into_iter()
        .map(|input| BufWriter::with_capacity(16 * 1024, input))
        .collect();
    let mut entries = Vec::new();
    let mut record = Vec::new();
    let mut blob_index = 0_usize;
    while next_ls_tree_record(
        &mut reader,
        &mut record,
        "reading ls-tree or feeding cat-file failed",
    )? {
        let entry = parse_ls_tree_record(&record)?;
        // Every blob entry is requested, in listing order, round-robin over the cat-file
        // workers, so answers pair up by position.
        if entry.object_type == ObjectType::Blob {
            let writer = writers
                .get_mut(blob_index % CAT_FILE_WORKERS)
                .ok_or_else(|| git_error("no cat-file worker"))?;
            writer.write_all(entry.object_id.as_bytes()).map_err(io)?;
            writer.write_all(b"\n").map_err(io)?;
            blob_index += 1;
        }
        entries.push(entry);
    }
    for writer in &mut writers {
        writer.flush().map_err(io)?;
    }
    Ok(entries)
}

/// Parses a `cat-file --batch` header `<oid> SP <type> SP <size> LF`, requiring type `blob`.
fn parse_batch_header(header: &[u8]) -> Result<(String, u64), SnapshotError> {
    let malformed = || git_error("malformed cat-file header");
    let text = std::str::from_utf8(header).map_err(|_| malformed())?;
    let text = text.strip_suffix('\n').ok_or_else(malformed)?;
    let mut fields = text.split(' ');
    match (fields.next(), fields.next(), fields.next(), fields.next()) {
        (Some(oid), Some("blob"), Some(size), None) if is_object_id(oid) => {
            let size = size.parse::<u64>().map_err(|_| malformed())?;
            Ok((oid.to_owned(), size))
        }
        (Some(_), Some("missing"), None, None) => {
            Err(git_error("a tree object is missing from the repository"))
        }
        _ => Err(malformed()),
    }
}

/// Reads pipe data in larger bites: after a short read (the writer had produced little), pause
/// briefly so the next read finds a fuller pipe. This trades a bounded delay per short read for
/// far fewer wake-ups of both processes (cat-file issues two small writes per object).
struct CoalescingReader<R> {
    inner: R,
    last_short: bool,
}

impl<R: Read> Read for CoalescingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.last_short {
            std::thread::sleep(COALESCE_PAUSE);
        }
        let n = self.inner.read(buf)?;
        self.last_short = n > 0 && n < COALESCE_BELOW;
        Ok(n)
    }
}

fn hash_blob_stream<R: Read>(out: R) -> Result<Vec<BlobInfo>, SnapshotError> {
    let io = |_| git_error("reading cat-file output failed");
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, out);
    let mut header = Vec::new();
    let mut blobs = Vec::new();
    loop {
        header.clear();
        if (&mut reader)
            .take(HEADER_BYTES)
            .read_until(b'\n', &mut header)
            .map_err(io)?
            == 0
        {
            break;
        }
        let (oid, size) = parse_batch_header(&header)?;
        let mut hasher = sha2::Sha256::new();
        let mut utf8 = Utf8Stream::default();
        let mut remaining = size;
        while remaining > 0 {
            let buf = reader.fill_buf().map_err(io)?;
            let take = usize::try_from(remaining)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let chunk = buf.get(..take).filter(|c| !c.is_empty());
            let Some(chunk) = chunk else {
                return Err(git_error("truncated cat-file output"));
            };
            hasher.update(chunk);
            utf8.feed(chunk);
            reader.consume(take);
            remaining -= take as u64;
        }
        expect_newline(&mut reader)?;
        blobs.push(BlobInfo {
            object_id: oid,
            size,
            sha256: Sha256::from_raw(hasher.finalize().into()),
            utf8: utf8.finish(),
        });
    }
    Ok(blobs)
}

fn expect_newline<R: BufRead>(reader: &mut R) -> Result<(), SnapshotError> {
    let mut byte = [0_u8; 1];
    reader
        .read_exact(&mut byte)
        .map_err(|_| git_error("truncated cat-file output"))?;
    if byte != [b'\n'] {
        return Err(git_error("malformed cat-file output"));
    }
    Ok(())
}

/// One blob [`GitSnapshot::read_files`] asks for, with its size from the snapshot.
#[derive(Debug)]
struct Wanted<'a> {
    path: &'a RepoPath,
    object_id: &'a str,
    size: u64,
}

/// Reads the wanted blobs whole, in order. Each header must name the wanted object with the size
/// the snapshot recorded (already checked against the read cap) before anything is allocated,
/// and each read takes exactly that many bytes.
fn read_full_blobs<R: Read>(out: R, wanted: &[Wanted<'_>]) -> Result<Vec<Vec<u8>>, SnapshotError> {
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, out);
    let mut header = Vec::new();
    let mut blobs = Vec::with_capacity(wanted.len());
    for want in wanted {
        header.clear();
        (&mut reader)
            .take(HEADER_BYTES)
            .read_until(b'\n', &mut header)
            .map_err(|_| git_error("reading cat-file output failed"))?;
        let (oid, size) = parse_batch_header(&header)?;
        if oid != want.object_id || size != want.size {
            return Err(git_error("object bytes differ from the snapshot manifest"));
        }
        let capacity = usize::try_from(size)
            .map_err(|_| git_error("object bytes differ from the snapshot manifest"))?;
        let mut bytes = Vec::with_capacity(capacity);
        let read = (&mut reader)
            .take(size)
            .read_to_end(&mut bytes)
            .map_err(|_| git_error("reading cat-file output failed"))?;
        if read as u64 != size {
            return Err(git_error("truncated cat-file output"));
        }
        expect_newline(&mut reader)?;
        blobs.push(bytes);
    }
    Ok(blobs)
}

/// Incremental UTF-8 validation over chunks (std validates only whole slices; this carries an
/// incomplete trailing sequence of at most 3 bytes into the next chunk).
#[derive(Debug, Default)]
struct Utf8Stream {
    carry: Vec<u8>,
    invalid: bool,
}

impl Utf8Stream {
    fn feed(&mut self, mut chunk: &[u8]) {
        if self.invalid {
            return;
        }
        while !self.carry.is_empty() {
            let Some((first, rest)) = chunk.split_first() else {
                return;
            };
            self.carry.push(*first);
            chunk = rest;
            match std::str::from_utf8(&self.carry) {
                Ok(_) => self.carry.clear(),
                Err(e) if e.error_len().is_some() || self.carry.len() >= 4 => {
                    self.invalid = true;
                    return;
                }
                Err(_) => {}
            }
        }
        if let Err(e) = std::str::from_utf8(chunk) {
            match (e.error_len(), chunk.get(e.valid_up_to()..)) {
                (None, Some(tail)) => self.carry.extend_from_slice(tail),
                _ => self.invalid = true,
            }
        }
    }

    fn finish(self) -> bool {
        !self.invalid && self.carry.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;

    /// Evidence accepts `snapshot --json`'s `excluded` list by kind name: the list there is
    /// exactly the excluded kinds here.
    #[test]
    fn excluded_kind_names_match_the_evidence_parser() {
        let kinds = [
            EntryKind::File,
            EntryKind::NonUtf8Path,
            EntryKind::NonPortablePath,
            EntryKind::Submodule,
            EntryKind::Symlink,
            EntryKind::Executable,
            EntryKind::UnsupportedMode,
            EntryKind::CaseFoldCollision,
            EntryKind::NonUtf8Content,
        ];
        for kind in kinds {
            // Exhaustive: a new kind fails to compile here until it is listed above.
            match kind {
                EntryKind::File
                | EntryKind::NonUtf8Path
                | EntryKind::NonPortablePath
                | EntryKind::Submodule
                | EntryKind::Symlink
                | EntryKind::Executable
                | EntryKind::UnsupportedMode
                | EntryKind::CaseFoldCollision
                | EntryKind::NonUtf8Content => {}
            }
        }
        let excluded: Vec<&str> = kinds
            .iter()
            .filter(|k| k.is_excluded())
            .map(|k| k.as_str())
            .collect();
        assert_eq!(excluded, crate::context::EXCLUDED_ENTRY_KINDS);
    }

    /// A repository with `a.txt` (`"hello\n"`) committed; returns the commit.
    fn small_repo(dir: &Path) -> String {
        crate::testkit::init_repo(dir, [("a.txt", b"hello\n".as_slice(), false)], "one")
    }

    /// A `git` on a fresh `PATH` that runs `body` (a shell script), then the system directories.
    pub(super) fn fake_git(dir: &Path, body: &str) -> OsString {
        use std::os::unix::fs::PermissionsExt as _;
        let script = dir.join("git");
        std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut path = dir.as_os_str().to_owned();
        path.push(":/usr/bin:/bin");
        path
    }

    /// [`fake_git`] that first records its PID in `dir/pid`: the `PATH` and that file.
    pub(super) fn fake_git_recording_pid(dir: &Path, body: &str) -> (OsString, PathBuf) {
        let pid_file = dir.join("pid");
        let path = fake_git(dir, &format!("echo $$ > '{}'\n{body}", pid_file.display()));
        (path, pid_file)
    }

    /// The process whose PID `pid_file` holds is gone (killed and reaped).
    pub(super) fn assert_reaped(pid_file: &Path) {
        let pid = std::fs::read_to_string(pid_file).unwrap();
        assert!(
            !Path::new("/proc").join(pid.trim()).exists(),
            "git process {} still exists",
            pid.trim()
        );
    }

    /// Finding: git subprocesses had no deadline. A git that never answers is killed at the
    /// deadline, reaped, and reported with a stable environment-class error.
    #[test]
    fn r_git_past_its_deadline_is_killed_with_a_stable_error() {
        let bin = tempfile::tempdir().unwrap();
        let (path, pid_file) = fake_git_recording_pid(bin.path(), "exec sleep 600");
        let repo = tempfile::tempdir().unwrap();
        let err = GitSnapshot::load_within(
            repo.path(),
            &"a".repeat(40),
            Some(&path),
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "REPOSITORY_SNAPSHOT_GIT: git exceeded its deadline of 300ms"
        );
        assert!(err.is_environment());
        assert_reaped(&pid_file);
    }

    /// The same for a command run through the launcher ([`Git`], the finalizer's `git apply`),
    /// with input that git never reads.
    #[test]
    fn r_run_git_is_killed_at_its_deadline() {
        let bin = tempfile::tempdir().unwrap();
        let (path, pid_file) = fake_git_recording_pid(bin.path(), "exec sleep 600");
        let mut git = Git::isolated_with_path(Some(&path), None);
        git.arg("apply").deadline(Duration::from_millis(300));
        let input = vec![b'x'; 4 * 1024 * 1024];
        let err = SnapshotError::from(git.run(Some(&input)).unwrap_err());
        assert_eq!(err.code(), "REPOSITORY_SNAPSHOT_GIT");
        assert!(err.to_string().contains("exceeded its deadline"), "{err}");
        assert_reaped(&pid_file);
    }

    /// Finding: blob reads had no byte cap. The listed sizes are checked against the cap before
    /// git is asked for anything.
    #[test]
    fn r_read_files_is_capped_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let commit = small_repo(dir.path());
        let snap = GitSnapshot::load(dir.path(), &commit).unwrap();
        let a = RepoPath::parse("a.txt").unwrap();
        let err = snap
            .read_files_within(std::slice::from_ref(&a), 5, GIT_DEADLINE)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "REPOSITORY_PATCH_SELECTION: selected files exceed the read limit"
        );
        let files = snap
            .read_files_within(std::slice::from_ref(&a), 6, GIT_DEADLINE)
            .unwrap();
        assert_eq!(files[&a], "hello\n");
    }

    /// A cat-file header whose size differs from the snapshot's is refused before the read.
    #[test]
    fn read_full_blobs_refuses_a_size_other_than_the_listed_one() {
        let path = RepoPath::parse("a.txt").unwrap();
        let oid = "a".repeat(40);
        let wanted = [Wanted {
            path: &path,
            object_id: &oid,
            size: 2,
        }];
        let stream = format!("{oid} blob 3000000000\n");
        let err = read_full_blobs(stream.as_bytes(), &wanted).unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_SNAPSHOT_GIT");
        let ok = format!("{oid} blob 2\nhi\n");
        assert_eq!(
            read_full_blobs(ok.as_bytes(), &wanted).unwrap(),
            [b"hi".to_vec()]
        );
    }

    fn stream_valid(chunks: &[&[u8]]) -> bool {
        let mut s = Utf8Stream::default();
        for c in chunks {
            s.feed(c);
        }
        s.finish()
    }

    #[test]
    fn utf8_stream_matches_whole_slice_validation_at_every_split() {
        let samples: [&[u8]; 6] = [
            "plain ascii".as_bytes(),
            "ß≈SS — 日本語 𝄞 end".as_bytes(),
            b"bad \xff byte",
            b"cut \xe6\x97",
            b"\xf0\x9d\x84\x9e\xf0\x9d",
            b"overlong \xc0\xaf",
        ];
        for sample in samples {
            let whole = std::str::from_utf8(sample).is_ok();
            for i in 0..=sample.len() {
                for j in i..=sample.len() {
                    let parts = [&sample[..i], &sample[i..j], &sample[j..]];
                    assert_eq!(stream_valid(&parts), whole, "{sample:?} split {i} {j}");
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn utf8_stream_agrees_with_std_on_any_bytes_and_splits(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::collection::vec(proptest::num::u8::ANY, 0..8),
                    "\\PC{0,4}".prop_map(String::into_bytes),
                ],
                0..12,
            ),
            cuts in proptest::collection::vec(0_usize..64, 0..6),
        ) {
            let bytes: Vec<u8> = parts.concat();
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut start = 0;
            for p in points {
                chunks.push(&bytes[start..p]);
                start = p;
            }
            chunks.push(&bytes[start..]);
            proptest::prop_assert_eq!(stream_valid(&chunks), std::str::from_utf8(&bytes).is_ok());
        }
    }

    #[test]
    fn ls_tree_records_parse_strictly() {
        let oid = "a".repeat(40);
        let ok = format!("100644 blob {oid}\tdir/file.txt");
        let e = parse_ls_tree_record(ok.as_bytes()).unwrap();
        assert_eq!(
            (e.mode.as_str(), e.object_type, e.path.as_slice()),
            ("100644", ObjectType::Blob, b"dir/file.txt".as_slice())
        );
        let with_tab = format!("100644 blob {oid}\tname\twith tab");
        assert_eq!(
            parse_ls_tree_record(with_tab.as_bytes()).unwrap().path,
            b"name\twith tab"
        );
        for bad in [
            format!("100644 blob {oid}"),
            format!("100644 blob {}\tx", "A".repeat(40)),
            format!("10064 blob {oid}\tx"),
            format!("100844 blob {oid}\tx"),
            format!("100644 tag {oid}\tx"),
            format!("100644 blob {oid} extra\tx"),
            format!("100644 blob {oid}\t"),
        ] {
            assert!(parse_ls_tree_record(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn batch_headers_parse_strictly() {
        let oid = "b".repeat(64);
        assert_eq!(
            parse_batch_header(format!("{oid} blob 12\n").as_bytes())
                .unwrap()
                .1,
            12
        );
        for bad in [
            format!("{oid} blob 12"),
            format!("{oid} tree 12\n"),
            format!("{oid} blob -1\n"),
            format!("{oid} missing\n"),
            format!("{oid} blob 1 2\n"),
        ] {
            assert!(parse_batch_header(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_missing_git_executable_is_an_environment_error() {
        let dir = tempfile::tempdir().unwrap();
        let deadline = Deadline::start(GIT_DEADLINE).unwrap();
        let err = discover_git_dir(&deadline, dir.path(), Some(OsStr::new("/nonexistent-bin")))
            .unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_SNAPSHOT_GIT");
        assert!(err.is_environment());
        assert!(err.to_string().contains("not found"), "{err}");
    }

    #[test]
    fn commit_text_must_be_forty_lowercase_hex() {
        validate_commit_text(&"0".repeat(40)).unwrap();
        for bad in [
            "",
            "abc",
            &"A".repeat(40),
            &"g".repeat(40),
            &"0".repeat(41),
            &"0".repeat(64),
        ] {
            assert_eq!(
                validate_commit_text(bad).unwrap_err().code(),
                "REPOSITORY_SNAPSHOT_COMMIT"
            );
        }
    }
}
