//! The gate's input tree: the complete tree of the candidate's baseline commit, read from the
//! object database with git plumbing (never the work tree), with the candidate's post-images
//! applied in memory, streamed as the wire contract's tar (`ustar`, PAX only for long paths,
//! directories and regular files only) with exact declared totals. Nothing is written to disk.
//!
//! The tar writer is hand-written (a header is 512 fixed bytes) rather than the `tar` crate so the
//! stream is exactly the subset the runner accepts and nothing else (no mtimes, owners, global
//! headers or extension records but `path`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use finalizer::RepositoryPatchCandidate;
use sha2::Digest as _;
use snapshot::{FileOp, Git, GitStream, ListedKind, TreeListing};
use vocab::{Sha256, Untrusted};

use crate::definition::relative_path_ok;
use crate::error::GateError;
use crate::evidence::TreeFacts as TreeTotals;

/// Most entries (directories and files) one tree may have.
const MAX_TREE_ENTRIES: u64 = 500_000;
const BLOCK: usize = 512;
const COPY_BUFFER: usize = 256 * 1024;

#[derive(Debug, Clone)]
enum Source {
    /// A baseline blob, read from git at stream time.
    Blob(String),
    /// A candidate post-image.
    Inline(Vec<u8>),
}

#[derive(Debug, Clone)]
struct FileItem {
    executable: bool,
    size: u64,
    source: Source,
}

/// A tree ready to stream: sorted entries, exact totals.
#[derive(Debug, Clone)]
pub struct GateTree {
    git_dir: PathBuf,
    commit: String,
    files: BTreeMap<String, FileItem>,
    dirs: BTreeSet<String>,
    totals: TreeTotals,
}

/// Loads the baseline commit's tree once; `GateTree`s for the baseline and for candidates are
/// derived from it.
#[derive(Debug)]
pub struct BaselineTree {
    git_dir: PathBuf,
    commit: String,
    files: BTreeMap<String, FileItem>,
}

fn tree_error(detail: String) -> GateError {
    GateError::Tree { detail }
}

impl BaselineTree {
    /// Reads the complete tree of `commit` in the repository at `repo`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_TREE` for a symlink, submodule, non-UTF-8 or unsafe name or an
    /// unsupported mode (v1 streams regular files only); the snapshot loader's codes for git.
    ///
    /// # Security
    /// Git runs with a cleared environment and reads only the object database.
    pub fn load(repo: &Path, commit: &str) -> Result<Self, GateError> {
        let listing = TreeListing::load(repo, commit)?;
        // Content hashes are computed only for the files a candidate compares
        // (`with_candidate`): the stream reads every blob once, nothing reads them twice.
        let mut files = BTreeMap::new();
        for entry in listing.entries() {
            let Some(path) = entry.path() else {
                return Err(tree_error(format!(
                    "a tree entry name is not UTF-8 (hex {})",
                    Untrusted::quoted(&hex::encode(entry.raw_path()))
                )));
            };
            let executable = match (entry.kind(), entry.mode()) {
                (ListedKind::Blob, "100644") => false,
                (ListedKind::Blob, "100755") => true,
                (ListedKind::Blob, "120000") => {
                    return Err(tree_error(format!(
                        "{} is a symbolic link (not supported by gates v1)",
                        Untrusted::quoted(path)
                    )));
                }
                (ListedKind::Commit, _) => {
                    return Err(tree_error(format!(
                        "{} is a submodule (not supported by gates v1)",
                        Untrusted::quoted(path)
                    )));
                }
                _ => {
                    return Err(tree_error(format!(
                        "{} has an unsupported mode",
                        Untrusted::quoted(path)
                    )));
                }
            };
            if path == "." || !relative_path_ok(path) {
                return Err(tree_error(format!(
                    "{} is not a safe relative path",
                    Untrusted::quoted(path)
                )));
            }
            files.insert(
                path.to_owned(),
                FileItem {
                    executable,
                    size: entry.size().unwrap_or(0),
                    source: Source::Blob(entry.object_id().to_owned()),
                },
            );
        }
        Ok(Self {
            git_dir: listing.git_dir().to_owned(),
            commit: commit.to_owned(),
            files,
        })
    }

