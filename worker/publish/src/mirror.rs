//! The private bare mirror and the deterministic commit built in it.
//!
//! The mirror is a fresh bare repository in a 0700 temporary directory (removed when dropped);
//! there is never a work tree, and the user's repository is only read. A local source
//! repository lends its object database through `objects/info/alternates` (read in place: a
//! fetch would copy its whole history into the mirror, which costs more than everything else
//! together on a large repository); without one, the baseline is fetched from the remote.
//!
//! * **Blobs** go in through one `git fast-import` (a stream of `blob` commands on stdin, ids
//!   read back from its exported marks): one process and one pack for up to 50 files, where
//!   `hash-object -w --stdin` would take one process per file.
//! * **The tree** is the baseline tree read into a temporary index file in the private directory
//!   (`read-tree`), the post-images and deletes applied with one `update-index -z --index-info`,
//!   then `write-tree`: git builds every nested directory, drops the ones a delete empties, keeps
//!   every untouched entry (executables, symlinks) exactly, and an empty create is the empty blob.
//! * **The commit** is `commit-tree` with the parent given, the operator's fixed identity and date
//!   in that child's environment only, and a message made of host-owned fields (candidate digest,
//!   handoff id, baseline, rebase tip): no agent text, so the id is a function of the inputs.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use cap_std::fs::Dir;
use finalizer::RepositoryPatchCandidate;
use snapshot::FileOp;

use crate::error::{PublishError, git_error};
use crate::run::{
    LOCAL_DEADLINE, NETWORK_DEADLINE, classify_network_failure, git, object_id_line, run, run_ok,
};
use crate::types::CommitIdentity;

/// Most bytes of `ls-tree` output read for the candidate's paths (50 files and their parents).
const LS_TREE_CAP: usize = 1024 * 1024;
/// Most bytes of the fast-import marks file (50 lines of `:N <oid>`).
const MARKS_CAP: u64 = 64 * 1024;
/// Most bytes of a one-line id answer.
const ID_CAP: usize = 4096;

const ZERO_ID: &str = "0000000000000000000000000000000000000000";

/// The prefix of every private mirror directory in the temporary directory.
const MIRROR_PREFIX: &str = "patch-candidate-publish-";
/// The file whose lock says that the mirror's owner is alive.
const OWNER_LOCK: &str = "owner.lock";
/// A mirror directory without an owner lock is left alone for this long (its owner may be
/// between creating it and taking the lock; nothing secret is written before the lock).
const UNLOCKED_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// A fresh private bare repository.
#[derive(Debug)]
pub(crate) struct Mirror {
    /// The 0700 directory holding the repository, the temporary index and the credential files.
    root: tempfile::TempDir,
    git_dir: PathBuf,
    /// `owner.lock`, exclusively locked for the mirror's life: the kernel drops the lock when
    /// the process dies by any means (SIGKILL included), which is how a later sweep tells an
    /// abandoned mirror, and its credential copy, from a live one.
    _owner: std::fs::File,
}

/// Characters a private path may hold: it is given to git inside `-c` values and a shell line
/// (the credential helper), so nothing that a shell or git's config parser would reinterpret.
fn plain_path(path: &Path) -> bool {
    path.to_str().is_some_and(|s| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'))
    })
}

