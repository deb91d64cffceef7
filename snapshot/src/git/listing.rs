//! A commit's tree listed without reading a single blob: `git ls-tree -r -l -z --full-tree`
//! gives every entry's mode, type, object id and size. For readers that stream the blobs
//! themselves (the gate's tree transfer) and need a content hash only for the few files they
//! compare, so nothing is read twice.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::process::git_error;
use super::{
    GIT_DEADLINE, READ_BUFFER_BYTES, git_command_with_path, is_ls_tree_mode, is_object_id,
    next_ls_tree_record, read_commit, split_ls_tree_record,
};
use crate::error::SnapshotError;

/// What a listed entry's object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedKind {
    /// A blob (a file or a symbolic link, told apart by the mode).
    Blob,
    /// A gitlink (submodule commit).
    Commit,
}

/// One entry of a [`TreeListing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    raw_path: Vec<u8>,
    mode: String,
    object_id: String,
    kind: ListedKind,
    size: Option<u64>,
}

impl ListedEntry {
    ls_tree_entry_accessors!();

    /// Blob or gitlink.
    #[must_use]
    pub fn kind(&self) -> ListedKind {
        self.kind
    }
}

/// The complete tree of a commit, listed from the object database (never the work tree), sorted
/// by name bytes.
#[derive(Debug, Clone)]
pub struct TreeListing {
    git_dir: PathBuf,
    commit: String,
    entries: Vec<ListedEntry>,
}

impl TreeListing {
    /// Lists the complete tree of `commit` in the repository at `repo` (a worktree root or a
    /// bare repository; discovery never walks above `repo`).
    ///
    /// # Errors
    /// The codes of [`super::GitSnapshot::load`]: `REPOSITORY_SNAPSHOT_COMMIT`,
    /// `REPOSITORY_SNAPSHOT_REPOSITORY`, `REPOSITORY_SNAPSHOT_GIT`.
    ///
    /// # Security
    /// Git runs with a cleared environment and reads only the object database.
    pub fn load(repo: &Path, commit: &str) -> Result<Self, SnapshotError> {
        let path_var = std::env::var_os("PATH");
        let path_var = path_var.as_deref();
        let listed = read_commit(repo, commit, path_var, GIT_DEADLINE, |deadline, git_dir| {
            let mut ls = deadline.spawn(
                git_command_with_path(path_var, Some(git_dir))
                    .args(["ls-tree", "-r", "-l", "-z", "--full-tree", commit])
                    .stdout(Stdio::piped()),
            )?;
            let out = ls.take_stdout()?;
            let entries = read_listing(out);
            if entries.is_err() {
                ls.kill();
            }
            let waited = ls.wait_success("ls-tree");
            let entries = entries?;
            waited?;
            Ok(entries)
        });
        let (git_dir, mut entries) = listed?;
        entries.sort_unstable_by(|a, b| a.raw_path.cmp(&b.raw_path));
        if entries
            .windows(2)
            .any(|w| matches!(w, [a, b] if a.raw_path == b.raw_path))
        {
            return Err(git_error("tree lists one path twice"));
        }
        Ok(Self {
            git_dir,
            commit: commit.to_owned(),
            entries,
        })
    }

    /// The absolute git directory the tree was read from.
    #[must_use]
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }

    /// The commit (40 lowercase hex digits).
    #[must_use]
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// Every entry, sorted by name bytes.
    #[must_use]
    pub fn entries(&self) -> &[ListedEntry] {
        &self.entries
    }
}

fn read_listing(out: std::process::ChildStdout) -> Result<Vec<ListedEntry>, SnapshotError> {
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, out);
    let mut entries = Vec::new();
    let mut record = Vec::new();
    while next_ls_tree_record(&mut reader, &mut record, "reading ls-tree failed")? {
        entries.push(parse_long_record(&record)?);
    }
    Ok(entries)
}

/// Parses one `ls-tree -l -z` record: `<mode> SP <type> SP <object> SP+ <size> TAB <path>`
/// (the size is right-aligned with spaces, `-` for a gitlink).
fn parse_long_record(record: &[u8]) -> Result<ListedEntry, SnapshotError> {
    let malformed = || git_error("malformed ls-tree record");
    let (meta, path) = split_ls_tree_record(record).ok_or_else(malformed)?;
    let mut fields = meta.split(' ').filter(|f| !f.is_empty());
    let (Some(mode), Some(kind), Some(oid), Some(size), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(malformed());
    };
    if !is_ls_tree_mode(mode) {
        return Err(malformed());
    }
    if !is_object_id(oid) || path.is_empty() {
        return Err(malformed());
    }
    let (kind, size) = match (kind, size) {
        ("blob", size) => {
            if size.is_empty() || size.len() > 20 || !size.bytes().all(|b| b.is_ascii_digit()) {
                return Err(malformed());
            }
            (
                ListedKind::Blob,
                Some(size.parse::<u64>().map_err(|_| malformed())?),
            )
        }
        ("commit", "-") => (ListedKind::Commit, None),
        _ => return Err(malformed()),
    };
    Ok(ListedEntry {
        raw_path: path.to_vec(),
        mode: mode.to_owned(),
        object_id: oid.to_owned(),
        kind,
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_records_parse_with_padded_sizes() {
        let oid = "a".repeat(40);
        let rec = format!("100644 blob {oid}     123\tdir/file.txt");
        let e = parse_long_record(rec.as_bytes()).unwrap();
        assert_eq!(e.size(), Some(123));
        assert_eq!(e.path(), Some("dir/file.txt"));
        assert_eq!(e.kind(), ListedKind::Blob);
        let rec = format!("160000 commit {oid}       -\tsub");
        let e = parse_long_record(rec.as_bytes()).unwrap();
        assert_eq!((e.kind(), e.size()), (ListedKind::Commit, None));
    }

    #[test]
    fn malformed_records_are_refused() {
        let oid = "a".repeat(40);
        for rec in [
            format!("100644 blob {oid} -\tf"),
            format!("100644 blob {oid} 12x\tf"),
            format!("100644 blob {oid}\tf"),
            format!("100644 tree {oid} -\tf"),
            format!("100644 blob {oid} 1 2\tf"),
            format!("100644 blob {oid} 1\t"),
            format!("10064 blob {oid} 1\tf"),
            format!("100644 blob {oid} 99999999999999999999999\tf"),
            "100644 blob zz 1\tf".to_owned(),
        ] {
            assert_eq!(
                parse_long_record(rec.as_bytes()).unwrap_err().code(),
                "REPOSITORY_SNAPSHOT_GIT",
                "{rec}"
            );
        }
    }
}