    /// SHA-256 of the baseline blobs at `paths` (each a baseline file), streamed through one
    /// `cat-file --batch` and checked against their listed sizes.
    fn hash_baseline(&self, paths: &[&str]) -> Result<BTreeMap<String, Sha256>, GateError> {
        let mut wanted = Vec::with_capacity(paths.len());
        for path in paths {
            if let Some(FileItem {
                size,
                source: Source::Blob(oid),
                ..
            }) = self.files.get(*path)
            {
                wanted.push((*path, oid.as_str(), *size));
            }
        }
        let mut out = BTreeMap::new();
        if wanted.is_empty() {
            return Ok(out);
        }
        let mut reader = BlobReader::start(&self.git_dir, wanted.iter().map(|w| w.1).collect())?;
        for (path, oid, size) in wanted {
            let mut hasher = sha2::Sha256::new();
            reader.copy_next(oid, size, &mut vocab::Sha256Writer(&mut hasher))?;
            out.insert(path.to_owned(), Sha256::from_raw(hasher.finalize().into()));
        }
        reader.finish()?;
        Ok(out)
    }

    /// The commit.
    #[must_use]
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// The unmodified baseline tree.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_TREE` (a file where a directory is needed),
    /// `PATCH_CANDIDATE_GATE_TREE_BUDGET`.
    pub fn baseline(&self, max_bytes: u64) -> Result<GateTree, GateError> {
        GateTree::new(self, self.files.clone(), max_bytes)
    }

    /// The baseline tree with `candidate`'s post-images applied: creates must be absent, updates
    /// and deletes must find exactly their previous hash.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_CANDIDATE_MISMATCH` when the candidate is not for this tree; the
    /// errors of [`Self::baseline`].
    pub fn with_candidate(
        &self,
        candidate: &RepositoryPatchCandidate,
        max_bytes: u64,
    ) -> Result<GateTree, GateError> {
        if candidate.baseline_commit_sha() != self.commit {
            return Err(GateError::CandidateMismatch {
                detail: "the candidate's baseline commit is not the loaded commit".to_owned(),
            });
        }
        let compared: Vec<&str> = candidate
            .changed_files()
            .iter()
            .filter(|c| matches!(c.op(), FileOp::Update | FileOp::Delete))
            .map(|c| c.path().as_str())
            .collect();
        let baseline_hashes = self.hash_baseline(&compared)?;
        let mut files = self.files.clone();
        for change in candidate.changed_files() {
            let path = change.path().as_str();
            let mismatch = |what: &str| GateError::CandidateMismatch {
                detail: format!("{}: {what}", Untrusted::quoted(path)),
            };
            match change.op() {
                FileOp::Create => {
                    if files.contains_key(path) {
                        return Err(mismatch("created file exists at the baseline"));
                    }
                }
                FileOp::Update | FileOp::Delete => {
                    if !files.contains_key(path) {
                        return Err(mismatch("file is absent at the baseline"));
                    }
                    if baseline_hashes.get(path) != change.previous_sha256() {
                        return Err(mismatch("previous hash differs from the baseline"));
                    }
                }
            }
            match (change.op(), change.content()) {
                (FileOp::Delete, _) => {
                    files.remove(path);
                }
                (op, Some(content)) => {
                    let executable =
                        op == FileOp::Update && files.get(path).is_some_and(|f| f.executable);
                    files.insert(
                        path.to_owned(),
                        FileItem {
                            executable,
                            size: content.len() as u64,
                            source: Source::Inline(content.as_bytes().to_vec()),
                        },
                    );
                }
                (_, None) => return Err(mismatch("post-image missing")),
            }
        }
        GateTree::new(self, files, max_bytes)
    }
}