impl Mirror {
    /// Creates the directory (0700) and an empty bare repository in it (no templates, so no
    /// sample hooks).
    pub(crate) fn create() -> Result<Self, PublishError> {
        let mirror_error = |detail| PublishError::Mirror { detail };
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::Builder::new()
            .prefix(MIRROR_PREFIX)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|_| mirror_error("cannot create the private mirror directory"))?;
        if !plain_path(root.path()) {
            return Err(mirror_error(
                "the temporary directory path holds characters git config would reinterpret",
            ));
        }
        let git_dir = root.path().join("mirror.git");
        // The layout `git init --bare --template=` writes, written directly: one process fewer
        // on every publication, and nothing from a template directory.
        let dir = Dir::open_ambient_dir(root.path(), cap_std::ambient_authority())
            .map_err(|_| mirror_error("cannot open the private mirror directory"))?;
        let layout = (|| -> std::io::Result<()> {
            for sub in [
                "mirror.git",
                "mirror.git/objects",
                "mirror.git/objects/info",
                "mirror.git/objects/pack",
                "mirror.git/refs",
                "mirror.git/refs/heads",
                "mirror.git/refs/tags",
            ] {
                dir.create_dir(sub)?;
            }
            dir.write("mirror.git/HEAD", "ref: refs/heads/main\n")?;
            dir.write(
                "mirror.git/config",
                "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n",
            )
        })();
        layout.map_err(|_| mirror_error("cannot create the private mirror repository"))?;
        let owner = take_owner_lock(&dir)
            .map_err(|_| mirror_error("cannot lock the private mirror directory"))?;
        Ok(Self {
            root,
            git_dir,
            _owner: owner,
        })
    }

    pub(crate) fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    pub(crate) fn root(&self) -> &Path {
        self.root.path()
    }

    /// A handle on the private directory (for the files this crate writes there).
    pub(crate) fn dir(&self) -> Result<Dir, PublishError> {
        Dir::open_ambient_dir(self.root.path(), cap_std::ambient_authority()).map_err(|_| {
            PublishError::Mirror {
                detail: "cannot open the private mirror directory",
            }
        })
    }

    /// A git command in the mirror with `protocol` allowed. The mirror is thrown away after one
    /// publication, so nothing in it is fsynced, and fast-import keeps its one pack instead of
    /// exploding it into loose objects through a second process.
    pub(crate) fn git(&self, protocol: &str) -> snapshot::Git {
        let mut cmd = git(Some(&self.git_dir), protocol);
        cmd.args(["-c", "core.fsync=none", "-c", "fastimport.unpackLimit=0"]);
        cmd
    }

    /// Fetches `what` (a commit id or a refspec) from `from` into the mirror; `transport` holds
    /// the credential `-c` options. No tags, no `FETCH_HEAD`.
    pub(crate) fn fetch(
        &self,
        from: &std::ffi::OsStr,
        protocol: &str,
        transport: &[OsString],
        what: &str,
    ) -> Result<(), PublishError> {
        let mut cmd = self.git(protocol);
        cmd.args(transport)
            .args([
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--end-of-options",
            ])
            .arg(from)
            .arg(what);
        let out = run(&mut cmd, None, ID_CAP, NETWORK_DEADLINE)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(classify_network_failure(&out.stderr))
        }
    }

    /// Lets the mirror read the objects of the repository at `source` (an absolute path) in
    /// place, through `objects/info/alternates`, instead of copying its history with a fetch:
    /// the source's object database is only read, and every object this crate writes goes into
    /// the mirror's own. The git directory is found without walking above `source`.
    pub(crate) fn borrow_objects(&self, source: &Path) -> Result<(), PublishError> {
        let missing = || PublishError::BaselineMissing;
        let mut cmd = git(None, "");
        cmd.arg("-C")
            .arg(source)
            .args(["rev-parse", "--path-format=absolute", "--git-common-dir"]);
        if let Some(parent) = source.parent() {
            cmd.env("GIT_CEILING_DIRECTORIES", parent);
        }
        let out = run(&mut cmd, None, ID_CAP, LOCAL_DEADLINE)?;
        if !out.status.success() {
            return Err(missing());
        }
        let text = std::str::from_utf8(&out.stdout).map_err(|_| missing())?;
        let common = text.strip_suffix('\n').ok_or_else(missing)?;
        let objects = Path::new(common).join("objects");
        if !common.starts_with('/') || common.contains('\n') || !objects.is_dir() {
            return Err(missing());
        }
        let objects = objects.to_str().ok_or_else(missing)?;
        let dir = self.dir()?;
        dir.write("mirror.git/objects/info/alternates", format!("{objects}\n"))
            .map_err(|_| PublishError::Mirror {
                detail: "cannot write the mirror's alternates file",
            })
    }

    /// True when `id` names a commit in the mirror.
    pub(crate) fn has_commit(&self, id: &str) -> Result<bool, PublishError> {
        let mut cmd = self.git("");
        cmd.args(["cat-file", "-e", "--end-of-options"])
            .arg(format!("{id}^{{commit}}"));
        Ok(run(&mut cmd, None, ID_CAP, LOCAL_DEADLINE)?
            .status
            .success())
    }

    /// The tree of the baseline with the candidate applied (see the module docs).
    pub(crate) fn candidate_tree(
        &self,
        candidate: &RepositoryPatchCandidate,
        baseline: &str,
    ) -> Result<String, PublishError> {
        let index = self.root().join("index");
        // The three inputs of the tree are independent: the baseline's modes, the blobs and the
        // baseline index are made by three git processes at once.
        let (modes, blobs, read) = std::thread::scope(|scope| {
            let modes = scope.spawn(|| self.baseline_modes(candidate, baseline));
            let blobs = scope.spawn(|| self.write_blobs(candidate));
            let mut read = self.git("");
            read.env("GIT_INDEX_FILE", &index)
                .args(["read-tree", "--end-of-options", baseline]);
            let read = run_ok(
                &mut read,
                None,
                ID_CAP,
                "git read-tree of the baseline failed",
            );
            (joined(modes.join()), joined(blobs.join()), read)
        });
        let (modes, blobs) = (modes?, blobs?);
        read?;
        let mut info = Vec::new();
        for (file, blob) in candidate.changed_files().iter().zip(&blobs) {
            let path = file.path().as_str();
            match (file.op(), blob) {
                (FileOp::Delete, _) => {
                    let _ = write!(info, "0 {ZERO_ID}\t{path}\0");
                }
                (_, Some(blob)) => {
                    let mode = modes.get(path).copied().unwrap_or("100644");
                    let _ = write!(info, "{mode} {blob}\t{path}\0");
                }
                (_, None) => return Err(git_error("a post-image has no blob")),
            }
        }
        let mut update = self.git("");
        update
            .env("GIT_INDEX_FILE", &index)
            .args(["update-index", "-z", "--index-info"]);
        run_ok(
            &mut update,
            Some(&info),
            ID_CAP,
            "git update-index refused the candidate's paths",
        )?;
        let mut write = self.git("");
        write.env("GIT_INDEX_FILE", &index).arg("write-tree");
        object_id_line(&run_ok(&mut write, None, ID_CAP, "git write-tree failed")?)
    }

    /// Checks the candidate against the baseline tree and returns the mode of every updated
    /// path: a create must find nothing at its path or any parent, an update or delete a regular
    /// or executable blob.
    fn baseline_modes(
        &self,
        candidate: &RepositoryPatchCandidate,
        baseline: &str,
    ) -> Result<BTreeMap<String, &'static str>, PublishError> {
        let mut asked = BTreeSet::new();
        for file in candidate.changed_files() {
            let path = file.path().as_str();
            asked.insert(path.to_owned());
            if file.op() == FileOp::Create {
                let mut at = 0;
                while let Some(slash) = path.get(at..).and_then(|rest| rest.find('/')) {
                    if let Some(parent) = path.get(..at + slash) {
                        asked.insert(parent.to_owned());
                    }
                    at += slash + 1;
                }
            }
        }
        let mut cmd = self.git("");
        cmd.args(["ls-tree", "-z", "--end-of-options", baseline, "--"])
            .args(&asked);
        let listing = run_ok(
            &mut cmd,
            None,
            LS_TREE_CAP,
            "git ls-tree of the baseline failed",
        )?;
        let mut found: BTreeMap<String, (String, String)> = BTreeMap::new();
        let mut ids: BTreeMap<String, String> = BTreeMap::new();
        for record in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let text = std::str::from_utf8(record)
                .map_err(|_| git_error("git ls-tree printed a non-text entry"))?;
            let (meta, path) = text
                .split_once('\t')
                .ok_or_else(|| git_error("git ls-tree printed an unexpected entry"))?;
            let mut parts = meta.split(' ');
            let (Some(mode), Some(kind), Some(id)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(git_error("git ls-tree printed an unexpected entry"));
            };
            found.insert(path.to_owned(), (mode.to_owned(), kind.to_owned()));
            ids.insert(path.to_owned(), id.to_owned());
        }
        let mismatch = |detail| PublishError::CandidateMismatch { detail };
        let mut modes = BTreeMap::new();
        for file in candidate.changed_files() {
            let path = file.path().as_str();
            match file.op() {
                FileOp::Create => {
                    if found.contains_key(path) {
                        return Err(mismatch("a created path exists in the baseline tree"));
                    }
                    let blocked = found
                        .iter()
                        .any(|(p, (_, kind))| kind == "blob" && path.starts_with(&format!("{p}/")));
                    if blocked {
                        return Err(mismatch(
                            "a created path lies under a file of the baseline tree",
                        ));
                    }
                }
                FileOp::Update | FileOp::Delete => match found.get(path) {
                    Some((mode, kind)) if kind == "blob" && mode == "100644" => {
                        modes.insert(path.to_owned(), "100644");
                    }
                    Some((mode, kind)) if kind == "blob" && mode == "100755" => {
                        modes.insert(path.to_owned(), "100755");
                    }
                    Some(_) => {
                        return Err(mismatch(
                            "an updated or deleted path is not a regular file in the baseline tree",
                        ));
                    }
                    None => {
                        return Err(mismatch(
                            "an updated or deleted path is missing from the baseline tree",
                        ));
                    }
                },
            }
        }
        self.check_previous_images(candidate, &ids)?;
        Ok(modes)
    }

    /// Every updated or deleted file of the baseline is exactly the bytes the candidate's
    /// `previous_sha256` names (its diffs were checked against those hashes and the post-images,
    /// [`finalizer::check_diffs_match_content`]): one `cat-file --batch` for all of them.
    fn check_previous_images(
        &self,
        candidate: &RepositoryPatchCandidate,
        ids: &BTreeMap<String, String>,
    ) -> Result<(), PublishError> {
        let mismatch = |detail| PublishError::CandidateMismatch { detail };
        let mut asked = Vec::new();
        let mut request = Vec::new();
        for file in candidate.changed_files() {
            if file.op() == FileOp::Create {
                continue;
            }
            let (Some(id), Some(previous)) =
                (ids.get(file.path().as_str()), file.previous_sha256())
            else {
                return Err(mismatch(
                    "an updated or deleted path has no previous image in the baseline tree",
                ));
            };
            if !crate::run::is_object_id(id) {
                return Err(git_error("git ls-tree printed an unexpected object id"));
            }
            request.extend_from_slice(id.as_bytes());
            request.push(b'\n');
            asked.push(previous);
        }
        if asked.is_empty() {
            return Ok(());
        }
        let mut cmd = self.git("");
        cmd.args(["cat-file", "--batch"]);
        let out = run_ok(
            &mut cmd,
            Some(&request),
            finalizer::MAX_CANDIDATE_JSON_BYTES,
            "git cat-file of the baseline files failed",
        )?;
        let mut rest = out.as_slice();
        for previous in asked {
            let unexpected = || git_error("git cat-file printed an unexpected answer");
            let newline = rest
                .iter()
                .position(|b| *b == b'\n')
                .ok_or_else(unexpected)?;
            let (header, tail) = rest.split_at_checked(newline).ok_or_else(unexpected)?;
            let header = std::str::from_utf8(header).map_err(|_| unexpected())?;
            let size: usize = match header.split(' ').collect::<Vec<_>>().as_slice() {
                [_, "blob", size] => size.parse().map_err(|_| unexpected())?,
                _ => return Err(unexpected()),
            };
            let tail = tail.get(1..).ok_or_else(unexpected)?;
            let (bytes, tail) = tail.split_at_checked(size).ok_or_else(unexpected)?;
            rest = tail.strip_prefix(b"\n").ok_or_else(unexpected)?;
            if vocab::Sha256::of(bytes) != *previous {
                return Err(mismatch(
                    "an updated or deleted file differs from the candidate's previous image",
                ));
            }
        }
        Ok(())
    }

    /// Writes every post-image as a blob through one `git fast-import`; the blob id of each
    /// changed file in order (`None` for deletes).
    fn write_blobs(
        &self,
        candidate: &RepositoryPatchCandidate,
    ) -> Result<Vec<Option<String>>, PublishError> {
        let mut stream = Vec::new();
        stream.extend_from_slice(b"feature done\n");
        let mut marks = Vec::new();
        for (n, file) in candidate.changed_files().iter().enumerate() {
            match file.content() {
                Some(content) if file.op() != FileOp::Delete => {
                    let mark = n + 1;
                    let _ = write!(stream, "blob\nmark :{mark}\ndata {}\n", content.len());
                    stream.extend_from_slice(content.as_bytes());
                    stream.push(b'\n');
                    marks.push(Some(mark));
                }
                _ => marks.push(None),
            }
        }
        stream.extend_from_slice(b"done\n");
        if marks.iter().all(Option::is_none) {
            return Ok(marks.into_iter().map(|_| None).collect());
        }
        let marks_file = self.root().join("marks");
        let mut cmd = self.git("");
        cmd.args(["fast-import", "--quiet", "--done"])
            .arg(format!("--export-marks={}", marks_file.display()));
        run_ok(&mut cmd, Some(&stream), ID_CAP, "git fast-import failed")?;
        let exported = read_private(&self.dir()?, "marks", MARKS_CAP)?;
        let text = std::str::from_utf8(&exported)
            .map_err(|_| git_error("unexpected fast-import marks"))?;
        let mut ids = BTreeMap::new();
        for line in text.lines() {
            let (mark, id) = line
                .strip_prefix(':')
                .and_then(|l| l.split_once(' '))
                .ok_or_else(|| git_error("unexpected fast-import marks"))?;
            let mark: usize = mark
                .parse()
                .map_err(|_| git_error("unexpected fast-import marks"))?;
            if !crate::run::is_object_id(id) {
                return Err(git_error("unexpected fast-import marks"));
            }
            ids.insert(mark, id.to_owned());
        }
        marks
            .into_iter()
            .map(|mark| match mark {
                None => Ok(None),
                Some(m) => ids
                    .get(&m)
                    .cloned()
                    .map(Some)
                    .ok_or_else(|| git_error("fast-import did not export every blob")),
            })
            .collect()
    }

    /// `commit-tree TREE -p PARENT` with the fixed identity and `message`.
    pub(crate) fn commit(
        &self,
        tree: &str,
        parent: &str,
        identity: &CommitIdentity,
        message: &str,
    ) -> Result<String, PublishError> {
        let date = identity.git_date();
        let mut cmd = self.git("");
        cmd.envs([
            ("GIT_AUTHOR_NAME", identity.name()),
            ("GIT_AUTHOR_EMAIL", identity.email()),
            ("GIT_AUTHOR_DATE", &date),
            ("GIT_COMMITTER_NAME", identity.name()),
            ("GIT_COMMITTER_EMAIL", identity.email()),
            ("GIT_COMMITTER_DATE", &date),
        ])
        .args([
            "-c",
            "commit.gpgSign=false",
            "commit-tree",
            "-p",
            parent,
            tree,
        ]);
        object_id_line(&run_ok(
            &mut cmd,
            Some(message.as_bytes()),
            ID_CAP,
            "git commit-tree failed",
        )?)
    }

    /// The tree of a commit.
    pub(crate) fn tree_of(&self, commit: &str) -> Result<String, PublishError> {
        self.rev_parse(
            &format!("{commit}^{{tree}}"),
            "git rev-parse of a tree failed",
        )
    }

    /// The commit a ref of the mirror points at.
    pub(crate) fn resolve_ref(&self, name: &str) -> Result<String, PublishError> {
        self.rev_parse(
            &format!("{name}^{{commit}}"),
            "git rev-parse of a ref failed",
        )
    }

    /// The object id `git rev-parse --verify` gives for `spec`.
    fn rev_parse(&self, spec: &str, failure: &'static str) -> Result<String, PublishError> {
        let mut cmd = self.git("");
        cmd.args(["rev-parse", "--verify", "--end-of-options"])
            .arg(spec);
        object_id_line(&run_ok(&mut cmd, None, ID_CAP, failure)?)
    }
}

