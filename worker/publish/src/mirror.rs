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
use std::process::Command;

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

/// A fresh private bare repository.
#[derive(Debug)]
pub(crate) struct Mirror {
    /// The 0700 directory holding the repository, the temporary index and the credential files.
    root: tempfile::TempDir,
    git_dir: PathBuf,
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
            .prefix("patch-candidate-publish-")
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
        Ok(Self { root, git_dir })
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
    pub(crate) fn git(&self, protocol: &str) -> Command {
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
        for record in listing.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let text = std::str::from_utf8(record)
                .map_err(|_| git_error("git ls-tree printed a non-text entry"))?;
            let (meta, path) = text
                .split_once('\t')
                .ok_or_else(|| git_error("git ls-tree printed an unexpected entry"))?;
            let mut parts = meta.split(' ');
            let (Some(mode), Some(kind)) = (parts.next(), parts.next()) else {
                return Err(git_error("git ls-tree printed an unexpected entry"));
            };
            found.insert(path.to_owned(), (mode.to_owned(), kind.to_owned()));
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
        Ok(modes)
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
        let mut cmd = self.git("");
        cmd.args(["rev-parse", "--verify", "--end-of-options"])
            .arg(format!("{commit}^{{tree}}"));
        object_id_line(&run_ok(
            &mut cmd,
            None,
            ID_CAP,
            "git rev-parse of a tree failed",
        )?)
    }

    /// The commit a ref of the mirror points at.
    pub(crate) fn resolve_ref(&self, name: &str) -> Result<String, PublishError> {
        let mut cmd = self.git("");
        cmd.args(["rev-parse", "--verify", "--end-of-options"])
            .arg(format!("{name}^{{commit}}"));
        object_id_line(&run_ok(
            &mut cmd,
            None,
            ID_CAP,
            "git rev-parse of a ref failed",
        )?)
    }
}

/// A scoped step's result (a panic in it becomes a git error).
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