impl GateTree {
    fn new(
        base: &BaselineTree,
        files: BTreeMap<String, FileItem>,
        max_bytes: u64,
    ) -> Result<Self, GateError> {
        let mut dirs = BTreeSet::new();
        for path in files.keys() {
            for (i, _) in path.match_indices('/') {
                if let Some(dir) = path.get(..i) {
                    dirs.insert(dir.to_owned());
                }
            }
        }
        if let Some(both) = dirs.iter().find(|d| files.contains_key(*d)) {
            return Err(tree_error(format!(
                "{} is both a file and a directory",
                Untrusted::quoted(both)
            )));
        }
        let entries = (files.len() as u64).saturating_add(dirs.len() as u64);
        if entries > MAX_TREE_ENTRIES {
            return Err(GateError::TreeBudget {
                what: "entries",
                limit: MAX_TREE_ENTRIES,
            });
        }
        let bytes = files.values().fold(0_u64, |n, f| n.saturating_add(f.size));
        if bytes > max_bytes {
            return Err(GateError::TreeBudget {
                what: "file bytes",
                limit: max_bytes,
            });
        }
        Ok(Self {
            git_dir: base.git_dir.clone(),
            commit: base.commit.clone(),
            files,
            dirs,
            totals: TreeTotals { entries, bytes },
        })
    }

    /// The declared totals.
    #[must_use]
    pub fn totals(&self) -> TreeTotals {
        self.totals
    }

    /// True when the tree holds a file at `path`.
    #[must_use]
    pub fn contains_file(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }

    /// Writes the tar stream to `out`: every directory and file in path order, then the two zero
    /// blocks. Blobs are streamed from one `git cat-file --batch`; nothing is buffered whole.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_TREE` when git fails or a blob differs from its listing, or when
    /// `out` fails (the container stopped reading).
    pub fn write_tar<W: Write>(&self, out: W) -> Result<(), GateError> {
        let mut out = BufWriter::with_capacity(COPY_BUFFER, out);
        let io = |_| tree_error("the tree stream could not be written".to_owned());
        let blobs: Vec<&str> = self
            .files
            .values()
            .filter_map(|f| match &f.source {
                Source::Blob(oid) => Some(oid.as_str()),
                Source::Inline(_) => None,
            })
            .collect();
        let mut reader = BlobReader::start(&self.git_dir, blobs)?;
        let mut all: Vec<(&str, Option<&FileItem>)> = self
            .dirs
            .iter()
            .map(|d| (d.as_str(), None))
            .chain(self.files.iter().map(|(p, f)| (p.as_str(), Some(f))))
            .collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut written = 0_u64;
        for (path, item) in all {
            match item {
                None => {
                    write_header(&mut out, &format!("{path}/"), b'5', 0o755, 0).map_err(io)?;
                }
                Some(file) => {
                    let mode = if file.executable { 0o755 } else { 0o644 };
                    write_header(&mut out, path, b'0', mode, file.size).map_err(io)?;
                    match &file.source {
                        Source::Inline(bytes) => out.write_all(bytes).map_err(io)?,
                        Source::Blob(oid) => reader.copy_next(oid, file.size, &mut out)?,
                    }
                    pad(&mut out, file.size).map_err(io)?;
                    written = written.saturating_add(file.size);
                }
            }
        }
        reader.finish()?;
        out.write_all(&[0_u8; 2 * BLOCK]).map_err(io)?;
        out.flush().map_err(io)?;
        if written != self.totals.bytes {
            return Err(tree_error(
                "streamed bytes differ from the totals".to_owned(),
            ));
        }
        Ok(())
    }

    /// The commit this tree is built on.
    #[must_use]
    pub fn commit(&self) -> &str {
        &self.commit
    }
}

fn pad<W: Write>(out: &mut W, size: u64) -> std::io::Result<()> {
    let rem = (size % BLOCK as u64) as usize;
    if rem != 0 {
        out.write_all([0_u8; BLOCK].get(rem..).unwrap_or_default())?;
    }
    Ok(())
}

fn octal(field: &mut [u8], value: u64) {
    // `width - 1` octal digits, then NUL.
    let width = field.len().saturating_sub(1);
    let text = format!("{value:0width$o}");
    if let Some(dst) = field.get_mut(..width) {
        dst.copy_from_slice(text.as_bytes().get(..width).unwrap_or_default());
    }
}