/// A scoped step's result (a panic in it becomes a git error).
/// Creates the owner lock under a temporary name, locks it, then renames it into place, so an
/// `owner.lock` that exists is always one that was locked (a sweep never sees it unlocked while
/// its owner lives).
fn take_owner_lock(dir: &Dir) -> std::io::Result<std::fs::File> {
    use cap_std::fs::{OpenOptions, OpenOptionsExt as _};
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).mode(0o600);
    let file = dir.open_with("owner.lock.new", &options)?.into_std();
    file.try_lock().map_err(|e| match e {
        std::fs::TryLockError::Error(e) => e,
        std::fs::TryLockError::WouldBlock => std::io::Error::from(std::io::ErrorKind::WouldBlock),
    })?;
    dir.rename("owner.lock.new", dir, OWNER_LOCK)?;
    Ok(file)
}

/// What [`sweep_abandoned_mirrors`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MirrorSweep {
    /// Abandoned mirror directories removed (their owner died; credential copies included).
    pub removed: usize,
    /// Mirror directories of live publications, left alone.
    pub live: usize,
}

/// Removes the private mirror directories (and the credential copies in them) that a
/// publication left behind when it was killed, from the temporary directory
/// (`std::env::temp_dir()`, i.e. `$TMPDIR` or `/tmp`). A directory is abandoned when its
/// `owner.lock` can be locked (its owner, which held that lock, is gone), or when it has no
/// `owner.lock` and was last modified over ten minutes ago. Every publication runs it before it
/// creates its own mirror, and `serve` at start-up.
///
/// # Errors
/// None: a directory that cannot be read or removed is skipped (it is not counted).
///
/// # Security
/// Only entries named `patch-candidate-publish-*` that are real directories (never a link) are
/// considered; removal does not follow links.
#[must_use]
pub fn sweep_abandoned_mirrors() -> MirrorSweep {
    sweep_abandoned_mirrors_in(&std::env::temp_dir(), UNLOCKED_GRACE)
}

