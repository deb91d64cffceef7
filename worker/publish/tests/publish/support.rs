//! Real repositories for the publication tests: a user repository with a work tree, a bare
//! remote, a candidate against the user's commit, an independent expected tree (`git apply` of
//! the candidate's exported patch in a temporary clone), and a content hash of the user's
//! repository (work tree and `.git`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use finalizer::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile};
use publish::{BranchName, CommitIdentity, CredentialSource, PublishRequest, Remote};
use sha2::Digest as _;
use snapshot::testkit;

/// Runs git in `dir` with a clean configuration; stdout trimmed. Panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    testkit::git_text(dir, args).trim().to_owned()
}

/// Runs git in `dir` with a clean configuration, as [`git`] does; its output, whatever the exit.
pub fn git_output(dir: &Path, args: &[&str]) -> std::process::Output {
    testkit::git_command(dir).args(args).output().unwrap()
}

/// Writes `files` (path, content, executable) into `dir` and commits them; returns the commit.
pub fn commit_files(dir: &Path, files: &[(&str, &str, bool)], message: &str) -> String {
    testkit::write_files(dir, files.iter().map(|(p, c, x)| (*p, c.as_bytes(), *x)));
    testkit::commit(dir, message)
}

/// The user's baseline files.
pub const BASELINE_FILES: &[(&str, &str, bool)] = &[
    ("README.md", "# widgets\n", false),
    ("docs/keep.txt", "one\ntwo\nthree\n", false),
    ("bin/run.sh", "#!/bin/sh\necho run\n", true),
    ("bin/tool.sh", "#!/bin/sh\necho tool\n", true),
    ("old/gone.txt", "to be deleted\n", false),
    ("src/lib.rs", "pub fn answer() -> u32 {\n    41\n}\n", false),
];

/// Text that appears only in the candidate's agent-written fields.
pub const AGENT_MARKER: &str = "AGENT-WRITTEN-SUMMARY-7f3a";

/// A user repository, a bare remote whose `main` is the user's commit, and the candidate.
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub user: PathBuf,
    pub remote_dir: PathBuf,
    pub baseline: String,
    pub candidate: RepositoryPatchCandidate,
}

pub use finalizer::testkit::{create, delete, update};

pub fn fields(baseline: &str) -> CandidateFields {
    CandidateFields {
        baseline_commit_sha: baseline.to_owned(),
        summary: format!("{AGENT_MARKER} summary"),
        rationale: format!("{AGENT_MARKER} rationale"),
        required_validation_gates: vec![],
        required_security_gates: vec![],
        ..finalizer::testkit::fields()
    }
}

/// The candidate of every test: an update, an update of an executable, an empty-file create, a
/// nested create, a create whose content looks like a fast-import stream, a delete that empties
/// a directory.
pub fn standard_files() -> Vec<RepositoryPatchFile> {
    vec![
        update("docs/keep.txt", "one\ntwo\nthree\n", "one\n2\nthree\n"),
        update(
            "bin/run.sh",
            "#!/bin/sh\necho run\n",
            "#!/bin/sh\necho run faster\n",
        ),
        create("new/empty.txt", ""),
        create("new/deep/a b.txt", "spaced name\n"),
        create("-rf.txt", "blob\nmark :1\ndata 0\n\ndone\n"),
        delete("old/gone.txt", "to be deleted\n"),
    ]
}

impl Fixture {
    pub fn new() -> Self {
        Self::with_files(standard_files())
    }