fn ustar_header(name: &[u8], typeflag: u8, mode: u64, size: u64) -> [u8; BLOCK] {
    let mut h = [0_u8; BLOCK];
    if let Some(dst) = h.get_mut(..name.len().min(100)) {
        dst.copy_from_slice(name.get(..name.len().min(100)).unwrap_or_default());
    }
    if let Some(f) = h.get_mut(100..108) {
        octal(f, mode);
    }
    if let Some(f) = h.get_mut(108..116) {
        octal(f, 0);
    }
    if let Some(f) = h.get_mut(116..124) {
        octal(f, 0);
    }
    if let Some(f) = h.get_mut(124..136) {
        octal(f, size);
    }
    if let Some(f) = h.get_mut(136..148) {
        octal(f, 0);
    }
    if let Some(f) = h.get_mut(148..156) {
        f.fill(b' ');
    }
    if let Some(f) = h.get_mut(156) {
        *f = typeflag;
    }
    if let Some(f) = h.get_mut(257..265) {
        f.copy_from_slice(b"ustar\x0000");
    }
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    if let Some(f) = h.get_mut(148..155) {
        octal(f, sum);
    }
    h
}

/// A header, preceded by a PAX `path` record when the name does not fit the 100-byte field.
fn write_header<W: Write>(
    out: &mut W,
    name: &str,
    typeflag: u8,
    mode: u64,
    size: u64,
) -> std::io::Result<()> {
    if name.len() > 100 {
        // "<len> path=<name>\n", where <len> counts itself.
        let body_len = " path=".len() + name.len() + 1;
        let mut len = body_len + 1;
        while len != body_len + len.to_string().len() {
            len = body_len + len.to_string().len();
        }
        let record = format!("{len} path={name}\n");
        out.write_all(&ustar_header(
            b"PaxHeader",
            b'x',
            0o644,
            record.len() as u64,
        ))?;
        out.write_all(record.as_bytes())?;
        pad(out, record.len() as u64)?;
    }
    out.write_all(&ustar_header(name.as_bytes(), typeflag, mode, size))
}

/// One `git cat-file --batch` streaming the listed blobs in order (a feeder thread writes the
/// object ids, so neither pipe can deadlock).
struct BlobReader {
    // Dropped first: a reader dropped before `finish` kills git, which ends the feeder too.
    child: GitStream,
    stdout: BufReader<std::process::ChildStdout>,
    feeder: Option<std::thread::JoinHandle<()>>,
}

fn git_failed() -> GateError {
    tree_error("git cat-file failed".to_owned())
}

impl BlobReader {
    fn start(git_dir: &Path, oids: Vec<&str>) -> Result<Self, GateError> {
        // The launcher's isolated git under its default deadline; stderr is discarded.
        let mut child = Git::isolated(Some(git_dir))
            .args(["cat-file", "--batch"])
            .stream(true)
            .map_err(|_| git_failed())?;
        let stdin = child.take_stdin().map_err(|_| git_failed())?;
        let stdout = child.take_stdout().map_err(|_| git_failed())?;
        let input: String = oids.iter().flat_map(|o| [*o, "\n"]).collect();
        let feeder = std::thread::Builder::new()
            .name("gate-tree-feeder".to_owned())
            .spawn(move || {
                let mut stdin = stdin;
                let _ = stdin.write_all(input.as_bytes());
            })
            .map_err(|_| git_failed())?;
        Ok(Self {
            child,
            stdout: BufReader::with_capacity(COPY_BUFFER, stdout),
            feeder: Some(feeder),
        })
    }

    fn copy_next<W: Write>(&mut self, oid: &str, size: u64, out: &mut W) -> Result<(), GateError> {
        let mut header = Vec::new();
        (&mut self.stdout)
            .take(256)
            .read_until(b'\n', &mut header)
            .map_err(|_| git_failed())?;
        let expected = format!("{oid} blob {size}\n");
        if header != expected.as_bytes() {
            return Err(tree_error(
                "a blob differs from its tree listing".to_owned(),
            ));
        }
        let copied = std::io::copy(&mut (&mut self.stdout).take(size), out)
            .map_err(|_| tree_error("the tree stream could not be written".to_owned()))?;
        let mut lf = [0_u8; 1];
        self.stdout.read_exact(&mut lf).map_err(|_| git_failed())?;
        if copied != size || lf != *b"\n" {
            return Err(git_failed());
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), GateError> {
        if let Some(f) = self.feeder.take() {
            let _ = f.join();
        }
        let status = self.child.wait().map_err(|_| git_failed())?;
        if !status.success() {
            return Err(git_failed());
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