/// [`sweep_abandoned_mirrors`] in `root`, with the grace given for unlocked directories.
pub(crate) fn sweep_abandoned_mirrors_in(
    root: &Path,
    unlocked_grace: std::time::Duration,
) -> MirrorSweep {
    use cap_std::fs::{OpenOptions, OpenOptionsExt as _};
    let mut sweep = MirrorSweep::default();
    // The temporary directory is the host's own: the one ambient open, as tempfile's.
    let Ok(dir) = Dir::open_ambient_dir(root, cap_std::ambient_authority()) else {
        return sweep;
    };
    let Ok(entries) = dir.entries() else {
        return sweep;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| n.starts_with(MIRROR_PREFIX)) else {
            continue;
        };
        let Ok(meta) = dir.symlink_metadata(name) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let mut options = OpenOptions::new();
        options.read(true).custom_flags(libc::O_NOFOLLOW);
        let lock = dir.open_with(format!("{name}/{OWNER_LOCK}"), &options);
        let abandoned = match lock {
            Ok(file) => match file.into_std().try_lock() {
                Ok(()) => true,
                Err(std::fs::TryLockError::WouldBlock) => {
                    sweep.live += 1;
                    false
                }
                Err(std::fs::TryLockError::Error(_)) => false,
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => meta
                .modified()
                .ok()
                .and_then(|m| m.into_std().elapsed().ok())
                .is_some_and(|age| age >= unlocked_grace),
            Err(_) => false,
        };
        if abandoned && remove_abandoned(&dir, name) {
            sweep.removed += 1;
        }
    }
    sweep
}