    pub fn with_files(files: Vec<RepositoryPatchFile>) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user");
        std::fs::DirBuilder::new().create(&user).unwrap();
        git(&user, &["init", "-q", "-b", "main"]);
        let baseline = commit_files(&user, BASELINE_FILES, "baseline");
        // A dirty work tree: publication must neither read nor touch it.
        std::fs::write(user.join("README.md"), "# uncommitted edit\n").unwrap();
        std::fs::write(user.join("untracked.txt"), "untracked\n").unwrap();
        let remote_dir = tmp.path().join("remote.git");
        git(
            tmp.path(),
            &["init", "-q", "--bare", "-b", "main", "remote.git"],
        );
        git(
            &user,
            &["push", "-q", remote_dir.to_str().unwrap(), "main:main"],
        );
        let candidate = RepositoryPatchCandidate::new(fields(&baseline), files).unwrap();
        Self {
            tmp,
            user,
            remote_dir,
            baseline,
            candidate,
        }
    }

    pub fn remote(&self) -> Remote {
        Remote::parse(self.remote_dir.to_str().unwrap()).unwrap()
    }

    /// A clone of the repository at `source` in the fixture's folder `name`.
    pub fn clone_to(&self, source: &Path, name: &str) -> PathBuf {
        let clone = self.tmp.path().join(name);
        git(
            self.tmp.path(),
            &[
                "clone",
                "-q",
                source.to_str().unwrap(),
                clone.to_str().unwrap(),
            ],
        );
        clone
    }

    /// The tree `git apply --index` of the candidate's exported patch gives in a fresh clone.
    pub fn expected_tree(&self) -> String {
        let clone = self.clone_to(&self.user, &unique_name("apply"));
        git(&clone, &["checkout", "-q", &self.baseline]);
        let patch = clone.join("..").join(format!(
            "{}.patch",
            clone.file_name().unwrap().to_str().unwrap()
        ));
        std::fs::write(&patch, finalizer::git_patch(&self.candidate).unwrap()).unwrap();
        git(&clone, &["apply", "--index", patch.to_str().unwrap()]);
        git(&clone, &["write-tree"])
    }

    /// A commit on the remote's `main` made elsewhere (the base moves).
    pub fn move_base(&self, files: &[(&str, &str, bool)]) -> String {
        let other = self.clone_to(&self.remote_dir, &unique_name("other"));
        let tip = commit_files(&other, files, "base moves");
        git(&other, &["push", "-q", "origin", "main"]);
        tip
    }

    /// The remote's refs (name → id).
    pub fn remote_refs(&self) -> BTreeMap<String, String> {
        git(
            &self.remote_dir,
            &["for-each-ref", "--format=%(refname) %(objectname)"],
        )
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, id)| (n.to_owned(), id.to_owned()))
        .collect()
    }
}

pub fn identity() -> CommitIdentity {
    CommitIdentity::new(
        "Patch Candidate",
        "publish@example.invalid",
        1_700_000_000,
        60,
    )
    .unwrap()
}

pub fn branch(name: &str) -> BranchName {
    BranchName::parse(name).unwrap()
}

/// A request with the fixture's defaults (source = the user's repository, base `main`).
pub struct Request {
    pub remote: Remote,
    pub branch: BranchName,
    pub base: BranchName,
    pub identity: CommitIdentity,
    pub credential: CredentialSource,
}

impl Request {
    pub fn new(remote: Remote, branch_name: &str) -> Self {
        Self {
            remote,
            branch: branch(branch_name),
            base: branch("main"),
            identity: identity(),
            credential: CredentialSource::None,
        }
    }

    pub fn build<'a>(
        &'a self,
        fixture: &'a Fixture,
        rebase: Option<&'a dyn publish::MergedTreeGate>,
    ) -> PublishRequest<'a> {
        PublishRequest {
            candidate: &fixture.candidate,
            source: Some(&fixture.user),
            remote: &self.remote,
            branch: &self.branch,
            base: &self.base,
            identity: &self.identity,
            credential: &self.credential,
            rebase,
            extends: None,
        }
    }

    /// The code of the error `publish` refuses this request with.
    pub fn refused(
        &self,
        fixture: &Fixture,
        rebase: Option<&dyn publish::MergedTreeGate>,
    ) -> &'static str {
        publish::publish(&self.build(fixture, rebase))
            .unwrap_err()
            .code()
    }
}

/// SHA-256 over every entry under `root` (path, kind, mode, bytes or link target), sorted.
pub fn hash_tree(root: &Path) -> String {
    let mut entries = Vec::new();
    walk(root, root, &mut entries);
    entries.sort();
    let mut h = sha2::Sha256::new();
    for e in entries {
        h.update(&e);
        h.update([0]);
    }
    hex(&h.finalize())
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Vec<u8>>) {
    use std::os::unix::fs::MetadataExt as _;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut record = format!("{rel}\0{:o}\0{}\0", meta.mode(), meta.mtime_nsec()).into_bytes();
        if meta.file_type().is_symlink() {
            record.extend(
                std::fs::read_link(&path)
                    .unwrap()
                    .as_os_str()
                    .as_encoded_bytes(),
            );
        } else if meta.is_dir() {
            out.push(record);
            walk(root, &path, out);
            continue;
        } else {
            record.extend(std::fs::read(&path).unwrap());
        }
        out.push(record);
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Nanoseconds since the epoch.
fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// `prefix-<nanoseconds since the epoch>`.
fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", now_nanos())
}

/// A random-looking secret unique to this process and call.
pub fn secret(tag: &str) -> String {
    let mut h = sha2::Sha256::new();
    h.update(tag.as_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(now_nanos().to_le_bytes());
    format!("pw{}", &hex(&h.finalize())[..32])
}