/// Removes an abandoned mirror directory. A killed publication's git children lead their own
/// process groups, so they outlive it by a moment and may still be writing objects into it: a
/// removal that meets an entry created meanwhile is tried again, a little later each time, for
/// about 3 s in all (on a loaded machine a child can take that long to see its parent gone).
fn remove_abandoned(dir: &Dir, name: &str) -> bool {
    const ATTEMPTS: u32 = 16;
    for attempt in 1..=ATTEMPTS {
        match dir.remove_dir_all(name) {
            Ok(()) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return attempt > 1,
            Err(_) if attempt < ATTEMPTS => {
                std::thread::sleep(std::time::Duration::from_millis(u64::from(attempt) * 25));
            }
            Err(_) => return false,
        }
    }
    false
}

fn joined<T>(r: std::thread::Result<Result<T, PublishError>>) -> Result<T, PublishError> {
    r.unwrap_or_else(|_| Err(git_error("a git step panicked")))
}

/// Reads a file this crate's git child wrote in the private directory, at most `cap` bytes.
fn read_private(dir: &Dir, name: &str, cap: u64) -> Result<Vec<u8>, PublishError> {
    use std::io::Read as _;
    let file = dir
        .open(name)
        .map_err(|_| git_error("cannot read git's output file"))?;
    let mut out = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|_| git_error("cannot read git's output file"))?;
    if out.len() as u64 > cap {
        return Err(git_error("git's output file is larger than expected"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn backdate(path: &Path, by: Duration) {
        let dir = std::fs::File::open(path).unwrap();
        dir.set_modified(SystemTime::now() - by).unwrap();
    }

    /// r_credential_copy_survives_sigkill: a mirror whose owner is gone (its lock free) is
    /// removed with its credential copy; a live mirror, an unlocked one still in its grace, a
    /// foreign name and a link are left alone.
    #[test]
    fn the_sweep_removes_only_mirrors_whose_owner_is_gone() {
        let root = tempfile::tempdir().unwrap();
        let dead = root.path().join(format!("{MIRROR_PREFIX}dead"));
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join(OWNER_LOCK), b"").unwrap();
        std::fs::write(dead.join("credential"), b"password=x\n").unwrap();

        let live_dir = root.path().join(format!("{MIRROR_PREFIX}live"));
        std::fs::create_dir(&live_dir).unwrap();
        let live = take_owner_lock(
            &Dir::open_ambient_dir(&live_dir, cap_std::ambient_authority()).unwrap(),
        )
        .unwrap();

        let fresh = root.path().join(format!("{MIRROR_PREFIX}fresh"));
        std::fs::create_dir(&fresh).unwrap();
        let old = root.path().join(format!("{MIRROR_PREFIX}old"));
        std::fs::create_dir(&old).unwrap();
        std::fs::write(old.join("credential"), b"password=x\n").unwrap();
        backdate(&old, Duration::from_secs(3600));

        let other = root.path().join("someone-else");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join(OWNER_LOCK), b"").unwrap();
        let link = root.path().join(format!("{MIRROR_PREFIX}link"));
        std::os::unix::fs::symlink(&other, &link).unwrap();

        let sweep = sweep_abandoned_mirrors_in(root.path(), Duration::from_secs(600));
        assert_eq!(
            sweep,
            MirrorSweep {
                removed: 2,
                live: 1
            }
        );
        assert!(!dead.exists());
        assert!(!old.exists());
        assert!(live_dir.join(OWNER_LOCK).exists());
        assert!(fresh.exists());
        assert!(other.join(OWNER_LOCK).exists());
        assert!(std::fs::symlink_metadata(&link).is_ok());

        // Once the owner is gone (its lock file closed), the next sweep takes it. A child that
        // another test thread forks holds a copy of the descriptor (and so the lock) until its
        // exec closes it: the sweep is retried for that moment, never longer than a second.
        drop(live);
        let mut sweep = sweep_abandoned_mirrors_in(root.path(), Duration::from_secs(600));
        for _ in 0..100 {
            if sweep.removed == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            sweep = sweep_abandoned_mirrors_in(root.path(), Duration::from_secs(600));
        }
        assert_eq!(
            sweep,
            MirrorSweep {
                removed: 1,
                live: 0
            }
        );
        assert!(!live_dir.exists());
    }

    #[test]
    fn a_mirror_holds_its_owner_lock_for_its_whole_life() {
        let mirror = Mirror::create().unwrap();
        let lock = std::fs::File::open(mirror.root().join(OWNER_LOCK)).unwrap();
        assert!(matches!(
            lock.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        assert!(!mirror.root().join("owner.lock.new").exists());
        let root = mirror.root().to_path_buf();
        drop(mirror);
        assert!(!root.exists());
    }
}
